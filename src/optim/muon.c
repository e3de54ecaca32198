/* Muon: momentum with Nesterov, then orthogonalisation of the update by a
 * quintic Newton-Schulz iteration (Keller Jordan, "Muon: An optimizer for
 * hidden layers in neural networks", 2024,
 * https://kellerjordan.github.io/posts/muon/). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "optim/optim_internal.h"

#define NS_A 3.4445
#define NS_B (-4.7750)
#define NS_C 2.0315

static oj_tensor *ns_iterate_batch(oj_tensor *x0, int steps, bool fused);

/* The quintic iteration on a normalised X (2-D, f32/f64): the batched
 * iteration on a stack of one. A new contiguous tensor. Grad mode must be
 * off. */
static oj_tensor *ns_iterate(oj_tensor *x0, int steps) {
    oj_tensor *x3 = oj_unsqueeze(x0, 0);
    oj_tensor *r3 = x3 ? ns_iterate_batch(x3, steps, false) : NULL;
    oj_tensor *out = r3 ? oj_squeeze(r3, 0) : NULL; /* a contiguous view */
    oj_release(x3);
    oj_release(r3);
    return out;
}

oj_tensor *oj_newton_schulz5(oj_tensor *g, int steps) {
    if (g == NULL || !oj__live(g)) return NULL;
    oj_engine *eng = g->eng;
    if (g->rank != 2) {
        char b[128];
        oj_set_error(eng, OJ_ERR_SHAPE, "newton_schulz5: input %s must be 2-D",
                     oj__shape_fmt(b, sizeof b, g->rank, g->shape));
        return NULL;
    }
    if (g->dtype != OJ_F32 && g->dtype != OJ_F64) {
        oj_set_error(eng, OJ_ERR_DTYPE, "newton_schulz5: dtype %s; f32 or f64 expected",
                     oj_dtype_name(g->dtype));
        return NULL;
    }
    if (steps < 0) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "newton_schulz5: steps %d < 0", steps);
        return NULL;
    }
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *x = NULL;
    double norm = oj__optim_tensor_norm(g);
    if (!isnan(norm)) x = oj_mul_scalar(g, 1.0 / (norm + 1e-7)); /* X = G / (||G|| + eps) */
    else /* kept when the norm itself failed: the first error wins */
        oj_set_error(eng, OJ_ERR_NUMERIC, "newton_schulz5: the input holds NaN (its norm is NaN)");
    oj_tensor *out = x ? ns_iterate(x, steps) : NULL;
    oj_release(x);
    oj_set_grad_enabled(eng, prev);
    return out;
}

double oj__muon_scale(const oj_tensor *param) {
    double r = (double)param->shape[0] / (double)param->shape[1];
    return sqrt(r > 1.0 ? r : 1.0);
}

/* The quintic iteration on a stack of normalised matrices x0 [k, m, n]
 * (f32/f64, bf16 on a device under FAST), batched, each step in
 * oj_addmm's order (the product, times alpha, plus beta times the input):
 * with fused and the backend's muon_ns_step, each step as its three
 * GEMMs with the sums in their epilogues (values within rounding of the
 * ops', FAST only), else as ops. Returns [k, m, n], contiguous. Grad
 * mode must be off. */
static oj_tensor *ns_iterate_batch(oj_tensor *x0, int steps, bool fused) {
    bool tall = x0->shape[1] > x0->shape[2];
    /* work on the wide orientation: A = X X^T is the small one. A tall
     * stack is transposed into a contiguous copy first: the first step's
     * a X on the strided view took the generic strided kernel (776 us for
     * nanolab's 24 MLP matrices on the H200, ~20x the copy) */
    oj_tensor *xv = tall ? oj_transpose(x0, 1, 2) : NULL;
    oj_tensor *x = tall ? (xv ? oj__contiguous(xv) : NULL) : oj_retain(x0);
    oj_release(xv);
    oj_engine *eng = x0->eng;
    /* the entry's ranges: a batch and a row within cuBLAS's */
    const bool fits = (x0->dtype == OJ_BF16 || x0->dtype == OJ_F32) && x0->shape[0] <= 65535 &&
                      x0->shape[1] <= INT_MAX && x0->shape[2] <= INT_MAX;
    oj_status (*step)(oj_engine *, oj_tensor *, const oj_tensor *, double, double, double) =
        fused && fits ? eng->backend->muon_ns_step : NULL;
    if (x != NULL && step != NULL && !oj_is_contiguous(x)) { /* the entry's layout */
        oj_tensor *xc = oj__contiguous(x);
        oj_release(x);
        x = xc;
    }
    for (int k = 0; x != NULL && step != NULL && k < steps; k++) {
        oj_tensor *xn = oj__tensor_alloc(eng, 3, x->shape, x->dtype, "muon");
        oj_status st = xn ? step(eng, xn, x, NS_A, NS_B, NS_C) : OJ_OK;
        if (st != OJ_OK) {
            if (oj_last_status(eng) == OJ_OK)
                oj_set_error(eng, st, "muon: Newton-Schulz step failed on the %s backend",
                             eng->backend->name);
            oj_release(xn);
            xn = NULL;
        }
        oj_release(x);
        x = xn;
    }
    for (int k = 0; x != NULL && step == NULL && k < steps; k++) {
        oj_tensor *xt = oj_transpose(x, 1, 2);
        oj_tensor *a = oj_bmm(x, xt); /* A = X X^T */
        oj_tensor *aa = oj_bmm(a, a);
        oj_tensor *aa_c = oj_mul_scalar(aa, NS_C);
        oj_tensor *a_b = oj_mul_scalar(a, NS_B);
        oj_tensor *b = oj_add(a_b, aa_c); /* B = b A + c A A */
        oj_tensor *bx = oj_bmm(b, x);
        oj_tensor *x_a = oj_mul_scalar(x, NS_A);
        oj_tensor *xn = oj_add(x_a, bx); /* X = a X + B X */
        oj_tensor *tmp[] = {xt, a, aa, aa_c, a_b, b, bx, x_a, x};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
        x = xn;
    }
    if (x != NULL && tall) {
        oj_tensor *t = oj_transpose(x, 1, 2);
        oj_release(x);
        x = t;
    }
    oj_tensor *out = x ? oj__contiguous(x) : NULL;
    oj_release(x);
    return out;
}

oj_status oj__muon_update_batch(int64_t k, oj_optim_slot *const *ps, oj_tensor *const *grads,
                                const oj_optim_hparams *hp, oj_tensor **updates) {
    oj_engine *eng = ps[0]->param->eng;
    const oj_tensor *p0 = ps[0]->param;
    int64_t r = p0->shape[0], c = p0->shape[1];
    for (int64_t j = 0; j < k; j++) updates[j] = NULL;
    int64_t shape[3] = {k, r, c};
    oj_tensor *u = oj__tensor_alloc(eng, 3, shape, p0->dtype, "muon");
    if (u == NULL) return oj_last_status(eng);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_status st = OJ_OK;
    /* each momentum output goes straight into its slice of the stack: one
     * muon_momentum_multi call where the backend has it (the slices it
     * writes are disjoint by construction), else one call per matrix */
    const bool multi = eng->backend->muon_momentum_multi != NULL && k > 1;
    if (multi) {
        oj_tensor **sl = calloc((size_t)k, sizeof *sl), **bufs = malloc((size_t)k * sizeof *bufs);
        if (sl == NULL || bufs == NULL)
            st = oj_set_error(eng, OJ_ERR_CAPACITY, "muon: out of host memory");
        for (int64_t j = 0; j < k && st == OJ_OK; j++) {
            bufs[j] = ps[j]->momentum_buffer;
            if ((sl[j] = oj_select(u, 0, j)) == NULL) st = oj_last_status(eng);
        }
        if (st == OJ_OK) {
            st = eng->backend->muon_momentum_multi(eng, k, bufs, (const oj_tensor *const *)grads,
                                                   sl, hp->momentum, hp->nesterov);
            if (st != OJ_OK && oj_last_status(eng) == OJ_OK)
                oj_set_error(eng, st, "muon: momentum kernel failed for %lld matrices",
                             (long long)k);
        }
        for (int64_t j = 0; sl != NULL && j < k; j++) oj_release(sl[j]);
        free(sl);
        free(bufs);
    }
    for (int64_t j = 0; j < k && st == OJ_OK && !multi; j++) {
        oj_tensor *slice = oj_select(u, 0, j); /* [r, c], contiguous */
        if (slice == NULL) {
            st = oj_last_status(eng);
            break;
        }
        st = eng->backend->muon_momentum(eng, ps[j]->momentum_buffer, grads[j], slice,
                                         hp->momentum, hp->nesterov);
        if (st != OJ_OK)
            oj_set_error(eng, st, "muon: momentum kernel failed for '%s'", ps[j]->name);
        oj_release(slice);
    }
    oj_tensor *x = NULL;
    if (st == OJ_OK) {
        /* X = G * (1 / (||G|| + eps)) per matrix with the norms kept on
         * the device, computed as oj_newton_schulz5 does on the host: the
         * norm and the reciprocal in double, the factor rounded to the
         * dtype, one multiply (so f32 gets its bits, not an f32 norm's). A
         * non-finite G gives a non-finite X, which the optimizer's
         * finiteness checks report. */
        int64_t ks[3] = {k, 1, 1};
        oj_tensor *n = oj__tensor_alloc(eng, 3, ks, OJ_F64, "muon"); /* [k, 1, 1] */
        /* the reduction reads u's f32 values and sums their squares in
         * double into an f64 output: no f64 copy of the stack (the
         * backend's muon_norms where it has one: every matrix's chunks
         * in one launch) */
        oj_status rs = n == NULL                 ? OJ_OK
                       : eng->backend->muon_norms ? eng->backend->muon_norms(eng, n, u)
                                                  : eng->backend->reduce(eng, OJ_RED_NORM_L2, n, NULL,
                                                                         u, 0x6u /* dims 1, 2 */, 0.0);
        if (rs != OJ_OK) {
            oj_set_error(eng, rs, "muon: norm reduction failed on the %s backend",
                         eng->backend->name);
            oj_release(n);
            n = NULL;
        }
        /* On a device under FAST numerics the iteration runs in bf16 (f32
         * accumulation), as Jordan's reference does: bf16 tensor-core
         * GEMMs and half the bytes; the orthogonalised update is cast back
         * to the parameters' f32. EXACT and the CPU keep f32. */
        bool low = u->dtype == OJ_F32 && eng->device.type != OJ_DEVICE_CPU &&
                   eng->numerics == OJ_NUMERICS_FAST;
        oj_tensor *d = NULL, *r64 = NULL, *rc = NULL, *x0 = NULL, *xb = NULL;
        if (n && eng->backend->muon_normalize) {
            /* the backend's one pass: the chain's bits, straight into the
             * iteration's dtype */
            oj_tensor *o = oj__tensor_alloc(eng, 3, shape, low ? OJ_BF16 : u->dtype, "muon");
            oj_status ns = o ? eng->backend->muon_normalize(eng, o, u, n) : oj_last_status(eng);
            if (ns != OJ_OK) {
                if (o) oj_set_error(eng, ns, "muon: normalisation failed on the %s backend",
                                    eng->backend->name);
                oj_release(o);
            } else if (low) {
                xb = o;
            } else {
                x0 = o;
            }
        } else if (n) {
            d = oj_add_scalar(n, 1e-7);
            r64 = d ? oj_reciprocal(d) : NULL;
            rc = r64 == NULL ? NULL : u->dtype == OJ_F64 ? oj_retain(r64) : oj_cast(r64, u->dtype);
            x0 = rc ? oj_mul(u, rc) : NULL;
            xb = low && x0 ? oj_cast(x0, OJ_BF16) : NULL;
        }
        /* the steps as fused GEMMs where the backend has them: FAST only
         * (another rounding than the ops', so EXACT keeps the ops) */
        const bool fused = eng->numerics == OJ_NUMERICS_FAST;
        oj_tensor *xi = low ? (xb ? ns_iterate_batch(xb, hp->ns_steps, fused) : NULL)
                            : (x0 ? ns_iterate_batch(x0, hp->ns_steps, fused) : NULL);
        x = low && xi ? oj_cast(xi, OJ_F32) : (low ? NULL : xi);
        if (low) oj_release(xi);
        oj_release(xb);
        oj_tensor *tmp[] = {n, d, r64, rc, x0};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
        if (x == NULL) st = oj_last_status(eng);
    }
    oj_release(u);
    for (int64_t j = 0; j < k && st == OJ_OK; j++) {
        updates[j] = oj_select(x, 0, j); /* a contiguous [r, c] view of the result */
        if (updates[j] == NULL) st = oj_last_status(eng);
    }
    oj_release(x);
    if (st != OJ_OK)
        for (int64_t j = 0; j < k; j++) {
            oj_release(updates[j]);
            updates[j] = NULL;
        }
    oj_set_grad_enabled(eng, prev);
    return st == OJ_OK ? OJ_OK : (oj_last_status(eng) != OJ_OK ? oj_last_status(eng) : st);
}
