/*
 * engine/verify.c - --verify, second half: read every output back through ckpt's
 * own readers (the first half, in engine/engine.c, compares every byte of every
 * band with the sources). A torch file must parse as a zip whose records
 * match the layout, whose data.pkl loads under the object allow-list, and
 * whose every tensor stays inside its storage record.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"

struct tcheck {
    const struct ckpt_tzip *z;
    const char *name;
    struct ckpt_err *err;
    uint64_t n;
};

static int check_tensor(void *ud, const struct ckpt_pv *v)
{
    struct tcheck *c = ud;
    struct ckpt_tensor t;
    char rec[48];
    int is = ckpt_tensor_from_pv(v, &t, c->name, c->err);
    if (is <= 0)
        return is < 0 ? 1 : 0;
    snprintf(rec, sizeof(rec), "data/%s", t.key);
    const struct ckpt_tzip_entry *e = ckpt_tzip_find(c->z, rec);
    if (!e || e->size < t.storage_nbytes ||
        ckpt_tensor_check_bounds(&t, c->name, c->err) != 0) {
        ckpt_err_set(c->err, CKPT_EFORMAT, "verify: %s: tensor record '%s' "
                     "missing or short", c->name, rec);
        return 1;
    }
    c->n++;
    return 0;
}

static int verify_records(const struct ufile *f, const struct ckpt_tzip *z,
                          struct ckpt_err *err)
{
    size_t pl = strlen(f->prefix) + 1;
    if (z->n != f->nrecs || strcmp(z->prefix, f->prefix))
        return ckpt_err_set(err, CKPT_EFORMAT, "verify: %s: %zu records, "
                            "expected %zu", f->name, z->n, f->nrecs);
    for (size_t i = 0; i < f->nrecs; i++) {
        const struct ckpt_zipw_rec *r = &f->recs[i];
        const struct ckpt_tzip_entry *e = ckpt_tzip_find(z, r->name + pl);
        if (!e || e->size != r->size || e->data_off != r->data_off ||
            e->crc != r->crc)
            return ckpt_err_set(err, CKPT_EFORMAT, "verify: %s: record "
                                "'%s' does not read back", f->name, r->name);
    }
    return 0;
}

static int verify_torch(struct ujob *j, struct ufile *f, struct ckpt_err *err)
{
    struct usrc s;
    struct ckpt_rd rd;
    struct ckpt_tzip *z = NULL;
    struct ckpt_arena *a = ckpt_arena_new(1ULL << 31);
    char *pkl = NULL;
    size_t len;
    struct ckpt_pv *v;
    /* ckpt's own output, its globals checked before it was written
     * (outputs/torch_layout.c): any class, bounded by the arena only. */
    struct ckpt_pickle_opts po = { .name = f->name, .max_values = SIZE_MAX,
                                   .max_bytes = SIZE_MAX };
    uns_out_reader(j, f, &s);
    uns_src_rd(&rd, &s, 0, f->size);
    int rc = ckpt_tzip_open(&z, &rd, err);
    const struct ckpt_tzip_entry *e = rc ? NULL : ckpt_tzip_find(z,
                                                                 "data.pkl");
    if (rc == 0)
        rc = verify_records(f, z, err);
    if (rc == 0)
        rc = ckpt_tzip_read(z, &rd, e, SIZE_MAX / 2, &pkl, &len, err);
    if (rc == 0)
        rc = ckpt_pickle_load(a, pkl, len, &po, &v, NULL, err);
    struct tcheck c = { z, f->name, err, 0 };
    if (rc == 0 && ckpt_pv_walk(v, check_tensor, &c) != 0)
        rc = -1;
    if (rc == 0 && c.n < f->ntensors)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "verify: %s: %llu tensors read "
                          "back, expected %llu", f->name,
                          (unsigned long long)c.n,
                          (unsigned long long)f->ntensors);
    free(pkl);
    ckpt_tzip_free(z);
    ckpt_arena_free(a);
    (void)j;
    return rc;
}

static int verify_st(struct ujob *j, struct ufile *f, struct ckpt_err *err)
{
    struct usrc s;
    unsigned char n8[8];
    uns_out_reader(j, f, &s);
    if (uns_src_read(&s, 0, n8, 8, err) != 0)
        return -1;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | n8[i];
    if (8 + n != f->data_start)
        return ckpt_err_set(err, CKPT_EFORMAT, "verify: %s: bad header "
                            "length", f->name);
    char *h = ckpt_xmalloc(n + 1);
    int rc = uns_src_read(&s, 8, h, n, err);
    h[n] = '\0';
    cJSON *o = rc ? NULL : cJSON_Parse(h);
    if (rc == 0 && (!o || (uint64_t)cJSON_GetArraySize(o) != f->ntensors + 1))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "verify: %s: header does not "
                          "read back", f->name);
    cJSON_Delete(o);
    free(h);
    return rc;
}

int uns_verify_outputs(struct ujob *j, struct ckpt_err *err)
{
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        struct ufile *f = &j->dst.files[i];
        if (f->raw || f->copy_from)
            continue;
        if (j->o->format == CKPT_FORMAT_TORCH ? verify_torch(j, f, err)
                                              : verify_st(j, f, err))
            return -1;
    }
    return 0;
}
