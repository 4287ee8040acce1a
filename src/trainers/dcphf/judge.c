/*
 * dcphf/judge.c - torch DCP's HuggingFaceStorageWriter with
 * save_distributed=True (torch/distributed/checkpoint/hf_storage.py,
 * _hf_utils.py, _consolidate_hf_safetensors.py): every rank R writes
 * shard-RRRRR-model-KKKKK-of-NNNNN.safetensors for each output file K its
 * tensors map to, each tensor with its offset in __metadata__
 * ["DCP_SHARDING_INFO"]. No .metadata, no index: finish() writes nothing
 * more, unless enable_consolidation, where the shards go to sharded/ and
 * finish() (run by the coordinator once every rank's writes came back)
 * merges them into model-KKKKK-of-NNNNN.safetensors (every header first,
 * then the data) and model.safetensors.index.json last.
 *
 * What the files prove (judging reads each shard's tail and header, no
 * data), as docs/formats/dcp.md explains:
 *  - a shard cut short, or the chunks of a tensor leaving a gap (a shard
 *    missing from the middle; what `ckpt unshard` refuses): incomplete;
 *  - files that disagree (dtype, rank, overlapping chunks, -of-NNNNN):
 *    unknown, unshard refuses them too;
 *  - a consistent set: unknown. Nothing written records the world size or
 *    a tensor's full shape; torch's own reader and consolidation take each
 *    tensor to be as large as the chunks found reach, so a missing last
 *    rank's shards cannot be seen, by torch or by ckpt;
 *  - the consolidated form: complete when its files and index are whole
 *    (finish() ran after every rank wrote); a consolidation cut short
 *    over whole shards in sharded/ is unknown (never licenses a delete),
 *    and `ckpt unshard` reads sharded/.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

/* "shard-RRRRR-model-KKKKK-of-NNNNN.safetensors": 1 with K and N. */
static int shard_name(const char *r, long *k, long *n)
{
    long v[3];
    const char *pre[3] = { "shard-", "-model-", "-of-" };
    const char *p = r;
    if (strchr(r, '/'))
        return 0;
    for (int i = 0; i < 3; i++) {
        size_t pl = strlen(pre[i]);
        if (strncmp(p, pre[i], pl) != 0)
            return 0;
        p += pl;
        v[i] = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 9) {
            v[i] = v[i] * 10 + (*p++ - '0');
            digits++;
        }
        if (digits < 5 || v[i] < 1)
            return 0;
    }
    if (strcmp(p, ".safetensors") != 0)
        return 0;
    *k = v[1];
    *n = v[2];
    return 1;
}

/* The name of rel inside sub ("" = top), or NULL when rel is not
 * directly in sub. */
static const char *in_sub(const char *rel, const char *sub)
{
    size_t sl = strlen(sub);
    if (sl && (strncmp(rel, sub, sl) != 0 || rel[sl] != '/'))
        return NULL;
    const char *name = sl ? rel + sl + 1 : rel;
    return strchr(name, '/') ? NULL : name;
}

static int has_shards(const struct judge_view *v, const char *sub)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *name = in_sub(judge_rel(v, i), sub);
        long k, n;
        if (v->t->files[i].type == CKPT_ENTRY_FILE && name &&
            shard_name(name, &k, &n))
            return 1;
    }
    return 0;
}

int dcp_hf_recognise(const struct judge_view *v)
{
    return (has_shards(v, "") || has_shards(v, "sharded")) &&
           !judge_get(v, ".metadata");
}

/* One tensor of one file: a chunk of the tensor of that name. */
struct piece {
    const struct ckpt_safetensors_tensor *t;
    uint64_t *off;          /* saved_offsets, t->ndim */
    const char *file;
};

static int by_box(const void *a, const void *b)
{
    const struct piece *x = a, *y = b;
    int c = strcmp(x->t->name, y->t->name);
    if (c || x->t->ndim != y->t->ndim)
        return c ? c : (x->t->ndim < y->t->ndim ? -1 : 1);
    for (int d = 0; d < x->t->ndim; d++)
        if (x->off[d] != y->off[d])
            return x->off[d] < y->off[d] ? -1 : 1;
    return 0;
}

static int boxes_meet(const struct piece *a, const struct piece *b)
{
    for (int d = 0; d < a->t->ndim; d++)
        if (a->off[d] >= b->off[d] + b->t->shape[d] ||
            b->off[d] >= a->off[d] + a->t->shape[d])
            return 0;
    return 1;
}

/* The chunks p[0..n) of one tensor, as `ckpt unshard` checks them
 * (src/merge/engine/plan.c coverage): same dtype and rank, no two overlapping,
 * and together as many elements as the tensor spans (its size: as far as
 * they reach, as torch's HuggingFaceStorageReader reads it). A gap is
 * proof; the rest says the files disagree. */
static void tile(struct ckpt_checkpoint *c, const struct piece *p, size_t n)
{
    const char *name = p[0].t->name;
    int nd = p[0].t->ndim;
    uint64_t size[64] = { 0 }, covered = 0, total = 1;
    for (size_t i = 0; i < n; i++) {
        if (p[i].t->dtype != p[0].t->dtype || p[i].t->ndim != nd || nd > 64) {
            judge_unknown(c, "tensor '%s': files disagree on its dtype or "
                             "rank", name);
            return;
        }
        uint64_t vol = 1;
        for (int d = 0; d < nd; d++) {
            uint64_t hi;
            if (ckpt_add_u64(p[i].off[d], p[i].t->shape[d], &hi) != 0) {
                judge_unknown(c, "tensor '%s': saved_offsets overflow", name);
                return;
            }
            size[d] = hi > size[d] ? hi : size[d];
            vol *= p[i].t->shape[d];   /* numel: checked by the parser */
        }
        if (!vol)
            continue;
        for (size_t k = i + 1; k < n; k++) {
            if (nd && p[k].off[0] >= p[i].off[0] + p[i].t->shape[0])
                break;
            if (p[k].t->numel && boxes_meet(&p[i], &p[k])) {
                judge_unknown(c, "tensor '%s': chunks overlap (files of two "
                                 "saves?)", name);
                return;
            }
        }
        covered += vol;
    }
    for (int d = 0; d < nd; d++)
        if (__builtin_mul_overflow(total, size[d], &total)) {
            judge_unknown(c, "tensor '%s': too large", name);
            return;
        }
    if (covered != total) {
        char *m = ckpt_xasprintf("tensor '%s': chunks cover %llu of %llu "
                                 "elements (a shard file is missing)", name,
                                 (unsigned long long)covered,
                                 (unsigned long long)total);
        judge_incomplete(c, "%s", m);
        free(m);
    }
}

struct set {
    struct ckpt_safetensors **hdr;
    size_t nhdr;
    struct piece *p;
    size_t n, cap;
};

static void set_free(struct set *s)
{
    for (size_t i = 0; i < s->nhdr; i++)
        ckpt_safetensors_free(s->hdr[i]);
    for (size_t i = 0; i < s->n; i++)
        free(s->p[i].off);
    free(s->hdr);
    free(s->p);
}

/* The chunks of file rel (header h) into s; unknown (and -1: the set
 * lacks chunks) when its sharding info is malformed. */
static int add_pieces(struct ckpt_checkpoint *c, struct set *s,
                      const struct ckpt_safetensors *h, const char *rel)
{
    for (size_t i = 0; i < h->n; i++) {
        const struct ckpt_safetensors_tensor *t = &h->tensors[i];
        uint64_t *off = ckpt_xcalloc((size_t)t->ndim + 1, sizeof(*off));
        struct ckpt_err e = CKPT_ERR_INIT;
        if (ckpt_safetensors_saved_offsets(h, t, off, rel, &e) < 0) {
            judge_unknown(c, "%s", e.msg);
            free(off);
            return -1;
        }
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 64;
            s->p = ckpt_xreallocarray(s->p, s->cap, sizeof(*s->p));
        }
        s->p[s->n++] = (struct piece){ t, off, rel };
    }
    return 0;
}

/* The shard set directly in sub ("" or "sharded"): every *.safetensors
 * file there, as `ckpt unshard` reads them. Leaves c complete only when
 * every file is whole and every tensor's chunks tile it. */
static int judge_set(const struct judge_view *v, struct ckpt_checkpoint *c,
                     const char *sub, struct ckpt_err *err)
{
    struct set s = { NULL, 0, NULL, 0, 0 };
    long files = -1;
    int rc = 0, partial = 0;   /* a file's chunks not all read: no gap
                                  proof from the others */
    s.hdr = ckpt_xcalloc(v->hi - v->lo + 1, sizeof(*s.hdr));
    for (size_t i = v->lo; rc == 0 && i < v->hi; i++) {
        const char *r = judge_rel(v, i), *name = in_sub(r, sub);
        long k, n;
        if (v->t->files[i].type != CKPT_ENTRY_FILE || !name ||
            !ckpt_str_endswith(name, ".safetensors"))
            continue;
        if (shard_name(name, &k, &n)) {
            if (files >= 0 && n != files)
                judge_unknown(c, "%s", "shard files name different numbers "
                                       "of output files (-of-NNNNN)");
            else if (k > n)
                judge_unknown(c, "%s: output file number above the count", r);
            files = n;
        }
        int was_c = c->complete, was_u = c->unknown;
        struct ckpt_safetensors *h;
        if ((rc = judge_whole_st(v, c, r, &h, err)) != 0)
            continue;
        if (!c->complete && !c->unknown) {
            ckpt_safetensors_free(h);
            break;                  /* cut short: proof */
        }
        if (c->complete != was_c || c->unknown != was_u) {
            ckpt_safetensors_free(h);
            partial = 1;            /* not a file ckpt can read */
            continue;
        }
        if (!h) {
            judge_unknown(c, "%s: in a compressed archive (its header is not "
                             "read)", r);
            partial = 1;
            continue;
        }
        s.hdr[s.nhdr++] = h;
        partial |= add_pieces(c, &s, h, r) != 0;
    }
    if (rc == 0 && !partial && s.n) {  /* (qsort wants an array) */
        qsort(s.p, s.n, sizeof(*s.p), by_box);
        for (size_t i = 0, j; i < s.n; i = j) {
            for (j = i + 1; j < s.n && !strcmp(s.p[j].t->name, s.p[i].t->name);)
                j++;
            tile(c, &s.p[i], j - i);
        }
    }
    set_free(&s);
    return rc;
}

/* The consolidated form: torch's model-*-of-* + index judged as whole
 * files; when they are not, the shards in sharded/ decide. */
static int judge_consolidated(const struct judge_view *v,
                              struct ckpt_checkpoint *c, struct ckpt_err *err)
{
    if (judge_plain(v, c, err) != 0)
        return -1;
    if (c->complete) {
        c->format = CKPT_FMT_UNSHARDED;
        return 0;
    }
    int proven = !c->unknown;
    char *cwhy = c->why;
    c->why = NULL;
    c->complete = 1;
    c->unknown = 0;
    int rc = judge_set(v, c, "sharded", err);
    if (rc == 0 && c->complete) {
        char *m = ckpt_xasprintf("consolidation cut short (%s); sharded/ "
                                 "holds the whole shards", cwhy);
        judge_unknown(c, "%s", m);
        free(m);
    } else if (rc == 0 && !c->unknown && !proven) {
        /* the shards are broken, the consolidated files not judged */
        char *m = ckpt_xasprintf("%s", cwhy);
        c->complete = 1;
        judge_unknown(c, "%s", m);
        free(m);
    } else if (rc == 0 && !c->unknown) {
        char *m = ckpt_xasprintf("%s; consolidated copy: %s", c->why, cwhy);
        free(c->why);
        c->why = m;
    }
    free(cwhy);
    return rc;
}

int dcp_hf_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                 struct ckpt_err *err)
{
    if (!has_shards(v, ""))
        return judge_consolidated(v, c, err);
    if (judge_set(v, c, "", err) != 0)
        return -1;
    judge_unknown(c, "%s", "shards consistent, but nothing written "
                           "records the world size: a missing last rank "
                           "cannot be seen (torch's reader cannot tell "
                           "either)");
    return 0;
}

/* The shards and consolidated files at the top, the shards moved to
 * sharded/. */
int dcp_hf_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    if (ckpt_str_startswith(rel, "sharded/"))
        rel += strlen("sharded/");
    return !strchr(rel, '/') && ckpt_str_endswith(rel, ".safetensors");
}
