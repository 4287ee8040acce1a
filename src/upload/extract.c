/*
 * extract.c - `--extract`: an archive's members become objects, streamed
 * from the archive straight into part buffers (nothing touches local
 * disk). The archive is one sequential stream, so the main thread reads
 * it, a part at a time and only while the memory budget has room; the
 * workers send what it read. A member's multipart upload starts while its
 * first parts are being read.
 *
 * A single top-level directory is stepped into (SPEC "Locations"). A
 * stream cannot be listed before it is read, so the first member decides:
 * "run1/..." means the top directory is "run1/"; a later member outside it
 * is reported as not copied (use --no-strip).
 *
 * A hard link member (GNU tar stores a file's second name as a link to
 * the first, with no data) is copied as its target's bytes: the stream
 * has passed them by then, so the archive is read again once its end is
 * reached and each link's object is made from its target's data. A link
 * whose target is not a file in the archive fails the copy (the archive
 * is then never deleted).
 *
 * A name stored twice (tar -r appends) is the later copy's, as after
 * tar x: the earlier object is superseded (not counted, not verified),
 * and the later member is copied in the next pass, once every superseded
 * object is finished, so that it is the last write to its key.
 */
#include "upload_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckpt/orbax.h"
#include "ckpt/text.h"
#include "ckpt/util.h"
#include "../torchfmt/strmap.h"

struct hlink {
    char *target;               /* owned: the member whose bytes it has */
    char *path, *rel;           /* owned: the link member, as new_member */
    int served, found;          /* this pass: copied; target seen */
};

struct dup {
    uint64_t nth;               /* the member's place in the archive */
    char *rel;                  /* owned */
};

struct extract {
    struct ckpt_archive *a;     /* owned */
    int pass;                   /* 0: members; then: hard links' targets
                                   and later copies of a name */
    uint64_t nth;               /* members read in this pass */
    struct hlink *links;        /* owned: hard links not yet copied */
    size_t nlinks;
    struct strmap seen;         /* pass 0: rel -> 2 * objs index + 1, or
                                   2 * dups index + 2 */
    char **keys;                /* owned: seen's keys */
    size_t nkeys;
    struct dup *dups;           /* owned: later copies for pass 1 */
    size_t ndups;
    int at_end;                 /* this pass read to its end */
    int resend;                 /* new_member: sent whatever DEST held
                                   when listed */
    int serving;                /* new_member: a hard link's object, made
                                   of its target's bytes */
    char sig[96];               /* the archive's version, for srcsig */
    char *strip;                /* owned: "top/", "", or NULL undecided */
    struct obj *cur;            /* big member being read */
    int cur_part;               /* next part of cur to read */
    struct obj *small;          /* small member waiting for a buffer */
};

static int extract_open(struct group *g, struct ckpt_err *err)
{
    struct extract *x = ckpt_xcalloc(1, sizeof(*x));
    if (ckpt_archive_open(&x->a, g->sst, g->skey, err) != 0) {
        free(x);
        return -1;
    }
    if (g->has_ver) {
        /* Rewritten in place with the mtime put back: another version. */
        char v[80];
        up_srcver_sig(&g->ver, v, sizeof(v));
        snprintf(x->sig, sizeof(x->sig), "a%llu:%s",
                 (unsigned long long)g->ver.size, v);
    } else if (g->ssb.etag[0])
        snprintf(x->sig, sizeof(x->sig), "a%llu:e%s",
                 (unsigned long long)g->ssb.size, g->ssb.etag);
    else
        snprintf(x->sig, sizeof(x->sig), "a%llu:m%lld",
                 (unsigned long long)g->ssb.size, (long long)g->ssb.mtime);
    g->x = x;
    return 0;
}

void up_extract_close(struct group *g)
{
    struct extract *x = g->x;
    if (!x)
        return;
    ckpt_archive_close(x->a);
    for (size_t i = 0; i < x->nlinks; i++) {
        free(x->links[i].target);
        free(x->links[i].path);
        free(x->links[i].rel);
    }
    free(x->links);
    for (size_t i = 0; i < x->ndups; i++)
        free(x->dups[i].rel);
    free(x->dups);
    tf_strmap_release(&x->seen);
    for (size_t i = 0; i < x->nkeys; i++)
        free(x->keys[i]);
    free(x->keys);
    free(x->strip);
    free(x);
    g->x = NULL;
}

/* The archive cannot be read on: what was not read did not arrive. */
static int archive_failed(struct ckpt_upload *u, struct group *g,
                          const struct ckpt_err *err)
{
    struct extract *x = g->x;
    if (x && x->cur)
        up_obj_abandon(u, x->cur, err);
    if (x && x->small)
        up_obj_fail(u, x->small, err);
    up_emit(u, CKPT_UP_FAILED, NULL, g->sdisp, err->msg);
    g->plan_failed = 1;
    g->extracted = 1;
    up_extract_close(g);
    return -1;
}

/* Read exactly n member bytes into buf. */
static int read_member(struct extract *x, struct obj *o, char *buf,
                       size_t n, struct ckpt_err *err)
{
    size_t done = 0;
    while (done < n) {
        size_t got = 0;
        if (ckpt_archive_read(x->a, buf + done, n - done, &got, err) != 0)
            return -1;
        if (got == 0)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: member ends before "
                                "the %llu bytes its header declares",
                                o->sdisp, (unsigned long long)o->size);
        done += got;
    }
    return 0;
}

/* After a member's declared bytes, nothing may follow. */
static int member_end(struct extract *x, struct obj *o, struct ckpt_err *err)
{
    char c;
    size_t got = 0;
    if (ckpt_archive_read(x->a, &c, 1, &got, err) != 0)
        return -1;
    if (got)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: member is longer than "
                            "its header declares", o->sdisp);
    return 0;
}

static int produce_small(struct ckpt_upload *u, struct group *g)
{
    struct extract *x = g->x;
    struct obj *o = x->small;
    struct ckpt_err err = CKPT_ERR_INIT;
    size_t n = (size_t)o->size;
    char *buf = up_buf_take(u, n ? n : 1, u->inflight == 0);
    if (!buf)
        return 0;
    struct unit *un = up_unit_new(u, U_PUT, o);
    un->buf = buf;
    un->cap = n ? n : 1;
    un->have_data = 1;
    x->small = NULL;
    if (read_member(x, o, buf, n, &err) != 0 ||
        member_end(x, o, &err) != 0) {
        up_unit_free(u, un);
        x->small = o;
        return archive_failed(u, g, &err);
    }
    o->put = un;
    up_obj_route(u, o);
    return 1;
}

static int produce_part(struct ckpt_upload *u, struct group *g)
{
    struct extract *x = g->x;
    struct obj *o = x->cur;
    struct ckpt_err err = CKPT_ERR_INIT;
    uint64_t off = (uint64_t)x->cur_part * o->part_size;
    size_t len = (size_t)(o->size - off < o->part_size ? o->size - off
                                                       : o->part_size);
    char *buf = up_buf_take(u, len, u->inflight == 0);
    if (!buf)
        return 0;
    struct unit *un = up_unit_new(u, U_PART, o);
    un->buf = buf;
    un->cap = len;
    un->have_data = 1;
    un->part = ++x->cur_part;
    un->off = off;
    un->len = len;
    int rc = read_member(x, o, buf, len, &err);
    if (rc == 0 && x->cur_part == o->nparts)
        rc = member_end(x, o, &err);
    if (rc != 0) {
        up_unit_free(u, un);
        return archive_failed(u, g, &err);
    }
    if (x->cur_part == o->nparts)
        x->cur = NULL;
    if (o->st == O_FAILED || o->st == O_SKIPPED) {
        up_unit_free(u, un);  /* read past: the stream must move on */
        return 1;
    }
    if (o->ready_tail)
        o->ready_tail->next = un;
    else
        o->ready = un;
    o->ready_tail = un;
    return 1;
}

/* A symlink member named as OLMo's `latest` links (upload of a tree
 * drops those with the run, plan.c). */
static int olmo_latest(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    return !strcmp(b, "latest") || !strcmp(b, "latest-unsharded");
}

/* The member's path below the top directory, or NULL when outside it. */
static const char *strip_path(struct ckpt_upload *u, struct extract *x,
                              const struct ckpt_archive_entry *e)
{
    if (!x->strip) {
        const char *slash = strchr(e->path, '/');
        if (!u->cfg.strip || (!slash && e->type != CKPT_ENTRY_DIR))
            x->strip = ckpt_xstrdup("");
        else if (slash)
            x->strip = ckpt_xstrndup(e->path, (size_t)(slash - e->path) + 1);
        else
            x->strip = ckpt_xasprintf("%s/", e->path);
    }
    size_t n = strlen(x->strip);
    if (strncmp(e->path, x->strip, n))
        return NULL;
    return e->path + n;
}

/* no_replace, a member big enough for a multipart upload, at DEST with
 * its size: compared before anything is sent (the stream cannot be
 * read twice, so it is read through here, hashed as DEST's answer needs
 * it: the whole MD5, S3's composite ETag for the part sizes its "-N"
 * implies, CRC32C where DEST's ETag is opaque and it states one; a local
 * DEST compared byte for byte). Equal: skipped; else a conflict (DEST's
 * bytes are never replaced). 0, or -1 when the archive could not be
 * read (archive_failed). */
struct mcmp {
    struct md5c whole;
    struct up_cand c[4];
    int nc;
    uint32_t crc;
    int want_crc, local, differs;
    struct ckpt_obj_meta meta;
};

static void mcmp_start(struct obj *o, struct mcmp *m)
{
    const char *detag = o->dest->etag;
    int multi = 0, md5form = ckpt_etag_is_md5(detag, &multi);
    uint64_t parts[4];
    struct ckpt_stat sb;
    struct ckpt_err e2;
    memset(m, 0, sizeof(*m));
    m->local = ckpt_storage_is_local(o->g->dst);
    up_md5c_init(&m->whole);
    if (!m->local && md5form && multi)
        m->nc = up_cand_guesses(o->size, o->part_size,
                                (int)strtol(strchr(detag, '-') + 1, NULL,
                                            10), 0, parts);
    for (int i = 0; i < m->nc; i++)
        up_cand_init(&m->c[i], parts[i]);
    if (!m->local && !md5form &&
        ckpt_storage_head(o->g->dst, o->dkey, &sb, &m->meta, &e2) == 0 &&
        sb.size == o->size && !strcmp(sb.etag, detag))
        m->want_crc = m->meta.has_crc32c;
}

static void mcmp_feed(struct obj *o, struct mcmp *m, const char *p,
                      size_t n, uint64_t off, char *dbuf)
{
    up_md5c_update(&m->whole, p, n);
    for (int i = 0; i < m->nc; i++)
        up_cand_feed(&m->c[i], p, n);
    if (m->want_crc)
        m->crc = ckpt_crc32c(m->crc, p, n);
    size_t got = 0;
    struct ckpt_err e2;
    if (m->local && !m->differs &&
        (ckpt_storage_read(o->g->dst, o->dkey, off, dbuf, n, &got,
                           &e2) != 0 || got != n || memcmp(dbuf, p, n)))
        m->differs = 1;
}

static int mcmp_same(struct obj *o, struct mcmp *m)
{
    unsigned char d[16];
    char hex[33];
    int same = 0, multi;
    up_md5c_final(&m->whole, d);
    ckpt_hex_encode(d, 16, hex);
    for (int i = 0; i < m->nc; i++) {
        up_cand_final(&m->c[i]);
        same |= !strcasecmp(m->c[i].etag, o->dest->etag);
    }
    if (m->local)
        return !m->differs;
    if (ckpt_etag_is_md5(o->dest->etag, &multi) && !multi)
        same |= !strcasecmp(o->dest->etag, hex);
    if (!ckpt_etag_is_md5(o->dest->etag, &multi) && m->meta.dest_md5[0])
        same |= !strcasecmp(m->meta.dest_md5, hex);
    if (m->want_crc)
        same |= m->crc == m->meta.dest_crc32c;
    return same;
}

static int compare_member(struct ckpt_upload *u, struct group *g,
                          struct obj *o)
{
    struct extract *x = g->x;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct mcmp m;
    size_t cap = o->size < CHECK_CHUNK ? (size_t)o->size + 1 : CHECK_CHUNK;
    char *buf = ckpt_xmalloc(cap), *dbuf = ckpt_xmalloc(cap);
    int rc = 0;
    mcmp_start(o, &m);
    for (uint64_t off = 0; rc == 0 && off < o->size;) {
        size_t n = o->size - off < cap ? (size_t)(o->size - off) : cap;
        rc = read_member(x, o, buf, n, &err);
        if (rc == 0)
            mcmp_feed(o, &m, buf, n, off, dbuf);
        off += n;
    }
    if (rc == 0)
        rc = member_end(x, o, &err);
    int same = mcmp_same(o, &m);
    free(buf);
    free(dbuf);
    if (rc != 0) {
        up_obj_fail(u, o, &err);
        return archive_failed(u, g, &err);
    }
    if (same)
        up_obj_skip(u, o, "same size and checksum");
    else
        up_obj_conflict(u, o, "with different bytes");
    return 0;
}

/* -n with no_replace: a small member at DEST with its size is read and
 * compared as the real run compares it before its PUT, so that the plan
 * says "conflict" where the run will. 0: route it; 1: failed (a
 * conflict, or the member could not be read). */
static int dry_conflict(struct ckpt_upload *u, struct extract *x,
                        struct obj *o)
{
    if (!u->cfg.no_replace || o->big || !o->dest ||
        o->dest->size != o->size)
        return 0;
    struct ckpt_err err = CKPT_ERR_INIT;
    size_t n = (size_t)o->size;
    char *buf = ckpt_xmalloc(n ? n : 1);
    int rc = read_member(x, o, buf, n, &err);
    if (rc == 0) {
        unsigned char d[16];
        char hex[33];
        up_md5_buf(buf, n, d);
        ckpt_hex_encode(d, 16, hex);
        if (!up_member_same(o, hex))
            up_obj_conflict(u, o, "with different bytes");
        else
            rc = -2;
    } else {
        up_obj_fail(u, o, &err);
    }
    free(buf);
    return rc == -2 ? 0 : 1;
}

static void new_member(struct ckpt_upload *u, struct group *g,
                       const struct ckpt_archive_entry *e, const char *rel);

/* Pass 0: a hard link member waits for the next pass (a link to a link
 * waits for the first link's target). */
static void add_link(struct extract *x, const struct ckpt_archive_entry *e,
                     const char *rel)
{
    const char *target = e->hardlink;
    for (size_t i = 0; i < x->nlinks; i++)
        if (!strcmp(x->links[i].path, target))
            target = x->links[i].target;
    x->links = ckpt_xreallocarray(x->links, x->nlinks + 1,
                                  sizeof(*x->links));
    struct hlink *l = &x->links[x->nlinks++];
    memset(l, 0, sizeof(*l));
    l->target = ckpt_xstrdup(target);
    l->path = ckpt_xstrdup(e->path);
    l->rel = ckpt_xstrdup(rel);
}

/* Later passes: a file member that is the target of a waiting link
 * becomes that link's object (one link per target and pass: its bytes
 * are read once). */
static void serve_link(struct ckpt_upload *u, struct group *g,
                       const struct ckpt_archive_entry *e)
{
    struct extract *x = g->x;
    struct hlink *l = NULL;
    for (size_t i = 0; i < x->nlinks; i++)
        if (!strcmp(x->links[i].target, e->path)) {
            x->links[i].found = 1;
            if (!l && !x->links[i].served)
                l = &x->links[i];
        }
    if (!l)
        return;
    l->served = 1;
    struct ckpt_archive_entry le = *e;
    le.path = l->path;
    le.hardlink = NULL;
    x->serving = 1;
    if (up_pick(g, l->path, l->rel, e->size))
        new_member(u, g, &le, l->rel);
    x->serving = 0;
}

/* Pass 0: a member whose name was read before. 1 when it waits for the
 * next pass (the earlier copy superseded), 0 when it is the first. */
static int later_copy(struct ckpt_upload *u, struct extract *x,
                      const char *rel)
{
    uint64_t v;
    if (!tf_strmap_get(&x->seen, rel, strlen(rel), &v))
        return 0;
    if (v & 1) {
        up_obj_supersede(u, u->objs[v / 2]);
        x->dups = ckpt_xreallocarray(x->dups, x->ndups + 1,
                                     sizeof(*x->dups));
        x->dups[x->ndups].rel = ckpt_xstrdup(rel);
        v = 2 * x->ndups++ + 2;
        if (tf_strmap_put(&x->seen, rel, strlen(rel), v) != 0)
            abort();  /* (rel equals the key there: that one is kept) */
    }
    x->dups[v / 2 - 1].nth = x->nth;
    return 1;
}

/* Pass 0: remember which object holds rel. */
static void first_copy(struct ckpt_upload *u, struct extract *x,
                       const char *rel, size_t before)
{
    if (u->nobjs == before)
        return;  /* left out, or dropped: no object */
    x->keys = ckpt_xreallocarray(x->keys, x->nkeys + 1, sizeof(*x->keys));
    x->keys[x->nkeys] = ckpt_xstrdup(rel);
    if (tf_strmap_put(&x->seen, x->keys[x->nkeys++], strlen(rel),
                      2 * (uint64_t)(u->nobjs - 1) + 1) != 0)
        abort();
}

/* Pass 1: the later copy of a name, at its place in the archive. */
static int serve_dup(struct ckpt_upload *u, struct group *g,
                     const struct ckpt_archive_entry *e)
{
    struct extract *x = g->x;
    for (size_t i = 0; i < x->ndups; i++)
        if (x->dups[i].nth == x->nth) {
            /* DEST's listing is from before this run sent the earlier
             * copy (a rerun sends it again): never skipped by it. */
            x->resend = 1;
            if (up_pick(g, e->path, x->dups[i].rel, e->size))
                new_member(u, g, e, x->dups[i].rel);
            x->resend = 0;
            return 1;
        }
    return 0;
}

/* Every superseded object of g finished (before its name is written
 * again). */
static int superseded_done(const struct ckpt_upload *u,
                           const struct group *g)
{
    for (size_t i = 0; i < u->nobjs; i++) {
        const struct obj *o = u->objs[i];
        if (o->g == g && o->superseded && o->st != O_DONE &&
            o->st != O_SKIPPED && o->st != O_FAILED)
            return 0;
    }
    return 1;
}

/* End of a pass: drop the links copied; a link whose target never came
 * fails the copy. 1 when links wait for another pass. */
static int links_left(struct ckpt_upload *u, struct group *g)
{
    struct extract *x = g->x;
    size_t w = 0;
    for (size_t i = 0; i < x->nlinks; i++) {
        struct hlink *l = &x->links[i];
        if (x->pass > 0 && !l->served && !l->found) {
            char *disp = ckpt_xasprintf("%s/%s", g->sdisp, l->path);
            char *why = ckpt_xasprintf("hard link to '%s', which is not a "
                                       "file in the archive; not copied",
                                       l->target);
            up_emit(u, CKPT_UP_FAILED, NULL, disp, why);
            g->plan_failed = 1;
            free(why);
            free(disp);
        }
        if (x->pass > 0 && (l->served || !l->found)) {
            free(l->target);
            free(l->path);
            free(l->rel);
            continue;
        }
        l->served = l->found = 0;
        x->links[w++] = *l;
    }
    x->nlinks = w;
    return w > 0;
}

/* A member whose spool hashed it goes to a local DEST as its spooled file
 * (storage's put_file: a hard link where the file system allows), not
 * read or hashed again. Only where DEST has nothing under its name (else
 * it is compared while it is sent, as any member), and never for a hard
 * link member: its target's file went to DEST already, and two DEST
 * files are two files, as a copy makes them. 1 when routed so. */
static int spooled_member(struct ckpt_upload *u, struct group *g,
                          struct obj *o)
{
    struct ckpt_spooled sp;
    if (o->dest || g->x->serving || !ckpt_storage_is_local(g->dst) ||
        !ckpt_archive_spooled(g->x->a, &sp))
        return 0;
    if (sp.ver.size != o->size) {
        free(sp.path);
        return 0;
    }
    struct unit *un = up_unit_new(u, U_PUT, o);
    un->spooled = ckpt_xmalloc(sizeof(sp));
    *un->spooled = sp;
    un->have_data = 1;
    o->big = 0;     /* one unit, whatever its size */
    o->put = un;
    up_obj_route(u, o);
    return 1;
}

static void new_member(struct ckpt_upload *u, struct group *g,
                       const struct ckpt_archive_entry *e, const char *rel)
{
    struct extract *x = g->x;
    struct obj *o = up_obj_new(g, e->path, rel, e->size, 0, x->sig);
    o->from_archive = 1;
    o->sdisp = ckpt_xasprintf("%s/%s", g->sdisp, e->path);
    if (x->resend)
        o->dest = NULL;
    if (up_claim_path(u, o, u->nobjs - 1)) {
        /* Another SRC of this upload goes there: a stream is read once,
         * so the member cannot wait for it and be compared after. */
        o->deferred = 0;
        up_obj_conflict(u, o, "and an archive member cannot wait to be "
                        "compared");
        return;
    }
    if (u->cfg.no_replace && o->big && o->dest &&
        o->dest->size == o->size) {
        compare_member(u, g, o);
        return;
    }
    if (u->cfg.dry_run) {
        if (dry_conflict(u, x, o) == 0)
            up_obj_route(u, o);
        return;
    }
    if (spooled_member(u, g, o))
        return;
    if (!o->big) {
        x->small = o;
        return;
    }
    /* Routed now, so its upload starts while its parts are read. */
    up_obj_route(u, o);
    if (o->st != O_SKIPPED && o->st != O_FAILED) {
        x->cur = o;
        x->cur_part = 0;
    }
}

static void finished(struct ckpt_upload *u, struct group *g)
{
    size_t n;
    struct jr_pending **p = up_journal_unclaimed(g->jr, &n);
    for (size_t i = 0; i < n; i++) {
        p[i]->claimed = 1;
        up_queue_abort(u, g, g->dst, p[i]->dkey, p[i]->upload_id);
    }
    g->extracted = 1;
    up_extract_close(g);
}

int up_extract_step(struct ckpt_upload *u, struct group *g)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (g->extracted)
        return -1;
    if (!g->x && extract_open(g, &err) != 0)
        return archive_failed(u, g, &err);
    struct extract *x = g->x;
    if (x->small)
        return produce_small(u, g);
    if (x->cur)
        return produce_part(u, g);
    struct ckpt_archive_entry e;
    int rc = x->at_end ? 0 : ckpt_archive_next(x->a, &e, &err);
    if (rc < 0)
        return archive_failed(u, g, &err);
    if (rc == 0 && !x->at_end && x->pass == 0 && ckpt_archive_damage(x->a)) {
        /* Not read to its proper end (a checksum that did not match,
         * bytes after the stream, no end-of-archive marker...): what was
         * copied may be wrong or short, so the copy fails and the archive
         * is never deleted. */
        up_emit(u, CKPT_UP_FAILED, NULL, g->sdisp, ckpt_archive_damage(x->a));
        g->plan_failed = 1;
    }
    x->at_end = rc == 0;
    if (rc == 0 && x->pass == 0 && x->ndups && !u->cfg.dry_run &&
        !superseded_done(u, g))
        return 0;  /* (step is called again as units come back) */
    if (rc == 0 && x->pass == 1) {
        for (size_t i = 0; i < x->ndups; i++)
            free(x->dups[i].rel);
        x->ndups = 0;
    }
    if (rc == 0 && (links_left(u, g) || x->ndups)) {
        /* Read it again for the hard links' targets and later copies. */
        ckpt_archive_close(x->a);
        x->a = NULL;
        x->pass++;
        x->nth = 0;
        x->at_end = 0;
        if (ckpt_archive_open(&x->a, g->sst, g->skey, &err) != 0)
            return archive_failed(u, g, &err);
        return 1;
    }
    if (rc == 0) {
        finished(u, g);
        return -1;
    }
    x->nth++;
    if (x->pass > 0) {
        if (e.type == CKPT_ENTRY_FILE && !(x->pass == 1 &&
                                           serve_dup(u, g, &e)))
            serve_link(u, g, &e);
        return 1;
    }
    char *disp = ckpt_xasprintf("%s/%s", g->sdisp, e.path);
    const char *rel = strip_path(u, x, &e);
    if (e.type == CKPT_ENTRY_DIR) {
        /* Directories exist only through their files. */
    } else if (e.type == CKPT_ENTRY_LINK && !e.hardlink &&
               olmo_latest(e.path)) {
        /* OLMo's `latest` names a checkpoint of the run: goes with it. */
    } else if (e.type != CKPT_ENTRY_FILE && !e.hardlink) {
        /* Not copied, so the archive is never deleted (delete_sources). */
        g->nuncopied++;
        up_emit(u, CKPT_UP_WARNING, NULL, disp, e.type == CKPT_ENTRY_LINK
                ? CKPT_UP_WHY_ARCHIVE_LINK : CKPT_UP_WHY_SPECIAL);
    } else if (!rel || !*rel) {
        ckpt_err_set(&err, CKPT_EUNSAFE, "outside '%s', the archive's top "
                     "directory that was stepped into (use --no-strip)",
                     x->strip);
        up_emit(u, CKPT_UP_FAILED, NULL, disp, err.msg);
        g->plan_failed = 1;
    } else if (e.hardlink) {
        add_link(x, &e, rel);
    } else if (!later_copy(u, x, rel)) {
        size_t before = u->nobjs;
        if (up_pick(g, e.path, rel, e.size))
            new_member(u, g, &e, rel);
        first_copy(u, x, rel, before);
    }
    free(disp);
    return 1;
}
