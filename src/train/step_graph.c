/* A training micro-step (forward and backward of oj_gpt_loss) captured as a
 * CUDA graph and replayed each step (PyTorch's whole-network capture, the
 * torch.cuda.graphs recipe): the host issues one launch instead of ~2,000
 * ops. The inputs are two static [B, T] token tensors the caller's batches
 * are copied into; the outputs are the loss tensor and the parameters'
 * gradients, rewritten by every replay (the graph creates them, so they
 * must not be dropped between steps: no zero_grad). The optimizer step
 * stays outside the graph. A replay is only queued (oj__graph_launch):
 * the host goes on to queue the optimizer step while the device runs the
 * forward and backward, and the graph's deferred index and target checks
 * are read after the step (oj__step_graph_check). The trainer's loader
 * has checked every token against the vocabulary on the host already, so
 * those checks are a second line that, failing, stops the run. */
#include "core/internal.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"
#include "train/train_internal.h"

oj_status oj__step_graph_capture(oj_gpt *m, oj_tensor *x, oj_tensor *y, oj__step_graph *g) {
    oj_engine *eng = oj_tensor_engine(x);
    *g = (oj__step_graph){0};
    /* the gradients must be created by the captured backward (in the
     * graph's pool), so every replay writes them afresh; a given buffer
     * not yet written (grad_fresh: the data-parallel gradient arena) is
     * kept, and the captured backward copies into it */
    oj_named_tensors sd = oj_gpt_state_dict(m);
    for (int64_t i = 0; i < sd.n; i++)
        if (!sd.tensors[i]->grad_fresh) oj_zero_grad(sd.tensors[i]);
    /* the graph's tensors belong to g, whatever scope is open */
    g->x = oj__clone(x);
    g->y = g->x ? oj__clone(y) : NULL;
    if (g->x) oj__scope_detach(g->x);
    if (g->y) oj__scope_detach(g->y);
    oj_status st = g->y ? oj_graph_capture_begin(eng) : oj_last_status(eng);
    if (st != OJ_OK) {
        oj__step_graph_free(g);
        return st;
    }
    oj_scope_begin(eng);
    oj_tensor *loss = oj_gpt_loss(m, g->x, g->y);
    if (loss) oj_backward(loss, false);
    if (loss) oj__scope_detach(loss);
    g->loss = loss;
    oj_scope_end(eng);
    g->graph = oj_graph_capture_end(eng);
    if (g->graph == NULL) {
        st = oj_last_status(eng) ? oj_last_status(eng) : OJ_ERR_INTERNAL;
        for (int64_t i = 0; i < sd.n; i++) oj_zero_grad(sd.tensors[i]);
        oj__step_graph_free(g);
        return st;
    }
    return OJ_OK;
}

oj_status oj__step_graph_run(oj__step_graph *g, oj_tensor *x, oj_tensor *y) {
    oj_status st = OJ_OK;
    if (x && x != g->x) st = oj_copy_(g->x, x);
    if (st == OJ_OK && y && y != g->y) st = oj_copy_(g->y, y);
    return st == OJ_OK ? oj__graph_launch(g->graph) : st;
}

oj_status oj__step_graph_check(oj__step_graph *g) {
    return g->graph ? oj__graph_checks(g->graph) : OJ_OK;
}

void oj__step_graph_free(oj__step_graph *g) {
    oj_graph_free(g->graph);
    oj_release(g->loss);
    oj_release(g->x);
    oj_release(g->y);
    *g = (oj__step_graph){0};
}
