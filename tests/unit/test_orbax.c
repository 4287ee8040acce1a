/*
 * test_orbax.c - OCDBT and zarr v3 decoders.
 *
 * Golden inputs from upstream (kept verbatim, each case names its source):
 *  - google/tensorstore tensorstore/kvstore/ocdbt/format/
 *    data_file_id_codec_test.cc: the raw data file tables of tests Empty,
 *    Truncated, SuffixLengthTooLong, BasePathLengthTooLong,
 *    PrefixLengthTooLong, BasePathLongerThanPath,
 *    PrefixLengthLongerThanPrevBasePath, BasePathTooLongWithPrefix;
 *  - .../format/btree_test.cc: the raw node bodies of
 *    CorruptTruncateBodyZeroSize, CorruptLeafTruncatedNumEntries,
 *    CorruptLeafZeroNumEntries, CorruptInteriorZeroNumEntries;
 *  - .../format/manifest_test.cc: the corruptions of CorruptMagic,
 *    CorruptLength, InvalidVersion, CorruptChecksum;
 *  - .../format/dump_test.cc: the field values of DumpTest.Manifest,
 *    BtreeLeafNode, BtreeInteriorNode, VersionTreeLeafNodeRoundTrip and
 *    VersionTreeInteriorNodeRoundTrip (TensorStore's tests round-trip
 *    these through its own encoder and keep no encoded bytes, so they are
 *    encoded here per index.rst and decoded back);
 *  - tensorstore/driver/zarr3/driver_test.cc ("zarr3/metadata",
 *    "zarr3/sharding", ShardedTranspose) and
 *    codec/sharding_indexed_test.cc (Basic): zarr.json documents.
 *  - CRC-32C check values of RFC 3720 B.4 (the crc32c TensorStore uses).
 *  - kawanet/msgpack-test-suite dist/msgpack-test-suite.json (commit
 *    1b75b28508b02a43195e251cb0c4cb11fbc3dfec): its encodings of nil,
 *    bool, binary, positive/negative/float/bignum numbers, strings,
 *    arrays, maps, nesting and timestamps (an excerpt, every format byte
 *    covered).
 */
#include <zstd.h>

#include "ckpt/msgpack.h"
#include "ckpt/orbax.h"
#include "ckpt/util.h"
#include "test.h"

/* --- a small encoder, per tensorstore/kvstore/ocdbt/index.rst ------------ */

struct enc {
    unsigned char b[4096];
    size_t n;
};

static void put(struct enc *e, const void *p, size_t n)
{
    memcpy(e->b + e->n, p, n);
    e->n += n;
}

static void u8(struct enc *e, unsigned v)
{
    e->b[e->n++] = (unsigned char)v;
}

static void vi(struct enc *e, uint64_t v)
{
    do {
        e->b[e->n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void le(struct enc *e, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        u8(e, (unsigned)(v >> (8 * i)) & 0xff);
}

static void str(struct enc *e, const char *s)
{
    put(e, s, strlen(s));
}

/* Envelope around body; compressed with zstd when z. */
static size_t envelope(uint32_t magic, const struct enc *body, int z,
                       unsigned char *out)
{
    struct enc e = { .n = 0 };
    unsigned char c[4096];
    size_t cn = body->n;
    if (z)
        cn = ZSTD_compress(c, sizeof(c), body->b, body->n, 3);
    else
        memcpy(c, body->b, body->n);
    u8(&e, magic >> 24);
    u8(&e, (magic >> 16) & 0xff);
    u8(&e, (magic >> 8) & 0xff);
    u8(&e, magic & 0xff);
    le(&e, 4 + 8 + 2 + cn + 4, 8);
    vi(&e, 0);
    vi(&e, (uint64_t)z);
    put(&e, c, cn);
    le(&e, ckpt_crc32c(0, e.b, e.n), 4);
    memcpy(out, e.b, e.n);
    return e.n;
}

/* One data file table of n (base, relative) pairs, no prefix sharing. */
static void table(struct enc *e, const char *const *f, size_t n)
{
    vi(e, n);
    for (size_t i = 1; i < n; i++)
        vi(e, 0);
    for (size_t i = 0; i < n; i++)
        vi(e, strlen(f[2 * i]) + strlen(f[2 * i + 1]));
    for (size_t i = 0; i < n; i++)
        vi(e, strlen(f[2 * i]));
    for (size_t i = 0; i < n; i++) {
        str(e, f[2 * i]);
        str(e, f[2 * i + 1]);
    }
}

/* --- CRC-32C ------------------------------------------------------------- */

static void test_orbax__crc32c(void)
{
    unsigned char z[32] = { 0 }, ff[32];
    memset(ff, 0xff, sizeof(ff));
    CHECK_EQ(ckpt_crc32c(0, "123456789", 9), 0xe3069283u);
    CHECK_EQ(ckpt_crc32c(0, z, 32), 0x8a9136aau);
    CHECK_EQ(ckpt_crc32c(0, ff, 32), 0x62a8ab43u);
    /* incremental == one shot */
    CHECK_EQ(ckpt_crc32c(ckpt_crc32c(0, "12345", 5), "6789", 4),
             0xe3069283u);
}

/* --- data file tables (data_file_id_codec_test.cc) ----------------------- */

static int files(const unsigned char *p, size_t n, const char *base,
                 struct ckpt_ocdbt_file **f, size_t *nf, size_t *used,
                 struct ckpt_arena *a)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    return ckpt_ocdbt_files_parse(p, n, base, a, f, nf, used, "t", &err);
}

static void test_orbax__files_upstream(void)
{
    struct ckpt_arena *a = ckpt_arena_new(0);
    struct ckpt_ocdbt_file *f;
    size_t nf, used;
    /* Empty: encodes to one byte. Truncated: zero bytes. */
    CHECK_EQ(files((const unsigned char *)"\0", 1, "", &f, &nf, &used, a), 0);
    CHECK_EQ(nf, 0);
    CHECK_EQ(used, 1);
    CHECK_EQ(files((const unsigned char *)"", 0, "", &f, &nf, &used, a), -1);
    /* SuffixLengthTooLong: num_files 1, path_suffix_length 65536. */
    static const unsigned char s1[] = { 1, 0x80, 0x80, 0x04 };
    CHECK_EQ(files(s1, sizeof(s1), "", &f, &nf, &used, a), -1);
    /* BasePathLengthTooLong: 1, suffix 5, base 65536. */
    static const unsigned char s2[] = { 1, 5, 0x80, 0x80, 0x04 };
    CHECK_EQ(files(s2, sizeof(s2), "", &f, &nf, &used, a), -1);
    /* PrefixLengthTooLong: 2, prefix 65536. */
    static const unsigned char s3[] = { 2, 0x80, 0x80, 0x04 };
    CHECK_EQ(files(s3, sizeof(s3), "", &f, &nf, &used, a), -1);
    /* BasePathLongerThanPath: 1, suffix 5, base 6. */
    static const unsigned char s4[] = { 1, 5, 6 };
    CHECK_EQ(files(s4, sizeof(s4), "", &f, &nf, &used, a), -1);
    /* PrefixLengthLongerThanPrevBasePath: 2, prefix 2, suffixes 2 0,
     * bases 0 1. */
    static const unsigned char s5[] = { 2, 2, 2, 0, 0, 1 };
    CHECK_EQ(files(s5, sizeof(s5), "", &f, &nf, &used, a), -1);
    /* BasePathTooLongWithPrefix: one 65535-byte path: fine alone, too long
     * under the transitive base path "z". */
    unsigned char *big = malloc(65535 + 8);
    size_t n = 0;
    big[n++] = 1;
    big[n++] = 0xff;
    big[n++] = 0xff;
    big[n++] = 0x03;
    big[n++] = 0;
    memset(big + n, 'x', 65535);
    n += 65535;
    CHECK_EQ(files(big, n, "", &f, &nf, &used, a), 0);
    CHECK(nf == 1 && f[0].len == 65535 && f[0].base_len == 0);
    CHECK_EQ(files(big, n, "z", &f, &nf, &used, a), -1);
    free(big);
    ckpt_arena_free(a);
}

/* DataFileBuilderTest.Prefixes and AddBasePath, encoded with shared
 * prefixes (the case the base-path rule constrains). */
static void test_orbax__files_prefixes(void)
{
    static const char *const p[] = {
        "", "", "", "a", "", "ab", "", "ac", "a", "", "a", "x", "a", "xy",
        "a", "xyz", "ab", "", "ab", "xy", "ab", "xyz", "ac", "xy",
    };
    size_t n = 12, pre[12] = { 0 };
    char full[12][8];
    struct enc e = { .n = 0 };
    for (size_t i = 0; i < n; i++)
        snprintf(full[i], sizeof(full[i]), "%s%s", p[2 * i], p[2 * i + 1]);
    for (size_t i = 1; i < n; i++) {
        size_t k = 0, pb = strlen(p[2 * i - 2]), cb = strlen(p[2 * i]);
        while (full[i - 1][k] && full[i - 1][k] == full[i][k])
            k++;
        if (pb != cb && k > (pb < cb ? pb : cb))
            k = pb < cb ? pb : cb;
        pre[i] = k;
    }
    vi(&e, n);
    for (size_t i = 1; i < n; i++)
        vi(&e, pre[i]);
    for (size_t i = 0; i < n; i++)
        vi(&e, strlen(full[i]) - pre[i]);
    for (size_t i = 0; i < n; i++)
        vi(&e, strlen(p[2 * i]));
    for (size_t i = 0; i < n; i++)
        str(&e, full[i] + pre[i]);
    struct ckpt_arena *a = ckpt_arena_new(0);
    struct ckpt_ocdbt_file *f;
    size_t nf, used;
    CHECK_EQ(files(e.b, e.n, "x/", &f, &nf, &used, a), 0);
    CHECK_EQ(nf, 12);
    CHECK_EQ(used, e.n);
    for (size_t i = 0; i < nf && i < n; i++) {
        char want[16];
        snprintf(want, sizeof(want), "x/%s", full[i]);
        CHECK_STR(f[i].path, want);
        CHECK_EQ(f[i].base_len, 2 + strlen(p[2 * i]));
    }
    ckpt_arena_free(a);
}

/* --- B+tree nodes --------------------------------------------------------- */

/* The encoded node is scribbled over and freed before returning: parsed
 * nodes must not point into their input (inline values did once). */
static int btree(const struct enc *body, int z, const char *base,
                 struct ckpt_ocdbt_btree **t)
{
    unsigned char *buf = malloc(4200);
    struct ckpt_err err = CKPT_ERR_INIT;
    size_t n = envelope(CKPT_OCDBT_BTREE_MAGIC, body, z, buf);
    int rc = ckpt_ocdbt_btree_parse(buf, n, base, "node", t, &err);
    for (volatile unsigned char *v = buf; v < buf + 4200; v++)
        *v = 0xaa;
    free(buf);
    return rc;
}

static void test_orbax__btree_corrupt_upstream(void)
{
    /* btree_test.cc: bodies TensorStore itself rejects. */
    static const struct { unsigned char b[4]; size_t n; } c[] = {
        { { 0 }, 0 },               /* CorruptTruncateBodyZeroSize */
        { { 0 }, 1 },               /* CorruptLeafTruncatedNumEntries */
        { { 0, 0, 0, 0 }, 4 },      /* CorruptLeafZeroNumEntries */
        { { 1, 0, 0, 0 }, 4 },      /* CorruptInteriorZeroNumEntries */
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct enc e = { .n = 0 };
        struct ckpt_ocdbt_btree *t = NULL;
        put(&e, c[i].b, c[i].n);
        CHECK_EQ(btree(&e, 0, "", &t), -1);
    }
}

/* DumpTest.BtreeLeafNode: ab+{c: "value1", d: "value2", e: value:abc:def:
 * 1:25}, keys stored whole. */
static void leaf_body(struct enc *e)
{
    static const char *const f[] = { "abc", "def" };
    u8(e, 0);
    table(e, f, 1);
    vi(e, 3);
    vi(e, 2);                   /* prefix lengths */
    vi(e, 2);
    vi(e, 3);                   /* suffix lengths */
    vi(e, 1);
    vi(e, 1);
    str(e, "abcde");            /* suffixes */
    vi(e, 6);                   /* value lengths */
    vi(e, 6);
    vi(e, 25);
    u8(e, 0);                   /* kinds */
    u8(e, 0);
    u8(e, 1);
    vi(e, 0);                   /* data file id of the indirect value */
    vi(e, 1);                   /* its offset */
    str(e, "value1value2");
}

static void test_orbax__btree_leaf(void)
{
    for (int z = 0; z < 2; z++) {
        struct enc e = { .n = 0 };
        struct ckpt_ocdbt_btree *t = NULL;
        leaf_body(&e);
        CHECK_EQ(btree(&e, z, "", &t), 0);
        if (!t)
            continue;
        CHECK_EQ(t->height, 0);
        CHECK_EQ(t->n, 3);
        CHECK(t->entries[0].keylen == 3 &&
              !memcmp(t->entries[0].key, "abc", 3));
        CHECK(!memcmp(t->entries[1].key, "abd", 3));
        CHECK(!memcmp(t->entries[2].key, "abe", 3));
        CHECK(!t->entries[0].indirect &&
              !memcmp(t->entries[0].value, "value1", 6));
        CHECK(!t->entries[1].indirect &&
              !memcmp(t->entries[1].value, "value2", 6));
        CHECK(t->entries[2].indirect);
        CHECK_STR(t->entries[2].ref.file->path, "abcdef");
        CHECK_EQ(t->entries[2].ref.file->base_len, 3);
        CHECK_EQ(t->entries[2].ref.offset, 1);
        CHECK_EQ(t->entries[2].ref.length, 25);
        ckpt_arena_free(t->arena);
    }
    /* Trailing byte, keys out of order, bad value kind: rejected. */
    struct enc e = { .n = 0 };
    struct ckpt_ocdbt_btree *t = NULL;
    leaf_body(&e);
    u8(&e, 0);
    CHECK_EQ(btree(&e, 0, "", &t), -1);
    e.n = 0;
    leaf_body(&e);
    e.b[19] = 'a';              /* "abd" -> "aba" < "abc" */
    CHECK_EQ(btree(&e, 0, "", &t), -1);
    e.n = 0;
    leaf_body(&e);
    e.b[e.n - 12 - 2 - 3 + 2] = 2;
    CHECK_EQ(btree(&e, 0, "", &t), -1);
}

/* DumpTest.BtreeInteriorNode / BtreeNodeTest.InteriorNodeBasePath. */
static void test_orbax__btree_interior(void)
{
    static const char *const f[] = { "abc", "def", "ghi", "jkl" };
    struct enc e = { .n = 0 };
    struct ckpt_ocdbt_btree *t = NULL;
    u8(&e, 2);
    table(&e, f, 2);
    vi(&e, 2);
    vi(&e, 0);                  /* prefix "abc" / "def" */
    vi(&e, 3);
    vi(&e, 3);
    vi(&e, 1);                  /* subtree_common_prefix_length */
    vi(&e, 1);
    str(&e, "abcdef");
    vi(&e, 0);                  /* file ids */
    vi(&e, 1);
    vi(&e, 5);                  /* offsets */
    vi(&e, 42);
    vi(&e, 6);                  /* lengths */
    vi(&e, 9);
    vi(&e, 5);                  /* num_keys */
    vi(&e, 8);
    vi(&e, 200);                /* num_tree_bytes */
    vi(&e, 220);
    vi(&e, 100);                /* num_indirect_value_bytes */
    vi(&e, 101);
    CHECK_EQ(btree(&e, 1, "xyz/", &t), 0);
    if (!t)
        return;
    CHECK_EQ(t->height, 2);
    CHECK_EQ(t->n, 2);
    const struct ckpt_ocdbt_entry *a = &t->entries[0], *b = &t->entries[1];
    CHECK(!memcmp(a->key, "abc", 3) && !memcmp(b->key, "def", 3));
    CHECK(a->subtree_prefix_len == 1 && b->subtree_prefix_len == 1);
    CHECK_STR(a->ref.file->path, "xyz/abcdef");
    CHECK_EQ(a->ref.file->base_len, 7);
    CHECK_STR(b->ref.file->path, "xyz/ghijkl");
    CHECK(a->ref.offset == 5 && a->ref.length == 6);
    CHECK(b->ref.offset == 42 && b->ref.length == 9);
    CHECK(a->stats.num_keys == 5 && a->stats.num_tree_bytes == 200 &&
          a->stats.num_indirect_value_bytes == 100);
    CHECK(b->stats.num_keys == 8 && b->stats.num_tree_bytes == 220 &&
          b->stats.num_indirect_value_bytes == 101);
    ckpt_arena_free(t->arena);
}

/* --- manifest (DumpTest.Manifest, ManifestTest corruptions) -------------- */

static size_t manifest_bytes(unsigned char *out, int z)
{
    static const char *const f[] = { "abc", "def" };
    struct enc e = { .n = 0 };
    for (unsigned i = 0; i < 16; i++)
        u8(&e, i);              /* uuid 000102...0f */
    u8(&e, 0);                  /* manifest_kind */
    vi(&e, 100);
    vi(&e, 8388608);
    u8(&e, 1);                  /* version_tree_arity_log2 */
    vi(&e, 1);                  /* zstd */
    le(&e, 0, 4);
    table(&e, f, 1);
    vi(&e, 1);                  /* inline versions */
    vi(&e, 15);
    u8(&e, 0);
    vi(&e, 0);
    vi(&e, 10);
    vi(&e, 42);
    vi(&e, 8);
    vi(&e, 220);
    vi(&e, 101);
    le(&e, 10, 8);
    vi(&e, 3);                  /* version nodes: gens 8, 12, 14 */
    vi(&e, 8);
    vi(&e, 12);
    vi(&e, 14);
    for (int i = 0; i < 3; i++)
        vi(&e, 0);
    for (int i = 0; i < 3; i++)
        vi(&e, 10);
    for (int i = 0; i < 3; i++)
        vi(&e, 42);
    vi(&e, 8);                  /* num_generations */
    vi(&e, 4);
    vi(&e, 2);
    le(&e, 1, 8);               /* commit times */
    le(&e, 5, 8);
    le(&e, 8, 8);
    u8(&e, 3);                  /* heights */
    u8(&e, 2);
    u8(&e, 1);
    return envelope(CKPT_OCDBT_MANIFEST_MAGIC, &e, z, out);
}

static void test_orbax__manifest(void)
{
    unsigned char b[4200];
    struct ckpt_err err = CKPT_ERR_INIT;
    for (int z = 0; z < 2; z++) {
        struct ckpt_ocdbt_manifest *m = NULL;
        size_t n = manifest_bytes(b, z);
        CHECK_EQ(ckpt_ocdbt_manifest_parse(b, n, "m", &m, &err), 0);
        if (!m)
            continue;
        CHECK(m->uuid[0] == 0 && m->uuid[15] == 15);
        CHECK(m->max_inline_value_bytes == 100 &&
              m->max_decoded_node_bytes == 8388608 && m->arity_log2 == 1 &&
              m->compression == 1);
        CHECK_EQ(m->nversions, 1);
        const struct ckpt_ocdbt_version *v = &m->versions[0];
        CHECK(v->generation == 15 && v->root_height == 0 &&
              v->root.offset == 10 && v->root.length == 42 &&
              v->stats.num_keys == 8 && v->stats.num_tree_bytes == 220 &&
              v->stats.num_indirect_value_bytes == 101 &&
              v->commit_time == 10);
        CHECK_STR(v->root.file->path, "abcdef");
        CHECK_EQ(m->nvnodes, 3);
        static const uint64_t g[] = { 8, 12, 14 }, ng[] = { 8, 4, 2 },
                              ct[] = { 1, 5, 8 }, h[] = { 3, 2, 1 };
        for (size_t i = 0; i < 3 && i < m->nvnodes; i++)
            CHECK(m->vnodes[i].generation == g[i] &&
                  m->vnodes[i].num_generations == ng[i] &&
                  m->vnodes[i].commit_time == ct[i] &&
                  m->vnodes[i].height == h[i] &&
                  m->vnodes[i].loc.offset == 10 &&
                  m->vnodes[i].loc.length == 42);
        ckpt_arena_free(m->arena);
    }
    /* ManifestTest corruptions, each must fail. */
    size_t n = manifest_bytes(b, 1);
    struct ckpt_ocdbt_manifest *m = NULL;
    unsigned char c[4200];
    memcpy(c, b, n);
    memcpy(c, "abcd", 4);                           /* CorruptMagic */
    CHECK_EQ(ckpt_ocdbt_manifest_parse(c, n, "m", &m, &err), -1);
    memcpy(c, b, n);
    c[n] = 'x';                                     /* CorruptLength */
    CHECK_EQ(ckpt_ocdbt_manifest_parse(c, n + 1, "m", &m, &err), -1);
    memcpy(c, b, n);
    c[12] = 1;                                      /* InvalidVersion */
    CHECK_EQ(ckpt_ocdbt_manifest_parse(c, n, "m", &m, &err), -1);
    memcpy(c, b, n);
    c[n - 1]++;                                     /* CorruptChecksum */
    CHECK_EQ(ckpt_ocdbt_manifest_parse(c, n, "m", &m, &err), -1);
    CHECK(strstr(err.msg, "CRC-32C") != NULL);
    for (size_t k = 0; k < n; k++)                 /* every truncation */
        CHECK_EQ(ckpt_ocdbt_manifest_parse(b, k, "m", &m, &err), -1);
}

/* --- version tree nodes --------------------------------------------------- */

static void test_orbax__vtree(void)
{
    static const char *const f[] = { "a", "b", "c", "d" };
    unsigned char b[4200];
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_ocdbt_vtree *v = NULL;
    /* VersionTreeLeafNodeRoundTrip */
    struct enc e = { .n = 0 };
    u8(&e, 1);
    u8(&e, 0);
    table(&e, f, 2);
    vi(&e, 2);
    vi(&e, 1);
    vi(&e, 2);                  /* generations */
    u8(&e, 0);
    u8(&e, 0);                  /* root heights */
    vi(&e, 0);
    vi(&e, 1);
    vi(&e, 1);
    vi(&e, 3);
    vi(&e, 2);
    vi(&e, 4);
    vi(&e, 3);
    vi(&e, 4);                  /* num_keys */
    vi(&e, 20);
    vi(&e, 21);
    vi(&e, 10);
    vi(&e, 11);
    le(&e, 1, 8);
    le(&e, 2, 8);
    size_t n = envelope(CKPT_OCDBT_VTREE_MAGIC, &e, 1, b);
    CHECK_EQ(ckpt_ocdbt_vtree_parse(b, n, "", "v", &v, &err), 0);
    if (v) {
        CHECK(v->height == 0 && v->nversions == 2);
        CHECK_STR(v->versions[1].root.file->path, "cd");
        CHECK(v->versions[1].root.offset == 3 &&
              v->versions[1].root.length == 4 &&
              v->versions[1].stats.num_keys == 4 &&
              v->versions[1].stats.num_tree_bytes == 21 &&
              v->versions[1].stats.num_indirect_value_bytes == 11 &&
              v->versions[1].commit_time == 2);
        ckpt_arena_free(v->arena);
    }
    /* VersionTreeInteriorNodeRoundTrip */
    e.n = 0;
    u8(&e, 1);
    u8(&e, 1);
    table(&e, f, 2);
    vi(&e, 2);
    vi(&e, 2);
    vi(&e, 4);                  /* generations */
    vi(&e, 0);
    vi(&e, 1);
    vi(&e, 1);
    vi(&e, 3);
    vi(&e, 2);
    vi(&e, 4);
    vi(&e, 2);
    vi(&e, 2);                  /* num_generations */
    le(&e, 1, 8);
    le(&e, 2, 8);
    n = envelope(CKPT_OCDBT_VTREE_MAGIC, &e, 0, b);
    CHECK_EQ(ckpt_ocdbt_vtree_parse(b, n, "", "v", &v, &err), 0);
    if (v) {
        CHECK(v->height == 1 && v->nvnodes == 2);
        CHECK(v->vnodes[1].generation == 4 && v->vnodes[1].height == 0 &&
              v->vnodes[1].num_generations == 2 &&
              v->vnodes[1].commit_time == 2);
        ckpt_arena_free(v->arena);
    }
    /* A corrupt checksum: rejected. */
    b[n - 4]++;
    CHECK_EQ(ckpt_ocdbt_vtree_parse(b, n, "", "v", &v, &err), -1);
}

/* --- zarr v3 --------------------------------------------------------------- */

/* driver_test.cc "zarr3/metadata" (GetDefaultBytesCodecJson = bytes,
 * little endian). */
static const char meta_plain[] =
    "{\"zarr_format\":3,\"node_type\":\"array\",\"data_type\":\"uint16\","
    "\"fill_value\":0,\"shape\":[10,11],\"dimension_names\":[\"\",\"\"],"
    "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":"
    "{\"chunk_shape\":[4,5]}},\"chunk_key_encoding\":{\"name\":\"default\"},"
    "\"codecs\":[{\"name\":\"bytes\",\"configuration\":"
    "{\"endian\":\"little\"}}]}";

/* driver_test.cc "zarr3/sharding" with sharding_indexed_test.cc Basic's
 * full configuration. */
static const char meta_shard[] =
    "{\"zarr_format\":3,\"node_type\":\"array\",\"data_type\":\"uint16\","
    "\"fill_value\":0,\"shape\":[10,11],\"chunk_grid\":{\"name\":"
    "\"regular\",\"configuration\":{\"chunk_shape\":[8,9]}},"
    "\"chunk_key_encoding\":{\"name\":\"default\"},\"codecs\":[{\"name\":"
    "\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[2,3],"
    "\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":"
    "\"little\"}}],\"index_codecs\":[{\"name\":\"bytes\",\"configuration\":"
    "{\"endian\":\"little\"}},{\"name\":\"crc32c\"}]}}]}";

/* driver_test.cc ShardedTranspose: transpose before sharding. */
static const char meta_tshard[] =
    "{\"zarr_format\":3,\"node_type\":\"array\",\"data_type\":\"uint16\","
    "\"fill_value\":0,\"shape\":[10,11],\"chunk_grid\":{\"name\":"
    "\"regular\",\"configuration\":{\"chunk_shape\":[8,9]}},\"codecs\":["
    "{\"name\":\"transpose\",\"configuration\":{\"order\":[1,0]}},"
    "{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":"
    "[3,2]}}]}";

static void test_orbax__zarr3_meta(void)
{
    struct ckpt_zarr3 z;
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK_EQ(ckpt_zarr3_parse(meta_plain, strlen(meta_plain), "m", &z, &err),
             0);
    CHECK(z.ndim == 2 && z.shape[0] == 10 && z.shape[1] == 11 &&
          z.chunks[0] == 4 && z.chunks[1] == 5);
    CHECK_STR(z.dtype->name, "uint16");
    CHECK(z.sep == '/' && !z.v2_keys && !z.zstd && !z.big_endian &&
          !z.sharded && z.has_fill && z.chunk_bytes == 40);
    CHECK_EQ(ckpt_zarr3_parse(meta_shard, strlen(meta_shard), "m", &z, &err),
             0);
    CHECK(z.sharded && z.inner[0] == 2 && z.inner[1] == 3 &&
          z.index_at_end && z.index_crc32c && z.chunk_bytes == 12);
    CHECK_EQ(ckpt_zarr3_inner_per_shard(&z), 12);
    CHECK_EQ(ckpt_zarr3_parse(meta_tshard, strlen(meta_tshard), "m", &z,
                              &err), -1);
    CHECK_EQ(err.code, CKPT_EUNSUPPORTED);
    /* Not zarr 3, not an object, a group; int16 accepted. */
    static const char *bad[] = {
        "{\"zarr_format\":2}",
        "[]",
        "{\"zarr_format\":3,\"node_type\":\"group\"}",
    };
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ(ckpt_zarr3_parse(bad[i], strlen(bad[i]), "m", &z, &err), -1);
    char doc[1024];
    snprintf(doc, sizeof(doc), "%s", meta_plain);
    memcpy(strstr(doc, "\"uint16\""), "\"int16\" ", 8);
    CHECK_EQ(ckpt_zarr3_parse(doc, strlen(doc), "m", &z, &err), 0);
}

static void test_orbax__zarr3_decode(void)
{
    struct ckpt_zarr3 z;
    struct ckpt_err err = CKPT_ERR_INIT;
    uint16_t in[20], out[20], scratch[20];
    /* transpose [1,0] + big-endian + crc32c on a 4x5 uint16 chunk */
    char doc[1024];
    snprintf(doc, sizeof(doc), "%s", meta_plain);
    char *c = strstr(doc, "\"codecs\"");
    snprintf(c, sizeof(doc) - (size_t)(c - doc),
             "\"codecs\":[{\"name\":\"transpose\",\"configuration\":"
             "{\"order\":[1,0]}},{\"name\":\"bytes\",\"configuration\":"
             "{\"endian\":\"big\"}},{\"name\":\"crc32c\"}]}");
    CHECK_EQ(ckpt_zarr3_parse(doc, strlen(doc), "m", &z, &err), 0);
    unsigned char enc[44];
    /* stored[j][i] = value(i, j) = i*10+j, big-endian */
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < 4; i++) {
            unsigned v = (unsigned)(i * 10 + j);
            enc[2 * (j * 4 + i)] = (unsigned char)(v >> 8);
            enc[2 * (j * 4 + i) + 1] = (unsigned char)v;
        }
    uint32_t crc = ckpt_crc32c(0, enc, 40);
    for (int k = 0; k < 4; k++)
        enc[40 + k] = (unsigned char)(crc >> (8 * k));
    CHECK_EQ(ckpt_zarr3_decode(&z, enc, 44, out, scratch, "c", &err), 0);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            CHECK_EQ(out[i * 5 + j], i * 10 + j);
    enc[3] ^= 1;
    CHECK_EQ(ckpt_zarr3_decode(&z, enc, 44, out, scratch, "c", &err), -1);
    /* zstd */
    snprintf(c, sizeof(doc) - (size_t)(c - doc),
             "\"codecs\":[{\"name\":\"bytes\"},{\"name\":\"zstd\","
             "\"configuration\":{\"level\":1}}]}");
    CHECK_EQ(ckpt_zarr3_parse(doc, strlen(doc), "m", &z, &err), 0);
    for (int k = 0; k < 20; k++)
        in[k] = (uint16_t)(k * 3);
    unsigned char zs[256];
    size_t zn = ZSTD_compress(zs, sizeof(zs), in, sizeof(in), 1);
    CHECK_EQ(ckpt_zarr3_decode(&z, zs, zn, out, scratch, "c", &err), 0);
    CHECK(!memcmp(in, out, sizeof(in)));
    CHECK_EQ(ckpt_zarr3_decode(&z, zs, zn - 1, out, scratch, "c", &err), -1);
}

static void shard_ix(unsigned char *ix, const uint64_t *v)
{
    for (int i = 0; i < 24; i++)
        for (int b = 0; b < 8; b++)
            ix[i * 8 + b] = (unsigned char)(v[i] >> (8 * b));
    uint32_t crc = ckpt_crc32c(0, ix, 192);
    for (int k = 0; k < 4; k++)
        ix[192 + k] = (unsigned char)(crc >> (8 * k));
}

static void test_orbax__shard_index(void)
{
    struct ckpt_zarr3 z;
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK_EQ(ckpt_zarr3_parse(meta_shard, strlen(meta_shard), "m", &z, &err),
             0);
    /* 12 inner chunks; chunk 0 at 0+24, chunk 1 absent, rest at 24+24. */
    unsigned char ix[12 * 16 + 4];
    uint64_t v[24], idx[24];
    for (int i = 0; i < 12; i++) {
        v[2 * i] = i == 0 ? 0 : 24;
        v[2 * i + 1] = 24;
    }
    v[2] = v[3] = UINT64_MAX;
    shard_ix(ix, v);
    CHECK_EQ(ckpt_zarr3_shard_index(&z, ix, sizeof(ix), 48 + 196, 12, idx,
                                    "s", &err), 0);
    CHECK(idx[0] == 0 && idx[1] == 24 && idx[2] == UINT64_MAX &&
          idx[4] == 24);
    /* Wrong index size, a chunk past the shard, a bad crc: rejected. */
    CHECK_EQ(ckpt_zarr3_shard_index(&z, ix, sizeof(ix) - 1, 48 + 196, 12, idx,
                                    "s", &err), -1);
    v[22] = 230;
    shard_ix(ix, v);
    CHECK_EQ(ckpt_zarr3_shard_index(&z, ix, sizeof(ix), 48 + 196, 12, idx,
                                    "s", &err), -1);
    v[22] = 24;
    shard_ix(ix, v);
    ix[0] ^= 1;
    CHECK_EQ(ckpt_zarr3_shard_index(&z, ix, sizeof(ix), 48 + 196, 12, idx,
                                    "s", &err), -1);
}

/* --- a hostile DAG ------------------------------------------------------- */

/* One in-memory data file "d/x" and a manifest, served through an io. */
struct memdb {
    unsigned char *d, *m;
    size_t dn, mn;
};

static int mem_size(void *ctx, const char *rel, uint64_t *size,
                    struct ckpt_err *err)
{
    struct memdb *db = ctx;
    if (!strcmp(rel, "d/x"))
        *size = db->dn;
    else if (!strcmp(rel, "manifest.ocdbt"))
        *size = db->mn;
    else
        return ckpt_err_set(err, CKPT_ENOTFOUND, "%s missing", rel);
    return 0;
}

static int mem_read(void *ctx, const char *rel, uint64_t off, uint64_t len,
                    void *buf, struct ckpt_err *err)
{
    struct memdb *db = ctx;
    const unsigned char *p = !strcmp(rel, "d/x") ? db->d : db->m;
    (void)err;
    memcpy(buf, p + off, (size_t)len);
    return 0;
}

/* Interior node of height h: 64 entries, all pointing at [off, off+len)
 * of d/x (the same child over and over). */
static size_t dag_node(unsigned char *out, int h, size_t off, size_t len)
{
    static const char *const f[] = { "", "d/x" };
    struct enc e = { .n = 0 };
    u8(&e, (unsigned)h);
    table(&e, f, 1);
    vi(&e, 64);
    for (int i = 1; i < 64; i++)
        vi(&e, 0);
    for (int i = 0; i < 64; i++)
        vi(&e, 2);
    for (int i = 0; i < 64; i++)
        vi(&e, 0);
    for (int i = 0; i < 64; i++) {
        char k[3] = { (char)('A' + i / 26), (char)('a' + i % 26), 0 };
        str(&e, k);
    }
    for (int i = 0; i < 64; i++)
        vi(&e, 0);
    for (int i = 0; i < 64; i++)
        vi(&e, off);
    for (int i = 0; i < 64; i++)
        vi(&e, len);
    for (int i = 0; i < 3 * 64; i++)
        vi(&e, 1);
    return envelope(CKPT_OCDBT_BTREE_MAGIC, &e, 0, out);
}

/* 64^4 paths to one leaf: ckpt stops at its node-visit cap instead of
 * walking (and keeping) 16M nodes. */
static void test_orbax__dag_capped(void)
{
    struct memdb db;
    struct enc e = { .n = 0 };
    size_t at[6], n[6];
    db.d = malloc(64 * 1024);
    db.dn = 0;
    u8(&e, 0);                              /* leaf: one key "k" = "v" */
    vi(&e, 0);
    vi(&e, 1);
    vi(&e, 1);
    str(&e, "k");
    vi(&e, 1);
    u8(&e, 0);
    str(&e, "v");
    n[0] = envelope(CKPT_OCDBT_BTREE_MAGIC, &e, 0, db.d);
    at[0] = 0;
    db.dn = n[0];
    for (int h = 1; h <= 4; h++) {
        at[h] = db.dn;
        n[h] = dag_node(db.d + db.dn, h, at[h - 1], n[h - 1]);
        db.dn += n[h];
    }
    static const char *const f[] = { "", "d/x" };
    struct enc m = { .n = 0 };
    for (int i = 0; i < 16; i++)
        u8(&m, 0);
    u8(&m, 0);
    vi(&m, 100);
    vi(&m, 8388608);
    u8(&m, 4);
    vi(&m, 0);
    table(&m, f, 1);
    vi(&m, 1);
    vi(&m, 1);
    u8(&m, 4);                              /* root height 4 */
    vi(&m, 0);
    vi(&m, at[4]);
    vi(&m, n[4]);
    vi(&m, 1);
    vi(&m, 1);
    vi(&m, 1);
    le(&m, 0, 8);
    vi(&m, 0);
    db.m = malloc(4200);
    db.mn = envelope(CKPT_OCDBT_MANIFEST_MAGIC, &m, 0, db.m);
    struct ckpt_orbax_io io = { &db, mem_size, mem_read, NULL, NULL };
    struct ckpt_err err = CKPT_ERR_INIT;
    uint64_t nkeys = 0;
    CHECK_EQ(ckpt_ocdbt_check(&io, "dag", &nkeys, &err), -1);
    CHECK(strstr(err.msg, "B+tree of more than 1048576 nodes") != NULL);
    free(db.d);
    free(db.m);
}

/* --- numbered manifests (manifest_kind 1) ------------------------------- */

/* TensorStore (io/manifest_cache.cc, format/manifest.cc) writes a
 * config-only manifest.ocdbt and one full single-kind manifest per commit,
 * manifest.%016x, keeping the last few; the newest is the database. Its
 * OCDBT driver_test.cc (distributed/) shows the sequence of a first
 * write: manifest.ocdbt, manifest.0000000000000001 (generation 1, empty),
 * then d/... and manifest.0000000000000002. No encoded bytes are kept
 * upstream: these are encoded per index.rst and manifest.cc. */
struct nfile {
    const char *name;
    unsigned char b[512];
    size_t n;
    int gone;
};

struct ndb {
    struct nfile f[8];
    int n;
};

static struct nfile *nfind(struct ndb *db, const char *name)
{
    for (int i = 0; i < db->n; i++)
        if (!db->f[i].gone && !strcmp(db->f[i].name, name))
            return &db->f[i];
    return NULL;
}

static int n_size(void *ctx, const char *rel, uint64_t *size,
                  struct ckpt_err *err)
{
    struct nfile *f = nfind(ctx, rel);
    if (!f)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "%s missing", rel);
    *size = f->n;
    return 0;
}

static int n_read(void *ctx, const char *rel, uint64_t off, uint64_t len,
                  void *buf, struct ckpt_err *err)
{
    struct nfile *f = nfind(ctx, rel);
    if (!f || off + len > f->n)
        return ckpt_err_set(err, CKPT_EIO, "%s: bad read", rel);
    memcpy(buf, f->b + off, (size_t)len);
    return 0;
}

static int n_names(void *ctx, int (*fn)(void *ud, const char *name),
                   void *ud, struct ckpt_err *err)
{
    struct ndb *db = ctx;
    (void)err;
    for (int i = 0; i < db->n; i++)
        if (!db->f[i].gone && !strchr(db->f[i].name, '/'))
            fn(ud, db->f[i].name);
    return 0;
}

static struct nfile *nadd(struct ndb *db, const char *name)
{
    struct nfile *f = &db->f[db->n++];
    memset(f, 0, sizeof(*f));
    f->name = name;
    return f;
}

/* Config: uuid 0..15, the given manifest_kind, arity 2^1, no compression. */
static void n_config(struct enc *e, unsigned kind)
{
    for (unsigned i = 0; i < 16; i++)
        u8(e, i);
    u8(e, kind);
    vi(e, 100);
    vi(e, 8388608);
    u8(e, 1);
    vi(e, 0);
}

/* A single-kind manifest of generations 1..gens: generation 1 empty, the
 * others rooted at the leaf node in d/a (nbytes of it). */
static size_t n_manifest(unsigned char *out, unsigned kind, uint64_t gens,
                         size_t nbytes)
{
    static const char *const f[] = { "", "d/a" };
    struct enc e = { .n = 0 };
    n_config(&e, kind);
    table(&e, f, 1);
    vi(&e, gens);
    for (uint64_t g = 1; g <= gens; g++)
        vi(&e, g);
    for (uint64_t g = 1; g <= gens; g++)
        u8(&e, 0);                              /* root heights */
    for (uint64_t g = 1; g <= gens; g++)
        vi(&e, 0);                              /* data file ids */
    for (uint64_t g = 1; g <= gens; g++)
        vi(&e, g == 1 ? CKPT_OCDBT_MISSING : 0);
    for (uint64_t g = 1; g <= gens; g++)
        vi(&e, g == 1 ? CKPT_OCDBT_MISSING : nbytes);
    for (uint64_t g = 1; g <= gens; g++)
        vi(&e, g == 1 ? 0 : 1);                 /* num_keys */
    for (uint64_t g = 1; g <= 2 * gens; g++)
        vi(&e, 0);                              /* tree, indirect bytes */
    for (uint64_t g = 1; g <= gens; g++)
        le(&e, g, 8);                           /* commit times */
    vi(&e, 0);                                  /* no version nodes */
    return envelope(CKPT_OCDBT_MANIFEST_MAGIC, &e, 0, out);
}

/* manifest.ocdbt (config only), manifest.…1 and …2, d/a: a leaf whose
 * key "k" is 10 bytes out of line in d/v. */
static void n_db(struct ndb *db)
{
    static const char *const f[] = { "", "d/v" };
    struct enc e = { .n = 0 };
    struct nfile *x;
    db->n = 0;
    x = nadd(db, "manifest.ocdbt");
    n_config(&e, 1);
    x->n = envelope(CKPT_OCDBT_MANIFEST_MAGIC, &e, 0, x->b);
    e.n = 0;
    u8(&e, 0);                                  /* leaf */
    table(&e, f, 1);
    vi(&e, 1);
    vi(&e, 1);
    str(&e, "k");
    vi(&e, 10);                                 /* value length */
    u8(&e, 1);                                  /* out of line */
    vi(&e, 0);
    vi(&e, 0);
    x = nadd(db, "d/a");
    x->n = envelope(CKPT_OCDBT_BTREE_MAGIC, &e, 0, x->b);
    size_t leaf = x->n;
    x = nadd(db, "d/v");
    x->n = 10;
    x = nadd(db, "manifest.0000000000000001");
    x->n = n_manifest(x->b, 0, 1, leaf);
    x = nadd(db, "manifest.0000000000000002");
    x->n = n_manifest(x->b, 0, 2, leaf);
}

static void test_orbax__numbered_names(void)
{
    uint64_t g = 0;
    CHECK(ckpt_ocdbt_numbered_name("manifest.0000000000000001", &g));
    CHECK_EQ(g, 1);
    CHECK(ckpt_ocdbt_numbered_name("manifest.00000000000000ff", &g));
    CHECK_EQ(g, 255);
    CHECK(ckpt_ocdbt_numbered_name("manifest.FFFFFFFFFFFFFFFF", &g));
    CHECK(g == UINT64_MAX);
    CHECK(!ckpt_ocdbt_numbered_name("manifest.0000000000000000", &g));
    CHECK(!ckpt_ocdbt_numbered_name("manifest.ocdbt", &g));
    CHECK(!ckpt_ocdbt_numbered_name("manifest.000000000000001", &g));
    CHECK(!ckpt_ocdbt_numbered_name("manifest.00000000000000001", &g));
    CHECK(!ckpt_ocdbt_numbered_name("manifest.000000000000000g", &g));
    CHECK(!ckpt_ocdbt_numbered_name("xmanifest.0000000000000001", &g));
}

static void test_orbax__numbered(void)
{
    struct ndb db;
    struct ckpt_orbax_io io = { &db, n_size, n_read, NULL, n_names };
    struct ckpt_err err = CKPT_ERR_INIT;
    uint64_t nkeys = 0;

    n_db(&db);          /* the newest generation (2) holds the key */
    CHECK_EQ(ckpt_ocdbt_check(&io, "db", &nkeys, &err), 0);
    CHECK_EQ(nkeys, 1);

    n_db(&db);          /* its value's data file is gone: incomplete */
    nfind(&db, "d/v")->gone = 1;
    err = (struct ckpt_err)CKPT_ERR_INIT;
    CHECK_EQ(ckpt_ocdbt_check(&io, "db", &nkeys, &err), 1);
    CHECK(strstr(err.msg, "d/v") != NULL);

    n_db(&db);          /* only generation 1 (empty) left: whole, no key */
    nfind(&db, "manifest.0000000000000002")->gone = 1;
    nfind(&db, "d/v")->gone = 1;
    CHECK_EQ(ckpt_ocdbt_check(&io, "db", &nkeys, &err), 0);
    CHECK_EQ(nkeys, 0);

    n_db(&db);          /* the name must match its latest generation */
    nfind(&db, "manifest.0000000000000002")->name =
        "manifest.0000000000000003";
    err = (struct ckpt_err)CKPT_ERR_INIT;
    CHECK_EQ(ckpt_ocdbt_check(&io, "db", &nkeys, &err), -1);
    CHECK(strstr(err.msg, "db/manifest.0000000000000003: latest generation "
                          "2, the name says 3") != NULL);

    n_db(&db);          /* a numbered manifest is a single-kind one */
    struct nfile *m2 = nfind(&db, "manifest.0000000000000002");
    m2->n = n_manifest(m2->b, 1, 2, 0);
    err = (struct ckpt_err)CKPT_ERR_INIT;
    CHECK_EQ(ckpt_ocdbt_check(&io, "db", &nkeys, &err), -1);
    CHECK_EQ(err.code, CKPT_EFORMAT);

    n_db(&db);          /* no numbered manifest at all: an error, never
                           "incomplete" (which clean would delete) */
    nfind(&db, "manifest.0000000000000001")->gone = 1;
    nfind(&db, "manifest.0000000000000002")->gone = 1;
    err = (struct ckpt_err)CKPT_ERR_INIT;
    CHECK_EQ(ckpt_ocdbt_check(&io, "db", &nkeys, &err), -1);
    CHECK(strstr(err.msg, "there is none") != NULL);

    n_db(&db);          /* an io that cannot list: unsupported */
    io.names = NULL;
    err = (struct ckpt_err)CKPT_ERR_INIT;
    CHECK_EQ(ckpt_ocdbt_check(&io, "db", &nkeys, &err), -1);
    CHECK_EQ(err.code, CKPT_EUNSUPPORTED);
}

/* --- msgpack (kawanet/msgpack-test-suite) ------------------------------ */

static size_t unhex(const char *h, unsigned char *out)
{
    size_t n = 0;
    for (const char *p = h; *p;) {
        unsigned v;
        if (sscanf(p, "%2x", &v) != 1)
            break;
        out[n++] = (unsigned char)v;
        p += 2;
        if (*p == '-')
            p++;
    }
    return n;
}

static struct ckpt_mp *mp(const char *hex, unsigned char *buf,
                          struct ckpt_arena *a)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_mp *m = NULL;
    size_t n = unhex(hex, buf), used = 0;
    if (ckpt_msgpack_parse(buf, n, a, "t", &m, &used, &err) != 0 ||
        used != n) {
        fprintf(stderr, "  %s: %s\n", hex, err.msg);
        return NULL;
    }
    return m;
}

/* Integers as the suite lists them: any integer format, signed or not. */
static int mp_int(const struct ckpt_mp *m, long long want)
{
    if (!m)
        return 0;
    if (m->type == CKPT_MP_UINT)
        return want >= 0 && m->u == (unsigned long long)want;
    if (m->type == CKPT_MP_INT)
        return m->i == want;
    return m->type == CKPT_MP_FLOAT && m->f == (double)want;
}

static void test_orbax__msgpack_suite(void)
{
    static const struct { const char *hex; long long v; } nums[] = {
        { "00", 0 }, { "cc-00", 0 }, { "cd-00-00", 0 }, { "ce-00-00-00-00", 0 },
        { "cf-00-00-00-00-00-00-00-00", 0 }, { "d0-00", 0 },
        { "d1-00-00", 0 }, { "d2-00-00-00-00", 0 },
        { "d3-00-00-00-00-00-00-00-00", 0 }, { "ca-00-00-00-00", 0 },
        { "cb-00-00-00-00-00-00-00-00", 0 }, { "7f", 127 },
        { "cc-80", 128 }, { "d1-00-80", 128 }, { "cd-ff-ff", 65535 },
        { "ce-00-01-00-00", 65536 }, { "d2-7f-ff-ff-ff", 2147483647 },
        { "ce-80-00-00-00", 2147483648LL }, { "ca-4f-00-00-00", 2147483648LL },
        { "cb-41-ef-ff-ff-ff-e0-00-00", 4294967295LL },
        { "ff", -1 }, { "d0-ff", -1 }, { "d1-ff-ff", -1 },
        { "d3-ff-ff-ff-ff-ff-ff-ff-ff", -1 }, { "ca-bf-80-00-00", -1 },
        { "e0", -32 }, { "d0-df", -33 }, { "d1-ff-80", -128 },
        { "d1-80-00", -32768 }, { "d2-ff-ff-00-00", -65536 },
        { "d3-ff-ff-ff-ff-80-00-00-00", -2147483648LL },
        { "cf-00-00-00-01-00-00-00-00", 4294967296LL },
        { "d3-ff-ff-ff-ff-00-00-00-00", -4294967296LL },
        { "d3-00-01-00-00-00-00-00-00", 281474976710656LL },
        { "cb-c2-f0-00-00-00-00-00-00", -281474976710656LL },
        { "d3-7f-ff-ff-ff-ff-ff-ff-ff", 9223372036854775807LL },
        { "d3-80-00-00-00-00-00-00-00", -9223372036854775807LL - 1 },
    };
    struct ckpt_arena *a = ckpt_arena_new(0);
    unsigned char b[256];
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
        test_cond(nums[i].hex, mp_int(mp(nums[i].hex, b, a), nums[i].v));
    struct ckpt_mp *m = mp("cf-ff-ff-ff-ff-ff-ff-ff-ff", b, a);
    CHECK(m && m->type == CKPT_MP_UINT && m->u == UINT64_MAX);
    m = mp("cb-bf-e0-00-00-00-00-00-00", b, a);
    CHECK(m && m->type == CKPT_MP_FLOAT && m->f == -0.5);
    m = mp("ca-3f-00-00-00", b, a);
    CHECK(m && m->type == CKPT_MP_FLOAT && m->f == 0.5);
    m = mp("c0", b, a);
    CHECK(m && m->type == CKPT_MP_NIL);
    m = mp("c3", b, a);
    CHECK(m && m->type == CKPT_MP_BOOL && m->b == 1);
    m = mp("c2", b, a);
    CHECK(m && m->type == CKPT_MP_BOOL && m->b == 0);
    static const char *bins[] = { "c4-02-00-ff", "c5-00-02-00-ff",
                                  "c6-00-00-00-02-00-ff" };
    for (int i = 0; i < 3; i++) {
        m = mp(bins[i], b, a);
        CHECK(m && m->type == CKPT_MP_BIN && m->len == 2 &&
              b[m->off] == 0 && b[m->off + 1] == 0xff);
    }
    static const char *strs[] = { "a1-61", "d9-01-61", "da-00-01-61",
                                  "db-00-00-00-01-61" };
    for (int i = 0; i < 4; i++) {
        m = mp(strs[i], b, a);
        CHECK(m && m->type == CKPT_MP_STR && m->len == 1 && b[m->off] == 'a');
    }
    m = mp("a6-e6-b1-89-e5-ad-97", b, a);       /* "汉字" */
    CHECK(m && m->type == CKPT_MP_STR && m->len == 6 &&
          !memcmp(b + m->off, "\xe6\xb1\x89\xe5\xad\x97", 6));
    m = mp("dc-00-0f-01-02-03-04-05-06-07-08-09-0a-0b-0c-0d-0e-0f", b, a);
    CHECK(m && m->type == CKPT_MP_ARRAY && m->n == 15 &&
          mp_int(&m->items[14], 15));
    m = mp("dd-00-00-00-01-a1-61", b, a);
    CHECK(m && m->type == CKPT_MP_ARRAY && m->n == 1 &&
          m->items[0].type == CKPT_MP_STR);
    m = mp("df-00-00-00-01-a1-61-a1-41", b, a);
    CHECK(m && m->type == CKPT_MP_MAP && m->n == 1 &&
          ckpt_msgpack_get(m, b, "a") &&
          b[ckpt_msgpack_get(m, b, "a")->off] == 'A');
    m = mp("de-00-01-a1-61-01", b, a);
    CHECK(m && mp_int(ckpt_msgpack_get(m, b, "a"), 1) &&
          !ckpt_msgpack_get(m, b, "b"));
    m = mp("81-a1-61-de-00-00", b, a);
    CHECK(m && ckpt_msgpack_get(m, b, "a") &&
          ckpt_msgpack_get(m, b, "a")->type == CKPT_MP_MAP);
    m = mp("dd-00-00-00-01-dd-00-00-00-00", b, a);
    CHECK(m && m->n == 1 && m->items[0].type == CKPT_MP_ARRAY &&
          m->items[0].n == 0);
    static const struct { const char *hex; uint64_t len; } ts[] = {
        { "d6-ff-5a-4a-f6-a5", 4 },
        { "d7-ff-a1-dc-d7-c8-5a-4a-f6-a5", 8 },
        { "c7-0c-ff-3b-9a-c9-ff-00-00-00-3a-ff-f4-41-7f", 12 },
    };
    for (int i = 0; i < 3; i++) {
        m = mp(ts[i].hex, b, a);
        CHECK(m && m->type == CKPT_MP_EXT && m->ext == -1 &&
              m->len == ts[i].len);
    }
    ckpt_arena_free(a);
}

static void test_orbax__msgpack_hostile(void)
{
    struct ckpt_arena *a = ckpt_arena_new(1u << 20);
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_mp *m;
    size_t used;
    unsigned char b[256];
    /* truncated forms, 0xc1, a huge count, nesting past the cap */
    static const char *bad[] = {
        "", "cd-00", "d9-05-61", "c6-ff-ff-ff-ff", "c1", "dd-ff-ff-ff-ff",
        "df-00-00-00-02-a1-61", "92-01", "c7-05-01-00",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = unhex(bad[i], b);
        test_cond(bad[i], ckpt_msgpack_parse(b, n, a, "t", &m, &used,
                                             &err) == -1);
    }
    memset(b, 0x91, 100);
    b[100] = 0xc0;
    CHECK_EQ(ckpt_msgpack_parse(b, 101, a, "t", &m, &used, &err), -1);
    CHECK_EQ(ckpt_msgpack_parse(b + 100 - 63, 64, a, "t", &m, &used, &err),
             0);
    ckpt_arena_free(a);
}

TEST_MAIN(T(test_orbax__crc32c), T(test_orbax__files_upstream),
          T(test_orbax__files_prefixes), T(test_orbax__btree_corrupt_upstream),
          T(test_orbax__btree_leaf), T(test_orbax__btree_interior),
          T(test_orbax__manifest), T(test_orbax__vtree),
          T(test_orbax__zarr3_meta), T(test_orbax__zarr3_decode),
          T(test_orbax__shard_index), T(test_orbax__msgpack_suite),
          T(test_orbax__msgpack_hostile), T(test_orbax__dag_capped),
          T(test_orbax__numbered_names), T(test_orbax__numbered))
