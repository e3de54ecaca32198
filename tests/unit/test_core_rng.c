// test: Philox4x32-10 known answers (Random123 kat_vectors), counter-based
// reproducibility and the statistics of uniform and normal tensors
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"

static oj_engine *eng;

static int setup(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.seed = 42;
    if (oj_engine_create(&c, &eng, NULL) != OJ_OK) return -1;
    return oj_scope_begin(eng) == OJ_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    return 0;
}

static void test_known_answers(void **state) {
    (void)state;
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        oj_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int k = 0; k < 4; k++) assert_int_equal(out[k], kat[i].out[k]);
    }
}

/* Element i of an f32 uniform tensor is a pure function of (seed, offset, i). */
static void test_elements_from_counter(void **state) {
    (void)state;
    oj_rng_set_seed(eng, 0x0123456789abcdefull);
    oj_rng_set_offset(eng, 1000);
    int64_t n = 10;
    oj_tensor *t = oj_rand_uniform(eng, 1, &n, OJ_F32, 0, 1);
    assert_non_null(t);
    assert_int_equal(oj_rng_offset(eng), 1000 + 3); /* ceil(10 / 4) blocks */
    float v[10];
    oj_to_host(t, v, sizeof v);
    for (int i = 0; i < 10; i++) {
        uint64_t blk = 1000 + (uint64_t)i / 4;
        uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), 0, 0};
        uint32_t key[2] = {0x89abcdefu, 0x01234567u}, out[4];
        oj_philox4x32_10(ctr, key, out);
        assert_true(v[i] == (float)((out[i % 4] >> 8) * 0x1p-24));
    }
}

/* A tensor of n elements equals the first n of a longer one drawn from the
 * same offset: the layout does not depend on the size of the request (nor
 * on a thread count, since each element is computed from its index). */
static void test_prefix_property(void **state) {
    (void)state;
    const oj_dtype dts[4] = {OJ_F32, OJ_F64, OJ_BF16, OJ_F16};
    for (int k = 0; k < 4; k++)
        for (int normal = 0; normal < 2; normal++) {
            int64_t n = 1001, m = 5003;
            oj_rng_set_offset(eng, 77);
            oj_tensor *a = normal ? oj_rand_normal(eng, 1, &n, dts[k], 1, 2)
                                  : oj_rand_uniform(eng, 1, &n, dts[k], -3, 5);
            uint64_t after_a = oj_rng_offset(eng);
            oj_rng_set_offset(eng, 77);
            oj_tensor *b = normal ? oj_rand_normal(eng, 1, &m, dts[k], 1, 2)
                                  : oj_rand_uniform(eng, 1, &m, dts[k], -3, 5);
            assert_non_null(a);
            assert_non_null(b);
            assert_true(oj_rng_offset(eng) >= after_a);
            size_t es = oj_dtype_size(dts[k]);
            assert_memory_equal(oj_data_ptr(a), oj_data_ptr(b), (size_t)n * es);
            /* the next call continues after the blocks used: no overlap */
            oj_rng_set_offset(eng, after_a);
            oj_tensor *c = normal ? oj_rand_normal(eng, 1, &n, dts[k], 1, 2)
                                  : oj_rand_uniform(eng, 1, &n, dts[k], -3, 5);
            assert_memory_not_equal(oj_data_ptr(a), oj_data_ptr(c), (size_t)n * es);
            /* shape does not matter, only the element count */
            int64_t s2[2] = {7, 143};
            oj_rng_set_offset(eng, 77);
            oj_tensor *d = normal ? oj_rand_normal(eng, 2, s2, dts[k], 1, 2)
                                  : oj_rand_uniform(eng, 2, s2, dts[k], -3, 5);
            assert_memory_equal(oj_data_ptr(a), oj_data_ptr(d), (size_t)n * es);
        }
}

static void test_seed_reproducible(void **state) {
    (void)state;
    int64_t n = 64;
    oj_rng_set_seed(eng, 5);
    oj_tensor *a = oj_rand_normal(eng, 1, &n, OJ_F32, 0, 1);
    oj_rng_set_seed(eng, 5);
    assert_int_equal(oj_rng_offset(eng), 0);
    oj_tensor *b = oj_rand_normal(eng, 1, &n, OJ_F32, 0, 1);
    oj_rng_set_seed(eng, 6);
    oj_tensor *c = oj_rand_normal(eng, 1, &n, OJ_F32, 0, 1);
    assert_memory_equal(oj_data_ptr(a), oj_data_ptr(b), 256);
    assert_memory_not_equal(oj_data_ptr(a), oj_data_ptr(c), 256);
    assert_int_equal(oj_engine_seed(eng), 6);
}

static void moments(oj_tensor *t, double *mean, double *sd, double *mn, double *mx) {
    int64_t n = oj_numel(t);
    double s = 0, s2 = 0;
    *mn = INFINITY;
    *mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = oj_item_at(t, i);
        s += v;
        s2 += v * v;
        if (v < *mn) *mn = v;
        if (v > *mx) *mx = v;
    }
    *mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
}

static void test_statistics(void **state) {
    (void)state;
    int64_t n = 1 << 20;
    double mean, sd, mn, mx;
    /* N(0, 1): standard error of the mean 0.001, of the std ~0.0007 */
    oj_tensor *z = oj_rand_normal(eng, 1, &n, OJ_F32, 0, 1);
    moments(z, &mean, &sd, &mn, &mx);
    assert_true(fabs(mean) < 0.005);
    assert_true(fabs(sd - 1) < 0.005);
    assert_true(mn < -4 && mx > 4);
    /* N(3, 0.5^2) in f64 */
    oj_tensor *y = oj_rand_normal(eng, 1, &n, OJ_F64, 3, 0.5);
    moments(y, &mean, &sd, &mn, &mx);
    assert_true(fabs(mean - 3) < 0.0025);
    assert_true(fabs(sd - 0.5) < 0.0025);
    /* U[-2, 6): mean 2, std 8/sqrt(12) */
    const oj_dtype dts[4] = {OJ_F32, OJ_F64, OJ_BF16, OJ_F16};
    for (int k = 0; k < 4; k++) {
        oj_tensor *u = oj_rand_uniform(eng, 1, &n, dts[k], -2, 6);
        moments(u, &mean, &sd, &mn, &mx);
        assert_true(fabs(mean - 2) < 0.02);
        assert_true(fabs(sd - 8 / sqrt(12)) < 0.02);
        assert_true(mn >= -2 && mx < 6);
    }
    /* a range that rounds up to `high` in bf16 still stays below it */
    oj_tensor *u = oj_rand_uniform(eng, 1, &n, OJ_BF16, 255, 256);
    moments(u, &mean, &sd, &mn, &mx);
    assert_true(mn >= 255 && mx < 256);
}

static void test_bad_arguments(void **state) {
    (void)state;
    int64_t n = 4;
    assert_null(oj_rand_uniform(eng, 1, &n, OJ_I32, 0, 1));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    assert_null(oj_rand_uniform(eng, 1, &n, OJ_F32, 1, 1));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_null(oj_rand_normal(eng, 1, &n, OJ_F32, 0, -1));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_null(oj_rand_normal(NULL, 1, &n, OJ_F32, 0, 1));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),     cmocka_unit_test(test_elements_from_counter),
        cmocka_unit_test(test_prefix_property),   cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_statistics),        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
