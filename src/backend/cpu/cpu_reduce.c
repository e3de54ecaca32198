/* CPU reductions: one output element at a time, reduced elements visited in
 * index-increasing order with a double accumulator, so results do not
 * depend on threads (EXACT) and are accurate for the reference. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

typedef struct {
    double acc, acc2, m; /* running values (acc2: Welford M2; m: max for lse) */
    int64_t n, arg;
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

oj_status oj_cpu_reduce(oj_engine *eng, oj_reduce_op op, oj_tensor *out, oj_tensor *idx,
                        const oj_tensor *x, uint32_t dim_mask, double p) {
    int rank = x->rank;
    int kept[OJ_MAX_RANK], red[OJ_MAX_RANK], nk = 0, nr = 0;
    for (int d = 0; d < rank; d++) {
        if (dim_mask & (1u << d))
            red[nr++] = d;
        else
            kept[nk++] = d;
    }
    int64_t n_out = 1, n_red = 1;
    for (int i = 0; i < nk; i++) n_out *= x->shape[kept[i]];
    for (int i = 0; i < nr; i++) n_red *= x->shape[red[i]];
    size_t es = oj_dtype_size(x->dtype);
    const char *xb = (const char *)x->storage->data + x->offset;
    char *ob = (char *)out->storage->data + out->offset;
    char *ib = idx ? (char *)idx->storage->data + idx->offset : NULL;
    int64_t ko[OJ_MAX_RANK] = {0};
    for (int64_t o = 0; o < n_out; o++) {
        /* offset of this output's first input element */
        int64_t base = 0;
        for (int i = 0; i < nk; i++) base += ko[i] * x->stride[kept[i]];
        red_state s;
        red_init(op, &s);
        int64_t ri[OJ_MAX_RANK] = {0};
        for (int64_t k = 0; k < n_red; k++) {
            int64_t off = base;
            for (int i = 0; i < nr; i++) off += ri[i] * x->stride[red[i]];
            red_step(op, &s, oj__load(xb + off * (int64_t)es, x->dtype), k);
            for (int i = nr - 1; i >= 0; i--) {
                if (++ri[i] < x->shape[red[i]]) break;
                ri[i] = 0;
            }
        }
        double v = red_final(op, &s, p);
        oj__store(ob + o * (int64_t)oj_dtype_size(out->dtype), out->dtype, v);
        if (ib) oj__store(ib + o * 8, OJ_I64, (double)(s.arg < 0 ? 0 : s.arg));
        for (int i = nk - 1; i >= 0; i--) {
            if (++ko[i] < x->shape[kept[i]]) break;
            ko[i] = 0;
        }
    }
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
