/* CPU softmax / log-softmax over any dim, and the fused cross-entropy
 * (log-softmax + NLL, label smoothing, ignore_index) and NLL kernels. Rows
 * are computed in double with the max subtracted. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"

/* x viewed as [outer, n, inner] around dim. */
static void split_dim(const oj_tensor *x, int dim, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= x->shape[d];
    for (int d = dim + 1; d < x->rank; d++) *inner *= x->shape[d];
    *n = x->shape[dim];
}

/* Load line (o, i) of a contiguous [outer, n, inner] tensor into row. */
static void load_line(const oj_tensor *t, int64_t o, int64_t i, int64_t n, int64_t inner,
                      double *row) {
    size_t es = oj_dtype_size(t->dtype);
    oj__nn_load(oj__nn_base(t) + (size_t)((o * n) * inner + i) * es, t->dtype, n, inner, row);
}

static void store_line(oj_tensor *t, int64_t o, int64_t i, int64_t n, int64_t inner,
                       const double *row) {
    size_t es = oj_dtype_size(t->dtype);
    char *p = oj__nn_base(t) + (size_t)((o * n) * inner + i) * es;
    if (inner == 1) {
        oj__nn_store(p, t->dtype, n, row);
        return;
    }
    for (int64_t k = 0; k < n; k++) oj__nn_store(p + (size_t)(k * inner) * es, t->dtype, 1, row + k);
}

/* Stable logsumexp of row[0..n). -inf for n == 0 or an all -inf row. */
static double row_lse(const double *row, int64_t n) {
    double m = -INFINITY;
    for (int64_t k = 0; k < n; k++)
        if (row[k] > m || isnan(row[k])) m = row[k];
    if (isnan(m)) return NAN;
    if (m == -INFINITY || m == INFINITY) return m;
    double s = 0.0;
    for (int64_t k = 0; k < n; k++) s += exp(row[k] - m);
    return m + log(s);
}

/* Max of an f32 row (NaN is not propagated here; it reaches the sums). */
static float row_max_f32(const float *r, int64_t n) {
    float m = -INFINITY;
    for (int64_t k = 0; k < n; k++) m = r[k] > m ? r[k] : m;
    return m;
}

/* logsumexp of an f32 row: float exponentials, summed in double. */
static double row_lse_f32(const float *r, int64_t n) {
    float m = row_max_f32(r, n);
    if (m == -INFINITY || m == INFINITY) {
        for (int64_t k = 0; k < n; k++)
            if (isnan(r[k])) return NAN;
        return m;
    }
    double s = 0.0;
    for (int64_t k = 0; k < n; k++) s += expf(r[k] - m);
    return (double)m + log(s);
}

oj_status oj_cpu_softmax_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                                 bool logsm) {
    int64_t outer, n, inner;
    split_dim(x, dim, &outer, &n, &inner);
    double *row = oj__nn_scratch(eng, n, logsm ? "log_softmax" : "softmax");
    if (row == NULL) return OJ_ERR_CAPACITY;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            load_line(x, o, i, n, inner, row);
            double m = -INFINITY;
            for (int64_t k = 0; k < n; k++)
                if (row[k] > m || isnan(row[k])) m = row[k];
            double s = 0.0;
            for (int64_t k = 0; k < n; k++) s += exp(row[k] - m);
            if (logsm) {
                double l = m + log(s);
                for (int64_t k = 0; k < n; k++) row[k] = row[k] - l;
            } else {
                for (int64_t k = 0; k < n; k++) row[k] = exp(row[k] - m) / s;
            }
            store_line(out, o, i, n, inner, row);
        }
    free(row);
    return OJ_OK;
}

oj_status oj_cpu_softmax_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *y,
                                  const oj_tensor *dy, int dim, bool logsm) {
    int64_t outer, n, inner;
    split_dim(y, dim, &outer, &n, &inner);
    double *yr = oj__nn_scratch(eng, n, logsm ? "log_softmax" : "softmax");
    double *gr = oj__nn_scratch(eng, n, logsm ? "log_softmax" : "softmax");
    if (yr == NULL || gr == NULL) {
        free(yr);
        free(gr);
        return OJ_ERR_CAPACITY;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            load_line(y, o, i, n, inner, yr);
            load_line(dy, o, i, n, inner, gr);
            double s = 0.0;
            if (logsm) {
                for (int64_t k = 0; k < n; k++) s += gr[k];
                for (int64_t k = 0; k < n; k++) yr[k] = gr[k] - exp(yr[k]) * s;
            } else {
                for (int64_t k = 0; k < n; k++) s += gr[k] * yr[k];
                for (int64_t k = 0; k < n; k++) yr[k] = yr[k] * (gr[k] - s);
            }
            store_line(dx, o, i, n, inner, yr);
        }
    free(yr);
    free(gr);
    return OJ_OK;
}

/* Check every target: ignore_index or in [0, V). */
static oj_status check_targets(oj_engine *eng, const char *op, const oj_tensor *targets,
                               int64_t V, int64_t ignore_index) {
    const char *tp = oj__nn_base(targets);
    int64_t N = oj_numel(targets);
    for (int64_t n = 0; n < N; n++) {
        int64_t t = oj__nn_index(tp, targets->dtype, n);
        if (t != ignore_index && (t < 0 || t >= V))
            return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                                "%s: target %lld at row %lld is out of range for %lld classes "
                                "(expected 0 <= target < %lld, or ignore_index %lld)",
                                op, (long long)t, (long long)n, (long long)V, (long long)V,
                                (long long)ignore_index);
    }
    return OJ_OK;
}

static void store_stat(oj_tensor *t, int64_t n, double v) {
    oj__nn_store(oj__nn_base(t) + (size_t)n * oj_dtype_size(t->dtype), t->dtype, 1, &v);
}

/* dloss[n] for a 1-D tensor with any stride. */
static double dloss_at(const oj_tensor *g, int64_t n) {
    int64_t s = g->rank ? g->stride[0] : 0;
    return oj__nn_get(oj__nn_base(g), g->dtype, n * s);
}

// logits (N,V), targets (N) -> loss (N), lse (N)
oj_status oj_cpu_cross_entropy_forward(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                       const oj_tensor *logits, const oj_tensor *targets,
                                       int64_t ignore_index, double label_smoothing,
                                       int64_t *n_valid) {
    int64_t N = logits->shape[0], V = logits->shape[1];
    oj_status st = check_targets(eng, "cross_entropy", targets, V, ignore_index);
    if (st != OJ_OK) return st;
    double *row = oj__nn_scratch(eng, V, "cross_entropy");
    if (row == NULL) return OJ_ERR_CAPACITY;
    size_t es = oj_dtype_size(logits->dtype);
    const char *tp = oj__nn_base(targets);
    int64_t valid = 0;
    for (int64_t n = 0; n < N; n++) {
        if (logits->dtype == OJ_F32) { /* f32 fast path: expf, sums in double */
            const float *r = (const float *)oj__nn_base(logits) + n * V;
            double l = row_lse_f32(r, V);
            if (lse) store_stat(lse, n, l);
            int64_t t = oj__nn_index(tp, targets->dtype, n);
            double li = 0.0;
            if (t != ignore_index) {
                valid++;
                li = (1.0 - label_smoothing) * (l - (double)r[t]);
                if (label_smoothing != 0.0) {
                    double sx = 0.0;
                    for (int64_t k = 0; k < V; k++) sx += (double)r[k];
                    li += label_smoothing * (l - sx / (double)V);
                }
            }
            store_stat(loss, n, li);
            continue;
        }
        oj__nn_load(oj__nn_base(logits) + (size_t)(n * V) * es, logits->dtype, V, 1, row);
        double l = row_lse(row, V);
        if (lse) store_stat(lse, n, l);
        int64_t t = oj__nn_index(tp, targets->dtype, n);
        double li = 0.0;
        if (t != ignore_index) {
            valid++;
            li = (1.0 - label_smoothing) * (l - row[t]);
            if (label_smoothing != 0.0) {
                double s = 0.0;
                for (int64_t k = 0; k < V; k++) s += row[k];
                li += label_smoothing * (l - s / (double)V);
            }
        }
        store_stat(loss, n, li);
    }
    free(row);
    *n_valid = valid;
    return OJ_OK;
}

// logits (N,V), targets (N), lse (N), dloss (N) -> dlogits (N,V)
oj_status oj_cpu_cross_entropy_backward(oj_engine *eng, oj_tensor *dlogits,
                                        const oj_tensor *logits, const oj_tensor *targets,
                                        const oj_tensor *lse, const oj_tensor *dloss,
                                        double scale, int64_t ignore_index,
                                        double label_smoothing) {
    int64_t N = logits->shape[0], V = logits->shape[1];
    double *row = oj__nn_scratch(eng, V, "cross_entropy");
    if (row == NULL) return OJ_ERR_CAPACITY;
    size_t es = oj_dtype_size(logits->dtype), ds = oj_dtype_size(dlogits->dtype);
    const char *tp = oj__nn_base(targets);
    double off = label_smoothing / (double)V;
    for (int64_t n = 0; n < N; n++) {
        int64_t t = oj__nn_index(tp, targets->dtype, n);
        if (t != ignore_index && logits->dtype == OJ_F32 && dlogits->dtype == OJ_F32) {
            /* f32 fast path: p = expf(x - m) * exp(m - lse), m the row max */
            const float *r = (const float *)oj__nn_base(logits) + n * V;
            float *d = (float *)oj__nn_base(dlogits) + n * V;
            float m = row_max_f32(r, V);
            double l = oj__nn_get(oj__nn_base(lse), lse->dtype, n);
            double g = scale * dloss_at(dloss, n);
            float gs = (float)(g * exp((double)m - l)), go = (float)(g * off);
            for (int64_t k = 0; k < V; k++) d[k] = gs * expf(r[k] - m) - go;
            d[t] = (float)((double)d[t] - g * (1.0 - label_smoothing));
            continue;
        }
        if (t == ignore_index) {
            memset(row, 0, (size_t)V * sizeof(double));
        } else {
            oj__nn_load(oj__nn_base(logits) + (size_t)(n * V) * es, logits->dtype, V, 1, row);
            double l = oj__nn_get(oj__nn_base(lse), lse->dtype, n);
            double g = scale * dloss_at(dloss, n);
            for (int64_t k = 0; k < V; k++) row[k] = g * (exp(row[k] - l) - off);
            row[t] -= g * (1.0 - label_smoothing);
        }
        oj__nn_store(oj__nn_base(dlogits) + (size_t)(n * V) * ds, dlogits->dtype, V, row);
    }
    free(row);
    return OJ_OK;
}

// logp (N,V), targets (N) -> loss (N)
oj_status oj_cpu_nll_loss_forward(oj_engine *eng, oj_tensor *loss, const oj_tensor *logp,
                                  const oj_tensor *targets, int64_t ignore_index,
                                  int64_t *n_valid) {
    int64_t N = logp->shape[0], V = logp->shape[1];
    oj_status st = check_targets(eng, "nll_loss", targets, V, ignore_index);
    if (st != OJ_OK) return st;
    const char *tp = oj__nn_base(targets);
    int64_t valid = 0;
    for (int64_t n = 0; n < N; n++) {
        int64_t t = oj__nn_index(tp, targets->dtype, n);
        double li = 0.0;
        if (t != ignore_index) {
            valid++;
            li = -oj__nn_get(oj__nn_base(logp), logp->dtype, n * V + t);
        }
        store_stat(loss, n, li);
    }
    *n_valid = valid;
    return OJ_OK;
}

// targets (N), dloss (N) -> dlogp (N,V)
oj_status oj_cpu_nll_loss_backward(oj_engine *eng, oj_tensor *dlogp, const oj_tensor *targets,
                                   const oj_tensor *dloss, double scale, int64_t ignore_index) {
    (void)eng;
    int64_t N = dlogp->shape[0], V = dlogp->shape[1];
    size_t ds = oj_dtype_size(dlogp->dtype);
    memset(oj__nn_base(dlogp), 0, (size_t)(N * V) * ds);
    const char *tp = oj__nn_base(targets);
    for (int64_t n = 0; n < N; n++) {
        int64_t t = oj__nn_index(tp, targets->dtype, n);
        if (t == ignore_index) continue;
        double g = -scale * dloss_at(dloss, n);
        oj__nn_store(oj__nn_base(dlogp) + (size_t)(n * V + t) * ds, dlogp->dtype, 1, &g);
    }
    return OJ_OK;
}
