// test: core on a CUDA engine agrees with the CPU engine (creation, host
// transfers, copies, views, RNG, budget, detect-anomaly, CUDA graphs).
// Skips (77)
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
#include "core/internal.h"
#include "gpu_testutil.h"

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

/* ---------------------------------------------------------------- graphs */

static void to_floats(oj_tensor *t, float *out, size_t n) {
    assert_int_equal(oj_to_host(t, out, n * sizeof *out), OJ_OK);
}

/* A captured sequence (matmul, add, tanh, a reduction) replays to what the
 * same ops give eagerly, again after new inputs are copied in; nothing runs
 * at capture time; the graph's pool goes back to the budget when freed. */
static void test_graph_capture_replay(void **state) {
    (void)state;
    float av[6] = {1, -2, 3, 0.5f, -1, 2}, bv[6] = {0.25f, 1, -1, 2, 3, -0.5f};
    int64_t sa[2] = {2, 3}, sb[2] = {3, 2};
    oj_tensor *a = oj_from_host(gpu, 2, sa, OJ_F32, av, sizeof av);
    oj_tensor *b = oj_from_host(gpu, 2, sb, OJ_F32, bv, sizeof bv);
    assert_int_equal(oj_graph_capturing(gpu), false);
    assert_int_equal(oj_graph_capture_begin(gpu), OJ_OK);
    assert_true(oj_graph_capturing(gpu));
    oj_tensor *c = oj_matmul(a, b); /* [2, 2] */
    oj_tensor *an = oj_narrow(a, 1, 0, 2);
    oj_tensor *cs = oj_add(c, an);
    oj_tensor *d = oj_tanh(cs);
    oj_tensor *s = oj_sum_all(d);
    assert_non_null(s);
    oj_graph *g = oj_graph_capture_end(gpu);
    assert_non_null(g);
    assert_false(oj_graph_capturing(gpu));
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* new inputs, same tensors */
            for (int i = 0; i < 6; i++) av[i] = -0.5f * av[i] + 0.125f * (float)i;
            assert_int_equal(oj_copy_from_host(a, av, sizeof av), OJ_OK);
        }
        assert_int_equal(oj_graph_replay(g), OJ_OK);
        oj_tensor *ca = oj_from_host(cpu, 2, sa, OJ_F32, av, sizeof av);
        oj_tensor *cb = oj_from_host(cpu, 2, sb, OJ_F32, bv, sizeof bv);
        oj_tensor *cd = oj_tanh(oj_add(oj_matmul(ca, cb), oj_narrow(ca, 1, 0, 2)));
        float got[4], want[4], gs, ws;
        to_floats(d, got, 4);
        to_floats(cd, want, 4);
        for (int i = 0; i < 4; i++) assert_float_equal(got[i], want[i], 1e-6);
        to_floats(s, &gs, 1);
        to_floats(oj_sum_all(cd), &ws, 1);
        assert_float_equal(gs, ws, 1e-5);
    }
    /* the graph's pool stays reserved (trimming leaves it) until the graph
     * is freed: then its blocks go back */
    oj_tensor *made[] = {c, an, cs, d, s};
    for (int i = 0; i < 5; i++) oj_release(made[i]);
    oj_engine_trim_pool(gpu);
    int64_t held = oj_budget_current(oj_engine_budget(gpu));
    oj_graph_free(g);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    assert_true(oj_budget_current(oj_engine_budget(gpu)) < held);
}

/* A read-back during a capture is refused by name and abandons the
 * capture; the engine works on afterwards. Random draws too. */
static void test_graph_refusals(void **state) {
    (void)state;
    float v[3] = {1, 2, 3};
    int64_t n = 3;
    oj_tensor *x = oj_from_host(gpu, 1, &n, OJ_F32, v, sizeof v);
    assert_int_equal(oj_graph_capture_begin(gpu), OJ_OK);
    assert_int_equal(oj_graph_capture_begin(gpu), OJ_ERR_INVALID_ARGUMENT); /* nested */
    oj_clear_error(gpu);
    oj_tensor *y = oj_mul_scalar(x, 2.0);
    double item = oj_item(oj_sum_all(y));
    assert_true(isnan(item));
    assert_int_equal(oj_last_status(gpu), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(oj_last_error(gpu), "CUDA graph capture"));
    assert_null(oj_graph_capture_end(gpu));
    assert_false(oj_graph_capturing(gpu));
    oj_clear_error(gpu);
    assert_null(oj_graph_capture_end(gpu)); /* none running */
    assert_int_equal(oj_last_status(gpu), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(gpu);
    /* dropout draws random numbers: refused */
    assert_int_equal(oj_graph_capture_begin(gpu), OJ_OK);
    oj_dropout(x, 0.5, true);
    assert_null(oj_graph_capture_end(gpu));
    assert_non_null(strstr(oj_last_error(gpu), "random numbers"));
    oj_clear_error(gpu);
    /* the engine still computes */
    assert_float_equal(oj_item(oj_sum_all(oj_mul_scalar(x, 2.0))), 12.0, 0);
}

/* An embedding's index check runs at each replay: a bad index copied in
 * after the capture fails the replay with the eager op's message. */
static void test_graph_deferred_index_check(void **state) {
    (void)state;
    int64_t ws[2] = {5, 4}, n = 3;
    oj_tensor *w = oj_rand_normal(gpu, 2, ws, OJ_F32, 0.0, 1.0);
    int64_t iv[3] = {0, 4, 2};
    oj_tensor *idx = oj_from_host(gpu, 1, &n, OJ_I64, iv, sizeof iv);
    assert_int_equal(oj_graph_capture_begin(gpu), OJ_OK);
    oj_tensor *e = oj_embedding(w, idx);
    oj_graph *g = oj_graph_capture_end(gpu);
    assert_non_null(g);
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    float row[4], want[4];
    to_floats(oj_select(e, 0, 1), row, 4);
    to_floats(oj_select(w, 0, 4), want, 4);
    assert_memory_equal(row, want, sizeof row);
    iv[2] = 7;
    assert_int_equal(oj_copy_from_host(idx, iv, sizeof iv), OJ_OK);
    assert_int_equal(oj_graph_replay(g), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(gpu), "index 7 at position 2"));
    oj_clear_error(gpu);
    iv[2] = 3;
    assert_int_equal(oj_copy_from_host(idx, iv, sizeof iv), OJ_OK);
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    /* the two halves (the trainer's): the launch returns at once, the
     * checks report what the replay would have */
    iv[1] = 9;
    assert_int_equal(oj_copy_from_host(idx, iv, sizeof iv), OJ_OK);
    assert_int_equal(oj__graph_launch(g), OJ_OK);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    assert_int_equal(oj__graph_checks(g), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(gpu), "index 9 at position 1"));
    oj_clear_error(gpu);
    iv[1] = 1;
    assert_int_equal(oj_copy_from_host(idx, iv, sizeof iv), OJ_OK);
    assert_int_equal(oj__graph_launch(g), OJ_OK);
    assert_int_equal(oj__graph_checks(g), OJ_OK);
    to_floats(oj_select(e, 0, 1), row, 4);
    to_floats(oj_select(w, 0, 1), want, 4);
    assert_memory_equal(row, want, sizeof row);
    oj_graph_free(g);
}

/* An engine freed with a graph still alive frees the graph and its pool
 * (as it frees leftover tensors). */
static void test_graph_freed_with_engine(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(&c, &e, NULL), OJ_OK);
    int64_t n = 1024;
    oj_tensor *x = oj_ones(e, 1, &n, OJ_F32);
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    oj_tensor *y = oj_mul_scalar(x, 3.0);
    oj_graph *g = oj_graph_capture_end(e);
    assert_non_null(g);
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    assert_float_equal(oj_item_at(y, 7), 3.0, 0);
    oj_engine_free(e); /* x, y and g still alive */
}

/* The graph's pool with virtual memory (OJAS_CUDA_VMM=1, the default; 0:
 * size classes): a block released during the capture serves two smaller ones
 * (the pool peaks at the largest live set, not the sum of the classes),
 * the ranges live at once never overlap and replay to the right values,
 * and after the graph is freed a range still held keeps its memory (and
 * values) until it is released. */
static void pool_case(bool vmm) {
    setenv("OJAS_CUDA_VMM", vmm ? "1" : "0", 1);
    const int64_t n = 2 << 20, half = n / 2; /* 8 MiB of f32 */
    oj_tensor *x = oj_rand_normal(gpu, 1, &n, OJ_F32, 0.0, 1.0);
    float *xv = malloc((size_t)n * sizeof *xv), *got = malloc((size_t)half * sizeof *got);
    assert_non_null(xv);
    assert_non_null(got);
    to_floats(x, xv, (size_t)n);
    oj_budget *root = oj_engine_budget(gpu);
    oj_engine_trim_pool(gpu);
    const int64_t base = oj_budget_current(root);
    oj_budget_reset_peak(root);
    assert_int_equal(oj_graph_capture_begin(gpu), OJ_OK);
    oj_tensor *a = oj_mul_scalar(x, 2.0);
    assert_non_null(a);
    oj_release(a);
    oj_tensor *b = oj_mul_scalar(oj_narrow(x, 0, 0, half), 3.0);
    oj_tensor *c = oj_mul_scalar(oj_narrow(x, 0, half, half), 4.0);
    assert_non_null(b);
    assert_non_null(c);
    oj_graph *g = oj_graph_capture_end(gpu);
    assert_non_null(g);
    const bool ranged = b->storage->pool_class == OJ_POOL_RANGE;
    assert_true(ranged == vmm); /* the H200s here map memory */
    const char *pb = (const char *)b->storage->data, *pc = (const char *)c->storage->data;
    assert_true(pb + b->storage->capacity <= pc || pc + c->storage->capacity <= pb);
    if (vmm) /* a's 8 MiB hold b and c; at most one granule above */
        assert_true(oj_budget_peak(root) - base <= (int64_t)(10u << 20));
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    to_floats(b, got, (size_t)half);
    for (int64_t i = 0; i < half; i++) assert_true(got[i] == 3.0f * xv[i]);
    to_floats(c, got, (size_t)half);
    for (int64_t i = 0; i < half; i++) assert_true(got[i] == 4.0f * xv[half + i]);
    oj_release(c);
    oj_graph_free(g);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_engine_trim_pool(gpu);
    assert_true(oj_budget_current(root) > base); /* b's memory is still there */
    to_floats(b, got, (size_t)half);
    for (int64_t i = 0; i < half; i++) assert_true(got[i] == 3.0f * xv[i]);
    oj_release(b);
    oj_engine_trim_pool(gpu);
    assert_int_equal(oj_budget_current(root), base);
    oj_release(x);
    free(xv);
    free(got);
    unsetenv("OJAS_CUDA_VMM");
}

static void test_graph_pool_ranges(void **state) {
    (void)state;
    pool_case(true);
    pool_case(false);
}

int main(void) {
    if (gpu_test_probe(false, NULL) != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_creation_matches_cpu),
        cmocka_unit_test(test_rng_same_on_both_devices),
        cmocka_unit_test(test_views_copies),
        cmocka_unit_test(test_budget_before_driver),
        cmocka_unit_test(test_detect_anomaly),
        cmocka_unit_test(test_graph_capture_replay),
        cmocka_unit_test(test_graph_refusals),
        cmocka_unit_test(test_graph_deferred_index_check),
        cmocka_unit_test(test_graph_freed_with_engine),
        cmocka_unit_test(test_graph_pool_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
