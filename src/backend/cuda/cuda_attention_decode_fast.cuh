/* The fast path of the split-key decode attention (cuda_attention_decode.cu,
 * whose head comment describes it) as __device__ functions, shared by its
 * kernels (k_dec_fast_partial: one (chunk, row) a block of DF_THREADS) and
 * the persistent decode step (cuda_decode_mega.cu: one (chunk, row) a half
 * of a 256-thread block), so both compute every state and output in the
 * same order: the same bits.
 *
 * CG (coherent): q, the mask and every key and value row are read through
 * L2 (ld.global.cg), not the read-only path: the persistent step reads
 * rows that blocks of the same launch wrote. */
#ifndef OJAS_CUDA_ATTENTION_DECODE_FAST_CUH
#define OJAS_CUDA_ATTENTION_DECODE_FAST_CUH

#include "backend/cuda/cuda_internal.cuh"

struct dec_args {
    const char *q, *k, *v, *mask;
    int dt, es, mdt, mes;
    int64_t H, group, S, D, Dv, nsplit;
    int64_t chunk, steps; /* fast path: keys per block, block steps per block */
    int64_t qs[4], ks[4], vs[4], ms[4];
    float scale;
    float *pm, *pl, *pacc; /* per (row, chunk): max, sum, [Dv] accumulator */
    unsigned int *count;   /* fast path: per row, chunks done (NULL: the combine kernel) */
    const int64_t *fresh;  /* fast path: the one key/value row the kernel before may write
                            * (the others load before the wait), or NULL (all after it) */
    char *o, *lse;
    int64_t os[4]; /* out [B, H, 1, Dv] is written through its strides */
    int odt, oes, sdt, ses;
};

__device__ __forceinline__ float dec_max_nan(float a, float b) {
    return isnan(a) ? a : (isnan(b) ? b : (b > a ? b : a));
}
__device__ __forceinline__ int64_t dec_off(const int64_t *s, int64_t a, int64_t b, int64_t c,
                                           int64_t d) {
    return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

/* Element offset of column c of output row bh = b H + h (T == 1). */
__device__ __forceinline__ int64_t dec_out_off(const dec_args &a, int64_t bh, int64_t c) {
    return (bh / a.H) * a.os[0] + (bh % a.H) * a.os[1] + c * a.os[3];
}

/* ---------------------------------------------------------------- fast path
 * T the storage type, D = Dv the head dim, MB the mask's element bytes (0
 * none, 1 bool, 2 bf16/f16, 4 f32). A key row is LPK lanes x 16 bytes, so
 * one warp load covers KPI = 32 / LPK keys; a warp takes DF_U such loads of
 * K and of V (and the keys' mask elements) per step, all issued before any
 * is used. Keys past the block's range or masked are loaded from a clamped
 * valid row and dropped by select. */
#define DF_WARPS 4
#define DF_THREADS (DF_WARPS * 32)
#define DF_U 4          /* 16-byte loads of K (and of V) per lane per step */
#define DF_BLOCKS 1024  /* blocks wanted before a block takes several steps */
#define DF_MAXSPLIT 128 /* chunks per row at most (the combine's length) */
#define DF_CB 16        /* chunks the combine loads at once */

/* Output column c of row `row` from its max M, sum L and accumulator x. */
__device__ __forceinline__ void df_finish(const dec_args &a, int64_t row, float M, float L, float x,
                                          int c, int Dv) {
    float inv = L > 0.0f ? 1.0f / L : 0.0f; /* every key masked: 0 */
    if (isnan(L)) inv = L;
    oj_cu_stf(a.o + dec_out_off(a, row, c) * a.oes, a.odt, x * inv);
    if (c == 0 && a.lse) {
        float lv = L > 0.0f ? M + logf(L) : -INFINITY;
        if (isnan(M) || isnan(L)) lv = NAN;
        oj_cu_stf(a.lse + row * a.ses, a.sdt, lv);
    }
}

/* Column c of row `row` from its chunks' states, merged in chunk order,
 * DF_CB chunks' m, l and acc loaded at once (an online max over the
 * batches), then written (df_finish). The loads go to L2 (__ldcg): the
 * states may have been written by other blocks of the running kernel. */
template <int D>
__device__ __forceinline__ void df_combine_col(const dec_args &a, int64_t row, int c) {
    const int ns = (int)a.nsplit;
    const float *pm = a.pm + row * ns, *pl = a.pl + row * ns, *px = a.pacc + row * ns * D + c;
    float M = -INFINITY, L = 0.0f, x = 0.0f;
    for (int s0 = 0; s0 < ns; s0 += DF_CB) {
        float mv[DF_CB], lv[DF_CB], xv[DF_CB];
#pragma unroll
        for (int i = 0; i < DF_CB; i++) {
            const int s = s0 + i < ns ? s0 + i : ns - 1;
            mv[i] = __ldcg(pm + s);
            lv[i] = __ldcg(pl + s);
            xv[i] = __ldcg(px + (int64_t)s * D);
        }
        float mn = M;
#pragma unroll
        for (int i = 0; i < DF_CB; i++) {
            if (s0 + i >= ns) mv[i] = -INFINITY;
            mn = dec_max_nan(mn, mv[i]);
        }
        if (mn == -INFINITY) continue; /* every key so far masked */
        const float al = M == -INFINITY ? 0.0f : expf(M - mn);
        L *= al;
        x *= al;
#pragma unroll
        for (int i = 0; i < DF_CB; i++) {
            const bool live = mv[i] != -INFINITY;
            const float g = live ? expf(mv[i] - mn) : 0.0f;
            L += live ? lv[i] * g : 0.0f;
            x += live ? xv[i] * g : 0.0f;
        }
        M = mn;
    }
    df_finish(a, row, M, L, x, c, D);
}

/* Barrier of the DF_THREADS threads that run a (chunk, row): the block
 * (id 0) or named barrier id of a DF_THREADS-thread part of it. */
__device__ __forceinline__ void df_sync(int id) {
    if (id == 0) __syncthreads();
    else asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(DF_THREADS) : "memory");
}

/* A 16-byte load, through L2 when CG, else the read-only path. */
template <bool CG> __device__ __forceinline__ uint4 df_ld16(const char *p) {
    if constexpr (CG) return __ldcg((const uint4 *)p);
    else return __ldg((const uint4 *)p);
}

/* Thread tid (< DF_THREADS) of the part running (split, row): the first
 * step's keys and values into kr, vr (its rows j0 + warp KW + u KPI + kg,
 * clamped to S), before the wait for the kernel that writes *a.fresh (the
 * one row df_partial loads again). */
template <typename T, int D, bool CG>
__device__ __forceinline__ void df_partial_preload(const dec_args &a, int64_t split, int64_t row,
                                                   int tid, uint4 (&kr)[DF_U], uint4 (&vr)[DF_U]) {
    constexpr int VEC = 16 / (int)sizeof(T), LPK = D / VEC, KPI = 32 / LPK, KW = DF_U * KPI;
    const int warp = tid >> 5, lane = tid & 31;
    const int sub = lane % LPK, kg = lane / LPK;
    const int64_t b = row / a.H, h = row % a.H, hk = h / a.group;
    const char *kb = a.k + (b * a.ks[0] + hk * a.ks[1]) * a.es + sub * 16;
    const char *vb = a.v + (b * a.vs[0] + hk * a.vs[1]) * a.es + sub * 16;
    const int64_t kst = a.ks[2] * a.es, vst = a.vs[2] * a.es;
    const int64_t jb = split * a.chunk + warp * KW;
#pragma unroll
    for (int u = 0; u < DF_U; u++) {
        const int64_t j = jb + u * KPI + kg, jc = j < a.S ? j : a.S - 1;
        kr[u] = df_ld16<CG>(kb + jc * kst);
        vr[u] = df_ld16<CG>(vb + jc * vst);
    }
}

/* The (split, row) part of the split-key attention, by its DF_THREADS
 * threads (tid 0 .. DF_THREADS - 1, barrier bar for df_sync): keys
 * [split chunk, min(S, (split + 1) chunk)) in a.steps steps, with the first
 * step's loads already in kr, vr when pre (df_partial_preload; the row
 * *a.fresh loaded again). The part's state goes to pm, pl, pacc (or, with
 * one chunk, the output to o); with a.count the row's last part to finish
 * merges the row's chunks into o. wm, wl [DF_WARPS], wacc [DF_WARPS][D],
 * last: the part's shared memory. */
template <typename T, int D, int MB, bool CG>
__device__ __forceinline__ void df_partial(const dec_args &a, int64_t split, int64_t row, int tid,
                                           bool pre, uint4 (&kr)[DF_U], uint4 (&vr)[DF_U],
                                           float *wm, float *wl, float (*wacc)[D], bool *last,
                                           int bar) {
    constexpr int VEC = 16 / (int)sizeof(T); /* elements per 16 bytes */
    constexpr int LPK = D / VEC;              /* lanes per key row */
    constexpr int KPI = 32 / LPK;             /* keys per warp load */
    constexpr int KW = DF_U * KPI;            /* keys per warp step */
    constexpr int KB = DF_WARPS * KW;         /* keys per block step */
    static_assert(LPK >= 1 && LPK <= 32 && 32 % LPK == 0 && D <= DF_THREADS, "head dim");
    const int warp = tid >> 5, lane = tid & 31;
    const int sub = lane % LPK, kg = lane / LPK; /* columns sub*VEC.., key kg of a load */
    const int64_t b = row / a.H, h = row % a.H, hk = h / a.group;
    const int64_t j0 = split * a.chunk, jend = j0 + a.chunk < a.S ? j0 + a.chunk : a.S;
    const char *kb = a.k + (b * a.ks[0] + hk * a.ks[1]) * a.es + sub * 16;
    const char *vb = a.v + (b * a.vs[0] + hk * a.vs[1]) * a.es + sub * 16;
    const int64_t kst = a.ks[2] * a.es, vst = a.vs[2] * a.es;
    const uint4 qraw = df_ld16<CG>(a.q + (b * a.qs[0] + h * a.qs[1]) * a.es + sub * 16);
    const char *mrow = MB ? a.mask + (b * a.ms[0] + h * a.ms[1]) * MB : NULL;
    const int64_t mst = a.ms[3] * MB;
    float m = -INFINITY, l = 0.0f, acc[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = 0.0f;
    for (int64_t st = 0; st < a.steps; st++) {
        const int64_t jb = j0 + st * KB + warp * KW; /* this warp's first key */
        if (jb >= jend) break;                       /* uniform over the warp */
        float madd[DF_U];
        unsigned mkeep[DF_U];
        const int64_t fj = pre && st == 0 ? __ldcg(a.fresh) : -1;
#pragma unroll
        for (int u = 0; u < DF_U; u++) { /* every load of the step, then their use */
            int64_t j = jb + u * KPI + kg, jc = j < a.S ? j : a.S - 1;
            if (!pre || st > 0) {
                kr[u] = df_ld16<CG>(kb + jc * kst);
                vr[u] = df_ld16<CG>(vb + jc * vst);
            } else if (j == fj) { /* this step's key and value, just written */
                kr[u] = __ldcg((const uint4 *)(kb + jc * kst));
                vr[u] = __ldcg((const uint4 *)(vb + jc * vst));
            }
            mkeep[u] = 1u;
            madd[u] = 0.0f;
            if constexpr (CG) {
                if (MB == 1) mkeep[u] = __ldcg((const unsigned char *)(mrow + jc * mst));
                if (MB == 2) mkeep[u] = __ldcg((const unsigned short *)(mrow + jc * mst));
                if (MB == 4) madd[u] = __ldcg((const float *)(mrow + jc * mst));
            } else {
                if (MB == 1) mkeep[u] = __ldg((const unsigned char *)(mrow + jc * mst));
                if (MB == 2) mkeep[u] = __ldg((const unsigned short *)(mrow + jc * mst));
                if (MB == 4) madd[u] = __ldg((const float *)(mrow + jc * mst));
            }
        }
        float q[VEC], s[DF_U];
        oj_cu_unpackv<T, VEC>(qraw, q);
#pragma unroll
        for (int u = 0; u < DF_U; u++) {
            float kf[VEC], d = 0.0f;
            oj_cu_unpackv<T, VEC>(kr[u], kf);
#pragma unroll
            for (int e = 0; e < VEC; e++) d = fmaf(q[e], kf[e], d);
#pragma unroll
            for (int o = LPK / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
            float add = madd[u];
            if (MB == 2)
                add = a.mdt == OJ_BF16 ? oj_cu_bf16_to_f32((uint16_t)mkeep[u])
                                       : oj_cu_f16_to_f32((uint16_t)mkeep[u]);
            bool keep = jb + u * KPI + kg < jend && (MB != 1 || mkeep[u] != 0u);
            s[u] = keep ? a.scale * d + add : -INFINITY;
        }
        float mx = s[0];
#pragma unroll
        for (int u = 1; u < DF_U; u++) mx = dec_max_nan(mx, s[u]);
#pragma unroll
        for (int o = LPK; o < 32; o <<= 1) mx = dec_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float mn = dec_max_nan(m, mx);
        if (mn == -INFINITY) continue; /* every key so far masked */
        const float al = m == -INFINITY ? 0.0f : expf(m - mn);
        l *= al;
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] *= al;
#pragma unroll
        for (int u = 0; u < DF_U; u++) {
            const bool live = s[u] != -INFINITY;
            const float p = live ? expf(s[u] - mn) : 0.0f;
            float vf[VEC];
            oj_cu_unpackv<T, VEC>(vr[u], vf);
            l += p;
#pragma unroll
            for (int e = 0; e < VEC; e++) acc[e] += live ? p * vf[e] : 0.0f;
        }
        m = mn;
    }
    /* the warp's state: sum over its key groups (all lanes share m) */
#pragma unroll
    for (int o = LPK; o < 32; o <<= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, o);
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
    }
    if (kg == 0) {
#pragma unroll
        for (int e = 0; e < VEC; e++) wacc[warp][sub * VEC + e] = acc[e];
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
    df_sync(bar);
    /* the block's state, warps in order; thread c < D takes column c */
    const int c = tid;
    const bool col = c < D;
    float M = -INFINITY, L = 0.0f, x = 0.0f;
    if (col) {
#pragma unroll
        for (int w = 0; w < DF_WARPS; w++) M = dec_max_nan(M, wm[w]);
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < DF_WARPS; w++) {
                const bool live = wm[w] != -INFINITY;
                const float g = live ? expf(wm[w] - M) : 0.0f;
                L += live ? wl[w] * g : 0.0f;
                x += live ? wacc[w][c] * g : 0.0f;
            }
        }
    }
    if (a.nsplit == 1) {
        if (col) df_finish(a, row, M, L, x, c, D);
        return;
    }
    const int64_t slot = row * a.nsplit + split;
    if (col) {
        a.pacc[slot * D + c] = x;
        if (c == 0) {
            a.pm[slot] = M;
            a.pl[slot] = L;
        }
    }
    if (a.count == NULL) return; /* the combine kernel merges the chunks */
    /* the row's last part to finish merges its chunks (the arrival
     * pattern of CUDA's threadFenceReduction sample): the states are made
     * visible device-wide before the arrival is counted */
    __threadfence();
    df_sync(bar);
    if (tid == 0) {
        *last = atomicAdd(a.count + row, 1u) == (unsigned int)(a.nsplit - 1);
        if (*last) a.count[row] = 0; /* every chunk has arrived: ready for the next launch */
    }
    df_sync(bar);
    const bool merge = *last;
    df_sync(bar); /* every thread has read *last before the part's next row may set it */
    if (!merge) return;
    __threadfence();
    if (col) df_combine_col<D>(a, row, c);
}

#endif /* OJAS_CUDA_ATTENTION_DECODE_FAST_CUH */
