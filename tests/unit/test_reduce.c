// test: reductions — prod, max/min with indices, amax/amin, argmax/argmin,
// var/std, logsumexp, norm, cumsum, any/all: forward values against hand
// computation, NaN/tie/empty edge cases, gradcheck on plain, transposed and
// expanded inputs and zero-size dims, gradients at zeros and ties, bad input;
// integer sum/prod/max/min/argmax exact above 2^53 and wrapping as torch.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/ops.h"

static oj_engine *eng_new(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 5;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

static void expect(oj_tensor *t, int rank, const int64_t *shape, const double *want, int n,
                   double tol) {
    assert_non_null(t);
    assert_int_equal(oj_rank(t), rank);
    for (int d = 0; d < rank; d++) assert_int_equal(oj_size(t, d), shape[d]);
    assert_int_equal(oj_numel(t), n);
    for (int i = 0; i < n; i++) {
        double v = oj_item_at(t, i);
        if (isnan(want[i])) {
            if (!isnan(v)) fail_msg("element %d: got %g, want nan", i, v);
        } else if (isinf(want[i])) {
            if (v != want[i]) fail_msg("element %d: got %g, want %g", i, v, want[i]);
        } else if (fabs(v - want[i]) > tol * (1 + fabs(want[i]))) {
            fail_msg("element %d: got %.17g, want %.17g", i, v, want[i]);
        }
    }
}

// x = [[1, -2, 3], [4, 0, -6]]
static oj_tensor *sample(oj_engine *eng, oj_dtype dt) {
    double v[6] = {1, -2, 3, 4, 0, -6};
    oj_tensor *t = oj_from_host(eng, 2, (int64_t[]){2, 3}, OJ_F64, v, sizeof v);
    oj_tensor *c = oj_cast(t, dt);
    oj_release(t);
    return c;
}

static void test_forward_values(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    for (int k = 0; k < 2; k++) {
        oj_dtype dt = k ? OJ_F32 : OJ_F64;
        double tol = k ? 1e-6 : 1e-14;
        oj_scope_begin(eng);
        oj_tensor *x = sample(eng, dt);
        int d0 = 0, d1 = 1, dm1 = -1, both[2] = {0, 1};
        expect(oj_prod(x, 1, &d1, false), 1, (int64_t[]){2}, (double[]){-6, 0}, 2, tol);
        expect(oj_prod(x, 0, NULL, false), 0, NULL, (double[]){0}, 1, tol);
        expect(oj_prod(x, 1, &d0, true), 2, (int64_t[]){1, 3}, (double[]){4, 0, -18}, 3, tol);

        oj_tensor *idx = NULL;
        oj_tensor *mx = oj_max(x, 1, false, &idx);
        expect(mx, 1, (int64_t[]){2}, (double[]){3, 4}, 2, tol);
        assert_int_equal(oj_tensor_dtype(idx), OJ_I64);
        expect(idx, 1, (int64_t[]){2}, (double[]){2, 0}, 2, 0);
        oj_tensor *mn = oj_min(x, 0, true, &idx);
        expect(mn, 2, (int64_t[]){1, 3}, (double[]){1, -2, -6}, 3, tol);
        expect(idx, 2, (int64_t[]){1, 3}, (double[]){0, 0, 1}, 3, 0);
        expect(oj_max(x, -1, true, NULL), 2, (int64_t[]){2, 1}, (double[]){3, 4}, 2, tol);

        expect(oj_amax(x, 2, both, false), 0, NULL, (double[]){4}, 1, tol);
        expect(oj_amin(x, 0, NULL, true), 2, (int64_t[]){1, 1}, (double[]){-6}, 1, tol);
        expect(oj_amax(x, 1, &d0, false), 1, (int64_t[]){3}, (double[]){4, 0, 3}, 3, tol);

        oj_tensor *am = oj_argmax(x, 0, false);
        assert_int_equal(oj_tensor_dtype(am), OJ_I64);
        expect(am, 1, (int64_t[]){3}, (double[]){1, 1, 0}, 3, 0);
        expect(oj_argmin(x, 1, true), 2, (int64_t[]){2, 1}, (double[]){1, 2}, 2, 0);

        // var/std of each row; means 2/3 and -2/3
        double m0 = 2.0 / 3, m1 = -2.0 / 3;
        double ss0 = (1 - m0) * (1 - m0) + (-2 - m0) * (-2 - m0) + (3 - m0) * (3 - m0);
        double ss1 = (4 - m1) * (4 - m1) + (0 - m1) * (0 - m1) + (-6 - m1) * (-6 - m1);
        expect(oj_var(x, 1, &d1, 1, false), 1, (int64_t[]){2}, (double[]){ss0 / 2, ss1 / 2}, 2,
               tol);
        expect(oj_var(x, 1, &dm1, 0, true), 2, (int64_t[]){2, 1}, (double[]){ss0 / 3, ss1 / 3}, 2,
               tol);
        expect(oj_std(x, 1, &d1, 1, false), 1, (int64_t[]){2},
               (double[]){sqrt(ss0 / 2), sqrt(ss1 / 2)}, 2, tol);
        double mall = 0.0, ssall = 0, xs[6] = {1, -2, 3, 4, 0, -6};
        for (int i = 0; i < 6; i++) ssall += (xs[i] - mall) * (xs[i] - mall);
        expect(oj_std(x, 0, NULL, 1, false), 0, NULL, (double[]){sqrt(ssall / 5)}, 1, tol);

        expect(oj_logsumexp(x, 1, &d1, false), 1, (int64_t[]){2},
               (double[]){log(exp(1) + exp(-2) + exp(3)), log(exp(4) + 1 + exp(-6))}, 2, tol);

        expect(oj_norm(x, 1, 0, NULL, false), 0, NULL, (double[]){16}, 1, tol);
        expect(oj_norm(x, 2, 0, NULL, false), 0, NULL, (double[]){sqrt(66)}, 1, tol);
        expect(oj_norm(x, INFINITY, 1, &d1, false), 1, (int64_t[]){2}, (double[]){3, 6}, 2, tol);
        expect(oj_norm(x, 2, 1, &d0, true), 2, (int64_t[]){1, 3},
               (double[]){sqrt(17), 2, sqrt(45)}, 3, tol);

        expect(oj_cumsum(x, 1), 2, (int64_t[]){2, 3}, (double[]){1, -1, 2, 4, 4, -2}, 6, tol);
        expect(oj_cumsum(x, -2), 2, (int64_t[]){2, 3}, (double[]){1, -2, 3, 5, -2, -3}, 6, tol);

        oj_tensor *an = oj_any(x, 1, &d1, false), *al = oj_all(x, 1, &d1, false);
        assert_int_equal(oj_tensor_dtype(an), OJ_BOOL);
        expect(an, 1, (int64_t[]){2}, (double[]){1, 1}, 2, 0);
        expect(al, 1, (int64_t[]){2}, (double[]){1, 0}, 2, 0);
        expect(oj_all(x, 1, &d0, true), 2, (int64_t[]){1, 3}, (double[]){1, 0, 1}, 3, 0);
        oj_scope_end(eng);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_edge_cases(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int d0 = 0;
    // NaN propagates through max/argmax (index of the NaN) and norms
    double nv[4] = {1, NAN, 5, 2};
    oj_tensor *xn = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, nv, sizeof nv);
    oj_tensor *idx = NULL;
    expect(oj_max(xn, 0, false, &idx), 0, NULL, (double[]){NAN}, 1, 0);
    expect(idx, 0, NULL, (double[]){1}, 1, 0);
    expect(oj_argmin(xn, 0, false), 0, NULL, (double[]){1}, 1, 0);
    expect(oj_amax(xn, 0, NULL, false), 0, NULL, (double[]){NAN}, 1, 0);
    expect(oj_norm(xn, INFINITY, 0, NULL, false), 0, NULL, (double[]){NAN}, 1, 0);
    expect(oj_logsumexp(xn, 0, NULL, false), 0, NULL, (double[]){NAN}, 1, 0);
    expect(oj_any(xn, 0, NULL, false), 0, NULL, (double[]){1}, 1, 0);

    // ties: the first occurrence wins
    double tv[4] = {2, 7, 7, 1};
    oj_tensor *xt = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, tv, sizeof tv);
    oj_max(xt, 0, false, &idx);
    expect(idx, 0, NULL, (double[]){1}, 1, 0);
    expect(oj_argmax(xt, -1, false), 0, NULL, (double[]){1}, 1, 0);

    // var: 0/0 is NaN, x/0 is inf (torch's max(0, N - correction))
    oj_tensor *one = oj_full(eng, 1, (int64_t[]){1}, OJ_F64, 3.0);
    expect(oj_var(one, 0, NULL, 1, false), 0, NULL, (double[]){NAN}, 1, 0);
    double pv[2] = {1, 2};
    oj_tensor *two = oj_from_host(eng, 1, (int64_t[]){2}, OJ_F64, pv, sizeof pv);
    expect(oj_var(two, 0, NULL, 2, false), 0, NULL, (double[]){INFINITY}, 1, 0);

    // logsumexp: all -inf gives -inf; +inf gives inf; large values stay finite
    double iv[3] = {-INFINITY, -INFINITY, -INFINITY}, jv[3] = {1, INFINITY, INFINITY};
    double bv[2] = {1000, 1000};
    expect(oj_logsumexp(oj_from_host(eng, 1, (int64_t[]){3}, OJ_F64, iv, sizeof iv), 0, NULL,
                        false),
           0, NULL, (double[]){-INFINITY}, 1, 0);
    expect(oj_logsumexp(oj_from_host(eng, 1, (int64_t[]){3}, OJ_F64, jv, sizeof jv), 0, NULL,
                        false),
           0, NULL, (double[]){INFINITY}, 1, 0);
    expect(oj_logsumexp(oj_from_host(eng, 1, (int64_t[]){2}, OJ_F32, (float[]){1000, 1000}, 8), 0,
                        NULL, false),
           0, NULL, (double[]){1000 + log(2.0)}, 1, 1e-7);
    (void)bv;

    // empty reductions with an identity
    oj_tensor *e = oj_zeros(eng, 2, (int64_t[]){0, 3}, OJ_F64);
    expect(oj_prod(e, 1, &d0, false), 1, (int64_t[]){3}, (double[]){1, 1, 1}, 3, 0);
    expect(oj_logsumexp(e, 1, &d0, false), 1, (int64_t[]){3},
           (double[]){-INFINITY, -INFINITY, -INFINITY}, 3, 0);
    expect(oj_norm(e, 2, 1, &d0, false), 1, (int64_t[]){3}, (double[]){0, 0, 0}, 3, 0);
    expect(oj_any(e, 1, &d0, false), 1, (int64_t[]){3}, (double[]){0, 0, 0}, 3, 0);
    expect(oj_all(e, 1, &d0, false), 1, (int64_t[]){3}, (double[]){1, 1, 1}, 3, 0);
    oj_tensor *ce = oj_cumsum(e, 0);
    assert_non_null(ce);
    assert_int_equal(oj_numel(ce), 0);
    // reducing the non-empty dim of an empty tensor is fine for max
    oj_tensor *me = oj_max(e, 1, false, NULL);
    assert_non_null(me);
    assert_int_equal(oj_numel(me), 0);

    // rank 0
    oj_tensor *s = oj_scalar(eng, -2.5, OJ_F64);
    expect(oj_max(s, 0, false, &idx), 0, NULL, (double[]){-2.5}, 1, 0);
    expect(idx, 0, NULL, (double[]){0}, 1, 0);
    expect(oj_argmax(s, -1, true), 0, NULL, (double[]){0}, 1, 0);
    expect(oj_cumsum(s, 0), 0, NULL, (double[]){-2.5}, 1, 0);
    expect(oj_prod(s, 0, NULL, false), 0, NULL, (double[]){-2.5}, 1, 0);
    expect(oj_norm(s, 1, 0, NULL, true), 0, NULL, (double[]){2.5}, 1, 0);

    // integer and bool inputs
    int64_t iv2[4] = {2, 3, -4, 5};
    oj_tensor *xi = oj_from_host(eng, 1, (int64_t[]){4}, OJ_I64, iv2, sizeof iv2);
    oj_tensor *pi = oj_prod(xi, 0, NULL, false);
    assert_int_equal(oj_tensor_dtype(pi), OJ_I64);
    expect(pi, 0, NULL, (double[]){-120}, 1, 0);
    oj_tensor *ci = oj_cumsum(xi, 0);
    assert_int_equal(oj_tensor_dtype(ci), OJ_I64);
    expect(ci, 1, (int64_t[]){4}, (double[]){2, 5, 1, 6}, 4, 0);
    oj_tensor *mi = oj_max(xi, 0, false, NULL);
    assert_int_equal(oj_tensor_dtype(mi), OJ_I64);
    expect(mi, 0, NULL, (double[]){5}, 1, 0);
    oj_tensor *bl = oj_gt(xi, oj_scalar(eng, 0, OJ_I64));
    expect(oj_cumsum(bl, 0), 1, (int64_t[]){4}, (double[]){1, 2, 2, 3}, 4, 0);
    expect(oj_all(bl, 0, NULL, false), 0, NULL, (double[]){0}, 1, 0);
    oj_tensor *li = oj_logsumexp(xi, 0, NULL, false);
    assert_int_equal(oj_tensor_dtype(li), OJ_F32);

    // bf16 input: values in bf16, accumulation in double
    oj_tensor *xb = oj_cast(sample(eng, OJ_F64), OJ_BF16);
    oj_tensor *cb = oj_cumsum(xb, 1);
    assert_int_equal(oj_tensor_dtype(cb), OJ_BF16);
    expect(cb, 2, (int64_t[]){2, 3}, (double[]){1, -1, 2, 4, 4, -2}, 6, 0);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

// ---- gradcheck

typedef enum { R_PROD, R_MAX, R_MIN, R_AMAX, R_AMIN, R_VAR, R_STD, R_LSE, R_N1, R_N2, R_NINF,
               R_CUMSUM, R_COUNT } red_kind;
static const char *red_names[R_COUNT] = {"prod", "max", "min", "amax", "amin", "var", "std",
                                         "logsumexp", "norm1", "norm2", "norminf", "cumsum"};

typedef struct {
    red_kind kind;
    int ndims;
    int dims[3];
    bool keepdim;
    int layout; // 0: as is, 1: transposed (1, 2), 2: expanded over dim 1
} red_case;

static oj_tensor *apply_red(const red_case *c, oj_tensor *x) {
    const int *d = c->ndims ? c->dims : NULL;
    switch (c->kind) {
    case R_PROD: return oj_prod(x, c->ndims, d, c->keepdim);
    case R_MAX: return oj_max(x, c->dims[0], c->keepdim, NULL);
    case R_MIN: return oj_min(x, c->dims[0], c->keepdim, NULL);
    case R_AMAX: return oj_amax(x, c->ndims, d, c->keepdim);
    case R_AMIN: return oj_amin(x, c->ndims, d, c->keepdim);
    case R_VAR: return oj_var(x, c->ndims, d, 1, c->keepdim);
    case R_STD: return oj_std(x, c->ndims, d, 0, c->keepdim);
    case R_LSE: return oj_logsumexp(x, c->ndims, d, c->keepdim);
    case R_N1: return oj_norm(x, 1, c->ndims, d, c->keepdim);
    case R_N2: return oj_norm(x, 2, c->ndims, d, c->keepdim);
    case R_NINF: return oj_norm(x, INFINITY, c->ndims, d, c->keepdim);
    case R_CUMSUM: return oj_cumsum(x, c->dims[0]);
    default: return NULL;
    }
}

static oj_tensor *red_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    const red_case *c = ctx;
    oj_tensor *x;
    if (c->layout == 1) x = oj_transpose(in[0], 1, 2);
    else if (c->layout == 2) x = oj_expand(in[0], 3, (int64_t[]){3, 4, 5});
    else x = oj_retain(in[0]);
    oj_tensor *y = apply_red(c, x);
    oj_release(x);
    return y;
}

static void test_gradcheck_reductions(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    for (int kind = 0; kind < R_COUNT; kind++) {
        bool single = kind == R_MAX || kind == R_MIN || kind == R_CUMSUM;
        bool maxlike = kind == R_MAX || kind == R_MIN || kind == R_AMAX || kind == R_AMIN ||
                       kind == R_NINF;
        red_case cases[] = {
            {(red_kind)kind, 1, {2}, false, 0},
            {(red_kind)kind, 1, {0}, true, 1},
            {(red_kind)kind, 1, {-2}, false, 1},
            {(red_kind)kind, 2, {0, 2}, true, 0},
            {(red_kind)kind, 0, {0}, false, 0},
            {(red_kind)kind, 1, {2}, true, 2}, // expanded: no ties along dim 2
            {(red_kind)kind, 2, {0, 2}, false, 2},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            if (single && cases[c].ndims != 1) continue;
            if (maxlike && cases[c].layout == 2 && c == 6) continue; // fine too, but keep it cheap
            oj_scope_begin(eng);
            int64_t s[3] = {3, 4, 5};
            if (cases[c].layout == 1) s[1] = 5, s[2] = 4;
            if (cases[c].layout == 2) s[1] = 1;
            oj_tensor *x = oj_rand_uniform(eng, 3, s, OJ_F64, 0.3, 1.3);
            if (kind == R_N1 || kind == R_LSE || kind == R_VAR || kind == R_CUMSUM) {
                oj_tensor *y = oj_affine(x, 2.0, -1.6); // mixed signs, away from 0
                oj_release(x);
                x = y;
            }
            oj_set_requires_grad(x, true);
            oj_status st = oj_gradcheck(eng, red_fn, &cases[c], &x, 1, NULL);
            if (st != OJ_OK)
                fail_msg("gradcheck %s case %zu: %s", red_names[kind], c, oj_last_error(eng));
            oj_scope_end(eng);
        }
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static double *grad_of(oj_tensor *x, double *buf) {
    assert_non_null(oj_grad(x));
    assert_int_equal(oj_to_host(oj_grad(x), buf, (size_t)oj_numel(x) * sizeof(double)), OJ_OK);
    return buf;
}

// gradients at zeros (prod), ties (amax, norm inf, max), zero norm and std
static void test_special_gradients(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    double g[4];
    // prod with one zero: only the zero gets the product of the rest
    double v1[4] = {2, 0, 3, -1};
    oj_tensor *x = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, v1, sizeof v1);
    oj_set_requires_grad(x, true);
    assert_int_equal(oj_backward(oj_prod(x, 0, NULL, false), false), OJ_OK);
    grad_of(x, g);
    assert_true(g[0] == 0 && g[1] == -6 && g[2] == 0 && g[3] == 0);
    // two zeros: every gradient is 0
    double v2[4] = {2, 0, 0, -1};
    oj_tensor *x2 = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, v2, sizeof v2);
    oj_set_requires_grad(x2, true);
    assert_int_equal(oj_backward(oj_prod(x2, 0, NULL, false), false), OJ_OK);
    grad_of(x2, g);
    for (int i = 0; i < 4; i++) assert_true(g[i] == 0);
    // amax: ties share evenly; max: the first index takes it all
    double v3[4] = {1, 5, 5, 5};
    oj_tensor *x3 = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, v3, sizeof v3);
    oj_set_requires_grad(x3, true);
    assert_int_equal(oj_backward(oj_amax(x3, 0, NULL, false), false), OJ_OK);
    grad_of(x3, g);
    assert_float_equal(g[0], 0, 0);
    for (int i = 1; i < 4; i++) assert_float_equal(g[i], 1.0 / 3, 1e-15);
    oj_zero_grad(x3);
    assert_int_equal(oj_backward(oj_max(x3, 0, false, NULL), false), OJ_OK);
    grad_of(x3, g);
    assert_true(g[0] == 0 && g[1] == 1 && g[2] == 0 && g[3] == 0);
    // norm inf with a tie of opposite signs
    double v4[4] = {-4, 1, 4, 2};
    oj_tensor *x4 = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, v4, sizeof v4);
    oj_set_requires_grad(x4, true);
    assert_int_equal(oj_backward(oj_norm(x4, INFINITY, 0, NULL, false), false), OJ_OK);
    grad_of(x4, g);
    assert_true(g[0] == -0.5 && g[1] == 0 && g[2] == 0.5 && g[3] == 0);
    // 2-norm and std of zeros: gradient 0, not NaN
    oj_tensor *z = oj_zeros(eng, 1, (int64_t[]){4}, OJ_F64);
    oj_set_requires_grad(z, true);
    assert_int_equal(oj_backward(oj_norm(z, 2, 0, NULL, false), false), OJ_OK);
    grad_of(z, g);
    for (int i = 0; i < 4; i++) assert_true(g[i] == 0);
    oj_zero_grad(z);
    assert_int_equal(oj_backward(oj_std(z, 0, NULL, 1, false), false), OJ_OK);
    grad_of(z, g);
    for (int i = 0; i < 4; i++) assert_true(g[i] == 0);
    // cumsum backward is the reversed cumsum of the gradient
    oj_tensor *c = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, v1, sizeof v1);
    oj_set_requires_grad(c, true);
    double wv[4] = {1, 2, 3, 4};
    oj_tensor *w = oj_from_host(eng, 1, (int64_t[]){4}, OJ_F64, wv, sizeof wv);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(oj_cumsum(c, 0), w)), false), OJ_OK);
    grad_of(c, g);
    assert_true(g[0] == 10 && g[1] == 9 && g[2] == 7 && g[3] == 4);
    // zero-size dims: gradients are empty, nothing fails
    oj_tensor *e = oj_zeros(eng, 2, (int64_t[]){0, 3}, OJ_F64);
    oj_set_requires_grad(e, true);
    int d0 = 0, d1 = 1;
    oj_tensor *l = oj_add(oj_sum_all(oj_prod(e, 1, &d0, false)),
                          oj_sum_all(oj_logsumexp(e, 1, &d1, false)));
    l = oj_add(l, oj_sum_all(oj_cumsum(e, 1)));
    l = oj_add(l, oj_sum_all(oj_max(e, 1, false, NULL)));
    assert_int_equal(oj_backward(l, false), OJ_OK);
    assert_int_equal(oj_numel(oj_grad(e)), 0);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_bad_input(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    oj_tensor *x = oj_zeros(eng, 2, (int64_t[]){2, 3}, OJ_F32);
    oj_tensor *e = oj_zeros(eng, 2, (int64_t[]){2, 0}, OJ_F32);
    oj_tensor *idx = (oj_tensor *)1;
    assert_null(oj_max(e, 1, false, &idx));
    assert_null(idx);
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_string_equal(oj_last_error(eng),
                        "max: cannot reduce dim 1 of size 0 of [2, 0] (the reduction has no "
                        "identity)");
    oj_clear_error(eng);
    assert_null(oj_amin(e, 0, NULL, false));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    assert_null(oj_argmax(e, -1, false));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);

    assert_null(oj_max(x, 2, false, NULL));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(eng), "max: dim 2 out of range"));
    oj_clear_error(eng);
    assert_null(oj_cumsum(x, -3));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    int dup[2] = {1, -1};
    assert_null(oj_var(x, 2, dup, 1, false));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_null(oj_norm(x, 3, 0, NULL, false));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(oj_last_error(eng), "norm: p must be 1, 2 or INFINITY, got 3"));
    oj_clear_error(eng);
    oj_tensor *xi = oj_zeros(eng, 1, (int64_t[]){3}, OJ_I64);
    assert_null(oj_std(xi, 0, NULL, 1, false));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    assert_non_null(strstr(oj_last_error(eng), "std: expected a float tensor"));
    oj_clear_error(eng);
    assert_null(oj_norm(xi, 2, 0, NULL, false));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);

    assert_null(oj_prod(NULL, 0, NULL, false)); // NULL in: NULL out, no error
    assert_null(oj_max(NULL, 0, false, &idx));
    assert_null(idx);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

// test: logsumexp backward on a group of all -inf: a zero upstream
// gradient gives exactly 0 (was NaN: g exp(x - y) with x - y = -inf + inf),
// a nonzero one NaN (documented); the finite row is softmax(row) g, in
// float64; f32 and f64, keepdim and not.
static void test_logsumexp_minf_backward(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    double xv[6] = {-INFINITY, -INFINITY, -INFINITY, 1, 2, -INFINITY};
    double e1 = exp(1.0), p1[3] = {1 / (1 + e1), e1 / (1 + e1), 0};
    for (int k = 0; k < 4; k++) {
        oj_scope_begin(eng);
        oj_dtype dt = (k & 1) ? OJ_F32 : OJ_F64;
        bool keep = k & 2;
        for (int nz = 0; nz < 2; nz++) {
            oj_tensor *x64 = oj_from_host(eng, 2, (int64_t[]){2, 3}, OJ_F64, xv, sizeof xv);
            oj_tensor *x = oj_cast(x64, dt);
            oj_set_requires_grad(x, true);
            int d1 = 1;
            oj_tensor *y = oj_logsumexp(x, 1, &d1, keep);
            double gv[2] = {nz ? 1.0 : 0.0, 1.5};
            int64_t gs[2] = {2, 1};
            oj_tensor *g64 = oj_from_host(eng, keep ? 2 : 1, gs, OJ_F64, gv, sizeof gv);
            assert_int_equal(oj_backward_seeded(y, oj_cast(g64, dt), false), OJ_OK);
            double g[6];
            oj_tensor *gx = oj_cast(oj_grad(x), OJ_F64);
            assert_int_equal(oj_to_host(gx, g, sizeof g), OJ_OK);
            for (int i = 0; i < 3; i++) {
                if (nz ? !isnan(g[i]) : (g[i] != 0 || signbit(g[i])))
                    fail_msg("logsumexp -inf row, upstream %g: dx[%d] = %g", gv[0], i, g[i]);
                if (fabs(g[3 + i] - 1.5 * p1[i]) > ((k & 1) ? 1e-6 : 1e-15))
                    fail_msg("logsumexp finite row: dx[%d] = %.17g, want %.17g", i, g[3 + i],
                             1.5 * p1[i]);
            }
        }
        oj_scope_end(eng);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

// The int64 values of t (contiguous result), checked against want.
static void expect_i64(oj_tensor *t, oj_dtype dt, const int64_t *want, int n) {
    assert_non_null(t);
    assert_int_equal(oj_tensor_dtype(t), dt);
    assert_int_equal(oj_numel(t), n);
    int64_t got[8] = {0};
    assert_int_equal(oj_to_host(t, got, (size_t)n * sizeof got[0]), OJ_OK);
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("element %d: got %lld, want %lld", i, (long long)got[i], (long long)want[i]);
}

static oj_tensor *i64v(oj_engine *eng, int rank, const int64_t *shape, const int64_t *v, int n) {
    return oj_from_host(eng, rank, shape, OJ_I64, v, (size_t)n * sizeof v[0]);
}

// Integer reductions are exact in int64 (not rounded through double) and
// wrap modulo 2^64 as torch's int64 sum/prod do.
static void test_integer_exact(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    const int64_t P53 = INT64_C(1) << 53, P62 = INT64_C(1) << 62, s2[1] = {2};
    int d0 = 0;
    oj_tensor *a = i64v(eng, 1, s2, (int64_t[]){P62, 4}, 2);
    oj_tensor *b = i64v(eng, 1, s2, (int64_t[]){P53 + 1, 1}, 2);
    oj_tensor *c = i64v(eng, 1, s2, (int64_t[]){P53, P53 + 1}, 2);
    oj_tensor *m = i64v(eng, 1, s2, (int64_t[]){INT64_MAX, 1}, 2);
    expect_i64(oj_sum(a, 1, &d0, false), OJ_I64, (int64_t[]){P62 + 4}, 1);
    expect_i64(oj_sum(b, 0, NULL, false), OJ_I64, (int64_t[]){P53 + 2}, 1);
    expect_i64(oj_sum(m, 0, NULL, false), OJ_I64, (int64_t[]){INT64_MIN}, 1); // wraps
    expect_i64(oj_prod(b, 1, &d0, false), OJ_I64, (int64_t[]){P53 + 1}, 1);
    expect_i64(oj_prod(a, 1, &d0, false), OJ_I64, (int64_t[]){0}, 1); // 2^64 wraps to 0
    expect_i64(oj_amax(c, 0, NULL, false), OJ_I64, (int64_t[]){P53 + 1}, 1);
    expect_i64(oj_amin(b, 0, NULL, false), OJ_I64, (int64_t[]){1}, 1);
    expect_i64(oj_argmax(c, 0, false), OJ_I64, (int64_t[]){1}, 1);
    expect_i64(oj_argmin(c, 0, false), OJ_I64, (int64_t[]){0}, 1);
    oj_tensor *idx = NULL;
    expect_i64(oj_max(c, 0, false, &idx), OJ_I64, (int64_t[]){P53 + 1}, 1);
    expect_i64(idx, OJ_I64, (int64_t[]){1}, 1);
    oj_tensor *nc = i64v(eng, 1, s2, (int64_t[]){-P53 - 1, -P53}, 2);
    expect_i64(oj_min(nc, 0, false, &idx), OJ_I64, (int64_t[]){-P53 - 1}, 1);
    expect_i64(idx, OJ_I64, (int64_t[]){0}, 1);
    expect_i64(oj_argmax(nc, 0, false), OJ_I64, (int64_t[]){1}, 1);
    // Strided: columns of the transpose of [[2^53+1, 1], [1, 2^53]].
    oj_tensor *sq = i64v(eng, 2, (int64_t[]){2, 2}, (int64_t[]){P53 + 1, 1, 1, P53}, 4);
    oj_tensor *t = oj_transpose(sq, 0, 1);
    expect_i64(oj_sum(t, 1, &d0, false), OJ_I64, (int64_t[]){P53 + 2, P53 + 1}, 2);
    expect_i64(oj_amax(t, 1, &d0, false), OJ_I64, (int64_t[]){P53 + 1, P53}, 2);
    expect_i64(oj_argmin(t, 0, false), OJ_I64, (int64_t[]){1, 0}, 2);
    // Narrower integers: sum and prod are int64 (no wrap at 32 bits), max
    // keeps the dtype.
    int32_t iv[3] = {INT32_MAX, INT32_MAX, 65536};
    oj_tensor *i32 = oj_from_host(eng, 1, (int64_t[]){3}, OJ_I32, iv, sizeof iv);
    expect_i64(oj_sum(i32, 0, NULL, false), OJ_I64,
               (int64_t[]){2 * (int64_t)INT32_MAX + 65536}, 1);
    expect_i64(oj_prod(i32, 0, NULL, false), OJ_I64,
               (int64_t[]){(int64_t)((uint64_t)INT32_MAX * INT32_MAX * 65536u)}, 1); // wraps
    int32_t mx32 = 0;
    oj_tensor *a32 = oj_amax(i32, 0, NULL, false);
    assert_non_null(a32);
    assert_int_equal(oj_tensor_dtype(a32), OJ_I32);
    assert_int_equal(oj_to_host(a32, &mx32, sizeof mx32), OJ_OK);
    assert_int_equal(mx32, INT32_MAX);
    uint8_t uv[2] = {255, 255};
    oj_tensor *u8 = oj_from_host(eng, 1, s2, OJ_U8, uv, sizeof uv);
    expect_i64(oj_sum(u8, 0, NULL, false), OJ_I64, (int64_t[]){510}, 1);
    expect_i64(oj_prod(u8, 0, NULL, false), OJ_I64, (int64_t[]){65025}, 1);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_values),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_gradcheck_reductions),
        cmocka_unit_test(test_special_gradients),
        cmocka_unit_test(test_logsumexp_minf_backward),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_integer_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
