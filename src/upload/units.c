/*
 * units.c - the work a pool worker does for one unit: read source bytes
 * into the unit's buffer, hash them, send them, and check what DEST says
 * it stored. Workers read their unit and the object's fixed fields; they
 * write only the unit's results.
 */
#include "upload_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckpt/gate.h"
#include "ckpt/interrupt.h"
#include "ckpt/orbax.h"
#include "ckpt/text.h"
#include "ckpt/util.h"

static int is_hex32(const char *s)
{
    unsigned char d[16];
    return up_hex_md5_parse(s, d) == 0;
}

static int local_unchanged(struct obj *o, struct ckpt_err *err);

/* --bwlimit: wait for n bytes' turn; -1 (err) when interrupted first. */
static int bw_take(struct ckpt_upload *u, uint64_t n, struct ckpt_err *err)
{
    if (ckpt_rate_take(u->bw, n) != 0)
        return ckpt_err_set(err, CKPT_EIO, "interrupted");
    return 0;
}

/* Read exactly len bytes at off of the version planned; a short read
 * means the source shrank. */
/* len bytes at off of the source, or an error if it is shorter now. */
static int read_full(struct obj *o, uint64_t off, void *buf, size_t len,
                     struct ckpt_err *err)
{
    size_t got = 0;
    if (ckpt_storage_read(o->g->sst, o->skey, off, buf, len, &got,
                          err) != 0)
        return -1;
    if (got != len)
        return ckpt_err_set(err, CKPT_EIO, "%s: changed while being read "
                            "(now shorter than %llu bytes)", o->sdisp,
                            (unsigned long long)o->size);
    return 0;
}

static int read_exact(struct obj *o, uint64_t off, char *buf, size_t len,
                      struct ckpt_err *err)
{
    if (local_unchanged(o, err) != 0 || read_full(o, off, buf, len, err) != 0)
        return -1;
    return local_unchanged(o, err);
}

static int version_same(const char *path, const char *disp,
                        const struct srcver *was, struct ckpt_err *err)
{
    struct srcver now;
    if (up_srcver_get(path, &now, err) != 0)
        return -1;
    const char *what = up_srcver_diff(was, &now);
    if (what)
        return ckpt_err_set(err, CKPT_EIO, "%s: changed during upload (%s "
                            "differs)", disp, what);
    return 0;
}

/* A local source must be the version planned, before and after each
 * read: then every byte sent comes from that one version. */
static int local_unchanged(struct obj *o, struct ckpt_err *err)
{
    return o->has_ver ? version_same(o->skey, o->sdisp, &o->ver, err) : 0;
}

/* The source must still be what was listed before we commit to it (an
 * archive member: the local archive it is read from). */
static int source_unchanged(struct obj *o, struct ckpt_err *err)
{
    struct ckpt_stat sb;
    struct group *g = o->g;
    if (o->from_archive)
        return g->has_ver ? version_same(g->skey, g->sdisp, &g->ver, err)
                          : 0;
    if (o->has_ver)
        return local_unchanged(o, err);
    if (ckpt_storage_stat(o->g->sst, o->skey, &sb, err) != 0)
        return -1;
    int same = sb.type == CKPT_ENTRY_FILE && sb.size == o->size;
    if (ckpt_storage_is_local(o->g->sst))
        same = same && sb.mtime == o->mtime;
    else if (sb.etag[0] && o->srcsig[0] == 'e')
        same = same && !strcmp(sb.etag, o->srcsig + 1);
    if (!same)
        return ckpt_err_set(err, CKPT_EIO, "%s: changed while being "
                            "copied (size or modification time differs)",
                            o->sdisp);
    return 0;
}

/* ---- CHECK: is DEST's object the same as the source? ---- */

/* Hash the source once: whole MD5, the composite ETag for each guess
 * and, when crc is not NULL, its CRC32C. */
static int hash_source(struct unit *un, struct up_cand *c, int nc,
                       unsigned char whole[16], uint32_t *crc)
{
    struct obj *o = un->o;
    struct md5c w;
    up_md5c_init(&w);
    if (crc)
        *crc = 0;
    for (int i = 0; i < nc; i++)
        up_cand_init(&c[i], c[i].part);
    int rc = 0;
    for (uint64_t off = 0; off < o->size && rc == 0;) {
        size_t n = o->size - off < un->cap ? (size_t)(o->size - off)
                                           : un->cap;
        rc = read_exact(o, off, un->buf, n, &un->err);
        if (rc == 0) {
            up_md5c_update(&w, un->buf, n);
            for (int i = 0; i < nc; i++)
                up_cand_feed(&c[i], un->buf, n);
            if (crc)
                *crc = ckpt_crc32c(*crc, un->buf, n);
        }
        off += n;
    }
    up_md5c_final(&w, whole);
    for (int i = 0; i < nc; i++)
        up_cand_final(&c[i]);
    return rc;
}

/* MD5 of o->size bytes of key in st (DEST's copy, read back; -n:
 * another SRC's file that would go there first). */
static int hash_other(struct unit *un, struct ckpt_storage *st,
                      const char *key, const char *disp, char hex[33])
{
    struct obj *o = un->o;
    struct md5c w;
    unsigned char d[16];
    up_md5c_init(&w);
    int rc = 0;
    for (uint64_t off = 0; off < o->size && rc == 0;) {
        size_t n = o->size - off < un->cap ? (size_t)(o->size - off)
                                           : un->cap, got = 0;
        rc = ckpt_storage_read(st, key, off, un->buf, n, &got, &un->err);
        if (rc == 0 && got != n)
            rc = ckpt_err_set(&un->err, CKPT_EIO, "%s: shorter than "
                              "listed", disp);
        if (rc == 0)
            up_md5c_update(&w, un->buf, n);
        off += n;
    }
    up_md5c_final(&w, d);
    ckpt_hex_encode(d, 16, hex);
    return rc;
}

/* A file is never verified against itself: DEST must be another file
 * or object than SRC, whatever the spellings (planning refused those;
 * this holds for a link made since). */
static int dest_is_source(struct obj *o, struct ckpt_err *err)
{
    if (o->from_archive ||
        ckpt_storage_relation(o->g->sst, o->skey, o->g->dst, o->dkey) !=
        CKPT_LOC_SAME)
        return 0;
    return ckpt_err_set(err, CKPT_EUSAGE, "%s: DEST '%s' is the same file; "
                        "not compared with itself", o->sdisp, o->ddisp);
}

/* DEST's own answer about the bytes it holds, when its listed ETag is
 * not an MD5 of them (an opaque ETag: SSE-KMS, GCS composites) or is a
 * multipart one whose part size is not one of ours: a HEAD, for the
 * service's hashes (GCS x-goog-hash) and the part size ckpt used (only a
 * guess of the parts' boundaries: the ETag still decides). 0, or -1. */
static int head_dest(struct unit *un, struct ckpt_obj_meta *meta,
                     int *headed)
{
    struct obj *o = un->o;
    struct ckpt_stat sb;
    if (*headed)
        return 0;
    if (ckpt_storage_head(o->g->dst, o->dkey, &sb, meta, &un->err) != 0)
        return -1;
    *headed = 1;
    /* Replaced since it was listed: compared with what is there now. */
    if (sb.size != o->size || strcmp(sb.etag, o->dest->etag))
        return ckpt_err_set(&un->err, CKPT_EIO, "%s: changed at DEST "
                            "while being compared; run again", o->ddisp);
    return 0;
}

/* Is DEST's object the source's bytes? Only DEST's own answer counts: its
 * ETag where that is an MD5 (a single PUT's, or md5-of-part-MD5s-N with
 * the parts cut as ours, aws-cli's or rclone's, or as ckpt recorded),
 * else the hashes the service states (GCS x-goog-hash MD5 or CRC32C); a
 * local copy read back and hashed. Never ckpt's own x-amz-meta-ckpt-md5:
 * a PUT damaged on the way leaves that metadata with the wrong bytes. */
static void do_check(struct unit *un)
{
    struct obj *o = un->o;
    if (dest_is_source(o, &un->err) != 0) {
        un->rc = -1;
        return;
    }
    const char *detag = o->dest->etag;
    int multi = 0, md5form = ckpt_etag_is_md5(detag, &multi);
    /* -n, cmp_src: compared with another SRC's file, read whole. */
    int remote = !ckpt_storage_is_local(o->g->dst) && !o->cmp_src;
    struct ckpt_obj_meta meta;
    int headed = 0;
    memset(&meta, 0, sizeof(meta));
    uint64_t parts[4];
    int nc = 0;
    if (remote && md5form && multi) {
        int n = (int)strtol(strchr(detag, '-') + 1, NULL, 10);
        nc = up_cand_guesses(o->size, o->part_size, n, 0, parts);
        if (!nc && head_dest(un, &meta, &headed) != 0) {
            un->rc = -1;
            return;
        }
        if (!nc)
            nc = up_cand_guesses(o->size, o->part_size, n,
                                 meta.part_size, parts);
    }
    if (remote && !md5form && head_dest(un, &meta, &headed) != 0) {
        un->rc = -1;
        return;
    }
    struct up_cand c[4];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < nc; i++)
        c[i].part = parts[i];
    unsigned char whole[16];
    uint32_t crc = 0;
    int want_crc = remote && !md5form && meta.has_crc32c;
    if (hash_source(un, c, nc, whole, want_crc ? &crc : NULL) != 0) {
        un->rc = -1;
        return;
    }
    ckpt_hex_encode(whole, 16, un->whole);
    if (!remote) {
        const struct obj *p = o->cmp_src;
        char dh[33];
        un->rc = p ? hash_other(un, p->g->sst, p->skey, p->sdisp, dh)
                   : hash_other(un, o->g->dst, o->dkey, o->ddisp, dh);
        un->same = un->rc == 0 && !strcmp(dh, un->whole);
        return;
    }
    un->same = md5form && !strcasecmp(detag, un->whole);
    for (int i = 0; i < nc && !un->same; i++)
        un->same = !strcasecmp(detag, c[i].etag);
    if (!un->same && !md5form && meta.dest_md5[0])
        un->same = !strcasecmp(meta.dest_md5, un->whole);
    if (!un->same && want_crc)
        un->same = crc == meta.dest_crc32c;
    un->rc = 0;
}

/* ---- PUT: a whole object in one request ---- */

/* Archive members at DEST with their size: equal bytes need no PUT. */
static int same_as_dest(struct unit *un, const char *hex)
{
    return up_member_same(un->o, hex);
}

int up_member_same(struct obj *o, const char *hex)
{
    if (!o->from_archive || !o->dest || o->dest->size != o->size)
        return 0;
    int multi;
    if (!ckpt_storage_is_local(o->g->dst) &&
        ckpt_etag_is_md5(o->dest->etag, &multi))
        return !strcasecmp(o->dest->etag, hex);
    if (!ckpt_storage_is_local(o->g->dst)) {
        /* An opaque ETag: the MD5 the service states, if it does. */
        struct ckpt_stat sb;
        struct ckpt_obj_meta meta;
        struct ckpt_err e2;
        return ckpt_storage_head(o->g->dst, o->dkey, &sb, &meta, &e2) == 0 &&
               sb.size == o->size && !strcmp(sb.etag, o->dest->etag) &&
               !strcasecmp(meta.dest_md5, hex);
    }
    char *buf = ckpt_xmalloc(o->size ? o->size : 1);
    size_t got = 0;
    struct ckpt_err e2;
    int same = ckpt_storage_read(o->g->dst, o->dkey, 0, buf, o->size, &got,
                                 &e2) == 0 && got == o->size;
    if (same) {
        unsigned char d[16];
        char dh[33];
        up_md5_buf(buf, o->size, d);
        ckpt_hex_encode(d, 16, dh);
        same = !strcmp(dh, hex);
    }
    free(buf);
    return same;
}

/* ---- streamed PUT: a large local file, never held whole ---- */

/* The body of a streamed PUT, read from the file by offset (again on a
 * retry). A file that shrank stops it; any other change is caught by the
 * version check after the PUT and by Content-MD5 (and the ETag). */
static int stream_body(void *ud, uint64_t off, void *buf, size_t len,
                       struct ckpt_err *err)
{
    struct obj *o = ud;
    if (bw_take(o->g->u, len, err) != 0)   /* --bwlimit, chunk by chunk */
        return -1;
    return read_full(ud, off, buf, len, err);
}

/* MD5 of the planned version, read through the unit's small buffer. */
static int hash_file(struct unit *un)
{
    struct obj *o = un->o;
    struct md5c m;
    up_md5c_init(&m);
    int rc = 0;
    for (uint64_t off = 0; off < o->size && rc == 0;) {
        size_t n = o->size - off < un->cap ? (size_t)(o->size - off)
                                           : un->cap;
        rc = read_exact(o, off, un->buf, n, &un->err);
        if (rc == 0)
            up_md5c_update(&m, un->buf, n);
        off += n;
    }
    up_md5c_final(&m, un->md5);
    return rc;
}

static void do_put_stream(struct unit *un)
{
    struct obj *o = un->o;
    /* A throttled try already hashed the file (and the version is
     * checked again below). */
    if (!un->have_data && hash_file(un) != 0) {
        un->rc = -1;
        return;
    }
    ckpt_hex_encode(un->md5, 16, un->whole);
    struct ckpt_obj_meta meta;
    memset(&meta, 0, sizeof(meta));
    memcpy(meta.md5, un->whole, 33);
    meta.mtime = o->mtime;
    un->rc = ckpt_storage_put_stream(o->g->dst, o->dkey, o->size,
                                     stream_body, o, un->md5, &meta,
                                     CKPT_PUT_THROTTLE_RETURN, &un->res,
                                     &un->err);
    /* Every byte sent came from the version hashed: it is still the
     * version planned after the last one was read. */
    if (un->rc == 0)
        un->rc = local_unchanged(o, &un->err);
}

/* A spooled archive member: the spool's file itself, still as the pass
 * that hashed it left it, becomes DEST's file. */
static void do_put_spooled(struct unit *un)
{
    struct obj *o = un->o;
    const struct ckpt_spooled *sp = un->spooled;
    memcpy(un->md5, sp->md5, 16);
    ckpt_hex_encode(un->md5, 16, un->whole);
    if (source_unchanged(o, &un->err) != 0 ||
        ckpt_spooled_same(sp, &un->err) != 0) {
        un->rc = -1;
        return;
    }
    struct ckpt_obj_meta meta;
    memset(&meta, 0, sizeof(meta));
    memcpy(meta.md5, un->whole, 33);
    meta.mtime = o->mtime;
    int linked;
    if (bw_take(un->u, o->size, &un->err) != 0) {
        un->rc = -1;
        return;
    }
    un->rc = ckpt_storage_put_file(o->g->dst, o->dkey, sp->path, &sp->ver,
                                   un->md5, &meta, &linked, &un->err);
}

static void do_put(struct unit *un)
{
    struct obj *o = un->o;
    char hex[33];
    if (un->spooled) {
        do_put_spooled(un);
        return;
    }
    if (o->stream) {
        do_put_stream(un);
        return;
    }
    if (!un->have_data) {
        /* One byte more than listed: a file that grew is caught too. */
        size_t got = 0;
        un->rc = local_unchanged(o, &un->err);
        if (un->rc == 0)
            un->rc = ckpt_storage_read(o->g->sst, o->skey, 0, un->buf,
                                       (size_t)o->size + 1, &got, &un->err);
        if (un->rc == 0 && got != o->size)
            un->rc = ckpt_err_set(&un->err, CKPT_EIO, "%s: changed while "
                                  "being read (%zu bytes, listed as %llu)",
                                  o->sdisp, got,
                                  (unsigned long long)o->size);
        if (un->rc == 0)
            un->rc = local_unchanged(o, &un->err);
        if (un->rc != 0)
            return;
    } else if (o->from_archive && source_unchanged(o, &un->err) != 0) {
        un->rc = -1;  /* the member was read from another version */
        return;
    }
    up_md5_buf(un->buf, (size_t)o->size, un->md5);
    ckpt_hex_encode(un->md5, 16, hex);
    memcpy(un->whole, hex, 33);
    if (same_as_dest(un, hex)) {
        un->same = 1;
        return;
    }
    if (up_no_replace(o) && o->dest) {
        un->rc = ckpt_err_set(&un->err, CKPT_EEXIST, "conflict: %s already "
                              "exists at DEST with different bytes; not "
                              "replaced (DEST keeps its copy: it may be the "
                              "only one)", o->ddisp);
        return;
    }
    struct ckpt_obj_meta meta;
    memset(&meta, 0, sizeof(meta));
    memcpy(meta.md5, hex, 33);
    meta.mtime = o->mtime;
    if (bw_take(un->u, o->size, &un->err) != 0) {
        un->rc = -1;
        return;
    }
    un->rc = ckpt_storage_put_object(o->g->dst, o->dkey, un->buf,
                                     (size_t)o->size, un->md5, &meta,
                                     CKPT_PUT_THROTTLE_RETURN, &un->res,
                                     &un->err);
    /* What DEST stored must hash to what we sent (single-PUT ETag is
     * the MD5 unless the service encrypts with its own keys). */
    if (un->rc == 0 && is_hex32(un->res.etag) &&
        strcasecmp(un->res.etag, hex))
        un->rc = ckpt_err_set(&un->err, CKPT_EHTTP, "%s: DEST reports ETag "
                              "%s, but the bytes sent have MD5 %s",
                              o->ddisp, un->res.etag, hex);
}

/* ---- multipart ---- */

static void do_start(struct unit *un)
{
    struct obj *o = un->o;
    struct ckpt_obj_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.part_size = o->part_size;
    meta.mtime = o->mtime;
    char *id = NULL;
    un->rc = ckpt_storage_mpu_start(o->g->dst, o->dkey, o->size, &meta, &id,
                                    &un->err);
    un->upload_id = id;
}

/* A part an earlier run wrote into a local DEST's temporary file (the
 * upload id) and acknowledged: hashed there, where it is, instead of
 * fetched from a remote source again, so an interrupted download
 * resumes with the ranges it lacks. 1 when the bytes there are the
 * acknowledged ones (then un->buf and un->md5 hold them). */
static int known_at_dest(struct unit *un)
{
    struct obj *o = un->o;
    int k = un->part - 1;
    struct ckpt_err err = CKPT_ERR_INIT;
    size_t got = 0;
    if (un->have_data || !o->known || !o->known_have[k] ||
        !ckpt_storage_is_local(o->g->dst) ||
        ckpt_storage_is_local(o->g->sst) ||
        ckpt_storage_read(o->g->dst, o->upload_id, un->off, un->buf,
                          un->len, &got, &err) != 0 || got != un->len)
        return 0;
    up_md5_buf(un->buf, un->len, un->md5);
    return !memcmp(o->known[k], un->md5, 16);
}

static void do_part(struct unit *un)
{
    struct obj *o = un->o;
    if (known_at_dest(un)) {
        un->resumed = 1;
        un->rc = 0;
        return;
    }
    if (!un->have_data &&
        read_exact(o, un->off, un->buf, un->len, &un->err) != 0) {
        un->rc = -1;
        return;
    }
    up_md5_buf(un->buf, un->len, un->md5);
    int k = un->part - 1;
    /* Sent by an earlier run and acknowledged: same bytes, nothing to do. */
    if (o->known && o->known_have[k] && !memcmp(o->known[k], un->md5, 16)) {
        un->resumed = 1;
        un->rc = 0;
        return;
    }
    if (bw_take(un->u, un->len, &un->err) != 0) {
        un->rc = -1;
        return;
    }
    un->rc = ckpt_storage_mpu_part(o->g->dst, o->dkey, o->upload_id,
                                   un->part, un->off, un->buf, un->len,
                                   un->md5, CKPT_PUT_THROTTLE_RETURN,
                                   &un->res, &un->err);
    char hex[33];
    ckpt_hex_encode(un->md5, 16, hex);
    if (un->rc == 0 && is_hex32(un->res.etag) &&
        strcasecmp(un->res.etag, hex))
        un->rc = ckpt_err_set(&un->err, CKPT_EHTTP, "%s: part %d: DEST "
                              "reports ETag %s, but the bytes sent have "
                              "MD5 %s", o->ddisp, un->part, un->res.etag,
                              hex);
}

static void do_finish(struct unit *un)
{
    struct obj *o = un->o;
    if (source_unchanged(o, &un->err) != 0) {
        un->rc = -1;
        return;
    }
    char (*hex)[33] = ckpt_xcalloc((size_t)o->nparts, 33);
    const char **etags = ckpt_xcalloc((size_t)o->nparts, sizeof(char *));
    for (int i = 0; i < o->nparts; i++) {
        ckpt_hex_encode(o->pmd5[i], 16, hex[i]);
        etags[i] = hex[i];
    }
    struct ckpt_obj_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.mtime = o->mtime;
    un->rc = ckpt_storage_mpu_finish(o->g->dst, o->dkey, o->upload_id,
                                     o->nparts, etags, o->size, &meta,
                                     &un->res, &un->err);
    char want[48];
    up_composite_etag((const unsigned char (*)[16])o->pmd5, o->nparts, want);
    /* S3 and R2 answer md5(part MD5s)-N, checked here; s3rver answers a
     * plain MD5 and GCS an opaque value: the parts' ETags were checked
     * one by one and finish checked the size. */
    if (un->rc == 0 && strchr(un->res.etag, '-') &&
        strcasecmp(un->res.etag, want))
        un->rc = ckpt_err_set(&un->err, CKPT_EHTTP, "%s: DEST reports "
                              "multipart ETag %s, expected %s", o->ddisp,
                              un->res.etag, want);
    free(hex);
    free(etags);
}

/* An archive SRC (o == NULL) goes as a whole once every member arrived. */
static int archive_unchanged(struct unit *un)
{
    struct group *g = un->ag;
    struct ckpt_stat sb;
    if (g->has_ver)
        return version_same(g->skey, g->sdisp, &g->ver, &un->err);
    if (ckpt_storage_stat(g->sst, g->skey, &sb, &un->err) != 0)
        return -1;
    if (sb.size != g->ssb.size || sb.mtime != g->ssb.mtime ||
        strcmp(sb.etag, g->ssb.etag))
        return ckpt_err_set(&un->err, CKPT_EIO, "%s: changed while being "
                            "copied", g->sdisp);
    return 0;
}

/* The delete gate's re-check of a copied source (gate.h): the lease
 * still held, the source unchanged since it was copied, DEST not the
 * source itself. */
static int still_copied(void *data, struct ckpt_err *err)
{
    struct unit *un = data;
    struct obj *o = un->o;
    const struct ckpt_upload_cfg *cfg = &un->u->cfg;
    int rc = cfg->may_delete ? cfg->may_delete(cfg->ud, err) : 0;
    if (rc == 0)
        rc = o ? source_unchanged(o, err) : archive_unchanged(un);
    if (rc == 0 && o)
        rc = dest_is_source(o, err);
    if (rc != 0) {
        ckpt_err_prefix(err, "not deleted");
        return -1;
    }
    return 0;
}

static void do_delete(struct unit *un)
{
    struct obj *o = un->o;
    struct ckpt_gate_proof p = {
        .rule = CKPT_GATE_COPIED, .recheck = still_copied, .data = un,
        .evidence = "DEST's copy verified by DEST's own answer",
    };
    /* A tree's file only below SRC's real path, on SRC's filesystem. */
    if (o && o->g->kind == G_TREE)
        un->rc = ckpt_gate_delete_below(&p, o->g->sst, o->g->skey, o->skey,
                                        &un->err);
    else
        un->rc = o ? ckpt_gate_delete(&p, o->g->sst, o->skey, &un->err)
                   : ckpt_gate_delete(&p, un->ag->sst, un->ag->skey,
                                      &un->err);
}

void up_unit_run(struct unit *un)
{
    un->rc = 0;
    /* Interrupted: nothing more is started; what the journal recorded
     * (multipart uploads, a local DEST's temporary file) stays for the
     * rerun to resume. */
    if (ckpt_interrupted()) {
        un->rc = ckpt_err_set(&un->err, CKPT_EIO, "interrupted");
        return;
    }
    switch (un->kind) {
    case U_CHECK:
        do_check(un);
        break;
    case U_PUT:
        do_put(un);
        break;
    case U_START:
        do_start(un);
        break;
    case U_PART:
        do_part(un);
        break;
    case U_FINISH:
        do_finish(un);
        break;
    case U_ABORT:
        un->rc = ckpt_storage_mpu_abort(un->st, un->key, un->upload_id,
                                        &un->err);
        break;
    case U_DELETE:
        do_delete(un);
        break;
    }
}
