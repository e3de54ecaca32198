/* LayerNorm, RMSNorm and Dropout layers. */
#include <string.h>

#include "nn/nn_internal.h"
#include "ojas/ops.h"

oj_status oj_nn_layer_norm_init(oj_nn_layer_norm *dst, oj_params *p, const char *prefix, int64_t c,
                                bool bias, double eps, oj_dtype dt) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_layer_norm tmp = {0}, *l = &tmp;
    if (!oj__nn_positive(p, "layer_norm", "normalized_shape", c)) return OJ_ERR_INVALID_ARGUMENT;
    oj_init one = oj_init_ones(), zero = oj_init_zeros();
    int64_t mark = oj_params_count(p);
    l->weight = oj__nn_add(p, prefix, "weight", 1, &c, dt, &one, false);
    if (l->weight == NULL) return oj__nn_fail(p, mark);
    if (bias && (l->bias = oj__nn_add(p, prefix, "bias", 1, &c, dt, &zero, false)) == NULL) {
        l->weight = NULL;
        return oj__nn_fail(p, mark);
    }
    l->eps = eps;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_layer_norm_forward(const oj_nn_layer_norm *l, oj_tensor *x) {
    if (l == NULL || x == NULL) return NULL;
    return oj_layer_norm(x, l->weight, l->bias, l->eps);
}

oj_status oj_nn_rms_norm_init(oj_nn_rms_norm *dst, oj_params *p, const char *prefix, int64_t c,
                              bool affine, double eps, oj_dtype dt) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_rms_norm tmp = {0}, *l = &tmp;
    if (!oj__nn_positive(p, "rms_norm", "normalized_shape", c)) return OJ_ERR_INVALID_ARGUMENT;
    oj_init one = oj_init_ones();
    int64_t mark = oj_params_count(p);
    if (affine && (l->weight = oj__nn_add(p, prefix, "weight", 1, &c, dt, &one, false)) == NULL)
        return oj__nn_fail(p, mark);
    l->eps = eps;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_rms_norm_forward(const oj_nn_rms_norm *l, oj_tensor *x) {
    if (l == NULL || x == NULL) return NULL;
    return oj_rms_norm(x, l->weight, l->eps);
}

oj_status oj_nn_dropout_init(oj_nn_dropout *dst, const oj_params *p, double prob) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_dropout tmp = {0}, *l = &tmp;
    if (!(prob >= 0.0 && prob <= 1.0))
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT, "dropout: p must be in [0, 1], got %g",
                            prob);
    l->params = p;
    l->p = prob;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_dropout_forward(const oj_nn_dropout *l, oj_tensor *x) {
    if (l == NULL || x == NULL) return NULL;
    return oj_dropout(x, l->p, oj_params_training(l->params));
}
