/* CUDA attention for one query row per head (T == 1: a decode step), split
 * over the keys (flash-decoding: Dao, Haziza, Massa, Sizov 2023): the keys
 * are cut into chunks, one block per (chunk, row) computes the chunk's
 * partial softmax state (max m, sum l, unnormalised accumulator acc), and
 * the chunks are merged: M = max m, L = sum l e^(m - M),
 * out = sum acc e^(m - M) / L, lse = M + log L (by a second kernel, or on
 * the fast path with OJAS_CUDA_ATTN_COMBINE=0 by each row's last block to
 * finish).
 *
 * q (B,H,1,D), k (B,Hkv,S,D), v (B,Hkv,S,Dv) any strides, mask (B,H,1,S)
 * view (stride 0 where broadcast) bool (true = keep) or float (added) or
 * NULL, out (B,H,1,Dv) any strides (written through them); a causal mask
 * sees every key when T == 1 (j <= 0 + S - 1). f32,
 * bf16, f16 inputs, f32 compute, D and Dv <= 256. Scores are
 * scale q.k + mask; a row with every key masked gives 0 and lse -inf; NaN
 * propagates. Every sum runs in an order fixed by the shapes (no atomics),
 * so results are deterministic.
 *
 * Fast path (its device functions in cuda_attention_decode_fast.cuh,
 * shared with the persistent step, cuda_decode_mega.cu; D == Dv in {64, 128}, q, k, v of one dtype, unit last stride,
 * 16-byte aligned rows and row strides; mask NULL, bool, f32, bf16 or f16):
 * the kernels are templates over the element type, D and the mask's width,
 * so the loops are unrolled and no load goes through a dtype switch. The
 * time of a decode step is latency, not bandwidth, so the kernels are
 * written to have every load of a step in flight at once:
 * - partial: 4 warps; a key row is D * size / 16 lanes of 16-byte loads
 *   (bf16 D 64: 8 lanes, 4 keys per warp load); each lane issues 4 loads of
 *   K, 4 of V and its keys' mask elements, then uses them. Keys past the
 *   chunk or masked are loaded from a clamped valid row and dropped by
 *   select (a masked key's K and V never reach the sums), not by a branch
 *   around the load. q stays in registers. Dot products are reduced over
 *   the key's lanes by a fixed butterfly, each warp keeps an online
 *   softmax state over its steps, and the block merges its 4 warps in
 *   order through shared memory. A block step is 4 warps x 4 loads
 *   x 32 / (D * size / 16) keys (bf16 D 64: 64; f32 D 128: 16); a chunk is
 *   one step, or several when one-step chunks would make more than
 *   DF_BLOCKS blocks or DF_MAXSPLIT chunks a row (the chunking depends on
 *   the shapes only). With one chunk the partial kernel writes the output
 *   and there is nothing to merge.
 * - merge: thread c of D merges column c over the chunks, DF_CB chunks'
 *   m, l and acc loaded at once (an online max across batches), so a row
 *   of <= 16 chunks is one round of loads: a combine kernel, a block per
 *   row, or with OJAS_CUDA_ATTN_COMBINE=0 the block of a row that
 *   finishes last (each block makes its state visible with a fence, then
 *   counts its arrival on the engine's counter for the row,
 *   threadFenceReduction's pattern; the last resets it to 0), for up to
 *   OJ_CUDA_COUNT_ATTN_ROWS rows. The order is the same either way: the
 *   same bits.
 * - decode_attention (the gpt2 fast step's entry) also names the cache
 *   row the kernel before writes (this step's key and value): the first
 *   step's K and V loads are issued before the programmatic-dependent
 *   wait, so their DRAM latency overlaps that kernel, and that one row is
 *   loaded again after the wait through L2.
 *
 * GPT-2 124M decode (q [1,12,1,64] bf16, k and v [1,12,576,64] bf16, a
 * bool mask [1,1,1,576] broadcast): 9 chunks of 64 keys x 12 rows = 108
 * blocks of 128 threads (one step each, near one per SM of an H200's 132).
 * Bytes: K and V 2 x 884,736 = 1,769,472, q 1,536, mask 576 (read 12
 * times, from L2), partial states 108 x 66 x 4 = 28,512 written and read
 * back, out 1,536: about 1.83 MB, 0.46 us at ~4 TB/s. The kernel is about
 * one DRAM/L2 round trip plus its launch ramp and the last blocks' merge
 * (an estimate, not measured: ~2.5 us a call; the two kernels before it,
 * ~3.5 us).
 *
 * General fallback (other shapes, strides, dtypes): one block per chunk of
 * DEC_CHUNK keys and row; the scores of the chunk's keys (a warp per key,
 * DEC_KU keys in flight per warp, the dot product reduced across the warp
 * in a fixed butterfly; a masked key is not read), their max m,
 * p = exp(s - m) and l = sum p (one warp, fixed order), then
 * acc = sum p v over the chunk (DEC_G key groups, summed in group order);
 * the combine takes one warp per row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attention_decode_fast.cuh"
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "core/env.h"

#define DEC_WARPS 4
#define DEC_THREADS (DEC_WARPS * 32)
#define DEC_CHUNK 32 /* keys per block: one per lane of the softmax warp */
#define DEC_KU 4     /* keys per warp in flight */
#define DEC_MAXD 256
#define DEC_REG (DEC_MAXD / 32)
#define DEC_G 4 /* key groups of the P V product */

__device__ __forceinline__ float dec_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float dec_warp_max_nan(float v) {
    for (int o = 16; o > 0; o >>= 1) v = dec_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Mask of key j of row (b, h): false when masked; *add gets a float mask's
 * value (0 without one). */
__device__ __forceinline__ bool dec_keep(const dec_args &a, int64_t b, int64_t h, int64_t j,
                                         float *add) {
    *add = 0.0f;
    if (a.mask == NULL) return true;
    const char *mp = a.mask + dec_off(a.ms, b, h, 0, j) * a.mes;
    if (a.mdt == OJ_BOOL) return *(const uint8_t *)mp != 0;
    *add = oj_cu_ldf(mp, a.mdt);
    return true;
}

// grid (nsplit, B*H), DEC_THREADS threads
__global__ void k_attn_decode_partial(dec_args a) {
    __shared__ float sp[DEC_CHUNK];
    __shared__ float sacc[DEC_G * DEC_MAXD];
    __shared__ float sml[2];
    int64_t split = blockIdx.x, bh = blockIdx.y;
    int64_t b = bh / a.H, h = bh % a.H, hk = h / a.group;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t j0 = split * DEC_CHUNK;
    int nk = (int)(a.S - j0 < DEC_CHUNK ? a.S - j0 : DEC_CHUNK);
    float qr[DEC_REG];
#pragma unroll
    for (int r = 0; r < DEC_REG; r++) {
        int64_t c = lane + 32 * r;
        qr[r] = c < a.D ? oj_cu_ldf(a.q + dec_off(a.qs, b, h, 0, c) * a.es, a.dt) : 0.0f;
    }
    /* scores: warp w takes keys w*KU.., then every DEC_WARPS*KU */
    for (int jj0 = warp * DEC_KU; jj0 < nk; jj0 += DEC_WARPS * DEC_KU) {
        float part[DEC_KU], add[DEC_KU];
        bool keep[DEC_KU];
#pragma unroll
        for (int u = 0; u < DEC_KU; u++) {
            keep[u] = jj0 + u < nk && dec_keep(a, b, h, j0 + jj0 + u, &add[u]);
            part[u] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < DEC_KU; u++) {
            if (!keep[u]) continue; /* uniform over the warp */
            const char *kr = a.k + dec_off(a.ks, b, hk, j0 + jj0 + u, 0) * a.es;
#pragma unroll
            for (int r = 0; r < DEC_REG; r++) {
                int64_t c = lane + 32 * r;
                if (c < a.D) part[u] += qr[r] * oj_cu_ldf(kr + c * a.ks[3] * a.es, a.dt);
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_KU; u++) {
            float d = dec_warp_sum(part[u]);
            if (lane == 0 && jj0 + u < nk) sp[jj0 + u] = keep[u] ? a.scale * d + add[u] : -INFINITY;
        }
    }
    __syncthreads();
    if (warp == 0) { /* max, probabilities, their sum */
        float s = lane < nk ? sp[lane] : -INFINITY;
        float m = dec_warp_max_nan(s);
        float p = s == -INFINITY ? 0.0f : expf(s - m);
        float l = dec_warp_sum(p);
        if (lane < nk) sp[lane] = p;
        if (lane == 0) {
            sml[0] = m;
            sml[1] = l;
        }
    }
    __syncthreads();
    float m = sml[0];
    int64_t slot = bh * a.nsplit + split;
    float *acc_out = a.pacc + slot * a.Dv;
    if (m == -INFINITY) { /* every key of the chunk masked */
        for (int64_t c = threadIdx.x; c < a.Dv; c += DEC_THREADS) acc_out[c] = 0.0f;
        if (threadIdx.x == 0) {
            a.pm[slot] = -INFINITY;
            a.pl[slot] = 0.0f;
        }
        return;
    }
    for (int64_t e = threadIdx.x; e < DEC_G * a.Dv; e += DEC_THREADS) {
        int64_t g = e / a.Dv, c = e - g * a.Dv;
        float acc = 0.0f;
        for (int64_t jj = g; jj < nk; jj += DEC_G) {
            float p = sp[jj];
            if (p != 0.0f) acc += p * oj_cu_ldf(a.v + dec_off(a.vs, b, hk, j0 + jj, c) * a.es, a.dt);
        }
        sacc[e] = acc;
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < a.Dv; c += DEC_THREADS) {
        float acc = sacc[c];
        for (int g = 1; g < DEC_G; g++) acc += sacc[g * a.Dv + c];
        acc_out[c] = acc;
    }
    if (threadIdx.x == 0) {
        a.pm[slot] = m;
        a.pl[slot] = sml[1];
    }
}

// one warp per row (b, h); DEC_WARPS rows per block
__global__ void k_attn_decode_combine(dec_args a, int64_t rows) {
    oj_pdl_allow_dependents(); /* the output projection after it may launch */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t bh = (int64_t)blockIdx.x * DEC_WARPS + warp;
    if (bh >= rows) return;
    const float *pm = a.pm + bh * a.nsplit, *pl = a.pl + bh * a.nsplit;
    const float *pacc = a.pacc + bh * a.nsplit * a.Dv;
    float M = -INFINITY;
    for (int64_t s = lane; s < a.nsplit; s += 32) M = dec_max_nan(M, pm[s]);
    M = dec_warp_max_nan(M);
    float L = 0.0f;
    for (int64_t s = lane; s < a.nsplit; s += 32)
        if (pm[s] != -INFINITY) L += pl[s] * expf(pm[s] - M);
    L = dec_warp_sum(L);
    float inv = L > 0.0f ? 1.0f / L : 0.0f; /* every key masked: 0 */
    if (isnan(L)) inv = L;
    for (int64_t c = lane; c < a.Dv; c += 32) {
        float acc = 0.0f;
        for (int64_t s = 0; s < a.nsplit; s++)
            if (pm[s] != -INFINITY) acc += pacc[s * a.Dv + c] * expf(pm[s] - M);
        oj_cu_stf(a.o + dec_out_off(a, bh, c) * a.oes, a.odt, acc * inv);
    }
    if (lane == 0 && a.lse) {
        float lv = L > 0.0f ? M + logf(L) : -INFINITY;
        if (isnan(M) || isnan(L)) lv = NAN;
        oj_cu_stf(a.lse + bh * a.ses, a.sdt, lv);
    }
}

// grid (nsplit, B*H), DF_THREADS threads; block `split` takes keys
// [split * chunk, min(S, (split + 1) * chunk)) in `steps` steps (df_partial)
template <typename T, int D, int MB>
__global__ void __launch_bounds__(DF_THREADS) k_dec_fast_partial(dec_args a) {
    __shared__ float wm[DF_WARPS], wl[DF_WARPS];
    __shared__ float wacc[DF_WARPS][D];
    __shared__ bool last;
    /* with a.fresh, the first step's keys and values load before the wait
     * (every row but *fresh was written before the kernels this one
     * follows; that one is loaded again after it, past L1) */
    const bool pre = a.fresh != NULL;
    uint4 kr[DF_U], vr[DF_U];
    if (pre) df_partial_preload<T, D, false>(a, blockIdx.x, blockIdx.y, threadIdx.x, kr, vr);
    oj_pdl_wait(); /* launched as a programmatic dependent: nothing else read or written before */
    oj_pdl_allow_dependents();
    df_partial<T, D, MB, false>(a, blockIdx.x, blockIdx.y, threadIdx.x, pre, kr, vr, wm, wl, wacc,
                                &last, 0);
}

// grid B*H, D threads: thread c merges column c of the row's chunks
template <int D> __global__ void __launch_bounds__(D) k_dec_fast_combine(dec_args a) {
    oj_pdl_wait(); /* a programmatic dependent of the partials: nothing read before */
    oj_pdl_allow_dependents();
    df_combine_col<D>(a, blockIdx.x, threadIdx.x);
}

/* Mask element bytes of the fast path: 0 none, 1 bool, 2 bf16/f16, 4 f32;
 * -1 for another dtype. */
static int df_mask_bytes(const oj_tensor *mask) {
    if (mask == NULL) return 0;
    switch (mask->dtype) {
    case OJ_BOOL: return 1;
    case OJ_BF16:
    case OJ_F16: return 2;
    case OJ_F32: return 4;
    default: return -1;
    }
}

/* Does t (rank 4) have unit last stride, a 16-byte aligned start and
 * 16-byte multiples for the strides of its non-unit leading dims? */
static bool df_rows_aligned(const oj_tensor *t) {
    int64_t es = (int64_t)oj_dtype_size(t->dtype);
    if (t->stride[3] != 1 || (uintptr_t)oj_cuda_ptr(t) % 16 != 0) return false;
    for (int d = 0; d < 3; d++)
        if (t->shape[d] != 1 && (t->stride[d] * es) % 16 != 0) return false;
    return true;
}

static bool df_ok(const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                  const oj_tensor *mask) {
    int64_t D = q->shape[3];
    return (D == 64 || D == 128) && v->shape[3] == D && df_mask_bytes(mask) >= 0 &&
           df_rows_aligned(q) && df_rows_aligned(k) && df_rows_aligned(v);
}

template <typename T, int D, int MB> static void df_launch(const dec_args &a, int64_t rows) {
    dim3 grid((unsigned)a.nsplit, (unsigned)rows);
    oj_pdl_launch(k_dec_fast_partial<T, D, MB>, grid, dim3(DF_THREADS), 0, a);
}

template <typename T, int D> static void df_launch_d(const dec_args &a, int64_t rows, int mb) {
    switch (mb) {
    case 0: df_launch<T, D, 0>(a, rows); break;
    case 1: df_launch<T, D, 1>(a, rows); break;
    case 2: df_launch<T, D, 2>(a, rows); break;
    default: df_launch<T, D, 4>(a, rows); break;
    }
}

/* OJAS_CUDA_ATTN_COMBINE=1: the split rows are merged by the second
 * kernel instead of the partials' last block, =0 by the last block; unset:
 * DF_COMBINE_KERNEL_DEFAULT. Read at each call (tests flip it). */
#define DF_COMBINE_KERNEL_DEFAULT false
static bool df_combine_kernel(void) {
    return oj__env_flag("OJAS_CUDA_ATTN_COMBINE", DF_COMBINE_KERNEL_DEFAULT);
}

/* The fast path: chunks of `steps` block steps, so that B*H*nsplit stays
 * near DF_BLOCKS and nsplit <= DF_MAXSPLIT; the chunking depends on the
 * shapes only. */
static oj_status df_run(oj_engine *eng, dec_args *a, int64_t rows, int mb) {
    int64_t lpk = a->D * a->es / 16, kb = DF_WARPS * DF_U * (32 / lpk);
    int64_t n0 = (a->S + kb - 1) / kb;
    int64_t steps = (rows * n0 + DF_BLOCKS - 1) / DF_BLOCKS;
    int64_t smin = (n0 + DF_MAXSPLIT - 1) / DF_MAXSPLIT;
    if (steps < smin) steps = smin;
    if (steps > n0) steps = n0;
    a->steps = steps;
    a->chunk = kb * steps;
    a->nsplit = (a->S + a->chunk - 1) / a->chunk;
    oj_storage *hold = NULL;
    if (a->nsplit > 1) {
        size_t nf = (size_t)(rows * a->nsplit) * (size_t)(2 + a->D);
        float *scratch = (float *)oj_cuda_scratch(eng, nf * sizeof(float),
                                                  "scaled_dot_product_attention", &hold);
        if (scratch == NULL) return oj_last_status(eng);
        a->pm = scratch;
        a->pl = a->pm + rows * a->nsplit;
        a->pacc = a->pl + rows * a->nsplit;
        /* the last block of a row merges it, without a second kernel,
         * where the engine's counters cover the rows */
        oj_cuda_state *cs = oj_cuda_state_of(eng);
        if (rows <= OJ_CUDA_COUNT_ATTN_ROWS && cs->counts && !df_combine_kernel())
            a->count = cs->counts;
    }
    OJ_CU_FLOAT_TYPE(a->dt, T, {
        if (a->D == 64) df_launch_d<T, 64>(*a, rows, mb);
        else df_launch_d<T, 128>(*a, rows, mb);
    });
    oj_status st = oj_cuda_check(eng, "attention_forward (decode)");
    if (st == OJ_OK && a->nsplit > 1 && a->count == NULL) {
        if (a->D == 64) oj_pdl_launch(k_dec_fast_combine<64>, dim3((unsigned)rows), dim3(64), 0, *a);
        else oj_pdl_launch(k_dec_fast_combine<128>, dim3((unsigned)rows), dim3(128), 0, *a);
        st = oj_cuda_check(eng, "attention_forward (decode combine)");
    }
    oj__storage_release(hold);
    return st;
}

static bool float_dt(oj_dtype dt) { return dt == OJ_F32 || dt == OJ_BF16 || dt == OJ_F16; }

bool oj_cuda_attention_decode_ok(const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                 const oj_tensor *out) {
    static int off = -1; /* OJAS_CUDA_ATTN_DECODE=0 turns the path off (comparisons) */
    if (off < 0) {
        off = !oj__env_flag("OJAS_CUDA_ATTN_DECODE", true);
    }
    if (off || q->rank != 4 || k->rank != 4 || v->rank != 4 || q->shape[2] != 1) return false;
    if (!float_dt(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype || !float_dt(out->dtype))
        return false;
    int64_t B = q->shape[0], H = q->shape[1], S = k->shape[2], Hkv = k->shape[1];
    return q->shape[3] <= DEC_MAXD && v->shape[3] <= DEC_MAXD && S >= 1 && Hkv >= 1 &&
           H % Hkv == 0 && B * H >= 1 && B * H <= 65535 && (S + DEC_CHUNK - 1) / DEC_CHUNK <= INT32_MAX;
}

/* oj_cuda_attention_decode, with fresh (device i64, or NULL) passed to the
 * fast path's partial kernel. */
static oj_status attention_decode(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                  const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                  const oj_tensor *mask, double scale, const int64_t *fresh) {
    dec_args a;
    memset(&a, 0, sizeof a);
    a.fresh = fresh;
    a.q = oj_cuda_ptr(q);
    a.k = oj_cuda_ptr(k);
    a.v = oj_cuda_ptr(v);
    a.mask = mask ? oj_cuda_ptr(mask) : NULL;
    a.dt = (int)q->dtype;
    a.es = (int)oj_dtype_size(q->dtype);
    a.mdt = mask ? (int)mask->dtype : 0;
    a.mes = mask ? (int)oj_dtype_size(mask->dtype) : 0;
    a.H = q->shape[1];
    a.group = q->shape[1] / k->shape[1];
    a.S = k->shape[2];
    a.D = q->shape[3];
    a.Dv = v->shape[3];
    a.nsplit = (a.S + DEC_CHUNK - 1) / DEC_CHUNK;
    for (int d = 0; d < 4; d++) {
        a.qs[d] = q->stride[d];
        a.ks[d] = k->stride[d];
        a.vs[d] = v->stride[d];
        a.ms[d] = mask ? mask->stride[d] : 0;
    }
    a.scale = (float)scale;
    a.o = oj_cuda_ptr(out);
    for (int d = 0; d < 4; d++) a.os[d] = out->stride[d];
    a.odt = (int)out->dtype;
    a.oes = (int)oj_dtype_size(out->dtype);
    a.lse = lse ? oj_cuda_ptr(lse) : NULL;
    a.sdt = lse ? (int)lse->dtype : 0;
    a.ses = lse ? (int)oj_dtype_size(lse->dtype) : 0;
    int64_t rows = q->shape[0] * a.H;
    if (df_ok(q, k, v, mask)) return df_run(eng, &a, rows, df_mask_bytes(mask));
    a.fresh = NULL;
    size_t nf = (size_t)(rows * a.nsplit) * (size_t)(2 + a.Dv);
    oj_storage *hold = NULL;
    float *scratch = (float *)oj_cuda_scratch(eng, nf * sizeof(float),
                                              "scaled_dot_product_attention", &hold);
    if (scratch == NULL) return oj_last_status(eng);
    a.pm = scratch;
    a.pl = a.pm + rows * a.nsplit;
    a.pacc = a.pl + rows * a.nsplit;
    dim3 grid((unsigned)a.nsplit, (unsigned)rows);
    k_attn_decode_partial<<<grid, DEC_THREADS, 0, OJ_STREAM>>>(a);
    oj_status st = oj_cuda_check(eng, "attention_forward (decode)");
    if (st == OJ_OK) {
        unsigned blocks = (unsigned)((rows + DEC_WARPS - 1) / DEC_WARPS);
        k_attn_decode_combine<<<blocks, DEC_THREADS, 0, OJ_STREAM>>>(a, rows);
        st = oj_cuda_check(eng, "attention_forward (decode combine)");
    }
    oj__storage_release(hold);
    return st;
}

oj_status oj_cuda_attention_decode(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                   const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                   const oj_tensor *mask, double scale) {
    return attention_decode(eng, out, lse, q, k, v, mask, scale, NULL);
}

oj_status oj_cuda_decode_attention(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                   const oj_tensor *k, const oj_tensor *v, const oj_tensor *mask,
                                   const oj_tensor *slot, double scale) {
    const char *op = "decode_attention";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (!oj_cuda_attention_decode_ok(q, k, v, out))
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "%s: these shapes and dtypes are not the decode kernels' (or "
                            "OJAS_CUDA_ATTN_DECODE=0)", op);
    return attention_decode(eng, out, NULL, q, k, v, mask, scale,
                            (const int64_t *)oj_cuda_ptr(slot));
}
