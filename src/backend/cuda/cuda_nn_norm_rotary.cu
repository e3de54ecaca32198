/* CUDA RMS norm over the last dim D then the rotary embedding (half-split
 * layout; Zhang & Sennrich 2019, Su et al. 2021): oj_rms_norm_rotary, the
 * QK-norm of nanolab-style attention, in one pass over a strided head view
 * [B, H, T, D] of the fused projection (no contiguous copy, no second
 * kernel). The CPU entry (cpu_nn_rotary.c) defines the values; this one
 * keeps its rounding points (the norm's output rounded to the dtype before
 * the rotation; dy's inverse rotation rounded to dy's dtype before the
 * norm's dx rule) and computes in float: the sum of squares by a warp
 * butterfly, rstd = 1 / sqrt(mean + eps) correctly rounded (__frsqrt_rn),
 * the rotation with each product and sum rounded, the angles' cos and sin
 * in double rounded once to float. The CPU computes the norm and the
 * rotation in double, so the two agree within float rounding. A first
 * version followed the replaced kernels (rstd and the rotation in double):
 * ncu on the H200, nanolab's q [16, 12, 1024, 64] bf16: 71 us forward,
 * 85 backward, DRAM at 9.7%, compute 45%, 31% occupancy (80 registers):
 * the per-row double sqrt/divide and the double rotation, 32 lanes each,
 * bound it. No atomics, every row by one warp in a fixed order: the same
 * bits run to run, whatever the launch geometry.
 *
 * Fast path: x (and dy), out, weight of one dtype f32/bf16/f16, rstd f32,
 * D = 32 NPT with NPT in {2, 4, 6, 8} (D 64, 128, 192, 256), the last dim
 * of x (and dy) of stride 1 and its leading dims (all but T and D) viewable
 * as two strided dims [R1, R2] (size-1 dims dropped, adjacent dims merged;
 * [B, H] of a head view). One warp per row; lane l holds the elements
 * l + 32 k, k < NPT, so element l + 32 p and its rotary partner
 * l + 32 p + D/2 = l + 32 (p + NPT/2) are in the same lane: the rotation
 * needs no exchange. The row's sum of squares is a warp xor butterfly
 * (k_norm_fwd_fast's order). A block computes the D/2 frequencies (pow in
 * double) into shared memory; a warp owns one position t and a chunk of
 * the R = B H rows of that t: it computes cos/sin of its NPT/2 angles once
 * (in double; before its first loads: computed between them,
 * the values held across the trigonometry spilled) and
 * walks its rows r (the [R1, R2] index advanced by a carry, no division),
 * the loads of RR rows issued together before any use (one row of 64 bf16
 * per warp left the unfused QK-norm latency-bound).
 *
 * Geometry: T * nchunk warps, nchunk = ceil(RNR_TARGET_WARPS / T) clamped
 * to R (the results do not depend on it). nanolab-124m training, q or k
 * [16, 12, 1024, 64] bf16 viewed in [16, 1024, 2320]: 8 chunks of 24 rows,
 * 8192 warps in 1024 blocks (~2.6 waves at 3 blocks per SM); 1024 blocks
 * x 32 pow and 262,144 lanes x (cos, sin) in double.
 * Bytes: forward reads x (25.2 MB) and writes out (25.2 MB) and rstd
 * (0.4 MB): ~13 us at 4 TB/s, against copy + norm + rotary (16 + 58 + 24
 * us measured); backward reads x, dy and rstd and writes dx (75.9 MB,
 * ~19 us) against rotary + copy + norm backward. FLOPs are negligible (a
 * few per element).
 *
 * Anything else (f64, mixed dtypes, another even D, a strided last dim,
 * leading dims that do not merge to two) takes the generic kernels: a warp
 * per row over any strides, everything in double (the CPU's double path),
 * the angles recomputed per row and pair (~70 us for the shape above: a
 * fallback, not the model's path). */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

#define RNR_THREADS 256
#define RNR_WARPS (RNR_THREADS / 32)
#define RNR_TARGET_WARPS 8192 /* about one wave of 256-thread blocks on an H200 */

struct rnr_args {
    const char *x, *dy, *w, *rstd_in;
    char *out, *rstd_out, *dx;
    int64_t R, R2, T;
    int64_t sx1, sx2, sxT; /* x: element strides of R1, R2 and T */
    int64_t sg1, sg2, sgT; /* dy (backward) */
    int64_t sd1, sd2, sdT; /* dx (backward; its last dim contiguous) */
    int64_t chunk, nchunk;
    int64_t pos;
    double theta, eps;
};

/* The frequency theta^(-2i/D) of pair i, and cos and sign * sin of its
 * angle at position p: k_rotary's formulas (cuda_nn_misc.cu), the same
 * bits. */
__device__ static __forceinline__ double rnr_freq(int64_t i, int64_t D, double theta) {
    return pow(theta, -2.0 * (double)i / (double)D);
}
__device__ static __forceinline__ void rnr_cs(int64_t p, double freq, double sign, double *c,
                                              double *s) {
    double ang = (double)p * freq;
    *c = cos(ang);
    *s = sign * sin(ang);
}
__device__ static __forceinline__ void rnr_angle(int64_t p, int64_t i, int64_t D, double theta,
                                                 double sign, double *c, double *s) {
    rnr_cs(p, rnr_freq(i, D, theta), sign, c, s);
}

/* Rows per warp whose loads are in flight at once: about 16 loads per
 * lane (NPT per row forward, 2 NPT backward), at least one row. Register
 * bounds (ptxas, sm_90, no spills): the forward fits 80 registers (3
 * blocks of 256 per SM), the backward up to 103 (bf16, NPT 4; 2 blocks). */
template <int NPT, bool BWD> struct rnr_rr {
    static constexpr int v = (BWD ? 8 : 16) / NPT > 1 ? (BWD ? 8 : 16) / NPT : 1;
};

// x (R1, R2, T, D) strided, weight (D) -> out (R, T, D) contiguous, rstd (R T)
template <typename T, int NPT>
__global__ void __launch_bounds__(RNR_THREADS, 3) k_rnr_fwd(rnr_args a) {
    constexpr int P = NPT / 2, RR = rnr_rr<NPT, false>::v, D = 32 * NPT;
    __shared__ double fq[16 * NPT]; /* the D/2 frequencies, once per block */
    for (int i = (int)threadIdx.x; i < 16 * NPT; i += RNR_THREADS) fq[i] = rnr_freq(i, D, a.theta);
    __syncthreads(); /* the only barrier: warps may leave after it */
    const int lane = (int)(threadIdx.x & 31);
    const int64_t wid = (int64_t)blockIdx.x * RNR_WARPS + (threadIdx.x >> 5);
    if (wid >= a.T * a.nchunk) return; /* the whole warp */
    const int64_t ch = wid / a.T, t = wid - ch * a.T;
    const int64_t rb = ch * a.chunk, re = rb + a.chunk < a.R ? rb + a.chunk : a.R;
    const T *x = (const T *)a.x, *w = (const T *)a.w;
    T *out = (T *)a.out;
    float wv[NPT];
#pragma unroll
    for (int k = 0; k < NPT; k++) wv[k] = w ? oj_cu_tof(w[lane + 32 * k]) : 1.0f;
    float cs[P], sn[P]; /* the angle's cos and sin in double, rounded once */
#pragma unroll
    for (int p = 0; p < P; p++) {
        double c, sd;
        rnr_cs(a.pos + t, fq[lane + 32 * p], 1.0, &c, &sd);
        cs[p] = (float)c;
        sn[p] = (float)sd;
    }
    const float epsf = (float)a.eps;
    int64_t q1 = rb / a.R2, q2 = rb - q1 * a.R2; /* row r = q1 R2 + q2 */
    const int64_t toff = t * a.sxT;
    for (int64_t r = rb; r < re; r += RR) {
        /* the RR rows' loads (rows past re reread the last row, not stored);
         * the index advances only within [rb, re) */
        float v[RR][NPT];
        int64_t o = q1 * a.sx1 + q2 * a.sx2 + toff;
#pragma unroll
        for (int u = 0; u < RR; u++) {
#pragma unroll
            for (int k = 0; k < NPT; k++) v[u][k] = oj_cu_tof(x[o + lane + 32 * k]);
            if (r + u + 1 < re) {
                if (++q2 == a.R2) {
                    q2 = 0;
                    q1++;
                }
                o = q1 * a.sx1 + q2 * a.sx2 + toff;
            }
        }
#pragma unroll
        for (int u = 0; u < RR; u++) {
            if (r + u >= re) break; /* uniform over the warp */
            const int64_t n = (r + u) * a.T + t;
            /* the RMS norm in float: the mean square, rstd = 1 / sqrt(ms +
             * eps) correctly rounded, each product rounded */
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < NPT; k++) s = __fmaf_rn(v[u][k], v[u][k], s);
            s = oj_cu_warp_sumf(s);
            float rs = __frsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)D), epsf));
            if (!isfinite(s)) { /* uniform over the warp: the float sum overflowed
                                 * (finite |x| from ~1.8e19): the sum in double */
                double sd = 0.0;
#pragma unroll
                for (int k = 0; k < NPT; k++) sd += (double)v[u][k] * (double)v[u][k];
                rs = (float)(1.0 / sqrt(oj_cu_warp_sum(sd) / (double)D + a.eps));
            }
            float y[NPT];
#pragma unroll
            for (int k = 0; k < NPT; k++) { /* the norm's output as stored (T) */
                float z = __fmul_rn(v[u][k], rs);
                if (w) z = __fmul_rn(z, wv[k]);
                y[k] = oj_cu_tof(oj_cu_fromf<T>(z));
            }
            T *orow = out + n * D;
#pragma unroll
            for (int p = 0; p < P; p++) { /* the rotation in float */
                const float x1 = y[p], x2 = y[p + P];
                orow[lane + 32 * p] =
                    oj_cu_fromf<T>(__fsub_rn(__fmul_rn(x1, cs[p]), __fmul_rn(x2, sn[p])));
                orow[lane + 32 * (p + P)] =
                    oj_cu_fromf<T>(__fadd_rn(__fmul_rn(x2, cs[p]), __fmul_rn(x1, sn[p])));
            }
            if (lane == 0 && a.rstd_out) ((float *)a.rstd_out)[n] = rs;
        }
    }
}

// dy, x (R1, R2, T, D) strided, rstd (R T), weight (D) -> dx (R1, R2, T, D) strided
template <typename T, int NPT>
__global__ void __launch_bounds__(RNR_THREADS, 2) k_rnr_bwd(rnr_args a) {
    constexpr int P = NPT / 2, RR = rnr_rr<NPT, true>::v, D = 32 * NPT;
    __shared__ double fq[16 * NPT]; /* the D/2 frequencies, once per block */
    for (int i = (int)threadIdx.x; i < 16 * NPT; i += RNR_THREADS) fq[i] = rnr_freq(i, D, a.theta);
    __syncthreads(); /* the only barrier: warps may leave after it */
    const int lane = (int)(threadIdx.x & 31);
    const int64_t wid = (int64_t)blockIdx.x * RNR_WARPS + (threadIdx.x >> 5);
    if (wid >= a.T * a.nchunk) return;
    const int64_t ch = wid / a.T, t = wid - ch * a.T;
    const int64_t rb = ch * a.chunk, re = rb + a.chunk < a.R ? rb + a.chunk : a.R;
    const T *x = (const T *)a.x, *dy = (const T *)a.dy, *w = (const T *)a.w;
    const float *rstd = (const float *)a.rstd_in;
    T *dx = (T *)a.dx;
    float ws[NPT];
#pragma unroll
    for (int k = 0; k < NPT; k++) ws[k] = w ? oj_cu_tof(w[lane + 32 * k]) : 1.0f;
    float cs[P], sn[P]; /* the angle's cos and -sin in double, rounded once */
#pragma unroll
    for (int p = 0; p < P; p++) {
        double c, sd;
        rnr_cs(a.pos + t, fq[lane + 32 * p], -1.0, &c, &sd);
        cs[p] = (float)c;
        sn[p] = (float)sd;
    }
    int64_t q1 = rb / a.R2, q2 = rb - q1 * a.R2;
    const int64_t tx = t * a.sxT, tg = t * a.sgT, td = t * a.sdT;
    for (int64_t r = rb; r < re; r += RR) {
        float xv[RR][NPT], gv[RR][NPT], rsv[RR];
        int64_t ox = q1 * a.sx1 + q2 * a.sx2 + tx, og = q1 * a.sg1 + q2 * a.sg2 + tg, od[RR];
#pragma unroll
        for (int u = 0; u < RR; u++) {
            const int64_t ru = r + u < re ? r + u : re - 1;
            rsv[u] = rstd[ru * a.T + t];
            od[u] = q1 * a.sd1 + q2 * a.sd2 + td;
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                xv[u][k] = oj_cu_tof(x[ox + lane + 32 * k]);
                gv[u][k] = oj_cu_tof(dy[og + lane + 32 * k]);
            }
            if (r + u + 1 < re) {
                if (++q2 == a.R2) {
                    q2 = 0;
                    q1++;
                }
                ox = q1 * a.sx1 + q2 * a.sx2 + tx;
                og = q1 * a.sg1 + q2 * a.sg2 + tg;
            }
        }
#pragma unroll
        for (int u = 0; u < RR; u++) {
            if (r + u >= re) break;
            const float rs = rsv[u];
            /* the inverse rotation of dy (sign -1, in float), stored in T */
            float g[NPT];
#pragma unroll
            for (int p = 0; p < P; p++) {
                const float d1 = gv[u][p], d2 = gv[u][p + P];
                g[p] = oj_cu_tof(
                    oj_cu_fromf<T>(__fsub_rn(__fmul_rn(d1, cs[p]), __fmul_rn(d2, sn[p]))));
                g[p + P] = oj_cu_tof(
                    oj_cu_fromf<T>(__fadd_rn(__fmul_rn(d2, cs[p]), __fmul_rn(d1, sn[p]))));
            }
            /* k_norm_bwd_fast's RMS rule (mean 0, no sum of dy) */
            float xh[NPT], gw[NPT], sgx = 0.0f;
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                xh[k] = xv[u][k] * rs;
                gw[k] = g[k] * ws[k];
                sgx += gw[k] * xh[k];
            }
            sgx = oj_cu_warp_sumf(sgx) / (float)D;
            T *dr = dx + od[u];
#pragma unroll
            for (int k = 0; k < NPT; k++)
                dr[lane + 32 * k] = oj_cu_fromf<T>(rs * (gw[k] - xh[k] * sgx));
        }
    }
}

/* ---------------------------------------------------------------- vector path (D 64)
 * The fast path's values for D = 64 with 16-byte loads and no double
 * arithmetic in the kernel: the angles' (float) cos and sin come from a
 * table (k_rnr_table, the same double formulas rounded once, so the same
 * bits) cached per engine for (D, theta) and positions [0, npos); a row
 * is E = 16 / sizeof(T) consecutive elements of each half in each of 32 / E
 * lanes (bf16: 4 lanes a row, 8 rows a warp instruction), so element l of
 * the first half and its partner l + 32 sit in one lane as in k_rnr_fwd.
 * The sums keep k_rnr_fwd's order: the per-element-lane chain l, l + 32,
 * then its xor butterfly over l (offsets 16 .. E across lanes, E/2 .. 1
 * inside a lane); every value is k_rnr_fwd's / k_rnr_bwd's bit for bit
 * (test_gpu_ops compares the two paths). OJAS_CUDA_RNR_TABLE=0 turns it
 * off (the warp-per-row kernels above). */

#define RNV_D 64
#define RNV_MAX_POS 16384 /* table rows at most (4 MiB at D 64) */
#define RNV_TABS 8        /* tables per engine at most; then the kernels above */
#define RNV_TARGET_WARPS 4096

struct oj_cuda_rnr_tabs {
    int n;
    struct {
        int64_t D, npos;
        double theta;
        float *p; /* npos x D: cos of pairs 0 .. D/2-1, then their sin */
    } e[RNV_TABS];
    cudaStream_t side; /* fills a table during a capture (outside the graph) */
};

// tab (npos, D): row p = cos(p f_i) for i < D/2, then sin(p f_i), rounded once to float
__global__ void k_rnr_table(float *tab, int64_t npos, int64_t D, double theta) {
    const int64_t half = D / 2;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < npos * half;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t p = k / half, i = k - p * half;
        double c, s;
        rnr_cs(p, rnr_freq(i, D, theta), 1.0, &c, &s);
        tab[p * D + i] = (float)c;
        tab[p * D + half + i] = (float)s;
    }
}

/* The row index r = q1 R2 + q2 advanced by G (R2 may be below G). */
__device__ static __forceinline__ void rnv_advance(int64_t &q1, int64_t &q2, int64_t R2, int G) {
    q2 += G;
    while (q2 >= R2) {
        q2 -= R2;
        q1++;
    }
}

// x (R1, R2, T, 64) strided (16-byte aligned rows), weight (64), tab -> out (R, T, 64), rstd (R T)
template <typename T, int RR>
__global__ void __launch_bounds__(RNR_THREADS) k_rnv_fwd(rnr_args a, const float *tab) {
    constexpr int E = 16 / (int)sizeof(T), LPR = 32 / E, G = E, H = RNV_D / 2;
    typedef uint4 V;
    const int lane = (int)(threadIdx.x & 31), g = lane / LPR, j = lane % LPR;
    const int64_t wid = (int64_t)blockIdx.x * RNR_WARPS + (threadIdx.x >> 5);
    if (wid >= a.T * a.nchunk) return; /* the whole warp */
    const int64_t ch = wid / a.T, t = wid - ch * a.T;
    const int64_t rb = ch * a.chunk, re = rb + a.chunk < a.R ? rb + a.chunk : a.R;
    const T *x = (const T *)a.x, *w = (const T *)a.w;
    T *out = (T *)a.out;
    float cs[E], sn[E], w1[E], w2[E];
    const float *tp = tab + (a.pos + t) * RNV_D + j * E;
#pragma unroll
    for (int c = 0; c < E; c += 4) {
        const float4 cv = *(const float4 *)(tp + c), sv = *(const float4 *)(tp + H + c);
        cs[c] = cv.x, cs[c + 1] = cv.y, cs[c + 2] = cv.z, cs[c + 3] = cv.w;
        sn[c] = sv.x, sn[c + 1] = sv.y, sn[c + 2] = sv.z, sn[c + 3] = sv.w;
    }
    if (w) {
        oj_cu_ldv<T, E>(w + j * E, w1);
        oj_cu_ldv<T, E>(w + H + j * E, w2);
    }
    const float epsf = (float)a.eps;
    int64_t q1 = (rb + g) / a.R2, q2 = (rb + g) - q1 * a.R2;
    const int64_t toff = t * a.sxT + j * E;
    for (int64_t r0 = rb; r0 < re; r0 += (int64_t)G * RR) {
        V l1[RR], l2[RR];
#pragma unroll
        for (int u = 0; u < RR; u++) { /* the RR rows' loads first */
            const int64_t r = r0 + u * G + g;
            const T *xr = x + q1 * a.sx1 + q2 * a.sx2 + toff;
            l1[u] = r < re ? *(const V *)xr : make_uint4(0, 0, 0, 0);
            l2[u] = r < re ? *(const V *)(xr + H) : make_uint4(0, 0, 0, 0);
            rnv_advance(q1, q2, a.R2, G);
        }
#pragma unroll
        for (int u = 0; u < RR; u++) {
            const int64_t r = r0 + u * G + g;
            float v1[E], v2[E], p[E];
            oj_cu_unpackv<T, E>(l1[u], v1);
            oj_cu_unpackv<T, E>(l2[u], v2);
            if (sizeof(T) == 2) { /* a NaN's bits as the bit routines give them */
                bool nan = false;
#pragma unroll
                for (int c = 0; c < E; c++) nan |= v1[c] != v1[c] || v2[c] != v2[c];
                if (nan) {
                    oj_cu_ldv<T, E>((const T *)&l1[u], v1);
                    oj_cu_ldv<T, E>((const T *)&l2[u], v2);
                }
            }
#pragma unroll
            for (int c = 0; c < E; c++) { /* element-lane j E + c: elements l, l + 32 */
                float s = 0.0f;
                s = __fmaf_rn(v1[c], v1[c], s);
                p[c] = __fmaf_rn(v2[c], v2[c], s);
            }
            const float s = oj_cu_lanes_sum<E>(p);
            float rs = __frsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)RNV_D), epsf));
            if (__any_sync(0xffffffffu, !isfinite(s))) { /* overflow: the sum in double */
                double pd[E];
#pragma unroll
                for (int c = 0; c < E; c++) {
                    double sd = 0.0;
                    sd += (double)v1[c] * (double)v1[c];
                    sd += (double)v2[c] * (double)v2[c];
                    pd[c] = sd;
                }
                const double sd = oj_cu_lanes_sum<E>(pd);
                if (!isfinite(s)) rs = (float)(1.0 / sqrt(sd / (double)RNV_D + a.eps));
            }
            float o1[E], o2[E];
#pragma unroll
            for (int c = 0; c < E; c++) {
                float z1 = __fmul_rn(v1[c], rs), z2 = __fmul_rn(v2[c], rs);
                if (w) {
                    z1 = __fmul_rn(z1, w1[c]);
                    z2 = __fmul_rn(z2, w2[c]);
                }
                /* the norm's output as stored (T): NaN bits do not matter,
                 * the rotation's arithmetic makes any NaN the canonical one */
                const float y1 = oj_cu_hw_tof(oj_cu_hw_fromf<T>(z1));
                const float y2 = oj_cu_hw_tof(oj_cu_hw_fromf<T>(z2));
                o1[c] = __fsub_rn(__fmul_rn(y1, cs[c]), __fmul_rn(y2, sn[c]));
                o2[c] = __fadd_rn(__fmul_rn(y2, cs[c]), __fmul_rn(y1, sn[c]));
            }
            if (r < re) {
                const int64_t n = r * a.T + t;
                T *orow = out + n * RNV_D + j * E;
                oj_cu_stv<T, E>(orow, o1);
                oj_cu_stv<T, E>(orow + H, o2);
                if (j == 0 && a.rstd_out) ((float *)a.rstd_out)[n] = rs;
            }
        }
    }
}

// dy, x (R1, R2, T, 64) strided, rstd (R T), weight (64), tab -> dx (R1, R2, T, 64) strided
template <typename T, int RR>
__global__ void __launch_bounds__(RNR_THREADS) k_rnv_bwd(rnr_args a, const float *tab) {
    constexpr int E = 16 / (int)sizeof(T), LPR = 32 / E, G = E, H = RNV_D / 2;
    typedef uint4 V;
    const int lane = (int)(threadIdx.x & 31), g = lane / LPR, j = lane % LPR;
    const int64_t wid = (int64_t)blockIdx.x * RNR_WARPS + (threadIdx.x >> 5);
    if (wid >= a.T * a.nchunk) return;
    const int64_t ch = wid / a.T, t = wid - ch * a.T;
    const int64_t rb = ch * a.chunk, re = rb + a.chunk < a.R ? rb + a.chunk : a.R;
    const T *x = (const T *)a.x, *dy = (const T *)a.dy, *w = (const T *)a.w;
    const float *rstd = (const float *)a.rstd_in;
    T *dx = (T *)a.dx;
    float cs[E], sn[E], w1[E], w2[E]; /* cos and -sin: k_rnr_bwd's sign -1 */
    const float *tp = tab + (a.pos + t) * RNV_D + j * E;
#pragma unroll
    for (int c = 0; c < E; c += 4) {
        const float4 cv = *(const float4 *)(tp + c), sv = *(const float4 *)(tp + H + c);
        cs[c] = cv.x, cs[c + 1] = cv.y, cs[c + 2] = cv.z, cs[c + 3] = cv.w;
        sn[c] = -sv.x, sn[c + 1] = -sv.y, sn[c + 2] = -sv.z, sn[c + 3] = -sv.w;
    }
    if (w) {
        oj_cu_ldv<T, E>(w + j * E, w1);
        oj_cu_ldv<T, E>(w + H + j * E, w2);
    } else {
#pragma unroll
        for (int c = 0; c < E; c++) w1[c] = w2[c] = 1.0f;
    }
    int64_t q1 = (rb + g) / a.R2, q2 = (rb + g) - q1 * a.R2;
    const int64_t tx = t * a.sxT + j * E, tg = t * a.sgT + j * E, td = t * a.sdT + j * E;
    for (int64_t r0 = rb; r0 < re; r0 += (int64_t)G * RR) {
        V lx1[RR], lx2[RR], lg1[RR], lg2[RR];
        float rsv[RR];
        int64_t od[RR];
#pragma unroll
        for (int u = 0; u < RR; u++) {
            const int64_t r = r0 + u * G + g;
            const bool in = r < re;
            const T *xr = x + q1 * a.sx1 + q2 * a.sx2 + tx;
            const T *gr = dy + q1 * a.sg1 + q2 * a.sg2 + tg;
            od[u] = q1 * a.sd1 + q2 * a.sd2 + td;
            const V z = make_uint4(0, 0, 0, 0);
            lx1[u] = in ? *(const V *)xr : z;
            lx2[u] = in ? *(const V *)(xr + H) : z;
            lg1[u] = in ? *(const V *)gr : z;
            lg2[u] = in ? *(const V *)(gr + H) : z;
            rsv[u] = in ? rstd[r * a.T + t] : 0.0f;
            rnv_advance(q1, q2, a.R2, G);
        }
#pragma unroll
        for (int u = 0; u < RR; u++) {
            const int64_t r = r0 + u * G + g;
            const float rs = rsv[u];
            float x1[E], x2[E], d1[E], d2[E];
            oj_cu_ldv<T, E>((const T *)&lx1[u], x1);
            oj_cu_ldv<T, E>((const T *)&lx2[u], x2);
            oj_cu_ldv<T, E>((const T *)&lg1[u], d1);
            oj_cu_ldv<T, E>((const T *)&lg2[u], d2);
            float xh1[E], xh2[E], gw1[E], gw2[E], p[E];
#pragma unroll
            for (int c = 0; c < E; c++) {
                /* the inverse rotation of dy (sign -1, in float), stored in T */
                const float g1 = oj_cu_hw_tof(oj_cu_hw_fromf<T>(
                    __fsub_rn(__fmul_rn(d1[c], cs[c]), __fmul_rn(d2[c], sn[c]))));
                const float g2 = oj_cu_hw_tof(oj_cu_hw_fromf<T>(
                    __fadd_rn(__fmul_rn(d2[c], cs[c]), __fmul_rn(d1[c], sn[c]))));
                /* k_rnr_bwd's expressions, term for term */
                xh1[c] = x1[c] * rs;
                gw1[c] = g1 * w1[c];
                xh2[c] = x2[c] * rs;
                gw2[c] = g2 * w2[c];
                float sgx = 0.0f;
                sgx += gw1[c] * xh1[c];
                sgx += gw2[c] * xh2[c];
                p[c] = sgx;
            }
            const float sgx = oj_cu_lanes_sum<E>(p) / (float)RNV_D;
            float o1[E], o2[E];
#pragma unroll
            for (int c = 0; c < E; c++) {
                o1[c] = rs * (gw1[c] - xh1[c] * sgx);
                o2[c] = rs * (gw2[c] - xh2[c] * sgx);
            }
            if (r < re) {
                oj_cu_stv<T, E>(dx + od[u], o1);
                oj_cu_stv<T, E>(dx + od[u] + H, o2);
            }
        }
    }
}

/* The engine's table for (D, theta) covering positions [0, need), made on
 * first use (its rows rounded up to a power of two, at least 1024); NULL
 * when it would exceed RNV_MAX_POS rows or RNV_TABS tables, or a CUDA call
 * failed (the caller takes the kernels above). During a capture the table
 * is filled on a side stream and waited for, so the graph only reads it;
 * tables live until the engine closes (graphs may hold their addresses). */
static const float *rnv_table(oj_engine *eng, int64_t D, double theta, int64_t need) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s == NULL || need > RNV_MAX_POS) return NULL;
    if (s->rnr_tabs == NULL &&
        (s->rnr_tabs = (oj_cuda_rnr_tabs *)calloc(1, sizeof *s->rnr_tabs)) == NULL)
        return NULL;
    oj_cuda_rnr_tabs *c = s->rnr_tabs;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].D == D && c->e[i].theta == theta && c->e[i].npos >= need) return c->e[i].p;
    if (c->n == RNV_TABS) return NULL;
    int64_t npos = 1024;
    while (npos < need) npos *= 2;
    if (npos > RNV_MAX_POS) npos = RNV_MAX_POS;
    float *p = NULL;
    const bool cap = oj_cuda_capturing(eng);
    cudaError_t e = cudaMalloc((void **)&p, (size_t)(npos * D) * sizeof(float));
    if (e == cudaSuccess && cap && c->side == NULL)
        e = cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        const int64_t blocks = (npos * (D / 2) + 255) / 256;
        k_rnr_table<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0,
                      cap ? c->side : OJ_STREAM>>>(p, npos, D, theta);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess && cap) e = cudaStreamSynchronize(c->side);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (p) cudaFree(p);
        return NULL;
    }
    c->e[c->n].D = D;
    c->e[c->n].npos = npos;
    c->e[c->n].theta = theta;
    c->e[c->n].p = p;
    c->n++;
    return p;
}

void oj_cuda_rnr_close(oj_cuda_state *s) {
    oj_cuda_rnr_tabs *c = s->rnr_tabs;
    if (c == NULL) return;
    for (int i = 0; i < c->n; i++) cudaFree(c->e[i].p);
    if (c->side) cudaStreamDestroy(c->side);
    free(c);
    s->rnr_tabs = NULL;
}

/* Is the vector path on (OJAS_CUDA_RNR_TABLE, default 1; read per call,
 * so tests can compare both paths in one process)? */
static bool rnv_on(void) {
    return oj__env_flag("OJAS_CUDA_RNR_TABLE", true);
}

/* Are p's address and the element strides s[0..n) multiples of 16 bytes? */
static bool rnv_aligned(const void *p, const int64_t *s, int n, int64_t esz) {
    if ((uintptr_t)p % 16) return false;
    for (int i = 0; i < n; i++)
        if ((s[i] * esz) % 16) return false;
    return true;
}

/* ---------------------------------------------------------------- generic path */

/* Size of float dtype dt (f64, f32, bf16, f16). */
__device__ static __forceinline__ int rnr_esz(int dt) {
    return dt == OJ_F64 ? 8 : dt == OJ_F32 ? 4 : 2;
}

/* v rounded to float dtype dt (as oj_cu_st stores it) and read back. */
__device__ static __forceinline__ double rnr_round(double v, int dt) {
    switch (dt) {
    case OJ_F32: return (double)(float)v;
    case OJ_BF16: return (double)oj_cu_bf16_to_f32(oj_cu_f32_to_bf16((float)v));
    case OJ_F16: return (double)oj_cu_f16_to_f32(oj_cu_f32_to_f16((float)v));
    default: return v;
    }
}

/* Element offset of row n (every dim but the last, row-major) of view v. */
__device__ static __forceinline__ int64_t rnr_row_offset(const oj_cu_view &v, int64_t n) {
    int64_t off = 0;
    for (int d = v.rank - 2; d >= 0; d--) {
        const int64_t s = v.shape[d], q = n / s;
        off += (n - q * s) * v.stride[d];
        n = q;
    }
    return off;
}

// x (.., T, D) any strides, weight (D) -> out (N, D) contiguous, rstd (N);
// a warp per row, the CPU's double path (oj_cpu_rms_norm_rotary_forward)
__global__ void __launch_bounds__(RNR_THREADS) k_rnr_fwd_any(oj_cu_view x, const char *w, int wdt,
                                                             char *out, int odt, char *rstd,
                                                             int sdt, int64_t N, int64_t T,
                                                             int64_t D, double eps, int64_t pos,
                                                             double theta) {
    const int lane = (int)(threadIdx.x & 31);
    const int64_t half = D / 2, sD = x.stride[x.rank - 1];
    const int xes = rnr_esz(x.dt), oes = rnr_esz(odt), wes = rnr_esz(wdt), ses = rnr_esz(sdt);
    for (int64_t n = (int64_t)blockIdx.x * RNR_WARPS + (threadIdx.x >> 5); n < N;
         n += (int64_t)gridDim.x * RNR_WARPS) {
        const char *xr = x.p + rnr_row_offset(x, n) * xes;
        const int64_t t = n % T;
        double ss = 0.0;
        for (int64_t c = lane; c < D; c += 32) {
            const double v = oj_cu_ld(xr + c * sD * xes, x.dt);
            ss += v * v;
        }
        ss = oj_cu_warp_sum(ss);
        const double rs = 1.0 / sqrt(ss / (double)D + eps);
        char *orow = out + n * D * oes;
        for (int64_t i = lane; i < half; i += 32) {
            const double w1 = w ? oj_cu_ld(w + i * wes, wdt) : 1.0;
            const double w2 = w ? oj_cu_ld(w + (i + half) * wes, wdt) : 1.0;
            const double x1 = rnr_round(oj_cu_ld(xr + i * sD * xes, x.dt) * rs * w1, odt);
            const double x2 = rnr_round(oj_cu_ld(xr + (i + half) * sD * xes, x.dt) * rs * w2, odt);
            double c, s;
            rnr_angle(pos + t, i, D, theta, 1.0, &c, &s);
            oj_cu_st(orow + i * oes, odt, x1 * c - x2 * s);
            oj_cu_st(orow + (i + half) * oes, odt, x2 * c + x1 * s);
        }
        if (lane == 0 && rstd) oj_cu_st(rstd + n * ses, sdt, rs);
    }
}

// dy, x (.., T, D) any strides, rstd (N), weight (D) -> dx (.., T, D), its
// last dim contiguous; a warp per row in double (the CPU entry's double
// path); the rotated dy is recomputed in the second pass
__global__ void __launch_bounds__(RNR_THREADS) k_rnr_bwd_any(oj_cu_view dy, oj_cu_view x,
                                                             const char *rstd, int sdt,
                                                             const char *w, int wdt,
                                                             oj_cu_view dx, int64_t N, int64_t T,
                                                             int64_t D, int64_t pos,
                                                             double theta) {
    const int lane = (int)(threadIdx.x & 31);
    const int64_t half = D / 2, sD = x.stride[x.rank - 1], gD = dy.stride[dy.rank - 1];
    const int xes = rnr_esz(x.dt), ges = rnr_esz(dy.dt), wes = rnr_esz(wdt);
    const int ses = rnr_esz(sdt), des = rnr_esz(dx.dt), dxdt = dx.dt;
    for (int64_t n = (int64_t)blockIdx.x * RNR_WARPS + (threadIdx.x >> 5); n < N;
         n += (int64_t)gridDim.x * RNR_WARPS) {
        const char *xr = x.p + rnr_row_offset(x, n) * xes;
        const char *gr = dy.p + rnr_row_offset(dy, n) * ges;
        const int64_t t = n % T;
        const double rs = oj_cu_ld(rstd + n * ses, sdt);
        char *dr = dx.p + rnr_row_offset(dx, n) * des;
        double sgx = 0.0;
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t i = lane; i < half; i += 32) {
                const double d1 = oj_cu_ld(gr + i * gD * ges, dy.dt);
                const double d2 = oj_cu_ld(gr + (i + half) * gD * ges, dy.dt);
                double c, s;
                rnr_angle(pos + t, i, D, theta, -1.0, &c, &s);
                const double g1 = rnr_round(d1 * c - d2 * s, dy.dt);
                const double g2 = rnr_round(d2 * c + d1 * s, dy.dt);
                const double w1 = w ? oj_cu_ld(w + i * wes, wdt) : 1.0;
                const double w2 = w ? oj_cu_ld(w + (i + half) * wes, wdt) : 1.0;
                const double xh1 = oj_cu_ld(xr + i * sD * xes, x.dt) * rs;
                const double xh2 = oj_cu_ld(xr + (i + half) * sD * xes, x.dt) * rs;
                if (pass == 0) {
                    sgx += g1 * w1 * xh1;
                    sgx += g2 * w2 * xh2;
                } else {
                    oj_cu_st(dr + i * des, dxdt, rs * (g1 * w1 - xh1 * sgx));
                    oj_cu_st(dr + (i + half) * des, dxdt, rs * (g2 * w2 - xh2 * sgx));
                }
            }
            if (pass == 0) sgx = oj_cu_warp_sum(sgx) / (double)D;
        }
    }
}

/* ---------------------------------------------------------------- host */

/* The leading dims (all but T and D) of ts[0..nt) (one shape; nt <=
 * RNR_MAX_T) as two strided dims [R1, R2] (element strides s1[i], s2[i]
 * of tensor i): size-1 dims dropped, adjacent dims merged where every
 * tensor steps through them as one run. false when more than two remain. */
#define RNR_MAX_T 3 /* x, dy, dx */
static bool rnr_outer(const oj_tensor *const *ts, int nt, int64_t *R2, int64_t *s1,
                      int64_t *s2) {
    const oj_tensor *x = ts[0];
    int64_t sh[OJ_MAX_RANK], st[RNR_MAX_T][OJ_MAX_RANK];
    if (nt < 1 || nt > RNR_MAX_T) return false;
    int m = 0;
    for (int d = 0; d < x->rank - 2; d++) {
        if (x->shape[d] == 1) continue;
        bool merge = m > 0;
        for (int i = 0; i < nt && merge; i++)
            merge = st[i][m - 1] == ts[i]->stride[d] * x->shape[d];
        if (merge) {
            sh[m - 1] *= x->shape[d];
        } else {
            if (m == 2) return false;
            sh[m++] = x->shape[d];
        }
        for (int i = 0; i < nt; i++) st[i][m - 1] = ts[i]->stride[d];
    }
    *R2 = m >= 1 ? sh[m - 1] : 1;
    for (int i = 0; i < nt; i++) {
        s2[i] = m >= 1 ? st[i][m - 1] : 0;
        s1[i] = m == 2 ? st[i][0] : 0;
    }
    return true;
}

/* NPT of the fast path for D, 0 if none. */
static int rnr_npt(int64_t D) {
    return D % 64 == 0 && D >= 64 && D <= 256 ? (int)(D / 32) : 0;
}

/* The fast path's geometry: nchunk chunks of chunk rows per position. */
static void rnr_chunks(rnr_args &a) {
    static int64_t target = -1; /* OJAS_CUDA_RNR_WARPS overrides (tuning runs) */
    if (target < 0) {
        const int64_t e = oj__env_int("OJAS_CUDA_RNR_WARPS", 0);
        target = e > 0 ? e : RNR_TARGET_WARPS;
    }
    int64_t nchunk = (target + a.T - 1) / a.T;
    if (nchunk > a.R) nchunk = a.R;
    if (nchunk < 1) nchunk = 1;
    a.chunk = (a.R + nchunk - 1) / nchunk;
    a.nchunk = (a.R + a.chunk - 1) / a.chunk;
}

static unsigned rnr_blocks(int64_t warps) {
    int64_t b = (warps + RNR_WARPS - 1) / RNR_WARPS;
    return (unsigned)(b < (1 << 20) ? b : (1 << 20));
}

#define RNR_NPTS(X) X(2) X(4) X(6) X(8)

template <typename T> static void rnr_fwd_launch(const rnr_args &a, int npt) {
    const unsigned blocks = rnr_blocks(a.T * a.nchunk);
#define X(n)                                                                                 \
    if (npt == (n)) k_rnr_fwd<T, n><<<blocks, RNR_THREADS, 0, OJ_STREAM>>>(a);
    RNR_NPTS(X)
#undef X
}

template <typename T> static void rnr_bwd_launch(const rnr_args &a, int npt) {
    const unsigned blocks = rnr_blocks(a.T * a.nchunk);
#define X(n)                                                                                 \
    if (npt == (n)) k_rnr_bwd<T, n><<<blocks, RNR_THREADS, 0, OJ_STREAM>>>(a);
    RNR_NPTS(X)
#undef X
}

/* The vector path's geometry: chunks of a multiple of G rows (G rows a
 * warp instruction), about OJAS_CUDA_RNR_WARPS (default RNV_TARGET_WARPS)
 * warps in all. */
static void rnv_chunks(rnr_args &a, int G) {
    const int64_t e = oj__env_int("OJAS_CUDA_RNR_WARPS", 0);
    const int64_t target = e > 0 ? e : RNV_TARGET_WARPS;
    const int64_t groups = (a.R + G - 1) / G;
    int64_t nchunk = (target + a.T - 1) / a.T;
    if (nchunk > groups) nchunk = groups;
    if (nchunk < 1) nchunk = 1;
    a.chunk = (groups + nchunk - 1) / nchunk * G;
    a.nchunk = (a.R + a.chunk - 1) / a.chunk;
}

/* Rows a lane loads before using them (OJAS_CUDA_RNR_RR: 1, 2 (default)
 * or 4; tuning runs). */
static int rnv_rr(void) {
    const int64_t v = oj__env_int("OJAS_CUDA_RNR_RR", 2);
    return v == 1 || v == 4 ? (int)v : 2;
}

template <typename T> static void rnv_fwd_launch(rnr_args &a, const float *tab) {
    rnv_chunks(a, 16 / (int)sizeof(T));
    const unsigned b = rnr_blocks(a.T * a.nchunk);
    const int rr = rnv_rr();
    if (rr == 1) k_rnv_fwd<T, 1><<<b, RNR_THREADS, 0, OJ_STREAM>>>(a, tab);
    if (rr == 2) k_rnv_fwd<T, 2><<<b, RNR_THREADS, 0, OJ_STREAM>>>(a, tab);
    if (rr == 4) k_rnv_fwd<T, 4><<<b, RNR_THREADS, 0, OJ_STREAM>>>(a, tab);
}

template <typename T> static void rnv_bwd_launch(rnr_args &a, const float *tab) {
    rnv_chunks(a, 16 / (int)sizeof(T));
    const unsigned b = rnr_blocks(a.T * a.nchunk);
    const int rr = rnv_rr();
    if (rr == 1) k_rnv_bwd<T, 1><<<b, RNR_THREADS, 0, OJ_STREAM>>>(a, tab);
    if (rr == 2) k_rnv_bwd<T, 2><<<b, RNR_THREADS, 0, OJ_STREAM>>>(a, tab);
    if (rr == 4) k_rnv_bwd<T, 4><<<b, RNR_THREADS, 0, OJ_STREAM>>>(a, tab);
}

/* The rows of x [..., T, D] into a (R = rows / T, T, the position offset
 * and theta); returns the row count N, 0 when x is empty (nothing to do). */
static int64_t rnr_init(rnr_args *a, const oj_tensor *x, int64_t pos, double theta) {
    const int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1];
    const int64_t N = D > 0 ? oj_cuda_numel(x) / D : 0;
    if (N == 0 || T == 0) return 0;
    a->R = N / T;
    a->T = T;
    a->pos = pos;
    a->theta = theta;
    return N;
}

// x (..., T, D) any strides, weight (D), out (..., T, D), rstd (N)
oj_status oj_cuda_rms_norm_rotary_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                          const oj_tensor *x, const oj_tensor *weight, double eps,
                                          int64_t position_offset, double theta) {
    const char *op = "rms_norm_rotary";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK ||
        oj_cuda_need_contig(eng, rstd, op, "rstd") != OJ_OK ||
        oj_cuda_need_contig(eng, weight, op, "weight") != OJ_OK)
        return oj_last_status(eng);
    rnr_args a = {};
    const int64_t N = rnr_init(&a, x, position_offset, theta), T = a.T, D = x->shape[x->rank - 1];
    if (N == 0) return OJ_OK;
    a.eps = eps;
    const int npt = rnr_npt(D);
    int64_t s1, s2;
    if (npt && oj_cu_is_f16ish(x->dtype) && out->dtype == x->dtype &&
        (!weight || weight->dtype == x->dtype) && (!rstd || rstd->dtype == OJ_F32) &&
        x->stride[x->rank - 1] == 1 && rnr_outer(&x, 1, &a.R2, &s1, &s2)) {
        a.x = oj_cuda_ptr(x);
        a.w = weight ? oj_cuda_ptr(weight) : NULL;
        a.out = oj_cuda_ptr(out);
        a.rstd_out = rstd ? oj_cuda_ptr(rstd) : NULL;
        a.sx1 = s1;
        a.sx2 = s2;
        a.sxT = x->stride[x->rank - 2];
        const int64_t es = oj_dtype_size(x->dtype), xs[3] = {s1, s2, a.sxT};
        const float *tab = D == RNV_D && position_offset >= 0 && rnv_on() && rnv_aligned(a.x, xs, 3, es) &&
                                   rnv_aligned(a.w, NULL, 0, es) && rnv_aligned(a.out, NULL, 0, es)
                               ? rnv_table(eng, D, theta, position_offset + T)
                               : NULL;
        if (tab) {
            OJ_CU_FLOAT_TYPE(x->dtype, T_, rnv_fwd_launch<T_>(a, tab));
            return oj_cuda_check(eng, "k_rnv_fwd");
        }
        rnr_chunks(a);
        OJ_CU_FLOAT_TYPE(x->dtype, T_, rnr_fwd_launch<T_>(a, npt));
        return oj_cuda_check(eng, op);
    }
    k_rnr_fwd_any<<<rnr_blocks(N), RNR_THREADS, 0, OJ_STREAM>>>(
        oj_cu_view_of(x), weight ? oj_cuda_ptr(weight) : NULL, weight ? (int)weight->dtype : 0,
        oj_cuda_ptr(out), (int)out->dtype, rstd ? oj_cuda_ptr(rstd) : NULL,
        rstd ? (int)rstd->dtype : 0, N, T, D, eps, position_offset, theta);
    return oj_cuda_check(eng, op);
}

// dy (..., T, D) any strides, x (..., T, D) any strides, rstd (N), weight (D) -> dx
oj_status oj_cuda_rms_norm_rotary_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *dy,
                                           const oj_tensor *x, const oj_tensor *rstd,
                                           const oj_tensor *weight, int64_t position_offset,
                                           double theta) {
    const char *op = "rms_norm_rotary";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, rstd, op, "rstd") != OJ_OK ||
        oj_cuda_need_contig(eng, weight, op, "weight") != OJ_OK)
        return oj_last_status(eng);
    if (dx->rank != x->rank || (dx->shape[dx->rank - 1] > 1 && dx->stride[dx->rank - 1] != 1))
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: dx must have x's rank and a contiguous last dim", op);
    rnr_args a = {};
    const int64_t N = rnr_init(&a, x, position_offset, theta), T = a.T, D = x->shape[x->rank - 1];
    if (N == 0) return OJ_OK;
    const int npt = rnr_npt(D);
    const oj_tensor *ts[3] = {x, dy, dx};
    int64_t s1[3], s2[3];
    if (npt && oj_cu_is_f16ish(x->dtype) && dy->dtype == x->dtype && dx->dtype == x->dtype &&
        (!weight || weight->dtype == x->dtype) && rstd->dtype == OJ_F32 &&
        x->stride[x->rank - 1] == 1 && dy->stride[dy->rank - 1] == 1 &&
        rnr_outer(ts, 3, &a.R2, s1, s2)) {
        a.x = oj_cuda_ptr(x);
        a.dy = oj_cuda_ptr(dy);
        a.w = weight ? oj_cuda_ptr(weight) : NULL;
        a.rstd_in = oj_cuda_ptr(rstd);
        a.dx = oj_cuda_ptr(dx);
        a.sx1 = s1[0];
        a.sx2 = s2[0];
        a.sxT = x->stride[x->rank - 2];
        a.sg1 = s1[1];
        a.sg2 = s2[1];
        a.sgT = dy->stride[dy->rank - 2];
        a.sd1 = s1[2];
        a.sd2 = s2[2];
        a.sdT = dx->stride[dx->rank - 2];
        const int64_t es = oj_dtype_size(x->dtype);
        const int64_t xs[3] = {s1[0], s2[0], a.sxT}, gs[3] = {s1[1], s2[1], a.sgT},
                      ds[3] = {s1[2], s2[2], a.sdT};
        const float *tab = D == RNV_D && position_offset >= 0 && rnv_on() && rnv_aligned(a.x, xs, 3, es) &&
                                   rnv_aligned(a.dy, gs, 3, es) && rnv_aligned(a.dx, ds, 3, es) &&
                                   rnv_aligned(a.w, NULL, 0, es)
                               ? rnv_table(eng, D, theta, position_offset + T)
                               : NULL;
        if (tab) {
            OJ_CU_FLOAT_TYPE(x->dtype, T_, rnv_bwd_launch<T_>(a, tab));
            return oj_cuda_check(eng, "k_rnv_bwd");
        }
        rnr_chunks(a);
        OJ_CU_FLOAT_TYPE(x->dtype, T_, rnr_bwd_launch<T_>(a, npt));
        return oj_cuda_check(eng, op);
    }
    k_rnr_bwd_any<<<rnr_blocks(N), RNR_THREADS, 0, OJ_STREAM>>>(
        oj_cu_view_of(dy), oj_cu_view_of(x), oj_cuda_ptr(rstd), (int)rstd->dtype,
        weight ? oj_cuda_ptr(weight) : NULL, weight ? (int)weight->dtype : 0, oj_cu_view_of(dx),
        N, T, D, position_offset, theta);
    return oj_cuda_check(eng, op);
}
