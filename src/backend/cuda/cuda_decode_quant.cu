/* Batch-1 decode with block-quantized weights (backend.h: decode_qlinear):
 * the fused projections of cuda_decode.cu for a weight stored in the ggml
 * layouts of include/ojas/quant.h (q8_0, q4_0, q4_1 in blocks of 32, q4_k
 * in super-blocks of 256), W [N, K] row by row (oj_qtensor's blocks, U8
 * [N, row bytes]), with the dequantization in the product's inner loop,
 * so a quantized gpt2 layer's decode step is the same six launches as a
 * bf16 one (models/gpt_decode_quant.c).
 *
 * One kernel, k_dec_q, templated on the storage type T of the row, norm,
 * bias, output and cache (f32, bf16, f16), the block format Q and the
 * epilogue (fp8: E4M3 with one f32 scale a row, two values a hardware
 * cvt); 128 threads a block, R consecutive output rows a block (R a
 * power of two <= 32, the largest that still leaves >= 264 blocks, two
 * an H200 SM, and a tile of <= 16 KB):
 *  - weights: the block's R rows are one contiguous, 16-byte aligned span
 *    of R * row bytes (row bytes a multiple of 16: K a multiple of 256
 *    makes it one for every format), loaded by all 128 threads as 16-byte
 *    chunks, at most 8 a thread, every load issued before the wait for
 *    the previous kernel (a programmatic dependent, cuda_pdl.cuh), then
 *    stored to shared memory: one round of coalesced 128-bit loads covers
 *    the whole matrix, whatever the block size of the format (34, 18 and
 *    20-byte blocks are not 16-byte aligned one by one; 8 of them, 256
 *    elements, are); the next kernel is released after the wait
 *    (OJAS_DECODE_PDL_EARLY=1: before it, oj_cuda_decode_late_trigger);
 *  - with OJAS_DECODE_QPRE=1, where every lane has at most two blocks of
 *    32 to multiply (PRE: gpt2 124M's four matrices a layer), the lanes
 *    instead dequantize them into registers before the wait and fold the
 *    norm's weight and bias in (see k_dec_q), so that after the wait only
 *    the row's staging, its statistics (each warp its own) and the fused
 *    multiply-adds remain (slower on the H200 as measured, dq_pre);
 *    otherwise as follows:
 *  - prologue: the row x [K] staged in shared memory as floats, 36 floats
 *    a block of 32 (the padding makes lane l's float4 reads of block l
 *    conflict-free); with the norm, the block computes the row's mean and
 *    variance (two block sums, fixed order) and stores u = (x - mean) rstd
 *    w + b rounded to T (the layer_norm's value up to the order of its
 *    sums);
 *  - product: the pairs (row, part of K) go to the 4 warps (one row takes
 *    4 / R warps when R < 4; warp w has pairs w, w + 4, ..., at most 8);
 *    lane l of a warp takes the blocks of 32 l, l + 32 WPR, ... of its
 *    part: it reads the block of x (and its sum, for a format with a min)
 *    once, then for each of the warp's rows the block's scale (and min)
 *    and quants from shared memory, sums q_j x_j in f32 with fused
 *    multiply-adds in element order (the quants made floats by dq_i2f's
 *    exact bit trick, not I2F), and adds d * sum (- m * sum x); the lanes
 *    are combined by a xor butterfly and a row's warps in warp order (the
 *    same bits on every run, no atomics). That is the row loop of
 *    OJAS_DECODE_QLOOP=1 (measured slower, see dq_loop); by default
 *    the pairs go one by one, each lane reading x's block again for each
 *    row and widening the quants by I2F (dq_dot; OJAS_DECODE_QLOOP=2:
 *    by dq_i2f, dq_dotx), the same bits;
 *  - the head (decode_qnorm_head): the epilogue also ends a greedy step,
 *    each block's best logit to scratch and the last block to arrive
 *    writing the argmax, pos + 1 and the kept token (dq_head_end);
 *  - epilogue (thread r for row r): v = round_T(sum + b[n]); GELU:
 *    round_T(v sigmoid(2 u(v))) (the elementwise kernels' fast formula);
 *    residual: x[n] = round_T(x[n] + v); KV: columns C .. 3C also stored
 *    at the cache slot read from the device, as cuda_decode.cu.
 * The values are x @ dequantize(W)^T up to the f32 order of the sums (the
 * scale applied once a block instead of to each weight; with PRE the
 * norm's output not rounded to T and folded into the sums): FAST numerics,
 * the generic step's (oj_qmatmul's dequantizing GEMV) within f32
 * summation error. Bytes a gpt2 124M step reads: about 1.06 (q8_0) and
 * 0.56 to 0.63 (q4) bytes a weight against bf16's 2. */
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_q4k.cuh"
#include "backend/scalar_ops.h"
#include "core/env.h"

/* The entries (declared in cuda_backend.cu, their one user). */
oj_status oj_cuda_decode_qlinear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                 const oj_tensor *nw, const oj_tensor *nb, double eps,
                                 const oj_tensor *blocks, int qtype, int64_t K,
                                 const oj_tensor *b, int epi, oj_tensor *kv,
                                 const oj_tensor *slot);
oj_status oj_cuda_decode_qnorm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                    const oj_tensor *nw, const oj_tensor *nb, double eps,
                                    const oj_tensor *blocks, int qtype, int64_t K,
                                    oj_tensor *tok, oj_tensor *pos, oj_tensor *hist);

/* oj_qtype's numbers (ojas/quant.h is C; the values are its ABI). */
enum { DQ_Q8_0 = 0, DQ_Q4_0 = 1, DQ_Q4_1 = 2, DQ_Q4_K = 3, DQ_FP8 = 4 };
enum { DQ_PLAIN = 0, DQ_GELU = 1, DQ_RESID = 2 };

#define DQ_THREADS 128
#define DQ_WARPS (DQ_THREADS / 32)
#define DQ_U 8              /* 16-byte weight loads a thread, at most */
#define DQ_TILE (DQ_THREADS * DQ_U * 16) /* bytes of weights a block, at most */
#define DQ_MAX_R 32
#define DQ_XPAD 36          /* floats of shared memory a block of 32 of x */
#define DQ_MIN_BLOCKS 264   /* two blocks an SM of an H200 (132 SMs) */

struct qproj_args {
    void *out;         /* [N] T; the residual x with DQ_RESID (read and written) */
    const void *in;    /* the row [K] T */
    const void *nw, *nb; /* the norm's weight and bias [K] T (NORM) */
    double eps;
    const uint8_t *w;  /* [N, row_bytes] */
    int64_t row_bytes;
    int N, K, R;
    const void *bias;  /* [N] T or NULL */
    void *kv;          /* [2, H, S, D] T or NULL */
    const int64_t *slot;
    int C, D, H;
    int64_t S;
    bool late; /* release the next kernel after the wait (oj_cuda_decode_late_trigger) */
    int loop; /* the product's loop (dq_loop): 0 pairs + dq_dot, 1 rows, 2 pairs + dq_dotx */
    /* the head's end (decode_qnorm_head; NULL: none): tok = the argmax of
     * out, *pos += 1, hist[*pos] = tok where hist is not NULL and *pos <
     * nhist; bv, bi [grid] each block's best, count the arrival counter */
    int64_t *tok, *pos, *hist;
    long long nhist;
    float *bv;
    int *bi;
    unsigned int *count;
};

template <typename T> __device__ __forceinline__ float dq_ld(const void *p, int64_t i) {
    return oj_cu_hw_tof(((const T *)p)[i]);
}

/* v rounded to T and back (the value a store then a load gives). */
template <typename T> __device__ __forceinline__ float dq_round(float v) {
    return oj_cu_hw_tof(oj_cu_fromf<T>(v));
}

__device__ __forceinline__ float dq_f16(unsigned short h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ float dq_sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

/* The 32 values of x for block b (padded layout), 16-byte reads. */
__device__ __forceinline__ void dq_xblock(const float *xb, float *xf) {
    const float4 *x4 = (const float4 *)xb;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float4 v = x4[j];
        xf[4 * j] = v.x;
        xf[4 * j + 1] = v.y;
        xf[4 * j + 2] = v.z;
        xf[4 * j + 3] = v.w;
    }
}

/* An integer 0 <= v < 2^23 minus o - 2^23, as a float, without an
 * integer-to-float conversion (I2F issues at 1/8 of the FMA rate on
 * sm_90, and the product did one a weight): the bits 0x4B000000 | v are
 * the float 2^23 + v, and subtracting o (2^23 plus a small integer) is
 * exact, both being integers below 2^24. The value (float)((int)v - (o -
 * 2^23)) has. */
#define DQ_2P23 8388608.0f
__device__ __forceinline__ float dq_i2f(unsigned v, float o) {
    return __int_as_float(0x4B000000u | v) - o;
}

/* The sums of x over a block of 32 that dq_dotx's formats with a min
 * take (q4_1, q4_k), in the order dq_dot adds them; 0 for the others
 * (each row of a warp reuses it). */
template <int Q> __device__ __forceinline__ float dq_xsum(const float *xf) {
    float sx0 = 0.0f, sx1 = 0.0f;
    if (Q == DQ_Q4_1) {
#pragma unroll
        for (int i = 0; i < 16; i++) {
            sx0 += xf[i];
            sx1 += xf[i + 16];
        }
    } else if (Q == DQ_Q4_K) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            sx0 += xf[4 * j] + xf[4 * j + 2];
            sx1 += xf[4 * j + 1] + xf[4 * j + 3];
        }
    }
    return sx0 + sx1;
}

/* dq_dot with x's 32 values in registers (xf) and their sum sx
 * (dq_xsum<Q>): the same fused multiply-adds on the same values, so the
 * same bits, with the quants widened by dq_i2f and q4_k's head (d, dmin
 * and the 12 scale bytes) in one 16-byte load. */
template <int Q>
__device__ __forceinline__ float dq_dotx(const uint8_t *row, int b, const float *xf, float sx) {
    float s0 = 0.0f, s1 = 0.0f;
    if (Q == DQ_Q8_0) {
        const unsigned short *h = (const unsigned short *)(row + (int64_t)b * 34);
        const float d = dq_f16(h[0]);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const unsigned q = h[1 + j] ^ 0x8080u; /* int8 + 128 in each byte */
            s0 = fmaf(dq_i2f(q & 0xff, DQ_2P23 + 128.0f), xf[2 * j], s0);
            s1 = fmaf(dq_i2f(q >> 8, DQ_2P23 + 128.0f), xf[2 * j + 1], s1);
        }
        return d * (s0 + s1);
    } else if (Q == DQ_Q4_0) {
        const unsigned short *h = (const unsigned short *)(row + (int64_t)b * 18);
        const float d = dq_f16(h[0]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const unsigned q = h[1 + j];
            s0 = fmaf(dq_i2f(q & 15, DQ_2P23 + 8.0f), xf[2 * j], s0);
            s1 = fmaf(dq_i2f(q >> 8 & 15, DQ_2P23 + 8.0f), xf[2 * j + 1], s1);
            s0 = fmaf(dq_i2f(q >> 4 & 15, DQ_2P23 + 8.0f), xf[2 * j + 16], s0);
            s1 = fmaf(dq_i2f(q >> 12, DQ_2P23 + 8.0f), xf[2 * j + 17], s1);
        }
        return d * (s0 + s1);
    } else if (Q == DQ_Q4_1) {
        const unsigned *u = (const unsigned *)(row + (int64_t)b * 20);
        const unsigned dm = u[0];
        const float d = dq_f16((unsigned short)(dm & 0xffff)), m = dq_f16((unsigned short)(dm >> 16));
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned q = u[1 + j];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 4 * j + e;
                s0 = fmaf(dq_i2f(q >> (8 * e) & 15, DQ_2P23), xf[i], s0);
                s1 = fmaf(dq_i2f(q >> (8 * e + 4) & 15, DQ_2P23), xf[i + 16], s1);
            }
        }
        return fmaf(m, sx, d * (s0 + s1));
    } else if (Q == DQ_FP8) {
        const uint4 *q4 = (const uint4 *)(row + 16 + (int64_t)b * 32);
        const uint4 qa = q4[0], qb = q4[1];
        const unsigned qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float2 lo = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)(qw[j] & 0xffff), __NV_E4M3)));
            const float2 hi = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)(qw[j] >> 16), __NV_E4M3)));
            s0 = fmaf(lo.x, xf[4 * j], s0);
            s1 = fmaf(lo.y, xf[4 * j + 1], s1);
            s0 = fmaf(hi.x, xf[4 * j + 2], s0);
            s1 = fmaf(hi.y, xf[4 * j + 3], s1);
        }
        return *(const float *)row * (s0 + s1);
    } else { /* q4_k */
        const uint8_t *p = row + (int64_t)(b >> 3) * 144;
        const int s = b & 7;
        const uint4 hd = *(const uint4 *)p; /* d, dmin; scale bytes 0..3, 4..7, 8..11 */
        int ls, lm;
        q4k_scale_min_w(hd.y, hd.z, hd.w, s, &ls, &lm);
        const float d = dq_f16((unsigned short)(hd.x & 0xffff)) * dq_i2f((unsigned)ls, DQ_2P23);
        const float m = dq_f16((unsigned short)(hd.x >> 16)) * dq_i2f((unsigned)lm, DQ_2P23);
        const uint4 *q4 = (const uint4 *)(p + 16 + 32 * (s >> 1));
        const int sh = 4 * (s & 1);
        const uint4 qa = q4[0], qb = q4[1];
        const unsigned qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const unsigned q = qw[j] >> sh;
            s0 = fmaf(dq_i2f(q & 15, DQ_2P23), xf[4 * j], s0);
            s1 = fmaf(dq_i2f(q >> 8 & 15, DQ_2P23), xf[4 * j + 1], s1);
            s0 = fmaf(dq_i2f(q >> 16 & 15, DQ_2P23), xf[4 * j + 2], s0);
            s1 = fmaf(dq_i2f(q >> 24 & 15, DQ_2P23), xf[4 * j + 3], s1);
        }
        return fmaf(-m, sx, d * (s0 + s1));
    }
}

/* sum_j W[row, 32 b + j] x[32 b + j] for block b of a row in shared
 * memory (row: the row's first byte, 16-byte aligned), x the block's 32
 * values (padded layout). Two chains of fused multiply-adds (even and odd
 * elements), added at the end. The default product's (dq_loop;
 * dq_dotx gives the same bits). */
template <int Q>
__device__ __forceinline__ float dq_dot(const uint8_t *row, int b, const float *xb) {
    float xf[32];
    dq_xblock(xb, xf);
    float s0 = 0.0f, s1 = 0.0f;
    if (Q == DQ_Q8_0) { /* 34 bytes: d, int8 q[32]; 2-byte aligned */
        const unsigned short *h = (const unsigned short *)(row + (int64_t)b * 34);
        const float d = dq_f16(h[0]);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const unsigned short q = h[1 + j];
            s0 = fmaf((float)(int8_t)(q & 0xff), xf[2 * j], s0);
            s1 = fmaf((float)(int8_t)(q >> 8), xf[2 * j + 1], s1);
        }
        return d * (s0 + s1);
    } else if (Q == DQ_Q4_0) { /* 18 bytes: d, qs[16]; 2-byte aligned */
        const unsigned short *h = (const unsigned short *)(row + (int64_t)b * 18);
        const float d = dq_f16(h[0]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const unsigned q = h[1 + j]; /* qs[2 j], qs[2 j + 1] */
            s0 = fmaf((float)((int)(q & 15) - 8), xf[2 * j], s0);
            s1 = fmaf((float)((int)(q >> 8 & 15) - 8), xf[2 * j + 1], s1);
            s0 = fmaf((float)((int)(q >> 4 & 15) - 8), xf[2 * j + 16], s0);
            s1 = fmaf((float)((int)(q >> 12) - 8), xf[2 * j + 17], s1);
        }
        return d * (s0 + s1);
    } else if (Q == DQ_Q4_1) { /* 20 bytes: d, m, qs[16]; 4-byte aligned */
        const unsigned *u = (const unsigned *)(row + (int64_t)b * 20);
        const unsigned dm = u[0];
        const float d = dq_f16((unsigned short)(dm & 0xffff)), m = dq_f16((unsigned short)(dm >> 16));
        float sx0 = 0.0f, sx1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned q = u[1 + j]; /* qs[4 j .. 4 j + 3] */
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 4 * j + e;
                s0 = fmaf((float)(q >> (8 * e) & 15), xf[i], s0);
                s1 = fmaf((float)(q >> (8 * e + 4) & 15), xf[i + 16], s1);
                sx0 += xf[i];
                sx1 += xf[i + 16];
            }
        }
        return fmaf(m, sx0 + sx1, d * (s0 + s1));
    } else if (Q == DQ_FP8) { /* the row's f32 scale; block b's 32 E4M3 bytes 16-byte aligned */
        const uint4 *q4 = (const uint4 *)(row + 16 + (int64_t)b * 32);
        const uint4 qa = q4[0], qb = q4[1];
        const unsigned qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 8; j++) { /* bytes 4 j .. 4 j + 3: two pairs, exact in f16 */
            const float2 lo = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)(qw[j] & 0xffff), __NV_E4M3)));
            const float2 hi = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)(qw[j] >> 16), __NV_E4M3)));
            s0 = fmaf(lo.x, xf[4 * j], s0);
            s1 = fmaf(lo.y, xf[4 * j + 1], s1);
            s0 = fmaf(hi.x, xf[4 * j + 2], s0);
            s1 = fmaf(hi.y, xf[4 * j + 3], s1);
        }
        return *(const float *)row * (s0 + s1);
    } else { /* q4_k: sub-block s of super-block b / 8 (144 bytes, 16-byte aligned) */
        const uint8_t *p = row + (int64_t)(b >> 3) * 144;
        const int s = b & 7;
        const unsigned short *h = (const unsigned short *)p;
        const uint8_t *sc = p + 4;
        int ls, lm;
        q4k_scale_min(sc, s, &ls, &lm);
        const float d = dq_f16(h[0]) * (float)ls, m = dq_f16(h[1]) * (float)lm;
        const uint4 *q4 = (const uint4 *)(p + 16 + 32 * (s >> 1));
        const int sh = 4 * (s & 1);
        const uint4 qa = q4[0], qb = q4[1];
        const unsigned qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
        float sx0 = 0.0f, sx1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const unsigned q = qw[j] >> sh; /* bytes 4 j .. 4 j + 3, this sub-block's nibbles low */
            s0 = fmaf((float)(q & 15), xf[4 * j], s0);
            s1 = fmaf((float)(q >> 8 & 15), xf[4 * j + 1], s1);
            s0 = fmaf((float)(q >> 16 & 15), xf[4 * j + 2], s0);
            s1 = fmaf((float)(q >> 24 & 15), xf[4 * j + 3], s1);
            sx0 += xf[4 * j] + xf[4 * j + 2];
            sx1 += xf[4 * j + 1] + xf[4 * j + 3];
        }
        return fmaf(-m, sx0 + sx1, d * (s0 + s1));
    }
}

/* The 32 values block b of a row in shared memory encodes, by the
 * formulas of oj_dequantize_row with the products and sums rounded apart
 * (the CPU's bits, as cuda_quant.cu's deq_block). */
template <int Q> __device__ __forceinline__ void dq_deq(const uint8_t *row, int b, float *w) {
    if (Q == DQ_Q8_0) {
        const unsigned short *h = (const unsigned short *)(row + (int64_t)b * 34);
        const float d = dq_f16(h[0]);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const unsigned short q = h[1 + j];
            w[2 * j] = __fmul_rn((float)(int8_t)(q & 0xff), d);
            w[2 * j + 1] = __fmul_rn((float)(int8_t)(q >> 8), d);
        }
    } else if (Q == DQ_Q4_0) {
        const unsigned short *h = (const unsigned short *)(row + (int64_t)b * 18);
        const float d = dq_f16(h[0]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const unsigned q = h[1 + j];
            w[2 * j] = __fmul_rn((float)((int)(q & 15) - 8), d);
            w[2 * j + 1] = __fmul_rn((float)((int)(q >> 8 & 15) - 8), d);
            w[2 * j + 16] = __fmul_rn((float)((int)(q >> 4 & 15) - 8), d);
            w[2 * j + 17] = __fmul_rn((float)((int)(q >> 12) - 8), d);
        }
    } else if (Q == DQ_Q4_1) {
        const unsigned *u = (const unsigned *)(row + (int64_t)b * 20);
        const unsigned dm = u[0];
        const float d = dq_f16((unsigned short)(dm & 0xffff)), m = dq_f16((unsigned short)(dm >> 16));
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned q = u[1 + j];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                w[4 * j + e] = __fadd_rn(__fmul_rn((float)(q >> (8 * e) & 15), d), m);
                w[4 * j + e + 16] = __fadd_rn(__fmul_rn((float)(q >> (8 * e + 4) & 15), d), m);
            }
        }
    } else if (Q == DQ_FP8) {
        const float sc = *(const float *)row;
        const uint4 *q4 = (const uint4 *)(row + 16 + (int64_t)b * 32);
        const uint4 qa = q4[0], qb = q4[1];
        const unsigned qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float2 lo = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)(qw[j] & 0xffff), __NV_E4M3)));
            const float2 hi = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)(qw[j] >> 16), __NV_E4M3)));
            w[4 * j] = __fmul_rn(sc, lo.x);
            w[4 * j + 1] = __fmul_rn(sc, lo.y);
            w[4 * j + 2] = __fmul_rn(sc, hi.x);
            w[4 * j + 3] = __fmul_rn(sc, hi.y);
        }
    } else { /* q4_k */
        const uint8_t *p = row + (int64_t)(b >> 3) * 144;
        const int s = b & 7;
        const unsigned short *h = (const unsigned short *)p;
        const uint8_t *sc = p + 4;
        int ls, lm;
        q4k_scale_min(sc, s, &ls, &lm);
        const float d = __fmul_rn(dq_f16(h[0]), (float)ls), m = __fmul_rn(dq_f16(h[1]), (float)lm);
        const uint4 *q4 = (const uint4 *)(p + 16 + 32 * (s >> 1));
        const int sh = 4 * (s & 1);
        const uint4 qa = q4[0], qb = q4[1];
        const unsigned qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const unsigned q = qw[j] >> sh;
#pragma unroll
            for (int e = 0; e < 4; e++) w[4 * j + e] = __fsub_rn(__fmul_rn(d, (float)(q >> (8 * e) & 15)), m);
        }
    }
}

/* The 32 elements of a T vector from element e0 (16-byte loads where the
 * address allows), as floats. */
template <typename T> __device__ __forceinline__ void dq_ld32(const void *p, int64_t e0, float *f) {
    const T *q = (const T *)p + e0;
    if (oj_cu_aligned16(q)) {
        constexpr int V = 16 / (int)sizeof(T);
#pragma unroll
        for (int j = 0; j < 32; j += V) oj_cu_unpackv<T, V>(*(const uint4 *)(q + j), f + j);
    } else {
#pragma unroll
        for (int j = 0; j < 32; j++) f[j] = oj_cu_hw_tof(q[j]);
    }
}

/* sum_j w[j] x[j] over a block of 32 (x padded), four chains of fused
 * multiply-adds. */
__device__ __forceinline__ float dq_dot32(const float *w, const float *xb) {
    const float4 *x4 = (const float4 *)xb;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float4 v = x4[j];
        s[0] = fmaf(w[4 * j], v.x, s[0]);
        s[1] = fmaf(w[4 * j + 1], v.y, s[1]);
        s[2] = fmaf(w[4 * j + 2], v.z, s[2]);
        s[3] = fmaf(w[4 * j + 3], v.w, s[3]);
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* (v, i) ranks before (bv, bi): a NaN above every number, then the larger
 * value, then the lower index (cuda_decode.cu's am_before: the order of
 * decode_argmax_advance). */
__device__ __forceinline__ bool dq_before(float v, int i, float bv, int bi) {
    const bool n = v != v, bn = bv != bv;
    if (n != bn) return n;
    if (!n && v != bv) return v > bv;
    return i < bi;
}

/* (bv, bi) = the best of the warp's lanes' (dq_before: a total order, so
 * the butterfly's order does not matter). */
__device__ __forceinline__ void dq_warp_best(float &bv, int &bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (dq_before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
}

/* The head's end, every thread of the block: (v, i) thread t's output
 * (rows are threads 0 .. R - 1 <= 31, one warp; others -inf, INT_MAX).
 * The block's best goes to a.bv, a.bi [blockIdx.x]; the block that
 * arrives last on a.count (reset there for the next launch) takes the
 * best of the blocks', writes *tok, advances *pos and keeps the token in
 * hist: decode_argmax_advance's token (the logits are T values read back
 * as floats in both). red: >= DQ_WARPS floats of shared memory. */
template <typename A>
__device__ __forceinline__ void dq_head_end(const A &a, float v, int i, float *red) {
    __shared__ int hbi[DQ_WARPS];
    __shared__ bool last;
    const int t = threadIdx.x, lane = t & 31, wp = t >> 5;
    float bv = v;
    int bi = i;
    if (wp == 0) dq_warp_best(bv, bi);
    if (t == 0) {
        a.bv[blockIdx.x] = bv;
        a.bi[blockIdx.x] = bi;
        __threadfence(); /* the best visible device-wide before the arrival counts */
        last = atomicAdd(a.count, 1u) == gridDim.x - 1;
        if (last) *a.count = 0; /* every block has arrived */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY;
    bi = INT_MAX;
    for (unsigned b = t; b < gridDim.x; b += DQ_THREADS) {
        const float ov = __ldcg(a.bv + b); /* written by other blocks of this kernel */
        const int oi = __ldcg(a.bi + b);
        if (dq_before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    dq_warp_best(bv, bi);
    if (lane == 0) red[wp] = bv, hbi[wp] = bi;
    __syncthreads();
    if (t == 0) {
        for (int w = 1; w < DQ_WARPS; w++)
            if (dq_before(red[w], hbi[w], bv, bi)) bv = red[w], bi = hbi[w];
        *a.tok = bi;
        const int64_t q = *a.pos + 1;
        *a.pos = q;
        if (a.hist && q >= 0 && q < a.nhist) a.hist[q] = bi;
    }
}

/* PRE (the layer's four matrices of gpt2 124M: every lane has at most two
 * blocks of 32 to multiply): before the wait each lane dequantizes its
 * blocks into registers and, with the norm, folds its weight and bias in:
 * w'_j = w_j g_j, S1 = sum_j w'_j, S2 = sum_j w_j b_j, so that after the
 * wait sum_j w_j u_j = rstd (sum_j w'_j x_j - mean S1) + S2 needs only the
 * raw row and its statistics (u = (x - mean) rstd g + b, not rounded to T:
 * FAST numerics); the statistics come from each warp itself (two passes
 * over the staged row, fixed order), the row's only barrier its staging.
 * Otherwise (the head: many rows a warp) the loop below dequantizes in the
 * product's inner loop after the norm has rewritten the row. */
template <typename T, int Q, bool NORM, int EPI, bool PRE>
__global__ void __launch_bounds__(DQ_THREADS) k_dec_q(qproj_args a) {
    extern __shared__ __align__(16) uint8_t dq_sm[]; /* tile [R row_bytes], then xs */
    __shared__ float red[32];
    __shared__ float part[DQ_MAX_R]; /* pairs: max(R, DQ_WARPS) <= DQ_MAX_R */
    const int t = threadIdx.x, K = a.K, R = a.R;
    const int64_t row0 = (int64_t)blockIdx.x * R;
    const int rows = (int)((int64_t)a.N - row0 < R ? (int64_t)a.N - row0 : R);
    const int nchunks = (int)((int64_t)rows * a.row_bytes / 16);
    const uint4 *src = (const uint4 *)(a.w + row0 * a.row_bytes);
    /* ---- the weights: they depend on no earlier kernel, so they load
     * before the wait for the previous kernel */
    uint4 wv[DQ_U];
#pragma unroll
    for (int u = 0; u < DQ_U; u++) {
        const int c = t + u * DQ_THREADS;
        wv[u] = c < nchunks ? __ldcs(src + c) : make_uint4(0, 0, 0, 0);
    }
    if (!a.late) oj_pdl_allow_dependents();
    uint4 *tile = (uint4 *)dq_sm;
    float *xs = (float *)(dq_sm + (int64_t)R * a.row_bytes);
    const int WPR = R >= DQ_WARPS ? 1 : DQ_WARPS / R, pairs = R * WPR, nb = K >> 5;
    const int lane = t & 31, wp = t >> 5;
    if (PRE) {
        /* into shared memory before the wait (the block's own memory) */
#pragma unroll
        for (int u = 0; u < DQ_U; u++) {
            const int c = t + u * DQ_THREADS;
            if (c < nchunks) tile[c] = wv[u];
        }
        /* items i = 0, 1 of this lane: two pairs (p = wp, wp + 4) of one
         * block each, or one pair of up to two blocks */
        const bool two = pairs > DQ_WARPS;
        float wq[2][32], g1[2] = {0.0f, 0.0f}, g2[2] = {0.0f, 0.0f};
        int ib[2];
        bool iv[2];
        __syncthreads(); /* the tile */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int p = wp + (two ? i * DQ_WARPS : 0);
            const int r = p / WPR, sub = p - r * WPR;
            const int b = sub * 32 + lane + (two ? 0 : i * 32 * WPR);
            iv[i] = p < pairs && r < rows && b < nb;
            ib[i] = b;
            if (iv[i]) {
                dq_deq<Q>(dq_sm + (int64_t)r * a.row_bytes, b, wq[i]);
                if (NORM) {
                    float gb[32];
                    dq_ld32<T>(a.nb, (int64_t)b * 32, gb);
#pragma unroll
                    for (int j = 0; j < 32; j++) g2[i] = fmaf(wq[i][j], gb[j], g2[i]);
                    dq_ld32<T>(a.nw, (int64_t)b * 32, gb);
#pragma unroll
                    for (int j = 0; j < 32; j++) {
                        wq[i][j] *= gb[j];
                        g1[i] += wq[i][j];
                    }
                }
            }
        }
        oj_pdl_wait();
        if (a.late) oj_pdl_allow_dependents();
        for (int k = t; k < K; k += DQ_THREADS) xs[(k >> 5) * DQ_XPAD + (k & 31)] = dq_ld<T>(a.in, k);
        __syncthreads();
        float mean = 0.0f, rstd = 1.0f;
        if (NORM) { /* every warp the same statistics, in the same order */
            float s = 0.0f;
            for (int k = lane; k < K; k += 32) s += xs[(k >> 5) * DQ_XPAD + (k & 31)];
            mean = oj_cu_warp_sumf(s) / (float)K;
            float d2 = 0.0f;
            for (int k = lane; k < K; k += 32) {
                const float d = xs[(k >> 5) * DQ_XPAD + (k & 31)] - mean;
                d2 += d * d;
            }
            const float var = oj_cu_warp_sumf(d2) / (float)K;
            rstd = (float)(1.0 / sqrt((double)var + a.eps));
        }
        float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if (!iv[i]) continue;
            float d = dq_dot32(wq[i], xs + ib[i] * DQ_XPAD);
            if (NORM) d = fmaf(d - mean * g1[i], rstd, g2[i]);
            if (two && i == 1) acc1 += d;
            else acc0 += d;
        }
        acc0 = oj_cu_warp_sumf(acc0);
        if (lane == 0) part[wp] = acc0;
        if (two) {
            acc1 = oj_cu_warp_sumf(acc1);
            if (lane == 0) part[wp + DQ_WARPS] = acc1;
        }
    } else {
        oj_pdl_wait();
        if (a.late) oj_pdl_allow_dependents();
#pragma unroll
        for (int u = 0; u < DQ_U; u++) {
            const int c = t + u * DQ_THREADS;
            if (c < nchunks) tile[c] = wv[u];
        }
        /* ---- prologue: the row (normalised) into xs, padded */
        float s1 = 0.0f;
        for (int k = t; k < K; k += DQ_THREADS) {
            const float v = dq_ld<T>(a.in, k);
            xs[(k >> 5) * DQ_XPAD + (k & 31)] = v;
            s1 += v;
        }
        if (NORM) {
            /* each thread reads back only the entries it wrote: no barrier
             * before the sums (oj_cu_row_sumf synchronises the block) */
            const float mean = oj_cu_row_sumf<DQ_THREADS>(s1, red) / (float)K;
            float d2 = 0.0f;
            for (int k = t; k < K; k += DQ_THREADS) {
                const float d = xs[(k >> 5) * DQ_XPAD + (k & 31)] - mean;
                d2 += d * d;
            }
            const float var = oj_cu_row_sumf<DQ_THREADS>(d2, red) / (float)K;
            const float rstd = (float)(1.0 / sqrt((double)var + a.eps));
            for (int k = t; k < K; k += DQ_THREADS) {
                const int i = (k >> 5) * DQ_XPAD + (k & 31);
                float u = __fmul_rn(xs[i] - mean, rstd);
                u = __fmul_rn(u, dq_ld<T>(a.nw, k));
                xs[i] = dq_round<T>(__fadd_rn(u, dq_ld<T>(a.nb, k)));
            }
        }
        __syncthreads();
        if (a.loop != 1) {
            /* ---- the product: pair p = (row p / WPR, part p % WPR) */
            for (int p = wp; p < pairs; p += DQ_WARPS) {
                const int r = p / WPR, sub = p - r * WPR;
                float acc = 0.0f;
                if (r < rows) {
                    const uint8_t *row = dq_sm + (int64_t)r * a.row_bytes;
                    for (int b = sub * 32 + lane; b < nb; b += 32 * WPR) {
                        if (a.loop == 2) { /* dq_dotx's widening, the same bits */
                            float xf[32];
                            dq_xblock(xs + b * DQ_XPAD, xf);
                            acc += dq_dotx<Q>(row, b, xf, dq_xsum<Q>(xf));
                        } else {
                            acc += dq_dot<Q>(row, b, xs + b * DQ_XPAD);
                        }
                    }
                }
                acc = oj_cu_warp_sumf(acc);
                if (lane == 0) part[p] = acc;
            }
        } else {
            /* ---- the product: warp wp has the pairs p = wp + 4 i (at most
             * 8: R <= 32), all of part wp % WPR (WPR divides 4); lane l
             * takes the blocks b = 32 part + l, b + 32 WPR, ..., reads x's
             * block once and multiplies it by each pair's row, each row's
             * sum over b in the order of the loop above */
            constexpr int NP = DQ_MAX_R / DQ_WARPS;
            const int np = (pairs - wp + DQ_WARPS - 1) / DQ_WARPS, sub = wp % WPR;
            float acc[NP];
#pragma unroll
            for (int i = 0; i < NP; i++) acc[i] = 0.0f;
            for (int b = sub * 32 + lane; b < nb; b += 32 * WPR) {
                float xf[32];
                dq_xblock(xs + b * DQ_XPAD, xf);
                const float sx = dq_xsum<Q>(xf);
#pragma unroll
                for (int i = 0; i < NP; i++) {
                    const int r = (wp + i * DQ_WARPS) / WPR;
                    if (i < np && r < rows)
                        acc[i] += dq_dotx<Q>(dq_sm + (int64_t)r * a.row_bytes, b, xf, sx);
                }
            }
#pragma unroll
            for (int i = 0; i < NP; i++) {
                if (i >= np) break;
                const float v = oj_cu_warp_sumf(acc[i]);
                if (lane == 0) part[wp + i * DQ_WARPS] = v;
            }
        }
    }
    __syncthreads();
    /* ---- epilogue: one thread per output row */
    const int64_t n = row0 + t;
    float v = 0.0f;
    if (t < rows) {
        for (int i = 0; i < WPR; i++) v += part[t * WPR + i];
        if (a.bias) v += dq_ld<T>(a.bias, n);
        v = dq_round<T>(v); /* the linear's output */
        if (EPI == DQ_GELU)
            v = dq_round<T>(v * dq_sigmoid(2.0f * OJ_GELU_TANH_KF * (v + 0.044715f * v * v * v)));
        if (EPI == DQ_RESID) v = dq_round<T>(dq_ld<T>(a.out, n) + v);
        const T o = oj_cu_fromf<T>(v); /* exact: v is a T value */
        ((T *)a.out)[n] = o;
        if (a.kv && n >= a.C && n < 3 * (int64_t)a.C) {
            const int64_t slot = *a.slot;
            if (slot >= 0 && slot < a.S) {
                const int64_t j = n - a.C, which = j / a.C, hd = j % a.C;
                const int64_t h = hd / a.D, d = hd % a.D;
                ((T *)a.kv)[((which * a.H + h) * a.S + slot) * a.D + d] = o;
            }
        }
    }
    if constexpr (NORM && EPI == DQ_PLAIN) /* the head's instance */
        if (a.tok) dq_head_end(a, t < rows ? v : -INFINITY, t < rows ? (int)n : INT_MAX, red);
}

/* Rows a block: the largest power of two <= DQ_MAX_R whose tile fits
 * DQ_TILE and that leaves >= DQ_MIN_BLOCKS blocks (1 when none does). */
static int dq_rows(int64_t N, int64_t row_bytes) {
    int R = DQ_MAX_R;
    while (R > 1 && (R * row_bytes > DQ_TILE || (N + R - 1) / R < DQ_MIN_BLOCKS)) R /= 2;
    return R;
}

/* The product's loop, OJAS_DECODE_QLOOP: unset or 0, pair by pair with
 * dq_dot (the quants widened by I2F, x's block read again for each row;
 * the default); 1, the row loop (dq_dotx, x's block read once for a
 * warp's rows); 2, pair by pair with dq_dotx (the quants widened by
 * dq_i2f, q4_k's head in one load; unmeasured). The same bits every way.
 * The row loop measured slower on the H200 (2026-12-02, d748308, gpt2
 * 124M's step with the fused head: q4_k 0.798x bf16 against 0.881x, fp8
 * 0.872x against 0.969x; its 8-row unrolled body is several times the
 * code of the pair loop in kernels of a few microseconds). Read at each
 * launch (a test compares them). */
static int dq_loop(void) {
    const int64_t v = oj__env_int("OJAS_DECODE_QLOOP", 0);
    return v == 1 || v == 2 ? (int)v : 0;
}

/* Whether k_dec_q runs PRE: OJAS_DECODE_QPRE=1 (default off: on the H200
 * at cfed885 it made gpt2 124M's step 16-20% slower than the loop, which
 * dequantizes after the wait), and every lane of a block has at most two
 * blocks of 32: one pair a warp of up to two blocks, or two pairs of one;
 * with the norm also K <= 1024 (each warp computes the statistics over
 * all of K). */
static bool dq_pre(const qproj_args &a, bool norm) {
    static int on = -1;
    if (on < 0) on = oj__env_flag("OJAS_DECODE_QPRE", false);
    if (!on) return false;
    const int WPR = a.R >= DQ_WARPS ? 1 : DQ_WARPS / a.R, pairs = a.R * WPR, nb = a.K / 32;
    if (norm && a.K > 1024) return false;
    return (pairs == DQ_WARPS && nb <= 64 * WPR) || (pairs == 2 * DQ_WARPS && nb <= 32);
}

template <typename T, int Q, bool NORM, int EPI> static void dq_launch(const qproj_args &a_in) {
    qproj_args a = a_in;
    a.late = oj_cuda_decode_late_trigger();
    a.loop = dq_loop();
    const unsigned blocks = (unsigned)((a.N + a.R - 1) / a.R);
    const size_t smem = (size_t)a.R * (size_t)a.row_bytes + (size_t)(a.K / 32) * DQ_XPAD * sizeof(float);
    if (dq_pre(a, NORM))
        oj_pdl_launch(k_dec_q<T, Q, NORM, EPI, true>, dim3(blocks), dim3(DQ_THREADS), smem, a);
    else
        oj_pdl_launch(k_dec_q<T, Q, NORM, EPI, false>, dim3(blocks), dim3(DQ_THREADS), smem, a);
}

template <typename T, bool NORM, int EPI> static void dq_launch_q(int qtype, const qproj_args &a) {
    switch (qtype) {
    case DQ_Q8_0: dq_launch<T, DQ_Q8_0, NORM, EPI>(a); break;
    case DQ_Q4_0: dq_launch<T, DQ_Q4_0, NORM, EPI>(a); break;
    case DQ_Q4_1: dq_launch<T, DQ_Q4_1, NORM, EPI>(a); break;
    case DQ_FP8: dq_launch<T, DQ_FP8, NORM, EPI>(a); break;
    default: dq_launch<T, DQ_Q4_K, NORM, EPI>(a); break;
    }
}

template <typename T> static void dq_launch_t(int qtype, bool norm, int epi, const qproj_args &a) {
    if (epi == DQ_RESID) dq_launch_q<T, false, DQ_RESID>(qtype, a);
    else if (norm && epi == DQ_GELU) dq_launch_q<T, true, DQ_GELU>(qtype, a);
    else if (norm) dq_launch_q<T, true, DQ_PLAIN>(qtype, a);
    else if (epi == DQ_GELU) dq_launch_q<T, false, DQ_GELU>(qtype, a);
    else dq_launch_q<T, false, DQ_PLAIN>(qtype, a);
}

/* decode_qlinear's work, and with tok (decode_qnorm_head) the head's end:
 * op names the entry in errors. */
static oj_status dq_run(oj_engine *eng, const char *op, oj_tensor *out, const oj_tensor *x,
                        const oj_tensor *nw, const oj_tensor *nb, double eps,
                        const oj_tensor *blocks, int qtype, int64_t K, const oj_tensor *b,
                        int epi, oj_tensor *kv, const oj_tensor *slot, oj_tensor *tok,
                        oj_tensor *pos, oj_tensor *hist) {
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    qproj_args a = {};
    a.out = oj_cuda_ptr(out);
    a.in = oj_cuda_ptr(x);
    a.nw = nw ? oj_cuda_ptr(nw) : NULL;
    a.nb = nb ? oj_cuda_ptr(nb) : NULL;
    a.eps = eps;
    a.w = (const uint8_t *)oj_cuda_ptr(blocks);
    a.row_bytes = blocks->shape[1];
    a.N = (int)blocks->shape[0];
    a.K = (int)K;
    a.bias = b ? oj_cuda_ptr(b) : NULL;
    if (qtype < DQ_Q8_0 || qtype > DQ_FP8 || a.row_bytes % 16 || !oj_cu_aligned16(a.w) ||
        K % 32 || K > 4096 || (nw == NULL) != (nb == NULL) || (nw && epi == DQ_RESID) ||
        (tok && (nw == NULL || epi != DQ_PLAIN || b || kv)))
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: quantized type %d, K %lld, row bytes %lld: the ops layer "
                            "promised a supported case", op, qtype, (long long)K,
                            (long long)a.row_bytes);
    if (a.N == 0) return OJ_OK;
    a.R = dq_rows(a.N, a.row_bytes);
    if (kv) {
        a.kv = oj_cuda_ptr(kv);
        a.slot = (const int64_t *)oj_cuda_ptr(slot);
        a.H = (int)kv->shape[2];
        a.S = kv->shape[3];
        a.D = (int)kv->shape[4];
        a.C = a.H * a.D;
    }
    oj_storage *hold = NULL;
    if (tok) {
        const size_t blocks_n = (size_t)((a.N + a.R - 1) / a.R);
        void *sc = oj_cuda_scratch(eng, blocks_n * (sizeof(float) + sizeof(int)), op, &hold);
        if (sc == NULL) return oj_last_status(eng);
        a.bv = (float *)sc;
        a.bi = (int *)(a.bv + blocks_n);
        a.tok = (int64_t *)oj_cuda_ptr(tok);
        a.pos = (int64_t *)oj_cuda_ptr(pos);
        a.hist = hist ? (int64_t *)oj_cuda_ptr(hist) : NULL;
        a.nhist = hist ? (long long)oj_cuda_numel(hist) : 0;
        a.count = oj_cuda_state_of(eng)->counts + OJ_CUDA_COUNT_QHEAD;
    }
    const bool norm = nw != NULL;
    switch (out->dtype) {
    case OJ_F32: dq_launch_t<float>(qtype, norm, epi, a); break;
    case OJ_BF16: dq_launch_t<oj_cu_bf16>(qtype, norm, epi, a); break;
    default: dq_launch_t<oj_cu_f16>(qtype, norm, epi, a); break;
    }
    oj__storage_release(hold); /* later users run after this kernel (one stream) */
    return oj_cuda_check(eng, op);
}

oj_status oj_cuda_decode_qlinear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                 const oj_tensor *nw, const oj_tensor *nb, double eps,
                                 const oj_tensor *blocks, int qtype, int64_t K,
                                 const oj_tensor *b, int epi, oj_tensor *kv,
                                 const oj_tensor *slot) {
    return dq_run(eng, "decode_qlinear", out, x, nw, nb, eps, blocks, qtype, K, b, epi, kv, slot,
                  NULL, NULL, NULL);
}

oj_status oj_cuda_decode_qnorm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                    const oj_tensor *nw, const oj_tensor *nb, double eps,
                                    const oj_tensor *blocks, int qtype, int64_t K,
                                    oj_tensor *tok, oj_tensor *pos, oj_tensor *hist) {
    return dq_run(eng, "decode_qnorm_head", out, x, nw, nb, eps, blocks, qtype, K, NULL,
                  DQ_PLAIN, NULL, NULL, tok, pos, hist);
}
