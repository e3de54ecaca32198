// test: the norms with an explicit output dtype (oj__layer_norm_to, oj__rms_norm_to,
// oj__add_layer_norm_to, oj__add_rms_norm_to: the autocast model's norms written in bf16/f16
// by the kernel) and the backend's norm_backward_add (the residual gradient added in the
// norm's backward, the low input's gradient rounded there): forward bit for bit equal to the
// public op then oj_cast; gradients bit for bit equal to the unfused graph (public op, cast,
// add, the engine's cast), with and without the fused entry; the entry against the chain of
// entries it stands for; retain_grad of the sum as documented; gradcheck in f64; bad dtypes.
#include <stdio.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "nn_testutil.h"

static const double EPS = 1e-5;

/* The bytes of t equal those of u, and one dtype/shape. */
static void same_bits(const char *what, oj_tensor *t, oj_tensor *u) {
    assert_non_null(t);
    assert_non_null(u);
    if (oj_tensor_dtype(t) != oj_tensor_dtype(u))
        fail_msg("%s: dtype %s, want %s", what, oj_dtype_name(oj_tensor_dtype(t)),
                 oj_dtype_name(oj_tensor_dtype(u)));
    assert_int_equal(oj_rank(t), oj_rank(u));
    for (int d = 0; d < oj_rank(t); d++) assert_int_equal(oj_size(t, d), oj_size(u, d));
    oj_tensor *tc = oj_contiguous(t), *uc = oj_contiguous(u);
    size_t n = (size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t));
    unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
    assert_int_equal(oj_to_host(tc, a, n), OJ_OK);
    assert_int_equal(oj_to_host(uc, b, n), OJ_OK);
    oj_release(tc);
    oj_release(uc);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            free(a);
            free(b);
            fail_msg("%s: byte %zu differs", what, i);
        }
    free(a);
    free(b);
}

/* The norm of x (+ r when r) in odt through the _to ops; *s the sum. */
static oj_tensor *norm_to(bool rms, oj_tensor *x, oj_tensor *r, oj_tensor *w, oj_tensor *b,
                          oj_tensor **s, oj_dtype odt) {
    if (r)
        return rms ? oj__add_rms_norm_to(x, r, w, EPS, s, odt)
                   : oj__add_layer_norm_to(x, r, w, b, EPS, s, odt);
    return rms ? oj__rms_norm_to(x, w, EPS, odt) : oj__layer_norm_to(x, w, b, EPS, odt);
}

/* The unfused ops: oj_add (when r), the public norm, then oj_cast to odt. */
static oj_tensor *norm_cast(bool rms, oj_tensor *x, oj_tensor *r, oj_tensor *w, oj_tensor *b,
                            oj_tensor **s, oj_dtype odt) {
    oj_tensor *xs = x;
    if (r) assert_non_null(xs = *s = oj_add(x, r));
    oj_tensor *y = rms ? oj_rms_norm(xs, w, EPS) : oj_layer_norm(xs, w, b, EPS);
    assert_non_null(y);
    oj_tensor *c = oj_tensor_dtype(y) == odt ? oj_retain(y) : oj_cast(y, odt);
    oj_release(y);
    return c;
}

static void check_forward(const char *what, bool rms, oj_tensor *x, oj_tensor *r, oj_tensor *w,
                          oj_tensor *b, oj_dtype odt) {
    oj_tensor *s1 = NULL, *s2 = NULL;
    oj_tensor *y1 = norm_to(rms, x, r, w, b, &s1, odt);
    if (y1 == NULL) fail_msg("%s: %s", what, oj_last_error(oj_tensor_engine(x)));
    oj_tensor *y2 = norm_cast(rms, x, r, w, b, &s2, odt);
    assert_int_equal(oj_tensor_dtype(y1), odt);
    same_bits(what, y1, y2);
    if (r) same_bits(what, s1, s2);
}

static void test_forward_bits(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    /* C 300: the CPU writes a low output in pieces of 256 columns */
    const int64_t shapes[5][2] = {{1, 768}, {17, 1000}, {3, 33}, {2, 300}, {5, 64}};
    const oj_dtype odts[2] = {OJ_BF16, OJ_F16};
    for (int si = 0; si < 5; si++)
        for (int k = 0; k < 2; k++)
            for (int m = 0; m < 8; m++) { /* bit 0 rms, 1 weight (and bias), 2 add */
                bool rms = m & 1, affine = m & 2, add = m & 4;
                const int64_t *xs = shapes[si], cs[1] = {xs[1]};
                oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -2, 3);
                oj_tensor *r = add ? nt_rand(eng, 2, xs, OJ_BF16, -3, 2) : NULL;
                oj_tensor *w = affine ? nt_rand(eng, 1, cs, OJ_F32, 0.5, 1.5) : NULL;
                oj_tensor *b = affine ? nt_rand(eng, 1, cs, OJ_F32, -1, 1) : NULL;
                oj_set_requires_grad(x, true); /* statistics saved */
                char what[128];
                snprintf(what, sizeof what, "%s%s norm -> %s, [%lld, %lld]%s", add ? "add + " : "",
                         rms ? "rms" : "layer", oj_dtype_name(odts[k]), (long long)xs[0],
                         (long long)xs[1], affine ? ", affine" : "");
                check_forward(what, rms, x, r, w, b, odts[k]);
                /* the output dtype equal to x's: the public op */
                check_forward(what, rms, x, r, w, b, OJ_F32);
            }
    /* under autocast: bf16 x (cast to f32 by the autocast), or the bf16
     * sum of add (the unfused add then norm path) */
    int64_t xs[2] = {4, 96}, cs[1] = {96};
    oj_tensor *x16 = nt_rand(eng, 2, xs, OJ_BF16, -2, 2);
    oj_tensor *r16 = nt_rand(eng, 2, xs, OJ_BF16, -2, 2);
    oj_tensor *x32 = nt_rand(eng, 2, xs, OJ_F32, -2, 2);
    oj_tensor *w = nt_rand(eng, 1, cs, OJ_F32, 0.5, 1.5), *b = nt_rand(eng, 1, cs, OJ_F32, -1, 1);
    oj_tensor *w16 = nt_rand(eng, 1, cs, OJ_BF16, 0.5, 1.5);
    oj_set_autocast(eng, true, OJ_BF16);
    for (int rms = 0; rms < 2; rms++) {
        check_forward("autocast bf16 x", rms, x16, NULL, w, b, OJ_BF16);
        check_forward("autocast bf16 weight", rms, x32, NULL, w16, NULL, OJ_BF16);
        check_forward("autocast f32 + bf16", rms, x32, r16, w, b, OJ_BF16);
        check_forward("autocast bf16 + bf16", rms, x16, r16, w, b, OJ_BF16);
    }
    oj_set_autocast(eng, false, OJ_BF16);
    /* f64 x: the norm in f64, then the cast */
    oj_tensor *x64 = nt_rand(eng, 2, xs, OJ_F64, -2, 2), *r64 = nt_rand(eng, 2, xs, OJ_F64, -2, 2);
    for (int rms = 0; rms < 2; rms++) {
        check_forward("f64 -> f32", rms, x64, NULL, NULL, NULL, OJ_F32);
        check_forward("f64 -> bf16", rms, x64, r64, NULL, NULL, OJ_BF16);
        check_forward("bf16 -> f32", rms, x16, NULL, NULL, NULL, OJ_F32);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* Gradients through the low output (loss = sum(y g1) + sum(s g2), y in
 * bf16) of x f32 (the residual stream), r bf16 (the branch), f32 weight and
 * bias: the _to ops (with the backend's norm_backward_add, and without it)
 * against oj_add, the public norm, oj_cast and the engine's casts, bit for
 * bit. The fused sum's retained gradient is g2 (its own use only, as
 * documented; the unfused sum's includes the norm's part). */
static void test_grad_bits(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *real = eng->backend;
    oj_backend bare = *real;
    bare.norm_backward_add = NULL;
    oj_scope_begin(eng);
    const int64_t shapes[3][2] = {{5, 48}, {1, 300}, {17, 33}};
    for (int si = 0; si < 3; si++)
        for (int m = 0; m < 12; m++) { /* bit 0 rms, bit 1 add; m >> 2: uses (0 both, 1 y, 2 s) */
            bool rms = m & 1, add = m & 2;
            int use = m >> 2;
            if (!add && use != 1) continue;
            const int64_t *xs = shapes[si], cs[1] = {xs[1]};
            oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -2, 2);
            oj_tensor *r = nt_rand(eng, 2, xs, OJ_BF16, -2, 2);
            oj_tensor *w = nt_rand(eng, 1, cs, OJ_F32, 0.5, 1.5);
            oj_tensor *b = nt_rand(eng, 1, cs, OJ_F32, -1, 1);
            oj_tensor *g1 = nt_rand(eng, 2, xs, OJ_BF16, -1, 1);
            oj_tensor *g2 = nt_rand(eng, 2, xs, OJ_F32, -1, 1);
            oj_tensor *vals[4] = {x, r, w, b}, *grads[3][5];
            for (int v = 0; v < 3; v++) { /* 0 unfused, 1 fused, 2 fused without the entry */
                eng->backend = v == 2 ? &bare : real;
                oj_tensor *l[4];
                for (int i = 0; i < 4; i++) oj_set_requires_grad(l[i] = oj_clone(vals[i]), true);
                oj_tensor *s = NULL;
                oj_tensor *rr = add ? l[1] : NULL;
                oj_tensor *y = v ? norm_to(rms, l[0], rr, l[2], l[3], &s, OJ_BF16)
                                 : norm_cast(rms, l[0], rr, l[2], l[3], &s, OJ_BF16);
                assert_non_null(y);
                assert_int_equal(oj_tensor_dtype(y), OJ_BF16);
                if (s) assert_non_null(oj_retain_grad(s));
                oj_tensor *l1 = oj_sum_all(oj_mul(y, g1));
                oj_tensor *l2 = s ? oj_sum_all(oj_mul(s, g2)) : NULL;
                oj_tensor *l1f = oj_cast(l1, OJ_F32);
                oj_tensor *loss = use == 0 ? oj_add(l1f, l2) : use == 1 ? l1f : l2;
                assert_int_equal(oj_backward(loss, false), OJ_OK);
                for (int i = 0; i < 4; i++) grads[v][i] = oj_grad(l[i]);
                grads[v][4] = s ? oj_grad(s) : NULL;
                eng->backend = real;
            }
            const char *names[5] = {"dx", "dr", "dweight", "dbias", "retained ds"};
            for (int v = 1; v < 3; v++)
                for (int i = 0; i < 5; i++) {
                    if ((rms && i == 3) || (!add && i == 1) || i == 4) continue;
                    char what[128];
                    snprintf(what, sizeof what, "%s (%s%s norm, shape %d, use %d, %s)", names[i],
                             add ? "add + " : "", rms ? "rms" : "layer", si, use,
                             v == 1 ? "fused" : "no norm_backward_add");
                    if (grads[0][i] == NULL) { /* add + norm: the weight gets none from s alone */
                        assert_true(i >= 2 && use == 2);
                        continue;
                    }
                    same_bits(what, grads[v][i], grads[0][i]);
                }
            if (add) {
                assert_int_equal(oj_tensor_dtype(grads[1][1]), OJ_BF16);
                if (use != 1) same_bits("retained ds is g2", grads[1][4], g2);
                if (use != 1) same_bits("retained ds is g2 (no entry)", grads[2][4], g2);
            }
        }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* norm_backward_add against layer/rms_norm_backward, binary add and copy on
 * the same backend: f32 x with f32 or bf16 dy (the f32 path), bf16 and f64
 * x (the chain itself). */
static void test_entry_bits(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *be = eng->backend;
    oj_scope_begin(eng);
    const oj_dtype cases[4][3] = {/* x, dy, dx_low */
                                  {OJ_F32, OJ_F32, OJ_BF16},
                                  {OJ_F32, OJ_BF16, OJ_F16},
                                  {OJ_BF16, OJ_BF16, OJ_F32},
                                  {OJ_F64, OJ_F64, OJ_F32}};
    const int64_t shapes[3][2] = {{1, 768}, {37, 65}, {70, 300}};
    for (int k = 0; k < 4; k++)
        for (int si = 0; si < 3; si++)
            for (int m = 0; m < 4; m++) { /* bit 0 rms, bit 1 weight gradients */
                bool rms = m & 1, wg = m & 2, low = cases[k][0] == OJ_F32;
                oj_dtype xdt = cases[k][0], sdt = xdt == OJ_F64 ? OJ_F64 : OJ_F32;
                int64_t N = shapes[si][0], C = shapes[si][1], s[2] = {N, C};
                oj_tensor *x = nt_rand(eng, 2, s, xdt, -2, 3);
                oj_tensor *w = nt_rand(eng, 1, &C, xdt, 0.5, 1.5);
                oj_tensor *out = oj_empty(eng, 2, s, xdt), *mean = oj_empty(eng, 1, &N, sdt);
                oj_tensor *rstd = oj_empty(eng, 1, &N, sdt);
                assert_int_equal(rms ? be->rms_norm_forward(eng, out, rstd, x, w, EPS)
                                     : be->layer_norm_forward(eng, out, mean, rstd, x, w, NULL,
                                                              EPS),
                                 OJ_OK);
                oj_tensor *dy = nt_rand(eng, 2, s, cases[k][1], -1, 1);
                oj_tensor *dres = nt_rand(eng, 2, s, xdt, -1, 1);
                oj_tensor *dx = oj_empty(eng, 2, s, xdt), *dx2 = oj_empty(eng, 2, s, xdt);
                oj_tensor *lo = low ? oj_empty(eng, 2, s, cases[k][2]) : NULL;
                oj_tensor *lo2 = low ? oj_empty(eng, 2, s, cases[k][2]) : NULL;
                oj_tensor *dw = wg ? oj_empty(eng, 1, &C, xdt) : NULL;
                oj_tensor *dw2 = wg ? oj_empty(eng, 1, &C, xdt) : NULL;
                oj_tensor *db = wg && !rms ? oj_empty(eng, 1, &C, xdt) : NULL;
                oj_tensor *db2 = wg && !rms ? oj_empty(eng, 1, &C, xdt) : NULL;
                assert_int_equal(be->norm_backward_add(eng, dx, lo, dw, db, dy, dres, x,
                                                       rms ? NULL : mean, rstd, w, rms),
                                 OJ_OK);
                /* the chain: dy cast to x's dtype (exact), the norm, the add, the cast */
                oj_tensor *dyc = oj_cast(dy, xdt);
                assert_int_equal(rms ? be->rms_norm_backward(eng, dx2, dw2, dyc, x, rstd, w)
                                     : be->layer_norm_backward(eng, dx2, dw2, db2, dyc, x, mean,
                                                               rstd, w),
                                 OJ_OK);
                assert_int_equal(be->binary(eng, OJ_BIN_ADD, dx2, dres, dx2), OJ_OK);
                if (low) assert_int_equal(be->copy(eng, lo2, dx2), OJ_OK);
                char what[128];
                snprintf(what, sizeof what, "norm_backward_add %s x, %s dy, [%lld, %lld], rms %d",
                         oj_dtype_name(xdt), oj_dtype_name(cases[k][1]), (long long)N,
                         (long long)C, (int)rms);
                same_bits(what, dx, dx2);
                if (low) same_bits(what, lo, lo2);
                if (wg) same_bits(what, dw, dw2);
                if (db) same_bits(what, db, db2);
                /* without dres: the norm's dx */
                oj_tensor *dx3 = oj_empty(eng, 2, s, xdt), *dx4 = oj_empty(eng, 2, s, xdt);
                assert_int_equal(be->norm_backward_add(eng, dx3, NULL, NULL, NULL, dy, NULL, x,
                                                       rms ? NULL : mean, rstd, w, rms),
                                 OJ_OK);
                assert_int_equal(rms ? be->rms_norm_backward(eng, dx4, NULL, dyc, x, rstd, w)
                                     : be->layer_norm_backward(eng, dx4, NULL, NULL, dyc, x, mean,
                                                               rstd, w),
                                 OJ_OK);
                same_bits(what, dx3, dx4);
            }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ctx: bit 0 rms, bit 1 add, bit 2 weight (and bias). in: x [N, C], r,
 * weight, bias (f64); the output dtype f64 given explicitly (the add's
 * backward through norm_backward_add with the residual gradient). */
static oj_tensor *norm_to_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int m = *(int *)ctx;
    bool rms = m & 1, add = m & 2, affine = m & 4;
    oj_tensor *s = NULL;
    oj_tensor *y = norm_to(rms, in[0], add ? in[1] : NULL, affine ? in[2] : NULL,
                           affine ? in[3] : NULL, &s, OJ_F64);
    if (y == NULL) return NULL;
    oj_tensor *out = y;
    if (s) { /* both outputs used: the residual gradient reaches the fused add */
        oj_tensor *s2 = oj_mul(s, s);
        out = oj_add(y, s2);
        oj_release(s2);
        oj_release(y);
        oj_release(s);
    }
    return out;
}

static void test_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t xs[2] = {5, 7}, cs[1] = {7};
    for (int m = 0; m < 8; m++) {
        oj_scope_begin(eng);
        oj_tensor *in[4] = {nt_leaf(eng, 2, xs, -2, 2), nt_leaf(eng, 2, xs, -1, 1),
                            nt_leaf(eng, 1, cs, 0.5, 1.5), nt_leaf(eng, 1, cs, -1, 1)};
        nt_gradcheck(eng, "norm_to", norm_to_fn, &m, in, 4);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

static void test_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {2, 4};
    oj_tensor *x = nt_rand(eng, 2, xs, OJ_F32, -1, 1), *s = NULL;
    nt_expect_error(eng, oj__layer_norm_to(x, NULL, NULL, EPS, OJ_I32), OJ_ERR_DTYPE, "layer_norm",
                    "i32");
    nt_expect_error(eng, oj__rms_norm_to(x, NULL, EPS, OJ_BOOL), OJ_ERR_DTYPE, "rms_norm", NULL);
    nt_expect_error(eng, oj__add_rms_norm_to(x, x, NULL, EPS, &s, OJ_I64), OJ_ERR_DTYPE,
                    "add_rms_norm", "i64");
    assert_null(s);
    nt_expect_error(eng, oj__add_layer_norm_to(x, x, NULL, NULL, EPS, NULL, OJ_BF16),
                    OJ_ERR_INVALID_ARGUMENT, "add_layer_norm", "sum is NULL");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_bits), cmocka_unit_test(test_grad_bits),
        cmocka_unit_test(test_entry_bits),   cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
