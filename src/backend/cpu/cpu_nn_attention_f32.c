/* f32 scaled dot-product attention on the engine's SIMD level (see
 * cpu_nn_attention.c for the algorithm and the double path).
 *
 * Per (batch, kv head) K is transposed once into kt [D, S] (and, for the
 * backward, V into vt [Dv, S]), so the scores of one query against a tile
 * of keys are one `rowdot` (broadcast q[c], FMA along the keys: no
 * horizontal sums), the probabilities one `expsum`, and P V one `rowcomb`.
 * The backward follows FlashAttention-2: per query row and key tile,
 * p = exp(s - lse), dp = dout v^T, ds = p (dp - delta) scale, then
 * dv += p^T dout, dk += ds^T q (rank-1 updates of the kv head's f32
 * accumulators) and dq += ds k.
 *
 * Forward tasks are (b, h) pairs, backward tasks (b, kv head) pairs, one
 * task per parallel-for item; inside a task everything runs in a fixed
 * order, so results are bit-identical for any thread count (for a given
 * SIMD level). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_nn_attention.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_simd.h"

#define TQ OJ_ATTN_TQ
#define TK OJ_ATTN_TK

/* A rank-4 f32 tensor's head (b, h): row i at base + i * ld when rows are
 * unit-stride (packed = false), else rows are gathered into a buffer. */
typedef struct {
    const float *base;
    int64_t ld;
} rows_f32;

static bool unit_rows(const oj_tensor *t) { return t->shape[3] <= 1 || t->stride[3] == 1; }

/* Pointer to row i of head (b, h) of t (f32), copied into tmp when its
 * elements are strided. */
static const float *row_f32(const oj_tensor *t, int64_t b, int64_t h, int64_t i, float *tmp) {
    const int64_t *s = t->stride;
    const float *p = (const float *)oj__nn_base(t) + b * s[0] + h * s[1] + i * s[2];
    if (unit_rows(t)) return p;
    for (int64_t c = 0; c < t->shape[3]; c++) tmp[c] = p[c * s[3]];
    return tmp;
}

/* Rows of head (b, h) of t: direct when unit-stride, else packed into buf
 * [n, cols]. */
static rows_f32 head_rows(const oj_tensor *t, int64_t b, int64_t h, int64_t n, float *buf) {
    const int64_t *s = t->stride;
    const float *p = (const float *)oj__nn_base(t) + b * s[0] + h * s[1];
    int64_t cols = t->shape[3];
    if (unit_rows(t)) return (rows_f32){p, s[2]};
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < cols; c++) buf[j * cols + c] = p[j * s[2] + c * s[3]];
    return (rows_f32){buf, cols};
}

/* mt [cols, n] = transpose of rows 0..n of head (b, h) of t. */
static void head_transpose(const oj_simd *sd, const oj_tensor *t, int64_t b, int64_t h, int64_t n,
                           float *mt) {
    const int64_t *s = t->stride;
    const float *p = (const float *)oj__nn_base(t) + b * s[0] + h * s[1];
    int64_t cols = t->shape[3];
    if (unit_rows(t)) {
        sd->transpose(mt, n, p, s[2], n, cols);
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        const float *r = p + j * s[2];
        for (int64_t c = 0; c < cols; c++) mt[c * n + j] = r[c * s[3]];
    }
}

/* Paged keys or values (g->blocks): mt [cols, n] = the transpose of keys
 * 0..n of kv head h of pool t [NB, Hkv, BS, cols] (contiguous), read
 * block by block in place; or, with rows set, the keys as rows [n, cols]
 * into rows. */
static void paged_gather(const oj_simd *sd, const oj_attn_geom *g, const oj_tensor *t, int64_t h,
                         int64_t n, float *mt, float *rows) {
    const int64_t BS = g->block_size, cols = t->shape[3];
    const float *base = (const float *)oj__nn_base(t);
    for (int64_t j0 = 0; j0 < n; j0 += BS) {
        int64_t nr = n - j0 < BS ? n - j0 : BS;
        const float *p = base + g->blocks[j0 / BS] * t->stride[0] + h * t->stride[1];
        if (rows)
            memcpy(rows + j0 * cols, p, (size_t)(nr * cols) * sizeof(float));
        else
            sd->transpose(mt + j0, n, p, cols, nr, cols);
    }
}

/* Rows [r0, r0 + nr) of head (b, h) of the f32 tensor t (any strides) =
 * src [nr, cols]. */
static void store_rows_f32(const oj_tensor *t, int64_t b, int64_t h, int64_t r0, int64_t nr,
                           const float *src) {
    const int64_t *s = t->stride;
    int64_t cols = t->shape[3];
    float *p = (float *)oj__nn_base(t) + b * s[0] + h * s[1] + r0 * s[2];
    for (int64_t r = 0; r < nr; r++) {
        float *d = p + r * s[2];
        const float *x = src + r * cols;
        if (unit_rows(t))
            memcpy(d, x, (size_t)cols * sizeof(float));
        else
            for (int64_t c = 0; c < cols; c++) d[c * s[3]] = x[c];
    }
}

/* Keys of tile [j0, j0 + nk) that query i may see under the causal bound
 * (all nk without it); 0 when none. */
static int64_t tile_visible(const oj_attn_geom *g, int64_t i, int64_t j0, int64_t nk) {
    if (!g->causal) return nk;
    int64_t last = i + g->S - g->T; /* last visible key */
    if (last < j0) return 0;
    return last - j0 + 1 < nk ? last - j0 + 1 : nk;
}

/* Apply the mask of row (b, h, i) to scores s of keys j0..j0+n. */
static void apply_mask(const oj_attn_geom *g, int64_t b, int64_t h, int64_t i, int64_t j0,
                       int64_t n, float *s) {
    const char *mp = oj_attn_mask_row(g, b, h, i);
    if (mp == NULL) return;
    const oj_tensor *m = g->mask;
    int64_t ms = m->stride[3];
    if (m->dtype == OJ_BOOL) {
        const uint8_t *mb = (const uint8_t *)mp;
        for (int64_t jj = 0; jj < n; jj++)
            if (mb[(j0 + jj) * ms] == 0) s[jj] = -INFINITY;
    } else {
        for (int64_t jj = 0; jj < n; jj++) s[jj] += (float)oj__nn_get(mp, m->dtype, (j0 + jj) * ms);
    }
}

/* ---------------------------------------------------------------- forward */

typedef struct {
    const oj_attn_geom *g;
    oj_engine *eng;
    const oj_simd *sd;
    oj_tensor *out, *lse;
    bool v_direct;
} fwd_ctx;

#define R OJ_SIMD_ROWS

static int64_t fwd_floats(const oj_attn_geom *g, bool v_direct) {
    return g->D * g->S + (v_direct ? 0 : g->S * g->Dv) + TQ * g->Dv + R * TK + R * g->D + 2 * TQ;
}

/* Visible keys of each row of a group (n[rr]) and their maximum. */
static int64_t group_visible(const oj_attn_geom *g, int64_t i, int nr, int64_t j0, int64_t nk,
                             int64_t *n) {
    int64_t nmax = 0;
    for (int rr = 0; rr < nr; rr++) {
        n[rr] = tile_visible(g, i + rr, j0, nk);
        if (n[rr] > nmax) nmax = n[rr];
    }
    return nmax;
}

static void fwd_chunk(void *vctx, int64_t begin, int64_t end, int tid) {
    const fwd_ctx *cx = vctx;
    const oj_attn_geom *g = cx->g;
    const oj_simd *sd = cx->sd;
    int64_t D = g->D, Dv = g->Dv, S = g->S;
    float *kt = oj_cpu_scratch(cx->eng, tid, (size_t)fwd_floats(g, cx->v_direct) * sizeof(float));
    float *vbuf = kt + D * S;
    float *acc = vbuf + (cx->v_direct ? 0 : S * Dv), *s4 = acc + TQ * Dv, *qtmp = s4 + R * TK;
    float *m = qtmp + R * D, *l = m + TQ;
    const oj_tensor *out = cx->out;
    const int64_t *os = out->stride;
    float fscale = (float)g->scale;
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / g->H, h = bh % g->H, hk = h / g->group;
        int64_t kend_all = oj_attn_keys_visible(g, 0, g->T);
        rows_f32 vr;
        if (g->blocks) { /* the blocks read in place, into the same kt and rows */
            paged_gather(sd, g, g->k, hk, kend_all, kt, NULL);
            paged_gather(sd, g, g->v, hk, kend_all, NULL, vbuf);
            vr = (rows_f32){vbuf, g->Dv};
        } else {
            head_transpose(sd, g->k, b, hk, kend_all, kt);
            vr = head_rows(g->v, b, hk, kend_all, vbuf);
        }
        int64_t ldk = kend_all; /* kt row stride */
        for (int64_t i0 = 0; i0 < g->T; i0 += TQ) {
            int64_t nq = g->T - i0 < TQ ? g->T - i0 : TQ;
            memset(acc, 0, (size_t)(nq * Dv) * sizeof(float));
            for (int64_t r = 0; r < nq; r++) {
                m[r] = -INFINITY;
                l[r] = 0.0f;
            }
            int64_t kend = oj_attn_keys_visible(g, i0, nq);
            for (int64_t j0 = 0; j0 < kend; j0 += TK) {
                int64_t nk = kend - j0 < TK ? kend - j0 : TK;
                for (int64_t r0 = 0; r0 < nq; r0 += R) {
                    int nr = nq - r0 < R ? (int)(nq - r0) : R;
                    int64_t n[R];
                    int64_t nmax = group_visible(g, i0 + r0, nr, j0, nk, n);
                    if (nmax == 0) continue;
                    const float *xs[R];
                    for (int rr = 0; rr < nr; rr++)
                        xs[rr] = row_f32(g->q, b, h, i0 + r0 + rr, qtmp + rr * D);
                    sd->rowdot(nr, xs, kt + j0, ldk, D, nmax, fscale, s4, TK);
                    for (int rr = 0; rr < nr; rr++) {
                        int64_t r = r0 + rr;
                        float *s = s4 + rr * TK;
                        float mb = -INFINITY;
                        if (n[rr] > 0) {
                            apply_mask(g, b, h, i0 + r, j0, n[rr], s);
                            mb = sd->max(s, n[rr]);
                        }
                        if (mb == -INFINITY) { /* every key of the tile masked */
                            memset(s, 0, (size_t)nmax * sizeof(float));
                            continue;
                        }
                        float mn = mb > m[r] || isnan(mb) ? mb : m[r];
                        if (m[r] != mn) {
                            float corr = m[r] == -INFINITY ? 0.0f : oj_expf_poly(m[r] - mn);
                            sd->scale(acc + r * Dv, Dv, corr);
                            l[r] *= corr;
                        }
                        l[r] += sd->expsum(s, n[rr], mn);
                        for (int64_t jj = n[rr]; jj < nmax; jj++) s[jj] = 0.0f;
                        m[r] = mn;
                    }
                    sd->rowcomb(nr, s4, TK, nmax, vr.base + j0 * vr.ld, vr.ld, Dv,
                                acc + r0 * Dv, Dv);
                }
            }
            for (int64_t r = 0; r < nq; r++) {
                float *a = acc + r * Dv;
                float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* fully masked row: 0 */
                int64_t row = (b * g->H + h) * g->T + i0 + r;
                float *o = (float *)oj__nn_base(out) + b * os[0] + h * os[1] + (i0 + r) * os[2];
                for (int64_t c = 0; c < Dv; c++) o[c * os[3]] = a[c] * inv;
                if (cx->lse) {
                    double lv = l[r] > 0.0f ? (double)m[r] + log((double)l[r]) : -INFINITY;
                    if (isnan(m[r])) lv = NAN;
                    oj__nn_store(oj__nn_base(cx->lse) + (size_t)row * oj_dtype_size(cx->lse->dtype),
                                 cx->lse->dtype, 1, &lv);
                }
            }
        }
    }
}

static oj_status reserve(oj_engine *eng, int64_t floats) {
    size_t bytes = (size_t)(floats > 0 ? floats : 1) * sizeof(float);
    int n = oj_cpu_threads(eng);
    for (int t = 0; t < n; t++)
        if (oj_cpu_scratch(eng, t, bytes) == NULL)
            return oj_set_error(eng, OJ_ERR_CAPACITY,
                                "scaled_dot_product_attention: out of host memory for %zu "
                                "bytes of scratch", bytes);
    return OJ_OK;
}

oj_status oj__cpu_attention_forward_f32(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                        const oj_attn_geom *g) {
    fwd_ctx cx = {g, eng, oj_simd_of(eng), out, lse, g->blocks == NULL && unit_rows(g->v)};
    oj_status st = reserve(eng, fwd_floats(g, cx.v_direct));
    if (st != OJ_OK) return st;
    oj_cpu_parallel_for(eng, g->B * g->H, 1, fwd_chunk, &cx);
    return OJ_OK;
}

/* ---------------------------------------------------------------- backward */

typedef struct {
    const oj_attn_geom *g;
    oj_engine *eng;
    const oj_simd *sd;
    oj_tensor *dq, *dk, *dv;
    const oj_tensor *dout, *out, *lse;
    bool k_direct;
} bwd_ctx;

static int64_t bwd_floats(const oj_attn_geom *g, bool k_direct) {
    int64_t D = g->D, Dv = g->Dv, S = g->S;
    return D * S + Dv * S + (k_direct ? 0 : S * D) + S * D + S * Dv + 3 * R * TK + R * D +
           R * Dv + Dv + TQ * D + 2 * TQ;
}

static void bwd_chunk(void *vctx, int64_t begin, int64_t end, int tid) {
    const bwd_ctx *cx = vctx;
    const oj_attn_geom *g = cx->g;
    const oj_simd *sd = cx->sd;
    int64_t D = g->D, Dv = g->Dv, S = g->S;
    float *kt = oj_cpu_scratch(cx->eng, tid, (size_t)bwd_floats(g, cx->k_direct) * sizeof(float));
    float *vt = kt + D * S, *kbuf = vt + Dv * S;
    float *dka = kbuf + (cx->k_direct ? 0 : S * D), *dva = dka + S * D;
    float *p4 = dva + S * Dv, *dp4 = p4 + R * TK, *ds4 = dp4 + R * TK;
    float *qtmp = ds4 + R * TK, *gtmp = qtmp + R * D, *otmp = gtmp + R * Dv;
    float *dqt = otmp + Dv, *lr = dqt + TQ * D, *delta = lr + TQ;
    const float *lse = (const float *)oj__nn_base(cx->lse);
    float fscale = (float)g->scale;
    for (int64_t bk = begin; bk < end; bk++) {
        int64_t b = bk / g->Hkv, hk = bk % g->Hkv;
        int64_t kend_all = oj_attn_keys_visible(g, 0, g->T);
        head_transpose(sd, g->k, b, hk, kend_all, kt);
        head_transpose(sd, g->v, b, hk, kend_all, vt);
        rows_f32 kr = head_rows(g->k, b, hk, kend_all, kbuf);
        int64_t ld = kend_all;
        memset(dka, 0, (size_t)(S * D) * sizeof(float));
        memset(dva, 0, (size_t)(S * Dv) * sizeof(float));
        for (int64_t h = hk * g->group; h < (hk + 1) * g->group; h++)
            for (int64_t i0 = 0; i0 < g->T; i0 += TQ) {
                int64_t nq = g->T - i0 < TQ ? g->T - i0 : TQ;
                memset(dqt, 0, (size_t)(nq * D) * sizeof(float));
                for (int64_t r = 0; r < nq; r++) {
                    int64_t row = (b * g->H + h) * g->T + i0 + r;
                    lr[r] = lse[row];
                    /* delta_i = dout_i . out_i (= sum_j p_ij dp_ij) */
                    const float *gi = row_f32(cx->dout, b, h, i0 + r, gtmp);
                    const float *oi = row_f32(cx->out, b, h, i0 + r, otmp);
                    delta[r] = sd->dot(gi, oi, Dv);
                }
                int64_t kend = oj_attn_keys_visible(g, i0, nq);
                for (int64_t j0 = 0; j0 < kend; j0 += TK) {
                    int64_t nk = kend - j0 < TK ? kend - j0 : TK;
                    for (int64_t r0 = 0; r0 < nq; r0 += R) {
                        int nr = nq - r0 < R ? (int)(nq - r0) : R;
                        int64_t n[R];
                        int64_t nmax = group_visible(g, i0 + r0, nr, j0, nk, n);
                        if (nmax == 0) continue;
                        const float *xs[R], *gs[R];
                        for (int rr = 0; rr < nr; rr++) {
                            xs[rr] = row_f32(g->q, b, h, i0 + r0 + rr, qtmp + rr * D);
                            gs[rr] = row_f32(cx->dout, b, h, i0 + r0 + rr, gtmp + rr * Dv);
                        }
                        sd->rowdot(nr, xs, kt + j0, ld, D, nmax, fscale, p4, TK);
                        sd->rowdot(nr, gs, vt + j0, ld, Dv, nmax, 1.0f, dp4, TK);
                        for (int rr = 0; rr < nr; rr++) {
                            int64_t r = r0 + rr;
                            float *p = p4 + rr * TK, *dp = dp4 + rr * TK, *ds = ds4 + rr * TK;
                            int64_t nv = lr[r] == -INFINITY ? 0 : n[rr]; /* fully masked: no gradient */
                            if (nv > 0) {
                                apply_mask(g, b, h, i0 + r, j0, nv, p);
                                sd->expsum(p, nv, lr[r]); /* p = exp(s - lse) */
                            }
                            for (int64_t jj = nv; jj < nmax; jj++) p[jj] = 0.0f;
                            float dl = delta[r];
                            /* ds = p (dp - delta) scale, in that order (vector) */
                            if (nv > 0) {
                                sd->softmax_bwd(ds, p, dp, nv, dl, false);
                                sd->scale(ds, nv, fscale);
                            }
                            for (int64_t jj = nv; jj < nmax; jj++) ds[jj] = 0.0f;
                        }
                        sd->rank(nr, p4, TK, nmax, gs, Dv, dva + j0 * Dv, Dv);
                        sd->rank(nr, ds4, TK, nmax, xs, D, dka + j0 * D, D);
                        sd->rowcomb(nr, ds4, TK, nmax, kr.base + j0 * kr.ld, kr.ld, D,
                                    dqt + r0 * D, D);
                    }
                }
                if (cx->dq) store_rows_f32(cx->dq, b, h, i0, nq, dqt);
            }
        if (cx->dk) store_rows_f32(cx->dk, b, hk, 0, S, dka);
        if (cx->dv) store_rows_f32(cx->dv, b, hk, 0, S, dva);
    }
}

oj_status oj__cpu_attention_backward_f32(oj_engine *eng, oj_tensor *dq, oj_tensor *dk,
                                         oj_tensor *dv, const oj_tensor *dout,
                                         const oj_tensor *out, const oj_tensor *lse,
                                         const oj_attn_geom *g) {
    bwd_ctx cx = {g, eng, oj_simd_of(eng), dq, dk, dv, dout, out, lse, unit_rows(g->k)};
    oj_status st = reserve(eng, bwd_floats(g, cx.k_direct));
    if (st != OJ_OK) return st;
    oj_cpu_parallel_for(eng, g->B * g->Hkv, 1, bwd_chunk, &cx);
    return OJ_OK;
}
