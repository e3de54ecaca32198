// test: printing matches PyTorch's repr (strings taken from torch 1.13)
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/ops.h"

static oj_engine *eng;

static int setup(void **state) {
    (void)state;
    if (oj_engine_create(NULL, &eng, NULL) != OJ_OK) return -1;
    return oj_scope_begin(eng) == OJ_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    return 0;
}

static void expect(oj_tensor *t, const char *want) {
    assert_non_null(t);
    char *s = oj_tensor_to_string(t);
    assert_non_null(s);
    assert_string_equal(s, want);
    free(s);
}

static oj_tensor *f32(int rank, const int64_t *shape, const float *v) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    return oj_from_host(eng, rank, shape, OJ_F32, v, (size_t)n * sizeof(float));
}

static void test_int_mode_floats(void **state) {
    (void)state;
    int64_t s[2] = {2, 2};
    expect(f32(2, s, (float[]){1, 2, 3, 4}), "tensor([[1., 2.],\n        [3., 4.]])");
    expect(oj_scalar(eng, 3, OJ_F32), "tensor(3.)");
    int64_t n4 = 4;
    expect(f32(1, &n4, (float[]){NAN, INFINITY, -0.0f, 2}), "tensor([nan, inf, -0., 2.])");
    int64_t s3[3] = {2, 3, 4};
    expect(oj_reshape(oj_arange(eng, 0, 24, 1, OJ_F32), 3, s3),
           "tensor([[[ 0.,  1.,  2.,  3.],\n"
           "         [ 4.,  5.,  6.,  7.],\n"
           "         [ 8.,  9., 10., 11.]],\n"
           "\n"
           "        [[12., 13., 14., 15.],\n"
           "         [16., 17., 18., 19.],\n"
           "         [20., 21., 22., 23.]]])");
}

static void test_fixed_and_sci(void **state) {
    (void)state;
    int64_t s[2] = {2, 2};
    expect(f32(2, s, (float[]){1.5f, 2, 3, 4}), "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])");
    int64_t n2 = 2;
    expect(f32(1, &n2, (float[]){0.001f, 1000.5f}), "tensor([1.0000e-03, 1.0005e+03])");
    expect(f32(1, &n2, (float[]){1e-5f, 1.0f}), "tensor([1.0000e-05, 1.0000e+00])");
    expect(f32(1, &n2, (float[]){123456789.0f, 1.0f}), "tensor([1.2346e+08, 1.0000e+00])");
    expect(oj_linspace(eng, 0, 1, 30, OJ_F32),
           "tensor([0.0000, 0.0345, 0.0690, 0.1034, 0.1379, 0.1724, 0.2069, 0.2414, 0.2759,\n"
           "        0.3103, 0.3448, 0.3793, 0.4138, 0.4483, 0.4828, 0.5172, 0.5517, 0.5862,\n"
           "        0.6207, 0.6552, 0.6897, 0.7241, 0.7586, 0.7931, 0.8276, 0.8621, 0.8966,\n"
           "        0.9310, 0.9655, 1.0000])");
}

static void test_summarised(void **state) {
    (void)state;
    expect(oj_arange(eng, 0, 2000, 1, OJ_F32),
           "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
           "        1.9990e+03])");
    int64_t s[2] = {40, 30};
    expect(oj_reshape(oj_arange(eng, 0, 1200, 1, OJ_I64), 2, s),
           "tensor([[   0,    1,    2,  ...,   27,   28,   29],\n"
           "        [  30,   31,   32,  ...,   57,   58,   59],\n"
           "        [  60,   61,   62,  ...,   87,   88,   89],\n"
           "        ...,\n"
           "        [1110, 1111, 1112,  ..., 1137, 1138, 1139],\n"
           "        [1140, 1141, 1142,  ..., 1167, 1168, 1169],\n"
           "        [1170, 1171, 1172,  ..., 1197, 1198, 1199]])");
}

static void test_integers_bools_dtypes(void **state) {
    (void)state;
    int64_t n3 = 3, n2 = 2, n1 = 1;
    int64_t iv[3] = {1, 2, -300};
    expect(oj_from_host(eng, 1, &n3, OJ_I64, iv, sizeof iv), "tensor([   1,    2, -300])");
    uint8_t bv[2] = {1, 0};
    expect(oj_from_host(eng, 1, &n2, OJ_BOOL, bv, sizeof bv), "tensor([ True, False])");
    double dv[2] = {1, 2};
    expect(oj_from_host(eng, 1, &n2, OJ_F64, dv, sizeof dv), "tensor([1., 2.], dtype=f64)");
    oj_tensor *h = oj_zeros(eng, 1, &n2, OJ_BF16);
    oj_tensor *src = oj_from_host(eng, 1, &n2, OJ_F64, (double[]){0.5, 2.25}, 16);
    assert_int_equal(oj_copy_(h, src), OJ_OK);
    expect(h, "tensor([0.5000, 2.2500], dtype=bf16)");
    int32_t five = 5;
    expect(oj_from_host(eng, 1, &n1, OJ_I32, &five, 4), "tensor([5], dtype=i32)");
}

static void test_empty_and_grad(void **state) {
    (void)state;
    int64_t z = 0, s[2] = {2, 0}, n3 = 3;
    expect(oj_zeros(eng, 1, &z, OJ_F32), "tensor([])");
    expect(oj_zeros(eng, 2, s, OJ_F32), "tensor([], size=(2, 0))");
    expect(oj_zeros(eng, 1, &z, OJ_I64), "tensor([], dtype=i64)");
    expect(oj_set_requires_grad(oj_ones(eng, 1, &n3, OJ_F32), true),
           "tensor([1., 1., 1.], requires_grad=True)");
}

static void test_strided_input(void **state) {
    (void)state;
    int64_t s[2] = {2, 2};
    oj_tensor *t = oj_transpose(f32(2, s, (float[]){1, 2, 3, 4}), 0, 1);
    expect(t, "tensor([[1., 3.],\n        [2., 4.]])");
    assert_null(oj_tensor_to_string(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int_mode_floats),  cmocka_unit_test(test_fixed_and_sci),
        cmocka_unit_test(test_summarised),       cmocka_unit_test(test_integers_bools_dtypes),
        cmocka_unit_test(test_empty_and_grad),   cmocka_unit_test(test_strided_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
