/* Gradient norms and global-norm clipping (torch.nn.utils.clip_grad_norm_). */
#include <math.h>
#include <stdlib.h>

#include "optim/optim_internal.h"

double oj__optim_tensor_norm(oj_tensor *t) {
    oj_engine *eng = t->eng;
    double v = NAN;
    oj_status st;
    if (eng->backend->sum_squares && (t->dtype == OJ_F32 || t->dtype == OJ_F64) &&
        oj_is_contiguous(t)) {
        st = eng->backend->sum_squares(eng, t, &v); /* the fast path */
        if (st == OJ_OK) return sqrt(v);
    } else { /* any dtype or layout: the generic reduction */
        int64_t ones[OJ_MAX_RANK];
        for (int d = 0; d < t->rank; d++) ones[d] = 1;
        oj_tensor *out = oj__tensor_alloc(eng, t->rank, ones, OJ_F64, "grad_norm");
        if (out == NULL) return NAN;
        uint32_t mask = t->rank ? (uint32_t)((1u << t->rank) - 1u) : 0u;
        st = eng->backend->reduce(eng, OJ_RED_NORM_L2, out, NULL, t, mask, 0.0);
        if (st == OJ_OK) v = oj_item(out);
        oj_release(out);
        if (st == OJ_OK) return v;
    }
    oj_set_error(eng, st, "grad_norm: reduction failed on the %s backend", eng->backend->name);
    return NAN;
}

/* out[i] = L2 norm of ts[i] (0 for NULL entries) for n tensors of eng.
 * On a device every norm is a reduction into one slot of a single f64
 * device buffer, read back once: one host synchronisation for all of them
 * instead of one per tensor. The CPU keeps the sum_squares entry. */
oj_status oj__optim_norms(oj_engine *eng, int64_t n, oj_tensor *const *ts, double *out) {
    if (eng->device.type == OJ_DEVICE_CPU || eng->backend->reduce == NULL ||
        eng->backend->copy_d2h == NULL) {
        for (int64_t i = 0; i < n; i++) {
            out[i] = ts[i] ? oj__optim_tensor_norm(ts[i]) : 0.0;
            if (isnan(out[i]) && oj_last_status(eng) != OJ_OK) return oj_last_status(eng);
        }
        return OJ_OK;
    }
    if (n == 0) return OJ_OK;
    int64_t shape[1] = {n};
    oj_tensor *buf = oj__tensor_alloc(eng, 1, shape, OJ_F64, "grad_norm");
    if (buf == NULL) return oj_last_status(eng);
    oj_status st = OJ_OK;
    for (int64_t i = 0; i < n && st == OJ_OK; i++) {
        oj_tensor *t = ts[i];
        oj_tensor slot = *buf; /* stack view of buf[i] in t's rank, never registered */
        slot.rank = t ? t->rank : 1;
        for (int d = 0; d < slot.rank; d++) slot.shape[d] = 1, slot.stride[d] = 1;
        slot.offset = buf->offset + i * (int64_t)sizeof(double);
        if (t == NULL) {
            st = eng->backend->fill(eng, &slot, 0.0);
            continue;
        }
        uint32_t mask = t->rank ? (uint32_t)((1u << t->rank) - 1u) : 0u;
        st = eng->backend->reduce(eng, OJ_RED_NORM_L2, &slot, NULL, t, mask, 0.0);
    }
    if (st == OJ_OK)
        st = eng->backend->copy_d2h(eng, out, (const char *)buf->storage->data + buf->offset,
                                    (size_t)n * sizeof(double));
    oj_release(buf);
    if (st != OJ_OK)
        return oj_set_error(eng, st, "grad_norm: reduction failed on the %s backend",
                            eng->backend->name);
    return OJ_OK;
}

/* The engine of the first live tensor of params, recording an error for a
 * NULL or released entry. */
static oj_engine *params_engine(int64_t n, oj_tensor *const *params, const char *op) {
    oj_engine *eng = NULL;
    for (int64_t i = 0; i < n && eng == NULL; i++)
        if (params && oj__live(params[i])) eng = params[i]->eng;
    for (int64_t i = 0; eng && i < n; i++)
        if (!oj__live(params[i])) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: parameter %lld is %s", op, (long long)i,
                         params[i] ? "a released tensor" : "NULL");
            return NULL;
        }
    return eng;
}

static double norm_of(int64_t n, oj_tensor *const *params) {
    oj_engine *eng = params[0]->eng;
    oj_tensor **gs = calloc((size_t)n, sizeof *gs);
    double *v = calloc((size_t)n, sizeof *v);
    if (gs == NULL || v == NULL) {
        free(gs);
        free(v);
        oj_set_error(eng, OJ_ERR_CAPACITY, "grad_norm: out of host memory");
        return NAN;
    }
    for (int64_t i = 0; i < n; i++) gs[i] = params[i]->grad;
    double sumsq = 0.0;
    if (oj__optim_norms(eng, n, gs, v) != OJ_OK) sumsq = NAN;
    for (int64_t i = 0; i < n && !isnan(sumsq); i++)
        if (gs[i] != NULL) sumsq += v[i] * v[i];
    free(gs);
    free(v);
    return sqrt(sumsq);
}

double oj_grad_norm(int64_t n, oj_tensor *const *params) {
    if (n == 0) return 0.0;
    if (params_engine(n, params, "grad_norm") == NULL) return NAN;
    return norm_of(n, params);
}

double oj_clip_grad_norm(int64_t n, oj_tensor *const *params, double max_norm) {
    if (n == 0) return 0.0;
    oj_engine *eng = params_engine(n, params, "clip_grad_norm");
    if (eng == NULL) return NAN;
    if (!(max_norm > 0) || !isfinite(max_norm)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "clip_grad_norm: max_norm %g must be > 0",
                     max_norm);
        return NAN;
    }
    double norm = norm_of(n, params);
    if (!isfinite(norm)) return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return norm;
    bool prev = oj_set_grad_enabled(eng, false);
    for (int64_t i = 0; i < n; i++) {
        oj_tensor *g = params[i]->grad;
        if (g != NULL && oj_mul_scalar_(g, coef) != OJ_OK) {
            norm = NAN;
            break;
        }
    }
    oj_set_grad_enabled(eng, prev);
    return norm;
}

double oj_optim_clip_grad_norm(oj_optim *o, double max_norm) {
    if (o == NULL) return NAN;
    int64_t n = 0;
    for (int g = 0; g < o->ngroups; g++) n += o->groups[g].n;
    if (n == 0) return 0.0;
    oj_tensor **ps = malloc((size_t)n * sizeof *ps);
    if (ps == NULL) {
        oj_set_error(o->eng, OJ_ERR_CAPACITY, "clip_grad_norm: out of host memory");
        return NAN;
    }
    int64_t k = 0;
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) ps[k++] = o->groups[g].params[i].param;
    double norm = oj_clip_grad_norm(n, ps, max_norm);
    free(ps);
    return norm;
}
