// test: the ops that let a decode step keep its position on the device:
// index_copy_ (values, repeated indices, strided targets, every refusal,
// nothing written on a bad index) and rotary_embedding_at (the bits of
// rotary_embedding at the same positions, any positions, its gradient).
#include <math.h>
#include <stdlib.h>

#include "engine_testutil.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

static oj_tensor *from_i64(int rank, const int64_t *shape, const int64_t *v, size_t n) {
    return oj_from_host(eng, rank, shape, OJ_I64, v, n * sizeof *v);
}

static void to_floats(oj_tensor *t, float *dst, size_t n) {
    assert_int_equal(oj_to_host(t, dst, n * sizeof *dst), OJ_OK);
}

/* ---------------------------------------------------------------- index_copy_ */

static void test_index_copy_values(void **state) {
    (void)state;
    int64_t xs[3] = {2, 4, 3}, ss[3] = {2, 2, 3}, is[1] = {2};
    oj_tensor *x = oj_zeros(eng, 3, xs, OJ_F32);
    float sv[12];
    for (int i = 0; i < 12; i++) sv[i] = (float)(i + 1);
    oj_tensor *src = oj_from_host(eng, 3, ss, OJ_F32, sv, sizeof sv);
    int64_t iv[2] = {3, 1};
    oj_tensor *idx = from_i64(1, is, iv, 2);
    uint64_t v0 = oj_version(x);
    assert_int_equal(oj_index_copy_(x, 1, idx, src), OJ_OK);
    assert_true(oj_version(x) > v0);
    float got[24];
    to_floats(x, got, 24);
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++) {
                float want = 0.0f;
                if (r == 3) want = sv[(b * 2 + 0) * 3 + c];
                if (r == 1) want = sv[(b * 2 + 1) * 3 + c];
                assert_true(got[(b * 4 + r) * 3 + c] == want);
            }
    /* a repeated index: the last k wins; an i32 index; a negative dim */
    int32_t rep[2] = {0, 0};
    oj_tensor *idx32 = oj_from_host(eng, 1, is, OJ_I32, rep, sizeof rep);
    assert_int_equal(oj_index_copy_(x, -2, idx32, src), OJ_OK);
    to_floats(x, got, 24);
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < 3; c++) assert_true(got[(b * 4 + 0) * 3 + c] == sv[(b * 2 + 1) * 3 + c]);
}

/* A strided (transposed) target, a rank-0 index, integer data. */
static void test_index_copy_strided(void **state) {
    (void)state;
    int64_t bs[2] = {3, 5};
    oj_tensor *base = oj_zeros(eng, 2, bs, OJ_I64);
    oj_tensor *x = oj_transpose(base, 0, 1); /* [5, 3] view, strides (1, 5) */
    int64_t one = 4, ss[2] = {1, 3}, sv[3] = {7, 8, 9};
    oj_tensor *idx = from_i64(0, NULL, &one, 1);
    oj_tensor *src = from_i64(2, ss, sv, 3);
    assert_int_equal(oj_index_copy_(x, 0, idx, src), OJ_OK);
    int64_t got[15];
    assert_int_equal(oj_to_host(base, got, sizeof got), OJ_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++) assert_int_equal(got[r * 5 + c], c == 4 ? sv[r] : 0);
}

static void test_index_copy_refusals(void **state) {
    (void)state;
    int64_t xs[2] = {4, 2}, ss[2] = {1, 2}, is[1] = {1};
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    oj_tensor *x = oj_from_host(eng, 2, xs, OJ_F32, ones, sizeof ones);
    oj_tensor *src = oj_zeros(eng, 2, ss, OJ_F32);
    int64_t bad = 4;
    oj_tensor *idx = from_i64(1, is, &bad, 1);
    assert_int_equal(oj_index_copy_(x, 0, idx, src), OJ_ERR_OUT_OF_RANGE);
    ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "index 4 out of range");
    float got[8];
    to_floats(x, got, 8);
    for (int i = 0; i < 8; i++) assert_true(got[i] == 1.0f); /* nothing written */
    int64_t neg = -1;
    oj_tensor *nidx = from_i64(1, is, &neg, 1);
    assert_int_equal(oj_index_copy_(x, 0, nidx, src), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    int64_t ok = 1;
    oj_tensor *oidx = from_i64(1, is, &ok, 1);
    oj_tensor *src3 = oj_zeros(eng, 2, xs, OJ_F32); /* dim 0 of size 4, the index has 1 */
    assert_int_equal(oj_index_copy_(x, 0, oidx, src3), OJ_ERR_SHAPE);
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "must be x");
    oj_tensor *src64 = oj_zeros(eng, 2, ss, OJ_F64);
    assert_int_equal(oj_index_copy_(x, 0, oidx, src64), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    oj_tensor *fidx = oj_zeros(eng, 1, is, OJ_F32);
    assert_int_equal(oj_index_copy_(x, 0, fidx, src), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    assert_int_equal(oj_index_copy_(x, 2, oidx, src), OJ_ERR_OUT_OF_RANGE); /* dim */
    oj_clear_error(eng);
    oj_tensor *row = oj_narrow(x, 0, 0, 1); /* src overlapping x */
    assert_int_equal(oj_index_copy_(x, 0, oidx, row), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "shares memory");
    int64_t es[2] = {4, 2}, one_row[2] = {1, 2}; /* an expanded destination */
    oj_tensor *r1 = oj_zeros(eng, 2, one_row, OJ_F32);
    oj_tensor *ex = oj_expand(r1, 2, es);
    assert_int_equal(oj_index_copy_(ex, 0, oidx, src), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "expanded view");
    oj_set_requires_grad(x, true);
    assert_int_equal(oj_index_copy_(x, 0, oidx, src), OJ_ERR_STATE);
    oj_clear_error(eng);
    bool prev = oj_set_grad_enabled(eng, false);
    assert_int_equal(oj_index_copy_(x, 0, oidx, src), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    assert_int_equal(oj_index_copy_(NULL, 0, oidx, src), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
}

/* ---------------------------------------------------------------- rotary_embedding_at */

static oj_tensor *randn(int rank, const int64_t *shape, oj_dtype dt) {
    oj_tensor *t = oj_rand_normal(eng, rank, shape, dt, 0.0, 1.0);
    assert_non_null(t);
    return t;
}

static void assert_same_bits(oj_tensor *a, oj_tensor *b) {
    int64_t n = oj_numel(a);
    assert_int_equal(n, oj_numel(b));
    size_t nb = (size_t)n * oj_dtype_size(oj_tensor_dtype(a));
    unsigned char *pa = malloc(nb), *pb = malloc(nb);
    assert_int_equal(oj_to_host(a, pa, nb), OJ_OK);
    assert_int_equal(oj_to_host(b, pb, nb), OJ_OK);
    assert_memory_equal(pa, pb, nb);
    free(pa);
    free(pb);
}

/* Consecutive positions from p give rotary_embedding(x, p)'s bits, forward
 * and backward; any positions give, row by row, rotary_embedding at that
 * row's position. */
static void test_rotary_at_matches_offset(void **state) {
    (void)state;
    int64_t shape[4] = {2, 3, 5, 8}, ps[1] = {5};
    oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
    for (int d = 0; d < 3; d++) {
        oj_tensor *x = randn(4, shape, dts[d]);
        int64_t pv[5] = {7, 8, 9, 10, 11};
        oj_tensor *pos = from_i64(1, ps, pv, 5);
        oj_tensor *a = oj_rotary_embedding_at(x, pos, 10000.0);
        oj_tensor *b = oj_rotary_embedding(x, 7, 10000.0);
        assert_non_null(a);
        assert_same_bits(a, b);
        int64_t qv[5] = {3, 0, 1000003, 5, 5};
        oj_tensor *pos2 = from_i64(1, ps, qv, 5);
        oj_tensor *c = oj_rotary_embedding_at(x, pos2, 500.0);
        for (int t = 0; t < 5; t++) {
            oj_tensor *xt = oj_narrow(x, 2, t, 1), *ct = oj_narrow(c, 2, t, 1);
            oj_tensor *want = oj_rotary_embedding(xt, qv[t], 500.0);
            oj_tensor *gc = oj_contiguous(ct);
            assert_same_bits(gc, want);
        }
    }
    /* the gradient: the offset op's bits */
    oj_tensor *x = randn(4, shape, OJ_F32), *w = randn(4, shape, OJ_F32);
    oj_tensor *x2 = oj_clone(x);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(x2, true);
    int64_t pv[5] = {2, 3, 4, 5, 6};
    oj_tensor *pos = from_i64(1, ps, pv, 5);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(oj_rotary_embedding_at(x, pos, 1e4), w)), false),
                     OJ_OK);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(oj_rotary_embedding(x2, 2, 1e4), w)), false),
                     OJ_OK);
    assert_same_bits(oj_grad(x), oj_grad(x2));
}

static oj_tensor *rot_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    return oj_rotary_embedding_at(in[0], (oj_tensor *)ctx, 50.0);
}

static void test_rotary_at_gradcheck(void **state) {
    (void)state;
    int64_t shape[3] = {2, 4, 6}, ps[1] = {4};
    oj_tensor *x = randn(3, shape, OJ_F64);
    oj_set_requires_grad(x, true);
    int32_t p32[4] = {9, 1, 4, 0};
    oj_tensor *pos = oj_from_host(eng, 1, ps, OJ_I32, p32, sizeof p32);
    assert_int_equal(oj_gradcheck(eng, rot_fn, pos, &x, 1, NULL), OJ_OK);
}

static void test_rotary_at_refusals(void **state) {
    (void)state;
    int64_t shape[4] = {1, 2, 3, 4}, ps[1] = {3}, p2[2] = {1, 3}, odd[4] = {1, 2, 3, 5};
    int64_t pv[3] = {0, 1, 2};
    oj_tensor *x = randn(4, shape, OJ_F32);
    oj_tensor *wrong = from_i64(1, (int64_t[]){2}, pv, 2);
    assert_null(oj_rotary_embedding_at(x, wrong, 1e4));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "positions must be [T] = [3]");
    oj_tensor *two_d = from_i64(2, p2, pv, 3);
    assert_null(oj_rotary_embedding_at(x, two_d, 1e4));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "positions");
    oj_tensor *fpos = oj_zeros(eng, 1, ps, OJ_F32);
    assert_null(oj_rotary_embedding_at(x, fpos, 1e4));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "positions");
    oj_tensor *pos = from_i64(1, ps, pv, 3);
    assert_null(oj_rotary_embedding_at(x, pos, 0.0));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "theta");
    oj_tensor *xo = randn(4, odd, OJ_F32);
    assert_null(oj_rotary_embedding_at(xo, pos, 1e4));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "D even");
    assert_null(oj_rotary_embedding_at(x, NULL, 1e4));
    oj_clear_error(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_index_copy_values, et_scope_in, et_scope_out),
        cmocka_unit_test_setup_teardown(test_index_copy_strided, et_scope_in, et_scope_out),
        cmocka_unit_test_setup_teardown(test_index_copy_refusals, et_scope_in, et_scope_out),
        cmocka_unit_test_setup_teardown(test_rotary_at_matches_offset, et_scope_in, et_scope_out),
        cmocka_unit_test_setup_teardown(test_rotary_at_gradcheck, et_scope_in, et_scope_out),
        cmocka_unit_test_setup_teardown(test_rotary_at_refusals, et_scope_in, et_scope_out),
    };
    return cmocka_run_group_tests(tests, et_setup, et_teardown_no_leaks);
}
