/* layer_norm (Ba et al. 2016) and rms_norm (Zhang & Sennrich 2019) over the
 * last dim, each one fused kernel forward and one backward; the forward
 * saves the per-row statistics (mean, rstd) for the backward. add_layer_norm
 * and add_rms_norm fuse the residual add before them (one forward kernel,
 * the norms' backward kernels). */
#include <math.h>

#include "ops/nn_common.h"

/* eps finite and >= 0, else the error naming op. */
static bool eps_ok(oj_engine *eng, const char *op, double eps) {
    if (!(eps >= 0.0) || isinf(eps)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, got %g", op,
                     eps);
        return false;
    }
    return true;
}

/* Shared checks: x float rank >= 1, optional [C] vectors of x's dtype. */
static bool norm_check(oj_engine *eng, const char *op, oj_tensor *x, oj_tensor *weight,
                       oj_tensor *bias, double eps) {
    if (!oj__nn_check_float(eng, op, "x", x)) return false;
    if (x->rank < 1) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: x must have at least one dim ([..., C]), got a scalar",
                     op);
        return false;
    }
    int64_t C = x->shape[x->rank - 1];
    if (weight && (!oj__nn_check_vec(eng, op, "weight", weight, C, x) ||
                   !oj__nn_check_same_dtype(eng, op, "weight", weight, "x", x)))
        return false;
    if (bias && (!oj__nn_check_vec(eng, op, "bias", bias, C, x) ||
                 !oj__nn_check_same_dtype(eng, op, "bias", bias, "x", x)))
        return false;
    return eps_ok(eng, op, eps);
}

/* A norm's output dtype: odt < 0 is x's dtype (the public ops); otherwise a
 * float dtype, checked. *direct: the kernels write it (x's dtype, or x f32
 * and odt bf16/f16, the extended entries' contract); else the caller
 * computes in x's dtype and casts (the same bits, two steps). */
static bool out_dtype_of(oj_engine *eng, const char *op, oj_dtype xdt, int odt, oj_dtype *out,
                         bool *direct) {
    if (odt < 0) {
        *out = xdt;
        *direct = true;
        return true;
    }
    if (!oj_dtype_is_float((oj_dtype)odt)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "%s: the output dtype must be a float dtype, got %s", op,
                     oj_dtype_name((oj_dtype)odt));
        return false;
    }
    *out = (oj_dtype)odt;
    *direct = *out == xdt || (xdt == OJ_F32 && (*out == OJ_BF16 || *out == OJ_F16));
    return true;
}

/* y cast to dt (y released); NULL when y is. */
static oj_tensor *cast_to(oj_tensor *y, oj_dtype dt) {
    oj_tensor *c = y ? oj_cast(y, dt) : NULL;
    oj_release(y);
    return c;
}

/* Engine of x and the non-NULL vectors. */
static oj_engine *norm_engine(const char *op, oj_tensor *x, oj_tensor *w, oj_tensor *b) {
    oj_tensor *ins[3] = {x, w, b};
    int n = 1;
    if (w) ins[n++] = w;
    if (b) ins[n++] = b;
    return x ? oj__ops_engine(op, n, ins) : NULL;
}

/* The start every backward shares: go[0] made contiguous (*gc) and seen as
 * rows (*g2); when need_dx, dx shaped like input 0 in dtype dxdt with its
 * rows view (*dx, *dx2); when the node needs input wi (the weight), dw
 * shaped like it (*dw). false on a failure; the caller releases whatever
 * was made either way. */
static bool norm_grads_begin(oj_node *n, oj_tensor *const *go, bool need_dx, oj_dtype dxdt, int wi,
                             oj_tensor **gc, oj_tensor **g2, oj_tensor **dx, oj_tensor **dx2,
                             oj_tensor **dw) {
    oj_engine *eng = n->eng;
    *gc = oj__nn_contig(go[0]);
    *g2 = *gc ? oj__nn_rows(*gc) : NULL;
    const oj_edge *ex = &n->in[0];
    bool ok = *g2 != NULL;
    if (ok && need_dx) {
        *dx = oj__tensor_alloc(eng, ex->rank, ex->shape, dxdt, n->op);
        *dx2 = *dx ? oj__nn_rows(*dx) : NULL;
        ok = *dx2 != NULL;
    }
    if (ok && oj__node_needs(n, wi))
        ok = (*dw = oj__tensor_alloc(eng, 1, n->in[wi].shape, n->in[wi].dtype, n->op)) != NULL;
    return ok;
}

/* ---------------------------------------------------------------- layer_norm */

/* saved: 0 x rows (N,C), 1 mean (N), 2 rstd (N), 3 weight (C) or absent */
static oj_status layer_norm_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *x = oj__node_saved(n, 0), *mean = oj__node_saved(n, 1),
              *rstd = oj__node_saved(n, 2);
    oj_tensor *w = n->i[0] ? oj__node_saved(n, 3) : NULL;
    if (!x || !mean || !rstd || (n->i[0] && !w)) return oj_last_status(eng);
    oj_tensor *gc = NULL, *g2 = NULL, *dx = NULL, *dw = NULL, *db = NULL, *dx2 = NULL;
    bool ok = norm_grads_begin(n, go, oj__node_needs(n, 0), n->in[0].dtype, 1, &gc, &g2, &dx,
                               &dx2, &dw);
    if (ok && oj__node_needs(n, 2))
        ok = (db = oj__tensor_alloc(eng, 1, n->in[2].shape, n->in[2].dtype, n->op)) != NULL;
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->layer_norm_backward(eng, dx2, dw, db, g2, x, mean,
                                                                  rstd, w),
                           n->op);
    oj_release(dx2);
    oj_release(g2);
    oj_release(gc);
    if (!ok) {
        oj_release(dx);
        oj_release(dw);
        oj_release(db);
        return oj_last_status(eng);
    }
    gi[0] = dx;
    gi[1] = dw;
    gi[2] = db;
    return OJ_OK;
}

/* oj_layer_norm with its output in odt (< 0: x's dtype, after autocast). */
static oj_tensor *layer_norm_to(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, double eps,
                                int odt) {
    oj_tensor *ac_in[3] = {x, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 3, ac_in, layer_norm_to(ac[0], ac[1], ac[2], eps, odt));
    const char *op = "layer_norm";
    oj_engine *eng = norm_engine(op, x, weight, bias);
    if (eng == NULL || !norm_check(eng, op, x, weight, bias, eps)) return NULL;
    oj_dtype od;
    bool direct;
    if (!out_dtype_of(eng, op, x->dtype, odt, &od, &direct)) return NULL;
    if (!direct) return cast_to(layer_norm_to(x, weight, bias, eps, -1), od);
    if (OJ_KERNEL(eng, layer_norm_forward, op) == NULL ||
        OJ_KERNEL(eng, layer_norm_backward, op) == NULL)
        return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, od, op);
    oj_tensor *xc = out ? oj__nn_contig(x) : NULL;
    oj_tensor *x2 = xc ? oj__nn_rows(xc) : NULL;
    oj_tensor *o2 = x2 ? oj__nn_rows(out) : NULL;
    oj_tensor *wc = weight && o2 ? oj__nn_contig(weight) : NULL;
    oj_tensor *bc = bias && o2 ? oj__nn_contig(bias) : NULL;
    bool ok = o2 && (!weight || wc) && (!bias || bc);
    oj_node *nd = ok ? oj__node_begin(eng, op, layer_norm_backward, 3, x, weight, bias) : NULL;
    oj_tensor *mean = NULL, *rstd = NULL;
    if (nd) {
        oj_dtype sdt = oj__nn_stat_dtype(x->dtype);
        mean = oj__tensor_alloc(eng, 1, x2->shape, sdt, op);
        rstd = mean ? oj__tensor_alloc(eng, 1, x2->shape, sdt, op) : NULL;
        ok = rstd != NULL;
    }
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->layer_norm_forward(eng, o2, mean, rstd, x2, wc, bc, eps),
                           op);
    if (ok && nd) {
        nd->i[0] = weight != NULL;
        oj__nn_save_temp(nd, x2);
        oj__nn_save_temp(nd, mean);
        oj__nn_save_temp(nd, rstd);
        if (weight) oj__nn_save_temp(nd, wc);
        x2 = wc = NULL;
        oj__node_finish(nd, 1, &out);
    } else {
        oj__node_abort(nd);
        oj_release(mean);
        oj_release(rstd);
    }
    oj_release(o2);
    oj_release(x2);
    oj_release(xc);
    oj_release(wc);
    oj_release(bc);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}

oj_tensor *oj_layer_norm(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, double eps) {
    return layer_norm_to(x, weight, bias, eps, -1);
}

oj_tensor *oj__layer_norm_to(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, double eps,
                             oj_dtype out_dtype) {
    return layer_norm_to(x, weight, bias, eps, (int)out_dtype);
}

/* ---------------------------------------------------------------- rms_norm */

/* saved: 0 x rows (N,C), 1 rstd (N), 2 weight (C) or absent */
static oj_status rms_norm_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *x = oj__node_saved(n, 0), *rstd = oj__node_saved(n, 1);
    oj_tensor *w = n->i[0] ? oj__node_saved(n, 2) : NULL;
    if (!x || !rstd || (n->i[0] && !w)) return oj_last_status(eng);
    oj_tensor *gc = NULL, *g2 = NULL, *dx = NULL, *dw = NULL, *dx2 = NULL;
    bool ok = norm_grads_begin(n, go, oj__node_needs(n, 0), n->in[0].dtype, 1, &gc, &g2, &dx,
                               &dx2, &dw);
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->rms_norm_backward(eng, dx2, dw, g2, x, rstd, w),
                           n->op);
    oj_release(dx2);
    oj_release(g2);
    oj_release(gc);
    if (!ok) {
        oj_release(dx);
        oj_release(dw);
        return oj_last_status(eng);
    }
    gi[0] = dx;
    gi[1] = dw;
    return OJ_OK;
}

/* oj_rms_norm with its output in odt (< 0: x's dtype, after autocast). */
static oj_tensor *rms_norm_to(oj_tensor *x, oj_tensor *weight, double eps, int odt) {
    oj_tensor *ac_in[2] = {x, weight};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 2, ac_in, rms_norm_to(ac[0], ac[1], eps, odt));
    const char *op = "rms_norm";
    oj_engine *eng = norm_engine(op, x, weight, NULL);
    if (eng == NULL || !norm_check(eng, op, x, weight, NULL, eps)) return NULL;
    oj_dtype od;
    bool direct;
    if (!out_dtype_of(eng, op, x->dtype, odt, &od, &direct)) return NULL;
    if (!direct) return cast_to(rms_norm_to(x, weight, eps, -1), od);
    if (OJ_KERNEL(eng, rms_norm_forward, op) == NULL ||
        OJ_KERNEL(eng, rms_norm_backward, op) == NULL)
        return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, od, op);
    oj_tensor *xc = out ? oj__nn_contig(x) : NULL;
    oj_tensor *x2 = xc ? oj__nn_rows(xc) : NULL;
    oj_tensor *o2 = x2 ? oj__nn_rows(out) : NULL;
    oj_tensor *wc = weight && o2 ? oj__nn_contig(weight) : NULL;
    bool ok = o2 && (!weight || wc);
    oj_node *nd = ok ? oj__node_begin(eng, op, rms_norm_backward, 2, x, weight) : NULL;
    oj_tensor *rstd = NULL;
    if (nd) ok = (rstd = oj__tensor_alloc(eng, 1, x2->shape, oj__nn_stat_dtype(x->dtype), op));
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->rms_norm_forward(eng, o2, rstd, x2, wc, eps), op);
    if (ok && nd) {
        nd->i[0] = weight != NULL;
        oj__nn_save_temp(nd, x2);
        oj__nn_save_temp(nd, rstd);
        if (weight) oj__nn_save_temp(nd, wc);
        x2 = wc = NULL;
        oj__node_finish(nd, 1, &out);
    } else {
        oj__node_abort(nd);
        oj_release(rstd);
    }
    oj_release(o2);
    oj_release(x2);
    oj_release(xc);
    oj_release(wc);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}

oj_tensor *oj_rms_norm(oj_tensor *x, oj_tensor *weight, double eps) {
    return rms_norm_to(x, weight, eps, -1);
}

oj_tensor *oj__rms_norm_to(oj_tensor *x, oj_tensor *weight, double eps, oj_dtype out_dtype) {
    return rms_norm_to(x, weight, eps, (int)out_dtype);
}

/* ---------------------------------------------------------------- add + norm */

/* The input of node n (0 x, 1 r) that gets ds rounded to its bf16/f16
 * dtype by norm_backward_add (dx_low), or -1: the first one (r first)
 * that needs a gradient and has a low dtype other than s's (sdt f32). */
static int low_input(oj_node *n, oj_dtype sdt) {
    if (sdt != OJ_F32) return -1;
    for (int i = 1; i >= 0; i--) {
        oj_dtype dt = n->in[i].dtype;
        if (oj__node_needs(n, i) && (dt == OJ_BF16 || dt == OJ_F16)) return i;
    }
    return -1;
}

/* saved: 0 s rows (N,C), then mean (N) (layer norm only), rstd (N), weight
 * (C) or absent. Inputs x, r, weight, bias; outputs 0 the norm (any
 * dtype the forward wrote), 1 s. ds = go[1] + the norm's dx of go[0];
 * dx = dr = ds (the engine casts each to its input's dtype, as for oj_add).
 * With the backend's norm_backward_add the add runs in the norm's kernel
 * and the one low-dtype input's gradient comes rounded from it (the bits
 * of the add then the engine's cast). */
static oj_status add_norm_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    bool rms = n->i[1] != 0;
    int k = 0;
    oj_tensor *s = oj__node_saved(n, k++);
    oj_tensor *mean = rms ? NULL : oj__node_saved(n, k++);
    oj_tensor *rstd = oj__node_saved(n, k++);
    oj_tensor *w = n->i[0] ? oj__node_saved(n, k) : NULL;
    if (!s || (!rms && !mean) || !rstd || (n->i[0] && !w)) return oj_last_status(eng);
    bool nx = oj__node_needs(n, 0), nr = oj__node_needs(n, 1);
    const oj_dtype sdt = n->out_dtype[1];
    oj_tensor *gc = NULL, *g2 = NULL, *dn = NULL, *dn2 = NULL, *dw = NULL, *db = NULL, *ds = NULL;
    oj_tensor *rc = NULL, *r2 = NULL, *lo = NULL, *lo2 = NULL;
    bool ok = norm_grads_begin(n, go, nx || nr, sdt, 2, &gc, &g2, &dn, &dn2, &dw);
    if (ok && oj__node_needs(n, 3))
        ok = (db = oj__tensor_alloc(eng, 1, n->in[3].shape, n->in[3].dtype, n->op)) != NULL;
    /* the fused entry: the residual gradient go[1] (s's dtype) added in
     * the kernel, the low input's gradient rounded there */
    const bool fused = ok && dn && eng->backend->norm_backward_add &&
                       (go[1] == NULL || go[1]->dtype == sdt);
    const int li = fused ? low_input(n, sdt) : -1;
    if (fused && go[1]) {
        rc = oj__nn_contig(go[1]);
        r2 = rc ? oj__nn_rows(rc) : NULL;
        ok = r2 != NULL;
    }
    if (ok && li >= 0) {
        const oj_edge *e = &n->in[li];
        lo = oj__tensor_alloc(eng, e->rank, e->shape, e->dtype, n->op);
        lo2 = lo ? oj__nn_rows(lo) : NULL;
        ok = lo2 != NULL;
    }
    if (ok && fused)
        ok = oj__kernel_ok(eng,
                           eng->backend->norm_backward_add(eng, dn2, lo2, dw, db, g2, r2, s, mean,
                                                           rstd, w, rms),
                           n->op);
    else if (ok)
        ok = oj__kernel_ok(eng,
                           rms ? eng->backend->rms_norm_backward(eng, dn2, dw, g2, s, rstd, w)
                               : eng->backend->layer_norm_backward(eng, dn2, dw, db, g2, s, mean,
                                                                   rstd, w),
                           n->op);
    if (ok && dn) ok = (ds = go[1] && !fused ? oj_add(go[1], dn) : oj_retain(dn)) != NULL;
    oj_release(dn2);
    oj_release(dn);
    oj_release(g2);
    oj_release(gc);
    oj_release(r2);
    oj_release(rc);
    oj_release(lo2);
    if (!ok) {
        oj_release(dw);
        oj_release(db);
        oj_release(lo);
        return oj_last_status(eng);
    }
    gi[0] = nx ? oj_retain(li == 0 ? lo : ds) : NULL;
    gi[1] = nr ? oj_retain(li == 1 ? lo : ds) : NULL;
    gi[2] = dw;
    gi[3] = db;
    oj_release(ds);
    oj_release(lo);
    return OJ_OK;
}

/* x, r float of one shape [..., C]; weight, bias [C] or NULL; eps. */
static bool add_norm_check(oj_engine *eng, const char *op, oj_tensor *x, oj_tensor *r,
                           oj_tensor *weight, oj_tensor *bias, double eps) {
    if (!oj__nn_check_float(eng, op, "x", x) || !oj__nn_check_float(eng, op, "r", r))
        return false;
    bool same = x->rank == r->rank;
    for (int d = 0; same && d < x->rank; d++) same = x->shape[d] == r->shape[d];
    if (!same) {
        char b1[160], b2[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: r has shape %s but x has shape %s (they must be "
                     "equal: no broadcasting)", op, oj__shape_fmt(b1, sizeof b1, r->rank, r->shape),
                     oj__shape_fmt(b2, sizeof b2, x->rank, x->shape));
        return false;
    }
    if (x->rank < 1) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: x must have at least one dim ([..., C]), got a scalar",
                     op);
        return false;
    }
    int64_t C = x->shape[x->rank - 1];
    if ((weight && !oj__nn_check_vec(eng, op, "weight", weight, C, x)) ||
        (bias && !oj__nn_check_vec(eng, op, "bias", bias, C, x)))
        return false;
    return eps_ok(eng, op, eps);
}

/* weight/bias t (may be NULL) has s's dtype sdt. */
static bool add_norm_dtype(oj_engine *eng, const char *op, const char *arg, oj_tensor *t,
                           oj_dtype sdt) {
    if (t == NULL || t->dtype == sdt) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: %s is %s but x + r is %s (expected one dtype)", op, arg,
                 oj_dtype_name(t->dtype), oj_dtype_name(sdt));
    return false;
}

static bool autocast_casts(oj_tensor *t) {
    return t && (t->dtype == OJ_BF16 || t->dtype == OJ_F16);
}

/* The fused add + norm, the norm's output in odt (< 0: s's dtype after
 * autocast's casts, the public ops). */
static oj_tensor *add_norm(const char *op, bool rms, oj_tensor *x, oj_tensor *r, oj_tensor *weight,
                           oj_tensor *bias, double eps, oj_tensor **sum, int odt) {
    if (sum) *sum = NULL;
    oj_tensor *ins[4] = {x, r, weight, bias};
    int n = 2;
    if (weight) ins[n++] = weight;
    if (bias) ins[n++] = bias;
    oj_engine *eng = oj__ops_engine(op, n, ins);
    if (eng == NULL) return NULL;
    if (sum == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "%s: sum is NULL (the x + r output is required: pass an oj_tensor *)", op);
        return NULL;
    }
    if (!add_norm_check(eng, op, x, r, weight, bias, eps)) return NULL;
    oj_dtype sdt = oj__promote(x->dtype, r->dtype);
    /* Autocast would cast the norm's inputs (s, weight, bias) to f32, or the
     * backend has no fused entry: the two ops, exactly as the caller's. */
    bool ac = eng->autocast && (sdt == OJ_BF16 || sdt == OJ_F16 || autocast_casts(weight) ||
                                autocast_casts(bias));
    if (ac || eng->backend == NULL || eng->backend->add_norm_forward == NULL) {
        oj_tensor *s = oj_add(x, r);
        oj_tensor *out = s ? (rms ? rms_norm_to(s, weight, eps, odt)
                                  : layer_norm_to(s, weight, bias, eps, odt))
                           : NULL;
        if (out == NULL) {
            oj_release(s);
            return NULL;
        }
        *sum = s;
        return out;
    }
    if (!add_norm_dtype(eng, op, "weight", weight, sdt) ||
        !add_norm_dtype(eng, op, "bias", bias, sdt))
        return NULL;
    oj_dtype od;
    bool direct;
    if (!out_dtype_of(eng, op, sdt, odt, &od, &direct)) return NULL;
    if (!direct) { /* the norm in s's dtype, then the cast (f64 s, say) */
        oj_tensor *y = cast_to(add_norm(op, rms, x, r, weight, bias, eps, sum, -1), od);
        if (y == NULL) {
            oj_release(*sum);
            *sum = NULL;
        }
        return y;
    }
    if ((rms ? OJ_KERNEL(eng, rms_norm_backward, op) == NULL
             : OJ_KERNEL(eng, layer_norm_backward, op) == NULL))
        return NULL;
    oj_tensor *s = oj__tensor_alloc(eng, x->rank, x->shape, sdt, op);
    oj_tensor *out = s ? oj__tensor_alloc(eng, x->rank, x->shape, od, op) : NULL;
    oj_tensor *wc = weight && out ? oj__nn_contig(weight) : NULL;
    oj_tensor *bc = bias && out ? oj__nn_contig(bias) : NULL;
    bool ok = out && (!weight || wc) && (!bias || bc);
    oj_node *nd = ok ? oj__node_begin(eng, op, add_norm_backward, 4, x, r, weight, bias) : NULL;
    oj_tensor *s2 = NULL, *mean = NULL, *rstd = NULL;
    if (nd) {
        s2 = oj__nn_rows(s);
        oj_dtype st = oj__nn_stat_dtype(sdt);
        mean = s2 && !rms ? oj__tensor_alloc(eng, 1, s2->shape, st, op) : NULL;
        rstd = s2 && (rms || mean) ? oj__tensor_alloc(eng, 1, s2->shape, st, op) : NULL;
        ok = rstd != NULL;
    }
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->add_norm_forward(eng, out, s, mean, rstd, x, r, wc,
                                                               bc, eps, rms),
                           op);
    if (ok && nd) {
        nd->i[0] = weight != NULL;
        nd->i[1] = rms;
        oj__nn_save_temp(nd, s2);
        if (!rms) oj__nn_save_temp(nd, mean);
        oj__nn_save_temp(nd, rstd);
        if (weight) oj__nn_save_temp(nd, wc);
        s2 = mean = rstd = wc = NULL;
        oj_tensor *outs[2] = {out, s};
        oj__node_finish(nd, 2, outs);
    } else {
        oj__node_abort(nd);
    }
    oj_release(s2);
    oj_release(mean);
    oj_release(rstd);
    oj_release(wc);
    oj_release(bc);
    if (!ok) {
        oj_release(out);
        oj_release(s);
        return NULL;
    }
    *sum = s;
    return out;
}

oj_tensor *oj_add_layer_norm(oj_tensor *x, oj_tensor *r, oj_tensor *weight, oj_tensor *bias,
                             double eps, oj_tensor **sum) {
    return add_norm("add_layer_norm", false, x, r, weight, bias, eps, sum, -1);
}

oj_tensor *oj_add_rms_norm(oj_tensor *x, oj_tensor *r, oj_tensor *weight, double eps,
                           oj_tensor **sum) {
    return add_norm("add_rms_norm", true, x, r, weight, NULL, eps, sum, -1);
}

oj_tensor *oj__add_layer_norm_to(oj_tensor *x, oj_tensor *r, oj_tensor *weight, oj_tensor *bias,
                                 double eps, oj_tensor **sum, oj_dtype out_dtype) {
    return add_norm("add_layer_norm", false, x, r, weight, bias, eps, sum, (int)out_dtype);
}

oj_tensor *oj__add_rms_norm_to(oj_tensor *x, oj_tensor *r, oj_tensor *weight, double eps,
                               oj_tensor **sum, oj_dtype out_dtype) {
    return add_norm("add_rms_norm", true, x, r, weight, NULL, eps, sum, (int)out_dtype);
}
