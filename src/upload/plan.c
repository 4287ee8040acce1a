/*
 * plan.c - ckpt_upload_add: what a copy consists of. SRC is listed (a
 * local tree one directory at a time, so an unreadable directory fails
 * only its own files; an object-storage prefix in one recursive listing),
 * DEST is listed once, and each file becomes an object to route.
 */
#include "upload_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"

#define MAX_DEPTH 256

/* ---- DEST listing ---- */

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct dentry *)a)->name,
                  ((const struct dentry *)b)->name);
}

const struct dentry *up_dmap_find(const struct dmap *m, const char *name)
{
    struct dentry key = { (char *)name, 0, 0, NULL };
    if (!m->n)
        return NULL;
    return bsearch(&key, m->v, m->n, sizeof(*m->v), by_name);
}

void up_dmap_release(struct dmap *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].name);
        free(m->v[i].etag);
    }
    free(m->v);
    memset(m, 0, sizeof(*m));
}

/* Our own temporary files of unfinished local copies are not content. */
static int is_temp(const char *name)
{
    return ckpt_is_temp_name(name);
}

static int dmap_add(void *ud, const struct ckpt_entry *e)
{
    struct dmap *m = ud;
    if (e->type != CKPT_ENTRY_FILE || is_temp(e->name))
        return 0;
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->v = ckpt_xreallocarray(m->v, m->cap, sizeof(*m->v));
    }
    m->v[m->n++] = (struct dentry){ ckpt_xstrdup(e->name), e->size,
                                    e->mtime, ckpt_xstrdup(e->etag) };
    return 0;
}

/* List DEST (a file group: stat its one object) into m, sorted. */
int up_dmap_load(struct group *g, struct dmap *m, struct ckpt_err *err)
{
    struct ckpt_stat sb;
    char *disp = ckpt_storage_display(g->dst, g->dkey);
    int rc = ckpt_storage_stat(g->dst, g->dkey, &sb, err);
    if (rc != 0 && err->code == CKPT_ENOTFOUND) {
        free(disp);
        return 0;  /* nothing there yet */
    }
    if (rc == 0 && g->kind == G_FILE) {
        if (sb.type != CKPT_ENTRY_FILE)
            rc = ckpt_err_set(err, CKPT_EUSAGE, "DEST '%s' is a directory",
                              disp);
        struct ckpt_entry e = { "", sb.size, sb.mtime, sb.type, sb.etag,
                                sb.ctime, 0 };
        if (rc == 0)
            dmap_add(m, &e);
        free(disp);
        return rc;
    }
    if (rc == 0 && sb.type == CKPT_ENTRY_FILE)
        rc = ckpt_err_set(err, CKPT_EUSAGE, "DEST '%s' is a file, not a "
                          "directory", disp);
    if (rc == 0) {
        rc = ckpt_storage_list(g->dst, g->dkey, CKPT_LIST_RECURSIVE,
                               dmap_add, m, err);
        if (rc != 0 && err->code == CKPT_ENOTFOUND)
            rc = 0;
    }
    if (rc == 0 && m->n)
        ckpt_sort(m->v, m->n, sizeof(*m->v), by_name);
    free(disp);
    return rc;
}

/* ---- objects ---- */

static void sig_of(char *out, size_t n, struct ckpt_storage *st,
                   int64_t mtime, const char *etag)
{
    if (ckpt_storage_is_local(st) || !etag || !*etag)
        snprintf(out, n, "m%lld", (long long)mtime);
    else
        snprintf(out, n, "e%s", etag);
}

static void obj_plan_dest(struct obj *o, const char *rel)
{
    struct group *g = o->g;
    if (g->kind == G_FILE) {
        o->dkey = ckpt_xstrdup(g->dkey);
        o->dest = g->dmap.n ? &g->dmap.v[0] : NULL;
    } else {
        o->dkey = *g->dkey ? ckpt_path_join(g->dkey, rel)
                           : ckpt_xstrdup(rel);
        o->dest = up_dmap_find(&g->dmap, rel);
    }
    o->ddisp = ckpt_storage_display(g->dst, o->dkey);
}

struct obj *up_obj_new(struct group *g, const char *skey, const char *rel,
                       uint64_t size, int64_t mtime, const char *sig)
{
    struct ckpt_upload *u = g->u;
    struct obj *o = ckpt_xcalloc(1, sizeof(*o));
    o->g = g;
    o->skey = ckpt_xstrdup(skey);
    o->size = size;
    o->mtime = mtime;
    snprintf(o->srcsig, sizeof(o->srcsig), "%s", sig);
    o->part_size = up_part_size_for(size, u->cfg.part_size);
    o->big = size > o->part_size;
    o->nparts = up_parts_for(size, o->part_size);
    o->cap = u->cfg.jobs;
    obj_plan_dest(o, rel);
    if (u->nobjs == u->capobjs) {
        u->capobjs = u->capobjs ? 2 * u->capobjs : 256;
        u->objs = ckpt_xreallocarray(u->objs, u->capobjs, sizeof(*u->objs));
    }
    u->objs[u->nobjs++] = o;
    g->nobjs++;
    u->t.files++;
    u->t.bytes_total += size;
    return o;
}

void up_obj_free(struct obj *o)
{
    if (!o)
        return;
    free(o->dfile.name);
    free(o->dfile.etag);
    free(o->skey);
    free(o->dkey);
    free(o->sdisp);
    free(o->ddisp);
    free(o->upload_id);
    free(o->pmd5);
    free(o->known);
    free(o->known_have);
    free(o->pstate);
    free(o->retry);
    free(o);
}

void up_group_free(struct group *g)
{
    if (!g)
        return;
    up_extract_close(g);
    up_journal_close(g->jr);
    up_dmap_release(&g->dmap);
    for (size_t i = 0; i < g->ndrops; i++)
        free(g->drops[i]);
    for (size_t i = 0; i < g->ndrops; i++)
        free(g->drop_rels[i]);
    free(g->drop_rels);
    free(g->drops);
    free(g->drop_sizes);
    for (size_t i = 0; i < g->nlinks; i++)
        free(g->links[i]);
    free(g->links);
    tf_strmap_release(&g->seen);
    for (size_t i = 0; i < g->nseen; i++)
        free(g->seen_keys[i]);
    free(g->seen_keys);
    free(g->skey);
    free(g->dkey);
    free(g->sdisp);
    free(g);
}

/* A planning failure: the files it hides did not arrive. */
static void plan_fail(struct group *g, const char *what,
                      const struct ckpt_err *err)
{
    struct ckpt_upload_event ev = { CKPT_UP_FAILED, what, NULL, 0,
                                    err->msg };
    g->plan_failed = 1;
    g->u->t.failed++;
    if (g->u->cfg.on_event)
        g->u->cfg.on_event(g->u->cfg.ud, &ev);
}

static void plan_warn(struct group *g, const char *what, const char *msg)
{
    struct ckpt_upload_event ev = { CKPT_UP_WARNING, what, NULL, 0, msg };
    g->u->t.warnings++;
    if (g->u->cfg.on_event)
        g->u->cfg.on_event(g->u->cfg.ud, &ev);
}

int up_pick(struct group *g, const char *skey, const char *rel,
            uint64_t size)
{
    struct ckpt_upload *u = g->u;
    if (!(g->flags & CKPT_UPLOAD_PICK) || !u->cfg.pick)
        return 1;
    enum ckpt_upload_pick pk = u->cfg.pick(u->cfg.ud, rel);
    if (pk == CKPT_PICK_COPY)
        return 1;
    if (pk == CKPT_PICK_LEAVE) {
        g->nleft++;
        u->t.left++;
        return 0;
    }
    u->t.dropped++;
    if (g->kind != G_ARCHIVE) {   /* an archive goes whole */
        g->drops = ckpt_xreallocarray(g->drops, g->ndrops + 1,
                                      sizeof(*g->drops));
        g->drop_sizes = ckpt_xreallocarray(g->drop_sizes, g->ndrops + 1,
                                           sizeof(*g->drop_sizes));
        g->drop_rels = ckpt_xreallocarray(g->drop_rels, g->ndrops + 1,
                                          sizeof(*g->drop_rels));
        g->drop_sizes[g->ndrops] = size;
        g->drop_rels[g->ndrops] = ckpt_xstrdup(rel);
        g->drops[g->ndrops++] = ckpt_xstrdup(skey);
    }
    return 0;
}

/* A local file is planned as the version stat(2) sees now: every read
 * of it is checked against that version. */
static struct obj *add_file(struct group *g, const char *skey,
                            const char *rel, uint64_t size, int64_t mtime,
                            const char *etag)
{
    if (!up_pick(g, skey, rel, size))
        return NULL;
    char sig[96];
    struct srcver v = { 0 };
    struct ckpt_err err = CKPT_ERR_INIT;
    int local = ckpt_storage_is_local(g->sst);
    if (local && up_srcver_get(skey, &v, &err) != 0) {
        char *disp = ckpt_storage_display(g->sst, skey);
        plan_fail(g, disp, &err);
        free(disp);
        return NULL;
    }
    if (local) {
        size = v.size;
        mtime = v.mtime_ns / 1000000000;
        up_srcver_sig(&v, sig, sizeof(sig));
    } else {
        sig_of(sig, sizeof(sig), g->sst, mtime, etag);
    }
    struct obj *o = up_obj_new(g, skey, rel, size, mtime, sig);
    o->ver = v;
    o->has_ver = local;
    o->sdisp = ckpt_storage_display(g->sst, skey);
    return o;
}

/* ---- local trees ---- */

struct lent {
    char *name;
    uint64_t size;
    int64_t mtime;
    enum ckpt_entry_type type;
};

struct lents {
    struct lent *v;
    size_t n;
};

static int collect(void *ud, const struct ckpt_entry *e)
{
    struct lents *l = ud;
    if (l->n % 64 == 0)
        l->v = ckpt_xreallocarray(l->v, l->n + 64, sizeof(*l->v));
    l->v[l->n++] = (struct lent){ ckpt_xstrdup(e->name), e->size, e->mtime,
                                  e->type };
    return 0;
}

static int lent_cmp(const void *a, const void *b)
{
    return strcmp(((const struct lent *)a)->name,
                  ((const struct lent *)b)->name);
}

struct walk {
    struct group *g;
    char **stack;       /* realpaths of the directories being walked */
    int depth;
};

static void walk_dir(struct walk *w, const char *dir, const char *rel);

/* A directory symlink that points at a directory being walked (or above
 * one) would never end. */
static int is_loop(struct walk *w, const char *real)
{
    size_t n = strlen(real);
    for (int i = 0; i < w->depth; i++) {
        const char *s = w->stack[i];
        if (!strncmp(s, real, n) && (s[n] == '\0' || s[n] == '/' ||
                                     n == 1))
            return 1;
    }
    return 0;
}

/* A file planned in the directory being walked: reached through a
 * followed link from outside SRC's real path (the first directory walked)
 * when that directory's real path is not below it. Deleting it would
 * delete outside SRC: it is copied and kept. */
static void mark_outside(const struct walk *w, struct obj *o)
{
    const char *top = w->stack[0], *cur = w->stack[w->depth - 1];
    size_t n = strlen(top);
    if (o && (strncmp(cur, top, n) != 0 ||
              (cur[n] != '\0' && cur[n] != '/' && n != 1)))
        o->outside = 1;
}

static void follow_link(struct walk *w, const char *path, const char *rel)
{
    struct group *g = w->g;
    struct ckpt_stat sb;
    struct ckpt_err err = CKPT_ERR_INIT;
    char *disp = ckpt_storage_display(g->sst, path);
    char real[PATH_MAX];
    if (ckpt_storage_stat(g->sst, path, &sb, &err) != 0) {
        ckpt_err_set(&err, CKPT_ENOTFOUND, "'%s': broken symbolic link",
                     path);
        plan_fail(g, disp, &err);
    } else if (sb.type == CKPT_ENTRY_FILE) {
        mark_outside(w, add_file(g, path, rel, sb.size, sb.mtime, NULL));
    } else if (sb.type != CKPT_ENTRY_DIR) {
        plan_warn(g, disp, CKPT_UP_WHY_SPECIAL);
    } else if (!realpath(path, real)) {
        ckpt_err_sys(&err, "resolve '%s'", path);
        plan_fail(g, disp, &err);
    } else if (is_loop(w, real)) {
        ckpt_err_set(&err, CKPT_EUNSAFE, "'%s': symbolic link loop (points "
                     "to '%s', which contains it)", path, real);
        plan_fail(g, disp, &err);
    } else {
        walk_dir(w, path, rel);
    }
    free(disp);
}

/* OLMo's `latest` and `latest-unsharded` links name a checkpoint of the
 * same run: copying them would copy that checkpoint twice (-L), warning
 * about them is noise, and they must go with the run. One that dangles
 * (its checkpoint cleaned) counts when its target stays below its own
 * directory. */
static int olmo_latest(const struct walk *w, const char *path,
                       const char *name)
{
    char real[PATH_MAX], target[PATH_MAX];
    if (strcmp(name, "latest") && strcmp(name, "latest-unsharded"))
        return 0;
    if (realpath(path, real)) {
        size_t n = strlen(w->stack[0]);
        return !strncmp(real, w->stack[0], n) && real[n] == '/';
    }
    ssize_t len = readlink(path, target, sizeof(target) - 1);
    if (len <= 0 || target[0] == '/')
        return 0;
    target[len] = '\0';
    char *save = NULL;
    for (char *c = strtok_r(target, "/", &save); c;
         c = strtok_r(NULL, "/", &save))
        if (!strcmp(c, ".."))
            return 0;
    return 1;
}

/* cfg.expect: the plan found rel (any kind of entry). */
static void saw(struct group *g, const char *rel)
{
    if (!g->u->cfg.expect || !(g->flags & CKPT_UPLOAD_PICK))
        return;
    if (g->nseen % 64 == 0)
        g->seen_keys = ckpt_xreallocarray(g->seen_keys, g->nseen + 64,
                                          sizeof(*g->seen_keys));
    char *k = g->seen_keys[g->nseen++] = ckpt_xstrdup(rel);
    if (tf_strmap_put(&g->seen, k, strlen(k), 1) != 0)
        ckpt_die_oom("the paths an upload found");
}

/* cfg.expect: every path the caller saw must be one the plan found. */
static void check_expect(struct group *g)
{
    const struct ckpt_upload_cfg *c = &g->u->cfg;
    uint64_t v;
    size_t gone = 0;
    if (!c->expect || !(g->flags & CKPT_UPLOAD_PICK) || g->kind != G_TREE)
        return;
    for (size_t i = 0; i < c->nexpect; i++) {
        if (tf_strmap_get(&g->seen, c->expect[i], strlen(c->expect[i]), &v)
            || ++gone > 3)
            continue;
        /* Named with where it would have gone: a file that did not
         * arrive, not a failed delete. */
        char *key = ckpt_path_join(g->skey, c->expect[i]);
        char *dkey = *g->dkey ? ckpt_path_join(g->dkey, c->expect[i])
                              : ckpt_xstrdup(c->expect[i]);
        char *disp = ckpt_storage_display(g->sst, key);
        char *ddisp = ckpt_storage_display(g->dst, dkey);
        struct ckpt_upload_event ev = {
            CKPT_UP_FAILED, disp, ddisp, 0, "vanished from the source "
            "since the run was judged (another worker or a user deleted "
            "it); nothing is deleted" };
        g->plan_failed = 1;
        g->u->t.failed++;
        if (c->on_event)
            c->on_event(c->ud, &ev);
        free(ddisp);
        free(dkey);
        free(disp);
        free(key);
    }
    if (gone > 3) {
        struct ckpt_err err = CKPT_ERR_INIT;
        ckpt_err_set(&err, CKPT_ENOTFOUND, "%zu more files vanished from "
                     "the source since the run was judged", gone - 3);
        plan_fail(g, g->sdisp, &err);
    }
}

static void walk_entry(struct walk *w, const char *dir, const char *rel,
                       const struct lent *e)
{
    struct group *g = w->g;
    char *path = ckpt_path_join(dir, e->name);
    char *r = *rel ? ckpt_path_join(rel, e->name) : ckpt_xstrdup(e->name);
    if (e->type != CKPT_ENTRY_DIR)
        saw(g, r);
    if (e->type == CKPT_ENTRY_LINK && olmo_latest(w, path, e->name)) {
        g->links = ckpt_xreallocarray(g->links, g->nlinks + 1,
                                      sizeof(*g->links));
        g->links[g->nlinks++] = ckpt_xstrdup(path);
    } else if (e->type == CKPT_ENTRY_FILE && !is_temp(e->name)) {
        mark_outside(w, add_file(g, path, r, e->size, e->mtime, NULL));
    } else if (e->type == CKPT_ENTRY_DIR && ckpt_is_del_name(e->name)) {
        /* A step or run being deleted (or left by a killed delete, which
         * `ckpt clean`/`unshard --delete-sharded` finish): not content. */
        char *disp = ckpt_storage_display(g->sst, path);
        plan_warn(g, disp, "left by an interrupted delete; not copied");
        free(disp);
    } else if (e->type == CKPT_ENTRY_DIR) {
        walk_dir(w, path, r);
    } else if (e->type == CKPT_ENTRY_LINK && g->u->cfg.follow_links) {
        follow_link(w, path, r);
    } else if (e->type == CKPT_ENTRY_LINK || e->type == CKPT_ENTRY_OTHER) {
        char *disp = ckpt_storage_display(g->sst, path);
        plan_warn(g, disp, e->type == CKPT_ENTRY_LINK ? CKPT_UP_WHY_LINK
                                                      : CKPT_UP_WHY_SPECIAL);
        free(disp);
    }
    free(path);
    free(r);
}

static void walk_dir(struct walk *w, const char *dir, const char *rel)
{
    struct group *g = w->g;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct lents l = { NULL, 0 };
    char real[PATH_MAX];
    if (w->depth >= MAX_DEPTH) {
        ckpt_err_set(&err, CKPT_EUNSAFE, "'%s': more than %d directories "
                     "deep", dir, MAX_DEPTH);
    } else if (!realpath(dir, real)) {
        ckpt_err_sys(&err, "resolve '%s'", dir);
    } else if (ckpt_storage_list(g->sst, dir, 0, collect, &l, &err) == 0) {
        ckpt_sort(l.v, l.n, sizeof(*l.v), lent_cmp);
        w->stack[w->depth++] = ckpt_xstrdup(real);
        for (size_t i = 0; i < l.n; i++)
            walk_entry(w, dir, rel, &l.v[i]);
        free(w->stack[--w->depth]);
    }
    if (err.code) {
        char *disp = ckpt_storage_display(g->sst, dir);
        plan_fail(g, disp, &err);
        free(disp);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i].name);
    free(l.v);
}

/* ---- remote trees ---- */

static int remote_entry(void *ud, const struct ckpt_entry *e)
{
    struct group *g = ud;
    if (e->type != CKPT_ENTRY_FILE)
        return 0;
    char *key = *g->skey ? ckpt_path_join(g->skey, e->name)
                         : ckpt_xstrdup(e->name);
    saw(g, e->name);
    add_file(g, key, e->name, e->size, e->mtime, e->etag);
    free(key);
    return 0;
}

static int list_source(struct group *g, struct ckpt_err *err)
{
    if (g->kind == G_FILE) {
        const char *base = strrchr(g->skey, '/');
        add_file(g, g->skey, base ? base + 1 : g->skey, g->ssb.size,
                 g->ssb.mtime, g->ssb.etag);
        return 0;
    }
    if (g->kind == G_ARCHIVE)
        return 0;  /* members are read while copying */
    if (!ckpt_storage_is_local(g->sst)) {
        int rc = ckpt_storage_list(g->sst, g->skey, CKPT_LIST_RECURSIVE,
                                   remote_entry, g, err);
        if (rc == 0)
            check_expect(g);
        return rc;
    }
    struct walk w = { g, ckpt_xcalloc(MAX_DEPTH + 1, sizeof(char *)), 0 };
    walk_dir(&w, g->skey, "");
    free(w.stack);
    check_expect(g);
    return 0;
}

static int open_journal(struct group *g, struct ckpt_err *err)
{
    struct ckpt_upload *u = g->u;
    if (!u->cfg.state_dir || u->cfg.dry_run)
        return 0;
    char *ddisp = ckpt_storage_display(g->dst, g->dkey);
    char *id = ckpt_xasprintf("v1\n%s\n%s\n%d", g->sdisp, ddisp,
                              g->kind == G_ARCHIVE);
    int rc = up_journal_open(&g->jr, u->cfg.state_dir, id, err);
    free(id);
    free(ddisp);
    return rc;
}

static int group_kind(struct group *g, unsigned flags, struct ckpt_err *err)
{
    if (g->ssb.type == CKPT_ENTRY_DIR) {
        g->kind = G_TREE;
        return 0;
    }
    if (g->ssb.type != CKPT_ENTRY_FILE)
        return ckpt_err_set(err, CKPT_EUSAGE, "SRC '%s' is not a file or "
                            "directory", g->sdisp);
    g->kind = G_FILE;
    if (flags & CKPT_UPLOAD_EXTRACT) {
        if (ckpt_archive_kind_of(g->skey) == CKPT_ARCHIVE_NONE)
            return ckpt_err_set(err, CKPT_EUSAGE, "--extract: '%s' is not "
                                "an archive (.tar, .tar.gz, .tar.zst, "
                                ".zip, ...)", g->sdisp);
        g->kind = G_ARCHIVE;
    }
    return 0;
}

/* One place under two spellings is never copied onto itself (the copy
 * would be "verified" by reading the source); with --delete-source
 * neither may be inside the other (deleting SRC would delete the copy, or
 * the copy overwrite the source). The CLI refuses these up front; this
 * keeps every caller of the library safe. */
static int check_places(struct group *g, struct ckpt_err *err)
{
    enum ckpt_loc_rel rel = ckpt_storage_relation(g->sst, g->skey, g->dst,
                                                  g->dkey);
    int del = g->u->cfg.delete_source && !(g->flags & CKPT_UPLOAD_KEEP_SRC);
    char *ddisp = ckpt_storage_display(g->dst, g->dkey);
    int rc = -1;
    if (rel == CKPT_LOC_SAME)
        ckpt_err_set(err, CKPT_EUSAGE, "SRC '%s' and DEST '%s' are the "
                     "same location (a copy onto itself)", g->sdisp, ddisp);
    else if (del && rel != CKPT_LOC_APART)
        ckpt_err_set(err, CKPT_EUSAGE, "--delete-source: SRC '%s' and DEST "
                     "'%s': one is inside the other", g->sdisp, ddisp);
    else if (rel == CKPT_LOC_B_INSIDE_A && g->kind == G_TREE)
        ckpt_err_set(err, CKPT_EUSAGE, "DEST '%s' is inside SRC '%s'",
                     ddisp, g->sdisp);
    else
        rc = 0;
    free(ddisp);
    return rc;
}

int ckpt_upload_add(struct ckpt_upload *u, struct ckpt_storage *sst,
                    const char *skey, struct ckpt_storage *dst,
                    const char *dkey, unsigned flags, struct ckpt_err *err)
{
    struct group *g = ckpt_xcalloc(1, sizeof(*g));
    g->u = u;
    g->sst = sst;
    g->dst = dst;
    g->skey = ckpt_xstrdup(skey);
    g->dkey = ckpt_xstrdup(dkey);
    g->sdisp = ckpt_storage_display(sst, skey);
    g->flags = flags;
    int rc = up_md5_check(err);
    if (rc == 0)
        rc = ckpt_storage_stat(sst, skey, &g->ssb, err);
    if (rc != 0 && err->code == CKPT_ENOTFOUND)
        ckpt_err_set(err, CKPT_ENOTFOUND, "SRC '%s' does not exist",
                     g->sdisp);
    if (rc == 0)
        rc = group_kind(g, flags, err);
    if (rc == 0)
        rc = check_places(g, err);
    if (rc == 0 && g->kind == G_ARCHIVE && ckpt_storage_is_local(sst)) {
        rc = up_srcver_get(skey, &g->ver, err);
        g->has_ver = rc == 0;
    }
    if (rc == 0)
        rc = up_dmap_load(g, &g->dmap, err);
    if (rc == 0)
        rc = open_journal(g, err);
    size_t before = u->nobjs;
    if (rc == 0)
        rc = list_source(g, err);
    if (rc != 0) {
        while (u->nobjs > before) {
            struct obj *o = u->objs[--u->nobjs];
            u->t.files--;
            u->t.bytes_total -= o->size;
            up_obj_free(o);
        }
        up_group_free(g);
        return -1;
    }
    u->groups = ckpt_xreallocarray(u->groups, u->ngroups + 1,
                                   sizeof(*u->groups));
    u->groups[u->ngroups++] = g;
    return 0;
}
