// test: scaled_dot_product_attention and rotary_embedding — forward against
// a naive double reference (GQA, causal with T != S, bool and float masks,
// several tiles, fully masked rows), KV-cache consistency, gradcheck on
// non-contiguous inputs, bad input.
#include <stdio.h>
#include <unistd.h>

#include "nn_testutil.h"

#include "backend/backend.h"
#include "core/grad_node.h"
#include "core/internal.h"
#include "ojas/io.h"

typedef struct {
    int64_t B, H, Hkv, T, S, D, Dv;
} dims;

/* Naive attention in double. mask: NULL or [B, H, T, S] dense values:
 * for bool masks 0/1 (keep), for float masks added. */
static void ref_attention(const dims *d, const double *q, const double *k, const double *v,
                          const double *mask, bool mbool, bool causal, double scale, double *out) {
    double *s = malloc((size_t)d->S * sizeof(double));
    int64_t G = d->H / d->Hkv;
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->T; i++) {
                int64_t hk = h / G;
                const double *qi = q + ((b * d->H + h) * d->T + i) * d->D;
                double m = -INFINITY;
                for (int64_t j = 0; j < d->S; j++) {
                    const double *kj = k + ((b * d->Hkv + hk) * d->S + j) * d->D;
                    double dot = 0;
                    for (int64_t c = 0; c < d->D; c++) dot += qi[c] * kj[c];
                    s[j] = scale * dot;
                    double mv = mask ? mask[((b * d->H + h) * d->T + i) * d->S + j] : 0;
                    if (mask && mbool && mv == 0) s[j] = -INFINITY;
                    if (mask && !mbool) s[j] += mv;
                    if (causal && j > i + d->S - d->T) s[j] = -INFINITY;
                    m = fmax(m, s[j]);
                }
                double *o = out + ((b * d->H + h) * d->T + i) * d->Dv;
                for (int64_t c = 0; c < d->Dv; c++) o[c] = 0;
                if (m == -INFINITY) continue;
                double l = 0;
                for (int64_t j = 0; j < d->S; j++) l += exp(s[j] - m);
                for (int64_t j = 0; j < d->S; j++) {
                    double p = exp(s[j] - m) / l;
                    const double *vj = v + ((b * d->Hkv + hk) * d->S + j) * d->Dv;
                    for (int64_t c = 0; c < d->Dv; c++) o[c] += p * vj[c];
                }
            }
    free(s);
}

/* mode 0: none, 1: bool mask [T, S] broadcast, 2: float mask [B, 1, T, S] */
static void check_forward(oj_engine *eng, dims d, bool causal, int mode, oj_dtype dt,
                          double tol) {
    oj_scope_begin(eng);
    int64_t qs[4] = {d.B, d.H, d.T, d.D}, ks[4] = {d.B, d.Hkv, d.S, d.D},
            vs[4] = {d.B, d.Hkv, d.S, d.Dv};
    oj_tensor *q = nt_rand(eng, 4, qs, dt, -1, 1), *k = nt_rand(eng, 4, ks, dt, -1, 1),
              *v = nt_rand(eng, 4, vs, dt, -1, 1);
    oj_tensor *mask = NULL;
    int64_t n = d.B * d.H * d.T * d.S;
    double *dense = NULL;
    if (mode == 1) {
        int64_t ms[2] = {d.T, d.S};
        oj_tensor *r = nt_rand(eng, 2, ms, OJ_F32, 0, 1);
        oj_tensor *th = oj_scalar(eng, 0.3, OJ_F32);
        mask = oj_gt(r, th);
        double *mv = nt_host(mask);
        dense = malloc((size_t)n * sizeof(double));
        for (int64_t e = 0; e < n; e++) dense[e] = mv[e % (d.T * d.S)];
        free(mv);
    } else if (mode == 2) {
        int64_t ms[4] = {d.B, 1, d.T, d.S};
        mask = nt_rand(eng, 4, ms, dt, -2, 2);
        double *mv = nt_host(mask);
        dense = malloc((size_t)n * sizeof(double));
        for (int64_t b = 0; b < d.B; b++)
            for (int64_t h = 0; h < d.H; h++)
                for (int64_t e = 0; e < d.T * d.S; e++)
                    dense[(b * d.H + h) * d.T * d.S + e] = mv[b * d.T * d.S + e];
        free(mv);
    }
    oj_tensor *o = oj_scaled_dot_product_attention(q, k, v, mask, causal, NAN);
    if (o == NULL) fail_msg("attention: %s", oj_last_error(eng));
    double *qv = nt_host(q), *kv = nt_host(k), *vv = nt_host(v), *ov = nt_host(o);
    int64_t no = d.B * d.H * d.T * d.Dv;
    double *want = malloc((size_t)no * sizeof(double));
    ref_attention(&d, qv, kv, vv, dense, mode == 1, causal, 1.0 / sqrt((double)d.D), want);
    nt_close("attention", ov, want, no, tol, tol);
    free(qv);
    free(kv);
    free(vv);
    free(ov);
    free(want);
    free(dense);
    oj_scope_end(eng);
}

static void test_attention_forward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    dims small = {2, 4, 2, 5, 7, 3, 4};
    for (int causal = 0; causal < 2; causal++)
        for (int mode = 0; mode < 3; mode++) {
            check_forward(eng, small, causal, mode, OJ_F64, 1e-12);
            check_forward(eng, small, causal, mode, OJ_F32, 2e-6);
        }
    dims tiles = {1, 2, 1, 70, 130, 8, 5}; // several query and key tiles
    check_forward(eng, tiles, true, 0, OJ_F32, 2e-6);
    check_forward(eng, tiles, false, 2, OJ_F64, 1e-12);
    dims sq = {1, 3, 3, 40, 40, 4, 4};
    check_forward(eng, sq, true, 1, OJ_F64, 1e-12);
    nt_engine_done(eng);
}

/* The output is a [B, H, T, Dv] view of [B, T, H, Dv] storage, so merging
 * the heads (transpose(1, 2), reshape to [B, T, H Dv]) is a view of it,
 * with the reference's values. */
static void test_attention_out_layout(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const dims all[2] = {{2, 3, 3, 5, 5, 4, 6}, {1, 4, 2, 7, 9, 3, 5}}; /* MHA; GQA, T != S */
    const oj_dtype dts[2] = {OJ_F32, OJ_F64};
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < 2; t++) {
            oj_scope_begin(eng);
            dims d = all[c];
            int64_t qs[4] = {d.B, d.H, d.T, d.D}, ks[4] = {d.B, d.Hkv, d.S, d.D},
                    vs[4] = {d.B, d.Hkv, d.S, d.Dv};
            oj_tensor *q = nt_rand(eng, 4, qs, dts[t], -1, 1),
                      *k = nt_rand(eng, 4, ks, dts[t], -1, 1),
                      *v = nt_rand(eng, 4, vs, dts[t], -1, 1);
            oj_tensor *o = oj_scaled_dot_product_attention(q, k, v, NULL, c == 1, NAN);
            assert_non_null(o);
            const int64_t *st = oj_strides(o);
            assert_int_equal(st[0], d.T * d.H * d.Dv);
            assert_int_equal(st[1], d.Dv);
            assert_int_equal(st[2], d.H * d.Dv);
            assert_int_equal(st[3], 1);
            oj_tensor *ot = oj_transpose(o, 1, 2);
            int64_t s3[3] = {d.B, d.T, d.H * d.Dv};
            oj_tensor *y = oj_reshape(ot, 3, s3);
            assert_true(oj_is_contiguous(y));
            assert_ptr_equal(oj_data_ptr(y), oj_data_ptr(o)); /* a view: no copy */
            double *qv = nt_host(q), *kv = nt_host(k), *vv = nt_host(v), *ov = nt_host(o);
            int64_t no = d.B * d.H * d.T * d.Dv;
            double *want = malloc((size_t)no * sizeof(double));
            ref_attention(&d, qv, kv, vv, NULL, false, c == 1, 1.0 / sqrt((double)d.D), want);
            nt_close("attention layout", ov, want, no, t == 0 ? 2e-6 : 1e-12,
                     t == 0 ? 2e-6 : 1e-12);
            free(qv);
            free(kv);
            free(vv);
            free(ov);
            free(want);
            oj_scope_end(eng);
        }
    nt_engine_done(eng);
}

/* a and b hold the same values bit for bit (logical order, any strides). */
static void same_bits(const char *what, oj_tensor *a, oj_tensor *b) {
    double *x = nt_host(a), *y = nt_host(b);
    int64_t n = oj_numel(a);
    assert_int_equal(n, oj_numel(b));
    for (int64_t e = 0; e < n; e++)
        if (memcmp(&x[e], &y[e], sizeof(double)) != 0)
            fail_msg("%s: element %lld differs: %.17g vs %.17g", what, (long long)e, x[e], y[e]);
    free(x);
    free(y);
}

/* [B, n, R, C] as a strided view: mode 0 a [B, R, n, C] buffer transposed
 * (rows of unit stride), mode 1 every other element of [B, n, R, 2 C]. */
static oj_tensor *strided_like(oj_engine *eng, const int64_t *shape, oj_dtype dt, int mode) {
    if (mode == 0) {
        int64_t s[4] = {shape[0], shape[2], shape[1], shape[3]};
        return oj_transpose(oj_full(eng, 4, s, dt, 7.0), 1, 2);
    }
    int64_t s[4] = {shape[0], shape[1], shape[2], 2 * shape[3]};
    return oj_slice(oj_full(eng, 4, s, dt, 7.0), 3, 0, 2 * shape[3], 2);
}

/* The backend entries write out, dq, dk, dv through their strides: the
 * same bits as into contiguous tensors (f64: the double path; f32: the
 * SIMD path), for MHA and GQA. */
static void test_attention_strided_outputs_backend(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_backend *be = eng->backend;
    const dims all[2] = {{2, 3, 3, 37, 37, 5, 5}, {1, 6, 2, 9, 70, 4, 3}};
    const oj_dtype dts[2] = {OJ_F32, OJ_F64};
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < 2; t++)
            for (int mode = 0; mode < 2; mode++) {
                oj_scope_begin(eng);
                dims d = all[c];
                oj_dtype dt = dts[t];
                int64_t qs[4] = {d.B, d.H, d.T, d.D}, ks[4] = {d.B, d.Hkv, d.S, d.D},
                        vs[4] = {d.B, d.Hkv, d.S, d.Dv}, os[4] = {d.B, d.H, d.T, d.Dv},
                        ls[3] = {d.B, d.H, d.T};
                oj_tensor *q = nt_rand(eng, 4, qs, dt, -1, 1), *k = nt_rand(eng, 4, ks, dt, -1, 1),
                          *v = nt_rand(eng, 4, vs, dt, -1, 1), *go = nt_rand(eng, 4, os, dt, -1, 1);
                double scale = 1.0 / sqrt((double)d.D);
                bool causal = c == 0;
                oj_tensor *o1 = oj_empty(eng, 4, os, dt), *o2 = strided_like(eng, os, dt, mode);
                oj_tensor *l1 = oj_empty(eng, 3, ls, dt), *l2 = oj_empty(eng, 3, ls, dt);
                assert_int_equal(be->attention_forward(eng, o1, l1, q, k, v, NULL, causal, scale),
                                 OJ_OK);
                assert_int_equal(be->attention_forward(eng, o2, l2, q, k, v, NULL, causal, scale),
                                 OJ_OK);
                same_bits("out", o1, o2);
                same_bits("lse", l1, l2);
                oj_tensor *d1[3] = {oj_empty(eng, 4, qs, dt), oj_empty(eng, 4, ks, dt),
                                    oj_empty(eng, 4, vs, dt)};
                oj_tensor *d2[3] = {strided_like(eng, qs, dt, mode),
                                    strided_like(eng, ks, dt, 1 - mode),
                                    strided_like(eng, vs, dt, mode)};
                assert_int_equal(be->attention_backward(eng, d1[0], d1[1], d1[2], go, q, k, v, o1,
                                                        l1, NULL, causal, scale),
                                 OJ_OK);
                /* the strided out feeds the backward as well */
                assert_int_equal(be->attention_backward(eng, d2[0], d2[1], d2[2], go, q, k, v, o2,
                                                        l2, NULL, causal, scale),
                                 OJ_OK);
                same_bits("dq", d1[0], d2[0]);
                same_bits("dk", d1[1], d2[1]);
                same_bits("dv", d1[2], d2[2]);
                oj_scope_end(eng);
            }
    nt_engine_done(eng);
}

/* gpt2's attention: x [B, T, 3C] split into thirds, each [B, T, H, D]
 * transposed to [B, H, T, D] (views), causal attention, heads merged back
 * to [B, T, C]; with `copies` q, k, v are first made contiguous (the
 * layout that keeps the gradients contiguous: the path before the shared
 * gradient buffer). */
typedef struct {
    int64_t H, D;
    bool copies;
} qkv_ctx;

static oj_tensor *qkv_attention(oj_tensor *x, const qkv_ctx *c) {
    int64_t B = oj_size(x, 0), T = oj_size(x, 1), C = c->H * c->D;
    oj_tensor *p[3] = {NULL, NULL, NULL}, *h[3];
    assert_int_equal(oj_split(x, C, 2, 3, p), 3);
    int64_t s4[4] = {B, T, c->H, c->D}, s3[3] = {B, T, C};
    for (int j = 0; j < 3; j++) {
        oj_tensor *r = oj_reshape(p[j], 4, s4);
        h[j] = oj_transpose(r, 1, 2);
        oj_release(r);
        oj_release(p[j]);
        if (c->copies) { /* h * 1: a contiguous copy, recorded, exact both ways */
            oj_tensor *one = oj_scalar(oj_tensor_engine(x), 1.0, oj_tensor_dtype(x));
            oj_tensor *cc = oj_mul(h[j], one);
            assert_true(oj_is_contiguous(cc));
            oj_release(one);
            oj_release(h[j]);
            h[j] = cc;
        }
    }
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
    for (int j = 0; j < 3; j++) oj_release(h[j]);
    oj_tensor *yt = oj_transpose(y, 1, 2);
    oj_tensor *ym = oj_reshape(yt, 3, s3);
    oj_release(yt);
    oj_release(y);
    return ym;
}

static oj_tensor *qkv_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    return qkv_attention(in[0], ctx);
}

/* The q, k, v gradients of gpt2's layout are views of one buffer laid out
 * like q, k, v (so no copy follows), and x's gradient has the bits of the
 * contiguous-gradient path (f32 SIMD and f64 paths); gradcheck. */
static void test_attention_qkv_shared_grads(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_dtype dts[2] = {OJ_F32, OJ_F64};
    for (int t = 0; t < 2; t++) {
        oj_scope_begin(eng);
        int64_t xs[3] = {2, 37, 3 * 3 * 5}, ys[3] = {2, 37, 15};
        qkv_ctx views = {3, 5, false}, copies = {3, 5, true};
        oj_tensor *x0 = nt_rand(eng, 3, xs, dts[t], -1, 1), *w = nt_rand(eng, 3, ys, dts[t], -1, 1);
        oj_tensor *grads[2];
        for (int k = 0; k < 2; k++) {
            oj_tensor *x = oj_set_requires_grad(oj_clone(oj_detach(x0)), true);
            oj_tensor *y = qkv_attention(x, k == 0 ? &views : &copies);
            oj_status bst = oj_backward(oj_sum_all(oj_mul(y, w)), false);
            if (bst != OJ_OK) fail_msg("backward: %s", oj_last_error(eng));
            grads[k] = oj_grad(x);
            assert_non_null(grads[k]);
        }
        same_bits("qkv gradient", grads[0], grads[1]);
        oj_scope_end(eng);
    }
    /* the node's own output: dq, dk, dv views of one storage, strided like q, k, v */
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 9, 3 * 2 * 4}, os[4] = {2, 2, 9, 4};
    oj_tensor *x = nt_leaf(eng, 3, xs, -1, 1);
    oj_tensor *p[3] = {NULL, NULL, NULL}, *h[3];
    assert_int_equal(oj_split(x, 8, 2, 3, p), 3);
    int64_t s4[4] = {2, 9, 2, 4};
    for (int j = 0; j < 3; j++) h[j] = oj_transpose(oj_reshape(p[j], 4, s4), 1, 2);
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, false, NAN);
    oj_node *nd = y->grad_fn;
    assert_non_null(nd);
    oj_tensor *go[1] = {nt_rand(eng, 4, os, OJ_F64, -1, 1)}, *gi[OJ_NODE_MAX_IN] = {0};
    assert_int_equal(nd->backward(nd, go, gi), OJ_OK);
    for (int j = 0; j < 3; j++) {
        assert_non_null(gi[j]);
        assert_ptr_equal(gi[j]->storage, gi[0]->storage);
        assert_int_equal(gi[j]->offset - gi[0]->offset, (h[j]->offset - h[0]->offset));
        for (int d = 0; d < 4; d++) assert_int_equal(gi[j]->stride[d], h[j]->stride[d]);
    }
    assert_int_equal(gi[0]->storage->nbytes, (size_t)oj_numel(x) * sizeof(double));
    for (int j = 0; j < 3; j++) oj_release(gi[j]);
    /* q and k the same tensor: no shared buffer (they overlap): contiguous */
    oj_tensor *y2 = oj_scaled_dot_product_attention(h[0], h[0], h[2], NULL, false, NAN);
    nd = y2->grad_fn;
    oj_tensor *gj[OJ_NODE_MAX_IN] = {0};
    assert_int_equal(nd->backward(nd, go, gj), OJ_OK);
    for (int j = 0; j < 3; j++) {
        assert_true(oj_is_contiguous(gj[j]));
        assert_ptr_not_equal(gj[j]->storage, gj[(j + 1) % 3]->storage);
        oj_release(gj[j]);
    }
    oj_scope_end(eng);
    /* gradcheck through the shared buffer and the split's view */
    oj_scope_begin(eng);
    int64_t gs[3] = {1, 6, 3 * 2 * 3};
    qkv_ctx c = {2, 3, false};
    oj_tensor *in[1] = {nt_leaf(eng, 3, gs, -1, 1)};
    nt_gradcheck(eng, "attention qkv views", qkv_fn, &c, in, 1);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* A split's backward (a cat) returns its pieces' gradients as one view
 * when they lie side by side in one dense tensor shaped like the input
 * (how the attention's shared gradient buffer reaches gpt2's qkv); pieces
 * out of order or strided otherwise are concatenated (copied) as before. */
static void test_split_backward_adjacent_view(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 12};
    oj_tensor *x = nt_leaf(eng, 3, xs, -1, 1), *p[3] = {NULL, NULL, NULL};
    assert_int_equal(oj_split(x, 4, 2, 3, p), 3);
    oj_node *nd = p[0]->grad_fn;
    assert_non_null(nd);
    assert_ptr_equal(p[2]->grad_fn, nd);
    oj_tensor *g = nt_rand(eng, 3, xs, OJ_F64, -1, 1);
    double *gv = nt_host(g);
    for (int mode = 0; mode < 3; mode++) {
        /* 0 adjacent; 1 pieces 0 and 1 swapped; 2 pieces of a transposed buffer */
        oj_tensor *src = g;
        if (mode == 2) {
            int64_t ts[3] = {2, 12, 3};
            src = oj_transpose(nt_from(eng, 3, ts, OJ_F64, gv), 1, 2); /* other values */
        }
        int64_t start[3] = {0, 4, 8};
        if (mode == 1) start[0] = 4, start[1] = 0;
        oj_tensor *go[3], *gi[OJ_NODE_MAX_IN] = {0};
        for (int j = 0; j < 3; j++) go[j] = oj_narrow(src, 2, start[j], 4);
        assert_int_equal(nd->backward(nd, go, gi), OJ_OK);
        assert_non_null(gi[0]);
        assert_int_equal(oj_rank(gi[0]), 3);
        for (int d = 0; d < 3; d++) assert_int_equal(oj_size(gi[0], d), xs[d]);
        if (mode == 0) {
            assert_ptr_equal(oj_data_ptr(gi[0]), oj_data_ptr(g)); /* a view: no copy */
            assert_true(oj_is_contiguous(gi[0]));
        } else {
            assert_ptr_not_equal(gi[0]->storage, src->storage);
        }
        oj_tensor *want = oj_cat(3, go, 2);
        same_bits("split backward", gi[0], want);
        if (mode == 0) same_bits("split backward values", gi[0], g);
        oj_release(gi[0]);
        for (int j = 0; j < 3; j++) oj_release(go[j]);
    }
    free(gv);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_attention_masked_rows_and_kv_cache(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    // Row 1 of the mask keeps nothing: output 0, not NaN; no gradient.
    int64_t qs[4] = {1, 1, 3, 2}, ms[2] = {3, 4}, ks[4] = {1, 1, 4, 2};
    oj_tensor *q = nt_leaf(eng, 4, qs, -1, 1), *k = nt_leaf(eng, 4, ks, -1, 1),
              *v = nt_leaf(eng, 4, ks, -1, 1);
    double mv[12] = {1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0};
    oj_tensor *mask = oj_cast(nt_from(eng, 2, ms, OJ_F64, mv), OJ_BOOL);
    oj_tensor *o = oj_scaled_dot_product_attention(q, k, v, mask, false, 0.7);
    double *ov = nt_host(o);
    for (int c = 0; c < 2; c++) assert_float_equal(ov[2 + c], 0.0, 0);
    for (int e = 0; e < 6; e++) assert_false(isnan(ov[e]));
    free(ov);
    assert_int_equal(oj_backward(oj_sum_all(o), false), OJ_OK);
    double *gq = nt_host(oj_grad(q));
    assert_float_equal(gq[2], 0.0, 0);
    assert_float_equal(gq[3], 0.0, 0);
    free(gq);
    // float mask of -inf everywhere in a row: zeros as well
    double fm[12] = {0, 0, 0, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0, 1, 2, 3};
    oj_tensor *o2 = oj_scaled_dot_product_attention(q, k, v, nt_from(eng, 2, ms, OJ_F64, fm),
                                                    false, NAN);
    assert_float_equal(oj_item_at(o2, 2), 0.0, 0);
    assert_float_equal(oj_item_at(o2, 3), 0.0, 0);

    // KV cache: the last T queries over all S keys (bottom-right causal)
    // equal the last rows of full causal self-attention.
    int64_t fs[4] = {1, 2, 9, 4}, ls[4] = {1, 2, 3, 4};
    oj_tensor *Q = nt_rand(eng, 4, fs, OJ_F64, -1, 1), *K = nt_rand(eng, 4, fs, OJ_F64, -1, 1),
              *V = nt_rand(eng, 4, fs, OJ_F64, -1, 1);
    oj_tensor *full = oj_scaled_dot_product_attention(Q, K, V, NULL, true, NAN);
    oj_tensor *qn = oj_narrow(Q, 2, 6, 3);
    oj_tensor *part = oj_scaled_dot_product_attention(qn, K, V, NULL, true, NAN);
    oj_tensor *want = oj_narrow(full, 2, 6, 3);
    assert_int_equal(oj_size(part, 2), ls[2]);
    double *pv = nt_host(part), *wv = nt_host(want);
    nt_close("kv cache", pv, wv, 24, 1e-14, 1e-12);
    free(pv);
    free(wv);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

typedef struct {
    bool causal;
    int mode; // 0 none, 1 bool, 2 float
    oj_tensor *mask;
} attn_ctx;

/* q arrives as [B, T, H, D] and is transposed to [B, H, T, D]. */
static oj_tensor *attn_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    attn_ctx *c = ctx;
    oj_tensor *q = oj_transpose(in[0], 1, 2);
    oj_tensor *y = oj_scaled_dot_product_attention(q, in[1], in[2], c->mask, c->causal, NAN);
    oj_release(q);
    return y;
}

static void test_attention_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    // B=2, H=4 (GQA over Hkv=2), T=3, S=5, D=2, Dv=3
    int64_t qs[4] = {2, 3, 4, 2}, ks[4] = {2, 2, 5, 2}, vs[4] = {2, 2, 5, 3}, ms[4] = {2, 1, 3, 5};
    for (int causal = 0; causal < 2; causal++)
        for (int mode = 0; mode < 3; mode++) {
            oj_scope_begin(eng);
            attn_ctx c = {causal, mode, NULL};
            if (mode == 1) {
                oj_tensor *r = nt_rand(eng, 4, ms, OJ_F64, 0, 1);
                c.mask = oj_gt(r, oj_scalar(eng, 0.25, OJ_F64));
            } else if (mode == 2) {
                c.mask = nt_rand(eng, 4, ms, OJ_F64, -1, 1);
            }
            oj_tensor *in[3] = {nt_leaf(eng, 4, qs, -1, 1), nt_leaf(eng, 4, ks, -1, 1),
                                nt_leaf(eng, 4, vs, -1, 1)};
            nt_gradcheck(eng, "attention", attn_fn, &c, in, 3);
            oj_scope_end(eng);
        }
    // several tiles in both directions
    oj_scope_begin(eng);
    int64_t q2[4] = {1, 34, 1, 1}, k2[4] = {1, 1, 66, 1};
    attn_ctx c = {true, 0, NULL};
    oj_tensor *in[3] = {nt_leaf(eng, 4, q2, -2, 2), nt_leaf(eng, 4, k2, -2, 2),
                        nt_leaf(eng, 4, k2, -1, 1)};
    nt_gradcheck(eng, "attention tiles", attn_fn, &c, in, 3);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_attention_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t qs[4] = {1, 3, 4, 8}, ks[4] = {1, 2, 5, 8}, k1[4] = {1, 1, 5, 8},
            kd[4] = {1, 1, 5, 6}, vb[4] = {1, 1, 6, 8}, q3[3] = {3, 4, 8}, ms[2] = {4, 6};
    oj_tensor *q = nt_rand(eng, 4, qs, OJ_F32, -1, 1);
    oj_tensor *k = nt_rand(eng, 4, k1, OJ_F32, -1, 1);
    nt_expect_error(eng, oj_scaled_dot_product_attention(q, nt_rand(eng, 4, ks, OJ_F32, 0, 1),
                                                         nt_rand(eng, 4, ks, OJ_F32, 0, 1), NULL,
                                                         false, NAN),
                    OJ_ERR_SHAPE, "multiple of the kv heads", "[1, 3, 4, 8]");
    nt_expect_error(eng, oj_scaled_dot_product_attention(q, nt_rand(eng, 4, kd, OJ_F32, 0, 1), k,
                                                         NULL, false, NAN),
                    OJ_ERR_SHAPE, "head dims", NULL);
    nt_expect_error(eng, oj_scaled_dot_product_attention(q, k, nt_rand(eng, 4, vb, OJ_F32, 0, 1),
                                                         NULL, false, NAN),
                    OJ_ERR_SHAPE, "same Hkv and S", NULL);
    nt_expect_error(eng, oj_scaled_dot_product_attention(nt_rand(eng, 3, q3, OJ_F32, 0, 1), k, k,
                                                         NULL, false, NAN),
                    OJ_ERR_SHAPE, "[B, H, T, D]", NULL);
    nt_expect_error(eng, oj_scaled_dot_product_attention(q, oj_cast(k, OJ_F64), k, NULL, false,
                                                         NAN),
                    OJ_ERR_DTYPE, "k is f64", NULL);
    nt_expect_error(eng, oj_scaled_dot_product_attention(q, k, k, nt_rand(eng, 2, ms, OJ_F32, 0, 1),
                                                         false, NAN),
                    OJ_ERR_SHAPE, "mask [4, 6]", "[1, 3, 4, 5]");
    nt_expect_error(eng, oj_scaled_dot_product_attention(q, k, k, oj_zeros(eng, 2, ms, OJ_I32),
                                                         false, NAN),
                    OJ_ERR_DTYPE, "mask", "i32");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

// ---------------------------------------------------------------- rotary

static void test_rotary_forward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[4] = {2, 3, 5, 6};
    int64_t B = 2, H = 3, T = 5, D = 6, off = 7;
    double theta = 10000.0;
    for (int dt = 0; dt < 2; dt++) {
        oj_tensor *x = nt_rand(eng, 4, xs, dt ? OJ_F64 : OJ_F32, -1, 1);
        oj_tensor *y = oj_rotary_embedding(x, off, theta);
        assert_non_null(y);
        double *xv = nt_host(x), *yv = nt_host(y), want[180];
        for (int64_t r = 0; r < B * H; r++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t i = 0; i < D / 2; i++) {
                    double a = (double)(off + t) * pow(theta, -2.0 * (double)i / (double)D);
                    const double *row = xv + (r * T + t) * D;
                    want[(r * T + t) * D + i] = row[i] * cos(a) - row[i + D / 2] * sin(a);
                    want[(r * T + t) * D + i + D / 2] = row[i + D / 2] * cos(a) + row[i] * sin(a);
                }
        nt_close("rotary", yv, want, 180, dt ? 1e-14 : 1e-6, dt ? 1e-13 : 1e-6);
        free(xv);
        free(yv);
    }
    // relative positions: <rot(q, m), rot(k, n)> depends on m - n only
    int64_t one[4] = {1, 1, 1, 8};
    oj_tensor *q = nt_rand(eng, 4, one, OJ_F64, -1, 1), *k = nt_rand(eng, 4, one, OJ_F64, -1, 1);
    double d1 = oj_item(oj_sum_all(oj_mul(oj_rotary_embedding(q, 5, 100.0),
                                          oj_rotary_embedding(k, 2, 100.0))));
    double d2 = oj_item(oj_sum_all(oj_mul(oj_rotary_embedding(q, 13, 100.0),
                                          oj_rotary_embedding(k, 10, 100.0))));
    assert_float_equal(d1, d2, 1e-12);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static oj_tensor *rotary_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    oj_tensor *x = oj_transpose(in[0], 1, 2); // [B, T, H, D] -> [B, H, T, D]
    oj_tensor *y = oj_rotary_embedding(x, 3, 500.0);
    oj_release(x);
    return y;
}

static void test_rotary_gradcheck_and_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[4] = {2, 3, 2, 4};
    oj_tensor *x = nt_leaf(eng, 4, xs, -1, 1);
    nt_gradcheck(eng, "rotary", rotary_fn, NULL, &x, 1);
    int64_t odd[4] = {1, 1, 2, 5}, r1[1] = {4};
    nt_expect_error(eng, oj_rotary_embedding(nt_rand(eng, 4, odd, OJ_F32, 0, 1), 0, 1e4),
                    OJ_ERR_SHAPE, "rotary_embedding", "D even");
    nt_expect_error(eng, oj_rotary_embedding(nt_rand(eng, 1, r1, OJ_F32, 0, 1), 0, 1e4),
                    OJ_ERR_SHAPE, "[4]", NULL);
    nt_expect_error(eng, oj_rotary_embedding(x, 0, 0.0), OJ_ERR_INVALID_ARGUMENT, "theta", NULL);
    nt_expect_error(eng, oj_rotary_embedding(oj_zeros(eng, 4, xs, OJ_I64), 0, 1e4), OJ_ERR_DTYPE,
                    "i64", NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ---- attention's [B, T, H, D]-stored output (contiguous copies, raw data,
 * safetensors, in-place writes) and q/k/v gradients through one buffer
 * (every order of the thirds, q = k = v, other tilings, every dtype, masks,
 * T 1, H 1, empty, GQA with T < S, retain_grad, two backward calls), against
 * the matmul/softmax composition; rotary_embedding's offset overflow */

/* ---------------------------------------------------------------- attention */

/* softmax(q k^T / sqrt(D) + causal) v by matmul and softmax */
static oj_tensor *ref_attn(oj_tensor *q, oj_tensor *k, oj_tensor *v) {
    oj_engine *eng = oj_tensor_engine(q);
    int64_t T = oj_size(q, 2), S = oj_size(k, 2), D = oj_size(q, 3);
    double *m = malloc((size_t)(T * S) * sizeof(double));
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < S; j++)
            m[i * S + j] = j <= i + (S - T) ? 0.0 : -INFINITY;
    oj_tensor *mask = nt_from(eng, 2, (int64_t[]){T, S}, oj_tensor_dtype(q), m);
    free(m);
    oj_tensor *kt = oj_transpose(k, 2, 3);
    oj_tensor *sc = oj_add(oj_mul_scalar(oj_matmul(q, kt), 1.0 / sqrt((double)D)), mask);
    return oj_matmul(oj_softmax(sc, -1), v);
}

/* x [B, T, 3 H D] -> q, k, v head views of its thirds in the order ord */
static void qkv_heads(oj_tensor *x, int64_t H, int64_t D, const int *ord, oj_tensor **h) {
    int64_t B = oj_size(x, 0), T = oj_size(x, 1);
    oj_tensor *p[3] = {NULL, NULL, NULL};
    assert_int_equal(oj_split(x, H * D, 2, 3, p), 3);
    int64_t s4[4] = {B, T, H, D};
    for (int j = 0; j < 3; j++)
        h[j] = oj_transpose(oj_reshape(p[ord[j]], 4, s4), 1, 2);
}

static void test_attn_output_use(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t B = 2, T = 5, H = 3, D = 4;
    int64_t xs[3] = {B, T, 3 * H * D};
    const int ord[3] = {0, 1, 2};
    oj_tensor *x = nt_rand(eng, 3, xs, OJ_F64, -1, 1), *h[3];
    qkv_heads(x, H, D, ord, h);
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
    oj_tensor *r = ref_attn(h[0], h[1], h[2]);
    nt_close_tensors("attention", y, r, 1e-12, 1e-12);
    /* a contiguous copy and its raw data */
    oj_tensor *yc = oj_contiguous(y);
    assert_true(oj_is_contiguous(yc));
    double *rh = nt_host(r);
    const double *yp = oj_data_ptr(yc);
    nt_close("contiguous data_ptr", yp, rh, oj_numel(r), 1e-12, 1e-12);
    /* the raw data of y itself in its [B, T, H, D] storage order */
    const double *yr = oj_data_ptr(y);
    const int64_t *st = oj_strides(y);
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    double got = yr[b * st[0] + hh * st[1] + t * st[2] + d * st[3]];
                    double want = rh[((b * H + hh) * T + t) * D + d];
                    assert_true(fabs(got - want) <= 1e-12);
                }
    /* save through safetensors and read back */
    char path[64];
    snprintf(path, sizeof path, "/tmp/ojas_attn_out_%ld.safetensors", (long)getpid());
    const char *names[1] = {"y"};
    oj_tensor *ts[1] = {y};
    assert_int_equal(oj_safetensors_save(path, 1, names, ts, NULL, NULL), OJ_OK);
    oj_safetensors *sf = NULL;
    assert_int_equal(oj_safetensors_open(path, &sf, NULL), OJ_OK);
    oj_tensor *back = oj_safetensors_tensor(sf, eng, "y");
    assert_non_null(back);
    nt_close_tensors("safetensors", back, y, 0, 0);
    oj_safetensors_close(sf);
    remove(path);
    /* in place into the output: value, and through a merged-heads view */
    assert_int_equal(oj_add_(y, oj_ones(eng, 4, (int64_t[]){B, H, T, D}, OJ_F64)), OJ_OK);
    nt_close_tensors("add_ into output", y, oj_add_scalar(r, 1.0), 1e-12, 1e-12);
    oj_tensor *merged = oj_reshape(oj_transpose(y, 1, 2), 3, (int64_t[]){B, T, H * D});
    oj_tensor *rm =
        oj_reshape(oj_transpose(oj_add_scalar(r, 1.0), 1, 2), 3, (int64_t[]){B, T, H * D});
    nt_close_tensors("merged view", merged, rm, 1e-12, 1e-12);
    assert_int_equal(oj_add_(merged, merged), OJ_OK);
    nt_close_tensors("add_ merged into itself", y, oj_mul_scalar(oj_add_scalar(r, 1.0), 2.0), 1e-12, 1e-12);
    free(rh);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* in-place into the output after the forward: the saved output changed */
static void test_attn_inplace_then_backward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {1, 4, 3 * 2 * 2};
    const int ord[3] = {0, 1, 2};
    oj_tensor *x = nt_leaf(eng, 3, xs, -1, 1), *h[3];
    qkv_heads(x, 2, 2, ord, h);
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *merged = oj_reshape(oj_transpose(y, 1, 2), 3, (int64_t[]){1, 4, 4});
    assert_int_equal(oj_mul_scalar_(merged, 3.0), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    assert_int_not_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
    oj_clear_error(eng);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* gradients through q, k, v views of one buffer (every order of the
 * thirds, and q, k, v one tensor), retain_grad on q, accumulation over
 * two backward calls: against the composition */
static void test_attn_shared_grads(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const int64_t B = 2, T = 5, H = 2, D = 3;
    int64_t xs[3] = {B, T, 3 * H * D}, gs[4] = {B, H, T, D};
    const int ords[5][3] = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 0, 0}, {1, 1, 2}};
    for (int o = 0; o < 5; o++) {
        oj_scope_begin(eng);
        oj_tensor *x0 = nt_rand(eng, 3, xs, OJ_F64, -1, 1), *g = nt_rand(eng, 4, gs, OJ_F64, -1, 1);
        oj_tensor *gx[2], *gq[2];
        for (int f = 0; f < 2; f++) {
            oj_tensor *x = oj_set_requires_grad(oj_clone(oj_detach(x0)), true), *h[3];
            qkv_heads(x, H, D, ords[o], h);
            oj_retain_grad(h[0]);
            oj_tensor *y = f ? oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN)
                             : ref_attn(h[0], h[1], h[2]);
            assert_non_null(y);
            oj_tensor *s = oj_sum_all(oj_mul(y, g));
            assert_int_equal(oj_backward(s, true), OJ_OK);
            oj_tensor *g1 = oj_clone(oj_grad(x)), *q1 = oj_clone(oj_grad(h[0]));
            assert_int_equal(oj_backward(s, false), OJ_OK);
            nt_close_tensors("second backward adds", oj_grad(x), oj_mul_scalar(g1, 2.0), 1e-12, 1e-12);
            nt_close_tensors("retained q twice", oj_grad(h[0]), oj_mul_scalar(q1, 2.0), 1e-12, 1e-12);
            gx[f] = g1;
            gq[f] = q1;
        }
        char what[64];
        snprintf(what, sizeof what, "order %d dx", o);
        nt_close_tensors(what, gx[1], gx[0], 1e-10, 1e-10);
        snprintf(what, sizeof what, "order %d dq", o);
        nt_close_tensors(what, gq[1], gq[0], 1e-10, 1e-10);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

/* the leaf's gradient taken from the shared buffer, then an optimizer-like
 * in-place update of the leaf's grad and a second step's accumulation */
static void test_attn_grad_reuse(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t B = 1, T = 3, H = 2, D = 2;
    int64_t xs[3] = {B, T, 3 * H * D};
    const int ord[3] = {0, 1, 2};
    oj_tensor *x = nt_leaf(eng, 3, xs, -1, 1);
    oj_tensor *xr = oj_set_requires_grad(oj_clone(oj_detach(x)), true);
    for (int step = 0; step < 2; step++) {
        oj_tensor *h[3], *hr[3];
        qkv_heads(x, H, D, ord, h);
        qkv_heads(xr, H, D, ord, hr);
        oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
        oj_tensor *yr = ref_attn(hr[0], hr[1], hr[2]);
        /* y used twice: attention's gradient is summed with another */
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, oj_add(y, h[2]))), false), OJ_OK);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(yr, oj_add(yr, hr[2]))), false), OJ_OK);
        nt_close_tensors("grad reuse", oj_grad(x), oj_grad(xr), 1e-12, 1e-12);
        assert_int_equal(oj_mul_scalar_(oj_grad(x), 0.5), OJ_OK);
        assert_int_equal(oj_mul_scalar_(oj_grad(xr), 0.5), OJ_OK);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* q, k, v selected from one [B, T, H, 3, D] (interleaved per head) or
 * [3, B, H, T, D] tensor: they tile a block with other strides */
static void test_attn_other_tilings(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    for (int m = 0; m < 3; m++) {
        oj_scope_begin(eng);
        const int64_t B = m == 2 ? 1 : 2, T = m == 2 ? 1 : 4, H = 2, D = 3;
        int64_t s5a[5] = {B, T, H, 3, D}, s5b[5] = {3, B, H, T, D}, gs[4] = {B, H, T, D};
        oj_tensor *x0 = nt_rand(eng, 5, m == 1 ? s5b : s5a, OJ_F64, -1, 1);
        oj_tensor *g = nt_rand(eng, 4, gs, OJ_F64, -1, 1), *gx[2];
        for (int f = 0; f < 2; f++) {
            oj_tensor *x = oj_set_requires_grad(oj_clone(oj_detach(x0)), true), *h[3];
            for (int j = 0; j < 3; j++)
                h[j] = m == 1 ? oj_select(x, 0, j) : oj_transpose(oj_select(x, 3, j), 1, 2);
            oj_tensor *y = f ? oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN)
                             : ref_attn(h[0], h[1], h[2]);
            assert_non_null(y);
            assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, g)), false), OJ_OK);
            gx[f] = oj_grad(x);
        }
        nt_close_tensors("other tiling dx", gx[1], gx[0], 1e-10, 1e-10);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

/* shared q/k/v gradients in every float dtype, with a mask, a scale, not
 * causal, T 1, H 1, against contiguous copies of q, k, v (the unshared
 * path) bit for bit; empty batch and empty T */
static void test_attn_shared_dtypes(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_dtype dts[4] = {OJ_F32, OJ_F64, OJ_BF16, OJ_F16};
    const int64_t geo[3][4] = {{2, 5, 3, 4}, {1, 1, 2, 8}, {2, 6, 1, 5}}; /* B T H D */
    for (int k = 0; k < 4; k++)
        for (int gi = 0; gi < 3; gi++)
            for (int m = 0; m < 2; m++) { /* 0 causal, 1 bool mask + scale 0.3 */
                oj_scope_begin(eng);
                const int64_t B = geo[gi][0], T = geo[gi][1], H = geo[gi][2], D = geo[gi][3];
                int64_t xs[3] = {B, T, 3 * H * D}, gs[4] = {B, H, T, D};
                oj_tensor *x0 = nt_rand(eng, 3, xs, dts[k], -1, 1);
                oj_tensor *g = nt_rand(eng, 4, gs, dts[k], -1, 1);
                oj_tensor *mask = NULL;
                if (m) {
                    int64_t ms[2] = {T, T};
                    mask = oj_gt(nt_rand(eng, 2, ms, OJ_F32, 0, 1), oj_scalar(eng, 0.3, OJ_F32));
                }
                const int ord[3] = {0, 1, 2};
                oj_tensor *gx[2], *y[2];
                for (int c = 0; c < 2; c++) {
                    oj_tensor *x = oj_set_requires_grad(oj_clone(oj_detach(x0)), true), *h[3];
                    qkv_heads(x, H, D, ord, h);
                    if (c)
                        for (int j = 0; j < 3; j++)
                            h[j] = oj_mul(h[j], oj_scalar(eng, 1.0, dts[k]));
                    y[c] =
                        oj_scaled_dot_product_attention(h[0], h[1], h[2], mask, !m, m ? 0.3 : NAN);
                    if (y[c] == NULL)
                        fail_msg("%s", oj_last_error(eng));
                    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[c], g)), false), OJ_OK);
                    gx[c] = oj_grad(x);
                }
                char what[96];
                snprintf(what, sizeof what, "%s geo %d mode %d", oj_dtype_name(dts[k]), gi, m);
                nt_close_tensors(what, y[0], y[1], 0, 0);
                nt_close_tensors(what, gx[0], gx[1], 0, 0);
                oj_scope_end(eng);
            }
    /* empty */
    oj_scope_begin(eng);
    const int64_t es[2][3] = {{0, 4, 3 * 2 * 2}, {2, 0, 3 * 2 * 2}};
    for (int e = 0; e < 2; e++) {
        const int ord[3] = {0, 1, 2};
        oj_tensor *x = oj_set_requires_grad(nt_rand(eng, 3, es[e], OJ_F32, -1, 1), true), *h[3];
        qkv_heads(x, 2, 2, ord, h);
        oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
        if (y == NULL)
            fail_msg("empty %d: %s", e, oj_last_error(eng));
        assert_int_equal(oj_numel(y), 0);
        assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
        assert_non_null(oj_grad(x));
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* grouped-query attention with T < S (a KV cache's bottom-right causal
 * mask) in f32 and f64: values and q/k/v gradients against the
 * composition on k, v repeated per query head */
static void test_attn_gqa(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_dtype dts[2] = {OJ_F32, OJ_F64};
    for (int k = 0; k < 2; k++) {
        oj_scope_begin(eng);
        const int64_t B = 2, H = 4, Hkv = 2, T = 3, S = 7, D = 5;
        int64_t qs[4] = {B, T, H, D}, ks[4] = {B, Hkv, S, D}, gs[4] = {B, H, T, D};
        oj_tensor *q0 = nt_rand(eng, 4, qs, dts[k], -1, 1),
                  *k0 = nt_rand(eng, 4, ks, dts[k], -1, 1);
        oj_tensor *v0 = nt_rand(eng, 4, ks, dts[k], -1, 1), *g = nt_rand(eng, 4, gs, dts[k], -1, 1);
        oj_tensor *y[2], *gr[2][3];
        for (int f = 0; f < 2; f++) {
            oj_tensor *ql = oj_set_requires_grad(oj_clone(q0), true);
            oj_tensor *kl = oj_set_requires_grad(oj_clone(k0), true);
            oj_tensor *vl = oj_set_requires_grad(oj_clone(v0), true);
            oj_tensor *q = oj_transpose(ql, 1, 2);
            if (f) {
                y[f] = oj_scaled_dot_product_attention(q, kl, vl, NULL, true, NAN);
            } else {
                int64_t e5[5] = {B, Hkv, H / Hkv, S, D}, r4[4] = {B, H, S, D};
                oj_tensor *kr = oj_reshape(oj_expand(oj_unsqueeze(kl, 2), 5, e5), 4, r4);
                oj_tensor *vr = oj_reshape(oj_expand(oj_unsqueeze(vl, 2), 5, e5), 4, r4);
                y[f] = ref_attn(q, kr, vr);
            }
            if (y[f] == NULL)
                fail_msg("%s", oj_last_error(eng));
            assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[f], g)), false), OJ_OK);
            gr[f][0] = oj_grad(ql);
            gr[f][1] = oj_grad(kl);
            gr[f][2] = oj_grad(vl);
        }
        double tol = k ? 1e-12 : 1e-5;
        nt_close_tensors("gqa y", y[1], y[0], tol, tol);
        for (int i = 0; i < 3; i++)
            nt_close_tensors("gqa grad", gr[1][i], gr[0][i], tol, tol);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

/* rotary_embedding refuses a position_offset + t that overflows int64
 * (OJ_ERR_OUT_OF_RANGE naming it), and the largest offset that fits works */
static void test_rotary_offset_overflow(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_tensor *x = oj_ones(eng, 4, (int64_t[]){1, 1, 3, 4}, OJ_F32);
    nt_expect_error(eng, oj_rotary_embedding(x, INT64_MAX, 10000.0), OJ_ERR_OUT_OF_RANGE,
                    "position_offset", NULL);
    nt_expect_error(eng, oj_rotary_embedding(x, INT64_MAX - 2, 10000.0), OJ_ERR_OUT_OF_RANGE,
                    "overflows", NULL);
    oj_tensor *y = oj_rotary_embedding(x, INT64_MAX - 3, 10000.0);
    assert_non_null(y);
    oj_release(y);
    oj_release(x);
    nt_engine_done(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_forward),
        cmocka_unit_test(test_attention_out_layout),
        cmocka_unit_test(test_attention_strided_outputs_backend),
        cmocka_unit_test(test_attention_qkv_shared_grads),
        cmocka_unit_test(test_split_backward_adjacent_view),
        cmocka_unit_test(test_attention_masked_rows_and_kv_cache),
        cmocka_unit_test(test_attention_gradcheck),
        cmocka_unit_test(test_attention_errors),
        cmocka_unit_test(test_rotary_forward),
        cmocka_unit_test(test_rotary_gradcheck_and_errors),
        cmocka_unit_test(test_attn_output_use),
        cmocka_unit_test(test_attn_inplace_then_backward),
        cmocka_unit_test(test_attn_shared_grads),
        cmocka_unit_test(test_attn_grad_reuse),
        cmocka_unit_test(test_attn_other_tilings),
        cmocka_unit_test(test_attn_shared_dtypes),
        cmocka_unit_test(test_attn_gqa),
        cmocka_unit_test(test_rotary_offset_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
