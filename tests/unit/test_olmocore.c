/*
 * test_olmocore.c - OLMo-core metadata.json: both schemas, the checks on
 * ranges and boxes, and the tiling check's messages.
 */
#include "ckpt/olmocore.h"
#include "test.h"

static struct ckpt_olmocore_meta *parse(const char *json,
                                        struct ckpt_err *err)
{
    struct ckpt_olmocore_meta *m = NULL;
    if (ckpt_olmocore_meta_parse(json, strlen(json), "metadata.json", &m,
                                 err) != 0)
        return NULL;
    return m;
}

static void test_olmocore__schema_0_1(void)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_olmocore_meta *m = parse(
        "{\"tensors\": {"
        "\"w\": {\"shape\": [3, 4], \"is_sharded\": true, \"dtype\": \"BF16\","
        " \"shard_spec_per_file\": {"
        "  \"rank_0.safetensors\": {\"flattened_offsets\": [[0, 5], [9, 10]],"
        "   \"local_shape\": null, \"global_offset\": null},"
        "  \"rank_1.safetensors\": {\"flattened_offsets\": [[5, 9], [10, 12]]}"
        "}},"
        "\"d\": {\"shape\": [2, 6], \"is_sharded\": true, \"dtype\": \"F32\","
        " \"shard_spec_per_file\": {"
        "  \"rank_0.safetensors\": {\"flattened_offsets\": null,"
        "   \"local_shape\": [2, 4], \"global_offset\": [0, 0]},"
        "  \"rank_1.safetensors\": {\"local_shape\": [2, 2],"
        "   \"global_offset\": [0, 4]}}},"
        "\"step\": {\"shape\": [], \"is_sharded\": false, \"dtype\": \"I64\","
        " \"shard_spec_per_file\": {\"rank_0.safetensors\":"
        "  {\"flattened_offsets\": [[0, 1]]}}}}}", &err);
    CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK_EQ(m->n, 3);
    const struct ckpt_olmocore_tensor *w = &m->tensors[0];
    CHECK_STR(w->key, "w");
    CHECK(w->dtype == ckpt_dtype_by_name("bfloat16"));
    CHECK(w->ndim == 2 && w->shape[0] == 3 && w->shape[1] == 4);
    CHECK_EQ(w->numel, 12);
    CHECK_EQ(w->npieces, 2);
    CHECK_STR(w->pieces[1].file, "rank_1.safetensors");
    CHECK(w->pieces[0].nranges == 2 && w->pieces[0].ranges[2] == 9 &&
          w->pieces[0].ranges[3] == 10);
    CHECK_EQ(w->pieces[0].numel, 6);
    CHECK_EQ(w->pieces[1].numel, 6);
    const struct ckpt_olmocore_tensor *d = &m->tensors[1];
    CHECK(d->pieces[1].ranges == NULL && d->pieces[1].box[1] == 2 &&
          d->pieces[1].offset[1] == 4 && d->pieces[1].numel == 4);
    CHECK(m->tensors[2].ndim == 0 && m->tensors[2].numel == 1);
    for (size_t i = 0; i < m->n; i++)
        CHECK_EQ(ckpt_olmocore_check_tiling(&m->tensors[i], 0, &err), 0);
    ckpt_olmocore_meta_free(m);
}

/* Before shard_spec_per_file: one [start, end] (or a list) per file. */
static void test_olmocore__schema_flattened_offsets_per_file(void)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_olmocore_meta *m = parse(
        "{\"tensors\": {\"a\": {\"flattened_offsets_per_file\": "
        "{\"rank_0.safetensors\": [0, 7], \"rank_1.safetensors\": [7, 10]},"
        " \"shape\": [10], \"is_sharded\": true, \"dtype\": \"F32\"},"
        "\"b\": {\"flattened_offsets_per_file\": {\"rank_0.safetensors\": "
        "[[0, 2], [4, 6]], \"rank_1.safetensors\": [[2, 4]],"
        " \"rank_2.safetensors\": []}, \"shape\": [3, 2]}}}", &err);
    CHECK(m != NULL);
    if (!m)
        return;
    CHECK(m->tensors[0].dtype == ckpt_dtype_by_name("float32"));
    CHECK(m->tensors[0].pieces[1].nranges == 1 &&
          m->tensors[0].pieces[1].numel == 3);
    CHECK(m->tensors[1].dtype == NULL);
    CHECK(m->tensors[1].pieces[0].nranges == 2 &&
          m->tensors[1].pieces[2].nranges == 0 &&
          m->tensors[1].pieces[2].numel == 0);
    CHECK_EQ(ckpt_olmocore_check_tiling(&m->tensors[0], 0, &err), 0);
    CHECK_EQ(ckpt_olmocore_check_tiling(&m->tensors[1], 0, &err), 0);
    ckpt_olmocore_meta_free(m);
}

static void test_olmocore__bad_metadata(void)
{
    static const struct {
        const char *json, *msg;
    } cases[] = {
        { "[]", "metadata.json: not OLMo-core metadata (no \"tensors\" "
                "object)" },
        { "{\"tensors\"", "metadata.json: not JSON" },
        { "{\"tensors\": {\"a\": {\"shape\": [4], \"dtype\": \"F32\", "
          "\"shard_spec_per_file\": {\"rank_0.safetensors\": "
          "{\"flattened_offsets\": [[0, 5]]}}}}}",
          "metadata.json: tensor 'a': rank_0.safetensors: range [0, 5) "
          "outside the tensor's 4 elements" },
        { "{\"tensors\": {\"a\": {\"shape\": [4], \"dtype\": \"F32\", "
          "\"shard_spec_per_file\": {\"rank_0.safetensors\": "
          "{\"flattened_offsets\": [[3, 2]]}}}}}",
          "metadata.json: tensor 'a': rank_0.safetensors: range [3, 2) "
          "outside the tensor's 4 elements" },
        { "{\"tensors\": {\"a\": {\"shape\": [4, 4], \"dtype\": \"F32\", "
          "\"shard_spec_per_file\": {\"rank_0.safetensors\": "
          "{\"local_shape\": [2, 4], \"global_offset\": [3, 0]}}}}}",
          "metadata.json: tensor 'a': rank_0.safetensors: local shard "
          "outside the tensor" },
        { "{\"tensors\": {\"a\": {\"shape\": [4, 4], \"dtype\": \"F32\", "
          "\"shard_spec_per_file\": {\"rank_0.safetensors\": "
          "{\"local_shape\": [16], \"global_offset\": [0]}}}}}",
          "metadata.json: tensor 'a': rank_0.safetensors: local_shape and "
          "global_offset must have one entry per dimension" },
        { "{\"tensors\": {\"a\": {\"shape\": [4], \"dtype\": \"F32\", "
          "\"shard_spec_per_file\": {\"rank_0.safetensors\": "
          "{\"flattened_offsets\": null}}}}}",
          "metadata.json: tensor 'a': rank_0.safetensors: neither "
          "flattened_offsets nor local_shape and global_offset" },
        { "{\"tensors\": {\"a\": {\"shape\": [4], \"dtype\": \"F32\", "
          "\"shard_spec_per_file\": {\"../x.safetensors\": "
          "{\"flattened_offsets\": [[0, 4]]}}}}}",
          "metadata.json: tensor 'a': ../x.safetensors: not a plain file "
          "name" },
        { "{\"tensors\": {\"a\": {\"shape\": [4], \"dtype\": \"F32\", "
          "\"shard_spec_per_file\": {\"r.safetensors\": "
          "{\"flattened_offsets\": [[0, 2]]}, \"r.safetensors\": "
          "{\"flattened_offsets\": [[2, 4]]}}}}}",
          "metadata.json: tensor 'a': r.safetensors: named twice" },
        { "{\"tensors\": {\"a\": {\"shape\": [1], \"shard_spec_per_file\": "
          "{}}, \"a\": {\"shape\": [1], \"shard_spec_per_file\": {}}}}",
          "metadata.json: tensor 'a' appears twice" },
        { "{\"tensors\": {\"a\": {\"shape\": [1], \"dtype\": \"Q4\", "
          "\"shard_spec_per_file\": {}}}}",
          "metadata.json: tensor 'a': dtype Q4 not supported" },
        { "{\"tensors\": {\"a\": {\"shape\": [1.5]}}}",
          "metadata.json: tensor 'a': shape missing or malformed" },
        { "{\"tensors\": {\"a\": {\"shape\": [1]}}}",
          "metadata.json: tensor 'a': no shard_spec_per_file" },
        { "{\"tensors\": {\"a\": {\"shape\": [1], "
          "\"flattened_offsets_per_file\": {\"rank_0.safetensors\": 3}}}}",
          "metadata.json: tensor 'a': rank_0.safetensors: flattened_offsets "
          "must be [start, end] pairs" },
        { "{\"tensors\": {\"a\": {\"shape\": [4294967296, 4294967296, 2], "
          "\"shard_spec_per_file\": {}}}}",
          "metadata.json: tensor 'a': too many elements" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ckpt_err err = CKPT_ERR_INIT;
        struct ckpt_olmocore_meta *m = parse(cases[i].json, &err);
        CHECK(m == NULL);
        CHECK_STR(err.msg, cases[i].msg);
        ckpt_olmocore_meta_free(m);
    }
}

static int tiling(const char *spec, const char *shape, int allow,
                  struct ckpt_err *err)
{
    char json[1024];
    snprintf(json, sizeof(json), "{\"tensors\": {\"t\": {\"shape\": %s, "
             "\"dtype\": \"F32\", \"shard_spec_per_file\": {%s}}}}", shape,
             spec);
    struct ckpt_olmocore_meta *m = parse(json, err);
    if (!m)
        return -2;
    int rc = ckpt_olmocore_check_tiling(&m->tensors[0], allow, err);
    ckpt_olmocore_meta_free(m);
    return rc;
}

#define F(r, x) "\"rank_" #r ".safetensors\": {\"flattened_offsets\": " x "}"
#define B(r, s, o) "\"rank_" #r ".safetensors\": {\"local_shape\": " s \
                   ", \"global_offset\": " o "}"

static void test_olmocore__tiling(void)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK_EQ(tiling(F(0, "[[0, 7]]") "," F(1, "[[7, 12]]") "," F(2, "[]"),
                    "[3, 4]", 0, &err), 0);
    CHECK_EQ(tiling(F(0, "[[0, 7]]") "," F(1, "[[6, 12]]"), "[3, 4]", 0,
                    &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [6, 7) are stored in both "
                       "rank_0.safetensors and rank_1.safetensors");
    CHECK_EQ(tiling(F(0, "[[0, 5]]") "," F(1, "[[7, 12]]"), "[3, 4]", 0,
                    &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [5, 7) are in no file");
    CHECK_EQ(tiling(F(0, "[[0, 5]]") "," F(1, "[[5, 11]]"), "[3, 4]", 0,
                    &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [11, 12) are in no file");
    CHECK_EQ(tiling(F(0, "[[0, 5], [2, 3], [5, 12]]"), "[12]", 0, &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [2, 3) are stored twice in "
                       "rank_0.safetensors");
    /* Identical replicas: refused, or skipped with allow_replicas. */
    CHECK_EQ(tiling(F(0, "[[0, 12]]") "," F(1, "[[0, 12]]"), "[12]", 0,
                    &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [0, 12) are stored in both "
                       "rank_0.safetensors and rank_1.safetensors "
                       "(--allow-replicas accepts identical replicas)");
    CHECK_EQ(tiling(F(0, "[[0, 12]]") "," F(1, "[[0, 12]]"), "[12]", 1,
                    &err), 0);
    CHECK_EQ(tiling(F(0, "[[0, 12]]") "," F(1, "[[0, 6]]"), "[12]", 1,
                    &err), -1);
    /* Boxes: column blocks, row blocks, a 3-D block grid. */
    CHECK_EQ(tiling(B(0, "[3, 1]", "[0, 0]") "," B(1, "[3, 3]", "[0, 1]"),
                    "[3, 4]", 0, &err), 0);
    CHECK_EQ(tiling(B(0, "[1, 4]", "[0, 0]") "," B(1, "[2, 4]", "[1, 0]") ","
                    B(2, "[0, 4]", "[3, 0]"), "[3, 4]", 0, &err), 0);
    CHECK_EQ(tiling(B(0, "[2, 2, 5]", "[0, 0, 0]") ","
                    B(1, "[2, 1, 5]", "[0, 2, 0]") ","
                    B(2, "[1, 3, 5]", "[2, 0, 0]"), "[3, 3, 5]", 0, &err), 0);
    CHECK_EQ(tiling(B(0, "[2, 2]", "[0, 0]") "," B(1, "[3, 3]", "[0, 1]"),
                    "[3, 4]", 0, &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [1, 2) are stored in both "
                       "rank_0.safetensors and rank_1.safetensors");
    CHECK_EQ(tiling(B(0, "[2, 1]", "[0, 0]") "," B(1, "[3, 3]", "[0, 1]"),
                    "[3, 4]", 0, &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [8, 9) are in no file");
    /* Mixed, and a scalar. */
    CHECK_EQ(tiling(B(0, "[1, 4]", "[0, 0]") "," F(1, "[[4, 12]]"), "[3, 4]",
                    0, &err), 0);
    CHECK_EQ(tiling(B(0, "[]", "[]"), "[]", 0, &err), 0);
    CHECK_EQ(tiling(F(0, "[[0, 1]]"), "[]", 0, &err), 0);
    CHECK_EQ(tiling(F(0, "[]"), "[]", 0, &err), -1);
    CHECK_STR(err.msg, "tensor 't': elements [0, 1) are in no file");
    CHECK_EQ(tiling(F(0, "[]"), "[0, 3]", 0, &err), 0);
}

TEST_MAIN(T(test_olmocore__schema_0_1),
          T(test_olmocore__schema_flattened_offsets_per_file),
          T(test_olmocore__bad_metadata), T(test_olmocore__tiling))
