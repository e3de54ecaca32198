// test: scopes release what they own; 10,000 scoped iterations leak nothing
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/core.h"
#include "ojas/ops.h"

static oj_engine *eng;

static int setup(void **state) {
    (void)state;
    return oj_engine_create(NULL, &eng, NULL) == OJ_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_int_equal(oj_scope_depth(eng), 0);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    return 0;
}

/* One "training step": temporaries, views, a kept result. */
static oj_tensor *step(oj_tensor *param, int i) {
    int64_t s[2] = {16, 32};
    oj_tensor *x = oj_rand_normal(eng, 2, s, OJ_F32, 0, 1);
    oj_tensor *y = oj_transpose(x, 0, 1);
    oj_tensor *z = oj_contiguous(y);
    oj_tensor *w = oj_reshape(z, 1, (int64_t[]){-1});
    oj_tensor *n = oj_narrow(w, 0, i % 8, 8);
    oj_tensor *tmp = oj_full(eng, 1, (int64_t[]){64 + i % 5}, OJ_F64, i);
    oj_release(tmp); /* early release inside the scope */
    oj_copy_(param, n);
    return oj_keep(oj_clone(n));
}

static void test_ten_thousand_iterations(void **state) {
    (void)state;
    int64_t s = 8;
    oj_tensor *param = oj_zeros(eng, 1, &s, OJ_F32); /* lives outside every scope */
    oj_budget *root = oj_engine_budget(eng);
    /* warm the pool with every size the loop uses, so the comparison
     * below sees the steady state */
    for (int i = 0; i < 5; i++) {
        oj_scope_begin(eng);
        oj_release(step(param, i));
        oj_scope_end(eng);
    }
    const int64_t live0 = oj_engine_live_tensors(eng);
    const int64_t bytes0 = oj_budget_current(root);
    for (int i = 0; i < 10000; i++) {
        assert_int_equal(oj_scope_begin(eng), OJ_OK);
        oj_tensor *kept = step(param, i);
        assert_non_null(kept);
        assert_int_equal(oj_scope_end(eng), OJ_OK);
        /* kept left the scope: it is ours now */
        assert_int_equal(oj_rank(kept), 1);
        oj_release(kept);
        assert_int_equal(oj_engine_live_tensors(eng), live0);
    }
    assert_int_equal(oj_budget_current(root), bytes0);
    assert_int_equal(oj_budget_current(root) - oj_engine_pooled_bytes(eng), 64); /* param */
    oj_release(param);
    oj_engine_trim_pool(eng);
    assert_int_equal(oj_budget_current(root), 0);
}

static void test_keep_moves_one_level(void **state) {
    (void)state;
    int64_t n = 4;
    oj_scope_begin(eng);
    oj_tensor *outer = oj_zeros(eng, 1, &n, OJ_F32);
    oj_scope_begin(eng);
    oj_tensor *inner = oj_ones(eng, 1, &n, OJ_F32);
    oj_tensor *dropped = oj_ones(eng, 1, &n, OJ_F32);
    assert_ptr_equal(oj_keep(inner), inner);
    assert_ptr_equal(oj_keep(outer), outer); /* already outer: unchanged */
    assert_int_equal(oj_engine_live_tensors(eng), 3);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 2);
    assert_int_equal(oj_rank(inner), 1); /* alive in the outer scope */
    assert_int_equal(oj_rank(dropped), -1); /* released (quarantined) */
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    assert_int_equal(oj_rank(inner), -1);
    assert_null(oj_keep(NULL));
}

static void test_retain_outlives_scope(void **state) {
    (void)state;
    int64_t n = 4;
    oj_scope_begin(eng);
    oj_tensor *t = oj_ones(eng, 1, &n, OJ_F32);
    assert_ptr_equal(oj_retain(t), t);
    oj_scope_end(eng);
    assert_int_equal(oj_rank(t), 1);
    assert_true(oj_item_at(t, 3) == 1.0);
    oj_release(t);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

static void test_views_keep_storage_alive(void **state) {
    (void)state;
    int64_t n = 6;
    oj_scope_begin(eng);
    oj_tensor *base = oj_arange(eng, 0, 6, 1, OJ_F32);
    oj_tensor *v = oj_narrow(base, 0, 2, 3);
    oj_keep(v);
    oj_scope_end(eng);
    (void)n;
    assert_int_equal(oj_rank(base), -1);
    assert_true(oj_item_at(v, 0) == 2.0 && oj_item_at(v, 2) == 4.0);
    oj_release(v);
}

static void test_depth_limits(void **state) {
    (void)state;
    assert_int_equal(oj_scope_end(eng), OJ_ERR_STATE);
    oj_clear_error(eng);
    for (int i = 0; i < 64; i++) assert_int_equal(oj_scope_begin(eng), OJ_OK);
    assert_int_equal(oj_scope_depth(eng), 64);
    assert_int_equal(oj_scope_begin(eng), OJ_ERR_STATE);
    oj_clear_error(eng);
    int64_t n = 2;
    oj_tensor *t = oj_zeros(eng, 1, &n, OJ_F32);
    for (int i = 0; i < 64; i++) oj_keep(t), oj_scope_end(eng); /* carried out level by level */
    assert_int_equal(oj_rank(t), 1);
    oj_release(t);
}

/* Four f32 values in [0.5, 1.5), outside every scope. */
static oj_tensor *four(bool requires_grad) {
    oj_tensor *t = oj_full(eng, 1, (int64_t[]){4}, OJ_F32, 0.0);
    float v[4] = {0.5f, 0.75f, 1.0f, 1.25f};
    assert_int_equal(oj_copy_from_host(t, v, sizeof v), OJ_OK);
    return requires_grad ? oj_set_requires_grad(t, true) : t;
}

// test: a scope releases the op outputs made inside it; a kept one survives with its values
static void test_scope_releases_op_outputs(void **state) {
    (void)state;
    oj_tensor *t = four(false);
    const int64_t base = oj_engine_live_tensors(eng);
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    oj_tensor *a = oj_exp(t);
    oj_tensor *b = oj_keep(oj_add(a, t));
    assert_int_equal(oj_engine_live_tensors(eng), base + 2);
    assert_int_equal(oj_scope_end(eng), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(eng), base + 1);
    float x[4], y[4];
    assert_int_equal(oj_to_host(t, x, sizeof x), OJ_OK);
    assert_int_equal(oj_to_host(b, y, sizeof y), OJ_OK);
    for (int i = 0; i < 4; i++) assert_float_equal(y[i], expf(x[i]) + x[i], 1e-5f * (1 + y[i]));
    oj_release(b);
    oj_release(t);
}

// test: a training step inside a scope: the graph is built, backpropagated and freed; the grad stays
static void test_scope_with_grad_graph(void **state) {
    (void)state;
    oj_tensor *t = four(true);
    const int64_t base = oj_engine_live_tensors(eng);
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    assert_int_equal(oj_backward(oj_sum_all(oj_exp(t)), false), OJ_OK);
    assert_int_equal(oj_scope_end(eng), OJ_OK);
    float x[4], g[4];
    assert_int_equal(oj_to_host(t, x, sizeof x), OJ_OK);
    assert_int_equal(oj_to_host(oj_grad(t), g, sizeof g), OJ_OK);
    for (int i = 0; i < 4; i++) assert_float_equal(g[i], expf(x[i]), 1e-5f * expf(x[i]));
    oj_zero_grad(t);
    assert_int_equal(oj_engine_live_tensors(eng), base);
    oj_release(t);
}

// test: a scope ends over a graph never backpropagated (an eval step with grad mode on): the
// nodes and the views they saved go without a use after free (the view a unary node saved
// used to be freed by the scope before the node)
static void test_scope_end_with_graph_not_backpropagated(void **state) {
    (void)state;
    for (int op = 0; op < 4; op++) {
        oj_tensor *t = four(true);
        const int64_t base = oj_engine_live_tensors(eng);
        assert_int_equal(oj_scope_begin(eng), OJ_OK);
        oj_tensor *y = op == 0 ? oj_neg(t) : op == 1 ? oj_exp(t) : op == 2 ? oj_mul(t, t)
                                                                            : oj_sum_all(t);
        assert_non_null(oj_reshape(y, 1, (int64_t[]){-1}));
        assert_int_equal(oj_scope_end(eng), OJ_OK);
        assert_int_equal(oj_engine_live_tensors(eng), base);
        oj_release(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ten_thousand_iterations),
        cmocka_unit_test(test_keep_moves_one_level),
        cmocka_unit_test(test_retain_outlives_scope),
        cmocka_unit_test(test_views_keep_storage_alive),
        cmocka_unit_test(test_depth_limits),
        cmocka_unit_test(test_scope_releases_op_outputs),
        cmocka_unit_test(test_scope_with_grad_graph),
        cmocka_unit_test(test_scope_end_with_graph_not_backpropagated),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
