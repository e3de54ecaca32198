/* Conv2d, BatchNorm2d and MaxPool2d layers. */
#include <math.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "ojas/ops.h"

static void pair(int64_t out[2], const int64_t *in, int64_t dflt) {
    out[0] = in ? in[0] : dflt;
    out[1] = in ? in[1] : dflt;
}

oj_status oj_nn_conv2d_init(oj_nn_conv2d *dst, oj_params *p, const char *prefix, int64_t in_ch,
                            int64_t out_ch, const int64_t kernel[2], const int64_t stride[2],
                            const int64_t padding[2], const int64_t dilation[2], int groups,
                            bool bias, oj_dtype dt, const oj_init *winit, const oj_init *binit) {
    if (dst == NULL || p == NULL || kernel == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_conv2d tmp = {0}, *l = &tmp;
    if (!oj__nn_positive(p, "conv2d", "in_channels", in_ch) ||
        !oj__nn_positive(p, "conv2d", "out_channels", out_ch) ||
        !oj__nn_positive(p, "conv2d", "kernel height", kernel[0]) ||
        !oj__nn_positive(p, "conv2d", "kernel width", kernel[1]) ||
        !oj__nn_positive(p, "conv2d", "groups", groups))
        return OJ_ERR_INVALID_ARGUMENT;
    if (in_ch % groups != 0 || out_ch % groups != 0)
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT,
                            "conv2d: groups %d must divide in_channels %lld and out_channels %lld",
                            groups, (long long)in_ch, (long long)out_ch);
    /* torch.nn.Conv2d.reset_parameters: kaiming_uniform_(a=sqrt(5)) and a
     * bias U(+-1/sqrt(fan_in)). */
    int64_t fan_in = in_ch / groups * kernel[0] * kernel[1];
    oj_init wdef = oj_init_kaiming_uniform(oj_init_leaky_relu_gain(sqrt(5.0)), OJ_FAN_IN);
    double bound = 1.0 / sqrt((double)fan_in);
    oj_init bdef = oj_init_uniform(-bound, bound);
    int64_t ws[4] = {out_ch, in_ch / groups, kernel[0], kernel[1]};
    int64_t mark = oj_params_count(p);
    l->weight = oj__nn_add(p, prefix, "weight", 4, ws, dt, winit ? winit : &wdef, false);
    if (l->weight == NULL) return oj__nn_fail(p, mark);
    if (bias && (l->bias = oj__nn_add(p, prefix, "bias", 1, &out_ch, dt, binit ? binit : &bdef,
                                      false)) == NULL) {
        l->weight = NULL;
        return oj__nn_fail(p, mark);
    }
    pair(l->stride, stride, 1);
    pair(l->padding, padding, 0);
    pair(l->dilation, dilation, 1);
    l->groups = groups;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_conv2d_forward(const oj_nn_conv2d *l, oj_tensor *x) {
    if (l == NULL || x == NULL) return NULL;
    return oj_conv2d(x, l->weight, l->bias, l->stride, l->padding, l->dilation, l->groups);
}

oj_status oj_nn_batch_norm2d_init(oj_nn_batch_norm2d *dst, oj_params *p, const char *prefix,
                                  int64_t c, bool affine, double momentum, double eps,
                                  oj_dtype dt) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_batch_norm2d tmp = {0}, *l = &tmp;
    if (!oj__nn_positive(p, "batch_norm2d", "num_features", c)) return OJ_ERR_INVALID_ARGUMENT;
    if (!(momentum >= 0 && momentum <= 1) || !(eps >= 0))
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT,
                            "batch_norm2d: momentum %g must be in [0, 1] and eps %g >= 0", momentum,
                            eps);
    oj_init one = oj_init_ones(), zero = oj_init_zeros();
    int64_t mark = oj_params_count(p);
    bool ok = true;
    if (affine)
        ok = (l->weight = oj__nn_add(p, prefix, "weight", 1, &c, dt, &one, false)) &&
             (l->bias = oj__nn_add(p, prefix, "bias", 1, &c, dt, &zero, false));
    ok = ok && (l->running_mean = oj__nn_add(p, prefix, "running_mean", 1, &c, dt, &zero, true)) &&
         (l->running_var = oj__nn_add(p, prefix, "running_var", 1, &c, dt, &one, true)) &&
         (l->num_batches_tracked =
              oj__nn_add(p, prefix, "num_batches_tracked", 0, NULL, OJ_I64, &zero, true));
    if (!ok) {
        return oj__nn_fail(p, mark);
    }
    l->params = p;
    l->momentum = momentum;
    l->eps = eps;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_batch_norm2d_forward(const oj_nn_batch_norm2d *l, oj_tensor *x) {
    if (l == NULL || x == NULL) return NULL;
    oj_engine *eng = oj_tensor_engine(x);
    if (eng == NULL) return NULL;
    if (oj_rank(x) != 4) {
        char b[128];
        oj_set_error(eng, OJ_ERR_SHAPE, "batch_norm2d: input %s must be [N, C, H, W]",
                     oj_shape_str(x, b, sizeof b));
        return NULL;
    }
    bool training = oj_params_training(l->params);
    oj_tensor *y = oj_batch_norm(x, l->running_mean, l->running_var, l->weight, l->bias, training,
                                 l->momentum, l->eps);
    if (y != NULL && training) { /* num_batches_tracked += 1, as torch */
        oj_tensor *one = oj_scalar(eng, 1.0, OJ_I64);
        oj_status st = oj_add_(l->num_batches_tracked, one);
        oj_release(one);
        if (st != OJ_OK) {
            oj_release(y);
            return NULL;
        }
    }
    return y;
}

oj_nn_max_pool2d oj_nn_max_pool2d_make(const int64_t kernel[2], const int64_t stride[2],
                                       const int64_t padding[2]) {
    oj_nn_max_pool2d l;
    pair(l.kernel, kernel, 0);
    if (stride)
        pair(l.stride, stride, 1);
    else
        pair(l.stride, kernel, 0);
    pair(l.padding, padding, 0);
    return l;
}

oj_tensor *oj_nn_max_pool2d_forward(const oj_nn_max_pool2d *l, oj_tensor *x) {
    if (l == NULL || x == NULL) return NULL;
    return oj_max_pool2d(x, l->kernel, l->stride, l->padding);
}
