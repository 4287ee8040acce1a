/*
 * judge.c - which format a checkpoint directory holds and whether it is
 * complete. The rules are SPEC's table; each format's check is one short
 * function. Reasons for "incomplete" name the missing piece.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dcp.h"
#include "ckpt/orbax.h"
#include "ckpt/util.h"
#include "run_int.h"

#define META_MAX (256u << 20)

struct view {
    struct ckpt_tree *t;
    const char *dir;   /* the checkpoint directory */
    size_t lo, hi;     /* its files in t */
};

/* The file dir/rel of the checkpoint, or NULL. */
static const struct ckpt_tree_file *get(const struct view *v, const char *rel)
{
    char *p = ckpt_path_join(v->dir, rel);
    const struct ckpt_tree_file *f = ckpt_tree_find(v->t, p);
    free(p);
    return f && f->type != CKPT_ENTRY_DIR ? f : NULL;
}

static const char *rel_of(const struct view *v, size_t i)
{
    return ckpt_tree_rel(v->t, i, v->dir);
}

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int set_why(struct ckpt_checkpoint *c, const char *fmt, const char *a)
{
    free(c->why);
    c->why = ckpt_xasprintf(fmt, a);
    c->complete = 0;
    return 0;
}

/* Parse "rank<N>.pt" / "rank_<N>.safetensors" style names: rank number or
 * -1. */
static long rank_of(const char *name, const char *prefix, const char *suffix)
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

/* Ranks found in subdirectory sub ("" = top) as prefix<N>suffix: checks
 * they are 0..N-1 with no gaps and non-empty. Returns N (0 if none), or -1
 * after setting c->why. */
static long rank_set(const struct view *v, struct ckpt_checkpoint *c,
                     const char *sub, const char *prefix, const char *suffix)
{
    long max = -1, count = 0;
    size_t sl = strlen(sub);
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = rel_of(v, i);
        if (sl && (strncmp(r, sub, sl) != 0 || r[sl] != '/'))
            continue;
        const char *name = sl ? r + sl + 1 : r;
        if (strchr(name, '/'))
            continue;
        long k = rank_of(name, prefix, suffix);
        if (k < 0)
            continue;
        if (v->t->files[i].size == 0) {
            set_why(c, "%s is empty", r);
            return -1;
        }
        count++;
        if (k > max)
            max = k;
    }
    if (count != max + 1) {
        char what[128];
        snprintf(what, sizeof(what), "%s%s%s*%s: %ld of %ld ranks present",
                 sub, sl ? "/" : "", prefix, suffix, count, max + 1);
        set_why(c, "%s", what);
        return -1;
    }
    return count;
}

/* "world_size: N" from metadata.yaml, or -1. */
static long world_size(const char *yaml)
{
    const char *p = strstr(yaml, "world_size:");
    if (!p || (p != yaml && p[-1] != '\n'))
        return -1;
    p += strlen("world_size:");
    while (*p == ' ')
        p++;
    char *end;
    long n = strtol(p, &end, 10);
    return end == p || n < 0 ? -1 : n;
}

static int judge_olmo_local(const struct view *v, struct ckpt_checkpoint *c,
                            struct ckpt_err *err)
{
    long m = rank_set(v, c, "model", "rank", ".pt");
    long o = m < 0 ? -1 : rank_set(v, c, "optim", "rank", ".pt");
    long tr = o < 0 ? -1 : rank_set(v, c, "train", "rank", ".pt");
    if (tr < 0)
        return 0;
    if (m != o || o != tr)
        return set_why(c, "%s", "model/, optim/ and train/ rank counts "
                                "differ");
    /* OLMo writes metadata.yaml (world_size) with the rank files; a step
     * without it never finished saving. */
    if (!get(v, "metadata.yaml"))
        return set_why(c, "%s", "metadata.yaml missing");
    char *full = ckpt_path_join(v->dir, "metadata.yaml");
    char *data;
    size_t len;
    int rc = ckpt_tree_read(v->t, full, META_MAX, &data, &len, err);
    free(full);
    if (rc != 0)
        return -1;
    long ws = world_size(data);
    free(data);
    if (ws >= 0 && ws != m) {
        char what[96];
        snprintf(what, sizeof(what), "%ld of %ld ranks present", m, ws);
        set_why(c, "%s", what);
    }
    return 0;
}

static int judge_dcp(const struct view *v, struct ckpt_checkpoint *c,
                     const char *mdir, struct ckpt_err *err)
{
    char *mpath = ckpt_path_join(mdir, ".metadata");
    const struct ckpt_tree_file *m = get(v, mpath);
    if (!m) {
        set_why(c, "%s missing", mpath);
        free(mpath);
        return 0;
    }
    char *full = ckpt_path_join(v->dir, mpath);
    char *data;
    size_t len;
    int rc = ckpt_tree_read(v->t, full, META_MAX, &data, &len, err);
    if (rc == 0) {
        struct ckpt_dcp_filereq *req;
        size_t n;
        rc = ckpt_dcp_required_sizes(data, len, &req, &n, err);
        if (rc != 0)
            ckpt_err_prefix(err, "%s", full);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            char *rel = ckpt_path_join(mdir, req[i].name);
            const struct ckpt_tree_file *f = get(v, rel);
            if (!f)
                set_why(c, "%s missing", rel);
            else if (f->size < req[i].min_size)
                set_why(c, "%s truncated", rel);
            free(rel);
        }
        if (rc == 0)
            ckpt_dcp_filereqs_free(req, n);
        free(data);
    }
    free(full);
    free(mpath);
    return rc;
}

/* NeMo marks an unfinished checkpoint with a sibling "<name>-unfinished",
 * and so does `ckpt unshard` while it writes to object storage. A root
 * checkpoint (`ckpt ls s3://b/out`) has no sibling in the tree: its
 * marker is looked up in the storage. */
static int root_unfinished(const struct view *v)
{
    const char *k = v->t->key;
    size_t n = k ? strlen(k) : 0;
    if (v->t->archive != CKPT_ARCHIVE_NONE || !v->t->st || !n ||
        k[n - 1] == '/' || !strcmp(k, "."))
        return 0;
    char *p = ckpt_xasprintf("%s-unfinished", k);
    struct ckpt_stat sb;
    struct ckpt_err err;
    int r = ckpt_storage_stat(v->t->st, p, &sb, &err) == 0;
    free(p);
    return r;
}

static int nemo_unfinished(const struct view *v)
{
    if (!*v->dir)
        return root_unfinished(v);
    char *p = ckpt_xasprintf("%s-unfinished", v->dir);
    int r = ckpt_tree_find(v->t, p) != NULL;
    free(p);
    return r;
}

static int json_field(const struct view *v, const char *rel, cJSON **out,
                      struct ckpt_err *err)
{
    char *full = ckpt_path_join(v->dir, rel);
    char *data;
    size_t len;
    int rc = ckpt_tree_read(v->t, full, META_MAX, &data, &len, err);
    free(full);
    if (rc != 0)
        return -1;
    *out = cJSON_ParseWithLength(data, len);
    free(data);
    return 0;
}

static int judge_zarr(const struct view *v, struct ckpt_checkpoint *c,
                      struct ckpt_err *err)
{
    if (!get(v, ".zattrs"))
        return set_why(c, "%s", ".zattrs missing (write_completed not set)");
    cJSON *j;
    if (json_field(v, ".zattrs", &j, err) != 0)
        return -1;
    cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "write_completed");
    if (!cJSON_IsTrue(w))
        set_why(c, "%s", "write_completed is not true in .zattrs");
    cJSON_Delete(j);
    return 0;
}

/* Each OCDBT database (manifest.ocdbt outside ocdbt.process_*) must be
 * whole, inside archives too (plain tar members by ranged reads, a
 * compressed archive by a few more passes). A damaged archive's listing
 * may miss members, so nothing is judged missing there: markers only;
 * databases ckpt cannot read (CKPT_EUNSUPPORTED) by the markers too. */
static int judge_ocdbt(const struct view *v, struct ckpt_checkpoint *c,
                       struct ckpt_err *err)
{
    if (v->t->damage)
        return 0;
    for (size_t i = v->lo; i < v->hi && c->complete; i++) {
        const char *r = rel_of(v, i);
        if (strcmp(base_of(r), "manifest.ocdbt") ||
            strstr(r, "ocdbt.process_"))
            continue;
        char *db = ckpt_path_dirname(v->t->files[i].path);
        struct run_tio x;
        struct ckpt_orbax_io io;
        run_tree_io(&x, &io, v->t, db);
        struct ckpt_err e = CKPT_ERR_INIT;
        uint64_t nkeys;
        int rc = ckpt_ocdbt_check(&io, db, &nkeys, &e);
        free(db);
        /* Only a missing or short data file makes the step incomplete
         * (clean deletes those); a manifest or node ckpt cannot decode
         * is an error: when unsure, never delete. */
        if (rc == 1)
            set_why(c, "%s", e.msg);
        else if (rc != 0 && e.code != CKPT_EUNSUPPORTED) {
            *err = e;
            return -1;
        }
    }
    return 0;
}

/* Array data ckpt can read: an OCDBT manifest or a zarr array. */
static int has_arrays(const struct view *v)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *b = base_of(rel_of(v, i));
        if (!strcmp(b, "manifest.ocdbt") || !strcmp(b, ".zarray") ||
            !strcmp(b, "zarr.json"))
            return 1;
    }
    return 0;
}

/* No marker. Older Orbax committed by renaming the tmp directory and
 * wrote commit_success.txt only on GCS, so a step with arrays and no
 * marker may well be complete: unknown, never "incomplete" (clean would
 * delete it). A database found damaged is still incomplete. */
static int judge_unmarked(const struct view *v, struct ckpt_checkpoint *c,
                          struct ckpt_err *err)
{
    if (!has_arrays(v))
        return set_why(c, "%s", "no commit_success.txt or "
                                "_CHECKPOINT_METADATA");
    if (judge_ocdbt(v, c, err) != 0)
        return -1;
    if (!c->complete)
        return 0;
    c->unknown_commit = 1;
    return set_why(c, "%s", "no commit marker (older Orbax commits by "
                            "rename): cannot tell whether it is complete");
}

static int judge_orbax(const struct view *v, struct ckpt_checkpoint *c,
                       struct ckpt_err *err)
{
    if (strstr(c->name, ".orbax-checkpoint-tmp"))
        return set_why(c, "%s", "temporary orbax directory");
    /* Every directory holding ocdbt.process_* needs its merged manifest. */
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = rel_of(v, i);
        const char *op = strstr(r, "ocdbt.process_");
        if (!op || (op != r && op[-1] != '/'))
            continue;
        char *parent = ckpt_xstrndup(r, (size_t)(op - r));
        char *man = ckpt_xasprintf("%smanifest.ocdbt", parent);
        int ok = get(v, man) != NULL;
        if (!ok)
            set_why(c, "%s missing (per-process files not merged)", man);
        free(parent);
        free(man);
        if (!ok)
            return 0;
    }
    for (size_t i = v->lo; i < v->hi; i++)
        if (!strcmp(base_of(rel_of(v, i)), "commit_success.txt"))
            return judge_ocdbt(v, c, err);
    if (!get(v, "_CHECKPOINT_METADATA"))
        return judge_unmarked(v, c, err);
    cJSON *j;
    if (json_field(v, "_CHECKPOINT_METADATA", &j, err) != 0)
        return -1;
    cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "commit_timestamp_nsecs");
    if (!cJSON_IsNumber(ts))
        set_why(c, "%s", "_CHECKPOINT_METADATA has no commit_timestamp_nsecs");
    cJSON_Delete(j);
    return c->complete ? judge_ocdbt(v, c, err) : 0;
}

static int judge_olmo_core(const struct view *v, struct ckpt_checkpoint *c,
                           struct ckpt_err *err)
{
    static const char *subs[] = { "model", "optim" };
    for (size_t s = 0; s < 2; s++) {
        char *meta = ckpt_xasprintf("%s/metadata.json", subs[s]);
        cJSON *j = NULL;
        int rc = get(v, meta) ? json_field(v, meta, &j, err) : 0;
        if (rc != 0) {
            free(meta);
            return -1;
        }
        if (!j) {
            set_why(c, "%s missing or invalid", meta);
            free(meta);
            return 0;
        }
        free(meta);
        cJSON *tensors = cJSON_GetObjectItemCaseSensitive(j, "tensors");
        cJSON *tensor;
        cJSON_ArrayForEach(tensor, tensors) {
            /* Earlier OLMo-core wrote flattened_offsets_per_file. */
            cJSON *spec = cJSON_GetObjectItemCaseSensitive(
                tensor, "shard_spec_per_file");
            if (!spec)
                spec = cJSON_GetObjectItemCaseSensitive(
                    tensor, "flattened_offsets_per_file");
            cJSON *file;
            cJSON_ArrayForEach(file, spec) {
                char *rel = ckpt_xasprintf("%s/%s", subs[s], file->string);
                int ok = get(v, rel) != NULL;
                if (!ok)
                    set_why(c, "%s missing", rel);
                free(rel);
                if (!ok) {
                    cJSON_Delete(j);
                    return 0;
                }
            }
        }
        cJSON_Delete(j);
    }
    return 0;
}

static int judge_unsharded(const struct view *v, struct ckpt_checkpoint *c)
{
    static const char *names[] = {
        "model.pt", "model.safetensors", "checkpoint.pt", "optim.pt",
        "train.pt", "optim.safetensors",
    };
    int found = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const struct ckpt_tree_file *f = get(v, names[i]);
        if (!f)
            continue;
        if (f->size == 0)
            return set_why(c, "%s is empty", names[i]);
        found = 1;
    }
    if (!found)
        set_why(c, "%s", "no model file");
    return 0;
}

/* A file directly in sub ("" = top) named prefix<N>suffix (ranked: N is a
 * number) or prefix*suffix. */
static int has_file_like(const struct view *v, const char *sub,
                         const char *prefix, const char *suffix, int ranked)
{
    size_t sl = strlen(sub);
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = rel_of(v, i);
        if (sl && (strncmp(r, sub, sl) != 0 || r[sl] != '/'))
            continue;
        const char *name = sl ? r + sl + 1 : r;
        if (strchr(name, '/'))
            continue;
        if (ranked ? rank_of(name, prefix, suffix) >= 0
                   : ckpt_str_startswith(name, prefix) &&
                         ckpt_str_endswith(name, suffix))
            return 1;
    }
    return 0;
}

static int has_prefix_file(const struct view *v, const char *sub,
                           const char *prefix, const char *suffix)
{
    return has_file_like(v, sub, prefix, suffix, 1);
}

static enum ckpt_format detect(const struct view *v, const char **mdir)
{
    static const char *orbax[] = {
        "_CHECKPOINT_METADATA", "commit_success.txt", "manifest.ocdbt",
        "orbax.checkpoint",
    };
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = rel_of(v, i);
        const char *b = base_of(r);
        for (size_t k = 0; k < sizeof(orbax) / sizeof(orbax[0]); k++)
            if (!strcmp(b, orbax[k]))
                return CKPT_FMT_ORBAX;
        if (strstr(r, "ocdbt.process_"))
            return CKPT_FMT_ORBAX;
        /* An item's pytree metadata, "<item>/_METADATA": older Orbax
         * steps have no step-level marker. */
        const char *sl = strchr(r, '/');
        if (sl && sl == b - 1 && !strcmp(b, "_METADATA"))
            return CKPT_FMT_ORBAX;
        /* The item itself (`ckpt unshard STEP/default`). */
        if (v->dir[0] == '\0' && !strcmp(r, "_METADATA"))
            return CKPT_FMT_ORBAX;
    }
    static const char *dcpdirs[] = { "", "model_and_optim" };
    for (size_t d = 0; d < 2; d++) {
        *mdir = dcpdirs[d];
        char *m = ckpt_path_join(dcpdirs[d], ".metadata");
        int has = get(v, m) != NULL;
        free(m);
        if (has || has_file_like(v, dcpdirs[d], "__", ".distcp", 0) ||
            has_file_like(v, dcpdirs[d], "__", ".metadata", 0))
            return CKPT_FMT_DCP;
    }
    if (get(v, ".zgroup"))
        return CKPT_FMT_ZARR;
    if (has_prefix_file(v, "model", "rank_", ".safetensors"))
        return CKPT_FMT_OLMO_CORE;
    if (has_prefix_file(v, "model", "rank", ".pt") ||
        has_prefix_file(v, "optim", "rank", ".pt"))
        return CKPT_FMT_OLMO_LOCAL;
    if (has_prefix_file(v, "", "rank", ".pt"))
        return CKPT_FMT_OLMO_LEGACY;
    return CKPT_FMT_UNSHARDED;
}

enum ckpt_format ckpt_judge_format(const struct ckpt_tree *t,
                                   const char *dir)
{
    struct view v = { (struct ckpt_tree *)t, dir, 0, 0 };
    const char *mdir;
    ckpt_tree_range(t, dir, &v.lo, &v.hi);
    return v.lo < v.hi ? detect(&v, &mdir) : CKPT_FMT_UNKNOWN;
}

int ckpt_judge_checkpoint(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          struct ckpt_err *err)
{
    struct view v = { t, c->dir, 0, 0 };
    ckpt_tree_range(t, c->dir, &v.lo, &v.hi);
    for (size_t i = v.lo; i < v.hi; i++) {
        c->size += t->files[i].size;
        c->nfiles += t->files[i].type != CKPT_ENTRY_DIR;
    }
    c->complete = 1;
    if (!c->nfiles) {
        c->format = CKPT_FMT_UNKNOWN;
        return set_why(c, "%s", "empty");
    }
    const char *mdir = "";
    c->format = detect(&v, &mdir);
    if (nemo_unfinished(&v))
        return set_why(c, "%s", "marked unfinished");
    switch (c->format) {
    case CKPT_FMT_DCP:
        return judge_dcp(&v, c, mdir, err);
    case CKPT_FMT_OLMO_LEGACY:
        rank_set(&v, c, "", "rank", ".pt");
        return 0;
    case CKPT_FMT_OLMO_LOCAL:
        return judge_olmo_local(&v, c, err);
    case CKPT_FMT_OLMO_CORE:
        return judge_olmo_core(&v, c, err);
    case CKPT_FMT_ZARR:
        return judge_zarr(&v, c, err);
    case CKPT_FMT_ORBAX:
        return judge_orbax(&v, c, err);
    default:
        if (judge_unsharded(&v, c) == 0 && !c->complete &&
            !strcmp(c->why, "no model file"))
            c->format = CKPT_FMT_UNKNOWN;
        return 0;
    }
}
