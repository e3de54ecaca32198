/* Muon: momentum with Nesterov, then orthogonalisation of the update by a
 * quintic Newton-Schulz iteration (Keller Jordan, "Muon: An optimizer for
 * hidden layers in neural networks", 2024,
 * https://kellerjordan.github.io/posts/muon/). */
#include <math.h>

#include "optim/optim_internal.h"

#define NS_A 3.4445
#define NS_B (-4.7750)
#define NS_C 2.0315

/* The quintic iteration on a normalised X (2-D, f32/f64); a new
 * contiguous tensor. Grad mode must be off. */
static oj_tensor *ns_iterate(oj_tensor *x0, int steps) {
    bool tall = x0->shape[0] > x0->shape[1];
    /* work on the wide orientation: A = X X^T is the small one */
    oj_tensor *x = tall ? oj_transpose(x0, 0, 1) : oj_retain(x0);
    for (int k = 0; x != NULL && k < steps; k++) {
        oj_tensor *xt = oj_transpose(x, 0, 1);
        oj_tensor *a = oj_matmul(x, xt);              /* A = X X^T */
        oj_tensor *b = oj_addmm(a, a, a, NS_B, NS_C); /* B = b A + c A A */
        oj_tensor *xn = oj_addmm(x, b, x, NS_A, 1.0); /* X = a X + B X */
        oj_release(xt);
        oj_release(a);
        oj_release(b);
        oj_release(x);
        x = xn;
    }
    if (x != NULL && tall) {
        oj_tensor *t = oj_transpose(x, 0, 1);
        oj_release(x);
        x = t;
    }
    oj_tensor *out = x ? oj_contiguous(x) : NULL;
    oj_release(x);
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

/* The optimizer's path: X = G / (||G|| + eps) with the norm kept on the
 * device (no host round trip per matrix); a non-finite G gives a
 * non-finite X, which the optimizer's finiteness checks report. */
static oj_tensor *ns5_on_device(oj_tensor *g, int steps) {
    oj_engine *eng = g->eng;
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *n = oj_norm(g, 2.0, 0, NULL, false); /* rank 0 */
    oj_tensor *d = n ? oj_add_scalar(n, 1e-7) : NULL;
    oj_tensor *x = d ? oj_div(g, d) : NULL;
    oj_tensor *out = x ? ns_iterate(x, steps) : NULL;
    oj_release(n);
    oj_release(d);
    oj_release(x);
    oj_set_grad_enabled(eng, prev);
    return out;
}

double oj__muon_scale(const oj_tensor *param) {
    double r = (double)param->shape[0] / (double)param->shape[1];
    return sqrt(r > 1.0 ? r : 1.0);
}

oj_tensor *oj__muon_update(oj_optim_slot *p, oj_tensor *grad, const oj_optim_hparams *hp) {
    oj_engine *eng = p->param->eng;
    oj_tensor *u = oj__tensor_alloc(eng, 2, p->param->shape, p->param->dtype, "muon");
    if (u == NULL) return NULL;
    oj_status st =
        eng->backend->muon_momentum(eng, p->momentum_buffer, grad, u, hp->momentum, hp->nesterov);
    if (st != OJ_OK) {
        oj_set_error(eng, st, "muon: momentum kernel failed for '%s'", p->name);
        oj_release(u);
        return NULL;
    }
    oj_tensor *x = eng->device.type == OJ_DEVICE_CPU ? oj_newton_schulz5(u, hp->ns_steps)
                                                     : ns5_on_device(u, hp->ns_steps);
    oj_release(u);
    return x;
}
