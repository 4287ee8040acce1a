/*
 * judge.c - the helpers of trainers/judge.h that every trainer's judge
 * (src/trainers/<name>/judge.c) shares: files of the view, verdicts with
 * their reasons, ranked file names, JSON and whole-file checks, a torch
 * zip's pickle. They read the run's tree (src/run/tree.c) and nothing
 * above it; the dispatch that asks the trainer table is src/run/judge.c.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dcp.h"
#include "ckpt/torchfmt.h"
#include "ckpt/util.h"
#include "trainers/judge.h"

/* The file dir/rel of the checkpoint, or NULL. */
const struct ckpt_tree_file *judge_get(const struct judge_view *v,
                                       const char *rel)
{
    char *p = ckpt_path_join(v->dir, rel);
    const struct ckpt_tree_file *f = ckpt_tree_find(v->t, p);
    free(p);
    return f && f->type != CKPT_ENTRY_DIR ? f : NULL;
}

const char *judge_rel(const struct judge_view *v, size_t i)
{
    return ckpt_tree_rel(v->t, i, v->dir);
}

/* rel_of for a file; NULL for a directory (an archive lists nested ones,
 * a directory's listing only those at its top). */
const char *judge_file_rel(const struct judge_view *v, size_t i)
{
    return v->t->files[i].type == CKPT_ENTRY_DIR ? NULL : judge_rel(v, i);
}

const char *judge_base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int judge_set_why(struct ckpt_checkpoint *c, const char *fmt, const char *a)
{
    free(c->why);
    c->why = ckpt_xasprintf(fmt, a);
    c->complete = 0;
    return 0;
}

/* Not judged: ckpt cannot tell (files it does not recognise or cannot
 * verify). Never "incomplete": clean would delete it. */
int judge_set_unknown(struct ckpt_checkpoint *c, const char *fmt,
                      const char *a)
{
    judge_set_why(c, fmt, a);
    c->unknown = 1;
    return 0;
}

/* Parse "rank<N>.pt" / "rank_<N>.safetensors" style names: rank number or
 * -1. */
long judge_rank_of(const char *name, const char *prefix, const char *suffix)
{
    size_t pl = strlen(prefix), sl = strlen(suffix), n = strlen(name);
    if (n <= pl + sl || strncmp(name, prefix, pl) != 0 ||
        strcmp(name + n - sl, suffix) != 0)
        return -1;
    long r = 0;
    for (size_t i = pl; i < n - sl; i++) {
        if (!isdigit((unsigned char)name[i]) || r > 1000000)
            return -1;
        r = r * 10 + (name[i] - '0');
    }
    return r;
}

/* The name of file i when it lies directly in subdirectory sub ("" =
 * top), else NULL. */
static const char *name_in(const struct judge_view *v, size_t i,
                           const char *sub)
{
    const char *r = judge_file_rel(v, i);
    size_t sl = strlen(sub);
    if (!r || (sl && (strncmp(r, sub, sl) != 0 || r[sl] != '/')))
        return NULL;
    const char *name = sl ? r + sl + 1 : r;
    return strchr(name, '/') ? NULL : name;
}

/* Ranks found in subdirectory sub ("" = top) as prefix<N>suffix: checks
 * they are 0..N-1 with no gaps and non-empty. Returns N (0 if none), or -1
 * after setting c->why. */
long judge_rank_set(const struct judge_view *v, struct ckpt_checkpoint *c,
                    const char *sub, const char *prefix, const char *suffix)
{
    long max = -1, count = 0;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *name = name_in(v, i, sub);
        long k = name ? judge_rank_of(name, prefix, suffix) : -1;
        if (k < 0)
            continue;
        if (v->t->files[i].size == 0) {
            judge_set_why(c, "%s is empty", judge_file_rel(v, i));
            return -1;
        }
        count++;
        if (k > max)
            max = k;
    }
    if (count != max + 1) {
        char what[128];
        snprintf(what, sizeof(what), "%s%s%s*%s: %ld of %ld ranks present",
                 sub, *sub ? "/" : "", prefix, suffix, count, max + 1);
        judge_set_why(c, "%s", what);
        return -1;
    }
    return count;
}

int judge_json(const struct judge_view *v, const char *rel, cJSON **out,
               struct ckpt_err *err)
{
    char *full = ckpt_path_join(v->dir, rel);
    char *data;
    size_t len;
    int rc = ckpt_tree_read(v->t, full, JUDGE_META_MAX, &data, &len, err);
    free(full);
    if (rc != 0)
        return -1;
    *out = cJSON_ParseWithLength(data, len);
    free(data);
    return 0;
}

/* A reader over one file of the tree (pread, ranged GET, tar member
 * offsets). A failed read is an I/O error, never a verdict. */
struct tfile {
    struct ckpt_tree *t;
    const char *path;
};

static int tfile_read(void *ctx, uint64_t off, void *buf, size_t len,
                      struct ckpt_err *err)
{
    struct tfile *x = ctx;
    if (ckpt_tree_read_at(x->t, x->path, off, buf, len, NULL, err) == 0)
        return 0;
    if (err->code == CKPT_EFORMAT)
        err->code = CKPT_EIO;   /* shorter than listed: changed, not cut */
    return -1;
}

/* Whether file rel (a torch zip, or safetensors when st) is whole, from
 * its tail or header: JW_WHOLE, JW_CUT or JW_UNKNOWN with *msg (malloced),
 * or -1 (err). Members of a compressed archive would cost a pass over the
 * archive per read: there the archive's own end check stands for them. */
int judge_file_whole(const struct judge_view *v, const char *rel,
                     int st, char **msg,
                     struct ckpt_safetensors **hdr,
                     struct ckpt_err *err)
{
    const struct ckpt_tree_file *f = judge_get(v, rel);
    *msg = NULL;
    if (f->size == 0) {
        *msg = ckpt_xasprintf("%s is empty", rel);
        return JW_CUT;
    }
    char *full = ckpt_path_join(v->dir, rel);
    if (ckpt_tree_read_streams(v->t, full, 0, 1) ||
        ckpt_tree_read_streams(v->t, full, f->size - 1, 1)) {
        free(full);
        return JW_WHOLE;
    }
    struct tfile x = { v->t, full };
    struct ckpt_rd rd = { tfile_read, &x, 0, f->size, rel };
    struct ckpt_err e = CKPT_ERR_INIT;
    int rc;
    if (st) {
        struct ckpt_safetensors *s;
        rc = ckpt_safetensors_open(&s, &rd, &e);
        if (rc == 0 && hdr)
            *hdr = s;
        else if (rc == 0)
            ckpt_safetensors_free(s);
        else if (e.code == CKPT_EFORMAT)
            rc = JW_CUT;
    } else {
        rc = ckpt_tzip_whole(&rd, &e);
    }
    free(full);
    if (rc < 0 && e.code == CKPT_EUNSUPPORTED) {
        *msg = ckpt_xasprintf("%s: cannot verify", e.msg);
        return JW_UNKNOWN;
    }
    if (rc < 0) {
        *err = e;
        return -1;
    }
    if (rc == JW_CUT)
        *msg = ckpt_xstrdup(e.msg);
    return rc;
}

/* A file directly in sub ("" = top) named prefix<N>suffix (ranked: N is a
 * number) or prefix*suffix. */
int judge_has_file_like(const struct judge_view *v, const char *sub,
                        const char *prefix, const char *suffix, int ranked)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *name = name_in(v, i, sub);
        if (!name)
            continue;
        if (ranked ? judge_rank_of(name, prefix, suffix) >= 0
                   : ckpt_str_startswith(name, prefix) &&
                         ckpt_str_endswith(name, suffix))
            return 1;
    }
    return 0;
}

int judge_has_ranked(const struct judge_view *v, const char *sub,
                     const char *prefix, const char *suffix)
{
    return judge_has_file_like(v, sub, prefix, suffix, 1);
}

/* rel is sub/prefix<N>suffix (what a trainer's writer writes: owns). */
int judge_ranked_in(const char *rel, const char *sub, const char *prefix,
                    const char *suffix)
{
    size_t sl = strlen(sub);
    return !strncmp(rel, sub, sl) && rel[sl] == '/' &&
           judge_rank_of(rel + sl + 1, prefix, suffix) >= 0;
}

int judge_top_with(const char *rel, const char *const *suffixes)
{
    if (strchr(rel, '/'))
        return 0;
    for (const char *const *s = suffixes; *s; s++)
        if (ckpt_str_endswith(rel, *s))
            return 1;
    return 0;
}

int judge_dcp_file(const char *rel, const char *dir)
{
    size_t dl = strlen(dir);
    if (dl && (strncmp(rel, dir, dl) != 0 || rel[dl] != '/'))
        return 0;
    const char *name = dl ? rel + dl + 1 : rel;
    if (strchr(name, '/'))
        return 0;
    return !strcmp(name, ".metadata") || ckpt_str_endswith(name, ".distcp") ||
           (ckpt_str_startswith(name, "__") &&
            ckpt_str_endswith(name, ".metadata"));
}

void judge_incomplete(struct ckpt_checkpoint *c, const char *fmt,
                      const char *a)
{
    if (!c->complete && !c->unknown)
        return;   /* the first proof stands */
    judge_set_why(c, fmt, a);
    c->unknown = 0;
}

void judge_unknown(struct ckpt_checkpoint *c, const char *fmt,
                   const char *a)
{
    if (c->complete)
        judge_set_unknown(c, fmt, a);
}

void judge_missing(const struct judge_view *v, struct ckpt_checkpoint *c,
                   const char *rel, const char *why)
{
    char *m = ckpt_xasprintf("%s missing%s%s%s", rel, why ? " (" : "",
                             why ? why : "", why ? ")" : "");
    if (v->t->damage)
        judge_unknown(c, "%s", m);
    else
        judge_incomplete(c, "%s", m);
    free(m);
}

/* file_whole_hdr's answer as c's verdict (hdr may be NULL). */
static int whole_verdict(const struct judge_view *v, struct ckpt_checkpoint *c,
                         const char *rel, int st,
                         struct ckpt_safetensors **hdr, struct ckpt_err *err)
{
    char *msg;
    int w = judge_file_whole(v, rel, st, &msg, hdr, err);
    if (w < 0)
        return -1;
    if (w == JW_CUT)
        judge_incomplete(c, "%s", msg);
    else if (w == JW_UNKNOWN)
        judge_unknown(c, "%s", msg);
    free(msg);
    return 0;
}

int judge_whole(const struct judge_view *v, struct ckpt_checkpoint *c,
                const char *rel, int st, struct ckpt_err *err)
{
    return whole_verdict(v, c, rel, st, NULL, err);
}

int judge_whole_st(const struct judge_view *v, struct ckpt_checkpoint *c,
                   const char *rel, struct ckpt_safetensors **hdr,
                   struct ckpt_err *err)
{
    *hdr = NULL;
    return whole_verdict(v, c, rel, 1, hdr, err);
}

int judge_torch_pickle(const struct judge_view *v, const char *rel,
                       struct ckpt_arena *a, struct ckpt_pv **root,
                       char **why, struct ckpt_err *err)
{
    const struct ckpt_tree_file *f = judge_get(v, rel);
    char *full = ckpt_path_join(v->dir, rel);
    struct tfile x = { v->t, full };
    struct ckpt_rd rd = { tfile_read, &x, 0, f ? f->size : 0, rel };
    struct ckpt_err e = CKPT_ERR_INIT;
    struct ckpt_tzip *z = NULL;
    char *data = NULL;
    size_t len = 0;
    int rc = f && ckpt_tzip_open(&z, &rd, &e) == 0 ? 0 : 1;
    const struct ckpt_tzip_entry *ent =
        rc ? NULL : ckpt_tzip_find(z, "data.pkl");
    if (!rc && (!ent || ckpt_tzip_read(z, &rd, ent, CKPT_PICKLE_MAX_BYTES,
                                       &data, &len, &e) != 0))
        rc = 1;
    if (!rc) {
        struct ckpt_pickle_opts po = { .name = rel };
        if (ckpt_pickle_load(a, data, len, &po, root, NULL, &e) != 0)
            rc = 1;
    }
    free(data);
    if (z)
        ckpt_tzip_free(z);
    free(full);
    if (rc && e.code == CKPT_EIO) {
        *err = e;
        return -1;
    }
    if (rc)
        *why = e.code ? ckpt_xstrdup(e.msg)
                      : ckpt_xasprintf("%s: no data.pkl", rel);
    return rc;
}
