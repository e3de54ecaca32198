/* CUDA scaled dot-product attention without the [T, S] matrix: tiled, with
 * an online softmax (Milakov & Gimelshein 2018; FlashAttention, Dao et al.
 * 2022) forward, and a FlashAttention-2-style backward that recomputes the
 * probabilities from the saved row logsumexp.
 *
 * q (B,H,T,D), k (B,Hkv,S,D), v (B,Hkv,S,Dv) any strides, mask (B,H,T,S)
 * view or NULL, out (B,H,T,Dv) and dq, dk, dv (shaped like q, k, v) any
 * strides (stored through them), lse (B,H,T) contiguous. Head h uses kv head
 * h / (H / Hkv). Causal: query i sees key j <= i + S - T (bottom-right).
 * D, Dv <= 256.
 *
 * Layout of the work: one warp per query row (forward, dq) or per key row
 * (dk/dv); a lane holds the head dims lane, lane + 32, ... in registers.
 * Key (or query) tiles of 32 rows are staged in shared memory by the whole
 * block. Dot products reduce across the warp in a fixed butterfly; every
 * accumulation runs in a fixed order (keys ascending for a query; heads of
 * the group, then queries ascending, for a key, as the CPU), so results are
 * deterministic without atomics. Compute is f32 for f32/bf16/f16 inputs and
 * f64 for f64. This is the correct, simple kernel; the speed issue tunes it. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define ATT_WARPS 8 /* rows per block */
#define ATT_TILE 32 /* keys (queries) per shared tile: one per lane */
#define ATT_MAXD 256
#define ATT_REG (ATT_MAXD / 32)

struct attn_args {
    const char *q, *k, *v, *mask, *dout, *out, *lse_in;
    char *o, *lse, *dq, *dk, *dv;
    void *delta; /* [B, H, T] compute type (backward) */
    int dt, mdt, odt, sdt, gdt, es, mes, oes, ses, ges;
    int64_t B, H, Hkv, T, S, D, Dv, group;
    int64_t qs[4], ks[4], vs[4], ms[4], gs[4];
    int64_t os[4];               /* out: written (forward), read (backward) */
    int64_t dqs[4], dks[4], dvs[4]; /* written through (backward) */
    bool causal;
    double scale;
};

template <typename T> __device__ __forceinline__ T ldT(const char *p, int dt);
template <> __device__ __forceinline__ float ldT<float>(const char *p, int dt) {
    return oj_cu_ldf(p, dt);
}
template <> __device__ __forceinline__ double ldT<double>(const char *p, int dt) {
    return oj_cu_ld(p, dt);
}
__device__ __forceinline__ void stT(char *p, int dt, float v) { oj_cu_stf(p, dt, v); }
__device__ __forceinline__ void stT(char *p, int dt, double v) { oj_cu_st(p, dt, v); }

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T warp_max_nan(T v) {
    for (int o = 16; o > 0; o >>= 1) {
        T w = __shfl_xor_sync(0xffffffffu, v, o);
        v = isnan(v) ? v : (isnan(w) ? w : (w > v ? w : v));
    }
    return v;
}

__device__ __forceinline__ int64_t off4(const int64_t *s, int64_t a, int64_t b, int64_t c,
                                        int64_t d) {
    return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

/* Score of query i against key j: scale * dot + mask, or -inf when masked
 * or beyond the causal limit. */
template <typename T>
__device__ __forceinline__ T masked_score(const attn_args &a, T dot, int64_t b, int64_t h,
                                          int64_t i, int64_t j) {
    if (a.causal && j > i + a.S - a.T) return -INFINITY;
    T add = 0;
    if (a.mask) {
        const char *mp = a.mask + off4(a.ms, b, h, i, j) * a.mes;
        if (a.mdt == OJ_BOOL) {
            if (*(const uint8_t *)mp == 0) return -INFINITY;
        } else {
            add = ldT<T>(mp, a.mdt);
        }
    }
    return (T)a.scale * dot + add;
}

/* Stage rows [r0, r0 + n) of head (b, hh) of a strided rank-4 tensor into
 * sh [n][cols] (compute type). */
template <typename T>
__device__ __forceinline__ void stage(T *sh, const char *base, const int64_t *st, int dt, int es,
                                      int64_t b, int64_t hh, int64_t r0, int n, int64_t cols) {
    for (int64_t e = threadIdx.x; e < (int64_t)n * cols; e += blockDim.x) {
        int64_t r = e / cols, c = e - r * cols;
        sh[e] = ldT<T>(base + off4(st, b, hh, r0 + r, c) * es, dt);
    }
}

/* Keys visible to some query of [i0, i0 + nq) (causal bound). */
__device__ __forceinline__ int64_t keys_visible(const attn_args &a, int64_t i0, int64_t nq) {
    if (!a.causal) return a.S;
    int64_t last = i0 + nq - 1 + a.S - a.T + 1;
    return last < 0 ? 0 : (last > a.S ? a.S : last);
}

/* ---------------------------------------------------------------- forward */

template <typename T> __global__ void k_attn_forward(attn_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    T *kt = (T *)smem, *vt = kt + ATT_TILE * a.D;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t nqt = (a.T + ATT_WARPS - 1) / ATT_WARPS, total = nqt * a.H * a.B;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        int64_t qt = blk % nqt, bh = blk / nqt, h = bh % a.H, b = bh / a.H, hk = h / a.group;
        int64_t i0 = qt * ATT_WARPS, i = i0 + warp;
        int64_t nq = a.T - i0 < ATT_WARPS ? a.T - i0 : ATT_WARPS;
        bool active = i < a.T;
        T qr[ATT_REG], acc[ATT_REG];
        for (int r = 0; r < ATT_REG; r++) {
            int64_t c = lane + 32 * r;
            qr[r] = active && c < a.D ? ldT<T>(a.q + off4(a.qs, b, h, i, c) * a.es, a.dt) : (T)0;
            acc[r] = 0;
        }
        T m = -INFINITY, l = 0;
        int64_t kend = keys_visible(a, i0, nq);
        for (int64_t j0 = 0; j0 < kend; j0 += ATT_TILE) {
            int nk = (int)(kend - j0 < ATT_TILE ? kend - j0 : ATT_TILE);
            __syncthreads();
            stage<T>(kt, a.k, a.ks, a.dt, a.es, b, hk, j0, nk, a.D);
            stage<T>(vt, a.v, a.vs, a.dt, a.es, b, hk, j0, nk, a.Dv);
            __syncthreads();
            if (!active) continue;
            T my = -INFINITY;
            for (int jj = 0; jj < nk; jj++) {
                T part = 0;
                for (int r = 0; r < ATT_REG; r++) {
                    int64_t c = lane + 32 * r;
                    if (c < a.D) part += qr[r] * kt[jj * a.D + c];
                }
                T dot = warp_sum(part);
                if (lane == jj) my = dot;
            }
            T s = lane < nk ? masked_score<T>(a, my, b, h, i, j0 + lane) : (T)-INFINITY;
            T mb = warp_max_nan(s);
            if (mb == -INFINITY) continue; /* every key of the tile masked */
            T mn = (mb > m || isnan(mb)) ? mb : m;
            T corr = m == -INFINITY ? (T)0 : exp(m - mn);
            T p = s == -INFINITY ? (T)0 : exp(s - mn);
            l = l * corr + warp_sum(p);
            for (int r = 0; r < ATT_REG; r++) acc[r] *= corr;
            for (int jj = 0; jj < nk; jj++) {
                T pj = __shfl_sync(0xffffffffu, p, jj);
                for (int r = 0; r < ATT_REG; r++) {
                    int64_t c = lane + 32 * r;
                    if (c < a.Dv) acc[r] += pj * vt[jj * a.Dv + c];
                }
            }
            m = mn;
        }
        if (active) {
            T inv = l > 0 ? (T)1 / l : (T)0; /* fully masked row: 0 */
            int64_t row = (b * a.H + h) * a.T + i;
            for (int r = 0; r < ATT_REG; r++) {
                int64_t c = lane + 32 * r;
                if (c < a.Dv) stT(a.o + off4(a.os, b, h, i, c) * a.oes, a.odt, acc[r] * inv);
            }
            if (lane == 0 && a.lse) {
                T lv = l > 0 ? m + log(l) : (T)-INFINITY;
                if (isnan(m)) lv = m;
                stT(a.lse + row * a.ses, a.sdt, lv);
            }
        }
    }
}

/* ---------------------------------------------------------------- backward */

/* delta[b,h,i] = dout_i . out_i (one warp per row). */
template <typename T> __global__ void k_attn_delta(attn_args a) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t rows = a.B * a.H * a.T;
    for (int64_t row = (int64_t)blockIdx.x * ATT_WARPS + warp; row < rows;
         row += (int64_t)gridDim.x * ATT_WARPS) {
        int64_t i = row % a.T, bh = row / a.T, h = bh % a.H, b = bh / a.H;
        T part = 0;
        for (int64_t c = lane; c < a.Dv; c += 32)
            part += ldT<T>(a.dout + off4(a.gs, b, h, i, c) * a.ges, a.gdt) *
                    ldT<T>(a.out + off4(a.os, b, h, i, c) * a.oes, a.odt);
        T d = warp_sum(part);
        if (lane == 0) ((T *)a.delta)[row] = d;
    }
}

/* dq: one warp per query row, keys ascending. */
template <typename T> __global__ void k_attn_dq(attn_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    T *kt = (T *)smem, *vt = kt + ATT_TILE * a.D;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t nqt = (a.T + ATT_WARPS - 1) / ATT_WARPS, total = nqt * a.H * a.B;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        int64_t qt = blk % nqt, bh = blk / nqt, h = bh % a.H, b = bh / a.H, hk = h / a.group;
        int64_t i0 = qt * ATT_WARPS, i = i0 + warp;
        int64_t nq = a.T - i0 < ATT_WARPS ? a.T - i0 : ATT_WARPS;
        int64_t row = (b * a.H + h) * a.T + i;
        bool active = i < a.T;
        T lr = active ? ldT<T>(a.lse_in + row * a.ses, a.sdt) : (T)-INFINITY;
        T delta = active ? ((const T *)a.delta)[row] : (T)0;
        bool live = active && lr != -INFINITY; /* fully masked rows get no gradient */
        T qr[ATT_REG], gr[ATT_REG], dq[ATT_REG];
        for (int r = 0; r < ATT_REG; r++) {
            int64_t c = lane + 32 * r;
            qr[r] = live && c < a.D ? ldT<T>(a.q + off4(a.qs, b, h, i, c) * a.es, a.dt) : (T)0;
            gr[r] = live && c < a.Dv ? ldT<T>(a.dout + off4(a.gs, b, h, i, c) * a.ges, a.gdt)
                                     : (T)0;
            dq[r] = 0;
        }
        int64_t kend = keys_visible(a, i0, nq);
        for (int64_t j0 = 0; j0 < kend; j0 += ATT_TILE) {
            int nk = (int)(kend - j0 < ATT_TILE ? kend - j0 : ATT_TILE);
            __syncthreads();
            stage<T>(kt, a.k, a.ks, a.dt, a.es, b, hk, j0, nk, a.D);
            stage<T>(vt, a.v, a.vs, a.dt, a.es, b, hk, j0, nk, a.Dv);
            __syncthreads();
            if (!live) continue;
            T my_s = 0, my_dp = 0;
            for (int jj = 0; jj < nk; jj++) {
                T ps = 0, pd = 0;
                for (int r = 0; r < ATT_REG; r++) {
                    int64_t c = lane + 32 * r;
                    if (c < a.D) ps += qr[r] * kt[jj * a.D + c];
                    if (c < a.Dv) pd += gr[r] * vt[jj * a.Dv + c];
                }
                T s = warp_sum(ps), dp = warp_sum(pd);
                if (lane == jj) {
                    my_s = s;
                    my_dp = dp;
                }
            }
            T s = lane < nk ? masked_score<T>(a, my_s, b, h, i, j0 + lane) : (T)-INFINITY;
            T ds = s == -INFINITY ? (T)0 : exp(s - lr) * (my_dp - delta) * (T)a.scale;
            for (int jj = 0; jj < nk; jj++) {
                T dj = __shfl_sync(0xffffffffu, ds, jj);
                for (int r = 0; r < ATT_REG; r++) {
                    int64_t c = lane + 32 * r;
                    if (c < a.D) dq[r] += dj * kt[jj * a.D + c];
                }
            }
        }
        if (active)
            for (int r = 0; r < ATT_REG; r++) {
                int64_t c = lane + 32 * r;
                if (c < a.D) stT(a.dq + off4(a.dqs, b, h, i, c) * a.es, a.dt, dq[r]);
            }
    }
}

/* dk, dv: one warp per key row of kv head (b, hk); the group's heads in
 * order, queries ascending. Tiles of queries (q, dout, lse, delta) staged
 * in shared memory. */
template <typename T> __global__ void k_attn_dkv(attn_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    T *qsh = (T *)smem, *gsh = qsh + ATT_TILE * a.D, *lsh = gsh + ATT_TILE * a.Dv,
      *dsh = lsh + ATT_TILE;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t nkt = (a.S + ATT_WARPS - 1) / ATT_WARPS, total = nkt * a.Hkv * a.B;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        int64_t kb = blk % nkt, bh = blk / nkt, hk = bh % a.Hkv, b = bh / a.Hkv;
        int64_t j0 = kb * ATT_WARPS, j = j0 + warp;
        bool active = j < a.S;
        T kr[ATT_REG], vr[ATT_REG], dk[ATT_REG], dv[ATT_REG];
        for (int r = 0; r < ATT_REG; r++) {
            int64_t c = lane + 32 * r;
            kr[r] = active && c < a.D ? ldT<T>(a.k + off4(a.ks, b, hk, j, c) * a.es, a.dt) : (T)0;
            vr[r] = active && c < a.Dv ? ldT<T>(a.v + off4(a.vs, b, hk, j, c) * a.es, a.dt) : (T)0;
            dk[r] = 0;
            dv[r] = 0;
        }
        /* first query that may see key j0 (causal) */
        int64_t istart = 0;
        if (a.causal) {
            istart = j0 - (a.S - a.T);
            if (istart < 0) istart = 0;
        }
        for (int64_t h = hk * a.group; h < (hk + 1) * a.group; h++) {
            for (int64_t q0 = istart; q0 < a.T; q0 += ATT_TILE) {
                int nq = (int)(a.T - q0 < ATT_TILE ? a.T - q0 : ATT_TILE);
                __syncthreads();
                stage<T>(qsh, a.q, a.qs, a.dt, a.es, b, h, q0, nq, a.D);
                stage<T>(gsh, a.dout, a.gs, a.gdt, a.ges, b, h, q0, nq, a.Dv);
                for (int e = threadIdx.x; e < nq; e += blockDim.x) {
                    int64_t row = (b * a.H + h) * a.T + q0 + e;
                    lsh[e] = ldT<T>(a.lse_in + row * a.ses, a.sdt);
                    dsh[e] = ((const T *)a.delta)[row];
                }
                __syncthreads();
                if (!active) continue;
                for (int qq = 0; qq < nq; qq++) {
                    int64_t i = q0 + qq;
                    T lr = lsh[qq];
                    if (lr == -INFINITY) continue; /* fully masked row: no gradient */
                    if (a.causal && j > i + a.S - a.T) continue;
                    T ps = 0, pd = 0;
                    for (int r = 0; r < ATT_REG; r++) {
                        int64_t c = lane + 32 * r;
                        if (c < a.D) ps += kr[r] * qsh[qq * a.D + c];
                        if (c < a.Dv) pd += vr[r] * gsh[qq * a.Dv + c];
                    }
                    T s = masked_score<T>(a, warp_sum(ps), b, h, i, j);
                    if (s == -INFINITY) continue;
                    T dp = warp_sum(pd);
                    T p = exp(s - lr);
                    T ds = p * (dp - dsh[qq]) * (T)a.scale;
                    for (int r = 0; r < ATT_REG; r++) {
                        int64_t c = lane + 32 * r;
                        if (c < a.Dv) dv[r] += p * gsh[qq * a.Dv + c];
                        if (c < a.D) dk[r] += ds * qsh[qq * a.D + c];
                    }
                }
            }
        }
        if (active) {
            for (int r = 0; r < ATT_REG; r++) {
                int64_t c = lane + 32 * r;
                if (a.dk && c < a.D) stT(a.dk + off4(a.dks, b, hk, j, c) * a.es, a.dt, dk[r]);
                if (a.dv && c < a.Dv) stT(a.dv + off4(a.dvs, b, hk, j, c) * a.es, a.dt, dv[r]);
            }
        }
    }
}

/* ---------------------------------------------------------------- tiled (flash) kernels
 * The fast path for f32/bf16/f16 without a mask and D == Dv in {16, 32,
 * 64, 128}: a block of 256 threads (16 x 16) owns 64 query rows (forward,
 * dq) or 64 key rows (dk/dv) and walks 64-row tiles of the other side staged
 * in shared memory ([64][D + 1] floats: the +1 keeps column walks free of
 * bank conflicts). Thread (tx, ty) computes the 4 x 4 scores of rows
 * ty + 16 i and columns tx + 16 j with register blocking (f32 FMA), and
 * owns output columns tx + 16 c of its 4 rows. Row max/sum reduce over the
 * 16 lanes of a half-warp. Causal: tiles past the diagonal are never
 * loaded, heavy query tiles are scheduled first. Every sum runs in a fixed
 * order (d ascending, keys ascending, heads then queries ascending for
 * dk/dv), so results are deterministic without atomics. */
#define FA_B 64      /* rows per tile */
#define FA_THREADS 256
#define FA_PLD (FA_B + 1)

template <int D>
__device__ __forceinline__ void fa_stage(float *sh, const char *base, const int64_t *st, int dt,
                                         int es, int64_t b, int64_t hh, int64_t r0, int64_t n) {
    const char *p0 = base + (b * st[0] + hh * st[1] + r0 * st[2]) * es;
    for (int e = threadIdx.x; e < FA_B * D; e += FA_THREADS) {
        int r = e / D, c = e - r * D;
        float v = 0.0f;
        if (r < n) v = oj_cu_ldf(p0 + ((int64_t)r * st[2] + (int64_t)c * st[3]) * es, dt);
        sh[r * (D + 1) + c] = v;
    }
}

__device__ __forceinline__ float fa_hmax(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float fa_hsum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int D> __global__ void __launch_bounds__(FA_THREADS) k_fa_forward(attn_args a) {
    constexpr int LD = D + 1, NC = D / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    float *qs = (float *)smem, *ks = qs + FA_B * LD, *vs = ks + FA_B * LD, *ps = vs + FA_B * LD;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    int64_t nqt = (a.T + FA_B - 1) / FA_B;
    int64_t qt = nqt - 1 - (int64_t)blockIdx.x % nqt, bh = (int64_t)blockIdx.x / nqt;
    int64_t h = bh % a.H, b = bh / a.H, hk = h / a.group;
    int64_t i0 = qt * FA_B, nq = a.T - i0 < FA_B ? a.T - i0 : FA_B, diag = a.S - a.T;
    float scale = (float)a.scale;
    fa_stage<D>(qs, a.q, a.qs, a.dt, a.es, b, h, i0, nq);
    float m[4], l[4], acc[4][NC];
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;
    }
    int64_t kend = keys_visible(a, i0, nq);
    for (int64_t j0 = 0; j0 < kend; j0 += FA_B) {
        int64_t nk = kend - j0 < FA_B ? kend - j0 : FA_B;
        __syncthreads();
        fa_stage<D>(ks, a.k, a.ks, a.dt, a.es, b, hk, j0, nk);
        fa_stage<D>(vs, a.v, a.vs, a.dt, a.es, b, hk, j0, nk);
        __syncthreads();
        float s[4][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; d++) {
            float qv[4], kv[4];
            for (int i = 0; i < 4; i++) qv[i] = qs[(ty + 16 * i) * LD + d];
            for (int j = 0; j < 4; j++) kv[j] = ks[(tx + 16 * j) * LD + d];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
        }
        for (int i = 0; i < 4; i++) {
            int64_t row = i0 + ty + 16 * i;
            float mx = -INFINITY;
            for (int j = 0; j < 4; j++) {
                int cj = tx + 16 * j;
                float v = s[i][j] * scale;
                if (cj >= nk || (a.causal && j0 + cj > row + diag)) v = -INFINITY;
                s[i][j] = v;
                mx = fmaxf(mx, v);
            }
            mx = fa_hmax(mx);
            float mn = fmaxf(m[i], mx);
            float corr = m[i] == -INFINITY ? 0.0f : expf(m[i] - mn);
            float rs = 0.0f;
            for (int j = 0; j < 4; j++) {
                float p = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - mn);
                ps[(ty + 16 * i) * FA_PLD + tx + 16 * j] = p;
                rs += p;
            }
            rs = fa_hsum(rs);
            l[i] = l[i] * corr + rs;
            for (int c = 0; c < NC; c++) acc[i][c] *= corr;
            m[i] = mn;
        }
        __syncthreads();
        for (int kk = 0; kk < nk; kk++) {
            float pv[4];
            for (int i = 0; i < 4; i++) pv[i] = ps[(ty + 16 * i) * FA_PLD + kk];
            for (int c = 0; c < NC; c++) {
                float vv = vs[kk * LD + tx + 16 * c];
                for (int i = 0; i < 4; i++) acc[i][c] = fmaf(pv[i], vv, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < 4; i++) {
        int64_t row = i0 + ty + 16 * i;
        if (row >= a.T) continue;
        int64_t orow = (b * a.H + h) * a.T + row;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f; /* fully masked row: 0 */
        for (int c = 0; c < NC; c++)
            stT(a.o + off4(a.os, b, h, row, tx + 16 * c) * a.oes, a.odt, acc[i][c] * inv);
        if (tx == 0 && a.lse)
            stT(a.lse + orow * a.ses, a.sdt, l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY);
    }
}

/* dq for 64 query rows: keys ascending; ds tile through shared memory. */
template <int D> __global__ void __launch_bounds__(FA_THREADS) k_fa_dq(attn_args a) {
    constexpr int LD = D + 1, NC = D / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    float *qs = (float *)smem, *gs = qs + FA_B * LD, *ks = gs + FA_B * LD, *vs = ks + FA_B * LD,
          *dss = vs + FA_B * LD;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    int64_t nqt = (a.T + FA_B - 1) / FA_B;
    int64_t qt = nqt - 1 - (int64_t)blockIdx.x % nqt, bh = (int64_t)blockIdx.x / nqt;
    int64_t h = bh % a.H, b = bh / a.H, hk = h / a.group;
    int64_t i0 = qt * FA_B, nq = a.T - i0 < FA_B ? a.T - i0 : FA_B, diag = a.S - a.T;
    float scale = (float)a.scale;
    fa_stage<D>(qs, a.q, a.qs, a.dt, a.es, b, h, i0, nq);
    fa_stage<D>(gs, a.dout, a.gs, a.gdt, a.ges, b, h, i0, nq);
    float lr[4], dl[4], acc[4][NC];
    for (int i = 0; i < 4; i++) {
        int64_t row = i0 + ty + 16 * i, orow = (b * a.H + h) * a.T + row;
        lr[i] = row < a.T ? ldT<float>(a.lse_in + orow * a.ses, a.sdt) : -INFINITY;
        dl[i] = row < a.T ? ((const float *)a.delta)[orow] : 0.0f;
        for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;
    }
    int64_t kend = keys_visible(a, i0, nq);
    for (int64_t j0 = 0; j0 < kend; j0 += FA_B) {
        int64_t nk = kend - j0 < FA_B ? kend - j0 : FA_B;
        __syncthreads();
        fa_stage<D>(ks, a.k, a.ks, a.dt, a.es, b, hk, j0, nk);
        fa_stage<D>(vs, a.v, a.vs, a.dt, a.es, b, hk, j0, nk);
        __syncthreads();
        float s[4][4], dp[4][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < D; d++) {
            float qv[4], gv[4], kv[4], vv[4];
            for (int i = 0; i < 4; i++) {
                qv[i] = qs[(ty + 16 * i) * LD + d];
                gv[i] = gs[(ty + 16 * i) * LD + d];
            }
            for (int j = 0; j < 4; j++) {
                kv[j] = ks[(tx + 16 * j) * LD + d];
                vv[j] = vs[(tx + 16 * j) * LD + d];
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
                    dp[i][j] = fmaf(gv[i], vv[j], dp[i][j]);
                }
        }
        for (int i = 0; i < 4; i++) {
            int64_t row = i0 + ty + 16 * i;
            for (int j = 0; j < 4; j++) {
                int cj = tx + 16 * j;
                bool ok = cj < nk && lr[i] != -INFINITY && !(a.causal && j0 + cj > row + diag);
                float p = ok ? expf(s[i][j] * scale - lr[i]) : 0.0f;
                dss[(ty + 16 * i) * FA_PLD + cj] = ok ? p * (dp[i][j] - dl[i]) * scale : 0.0f;
            }
        }
        __syncthreads();
        for (int kk = 0; kk < nk; kk++) {
            float dv4[4];
            for (int i = 0; i < 4; i++) dv4[i] = dss[(ty + 16 * i) * FA_PLD + kk];
            for (int c = 0; c < NC; c++) {
                float kv = ks[kk * LD + tx + 16 * c];
                for (int i = 0; i < 4; i++) acc[i][c] = fmaf(dv4[i], kv, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < 4; i++) {
        int64_t row = i0 + ty + 16 * i;
        if (row >= a.T) continue;
        for (int c = 0; c < NC; c++)
            stT(a.dq + off4(a.dqs, b, h, row, tx + 16 * c) * a.es, a.dt, acc[i][c]);
    }
}

/* dk, dv for 64 key rows of kv head (b, hk): the group's heads in order,
 * query tiles ascending from the first query that sees the tile. */
template <int D> __global__ void __launch_bounds__(FA_THREADS) k_fa_dkv(attn_args a) {
    constexpr int LD = D + 1, NC = D / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    float *ks = (float *)smem, *vs = ks + FA_B * LD, *qs = vs + FA_B * LD, *gs = qs + FA_B * LD,
          *pss = gs + FA_B * LD, *dss = pss + FA_B * FA_PLD, *lsh = dss + FA_B * FA_PLD,
          *dsh = lsh + FA_B;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    int64_t nkt = (a.S + FA_B - 1) / FA_B;
    int64_t kt = (int64_t)blockIdx.x % nkt, bh = (int64_t)blockIdx.x / nkt;
    int64_t hk = bh % a.Hkv, b = bh / a.Hkv;
    int64_t j0 = kt * FA_B, nk = a.S - j0 < FA_B ? a.S - j0 : FA_B, diag = a.S - a.T;
    float scale = (float)a.scale;
    fa_stage<D>(ks, a.k, a.ks, a.dt, a.es, b, hk, j0, nk);
    fa_stage<D>(vs, a.v, a.vs, a.dt, a.es, b, hk, j0, nk);
    float dk[4][NC], dv[4][NC];
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < NC; c++) dk[i][c] = dv[i][c] = 0.0f;
    int64_t istart = 0;
    if (a.causal) {
        istart = j0 - diag;
        if (istart < 0) istart = 0;
    }
    for (int64_t h = hk * a.group; h < (hk + 1) * a.group; h++) {
        for (int64_t q0 = istart; q0 < a.T; q0 += FA_B) {
            int64_t nq = a.T - q0 < FA_B ? a.T - q0 : FA_B;
            __syncthreads();
            fa_stage<D>(qs, a.q, a.qs, a.dt, a.es, b, h, q0, nq);
            fa_stage<D>(gs, a.dout, a.gs, a.gdt, a.ges, b, h, q0, nq);
            if (threadIdx.x < FA_B) {
                int e = threadIdx.x;
                int64_t orow = (b * a.H + h) * a.T + q0 + e;
                lsh[e] = e < nq ? ldT<float>(a.lse_in + orow * a.ses, a.sdt) : -INFINITY;
                dsh[e] = e < nq ? ((const float *)a.delta)[orow] : 0.0f;
            }
            __syncthreads();
            float s[4][4], dp[4][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
            for (int d = 0; d < D; d++) {
                float kv[4], vv[4], qv[4], gv[4];
                for (int i = 0; i < 4; i++) {
                    kv[i] = ks[(ty + 16 * i) * LD + d];
                    vv[i] = vs[(ty + 16 * i) * LD + d];
                }
                for (int j = 0; j < 4; j++) {
                    qv[j] = qs[(tx + 16 * j) * LD + d];
                    gv[j] = gs[(tx + 16 * j) * LD + d];
                }
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) {
                        s[i][j] = fmaf(kv[i], qv[j], s[i][j]);
                        dp[i][j] = fmaf(vv[i], gv[j], dp[i][j]);
                    }
            }
            for (int i = 0; i < 4; i++) {
                int64_t key = j0 + ty + 16 * i;
                for (int j = 0; j < 4; j++) {
                    int cj = tx + 16 * j;
                    float lq = lsh[cj];
                    bool ok = key < a.S && lq != -INFINITY && !(a.causal && key > q0 + cj + diag);
                    float p = ok ? expf(s[i][j] * scale - lq) : 0.0f;
                    pss[(ty + 16 * i) * FA_PLD + cj] = p;
                    dss[(ty + 16 * i) * FA_PLD + cj] = ok ? p * (dp[i][j] - dsh[cj]) * scale : 0.0f;
                }
            }
            __syncthreads();
            for (int cc = 0; cc < nq; cc++) {
                float p4[4], d4[4];
                for (int i = 0; i < 4; i++) {
                    p4[i] = pss[(ty + 16 * i) * FA_PLD + cc];
                    d4[i] = dss[(ty + 16 * i) * FA_PLD + cc];
                }
                for (int c = 0; c < NC; c++) {
                    float go = gs[cc * LD + tx + 16 * c], qv = qs[cc * LD + tx + 16 * c];
                    for (int i = 0; i < 4; i++) {
                        dv[i][c] = fmaf(p4[i], go, dv[i][c]);
                        dk[i][c] = fmaf(d4[i], qv, dk[i][c]);
                    }
                }
            }
        }
    }
    for (int i = 0; i < 4; i++) {
        int64_t key = j0 + ty + 16 * i;
        if (key >= a.S) continue;
        for (int c = 0; c < NC; c++) {
            if (a.dk) stT(a.dk + off4(a.dks, b, hk, key, tx + 16 * c) * a.es, a.dt, dk[i][c]);
            if (a.dv) stT(a.dv + off4(a.dvs, b, hk, key, tx + 16 * c) * a.es, a.dt, dv[i][c]);
        }
    }
}

/* ---------------------------------------------------------------- host */

/* The tensor-core path (cuda_attention_tc.cu): bf16/f16, no mask, D == Dv
 * in {64, 128}, 16-byte aligned rows; `more` are the other tensors it reads
 * or writes (out; dout, dq, dk, dv), NULL ones skipped. */
bool oj_cuda_attention_tc_ok(const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                             const oj_tensor *mask, const oj_tensor *const *more, int nmore);
oj_status oj_cuda_attention_tc_forward(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                       const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                       bool is_causal, double scale);
oj_status oj_cuda_attention_tc_backward(oj_engine *eng, oj_tensor *dq, oj_tensor *dk,
                                        oj_tensor *dv, const oj_tensor *dout, const oj_tensor *q,
                                        const oj_tensor *k, const oj_tensor *v,
                                        const oj_tensor *out, const oj_tensor *lse,
                                        bool is_causal, double scale);

/* cuDNN's fused flash attention (cuda_attention_cudnn.cu; under EXACT
 * its deterministic graphs), tried on the tensor-core path's calls: true
 * when it ran; false when it did not take the call (off, a shape or
 * layout it refuses: the tensor-core kernels run) or, with *st set and
 * the error recorded, when the pool had no room for its workspace. The
 * backward runs cuDNN only after a cuDNN forward of the same key (both
 * implementations write and read the same natural-log lse). */
bool oj_cuda_attention_cudnn_forward(oj_engine *eng, oj_status *st, oj_tensor *out, oj_tensor *lse,
                                     const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                     bool is_causal, double scale);
bool oj_cuda_attention_cudnn_backward(oj_engine *eng, oj_status *st, oj_tensor *dq, oj_tensor *dk,
                                      oj_tensor *dv, const oj_tensor *dout, const oj_tensor *q,
                                      const oj_tensor *k, const oj_tensor *v, const oj_tensor *out,
                                      const oj_tensor *lse, bool is_causal, double scale);
void oj_cuda_attention_note(oj_engine *eng, bool backward, const char *impl, const char *why);

/* One query row per head (T == 1, a decode step), split over the keys
 * (cuda_attention_decode.cu): f32/bf16/f16, D, Dv <= 256, any mask. */
bool oj_cuda_attention_decode_ok(const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                 const oj_tensor *out);
oj_status oj_cuda_attention_decode(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                   const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                   const oj_tensor *mask, double scale);

static void fill_strides(int64_t *dst, const oj_tensor *t) {
    for (int d = 0; d < 4; d++) dst[d] = t ? t->stride[d] : 0;
}

static void args_init(attn_args *a, const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                      const oj_tensor *mask, bool causal, double scale) {
    memset(a, 0, sizeof *a);
    a->q = oj_cuda_ptr(q);
    a->k = oj_cuda_ptr(k);
    a->v = oj_cuda_ptr(v);
    a->mask = mask ? oj_cuda_ptr(mask) : NULL;
    a->dt = (int)q->dtype;
    a->es = (int)oj_dtype_size(q->dtype);
    a->mdt = mask ? (int)mask->dtype : 0;
    a->mes = mask ? (int)oj_dtype_size(mask->dtype) : 0;
    a->B = q->shape[0];
    a->H = q->shape[1];
    a->T = q->shape[2];
    a->D = q->shape[3];
    a->Hkv = k->shape[1];
    a->S = k->shape[2];
    a->Dv = v->shape[3];
    a->group = a->Hkv ? a->H / a->Hkv : 1;
    if (a->group < 1) a->group = 1;
    fill_strides(a->qs, q);
    fill_strides(a->ks, k);
    fill_strides(a->vs, v);
    fill_strides(a->ms, mask);
    a->causal = causal;
    a->scale = scale;
}

static oj_status check_dims(oj_engine *eng, const attn_args *a) {
    if (a->D > ATT_MAXD || a->Dv > ATT_MAXD)
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "scaled_dot_product_attention: the cuda kernel supports head dims up "
                            "to %d, got D %lld and Dv %lld",
                            ATT_MAXD, (long long)a->D, (long long)a->Dv);
    return OJ_OK;
}

static unsigned grid_of(int64_t total) { return (unsigned)(total < (1 << 30) ? total : (1 << 30)); }

/* Launch kernel Kern with `smem` bytes of dynamic shared memory (opting in
 * above the 48 KiB default once per device: oj_cuda_kernel_smem, one
 * oj_cuda_kfacts per kernel instance). */
template <auto Kern>
static oj_status launch(oj_engine *eng, int64_t total, size_t smem, const attn_args &a,
                        const char *name) {
    static oj_cuda_kfacts facts;
    if (total <= 0) return OJ_OK;
    cudaError_t e = oj_cuda_kernel_smem(&facts, (const void *)Kern,
                                        oj_cuda_state_of(eng)->ordinal, smem);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, name);
    Kern<<<grid_of(total), ATT_WARPS * 32, smem, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, name);
}

/* As launch, for the tiled kernels (FA_THREADS threads, one block per tile). */
template <auto Kern>
static oj_status launch_fa(oj_engine *eng, int64_t total, size_t smem, const attn_args &a,
                           const char *name) {
    static oj_cuda_kfacts facts;
    if (total <= 0) return OJ_OK;
    if (total > INT32_MAX)
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED, "%s: %lld tiles exceed the grid", name,
                            (long long)total);
    cudaError_t e = oj_cuda_kernel_smem(&facts, (const void *)Kern,
                                        oj_cuda_state_of(eng)->ordinal, smem);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, name);
    Kern<<<(unsigned)total, FA_THREADS, smem, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, name);
}

/* The tiled kernels apply: f32 compute, no mask, D == Dv in {16, 32, 64, 128}. */
static size_t fa_smem(int64_t D, int tiles, int ptiles) {
    return ((size_t)tiles * FA_B * (size_t)(D + 1) + (size_t)ptiles * FA_B * FA_PLD + 2 * FA_B) *
           sizeof(float);
}
/* ... and the device grants the backward's shared memory (the largest:
 * 162 KiB at D 128; Hopper and A100 do, smaller parts fall back). */
static bool fa_ok(const attn_args &a) {
    if (a.dt == OJ_F64 || a.mask != NULL || a.D != a.Dv ||
        !(a.D == 16 || a.D == 32 || a.D == 64 || a.D == 128))
        return false;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return fa_smem(a.D, 4, 2) <= (size_t)optin;
}

template <int D> static oj_status fa_forward_d(oj_engine *eng, const attn_args &a) {
    int64_t total = (a.T + FA_B - 1) / FA_B * a.H * a.B;
    return launch_fa<k_fa_forward<D>>(eng, total, fa_smem(D, 3, 1), a,
                                      "attention_forward (tiled)");
}
template <int D>
static oj_status fa_backward_d(oj_engine *eng, const attn_args &a, bool want_dq, bool want_dkv) {
    oj_status st = OJ_OK;
    if (want_dq)
        st = launch_fa<k_fa_dq<D>>(eng, (a.T + FA_B - 1) / FA_B * a.H * a.B, fa_smem(D, 4, 1), a,
                                   "attention_backward (tiled dq)");
    if (st == OJ_OK && want_dkv)
        st = launch_fa<k_fa_dkv<D>>(eng, (a.S + FA_B - 1) / FA_B * a.Hkv * a.B, fa_smem(D, 4, 2),
                                    a, "attention_backward (tiled dk, dv)");
    return st;
}

static oj_status fa_forward(oj_engine *eng, const attn_args &a) {
    switch (a.D) {
    case 16: return fa_forward_d<16>(eng, a);
    case 32: return fa_forward_d<32>(eng, a);
    case 64: return fa_forward_d<64>(eng, a);
    default: return fa_forward_d<128>(eng, a);
    }
}
static oj_status fa_backward(oj_engine *eng, const attn_args &a, bool want_dq, bool want_dkv) {
    switch (a.D) {
    case 16: return fa_backward_d<16>(eng, a, want_dq, want_dkv);
    case 32: return fa_backward_d<32>(eng, a, want_dq, want_dkv);
    case 64: return fa_backward_d<64>(eng, a, want_dq, want_dkv);
    default: return fa_backward_d<128>(eng, a, want_dq, want_dkv);
    }
}

template <typename T>
static oj_status forward_t(oj_engine *eng, const attn_args &a) {
    if (fa_ok(a)) return fa_forward(eng, a);
    int64_t total = (a.T + ATT_WARPS - 1) / ATT_WARPS * a.H * a.B;
    size_t smem = (size_t)ATT_TILE * (size_t)(a.D + a.Dv) * sizeof(T);
    return launch<k_attn_forward<T>>(eng, total, smem, a, "attention_forward");
}

oj_status oj_cuda_attention_forward(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                    const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                    const oj_tensor *mask, bool is_causal, double scale) {
    const char *op = "scaled_dot_product_attention";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, lse, op, "lse") != OJ_OK) return oj_last_status(eng);
    attn_args a;
    args_init(&a, q, k, v, mask, is_causal, scale);
    if (check_dims(eng, &a) != OJ_OK) return oj_last_status(eng);
    a.o = oj_cuda_ptr(out);
    a.odt = (int)out->dtype;
    a.oes = (int)oj_dtype_size(out->dtype);
    fill_strides(a.os, out);
    a.lse = lse ? oj_cuda_ptr(lse) : NULL;
    a.sdt = lse ? (int)lse->dtype : 0;
    a.ses = lse ? (int)oj_dtype_size(lse->dtype) : 0;
    if (a.B * a.H * a.T == 0) return OJ_OK;
    const char *other = "not on the tensor-core path (dtype, head dim, mask or layout)";
    if (oj_cuda_attention_decode_ok(q, k, v, out)) {
        oj_cuda_attention_note(eng, false, "split-key decode", other);
        return oj_cuda_attention_decode(eng, out, lse, q, k, v, mask, scale);
    }
    const oj_tensor *more[1] = {out};
    if (oj_cuda_attention_tc_ok(q, k, v, mask, more, 1)) {
        oj_status st = OJ_OK;
        if (oj_cuda_attention_cudnn_forward(eng, &st, out, lse, q, k, v, is_causal, scale) ||
            st != OJ_OK)
            return st;
        oj_cuda_attention_note(eng, false, "tensor core", NULL);
        return oj_cuda_attention_tc_forward(eng, out, lse, q, k, v, is_causal, scale);
    }
    oj_cuda_attention_note(eng, false, "f32 kernels", other);
    return q->dtype == OJ_F64 ? forward_t<double>(eng, a) : forward_t<float>(eng, a);
}

template <typename T>
static oj_status backward_t(oj_engine *eng, attn_args &a, bool want_dq, bool want_dkv) {
    oj_storage *hold = NULL;
    a.delta = oj_cuda_scratch(eng, (size_t)(a.B * a.H * a.T) * sizeof(T),
                              "scaled_dot_product_attention", &hold);
    if (a.delta == NULL) return oj_last_status(eng);
    int64_t rows = a.B * a.H * a.T;
    oj_status st = launch<k_attn_delta<T>>(eng, (rows + ATT_WARPS - 1) / ATT_WARPS, 0, a,
                                           "attention_backward (delta)");
    if (st == OJ_OK && fa_ok(a)) {
        st = fa_backward(eng, a, want_dq, want_dkv);
        oj__storage_release(hold);
        return st;
    }
    if (st == OJ_OK && want_dq) {
        int64_t total = (a.T + ATT_WARPS - 1) / ATT_WARPS * a.H * a.B;
        size_t smem = (size_t)ATT_TILE * (size_t)(a.D + a.Dv) * sizeof(T);
        st = launch<k_attn_dq<T>>(eng, total, smem, a, "attention_backward (dq)");
    }
    if (st == OJ_OK && want_dkv) {
        int64_t total = (a.S + ATT_WARPS - 1) / ATT_WARPS * a.Hkv * a.B;
        size_t smem = (size_t)ATT_TILE * (size_t)(a.D + a.Dv + 2) * sizeof(T);
        st = launch<k_attn_dkv<T>>(eng, total, smem, a, "attention_backward (dk, dv)");
    }
    oj__storage_release(hold);
    return st;
}

oj_status oj_cuda_attention_backward(oj_engine *eng, oj_tensor *dq, oj_tensor *dk, oj_tensor *dv,
                                     const oj_tensor *dout, const oj_tensor *q,
                                     const oj_tensor *k, const oj_tensor *v, const oj_tensor *out,
                                     const oj_tensor *lse, const oj_tensor *mask, bool is_causal,
                                     double scale) {
    const char *op = "scaled_dot_product_attention";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, lse, op, "lse") != OJ_OK) return oj_last_status(eng);
    attn_args a;
    args_init(&a, q, k, v, mask, is_causal, scale);
    if (check_dims(eng, &a) != OJ_OK) return oj_last_status(eng);
    a.dout = oj_cuda_ptr(dout);
    a.gdt = (int)dout->dtype;
    a.ges = (int)oj_dtype_size(dout->dtype);
    fill_strides(a.gs, dout);
    a.out = oj_cuda_ptr(out);
    a.odt = (int)out->dtype;
    a.oes = (int)oj_dtype_size(out->dtype);
    fill_strides(a.os, out);
    a.lse_in = oj_cuda_ptr(lse);
    a.sdt = (int)lse->dtype;
    a.ses = (int)oj_dtype_size(lse->dtype);
    a.dq = dq ? oj_cuda_ptr(dq) : NULL;
    a.dk = dk ? oj_cuda_ptr(dk) : NULL;
    a.dv = dv ? oj_cuda_ptr(dv) : NULL;
    fill_strides(a.dqs, dq);
    fill_strides(a.dks, dk);
    fill_strides(a.dvs, dv);
    /* With no query row (T == 0) dk/dv are zero (through their strides); dq
     * is empty. */
    if (a.B * a.H * a.T == 0) {
        oj_status st = OJ_OK;
        if (dk && oj_cuda_numel(dk)) st = oj_cuda_fill(eng, dk, 0.0);
        if (st == OJ_OK && dv && oj_cuda_numel(dv)) st = oj_cuda_fill(eng, dv, 0.0);
        return st;
    }
    bool want_dq = dq != NULL, want_dkv = dk != NULL || dv != NULL;
    if (!want_dq && !want_dkv) return OJ_OK;
    const oj_tensor *more[4] = {dout, dq, dk, dv};
    if (oj_cuda_attention_tc_ok(q, k, v, mask, more, 4)) {
        oj_status st = OJ_OK;
        if (oj_cuda_attention_cudnn_backward(eng, &st, dq, dk, dv, dout, q, k, v, out, lse,
                                             is_causal, scale) ||
            st != OJ_OK)
            return st;
        oj_cuda_attention_note(eng, true, "tensor core", NULL);
        return oj_cuda_attention_tc_backward(eng, dq, dk, dv, dout, q, k, v, out, lse, is_causal,
                                             scale);
    }
    oj_cuda_attention_note(eng, true, "f32 kernels",
                           "not on the tensor-core path (dtype, head dim, mask or layout)");
    return q->dtype == OJ_F64 ? backward_t<double>(eng, a, want_dq, want_dkv)
                              : backward_t<float>(eng, a, want_dq, want_dkv);
}
