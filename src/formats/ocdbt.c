/*
 * ocdbt.c - TensorStore OCDBT decoding: the envelope every encoded object
 * shares (magic, length, version, compression, CRC-32C), data file tables,
 * the manifest, version tree nodes and B+tree nodes
 * (tensorstore/kvstore/ocdbt/index.rst; field order as TensorStore's
 * codecs write it, which the spec tables leave ambiguous in places:
 * manifest_kind after the uuid, value_kind one byte per entry, interior
 * entries' subtree_common_prefix_length before the key bytes).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "ckpt/orbax.h"
#include "ckpt/util.h"

/* --- CRC-32C -------------------------------------------------------------- */

static uint32_t crc32c_table[8][256];

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] = (crc32c_table[t - 1][i] >> 8) ^
                crc32c_table[0][crc32c_table[t - 1][i] & 0xff];
}

uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    const unsigned char *p = buf;
    pthread_once(&once, crc32c_init);
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                             (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
              crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^
              crc32c_table[3][p[4]] ^ crc32c_table[2][p[5]] ^
              crc32c_table[1][p[6]] ^ crc32c_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc32c_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

/* --- reader --------------------------------------------------------------- */

struct rd {
    const unsigned char *p;
    size_t n, pos;
    int bad;            /* ran past the end or a malformed varint */
};

static uint64_t rd_varint(struct rd *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->pos >= r->n) {
            r->bad = 1;
            return 0;
        }
        unsigned char b = r->p[r->pos++];
        /* The tenth byte may only carry the top bit of a uint64. */
        if (shift == 63 && b > 1) {
            r->bad = 1;
            return 0;
        }
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = 1;
    return 0;
}

static uint8_t rd_u8(struct rd *r)
{
    if (r->pos >= r->n) {
        r->bad = 1;
        return 0;
    }
    return r->p[r->pos++];
}

static uint64_t rd_le(struct rd *r, int bytes)
{
    uint64_t v = 0;
    if (r->n - r->pos < (size_t)bytes || r->pos > r->n) {
        r->bad = 1;
        r->pos = r->n;
        return 0;
    }
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[r->pos + (size_t)i] << (8 * i);
    r->pos += (size_t)bytes;
    return v;
}

static const unsigned char *rd_bytes(struct rd *r, size_t len)
{
    if (r->n - r->pos < len) {
        r->bad = 1;
        r->pos = r->n;
        return NULL;
    }
    const unsigned char *p = r->p + r->pos;
    r->pos += len;
    return p;
}

static int truncated(const char *name, const char *what,
                     struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: %s truncated or malformed "
                        "(a varint or field runs past the end)", name, what);
}

/* --- envelope ------------------------------------------------------------- */

static int unzstd(const unsigned char *in, size_t inlen, struct ckpt_arena *a,
                  const unsigned char **out, size_t *outlen, const char *name,
                  struct ckpt_err *err)
{
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    size_t cap = inlen * 4 + 4096, len = 0;
    char *buf = NULL;
    int rc = 0;
    if (!dc)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (cap > CKPT_OCDBT_MAX_NODE)
        cap = CKPT_OCDBT_MAX_NODE;
    buf = ckpt_xmalloc(cap);
    ZSTD_inBuffer ib = { in, inlen, 0 };
    size_t ret = 1;
    while (rc == 0) {
        ZSTD_outBuffer ob = { buf, cap, len };
        ret = ZSTD_decompressStream(dc, &ob, &ib);
        len = ob.pos;
        if (ZSTD_isError(ret))
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: corrupt zstd body: %s",
                              name, ZSTD_getErrorName(ret));
        else if (ret == 0 && ib.pos == ib.size)
            break;
        else if (len == cap) {
            if (cap >= CKPT_OCDBT_MAX_NODE)
                rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: decoded body "
                                  "larger than %zu bytes", name,
                                  CKPT_OCDBT_MAX_NODE);
            else {
                cap = cap * 2 > CKPT_OCDBT_MAX_NODE ? CKPT_OCDBT_MAX_NODE
                                                    : cap * 2;
                buf = ckpt_xrealloc(buf, cap);
            }
        } else if (ib.pos == ib.size)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: truncated zstd body",
                              name);
    }
    ZSTD_freeDCtx(dc);
    if (rc == 0) {
        unsigned char *o = ckpt_arena_alloc(a, len ? len : 1);
        if (!o)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        else {
            memcpy(o, buf, len);
            *out = o;
            *outlen = len;
        }
    }
    free(buf);
    return rc;
}

static int envelope(const void *data, size_t n, uint32_t magic,
                    const char *name, struct ckpt_arena *a, struct rd *body,
                    struct ckpt_err *err)
{
    const unsigned char *p = data;
    if (n < 18)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: %zu bytes is too short "
                            "for an OCDBT object", name, n);
    if (n > CKPT_OCDBT_MAX_NODE)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: larger than %zu bytes",
                            name, CKPT_OCDBT_MAX_NODE);
    uint32_t m = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                 (uint32_t)p[2] << 8 | p[3];
    if (m != magic)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: magic %08x, expected "
                            "%08x", name, m, magic);
    struct rd r = { p, n - 4, 4, 0 };
    uint64_t len = rd_le(&r, 8);
    if (len != n)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: length in header %llu, "
                            "object has %zu bytes", name,
                            (unsigned long long)len, n);
    uint32_t want = (uint32_t)rd_le(&(struct rd){ p, n, n - 4, 0 }, 4);
    if (ckpt_crc32c(0, p, n - 4) != want)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: CRC-32C checksum "
                            "mismatch", name);
    uint64_t version = rd_varint(&r);
    uint64_t comp = rd_varint(&r);
    if (r.bad)
        return truncated(name, "header", err);
    if (version != 0)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: format version "
                            "%llu (ckpt reads 0)", name,
                            (unsigned long long)version);
    if (comp > 1)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: compression format "
                            "%llu", name, (unsigned long long)comp);
    *body = (struct rd){ p + r.pos, n - 4 - r.pos, 0, 0 };
    if (comp == 0) {
        /* Parsed objects point into their arena, never into the input
         * (inline values outlive the caller's buffer). */
        unsigned char *o = ckpt_arena_alloc(a, body->n ? body->n : 1);
        if (!o)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        memcpy(o, body->p, body->n);
        body->p = o;
    } else {
        const unsigned char *o = NULL;
        size_t olen = 0;
        if (unzstd(body->p, body->n, a, &o, &olen, name, err) != 0)
            return -1;
        *body = (struct rd){ o, olen, 0, 0 };
    }
    return 0;
}

/* --- data file table ------------------------------------------------------ */

static int rd_len16(struct rd *r, uint64_t *v)
{
    *v = rd_varint(r);
    return r->bad || *v > CKPT_OCDBT_MAX_PATH ? -1 : 0;
}

static int files_lengths(struct rd *r, size_t nf, uint64_t *pre,
                         uint64_t *suf, uint64_t *blen, const char *name,
                         struct ckpt_err *err)
{
    pre[0] = 0;
    for (size_t i = 1; i < nf; i++)
        if (rd_len16(r, &pre[i]) != 0)
            goto bad;
    for (size_t i = 0; i < nf; i++)
        if (rd_len16(r, &suf[i]) != 0)
            goto bad;
    for (size_t i = 0; i < nf; i++)
        if (rd_len16(r, &blen[i]) != 0)
            goto bad;
    uint64_t prev_len = 0, prev_base = 0;
    for (size_t i = 0; i < nf; i++) {
        uint64_t plen = pre[i] + suf[i];
        if (pre[i] > prev_len || plen > CKPT_OCDBT_MAX_PATH)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file %zu: "
                                "path_prefix_length %llu invalid", name, i,
                                (unsigned long long)pre[i]);
        if (blen[i] > plen)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file %zu: "
                                "base_path_length %llu > path length %llu",
                                name, i, (unsigned long long)blen[i],
                                (unsigned long long)plen);
        if (i && pre[i] > (prev_base < blen[i] ? prev_base : blen[i]) &&
            blen[i] != prev_base)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file %zu: "
                                "path_prefix_length %llu crosses a base "
                                "path", name, i,
                                (unsigned long long)pre[i]);
        prev_len = plen;
        prev_base = blen[i];
    }
    return 0;
bad:
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file table: invalid "
                        "16-bit varint", name);
}

static int files_read(struct rd *r, const char *base, struct ckpt_arena *a,
                      struct ckpt_ocdbt_file **out, size_t *nout,
                      const char *name, struct ckpt_err *err)
{
    uint64_t nf = rd_varint(r);
    size_t blen0 = strlen(base);
    if (r->bad)
        return truncated(name, "data file table", err);
    *out = NULL;
    *nout = 0;
    if (nf == 0)
        return 0;
    /* Each file costs at least three varint bytes (two for the first). */
    if (nf > (r->n - r->pos + 1) / 3 + 1)
        return truncated(name, "data file table", err);
    uint64_t *len = ckpt_xcalloc((size_t)nf * 3, sizeof(*len));
    uint64_t *pre = len, *suf = len + nf, *blen = len + 2 * nf;
    struct ckpt_ocdbt_file *f = ckpt_arena_array(a, (size_t)nf,
                                                 sizeof(*f));
    int rc = f ? files_lengths(r, (size_t)nf, pre, suf, blen, name, err)
               : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    const char *prev = "";
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        size_t plen = (size_t)(pre[i] + suf[i]);
        const unsigned char *s = rd_bytes(r, (size_t)suf[i]);
        if (!s) {
            rc = truncated(name, "data file table", err);
            break;
        }
        if (blen0 + plen > CKPT_OCDBT_MAX_PATH) {
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: data file %zu: "
                              "path_length %zu with its base path exceeds "
                              "%u", name, i, blen0 + plen,
                              CKPT_OCDBT_MAX_PATH);
            break;
        }
        char *path = ckpt_arena_alloc(a, blen0 + plen + 1);
        if (!path) {
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
            break;
        }
        memcpy(path, base, blen0);
        memcpy(path + blen0, prev, (size_t)pre[i]);
        memcpy(path + blen0 + pre[i], s, (size_t)suf[i]);
        path[blen0 + plen] = 0;
        if (memchr(path, 0, blen0 + plen)) {
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: data file %zu: NUL "
                              "in path", name, i);
            break;
        }
        f[i] = (struct ckpt_ocdbt_file){ path, blen0 + plen,
                                         blen0 + (size_t)blen[i] };
        prev = path + blen0;
    }
    free(len);
    if (rc == 0) {
        *out = f;
        *nout = (size_t)nf;
    }
    return rc;
}

int ckpt_ocdbt_files_parse(const unsigned char *p, size_t n,
                           const char *base, struct ckpt_arena *a,
                           struct ckpt_ocdbt_file **files, size_t *nfiles,
                           size_t *used, const char *name,
                           struct ckpt_err *err)
{
    struct rd r = { p, n, 0, 0 };
    int rc = files_read(&r, base, a, files, nfiles, name, err);
    *used = r.pos;
    return rc;
}

/* --- references ----------------------------------------------------------- */

/* data_file_id[n], offset[n], length[n] into refs (stride apart). */
static int read_refs(struct rd *r, size_t n, struct ckpt_ocdbt_ref *ref,
                     size_t stride, const struct ckpt_ocdbt_file *files,
                     size_t nfiles, int allow_missing, const char *name,
                     struct ckpt_err *err)
{
#define REF(i) ((struct ckpt_ocdbt_ref *)((char *)ref + (i) * stride))
    for (size_t i = 0; i < n; i++) {
        uint64_t id = rd_varint(r);
        if (r->bad)
            return truncated(name, "references", err);
        if (id >= nfiles)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file index "
                                "%llu, table has %zu", name,
                                (unsigned long long)id, nfiles);
        REF(i)->file = &files[id];
    }
    for (size_t i = 0; i < n; i++)
        REF(i)->offset = rd_varint(r);
    for (size_t i = 0; i < n; i++)
        REF(i)->length = rd_varint(r);
    if (r->bad)
        return truncated(name, "references", err);
    for (size_t i = 0; i < n; i++) {
        struct ckpt_ocdbt_ref *x = REF(i);
        if (x->offset == CKPT_OCDBT_MISSING &&
            x->length == CKPT_OCDBT_MISSING && allow_missing) {
            x->file = NULL;
            continue;
        }
        if (x->offset > INT64_MAX || x->length > INT64_MAX - x->offset)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: reference offset "
                                "%llu + length %llu overflows", name,
                                (unsigned long long)x->offset,
                                (unsigned long long)x->length);
    }
    return 0;
#undef REF
}

static void read_stats(struct rd *r, size_t n, struct ckpt_ocdbt_stats *s,
                       size_t stride)
{
#define ST(i) ((struct ckpt_ocdbt_stats *)((char *)s + (i) * stride))
    for (size_t i = 0; i < n; i++)
        ST(i)->num_keys = rd_varint(r);
    for (size_t i = 0; i < n; i++)
        ST(i)->num_tree_bytes = rd_varint(r);
    for (size_t i = 0; i < n; i++)
        ST(i)->num_indirect_value_bytes = rd_varint(r);
#undef ST
}

/* --- version tree entries ------------------------------------------------- */

static int read_versions(struct rd *r, uint8_t arity, struct ckpt_arena *a,
                         const struct ckpt_ocdbt_file *files, size_t nfiles,
                         struct ckpt_ocdbt_version **out, size_t *nout,
                         const char *name, struct ckpt_err *err)
{
    uint64_t n = rd_varint(r);
    if (r->bad)
        return truncated(name, "versions", err);
    if (n == 0 || n > ((uint64_t)1 << arity))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: %llu versions (1 to "
                            "%llu allowed)", name, (unsigned long long)n,
                            (unsigned long long)1 << arity);
    struct ckpt_ocdbt_version *v = ckpt_arena_array(a, (size_t)n,
                                                    sizeof(*v));
    if (!v)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        v[i].generation = rd_varint(r);
    for (size_t i = 0; i < n; i++)
        v[i].root_height = rd_u8(r);
    if (read_refs(r, (size_t)n, &v[0].root, sizeof(*v), files, nfiles, 1,
                  name, err) != 0)
        return -1;
    read_stats(r, (size_t)n, &v[0].stats, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i].commit_time = rd_le(r, 8);
    if (r->bad)
        return truncated(name, "versions", err);
    for (size_t i = 0; i < n; i++) {
        if (v[i].generation == 0 ||
            (i && v[i].generation <= v[i - 1].generation))
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: generation numbers "
                                "not increasing from 1", name);
        if (!v[i].root.file && (v[i].root_height || v[i].stats.num_keys))
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: empty generation "
                                "%llu with a height or keys", name,
                                (unsigned long long)v[i].generation);
    }
    *out = v;
    *nout = (size_t)n;
    return 0;
}

/* Interior entries; height < 0: each entry carries its height (manifest). */
static int read_vrefs(struct rd *r, size_t max, int height,
                      struct ckpt_arena *a,
                      const struct ckpt_ocdbt_file *files, size_t nfiles,
                      struct ckpt_ocdbt_vref **out, size_t *nout,
                      const char *name, struct ckpt_err *err)
{
    uint64_t n = rd_varint(r);
    if (r->bad)
        return truncated(name, "version nodes", err);
    if (n > max)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: %llu version nodes "
                            "(at most %zu)", name, (unsigned long long)n,
                            max);
    *out = NULL;
    *nout = 0;
    if (n == 0)
        return 0;
    struct ckpt_ocdbt_vref *v = ckpt_arena_array(a, (size_t)n, sizeof(*v));
    if (!v)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        v[i].generation = rd_varint(r);
    if (read_refs(r, (size_t)n, &v[0].loc, sizeof(*v), files, nfiles, 0,
                  name, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        v[i].num_generations = rd_varint(r);
    for (size_t i = 0; i < n; i++)
        v[i].commit_time = rd_le(r, 8);
    for (size_t i = 0; i < n; i++)
        v[i].height = height < 0 ? rd_u8(r) : (uint8_t)height;
    if (r->bad)
        return truncated(name, "version nodes", err);
    for (size_t i = 0; i < n; i++)
        if (v[i].generation == 0 ||
            (i && v[i].generation <= v[i - 1].generation) ||
            (height < 0 && (v[i].height == 0 ||
                            (i && v[i].height >= v[i - 1].height))))
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: version node %zu "
                                "out of order", name, i);
    *out = v;
    *nout = (size_t)n;
    return 0;
}

/* --- manifest ------------------------------------------------------------- */

static int read_config(struct rd *r, struct ckpt_ocdbt_manifest *m,
                       const char *name, struct ckpt_err *err)
{
    const unsigned char *u = rd_bytes(r, 16);
    if (u)
        memcpy(m->uuid, u, 16);
    m->manifest_kind = rd_u8(r);
    m->max_inline_value_bytes = rd_varint(r);
    m->max_decoded_node_bytes = rd_varint(r);
    m->arity_log2 = rd_u8(r);
    uint64_t comp = rd_varint(r);
    if (r->bad)
        return truncated(name, "config", err);
    if (m->manifest_kind > 1)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: manifest_kind %u", name,
                            m->manifest_kind);
    if (m->max_inline_value_bytes > UINT32_MAX ||
        m->max_decoded_node_bytes > UINT32_MAX)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: config limits exceed "
                            "32 bits", name);
    if (m->arity_log2 == 0 || m->arity_log2 > 16)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: version_tree_arity_log2 "
                            "%u (1 to 16)", name, m->arity_log2);
    if (comp > 1)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: compression method "
                            "%llu", name, (unsigned long long)comp);
    m->compression = (unsigned)comp;
    if (comp == 1)
        m->zstd_level = (int32_t)(uint32_t)rd_le(r, 4);
    return r->bad ? truncated(name, "config", err) : 0;
}

int ckpt_ocdbt_manifest_parse(const void *p, size_t n, const char *name,
                              struct ckpt_ocdbt_manifest **out,
                              struct ckpt_err *err)
{
    struct ckpt_arena *a = ckpt_arena_new(2 * CKPT_OCDBT_MAX_NODE);
    struct ckpt_ocdbt_manifest *m = a ? ckpt_arena_alloc(a, sizeof(*m))
                                      : NULL;
    struct rd r;
    if (!m) {
        ckpt_arena_free(a);
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    memset(m, 0, sizeof(*m));
    m->arena = a;
    int rc = envelope(p, n, CKPT_OCDBT_MANIFEST_MAGIC, name, a, &r, err);
    if (rc == 0)
        rc = read_config(&r, m, name, err);
    if (rc == 0 && m->manifest_kind == 0) {
        rc = files_read(&r, "", a, &m->files, &m->nfiles, name, err);
        if (rc == 0)
            rc = read_versions(&r, m->arity_log2, a, m->files, m->nfiles,
                               &m->versions, &m->nversions, name, err);
        if (rc == 0)
            rc = read_vrefs(&r, (size_t)(63 / m->arity_log2), -1, a,
                            m->files, m->nfiles, &m->vnodes, &m->nvnodes,
                            name, err);
    }
    if (rc == 0 && r.pos != r.n)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: %zu bytes after the "
                          "manifest body", name, r.n - r.pos);
    if (rc != 0) {
        ckpt_arena_free(a);
        return -1;
    }
    *out = m;
    return 0;
}

int ckpt_ocdbt_numbered_name(const char *name, uint64_t *gen)
{
    static const char pre[] = "manifest.";
    uint64_t g = 0;
    if (strncmp(name, pre, sizeof(pre) - 1))
        return 0;
    name += sizeof(pre) - 1;
    for (int i = 0; i < 16; i++) {
        int c = (unsigned char)name[i], v;
        if (c >= '0' && c <= '9')
            v = c - '0';
        else if (c >= 'a' && c <= 'f')
            v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v = c - 'A' + 10;
        else
            return 0;
        g = g << 4 | (uint64_t)v;
    }
    if (name[16] || g == 0)
        return 0;
    *gen = g;
    return 1;
}

/* --- version tree node ---------------------------------------------------- */

int ckpt_ocdbt_vtree_parse(const void *p, size_t n, const char *base,
                           const char *name, struct ckpt_ocdbt_vtree **out,
                           struct ckpt_err *err)
{
    struct ckpt_arena *a = ckpt_arena_new(2 * CKPT_OCDBT_MAX_NODE);
    struct ckpt_ocdbt_vtree *v = a ? ckpt_arena_alloc(a, sizeof(*v)) : NULL;
    struct rd r;
    if (!v) {
        ckpt_arena_free(a);
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    memset(v, 0, sizeof(*v));
    v->arena = a;
    int rc = envelope(p, n, CKPT_OCDBT_VTREE_MAGIC, name, a, &r, err);
    if (rc == 0) {
        v->arity_log2 = rd_u8(&r);
        v->height = rd_u8(&r);
        if (r.bad)
            rc = truncated(name, "version tree header", err);
        else if (v->arity_log2 == 0 || v->arity_log2 > 16 ||
                 (unsigned)v->height * v->arity_log2 >= 64)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: arity_log2 %u, "
                              "height %u", name, v->arity_log2, v->height);
    }
    if (rc == 0)
        rc = files_read(&r, base, a, &v->files, &v->nfiles, name, err);
    if (rc == 0 && v->height == 0)
        rc = read_versions(&r, v->arity_log2, a, v->files, v->nfiles,
                           &v->versions, &v->nversions, name, err);
    else if (rc == 0) {
        rc = read_vrefs(&r, (size_t)1 << v->arity_log2, v->height - 1, a,
                        v->files, v->nfiles, &v->vnodes, &v->nvnodes, name,
                        err);
        if (rc == 0 && v->nvnodes == 0)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: empty version tree "
                              "node", name);
    }
    if (rc == 0 && r.pos != r.n)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: %zu bytes after the "
                          "version tree node", name, r.n - r.pos);
    if (rc != 0) {
        ckpt_arena_free(a);
        return -1;
    }
    *out = v;
    return 0;
}

/* --- B+tree node ---------------------------------------------------------- */

static int read_keys(struct rd *r, struct ckpt_ocdbt_btree *t, int interior,
                     const char *name, struct ckpt_err *err)
{
    size_t n = t->n;
    uint64_t *len = ckpt_xcalloc(n * 3, sizeof(*len));
    uint64_t *pre = len, *suf = len + n, *scp = len + 2 * n;
    int rc = 0;
    for (size_t i = 1; rc == 0 && i < n; i++)
        rc = rd_len16(r, &pre[i]);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = rd_len16(r, &suf[i]);
    for (size_t i = 0; rc == 0 && interior && i < n; i++)
        rc = rd_len16(r, &scp[i]);
    if (rc != 0)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: invalid key length", name);
    const unsigned char *prev = NULL;
    size_t prevlen = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint64_t klen = pre[i] + suf[i];
        const unsigned char *s = rd_bytes(r, (size_t)suf[i]);
        unsigned char *k = ckpt_arena_alloc(t->arena, (size_t)klen + 1);
        if (pre[i] > prevlen || klen > CKPT_OCDBT_MAX_PATH ||
            scp[i] > klen || !s)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: key %zu: invalid "
                              "lengths", name, i);
        else if (!k)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        else {
            if (pre[i])
                memcpy(k, prev, (size_t)pre[i]);
            memcpy(k + pre[i], s, (size_t)suf[i]);
            k[klen] = 0;
            /* Keys are strictly increasing within a node. */
            if (i) {
                size_t m = prevlen < klen ? prevlen : (size_t)klen;
                int c = memcmp(prev, k, m);
                if (c > 0 || (c == 0 && prevlen >= klen))
                    rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: keys out of "
                                      "order at %zu", name, i);
            }
            t->entries[i].key = k;
            t->entries[i].keylen = (size_t)klen;
            t->entries[i].subtree_prefix_len = (size_t)scp[i];
            prev = k;
            prevlen = (size_t)klen;
        }
    }
    free(len);
    return rc;
}

static int read_leaf_values(struct rd *r, struct ckpt_ocdbt_btree *t,
                            const char *name, struct ckpt_err *err)
{
    struct ckpt_ocdbt_entry *e = t->entries;
    size_t n = t->n;
    for (size_t i = 0; i < n; i++)
        e[i].ref.length = rd_varint(r);
    for (size_t i = 0; i < n; i++) {
        uint8_t kind = rd_u8(r);
        if (kind > 1)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: value_kind %u", name,
                                kind);
        e[i].indirect = kind;
    }
    if (r->bad)
        return truncated(name, "leaf values", err);
    for (size_t i = 0; i < n; i++) {
        if (!e[i].indirect)
            continue;
        uint64_t id = rd_varint(r);
        if (r->bad || id >= t->nfiles)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: value %zu: bad data "
                                "file index", name, i);
        e[i].ref.file = &t->files[id];
    }
    for (size_t i = 0; i < n; i++) {
        if (!e[i].indirect)
            continue;
        e[i].ref.offset = rd_varint(r);
        if (e[i].ref.offset > INT64_MAX ||
            e[i].ref.length > INT64_MAX - e[i].ref.offset)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: value %zu: offset "
                                "+ length overflows", name, i);
    }
    for (size_t i = 0; i < n; i++) {
        if (e[i].indirect)
            continue;
        if (e[i].ref.length > r->n - r->pos || r->bad)
            return truncated(name, "inline values", err);
        e[i].value = rd_bytes(r, (size_t)e[i].ref.length);
    }
    return r->bad ? truncated(name, "leaf values", err) : 0;
}

static int read_children(struct rd *r, struct ckpt_ocdbt_btree *t,
                         const char *name, struct ckpt_err *err)
{
    struct ckpt_ocdbt_entry *e = t->entries;
    if (read_refs(r, t->n, &e[0].ref, sizeof(*e), t->files, t->nfiles, 0,
                  name, err) != 0)
        return -1;
    read_stats(r, t->n, &e[0].stats, sizeof(*e));
    return r->bad ? truncated(name, "child references", err) : 0;
}

int ckpt_ocdbt_btree_parse(const void *p, size_t n, const char *base,
                           const char *name, struct ckpt_ocdbt_btree **out,
                           struct ckpt_err *err)
{
    struct ckpt_arena *a = ckpt_arena_new(4 * CKPT_OCDBT_MAX_NODE);
    struct ckpt_ocdbt_btree *t = a ? ckpt_arena_alloc(a, sizeof(*t)) : NULL;
    struct rd r;
    if (!t) {
        ckpt_arena_free(a);
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    memset(t, 0, sizeof(*t));
    t->arena = a;
    int rc = envelope(p, n, CKPT_OCDBT_BTREE_MAGIC, name, a, &r, err);
    if (rc == 0) {
        t->height = rd_u8(&r);
        rc = r.bad ? truncated(name, "B+tree header", err) : 0;
    }
    if (rc == 0)
        rc = files_read(&r, base, a, &t->files, &t->nfiles, name, err);
    if (rc == 0) {
        uint64_t ne = rd_varint(&r);
        if (r.bad)
            rc = truncated(name, "B+tree node", err);
        else if (ne == 0)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: empty B+tree node",
                              name);
        /* Each entry costs at least two bytes (suffix length, kind). */
        else if (ne > CKPT_OCDBT_MAX_ARITY || ne > r.n - r.pos)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: B+tree node arity "
                              "%llu", name, (unsigned long long)ne);
        else {
            t->n = (size_t)ne;
            t->entries = ckpt_arena_array(a, t->n, sizeof(*t->entries));
            if (!t->entries)
                rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
            else
                memset(t->entries, 0, t->n * sizeof(*t->entries));
        }
    }
    if (rc == 0)
        rc = read_keys(&r, t, t->height > 0, name, err);
    if (rc == 0)
        rc = t->height ? read_children(&r, t, name, err)
                       : read_leaf_values(&r, t, name, err);
    if (rc == 0 && r.pos != r.n)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: %zu bytes after the "
                          "B+tree node", name, r.n - r.pos);
    if (rc != 0) {
        ckpt_arena_free(a);
        return -1;
    }
    *out = t;
    return 0;
}
