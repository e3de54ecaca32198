/* CPU rotary position embedding, half-split layout (Su et al., "RoFormer:
 * Enhanced Transformer with Rotary Position Embedding", 2021; the layout of
 * GPT-NeoX and Llama). Angles are computed in double; rows of x run in
 * parallel (each row by one task, so the bits do not depend on threads). */
#include <math.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"
#include "backend/cpu/cpu_pool.h"

typedef struct {
    oj_engine *eng;
    const oj_tensor *x;
    oj_tensor *out;
    int64_t T, D;
    const double *cs;
} rot_ctx;

/* Lines [begin, end) of x viewed as [rows * T, D]. */
static void rot_lines(void *vc, int64_t begin, int64_t end, int tid) {
    const rot_ctx *c = vc;
    int64_t T = c->T, D = c->D, half = D / 2;
    double *row = oj_cpu_scratch(c->eng, tid, (size_t)(2 * D) * sizeof(double)), *y = row + D;
    size_t es = oj_dtype_size(c->x->dtype);
    for (int64_t ln = begin; ln < end; ln++) {
        int64_t t = ln % T;
        size_t off = (size_t)(ln * D) * es;
        oj__nn_load(oj__nn_base(c->x) + off, c->x->dtype, D, 1, row);
        const double *cst = c->cs + 2 * t * half;
        for (int64_t i = 0; i < half; i++) {
            double co = cst[2 * i], si = cst[2 * i + 1];
            double x1 = row[i], x2 = row[half + i];
            y[i] = x1 * co - x2 * si;
            y[half + i] = x2 * co + x1 * si;
        }
        oj__nn_store(oj__nn_base(c->out) + off, c->out->dtype, D, y);
    }
}

/* Position of row t: positions[t] when given, else offset + t. */
static int64_t position_of(const oj_tensor *positions, int64_t offset, int64_t t) {
    if (positions == NULL) return offset + t;
    int64_t st = positions->rank ? positions->stride[0] : 0;
    const char *p = oj__nn_base(positions) + t * st * (int64_t)oj_dtype_size(positions->dtype);
    return positions->dtype == OJ_I32 ? *(const int32_t *)p : *(const int64_t *)p;
}

// x (..., T, D), out (..., T, D), positions (T) or NULL
static oj_status rotary(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                        const oj_tensor *positions, int64_t position_offset, double theta,
                        bool inverse) {
    int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1], half = D / 2;
    int64_t rows = T > 0 && D > 0 ? oj_numel(x) / (T * D) : 0;
    /* cos/sin table [T, D/2] */
    double *cs = oj__nn_scratch(eng, 2 * T * half, "rotary_embedding");
    if (cs == NULL) return OJ_ERR_CAPACITY;
    int nt = oj_cpu_threads(eng);
    for (int t = 0; t < nt; t++)
        if (oj_cpu_scratch(eng, t, (size_t)(2 * (D > 0 ? D : 1)) * sizeof(double)) == NULL) {
            free(cs);
            return oj_set_error(eng, OJ_ERR_CAPACITY, "rotary_embedding: out of host memory");
        }
    double sign = inverse ? -1.0 : 1.0;
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = position_of(positions, position_offset, t);
        for (int64_t i = 0; i < half; i++) {
            double freq = pow(theta, -2.0 * (double)i / (double)D);
            double a = (double)pos * freq;
            cs[2 * (t * half + i)] = cos(a);
            cs[2 * (t * half + i) + 1] = sign * sin(a);
        }
    }
    rot_ctx c = {eng, x, out, T, D, cs};
    int64_t grain = 16384 / (D > 0 ? D : 1);
    oj_cpu_parallel_for(eng, rows * T, grain < 1 ? 1 : grain, rot_lines, &c);
    free(cs);
    return OJ_OK;
}

oj_status oj_cpu_rotary_embedding(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  int64_t position_offset, double theta, bool inverse) {
    return rotary(eng, out, x, NULL, position_offset, theta, inverse);
}

oj_status oj_cpu_rotary_embedding_at(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                     const oj_tensor *positions, double theta, bool inverse) {
    return rotary(eng, out, x, positions, 0, theta, inverse);
}

/* ---------------------------------------------------------------- rms_norm_rotary
 * RMS norm over D, then the rotation, one row at a time (rows in parallel,
 * each by one task): the row of x is read through its strides, normalised
 * as cpu_nn_norm.c does (f32 tensors: the engine's SIMD sums, the rest in
 * double), written to out (rounded to out's dtype, as the norm's output is
 * stored), then rotated in place from those stored values as rot_lines
 * does. So out and rstd are the bits of copy + rms_norm_forward +
 * rotary_embedding on this backend. The backward mirrors it: dy's row is
 * rotated by -angle and stored in dy's dtype (scratch), then the norm's
 * dx rule runs on it with x's row. */
#include "backend/cpu/cpu_simd.h"

typedef struct {
    oj_engine *eng;
    const oj_tensor *x, *w, *dy, *rstd_in;
    oj_tensor *out, *rstd, *dx;
    int64_t T, D;
    double eps;
    const double *cs; /* [T, D/2] (cos, sin) of the forward angle */
    bool f32;         /* the norm's f32 path (cpu_nn_norm.c's condition) */
    const oj_simd *sd;
} rnr_ctx;

/* Element offset of row ln (every dim but the last, row-major) of t. */
static int64_t row_offset(const oj_tensor *t, int64_t ln) {
    int64_t off = 0;
    for (int d = t->rank - 2; d >= 0; d--) {
        int64_t n = t->shape[d];
        off += (ln % n) * t->stride[d];
        ln /= n;
    }
    return off;
}

/* Rotate the D values at p (dtype dt, contiguous) by the angles of row t
 * (sign: +1 forward, -1 inverse) into q (dtype qdt), through double:
 * rot_lines's arithmetic. buf: 2 D doubles. */
static void rotate_row(const rnr_ctx *c, const char *p, oj_dtype dt, int64_t stride, char *q,
                       oj_dtype qdt, int64_t t, double sign, double *buf) {
    int64_t D = c->D, half = D / 2;
    double *row = buf, *y = buf + D;
    oj__nn_load(p, dt, D, stride, row);
    const double *cst = c->cs + 2 * t * half;
    for (int64_t i = 0; i < half; i++) {
        double co = cst[2 * i], si = sign * cst[2 * i + 1];
        double x1 = row[i], x2 = row[half + i];
        y[i] = x1 * co - x2 * si;
        y[half + i] = x2 * co + x1 * si;
    }
    oj__nn_store(q, qdt, D, y);
}

static void rnr_fwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    const rnr_ctx *c = vc;
    const int64_t D = c->D, sD = c->x->stride[c->x->rank - 1];
    const size_t es = oj_dtype_size(c->x->dtype), oes = oj_dtype_size(c->out->dtype);
    double *buf = oj_cpu_scratch(c->eng, tid, (size_t)(3 * D) * sizeof(double));
    for (int64_t ln = begin; ln < end; ln++) {
        const char *xr = oj__nn_base(c->x) + row_offset(c->x, ln) * (int64_t)es;
        char *orow = oj__nn_base(c->out) + (size_t)(ln * D) * oes;
        if (c->f32) { /* cpu_nn_norm.c fwd_rows, on the row gathered */
            float *xf = (float *)(buf + 2 * D);
            for (int64_t k = 0; k < D; k++) xf[k] = *(const float *)(xr + k * sD * 4);
            const float *w = c->w ? (const float *)oj__nn_base(c->w) : NULL;
            float m, rs;
            if (oj_cpu_norm_stats_f32(c->sd, xf, D, true, c->eps, &m, &rs))
                c->sd->norm_apply((float *)orow, xf, D, 0.0f, rs, w, NULL);
            else /* float sums overflowed: the row in double, as cpu_nn_norm.c */
                oj_cpu_norm_apply_d((float *)orow, NULL, OJ_F32, xf, D, 0.0f, rs, w, NULL);
            if (c->rstd) ((float *)oj__nn_base(c->rstd))[ln] = rs;
        } else { /* oj_cpu_rms_norm_forward's double path */
            double *row = buf;
            oj__nn_load(xr, c->x->dtype, D, sD, row);
            double ss = 0.0;
            for (int64_t k = 0; k < D; k++) ss += row[k] * row[k];
            double rs = 1.0 / sqrt(ss / (double)D + c->eps);
            for (int64_t k = 0; k < D; k++)
                row[k] = row[k] * rs *
                         (c->w ? oj__nn_get(oj__nn_base(c->w), c->w->dtype, k) : 1.0);
            oj__nn_store(orow, c->out->dtype, D, row);
            if (c->rstd)
                oj__nn_store(oj__nn_base(c->rstd) + (size_t)ln * oj_dtype_size(c->rstd->dtype),
                             c->rstd->dtype, 1, &rs);
        }
        rotate_row(c, orow, c->out->dtype, 1, orow, c->out->dtype, ln % c->T, 1.0, buf);
    }
}

static void rnr_bwd_rows(void *vc, int64_t begin, int64_t end, int tid) {
    const rnr_ctx *c = vc;
    const int64_t D = c->D, sD = c->x->stride[c->x->rank - 1];
    const int64_t gD = c->dy->stride[c->dy->rank - 1];
    const size_t es = oj_dtype_size(c->x->dtype), ges = oj_dtype_size(c->dy->dtype);
    const size_t des = oj_dtype_size(c->dx->dtype);
    /* doubles: 2 D rotation buffer, then D values of g (dy's dtype, <= 8
     * bytes each) and D of x (f32 path) */
    double *buf = oj_cpu_scratch(c->eng, tid, (size_t)(4 * D) * sizeof(double));
    char *g = (char *)(buf + 2 * D);
    for (int64_t ln = begin; ln < end; ln++) {
        const char *xr = oj__nn_base(c->x) + row_offset(c->x, ln) * (int64_t)es;
        const char *gr = oj__nn_base(c->dy) + row_offset(c->dy, ln) * (int64_t)ges;
        char *dr = oj__nn_base(c->dx) + row_offset(c->dx, ln) * (int64_t)des;
        /* the inverse rotation of dy's row, stored in dy's dtype */
        rotate_row(c, gr, c->dy->dtype, gD, g, c->dy->dtype, ln % c->T, -1.0, buf);
        const double rsd = oj__nn_get(oj__nn_base(c->rstd_in), c->rstd_in->dtype, ln);
        if (c->f32) { /* cpu_nn_norm.c bwd_rows */
            float *xf = (float *)(buf + 3 * D);
            for (int64_t k = 0; k < D; k++) xf[k] = *(const float *)(xr + k * sD * 4);
            const float *w = c->w ? (const float *)oj__nn_base(c->w) : NULL;
            float rs = (float)rsd, sg, sgx;
            c->sd->norm_bwd_sums(xf, (const float *)g, w, D, 0.0f, rs, &sg, &sgx);
            if (isfinite(sg) && isfinite(sgx))
                c->sd->norm_bwd_dx((float *)dr, xf, (const float *)g, w, D, 0.0f, rs, 0.0f,
                                   sgx / (float)D);
            else
                oj_cpu_norm_bwd_dx_d((float *)dr, xf, (const float *)g, w, D, 0.0f, rs, true);
        } else { /* oj_cpu_rms_norm_backward's double path */
            double *xr2 = buf, *gd = buf + D; /* the rotation buffer is free again */
            oj__nn_load(xr, c->x->dtype, D, sD, xr2);
            oj__nn_load(g, c->dy->dtype, D, 1, gd);
            double sgx = 0.0;
            for (int64_t k = 0; k < D; k++) {
                double w = c->w ? oj__nn_get(oj__nn_base(c->w), c->w->dtype, k) : 1.0;
                double xh = xr2[k] * rsd;
                sgx += gd[k] * w * xh;
                xr2[k] = xh;
            }
            sgx /= (double)D;
            for (int64_t k = 0; k < D; k++) {
                double w = c->w ? oj__nn_get(oj__nn_base(c->w), c->w->dtype, k) : 1.0;
                xr2[k] = rsd * (gd[k] * w - xr2[k] * sgx);
            }
            oj__nn_store(dr, c->dx->dtype, D, xr2);
        }
    }
}

/* The [T, D/2] (cos, sin) table of positions offset + t (rotary's), and
 * every thread's scratch of `per` doubles; NULL with the error recorded. */
static double *rnr_setup(oj_engine *eng, int64_t T, int64_t D, int64_t offset, double theta,
                         int64_t per) {
    int64_t half = D / 2;
    double *cs = oj__nn_scratch(eng, 2 * T * half, "rms_norm_rotary");
    if (cs == NULL) return NULL;
    int nt = oj_cpu_threads(eng);
    for (int t = 0; t < nt; t++)
        if (oj_cpu_scratch(eng, t, (size_t)(per > 0 ? per : 1) * sizeof(double)) == NULL) {
            free(cs);
            oj_set_error(eng, OJ_ERR_CAPACITY, "rms_norm_rotary: out of host memory");
            return NULL;
        }
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double freq = pow(theta, -2.0 * (double)i / (double)D);
            double a = (double)(offset + t) * freq;
            cs[2 * (t * half + i)] = cos(a);
            cs[2 * (t * half + i) + 1] = sin(a);
        }
    return cs;
}

// x (..., T, D) any strides, weight (D), out (..., T, D), rstd (N)
oj_status oj_cpu_rms_norm_rotary_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                         const oj_tensor *x, const oj_tensor *weight, double eps,
                                         int64_t position_offset, double theta) {
    int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1];
    int64_t N = D > 0 ? oj_numel(x) / D : 0;
    if (N == 0 || D == 0) return OJ_OK;
    double *cs = rnr_setup(eng, T, D, position_offset, theta, 3 * D);
    if (cs == NULL) return oj_last_status(eng);
    rnr_ctx c = {.eng = eng, .x = x, .w = weight, .out = out, .rstd = rstd, .T = T, .D = D,
                 .eps = eps, .cs = cs, .sd = oj_simd_of(eng)};
    c.f32 = x->dtype == OJ_F32 && out->dtype == OJ_F32 && (!weight || weight->dtype == OJ_F32) &&
            (!rstd || rstd->dtype == OJ_F32);
    int64_t grain = 16384 / D;
    oj_cpu_parallel_for(eng, N, grain < 1 ? 1 : grain, rnr_fwd_rows, &c);
    free(cs);
    return OJ_OK;
}

// dy (..., T, D) any strides, x (..., T, D) any strides, rstd (N), weight (D) -> dx
// (..., T, D), its last dim contiguous
oj_status oj_cpu_rms_norm_rotary_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *dy,
                                          const oj_tensor *x, const oj_tensor *rstd,
                                          const oj_tensor *weight, int64_t position_offset,
                                          double theta) {
    int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1];
    int64_t N = D > 0 ? oj_numel(x) / D : 0;
    if (N == 0 || D == 0) return OJ_OK;
    double *cs = rnr_setup(eng, T, D, position_offset, theta, 4 * D);
    if (cs == NULL) return oj_last_status(eng);
    rnr_ctx c = {.eng = eng, .x = x, .w = weight, .dy = dy, .rstd_in = rstd, .dx = dx, .T = T,
                 .D = D, .cs = cs, .sd = oj_simd_of(eng)};
    c.f32 = x->dtype == OJ_F32 && dy->dtype == OJ_F32 && rstd->dtype == OJ_F32 &&
            (!weight || weight->dtype == OJ_F32) && dx->dtype == OJ_F32;
    int64_t grain = 16384 / D;
    oj_cpu_parallel_for(eng, N, grain < 1 ? 1 : grain, rnr_bwd_rows, &c);
    free(cs);
    return OJ_OK;
}
