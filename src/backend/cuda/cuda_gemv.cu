/* One-row matrix multiply for batch-1 decoding: out[1, N] (+)= x[1, K] @ B[K, N]
 * on bf16/f16 operands, f32 accumulation, out rounded once (with
 * `accumulate` the f32 sum is added to out's old value, then rounded). The
 * cuBLAS GEMMs of a GPT-2 124M decode step took ~5 us each (plus ~3 us
 * split-K reduces on some) for 1-5 MB of weights; these kernels stream the
 * weight once with 16-byte loads, every load of an iteration issued before
 * any use (the launch bounds' minimum blocks let ptxas keep them all in
 * registers: 52-80 a thread "nk", 72-124 "kn", no spills).
 *
 * Two layouts of the weight (W the stored matrix):
 *  - "nk": B[k, n] = W[n, k] (nn.Linear, the tied lm head): B's k-stride 1.
 *    One warp per output n, four per 128-thread block, grid ceil(N / 4).
 *    Lane l reads the 16-byte chunks l, l + 32, ... of W's row n and of x
 *    (x is 1.5-6 KB, served by L1), U = 4 (K <= 1024) or 8 chunks of each
 *    in flight, f32 FMAs in chunk order, then a xor butterfly over the warp.
 *  - "kn": B[k, n] = W[k, n] (HF Conv1D: c_attn, c_fc, c_proj): B's
 *    n-stride 1. A 256-thread block owns 8 G consecutive outputs: G 8 or 4
 *    when that still leaves >= 256 blocks, else 2 (a block reads 32-byte
 *    sectors of a row whole); chosen from N alone. Thread t = s G + g
 *    owns the outputs 8 g .. 8 g + 7 of the tile (one 16-byte load a row)
 *    and the rows k = s, s + 256 / G, ...; U = 8 rows in flight (16 when a
 *    thread has more than 8). Sums are combined by a xor butterfly over
 *    the lanes of one column group, then over the 8 warps in warp order
 *    through shared memory. Long, narrow products (training's bias
 *    gradient, ones [1, 16384] @ dy [16384, 768]: 48 blocks over N alone)
 *    split K over a second grid dimension (launch_kn).
 * Every order of summation is fixed by (N, K): the same bits on every run
 * and every GPU, no atomics.
 *
 * Expected time per call, an estimate until measured on the device (H200
 * at ~4 TB/s, plus ~1 us of DRAM latency and ramp; launch gaps not
 * counted), bf16 weights of GPT-2 124M:
 *   c_attn      kn K 768  N 2304   3.5 MB  144 blocks, one round  ~2 us
 *   attn c_proj kn K 768  N 768    1.2 MB   48 blocks, one round  ~1.3 us
 *   c_fc        kn K 768  N 3072   4.7 MB  192 blocks, one round  ~2.2 us
 *   mlp c_proj  kn K 3072 N 768    4.7 MB   48 blocks, two rounds ~2.5-3 us
 *   lm head     nk K 768  N 50257   77 MB  12,565 blocks          ~19 us
 * (the nn.Linear layouts of the same shapes about the same): ~8-9 us a
 * layer instead of ~25, ~120 us of a token's GEMMs instead of ~300. */
#include <cuda_fp16.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/gemv_tiles.h"
#include "core/env.h"

/* The entries (declared in cuda_matmul.cu, their one caller). */
#define OJ_CUDA_GEMV_NK 1
#define OJ_CUDA_GEMV_KN 2
int oj_cuda_gemv_path(const oj_tensor *out, const oj_tensor *a, const oj_tensor *b);
oj_status oj_cuda_gemv(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                       const void *addend, int path);

#define NK_THREADS 128 /* 4 warps, one output row each */
#define KN_THREADS OJ_GEMV_KN_THREADS /* 8 warps splitting K */
/* Blocks a multiprocessor should hold: caps the registers at 128 a thread,
 * and keeps ptxas from interleaving the loads with their uses (without a
 * minimum it aims at full occupancy, 32 registers, and a load chain). */
#define NK_MIN_BLOCKS 4
#define KN_MIN_BLOCKS 2

/* "nk": out[n] (+)= sum_k x[k] W[n, k]; W rows ldw elements apart, K8 =
 * K / 8 chunks of 16 bytes; x, W and ldw 16-byte aligned. */
template <typename T, int U>
__global__ void __launch_bounds__(NK_THREADS, NK_MIN_BLOCKS)
    k_gemv_nk(unsigned short *out, const unsigned short *x, const unsigned short *w, int64_t ldw,
              int N, int K8, const unsigned short *add) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * (NK_THREADS / 32) + (threadIdx.x >> 5);
    if (n >= N) return; /* the whole warp; the kernel has no block barrier */
    const uint4 *wr = (const uint4 *)(w + n * ldw), *xr = (const uint4 *)x;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    float s = 0.0f;
    for (int c0 = 0; c0 < K8; c0 += 32 * U) {
        uint4 wv[U], xv[U];
#pragma unroll
        for (int u = 0; u < U; u++) { /* every load first */
            const int c = c0 + u * 32 + lane;
            const bool ok = c < K8;
            wv[u] = ok ? __ldcs(wr + c) : zero; /* streamed once per token */
            xv[u] = ok ? __ldg(xr + c) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float wf[8], xf[8];
            oj_cu_unpackv<T, 8>(wv[u], wf);
            oj_cu_unpackv<T, 8>(xv[u], xf);
#pragma unroll
            for (int e = 0; e < 8; e++) s = fmaf(wf[e], xf[e], s);
        }
    }
    s = oj_cu_warp_sumf(s);
    if (lane == 0) {
        if (add) s += oj_cu_hw_tof(T{add[n]});
        out[n] = oj_cu_fromf<T>(s).u;
    }
}

/* "kn": out[n] (+)= sum_k x[k * xs] W[k, n]; W rows ldw elements apart
 * (ldw and W 16-byte aligned), W's n-stride 1; x any stride. When N is not
 * a multiple of 8 the last group reads a row's 16-byte chunk past N (in
 * the row's padding, which oj_cuda_gemv_path checked is inside W's
 * storage); those columns' sums are dropped. */
template <typename T, int G, int U>
__global__ void __launch_bounds__(KN_THREADS, KN_MIN_BLOCKS)
    k_gemv_kn(unsigned short *out, const unsigned short *x, int64_t xs, const unsigned short *w,
              int64_t ldw, int N, int K, const unsigned short *add, int64_t kb, float *part) {
    constexpr int KS = KN_THREADS / G; /* k-slices of the block */
    /* split K (part != NULL): block row y sums rows [y kb, (y + 1) kb) */
    const int64_t kbeg = part ? (int64_t)blockIdx.y * kb : 0;
    const int64_t kend = part && kbeg + kb < K ? kbeg + kb : K;
    __shared__ float red[KN_THREADS / 32][8 * G];
    const int t = threadIdx.x, g = t % G, s = t / G;
    const int64_t n0 = ((int64_t)blockIdx.x * G + g) * 8;
    /* a group past N (the last block's) reads group 0 and stores nothing */
    const unsigned short *wc = w + (n0 < N ? n0 : 0);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    float a[8];
#pragma unroll
    for (int e = 0; e < 8; e++) a[e] = 0.0f;
    for (int64_t k0 = kbeg + s; k0 < kend; k0 += (int64_t)KS * U) {
        uint4 wv[U];
        unsigned short xv[U];
#pragma unroll
        for (int u = 0; u < U; u++) { /* every load first (predicated off past the slice) */
            const int64_t k = k0 + (int64_t)u * KS;
            const bool ok = k < kend;
            wv[u] = ok ? __ldcs((const uint4 *)(wc + k * ldw)) : zero; /* streamed once */
            xv[u] = ok ? __ldg(x + k * xs) : (unsigned short)0;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (k0 + (int64_t)u * KS >= kend) break;
            float wf[8];
            oj_cu_unpackv<T, 8>(wv[u], wf);
            const float xf = oj_cu_hw_tof(T{xv[u]});
#pragma unroll
            for (int e = 0; e < 8; e++) a[e] = fmaf(wf[e], xf, a[e]);
        }
    }
    /* lanes l and l ^ o (o >= G) share a column group: butterfly over them */
#pragma unroll
    for (int o = G; o < 32; o <<= 1)
#pragma unroll
        for (int e = 0; e < 8; e++) a[e] += __shfl_xor_sync(0xffffffffu, a[e], o);
    const int lane = t & 31, wp = t >> 5;
    if (lane < G) /* lane == g: the warp's sums of group g */
#pragma unroll
        for (int e = 0; e < 8; e++) red[wp][lane * 8 + e] = a[e];
    __syncthreads();
    if (t < 8 * G) {
        const int64_t n = (int64_t)blockIdx.x * 8 * G + t;
        if (n < N) {
            float v = 0.0f;
#pragma unroll
            for (int i = 0; i < KN_THREADS / 32; i++) v += red[i][t];
            if (part) {
                part[(int64_t)blockIdx.y * N + n] = v;
                return;
            }
            if (add) v += oj_cu_hw_tof(T{add[n]});
            out[n] = oj_cu_fromf<T>(v).u;
        }
    }
}

/* out[n] = (sum over the S slices' partial sums of column n, in slice
 * order) (+ add[n]), rounded once: the end of a split-K "kn" product. */
template <typename T>
__global__ void k_gemv_kn_combine(unsigned short *out, const float *part, int S, int N,
                                  const unsigned short *add) {
    const int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float v = 0.0f;
    for (int y = 0; y < S; y++) v += part[(int64_t)y * N + n];
    if (add) v += oj_cu_hw_tof(T{add[n]});
    out[n] = oj_cu_fromf<T>(v).u;
}

int oj_cuda_gemv_path(const oj_tensor *out, const oj_tensor *a, const oj_tensor *b) {
    static int off = -1; /* OJAS_CUDA_GEMV=0 turns the path off (comparisons) */
    if (off < 0) {
        off = !oj__env_flag("OJAS_CUDA_GEMV", true);
    }
    oj_dtype dt = out->dtype;
    if (off || (dt != OJ_BF16 && dt != OJ_F16) || a->dtype != dt || b->dtype != dt) return 0;
    if (out->rank != 3 || a->rank != 3 || b->rank != 3) return 0;
    int64_t bt = out->shape[0], M = out->shape[1], N = out->shape[2], K = a->shape[2];
    if (bt != 1 || M != 1 || N < 1 || K < 1 || N > INT_MAX || K > INT_MAX) return 0;
    if (N > 1 && out->stride[2] != 1) return 0;
    int64_t xs = a->stride[2], bk = b->stride[1], bn = b->stride[2];
    const char *pa = oj_cuda_ptr(a), *pb = oj_cuda_ptr(b);
    if (xs < 0 || bk < 0 || bn < 0 || !oj_cu_aligned16(pb)) return 0;
    if (bk == 1 && K % 8 == 0 && (N == 1 || bn % 8 == 0) && xs == 1 && oj_cu_aligned16(pa))
        return OJ_CUDA_GEMV_NK;
    if ((bn != 1 && N > 1) || (K > 1 && bk % 8 != 0)) return 0;
    /* whole 16-byte chunks of every row: the last row's, up to N rounded
     * up to 8, must lie inside the storage */
    int64_t end = (K - 1) * bk + (N + 7) / 8 * 8;
    if (b->offset + end * 2 > (int64_t)b->storage->nbytes) return 0;
    return OJ_CUDA_GEMV_KN;
}

/* The tiles (backend/gemv_tiles.h, shared with ops/nn_decode.c, which
 * decides from them whether the fused decode entries give these bits):
 * column groups of 8 per block, the widest (8, 4 groups) that still
 * leaves >= 256 blocks, else 2, from N alone; 8 for long K.
 * Split K for long, narrow products (a bias gradient: ones [1, rows] @
 * dy [rows, N]): fewer than OJ_GEMV_KN_SPLIT_BLOCKS blocks over N alone
 * leave most multiprocessors idle, so the rows are cut into S slices of
 * whole k-slice rounds (at least 16 rows a thread each), partial sums go
 * to f32 scratch [S, N] and a second kernel adds them in slice order. S
 * depends on (N, K) only: the same bits on every GPU. */

template <typename T>
static oj_status launch_kn(oj_engine *eng, unsigned short *o, const unsigned short *x,
                           int64_t xs, const unsigned short *w, int64_t ldw, int N, int K,
                           const unsigned short *add) {
    /* long K: 8 column groups (128 bytes of a row per warp load: with 2,
     * 32-byte pieces of rows 1.5 KB apart kept DRAM at ~2 TB/s) */
    const oj_gemv_kn_tiles tl = oj_gemv_kn_plan(N, K);
    const int G = tl.G, KS = KN_THREADS / G;
    const unsigned blocks = (unsigned)tl.blocks;
    int64_t rows = tl.rows; /* per thread */
    int64_t S = tl.S;
    int64_t kb = K; /* rows per slice, a multiple of KS */
    float *part = NULL;
    oj_storage *hold = NULL;
    if (S > 1) {
        kb = ((K + S - 1) / S + KS - 1) / KS * KS;
        S = (K + kb - 1) / kb;
        rows = kb / KS;
        part = (float *)oj_cuda_scratch(eng, (size_t)(S * N) * sizeof(float), "matmul (gemv)",
                                        &hold);
        if (part == NULL) return oj_last_status(eng);
    }
    dim3 grid(blocks, (unsigned)S);
#define KN_(G_, U_)                                                                             \
    k_gemv_kn<T, G_, U_><<<grid, KN_THREADS, 0, OJ_STREAM>>>(o, x, xs, w, ldw, N, K, add, kb,  \
                                                             part)
    if (G == 2) {
        if (rows <= 8) KN_(2, 8);
        else KN_(2, 16);
    } else if (G == 4) {
        if (rows <= 8) KN_(4, 8);
        else KN_(4, 16);
    } else {
        if (rows <= 8) KN_(8, 8);
        else KN_(8, 16);
    }
#undef KN_
    if (part) {
        k_gemv_kn_combine<T><<<(unsigned)((N + 255) / 256), 256, 0, OJ_STREAM>>>(o, part, (int)S,
                                                                              N, add);
        oj__storage_release(hold); /* later users run after these kernels (one stream) */
    }
    return OJ_OK;
}

oj_status oj_cuda_gemv(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                       const void *addend, int path) {
    int64_t N = out->shape[2], K = a->shape[2];
    unsigned short *o = (unsigned short *)oj_cuda_ptr(out);
    const unsigned short *x = (const unsigned short *)oj_cuda_ptr(a);
    const unsigned short *w = (const unsigned short *)oj_cuda_ptr(b);
    const unsigned short *add = (const unsigned short *)addend;
    bool bf = out->dtype == OJ_BF16;
    if (path == OJ_CUDA_GEMV_NK) {
        int64_t ldw = N > 1 ? b->stride[2] : 0;
        unsigned blocks = (unsigned)((N + NK_THREADS / 32 - 1) / (NK_THREADS / 32));
        int K8 = (int)(K / 8);
        bool small = K <= 32 * 8 * 4; /* every chunk of a lane in one round of 4 */
        if (bf && small)
            k_gemv_nk<oj_cu_bf16, 4><<<blocks, NK_THREADS, 0, OJ_STREAM>>>(o, x, w, ldw, (int)N, K8, add);
        else if (bf)
            k_gemv_nk<oj_cu_bf16, 8><<<blocks, NK_THREADS, 0, OJ_STREAM>>>(o, x, w, ldw, (int)N, K8, add);
        else if (small)
            k_gemv_nk<oj_cu_f16, 4><<<blocks, NK_THREADS, 0, OJ_STREAM>>>(o, x, w, ldw, (int)N, K8, add);
        else
            k_gemv_nk<oj_cu_f16, 8><<<blocks, NK_THREADS, 0, OJ_STREAM>>>(o, x, w, ldw, (int)N, K8, add);
        return OJ_OK;
    }
    int64_t ldw = K > 1 ? b->stride[1] : 0, xs = K > 1 ? a->stride[2] : 0;
    if (bf) return launch_kn<oj_cu_bf16>(eng, o, x, xs, w, ldw, (int)N, (int)K, add);
    return launch_kn<oj_cu_f16>(eng, o, x, xs, w, ldw, (int)N, (int)K, add);
}
