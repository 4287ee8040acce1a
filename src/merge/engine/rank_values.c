/*
 * engine/rank_values.c - keys that every rank of a rank-local DCP checkpoint saved
 * (torch >= 2.9, use_collectives=False: each rank writes __R.metadata
 * naming its own items, nothing deduplicated). Replicated weights are the
 * same on every rank; RNG and dataloader states are not, and picking one
 * rank's silently would lose the others. So by default a key whose ranks
 * differ is an error naming it and the ranks; --rank-values rank0 keeps
 * the first rank's, per-rank keeps one key per rank, KEY.rankR
 * (docs/commands/unshard.md "Per-rank values").
 *
 * Byte items are compared here, before planning: their torch.save zips
 * record by record (data.pkl and the storages; serialization_id, which
 * torch >= 2.4 draws per save, is not a value). With per-rank, so are
 * tensors that every rank stored whole (a per-rank RNG state tensor).
 * Every other replica is compared element by element as it is copied
 * (engine/engine.c, src.rank_check), which names the first rank that differs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

#define MAX_ITEM (1ULL << 62)  /* decompressed; bounded by the scratch disk */
#define PIECE (1u << 20)

struct item {
    struct usrc *src;
    struct ckpt_rd rd;
    struct ckpt_tzip *z;
};

static int item_open(struct ujob *j, const struct ckpt_dcp_storage *st,
                     struct item *it, struct ckpt_err *err)
{
    uint64_t off, len;
    it->z = NULL;
    if (uns_src_item(j, st, MAX_ITEM, &it->src, &off, &len, err) != 0)
        return -1;
    uns_src_rd(&it->rd, it->src, off, len);
    return ckpt_tzip_open(&it->z, &it->rd, err);
}

/* Not part of the value: drawn per torch.save call. */
static int ignored(const char *name)
{
    return !strcmp(name, ".data/serialization_id");
}

static const struct ckpt_tzip_entry *next_rec(const struct ckpt_tzip *z,
                                              size_t *i)
{
    while (*i < z->n && ignored(z->entries[*i].name))
        (*i)++;
    return *i < z->n ? &z->entries[(*i)++] : NULL;
}

static int same_bytes(const struct item *a, const struct ckpt_tzip_entry *x,
                      const struct item *b, const struct ckpt_tzip_entry *y,
                      char *pa, char *pb, int *eq, struct ckpt_err *err)
{
    for (uint64_t o = 0; *eq && o < x->size; o += PIECE) {
        size_t n = x->size - o < PIECE ? (size_t)(x->size - o) : PIECE;
        if (ckpt_rd_read(&a->rd, x->data_off + o, pa, n, err) != 0 ||
            ckpt_rd_read(&b->rd, y->data_off + o, pb, n, err) != 0)
            return -1;
        *eq = memcmp(pa, pb, n) == 0;
    }
    return 0;
}

/* *eq: the two items hold the same records with the same bytes. */
static int items_equal(struct ujob *j, const struct ckpt_dcp_storage *sa,
                       const struct ckpt_dcp_storage *sb, int *eq,
                       struct ckpt_err *err)
{
    struct item a, b;
    b.z = NULL;
    int rc = item_open(j, sa, &a, err);
    if (rc == 0)
        rc = item_open(j, sb, &b, err);
    char *pa = ckpt_xmalloc(PIECE), *pb = ckpt_xmalloc(PIECE);
    size_t ia = 0, ib = 0;
    *eq = 1;
    while (rc == 0 && *eq) {
        const struct ckpt_tzip_entry *x = next_rec(a.z, &ia);
        const struct ckpt_tzip_entry *y = next_rec(b.z, &ib);
        if (!x || !y) {
            *eq = !x && !y;
            break;
        }
        *eq = !strcmp(x->name, y->name) && x->size == y->size;
        if (*eq)
            rc = same_bytes(&a, x, &b, y, pa, pb, eq, err);
    }
    free(pa);
    free(pb);
    ckpt_tzip_free(a.z);
    ckpt_tzip_free(b.z);
    return rc;
}

static int whole_chunks(const struct ckpt_dcp_entry *e)
{
    for (size_t c = 0; c < e->nchunks; c++)
        for (int d = 0; d < e->ndim; d++)
            if (e->chunks[c].offsets[d] || e->chunks[c].sizes[d] != e->size[d])
                return 0;
    return e->nchunks > 1;
}

/* Copy k (0: the first) of entry e: its storage and rank. */
static const struct ckpt_dcp_storage *copy_of(const struct ckpt_dcp_entry *e,
                                              size_t k, unsigned *part)
{
    if (e->kind == CKPT_DCP_TENSOR) {
        *part = e->chunks[k].part;
        return &e->chunks[k].st;
    }
    *part = k ? e->copies[k - 1].part : e->part;
    return k ? &e->copies[k - 1].st : &e->st;
}

static int differ_error(const char *what, const char *fqn, unsigned first,
                        const char *ranks, int several,
                        struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "%s '%s': rank%s %s saved %s "
                        "different from rank %u's (--rank-values rank0 "
                        "keeps rank %u's, per-rank keeps every rank's as "
                        "'%s.rankR')", what, fqn, several ? "s" : "", ranks,
                        several ? "values" : "a value", first, first, fqn);
}

/* Compare entry i's copies with the first; error, or split it. *grew: the
 * entries it became, less one. */
static int one_key(struct ujob *j, size_t i, size_t *grew,
                   struct ckpt_err *err)
{
    const struct ckpt_dcp_entry *e = &j->plan.meta->entries[i];
    size_t n = e->kind == CKPT_DCP_BYTES ? 1 + e->ncopies : e->nchunks;
    unsigned first, part;
    const struct ckpt_dcp_storage *s0 = copy_of(e, 0, &first);
    struct ckpt_buf ranks = CKPT_BUF_INIT;
    int ndiff = 0, rc = 0;
    *grew = 0;
    for (size_t k = 1; rc == 0 && k < n; k++) {
        int eq;
        const struct ckpt_dcp_storage *s = copy_of(e, k, &part);
        rc = items_equal(j, s0, s, &eq, err);
        if (rc == 0 && !eq)
            ckpt_buf_addf(&ranks, ndiff++ ? ", %u" : "%u", part);
    }
    if (rc != 0)
        ckpt_err_prefix(err, "%s '%s'", e->kind == CKPT_DCP_BYTES
                                            ? "object" : "tensor", e->fqn);
    else if (ndiff && j->o->rank_values == CKPT_RANK_VALUES_ERROR)
        rc = differ_error(e->kind == CKPT_DCP_BYTES ? "object" : "tensor",
                          e->fqn, first, ranks.ptr, ndiff > 1, err);
    else if (ndiff) {
        rc = ckpt_dcp_split_parts(j->plan.meta, i, err);
        *grew = n - 1;
    }
    ckpt_buf_release(&ranks);
    return rc;
}

int uns_rank_values(struct ujob *j, struct ckpt_err *err)
{
    if (!j->src.metaname || strcmp(j->src.metaname, "__R.metadata"))
        return 0;
    j->src.rank0 = j->o->rank_values == CKPT_RANK_VALUES_RANK0;
    if (j->src.rank0)
        return 0;
    j->src.rank_check = 1;
    int per_rank = j->o->rank_values == CKPT_RANK_VALUES_PER_RANK;
    for (size_t i = 0; i < j->plan.meta->n; i++) {
        const struct ckpt_dcp_entry *e = &j->plan.meta->entries[i];
        size_t grew;
        if (e->kind == CKPT_DCP_BYTES ? !e->ncopies
                                      : !(per_rank && whole_chunks(e)))
            continue;
        if (one_key(j, i, &grew, err) != 0) {
            ckpt_err_prefix(err, "%s", j->src.dir);
            return -1;
        }
        i += grew;
    }
    return 0;
}

int uns_rank_tensor_error(const struct ujob *j, const struct utensor *t,
                          const struct uchunk *c, struct ckpt_err *err)
{
    unsigned first = 0;
    for (size_t i = 0; i < t->e->nchunks; i++) {
        const struct uchunk *o = &t->chunks[i];
        if (o->skip)
            continue;
        int same = 1;
        for (int d = 0; d < t->e->ndim && same; d++)
            same = o->meta->offsets[d] == c->meta->offsets[d] &&
                   o->meta->sizes[d] == c->meta->sizes[d];
        if (same) {
            first = o->meta->part;
            break;
        }
    }
    /* A Megatron legacy step's replicated tensor (megatron/plan_legacy.c):
     * its ranks are directories, and no option keeps one copy. */
    if (j->plan.mg_legacy)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: tensor '%s' is "
                            "replicated across tensor-parallel ranks, but "
                            "'%s' (rank %u) holds different bytes from "
                            "rank %u's", j->src.dir, t->e->fqn,
                            c->meta->st.file, c->meta->part, first);
    char r[16];
    snprintf(r, sizeof(r), "%u", c->meta->part);
    int rc = differ_error("tensor", t->e->fqn, first, r, 0, err);
    ckpt_err_prefix(err, "%s", j->src.dir);
    return rc;
}
