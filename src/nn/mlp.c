/* Feed-forward blocks: GELU MLP (GPT-2) and SwiGLU (Llama). */
#include <string.h>

#include "nn/nn_internal.h"
#include "ojas/ops.h"

/* Init Linear "<prefix>.<leaf>". */
static oj_status sub_linear(oj_nn_linear *l, oj_params *p, const char *prefix, const char *leaf,
                            int64_t in, int64_t out, bool bias, oj_dtype dt, const oj_init *w) {
    char name[OJ_PARAM_NAME_MAX];
    if (oj_param_name(name, sizeof name, prefix, leaf) == NULL)
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT, "mlp: prefix '%s' is too long",
                            prefix ? prefix : "");
    return oj_nn_linear_init(l, p, name, in, out, bias, dt, w, NULL);
}

oj_status oj_nn_mlp_init(oj_nn_mlp *dst, oj_params *p, const char *prefix, int64_t c,
                         int64_t hidden, bool bias, bool gelu_tanh, double dropout, oj_dtype dt,
                         const oj_init *winit, const oj_init *proj_winit) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_mlp tmp = {0}, *m = &tmp;
    int64_t mark = oj_params_count(p);
    oj_status st = sub_linear(&m->c_fc, p, prefix, "c_fc", c, hidden, bias, dt, winit);
    if (st == OJ_OK)
        st = sub_linear(&m->c_proj, p, prefix, "c_proj", hidden, c, bias, dt,
                        proj_winit ? proj_winit : winit);
    if (st == OJ_OK) st = oj_nn_dropout_init(&m->dropout, p, dropout);
    if (st != OJ_OK) {
        return oj__nn_fail(p, mark);
    }
    m->gelu_tanh = gelu_tanh;
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_mlp_forward(const oj_nn_mlp *m, oj_tensor *x) {
    if (m == NULL || x == NULL) return NULL;
    oj_tensor *h = oj_nn_linear_forward(&m->c_fc, x); // [..., hidden]
    oj_tensor *g = m->gelu_tanh ? oj_gelu_tanh(h) : oj_gelu(h);
    oj_release(h);
    oj_tensor *y = oj_nn_linear_forward(&m->c_proj, g); // [..., C]
    oj_release(g);
    oj_tensor *out = oj_nn_dropout_forward(&m->dropout, y);
    oj_release(y);
    return out;
}

oj_status oj_nn_swiglu_init(oj_nn_swiglu *dst, oj_params *p, const char *prefix, int64_t c,
                            int64_t hidden, oj_dtype dt, const oj_init *winit,
                            const oj_init *proj_winit) {
    if (dst == NULL || p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_swiglu tmp = {0}, *m = &tmp;
    int64_t mark = oj_params_count(p);
    oj_status st = sub_linear(&m->gate_proj, p, prefix, "gate_proj", c, hidden, false, dt, winit);
    if (st == OJ_OK)
        st = sub_linear(&m->up_proj, p, prefix, "up_proj", c, hidden, false, dt, winit);
    if (st == OJ_OK)
        st = sub_linear(&m->down_proj, p, prefix, "down_proj", hidden, c, false, dt,
                        proj_winit ? proj_winit : winit);
    if (st != OJ_OK) {
        return oj__nn_fail(p, mark);
    }
    *dst = tmp;
    return OJ_OK;
}

oj_tensor *oj_nn_swiglu_forward(const oj_nn_swiglu *m, oj_tensor *x) {
    if (m == NULL || x == NULL) return NULL;
    oj_tensor *g = oj_nn_linear_forward(&m->gate_proj, x); // [..., hidden]
    oj_tensor *u = oj_nn_linear_forward(&m->up_proj, x);   // [..., hidden]
    oj_tensor *s = oj_silu(g);
    oj_tensor *h = oj_mul(s, u);
    oj_release(g);
    oj_release(u);
    oj_release(s);
    oj_tensor *out = oj_nn_linear_forward(&m->down_proj, h); // [..., C]
    oj_release(h);
    return out;
}
