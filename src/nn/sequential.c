/* A sequential composition of layers: a list of (kind, layer) steps run in
 * order, dispatched by a switch (no function-pointer tables). */
#include "nn/nn_internal.h"
#include "ojas/ops.h"

oj_status oj_nn_sequential_add(oj_nn_sequential *s, oj_nn_kind kind, const void *layer) {
    if (s == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (s->n >= OJ_NN_SEQUENTIAL_MAX) return OJ_ERR_OUT_OF_RANGE;
    if ((unsigned)kind > OJ_NN_FN || kind == OJ_NN_FN) return OJ_ERR_INVALID_ARGUMENT;
    bool needs_layer = kind < OJ_NN_RELU;
    if (needs_layer && layer == NULL) return OJ_ERR_INVALID_ARGUMENT;
    s->steps[s->n++] = (oj_nn_step){.kind = kind, .layer = layer};
    return OJ_OK;
}

oj_status oj_nn_sequential_add_fn(oj_nn_sequential *s, oj_tensor *(*fn)(void *ctx, oj_tensor *x),
                                  void *ctx) {
    if (s == NULL || fn == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (s->n >= OJ_NN_SEQUENTIAL_MAX) return OJ_ERR_OUT_OF_RANGE;
    s->steps[s->n++] = (oj_nn_step){.kind = OJ_NN_FN, .fn = fn, .ctx = ctx};
    return OJ_OK;
}

static oj_tensor *run(const oj_nn_step *st, oj_tensor *x) {
    switch (st->kind) {
    case OJ_NN_LINEAR: return oj_nn_linear_forward(st->layer, x);
    case OJ_NN_EMBEDDING: return oj_nn_embedding_forward(st->layer, x);
    case OJ_NN_LAYER_NORM: return oj_nn_layer_norm_forward(st->layer, x);
    case OJ_NN_RMS_NORM: return oj_nn_rms_norm_forward(st->layer, x);
    case OJ_NN_DROPOUT: return oj_nn_dropout_forward(st->layer, x);
    case OJ_NN_ATTENTION: return oj_nn_attention_forward(st->layer, x, 0);
    case OJ_NN_MLP: return oj_nn_mlp_forward(st->layer, x);
    case OJ_NN_SWIGLU: return oj_nn_swiglu_forward(st->layer, x);
    case OJ_NN_CONV2D: return oj_nn_conv2d_forward(st->layer, x);
    case OJ_NN_BATCH_NORM2D: return oj_nn_batch_norm2d_forward(st->layer, x);
    case OJ_NN_MAX_POOL2D: return oj_nn_max_pool2d_forward(st->layer, x);
    case OJ_NN_RELU: return oj_relu(x);
    case OJ_NN_GELU: return oj_gelu(x);
    case OJ_NN_GELU_TANH: return oj_gelu_tanh(x);
    case OJ_NN_SILU: return oj_silu(x);
    case OJ_NN_TANH: return oj_tanh(x);
    case OJ_NN_SIGMOID: return oj_sigmoid(x);
    case OJ_NN_FLATTEN: return oj_flatten(x, 1, -1);
    case OJ_NN_FN: return st->fn(st->ctx, x);
    }
    return NULL;
}

oj_tensor *oj_nn_sequential_forward(const oj_nn_sequential *s, oj_tensor *x) {
    if (s == NULL || x == NULL) return NULL;
    if (s->n == 0) return oj_expand(x, oj_rank(x), oj_shape(x));
    oj_tensor *cur = x;
    for (int i = 0; i < s->n && cur != NULL; i++) {
        oj_tensor *next = run(&s->steps[i], cur);
        if (cur != x && next != cur) oj_release(cur); /* autograd keeps what it saved */
        cur = next;
    }
    return cur;
}
