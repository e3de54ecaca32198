// test: views share storage and copy nothing; values match hand-computed
// expectations; bad dims and ranges are errors naming the op and shapes
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/ops.h"
#include "engine_testutil.h"

#define EXPECT_ERR(st, msg)                                     \
    do {                                                        \
        assert_int_equal(oj_last_status(eng), (st));            \
        assert_string_equal(oj_last_error(eng), (msg));         \
        oj_clear_error(eng);                                    \
    } while (0)
#define EXPECT_STATUS(st)                                       \
    do {                                                        \
        assert_int_equal(oj_last_status(eng), (st));            \
        oj_clear_error(eng);                                    \
    } while (0)

/* arange(n) as f32 reshaped to shape */
static oj_tensor *iota(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    return oj_reshape(oj_arange(eng, 0, (double)n, 1, OJ_F32), rank, shape);
}

/* Values of t in row-major order (through oj_contiguous + oj_to_host). */
static void expect_values(oj_tensor *t, int rank, const int64_t *shape, const float *want) {
    assert_non_null(t);
    assert_int_equal(oj_rank(t), rank);
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        assert_int_equal(oj_size(t, d), shape[d]);
        n *= shape[d];
    }
    float got[256];
    assert_true(n <= 256);
    oj_tensor *c = oj_contiguous(t);
    assert_true(oj_is_contiguous(c));
    assert_int_equal(oj_to_host(c, got, (size_t)n * 4), OJ_OK);
    for (int64_t i = 0; i < n; i++) assert_true(got[i] == want[i]);
    oj_release(c);
}

static void test_reshape_view_and_copy(void **state) {
    (void)state;
    oj_tensor *t = iota(2, (int64_t[]){2, 6});
    oj_tensor *r = oj_reshape(t, 3, (int64_t[]){3, -1, 2});
    assert_true(oj_shares_storage(t, r));
    expect_values(r, 3, (int64_t[]){3, 2, 2}, (float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    /* transposed: [6, 2] strides (1, 6); flattening needs a copy */
    oj_tensor *tt = oj_transpose(t, 0, 1);
    oj_tensor *flat = oj_reshape(tt, 1, (int64_t[]){-1});
    assert_false(oj_shares_storage(tt, flat));
    expect_values(flat, 1, (int64_t[]){12}, (float[]){0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11});
    assert_null(oj_view(tt, 1, (int64_t[]){12}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
    /* but splitting a dim of the transpose is a view */
    oj_tensor *split = oj_view(tt, 3, (int64_t[]){3, 2, 2});
    assert_true(oj_shares_storage(tt, split));
    expect_values(split, 3, (int64_t[]){3, 2, 2}, (float[]){0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11});
    /* rank 0 <-> [1, 1] */
    oj_tensor *s = oj_scalar(eng, 7, OJ_F32);
    oj_tensor *s11 = oj_reshape(s, 2, (int64_t[]){1, 1});
    expect_values(s11, 2, (int64_t[]){1, 1}, (float[]){7});
    oj_tensor *s0 = oj_reshape(s11, 0, NULL);
    assert_int_equal(oj_rank(s0), 0);
    assert_true(oj_item(s0) == 7);
    /* errors */
    assert_null(oj_reshape(t, 2, (int64_t[]){5, -1}));
    EXPECT_ERR(OJ_ERR_SHAPE, "reshape: shape [5, -1] is invalid for input [2, 6] of 12 elements");
    assert_null(oj_reshape(t, 2, (int64_t[]){-1, -1}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
    assert_null(oj_reshape(t, 2, (int64_t[]){4, 4}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
    assert_null(oj_reshape(t, 9, (int64_t[9]){1}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
    assert_null(oj_reshape(t, 2, (int64_t[]){-2, -6}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
    /* empty tensors reshape freely */
    oj_tensor *e = oj_zeros(eng, 2, (int64_t[]){0, 4}, OJ_F32);
    oj_tensor *e2 = oj_reshape(e, 3, (int64_t[]){2, 0, 8});
    assert_non_null(e2);
    assert_int_equal(oj_numel(e2), 0);
    assert_null(oj_reshape(e, 2, (int64_t[]){-1, 0}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
}

static void test_permute_transpose(void **state) {
    (void)state;
    oj_tensor *t = iota(3, (int64_t[]){2, 3, 4});
    oj_tensor *p = oj_permute(t, 3, (int[]){2, 0, 1});
    assert_true(oj_shares_storage(t, p));
    assert_int_equal(oj_strides(p)[0], 1);
    assert_int_equal(oj_strides(p)[1], 12);
    assert_int_equal(oj_strides(p)[2], 4);
    /* p[k][i][j] = t[i][j][k] = 12i + 4j + k */
    float want[24];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) want[k * 6 + i * 3 + j] = (float)(12 * i + 4 * j + k);
    expect_values(p, 3, (int64_t[]){4, 2, 3}, want);
    oj_tensor *q = oj_permute(t, 3, (int[]){-1, 0, -2}); /* same as (2, 0, 1) */
    expect_values(q, 3, (int64_t[]){4, 2, 3}, want);
    oj_tensor *tr = oj_transpose(t, -1, 0); /* [4, 3, 2]: tr[k][j][i] */
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 2; i++) want[k * 6 + j * 2 + i] = (float)(12 * i + 4 * j + k);
    expect_values(tr, 3, (int64_t[]){4, 3, 2}, want);
    assert_null(oj_permute(t, 3, (int[]){0, 0, 1}));
    EXPECT_ERR(OJ_ERR_SHAPE, "permute: dim 0 repeated in the permutation of [2, 3, 4]");
    assert_null(oj_permute(t, 2, (int[]){0, 1}));
    EXPECT_ERR(OJ_ERR_SHAPE, "permute: 2 dims given for [2, 3, 4] of rank 3");
    assert_null(oj_permute(t, 3, (int[]){0, 1, 3}));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);
    assert_null(oj_transpose(t, 0, 3));
    EXPECT_ERR(OJ_ERR_OUT_OF_RANGE,
               "transpose: dim 3 out of range for a rank-3 tensor (expected -3..2)");
}

static void test_narrow_select(void **state) {
    (void)state;
    oj_tensor *t = iota(2, (int64_t[]){2, 5});
    oj_tensor *n = oj_narrow(t, 1, 1, 3);
    assert_true(oj_shares_storage(t, n));
    assert_int_equal(oj_offset_bytes(n), 4);
    assert_false(oj_is_contiguous(n));
    expect_values(n, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 6, 7, 8});
    expect_values(oj_narrow(t, -1, -2, 2), 2, (int64_t[]){2, 2}, (float[]){3, 4, 8, 9});
    expect_values(oj_narrow(t, 0, 2, 0), 2, (int64_t[]){0, 5}, (float[]){0});
    assert_null(oj_narrow(t, 1, 3, 4));
    EXPECT_ERR(OJ_ERR_OUT_OF_RANGE, "narrow: start 3 + length 4 exceeds size 5 of dim 1 of [2, 5]");
    assert_null(oj_narrow(t, 1, 6, 0));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);
    assert_null(oj_narrow(t, 1, 0, -1));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);
    assert_null(oj_narrow(t, 2, 0, 1));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);

    oj_tensor *row = oj_select(t, 0, 1);
    expect_values(row, 1, (int64_t[]){5}, (float[]){5, 6, 7, 8, 9});
    oj_tensor *col = oj_select(t, 1, -1);
    expect_values(col, 1, (int64_t[]){2}, (float[]){4, 9});
    oj_tensor *el = oj_select(col, 0, 1);
    assert_int_equal(oj_rank(el), 0);
    assert_true(oj_item(el) == 9);
    assert_null(oj_select(t, 0, 2));
    EXPECT_ERR(OJ_ERR_OUT_OF_RANGE, "select: index 2 out of range for size 2 of dim 0 of [2, 5]");
    assert_null(oj_select(el, 0, 0));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);
    /* writes through a view are seen by the base */
    assert_int_equal(oj_fill_(n, -1), OJ_OK);
    expect_values(t, 2, (int64_t[]){2, 5}, (float[]){0, -1, -1, -1, 4, 5, -1, -1, -1, 9});
}

static void test_slice(void **state) {
    (void)state;
    oj_tensor *t = iota(1, (int64_t[]){10});
    oj_tensor *s = oj_slice(t, 0, 1, 8, 3); /* 1, 4, 7 */
    assert_true(oj_shares_storage(t, s));
    assert_int_equal(oj_strides(s)[0], 3);
    expect_values(s, 1, (int64_t[]){3}, (float[]){1, 4, 7});
    expect_values(oj_slice(t, 0, -3, INT64_MAX, 1), 1, (int64_t[]){3}, (float[]){7, 8, 9});
    expect_values(oj_slice(t, 0, -100, 2, 1), 1, (int64_t[]){2}, (float[]){0, 1});
    expect_values(oj_slice(t, 0, 0, 100, 4), 1, (int64_t[]){3}, (float[]){0, 4, 8});
    expect_values(oj_slice(t, 0, 7, 3, 1), 1, (int64_t[]){0}, (float[]){0});
    expect_values(oj_slice(t, 0, 20, 30, 1), 1, (int64_t[]){0}, (float[]){0});
    expect_values(oj_slice(t, 0, INT64_MIN, INT64_MAX, 5), 1, (int64_t[]){2}, (float[]){0, 5});
    oj_tensor *m = iota(2, (int64_t[]){3, 4});
    expect_values(oj_slice(m, 1, 1, 4, 2), 2, (int64_t[]){3, 2}, (float[]){1, 3, 5, 7, 9, 11});
    expect_values(oj_slice(oj_slice(m, 0, 0, 3, 2), 1, 0, 4, 3), 2, (int64_t[]){2, 2},
                  (float[]){0, 3, 8, 11});
    assert_null(oj_slice(t, 0, 0, 5, 0));
    EXPECT_ERR(OJ_ERR_OUT_OF_RANGE, "slice: step 0 must be > 0 (dim 0 of [10])");
    assert_null(oj_slice(t, 1, 0, 5, 1));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);
}

static void test_expand(void **state) {
    (void)state;
    oj_tensor *c = iota(2, (int64_t[]){3, 1});
    oj_tensor *e = oj_expand(c, 3, (int64_t[]){2, 3, 4});
    assert_true(oj_shares_storage(c, e));
    assert_int_equal(oj_strides(e)[0], 0);
    assert_int_equal(oj_strides(e)[2], 0);
    float want[24];
    for (int i = 0; i < 24; i++) want[i] = (float)((i / 4) % 3);
    expect_values(e, 3, (int64_t[]){2, 3, 4}, want);
    oj_tensor *k = oj_expand(c, 2, (int64_t[]){-1, 2});
    expect_values(k, 2, (int64_t[]){3, 2}, (float[]){0, 0, 1, 1, 2, 2});
    assert_null(oj_expand(c, 2, (int64_t[]){4, 2}));
    EXPECT_ERR(OJ_ERR_SHAPE, "expand: cannot expand [3, 1] to [4, 2]: size 3 of dim 0 must be 1 or 4");
    assert_null(oj_expand(c, 1, (int64_t[]){3}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
    assert_null(oj_expand(c, 3, (int64_t[]){-1, 3, 1}));
    EXPECT_STATUS(OJ_ERR_SHAPE);
    assert_null(oj_expand(c, 3, (int64_t[]){INT64_MAX, 3, 2}));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);
}

static void test_squeeze_unsqueeze_flatten(void **state) {
    (void)state;
    oj_tensor *t = iota(4, (int64_t[]){1, 3, 1, 2});
    expect_values(oj_squeeze(t, 0), 3, (int64_t[]){3, 1, 2}, (float[]){0, 1, 2, 3, 4, 5});
    expect_values(oj_squeeze(t, -2), 3, (int64_t[]){1, 3, 2}, (float[]){0, 1, 2, 3, 4, 5});
    expect_values(oj_squeeze(t, 1), 4, (int64_t[]){1, 3, 1, 2}, (float[]){0, 1, 2, 3, 4, 5});
    oj_tensor *sq = oj_squeeze_all(t);
    assert_true(oj_shares_storage(t, sq));
    expect_values(sq, 2, (int64_t[]){3, 2}, (float[]){0, 1, 2, 3, 4, 5});
    assert_null(oj_squeeze(t, 4));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);

    oj_tensor *u = oj_unsqueeze(sq, 1); /* [3, 1, 2] */
    assert_int_equal(oj_size(u, 1), 1);
    assert_int_equal(oj_strides(u)[1], 2);
    expect_values(oj_unsqueeze(sq, -1), 3, (int64_t[]){3, 2, 1}, (float[]){0, 1, 2, 3, 4, 5});
    expect_values(oj_unsqueeze(sq, 0), 3, (int64_t[]){1, 3, 2}, (float[]){0, 1, 2, 3, 4, 5});
    assert_null(oj_unsqueeze(sq, 3));
    EXPECT_ERR(OJ_ERR_OUT_OF_RANGE,
               "unsqueeze: dim 3 out of range for a rank-3 tensor (expected -3..2)");
    oj_tensor *s = oj_scalar(eng, 4, OJ_F32);
    expect_values(oj_unsqueeze(s, 0), 1, (int64_t[]){1}, (float[]){4});
    oj_tensor *r8 = iota(8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2});
    assert_null(oj_unsqueeze(r8, 0));
    EXPECT_STATUS(OJ_ERR_SHAPE);

    oj_tensor *m = iota(3, (int64_t[]){2, 3, 4});
    oj_tensor *f = oj_flatten(m, 1, 2);
    assert_true(oj_shares_storage(m, f));
    assert_int_equal(oj_size(f, 1), 12);
    oj_tensor *fa = oj_flatten(m, 0, -1);
    assert_int_equal(oj_rank(fa), 1);
    assert_int_equal(oj_size(fa, 0), 24);
    oj_tensor *ft = oj_flatten(oj_transpose(m, 0, 2), 0, 1); /* [4*3, 2]: a copy */
    float want[24];
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 2; i++) want[(k * 3 + j) * 2 + i] = (float)(12 * i + 4 * j + k);
    expect_values(ft, 2, (int64_t[]){12, 2}, want);
    expect_values(oj_flatten(s, 0, -1), 1, (int64_t[]){1}, (float[]){4});
    assert_null(oj_flatten(m, 2, 1));
    EXPECT_STATUS(OJ_ERR_OUT_OF_RANGE);
}

static void test_views_of_views_and_offsets(void **state) {
    (void)state;
    /* [4, 6] -> rows 1..3 -> cols step 2 -> transpose -> select */
    oj_tensor *t = iota(2, (int64_t[]){4, 6});
    oj_tensor *a = oj_narrow(t, 0, 1, 3);
    oj_tensor *b = oj_slice(a, 1, 1, 6, 2);       /* cols 1, 3, 5 */
    oj_tensor *c = oj_transpose(b, 0, 1);         /* [3 cols, 3 rows] */
    expect_values(c, 2, (int64_t[]){3, 3}, (float[]){7, 13, 19, 9, 15, 21, 11, 17, 23});
    oj_tensor *d = oj_select(c, 0, 2);            /* col 5: rows 1..3 */
    expect_values(d, 1, (int64_t[]){3}, (float[]){11, 17, 23});
    assert_int_equal(oj_offset_bytes(d), (6 + 5) * 4);
    assert_true(oj_shares_storage(t, d));
    /* nothing was allocated for the views beyond handles */
    assert_int_equal(oj_budget_current(oj_engine_budget(eng)) - oj_engine_pooled_bytes(eng),
                     96 /* t itself: 24 f32 (96 B is a pool size class) */);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, et_scope_in, et_scope_out)
    const struct CMUnitTest tests[] = {
        T(test_reshape_view_and_copy), T(test_permute_transpose), T(test_narrow_select),
        T(test_slice),                 T(test_expand),            T(test_squeeze_unsqueeze_flatten),
        T(test_views_of_views_and_offsets),
    };
    return cmocka_run_group_tests(tests, et_setup, et_teardown_no_leaks);
}
