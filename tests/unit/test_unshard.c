/* test_unshard.c - internal geometry of the unshard module. */
#include "test.h"
#include "unshard/unshard_int.h"

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
                int n = flat_boxes(nd, size, s, c, boxes, 16);
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
    CHECK_EQ(flat_boxes(2, size, 13, 0, boxes, 3), -1);
    CHECK_EQ(flat_boxes(2, size, 4, 9, boxes, 3), -1);
    CHECK_EQ(flat_boxes(2, size, 1, 10, boxes, 2), -1);   /* needs 3 */
    CHECK_EQ(flat_boxes(2, size, 1, 10, boxes, 3), 3);
    CHECK_EQ(flat_boxes(2, size, 0, 12, boxes, 1), 1);
    CHECK_EQ(flat_boxes(0, size, 0, 1, boxes, 1), 1);
    CHECK_EQ(flat_boxes(0, size, 0, 2, boxes, 1), -1);
}

TEST_MAIN(T(test_unshard__flat_boxes_cover_ranges),
          T(test_unshard__flat_boxes_bad_ranges))
