/* Shared pieces of the ops layer: argument validation, broadcasting, type
 * promotion, output allocation and kernel dispatch. Every op is:
 *   validate -> allocate output (through the budget) -> backend kernel ->
 *   record an autograd node when an input requires grad. */
#ifndef OJAS_OPS_COMMON_H
#define OJAS_OPS_COMMON_H

#include "backend/backend.h"
#include "core/grad_node.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

/* The engine shared by inputs ts[0..n) (NULL entries are skipped only when
 * `allow_null`). Returns NULL when an input is NULL (no error recorded: the
 * error that produced it is already there), released
 * (OJ_ERR_INVALID_ARGUMENT), or when inputs come from different engines or
 * devices (OJ_ERR_DEVICE), naming `op`. */
oj_engine *oj__ops_engine(const char *op, int n, oj_tensor *const *ts);
/* Same for one tensor. */
oj_engine *oj__ops_engine1(const char *op, oj_tensor *t);

/* Broadcast the shapes of a and b (NumPy rules) into rank/shape. False
 * with OJ_ERR_SHAPE recorded when they do not fit. */
bool oj__broadcast_shapes(oj_engine *eng, const char *op, int ra, const int64_t *sa, int rb,
                          const int64_t *sb, int *rank, int64_t *shape);
/* Result dtype of a binary op on a and b (PyTorch promotion). */
oj_dtype oj__promote(oj_dtype a, oj_dtype b);
/* The float dtype an op computes in for input dtype dt (ints -> f32). */
oj_dtype oj__float_dtype(oj_dtype dt);
/* Normalise dim (negative counts from the end) for a tensor of rank r;
 * false with OJ_ERR_OUT_OF_RANGE recorded (naming op) when out of range.
 * rank 0 accepts dims -1 and 0 as PyTorch does when allow_scalar. */
bool oj__norm_dim(oj_engine *eng, const char *op, int *dim, int rank);
/* A view of t broadcast to rank/shape (stride 0 on stretched dims).
 * Internal: never recorded by autograd. */
oj_tensor *oj__broadcast_view(oj_tensor *t, int rank, const int64_t *shape);
/* Status of a kernel call: on failure record an error naming op (unless the
 * kernel already did). Returns true on success. */
bool oj__kernel_ok(oj_engine *eng, oj_status st, const char *op);
/* The backend table of eng; records OJ_ERR_UNSUPPORTED and returns NULL
 * when the entry `fn` (non-NULL check done by caller via macro) is absent. */
#define OJ_KERNEL(eng, entry, opname)                                                        \
    ((eng)->backend && (eng)->backend->entry                                                 \
         ? (eng)->backend->entry                                                             \
         : (oj_set_error((eng), OJ_ERR_UNSUPPORTED, "%s: not implemented on the %s backend", \
                         (opname), (eng)->backend ? (eng)->backend->name : "(none)"),        \
            NULL))

/* Autocast (oj_set_autocast). OJ__AUTOCAST_LOW: the op computes in the
 * engine's autocast dtype; OJ__AUTOCAST_F32: in f32. When autocast is on
 * and some f32/bf16/f16 input among in[0..n) (NULL entries allowed) has
 * another dtype, out[i] gets the cast (an op on the tape) or a retained
 * in[i], and true is returned: the caller runs the op again on out[] and
 * releases every out[i]. False (out untouched) when nothing needs a cast. */
enum { OJ__AUTOCAST_LOW, OJ__AUTOCAST_F32 };
/* oj_cast(x, dt) as autocast takes it: the kept copy where x's storage
 * keeps one (oj_optim_set_weight_copies; the same bits, the same tape
 * node), else the cast. */
oj_tensor *oj__autocast_cast(oj_tensor *x, oj_dtype dt);

/* linear(reshape(a * b, [a's leading dims, a[-2] * a[-1]]), weight), no
 * bias: a [..., H, D] (rank >= 2, any strides), b broadcast to a's shape
 * (e.g. nanolab's per-head output gate [..., H, 1]), weight [out, H*D].
 * The values of oj_mul, oj_reshape and oj_linear in turn, and one node
 * whose backward recomputes the product instead of keeping it (a's
 * bytes less between forward and backward), with those ops' gradients.
 * Under autocast the product is fused when a and b already have the
 * autocast dtype (W cast as linear casts it); otherwise the three ops run
 * as they are. NULL with OJ_ERR_SHAPE / OJ_ERR_DTYPE /
 * OJ_ERR_DEVICE recorded. (linalg.c) */
oj_tensor *oj__mul_linear(oj_tensor *a, oj_tensor *b, oj_tensor *weight);

/* The rows of w[0..n) (2-D, contiguous, one column count, float dtypes;
 * 1 <= n <= 4) cast to dt and stacked, then pad zero rows: [sum of rows
 * + pad, C], a new tensor; the values of oj_cat over oj_cast of each (and
 * zeros). Forward one cast_multi launch, backward one (each w's gradient
 * its rows of the output's, cast back). Needs the backend's cast_multi
 * (oj__cast_rows_fits says whether it applies). NULL with OJ_ERR_SHAPE /
 * OJ_ERR_DTYPE / OJ_ERR_UNSUPPORTED recorded. (linalg.c) */
oj_tensor *oj__cast_rows(int n, oj_tensor *const *w, oj_dtype dt, int64_t pad);
bool oj__cast_rows_fits(int n, oj_tensor *const *w);

/* oj_linear(x, weight, bias) (the same node and gradients), and *act =
 * gelu_tanh of the result, a plain new tensor (no node, owned by the
 * current scope) from the same GEMM where the backend has matmul_bias_act
 * and takes the operands (CUDA under FAST: cuBLASLt's GELU_AUX_BIAS
 * epilogue; the GELU reads the f32 sum, before the result's rounding);
 * else *act = NULL and the caller applies the GELU. x [..., in], weight
 * [out, in], bias [out] (required for the fused path). NULL with linear's
 * errors recorded (*act NULL). (linalg.c) */
oj_tensor *oj__linear_gelu(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, oj_tensor **act);
/* oj_gelu_linear(x, weight, bias, true) whose forward takes act (or NULL)
 * as gelu_tanh(x) when it has x's shape and dtype (oj__linear_gelu's
 * *act): no GELU pass in the forward. The node and backward are
 * gelu_linear's (x and weight saved, gelu recomputed from x), so its
 * gradients are gelu_linear's. (linalg.c) */
oj_tensor *oj__gelu_linear_act(oj_tensor *x, oj_tensor *act, oj_tensor *weight, oj_tensor *bias);
bool oj__autocast(int cls, int n, oj_tensor *const *in, oj_tensor **out);
void oj__autocast_release(int n, oj_tensor **out);
/* First statement of an autocast op: when inputs in[0..n) need a cast,
 * return `expr` evaluated on the casts ac[0..n). */
#define OJ__AUTOCAST(cls, n, in, expr)                                                       \
    do {                                                                                     \
        oj_tensor *ac[n];                                                                    \
        if (oj__autocast((cls), (n), (in), ac)) {                                            \
            oj_tensor *ac_result = (expr);                                                   \
            oj__autocast_release((n), ac);                                                   \
            return ac_result;                                                                \
        }                                                                                    \
    } while (0)

/* An in-place op may write a: not while a requires grad and grad mode is
 * on (OJ_ERR_STATE recorded, naming op). */
bool oj__inplace_ok(oj_engine *eng, const oj_tensor *a, const char *op);

/* dx = g * f'(x) for unary op `op` (y = f(x) given too), a new tensor of
 * x's shape and dtype; NULL with the error recorded (naming opname). The
 * rule of every differentiable unary op (elementwise.c). */
oj_tensor *oj__unary_grad(oj_engine *eng, const char *opname, oj_unary_op op, oj_tensor *x,
                          oj_tensor *y, oj_tensor *g, double alpha, double beta);

/* Reduce grad by summation to rank/shape (the shape of an input that was
 * broadcast): sums the leading dims and the stretched dims. Returns grad
 * retained when shapes already match. Used by backward rules. */
oj_tensor *oj__sum_to(oj_tensor *grad, int rank, const int64_t *shape);
/* grad of a node's input i reduced to that input's shape. */
oj_tensor *oj__sum_to_input(oj_node *n, int i, oj_tensor *grad);
/* Zeros shaped like output j of node n (for missing output gradients). */
oj_tensor *oj__zeros_like_output(oj_node *n, int j);

/* Gradients for n (2 to 4) inputs x that are equally spaced copies of one
 * layout in one storage tiling a dense block of it (same shape, dtype and
 * strides, offsets o, o + delta, ... in some order, and [n, ...shape] with
 * strides [delta, ...strides] a permutation of a contiguous layout): gpt2's
 * q, k, v heads of the thirds of one [B, T, 3C] projection, nanolab's gate
 * and up halves of one [..., 2F]. d[j] are views of one fresh buffer with
 * x[j]'s strides and relative offset, so the views' backward (transpose,
 * reshape) stays a view and a split's backward finds its pieces side by
 * side (shape_ops.c): no copies of the gradients. Returns 1 when made, 0
 * when x are not so laid out (nothing made or recorded), -1 on an error
 * (recorded, naming op). */
int oj__tiled_grads(oj_engine *eng, const char *op, int n, oj_tensor *const *x, oj_tensor **d);

/* Gradients for n (2 to 4) inputs x that are views of one storage laid out
 * alike (same shape, strides and dtype, equally spaced offsets, no element
 * shared) covering at least half of its bytes, but not a dense block of it
 * (oj__tiled_grads): nanolab's q and k heads (and v in its first layer)
 * of its fused [B, T, C + 2 Hkv D + H] projection, beside the gate's
 * columns. d[j] are views of one fresh buffer the size of x's storage at
 * x[j]'s offset and strides, so the views' backward stays a view and the
 * split's backward writes the other pieces' gradients into the rest of
 * the buffer instead of concatenating all of them (shape_ops.c). The rest
 * is uninitialised and no view of it is handed out. Returns 1 when made,
 * 0 when x are not so laid out (nothing made or recorded), -1 on an error
 * (recorded, naming op). */
int oj__mirror_grads(oj_engine *eng, const char *op, int n, oj_tensor *const *x, oj_tensor **d);

#endif /* OJAS_OPS_COMMON_H */
