// test: quantized types (q8_0, q4_0, q4_1, q4_k, fp8): names and sizes,
// round-trip error bounds per format, oj_qmatmul against a
// dequantize-then-matmul reference within the bound stated in quant.h on
// every kernel level, the AVX-512 VNNI, AVX-VNNI and AVX2 kernels
// bit-identical, bit-identical results across thread counts, and each
// error named
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cpu/cpu_pool.h"
#include "ojas/ops.h"
#include "ojas/quant.h"
#include "quant/quant_internal.h"
#include "quant_testutil.h"

static const oj_qtype all_types[] = {OJ_Q8_0, OJ_Q4_0, OJ_Q4_1, OJ_Q4_K};
#define NTYPES (sizeof all_types / sizeof all_types[0])

static oj_engine *engine(int threads) {
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = threads;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

static void test_names_sizes(void **state) {
    (void)state;
    assert_string_equal(oj_qtype_name(OJ_Q8_0), "q8_0");
    assert_string_equal(oj_qtype_name(OJ_Q4_1), "q4_1");
    assert_string_equal(oj_qtype_name(OJ_QTYPE_COUNT), "invalid");
    oj_qtype t;
    assert_true(oj_qtype_parse("q4_0", &t));
    assert_int_equal(t, OJ_Q4_0);
    assert_false(oj_qtype_parse("Q4_0", &t));
    assert_true(oj_qtype_parse("q4_k", &t));
    assert_int_equal(t, OJ_Q4_K);
    assert_false(oj_qtype_parse("Q4_K", &t));
    assert_false(oj_qtype_parse("q4_k_m", &t));
    assert_int_equal(oj_qtype_block_bytes(OJ_Q8_0), 34);
    assert_int_equal(oj_qtype_block_bytes(OJ_Q4_0), 18);
    assert_int_equal(oj_qtype_block_bytes(OJ_Q4_1), 20);
    assert_int_equal(oj_qtype_block_bytes(OJ_Q4_K), 144);
    assert_int_equal(oj_qtype_block_elems(OJ_Q4_1), 32);
    assert_int_equal(oj_qtype_block_elems(OJ_Q4_K), 256);
    assert_int_equal(oj_qtype_block_elems(OJ_QTYPE_COUNT), 0);
    assert_int_equal(oj_qtype_row_bytes(OJ_Q8_0, 64), 68);
    assert_int_equal(oj_qtype_row_bytes(OJ_Q8_0, 48), 0);
    assert_int_equal(oj_qtype_row_bytes(OJ_Q8_0, 0), 0);
    assert_int_equal(oj_qtype_row_bytes(OJ_Q4_K, 768), 3 * 144);
    assert_int_equal(oj_qtype_row_bytes(OJ_Q4_K, 96), 0);
    /* ggml's numbers (ggml.h) */
    assert_int_equal(oj_qtype_to_ggml(OJ_Q4_K), 12);
    assert_true(oj_qtype_from_ggml(12, &t));
    assert_int_equal(t, OJ_Q4_K);
}

/* Every element of every block within the format's bound:
 *   q8_0: amax / 127 * (1/2 + 127 * 2^-11)  (rounding, plus the f16 scale)
 *   q4_0: |d| (1 + 8 * 2^-10)   d = max / -8 (the top code is clamped: 1 step)
 *   q4_1: d (1/2 + 15 * 2^-11) + |min| 2^-11, d = (max - min) / 15
 *   q4_k: per sub-block of 32, Q4K_BOUND (max - min) / 15 + 8 d + dmin/2,
 *         min and max widened to include 0 (the fitted scale and min may
 *         clip the extremes: no tight closed form), d and dmin the
 *         super-block's f16 steps of the 6-bit scales and mins (their
 *         rounding, 15 levels of the scale's and the min's) */
#define Q4K_BOUND 1.0
static void test_round_trip_bounds(void **state) {
    (void)state;
    enum { K = 32 * 40 };
    float x[K], y[K];
    uint8_t q[K * 2];
    for (uint32_t seed = 1; seed <= 20; seed++) {
        qt_fill(x, K, seed, seed % 2 ? 0.02f : 3.0f);
        if (seed == 3) memset(x, 0, 32 * sizeof(float)); /* an all-zero block */
        if (seed == 4) /* a super-block of small sub-blocks beside large ones */
            for (int j = 256; j < 512; j++) x[j] *= j < 384 ? 1e-3f : 1.0f;
        for (size_t ti = 0; ti < NTYPES; ti++) {
            oj_qtype t = all_types[ti];
            assert_int_equal(oj_quantize_row(t, x, K, q, NULL), OJ_OK);
            assert_int_equal(oj_dequantize_row(t, q, K, y, NULL), OJ_OK);
            for (int b = 0; b < K / 32; b++) {
                float amax = 0, mx = 0, mn = INFINITY, mxv = -INFINITY;
                for (int j = 0; j < 32; j++) {
                    float v = x[b * 32 + j];
                    if (fabsf(v) > amax) amax = fabsf(v), mx = v;
                    mn = fminf(mn, v);
                    mxv = fmaxf(mxv, v);
                }
                double bound;
                if (t == OJ_Q8_0) bound = amax / 127.0 * (0.5 + 127.0 / 2048);
                else if (t == OJ_Q4_0) bound = fabs(mx / 8.0) * (1 + 8.0 / 1024);
                else if (t == OJ_Q4_1)
                    bound = (mxv - mn) / 15.0 * (0.5 + 15.0 / 2048) + fabs(mn) / 2048;
                else {
                    const uint8_t *sb = q + (b / 8) * 144;
                    bound = Q4K_BOUND * (fmax(mxv, 0) - fmin(mn, 0)) / 15.0 +
                            8.0 * oj_f16_to_f32((uint16_t)(sb[0] | sb[1] << 8)) +
                            0.5 * oj_f16_to_f32((uint16_t)(sb[2] | sb[3] << 8));
                }
                for (int j = 0; j < 32; j++) {
                    double e = fabs((double)x[b * 32 + j] - y[b * 32 + j]);
                    if (e > bound)
                        fail_msg("%s seed %u block %d elem %d: |%g - %g| > %g", oj_qtype_name(t),
                                 seed, b, j, x[b * 32 + j], y[b * 32 + j], bound);
                }
            }
        }
    }
}

/* q8_0 stores round(x / d) exactly where x / d is representable: a block
 * of integers -127..127 scaled by 1/4 comes back bit for bit. */
static void test_q8_0_exact_block(void **state) {
    (void)state;
    float x[32], y[32];
    uint8_t q[34];
    for (int j = 0; j < 32; j++) x[j] = (float)(j * 8 - 127) / 4.0f;
    x[31] = 127.0f / 4.0f;
    assert_int_equal(oj_quantize_row(OJ_Q8_0, x, 32, q, NULL), OJ_OK);
    assert_int_equal(q[0] | q[1] << 8, oj_f32_to_f16(0.25f));
    assert_int_equal((int8_t)q[2], -127);
    assert_int_equal((int8_t)q[33], 127);
    assert_int_equal(oj_dequantize_row(OJ_Q8_0, q, 32, y, NULL), OJ_OK);
    assert_memory_equal(x, y, sizeof x);
}

static void test_row_errors(void **state) {
    (void)state;
    float x[64] = {0};
    uint8_t q[80];
    oj_error err = {0};
    assert_int_equal(oj_quantize_row(OJ_Q4_0, x, 40, q, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "row length 40"));
    x[37] = NAN;
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_quantize_row(OJ_Q8_0, x, 64, q, &err), OJ_ERR_NUMERIC);
    assert_non_null(strstr(err.message, "element 37 is NaN"));
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_dequantize_row((oj_qtype)7, q, 64, x, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "invalid quantized type 7"));
}

/* The bound of quant.h, element by element, against y_ref = x @ deq(W)^T
 * computed in f64. */
static void check_against_reference(const float *x, const float *wd, const float *y, int64_t m,
                                    int64_t n, int64_t k, const char *what) {
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * k;
        for (int64_t i = 0; i < n; i++) {
            const float *wr = wd + i * k;
            double ref = 0, absxw = 0, quant = 0;
            for (int64_t b = 0; b < k / 32; b++) {
                double amax = 0, wsum = 0;
                for (int j = 0; j < 32; j++) {
                    amax = fmax(amax, fabs(xr[b * 32 + j]));
                    wsum += fabs(wr[b * 32 + j]);
                }
                quant += (0.5 + ldexp(1, -15)) * (amax / 127) * wsum;
            }
            for (int64_t j = 0; j < k; j++) {
                ref += (double)xr[j] * wr[j];
                absxw += fabs((double)xr[j] * wr[j]);
            }
            double bound = quant + (double)(k / 32 + 4) * ldexp(1, -23) * absxw;
            double e = fabs(y[r * n + i] - ref);
            if (!(e <= bound))
                fail_msg("%s: y[%lld, %lld] = %.9g, reference %.9g, error %g > bound %g", what,
                         (long long)r, (long long)i, y[r * n + i], ref, e, bound);
        }
    }
}

/* The kernel levels a test walks: portable C, AVX2, AVX-VNNI and AVX-512
 * VNNI (OJAS_QUANT_DOT asks for the VNNI ones); each falls back to what the
 * CPU has. */
#define NLEVELS 4
static void set_level(oj_engine *eng, int li) {
    oj__cpu_set_isa(eng, li == 0 ? OJ_ISA_SCALAR : oj_cpu_isa_detect());
    if (li == 2) setenv("OJAS_QUANT_DOT", "avxvnni", 1);
    else if (li == 3) setenv("OJAS_QUANT_DOT", "avx512vnni", 1);
    else unsetenv("OJAS_QUANT_DOT");
}

static void test_qmatmul_matches_dequant(void **state) {
    (void)state;
    oj_engine *eng = engine(2);
    const int64_t shapes[][3] = {{1, 37, 96}, {5, 64, 256}, {3, 17, 32}, {2, 21, 768}};
    for (size_t s = 0; s < 4; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *x = malloc(sizeof(float) * (size_t)(m * k));
        float *w = malloc(sizeof(float) * (size_t)(n * k));
        float *wd = malloc(sizeof(float) * (size_t)(n * k));
        float *y = malloc(sizeof(float) * (size_t)(m * n));
        qt_fill(x, m * k, 100 + (uint32_t)s, 1.5f);
        qt_fill(w, n * k, 200 + (uint32_t)s, 0.05f);
        for (size_t ti = 0; ti < NTYPES; ti++) {
            if (k % oj_qtype_block_elems(all_types[ti])) continue;
            for (int li = 0; li < NLEVELS; li++) {
                set_level(eng, li);
                assert_int_equal(oj_scope_begin(eng), OJ_OK);
                oj_tensor *wt = oj_from_host(eng, 2, (int64_t[]){n, k}, OJ_F32, w,
                                             sizeof(float) * (size_t)(n * k));
                oj_tensor *xt = oj_from_host(eng, 2, (int64_t[]){m, k}, OJ_F32, x,
                                             sizeof(float) * (size_t)(m * k));
                oj_qtensor *q = oj_quantize(wt, all_types[ti]);
                assert_non_null(q);
                oj_tensor *deq = oj_dequantize(q);
                oj_tensor *yt = oj_qmatmul(xt, q);
                assert_non_null(yt);
                assert_int_equal(oj_size(yt, 0), m);
                assert_int_equal(oj_size(yt, 1), n);
                assert_int_equal(oj_to_host(deq, wd, sizeof(float) * (size_t)(n * k)), OJ_OK);
                assert_int_equal(oj_to_host(yt, y, sizeof(float) * (size_t)(m * n)), OJ_OK);
                char what[96];
                snprintf(what, sizeof what, "%s [%lld,%lld]x[%lld,%lld] %s",
                         oj_qtype_name(all_types[ti]), (long long)m, (long long)k,
                         (long long)n, (long long)k, oj__qmatmul_kernel_name(eng));
                check_against_reference(x, wd, y, m, n, k, what);
                oj_qtensor_free(q);
                assert_int_equal(oj_last_status(eng), OJ_OK);
                assert_int_equal(oj_scope_end(eng), OJ_OK);
            }
        }
        free(x);
        free(w);
        free(wd);
        free(y);
    }
    unsetenv("OJAS_QUANT_DOT");
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* The AVX2, AVX-VNNI and AVX-512 VNNI kernels give the same bits (integer
 * sums are exact, the f32 sums in one order): odd and even block counts,
 * signed extremes (-128 weights from raw blocks, |x| large). */
static void test_qmatmul_simd_levels_identical(void **state) {
    (void)state;
    oj_engine *eng = engine(1);
    enum { M = 3, N = 9 };
    const int64_t ks[] = {32, 96, 256, 288, 768};
    for (size_t ki = 0; ki < 5; ki++) {
        const int64_t k = ks[ki];
        float *x = malloc(sizeof(float) * M * (size_t)k), *w = malloc(sizeof(float) * N * (size_t)k);
        qt_fill(x, M * k, 31 + (uint32_t)ki, 40.0f);
        qt_fill(w, N * k, 41 + (uint32_t)ki, 0.3f);
        for (size_t ti = 0; ti < NTYPES; ti++) {
            if (k % oj_qtype_block_elems(all_types[ti])) continue;
            float y[NLEVELS][M * N];
            const char *names[NLEVELS];
            for (int li = 1; li < NLEVELS; li++) {
                set_level(eng, li);
                names[li] = oj__qmatmul_kernel_name(eng);
                assert_int_equal(oj_scope_begin(eng), OJ_OK);
                oj_tensor *wt = oj_from_host(eng, 2, (int64_t[]){N, k}, OJ_F32, w,
                                             sizeof(float) * N * (size_t)k);
                oj_tensor *xt = oj_from_host(eng, 2, (int64_t[]){M, k}, OJ_F32, x,
                                             sizeof(float) * M * (size_t)k);
                oj_qtensor *q = oj_quantize(wt, all_types[ti]);
                assert_non_null(q);
                if (all_types[ti] == OJ_Q8_0) { /* a -128 weight, as a file may hold */
                    uint8_t *raw = (uint8_t *)oj_qtensor_data(q);
                    raw[2 + 5] = 0x80;
                    raw[oj_qtype_row_bytes(OJ_Q8_0, k) + 2 + 17] = 0x80;
                }
                oj_tensor *yt = oj_qmatmul(xt, q);
                assert_non_null(yt);
                assert_int_equal(oj_to_host(yt, y[li], sizeof y[li]), OJ_OK);
                oj_qtensor_free(q);
                assert_int_equal(oj_scope_end(eng), OJ_OK);
            }
            for (int li = 2; li < NLEVELS; li++)
                for (int i = 0; i < M * N; i++)
                    if (memcmp(&y[1][i], &y[li][i], sizeof(float)) != 0)
                        fail_msg("%s K %lld y[%d]: %s %.9g, %s %.9g", oj_qtype_name(all_types[ti]),
                                 (long long)k, i, names[1], y[1][i], names[li], y[li][i]);
        }
        free(x);
        free(w);
    }
    unsetenv("OJAS_QUANT_DOT");
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* x of rank 3 and non-contiguous (a transposed view) gives the rows of the
 * contiguous copy. */
static void test_qmatmul_strided_batched(void **state) {
    (void)state;
    oj_engine *eng = engine(1);
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    float w[8 * 64], x[2 * 3 * 64];
    qt_fill(w, 8 * 64, 7, 1.0f);
    qt_fill(x, 2 * 3 * 64, 8, 1.0f);
    oj_qtensor *q = oj_quantize(oj_from_host(eng, 2, (int64_t[]){8, 64}, OJ_F32, w, sizeof w),
                                OJ_Q4_1);
    oj_tensor *xt = oj_from_host(eng, 3, (int64_t[]){2, 3, 64}, OJ_F32, x, sizeof x);
    oj_tensor *xs = oj_contiguous(oj_transpose(xt, 0, 1)); /* [3, 2, 64] */
    oj_tensor *ys = oj_qmatmul(oj_transpose(xt, 0, 1), q);
    oj_tensor *yc = oj_qmatmul(xs, q);
    assert_non_null(ys);
    assert_int_equal(oj_rank(ys), 3);
    assert_int_equal(oj_size(ys, 2), 8);
    float a[3 * 2 * 8], b[3 * 2 * 8];
    assert_int_equal(oj_to_host(ys, a, sizeof a), OJ_OK);
    assert_int_equal(oj_to_host(yc, b, sizeof b), OJ_OK);
    assert_memory_equal(a, b, sizeof a);
    oj_qtensor_free(q);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* The same bits for 1, 2 and 3 threads, with and without small chunks. */
static void test_qmatmul_thread_invariant(void **state) {
    (void)state;
    enum { M = 4, N = 131, KMAX = 512 };
    float *x = malloc(sizeof(float) * M * KMAX), *w = malloc(sizeof(float) * N * KMAX);
    float y[3][3][M * N];
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const int64_t K = all_types[ti] == OJ_Q4_K ? 512 : 320;
        qt_fill(x, M * K, 11, 2.0f);
        qt_fill(w, N * K, 12, 0.1f);
        for (int th = 1; th <= 3; th++) {
            oj_engine *eng = engine(th);
            oj_engine_set_numerics(eng, OJ_NUMERICS_EXACT);
            if (th == 3) oj__cpu_set_grain_shift(eng, 4);
            oj_tensor *wt = oj_from_host(eng, 2, (int64_t[]){N, K}, OJ_F32, w,
                                         sizeof(float) * N * (size_t)K);
            oj_tensor *xt = oj_from_host(eng, 2, (int64_t[]){M, K}, OJ_F32, x,
                                         sizeof(float) * M * (size_t)K);
            oj_qtensor *q = oj_quantize(wt, all_types[ti]);
            oj_tensor *yt = oj_qmatmul(xt, q);
            assert_non_null(yt);
            assert_int_equal(oj_to_host(yt, y[th - 1][0], sizeof y[0][0]), OJ_OK);
            oj_release(yt);
            /* the AVX-512 VNNI and the portable kernels too */
            set_level(eng, 3);
            yt = oj_qmatmul(xt, q);
            assert_int_equal(oj_to_host(yt, y[th - 1][2], sizeof y[0][0]), OJ_OK);
            oj_release(yt);
            set_level(eng, 0);
            yt = oj_qmatmul(xt, q);
            assert_int_equal(oj_to_host(yt, y[th - 1][1], sizeof y[0][0]), OJ_OK);
            oj_release(yt);
            oj_release(xt);
            oj_release(wt);
            oj_qtensor_free(q);
            assert_int_equal(oj_engine_live_tensors(eng), 0);
            oj_engine_free(eng);
        }
        for (int th = 1; th < 3; th++) {
            assert_memory_equal(y[0][0], y[th][0], sizeof y[0][0]);
            assert_memory_equal(y[0][1], y[th][1], sizeof y[0][1]);
            assert_memory_equal(y[0][2], y[th][2], sizeof y[0][2]);
        }
    }
    unsetenv("OJAS_QUANT_DOT");
    free(x);
    free(w);
}

/* bf16 and f16 weights are widened exactly, then quantized as f32. */
static void test_quantize_low_precision_input(void **state) {
    (void)state;
    oj_engine *eng = engine(1);
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    enum { N = 3, K = 64 };
    float w[N * K];
    qt_fill(w, N * K, 5, 1.0f);
    uint16_t h[N * K];
    for (int dt = 0; dt < 2; dt++) {
        for (int i = 0; i < N * K; i++) {
            h[i] = dt ? oj_f32_to_f16(w[i]) : oj_f32_to_bf16(w[i]);
            w[i] = dt ? oj_f16_to_f32(h[i]) : oj_bf16_to_f32(h[i]);
        }
        oj_tensor *a = oj_from_host(eng, 2, (int64_t[]){N, K}, dt ? OJ_F16 : OJ_BF16, h, sizeof h);
        oj_tensor *b = oj_from_host(eng, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof w);
        for (size_t ti = 0; ti < 3; ti++) { /* K = 64: not q4_k */
            oj_qtensor *qa = oj_quantize(a, all_types[ti]), *qb = oj_quantize(b, all_types[ti]);
            assert_int_equal(oj_qtensor_nbytes(qa), N * oj_qtype_row_bytes(all_types[ti], K));
            assert_memory_equal(oj_qtensor_data(qa), oj_qtensor_data(qb), oj_qtensor_nbytes(qa));
            oj_qtensor_free(qa);
            oj_qtensor_free(qb);
        }
    }
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void expect(oj_engine *eng, oj_status st, const char *needle) {
    assert_int_equal(oj_last_status(eng), st);
    if (strstr(oj_last_error(eng), needle) == NULL)
        fail_msg("error \"%s\" does not name \"%s\"", oj_last_error(eng), needle);
    oj_clear_error(eng);
}

static void test_errors_named(void **state) {
    (void)state;
    oj_engine *eng = engine(1);
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    float w[2 * 48] = {0};
    oj_tensor *bad_k = oj_from_host(eng, 2, (int64_t[]){2, 48}, OJ_F32, w, sizeof w);
    assert_null(oj_quantize(bad_k, OJ_Q8_0));
    expect(eng, OJ_ERR_SHAPE, "K a positive multiple of 32, got [2, 48]");
    oj_tensor *k96 = oj_zeros(eng, 2, (int64_t[]){2, 96}, OJ_F32);
    assert_null(oj_quantize(k96, OJ_Q4_K));
    expect(eng, OJ_ERR_SHAPE, "q4_k needs [N, K] with N > 0 and K a positive multiple of 256");
    oj_tensor *ints = oj_zeros(eng, 2, (int64_t[]){2, 32}, OJ_I32);
    assert_null(oj_quantize(ints, OJ_Q4_0));
    expect(eng, OJ_ERR_DTYPE, "w is i32");
    oj_tensor *vec = oj_zeros(eng, 1, (int64_t[]){32}, OJ_F32);
    assert_null(oj_quantize(vec, OJ_Q4_0));
    expect(eng, OJ_ERR_SHAPE, "a matrix [N, K] expected");
    w[40] = INFINITY;
    oj_tensor *inf = oj_from_host(eng, 2, (int64_t[]){3, 32}, OJ_F32, w, sizeof(float) * 96);
    assert_null(oj_quantize(inf, OJ_Q4_1));
    expect(eng, OJ_ERR_NUMERIC, "w[1, 8] is infinite");
    w[40] = 0;
    oj_tensor *ok = oj_from_host(eng, 2, (int64_t[]){3, 32}, OJ_F32, w, sizeof(float) * 96);
    oj_qtensor *q = oj_quantize(ok, OJ_Q8_0);
    assert_non_null(q);
    oj_tensor *x64 = oj_zeros(eng, 2, (int64_t[]){1, 64}, OJ_F32);
    assert_null(oj_qmatmul(x64, q));
    expect(eng, OJ_ERR_SHAPE, "x [1, 64] does not fit q8_0 w [3, 32]");
    oj_tensor *xb = oj_zeros(eng, 2, (int64_t[]){1, 32}, OJ_BF16);
    assert_null(oj_qmatmul(xb, q));
    expect(eng, OJ_ERR_DTYPE, "x is bf16; f32 expected");
    float xn[32] = {0};
    xn[5] = NAN;
    oj_tensor *xnan = oj_from_host(eng, 2, (int64_t[]){1, 32}, OJ_F32, xn, sizeof xn);
    assert_null(oj_qmatmul(xnan, q));
    expect(eng, OJ_ERR_NUMERIC, "x element 5 is NaN");
    assert_null(oj_qtensor_from_blocks(eng, OJ_Q4_0, 2, 64, w, 35));
    expect(eng, OJ_ERR_SHAPE, "35 bytes given; q4_0 [2, 64] takes 72");
    assert_null(oj_qtensor_from_blocks(eng, (oj_qtype)9, 2, 64, w, 72));
    expect(eng, OJ_ERR_INVALID_ARGUMENT, "invalid quantized type 9");
    oj_qtensor *fb = oj_qtensor_from_blocks(eng, OJ_Q4_0, 2, 64, oj_qtensor_data(q), 72);
    assert_non_null(fb);
    assert_int_equal(oj_qtensor_rows(fb), 2);
    assert_int_equal(oj_qtensor_cols(fb), 64);
    assert_int_equal(oj_qtensor_type(fb), OJ_Q4_0);
    oj_qtensor_free(fb);
    oj_qtensor_free(q);
    oj_scope_end(eng);
    /* a qtensor made outside any scope is the caller's alone */
    oj_tensor *t = oj_zeros(eng, 2, (int64_t[]){1, 32}, OJ_F32);
    q = oj_quantize(t, OJ_Q4_0);
    oj_release(t);
    assert_int_equal(oj_engine_live_tensors(eng), 1);
    oj_qtensor_free(q);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* A matrix big enough to be split over threads: for 1, 3 and 5 threads,
 * FAST numerics, every type, f32 rows and a transposed bf16 view, the
 * blocks are oj_quantize_row's of each row, byte for byte (a row of
 * subnormals too: a flushing worker would zero it). A NaN and an infinity
 * in two threads' ranges: the error names the first in row order. */
static void test_quantize_split_rows(void **state) {
    (void)state;
    enum { N = 301, K = 4096 }; /* 1.2 M elements: over the 2^20 of the split */
    static const oj_qtype types[] = {OJ_Q8_0, OJ_Q4_0, OJ_Q4_1, OJ_Q4_K, OJ_FP8_E4M3};
    float *w = malloc(sizeof(float) * N * K), *row = malloc(sizeof(float) * K);
    uint16_t *wtb = malloc(sizeof(uint16_t) * N * K); /* w^T [K, N] in bf16 */
    uint8_t *want = malloc(N * oj_qtype_row_bytes(OJ_Q8_0, K) + 16 * N);
    assert_non_null(w && row && wtb && want);
    qt_fill(w, (int64_t)N * K, 21, 0.05f);
    for (int j = 0; j < K; j++) w[257 * K + j] = (float)(j % 13 - 6) * 1e-39f; /* subnormal, in a worker's rows */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < K; j++) wtb[(size_t)j * N + i] = oj_f32_to_bf16(w[(size_t)i * K + j]);
    for (int th = 1; th <= 5; th += 2) {
        oj_engine *eng = engine(th);
        oj_engine_set_numerics(eng, OJ_NUMERICS_FAST);
        assert_int_equal(oj_scope_begin(eng), OJ_OK);
        oj_tensor *wt = oj_from_host(eng, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof(float) * N * K);
        oj_tensor *tb = oj_from_host(eng, 2, (int64_t[]){K, N}, OJ_BF16, wtb, sizeof(uint16_t) * N * K);
        oj_tensor *bv = oj_transpose(tb, 0, 1); /* [N, K], strides (1, N) */
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const size_t rb = oj_qtype_row_bytes(types[ti], K);
            for (int src = 0; src < 2; src++) {
                for (int i = 0; i < N; i++) {
                    for (int j = 0; j < K; j++)
                        row[j] = src ? oj_bf16_to_f32(wtb[(size_t)j * N + i]) : w[(size_t)i * K + j];
                    assert_int_equal(oj_quantize_row(types[ti], row, K, want + (size_t)i * rb, NULL), OJ_OK);
                }
                oj_qtensor *q = oj_quantize(src ? bv : wt, types[ti]);
                assert_non_null(q);
                assert_int_equal(oj_qtensor_nbytes(q), N * rb);
                if (memcmp(oj_qtensor_data(q), want, N * rb) != 0)
                    fail_msg("%d threads, %s, %s: blocks differ from oj_quantize_row's", th,
                             oj_qtype_name(types[ti]), src ? "bf16 view" : "f32");
                oj_qtensor_free(q);
            }
        }
        w[250 * K + 3] = INFINITY;
        w[120 * K + 9] = NAN;
        oj_tensor *bad = oj_from_host(eng, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof(float) * N * K);
        assert_null(oj_quantize(bad, OJ_Q4_0));
        expect(eng, OJ_ERR_NUMERIC, "w[120, 9] is NaN; q4_0 needs finite values");
        w[120 * K + 9] = 0;
        bad = oj_from_host(eng, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof(float) * N * K);
        assert_null(oj_quantize(bad, OJ_FP8_E4M3));
        expect(eng, OJ_ERR_NUMERIC, "w[250, 3] is infinite; fp8 needs finite values");
        w[250 * K + 3] = 0;
        oj_scope_end(eng);
        assert_int_equal(oj_engine_live_tensors(eng), 0);
        oj_engine_free(eng);
    }
    free(w);
    free(row);
    free(wtb);
    free(want);
}

/* fp8 (OCP E4M3, one f32 scale a row): every code decodes to its value
 * (sign, 4 exponent bits biased by 7, 3 mantissa bits, subnormals m 2^-9,
 * S.1111.111 NaN); encoding each finite value gives its code back; a
 * value halfway between two neighbours goes to the even mantissa; above
 * 448 it saturates; a row's bytes: the scale amax / 448 in its 16-byte
 * header, zeros after it, each element x / s rounded; a zero row all
 * zeros; the round trip within half a step (2^-4 relative, or 2^-10 s
 * among the subnormals); GGUF has no type for it. */
static void test_fp8_e4m3(void **state) {
    (void)state;
    oj_qtype t;
    assert_true(oj_qtype_parse("fp8", &t));
    assert_int_equal(t, OJ_FP8_E4M3);
    assert_string_equal(oj_qtype_name(OJ_FP8_E4M3), "fp8");
    assert_int_equal(oj_qtype_row_bytes(OJ_FP8_E4M3, 64), 16 + 64);
    assert_int_equal(oj_qtype_row_bytes(OJ_FP8_E4M3, 48), 0);
    assert_int_equal(oj_qtype_to_ggml(OJ_FP8_E4M3), UINT32_MAX);
    /* a few codes by hand: 1, 448, -2^-9, 2^-6, 1.125 */
    assert_true(oj__e4m3_to_f32(0x38) == 1.0f);
    assert_true(oj__e4m3_to_f32(0x7E) == 448.0f);
    assert_true(oj__e4m3_to_f32(0x81) == -ldexpf(1, -9));
    assert_true(oj__e4m3_to_f32(0x08) == ldexpf(1, -6));
    assert_true(oj__e4m3_to_f32(0x39) == 1.125f);
    assert_true(isnan(oj__e4m3_to_f32(0x7F)) && isnan(oj__e4m3_to_f32(0xFF)));
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F) continue;
        const float v = oj__e4m3_to_f32((uint8_t)c);
        const uint8_t back = oj__f32_to_e4m3(v);
        if (back != c && !(v == 0.0f && (back & 0x7F) == 0 && back == (c & 0x80)))
            fail_msg("code 0x%02x = %g encodes to 0x%02x", c, v, back);
        if ((c & 0x7F) < 0x7E) { /* the midpoint to the next code up goes to the even one */
            const float w = oj__e4m3_to_f32((uint8_t)(c + 1));
            const float mid = (v + w) / 2.0f; /* exact: the values have 4 significant bits */
            const uint8_t even = (c & 1) ? (uint8_t)(c + 1) : (uint8_t)c;
            if (oj__f32_to_e4m3(mid) != even)
                fail_msg("midpoint %g of 0x%02x and 0x%02x encodes to 0x%02x, expected 0x%02x",
                         mid, c, c + 1, oj__f32_to_e4m3(mid), even);
            /* just off the midpoint: the nearer code */
            if (oj__f32_to_e4m3(nextafterf(mid, 0.0f)) != c && v >= 0)
                fail_msg("below the midpoint of 0x%02x: 0x%02x", c, oj__f32_to_e4m3(nextafterf(mid, 0.0f)));
        }
    }
    assert_int_equal(oj__f32_to_e4m3(460.0f), 0x7E);
    assert_int_equal(oj__f32_to_e4m3(1e30f), 0x7E);
    assert_int_equal(oj__f32_to_e4m3(-1e30f), 0xFE);
    assert_int_equal(oj__f32_to_e4m3(ldexpf(1, -11)), 0x00); /* a quarter of the smallest: 0 */
    enum { K = 96 };
    float x[K], y[K];
    uint8_t q[16 + K];
    qt_fill(x, K, 17, 3.0f);
    x[5] = -40.0f; /* amax */
    x[6] = 1e-6f;  /* a subnormal after scaling */
    assert_int_equal(oj_quantize_row(OJ_FP8_E4M3, x, K, q, NULL), OJ_OK);
    float s;
    memcpy(&s, q, sizeof s);
    assert_true(s == 40.0f / 448.0f);
    for (int i = 4; i < 16; i++) assert_int_equal(q[i], 0);
    assert_int_equal(q[16 + 5], 0xFE); /* -448 */
    for (int j = 0; j < K; j++) assert_int_equal(q[16 + j], oj__f32_to_e4m3(x[j] / s));
    assert_int_equal(oj_dequantize_row(OJ_FP8_E4M3, q, K, y, NULL), OJ_OK);
    for (int j = 0; j < K; j++) {
        const double bound = fmax(ldexp(fabs(x[j]), -4), ldexp(s, -10)) * (1 + 1e-6);
        if (!(fabs((double)y[j] - x[j]) <= bound))
            fail_msg("fp8 element %d: %g back as %g (bound %g)", j, x[j], y[j], bound);
    }
    float z[32] = {0};
    uint8_t qz[16 + 32];
    memset(qz, 0xAA, sizeof qz);
    assert_int_equal(oj_quantize_row(OJ_FP8_E4M3, z, 32, qz, NULL), OJ_OK);
    for (size_t i = 0; i < sizeof qz; i++) assert_int_equal(qz[i], 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_sizes),
        cmocka_unit_test(test_round_trip_bounds),
        cmocka_unit_test(test_q8_0_exact_block),
        cmocka_unit_test(test_row_errors),
        cmocka_unit_test(test_qmatmul_matches_dequant),
        cmocka_unit_test(test_qmatmul_simd_levels_identical),
        cmocka_unit_test(test_qmatmul_strided_batched),
        cmocka_unit_test(test_qmatmul_thread_invariant),
        cmocka_unit_test(test_quantize_low_precision_input),
        cmocka_unit_test(test_errors_named),
        cmocka_unit_test(test_quantize_split_rows),
        cmocka_unit_test(test_fp8_e4m3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
