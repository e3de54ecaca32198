/* Elementwise ops (unary, binary, where, cast) and their backward rules. */
#include <math.h>

#include "ops/ops_common.h"

/* ---------------------------------------------------------------- unary */

typedef enum { UN_SAME, UN_FLOAT, UN_BOOL } un_out;

oj_tensor *oj__unary_grad(oj_engine *eng, const char *opname, oj_unary_op op, oj_tensor *x,
                          oj_tensor *y, oj_tensor *g, double alpha, double beta) {
    oj_tensor *dx = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, opname);
    if (dx == NULL) return NULL;
    oj_status st = eng->backend->unary_backward(eng, op, dx, x, y, g, alpha, beta);
    if (!oj__kernel_ok(eng, st, opname)) {
        oj_release(dx);
        return NULL;
    }
    return dx;
}

/* Which of x (bit 0) and y = f(x) (bit 1) the derivative of op reads
 * (oj_unary_grad_d / _f and the SIMD and CUDA kernels read the same). A
 * node saves only those, so an in-place write to the other invalidates
 * nothing (y = 2 x; y += 1 is legal, as in torch). */
static unsigned unary_grad_uses(oj_unary_op op) {
    switch (op) {
    case OJ_UN_NEG:
    case OJ_UN_SIGN:
    case OJ_UN_AFFINE: return 0u;
    case OJ_UN_EXP:
    case OJ_UN_SQRT:
    case OJ_UN_RSQRT:
    case OJ_UN_SIGMOID:
    case OJ_UN_TANH:
    case OJ_UN_RPOW_SCALAR:
    case OJ_UN_RECIPROCAL: return 2u;
    case OJ_UN_ELU: return 3u;
    default: return 1u;
    }
}

/* saved: x (when the derivative reads it), then y (likewise); i[0] op,
 * i[1] unary_grad_uses. The kernel takes x and y: one not saved is given
 * the other's (or dy's) handle, whose values it does not read. */
static oj_status unary_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    unsigned uses = (unsigned)n->i[1];
    oj_tensor *x = NULL, *y = NULL;
    int k = 0;
    if (uses & 1u) {
        x = oj__node_saved(n, k++);
        if (x == NULL) return oj_last_status(n->eng);
    }
    if (uses & 2u) {
        y = oj__node_saved(n, k);
        if (y == NULL) return oj_last_status(n->eng);
    }
    oj_tensor *xs = x ? x : y ? y : go[0];
    const oj_edge *e = &n->in[0];
    oj_tensor *dx = oj__tensor_alloc(n->eng, e->rank, e->shape, e->dtype, n->op);
    if (dx == NULL) return oj_last_status(n->eng);
    oj_status st = n->eng->backend->unary_backward(n->eng, (oj_unary_op)n->i[0], dx, xs,
                                                   y ? y : xs, go[0], n->f[0], n->f[1]);
    if (!oj__kernel_ok(n->eng, st, n->op)) {
        oj_release(dx);
        return oj_last_status(n->eng);
    }
    gi[0] = dx;
    return OJ_OK;
}

static oj_tensor *unary(const char *name, oj_unary_op op, oj_tensor *x, double a, double b,
                        un_out kind, bool differentiable) {
    oj_engine *eng = oj__ops_engine1(name, x);
    if (eng == NULL) return NULL;
    oj_dtype odt = kind == UN_BOOL    ? OJ_BOOL
                   : kind == UN_FLOAT ? oj__float_dtype(x->dtype)
                                      : x->dtype;
    oj_status (*k)(oj_engine *, oj_unary_op, oj_tensor *, const oj_tensor *, double, double) =
        OJ_KERNEL(eng, unary, name);
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, odt, name);
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, op, out, x, a, b), name)) {
        oj_release(out);
        return NULL;
    }
    if (differentiable && oj_dtype_is_float(odt)) {
        oj_node *nd = oj__node_begin(eng, name, unary_backward, 1, x);
        if (nd) {
            unsigned uses = unary_grad_uses(op);
            nd->i[0] = op;
            nd->i[1] = uses;
            nd->f[0] = a;
            nd->f[1] = b;
            if (uses & 1u) oj__node_save(nd, x);
            if (uses & 2u) {
                /* y through a separate handle, so the node does not own
                 * its own output (no reference cycle) */
                oj_tensor *y =
                    oj__tensor_view(out, out->rank, out->shape, out->stride, out->offset);
                oj__node_save(nd, y);
                oj_release(y);
            }
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

oj_tensor *oj_neg(oj_tensor *x) { return unary("neg", OJ_UN_NEG, x, 0, 0, UN_SAME, true); }
oj_tensor *oj_abs(oj_tensor *x) { return unary("abs", OJ_UN_ABS, x, 0, 0, UN_SAME, true); }
oj_tensor *oj_exp(oj_tensor *x) { return unary("exp", OJ_UN_EXP, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_log(oj_tensor *x) { return unary("log", OJ_UN_LOG, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_log1p(oj_tensor *x) { return unary("log1p", OJ_UN_LOG1P, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_sqrt(oj_tensor *x) { return unary("sqrt", OJ_UN_SQRT, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_rsqrt(oj_tensor *x) { return unary("rsqrt", OJ_UN_RSQRT, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_square(oj_tensor *x) { return unary("square", OJ_UN_SQUARE, x, 0, 0, UN_SAME, true); }
oj_tensor *oj_sign(oj_tensor *x) { return unary("sign", OJ_UN_SIGN, x, 0, 0, UN_SAME, true); }
oj_tensor *oj_reciprocal(oj_tensor *x) {
    return unary("reciprocal", OJ_UN_RECIPROCAL, x, 0, 0, UN_FLOAT, true);
}
oj_tensor *oj_sin(oj_tensor *x) { return unary("sin", OJ_UN_SIN, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_cos(oj_tensor *x) { return unary("cos", OJ_UN_COS, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_relu(oj_tensor *x) { return unary("relu", OJ_UN_RELU, x, 0, 0, UN_SAME, true); }
oj_tensor *oj_leaky_relu(oj_tensor *x, double slope) {
    return unary("leaky_relu", OJ_UN_LEAKY_RELU, x, slope, 0, UN_FLOAT, true);
}
oj_tensor *oj_gelu(oj_tensor *x) { return unary("gelu", OJ_UN_GELU_ERF, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_gelu_tanh(oj_tensor *x) {
    return unary("gelu_tanh", OJ_UN_GELU_TANH, x, 0, 0, UN_FLOAT, true);
}
oj_tensor *oj_silu(oj_tensor *x) { return unary("silu", OJ_UN_SILU, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_sigmoid(oj_tensor *x) {
    return unary("sigmoid", OJ_UN_SIGMOID, x, 0, 0, UN_FLOAT, true);
}
oj_tensor *oj_tanh(oj_tensor *x) { return unary("tanh", OJ_UN_TANH, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_softplus(oj_tensor *x, double beta, double threshold) {
    return unary("softplus", OJ_UN_SOFTPLUS, x, beta, threshold, UN_FLOAT, true);
}
oj_tensor *oj_elu(oj_tensor *x, double alpha) {
    return unary("elu", OJ_UN_ELU, x, alpha, 0, UN_FLOAT, true);
}
oj_tensor *oj_mish(oj_tensor *x) { return unary("mish", OJ_UN_MISH, x, 0, 0, UN_FLOAT, true); }
oj_tensor *oj_pow_scalar(oj_tensor *x, double e) {
    return unary("pow", OJ_UN_POW_SCALAR, x, e, 0, UN_FLOAT, true);
}
oj_tensor *oj_clamp(oj_tensor *x, double lo, double hi) {
    return unary("clamp", OJ_UN_CLAMP, x, lo, hi, UN_SAME, true);
}
oj_tensor *oj_affine(oj_tensor *x, double scale, double shift) {
    return unary("affine", OJ_UN_AFFINE, x, scale, shift, UN_FLOAT, true);
}
oj_tensor *oj_add_scalar(oj_tensor *x, double v) {
    return unary("add_scalar", OJ_UN_AFFINE, x, 1.0, v, UN_FLOAT, true);
}
oj_tensor *oj_mul_scalar(oj_tensor *x, double v) {
    return unary("mul_scalar", OJ_UN_AFFINE, x, v, 0.0, UN_FLOAT, true);
}
oj_tensor *oj_logical_not(oj_tensor *x) {
    return unary("logical_not", OJ_UN_NOT, x, 0, 0, UN_BOOL, false);
}
oj_tensor *oj_isnan(oj_tensor *x) { return unary("isnan", OJ_UN_ISNAN, x, 0, 0, UN_BOOL, false); }
oj_tensor *oj_isfinite(oj_tensor *x) {
    return unary("isfinite", OJ_UN_ISFINITE, x, 0, 0, UN_BOOL, false);
}

/* ---------------------------------------------------------------- binary */

static oj_tensor *binary_raw(const char *name, oj_binary_op op, oj_tensor *a, oj_tensor *b,
                             oj_dtype *odt_out, bool logical);

/* Backward rules compute with ops (grad mode is off during backward). */
static oj_status binary_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_binary_op op = (oj_binary_op)n->i[0];
    oj_tensor *g = go[0];
    oj_tensor *a = NULL, *b = NULL;
    bool na = oj__node_needs(n, 0), nb = oj__node_needs(n, 1);
    unsigned saved = (unsigned)n->i[1]; /* binary_saves: a (bit 0), b (bit 1) */
    if ((saved & 1u) && (a = oj__node_saved(n, 0)) == NULL) return oj_last_status(n->eng);
    if ((saved & 2u) && (b = oj__node_saved(n, 1)) == NULL) return oj_last_status(n->eng);
    oj_tensor *ga = NULL, *gb = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL;
    switch (op) {
    case OJ_BIN_ADD:
        ga = na ? oj_retain(g) : NULL;
        gb = nb ? oj_retain(g) : NULL;
        break;
    case OJ_BIN_SUB:
        ga = na ? oj_retain(g) : NULL;
        gb = nb ? oj_neg(g) : NULL;
        break;
    case OJ_BIN_MUL:
        ga = na ? oj_mul(g, b) : NULL;
        gb = nb ? oj_mul(g, a) : NULL;
        break;
    case OJ_BIN_DIV:
        if (na) ga = oj_div(g, b);
        if (nb) { /* -g a / b^2 */
            t1 = oj_div(a, b);
            t2 = oj_div(t1, b);
            t3 = oj_mul(g, t2);
            gb = oj_neg(t3);
        }
        break;
    case OJ_BIN_POW: {
        oj_tensor *y = nb ? oj__node_saved(n, 2) : NULL; /* saved only for d/db */
        if (nb && y == NULL) return oj_last_status(n->eng);
        if (na) { /* g * b * a^(b-1), 0 where b == 0 (a = 0 would give 0 * inf) */
            t1 = oj_add_scalar(b, -1.0);
            t2 = oj_pow(a, t1);
            oj_release(t1);
            t1 = oj_mul(t2, b);
            oj_release(t2);
            t2 = oj_mul(g, t1);
            oj_tensor *zero = oj_scalar(n->eng, 0.0, t2 ? t2->dtype : OJ_F32);
            oj_tensor *bz = oj_eq(b, zero);
            ga = oj_where(bz, zero, t2);
            oj_release(zero);
            oj_release(bz);
            oj_release(t1);
            oj_release(t2);
            t1 = t2 = NULL;
        }
        if (nb) { /* g * y * log(a), 0 where a == 0 and b >= 0 */
            t1 = oj_log(a);
            t2 = oj_mul(y, t1);
            oj_tensor *zero = oj_scalar(n->eng, 0.0, t2 ? t2->dtype : OJ_F32);
            oj_tensor *az = oj_eq(a, zero), *bp = oj_ge(b, zero);
            oj_tensor *mask = oj_logical_and(az, bp);
            oj_tensor *safe = oj_where(mask, zero, t2);
            gb = oj_mul(g, safe);
            oj_release(zero);
            oj_release(az);
            oj_release(bp);
            oj_release(mask);
            oj_release(safe);
        }
        break;
    }
    case OJ_BIN_MAXIMUM:
    case OJ_BIN_MINIMUM: {
        /* torch: the winner takes g, a tie splits it in halves. */
        oj_tensor *win = op == OJ_BIN_MAXIMUM ? oj_gt(a, b) : oj_lt(a, b);
        oj_tensor *tie = oj_eq(a, b);
        oj_tensor *half = oj_mul_scalar(g, 0.5);
        oj_tensor *zero = oj_scalar(n->eng, 0.0, g ? g->dtype : OJ_F32);
        oj_tensor *gw = oj_where(win, g, zero);
        if (na) ga = oj_where(tie, half, gw);
        if (nb) {
            oj_tensor *lose = op == OJ_BIN_MAXIMUM ? oj_lt(a, b) : oj_gt(a, b);
            oj_tensor *gl = oj_where(lose, g, zero);
            gb = oj_where(tie, half, gl);
            oj_release(lose);
            oj_release(gl);
        }
        oj_release(win);
        oj_release(tie);
        oj_release(half);
        oj_release(zero);
        oj_release(gw);
        break;
    }
    default:
        return oj_set_error(n->eng, OJ_ERR_INTERNAL, "%s: no backward rule", n->op);
    }
    oj_release(t1);
    oj_release(t2);
    oj_release(t3);
    if ((na && ga == NULL) || (nb && gb == NULL)) {
        oj_release(ga);
        oj_release(gb);
        return oj_last_status(n->eng) ? oj_last_status(n->eng) : OJ_ERR_INTERNAL;
    }
    gi[0] = na ? oj__sum_to_input(n, 0, ga) : NULL;
    gi[1] = nb ? oj__sum_to_input(n, 1, gb) : NULL;
    oj_release(ga);
    oj_release(gb);
    return oj_last_status(n->eng);
}

static oj_tensor *binary_raw(const char *name, oj_binary_op op, oj_tensor *a, oj_tensor *b,
                             oj_dtype *odt_out, bool logical) {
    oj_tensor *in[2] = {a, b};
    oj_engine *eng = oj__ops_engine(name, 2, in);
    if (eng == NULL) return NULL;
    int rank;
    int64_t shape[OJ_MAX_RANK];
    if (!oj__broadcast_shapes(eng, name, a->rank, a->shape, b->rank, b->shape, &rank, shape))
        return NULL;
    oj_dtype odt = oj__promote(a->dtype, b->dtype);
    if (op == OJ_BIN_DIV || op == OJ_BIN_POW) odt = oj__float_dtype(odt);
    if (logical) odt = OJ_BOOL;
    *odt_out = odt;
    oj_status (*k)(oj_engine *, oj_binary_op, oj_tensor *, const oj_tensor *, const oj_tensor *) =
        OJ_KERNEL(eng, binary, name);
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, rank, shape, odt, name);
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, op, out, a, b), name)) {
        oj_release(out);
        return NULL;
    }
    return out;
}

/* Which of a (bit 0) and b (bit 1) the gradients binary_backward must
 * give (na, nb: does a / b need one) read, as torch saves them: mul's
 * d/da reads b and d/db reads a; div's d/da reads b, d/db both; pow,
 * maximum and minimum read both; add and sub neither. */
static unsigned binary_saves(oj_binary_op op, bool na, bool nb) {
    switch (op) {
    case OJ_BIN_ADD:
    case OJ_BIN_SUB: return 0u;
    case OJ_BIN_MUL: return (nb ? 1u : 0u) | (na ? 2u : 0u);
    case OJ_BIN_DIV: return (nb ? 1u : 0u) | 2u;
    default: return 3u;
    }
}

static oj_tensor *binary(const char *name, oj_binary_op op, oj_tensor *a, oj_tensor *b) {
    bool logical = op >= OJ_BIN_EQ;
    oj_dtype odt;
    oj_tensor *out = binary_raw(name, op, a, b, &odt, logical);
    if (out == NULL || logical || !oj_dtype_is_float(odt)) return out;
    oj_node *nd = oj__node_begin(out->eng, name, binary_backward, 2, a, b);
    if (nd) {
        bool nb = oj__node_needs(nd, 1);
        unsigned saves = binary_saves(op, oj__node_needs(nd, 0), nb);
        nd->i[0] = op;
        nd->i[1] = saves;
        /* slots 0 (a) and 1 (b) always, NULL where not saved */
        if (saves) {
            oj__node_save(nd, (saves & 1u) ? a : NULL);
            oj__node_save(nd, (saves & 2u) ? b : NULL);
        }
        if (op == OJ_BIN_POW && nb) { /* y: only d/db reads it */
            oj_tensor *y = oj__tensor_view(out, out->rank, out->shape, out->stride, out->offset);
            oj__node_save(nd, y);
            oj_release(y);
        }
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj_add(oj_tensor *a, oj_tensor *b) { return binary("add", OJ_BIN_ADD, a, b); }
oj_tensor *oj_sub(oj_tensor *a, oj_tensor *b) { return binary("sub", OJ_BIN_SUB, a, b); }
oj_tensor *oj_mul(oj_tensor *a, oj_tensor *b) { return binary("mul", OJ_BIN_MUL, a, b); }
oj_tensor *oj_div(oj_tensor *a, oj_tensor *b) { return binary("div", OJ_BIN_DIV, a, b); }
oj_tensor *oj_pow(oj_tensor *a, oj_tensor *b) { return binary("pow", OJ_BIN_POW, a, b); }
oj_tensor *oj_maximum(oj_tensor *a, oj_tensor *b) {
    return binary("maximum", OJ_BIN_MAXIMUM, a, b);
}
oj_tensor *oj_minimum(oj_tensor *a, oj_tensor *b) {
    return binary("minimum", OJ_BIN_MINIMUM, a, b);
}
oj_tensor *oj_eq(oj_tensor *a, oj_tensor *b) { return binary("eq", OJ_BIN_EQ, a, b); }
oj_tensor *oj_ne(oj_tensor *a, oj_tensor *b) { return binary("ne", OJ_BIN_NE, a, b); }
oj_tensor *oj_lt(oj_tensor *a, oj_tensor *b) { return binary("lt", OJ_BIN_LT, a, b); }
oj_tensor *oj_le(oj_tensor *a, oj_tensor *b) { return binary("le", OJ_BIN_LE, a, b); }
oj_tensor *oj_gt(oj_tensor *a, oj_tensor *b) { return binary("gt", OJ_BIN_GT, a, b); }
oj_tensor *oj_ge(oj_tensor *a, oj_tensor *b) { return binary("ge", OJ_BIN_GE, a, b); }
oj_tensor *oj_logical_and(oj_tensor *a, oj_tensor *b) {
    return binary("logical_and", OJ_BIN_AND, a, b);
}
oj_tensor *oj_logical_or(oj_tensor *a, oj_tensor *b) {
    return binary("logical_or", OJ_BIN_OR, a, b);
}
oj_tensor *oj_logical_xor(oj_tensor *a, oj_tensor *b) {
    return binary("logical_xor", OJ_BIN_XOR, a, b);
}

/* ---------------------------------------------------------------- where */

static oj_status where_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *cond = oj__node_saved(n, 0);
    if (cond == NULL) return oj_last_status(n->eng);
    oj_tensor *zero = oj_scalar(n->eng, 0.0, go[0]->dtype);
    for (int i = 1; i <= 2; i++) {
        if (!oj__node_needs(n, i)) continue;
        oj_tensor *g = i == 1 ? oj_where(cond, go[0], zero) : oj_where(cond, zero, go[0]);
        gi[i] = oj__sum_to_input(n, i, g);
        oj_release(g);
    }
    oj_release(zero);
    return oj_last_status(n->eng);
}

oj_tensor *oj_where(oj_tensor *cond, oj_tensor *a, oj_tensor *b) {
    oj_tensor *in[3] = {cond, a, b};
    oj_engine *eng = oj__ops_engine("where", 3, in);
    if (eng == NULL) return NULL;
    int r1, rank;
    int64_t s1[OJ_MAX_RANK], shape[OJ_MAX_RANK];
    if (!oj__broadcast_shapes(eng, "where", a->rank, a->shape, b->rank, b->shape, &r1, s1) ||
        !oj__broadcast_shapes(eng, "where", cond->rank, cond->shape, r1, s1, &rank, shape))
        return NULL;
    oj_dtype odt = oj__promote(a->dtype, b->dtype);
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                   const oj_tensor *) = OJ_KERNEL(eng, where, "where");
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, rank, shape, odt, "where");
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, out, cond, a, b), "where")) {
        oj_release(out);
        return NULL;
    }
    if (oj_dtype_is_float(odt)) {
        /* cond gets no gradient: it is not an edge of the node. */
        oj_node *nd = oj__node_begin(eng, "where", where_backward, 3, NULL, a, b);
        if (nd) {
            oj__node_save(nd, cond);
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

/* ---------------------------------------------------------------- cast */

static oj_status cast_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    gi[0] = oj_cast(go[0], n->in[0].dtype);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

oj_tensor *oj_cast(oj_tensor *x, oj_dtype dt) {
    oj_engine *eng = oj__ops_engine1("cast", x);
    if (eng == NULL) return NULL;
    if (!oj_dtype_valid(dt)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "cast: invalid target dtype %d", (int)dt);
        return NULL;
    }
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *) = OJ_KERNEL(eng, copy, "cast");
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, dt, "cast");
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, out, x), "cast")) {
        oj_release(out);
        return NULL;
    }
    if (oj_dtype_is_float(dt) && oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, "cast", cast_backward, 1, x);
        if (nd) oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj__autocast_cast(oj_tensor *x, oj_dtype dt) {
    oj_tensor *out = NULL;
    if (!oj__wcopy_get(x, dt, &out)) return oj_cast(x, dt);
    if (out && oj_dtype_is_float(dt) && oj_dtype_is_float(x->dtype)) { /* oj_cast's node */
        oj_node *nd = oj__node_begin(x->eng, "cast", cast_backward, 1, x);
        if (nd) oj__node_finish(nd, 1, &out);
    }
    return out;
}

/* ---------------------------------------------------------------- clone, contiguous */

/* The gradient passes through unchanged (torch's clone / contiguous). */
static oj_status identity_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    gi[0] = oj__contiguous(go[0]);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

/* out (core's copy or view of x) recorded as an identity of x. */
static oj_tensor *record_identity(const char *op, oj_tensor *x, oj_tensor *out) {
    if (out && oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(oj__engine_of(x), op, identity_backward, 1, x);
        if (nd) oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj_clone(oj_tensor *t) { return record_identity("clone", t, oj__clone(t)); }

oj_tensor *oj_contiguous(oj_tensor *t) {
    return record_identity("contiguous", t, oj__contiguous(t));
}

/* ---------------------------------------------------------------- in place */

/* May the in-place op `op` write a now (b: its other operand, or NULL)?
 * With grad mode off, or neither a nor b requiring grad (or a not float),
 * it runs unrecorded, as before. Otherwise autograd records it, as torch
 * does: *node is begun here (inputs a and b) and the caller finishes it
 * on a after the write, so a's history becomes the op's node over its
 * old one. Refused (OJ_ERR_STATE, *node NULL) for a leaf that requires
 * grad, and for an a whose storage another live handle shares (a view of
 * a, or a a view of another): that handle's history would not see the
 * write. A node that saved a for its backward refuses that backward
 * later (the version check), as torch does. */
static bool inplace_begin(oj_engine *eng, oj_tensor *a, oj_tensor *b, const char *op,
                          oj_backward_fn backward, oj_node **node) {
    *node = NULL;
    if (!eng->grad_enabled || !oj_dtype_is_float(a->dtype) ||
        !(a->requires_grad || (b && b->requires_grad)))
        return true;
    if (a->requires_grad && a->grad_fn == NULL) {
        oj_set_error(eng, OJ_ERR_STATE,
                     "%s: in-place write to a leaf tensor that requires grad while grad mode is "
                     "on (update it under oj_set_grad_enabled(eng, false))",
                     op);
        return false;
    }
    for (const oj_tensor *t = eng->live_head; t; t = t->live_next)
        if (t != a && t->refcount > 0 && t->storage == a->storage) {
            oj_set_error(eng, OJ_ERR_STATE,
                         "%s: in-place write, recorded by autograd, to a tensor whose storage "
                         "another live tensor shares (a view of it, or it a view of another), "
                         "whose gradient would not see the write; write out of place, or "
                         "release the other tensor first",
                         op);
            return false;
        }
    *node = b ? oj__node_begin(eng, op, backward, 2, a, b)
              : oj__node_begin(eng, op, backward, 1, a);
    return *node != NULL || oj_last_status(eng) == OJ_OK;
}

/* Finish (st OK: a was written) or drop the node inplace_begin began. */
static oj_status inplace_end(oj_node *nd, oj_tensor *a, oj_status st) {
    if (st == OJ_OK) oj__storage_written(a->storage);
    if (nd == NULL) return st;
    if (st == OJ_OK) oj__node_finish(nd, 1, &a);
    else oj__node_abort(nd);
    return st;
}

oj_status oj_add_(oj_tensor *a, oj_tensor *b) {
    oj_tensor *in[2] = {a, b};
    oj_engine *eng = oj__ops_engine("add_", 2, in);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    int rank;
    int64_t shape[OJ_MAX_RANK];
    if (!oj__broadcast_shapes(eng, "add_", a->rank, a->shape, b->rank, b->shape, &rank, shape))
        return OJ_ERR_SHAPE;
    bool fits = rank == a->rank;
    for (int d = 0; fits && d < rank; d++) fits = shape[d] == a->shape[d];
    if (!fits) {
        char b1[128], b2[128];
        return oj_set_error(eng, OJ_ERR_SHAPE, "add_: b of shape %s cannot be broadcast into %s",
                            oj__shape_fmt(b1, sizeof b1, b->rank, b->shape),
                            oj__shape_fmt(b2, sizeof b2, a->rank, a->shape));
    }
    oj_node *nd;
    if (!inplace_begin(eng, a, b, "add_", binary_backward, &nd)) return oj_last_status(eng);
    if (nd) nd->i[0] = OJ_BIN_ADD; /* saves nothing (i[1] 0) */
    return inplace_end(nd, a, eng->backend->binary(eng, OJ_BIN_ADD, a, a, b));
}

oj_status oj_mul_scalar_(oj_tensor *a, double v) {
    oj_engine *eng = oj__ops_engine1("mul_scalar_", a);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_node *nd;
    if (!inplace_begin(eng, a, NULL, "mul_scalar_", unary_backward, &nd))
        return oj_last_status(eng);
    if (nd) { /* d/da = v: saves nothing (i[1] 0) */
        nd->i[0] = OJ_UN_AFFINE;
        nd->f[0] = v;
        nd->f[1] = 0.0;
    }
    return inplace_end(nd, a, eng->backend->unary(eng, OJ_UN_AFFINE, a, a, v, 0.0));
}
