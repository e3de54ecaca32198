/* CPU layer norm (Ba et al. 2016) and RMS norm (Zhang & Sennrich 2019) over
 * the last dim, fused forward and backward. One row at a time in double;
 * weight/bias gradients sum over rows in index order. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"

/* Row-major [N, C] geometry of x. */
static void rows_of(const oj_tensor *x, int64_t *N, int64_t *C) {
    *C = x->rank ? x->shape[x->rank - 1] : 1;
    *N = *C ? oj_numel(x) / *C : 0;
}

/* Per-channel vector (weight/bias) as doubles, or `fill` when t is NULL. */
static double *channel_vec(oj_engine *eng, const oj_tensor *t, int64_t C, double fill,
                           const char *op) {
    double *v = oj__nn_scratch(eng, C, op);
    if (v == NULL) return NULL;
    if (t) oj__nn_load(oj__nn_base(t), t->dtype, C, 1, v);
    else
        for (int64_t c = 0; c < C; c++) v[c] = fill;
    return v;
}

// x (N,C), weight (C), bias (C), out (N,C), mean (N), rstd (N)
oj_status oj_cpu_layer_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *mean,
                                    oj_tensor *rstd, const oj_tensor *x, const oj_tensor *weight,
                                    const oj_tensor *bias, double eps) {
    int64_t N, C;
    rows_of(x, &N, &C);
    size_t es = oj_dtype_size(x->dtype);
    double *w = channel_vec(eng, weight, C, 1.0, "layer_norm");
    double *b = channel_vec(eng, bias, C, 0.0, "layer_norm");
    double *row = oj__nn_scratch(eng, C, "layer_norm");
    oj_status st = OJ_OK;
    if (w == NULL || b == NULL || row == NULL) {
        st = OJ_ERR_CAPACITY;
        goto done;
    }
    for (int64_t n = 0; n < N; n++) {
        oj__nn_load(oj__nn_base(x) + (size_t)(n * C) * es, x->dtype, C, 1, row);
        double m = 0.0;
        for (int64_t c = 0; c < C; c++) m += row[c];
        m /= (double)C;
        double var = 0.0;
        for (int64_t c = 0; c < C; c++) var += (row[c] - m) * (row[c] - m);
        var /= (double)C;
        double rs = 1.0 / sqrt(var + eps);
        for (int64_t c = 0; c < C; c++) row[c] = (row[c] - m) * rs * w[c] + b[c];
        oj__nn_store(oj__nn_base(out) + (size_t)(n * C) * es, out->dtype, C, row);
        if (mean) oj__nn_store(oj__nn_base(mean) + (size_t)n * oj_dtype_size(mean->dtype), mean->dtype, 1, &m);
        if (rstd) oj__nn_store(oj__nn_base(rstd) + (size_t)n * oj_dtype_size(rstd->dtype), rstd->dtype, 1, &rs);
    }
done:
    free(w);
    free(b);
    free(row);
    return st;
}

// dy (N,C), x (N,C), mean (N), rstd (N), weight (C) -> dx (N,C), dweight (C), dbias (C)
oj_status oj_cpu_layer_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                     oj_tensor *dbias, const oj_tensor *dy, const oj_tensor *x,
                                     const oj_tensor *mean, const oj_tensor *rstd,
                                     const oj_tensor *weight) {
    int64_t N, C;
    rows_of(x, &N, &C);
    size_t es = oj_dtype_size(x->dtype), gs = oj_dtype_size(dy->dtype);
    double *w = channel_vec(eng, weight, C, 1.0, "layer_norm");
    double *xr = oj__nn_scratch(eng, C, "layer_norm");
    double *gr = oj__nn_scratch(eng, C, "layer_norm");
    double *dw = oj__nn_scratch(eng, C, "layer_norm");
    double *db = oj__nn_scratch(eng, C, "layer_norm");
    oj_status st = OJ_OK;
    if (w == NULL || xr == NULL || gr == NULL || dw == NULL || db == NULL) {
        st = OJ_ERR_CAPACITY;
        goto done;
    }
    for (int64_t n = 0; n < N; n++) {
        oj__nn_load(oj__nn_base(x) + (size_t)(n * C) * es, x->dtype, C, 1, xr);
        oj__nn_load(oj__nn_base(dy) + (size_t)(n * C) * gs, dy->dtype, C, 1, gr);
        double m = oj__nn_get(oj__nn_base(mean), mean->dtype, n);
        double rs = oj__nn_get(oj__nn_base(rstd), rstd->dtype, n);
        /* xhat = (x - m) rs; g = dy w;
         * dx = rs (g - mean(g) - xhat mean(g xhat)) */
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < C; c++) {
            double xh = (xr[c] - m) * rs;
            double g = gr[c] * w[c];
            sg += g;
            sgx += g * xh;
            dw[c] += gr[c] * xh;
            db[c] += gr[c];
            xr[c] = xh;
        }
        if (dx) {
            sg /= (double)C;
            sgx /= (double)C;
            for (int64_t c = 0; c < C; c++) xr[c] = rs * (gr[c] * w[c] - sg - xr[c] * sgx);
            oj__nn_store(oj__nn_base(dx) + (size_t)(n * C) * oj_dtype_size(dx->dtype), dx->dtype,
                         C, xr);
        }
    }
    if (dweight) oj__nn_store(oj__nn_base(dweight), dweight->dtype, C, dw);
    if (dbias) oj__nn_store(oj__nn_base(dbias), dbias->dtype, C, db);
done:
    free(w);
    free(xr);
    free(gr);
    free(dw);
    free(db);
    return st;
}

// x (N,C), weight (C), out (N,C), rstd (N)
oj_status oj_cpu_rms_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                  const oj_tensor *x, const oj_tensor *weight, double eps) {
    int64_t N, C;
    rows_of(x, &N, &C);
    size_t es = oj_dtype_size(x->dtype);
    double *w = channel_vec(eng, weight, C, 1.0, "rms_norm");
    double *row = oj__nn_scratch(eng, C, "rms_norm");
    if (w == NULL || row == NULL) {
        free(w);
        free(row);
        return OJ_ERR_CAPACITY;
    }
    for (int64_t n = 0; n < N; n++) {
        oj__nn_load(oj__nn_base(x) + (size_t)(n * C) * es, x->dtype, C, 1, row);
        double ss = 0.0;
        for (int64_t c = 0; c < C; c++) ss += row[c] * row[c];
        double rs = 1.0 / sqrt(ss / (double)C + eps);
        for (int64_t c = 0; c < C; c++) row[c] = row[c] * rs * w[c];
        oj__nn_store(oj__nn_base(out) + (size_t)(n * C) * es, out->dtype, C, row);
        if (rstd) oj__nn_store(oj__nn_base(rstd) + (size_t)n * oj_dtype_size(rstd->dtype), rstd->dtype, 1, &rs);
    }
    free(w);
    free(row);
    return OJ_OK;
}

// dy (N,C), x (N,C), rstd (N), weight (C) -> dx (N,C), dweight (C)
oj_status oj_cpu_rms_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                   const oj_tensor *dy, const oj_tensor *x, const oj_tensor *rstd,
                                   const oj_tensor *weight) {
    int64_t N, C;
    rows_of(x, &N, &C);
    size_t es = oj_dtype_size(x->dtype), gs = oj_dtype_size(dy->dtype);
    double *w = channel_vec(eng, weight, C, 1.0, "rms_norm");
    double *xr = oj__nn_scratch(eng, C, "rms_norm");
    double *gr = oj__nn_scratch(eng, C, "rms_norm");
    double *dw = oj__nn_scratch(eng, C, "rms_norm");
    oj_status st = OJ_OK;
    if (w == NULL || xr == NULL || gr == NULL || dw == NULL) {
        st = OJ_ERR_CAPACITY;
        goto done;
    }
    for (int64_t n = 0; n < N; n++) {
        oj__nn_load(oj__nn_base(x) + (size_t)(n * C) * es, x->dtype, C, 1, xr);
        oj__nn_load(oj__nn_base(dy) + (size_t)(n * C) * gs, dy->dtype, C, 1, gr);
        double rs = oj__nn_get(oj__nn_base(rstd), rstd->dtype, n);
        /* xhat = x rs; g = dy w; dx = rs (g - xhat mean(g xhat)) */
        double sgx = 0.0;
        for (int64_t c = 0; c < C; c++) {
            double xh = xr[c] * rs;
            sgx += gr[c] * w[c] * xh;
            dw[c] += gr[c] * xh;
            xr[c] = xh;
        }
        if (dx) {
            sgx /= (double)C;
            for (int64_t c = 0; c < C; c++) xr[c] = rs * (gr[c] * w[c] - xr[c] * sgx);
            oj__nn_store(oj__nn_base(dx) + (size_t)(n * C) * oj_dtype_size(dx->dtype), dx->dtype,
                         C, xr);
        }
    }
    if (dweight) oj__nn_store(oj__nn_base(dweight), dweight->dtype, C, dw);
done:
    free(w);
    free(xr);
    free(gr);
    free(dw);
    return st;
}
