/* Batch-1 decode entries (backend.h: decode_norm_linear,
 * decode_linear_residual): the reference the CUDA kernels are tested
 * against. Straight loops in double, each value rounded to the storage
 * dtype where the unfused ops round (the norm's output, the linear's
 * output, the GELU's, the residual sum), so they agree with layer_norm,
 * linear, gelu and add run one after another up to the sums' order. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend/cpu/cpu_decode.h"
#include "backend/cpu/cpu_nn_util.h"
#include "backend/scalar_ops.h"
#include "ojas/infer.h"
#include "ops/nn_decode.h"

/* v rounded to dt (bf16 / f16) and back. */
static double round_to(oj_dtype dt, double v) {
    return dt == OJ_BF16 ? oj_bf16_to_f32(oj_f32_to_bf16((float)v))
                         : oj_f16_to_f32(oj_f32_to_f16((float)v));
}

static double ld16(oj_dtype dt, const uint16_t *p, int64_t i) {
    return dt == OJ_BF16 ? oj_bf16_to_f32(p[i]) : oj_f16_to_f32(p[i]);
}

static uint16_t st16(oj_dtype dt, double v) {
    return dt == OJ_BF16 ? oj_f32_to_bf16((float)v) : oj_f32_to_f16((float)v);
}

/* out[n] = sum_k u[k] w[k, n] + b[n] (double) for n < N. */
static void row_times(oj_dtype dt, const double *u, const oj_tensor *w, const oj_tensor *b,
                      double *out) {
    const int64_t K = w->shape[0], N = w->shape[1], ldw = w->stride[0];
    const uint16_t *wp = (const uint16_t *)oj__nn_base(w);
    const uint16_t *bp = b ? (const uint16_t *)oj__nn_base(b) : NULL;
    for (int64_t n = 0; n < N; n++) out[n] = 0.0;
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) out[n] += u[k] * ld16(dt, wp, k * ldw + n);
    if (bp)
        for (int64_t n = 0; n < N; n++) out[n] += ld16(dt, bp, n);
}

/* u[k] = layer_norm(x [K]; nw, nb, eps)[k] rounded to dt. */
static void norm_row(oj_dtype dt, const oj_tensor *x, const oj_tensor *nw, const oj_tensor *nb,
                     double eps, int64_t K, double *u) {
    const uint16_t *xp = (const uint16_t *)oj__nn_base(x);
    const uint16_t *wp = (const uint16_t *)oj__nn_base(nw), *bp = (const uint16_t *)oj__nn_base(nb);
    double mean = 0.0, var = 0.0;
    for (int64_t k = 0; k < K; k++) mean += ld16(dt, xp, k);
    mean /= (double)K;
    for (int64_t k = 0; k < K; k++) {
        double d = ld16(dt, xp, k) - mean;
        var += d * d;
    }
    const double rstd = 1.0 / sqrt(var / (double)K + eps);
    for (int64_t k = 0; k < K; k++)
        u[k] = round_to(dt, (ld16(dt, xp, k) - mean) * rstd * ld16(dt, wp, k) + ld16(dt, bp, k));
}

oj_status oj_cpu_decode_norm_linear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                    const oj_tensor *nw, const oj_tensor *nb, double eps,
                                    const oj_tensor *w, const oj_tensor *b, int act, oj_tensor *kv,
                                    const oj_tensor *slot) {
    const oj_dtype dt = out->dtype;
    const int64_t K = w->shape[0], N = w->shape[1];
    double *u = oj__nn_scratch(eng, (size_t)(K + N), "decode_norm_linear");
    if (u == NULL) return oj_last_status(eng);
    double *o = u + K;
    norm_row(dt, x, nw, nb, eps, K, u);
    row_times(dt, u, w, b, o);
    uint16_t *op = (uint16_t *)oj__nn_base(out);
    for (int64_t n = 0; n < N; n++) {
        double v = round_to(dt, o[n]);
        if (act == 1) v = oj_unary_d(OJ_UN_GELU_TANH, v, 0.0, 0.0);
        op[n] = st16(dt, v);
    }
    if (kv) {
        const int64_t H = kv->shape[2], S = kv->shape[3], D = kv->shape[4], C = H * D;
        const int64_t s = *(const int64_t *)oj__nn_base(slot);
        uint16_t *kp = (uint16_t *)oj__nn_base(kv);
        if (s >= 0 && s < S)
            for (int64_t j = 0; j < 2 * C; j++) {
                int64_t which = j / C, h = (j % C) / D, d = j % D;
                kp[((which * H + h) * S + s) * D + d] = op[C + j];
            }
    }
    free(u);
    return OJ_OK;
}

oj_status oj_cpu_decode_linear_residual(oj_engine *eng, oj_tensor *x, const oj_tensor *y,
                                        const oj_tensor *w, const oj_tensor *b) {
    const oj_dtype dt = x->dtype;
    const int64_t K = w->shape[0], N = w->shape[1];
    double *u = oj__nn_scratch(eng, (size_t)(K + N), "decode_linear_residual");
    if (u == NULL) return oj_last_status(eng);
    double *o = u + K;
    const uint16_t *yp = (const uint16_t *)oj__nn_base(y);
    for (int64_t k = 0; k < K; k++) u[k] = ld16(dt, yp, k);
    row_times(dt, u, w, b, o);
    uint16_t *xp = (uint16_t *)oj__nn_base(x);
    for (int64_t n = 0; n < N; n++) xp[n] = st16(dt, ld16(dt, xp, n) + round_to(dt, o[n]));
    free(u);
    return OJ_OK;
}

oj_status oj_cpu_decode_argmax_advance(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                       oj_tensor *pos) {
    (void)eng;
    const int64_t V = oj_numel(logits);
    const char *base = oj__nn_base(logits);
    int64_t best = 0;
    double bv = 0.0;
    for (int64_t i = 0; i < V; i++) {
        double v;
        oj__nn_load(base + i * (int64_t)oj_dtype_size(logits->dtype), logits->dtype, 1, 1, &v);
        if (i == 0) {
            bv = v;
            continue;
        }
        if (isnan(bv)) break; /* the first NaN */
        if (isnan(v) || v > bv) {
            best = i;
            bv = v;
        }
    }
    *(int64_t *)oj__nn_base(tok) = best;
    *(int64_t *)oj__nn_base(pos) += 1;
    return OJ_OK;
}

oj_status oj_cpu_decode_embed_mask(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                                   const oj_tensor *wpe, const oj_tensor *tok,
                                   const oj_tensor *pos, oj_tensor *mask) {
    (void)eng;
    const int64_t V = wte->shape[0], P = wpe->shape[0], C = wte->shape[1];
    const int64_t S = oj_numel(mask), es = (int64_t)oj_dtype_size(x->dtype);
    const int64_t t = *(const int64_t *)oj__nn_base(tok), p = *(const int64_t *)oj__nn_base(pos);
    const bool ok = t >= 0 && t < V && p >= 0 && p < P;
    double *a = oj__nn_scratch(eng, 2 * C, "decode_embed_mask");
    if (a == NULL) return oj_last_status(eng);
    if (ok) {
        oj__nn_load(oj__nn_base(wte) + t * C * es, wte->dtype, C, 1, a);
        oj__nn_load(oj__nn_base(wpe) + p * C * es, wpe->dtype, C, 1, a + C);
    }
    for (int64_t c = 0; c < C; c++) /* a float add: binary's bits */
        a[c] = ok ? (double)((float)a[c] + (float)a[C + c]) : NAN;
    oj__nn_store(oj__nn_base(x), x->dtype, C, a);
    bool *m = (bool *)oj__nn_base(mask);
    for (int64_t j = 0; j < S; j++) m[j] = j <= p;
    free(a);
    return OJ_OK;
}

/* The host sampler itself (src/infer/sample.c) on the logits and the
 * history {i : seen[i] != 0}: the reference the device sampler equals. */
oj_status oj_cpu_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                               oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *kept,
                               const oj__decode_sampler *s) {
    const int64_t V = oj_numel(logits);
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t *hist = seen ? malloc((size_t)V * sizeof *hist) : NULL;
    double *v = oj__nn_scratch(eng, V, "decode_sample");
    if (lg == NULL || (seen && hist == NULL) || v == NULL) {
        const bool scratch = v != NULL; /* else its error is recorded */
        free(lg);
        free(hist);
        free(v);
        return scratch ? oj_set_error(eng, OJ_ERR_CAPACITY, "decode_sample: out of host memory")
                       : oj_last_status(eng);
    }
    oj__nn_load(oj__nn_base(logits), logits->dtype, V, 1, v);
    for (int64_t i = 0; i < V; i++) lg[i] = (float)v[i]; /* exact: f32/bf16/f16 values */
    free(v);
    int64_t n = 0;
    uint8_t *sp = seen ? (uint8_t *)oj__nn_base(seen) : NULL;
    for (int64_t i = 0; sp && i < V; i++)
        if (sp[i]) hist[n++] = (int32_t)i;
    int64_t *st = (int64_t *)oj__nn_base(step);
    oj_sampler_config c = oj_sampler_config_default();
    c.temperature = s->temperature;
    c.top_k = s->top_k;
    c.top_p = s->top_p;
    c.repetition_penalty = s->repetition_penalty;
    const int32_t t = oj_sample_logits(lg, V, &c, hist, n, oj_sample_uniform(s->seed, s->seq, *st));
    free(lg);
    free(hist);
    *(int64_t *)oj__nn_base(tok) = t;
    if (sp && t >= 0) sp[t] = 1;
    *st += 1;
    if (pos) {
        const int64_t p = *(int64_t *)oj__nn_base(pos) += 1;
        if (kept && p >= 0 && p < oj_numel(kept)) ((int64_t *)oj__nn_base(kept))[p] = t;
    }
    return OJ_OK;
}

oj_status oj_cpu_decode_norm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  const oj_tensor *nw, const oj_tensor *nb, double eps,
                                  const oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                  oj_tensor *step, oj_tensor *hist,
                                  const struct oj__decode_sampler *s) {
    const oj_dtype dt = out->dtype;
    const int64_t N = w->shape[0], K = w->shape[1], ldw = w->stride[0];
    double *u = oj__nn_scratch(eng, (size_t)K, "decode_norm_head");
    if (u == NULL) return oj_last_status(eng);
    norm_row(dt, x, nw, nb, eps, K, u);
    const uint16_t *wp = (const uint16_t *)oj__nn_base(w);
    uint16_t *op = (uint16_t *)oj__nn_base(out);
    for (int64_t n = 0; n < N; n++) {
        double v = 0.0;
        for (int64_t k = 0; k < K; k++) v += u[k] * ld16(dt, wp, n * ldw + k);
        op[n] = st16(dt, v);
    }
    free(u);
    if (s) return oj_cpu_decode_sample(eng, tok, out, pos, NULL, step, hist, s);
    if (tok == NULL) return OJ_OK;
    oj_status st = oj_cpu_decode_argmax_advance(eng, tok, out, pos);
    const int64_t q = *(const int64_t *)oj__nn_base(pos);
    if (st == OJ_OK && hist && q >= 0 && q < oj_numel(hist))
        ((int64_t *)oj__nn_base(hist))[q] = *(const int64_t *)oj__nn_base(tok);
    return st;
}
