/* The end of a sampled decode step on the device (backend.h,
 * decode_sample): the host sampler's token (src/infer/sample.c,
 * oj_sample_logits) from logits that stay on the device, so a sampled
 * step reads back one token like a greedy one and runs inside the
 * decoder's captured graph.
 *
 * One block of 1024 threads (16-bit logits read 8 at a time), in the
 * host sampler's arithmetic:
 *  - each logit is widened to double and, where seen[i] != 0, divided by
 *    the repetition penalty when positive, else multiplied by it;
 *  - candidates rank by value, then the lower id (the host's total
 *    order). The k best (k = top_k, or V when top_k is 0 or >= V; at most
 *    OJ__DECODE_SAMPLE_MAX_K) are found by a threshold: th = the k-th
 *    largest of G >= k group maxima (G a power of two, 32 .. 1024), so at
 *    least k values are >= th and every one of the k best is; those
 *    (usually 1-2 times k) are gathered into shared memory and each is
 *    placed by its rank in the total order, counted against all the
 *    others (no sort: two barriers). When more than SM_CAP values pass the
 *    threshold (many ties, a flat row) the k-th value is found exactly
 *    instead, bit by bit over the values' order-preserving 64-bit keys
 *    (64 counting passes), and ties at it are taken lowest id first;
 *  - the draw is draw_from's: e_i = exp((l_i - l_0) / temperature) in
 *    double (one thread each), then one thread sums them in rank order,
 *    cuts the nucleus (the shortest prefix whose probability reaches
 *    top_p), and walks the prefix sums up to u * total, with u =
 *    oj_sample_uniform(seed, seq, step) from Philox4x32-10 computed here
 *    (the same 53 bits).
 * The sums run in the host's order with IEEE double adds, multiplies and
 * divides, so the only difference from the host is exp: CUDA's double exp
 * and the C library's may differ in the last bit, which changes a token
 * only when u * total falls within about 1e-16 (relative) of a boundary.
 * A NaN logit gives tok = -1, as the host sampler's -1. */
#include <limits.h>
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "ops/nn_decode.h"

oj_status oj_cuda_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                                const oj__decode_sampler *s);

#define SM_THREADS 1024
#define SM_CAP 2048 /* candidates ranked in shared memory */
#define SM_U 4       /* loads in flight a thread in a scan */

struct sm_params {
    double temperature, top_p, penalty;
    unsigned long long seed;
    long long seq;
    int k; /* candidates: top_k, or V */
    int groups;
};

/* (a, ia) ranks before (b, ib): the larger value, then the lower id. */
__device__ __forceinline__ bool sm_before(double a, int ia, double b, int ib) {
    return a > b || (a == b && ia < ib);
}

/* Logit i (its value f) widened to double and penalised where seen (as
 * the host). */
__device__ __forceinline__ double sm_pen(float f, const uint8_t *seen, double pen, int i) {
    double v = (double)f;
    if (seen && seen[i]) v = v > 0 ? __ddiv_rn(v, pen) : __dmul_rn(v, pen);
    return v;
}

/* Logit i widened and penalised. */
template <typename T>
__device__ __forceinline__ double sm_value(const T *x, const uint8_t *seen, double pen, int i) {
    return sm_pen(oj_cu_hw_tof(x[i]), seen, pen, i);
}

/* f(i, x[i] as float) for every i < V, each by one thread of the block in
 * no particular order: 16-bit logits at a 16-byte aligned address in
 * 8-element chunks (one 16-byte load), the rest one by one; SM_U loads of
 * a thread issued before any use (one round of L2 latency for gpt2's V
 * instead of one per chunk). */
template <typename T, typename F>
__device__ __forceinline__ void sm_scan(const T *x, int V, bool vec, F f) {
    int tail = 0;
    if constexpr (sizeof(T) == 2) {
        if (vec) {
            const int nch = V / 8;
            const uint4 *xc = (const uint4 *)x;
            for (int c0 = threadIdx.x; c0 < nch; c0 += SM_THREADS * SM_U) {
                uint4 r[SM_U];
#pragma unroll
                for (int u = 0; u < SM_U; u++) {
                    const int c = c0 + u * SM_THREADS;
                    r[u] = c < nch ? __ldg(xc + c) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < SM_U; u++) {
                    const int c = c0 + u * SM_THREADS;
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
    for (int i0 = tail + (int)threadIdx.x; i0 < V; i0 += SM_THREADS * SM_U) {
        float v[SM_U];
#pragma unroll
        for (int u = 0; u < SM_U; u++) {
            const int i = i0 + u * SM_THREADS;
            v[u] = i < V ? oj_cu_hw_tof(x[i]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < SM_U; u++) {
            const int i = i0 + u * SM_THREADS;
            if (i >= V) break;
            f(i, v[u]);
        }
    }
}

/* An order-preserving 64-bit key of a (non-NaN) double; -0 and +0 alike. */
__device__ __forceinline__ unsigned long long sm_key(double v) {
    const long long b = __double_as_longlong(__dadd_rn(v, 0.0));
    return b < 0 ? ~(unsigned long long)b : (unsigned long long)b | 0x8000000000000000ull;
}

/* The sum of v over the block; every thread gets it. sh: 33 ints. */
__device__ int sm_block_sum(int v, int *sh) {
    const int t = threadIdx.x;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((t & 31) == 0) sh[t >> 5] = v;
    __syncthreads();
    if (t < 32) {
        int w = sh[t];
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
__device__ double sm_uniform(unsigned long long seed, long long seq, long long step) {
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

template <typename T>
__global__ void __launch_bounds__(SM_THREADS)
    k_dec_sample(int64_t *tok, const T *__restrict__ x, int V, bool vec, int64_t *pos,
                 uint8_t *seen, int64_t *step, int64_t *hist, long long nhist, sm_params p) {
    __shared__ double cv[SM_CAP];          /* the candidates, unordered */
    __shared__ int ci[SM_CAP];
    __shared__ double rv[OJ__DECODE_SAMPLE_MAX_K]; /* the K best in rank order */
    __shared__ int ri[OJ__DECODE_SAMPLE_MAX_K];
    __shared__ double s_th;
    __shared__ int sc[SM_THREADS];
    __shared__ int sh[33];
    __shared__ double shv[32];
    __shared__ int shi[32], s_cnt, s_out;
    const int t = threadIdx.x;
    const double pen = p.penalty;
    /* launched as a programmatic dependent of the head's product: nothing
     * is read before the kernels before it are done */
    oj_pdl_wait();
    if (t == 0) s_cnt = 0;

    /* pass 1: each thread's best (value, id), NaN */
    bool nan = false;
    double bv = -INFINITY;
    int bi = INT_MAX;
    if (seen == NULL) { /* no penalty: the values are floats, compared as floats */
        float bf = -INFINITY;
        sm_scan(x, V, vec, [&](int i, float f) {
            if (f != f) nan = true;
            else if (f > bf || (f == bf && i < bi)) bf = f, bi = i;
        });
        bv = bf;
    } else {
        sm_scan(x, V, vec, [&](int i, float f) {
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
            bv = shv[t], bi = shi[t];
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
        const int K = p.k, G = p.groups, gs = SM_THREADS / G;
        /* th = the K-th largest of the G group maxima */
        double gv = bv;
        for (int o = 1; o < gs; o <<= 1) gv = fmax(gv, __shfl_xor_sync(0xffffffffu, gv, o));
        if (t % gs == 0) cv[t / gs] = gv;
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
            sm_scan(x, V, vec, [&](int i, float f) {
                if (f >= thf) {
                    const int slot = atomicAdd(&s_cnt, 1);
                    if (slot < SM_CAP) cv[slot] = (double)f, ci[slot] = i;
                }
            });
        } else {
            sm_scan(x, V, vec, [&](int i, float f) {
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
                sm_scan(x, V, vec, [&](int i, float f) { n += sm_key(sm_pen(f, seen, pen, i)) >= c; });
                if (sm_block_sum(n, sh) >= K) kt = c;
            }
            /* every key > kt, then the ties at kt lowest id first: thread t
             * owns the ids [t ch, (t + 1) ch), its ties ranked after those
             * of the threads before it (an inclusive scan of the counts) */
            const int ch = (V + SM_THREADS - 1) / SM_THREADS;
            const int i0 = min(V, t * ch), i1 = min(V, i0 + ch);
            int gt = 0, eq = 0;
            for (int i = i0; i < i1; i++) {
                const unsigned long long k = sm_key(sm_value(x, seen, pen, i));
                gt += k > kt;
                eq += k == kt;
            }
            const int need = K - sm_block_sum(gt, sh);
            sc[t] = eq;
            __syncthreads();
            for (int o = 1; o < SM_THREADS; o <<= 1) {
                const int a = t >= o ? sc[t - o] : 0;
                __syncthreads();
                sc[t] += a;
                __syncthreads();
            }
            int rank = sc[t] - eq; /* ties before this thread's */
            if (t == 0) s_cnt = 0;
            __syncthreads();
            for (int i = i0; i < i1; i++) {
                const double v = sm_value(x, seen, pen, i);
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
        for (int j = t; j < cnt; j += SM_THREADS) {
            const double v = cv[j];
            const int id = ci[j];
            int r = 0;
            for (int i = 0; i < cnt; i++) r += sm_before(cv[i], ci[i], v, id);
            if (r < K) rv[r] = v, ri[r] = id;
        }
        __syncthreads();
        /* draw_from: the softmax at the temperature over the K best */
        const double mx = rv[0];
        for (int i = t; i < K; i += SM_THREADS) cv[i] = exp(__ddiv_rn(__dsub_rn(rv[i], mx), p.temperature));
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

oj_status oj_cuda_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                                const oj__decode_sampler *s) {
    if (oj_cuda_begin(eng, "decode_sample") != OJ_OK) return oj_last_status(eng);
    const int V = (int)oj_cuda_numel(logits);
    sm_params p;
    p.temperature = s->temperature;
    p.top_p = s->top_p;
    p.penalty = s->repetition_penalty;
    p.seed = (unsigned long long)s->seed;
    p.seq = (long long)s->seq;
    p.k = s->top_k > 0 && s->top_k < V ? (int)s->top_k : V; /* <= OJ__DECODE_SAMPLE_MAX_K */
    p.groups = 32;
    while (p.groups < 2 * p.k && p.groups < SM_THREADS) p.groups <<= 1;
    int64_t *tp = (int64_t *)oj_cuda_ptr(tok), *sp = (int64_t *)oj_cuda_ptr(step);
    int64_t *pp = pos ? (int64_t *)oj_cuda_ptr(pos) : NULL;
    uint8_t *seenp = seen ? (uint8_t *)oj_cuda_ptr(seen) : NULL;
    int64_t *hp = hist ? (int64_t *)oj_cuda_ptr(hist) : NULL;
    const long long nh = hist ? (long long)oj_cuda_numel(hist) : 0;
    const void *x = oj_cuda_ptr(logits);
    const bool vec = oj_cu_aligned16(x);
    switch (logits->dtype) { /* its launch overlaps the kernel before (cuda_pdl.cuh) */
    case OJ_BF16:
        oj_pdl_launch(k_dec_sample<oj_cu_bf16>, dim3(1), dim3(SM_THREADS), 0, tp,
                      (const oj_cu_bf16 *)x, V, vec, pp, seenp, sp, hp, nh, p);
        break;
    case OJ_F16:
        oj_pdl_launch(k_dec_sample<oj_cu_f16>, dim3(1), dim3(SM_THREADS), 0, tp,
                      (const oj_cu_f16 *)x, V, vec, pp, seenp, sp, hp, nh, p);
        break;
    default:
        oj_pdl_launch(k_dec_sample<float>, dim3(1), dim3(SM_THREADS), 0, tp, (const float *)x, V,
                      false, pp, seenp, sp, hp, nh, p);
        break;
    }
    return oj_cuda_check(eng, "decode_sample");
}
