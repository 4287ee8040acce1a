/*
 * wandblog_fuzz - the run-ID.wandb reader (src/wandb/wandbfile.c): LevelDB
 * log framing, wandb's record checksums and protobuf fields on arbitrary
 * bytes, as given and with every record's checksum made right (so the
 * fuzzer gets past the checksums to the framing and protobuf code).
 * Properties: never crashes, never reads past the input, never leaks;
 *   - a log accepted as given is accepted the same with its checksums
 *     made right (they were right up to the run record);
 *   - a run record read from either, written again as a log of its own
 *     (a header record, then the RunRecord with only its fields, by this
 *     file's own encoder), reads back as the same names;
 *   - in that log, a byte of the run record's data flipped is an error
 *     (the checksum), never other names.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/buf.h"
#include "ckpt/torchfmt.h"
#include "wandb/wandb_int.h"

#define BLOCK 32768

static uint32_t crc(uint8_t type, const uint8_t *p, size_t n)
{
    return ckpt_crc32(ckpt_crc32(0, &type, 1), p, n);
}

/* Walk the framing as the reader does and store the right checksum in
 * every record header that fits the input. */
static void fix_crcs(uint8_t *d, size_t len)
{
    size_t pos = 7;
    while (len - pos >= 7) {
        size_t space = BLOCK - pos % BLOCK;
        if (space < 7) {
            pos += space;
            continue;
        }
        size_t n = d[pos + 4] | (size_t)d[pos + 5] << 8;
        if (n > space - 7 || n > len - pos - 7)
            return;
        uint32_t c = crc(d[pos + 6], d + pos + 7, n);
        for (int i = 0; i < 4; i++)
            d[pos + i] = (uint8_t)(c >> (8 * i));
        pos += 7 + n;
    }
}

static void varint(struct ckpt_buf *b, uint64_t v)
{
    do {
        ckpt_buf_addch(b, (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
        v >>= 7;
    } while (v);
}

static void field(struct ckpt_buf *b, unsigned num, const char *s)
{
    if (!s)
        return;
    varint(b, (uint64_t)num << 3 | 2);
    varint(b, strlen(s));
    ckpt_buf_addstr(b, s);
}

/* One FULL record (the run record is far below a block). */
static void record(struct ckpt_buf *log, const struct ckpt_buf *data)
{
    uint32_t c = crc(1, (const uint8_t *)data->ptr, data->len);
    unsigned char h[7] = { (unsigned char)c, (unsigned char)(c >> 8),
                           (unsigned char)(c >> 16), (unsigned char)(c >> 24),
                           (unsigned char)(data->len & 0xff),
                           (unsigned char)(data->len >> 8), 1 };
    ckpt_buf_add(log, h, 7);
    ckpt_buf_add(log, data->ptr, data->len);
}

static int eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static int same(const struct ckpt_wandb_runrecord *a,
                const struct ckpt_wandb_runrecord *b)
{
    return eq(a->run_id, b->run_id) && eq(a->entity, b->entity) &&
           eq(a->project, b->project) && eq(a->group, b->group) &&
           eq(a->display_name, b->display_name);
}

static void reencode(const struct ckpt_wandb_runrecord *r)
{
    struct ckpt_buf rr = CKPT_BUF_INIT, rec = CKPT_BUF_INIT;
    struct ckpt_buf hdr = CKPT_BUF_INIT, log = CKPT_BUF_INIT;
    field(&rr, 1, r->run_id);
    field(&rr, 2, r->entity);
    field(&rr, 3, r->project);
    field(&rr, 6, r->group);
    field(&rr, 8, r->display_name);
    varint(&rec, 17 << 3 | 2);  /* Record.run */
    varint(&rec, rr.len);
    ckpt_buf_add(&rec, rr.ptr, rr.len);
    ckpt_buf_add(&hdr, "\xaa\x01\x00", 3);  /* Record.header, empty */
    ckpt_buf_add(&log, ":W&B\xe1\xbe\x00", 7);
    record(&log, &hdr);
    size_t at = log.len;
    if (rec.len + 7 <= BLOCK - at) {
        record(&log, &rec);
        struct ckpt_wandb_runrecord again;
        struct ckpt_err err;
        uint8_t *p = (uint8_t *)log.ptr;
        if (ckpt_wandbfile_runrecord(p, log.len, &again, &err) != 0 ||
            !same(r, &again))
            __builtin_trap();
        ckpt_wandb_runrecord_release(&again);
        /* Data bytes of the run record flipped in turn (64 at most,
         * spread over it). */
        size_t step = (log.len - at - 7) / 64 + 1;
        for (size_t i = at + 7; i < log.len; i += step) {
            p[i] ^= 0x5a;
            if (ckpt_wandbfile_runrecord(p, log.len, &again, &err) == 0 ||
                err.code != CKPT_EFORMAT)
                __builtin_trap();
            p[i] ^= 0x5a;
        }
    }
    ckpt_buf_release(&rr);
    ckpt_buf_release(&rec);
    ckpt_buf_release(&hdr);
    ckpt_buf_release(&log);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_wandb_runrecord r, f;
    struct ckpt_err err;
    int ok = ckpt_wandbfile_runrecord(data, size, &r, &err) == 0;
    uint8_t *fixed = malloc(size ? size : 1);
    if (!fixed) {
        if (ok)
            ckpt_wandb_runrecord_release(&r);
        return 0;
    }
    memcpy(fixed, data, size);
    if (size >= 7)
        fix_crcs(fixed, size);
    int fok = ckpt_wandbfile_runrecord(fixed, size, &f, &err) == 0;
    if (ok && (!fok || !same(&r, &f)))
        __builtin_trap();
    if (fok) {
        reencode(&f);
        ckpt_wandb_runrecord_release(&f);
    }
    if (ok)
        ckpt_wandb_runrecord_release(&r);
    free(fixed);
    return 0;
}
