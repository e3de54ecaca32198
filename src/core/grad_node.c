/* Autograd graph nodes: creation, saved tensors, ownership (the recording
 * half of autograd; it lives in core so that ops, one layer up, can record
 * and src/autograd, above ops, can run backward). */
#include <stdlib.h>
#include <string.h>

#include "core/grad_node.h"

static void node_set_edge(oj_node *n, int i, oj_tensor *t) {
    oj_edge *e = &n->in[i];
    memset(e, 0, sizeof *e);
    if (t == NULL) return;
    e->rank = t->rank;
    memcpy(e->shape, t->shape, sizeof e->shape);
    e->dtype = t->dtype;
    if (!t->requires_grad) return;
    if (t->grad_fn) {
        e->fn = t->grad_fn;
        e->out_index = t->output_index;
        oj__node_retain(e->fn);
    } else {
        e->leaf = t;
        oj__hold(t);
        /* A leaf held by the graph must not be freed with its scope while
         * the graph lives: the retain above covers it. */
    }
}

static void node_release_hook(oj_engine *eng, struct oj_node *n) {
    (void)eng;
    oj__node_release(n);
}

oj_node *oj__node_begin_v(oj_engine *eng, const char *op, oj_backward_fn backward, int n,
                          oj_tensor *const *inputs) {
    if (eng == NULL || !eng->grad_enabled) return NULL;
    bool any = false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) any = true;
    if (!any) return NULL;
    if (n > OJ_NODE_MAX_IN) {
        oj_set_error(eng, OJ_ERR_INTERNAL, "%s: autograd node with %d inputs (max %d)", op, n,
                     OJ_NODE_MAX_IN);
        return NULL;
    }
    oj_node *nd = calloc(1, sizeof *nd);
    if (nd == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory for an autograd node", op);
        return NULL;
    }
    eng->node_release = node_release_hook;
    nd->refcount = 1; /* the creator's reference, dropped by finish */
    nd->seq = ++eng->node_seq;
    nd->op = op;
    nd->backward = backward;
    nd->eng = eng;
    nd->n_in = n;
    for (int i = 0; i < n; i++) node_set_edge(nd, i, inputs[i]);
    return nd;
}

oj_node *oj__node_begin(oj_engine *eng, const char *op, oj_backward_fn backward, int n, ...) {
    oj_tensor *inputs[OJ_NODE_MAX_IN] = {0};
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < OJ_NODE_MAX_IN; i++) inputs[i] = va_arg(ap, oj_tensor *);
    va_end(ap);
    return oj__node_begin_v(eng, op, backward, n, inputs);
}

int oj__node_save(oj_node *n, oj_tensor *t) {
    if (n->n_saved >= OJ_NODE_MAX_SAVED) {
        oj_set_error(n->eng, OJ_ERR_INTERNAL, "%s: more than %d saved tensors", n->op,
                     OJ_NODE_MAX_SAVED);
        return -1;
    }
    int k = n->n_saved++;
    n->saved[k] = t;
    oj__hold(t);
    n->saved_version[k] = t ? t->storage->version : 0;
    /* Saved tensors belong to the node, not to the scope they came from. */
    return k;
}

oj_tensor *oj__node_saved(oj_node *n, int k) {
    if (n->freed) {
        oj_set_error(n->eng, OJ_ERR_STATE,
                     "backward through %s a second time: its saved tensors were freed "
                     "(pass retain_graph = true to the first backward)",
                     n->op);
        return NULL;
    }
    oj_tensor *t = n->saved[k];
    if (t && t->storage->version != n->saved_version[k]) {
        oj_set_error(n->eng, OJ_ERR_STATE,
                     "%s: a tensor it saved for backward (saved #%d) was modified in place "
                     "(version %llu, expected %llu)",
                     n->op, k, (unsigned long long)t->storage->version,
                     (unsigned long long)n->saved_version[k]);
        return NULL;
    }
    return t;
}

void oj__node_finish(oj_node *n, int n_out, oj_tensor *const *outs) {
    n->n_out = n_out;
    for (int j = 0; j < n_out; j++) {
        oj_tensor *o = outs[j];
        n->out_rank[j] = o->rank;
        memcpy(n->out_shape[j], o->shape, sizeof n->out_shape[j]);
        n->out_dtype[j] = o->dtype;
        if (o->grad_fn) oj__node_release(o->grad_fn);
        o->grad_fn = n;
        o->output_index = j;
        o->requires_grad = true;
        oj__node_retain(n);
    }
    if (n->eng->detect_anomaly)
        for (int j = 0; j < n_out; j++) oj__anomaly_check(outs[j], "the output %d of %s", j, n->op);
    oj__node_release(n); /* creator's reference */
}

void oj__node_abort(oj_node *n) {
    if (n) oj__node_release(n);
}

bool oj__node_needs(const oj_node *n, int i) {
    return i < n->n_in && (n->in[i].fn != NULL || n->in[i].leaf != NULL);
}

void oj__node_retain(oj_node *n) {
    if (n) n->refcount++;
}

static void node_free_saved(oj_node *n) {
    for (int k = 0; k < n->n_saved; k++) {
        oj__unhold(n->saved[k]);
        n->saved[k] = NULL;
    }
    if (n->ctx && n->ctx_free) n->ctx_free(n->ctx);
    n->ctx = NULL;
    n->freed = true;
}

/* Iterative release: freeing a long chain of nodes must not recurse once per
 * layer (a 10,000-op graph would overflow the stack). */
void oj__node_release(oj_node *n) {
    oj_node *stack_small[64];
    oj_node **stack = stack_small;
    int64_t len = 0, cap = 64;
    if (n == NULL) return;
    stack[len++] = n;
    while (len > 0) {
        oj_node *c = stack[--len];
        if (--c->refcount > 0) continue;
        node_free_saved(c);
        for (int j = 0; j < OJ_NODE_MAX_OUT; j++) {
            oj_release(c->retained[j]);
            oj_release(c->grad_acc[j]);
        }
        for (int i = 0; i < c->n_in; i++) {
            oj__unhold(c->in[i].leaf);
            if (c->in[i].fn) {
                if (len == cap) {
                    oj_node **bigger = malloc((size_t)(cap * 2) * sizeof *bigger);
                    if (bigger == NULL) { /* cannot free further without memory: leak */
                        continue;
                    }
                    memcpy(bigger, stack, (size_t)len * sizeof *bigger);
                    if (stack != stack_small) free(stack);
                    stack = bigger;
                    cap *= 2;
                }
                stack[len++] = c->in[i].fn;
            }
        }
        free(c);
    }
    if (stack != stack_small) free(stack);
}
