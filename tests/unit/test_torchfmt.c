/*
 * test_torchfmt.c - CRC-32 (both code paths, combine), the zip writer read
 * back by the zip reader, dtypes, and tensor items from torch 1.13 and 2.6
 * (fuzz/corpus/torchzip/).
 */
#include "ckpt/torchfmt.h"
#include "test.h"

/* Bitwise reference CRC-32. */
static uint32_t crc_ref(const unsigned char *p, size_t n)
{
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return ~c;
}

static void test_torchfmt__crc32(void)
{
    size_t n = 70000;
    unsigned char *buf = malloc(n + 16);
    uint32_t x = 12345;
    for (size_t i = 0; i < n + 16; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    CHECK_EQ(ckpt_crc32(0, "123456789", 9), 0xcbf43926u);
    static const size_t lens[] = { 0, 1, 15, 16, 63, 64, 65, 127, 128, 1000,
                                   4096, 65537, 70000 };
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t off = 0; off < 3; off++)
            test_cond("crc32 matches the bitwise reference",
                      ckpt_crc32(0, buf + off, lens[i]) ==
                      crc_ref(buf + off, lens[i]));
    /* Incremental and combined equal one pass. */
    uint32_t whole = ckpt_crc32(0, buf, n);
    uint32_t a = ckpt_crc32(0, buf, 1000), b = ckpt_crc32(0, buf + 1000,
                                                          n - 1000);
    CHECK_EQ(ckpt_crc32(a, buf + 1000, n - 1000), whole);
    CHECK_EQ(ckpt_crc32_combine(a, b, n - 1000), whole);
    CHECK_EQ(ckpt_crc32_combine(whole, 0, 0), whole);
    free(buf);
}

static void test_torchfmt__zip_roundtrip(void)
{
    /* Sizes force FB padding on every record. */
    struct ckpt_zipw_rec r[3] = {
        { "ck/data.pkl", 5, 0, 0, 0 },
        { "ck/data/0", 130, 0, 0, 0 },
        { "ck/version", 2, 0, 0, 0 },
    };
    uint64_t cd, total;
    ckpt_zipw_layout(r, 3, &cd, &total);
    char *f = calloc(1, total);
    const char *payload[3] = { "hello", NULL, "3\n" };
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(r[i].data_off % 64, 0);
        if (payload[i])
            memcpy(f + r[i].data_off, payload[i], r[i].size);
        else
            memset(f + r[i].data_off, 7, r[i].size);
        r[i].crc = ckpt_crc32(0, f + r[i].data_off, r[i].size);
        struct ckpt_buf h = CKPT_BUF_INIT;
        ckpt_zipw_local_header(&r[i], &h);
        CHECK_EQ(r[i].lho + h.len, r[i].data_off);
        memcpy(f + r[i].lho, h.ptr, h.len);
        ckpt_buf_release(&h);
    }
    struct ckpt_buf c = CKPT_BUF_INIT;
    ckpt_zipw_central(r, 3, cd, &c);
    CHECK_EQ(cd + c.len, total);
    memcpy(f + cd, c.ptr, c.len);
    ckpt_buf_release(&c);
    struct ckpt_rd rd;
    struct ckpt_tzip *z;
    struct ckpt_err err;
    ckpt_rd_mem(&rd, f, total, "mem.zip");
    CHECK(ckpt_tzip_open(&z, &rd, &err) == 0);
    if (z) {
        CHECK_STR(z->prefix, "ck");
        CHECK_EQ(z->n, 3);
        const struct ckpt_tzip_entry *e = ckpt_tzip_find(z, "data/0");
        CHECK(e && e->data_off == r[1].data_off && e->size == 130 &&
              e->crc == r[1].crc);
        CHECK(ckpt_tzip_find(z, "data.pkl") != NULL);
        ckpt_tzip_free(z);
    }
    /* A stub in front of the archive is skipped (offsets are relative). */
    char *g = malloc(total + 100);
    memset(g, 'x', 100);
    memcpy(g + 100, f, total);
    ckpt_rd_mem(&rd, g, total + 100, "stub.zip");
    CHECK(ckpt_tzip_open(&z, &rd, &err) == 0);
    if (z) {
        CHECK_EQ(ckpt_tzip_find(z, "version")->data_off, r[2].data_off + 100);
        ckpt_tzip_free(z);
    }
    /* Cut anywhere: an error, never a crash. */
    for (uint64_t cut = 0; cut < total; cut += 7) {
        ckpt_rd_mem(&rd, f, cut, "cut.zip");
        if (ckpt_tzip_open(&z, &rd, &err) == 0)
            ckpt_tzip_free(z);
    }
    free(g);
    free(f);
}

static void test_torchfmt__dtypes(void)
{
    CHECK_EQ(ckpt_dtype_by_name("bfloat16")->itemsize, 2);
    CHECK_STR(ckpt_dtype_by_name("torch.float8_e4m3fn")->st, "F8_E4M3");
    CHECK_STR(ckpt_dtype_by_storage("ComplexFloatStorage")->name,
              "complex64");
    CHECK_EQ(ckpt_dtype_by_storage("ComplexFloatStorage")->swap, 4);
    CHECK(ckpt_dtype_by_name("uint16")->storage == NULL);
    /* OLMo-core's TORCH_DTYPES names, all known. */
    static const char *const st[] = { "F64", "F32", "F16", "BF16", "I64",
        "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2" };
    for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++)
        CHECK(ckpt_dtype_by_st(st[i]) &&
              !strcmp(ckpt_dtype_by_st(st[i])->st, st[i]));
    CHECK_STR(ckpt_dtype_by_st("BF16")->name, "bfloat16");
    CHECK(ckpt_dtype_by_st("bfloat16") == NULL);
    CHECK(ckpt_dtype_by_name("qint8") == NULL);
    CHECK(ckpt_torch_allow_tensor(NULL, "torch", "qint8") == 0);
    CHECK(ckpt_torch_allow_tensor(NULL, "torch", "load") == -1);
    CHECK(ckpt_torch_allow_object(NULL, "numpy.core.multiarray",
                                  "_reconstruct") == 0);
    CHECK(ckpt_torch_allow_object(NULL, "os.path", "join") == -1);
    CHECK(ckpt_torch_allow_object(NULL, "__builtin__", "eval") == -1);
    CHECK(ckpt_torch_allow_object(NULL, "pathlib", "PosixPath") == 0);
    /* Megatron's safe globals: only for Megatron steps (the gate's also). */
    CHECK(ckpt_torch_allow_object(NULL, "argparse", "Namespace") == -1);
    CHECK(ckpt_torch_allow_megatron(NULL, "argparse", "Namespace") == 0);
    CHECK(ckpt_torch_allow_megatron(NULL, "megatron.core.transformer.enums",
                                    "AttnBackend") == 0);
    CHECK(ckpt_torch_allow_megatron(NULL, "megatron.core.transformer.enums",
                                    "eval") == -1);
    CHECK(ckpt_torch_allow_megatron(NULL, "pathlib", "PosixPath") == 0);
    CHECK(ckpt_torch_allow_megatron(NULL, "os", "system") == -1);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

/* Real tensor items: every one parses, lands inside its record. */
static void test_torchfmt__tensor_items(void)
{
    static const char *const items[] = {
        "t113_dtypes_0.zip", "t113_dtypes_1.zip", "t113_dtypes_2.zip",
        "t26_dtypes_0.zip", "t26_dtypes_1.zip", "t26_dtypes_2.zip",
        "t26_dtypes_3.zip",
    };
    for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
        char path[128];
        size_t len = 0;
        snprintf(path, sizeof(path), "fuzz/corpus/torchzip/%s", items[i]);
        char *data = slurp(path, &len);
        struct ckpt_rd rd;
        struct ckpt_tensor_loc loc;
        struct ckpt_err err;
        test_cond(path, data != NULL);
        if (!data)
            continue;
        ckpt_rd_mem(&rd, data, len, path);
        int rc = ckpt_tensor_item_load(&rd, &loc, &err);
        test_cond(path, rc == 0);
        if (rc)
            fprintf(stderr, "  %s\n", err.msg);
        else
            CHECK(loc.data_off % 64 == 0 && loc.data_off + loc.data_size <=
                  len && !strcmp(loc.key, "0"));
        free(data);
    }
}


/* A safetensors file: length, header, data. */
static size_t st_file(char *out, const char *header, size_t data_len)
{
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++)
        out[i] = (char)((uint64_t)n >> (8 * i));
    memcpy(out + 8, header, n);
    memset(out + 8 + n, 0x5a, data_len);
    return 8 + n + data_len;
}

static int st_try(const char *header, size_t data_len,
                  struct ckpt_safetensors **s, struct ckpt_err *err)
{
    static char buf[4096];
    struct ckpt_rd rd;
    size_t n = st_file(buf, header, data_len);
    ckpt_rd_mem(&rd, buf, n, "t.safetensors");
    return ckpt_safetensors_open(s, &rd, err);
}

static void test_torchfmt__safetensors(void)
{
    struct ckpt_safetensors *s;
    struct ckpt_err err = CKPT_ERR_INIT;
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],"
                    "\"data_offsets\":[16,28]},"
                    "\"e\":{\"dtype\":\"F32\",\"shape\":[0],"
                    "\"data_offsets\":[16,16]},"
                    "\"b\":{\"dtype\":\"I64\",\"shape\":[2],"
                    "\"data_offsets\":[0,16]}}   ";
    CHECK_EQ(st_try(h, 28, &s, &err), 0);
    if (!s)
        return;
    CHECK_EQ(s->n, 3);
    CHECK_EQ(s->data_start, 8 + strlen(h));
    const struct ckpt_safetensors_tensor *w = ckpt_safetensors_find(s, "w");
    CHECK(w && w->dtype == ckpt_dtype_by_name("bfloat16"));
    CHECK(w && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3 &&
          w->numel == 6 && w->nbytes == 12);
    CHECK(w && w->offset == s->data_start + 16);
    CHECK(ckpt_safetensors_find(s, "e") &&
          ckpt_safetensors_find(s, "e")->numel == 0);
    CHECK(!ckpt_safetensors_find(s, "__metadata__"));
    CHECK(!ckpt_safetensors_find(s, "x"));
    ckpt_safetensors_free(s);
    /* A 0-d tensor and no __metadata__. */
    CHECK_EQ(st_try("{\"s\":{\"dtype\":\"F64\",\"shape\":[],"
                    "\"data_offsets\":[0,8]}}", 8, &s, &err), 0);
    CHECK(s && s->n == 1 && s->tensors[0].ndim == 0 &&
          s->tensors[0].numel == 1);
    ckpt_safetensors_free(s);
    CHECK_EQ(st_try("{}", 0, &s, &err), 0);
    CHECK(s && s->n == 0);
    ckpt_safetensors_free(s);
}

static void test_torchfmt__safetensors_bad(void)
{
    static const struct {
        const char *header;
        size_t data;
        const char *msg;
    } cases[] = {
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
          9, "t.safetensors: data section is 9 bytes, the header describes "
             "8" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
          12, "t.safetensors: not a safetensors file (tensor 'a': leaves a "
              "gap before it)" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
          8, "t.safetensors: not a safetensors file (tensor 'b': overlaps "
             "another tensor)" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
          8, "t.safetensors: not a safetensors file (tensor 'a': "
             "data_offsets disagree with dtype and shape)" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
          8, "t.safetensors: not a safetensors file (tensor 'a': "
             "data_offsets end before they begin)" },
        { "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}",
          8, "t.safetensors: tensor 'a': dtype 'Q4' not supported" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}",
          8, "t.safetensors: not a safetensors file (tensor 'a': bad "
             "shape)" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
          "t.safetensors: not a safetensors file (tensor 'a': needs dtype, "
          "shape and data_offsets)" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
          "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
          2, "t.safetensors: not a safetensors file (tensor 'a': name "
             "occurs twice)" },
        { "{\"__metadata__\":{\"n\":1}}", 0, "t.safetensors: not a "
          "safetensors file (__metadata__ values must be strings)" },
        { " {}", 0, "t.safetensors: not a safetensors file (header does "
          "not start with '{')" },
        { "{\"a\":", 0, "t.safetensors: not a safetensors file (header is "
          "not JSON)" },
        { "[]", 0, "t.safetensors: not a safetensors file (header does not "
          "start with '{')" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ckpt_safetensors *s = (void *)1;
        struct ckpt_err err = CKPT_ERR_INIT;
        CHECK_EQ(st_try(cases[i].header, cases[i].data, &s, &err), -1);
        CHECK(s == NULL);
        CHECK_STR(err.msg, cases[i].msg);
    }
    /* Header length beyond the file, and past the 100 MB limit. */
    char buf[16] = { 100, 0, 0, 0, 0, 0, 0, 0, '{', '}' };
    struct ckpt_rd rd;
    struct ckpt_safetensors *s;
    struct ckpt_err err = CKPT_ERR_INIT;
    ckpt_rd_mem(&rd, buf, 10, "t.safetensors");
    CHECK_EQ(ckpt_safetensors_open(&s, &rd, &err), -1);
    CHECK_STR(err.msg, "t.safetensors: truncated (header of 100 bytes, "
                       "file of 10)");
    buf[4] = 1;
    CHECK_EQ(ckpt_safetensors_open(&s, &rd, &err), -1);
    CHECK_STR(err.msg, "t.safetensors: not a safetensors file (header "
                       "longer than 100 MB)");
    ckpt_rd_mem(&rd, buf, 7, "t.safetensors");
    CHECK_EQ(ckpt_safetensors_open(&s, &rd, &err), -1);
    CHECK_STR(err.msg, "t.safetensors: not a safetensors file (shorter "
                       "than 8 bytes)");
}

TEST_MAIN(T(test_torchfmt__crc32), T(test_torchfmt__zip_roundtrip),
          T(test_torchfmt__dtypes), T(test_torchfmt__tensor_items),
          T(test_torchfmt__safetensors), T(test_torchfmt__safetensors_bad))
