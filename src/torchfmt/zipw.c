/*
 * zipw.c - torch.save-compatible zip layout and headers (see torchfmt.h).
 *
 * torch's reader (miniz via PyTorchStreamReader) finds records through the
 * central directory and takes each data offset from the local header, so
 * the only layout rule that matters to it is alignment: torch mmaps and
 * expects 64-byte aligned storages, which the "FB" extra field provides.
 */
#include <string.h>

#include "ckpt/torchfmt.h"

#define ALIGN 64
#define U32MAX 0xffffffffu

static void put(struct ckpt_buf *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        ckpt_buf_addch(b, (char)(v >> (8 * i)));
}

static int local_zip64(const struct ckpt_zipw_rec *r)
{
    return r->size >= U32MAX;
}

/* Extra field length of r's local header at lho. */
static uint64_t local_extra(const struct ckpt_zipw_rec *r, uint64_t lho)
{
    uint64_t fixed = 30 + strlen(r->name) + (local_zip64(r) ? 20 : 0) + 4;
    uint64_t pad = (ALIGN - (lho + fixed) % ALIGN) % ALIGN;
    return (local_zip64(r) ? 20 : 0) + 4 + pad;
}

void ckpt_zipw_layout(struct ckpt_zipw_rec *recs, size_t n,
                      uint64_t *cd_off, uint64_t *total)
{
    uint64_t pos = 0, cd = 0;
    for (size_t i = 0; i < n; i++) {
        struct ckpt_zipw_rec *r = &recs[i];
        r->lho = pos;
        r->data_off = pos + 30 + strlen(r->name) + local_extra(r, pos);
        pos = r->data_off + r->size;
    }
    *cd_off = pos;
    for (size_t i = 0; i < n; i++) {
        int z = recs[i].size >= U32MAX || recs[i].lho >= U32MAX;
        cd += 46 + strlen(recs[i].name) + (z ? 4 + 24 : 0);
    }
    *total = pos + cd + 56 + 20 + 22;
}

void ckpt_zipw_local_header(const struct ckpt_zipw_rec *r,
                            struct ckpt_buf *out)
{
    size_t nl = strlen(r->name);
    uint64_t extra = local_extra(r, r->lho);
    int z = local_zip64(r);
    put(out, 0x04034b50u, 4);
    put(out, z ? 45 : 20, 2);        /* version needed */
    put(out, 0, 2);                  /* flags: sizes and CRC are here */
    put(out, 0, 2);                  /* method: stored */
    put(out, 0, 2);                  /* time */
    put(out, 0x21, 2);               /* date: 1980-01-01 */
    put(out, r->crc, 4);
    put(out, z ? U32MAX : r->size, 4);
    put(out, z ? U32MAX : r->size, 4);
    put(out, nl, 2);
    put(out, extra, 2);
    ckpt_buf_add(out, r->name, nl);
    if (z) {
        put(out, 1, 2);
        put(out, 16, 2);
        put(out, r->size, 8);
        put(out, r->size, 8);
    }
    uint64_t pad = extra - (z ? 20 : 0) - 4;
    put(out, 0x4246, 2);             /* "FB" */
    put(out, pad, 2);
    for (uint64_t i = 0; i < pad; i++)
        ckpt_buf_addch(out, 'Z');
}

static void central_entry(const struct ckpt_zipw_rec *r, struct ckpt_buf *out)
{
    size_t nl = strlen(r->name);
    int zs = r->size >= U32MAX, zo = r->lho >= U32MAX;
    int z = zs || zo;
    put(out, 0x02014b50u, 4);
    put(out, 45, 2);                 /* version made by */
    put(out, z ? 45 : 20, 2);
    put(out, 0, 2);
    put(out, 0, 2);
    put(out, 0, 2);
    put(out, 0x21, 2);
    put(out, r->crc, 4);
    put(out, z ? U32MAX : r->size, 4);
    put(out, z ? U32MAX : r->size, 4);
    put(out, nl, 2);
    put(out, z ? 28 : 0, 2);
    put(out, 0, 2);                  /* comment */
    put(out, 0, 2);                  /* disk */
    put(out, 0, 2);                  /* internal attributes */
    put(out, 0, 4);                  /* external attributes */
    put(out, z ? U32MAX : r->lho, 4);
    ckpt_buf_add(out, r->name, nl);
    if (z) {
        /* Always all three fields so the length is fixed at layout time;
         * that is valid because all three headers fields say 0xffffffff. */
        put(out, 1, 2);
        put(out, 24, 2);
        put(out, r->size, 8);
        put(out, r->size, 8);
        put(out, r->lho, 8);
    }
}

void ckpt_zipw_central(const struct ckpt_zipw_rec *recs, size_t n,
                       uint64_t cd_off, struct ckpt_buf *out)
{
    size_t start = out->len;
    for (size_t i = 0; i < n; i++)
        central_entry(&recs[i], out);
    uint64_t cd_size = out->len - start;
    uint64_t eocd64 = cd_off + cd_size;
    put(out, 0x06064b50u, 4);        /* ZIP64 end of central directory */
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, n, 8);
    put(out, n, 8);
    put(out, cd_size, 8);
    put(out, cd_off, 8);
    put(out, 0x07064b50u, 4);        /* locator */
    put(out, 0, 4);
    put(out, eocd64, 8);
    put(out, 1, 4);
    put(out, 0x06054b50u, 4);        /* end of central directory */
    put(out, 0, 2);
    put(out, 0, 2);
    put(out, n >= 0xffff ? 0xffff : n, 2);
    put(out, n >= 0xffff ? 0xffff : n, 2);
    put(out, cd_size >= U32MAX ? U32MAX : cd_size, 4);
    put(out, cd_off >= U32MAX ? U32MAX : cd_off, 4);
    put(out, 0, 2);
}
