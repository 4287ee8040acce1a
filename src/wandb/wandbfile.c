/*
 * wandbfile.c - read the RunRecord from the start of a run-ID.wandb file.
 *
 * The file is wandb's transaction log (wandb/sdk/internal/datastore.py):
 * a 7-byte header ":W&B", magic 0xBEE1 (LE u16), version (u8), then
 * LevelDB-log records in 32 KiB blocks, each with a 7-byte header
 * (checksum u32, length u16, type u8: FULL 1, FIRST 2, MIDDLE 3, LAST 4);
 * a block tail shorter than a header is zero padding. The checksum is
 * CRC-32 (zlib's, IEEE; not LevelDB's masked CRC-32C) of the type byte
 * and the data, as both of wandb's writers compute it (the Python
 * datastore and wandb-core's transactionlog, store version 0). Each record is a
 * protobuf `Record`; field 17 is the RunRecord, whose run_id (1), entity
 * (2), project (3), run_group (6) and display_name (8) are what wandb really
 * used, environment overrides included (wandb_internal.proto).
 *
 * Only a prefix of the file is given (the RunRecord comes first, the log
 * can be gigabytes); every length is checked against the bytes at hand
 * and every record read is checked against its checksum. A record whose
 * checksum does not match is an error, not skipped as LevelDB's reader
 * skips the rest of its block: the names in it decide where a run's
 * copy goes, and a record read up to the run's is damage worth saying.
 */
#include "wandb_int.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/torchfmt.h"
#include "ckpt/util.h"

#define HEADER_LEN 7
#define BLOCK_LEN 32768
#define MAX_RECORD (16u << 20)

enum { REC_FULL = 1, REC_FIRST, REC_MIDDLE, REC_LAST };

struct pb {
    const unsigned char *p;
    size_t len, pos;
};

static int varint(struct pb *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->pos >= b->len)
            return -1;
        unsigned char c = b->p[b->pos++];
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return 0;
    }
    return -1;
}

/* Next field: its number, and for length-delimited fields its bytes.
 * Returns 1 for a field, 0 at the end, -1 on malformed input. */
static int next_field(struct pb *b, uint64_t *num, const unsigned char **data,
                      size_t *dlen)
{
    if (b->pos >= b->len)
        return 0;
    uint64_t key, v;
    if (varint(b, &key) != 0)
        return -1;
    *num = key >> 3;
    *data = NULL;
    *dlen = 0;
    switch (key & 7) {
    case 0:
        return varint(b, &v) == 0 ? 1 : -1;
    case 1:
    case 5: {
        size_t n = (key & 7) == 1 ? 8 : 4;
        if (b->len - b->pos < n)
            return -1;
        b->pos += n;
        return 1;
    }
    case 2:
        if (varint(b, &v) != 0 || v > b->len - b->pos)
            return -1;
        *data = b->p + b->pos;
        *dlen = (size_t)v;
        b->pos += (size_t)v;
        return 1;
    default: /* groups are long gone from wandb's protos */
        return -1;
    }
}

static void set_str(char **dst, const unsigned char *s, size_t n)
{
    free(*dst);
    /* A string with an embedded NUL is cut there (names never have one);
     * one that is then empty is no name, as an empty field is. */
    *dst = n && s[0] ? ckpt_xstrndup((const char *)s, n) : NULL;
}

static int parse_runrecord(const unsigned char *p, size_t len,
                           struct ckpt_wandb_runrecord *out)
{
    struct pb b = { p, len, 0 };
    uint64_t num;
    const unsigned char *d;
    size_t n;
    int rc;
    while ((rc = next_field(&b, &num, &d, &n)) == 1) {
        if (!d)
            continue;
        if (num == 1)
            set_str(&out->run_id, d, n);
        else if (num == 2)
            set_str(&out->entity, d, n);
        else if (num == 3)
            set_str(&out->project, d, n);
        else if (num == 6)
            set_str(&out->group, d, n);
        else if (num == 8)
            set_str(&out->display_name, d, n);
    }
    return rc;
}

/* 1 if record holds a RunRecord (parsed into out), 0 if not, -1 bad. */
static int scan_record(const unsigned char *p, size_t len,
                       struct ckpt_wandb_runrecord *out)
{
    struct pb b = { p, len, 0 };
    uint64_t num;
    const unsigned char *d;
    size_t n;
    int rc;
    while ((rc = next_field(&b, &num, &d, &n)) == 1)
        if (num == 17 && d)
            return parse_runrecord(d, n, out) == 0 ? 1 : -1;
    return rc;
}

/* The checksum wandb stores for a record of this type and data. */
static uint32_t record_crc(int type, const unsigned char *p, size_t n)
{
    unsigned char t = (unsigned char)type;
    return ckpt_crc32(ckpt_crc32(0, &t, 1), p, n);
}

/* Walk the log records; call scan_record on each complete one. */
static int walk(const unsigned char *data, size_t len,
                struct ckpt_wandb_runrecord *out, struct ckpt_err *err)
{
    struct ckpt_buf rec = CKPT_BUF_INIT;
    size_t pos = HEADER_LEN, crc_at = 0;
    int found = 0, bad = 0, in_frag = 0;
    while (!found && !bad && len - pos >= HEADER_LEN) {
        size_t space = BLOCK_LEN - pos % BLOCK_LEN;
        if (space < HEADER_LEN) {
            pos += space;
            continue;
        }
        uint32_t crc = (uint32_t)data[pos] | (uint32_t)data[pos + 1] << 8 |
                       (uint32_t)data[pos + 2] << 16 |
                       (uint32_t)data[pos + 3] << 24;
        size_t dlen = data[pos + 4] | (size_t)data[pos + 5] << 8;
        int type = data[pos + 6];
        pos += HEADER_LEN;
        if (type == 0 && dlen == 0)
            break; /* zero-filled tail of a file being written */
        if (dlen > space - HEADER_LEN || type < REC_FULL || type > REC_LAST) {
            bad = 1;
            break;
        }
        if (dlen > len - pos)
            break; /* the prefix ends inside this record */
        if (record_crc(type, data + pos, dlen) != crc) {
            crc_at = pos - HEADER_LEN;
            break;
        }
        if (type == REC_FULL || type == REC_FIRST)
            ckpt_buf_reset(&rec);
        /* MIDDLE/LAST without a FIRST: a fragment we did not start. */
        int use = type == REC_FULL || type == REC_FIRST || in_frag;
        in_frag = type == REC_FIRST || (in_frag && type == REC_MIDDLE);
        if (use && rec.len + dlen <= MAX_RECORD)
            ckpt_buf_add(&rec, data + pos, dlen);
        pos += dlen;
        if (use && (type == REC_FULL || type == REC_LAST)) {
            int rc = scan_record((const unsigned char *)rec.ptr, rec.len,
                                 out);
            found = rc == 1;
            bad = rc < 0;
        }
    }
    ckpt_buf_release(&rec);
    if (crc_at)
        return ckpt_err_set(err, CKPT_EFORMAT, "wandb log record at byte "
                            "%zu: checksum mismatch (damaged)", crc_at);
    if (bad)
        return ckpt_err_set(err, CKPT_EFORMAT, "malformed wandb log record");
    if (!found)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "no run record");
    return 0;
}

int ckpt_wandbfile_runrecord(const unsigned char *data, size_t len,
                             struct ckpt_wandb_runrecord *out,
                             struct ckpt_err *err)
{
    memset(out, 0, sizeof(*out));
    if (len < HEADER_LEN || memcmp(data, ":W&B", 4) != 0 ||
        (data[4] | data[5] << 8) != 0xBEE1)
        return ckpt_err_set(err, CKPT_EFORMAT, "not a wandb log (bad "
                            "header)");
    if (walk(data, len, out, err) != 0) {
        ckpt_wandb_runrecord_release(out);
        return -1;
    }
    return 0;
}

void ckpt_wandb_runrecord_release(struct ckpt_wandb_runrecord *r)
{
    if (!r)
        return;
    free(r->run_id);
    free(r->entity);
    free(r->project);
    free(r->display_name);
    free(r->group);
    memset(r, 0, sizeof(*r));
}
