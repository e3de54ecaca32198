// test: oj__value_mix (nanolab's value residual v = v0 + s (v1 - v0)) gives
// one dtype and the same bits whichever path runs it: bf16/f16 v1, v0 with
// an f32 s give v1's dtype, the bits of sub in v1's dtype, mul and add in
// f32 and one rounding back (a host reference), through the chain of ops
// (the CPU backend) and through the fused entries (a stand-in built from
// the ops backend.h names), with the same gradients of v1 (contiguous and
// head views of a projection), v0 and s (s within the order of its sum);
// other dtypes keep the chain's promotion; the joint attention node with
// the value residual inside gives the bits of value_mix then attention.
#include <stdio.h>

#include "backend/backend.h"
#include "nn_testutil.h"
#include "ops/nn_common.h"

/* value_mix_forward as backend.h defines it, made of the ops it names (the
 * CPU backend has no such entry): oj__value_mix's fused path on the CPU. */
static oj_status sim_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *v1,
                             const oj_tensor *v0, const oj_tensor *s) {
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *d = oj_sub((oj_tensor *)v1, (oj_tensor *)v0);
    oj_tensor *a = d ? oj_mul(d, (oj_tensor *)s) : NULL;
    oj_tensor *sum = a ? oj_add((oj_tensor *)v0, a) : NULL;
    oj_tensor *c = sum ? oj_cast(sum, oj_tensor_dtype(out)) : NULL;
    oj_status st = c ? oj_copy_(out, c) : oj_last_status(eng);
    oj_tensor *tmp[] = {d, a, sum, c};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    oj_set_grad_enabled(eng, prev);
    return st;
}

/* dst = src seen in dst's shape (ds: s's shape, src one element). */
static oj_status put(oj_tensor *dst, oj_tensor *src) {
    int64_t shape[4];
    for (int d = 0; d < oj_rank(dst); d++) shape[d] = oj_size(dst, d);
    oj_tensor *r = src ? oj_reshape(src, oj_rank(dst), shape) : NULL;
    oj_status st = r ? oj_copy_(dst, r) : OJ_ERR_INTERNAL;
    oj_release(r);
    return st;
}

/* value_mix_backward as backend.h defines it: dv1 = (T)(g * s), dv0 =
 * g - dv1 in T, ds = the f64 sum of g * (v1 - v0) rounded to f32. */
static oj_status sim_backward(oj_engine *eng, oj_tensor *dv1, oj_tensor *dv0, oj_tensor *ds,
                              const oj_tensor *g, const oj_tensor *v1, const oj_tensor *v0,
                              const oj_tensor *s) {
    bool prev = oj_set_grad_enabled(eng, false);
    const oj_dtype dt = oj_tensor_dtype(g);
    oj_tensor *g32 = oj_cast((oj_tensor *)g, OJ_F32);
    oj_tensor *m = g32 ? oj_mul(g32, (oj_tensor *)s) : NULL;
    oj_tensor *w1 = m ? oj_cast(m, dt) : NULL;
    oj_tensor *w0 = w1 ? oj_sub((oj_tensor *)g, w1) : NULL;
    oj_tensor *d = oj_sub((oj_tensor *)v1, (oj_tensor *)v0);
    oj_tensor *g64 = oj_cast((oj_tensor *)g, OJ_F64), *d64 = d ? oj_cast(d, OJ_F64) : NULL;
    oj_tensor *p = g64 && d64 ? oj_mul(g64, d64) : NULL;
    oj_tensor *t = p ? oj_sum_all(p) : NULL;
    oj_tensor *t32 = t ? oj_cast(t, OJ_F32) : NULL;
    oj_status st = w0 && t32 ? OJ_OK : oj_last_status(eng);
    if (st == OJ_OK && dv1) st = oj_copy_(dv1, w1);
    if (st == OJ_OK && dv0) st = oj_copy_(dv0, w0);
    if (st == OJ_OK && ds) st = put(ds, t32);
    oj_tensor *tmp[] = {g32, m, w1, w0, d, g64, d64, p, t, t32};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    oj_set_grad_enabled(eng, prev);
    return st;
}

static void same_bits(const char *what, oj_tensor *t, oj_tensor *u) {
    assert_non_null(t);
    assert_non_null(u);
    if (oj_tensor_dtype(t) != oj_tensor_dtype(u))
        fail_msg("%s: dtype %s, want %s", what, oj_dtype_name(oj_tensor_dtype(t)),
                 oj_dtype_name(oj_tensor_dtype(u)));
    assert_int_equal(oj_numel(t), oj_numel(u));
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

/* p[0..n) rounded to dt and back (the engine's cast: round to nearest even). */
static void round_to(oj_engine *eng, float *p, int64_t n, oj_dtype dt) {
    oj_tensor *f = oj_from_host(eng, 1, &n, OJ_F32, p, (size_t)n * sizeof(float));
    oj_tensor *r = f ? oj_cast(f, dt) : NULL;
    oj_tensor *b = r ? oj_cast(r, OJ_F32) : NULL;
    assert_non_null(b);
    assert_int_equal(oj_to_host(b, p, (size_t)n * sizeof(float)), OJ_OK);
    oj_release(f);
    oj_release(r);
    oj_release(b);
}

/* (T)((float)v0 + (float)(T)((float)v1 - (float)v0) * s), each operation
 * rounded on its own, computed on the host: [n] in dt. */
static oj_tensor *host_mix(oj_engine *eng, oj_tensor *v1, oj_tensor *v0, float s, oj_dtype dt) {
    int64_t n = oj_numel(v1);
    double *h1 = nt_host(v1), *h0 = nt_host(v0);
    float *d = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) d[i] = (float)h1[i] - (float)h0[i];
    round_to(eng, d, n, dt);
    for (int64_t i = 0; i < n; i++) {
        volatile float a = d[i] * s; /* no fused multiply-add */
        d[i] = (float)h0[i] + a;
    }
    oj_tensor *f = oj_from_host(eng, 1, &n, OJ_F32, d, (size_t)n * sizeof(float));
    oj_tensor *r = f ? oj_cast(f, dt) : NULL;
    assert_non_null(r);
    oj_release(f);
    free(h1);
    free(h0);
    free(d);
    return r;
}

/* Cases: bf16 and f16; v1 a contiguous leaf or the head view of a
 * [B, T, 2 H D] projection; s [1] or rank 0. Run 0 the chain (the CPU
 * backend), run 1 the stand-in fused entries. */
static void test_paths_agree(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *real = eng->backend;
    oj_backend fused = *real;
    fused.value_mix_forward = sim_forward;
    fused.value_mix_backward = sim_backward;
    oj_scope_begin(eng);
    const int64_t B = 2, T = 7, H = 3, D = 16;
    for (int c = 0; c < 8; c++) {
        const oj_dtype dt = c & 1 ? OJ_F16 : OJ_BF16;
        const bool views = c & 2, s0d = c & 4;
        int64_t hs[4] = {B, H, T, D}, ps[3] = {B, T, 2 * H * D};
        oj_tensor *x0 = views ? nt_rand(eng, 3, ps, dt, -2, 2) : nt_rand(eng, 4, hs, dt, -2, 2);
        oj_tensor *v00 = nt_rand(eng, 4, hs, dt, -2, 2), *g = nt_rand(eng, 4, hs, dt, -1, 1);
        const float sv = 0.3125f + 0.05f * (float)c;
        oj_tensor *y[2], *dx[2], *dv0[2], *ds[2];
        for (int r = 0; r < 2; r++) {
            oj_tensor *x = oj_clone(x0), *v0 = oj_clone(v00);
            oj_tensor *s = oj_full(eng, s0d ? 0 : 1, (int64_t[1]){1}, OJ_F32, sv);
            oj_set_requires_grad(x, true);
            oj_set_requires_grad(v0, true);
            oj_set_requires_grad(s, true);
            oj_tensor *n = views ? oj_narrow(x, 2, 0, H * D) : NULL;
            oj_tensor *v1 = views ? nt_heads(n, H, D) : oj_retain(x);
            assert_non_null(v1);
            if (views) assert_false(oj_is_contiguous(v1));
            eng->backend = r ? &fused : real;
            assert_true(oj__value_mix_fits(eng, v1, v0, s) == (r == 1));
            y[r] = oj__value_mix(v1, v0, s);
            eng->backend = real;
            if (y[r] == NULL) fail_msg("case %d run %d: %s", c, r, oj_last_error(eng));
            if (oj_tensor_dtype(y[r]) != dt)
                fail_msg("case %d run %d (%s): value_mix gave %s, want %s", c, r,
                         r ? "fused" : "chain", oj_dtype_name(oj_tensor_dtype(y[r])),
                         oj_dtype_name(dt));
            eng->backend = r ? &fused : real;
            assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[r], g)), false), OJ_OK);
            eng->backend = real;
            dx[r] = oj_grad(x), dv0[r] = oj_grad(v0), ds[r] = oj_grad(s);
            assert_non_null(dx[r]);
            assert_non_null(dv0[r]);
            assert_non_null(ds[r]);
            oj_release(n);
            oj_release(v1);
        }
        char what[96];
        snprintf(what, sizeof what, "case %d (%s, %s, s rank %d): ", c, oj_dtype_name(dt),
                 views ? "head views" : "contiguous", s0d ? 0 : 1);
        size_t k = strlen(what);
        snprintf(what + k, sizeof what - k, "fused vs chain output");
        same_bits(what, y[1], y[0]);
        snprintf(what + k, sizeof what - k, "fused vs chain v1 gradient");
        same_bits(what, dx[1], dx[0]);
        snprintf(what + k, sizeof what - k, "fused vs chain v0 gradient");
        same_bits(what, dv0[1], dv0[0]);
        snprintf(what + k, sizeof what - k, "fused vs chain s gradient");
        nt_close_tensors(what, ds[1], ds[0], 1e-4, 1e-4);
        /* the values: the host's */
        oj_tensor *n = views ? oj_narrow(x0, 2, 0, H * D) : NULL;
        oj_tensor *v1 = views ? nt_heads(n, H, D) : oj_retain(x0);
        oj_tensor *want = host_mix(eng, v1, v00, sv, dt);
        oj_tensor *flat = oj_reshape(y[0], 1, (int64_t[1]){oj_numel(y[0])});
        snprintf(what + k, sizeof what - k, "chain vs the host's value residual");
        same_bits(what, flat, want);
        oj_tensor *tmp[] = {flat, want, v1, n};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* Outside the autocast case the chain's promotion stands: f32 v with an f32
 * s gives f32, bf16 v with a bf16 s bf16, bf16 v with an f64 s f64. */
static void test_other_dtypes(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const oj_dtype vt[3] = {OJ_F32, OJ_BF16, OJ_BF16}, st[3] = {OJ_F32, OJ_BF16, OJ_F64};
    for (int c = 0; c < 3; c++) {
        int64_t hs[4] = {2, 3, 5, 8};
        oj_tensor *v1 = nt_rand(eng, 4, hs, vt[c], -1, 1), *v0 = nt_rand(eng, 4, hs, vt[c], -1, 1);
        oj_tensor *s = oj_full(eng, 1, (int64_t[1]){1}, st[c], 0.25);
        oj_tensor *y = oj__value_mix(v1, v0, s);
        assert_non_null(y);
        const oj_dtype want = c == 0 ? OJ_F32 : st[c];
        if (oj_tensor_dtype(y) != want)
            fail_msg("v %s, s %s: value_mix gave %s, want %s", oj_dtype_name(vt[c]),
                     oj_dtype_name(st[c]), oj_dtype_name(oj_tensor_dtype(y)), oj_dtype_name(want));
        oj_tensor *d = oj_sub(v1, v0), *a = oj_mul(d, s), *ref = oj_add(v0, a);
        same_bits("value_mix vs the chain", y, ref);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* oj__attention_qk_norm_rotary_mix with the stand-in entries (the joint
 * node makes v again in its backward) against oj__value_mix then
 * oj__attention_qk_norm_rotary on the CPU backend (bf16 head views of a
 * [B, T, 3 H D] projection): the output, the projection's and v0's
 * gradients bit for bit, s's within the order of its sum. */
static void test_joint_node(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *real = eng->backend;
    oj_backend fused = *real;
    fused.value_mix_forward = sim_forward;
    fused.value_mix_backward = sim_backward;
    oj_scope_begin(eng);
    const int64_t B = 2, T = 9, H = 2, D = 16;
    int64_t xs[3] = {B, T, 3 * H * D}, hs[4] = {B, H, T, D};
    oj_tensor *x0 = nt_rand(eng, 3, xs, OJ_BF16, -2, 2), *v00 = nt_rand(eng, 4, hs, OJ_BF16, -2, 2);
    oj_tensor *g = nt_rand(eng, 4, hs, OJ_BF16, -1, 1);
    oj_tensor *y[2], *dx[2], *dv0[2], *ds[2];
    for (int r = 0; r < 2; r++) {
        oj_tensor *x = oj_clone(x0), *v0 = oj_clone(v00);
        oj_tensor *s = oj_full(eng, 1, (int64_t[1]){1}, OJ_F32, 0.375);
        oj_set_requires_grad(x, true);
        oj_set_requires_grad(v0, true);
        oj_set_requires_grad(s, true);
        oj_tensor *p[3] = {NULL, NULL, NULL};
        assert_int_equal(oj_split(x, H * D, 2, 3, p), 3);
        oj_tensor *hv[3];
        for (int i = 0; i < 3; i++) hv[i] = nt_heads(p[i], H, D);
        if (r == 1) {
            eng->backend = &fused;
            y[r] = oj__attention_qk_norm_rotary_mix(hv[0], hv[1], hv[2], v0, s, 1e-6, 0, 1e4);
        } else {
            oj_tensor *v = oj__value_mix(hv[2], v0, s);
            y[r] = v ? oj__attention_qk_norm_rotary(hv[0], hv[1], v, 1e-6, 0, 1e4) : NULL;
            oj_release(v);
        }
        if (y[r] == NULL) fail_msg("run %d: %s", r, oj_last_error(eng));
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[r], g)), false), OJ_OK);
        eng->backend = real;
        dx[r] = oj_grad(x), dv0[r] = oj_grad(v0), ds[r] = oj_grad(s);
        for (int i = 0; i < 3; i++) {
            oj_release(p[i]);
            oj_release(hv[i]);
        }
    }
    same_bits("joint node with the value residual: output", y[1], y[0]);
    same_bits("joint node with the value residual: projection gradient", dx[1], dx[0]);
    same_bits("joint node with the value residual: v0 gradient", dv0[1], dv0[0]);
    nt_close_tensors("joint node with the value residual: s gradient", ds[1], ds[0], 1e-4, 1e-4);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_other_dtypes),
        cmocka_unit_test(test_joint_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
