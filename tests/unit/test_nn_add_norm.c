// test: add_layer_norm / add_rms_norm (residual add fused with the norm) —
// forward bit for bit equal to oj_add then oj_layer_norm / oj_rms_norm (f32,
// f64, bf16, f32 + bf16 either way, strided inputs, under autocast, a backend
// without the fused entry), gradients through both outputs or one (gradcheck
// in f64; mixed dtypes bit for bit against add + norm), bad input.
#include <stdio.h>

#include "backend/backend.h"
#include "nn_testutil.h"

static const double EPS = 1e-5;

/* The bytes of t (contiguous copy) equal those of u, and one dtype/shape. */
static void same_bits(const char *what, oj_tensor *t, oj_tensor *u) {
    assert_non_null(t);
    assert_non_null(u);
    if (oj_tensor_dtype(t) != oj_tensor_dtype(u))
        fail_msg("%s: dtype %s, want %s", what, oj_dtype_name(oj_tensor_dtype(t)),
                 oj_dtype_name(oj_tensor_dtype(u)));
    assert_int_equal(oj_rank(t), oj_rank(u));
    for (int d = 0; d < oj_rank(t); d++) assert_int_equal(oj_size(t, d), oj_size(u, d));
    size_t n = (size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t));
    unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
    assert_int_equal(oj_to_host(t, a, n), OJ_OK);
    assert_int_equal(oj_to_host(u, b, n), OJ_OK);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            free(a);
            free(b);
            fail_msg("%s: byte %zu differs", what, i);
        }
    free(a);
    free(b);
}

/* The fused op and add + norm on the same inputs: both outputs bit for bit. */
static void check_fused(const char *what, bool rms, oj_tensor *x, oj_tensor *r, oj_tensor *w,
                        oj_tensor *b) {
    oj_tensor *s = NULL;
    oj_tensor *y = rms ? oj_add_rms_norm(x, r, w, EPS, &s) : oj_add_layer_norm(x, r, w, b, EPS, &s);
    if (y == NULL) fail_msg("%s: %s", what, oj_last_error(oj_tensor_engine(x)));
    assert_non_null(s);
    oj_tensor *s_ref = oj_add(x, r);
    oj_tensor *y_ref = rms ? oj_rms_norm(s_ref, w, EPS) : oj_layer_norm(s_ref, w, b, EPS);
    same_bits(what, s, s_ref);
    same_bits(what, y, y_ref);
}

static void test_forward_bits(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    /* x dtype, r dtype */
    const oj_dtype dts[5][2] = {{OJ_F32, OJ_F32}, {OJ_F64, OJ_F64}, {OJ_BF16, OJ_BF16},
                                {OJ_F32, OJ_BF16}, {OJ_BF16, OJ_F32}};
    const int64_t shapes[3][3] = {{3, 5, 33}, {1, 1, 768}, {70, 2, 16}};
    for (int k = 0; k < 5; k++)
        for (int si = 0; si < 3; si++)
            for (int m = 0; m < 6; m++) { /* bit 0 rms, 1 weight, 2 grad */
                bool rms = m & 1, affine = m & 2, grad = m >= 4;
                const int64_t *xs = shapes[si], cs[1] = {xs[2]};
                oj_dtype sdt = dts[k][0] == OJ_BF16 && dts[k][1] == OJ_BF16 ? OJ_BF16
                               : dts[k][0] == OJ_F64                         ? OJ_F64
                                                                             : OJ_F32;
                oj_tensor *x = nt_rand(eng, 3, xs, dts[k][0], -2, 3);
                oj_tensor *r = nt_rand(eng, 3, xs, dts[k][1], -3, 2);
                oj_tensor *w = affine ? nt_rand(eng, 1, cs, sdt, 0.5, 1.5) : NULL;
                oj_tensor *b = affine ? nt_rand(eng, 1, cs, sdt, -1, 1) : NULL;
                if (grad) oj_set_requires_grad(x, true); /* stats saved */
                char what[96];
                snprintf(what, sizeof what, "%s x %s + r %s shape %d", rms ? "rms" : "layer",
                         oj_dtype_name(dts[k][0]), oj_dtype_name(dts[k][1]), si);
                check_fused(what, rms, x, r, w, b);
            }
    /* strided x and r (the add's iterator, then the norm) */
    int64_t ts[2] = {24, 5}, cs[1] = {5};
    oj_tensor *xt = nt_T(nt_rand(eng, 2, ts, OJ_F32, -1, 1));
    oj_tensor *rt = nt_T(nt_rand(eng, 2, ts, OJ_BF16, -1, 1));
    oj_tensor *w = nt_rand(eng, 1, (int64_t[]){24}, OJ_F32, 0.5, 1.5);
    check_fused("transposed x, r", false, xt, rt, w, NULL);
    check_fused("transposed x, r (rms)", true, xt, rt, w, NULL);
    /* r broadcast by a stride-0 view of x's shape */
    oj_tensor *rb = oj_expand(nt_rand(eng, 1, cs, OJ_F32, -1, 1), 2, (int64_t[]){4, 5});
    check_fused("expanded r", false, nt_rand(eng, 2, (int64_t[]){4, 5}, OJ_F32, -1, 1), rb, NULL,
                NULL);
    /* empty rows */
    int64_t es[2] = {0, 8};
    check_fused("empty", false, nt_rand(eng, 2, es, OJ_F32, -1, 1),
                nt_rand(eng, 2, es, OJ_F32, -1, 1), NULL, NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_autocast(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    oj_set_autocast(eng, true, OJ_BF16);
    int64_t xs[2] = {4, 64}, cs[1] = {64};
    oj_tensor *x32 = nt_rand(eng, 2, xs, OJ_F32, -2, 2);
    oj_tensor *a16 = nt_rand(eng, 2, xs, OJ_BF16, -2, 2);
    oj_tensor *w32 = nt_rand(eng, 1, cs, OJ_F32, 0.5, 1.5);
    oj_tensor *b32 = nt_rand(eng, 1, cs, OJ_F32, -1, 1);
    oj_tensor *w16 = nt_rand(eng, 1, cs, OJ_BF16, 0.5, 1.5);
    oj_set_requires_grad(w32, true);
    for (int rms = 0; rms < 2; rms++) {
        /* the residual stream: f32 + bf16 -> f32 s, f32 norm (the fused path) */
        check_fused("autocast f32 + bf16", rms, x32, a16, w32, b32);
        /* bf16 s: the norm computes in f32 (s cast), s stays bf16 */
        check_fused("autocast bf16 + bf16", rms, a16, a16, w32, b32);
        /* a bf16 weight is cast to f32 */
        check_fused("autocast bf16 weight", rms, x32, a16, w16, NULL);
        oj_tensor *s = NULL;
        oj_tensor *y = rms ? oj_add_rms_norm(a16, a16, w32, EPS, &s)
                           : oj_add_layer_norm(a16, a16, w32, b32, EPS, &s);
        assert_int_equal(oj_tensor_dtype(y), OJ_F32);
        assert_int_equal(oj_tensor_dtype(s), OJ_BF16);
    }
    oj_set_autocast(eng, false, OJ_BF16);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* A backend without the fused entry: the op runs add then the norm. */
static void test_fallback(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *real = eng->backend;
    oj_backend bare = *real;
    bare.add_norm_forward = NULL;
    oj_scope_begin(eng);
    int64_t xs[2] = {3, 40}, cs[1] = {40};
    oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -2, 2), *r = nt_rand(eng, 2, xs, OJ_BF16, -2, 2);
    oj_tensor *w = nt_rand(eng, 1, cs, OJ_F32, 0.5, 1.5), *b = nt_rand(eng, 1, cs, OJ_F32, -1, 1);
    oj_set_requires_grad(x, true);
    oj_tensor *s1 = NULL, *s2 = NULL;
    oj_tensor *y1 = oj_add_layer_norm(x, r, w, b, EPS, &s1);
    eng->backend = &bare;
    oj_tensor *y2 = oj_add_layer_norm(x, r, w, b, EPS, &s2);
    check_fused("no fused entry", true, x, r, w, NULL);
    eng->backend = real;
    same_bits("fallback sum", s2, s1);
    same_bits("fallback out", y2, y1);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ctx: bit 0 rms, bit 1 weight, bit 2 bias, bits 3-4 which outputs the
 * result uses (0: both, 1: the norm only, 2: the sum only). in: x as [C, N]
 * (transposed: non-contiguous), r [N, C], weight, bias. */
static oj_tensor *add_norm_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int m = *(int *)ctx, use = m >> 3;
    oj_tensor *x = nt_T(in[0]);
    oj_tensor *w = (m & 2) ? in[2] : NULL, *b = (m & 4) ? in[3] : NULL, *s = NULL;
    oj_tensor *y = (m & 1) ? oj_add_rms_norm(x, in[1], w, 1e-3, &s)
                           : oj_add_layer_norm(x, in[1], w, b, 1e-3, &s);
    oj_release(x);
    if (y == NULL) return NULL;
    oj_tensor *out;
    if (use == 1) {
        out = oj_retain(y);
    } else {
        oj_tensor *s2 = oj_mul(s, s); /* a non-linear use of s */
        out = use == 2 ? oj_retain(s2) : oj_add(y, s2);
        oj_release(s2);
    }
    oj_release(y);
    oj_release(s);
    return out;
}

static void test_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t xs[2] = {6, 4}, rs[2] = {4, 6}, cs[1] = {6};
    int norms[5] = {0, 2, 6, 1, 3};
    for (int k = 0; k < 5; k++)
        for (int use = 0; use < 3; use++) {
            oj_scope_begin(eng);
            int m = norms[k] | use << 3;
            oj_tensor *in[4] = {nt_leaf(eng, 2, xs, -2, 2), nt_leaf(eng, 2, rs, -1, 1),
                                nt_leaf(eng, 1, cs, 0.5, 1.5), nt_leaf(eng, 1, cs, -1, 1)};
            nt_gradcheck(eng, "add_norm", add_norm_fn, &m, in, 4);
            oj_scope_end(eng);
        }
    nt_engine_done(eng);
}

/* Gradients of mixed dtypes (x f32, r bf16, f32 weight and bias) equal
 * those of add + norm bit for bit, r's in bf16. */
static void test_grad_bits(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {5, 48}, cs[1] = {48};
    for (int m = 0; m < 6; m++) { /* bit 0 rms; m >> 1: outputs used, as add_norm_fn */
        bool rms = m & 1;
        int use = m >> 1;
        oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -2, 2), *r = nt_rand(eng, 2, xs, OJ_BF16, -2, 2);
        oj_tensor *w = nt_rand(eng, 1, cs, OJ_F32, 0.5, 1.5);
        oj_tensor *b = nt_rand(eng, 1, cs, OJ_F32, -1, 1);
        oj_tensor *g1 = nt_rand(eng, 2, xs, OJ_F32, -1, 1);
        oj_tensor *g2 = nt_rand(eng, 2, xs, OJ_F32, -1, 1);
        oj_tensor *vals[4] = {x, r, w, b}, *grads[2][4];
        for (int fused = 0; fused < 2; fused++) {
            oj_tensor *l[4]; /* fresh leaves of the same values */
            for (int i = 0; i < 4; i++) oj_set_requires_grad(l[i] = oj_clone(vals[i]), true);
            oj_tensor *s = NULL, *y;
            if (fused) {
                y = rms ? oj_add_rms_norm(l[0], l[1], l[2], EPS, &s)
                        : oj_add_layer_norm(l[0], l[1], l[2], l[3], EPS, &s);
            } else {
                s = oj_add(l[0], l[1]);
                y = rms ? oj_rms_norm(s, l[2], EPS) : oj_layer_norm(s, l[2], l[3], EPS);
            }
            assert_non_null(y);
            oj_tensor *l1 = oj_sum_all(oj_mul(y, g1)), *l2 = oj_sum_all(oj_mul(s, g2));
            oj_tensor *loss = use == 0 ? oj_add(l1, l2) : use == 1 ? l1 : l2;
            assert_int_equal(oj_backward(loss, false), OJ_OK);
            for (int i = 0; i < 4; i++) grads[fused][i] = oj_grad(l[i]);
        }
        const char *names[4] = {"dx", "dr", "dweight", "dbias"};
        for (int i = 0; i < 4; i++) {
            if (rms && i == 3) continue;
            if (grads[0][i] == NULL) { /* use 2: add + norm gives the weight none */
                assert_true(i >= 2 && use == 2);
                continue; /* (the fused node gives zeros, as split's pieces) */
            }
            same_bits(names[i], grads[1][i], grads[0][i]);
        }
        assert_int_equal(oj_tensor_dtype(grads[1][1]), OJ_BF16);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {2, 4}, ts[2] = {4, 2}, c3[1] = {3}, c4[1] = {4};
    oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -1, 1);
    oj_tensor *w4 = nt_rand(eng, 1, c4, OJ_F32, -1, 1), *w3 = nt_rand(eng, 1, c3, OJ_F32, -1, 1);
    oj_tensor *w4d = nt_rand(eng, 1, c4, OJ_F64, -1, 1);
    oj_tensor *junk = (oj_tensor *)&junk, *s = junk;
    oj_set_requires_grad(x, true);
    int64_t live = oj_engine_live_tensors(eng);
    oj_tensor *xt = nt_rand(eng, 2, ts, OJ_F32, -1, 1);
    nt_expect_error(eng, oj_add_layer_norm(x, xt, w4, NULL, EPS, &s), OJ_ERR_SHAPE,
                    "r has shape [4, 2]", "x has shape [2, 4]");
    assert_null(s);
    s = junk;
    nt_expect_error(eng, oj_add_rms_norm(x, w4, NULL, EPS, &s), OJ_ERR_SHAPE, "add_rms_norm",
                    "no broadcasting");
    assert_null(s);
    s = junk;
    nt_expect_error(eng, oj_add_layer_norm(x, x, w3, NULL, EPS, &s), OJ_ERR_SHAPE, "weight",
                    "[3]");
    assert_null(s);
    nt_expect_error(eng, oj_add_layer_norm(x, x, w4, w3, EPS, &s), OJ_ERR_SHAPE, "bias", "[2, 4]");
    nt_expect_error(eng, oj_add_rms_norm(x, x, w3, EPS, &s), OJ_ERR_SHAPE, "add_rms_norm",
                    "weight");
    nt_expect_error(eng, oj_add_layer_norm(x, x, w4, NULL, EPS, NULL), OJ_ERR_INVALID_ARGUMENT,
                    "add_layer_norm", "sum is NULL");
    nt_expect_error(eng, oj_add_rms_norm(x, x, NULL, EPS, NULL), OJ_ERR_INVALID_ARGUMENT,
                    "add_rms_norm", "sum is NULL");
    nt_expect_error(eng, oj_add_rms_norm(x, x, w4d, EPS, &s), OJ_ERR_DTYPE, "weight is f64",
                    "x + r is f32");
    nt_expect_error(eng, oj_add_rms_norm(x, x, NULL, -1.0, &s), OJ_ERR_INVALID_ARGUMENT, "eps",
                    NULL);
    oj_tensor *xi = oj_zeros(eng, 2, xs, OJ_I32);
    nt_expect_error(eng, oj_add_layer_norm(x, xi, NULL, NULL, EPS, &s), OJ_ERR_DTYPE, "r", "i32");
    oj_tensor *sc = oj_scalar(eng, 1.0, OJ_F32);
    nt_expect_error(eng, oj_add_layer_norm(sc, sc, NULL, NULL, EPS, &s), OJ_ERR_SHAPE, "scalar",
                    NULL);
    assert_null(s);
    /* a NULL input (an earlier failure) gives NULL and records nothing */
    s = junk;
    assert_null(oj_add_layer_norm(x, NULL, NULL, NULL, EPS, &s));
    assert_null(s);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    /* nothing left behind by the failures but the inputs they were given */
    assert_int_equal(oj_engine_live_tensors(eng), live + 3); /* ts, xi, sc */
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* The node's graph outlives the scope; an in-place write to the sum after
 * the forward makes the backward fail, naming the op. */
static void test_graph_lifetime(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t xs[2] = {3, 4}, cs[1] = {4};
    oj_tensor *x = nt_leaf(eng, 2, xs, -1, 1), *r = nt_leaf(eng, 2, xs, -1, 1);
    oj_tensor *w = nt_leaf(eng, 1, cs, 0.5, 1);
    oj_scope_begin(eng);
    oj_tensor *s = NULL;
    oj_tensor *y = oj_keep(oj_sum_all(oj_square(oj_add_rms_norm(x, r, w, EPS, &s))));
    oj_scope_end(eng);
    assert_int_equal(oj_backward(y, false), OJ_OK);
    assert_non_null(oj_grad(x));
    assert_non_null(oj_grad(r));
    assert_non_null(oj_grad(w));
    oj_release(y);

    oj_scope_begin(eng);
    oj_tensor *h = oj_add_layer_norm(x, r, w, NULL, EPS, &s);
    oj_tensor *loss = oj_sum_all(oj_square(h));
    bool prev = oj_set_grad_enabled(eng, false);
    assert_int_equal(oj_add_(s, x), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    assert_int_not_equal(oj_backward(loss, false), OJ_OK);
    if (!strstr(oj_last_error(eng), "add_layer_norm"))
        fail_msg("'add_layer_norm' not in '%s'", oj_last_error(eng));
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_release(x);
    oj_release(r);
    oj_release(w);
    nt_engine_done(eng);
}

/* ---- the public add + norm ops with mixed-dtype x and r, every subset of
 * inputs needing a gradient, the sum used again or not: bit for bit against
 * add then the norm */

/* ---------------------------------------------------------------- add + norm */

/* the public add + norm ops with mixed-dtype x and r (norm_backward_add's
 * low input either one, or neither low), every subset of inputs needing a
 * gradient, s used again or not: bit for bit against add then the norm */
static void test_add_norm_mixed(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_dtype pairs[5][2] = {{OJ_BF16, OJ_F32},
                                  {OJ_F32, OJ_BF16},
                                  {OJ_BF16, OJ_F16},
                                  {OJ_F16, OJ_F32},
                                  {OJ_F32, OJ_F32}};
    int64_t xs[2] = {3, 20}, cs[1] = {20};
    for (int p = 0; p < 5; p++)
        for (int rms = 0; rms < 2; rms++)
            for (int need = 1; need < 8; need++) /* bit 0 x, 1 r, 2 weight */
                for (int use = 0; use < 2; use++) {
                    oj_scope_begin(eng);
                    oj_tensor *x0 = nt_rand(eng, 2, xs, pairs[p][0], -2, 2);
                    oj_tensor *r0 = nt_rand(eng, 2, xs, pairs[p][1], -2, 2);
                    oj_dtype sdt = oj_tensor_dtype(oj_add(x0, r0));
                    oj_tensor *w0 = nt_rand(eng, 1, cs, sdt, 0.5, 1.5);
                    oj_tensor *g1 = nt_rand(eng, 2, xs, sdt, -1, 1);
                    oj_tensor *gr[2][3];
                    for (int f = 0; f < 2; f++) {
                        oj_tensor *x = oj_set_requires_grad(oj_clone(x0), need & 1);
                        oj_tensor *r = oj_set_requires_grad(oj_clone(r0), (need & 2) != 0);
                        oj_tensor *w = oj_set_requires_grad(oj_clone(w0), (need & 4) != 0);
                        oj_tensor *sum = NULL, *y;
                        if (f) {
                            y = rms ? oj_add_rms_norm(x, r, w, 1e-5, &sum)
                                    : oj_add_layer_norm(x, r, w, NULL, 1e-5, &sum);
                        } else {
                            sum = oj_add(x, r);
                            y = rms ? oj_rms_norm(sum, w, 1e-5) : oj_layer_norm(sum, w, NULL, 1e-5);
                        }
                        if (y == NULL)
                            fail_msg("%s", oj_last_error(eng));
                        oj_tensor *l = oj_sum_all(oj_mul(y, g1));
                        if (use)
                            l = oj_add(l, oj_sum_all(oj_mul(sum, sum)));
                        assert_int_equal(oj_backward(l, false), OJ_OK);
                        gr[f][0] = oj_grad(x);
                        gr[f][1] = oj_grad(r);
                        gr[f][2] = oj_grad(w);
                    }
                    for (int i = 0; i < 3; i++) {
                        char what[96];
                        snprintf(what, sizeof what, "pair %d rms %d need %d use %d grad %d", p, rms,
                                 need, use, i);
                        if (!(need >> i & 1)) {
                            assert_null(gr[1][i]);
                            continue;
                        }
                        if (gr[1][i] == NULL || gr[0][i] == NULL)
                            fail_msg("%s: no gradient", what);
                        assert_int_equal(oj_tensor_dtype(gr[1][i]), oj_tensor_dtype(gr[0][i]));
                        nt_close_tensors(what, gr[1][i], gr[0][i], 0, 0);
                    }
                    oj_scope_end(eng);
                }
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_bits), cmocka_unit_test(test_autocast),
        cmocka_unit_test(test_fallback),     cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_grad_bits),    cmocka_unit_test(test_errors),
        cmocka_unit_test(test_graph_lifetime),
        cmocka_unit_test(test_add_norm_mixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
