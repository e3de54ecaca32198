/* Gradient norms and global-norm clipping (torch.nn.utils.clip_grad_norm_). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
        v = oj__reduce_all(t, OJ_RED_NORM_L2, "grad_norm", &st);
        if (st == OJ_OK) return v;
    }
    oj_set_error(eng, st, "grad_norm: reduction failed on the %s backend", eng->backend->name);
    return NAN;
}

/* A tensor's bytes in its storage, for oj__optim_disjoint. */
typedef struct {
    uintptr_t storage;
    int64_t lo, hi;
} byte_span;

static int span_cmp(const void *a, const void *b) {
    const byte_span *x = a, *y = b;
    if (x->storage != y->storage) return x->storage < y->storage ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

bool oj__optim_disjoint(int64_t n, oj_tensor *const *ts) {
    byte_span *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    if (s == NULL) return false;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const oj_tensor *t = ts[i];
        if (t == NULL) continue;
        int64_t nb = oj_numel(t) * (int64_t)oj_dtype_size(t->dtype);
        if (nb > 0) s[k++] = (byte_span){(uintptr_t)t->storage, t->offset, t->offset + nb};
    }
    /* sorted by (storage, first byte), disjoint spans follow one another */
    qsort(s, (size_t)k, sizeof *s, span_cmp);
    bool ok = true;
    for (int64_t j = 1; j < k && ok; j++)
        ok = s[j].storage != s[j - 1].storage || s[j].lo >= s[j - 1].hi;
    free(s);
    return ok;
}

/* Generic path of oj__optim_norms on a device: out[idx[j]] = L2 norm of
 * ts[idx[j]] for j < m, each a reduction into one slot of a single f64
 * device buffer, read back once. */
static oj_status device_reduce_norms(oj_engine *eng, int64_t m, const int64_t *idx,
                                     oj_tensor *const *ts, double *out) {
    int64_t shape[1] = {m};
    oj_tensor *buf = oj__tensor_alloc(eng, 1, shape, OJ_F64, "grad_norm");
    double *host = malloc((size_t)m * sizeof *host);
    if (buf == NULL || host == NULL) {
        oj_release(buf);
        free(host);
        return buf ? oj_set_error(eng, OJ_ERR_CAPACITY, "grad_norm: out of host memory")
                   : oj_last_status(eng);
    }
    oj_status st = OJ_OK;
    for (int64_t j = 0; j < m && st == OJ_OK; j++) {
        oj_tensor *t = ts[idx[j]];
        oj_tensor slot = *buf; /* stack view of buf[j] in t's rank, never registered */
        slot.rank = t->rank;
        for (int d = 0; d < slot.rank; d++) slot.shape[d] = 1, slot.stride[d] = 1;
        slot.offset = buf->offset + j * (int64_t)sizeof(double);
        uint32_t mask = t->rank ? (uint32_t)((1u << t->rank) - 1u) : 0u;
        st = eng->backend->reduce(eng, OJ_RED_NORM_L2, &slot, NULL, t, mask, 0.0);
    }
    if (st == OJ_OK)
        st = eng->backend->copy_d2h(eng, host, (const char *)buf->storage->data + buf->offset,
                                    (size_t)m * sizeof(double));
    if (st == OJ_OK)
        for (int64_t j = 0; j < m; j++) out[idx[j]] = host[j];
    oj_release(buf);
    free(host);
    return st;
}

/* Can the sum_squares_multi entry take t (on a device: every float dtype;
 * on the CPU f32/f64, as oj__optim_tensor_norm's fast path)? */
static bool multi_takes(const oj_engine *eng, const oj_tensor *t) {
    oj_dtype dt = t->dtype;
    bool fl = dt == OJ_F32 || dt == OJ_F64 ||
              (eng->device.type != OJ_DEVICE_CPU && (dt == OJ_BF16 || dt == OJ_F16));
    return fl && oj_is_contiguous(t);
}

/* out[i] = L2 norm of ts[i] (0 for NULL entries) for n tensors of eng.
 * Contiguous float tensors go to the sum_squares_multi entry together (on
 * a device a few launches and one read-back for all of them; on the CPU
 * spread over the threads, each summed as sum_squares sums it). The others
 * take the generic reduction: on a device each into one slot of a single
 * f64 buffer, read back once. */
oj_status oj__optim_norms(oj_engine *eng, int64_t n, oj_tensor *const *ts, double *out) {
    if (n == 0) return OJ_OK;
    bool dev = eng->device.type != OJ_DEVICE_CPU && eng->backend->reduce != NULL &&
               eng->backend->copy_d2h != NULL;
    bool multi = eng->backend->sum_squares_multi != NULL;
    const oj_tensor **mt = malloc((size_t)n * sizeof *mt);
    int64_t *midx = malloc((size_t)n * sizeof *midx), *gidx = malloc((size_t)n * sizeof *gidx);
    double *ss = malloc((size_t)n * sizeof *ss);
    if (mt == NULL || midx == NULL || gidx == NULL || ss == NULL) {
        free(mt);
        free(midx);
        free(gidx);
        free(ss);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "grad_norm: out of host memory");
    }
    int64_t nm = 0, ng = 0;
    for (int64_t i = 0; i < n; i++) {
        out[i] = 0.0;
        if (ts[i] == NULL) continue;
        if (multi && multi_takes(eng, ts[i])) {
            mt[nm] = ts[i];
            midx[nm++] = i;
        } else {
            gidx[ng++] = i;
        }
    }
    oj_status st = OJ_OK;
    if (nm > 0) {
        st = eng->backend->sum_squares_multi(eng, nm, mt, ss);
        if (st == OJ_OK)
            for (int64_t j = 0; j < nm; j++) out[midx[j]] = sqrt(ss[j]);
    }
    if (st == OJ_OK && ng > 0) {
        if (dev) {
            st = device_reduce_norms(eng, ng, gidx, ts, out);
        } else {
            for (int64_t j = 0; j < ng; j++) {
                out[gidx[j]] = oj__optim_tensor_norm(ts[gidx[j]]);
                if (isnan(out[gidx[j]]) && oj_last_status(eng) != OJ_OK) {
                    st = oj_last_status(eng);
                    break;
                }
            }
        }
    }
    free(mt);
    free(midx);
    free(gidx);
    free(ss);
    if (st != OJ_OK && oj_last_status(eng) == OJ_OK)
        return oj_set_error(eng, st, "grad_norm: reduction failed on the %s backend",
                            eng->backend->name);
    return st;
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

/* Global norm of the grads of params (NULL grads count 0); with `each`,
 * each[i] = the norm of params[i]'s grad. */
static double norm_of(int64_t n, oj_tensor *const *params, double *each) {
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
    if (each) memcpy(each, v, (size_t)n * sizeof *v);
    free(gs);
    free(v);
    return sqrt(sumsq);
}

double oj_grad_norm(int64_t n, oj_tensor *const *params) {
    if (n == 0) return 0.0;
    if (params_engine(n, params, "grad_norm") == NULL) return NAN;
    return norm_of(n, params, NULL);
}

/* Every grad of params *= coef (NULL grads skipped); false with the error
 * recorded on failure. The mul_scalar_multi entry takes them all in one
 * call (torch._foreach_mul_; on a device a launch per table of tensors
 * instead of one per tensor) when every grad is a contiguous float tensor
 * and no two overlap; otherwise oj_mul_scalar_ scales each. The entry
 * gives oj_mul_scalar_'s bits, so the two paths agree. */
static bool scale_grads(oj_engine *eng, int64_t n, oj_tensor *const *params, double coef) {
    oj_tensor **gs = malloc((size_t)n * sizeof *gs);
    bool multi = gs != NULL && eng->backend->mul_scalar_multi != NULL;
    int64_t k = 0;
    for (int64_t i = 0; i < n && multi; i++) {
        oj_tensor *g = params[i]->grad;
        if (g == NULL) continue;
        oj_dtype dt = g->dtype;
        multi = (dt == OJ_F32 || dt == OJ_F64 || dt == OJ_BF16 || dt == OJ_F16) &&
                oj_is_contiguous(g) && oj__live(g) && g->eng == eng;
        gs[k++] = g;
    }
    if (multi) multi = oj__optim_disjoint(k, gs);
    bool ok = true;
    if (multi) {
        oj_status st = eng->backend->mul_scalar_multi(eng, k, gs, coef);
        if (st == OJ_OK) {
            for (int64_t j = 0; j < k; j++) oj_bump_version(gs[j]);
        } else {
            if (oj_last_status(eng) == OJ_OK)
                oj_set_error(eng, st, "clip_grad_norm: scaling failed on the %s backend",
                             eng->backend->name);
            ok = false;
        }
    } else {
        for (int64_t i = 0; i < n && ok; i++) {
            oj_tensor *g = params[i]->grad;
            if (g != NULL && oj_mul_scalar_(g, coef) != OJ_OK) ok = false;
        }
    }
    free(gs);
    return ok;
}

/* oj_clip_grad_norm; with `each`, each[i] = the norm of params[i]'s grad
 * before clipping and *coef = the factor the grads were multiplied by (1
 * when not clipped), both set only when the result is finite and every
 * grad was scaled. */
static double clip(int64_t n, oj_tensor *const *params, double max_norm, double *each,
                   double *coef_out, void (*after_norm)(void *), void *ctx) {
    if (n == 0) return 0.0;
    oj_engine *eng = params_engine(n, params, "clip_grad_norm");
    if (eng == NULL) return NAN;
    if (!(max_norm > 0) || !isfinite(max_norm)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "clip_grad_norm: max_norm %g must be > 0",
                     max_norm);
        return NAN;
    }
    double norm = norm_of(n, params, each);
    if (after_norm) after_norm(ctx); /* the device is idle: nothing is queued yet */
    if (coef_out) *coef_out = NAN;
    if (!isfinite(norm)) return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) {
        if (coef_out) *coef_out = 1.0;
        return norm;
    }
    bool prev = oj_set_grad_enabled(eng, false);
    if (!scale_grads(eng, n, params, coef)) norm = NAN;
    oj_set_grad_enabled(eng, prev);
    if (coef_out && !isnan(norm)) *coef_out = coef;
    return norm;
}

double oj_clip_grad_norm(int64_t n, oj_tensor *const *params, double max_norm) {
    return clip(n, params, max_norm, NULL, NULL, NULL, NULL);
}

void oj__optim_clip_cache_clear(oj_optim *o) {
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) {
            oj_optim_slot *p = &o->groups[g].params[i];
            oj_release(p->clip_grad);
            p->clip_grad = NULL;
        }
}

double oj_optim_clip_grad_norm(oj_optim *o, double max_norm) {
    return oj__optim_clip_grad_norm_then(o, max_norm, NULL, NULL);
}

double oj__optim_clip_grad_norm_then(oj_optim *o, double max_norm, void (*after_norm)(void *),
                                     void *ctx) {
    if (o == NULL) return NAN;
    oj__optim_clip_cache_clear(o);
    int64_t n = 0;
    for (int g = 0; g < o->ngroups; g++) n += o->groups[g].n;
    if (n == 0) {
        if (after_norm) after_norm(ctx);
        return 0.0;
    }
    oj_tensor **ps = malloc((size_t)n * sizeof *ps);
    oj_optim_slot **slots = malloc((size_t)n * sizeof *slots);
    double *each = malloc((size_t)n * sizeof *each);
    if (ps == NULL || slots == NULL || each == NULL) {
        free(ps);
        free(slots);
        free(each);
        oj_set_error(o->eng, OJ_ERR_CAPACITY, "clip_grad_norm: out of host memory");
        return NAN;
    }
    int64_t k = 0;
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++, k++) {
            slots[k] = &o->groups[g].params[i];
            ps[k] = slots[k]->param;
        }
    double coef = NAN;
    double norm = clip(n, ps, max_norm, each, &coef, after_norm, ctx);
    /* the step after this one may take these norms instead of computing
     * them again: finite, and scaled exactly as the grads were */
    if (isfinite(norm) && isfinite(coef))
        for (k = 0; k < n; k++) {
            oj_tensor *gr = ps[k]->grad;
            if (gr == NULL) continue;
            slots[k]->clip_grad = oj_retain(gr);
            slots[k]->clip_version = oj_version(gr);
            slots[k]->clip_norm = each[k] * coef;
        }
    free(ps);
    free(slots);
    free(each);
    return norm;
}
