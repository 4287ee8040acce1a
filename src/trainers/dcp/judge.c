/*
 * dcp/judge.c - torch DCP checkpoints (torch.distributed.checkpoint:
 * .metadata and the files it names; rank-local saves with __R.metadata),
 * OLMo torch_new steps among them (model_and_optim/).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dcp.h"
#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

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
    int rc = ckpt_tree_read(v->t, full, JUDGE_META_MAX, &data, &len, err);
    if (rc == 0) {
        struct ckpt_dcp_filereq *req;
        size_t n;
        rc = ckpt_dcp_required_sizes(data, len, &req, &n, err);
        if (rc != 0)
            ckpt_err_prefix(err, "%s", full);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            char *rel = ckpt_path_join(mdir, req[i].name);
            const struct ckpt_tree_file *f = judge_get(v, rel);
            if (!f)
                judge_set_why(c, "%s missing", rel);
            else if (f->size < req[i].min_size)
                judge_set_why(c, "%s truncated", rel);
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
            judge_set_why(c, "%s: the ranks' chunks do not cover it (a rank's "
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
        const char *r = judge_file_rel(v, i);
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
            k = judge_rank_of(head, "__", "");
            free(head);
        } else {
            k = judge_rank_of(name, "__", ".metadata");
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
        return judge_set_why(c, "%s", what);
    }
    if (dmax > mmax) {
        snprintf(what, sizeof(what), "%s%s__%ld.metadata missing (rank %ld "
                 "wrote data files)", mdir, *mdir ? "/" : "", dmax, dmax);
        return judge_set_why(c, "%s", what);
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
    const struct ckpt_tree_file *m = judge_get(v, mpath);
    if (!m) {
        /* A plain save without .metadata (written last, by the
         * coordinator) is an aborted one; a rank-local save has none. */
        int rc = 0;
        if (judge_has_file_like(v, mdir, "__", ".metadata", 0))
            rc = v->t->damage ? judge_set_unknown(c, "%s", "rank-local step "
                                                  "in a damaged archive")
                              : judge_dcp_rank_local(v, c, mdir, err);
        else
            judge_set_why(c, "%s missing", mpath);
        free(mpath);
        return rc;
    }
    free(mpath);
    return judge_dcp_meta(v, c, mdir, ".metadata", NULL, err);
}

/* The directory of the DCP checkpoint ("" or OLMo's "model_and_optim"),
 * or NULL when v holds none. */
static const char *dcp_dir(const struct judge_view *v)
{
    static const char *dirs[] = { "", "model_and_optim" };
    for (size_t d = 0; d < 2; d++) {
        char *m = ckpt_path_join(dirs[d], ".metadata");
        int has = judge_get(v, m) != NULL;
        free(m);
        if (has || judge_has_file_like(v, dirs[d], "__", ".distcp", 0) ||
            judge_has_file_like(v, dirs[d], "__", ".metadata", 0))
            return dirs[d];
    }
    return NULL;
}

int dcp_recognise(const struct judge_view *v)
{
    return dcp_dir(v) != NULL;
}

int dcp_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
              struct ckpt_err *err)
{
    return judge_dcp(v, c, dcp_dir(v), err);
}

int dcp_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    /* OLMo torch_new's trainer state; NeMo's common.pt */
    return judge_dcp_file(rel, "") || judge_dcp_file(rel, "model_and_optim") ||
           judge_ranked_in(rel, "train", "rank", ".pt") ||
           !strcmp(rel, "common.pt");
}

int judge_dcp_dir(const struct judge_view *v, struct ckpt_checkpoint *c,
                  const char *mdir, struct ckpt_err *err)
{
    if (!c->complete)
        return 0;
    return judge_dcp(v, c, mdir, err);
}
