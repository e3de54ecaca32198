/* Batch-1 decode entries (backend.h: decode_norm_linear,
 * decode_linear_residual): one row times a bf16/f16 weight W [K, N] stored
 * with n-stride 1 (HF Conv1D, gpt2's c_attn, c_proj, c_fc), with the
 * layer norm before the product and the bias, GELU, KV-cache write or
 * residual add after it in the same kernel, so a gpt2 layer's decode step
 * is six launches (models/gpt_decode_fast.c) where the generic forward
 * takes ten; and decode_norm_head, the step's final norm, head and token
 * in one kernel (below; the fast step's optional head).
 *
 * One kernel, k_dec_kn, templated on the prologue and the epilogue (its
 * per-row arithmetic in cuda_decode_rows.cuh, shared with the persistent
 * step, cuda_decode_mega.cu):
 *  - prologue: the block stages the row x [K] in shared memory as floats
 *    (K <= 8192: 32 KB); with the norm, each block computes the row's mean
 *    and variance itself (two sums over K values, a few hundred
 *    nanoseconds for K = 768) in the layer_norm kernel's order and
 *    arithmetic (its warp mode for K <= 1024, its block mode above) and
 *    stores u = (x - mean) rstd w + b rounded to T: the layer_norm
 *    kernel's bits;
 *  - product: cuda_gemv.cu's "kn" scheme: a 256-thread block owns 8 G
 *    consecutive outputs (G 8, 4 or 2 chosen from N as kn_groups does),
 *    thread t = s G + g loads the 16-byte chunk of outputs 8 g .. 8 g + 7
 *    of rows k = s, s + 256 / G, ..., U rows in flight, f32 FMAs; sums
 *    combined by a xor butterfly over the lanes of a column group, then
 *    over the 8 warps in warp order (a fixed order: the same bits on
 *    every run);
 *  - epilogue (one thread per output): v = round_T(sum + b[n]); GELU:
 *    round_T(v sigmoid(2 u(v))) with the elementwise kernels' fast
 *    formula; residual: x[n] = round_T(x[n] + v); KV: columns C .. 3C also
 *    stored at the cache slot read from the device.
 * Launches are programmatic dependents (PDL, sm_90; OJAS_CUDA_PDL=0: plain
 * launches): a kernel loads its first round of weights, lets the next
 * kernel launch, and only then waits for the previous kernel's output, so
 * launch gaps and the weights' DRAM latency overlap the kernel before.
 * Rounding happens where the unfused ops round and the sums run in their
 * order (the norm's as above, the product's as cuda_gemv.cu's "kn" kernel
 * splits it), so for K < 4096 (where cuda_gemv.cu keeps this tile and
 * splits no K) the outputs are the unfused ops' bits: a gpt2 step up to
 * n_embd 1023 gives the generic step's logits exactly. Longer products
 * sum in another order (cuda_gemv.cu then takes 8 column groups or splits
 * K): FAST numerics. */
#include <cuda_fp16.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_decode_rows.cuh"
#include "backend/cuda/cuda_decode_sample.cuh"
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/scalar_ops.h"
#include "core/env.h"

/* The entries (declared in cuda_backend.cu, their one user). */
oj_status oj_cuda_decode_norm_linear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                     const oj_tensor *nw, const oj_tensor *nb, double eps,
                                     const oj_tensor *w, const oj_tensor *b, int act,
                                     oj_tensor *kv, const oj_tensor *slot);
oj_status oj_cuda_decode_linear_residual(oj_engine *eng, oj_tensor *x, const oj_tensor *y,
                                         const oj_tensor *w, const oj_tensor *b);
oj_status oj_cuda_decode_argmax_advance(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                        oj_tensor *pos);
oj_status oj_cuda_decode_embed_mask(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                                    const oj_tensor *wpe, const oj_tensor *tok,
                                    const oj_tensor *pos, oj_tensor *mask);
oj_status oj_cuda_decode_norm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   const oj_tensor *nw, const oj_tensor *nb, double eps,
                                   const oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                   oj_tensor *step, oj_tensor *hist, const oj__decode_sampler *s);
oj_status oj_cuda_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                                const oj__decode_sampler *s);

#define DEC_THREADS OJ_DEC_THREADS
#define DEC_MIN_BLOCKS 2

/* One projection a launch: block b owns tile b (cuda_decode_rows.cuh). */
template <typename T, int G, int U, bool NORM, int EPI>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MIN_BLOCKS) k_dec_kn(proj_args a) {
    extern __shared__ float xs[]; /* [K] */
    __shared__ float red[32];
    __shared__ float part[DEC_THREADS / 32][8 * G];
    /* ---- the first round of weights: they depend on no earlier kernel,
     * so they load before the wait for the previous kernel (launched as
     * a programmatic dependent, this kernel starts while that one runs) */
    uint4 wv[U];
    dec_kn_first<G, U>(wv, a, blockIdx.x);
    if (!a.late) oj_pdl_allow_dependents();
    oj_pdl_wait();
    if (a.late) oj_pdl_allow_dependents();
    /* ---- prologue: the row (normalised) into xs */
    const unsigned short *in = a.in;
    dec_stage_row<T, NORM>(xs, red, [in](int k) { return oj_cu_hw_tof(T{in[k]}); }, a.nw, a.nb,
                           a.eps, a.K);
    /* ---- the product over this block's 8 G columns, the epilogue */
    dec_kn_product<T, G, U, EPI, false>(a, wv, xs, part, blockIdx.x);
}

/* Column groups of 8 per block: the widest tile (8, 4) that still leaves
 * >= 256 blocks, else 2 (cuda_gemv.cu's kn_groups). */
static int dec_groups(int64_t N) {
    int64_t groups = (N + 7) / 8;
    return groups >= 8 * 256 ? 8 : groups >= 4 * 256 ? 4 : 2;
}

/* The defaults of the switches (docs/architecture.md). */
#define DEC_PDL_EARLY_DEFAULT false
#define DEC_U24_DEFAULT true
#define DEC_HEAD_DRAW_DEFAULT true

/* Declared in cuda_internal.cuh (cuda_decode_quant.cu's projections take
 * it too). OJAS_DECODE_PDL_EARLY unset or 0: the projections and the head
 * let the next kernel launch only once they have waited for the one
 * before (the chain then runs one kernel ahead, not as far as resources
 * allow); 1: before the wait. */
bool oj_cuda_decode_late_trigger(void) {
    static int late = -1; /* read once: a launch-time choice no test flips */
    if (late < 0) late = !oj__env_flag("OJAS_DECODE_PDL_EARLY", DEC_PDL_EARLY_DEFAULT);
    return late != 0;
}

template <typename T, bool NORM, int EPI>
static void dec_launch(const proj_args &a_in) {
    proj_args a = a_in;
    a.late = oj_cuda_decode_late_trigger();
    const int G = dec_groups(a.N);
    const unsigned blocks = (unsigned)((a.N + 8 * G - 1) / (8 * G));
    const size_t smem = (size_t)a.K * sizeof(float);
    const int rows = (a.K + DEC_THREADS / G - 1) / (DEC_THREADS / G); /* per thread */
#define DEC_(G_, U_) oj_pdl_launch(k_dec_kn<T, G_, U_, NORM, EPI>, dim3(blocks), dim3(DEC_THREADS), smem, a)
    if (G == 2) {
        if (rows <= 8) DEC_(2, 8);
        else if (rows <= 16) DEC_(2, 16);
        else if (rows <= 24 && oj__env_flag("OJAS_DECODE_U24", DEC_U24_DEFAULT))
            DEC_(2, 24); /* gpt2's mlp c_proj (K 3072), OJAS_DECODE_U24=1: every row
                          * before the wait (the switch read for these launches alone) */
        else DEC_(2, 16);
    } else if (G == 4) {
        if (rows <= 8) DEC_(4, 8);
        else DEC_(4, 16);
    } else {
        if (rows <= 8) DEC_(8, 8);
        else DEC_(8, 16);
    }
#undef DEC_
}

static proj_args dec_common(const oj_tensor *w, const oj_tensor *b) {
    proj_args a = {};
    a.w = (const unsigned short *)oj_cuda_ptr(w);
    a.ldw = w->stride[0];
    a.K = (int)w->shape[0];
    a.N = (int)w->shape[1];
    a.bias = b ? (const unsigned short *)oj_cuda_ptr(b) : NULL;
    return a;
}

oj_status oj_cuda_decode_norm_linear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                     const oj_tensor *nw, const oj_tensor *nb, double eps,
                                     const oj_tensor *w, const oj_tensor *b, int act,
                                     oj_tensor *kv, const oj_tensor *slot) {
    if (oj_cuda_begin(eng, "decode_norm_linear") != OJ_OK) return oj_last_status(eng);
    proj_args a = dec_common(w, b);
    a.out = (unsigned short *)oj_cuda_ptr(out);
    a.in = (const unsigned short *)oj_cuda_ptr(x);
    a.nw = (const unsigned short *)oj_cuda_ptr(nw);
    a.nb = (const unsigned short *)oj_cuda_ptr(nb);
    a.eps = eps;
    if (kv) {
        a.kv = (unsigned short *)oj_cuda_ptr(kv);
        a.slot = (const int64_t *)oj_cuda_ptr(slot);
        a.H = (int)kv->shape[2];
        a.S = kv->shape[3];
        a.D = (int)kv->shape[4];
        a.C = a.H * a.D;
    }
    const bool bf = out->dtype == OJ_BF16, gelu = act == 1;
    if (bf && gelu) dec_launch<oj_cu_bf16, true, EPI_GELU>(a);
    else if (bf) dec_launch<oj_cu_bf16, true, EPI_PLAIN>(a);
    else if (gelu) dec_launch<oj_cu_f16, true, EPI_GELU>(a);
    else dec_launch<oj_cu_f16, true, EPI_PLAIN>(a);
    return oj_cuda_check(eng, "decode_norm_linear");
}

oj_status oj_cuda_decode_linear_residual(oj_engine *eng, oj_tensor *x, const oj_tensor *y,
                                         const oj_tensor *w, const oj_tensor *b) {
    if (oj_cuda_begin(eng, "decode_linear_residual") != OJ_OK) return oj_last_status(eng);
    proj_args a = dec_common(w, b);
    a.out = (unsigned short *)oj_cuda_ptr(x);
    a.in = (const unsigned short *)oj_cuda_ptr(y);
    if (x->dtype == OJ_BF16) dec_launch<oj_cu_bf16, false, EPI_RESID>(a);
    else dec_launch<oj_cu_f16, false, EPI_RESID>(a);
    return oj_cuda_check(eng, "decode_linear_residual");
}

/* ---------------------------------------------------------------- argmax + advance */
#define AM_THREADS 1024
#define AM_U 8 /* loads in flight a thread */

/* (v, i) ranks before (bv, bi): a NaN above every number, then the larger
 * value, then the lower index. */
__device__ __forceinline__ bool am_before(float v, int i, float bv, int bi) {
    const bool n = v != v, bn = bv != bv;
    if (n != bn) return n;
    if (!n && v != bv) return v > bv;
    return i < bi;
}

/* One block. 16-bit logits at a 16-byte aligned address: thread t takes
 * the 8-element chunks t, t + 1024, ... (AM_U 16-byte loads in flight),
 * then the V % 8 elements past the last chunk one each; otherwise the
 * elements t, t + 1024, ... Then a shuffle tree in each warp and one over
 * the warps. The order of the comparisons does not matter: am_before is a
 * total order. */
template <typename T>
__global__ void __launch_bounds__(AM_THREADS) k_dec_argmax_advance(int64_t *tok, const T *x, int V,
                                                                   int64_t *pos, bool vec) {
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    const int t = threadIdx.x;
    float bv = -INFINITY;
    int bi = INT_MAX;
    int tail = 0; /* the first element the scalar loop takes */
    if constexpr (sizeof(T) == 2) {
        if (vec) {
            const int nch = V / 8;
            const uint4 *xc = (const uint4 *)x;
            for (int c0 = t; c0 < nch; c0 += AM_THREADS * AM_U) {
                uint4 r[AM_U];
#pragma unroll
                for (int u = 0; u < AM_U; u++) {
                    const int c = c0 + u * AM_THREADS;
                    r[u] = c < nch ? __ldg(xc + c) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < AM_U; u++) {
                    const int c = c0 + u * AM_THREADS;
                    if (c >= nch) break;
                    float f[8];
                    oj_cu_unpackv<T, 8>(r[u], f);
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        if (am_before(f[e], c * 8 + e, bv, bi)) bv = f[e], bi = c * 8 + e;
                }
            }
            tail = nch * 8;
        }
    }
    for (int i0 = tail + t; i0 < V; i0 += AM_THREADS * AM_U) {
        float v[AM_U];
#pragma unroll
        for (int u = 0; u < AM_U; u++) {
            const int i = i0 + u * AM_THREADS;
            v[u] = i < V ? oj_cu_hw_tof(x[i]) : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < AM_U; u++) {
            const int i = i0 + u * AM_THREADS;
            if (i < V && am_before(v[u], i, bv, bi)) bv = v[u], bi = i;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if ((t & 31) == 0) sv[t >> 5] = bv, si[t >> 5] = bi;
    __syncthreads();
    if (t >= 32) return;
    bv = sv[t], bi = si[t]; /* 32 warps */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (t == 0) {
        *tok = bi;
        *pos += 1;
    }
}

oj_status oj_cuda_decode_argmax_advance(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                        oj_tensor *pos) {
    if (oj_cuda_begin(eng, "decode_argmax_advance") != OJ_OK) return oj_last_status(eng);
    int64_t *tp = (int64_t *)oj_cuda_ptr(tok), *pp = (int64_t *)oj_cuda_ptr(pos);
    const int V = (int)oj_cuda_numel(logits);
    const void *x = oj_cuda_ptr(logits);
    const bool vec = oj_cu_aligned16(x);
    switch (logits->dtype) {
    case OJ_BF16:
        k_dec_argmax_advance<oj_cu_bf16><<<1, AM_THREADS, 0, OJ_STREAM>>>(tp, (const oj_cu_bf16 *)x, V, pp, vec);
        break;
    case OJ_F16:
        k_dec_argmax_advance<oj_cu_f16><<<1, AM_THREADS, 0, OJ_STREAM>>>(tp, (const oj_cu_f16 *)x, V, pp, vec);
        break;
    default:
        k_dec_argmax_advance<float><<<1, AM_THREADS, 0, OJ_STREAM>>>(tp, (const float *)x, V, pp, false);
        break;
    }
    return oj_cuda_check(eng, "decode_argmax_advance");
}

/* ---------------------------------------------------------------- the head */
/* logits = round_T(layer_norm(x) @ W^T), W [N, K] with k-stride 1 (the
 * tied lm head), and with tok the argmax and pos + 1: the layer_norm
 * kernel, cuda_gemv.cu's "nk" product and the argmax kernel in one.
 *  - before the wait: each warp loads its first group of outputs' weights;
 *  - prologue: the normalised row in shared memory (dec_stage_row: the
 *    layer_norm kernel's bits);
 *  - product: warp w of block b takes the groups of R consecutive outputs
 *    g = b W + w, g + grid W, ... (W = 8 warps); each output is summed as
 *    cuda_gemv.cu's k_gemv_nk sums it (lane l takes chunks l, l + 32, ...
 *    of 8 elements in rounds of U chunks, zeros past K included, f32 FMAs
 *    in chunk order, then the warp's xor butterfly): its bits. R U = 16
 *    chunks of 16 bytes a lane in flight (U = 4 for K <= 1024, as there;
 *    else 8);
 *  - argmax (tok != NULL): each block's best (am_before: a NaN first, then
 *    the larger value, then the lower index) to scratch; the block that
 *    finishes last (the arrival counter OJ_CUDA_COUNT_HEAD) takes the best
 *    of those, writes tok, advances pos and keeps the token at hist[pos]
 *    (hist not NULL). am_before is a total order, so
 *    the token is the argmax kernel's whatever the grid;
 *  - draw (DRAW, a sampler without a penalty): the last block runs
 *    decode_sample's draw (cuda_decode_sample.cuh, sm_draw) over the
 *    logits the blocks wrote, its first pass over them replaced by the
 *    blocks' bests (the K best lie at or above the K-th largest of G
 *    groups' maxima, groups of blocks here): the standalone kernel's token.
 * Grid: two blocks a multiprocessor at most, so the first groups of every
 * warp load before the wait and the rest stream behind them. */
#define HD_WARPS (DEC_THREADS / 32)

struct head_args {
    unsigned short *out;                 /* [N] */
    const unsigned short *in, *nw, *nb; /* [K] */
    double eps;
    const unsigned short *w; /* [N, K], rows ldw elements apart */
    int64_t ldw;
    int N, K;
    int64_t *tok, *pos;   /* NULL: the logits alone */
    float *bv;            /* [grid]: each block's best value */
    int *bi;              /* [grid]: its index */
    unsigned int *count;  /* the arrival counter */
    int64_t *step;        /* DRAW: the draw's step */
    int64_t *hist;        /* the tokens kept by position (hist[pos] = tok), or NULL */
    long long nhist;
    bool vec; /* DRAW: out 16-byte aligned */
    bool late; /* as proj_args.late */
    sm_params sp;
};

/* wv[i][u] = chunk r 32 U + 32 u + lane of row n0 + i (zeros past N or
 * K8), every load issued before any use. */
template <int R, int U>
__device__ __forceinline__ void head_load(uint4 (&wv)[R][U], const unsigned short *w, int64_t ldw,
                                          int64_t n0, int N, int r, int K8, int lane) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = r * 32 * U + u * 32 + lane;
            const int64_t n = n0 + i;
            wv[i][u] = n < N && c < K8 ? __ldcs((const uint4 *)(w + n * ldw) + c) : zero;
        }
}

/* (bv, bi) = the better of it and (ov, oi) over the warp's lanes. */
__device__ __forceinline__ void head_warp_best(float &bv, int &bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
}

template <typename T, int U, bool DRAW>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MIN_BLOCKS) k_dec_head(head_args a) {
    extern __shared__ __align__(16) float hxs[]; /* [K]; read as float4 */
    __shared__ float red[32];
    __shared__ float wbv[HD_WARPS];
    __shared__ int wbi[HD_WARPS];
    __shared__ bool last;
    constexpr int R = 16 / U; /* outputs a warp sums at once */
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int K8 = a.K / 8, rounds = (K8 + 32 * U - 1) / (32 * U);
    const int64_t ngroups = ((int64_t)a.N + R - 1) / R, gstep = (int64_t)gridDim.x * HD_WARPS;
    int64_t gi = (int64_t)blockIdx.x * HD_WARPS + warp;
    /* ---- the first group's first round: weights only, before the wait */
    uint4 wv[R][U];
    head_load<R, U>(wv, a.w, a.ldw, gi * R, a.N, 0, K8, lane);
    if (!a.late) oj_pdl_allow_dependents();
    oj_pdl_wait();
    if (a.late) oj_pdl_allow_dependents();
    /* ---- prologue: the normalised row into hxs */
    const unsigned short *in = a.in;
    dec_stage_row<T, true>(hxs, red, [in](int k) { return oj_cu_hw_tof(T{in[k]}); }, a.nw, a.nb,
                           a.eps, a.K);
    /* ---- the product, group by group */
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (bool first = true; gi < ngroups; gi += gstep, first = false) {
        float s[R];
#pragma unroll
        for (int i = 0; i < R; i++) s[i] = 0.0f;
        for (int r = 0; r < rounds; r++) {
            if (!first || r > 0) head_load<R, U>(wv, a.w, a.ldw, gi * R, a.N, r, K8, lane);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = r * 32 * U + u * 32 + lane;
                float xf[8];
                if (c < K8) {
                    const float4 lo = *(const float4 *)(hxs + c * 8);
                    const float4 hi = *(const float4 *)(hxs + c * 8 + 4);
                    xf[0] = lo.x, xf[1] = lo.y, xf[2] = lo.z, xf[3] = lo.w;
                    xf[4] = hi.x, xf[5] = hi.y, xf[6] = hi.z, xf[7] = hi.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 8; e++) xf[e] = 0.0f;
                }
#pragma unroll
                for (int i = 0; i < R; i++) {
                    float wf[8];
                    oj_cu_unpackv<T, 8>(wv[i][u], wf);
#pragma unroll
                    for (int e = 0; e < 8; e++) s[i] = fmaf(wf[e], xf[e], s[i]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < R; i++) {
            const float v = oj_cu_warp_sumf(s[i]); /* every lane: the same sum */
            const int64_t n = gi * R + i;
            if (n < a.N) {
                const T o = oj_cu_fromf<T>(v);
                if (lane == 0) a.out[n] = o.u;
                const float f = oj_cu_hw_tof(o);
                if (am_before(f, (int)n, bv, bi)) bv = f, bi = (int)n;
            }
        }
    }
    if (a.tok == NULL) return;
    /* ---- the block's best, then the last block's best of the blocks' */
    if (lane == 0) wbv[warp] = bv, wbi[warp] = bi;
    __threadfence(); /* this thread's logits visible device-wide before the arrival */
    __syncthreads();
    if (t == 0) {
        for (int w = 1; w < HD_WARPS; w++)
            if (am_before(wbv[w], wbi[w], bv, bi)) bv = wbv[w], bi = wbi[w];
        a.bv[blockIdx.x] = bv;
        a.bi[blockIdx.x] = bi;
        __threadfence(); /* the best visible device-wide before the arrival counts */
        last = atomicAdd(a.count, 1u) == gridDim.x - 1;
        if (last) *a.count = 0; /* every block has arrived: ready for the next launch */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    if constexpr (DRAW) {
        sm_draw<DEC_THREADS, true>(a.tok, (const T *)a.out, a.N, a.vec, a.pos, (uint8_t *)NULL,
                                   a.step, a.hist, a.nhist, a.sp, a.bv, a.bi, (int)gridDim.x);
        return;
    }
    bv = -INFINITY;
    bi = INT_MAX;
    for (unsigned b = t; b < gridDim.x; b += DEC_THREADS) {
        const float v = __ldcg(a.bv + b); /* written by other blocks of this kernel */
        const int i = __ldcg(a.bi + b);
        if (am_before(v, i, bv, bi)) bv = v, bi = i;
    }
    head_warp_best(bv, bi);
    __syncthreads(); /* the warps' reads of wbv, wbi above are done */
    if (lane == 0) wbv[warp] = bv, wbi[warp] = bi;
    __syncthreads();
    if (t == 0) {
        for (int w = 1; w < HD_WARPS; w++)
            if (am_before(wbv[w], wbi[w], bv, bi)) bv = wbv[w], bi = wbi[w];
        *a.tok = bi;
        const int64_t q = *a.pos + 1;
        *a.pos = q;
        if (a.hist && q >= 0 && q < a.nhist) a.hist[q] = bi;
    }
}

template <typename T>
static void head_launch(const head_args &a, unsigned blocks, bool draw) {
    const size_t smem = (size_t)a.K * sizeof(float);
    const dim3 g(blocks), b(DEC_THREADS);
    const bool u4 = a.K <= 32 * 8 * 4; /* k_gemv_nk's U */
    if (draw) oj_pdl_launch(k_dec_head<T, 4, true>, g, b, smem, a); /* K <= 1024 */
    else if (u4) oj_pdl_launch(k_dec_head<T, 4, false>, g, b, smem, a);
    else oj_pdl_launch(k_dec_head<T, 8, false>, g, b, smem, a);
}

oj_status oj_cuda_decode_norm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   const oj_tensor *nw, const oj_tensor *nb, double eps,
                                   const oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                   oj_tensor *step, oj_tensor *hist, const oj__decode_sampler *s) {
    if (oj_cuda_begin(eng, "decode_norm_head") != OJ_OK) return oj_last_status(eng);
    head_args a = {};
    a.out = (unsigned short *)oj_cuda_ptr(out);
    a.in = (const unsigned short *)oj_cuda_ptr(x);
    a.nw = (const unsigned short *)oj_cuda_ptr(nw);
    a.nb = (const unsigned short *)oj_cuda_ptr(nb);
    a.eps = eps;
    a.w = (const unsigned short *)oj_cuda_ptr(w);
    a.ldw = w->stride[0];
    a.N = (int)w->shape[0];
    a.K = (int)w->shape[1];
    const int U = a.K <= 32 * 8 * 4 ? 4 : 8, R = 16 / U; /* k_gemv_nk's U */
    const int64_t groups = (a.N + R - 1) / R, need = (groups + HD_WARPS - 1) / HD_WARPS;
    const int64_t cap = 2 * (int64_t)oj_cuda_sms(eng);
    const unsigned blocks = (unsigned)(need < cap ? need : cap);
    /* the draw in the last block: no penalty, K <= 1024 (its shared memory
     * beside the row's), the groups of blocks within the block's threads
     * and the grid; otherwise the logits here and decode_sample's kernel */
    /* OJAS_DECODE_HEAD_DRAW=0: decode_sample's kernel */
    const bool draw_off = !oj__env_flag("OJAS_DECODE_HEAD_DRAW", DEC_HEAD_DRAW_DEFAULT);
    bool draw = false;
    if (s) {
        a.sp = sm_params_of(s, a.N, DEC_THREADS);
        draw = !draw_off && s->repetition_penalty == 1.0 && a.K <= 1024 &&
               a.sp.k <= a.sp.groups && a.sp.groups <= (int)blocks;
    }
    oj_storage *hold = NULL;
    if (tok && (s == NULL || draw)) {
        void *sc = oj_cuda_scratch(eng, (size_t)blocks * (sizeof(float) + sizeof(int)),
                                   "decode_norm_head", &hold);
        if (sc == NULL) return oj_last_status(eng);
        a.bv = (float *)sc;
        a.bi = (int *)(a.bv + blocks);
        a.tok = (int64_t *)oj_cuda_ptr(tok);
        a.pos = (int64_t *)oj_cuda_ptr(pos);
        a.count = oj_cuda_state_of(eng)->counts + OJ_CUDA_COUNT_HEAD;
        a.hist = hist ? (int64_t *)oj_cuda_ptr(hist) : NULL;
        a.nhist = hist ? (long long)oj_cuda_numel(hist) : 0;
        if (draw) {
            a.step = (int64_t *)oj_cuda_ptr(step);
            a.vec = oj_cu_aligned16(a.out);
        }
    }
    a.late = oj_cuda_decode_late_trigger();
    if (out->dtype == OJ_BF16) head_launch<oj_cu_bf16>(a, blocks, draw);
    else head_launch<oj_cu_f16>(a, blocks, draw);
    oj__storage_release(hold); /* later users run after this kernel (one stream) */
    oj_status st = oj_cuda_check(eng, "decode_norm_head");
    if (st == OJ_OK && s && !draw) st = oj_cuda_decode_sample(eng, tok, out, pos, NULL, step, hist, s);
    return st;
}

/* ---------------------------------------------------------------- embed + mask */
#define EM_THREADS 256

/* Thread i: x[i] = round_T(wte[tok, i] + wpe[pos, i]) for i < C (NaN when
 * tok or pos is out of range), mask[i] = i <= pos for i < S. Lets the
 * step's first projection (a programmatic dependent) launch at once. */
template <typename T>
__global__ void __launch_bounds__(EM_THREADS)
    k_dec_embed_mask(T *x, const T *wte, const T *wpe, const int64_t *tok, const int64_t *pos,
                     int64_t V, int64_t P, int64_t C, unsigned char *mask, int64_t S) {
    oj_pdl_allow_dependents();
    const int64_t i = (int64_t)blockIdx.x * EM_THREADS + threadIdx.x;
    const int64_t t = *tok, p = *pos;
    if (i < C) {
        const bool ok = t >= 0 && t < V && p >= 0 && p < P;
        x[i] = oj_cu_fromf<T>(ok ? oj_cu_tof(wte[t * C + i]) + oj_cu_tof(wpe[p * C + i]) : NAN);
    }
    if (i < S) mask[i] = i <= p;
}

oj_status oj_cuda_decode_embed_mask(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                                    const oj_tensor *wpe, const oj_tensor *tok,
                                    const oj_tensor *pos, oj_tensor *mask) {
    if (oj_cuda_begin(eng, "decode_embed_mask") != OJ_OK) return oj_last_status(eng);
    const int64_t V = wte->shape[0], P = wpe->shape[0], C = wte->shape[1], S = oj_cuda_numel(mask);
    const int64_t n = C > S ? C : S;
    const unsigned blocks = (unsigned)((n + EM_THREADS - 1) / EM_THREADS);
    const int64_t *tp = (const int64_t *)oj_cuda_ptr(tok), *pp = (const int64_t *)oj_cuda_ptr(pos);
    unsigned char *mp = (unsigned char *)oj_cuda_ptr(mask);
    OJ_CU_FLOAT_TYPE(x->dtype, T, {
        k_dec_embed_mask<T><<<blocks, EM_THREADS, 0, OJ_STREAM>>>(
            (T *)oj_cuda_ptr(x), (const T *)oj_cuda_ptr(wte), (const T *)oj_cuda_ptr(wpe), tp, pp,
            V, P, C, mp, S);
    });
    return oj_cuda_check(eng, "decode_embed_mask");
}
