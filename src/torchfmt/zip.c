/*
 * zip.c - reader for torch.save's zip container (PyTorchStreamWriter).
 *
 * torch writes stored records with data descriptors: the local headers
 * carry zero CRC and sizes, so only the central directory is trusted. It
 * always writes the ZIP64 end records; big records carry ZIP64 extras.
 * Each record's data offset comes from its LOCAL header (30 + name + extra,
 * the extra being the "FB" alignment padding), as torch's getRecordOffset
 * does. Bytes before the archive (a zip embedded at an offset, as DCP
 * items are, or a stub) are tolerated by measuring where the central
 * directory really is against where the end record says it is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/torchfmt.h"
#include "ckpt/util.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CDIR 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_LOC64 0x07064b50u
#define SIG_EOCD64 0x06064b50u

#define MAX_CDIR (256u << 20)   /* central directory bytes we accept */
#define MAX_TAIL (22 + 65535 + 20)

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

int ckpt_rd_read(const struct ckpt_rd *rd, uint64_t off, void *buf,
                 size_t len, struct ckpt_err *err)
{
    if (off > rd->size || len > rd->size - off)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: truncated (needs %llu bytes at offset %llu,"
                            " has %llu)", rd->name, (unsigned long long)len,
                            (unsigned long long)off,
                            (unsigned long long)rd->size);
    if (!len)
        return 0;
    return rd->read(rd->ctx, rd->base + off, buf, len, err);
}

static int mem_read(void *ctx, uint64_t off, void *buf, size_t len,
                    struct ckpt_err *err)
{
    (void)err;
    memcpy(buf, (const char *)ctx + off, len);
    return 0;
}

void ckpt_rd_mem(struct ckpt_rd *rd, const void *data, size_t len,
                 const char *name)
{
    rd->read = mem_read;
    rd->ctx = (void *)data;
    rd->base = 0;
    rd->size = len;
    rd->name = name;
}

struct ends {
    uint64_t cd_off, cd_size, count;  /* as recorded */
    uint64_t cd_pos;                  /* where the directory really is */
};

static int bad(const struct ckpt_rd *rd, struct ckpt_err *err,
               const char *what)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: not a torch.save zip (%s)",
                        rd->name, what);
}

/* ZIP64 end record, found through the locator just before the EOCD. */
static int read_eocd64(const struct ckpt_rd *rd, uint64_t loc_pos,
                       const unsigned char *loc, struct ends *e,
                       struct ckpt_err *err)
{
    unsigned char r[56];
    uint64_t recorded = le(loc + 8, 8);
    /* Where the record is if nothing precedes the archive, else directly
     * before the locator (torch writes no extensible data). */
    uint64_t pos = recorded;
    if (rd->size < 56 || pos > rd->size - 56 || ckpt_rd_read(rd, pos, r, 56, err) != 0 ||
        le(r, 4) != SIG_EOCD64) {
        if (loc_pos < 56)
            return bad(rd, err, "ZIP64 end record missing");
        pos = loc_pos - 56;
        if (ckpt_rd_read(rd, pos, r, 56, err) != 0)
            return -1;
        if (le(r, 4) != SIG_EOCD64)
            return bad(rd, err, "ZIP64 end record missing");
    }
    e->count = le(r + 32, 8);
    e->cd_size = le(r + 40, 8);
    e->cd_off = le(r + 48, 8);
    if (e->cd_size > pos)
        return bad(rd, err, "central directory out of range");
    e->cd_pos = pos - e->cd_size;
    return 0;
}

/* Look for the end records in the last `tail` bytes. 1 found, 0 not
 * there, -1 error. */
static int scan_tail(const struct ckpt_rd *rd, size_t tail, struct ends *e,
                     struct ckpt_err *err)
{
    unsigned char *buf = malloc(tail);
    if (!buf)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    uint64_t start = rd->size - tail;
    int rc = ckpt_rd_read(rd, start, buf, tail, err);
    size_t i = tail - 22 + 1;
    while (rc == 0 && i-- > 0)
        if (le(buf + i, 4) == SIG_EOCD)
            break;
    if (rc == 0 && i == (size_t)-1) {
        free(buf);
        return 0;
    }
    if (rc == 0 && i >= 20 && le(buf + i - 20, 4) == SIG_LOC64) {
        rc = read_eocd64(rd, start + i - 20, buf + i - 20, e, err);
    } else if (rc == 0) {
        e->count = le(buf + i + 10, 2);
        e->cd_size = le(buf + i + 12, 4);
        e->cd_off = le(buf + i + 16, 4);
        if (e->cd_size > start + i)
            rc = bad(rd, err, "central directory out of range");
        else
            e->cd_pos = start + i - e->cd_size;
    }
    free(buf);
    return rc ? -1 : 1;
}

static int find_ends(const struct ckpt_rd *rd, struct ends *e,
                     struct ckpt_err *err)
{
    if (rd->size < 22)
        return bad(rd, err, "too short");
    /* torch writes no archive comment: the end records are in the last
     * 98 bytes. Read a little first, the 64 KiB comment window only if
     * that fails (this runs once per DCP item). */
    size_t small = rd->size < 1024 ? (size_t)rd->size : 1024;
    int rc = scan_tail(rd, small, e, err);
    if (rc == 0 && small < rd->size)
        rc = scan_tail(rd, rd->size < MAX_TAIL ? (size_t)rd->size : MAX_TAIL,
                       e, err);
    if (rc == 0)
        return bad(rd, err, "no end of central directory");
    return rc < 0 ? -1 : 0;
}

/* Apply the ZIP64 extra (id 1) to the fields that were 0xffffffff. */
static void zip64_extra(const unsigned char *x, size_t n, uint64_t *usize,
                        uint64_t *csize, uint64_t *lho)
{
    while (n >= 4) {
        size_t id = le(x, 2), sz = le(x + 2, 2);
        if (sz > n - 4)
            return;
        if (id == 1) {
            const unsigned char *p = x + 4, *end = x + 4 + sz;
            uint64_t *f[3] = { usize, csize, lho };
            for (int k = 0; k < 3; k++)
                if (*f[k] == 0xffffffffu && p + 8 <= end) {
                    *f[k] = le(p, 8);
                    p += 8;
                }
            return;
        }
        x += 4 + sz;
        n -= 4 + sz;
    }
}

struct raw_entry {
    const char *name;
    uint64_t lho, size;
    uint32_t crc;
};

/* Data offset from the local header: 30 + name length + extra length. */
static int data_offset(const struct ckpt_rd *rd, uint64_t delta,
                       struct raw_entry *r, uint64_t *off,
                       struct ckpt_err *err)
{
    unsigned char h[30];
    uint64_t pos;
    if (ckpt_add_u64(r->lho, delta, &pos) != 0 ||
        ckpt_rd_read(rd, pos, h, 30, err) != 0)
        return -1;
    if (le(h, 4) != SIG_LOCAL)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: bad local header for record '%s'",
                            rd->name, r->name);
    *off = pos + 30 + le(h + 26, 2) + le(h + 28, 2);
    if (*off > rd->size || r->size > rd->size - *off)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: record '%s' extends past the end",
                            rd->name, r->name);
    return 0;
}

/* Parse one central directory entry at p (avail bytes). Returns its total
 * length, or 0 on error. */
static size_t parse_cdir_entry(struct ckpt_tzip *z, const struct ckpt_rd *rd,
                               const unsigned char *p, size_t avail,
                               struct raw_entry *r, struct ckpt_err *err)
{
    if (avail < 46 || le(p, 4) != SIG_CDIR) {
        bad(rd, err, "bad central directory entry");
        return 0;
    }
    size_t nl = le(p + 28, 2), xl = le(p + 30, 2), cl = le(p + 32, 2);
    if (46 + nl + xl + cl > avail) {
        bad(rd, err, "central directory truncated");
        return 0;
    }
    uint64_t csize = le(p + 20, 4), usize = le(p + 24, 4);
    r->lho = le(p + 42, 4);
    r->crc = (uint32_t)le(p + 16, 4);
    zip64_extra(p + 46 + nl, xl, &usize, &csize, &r->lho);
    r->name = ckpt_arena_strndup(z->arena, (const char *)p + 46, nl);
    if (!r->name) {
        ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        return 0;
    }
    if (le(p + 10, 2) != 0 || csize != usize) {
        ckpt_err_set(err, CKPT_EUNSUPPORTED,
                     "%s: record '%s' is compressed (torch.save writes "
                     "stored records only)", rd->name, r->name);
        return 0;
    }
    r->size = usize;
    return 46 + nl + xl + cl;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct ckpt_tzip_entry *)a)->name,
                  ((const struct ckpt_tzip_entry *)b)->name);
}

/* Keep records under the prefix of the first one, as torch does. */
static int add_entry(struct ckpt_tzip *z, const struct ckpt_rd *rd,
                     uint64_t delta, struct raw_entry *r,
                     struct ckpt_err *err)
{
    if (!z->prefix) {
        const char *slash = strchr(r->name, '/');
        if (!slash)
            return bad(rd, err, "record without an archive prefix");
        z->prefix = ckpt_arena_strndup(z->arena, r->name,
                                       (size_t)(slash - r->name));
        if (!z->prefix)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    size_t pl = strlen(z->prefix);
    if (strncmp(r->name, z->prefix, pl) || r->name[pl] != '/')
        return 0;
    struct ckpt_tzip_entry *e = &z->entries[z->n];
    if (data_offset(rd, delta, r, &e->data_off, err) != 0)
        return -1;
    e->name = r->name + pl + 1;
    e->size = r->size;
    e->crc = r->crc;
    z->n++;
    return 0;
}

static int parse_cdir(struct ckpt_tzip *z, const struct ckpt_rd *rd,
                      const struct ends *e, const unsigned char *cd,
                      struct ckpt_err *err)
{
    uint64_t delta = e->cd_pos - e->cd_off;
    size_t pos = 0;
    for (uint64_t i = 0; i < e->count; i++) {
        struct raw_entry r;
        size_t used = parse_cdir_entry(z, rd, cd + pos,
                                       (size_t)e->cd_size - pos, &r, err);
        if (!used || add_entry(z, rd, delta, &r, err) != 0)
            return -1;
        pos += used;
    }
    ckpt_sort(z->entries, z->n, sizeof(*z->entries), cmp_entry);
    return 0;
}

static int read_byteorder(struct ckpt_tzip *z, const struct ckpt_rd *rd,
                          struct ckpt_err *err)
{
    const struct ckpt_tzip_entry *bo = ckpt_tzip_find(z, "byteorder");
    char buf[8];
    if (!bo)
        return 0;
    if (bo->size > 6 || ckpt_rd_read(rd, bo->data_off, buf,
                                     (size_t)bo->size, err) != 0)
        return bad(rd, err, "bad byteorder record");
    if (bo->size == 3 && !memcmp(buf, "big", 3))
        z->big_endian = 1;
    else if (bo->size != 6 || memcmp(buf, "little", 6))
        return bad(rd, err, "bad byteorder record");
    return 0;
}

int ckpt_tzip_open(struct ckpt_tzip **out, const struct ckpt_rd *rd,
                   struct ckpt_err *err)
{
    struct ends e = { 0, 0, 0, 0 };
    *out = NULL;
    if (find_ends(rd, &e, err) != 0)
        return -1;
    if (e.cd_pos < e.cd_off)
        return bad(rd, err, "central directory offset out of range");
    if (e.cd_size > MAX_CDIR || e.count > e.cd_size / 46)
        return bad(rd, err, "central directory too large");
    struct ckpt_tzip *z = calloc(1, sizeof(*z));
    unsigned char *cd = malloc(e.cd_size ? (size_t)e.cd_size : 1);
    int rc = -1;
    if (!z || !cd || !(z->arena = ckpt_arena_new(0))) {
        ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        goto out;
    }
    z->entries = ckpt_arena_array(z->arena, e.count ? e.count : 1,
                                  sizeof(*z->entries));
    if (!z->entries) {
        ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        goto out;
    }
    if (ckpt_rd_read(rd, e.cd_pos, cd, (size_t)e.cd_size, err) != 0 ||
        parse_cdir(z, rd, &e, cd, err) != 0)
        goto out;
    if (!z->n) {
        bad(rd, err, "no records");
        goto out;
    }
    rc = read_byteorder(z, rd, err);
out:
    free(cd);
    if (rc == 0)
        *out = z;
    else
        ckpt_tzip_free(z);
    return rc;
}

void ckpt_tzip_free(struct ckpt_tzip *z)
{
    if (!z)
        return;
    ckpt_arena_free(z->arena);
    free(z);
}

const struct ckpt_tzip_entry *ckpt_tzip_find(const struct ckpt_tzip *z,
                                             const char *name)
{
    struct ckpt_tzip_entry key = { name, 0, 0, 0 };
    return bsearch(&key, z->entries, z->n, sizeof(*z->entries), cmp_entry);
}

int ckpt_tzip_read(const struct ckpt_tzip *z, const struct ckpt_rd *rd,
                   const struct ckpt_tzip_entry *e, size_t max, char **data,
                   size_t *len, struct ckpt_err *err)
{
    (void)z;
    if (e->size > max)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: record '%s' too large (%llu bytes)",
                            rd->name, e->name, (unsigned long long)e->size);
    char *p = malloc((size_t)e->size + 1);
    if (!p)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (ckpt_rd_read(rd, e->data_off, p, (size_t)e->size, err) != 0) {
        free(p);
        return -1;
    }
    p[e->size] = '\0';
    *data = p;
    *len = (size_t)e->size;
    return 0;
}

/* Only the tail and the central directory are read (never a local
 * header: one read per record is too many on object storage): the end
 * records must be there and every record the directory lists must end
 * before the directory starts. The first bytes tell a zip cut short
 * ("PK\3\4" and no end records: 1) from a file that is no zip at all
 * (a pre-1.6 torch.save pickle: CKPT_EUNSUPPORTED). */
int ckpt_tzip_whole(const struct ckpt_rd *rd, struct ckpt_err *err)
{
    static const unsigned char sig[4] = { 'P', 'K', 3, 4 };
    unsigned char head[4];
    size_t h = rd->size < 4 ? (size_t)rd->size : 4;
    if (ckpt_rd_read(rd, 0, head, h, err) != 0)
        return -1;
    if (memcmp(head, sig, h) != 0 || !h)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: not a zip file "
                            "(an older torch.save format?)", rd->name);
    if (h < 4)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: %llu bytes, cut short",
                            rd->name, (unsigned long long)rd->size), 1;
    struct ends e = { 0, 0, 0, 0 };
    size_t small = rd->size < 1024 ? (size_t)rd->size : 1024;
    int rc = rd->size < 22 ? 0 : scan_tail(rd, small, &e, err);
    if (rc == 0 && rd->size >= 22 && small < rd->size)
        rc = scan_tail(rd, rd->size < MAX_TAIL ? (size_t)rd->size : MAX_TAIL,
                       &e, err);
    if (rc < 0)
        return err->code == CKPT_EFORMAT ? 1 : -1;
    if (rc == 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: cut short (no end of "
                            "central directory)", rd->name), 1;
    if (e.cd_pos < e.cd_off || e.cd_size > MAX_CDIR ||
        e.count > e.cd_size / 46)
        return bad(rd, err, "central directory out of range"), 1;
    unsigned char *cd = malloc(e.cd_size ? (size_t)e.cd_size : 1);
    if (!cd)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    rc = ckpt_rd_read(rd, e.cd_pos, cd, (size_t)e.cd_size, err);
    uint64_t delta = e.cd_pos - e.cd_off;
    size_t pos = 0;
    for (uint64_t i = 0; rc == 0 && i < e.count; i++) {
        const unsigned char *p = cd + pos;
        size_t avail = (size_t)e.cd_size - pos;
        if (avail < 46 || le(p, 4) != SIG_CDIR) {
            rc = bad(rd, err, "bad central directory entry");
            break;
        }
        size_t nl = le(p + 28, 2), xl = le(p + 30, 2), cl = le(p + 32, 2);
        if (46 + nl + xl + cl > avail) {
            rc = bad(rd, err, "central directory truncated");
            break;
        }
        uint64_t csize = le(p + 20, 4), usize = le(p + 24, 4);
        uint64_t lho = le(p + 42, 4), end;
        zip64_extra(p + 46 + nl, xl, &usize, &csize, &lho);
        if (ckpt_add_u64(lho, delta, &end) != 0 ||
            ckpt_add_u64(end, 30 + nl, &end) != 0 ||
            ckpt_add_u64(end, csize, &end) != 0 || end > e.cd_pos)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: record '%.*s' "
                              "extends past the end", rd->name, (int)nl,
                              (const char *)p + 46);
        pos += 46 + nl + xl + cl;
    }
    free(cd);
    if (rc != 0)
        return err->code == CKPT_EFORMAT ? 1 : -1;
    return 0;
}
