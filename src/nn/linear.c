/* Linear and Embedding layers. */
#include <math.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "ojas/ops.h"

oj_status oj_nn_linear_init(oj_nn_linear *dst, oj_params *p, const char *prefix, int64_t in,
                            int64_t out, bool bias, oj_dtype dt, const oj_init *winit,
                            const oj_init *binit) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_linear tmp = {0}, *l = &tmp;
    if (!oj__nn_positive(p, "linear", "in_features", in) ||
        !oj__nn_positive(p, "linear", "out_features", out))
        return OJ_ERR_INVALID_ARGUMENT;
    /* torch.nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)), i.e.
     * U(+-1/sqrt(in)), and the bias U(+-1/sqrt(in)). */
    oj_init wdef = oj_init_kaiming_uniform(oj_init_leaky_relu_gain(sqrt(5.0)), OJ_FAN_IN);
    double bound = 1.0 / sqrt((double)in);
    oj_init bdef = oj_init_uniform(-bound, bound);
    int64_t mark = oj_params_count(p);
    int64_t ws[2] = {out, in};
    l->weight = oj__nn_add(p, prefix, "weight", 2, ws, dt, winit ? winit : &wdef, false);
    if (l->weight == NULL) return oj__nn_fail(p, mark);
    if (bias) {
        l->bias = oj__nn_add(p, prefix, "bias", 1, &out, dt, binit ? binit : &bdef, false);
        if (l->bias == NULL) {
            l->weight = NULL;
            return oj__nn_fail(p, mark);
        }
    }
    l->in_features = in;
    l->out_features = out;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_linear_forward(const oj_nn_linear *l, oj_tensor *x) {
    if (l == NULL || x == NULL) return NULL;
    return oj_linear(x, l->weight, l->bias); // x [..., in] -> [..., out]
}

oj_status oj_nn_embedding_init(oj_nn_embedding *dst, oj_params *p, const char *prefix, int64_t num,
                               int64_t dim, oj_dtype dt, const oj_init *winit) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_embedding tmp = {0}, *l = &tmp;
    if (!oj__nn_positive(p, "embedding", "num_embeddings", num) ||
        !oj__nn_positive(p, "embedding", "embedding_dim", dim))
        return OJ_ERR_INVALID_ARGUMENT;
    oj_init def = oj_init_normal(0.0, 1.0); /* torch.nn.Embedding */
    int64_t mark = oj_params_count(p);
    int64_t ws[2] = {num, dim};
    l->weight = oj__nn_add(p, prefix, "weight", 2, ws, dt, winit ? winit : &def, false);
    if (l->weight == NULL) return oj__nn_fail(p, mark);
    l->num_embeddings = num;
    l->embedding_dim = dim;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_embedding_forward(const oj_nn_embedding *l, oj_tensor *idx) {
    if (l == NULL || idx == NULL) return NULL;
    return oj_embedding(l->weight, idx); // idx [...] -> [..., dim]
}
