// test: dropout (Philox mask definition, same mask for the same seed and
// counter whatever the thread count, backward regenerates it) and the
// elementwise losses (mse, l1, smooth_l1, binary_cross_entropy and its
// with-logits form): double references, gradcheck, bad input.
#include "nn_testutil.h"

static void test_dropout_mask(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {50, 41}; // 2050 elements: not a multiple of 4
    int64_t n = 2050;
    double p = 0.3;
    oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, 0.5, 1.5);
    oj_set_requires_grad(x, true);
    oj_rng_set_offset(eng, 17);
    oj_tensor *y = oj_dropout(x, p, true);
    assert_non_null(y);
    assert_true(oj_rng_offset(eng) == 17 + (uint64_t)(n + 3) / 4);
    double *xv = nt_host(x), *yv = nt_host(y);
    uint32_t key[2] = {1234, 0};
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t ctr[4] = {(uint32_t)(17 + i / 4), 0, 0, 0}, r[4];
        oj_philox4x32_10(ctr, key, r);
        bool keep = (double)r[i % 4] / 4294967296.0 >= p;
        double want = keep ? (double)(float)xv[i] / (1 - p) : 0.0;
        assert_float_equal(yv[i], want, 1e-6);
        zeros += !keep;
    }
    assert_true(fabs((double)zeros / (double)n - p) < 0.04);
    // backward: the same mask and scale on the gradient
    assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
    double *g = nt_host(oj_grad(x));
    for (int64_t i = 0; i < n; i++) assert_float_equal(g[i], yv[i] != 0 ? 1 / (1 - p) : 0, 1e-6);
    free(g);
    free(xv);
    free(yv);
    // same offset -> same mask; the next call draws a new one
    oj_rng_set_offset(eng, 17);
    oj_tensor *y2 = oj_dropout(x, p, true);
    oj_tensor *y3 = oj_dropout(x, p, true);
    double *a = nt_host(y), *b = nt_host(y2), *c = nt_host(y3);
    assert_memory_equal(a, b, (size_t)n * sizeof(double));
    assert_memory_not_equal(a, c, (size_t)n * sizeof(double));
    free(a);
    free(b);
    free(c);
    // identity when not training or p == 0; p == 1 gives zeros
    oj_tensor *id = oj_dropout(x, p, false);
    assert_true(oj_shares_storage(id, x));
    assert_float_equal(oj_item_at(oj_dropout(x, 0.0, true), 5), oj_item_at(x, 5), 0);
    assert_float_equal(oj_item(oj_sum_all(oj_dropout(x, 1.0, true))), 0.0, 0);
    nt_expect_error(eng, oj_dropout(x, 1.5, true), OJ_ERR_INVALID_ARGUMENT, "dropout", "1.5");
    nt_expect_error(eng, oj_dropout(x, -0.1, true), OJ_ERR_INVALID_ARGUMENT, "dropout", NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_dropout_thread_count(void **state) {
    (void)state;
    double *out[2];
    int64_t xs[1] = {4099};
    for (int k = 0; k < 2; k++) {
        oj_engine *eng = NULL;
        oj_engine_config cfg = oj_engine_config_default();
        cfg.seed = 99;
        cfg.threads = k + 1;
        assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
        oj_scope_begin(eng);
        oj_tensor *x = oj_ones(eng, 1, xs, OJ_F32);
        out[k] = nt_host(oj_dropout(x, 0.5, true));
        oj_scope_end(eng);
        nt_engine_done(eng);
    }
    assert_memory_equal(out[0], out[1], 4099 * sizeof(double));
    free(out[0]);
    free(out[1]);
}

// ---------------------------------------------------------------- losses

enum { MSE, L1, SMOOTH, BCE, BCEL, NLOSS };
static const char *loss_names[NLOSS] = {"mse", "l1", "smooth_l1", "bce", "bce_logits"};

static oj_tensor *loss_call(int which, oj_tensor *a, oj_tensor *b, int red) {
    oj_reduction r = (oj_reduction)red;
    switch (which) {
    case MSE: return oj_mse_loss(a, b, r);
    case L1: return oj_l1_loss(a, b, r);
    case SMOOTH: return oj_smooth_l1_loss(a, b, 0.5, r);
    case BCE: return oj_binary_cross_entropy(a, b, r);
    default: return oj_binary_cross_entropy_with_logits(a, b, r);
    }
}

static double loss_ref(int which, double a, double b) {
    double d = a - b;
    switch (which) {
    case MSE: return d * d;
    case L1: return fabs(d);
    case SMOOTH: return fabs(d) < 0.5 ? 0.5 * d * d / 0.5 : fabs(d) - 0.25;
    case BCE: return -(b * fmax(log(a), -100) + (1 - b) * fmax(log(1 - a), -100));
    default: return fmax(a, 0) - a * b + log1p(exp(-fabs(a)));
    }
}

static void test_losses_forward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s[2] = {3, 4};
    for (int w = 0; w < NLOSS; w++)
        for (int red = 0; red < 3; red++) {
            bool prob = w == BCE;
            oj_tensor *a = nt_rand(eng, 2, s, OJ_F64, prob ? 0.05 : -3, prob ? 0.95 : 3);
            oj_tensor *b = nt_rand(eng, 2, s, OJ_F64, prob || w == BCEL ? 0 : -3, prob || w == BCEL ? 1 : 3);
            oj_tensor *l = loss_call(w, a, b, red);
            if (l == NULL) fail_msg("%s: %s", loss_names[w], oj_last_error(eng));
            double *av = nt_host(a), *bv = nt_host(b), *lv = nt_host(l), rows[12], sum = 0;
            for (int i = 0; i < 12; i++) sum += rows[i] = loss_ref(w, av[i], bv[i]);
            if (red == OJ_REDUCTION_NONE) nt_close(loss_names[w], lv, rows, 12, 1e-13, 1e-12);
            else {
                double want = red == OJ_REDUCTION_MEAN ? sum / 12 : sum;
                nt_close(loss_names[w], lv, &want, 1, 1e-13, 1e-12);
            }
            free(av);
            free(bv);
            free(lv);
        }
    // with-logits stays finite and exact for large |x|
    double xv[4] = {-800, -30, 45, 800}, tv[4] = {0, 1, 0, 1};
    int64_t s4[1] = {4};
    oj_tensor *l = oj_binary_cross_entropy_with_logits(nt_from(eng, 1, s4, OJ_F64, xv),
                                                       nt_from(eng, 1, s4, OJ_F64, tv),
                                                       OJ_REDUCTION_NONE);
    double *lv = nt_host(l);
    double want[4] = {0, 30 + log1p(exp(-30)), 45 + log1p(exp(-45)), 0};
    nt_close("bce_logits extremes", lv, want, 4, 1e-13, 1e-14);
    free(lv);
    // binary_cross_entropy clamps log(0) at -100 as torch
    double pv[2] = {0, 1}, qv[2] = {1, 1};
    int64_t s2[1] = {2};
    oj_tensor *lb = oj_binary_cross_entropy(nt_from(eng, 1, s2, OJ_F32, pv),
                                            nt_from(eng, 1, s2, OJ_F32, qv), OJ_REDUCTION_NONE);
    assert_float_equal(oj_item_at(lb, 0), 100.0, 1e-4);
    assert_float_equal(oj_item_at(lb, 1), 0.0, 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static int g_loss, g_red;
static oj_tensor *loss_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    oj_tensor *a = nt_T(in[0]); // non-contiguous
    oj_tensor *y = loss_call(g_loss, a, in[1], g_red);
    oj_release(a);
    return y;
}

static void test_losses_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t sa[2] = {4, 3}, sb[2] = {3, 4};
    for (g_loss = 0; g_loss < NLOSS; g_loss++)
        for (g_red = 0; g_red < 3; g_red++) {
            oj_scope_begin(eng);
            bool prob = g_loss == BCE;
            bool unit = prob || g_loss == BCEL;
            oj_tensor *in[2] = {nt_leaf(eng, 2, sa, prob ? 0.1 : -2, prob ? 0.9 : 2),
                                nt_leaf(eng, 2, sb, unit ? 0 : -2, unit ? 1 : 2)};
            nt_gradcheck(eng, loss_names[g_loss], loss_fn, NULL, in, 2);
            oj_scope_end(eng);
        }
    // gradient of bce_with_logits at x = 0 is sigmoid(0) - t
    oj_scope_begin(eng);
    int64_t s1[1] = {1};
    oj_tensor *x = oj_zeros(eng, 1, s1, OJ_F64);
    oj_set_requires_grad(x, true);
    oj_tensor *t = oj_full(eng, 1, s1, OJ_F64, 0.2);
    assert_int_equal(oj_backward(oj_binary_cross_entropy_with_logits(x, t, OJ_REDUCTION_SUM), false),
                     OJ_OK);
    assert_float_equal(oj_item(oj_grad(x)), 0.3, 1e-15);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_losses_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s[2] = {3, 4}, s2[1] = {4}, s5[1] = {5};
    oj_tensor *a = nt_rand(eng, 2, s, OJ_F32, 0.1, 0.9);
    oj_tensor *b = nt_rand(eng, 1, s2, OJ_F32, 0.1, 0.9);
    assert_non_null(oj_mse_loss(a, b, OJ_REDUCTION_MEAN)); // broadcasts
    nt_expect_error(eng, oj_binary_cross_entropy(a, b, OJ_REDUCTION_MEAN), OJ_ERR_SHAPE,
                    "binary_cross_entropy", "same shape");
    nt_expect_error(eng, oj_mse_loss(a, nt_rand(eng, 1, s5, OJ_F32, 0, 1), OJ_REDUCTION_MEAN),
                    OJ_ERR_SHAPE, "[3, 4]", "[5]");
    nt_expect_error(eng, oj_l1_loss(a, a, (oj_reduction)-1), OJ_ERR_INVALID_ARGUMENT, "l1_loss",
                    "reduction");
    nt_expect_error(eng, oj_smooth_l1_loss(a, a, -1.0, OJ_REDUCTION_SUM), OJ_ERR_INVALID_ARGUMENT,
                    "beta", NULL);
    nt_expect_error(eng, oj_binary_cross_entropy_with_logits(a, oj_zeros(eng, 2, s, OJ_I64), 0),
                    OJ_ERR_DTYPE, "target", "i64");
    // beta 0 is l1
    assert_float_equal(oj_item(oj_smooth_l1_loss(a, b, 0.0, OJ_REDUCTION_SUM)),
                       oj_item(oj_l1_loss(a, b, OJ_REDUCTION_SUM)), 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_mask),     cmocka_unit_test(test_dropout_thread_count),
        cmocka_unit_test(test_losses_forward),   cmocka_unit_test(test_losses_gradcheck),
        cmocka_unit_test(test_losses_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
