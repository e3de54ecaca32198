/* ojas autograd: reverse-mode differentiation over the ops of ops.h.
 *
 * Every op that produces a tensor from inputs that require grad (with grad
 * mode on) records a node: the backward rule, the input edges and the
 * tensors it saved. A node is owned by the outputs that point to it
 * (grad_fn) and by the nodes downstream, so a graph lives exactly as long
 * as the tensors that can reach it; releasing a step's scope frees its
 * graph. oj_backward orders the reachable nodes by creation sequence (a
 * valid reverse topological order, as in PyTorch's engine) and runs each
 * once, summing gradients of tensors used more than once. Unreachable
 * branches are never visited. */
#ifndef OJAS_AUTOGRAD_H
#define OJAS_AUTOGRAD_H

#include "ojas/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backpropagate from a one-element tensor `loss` (seed gradient 1).
 * Gradients accumulate (+=) into the `grad` of every leaf that requires
 * grad, and of non-leaves marked with oj_retain_grad. Frees the graph's
 * saved tensors afterwards unless retain_graph; a second backward through
 * a freed graph is OJ_ERR_STATE. Errors: OJ_ERR_SHAPE (loss not one
 * element), OJ_ERR_STATE (no graph: loss does not require grad; a saved
 * tensor was modified in place, naming the op), any error of an op's
 * backward. Gradients are computed with grad mode off. */
oj_status oj_backward(oj_tensor *loss, bool retain_graph);
/* Same with an explicit seed `grad` shaped like `out`. */
oj_status oj_backward_seeded(oj_tensor *out, oj_tensor *grad, bool retain_graph);

/* Keep the gradient of a non-leaf tensor in oj_grad(t) after backward. */
oj_tensor *oj_retain_grad(oj_tensor *t);
/* A new handle on t's data that is cut from the graph (requires_grad off).
 * Shares storage. */
oj_tensor *oj_detach(oj_tensor *t);
/* True for a tensor with no grad_fn (a leaf). */
bool oj_is_leaf(const oj_tensor *t);
/* Name of the op that produced t ("matmul", ...) or NULL for a leaf. */
const char *oj_grad_fn_name(const oj_tensor *t);

/* A function of tensors for gradcheck: writes *out = f(inputs) (a new
 * tensor of any shape) or returns NULL on error. */
typedef oj_tensor *(*oj_gradcheck_fn)(oj_tensor *const *inputs, int n, void *ctx);

typedef struct oj_gradcheck_opts {
    double eps;  /* central-difference step, default 1e-6 */
    double atol; /* default 1e-5 */
    double rtol; /* default 1e-3 */
} oj_gradcheck_opts;

/* Compare analytical gradients of sum(f(inputs) * r) (r a fixed random
 * projection) with float64 central differences for every input that
 * requires grad. Inputs must be f64. Returns OJ_OK when all agree within
 * atol + rtol * |numeric|; OJ_ERR_NUMERIC with a message naming the input,
 * the element index and both values otherwise. opts NULL: defaults. */
oj_status oj_gradcheck(oj_engine *eng, oj_gradcheck_fn f, void *ctx, oj_tensor *const *inputs,
                       int n, const oj_gradcheck_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_AUTOGRAD_H */
