/* CPU scaled dot-product attention, tiled with an online softmax so the
 * [T, S] score matrix is never stored (Milakov & Gimelshein, "Online
 * normalizer calculation for softmax", 2018; Dao et al., "FlashAttention",
 * 2022, and FlashAttention-2's backward, 2023).
 *
 * q (B,H,T,D), k (B,Hkv,S,D), v (B,Hkv,S,Dv), mask (B,H,T,S) view or NULL,
 * out (B,H,T,Dv), lse (B,H,T). Query i of a row sees key j when the mask
 * keeps it and, if causal, j <= i + S - T (bottom-right aligned, so T new
 * queries at the end of a KV cache see every earlier key).
 *
 * Work is split into blocks of TQ queries x TK keys; K and V tiles are
 * converted to double once per query block. Every sum runs in a fixed,
 * index-increasing order. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"

#define TQ 32
#define TK 64

typedef struct {
    int64_t B, H, Hkv, T, S, D, Dv, group;
    const oj_tensor *q, *k, *v, *mask;
    bool causal;
    double scale;
} attn_geom;

static void geom_init(attn_geom *g, const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                      const oj_tensor *mask, bool causal, double scale) {
    g->B = q->shape[0];
    g->H = q->shape[1];
    g->T = q->shape[2];
    g->D = q->shape[3];
    g->Hkv = k->shape[1];
    g->S = k->shape[2];
    g->Dv = v->shape[3];
    g->group = g->Hkv ? g->H / g->Hkv : 1;
    g->q = q;
    g->k = k;
    g->v = v;
    g->mask = mask;
    g->causal = causal;
    g->scale = scale;
}

/* Row (b, h, i) of a rank-4 strided tensor into dst (n values). */
static void load_row4(const oj_tensor *t, int64_t b, int64_t h, int64_t i, int64_t n,
                      double *dst) {
    const int64_t *s = t->stride;
    int64_t off = b * s[0] + h * s[1] + i * s[2];
    oj__nn_load(oj__nn_base(t) + off * (int64_t)oj_dtype_size(t->dtype), t->dtype, n, s[3], dst);
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
    const char *mp = NULL;
    if (m) {
        int64_t off = b * m->stride[0] + h * m->stride[1] + i * m->stride[2];
        mp = oj__nn_base(m) + off * (int64_t)oj_dtype_size(m->dtype);
    }
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

/* Number of keys that some query of [i0, i0 + nq) may see (causal bound). */
static int64_t keys_visible(const attn_geom *g, int64_t i0, int64_t nq) {
    if (!g->causal) return g->S;
    int64_t last = i0 + nq - 1 + g->S - g->T + 1;
    return last < 0 ? 0 : (last > g->S ? g->S : last);
}

oj_status oj_cpu_attention_forward(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                   const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                   const oj_tensor *mask, bool is_causal, double scale) {
    attn_geom g;
    geom_init(&g, q, k, v, mask, is_causal, scale);
    int64_t D = g.D, Dv = g.Dv;
    double *qt = oj__nn_scratch(eng, TQ * D, "scaled_dot_product_attention");
    double *kt = oj__nn_scratch(eng, TK * D, "scaled_dot_product_attention");
    double *vt = oj__nn_scratch(eng, TK * Dv, "scaled_dot_product_attention");
    double *acc = oj__nn_scratch(eng, TQ * Dv, "scaled_dot_product_attention");
    double *s = oj__nn_scratch(eng, TK, "scaled_dot_product_attention");
    double m[TQ], l[TQ];
    oj_status st = OJ_OK;
    if (!qt || !kt || !vt || !acc || !s) {
        st = OJ_ERR_CAPACITY;
        goto done;
    }
    size_t os = oj_dtype_size(out->dtype);
    for (int64_t b = 0; b < g.B; b++)
        for (int64_t h = 0; h < g.H; h++) {
            int64_t hk = h / g.group;
            for (int64_t i0 = 0; i0 < g.T; i0 += TQ) {
                int64_t nq = g.T - i0 < TQ ? g.T - i0 : TQ;
                load_tile(q, b, h, i0, nq, D, qt);
                memset(acc, 0, (size_t)(nq * Dv) * sizeof(double));
                for (int64_t r = 0; r < nq; r++) {
                    m[r] = -INFINITY;
                    l[r] = 0.0;
                }
                int64_t kend = keys_visible(&g, i0, nq);
                for (int64_t j0 = 0; j0 < kend; j0 += TK) {
                    int64_t nk = kend - j0 < TK ? kend - j0 : TK;
                    load_tile(k, b, hk, j0, nk, D, kt);
                    load_tile(v, b, hk, j0, nk, Dv, vt);
                    for (int64_t r = 0; r < nq; r++) {
                        scores(&g, b, h, i0 + r, qt + r * D, j0, nk, kt, s);
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
                    int64_t row = (b * g.H + h) * g.T + i0 + r;
                    oj__nn_store(oj__nn_base(out) + (size_t)(row * Dv) * os, out->dtype, Dv, a);
                    if (lse) {
                        double lv = l[r] > 0.0 ? m[r] + log(l[r]) : -INFINITY;
                        if (isnan(m[r])) lv = NAN;
                        oj__nn_store(oj__nn_base(lse) + (size_t)row * oj_dtype_size(lse->dtype),
                                     lse->dtype, 1, &lv);
                    }
                }
            }
        }
done:
    free(qt);
    free(kt);
    free(vt);
    free(acc);
    free(s);
    return st;
}

oj_status oj_cpu_attention_backward(oj_engine *eng, oj_tensor *dq, oj_tensor *dk, oj_tensor *dv,
                                    const oj_tensor *dout, const oj_tensor *q, const oj_tensor *k,
                                    const oj_tensor *v, const oj_tensor *out,
                                    const oj_tensor *lse, const oj_tensor *mask, bool is_causal,
                                    double scale) {
    attn_geom g;
    geom_init(&g, q, k, v, mask, is_causal, scale);
    int64_t D = g.D, Dv = g.Dv, S = g.S;
    const char *op = "scaled_dot_product_attention";
    double *qt = oj__nn_scratch(eng, TQ * D, op);
    double *got = oj__nn_scratch(eng, TQ * Dv, op); /* dout tile */
    double *ot = oj__nn_scratch(eng, Dv, op);
    double *kt = oj__nn_scratch(eng, TK * D, op);
    double *vt = oj__nn_scratch(eng, TK * Dv, op);
    double *dqt = oj__nn_scratch(eng, TQ * D, op);
    double *dka = oj__nn_scratch(eng, S * D, op);  /* dk of one kv head */
    double *dva = oj__nn_scratch(eng, S * Dv, op); /* dv of one kv head */
    double *s = oj__nn_scratch(eng, TK, op);
    double lr[TQ], delta[TQ];
    oj_status st = OJ_OK;
    if (!qt || !got || !ot || !kt || !vt || !dqt || !dka || !dva || !s) {
        st = OJ_ERR_CAPACITY;
        goto done;
    }
    for (int64_t b = 0; b < g.B; b++)
        for (int64_t hk = 0; hk < g.Hkv; hk++) {
            memset(dka, 0, (size_t)(S * D) * sizeof(double));
            memset(dva, 0, (size_t)(S * Dv) * sizeof(double));
            for (int64_t h = hk * g.group; h < (hk + 1) * g.group; h++)
                for (int64_t i0 = 0; i0 < g.T; i0 += TQ) {
                    int64_t nq = g.T - i0 < TQ ? g.T - i0 : TQ;
                    load_tile(q, b, h, i0, nq, D, qt);
                    load_tile(dout, b, h, i0, nq, Dv, got);
                    memset(dqt, 0, (size_t)(nq * D) * sizeof(double));
                    for (int64_t r = 0; r < nq; r++) {
                        int64_t row = (b * g.H + h) * g.T + i0 + r;
                        lr[r] = oj__nn_get(oj__nn_base(lse), lse->dtype, row);
                        /* delta_i = dout_i . out_i (= sum_j p_ij dp_ij) */
                        oj__nn_load(oj__nn_base(out) + (size_t)(row * Dv) * oj_dtype_size(out->dtype),
                                    out->dtype, Dv, 1, ot);
                        double d = 0.0;
                        for (int64_t c = 0; c < Dv; c++) d += got[r * Dv + c] * ot[c];
                        delta[r] = d;
                    }
                    int64_t kend = keys_visible(&g, i0, nq);
                    for (int64_t j0 = 0; j0 < kend; j0 += TK) {
                        int64_t nk = kend - j0 < TK ? kend - j0 : TK;
                        load_tile(k, b, hk, j0, nk, D, kt);
                        load_tile(v, b, hk, j0, nk, Dv, vt);
                        for (int64_t r = 0; r < nq; r++) {
                            if (lr[r] == -INFINITY) continue; /* fully masked row: no gradient */
                            const double *qi = qt + r * D, *gi = got + r * Dv;
                            scores(&g, b, h, i0 + r, qi, j0, nk, kt, s);
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
                                double ds = p * (dp - delta[r]) * g.scale;
                                double *dqi = dqt + r * D;
                                for (int64_t c = 0; c < D; c++) {
                                    dqi[c] += ds * kj[c];
                                    dkj[c] += ds * qi[c];
                                }
                            }
                        }
                    }
                    if (dq) {
                        int64_t row0 = (b * g.H + h) * g.T + i0;
                        oj__nn_store(oj__nn_base(dq) + (size_t)(row0 * D) * oj_dtype_size(dq->dtype),
                                     dq->dtype, nq * D, dqt);
                    }
                }
            int64_t krow0 = (b * g.Hkv + hk) * S;
            if (dk)
                oj__nn_store(oj__nn_base(dk) + (size_t)(krow0 * D) * oj_dtype_size(dk->dtype),
                             dk->dtype, S * D, dka);
            if (dv)
                oj__nn_store(oj__nn_base(dv) + (size_t)(krow0 * Dv) * oj_dtype_size(dv->dtype),
                             dv->dtype, S * Dv, dva);
        }
done:
    free(qt);
    free(got);
    free(ot);
    free(kt);
    free(vt);
    free(dqt);
    free(dka);
    free(dva);
    free(s);
    return st;
}
