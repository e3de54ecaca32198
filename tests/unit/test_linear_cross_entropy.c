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
#include "ops/nn_common.h"
#include "nn_testutil.h"

/* This file's cases name their own engines `eng`; the shared ones use case_eng. */
#define ET_ENGINE case_eng
#include "engine_testutil.h"

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

// test: chunk rows fill 256 MiB of logits; OJAS_LCE_ROW_ALIGN evens the
// chunks out in multiples of its value without passing that budget
static void test_chunk_rows_align(void **state) {
    (void)state;
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    unsetenv("OJAS_LCE_ROW_ALIGN");
    assert_int_equal(oj__lce_chunk_rows(16384, 50304, 2), 2668);
    assert_int_equal(oj__lce_chunk_rows(1000, 50304, 2), 1000);
    setenv("OJAS_LCE_ROW_ALIGN", "128", 1);
    assert_int_equal(oj__lce_chunk_rows(16384, 50304, 2), 2432); // 7 chunks, the last 1792
    assert_int_equal(oj__lce_chunk_rows(3000, 50304, 2), 1536);  // 2 chunks
    assert_int_equal(oj__lce_chunk_rows(1000, 50304, 2), 1000);  // one chunk: N
    assert_int_equal(oj__lce_chunk_rows(16384, 1 << 20, 4), 64); // budget 64 rows: 64
    assert_int_equal(oj__lce_chunk_rows(5000, 50304, 4), 1280);  // even 1250 -> 1280
    // rounding up past the budget (r 1334 at f32, N 2668: even 1334) rounds r down
    assert_int_equal(oj__lce_chunk_rows(2668, 50304, 4), 1280);
    assert_int_equal(oj__lce_chunk_rows(2669, 50304, 4), 896); // 3 chunks
    assert_int_equal(oj__lce_chunk_rows(16384, 1 << 22, 4), 16); // r below the alignment
    setenv("OJAS_LCE_CHUNK_ROWS", "100", 1); // an explicit count stays as given
    assert_int_equal(oj__lce_chunk_rows(16384, 50304, 2), 100);
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    unsetenv("OJAS_LCE_ROW_ALIGN");
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

/* ---- linear_cross_entropy at its edges: all rows ignored, ignore_index a
 * class, smoothing 1, V 1, C 1, one row, bf16, chunks of 1 row, strided
 * inputs, empty batch, EXACT thread invariance (against cross_entropy of
 * linear); and every bad input (NULL, released, dtypes, shapes, scalars,
 * targets out of range, chunk sizes, capacity) a named error that leaves
 * the engine sane and leaks nothing */

/* ---------------------------------------------------------------- linear_cross_entropy */

static void lce_case(oj_engine *eng, const char *what, oj_dtype dt, int64_t N, int64_t Cw, int64_t Vw,
                     const int64_t *tg, int64_t ignore, double ls, oj_reduction red, double tol) {
    int64_t xs[2] = {N, Cw}, ws[2] = {Vw, Cw}, ts[1] = {N};
    oj_tensor *x0 = nt_rand(eng, 2, xs, dt, -2, 2), *w0 = nt_rand(eng, 2, ws, dt, -1, 1);
    oj_tensor *t = oj_from_host(eng, 1, ts, OJ_I64, tg, (size_t)N * sizeof(int64_t));
    oj_tensor *l[2], *gx[2], *gw[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *x = oj_set_requires_grad(oj_clone(x0), true);
        oj_tensor *w = oj_set_requires_grad(oj_clone(w0), true);
        if (f) {
            l[f] = oj_linear_cross_entropy(x, w, t, ignore, ls, red);
        } else { /* in f32 (f64) from the same values: the fused op's loss dtype */
            oj_dtype wd = dt == OJ_F64 ? OJ_F64 : OJ_F32;
            l[f] = oj_cross_entropy(oj_linear(oj_cast(x, wd), oj_cast(w, wd), NULL), t, ignore, ls,
                                    red);
        }
        if (l[f] == NULL)
            fail_msg("%s: %s", what, oj_last_error(eng));
        assert_int_equal(oj_backward(oj_mul_scalar(l[f], 2.5), true), OJ_OK);
        assert_int_equal(oj_backward(l[f], false), OJ_OK); /* twice: 3.5 times the gradient */
        gx[f] = oj_grad(x);
        gw[f] = oj_grad(w);
    }
    char b[128];
    snprintf(b, sizeof b, "%s loss", what);
    nt_close_tensors(b, l[1], l[0], tol, tol);
    snprintf(b, sizeof b, "%s dx", what);
    nt_close_tensors(b, gx[1], gx[0], tol, tol);
    snprintf(b, sizeof b, "%s dw", what);
    nt_close_tensors(b, gw[1], gw[0], tol, tol);
}

static void test_lce_corners(void **state) {
    (void)state;
    const char *chunks[3] = {"1", "2", NULL};
    for (int c = 0; c < 3; c++) {
        if (chunks[c])
            setenv("OJAS_LCE_CHUNK_ROWS", chunks[c], 1);
        else
            unsetenv("OJAS_LCE_CHUNK_ROWS");
        oj_engine *eng = nt_engine();
        oj_scope_begin(eng);
        const int64_t all_ig[5] = {-100, -100, -100, -100, -100}, mixed[5] = {0, 2, -100, 1, 0};
        const int64_t ig0[5] = {0, 0, 0, 0, 0}, zeros[5] = {0, 0, 0, 0, 0};
        const oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
        const double tols[3] = {1e-5, 1e-12, 2e-2};
        for (int k = 0; k < 3; k++)
            for (int r = 0; r < 2; r++) {
                oj_reduction red = r ? OJ_REDUCTION_SUM : OJ_REDUCTION_MEAN;
                double tol = tols[k];
                lce_case(eng, "all ignored", dts[k], 5, 4, 3, all_ig, -100, 0.0, red, tol);
                lce_case(eng, "all ignored smooth", dts[k], 5, 4, 3, all_ig, -100, 0.3, red, tol);
                lce_case(eng, "ignore 0", dts[k], 5, 4, 3, ig0, 0, 0.1, red, tol);
                lce_case(eng, "smoothing 1", dts[k], 5, 4, 3, mixed, -100, 1.0, red, tol);
                lce_case(eng, "V 1", dts[k], 5, 4, 1, zeros, -100, 0.0, red, tol);
                lce_case(eng, "V 1 smooth 1", dts[k], 5, 4, 1, zeros, -100, 1.0, red, tol);
                lce_case(eng, "one row", dts[k], 1, 6, 3, mixed + 1, -100, 0.2, red, tol);
                lce_case(eng, "C 1", dts[k], 5, 1, 3, mixed, -100, 0.0, red, tol);
            }
        oj_scope_end(eng);
        nt_engine_done(eng);
    }
    unsetenv("OJAS_LCE_CHUNK_ROWS");
}

/* strided x and weight, empty batch, bad arguments */
static void test_lce_views_errors(void **state) {
    (void)state;
    setenv("OJAS_LCE_CHUNK_ROWS", "1", 1);
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t N = 4, Cw = 5, Vw = 6;
    int64_t xt[2] = {Cw, N}, wt[2] = {Cw, Vw}, ts[1] = {N}, tg[4] = {1, 5, -100, 0};
    oj_tensor *t = oj_from_host(eng, 1, ts, OJ_I64, tg, sizeof tg);
    oj_tensor *x0 = nt_rand(eng, 2, xt, OJ_F64, -2, 2), *w0 = nt_rand(eng, 2, wt, OJ_F64, -1, 1);
    oj_tensor *l[2], *gx[2], *gw[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *xl = oj_set_requires_grad(oj_clone(x0), true);
        oj_tensor *wl = oj_set_requires_grad(oj_clone(w0), true);
        oj_tensor *x = oj_transpose(xl, 0, 1), *w = oj_transpose(wl, 0, 1);
        l[f] = f ? oj_linear_cross_entropy(x, w, t, -100, 0.1, OJ_REDUCTION_MEAN)
                 : oj_cross_entropy(oj_linear(x, w, NULL), t, -100, 0.1, OJ_REDUCTION_MEAN);
        assert_non_null(l[f]);
        assert_int_equal(oj_backward(l[f], false), OJ_OK);
        gx[f] = oj_grad(xl);
        gw[f] = oj_grad(wl);
    }
    nt_close_tensors("strided loss", l[1], l[0], 1e-12, 1e-12);
    nt_close_tensors("strided dx", gx[1], gx[0], 1e-12, 1e-12);
    nt_close_tensors("strided dw", gw[1], gw[0], 1e-12, 1e-12);
    /* empty batch */
    int64_t e2[2] = {0, Cw}, e1[1] = {0}, w2[2] = {Vw, Cw};
    oj_tensor *xe = oj_set_requires_grad(nt_rand(eng, 2, e2, OJ_F32, -1, 1), true);
    oj_tensor *we = oj_set_requires_grad(nt_rand(eng, 2, w2, OJ_F32, -1, 1), true);
    oj_tensor *te = oj_zeros(eng, 1, e1, OJ_I64);
    oj_tensor *ls = oj_linear_cross_entropy(xe, we, te, -100, 0.0, OJ_REDUCTION_SUM);
    if (ls == NULL)
        fail_msg("empty batch: %s", oj_last_error(eng));
    assert_true(oj_item(ls) == 0.0);
    assert_int_equal(oj_backward(ls, false), OJ_OK);
    oj_tensor *lm = oj_linear_cross_entropy(xe, we, te, -100, 0.0, OJ_REDUCTION_MEAN);
    assert_non_null(lm);
    assert_true(isnan(oj_item(lm)));
    /* errors */
    oj_tensor *x = nt_rand(eng, 2, (int64_t[]){N, Cw}, OJ_F32, -1, 1);
    oj_tensor *w = nt_rand(eng, 2, w2, OJ_F32, -1, 1);
    nt_expect_error(eng, oj_linear_cross_entropy(x, w, t, -100, NAN, OJ_REDUCTION_MEAN),
                    OJ_ERR_INVALID_ARGUMENT, "label_smoothing", NULL);
    nt_expect_error(eng, oj_linear_cross_entropy(x, w, t, -100, 1.5, OJ_REDUCTION_MEAN),
                    OJ_ERR_INVALID_ARGUMENT, "label_smoothing", NULL);
    nt_expect_error(eng, oj_linear_cross_entropy(x, w, t, -100, 0.0, OJ_REDUCTION_NONE),
                    OJ_ERR_INVALID_ARGUMENT, "reduction", NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, oj_cast(w, OJ_BF16), t, -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_DTYPE, "weight", NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, w, oj_cast(t, OJ_F32), -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_DTYPE, "targets", NULL);
    int64_t bad[4] = {1, 6, 0, 0};
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, w, oj_from_host(eng, 1, ts, OJ_I64, bad, sizeof bad),
                                            -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_OUT_OF_RANGE, NULL, NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, nt_rand(eng, 2, (int64_t[]){0, Cw}, OJ_F32, 0, 1), t,
                                            -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_SHAPE, NULL, NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, w, nt_rand(eng, 1, (int64_t[]){N + 1}, OJ_F32, 0, 1),
                                            -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_DTYPE, NULL, NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
    unsetenv("OJAS_LCE_CHUNK_ROWS");
}

/* linear_cross_entropy in bf16 under EXACT numerics: the same bits for
 * 1, 2 and 3 threads and chunks of 1 and 3 rows equal to each other in
 * the loss (the dW sums run in the matmul kernel's f32 accumulation) */
static void test_lce_exact_threads(void **state) {
    (void)state;
    double ref[3] = {0, 0, 0};
    for (int t = 0; t < 3; t++) {
        oj_engine *e = NULL;
        oj_engine_config cfg = oj_engine_config_default();
        cfg.seed = 9;
        cfg.threads = t + 1;
        cfg.numerics = OJ_NUMERICS_EXACT;
        assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
        oj_scope_begin(e);
        int64_t xs[2] = {33, 40}, ws[2] = {77, 40}, ts[1] = {33}, tg[33];
        for (int i = 0; i < 33; i++)
            tg[i] = i % 5 == 0 ? -100 : (i * 13) % 77;
        oj_tensor *x = oj_set_requires_grad(nt_rand(e, 2, xs, OJ_BF16, -2, 2), true);
        oj_tensor *w = oj_set_requires_grad(nt_rand(e, 2, ws, OJ_BF16, -1, 1), true);
        oj_tensor *tt = oj_from_host(e, 1, ts, OJ_I64, tg, sizeof tg);
        setenv("OJAS_LCE_CHUNK_ROWS", "4", 1);
        oj_tensor *l = oj_linear_cross_entropy(x, w, tt, -100, 0.05, OJ_REDUCTION_MEAN);
        unsetenv("OJAS_LCE_CHUNK_ROWS");
        assert_non_null(l);
        assert_int_equal(oj_backward(l, false), OJ_OK);
        double *gx = nt_host(oj_grad(x)), *gw = nt_host(oj_grad(w));
        double sx = 0, sw = 0;
        for (int i = 0; i < 33 * 40; i++)
            sx += gx[i] * (i + 1);
        for (int i = 0; i < 77 * 40; i++)
            sw += gw[i] * (i + 1);
        free(gx);
        free(gw);
        double got[3] = {oj_item(l), sx, sw};
        if (t == 0)
            memcpy(ref, got, sizeof ref);
        for (int k = 0; k < 3; k++)
            if (memcmp(&got[k], &ref[k], sizeof(double)) != 0)
                fail_msg("threads %d: value %d %.17g vs %.17g", t + 1, k, got[k], ref[k]);
        oj_scope_end(e);
        nt_engine_done(e);
    }
}

static oj_tensor *randn_dt(int rank, const int64_t *shape, oj_dtype dt) {
    oj_tensor *t = oj_rand_normal(case_eng, rank, shape, OJ_F32, 0.0, 1.0);
    if (dt == OJ_F32) return t;
    oj_tensor *c = oj_cast(t, dt);
    oj_release(t);
    return c;
}

static oj_tensor *targets_i64(int n, const int64_t *v) {
    return oj_from_host(case_eng, 1, (int64_t[]){n}, OJ_I64, v, (size_t)n * sizeof *v);
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

/* ------------------------------------------------- linear_cross_entropy */

enum { LV = 7, LC = 5 };

/* NULL and released arguments: NULL returns NULL (nothing else recorded),
 * a released one is OJ_ERR_INVALID_ARGUMENT "released". */
static void test_lce_null_and_released(void **state) {
    (void)state;
    oj_tensor *x = randn_dt(2, (int64_t[]){3, LC}, OJ_F32), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 1, 2});
    assert_null(oj_linear_cross_entropy(NULL, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
    assert_null(oj_linear_cross_entropy(x, NULL, t, -1, 0.0, OJ_REDUCTION_MEAN));
    assert_null(oj_linear_cross_entropy(x, w, NULL, -1, 0.0, OJ_REDUCTION_MEAN));
    oj_clear_error(case_eng);
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
    oj_tensor *x = randn_dt(2, (int64_t[]){3, LC}, OJ_F32), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
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
        assert_int_equal(oj_last_status(case_eng), OJ_ERR_DTYPE);
        if (!strstr(oj_last_error(case_eng), "linear_cross_entropy") ||
            !strstr(oj_last_error(case_eng), cases[i].frag))
            fail_msg("case %zu: %s", i, oj_last_error(case_eng));
        oj_clear_error(case_eng);
    }
    oj_tensor *ts[] = {x, w, t, xi, w64, tf, xb};
    for (size_t i = 0; i < 7; i++) oj_release(ts[i]);
}

/* Wrong shapes: rank-0 x, weight of rank 1 or 3, C mismatch, V = 0,
 * targets of the wrong rank or size: OJ_ERR_SHAPE naming the shapes. */
static void test_lce_bad_shapes(void **state) {
    (void)state;
    oj_tensor *x = randn_dt(2, (int64_t[]){3, LC}, OJ_F32), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *x0 = oj_full(case_eng, 0, NULL, OJ_F32, 1.0);
    oj_tensor *w1 = randn_dt(1, (int64_t[]){LC}, OJ_F32);
    oj_tensor *w3 = randn_dt(3, (int64_t[]){1, LV, LC}, OJ_F32);
    oj_tensor *wc = randn_dt(2, (int64_t[]){LV, LC + 1}, OJ_F32);
    oj_tensor *wv0 = oj_zeros(case_eng, 2, (int64_t[]){0, LC}, OJ_F32);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 1, 2}), *t2 = targets_i64(2, (int64_t[]){0, 1});
    oj_tensor *tr2 = oj_zeros(case_eng, 2, (int64_t[]){3, 1}, OJ_I64);
    oj_tensor *t0 = oj_zeros(case_eng, 0, NULL, OJ_I64);
    struct {
        oj_tensor *x, *w, *t;
    } cases[] = {{x0, w, t0}, {x, w1, t}, {x, w3, t}, {x, wc, t}, {x, wv0, t}, {x, w, t2}, {x, w, tr2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_null(oj_linear_cross_entropy(cases[i].x, cases[i].w, cases[i].t, -1, 0.0,
                                            OJ_REDUCTION_SUM));
        if (oj_last_status(case_eng) != OJ_ERR_SHAPE || !strstr(oj_last_error(case_eng), "do not fit"))
            fail_msg("case %zu: %d %s", i, oj_last_status(case_eng), oj_last_error(case_eng));
        oj_clear_error(case_eng);
    }
    oj_tensor *ts[] = {x, w, x0, w1, w3, wc, wv0, t, t2, tr2, t0};
    for (size_t i = 0; i < 11; i++) oj_release(ts[i]);
}

/* label_smoothing NaN, negative, > 1 and reduction NONE or out of the
 * enum: OJ_ERR_INVALID_ARGUMENT naming the argument; 1.0 is allowed. */
static void test_lce_bad_scalars(void **state) {
    (void)state;
    oj_tensor *x = randn_dt(2, (int64_t[]){3, LC}, OJ_F32), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
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
    oj_tensor *x = randn_dt(2, (int64_t[]){3, LC}, OJ_F32), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    int64_t bad[][3] = {{0, 1, LV}, {0, -2, 1}, {INT64_MAX, 0, 0}, {0, 0, INT64_MIN}};
    int64_t live = oj_engine_live_tensors(case_eng);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        oj_tensor *t = targets_i64(3, bad[i]);
        assert_null(oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
        ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "target");
        assert_true(oj_grad_enabled(case_eng));
        oj_release(t);
        assert_int_equal(oj_engine_live_tensors(case_eng), live);
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
    oj_tensor *x = randn_dt(2, (int64_t[]){3, LC}, OJ_F32), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
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
    oj_tensor *x = oj_zeros(case_eng, 2, (int64_t[]){0, LC}, OJ_F32);
    oj_tensor *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_tensor *t = oj_zeros(case_eng, 1, (int64_t[]){0}, OJ_I64);
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
    assert_int_equal(oj_last_status(case_eng), OJ_OK);
    oj_tensor *ts[] = {x, w, t, ls, lm};
    for (size_t i = 0; i < 5; i++) oj_release(ts[i]);
}

/* C = 0 features: every logit is 0, so each row's loss is log V and the
 * weight's gradient [V, 0] is empty. */
static void test_lce_zero_features(void **state) {
    (void)state;
    oj_tensor *x = oj_zeros(case_eng, 2, (int64_t[]){3, 0}, OJ_F32);
    oj_tensor *w = oj_zeros(case_eng, 2, (int64_t[]){LV, 0}, OJ_F32);
    oj_set_requires_grad(w, true);
    oj_tensor *t = targets_i64(3, (int64_t[]){0, 3, 6});
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    if (l == NULL) fail_msg("%s", oj_last_error(case_eng));
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
    oj_tensor *x = randn_dt(3, (int64_t[]){2, 5, LC}, OJ_F32);
    oj_tensor *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    int64_t tv[10] = {0, 1, 2, 3, 4, 5, 6, -1, 3, 2};
    oj_tensor *t = oj_from_host(case_eng, 2, (int64_t[]){2, 5}, OJ_I64, tv, sizeof tv);
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
        if (l == NULL) fail_msg("env '%s': %s", envs[i], oj_last_error(case_eng));
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
    oj_tensor *xt = randn_dt(2, (int64_t[]){LC, 4}, OJ_F32), *wt = randn_dt(2, (int64_t[]){LC, LV}, OJ_F32);
    oj_tensor *x = oj_transpose(xt, 0, 1), *w = oj_transpose(wt, 0, 1);
    int32_t tv[4] = {6, 0, 3, 1};
    oj_tensor *t = oj_from_host(case_eng, 1, (int64_t[]){4}, OJ_I32, tv, sizeof tv);
    oj_tensor *l = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_SUM);
    oj_tensor *r = oj_cross_entropy(oj_linear(x, w, NULL), t, -1, 0.0, OJ_REDUCTION_SUM);
    if (l == NULL) fail_msg("%s", oj_last_error(case_eng));
    assert_true(fabs(oj_item(l) - oj_item(r)) <= 1e-5 * fabs(oj_item(r)));
    oj_tensor *ts[] = {xt, wt, x, w, t, l, r};
    for (size_t i = 0; i < 7; i++) oj_release(ts[i]);
}

/* Under autocast: f64 inputs are left in f64 (an f64 loss, equal to the
 * loss with autocast off); f32 inputs give an f32 loss whose gradients are
 * f32 and finite; bf16 inputs with f32 weight are accepted (both cast). */
static void test_lce_under_autocast(void **state) {
    (void)state;
    oj_tensor *x = randn_dt(2, (int64_t[]){4, LC}, OJ_F64), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F64);
    oj_tensor *t = targets_i64(4, (int64_t[]){0, 1, 2, 6});
    oj_tensor *ref = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    oj_set_autocast(case_eng, true, OJ_BF16);
    oj_tensor *got = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_int_equal(oj_tensor_dtype(got), OJ_F64);
    assert_true(oj_item(got) == oj_item(ref));
    oj_tensor *x32 = oj_cast(x, OJ_F32), *w32 = oj_cast(w, OJ_F32), *xb = oj_cast(x, OJ_BF16);
    oj_set_requires_grad(w32, true);
    oj_tensor *l = oj_linear_cross_entropy(x32, w32, t, -1, 0.0, OJ_REDUCTION_MEAN);
    oj_tensor *lb = oj_linear_cross_entropy(xb, w32, t, -1, 0.0, OJ_REDUCTION_SUM);
    oj_set_autocast(case_eng, false, OJ_BF16);
    if (l == NULL || lb == NULL) fail_msg("%s", oj_last_error(case_eng));
    assert_int_equal(oj_tensor_dtype(l), OJ_F32);
    assert_true(fabs(oj_item(l) - oj_item(ref)) < 0.05 * fabs(oj_item(ref)));
    assert_int_equal(oj_backward(l, false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(w32)), OJ_F32);
    assert_true(all_finite(oj_grad(w32)));
    /* f64 weight with f32 x under autocast: still a dtype error */
    oj_set_autocast(case_eng, true, OJ_BF16);
    assert_null(oj_linear_cross_entropy(x32, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "weight");
    oj_set_autocast(case_eng, false, OJ_BF16);
    oj_tensor *ts[] = {x, w, t, ref, got, x32, w32, xb, l, lb};
    for (size_t i = 0; i < 10; i++) oj_release(ts[i]);
}

/* The fused loss keeps dx and dW in its node: retain_graph gives a second
 * backward that adds exactly the same gradients again. */
static void test_lce_retain_graph(void **state) {
    (void)state;
    oj_tensor *x = randn_dt(2, (int64_t[]){4, LC}, OJ_F32), *w = randn_dt(2, (int64_t[]){LV, LC}, OJ_F32);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_unfused),
        cmocka_unit_test(test_chunk_rows_align),
        cmocka_unit_test(test_no_grad_and_autocast),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_far_ignore_index),
        cmocka_unit_test(test_fused_entry),
        cmocka_unit_test(test_gradcheck_chunks),
        cmocka_unit_test(test_matmul_mixed),
        cmocka_unit_test(test_lce_corners),
        cmocka_unit_test(test_lce_views_errors),
        cmocka_unit_test(test_lce_exact_threads),
        cmocka_unit_test_setup_teardown(test_lce_null_and_released, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_bad_dtypes, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_bad_shapes, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_bad_scalars, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_target_out_of_range, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_all_ignored_grads_are_zero, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_zero_rows, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_zero_features, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_chunk_env, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_views_and_i32_targets, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_under_autocast, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_retain_graph, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_lce_capacity, et_engine_in, et_engine_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
