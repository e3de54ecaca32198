// test: softmax, log_softmax, cross_entropy and nll_loss — forward against
// double references (any dim, large logits, ignore_index, label smoothing,
// every reduction), gradcheck on non-contiguous inputs, bad input.
#include "nn_testutil.h"

/* softmax of x [outer, n, inner] along the middle dim, in double. */
static void ref_softmax(const double *x, int64_t outer, int64_t n, int64_t inner, bool logsm,
                        double *y) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < n; k++) m = fmax(m, x[(o * n + k) * inner + i]);
            for (int64_t k = 0; k < n; k++) s += exp(x[(o * n + k) * inner + i] - m);
            for (int64_t k = 0; k < n; k++) {
                double v = x[(o * n + k) * inner + i] - m;
                y[(o * n + k) * inner + i] = logsm ? v - log(s) : exp(v) / s;
            }
        }
}

static void test_softmax_forward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {3, 4, 5};
    int dims[3] = {0, 1, -1};
    int64_t outer[3] = {1, 3, 12}, n[3] = {3, 4, 5}, inner[3] = {20, 5, 1};
    for (int dt = 0; dt < 2; dt++)
        for (int d = 0; d < 3; d++)
            for (int lg = 0; lg < 2; lg++) {
                oj_dtype t = dt ? OJ_F64 : OJ_F32;
                oj_tensor *x = nt_rand(eng, 3, xs, t, -500, 1000); // large: needs the max shift
                oj_tensor *y = lg ? oj_log_softmax(x, dims[d]) : oj_softmax(x, dims[d]);
                assert_non_null(y);
                double *xv = nt_host(x), *yv = nt_host(y), want[60];
                ref_softmax(xv, outer[d], n[d], inner[d], lg, want);
                nt_close("softmax", yv, want, 60, dt ? 1e-12 : 1e-6, dt ? 1e-12 : 1e-5);
                free(xv);
                free(yv);
            }
    // scalar input: softmax is 1, log_softmax 0
    oj_tensor *s = oj_scalar(eng, 3.0, OJ_F32);
    assert_float_equal(oj_item(oj_softmax(s, 0)), 1.0, 0);
    assert_float_equal(oj_item(oj_log_softmax(s, -1)), 0.0, 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static oj_tensor *softmax_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int m = *(int *)ctx; // bit 0: log, bits 1..: dim
    oj_tensor *x = oj_transpose(in[0], 0, 2); // non-contiguous [5, 4, 3]
    oj_tensor *y = (m & 1) ? oj_log_softmax(x, m >> 1) : oj_softmax(x, m >> 1);
    oj_release(x);
    return y;
}

static void test_softmax_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t xs[3] = {3, 4, 5};
    for (int m = 0; m < 6; m++) {
        oj_scope_begin(eng);
        oj_tensor *x = nt_leaf(eng, 3, xs, -2, 2);
        nt_gradcheck(eng, "softmax", softmax_fn, &m, &x, 1);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

/* Reference cross-entropy rows (torch semantics). */
static double ref_ce(const double *x, const int64_t *t, int64_t N, int64_t V, int64_t ignore,
                     double eps, int red, double *rows) {
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t n = 0; n < N; n++) {
        const double *r = x + n * V;
        double m = -INFINITY, s = 0, mean = 0;
        for (int64_t k = 0; k < V; k++) m = fmax(m, r[k]);
        for (int64_t k = 0; k < V; k++) s += exp(r[k] - m), mean += r[k] / (double)V;
        double lse = m + log(s);
        rows[n] = t[n] == ignore ? 0 : (1 - eps) * (lse - r[t[n]]) + eps * (lse - mean);
        if (t[n] != ignore) cnt++;
        sum += rows[n];
    }
    return red == OJ_REDUCTION_MEAN ? sum / (double)cnt : sum;
}

static void test_cross_entropy_forward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 5}, ts[2] = {2, 3};
    int64_t tv[6] = {4, 0, -100, 2, 2, 1};
    double eps[2] = {0.0, 0.1};
    for (int dt = 0; dt < 2; dt++)
        for (int e = 0; e < 2; e++)
            for (int red = 0; red < 3; red++) {
                oj_dtype t = dt ? OJ_F64 : OJ_F32;
                oj_tensor *x = nt_rand(eng, 3, xs, t, -3, 3);
                oj_tensor *tg = nt_index(eng, 2, ts, dt ? OJ_I32 : OJ_I64, tv);
                oj_tensor *l = oj_cross_entropy(x, tg, -100, eps[e], (oj_reduction)red);
                assert_non_null(l);
                assert_int_equal(oj_tensor_dtype(l), t);
                double *xv = nt_host(x), rows[6];
                double want = ref_ce(xv, tv, 6, 5, -100, eps[e], red, rows);
                double *lv = nt_host(l);
                double tol = dt ? 1e-12 : 2e-6;
                if (red == OJ_REDUCTION_NONE) {
                    assert_int_equal(oj_rank(l), 2);
                    nt_close("cross_entropy none", lv, rows, 6, tol, tol);
                } else {
                    assert_int_equal(oj_rank(l), 0);
                    nt_close("cross_entropy", lv, &want, 1, tol, tol);
                }
                // nll_loss of log_softmax equals cross_entropy without smoothing
                if (e == 0) {
                    oj_tensor *ls = oj_log_softmax(x, -1);
                    oj_tensor *nl = oj_nll_loss(ls, tg, -100, (oj_reduction)red);
                    double *nv = nt_host(nl);
                    nt_close("nll_loss", nv, lv, red == OJ_REDUCTION_NONE ? 6 : 1, tol, tol);
                    free(nv);
                }
                free(xv);
                free(lv);
            }
    // every row ignored: mean is NaN (0/0) as torch, sum is 0
    int64_t n2[1] = {2}, x2s[2] = {2, 3}, ign[2] = {7, 7};
    oj_tensor *x2 = nt_rand(eng, 2, x2s, OJ_F32, -1, 1);
    oj_tensor *t2 = nt_index(eng, 1, n2, OJ_I64, ign);
    assert_true(isnan(oj_item(oj_cross_entropy(x2, t2, 7, 0.0, OJ_REDUCTION_MEAN))));
    assert_float_equal(oj_item(oj_cross_entropy(x2, t2, 7, 0.0, OJ_REDUCTION_SUM)), 0.0, 0);
    // huge logits stay finite
    double big[3] = {1e4, -1e4, 0};
    int64_t one[1] = {1}, s13[2] = {1, 3}, tgt0[1] = {0};
    oj_tensor *xb = nt_from(eng, 2, s13, OJ_F32, big);
    oj_tensor *tb = nt_index(eng, 1, one, OJ_I64, tgt0);
    assert_float_equal(oj_item(oj_cross_entropy(xb, tb, -100, 0.0, OJ_REDUCTION_MEAN)), 0.0, 1e-6);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

typedef struct {
    bool nll;
    double eps;
    int red;
    oj_tensor *t;
} ce_ctx;

static oj_tensor *ce_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    ce_ctx *c = ctx;
    oj_tensor *x = oj_transpose(in[0], 0, 1); // [5, 4] stored as [4, 5]^T, non-contiguous
    oj_tensor *y = c->nll ? oj_nll_loss(x, c->t, 3, (oj_reduction)c->red)
                          : oj_cross_entropy(x, c->t, 3, c->eps, (oj_reduction)c->red);
    oj_release(x);
    return y;
}

static void test_cross_entropy_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t xs[2] = {4, 5}, ts[1] = {5};
    int64_t tv[5] = {0, 3, 2, 1, 3}; // 3 is ignore_index (two rows)
    for (int nll = 0; nll < 2; nll++)
        for (int e = 0; e < 2; e++)
            for (int red = 0; red < 3; red++) {
                if (nll && e) continue;
                oj_scope_begin(eng);
                ce_ctx c = {nll, e ? 0.2 : 0.0, red, nt_index(eng, 1, ts, OJ_I64, tv)};
                oj_tensor *x = nt_leaf(eng, 2, xs, -2, 2);
                nt_gradcheck(eng, nll ? "nll_loss" : "cross_entropy", ce_fn, &c, &x, 1);
                if (!nll) { // ignored rows get exactly zero gradient
                    oj_zero_grad(x);
                    oj_tensor *l = ce_fn(&x, 1, &c);
                    if (red == OJ_REDUCTION_NONE) l = oj_sum_all(l);
                    assert_int_equal(oj_backward(l, false), OJ_OK);
                    double *g = nt_host(oj_grad(x)); // [4, 5]: column n is row n
                    for (int k = 0; k < 4; k++) {
                        assert_float_equal(g[k * 5 + 1], 0.0, 0);
                        assert_float_equal(g[k * 5 + 4], 0.0, 0);
                    }
                    free(g);
                }
                oj_scope_end(eng);
            }
    nt_engine_done(eng);
}

static void test_class_loss_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {3, 4}, ts[1] = {3}, t2[2] = {3, 1};
    oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -1, 1);
    int64_t bad[3] = {0, 1, 7}, neg[3] = {-1, 0, 0}, ok[3] = {0, 1, 2};
    nt_expect_error(eng, oj_cross_entropy(x, nt_index(eng, 1, ts, OJ_I64, bad), -100, 0, 0),
                    OJ_ERR_OUT_OF_RANGE, "cross_entropy", "target 7 at row 2");
    nt_expect_error(eng, oj_cross_entropy(x, nt_index(eng, 1, ts, OJ_I32, neg), -100, 0, 0),
                    OJ_ERR_OUT_OF_RANGE, "cross_entropy", "target -1 at row 0");
    nt_expect_error(eng, oj_nll_loss(x, nt_index(eng, 1, ts, OJ_I64, bad), -100, 0),
                    OJ_ERR_OUT_OF_RANGE, "nll_loss", "target 7");
    oj_tensor *tg = nt_index(eng, 1, ts, OJ_I64, ok);
    nt_expect_error(eng, oj_cross_entropy(x, nt_index(eng, 2, t2, OJ_I64, ok), -100, 0, 0),
                    OJ_ERR_SHAPE, "[3, 4]", "[3, 1]");
    nt_expect_error(eng, oj_cross_entropy(x, oj_cast(tg, OJ_F32), -100, 0, 0), OJ_ERR_DTYPE,
                    "targets", "f32");
    nt_expect_error(eng, oj_cross_entropy(oj_cast(x, OJ_I64), tg, -100, 0, 0), OJ_ERR_DTYPE,
                    "logits", NULL);
    nt_expect_error(eng, oj_cross_entropy(x, tg, -100, 1.5, 0), OJ_ERR_INVALID_ARGUMENT,
                    "label_smoothing", NULL);
    nt_expect_error(eng, oj_cross_entropy(x, tg, -100, 0, (oj_reduction)9),
                    OJ_ERR_INVALID_ARGUMENT, "reduction 9", NULL);
    nt_expect_error(eng, oj_softmax(x, 2), OJ_ERR_OUT_OF_RANGE, "softmax", "dim 2");
    nt_expect_error(eng, oj_log_softmax(tg, 0), OJ_ERR_DTYPE, "log_softmax", "i64");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* Row 0 of all -inf, row 1 [1, 2, -inf] (laid along dim 1 of a [2, 3] x,
 * or along dim 0 of its transpose); upstream gradient g0 on row 0 and
 * [0.5, -1, 2] on row 1. Returns dx as [2, 3] doubles (malloc'd). */
static double *minf_row_grad(oj_engine *eng, oj_dtype dt, bool logsm, bool inner, double g0) {
    double xv[6] = {-INFINITY, -INFINITY, -INFINITY, 1, 2, -INFINITY};
    double gv[6] = {g0, g0, g0, 0.5, -1, 2};
    int64_t sh[2] = {2, 3};
    oj_tensor *x = nt_from(eng, 2, sh, dt, xv);
    oj_set_requires_grad(x, true);
    oj_tensor *g = nt_from(eng, 2, sh, dt, gv);
    oj_tensor *xi = inner ? oj_transpose(x, 0, 1) : x; // rows along dim 0
    oj_tensor *gi = inner ? oj_transpose(g, 0, 1) : g;
    int dim = inner ? 0 : 1;
    oj_tensor *y = logsm ? oj_log_softmax(xi, dim) : oj_softmax(xi, dim);
    assert_non_null(y);
    if (oj_backward_seeded(y, gi, false) != OJ_OK) fail_msg("backward: %s", oj_last_error(eng));
    double *dx = nt_host(oj_grad(x));
    return dx;
}

// test: softmax / log_softmax backward on a row of all -inf: a zero
// upstream gradient gives exactly 0 (was NaN: y * (g - sum g y) with y
// NaN); a nonzero one gives NaN (documented); the finite row against
// float64, on the f32 SIMD rows, the double rows and an inner dim.
static void test_softmax_minf_row_backward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    double y1[3] = {1 / (1 + exp(1.0)), exp(1.0) / (1 + exp(1.0)), 0}; // softmax [1, 2, -inf]
    double g1[3] = {0.5, -1, 2};
    for (int dt = 0; dt < 2; dt++)
        for (int lg = 0; lg < 2; lg++)
            for (int in = 0; in < 2; in++) {
                oj_scope_begin(eng);
                oj_dtype t = dt ? OJ_F64 : OJ_F32;
                double *dx = minf_row_grad(eng, t, lg, in, 0.0);
                for (int k = 0; k < 3; k++)
                    if (dx[k] != 0.0 || signbit(dx[k]))
                        fail_msg("%s %s dim %d: dx[0][%d] = %g, want 0",
                                 lg ? "log_softmax" : "softmax", dt ? "f64" : "f32", in ? 0 : 1,
                                 k, dx[k]);
                double want[3], s = 0;
                for (int k = 0; k < 3; k++) s += lg ? g1[k] : g1[k] * y1[k];
                for (int k = 0; k < 3; k++) want[k] = lg ? g1[k] - y1[k] * s : y1[k] * (g1[k] - s);
                nt_close("softmax -inf row: finite row", dx + 3, want, 3, dt ? 1e-12 : 1e-6,
                         dt ? 1e-12 : 1e-5);
                free(dx);
                dx = minf_row_grad(eng, t, lg, in, 1.0);
                for (int k = 0; k < 3; k++)
                    if (!isnan(dx[k]))
                        fail_msg("nonzero gradient on a -inf row: dx[0][%d] = %g", k, dx[k]);
                free(dx);
                oj_scope_end(eng);
            }
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_forward),       cmocka_unit_test(test_softmax_gradcheck),
        cmocka_unit_test(test_cross_entropy_forward), cmocka_unit_test(test_cross_entropy_gradcheck),
        cmocka_unit_test(test_class_loss_errors),
        cmocka_unit_test(test_softmax_minf_row_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
