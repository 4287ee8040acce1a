/* test_unshard.c - internals of the unshard module: geometry, casts,
 * the HF export's JSON. */
#include "test.h"
#include <cjson/cJSON.h>

#include "merge/engine/engine.h"
#include "merge/hf/hf.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "trainers/olmo/flat_params.h"

/* Every range of every small shape: the boxes cover exactly the range,
 * each element once, and 'first' places them. */
static void test_unshard__flat_boxes_cover_ranges(void)
{
    static const uint64_t shapes[][5] = {
        {1, 5}, {2, 3, 4}, {3, 2, 3, 4}, {3, 2, 1, 3}, {2, 1, 1},
        {4, 4, 1, 2, 3}, {3, 1, 4, 1},
    };
    struct flat_box boxes[16];
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int nd = (int)shapes[si][0];
        const uint64_t *size = &shapes[si][1];
        uint64_t numel = 1, stride[4];
        for (int k = nd - 1; k >= 0; k--) {
            stride[k] = numel;
            numel *= size[k];
        }
        for (uint64_t s = 0; s <= numel; s++) {
            for (uint64_t c = 0; s + c <= numel; c++) {
                int n = uns_flat_boxes(nd, size, s, c, boxes, 16);
                CHECK(n >= 0 && n <= (c ? 2 * nd - 1 : 0));
                if (n < 0)
                    return;
                unsigned char seen[64] = {0};
                for (int b = 0; b < n; b++) {
                    uint64_t cnt = 1, idx[4] = {0};
                    for (int k = 0; k < nd; k++)
                        cnt *= boxes[b].len[k];
                    CHECK(cnt > 0);
                    for (uint64_t e = 0; e < cnt; e++) {
                        uint64_t rem = e, flat = 0, rel = 0;
                        for (int k = nd - 1; k >= 0; k--) {
                            idx[k] = rem % boxes[b].len[k];
                            rem /= boxes[b].len[k];
                        }
                        for (int k = 0; k < nd; k++) {
                            flat += (boxes[b].off[k] + idx[k]) * stride[k];
                            rel += idx[k] * stride[k];
                        }
                        CHECK(flat == boxes[b].first + rel);
                        CHECK(flat >= s && flat < s + c);
                        if (flat < 64) {
                            CHECK(!seen[flat]);
                            seen[flat] = 1;
                        }
                    }
                }
                for (uint64_t f = s; f < s + c; f++)
                    CHECK(seen[f]);
                if (test_case_failed_) {
                    fprintf(stderr, "  shape %zu, range %llu+%llu\n", si,
                            (unsigned long long)s, (unsigned long long)c);
                    return;
                }
            }
        }
    }
}

static void test_unshard__flat_boxes_bad_ranges(void)
{
    const uint64_t size[2] = {3, 4};
    struct flat_box boxes[3];
    CHECK_EQ(uns_flat_boxes(2, size, 13, 0, boxes, 3), -1);
    CHECK_EQ(uns_flat_boxes(2, size, 4, 9, boxes, 3), -1);
    CHECK_EQ(uns_flat_boxes(2, size, 1, 10, boxes, 2), -1);   /* needs 3 */
    CHECK_EQ(uns_flat_boxes(2, size, 1, 10, boxes, 3), 3);
    CHECK_EQ(uns_flat_boxes(2, size, 0, 12, boxes, 1), 1);
    CHECK_EQ(uns_flat_boxes(0, size, 0, 1, boxes, 1), 1);
    CHECK_EQ(uns_flat_boxes(0, size, 0, 2, boxes, 1), -1);
}

static void test_unshard__olmoflat_strip(void)
{
    struct ckpt_arena *a = ckpt_arena_new(1u << 20);
    CHECK_STR(uns_olmoflat_strip(a, "_fsdp_wrapped_module.transformer.blocks.1."
                                 "_fsdp_wrapped_module.ff"),
              "transformer.blocks.1.ff");
    CHECK_STR(uns_olmoflat_strip(a, ""), "");
    CHECK_STR(uns_olmoflat_strip(a, "_fsdp_wrapped_module"),
              "_fsdp_wrapped_module");
    ckpt_arena_free(a);
}

/* The data.pkl of a model file written by make_olmo_local.py, read. */
static int read_model(const char *path, struct ckpt_arena *a,
                      struct lmodel *m)
{
    static char buf[1 << 16];
    struct ckpt_pickle_opts o = { .name = "data.pkl",
                                  .allow = uns_olmoflat_allow };
    struct ckpt_pv *v;
    struct ckpt_err err = CKPT_ERR_INIT;
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    int rc = ckpt_pickle_load(a, buf, n, &o, &v, NULL, &err);
    if (rc == 0)
        rc = uns_olmoflat_read(a, v, "model/rank3.pt", m, &err);
    if (rc != 0)
        fprintf(stderr, "  %s: %s\n", path, err.msg);
    return rc;
}

#define HELD(p, start_, count_, at_)                                        \
    do {                                                                    \
        CHECK((p)->held);                                                   \
        CHECK_EQ((p)->start, start_);                                       \
        CHECK_EQ((p)->count, count_);                                       \
        CHECK_EQ((p)->at, at_);                                             \
    } while (0)

/* torch >= 2.1 layout, 4 ranks, rank 3: alignment padding between
 * parameters, padding at the end, a flat parameter it holds none of. */
static void test_unshard__olmoflat_shard_param_infos(void)
{
    struct ckpt_arena *a = ckpt_arena_new(16u << 20);
    struct lmodel m = { 0 };
    CHECK_EQ(read_model("fuzz/corpus/olmoflat/w4-21fp_rank3.pkl", a, &m), 0);
    CHECK_EQ(m.nflats, 4);
    CHECK_EQ(m.npieces, 12);
    if (m.nflats == 4 && m.npieces == 12) {
        CHECK_STR(m.flats[0].module, "");
        CHECK_EQ(m.flats[0].numel, 19);
        CHECK_EQ(m.flats[0].padded, 2);
        CHECK_STR(m.pieces[0].fqn, "transformer.wte.weight");
        HELD(&m.pieces[0], 57, 3, 0);
        HELD(&m.pieces[1], 0, 6, 3);
        HELD(&m.pieces[2], 0, 6, 11);
        CHECK_STR(m.pieces[5].fqn, "transformer.blocks.0.ff_proj.weight");
        CHECK_EQ(m.pieces[5].ndim, 3);
        HELD(&m.pieces[5], 30, 30, 0);
        CHECK(!m.pieces[7].held);
        CHECK_EQ(m.pieces[8].ndim, 0);     /* "scale", a 0-d parameter */
        HELD(&m.pieces[9], 13, 17, 0);
        HELD(&m.pieces[10], 0, 1, 19);
        CHECK_STR(m.pieces[11].fqn, "transformer.blocks.1.ff.weight");
        CHECK(!m.pieces[11].held);
        CHECK_EQ(m.flats[3].padded, 2);
    }
    uns_olmoflat_release(&m);
    ckpt_arena_free(a);
}

/* torch <= 2.0.1 layout, 3 ranks, rank 1: consecutive slices. */
static void test_unshard__olmoflat_shard_indices(void)
{
    struct ckpt_arena *a = ckpt_arena_new(16u << 20);
    struct lmodel m = { 0 };
    CHECK_EQ(read_model("fuzz/corpus/olmoflat/w3-20_rank1.pkl", a, &m), 0);
    CHECK_EQ(m.npieces, 12);
    if (m.npieces == 12) {
        HELD(&m.pieces[0], 24, 24, 0);
        CHECK(!m.pieces[1].held);
        HELD(&m.pieces[3], 50, 22, 0);
        HELD(&m.pieces[4], 0, 12, 22);
        HELD(&m.pieces[5], 0, 16, 34);
        CHECK(!m.pieces[6].held);
        HELD(&m.pieces[7], 25, 17, 0);
        HELD(&m.pieces[8], 0, 1, 17);
        HELD(&m.pieces[9], 0, 7, 18);
        HELD(&m.pieces[11], 2, 2, 0);
    }
    uns_olmoflat_release(&m);
    ckpt_arena_free(a);
}

/* A DeepSpeed buffer turned float32 (zero_to_fp32's x.float()): every
 * value bit for bit as torch 1.13 converts it (values computed there). */
static void test_unshard__ds_to_f32(void)
{
    static const uint16_t h[] = { 0x3C00, 0x0001, 0x03FF, 0x7C00, 0xFC00,
                                  0x7E01, 0x8000, 0x3555 };
    static const uint32_t hw[] = { 0x3f800000, 0x33800000, 0x387fc000,
                                   0x7f800000, 0xff800000, 0x7fc02000,
                                   0x80000000, 0x3eaaa000 };
    static const double d[] = { 0.1, 1e300, -2.5e-46 };
    static const uint32_t dw[] = { 0x3dcccccd, 0x7f800000, 0x80000000 };
    static const int64_t iv[] = { 16777217, -9007199254740993LL,
                                  INT64_MAX };
    static const float iw[] = { 16777216.0f, -9007199254740992.0f,
                                9223372036854775808.0f };
    unsigned char in[64];
    float out[8];
    uint32_t bits;
    for (size_t i = 0; i < 8; i++) {
        in[2 * i] = (unsigned char)h[i];
        in[2 * i + 1] = (unsigned char)(h[i] >> 8);
    }
    uns_cast_to_f32(ckpt_dtype_by_name("float16"), in, 8, out);
    for (size_t i = 0; i < 8; i++) {
        memcpy(&bits, &out[i], 4);
        CHECK(bits == hw[i]);
    }
    /* bfloat16 is the top half of a float32. */
    uns_cast_to_f32(ckpt_dtype_by_name("bfloat16"), in, 8, out);
    for (size_t i = 0; i < 8; i++) {
        memcpy(&bits, &out[i], 4);
        CHECK(bits == (uint32_t)h[i] << 16);
    }
    memcpy(in, d, sizeof(d));
    uns_cast_to_f32(ckpt_dtype_by_name("float64"), in, 3, out);
    for (size_t i = 0; i < 3; i++) {
        memcpy(&bits, &out[i], 4);
        CHECK(bits == dw[i]);
    }
    memcpy(in, iv, sizeof(iv));
    uns_cast_to_f32(ckpt_dtype_by_name("int64"), in, 3, out);
    for (size_t i = 0; i < 3; i++)
        CHECK(out[i] == iw[i]);
    static const unsigned char b[] = { 0, 1, 255 };
    uns_cast_to_f32(ckpt_dtype_by_name("bool"), b, 2, out);
    CHECK(out[0] == 0.0f && out[1] == 1.0f);
    uns_cast_to_f32(ckpt_dtype_by_name("uint8"), b, 3, out);
    CHECK(out[2] == 255.0f);
    uns_cast_to_f32(ckpt_dtype_by_name("int8"), b, 3, out);
    CHECK(out[2] == -1.0f);
}

/* float32 -> bfloat16 as torch 1.13 casts (values from torch): ties to
 * even, overflow to infinity, subnormals rounded; NaN stays NaN (its
 * bits are the scalar c10 ones, 0x7fc0). */
static void test_unshard__ds_f32_to_bf16(void)
{
    static const uint32_t x[] = { 0x3f808000, 0x3f818000, 0x3f808001,
                                  0x7f800000, 0xff800000, 0x7f7fffff,
                                  0x00008000, 0x80018000, 0x3f800000,
                                  0x7fc00001, 0xffc00000 };
    static const uint16_t want[] = { 0x3f80, 0x3f82, 0x3f81, 0x7f80, 0xff80,
                                     0x7f80, 0x0000, 0x8002, 0x3f80, 0x7fc0,
                                     0x7fc0 };
    float in[11];
    unsigned char out[22];
    memcpy(in, x, sizeof(x));
    uns_cast_f32_to_bf16(in, 11, out);
    for (size_t i = 0; i < 11; i++)
        CHECK((uint16_t)(out[2 * i] | out[2 * i + 1] << 8) == want[i]);
}

/* float32 -> float16 as torch casts (values from torch 1.13, its
 * vectorised and scalar paths agree): ties to even, 65520 to infinity,
 * subnormals rounded (2^-25 ties to 0), NaN sign | 0x7e00. */
static void test_unshard__hf_f32_to_f16(void)
{
    static const uint32_t x[] = {
        0x3f800000, 0x3f801000, 0x3f803000, 0x3f801001, 0x477ff000,
        0x477fefff, 0x47800000, 0x7f800000, 0xff800000, 0x33000000,
        0x33000001, 0x33800000, 0x33c00000, 0x387fc000, 0x387fe000,
        0x38800000, 0x80000001, 0x80000000, 0x7fc00000, 0xffc00001,
        0x7f800001, 0x3e2aaaab, 0xc2f6e979 };
    static const uint16_t want[] = {
        0x3c00, 0x3c00, 0x3c02, 0x3c01, 0x7c00, 0x7bff, 0x7c00, 0x7c00,
        0xfc00, 0x0000, 0x0001, 0x0001, 0x0002, 0x03ff, 0x0400, 0x0400,
        0x8000, 0x8000, 0x7e00, 0xfe00, 0x7e00, 0x3155, 0xd7b7 };
    enum { N = sizeof(x) / sizeof(x[0]) };
    float in[N];
    unsigned char out[2 * N];
    memcpy(in, x, sizeof(x));
    uns_hf_f32_to_f16(in, N, out);
    for (size_t i = 0; i < N; i++)
        CHECK((uint16_t)(out[2 * i] | out[2 * i + 1] << 8) == want[i]);
}

/* Floats as Python's repr writes them (config.json). */
static void test_unshard__hf_py_float(void)
{
    static const struct { double v; const char *s; } c[] = {
        { 1e-05, "1e-05" }, { 10000.0, "10000.0" }, { 0.02, "0.02" },
        { 1e16, "1e+16" }, { 1234567890123456.0, "1234567890123456.0" },
        { 0.0001, "0.0001" }, { 1.5e-07, "1.5e-07" }, { -0.0, "-0.0" },
        { 123.456, "123.456" }, { 1e22, "1e+22" }, { 5e-324, "5e-324" },
        { 0.1 + 0.2, "0.30000000000000004" }, { 500000.0, "500000.0" },
        { -2.5, "-2.5" }, { 1.7976931348623157e308,
                            "1.7976931348623157e+308" },
    };
    char buf[40];
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        uns_hf_py_float(c[i].v, buf, sizeof(buf));
        CHECK(!strcmp(buf, c[i].s));
    }
}

/* json.dumps(o, indent=2, sort_keys=True) + "\n". */
static void test_unshard__hf_json(void)
{
    cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
    cJSON_AddItemToObject(o, "b", a);
    cJSON_AddItemToArray(a, cJSON_CreateString("x\"\u00e9\xf0\x9f\x98\x80"));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(3));
    cJSON_AddItemToObject(o, "a", uns_hf_json_float(1e-6));
    cJSON_AddItemToObject(o, "c", cJSON_CreateObject());
    cJSON_AddItemToObject(o, "d", cJSON_CreateArray());
    cJSON_AddNullToObject(o, "A");
    cJSON_AddBoolToObject(o, "e", 1);
    char *s = uns_hf_json(o);
    CHECK(!strcmp(s, "{\n  \"A\": null,\n  \"a\": 1e-06,\n  \"b\": [\n"
                     "    \"x\\\"\\u00e9\\ud83d\\ude00\",\n    3\n  ],\n"
                     "  \"c\": {},\n  \"d\": [],\n  \"e\": true\n}\n"));
    free(s);
    cJSON_Delete(o);
}

TEST_MAIN(T(test_unshard__ds_to_f32),
          T(test_unshard__ds_f32_to_bf16),
          T(test_unshard__hf_f32_to_f16),
          T(test_unshard__hf_py_float),
          T(test_unshard__hf_json),
          T(test_unshard__flat_boxes_cover_ranges),
          T(test_unshard__flat_boxes_bad_ranges),
          T(test_unshard__olmoflat_strip),
          T(test_unshard__olmoflat_shard_param_infos),
          T(test_unshard__olmoflat_shard_indices))
