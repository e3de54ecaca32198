/* Block-quantized weights on the GPU (backend.h: qgemv, qdequant): the
 * ggml layouts of include/ojas/quant.h (q8_0, q4_0, q4_1 in blocks of 32,
 * q4_k in super-blocks of 256 with eight sub-blocks of 32) and fp8 (E4M3
 * with one f32 scale a row, converted by the hardware: sm_89 and later).
 *
 * qgemv, batch-1 (to 8 rows) decode: the dequantization is the GEMV's
 * prologue. One warp per output row n, four per 128-thread block, grid
 * ceil(N / 4); lane l takes the blocks of 32 l, l + 32, ... of W's row n,
 * dequantizes each block's 32 weights in registers (f32, the formulas of
 * oj_dequantize_row) and adds w * x for each of the M rows of x in f32 in
 * element order; the 32 lanes' sums are combined by a xor butterfly. The
 * weight is read once for all M rows; x (M K f32, at most 8 rows) is
 * served by L1/L2. The order of every sum is fixed by (K): the same bits
 * on every run, no atomics. Unlike the CPU's kernels x is not rounded to
 * int8, so the result is the dequantize-then-matmul product up to f32
 * summation order.
 *
 * The dequantized values are the CPU's bit for bit (products and sums
 * rounded apart, no fused multiply-add).
 *
 * qdequant: one thread per block of 32 (row n, block b) writes its 32
 * values, rounded once to f32 or bf16 (prefill: oj_qmatmul multiplies by
 * the bf16 matrix with the GEMM). */
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_q4k.cuh"

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
