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
#include "ops/nn_common.h"

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
                oj_tensor *xh = nt_heads(x, H, D);
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
    oj_tensor *xh = nt_heads(nt_rand(eng, 3, xs, OJ_BF16, -2, 2), 2, 64);
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
                oj_tensor *xh = nt_heads(x, H, D);
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
        oj_tensor *y = oj_rms_norm_rotary(nt_heads(x, 2, 16), NULL, EPS, 1, THETA);
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

/* oj__attention_qk_norm_rotary (nanolab's QK-norm, rotation and
 * attention as one node) against rms_norm_rotary twice then causal
 * scaled_dot_product_attention: the output and the gradient of the
 * [B, T, 3 H D] projection whose head views q1, k1, v are, bit for bit
 * (f32, f64, bf16 under bf16 autocast as the model runs it; position
 * offset 3); between forward and backward it keeps less (q and k are
 * made again); a backend without the fused norm gives the same bits
 * through the three ops. */
static oj_tensor *joint_run(oj_engine *eng, bool joint, oj_tensor *x, int64_t H, int64_t D,
                            oj_tensor *g, int64_t *kept) {
    oj_tensor *parts[3] = {NULL, NULL, NULL};
    assert_int_equal(oj_split(x, H * D, 2, 3, parts), 3);
    oj_tensor *q1 = nt_heads(parts[0], H, D), *k1 = nt_heads(parts[1], H, D),
              *v = nt_heads(parts[2], H, D);
    const bool low = oj_autocast_enabled(eng);
    if (low) oj_set_autocast(eng, false, OJ_BF16);
    int64_t before = oj_engine_memory_allocated(eng);
    oj_tensor *y;
    if (joint) {
        y = oj__attention_qk_norm_rotary(q1, k1, v, EPS, 3, THETA);
    } else {
        oj_tensor *q = oj_rms_norm_rotary(q1, NULL, EPS, 3, THETA);
        oj_tensor *k = oj_rms_norm_rotary(k1, NULL, EPS, 3, THETA);
        y = oj_scaled_dot_product_attention(q, k, v, NULL, true, NAN);
        oj_release(q);
        oj_release(k);
    }
    *kept = oj_engine_memory_allocated(eng) - before;
    if (low) oj_set_autocast(eng, true, OJ_BF16);
    assert_non_null(y);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, g)), false), OJ_OK);
    for (int i = 0; i < 3; i++) oj_release(parts[i]);
    oj_release(q1);
    oj_release(k1);
    oj_release(v);
    return y;
}

static void test_attention_joint(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *real = eng->backend;
    oj_backend bare = *real;
    bare.rms_norm_rotary_forward = NULL;
    oj_scope_begin(eng);
    const oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
    for (int k = 0; k < 3; k++) {
        const int64_t B = 2, T = 7, H = 2, D = 16;
        int64_t xs[3] = {B, T, 3 * H * D}, ys[4] = {B, H, T, D};
        oj_tensor *x0 = nt_rand(eng, 3, xs, dts[k], -2, 2), *g = nt_rand(eng, 4, ys, dts[k], -1, 1);
        if (dts[k] == OJ_BF16) oj_set_autocast(eng, true, OJ_BF16);
        oj_tensor *y[3], *dx[3];
        int64_t kept[3];
        for (int r = 0; r < 3; r++) { /* separate, joint, joint on a backend without the fused norm */
            oj_tensor *x = oj_clone(x0);
            oj_set_requires_grad(x, true);
            if (r == 2) eng->backend = &bare;
            y[r] = joint_run(eng, r > 0, x, H, D, g, &kept[r]);
            eng->backend = real;
            dx[r] = oj_grad(x);
        }
        oj_set_autocast(eng, false, OJ_BF16);
        char what[64];
        for (int r = 1; r < 3; r++) {
            snprintf(what, sizeof what, "%s run %d output", oj_dtype_name(dts[k]), r);
            same_bits(what, y[r], y[0]);
            snprintf(what, sizeof what, "%s run %d dx", oj_dtype_name(dts[k]), r);
            same_bits(what, dx[r], dx[0]);
        }
        /* q and k ([B, H, T, D] each) are not kept by the joint node */
        int64_t qk = 2 * B * H * T * D * (int64_t)oj_dtype_size(dts[k]);
        if (!(kept[1] <= kept[0] - qk))
            fail_msg("%s: the joint node keeps %lld bytes, the three ops %lld (q and k: %lld)",
                     oj_dtype_name(dts[k]), (long long)kept[1], (long long)kept[0], (long long)qk);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* nanolab's fused projection x [B, T, 3 H D + G]: q, k, v heads and a
 * gate piece of G columns, one split. The joint node writes the gradients
 * of q1 and k1 (and of v when v is the projection's own head view) where
 * they lie in a buffer laid out like x, and the split's backward copies
 * the other pieces' gradients into the rest of it instead of
 * concatenating all four: the projection's gradient bit for bit that of
 * the three ops (whose contiguous gradients the split concatenates), with
 * one backend copy a piece not in place (the gate's; v's too when v is
 * made from its head view, as nanolab's value residual makes it) and none
 * for the heads' reshapes. */
static int copies_seen;
static oj_status (*copy_real)(oj_engine *, oj_tensor *, const oj_tensor *);
static oj_status copy_counted(oj_engine *eng, oj_tensor *out, const oj_tensor *x) {
    copies_seen++;
    return copy_real(eng, out, x);
}

static void test_attention_joint_in_place(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *real = eng->backend;
    oj_backend counted = *real;
    copy_real = real->copy;
    counted.copy = copy_counted;
    oj_scope_begin(eng);
    const oj_dtype dts[2] = {OJ_F32, OJ_F64};
    for (int k = 0; k < 2; k++) {
        for (int vmix = 0; vmix < 2; vmix++) {
            const int64_t B = 2, T = 7, H = 2, D = 16, G = 5, W = 3 * H * D + G;
            int64_t xs[3] = {B, T, W}, ys[4] = {B, H, T, D}, gs[3] = {B, T, G};
            oj_tensor *x0 = nt_rand(eng, 3, xs, dts[k], -2, 2);
            oj_tensor *g = nt_rand(eng, 4, ys, dts[k], -1, 1), *wg = nt_rand(eng, 3, gs, dts[k], -1, 1);
            oj_tensor *dx[2];
            int copies[2];
            for (int joint = 0; joint < 2; joint++) {
                oj_tensor *x = oj_clone(x0);
                oj_set_requires_grad(x, true);
                oj_tensor *p[4] = {NULL, NULL, NULL, NULL};
                const int64_t sizes[4] = {H * D, H * D, H * D, G};
                assert_int_equal(oj_split_sizes(x, 4, sizes, 2, p), 4);
                oj_tensor *q1 = nt_heads(p[0], H, D), *k1 = nt_heads(p[1], H, D);
                oj_tensor *v1 = nt_heads(p[2], H, D);
                oj_tensor *v = vmix ? oj_mul_scalar(v1, 0.5) : oj_retain(v1);
                oj_tensor *y;
                if (joint) {
                    y = oj__attention_qk_norm_rotary(q1, k1, v, EPS, 3, THETA);
                } else {
                    oj_tensor *q = oj_rms_norm_rotary(q1, NULL, EPS, 3, THETA);
                    oj_tensor *kk = oj_rms_norm_rotary(k1, NULL, EPS, 3, THETA);
                    y = oj_scaled_dot_product_attention(q, kk, v, NULL, true, NAN);
                    oj_release(q);
                    oj_release(kk);
                }
                assert_non_null(y);
                oj_tensor *l = oj_add(oj_sum_all(oj_mul(y, g)), oj_sum_all(oj_mul(p[3], wg)));
                copies_seen = 0;
                eng->backend = &counted;
                assert_int_equal(oj_backward(l, false), OJ_OK);
                eng->backend = real;
                copies[joint] = copies_seen;
                dx[joint] = oj_grad(x);
                oj_tensor *tmp[] = {p[0], p[1], p[2], p[3], q1, k1, v1, v, y};
                for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
            }
            char what[80];
            snprintf(what, sizeof what, "%s, v %s: projection gradient", oj_dtype_name(dts[k]),
                     vmix ? "made from its head view" : "the head view");
            same_bits(what, dx[1], dx[0]);
            if (copies[1] != 1 + vmix)
                fail_msg("%s: %d copies in the joint node's backward (want %d; the three ops: %d)",
                         what, copies[1], 1 + vmix, copies[0]);
        }
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ctx: bit 0 weight. in: x [B, T, H*D] f64, weight [D]. */
static oj_tensor *nr_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int m = *(int *)ctx;
    oj_tensor *xh = nt_heads(in[0], 2, 4);
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

/* ---- rms_norm_rotary at its edges, against rms_norm then rotary_embedding
 * (values and gradients): empty shapes, bad dtypes/shapes/eps/theta/offsets,
 * NaN/inf, eps 0, extreme offsets, stride-0 and strided views, ranks 2-5,
 * SIMD tails, backward twice, weight-only gradients, in-place writes after
 * the forward, autocast bf16/f16, thread-count invariance, weight aliasing x */

static oj_tensor *unfused_nr(oj_tensor *x, oj_tensor *w, double eps, int64_t off) {
    oj_tensor *n = oj_rms_norm(x, w, eps);
    oj_tensor *y = n ? oj_rotary_embedding(n, off, THETA) : NULL;
    oj_release(n);
    return y;
}

/* ---------------------------------------------------------------- rms_norm_rotary */

static void test_nr_empty(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t shapes[4][3] = {{2, 3, 0}, {2, 0, 4}, {0, 3, 4}, {0, 0, 0}};
    for (int i = 0; i < 4; i++) {
        oj_tensor *x = nt_rand(eng, 3, shapes[i], OJ_F32, -1, 1);
        oj_tensor *w = nt_rand(eng, 1, &shapes[i][2], OJ_F32, 0.5, 1.5);
        oj_set_requires_grad(x, true);
        oj_set_requires_grad(w, true);
        oj_tensor *y = oj_rms_norm_rotary(x, w, EPS, 3, THETA);
        if (y == NULL)
            fail_msg("shape %d: %s", i, oj_last_error(eng));
        assert_int_equal(oj_numel(y), 0);
        assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
        oj_tensor *g = oj_grad(w);
        assert_non_null(g);
        double *h = nt_host(g);
        for (int64_t k = 0; k < oj_numel(g); k++)
            assert_true(h[k] == 0.0);
        free(h);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s1[1] = {4}, s3[3] = {2, 3, 4}, w4[1] = {4}, w22[2] = {2, 2};
    oj_tensor *x = nt_rand(eng, 3, s3, OJ_F32, -1, 1);
    nt_expect_error(eng,
                    oj_rms_norm_rotary(nt_rand(eng, 1, s1, OJ_F32, -1, 1), NULL, EPS, 0, THETA),
                    OJ_ERR_SHAPE, "rms_norm_rotary", NULL);
    nt_expect_error(eng, oj_rms_norm_rotary(oj_cast(x, OJ_I32), NULL, EPS, 0, THETA), OJ_ERR_DTYPE,
                    "rms_norm_rotary", NULL);
    nt_expect_error(eng, oj_rms_norm_rotary(x, nt_rand(eng, 1, w4, OJ_BF16, -1, 1), EPS, 0, THETA),
                    OJ_ERR_DTYPE, "rms_norm_rotary", "weight");
    nt_expect_error(
        eng,
        oj_rms_norm_rotary(x, oj_cast(nt_rand(eng, 1, w4, OJ_F32, -1, 1), OJ_I64), EPS, 0, THETA),
        OJ_ERR_DTYPE, "rms_norm_rotary", "weight");
    nt_expect_error(eng, oj_rms_norm_rotary(x, nt_rand(eng, 2, w22, OJ_F32, -1, 1), EPS, 0, THETA),
                    OJ_ERR_SHAPE, "rms_norm_rotary", "weight");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, NAN, 0, THETA), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "eps");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, INFINITY, 0, THETA), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "eps");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, 0, NAN), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "theta");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, 0, INFINITY), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "theta");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, INT64_MAX - 2, THETA),
                    OJ_ERR_OUT_OF_RANGE, "rms_norm_rotary", NULL);
    assert_null(oj_rms_norm_rotary(NULL, NULL, EPS, 0, THETA));
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* values and gradients against rms_norm then rotary_embedding */
static void check_nr(oj_engine *eng, const char *what, oj_tensor *x0, oj_tensor *w0, double eps,
                     int64_t off, double tol) {
    oj_tensor *g[2][2] = {{NULL, NULL}, {NULL, NULL}}, *y[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *x = oj_detach(x0), *w = w0 ? oj_detach(w0) : NULL;
        oj_set_requires_grad(x, true);
        if (w)
            oj_set_requires_grad(w, true);
        oj_tensor *xv = x;
        y[f] = f ? oj_rms_norm_rotary(xv, w, eps, off, THETA) : unfused_nr(xv, w, eps, off);
        if (y[f] == NULL)
            fail_msg("%s (%d): %s", what, f, oj_last_error(eng));
        oj_tensor *s = oj_sum_all(oj_mul(y[f], y[f]));
        if (oj_backward(s, false) != OJ_OK)
            fail_msg("%s: backward: %s", what, oj_last_error(eng));
        g[f][0] = oj_grad(x);
        g[f][1] = w ? oj_grad(w) : NULL;
    }
    char b[128];
    snprintf(b, sizeof b, "%s value", what);
    nt_close_tensors(b, y[1], y[0], tol, tol);
    snprintf(b, sizeof b, "%s dx", what);
    nt_close_tensors(b, g[1][0], g[0][0], tol, tol);
    snprintf(b, sizeof b, "%s dw", what);
    if (w0)
        nt_close_tensors(b, g[1][1], g[0][1], tol, tol);
    (void)eng;
}

static void test_nr_values(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s3[3] = {2, 3, 8}, w8[1] = {8};
    oj_tensor *x = nt_rand(eng, 3, s3, OJ_F32, -2, 2), *w = nt_rand(eng, 1, w8, OJ_F32, .5, 1.5);
    /* NaN, inf and a zero row */
    double v[48];
    double *h = nt_host(x);
    memcpy(v, h, sizeof v);
    free(h);
    v[3] = NAN;
    v[12] = INFINITY;
    for (int i = 16; i < 24; i++)
        v[i] = 0.0;
    oj_tensor *xn = nt_from(eng, 3, s3, OJ_F32, v);
    check_nr(eng, "nan/inf", xn, w, EPS, 0, 0);
    check_nr(eng, "eps 0 zero row", xn, NULL, 0.0, 0, 0);
    check_nr(eng, "negative offset", x, w, EPS, -7, 0);
    check_nr(eng, "INT64_MIN offset", x, w, EPS, INT64_MIN, 0);
    check_nr(eng, "max offset", x, w, EPS, INT64_MAX - 3, 0);
    check_nr(eng, "f64", oj_cast(x, OJ_F64), oj_cast(w, OJ_F64), EPS, 5, 0);
    check_nr(eng, "bf16", oj_cast(x, OJ_BF16), oj_cast(w, OJ_BF16), EPS, 5, 0);
    check_nr(eng, "f16", oj_cast(x, OJ_F16), oj_cast(w, OJ_F16), EPS, 5, 0);
    /* stride 0: one row expanded */
    int64_t r1[3] = {1, 1, 8};
    oj_tensor *e = oj_expand(nt_rand(eng, 3, r1, OJ_F32, -2, 2), 3, s3);
    check_nr(eng, "expanded", e, w, EPS, 1, 0);
    /* stride 0 along D itself (every row constant) */
    int64_t c1[3] = {2, 3, 1};
    oj_tensor *ed = oj_expand(nt_rand(eng, 3, c1, OJ_F32, -2, 2), 3, s3);
    check_nr(eng, "expanded D", ed, w, EPS, 1, 0);
    check_nr(eng, "expanded D f64", oj_cast(ed, OJ_F64), oj_cast(w, OJ_F64), EPS, 1, 0);
    /* a weight that is itself a strided view */
    oj_tensor *w16 = nt_rand(eng, 1, (int64_t[]){16}, OJ_F32, .5, 1.5);
    check_nr(eng, "strided weight", x, oj_slice(w16, 0, 0, 16, 2), EPS, 1, 0);
    /* a strided slice along D (stride 2) and along T */
    int64_t s16[3] = {2, 3, 16};
    oj_tensor *xs = oj_slice(nt_rand(eng, 3, s16, OJ_F32, -2, 2), 2, 1, 16, 2);
    check_nr(eng, "D stride 2", xs, w, EPS, 2, 0);
    oj_tensor *xt = oj_transpose(nt_rand(eng, 3, (int64_t[]){3, 2, 8}, OJ_F32, -2, 2), 0, 1);
    check_nr(eng, "transposed rows", xt, w, EPS, 2, 0);
    /* D with SIMD tails */
    const int64_t Ds[3] = {130, 18, 34};
    for (int i = 0; i < 3; i++) {
        int64_t sx[3] = {2, 5, Ds[i]}, sw[1] = {Ds[i]};
        check_nr(eng, "SIMD tail", nt_rand(eng, 3, sx, OJ_F32, -3, 3),
                 nt_rand(eng, 1, sw, OJ_F32, .5, 1.5), EPS, 11, 0);
    }
    /* D 2, T 1 */
    check_nr(eng, "D 2", nt_rand(eng, 3, (int64_t[]){1, 1, 2}, OJ_F32, -2, 2), NULL, EPS, 0, 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_backward_twice(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 16}, w8[1] = {8};
    for (int m = 0; m < 4; m++) { /* bit 0 weight needs grad, bit 1 x needs grad (not both 0) */
        if (m == 0)
            continue;
        oj_tensor *x = nt_rand(eng, 3, xs, OJ_F32, -2, 2),
                  *w = nt_rand(eng, 1, w8, OJ_F32, .5, 1.5);
        oj_set_requires_grad(x, (m & 2) != 0);
        oj_set_requires_grad(w, (m & 1) != 0);
        oj_tensor *y = oj_rms_norm_rotary(nt_heads(x, 2, 8), w, EPS, 4, THETA);
        assert_non_null(y);
        oj_tensor *s = oj_sum_all(oj_mul(y, y));
        assert_int_equal(oj_backward(s, true), OJ_OK);
        oj_tensor *gx1 = (m & 2) ? oj_clone(oj_grad(x)) : NULL;
        oj_tensor *gw1 = (m & 1) ? oj_clone(oj_grad(w)) : NULL;
        assert_int_equal(oj_backward(s, false), OJ_OK);
        if (m & 2)
            nt_close_tensors("dx twice", oj_grad(x), oj_mul_scalar(gx1, 2.0), 1e-6, 1e-6);
        if (m & 1)
            nt_close_tensors("dw twice", oj_grad(w), oj_mul_scalar(gw1, 2.0), 1e-6, 1e-6);
        if (!(m & 2))
            assert_null(oj_grad(x));
        /* a third backward: the saved tensors are freed */
        assert_int_not_equal(oj_backward(s, false), OJ_OK);
        oj_clear_error(eng);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_inplace_after(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 8}, w8[1] = {8};
    for (int which = 0; which < 2; which++) {
        oj_tensor *x = nt_rand(eng, 3, xs, OJ_F32, -2, 2),
                  *w = nt_rand(eng, 1, w8, OJ_F32, .5, 1.5);
        oj_tensor *a = nt_rand(eng, 3, xs, OJ_F32, -2, 2);
        oj_set_requires_grad(a, true);
        oj_set_requires_grad(w, true);
        oj_tensor *xa = oj_mul(x, a);
        oj_tensor *y = oj_rms_norm_rotary(xa, w, EPS, 0, THETA);
        assert_non_null(y);
        bool prev = oj_set_grad_enabled(eng, false);
        assert_int_equal(oj_mul_scalar_(which ? w : xa, 2.0), OJ_OK);
        oj_set_grad_enabled(eng, prev);
        assert_int_not_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
        oj_clear_error(eng);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_autocast(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 16}, w8[1] = {8};
    oj_tensor *x = nt_rand(eng, 3, xs, OJ_BF16, -2, 2), *w = nt_rand(eng, 1, w8, OJ_BF16, .5, 1.5);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y = oj_rms_norm_rotary(nt_heads(x, 2, 8), w, EPS, 4, THETA);
    oj_tensor *r = unfused_nr(nt_heads(x, 2, 8), w, EPS, 4);
    oj_tensor *yf = oj_rms_norm_rotary(nt_heads(oj_cast(x, OJ_F32), 2, 8), w, EPS, 4, THETA);
    oj_set_autocast(eng, false, OJ_BF16);
    if (y == NULL || r == NULL || yf == NULL)
        fail_msg("%s", oj_last_error(eng));
    nt_close_tensors("autocast", y, r, 0, 0);
    nt_close_tensors("autocast f32 x", yf, r, 0, 0);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, y)), false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), OJ_BF16);
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), OJ_BF16);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* rank 2 and rank 5 inputs; f16 autocast; the same bits for 1, 2 and 3
 * threads (EXACT) */
static void test_nr_ranks_threads(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s2[2] = {7, 6}, s5[5] = {2, 1, 3, 2, 4}, w6[1] = {6}, w4[1] = {4};
    check_nr(eng, "rank 2", nt_rand(eng, 2, s2, OJ_F32, -2, 2),
             nt_rand(eng, 1, w6, OJ_F32, .5, 1.5), EPS, 9, 0);
    check_nr(eng, "rank 5", nt_rand(eng, 5, s5, OJ_F64, -2, 2),
             nt_rand(eng, 1, w4, OJ_F64, .5, 1.5), EPS, 9, 0);
    oj_tensor *xh = nt_rand(eng, 2, s2, OJ_F16, -2, 2);
    oj_set_autocast(eng, true, OJ_F16);
    oj_tensor *y = oj_rms_norm_rotary(xh, NULL, EPS, 1, THETA), *r = unfused_nr(xh, NULL, EPS, 1);
    oj_set_autocast(eng, false, OJ_F16);
    nt_close_tensors("f16 autocast", y, r, 0, 0);
    assert_int_equal(oj_tensor_dtype(y), OJ_F32);
    oj_scope_end(eng);
    nt_engine_done(eng);
    double *out[3], *dx[3];
    const int64_t xs[3] = {3, 37, 64};
    for (int t = 0; t < 3; t++) {
        oj_engine *e = NULL;
        oj_engine_config cfg = oj_engine_config_default();
        cfg.seed = 77;
        cfg.threads = t + 1;
        cfg.numerics = OJ_NUMERICS_EXACT;
        assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
        oj_scope_begin(e);
        oj_tensor *x = oj_set_requires_grad(nt_rand(e, 3, xs, OJ_F32, -2, 2), true);
        oj_tensor *yy = oj_rms_norm_rotary(nt_heads(x, 4, 16), NULL, EPS, 3, THETA);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(yy, yy)), false), OJ_OK);
        out[t] = nt_host(yy);
        dx[t] = nt_host(oj_grad(x));
        oj_scope_end(e);
        nt_engine_done(e);
    }
    for (int t = 1; t < 3; t++) {
        assert_memory_equal(out[t], out[0], 3 * 37 * 64 * sizeof(double));
        assert_memory_equal(dx[t], dx[0], 3 * 37 * 64 * sizeof(double));
    }
    for (int t = 0; t < 3; t++) {
        free(out[t]);
        free(dx[t]);
    }
}

/* x and weight views of one leaf: the two gradients summed into it */
static void test_nr_weight_aliases_x(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t as[2] = {1, 8}, ws[1] = {8};
    oj_tensor *a0 = nt_rand(eng, 2, as, OJ_F64, 0.5, 1.5), *g[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *a = oj_set_requires_grad(oj_clone(a0), true);
        oj_tensor *w = oj_reshape(a, 1, ws);
        oj_tensor *y = f ? oj_rms_norm_rotary(a, w, EPS, 2, THETA) : unfused_nr(a, w, EPS, 2);
        assert_non_null(y);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, y)), false), OJ_OK);
        g[f] = oj_grad(a);
    }
    nt_close_tensors("aliased weight", g[1], g[0], 0, 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_bits), cmocka_unit_test(test_autocast),
        cmocka_unit_test(test_grad_bits),    cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_gradcheck),    cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nr_empty),
        cmocka_unit_test(test_nr_errors),
        cmocka_unit_test(test_nr_values),
        cmocka_unit_test(test_nr_backward_twice),
        cmocka_unit_test(test_nr_inplace_after),
        cmocka_unit_test(test_nr_autocast),
        cmocka_unit_test(test_nr_ranks_threads),
        cmocka_unit_test(test_nr_weight_aliases_x),
        cmocka_unit_test(test_attention_joint),
        cmocka_unit_test(test_attention_joint_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
