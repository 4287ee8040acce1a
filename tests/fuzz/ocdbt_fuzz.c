/*
 * ocdbt_fuzz.c - property: any bytes as an OCDBT manifest, version tree
 * node, B+tree node or data file table never crash, leak, or read outside
 * the input; every reference a parsed object holds points into its own
 * data file table. The first byte picks the target (% 7): 0-2 the raw
 * object (manifest, version tree, B+tree), 3 a data file table under a
 * base path, 4-6 the rest as the body of a valid uncompressed envelope
 * (magic, length and CRC-32C computed), so mutations reach the parsers
 * behind the checksum. Target 3 also reads the bytes as a file name: a
 * numbered manifest name must print back as manifest.%016x of a
 * generation >= 1.
 */
#include <stddef.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/orbax.h"

static const uint32_t magic[3] = {
    CKPT_OCDBT_MANIFEST_MAGIC, CKPT_OCDBT_VTREE_MAGIC,
    CKPT_OCDBT_BTREE_MAGIC,
};

static void in_table(const struct ckpt_ocdbt_ref *r,
                     const struct ckpt_ocdbt_file *f, size_t n)
{
    if (r->file && (r->file < f || r->file >= f + n))
        abort();
}

static void parse(int kind, const uint8_t *p, size_t n)
{
    struct ckpt_err err;
    if (kind == 0) {
        struct ckpt_ocdbt_manifest *m;
        if (ckpt_ocdbt_manifest_parse(p, n, "m", &m, &err) != 0)
            return;
        for (size_t i = 0; i < m->nversions; i++)
            in_table(&m->versions[i].root, m->files, m->nfiles);
        for (size_t i = 0; i < m->nvnodes; i++)
            in_table(&m->vnodes[i].loc, m->files, m->nfiles);
        ckpt_arena_free(m->arena);
    } else if (kind == 1) {
        struct ckpt_ocdbt_vtree *v;
        if (ckpt_ocdbt_vtree_parse(p, n, "b/", "v", &v, &err) != 0)
            return;
        for (size_t i = 0; i < v->nversions; i++)
            in_table(&v->versions[i].root, v->files, v->nfiles);
        ckpt_arena_free(v->arena);
    } else {
        struct ckpt_ocdbt_btree *t;
        if (ckpt_ocdbt_btree_parse(p, n, "b/", "t", &t, &err) != 0)
            return;
        for (size_t i = 0; i < t->n; i++) {
            const struct ckpt_ocdbt_entry *e = &t->entries[i];
            if (e->indirect || t->height)
                in_table(&e->ref, t->files, t->nfiles);
            if (e->subtree_prefix_len > e->keylen)
                abort();
        }
        ckpt_arena_free(t->arena);
    }
}

static void numbered(const uint8_t *p, size_t n)
{
    char name[64], back[64];
    uint64_t g = 0;
    if (n >= sizeof(name))
        return;
    memcpy(name, p, n);
    name[n] = 0;
    if (!ckpt_ocdbt_numbered_name(name, &g))
        return;
    snprintf(back, sizeof(back), "manifest.%016llx", (unsigned long long)g);
    for (size_t i = 0; i < n; i++)
        name[i] = (char)tolower((unsigned char)name[i]);
    if (g == 0 || strcmp(name, back))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int k = data[0] % 7;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (k < 3) {
        parse(k, p, n);
    } else if (k == 3) {
        struct ckpt_arena *a = ckpt_arena_new(1u << 26);
        struct ckpt_ocdbt_file *f;
        size_t nf, used;
        struct ckpt_err err;
        if (ckpt_ocdbt_files_parse(p, n, "base/", a, &f, &nf, &used, "f",
                                   &err) == 0 && used > n)
            abort();
        ckpt_arena_free(a);
        numbered(p, n);
    } else {
        uint32_t m = magic[k - 4];
        size_t total = 4 + 8 + 2 + n + 4;
        uint8_t *b = malloc(total);
        if (!b)
            return 0;
        for (int i = 0; i < 4; i++)
            b[i] = (uint8_t)(m >> (24 - 8 * i));
        for (int i = 0; i < 8; i++)
            b[4 + i] = (uint8_t)((uint64_t)total >> (8 * i));
        b[12] = 0;
        b[13] = 0;
        memcpy(b + 14, p, n);
        uint32_t c = ckpt_crc32c(0, b, total - 4);
        for (int i = 0; i < 4; i++)
            b[total - 4 + (size_t)i] = (uint8_t)(c >> (8 * i));
        parse(k - 4, b, total);
        free(b);
    }
    return 0;
}
