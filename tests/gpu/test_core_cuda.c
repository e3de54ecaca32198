// test: core on a CUDA engine agrees with the CPU engine (creation, host
// transfers, copies, views, RNG, budget, detect-anomaly). Skips (77)
// without a GPU.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/ops.h"

static oj_engine *gpu, *cpu;

static int setup(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.seed = 99;
    if (oj_engine_create(&c, &cpu, NULL) != OJ_OK) return -1;
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    if (oj_engine_create(&c, &gpu, NULL) != OJ_OK) return -1;
    oj_scope_begin(gpu);
    oj_scope_begin(cpu);
    return 0;
}
static int teardown(void **state) {
    (void)state;
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_scope_end(gpu);
    oj_scope_end(cpu);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_trim_pool(gpu);
    assert_int_equal(oj_budget_current(oj_engine_budget(gpu)), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
    return 0;
}

static void same(oj_tensor *g, oj_tensor *c) {
    assert_non_null(g);
    assert_non_null(c);
    assert_int_equal(oj_tensor_device(g).type, OJ_DEVICE_CUDA);
    assert_int_equal(oj_numel(g), oj_numel(c));
    size_t nb = (size_t)oj_numel(c) * oj_dtype_size(oj_tensor_dtype(c));
    void *a = malloc(nb + 1), *b = malloc(nb + 1);
    assert_int_equal(oj_to_host(g, a, nb), OJ_OK);
    assert_int_equal(oj_to_host(c, b, nb), OJ_OK);
    assert_memory_equal(a, b, nb);
    free(a);
    free(b);
}

static void test_creation_matches_cpu(void **state) {
    (void)state;
    int64_t s[2] = {3, 5};
    same(oj_zeros(gpu, 2, s, OJ_F32), oj_zeros(cpu, 2, s, OJ_F32));
    same(oj_full(gpu, 2, s, OJ_BF16, 1.5), oj_full(cpu, 2, s, OJ_BF16, 1.5));
    same(oj_arange(gpu, 0, 100, 3, OJ_I64), oj_arange(cpu, 0, 100, 3, OJ_I64));
    same(oj_linspace(gpu, -1, 1, 9, OJ_F32), oj_linspace(cpu, -1, 1, 9, OJ_F32));
    same(oj_eye(gpu, 4, 6, OJ_F64), oj_eye(cpu, 4, 6, OJ_F64));
    float v[15];
    for (int i = 0; i < 15; i++) v[i] = (float)i * 0.5f;
    oj_tensor *g = oj_from_host(gpu, 2, s, OJ_F32, v, sizeof v);
    oj_tensor *c = oj_from_host(cpu, 2, s, OJ_F32, v, sizeof v);
    same(g, c);
    assert_null(oj_data_ptr(g)); /* no host pointer for device tensors */
    assert_true(oj_item_at(g, 7) == 3.5);
}

static void test_rng_same_on_both_devices(void **state) {
    (void)state;
    int64_t s[2] = {33, 17};
    same(oj_rand_uniform(gpu, 2, s, OJ_F32, -1, 1), oj_rand_uniform(cpu, 2, s, OJ_F32, -1, 1));
    same(oj_rand_normal(gpu, 2, s, OJ_BF16, 0, 1), oj_rand_normal(cpu, 2, s, OJ_BF16, 0, 1));
    assert_int_equal(oj_rng_offset(gpu), oj_rng_offset(cpu));
}

static void test_views_copies(void **state) {
    (void)state;
    int64_t s[3] = {2, 3, 4};
    oj_tensor *g = oj_reshape(oj_arange(gpu, 0, 24, 1, OJ_F32), 3, s);
    oj_tensor *c = oj_reshape(oj_arange(cpu, 0, 24, 1, OJ_F32), 3, s);
    int perm[3] = {2, 0, 1};
    same(oj_permute(g, 3, perm), oj_permute(c, 3, perm));
    same(oj_contiguous(oj_transpose(g, 0, 2)), oj_contiguous(oj_transpose(c, 0, 2)));
    same(oj_clone(oj_slice(g, 2, 1, 4, 2)), oj_clone(oj_slice(c, 2, 1, 4, 2)));
    /* copy_ with broadcast and cast, fill_ through a view */
    oj_tensor *gd = oj_zeros(gpu, 3, s, OJ_F16), *cd = oj_zeros(cpu, 3, s, OJ_F16);
    oj_tensor *gr = oj_select(oj_select(g, 0, 1), 0, 2), *cr = oj_select(oj_select(c, 0, 1), 0, 2);
    assert_int_equal(oj_copy_(gd, gr), OJ_OK);
    assert_int_equal(oj_copy_(cd, cr), OJ_OK);
    same(gd, cd);
    assert_int_equal(oj_fill_(oj_narrow(gd, 1, 1, 1), -3), OJ_OK);
    assert_int_equal(oj_fill_(oj_narrow(cd, 1, 1, 1), -3), OJ_OK);
    same(gd, cd);
    char *str = oj_tensor_to_string(oj_select(oj_select(gd, 0, 0), 0, 1));
    assert_string_equal(str, "tensor([-3., -3., -3., -3.], device='cuda:0', dtype=f16)");
    free(str);
}

static void test_budget_before_driver(void **state) {
    (void)state;
    oj_budget *b = oj_budget_create(oj_engine_budget(gpu), "small", 1 << 20);
    oj_budget *prev = oj_engine_use_budget(gpu, b);
    int64_t big = 1 << 20; /* 4 MiB of f32 */
    assert_null(oj_empty(gpu, 1, &big, OJ_F32));
    assert_int_equal(oj_last_status(gpu), OJ_ERR_CAPACITY);
    assert_non_null(strstr(oj_last_error(gpu), "small"));
    oj_clear_error(gpu);
    int64_t ok = 1000;
    oj_tensor *t = oj_empty(gpu, 1, &ok, OJ_F32);
    assert_non_null(t);
    assert_int_equal(oj_budget_current(b), 4096);
    oj_release(t);
    assert_int_equal(oj_budget_current(b), 0);
    oj_engine_use_budget(gpu, prev);
    assert_int_equal(oj_budget_free(b), OJ_OK);
}

/* detect-anomaly on the device: the first non-finite output is named, as
 * on the CPU; a finite op passes. */
static void test_detect_anomaly(void **state) {
    (void)state;
    oj_set_detect_anomaly(gpu, true);
    float v[4] = {1.0f, 2.0f, -3.0f, 4.0f};
    int64_t n = 4;
    oj_tensor *x = oj_from_host(gpu, 1, &n, OJ_F32, v, sizeof v);
    oj_set_requires_grad(x, true);
    assert_non_null(oj_exp(x));
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_tensor *y = oj_sqrt(x); /* sqrt(-3): NaN */
    (void)y;
    assert_int_equal(oj_last_status(gpu), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_last_error(gpu), "output 0 of sqrt"));
    assert_non_null(strstr(oj_last_error(gpu), "NaN"));
    oj_clear_error(gpu);
    oj_set_detect_anomaly(gpu, false);
}

int main(void) {
    oj_engine_config c = oj_engine_config_default();
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *probe = NULL;
    oj_error err = {0};
    if (oj_engine_create(&c, &probe, &err) != OJ_OK) {
        printf("SKIP: no usable CUDA device: %s\n", err.message);
        return 77;
    }
    oj_engine_free(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_creation_matches_cpu),
        cmocka_unit_test(test_rng_same_on_both_devices),
        cmocka_unit_test(test_views_copies),
        cmocka_unit_test(test_budget_before_driver),
        cmocka_unit_test(test_detect_anomaly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
