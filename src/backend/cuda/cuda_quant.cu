/* Block-quantized weights on the GPU (backend.h: qgemv, qdequant): the
 * ggml layouts of include/ojas/quant.h (q8_0, q4_0, q4_1 in blocks of 32,
 * q4_k in super-blocks of 256 with eight sub-blocks of 32) and fp8 (E4M3
 * with one f32 scale a row, converted by the hardware: sm_89 and later).
 *
 * qgemv, batch-1 (to 8 rows) decode: the dequantization is the GEMV's
 * prologue. Three kernels; each sums in an order fixed by (K) (and the
 * kernel), the same bits on every run, no atomics; k_qgemv and
 * k_qgemv_fast multiply x by the CPU's dequantized values exactly
 * (oj_dequantize_row's), k_qgemv_fp8row applies fp8's row scale once.
 * Unlike the CPU's kernels x is not rounded to int8: the result is the
 * dequantize-then-matmul product up to f32 summation.
 *
 * k_qgemv_fp8row (fp8 under FAST numerics, on unless
 * OJAS_CUDA_QGEMV_FP8ROW=0 or OJAS_CUDA_QGEMV_FAST=0; read at each call;
 * "2": two rows a warp): a streaming GEMV in the manner of k_gemv_nk
 * (cuda_gemv.cu). One warp per output row, four a 128-thread block, grid
 * ceil(N / 4), no shared memory, no barrier; lane l reads the 32-bit
 * words l, l + 32, ... of the row's K E4M3 bytes (__ldcs, 128 coalesced
 * bytes a warp load), U words in flight (8 / 16 / 32 from K and M) issued
 * before any use, converts each word by two hardware e4m3x2 -> f16x2 cvts
 * (exact) to four f32 and takes four fused multiply-adds with x's float4
 * of the same word (__ldg, coalesced, read once for all R rows of the
 * warp) for each of the M rows; a xor butterfly; then out = d * sum,
 * the row's scale d applied ONCE a row. This rounds differently from the
 * CPU (which multiplies x by d q rounded per weight): the product of d and
 * the f32 sum of q x, not the sum of x (d q); within the same f32
 * summation bound. Each row's order is fixed by K alone (a lane's words
 * in order, words past K added as +0), whatever N, M, R, U or the grid.
 * It needs K % 16 == 0, rows of 16 + K bytes and 16-byte aligned W.
 *
 * k_qgemv_fast (FAST numerics, on unless OJAS_CUDA_QGEMV_FAST=0; fp8 only
 * with OJAS_CUDA_QGEMV_FP8ROW=0 or where the row kernel does not apply), built
 * for HBM bandwidth: 256 threads a block, persistent blocks (as many as
 * fit an SM, times the SMs) walking tiles of TR rows (TR a power of two,
 * 2..32, TR row bytes <= 16 KB). A tile is one contiguous 16-byte aligned
 * span, copied to shared memory by cp.async in 16-byte chunks, coalesced,
 * three tiles in flight (a ring of three stages); x (M rows) is staged
 * once a block in shared memory as 36 floats a block of 32 (lane-
 * consecutive blocks then read without bank conflicts), or read through
 * L1 when M K is too large (> 96 KB staged) or OJAS_CUDA_QGEMV_XS is "0"
 * (read at each call, chosen with the plan; unset, "auto" or "1": staged
 * when it fits, the default; the same bits either way, only where x is
 * read from changes). In a tile, rows go by pairs
 * to the 8 warps (a pair to 8 / pairs warps, or two pairs to a warp at TR
 * 32); lane l of a pair's part p takes the blocks of 32 p 32 + l, + 32
 * parts, ...; each block's quants are unpacked from 32-bit words (a byte
 * permute makes 2^23 + q a float, one add removes 2^23 and the offset),
 * each float4 of x read once for both rows of the pair and all M rows.
 * q8_0, q4_0: the value d q is exact in f32 (11 by 8 or 4 bits), so each
 * block's sum of q_j x_j (q4_0: q_j - 8) is scaled by d once (a fused
 * multiply-add into the row's sum); q4_1, q4_k: each weight fma(d, q, m) (d q exact,
 * so the CPU's d q + m rounded once); fp8: s e4m3(q) rounded per weight
 * as the CPU. The lanes are combined by a xor butterfly, a pair's parts
 * in part order. It needs row bytes a multiple of 16 (q8_0 / q4_0: K a
 * multiple of 256, q4_1: of 128; q4_k and fp8 always) and 16-byte aligned
 * pointers; other shapes, EXACT numerics and OJAS_CUDA_QGEMV_FAST=0 take
 * k_qgemv below.
 *
 * k_qgemv (the fallback): one warp per output row n, four per 128-thread
 * block, grid ceil(N / 4); lane l takes the blocks of 32 l, l + 32, ...
 * of W's row n, dequantizes each block's 32 weights in registers (f32,
 * the formulas of oj_dequantize_row) and adds w * x for each of the M
 * rows of x in f32 in element order; the 32 lanes' sums are combined by a
 * xor butterfly. The weight is read once for all M rows; x (M K f32, at
 * most 8 rows) is served by L1/L2.
 *
 * deq_block's values (k_qgemv, qdequant) are the CPU's bit for bit
 * (products and sums rounded apart, no fused multiply-add).
 *
 * qdequant: one thread per block of 32 (row n, block b) writes its 32
 * values, rounded once to f32 or bf16 (prefill: oj_qmatmul multiplies by
 * the bf16 matrix with the GEMM). */
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_q4k.cuh"
#include "core/env.h"

/* oj_qtype's numbers (ojas/quant.h is C; the values are its ABI). */
enum { QK_Q8_0 = 0, QK_Q4_0 = 1, QK_Q4_1 = 2, QK_Q4_K = 3, QK_FP8 = 4 };

#define QG_THREADS 128 /* 4 warps, one output row each */
#define QG_MAX_M 8

static __device__ __forceinline__ float qf16(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
}

/* The 32 values of block b (of 32 elements) of a row of type T. */
template <int T>
static __device__ __forceinline__ void deq_block(const uint8_t *row, int64_t b, float *v) {
    if (T == QK_Q8_0) {
        const uint8_t *p = row + b * 34;
        const float d = qf16(p);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = (float)(int8_t)p[2 + j] * d;
    } else if (T == QK_Q4_0) {
        const uint8_t *p = row + b * 18;
        const float d = qf16(p);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = (float)((p[2 + j] & 15) - 8) * d;
            v[j + 16] = (float)((p[2 + j] >> 4) - 8) * d;
        }
    } else if (T == QK_Q4_1) {
        const uint8_t *p = row + b * 20;
        const float d = qf16(p), m = qf16(p + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = __fadd_rn(__fmul_rn((float)(p[4 + j] & 15), d), m);
            v[j + 16] = __fadd_rn(__fmul_rn((float)(p[4 + j] >> 4), d), m);
        }
    } else if (T == QK_FP8) { /* the row's f32 scale, then E4M3 bytes (hardware cvt, exact) */
        const float sc = *(const float *)row;
        const uint8_t *q = row + 16 + b * 32;
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] = __fmul_rn(sc, __half2float(__half(__nv_cvt_fp8_to_halfraw(q[j], __NV_E4M3))));
    } else { /* q4_k: sub-block s of super-block sb */
        const uint8_t *p = row + (b / 8) * 144;
        const int s = (int)(b % 8);
        const uint8_t *sc = p + 4;
        int ls, lm;
        q4k_scale_min(sc, s, &ls, &lm);
        const float d = qf16(p) * (float)ls, m = qf16(p + 2) * (float)lm;
        const uint8_t *q = p + 16 + 32 * (s / 2);
        const int sh = 4 * (s & 1);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = __fsub_rn(__fmul_rn(d, (float)(q[j] >> sh & 15)), m);
    }
}

// W blocks (N, row bytes), x (M, K) f32, out (M, N) f32
template <int T, int M>
__global__ void __launch_bounds__(QG_THREADS)
    k_qgemv(float *out, const float *x, const uint8_t *w, int64_t N, int64_t K, size_t row_bytes) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * (QG_THREADS / 32) + (threadIdx.x >> 5);
    if (n >= N) return;
    const uint8_t *row = w + (size_t)n * row_bytes;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = 0.0f;
    const int64_t nb = K / 32;
    for (int64_t b = lane; b < nb; b += 32) {
        float v[32];
        deq_block<T>(row, b, v);
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float4 *xr = (const float4 *)(x + (int64_t)m * K + b * 32);
            float a = acc[m];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float4 xv = xr[j];
                a = fmaf(v[4 * j], xv.x, a);
                a = fmaf(v[4 * j + 1], xv.y, a);
                a = fmaf(v[4 * j + 2], xv.z, a);
                a = fmaf(v[4 * j + 3], xv.w, a);
            }
            acc[m] = a;
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) {
        float a = acc[m];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0) out[(int64_t)m * N + n] = a;
    }
}

template <int T>
static void launch_qgemv(int64_t M, float *out, const float *x, const uint8_t *w, int64_t N,
                         int64_t K, size_t rb) {
    const unsigned grid = (unsigned)((N + QG_THREADS / 32 - 1) / (QG_THREADS / 32));
#define QG_CASE(MM)                                                                     \
    case MM: k_qgemv<T, MM><<<grid, QG_THREADS, 0, OJ_STREAM>>>(out, x, w, N, K, rb); break
    switch (M) {
        QG_CASE(1); QG_CASE(2); QG_CASE(3); QG_CASE(4);
        QG_CASE(5); QG_CASE(6); QG_CASE(7); default: QG_CASE(8);
    }
#undef QG_CASE
}

/* ------------------------------------------------ k_qgemv_fast (FAST numerics) */
#define QF_THREADS 256
#define QF_WARPS (QF_THREADS / 32)
#define QF_STAGES 3                  /* tiles in flight a block */
#define QF_TILE (16 * 1024)          /* bytes of a tile, at most (but 2 rows at least) */
#define QF_MAX_TR 32                 /* rows of a tile, at most */
#define QF_XPAD 36                   /* floats of shared memory a block of 32 of x */
#define QF_XS_MAX (96 * 1024)        /* x staged in shared memory up to these bytes */
#define QF_SMEM_MAX (200 * 1024)     /* a block's shared memory, at most */
#define QF_RED (QF_MAX_TR * QG_MAX_M) /* floats of the pairs' partial sums */

static __device__ __forceinline__ void qf_cp16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
static __device__ __forceinline__ void qf_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int NP> static __device__ __forceinline__ void qf_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(NP) : "memory");
}

/* NW 32-bit words of shared memory from p, which is 2-byte aligned (the
 * word-aligned words around it, funnel-shifted; the one past the end read
 * only when p is not 4-byte aligned). */
template <int NW> static __device__ __forceinline__ void qf_words(const uint8_t *p, unsigned *o) {
    const unsigned sh = ((unsigned)(uintptr_t)p & 2u) * 8u;
    const unsigned *a = (const unsigned *)((uintptr_t)p & ~(uintptr_t)3);
    unsigned v[NW + 1];
#pragma unroll
    for (int i = 0; i < NW; i++) v[i] = a[i];
    v[NW] = sh ? a[NW] : 0u;
#pragma unroll
    for (int i = 0; i < NW; i++) o[i] = __funnelshift_r(v[i], v[i + 1], sh);
}

/* Byte k of u (0..255) as a float (2^23 + u, less bias): exact. */
template <int BIAS> static __device__ __forceinline__ float qf_b2f(unsigned u, int k) {
    return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u + (unsigned)k)) - (8388608.0f + BIAS);
}

/* One row's block b (of 32) in a tile, unpacked: words of quants (4 for
 * the q4 types, 8 for q8_0 and fp8 bytes), the scale d and the min m. */
template <int T> struct qf_blk {
    unsigned q[(T == QK_Q8_0 || T == QK_FP8 || T == QK_Q4_K) ? 8 : 4];
    float d, m;
    int sh;
};

template <int T>
static __device__ __forceinline__ void qf_load(const uint8_t *row, int b, qf_blk<T> &k) {
    if (T == QK_Q8_0) {
        const uint8_t *p = row + 34 * b;
        k.d = __half2float(__ushort_as_half(*(const unsigned short *)p));
        qf_words<8>(p + 2, k.q);
    } else if (T == QK_Q4_0) {
        const uint8_t *p = row + 18 * b;
        k.d = __half2float(__ushort_as_half(*(const unsigned short *)p));
        qf_words<4>(p + 2, k.q);
    } else if (T == QK_Q4_1) {
        const unsigned *p = (const unsigned *)(row + 20 * b);
        const unsigned h = p[0];
        k.d = __half2float(__ushort_as_half((unsigned short)(h & 0xffffu)));
        k.m = __half2float(__ushort_as_half((unsigned short)(h >> 16)));
#pragma unroll
        for (int i = 0; i < 4; i++) k.q[i] = p[1 + i];
    } else if (T == QK_Q4_K) { /* sub-block s of super-block b / 8 */
        const uint8_t *p = row + 144 * (b >> 3);
        const int s = b & 7;
        const uint4 h = *(const uint4 *)p;
        int ls, lm;
        q4k_scale_min_w(h.y, h.z, h.w, s, &ls, &lm);
        k.d = __half2float(__ushort_as_half((unsigned short)(h.x & 0xffffu))) * (float)ls;
        k.m = __half2float(__ushort_as_half((unsigned short)(h.x >> 16))) * (float)lm;
        const uint4 *q = (const uint4 *)(p + 16 + 32 * (s >> 1));
        const uint4 q0 = q[0], q1 = q[1];
        k.q[0] = q0.x, k.q[1] = q0.y, k.q[2] = q0.z, k.q[3] = q0.w;
        k.q[4] = q1.x, k.q[5] = q1.y, k.q[6] = q1.z, k.q[7] = q1.w;
        k.sh = 4 * (s & 1);
    } else { /* fp8: the row's scale, then 32 bytes */
        k.d = *(const float *)row;
        const uint4 *q = (const uint4 *)(row + 16 + 32 * b);
        const uint4 q0 = q[0], q1 = q[1];
        k.q[0] = q0.x, k.q[1] = q0.y, k.q[2] = q0.z, k.q[3] = q0.w;
        k.q[4] = q1.x, k.q[5] = q1.y, k.q[6] = q1.z, k.q[7] = q1.w;
    }
}

/* Elements 4 i .. 4 i + 3 of block k: q8_0 / q4_0 the quants (q, q - 8:
 * the values over d), q4_1 / q4_k / fp8 the values themselves (the CPU's
 * bits). */
template <int T>
static __device__ __forceinline__ void qf_four(const qf_blk<T> &k, int i, float *w) {
    if (T == QK_FP8) {
        const unsigned u = k.q[i];
        const __half2 lo = __half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u & 0xffffu), __NV_E4M3));
        const __half2 hi = __half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u >> 16), __NV_E4M3));
        w[0] = __fmul_rn(k.d, __low2float(lo));
        w[1] = __fmul_rn(k.d, __high2float(lo));
        w[2] = __fmul_rn(k.d, __low2float(hi));
        w[3] = __fmul_rn(k.d, __high2float(hi));
        return;
    }
    unsigned u;
    if (T == QK_Q8_0) u = k.q[i] ^ 0x80808080u;
    else if (T == QK_Q4_K) u = (k.q[i] >> k.sh) & 0x0F0F0F0Fu;
    else u = (i < 4 ? k.q[i] : k.q[i - 4] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (T == QK_Q8_0) w[j] = qf_b2f<128>(u, j);
        else if (T == QK_Q4_0) w[j] = qf_b2f<8>(u, j);
        else if (T == QK_Q4_1) w[j] = fmaf(k.d, qf_b2f<0>(u, j), k.m);
        else w[j] = fmaf(k.d, qf_b2f<0>(u, j), -k.m);
    }
}

/* x's float4 i of block b, row m: staged (XS, [M][K / 32][QF_XPAD]) or
 * from global memory ([M][K]). */
template <bool XS>
static __device__ __forceinline__ float4 qf_x4(const float *xs, const float *x, int nb, int K,
                                               int m, int b, int i) {
    if (XS) return ((const float4 *)(xs + ((size_t)m * nb + b) * QF_XPAD))[i];
    return __ldg((const float4 *)(x + (size_t)m * K + (size_t)b * 32) + i);
}

// W blocks (N, rb) f32 x (M, K) -> out (M, N); tr rows a tile (see the file's head)
template <int T, int M, bool XS>
__global__ void __launch_bounds__(QF_THREADS)
    k_qgemv_fast(float *out, const float *__restrict__ x, const uint8_t *__restrict__ w,
                 int64_t N, int K, int rb, int tr) {
    extern __shared__ __align__(16) uint8_t qf_sm[];
    constexpr bool FACT = T == QK_Q8_0 || T == QK_Q4_0; /* d applied once a block */
    const int nb = K / 32, tile = tr * rb;
    float *xs = (float *)(qf_sm + (size_t)QF_STAGES * tile);
    float *red = XS ? xs + (size_t)M * nb * QF_XPAD : xs;
    const int P = tr / 2, WP = P < QF_WARPS ? QF_WARPS / P : 1, PPW = P > QF_WARPS ? P / QF_WARPS : 1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t ntiles = (N + tr - 1) / tr;

    if (XS) { /* x in the first group of copies: 16-byte chunk c of row m to its padded place */
        const int per = K / 4;
        for (int c = threadIdx.x; c < M * per; c += QF_THREADS) {
            const int m = c / per, e = c - m * per;
            qf_cp16(xs + ((size_t)m * nb + e / 8) * QF_XPAD + 4 * (e % 8), x + (size_t)m * K + 4 * e);
        }
    }
    auto issue = [&](int64_t t, int stage) {
        if (t < ntiles) {
            const int64_t row0 = t * tr;
            const int rows = (int)(N - row0 < tr ? N - row0 : tr);
            const uint8_t *src = w + row0 * rb;
            uint8_t *dst = qf_sm + (size_t)stage * tile;
            for (int c = threadIdx.x; c < rows * rb / 16; c += QF_THREADS)
                qf_cp16(dst + 16 * c, src + 16 * c);
        }
        qf_commit(); /* empty past the last tile: the wait below counts groups */
    };
#pragma unroll
    for (int s = 0; s < QF_STAGES - 1; s++) issue(blockIdx.x + (int64_t)s * gridDim.x, s);

    int stage = 0;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        qf_wait<QF_STAGES - 2>(); /* this thread's copies of tile t (and x) landed */
        __syncthreads();          /* everyone's; and the stage refilled below is free */
        issue(t + (int64_t)(QF_STAGES - 1) * gridDim.x, (stage + QF_STAGES - 1) % QF_STAGES);
        const uint8_t *tb = qf_sm + (size_t)stage * tile;
        const int64_t row0 = t * tr;
        const int rows = (int)(N - row0 < tr ? N - row0 : tr);
        for (int pp = 0; pp < PPW; pp++) {
            const int pair = P <= QF_WARPS ? warp / WP : warp + QF_WARPS * pp;
            const int part = P <= QF_WARPS ? warp % WP : 0;
            float acc[2][M];
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int m = 0; m < M; m++) acc[r][m] = 0.0f;
            if (2 * pair < rows) { /* the same for the whole warp */
                const uint8_t *r0 = tb + (size_t)(2 * pair) * rb;
                const uint8_t *r1 = 2 * pair + 1 < rows ? r0 + rb : r0;
                for (int b = part * 32 + lane; b < nb; b += WP * 32) {
                    qf_blk<T> k0, k1;
                    qf_load<T>(r0, b, k0);
                    qf_load<T>(r1, b, k1);
                    float s[2][M];
#pragma unroll
                    for (int r = 0; r < 2; r++)
#pragma unroll
                        for (int m = 0; m < M; m++) s[r][m] = FACT ? 0.0f : acc[r][m];
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        float w0[4], w1[4];
                        qf_four<T>(k0, i, w0);
                        qf_four<T>(k1, i, w1);
#pragma unroll
                        for (int m = 0; m < M; m++) {
                            const float4 xv = qf_x4<XS>(xs, x, nb, K, m, b, i);
                            s[0][m] = fmaf(w0[0], xv.x, s[0][m]);
                            s[0][m] = fmaf(w0[1], xv.y, s[0][m]);
                            s[0][m] = fmaf(w0[2], xv.z, s[0][m]);
                            s[0][m] = fmaf(w0[3], xv.w, s[0][m]);
                            s[1][m] = fmaf(w1[0], xv.x, s[1][m]);
                            s[1][m] = fmaf(w1[1], xv.y, s[1][m]);
                            s[1][m] = fmaf(w1[2], xv.z, s[1][m]);
                            s[1][m] = fmaf(w1[3], xv.w, s[1][m]);
                        }
                    }
#pragma unroll
                    for (int m = 0; m < M; m++) {
                        acc[0][m] = FACT ? fmaf(k0.d, s[0][m], acc[0][m]) : s[0][m];
                        acc[1][m] = FACT ? fmaf(k1.d, s[1][m], acc[1][m]) : s[1][m];
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int m = 0; m < M; m++) {
                    float a = acc[r][m];
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
                    if (lane == 0) red[((pair * WP + part) * 2 + r) * M + m] = a;
                }
        }
        __syncthreads();
        if ((int)threadIdx.x < rows * M) { /* row r of the tile, x's row m: the parts in order */
            const int r = (int)threadIdx.x / M, m = (int)threadIdx.x % M;
            const float *p = red + ((r / 2) * WP * 2 + (r & 1)) * M + m;
            float a = p[0];
            for (int q = 1; q < WP; q++) a += p[q * 2 * M];
            out[(int64_t)m * N + row0 + r] = a;
        }
        stage = stage + 1 == QF_STAGES ? 0 : stage + 1;
    }
    qf_wait<0>(); /* no copy outlives the block */
}

/* The tile and shared memory of k_qgemv_fast for (M, K, row bytes rb);
 * x staged when it fits and stage_x (OJAS_CUDA_QGEMV_XS not "0"); false
 * where the kernel does not apply (rb not whole 16-byte chunks, too large). */
struct qf_plan {
    int tr;
    bool xs;
    size_t smem;
};
static bool qf_make_plan(int64_t M, int64_t K, size_t rb, bool stage_x, qf_plan *p) {
    if (rb % 16 != 0 || K > (1 << 24)) return false;
    int tr = QF_MAX_TR;
    while (tr > 2 && (size_t)tr * rb > QF_TILE) tr /= 2;
    const size_t tiles = (size_t)QF_STAGES * tr * rb, red = QF_RED * sizeof(float);
    const size_t xb = (size_t)M * (size_t)(K / 32) * QF_XPAD * sizeof(float);
    p->tr = tr;
    p->xs = stage_x && xb <= QF_XS_MAX && tiles + xb + red <= QF_SMEM_MAX;
    p->smem = tiles + (p->xs ? xb : 0) + red;
    return p->smem <= QF_SMEM_MAX;
}

/* Launch k_qgemv_fast<T, M, XS> on engine s's device (current): as many
 * blocks as are resident at once (occupancy at this shared memory, times
 * the SMs), at most one a tile; the sums' order does not depend on the
 * grid. The opt-in to the shared memory and the occupancy are asked once
 * per device and size (oj_cuda_kfacts). */
template <int T, int M, bool XS>
static cudaError_t qf_launch(const oj_cuda_state *s, float *out, const float *x, const uint8_t *w,
                             int64_t N, int64_t K, size_t rb, const qf_plan &p) {
    static oj_cuda_kfacts facts;
    const void *k = (const void *)k_qgemv_fast<T, M, XS>;
    int occ = 0;
    cudaError_t e = oj_cuda_kernel_smem(&facts, k, s->ordinal, p.smem);
    if (e == cudaSuccess)
        e = oj_cuda_kernel_occupancy(&facts, k, s->ordinal, QF_THREADS, p.smem, &occ);
    if (e != cudaSuccess) return e;
    if (occ < 1) occ = 1;
    const int64_t tiles = (N + p.tr - 1) / p.tr;
    int64_t resident = (int64_t)occ * s->sms;
    /* OJAS_CUDA_QGEMV_GRID=n caps the blocks (tests: many tiles a block;
     * read at each call: tests/gpu/test_gpu_quant.c sets and unsets it) */
    const int64_t cap = oj__env_int("OJAS_CUDA_QGEMV_GRID", 0);
    if (cap > 0 && cap < resident) resident = cap;
    const unsigned grid = (unsigned)(tiles < resident ? tiles : resident);
    k_qgemv_fast<T, M, XS><<<grid, QF_THREADS, p.smem, OJ_STREAM>>>(out, x, w, N, (int)K, (int)rb, p.tr);
    return cudaSuccess;
}

template <int T>
static cudaError_t qf_launch_m(const oj_cuda_state *s, int64_t M, float *out, const float *x,
                               const uint8_t *w, int64_t N, int64_t K, size_t rb,
                               const qf_plan &p) {
#define QF_CASE(MM)                                                                  \
    case MM:                                                                         \
        return p.xs ? qf_launch<T, MM, true>(s, out, x, w, N, K, rb, p)              \
                    : qf_launch<T, MM, false>(s, out, x, w, N, K, rb, p)
    switch (M) {
        QF_CASE(1); QF_CASE(2); QF_CASE(3); QF_CASE(4);
        QF_CASE(5); QF_CASE(6); QF_CASE(7); default: QF_CASE(8);
    }
#undef QF_CASE
}

/* ------------------------------------- k_qgemv_fp8row (fp8, FAST numerics) */
#define FR_THREADS 128   /* 4 warps, R output rows each */
#define FR_MIN_BLOCKS 4  /* registers capped at 128: the U loads stay in flight */

/* fp8 rows (16 + K bytes: the f32 scale d, 12 pad bytes, K E4M3 bytes),
 * W [N] rows rb bytes apart, 16-byte aligned; x (M, K) f32; out (M, N) f32
 * = d sum_k q[k] x[k]. K4 = K / 4 words of a row's quants. Warp g owns
 * rows g R .. g R + R - 1 (past N: the last row again, not stored); lane l
 * takes the words l, l + 32, ... (4 quants each, coalesced 128-byte warp
 * loads; x's float4 of the same word, coalesced too), U words in flight a
 * row before any use. */
template <int M, int U, int R>
__global__ void __launch_bounds__(FR_THREADS, FR_MIN_BLOCKS)
    k_qgemv_fp8row(float *out, const float *__restrict__ x, const uint8_t *__restrict__ w,
                   int64_t N, int K4, size_t rb) {
    const int lane = threadIdx.x & 31;
    const int64_t n0 = ((int64_t)blockIdx.x * (FR_THREADS / 32) + (threadIdx.x >> 5)) * R;
    if (n0 >= N) return; /* the whole warp; no block barrier */
    const unsigned *qr[R];
    float d[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t n = n0 + r < N ? n0 + r : n0;
        const uint8_t *row = w + (size_t)n * rb;
        d[r] = __ldg((const float *)row);
        qr[r] = (const unsigned *)(row + 16);
    }
    const float4 *x4 = (const float4 *)x;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float s[R][M];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) s[r][m] = 0.0f;
    for (int c0 = 0; c0 < K4; c0 += 32 * U) {
        unsigned q[R][U];
#pragma unroll
        for (int u = 0; u < U; u++) { /* every weight load first (0 past K: adds +0) */
            const int c = c0 + u * 32 + lane;
#pragma unroll
            for (int r = 0; r < R; r++) q[r][u] = c < K4 ? __ldcs(qr[r] + c) : 0u;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * 32 + lane;
            const bool ok = c < K4;
            float v[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) { /* E4M3 pairs to f16 pairs (hardware cvt, exact), f32 */
                const float2 lo = __half22float2(__half2(
                    __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(q[r][u] & 0xffffu), __NV_E4M3)));
                const float2 hi = __half22float2(__half2(
                    __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(q[r][u] >> 16), __NV_E4M3)));
                v[r][0] = lo.x, v[r][1] = lo.y, v[r][2] = hi.x, v[r][3] = hi.y;
            }
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float4 xv = ok ? __ldg(x4 + (size_t)m * K4 + c) : zero4;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    s[r][m] = fmaf(v[r][0], xv.x, s[r][m]);
                    s[r][m] = fmaf(v[r][1], xv.y, s[r][m]);
                    s[r][m] = fmaf(v[r][2], xv.z, s[r][m]);
                    s[r][m] = fmaf(v[r][3], xv.w, s[r][m]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float a = oj_cu_warp_sumf(s[r][m]);
            if (lane == r * M + m && n0 + r < N) out[(int64_t)m * N + n0 + r] = __fmul_rn(d[r], a);
        }
}

/* Launch k_qgemv_fp8row for M rows of x, R rows a warp; U from K (a
 * lane's words of a row in one round up to K 2048, as k_gemv_nk) and M
 * (fewer words in flight for more rows of x: no spills under the 128
 * registers a thread). */
template <int M, int R>
static void fr_launch_u(float *out, const float *x, const uint8_t *w, int64_t N, int64_t K,
                        size_t rb) {
    constexpr int U1 = 8 / R, U2 = (M <= 4 ? 16 : 8) / R, U3 = (M <= 2 ? 32 : M <= 4 ? 16 : 8) / R;
    const unsigned grid = (unsigned)((N + (FR_THREADS / 32) * R - 1) / ((FR_THREADS / 32) * R));
    const int K4 = (int)(K / 4);
    if (K < 2048)
        k_qgemv_fp8row<M, U1, R><<<grid, FR_THREADS, 0, OJ_STREAM>>>(out, x, w, N, K4, rb);
    else if (K < 8192)
        k_qgemv_fp8row<M, U2, R><<<grid, FR_THREADS, 0, OJ_STREAM>>>(out, x, w, N, K4, rb);
    else
        k_qgemv_fp8row<M, U3, R><<<grid, FR_THREADS, 0, OJ_STREAM>>>(out, x, w, N, K4, rb);
}

template <int R>
static void fr_launch(int64_t M, float *out, const float *x, const uint8_t *w, int64_t N,
                      int64_t K, size_t rb) {
    switch (M) {
    case 1: fr_launch_u<1, R>(out, x, w, N, K, rb); break;
    case 2: fr_launch_u<2, R>(out, x, w, N, K, rb); break;
    case 3: fr_launch_u<3, R>(out, x, w, N, K, rb); break;
    case 4: fr_launch_u<4, R>(out, x, w, N, K, rb); break;
    case 5: fr_launch_u<5, R>(out, x, w, N, K, rb); break;
    case 6: fr_launch_u<6, R>(out, x, w, N, K, rb); break;
    case 7: fr_launch_u<7, R>(out, x, w, N, K, rb); break;
    default: fr_launch_u<8, R>(out, x, w, N, K, rb); break;
    }
}

static bool qtype_ok(oj_engine *eng, int qtype, const char *op) {
    if (qtype >= QK_Q8_0 && qtype <= QK_FP8) return true;
    oj_set_error(eng, OJ_ERR_INTERNAL, "%s: quantized type %d has no CUDA kernel", op, qtype);
    return false;
}

oj_status oj_cuda_qgemv(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                        const oj_tensor *blocks, int qtype, int64_t K) {
    const char *op = "qmatmul";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK ||
        oj_cuda_need_contig(eng, x, op, "x") != OJ_OK ||
        oj_cuda_need_contig(eng, blocks, op, "w") != OJ_OK || !qtype_ok(eng, qtype, op))
        return oj_last_status(eng);
    const int64_t N = blocks->shape[0], M = oj_cuda_numel(x) / K;
    if (M < 1 || M > QG_MAX_M || K % 32 || !oj_cu_aligned16(oj_cuda_ptr(x)))
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "qmatmul: qgemv takes 1..%d rows of K %% 32 == 0, 16-byte aligned "
                            "(got %lld rows of %lld)",
                            QG_MAX_M, (long long)M, (long long)K);
    if (N == 0) return OJ_OK;
    const size_t rb = (size_t)blocks->shape[1];
    float *o = (float *)oj_cuda_ptr(out);
    const float *xp = (const float *)oj_cuda_ptr(x);
    const uint8_t *w = (const uint8_t *)oj_cuda_ptr(blocks);
    const bool fast = eng->numerics == OJ_NUMERICS_FAST && oj__env_flag("OJAS_CUDA_QGEMV_FAST", true);
    /* fp8 rows: one (OJAS_CUDA_QGEMV_FP8ROW unset or not "0"; "2": two) a warp */
    if (fast && qtype == QK_FP8 && oj__env_flag("OJAS_CUDA_QGEMV_FP8ROW", true) &&
        oj_cu_aligned16(w) && K % 16 == 0 && rb == (size_t)(16 + K) && K <= ((int64_t)1 << 30)) {
        if (oj__env_int("OJAS_CUDA_QGEMV_FP8ROW", 1) == 2) fr_launch<2>(M, o, xp, w, N, K, rb);
        else fr_launch<1>(M, o, xp, w, N, K, rb);
        return oj_cuda_check(eng, "qgemv_fp8row");
    }
    qf_plan plan;
    if (fast && oj_cu_aligned16(w) &&
        qf_make_plan(M, K, rb, oj__env_flag("OJAS_CUDA_QGEMV_XS", true), &plan)) {
        const oj_cuda_state *s = oj_cuda_state_of(eng);
        cudaError_t e;
        switch (qtype) {
        case QK_Q8_0: e = qf_launch_m<QK_Q8_0>(s, M, o, xp, w, N, K, rb, plan); break;
        case QK_Q4_0: e = qf_launch_m<QK_Q4_0>(s, M, o, xp, w, N, K, rb, plan); break;
        case QK_Q4_1: e = qf_launch_m<QK_Q4_1>(s, M, o, xp, w, N, K, rb, plan); break;
        case QK_FP8: e = qf_launch_m<QK_FP8>(s, M, o, xp, w, N, K, rb, plan); break;
        default: e = qf_launch_m<QK_Q4_K>(s, M, o, xp, w, N, K, rb, plan); break;
        }
        if (e != cudaSuccess) return oj_cuda_fail(eng, e, "qgemv_fast (launch set-up)");
        return oj_cuda_check(eng, "qgemv_fast");
    }
    switch (qtype) {
    case QK_Q8_0: launch_qgemv<QK_Q8_0>(M, o, xp, w, N, K, rb); break;
    case QK_Q4_0: launch_qgemv<QK_Q4_0>(M, o, xp, w, N, K, rb); break;
    case QK_Q4_1: launch_qgemv<QK_Q4_1>(M, o, xp, w, N, K, rb); break;
    case QK_FP8: launch_qgemv<QK_FP8>(M, o, xp, w, N, K, rb); break;
    default: launch_qgemv<QK_Q4_K>(M, o, xp, w, N, K, rb); break;
    }
    return oj_cuda_check(eng, "qgemv");
}

// W blocks (N, row bytes) -> out (N, K) f32 or bf16
template <int T, typename O>
__global__ void k_qdequant(O *out, const uint8_t *w, int64_t N, int64_t K, size_t row_bytes) {
    const int64_t nb = K / 32;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * nb;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = i / nb, b = i - n * nb;
        float v[32];
        deq_block<T>(w + (size_t)n * row_bytes, b, v);
        O *o = out + n * K + b * 32;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            if constexpr (sizeof(O) == 4) o[j] = v[j];
            else o[j] = __float2bfloat16_rn(v[j]);
        }
    }
}

template <typename O>
static void launch_qdequant(int qtype, O *out, const uint8_t *w, int64_t N, int64_t K,
                            size_t rb) {
    const unsigned grid = oj_cuda_blocks(N * (K / 32));
    switch (qtype) {
    case QK_Q8_0: k_qdequant<QK_Q8_0, O><<<grid, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(out, w, N, K, rb); break;
    case QK_Q4_0: k_qdequant<QK_Q4_0, O><<<grid, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(out, w, N, K, rb); break;
    case QK_Q4_1: k_qdequant<QK_Q4_1, O><<<grid, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(out, w, N, K, rb); break;
    case QK_FP8: k_qdequant<QK_FP8, O><<<grid, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(out, w, N, K, rb); break;
    default: k_qdequant<QK_Q4_K, O><<<grid, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(out, w, N, K, rb); break;
    }
}

oj_status oj_cuda_qdequant(oj_engine *eng, oj_tensor *out, const oj_tensor *blocks, int qtype) {
    const char *op = "dequantize";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK ||
        oj_cuda_need_contig(eng, blocks, op, "w") != OJ_OK || !qtype_ok(eng, qtype, op))
        return oj_last_status(eng);
    if (out->dtype != OJ_F32 && out->dtype != OJ_BF16)
        return oj_set_error(eng, OJ_ERR_INTERNAL, "dequantize: out is %s; f32 or bf16 expected",
                            oj_dtype_name(out->dtype));
    const int64_t N = out->shape[0], K = out->shape[1];
    if (N == 0 || K == 0) return OJ_OK;
    const size_t rb = (size_t)blocks->shape[1];
    const uint8_t *w = (const uint8_t *)oj_cuda_ptr(blocks);
    if (out->dtype == OJ_F32) launch_qdequant(qtype, (float *)oj_cuda_ptr(out), w, N, K, rb);
    else launch_qdequant(qtype, (__nv_bfloat16 *)oj_cuda_ptr(out), w, N, K, rb);
    return oj_cuda_check(eng, "qdequant");
}
