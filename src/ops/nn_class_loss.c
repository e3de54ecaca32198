/* Class-index losses: cross_entropy (fused log-softmax + NLL with
 * ignore_index and label smoothing; the softmax is rebuilt in the backward
 * from the saved logsumexp, never stored) and nll_loss. */
#include "ops/nn_common.h"

/* saved: cross_entropy: 0 logits rows (N,V), 1 targets (N), 2 lse (N);
 * nll_loss: 0 targets (N); then for MEAN the rank-0 f64 gradient scale
 * (count > 0 ? 1 / count : 0, counted on the device: no read-back).
 * i[0] ignore_index, i[1] reduction, i[2] cross_entropy?; f[0] label
 * smoothing. */
static oj_status class_loss_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    bool ce = n->i[2] != 0;
    oj_tensor *x = ce ? oj__node_saved(n, 0) : NULL, *t = oj__node_saved(n, ce ? 1 : 0);
    oj_tensor *lse = ce ? oj__node_saved(n, 2) : NULL;
    if (!t || (ce && (!x || !lse))) return oj_last_status(eng);
    const oj_edge *e = &n->in[0];
    int64_t N = t->shape[0], V = e->shape[e->rank - 1];
    int64_t rows[2] = {N, V}, zero = 0;
    oj_tensor *g = go[0], *gc = NULL, *g1 = NULL;
    if (n->i[1] == OJ_REDUCTION_NONE) {
        gc = oj__nn_contig(g);
        g1 = gc ? oj__tensor_view(gc, 1, &N, NULL, gc->offset) : NULL;
    } else {
        if (n->i[1] == OJ_REDUCTION_MEAN) { /* go * scale in f64, as the kernels form
                                              * scale * dloss from a double scale */
            oj_tensor *sc = oj__node_saved(n, ce ? 3 : 1);
            g = gc = sc ? oj_mul(g, sc) : NULL;
        }
        g1 = g ? oj__tensor_view(g, 1, &N, &zero, g->offset) : NULL; /* one value for every row */
    }
    oj_tensor *dx = g1 ? oj__tensor_alloc(eng, e->rank, e->shape, e->dtype, n->op) : NULL;
    oj_tensor *dx2 = dx ? oj__tensor_view(dx, 2, rows, NULL, dx->offset) : NULL;
    bool ok = false;
    if (dx2) {
        oj_status st = ce ? eng->backend->cross_entropy_backward(eng, dx2, x, t, lse, g1, 1.0,
                                                                  n->i[0], n->f[0])
                          : eng->backend->nll_loss_backward(eng, dx2, t, g1, 1.0, n->i[0]);
        ok = oj__kernel_ok(eng, st, n->op);
    }
    oj_release(dx2);
    oj_release(g1);
    oj_release(gc);
    if (!ok) {
        oj_release(dx);
        return oj_last_status(eng);
    }
    gi[0] = dx;
    return OJ_OK;
}

static oj_tensor *class_loss(const char *op, bool ce, oj_tensor *x, oj_tensor *targets,
                             int64_t ignore_index, double smoothing, oj_reduction reduction) {
    oj_tensor *ins[2] = {x, targets};
    oj_engine *eng = oj__ops_engine(op, 2, ins);
    if (eng == NULL) return NULL;
    const char *xname = ce ? "logits" : "log_probs";
    if (!oj__nn_check_float(eng, op, xname, x) ||
        !oj__nn_check_index(eng, op, "targets", targets) ||
        !oj__nn_check_reduction(eng, op, (int)reduction))
        return NULL;
    if (!(smoothing >= 0.0 && smoothing <= 1.0)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: label_smoothing must be in [0, 1], got %g",
                     op, smoothing);
        return NULL;
    }
    bool fits = x->rank >= 1 && targets->rank == x->rank - 1;
    for (int d = 0; fits && d < targets->rank; d++) fits = targets->shape[d] == x->shape[d];
    if (!fits) {
        char b1[160], b2[160];
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: %s %s and targets %s do not fit: targets must be %s's shape without "
                     "its last (class) dim",
                     op, xname, oj__shape_fmt(b1, sizeof b1, x->rank, x->shape),
                     oj__shape_fmt(b2, sizeof b2, targets->rank, targets->shape), xname);
        return NULL;
    }
    if (ce ? (!OJ_KERNEL(eng, cross_entropy_forward, op) ||
              !OJ_KERNEL(eng, cross_entropy_backward, op))
           : (!OJ_KERNEL(eng, nll_loss_forward, op) || !OJ_KERNEL(eng, nll_loss_backward, op)))
        return NULL;
    int64_t N = oj_numel(targets);
    oj_dtype sdt = oj__nn_stat_dtype(x->dtype);
    oj_tensor *xc = oj__nn_contig(x);
    oj_tensor *x2 = xc ? oj__nn_rows(xc) : NULL;
    oj_tensor *tc = x2 ? oj__nn_contig(targets) : NULL;
    oj_tensor *t1 = tc ? oj__tensor_view(tc, 1, &N, NULL, tc->offset) : NULL;
    oj_tensor *loss = t1 ? oj__tensor_alloc(eng, 1, &N, sdt, op) : NULL;
    oj_tensor *lse = loss && ce ? oj__tensor_alloc(eng, 1, &N, sdt, op) : NULL;
    oj_tensor *out = NULL, *gscale = NULL;
    bool ok = loss && (!ce || lse);
    if (ok) { /* no count wanted (NULL): nothing read back; MEAN counts on the device */
        oj_status st = ce ? eng->backend->cross_entropy_forward(eng, loss, lse, x2, t1, ignore_index,
                                                                 smoothing, NULL)
                          : eng->backend->nll_loss_forward(eng, loss, x2, t1, ignore_index, NULL);
        ok = oj__kernel_ok(eng, st, op);
    }
    oj_tensor *cnt = NULL;
    if (ok) {
        oj_tensor *r = NULL;
        if (reduction == OJ_REDUCTION_NONE) {
            r = oj__tensor_view(loss, targets->rank, targets->shape, NULL, loss->offset);
        } else {
            oj_tensor *s = oj_sum_all(loss);
            if (s && reduction == OJ_REDUCTION_MEAN) { /* sum * (1 / count); torch: 0/0 is NaN */
                cnt = oj__nn_count_rows(t1, ignore_index);
                oj_tensor *inv = cnt ? oj__nn_inv_count(cnt, sdt, false) : NULL;
                r = inv ? oj_mul(s, inv) : NULL;
                oj_release(inv);
                oj_release(s);
            } else {
                r = s;
            }
        }
        if (r && r->dtype != x->dtype) {
            out = oj_cast(r, x->dtype);
            oj_release(r);
        } else {
            out = r;
        }
        ok = out != NULL;
    }
    if (ok && cnt && eng->grad_enabled && x->requires_grad) {
        /* MEAN: count > 0 ? 1 / count : 0 (nothing counted: zero gradients) */
        gscale = oj__nn_inv_count(cnt, OJ_F64, true);
        ok = gscale != NULL;
    }
    if (ok) {
        oj_node *nd = oj__node_begin(eng, op, class_loss_backward, 1, x);
        if (nd) {
            nd->i[0] = ignore_index;
            nd->i[1] = reduction;
            nd->i[2] = ce;
            nd->f[0] = smoothing;
            if (ce) {
                oj__nn_save_temp(nd, x2);
                x2 = NULL;
            }
            oj__nn_save_temp(nd, t1);
            t1 = NULL;
            if (ce) {
                oj__nn_save_temp(nd, lse);
                lse = NULL;
            }
            if (gscale) oj__nn_save_temp(nd, gscale), gscale = NULL;
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(gscale);
    oj_release(cnt);
    oj_release(lse);
    oj_release(loss);
    oj_release(t1);
    oj_release(tc);
    oj_release(x2);
    oj_release(xc);
    if (!ok) oj_release(out);
    return ok ? out : NULL;
}

oj_tensor *oj_cross_entropy(oj_tensor *logits, oj_tensor *targets, int64_t ignore_index,
                            double label_smoothing, oj_reduction reduction) {
    oj_tensor *ac_in[1] = {logits};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 1, ac_in, oj_cross_entropy(ac[0], targets, ignore_index, label_smoothing, reduction));
    return class_loss("cross_entropy", true, logits, targets, ignore_index, label_smoothing,
                      reduction);
}

oj_tensor *oj_nll_loss(oj_tensor *log_probs, oj_tensor *targets, int64_t ignore_index,
                       oj_reduction reduction) {
    oj_tensor *ac_in[1] = {log_probs};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 1, ac_in, oj_nll_loss(ac[0], targets, ignore_index, reduction));
    return class_loss("nll_loss", false, log_probs, targets, ignore_index, 0.0, reduction);
}
