/*
 * dcphf/plan.c - a directory of safetensors files read as torch DCP's
 * HuggingFaceStorageReader reads it (torch/distributed/checkpoint/
 * hf_storage.py read_metadata; docs/formats/dcp.md): every *.safetensors
 * file at its top, every tensor in it one chunk of the tensor of that
 * name, placed at the "saved_offsets" its file's
 * __metadata__["DCP_SHARDING_INFO"] records (at the origin without one),
 * the tensor as large as its chunks reach.
 *
 * That is HuggingFaceStorageWriter's output: with save_distributed, one
 * shard-RRRRR-model-KKKKK-of-NNNNN.safetensors per rank R and output file
 * K (no .metadata, no index); its consolidated form (model-KKKKK-of-
 * NNNNN.safetensors + model.safetensors.index.json, the shards moved to
 * sharded/) and any Hugging Face model directory are whole tensors, one
 * chunk each. The chunks must tile each tensor exactly (engine/plan.c), which is
 * also what catches a shard file missing from the middle of a tensor.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/run.h"
#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/trainer.h"

/* One stored piece: tensor i of file f. */
struct hpiece {
    size_t file;
    const struct ckpt_safetensors_tensor *t;
    uint64_t *off;          /* saved_offsets, ndim */
    size_t entry;           /* its entry in the metadata */
};

struct hplan {
    struct ckpt_safetensors **hdr;  /* per file */
    struct usrc **src;              /* per file */
    char **rel;                     /* per file, owned */
    size_t nfiles;
    struct hpiece *pieces;
    size_t npieces;
    size_t *first;                  /* per entry: its first piece's index
                                       in by_entry */
    size_t *by_entry;               /* piece indices grouped by entry */
};

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

static void hplan_free(void *v)
{
    struct hplan *p = v;
    if (!p)
        return;
    for (size_t i = 0; i < p->nfiles; i++) {
        ckpt_safetensors_free(p->hdr[i]);
        free(p->rel[i]);
    }
    free(p->hdr);
    free(p->src);
    free(p->rel);
    for (size_t i = 0; i < p->npieces; i++)
        free(p->pieces[i].off);
    free(p->pieces);
    free(p->first);
    free(p->by_entry);
    free(p);
}

/* A HuggingFaceStorageWriter shard file directly in d. */
static int top_shards(const struct uns_dir *d)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->v[i].type == CKPT_ENTRY_FILE && !strchr(d->v[i].name, '/') &&
            ckpt_str_startswith(d->v[i].name, "shard-") &&
            ckpt_str_endswith(d->v[i].name, ".safetensors"))
            return 1;
    return 0;
}

/* The *.safetensors files at the top of the directory, by name. */
static int list_files(struct ujob *j, struct hplan *p, struct uns_dir *d,
                      struct ckpt_err *err)
{
    if (uns_fs_list(j, j->src.dir, 0, d, err) != 0)
        return -1;
    /* HuggingFaceStorageWriter's shards in sharded/ whose consolidation
     * was cut short (the run module judged the step dcp-hf, not whole
     * files): the shards are the whole copy. */
    if (j->o->source_format == CKPT_FMT_DCP_HF && !top_shards(d)) {
        char *sub = ckpt_path_join(j->src.dir, "sharded");
        struct uns_dir sd;
        if (uns_fs_list(j, sub, 0, &sd, err) != 0) {
            free(sub);
            return -1;
        }
        if (top_shards(&sd)) {
            uns_fs_free(d);
            *d = sd;
            free(j->src.dir);
            j->src.dir = sub;
        } else {
            uns_fs_free(&sd);
            free(sub);
        }
    }
    p->hdr = ckpt_xcalloc(d->n + 1, sizeof(*p->hdr));
    p->src = ckpt_xcalloc(d->n + 1, sizeof(*p->src));
    p->rel = ckpt_xcalloc(d->n + 1, sizeof(*p->rel));
    for (size_t i = 0; i < d->n; i++)
        if (d->v[i].type == CKPT_ENTRY_FILE && !strchr(d->v[i].name, '/') &&
            ckpt_str_endswith(d->v[i].name, ".safetensors"))
            p->rel[p->nfiles++] = ckpt_xstrdup(d->v[i].name);
    if (!p->nfiles)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': no .metadata and no "
                            "*.safetensors (not a DCP checkpoint)",
                            j->src.top);
    return 0;
}

/* Headers and pieces of every file, in file order, then tensor order
 * within the file (the writer's order: ascending data offsets). */
static int by_data(const void *a, const void *b)
{
    const struct ckpt_safetensors_tensor *x = *(const void *const *)a;
    const struct ckpt_safetensors_tensor *y = *(const void *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int read_file(struct ujob *j, struct hplan *p, size_t fi,
                     const struct uns_dir *d, size_t *cap,
                     struct ckpt_err *err)
{
    struct ckpt_rd rd;
    struct src_cache cache = { 0 };
    const struct uns_dent *e = uns_fs_find(d, p->rel[fi]);
    if (uns_src_get_listed(j, p->rel[fi], e ? e->size : 0,
                           e ? e->etag : NULL, &p->src[fi], err) != 0)
        return -1;
    /* Remote: length and header in one ranged GET. */
    uns_src_rd_cached(&rd, &cache, p->src[fi], 0, p->src[fi]->size);
    int rc = ckpt_safetensors_open(&p->hdr[fi], &rd, err);
    uns_src_cache_release(&cache);
    if (rc != 0)
        return -1;
    const struct ckpt_safetensors *h = p->hdr[fi];
    const struct ckpt_safetensors_tensor **v =
        ckpt_xcalloc(h->n + 1, sizeof(*v));
    for (size_t i = 0; i < h->n; i++)
        v[i] = &h->tensors[i];
    qsort(v, h->n, sizeof(*v), by_data);
    for (size_t i = 0; rc == 0 && i < h->n; i++) {
        if (p->npieces == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            p->pieces = ckpt_xreallocarray(p->pieces, *cap,
                                           sizeof(*p->pieces));
        }
        struct hpiece *pc = &p->pieces[p->npieces++];
        pc->file = fi;
        pc->t = v[i];
        pc->off = ckpt_xcalloc((size_t)v[i]->ndim + 1, sizeof(uint64_t));
        rc = ckpt_safetensors_saved_offsets(h, v[i], pc->off,
                                            p->src[fi]->name, err) < 0;
    }
    free(v);
    return rc ? -1 : 0;
}

/* One metadata entry per tensor name, in order of first appearance. */
static int add_entries(struct ujob *j, struct hplan *p, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = j->plan.meta;
    struct strmap names = STRMAP_INIT;
    size_t *count = ckpt_xcalloc(p->npieces + 1, sizeof(*count));
    int rc = 0;
    m->entries = ckpt_arena_array(m->arena, p->npieces + 1,
                                  sizeof(*m->entries));
    if (!m->entries)
        rc = oom(err);
    for (size_t i = 0; rc == 0 && i < p->npieces; i++) {
        struct hpiece *pc = &p->pieces[i];
        const char *name = pc->t->name;
        uint64_t ei;
        if (!tf_strmap_get(&names, name, strlen(name), &ei)) {
            ei = m->n++;
            struct ckpt_dcp_entry *e = &m->entries[ei];
            memset(e, 0, sizeof(*e));
            e->fqn = ckpt_arena_strdup(m->arena, name);
            e->kind = CKPT_DCP_TENSOR;
            e->dtype = pc->t->dtype;
            e->ndim = pc->t->ndim;
            e->size = ckpt_arena_array(m->arena, (size_t)e->ndim + 1, 8);
            if (!e->fqn || !e->size ||
                tf_strmap_put(&names, name, strlen(name), ei) != 0) {
                rc = oom(err);
                break;
            }
        }
        struct ckpt_dcp_entry *e = &m->entries[ei];
        if (e->dtype != pc->t->dtype || e->ndim != pc->t->ndim) {
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: tensor '%s' is %s "
                              "with %d dimensions here, %s with %d in an "
                              "earlier file", p->src[pc->file]->name, name,
                              pc->t->dtype->name, pc->t->ndim,
                              e->dtype->name, e->ndim);
            break;
        }
        /* As HuggingFaceStorageReader: as large as the chunks reach. */
        for (int d = 0; d < e->ndim; d++) {
            uint64_t hi;
            if (ckpt_add_u64(pc->off[d], pc->t->shape[d], &hi) != 0) {
                rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: tensor '%s': "
                                  "saved_offsets overflow",
                                  p->src[pc->file]->name, name);
                break;
            }
            if (hi > e->size[d])
                ((uint64_t *)e->size)[d] = hi;
        }
        pc->entry = (size_t)ei;
        count[ei]++;
    }
    /* Chunks, grouped per entry. */
    p->first = ckpt_xcalloc(m->n + 1, sizeof(*p->first));
    p->by_entry = ckpt_xcalloc(p->npieces + 1, sizeof(*p->by_entry));
    for (size_t ei = 0, at = 0; rc == 0 && ei < m->n; ei++) {
        p->first[ei] = at;
        struct ckpt_dcp_entry *e = &m->entries[ei];
        e->chunks = ckpt_arena_array(m->arena, count[ei] + 1,
                                     sizeof(*e->chunks));
        e->chunkcap = count[ei];
        if (!e->chunks)
            rc = oom(err);
        at += count[ei];
    }
    for (size_t i = 0; rc == 0 && i < p->npieces; i++) {
        struct hpiece *pc = &p->pieces[i];
        struct ckpt_dcp_entry *e = &m->entries[pc->entry];
        struct ckpt_dcp_chunk *c = &e->chunks[e->nchunks];
        p->by_entry[p->first[pc->entry] + e->nchunks++] = i;
        c->offsets = pc->off;
        c->sizes = pc->t->shape;
        c->st.file = p->rel[pc->file];
        c->st.offset = pc->t->offset;
        c->st.length = pc->t->nbytes;
    }
    free(count);
    tf_strmap_release(&names);
    return rc;
}

/* Probe tasks (pool threads) only read the finished plan: a piece is
 * contiguous, C order, little-endian, at its data offset. */
static int locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                  struct ckpt_err *err)
{
    struct hplan *p = j->plan.fmtplan;
    size_t ei = (size_t)(t->e - j->plan.meta->entries);
    const struct hpiece *pc =
        &p->pieces[p->by_entry[p->first[ei] + (size_t)(c->meta - t->e->chunks)]];
    int64_t s = 1;
    (void)err;
    for (int d = t->e->ndim - 1; d >= 0; d--) {
        c->stride[d] = s;
        s *= (int64_t)pc->t->shape[d];
    }
    c->src = p->src[pc->file];
    c->item_off = 0;
    c->data = pc->t->offset;
    c->soff = 0;
    c->big_endian = 0;
    return 0;
}

int uns_hfst_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct hplan *p = ckpt_xcalloc(1, sizeof(*p));
    struct uns_dir d = { NULL, 0, 0 };
    struct ckpt_pv *root;
    size_t cap = 0;
    j->src.dir = ckpt_xstrdup(src);
    j->src.metaname = "*.safetensors";
    j->plan.meta = ckpt_dcp_meta_new();
    j->plan.fmtplan = p;
    j->plan.fmtfree = hplan_free;
    j->plan.locate = locate;
    if (!j->plan.meta)
        return oom(err);
    int rc = list_files(j, p, &d, err);
    for (size_t i = 0; rc == 0 && i < p->nfiles; i++)
        rc = read_file(j, p, i, &d, &cap, err);
    uns_fs_free(&d);
    if (rc == 0)
        rc = add_entries(j, p, err);
    if (rc != 0)
        return -1;
    if (uns_plan_tensors(j, err) != 0 || uns_tree_build(j, &root, err) != 0)
        return -1;
    return trainer_layout(j, root, err);
}
