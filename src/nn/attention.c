/* Causal self-attention with grouped-query attention and rotary position
 * embeddings, on the fused oj_scaled_dot_product_attention op. */
#include <math.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "ojas/ops.h"

oj_status oj_nn_attention_init(oj_nn_attention *dst, oj_params *p, const char *prefix,
                               const oj_nn_attention_config *cfg, oj_dtype dt) {
    if (dst == NULL || p == NULL || cfg == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_nn_attention tmp = {0}, *a = &tmp;
    int64_t C = cfg->n_embd, H = cfg->n_head, Hkv = cfg->n_kv_head ? cfg->n_kv_head : cfg->n_head;
    if (!oj__nn_positive(p, "attention", "n_embd", C) ||
        !oj__nn_positive(p, "attention", "n_head", H) ||
        !oj__nn_positive(p, "attention", "n_kv_head", Hkv))
        return OJ_ERR_INVALID_ARGUMENT;
    if (C % H != 0 || H % Hkv != 0)
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT,
                            "attention: n_head %lld must divide n_embd %lld and n_kv_head %lld "
                            "must divide n_head",
                            (long long)H, (long long)C, (long long)Hkv);
    int64_t D = C / H;
    if (cfg->rope && D % 2 != 0)
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT,
                            "attention: rotary embeddings need an even head dim, got %lld",
                            (long long)D);
    char name[OJ_PARAM_NAME_MAX];
    int64_t mark = oj_params_count(p);
    const oj_init *pw = cfg->proj_winit ? cfg->proj_winit : cfg->winit;
    oj_status st = oj_param_name(name, sizeof name, prefix, "c_attn")
                       ? oj_nn_linear_init(&a->c_attn, p, name, C, (H + 2 * Hkv) * D, cfg->bias, dt,
                                           cfg->winit, NULL)
                       : OJ_ERR_INVALID_ARGUMENT;
    if (st == OJ_OK)
        st = oj_param_name(name, sizeof name, prefix, "c_proj")
                 ? oj_nn_linear_init(&a->c_proj, p, name, C, C, cfg->bias, dt, pw, NULL)
                 : OJ_ERR_INVALID_ARGUMENT;
    if (st == OJ_OK) st = oj_nn_dropout_init(&a->resid_dropout, p, cfg->dropout);
    if (st != OJ_OK) {
        if (oj_last_status(p->eng) == OJ_OK)
            oj_set_error(p->eng, st, "attention: prefix '%s' is too long", prefix ? prefix : "");
        return oj__nn_fail(p, mark);
    }
    a->n_head = H;
    a->n_kv_head = Hkv;
    a->head_dim = D;
    a->rope = cfg->rope;
    a->rope_theta = cfg->rope_theta > 0 ? cfg->rope_theta : 10000.0;
    *dst = tmp;
    return OJ_OK;
}

/* [B, T, heads * D] view -> [B, heads, T, D] view. */
static oj_tensor *heads_first(oj_tensor *t, int64_t B, int64_t T, int64_t heads, int64_t D) {
    int64_t s[4] = {B, T, heads, D};
    oj_tensor *r = oj_reshape(t, 4, s);
    oj_tensor *out = oj_transpose(r, 1, 2);
    oj_release(r);
    return out;
}

oj_tensor *oj_nn_attention_forward(const oj_nn_attention *a, oj_tensor *x,
                                   int64_t position_offset) {
    if (a == NULL || x == NULL) return NULL;
    oj_engine *eng = oj_tensor_engine(x);
    if (eng == NULL) return NULL;
    int64_t C = a->c_proj.out_features, H = a->n_head, Hkv = a->n_kv_head, D = a->head_dim;
    if (oj_rank(x) != 3 || oj_size(x, 2) != C) {
        char b[128];
        oj_set_error(eng, OJ_ERR_SHAPE, "attention: input %s must be [B, T, %lld]",
                     oj_shape_str(x, b, sizeof b), (long long)C);
        return NULL;
    }
    int64_t B = oj_size(x, 0), T = oj_size(x, 1);
    oj_tensor *qkv = oj_nn_linear_forward(&a->c_attn, x); // [B, T, (H + 2 Hkv) D]
    oj_tensor *parts[3] = {NULL, NULL, NULL};
    int64_t sizes[3] = {H * D, Hkv * D, Hkv * D};
    if (qkv == NULL || oj_split_sizes(qkv, 3, sizes, 2, parts) != 3) {
        oj_release(qkv);
        return NULL;
    }
    oj_release(qkv);
    oj_tensor *q = heads_first(parts[0], B, T, H, D);   // [B, H, T, D]
    oj_tensor *k = heads_first(parts[1], B, T, Hkv, D); // [B, Hkv, T, D]
    oj_tensor *v = heads_first(parts[2], B, T, Hkv, D); // [B, Hkv, T, D]
    for (int i = 0; i < 3; i++) oj_release(parts[i]);
    if (a->rope && q && k) {
        oj_tensor *qr = oj_rotary_embedding(q, position_offset, a->rope_theta);
        oj_tensor *kr = oj_rotary_embedding(k, position_offset, a->rope_theta);
        oj_release(q);
        oj_release(k);
        q = qr;
        k = kr;
    }
    oj_tensor *y = oj_scaled_dot_product_attention(q, k, v, NULL, true, NAN); // [B, H, T, D]
    oj_release(q);
    oj_release(k);
    oj_release(v);
    oj_tensor *yt = oj_transpose(y, 1, 2); // [B, T, H, D]
    oj_release(y);
    int64_t s3[3] = {B, T, C};
    oj_tensor *yc = oj_reshape(yt, 3, s3); // [B, T, C]: a view (the op stores [B, T, H, D])
    oj_release(yt);
    oj_tensor *o = oj_nn_linear_forward(&a->c_proj, yc);
    oj_release(yc);
    oj_tensor *out = oj_nn_dropout_forward(&a->resid_dropout, o);
    oj_release(o);
    return out;
}
