// test: every SIMD level of the CPU backend (scalar, AVX2+FMA, AVX-512, as
// far as this CPU has them) — exp within 2 ulp of libm over the f32 range
// with the special values right; sigmoid/tanh/silu/gelu and their
// gradients against double; the attention products (rowdot, rowcomb, rank)
// against double and independent of how rows are grouped; f32 attention
// forward and backward, the f32 elementwise ops, norms, softmax and
// cross-entropy against the double path, through the public ops on an
// engine pinned to each level; the GEMM (EXACT: the in-order f32 sum bit
// for bit on every level); the optimizer updates (Adam/AdamW, SGD, Muon,
// apply) bit for bit against a plain loop on every level and thread count;
// the transpose on every level.
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_simd.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

static int levels(oj_cpu_isa *out) {
    oj_cpu_isa best = oj_cpu_isa_detect();
    int n = 0;
    for (int l = OJ_ISA_SCALAR; l <= (int)best; l++) out[n++] = (oj_cpu_isa)l;
    return n;
}

/* Distance in units in the last place between two finite floats. */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((int64_t)ia - (int64_t)ib);
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

static float frand(uint32_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)(lcg(s) >> 8) / 16777216.0f;
}

static void test_exp_accuracy(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    /* specials, then uniform over [-104, 89] and over [-1, 1] */
    int n = 0;
    const float sp[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.72f, 88.7228f, 88.73f, -87.3f, -103.9f,
                        -104.0f, -150.0f, INFINITY, -INFINITY, NAN, 1e-10f, -1e-10f};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) x[n++] = sp[i];
    uint32_t s = 3;
    while (n < N / 2) x[n++] = frand(&s, -104.0f, 89.0f);
    while (n < N) x[n++] = frand(&s, -1.0f, 1.0f);
    for (int l = 0; l < nl; l++) {
        const oj_simd *sd = oj_simd_for(lv[l]);
        sd->unary(OJ_SF_EXP, y, x, n, 0, 0);
        int64_t worst = 0;
        for (int i = 0; i < n; i++) {
            float want = (float)exp((double)x[i]);
            if (isnan(x[i])) {
                assert_true(isnan(y[i]));
                continue;
            }
            if (want == 0.0f || isinf(want)) {
                if (isinf(want)) assert_true(isinf(y[i]) && y[i] > 0);
                else assert_true(y[i] <= FLT_MIN); /* flushed or subnormal */
                continue;
            }
            if (want < FLT_MIN) { /* subnormal: absolute error of a few subnormal steps */
                assert_true(fabsf(y[i] - want) <= 4 * 1.4e-45f);
                continue;
            }
            int64_t u = ulps(y[i], want);
            if (u > worst) worst = u;
            if (u > 2) fail_msg("%s exp(%.9g) = %.9g, libm %.9g (%lld ulp)", oj_cpu_isa_name(lv[l]),
                                (double)x[i], (double)y[i], (double)want, (long long)u);
        }
        print_message("exp %s: %d values, worst %lld ulp\n", oj_cpu_isa_name(lv[l]), n,
                      (long long)worst);
        /* the scalar helper is the same algorithm */
        for (int i = 0; i < n; i += 7)
            if (!isnan(x[i])) assert_true(ulps(oj_expf_poly(x[i]), y[i]) <= 2 || y[i] < FLT_MIN);
    }
    free(x);
    free(y);
}

static double ref_unary(oj_simd_fn f, double x) {
    switch (f) {
    case OJ_SF_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case OJ_SF_SILU: return x / (1.0 + exp(-x));
    case OJ_SF_TANH: return tanh(x);
    case OJ_SF_GELU_TANH: /* 0.5 x (1 + tanh u) = x sigmoid(2u): no cancellation */
        return x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case OJ_SF_GELU: /* 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2): no cancellation */
        return 0.5 * x * erfc(-x * 0.70710678118654752440);
    default: return NAN;
    }
}

static double ref_grad(oj_simd_fn f, double x) {
    double h = 1e-6 * fmax(1.0, fabs(x));
    return (ref_unary(f, x + h) - ref_unary(f, x - h)) / (2 * h);
}

static void test_activations(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    enum { N = 4099 };
    float x[N], y[N], g[N], ones[N];
    uint32_t s = 7;
    for (int i = 0; i < N; i++) {
        x[i] = i < 2000 ? frand(&s, -12, 12) : frand(&s, -0.7f, 0.7f);
        ones[i] = 1.0f;
    }
    x[0] = 0.0f, x[1] = -30.0f, x[2] = 30.0f, x[3] = 1e-6f, x[4] = -1e-6f, x[5] = 100.0f;
    const oj_simd_fn fs[] = {OJ_SF_SIGMOID, OJ_SF_SILU, OJ_SF_TANH, OJ_SF_GELU_TANH, OJ_SF_GELU};
    for (int l = 0; l < nl; l++) {
        const oj_simd *sd = oj_simd_for(lv[l]);
        for (size_t k = 0; k < sizeof fs / sizeof *fs; k++) {
            sd->unary(fs[k], y, x, N, 0, 0);
            sd->unary_grad(fs[k], g, x, y, ones, N, 0, 0);
            for (int i = 0; i < N; i++) {
                double want = ref_unary(fs[k], x[i]);
                /* f32 rounding of the exp argument (~|x|, |2u| for gelu) sets the
                 * conditioning: relative error ~ |argument| * 2^-24 */
                /* (gelu's exp argument, x^2 / 2, is taken exactly: 8 ulp at most) */
                double ax = fabs(x[i]), arg = fs[k] == OJ_SF_GELU_TANH ? 1.6 * (ax + 0.045 * ax * ax * ax)
                                              : fs[k] == OJ_SF_GELU ? 1.0 : 2 * ax;
                double err = fabs(y[i] - want), tol = 3e-7 * fabs(want) * (1 + arg) + 1e-38;
                if (!(err <= tol))
                    fail_msg("%s f%d(%.9g) = %.9g, want %.9g", oj_cpu_isa_name(lv[l]), (int)fs[k],
                             (double)x[i], (double)y[i], want);
                double gw = ref_grad(fs[k], x[i]);
                if (!(fabs(g[i] - gw) <= 2e-6 * fmax(1.0, fabs(gw))))
                    fail_msg("%s grad f%d(%.9g) = %.9g, want %.9g", oj_cpu_isa_name(lv[l]),
                             (int)fs[k], (double)x[i], (double)g[i], gw);
            }
        }
    }
}

static oj_engine *engine_at(oj_cpu_isa isa, int threads);

/* Saturated and special inputs of the activations: |x| in [40, 1e4] on
 * both sides, infinities, NaN, subnormals, and the windows where the true
 * result is subnormal (sigmoid/silu for x in [-104, -87.3], gelu_tanh
 * near -10, gelu near -13.5). */
static int saturated_inputs(float *x) {
    int n = 0;
    const float sp[] = {0.0f, -0.0f, FLT_TRUE_MIN, -FLT_TRUE_MIN, 1e-40f, -1e-40f, FLT_MIN,
                        -FLT_MIN, INFINITY, -INFINITY, NAN, 1e4f, -1e4f, 40.0f, -40.0f};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) x[n++] = sp[i];
    for (int i = 0; i < 200; i++) { /* |x| log-spaced over [40, 1e4] */
        float a = (float)(40.0 * pow(250.0, i / 199.0));
        x[n++] = a, x[n++] = -a;
    }
    for (float v = -80.0f; v >= -106.0f; v -= 0.125f) x[n++] = v;
    for (float v = -9.5f; v >= -11.5f; v -= 0.0625f) x[n++] = v;
    for (float v = -12.5f; v >= -15.0f; v -= 0.0625f) x[n++] = v;
    for (float v = -40.0f; v <= 40.0f; v += 0.37f) x[n++] = v;
    return n;
}

/* y = f(x) against float64 (NaN where the float64 formula gives NaN, as
 * silu(-inf) = -inf * 0 in PyTorch too); flushed (FAST numerics):
 * subnormal results and intermediates may be 0 and subnormal inputs count
 * as 0. */
static void check_saturated(const char *what, oj_simd_fn f, const float *x, const float *y, int n,
                            bool flushed) {
    for (int i = 0; i < n; i++) {
        double want = ref_unary(f, x[i]);
        if (isnan(want) || isinf(want)) {
            if (!(isnan(want) ? isnan(y[i]) : y[i] == want))
                fail_msg("%s f%d(%.9g) = %.9g, want %.9g", what, (int)f, (double)x[i],
                         (double)y[i], want);
            continue;
        }
        double ax = isinf(x[i]) ? 0.0 : fabs(x[i]);
        double arg = f == OJ_SF_GELU_TANH ? 1.6 * (ax + 0.045 * ax * ax * ax)
                     : f == OJ_SF_GELU    ? 1.0
                                          : 2 * ax;
        /* a subnormal intermediate (exp(x), x in the window) has a few
         * subnormal steps of error, or is 0 when flushed; silu and the
         * gelus scale it by |x| */
        double atol = (flushed ? FLT_MIN : 4 * 1.4e-45) * fmax(1.0, ax);
        if (!(fabs(y[i] - want) <= 3e-7 * fabs(want) * (1 + arg) + atol))
            fail_msg("%s f%d(%.9g) = %.9g, want %.9g", what, (int)f, (double)x[i], (double)y[i],
                     want);
    }
}

/* The kernels give the float64 values on saturated inputs, and build no
 * subnormal on them outside the windows where the result itself is
 * subnormal: no underflow is raised (a subnormal is made in microcode,
 * 10-30x slower per instruction; bench_cpu_mem's activation table
 * measures the time). Then through the public ops: FAST numerics flush
 * subnormals (the windows give 0) and EXACT keeps them, on 1 and 3
 * threads with the same bits, and the calling thread's floating-point
 * mode is left as it was. */
static void test_saturated_activations(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    enum { N = 2048 };
    float x[N], y[N], g[N], ones[N], q[N];
    int n = saturated_inputs(x);
    assert_true(n <= N);
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    const oj_simd_fn fs[] = {OJ_SF_TANH, OJ_SF_SIGMOID, OJ_SF_SILU, OJ_SF_GELU_TANH, OJ_SF_GELU};
    for (int l = 0; l < nl; l++) {
        const oj_simd *sd = oj_simd_for(lv[l]);
        for (size_t k = 0; k < sizeof fs / sizeof *fs; k++) {
            sd->unary(fs[k], y, x, n, 0, 0);
            check_saturated(oj_cpu_isa_name(lv[l]), fs[k], x, y, n, false);
            sd->unary_grad(fs[k], g, x, y, ones, n, 0, 0);
            for (int i = 0; i < n; i++) {
                if (!isfinite(x[i]) || fabs(x[i]) < 40) continue;
                double gw = ref_grad(fs[k], x[i]); /* 0, or 1 for x > 0 (silu, gelus) */
                if (!(fabs(g[i] - gw) <= 1e-6))
                    fail_msg("%s grad f%d(%.9g) = %.9g, want %g", oj_cpu_isa_name(lv[l]), (int)fs[k],
                             (double)x[i], (double)g[i], gw);
            }
            /* no underflow on |x| >= 40 outside the subnormal window */
            int m = 0;
            for (int i = 0; i < n; i++) {
                bool window = (fs[k] == OJ_SF_SIGMOID || fs[k] == OJ_SF_SILU) && x[i] <= -85.0f &&
                              x[i] >= -105.0f;
                if (!(fabsf(x[i]) >= 40.0f) || window) continue;
                q[m++] = x[i];
            }
            assert_true(m > 300);
            feclearexcept(FE_ALL_EXCEPT);
            sd->unary(fs[k], y, q, m, 0, 0);
            sd->unary_grad(fs[k], g, q, y, ones, m, 0, 0);
            if (fetestexcept(FE_UNDERFLOW))
                fail_msg("%s f%d: saturated inputs built a subnormal", oj_cpu_isa_name(lv[l]),
                         (int)fs[k]);
        }
    }
    /* the public ops, FAST and EXACT, 1 and 3 threads */
    oj_tensor *(*ops[])(oj_tensor *) = {oj_tanh, oj_sigmoid, oj_silu, oj_gelu_tanh, oj_gelu};
    for (int l = 0; l < nl; l++)
        for (int exact = 0; exact < 2; exact++) {
            float ref[5][N];
            for (int threads = 1; threads <= 3; threads += 2) {
                oj_engine *eng = engine_at(lv[l], threads);
                oj_engine_set_numerics(eng, exact ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST);
                oj__cpu_set_grain_shift(eng, 20); /* many chunks, on every thread */
                oj_scope_begin(eng);
                int64_t sh[1] = {n};
                oj_tensor *t = oj_from_host(eng, 1, sh, OJ_F32, x, (size_t)n * sizeof(float));
                for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
#if defined(__x86_64__)
                    unsigned csr = _mm_getcsr();
#endif
                    oj_tensor *yt = ops[k](t);
#if defined(__x86_64__)
                    /* the caller's mode (rounding, FTZ/DAZ bits) is as it was */
                    assert_int_equal(csr & 0xffc0u, _mm_getcsr() & 0xffc0u);
#endif
                    assert_int_equal(oj_to_host(yt, y, (size_t)n * sizeof(float)), OJ_OK);
                    check_saturated(exact ? "exact" : "fast", fs[k], x, y, n, !exact);
                    /* sigmoid(-95) is subnormal: kept under EXACT, flushed under FAST */
                    float w = -95.0f, yw;
                    oj_tensor *wt = ops[k](oj_from_host(eng, 1, (int64_t[]){1}, OJ_F32, &w, 4));
                    assert_int_equal(oj_to_host(wt, &yw, 4), OJ_OK);
                    if (fs[k] == OJ_SF_SIGMOID) assert_true(exact ? yw > 0 : yw == 0);
                    if (threads == 1) memcpy(ref[k], y, (size_t)n * sizeof(float));
                    else /* the same bits (a NaN's sign is not kept by the vector code) */
                        for (int i = 0; i < n; i++)
                            if (memcmp(&ref[k][i], &y[i], 4) != 0 && !(isnan(y[i]) && isnan(ref[k][i])))
                                fail_msg("%s %s f%d(%.9g): %a on 1 thread, %a on 3",
                                         oj_cpu_isa_name(lv[l]), exact ? "exact" : "fast", (int)fs[k],
                                         (double)x[i], (double)ref[k][i], (double)y[i]);
                }
                oj_scope_end(eng);
                assert_int_equal(oj_last_status(eng), OJ_OK);
                oj_engine_free(eng);
            }
        }
}

/* rowdot/rowcomb/rank against double, and a row's result independent of
 * the number of rows computed with it. */
static void test_products(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    uint32_t s = 11;
    const int64_t dims[][2] = {{1, 1}, {3, 5}, {16, 16}, {17, 33}, {32, 64}, {64, 70}, {7, 130}};
    for (int l = 0; l < nl; l++) {
        const oj_simd *sd = oj_simd_for(lv[l]);
        for (size_t t = 0; t < sizeof dims / sizeof *dims; t++) {
            int64_t d = dims[t][0], n = dims[t][1], ld = n + 3, ldo = n + 1;
            float *mt = malloc((size_t)(d * ld) * sizeof(float));
            float *m = malloc((size_t)(n * (d + 2)) * sizeof(float));
            float xr[4][200], w[4][200];
            float *out = malloc((size_t)(4 * ldo) * sizeof(float));
            float *one = malloc((size_t)ldo * sizeof(float));
            for (int64_t i = 0; i < d * ld; i++) mt[i] = frand(&s, -1, 1);
            for (int64_t i = 0; i < n * (d + 2); i++) m[i] = frand(&s, -1, 1);
            for (int r = 0; r < 4; r++)
                for (int i = 0; i < 200; i++) xr[r][i] = frand(&s, -1, 1), w[r][i] = frand(&s, -1, 1);
            const float *xs[4] = {xr[0], xr[1], xr[2], xr[3]};
            /* rowdot */
            sd->rowdot(4, xs, mt, ld, d, n, 0.5f, out, ldo);
            for (int r = 0; r < 4; r++) {
                const float *x1[1] = {xs[r]};
                sd->rowdot(1, x1, mt, ld, d, n, 0.5f, one, ldo);
                assert_memory_equal(one, out + r * ldo, (size_t)n * sizeof(float));
                for (int64_t j = 0; j < n; j++) {
                    double want = 0;
                    for (int64_t c = 0; c < d; c++) want += (double)xs[r][c] * mt[c * ld + j];
                    assert_true(fabs(out[r * ldo + j] - 0.5 * want) <= 1e-5 * (1 + sqrt((double)d)));
                }
            }
            /* rowcomb: acc[r][c] += sum_j w[r][j] m[j][c] (ld d + 2) */
            float acc4[4][200], acc1[200];
            for (int r = 0; r < 4; r++)
                for (int64_t c = 0; c < d; c++) acc4[r][c] = (float)r;
            sd->rowcomb(3, &w[0][0], 200, n, m, d + 2, d, &acc4[0][0], 200);
            for (int r = 0; r < 3; r++) {
                for (int64_t c = 0; c < d; c++) acc1[c] = (float)r;
                sd->rowcomb(1, w[r], 200, n, m, d + 2, d, acc1, 200);
                assert_memory_equal(acc1, acc4[r], (size_t)d * sizeof(float));
                for (int64_t c = 0; c < d; c++) {
                    double want = r;
                    for (int64_t j = 0; j < n; j++) want += (double)w[r][j] * m[j * (d + 2) + c];
                    assert_true(fabs(acc4[r][c] - want) <= 1e-5 * (1 + sqrt((double)n)));
                }
            }
            assert_true(acc4[3][0] == 3.0f || d == 0); /* row 3 untouched */
            /* rank: y[j][c] += sum_r w[r][j] x[r][c], rows in order; equal to
             * applying the rows one at a time */
            float *y4 = calloc((size_t)(n * (d + 1)), sizeof(float));
            float *y1 = calloc((size_t)(n * (d + 1)), sizeof(float));
            sd->rank(4, &w[0][0], 200, n, xs, d, y4, d + 1);
            for (int r = 0; r < 4; r++) {
                const float *x1[1] = {xs[r]};
                sd->rank(1, w[r], 200, n, x1, d, y1, d + 1);
            }
            assert_memory_equal(y4, y1, (size_t)(n * (d + 1)) * sizeof(float));
            for (int64_t j = 0; j < n; j++)
                for (int64_t c = 0; c < d; c++) {
                    double want = 0;
                    for (int r = 0; r < 4; r++) want += (double)w[r][j] * xs[r][c];
                    assert_true(fabs(y4[j * (d + 1) + c] - want) <= 1e-5);
                }
            /* max with NaN, expsum, dot, sum */
            float v[131];
            for (int i = 0; i < 131; i++) v[i] = frand(&s, -3, 3);
            float mx = -INFINITY;
            for (int i = 0; i < 131; i++) mx = v[i] > mx ? v[i] : mx;
            assert_true(sd->max(v, 131) == mx);
            assert_true(sd->max(v, 0) == -INFINITY);
            v[77] = NAN;
            assert_true(isnan(sd->max(v, 131)));
            v[77] = -INFINITY;
            double es = 0;
            for (int i = 0; i < 131; i++) es += exp((double)v[i] - 3.0);
            float got = sd->expsum(v, 131, 3.0f);
            assert_true(fabs(got - es) <= 1e-5 * es);
            assert_true(v[77] == 0.0f);
            free(mt), free(m), free(out), free(one), free(y4), free(y1);
        }
    }
}

/* ---------------------------------------------------------------- through ops */

static oj_engine *engine_at(oj_cpu_isa isa, int threads) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = threads;
    cfg.seed = 5;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    assert_int_equal(oj__cpu_set_isa(eng, isa), isa);
    return eng;
}

static double *host(oj_tensor *t) {
    assert_non_null(t);
    oj_tensor *c = oj_cast(t, OJ_F64);
    int64_t n = oj_numel(c);
    double *p = malloc((size_t)(n ? n : 1) * sizeof(double));
    assert_int_equal(oj_to_host(c, p, (size_t)n * sizeof(double)), OJ_OK);
    oj_release(c);
    return p;
}

static void close_arrays(const char *what, const double *got, const double *want, int64_t n,
                         double rtol) {
    double scale = 1;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= rtol * fabs(want[i]) + 0.1 * rtol * scale))
            fail_msg("%s[%lld]: %.9g, want %.9g", what, (long long)i, got[i], want[i]);
}

/* f32 attention (forward and the three gradients) against the double path
 * (the same op on f64 copies of the inputs). */
static void check_attention(oj_engine *eng, int64_t B, int64_t H, int64_t Hkv, int64_t T,
                            int64_t S, int64_t D, int64_t Dv, bool causal, int mode) {
    oj_scope_begin(eng);
    int64_t qs[4] = {B, T, H, D}, ks[4] = {B, Hkv, S, D}, vs[4] = {B, Hkv, S, Dv};
    oj_tensor *q32 = oj_set_requires_grad(oj_rand_uniform(eng, 4, qs, OJ_F32, -1, 1), true);
    oj_tensor *k32 = oj_set_requires_grad(oj_rand_uniform(eng, 4, ks, OJ_F32, -1, 1), true);
    oj_tensor *v32 = oj_set_requires_grad(oj_rand_uniform(eng, 4, vs, OJ_F32, -1, 1), true);
    oj_tensor *q64 = oj_set_requires_grad(oj_detach(oj_cast(q32, OJ_F64)), true);
    oj_tensor *k64 = oj_set_requires_grad(oj_detach(oj_cast(k32, OJ_F64)), true);
    oj_tensor *v64 = oj_set_requires_grad(oj_detach(oj_cast(v32, OJ_F64)), true);
    oj_tensor *mask = NULL;
    if (mode == 1) {
        int64_t ms[2] = {T, S};
        mask = oj_gt(oj_rand_uniform(eng, 2, ms, OJ_F32, 0, 1), oj_scalar(eng, 0.2, OJ_F32));
    } else if (mode == 2) {
        int64_t ms[4] = {B, 1, T, S};
        mask = oj_rand_uniform(eng, 4, ms, OJ_F32, -2, 2);
    }
    oj_tensor *m64 = mask && mode == 2 ? oj_cast(mask, OJ_F64) : mask;
    int64_t gs[4] = {B, H, T, Dv};
    oj_tensor *g = oj_rand_uniform(eng, 4, gs, OJ_F32, -1, 1);
    /* q arrives [B, T, H, D] and is transposed: strided rows */
    oj_tensor *o32 = oj_scaled_dot_product_attention(oj_transpose(q32, 1, 2), k32, v32, mask,
                                                     causal, NAN);
    oj_tensor *o64 = oj_scaled_dot_product_attention(oj_transpose(q64, 1, 2), k64, v64, m64,
                                                     causal, NAN);
    if (!o32 || !o64) fail_msg("attention: %s", oj_last_error(eng));
    assert_int_equal(oj_backward_seeded(o32, g, false), OJ_OK);
    assert_int_equal(oj_backward_seeded(o64, oj_cast(g, OJ_F64), false), OJ_OK);
    oj_tensor *pairs[4][2] = {{o32, o64}, {oj_grad(q32), oj_grad(q64)},
                              {oj_grad(k32), oj_grad(k64)}, {oj_grad(v32), oj_grad(v64)}};
    const char *names[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        double *a = host(pairs[i][0]), *b = host(pairs[i][1]);
        close_arrays(names[i], a, b, oj_numel(pairs[i][1]), 2e-5);
        free(a);
        free(b);
    }
    oj_zero_grad(q32), oj_zero_grad(k32), oj_zero_grad(v32);
    oj_zero_grad(q64), oj_zero_grad(k64), oj_zero_grad(v64);
    oj_scope_end(eng);
}

static void test_attention_levels(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    for (int l = 0; l < nl; l++) {
        for (int threads = 1; threads <= 3; threads += 2) {
            oj_engine *eng = engine_at(lv[l], threads);
            check_attention(eng, 2, 4, 2, 37, 37, 16, 16, true, 0);
            check_attention(eng, 1, 2, 1, 70, 130, 8, 5, true, 0);  /* T != S, odd Dv */
            check_attention(eng, 2, 3, 3, 9, 75, 33, 20, false, 1); /* bool mask */
            check_attention(eng, 1, 2, 2, 40, 40, 32, 32, true, 2); /* float mask */
            check_attention(eng, 1, 1, 1, 1, 65, 64, 64, false, 0); /* one query */
            oj_engine_free(eng);
        }
    }
}

/* f32 elementwise through the ops against the same ops in f64. */
static void test_elementwise_levels(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    for (int l = 0; l < nl; l++) {
        oj_engine *eng = engine_at(lv[l], 2);
        oj_scope_begin(eng);
        int64_t sh[2] = {300, 257}, sr[1] = {257};
        oj_tensor *x = oj_set_requires_grad(oj_rand_uniform(eng, 2, sh, OJ_F32, -4, 4), true);
        oj_tensor *b = oj_rand_uniform(eng, 1, sr, OJ_F32, 0.5, 2);
        oj_tensor *x64 = oj_set_requires_grad(oj_detach(oj_cast(x, OJ_F64)), true);
        oj_tensor *b64 = oj_cast(b, OJ_F64);
        oj_tensor *(*un[])(oj_tensor *) = {oj_exp, oj_sigmoid, oj_silu, oj_gelu_tanh, oj_tanh,
                                           oj_relu, oj_neg, oj_square, oj_abs};
        for (size_t i = 0; i < sizeof un / sizeof *un; i++) {
            oj_tensor *y = un[i](oj_transpose(x, 0, 1)), *y64 = un[i](oj_transpose(x64, 0, 1));
            oj_tensor *s = oj_sum_all(oj_mul(y, y)), *s64 = oj_sum_all(oj_mul(y64, y64));
            assert_int_equal(oj_backward(s, false), OJ_OK);
            assert_int_equal(oj_backward(s64, false), OJ_OK);
            double *a = host(y), *c = host(y64), *ga = host(oj_grad(x)), *gc = host(oj_grad(x64));
            close_arrays("unary", a, c, oj_numel(y), 2e-6);
            close_arrays("unary grad", ga, gc, oj_numel(x), 1e-5);
            free(a), free(c), free(ga), free(gc);
            oj_zero_grad(x), oj_zero_grad(x64);
        }
        oj_tensor *(*bin[])(oj_tensor *, oj_tensor *) = {oj_add, oj_sub, oj_mul, oj_div,
                                                         oj_maximum, oj_minimum};
        for (size_t i = 0; i < sizeof bin / sizeof *bin; i++) {
            oj_tensor *y = bin[i](x, b), *y64 = bin[i](x64, b64);
            oj_tensor *z = bin[i](b, oj_transpose(oj_transpose(x, 0, 1), 0, 1));
            oj_tensor *z64 = bin[i](b64, x64);
            double *a = host(y), *c = host(y64), *za = host(z), *zc = host(z64);
            /* the basic four round exactly like the double path */
            close_arrays("binary", a, c, oj_numel(y), 1e-7);
            close_arrays("binary swapped", za, zc, oj_numel(z), 1e-7);
            free(a), free(c), free(za), free(zc);
        }
        oj_scope_end(eng);
        assert_int_equal(oj_last_status(eng), OJ_OK);
        oj_engine_free(eng);
    }
}

/* Row ops (norms, softmax, cross-entropy), forward and backward, f32 against
 * f64 on each level. */
typedef oj_tensor *(*row_op)(oj_tensor *x, oj_tensor *w, oj_tensor *b, oj_tensor *t);
static oj_tensor *op_ln(oj_tensor *x, oj_tensor *w, oj_tensor *b, oj_tensor *t) {
    (void)t;
    return oj_layer_norm(x, w, b, 1e-5);
}
static oj_tensor *op_ln_plain(oj_tensor *x, oj_tensor *w, oj_tensor *b, oj_tensor *t) {
    (void)w, (void)b, (void)t;
    return oj_layer_norm(x, NULL, NULL, 1e-5);
}
static oj_tensor *op_rms(oj_tensor *x, oj_tensor *w, oj_tensor *b, oj_tensor *t) {
    (void)b, (void)t;
    return oj_rms_norm(x, w, 1e-6);
}
static oj_tensor *op_sm(oj_tensor *x, oj_tensor *w, oj_tensor *b, oj_tensor *t) {
    (void)w, (void)b, (void)t;
    return oj_softmax(x, -1);
}
static oj_tensor *op_lsm(oj_tensor *x, oj_tensor *w, oj_tensor *b, oj_tensor *t) {
    (void)w, (void)b, (void)t;
    return oj_log_softmax(x, -1);
}
static oj_tensor *op_ce(oj_tensor *x, oj_tensor *w, oj_tensor *b, oj_tensor *t) {
    (void)w, (void)b;
    return oj_cross_entropy(x, t, 3, 0.1, OJ_REDUCTION_NONE);
}

static void test_rows_levels(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    row_op ops[] = {op_ln, op_ln_plain, op_rms, op_sm, op_lsm, op_ce};
    const char *names[] = {"layer_norm", "layer_norm (no affine)", "rms_norm", "softmax",
                           "log_softmax", "cross_entropy"};
    for (int l = 0; l < nl; l++) {
        oj_engine *eng = engine_at(lv[l], 3);
        oj_scope_begin(eng);
        int64_t sh[2] = {70, 203}, sc[1] = {203}, st[1] = {70};
        oj_tensor *x = oj_set_requires_grad(oj_rand_uniform(eng, 2, sh, OJ_F32, -3, 3), true);
        oj_tensor *w = oj_set_requires_grad(oj_rand_uniform(eng, 1, sc, OJ_F32, 0.5, 1.5), true);
        oj_tensor *b = oj_set_requires_grad(oj_rand_uniform(eng, 1, sc, OJ_F32, -1, 1), true);
        oj_tensor *x64 = oj_set_requires_grad(oj_detach(oj_cast(x, OJ_F64)), true);
        oj_tensor *w64 = oj_set_requires_grad(oj_detach(oj_cast(w, OJ_F64)), true);
        oj_tensor *b64 = oj_set_requires_grad(oj_detach(oj_cast(b, OJ_F64)), true);
        int64_t tv[70];
        uint32_t s = 9;
        for (int i = 0; i < 70; i++) tv[i] = (int64_t)(lcg(&s) >> 8) % 203;
        oj_tensor *t = oj_from_host(eng, 1, st, OJ_I64, tv, sizeof tv);
        oj_tensor *g = oj_rand_uniform(eng, 2, sh, OJ_F32, -1, 1);
        for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
            oj_tensor *y = ops[k](x, w, b, t), *y64 = ops[k](x64, w64, b64, t);
            if (!y || !y64) fail_msg("%s: %s", names[k], oj_last_error(eng));
            oj_tensor *gy = k == 5 ? oj_narrow(oj_select(g, 1, 0), 0, 0, 70) : g;
            assert_int_equal(oj_backward_seeded(y, gy, false), OJ_OK);
            assert_int_equal(oj_backward_seeded(y64, oj_cast(gy, OJ_F64), false), OJ_OK);
            oj_tensor *pairs[4][2] = {{y, y64}, {oj_grad(x), oj_grad(x64)},
                                      {oj_grad(w), oj_grad(w64)}, {oj_grad(b), oj_grad(b64)}};
            for (int i = 0; i < 4; i++) {
                if (pairs[i][1] == NULL) continue;
                double *a = host(pairs[i][0]), *c = host(pairs[i][1]);
                close_arrays(names[k], a, c, oj_numel(pairs[i][1]), 1e-5);
                free(a), free(c);
            }
            oj_zero_grad(x), oj_zero_grad(w), oj_zero_grad(b);
            oj_zero_grad(x64), oj_zero_grad(w64), oj_zero_grad(b64);
        }
        oj_scope_end(eng);
        assert_int_equal(oj_last_status(eng), OJ_OK);
        oj_engine_free(eng);
    }
}

/* EXACT matmul on every level equals the plain in-order f32 sum bit for
 * bit (so all levels agree), for row-major and transposed operands, edge
 * tiles, several k blocks, threads 1 and 3, batched; FAST (fused) is close. */
static void test_gemm_levels(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    const int dims[][3] = {{1, 1, 1}, {5, 7, 3}, {25, 17, 33}, {67, 45, 513}, {150, 70, 600},
                           {31, 300, 20}};
    for (int l = 0; l < nl; l++)
        for (int threads = 1; threads <= 3; threads += 2)
            for (int exact = 0; exact < 2; exact++) {
                oj_engine *eng = NULL;
                oj_engine_config cfg = oj_engine_config_default();
                cfg.threads = threads;
                cfg.numerics = exact ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST;
                assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
                oj__cpu_set_isa(eng, lv[l]);
                oj__cpu_set_fast_gemm(eng, OJ_GEMM_OWN);
                for (size_t t = 0; t < sizeof dims / sizeof *dims; t++)
                    for (int tr = 0; tr < 4; tr++) {
                        int m = dims[t][0], n = dims[t][1], k = dims[t][2];
                        bool ta = tr & 1, tb = tr & 2;
                        oj_scope_begin(eng);
                        int64_t sa[3] = {2, ta ? k : m, ta ? m : k}, sb[3] = {2, tb ? n : k, tb ? k : n};
                        oj_tensor *a = oj_rand_uniform(eng, 3, sa, OJ_F32, -1, 1);
                        oj_tensor *b = oj_rand_uniform(eng, 3, sb, OJ_F32, -1, 1);
                        float *ha = malloc((size_t)(2 * m * k) * 4), *hb = malloc((size_t)(2 * k * n) * 4);
                        float *hc = malloc((size_t)(2 * m * n) * 4);
                        oj_to_host(a, ha, (size_t)(2 * m * k) * 4);
                        oj_to_host(b, hb, (size_t)(2 * k * n) * 4);
                        oj_tensor *c = oj_matmul(ta ? oj_transpose(a, 1, 2) : a,
                                                 tb ? oj_transpose(b, 1, 2) : b);
                        assert_non_null(c);
                        oj_to_host(c, hc, (size_t)(2 * m * n) * 4);
                        for (int bi = 0; bi < 2; bi++)
                            for (int i = 0; i < m; i++)
                                for (int j = 0; j < n; j++) {
                                    float s = 0.0f;
                                    double d = 0.0;
                                    for (int q = 0; q < k; q++) {
                                        float av = ta ? ha[bi * m * k + q * m + i] : ha[bi * m * k + i * k + q];
                                        float bv = tb ? hb[bi * k * n + j * k + q] : hb[bi * k * n + q * n + j];
                                        s += av * bv;
                                        d += (double)av * bv;
                                    }
                                    float got = hc[bi * m * n + i * n + j];
                                    if (exact ? memcmp(&s, &got, 4) != 0
                                              : fabs(got - d) > 1e-5 * (1 + sqrt((double)k)))
                                        fail_msg("%s %s %d threads %dx%dx%d ta %d tb %d (%d,%d): %.9g, "
                                                 "in-order %.9g", oj_cpu_isa_name(lv[l]),
                                                 exact ? "EXACT" : "FAST", threads, m, n, k, ta, tb,
                                                 i, j, (double)got, (double)s);
                                }
                        free(ha), free(hb), free(hc);
                        oj_scope_end(eng);
                    }
                oj_engine_free(eng);
            }
}

/* One Adam/AdamW element as torch.optim does it (cpu_optim.c's contract):
 * the reference for the vector kernels, bit for bit. */
static void adam_ref(float *p, float g, float *m, float *v, const oj_adam_args *a) {
    float decay = a->decoupled && a->weight_decay != 0.0 ? (float)(1.0 - a->lr * a->weight_decay)
                                                         : 1.0f;
    float pi = *p * decay, gi = g;
    if (!a->decoupled && a->weight_decay != 0.0) gi = fmaf(pi, (float)a->weight_decay, gi);
    float mi = fmaf(gi, (float)(1.0 - a->beta1), *m * (float)a->beta1);
    float vi = fmaf((float)(1.0 - a->beta2) * gi, gi, *v * (float)a->beta2);
    float denom = sqrtf(vi) / (float)sqrt(a->bias_correction2) + (float)a->eps;
    float num = (float)(-(a->lr / a->bias_correction1)) * mi;
    *p = num / denom + pi, *m = mi, *v = vi;
}

static oj_tensor *from_floats(oj_engine *eng, const float *x, int64_t n) {
    oj_tensor *t = oj_from_host(eng, 1, &n, OJ_F32, x, (size_t)n * sizeof *x);
    assert_non_null(t);
    return t;
}

static void test_optim_levels(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    enum { N = 100003 }; /* several chunks and a vector tail */
    float *p0 = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    float *m0 = malloc(N * sizeof(float)), *v0 = malloc(N * sizeof(float));
    float *pr = malloc(N * sizeof(float)), *mr = malloc(N * sizeof(float));
    float *vr = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    uint32_t s = 11;
    for (int i = 0; i < N; i++) {
        p0[i] = frand(&s, -1, 1), g[i] = frand(&s, -1e-2f, 1e-2f);
        m0[i] = frand(&s, -1e-3f, 1e-3f), v0[i] = frand(&s, 0, 1e-5f);
    }
    for (int dec = 0; dec < 2; dec++) {
        oj_adam_args a = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                          .weight_decay = 0.1, .bias_correction1 = 1 - 0.9 * 0.9,
                          .bias_correction2 = 1 - 0.95 * 0.95, .decoupled = dec};
        memcpy(pr, p0, N * sizeof(float)), memcpy(mr, m0, N * sizeof(float));
        memcpy(vr, v0, N * sizeof(float));
        for (int i = 0; i < N; i++) adam_ref(&pr[i], g[i], &mr[i], &vr[i], &a);
        for (int l = 0; l < nl; l++)
            for (int threads = 1; threads <= 3; threads += 2) {
                oj_engine *eng = engine_at(lv[l], threads);
                oj_scope_begin(eng);
                oj_tensor *p = from_floats(eng, p0, N), *gt = from_floats(eng, g, N);
                oj_tensor *m = from_floats(eng, m0, N), *v = from_floats(eng, v0, N);
                assert_int_equal(eng->backend->adam_step(eng, p, gt, m, v, &a, true), OJ_OK);
                assert_int_equal(eng->backend->adam_step(eng, p, gt, m, v, &a, false), OJ_OK);
                const float *want[3] = {pr, mr, vr};
                oj_tensor *got[3] = {p, m, v};
                for (int k = 0; k < 3; k++) {
                    assert_int_equal(oj_to_host(got[k], out, N * sizeof(float)), OJ_OK);
                    assert_memory_equal(out, want[k], N * sizeof(float));
                }
                /* a non-finite gradient anywhere is found by the check */
                float bad = INFINITY;
                int64_t at = threads == 1 ? N - 5 : 40000; /* the tail, a middle chunk */
                oj_tensor *gb = oj_clone(gt);
                assert_int_equal(oj_copy_(oj_narrow(gb, 0, at, 1), from_floats(eng, &bad, 1)),
                                 OJ_OK);
                assert_int_equal(eng->backend->adam_step(eng, p, gb, m, v, &a, true),
                                 OJ_ERR_NUMERIC);
                oj_scope_end(eng);
                assert_int_equal(oj_last_status(eng), OJ_OK);
                oj_engine_free(eng);
            }
    }
    free(p0), free(g), free(m0), free(v0), free(pr), free(mr), free(vr), free(out);
}

/* transpose: exact on every level, tiles and edges (sizes around 16) */
static void test_transpose_levels(void **state) {
    (void)state;
    oj_cpu_isa lv[3];
    int nl = levels(lv);
    const int64_t sizes[] = {1, 7, 16, 17, 32, 45, 256};
    float *src = malloc(300 * 300 * sizeof(float)), *dst = malloc(300 * 300 * sizeof(float));
    for (int i = 0; i < 300 * 300; i++) src[i] = (float)i;
    for (int l = 0; l < nl; l++)
        for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
            for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b++) {
                int64_t rows = sizes[a], cols = sizes[b], lds = cols + 3, ldd = rows + 5;
                memset(dst, 0xff, 300 * 300 * sizeof(float));
                oj_simd_for(lv[l])->transpose(dst, ldd, src, lds, rows, cols);
                for (int64_t c = 0; c < cols; c++)
                    for (int64_t j = 0; j < ldd; j++) {
                        float want = j < rows ? src[j * lds + c] : dst[c * ldd + j];
                        if (j >= rows) {
                            uint32_t u;
                            memcpy(&u, &dst[c * ldd + j], 4);
                            assert_int_equal(u, 0xffffffffu); /* nothing past rows written */
                        } else {
                            assert_true(dst[c * ldd + j] == want);
                        }
                    }
            }
    free(src), free(dst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_saturated_activations),
        cmocka_unit_test(test_products),
        cmocka_unit_test(test_attention_levels),
        cmocka_unit_test(test_elementwise_levels),
        cmocka_unit_test(test_rows_levels),
        cmocka_unit_test(test_gemm_levels),
        cmocka_unit_test(test_optim_levels),
        cmocka_unit_test(test_transpose_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
