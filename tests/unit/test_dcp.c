/*
 * test_dcp.c - DCP .metadata interpretation and the completeness API.
 *
 * fuzz/corpus/dcp_metadata/t113_*.metadata were written by Debian's torch
 * 1.13 (Python 3.11): t113_simple by one process
 * {w: f32 3x4, step: 7, b: i64[3], nested: {...}}, t113_rowcol by two
 * ranks {row: f32 5x8 split 3+2 rows, col: bf16 4x6 split 4+2 columns,
 * rep: f64[2], step: 7, extra: {...}}.
 */
#include "ckpt/dcp.h"
#include "test.h"

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

static void test_dcp__required_sizes(void)
{
    size_t len = 0, n;
    char *data = slurp("fuzz/corpus/dcp_metadata/t113_rowcol.metadata", &len);
    struct ckpt_dcp_filereq *r;
    struct ckpt_err err;
    CHECK(data != NULL);
    CHECK(ckpt_dcp_required_sizes(data, len, &r, &n, &err) == 0);
    CHECK_EQ(n, 7);
    static const char *const names[] = {
        "__0_0.distcp", "__0_1.distcp", "__0_2.distcp", "__0_3.distcp",
        "__0_4.distcp", "__1_0.distcp", "__1_1.distcp"
    };
    static const uint64_t sizes[] = { 811, 747, 747, 431, 431, 811, 747 };
    for (size_t i = 0; i < n && i < 7; i++) {
        CHECK_STR(r[i].name, names[i]);
        CHECK_EQ(r[i].min_size, sizes[i]);
    }
    ckpt_dcp_filereqs_free(r, n);
    free(data);
}

static void test_dcp__required_sizes_errors(void)
{
    struct ckpt_dcp_filereq *r = (void *)1;
    size_t n = 9;
    struct ckpt_err err;
    CHECK(ckpt_dcp_required_sizes("\x80\x02K\x07.", 5, &r, &n, &err) == -1);
    CHECK_STR(err.msg, ".metadata: not DCP metadata (top-level int )");
    CHECK(r == NULL && n == 0);
    CHECK(ckpt_dcp_required_sizes("cos\nsystem\n.", 12, &r, &n, &err) == -1);
    CHECK_EQ(err.code, CKPT_EUNSAFE);
    CHECK_STR(err.msg, ".metadata: pickle global 'os.system' is not allowed");
    size_t len = 0;
    char *data = slurp("fuzz/corpus/dcp_metadata/t113_rowcol.metadata", &len);
    CHECK(ckpt_dcp_required_sizes(data, len - 9, &r, &n, &err) == -1);
    CHECK_EQ(err.code, CKPT_EFORMAT);
    free(data);
    ckpt_dcp_filereqs_free(NULL, 0);
}

static void test_dcp__entries(void)
{
    size_t len = 0;
    char *data = slurp("fuzz/corpus/dcp_metadata/t113_rowcol.metadata", &len);
    struct ckpt_dcp_meta *m = ckpt_dcp_meta_new();
    struct ckpt_err err;
    CHECK(ckpt_dcp_meta_add(m, data, len, ".metadata", &err) == 0);
    CHECK_EQ(m->n, 5);
    CHECK(!m->has_planner_data);
    const struct ckpt_dcp_entry *e = ckpt_dcp_find(m, "col");
    CHECK(e && e->kind == CKPT_DCP_TENSOR);
    if (e) {
        CHECK_STR(e->dtype->name, "bfloat16");
        CHECK_EQ(e->ndim, 2);
        CHECK(e->size[0] == 4 && e->size[1] == 6);
        CHECK_EQ(e->nchunks, 2);
        CHECK(e->chunks[1].offsets[0] == 0 && e->chunks[1].offsets[1] == 4);
        CHECK(e->chunks[1].sizes[0] == 4 && e->chunks[1].sizes[1] == 2);
        CHECK_STR(e->chunks[1].st.file, "__1_1.distcp");
        CHECK_EQ(e->chunks[1].st.length, 747);
        CHECK(e->path == NULL);
    }
    e = ckpt_dcp_find(m, "step");
    CHECK(e && e->kind == CKPT_DCP_BYTES);
    if (e)
        CHECK_STR(e->st.file, "__0_3.distcp");
    CHECK_STR(m->entries[0].fqn, "row");
    CHECK_STR(m->entries[4].fqn, "extra");
    /* Merging the same file again (rank-local style) keeps 5 entries and
     * doubles the chunks, which the planner then reports as overlaps. */
    CHECK(ckpt_dcp_meta_add(m, data, len, "__1.metadata", &err) == 0);
    CHECK_EQ(m->n, 5);
    CHECK_EQ(ckpt_dcp_find(m, "row")->nchunks, 4);
    ckpt_dcp_meta_free(m);
    free(data);
}

static size_t index_of(const struct ckpt_dcp_meta *m, const char *fqn)
{
    const struct ckpt_dcp_entry *e = ckpt_dcp_find(m, fqn);
    return e ? (size_t)(e - m->entries) : (size_t)-1;
}

/* Rank-local merging keeps every file's copy of a byte item and each
 * chunk's file (part); ckpt_dcp_split_parts turns a key into KEY.rankP. */
static void test_dcp__parts(void)
{
    size_t len = 0;
    char *data = slurp("fuzz/corpus/dcp_metadata/t113_rowcol.metadata", &len);
    struct ckpt_dcp_meta *m = ckpt_dcp_meta_new();
    struct ckpt_err err;
    CHECK(ckpt_dcp_meta_add(m, data, len, "__0.metadata", &err) == 0);
    CHECK(ckpt_dcp_meta_add(m, data, len, "__1.metadata", &err) == 0);
    const struct ckpt_dcp_entry *e = ckpt_dcp_find(m, "step");
    CHECK(e && e->part == 0 && e->ncopies == 1);
    if (e && e->ncopies == 1) {
        CHECK_EQ(e->copies[0].part, 1);
        CHECK_STR(e->copies[0].st.file, "__0_3.distcp");
    }
    e = ckpt_dcp_find(m, "row");
    CHECK(e && e->nchunks == 4 && e->chunks[1].part == 0 &&
          e->chunks[2].part == 1);
    /* A sharded tensor has no per-rank copies. */
    size_t i = index_of(m, "row");
    CHECK(ckpt_dcp_split_parts(m, i, &err) == -1);
    CHECK_STR(err.msg, "tensor 'row': per-rank copies need every rank's "
                       "chunk to be the whole tensor");
    i = index_of(m, "step");
    CHECK(ckpt_dcp_split_parts(m, i, &err) == 0);
    CHECK_EQ(m->n, 6);
    CHECK(ckpt_dcp_find(m, "step") == NULL);
    CHECK_STR(m->entries[i].fqn, "step.rank0");
    CHECK_STR(m->entries[i + 1].fqn, "step.rank1");
    CHECK(m->entries[i + 1].kind == CKPT_DCP_BYTES &&
          m->entries[i + 1].part == 1 && m->entries[i + 1].ncopies == 0);
    CHECK_EQ(index_of(m, "step.rank1"), i + 1);
    CHECK_EQ(index_of(m, "extra"), 5);
    /* A plain tensor every rank stored whole: one entry per rank. */
    i = index_of(m, "rep");
    CHECK(ckpt_dcp_split_parts(m, i, &err) == 0);
    CHECK_EQ(m->n, 7);
    e = ckpt_dcp_find(m, "rep.rank1");
    CHECK(e && e->kind == CKPT_DCP_TENSOR && e->nchunks == 1 &&
          e->chunks[0].part == 1);
    ckpt_dcp_meta_free(m);
    free(data);
}

TEST_MAIN(T(test_dcp__required_sizes), T(test_dcp__required_sizes_errors),
          T(test_dcp__entries), T(test_dcp__parts))
