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
#include "ckpt/torchfmt.h"
#include "ckpt/util.h"
#include "layout.h"
#include "run_int.h"

#define META_MAX (256u << 20)

/* The file dir/rel of the checkpoint, or NULL. */
static const struct ckpt_tree_file *get(const struct judge_view *v, const char *rel)
{
    char *p = ckpt_path_join(v->dir, rel);
    const struct ckpt_tree_file *f = ckpt_tree_find(v->t, p);
    free(p);
    return f && f->type != CKPT_ENTRY_DIR ? f : NULL;
}

static const char *rel_of(const struct judge_view *v, size_t i)
{
    return ckpt_tree_rel(v->t, i, v->dir);
}

/* rel_of for a file; NULL for a directory (an archive lists nested ones,
 * a directory's listing only those at its top). */
static const char *file_rel_of(const struct judge_view *v, size_t i)
{
    return v->t->files[i].type == CKPT_ENTRY_DIR ? NULL : rel_of(v, i);
}

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int has_file_like(const struct judge_view *v, const char *sub,
                         const char *prefix, const char *suffix, int ranked);

static int set_why(struct ckpt_checkpoint *c, const char *fmt, const char *a)
{
    free(c->why);
    c->why = ckpt_xasprintf(fmt, a);
    c->complete = 0;
    return 0;
}

/* Not judged: ckpt cannot tell (files it does not recognise or cannot
 * verify). Never "incomplete": clean would delete it. */
static int set_unknown(struct ckpt_checkpoint *c, const char *fmt,
                       const char *a)
{
    set_why(c, fmt, a);
    c->unknown = 1;
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
static long rank_set(const struct judge_view *v, struct ckpt_checkpoint *c,
                     const char *sub, const char *prefix, const char *suffix)
{
    long max = -1, count = 0;
    size_t sl = strlen(sub);
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = file_rel_of(v, i);
        if (!r || (sl && (strncmp(r, sub, sl) != 0 || r[sl] != '/')))
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

static int judge_olmo_local(const struct judge_view *v, struct ckpt_checkpoint *c,
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

/* One DCP metadata file mdir/mname: every file it names must be there and
 * long enough. */
static int judge_dcp_meta(const struct judge_view *v,
                          struct ckpt_checkpoint *c, const char *mdir,
                          const char *mname, struct ckpt_dcp_meta **all,
                          struct ckpt_err *err)
{
    char *mpath = ckpt_path_join(mdir, mname);
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
        /* The coverage check is extra proof: metadata it cannot merge
         * (a dtype ckpt does not know) only leaves it out. */
        struct ckpt_err e2 = CKPT_ERR_INIT;
        if (rc == 0 && all && *all &&
            ckpt_dcp_meta_add(*all, data, len, mpath, &e2) != 0) {
            ckpt_dcp_meta_free(*all);
            *all = NULL;
        }
        free(data);
    }
    free(full);
    free(mpath);
    return rc;
}

/* The volume of the distinct chunks of tensor e, or 0 when it cannot
 * be told (overflow). Chunks saved by several ranks (replicas) count
 * once: DCP chunks are identical or disjoint. */
static uint64_t chunk_volume(const struct ckpt_dcp_entry *e, int *ok)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < e->nchunks && *ok; i++) {
        const struct ckpt_dcp_chunk *a = &e->chunks[i];
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++) {
            const struct ckpt_dcp_chunk *b = &e->chunks[j];
            dup = !memcmp(a->offsets, b->offsets,
                          (size_t)e->ndim * sizeof(uint64_t)) &&
                  !memcmp(a->sizes, b->sizes,
                          (size_t)e->ndim * sizeof(uint64_t));
        }
        if (dup)
            continue;
        uint64_t vol = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (a->sizes[d] && vol > UINT64_MAX / a->sizes[d])
                *ok = 0;
            vol *= a->sizes[d];
        }
        if (sum > UINT64_MAX - vol)
            *ok = 0;
        sum += vol;
    }
    return sum;
}

/* Every tensor's distinct chunks, over all ranks, add up to the tensor:
 * a rank that saved nothing leaves its shards uncovered. */
static void rank_local_coverage(const struct ckpt_dcp_meta *m,
                                struct ckpt_checkpoint *c)
{
    for (size_t i = 0; i < m->n && c->complete; i++) {
        const struct ckpt_dcp_entry *e = &m->entries[i];
        if (e->kind != CKPT_DCP_TENSOR || e->nchunks > 4096)
            continue;
        int ok = 1;
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->size[d] && numel > UINT64_MAX / e->size[d])
                ok = 0;
            numel *= e->size[d];
        }
        uint64_t have = chunk_volume(e, &ok);
        if (ok && have < numel)
            set_why(c, "%s: the ranks' chunks do not cover it (a rank's "
                       "__R.metadata missing)", e->fqn);
    }
}

/* The highest N of files named prefix<N>suffix / prefix<N>_*suffix in
 * mdir, and their count (data files: distinct ranks not counted). */
static long rank_local_max(const struct judge_view *v, const char *mdir,
                           int data, long *count)
{
    size_t sl = strlen(mdir);
    long max = -1;
    *count = 0;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = file_rel_of(v, i);
        if (!r || (sl && (strncmp(r, mdir, sl) != 0 || r[sl] != '/')))
            continue;
        const char *name = sl ? r + sl + 1 : r;
        if (strchr(name, '/') || strncmp(name, "__", 2) != 0)
            continue;
        long k;
        if (data) {
            const char *u = strchr(name + 2, '_');
            if (!u || !ckpt_str_endswith(name, ".distcp"))
                continue;
            char *head = ckpt_xstrndup(name, (size_t)(u - name));
            k = rank_of(head, "__", "");
            free(head);
        } else {
            k = rank_of(name, "__", ".metadata");
        }
        if (k < 0)
            continue;
        (*count)++;
        if (k > max)
            max = k;
    }
    return max;
}

/* A rank-local save (torch >= 2.9, use_collectives=False): each rank
 * writes its data files, then its own __R.metadata naming them
 * (FileSystemWriter.finish per rank). Complete when the ranks' metadata
 * are 0..N-1 without a gap, every file each names is whole, no rank
 * wrote data without its metadata, and every tensor's chunks over all
 * ranks cover it (a last rank that wrote nothing leaves its shards
 * uncovered; replicated state is whole without it). */
static int judge_dcp_rank_local(const struct judge_view *v,
                                struct ckpt_checkpoint *c, const char *mdir,
                                struct ckpt_err *err)
{
    long nmeta, ndata;
    long mmax = rank_local_max(v, mdir, 0, &nmeta);
    long dmax = rank_local_max(v, mdir, 1, &ndata);
    char what[160];
    if (nmeta != mmax + 1) {
        snprintf(what, sizeof(what), "%s%s__R.metadata: %ld of %ld ranks "
                 "present", mdir, *mdir ? "/" : "", nmeta, mmax + 1);
        return set_why(c, "%s", what);
    }
    if (dmax > mmax) {
        snprintf(what, sizeof(what), "%s%s__%ld.metadata missing (rank %ld "
                 "wrote data files)", mdir, *mdir ? "/" : "", dmax, dmax);
        return set_why(c, "%s", what);
    }
    struct ckpt_dcp_meta *all = ckpt_dcp_meta_new();
    for (long r = 0; r <= mmax && c->complete; r++) {
        char name[48];
        snprintf(name, sizeof(name), "__%ld.metadata", r);
        if (judge_dcp_meta(v, c, mdir, name, &all, err) != 0) {
            ckpt_dcp_meta_free(all);
            return -1;
        }
    }
    if (c->complete && all)
        rank_local_coverage(all, c);
    ckpt_dcp_meta_free(all);
    return 0;
}

static int judge_dcp(const struct judge_view *v, struct ckpt_checkpoint *c,
                     const char *mdir, struct ckpt_err *err)
{
    char *mpath = ckpt_path_join(mdir, ".metadata");
    const struct ckpt_tree_file *m = get(v, mpath);
    if (!m) {
        /* A plain save without .metadata (written last, by the
         * coordinator) is an aborted one; a rank-local save has none. */
        int rc = 0;
        if (has_file_like(v, mdir, "__", ".metadata", 0))
            rc = v->t->damage ? set_unknown(c, "%s", "rank-local step in a "
                                            "damaged archive")
                              : judge_dcp_rank_local(v, c, mdir, err);
        else
            set_why(c, "%s missing", mpath);
        free(mpath);
        return rc;
    }
    free(mpath);
    return judge_dcp_meta(v, c, mdir, ".metadata", NULL, err);
}

/* NeMo marks an unfinished checkpoint with a sibling "<name>-unfinished",
 * and so does `ckpt unshard` while it writes to object storage. A root
 * checkpoint (`ckpt ls s3://b/out`) has no sibling in the tree: its
 * marker is looked up in the storage. */
static int root_unfinished(const struct judge_view *v)
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

static int nemo_unfinished(const struct judge_view *v)
{
    if (!*v->dir)
        return root_unfinished(v);
    char *p = ckpt_xasprintf("%s-unfinished", v->dir);
    int r = ckpt_tree_find(v->t, p) != NULL;
    free(p);
    return r;
}

static int json_field(const struct judge_view *v, const char *rel, cJSON **out,
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

static int judge_zarr(const struct judge_view *v, struct ckpt_checkpoint *c,
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
static int judge_ocdbt(const struct judge_view *v, struct ckpt_checkpoint *c,
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
static int has_arrays(const struct judge_view *v)
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
static int judge_unmarked(const struct judge_view *v, struct ckpt_checkpoint *c,
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
    return set_unknown(c, "%s", "no commit marker (older Orbax commits by "
                            "rename): cannot tell whether it is complete");
}

static int judge_orbax(const struct judge_view *v, struct ckpt_checkpoint *c,
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

static int judge_olmo_core(const struct judge_view *v, struct ckpt_checkpoint *c,
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

enum { W_WHOLE = 0, W_CUT, W_UNKNOWN };

/* Whether file rel (a torch zip, or safetensors when st) is whole, from
 * its tail or header: W_WHOLE, W_CUT or W_UNKNOWN with *msg (malloced),
 * or -1 (err). Members of a compressed archive would cost a pass over the
 * archive per read: there the archive's own end check stands for them. */
static int file_whole_hdr(const struct judge_view *v, const char *rel,
                          int st, char **msg,
                          struct ckpt_safetensors **hdr,
                          struct ckpt_err *err)
{
    const struct ckpt_tree_file *f = get(v, rel);
    *msg = NULL;
    if (f->size == 0) {
        *msg = ckpt_xasprintf("%s is empty", rel);
        return W_CUT;
    }
    char *full = ckpt_path_join(v->dir, rel);
    if (ckpt_tree_read_streams(v->t, full, 0, 1) ||
        ckpt_tree_read_streams(v->t, full, f->size - 1, 1)) {
        free(full);
        return W_WHOLE;
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
            rc = W_CUT;
    } else {
        rc = ckpt_tzip_whole(&rd, &e);
    }
    free(full);
    if (rc < 0 && e.code == CKPT_EUNSUPPORTED) {
        *msg = ckpt_xasprintf("%s: cannot verify", e.msg);
        return W_UNKNOWN;
    }
    if (rc < 0) {
        *err = e;
        return -1;
    }
    if (rc == W_CUT)
        *msg = ckpt_xstrdup(e.msg);
    return rc;
}

static int file_whole(const struct judge_view *v, const char *rel, int st,
                      char **msg, struct ckpt_err *err)
{
    return file_whole_hdr(v, rel, st, msg, NULL, err);
}

/* What judge_unsharded found: the first proof of incompleteness (cut) and
 * the first file it could not judge (unknown). */
struct ufind {
    char *cut, *unknown;
    int found;            /* a file ckpt knows the structure of */
};

static void note(struct ufind *u, int w, char *msg)
{
    char **slot = w == W_CUT ? &u->cut : &u->unknown;
    if (w != W_WHOLE && !*slot)
        *slot = msg;
    else
        free(msg);
}

/* A file the checkpoint lacks: proof, unless the listing may miss files
 * (a damaged archive). */
static void note_missing(const struct judge_view *v, struct ufind *u, char *msg)
{
    note(u, v->t->damage ? W_UNKNOWN : W_CUT, msg);
}

static int check_file(const struct judge_view *v, struct ufind *u, const char *rel,
                      int st, struct ckpt_err *err)
{
    char *msg;
    int w = file_whole(v, rel, st, &msg, err);
    if (w < 0)
        return -1;
    u->found = 1;
    note(u, w, msg);
    return 0;
}

/* A safetensors file torch DCP's HuggingFaceStorageWriter wrote without
 * save_distributed on several ranks (each rank writes the same file name
 * with its own rows, the last one stays) records where its rows sit in
 * __metadata__["DCP_SHARDING_INFO"]: a tensor saved at a non-zero offset
 * is part of a tensor, not the whole. *bytes: its tensors' bytes, *dcp:
 * whether it was written by a DCP writer (1), else 0. */
static int check_st_part(const struct judge_view *v, struct ufind *u,
                         const char *rel, uint64_t *bytes, int *dcp,
                         struct ckpt_err *err)
{
    struct ckpt_safetensors *h = NULL;
    char *msg;
    *bytes = 0;
    *dcp = 0;
    int w = file_whole_hdr(v, rel, 1, &msg, &h, err);
    if (w < 0)
        return -1;
    u->found = 1;
    note(u, w, msg);
    if (!h)
        return 0;   /* (cut, or in a compressed archive) */
    *dcp = h->dcp_sharding != NULL;
    for (size_t i = 0; i < h->n; i++) {
        const struct ckpt_safetensors_tensor *t = &h->tensors[i];
        uint64_t off[8];
        struct ckpt_err e = CKPT_ERR_INIT;
        *bytes += t->nbytes;
        int r = t->ndim <= 8 ? ckpt_safetensors_saved_offsets(h, t, off, rel,
                                                              &e) : 0;
        int part = 0;
        for (int d = 0; r == 1 && d < t->ndim; d++)
            part |= off[d] != 0;
        if (part)
            note(u, W_CUT, ckpt_xasprintf("%s holds part of tensor '%s' "
                                          "(DCP_SHARDING_INFO: saved at a "
                                          "non-zero offset)", rel, t->name));
        else if (r < 0)
            note(u, W_UNKNOWN, ckpt_xstrdup(e.msg));
    }
    ckpt_safetensors_free(h);
    return 0;
}

/* An index's total_size against the bytes of the tensors its shards
 * hold: torch DCP's HuggingFaceStorageWriter counts every rank's rows,
 * so less present than it says is proof of a part-saved tensor; HF's
 * own writers' totals are not checked against (unknown at most). */
static void check_total(const struct judge_view *v, struct ufind *u,
                        const char *rel, uint64_t have, int dcp)
{
    cJSON *j = NULL;
    struct ckpt_err e = CKPT_ERR_INIT;
    if (json_field(v, rel, &j, &e) != 0)
        return;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "metadata");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(m, "total_size");
    if (cJSON_IsNumber(ts) && ts->valuedouble > (double)have)
        note(u, dcp ? W_CUT : W_UNKNOWN,
             ckpt_xasprintf("%s: total_size %.0f, but its shards hold "
                            "%llu bytes of tensors", rel, ts->valuedouble,
                            (unsigned long long)have));
    cJSON_Delete(j);
}

/* Another trainer's torch.save file beside the weights (HF Trainer's
 * optimizer.pt, scheduler.pt, rng_state.pth, training_args.bin): a zip
 * cut short proves the step incomplete; a file that is no zip says
 * nothing (not every .bin is torch's). */
static int other_torch(const char *r, const char **known, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(r, known[i]))
            return 0;
    return ckpt_str_endswith(r, ".pt") || ckpt_str_endswith(r, ".pth") ||
           ckpt_str_endswith(r, ".bin");
}

static int check_other(const struct judge_view *v, struct ufind *u, const char *rel,
                       struct ckpt_err *err)
{
    char *msg;
    int w = file_whole(v, rel, 0, &msg, err);
    if (w < 0)
        return -1;
    note(u, w == W_CUT ? W_CUT : W_WHOLE, msg);
    return 0;
}

/* "NAME-0000K-of-0000N.safetensors" (or .bin): a shard of a split file. */
static int split_shard_of(const char *name, const char *suffix)
{
    const char *o = strstr(name, "-of-");
    size_t n = strlen(name), sl = strlen(suffix);
    if (!o || o - name < 6 || n < 5 + sl ||
        strcmp(name + n - sl, suffix) != 0)
        return 0;
    for (const char *p = o - 5; p < o; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    return o[-6] == '-';
}

static int split_shard(const char *name)
{
    return split_shard_of(name, ".safetensors");
}

/* HF's torch.save weights (save_pretrained with safe_serialization off,
 * transformers < 4.35's default): pytorch_model.bin, its shards
 * pytorch_model-0000K-of-0000N.bin, PEFT's adapter_model.bin. Zips since
 * torch 1.6, so judged strictly, as model.pt. */
static int hf_weights_bin(const char *name)
{
    return !strcmp(name, "pytorch_model.bin") ||
           !strcmp(name, "adapter_model.bin") ||
           (ckpt_str_startswith(name, "pytorch_model-") &&
            split_shard_of(name, ".bin"));
}

/* An index (`*.safetensors.index.json`, written by ckpt unshard and HF):
 * every shard its weight_map names must be here and whole. */
static int check_index(const struct judge_view *v, struct ufind *u, const char *rel,
                       struct ckpt_err *err)
{
    cJSON *j;
    if (json_field(v, rel, &j, err) != 0)
        return -1;
    u->found = 1;
    cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!cJSON_IsObject(map)) {
        note(u, W_CUT, ckpt_xasprintf("%s: no weight_map", rel));
        cJSON_Delete(j);
        return 0;
    }
    /* Each shard once, though many tensors name it. */
    cJSON *seen = cJSON_CreateObject(), *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') ||
            !*e->valuestring) {
            /* shards in subdirectories: not a layout ckpt or HF writes */
            note(u, W_UNKNOWN, ckpt_xasprintf("%s: a shard name ckpt does "
                                              "not judge", rel));
            break;
        }
        const char *s = e->valuestring;
        if (cJSON_GetObjectItemCaseSensitive(seen, s))
            continue;
        cJSON_AddTrueToObject(seen, s);
        if (!get(v, s))
            note_missing(v, u, ckpt_xasprintf("%s (named by %s) missing", s,
                                              rel));
    }
    cJSON_Delete(seen);
    cJSON_Delete(j);
    return 0;
}

/* The OLMo layout's model part, in either format (or --layout single's
 * checkpoint.pt). */
static int has_model(const struct judge_view *v)
{
    static const char *names[] = {
        "model.pt", "model.safetensors", "model.safetensors.index.json",
        "checkpoint.pt",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (get(v, names[i]))
            return 1;
    return 0;
}

/* Unsharded files are judged by their structure, not by being there:
 * every torch file is a whole zip, every safetensors file's header
 * parses and its tensors end at the file's end, every index names shards
 * that are here, and the OLMo layout has its model file. A directory with
 * none of these files is unknown: ckpt cannot judge it. */
static int judge_unsharded(const struct judge_view *v, struct ckpt_checkpoint *c,
                           struct ckpt_err *err)
{
    static const char *torch[] = {
        "model.pt", "checkpoint.pt", "optim.pt", "train.pt",
    };
    struct ufind u = { NULL, NULL, 0 };
    int rc = 0, split = 0, index = 0, splitb = 0, indexb = 0, dcp = 0;
    uint64_t st_bytes = 0;
    const char *st_index = NULL;
    for (size_t i = 0; rc == 0 && i < sizeof(torch) / sizeof(torch[0]); i++)
        if (get(v, torch[i]))
            rc = check_file(v, &u, torch[i], 0, err);
    for (size_t i = v->lo; rc == 0 && i < v->hi; i++) {
        const char *r = rel_of(v, i);
        if (strchr(r, '/') || v->t->files[i].type == CKPT_ENTRY_DIR)
            continue;
        if (ckpt_str_endswith(r, ".safetensors")) {
            uint64_t b = 0;
            int d = 0;
            split |= split_shard(r);
            rc = check_st_part(v, &u, r, &b, &d, err);
            st_bytes += b;
            dcp |= d;
        } else if (ckpt_str_endswith(r, ".safetensors.index.json")) {
            index = 1;
            st_index = r;
            rc = check_index(v, &u, r, err);
        } else if (hf_weights_bin(r)) {
            splitb |= split_shard_of(r, ".bin");
            rc = check_file(v, &u, r, 0, err);
        } else if (ckpt_str_endswith(r, ".bin.index.json")) {
            indexb = 1;
            rc = check_index(v, &u, r, err);
        } else if (other_torch(r, torch, sizeof(torch) / sizeof(torch[0]))) {
            rc = check_other(v, &u, r, err);
        }
    }
    if (rc == 0 && splitb && !indexb)
        note_missing(v, &u, ckpt_xstrdup("split pytorch_model-*.bin without "
                                         "pytorch_model.bin.index.json"));
    if (rc == 0 && split && !index)
        note_missing(v, &u, ckpt_xstrdup("split safetensors without their "
                                         "*.safetensors.index.json"));
    if (rc == 0 && st_index && !u.cut && !v->t->damage)
        check_total(v, &u, st_index, st_bytes, dcp);
    if (rc == 0 && !has_model(v) &&
        (get(v, "optim.pt") || get(v, "optim.safetensors") ||
         get(v, "train.pt")))
        note_missing(v, &u, ckpt_xstrdup("no model file (model.pt, "
                                         "model.safetensors) beside "
                                         "optim/train"));
    if (!u.found)
        c->format = CKPT_FMT_UNKNOWN;
    if (rc == 0 && u.cut)
        set_why(c, "%s", u.cut);
    else if (rc == 0 && u.unknown)
        set_unknown(c, "%s", u.unknown);
    else if (rc == 0 && !u.found)
        set_unknown(c, "%s", "no file ckpt recognises (model.pt, "
                             "*.safetensors, .metadata, ...)");
    free(u.cut);
    free(u.unknown);
    return rc;
}

/* A file directly in sub ("" = top) named prefix<N>suffix (ranked: N is a
 * number) or prefix*suffix. */
static int has_file_like(const struct judge_view *v, const char *sub,
                         const char *prefix, const char *suffix, int ranked)
{
    size_t sl = strlen(sub);
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = file_rel_of(v, i);
        if (!r || (sl && (strncmp(r, sub, sl) != 0 || r[sl] != '/')))
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

static int has_prefix_file(const struct judge_view *v, const char *sub,
                           const char *prefix, const char *suffix)
{
    return has_file_like(v, sub, prefix, suffix, 1);
}

/* --- judge.c's own formats, as entries of the layout table ------------ */

static int orbax_recognise(const struct judge_view *v)
{
    static const char *marks[] = {
        "_CHECKPOINT_METADATA", "commit_success.txt", "manifest.ocdbt",
        "orbax.checkpoint",
    };
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = rel_of(v, i);
        const char *b = base_of(r);
        for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++)
            if (!strcmp(b, marks[k]))
                return 1;
        if (strstr(r, "ocdbt.process_"))
            return 1;
        /* An item's pytree metadata, "<item>/_METADATA": older Orbax
         * steps have no step-level marker. */
        const char *sl = strchr(r, '/');
        if (sl && sl == b - 1 && !strcmp(b, "_METADATA"))
            return 1;
        /* The item itself (`ckpt unshard STEP/default`). */
        if (v->dir[0] == '\0' && !strcmp(r, "_METADATA"))
            return 1;
    }
    return 0;
}

/* The directory of the DCP checkpoint ("" or OLMo's "model_and_optim"),
 * or NULL when v holds none. */
static const char *dcp_dir(const struct judge_view *v)
{
    static const char *dirs[] = { "", "model_and_optim" };
    for (size_t d = 0; d < 2; d++) {
        char *m = ckpt_path_join(dirs[d], ".metadata");
        int has = get(v, m) != NULL;
        free(m);
        if (has || has_file_like(v, dirs[d], "__", ".distcp", 0) ||
            has_file_like(v, dirs[d], "__", ".metadata", 0))
            return dirs[d];
    }
    return NULL;
}

static int dcp_recognise(const struct judge_view *v)
{
    return dcp_dir(v) != NULL;
}

static int dcp_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                     struct ckpt_err *err)
{
    return judge_dcp(v, c, dcp_dir(v), err);
}

static int zarr_recognise(const struct judge_view *v)
{
    return get(v, ".zgroup") != NULL;
}

static int olmo_core_recognise(const struct judge_view *v)
{
    return has_prefix_file(v, "model", "rank_", ".safetensors");
}

static int olmo_local_recognise(const struct judge_view *v)
{
    return has_prefix_file(v, "model", "rank", ".pt") ||
           has_prefix_file(v, "optim", "rank", ".pt");
}

static int olmo_legacy_recognise(const struct judge_view *v)
{
    return has_prefix_file(v, "", "rank", ".pt");
}

static int olmo_legacy_judge(const struct judge_view *v,
                             struct ckpt_checkpoint *c, struct ckpt_err *err)
{
    (void)err;
    rank_set(v, c, "", "rank", ".pt");
    return 0;
}

/* Last in the table: whatever no other layout claims is judged as
 * unsharded files, by their structure (unknown when none is known). */
static int plain_recognise(const struct judge_view *v)
{
    (void)v;
    return 1;
}

/* What each layout's writer writes (layout.h, owns). */
static int ranked_in(const char *rel, const char *sub, const char *prefix,
                     const char *suffix)
{
    size_t sl = strlen(sub);
    return !strncmp(rel, sub, sl) && rel[sl] == '/' &&
           rank_of(rel + sl + 1, prefix, suffix) >= 0;
}

static int dcp_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    /* OLMo torch_new's trainer state; NeMo's common.pt */
    return judge_dcp_file(rel, "") || judge_dcp_file(rel, "model_and_optim") ||
           ranked_in(rel, "train", "rank", ".pt") || !strcmp(rel, "common.pt");
}

static int olmo_core_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    return ranked_in(rel, "model", "rank_", ".safetensors") ||
           ranked_in(rel, "optim", "rank_", ".safetensors") ||
           ranked_in(rel, "train", "rank", ".pt");
}

static int olmo_local_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    return ranked_in(rel, "model", "rank", ".pt") ||
           ranked_in(rel, "optim", "rank", ".pt") ||
           ranked_in(rel, "train", "rank", ".pt");
}

static int olmo_legacy_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    return !strchr(rel, '/') && rank_of(rel, "rank", ".pt") >= 0;
}

/* judge_unsharded judges every torch and safetensors file at the top. */
static int plain_owns(const struct judge_view *v, const char *rel)
{
    static const char *const sfx[] = { ".safetensors", ".pt", ".pth", ".bin",
                                       NULL };
    (void)v;
    return judge_top_with(rel, sfx);
}

const struct judge_layout judge_layout_orbax = {
    "orbax", CKPT_FMT_ORBAX, orbax_recognise, judge_orbax, NULL, NULL,
};
const struct judge_layout judge_layout_dcp = {
    "dcp", CKPT_FMT_DCP, dcp_recognise, dcp_judge, NULL, dcp_owns,
};
const struct judge_layout judge_layout_zarr = {
    "zarr", CKPT_FMT_ZARR, zarr_recognise, judge_zarr, NULL, NULL,
};
const struct judge_layout judge_layout_olmo_core = {
    "olmo-core", CKPT_FMT_OLMO_CORE, olmo_core_recognise, judge_olmo_core,
    NULL, olmo_core_owns,
};
const struct judge_layout judge_layout_olmo_local = {
    "olmo-local", CKPT_FMT_OLMO_LOCAL, olmo_local_recognise,
    judge_olmo_local, NULL, olmo_local_owns,
};
const struct judge_layout judge_layout_olmo_legacy = {
    "olmo-legacy", CKPT_FMT_OLMO_LEGACY, olmo_legacy_recognise,
    olmo_legacy_judge, NULL, olmo_legacy_owns,
};
const struct judge_layout judge_layout_plain = {
    "unsharded", CKPT_FMT_UNSHARDED, plain_recognise, judge_unsharded, NULL,
    plain_owns,
};

enum ckpt_format ckpt_judge_format(const struct ckpt_tree *t,
                                   const char *dir)
{
    struct judge_view v = { (struct ckpt_tree *)t, dir, 0, 0, 0 };
    ckpt_tree_range(t, dir, &v.lo, &v.hi);
    if (v.lo >= v.hi)
        return CKPT_FMT_UNKNOWN;
    const struct judge_layout *L = judge_layout_find(&v);
    return L->format_of ? L->format_of(&v) : L->format;
}

/* Record in c the files of v that L's judgement does not cover: not
 * regular (special), or neither owned by L nor debris (foreign). Paths
 * are the run's. */
static void find_foreign(const struct judge_view *v, const struct judge_layout *L,
                         struct ckpt_checkpoint *c)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const struct ckpt_tree_file *f = &v->t->files[i];
        if (f->type == CKPT_ENTRY_DIR)
            continue;
        const char *rel = v->one_file ? "" : rel_of(v, i);
        int special = f->type != CKPT_ENTRY_FILE;
        if (special) {
            if (!c->nspecial++)
                c->special = ckpt_xstrdup(f->path);
        } else if (v->one_file || !L->owns || L->owns(v, rel) ||
                   ckpt_debris(f->path, f)) {
            continue;
        }
        if (!c->nforeign++)
            c->foreign = ckpt_xstrdup(f->path);
    }
}

int ckpt_judge_recognised(const struct ckpt_tree *t, const char *dir)
{
    struct judge_view v = { (struct ckpt_tree *)t, dir, 0, 0, 0 };
    ckpt_tree_range(t, dir, &v.lo, &v.hi);
    if (v.lo >= v.hi)
        return 0;
    const struct judge_layout *L = judge_layout_find(&v);
    /* (rank<N>.pt alone is too common a name to stand for OLMo) */
    if (L == &judge_layout_olmo_legacy)
        return 0;
    if (L != &judge_layout_plain)
        return 1;
    /* the weights files judge_unsharded knows by name (not any .bin:
     * token data is .bin too) */
    static const char *const known[] = {
        "model.pt", "checkpoint.pt", "optim.pt", "train.pt", NULL
    };
    for (size_t i = v.lo; i < v.hi; i++) {
        const char *r = rel_of(&v, i);
        int k = 0;
        for (const char *const *n = known; *n && !k; n++)
            k = !strcmp(r, *n);
        if (t->files[i].type == CKPT_ENTRY_FILE && !strchr(r, '/') &&
            (k || ckpt_str_endswith(r, ".safetensors") || hf_weights_bin(r)))
            return 1;
    }
    return 0;
}

/* A checkpoint that is one file (Lightning's "epoch=0-step=100.ckpt"):
 * judged as the view of its directory holding that file alone. */
static int judge_one_file(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          const struct ckpt_tree_file *f,
                          struct ckpt_err *err)
{
    const char *slash = strrchr(c->dir, '/');
    char *parent = ckpt_xstrndup(c->dir, slash ? (size_t)(slash - c->dir)
                                               : 0);
    struct judge_view v = { t, parent, (size_t)(f - t->files),
                            (size_t)(f - t->files) + 1, 1 };
    c->size = f->size;
    c->nfiles = 1;
    c->complete = 1;
    const struct judge_layout *L = judge_layout_find(&v);
    c->format = L->format;
    int rc = L->judge(&v, c, err);
    find_foreign(&v, L, c);
    free(parent);
    return rc;
}

int ckpt_judge_checkpoint(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          struct ckpt_err *err)
{
    struct judge_view v = { t, c->dir, 0, 0, 0 };
    const struct ckpt_tree_file *f = *c->dir ? ckpt_tree_find(t, c->dir)
                                             : NULL;
    if (f && f->type == CKPT_ENTRY_FILE)
        return judge_one_file(t, c, f, err);
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
    const struct judge_layout *L = judge_layout_find(&v);
    c->format = L->format;
    find_foreign(&v, L, c);
    if (nemo_unfinished(&v))
        set_why(c, "%s", "marked unfinished");
    else if (L->judge(&v, c, err) != 0)
        return -1;   /* (a FIFO it had to read: an error naming it) */
    /* A FIFO, socket, device or link where a file belongs says nothing
     * about the checkpoint (a FIFO has size 0: "empty" would be false
     * proof): whatever the layout concluded, ckpt cannot tell. */
    if (c->special)
        set_unknown(c, "%s is not a regular file", c->special);
    return 0;
}

/* ckpt's unshard writes model.pt, optim.pt and train.pt for an OLMo step;
 * OLMo's own unsharder the same, or model.pt alone (--model-only, which
 * leaves out optimizer and trainer state together): a copy of one with
 * optim.pt but no train.pt was cut short. */
void ckpt_judge_olmo_copy(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          const struct ckpt_checkpoint *src)
{
    struct judge_view v = { t, c->dir, 0, 0, 0 };
    struct judge_view s = { t, src->dir, 0, 0, 0 };
    int olmo = src->format == CKPT_FMT_OLMO_LEGACY ||
               src->format == CKPT_FMT_OLMO_LOCAL ||
               src->format == CKPT_FMT_OLMO_CORE ||
               (src->format == CKPT_FMT_DCP &&
                (get(&s, "model_and_optim/.metadata") ||
                 has_file_like(&s, "model_and_optim", "__", ".metadata", 0)));
    if (!olmo || !c->complete || c->format != CKPT_FMT_UNSHARDED ||
        t->damage || !get(&v, "model.pt") || !get(&v, "optim.pt") ||
        get(&v, "train.pt"))
        return;
    set_why(c, "%s", "train.pt missing (an OLMo step's unsharded copy with "
                     "optim.pt has train.pt)");
}

/* --- helpers for the layouts (layout.h) -------------------------------- */

const struct ckpt_tree_file *judge_get(const struct judge_view *v,
                                       const char *rel)
{
    return get(v, rel);
}

const char *judge_rel(const struct judge_view *v, size_t i)
{
    return rel_of(v, i);
}

long judge_rank_of(const char *name, const char *prefix, const char *suffix)
{
    return rank_of(name, prefix, suffix);
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
    set_why(c, fmt, a);
    c->unknown = 0;
}

void judge_unknown(struct ckpt_checkpoint *c, const char *fmt,
                   const char *a)
{
    if (c->complete)
        set_unknown(c, fmt, a);
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
    int w = file_whole_hdr(v, rel, st, &msg, hdr, err);
    if (w < 0)
        return -1;
    if (w == W_CUT)
        judge_incomplete(c, "%s", msg);
    else if (w == W_UNKNOWN)
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

int judge_dcp_dir(const struct judge_view *v, struct ckpt_checkpoint *c,
                  const char *mdir, struct ckpt_err *err)
{
    if (!c->complete)
        return 0;
    return judge_dcp(v, c, mdir, err);
}

int judge_torch_pickle(const struct judge_view *v, const char *rel,
                       struct ckpt_arena *a, struct ckpt_pv **root,
                       char **why, struct ckpt_err *err)
{
    const struct ckpt_tree_file *f = get(v, rel);
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

int judge_plain(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err)
{
    return judge_unsharded(v, c, err);
}
