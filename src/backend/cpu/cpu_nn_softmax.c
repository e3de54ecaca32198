/* CPU softmax / log-softmax over any dim, and the fused cross-entropy
 * (log-softmax + NLL, label smoothing, ignore_index) and NLL kernels.
 * f32 rows over a contiguous last dim run in parallel on the engine's SIMD
 * level (max, exp and sums in f32, cpu_simd.h); everything else is
 * computed in double with the max subtracted. Each row is one task's work
 * in a fixed order, so results do not depend on the thread count. A row
 * whose upstream gradient is all zero gets exactly 0 in backward, even a
 * row of all -inf (whose output is NaN). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_simd.h"

static int64_t rows_grain(int64_t n) {
    int64_t g = 16384 / (n > 0 ? n : 1);
    return g < 1 ? 1 : g;
}

/* ---------------------------------------------------------------- f32 rows */

typedef struct {
    oj_engine *eng;
    const oj_simd *sd;
    int64_t n; /* row length */
    bool log;
    const float *x, *y, *dy;
    float *out;
} sm_ctx;

static void sm_fwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const sm_ctx *c = vc;
    int64_t n = c->n;
    for (int64_t r = begin; r < end; r++) {
        const float *x = c->x + r * n;
        float *o = c->out + r * n;
        float m = c->sd->max(x, n);
        memcpy(o, x, (size_t)n * sizeof(float));
        float s = c->sd->expsum(o, n, m);
        if (c->log) { /* x - lse rounded once: lse kept in double */
            double l = (double)m + log((double)s);
            for (int64_t k = 0; k < n; k++) o[k] = (float)((double)x[k] - l);
        } else {
            c->sd->scale(o, n, 1.0f / s);
        }
    }
}

/* Is every one of g[0..n) zero? (A row with such an upstream gradient gets
 * exactly 0, even where y is NaN: a row of all -inf; see oj_softmax.) */
static bool all_zero_f(const float *g, int64_t n) {
    for (int64_t k = 0; k < n; k++)
        if (g[k] != 0.0f) return false;
    return true;
}

static void sm_bwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const sm_ctx *c = vc;
    int64_t n = c->n;
    for (int64_t r = begin; r < end; r++) {
        const float *y = c->y + r * n, *dy = c->dy + r * n;
        if (all_zero_f(dy, n)) {
            memset(c->out + r * n, 0, (size_t)n * sizeof(float));
            continue;
        }
        float s = c->log ? c->sd->sum(dy, n) : c->sd->dot(dy, y, n);
        c->sd->softmax_bwd(c->out + r * n, y, dy, n, s, c->log);
    }
}

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

oj_status oj_cpu_softmax_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                                 bool logsm) {
    int64_t outer, n, inner;
    split_dim(x, dim, &outer, &n, &inner);
    if (x->dtype == OJ_F32 && out->dtype == OJ_F32 && inner == 1 && n > 0) {
        sm_ctx c = {eng, oj_simd_of(eng), n, logsm, (const float *)oj__nn_base(x), NULL, NULL,
                    (float *)oj__nn_base(out)};
        oj_cpu_parallel_for(eng, outer, rows_grain(n), sm_fwd_rows, &c);
        return OJ_OK;
    }
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
    if (y->dtype == OJ_F32 && dy->dtype == OJ_F32 && dx->dtype == OJ_F32 && inner == 1 && n > 0) {
        sm_ctx c = {eng, oj_simd_of(eng), n, logsm, NULL, (const float *)oj__nn_base(y),
                    (const float *)oj__nn_base(dy), (float *)oj__nn_base(dx)};
        oj_cpu_parallel_for(eng, outer, rows_grain(n), sm_bwd_rows, &c);
        return OJ_OK;
    }
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
            bool zero = true; /* an all-zero upstream row gives exactly 0 */
            for (int64_t k = 0; k < n && zero; k++) zero = gr[k] == 0.0;
            double s = 0.0;
            if (zero) {
                for (int64_t k = 0; k < n; k++) yr[k] = 0.0;
            } else if (logsm) {
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

/* ---------------------------------------------------------------- f32 cross-entropy */

typedef struct {
    oj_engine *eng;
    const oj_simd *sd;
    int64_t V, ignore;
    double eps, scale;
    const float *logits;
    const oj_tensor *targets, *dloss, *lse_in;
    oj_tensor *loss, *lse;
    float *dlogits;
} ce_ctx;

/* logsumexp of an f32 row (tmp: V floats of scratch). */
static double ce_lse(const oj_simd *sd, const float *r, int64_t V, float *tmp) {
    float m = sd->max(r, V);
    if (isnan(m) || m == INFINITY || m == -INFINITY) return m;
    memcpy(tmp, r, (size_t)V * sizeof(float));
    return (double)m + log((double)sd->expsum(tmp, V, m));
}

/* Forward of f32 row n: lse[n] (when lse), loss[n]. */
static void ce_fwd_row(const ce_ctx *c, int64_t n, float *tmp) {
    int64_t V = c->V;
    const float *r = c->logits + n * V;
    double l = ce_lse(c->sd, r, V, tmp);
    if (c->lse) store_stat(c->lse, n, l);
    int64_t t = oj__nn_index(oj__nn_base(c->targets), c->targets->dtype, n);
    double li = 0.0;
    if (t != c->ignore) {
        li = (1.0 - c->eps) * (l - (double)r[t]);
        if (c->eps != 0.0) li += c->eps * (l - (double)c->sd->sum(r, V) / (double)V);
    }
    store_stat(c->loss, n, li);
}

/* Gradient of f32 row n: d = scale dloss[n] (softmax(row) - (1 - eps)
 * onehot(t) - eps / V), the softmax rebuilt as exp(x - m) exp(m - lse), m
 * the row max, lse as stored in lse_in. The row of dlogits may be the row
 * of logits itself (in place: every value is read before it is written). */
static void ce_bwd_row(const ce_ctx *c, int64_t n) {
    int64_t V = c->V;
    int64_t t = oj__nn_index(oj__nn_base(c->targets), c->targets->dtype, n);
    float *d = c->dlogits + n * V;
    if (t == c->ignore) {
        memset(d, 0, (size_t)V * sizeof(float));
        return;
    }
    const float *r = c->logits + n * V;
    float m = c->sd->max(r, V);
    double l = oj__nn_get(oj__nn_base(c->lse_in), c->lse_in->dtype, n);
    double g = c->scale * dloss_at(c->dloss, n);
    float gs = (float)(g * exp((double)m - l)), go = (float)(g * (c->eps / (double)V));
    if (d != r) memcpy(d, r, (size_t)V * sizeof(float));
    c->sd->expsum(d, V, m);
    c->sd->unary(OJ_SF_AFFINE, d, d, V, gs, -go);
    d[t] = (float)((double)d[t] - g * (1.0 - c->eps));
}

static void ce_fwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    const ce_ctx *c = vc;
    float *tmp = oj_cpu_scratch(c->eng, tid, (size_t)c->V * sizeof(float));
    for (int64_t n = begin; n < end; n++) ce_fwd_row(c, n, tmp);
}

static void ce_bwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const ce_ctx *c = vc;
    for (int64_t n = begin; n < end; n++) ce_bwd_row(c, n);
}

/* Both, row by row (the cross_entropy_fused entry): the row's gradient is
 * written after its forward has read it. */
static void ce_fused_rows(void *vc, int64_t begin, int64_t end, int tid) {
    const ce_ctx *c = vc;
    float *tmp = oj_cpu_scratch(c->eng, tid, (size_t)c->V * sizeof(float));
    for (int64_t n = begin; n < end; n++) {
        ce_fwd_row(c, n, tmp);
        ce_bwd_row(c, n);
    }
}

/* ---------------------------------------------------------------- other dtypes (double rows) */

/* Forward of row n (any dtype, loaded into row[V] doubles). */
static void ce_fwd_row_d(const oj_tensor *logits, const oj_tensor *targets, int64_t n,
                         int64_t ignore_index, double label_smoothing, oj_tensor *loss,
                         oj_tensor *lse, double *row) {
    int64_t V = logits->shape[1];
    size_t es = oj_dtype_size(logits->dtype);
    oj__nn_load(oj__nn_base(logits) + (size_t)(n * V) * es, logits->dtype, V, 1, row);
    double l = row_lse(row, V);
    if (lse) store_stat(lse, n, l);
    int64_t t = oj__nn_index(oj__nn_base(targets), targets->dtype, n);
    double li = 0.0;
    if (t != ignore_index) {
        li = (1.0 - label_smoothing) * (l - row[t]);
        if (label_smoothing != 0.0) {
            double s = 0.0;
            for (int64_t k = 0; k < V; k++) s += row[k];
            li += label_smoothing * (l - s / (double)V);
        }
    }
    store_stat(loss, n, li);
}

/* Gradient of row n (any dtypes; dlogits may be logits itself: the row is
 * loaded whole before it is stored). */
static void ce_bwd_row_d(oj_tensor *dlogits, const oj_tensor *logits, const oj_tensor *targets,
                         const oj_tensor *lse, const oj_tensor *dloss, double scale, int64_t n,
                         int64_t ignore_index, double label_smoothing, double *row) {
    int64_t V = logits->shape[1];
    size_t es = oj_dtype_size(logits->dtype), ds = oj_dtype_size(dlogits->dtype);
    int64_t t = oj__nn_index(oj__nn_base(targets), targets->dtype, n);
    if (t == ignore_index) {
        memset(row, 0, (size_t)V * sizeof(double));
    } else {
        oj__nn_load(oj__nn_base(logits) + (size_t)(n * V) * es, logits->dtype, V, 1, row);
        double l = oj__nn_get(oj__nn_base(lse), lse->dtype, n);
        double g = scale * dloss_at(dloss, n), off = label_smoothing / (double)V;
        for (int64_t k = 0; k < V; k++) row[k] = g * (exp(row[k] - l) - off);
        row[t] -= g * (1.0 - label_smoothing);
    }
    oj__nn_store(oj__nn_base(dlogits) + (size_t)(n * V) * ds, dlogits->dtype, V, row);
}

static int64_t count_valid(const oj_tensor *targets, int64_t N, int64_t ignore_index) {
    const char *tp = oj__nn_base(targets);
    int64_t valid = 0;
    for (int64_t n = 0; n < N; n++) valid += oj__nn_index(tp, targets->dtype, n) != ignore_index;
    return valid;
}

/* Every thread's V floats of scratch (ce_lse). */
static oj_status ce_scratch(oj_engine *eng, int64_t V) {
    int nt = oj_cpu_threads(eng);
    for (int t = 0; t < nt; t++)
        if (oj_cpu_scratch(eng, t, (size_t)V * sizeof(float)) == NULL)
            return oj_set_error(eng, OJ_ERR_CAPACITY, "cross_entropy: out of host memory");
    return OJ_OK;
}

// logits (N,V), targets (N) -> loss (N), lse (N)
oj_status oj_cpu_cross_entropy_forward(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                       const oj_tensor *logits, const oj_tensor *targets,
                                       int64_t ignore_index, double label_smoothing,
                                       int64_t *n_valid) {
    int64_t N = logits->shape[0], V = logits->shape[1];
    oj_status st = check_targets(eng, "cross_entropy", targets, V, ignore_index);
    if (st != OJ_OK) return st;
    if (logits->dtype == OJ_F32 && V > 0) {
        if (ce_scratch(eng, V) != OJ_OK) return OJ_ERR_CAPACITY;
        ce_ctx c = {.eng = eng, .sd = oj_simd_of(eng), .V = V, .ignore = ignore_index,
                    .eps = label_smoothing, .logits = (const float *)oj__nn_base(logits),
                    .targets = targets, .loss = loss, .lse = lse};
        oj_cpu_parallel_for(eng, N, rows_grain(V), ce_fwd_rows, &c);
    } else {
        double *row = oj__nn_scratch(eng, V, "cross_entropy");
        if (row == NULL) return OJ_ERR_CAPACITY;
        for (int64_t n = 0; n < N; n++)
            ce_fwd_row_d(logits, targets, n, ignore_index, label_smoothing, loss, lse, row);
        free(row);
    }
    if (n_valid) *n_valid = count_valid(targets, N, ignore_index);
    return OJ_OK;
}

// logits (N,V), targets (N), lse (N), dloss (N) -> dlogits (N,V)
oj_status oj_cpu_cross_entropy_backward(oj_engine *eng, oj_tensor *dlogits,
                                        const oj_tensor *logits, const oj_tensor *targets,
                                        const oj_tensor *lse, const oj_tensor *dloss,
                                        double scale, int64_t ignore_index,
                                        double label_smoothing) {
    int64_t N = logits->shape[0], V = logits->shape[1];
    if (logits->dtype == OJ_F32 && dlogits->dtype == OJ_F32 && V > 0) {
        ce_ctx c = {.eng = eng, .sd = oj_simd_of(eng), .V = V, .ignore = ignore_index,
                    .eps = label_smoothing, .scale = scale,
                    .logits = (const float *)oj__nn_base(logits), .targets = targets,
                    .dloss = dloss, .lse_in = lse, .dlogits = (float *)oj__nn_base(dlogits)};
        oj_cpu_parallel_for(eng, N, rows_grain(V), ce_bwd_rows, &c);
        return OJ_OK;
    }
    double *row = oj__nn_scratch(eng, V, "cross_entropy");
    if (row == NULL) return OJ_ERR_CAPACITY;
    for (int64_t n = 0; n < N; n++)
        ce_bwd_row_d(dlogits, logits, targets, lse, dloss, scale, n, ignore_index,
                     label_smoothing, row);
    free(row);
    return OJ_OK;
}

/* Forward and backward in one pass over the rows: each row's loss and lse
 * as oj_cpu_cross_entropy_forward, then its gradient as
 * oj_cpu_cross_entropy_backward from the stored lse (the same routines, so
 * the same bits). dlogits may be logits itself. Targets are checked
 * first, so an error writes nothing. */
oj_status oj_cpu_cross_entropy_fused(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                     oj_tensor *dlogits, const oj_tensor *logits,
                                     const oj_tensor *targets, const oj_tensor *dloss,
                                     double scale, int64_t ignore_index, double label_smoothing,
                                     int64_t *n_valid) {
    int64_t N = logits->shape[0], V = logits->shape[1];
    if (lse == NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "cross_entropy: the fused entry needs lse (its gradient reads it)");
    oj_status st = check_targets(eng, "cross_entropy", targets, V, ignore_index);
    if (st != OJ_OK) return st;
    if (logits->dtype == OJ_F32 && dlogits->dtype == OJ_F32 && V > 0) {
        if (ce_scratch(eng, V) != OJ_OK) return OJ_ERR_CAPACITY;
        ce_ctx c = {.eng = eng, .sd = oj_simd_of(eng), .V = V, .ignore = ignore_index,
                    .eps = label_smoothing, .scale = scale,
                    .logits = (const float *)oj__nn_base(logits), .targets = targets,
                    .dloss = dloss, .lse_in = lse, .loss = loss, .lse = lse,
                    .dlogits = (float *)oj__nn_base(dlogits)};
        oj_cpu_parallel_for(eng, N, rows_grain(V), ce_fused_rows, &c);
    } else {
        double *row = oj__nn_scratch(eng, V, "cross_entropy");
        if (row == NULL) return OJ_ERR_CAPACITY;
        for (int64_t n = 0; n < N; n++) {
            ce_fwd_row_d(logits, targets, n, ignore_index, label_smoothing, loss, lse, row);
            ce_bwd_row_d(dlogits, logits, targets, lse, dloss, scale, n, ignore_index,
                         label_smoothing, row);
        }
        free(row);
    }
    if (n_valid) *n_valid = count_valid(targets, N, ignore_index);
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
    if (n_valid) *n_valid = valid;
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
