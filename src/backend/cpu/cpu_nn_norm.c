/* CPU layer norm (Ba et al. 2016) and RMS norm (Zhang & Sennrich 2019) over
 * the last dim, fused forward and backward.
 * - f32 (x, out, weight, bias and statistics f32): rows in parallel, each
 *   row's sums in f32 on the engine's SIMD level (cpu_simd.h); weight/bias
 *   gradients in a second pass, in parallel over column blocks, each column
 *   summed over rows in index order in double, as the reference path does.
 * - other dtypes: one row at a time in double; weight/bias gradients sum
 *   over rows in index order.
 * Either way every value is computed by one task in a fixed order, so
 * results do not depend on the thread count.
 * An f32 row whose float sums are not finite (finite values whose sum of
 * squares passes FLT_MAX: |x| from about 1.8e19) is redone in double,
 * statistics, output and gradient (oj_cpu_norm_stats_f32): the result is
 * right for every finite row, other rows keep the float path's bits, and
 * the choice depends on the row only, so it is the same at any thread
 * count. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_simd.h"

/* ---------------------------------------------------------------- f32 */

static bool f32_or_null(const oj_tensor *t) { return t == NULL || t->dtype == OJ_F32; }
static bool is_low(oj_dtype dt) { return dt == OJ_BF16 || dt == OJ_F16; }
/* An f32-path output or gradient: f32, or bf16/f16 (rounded once from f32). */
static bool f32_or_low(const oj_tensor *t) { return t->dtype == OJ_F32 || is_low(t->dtype); }

/* f32 v rounded to bf16/f16 as copy (oj_cast) rounds it. */
static inline uint16_t to_low(float v, oj_dtype dt) {
    return dt == OJ_BF16 ? oj_f32_to_bf16(v) : oj_f32_to_f16(v);
}

static const float *f32p(const oj_tensor *t) {
    return t ? (const float *)oj__nn_base(t) : NULL;
}

typedef struct {
    const oj_simd *sd;
    int64_t N, C;
    double eps;
    bool rms;
    const float *x, *w, *b, *dy, *mean, *rstd;
    float *out, *om, *ors, *dx, *dw, *db;
    double *dwp, *dbp; /* per row block partial gradients (backward) */
    /* forward: outl (not NULL) replaces out, in dtype odt (bf16/f16);
     * backward: dx = dres + dx when dres, then dxl = dx rounded to odt */
    uint16_t *outl, *dxl;
    const float *dres;
    oj_dtype odt;
    /* add_norm: sum = x + r (r f32 rf or bf16 rb) normalised as x */
    const float *rf;
    const uint16_t *rb;
    float *sum;
    /* backward: a bf16/f16 dy (dydt), dy NULL until norm_f32 converts it */
    const uint16_t *dylow;
    oj_dtype dydt;
} norm_ctx;

/* Mean (0 for RMS) and rstd of the f32 row x[0..C): the SIMD float sums,
 * or, where those are not finite, the sums in double (which cannot
 * overflow for finite floats; a row holding inf or NaN gives what the
 * float path gives). Returns false when the double sums were taken: the
 * caller then normalises the row with oj_cpu_norm_apply_d. */
bool oj_cpu_norm_stats_f32(const oj_simd *sd, const float *x, int64_t C, bool rms, double eps,
                           float *m, float *rs) {
    if (rms) {
        float ss = sd->sumsq_dev(x, C, 0.0f);
        *m = 0.0f;
        *rs = (float)(1.0 / sqrt((double)ss / (double)C + eps));
        if (isfinite(ss)) return true;
    } else {
        float mf = sd->sum(x, C) / (float)C;
        float var = sd->sumsq_dev(x, C, mf) / (float)C;
        *m = mf;
        *rs = (float)(1.0 / sqrt((double)var + eps));
        if (isfinite(mf) && isfinite(var)) return true;
    }
    double md = 0.0, ss = 0.0;
    if (!rms) {
        for (int64_t k = 0; k < C; k++) md += (double)x[k];
        md /= (double)C;
    }
    for (int64_t k = 0; k < C; k++) ss += ((double)x[k] - md) * ((double)x[k] - md);
    *m = (float)md;
    *rs = (float)(1.0 / sqrt(ss / (double)C + eps));
    return false;
}

/* y[k] = (x[k] - m) rs w[k] + b[k] in double, rounded once to y's dtype
 * (f32 y, or bf16/f16 yl when y is NULL); w, b NULL: ones, zeros. */
void oj_cpu_norm_apply_d(float *y, uint16_t *yl, oj_dtype ldt, const float *x, int64_t C, float m,
                         float rs, const float *w, const float *b) {
    for (int64_t k = 0; k < C; k++) {
        double v = ((double)x[k] - (double)m) * (double)rs * (w ? (double)w[k] : 1.0) +
                   (b ? (double)b[k] : 0.0);
        if (y) y[k] = (float)v;
        else yl[k] = ldt == OJ_BF16 ? oj_f32_to_bf16((float)v) : oj_f32_to_f16((float)v);
    }
}

/* The norm's dx of one f32 row in double (rms: no mean(g) term):
 * dx = rs (g - mean(g) - xh mean(g xh)), g = dy w, xh = (x - m) rs. For
 * rows whose float sums (norm_bwd_sums) are not finite. */
void oj_cpu_norm_bwd_dx_d(float *dx, const float *x, const float *dy, const float *w, int64_t C,
                          float m, float rs, bool rms) {
    double sg = 0.0, sgx = 0.0, r = (double)rs;
    for (int64_t k = 0; k < C; k++) {
        double g = (double)dy[k] * (w ? (double)w[k] : 1.0);
        sg += g;
        sgx += g * (((double)x[k] - (double)m) * r);
    }
    sg = rms ? 0.0 : sg / (double)C;
    sgx /= (double)C;
    for (int64_t k = 0; k < C; k++) {
        double g = (double)dy[k] * (w ? (double)w[k] : 1.0);
        dx[k] = (float)(r * (g - sg - (((double)x[k] - (double)m) * r) * sgx));
    }
}

static int64_t row_grain(int64_t C) {
    int64_t g = 16384 / (C > 0 ? C : 1);
    return g < 1 ? 1 : g;
}

static void fwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const norm_ctx *c = vc;
    int64_t C = c->C;
    for (int64_t n = begin; n < end; n++) {
        const float *x = c->x + n * C;
        if (c->sum) { /* the row of x + r, as binary's float add, while in cache */
            float *s = c->sum + n * C;
            if (c->rb)
                for (int64_t k = 0; k < C; k++) s[k] = x[k] + oj_bf16_to_f32(c->rb[n * C + k]);
            else
                for (int64_t k = 0; k < C; k++) s[k] = x[k] + c->rf[n * C + k];
            x = s;
        }
        float m, rs;
        if (!oj_cpu_norm_stats_f32(c->sd, x, C, c->rms, c->eps, &m, &rs)) {
            oj_cpu_norm_apply_d(c->outl ? NULL : c->out + n * C, c->outl ? c->outl + n * C : NULL,
                                c->odt, x, C, m, rs, c->w, c->b);
        } else if (c->outl) { /* norm_apply is elementwise: pieces give the same floats */
            float t[256];
            for (int64_t k0 = 0; k0 < C; k0 += 256) {
                int64_t len = C - k0 < 256 ? C - k0 : 256;
                c->sd->norm_apply(t, x + k0, len, m, rs, c->w ? c->w + k0 : NULL,
                                  c->b ? c->b + k0 : NULL);
                for (int64_t k = 0; k < len; k++) c->outl[n * C + k0 + k] = to_low(t[k], c->odt);
            }
        } else {
            c->sd->norm_apply(c->out + n * C, x, C, m, rs, c->w, c->b);
        }
        if (c->om) c->om[n] = m;
        if (c->ors) c->ors[n] = rs;
    }
}

#define OJ_NORM_RB 32 /* rows per block of the weight-gradient partial sums */

/* Row blocks [begin, end) of OJ_NORM_RB rows: dx of each row, and the
 * block's partial weight/bias gradients (in double, rows in order) while
 * the rows are in cache: dwp/dbp row `block`. */
static void bwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const norm_ctx *c = vc;
    int64_t C = c->C;
    for (int64_t blk = begin; blk < end; blk++) {
        double *dwp = c->dwp ? c->dwp + blk * C : NULL, *dbp = c->dbp ? c->dbp + blk * C : NULL;
        if (dwp) memset(dwp, 0, (size_t)C * sizeof(double));
        if (dbp) memset(dbp, 0, (size_t)C * sizeof(double));
        int64_t n1 = (blk + 1) * OJ_NORM_RB < c->N ? (blk + 1) * OJ_NORM_RB : c->N;
        int64_t n0 = blk * OJ_NORM_RB;
        for (int64_t n = n0; c->dx && n < n1; n++) {
            const float *x = c->x + n * C, *dy = c->dy + n * C;
            float m = c->rms ? 0.0f : c->mean[n], rs = c->rstd[n], sg, sgx;
            c->sd->norm_bwd_sums(x, dy, c->w, C, m, rs, &sg, &sgx);
            float *dx = c->dx + n * C;
            if (isfinite(sg) && isfinite(sgx))
                c->sd->norm_bwd_dx(dx, x, dy, c->w, C, m, rs, c->rms ? 0.0f : sg / (float)C,
                                   sgx / (float)C);
            else /* the float sums overflowed: the row in double */
                oj_cpu_norm_bwd_dx_d(dx, x, dy, c->w, C, m, rs, c->rms);
            /* the residual gradient: binary's float add of the stored dx */
            if (c->dres)
                for (int64_t k = 0; k < C; k++) dx[k] = c->dres[n * C + k] + dx[k];
            if (c->dxl)
                for (int64_t k = 0; k < C; k++) c->dxl[n * C + k] = to_low(dx[k], c->odt);
        }
        /* the block's rows, still in cache, into its partial sums */
        if (dwp)
            c->sd->norm_cols(dwp, dbp, c->x + n0 * C, c->dy + n0 * C, C, n1 - n0, C,
                             c->rms ? NULL : c->mean + n0, c->rstd + n0);
    }
}

/* dweight/dbias columns [begin, end): the blocks' partial sums added in
 * block order. */
static void bwd_cols(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const norm_ctx *c = vc;
    int64_t C = c->C, nb = (c->N + OJ_NORM_RB - 1) / OJ_NORM_RB;
    for (int64_t k = begin; k < end; k++) {
        double w = 0.0, b = 0.0;
        for (int64_t blk = 0; blk < nb; blk++) {
            w += c->dwp[blk * C + k];
            if (c->dbp) b += c->dbp[blk * C + k];
        }
        if (c->dw) c->dw[k] = (float)w;
        if (c->db) c->db[k] = (float)b;
    }
}

static oj_status norm_f32_bwd(oj_engine *eng, norm_ctx *c);

/* The f32 path of all four entries: forward when dy and dylow are NULL. Weight and
 * bias gradients are sums over fixed blocks of OJ_NORM_RB rows (each in row
 * order), then over the blocks in order: the bits depend on neither the
 * thread count nor the split (the CUDA backend sums the same way). */
static oj_status norm_f32(oj_engine *eng, norm_ctx *c) {
    c->sd = oj_simd_of(eng);
    if (c->dy == NULL && c->dylow == NULL) {
        oj_cpu_parallel_for(eng, c->N, row_grain(c->C), fwd_rows, c);
        return OJ_OK;
    }
    float *dyf = NULL; /* a bf16/f16 dy as floats (exact) */
    if (c->dylow) {
        size_t n = (size_t)(c->N * c->C);
        dyf = malloc((n ? n : 1) * sizeof(float));
        if (dyf == NULL)
            return oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory for %zu bytes",
                                c->rms ? "rms_norm" : "layer_norm", n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            dyf[i] = c->dydt == OJ_BF16 ? oj_bf16_to_f32(c->dylow[i]) : oj_f16_to_f32(c->dylow[i]);
        c->dy = dyf;
    }
    oj_status st = norm_f32_bwd(eng, c);
    free(dyf);
    return st;
}

static oj_status norm_f32_bwd(oj_engine *eng, norm_ctx *c) {
    int64_t nb = (c->N + OJ_NORM_RB - 1) / OJ_NORM_RB;
    if (c->dw || c->db) {
        size_t per = (size_t)(nb * c->C) * sizeof(double);
        double *ws = oj_cpu_workspace(eng, 2 * per + 64);
        if (ws == NULL)
            return oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory for %zu bytes",
                                c->rms ? "rms_norm" : "layer_norm", 2 * per);
        c->dwp = ws;
        c->dbp = c->db ? ws + nb * c->C : NULL;
    }
    int64_t grain = row_grain(c->C) / OJ_NORM_RB;
    oj_cpu_parallel_for(eng, nb, grain < 1 ? 1 : grain, bwd_rows, c);
    if (c->dw || c->db) oj_cpu_parallel_for(eng, c->C, 64, bwd_cols, c);
    return OJ_OK;
}

/* out (f32, or bf16/f16 written through outl) into c. */
static void set_out(norm_ctx *c, oj_tensor *out) {
    if (out->dtype == OJ_F32) {
        c->out = (float *)oj__nn_base(out);
    } else {
        c->outl = (uint16_t *)oj__nn_base(out);
        c->odt = out->dtype;
    }
}

/* dy (f32, or bf16/f16 converted by norm_f32) into c. */
static void set_dy(norm_ctx *c, const oj_tensor *dy) {
    if (dy->dtype == OJ_F32) {
        c->dy = f32p(dy);
    } else {
        c->dylow = (const uint16_t *)oj__nn_base(dy);
        c->dydt = dy->dtype;
    }
}

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
    if (x->dtype == OJ_F32 && f32_or_low(out) && f32_or_null(weight) &&
        f32_or_null(bias) && f32_or_null(mean) && f32_or_null(rstd)) {
        norm_ctx c = {.N = N, .C = C, .eps = eps, .x = f32p(x), .w = f32p(weight),
                      .b = f32p(bias), .om = mean ? (float *)oj__nn_base(mean) : NULL,
                      .ors = rstd ? (float *)oj__nn_base(rstd) : NULL};
        set_out(&c, out);
        return norm_f32(eng, &c);
    }
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
    if (x->dtype == OJ_F32 && f32_or_low(dy) && mean->dtype == OJ_F32 &&
        rstd->dtype == OJ_F32 && f32_or_null(weight) && f32_or_null(dx) &&
        f32_or_null(dweight) && f32_or_null(dbias)) {
        norm_ctx c = {.N = N, .C = C, .x = f32p(x), .w = f32p(weight),
                      .mean = f32p(mean), .rstd = f32p(rstd),
                      .dx = dx ? (float *)oj__nn_base(dx) : NULL,
                      .dw = dweight ? (float *)oj__nn_base(dweight) : NULL,
                      .db = dbias ? (float *)oj__nn_base(dbias) : NULL};
        set_dy(&c, dy);
        return norm_f32(eng, &c);
    }
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
    if (x->dtype == OJ_F32 && f32_or_low(out) && f32_or_null(weight) && f32_or_null(rstd)) {
        norm_ctx c = {.N = N, .C = C, .eps = eps, .rms = true, .x = f32p(x), .w = f32p(weight),
                      .ors = rstd ? (float *)oj__nn_base(rstd) : NULL};
        set_out(&c, out);
        return norm_f32(eng, &c);
    }
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
    if (x->dtype == OJ_F32 && f32_or_low(dy) && rstd->dtype == OJ_F32 &&
        f32_or_null(weight) && f32_or_null(dx) && f32_or_null(dweight)) {
        norm_ctx c = {.N = N, .C = C, .rms = true, .x = f32p(x), .w = f32p(weight),
                      .rstd = f32p(rstd), .dx = dx ? (float *)oj__nn_base(dx) : NULL,
                      .dw = dweight ? (float *)oj__nn_base(dweight) : NULL};
        set_dy(&c, dy);
        return norm_f32(eng, &c);
    }
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

/* sum = x + r, then the norm of sum. f32 sum, out, weight, bias, stats and
 * contiguous x, r of f32 (or one bf16: the autocast residual stream) run
 * one pass over the rows (fwd_rows, adding each row first: a float add
 * gives binary's bits, whose double sum rounds once to the same float);
 * anything else is the two entries. */
oj_status oj_cpu_add_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *sum,
                                  oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                                  const oj_tensor *r, const oj_tensor *weight,
                                  const oj_tensor *bias, double eps, bool rms) {
    if (x->dtype == OJ_BF16 && r->dtype == OJ_F32) { /* a + b == b + a, bit for bit */
        const oj_tensor *t = x;
        x = r;
        r = t;
    }
    if (sum->dtype == OJ_F32 && f32_or_low(out) && x->dtype == OJ_F32 &&
        (r->dtype == OJ_F32 || r->dtype == OJ_BF16) && oj_is_contiguous(x) &&
        oj_is_contiguous(r) && f32_or_null(weight) && f32_or_null(bias) && f32_or_null(mean) &&
        f32_or_null(rstd)) {
        int64_t N, C;
        rows_of(x, &N, &C);
        norm_ctx c = {.N = N, .C = C, .eps = eps, .rms = rms, .x = f32p(x), .w = f32p(weight),
                      .b = rms ? NULL : f32p(bias),
                      .om = mean && !rms ? (float *)oj__nn_base(mean) : NULL,
                      .ors = rstd ? (float *)oj__nn_base(rstd) : NULL,
                      .sum = (float *)oj__nn_base(sum)};
        set_out(&c, out);
        if (r->dtype == OJ_F32) c.rf = f32p(r);
        else c.rb = (const uint16_t *)oj__nn_base(r);
        return norm_f32(eng, &c);
    }
    oj_status st = oj_cpu_binary(eng, OJ_BIN_ADD, sum, x, r);
    if (st != OJ_OK) return st;
    return rms ? oj_cpu_rms_norm_forward(eng, out, rstd, sum, weight, eps)
               : oj_cpu_layer_norm_forward(eng, out, mean, rstd, sum, weight, bias, eps);
}

/* dx = dres + the norm's dx of dy, dx_low = dx rounded to bf16/f16. The f32
 * path (x, dx, dres f32; dy f32/bf16/f16; f32 stats and weight) adds dres
 * to each row's dx (a float add of the stored value: binary's bits) and
 * rounds it while the row is in cache; anything else runs the norm's
 * backward, binary(OJ_BIN_ADD) and copy, the chain it stands for. */
oj_status oj_cpu_norm_backward_add(oj_engine *eng, oj_tensor *dx, oj_tensor *dx_low,
                                   oj_tensor *dweight, oj_tensor *dbias, const oj_tensor *dy,
                                   const oj_tensor *dres, const oj_tensor *x,
                                   const oj_tensor *mean, const oj_tensor *rstd,
                                   const oj_tensor *weight, bool rms) {
    if (rms) {
        mean = NULL;
        dbias = NULL;
    }
    int64_t N, C;
    rows_of(x, &N, &C);
    if (x->dtype == OJ_F32 && dx->dtype == OJ_F32 && f32_or_low(dy) && f32_or_null(dres) &&
        (dx_low == NULL || is_low(dx_low->dtype)) && f32_or_null(mean) &&
        rstd->dtype == OJ_F32 && f32_or_null(weight) && f32_or_null(dweight) &&
        f32_or_null(dbias)) {
        norm_ctx c = {.N = N, .C = C, .rms = rms, .x = f32p(x), .w = f32p(weight),
                      .mean = f32p(mean), .rstd = f32p(rstd), .dx = (float *)oj__nn_base(dx),
                      .dw = dweight ? (float *)oj__nn_base(dweight) : NULL,
                      .db = dbias ? (float *)oj__nn_base(dbias) : NULL, .dres = f32p(dres),
                      .dxl = dx_low ? (uint16_t *)oj__nn_base(dx_low) : NULL,
                      .odt = dx_low ? dx_low->dtype : OJ_F32};
        set_dy(&c, dy);
        return norm_f32(eng, &c);
    }
    oj_status st = rms ? oj_cpu_rms_norm_backward(eng, dx, dweight, dy, x, rstd, weight)
                       : oj_cpu_layer_norm_backward(eng, dx, dweight, dbias, dy, x, mean, rstd,
                                                    weight);
    if (st == OJ_OK && dres) st = oj_cpu_binary(eng, OJ_BIN_ADD, dx, dres, dx);
    if (st == OJ_OK && dx_low) st = oj_cpu_copy(eng, dx_low, dx);
    return st;
}
