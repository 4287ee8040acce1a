/*
 * outputs/torch_layout.c - which output files exist, what each holds, and (torch
 * format) where every record goes.
 *
 * --layout single: checkpoint.pt holds the whole state dict.
 * --layout olmo: model.pt holds state["model"], optim.pt state["optim"]
 * (or "optimizer"), train.pt a dict of every other top-level entry (or,
 * for an OLMo step whose trainer state is in train/rank0.pt, a copy of
 * that file, as OLMo's own unsharder does).
 *
 * Every offset is fixed here, before any data is written: workers write
 * straight to data_off of their record, and layout_finish writes the zip
 * headers once the CRCs are known (for a remote output, each record's
 * local header as soon as its CRC is: uns_layout_record_done).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"

enum { F_MODEL = 0, F_OPTIM = 1, F_TRAIN = 2 };

/* The top-level key an entry lands under (see engine/tree.c flat_path). */
static const char *top_key(const struct ujob *j,
                           const struct ckpt_dcp_entry *e)
{
    const struct ckpt_pv *k = j->plan.paths[e - j->plan.meta->entries];
    k = k->u.seq.v[0];
    return k->kind == CKPT_PV_STR ? k->u.s.p : NULL;
}

static int olmo_part(const char *top, int have_optim_key)
{
    if (top && !strcmp(top, "model"))
        return F_MODEL;
    if (top && (!strcmp(top, "optim") ||
                (!have_optim_key && !strcmp(top, "optimizer"))))
        return F_OPTIM;
    return F_TRAIN;
}

static void add_file(struct ujob *j, const char *base, const char *ext,
                     struct ckpt_pv *root)
{
    j->dst.files = ckpt_xreallocarray(j->dst.files, j->dst.nfiles + 1, sizeof(*j->dst.files));
    struct ufile *f = &j->dst.files[j->dst.nfiles++];
    memset(f, 0, sizeof(*f));
    f->name = ckpt_xasprintf("%s%s", base, ext);
    f->prefix = ckpt_xstrdup(base);
    f->root = root;
    f->fd = -1;
    ckpt_buf_init(&f->head);
}

static int is_file(struct ujob *j, const char *p)
{
    uint64_t size;
    struct ckpt_err err;
    return uns_src_stat(j, p, &size, &err) == 0;
}

/* The globals of d, about to be written as file `name`, per top-level
 * key (the item named in messages), against the allow-list. */
static int check_globals(struct ujob *j, const char *name,
                         const struct ckpt_pv *d, struct ckpt_err *err)
{
    struct ckpt_pickle_gate g = { j->o->allow_unsafe_pickle,
                                  j->o->unsafe_pickle, j->o->progress_ud,
                                  j->plan.megatron ? ckpt_torch_allow_megatron
                                                   : NULL };
    if (!d || d->kind != CKPT_PV_DICT)
        return ckpt_torch_check_written(d, name, &g, err);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < d->u.dict.n; i++) {
        const struct ckpt_pv *k = d->u.dict.k[i];
        char *item = k->kind == CKPT_PV_STR
            ? ckpt_xasprintf("%s['%s']", name, k->u.s.p)
            : k->kind == CKPT_PV_INT
            ? ckpt_xasprintf("%s[%lld]", name, (long long)k->u.i)
            : ckpt_xasprintf("%s", name);
        rc = ckpt_torch_check_written(k, item, &g, err);
        if (rc == 0)
            rc = ckpt_torch_check_written(d->u.dict.v[i], item, &g, err);
        free(item);
    }
    return rc;
}

/* A file copied whole (train.pt = train/rank0.pt) is written too: its
 * data.pkl is read (within the default caps of a load) and checked. Its
 * size is the plan's (a dry run reports it). */
static int check_copy(struct ujob *j, struct ufile *f,
                      struct ckpt_err *err)
{
    struct usrc s;
    struct ckpt_rd rd;
    struct ckpt_tzip *z = NULL;
    const struct ckpt_tzip_entry *e = NULL;
    struct ckpt_arena *a = ckpt_arena_new(256u << 20);
    struct ckpt_pickle_opts po = { .name = "data.pkl" };
    struct ckpt_pv *v = NULL;
    char *pkl = NULL;
    size_t len;
    int rc = a ? uns_src_file_whole(j, f->copy_from, f->copy_local, &s,
                                    err)
               : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0) {
        f->size = s.size;
        uns_src_rd(&rd, &s, 0, s.size);
        rc = ckpt_tzip_open(&z, &rd, err);
        if (rc == 0 && !(e = ckpt_tzip_find(z, "data.pkl")))
            rc = ckpt_err_set(err, CKPT_EFORMAT, "record 'data.pkl' "
                              "missing");
        if (rc == 0)
            rc = ckpt_tzip_read(z, &rd, e, CKPT_PICKLE_MAX_BYTES, &pkl,
                                &len, err);
        if (rc == 0)
            rc = ckpt_pickle_load(a, pkl, len, &po, &v, NULL, err);
        if (rc != 0 && !strstr(err->msg, s.name))
            ckpt_err_prefix(err, "%s", s.name);
        if (s.fd >= 0)
            close(s.fd);
    }
    /* Always a torch file, whatever --format says. */
    if (rc == 0)
        rc = check_globals(j, "train.pt", v, err);
    free(pkl);
    ckpt_tzip_free(z);
    ckpt_arena_free(a);
    return rc;
}

/* OLMo split of the root dict into three roots. map[i] is the file of
 * part i, or -1. */
static int split_olmo(struct ujob *j, struct ckpt_pv *root, const char *ext,
                      int *map, struct ckpt_err *err)
{
    struct ckpt_pv *parts[3] = { NULL, NULL, NULL };
    int have_optim = ckpt_pv_dict_get(root, "optim") != NULL;
    parts[F_TRAIN] = ckpt_pv_new(j->plan.arena, CKPT_PV_DICT);
    if (!parts[F_TRAIN])
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < root->u.dict.n; i++) {
        const struct ckpt_pv *k = root->u.dict.k[i];
        int p = olmo_part(k->kind == CKPT_PV_STR ? k->u.s.p : NULL,
                          have_optim);
        if (p == F_TRAIN)
            ckpt_pv_dict_add(j->plan.arena, parts[F_TRAIN], root->u.dict.k[i],
                             root->u.dict.v[i]);
        else
            parts[p] = root->u.dict.v[i];
    }
    if (!parts[F_MODEL])
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: no top-level 'model' "
                            "entry for --layout olmo", j->src.dir);
    char *rank0 = ckpt_xasprintf("%s/train/rank0.pt", j->src.top);
    static const char *const names[] = { "model", "optim", "train" };
    for (int p = 0; p < 3; p++) {
        map[p] = -1;
        int copy = p == F_TRAIN && !parts[p]->u.dict.n && j->src.olmo_step &&
                   is_file(j, rank0);
        if (!parts[p] || (p == F_TRAIN && !parts[p]->u.dict.n && !copy))
            continue;
        map[p] = (int)j->dst.nfiles;
        add_file(j, names[p], ext, parts[p]);
        if (copy)
            j->dst.files[j->dst.nfiles - 1].copy_from = ckpt_xstrdup(rank0);
        if (copy && check_copy(j, &j->dst.files[j->dst.nfiles - 1], err) != 0) {
            free(rank0);
            return -1;
        }
    }
    free(rank0);
    return 0;
}

int uns_layout_choose(struct ujob *j, struct ckpt_pv *root, const char *ext,
                      struct ckpt_err *err)
{
    int map[3] = { 0, -1, -1 };
    int olmo = j->plan.olmo;
    if (!olmo)
        add_file(j, j->o->format == CKPT_FORMAT_TORCH ? "checkpoint"
                                                      : "model", ext, root);
    else if (split_olmo(j, root, ext, map, err) != 0)
        return -1;
    /* With --format safetensors the values that can name globals go to
     * extra.json. */
    for (size_t i = 0; i < j->dst.nfiles; i++)
        if (!j->dst.files[i].copy_from &&
            check_globals(j, j->o->format == CKPT_FORMAT_SAFETENSORS
                                 ? "extra.json" : j->dst.files[i].name,
                          j->dst.files[i].root, err) != 0)
            return -1;
    int have_optim = ckpt_pv_dict_get(root, "optim") != NULL;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        const char *top = top_key(j, j->plan.tensors[i].e);
        j->plan.tensors[i].file = olmo ? map[olmo_part(top, have_optim)] : 0;
    }
    for (size_t i = 0; i < j->plan.ncopies; i++)
        j->plan.copies[i].file = olmo ? map[olmo_part(top_key(j, j->plan.copies[i].e),
                                                 have_optim)] : 0;
    return 0;
}

/* --- torch format ------------------------------------------------------ */

static size_t add_rec(struct ufile *f, char *name, uint64_t size)
{
    if (f->nrecs == f->reccap) {
        f->reccap = f->reccap ? f->reccap * 2 : 16;
        f->recs = ckpt_xreallocarray(f->recs, f->reccap, sizeof(*f->recs));
        f->recnames = ckpt_xreallocarray(f->recnames, f->reccap,
                                         sizeof(*f->recnames));
    }
    f->recnames[f->nrecs] = name;
    memset(&f->recs[f->nrecs], 0, sizeof(f->recs[0]));
    f->recs[f->nrecs].name = name;
    f->recs[f->nrecs].size = size;
    return f->nrecs++;
}

static int set_key(struct ujob *j, struct ckpt_pv *keystr, uint64_t k)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)k);
    keystr->u.s.p = ckpt_arena_strndup(j->plan.arena, tmp, (size_t)n);
    keystr->u.s.len = (size_t)n;
    return keystr->u.s.p ? 0 : -1;
}

/* Storage records of file fi: keys 0.. in metadata order. */
static int torch_records(struct ujob *j, int fi, struct ckpt_err *err)
{
    struct ufile *f = &j->dst.files[fi];
    uint64_t k = 0;
    add_rec(f, ckpt_xasprintf("%s/data.pkl", f->prefix), 0);
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        struct utensor *t = &j->plan.tensors[i];
        if (t->file != fi)
            continue;
        if (set_key(j, t->keystr, k) != 0)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        t->rec = add_rec(f, ckpt_xasprintf("%s/data/%llu", f->prefix,
                                           (unsigned long long)k++),
                         t->nbytes);
        f->ntensors++;
    }
    for (size_t i = 0; i < j->plan.ncopies; i++) {
        struct ucopy *c = &j->plan.copies[i];
        if (c->file != fi)
            continue;
        if (set_key(j, c->keystr, k) != 0)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        c->rec = add_rec(f, ckpt_xasprintf("%s/data/%llu", f->prefix,
                                           (unsigned long long)k++),
                         c->nbytes);
    }
    add_rec(f, ckpt_xasprintf("%s/version", f->prefix), 2);
    add_rec(f, ckpt_xasprintf("%s/byteorder", f->prefix), 6);
    return 0;
}

static int torch_layout(struct ujob *j, struct ckpt_err *err)
{
    for (size_t fi = 0; fi < j->dst.nfiles; fi++) {
        struct ufile *f = &j->dst.files[fi];
        if (f->copy_from)
            continue;
        if (torch_records(j, (int)fi, err) != 0)
            return -1;
        if (ckpt_pickle_dump(f->root, &f->head, err) != 0) {
            ckpt_err_prefix(err, "%s", f->name);
            return -1;
        }
        f->recs[0].size = f->head.len;
        ckpt_zipw_layout(f->recs, f->nrecs, &f->cd_off, &f->size);
    }
    return 0;
}

int uns_torch_layout(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err)
{
    if (uns_layout_choose(j, root, ".pt", err) != 0)
        return -1;
    return torch_layout(j, err);
}

/* --- headers, once the data is in place ------------------------------- */

static uint32_t band_crcs(const uint32_t *crcs, uint64_t nbands,
                          uint64_t band, uint64_t total)
{
    uint32_t crc = 0;
    for (uint64_t b = 0; b < nbands; b++) {
        uint64_t len = b + 1 < nbands ? band : total - b * band;
        crc = ckpt_crc32_combine(crc, crcs[b], len);
    }
    return crc;
}

static uint32_t tensor_crc(const struct utensor *t)
{
    uint32_t crc = 0;
    uint64_t lo[CKPT_MAX_DIMS], hi[CKPT_MAX_DIMS], off, len;
    for (uint64_t b = 0; b < t->nbands; b++) {
        uns_plan_band_box(t, b, lo, hi, &off, &len);
        crc = ckpt_crc32_combine(crc, t->crcs[b], len);
    }
    return crc;
}

/* Local header of record i, then (data known up front) its bytes. */
static int write_record(struct ujob *j, struct ufile *f, size_t i,
                        const void *data, size_t len, struct ckpt_err *err)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    const struct ckpt_zipw_rec *r = &f->recs[i];
    ckpt_zipw_local_header(r, &b);
    int rc = uns_out_write(j, f, b.ptr, b.len, r->lho, err);
    ckpt_buf_release(&b);
    if (rc == 0 && len)
        rc = uns_out_write(j, f, data, len, r->data_off, err);
    return rc;
}

static void fixed_crcs(struct ufile *f)
{
    struct ckpt_zipw_rec *r = f->recs;
    r[0].crc = ckpt_crc32(0, f->head.ptr, f->head.len);
    r[f->nrecs - 2].crc = ckpt_crc32(0, "3\n", 2);
    r[f->nrecs - 1].crc = ckpt_crc32(0, "little", 6);
}

int uns_layout_early(struct ujob *j, struct ufile *f, struct ckpt_err *err)
{
    if (j->o->format != CKPT_FORMAT_TORCH)
        return 0;
    size_t fi = (size_t)(f - j->dst.files);
    fixed_crcs(f);
    int rc = write_record(j, f, 0, f->head.ptr, f->head.len, err);
    if (rc == 0)
        rc = write_record(j, f, f->nrecs - 2, "3\n", 2, err);
    if (rc == 0)
        rc = write_record(j, f, f->nrecs - 1, "little", 6, err);
    for (size_t i = 0; rc == 0 && i < j->plan.ntensors; i++)
        if (j->plan.tensors[i].file == (int)fi && !j->plan.tensors[i].nbytes)
            rc = write_record(j, f, j->plan.tensors[i].rec, NULL, 0, err);
    for (size_t i = 0; rc == 0 && i < j->plan.ncopies; i++)
        if (j->plan.copies[i].file == (int)fi && !j->plan.copies[i].nbytes)
            rc = write_record(j, f, j->plan.copies[i].rec, NULL, 0, err);
    return rc;
}

int uns_layout_record_done(struct ujob *j, struct utensor *t,
                           struct ucopy *c, struct ckpt_err *err)
{
    if (j->o->format != CKPT_FORMAT_TORCH)
        return 0;
    struct ufile *f = &j->dst.files[t ? t->file : c->file];
    size_t rec = t ? t->rec : c->rec;
    f->recs[rec].crc = t ? tensor_crc(t)
                         : band_crcs(c->crcs, c->nbands, j->plan.band, c->nbytes);
    return write_record(j, f, rec, NULL, 0, err);
}

static int finish_torch(struct ujob *j, struct ufile *f, struct ckpt_err *err)
{
    struct ckpt_zipw_rec *r = f->recs;
    fixed_crcs(f);
    for (size_t i = 0; i < j->plan.ntensors; i++)
        if (&j->dst.files[j->plan.tensors[i].file] == f)
            r[j->plan.tensors[i].rec].crc = tensor_crc(&j->plan.tensors[i]);
    for (size_t i = 0; i < j->plan.ncopies; i++)
        if (&j->dst.files[j->plan.copies[i].file] == f)
            r[j->plan.copies[i].rec].crc = band_crcs(j->plan.copies[i].crcs,
                                                j->plan.copies[i].nbands, j->plan.band,
                                                j->plan.copies[i].nbytes);
    struct ckpt_buf b = CKPT_BUF_INIT;
    int rc = 0;
    /* A remote output has its records in place already (uns_layout_early,
     * uns_layout_record_done): only the central directory is left. */
    for (size_t i = 0; rc == 0 && !j->dst.out->remote && i < f->nrecs; i++) {
        ckpt_buf_reset(&b);
        ckpt_zipw_local_header(&r[i], &b);
        rc = uns_out_write(j, f, b.ptr, b.len, r[i].lho, err);
    }
    if (rc == 0 && !j->dst.out->remote)
        rc = uns_out_write(j, f, f->head.ptr, f->head.len, r[0].data_off,
                           err);
    if (rc == 0 && !j->dst.out->remote)
        rc = uns_out_write(j, f, "3\n", 2, r[f->nrecs - 2].data_off, err);
    if (rc == 0 && !j->dst.out->remote)
        rc = uns_out_write(j, f, "little", 6, r[f->nrecs - 1].data_off,
                           err);
    ckpt_buf_reset(&b);
    ckpt_zipw_central(r, f->nrecs, f->cd_off, &b);
    if (rc == 0)
        rc = uns_out_write(j, f, b.ptr, b.len, f->cd_off, err);
    ckpt_buf_release(&b);
    return rc;
}
int uns_layout_finish(struct ujob *j, struct ckpt_err *err)
{
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        struct ufile *f = &j->dst.files[i];
        if (f->copy_from || f->raw || j->o->format != CKPT_FORMAT_TORCH)
            continue;
        if (finish_torch(j, f, err) != 0)
            return -1;
    }
    return 0;
}
