/* CPU scaled dot-product attention, tiled with an online softmax so the
 * [T, S] score matrix is never stored (Milakov & Gimelshein, "Online
 * normalizer calculation for softmax", 2018; Dao et al., "FlashAttention",
 * 2022, and FlashAttention-2's backward, 2023).
 *
 * q (B,H,T,D), k (B,Hkv,S,D), v (B,Hkv,S,Dv), mask (B,H,T,S) view or NULL,
 * out (B,H,T,Dv) and dq, dk, dv (shaped like q, k, v) any strides (written
 * through them), lse (B,H,T) contiguous. Query i of a row sees key j when the mask
 * keeps it and, if causal, j <= i + S - T (bottom-right aligned, so T new
 * queries at the end of a KV cache see every earlier key).
 *
 * Work is split into blocks of TQ queries x TK keys. Two paths:
 * - f32 (cpu_nn_attention_f32.c): f32 arithmetic on the SIMD level of the
 *   engine, threaded over (batch, head) pairs;
 * - everything else (f64, bf16, f16): this file, in double, K and V tiles
 *   converted once per query block, threaded the same way.
 * Every sum runs in a fixed, index-increasing order, and each (batch,
 * head) pair is computed by one task, so results do not depend on the
 * thread count. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_attention.h"
#include "backend/cpu/cpu_nn_util.h"

#include "backend/cpu/cpu_pool.h"

#define TQ OJ_ATTN_TQ
#define TK OJ_ATTN_TK

typedef oj_attn_geom attn_geom;

/* Row (b, h, i) of a rank-4 strided tensor into dst (n values). */
static void load_row4(const oj_tensor *t, int64_t b, int64_t h, int64_t i, int64_t n,
                      double *dst) {
    const int64_t *s = t->stride;
    int64_t off = b * s[0] + h * s[1] + i * s[2];
    oj__nn_load(oj__nn_base(t) + off * (int64_t)oj_dtype_size(t->dtype), t->dtype, n, s[3], dst);
}

/* Row (b, h, i) of a rank-4 strided tensor = src (n values rounded to its
 * dtype). */
static void store_row4(const oj_tensor *t, int64_t b, int64_t h, int64_t i, int64_t n,
                       const double *src) {
    const int64_t *s = t->stride;
    int64_t es = (int64_t)oj_dtype_size(t->dtype);
    char *p = oj__nn_base(t) + (b * s[0] + h * s[1] + i * s[2]) * es;
    if (s[3] == 1 || n <= 1) {
        oj__nn_store(p, t->dtype, n, src);
        return;
    }
    for (int64_t c = 0; c < n; c++) oj__nn_store(p + c * s[3] * es, t->dtype, 1, src + c);
}

/* Rows [r0, r0 + nr) of head (b, h) of a strided rank-4 tensor: dst [nr, n]. */
static void load_tile(const oj_tensor *t, int64_t b, int64_t h, int64_t r0, int64_t nr,
                      int64_t n, double *dst) {
    for (int64_t r = 0; r < nr; r++) load_row4(t, b, h, r0 + r, n, dst + r * n);
}

/* Scores s[0..nk) of query i (q row qi) against keys j0..j0+nk (tile kt):
 * scale q.k + mask, -inf where masked or beyond the causal limit. */
static void scores(const attn_geom *g, int64_t b, int64_t h, int64_t i, const double *qi,
                   int64_t j0, int64_t nk, const double *kt, double *s) {
    int64_t limit = g->causal ? i + g->S - g->T : INT64_MAX; /* last visible key */
    const oj_tensor *m = g->mask;
    const char *mp = oj_attn_mask_row(g, b, h, i);
    for (int64_t jj = 0; jj < nk; jj++) {
        int64_t j = j0 + jj;
        if (j > limit) {
            s[jj] = -INFINITY;
            continue;
        }
        double add = 0.0;
        if (mp) {
            int64_t mo = j * m->stride[3];
            if (m->dtype == OJ_BOOL) {
                if (((const uint8_t *)mp)[mo] == 0) {
                    s[jj] = -INFINITY;
                    continue;
                }
            } else {
                add = oj__nn_get(mp, m->dtype, mo);
            }
        }
        const double *kj = kt + jj * g->D;
        double dot = 0.0;
        for (int64_t c = 0; c < g->D; c++) dot += qi[c] * kj[c];
        s[jj] = g->scale * dot + add;
    }
}

/* ---------------------------------------------------------------- forward */

typedef struct {
    const attn_geom *g;
    oj_engine *eng;
    oj_tensor *out, *lse;
} fwd_ctx;

/* Scratch doubles of one forward task. */
static int64_t fwd_scratch(const attn_geom *g) {
    return TQ * g->D + TK * g->D + TK * g->Dv + TQ * g->Dv + TK + 2 * TQ;
}

/* One (b, h) pair per item. */
static void fwd_chunk(void *vctx, int64_t begin, int64_t end, int tid) {
    const fwd_ctx *cx = vctx;
    const attn_geom *g = cx->g;
    int64_t D = g->D, Dv = g->Dv;
    double *qt = oj_cpu_scratch(cx->eng, tid, (size_t)fwd_scratch(g) * sizeof(double));
    double *kt = qt + TQ * D, *vt = kt + TK * D, *acc = vt + TK * Dv, *s = acc + TQ * Dv;
    double *m = s + TK, *l = m + TQ;
    const oj_tensor *out = cx->out, *lse = cx->lse;
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / g->H, h = bh % g->H, hk = h / g->group;
        for (int64_t i0 = 0; i0 < g->T; i0 += TQ) {
            int64_t nq = g->T - i0 < TQ ? g->T - i0 : TQ;
            load_tile(g->q, b, h, i0, nq, D, qt);
            memset(acc, 0, (size_t)(nq * Dv) * sizeof(double));
            for (int64_t r = 0; r < nq; r++) {
                m[r] = -INFINITY;
                l[r] = 0.0;
            }
            int64_t kend = oj_attn_keys_visible(g, i0, nq);
            for (int64_t j0 = 0; j0 < kend; j0 += TK) {
                int64_t nk = kend - j0 < TK ? kend - j0 : TK;
                load_tile(g->k, b, hk, j0, nk, D, kt);
                load_tile(g->v, b, hk, j0, nk, Dv, vt);
                for (int64_t r = 0; r < nq; r++) {
                    scores(g, b, h, i0 + r, qt + r * D, j0, nk, kt, s);
                    double mb = -INFINITY;
                    for (int64_t jj = 0; jj < nk; jj++)
                        if (s[jj] > mb || isnan(s[jj])) mb = s[jj];
                    if (mb == -INFINITY) continue; /* every key of the tile masked */
                    double mn = mb > m[r] || isnan(mb) ? mb : m[r];
                    double corr = m[r] == -INFINITY ? 0.0 : exp(m[r] - mn);
                    double *a = acc + r * Dv;
                    double sum = l[r] * corr;
                    for (int64_t c = 0; c < Dv; c++) a[c] *= corr;
                    for (int64_t jj = 0; jj < nk; jj++) {
                        if (s[jj] == -INFINITY) continue;
                        double p = exp(s[jj] - mn);
                        sum += p;
                        const double *vj = vt + jj * Dv;
                        for (int64_t c = 0; c < Dv; c++) a[c] += p * vj[c];
                    }
                    l[r] = sum;
                    m[r] = mn;
                }
            }
            for (int64_t r = 0; r < nq; r++) {
                double *a = acc + r * Dv;
                double inv = l[r] > 0.0 ? 1.0 / l[r] : 0.0; /* fully masked row: 0 */
                for (int64_t c = 0; c < Dv; c++) a[c] *= inv;
                int64_t row = (b * g->H + h) * g->T + i0 + r;
                store_row4(out, b, h, i0 + r, Dv, a);
                if (lse) {
                    double lv = l[r] > 0.0 ? m[r] + log(l[r]) : -INFINITY;
                    if (isnan(m[r])) lv = NAN;
                    oj__nn_store(oj__nn_base(lse) + (size_t)row * oj_dtype_size(lse->dtype),
                                 lse->dtype, 1, &lv);
                }
            }
        }
    }
}

/* Reserve `per_thread` bytes of scratch on every thread of eng. */
static oj_status reserve_scratch(oj_engine *eng, size_t per_thread, const char *op) {
    int n = oj_cpu_threads(eng);
    for (int t = 0; t < n; t++)
        if (oj_cpu_scratch(eng, t, per_thread) == NULL)
            return oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory for %zu bytes "
                                "of scratch", op, per_thread);
    return OJ_OK;
}

oj_status oj_cpu_attention_forward(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                   const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                   const oj_tensor *mask, bool is_causal, double scale) {
    attn_geom g;
    oj_attn_geom_init(&g, q, k, v, mask, is_causal, scale);
    if (q->dtype == OJ_F32 && k->dtype == OJ_F32 && v->dtype == OJ_F32 && out->dtype == OJ_F32)
        return oj__cpu_attention_forward_f32(eng, out, lse, &g);
    oj_status st = reserve_scratch(eng, (size_t)fwd_scratch(&g) * sizeof(double),
                                   "scaled_dot_product_attention");
    if (st != OJ_OK) return st;
    fwd_ctx cx = {&g, eng, out, lse};
    oj_cpu_parallel_for(eng, g.B * g.H, 1, fwd_chunk, &cx);
    return OJ_OK;
}

oj_status oj_cpu_attention_paged_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                         const oj_tensor *k_pool, const oj_tensor *v_pool,
                                         const int32_t *blocks, int64_t S, double scale) {
    if (q->dtype != OJ_F32 || k_pool->dtype != OJ_F32 || v_pool->dtype != OJ_F32 ||
        out->dtype != OJ_F32)
        return OJ_ERR_UNSUPPORTED; /* the op gathers the blocks instead */
    attn_geom g;
    oj_attn_geom_init(&g, q, k_pool, v_pool, NULL, true, scale);
    g.S = S;
    g.blocks = blocks;
    g.block_size = k_pool->shape[2];
    return oj__cpu_attention_forward_f32(eng, out, NULL, &g);
}

/* ---------------------------------------------------------------- backward */

typedef struct {
    const attn_geom *g;
    oj_engine *eng;
    oj_tensor *dq, *dk, *dv;
    const oj_tensor *dout, *out, *lse;
} bwd_ctx;

static int64_t bwd_scratch(const attn_geom *g) {
    int64_t D = g->D, Dv = g->Dv;
    return TQ * D + TQ * Dv + Dv + TK * D + TK * Dv + TQ * D + g->S * D + g->S * Dv + TK +
           2 * TQ;
}

/* One (b, kv head) pair per item: dk/dv of that kv head sum over the
 * query heads of its group in head order. */
static void bwd_chunk(void *vctx, int64_t begin, int64_t end, int tid) {
    const bwd_ctx *cx = vctx;
    const attn_geom *g = cx->g;
    int64_t D = g->D, Dv = g->Dv, S = g->S;
    double *qt = oj_cpu_scratch(cx->eng, tid, (size_t)bwd_scratch(g) * sizeof(double));
    double *got = qt + TQ * D, *ot = got + TQ * Dv, *kt = ot + Dv, *vt = kt + TK * D;
    double *dqt = vt + TK * Dv, *dka = dqt + TQ * D, *dva = dka + S * D, *s = dva + S * Dv;
    double *lr = s + TK, *delta = lr + TQ;
    const oj_tensor *lse = cx->lse, *out = cx->out, *dout = cx->dout;
    oj_tensor *dq = cx->dq, *dk = cx->dk, *dv = cx->dv;
    for (int64_t bk = begin; bk < end; bk++) {
        int64_t b = bk / g->Hkv, hk = bk % g->Hkv;
        memset(dka, 0, (size_t)(S * D) * sizeof(double));
        memset(dva, 0, (size_t)(S * Dv) * sizeof(double));
        for (int64_t h = hk * g->group; h < (hk + 1) * g->group; h++)
            for (int64_t i0 = 0; i0 < g->T; i0 += TQ) {
                int64_t nq = g->T - i0 < TQ ? g->T - i0 : TQ;
                load_tile(g->q, b, h, i0, nq, D, qt);
                load_tile(dout, b, h, i0, nq, Dv, got);
                memset(dqt, 0, (size_t)(nq * D) * sizeof(double));
                for (int64_t r = 0; r < nq; r++) {
                    int64_t row = (b * g->H + h) * g->T + i0 + r;
                    lr[r] = oj__nn_get(oj__nn_base(lse), lse->dtype, row);
                    /* delta_i = dout_i . out_i (= sum_j p_ij dp_ij) */
                    load_row4(out, b, h, i0 + r, Dv, ot);
                    double d = 0.0;
                    for (int64_t c = 0; c < Dv; c++) d += got[r * Dv + c] * ot[c];
                    delta[r] = d;
                }
                int64_t kend = oj_attn_keys_visible(g, i0, nq);
                for (int64_t j0 = 0; j0 < kend; j0 += TK) {
                    int64_t nk = kend - j0 < TK ? kend - j0 : TK;
                    load_tile(g->k, b, hk, j0, nk, D, kt);
                    load_tile(g->v, b, hk, j0, nk, Dv, vt);
                    for (int64_t r = 0; r < nq; r++) {
                        if (lr[r] == -INFINITY) continue; /* fully masked row: no gradient */
                        const double *qi = qt + r * D, *gi = got + r * Dv;
                        scores(g, b, h, i0 + r, qi, j0, nk, kt, s);
                        for (int64_t jj = 0; jj < nk; jj++) {
                            if (s[jj] == -INFINITY) continue;
                            double p = exp(s[jj] - lr[r]);
                            const double *kj = kt + jj * D, *vj = vt + jj * Dv;
                            double *dvj = dva + (j0 + jj) * Dv, *dkj = dka + (j0 + jj) * D;
                            double dp = 0.0;
                            for (int64_t c = 0; c < Dv; c++) {
                                dvj[c] += p * gi[c];
                                dp += gi[c] * vj[c];
                            }
                            double ds = p * (dp - delta[r]) * g->scale;
                            double *dqi = dqt + r * D;
                            for (int64_t c = 0; c < D; c++) {
                                dqi[c] += ds * kj[c];
                                dkj[c] += ds * qi[c];
                            }
                        }
                    }
                }
                if (dq)
                    for (int64_t r = 0; r < nq; r++) store_row4(dq, b, h, i0 + r, D, dqt + r * D);
            }
        for (int64_t j = 0; j < S; j++) {
            if (dk) store_row4(dk, b, hk, j, D, dka + j * D);
            if (dv) store_row4(dv, b, hk, j, Dv, dva + j * Dv);
        }
    }
}

oj_status oj_cpu_attention_backward(oj_engine *eng, oj_tensor *dq, oj_tensor *dk, oj_tensor *dv,
                                    const oj_tensor *dout, const oj_tensor *q, const oj_tensor *k,
                                    const oj_tensor *v, const oj_tensor *out,
                                    const oj_tensor *lse, const oj_tensor *mask, bool is_causal,
                                    double scale) {
    attn_geom g;
    oj_attn_geom_init(&g, q, k, v, mask, is_causal, scale);
    bool f32 = q->dtype == OJ_F32 && k->dtype == OJ_F32 && v->dtype == OJ_F32 &&
               out->dtype == OJ_F32 && dout->dtype == OJ_F32 && lse->dtype == OJ_F32 &&
               (!dq || dq->dtype == OJ_F32) && (!dk || dk->dtype == OJ_F32) &&
               (!dv || dv->dtype == OJ_F32);
    if (f32) return oj__cpu_attention_backward_f32(eng, dq, dk, dv, dout, out, lse, &g);
    oj_status st = reserve_scratch(eng, (size_t)bwd_scratch(&g) * sizeof(double),
                                   "scaled_dot_product_attention");
    if (st != OJ_OK) return st;
    bwd_ctx cx = {&g, eng, dq, dk, dv, dout, out, lse};
    oj_cpu_parallel_for(eng, g.B * g.Hkv, 1, bwd_chunk, &cx);
    return OJ_OK;
}
