/* Autograd graph nodes: the node type and the recording API that ops use.
 * (Running backward lives in src/autograd, above ops.)
 *
 * How an op records itself (see src/ops/elementwise.c):
 *
 *     oj_tensor *out = ...forward...;
 *     oj_node *n = oj__node_begin(out_eng, "mul", mul_backward, 2, a, b);
 *     if (n) {                             // NULL: nothing needs grad
 *         oj__node_save(n, a); oj__node_save(n, b);
 *         oj__node_finish(n, 1, &out);     // sets out->grad_fn
 *     }
 *
 * The backward rule receives the gradients of the outputs (NULL for an
 * output that received none: treat as zeros) and writes a new tensor into
 * grad_in[i] for every input i with oj__node_needs(n, i); shapes must equal
 * the input's shape (ops use oj__sum_to_input for broadcast inputs). It runs with grad
 * mode off and may call any op. */
#ifndef OJAS_CORE_GRAD_NODE_H
#define OJAS_CORE_GRAD_NODE_H

#include "core/internal.h"

#define OJ_NODE_MAX_IN 8
#define OJ_NODE_MAX_OUT 4
#define OJ_NODE_MAX_SAVED 8

typedef struct oj_node oj_node;

typedef oj_status (*oj_backward_fn)(oj_node *n, oj_tensor *const *grad_out, oj_tensor **grad_in);

/* Where the gradient of one input goes: the node that produced it (and
 * which of its outputs), or a leaf tensor that accumulates it. */
typedef struct oj_edge {
    oj_node *fn;     /* owned reference, or NULL */
    int out_index;   /* output of fn */
    oj_tensor *leaf; /* owned reference (leaf requiring grad), or NULL */
    /* shape/dtype of the input, for checking the rule's result */
    int rank;
    int64_t shape[OJ_MAX_RANK];
    oj_dtype dtype;
} oj_edge;

struct oj_node {
    int64_t refcount;
    uint64_t seq; /* creation order */
    const char *op;
    oj_backward_fn backward;
    oj_engine *eng;
    int n_in, n_out;
    oj_edge in[OJ_NODE_MAX_IN];
    /* outputs: shape/dtype (a missing output gradient is zeros) */
    int out_rank[OJ_NODE_MAX_OUT];
    int64_t out_shape[OJ_NODE_MAX_OUT][OJ_MAX_RANK];
    oj_dtype out_dtype[OJ_NODE_MAX_OUT];
    oj_tensor *retained[OJ_NODE_MAX_OUT]; /* outputs marked retain_grad (owned) */
    /* saved tensors and their storage versions at save time */
    oj_tensor *saved[OJ_NODE_MAX_SAVED];
    uint64_t saved_version[OJ_NODE_MAX_SAVED];
    int n_saved;
    /* op parameters */
    double f[8];
    int64_t i[OJ_MAX_RANK * 2];
    void *ctx;
    void (*ctx_free)(void *ctx);
    bool freed; /* saved tensors released after backward */
    /* backward bookkeeping */
    oj_tensor *grad_acc[OJ_NODE_MAX_OUT];
    int64_t visit_mark;
};

/* Start recording a node for op `op` over n inputs (variadic oj_tensor *).
 * Returns NULL when grad mode is off or no input requires grad (then the op
 * records nothing), or on allocation failure (error recorded). */
oj_node *oj__node_begin(oj_engine *eng, const char *op, oj_backward_fn backward, int n, ...);
/* Same with an array of inputs. */
oj_node *oj__node_begin_v(oj_engine *eng, const char *op, oj_backward_fn backward, int n,
                          oj_tensor *const *inputs);
/* Save t (retained) for backward, with its version; returns its slot. */
int oj__node_save(oj_node *n, oj_tensor *t);
/* Saved tensor k, or NULL (error recorded) if it was modified in place
 * since it was saved, or the graph was freed. */
oj_tensor *oj__node_saved(oj_node *n, int k);
/* Attach the node to its outputs (sets grad_fn, requires_grad) and drops
 * the creator's reference. */
void oj__node_finish(oj_node *n, int n_out, oj_tensor *const *outs);
/* Drop a node that was begun but will not be finished (error paths). */
void oj__node_abort(oj_node *n);
/* Does input i need a gradient? */
bool oj__node_needs(const oj_node *n, int i);
void oj__node_retain(oj_node *n);
void oj__node_release(oj_node *n);

#endif /* OJAS_CORE_GRAD_NODE_H */
