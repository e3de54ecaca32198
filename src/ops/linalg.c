/* Linear algebra ops: matmul (torch.matmul semantics), bmm, linear, addmm,
 * and their backward rules. All of them end in the backend's batched
 * `matmul` entry on rank-3 strided views; transposes and broadcast batches
 * are expressed by strides and never copied. */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "ops/ops_common.h"

/* A rank-3 view of t's storage for a kernel call: a stack copy of the
 * handle (never registered, never escapes the op). off: elements. */
static void kview(oj_tensor *v, const oj_tensor *t, int64_t off, int64_t n0, int64_t n1,
                  int64_t n2, int64_t s0, int64_t s1, int64_t s2) {
    *v = *t;
    v->rank = 3;
    v->shape[0] = n0, v->shape[1] = n1, v->shape[2] = n2;
    v->stride[0] = s0, v->stride[1] = s1, v->stride[2] = s2;
    v->offset = t->offset + off * (int64_t)oj_dtype_size(t->dtype);
}

static bool float_pair(oj_engine *eng, const char *op, const oj_tensor *a, const oj_tensor *b) {
    if (!oj_dtype_is_float(a->dtype) || a->dtype != b->dtype) {
        oj_set_error(eng, OJ_ERR_DTYPE,
                     "%s: expected two tensors of one float dtype (f32, f64, bf16, f16), got %s "
                     "and %s",
                     op, oj_dtype_name(a->dtype), oj_dtype_name(b->dtype));
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- matmul */

/* An operand as a matrix stack: 1-D a becomes [1, K], 1-D b becomes [K, 1]. */
typedef struct {
    int rank;
    int64_t shape[OJ_MAX_RANK], stride[OJ_MAX_RANK];
} mm_operand;

static void mm_operand_of(const oj_tensor *t, bool is_b, mm_operand *o) {
    if (t->rank == 1) {
        o->rank = 2;
        if (is_b) {
            o->shape[0] = t->shape[0], o->stride[0] = t->stride[0];
            o->shape[1] = 1, o->stride[1] = 0;
        } else {
            o->shape[0] = 1, o->stride[0] = 0;
            o->shape[1] = t->shape[0], o->stride[1] = t->stride[0];
        }
        return;
    }
    o->rank = t->rank;
    memcpy(o->shape, t->shape, sizeof o->shape);
    memcpy(o->stride, t->stride, sizeof o->stride);
}

/* An input's shape as matmul sees it: a 1-D a is [1, K], a 1-D b [K, 1]. */
static int mm_shape(const oj_edge *e, bool is_b, int64_t *shape) {
    if (e->rank == 1) {
        shape[0] = is_b ? e->shape[0] : 1;
        shape[1] = is_b ? 1 : e->shape[0];
        return 2;
    }
    memcpy(shape, e->shape, sizeof(int64_t) * (size_t)e->rank);
    return e->rank;
}

/* saved (slots 0, 1): b when a needs a gradient (dA = G B^T), a when b
 * does (dB = A^T G), NULL otherwise (as torch: a write to the other
 * invalidates nothing); the shapes come from the input edges. */
static oj_status matmul_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    bool na = oj__node_needs(n, 0), nb = oj__node_needs(n, 1);
    oj_tensor *a = nb ? oj__node_saved(n, 0) : NULL, *b = na ? oj__node_saved(n, 1) : NULL;
    if ((nb && a == NULL) || (na && b == NULL)) return oj_last_status(n->eng);
    const oj_edge *ea = &n->in[0], *eb = &n->in[1];
    int64_t ash[OJ_MAX_RANK], bsh[OJ_MAX_RANK];
    int ar = mm_shape(ea, false, ash), br = mm_shape(eb, true, bsh);
    oj_tensor *A = a ? (a->rank == 1 ? oj_unsqueeze(a, 0) : oj_retain(a)) : NULL;
    oj_tensor *B = b ? (b->rank == 1 ? oj_unsqueeze(b, 1) : oj_retain(b)) : NULL;
    if ((a && A == NULL) || (b && B == NULL)) {
        oj_release(A);
        oj_release(B);
        return oj_last_status(n->eng);
    }
    int64_t M = ash[ar - 2], K = ash[ar - 1], N = bsh[br - 1];
    /* g with the 1-D dims restored: [batch..., M, N] */
    int nbat = n->out_rank[0] - (ea->rank == 1 ? 0 : 1) - (eb->rank == 1 ? 0 : 1);
    int64_t gshape[OJ_MAX_RANK];
    memcpy(gshape, n->out_shape[0], sizeof(int64_t) * (size_t)nbat);
    gshape[nbat] = M, gshape[nbat + 1] = N;
    oj_tensor *G = oj_reshape(go[0], nbat + 2, gshape);
    if (G && na) { /* dA = G @ B^T, summed over broadcast batches */
        oj_tensor *bt = oj_transpose(B, -2, -1);
        oj_tensor *t = oj_matmul(G, bt);
        oj_tensor *s = oj__sum_to(t, ar, ash);
        gi[0] = s ? oj_reshape(s, ea->rank, ea->shape) : NULL;
        oj_release(bt);
        oj_release(t);
        oj_release(s);
    }
    if (G && nb) { /* dB = A^T @ G, summed over broadcast batches */
        if (br == 2 && ar > 2) {
            /* one GEMM over all rows: [K, batch*M] @ [batch*M, N] */
            int64_t s2a[2] = {-1, K}, s2g[2] = {-1, N};
            oj_tensor *a2 = oj_reshape(A, 2, s2a), *g2 = oj_reshape(G, 2, s2g);
            oj_tensor *a2t = oj_transpose(a2, 0, 1);
            oj_tensor *t = oj_matmul(a2t, g2);
            gi[1] = t ? oj_reshape(t, eb->rank, eb->shape) : NULL;
            oj_release(a2);
            oj_release(g2);
            oj_release(a2t);
            oj_release(t);
        } else {
            oj_tensor *at = oj_transpose(A, -2, -1);
            oj_tensor *t = oj_matmul(at, G);
            oj_tensor *s = oj__sum_to(t, br, bsh);
            gi[1] = s ? oj_reshape(s, eb->rank, eb->shape) : NULL;
            oj_release(at);
            oj_release(t);
            oj_release(s);
        }
    }
    oj_release(G);
    oj_release(A);
    oj_release(B);
    return oj_last_status(n->eng);
}

/* Run the kernel for out = a @ b over broadcast batches. The batch dims
 * are merged where all three strides allow; the last merged dim goes to the
 * kernel as its batch, the others are looped over here. When b is the same
 * matrix for every batch and a's batches are evenly spaced rows, the batch
 * folds into M (one large GEMM). */
static bool matmul_dispatch(oj_engine *eng, const char *op, oj_tensor *out, const oj_tensor *a,
                            const mm_operand *A, const oj_tensor *b, const mm_operand *B, int nb,
                            const int64_t *bshape, bool accumulate) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *, bool) =
        OJ_KERNEL(eng, matmul, op);
    if (k == NULL) return false;
    int64_t M = A->shape[A->rank - 2], K = A->shape[A->rank - 1], N = B->shape[B->rank - 1];
    int64_t ars = A->stride[A->rank - 2], acs = A->stride[A->rank - 1];
    int64_t brs = B->stride[B->rank - 2], bcs = B->stride[B->rank - 1];
    /* batch strides per operand (0 where broadcast), skipping size-1 dims */
    int64_t sh[OJ_MAX_RANK], sa[OJ_MAX_RANK], sb[OJ_MAX_RANK], so[OJ_MAX_RANK];
    int nd = 0;
    int64_t ostride = M * N;
    int64_t ost[OJ_MAX_RANK];
    for (int d = nb - 1; d >= 0; d--) {
        ost[d] = ostride;
        ostride *= bshape[d];
    }
    for (int d = 0; d < nb; d++) {
        if (bshape[d] == 1) continue;
        int da = d - (nb - (A->rank - 2)), db = d - (nb - (B->rank - 2));
        sh[nd] = bshape[d];
        sa[nd] = (da >= 0 && A->shape[da] == bshape[d]) ? A->stride[da] : 0;
        sb[nd] = (db >= 0 && B->shape[db] == bshape[d]) ? B->stride[db] : 0;
        so[nd] = ost[d];
        nd++;
    }
    /* merge adjacent dims */
    int m = 0;
    for (int d = 0; d < nd; d++) {
        if (m > 0 && sa[m - 1] == sa[d] * sh[d] && sb[m - 1] == sb[d] * sh[d] &&
            so[m - 1] == so[d] * sh[d]) {
            sh[m - 1] *= sh[d];
            sa[m - 1] = sa[d], sb[m - 1] = sb[d], so[m - 1] = so[d];
            continue;
        }
        sh[m] = sh[d], sa[m] = sa[d], sb[m] = sb[d], so[m] = so[d];
        m++;
    }
    oj_tensor va, vb, vo;
    if (m == 1 && sb[0] == 0 && sa[0] == M * ars) { /* fold the batch into M */
        kview(&va, a, 0, 1, sh[0] * M, K, 0, ars, acs);
        kview(&vb, b, 0, 1, K, N, 0, brs, bcs);
        kview(&vo, out, 0, 1, sh[0] * M, N, 0, N, 1);
        return oj__kernel_ok(eng, k(eng, &vo, &va, &vb, accumulate), op);
    }
    int64_t bt = m ? sh[m - 1] : 1;
    int64_t kb_a = m ? sa[m - 1] : 0, kb_b = m ? sb[m - 1] : 0;
    int64_t outer = 1;
    for (int d = 0; d + 1 < m; d++) outer *= sh[d];
    int64_t idx[OJ_MAX_RANK] = {0};
    for (int64_t o = 0; o < outer; o++) {
        int64_t offa = 0, offb = 0, offo = 0;
        for (int d = 0; d + 1 < m; d++) {
            offa += idx[d] * sa[d];
            offb += idx[d] * sb[d];
            offo += idx[d] * so[d];
        }
        kview(&va, a, offa, bt, M, K, kb_a, ars, acs);
        kview(&vb, b, offb, bt, K, N, kb_b, brs, bcs);
        kview(&vo, out, offo, bt, M, N, M * N, N, 1);
        if (!oj__kernel_ok(eng, k(eng, &vo, &va, &vb, accumulate), op)) return false;
        for (int d = m - 2; d >= 0; d--) {
            if (++idx[d] < sh[d]) break;
            idx[d] = 0;
        }
    }
    return true;
}

static oj_tensor *matmul_impl(const char *op, oj_tensor *a, oj_tensor *b) {
    oj_tensor *in[2] = {a, b};
    oj_engine *eng = oj__ops_engine(op, 2, in);
    if (eng == NULL) return NULL;
    char b1[128], b2[128];
    if (a->rank == 0 || b->rank == 0) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: both arguments need at least 1 dim, got %s and %s",
                     op, oj__shape_fmt(b1, sizeof b1, a->rank, a->shape),
                     oj__shape_fmt(b2, sizeof b2, b->rank, b->shape));
        return NULL;
    }
    if (!float_pair(eng, op, a, b)) return NULL;
    mm_operand A, B;
    mm_operand_of(a, false, &A);
    mm_operand_of(b, true, &B);
    int64_t M = A.shape[A.rank - 2], K = A.shape[A.rank - 1];
    int64_t K2 = B.shape[B.rank - 2], N = B.shape[B.rank - 1];
    if (K != K2) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: shapes %s and %s do not fit: inner dims %lld != %lld",
                     op, oj__shape_fmt(b1, sizeof b1, a->rank, a->shape),
                     oj__shape_fmt(b2, sizeof b2, b->rank, b->shape), (long long)K,
                     (long long)K2);
        return NULL;
    }
    int nb;
    int64_t bshape[OJ_MAX_RANK];
    if (!oj__broadcast_shapes(eng, op, A.rank - 2, A.shape, B.rank - 2, B.shape, &nb, bshape))
        return NULL;
    int orank = nb;
    int64_t oshape[OJ_MAX_RANK];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nb);
    if (a->rank != 1) oshape[orank++] = M;
    if (b->rank != 1) oshape[orank++] = N;
    oj_tensor *out = oj__tensor_alloc(eng, orank, oshape, a->dtype, op);
    if (out == NULL) return NULL;
    if (!matmul_dispatch(eng, op, out, a, &A, b, &B, nb, bshape, false)) {
        oj_release(out);
        return NULL;
    }
    oj_node *nd = oj__node_begin(eng, op, matmul_backward, 2, a, b);
    if (nd) { /* each operand only for the other's gradient */
        oj__node_save(nd, oj__node_needs(nd, 1) ? a : NULL);
        oj__node_save(nd, oj__node_needs(nd, 0) ? b : NULL);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj_matmul(oj_tensor *a, oj_tensor *b) {
    oj_tensor *ac_in[2] = {a, b};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 2, ac_in, oj_matmul(ac[0], ac[1]));
    return matmul_impl("matmul", a, b);
}

oj_tensor *oj_bmm(oj_tensor *a, oj_tensor *b) {
    oj_tensor *ac_in[2] = {a, b};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 2, ac_in, oj_bmm(ac[0], ac[1]));
    oj_tensor *in[2] = {a, b};
    oj_engine *eng = oj__ops_engine("bmm", 2, in);
    if (eng == NULL) return NULL;
    if (a->rank != 3 || b->rank != 3 || a->shape[0] != b->shape[0]) {
        char b1[128], b2[128];
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "bmm: expected [B, N, K] and [B, K, M] with one batch size, got %s and %s",
                     oj__shape_fmt(b1, sizeof b1, a->rank, a->shape),
                     oj__shape_fmt(b2, sizeof b2, b->rank, b->shape));
        return NULL;
    }
    return matmul_impl("bmm", a, b);
}

/* ---------------------------------------------------------------- linear */

/* Can t's leading dims (all but the last) be walked as rows of one stride?
 * Sets *rows and *rs. */
static bool rows_view(const oj_tensor *t, int64_t *rows, int64_t *rs) {
    int64_t n = 1, stride = 0;
    bool ok = true;
    for (int d = t->rank - 2; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (n == 1) stride = t->stride[d]; /* innermost non-1 row dim */
        else if (t->stride[d] != stride * n) ok = false;
        n *= t->shape[d];
    }
    *rows = n;
    *rs = stride;
    return ok;
}

/* dW = g^T x [out, in] and db = g's rows summed [out] from one backend
 * call (matmul_bgrad: the GEMM's epilogue reduces g as it reads it), g2
 * [N, out], x [..., in]. True when done: gi[1], gi[2] set, or left NULL
 * with the error recorded when it failed; false with nothing set or
 * recorded when the backend has no entry or does not take these operands
 * (the caller then runs the GEMM and the reduction). */
static bool wgrad_bgrad(oj_engine *eng, oj_tensor *g2, oj_tensor *x, int64_t in_f,
                        int64_t out_f, oj_tensor **gi) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *, oj_tensor *) =
        eng->backend->matmul_bgrad;
    int64_t rows, gs, xrows, xs;
    if (k == NULL || g2->dtype != x->dtype || in_f == 0 || out_f == 0 ||
        !rows_view(g2, &rows, &gs) || !rows_view(x, &xrows, &xs) || rows != xrows || rows < 1 ||
        g2->stride[1] != 1 || x->stride[x->rank - 1] != 1)
        return false;
    int64_t ws[2] = {out_f, in_f};
    oj_tensor *dw = oj__tensor_alloc(eng, 2, ws, x->dtype, "linear");
    oj_tensor *db = dw ? oj__tensor_alloc(eng, 1, &out_f, x->dtype, "linear") : NULL;
    if (db == NULL) {
        oj_release(dw);
        return true;
    }
    oj_tensor va, vb, vo, vd = *db;
    kview(&va, g2, 0, 1, out_f, rows, 0, 1, gs); /* g^T [out, N] */
    kview(&vb, x, 0, 1, rows, in_f, 0, xs, 1);
    kview(&vo, dw, 0, 1, out_f, in_f, 0, in_f, 1);
    oj_status st = k(eng, &vo, &va, &vb, &vd);
    if (st != OJ_OK) {
        oj_release(dw);
        oj_release(db);
        if (st == OJ_ERR_UNSUPPORTED) return false;
        oj__kernel_ok(eng, st, "linear");
        return true;
    }
    gi[1] = dw;
    gi[2] = db;
    return true;
}

/* The gradients of y = x W^T + b given dy (go): gi[0] dx (x's shape, xe),
 * gi[1] dW, gi[2] db, each only where need[i]; x is read only for dW, w
 * (shape we) only for dx (either may be NULL otherwise). Shared by linear
 * and gelu_linear. */
static void linear_grads(oj_engine *eng, oj_tensor *g, oj_tensor *x, const oj_edge *xe,
                         oj_tensor *w, const oj_edge *we, const bool need[3], oj_tensor **gi) {
    int64_t in_f = we->shape[1], out_f = we->shape[0];
    int64_t g2s[2] = {-1, out_f}, x2s[2] = {-1, in_f};
    if (in_f == 0 || out_f == 0) { /* -1 cannot be inferred from 0 elements */
        int64_t rows = 1;
        for (int d = 0; d + 1 < xe->rank; d++) rows *= xe->shape[d];
        g2s[0] = x2s[0] = rows;
    }
    oj_tensor *g2 = oj_reshape(g, 2, g2s);
    if (g2 == NULL) return;
    if (need[0]) { /* dx = g W, [N, out] @ [out, in] */
        oj_tensor *dx = oj_matmul(g2, w);
        gi[0] = dx ? oj_reshape(dx, xe->rank, xe->shape) : NULL;
        oj_release(dx);
    }
    if (need[1] && need[2] && wgrad_bgrad(eng, g2, x, in_f, out_f, gi)) { /* dW and db */
        oj_release(g2);
        return;
    }
    if (need[1]) { /* dW = g^T x, [out, N] @ [N, in] */
        oj_tensor *x2 = oj_reshape(x, 2, x2s);
        oj_tensor *gt = oj_transpose(g2, 0, 1);
        gi[1] = oj_matmul(gt, x2);
        oj_release(x2);
        oj_release(gt);
    }
    if (need[2]) { /* db = sum of g over rows */
        if (eng->device.type != OJ_DEVICE_CPU && (g2->dtype == OJ_BF16 || g2->dtype == OJ_F16)) {
            /* on a device, bf16/f16: ones [1, N] @ g, the GEMM's f32
             * accumulation at memory speed (the column reduction kernel
             * took 5x longer) */
            int64_t os[2] = {1, g2->shape[0]};
            oj_tensor *ones = oj_full(eng, 2, os, g2->dtype, 1.0);
            oj_tensor *sm = ones ? oj_matmul(ones, g2) : NULL; /* [1, out] */
            gi[2] = sm ? oj_reshape(sm, 1, &out_f) : NULL;
            oj_release(sm);
            oj_release(ones);
        } else {
            int d0 = 0;
            gi[2] = oj_sum(g2, 1, &d0, false);
        }
    }
    oj_release(g2);
}

/* saved (slots 0, 1): x when W needs a gradient, W when x does, NULL
 * otherwise (a write to the other invalidates nothing, as torch). */
static oj_status linear_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    bool need[3] = {oj__node_needs(n, 0), oj__node_needs(n, 1),
                    n->n_in > 2 && oj__node_needs(n, 2)};
    oj_tensor *x = need[1] ? oj__node_saved(n, 0) : NULL;
    oj_tensor *w = need[0] ? oj__node_saved(n, 1) : NULL;
    if ((need[1] && x == NULL) || (need[0] && w == NULL)) return oj_last_status(n->eng);
    linear_grads(n->eng, go[0], x, &n->in[0], w, &n->in[1], need, gi);
    return oj_last_status(n->eng);
}

/* y = x W^T + b with linear's node; with act (not NULL) also *act =
 * gelu_tanh(y), a plain tensor (no node), from the backend's fused
 * matmul_bias_act entry where it applies, else left NULL. */
static oj_tensor *linear_impl(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, oj_tensor **act) {
    const char *op = "linear";
    oj_tensor *in[3] = {x, weight, bias};
    int nin = bias ? 3 : 2;
    oj_engine *eng = oj__ops_engine(op, nin, in);
    if (eng == NULL) return NULL;
    char b1[128], b2[128], b3[128];
    if (x->rank < 1 || weight->rank != 2 || x->shape[x->rank - 1] != weight->shape[1]) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "linear: x %s and weight %s do not fit: expected x [..., in] and weight "
                     "[out, in]",
                     oj__shape_fmt(b1, sizeof b1, x->rank, x->shape),
                     oj__shape_fmt(b2, sizeof b2, weight->rank, weight->shape));
        return NULL;
    }
    if (bias && (bias->rank != 1 || bias->shape[0] != weight->shape[0])) {
        oj_set_error(eng, OJ_ERR_SHAPE, "linear: bias %s does not fit weight %s: expected [%lld]",
                     oj__shape_fmt(b3, sizeof b3, bias->rank, bias->shape),
                     oj__shape_fmt(b2, sizeof b2, weight->rank, weight->shape),
                     (long long)weight->shape[0]);
        return NULL;
    }
    if (!float_pair(eng, op, x, weight) || (bias && !float_pair(eng, op, x, bias))) return NULL;
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *, bool) =
        OJ_KERNEL(eng, matmul, op);
    if (k == NULL) return NULL;
    int64_t in_f = weight->shape[1], out_f = weight->shape[0];
    int64_t oshape[OJ_MAX_RANK];
    memcpy(oshape, x->shape, sizeof(int64_t) * (size_t)x->rank);
    oshape[x->rank - 1] = out_f;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, oshape, x->dtype, op);
    if (out == NULL) return NULL;
    int64_t rows, rs;
    oj_tensor *xc = NULL; /* contiguous copy when x's rows are not evenly spaced */
    if (!rows_view(x, &rows, &rs)) {
        bool prev = oj_set_grad_enabled(eng, false);
        xc = oj__contiguous(x);
        oj_set_grad_enabled(eng, prev);
        if (xc == NULL) {
            oj_release(out);
            return NULL;
        }
        rows_view(xc, &rows, &rs);
    }
    const oj_tensor *xs = xc ? xc : x;
    bool ok = true;
    if (act && bias && eng->backend->matmul_bias_act && bias->dtype == out->dtype && rows > 0 &&
        out_f > 0) { /* out and gelu(out) from one GEMM: *act */
        oj_tensor *g = oj__tensor_alloc(eng, x->rank, oshape, x->dtype, op);
        oj_status st = g ? OJ_OK : oj_last_status(eng);
        if (g) {
            oj_tensor va, vb, vo, vp;
            kview(&va, xs, 0, 1, rows, in_f, 0, rs, xs->stride[xs->rank - 1]);
            kview(&vb, weight, 0, 1, in_f, out_f, 0, weight->stride[1], weight->stride[0]);
            kview(&vo, g, 0, 1, rows, out_f, 0, out_f, 1);
            kview(&vp, out, 0, 1, rows, out_f, 0, out_f, 1);
            st = eng->backend->matmul_bias_act(eng, &vo, &va, &vb, bias, &vp, OJ_UN_GELU_TANH);
        }
        if (st == OJ_OK) {
            *act = g;
        } else {
            oj_release(g);
            if (st != OJ_ERR_UNSUPPORTED) {
                if (g) oj__kernel_ok(eng, st, op);
                oj_release(xc);
                oj_release(out);
                return NULL;
            }
        }
    }
    /* the backend adds the bias itself when it can (matmul_bias), else
     * out starts as the broadcast bias and the GEMM accumulates onto it */
    const bool done = act && *act; /* out written above */
    bool fused = bias && eng->backend->matmul_bias && bias->dtype == out->dtype && rows > 0 &&
                 out_f > 0;
    if (bias && !fused && !done) {
        oj_status (*cp)(oj_engine *, oj_tensor *, const oj_tensor *) = OJ_KERNEL(eng, copy, op);
        ok = cp && oj__kernel_ok(eng, cp(eng, out, bias), op);
    }
    if (ok && rows > 0 && out_f > 0 && !done) {
        oj_tensor va, vb, vo;
        kview(&va, xs, 0, 1, rows, in_f, 0, rs, xs->stride[xs->rank - 1]);
        kview(&vb, weight, 0, 1, in_f, out_f, 0, weight->stride[1], weight->stride[0]);
        kview(&vo, out, 0, 1, rows, out_f, 0, out_f, 1);
        ok = oj__kernel_ok(eng, fused ? eng->backend->matmul_bias(eng, &vo, &va, &vb, bias)
                                      : k(eng, &vo, &va, &vb, bias != NULL),
                           op);
    }
    oj_release(xc);
    if (!ok) {
        if (act) {
            oj_release(*act);
            *act = NULL;
        }
        oj_release(out);
        return NULL;
    }
    oj_node *nd = oj__node_begin_v(eng, op, linear_backward, nin, in);
    if (nd) {
        oj__node_save(nd, oj__node_needs(nd, 1) ? x : NULL);
        oj__node_save(nd, oj__node_needs(nd, 0) ? weight : NULL);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

/* ---------------------------------------------------------------- linear over f32 weights */

/* Under FAST autocast a linear whose weight (and bias) is f32 (the master
 * copy an optimizer updates) records its node over the f32 weight and bias
 * themselves, not over their 16-bit casts: the forward GEMM reads the
 * casts (or the kept weight copies) as before, and the backward writes dW
 * in f32 straight from the GEMM's f32 sums (cuBLAS C f32, compute 32F), in
 * the memory layout of the weight (a transposed view, gpt2's Conv1D [in,
 * out] seen as [out, in], gets a gradient whose transpose is contiguous:
 * the transpose's backward hands the leaf a dense tensor). It replaces a
 * 16-bit dW, its cast to f32 and the leaf's transposed copy (16 bytes a
 * parameter) by 4 bytes a parameter, and dW is not rounded to 16 bits on
 * the way (FAST's contract: not the unfused bits). db is summed in f32 by
 * the backend's col_sum (one pass over dy; OJAS_CUDA_COLSUM=0 turns the
 * CUDA one off), else it is the 16-bit column sum of dy as before, cast to
 * f32.
 * EXACT keeps the casts' nodes (the 16-bit dW's bits). OJAS_LINEAR_MASTER=0
 * turns it off (comparisons); read at each call. */
static bool master_applies(const oj_tensor *x, const oj_tensor *weight, const oj_tensor *bias) {
    if (!oj__live(x) || !oj__live(weight) || (bias && !oj__live(bias))) return false;
    oj_engine *eng = x->eng;
    if (!oj__env_flag("OJAS_LINEAR_MASTER", true)) return false;
    oj_dtype dt = eng->autocast_dtype;
    return eng->autocast && eng->grad_enabled && eng->numerics == OJ_NUMERICS_FAST &&
           (dt == OJ_BF16 || dt == OJ_F16) && weight->eng == eng && weight->dtype == OJ_F32 &&
           weight->requires_grad && weight->rank == 2 &&
           (x->dtype == OJ_F32 || x->dtype == dt) &&
           (bias == NULL || (bias->eng == eng && bias->dtype == OJ_F32));
}

/* The 16-bit operands of a linear over f32 weights: x as autocast casts it
 * (with its cast node: x's gradient flows through it), W and b cast with no
 * node (the kept weight copy where there is one). False with the error
 * recorded. */
static bool master_operands(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, oj_tensor **xl,
                            oj_tensor **wl, oj_tensor **bl) {
    oj_engine *eng = x->eng;
    oj_dtype dt = eng->autocast_dtype;
    *xl = x->dtype == dt ? oj_retain(x) : oj__autocast_cast(x, dt);
    bool prev = oj_set_grad_enabled(eng, false);
    *wl = *xl ? oj__autocast_cast(weight, dt) : NULL;
    *bl = bias && *wl ? oj__autocast_cast(bias, dt) : NULL;
    oj_set_grad_enabled(eng, prev);
    if (*xl && *wl && (bias == NULL || *bl)) return true;
    oj_release(*xl), oj_release(*wl), oj_release(*bl);
    *xl = *wl = *bl = NULL;
    return false;
}

/* Is w [out, in] laid out as a dense [in, out] (its transpose contiguous)? */
static bool master_transposed(const oj_tensor *w) {
    return w->shape[0] > 1 && w->shape[1] > 1 && w->stride[0] == 1 && w->stride[1] == w->shape[0];
}

/* dW = g^T x in f32, [out, in] (transposed: stored as a dense [in, out] =
 * x^T g, the returned tensor its transpose view), g [..., out] and x [...,
 * in] 16-bit; NULL with the error recorded. */
static oj_tensor *master_wgrad(oj_engine *eng, oj_tensor *g, oj_tensor *x, int64_t in_f,
                               int64_t out_f, bool transposed) {
    const char *op = "linear";
    int64_t rows, gs, xrows, xs;
    oj_tensor *gc = NULL, *xc = NULL; /* contiguous copies where the rows are not evenly spaced */
    if (!rows_view(g, &rows, &gs) || g->stride[g->rank - 1] != 1) {
        if ((gc = oj__contiguous(g)) == NULL) return NULL;
        rows_view(gc, &rows, &gs);
    }
    if (!rows_view(x, &xrows, &xs) || x->stride[x->rank - 1] != 1) {
        if ((xc = oj__contiguous(x)) == NULL) {
            oj_release(gc);
            return NULL;
        }
        rows_view(xc, &xrows, &xs);
    }
    const oj_tensor *gv = gc ? gc : g, *xv = xc ? xc : x;
    int64_t ws[2] = {transposed ? in_f : out_f, transposed ? out_f : in_f};
    oj_tensor *dw = oj__tensor_alloc(eng, 2, ws, OJ_F32, op), *out = NULL;
    if (dw) {
        oj_tensor va, vb, vo;
        if (transposed) { /* dW^T [in, out] = x^T [in, N] @ g [N, out] */
            kview(&va, xv, 0, 1, in_f, rows, 0, 1, xs);
            kview(&vb, gv, 0, 1, rows, out_f, 0, gs, 1);
        } else { /* dW [out, in] = g^T [out, N] @ x [N, in] */
            kview(&va, gv, 0, 1, out_f, rows, 0, 1, gs);
            kview(&vb, xv, 0, 1, rows, in_f, 0, xs, 1);
        }
        kview(&vo, dw, 0, 1, ws[0], ws[1], 0, ws[1], 1);
        if (oj__kernel_ok(eng, eng->backend->matmul(eng, &vo, &va, &vb, false), op))
            out = transposed ? oj_transpose(dw, 0, 1) : oj_retain(dw);
    }
    oj_release(dw);
    oj_release(gc);
    oj_release(xc);
    return out;
}

/* db [out] f32 = g's rows summed by the backend's col_sum (one pass over
 * g, f32 out), g [..., out] 16-bit; NULL with nothing recorded when the
 * backend has no col_sum or does not take g, NULL with the error recorded
 * when it failed. */
static oj_tensor *master_bgrad(oj_engine *eng, oj_tensor *g, int64_t out_f) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *) = eng->backend->col_sum;
    int64_t rows, gs;
    if (k == NULL || out_f < 1 || !rows_view(g, &rows, &gs) || rows < 1 ||
        g->stride[g->rank - 1] != 1)
        return NULL;
    oj_tensor v = *g;
    v.rank = 2;
    v.shape[0] = rows, v.shape[1] = out_f;
    v.stride[0] = gs, v.stride[1] = 1;
    oj_tensor *db = oj__tensor_alloc(eng, 1, &out_f, OJ_F32, "linear");
    if (db == NULL) return NULL;
    oj_status st = k(eng, db, &v);
    if (st == OJ_OK) return db;
    oj_release(db);
    if (st != OJ_ERR_UNSUPPORTED) oj__kernel_ok(eng, st, "linear");
    return NULL;
}

/* The gradients of y = x W^T + b over f32 W and b (see above): gi[0] dx
 * (16-bit, xe's shape), gi[1] dW f32 (transposed: see master_wgrad), gi[2]
 * db f32 (the backend's col_sum where it has one, else the 16-bit sum
 * cast), each where need[i]; x (16-bit) read for dW, wl (W's 16-bit cast)
 * for dx. */
static void master_grads(oj_engine *eng, oj_tensor *g, oj_tensor *x, const oj_edge *xe,
                         oj_tensor *wl, const oj_edge *we, bool transposed, const bool need[3],
                         oj_tensor **gi) {
    if (need[2]) {
        gi[2] = master_bgrad(eng, g, we->shape[0]);
        if (oj_last_status(eng) != OJ_OK) return;
    }
    const bool low[3] = {need[0], false, need[2] && gi[2] == NULL};
    oj_tensor *lg[3] = {NULL, NULL, NULL};
    if (low[0] || low[2]) linear_grads(eng, g, x, xe, wl, we, low, lg);
    gi[0] = lg[0];
    if (low[2] && lg[2]) gi[2] = lg[2]->dtype == OJ_F32 ? oj_retain(lg[2]) : oj_cast(lg[2], OJ_F32);
    oj_release(lg[2]);
    if (need[1] && oj_last_status(eng) == OJ_OK)
        gi[1] = master_wgrad(eng, g, x, we->shape[1], we->shape[0], transposed);
}

/* saved (slots 0, 1): x (16-bit) when W needs a gradient, W's 16-bit cast
 * when x does; i[0]: W laid out transposed. */
static oj_status master_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    bool need[3] = {oj__node_needs(n, 0), oj__node_needs(n, 1),
                    n->n_in > 2 && oj__node_needs(n, 2)};
    oj_tensor *x = need[1] ? oj__node_saved(n, 0) : NULL;
    oj_tensor *w = need[0] ? oj__node_saved(n, 1) : NULL;
    if ((need[1] && x == NULL) || (need[0] && w == NULL)) return oj_last_status(n->eng);
    master_grads(n->eng, go[0], x, &n->in[0], w, &n->in[1], n->i[0] != 0, need, gi);
    return oj_last_status(n->eng);
}

/* linear (act NULL) or oj__linear_gelu over f32 W and b; *done false when
 * it does not apply (nothing made or recorded). */
static oj_tensor *linear_master(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, oj_tensor **act,
                                bool *done) {
    *done = master_applies(x, weight, bias);
    if (!*done) return NULL;
    oj_engine *eng = x->eng;
    oj_tensor *xl, *wl, *bl;
    if (!master_operands(x, weight, bias, &xl, &wl, &bl)) return NULL;
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *out = linear_impl(xl, wl, bl, act); /* checks the shapes; no node */
    oj_set_grad_enabled(eng, prev);
    oj_tensor *in[3] = {xl, weight, bias};
    oj_node *nd = out ? oj__node_begin_v(eng, "linear", master_backward, bias ? 3 : 2, in) : NULL;
    if (nd) {
        nd->i[0] = master_transposed(weight);
        oj__node_save(nd, oj__node_needs(nd, 1) ? xl : NULL);
        oj__node_save(nd, oj__node_needs(nd, 0) ? wl : NULL);
        oj__node_finish(nd, 1, &out);
    }
    oj_release(xl), oj_release(wl), oj_release(bl);
    return out;
}

oj_tensor *oj_linear(oj_tensor *x, oj_tensor *weight, oj_tensor *bias) {
    bool master;
    oj_tensor *y = linear_master(x, weight, bias, NULL, &master);
    if (master) return y;
    oj_tensor *ac_in[3] = {x, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in, oj_linear(ac[0], ac[1], ac[2]));
    return linear_impl(x, weight, bias, NULL);
}

oj_tensor *oj__linear_gelu(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, oj_tensor **act) {
    *act = NULL;
    bool master;
    oj_tensor *y = linear_master(x, weight, bias, act, &master);
    if (master) return y;
    oj_tensor *ac_in[3] = {x, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in, oj__linear_gelu(ac[0], ac[1], ac[2], act));
    return linear_impl(x, weight, bias, act);
}

/* ---------------------------------------------------------------- gelu_linear */

/* dx = (g W) * act'(x) in one backend call (matmul_act_backward: a GEMM
 * epilogue), g [..., out], W [out, in], x [..., in]; NULL with *st
 * OJ_ERR_UNSUPPORTED (nothing recorded) when the backend has no entry or
 * does not take these operands, another status when it failed. */
static oj_tensor *act_input_grad(oj_engine *eng, const char *op, oj_tensor *g, oj_tensor *x,
                                 oj_tensor *w, oj_unary_op act, oj_status *st) {
    *st = OJ_ERR_UNSUPPORTED;
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                   const oj_tensor *, oj_unary_op) = eng->backend->matmul_act_backward;
    int64_t in_f = w->shape[1], out_f = w->shape[0], rows, gs, xs;
    if (k == NULL || g->dtype != x->dtype || w->dtype != x->dtype || in_f == 0 || out_f == 0 ||
        !rows_view(g, &rows, &gs) || !rows_view(x, &rows, &xs) || rows < 2 ||
        g->stride[g->rank - 1] != 1 || x->stride[x->rank - 1] != 1)
        return NULL;
    oj_tensor *dx = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    if (dx == NULL) {
        *st = oj_last_status(eng);
        return NULL;
    }
    oj_tensor va, vb, vo, vx;
    kview(&va, g, 0, 1, rows, out_f, 0, gs, 1);
    kview(&vb, w, 0, 1, out_f, in_f, 0, w->stride[0], w->stride[1]);
    kview(&vo, dx, 0, 1, rows, in_f, 0, in_f, 1);
    kview(&vx, x, 0, 1, rows, in_f, 0, xs, 1);
    *st = k(eng, &vo, &va, &vb, &vx, act);
    if (*st != OJ_OK) {
        oj_release(dx);
        if (*st != OJ_ERR_UNSUPPORTED) oj__kernel_ok(eng, *st, op);
        return NULL;
    }
    return dx;
}

/* saved: x, W (over f32 W and b: W's 16-bit cast). i[0]: the unary op
 * (GELU erf or tanh); i[2]: the node is over f32 W and b (linear_master),
 * i[1]: W laid out transposed. The backward
 * recomputes h = gelu(x), then runs linear's and gelu's rules on it; dx
 * in one GEMM with the activation's gradient as its epilogue where the
 * backend has one (act_input_grad). */
static oj_status gelu_linear_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *x = oj__node_saved(n, 0), *w = oj__node_saved(n, 1);
    if (x == NULL || w == NULL) return oj_last_status(eng);
    oj_unary_op act = (oj_unary_op)n->i[0];
    bool need[3] = {oj__node_needs(n, 0), oj__node_needs(n, 1),
                    n->n_in > 2 && oj__node_needs(n, 2)};
    if (need[0]) {
        oj_status st;
        gi[0] = act_input_grad(eng, n->op, go[0], x, w, act, &st);
        if (st != OJ_OK && st != OJ_ERR_UNSUPPORTED) return st;
        if (gi[0]) need[0] = false;
    }
    bool fused = gi[0] != NULL;
    if (fused && !need[1] && !need[2]) return oj_last_status(eng);
    oj_tensor *h = act == OJ_UN_GELU_TANH ? oj_gelu_tanh(x) : oj_gelu(x); /* grad mode is off */
    if (h == NULL) return oj_last_status(eng);
    oj_tensor *lg[3] = {NULL, NULL, NULL};
    if (n->i[2]) /* over f32 W and b (linear_master): w is W's 16-bit cast */
        master_grads(eng, go[0], h, &n->in[0], w, &n->in[1], n->i[1] != 0, need, lg);
    else
        linear_grads(eng, go[0], h, &n->in[0], w, &n->in[1], need, lg);
    gi[1] = lg[1];
    gi[2] = lg[2];
    if (!fused && need[0] && lg[0]) gi[0] = oj__unary_grad(eng, n->op, act, x, h, lg[0], 0.0, 0.0);
    oj_release(lg[0]);
    oj_release(h);
    return oj_last_status(eng);
}

/* gelu_linear's forward and node; act (or NULL): gelu(x) already made
 * (oj__linear_gelu), taken when it has x's shape and dtype. */
static oj_tensor *gelu_linear_impl(oj_tensor *x, oj_tensor *act, oj_tensor *weight,
                                   oj_tensor *bias, bool approximate) {
    const char *op = "gelu_linear";
    if (master_applies(x, weight, bias)) { /* over f32 W and b: see linear_master */
        oj_tensor *xl, *wl, *bl;
        if (!master_operands(x, weight, bias, &xl, &wl, &bl)) return NULL;
        oj_engine *eng = x->eng;
        bool prev = oj_set_grad_enabled(eng, false);
        oj_tensor *out = gelu_linear_impl(xl, act, wl, bl, approximate);
        oj_set_grad_enabled(eng, prev);
        oj_tensor *in[3] = {xl, weight, bias};
        oj_node *nd =
            out ? oj__node_begin_v(eng, op, gelu_linear_backward, bias ? 3 : 2, in) : NULL;
        if (nd) {
            nd->i[0] = approximate ? OJ_UN_GELU_TANH : OJ_UN_GELU_ERF;
            nd->i[1] = master_transposed(weight);
            nd->i[2] = 1;
            oj__node_save(nd, xl);
            oj__node_save(nd, wl);
            oj__node_finish(nd, 1, &out);
        }
        oj_release(xl), oj_release(wl), oj_release(bl);
        return out;
    }
    oj_tensor *in[3] = {x, weight, bias};
    int nin = bias ? 3 : 2;
    oj_engine *eng = oj__ops_engine(op, nin, in);
    if (eng == NULL) return NULL;
    if (!float_pair(eng, op, x, weight)) return NULL;
    bool prev = oj_set_grad_enabled(eng, false);
    bool take = act && act->dtype == x->dtype && act->rank == x->rank &&
                memcmp(act->shape, x->shape, sizeof(int64_t) * (size_t)x->rank) == 0;
    oj_tensor *h = take ? oj_retain(act) : approximate ? oj_gelu_tanh(x) : oj_gelu(x);
    oj_tensor *out = h ? oj_linear(h, weight, bias) : NULL; /* checks the shapes */
    oj_release(h);
    oj_set_grad_enabled(eng, prev);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin_v(eng, op, gelu_linear_backward, nin, in);
    if (nd) {
        nd->i[0] = approximate ? OJ_UN_GELU_TANH : OJ_UN_GELU_ERF;
        oj__node_save(nd, x);
        oj__node_save(nd, weight);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj_gelu_linear(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, bool approximate) {
    if (master_applies(x, weight, bias))
        return gelu_linear_impl(x, NULL, weight, bias, approximate);
    oj_tensor *ac_in[3] = {x, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in, oj_gelu_linear(ac[0], ac[1], ac[2], approximate));
    return gelu_linear_impl(x, NULL, weight, bias, approximate);
}

oj_tensor *oj__gelu_linear_act(oj_tensor *x, oj_tensor *act, oj_tensor *weight, oj_tensor *bias) {
    if (master_applies(x, weight, bias)) return gelu_linear_impl(x, act, weight, bias, true);
    oj_tensor *ac_in[3] = {x, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in, oj__gelu_linear_act(ac[0], act, ac[1], ac[2]));
    return gelu_linear_impl(x, act, weight, bias, true);
}

/* ---------------------------------------------------------------- cast_rows */

bool oj__cast_rows_fits(int n, oj_tensor *const *w) {
    if (n < 1 || n > 4 || w[0] == NULL) return false;
    oj_engine *eng = w[0]->eng;
    if (eng->backend->cast_multi == NULL) return false;
    for (int i = 0; i < n; i++)
        if (w[i] == NULL || w[i]->eng != eng || w[i]->rank != 2 || !oj_is_contiguous(w[i]) ||
            w[i]->shape[1] != w[0]->shape[1] || !oj_dtype_is_float(w[i]->dtype))
            return false;
    return true;
}

/* i: none; each input's rows from its edge. gi[k] = rows of go[0] cast
 * back to input k's dtype, every needed one in one cast_multi launch
 * (go[0] contiguous, else oj_cast per piece). */
static oj_status cast_rows_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *outs[4] = {NULL, NULL, NULL, NULL}, *views[4] = {NULL, NULL, NULL, NULL};
    int idx[4], m = 0;
    int64_t row = 0;
    bool ok = true;
    const bool multi = oj_is_contiguous(go[0]);
    for (int k = 0; k < n->n_in && ok; k++) {
        const oj_edge *e = &n->in[k];
        if (oj__node_needs(n, k)) {
            oj_tensor *v = oj_narrow(go[0], 0, row, e->shape[0]);
            if (!multi) { /* one cast each */
                gi[k] = v ? oj_cast(v, e->dtype) : NULL;
                ok = gi[k] != NULL;
                oj_release(v);
            } else {
                views[m] = v;
                outs[m] = oj__tensor_alloc(eng, e->rank, e->shape, e->dtype, n->op);
                idx[m] = k;
                ok = v && outs[m];
                m++;
            }
        }
        row += e->shape[0];
    }
    if (ok && m > 0)
        ok = oj__kernel_ok(eng, eng->backend->cast_multi(eng, m, outs, (const oj_tensor *const *)views),
                           n->op);
    for (int j = 0; j < m; j++) {
        oj_release(views[j]);
        if (ok) gi[idx[j]] = outs[j];
        else oj_release(outs[j]);
    }
    return oj_last_status(eng);
}

oj_tensor *oj__cast_rows(int n, oj_tensor *const *w, oj_dtype dt, int64_t pad) {
    const char *op = "cast_rows";
    oj_engine *eng = n >= 1 && n <= 4 ? oj__ops_engine(op, n, w) : NULL;
    if (eng == NULL) return NULL;
    if (!oj__cast_rows_fits(n, w) || !oj_dtype_is_float(dt) || pad < 0) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                     "%s: 1..4 contiguous 2-D float tensors of one column count, a float "
                     "dtype, pad >= 0 and the backend's cast_multi expected",
                     op);
        return NULL;
    }
    int64_t rows = 0, C = w[0]->shape[1];
    for (int i = 0; i < n; i++) rows += w[i]->shape[0];
    int64_t shape[2] = {rows + pad, C};
    oj_tensor *out = oj__tensor_alloc(eng, 2, shape, dt, op);
    if (out == NULL) return NULL;
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *views[4] = {NULL, NULL, NULL, NULL};
    bool ok = true;
    int64_t r = 0;
    for (int i = 0; i < n && ok; r += w[i]->shape[0], i++)
        ok = (views[i] = oj_narrow(out, 0, r, w[i]->shape[0])) != NULL;
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->cast_multi(eng, n, views, (const oj_tensor *const *)w),
                           op);
    for (int i = 0; i < n; i++) oj_release(views[i]);
    if (ok && pad > 0) {
        oj_tensor *z = oj_narrow(out, 0, rows, pad);
        ok = z && oj_fill_(z, 0.0) == OJ_OK;
        oj_release(z);
    }
    oj_set_grad_enabled(eng, prev);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    oj_node *nd = oj__node_begin_v(eng, op, cast_rows_backward, n, w);
    if (nd) oj__node_finish(nd, 1, &out);
    return out;
}

/* ---------------------------------------------------------------- swiglu_linear */

/* p = silu(gate) * up (gate, up: one float dtype and shape, checked), a
 * new contiguous tensor: the backend's fused entry when it has one (the
 * same bits), else silu then mul. Grad mode is off. NULL on an error. */
static oj_tensor *swiglu_product(oj_engine *eng, const char *op, oj_tensor *gate, oj_tensor *up) {
    if (eng->backend->swiglu_forward) {
        oj_tensor *p = oj__tensor_alloc(eng, gate->rank, gate->shape, gate->dtype, op);
        if (p && !oj__kernel_ok(eng, eng->backend->swiglu_forward(eng, p, gate, up), op)) {
            oj_release(p);
            p = NULL;
        }
        return p;
    }
    oj_tensor *s = oj_silu(gate);
    oj_tensor *p = s ? oj_mul(s, up) : NULL;
    oj_release(s);
    return p;
}

/* saved: gate, up, W (over f32 W and b, i[0] set: W's 16-bit cast; i[1]:
 * W laid out transposed). The backward recomputes p = silu(gate) * up, then
 * runs linear's rule on it, and mul's and silu's for gate and up: in one
 * pass (swiglu_backward) where the backend has it and dp has gate's
 * dtype, else s = silu(gate), dup = dp s, dgate = silu'(gate) (dp up). */
/* gate's and up's gradients (where the node needs them) from dp: the two
 * halves of one buffer where gate and up are the halves of one [..., 2F]
 * (the fused projection split in two; the split's backward passes them on
 * as a view), else two tensors; false with the error recorded. */
static bool swiglu_grad_bufs(oj_engine *eng, oj_node *n, oj_tensor *gate, oj_tensor *up, bool ng,
                             bool nu, oj_tensor **dg, oj_tensor **du) {
    oj_tensor *pair[2] = {gate, up}, *dgu[2] = {NULL, NULL};
    int r = ng && nu ? oj__tiled_grads(eng, n->op, 2, pair, dgu) : 0;
    *dg = dgu[0], *du = dgu[1];
    if (r == 0) {
        *dg = ng ? oj__tensor_alloc(eng, gate->rank, gate->shape, gate->dtype, n->op) : NULL;
        *du = nu ? oj__tensor_alloc(eng, up->rank, up->shape, up->dtype, n->op) : NULL;
    }
    if ((!ng || *dg) && (!nu || *du)) return true;
    oj_release(*dg);
    oj_release(*du);
    *dg = *du = NULL;
    return false;
}

/* The backward with the backend's swiglu_backward_p: dp = go W first,
 * then gate's and up's gradients with the product written over dp, then
 * W's (and the bias's) gradient from that product: gate and up read once
 * (no separate recompute of the product) and no buffer beyond the
 * gradients'. Over f32 W and b (i[0]) dW and db come from master_grads, as
 * in the recompute: f32 in W's layout (OJAS_SWIGLU_MASTER_DW=0: the 16-bit
 * dW and db, cast by the tape, for comparisons). OJAS_SWIGLU_BWD_P=0 keeps
 * the recompute. false when it does not apply (nothing done). */
static bool swiglu_linear_backward_p(oj_node *n, oj_tensor *const *go, oj_tensor **gi,
                                     oj_tensor *gate, oj_tensor *up, oj_tensor *w, bool ng,
                                     bool nu) {
    oj_engine *eng = n->eng;
    if (eng->backend->swiglu_backward_p == NULL || !oj__env_flag("OJAS_SWIGLU_BWD_P", true) ||
        !(ng || nu))
        return false;
    bool need[3] = {true, false, false};
    oj_tensor *lg[3] = {NULL, NULL, NULL};
    linear_grads(eng, go[0], NULL, &n->in[0], w, &n->in[2], need, lg); /* dp = go W */
    oj_tensor *dp = lg[0], *dg = NULL, *du = NULL;
    if (dp && (dp->dtype != gate->dtype || !oj_is_contiguous(dp))) { /* not the entry's */
        oj_release(dp);
        return false;
    }
    if (dp && swiglu_grad_bufs(eng, n, gate, up, ng, nu, &dg, &du) &&
        oj__kernel_ok(eng, eng->backend->swiglu_backward_p(eng, dg, du, dp, gate, up), n->op)) {
        gi[0] = dg;
        gi[1] = du;
        bool nw[3] = {false, oj__node_needs(n, 2), n->n_in > 3 && oj__node_needs(n, 3)};
        oj_tensor *wg[3] = {NULL, NULL, NULL};
        const bool master = n->i[0] && oj__env_flag("OJAS_SWIGLU_MASTER_DW", true);
        if ((nw[1] || nw[2]) && master) /* dW = go^T p in f32, db from go */
            master_grads(eng, go[0], dp, &n->in[0], w, &n->in[2], n->i[1] != 0, nw, wg);
        else if (nw[1] || nw[2]) /* dW = go^T p, db from go */
            linear_grads(eng, go[0], dp, &n->in[0], w, &n->in[2], nw, wg);
        gi[2] = wg[1];
        gi[3] = wg[2];
    } else {
        oj_release(dg);
        oj_release(du);
    }
    oj_release(dp);
    return true;
}

static oj_status swiglu_linear_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *gate = oj__node_saved(n, 0), *up = oj__node_saved(n, 1), *w = oj__node_saved(n, 2);
    if (gate == NULL || up == NULL || w == NULL) return oj_last_status(eng);
    bool ng = oj__node_needs(n, 0), nu = oj__node_needs(n, 1);
    if (swiglu_linear_backward_p(n, go, gi, gate, up, w, ng, nu)) return oj_last_status(eng);
    oj_tensor *p = swiglu_product(eng, n->op, gate, up); /* grad mode is off */
    if (p == NULL) return oj_last_status(eng);
    bool need[3] = {ng || nu, oj__node_needs(n, 2), n->n_in > 3 && oj__node_needs(n, 3)};
    oj_tensor *lg[3] = {NULL, NULL, NULL};
    if (n->i[0]) /* over f32 W and b (see linear_master): w is W's 16-bit cast */
        master_grads(eng, go[0], p, &n->in[0], w, &n->in[2], n->i[1] != 0, need, lg);
    else
        linear_grads(eng, go[0], p, &n->in[0], w, &n->in[2], need, lg); /* p: gate's shape */
    oj_release(p);
    gi[2] = lg[1];
    gi[3] = lg[2];
    if (lg[0] && eng->backend->swiglu_backward && lg[0]->dtype == gate->dtype) {
        oj_tensor *dg = NULL, *du = NULL;
        if (swiglu_grad_bufs(eng, n, gate, up, ng, nu, &dg, &du) &&
            oj__kernel_ok(eng, eng->backend->swiglu_backward(eng, dg, du, gate, up, lg[0]),
                          n->op)) {
            gi[0] = dg;
            gi[1] = du;
        } else {
            oj_release(dg);
            oj_release(du);
        }
    } else if (lg[0]) { /* mul's rule (g b, g a), then silu's */
        oj_tensor *s = oj_silu(gate);
        if (s && nu) gi[1] = oj_mul(lg[0], s);
        if (s && ng) {
            oj_tensor *ds = oj_mul(lg[0], up);
            gi[0] = ds ? oj__unary_grad(eng, n->op, OJ_UN_SILU, gate, s, ds, 0.0, 0.0) : NULL;
            oj_release(ds);
        }
        oj_release(s);
    }
    oj_release(lg[0]);
    return oj_last_status(eng);
}

oj_tensor *oj_swiglu_linear(oj_tensor *gate, oj_tensor *up, oj_tensor *weight, oj_tensor *bias) {
    const char *op = "swiglu_linear";
    if (master_applies(gate, weight, bias) && oj__live(up) && up->eng == gate->eng &&
        (up->dtype == OJ_F32 || up->dtype == gate->eng->autocast_dtype)) {
        /* over f32 W and b (see linear_master) */
        oj_engine *eng = gate->eng;
        oj_tensor *gl, *wl, *bl;
        if (!master_operands(gate, weight, bias, &gl, &wl, &bl)) return NULL;
        const oj_dtype adt = eng->autocast_dtype;
        oj_tensor *ul = up->dtype == adt ? oj_retain(up) : oj__autocast_cast(up, adt);
        bool prev = oj_set_grad_enabled(eng, false);
        oj_tensor *out = ul ? oj_swiglu_linear(gl, ul, wl, bl) : NULL;
        oj_set_grad_enabled(eng, prev);
        oj_tensor *in[4] = {gl, ul, weight, bias};
        oj_node *nd = out ? oj__node_begin_v(eng, op, swiglu_linear_backward, bias ? 4 : 3, in)
                          : NULL;
        if (nd) {
            nd->i[0] = 1;
            nd->i[1] = master_transposed(weight);
            oj__node_save(nd, gl);
            oj__node_save(nd, ul);
            oj__node_save(nd, wl);
            oj__node_finish(nd, 1, &out);
        }
        oj_release(gl), oj_release(ul), oj_release(wl), oj_release(bl);
        return out;
    }
    oj_tensor *ac_in[4] = {gate, up, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 4, ac_in, oj_swiglu_linear(ac[0], ac[1], ac[2], ac[3]));
    oj_tensor *in[4] = {gate, up, weight, bias};
    int nin = bias ? 4 : 3;
    oj_engine *eng = oj__ops_engine(op, nin, in);
    if (eng == NULL) return NULL;
    if (!float_pair(eng, op, gate, up) || !float_pair(eng, op, gate, weight)) return NULL;
    bool same = gate->rank == up->rank;
    for (int d = 0; same && d < gate->rank; d++) same = gate->shape[d] == up->shape[d];
    if (!same) {
        char b1[160], b2[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: gate %s and up %s must have one shape", op,
                     oj__shape_fmt(b1, sizeof b1, gate->rank, gate->shape),
                     oj__shape_fmt(b2, sizeof b2, up->rank, up->shape));
        return NULL;
    }
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *p = swiglu_product(eng, op, gate, up);
    oj_tensor *out = p ? oj_linear(p, weight, bias) : NULL; /* checks the shapes */
    oj_release(p);
    oj_set_grad_enabled(eng, prev);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin_v(eng, op, swiglu_linear_backward, nin, in);
    if (nd) {
        oj__node_save(nd, gate);
        oj__node_save(nd, up);
        oj__node_save(nd, weight);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

/* ---------------------------------------------------------------- mul_linear */

/* The edge of p = a * b seen as [a's leading dims, a[-2] * a[-1]] (the
 * linear's input) in p's dtype. */
static void mul_linear_edge(const oj_tensor *a, oj_dtype dt, oj_edge *xe) {
    memset(xe, 0, sizeof *xe);
    xe->rank = a->rank - 1;
    for (int d = 0; d < a->rank - 2; d++) xe->shape[d] = a->shape[d];
    xe->shape[a->rank - 2] = a->shape[a->rank - 2] * a->shape[a->rank - 1];
    xe->dtype = dt;
}

/* Does the backend's mul_row_backward take dp, a and b (b one value per
 * row of a: [..., 1] against [..., D], D > 1; one float dtype; all
 * contiguous)? */
static bool mul_row_fits(const oj_engine *eng, const oj_tensor *dp, const oj_tensor *a,
                         const oj_tensor *b) {
    const int r = a->rank;
    if (eng->backend->mul_row_backward == NULL || r < 1 || b->rank != r || dp->rank != r ||
        a->shape[r - 1] < 2 || b->shape[r - 1] != 1 || b->dtype != a->dtype ||
        dp->dtype != a->dtype ||
        (a->dtype != OJ_F32 && a->dtype != OJ_BF16 && a->dtype != OJ_F16) ||
        !oj_is_contiguous(a) || !oj_is_contiguous(b) || !oj_is_contiguous(dp))
        return false;
    for (int d = 0; d < r - 1; d++)
        if (b->shape[d] != a->shape[d]) return false;
    return true;
}

/* saved: a, b, W (over f32 W, i[0] set: W's 16-bit cast; i[1]: W laid
 * out transposed). The backward recomputes p = a * b (mul's bits), runs
 * linear's rule on p viewed as [..., K], then mul's rule (dp b, dp a, each
 * summed to its input's shape), as the three ops' nodes would; with b one
 * value per row of a, in one pass where the backend has it
 * (mul_row_backward: b's gradient summed in another order). */
static oj_status mul_linear_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *a = oj__node_saved(n, 0), *b = oj__node_saved(n, 1), *w = oj__node_saved(n, 2);
    if (a == NULL || b == NULL || w == NULL) return oj_last_status(eng);
    const bool na = oj__node_needs(n, 0), nb = oj__node_needs(n, 1);
    bool need[3] = {na || nb, oj__node_needs(n, 2), false};
    oj_tensor *p = need[1] ? oj_mul(a, b) : NULL; /* grad mode is off */
    if (need[1] && p == NULL) return oj_last_status(eng);
    oj_edge xe;
    mul_linear_edge(a, p ? p->dtype : n->out_dtype[0], &xe);
    oj_tensor *p2 = p ? oj_reshape(p, xe.rank, xe.shape) : NULL;
    oj_release(p);
    if (need[1] && p2 == NULL) return oj_last_status(eng);
    oj_tensor *lg[3] = {NULL, NULL, NULL};
    if (n->i[0]) /* over f32 W (see linear_master): w is W's 16-bit cast */
        master_grads(eng, go[0], p2, &xe, w, &n->in[2], n->i[1] != 0, need, lg);
    else
        linear_grads(eng, go[0], p2, &xe, w, &n->in[2], need, lg);
    oj_release(p2);
    gi[2] = lg[1];
    if (lg[0]) {
        oj_tensor *dp = oj_reshape(lg[0], a->rank, a->shape);
        if (dp && mul_row_fits(eng, dp, a, b)) { /* the backend's one pass */
            oj_tensor *da = na ? oj__tensor_alloc(eng, a->rank, a->shape, a->dtype, n->op) : NULL;
            oj_tensor *db = nb ? oj__tensor_alloc(eng, b->rank, b->shape, b->dtype, n->op) : NULL;
            if ((!na || da) && (!nb || db) &&
                oj__kernel_ok(eng, eng->backend->mul_row_backward(eng, da, db, dp, a, b), n->op)) {
                gi[0] = da;
                gi[1] = db;
            } else {
                oj_release(da);
                oj_release(db);
            }
        } else {
            oj_tensor *ga = dp && na ? oj_mul(dp, b) : NULL, *gb = dp && nb ? oj_mul(dp, a) : NULL;
            if (ga) gi[0] = oj__sum_to_input(n, 0, ga);
            if (gb) gi[1] = oj__sum_to_input(n, 1, gb);
            oj_release(ga);
            oj_release(gb);
        }
        oj_release(dp);
        oj_release(lg[0]);
    }
    return oj_last_status(eng);
}

oj_tensor *oj__mul_linear(oj_tensor *a, oj_tensor *b, oj_tensor *weight) {
    const char *op = "mul_linear";
    oj_tensor *in[3] = {a, b, weight};
    oj_engine *eng = oj__ops_engine(op, 3, in);
    if (eng == NULL) return NULL;
    if (oj_autocast_enabled(eng)) {
        /* as the chain runs under autocast: the product in a's and b's
         * dtype, then linear casting it and W. Fused when the product is
         * already in the autocast dtype (W's cast recorded as linear's
         * would be); else the chain itself */
        const oj_dtype adt = oj_autocast_dtype(eng);
        if (a->dtype != adt || b->dtype != adt || !oj_dtype_is_float(weight->dtype) ||
            weight->dtype == OJ_F64) {
            int64_t ks[OJ_MAX_RANK];
            oj_edge xe;
            mul_linear_edge(a, a->dtype, &xe);
            for (int d = 0; d < xe.rank; d++) ks[d] = xe.shape[d];
            oj_tensor *p = oj_mul(a, b);
            oj_tensor *p2 = p && a->rank >= 2 ? oj_reshape(p, xe.rank, ks) : NULL;
            oj_tensor *out = p2 ? oj_linear(p2, weight, NULL) : NULL;
            oj_release(p);
            oj_release(p2);
            return out;
        }
        const bool master = master_applies(a, weight, NULL); /* see linear_master */
        bool pg = master ? oj_set_grad_enabled(eng, false) : false;
        oj_tensor *wc = weight->dtype == adt ? oj_retain(weight) : oj__autocast_cast(weight, adt);
        if (wc == NULL) {
            if (master) oj_set_grad_enabled(eng, pg);
            return NULL;
        }
        bool prev = oj_set_autocast(eng, false, adt);
        oj_tensor *out = oj__mul_linear(a, b, wc);
        oj_set_autocast(eng, prev, adt);
        if (master) {
            oj_set_grad_enabled(eng, pg);
            oj_node *nd =
                out ? oj__node_begin(eng, op, mul_linear_backward, 3, a, b, weight) : NULL;
            if (nd) {
                nd->i[0] = 1;
                nd->i[1] = master_transposed(weight);
                oj__node_save(nd, a);
                oj__node_save(nd, b);
                oj__node_save(nd, wc);
                oj__node_finish(nd, 1, &out);
            }
        }
        oj_release(wc);
        return out;
    }
    if (a->rank < 2) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: a must have rank >= 2, got %d", op, a->rank);
        return NULL;
    }
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *p = oj_mul(a, b), *p2 = NULL, *out = NULL;
    bool same = p && p->rank == a->rank;
    for (int d = 0; same && d < a->rank; d++) same = p->shape[d] == a->shape[d];
    if (p && !same) {
        char b1[160], b2[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: b %s must broadcast to a's shape %s", op,
                     oj__shape_fmt(b1, sizeof b1, b->rank, b->shape),
                     oj__shape_fmt(b2, sizeof b2, a->rank, a->shape));
    } else if (p) {
        oj_edge xe;
        mul_linear_edge(a, p->dtype, &xe);
        p2 = oj_reshape(p, xe.rank, xe.shape);
        out = p2 ? oj_linear(p2, weight, NULL) : NULL; /* checks the shapes */
    }
    oj_release(p);
    oj_release(p2);
    oj_set_grad_enabled(eng, prev);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin(eng, op, mul_linear_backward, 3, a, b, weight);
    if (nd) {
        oj__node_save(nd, a);
        oj__node_save(nd, b);
        oj__node_save(nd, weight);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

/* ---------------------------------------------------------------- addmm */

/* out = beta * input + alpha * a @ b: d input = beta g (summed to input's
 * shape), da = alpha g b^T, db = alpha a^T g. */
static oj_status addmm_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *a = oj__node_saved(n, 0), *b = oj__node_saved(n, 1);
    if (a == NULL || b == NULL) return oj_last_status(n->eng);
    double beta = n->f[0], alpha = n->f[1];
    oj_tensor *g = go[0];
    if (oj__node_needs(n, 0)) {
        oj_tensor *t = oj_mul_scalar(g, beta);
        gi[0] = oj__sum_to_input(n, 0, t);
        oj_release(t);
    }
    for (int i = 1; i <= 2; i++) {
        if (!oj__node_needs(n, i)) continue;
        oj_tensor *tr = oj_transpose(i == 1 ? b : a, 0, 1);
        oj_tensor *m = i == 1 ? oj_matmul(g, tr) : oj_matmul(tr, g);
        gi[i] = alpha == 1.0 ? oj_retain(m) : oj_mul_scalar(m, alpha);
        oj_release(tr);
        oj_release(m);
    }
    return oj_last_status(n->eng);
}

oj_tensor *oj_addmm(oj_tensor *bias, oj_tensor *a, oj_tensor *b, double beta, double alpha) {
    oj_tensor *ac_in[3] = {bias, a, b};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in, oj_addmm(ac[0], ac[1], ac[2], beta, alpha));
    oj_tensor *in[3] = {bias, a, b};
    oj_engine *eng = oj__ops_engine("addmm", 3, in);
    if (eng == NULL) return NULL;
    char b1[128], b2[128], b3[128];
    if (a->rank != 2 || b->rank != 2) {
        oj_set_error(eng, OJ_ERR_SHAPE, "addmm: expected 2-D matrices, got %s and %s",
                     oj__shape_fmt(b1, sizeof b1, a->rank, a->shape),
                     oj__shape_fmt(b2, sizeof b2, b->rank, b->shape));
        return NULL;
    }
    /* bias must broadcast to [n, p] without enlarging it */
    bool fits = bias->rank <= 2 && a->shape[1] == b->shape[0];
    for (int d = 0; fits && d < bias->rank; d++) {
        int64_t want = d == bias->rank - 1 ? b->shape[1] : a->shape[0];
        fits = bias->shape[d] == 1 || bias->shape[d] == want;
    }
    if (!fits && a->shape[1] == b->shape[0]) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "addmm: input %s does not broadcast to the product's shape [%lld, %lld]",
                     oj__shape_fmt(b3, sizeof b3, bias->rank, bias->shape),
                     (long long)a->shape[0], (long long)b->shape[1]);
        return NULL;
    }
    if (!float_pair(eng, "addmm", a, bias)) return NULL;
    /* forward composed with grad mode off; one addmm node records it */
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *p = matmul_impl("addmm", a, b);
    if (p && alpha != 1.0) {
        oj_tensor *s = oj_mul_scalar(p, alpha);
        oj_release(p);
        p = s;
    }
    oj_tensor *out = p;
    if (p && beta != 0.0) { /* beta == 0 ignores input, NaN included, as torch */
        oj_tensor *bb = beta == 1.0 ? oj_retain(bias) : oj_mul_scalar(bias, beta);
        out = bb ? oj_add(bb, p) : NULL;
        oj_release(bb);
        oj_release(p);
    }
    oj_set_grad_enabled(eng, prev);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin_v(eng, "addmm", addmm_backward, 3, in);
    if (nd) {
        nd->f[0] = beta;
        nd->f[1] = alpha;
        oj__node_save(nd, a);
        oj__node_save(nd, b);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}
