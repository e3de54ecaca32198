// test: embedding, layer_norm and rms_norm — forward against double
// references, gradcheck (non-contiguous inputs, with and without weight and
// bias), deterministic embedding backward with repeated indices, bad input.
#include "nn_testutil.h"

// ---------------------------------------------------------------- embedding

static void test_embedding_forward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t ws[2] = {5, 3}, is[2] = {2, 3};
    int64_t idx[6] = {4, 0, 2, 2, 1, 4};
    oj_dtype dts[2] = {OJ_I64, OJ_I32};
    for (int k = 0; k < 2; k++) {
        oj_tensor *w = nt_rand(eng, 2, ws, OJ_F32, -1, 1);
        oj_tensor *i = nt_index(eng, 2, is, dts[k], idx);
        oj_tensor *y = oj_embedding(w, i);
        assert_non_null(y);
        assert_int_equal(oj_rank(y), 3);
        assert_int_equal(oj_size(y, 2), 3);
        double *wv = nt_host(w), *yv = nt_host(y);
        for (int n = 0; n < 6; n++)
            for (int c = 0; c < 3; c++) assert_float_equal(yv[n * 3 + c], wv[idx[n] * 3 + c], 0);
        free(wv);
        free(yv);
    }
    // rank-0 indices give [C]
    oj_tensor *w = nt_rand(eng, 2, ws, OJ_F64, -1, 1);
    int64_t three = 3;
    oj_tensor *i0 = nt_index(eng, 0, NULL, OJ_I64, &three);
    oj_tensor *y0 = oj_embedding(w, i0);
    assert_int_equal(oj_rank(y0), 1);
    assert_float_equal(oj_item_at(y0, 1), oj_item_at(w, 3 * 3 + 1), 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static oj_tensor *g_idx;
static oj_tensor *emb_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    return oj_embedding(in[0], g_idx);
}

static void test_embedding_backward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t ws[2] = {4, 3}, is[2] = {2, 3};
    int64_t idx[6] = {1, 3, 1, 1, 0, 3};
    oj_tensor *w = nt_leaf(eng, 2, ws, -1, 1);
    g_idx = nt_index(eng, 2, is, OJ_I32, idx);
    oj_tensor *y = oj_embedding(w, g_idx);
    assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
    double *g = nt_host(oj_grad(w));
    double cnt[4] = {1, 3, 0, 2};
    for (int v = 0; v < 4; v++)
        for (int c = 0; c < 3; c++) assert_float_equal(g[v * 3 + c], cnt[v], 0);
    free(g);
    // gradcheck through a transposed table (non-contiguous)
    int64_t wt[2] = {3, 4};
    oj_tensor *w2 = nt_leaf(eng, 2, wt, -1, 1);
    oj_tensor *in[1] = {w2};
    (void)in;
    oj_tensor *wT = nt_T(w2);
    oj_tensor *yT = oj_embedding(wT, g_idx);
    assert_int_equal(oj_backward(oj_sum_all(oj_square(yT)), false), OJ_OK);
    nt_gradcheck(eng, "embedding", emb_fn, NULL, &w, 1);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_embedding_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t ws[2] = {5, 3}, is[1] = {3};
    oj_tensor *w = nt_rand(eng, 2, ws, OJ_F32, -1, 1);
    int64_t bad[3] = {0, 5, 1}, neg[3] = {0, 1, -1};
    nt_expect_error(eng, oj_embedding(w, nt_index(eng, 1, is, OJ_I64, bad)), OJ_ERR_OUT_OF_RANGE,
                    "embedding", "index 5 at position 1");
    nt_expect_error(eng, oj_embedding(w, nt_index(eng, 1, is, OJ_I32, neg)), OJ_ERR_OUT_OF_RANGE,
                    "embedding", "index -1");
    oj_tensor *fi = nt_rand(eng, 1, is, OJ_F32, 0, 1);
    nt_expect_error(eng, oj_embedding(w, fi), OJ_ERR_DTYPE, "embedding", "indices");
    oj_tensor *w1 = nt_rand(eng, 1, is, OJ_F32, 0, 1);
    int64_t ok[3] = {0, 1, 2};
    nt_expect_error(eng, oj_embedding(w1, nt_index(eng, 1, is, OJ_I64, ok)), OJ_ERR_SHAPE,
                    "embedding", "[V, C]");
    assert_null(oj_embedding(NULL, fi));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

// ---------------------------------------------------------------- norms

/* Reference layer/rms norm of rows [N, C] in double. */
static void ref_norm(bool rms, const double *x, const double *w, const double *b, int64_t N,
                     int64_t C, double eps, double *y) {
    for (int64_t n = 0; n < N; n++) {
        const double *r = x + n * C;
        double m = 0, v = 0;
        if (!rms) {
            for (int64_t c = 0; c < C; c++) m += r[c];
            m /= (double)C;
        }
        for (int64_t c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
        v /= (double)C;
        for (int64_t c = 0; c < C; c++)
            y[n * C + c] = (r[c] - m) / sqrt(v + eps) * (w ? w[c] : 1) + (b ? b[c] : 0);
    }
}

static void test_norm_forward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 8}, cs[1] = {8};
    oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
    double tol[3] = {2e-6, 1e-13, 2e-2};
    for (int k = 0; k < 3; k++)
        for (int rms = 0; rms < 2; rms++)
            for (int affine = 0; affine < 2; affine++) {
                oj_tensor *x = nt_rand(eng, 3, xs, dts[k], -2, 3);
                oj_tensor *w = affine ? nt_rand(eng, 1, cs, dts[k], 0.5, 1.5) : NULL;
                oj_tensor *b = affine && !rms ? nt_rand(eng, 1, cs, dts[k], -1, 1) : NULL;
                oj_tensor *y = rms ? oj_rms_norm(x, w, 1e-5) : oj_layer_norm(x, w, b, 1e-5);
                assert_non_null(y);
                assert_int_equal(oj_tensor_dtype(y), dts[k]);
                double *xv = nt_host(x), *wv = w ? nt_host(w) : NULL, *bv = b ? nt_host(b) : NULL;
                double *yv = nt_host(y), want[48];
                ref_norm(rms, xv, wv, bv, 6, 8, 1e-5, want);
                nt_close(rms ? "rms_norm" : "layer_norm", yv, want, 48, tol[k], tol[k]);
                free(xv);
                free(wv);
                free(bv);
                free(yv);
            }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ctx: bit 0 rms, bit 1 weight, bit 2 bias. x arrives as [C, N] and is
 * transposed (non-contiguous). */
static oj_tensor *norm_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int m = *(int *)ctx;
    oj_tensor *x = nt_T(in[0]);
    oj_tensor *w = (m & 2) ? in[1] : NULL, *b = (m & 4) ? in[2] : NULL;
    oj_tensor *y = (m & 1) ? oj_rms_norm(x, w, 1e-3) : oj_layer_norm(x, w, b, 1e-3);
    oj_release(x);
    return y;
}

static void test_norm_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t xs[2] = {6, 4}, cs[1] = {6};
    int modes[6] = {0, 2, 6, 4, 1, 3};
    for (int k = 0; k < 6; k++) {
        oj_scope_begin(eng);
        oj_tensor *in[3] = {nt_leaf(eng, 2, xs, -2, 2), nt_leaf(eng, 1, cs, 0.5, 1.5),
                            nt_leaf(eng, 1, cs, -1, 1)};
        nt_gradcheck(eng, "norm", norm_fn, &modes[k], in, 3);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

static void test_norm_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {2, 4}, c3[1] = {3}, c4[1] = {4};
    oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -1, 1);
    oj_tensor *w3 = nt_rand(eng, 1, c3, OJ_F32, -1, 1);
    oj_tensor *w4d = nt_rand(eng, 1, c4, OJ_F64, -1, 1);
    nt_expect_error(eng, oj_layer_norm(x, w3, NULL, 1e-5), OJ_ERR_SHAPE, "layer_norm", "[3]");
    nt_expect_error(eng, oj_layer_norm(x, NULL, w3, 1e-5), OJ_ERR_SHAPE, "bias", "[2, 4]");
    nt_expect_error(eng, oj_rms_norm(x, w3, 1e-5), OJ_ERR_SHAPE, "rms_norm", "weight");
    nt_expect_error(eng, oj_rms_norm(x, w4d, 1e-5), OJ_ERR_DTYPE, "rms_norm", "f64");
    nt_expect_error(eng, oj_rms_norm(x, NULL, -1.0), OJ_ERR_INVALID_ARGUMENT, "eps", NULL);
    oj_tensor *xi = oj_zeros(eng, 2, xs, OJ_I32);
    nt_expect_error(eng, oj_layer_norm(xi, NULL, NULL, 1e-5), OJ_ERR_DTYPE, "layer_norm", "i32");
    nt_expect_error(eng, oj_layer_norm(oj_scalar(eng, 1.0, OJ_F32), NULL, NULL, 1e-5),
                    OJ_ERR_SHAPE, "scalar", NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_norm_graph_outlives_scope(void **state) {
    (void)state;
    // The graph of a kept output must survive the end of the scope that
    // built it (saved temporaries are owned by the node, not the scope).
    oj_engine *eng = nt_engine();
    int64_t xs[2] = {3, 4}, cs[1] = {4};
    oj_tensor *x = nt_leaf(eng, 2, xs, -1, 1), *w = nt_leaf(eng, 1, cs, 0.5, 1);
    oj_scope_begin(eng);
    oj_tensor *y = oj_keep(oj_sum_all(oj_square(oj_layer_norm(x, w, NULL, 1e-5))));
    oj_tensor *z = oj_keep(oj_sum_all(oj_rms_norm(x, w, 1e-5)));
    oj_scope_end(eng);
    assert_int_equal(oj_backward(y, false), OJ_OK);
    assert_int_equal(oj_backward(z, false), OJ_OK);
    assert_non_null(oj_grad(w));
    oj_release(y);
    oj_release(z);
    oj_release(x);
    oj_release(w);
    nt_engine_done(eng);
}

// ---------------------------------------------------------------- f32 rows past FLT_MAX squared

/* Layer (rms: RMS) norm backward in double: dx = rs (g - mean(g) -
 * xh mean(g xh)), g = dy w, xh = (x - m) rs; dw += dy xh (N rows of C). */
static void ref_norm_bwd(bool rms, const double *x, const double *w, const double *dy, int64_t N,
                         int64_t C, double eps, double *dx, double *dw) {
    for (int64_t c = 0; c < C; c++) dw[c] = 0;
    for (int64_t n = 0; n < N; n++) {
        const double *r = x + n * C, *g = dy + n * C;
        double m = 0, v = 0, sg = 0, sgx = 0;
        if (!rms) {
            for (int64_t c = 0; c < C; c++) m += r[c];
            m /= (double)C;
        }
        for (int64_t c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
        double rs = 1 / sqrt(v / (double)C + eps);
        for (int64_t c = 0; c < C; c++) {
            sg += g[c] * w[c];
            sgx += g[c] * w[c] * (r[c] - m) * rs;
            dw[c] += g[c] * (r[c] - m) * rs;
        }
        sg = rms ? 0 : sg / (double)C;
        sgx /= (double)C;
        for (int64_t c = 0; c < C; c++)
            dx[n * C + c] = rs * (g[c] * w[c] - sg - (r[c] - m) * rs * sgx);
    }
}

/* Rotate rows [T, D] by position t (theta 10000), pairs (i, i + D/2);
 * sign -1: the inverse. */
static void ref_rotate(double *y, int64_t T, int64_t D, double sign) {
    int64_t h = D / 2;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < h; i++) {
            double a = (double)t * pow(10000.0, -2.0 * (double)i / (double)D);
            double co = cos(a), si = sign * sin(a), *r = y + t * D;
            double x1 = r[i], x2 = r[h + i];
            r[i] = x1 * co - x2 * si;
            r[h + i] = x2 * co + x1 * si;
        }
}

/* |got - want| <= tol max|want| for each of n. */
static void close_scaled(const char *what, const double *got, const double *want, int64_t n,
                         double tol) {
    double mx = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    nt_close(what, got, want, n, tol * mx, 0);
}

/* Every op of the case on x [N, C] (values xv), outputs and gradients
 * checked against double; returns them all concatenated (malloc'd). */
static double *overflow_case(oj_engine *eng, int64_t N, int64_t C, const double *xv) {
    int64_t xs[2] = {N, C}, cs[1] = {C}, nc = N * C;
    double *wv = malloc((size_t)C * sizeof(double)), *bv = malloc((size_t)C * sizeof(double));
    double *dyv = malloc((size_t)nc * sizeof(double)), *half = malloc((size_t)nc * sizeof(double));
    double *want = malloc((size_t)nc * sizeof(double)), *wdx = malloc((size_t)nc * sizeof(double));
    double *wdw = malloc((size_t)C * sizeof(double));
    double *all = malloc((size_t)(7 * (2 * nc + C)) * sizeof(double));
    int64_t na = 0;
    for (int64_t c = 0; c < C; c++) wv[c] = 0.75 + 0.01 * (double)c, bv[c] = 0.1 * (double)(c % 3);
    for (int64_t i = 0; i < nc; i++) dyv[i] = 0.5 - 0.125 * (double)(i % 7), half[i] = xv[i] / 2;
    const char *names[5] = {"rms_norm", "layer_norm", "add_rms_norm", "add_layer_norm",
                            "rms_norm_rotary"};
    for (int op = 0; op < 5; op++) {
        oj_scope_begin(eng);
        bool rms = op == 0 || op == 2 || op == 4, add = op == 2 || op == 3;
        oj_tensor *x = nt_from(eng, 2, xs, OJ_F32, add ? half : xv);
        oj_tensor *r = add ? nt_from(eng, 2, xs, OJ_F32, half) : NULL; // x + r == xv exactly
        oj_tensor *w = nt_from(eng, 1, cs, OJ_F32, wv);
        oj_tensor *b = rms ? NULL : nt_from(eng, 1, cs, OJ_F32, bv);
        oj_set_requires_grad(x, true);
        oj_set_requires_grad(w, true);
        oj_tensor *sum = NULL, *y;
        if (op == 0) y = oj_rms_norm(x, w, 1e-5);
        else if (op == 1) y = oj_layer_norm(x, w, b, 1e-5);
        else if (op == 2) y = oj_add_rms_norm(x, r, w, 1e-5, &sum);
        else if (op == 3) y = oj_add_layer_norm(x, r, w, b, 1e-5, &sum);
        else y = oj_rms_norm_rotary(x, w, 1e-5, 0, 10000.0);
        assert_non_null(y);
        ref_norm(rms, xv, wv, rms ? NULL : bv, N, C, 1e-5, want);
        double *dyr = malloc((size_t)nc * sizeof(double));
        memcpy(dyr, dyv, (size_t)nc * sizeof(double));
        if (op == 4) { // out = rotate(norm(x)): dnorm = rotate^-1(dy)
            ref_rotate(want, N, C, 1.0);
            ref_rotate(dyr, N, C, -1.0);
        }
        ref_norm_bwd(rms, xv, wv, dyr, N, C, 1e-5, wdx, wdw);
        free(dyr);
        double *yv = nt_host(y);
        close_scaled(names[op], yv, want, nc, 2e-6);
        assert_int_equal(oj_backward_seeded(y, nt_from(eng, 2, xs, OJ_F32, dyv), false), OJ_OK);
        double *dx = nt_host(oj_grad(x)), *dw = nt_host(oj_grad(w));
        close_scaled(names[op], dx, wdx, nc, 1e-5);
        close_scaled(names[op], dw, wdw, C, 1e-5);
        memcpy(all + na, yv, (size_t)nc * sizeof(double)), na += nc;
        memcpy(all + na, dx, (size_t)nc * sizeof(double)), na += nc;
        memcpy(all + na, dw, (size_t)C * sizeof(double)), na += C;
        free(yv);
        free(dx);
        free(dw);
        oj_scope_end(eng);
    }
    free(wv);
    free(bv);
    free(dyv);
    free(half);
    free(want);
    free(wdx);
    free(wdw);
    return all;
}

// test: f32 norms (rms_norm, layer_norm, add_rms_norm, add_layer_norm,
// rms_norm_rotary) on rows whose sum of squares passes FLT_MAX: output,
// dx and dweight against double (the rms_norm of [3e19, -3e19, 1.5e19, 0]
// is [4/3, -4/3, 2/3, 0]; the float sums gave zeros), rows beside ordinary
// ones, and the same bits at 1 and 3 threads under EXACT numerics.
static void test_norm_f32_overflow_rows(void **state) {
    (void)state;
    double x4[8] = {3e19, -3e19, 1.5e19, 0, 0.5, -1.25, 2, 0.25};
    enum { C = 72 };
    double x72[3 * C];
    for (int k = 0; k < C; k++) {
        x72[k] = k < 4 ? x4[k] : 0;
        x72[C + k] = (k % 2 ? 1 : -1) * (double)(k + 1) * 1e19;
        x72[2 * C + k] = 0.1 * k - 3;
    }
    double *res[2][2];
    for (int th = 0; th < 2; th++) {
        oj_engine *eng = NULL;
        oj_engine_config cfg = oj_engine_config_default();
        cfg.threads = th ? 3 : 1;
        cfg.numerics = OJ_NUMERICS_EXACT;
        assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
        res[th][0] = overflow_case(eng, 2, 4, x4);
        res[th][1] = overflow_case(eng, 3, C, x72);
        oj_scope_begin(eng); // the row, exactly
        oj_tensor *y = oj_rms_norm(nt_from(eng, 2, (int64_t[]){1, 4}, OJ_F32, x4), NULL, 1e-5);
        double *yv = nt_host(y), want[4] = {4.0 / 3, -4.0 / 3, 2.0 / 3, 0};
        nt_close("rms_norm [3e19, -3e19, 1.5e19, 0]", yv, want, 4, 1e-6, 1e-6);
        free(yv);
        oj_scope_end(eng);
        nt_engine_done(eng);
    }
    int64_t n[2] = {5 * (2 * 8 + 4), 5 * (2 * 3 * C + C)};
    for (int k = 0; k < 2; k++) {
        if (memcmp(res[0][k], res[1][k], (size_t)n[k] * sizeof(double)) != 0)
            fail_msg("norm overflow rows: 1 and 3 threads differ (case %d)", k);
        free(res[0][k]);
        free(res[1][k]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_forward),   cmocka_unit_test(test_embedding_backward),
        cmocka_unit_test(test_embedding_errors),    cmocka_unit_test(test_norm_forward),
        cmocka_unit_test(test_norm_gradcheck),      cmocka_unit_test(test_norm_errors),
        cmocka_unit_test(test_norm_graph_outlives_scope),
        cmocka_unit_test(test_norm_f32_overflow_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
