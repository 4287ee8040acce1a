/*
 * sources/safetensors_items.c - tensor items of a DCP checkpoint saved with
 * FileSystemWriter(serialization_format=SAFETENSORS) (torch >= 2.8,
 * torch/distributed/checkpoint/filesystem.py _write_files_from_queue).
 *
 * Such a data file holds the rank's byte items first, as usual, then one
 * safetensors file of all its tensors (safetensors.torch.save), whose
 * __metadata__["DCP_SHARDING_INFO"] records each tensor's saved_offsets.
 * The .metadata still names an item per chunk, but torch records the
 * position where the safetensors file starts as every tensor item's offset
 * (it writes nothing per item) and the chunk's byte count as its length:
 * the item locates the file, the tensor is found in it by its fqn, and
 * dtype, shape and offsets must be the chunk's. torch's own readers
 * (FileSystemReader, dcp_to_torch_save) torch.load each item and fail.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

struct uns_stblob {
    struct usrc *src;
    uint64_t off;
    struct ckpt_safetensors *h;
};

/* The parsed safetensors file at off of s, parsed once per job. */
static int blob_of(struct ujob *j, struct usrc *s, uint64_t off,
                   const struct ckpt_safetensors **out, struct ckpt_err *err)
{
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->plan.nstblobs; i++)
        if (j->plan.stblobs[i].src == s && j->plan.stblobs[i].off == off) {
            *out = j->plan.stblobs[i].h;
            pthread_mutex_unlock(&j->mu);
            return 0;
        }
    pthread_mutex_unlock(&j->mu);
    /* Parsed unlocked (reads may fetch): two tasks may both parse it;
     * the first one kept wins. */
    struct ckpt_rd rd;
    struct src_cache cache = { 0 };
    struct ckpt_safetensors *h = NULL;
    uns_src_rd_cached(&rd, &cache, s, off, s->size - off);
    int rc = ckpt_safetensors_open(&h, &rd, err);
    uns_src_cache_release(&cache);
    if (rc != 0)
        return -1;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->plan.nstblobs && h; i++)
        if (j->plan.stblobs[i].src == s && j->plan.stblobs[i].off == off) {
            ckpt_safetensors_free(h);
            h = NULL;
            *out = j->plan.stblobs[i].h;
        }
    if (h) {
        if (j->plan.nstblobs == j->plan.stblobcap) {
            j->plan.stblobcap = j->plan.stblobcap ? 2 * j->plan.stblobcap : 8;
            j->plan.stblobs = ckpt_xreallocarray(j->plan.stblobs,
                                                 j->plan.stblobcap,
                                                 sizeof(*j->plan.stblobs));
        }
        j->plan.stblobs[j->plan.nstblobs++] = (struct uns_stblob){ s, off,
                                                                  h };
        *out = h;
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

int uns_st_item_locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                       struct usrc *s, uint64_t off, struct ckpt_err *err)
{
    unsigned char head[9];
    const struct ckpt_dcp_entry *e = t->e;
    if (s->size < off + sizeof(head) ||
        uns_src_read(s, off, head, sizeof(head), err) != 0)
        return 0;   /* the zip reader says what is wrong */
    if (!memcmp(head, "PK\x03\x04", 4) || head[8] != '{')
        return 0;
    const struct ckpt_safetensors *h = NULL;
    if (blob_of(j, s, off, &h, err) != 0)
        return -1;
    const struct ckpt_safetensors_tensor *st =
        ckpt_safetensors_find(h, e->fqn);
    if (!st)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: the safetensors data at "
                            "offset %llu holds no tensor '%s'", s->name,
                            (unsigned long long)off, e->fqn);
    uint64_t so[CKPT_MAX_DIMS];
    if (st->dtype != e->dtype || st->ndim != e->ndim)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: stored %s with %d "
                            "dimensions, the metadata says %s with %d",
                            s->name, st->dtype->name, st->ndim,
                            e->dtype->name, e->ndim);
    if (ckpt_safetensors_saved_offsets(h, st, so, s->name, err) < 0)
        return -1;
    for (int d = 0; d < e->ndim; d++)
        if (st->shape[d] != c->meta->sizes[d] || so[d] != c->meta->offsets[d])
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: stored piece of '%s' "
                                "is not this chunk (another shape or "
                                "saved_offsets)", s->name, e->fqn);
    int64_t stride = 1;
    for (int d = e->ndim - 1; d >= 0; d--) {
        c->stride[d] = stride;
        stride *= (int64_t)st->shape[d];
    }
    c->item_off = off;
    c->data = off + st->offset;
    c->soff = 0;
    c->big_endian = 0;
    return 1;
}

void uns_st_items_free(struct ujob *j)
{
    for (size_t i = 0; i < j->plan.nstblobs; i++)
        ckpt_safetensors_free(j->plan.stblobs[i].h);
    free(j->plan.stblobs);
    j->plan.stblobs = NULL;
    j->plan.nstblobs = j->plan.stblobcap = 0;
}
