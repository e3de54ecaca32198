/* CUDA attention for one query row per head (T == 1: a decode step), split
 * over the keys (flash-decoding: Dao, Haziza, Massa, Sizov 2023). The
 * general kernel gives each query row one warp that walks all S keys, so a
 * decode step (B H rows, e.g. 12) keeps 12 warps of the GPU busy; here the
 * keys are cut into chunks of DEC_CHUNK, one block per (chunk, row), and a
 * second kernel merges the chunks' partial softmax results.
 *
 * q (B,H,1,D), k (B,Hkv,S,D), v (B,Hkv,S,Dv) any strides, mask (B,H,1,S)
 * view (stride 0 where broadcast) bool (true = keep) or float (added) or
 * NULL; a causal mask sees every key when T == 1 (j <= 0 + S - 1). f32,
 * bf16, f16 inputs, f32 compute, D and Dv <= 256.
 *
 * Partial (one block per chunk and row): the scores of the chunk's keys
 * (a warp per key, DEC_KU keys in flight per warp, the dot product reduced
 * across the warp in a fixed butterfly; a masked key is not read), their
 * max m, p = exp(s - m) and l = sum p (one warp, fixed order), then
 * acc = sum p v over the chunk (DEC_G key groups, summed in group order).
 * Combine (one warp per row): M = max m, L = sum l e^(m - M) and
 * out = sum acc e^(m - M) / L over the chunks in order; lse = M + log L.
 * Every sum runs in a fixed order, so results are deterministic. A row
 * with every key masked gives 0 and lse -inf, as the general kernel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define DEC_WARPS 4
#define DEC_THREADS (DEC_WARPS * 32)
#define DEC_CHUNK 32 /* keys per block: one per lane of the softmax warp */
#define DEC_KU 4     /* keys per warp in flight */
#define DEC_MAXD 256
#define DEC_REG (DEC_MAXD / 32)
#define DEC_G 4 /* key groups of the P V product */

struct dec_args {
    const char *q, *k, *v, *mask;
    int dt, es, mdt, mes;
    int64_t H, group, S, D, Dv, nsplit;
    int64_t qs[4], ks[4], vs[4], ms[4];
    float scale;
    float *pm, *pl, *pacc; /* per (row, chunk): max, sum, [Dv] accumulator */
    char *o, *lse;
    int odt, oes, sdt, ses;
};

__device__ __forceinline__ float dec_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float dec_max_nan(float a, float b) {
    return isnan(a) ? a : (isnan(b) ? b : (b > a ? b : a));
}
__device__ __forceinline__ float dec_warp_max_nan(float v) {
    for (int o = 16; o > 0; o >>= 1) v = dec_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int64_t dec_off(const int64_t *s, int64_t a, int64_t b, int64_t c,
                                           int64_t d) {
    return a * s[0] + b * s[1] + c * s[2] + d * s[3];
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
        oj_cu_stf(a.o + (bh * a.Dv + c) * a.oes, a.odt, acc * inv);
    }
    if (lane == 0 && a.lse) {
        float lv = L > 0.0f ? M + logf(L) : -INFINITY;
        if (isnan(M) || isnan(L)) lv = NAN;
        oj_cu_stf(a.lse + bh * a.ses, a.sdt, lv);
    }
}

static bool float_dt(oj_dtype dt) { return dt == OJ_F32 || dt == OJ_BF16 || dt == OJ_F16; }

bool oj_cuda_attention_decode_ok(const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                 const oj_tensor *out) {
    static int off = -1; /* OJAS_CUDA_ATTN_DECODE=0 turns the path off (comparisons) */
    if (off < 0) {
        const char *e = getenv("OJAS_CUDA_ATTN_DECODE");
        off = e != NULL && strcmp(e, "0") == 0;
    }
    if (off || q->rank != 4 || k->rank != 4 || v->rank != 4 || q->shape[2] != 1) return false;
    if (!float_dt(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype || !float_dt(out->dtype))
        return false;
    int64_t B = q->shape[0], H = q->shape[1], S = k->shape[2], Hkv = k->shape[1];
    return q->shape[3] <= DEC_MAXD && v->shape[3] <= DEC_MAXD && S >= 1 && Hkv >= 1 &&
           H % Hkv == 0 && B * H >= 1 && B * H <= 65535 && (S + DEC_CHUNK - 1) / DEC_CHUNK <= INT32_MAX;
}

oj_status oj_cuda_attention_decode(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                   const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                   const oj_tensor *mask, double scale) {
    dec_args a;
    memset(&a, 0, sizeof a);
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
    a.odt = (int)out->dtype;
    a.oes = (int)oj_dtype_size(out->dtype);
    a.lse = lse ? oj_cuda_ptr(lse) : NULL;
    a.sdt = lse ? (int)lse->dtype : 0;
    a.ses = lse ? (int)oj_dtype_size(lse->dtype) : 0;
    int64_t rows = q->shape[0] * a.H;
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
