/* The draw of a sampled decode step, as a block-level device function
 * (sm_draw) shared by the standalone kernel (cuda_decode_sample.cu,
 * decode_sample) and the head kernel that draws in its last block
 * (cuda_decode.cu, decode_norm_head). The method and its arithmetic are
 * described in cuda_decode_sample.cu. */
#ifndef OJAS_CUDA_DECODE_SAMPLE_CUH
#define OJAS_CUDA_DECODE_SAMPLE_CUH

#include <limits.h>
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"
#include "ops/nn_decode.h"

#define SM_CAP 2048 /* candidates ranked in shared memory */
#define SM_U 4       /* loads in flight a thread in a scan of 1,024 threads (8 with fewer) */

struct sm_params {
    double temperature, top_p, penalty;
    unsigned long long seed;
    long long seq;
    int k; /* candidates: top_k, or V */
    int groups;
};

/* s's parameters over V logits; groups: the smallest power of two >= 32
 * and >= 2 k, at most gmax (a power of two >= k: 1024 >= the largest
 * k, OJ__DECODE_SAMPLE_MAX_K). */
static inline sm_params sm_params_of(const oj__decode_sampler *s, int V, int gmax) {
    sm_params p;
    p.temperature = s->temperature;
    p.top_p = s->top_p;
    p.penalty = s->repetition_penalty;
    p.seed = (unsigned long long)s->seed;
    p.seq = (long long)s->seq;
    p.k = s->top_k > 0 && s->top_k < V ? (int)s->top_k : V; /* <= OJ__DECODE_SAMPLE_MAX_K */
    p.groups = 32;
    while (p.groups < 2 * p.k && p.groups < gmax) p.groups <<= 1;
    return p;
}

/* (a, ia) ranks before (b, ib): the larger value, then the lower id. */
static __device__ __forceinline__ bool sm_before(double a, int ia, double b, int ib) {
    return a > b || (a == b && ia < ib);
}

/* Logit i (its value f) widened to double and penalised where seen (as
 * the host). */
static __device__ __forceinline__ double sm_pen(float f, const uint8_t *seen, double pen, int i) {
    double v = (double)f;
    if (seen && seen[i]) v = v > 0 ? __ddiv_rn(v, pen) : __dmul_rn(v, pen);
    return v;
}

/* *p, through L2 only with CG (values other blocks of the running kernel
 * wrote), else through the read-only cache. */
template <bool CG, typename T> __device__ __forceinline__ T sm_ld(const T *p) {
    if constexpr (CG) {
        if constexpr (sizeof(T) == 2) {
            T r;
            r.u = __ldcg((const unsigned short *)p);
            return r;
        } else {
            return __ldcg(p);
        }
    } else {
        return p[0];
    }
}

/* Logit i widened and penalised. */
template <bool CG, typename T>
__device__ __forceinline__ double sm_value(const T *x, const uint8_t *seen, double pen, int i) {
    return sm_pen(oj_cu_hw_tof(sm_ld<CG>(x + i)), seen, pen, i);
}

/* f(i, x[i] as float) for every i < V, each by one thread of the block in
 * no particular order: 16-bit logits at a 16-byte aligned address in
 * 8-element chunks (one 16-byte load), the rest one by one; SM_U loads of
 * a thread (2 SM_U below 1,024 threads) issued before any use (one round
 * of L2 latency for gpt2's V instead of one per chunk). */
template <int NT, bool CG, typename T, typename F>
__device__ __forceinline__ void sm_scan(const T *x, int V, bool vec, F f) {
    constexpr int SU = NT >= 1024 ? SM_U : 2 * SM_U; /* fewer threads: more loads each */
    int tail = 0;
    if constexpr (sizeof(T) == 2) {
        if (vec) {
            const int nch = V / 8;
            const uint4 *xc = (const uint4 *)x;
            for (int c0 = threadIdx.x; c0 < nch; c0 += NT * SU) {
                uint4 r[SU];
#pragma unroll
                for (int u = 0; u < SU; u++) {
                    const int c = c0 + u * NT;
                    r[u] = c < nch ? (CG ? __ldcg(xc + c) : __ldg(xc + c)) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < SU; u++) {
                    const int c = c0 + u * NT;
                    if (c >= nch) break;
                    float v[8];
                    oj_cu_unpackv<T, 8>(r[u], v);
#pragma unroll
                    for (int e = 0; e < 8; e++) f(c * 8 + e, v[e]);
                }
            }
            tail = nch * 8;
        }
    }
    for (int i0 = tail + (int)threadIdx.x; i0 < V; i0 += NT * SU) {
        float v[SU];
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int i = i0 + u * NT;
            v[u] = i < V ? oj_cu_hw_tof(sm_ld<CG>(x + i)) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int i = i0 + u * NT;
            if (i >= V) break;
            f(i, v[u]);
        }
    }
}

/* An order-preserving 64-bit key of a (non-NaN) double; -0 and +0 alike. */
static __device__ __forceinline__ unsigned long long sm_key(double v) {
    const long long b = __double_as_longlong(__dadd_rn(v, 0.0));
    return b < 0 ? ~(unsigned long long)b : (unsigned long long)b | 0x8000000000000000ull;
}

/* The sum of v over the block; every thread gets it. sh: 33 ints. */
template <int NT> __device__ int sm_block_sum(int v, int *sh) {
    const int t = threadIdx.x;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((t & 31) == 0) sh[t >> 5] = v;
    __syncthreads();
    if (t < 32) {
        int w = t < NT / 32 ? sh[t] : 0;
        for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
        if (t == 0) sh[32] = w;
    }
    __syncthreads();
    const int r = sh[32];
    __syncthreads();
    return r;
}

/* oj_sample_uniform (src/infer/generate.c): one Philox4x32-10 block of
 * counter (step, seq, "gen") under the key seed, 53 bits. */
static __device__ double sm_uniform(unsigned long long seed, long long seq, long long step) {
    uint32_t c0 = (uint32_t)step, c1 = (uint32_t)((unsigned long long)step >> 32),
             c2 = (uint32_t)seq, c3 = 0x67656e00u;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    return (double)((((unsigned long long)c0) << 21) ^ c1) / 9007199254740992.0;
}

/* The draw of a decode step by one block of NT threads (a multiple of 32,
 * <= 1024): tok, seen, step, pos and hist as decode_sample writes them.
 * CG: the logits were written by other blocks of the running kernel (read
 * through L2). With bmv (no penalty: seen NULL) the pass over the logits
 * that finds each thread's best is replaced by nb blocks' bests (value
 * bmv[b], id bmi[b]: the best of a set of logits, the sets a partition of
 * the row, as am_before ranks them; a NaN logit makes its set's best NaN),
 * whose maxima bound the K best the same way (p.groups <= nb). */
template <int NT, bool CG, typename T>
__device__ void sm_draw(int64_t *tok, const T *__restrict__ x, int V, bool vec, int64_t *pos,
                        uint8_t *seen, int64_t *step, int64_t *hist, long long nhist,
                        const sm_params &p, const float *bmv, const int *bmi, int nb) {
    __shared__ double cv[SM_CAP];          /* the candidates, unordered */
    __shared__ int ci[SM_CAP];
    __shared__ double rv[OJ__DECODE_SAMPLE_MAX_K]; /* the K best in rank order */
    __shared__ int ri[OJ__DECODE_SAMPLE_MAX_K];
    __shared__ double s_th;
    __shared__ int sc[NT];
    __shared__ int sh[33];
    __shared__ double shv[32];
    __shared__ int shi[32], s_cnt, s_out;
    const int t = threadIdx.x;
    const double pen = p.penalty;
    if (t == 0) s_cnt = 0;

    /* pass 1: each thread's best (value, id), NaN */
    bool nan = false;
    double bv = -INFINITY;
    int bi = INT_MAX;
    if (bmv) { /* the blocks' bests (no penalty) */
        float bf = -INFINITY;
        for (int b = t; b < nb; b += NT) {
            const float f = __ldcg(bmv + b);
            const int i = __ldcg(bmi + b);
            if (f != f) nan = true;
            else if (f > bf || (f == bf && i < bi)) bf = f, bi = i;
        }
        bv = bf;
    } else if (seen == NULL) { /* no penalty: the values are floats, compared as floats */
        float bf = -INFINITY;
        sm_scan<NT, CG>(x, V, vec, [&](int i, float f) {
            if (f != f) nan = true;
            else if (f > bf || (f == bf && i < bi)) bf = f, bi = i;
        });
        bv = bf;
    } else {
        sm_scan<NT, CG>(x, V, vec, [&](int i, float f) {
            if (f != f) nan = true;
            const double v = sm_pen(f, seen, pen, i);
            if (sm_before(v, i, bv, bi)) bv = v, bi = i;
        });
    }
    const bool any_nan = __syncthreads_or(nan);
    int out = -1;
    if (any_nan) goto done;
    if (p.temperature <= 0.0) { /* the argmax of the penalised logits */
        for (int o = 16; o > 0; o >>= 1) {
            const double ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (sm_before(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if ((t & 31) == 0) shv[t >> 5] = bv, shi[t >> 5] = bi;
        __syncthreads();
        if (t < 32) {
            bv = t < NT / 32 ? shv[t] : -INFINITY, bi = t < NT / 32 ? shi[t] : INT_MAX;
            for (int o = 16; o > 0; o >>= 1) {
                const double ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (sm_before(ov, oi, bv, bi)) bv = ov, bi = oi;
            }
            if (t == 0) s_out = bi;
        }
        __syncthreads();
        out = s_out;
        goto done;
    }
    {
        const int K = p.k, G = p.groups;
        /* th = the K-th largest of the G group maxima: of the threads'
         * bests, groups of NT / G threads; of the blocks' bests, block b in
         * group b % G */
        if (bmv) {
            if (t < G) {
                float gv = -INFINITY;
                for (int b = t; b < nb; b += G) gv = fmaxf(gv, __ldcg(bmv + b));
                cv[t] = gv;
            }
        } else {
            const int gs = NT / G;
            double gv = bv;
            for (int o = 1; o < gs; o <<= 1) gv = fmax(gv, __shfl_xor_sync(0xffffffffu, gv, o));
            if (t % gs == 0) cv[t / gs] = gv;
        }
        __syncthreads();
        /* group j's rank among the G maxima (larger first, then lower j):
         * the one ranked K - 1 is th */
        if (t < G) {
            const double mine = cv[t];
            int r = 0;
            for (int j = 0; j < G; j++) r += cv[j] > mine || (cv[j] == mine && j < t);
            if (r == K - 1) s_th = mine;
        }
        __syncthreads();
        const double th = s_th;
        /* pass 2: every value >= th into the candidates (without a
         * penalty th is a float value, and the test a float one) */
        if (seen == NULL) {
            const float thf = (float)th;
            sm_scan<NT, CG>(x, V, vec, [&](int i, float f) {
                if (f >= thf) {
                    const int slot = atomicAdd(&s_cnt, 1);
                    if (slot < SM_CAP) cv[slot] = (double)f, ci[slot] = i;
                }
            });
        } else {
            sm_scan<NT, CG>(x, V, vec, [&](int i, float f) {
                const double v = sm_pen(f, seen, pen, i);
                if (v >= th) {
                    const int slot = atomicAdd(&s_cnt, 1);
                    if (slot < SM_CAP) cv[slot] = v, ci[slot] = i;
                }
            });
        }
        __syncthreads();
        int cnt = s_cnt;
        if (cnt > SM_CAP) {
            /* the K-th largest key exactly: the largest kt with
             * count(key >= kt) >= K, bit by bit */
            unsigned long long kt = 0;
            for (int b = 63; b >= 0; b--) {
                const unsigned long long c = kt | (1ull << b);
                int n = 0;
                sm_scan<NT, CG>(x, V, vec, [&](int i, float f) { n += sm_key(sm_pen(f, seen, pen, i)) >= c; });
                if (sm_block_sum<NT>(n, sh) >= K) kt = c;
            }
            /* every key > kt, then the ties at kt lowest id first: thread t
             * owns the ids [t ch, (t + 1) ch), its ties ranked after those
             * of the threads before it (an inclusive scan of the counts) */
            const int ch = (V + NT - 1) / NT;
            const int i0 = min(V, t * ch), i1 = min(V, i0 + ch);
            int gt = 0, eq = 0;
            for (int i = i0; i < i1; i++) {
                const unsigned long long k = sm_key(sm_value<CG>(x, seen, pen, i));
                gt += k > kt;
                eq += k == kt;
            }
            const int need = K - sm_block_sum<NT>(gt, sh);
            sc[t] = eq;
            __syncthreads();
            for (int o = 1; o < NT; o <<= 1) {
                const int a = t >= o ? sc[t - o] : 0;
                __syncthreads();
                sc[t] += a;
                __syncthreads();
            }
            int rank = sc[t] - eq; /* ties before this thread's */
            if (t == 0) s_cnt = 0;
            __syncthreads();
            for (int i = i0; i < i1; i++) {
                const double v = sm_value<CG>(x, seen, pen, i);
                const unsigned long long k = sm_key(v);
                if (k > kt || (k == kt && rank++ < need)) {
                    const int slot = atomicAdd(&s_cnt, 1);
                    cv[slot] = v, ci[slot] = i;
                }
            }
            __syncthreads();
            cnt = s_cnt; /* K */
        }
        /* each candidate's rank (how many rank before it: distinct, a total
         * order); the K best to their places */
        for (int j = t; j < cnt; j += NT) {
            const double v = cv[j];
            const int id = ci[j];
            int r = 0;
            for (int i = 0; i < cnt; i++) r += sm_before(cv[i], ci[i], v, id);
            if (r < K) rv[r] = v, ri[r] = id;
        }
        __syncthreads();
        /* draw_from: the softmax at the temperature over the K best */
        const double mx = rv[0];
        for (int i = t; i < K; i += NT) cv[i] = exp(__ddiv_rn(__dsub_rn(rv[i], mx), p.temperature));
        __syncthreads();
        if (t == 0) {
            int keep = K;
            double total = 0.0;
            for (int i = 0; i < keep; i++) total = __dadd_rn(total, cv[i]);
            if (p.top_p < 1.0 && p.top_p > 0.0) {
                double acc = 0.0;
                int k = 0;
                while (k < keep) {
                    acc = __dadd_rn(acc, __ddiv_rn(cv[k], total));
                    k++;
                    if (acc >= p.top_p) break;
                }
                keep = k;
                total = 0.0;
                for (int i = 0; i < keep; i++) total = __dadd_rn(total, cv[i]);
            }
            const double r = __dmul_rn(sm_uniform(p.seed, p.seq, *step), total);
            double acc = 0.0;
            int o = ri[keep - 1];
            for (int i = 0; i < keep; i++) {
                acc = __dadd_rn(acc, cv[i]);
                if (r < acc) {
                    o = ri[i];
                    break;
                }
            }
            s_out = o;
        }
        __syncthreads();
        out = s_out;
    }
done:
    if (t == 0) {
        *tok = out;
        if (seen && out >= 0) seen[out] = 1;
        *step += 1;
        if (pos) {
            const int64_t q = *pos + 1;
            *pos = q;
            if (hist && q >= 0 && q < nhist) hist[q] = out;
        }
    }
}


#endif /* OJAS_CUDA_DECODE_SAMPLE_CUH */
