/* Reverse-mode backward pass over the graph of grad_fn nodes. */
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

typedef struct {
    oj_node **items;
    int64_t len, cap;
} node_vec;

static bool vec_push(node_vec *v, oj_node *n) {
    if (v->len == v->cap) {
        int64_t cap = v->cap ? v->cap * 2 : 64;
        oj_node **p = realloc(v->items, (size_t)cap * sizeof *p);
        if (p == NULL) return false;
        v->items = p;
        v->cap = cap;
    }
    v->items[v->len++] = n;
    return true;
}

static int by_seq_desc(const void *a, const void *b) {
    const oj_node *x = *(oj_node *const *)a, *y = *(oj_node *const *)b;
    return x->seq < y->seq ? 1 : (x->seq > y->seq ? -1 : 0);
}

static bool shape_eq(int ra, const int64_t *a, int rb, const int64_t *b) {
    if (ra != rb) return false;
    for (int d = 0; d < ra; d++)
        if (a[d] != b[d]) return false;
    return true;
}

/* t is reachable from nothing but the one reference being considered: no
 * other owner reference, no node holding it, no other handle on its
 * storage, and it is the whole storage, densely. Writing into t in place,
 * or handing that reference on, is then invisible to everyone else. */
static bool sole_owner(const oj_tensor *t) {
    return t->refcount == 1 && t->holds == 0 && t->grad == NULL && t->grad_fn == NULL &&
           t->storage->refcount == 1 && t->offset == 0 && oj_is_contiguous(t) &&
           t->storage->nbytes == (size_t)oj_numel(t) * oj_dtype_size(t->dtype);
}

/* Add g into *slot (slot owns its tensor; g is borrowed). Outside scopes:
 * the sum is detached from every scope so it survives until consumed.
 * When nothing else can see the slot's tensor the sum is formed in place
 * (the same elementwise add, so the same bits), saving a buffer. */
static oj_status accumulate(oj_engine *eng, oj_tensor **slot, oj_tensor *g) {
    oj_tensor *sum;
    if (*slot == NULL) {
        sum = oj_retain(g);
    } else if (sole_owner(*slot) && (*slot)->dtype == g->dtype &&
               shape_eq((*slot)->rank, (*slot)->shape, g->rank, g->shape)) {
        return oj_add_(*slot, g);
    } else {
        sum = oj_add(*slot, g);
        if (sum == NULL) return oj_last_status(eng);
        oj_release(*slot);
    }
    oj__scope_detach(sum);
    *slot = sum;
    return OJ_OK;
}

/* Leaf gradients accumulate into leaf->grad, kept in the leaf's dtype and
 * contiguous, owned by the leaf. *g: the gradient; when `owned` the caller
 * holds *g's only reference and would release it after this call, so a
 * first gradient that nothing else can see becomes leaf->grad as it is
 * (*g set to NULL: the reference moved) instead of being copied. A
 * leaf whose grad is a given buffer not yet written (grad_fresh) takes
 * its first gradient by copy. */
static oj_status accumulate_leaf(oj_engine *eng, oj_tensor *leaf, oj_tensor **g, bool owned) {
    oj_tensor *gr = *g;
    if (leaf->grad == NULL) {
        if (owned && gr->dtype == leaf->dtype && sole_owner(gr)) {
            oj__scope_detach(gr);
            gr->requires_grad = false;
            leaf->grad = gr;
            *g = NULL;
            return OJ_OK;
        }
        oj_tensor *c = gr->dtype == leaf->dtype ? oj__clone(gr) : oj_cast(gr, leaf->dtype);
        if (c == NULL) return oj_last_status(eng);
        oj__scope_detach(c);
        leaf->grad = c;
        return OJ_OK;
    }
    oj_status st;
    if (leaf->grad_fresh) { /* a given buffer: the first gradient is copied in, bit for bit */
        leaf->grad_fresh = false;
        st = oj_copy_(leaf->grad, gr);
    } else {
        st = oj_add_(leaf->grad, gr);
    }
    return st;
}

oj_status oj_backward_seeded(oj_tensor *out, oj_tensor *grad, bool retain_graph) {
    if (out == NULL || grad == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_tensor *ins[2] = {out, grad};
    oj_engine *eng = oj__ops_engine("backward", 2, ins);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (!shape_eq(out->rank, out->shape, grad->rank, grad->shape)) {
        char b1[128], b2[128];
        return oj_set_error(eng, OJ_ERR_SHAPE, "backward: seed gradient %s does not match output %s",
                            oj__shape_fmt(b1, sizeof b1, grad->rank, grad->shape),
                            oj__shape_fmt(b2, sizeof b2, out->rank, out->shape));
    }
    if (!out->requires_grad)
        return oj_set_error(eng, OJ_ERR_STATE,
                            "backward: the tensor does not require grad (no graph was recorded)");
    bool prev_mode = oj_set_grad_enabled(eng, false);
    bool prev_autocast = eng->autocast; /* backward computes in the recorded dtypes */
    eng->autocast = false;
    oj_status st = OJ_OK;
    if (out->grad_fn == NULL) { /* a leaf: its gradient is the seed */
        st = accumulate_leaf(eng, out, &grad, false);
        oj_set_grad_enabled(eng, prev_mode);
        eng->autocast = prev_autocast;
        return st;
    }
    /* Collect reachable nodes (iterative DFS) and order by creation. */
    node_vec all = {0}, stack = {0};
    int64_t mark = ++eng->backward_seq; /* unique per backward pass */
    if (!vec_push(&stack, out->grad_fn)) st = OJ_ERR_CAPACITY;
    out->grad_fn->visit_mark = mark;
    while (st == OJ_OK && stack.len > 0) {
        oj_node *n = stack.items[--stack.len];
        if (!vec_push(&all, n)) {
            st = OJ_ERR_CAPACITY;
            break;
        }
        for (int i = 0; i < n->n_in; i++) {
            oj_node *c = n->in[i].fn;
            if (c && c->visit_mark != mark) {
                c->visit_mark = mark;
                if (!vec_push(&stack, c)) {
                    st = OJ_ERR_CAPACITY;
                    break;
                }
            }
        }
    }
    free(stack.items);
    if (st != OJ_OK) {
        free(all.items);
        oj_set_grad_enabled(eng, prev_mode);
        eng->autocast = prev_autocast;
        return oj_set_error(eng, st, "backward: out of host memory ordering the graph");
    }
    qsort(all.items, (size_t)all.len, sizeof *all.items, by_seq_desc);
    /* with a leaf hook: how many gradients each leaf will be sent (an
     * upper bound: a node no gradient reaches sends none, and its leaves
     * are then never reported) */
    for (int64_t k = 0; eng->leaf_grad_ready && k < all.len; k++)
        for (int i = 0; i < all.items[k]->n_in; i++)
            if (!all.items[k]->in[i].fn && all.items[k]->in[i].leaf &&
                oj__node_needs(all.items[k], i))
                all.items[k]->in[i].leaf->grad_pending++;
    /* Keep every node alive while we walk (releasing grads may free them). */
    for (int64_t k = 0; k < all.len; k++) oj__node_retain(all.items[k]);

    /* The seed takes the output's dtype, as every gradient does. A new
     * handle either way: accumulate detaches what it keeps from its scope,
     * which must not be the caller's handle (scoped, it would leak). */
    oj_tensor *seed = grad->dtype == out->dtype ? oj_detach(grad) : oj_cast(grad, out->dtype);
    st = seed ? accumulate(eng, &out->grad_fn->grad_acc[out->output_index], seed)
              : oj_last_status(eng);
    oj_release(seed);
    for (int64_t k = 0; st == OJ_OK && k < all.len; k++) {
        oj_node *n = all.items[k];
        oj_tensor *go[OJ_NODE_MAX_OUT] = {0};
        bool any = false;
        for (int j = 0; j < n->n_out; j++) {
            go[j] = n->grad_acc[j];
            n->grad_acc[j] = NULL;
            if (go[j]) any = true;
        }
        if (!any) continue;
        for (int j = 0; j < n->n_out; j++) {
            bool received = go[j] != NULL;
            if (go[j] == NULL) {
                go[j] = oj__zeros_like_output(n, j);
                if (go[j] == NULL) {
                    st = oj_last_status(eng);
                    break;
                }
                oj__scope_detach(go[j]);
            }
            /* an output no gradient reached keeps none (torch: None), even
             * when its node runs for a sibling output (a split piece) */
            if (n->retained[j] && received) {
                oj_tensor *r = n->retained[j];
                if (r->grad == NULL) {
                    r->grad = oj__clone(go[j]);
                    if (r->grad) oj__scope_detach(r->grad);
                } else {
                    oj_add_(r->grad, go[j]);
                }
            }
        }
        if (n->freed && st == OJ_OK)
            st = oj_set_error(eng, OJ_ERR_STATE,
                              "backward through %s a second time: its saved tensors were freed "
                              "(pass retain_graph = true to the first backward)",
                              n->op);
        oj_tensor *gi[OJ_NODE_MAX_IN] = {0};
        if (st == OJ_OK) {
            st = n->backward(n, go, gi);
            if (st == OJ_OK && oj_last_status(eng) != OJ_OK) st = oj_last_status(eng);
        }
        /* The incoming gradients are done with: drop them before the input
         * gradients are accumulated, so an input gradient that is a view
         * of one (a transpose's backward) can be the only user of its
         * storage and be taken by a leaf without a copy, and the memory
         * is free sooner. */
        for (int j = 0; j < n->n_out; j++) oj_release(go[j]);
        for (int i = 0; st == OJ_OK && i < n->n_in; i++) {
            if (!oj__node_needs(n, i)) continue;
            const oj_edge *e = &n->in[i];
            if (gi[i] == NULL) {
                st = oj_set_error(eng, OJ_ERR_INTERNAL, "%s: backward gave no gradient for input %d",
                                  n->op, i);
                break;
            }
            if (!shape_eq(gi[i]->rank, gi[i]->shape, e->rank, e->shape)) {
                char b1[128], b2[128];
                st = oj_set_error(eng, OJ_ERR_INTERNAL,
                                  "%s: backward gave gradient %s for input %d of shape %s", n->op,
                                  oj__shape_fmt(b1, sizeof b1, gi[i]->rank, gi[i]->shape), i,
                                  oj__shape_fmt(b2, sizeof b2, e->rank, e->shape));
                break;
            }
            if (gi[i]->dtype != e->dtype && oj_dtype_is_float(e->dtype)) {
                /* a gradient takes its input's dtype (as PyTorch's engine
                 * does): a bf16 activation used by an f32 op gets a bf16
                 * gradient */
                oj_tensor *c = oj_cast(gi[i], e->dtype);
                if (c == NULL) {
                    st = oj_last_status(eng);
                    break;
                }
                oj_release(gi[i]);
                gi[i] = c;
            }
            if (eng->detect_anomaly) {
                oj__anomaly_check(gi[i], "the gradient of input %d computed by the backward of %s",
                                  i, n->op);
                if ((st = oj_last_status(eng)) != OJ_OK) break;
            }
            if (e->fn) {
                st = accumulate(eng, &e->fn->grad_acc[e->out_index], gi[i]);
            } else {
                st = accumulate_leaf(eng, e->leaf, &gi[i], true);
                if (st == OJ_OK && eng->leaf_grad_ready && --e->leaf->grad_pending == 0)
                    eng->leaf_grad_ready(eng->leaf_grad_ready_ctx, e->leaf);
            }
        }
        for (int i = 0; i < OJ_NODE_MAX_IN; i++) oj_release(gi[i]);
    }
    /* Drop leftover accumulators (error paths) and free saved tensors. */
    for (int64_t k = 0; k < all.len; k++) {
        oj_node *n = all.items[k];
        for (int i = 0; i < n->n_in; i++) /* the counts of leaves not reported */
            if (!n->in[i].fn && n->in[i].leaf) n->in[i].leaf->grad_pending = 0;
        for (int j = 0; j < OJ_NODE_MAX_OUT; j++) {
            oj_release(n->grad_acc[j]);
            n->grad_acc[j] = NULL;
        }
        if (!retain_graph) {
            for (int s = 0; s < n->n_saved; s++) {
                oj__unhold(n->saved[s]);
                n->saved[s] = NULL;
            }
            n->freed = true;
        }
    }
    for (int64_t k = 0; k < all.len; k++) oj__node_release(all.items[k]);
    free(all.items);
    oj_set_grad_enabled(eng, prev_mode);
    eng->autocast = prev_autocast;
    return st;
}

oj_status oj_backward(oj_tensor *loss, bool retain_graph) {
    if (loss == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (!oj__live(loss)) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = loss->eng;
    if (oj_numel(loss) != 1) {
        char b[128];
        return oj_set_error(eng, OJ_ERR_SHAPE,
                            "backward: loss must have one element, got shape %s (use "
                            "oj_backward_seeded for a non-scalar output)",
                            oj__shape_fmt(b, sizeof b, loss->rank, loss->shape));
    }
    oj_tensor *seed = oj_ones(eng, loss->rank, loss->shape, loss->dtype);
    if (seed == NULL) return oj_last_status(eng);
    oj_status st = oj_backward_seeded(loss, seed, retain_graph);
    oj_release(seed);
    return st;
}

oj_tensor *oj_retain_grad(oj_tensor *t) {
    if (t == NULL || !oj__live(t)) return NULL;
    if (t->grad_fn == NULL) return t; /* leaves keep grads anyway */
    oj_node *n = t->grad_fn;
    if (n->retained[t->output_index] == NULL) {
        /* A separate handle onto t's data (no grad_fn, so no reference
         * cycle) receives the gradient; oj_grad(t) reads it from there. */
        oj_tensor *h = oj__tensor_view(t, t->rank, t->shape, t->stride, t->offset);
        if (h == NULL) return NULL;
        oj__scope_detach(h);
        n->retained[t->output_index] = h;
    }
    return t;
}

oj_tensor *oj_detach(oj_tensor *t) {
    if (t == NULL || !oj__live(t)) return NULL;
    return oj__tensor_view(t, t->rank, t->shape, t->stride, t->offset);
}

bool oj_is_leaf(const oj_tensor *t) { return oj__live(t) && t->grad_fn == NULL; }

const char *oj_grad_fn_name(const oj_tensor *t) {
    return oj__live(t) && t->grad_fn ? t->grad_fn->op : NULL;
}
