/* Elementwise losses composed from existing ops (autograd comes from the
 * ops they are made of): mse, l1, smooth_l1, binary_cross_entropy and its
 * stable with-logits form. */
#include <math.h>

#include "ops/nn_common.h"

/* Shared checks: a, b float on one engine, a valid reduction, and (when
 * same_shape) equal shapes. */
static oj_engine *loss_check(const char *op, oj_tensor *a, oj_tensor *b, int reduction,
                             bool same_shape) {
    oj_tensor *ins[2] = {a, b};
    oj_engine *eng = oj__ops_engine(op, 2, ins);
    if (eng == NULL) return NULL;
    if (!oj__nn_check_float(eng, op, "input", a) || !oj__nn_check_float(eng, op, "target", b) ||
        !oj__nn_check_reduction(eng, op, reduction))
        return NULL;
    bool same = a->rank == b->rank;
    for (int d = 0; same && d < a->rank; d++) same = a->shape[d] == b->shape[d];
    if (same_shape && !same) {
        char b1[160], b2[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: input %s and target %s must have the same shape", op,
                     oj__shape_fmt(b1, sizeof b1, a->rank, a->shape),
                     oj__shape_fmt(b2, sizeof b2, b->rank, b->shape));
        return NULL;
    }
    return eng;
}

/* Reduce l and drop it. */
static oj_tensor *finish(oj_tensor *l, oj_reduction reduction) {
    oj_tensor *r = oj__nn_reduce(l, reduction);
    oj_release(l);
    return r;
}

oj_tensor *oj_mse_loss(oj_tensor *a, oj_tensor *b, oj_reduction reduction) {
    oj_tensor *ac_in[2] = {a, b};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 2, ac_in, oj_mse_loss(ac[0], ac[1], reduction));
    if (loss_check("mse_loss", a, b, (int)reduction, false) == NULL) return NULL;
    oj_tensor *d = oj_sub(a, b);
    oj_tensor *l = oj_square(d);
    oj_release(d);
    return finish(l, reduction);
}

oj_tensor *oj_l1_loss(oj_tensor *a, oj_tensor *b, oj_reduction reduction) {
    oj_tensor *ac_in[2] = {a, b};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 2, ac_in, oj_l1_loss(ac[0], ac[1], reduction));
    if (loss_check("l1_loss", a, b, (int)reduction, false) == NULL) return NULL;
    oj_tensor *d = oj_sub(a, b);
    oj_tensor *l = oj_abs(d);
    oj_release(d);
    return finish(l, reduction);
}

oj_tensor *oj_smooth_l1_loss(oj_tensor *a, oj_tensor *b, double beta, oj_reduction reduction) {
    oj_tensor *ac_in[2] = {a, b};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 2, ac_in, oj_smooth_l1_loss(ac[0], ac[1], beta, reduction));
    const char *op = "smooth_l1_loss";
    oj_engine *eng = loss_check(op, a, b, (int)reduction, false);
    if (eng == NULL) return NULL;
    if (!(beta >= 0.0) || isinf(beta)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: beta must be finite and >= 0, got %g", op,
                     beta);
        return NULL;
    }
    if (beta == 0.0) return oj_l1_loss(a, b, reduction);
    oj_tensor *d = oj_sub(a, b);
    oj_tensor *ad = oj_abs(d);
    oj_tensor *sq = oj_square(d);
    oj_tensor *quad = oj_mul_scalar(sq, 0.5 / beta);  // 0.5 d^2 / beta
    oj_tensor *lin = oj_add_scalar(ad, -0.5 * beta);  // |d| - 0.5 beta
    oj_tensor *bt = d ? oj_scalar(eng, beta, d->dtype) : NULL;
    oj_tensor *small = oj_lt(ad, bt);
    oj_tensor *l = oj_where(small, quad, lin);
    oj_release(d);
    oj_release(ad);
    oj_release(sq);
    oj_release(quad);
    oj_release(lin);
    oj_release(bt);
    oj_release(small);
    return finish(l, reduction);
}

oj_tensor *oj_binary_cross_entropy(oj_tensor *p, oj_tensor *t, oj_reduction reduction) {
    oj_tensor *ac_in[2] = {p, t};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 2, ac_in, oj_binary_cross_entropy(ac[0], ac[1], reduction));
    if (loss_check("binary_cross_entropy", p, t, (int)reduction, true) == NULL) return NULL;
    /* -(t log p + (1 - t) log(1 - p)), each log clamped at -100 (torch) */
    oj_tensor *lp0 = oj_log(p);
    oj_tensor *lp = oj_clamp(lp0, -100.0, NAN);
    oj_tensor *q = oj_affine(p, -1.0, 1.0);
    oj_tensor *lq0 = oj_log(q);
    oj_tensor *lq = oj_clamp(lq0, -100.0, NAN);
    oj_tensor *u = oj_affine(t, -1.0, 1.0);
    oj_tensor *a = oj_mul(t, lp);
    oj_tensor *b = oj_mul(u, lq);
    oj_tensor *s = oj_add(a, b);
    oj_tensor *l = oj_neg(s);
    oj_release(lp0);
    oj_release(lp);
    oj_release(q);
    oj_release(lq0);
    oj_release(lq);
    oj_release(u);
    oj_release(a);
    oj_release(b);
    oj_release(s);
    return finish(l, reduction);
}

oj_tensor *oj_binary_cross_entropy_with_logits(oj_tensor *x, oj_tensor *t,
                                               oj_reduction reduction) {
    oj_tensor *ac_in[2] = {x, t};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 2, ac_in, oj_binary_cross_entropy_with_logits(ac[0], ac[1], reduction));
    if (loss_check("binary_cross_entropy_with_logits", x, t, (int)reduction, true) == NULL)
        return NULL;
    /* softplus(x) - x t = log(1 + e^x) - x t; softplus is linear above 40,
     * where log1p(e^-x) < 5e-18 (below double rounding of x). */
    oj_tensor *sp = oj_softplus(x, 1.0, 40.0);
    oj_tensor *xt = oj_mul(x, t);
    oj_tensor *l = oj_sub(sp, xt);
    oj_release(sp);
    oj_release(xt);
    return finish(l, reduction);
}
