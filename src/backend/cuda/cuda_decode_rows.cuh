/* The per-row arithmetic of the batch-1 decode projections, as __device__
 * functions shared by the fast step's kernels (cuda_decode.cu, k_dec_kn:
 * one projection a launch) and the persistent step (cuda_decode_mega.cu:
 * every projection of several layers in one launch), so both compute each
 * output in the same order and give the same bits. cuda_decode.cu's head
 * comment describes the scheme: a block of OJ_DEC_THREADS threads stages
 * the row (normalised) in shared memory, then owns a tile of 8 G
 * consecutive outputs; thread t = s G + g sums rows k = s, s + 256 / G,
 * ... of its 8 columns in order (f32 FMAs), then a xor butterfly over the
 * column group's lanes and a sum over the 8 warps in warp order; the
 * epilogue rounds where the unfused ops round. How the weights are loaded
 * (U rows in flight, before or after a wait) changes no sum.
 *
 * CG (coherent): the row, the residual and the cache slot are read
 * through L2 (ld.global.cg), not L1: the persistent step reads values
 * other blocks of the same launch wrote, which a stale L1 line could hide. */
#ifndef OJAS_CUDA_DECODE_ROWS_CUH
#define OJAS_CUDA_DECODE_ROWS_CUH

#include "backend/cuda/cuda_internal.cuh"
#include "backend/scalar_ops.h"

#define OJ_DEC_THREADS 256

enum { EPI_PLAIN = 0, EPI_GELU = 1, EPI_RESID = 2 };

struct proj_args {
    unsigned short *out;       /* [N]; the residual x with EPI_RESID (read and written) */
    const unsigned short *in;  /* the row [K] */
    const unsigned short *nw, *nb; /* the norm's weight and bias [K] (NORM) */
    double eps;
    const unsigned short *w; /* [K, N], rows ldw elements apart */
    int64_t ldw;
    int N, K;
    const unsigned short *bias; /* [N] or NULL */
    unsigned short *kv;         /* [2, H, S, D] or NULL */
    const int64_t *slot;
    int C, D, H;
    int64_t S;
    bool late; /* let the next kernel launch after the wait, not before (oj_cuda_decode_late_trigger) */
};

__device__ __forceinline__ float dec_sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

/* v rounded to T and back (the value a store then a load gives). */
template <typename T> __device__ __forceinline__ float dec_round(float v) {
    return oj_cu_hw_tof(oj_cu_fromf<T>(v));
}

/* *p, through L2 when CG. */
template <bool CG> __device__ __forceinline__ unsigned short dec_ld(const unsigned short *p) {
    if constexpr (CG) return __ldcg(p);
    else return *p;
}

/* wv[u] = the 16-byte chunk of row k0 + u KS (zeros past K), every load
 * issued before any use. */
template <int U>
__device__ __forceinline__ void load_round(uint4 *wv, const unsigned short *wc, int64_t ldw,
                                           int k0, int KS, int K) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int k = k0 + u * KS;
        wv[u] = k < K ? __ldcs((const uint4 *)(wc + (int64_t)k * ldw)) : zero;
    }
}

/* The row [K] into xs as floats, src(k) giving element k (a T value as a
 * float; called once for each k, by thread k % OJ_DEC_THREADS), with NORM
 * normalised as the layer_norm kernel (cuda_nn_norm.cu, k_norm_fwd_fast)
 * computes it, in its order and arithmetic, and rounded to T: its bits.
 * A block of OJ_DEC_THREADS threads; red: 32 floats of shared memory.
 * Ends with a barrier: xs is ready for every thread. */
template <typename T, bool NORM, typename Src>
__device__ __forceinline__ void dec_stage_row(float *xs, float *red, Src src,
                                              const unsigned short *nw, const unsigned short *nb,
                                              double eps, int K) {
    const int t = threadIdx.x;
    float s1 = 0.0f;
    for (int k = t; k < K; k += OJ_DEC_THREADS) {
        const float v = src(k);
        xs[k] = v;
        s1 += v;
    }
    if (NORM) {
        /* the layer_norm kernel's arithmetic (cuda_nn_norm.cu,
         * k_norm_fwd_fast) in its order, so u has its bits: rows of up to
         * 1024 take its warp mode (lane l sums x[l], x[l + 32], ... in
         * order, then a xor butterfly; every warp here computes the same
         * statistics), longer ones its 256-thread block mode (thread t sums
         * x[t], x[t + 256], ..., then oj_cu_row_sumf, as below) */
        float mean, var;
        if (K <= 1024) {
            __syncthreads(); /* every x staged */
            const int lane = t & 31;
            float s = 0.0f;
            for (int k = lane; k < K; k += 32) s += xs[k];
            mean = oj_cu_warp_sumf(s) / (float)K;
            float d2 = 0.0f;
            for (int k = lane; k < K; k += 32) {
                const float d = xs[k] - mean;
                d2 += d * d;
            }
            var = oj_cu_warp_sumf(d2) / (float)K;
        } else {
            /* each thread reads back only the entries it wrote: no barrier
             * before the sums (oj_cu_row_sumf synchronises the block) */
            mean = oj_cu_row_sumf<OJ_DEC_THREADS>(s1, red) / (float)K;
            float d2 = 0.0f;
            for (int k = t; k < K; k += OJ_DEC_THREADS) {
                const float d = xs[k] - mean;
                d2 += d * d;
            }
            var = oj_cu_row_sumf<OJ_DEC_THREADS>(d2, red) / (float)K;
        }
        const float rstd = (float)(1.0 / sqrt((double)var + eps));
        __syncthreads(); /* the warps' reads of xs before its rewrite */
        for (int k = t; k < K; k += OJ_DEC_THREADS) { /* each step rounded, no fma */
            float u = __fmul_rn(xs[k] - mean, rstd);
            u = __fmul_rn(u, oj_cu_hw_tof(T{nw[k]}));
            xs[k] = dec_round<T>(__fadd_rn(u, oj_cu_hw_tof(T{nb[k]})));
        }
    }
    __syncthreads();
}

/* The first round of tile `tile`'s weights into wv (depends on no other
 * kernel's output: may load before any wait). */
template <int G, int U>
__device__ __forceinline__ void dec_kn_first(uint4 (&wv)[U], const proj_args &a, int64_t tile) {
    constexpr int KS = OJ_DEC_THREADS / G; /* k-slices */
    const int t = threadIdx.x, g = t % G, s = t / G;
    const int64_t n0 = (tile * G + g) * 8;
    const unsigned short *wc = a.w + (n0 < a.N ? n0 : 0); /* past N: group 0, nothing stored */
    load_round<U>(wv, wc, a.ldw, s, KS, a.K);
}

/* Outputs tile 8 G .. tile 8 G + 8 G - 1 of the projection of the staged
 * row xs [K], the first round of weights in wv (dec_kn_first), then the
 * epilogue (one thread per output): v = round_T(sum + b[n]); GELU:
 * round_T(v sigmoid(2 u(v))) with the elementwise kernels' fast formula;
 * residual: out[n] = round_T(out[n] + v); KV: columns C .. 3C also stored
 * at the cache slot read from the device. part: shared [8][8 G]. Every
 * thread of the block calls it; it ends without a barrier (a caller that
 * reuses part syncs first). */
template <typename T, int G, int U, int EPI, bool CG>
__device__ __forceinline__ void dec_kn_product(const proj_args &a, uint4 (&wv)[U], const float *xs,
                                               float (*part)[8 * G], int64_t tile) {
    const int t = threadIdx.x, K = a.K;
    constexpr int KS = OJ_DEC_THREADS / G; /* k-slices */
    const int g = t % G, s = t / G;
    const int64_t n0 = (tile * G + g) * 8;
    const unsigned short *wc = a.w + (n0 < a.N ? n0 : 0);
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    for (int k0 = s; k0 < K; k0 += KS * U) {
        if (k0 != s) load_round<U>(wv, wc, a.ldw, k0, KS, K);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = k0 + u * KS;
            if (k >= K) break;
            float wf[8];
            oj_cu_unpackv<T, 8>(wv[u], wf);
            const float xf = xs[k];
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = fmaf(wf[e], xf, acc[e]);
        }
    }
    /* lanes l and l ^ o (o >= G) share a column group */
#pragma unroll
    for (int o = G; o < 32; o <<= 1)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
    const int lane = t & 31, wp = t >> 5;
    if (lane < G)
#pragma unroll
        for (int e = 0; e < 8; e++) part[wp][lane * 8 + e] = acc[e];
    __syncthreads();
    /* ---- epilogue: one thread per output */
    const int64_t n = tile * 8 * G + t;
    if (t >= 8 * G || n >= a.N) return;
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < OJ_DEC_THREADS / 32; i++) v += part[i][t];
    if (a.bias) v += oj_cu_hw_tof(T{a.bias[n]});
    v = dec_round<T>(v); /* the linear's output */
    if (EPI == EPI_GELU) v = dec_round<T>(v * dec_sigmoid(2.0f * OJ_GELU_TANH_KF * (v + 0.044715f * v * v * v)));
    if (EPI == EPI_RESID) v = dec_round<T>(oj_cu_hw_tof(T{dec_ld<CG>(a.out + n)}) + v);
    const unsigned short bits = oj_cu_fromf<T>(v).u; /* exact: v is a T value */
    a.out[n] = bits;
    if (a.kv && n >= a.C && n < 3 * (int64_t)a.C) {
        const int64_t slot = *a.slot;
        if (slot >= 0 && slot < a.S) {
            const int64_t j = n - a.C, which = j / a.C, hd = j % a.C;
            const int64_t h = hd / a.D, d = hd % a.D;
            a.kv[((which * a.H + h) * a.S + slot) * a.D + d] = bits;
        }
    }
}

#endif /* OJAS_CUDA_DECODE_ROWS_CUH */
