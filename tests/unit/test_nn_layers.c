// test: nn layers — parameter names and default inits, forward against
// hand-written float64 references (linear, attention with GQA and rotary
// embeddings, MLP, SwiGLU), causality, gradcheck through layers,
// train/eval behaviour of dropout and batch norm, init rollback on failure,
// and a small Sequential conv net trained for a few AdamW steps.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/nn.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

static oj_engine *eng_new(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = 1;
    cfg.seed = 5;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

static void host(oj_tensor *t, double *out) {
    for (int64_t i = 0; i < oj_numel(t); i++) out[i] = oj_item_at(t, i);
}

/* y[n, o] = sum_i x[n, i] w[o, i] + b[o] */
static void ref_linear(const double *x, const double *w, const double *b, double *y, int N, int in,
                       int out) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < in; i++) s += x[n * in + i] * w[o * in + i];
            y[n * out + o] = s;
        }
}

static void expect_close(const double *got, const double *want, int n, double tol,
                         const char *what) {
    for (int i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > tol * fmax(1.0, fabs(want[i])))
            fail_msg("%s[%d]: %.17g vs %.17g", what, i, got[i], want[i]);
}

/* gradcheck helpers: inputs[0] is x; the rest are the layer's tensors */
typedef oj_tensor *(*layer_fn)(const void *layer, oj_tensor *x);
typedef struct {
    layer_fn f;
    const void *layer;
} gc_ctx;
static oj_tensor *gc_call(oj_tensor *const *in, int n, void *vctx) {
    (void)n;
    gc_ctx *c = vctx;
    return c->f(c->layer, in[0]);
}

static void gradcheck_layer(oj_engine *eng, layer_fn f, const void *layer, oj_tensor *x,
                            oj_params *p) {
    oj_tensor *ins[16];
    int n = 0;
    ins[n++] = x;
    for (int64_t i = 0; i < oj_params_count(p) && n < 16; i++)
        if (oj_requires_grad(oj_params_tensor(p, i))) ins[n++] = oj_params_tensor(p, i);
    gc_ctx c = {f, layer};
    oj_status st = oj_gradcheck(eng, gc_call, &c, ins, n, NULL);
    if (st != OJ_OK) fail_msg("gradcheck: %s", oj_last_error(eng));
}

static oj_tensor *f_linear(const void *l, oj_tensor *x) { return oj_nn_linear_forward(l, x); }
static oj_tensor *f_mlp(const void *l, oj_tensor *x) { return oj_nn_mlp_forward(l, x); }
static oj_tensor *f_swiglu(const void *l, oj_tensor *x) { return oj_nn_swiglu_forward(l, x); }
static oj_tensor *f_rms(const void *l, oj_tensor *x) { return oj_nn_rms_norm_forward(l, x); }
static oj_tensor *f_attn(const void *l, oj_tensor *x) { return oj_nn_attention_forward(l, x, 0); }

static void test_linear_embedding(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_params *p = oj_params_create(eng, 3);
    oj_nn_linear fc, nob;
    assert_int_equal(oj_nn_linear_init(&fc, p, "net.fc", 4, 3, true, OJ_F64, NULL, NULL), OJ_OK);
    assert_int_equal(oj_nn_linear_init(&nob, p, "net.head", 3, 2, false, OJ_F64, NULL, NULL),
                     OJ_OK);
    assert_int_equal(oj_params_count(p), 3);
    assert_string_equal(oj_params_name(p, 0), "net.fc.weight");
    assert_string_equal(oj_params_name(p, 1), "net.fc.bias");
    assert_string_equal(oj_params_name(p, 2), "net.head.weight");
    assert_null(nob.bias);
    double w[12], b[3];
    host(fc.weight, w);
    host(fc.bias, b);
    for (int i = 0; i < 12; i++) assert_true(fabs(w[i]) <= 0.5); // U(+-1/sqrt(4))
    for (int i = 0; i < 3; i++) assert_true(fabs(b[i]) <= 0.5);

    oj_scope_begin(eng);
    int64_t xs[3] = {2, 1, 4};
    oj_tensor *x = oj_rand_normal(eng, 3, xs, OJ_F64, 0, 1);
    oj_tensor *y = oj_nn_linear_forward(&fc, x);
    assert_int_equal(oj_rank(y), 3);
    assert_int_equal(oj_size(y, 2), 3);
    double xv[8], yv[6], want[6];
    host(x, xv);
    host(y, yv);
    ref_linear(xv, w, b, want, 2, 4, 3);
    expect_close(yv, want, 6, 1e-14, "linear");
    oj_set_requires_grad(x, true);
    gradcheck_layer(eng, f_linear, &fc, x, p);
    // bad input width
    int64_t bad[2] = {2, 5};
    assert_null(oj_nn_linear_forward(&fc, oj_zeros(eng, 2, bad, OJ_F64)));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    oj_scope_end(eng);

    // embedding
    oj_nn_embedding emb;
    assert_int_equal(oj_nn_embedding_init(&emb, p, "wte", 10, 4, OJ_F32, NULL), OJ_OK);
    assert_string_equal(oj_params_name(p, 3), "wte.weight");
    oj_scope_begin(eng);
    int64_t ids[3] = {7, 0, 7}, is[1] = {3};
    oj_tensor *idx = oj_from_host(eng, 1, is, OJ_I64, ids, sizeof ids);
    oj_tensor *e = oj_nn_embedding_forward(&emb, idx);
    assert_int_equal(oj_size(e, 0), 3);
    assert_int_equal(oj_size(e, 1), 4);
    for (int j = 0; j < 4; j++) {
        assert_float_equal(oj_item_at(e, j), oj_item_at(emb.weight, 7 * 4 + j), 0);
        assert_float_equal(oj_item_at(e, 8 + j), oj_item_at(emb.weight, 7 * 4 + j), 0);
        assert_float_equal(oj_item_at(e, 4 + j), oj_item_at(emb.weight, j), 0);
    }
    oj_scope_end(eng);

    // errors leave the registry as it was
    int64_t n0 = oj_params_count(p);
    assert_int_equal(oj_nn_linear_init(&fc, p, "x", 0, 3, true, OJ_F32, NULL, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_nn_linear_init(&fc, p, "net.fc", 4, 3, true, OJ_F32, NULL, NULL),
                     OJ_ERR_INVALID_ARGUMENT); // duplicate names
    oj_clear_error(eng);
    assert_int_equal(oj_params_count(p), n0);
    oj_params_free(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_norms_and_dropout(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_params *p = oj_params_create(eng, 3);
    oj_nn_layer_norm ln, ln_nob;
    oj_nn_rms_norm rms, rms_free;
    assert_int_equal(oj_nn_layer_norm_init(&ln, p, "ln_f", 6, true, 1e-5, OJ_F64), OJ_OK);
    assert_int_equal(oj_nn_layer_norm_init(&ln_nob, p, "ln_2", 6, false, 1e-5, OJ_F64), OJ_OK);
    assert_int_equal(oj_nn_rms_norm_init(&rms, p, "norm", 6, true, 1e-6, OJ_F64), OJ_OK);
    assert_int_equal(oj_nn_rms_norm_init(&rms_free, p, "qk_norm", 6, false, 1e-6, OJ_F64), OJ_OK);
    assert_int_equal(oj_params_count(p), 4); // ln_f.weight, ln_f.bias, ln_2.weight, norm.weight
    assert_string_equal(oj_params_name(p, 1), "ln_f.bias");
    assert_float_equal(oj_item_at(ln.weight, 3), 1.0, 0);
    assert_float_equal(oj_item_at(ln.bias, 3), 0.0, 0);
    assert_null(rms_free.weight);

    oj_scope_begin(eng);
    int64_t xs[2] = {3, 6};
    oj_tensor *x = oj_rand_normal(eng, 2, xs, OJ_F64, 1, 2);
    oj_tensor *y = oj_nn_layer_norm_forward(&ln, x);
    for (int r = 0; r < 3; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < 6; j++) m += oj_item_at(y, r * 6 + j) / 6;
        for (int j = 0; j < 6; j++) v += pow(oj_item_at(y, r * 6 + j) - m, 2) / 6;
        assert_float_equal(m, 0, 1e-12);
        assert_float_equal(v, 1, 1e-4);
    }
    oj_tensor *z = oj_nn_rms_norm_forward(&rms_free, x);
    for (int r = 0; r < 3; r++) {
        double ms = 0;
        for (int j = 0; j < 6; j++) ms += pow(oj_item_at(z, r * 6 + j), 2) / 6;
        assert_float_equal(ms, 1, 1e-5);
    }
    oj_set_requires_grad(x, true);
    oj_params *only = oj_params_create(eng, 0); // gradcheck over rms.weight
    oj_params_adopt(only, "w", rms.weight, false);
    gradcheck_layer(eng, f_rms, &rms, x, only);
    oj_params_free(only);

    // dropout: identity in eval, mask + 1/(1-p) scaling in training
    oj_nn_dropout d;
    assert_int_equal(oj_nn_dropout_init(&d, p, 0.5), OJ_OK);
    int64_t big[1] = {1000};
    oj_tensor *ones = oj_ones(eng, 1, big, OJ_F32);
    oj_tensor *t = oj_nn_dropout_forward(&d, ones);
    int zeros = 0;
    for (int i = 0; i < 1000; i++) {
        double v = oj_item_at(t, i);
        assert_true(v == 0.0 || v == 2.0);
        zeros += v == 0.0;
    }
    assert_true(zeros > 400 && zeros < 600);
    oj_params_set_training(p, false);
    oj_tensor *ev = oj_nn_dropout_forward(&d, ones);
    for (int i = 0; i < 1000; i++) assert_float_equal(oj_item_at(ev, i), 1.0, 0);
    assert_int_equal(oj_nn_dropout_init(&d, p, 1.5), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_params_free(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- attention */

/* Reference causal GQA attention with half-split rope, in double.
 * x [T, C] (B = 1); weights from the layer. */
static void ref_attention(const oj_nn_attention *a, const double *x, int T, double *out) {
    int C = (int)a->c_proj.out_features, H = (int)a->n_head, Hkv = (int)a->n_kv_head;
    int D = (int)a->head_dim, W = (H + 2 * Hkv) * D;
    double *wa = malloc(sizeof(double) * (size_t)(W * C)), *ba = malloc(sizeof(double) * (size_t)W);
    double *wp = malloc(sizeof(double) * (size_t)(C * C)), *bp = malloc(sizeof(double) * (size_t)C);
    double *qkv = malloc(sizeof(double) * (size_t)(T * W)),
           *y = calloc((size_t)(T * C), sizeof(double));
    host(a->c_attn.weight, wa);
    host(a->c_attn.bias, ba);
    host(a->c_proj.weight, wp);
    host(a->c_proj.bias, bp);
    ref_linear(x, wa, ba, qkv, T, C, W);
    // rope on q heads and k heads, position t
    if (a->rope)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H + Hkv; h++) {
                double *v = qkv + t * W + h * D;
                for (int i = 0; i < D / 2; i++) {
                    double ang = t * pow(a->rope_theta, -2.0 * i / D);
                    double x1 = v[i], x2 = v[i + D / 2];
                    v[i] = x1 * cos(ang) - x2 * sin(ang);
                    v[i + D / 2] = x2 * cos(ang) + x1 * sin(ang);
                }
            }
    for (int h = 0; h < H; h++) {
        int kh = h / (H / Hkv);
        for (int t = 0; t < T; t++) {
            const double *q = qkv + t * W + h * D;
            double sc[64], mx = -INFINITY, den = 0;
            for (int s = 0; s <= t; s++) {
                const double *k = qkv + s * W + (H + kh) * D;
                double d = 0;
                for (int i = 0; i < D; i++) d += q[i] * k[i];
                sc[s] = d / sqrt((double)D);
                mx = fmax(mx, sc[s]);
            }
            for (int s = 0; s <= t; s++) den += (sc[s] = exp(sc[s] - mx));
            for (int s = 0; s <= t; s++) {
                const double *v = qkv + s * W + (H + Hkv + kh) * D;
                for (int i = 0; i < D; i++) y[t * C + h * D + i] += sc[s] / den * v[i];
            }
        }
    }
    ref_linear(y, wp, bp, out, T, C, C);
    free(wa);
    free(ba);
    free(wp);
    free(bp);
    free(qkv);
    free(y);
}

static void test_attention_gqa_rope(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_params *p = oj_params_create(eng, 8);
    oj_nn_attention a;
    oj_init w = oj_init_normal(0, 0.3);
    oj_nn_attention_config cfg = {.n_embd = 8,
                                  .n_head = 4,
                                  .n_kv_head = 2,
                                  .bias = true,
                                  .rope = true,
                                  .rope_theta = 100.0,
                                  .winit = &w};
    assert_int_equal(oj_nn_attention_init(&a, p, "h.0.attn", &cfg, OJ_F64), OJ_OK);
    assert_string_equal(oj_params_name(p, 0), "h.0.attn.c_attn.weight");
    assert_string_equal(oj_params_name(p, 2), "h.0.attn.c_proj.weight");
    assert_int_equal(oj_size(a.c_attn.weight, 0), (4 + 2 * 2) * 2);
    assert_int_equal(a.head_dim, 2);
    // biases non-zero too so the reference checks them
    oj_init bi = oj_init_normal(0, 0.1);
    assert_int_equal(oj_init_tensor(a.c_attn.bias, &bi, 1, "b1"), OJ_OK);
    assert_int_equal(oj_init_tensor(a.c_proj.bias, &bi, 1, "b2"), OJ_OK);

    oj_scope_begin(eng);
    enum { T = 5, C = 8 };
    int64_t xs[3] = {1, T, C};
    oj_tensor *x = oj_rand_normal(eng, 3, xs, OJ_F64, 0, 1);
    oj_tensor *y = oj_nn_attention_forward(&a, x, 0);
    assert_non_null(y);
    double xv[T * C], yv[T * C], want[T * C];
    host(x, xv);
    host(y, yv);
    ref_attention(&a, xv, T, want);
    expect_close(yv, want, T * C, 1e-12, "attention");

    // causal: changing the last token changes only the last position
    double xv2[T * C];
    memcpy(xv2, xv, sizeof xv);
    for (int j = 0; j < C; j++) xv2[(T - 1) * C + j] += 1.0;
    oj_tensor *x2 = oj_from_host(eng, 3, xs, OJ_F64, xv2, sizeof xv2);
    oj_tensor *y2 = oj_nn_attention_forward(&a, x2, 0);
    double yv2[T * C];
    host(y2, yv2);
    assert_memory_equal(yv, yv2, sizeof(double) * (T - 1) * C);
    assert_true(yv[(T - 1) * C] != yv2[(T - 1) * C]);

    // wrong input shapes
    int64_t bad[3] = {1, T, 6};
    assert_null(oj_nn_attention_forward(&a, oj_zeros(eng, 3, bad, OJ_F64), 0));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);

    // gradcheck on a tiny block (B = 2, T = 3)
    int64_t gs[3] = {2, 3, C};
    oj_tensor *gx = oj_rand_normal(eng, 3, gs, OJ_F64, 0, 1);
    oj_set_requires_grad(gx, true);
    gradcheck_layer(eng, f_attn, &a, gx, p);
    oj_scope_end(eng);

    // config errors roll back
    int64_t n0 = oj_params_count(p);
    cfg.n_kv_head = 3;
    assert_int_equal(oj_nn_attention_init(&a, p, "h.1.attn", &cfg, OJ_F64),
                     OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    cfg.n_kv_head = 2;
    int64_t s1[1] = {8};
    oj_init z = oj_init_zeros();
    oj_params_add(p, "h.2.attn.c_proj.weight", 1, s1, OJ_F64, &z); // collides with c_proj
    assert_int_equal(oj_nn_attention_init(&a, p, "h.2.attn", &cfg, OJ_F64),
                     OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_params_count(p), n0 + 1); // c_attn of h.2 was rolled back
    assert_int_equal(oj_params_find(p, "h.2.attn.c_attn.weight"), -1);
    oj_params_free(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_mlp_swiglu(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_params *p = oj_params_create(eng, 9);
    oj_nn_mlp m;
    oj_nn_swiglu s;
    assert_int_equal(oj_nn_mlp_init(&m, p, "h.0.mlp", 4, 16, true, true, 0.0, OJ_F64, NULL, NULL),
                     OJ_OK);
    oj_params *q = oj_params_create(eng, 9);
    assert_int_equal(oj_nn_swiglu_init(&s, q, "layers.0.mlp", 4, 6, OJ_F64, NULL, NULL), OJ_OK);
    assert_string_equal(oj_params_name(p, 0), "h.0.mlp.c_fc.weight");
    assert_string_equal(oj_params_name(p, 3), "h.0.mlp.c_proj.bias");
    assert_string_equal(oj_params_name(q, 0), "layers.0.mlp.gate_proj.weight");
    assert_string_equal(oj_params_name(q, 1), "layers.0.mlp.up_proj.weight");
    assert_string_equal(oj_params_name(q, 2), "layers.0.mlp.down_proj.weight");
    assert_int_equal(oj_params_count(q), 3);

    oj_scope_begin(eng);
    int64_t xs[2] = {3, 4};
    oj_tensor *x = oj_rand_normal(eng, 2, xs, OJ_F64, 0, 1);
    double xv[12], w1[64], b1[16], w2[64], b2[4], h[48], out[12], want[12];
    host(x, xv);
    host(m.c_fc.weight, w1);
    host(m.c_fc.bias, b1);
    host(m.c_proj.weight, w2);
    host(m.c_proj.bias, b2);
    ref_linear(xv, w1, b1, h, 3, 4, 16);
    for (int i = 0; i < 48; i++)
        h[i] = 0.5 * h[i] * (1 + tanh(0.7978845608028654 * (h[i] + 0.044715 * pow(h[i], 3))));
    ref_linear(h, w2, b2, want, 3, 16, 4);
    host(oj_nn_mlp_forward(&m, x), out);
    expect_close(out, want, 12, 1e-12, "mlp");

    double wg[24], wu[24], wd[24], g[18], u[18];
    host(s.gate_proj.weight, wg);
    host(s.up_proj.weight, wu);
    host(s.down_proj.weight, wd);
    ref_linear(xv, wg, NULL, g, 3, 4, 6);
    ref_linear(xv, wu, NULL, u, 3, 4, 6);
    for (int i = 0; i < 18; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
    ref_linear(g, wd, NULL, want, 3, 6, 4);
    host(oj_nn_swiglu_forward(&s, x), out);
    expect_close(out, want, 12, 1e-12, "swiglu");

    oj_set_requires_grad(x, true);
    gradcheck_layer(eng, f_mlp, &m, x, p);
    gradcheck_layer(eng, f_swiglu, &s, x, q);
    oj_scope_end(eng);
    oj_params_free(p);
    oj_params_free(q);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- conv net */

static void test_conv_bn_pool_sequential(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_params *p = oj_params_create(eng, 21);
    oj_nn_conv2d conv;
    oj_nn_batch_norm2d bn;
    oj_nn_linear fc;
    int64_t k3[2] = {3, 3}, pad1[2] = {1, 1}, k2[2] = {2, 2};
    assert_int_equal(oj_nn_conv2d_init(&conv, p, "features.0", 2, 4, k3, NULL, pad1, NULL, 1, true,
                                       OJ_F32, NULL, NULL),
                     OJ_OK);
    assert_int_equal(oj_nn_batch_norm2d_init(&bn, p, "features.1", 4, true, 0.1, 1e-5, OJ_F32),
                     OJ_OK);
    oj_nn_max_pool2d pool = oj_nn_max_pool2d_make(k2, NULL, NULL);
    assert_int_equal(pool.stride[0], 2);
    assert_int_equal(
        oj_nn_linear_init(&fc, p, "classifier", 4 * 2 * 2, 3, true, OJ_F32, NULL, NULL), OJ_OK);
    const char *want[] = {"features.0.weight",
                          "features.0.bias",
                          "features.1.weight",
                          "features.1.bias",
                          "features.1.running_mean",
                          "features.1.running_var",
                          "features.1.num_batches_tracked",
                          "classifier.weight",
                          "classifier.bias"};
    assert_int_equal(oj_params_count(p), 9);
    for (int i = 0; i < 9; i++) assert_string_equal(oj_params_name(p, i), want[i]);
    assert_true(oj_params_is_buffer(p, 6));
    assert_int_equal(oj_tensor_dtype(bn.num_batches_tracked), OJ_I64);
    double w[72];
    host(conv.weight, w);
    for (int i = 0; i < 72; i++) assert_true(fabs(w[i]) <= 1.0 / sqrt(18.0) + 1e-7);
    assert_int_equal(
        oj_nn_conv2d_init(&conv, p, "bad", 3, 4, k3, NULL, NULL, NULL, 2, true, OJ_F32, NULL, NULL),
        OJ_ERR_INVALID_ARGUMENT); // groups must divide channels
    oj_clear_error(eng);

    oj_nn_sequential seq = {0};
    assert_int_equal(oj_nn_sequential_add(&seq, OJ_NN_CONV2D, &conv), OJ_OK);
    assert_int_equal(oj_nn_sequential_add(&seq, OJ_NN_BATCH_NORM2D, &bn), OJ_OK);
    assert_int_equal(oj_nn_sequential_add(&seq, OJ_NN_RELU, NULL), OJ_OK);
    assert_int_equal(oj_nn_sequential_add(&seq, OJ_NN_MAX_POOL2D, &pool), OJ_OK);
    assert_int_equal(oj_nn_sequential_add(&seq, OJ_NN_FLATTEN, NULL), OJ_OK);
    assert_int_equal(oj_nn_sequential_add(&seq, OJ_NN_LINEAR, &fc), OJ_OK);
    assert_int_equal(oj_nn_sequential_add(&seq, OJ_NN_LINEAR, NULL), OJ_ERR_INVALID_ARGUMENT);

    // a few AdamW steps fit fixed targets: the loss goes down
    int64_t xs[4] = {8, 2, 4, 4}, ts[2] = {8, 3};
    oj_tensor *x = oj_rand_normal(eng, 4, xs, OJ_F32, 0, 1);
    oj_tensor *target = oj_rand_normal(eng, 2, ts, OJ_F32, 0, 1);
    oj_optim *opt = oj_optim_create(eng);
    oj_optim_hparams hp = oj_adamw_hparams(0.05, 0.0);
    oj_named_tensors sd = oj_params_state_dict(p);
    assert_int_equal(oj_optim_add_group(opt, &hp, &sd), 0);
    assert_int_equal(oj_optim_group_size(opt, 0), 6); // buffers are not trained
    double first = 0, last = 0;
    for (int step = 0; step < 25; step++) {
        oj_scope_begin(eng);
        oj_tensor *y = oj_nn_sequential_forward(&seq, x);
        if (y == NULL) fail_msg("sequential: %s", oj_last_error(eng));
        assert_int_equal(oj_size(y, 1), 3);
        oj_tensor *loss = oj_mse_loss(y, target, OJ_REDUCTION_MEAN);
        if (step == 0) first = oj_item(loss);
        last = oj_item(loss);
        assert_int_equal(oj_backward(loss, false), OJ_OK);
        oj_scope_end(eng);
        assert_int_equal(oj_optim_step(opt, NULL), OJ_OK);
        oj_optim_zero_grad(opt);
    }
    assert_true(last < 0.5 * first);
    assert_float_equal(oj_item(bn.num_batches_tracked), 25, 0);
    assert_true(oj_item_at(bn.running_var, 0) != 1.0);

    // eval: batch norm uses the running statistics, the counter stays
    oj_params_set_training(p, false);
    oj_scope_begin(eng);
    double rm = oj_item_at(bn.running_mean, 0);
    oj_tensor *y = oj_nn_sequential_forward(&seq, x);
    assert_non_null(y);
    assert_float_equal(oj_item_at(bn.running_mean, 0), rm, 0);
    assert_float_equal(oj_item(bn.num_batches_tracked), 25, 0);
    oj_scope_end(eng);
    oj_optim_free(opt);
    oj_release(x);
    oj_release(target);
    oj_params_free(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_embedding),        cmocka_unit_test(test_norms_and_dropout),
        cmocka_unit_test(test_attention_gqa_rope),      cmocka_unit_test(test_mlp_swiglu),
        cmocka_unit_test(test_conv_bn_pool_sequential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
