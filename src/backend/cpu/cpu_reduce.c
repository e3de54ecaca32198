/* CPU reductions: every output element is accumulated in double over its
 * reduced elements in index-increasing order, by one task, so results do
 * not depend on threads (EXACT) and are accurate for the reference.
 * Integer inputs to sum, prod, max/min and argmax/argmin are accumulated
 * and compared in int64 instead (exact; sum and prod wrap modulo 2^64, as
 * torch's int64 arithmetic).
 *
 * Fast path (sum, mean, L1/L2 norms of a contiguous f32/f64 tensor whose
 * reduced dims form one block, x viewed as [K1, R, K2]): outputs are split
 * over threads; with K2 > 1 each task walks the R rows once, adding a row
 * segment of K2 columns to K2 accumulators (vectorised across outputs, each
 * output still summed in index order); with K2 == 1 four outputs are summed
 * side by side. Otherwise one output at a time, still in parallel. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_simd.h"

typedef struct {
    double acc, acc2, m; /* running values (acc2: Welford M2; m: max for lse) */
    int64_t n, arg;
    int64_t iacc; /* integer inputs (red_is_int): running sum, product or extremum */
} red_state;

static void red_init(oj_reduce_op op, red_state *s) {
    memset(s, 0, sizeof *s);
    switch (op) {
    case OJ_RED_PROD: s->acc = 1.0; break;
    case OJ_RED_MAX: case OJ_RED_ARGMAX: s->acc = -INFINITY; s->arg = -1; break;
    case OJ_RED_MIN: case OJ_RED_ARGMIN: s->acc = INFINITY; s->arg = -1; break;
    case OJ_RED_LOGSUMEXP: s->m = -INFINITY; break;
    case OJ_RED_ALL: s->acc = 1.0; break;
    default: break;
    }
}

static void red_step(oj_reduce_op op, red_state *s, double v, int64_t k) {
    switch (op) {
    case OJ_RED_SUM: case OJ_RED_MEAN: s->acc += v; break;
    case OJ_RED_PROD: s->acc *= v; break;
    case OJ_RED_MAX: case OJ_RED_ARGMAX:
        if (isnan(s->acc)) break;
        if (isnan(v) || v > s->acc || s->arg < 0) { s->acc = v; s->arg = k; }
        break;
    case OJ_RED_MIN: case OJ_RED_ARGMIN:
        if (isnan(s->acc)) break;
        if (isnan(v) || v < s->acc || s->arg < 0) { s->acc = v; s->arg = k; }
        break;
    case OJ_RED_VAR: { /* Welford */
        double d = v - s->acc;
        s->acc += d / (double)(s->n + 1);
        s->acc2 += d * (v - s->acc);
        break;
    }
    case OJ_RED_LOGSUMEXP: /* online: sum exp(v - m) */
        if (v > s->m) {
            s->acc = s->acc * exp(s->m - v) + 1.0;
            s->m = v;
        } else if (isfinite(v) || v == INFINITY) {
            s->acc += exp(v - s->m);
        } else if (isnan(v)) {
            s->m = NAN;
        }
        break;
    case OJ_RED_NORM_L1: s->acc += fabs(v); break;
    case OJ_RED_NORM_L2: s->acc += v * v; break;
    case OJ_RED_NORM_INF:
        if (isnan(v) || fabs(v) > s->acc) s->acc = isnan(v) ? NAN : fabs(v);
        break;
    case OJ_RED_ANY: if (v != 0.0) s->acc = 1.0; break;
    case OJ_RED_ALL: if (v == 0.0) s->acc = 0.0; break;
    default: break;
    }
    s->n++;
}

static double red_final(oj_reduce_op op, const red_state *s, double p) {
    switch (op) {
    case OJ_RED_MEAN: return s->n ? s->acc / (double)s->n : NAN;
    case OJ_RED_VAR: { /* as torch: M2 / max(0, N - correction), so 0/0 is NaN */
        double den = (double)s->n - p;
        return s->acc2 / (den > 0 ? den : 0.0);
    }
    case OJ_RED_LOGSUMEXP:
        if (isnan(s->m)) return NAN;
        if (s->m == -INFINITY) return -INFINITY;
        if (s->m == INFINITY) return INFINITY;
        return s->m + log(s->acc);
    case OJ_RED_NORM_L2: return sqrt(s->acc);
    case OJ_RED_ARGMAX: case OJ_RED_ARGMIN: return (double)(s->arg < 0 ? 0 : s->arg);
    default: return s->acc;
    }
}

/* Integer sum/prod/max/min/argmax/argmin: exact in int64. */
static bool red_is_int(oj_reduce_op op, oj_dtype xdt) {
    if (oj_dtype_is_float(xdt)) return false;
    switch (op) {
    case OJ_RED_SUM: case OJ_RED_PROD: case OJ_RED_MAX: case OJ_RED_MIN: case OJ_RED_ARGMAX:
    case OJ_RED_ARGMIN: return true;
    default: return false;
    }
}

static void ired_init(oj_reduce_op op, red_state *s) {
    memset(s, 0, sizeof *s);
    s->iacc = op == OJ_RED_PROD ? 1 : 0;
    s->arg = -1;
}

static void ired_step(oj_reduce_op op, red_state *s, int64_t v, int64_t k) {
    switch (op) {
    case OJ_RED_SUM: s->iacc = (int64_t)((uint64_t)s->iacc + (uint64_t)v); break; /* wraps */
    case OJ_RED_PROD: s->iacc = (int64_t)((uint64_t)s->iacc * (uint64_t)v); break;
    case OJ_RED_MAX: case OJ_RED_ARGMAX: /* first index among ties, as the float path */
        if (s->arg < 0 || v > s->iacc) { s->iacc = v; s->arg = k; }
        break;
    default: /* MIN, ARGMIN */
        if (s->arg < 0 || v < s->iacc) { s->iacc = v; s->arg = k; }
        break;
    }
}

/* ---------------------------------------------------------------- fast path */

typedef struct {
    const oj_simd *sd;
    oj_reduce_op op;
    int64_t K1, R, K2;
    const char *x;
    oj_dtype xdt;
    char *out;
    oj_dtype odt;
    int64_t cols; /* column block width (any split gives the same sums) */
} blk_ctx;

static inline double blk_val(oj_reduce_op op, double v) {
    return op == OJ_RED_NORM_L1 ? fabs(v) : op == OJ_RED_NORM_L2 ? v * v : v;
}

static inline double blk_final(const blk_ctx *c, double acc) {
    if (c->op == OJ_RED_MEAN) return c->R ? acc / (double)c->R : NAN;
    if (c->op == OJ_RED_NORM_L2) return sqrt(acc);
    return acc;
}

static inline double blk_load(const blk_ctx *c, int64_t i) {
    return c->xdt == OJ_F32 ? (double)((const float *)c->x)[i] : ((const double *)c->x)[i];
}

#define BLK_COLS 2048 /* accumulators per task along K2, at most */

/* Items: (k1, column block) pairs. */
static void blk_cols(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const blk_ctx *c = vc;
    int64_t cw = c->cols, nb = (c->K2 + cw - 1) / cw;
    double acc[BLK_COLS];
    for (int64_t it = begin; it < end; it++) {
        int64_t k1 = it / nb, c0 = (it % nb) * cw;
        int64_t w = c->K2 - c0 < cw ? c->K2 - c0 : cw;
        for (int64_t k = 0; k < w; k++) acc[k] = 0.0;
        int64_t base = k1 * c->R * c->K2 + c0;
        if (c->xdt == OJ_F32) { /* 8 rows per pass over the accumulators */
            int kind = c->op == OJ_RED_NORM_L1 ? 1 : c->op == OJ_RED_NORM_L2 ? 2 : 0;
            for (int64_t r = 0; r < c->R; r += 8)
                c->sd->acc_cols(acc, (const float *)c->x + base + r * c->K2, c->K2,
                                c->R - r < 8 ? c->R - r : 8, w, kind);
        } else {
            for (int64_t r = 0; r < c->R; r++)
                for (int64_t k = 0; k < w; k++)
                    acc[k] += blk_val(c->op, blk_load(c, base + r * c->K2 + k));
        }
        for (int64_t k = 0; k < w; k++)
            oj__store(c->out + (k1 * c->K2 + c0 + k) * (int64_t)oj_dtype_size(c->odt), c->odt,
                      blk_final(c, acc[k]));
    }
}

/* Items: outputs k1 (K2 == 1), four side by side. */
static void blk_rows(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const blk_ctx *c = vc;
    int64_t R = c->R, es = (int64_t)oj_dtype_size(c->odt);
    int64_t k = begin;
    for (; k + 4 <= end; k += 4) {
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int64_t r = 0; r < R; r++) {
            a0 += blk_val(c->op, blk_load(c, k * R + r));
            a1 += blk_val(c->op, blk_load(c, (k + 1) * R + r));
            a2 += blk_val(c->op, blk_load(c, (k + 2) * R + r));
            a3 += blk_val(c->op, blk_load(c, (k + 3) * R + r));
        }
        oj__store(c->out + k * es, c->odt, blk_final(c, a0));
        oj__store(c->out + (k + 1) * es, c->odt, blk_final(c, a1));
        oj__store(c->out + (k + 2) * es, c->odt, blk_final(c, a2));
        oj__store(c->out + (k + 3) * es, c->odt, blk_final(c, a3));
    }
    for (; k < end; k++) {
        double a = 0;
        for (int64_t r = 0; r < R; r++) a += blk_val(c->op, blk_load(c, k * R + r));
        oj__store(c->out + k * es, c->odt, blk_final(c, a));
    }
}

/* The fast path when it applies (see the top of the file); false if not. */
static bool reduce_block(oj_engine *eng, oj_reduce_op op, oj_tensor *out, oj_tensor *idx,
                         const oj_tensor *x, uint32_t dim_mask) {
    if (idx || (op != OJ_RED_SUM && op != OJ_RED_MEAN && op != OJ_RED_NORM_L1 &&
                op != OJ_RED_NORM_L2))
        return false;
    if ((x->dtype != OJ_F32 && x->dtype != OJ_F64) || !oj_is_contiguous(x)) return false;
    if (!oj_dtype_is_float(out->dtype)) return false;
    int first = -1, last = -1;
    for (int d = 0; d < x->rank; d++)
        if (dim_mask & (1u << d)) {
            if (first < 0) first = d;
            else if (last != d - 1) return false; /* reduced dims not one block */
            last = d;
        }
    if (first < 0) return false;
    blk_ctx c = {oj_simd_of(eng), op, 1, 1, 1, (const char *)x->storage->data + x->offset, x->dtype,
                 (char *)out->storage->data + out->offset, out->dtype, 0};
    for (int d = 0; d < first; d++) c.K1 *= x->shape[d];
    for (int d = first; d <= last; d++) c.R *= x->shape[d];
    for (int d = last + 1; d < x->rank; d++) c.K2 *= x->shape[d];
    if (c.K1 * c.K2 == 0) return true;
    if (c.K2 > 1) {
        /* Wide blocks read long row segments; split K2 only as far as the
         * threads need (each column is summed by one task either way). */
        int64_t t = oj_cpu_threads(eng), per_t = c.K1 >= t ? c.K2 : (c.K2 * c.K1 + t - 1) / t;
        c.cols = per_t < 64 ? 64 : per_t > BLK_COLS ? BLK_COLS : (per_t + 15) / 16 * 16;
        int64_t nb = (c.K2 + c.cols - 1) / c.cols, items = c.K1 * nb;
        int64_t per = c.R * (c.K2 < c.cols ? c.K2 : c.cols);
        int64_t grain = 32768 / (per > 0 ? per : 1);
        oj_cpu_parallel_for(eng, items, grain < 1 ? 1 : grain, blk_cols, &c);
    } else {
        int64_t grain = 4 * (1 + 8192 / (c.R > 0 ? c.R : 1));
        oj_cpu_parallel_for(eng, c.K1, grain, blk_rows, &c);
    }
    return true;
}

/* ---------------------------------------------------------------- general */

typedef struct {
    oj_reduce_op op;
    double p;
    const oj_tensor *x;
    oj_tensor *out, *idx;
    int nk, nr;
    int kept[OJ_MAX_RANK], red[OJ_MAX_RANK];
    int64_t n_red;
} gen_ctx;

/* Outputs [begin, end), each reduced alone in index order. */
static void gen_outputs(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const gen_ctx *c = vc;
    const oj_tensor *x = c->x;
    size_t es = oj_dtype_size(x->dtype), oes = oj_dtype_size(c->out->dtype);
    const char *xb = (const char *)x->storage->data + x->offset;
    char *ob = (char *)c->out->storage->data + c->out->offset;
    char *ib = c->idx ? (char *)c->idx->storage->data + c->idx->offset : NULL;
    bool integer = red_is_int(c->op, x->dtype);
    int64_t ko[OJ_MAX_RANK] = {0};
    int64_t rem = begin;
    for (int i = c->nk - 1; i >= 0; i--) {
        ko[i] = rem % x->shape[c->kept[i]];
        rem /= x->shape[c->kept[i]];
    }
    for (int64_t o = begin; o < end; o++) {
        int64_t base = 0; /* offset of this output's first input element */
        for (int i = 0; i < c->nk; i++) base += ko[i] * x->stride[c->kept[i]];
        red_state s;
        if (integer) ired_init(c->op, &s);
        else red_init(c->op, &s);
        int64_t ri[OJ_MAX_RANK] = {0};
        for (int64_t k = 0; k < c->n_red; k++) {
            int64_t off = base;
            for (int i = 0; i < c->nr; i++) off += ri[i] * x->stride[c->red[i]];
            const char *src = xb + off * (int64_t)es;
            if (integer) ired_step(c->op, &s, oj__load_i64(src, x->dtype), k);
            else red_step(c->op, &s, oj__load(src, x->dtype), k);
            for (int i = c->nr - 1; i >= 0; i--) {
                if (++ri[i] < x->shape[c->red[i]]) break;
                ri[i] = 0;
            }
        }
        char *dst = ob + o * (int64_t)oes;
        if (!integer) oj__store(dst, c->out->dtype, red_final(c->op, &s, c->p));
        else if (c->op == OJ_RED_ARGMAX || c->op == OJ_RED_ARGMIN)
            oj__store_i64(dst, c->out->dtype, s.arg < 0 ? 0 : s.arg);
        else oj__store_i64(dst, c->out->dtype, s.iacc);
        if (ib) oj__store_i64(ib + o * 8, OJ_I64, s.arg < 0 ? 0 : s.arg);
        for (int i = c->nk - 1; i >= 0; i--) {
            if (++ko[i] < x->shape[c->kept[i]]) break;
            ko[i] = 0;
        }
    }
}

oj_status oj_cpu_reduce(oj_engine *eng, oj_reduce_op op, oj_tensor *out, oj_tensor *idx,
                        const oj_tensor *x, uint32_t dim_mask, double p) {
    if (reduce_block(eng, op, out, idx, x, dim_mask)) return OJ_OK;
    gen_ctx c = {.op = op, .p = p, .x = x, .out = out, .idx = idx, .n_red = 1};
    int64_t n_out = 1;
    for (int d = 0; d < x->rank; d++) {
        if (dim_mask & (1u << d)) {
            c.red[c.nr++] = d;
            c.n_red *= x->shape[d];
        } else {
            c.kept[c.nk++] = d;
            n_out *= x->shape[d];
        }
    }
    int64_t grain = 1 + 32768 / (c.n_red > 0 ? c.n_red : 1);
    oj_cpu_parallel_for(eng, n_out, grain, gen_outputs, &c);
    return OJ_OK;
}

oj_status oj_cpu_cumsum(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                        bool reverse) {
    (void)eng;
    int rank = x->rank;
    int64_t len = rank ? x->shape[dim] : 1, xs = rank ? x->stride[dim] : 0;
    int64_t os = 1; /* out is contiguous: stride of dim */
    for (int d = rank - 1; d > dim; d--) os *= x->shape[d];
    int64_t n_out = 1;
    for (int d = 0; d < rank; d++)
        if (d != dim) n_out *= x->shape[d];
    if (len == 0 || n_out == 0) return OJ_OK;
    size_t xes = oj_dtype_size(x->dtype), oes = oj_dtype_size(out->dtype);
    bool integer = !oj_dtype_is_float(out->dtype);
    const char *xb = (const char *)x->storage->data + x->offset;
    char *ob = (char *)out->storage->data + out->offset;
    int64_t idx[OJ_MAX_RANK] = {0};
    for (int64_t o = 0; o < n_out; o++) {
        int64_t xoff = 0, ooff = 0, ostride = 1;
        for (int d = rank - 1; d >= 0; d--) {
            if (d != dim) {
                xoff += idx[d] * x->stride[d];
                ooff += idx[d] * ostride;
            }
            ostride *= x->shape[d];
        }
        double acc = 0.0;
        int64_t iacc = 0;
        for (int64_t j = 0; j < len; j++) {
            int64_t i = reverse ? len - 1 - j : j;
            const char *src = xb + (xoff + i * xs) * (int64_t)xes;
            char *dst = ob + (ooff + i * os) * (int64_t)oes;
            if (integer) {
                iacc = (int64_t)((uint64_t)iacc + (uint64_t)oj__load_i64(src, x->dtype));
                oj__store_i64(dst, out->dtype, iacc);
            } else {
                acc += oj__load(src, x->dtype);
                oj__store(dst, out->dtype, acc);
            }
        }
        for (int d = rank - 1; d >= 0; d--) {
            if (d == dim) continue;
            if (++idx[d] < x->shape[d]) break;
            idx[d] = 0;
        }
    }
    return OJ_OK;
}
