/* CUDA layer norm (Ba et al. 2016) and RMS norm (Zhang & Sennrich 2019)
 * over the last dim, forward and backward, and the residual add fused into
 * the forward (add_norm_forward, at the end). f32/bf16/f16 rows take the
 * fast path (float compute, values in registers; see below); f64 (and
 * C > 8192) keep the kernels first in this file, computed in double like
 * the CPU kernels (cpu_nn_norm.c): one block per row, row sums reduce in a
 * fixed tree. Weight/bias gradients sum over rows in fixed chunks of rows
 * (partials per chunk, then the chunks in order), so every result depends
 * on the shape only: deterministic in every mode. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

struct norm_args {
    const char *x, *w, *b, *dy, *mean, *rstd;
    char *out, *mean_out, *rstd_out, *dx;
    const char *r; /* add_norm: the residual, added to x into sum, which is normalised */
    char *sum;
    /* fast path, T float only: olow 1 / 2 writes out (forward) or dxl
     * (backward) as bf16 / f16 instead of T; dres (T, NULL: none) is added
     * to the backward's dx */
    int olow;
    const char *dres;
    char *dxl;
    int xdt, wdt, bdt, gdt, sdt, odt, dxdt, xes, wes, bes, ges, ses, oes, dxes;
    int64_t N, C;
    double eps;
    bool rms;
};

static int esz(const oj_tensor *t) { return t ? (int)oj_dtype_size(t->dtype) : 0; }

static int row_threads(int64_t C) {
    int t = 32;
    while (t < 256 && t < C) t *= 2;
    return t;
}

__device__ static __forceinline__ double wval(const norm_args &a, int64_t c) {
    return a.w ? oj_cu_ld(a.w + c * a.wes, a.wdt) : 1.0;
}
__device__ static __forceinline__ double bval(const norm_args &a, int64_t c) {
    return a.b ? oj_cu_ld(a.b + c * a.bes, a.bdt) : 0.0;
}

// x (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
__global__ void k_norm_forward(norm_args a) {
    __shared__ double sh[32];
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        const char *xr = a.x + n * a.C * a.xes;
        double m = 0.0, rs;
        if (a.rms) {
            double ss = 0.0;
            for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
                double v = oj_cu_ld(xr + c * a.xes, a.xdt);
                ss += v * v;
            }
            ss = oj_cu_block_sum(ss, sh);
            rs = 1.0 / sqrt(ss / (double)a.C + a.eps);
        } else {
            double s = 0.0;
            for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) s += oj_cu_ld(xr + c * a.xes, a.xdt);
            m = oj_cu_block_sum(s, sh) / (double)a.C;
            double v2 = 0.0;
            for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
                double d = oj_cu_ld(xr + c * a.xes, a.xdt) - m;
                v2 += d * d;
            }
            double var = oj_cu_block_sum(v2, sh) / (double)a.C;
            rs = 1.0 / sqrt(var + a.eps);
        }
        char *orow = a.out + n * a.C * a.oes;
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
            double v = oj_cu_ld(xr + c * a.xes, a.xdt);
            double y = a.rms ? v * rs * wval(a, c) : (v - m) * rs * wval(a, c) + bval(a, c);
            oj_cu_st(orow + c * a.oes, a.odt, y);
        }
        if (threadIdx.x == 0) {
            if (a.mean_out) oj_cu_st(a.mean_out + n * a.ses, a.sdt, m);
            if (a.rstd_out) oj_cu_st(a.rstd_out + n * a.ses, a.sdt, rs);
        }
    }
}

// dy (N,C), x (N,C), mean (N), rstd (N), weight (C) -> dx (N,C)
__global__ void k_norm_backward_dx(norm_args a) {
    __shared__ double sh[32];
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        const char *xr = a.x + n * a.C * a.xes, *gr = a.dy + n * a.C * a.ges;
        double m = a.rms ? 0.0 : oj_cu_ld(a.mean + n * a.ses, a.sdt);
        double rs = oj_cu_ld(a.rstd + n * a.ses, a.sdt);
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
            double xh = (oj_cu_ld(xr + c * a.xes, a.xdt) - m) * rs;
            double g = oj_cu_ld(gr + c * a.ges, a.gdt) * wval(a, c);
            sg += g;
            sgx += g * xh;
        }
        sg = a.rms ? 0.0 : oj_cu_block_sum(sg, sh) / (double)a.C;
        sgx = oj_cu_block_sum(sgx, sh) / (double)a.C;
        char *dr = a.dx + n * a.C * a.dxes;
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
            double xh = (oj_cu_ld(xr + c * a.xes, a.xdt) - m) * rs;
            double g = oj_cu_ld(gr + c * a.ges, a.gdt) * wval(a, c);
            oj_cu_st(dr + c * a.dxes, a.dxdt, rs * (g - sg - xh * sgx));
        }
    }
}

/* part [nchunks, 2, C]: sums over rows of chunk ch of dy * xhat and dy. */
__global__ void k_norm_wgrad_partial(norm_args a, int64_t chunk, double *part) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t ch = blockIdx.y;
    if (c >= a.C) return;
    int64_t n0 = ch * chunk, n1 = n0 + chunk < a.N ? n0 + chunk : a.N;
    double sw = 0.0, sb = 0.0;
    for (int64_t n = n0; n < n1; n++) {
        double m = a.rms ? 0.0 : oj_cu_ld(a.mean + n * a.ses, a.sdt);
        double rs = oj_cu_ld(a.rstd + n * a.ses, a.sdt);
        double xh = (oj_cu_ld(a.x + (n * a.C + c) * a.xes, a.xdt) - m) * rs;
        double g = oj_cu_ld(a.dy + (n * a.C + c) * a.ges, a.gdt);
        sw += g * xh;
        sb += g;
    }
    part[(ch * 2) * a.C + c] = sw;
    part[(ch * 2 + 1) * a.C + c] = sb;
}

__global__ void k_norm_wgrad_final(const double *part, int64_t nchunks, int64_t C, char *dw,
                                   int dwdt, char *db, int dbdt) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sw = 0.0, sb = 0.0;
    for (int64_t ch = 0; ch < nchunks; ch++) {
        sw += part[(ch * 2) * C + c];
        sb += part[(ch * 2 + 1) * C + c];
    }
    int wes = dwdt == OJ_F64 ? 8 : (dwdt == OJ_F32 ? 4 : 2);
    int bes = dbdt == OJ_F64 ? 8 : (dbdt == OJ_F32 ? 4 : 2);
    if (dw) oj_cu_st(dw + c * wes, dwdt, sw);
    if (db) oj_cu_st(db + c * bes, dbdt, sb);
}

static void rows_of(const oj_tensor *x, int64_t *N, int64_t *C) {
    *C = x->rank ? x->shape[x->rank - 1] : 1;
    *N = *C ? oj_cuda_numel(x) / *C : 0;
}

static unsigned row_blocks(int64_t N) { return (unsigned)(N < (1 << 20) ? N : (1 << 20)); }

/* ---------------------------------------------------------------- fast path
 * f32/bf16/f16 rows (every float tensor of x's dtype, stats f32), C up to
 * 8192: TPR threads per row, a warp (TPR 32) for C <= 1024, a block of 256
 * above (larger blocks would spill the backward's 4 x NPT registers). Each
 * thread keeps the NPT values c = tid + TPR k of its row in registers, so
 * x (and dy) are read once; compute is float (rstd from the float variance
 * in double; a row whose float sums overflow, finite |x| from ~1.8e19, takes
 * its sums in double, and x - m that overflows a float is taken in double:
 * norm_xh); row sums reduce by warp shuffles (xor butterfly) and, across
 * warps, through shared memory in warp order: a fixed order, so every run
 * gives the same bits. f64, C > 8192 and N = 0 keep the double kernels
 * above. The forward runs four rows per 128-thread block in warp mode.
 *
 * The backward runs blocks of 256 threads: NORM_BWD_WARPS = 8 row workers
 * (warps) in warp mode, one (the block) in block mode. Rows are cut into
 * G groups, group g holding rows g, g + G, g + 2 G, ... (interleaved, so
 * the blocks in flight sweep memory together); one block per group, its
 * worker w taking the group's rows w, w + 8, w + 16, ... in order. Each
 * worker issues a row's 2 NPT loads before using any (loads under a
 * branch each waited for the one before: the old kernel's 0.8 TB/s). With
 * weight/bias gradients each worker adds dy * xhat and dy of its rows into
 * per-thread registers; the block adds its 8 warps' sums in warp order
 * through shared memory into one partial row per group, part [G, P, C]
 * (P = 2 with the bias gradient, 1 for RMS norm or without it);
 * k_norm_wgrad_combine then sums the partials in a fixed order (32 slices
 * of consecutive groups per column, each in group order and in double,
 * then the slices in order). No atomics. G depends on the shape only
 * (norm_groups): in warp mode min(ceil(N / 8), 2048 / NPT clamped to
 * [256, 1024]), about one wave of blocks, with or without the gradients
 * (for dx alone a few rows per warp measured faster than one: 39 vs 46 us
 * for the QK-norm); in block mode 512 with the gradients, else N (a block
 * per row).
 *
 * Bytes (N x C, element size s): forward reads x and writes out (2 s N C,
 * plus w, b from cache); backward reads x, dy, writes dx (3 s N C) plus
 * the partials (4 P G C written, then read). nanolab-124m / gpt2-124m
 * training shapes, f32 (norms under bf16 autocast), measured on the H200
 * with Nsight Compute (device time per call; the old kernel ~190-220 us):
 *   RMS norm with weight, N 16384, C 768 (NPT 24): G 256 blocks of 64
 *     rows, 8 per warp; 151 MB + 0.8 MB of partials: 38 us + 4 us combine.
 *   layer norm with weight and bias, same shape: G 256, P 2; 151 MB +
 *     1.6 MB: 39 us + 5 us.
 *   QK RMS norm without weight, N 98304, C 128 (NPT 4): G 512 blocks of
 *     192 rows, 24 per warp, no partials; 151 MB: 39 us.
 * That is ~3.9 TB/s for the main kernel (ncu: ~75% of peak DRAM
 * throughput). Block mode is slower: C 1500 (NPT 8, 27% of the lanes
 * idle) ran 121 us for 295 MB, C 4096 198 us for 805 MB. */

// x (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
// PRE: w and b loaded with x before the row's sums (few rows: a decode
// step's latency); else when each output is written (many rows: 72 more
// registers per thread cost occupancy, 33 -> 58 us for 16384 x 768 f32)
// ADD (add_norm): r (N,C) of TR loaded with x, sum (N,C) = x + r written
// in T, and the row normalised is sum's values as stored (rounded to T):
// the bits of the binary add kernel then this kernel on sum.
// FULL (ADD, warp mode, C = 32 NPT for NPT 16 and 24: gpt2's and nanolab's
// residual stream, C 768): the same arithmetic in the same order (same
// bits), with row offsets and column bounds known at compile time (the
// loads take immediate offsets, no clamps), weight and bias staged in
// shared memory, and a row whose float sums overflow redone from sum by
// norm_row_wide, so ptxas fits 64 registers (8 blocks of 128 per SM, 50%
// occupancy; the general instantiation takes 128, 25%: ncu 70 us for
// gpt2's 16384 x 768 f32 + bf16 at 151 MB). OJAS_CUDA_NORM4=0 turns it off.
// RR: rows per warp at once in warp mode (their loads in flight together):
// short rows (NPT <= 8) keep a warp's bytes in flight high enough; one row
// of 64 bf16 per warp left the QK-norm latency-bound (78 us for 196,608
// rows on the H200 against ~13 us of traffic)
template <int NPT, int TPR> struct norm_rr {
    static constexpr int v = TPR != 32 ? 1 : NPT <= 4 ? 4 : NPT <= 8 ? 2 : 1;
};

/* FULL's blocks per SM (launch bounds): 8 of 128 threads caps ptxas at 64
 * registers, 50% occupancy (the general kernel's 128 registers: 25%). */
#define NORM_FULL_BLOCKS 8

/* Double sum of v over the TPR threads of a row (oj_cu_row_sumf's
 * pattern; every thread of the row must call it). */
template <int TPR> __device__ static __forceinline__ double row_sumd(double v, double *sh) {
    v = oj_cu_warp_sum(v);
    if (TPR == 32) return v;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads(); /* sh may still be read by the previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    return oj_cu_warp_sum(lane < TPR / 32 ? sh[lane] : 0.0);
}

/* xhat = (x - m) rs in float (each step rounded); where the float
 * difference overflows (finite values of both signs near FLT_MAX), in
 * double rounded once, so xhat stays finite. */
__device__ static __forceinline__ float norm_xh(float x, float m, float rs) {
    float d = x - m;
    if (isfinite(d) || !isfinite(x) || !isfinite(m)) return __fmul_rn(d, rs);
    return (float)(((double)x - (double)m) * (double)rs);
}

/* A row of k_norm_fwd_fast's FULL add + norm (warp per row, C = 32 NPT)
 * whose float sums overflowed: the general kernel's double sums and its
 * outputs, the values re-read from sum as stored (the caller's registers
 * hold none across the call, so FULL keeps to 64). Every lane calls it. */
template <typename T, int NPT>
__device__ __noinline__ void norm_row_wide(const char *sum, char *out, const char *wp,
                                           const char *bp, char *mean_out, char *rstd_out,
                                           int64_t n, int tid, double eps, bool rms, int olow,
                                           double *shd) {
    constexpr int TPR = 32;
    constexpr int64_t C = (int64_t)NPT * TPR;
    const T *sr = (const T *)sum + n * C, *w = (const T *)wp, *b = (const T *)bp;
    double md = 0.0, d2 = 0.0;
    if (!rms) {
        for (int k = 0; k < NPT; k++) md += (double)oj_cu_tof(sr[tid + TPR * k]);
        md = row_sumd<TPR>(md, shd) / (double)C;
    }
    for (int k = 0; k < NPT; k++) {
        double d = (double)oj_cu_tof(sr[tid + TPR * k]) - md;
        d2 += d * d;
    }
    const float m = (float)md;
    const float rs = (float)(1.0 / sqrt(row_sumd<TPR>(d2, shd) / (double)C + eps));
    for (int k = 0; k < NPT; k++) {
        const int64_t c = tid + TPR * k;
        float y = norm_xh(oj_cu_tof(sr[c]), m, rs);
        if (w) y = __fmul_rn(y, oj_cu_tof(w[c]));
        if (b) y = __fadd_rn(y, oj_cu_tof(b[c]));
        if (std::is_same<T, float>::value && olow)
            ((uint16_t *)out)[n * C + c] = olow == 1 ? oj_cu_f32_to_bf16(y) : oj_cu_f32_to_f16(y);
        else
            ((T *)out)[n * C + c] = oj_cu_fromf<T>(y);
    }
    if (tid == 0) {
        if (mean_out) ((float *)mean_out)[n] = m;
        if (rstd_out) ((float *)rstd_out)[n] = rs;
    }
}

template <typename T, int NPT, int TPR, bool PRE, typename TR = T, bool ADD = false,
          bool FULL = false>
__global__ void __launch_bounds__(TPR == 32 ? 128 : TPR, FULL ? NORM_FULL_BLOCKS : 0)
    k_norm_fwd_fast(norm_args a) {
    constexpr int RR = norm_rr<NPT, TPR>::v;
    __shared__ float sh[32];
    __shared__ double shd[32];
    const int tid = TPR == 32 ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
    const int64_t rpb = TPR == 32 ? blockDim.x / 32 : 1;
    const int64_t r0 = (int64_t)blockIdx.x * rpb + (TPR == 32 ? threadIdx.x / 32 : 0);
    const int64_t C = FULL ? (int64_t)NPT * TPR : a.C; /* FULL: a.C is NPT TPR */
    const T *w = (const T *)a.w, *b = (const T *)a.b;
    /* FULL: the weight and bias staged in shared memory (loaded per
     * output from global memory, ptxas hoisted all 2 NPT loads above the
     * row's sums: 128-164 registers) */
    __shared__ float wsh[FULL ? NPT * TPR : 1], bsh[FULL ? NPT * TPR : 1];
    if constexpr (FULL) {
        for (int i = (int)threadIdx.x; i < NPT * TPR; i += (int)blockDim.x) {
            wsh[i] = w ? oj_cu_tof(w[i]) : 1.0f;
            bsh[i] = b ? oj_cu_tof(b[i]) : 0.0f;
        }
        __syncthreads();
    }
    float wv[NPT], bv[NPT];
    if (PRE) {
#pragma unroll
        for (int k = 0; k < NPT; k++) {
            int64_t c = tid + (int64_t)TPR * k, cc = c < C ? c : C - 1;
            wv[k] = w ? oj_cu_tof(w[cc]) : 1.0f;
            bv[k] = b ? oj_cu_tof(b[cc]) : 0.0f;
        }
    }
    for (int64_t g = r0; g * RR < a.N; g += (int64_t)gridDim.x * rpb) {
        /* rows g RR .. g RR + RR - 1 (uniform over the warp); every load
         * of them issued before any use: a load under `c < C` waited for
         * the one before it (one row, as in a decode step, took 14 us on
         * the H200 as a chain of 72 loads) */
        float v[RR][NPT], rv[RR][NPT];
#pragma unroll
        for (int i = 0; i < RR; i++) {
            const int64_t n = g * RR + i < a.N ? g * RR + i : a.N - 1;
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                int64_t c = tid + (int64_t)TPR * k, cc = c < C ? c : C - 1;
                v[i][k] = oj_cu_tof(((const T *)a.x + n * C)[cc]);
                if (ADD) rv[i][k] = oj_cu_tof(((const TR *)a.r + n * C)[cc]);
            }
        }
#pragma unroll
        for (int i = 0; i < RR; i++) {
            const int64_t n = g * RR + i;
            if (n >= a.N) break; /* uniform over the warp (the block, TPR > 32) */
            if constexpr (ADD) { /* as the binary kernel: float add, rounded once to T */
                T *srow = (T *)a.sum + n * C;
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    const int64_t c = tid + (int64_t)TPR * k;
                    const T st = oj_cu_fromf<T>(__fadd_rn(v[i][k], rv[i][k]));
                    v[i][k] = oj_cu_tof(st);
                    if (c < C) srow[c] = st;
                }
            }
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                if (tid + (int64_t)TPR * k >= C) v[i][k] = 0.0f;
                s += a.rms ? v[i][k] * v[i][k] : v[i][k];
            }
            s = oj_cu_row_sumf<TPR>(s, sh);
            float m = 0.0f, var;
            if (a.rms) {
                var = s / (float)C;
            } else {
                m = s / (float)C;
                float d2 = 0.0f;
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    int64_t c = tid + (int64_t)TPR * k;
                    float d = v[i][k] - m;
                    if (c < C) d2 += d * d;
                }
                var = oj_cu_row_sumf<TPR>(d2, sh) / (float)C;
            }
            float rs = (float)(1.0 / sqrt((double)var + a.eps));
            if constexpr (FULL) {
                if (!(isfinite(m) && isfinite(var))) { /* uniform over the warp */
                    norm_row_wide<T, NPT>(a.sum, a.out, a.w, a.b, a.mean_out, a.rstd_out, n,
                                          tid, a.eps, a.rms, a.olow, shd);
                    continue;
                }
                /* var finite: every x - m was (its square was summed), so
                 * norm_xh's double branch cannot be taken */
                T *orow = (T *)a.out + n * C;
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    const int c = tid + TPR * k;
                    float y = __fmul_rn(v[i][k] - m, rs);
                    if (w) y = __fmul_rn(y, wsh[c]);
                    if (b) y = __fadd_rn(y, bsh[c]);
                    if (std::is_same<T, float>::value && a.olow)
                        ((uint16_t *)a.out)[n * C + c] = a.olow == 1 ? oj_cu_f32_to_bf16(y)
                                                                     : oj_cu_f32_to_f16(y);
                    else
                        orow[c] = oj_cu_fromf<T>(y);
                }
                if (tid == 0) {
                    if (a.mean_out) ((float *)a.mean_out)[n] = m;
                    if (a.rstd_out) ((float *)a.rstd_out)[n] = rs;
                }
                continue;
            }
            if (!(isfinite(m) && isfinite(var))) {
                /* uniform over the row: a float sum overflowed (finite |x|
                 * from ~1.8e19; the CPU redoes such rows in double too):
                 * the row's sums in double, which cannot overflow */
                double md = 0.0, d2 = 0.0;
                if (!a.rms) {
#pragma unroll
                    for (int k = 0; k < NPT; k++) md += (double)v[i][k]; /* 0 past C */
                    md = row_sumd<TPR>(md, shd) / (double)C;
                }
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    double d = (double)v[i][k] - md;
                    if (tid + (int64_t)TPR * k < C) d2 += d * d;
                }
                m = (float)md;
                rs = (float)(1.0 / sqrt(row_sumd<TPR>(d2, shd) / (double)C + a.eps));
            }
            T *orow = (T *)a.out + n * C;
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                int64_t c = tid + (int64_t)TPR * k;
                if (c < C) { /* each step rounded, as the CPU's float code (no fma) */
                    float y = norm_xh(v[i][k], m, rs);
                    if (w) y = __fmul_rn(y, PRE ? wv[k] : oj_cu_tof(w[c]));
                    if (b) y = __fadd_rn(y, PRE ? bv[k] : oj_cu_tof(b[c]));
                    if (std::is_same<T, float>::value && a.olow) /* f32 rounded once, as copy */
                        ((uint16_t *)a.out)[n * C + c] = a.olow == 1 ? oj_cu_f32_to_bf16(y)
                                                                     : oj_cu_f32_to_f16(y);
                    else
                        orow[c] = oj_cu_fromf<T>(y);
                }
            }
            if (tid == 0) {
                if (a.mean_out) ((float *)a.mean_out)[n] = m;
                if (a.rstd_out) ((float *)a.rstd_out)[n] = rs;
            }
        }
    }
}

/* Row workers (warps) per backward block in warp mode. */
#define NORM_BWD_WARPS 8

// dy (N,C), x (N,C), mean (N), rstd (N), weight (C) -> dx (N,C) (a.dx may
// be NULL), part [G, P, C] (NULL: no weight/bias gradient; row 0 of a group
// sums dy * xhat, row 1, when P = 2, dy) for G interleaved groups of rows.
// Blocks of 256 threads (W row workers), one group per block.
// dy of TG: T, or bf16/f16 when T is float (the gradient of a low out).
// With a.dres (T) each dx is dres + dx (a float add, rounded once: the
// binary add kernel's bits), with a.olow dx is also written rounded to
// bf16/f16 into a.dxl (the copy kernel's bits).
template <typename T, typename TG, int NPT, int TPR>
__global__ void __launch_bounds__(256, NPT <= 24 ? 2 : 1)
    k_norm_bwd_fast(norm_args a, float *part, int P, int64_t G) {
    constexpr int W = TPR == 32 ? NORM_BWD_WARPS : 1;
    constexpr int CW = NPT * TPR; /* columns a worker holds */
    __shared__ float sh[32];
    __shared__ float ws[CW];                      /* weight (1 without), columns of a worker */
    __shared__ float red[TPR == 32 ? W * CW : 1]; /* red [W, CW]: the warps' partial rows */
    const int tid = TPR == 32 ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
    const int wk = TPR == 32 ? (int)(threadIdx.x >> 5) : 0;
    const int64_t C = a.C, N = a.N;
    const T *w = (const T *)a.w;
    for (int i = (int)threadIdx.x; i < CW; i += (int)blockDim.x)
        ws[i] = w && i < C ? oj_cu_tof(w[i]) : 1.0f;
    __syncthreads();
    /* g, P and part are uniform over the block: every thread meets every barrier */
    for (int64_t g = blockIdx.x; g < G; g += gridDim.x) {
        float pw[NPT], pb[NPT];
#pragma unroll
        for (int k = 0; k < NPT; k++) pw[k] = pb[k] = 0.0f;
        for (int64_t n = g + G * wk; n < N; n += G * W) {
            const T *xr = (const T *)a.x + n * C;
            const TG *gr = (const TG *)a.dy + n * C;
            const float m = a.rms ? 0.0f : ((const float *)a.mean)[n];
            const float rs = ((const float *)a.rstd)[n];
            /* the row's 2 NPT loads first, so they are in flight together
             * (loads under a branch each waited for the one before: 4x
             * slower, measured); full rows (C = NPT TPR) need no predicate */
            float xh[NPT], gw[NPT];
            if (C == CW) {
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    xh[k] = oj_cu_tof(xr[tid + TPR * k]);
                    gw[k] = oj_cu_tof(gr[tid + TPR * k]);
                }
            } else {
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    const int64_t c = tid + (int64_t)TPR * k;
                    xh[k] = c < C ? oj_cu_tof(xr[c]) : 0.0f;
                    gw[k] = c < C ? oj_cu_tof(gr[c]) : 0.0f; /* past C: dy = 0 adds nothing below */
                }
            }
            float sg = 0.0f, sgx = 0.0f;
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                const float dy = gw[k];
                xh[k] = norm_xh(xh[k], m, rs);
                gw[k] = dy * ws[tid + TPR * k];
                pw[k] += dy * xh[k];
                pb[k] += dy;
                sg += gw[k];
                sgx += gw[k] * xh[k];
            }
            if (a.dx == NULL) continue;
            sg = a.rms ? 0.0f : oj_cu_row_sumf<TPR>(sg, sh) / (float)C;
            sgx = oj_cu_row_sumf<TPR>(sgx, sh) / (float)C;
            T *dr = (T *)a.dx + n * C;
            if (a.dres == NULL && a.olow == 0) {
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    int64_t c = tid + (int64_t)TPR * k;
                    if (c < C) dr[c] = oj_cu_fromf<T>(rs * (gw[k] - sg - xh[k] * sgx));
                }
                continue;
            }
            /* dx into gw, rounded to T (the value the unfused kernel
             * stores), then the row's dres loads together into xh */
#pragma unroll
            for (int k = 0; k < NPT; k++)
                gw[k] = oj_cu_tof(oj_cu_fromf<T>(rs * (gw[k] - sg - xh[k] * sgx)));
            if (a.dres) {
                const T *rr = (const T *)a.dres + n * C;
                if (C == CW) {
#pragma unroll
                    for (int k = 0; k < NPT; k++) xh[k] = oj_cu_tof(rr[tid + TPR * k]);
                } else {
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        const int64_t c = tid + (int64_t)TPR * k;
                        xh[k] = c < C ? oj_cu_tof(rr[c]) : 0.0f;
                    }
                }
#pragma unroll
                for (int k = 0; k < NPT; k++)
                    gw[k] = oj_cu_tof(oj_cu_fromf<T>(__fadd_rn(xh[k], gw[k])));
            }
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                int64_t c = tid + (int64_t)TPR * k;
                if (c < C) {
                    dr[c] = oj_cu_fromf<T>(gw[k]);
                    if (std::is_same<T, float>::value && a.olow)
                        ((uint16_t *)a.dxl)[n * C + c] = a.olow == 1 ? oj_cu_f32_to_bf16(gw[k])
                                                                     : oj_cu_f32_to_f16(gw[k]);
                }
            }
        }
        if (part == NULL) continue;
        float *pr = part + g * P * C;
        if constexpr (TPR == 32) {
            /* the W warps' rows, added in warp order by column */
            for (int p = 0; p < P; p++) {
                __syncthreads(); /* red may still be read (the last p or group) */
#pragma unroll
                for (int k = 0; k < NPT; k++) red[wk * CW + tid + 32 * k] = p ? pb[k] : pw[k];
                __syncthreads();
                for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
                    float s = red[c];
#pragma unroll
                    for (int i = 1; i < W; i++) s += red[i * CW + c];
                    pr[p * C + c] = s;
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < NPT; k++) {
                int64_t c = tid + (int64_t)TPR * k;
                if (c < C) {
                    pr[c] = pw[k];
                    if (P == 2) pr[C + c] = pb[k];
                }
            }
        }
    }
}

/* dweight[c] / dbias[c] = sum over groups of part [G, P, C] (P = 1: no
 * dbias rows, db NULL): block (32, 32) per 32 columns; slice s sums groups
 * [s q, (s + 1) q) in order in double, then slice 0 adds the 32 slices in
 * order. */
template <typename T>
__global__ void __launch_bounds__(1024) k_norm_wgrad_combine(const float *part, int P, int64_t G,
                                                              int64_t C, T *dw, T *db) {
    __shared__ double sw[32][32], sb[32][32];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    const int64_t q = (G + 31) / 32;
    double w = 0.0, b = 0.0;
    if (c < C) {
        const int64_t g0 = threadIdx.y * q, g1 = g0 + q < G ? g0 + q : G;
        const float *pc = part + c;
#pragma unroll 4
        for (int64_t gi = g0; gi < g1; gi++) {
            w += (double)pc[gi * P * C];
            if (P == 2) b += (double)pc[gi * P * C + C];
        }
    }
    sw[threadIdx.y][threadIdx.x] = w;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        w = 0.0;
        b = 0.0;
        for (int s = 0; s < 32; s++) {
            w += sw[s][threadIdx.x];
            b += sb[s][threadIdx.x];
        }
        if (dw) dw[c] = oj_cu_fromf<T>((float)w);
        if (db) db[c] = oj_cu_fromf<T>((float)b);
    }
}

/* (NPT, TPR) configurations, smallest first. */
#define NORM_CFGS(X)                                                                         \
    X(1, 32) X(4, 32) X(8, 32) X(16, 32) X(24, 32) X(32, 32) X(8, 256) X(16, 256) X(32, 256)

/* TPR of the smallest configuration that holds C, 0 if none. */
static int norm_cfg(int64_t C, int *npt) {
    int tpr = 0;
#define X(n, t)                                                                              \
    if (tpr == 0 && C <= (int64_t)(n) * (t)) {                                               \
        tpr = t;                                                                             \
        *npt = n;                                                                            \
    }
    NORM_CFGS(X)
#undef X
    return tpr;
}

/* OJAS_CUDA_NORM4 (read at each call): 0 keeps full rows of the add + norm
 * forward on the general kernel (comparisons); unset or 1 takes FULL. */
static bool oj_cuda_norm4(void) {
    return oj__env_flag("OJAS_CUDA_NORM4", true);
}

template <typename T, typename TR = T, bool ADD = false>
static void norm_fwd_fast_launch(const norm_args &a, int npt, int tpr) {
    unsigned threads = tpr == 32 ? 128u : (unsigned)tpr;
#define X(n, t)                                                                              \
    if (npt == (n) && tpr == (t)) {                                                          \
        const int64_t per = (t == 32 ? 4 : 1) * norm_rr<n, t>::v; /* rows per block */       \
        const int64_t nb = (a.N + per - 1) / per;                                            \
        const unsigned blocks = (unsigned)(nb < (1 << 20) ? nb : (1 << 20));                 \
        constexpr bool full = ADD && t == 32 && n >= 16 && n <= 24; /* FULL exists */      \
        if (a.N <= 64)                                                                       \
            k_norm_fwd_fast<T, n, t, true, TR, ADD><<<blocks, threads, 0, OJ_STREAM>>>(a);    \
        else if (full && a.C == (int64_t)(n) * (t) && oj_cuda_norm4())                      \
            k_norm_fwd_fast<T, n, t, false, TR, ADD, full>                                   \
                <<<blocks, threads, 0, OJ_STREAM>>>(a);                                      \
        else                                                                                 \
            k_norm_fwd_fast<T, n, t, false, TR, ADD><<<blocks, threads, 0, OJ_STREAM>>>(a);   \
    }
    NORM_CFGS(X)
#undef X
}

/* The backward's number of groups (see the comment above the fast path):
 * depends on N, C (through npt) and whether partials are wanted only. */
static int64_t norm_groups(int64_t N, int npt, int tpr, bool wgrad) {
    int64_t workers = tpr == 32 ? NORM_BWD_WARPS : 1;
    int64_t most = (N + workers - 1) / workers; /* one row per worker */
    int64_t target = most;
    if (tpr == 32) {
        target = 2048 / npt;
        target = target < 256 ? 256 : (target > 1024 ? 1024 : target);
    } else if (wgrad) {
        target = 512;
    }
    return target < most ? target : most;
}

template <typename T, typename TG = T>
static void norm_bwd_fast_launch(const norm_args &a, int npt, int tpr, float *part, int P,
                                 int64_t G) {
    unsigned blocks = (unsigned)(G < (1 << 20) ? G : (1 << 20));
#define X(n, t)                                                                              \
    if (npt == (n) && tpr == (t)) k_norm_bwd_fast<T, TG, n, t><<<blocks, 256, 0, OJ_STREAM>>>(a, part, P, G);
    NORM_CFGS(X)
#undef X
}

/* Is every given float tensor of x's dtype (f32/bf16/f16) and every stat
 * f32, with C in reach of a configuration? */
static bool norm_fast_ok(const oj_tensor *x, const oj_tensor *const *same, int nsame,
                         const oj_tensor *const *stats, int nstats, int64_t N, int64_t C) {
    if (!oj_cu_is_f16ish(x->dtype) || N <= 0 || C <= 0) return false;
    for (int i = 0; i < nsame; i++)
        if (same[i] && same[i]->dtype != x->dtype) return false;
    for (int i = 0; i < nstats; i++)
        if (stats[i] && stats[i]->dtype != OJ_F32) return false;
    int npt;
    return norm_cfg(C, &npt) != 0;
}

/* How the fast path writes t against x's dtype: 0 as x's dtype, 1 / 2
 * bf16 / f16 from f32 x (norm_args.olow), -1 not at all. */
static int low_code(const oj_tensor *x, const oj_tensor *t) {
    if (t->dtype == x->dtype) return 0;
    if (x->dtype != OJ_F32) return -1;
    return t->dtype == OJ_BF16 ? 1 : t->dtype == OJ_F16 ? 2 : -1;
}

/* The forward's arguments (every tensor contiguous, else false with
 * OJ_ERR_INTERNAL recorded). */
static bool fwd_args(oj_engine *eng, const char *op, bool rms, norm_args &a, oj_tensor *out,
                     oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                     const oj_tensor *weight, const oj_tensor *bias, double eps) {
    const oj_tensor *chk[6] = {out, mean, rstd, x, weight, bias};
    for (int i = 0; i < 6; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return false;
    memset(&a, 0, sizeof a);
    rows_of(x, &a.N, &a.C);
    a.x = oj_cuda_ptr(x);
    a.xdt = (int)x->dtype;
    a.xes = esz(x);
    a.w = weight ? oj_cuda_ptr(weight) : NULL;
    a.wdt = weight ? (int)weight->dtype : 0;
    a.wes = esz(weight);
    a.b = bias ? oj_cuda_ptr(bias) : NULL;
    a.bdt = bias ? (int)bias->dtype : 0;
    a.bes = esz(bias);
    a.out = oj_cuda_ptr(out);
    a.odt = (int)out->dtype;
    a.oes = esz(out);
    const oj_tensor *stat = mean ? mean : rstd;
    a.mean_out = mean ? oj_cuda_ptr(mean) : NULL;
    a.rstd_out = rstd ? oj_cuda_ptr(rstd) : NULL;
    a.sdt = stat ? (int)stat->dtype : 0;
    a.ses = esz(stat);
    a.eps = eps;
    a.rms = rms;
    return true;
}

static oj_status forward(oj_engine *eng, const char *op, bool rms, oj_tensor *out,
                         oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                         const oj_tensor *weight, const oj_tensor *bias, double eps) {
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    norm_args a;
    if (!fwd_args(eng, op, rms, a, out, mean, rstd, x, weight, bias, eps))
        return oj_last_status(eng);
    if (a.N == 0) return OJ_OK;
    const int olow = low_code(x, out); /* an f32 norm written as bf16/f16 */
    const oj_tensor *same[3] = {olow > 0 ? NULL : out, weight, bias}, *stats[2] = {mean, rstd};
    if (olow >= 0 && norm_fast_ok(x, same, 3, stats, 2, a.N, a.C)) {
        int npt = 0, tpr = norm_cfg(a.C, &npt);
        a.olow = olow;
        OJ_CU_FLOAT_TYPE(x->dtype, T, norm_fwd_fast_launch<T>(a, npt, tpr));
        return oj_cuda_check(eng, rms ? "rms_norm_forward" : "layer_norm_forward");
    }
    k_norm_forward<<<row_blocks(a.N), row_threads(a.C), 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, rms ? "rms_norm_forward" : "layer_norm_forward");
}

/* The norms' backward; with dres / dx_low (norm_backward_add) the fast
 * path folds the residual gradient in and writes the rounded copy, any
 * other path runs binary add and copy after it (dx given then). */
static oj_status backward(oj_engine *eng, const char *op, bool rms, oj_tensor *dx,
                          oj_tensor *dweight, oj_tensor *dbias, const oj_tensor *dy,
                          const oj_tensor *x, const oj_tensor *mean, const oj_tensor *rstd,
                          const oj_tensor *weight, const oj_tensor *dres = NULL,
                          oj_tensor *dx_low = NULL) {
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *chk[10] = {dx, dweight, dbias, dy, x, mean, rstd, weight, dres, dx_low};
    for (int i = 0; i < 10; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    norm_args a;
    memset(&a, 0, sizeof a);
    rows_of(x, &a.N, &a.C);
    a.x = oj_cuda_ptr(x);
    a.xdt = (int)x->dtype;
    a.xes = esz(x);
    a.dy = oj_cuda_ptr(dy);
    a.gdt = (int)dy->dtype;
    a.ges = esz(dy);
    a.w = weight ? oj_cuda_ptr(weight) : NULL;
    a.wdt = weight ? (int)weight->dtype : 0;
    a.wes = esz(weight);
    a.mean = mean ? oj_cuda_ptr(mean) : NULL;
    a.rstd = oj_cuda_ptr(rstd);
    a.sdt = (int)rstd->dtype;
    a.ses = esz(rstd);
    a.rms = rms;
    const char *kname = rms ? "rms_norm_backward" : "layer_norm_backward";
    /* dy bf16/f16 for f32 x: the gradient of a low out (glow 1 / 2) */
    const int glow = low_code(x, dy);
    const int olow = dx_low == NULL ? 0 : low_code(x, dx_low) > 0 ? low_code(x, dx_low) : -1;
    const oj_tensor *same[6] = {dx, dweight, dbias, glow > 0 ? NULL : dy, weight, dres},
                    *stats[2] = {mean, rstd};
    if ((dx || dweight || dbias) && glow >= 0 && olow >= 0 && (dx || (!dres && !dx_low)) &&
        norm_fast_ok(x, same, 6, stats, 2, a.N, a.C)) {
        int npt = 0, tpr = norm_cfg(a.C, &npt);
        const bool wgrad = dweight || dbias;
        const int P = dbias ? 2 : 1;
        const int64_t G = norm_groups(a.N, npt, tpr, wgrad);
        a.dx = dx ? oj_cuda_ptr(dx) : NULL;
        a.dres = dres ? oj_cuda_ptr(dres) : NULL;
        a.dxl = dx_low ? oj_cuda_ptr(dx_low) : NULL;
        a.olow = olow;
        oj_storage *hold = NULL;
        float *part = NULL;
        if (wgrad) {
            part = (float *)oj_cuda_scratch(eng, (size_t)(G * P * a.C) * sizeof(float), op, &hold);
            if (part == NULL) return oj_last_status(eng);
        }
        if (glow == 1)
            norm_bwd_fast_launch<float, oj_cu_bf16>(a, npt, tpr, part, P, G);
        else if (glow == 2)
            norm_bwd_fast_launch<float, oj_cu_f16>(a, npt, tpr, part, P, G);
        else
            OJ_CU_FLOAT_TYPE(x->dtype, T, norm_bwd_fast_launch<T>(a, npt, tpr, part, P, G));
        oj_status st = oj_cuda_check(eng, kname);
        if (st == OJ_OK && part) {
            dim3 blk(32, 32);
            OJ_CU_FLOAT_TYPE(x->dtype, T,
                             k_norm_wgrad_combine<T><<<(unsigned)((a.C + 31) / 32), blk, 0, OJ_STREAM>>>(
                                 part, P, G, a.C, dweight ? (T *)oj_cuda_ptr(dweight) : (T *)NULL,
                                 dbias ? (T *)oj_cuda_ptr(dbias) : (T *)NULL));
            st = oj_cuda_check(eng, kname);
        }
        oj__storage_release(hold);
        return st;
    }
    if ((dres || dx_low) && a.N > 0) { /* the chain: the norm, binary add, copy */
        oj_status st = backward(eng, op, rms, dx, dweight, dbias, dy, x, mean, rstd, weight);
        if (st == OJ_OK && dres) st = oj_cuda_binary(eng, OJ_BIN_ADD, dx, dres, dx);
        if (st == OJ_OK && dx_low) st = oj_cuda_copy(eng, dx_low, dx);
        return st;
    }
    if (dx && a.N > 0) {
        a.dx = oj_cuda_ptr(dx);
        a.dxdt = (int)dx->dtype;
        a.dxes = esz(dx);
        k_norm_backward_dx<<<row_blocks(a.N), row_threads(a.C), 0, OJ_STREAM>>>(a);
        if (oj_cuda_check(eng, kname) != OJ_OK) return oj_last_status(eng);
    }
    if ((dweight == NULL && dbias == NULL) || a.C == 0) return OJ_OK;
    int64_t chunk = 64;
    while ((a.N + chunk - 1) / chunk > 65535) chunk *= 2;
    int64_t nchunks = (a.N + chunk - 1) / chunk;
    if (nchunks < 1) nchunks = 1;
    oj_storage *hold = NULL;
    double *part = (double *)oj_cuda_scratch(eng, (size_t)(nchunks * 2 * a.C) * sizeof(double), op,
                                             &hold);
    if (part == NULL) return oj_last_status(eng);
    oj_status st = OJ_OK;
    if (a.N > 0) {
        dim3 grid((unsigned)((a.C + 255) / 256), (unsigned)nchunks);
        k_norm_wgrad_partial<<<grid, 256, 0, OJ_STREAM>>>(a, chunk, part);
        st = oj_cuda_check(eng, kname);
    } else {
        cudaError_t e = cudaMemsetAsync(part, 0, (size_t)(2 * a.C) * sizeof(double), OJ_STREAM);
        if (e != cudaSuccess) st = oj_cuda_fail(eng, e, kname);
    }
    if (st == OJ_OK) {
        k_norm_wgrad_final<<<(unsigned)((a.C + 255) / 256), 256, 0, OJ_STREAM>>>(
            part, nchunks, a.C, dweight ? oj_cuda_ptr(dweight) : NULL,
            dweight ? (int)dweight->dtype : 0, dbias ? oj_cuda_ptr(dbias) : NULL,
            dbias ? (int)dbias->dtype : 0);
        st = oj_cuda_check(eng, kname);
    }
    oj__storage_release(hold);
    return st;
}

oj_status oj_cuda_layer_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *mean,
                                     oj_tensor *rstd, const oj_tensor *x, const oj_tensor *weight,
                                     const oj_tensor *bias, double eps) {
    return forward(eng, "layer_norm", false, out, mean, rstd, x, weight, bias, eps);
}

oj_status oj_cuda_layer_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                      oj_tensor *dbias, const oj_tensor *dy, const oj_tensor *x,
                                      const oj_tensor *mean, const oj_tensor *rstd,
                                      const oj_tensor *weight) {
    return backward(eng, "layer_norm", false, dx, dweight, dbias, dy, x, mean, rstd, weight);
}

oj_status oj_cuda_rms_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                   const oj_tensor *x, const oj_tensor *weight, double eps) {
    return forward(eng, "rms_norm", true, out, NULL, rstd, x, weight, NULL, eps);
}

oj_status oj_cuda_rms_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                    const oj_tensor *dy, const oj_tensor *x, const oj_tensor *rstd,
                                    const oj_tensor *weight) {
    return backward(eng, "rms_norm", true, dx, dweight, NULL, dy, x, NULL, rstd, weight);
}

/* ---------------------------------------------------------------- add + norm
 * sum = x + r and the norm of sum in one k_norm_fwd_fast pass (ADD): x, r
 * contiguous and f32/bf16/f16 of sum's dtype, or f32 and bf16 (either
 * order: the autocast residual stream), sum, out, weight, bias and stats
 * as the norm's fast path takes them. A decode step's [1, 768] reads x and
 * r once and writes sum and out in one launch instead of two. Anything
 * else (f64, f16 mixed with f32, strided x or r, C > 8192) runs the binary
 * add kernel, then the norm on sum. */
oj_status oj_cuda_add_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *sum,
                                   oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                                   const oj_tensor *r, const oj_tensor *weight,
                                   const oj_tensor *bias, double eps, bool rms) {
    const char *op = rms ? "add_rms_norm" : "add_layer_norm";
    if (rms) {
        mean = NULL;
        bias = NULL;
    }
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (x->dtype == OJ_BF16 && r->dtype == OJ_F32) { /* a + b == b + a, bit for bit */
        const oj_tensor *t = x;
        x = r;
        r = t;
    }
    norm_args a;
    if (!fwd_args(eng, op, rms, a, out, mean, rstd, sum, weight, bias, eps))
        return oj_last_status(eng);
    const int olow = low_code(sum, out); /* an f32 norm written as bf16/f16 */
    const oj_tensor *same[3] = {olow > 0 ? NULL : out, weight, bias}, *stats[2] = {mean, rstd};
    const bool mixed = sum->dtype == OJ_F32 && r->dtype == OJ_BF16;
    if (a.N > 0 && olow >= 0 && x->dtype == sum->dtype && (r->dtype == sum->dtype || mixed) &&
        oj_cuda_contig(x) && oj_cuda_contig(r) && norm_fast_ok(sum, same, 3, stats, 2, a.N, a.C)) {
        a.x = oj_cuda_ptr(x);
        a.r = oj_cuda_ptr(r);
        a.sum = oj_cuda_ptr(sum);
        a.olow = olow;
        int npt = 0, tpr = norm_cfg(a.C, &npt);
        if (mixed)
            norm_fwd_fast_launch<float, oj_cu_bf16, true>(a, npt, tpr);
        else
            OJ_CU_FLOAT_TYPE(sum->dtype, T, (norm_fwd_fast_launch<T, T, true>(a, npt, tpr)));
        return oj_cuda_check(eng, op);
    }
    if (oj_cuda_binary(eng, OJ_BIN_ADD, sum, x, r) != OJ_OK) return oj_last_status(eng);
    return forward(eng, rms ? "rms_norm" : "layer_norm", rms, out, mean, rstd, sum, weight, bias,
                   eps);
}

/* dx = dres + the norm's dx, dx_low = dx rounded (backend.h). The fast
 * path (f32/bf16/f16 rows as the norm's backward takes them, dy bf16/f16
 * for f32 x) does it in k_norm_bwd_fast's row pass: per element it reads
 * x, dy and dres and writes dx and dx_low, 4 + 2 + 4 + 4 + 2 = 16 bytes
 * for f32 x with bf16 dy and dx_low, where the unfused chain (cast dy to
 * f32, the norm, the add, the cast of the sum) moves 6 + 12 + 12 + 6 = 36.
 * Other shapes and dtypes run that chain. */
oj_status oj_cuda_norm_backward_add(oj_engine *eng, oj_tensor *dx, oj_tensor *dx_low,
                                    oj_tensor *dweight, oj_tensor *dbias, const oj_tensor *dy,
                                    const oj_tensor *dres, const oj_tensor *x,
                                    const oj_tensor *mean, const oj_tensor *rstd,
                                    const oj_tensor *weight, bool rms) {
    const char *op = rms ? "rms_norm" : "layer_norm";
    if (rms) {
        mean = NULL;
        dbias = NULL;
    }
    if (dx == NULL)
        return oj_set_error(eng, OJ_ERR_INTERNAL, "%s: norm_backward_add needs dx", op);
    return backward(eng, op, rms, dx, dweight, dbias, dy, x, mean, rstd, weight, dres, dx_low);
}
