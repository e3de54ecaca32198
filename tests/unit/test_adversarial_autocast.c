// test: adversarial inputs to autocast (oj_set_autocast and the ops that
// take part), the fused oj_linear_cross_entropy, gradient dtype casting in
// backward, the optimizer under autocast, and the trainer's `dtype` key
// (parsing, validation, bit-identical resume of a bf16 run). Every bad
// input gives a named OJ_ERR_* status and message, leaves the engine sane
// (grad mode, autocast state) and leaks no tensor.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"
#include "ojas/optim.h"
#include "engine_testutil.h"
#include "train_testutil.h"

/* Per-case setup: a scope for the case's intermediates. */
static int ac_in(void **state) {
    (void)state;
    return oj_scope_begin(eng) == OJ_OK ? 0 : -1;
}
/* Per-case teardown: autocast off again, the engine's error cleared, the
 * scope closed, and every tensor the case made is gone. */
static int ac_reset(void **state) {
    (void)state;
    oj_set_autocast(eng, false, OJ_BF16);
    oj_set_grad_enabled(eng, true);
    oj_clear_error(eng);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    return 0;
}

static oj_tensor *randn(int rank, const int64_t *shape, oj_dtype dt) {
    oj_tensor *t = oj_rand_normal(eng, rank, shape, OJ_F32, 0.0, 1.0);
    if (dt == OJ_F32) return t;
    oj_tensor *c = oj_cast(t, dt);
    oj_release(t);
    return c;
}

static oj_tensor *targets_i64(int n, const int64_t *v) {
    return oj_from_host(eng, 1, (int64_t[]){n}, OJ_I64, v, (size_t)n * sizeof *v);
}

static bool all_finite(oj_tensor *t) {
    for (int64_t i = 0; i < oj_numel(t); i++)
        if (!isfinite(oj_item_at(t, i))) return false;
    return true;
}

static bool all_zero(oj_tensor *t) {
    for (int64_t i = 0; i < oj_numel(t); i++)
        if (oj_item_at(t, i) != 0.0) return false;
    return true;
}

/* ------------------------------------------------------------ set_autocast */

/* A dtype other than bf16/f16 is OJ_ERR_DTYPE naming it, and changes
 * neither the on/off state nor the dtype; NULL engines do not crash. */
static void test_set_autocast_bad_dtype(void **state) {
    (void)state;
    assert_false(oj_set_autocast(eng, true, OJ_F16));
    oj_dtype bad[] = {OJ_F32, OJ_F64, OJ_I64, OJ_BOOL, (oj_dtype)99, (oj_dtype)-1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_true(oj_set_autocast(eng, true, bad[i])); /* returns the previous state */
        assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
        assert_non_null(strstr(oj_last_error(eng), "set_autocast"));
        oj_clear_error(eng);
        assert_true(oj_autocast_enabled(eng));
        assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    }
    /* turning it off needs no valid dtype and keeps the dtype */
    assert_true(oj_set_autocast(eng, false, (oj_dtype)99));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_false(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    /* NULL engine */
    assert_false(oj_set_autocast(NULL, true, OJ_BF16));
    assert_false(oj_autocast_enabled(NULL));
    assert_int_equal(oj_autocast_dtype(NULL), OJ_BF16);
    oj_set_autocast(eng, true, OJ_BF16);
}

/* Nested set/unset: each call returns the previous state, so a caller can
 * restore it; the dtype of the outer region survives an inner region. */
static void test_set_autocast_nesting(void **state) {
    (void)state;
    assert_false(oj_set_autocast(eng, true, OJ_F16));
    bool p1 = oj_set_autocast(eng, false, OJ_BF16);
    assert_true(p1);
    bool p2 = oj_set_autocast(eng, true, OJ_F16);
    assert_false(p2);
    oj_set_autocast(eng, p2, OJ_F16);
    assert_false(oj_autocast_enabled(eng));
    oj_set_autocast(eng, p1, oj_autocast_dtype(eng));
    assert_true(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    oj_tensor *a = randn(2, (int64_t[]){3, 4}, OJ_F32), *b = randn(2, (int64_t[]){4, 2}, OJ_F32);
    oj_tensor *c = oj_matmul(a, b);
    assert_int_equal(oj_tensor_dtype(c), OJ_F16);
    oj_release(c);
    oj_release(a);
    oj_release(b);
}

/* ------------------------------------------------------- autocast x dtypes */

/* f64 is never cast: an f64 matmul under autocast is bit-identical to the
 * same matmul with autocast off. */
static void test_autocast_leaves_f64_alone(void **state) {
    (void)state;
    oj_tensor *a = randn(2, (int64_t[]){5, 7}, OJ_F64), *b = randn(2, (int64_t[]){7, 3}, OJ_F64);
    oj_tensor *ref = oj_matmul(a, b);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *got = oj_matmul(a, b);
    oj_tensor *sm = oj_softmax(a, 1);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(got), OJ_F64);
    assert_int_equal(oj_tensor_dtype(sm), OJ_F64);
    for (int64_t i = 0; i < oj_numel(ref); i++)
        assert_true(oj_item_at(ref, i) == oj_item_at(got, i));
    oj_tensor *ts[] = {a, b, ref, got, sm};
    for (size_t i = 0; i < 5; i++) oj_release(ts[i]);
}

/* Integer inputs are never cast: cross_entropy on integer logits is still
 * OJ_ERR_DTYPE naming the logits, under autocast as without it. */
static void test_autocast_integer_inputs(void **state) {
    (void)state;
    int64_t v[6] = {1, 2, 3, 4, 5, 6}, tv[2] = {0, 1};
    oj_tensor *xi = oj_from_host(eng, 2, (int64_t[]){2, 3}, OJ_I64, v, sizeof v);
    oj_tensor *t = targets_i64(2, tv);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_cross_entropy(xi, t, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "logits");
    oj_tensor *w = randn(2, (int64_t[]){4, 3}, OJ_F32);
    assert_null(oj_linear_cross_entropy(xi, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "linear_cross_entropy");
    assert_true(oj_autocast_enabled(eng));
    oj_set_autocast(eng, false, OJ_BF16);
    oj_release(w);
    oj_release(t);
    oj_release(xi);
}

/* An error inside an autocast op (shapes that do not fit) names the op and
 * the shapes, releases the casts, and leaves autocast on and usable. */
static void test_autocast_error_inside_op(void **state) {
    (void)state;
    oj_tensor *a = randn(2, (int64_t[]){3, 4}, OJ_F32), *b = randn(2, (int64_t[]){5, 2}, OJ_F32);
    oj_set_requires_grad(a, true);
    int64_t live = oj_engine_live_tensors(eng);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_matmul(a, b));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "[3, 4]");
    assert_int_equal(oj_engine_live_tensors(eng), live); /* the casts are gone */
    assert_true(oj_autocast_enabled(eng));
    assert_true(oj_grad_enabled(eng));
    oj_tensor *b2 = randn(2, (int64_t[]){4, 2}, OJ_F32);
    oj_tensor *c = oj_matmul(a, b2);
    assert_non_null(c);
    assert_int_equal(oj_tensor_dtype(c), OJ_BF16);
    oj_set_autocast(eng, false, OJ_BF16);
    oj_release(c);
    oj_release(b2);
    oj_release(a);
    oj_release(b);
}

/* A released input under autocast: OJ_ERR_INVALID_ARGUMENT "released",
 * not a crash or a cast of freed memory; the live input's cast is freed. */
static void test_autocast_released_input(void **state) {
    (void)state;
    oj_tensor *a = randn(2, (int64_t[]){3, 4}, OJ_F32), *b = randn(2, (int64_t[]){4, 2}, OJ_F32);
    oj_release(b);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_matmul(a, b));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_null(oj_linear_cross_entropy(a, b, a, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    oj_set_autocast(eng, false, OJ_BF16);
    oj_release(a);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

/* Inputs of two engines under autocast: OJ_ERR_DEVICE "different
 * engines" whichever engine has autocast on, and nothing leaks on either. */
static void test_autocast_two_engines(void **state) {
    (void)state;
    oj_engine *e2 = NULL;
    assert_int_equal(oj_engine_create(NULL, &e2, NULL), OJ_OK);
    oj_tensor *a = randn(2, (int64_t[]){3, 4}, OJ_F32);
    oj_tensor *b = oj_ones(e2, 2, (int64_t[]){4, 2}, OJ_F32);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_matmul(a, b));
    ET_EXPECT_ERR_HAS(OJ_ERR_DEVICE, "different engines");
    assert_null(oj_matmul(b, a)); /* e2 reports; autocast is off there */
    assert_int_equal(oj_last_status(e2), OJ_ERR_DEVICE);
    oj_clear_error(e2);
    oj_set_autocast(eng, false, OJ_BF16);
    oj_set_autocast(e2, true, OJ_BF16);
    assert_null(oj_matmul(b, a));
    assert_int_equal(oj_last_status(e2), OJ_ERR_DEVICE);
    assert_non_null(strstr(oj_last_error(e2), "different engines"));
    oj_release(b);
    assert_int_equal(oj_engine_live_tensors(e2), 0);
    oj_engine_free(e2);
    oj_release(a);
}

/* Under no_grad the autocast casts record nothing. */
static void test_autocast_no_grad(void **state) {
    (void)state;
    oj_tensor *a = randn(2, (int64_t[]){3, 4}, OJ_F32), *w = randn(2, (int64_t[]){2, 4}, OJ_F32);
    oj_set_requires_grad(w, true);
    oj_set_autocast(eng, true, OJ_BF16);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *y = oj_linear(a, w, NULL);
    oj_set_grad_enabled(eng, prev);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(y), OJ_BF16);
    assert_false(oj_requires_grad(y));
    assert_null(oj_grad_fn_name(y));
    oj_release(y);
    oj_release(a);
    oj_release(w);
}

/* ---------------------------------------------------- backward x autocast */

/* A graph built partly under autocast (linear in bf16) and partly without
 * (an f32 product): f32 leaves get f32 gradients, backward restores the
 * autocast state it found, and the gradients do not depend on whether
 * autocast is on when backward runs (bit for bit). retain_graph lets a
 * second pass accumulate exactly twice the first. */
static void test_backward_mixed_graph(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){6, 8}, OJ_F32), *w = randn(2, (int64_t[]){4, 8}, OJ_F32);
    oj_tensor *s = randn(2, (int64_t[]){6, 4}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_set_requires_grad(s, true);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y = oj_linear(x, w, NULL); /* bf16 */
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(y), OJ_BF16);
    oj_tensor *z = oj_mul(y, s); /* f32 by promotion */
    oj_tensor *l = oj_sum_all(z);
    assert_int_equal(oj_tensor_dtype(l), OJ_F32);
    assert_int_equal(oj_backward(l, true), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(s)), OJ_F32);
    oj_tensor *gw1 = oj_clone(oj_grad(w));
    /* second pass with autocast on (f16) while backward runs */
    oj_set_autocast(eng, true, OJ_F16);
    assert_int_equal(oj_backward(l, false), OJ_OK);
    assert_true(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    oj_set_autocast(eng, false, OJ_BF16);
    for (int64_t i = 0; i < oj_numel(gw1); i++)
        assert_true(oj_item_at(oj_grad(w), i) == 2.0 * oj_item_at(gw1, i));
    /* a third pass: the graph was freed */
    assert_int_equal(oj_backward(l, false), OJ_ERR_STATE);
    ET_EXPECT_ERR_HAS(OJ_ERR_STATE, "retain_graph");
    oj_tensor *ts[] = {x, w, s, y, z, l, gw1};
    for (size_t i = 0; i < 7; i++) oj_release(ts[i]);
}

/* Second order is not supported: a gradient does not require grad, and
 * backward from it is OJ_ERR_STATE with a message. */
static void test_no_second_order(void **state) {
    (void)state;
    oj_tensor *x = randn(1, (int64_t[]){4}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y = oj_sum_all(oj_mul(x, x));
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_backward(y, false), OJ_OK);
    oj_tensor *g = oj_grad(x);
    assert_false(oj_requires_grad(g));
    oj_tensor *gs = oj_sum_all(g);
    assert_int_equal(oj_backward(gs, false), OJ_ERR_STATE);
    ET_EXPECT_ERR_HAS(OJ_ERR_STATE, "does not require grad");
    oj_release(gs);
    oj_release(y);
    oj_release(x);
}

/* ------------------------------------------------ optimizer x autocast */

/* oj_optim_step under autocast runs in the parameters' dtype: the same
 * gradients give bit-identical parameters with autocast on (bf16 or f16)
 * or off, the parameters stay f32, and the autocast state (including an
 * f16 dtype) is what it was before the step. */
static void test_optim_step_under_autocast(void **state) {
    (void)state;
    oj_tensor *p[3], *g = randn(2, (int64_t[]){8, 8}, OJ_F32);
    oj_optim *o[3];
    for (int k = 0; k < 3; k++) {
        p[k] = oj_ones(eng, 2, (int64_t[]){8, 8}, OJ_F32);
        oj_set_requires_grad(p[k], true);
        o[k] = oj_optim_create(eng);
        oj_optim_hparams hp = oj_adamw_hparams(1e-2, 0.1);
        const char *names[1] = {"p"};
        oj_named_tensors nt = {.n = 1, .names = names, .tensors = &p[k]};
        assert_true(oj_optim_add_group(o[k], &hp, &nt) >= 0);
    }
    for (int step = 0; step < 2; step++)
        for (int k = 0; k < 3; k++) {
            oj_tensor *l = oj_sum_all(oj_mul(p[k], g));
            assert_int_equal(oj_backward(l, false), OJ_OK);
            oj_release(l);
            if (k > 0) oj_set_autocast(eng, true, k == 1 ? OJ_BF16 : OJ_F16);
            assert_int_equal(oj_optim_step(o[k], NULL), OJ_OK);
            if (k > 0) {
                assert_true(oj_autocast_enabled(eng));
                assert_int_equal(oj_autocast_dtype(eng), k == 1 ? OJ_BF16 : OJ_F16);
            }
            oj_set_autocast(eng, false, OJ_BF16);
            oj_optim_zero_grad(o[k]);
        }
    for (int k = 1; k < 3; k++) {
        assert_int_equal(oj_tensor_dtype(p[k]), OJ_F32);
        assert_memory_equal(oj_data_ptr(p[0]), oj_data_ptr(p[k]), 64 * sizeof(float));
    }
    for (int k = 0; k < 3; k++) {
        oj_optim_free(o[k]);
        oj_release(p[k]);
    }
    oj_release(g);
}

/* ------------------------------------------------- linear_cross_entropy */

enum { LV = 7, LC = 5 };

/* NULL and released arguments: NULL returns NULL (nothing else recorded),
 * a released one is OJ_ERR_INVALID_ARGUMENT "released". */
static void test_lce_null_and_released(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){3, LC}, OJ_F32), *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 1, 2});
    assert_null(oj_linear_cross_entropy(NULL, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
    assert_null(oj_linear_cross_entropy(x, NULL, t, -1, 0.0, OJ_REDUCTION_MEAN));
    assert_null(oj_linear_cross_entropy(x, w, NULL, -1, 0.0, OJ_REDUCTION_MEAN));
    oj_clear_error(eng);
    oj_tensor *dead = oj_clone(t);
    oj_release(dead);
    assert_null(oj_linear_cross_entropy(x, w, dead, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "input 2 is a released tensor");
    oj_release(x);
    oj_release(w);
    oj_release(t);
}

/* Wrong dtypes: integer x, f64 weight with f32 x, f32 targets, bf16 x
 * with f32 weight (no autocast) are OJ_ERR_DTYPE naming the argument. */
static void test_lce_bad_dtypes(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){3, LC}, OJ_F32), *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 1, 2});
    oj_tensor *xi = oj_cast(x, OJ_I32), *w64 = oj_cast(w, OJ_F64), *tf = oj_cast(t, OJ_F32);
    oj_tensor *xb = oj_cast(x, OJ_BF16);
    struct {
        oj_tensor *x, *w, *t;
        const char *frag;
    } cases[] = {
        {xi, w, t, "x"}, {x, w64, t, "weight"}, {x, w, tf, "targets"}, {xb, w, t, "weight"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_null(oj_linear_cross_entropy(cases[i].x, cases[i].w, cases[i].t, -1, 0.0,
                                            OJ_REDUCTION_MEAN));
        assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
        if (!strstr(oj_last_error(eng), "linear_cross_entropy") ||
            !strstr(oj_last_error(eng), cases[i].frag))
            fail_msg("case %zu: %s", i, oj_last_error(eng));
        oj_clear_error(eng);
    }
    oj_tensor *ts[] = {x, w, t, xi, w64, tf, xb};
    for (size_t i = 0; i < 7; i++) oj_release(ts[i]);
}

/* Wrong shapes: rank-0 x, weight of rank 1 or 3, C mismatch, V = 0,
 * targets of the wrong rank or size: OJ_ERR_SHAPE naming the shapes. */
static void test_lce_bad_shapes(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){3, LC}, OJ_F32), *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *x0 = oj_full(eng, 0, NULL, OJ_F32, 1.0);
    oj_tensor *w1 = randn(1, (int64_t[]){LC}, OJ_F32);
    oj_tensor *w3 = randn(3, (int64_t[]){1, LV, LC}, OJ_F32);
    oj_tensor *wc = randn(2, (int64_t[]){LV, LC + 1}, OJ_F32);
    oj_tensor *wv0 = oj_zeros(eng, 2, (int64_t[]){0, LC}, OJ_F32);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 1, 2}), *t2 = targets_i64(2, (int64_t[]){0, 1});
    oj_tensor *tr2 = oj_zeros(eng, 2, (int64_t[]){3, 1}, OJ_I64);
    oj_tensor *t0 = oj_zeros(eng, 0, NULL, OJ_I64);
    struct {
        oj_tensor *x, *w, *t;
    } cases[] = {{x0, w, t0}, {x, w1, t}, {x, w3, t}, {x, wc, t}, {x, wv0, t}, {x, w, t2}, {x, w, tr2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_null(oj_linear_cross_entropy(cases[i].x, cases[i].w, cases[i].t, -1, 0.0,
                                            OJ_REDUCTION_SUM));
        if (oj_last_status(eng) != OJ_ERR_SHAPE || !strstr(oj_last_error(eng), "do not fit"))
            fail_msg("case %zu: %d %s", i, oj_last_status(eng), oj_last_error(eng));
        oj_clear_error(eng);
    }
    oj_tensor *ts[] = {x, w, x0, w1, w3, wc, wv0, t, t2, tr2, t0};
    for (size_t i = 0; i < 11; i++) oj_release(ts[i]);
}

/* label_smoothing NaN, negative, > 1 and reduction NONE or out of the
 * enum: OJ_ERR_INVALID_ARGUMENT naming the argument; 1.0 is allowed. */
static void test_lce_bad_scalars(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){3, LC}, OJ_F32), *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 1, 2});
    double bad[] = {NAN, -0.1, 1.0000001, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(oj_linear_cross_entropy(x, w, t, -1, bad[i], OJ_REDUCTION_MEAN));
        ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "label_smoothing");
    }
    assert_null(oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_NONE));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "reduction");
    assert_null(oj_linear_cross_entropy(x, w, t, -1, 0.0, (oj_reduction)42));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "reduction");
    /* label_smoothing 1: the loss is the mean over classes of -log p */
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 1.0, OJ_REDUCTION_MEAN);
    oj_tensor *lp = oj_log_softmax(oj_linear(x, w, NULL), 1);
    double ref = -oj_item(oj_sum_all(lp)) / (3.0 * LV);
    assert_true(fabs(oj_item(l) - ref) <= 1e-5 * fabs(ref));
    oj_release(lp);
    oj_release(l);
    oj_release(x);
    oj_release(w);
    oj_release(t);
}

/* A target >= V or negative (and not ignore_index) is OJ_ERR_OUT_OF_RANGE
 * naming the target, also when it sits in a later chunk; the failed call
 * leaves grad mode on and no tensor behind. */
static void test_lce_target_out_of_range(void **state) {
    (void)state;
    setenv("OJAS_LCE_CHUNK_ROWS", "1", 1);
    oj_tensor *x = randn(2, (int64_t[]){3, LC}, OJ_F32), *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    int64_t bad[][3] = {{0, 1, LV}, {0, -2, 1}, {INT64_MAX, 0, 0}, {0, 0, INT64_MIN}};
    int64_t live = oj_engine_live_tensors(eng);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        oj_tensor *t = targets_i64(3, bad[i]);
        assert_null(oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
        ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "target");
        assert_true(oj_grad_enabled(eng));
        oj_release(t);
        assert_int_equal(oj_engine_live_tensors(eng), live);
    }
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    oj_release(x);
    oj_release(w);
}

/* Every row ignored: the MEAN loss is NaN (0/0, as torch) but the
 * gradients are zero, as oj_cross_entropy's (and torch's) are: nothing
 * was counted, so nothing moves. A NaN gradient would poison the
 * parameters of a model whose micro-batch held only padding. */
static void test_lce_all_ignored_grads_are_zero(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){3, LC}, OJ_F32), *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_tensor *t = targets_i64(3, (int64_t[]){-1, -1, -1});
    /* the unfused reference */
    oj_tensor *lr = oj_cross_entropy(oj_linear(x, w, NULL), t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_true(isnan(oj_item(lr)));
    assert_int_equal(oj_backward(lr, false), OJ_OK);
    assert_true(all_zero(oj_grad(x)) && all_zero(oj_grad(w)));
    oj_zero_grad(x);
    oj_zero_grad(w);
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_true(isnan(oj_item(l)));
    assert_int_equal(oj_backward(l, false), OJ_OK);
    if (!all_zero(oj_grad(x)) || !all_zero(oj_grad(w)))
        fail_msg("all rows ignored: gradient x[0] %g w[0] %g, expected 0",
                 oj_item_at(oj_grad(x), 0), oj_item_at(oj_grad(w), 0));
    /* SUM: loss 0, gradients 0 */
    oj_zero_grad(x);
    oj_zero_grad(w);
    oj_tensor *ls = oj_linear_cross_entropy(x, w, t, -1, 0.1, OJ_REDUCTION_SUM);
    assert_true(oj_item(ls) == 0.0);
    assert_int_equal(oj_backward(ls, false), OJ_OK);
    assert_true(all_zero(oj_grad(x)) && all_zero(oj_grad(w)));
    oj_tensor *ts[] = {x, w, t, lr, l, ls};
    for (size_t i = 0; i < 6; i++) oj_release(ts[i]);
}

/* N = 0 rows: SUM is 0, MEAN NaN (as torch), gradients are empty (x) and
 * zero (w); no chunk loop runs, nothing crashes. */
static void test_lce_zero_rows(void **state) {
    (void)state;
    oj_tensor *x = oj_zeros(eng, 2, (int64_t[]){0, LC}, OJ_F32);
    oj_tensor *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *t = oj_zeros(eng, 1, (int64_t[]){0}, OJ_I64);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_tensor *ls = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_SUM);
    assert_non_null(ls);
    assert_true(oj_item(ls) == 0.0);
    assert_int_equal(oj_backward(ls, false), OJ_OK);
    assert_int_equal(oj_numel(oj_grad(x)), 0);
    assert_true(all_zero(oj_grad(w)));
    oj_tensor *lm = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_non_null(lm);
    assert_true(isnan(oj_item(lm)));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_tensor *ts[] = {x, w, t, ls, lm};
    for (size_t i = 0; i < 5; i++) oj_release(ts[i]);
}

/* C = 0 features: every logit is 0, so each row's loss is log V and the
 * weight's gradient [V, 0] is empty. */
static void test_lce_zero_features(void **state) {
    (void)state;
    oj_tensor *x = oj_zeros(eng, 2, (int64_t[]){3, 0}, OJ_F32);
    oj_tensor *w = oj_zeros(eng, 2, (int64_t[]){LV, 0}, OJ_F32);
    oj_set_requires_grad(w, true);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 3, 6});
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    if (l == NULL) fail_msg("%s", oj_last_error(eng));
    assert_true(fabs(oj_item(l) - log((double)LV)) < 1e-6);
    assert_int_equal(oj_backward(l, false), OJ_OK);
    assert_int_equal(oj_numel(oj_grad(w)), 0);
    oj_release(l);
    oj_release(t);
    oj_release(x);
    oj_release(w);
}

/* OJAS_LCE_CHUNK_ROWS garbage (0, -5, abc, empty) falls back to the
 * default chunking and huge / 1 are honoured: the loss is bit-identical
 * in every case (per-row losses do not depend on chunking) and the
 * gradients agree closely (dW sums chunk by chunk). */
static void test_lce_chunk_env(void **state) {
    (void)state;
    oj_tensor *x = randn(3, (int64_t[]){2, 5, LC}, OJ_F32);
    oj_tensor *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    int64_t tv[10] = {0, 1, 2, 3, 4, 5, 6, -1, 3, 2};
    oj_tensor *t = oj_from_host(eng, 2, (int64_t[]){2, 5}, OJ_I64, tv, sizeof tv);
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    oj_tensor *l0 = oj_linear_cross_entropy(x, w, t, -1, 0.05, OJ_REDUCTION_MEAN);
    assert_int_equal(oj_backward(l0, false), OJ_OK);
    oj_tensor *gx0 = oj_clone(oj_grad(x)), *gw0 = oj_clone(oj_grad(w));
    const char *envs[] = {"0", "-5", "abc", "", "1", "3", "99999999999999999999", "1e3"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        setenv("OJAS_LCE_CHUNK_ROWS", envs[i], 1);
        oj_zero_grad(x);
        oj_zero_grad(w);
        oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.05, OJ_REDUCTION_MEAN);
        if (l == NULL) fail_msg("env '%s': %s", envs[i], oj_last_error(eng));
        assert_true(oj_item(l) == oj_item(l0));
        assert_int_equal(oj_backward(l, false), OJ_OK);
        for (int64_t k = 0; k < oj_numel(gx0); k++)
            assert_true(fabs(oj_item_at(oj_grad(x), k) - oj_item_at(gx0, k)) < 1e-6);
        for (int64_t k = 0; k < oj_numel(gw0); k++)
            assert_true(fabs(oj_item_at(oj_grad(w), k) - oj_item_at(gw0, k)) < 1e-6);
        oj_release(l);
    }
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    oj_tensor *ts[] = {x, w, t, l0, gx0, gw0};
    for (size_t i = 0; i < 6; i++) oj_release(ts[i]);
}

/* Non-contiguous x and weight (transposed views) and i32 targets give the
 * unfused result. */
static void test_lce_views_and_i32_targets(void **state) {
    (void)state;
    oj_tensor *xt = randn(2, (int64_t[]){LC, 4}, OJ_F32), *wt = randn(2, (int64_t[]){LC, LV}, OJ_F32);
    oj_tensor *x = oj_transpose(xt, 0, 1), *w = oj_transpose(wt, 0, 1);
    int32_t tv[4] = {6, 0, 3, 1};
    oj_tensor *t = oj_from_host(eng, 1, (int64_t[]){4}, OJ_I32, tv, sizeof tv);
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_SUM);
    oj_tensor *r = oj_cross_entropy(oj_linear(x, w, NULL), t, -1, 0.0, OJ_REDUCTION_SUM);
    if (l == NULL) fail_msg("%s", oj_last_error(eng));
    assert_true(fabs(oj_item(l) - oj_item(r)) <= 1e-5 * fabs(oj_item(r)));
    oj_tensor *ts[] = {xt, wt, x, w, t, l, r};
    for (size_t i = 0; i < 7; i++) oj_release(ts[i]);
}

/* Under autocast: f64 inputs are left in f64 (an f64 loss, equal to the
 * loss with autocast off); f32 inputs give an f32 loss whose gradients are
 * f32 and finite; bf16 inputs with f32 weight are accepted (both cast). */
static void test_lce_under_autocast(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){4, LC}, OJ_F64), *w = randn(2, (int64_t[]){LV, LC}, OJ_F64);
    oj_tensor *t = targets_i64(4, (int64_t[]){0, 1, 2, 6});
    oj_tensor *ref = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *got = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_int_equal(oj_tensor_dtype(got), OJ_F64);
    assert_true(oj_item(got) == oj_item(ref));
    oj_tensor *x32 = oj_cast(x, OJ_F32), *w32 = oj_cast(w, OJ_F32), *xb = oj_cast(x, OJ_BF16);
    oj_set_requires_grad(w32, true);
    oj_tensor *l = oj_linear_cross_entropy(x32, w32, t, -1, 0.0, OJ_REDUCTION_MEAN);
    oj_tensor *lb = oj_linear_cross_entropy(xb, w32, t, -1, 0.0, OJ_REDUCTION_SUM);
    oj_set_autocast(eng, false, OJ_BF16);
    if (l == NULL || lb == NULL) fail_msg("%s", oj_last_error(eng));
    assert_int_equal(oj_tensor_dtype(l), OJ_F32);
    assert_true(fabs(oj_item(l) - oj_item(ref)) < 0.05 * fabs(oj_item(ref)));
    assert_int_equal(oj_backward(l, false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(w32)), OJ_F32);
    assert_true(all_finite(oj_grad(w32)));
    /* f64 weight with f32 x under autocast: still a dtype error */
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_linear_cross_entropy(x32, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "weight");
    oj_set_autocast(eng, false, OJ_BF16);
    oj_tensor *ts[] = {x, w, t, ref, got, x32, w32, xb, l, lb};
    for (size_t i = 0; i < 10; i++) oj_release(ts[i]);
}

/* The fused loss keeps dx and dW in its node: retain_graph gives a second
 * backward that adds exactly the same gradients again. */
static void test_lce_retain_graph(void **state) {
    (void)state;
    oj_tensor *x = randn(2, (int64_t[]){4, LC}, OJ_F32), *w = randn(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_tensor *t = targets_i64(4, (int64_t[]){0, 1, 2, 6});
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_int_equal(oj_backward(l, true), OJ_OK);
    oj_tensor *g1 = oj_clone(oj_grad(w));
    assert_int_equal(oj_backward(l, false), OJ_OK);
    for (int64_t i = 0; i < oj_numel(g1); i++)
        assert_true(oj_item_at(oj_grad(w), i) == 2.0 * oj_item_at(g1, i));
    assert_int_equal(oj_backward(l, false), OJ_ERR_STATE);
    ET_EXPECT_ERR_HAS(OJ_ERR_STATE, "linear_cross_entropy");
    oj_tensor *ts[] = {x, w, t, l, g1};
    for (size_t i = 0; i < 5; i++) oj_release(ts[i]);
}

/* A budget too small for the loss: OJ_ERR_CAPACITY, grad mode restored,
 * nothing leaked. */
static void test_lce_capacity(void **state) {
    (void)state;
    oj_engine *e = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.budget_bytes = 64 * 1024;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    oj_tensor *x = oj_ones(e, 2, (int64_t[]){64, 64}, OJ_F32);   /* 16 KiB */
    oj_tensor *w = oj_ones(e, 2, (int64_t[]){64, 64}, OJ_F32);   /* 16 KiB */
    oj_tensor *t = oj_zeros(e, 1, (int64_t[]){64}, OJ_I64);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    assert_null(oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
    assert_int_equal(oj_last_status(e), OJ_ERR_CAPACITY);
    assert_true(oj_grad_enabled(e));
    oj_release(x);
    oj_release(w);
    oj_release(t);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

/* ------------------------------------------------- backward seed dtypes */

/* A gradient takes its tensor's dtype, the seed of oj_backward_seeded
 * too: an f64 seed on an f32 output gives f32 gradients to the f32 leaf
 * and to a retained f32 non-leaf. */
static void test_seed_dtype(void **state) {
    (void)state;
    oj_tensor *a = randn(1, (int64_t[]){4}, OJ_F32);
    oj_set_requires_grad(a, true);
    oj_tensor *y = oj_mul_scalar(a, 3.0);
    oj_retain_grad(y);
    oj_tensor *seed = oj_ones(eng, 1, (int64_t[]){4}, OJ_F64);
    assert_int_equal(oj_backward_seeded(y, seed, false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(a)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(y)), OJ_F32);
    assert_true(oj_item_at(oj_grad(a), 2) == 3.0);
    oj_release(seed);
    oj_release(y);
    oj_release(a);
}

/* Found by probing: oj_backward_seeded detached the caller's seed handle
 * from its scope (accumulate keeps what it is given and detaches it), so
 * a seed left to its scope, as scoped code does, leaked one tensor per
 * backward. */
static void test_seeded_backward_scoped_seed_not_leaked(void **state) {
    (void)state;
    int64_t live = oj_engine_live_tensors(eng);
    for (int k = 0; k < 2; k++) {
        oj_scope_begin(eng);
        oj_tensor *a = randn(1, (int64_t[]){4}, OJ_F32);
        oj_set_requires_grad(a, true);
        oj_tensor *y = oj_mul_scalar(a, 3.0);
        oj_tensor *seed = oj_full(eng, 1, (int64_t[]){4}, k ? OJ_F64 : OJ_F32, 2.0);
        assert_int_equal(oj_backward_seeded(y, seed, false), OJ_OK);
        assert_true(oj_item_at(oj_grad(a), 1) == 6.0);
        assert_true(oj_item_at(seed, 1) == 2.0); /* the seed is not written to */
        oj_scope_end(eng);
        assert_int_equal(oj_engine_live_tensors(eng), live);
    }
}

/* --------------------------------------------------------------- trainer */

/* The `dtype` key: "bf16" and "f16" parse, anything else is refused naming
 * the key and the choices; an out-of-range enum set from C is refused by
 * oj_train_config_check instead of running as f16. */
static void test_train_dtype_key(void **state) {
    (void)state;
    oj_train_config c = oj_train_config_default();
    assert_int_equal(c.dtype, OJ_TRAIN_F32);
    oj_error err = {0};
    assert_int_equal(oj_train_config_set(&c, "dtype=bf16", &err), OJ_OK);
    assert_int_equal(c.dtype, OJ_TRAIN_BF16);
    assert_int_equal(oj_train_config_set(&c, "dtype=f16", &err), OJ_OK);
    assert_int_equal(c.dtype, OJ_TRAIN_F16);
    const char *bad[] = {"dtype=BF16", "dtype=f64", "dtype=", "dtype=bf16 ", "dtype=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        oj_error e2 = {0};
        assert_int_not_equal(oj_train_config_set(&c, bad[i], &e2), OJ_OK);
        if (!strstr(e2.message, "dtype") || !strstr(e2.message, "bf16"))
            fail_msg("%s: %s", bad[i], e2.message);
        assert_int_equal(c.dtype, OJ_TRAIN_F16); /* unchanged */
    }
    assert_int_equal(oj_train_config_apply_json(&c, "{\"dtype\": 1}", &err) != OJ_OK, true);
    char dir[256];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    oj_train_config t = tt_config(dir);
    t.dtype = (oj_train_dtype)7;
    oj_error e3 = {0};
    assert_int_equal(oj_train_config_check(&t, &e3), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e3.message, "dtype"));
    t.dtype = (oj_train_dtype)-1;
    oj_error e4 = {0};
    assert_int_equal(oj_train_config_check(&t, &e4), OJ_ERR_INVALID_ARGUMENT);
    tt_rmdir(dir);
}

#define N_STEPS 4
typedef struct {
    double loss[N_STEPS + 1], val[N_STEPS + 1];
    int64_t stop_at;
    volatile sig_atomic_t stop;
} run_log;

static void on_metrics(const oj_train_metrics *m, void *ctx) {
    run_log *r = ctx;
    if (m->is_eval) {
        r->val[m->step] = m->val_loss;
        return;
    }
    r->loss[m->step] = m->loss;
    if (m->step == r->stop_at) r->stop = 1;
}

static void run_train(const oj_train_config *c, const char *out, const char *resume, run_log *r,
                      oj_train_result *res) {
    oj_train_options o = {.out_dir = out, .resume = resume, .stop = &r->stop,
                          .on_metrics = on_metrics, .ctx = r};
    oj_error err = {0};
    if (oj_train(c, &o, res, &err)) fail_msg("train: %s", err.message);
}

static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = false;
        if (x == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* A bf16 run (dtype=bf16) stopped and resumed: the checkpoint keeps the
 * dtype (oj_train_config_from_checkpoint gives bf16, what `ojas train
 * --resume` uses), and the resumed run is bit-identical to the run that
 * never stopped under EXACT numerics (losses, val losses, model and
 * optimizer files), and differs from the f32 run. */
static void test_train_bf16_resume(void **state) {
    (void)state;
    char dir[256], a[300], b[300], f[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(f, sizeof f, "%s/f", dir);
    oj_train_config c = tt_config(dir);
    c.max_steps = N_STEPS;
    c.eval_every = c.ckpt_every = 2;
    oj_error err = {0};
    assert_int_equal(oj_train_config_set(&c, "dtype=bf16", &err), OJ_OK);
    oj_train_result res;
    run_log full = {.stop_at = -1}, half = {.stop_at = N_STEPS / 2}, f32 = {.stop_at = -1};
    run_train(&c, a, NULL, &full, &res);
    assert_int_equal(res.step, N_STEPS);
    run_train(&c, b, NULL, &half, &res);
    assert_int_equal(res.stop, OJ_TRAIN_SIGNAL);
    oj_train_config rc;
    assert_int_equal(oj_train_config_from_checkpoint(b, &rc, &err), OJ_OK);
    assert_int_equal(rc.dtype, OJ_TRAIN_BF16);
    half.stop = 0;
    half.stop_at = -1;
    run_train(&rc, b, b, &half, &res);
    assert_int_equal(res.step, N_STEPS);
    for (int s = 1; s <= N_STEPS; s++) {
        if (memcmp(&full.loss[s], &half.loss[s], sizeof(double)))
            fail_msg("step %d: loss %.17g vs resumed %.17g", s, full.loss[s], half.loss[s]);
        if (s % 2 == 0) assert_memory_equal(&full.val[s], &half.val[s], sizeof(double));
    }
    char pa[400], pb[400];
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(pa, sizeof pa, "%s/ckpt-%06d/%s", a, N_STEPS, files[i]);
        snprintf(pb, sizeof pb, "%s/ckpt-%06d/%s", b, N_STEPS, files[i]);
        if (!same_file(pa, pb)) fail_msg("%s differs after a bf16 resume", files[i]);
    }
    c.dtype = OJ_TRAIN_F32;
    run_train(&c, f, NULL, &f32, &res);
    assert_true(f32.loss[N_STEPS] != full.loss[N_STEPS]); /* bf16 really ran */
    assert_true(fabs(f32.loss[N_STEPS] - full.loss[N_STEPS]) < 0.05 * f32.loss[N_STEPS]);
    tt_rmdir(dir);
}

/* -------------------------------------------------------- generation */

/* Generation under f16 autocast (not only bf16) gives tokens of the
 * vocabulary and leaves autocast as it was. */
static void test_generate_under_f16_autocast(void **state) {
    (void)state;
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("nanolab-tiny", &cfg));
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &cfg, 3, &m), OJ_OK);
    int32_t prompt[3] = {1, 2, 3};
    const int32_t *ps[1] = {prompt};
    int64_t pl[1] = {3}, ol = 0;
    oj_sampler_config sc = oj_sampler_config_default();
    sc.max_new_tokens = 5;
    int32_t *out[1] = {NULL};
    oj_set_autocast(eng, true, OJ_F16);
    if (oj_generate(m, 1, ps, pl, &sc, out, &ol, NULL, NULL) != OJ_OK)
        fail_msg("%s", oj_last_error(eng));
    assert_true(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(ol, 5);
    for (int i = 0; i < 5; i++) assert_true(out[0][i] >= 0 && out[0][i] < cfg.vocab_size);
    free(out[0]);
    oj_gpt_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_set_autocast_bad_dtype, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_set_autocast_nesting, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_autocast_leaves_f64_alone, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_autocast_integer_inputs, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_autocast_error_inside_op, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_autocast_released_input, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_autocast_two_engines, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_autocast_no_grad, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_backward_mixed_graph, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_no_second_order, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_optim_step_under_autocast, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_null_and_released, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_bad_dtypes, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_bad_shapes, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_bad_scalars, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_target_out_of_range, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_all_ignored_grads_are_zero, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_zero_rows, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_zero_features, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_chunk_env, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_views_and_i32_targets, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_under_autocast, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_retain_graph, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_lce_capacity, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_seed_dtype, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_seeded_backward_scoped_seed_not_leaked, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_train_dtype_key, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_generate_under_f16_autocast, ac_in, ac_reset),
        cmocka_unit_test_setup_teardown(test_train_bf16_resume, ac_in, ac_reset),
    };
    return cmocka_run_group_tests(tests, et_setup, et_teardown_no_leaks);
}
