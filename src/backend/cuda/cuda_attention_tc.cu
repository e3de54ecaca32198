/* Tensor-core flash attention for bf16/f16 on sm_80+ (tuned for Hopper,
 * H200): the fast path of oj_cuda_attention_forward / _backward
 * (cuda_nn_attention.cu) when q, k, v, out (dout, dq, dk, dv) share one
 * 16-bit dtype, D == Dv in {64, 128}, there is no mask, head-dim stride is
 * 1, the other strides are multiples of 8 elements and the base pointers
 * are 16-byte aligned. Everything else stays on the f32 kernels there.
 * FlashAttention-2 structure (Dao 2023, "FlashAttention-2: Faster Attention
 * with Better Parallelism and Work Partitioning").
 *
 * Counted work per call (the usual convention): forward 4 B H T S D FLOPs
 * (q k^T and p v), halved for causal; backward 2.5x the forward (five
 * products). The backward here runs seven products (s and dp are
 * recomputed by both the dq and the dk/dv kernel: the price of having no
 * atomics), so its counted rate understates the tensor-core work by 7/5.
 * Target: H200 dense bf16 mma ~760 TFLOP/s measured; a good FA2-style
 * mma.sync kernel reaches 300-400 TFLOP/s forward on Hopper.
 *
 * Compute: mma.sync.m16n8k16 (16-bit in, f32 accumulate) on fragments read
 * with ldmatrix from shared tiles [rows][D + 8] (the 16-byte pad puts the 8
 * rows of an ldmatrix in distinct banks); tiles arrive by cp.async, double
 * buffered. Online softmax in f32 in log2 space (scores times
 * scale * log2 e, ex2.approx). p and ds are rounded to the input dtype for
 * the second product of each pair, as in FA2.
 *
 * Forward: a CTA of 4 warps owns BM = 64 MT query rows of (b, h), a warp
 * MT m16 tiles (16 MT rows); key/value tiles of 64 rows; causal tiles with
 * no visible key are never loaded; heavy (late) query tiles are launched
 * first. MT 1 (64 rows per CTA, OJAS_CUDA_ATTN_MT=1) reads every K/V fragment from
 * shared memory once per mma: at 16 rows per warp the kernel is likely
 * bound by ldmatrix traffic and instruction issue (H200, ncu, GPT-2 124M
 * q/k/v [16, 12, 1024, 64] bf16 causal: 167 us, ~154 TFLOP/s). MT 2 (128
 * rows per CTA, FA2's Hopper forward tiling) feeds
 * each K/V fragment to two mma, halves the K/V traffic per query row and
 * skips, per warp, causal tiles none of its rows sees: 148 us against
 * 167 for gpt2-124m's [16, 12, 1024, 64] bf16 causal (H200, ncu), the
 * default. Same per-row operations in the same order, so MT 2 should
 * give the bits of MT 1 (the tiles it adds or skips are exact no-ops for a
 * row); the tests check it against the CPU like MT 1. Registers (ptxas,
 * sm_90): MT 1 141 (D 64) / 173 (D 128), MT 2 254 / 255, no spills; at
 * MT 2, D 128 the q fragments are read from shared memory per key tile
 * instead of held in registers (o alone takes 128).
 * dq stays at 64 rows per CTA: MT 2 there spilled (s, dp and dq in
 * registers: 8 bytes at D 64, ~450 at D 128).
 * Backward, deterministic without atomics:
 *  - k_tc_delta: delta = rowsum(dout * out) (f32) and lse in log2 units;
 *  - k_tc_dq: a CTA per (64 query rows, b, h), key tiles ascending;
 *  - k_tc_dkv: a CTA per (64 key rows, b, kv head), the group's query heads
 *    in order, query tiles ascending, dk/dv summed in registers.
 * Every sum runs in an order fixed by the shapes, so reruns are
 * bit-identical (the EXACT promise). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

/* ---------------------------------------------------------------- args */

#define TC_THREADS 128 /* 4 warps */
#define TC_BM 64       /* query rows per CTA (dq; forward: TC_BM MT) */
#define TC_BN 64       /* keys per tile (forward, dq), per CTA (dk/dv) */
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f

/* q [B,H,T,D], k/v [B,Hkv,S,D], dout [B,H,T,D]: element pointers and the
 * strides of dims 0..2 in elements (dim 3 has stride 1). o, dq [B,H,T,D] and
 * dk, dv [B,Hkv,S,D] are written through their strides of dims 0..2 (dim 3
 * stride 1; any of dq/dk/dv NULL: not stored). */
struct tc_args {
    const uint16_t *q, *k, *v, *dout;
    uint16_t *o, *dq, *dk, *dv;
    char *lse;           /* forward: [B,H,T] of dtype sdt (ses bytes), or NULL */
    int sdt, ses;
    const float *lse2;   /* backward: lse * log2 e [B,H,T], +inf where lse is -inf */
    const float *delta;  /* backward: rowsum(dout * out) [B,H,T] */
    int64_t qs[3], ks[3], vs[3], gs[3];
    int64_t os[3], dqs[3], dks[3], dvs[3];
    int B, H, Hkv, group, T, S;
    float scale, sl2; /* scale, scale * log2 e */
    bool causal;
};

/* delta / lse2 from dout, out [B,H,T,D] (any strides, any float dtype) and
 * lse [B,H,T] contiguous. */
struct tc_delta_args {
    const char *dout, *out, *lse;
    int gdt, odt, sdt, ges, oes, ses;
    int64_t gs[4], os[4];
    int64_t rows; /* B H T */
    int H, T, D;
    float *lse2, *delta;
};

/* ---------------------------------------------------------------- PTX helpers */

__device__ __forceinline__ uint32_t tc_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
/* 16 bytes global -> shared, asynchronous; zero-filled when !ok. */
__device__ __forceinline__ void tc_cp16(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 16 : 0));
}
/* 4 bytes global -> shared, asynchronous; zero-filled when !ok. */
__device__ __forceinline__ void tc_cp4(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void tc_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void tc_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/* Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i;
 * r[i] of lane l holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix i. */
__device__ __forceinline__ void tc_ldsm(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* As tc_ldsm, transposed: r[i] of lane l holds rows 2(l%4), 2(l%4)+1 of column l/4. */
__device__ __forceinline__ void tc_ldsm_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* c (16x8 f32) += a (16x16, row) b (16x8, col); BF: bf16, else f16. */
template <bool BF>
__device__ __forceinline__ void tc_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (BF)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 2^x (ex2.approx: -inf -> 0). */
__device__ __forceinline__ float tc_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* (lo, hi) rounded to nearest even, lo in the low half. */
template <bool BF> __device__ __forceinline__ uint32_t tc_pack(float lo, float hi) {
    uint32_t u;
    if (BF) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        memcpy(&u, &v, 4);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        memcpy(&u, &v, 4);
    }
    return u;
}
__device__ __forceinline__ float tc_shfl_xor(float v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}

/* ---------------------------------------------------------------- kernels */

/* Fragments. Tiles are bf16/f16 [rows][LD] in shared memory.
 * A (16x16) of rows r0.., cols c0.. of a row-major tile. */
template <int LD>
__device__ __forceinline__ void tc_lda(uint32_t a[4], const uint16_t *tile, int r0, int c0,
                                       int lane) {
    int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8, c = c0 + (lane >> 4) * 8;
    tc_ldsm(a, tc_smem_u32(tile + r * LD + c));
}
/* B (16x8) for the n-blocks n0 and n0 + 8 (b[0], b[1] and b[2], b[3]) over
 * k0..k0+15, from a tile holding B transposed ([n][k], e.g. K for q k^T). */
template <int LD>
__device__ __forceinline__ void tc_ldb_nk(uint32_t b[4], const uint16_t *tile, int n0, int k0,
                                          int lane) {
    int r = n0 + (lane & 7) + (lane >> 4) * 8, c = k0 + ((lane >> 3) & 1) * 8;
    tc_ldsm(b, tc_smem_u32(tile + r * LD + c));
}
/* The same from a tile holding B as is ([k][n], e.g. V for p v). */
template <int LD>
__device__ __forceinline__ void tc_ldb_kn(uint32_t b[4], const uint16_t *tile, int k0, int n0,
                                          int lane) {
    int r = k0 + (lane & 7) + ((lane >> 3) & 1) * 8, c = n0 + (lane >> 4) * 8;
    tc_ldsm_t(b, tc_smem_u32(tile + r * LD + c));
}
/* A fragment (16 rows x 16 k) from the f32 accumulators of n-blocks
 * c0 (k 0..7) and c1 (k 8..15). */
template <bool BF>
__device__ __forceinline__ void tc_c2a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = tc_pack<BF>(c0[0], c0[1]);
    a[1] = tc_pack<BF>(c0[2], c0[3]);
    a[2] = tc_pack<BF>(c1[0], c1[1]);
    a[3] = tc_pack<BF>(c1[2], c1[3]);
}

/* Rows [r0, r0 + ROWS) of a head (base: its row 0; rstride elements per
 * row) into sm [ROWS][D + 8], rows >= limit zero-filled; cp.async. */
template <int D, int ROWS>
__device__ __forceinline__ void tc_load_tile(uint16_t *sm, const uint16_t *base, int64_t rstride,
                                             int r0, int limit) {
    constexpr int CH = D / 8;
    for (int c = threadIdx.x; c < ROWS * CH; c += TC_THREADS) {
        int r = c / CH, cc = c - r * CH, row = r0 + r;
        bool ok = row < limit;
        const uint16_t *src = ok ? base + (int64_t)row * rstride + cc * 8 : base;
        tc_cp16(tc_smem_u32(sm + r * (D + 8) + cc * 8), src, ok);
    }
}

/* Keys [0, kend) that some query of [i0, i0 + n) sees (causal bound). */
__device__ __forceinline__ int tc_kend(const tc_args &a, int i0, int n) {
    if (!a.causal) return a.S;
    int last = i0 + n + a.S - a.T; /* one past the last visible key of row i0 + n - 1 */
    return last < 0 ? 0 : (last > a.S ? a.S : last);
}

/* Forward: out [B,H,T,D] (input dtype), lse [B,H,T]. A CTA of 4 warps per
 * BM = 64 MT query rows, a warp MT m16 tiles (rows warp 16 MT ..), so each
 * K/V fragment read by ldmatrix feeds MT mma. Grid: ceil(T / BM) B H CTAs,
 * the latest query tiles first. Shared: Q [BM][LD], K and V [2][64][LD].
 * q fragments stay in registers across key tiles at MT 1 or D 64 (QREG);
 * at MT 2, D 128 they are read again per tile (o alone is 128 registers).
 * At MT 2 a warp skips the causal tiles that none of its rows sees (the
 * update would leave m, l, o as they are). */
template <int D, int MT, bool BF>
__global__ void __launch_bounds__(TC_THREADS) k_tc_forward(tc_args a) {
    constexpr int BM = TC_BM * MT, LD = D + 8, KD = D / 16, ND = D / 8, NB = TC_BN / 8;
    constexpr bool QREG = MT == 1 || D == 64;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    uint16_t *qsm = (uint16_t *)tc_smem, *ksm = qsm + BM * LD, *vsm = ksm + 2 * TC_BN * LD;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int nqt = (a.T + BM - 1) / BM, nbh = a.B * a.H, blk = (int)blockIdx.x;
    int qt = nqt - 1 - blk / nbh, bh = blk % nbh, h = bh % a.H, b = bh / a.H, hk = h / a.group;
    int i0 = qt * BM, diag = a.S - a.T;
    int nq = a.T - i0 < BM ? a.T - i0 : BM;
    int ntile = (tc_kend(a, i0, nq) + TC_BN - 1) / TC_BN;
    const uint16_t *qb = a.q + b * a.qs[0] + h * a.qs[1];
    const uint16_t *kb = a.k + b * a.ks[0] + hk * a.ks[1];
    const uint16_t *vb = a.v + b * a.vs[0] + hk * a.vs[1];
    tc_load_tile<D, BM>(qsm, qb, a.qs[2], i0, a.T);
    if (ntile > 0) {
        tc_load_tile<D, TC_BN>(ksm, kb, a.ks[2], 0, a.S);
        tc_load_tile<D, TC_BN>(vsm, vb, a.vs[2], 0, a.S);
    }
    tc_commit();
    int w0 = warp * 16 * MT; /* the warp's first row in the CTA's tile */
    int row0 = i0 + w0 + g;  /* row of c[0], c[1] of m-tile mt: row0 + 16 mt; c[2], c[3]: + 8 */
    /* the warp's last row sees keys < wend (causal; MT 1: never used) */
    int wend = a.causal ? i0 + w0 + 16 * MT + diag : a.S;
    float o[MT][ND][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    for (int mt = 0; mt < MT; mt++)
        for (int n = 0; n < ND; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    uint32_t qf[MT][KD][4]; /* QREG only */
    for (int it = 0; it < ntile; it++) {
        int j0 = it * TC_BN;
        if (it + 1 < ntile) {
            int nb = (it + 1) & 1;
            tc_load_tile<D, TC_BN>(ksm + nb * TC_BN * LD, kb, a.ks[2], j0 + TC_BN, a.S);
            tc_load_tile<D, TC_BN>(vsm + nb * TC_BN * LD, vb, a.vs[2], j0 + TC_BN, a.S);
        }
        tc_commit();
        tc_wait<1>();
        __syncthreads();
        if (QREG && it == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                for (int kc = 0; kc < KD; kc++)
                    tc_lda<LD>(qf[mt][kc], qsm, w0 + 16 * mt, kc * 16, lane);
        }
        if (MT == 1 || j0 < wend) { /* warp-uniform */
            const uint16_t *kt = ksm + (it & 1) * TC_BN * LD, *vt = vsm + (it & 1) * TC_BN * LD;
            /* s = q k^T: 16 MT rows x 64 keys per warp */
            float s[MT][NB][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                for (int n = 0; n < NB; n++)
                    for (int e = 0; e < 4; e++) s[mt][n][e] = 0.0f;
            for (int kc = 0; kc < KD; kc++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (QREG)
                        for (int e = 0; e < 4; e++) qa[mt][e] = qf[mt][kc][e];
                    else
                        tc_lda<LD>(qa[mt], qsm, w0 + 16 * mt, kc * 16, lane);
                }
                for (int n2 = 0; n2 < NB / 2; n2++) {
                    uint32_t bk[4];
                    tc_ldb_nk<LD>(bk, kt, n2 * 16, kc * 16, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        tc_mma<BF>(s[mt][2 * n2], qa[mt], bk[0], bk[1]);
                        tc_mma<BF>(s[mt][2 * n2 + 1], qa[mt], bk[2], bk[3]);
                    }
                }
            }
            /* online softmax in log2 units, per row as at MT 1 */
            bool edge = j0 + TC_BN > a.S || (a.causal && j0 + TC_BN - 1 > i0 + diag);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float mx[2] = {-INFINITY, -INFINITY};
                for (int n = 0; n < NB; n++)
                    for (int e = 0; e < 4; e++) {
                        float x = s[mt][n][e] * a.sl2;
                        if (edge) {
                            int j = j0 + n * 8 + 2 * t4 + (e & 1);
                            int i = row0 + 16 * mt + (e >> 1) * 8;
                            if (j >= a.S || (a.causal && j > i + diag)) x = -INFINITY;
                        }
                        s[mt][n][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                float base[2];
                for (int r = 0; r < 2; r++) {
                    mx[r] = fmaxf(mx[r], tc_shfl_xor(mx[r], 1));
                    mx[r] = fmaxf(mx[r], tc_shfl_xor(mx[r], 2));
                    float mn = fmaxf(m[mt][r], mx[r]);
                    base[r] = mn == -INFINITY ? 0.0f : mn; /* no visible key yet: p = 0 */
                    float corr = tc_ex2(m[mt][r] - base[r]);
                    m[mt][r] = mn;
                    l[mt][r] *= corr;
                    for (int n = 0; n < ND; n++) {
                        o[mt][n][2 * r] *= corr;
                        o[mt][n][2 * r + 1] *= corr;
                    }
                }
                for (int n = 0; n < NB; n++)
                    for (int e = 0; e < 4; e++) {
                        float p = tc_ex2(s[mt][n][e] - base[e >> 1]);
                        s[mt][n][e] = p;
                        l[mt][e >> 1] += p;
                    }
            }
            /* o += p v */
            for (int kc = 0; kc < NB / 2; kc++) {
                uint32_t pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    tc_c2a<BF>(pa[mt], s[mt][2 * kc], s[mt][2 * kc + 1]);
                for (int d2 = 0; d2 < ND / 2; d2++) {
                    uint32_t bv[4];
                    tc_ldb_kn<LD>(bv, vt, kc * 16, d2 * 16, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        tc_mma<BF>(o[mt][2 * d2], pa[mt], bv[0], bv[1]);
                        tc_mma<BF>(o[mt][2 * d2 + 1], pa[mt], bv[2], bv[3]);
                    }
                }
            }
        }
        __syncthreads();
    }
    tc_wait<0>();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        for (int r = 0; r < 2; r++) {
            l[mt][r] += tc_shfl_xor(l[mt][r], 1);
            l[mt][r] += tc_shfl_xor(l[mt][r], 2);
            int i = row0 + 16 * mt + 8 * r;
            if (i >= a.T) continue;
            float inv = l[mt][r] > 0.0f ? 1.0f / l[mt][r] : 0.0f; /* no visible key: out 0 */
            int64_t orow = (int64_t)b * a.os[0] + (int64_t)h * a.os[1] + (int64_t)i * a.os[2];
            for (int n = 0; n < ND; n++)
                *(uint32_t *)(a.o + orow + n * 8 + 2 * t4) =
                    tc_pack<BF>(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
            if (t4 == 0 && a.lse)
                oj_cu_stf(a.lse + ((int64_t)bh * a.T + i) * a.ses, a.sdt,
                          l[mt][r] > 0.0f ? (m[mt][r] + log2f(l[mt][r])) * TC_LN2 : -INFINITY);
        }
}

/* delta[row] = sum_d dout[row, d] out[row, d] (f32, lanes then a fixed
 * butterfly) and lse2[row] = lse[row] log2 e (+inf for -inf): a warp per
 * row of [B,H,T]. */
__global__ void __launch_bounds__(TC_THREADS) k_tc_delta(tc_delta_args a) {
    int lane = threadIdx.x & 31;
    for (int64_t row = (int64_t)blockIdx.x * (TC_THREADS / 32) + (threadIdx.x >> 5); row < a.rows;
         row += (int64_t)gridDim.x * (TC_THREADS / 32)) {
        int64_t i = row % a.T, bh = row / a.T, h = bh % a.H, b = bh / a.H;
        const char *gp = a.dout + (b * a.gs[0] + h * a.gs[1] + i * a.gs[2]) * a.ges;
        const char *op = a.out + (b * a.os[0] + h * a.os[1] + i * a.os[2]) * a.oes;
        float part = 0.0f;
        for (int c = lane; c < a.D; c += 32)
            part += oj_cu_ldf(gp + c * a.gs[3] * a.ges, a.gdt) *
                    oj_cu_ldf(op + c * a.os[3] * a.oes, a.odt);
        for (int o = 16; o > 0; o >>= 1) part += tc_shfl_xor(part, o);
        if (lane == 0) {
            float l = oj_cu_ldf(a.lse + row * a.ses, a.sdt);
            a.delta[row] = part;
            a.lse2[row] = l == -INFINITY ? INFINITY : l * TC_LOG2E;
        }
    }
}

/* k_tc_delta for dout and out of the kernels' 16-bit dtype in rows the
 * tensor-core path can read (16-byte aligned, last dim dense): D / 8 lanes
 * per row, each summing its 8 products (one 16-byte load of each tensor)
 * in order, then a butterfly over the row's lanes; 32 / (D / 8) rows per
 * warp. The warp-per-row kernel above read 2 elements per lane through the
 * runtime-dtype load, one after another: 83 us for [16, 12, 1024, 64]
 * bf16 (H200, ncu) where the 50 MB read takes ~13 us at 4 TB/s. */
template <int D, bool BF> __global__ void __launch_bounds__(TC_THREADS) k_tc_delta_vec(tc_delta_args a) {
    constexpr int L = D / 8, RPW = 32 / L, RPB = RPW * (TC_THREADS / 32);
    const int lane = threadIdx.x & 31, sub = lane % L;
    const int64_t rin = (int64_t)(threadIdx.x >> 5) * RPW + lane / L;
    for (int64_t r0 = (int64_t)blockIdx.x * RPB; r0 < a.rows; r0 += (int64_t)gridDim.x * RPB) {
        const int64_t row = r0 + rin, rr = row < a.rows ? row : a.rows - 1;
        const int64_t i = rr % a.T, bh = rr / a.T, h = bh % a.H, b = bh / a.H;
        const uint4 gv = *(const uint4 *)((const uint16_t *)a.dout + b * a.gs[0] + h * a.gs[1] +
                                          i * a.gs[2] + sub * 8);
        const uint4 ov = *(const uint4 *)((const uint16_t *)a.out + b * a.os[0] + h * a.os[1] +
                                          i * a.os[2] + sub * 8);
        typedef typename std::conditional<BF, oj_cu_bf16, oj_cu_f16>::type T;
        float gf[8], of[8];
        oj_cu_unpackv<T, 8>(gv, gf);
        oj_cu_unpackv<T, 8>(ov, of);
        float part = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) part += gf[j] * of[j];
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) part += tc_shfl_xor(part, o);
        if (row < a.rows && sub == 0) {
            float l = oj_cu_ldf(a.lse + row * a.ses, a.sdt);
            a.delta[row] = part;
            a.lse2[row] = l == -INFINITY ? INFINITY : l * TC_LOG2E;
        }
    }
}

/* dq [B,H,T,D] (input dtype): a CTA per 64 query rows of (b, h), key tiles
 * ascending; ds = p (dp - delta) scale, dq = ds k. Shared: Q, dO [64][LD],
 * K and V [2][64][LD]. */
template <int D, bool BF> __global__ void __launch_bounds__(TC_THREADS) k_tc_dq(tc_args a) {
    constexpr int LD = D + 8, KD = D / 16, ND = D / 8, NB = TC_BN / 8;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    uint16_t *qsm = (uint16_t *)tc_smem, *gsm = qsm + TC_BM * LD, *ksm = gsm + TC_BM * LD,
             *vsm = ksm + 2 * TC_BN * LD;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int nqt = (a.T + TC_BM - 1) / TC_BM, nbh = a.B * a.H, blk = (int)blockIdx.x;
    int qt = nqt - 1 - blk / nbh, bh = blk % nbh, h = bh % a.H, b = bh / a.H, hk = h / a.group;
    int i0 = qt * TC_BM, diag = a.S - a.T;
    int nq = a.T - i0 < TC_BM ? a.T - i0 : TC_BM;
    int ntile = (tc_kend(a, i0, nq) + TC_BN - 1) / TC_BN;
    const uint16_t *kb = a.k + b * a.ks[0] + hk * a.ks[1];
    const uint16_t *vb = a.v + b * a.vs[0] + hk * a.vs[1];
    tc_load_tile<D, TC_BM>(qsm, a.q + b * a.qs[0] + h * a.qs[1], a.qs[2], i0, a.T);
    tc_load_tile<D, TC_BM>(gsm, a.dout + b * a.gs[0] + h * a.gs[1], a.gs[2], i0, a.T);
    if (ntile > 0) {
        tc_load_tile<D, TC_BN>(ksm, kb, a.ks[2], 0, a.S);
        tc_load_tile<D, TC_BN>(vsm, vb, a.vs[2], 0, a.S);
    }
    tc_commit();
    int row0 = i0 + warp * 16 + g;
    float lr[2], dl[2];
    for (int r = 0; r < 2; r++) {
        int i = row0 + 8 * r;
        int64_t row = (int64_t)bh * a.T + i;
        lr[r] = i < a.T ? a.lse2[row] : INFINITY; /* +inf: p = 0 */
        dl[r] = i < a.T ? a.delta[row] : 0.0f;
    }
    float dq[ND][4];
    for (int n = 0; n < ND; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int it = 0; it < ntile; it++) {
        int j0 = it * TC_BN;
        if (it + 1 < ntile) {
            int nb = (it + 1) & 1;
            tc_load_tile<D, TC_BN>(ksm + nb * TC_BN * LD, kb, a.ks[2], j0 + TC_BN, a.S);
            tc_load_tile<D, TC_BN>(vsm + nb * TC_BN * LD, vb, a.vs[2], j0 + TC_BN, a.S);
        }
        tc_commit();
        tc_wait<1>();
        __syncthreads();
        const uint16_t *kt = ksm + (it & 1) * TC_BN * LD, *vt = vsm + (it & 1) * TC_BN * LD;
        /* s = q k^T, dp = dout v^T: 16 rows x 64 keys per warp */
        float s[NB][4], dp[NB][4];
        for (int n = 0; n < NB; n++)
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        for (int kc = 0; kc < KD; kc++) {
            uint32_t qa[4], ga[4];
            tc_lda<LD>(qa, qsm, warp * 16, kc * 16, lane);
            tc_lda<LD>(ga, gsm, warp * 16, kc * 16, lane);
            for (int n2 = 0; n2 < NB / 2; n2++) {
                uint32_t bk[4], bv[4];
                tc_ldb_nk<LD>(bk, kt, n2 * 16, kc * 16, lane);
                tc_ldb_nk<LD>(bv, vt, n2 * 16, kc * 16, lane);
                tc_mma<BF>(s[2 * n2], qa, bk[0], bk[1]);
                tc_mma<BF>(s[2 * n2 + 1], qa, bk[2], bk[3]);
                tc_mma<BF>(dp[2 * n2], ga, bv[0], bv[1]);
                tc_mma<BF>(dp[2 * n2 + 1], ga, bv[2], bv[3]);
            }
        }
        bool edge = j0 + TC_BN > a.S || (a.causal && j0 + TC_BN - 1 > i0 + diag);
        for (int n = 0; n < NB; n++)
            for (int e = 0; e < 4; e++) {
                int r = e >> 1;
                float p = tc_ex2(fmaf(s[n][e], a.sl2, -lr[r]));
                if (edge) {
                    int j = j0 + n * 8 + 2 * t4 + (e & 1), i = row0 + r * 8;
                    if (j >= a.S || (a.causal && j > i + diag)) p = 0.0f;
                }
                s[n][e] = p * (dp[n][e] - dl[r]) * a.scale; /* ds */
            }
        /* dq += ds k */
        for (int kc = 0; kc < NB / 2; kc++) {
            uint32_t da[4];
            tc_c2a<BF>(da, s[2 * kc], s[2 * kc + 1]);
            for (int d2 = 0; d2 < ND / 2; d2++) {
                uint32_t bk[4];
                tc_ldb_kn<LD>(bk, kt, kc * 16, d2 * 16, lane);
                tc_mma<BF>(dq[2 * d2], da, bk[0], bk[1]);
                tc_mma<BF>(dq[2 * d2 + 1], da, bk[2], bk[3]);
            }
        }
        __syncthreads();
    }
    tc_wait<0>();
    for (int r = 0; r < 2; r++) {
        int i = row0 + 8 * r;
        if (i >= a.T) continue;
        int64_t orow = (int64_t)b * a.dqs[0] + (int64_t)h * a.dqs[1] + (int64_t)i * a.dqs[2];
        for (int n = 0; n < ND; n++)
            *(uint32_t *)(a.dq + orow + n * 8 + 2 * t4) = tc_pack<BF>(dq[n][2 * r], dq[n][2 * r + 1]);
    }
}

/* Q, dO tiles [BQ][LD] of query rows q0.. of head h and their lse2 and
 * delta ([BQ] f32) into buffer `buf` of the dk/dv kernel's shared arrays. */
template <int D, int BQ>
__device__ __forceinline__ void tc_load_qtile(const tc_args &a, uint16_t *qsm, uint16_t *gsm,
                                              float *lsm, float *dsm, int b, int h, int q0) {
    tc_load_tile<D, BQ>(qsm, a.q + b * a.qs[0] + h * a.qs[1], a.qs[2], q0, a.T);
    tc_load_tile<D, BQ>(gsm, a.dout + b * a.gs[0] + h * a.gs[1], a.gs[2], q0, a.T);
    int64_t rbase = ((int64_t)b * a.H + h) * a.T;
    for (int e = threadIdx.x; e < BQ; e += TC_THREADS) {
        bool ok = q0 + e < a.T;
        tc_cp4(tc_smem_u32(lsm + e), ok ? a.lse2 + rbase + q0 + e : a.lse2, ok);
        tc_cp4(tc_smem_u32(dsm + e), ok ? a.delta + rbase + q0 + e : a.delta, ok);
    }
}

/* dk, dv [B,Hkv,S,D] (input dtype): a CTA per 64 key rows of (b, kv head
 * hk), a warp per 16 keys; the group's query heads in order, query tiles of
 * BQ rows ascending from the first query that sees the key tile.
 * s^T = k q^T, dp^T = v dout^T, dv += p^T dout, dk += ds^T q.
 * Shared: K, V [64][LD]; Q, dO [2][BQ][LD]; lse2, delta [2][BQ] f32. */
template <int D, int BQ, bool BF>
__global__ void __launch_bounds__(TC_THREADS) k_tc_dkv(tc_args a) {
    constexpr int LD = D + 8, KD = D / 16, ND = D / 8, NB = BQ / 8;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    uint16_t *ksm = (uint16_t *)tc_smem, *vsm = ksm + TC_BN * LD, *qsm = vsm + TC_BN * LD,
             *gsm = qsm + 2 * BQ * LD;
    float *lsm = (float *)(gsm + 2 * BQ * LD), *dsm = lsm + 2 * BQ;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int nbh = a.B * a.Hkv, blk = (int)blockIdx.x;
    int kt = blk / nbh, bh = blk % nbh, hk = bh % a.Hkv, b = bh / a.Hkv;
    int j0 = kt * TC_BN, diag = a.S - a.T;
    int istart = a.causal && j0 - diag > 0 ? j0 - diag : 0;
    int nqt = istart < a.T ? (a.T - istart + BQ - 1) / BQ : 0, total = nqt * a.group;
    tc_load_tile<D, TC_BN>(ksm, a.k + b * a.ks[0] + hk * a.ks[1], a.ks[2], j0, a.S);
    tc_load_tile<D, TC_BN>(vsm, a.v + b * a.vs[0] + hk * a.vs[1], a.vs[2], j0, a.S);
    if (total > 0) tc_load_qtile<D, BQ>(a, qsm, gsm, lsm, dsm, b, hk * a.group, istart);
    tc_commit();
    int key0 = j0 + warp * 16 + g; /* key of c[0], c[1]; key0 + 8 of c[2], c[3] */
    float dk[ND][4], dv[ND][4];
    for (int n = 0; n < ND; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int it = 0; it < total; it++) {
        int q0 = istart + (it % nqt) * BQ;
        if (it + 1 < total) {
            int nb = (it + 1) & 1;
            tc_load_qtile<D, BQ>(a, qsm + nb * BQ * LD, gsm + nb * BQ * LD, lsm + nb * BQ,
                                 dsm + nb * BQ, b, hk * a.group + (it + 1) / nqt,
                                 istart + ((it + 1) % nqt) * BQ);
        }
        tc_commit();
        tc_wait<1>();
        __syncthreads();
        int buf = it & 1;
        const uint16_t *qt = qsm + buf * BQ * LD, *gt = gsm + buf * BQ * LD;
        const float *lt = lsm + buf * BQ, *dt = dsm + buf * BQ;
        /* s^T = k q^T, dp^T = v dout^T: 16 keys x BQ queries per warp */
        float s[NB][4], dp[NB][4];
        for (int n = 0; n < NB; n++)
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        for (int kc = 0; kc < KD; kc++) {
            uint32_t ka[4], va[4];
            tc_lda<LD>(ka, ksm, warp * 16, kc * 16, lane);
            tc_lda<LD>(va, vsm, warp * 16, kc * 16, lane);
            for (int n2 = 0; n2 < NB / 2; n2++) {
                uint32_t bq[4], bg[4];
                tc_ldb_nk<LD>(bq, qt, n2 * 16, kc * 16, lane);
                tc_ldb_nk<LD>(bg, gt, n2 * 16, kc * 16, lane);
                tc_mma<BF>(s[2 * n2], ka, bq[0], bq[1]);
                tc_mma<BF>(s[2 * n2 + 1], ka, bq[2], bq[3]);
                tc_mma<BF>(dp[2 * n2], va, bg[0], bg[1]);
                tc_mma<BF>(dp[2 * n2 + 1], va, bg[2], bg[3]);
            }
        }
        bool edge = q0 + BQ > a.T || j0 + TC_BN > a.S || (a.causal && j0 + TC_BN - 1 > q0 + diag);
        for (int n = 0; n < NB; n++)
            for (int e = 0; e < 4; e++) {
                int c = n * 8 + 2 * t4 + (e & 1); /* query q0 + c */
                float p = tc_ex2(fmaf(s[n][e], a.sl2, -lt[c]));
                if (edge) {
                    int i = q0 + c, j = key0 + (e >> 1) * 8;
                    if (i >= a.T || j >= a.S || (a.causal && j > i + diag)) p = 0.0f;
                }
                s[n][e] = p;
                dp[n][e] = p * (dp[n][e] - dt[c]) * a.scale; /* ds^T */
            }
        /* dv += p^T dout, dk += ds^T q */
        for (int kc = 0; kc < NB / 2; kc++) {
            uint32_t pa[4], da[4];
            tc_c2a<BF>(pa, s[2 * kc], s[2 * kc + 1]);
            tc_c2a<BF>(da, dp[2 * kc], dp[2 * kc + 1]);
            for (int d2 = 0; d2 < ND / 2; d2++) {
                uint32_t bg[4], bq[4];
                tc_ldb_kn<LD>(bg, gt, kc * 16, d2 * 16, lane);
                tc_mma<BF>(dv[2 * d2], pa, bg[0], bg[1]);
                tc_mma<BF>(dv[2 * d2 + 1], pa, bg[2], bg[3]);
                tc_ldb_kn<LD>(bq, qt, kc * 16, d2 * 16, lane);
                tc_mma<BF>(dk[2 * d2], da, bq[0], bq[1]);
                tc_mma<BF>(dk[2 * d2 + 1], da, bq[2], bq[3]);
            }
        }
        __syncthreads();
    }
    tc_wait<0>();
    for (int r = 0; r < 2; r++) {
        int j = key0 + 8 * r;
        if (j >= a.S) continue;
        int64_t krow = (int64_t)b * a.dks[0] + (int64_t)hk * a.dks[1] + (int64_t)j * a.dks[2];
        int64_t vrow = (int64_t)b * a.dvs[0] + (int64_t)hk * a.dvs[1] + (int64_t)j * a.dvs[2];
        for (int n = 0; n < ND; n++) {
            if (a.dk)
                *(uint32_t *)(a.dk + krow + n * 8 + 2 * t4) =
                    tc_pack<BF>(dk[n][2 * r], dk[n][2 * r + 1]);
            if (a.dv)
                *(uint32_t *)(a.dv + vrow + n * 8 + 2 * t4) =
                    tc_pack<BF>(dv[n][2 * r], dv[n][2 * r + 1]);
        }
    }
}

/* ---------------------------------------------------------------- host */

/* Query rows per dk/dv step: 64 at D 64; 32 at D 128 keeps dk, dv, s and dp
 * in registers. */
#define TC_BQ(D) ((D) == 64 ? 64 : 32)

/* m16 tiles per warp of the forward: MT 2 (128 query rows per CTA) by
 * default, measured 148 vs 167 us for [16, 12, 1024, 64] bf16 causal (H200,
 * ncu, 2026-11-29); OJAS_CUDA_ATTN_MT=1 selects MT 1. Read once per
 * process. */
static int tc_mt(void) {
    static int mt = 0;
    if (mt == 0) {
        mt = oj__env_int("OJAS_CUDA_ATTN_MT", 2) == 1 ? 1 : 2;
    }
    return mt;
}

static size_t tc_smem_fwd(int D, int mt) { return (size_t)(TC_BM * mt + 4 * TC_BN) * (D + 8) * 2; }
static size_t tc_smem_dq(int D) { return (size_t)(2 * TC_BM + 4 * TC_BN) * (D + 8) * 2; }
static size_t tc_smem_dkv(int D) {
    return (size_t)(2 * TC_BN + 4 * TC_BQ(D)) * (D + 8) * 2 + (size_t)4 * TC_BQ(D) * 4;
}

/* A rank-4 view the kernels can read with 16-byte cp.async: dtype dt,
 * last dim d with stride 1, other strides multiples of 8, 16-byte base. */
static bool tc_view_ok(const oj_tensor *t, oj_dtype dt, int64_t d) {
    if (t == NULL) return true;
    if (t->rank != 4 || t->dtype != dt || t->shape[3] != d || t->stride[3] != 1) return false;
    for (int i = 0; i < 3; i++)
        if (t->shape[i] != 1 && t->stride[i] % 8 != 0) return false;
    return oj_cu_aligned16(oj_cuda_ptr(t));
}

bool oj_cuda_attention_tc_ok(const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                             const oj_tensor *mask, const oj_tensor *const *more, int nmore) {
    static int off = -1; /* OJAS_CUDA_ATTN_TC=0 turns the path off (comparisons) */
    if (off < 0) {
        off = !oj__env_flag("OJAS_CUDA_ATTN_TC", true);
    }
    if (off || mask != NULL || q->rank != 4 || k->rank != 4 || v->rank != 4) return false;
    oj_dtype dt = q->dtype;
    int64_t D = q->shape[3];
    if ((dt != OJ_BF16 && dt != OJ_F16) || (D != 64 && D != 128)) return false;
    if (!tc_view_ok(q, dt, D) || !tc_view_ok(k, dt, D) || !tc_view_ok(v, dt, D)) return false;
    for (int i = 0; i < nmore; i++)
        if (!tc_view_ok(more[i], dt, D)) return false;
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], Hkv = k->shape[1],
            S = k->shape[2];
    if (Hkv < 1 || H % Hkv != 0 || T >= (1 << 30) || S >= (1 << 30) ||
        (T + TC_BM - 1) / TC_BM * B * H > INT32_MAX || (S + TC_BN - 1) / TC_BN * B * Hkv > INT32_MAX)
        return false;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    size_t fwd = tc_smem_fwd((int)D, tc_mt()), dq = tc_smem_dq((int)D), dkv = tc_smem_dkv((int)D);
    size_t need = fwd > dq ? fwd : dq;
    return (need > dkv ? need : dkv) <= (size_t)optin;
}

static void tc_args_init(tc_args *a, const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                         bool causal, double scale) {
    memset(a, 0, sizeof *a);
    a->q = (const uint16_t *)oj_cuda_ptr(q);
    a->k = (const uint16_t *)oj_cuda_ptr(k);
    a->v = (const uint16_t *)oj_cuda_ptr(v);
    for (int d = 0; d < 3; d++) {
        a->qs[d] = q->stride[d];
        a->ks[d] = k->stride[d];
        a->vs[d] = v->stride[d];
    }
    a->B = (int)q->shape[0];
    a->H = (int)q->shape[1];
    a->T = (int)q->shape[2];
    a->Hkv = (int)k->shape[1];
    a->S = (int)k->shape[2];
    a->group = a->H / a->Hkv;
    a->causal = causal;
    a->scale = (float)scale;
    a->sl2 = (float)(scale * 1.4426950408889634);
}

/* Launch Kern on `blocks` CTAs of TC_THREADS with `smem` dynamic bytes
 * (opted into once per device: oj_cuda_kernel_smem, one oj_cuda_kfacts per
 * kernel instance). */
template <auto Kern>
static oj_status tc_launch(oj_engine *eng, int64_t blocks, size_t smem, const tc_args &a,
                           const char *name) {
    static oj_cuda_kfacts facts;
    if (blocks <= 0) return OJ_OK;
    cudaError_t e = oj_cuda_kernel_smem(&facts, (const void *)Kern,
                                        oj_cuda_state_of(eng)->ordinal, smem);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, name);
    Kern<<<(unsigned)blocks, TC_THREADS, smem, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, name);
}

template <int D, bool BF> static oj_status tc_forward_d(oj_engine *eng, const tc_args &a) {
    const char *name = "attention_forward (tensor core)";
    int mt = tc_mt();
    int64_t blocks = (int64_t)(a.T + TC_BM * mt - 1) / (TC_BM * mt) * a.B * a.H;
    if (mt == 2) return tc_launch<k_tc_forward<D, 2, BF>>(eng, blocks, tc_smem_fwd(D, 2), a, name);
    return tc_launch<k_tc_forward<D, 1, BF>>(eng, blocks, tc_smem_fwd(D, 1), a, name);
}

template <int D, bool BF>
static oj_status tc_backward_d(oj_engine *eng, const tc_args &a, bool want_dq, bool want_dkv) {
    oj_status st = OJ_OK;
    if (want_dq)
        st = tc_launch<k_tc_dq<D, BF>>(eng, (int64_t)(a.T + TC_BM - 1) / TC_BM * a.B * a.H,
                                       tc_smem_dq(D), a, "attention_backward (tensor core dq)");
    if (st == OJ_OK && want_dkv)
        st = tc_launch<k_tc_dkv<D, TC_BQ(D), BF>>(
            eng, (int64_t)(a.S + TC_BN - 1) / TC_BN * a.B * a.Hkv, tc_smem_dkv(D), a,
            "attention_backward (tensor core dk, dv)");
    return st;
}

/* Forward on the tensor-core path (oj_cuda_attention_tc_ok holds; B H T > 0):
 * out [B,H,T,D] any strides tc_view_ok accepts (written through them), lse
 * [B,H,T] contiguous of any float dtype or NULL. */
oj_status oj_cuda_attention_tc_forward(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                       const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                       bool is_causal, double scale) {
    tc_args a;
    tc_args_init(&a, q, k, v, is_causal, scale);
    a.o = (uint16_t *)oj_cuda_ptr(out);
    for (int d = 0; d < 3; d++) a.os[d] = out->stride[d];
    a.lse = lse ? oj_cuda_ptr(lse) : NULL;
    a.sdt = lse ? (int)lse->dtype : 0;
    a.ses = lse ? (int)oj_dtype_size(lse->dtype) : 0;
    bool bf = q->dtype == OJ_BF16;
    if (q->shape[3] == 64) return bf ? tc_forward_d<64, true>(eng, a) : tc_forward_d<64, false>(eng, a);
    return bf ? tc_forward_d<128, true>(eng, a) : tc_forward_d<128, false>(eng, a);
}

/* Backward on the tensor-core path (oj_cuda_attention_tc_ok holds for q, k,
 * v, dout, dq, dk, dv; B H T > 0): dq/dk/dv NULL or written through their
 * strides, out any strides, lse [B,H,T] contiguous of any float dtype. */
oj_status oj_cuda_attention_tc_backward(oj_engine *eng, oj_tensor *dq, oj_tensor *dk,
                                        oj_tensor *dv, const oj_tensor *dout, const oj_tensor *q,
                                        const oj_tensor *k, const oj_tensor *v,
                                        const oj_tensor *out, const oj_tensor *lse,
                                        bool is_causal, double scale) {
    const char *op = "scaled_dot_product_attention";
    tc_args a;
    tc_args_init(&a, q, k, v, is_causal, scale);
    a.dout = (const uint16_t *)oj_cuda_ptr(dout);
    for (int d = 0; d < 3; d++) a.gs[d] = dout->stride[d];
    a.dq = dq ? (uint16_t *)oj_cuda_ptr(dq) : NULL;
    a.dk = dk ? (uint16_t *)oj_cuda_ptr(dk) : NULL;
    a.dv = dv ? (uint16_t *)oj_cuda_ptr(dv) : NULL;
    for (int d = 0; d < 3; d++) {
        a.dqs[d] = dq ? dq->stride[d] : 0;
        a.dks[d] = dk ? dk->stride[d] : 0;
        a.dvs[d] = dv ? dv->stride[d] : 0;
    }
    int64_t rows = (int64_t)a.B * a.H * a.T;
    oj_storage *hold = NULL;
    float *scratch = (float *)oj_cuda_scratch(eng, (size_t)rows * 2 * sizeof(float), op, &hold);
    if (scratch == NULL) return oj_last_status(eng);
    a.lse2 = scratch;
    a.delta = scratch + rows;

    tc_delta_args d;
    memset(&d, 0, sizeof d);
    d.dout = oj_cuda_ptr(dout);
    d.out = oj_cuda_ptr(out);
    d.lse = oj_cuda_ptr(lse);
    d.gdt = (int)dout->dtype;
    d.odt = (int)out->dtype;
    d.sdt = (int)lse->dtype;
    d.ges = (int)oj_dtype_size(dout->dtype);
    d.oes = (int)oj_dtype_size(out->dtype);
    d.ses = (int)oj_dtype_size(lse->dtype);
    for (int i = 0; i < 4; i++) {
        d.gs[i] = dout->stride[i];
        d.os[i] = out->stride[i];
    }
    d.rows = rows;
    d.H = a.H;
    d.T = a.T;
    d.D = (int)out->shape[3];
    d.lse2 = scratch;
    d.delta = scratch + rows;
    const bool vec = out->dtype == q->dtype && dout->dtype == q->dtype &&
                     tc_view_ok(out, q->dtype, q->shape[3]) && tc_view_ok(dout, q->dtype, q->shape[3]);
    const int rpb = vec ? (TC_THREADS / 32) * (32 / (d.D / 8)) : TC_THREADS / 32;
    int64_t nb = (rows + rpb - 1) / rpb;
    unsigned nbu = (unsigned)(nb < (1 << 20) ? nb : (1 << 20));
    if (!vec)
        k_tc_delta<<<nbu, TC_THREADS, 0, OJ_STREAM>>>(d);
    else if (d.D == 64)
        (q->dtype == OJ_BF16 ? k_tc_delta_vec<64, true> : k_tc_delta_vec<64, false>)
            <<<nbu, TC_THREADS, 0, OJ_STREAM>>>(d);
    else
        (q->dtype == OJ_BF16 ? k_tc_delta_vec<128, true> : k_tc_delta_vec<128, false>)
            <<<nbu, TC_THREADS, 0, OJ_STREAM>>>(d);
    oj_status st = oj_cuda_check(eng, "attention_backward (tensor core delta)");

    bool want_dq = dq != NULL, want_dkv = dk != NULL || dv != NULL, bf = q->dtype == OJ_BF16;
    if (st == OJ_OK) {
        if (q->shape[3] == 64)
            st = bf ? tc_backward_d<64, true>(eng, a, want_dq, want_dkv)
                    : tc_backward_d<64, false>(eng, a, want_dq, want_dkv);
        else
            st = bf ? tc_backward_d<128, true>(eng, a, want_dq, want_dkv)
                    : tc_backward_d<128, false>(eng, a, want_dq, want_dkv);
    }
    oj__storage_release(hold);
    return st;
}
