// test: rms_norm_rotary (RMS norm then rotary embedding, fused) — forward
// bit for bit equal to oj_rms_norm then oj_rotary_embedding (f32, f64,
// bf16; strided head views of a [B, T, H*D] projection; D 8, 64 and 128;
// odd T; position offsets; with and without weight; under autocast; a
// backend without the fused entries), gradients bit for bit against the
// two ops (dx, and dweight through the composed backward), gradcheck in
// f64, bad input.
#include <stdio.h>

#include "backend/backend.h"
#include "nn_testutil.h"

static const double EPS = 1e-6, THETA = 10000.0;

static void same_bits(const char *what, oj_tensor *t, oj_tensor *u) {
    assert_non_null(t);
    assert_non_null(u);
    assert_int_equal(oj_tensor_dtype(t), oj_tensor_dtype(u));
    assert_int_equal(oj_rank(t), oj_rank(u));
    for (int d = 0; d < oj_rank(t); d++) assert_int_equal(oj_size(t, d), oj_size(u, d));
    oj_tensor *tc = oj_contiguous(t), *uc = oj_contiguous(u);
    size_t n = (size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t));
    unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
    assert_int_equal(oj_to_host(tc, a, n), OJ_OK);
    assert_int_equal(oj_to_host(uc, b, n), OJ_OK);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (a[i] != b[i]) bad = i;
    free(a);
    free(b);
    oj_release(tc);
    oj_release(uc);
    if (bad != n) fail_msg("%s: byte %zu differs", what, bad);
}

/* [B, T, H*D] -> the head view [B, H, T, D] (strided, as the model's) */
static oj_tensor *heads(oj_tensor *x, int64_t H, int64_t D) {
    int64_t s[4] = {oj_size(x, 0), oj_size(x, 1), H, D};
    oj_tensor *v = oj_reshape(x, 4, s);
    oj_tensor *t = oj_transpose(v, 1, 2);
    oj_release(v);
    return t;
}

static oj_tensor *unfused(oj_tensor *x, oj_tensor *w, int64_t off) {
    oj_tensor *n = oj_rms_norm(x, w, EPS);
    oj_tensor *y = n ? oj_rotary_embedding(n, off, THETA) : NULL;
    oj_release(n);
    return y;
}

static void test_forward_bits(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
    const int64_t geo[4][4] = {{2, 5, 3, 8}, {1, 3, 2, 64}, {2, 7, 2, 128}, {1, 1, 1, 2}};
    for (int k = 0; k < 3; k++)
        for (int gi = 0; gi < 4; gi++)
            for (int m = 0; m < 8; m++) { /* bit 0 weight, 1 grad (rstd saved), 2 offset */
                const int64_t B = geo[gi][0], T = geo[gi][1], H = geo[gi][2], D = geo[gi][3];
                int64_t xs[3] = {B, T, H * D}, ws[1] = {D};
                oj_tensor *x = nt_rand(eng, 3, xs, dts[k], -2, 3);
                oj_tensor *w = (m & 1) ? nt_rand(eng, 1, ws, dts[k], 0.5, 1.5) : NULL;
                if (m & 2) oj_set_requires_grad(x, true);
                oj_tensor *xh = heads(x, H, D);
                int64_t off = (m & 4) ? 37 : 0;
                char what[96];
                snprintf(what, sizeof what, "%s geometry %d mode %d", oj_dtype_name(dts[k]), gi, m);
                oj_tensor *y = oj_rms_norm_rotary(xh, w, EPS, off, THETA);
                if (y == NULL) fail_msg("%s: %s", what, oj_last_error(eng));
                same_bits(what, y, unfused(xh, w, off));
                /* a contiguous input too */
                oj_tensor *xc = oj_contiguous(xh);
                same_bits(what, oj_rms_norm_rotary(xc, w, EPS, off, THETA), unfused(xc, w, off));
            }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* Under bf16 autocast the op computes in f32, as rms_norm does. */
static void test_autocast(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 128};
    oj_tensor *xh = heads(nt_rand(eng, 3, xs, OJ_BF16, -2, 2), 2, 64);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y = oj_rms_norm_rotary(xh, NULL, EPS, 3, THETA), *r = unfused(xh, NULL, 3);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(y), OJ_F32);
    same_bits("autocast", y, r);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* Gradients against the two ops, bit for bit: dx of the head view (into
 * the [B, T, H*D] leaf) and dweight. */
static void test_grad_bits(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F64};
    for (int k = 0; k < 3; k++)
        for (int m = 0; m < 4; m++) { /* bit 0 weight (with its gradient), bit 1 D 64 */
            const int64_t H = 3, D = (m & 2) ? 64 : 6, T = 5;
            int64_t xs[3] = {2, T, H * D}, ws[1] = {D}, ys[4] = {2, H, T, D};
            oj_tensor *x0 = nt_rand(eng, 3, xs, dts[k], -2, 2);
            oj_tensor *w0 = (m & 1) ? nt_rand(eng, 1, ws, dts[k], 0.5, 1.5) : NULL;
            oj_tensor *g = nt_rand(eng, 4, ys, dts[k], -1, 1);
            oj_tensor *grads[2][2] = {{NULL, NULL}, {NULL, NULL}};
            for (int fused = 0; fused < 2; fused++) {
                oj_tensor *x = oj_clone(x0), *w = w0 ? oj_clone(w0) : NULL;
                oj_set_requires_grad(x, true);
                if (w) oj_set_requires_grad(w, true);
                oj_tensor *xh = heads(x, H, D);
                oj_tensor *y = fused ? oj_rms_norm_rotary(xh, w, EPS, 2, THETA) : unfused(xh, w, 2);
                assert_non_null(y);
                assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, g)), false), OJ_OK);
                grads[fused][0] = oj_grad(x);
                grads[fused][1] = w ? oj_grad(w) : NULL;
            }
            char what[64];
            snprintf(what, sizeof what, "%s mode %d dx", oj_dtype_name(dts[k]), m);
            same_bits(what, grads[1][0], grads[0][0]);
            if (m & 1) same_bits("dweight", grads[1][1], grads[0][1]);
        }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* A backend without the fused entries: the two ops, the same bits. */
static void test_fallback(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *real = eng->backend;
    oj_backend bare = *real;
    bare.rms_norm_rotary_forward = NULL;
    oj_backend nobwd = *real;
    nobwd.rms_norm_rotary_backward = NULL;
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 32};
    oj_tensor *x0 = nt_rand(eng, 3, xs, OJ_F32, -2, 2);
    oj_tensor *dx[3];
    const oj_backend *bes[3] = {real, &bare, &nobwd};
    for (int i = 0; i < 3; i++) {
        oj_tensor *x = oj_clone(x0);
        oj_set_requires_grad(x, true);
        eng->backend = bes[i];
        oj_tensor *y = oj_rms_norm_rotary(heads(x, 2, 16), NULL, EPS, 1, THETA);
        assert_non_null(y);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, y)), false), OJ_OK);
        eng->backend = real;
        dx[i] = oj_grad(x);
    }
    same_bits("no fused forward", dx[1], dx[0]);
    same_bits("no fused backward", dx[2], dx[0]);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ctx: bit 0 weight. in: x [B, T, H*D] f64, weight [D]. */
static oj_tensor *nr_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int m = *(int *)ctx;
    oj_tensor *xh = heads(in[0], 2, 4);
    oj_tensor *y = oj_rms_norm_rotary(xh, (m & 1) ? in[1] : NULL, 1e-3, 5, 100.0);
    oj_release(xh);
    return y;
}

static void test_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    int64_t xs[3] = {2, 3, 8}, ws[1] = {4};
    for (int m = 0; m < 2; m++) {
        oj_scope_begin(eng);
        oj_tensor *in[2] = {nt_leaf(eng, 3, xs, -2, 2), nt_leaf(eng, 1, ws, 0.5, 1.5)};
        nt_gradcheck(eng, "rms_norm_rotary", nr_fn, &m, in, m ? 2 : 1);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

static void test_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t odd[3] = {2, 3, 5}, ok[3] = {2, 3, 4}, w3[1] = {3};
    oj_tensor *x = nt_rand(eng, 3, ok, OJ_F32, -1, 1);
    nt_expect_error(eng, oj_rms_norm_rotary(nt_rand(eng, 3, odd, OJ_F32, -1, 1), NULL, EPS, 0,
                                            THETA),
                    OJ_ERR_SHAPE, "rms_norm_rotary", "D even");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, 0, -1.0), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "theta");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, -1.0, 0, THETA), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "eps");
    nt_expect_error(eng, oj_rms_norm_rotary(x, nt_rand(eng, 1, w3, OJ_F32, -1, 1), EPS, 0, THETA),
                    OJ_ERR_SHAPE, "rms_norm_rotary", "weight");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, INT64_MAX - 1, THETA),
                    OJ_ERR_OUT_OF_RANGE, "rms_norm_rotary", "overflows");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_bits), cmocka_unit_test(test_autocast),
        cmocka_unit_test(test_grad_bits),    cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_gradcheck),    cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
