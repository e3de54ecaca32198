/* linear_cross_entropy: cross_entropy(x W^T, targets) without the [N, V]
 * logits. Rows are taken in chunks; each chunk's logits live only while
 * its loss and, when a gradient is wanted, its gradients are computed:
 * dlogits = softmax - onehot (the cross_entropy_backward kernel with
 * dloss = 1), dx rows = dlogits W, dW += dlogits^T x. When the backend has
 * cross_entropy_fused, the loss and dlogits come from one pass over the
 * logits, and dlogits overwrite the logits in place (no second [chunk, V]
 * buffer). The node keeps dx
 * and dW and its backward only scales them by the incoming gradient (and
 * 1 / counted rows for MEAN). The method of the "cut cross-entropy" and
 * Liger-Kernel fused linear cross-entropy (Wijmans et al. 2024; Hsu et
 * al. 2024): peak memory O(chunk V + V C) instead of O(N V).
 *
 * Nothing is read back to the host (so a training step can be captured
 * into a CUDA graph): MEAN counts the rows on the device and keeps its
 * scales in tensors.
 *
 * Chunk rows: as many as keep one chunk's logits under 256 MiB (at least
 * 1), a function of the shapes only, so results are reproducible. The
 * environment variable OJAS_LCE_CHUNK_ROWS overrides it (tests, tuning);
 * OJAS_LCE_ROW_ALIGN rounds it to a multiple of the GEMMs' tiles (see
 * oj__lce_chunk_rows).
 *
 * Padded vocabulary: on a backend with ce_row_align (CUDA), W [V, C] is
 * copied once per call into Wp [Vp, C] with zero rows past V, Vp = V
 * rounded up to that multiple, and the logits GEMM and the dx GEMM run
 * over Vp (llm.c's padded vocabulary): an odd V such as GPT-2's 50257
 * made cuBLAS take kernels 3-6x slower for those two GEMMs on the H200,
 * and an unaligned leading dimension the dW GEMM 2x slower and the loss
 * kernels element loads. A chunk's logits are the [n, V] view of an
 * [n, Vp] buffer; the loss kernels read and write only the V columns (the
 * others stay the GEMM's zeros, x . 0, so the dx GEMM adds exact zeros),
 * and the loss, dx and dW keep V. OJAS_LCE_PAD=0 turns it off
 * (comparisons). */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/internal.h"
#include "ops/nn_common.h"

/* Row stride of a chunk's logits: V, or V rounded up to the backend's
 * ce_row_align (see above). */
static int64_t logits_ld(const oj_backend *be, int64_t V) {
    int64_t a = be->ce_row_align;
    if (a <= 1 || !oj__env_flag("OJAS_LCE_PAD", true)) return V;
    return (V + a - 1) / a * a;
}

/* Rows per chunk: the most whose logits fit 256 MiB (r), or with
 * OJAS_LCE_ROW_ALIGN=a (a > 1) as many chunks as r allows, their rows
 * evened out and rounded up to a multiple of a, but not past r (then r
 * rounded down to one): GEMM kernels tile rows by 64-256, so a chunk of
 * 2668 rows (V 50304, bf16) leaves a partial tile. At N 16384 and a 128:
 * 7 chunks of 2432 rows (the last 1792) instead of 6 of 2668 and one of
 * 376. Unset (1), the budget's rows as they come. Declared in
 * nn_common.h (tests). */
int64_t oj__lce_chunk_rows(int64_t N, int64_t V, size_t es) {
    const int64_t set = oj__env_int("OJAS_LCE_CHUNK_ROWS", 0);
    int64_t r = set > 0 ? set : (int64_t)((256u << 20) / ((size_t)V * es));
    if (r < 1) r = 1;
    if (r >= N) return N;
    const int64_t a = oj__env_int("OJAS_LCE_ROW_ALIGN", 1);
    if (a > 1 && r >= a && set <= 0) {
        int64_t k = (N + r - 1) / r, even = (N + k - 1) / k;
        int64_t up = (even + a - 1) / a * a;
        r = up <= r ? up : r / a * a;
    }
    return r;
}

/* Rows of dW's storage: under FAST on a backend with cross_entropy_fused
 * (dlogits written over the logits, row stride ld) and a padded vocabulary
 * (ld > V), ld: the dW GEMMs then run over all ld rows of dlogits^T (the
 * padding columns are the logits GEMM's exact zeros, so rows V.. of the
 * buffer only ever hold zeros) and dW is the buffer's first V rows. With
 * N = V = 50257 cuBLASLt ran gpt2's dW GEMM on an sm80 kernel, 411-439 us
 * a chunk, against ~258 us for the chunk's two other GEMMs at 50304 (H200,
 * the GEMM tuner's log); an aligned N admits every kernel the odd one does.
 * EXACT keeps V rows (its GEMM as it was). OJAS_LCE_DW_PAD=0 turns it off. */
static int64_t dw_rows(const oj_engine *eng, int64_t V) {
    int64_t ld = logits_ld(eng->backend, V);
    if (!oj__env_flag("OJAS_LCE_DW_PAD", true) || eng->numerics != OJ_NUMERICS_FAST ||
        eng->backend->cross_entropy_fused == NULL)
        return V;
    return ld;
}

/* saved: dx [N, C] (if i[0]), dW [V, C] in the accumulation dtype (if
 * i[1]), then for MEAN (i[2]) the rank-0 gradient scale (count > 0 ?
 * 1 / count : 0, in the loss dtype). */
static oj_status lce_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    int s = 0;
    oj_tensor *dx = n->i[0] ? oj__node_saved(n, s++) : NULL;
    oj_tensor *dw = n->i[1] ? oj__node_saved(n, s++) : NULL;
    oj_tensor *sc = n->i[2] ? oj__node_saved(n, s++) : NULL;
    if (n->i[2] && sc == NULL) return oj_last_status(eng);
    oj_tensor *g = sc ? oj_mul(go[0], sc) : go[0]; /* rank 0 */
    if (g == NULL) return oj_last_status(eng);
    for (int i = 0; i < 2; i++) {
        oj_tensor *d = i == 0 ? dx : dw;
        if (!oj__node_needs(n, i) || d == NULL) continue;
        const oj_edge *e = &n->in[i];
        oj_tensor *m = oj_mul(d, g);
        oj_tensor *c = m && m->dtype != e->dtype ? oj_cast(m, e->dtype) : (m ? oj_retain(m) : NULL);
        gi[i] = c ? oj_reshape(c, e->rank, e->shape) : NULL;
        oj_release(c);
        oj_release(m);
    }
    if (g != go[0]) oj_release(g);
    return oj_last_status(eng);
}

/* v: the rank-3 [1, rows, cols] kernel view of matrix t (strides rs, cs). */
static void mm_view(oj_tensor *v, const oj_tensor *t, int64_t rows, int64_t cols, int64_t rs,
                    int64_t cs) {
    *v = *t;
    v->rank = 3;
    v->shape[0] = 1, v->shape[1] = rows, v->shape[2] = cols;
    v->stride[0] = rows * cols, v->stride[1] = rs, v->stride[2] = cs;
}

/* The chunk loop: loss[N] (stat dtype), and dx / dw when not NULL. dx
 * rows come from the matmul kernel straight into dx; dW accumulates in
 * the matmul kernel itself (accumulate, out f32 over bf16/f16 dlogits and
 * x: the backend contract's mixed form), so each chunk's product is never
 * rounded to 16 bits (more accurate than a 16-bit product added after, and
 * one [V, C] pass less per chunk); with dw_set the first chunk's GEMM
 * writes dW rather than adding into it. wrows: the rows of dW's storage
 * (V, or ld: see dw_rows), the dW GEMM's rows when dlogits are the padded
 * logits. */
static bool lce_chunks(oj_engine *eng, const char *op, oj_tensor *x2, oj_tensor *w,
                       oj_tensor *t1, int64_t ignore_index, double eps, oj_tensor *loss,
                       oj_tensor *dx, oj_tensor *dw, bool dw_set, int64_t wrows) {
    const oj_backend *be = eng->backend;
    int64_t N = x2->shape[0], V = w->shape[0], C = w->shape[1], ld = logits_ld(be, V);
    int64_t R = oj__lce_chunk_rows(N, ld, oj_dtype_size(x2->dtype));
    oj_dtype sdt = loss->dtype;
    oj_tensor *one = dx || dw ? oj_full(eng, 0, NULL, sdt, 1.0) : NULL;
    /* wp: W, or W with ld - V zero rows appended (the padded GEMMs' operand) */
    int64_t pads[4] = {0, 0, 0, ld - V};
    oj_tensor *wp = ld > V ? oj_pad(w, 4, pads, 0.0) : oj_retain(w);
    bool ok = wp && (!(dx || dw) || one);
    for (int64_t r0 = 0; ok && r0 < N; r0 += R) {
        int64_t n = N - r0 < R ? N - r0 : R, zero = 0;
        oj_tensor *xc = oj_narrow(x2, 0, r0, n), *tc = oj_narrow(t1, 0, r0, n);
        oj_tensor *lc = oj_narrow(loss, 0, r0, n);
        /* logits [n, V], the view of buf [n, ld] = xc [n, C] @ Wp^T [C, ld] */
        int64_t bs[2] = {n, ld}, ls[2] = {n, V}, lst[2] = {ld, 1};
        oj_tensor *buf = xc ? oj__tensor_alloc(eng, 2, bs, x2->dtype, op) : NULL;
        oj_tensor *logits = buf ? oj__tensor_view(buf, 2, ls, lst, buf->offset) : NULL;
        if (logits) {
            oj_tensor va, vb, vo;
            mm_view(&va, xc, n, C, xc->stride[0], xc->stride[1]);
            mm_view(&vb, wp, C, ld, wp->stride[1], wp->stride[0]);
            mm_view(&vo, buf, n, ld, ld, 1);
            ok = oj__kernel_ok(eng, be->matmul(eng, &vo, &va, &vb, false), op);
        }
        oj_release(buf);
        if (logits == NULL) ok = false;
        oj_tensor *lse = ok ? oj__tensor_alloc(eng, 1, &n, sdt, op) : NULL;
        oj_tensor *dl = NULL, *ones = NULL;
        if (dx || dw) {
            ones = lse ? oj__tensor_view(one, 1, &n, &zero, one->offset) : NULL;
            if (be->cross_entropy_fused) { /* one pass; dlogits over the logits */
                dl = ones && tc && lc ? oj_retain(logits) : NULL;
                ok = dl && oj__kernel_ok(eng,
                                         be->cross_entropy_fused(eng, lc, lse, dl, logits, tc, ones,
                                                                 1.0, ignore_index, eps, NULL),
                                         op);
            } else {
                ok = ones && tc && lc &&
                     oj__kernel_ok(eng, be->cross_entropy_forward(eng, lc, lse, logits, tc,
                                                                  ignore_index, eps, NULL),
                                   op);
                int64_t shp[2] = {n, V};
                dl = ok ? oj__tensor_alloc(eng, 2, shp, x2->dtype, op) : NULL;
                ok = dl && oj__kernel_ok(eng,
                                         be->cross_entropy_backward(eng, dl, logits, tc, lse, ones,
                                                                    1.0, ignore_index, eps),
                                         op);
            }
        } else {
            ok = lse && tc && lc && /* no count wanted (NULL): nothing read back */
                 oj__kernel_ok(eng, be->cross_entropy_forward(eng, lc, lse, logits, tc,
                                                              ignore_index, eps, NULL),
                               op);
        }
        /* dlogits over the logits (the padding columns zeros), or packed */
        int64_t dld = dl == logits ? ld : V;
        if (ok && dx) { /* dx rows = dlogits Wp: [n, dld] @ [dld, C], written in place */
            oj_tensor va, vb, vo;
            oj_tensor *wk = dld == ld ? wp : w;
            mm_view(&va, dl, n, dld, dld, 1);
            mm_view(&vb, wk, dld, C, wk->stride[0], wk->stride[1]);
            mm_view(&vo, dx, n, C, C, 1);
            vo.offset += r0 * C * (int64_t)oj_dtype_size(dx->dtype);
            ok = oj__kernel_ok(eng, be->matmul(eng, &vo, &va, &vb, false), op);
        }
        if (ok && dw) { /* dW += dlogits^T x: [V, n] @ [n, C], summed into the f32 (f64) dW */
            oj_tensor va, vb, vo;
            const int64_t vr = dld == ld && wrows == ld ? ld : V; /* see dw_rows */
            mm_view(&va, dl, vr, n, 1, dld);
            mm_view(&vb, xc, n, C, xc->stride[0], xc->stride[1]);
            mm_view(&vo, dw, vr, C, C, 1);
            ok = oj__kernel_ok(eng, be->matmul(eng, &vo, &va, &vb, r0 > 0 || !dw_set), op);
        }
        oj_tensor *tmp[] = {xc, tc, lc, logits, lse, dl, ones};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    }
    oj_release(one);
    oj_release(wp);
    return ok;
}

/* The op over x and weight of one dtype; its node's weight edge is wnode:
 * weight itself, or the f32 weight weight was cast from (lce_master). */
static oj_tensor *lce_impl(oj_tensor *x, oj_tensor *weight, oj_tensor *wnode, oj_tensor *targets,
                           int64_t ignore_index, double label_smoothing, oj_reduction reduction) {
    const char *op = "linear_cross_entropy";
    oj_tensor *ac_in[3] = {x, weight, targets};
    oj_engine *eng = oj__ops_engine(op, 3, ac_in);
    if (eng == NULL) return NULL;
    if (!oj__nn_check_float(eng, op, "x", x) ||
        !oj__nn_check_same_dtype(eng, op, "weight", weight, "x", x) ||
        !oj__nn_check_index(eng, op, "targets", targets) ||
        !oj__nn_check_reduction(eng, op, (int)reduction))
        return NULL;
    if (reduction == OJ_REDUCTION_NONE) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "%s: reduction must be mean or sum (per-row losses: use linear + "
                     "cross_entropy)",
                     op);
        return NULL;
    }
    if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: label_smoothing must be in [0, 1], got %g",
                     op, label_smoothing);
        return NULL;
    }
    char b1[128], b2[128], b3[128];
    bool fits = x->rank >= 1 && weight->rank == 2 && x->shape[x->rank - 1] == weight->shape[1] &&
                targets->rank == x->rank - 1 && weight->shape[0] > 0;
    for (int d = 0; fits && d < targets->rank; d++) fits = targets->shape[d] == x->shape[d];
    if (!fits) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: x %s, weight %s and targets %s do not fit: expected x [..., C], "
                     "weight [V, C] with V > 0, targets [...]",
                     op, oj__shape_fmt(b1, sizeof b1, x->rank, x->shape),
                     oj__shape_fmt(b2, sizeof b2, weight->rank, weight->shape),
                     oj__shape_fmt(b3, sizeof b3, targets->rank, targets->shape));
        return NULL;
    }
    if (!OJ_KERNEL(eng, cross_entropy_forward, op) || !OJ_KERNEL(eng, cross_entropy_backward, op) ||
        !OJ_KERNEL(eng, matmul, op))
        return NULL;
    int64_t N = oj_numel(targets), C = weight->shape[1], V = weight->shape[0];
    bool want_dx = eng->grad_enabled && x->requires_grad;
    bool want_dw = eng->grad_enabled && wnode->requires_grad;
    oj_dtype sdt = oj__nn_stat_dtype(x->dtype); /* loss and dW accumulate in f32 (f64) */
    bool prev = oj_set_grad_enabled(eng, false);
    int64_t xs[2] = {N, C}, ws[2] = {V, C};
    oj_tensor *xc = oj__nn_contig(x);
    oj_tensor *x2 = xc ? oj_reshape(xc, 2, xs) : NULL;
    oj_tensor *tc = x2 ? oj__nn_contig(targets) : NULL;
    oj_tensor *t1 = tc ? oj__tensor_view(tc, 1, &N, NULL, tc->offset) : NULL;
    oj_tensor *loss = t1 ? oj__tensor_alloc(eng, 1, &N, sdt, op) : NULL;
    oj_tensor *dx = loss && want_dx ? oj__tensor_alloc(eng, 2, xs, x->dtype, op) : NULL;
    /* dW: zeros the chunks' GEMMs add into; under FAST (N > 0) the first
     * chunk's GEMM writes it instead (a [V, C] fill less; EXACT keeps the
     * zeros' bits: a -0 sum stays +0). OJAS_LCE_DW_SET=0 turns that off. */
    bool dw_set =
        eng->numerics == OJ_NUMERICS_FAST && N > 0 && oj__env_flag("OJAS_LCE_DW_SET", true);
    const int64_t wrows = dw_rows(eng, V), wps[2] = {wrows, C};
    oj_tensor *dwp = !(loss && want_dw) ? NULL
                     : dw_set           ? oj__tensor_alloc(eng, 2, wps, sdt, op)
                                        : oj_zeros(eng, 2, wps, sdt);
    oj_tensor *dw = dwp && wrows > V ? oj__tensor_view(dwp, 2, ws, NULL, dwp->offset) : dwp;
    if (dw != dwp) oj_release(dwp); /* the view holds the storage */
    bool mean = reduction == OJ_REDUCTION_MEAN;
    bool ok = loss && (!want_dx || dx) && (!want_dw || dw) &&
              lce_chunks(eng, op, x2, weight, t1, ignore_index, label_smoothing, loss, dx, dw,
                         dw_set, wrows);
    /* MEAN: sum * (1 / count) (NaN over no counted row, as torch); the
     * gradient scale is 0 there instead: nothing was counted, so the
     * gradients are 0 (as cross_entropy's and torch's), not dx * NaN */
    oj_tensor *out = ok ? oj_sum_all(loss) : NULL, *gscale = NULL;
    if (out && mean) {
        oj_tensor *cnt = oj__nn_count_rows(t1, ignore_index);
        oj_tensor *inv = cnt ? oj__nn_inv_count(cnt, sdt, false) : NULL;
        oj_tensor *m = inv ? oj_mul(out, inv) : NULL;
        gscale = m && (want_dx || want_dw) ? oj__nn_inv_count(cnt, sdt, true) : NULL;
        oj_release(out);
        out = m && (!(want_dx || want_dw) || gscale) ? m : NULL;
        if (out == NULL) oj_release(m);
        oj_release(inv);
        oj_release(cnt);
    }
    ok = out != NULL;
    oj_set_grad_enabled(eng, prev);
    if (ok && (want_dx || want_dw)) {
        oj_node *nd = oj__node_begin(eng, op, lce_backward, 2, x, wnode);
        if (nd) {
            nd->i[0] = dx != NULL;
            nd->i[1] = dw != NULL;
            nd->i[2] = gscale != NULL;
            if (dx) oj__nn_save_temp(nd, dx), dx = NULL;
            if (dw) oj__nn_save_temp(nd, dw), dw = NULL;
            if (gscale) oj__nn_save_temp(nd, gscale), gscale = NULL;
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_tensor *tmp[] = {gscale, dx, dw, loss, t1, tc, x2, xc};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}

/* Under FAST autocast to bf16/f16 with an f32 weight that needs a
 * gradient (the optimizer's master copy, gpt2's tied wte), the node takes
 * the f32 weight itself: dW, accumulated in f32 by the GEMMs, reaches it
 * as it is instead of through a cast to 16 bits and the cast node's cast
 * back ([V, C] twice; dW no longer rounded to 16 bits on the way: FAST's
 * contract). The logits GEMM reads the weight's 16-bit cast (the kept
 * weight copy where there is one), as before. EXACT keeps the casts'
 * nodes. OJAS_LCE_MASTER=0 turns it off (comparisons); read at each call.
 * *xl, *wl: the 16-bit x (cast with its node) and weight (no node). */
static bool lce_master(oj_tensor *x, oj_tensor *weight, oj_tensor **xl, oj_tensor **wl) {
    *xl = *wl = NULL;
    if (!oj__live(x) || !oj__live(weight)) return false;
    oj_engine *eng = x->eng;
    oj_dtype dt = eng->autocast_dtype;
    if (!oj__env_flag("OJAS_LCE_MASTER", true) || !eng->autocast || !eng->grad_enabled ||
        eng->numerics != OJ_NUMERICS_FAST || (dt != OJ_BF16 && dt != OJ_F16) ||
        weight->eng != eng || weight->dtype != OJ_F32 || !weight->requires_grad ||
        (x->dtype != OJ_F32 && x->dtype != dt))
        return false;
    *xl = x->dtype == dt ? oj_retain(x) : oj__autocast_cast(x, dt);
    bool prev = oj_set_grad_enabled(eng, false);
    *wl = *xl ? oj__autocast_cast(weight, dt) : NULL;
    oj_set_grad_enabled(eng, prev);
    return true;
}

oj_tensor *oj_linear_cross_entropy(oj_tensor *x, oj_tensor *weight, oj_tensor *targets,
                                   int64_t ignore_index, double label_smoothing,
                                   oj_reduction reduction) {
    oj_tensor *xl, *wl;
    if (lce_master(x, weight, &xl, &wl)) {
        oj_tensor *out = xl && wl ? lce_impl(xl, wl, weight, targets, ignore_index,
                                             label_smoothing, reduction)
                                  : NULL;
        oj_release(xl);
        oj_release(wl);
        return out;
    }
    oj_tensor *ac_in[3] = {x, weight, targets};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in,
                 oj_linear_cross_entropy(ac[0], ac[1], ac[2], ignore_index, label_smoothing,
                                         reduction));
    return lce_impl(x, weight, weight, targets, ignore_index, label_smoothing, reduction);
}
