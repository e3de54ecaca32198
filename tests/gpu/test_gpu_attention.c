// test: cuDNN's fused flash attention, the CUDA attention op's path for
// bf16/f16 at head dims 64 and 128 (src/backend/cuda/cuda_attention_cudnn.cu),
// agrees with the CPU's f32 attention on the same bf16/f16-rounded inputs,
// forward (out, lse) and backward (dq, dk, dv), for head dims 64 and 128,
// GQA (H 8, Hkv 2), T not a multiple of 64 (1000) and q, k, v, out, dout,
// dq, dk, dv as the [B, H, T, D] views of [B, T, H, D] storage the model
// passes. Every call must have run cuDNN (the backend's attention_impl says
// which implementation ran): a refused plan fails the test with cuDNN's own
// error string. Under EXACT it runs cuDNN's deterministic graphs: a second
// run gives the same bits, forward and backward. A forward and backward
// captured into a CUDA graph for a shape seen first inside the capture (the
// plan is built there) replays the eager results. A forward without lse
// (inference) runs the tensor-core kernels and builds no plan; a capture
// that records no gradients (a decode step) creates no cuDNN handle; the
// plan cache keeps at most 16 keys and never evicts a plan a live graph
// replays. Skips (77) without a CUDA device.
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
#include "gpu_testutil.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

static oj_engine *cpu, *gpuf, *gpux; /* CPU (f32 reference), CUDA FAST, CUDA EXACT */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) { /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-52 - 1.0;
}

static double round_to(oj_dtype dt, double v) {
    return dt == OJ_BF16 ? oj_bf16_to_f32(oj_f32_to_bf16((float)v))
                         : oj_f16_to_f32(oj_f32_to_f16((float)v));
}

/* n random values in [-1, 1) rounded to dt (the same values feed both sides). */
static double *rvals(int64_t n, oj_dtype dt) {
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = round_to(dt, urand());
    return v;
}

/* A [B, n, R, C] tensor of dtype dt on e holding vals (in [B, n, R, C]
 * order; NULL: NaN, so unwritten elements fail): contiguous, or (strided)
 * the permuted view of [B, R, n, C] storage. */
static oj_tensor *heads(oj_engine *e, const int64_t s[4], oj_dtype dt, const double *vals,
                        bool strided) {
    int64_t n = s[0] * s[1] * s[2] * s[3];
    size_t es = oj_dtype_size(dt);
    unsigned char *buf = malloc((size_t)n * es);
    assert_non_null(buf);
    for (int64_t b = 0; b < s[0]; b++)
        for (int64_t h = 0; h < s[1]; h++)
            for (int64_t r = 0; r < s[2]; r++)
                for (int64_t c = 0; c < s[3]; c++) {
                    int64_t li = ((b * s[1] + h) * s[2] + r) * s[3] + c;
                    int64_t si = strided ? ((b * s[2] + r) * s[1] + h) * s[3] + c : li;
                    float f = vals ? (float)vals[li] : NAN;
                    unsigned char *p = buf + si * (int64_t)es;
                    if (dt == OJ_F32)
                        memcpy(p, &f, 4);
                    else {
                        uint16_t u = dt == OJ_BF16 ? oj_f32_to_bf16(f) : oj_f32_to_f16(f);
                        memcpy(p, &u, 2);
                    }
                }
    int64_t st[4] = {s[0], s[2], s[1], s[3]};
    oj_tensor *t = oj_from_host(e, 4, strided ? st : s, dt, buf, (size_t)n * es);
    free(buf);
    if (t == NULL) fail_msg("upload: %s", oj_last_error(e));
    if (strided) assert_non_null(t = oj_permute(t, 4, (int[4]){0, 2, 1, 3}));
    return t;
}

static double *to_doubles(oj_tensor *t) {
    oj_tensor *c = oj_cast(oj_contiguous(t), OJ_F32);
    int64_t n = oj_numel(t);
    float *f = malloc((size_t)n * sizeof *f);
    double *d = malloc((size_t)n * sizeof *d);
    assert_non_null(f);
    assert_non_null(d);
    if (c == NULL || oj_to_host(c, f, (size_t)n * sizeof *f) != OJ_OK)
        fail_msg("read-back: %s", oj_last_error(oj_tensor_engine(t)));
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

/* ||g - c|| <= rtol ||c|| and max |g - c| <= rtol max |c| (NaN never passes). */
static void cmp_norm(oj_tensor *g, oj_tensor *c, double rtol, const char *what) {
    if (oj_numel(g) != oj_numel(c)) fail_msg("%s: sizes differ", what);
    int64_t n = oj_numel(c);
    double *dg = to_doubles(g), *dc = to_doubles(c);
    double num = 0, den = 0, mx = 0, mxerr = 0, nan_g = 0, nan_c = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        if (isnan(dg[i]) || isnan(dc[i])) {
            bad = i, nan_g = dg[i], nan_c = dc[i];
            break;
        }
        double e = dg[i] - dc[i];
        num += e * e;
        den += dc[i] * dc[i];
        if (fabs(dc[i]) > mx) mx = fabs(dc[i]);
        if (fabs(e) > mxerr) mxerr = fabs(e);
    }
    free(dg);
    free(dc);
    if (bad >= 0) fail_msg("%s: element %lld: cuda %g, cpu %g", what, (long long)bad, nan_g, nan_c);
    if (!(sqrt(num) <= rtol * sqrt(den)) || !(mxerr <= rtol * mx))
        fail_msg("%s: ||cuda - cpu|| / ||cpu|| = %.3g, max |cuda - cpu| = %.3g, max |cpu| = %.3g "
                 "(rtol %g)",
                 what, sqrt(num) / (sqrt(den) + 1e-300), mxerr, mx, rtol);
}

/* a and b hold the same bits (contiguous copies compared byte for byte). */
static void same_bits(oj_tensor *a, oj_tensor *b, const char *what) {
    size_t n = (size_t)oj_numel(a) * oj_dtype_size(oj_tensor_dtype(a));
    unsigned char *x = malloc(n), *y = malloc(n);
    assert_non_null(x);
    assert_non_null(y);
    oj_tensor *ca = oj_contiguous(a), *cb = oj_contiguous(b);
    if (ca == NULL || cb == NULL || oj_to_host(ca, x, n) != OJ_OK || oj_to_host(cb, y, n) != OJ_OK)
        fail_msg("%s: read-back failed", what);
    int d = memcmp(x, y, n);
    free(x);
    free(y);
    if (d != 0) fail_msg("%s: the bits differ", what);
}

/* The last attention call of e (backward or forward) ran `want`; else fail
 * with the reason the engine gives (cuDNN's error string for a refused plan). */
static void require_impl(oj_engine *e, bool backward, const char *want, const char *what) {
    char why[400] = "";
    assert_non_null(e->backend->attention_impl);
    const char *impl = e->backend->attention_impl(e, backward, why, sizeof why);
    if (strcmp(impl, want) != 0)
        fail_msg("%s %s: ran \"%s\", expected \"%s\"; cuDNN: %s", what,
                 backward ? "backward" : "forward", impl, want, why[0] ? why : "(no reason)");
}

typedef struct {
    int64_t B, H, Hkv, T, D;
    oj_dtype dt;
    bool strided; /* every tensor a view of [B, T, H, D] storage */
} cd_case;

static void one_case(const cd_case *c) {
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, T = c->T, D = c->D;
    oj_dtype dt = c->dt;
    int64_t sq[4] = {B, H, T, D}, skv[4] = {B, Hkv, T, D}, sl[3] = {B, H, T};
    double *qv = rvals(B * H * T * D, dt), *kv = rvals(B * Hkv * T * D, dt),
           *vv = rvals(B * Hkv * T * D, dt), *gv = rvals(B * H * T * D, dt);
    double scale = 1.0 / sqrt((double)D);
    char what[160];
    snprintf(what, sizeof what, "cudnn attention B%lld H%lld/%lld T%lld D%lld %s%s", (long long)B,
             (long long)H, (long long)Hkv, (long long)T, (long long)D, oj_dtype_name(dt),
             c->strided ? " [B,T,H,D] views" : "");
    const bool s = c->strided;
    oj_scope_begin(gpuf);
    oj_scope_begin(cpu);
    oj_tensor *q = heads(gpuf, sq, dt, qv, s), *k = heads(gpuf, skv, dt, kv, s),
              *v = heads(gpuf, skv, dt, vv, s), *g = heads(gpuf, sq, dt, gv, s);
    oj_tensor *out = heads(gpuf, sq, dt, NULL, s), *lse = oj_full(gpuf, 3, sl, OJ_F32, NAN);
    oj_tensor *qc = heads(cpu, sq, OJ_F32, qv, false), *kc = heads(cpu, skv, OJ_F32, kv, false),
              *vc = heads(cpu, skv, OJ_F32, vv, false), *gc = heads(cpu, sq, OJ_F32, gv, false);
    oj_tensor *outc = heads(cpu, sq, OJ_F32, NULL, false), *lsec = oj_full(cpu, 3, sl, OJ_F32, NAN);
    assert_non_null(lse);
    assert_non_null(lsec);

    if (gpuf->backend->attention_forward(gpuf, out, lse, q, k, v, NULL, true, scale) != OJ_OK)
        fail_msg("%s forward: %s", what, oj_last_error(gpuf));
    require_impl(gpuf, false, "cudnn", what);
    assert_int_equal(
        cpu->backend->attention_forward(cpu, outc, lsec, qc, kc, vc, NULL, true, scale), OJ_OK);
    cmp_norm(out, outc, 2e-2, what);
    cmp_norm(lse, lsec, 1e-3, "cudnn attention lse");

    oj_tensor *dq = heads(gpuf, sq, dt, NULL, s), *dk = heads(gpuf, skv, dt, NULL, s),
              *dv = heads(gpuf, skv, dt, NULL, s);
    oj_tensor *dqc = heads(cpu, sq, OJ_F32, NULL, false),
              *dkc = heads(cpu, skv, OJ_F32, NULL, false),
              *dvc = heads(cpu, skv, OJ_F32, NULL, false);
    if (gpuf->backend->attention_backward(gpuf, dq, dk, dv, g, q, k, v, out, lse, NULL, true,
                                          scale) != OJ_OK)
        fail_msg("%s backward: %s", what, oj_last_error(gpuf));
    require_impl(gpuf, true, "cudnn", what);
    assert_int_equal(cpu->backend->attention_backward(cpu, dqc, dkc, dvc, gc, qc, kc, vc, outc,
                                                      lsec, NULL, true, scale),
                     OJ_OK);
    cmp_norm(dq, dqc, 3e-2, "cudnn attention dq");
    cmp_norm(dk, dkc, 3e-2, "cudnn attention dk");
    cmp_norm(dv, dvc, 3e-2, "cudnn attention dv");

    /* EXACT: cuDNN's deterministic graphs; a second run gives the same bits */
    oj_scope_begin(gpux);
    oj_tensor *qx = heads(gpux, sq, dt, qv, s), *kx = heads(gpux, skv, dt, kv, s),
              *vx = heads(gpux, skv, dt, vv, s), *gx = heads(gpux, sq, dt, gv, s);
    oj_tensor *ox[2], *lx[2], *dqx[2], *dkx[2], *dvx[2];
    for (int r = 0; r < 2; r++) {
        ox[r] = heads(gpux, sq, dt, NULL, s);
        assert_non_null(lx[r] = oj_full(gpux, 3, sl, OJ_F32, NAN));
        if (gpux->backend->attention_forward(gpux, ox[r], lx[r], qx, kx, vx, NULL, true, scale) !=
            OJ_OK)
            fail_msg("%s EXACT forward: %s", what, oj_last_error(gpux));
        require_impl(gpux, false, "cudnn", what);
    }
    for (int r = 0; r < 2; r++) {
        dqx[r] = heads(gpux, sq, dt, NULL, s);
        dkx[r] = heads(gpux, skv, dt, NULL, s);
        dvx[r] = heads(gpux, skv, dt, NULL, s);
        if (gpux->backend->attention_backward(gpux, dqx[r], dkx[r], dvx[r], gx, qx, kx, vx, ox[0],
                                              lx[0], NULL, true, scale) != OJ_OK)
            fail_msg("%s EXACT backward: %s", what, oj_last_error(gpux));
        require_impl(gpux, true, "cudnn", what);
    }
    same_bits(ox[1], ox[0], "EXACT rerun out");
    same_bits(lx[1], lx[0], "EXACT rerun lse");
    same_bits(dqx[1], dqx[0], "EXACT rerun dq");
    same_bits(dkx[1], dkx[0], "EXACT rerun dk");
    same_bits(dvx[1], dvx[0], "EXACT rerun dv");
    cmp_norm(ox[0], outc, 2e-2, "cudnn attention EXACT out");
    cmp_norm(dqx[0], dqc, 3e-2, "cudnn attention EXACT dq");
    cmp_norm(dkx[0], dkc, 3e-2, "cudnn attention EXACT dk");
    cmp_norm(dvx[0], dvc, 3e-2, "cudnn attention EXACT dv");
    oj_scope_end(gpux);

    oj_scope_end(cpu);
    oj_scope_end(gpuf);
    free(qv);
    free(kv);
    free(vv);
    free(gv);
}

static void test_cudnn_attention(void **state) {
    (void)state;
    cd_case cases[] = {
        {2, 8, 2, 1000, 64, OJ_BF16, true},  /* GQA, T not a multiple of 64, model views */
        {1, 8, 2, 1000, 128, OJ_BF16, true}, /* D 128 */
        {2, 4, 4, 256, 64, OJ_F16, false},   /* f16, contiguous */
        {1, 6, 6, 333, 128, OJ_F16, true},   {2, 12, 12, 128, 64, OJ_BF16, true}, /* gpt2's heads */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_case(&cases[i]);
}

/* Forward + backward through the autograd op on e: out and the three
 * gradients (bf16 [B, H, T, D] leaves made from the given values). */
static void sdpa_step(oj_engine *e, const int64_t s[4], const double *qv, const double *kv,
                      const double *vv, const double *wv, oj_tensor **res, oj_graph **graph) {
    oj_tensor *q = heads(e, s, OJ_BF16, qv, false), *k = heads(e, s, OJ_BF16, kv, false),
              *v = heads(e, s, OJ_BF16, vv, false), *w = heads(e, s, OJ_BF16, wv, false);
    assert_non_null(oj_set_requires_grad(q, true));
    assert_non_null(oj_set_requires_grad(k, true));
    assert_non_null(oj_set_requires_grad(v, true));
    if (graph) assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    oj_tensor *o = oj_scaled_dot_product_attention(q, k, v, NULL, true, NAN);
    oj_tensor *loss = oj_sum_all(oj_mul(o, w));
    if (loss == NULL || oj_backward(loss, false) != OJ_OK) fail_msg("step: %s", oj_last_error(e));
    if (graph) {
        assert_non_null(*graph = oj_graph_capture_end(e));
        assert_int_equal(oj_graph_replay(*graph), OJ_OK);
    }
    res[0] = o;
    res[1] = oj_grad(q);
    res[2] = oj_grad(k);
    res[3] = oj_grad(v);
    for (int i = 0; i < 4; i++) assert_non_null(res[i]);
}

// test: a captured step builds its cuDNN plans inside the capture and replays the eager result
static void test_cudnn_attention_capture(void **state) {
    (void)state;
    int64_t s[4] = {1, 4, 320, 64}, n = 4 * 320 * 64;
    double *qv = rvals(n, OJ_BF16), *kv = rvals(n, OJ_BF16), *vv = rvals(n, OJ_BF16),
           *wv = rvals(n, OJ_BF16);
    oj_scope_begin(gpuf);
    oj_tensor *cap[4], *eag[4];
    oj_graph *g = NULL;
    sdpa_step(gpuf, s, qv, kv, vv, wv, cap, &g);
    require_impl(gpuf, false, "cudnn", "captured attention");
    require_impl(gpuf, true, "cudnn", "captured attention");
    sdpa_step(gpuf, s, qv, kv, vv, wv, eag, NULL);
    require_impl(gpuf, false, "cudnn", "eager attention");
    const char *names[4] = {"replayed out", "replayed dq", "replayed dk", "replayed dv"};
    for (int i = 0; i < 4; i++) cmp_norm(cap[i], eag[i], 1e-2, names[i]);
    /* a second replay after new inputs would need the leaves; the replay
     * itself must be repeatable */
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    cmp_norm(cap[0], eag[0], 1e-2, "second replay out");
    oj_scope_end(gpuf);
    oj_graph_free(g);
    assert_int_equal(oj_last_status(gpuf), OJ_OK);
    free(qv);
    free(kv);
    free(vv);
    free(wv);
}

/* e's cuDNN cache: keys cached, keys pinned by live graphs, handle made. */
static void cache_state(oj_engine *e, int64_t *plans, int64_t *pinned, bool *handle) {
    assert_non_null(e->backend->attention_cudnn_cache);
    e->backend->attention_cudnn_cache(e, plans, pinned, handle);
}

// test: an inference forward (no lse) runs the tensor-core kernels and builds no cuDNN plan
static void test_cudnn_inference_forward(void **state) {
    (void)state;
    oj_engine *e = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 7);
    int64_t s[4] = {1, 4, 200, 64}, n = 4 * 200 * 64, plans, pinned;
    bool handle;
    double *qv = rvals(n, OJ_BF16), *kv = rvals(n, OJ_BF16), *vv = rvals(n, OJ_BF16);
    oj_scope_begin(e);
    oj_tensor *q = heads(e, s, OJ_BF16, qv, true), *k = heads(e, s, OJ_BF16, kv, true),
              *v = heads(e, s, OJ_BF16, vv, true), *out = heads(e, s, OJ_BF16, NULL, true);
    if (e->backend->attention_forward(e, out, NULL, q, k, v, NULL, true, 0.125) != OJ_OK)
        fail_msg("forward: %s", oj_last_error(e));
    require_impl(e, false, "tensor core", "inference forward (backend)");
    bool prev = oj_set_grad_enabled(e, false);
    assert_non_null(oj_scaled_dot_product_attention(q, k, v, NULL, true, NAN));
    oj_set_grad_enabled(e, prev);
    require_impl(e, false, "tensor core", "inference forward (op, no grad)");
    cache_state(e, &plans, &pinned, &handle);
    assert_int_equal(plans, 0);
    assert_false(handle);
    oj_scope_end(e);
    oj_engine_free(e);
    free(qv);
    free(kv);
    free(vv);
}

// test: a capture without gradients (a decode step) makes no cuDNN handle; a training capture does
static void test_cudnn_handle_lazy(void **state) {
    (void)state;
    oj_engine *e = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 7);
    int64_t n16[1] = {16}, plans, pinned;
    bool handle;
    oj_scope_begin(e);
    oj_tensor *x = oj_full(e, 1, n16, OJ_F32, 1.0);
    assert_non_null(x);
    bool prev = oj_set_grad_enabled(e, false);
    for (int r = 0; r < 2; r++) { /* two decode-like captures */
        assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
        assert_non_null(oj_add(x, x));
        oj_graph *g = oj_graph_capture_end(e);
        assert_non_null(g);
        assert_int_equal(oj_graph_replay(g), OJ_OK);
        oj_graph_free(g);
    }
    cache_state(e, &plans, &pinned, &handle);
    assert_false(handle);
    oj_set_grad_enabled(e, prev);
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK); /* a training step's capture */
    assert_non_null(oj_add(x, x));
    oj_graph *g = oj_graph_capture_end(e);
    assert_non_null(g);
    oj_graph_free(g);
    cache_state(e, &plans, &pinned, &handle);
    assert_true(handle);
    assert_int_equal(plans, 0);
    oj_scope_end(e);
    oj_engine_free(e);
}

// test: the plan cache keeps at most 16 keys (least recently used evicted) and never a pinned plan
static void test_cudnn_plan_cache(void **state) {
    (void)state;
    oj_engine *e = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 7);
    int64_t sa[4] = {1, 4, 320, 64}, n = 4 * 320 * 64, plans, pinned;
    bool handle;
    double *qv = rvals(n, OJ_BF16), *kv = rvals(n, OJ_BF16), *vv = rvals(n, OJ_BF16),
           *wv = rvals(n, OJ_BF16);
    oj_scope_begin(e);
    /* a captured training step of shape A pins its forward and backward plans */
    oj_tensor *cap[4], *eag[4];
    oj_graph *g = NULL;
    sdpa_step(e, sa, qv, kv, vv, wv, cap, &g);
    require_impl(e, true, "cudnn", "captured attention");
    cache_state(e, &plans, &pinned, &handle);
    assert_int_equal(plans, 2);
    assert_int_equal(pinned, 2);
    /* 20 other shapes eagerly: 40 keys through a cache of 16 */
    for (int i = 0; i < 20; i++) {
        int64_t s[4] = {1, 4, 72 + 8 * i, 64};
        oj_scope_begin(e);
        oj_tensor *res[4];
        sdpa_step(e, s, qv, kv, vv, wv, res, NULL);
        require_impl(e, false, "cudnn", "eager attention of a new shape");
        require_impl(e, true, "cudnn", "eager attention of a new shape");
        oj_scope_end(e);
        cache_state(e, &plans, &pinned, &handle);
        if (plans > 16) fail_msg("after %d new shapes: %lld keys cached", i + 1, (long long)plans);
        assert_int_equal(pinned, 2);
    }
    assert_int_equal(plans, 16);
    /* the graph still runs its plans */
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    sdpa_step(e, sa, qv, kv, vv, wv, eag, NULL);
    require_impl(e, true, "cudnn", "eager attention of the captured shape");
    const char *names[4] = {"replayed out", "replayed dq", "replayed dk", "replayed dv"};
    for (int i = 0; i < 4; i++) cmp_norm(cap[i], eag[i], 1e-2, names[i]);
    oj_graph_free(g);
    cache_state(e, &plans, &pinned, &handle);
    assert_int_equal(pinned, 0);
    assert_int_equal(plans, 16);
    oj_scope_end(e);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_engine_free(e);
    free(qv);
    free(kv);
    free(vv);
    free(wv);
}

// test: a graph that pins more than 16 plans keeps them all; a new shape's
// plan is built and run beside them, and the cache shrinks to 16 once the
// graph is freed
static void test_cudnn_plan_cache_all_pinned(void **state) {
    (void)state;
    oj_engine *e = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 7);
    int64_t n = 4 * 320 * 64, plans, pinned;
    bool handle;
    double *qv = rvals(n, OJ_BF16), *kv = rvals(n, OJ_BF16), *vv = rvals(n, OJ_BF16),
           *wv = rvals(n, OJ_BF16);
    oj_scope_begin(e);
    oj_tensor *in[10][4]; /* q, k, v, w of 10 shapes, uploaded before the capture */
    for (int i = 0; i < 10; i++) {
        int64_t s[4] = {1, 4, 64 + 16 * i, 64};
        const double *vals[4] = {qv, kv, vv, wv};
        for (int j = 0; j < 4; j++) {
            assert_non_null(in[i][j] = heads(e, s, OJ_BF16, vals[j], false));
            if (j < 3) assert_non_null(oj_set_requires_grad(in[i][j], true));
        }
    }
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    for (int i = 0; i < 10; i++) { /* 10 shapes, 20 plans, in one capture */
        oj_tensor *o = oj_scaled_dot_product_attention(in[i][0], in[i][1], in[i][2], NULL, true,
                                                       NAN);
        oj_tensor *loss = oj_sum_all(oj_mul(o, in[i][3]));
        if (loss == NULL || oj_backward(loss, false) != OJ_OK)
            fail_msg("captured step %d: %s", i, oj_last_error(e));
        require_impl(e, true, "cudnn", "captured attention");
    }
    oj_graph *g = oj_graph_capture_end(e);
    assert_non_null(g);
    cache_state(e, &plans, &pinned, &handle);
    assert_int_equal(plans, 20);
    assert_int_equal(pinned, 20);
    /* a new shape: every other entry is pinned; its forward plan is kept
     * and runs, then its backward's build evicts the forward (the only
     * unpinned entry but the one returned) and runs */
    int64_t s[4] = {1, 4, 300, 64};
    oj_tensor *res[4], *again[4];
    sdpa_step(e, s, qv, kv, vv, wv, res, NULL);
    require_impl(e, false, "cudnn", "eager attention beside a graph's pinned plans");
    require_impl(e, true, "cudnn", "eager attention beside a graph's pinned plans");
    cache_state(e, &plans, &pinned, &handle);
    assert_int_equal(plans, 21);
    assert_int_equal(pinned, 20);
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    oj_graph_free(g);
    /* the next build evicts down to 16, never the plans it returns */
    sdpa_step(e, s, qv, kv, vv, wv, again, NULL);
    for (int i = 0; i < 4; i++) cmp_norm(again[i], res[i], 1e-2, "the same step again");
    int64_t s2[4] = {1, 4, 310, 64};
    sdpa_step(e, s2, qv, kv, vv, wv, again, NULL);
    require_impl(e, true, "cudnn", "eager attention after the graph is freed");
    cache_state(e, &plans, &pinned, &handle);
    assert_int_equal(pinned, 0);
    assert_int_equal(plans, 16);
    oj_scope_end(e);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_engine_free(e);
    free(qv);
    free(kv);
    free(vv);
    free(wv);
}

static int group_setup(void **state) {
    (void)state;
    cpu = gpu_test_engine(false, false, OJ_NUMERICS_EXACT, 7);
    gpuf = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 7);
    gpux = gpu_test_engine(true, false, OJ_NUMERICS_EXACT, 7);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    oj_engine_free(gpux);
    oj_engine_free(gpuf);
    oj_engine_free(cpu);
    return 0;
}

int main(void) {
    int rc = gpu_test_probe(false, NULL);
    if (rc != 0) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cudnn_attention),
        cmocka_unit_test(test_cudnn_attention_capture),
        cmocka_unit_test(test_cudnn_inference_forward),
        cmocka_unit_test(test_cudnn_handle_lazy),
        cmocka_unit_test(test_cudnn_plan_cache),
        cmocka_unit_test(test_cudnn_plan_cache_all_pinned),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
