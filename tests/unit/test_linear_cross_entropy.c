// test: linear_cross_entropy equals cross_entropy(linear(x, W)) in value
// and gradients (f32 and f64, several chunks, ignored rows, label
// smoothing, mean and sum, an upstream gradient other than 1), works
// without grad and under bf16 autocast, and refuses bad arguments; the
// rows counted on the device for MEAN honour an ignore_index beyond 2^53
// (cross_entropy and nll_loss too). The backend's cross_entropy_fused
// gives the bits of cross_entropy_forward + cross_entropy_backward (every
// float dtype, ignored rows, label smoothing, in place, one row, a bad
// target's error); gradcheck in f64 with chunks of 1, 2 and 5 rows; the
// matmul kernel's f32-out form over bf16/f16 operands equals the f32
// product of the widened operands bit for bit (EXACT).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

static oj_engine *new_engine(void) {
    oj_engine *e = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 5;
    cfg.numerics = OJ_NUMERICS_EXACT;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

enum { B = 3, T = 13, C = 12, V = 23 };

static oj_tensor *make_targets(oj_engine *e, int64_t ignore) {
    int64_t t[B * T];
    for (int i = 0; i < B * T; i++) t[i] = i % 7 == 3 ? ignore : (i * 5 + 2) % V;
    return oj_from_host(e, 2, (int64_t[]){B, T}, OJ_I64, t, sizeof t);
}

static double max_rel(oj_tensor *a, oj_tensor *b) {
    int64_t n = oj_numel(b);
    assert_int_equal(oj_numel(a), n);
    double m = 0.0, ref = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double x = oj_item_at(a, i), y = oj_item_at(b, i);
        if (isnan(x) || isnan(y)) return INFINITY;
        m = fmax(m, fabs(x - y));
        ref = fmax(ref, fabs(y));
    }
    return m / ref;
}

static void compare(oj_dtype dt, oj_reduction red, double smoothing, double tol) {
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    oj_tensor *x = oj_rand_normal(e, 3, (int64_t[]){B, T, C}, dt, 0, 1);
    oj_tensor *w = oj_rand_normal(e, 2, (int64_t[]){V, C}, dt, 0, 0.5);
    oj_tensor *t = make_targets(e, -100);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    // reference: unfused, times 3 so the upstream gradient is not 1
    oj_tensor *ref = oj_mul_scalar(oj_cross_entropy(oj_linear(x, w, NULL), t, -100, smoothing, red), 3.0);
    assert_int_equal(oj_backward(ref, false), OJ_OK);
    oj_tensor *gx = oj_clone(oj_grad(x)), *gw = oj_clone(oj_grad(w));
    oj_zero_grad(x);
    oj_zero_grad(w);
    oj_tensor *got = oj_mul_scalar(oj_linear_cross_entropy(x, w, t, -100, smoothing, red), 3.0);
    if (got == NULL) fail_msg("%s", oj_last_error(e));
    assert_int_equal(oj_rank(got), 0);
    assert_int_equal(oj_backward(got, false), OJ_OK);
    double l_ref = oj_item(ref), l_got = oj_item(got);
    if (!(fabs(l_got - l_ref) <= tol * fabs(l_ref)))
        fail_msg("loss %.17g vs %.17g", l_got, l_ref);
    double ex = max_rel(oj_grad(x), gx), ew = max_rel(oj_grad(w), gw);
    if (!(ex <= tol && ew <= tol)) fail_msg("grad errors dx %g dw %g (tol %g)", ex, ew, tol);
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), dt);
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), dt);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static void test_matches_unfused(void **state) {
    (void)state;
    const char *chunks[] = {"1", "5", "39", "1000"};
    for (int c = 0; c < 4; c++) {
        setenv("OJAS_LCE_CHUNK_ROWS", chunks[c], 1);
        compare(OJ_F32, OJ_REDUCTION_MEAN, 0.0, 2e-6);
        compare(OJ_F32, OJ_REDUCTION_SUM, 0.1, 2e-6);
        compare(OJ_F64, OJ_REDUCTION_MEAN, 0.1, 1e-13);
        compare(OJ_F64, OJ_REDUCTION_SUM, 0.0, 1e-13);
    }
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    compare(OJ_F32, OJ_REDUCTION_MEAN, 0.0, 2e-6); // the default chunking
}

static void test_no_grad_and_autocast(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    oj_tensor *x = oj_rand_normal(e, 3, (int64_t[]){B, T, C}, OJ_F32, 0, 1);
    oj_tensor *w = oj_rand_normal(e, 2, (int64_t[]){V, C}, OJ_F32, 0, 0.5);
    oj_tensor *t = make_targets(e, -1);
    oj_set_requires_grad(w, true);
    double ref = oj_item(oj_cross_entropy(oj_linear(x, w, NULL), t, -1, 0.0, OJ_REDUCTION_MEAN));
    bool prev = oj_set_grad_enabled(e, false);
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_false(oj_requires_grad(l));
    assert_true(fabs(oj_item(l) - ref) <= 2e-6 * fabs(ref));
    oj_set_grad_enabled(e, prev);
    oj_set_autocast(e, true, OJ_BF16);
    oj_tensor *lb = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    oj_set_autocast(e, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(lb), OJ_F32);
    assert_true(fabs(oj_item(lb) - ref) <= 2e-2 * fabs(ref));
    assert_int_equal(oj_backward(lb, false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), OJ_F32); // through the autocast cast
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    oj_engine_free(e);
}

static void test_bad_arguments(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    oj_tensor *x = oj_rand_normal(e, 2, (int64_t[]){4, C}, OJ_F32, 0, 1);
    oj_tensor *w = oj_rand_normal(e, 2, (int64_t[]){V, C}, OJ_F32, 0, 1);
    oj_tensor *w64 = oj_cast(w, OJ_F64);
    oj_tensor *wbad = oj_rand_normal(e, 2, (int64_t[]){V, C + 1}, OJ_F32, 0, 1);
    int64_t tv[4] = {0, 1, 2, 3}, tbad[4] = {0, 1, V, 3}, tign[4] = {-1, -1, -1, -1};
    oj_tensor *t = oj_from_host(e, 1, (int64_t[]){4}, OJ_I64, tv, sizeof tv);
    oj_tensor *to = oj_from_host(e, 1, (int64_t[]){4}, OJ_I64, tbad, sizeof tbad);
    oj_tensor *ti = oj_from_host(e, 1, (int64_t[]){4}, OJ_I64, tign, sizeof tign);
    struct {
        oj_tensor *x, *w, *t;
        oj_reduction r;
        double eps;
        oj_status want;
    } cases[] = {
        {x, w, t, OJ_REDUCTION_NONE, 0.0, OJ_ERR_INVALID_ARGUMENT},
        {x, wbad, t, OJ_REDUCTION_MEAN, 0.0, OJ_ERR_SHAPE},
        {x, w64, t, OJ_REDUCTION_MEAN, 0.0, OJ_ERR_DTYPE},
        {x, w, x, OJ_REDUCTION_MEAN, 0.0, OJ_ERR_DTYPE},
        {x, w, to, OJ_REDUCTION_MEAN, 0.0, OJ_ERR_OUT_OF_RANGE},
        {x, w, t, OJ_REDUCTION_MEAN, 1.5, OJ_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oj_tensor *l = oj_linear_cross_entropy(cases[i].x, cases[i].w, cases[i].t, -1,
                                               cases[i].eps, cases[i].r);
        assert_null(l);
        if (oj_last_status(e) != cases[i].want)
            fail_msg("case %zu: status %d (%s)", i, oj_last_status(e), oj_last_error(e));
        assert_non_null(strstr(oj_last_error(e), "cross_entropy"));
        oj_clear_error(e);
    }
    // every row ignored: MEAN is NaN (0/0), SUM is 0, as torch
    assert_true(isnan(oj_item(oj_linear_cross_entropy(x, w, ti, -1, 0.0, OJ_REDUCTION_MEAN))));
    assert_true(oj_item(oj_linear_cross_entropy(x, w, ti, -1, 0.0, OJ_REDUCTION_SUM)) == 0.0);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    oj_engine_free(e);
}

/* MEAN counts rows on the device; an ignore_index that a double cannot
 * hold (beyond 2^53) must count like any other: the same rows ignored as
 * -100 gives the same loss and gradients, bit for bit. */
static void test_far_ignore_index(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    oj_tensor *x = oj_rand_normal(e, 3, (int64_t[]){B, T, C}, OJ_F32, 0, 1);
    oj_tensor *w = oj_rand_normal(e, 2, (int64_t[]){V, C}, OJ_F32, 0, 0.5);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    const int64_t far[3] = {-100, ((int64_t)1 << 60) + 1, INT64_MIN + 1};
    double loss[3][3];
    oj_tensor *grads[3][3];
    for (int f = 0; f < 3; f++) {
        oj_tensor *t = make_targets(e, far[f]);
        for (int k = 0; k < 3; k++) {
            oj_zero_grad(x);
            oj_zero_grad(w);
            oj_tensor *l = k == 0   ? oj_linear_cross_entropy(x, w, t, far[f], 0.1, OJ_REDUCTION_MEAN)
                           : k == 1 ? oj_cross_entropy(oj_linear(x, w, NULL), t, far[f], 0.1,
                                                       OJ_REDUCTION_MEAN)
                                    : oj_nll_loss(oj_log_softmax(oj_linear(x, w, NULL), -1), t,
                                                  far[f], OJ_REDUCTION_MEAN);
            if (l == NULL) fail_msg("%s", oj_last_error(e));
            assert_int_equal(oj_backward(l, false), OJ_OK);
            loss[f][k] = oj_item(l);
            grads[f][k] = oj_clone(oj_grad(w));
        }
    }
    for (int f = 1; f < 3; f++)
        for (int k = 0; k < 3; k++) {
            if (loss[f][k] != loss[0][k])
                fail_msg("op %d, ignore_index %lld: loss %.17g, with -100 %.17g", k,
                         (long long)far[f], loss[f][k], loss[0][k]);
            assert_true(max_rel(grads[f][k], grads[0][k]) == 0.0);
        }
    // every row ignored by a far ignore_index: NaN loss, zero gradients
    int64_t tall[B * T];
    for (int i = 0; i < B * T; i++) tall[i] = far[1];
    oj_tensor *ta = oj_from_host(e, 2, (int64_t[]){B, T}, OJ_I64, tall, sizeof tall);
    oj_zero_grad(w);
    oj_tensor *l = oj_linear_cross_entropy(x, w, ta, far[1], 0.0, OJ_REDUCTION_MEAN);
    assert_true(isnan(oj_item(l)));
    assert_int_equal(oj_backward(l, false), OJ_OK);
    for (int64_t i = 0; i < oj_numel(oj_grad(w)); i++) assert_true(oj_item_at(oj_grad(w), i) == 0.0);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

/* Host bytes of t (freed by the caller). */
static unsigned char *bytes_of(oj_tensor *t, size_t *n) {
    *n = (size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t));
    unsigned char *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    assert_int_equal(oj_to_host(t, b, *n), OJ_OK);
    return b;
}

static void assert_same_bits(oj_tensor *a, oj_tensor *b, const char *what) {
    size_t na, nb;
    unsigned char *x = bytes_of(a, &na), *y = bytes_of(b, &nb);
    assert_int_equal(na, nb);
    if (memcmp(x, y, na) != 0) fail_msg("%s: the bits differ", what);
    free(x);
    free(y);
}

/* cross_entropy_fused == forward then backward, bit for bit, on [N, Vc]
 * logits of dt; dlogits in a separate tensor and in place. */
static void fused_case(oj_engine *e, oj_dtype dt, int64_t N, int64_t Vc, double eps,
                       bool row_dloss) {
    const oj_backend *be = e->backend;
    oj_dtype sdt = dt == OJ_F64 ? OJ_F64 : OJ_F32;
    int64_t s[2] = {N, Vc};
    oj_tensor *x = oj_cast(oj_rand_normal(e, 2, s, OJ_F64, 0, 3), dt);
    int64_t *tv = malloc((size_t)N * sizeof *tv);
    for (int64_t i = 0; i < N; i++) tv[i] = i % 4 == 2 ? -7 : (i * 11 + 3) % Vc;
    oj_tensor *t = oj_from_host(e, 1, &N, OJ_I64, tv, (size_t)N * sizeof *tv);
    free(tv);
    oj_tensor *g = row_dloss ? oj_rand_normal(e, 1, &N, sdt, 0, 1)
                             : oj_expand(oj_full(e, 1, (int64_t[]){1}, sdt, 0.75), 1, &N);
    oj_tensor *lu = oj_empty(e, 1, &N, sdt), *su = oj_empty(e, 1, &N, sdt);
    oj_tensor *du = oj_empty(e, 2, s, dt);
    int64_t nu = -1, nf = -1, ni = -1;
    assert_int_equal(be->cross_entropy_forward(e, lu, su, x, t, -7, eps, &nu), OJ_OK);
    assert_int_equal(be->cross_entropy_backward(e, du, x, t, su, g, 0.5, -7, eps), OJ_OK);
    oj_tensor *lf = oj_empty(e, 1, &N, sdt), *sf = oj_empty(e, 1, &N, sdt);
    oj_tensor *df = oj_empty(e, 2, s, dt);
    assert_int_equal(be->cross_entropy_fused(e, lf, sf, df, x, t, g, 0.5, -7, eps, &nf), OJ_OK);
    oj_tensor *li = oj_empty(e, 1, &N, sdt), *si = oj_empty(e, 1, &N, sdt);
    oj_tensor *xi = oj_clone(x); /* in place: the gradient over the logits */
    assert_int_equal(be->cross_entropy_fused(e, li, si, xi, xi, t, g, 0.5, -7, eps, &ni), OJ_OK);
    assert_int_equal(nf, nu);
    assert_int_equal(ni, nu);
    assert_int_equal(nu, N - (N + 1) / 4);
    assert_same_bits(lf, lu, "loss");
    assert_same_bits(sf, su, "lse");
    assert_same_bits(df, du, "dlogits");
    assert_same_bits(li, lu, "loss (in place)");
    assert_same_bits(si, su, "lse (in place)");
    assert_same_bits(xi, du, "dlogits (in place)");
    /* not a trivial gradient: softmax - onehot sums to 0 over a counted row */
    double sum = 0.0, mx = Vc == 1 ? 1.0 : 0.0; /* one class: the gradient is 0 */
    for (int64_t k = 0; k < Vc; k++) {
        sum += oj_item_at(du, k);
        mx = fmax(mx, fabs(oj_item_at(du, k)));
    }
    assert_true(mx > 0.0 && fabs(sum) <= 1e-2 * mx + 1e-6);
}

static void test_fused_entry(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    assert_non_null(e->backend->cross_entropy_fused);
    oj_scope_begin(e);
    const oj_dtype dts[4] = {OJ_F32, OJ_F64, OJ_BF16, OJ_F16};
    const int64_t shapes[4][2] = {{9, 23}, {1, 37}, {6, 1}, {5, 1000}};
    for (int d = 0; d < 4; d++)
        for (int k = 0; k < 4; k++)
            for (int ls = 0; ls < 2; ls++)
                fused_case(e, dts[d], shapes[k][0], shapes[k][1], ls ? 0.1 : 0.0, (k + ls) % 2);
    /* a bad target: the forward's error, nothing else */
    int64_t N = 3, s[2] = {3, 10}, tb[3] = {1, 10, 2};
    oj_tensor *x = oj_rand_normal(e, 2, s, OJ_F32, 0, 1);
    oj_tensor *t = oj_from_host(e, 1, &N, OJ_I64, tb, sizeof tb);
    oj_tensor *l = oj_empty(e, 1, &N, OJ_F32), *lse = oj_empty(e, 1, &N, OJ_F32);
    oj_tensor *g = oj_ones(e, 1, &N, OJ_F32);
    assert_int_equal(e->backend->cross_entropy_forward(e, l, lse, x, t, -100, 0.0, NULL),
                     OJ_ERR_OUT_OF_RANGE);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", oj_last_error(e));
    oj_clear_error(e);
    assert_int_equal(e->backend->cross_entropy_fused(e, l, lse, x, x, t, g, 1.0, -100, 0.0, NULL),
                     OJ_ERR_OUT_OF_RANGE);
    assert_string_equal(oj_last_error(e), msg);
    oj_clear_error(e);
    /* lse is required: the gradient reads it */
    assert_int_equal(e->backend->cross_entropy_fused(e, l, NULL, x, x, t, g, 1.0, 10, 0.0, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(e);
    oj_scope_end(e);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

typedef struct {
    oj_tensor *t;
    double eps;
} lce_ctx;

static oj_tensor *lce_fn(oj_tensor *const *in, int n, void *vc) {
    (void)n;
    const lce_ctx *c = vc;
    return oj_linear_cross_entropy(in[0], in[1], c->t, -100, c->eps, OJ_REDUCTION_MEAN);
}

static void test_gradcheck_chunks(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    const char *chunks[] = {"1", "2", "5"};
    for (int c = 0; c < 3; c++) {
        setenv("OJAS_LCE_CHUNK_ROWS", chunks[c], 1);
        for (int ls = 0; ls < 2; ls++) {
            double eps = ls ? 0.1 : 0.0;
            oj_tensor *x = oj_rand_normal(e, 2, (int64_t[]){7, 5}, OJ_F64, 0, 1);
            oj_tensor *w = oj_rand_normal(e, 2, (int64_t[]){11, 5}, OJ_F64, 0, 0.7);
            int64_t tv[7] = {3, -100, 0, 10, 4, 4, -100};
            oj_tensor *t = oj_from_host(e, 1, (int64_t[]){7}, OJ_I64, tv, sizeof tv);
            oj_set_requires_grad(x, true);
            oj_set_requires_grad(w, true);
            oj_tensor *in[2] = {x, w};
            lce_ctx ctx = {t, eps};
            oj_status st = oj_gradcheck(e, lce_fn, &ctx, in, 2, NULL);
            if (st != OJ_OK) fail_msg("chunk %s eps %g: %s", chunks[c], eps, oj_last_error(e));
        }
    }
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    oj_scope_end(e);
    oj_engine_free(e);
}

/* matmul with an f32 out over bf16/f16 a and b (accumulating or not) ==
 * the same product of the operands widened to f32, bit for bit (EXACT:
 * one in-order f32 sum either way); a is a transposed view (as dlogits^T). */
static void test_matmul_mixed(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    const oj_dtype dts[2] = {OJ_BF16, OJ_F16};
    const int64_t dims[3][3] = {{7, 13, 5}, {1, 300, 9}, {40, 3, 33}}; /* M, K, N */
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 3; c++)
            for (int acc = 0; acc < 2; acc++) {
                int64_t M = dims[c][0], K = dims[c][1], N = dims[c][2];
                oj_tensor *at = oj_cast(oj_rand_normal(e, 3, (int64_t[]){1, K, M}, OJ_F32, 0, 1),
                                        dts[d]);
                oj_tensor *a = oj_transpose(at, 1, 2); /* [1, M, K], strides (., 1, M) */
                oj_tensor *b = oj_cast(oj_rand_normal(e, 3, (int64_t[]){1, K, N}, OJ_F32, 0, 1),
                                       dts[d]);
                oj_tensor *o0 = oj_rand_normal(e, 3, (int64_t[]){1, M, N}, OJ_F32, 0, 1);
                oj_tensor *got = oj_clone(o0), *ref = oj_clone(o0);
                oj_tensor *a32 = oj_cast(a, OJ_F32), *b32 = oj_cast(b, OJ_F32);
                assert_int_equal(e->backend->matmul(e, got, a, b, acc != 0), OJ_OK);
                assert_int_equal(e->backend->matmul(e, ref, a32, b32, acc != 0), OJ_OK);
                assert_same_bits(got, ref, "mixed matmul");
                /* and near the double product */
                double m = 0.0, r = 1e-30;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double v = acc ? oj_item_at(o0, i * N + j) : 0.0;
                        for (int64_t k = 0; k < K; k++)
                            v += oj_item_at(at, k * M + i) * oj_item_at(b, k * N + j);
                        m = fmax(m, fabs(oj_item_at(got, i * N + j) - v));
                        r = fmax(r, fabs(v));
                    }
                if (!(m <= 1e-5 * r)) fail_msg("mixed matmul off the double sum: %g of %g", m, r);
            }
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    oj_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_unfused),
        cmocka_unit_test(test_no_grad_and_autocast),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_far_ignore_index),
        cmocka_unit_test(test_fused_entry),
        cmocka_unit_test(test_gradcheck_chunks),
        cmocka_unit_test(test_matmul_mixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
