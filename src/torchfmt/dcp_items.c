/*
 * dcp_items.c - storage_data (MetadataIndex -> _StorageInfo) and
 * state_dict_metadata (fqn -> Tensor/BytesStorageMetadata) into entries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "dcp_int.h"

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

/* Grow an arena array (copying; the old one stays in the arena). */
static void *grow(struct ckpt_arena *a, void *arr, size_t n, size_t *cap,
                  size_t size)
{
    if (n < *cap)
        return arr;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = ckpt_arena_array(a, ncap, size);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, arr, n * size);
    *cap = ncap;
    return p;
}

/* DCP writes plain file names into its directory; anything that could
 * leave it is refused before a path is ever built from it. */
static int safe_relpath(const char *p, size_t len)
{
    return len && len < 4096 && strlen(p) == len && !strchr(p, '/') &&
           !strchr(p, '\\') && strcmp(p, ".") && strcmp(p, "..");
}

static int add_filereq(struct ckpt_dcp_meta *m, const char *file,
                       uint64_t end, struct ckpt_err *err)
{
    struct dcp_index *ix = m->index;
    uint64_t i;
    if (tf_strmap_get(&ix->files, file, strlen(file), &i)) {
        if (m->files[i].min_size < end)
            m->files[i].min_size = end;
        return 0;
    }
    m->files = grow(m->arena, m->files, m->nfiles, &ix->filecap,
                    sizeof(*m->files));
    if (!m->files)
        return oom(err);
    m->files[m->nfiles].name = (char *)file;
    m->files[m->nfiles].min_size = end;
    if (tf_strmap_put(&ix->files, file, strlen(file), m->nfiles) != 0)
        return oom(err);
    m->nfiles++;
    return 0;
}

static int transforms(struct ckpt_arena *a, const struct ckpt_pv *td,
                      struct ckpt_dcp_storage *st)
{
    if (dcp_is_none(td))
        return 0;
    if (td->kind != CKPT_PV_LIST && td->kind != CKPT_PV_TUPLE)
        return -1;
    const char **t = ckpt_arena_array(a, td->u.seq.n + 1, sizeof(*t));
    if (!t)
        return -1;
    for (size_t i = 0; i < td->u.seq.n; i++) {
        if (td->u.seq.v[i]->kind != CKPT_PV_STR)
            return -1;
        t[i] = td->u.seq.v[i]->u.s.p;
    }
    st->transforms = t;
    st->ntransforms = td->u.seq.n;
    return 0;
}

static int storage_info(struct ckpt_arena *a, const struct ckpt_pv *v,
                        struct ckpt_dcp_storage *st)
{
    const struct ckpt_pv *rp = dcp_field(v, "relative_path");
    int64_t off, len;
    const char *cls = dcp_class(v);
    if (!cls || strcmp(cls, "_StorageInfo") || !rp ||
        rp->kind != CKPT_PV_STR || !safe_relpath(rp->u.s.p, rp->u.s.len) ||
        ckpt_pv_get_int(dcp_field(v, "offset"), &off) != 0 ||
        ckpt_pv_get_int(dcp_field(v, "length"), &len) != 0 ||
        off < 0 || len < 0 || (uint64_t)off + (uint64_t)len < (uint64_t)off)
        return -1;
    memset(st, 0, sizeof(*st));
    st->file = rp->u.s.p;
    st->offset = (uint64_t)off;
    st->length = (uint64_t)len;
    return transforms(a, dcp_field(v, "transform_descriptors"), st);
}

/* MetadataIndex -> lookup key; fqn and offsets from its state. */
static const char *index_key(struct ckpt_arena *a, unsigned part,
                             const struct ckpt_pv *k, size_t *len)
{
    const struct ckpt_pv *fqn = dcp_field(k, "fqn");
    const struct ckpt_pv *off = dcp_field(k, "offset");
    const char *cls = dcp_class(k);
    const uint64_t *offs = NULL;
    int nd = -1;
    if (!cls || strcmp(cls, "MetadataIndex") || !fqn ||
        fqn->kind != CKPT_PV_STR)
        return NULL;
    if (!dcp_is_none(off) && (nd = dcp_dims(a, off, &offs)) < 0)
        return NULL;
    return dcp_key(a, part, fqn->u.s.p, offs, nd, len);
}

int dcp_storage_data(struct ckpt_dcp_meta *m, const struct ckpt_pv *sd,
                     const char *name, struct ckpt_err *err)
{
    struct dcp_index *ix = m->index;
    if (!sd || sd->kind != CKPT_PV_DICT)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: storage_data missing", name);
    for (size_t i = 0; i < sd->u.dict.n; i++) {
        struct ckpt_dcp_storage st;
        size_t klen;
        const char *key = index_key(m->arena, ix->part, sd->u.dict.k[i],
                                    &klen);
        if (!key || storage_info(m->arena, sd->u.dict.v[i], &st) != 0)
            return ckpt_err_set(err, CKPT_EFORMAT,
                                "%s: malformed storage_data entry %zu",
                                name, i);
        if (add_filereq(m, st.file, st.offset + st.length, err) != 0)
            return -1;
        if (tf_strmap_get(&ix->storage, key, klen, NULL))
            continue;   /* duplicate key: the first entry stands */
        ix->sts = grow(m->arena, ix->sts, ix->nst, &ix->stcap,
                       sizeof(*ix->sts));
        if (!ix->sts || tf_strmap_put(&ix->storage, key, klen, ix->nst) != 0)
            return oom(err);
        ix->sts[ix->nst++] = st;
    }
    return 0;
}

static int find_storage(struct ckpt_dcp_meta *m, const char *fqn,
                        const uint64_t *offs, int nd,
                        struct ckpt_dcp_storage *st)
{
    struct dcp_index *ix = m->index;
    size_t klen;
    uint64_t i;
    const char *key = dcp_key(m->arena, ix->part, fqn, offs, nd, &klen);
    if (!key || !tf_strmap_get(&ix->storage, key, klen, &i))
        return -1;
    *st = ix->sts[i];
    return 0;
}

static const struct ckpt_dtype *props_dtype(const struct ckpt_pv *props,
                                            const char **dname)
{
    const struct ckpt_pv *st = props && props->kind == CKPT_PV_CALL ?
                               props->u.call.state : NULL;
    const struct ckpt_pv *d = NULL;
    if (st && st->kind == CKPT_PV_TUPLE)
        d = ckpt_pv_item(st, 0);   /* __getstate__: (dtype, layout, ...) */
    else
        d = dcp_field(props, "dtype");
    *dname = d && d->kind == CKPT_PV_GLOBAL ? d->u.global.name : "?";
    return ckpt_dtype_from_pv(d);
}

static int add_chunk(struct ckpt_dcp_meta *m, struct ckpt_dcp_entry *e,
                     const struct ckpt_pv *c, const char *name,
                     struct ckpt_err *err)
{
    struct ckpt_dcp_chunk ch;
    const char *cls = dcp_class(c);
    if (!cls || strcmp(cls, "ChunkStorageMetadata") ||
        dcp_dims(m->arena, dcp_field(c, "offsets"), &ch.offsets) != e->ndim ||
        dcp_dims(m->arena, dcp_field(c, "sizes"), &ch.sizes) != e->ndim)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: tensor '%s': malformed chunk", name, e->fqn);
    for (int d = 0; d < e->ndim; d++)
        if (ch.offsets[d] > e->size[d] ||
            ch.sizes[d] > e->size[d] - ch.offsets[d])
            return ckpt_err_set(err, CKPT_EFORMAT,
                                "%s: tensor '%s': chunk outside the tensor",
                                name, e->fqn);
    if (find_storage(m, e->fqn, ch.offsets, e->ndim, &ch.st) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: tensor '%s': chunk has no storage_data "
                            "entry", name, e->fqn);
    ch.part = ((struct dcp_index *)m->index)->part;
    e->chunks = grow(m->arena, e->chunks, e->nchunks, &e->chunkcap,
                     sizeof(*e->chunks));
    if (!e->chunks)
        return oom(err);
    e->chunks[e->nchunks++] = ch;
    return 0;
}

static int tensor_entry(struct ckpt_dcp_meta *m, struct ckpt_dcp_entry *e,
                        const struct ckpt_pv *md, int merge,
                        const char *name, struct ckpt_err *err)
{
    const char *dname;
    const uint64_t *size;
    const struct ckpt_dtype *dt = props_dtype(dcp_field(md, "properties"),
                                              &dname);
    if (!dt)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED,
                            "%s: tensor '%s': unknown dtype 'torch.%s'",
                            name, e->fqn, dname);
    int nd = dcp_dims(m->arena, dcp_field(md, "size"), &size);
    const struct ckpt_pv *chunks = dcp_field(md, "chunks");
    if (nd < 0 || !chunks || chunks->kind != CKPT_PV_LIST)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: tensor '%s': malformed metadata", name,
                            e->fqn);
    if (merge && (e->kind != CKPT_DCP_TENSOR || e->dtype != dt ||
                  e->ndim != nd ||
                  memcmp(e->size, size, sizeof(*size) * (size_t)nd)))
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: tensor '%s': conflicts with another "
                            "metadata file", name, e->fqn);
    e->kind = CKPT_DCP_TENSOR;
    e->dtype = dt;
    e->ndim = nd;
    e->size = size;
    for (size_t i = 0; i < chunks->u.seq.n; i++)
        if (add_chunk(m, e, chunks->u.seq.v[i], name, err) != 0)
            return -1;
    return 0;
}

static int bytes_entry(struct ckpt_dcp_meta *m, struct ckpt_dcp_entry *e,
                       int merge, const char *name, struct ckpt_err *err)
{
    struct ckpt_dcp_storage st;
    if (merge && e->kind != CKPT_DCP_BYTES)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: '%s': conflicts with "
                            "another metadata file", name, e->fqn);
    if (find_storage(m, e->fqn, NULL, -1, &st) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: '%s': byte item has no storage_data entry",
                            name, e->fqn);
    unsigned part = ((struct dcp_index *)m->index)->part;
    if (!merge) {
        e->kind = CKPT_DCP_BYTES;
        e->st = st;
        e->part = part;
        return 0;
    }
    /* Another rank's copy: the first file's stands, the others are kept
     * for whoever must tell whether the ranks agree (unshard). */
    e->copies = grow(m->arena, e->copies, e->ncopies, &e->copycap,
                     sizeof(*e->copies));
    if (!e->copies)
        return oom(err);
    e->copies[e->ncopies].st = st;
    e->copies[e->ncopies++].part = part;
    return 0;
}

/* planner_data value: a tuple of str / non-negative int keys. */
static const struct ckpt_pv *valid_path(const struct ckpt_pv *p)
{
    if (!p || (p->kind != CKPT_PV_TUPLE && p->kind != CKPT_PV_LIST) ||
        !p->u.seq.n)
        return NULL;
    for (size_t i = 0; i < p->u.seq.n; i++) {
        const struct ckpt_pv *k = p->u.seq.v[i];
        if (k->kind != CKPT_PV_STR && (k->kind != CKPT_PV_INT || k->u.i < 0))
            return NULL;
    }
    return p;
}

/* The entry for fqn: existing (merge = 1) or a new one. */
static struct ckpt_dcp_entry *entry_for(struct ckpt_dcp_meta *m,
                                        const struct ckpt_pv *fqn, int *merge)
{
    struct dcp_index *ix = m->index;
    uint64_t i;
    *merge = tf_strmap_get(&ix->fqns, fqn->u.s.p, fqn->u.s.len, &i);
    if (*merge)
        return &m->entries[i];
    m->entries = grow(m->arena, m->entries, m->n, &m->cap,
                      sizeof(*m->entries));
    if (!m->entries ||
        tf_strmap_put(&ix->fqns, fqn->u.s.p, fqn->u.s.len, m->n) != 0)
        return NULL;
    struct ckpt_dcp_entry *e = &m->entries[m->n++];
    memset(e, 0, sizeof(*e));
    e->fqn = fqn->u.s.p;
    return e;
}

struct planner {
    const struct ckpt_pv *dict;   /* planner_data, or NULL */
    struct strmap keys;           /* fqn -> index in dict */
};

static const struct ckpt_pv *planner_path(const struct planner *pl,
                                          const char *fqn)
{
    uint64_t i;
    if (!pl->dict || !tf_strmap_get(&pl->keys, fqn, strlen(fqn), &i))
        return NULL;
    return valid_path(pl->dict->u.dict.v[i]);
}

static int one_entry(struct ckpt_dcp_meta *m, const struct ckpt_pv *fqn,
                     const struct ckpt_pv *md, const struct planner *pl,
                     const char *name, struct ckpt_err *err)
{
    int merge;
    if (fqn->kind != CKPT_PV_STR || strlen(fqn->u.s.p) != fqn->u.s.len)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: state_dict_metadata key is not a str",
                            name);
    struct ckpt_dcp_entry *e = entry_for(m, fqn, &merge);
    if (!e)
        return oom(err);
    const char *cls = dcp_class(md);
    if (!e->path)
        e->path = planner_path(pl, e->fqn);
    if (cls && !strcmp(cls, "TensorStorageMetadata"))
        return tensor_entry(m, e, md, merge, name, err);
    if (cls && !strcmp(cls, "BytesStorageMetadata"))
        return bytes_entry(m, e, merge, name, err);
    return ckpt_err_set(err, CKPT_EFORMAT,
                        "%s: '%s': unknown storage metadata class '%s'",
                        name, e->fqn, cls ? cls : ckpt_pv_kind_name(md->kind));
}

/* Index planner_data by key (a dict node is a list; later keys win). */
static int planner_index(struct planner *pl, const struct ckpt_pv *d)
{
    pl->dict = d && d->kind == CKPT_PV_DICT ? d : NULL;
    for (size_t i = 0; pl->dict && i < d->u.dict.n; i++) {
        const struct ckpt_pv *k = d->u.dict.k[i];
        if (k->kind == CKPT_PV_STR &&
            tf_strmap_put(&pl->keys, k->u.s.p, k->u.s.len, i) != 0)
            return -1;
    }
    return 0;
}

int dcp_state_dict(struct ckpt_dcp_meta *m, const struct ckpt_pv *sdm,
                   const struct ckpt_pv *planner, const char *name,
                   struct ckpt_err *err)
{
    struct planner pl = { NULL, STRMAP_INIT };
    int rc = 0;
    if (!sdm || sdm->kind != CKPT_PV_DICT)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: state_dict_metadata missing", name);
    if (planner_index(&pl, planner) != 0)
        rc = oom(err);
    if (pl.dict)
        m->has_planner_data = 1;
    for (size_t i = 0; !rc && i < sdm->u.dict.n; i++)
        rc = one_entry(m, sdm->u.dict.k[i], sdm->u.dict.v[i], &pl, name,
                       err);
    tf_strmap_release(&pl.keys);
    return rc;
}

static int cmp_req(const void *a, const void *b)
{
    return strcmp(((const struct ckpt_dcp_filereq *)a)->name,
                  ((const struct ckpt_dcp_filereq *)b)->name);
}

void dcp_sort_files(struct ckpt_dcp_meta *m)
{
    struct dcp_index *ix = m->index;
    ckpt_sort(m->files, m->nfiles, sizeof(*m->files), cmp_req);
    tf_strmap_release(&ix->files);
    for (size_t i = 0; i < m->nfiles; i++)
        if (tf_strmap_put(&ix->files, m->files[i].name,
                          strlen(m->files[i].name), i) != 0)
            break;
}
