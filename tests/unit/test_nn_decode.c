// test: the fused ops of the batch-1 decode step (oj__decode_norm_linear,
// oj__decode_linear_residual_) on the CPU backend against the unfused ops
// they stand for (layer_norm, linear, gelu_tanh, add; bf16 and f16), within
// the dtype's rounding; the keys and values written to the cache slot are
// the output's columns bit for bit and nothing else moves (a slot outside
// the cache writes nothing); oj__decode_argmax_advance_ picks the lowest
// index on ties and the first NaN, and advances pos; oj__decode_sample_
// gives the host sampler's token (oj_sample_logits) and advances its
// step, seen flags and pos (and keeps the token at hist[pos]); oj__decode_embed_mask
// gives embedding + add's bits and the mask; oj__decode_norm_head gives
// layer_norm + linear with the head's layout (and their argmax, pos + 1,
// or the host sampler's token over them: oj__decode_norm_head_sample);
// the quantized ops (oj__decode_qnorm_linear, oj__decode_qlinear_residual_)
// the double sum over the dequantized matrix, and oj__decode_qnorm_head
// those logits with their argmax, pos + 1 and the kept token; the
// refusals name what was wrong; no leaks.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "ojas/infer.h"
#include "nn_testutil.h"
#include "backend/gemv_tiles.h"
#include "ops/nn_decode.h"
#include "ops/nn_decode_quant.h"

/* max |a - b| <= tol * max(1, max |b|) over n values. */
static void close_to(const char *what, const double *a, const double *b, int64_t n, double tol) {
    double scale = 1.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    if (!(worst <= tol * scale))
        fail_msg("%s: max difference %g > %g of %g", what, worst, tol, scale);
}

static void norm_linear_case(oj_dtype dt, int64_t K, int64_t N, int act) {
    oj_engine *eng = nt_engine();
    oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    int64_t sx[3] = {1, 1, K}, sk[1] = {K}, sw[2] = {K, N}, sn[1] = {N};
    oj_tensor *x = nt_rand(eng, 3, sx, dt, -2.0, 3.0), *nw = nt_rand(eng, 1, sk, dt, 0.5, 1.5);
    oj_tensor *nb = nt_rand(eng, 1, sk, dt, -0.5, 0.5), *w = nt_rand(eng, 2, sw, dt, -0.2, 0.2);
    oj_tensor *b = nt_rand(eng, 1, sn, dt, -1.0, 1.0);
    oj_tensor *got = oj__decode_norm_linear(x, nw, nb, 1e-5, w, b, act, NULL, NULL);
    assert_non_null(got);
    assert_int_equal(oj_tensor_dtype(got), dt);
    oj_tensor *ln = oj_layer_norm(x, nw, nb, 1e-5);
    oj_tensor *wt = oj_transpose(w, 0, 1);
    oj_tensor *lin = oj_linear(ln, wt, b);
    oj_tensor *want = act == OJ__DECODE_ACT_GELU ? oj_gelu_tanh(lin) : lin;
    assert_non_null(want);
    double *g = nt_host(got), *r = nt_host(want);
    char what[96];
    snprintf(what, sizeof what, "norm_linear %s K %lld N %lld act %d", oj_dtype_name(dt),
             (long long)K, (long long)N, act);
    close_to(what, g, r, N, dt == OJ_BF16 ? 2e-2 : 4e-3);
    free(g);
    free(r);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_norm_linear(void **state) {
    (void)state;
    norm_linear_case(OJ_BF16, 64, 192, OJ__DECODE_ACT_NONE);
    norm_linear_case(OJ_BF16, 96, 384, OJ__DECODE_ACT_GELU);
    norm_linear_case(OJ_F16, 64, 64, OJ__DECODE_ACT_GELU);
}

/* oj__decode_norm_head: layer_norm then linear with the head [N, K]
 * (nn.Linear's layout) within the dtype's rounding, and with tok and pos
 * the argmax of its own logits and pos + 1. */
static void expect_err(oj_engine *eng, oj_status want, const char *needle);

static void norm_head_case(oj_dtype dt, int64_t K, int64_t N) {
    oj_engine *eng = nt_engine();
    oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    int64_t sx[3] = {1, 1, K}, sk[1] = {K}, sw[2] = {N, K}, s1[1] = {1}, p0 = 41;
    oj_tensor *x = nt_rand(eng, 3, sx, dt, -2.0, 3.0), *nw = nt_rand(eng, 1, sk, dt, 0.5, 1.5);
    oj_tensor *nb = nt_rand(eng, 1, sk, dt, -0.5, 0.5), *w = nt_rand(eng, 2, sw, dt, -0.2, 0.2);
    oj_tensor *got = oj__decode_norm_head(x, nw, nb, 1e-5, w, NULL, NULL, NULL);
    assert_non_null(got);
    assert_int_equal(oj_tensor_dtype(got), dt);
    assert_int_equal(oj_size(got, 2), N);
    oj_tensor *want = oj_linear(oj_layer_norm(x, nw, nb, 1e-5), w, NULL);
    assert_non_null(want);
    double *g = nt_host(got), *r = nt_host(want);
    char what[96];
    snprintf(what, sizeof what, "norm_head %s K %lld N %lld", oj_dtype_name(dt), (long long)K,
             (long long)N);
    close_to(what, g, r, N, dt == OJ_BF16 ? 2e-2 : 4e-3);
    /* with the argmax: the same logits, tok their argmax, pos + 1 */
    int64_t sh[1] = {p0 + 1}; /* the token lands past the end: nothing kept */
    oj_tensor *tok = oj_zeros(eng, 1, s1, OJ_I64), *pos = oj_from_host(eng, 1, s1, OJ_I64, &p0, 8);
    oj_tensor *hist = oj_zeros(eng, 1, sh, OJ_I64);
    oj_tensor *got2 = oj__decode_norm_head(x, nw, nb, 1e-5, w, tok, pos, hist);
    assert_non_null(got2);
    double *g2 = nt_host(got2);
    int64_t best = 0, t = -1, p = 0, h[64];
    for (int64_t i = 0; i < N; i++) {
        assert_true(g2[i] == g[i]);
        if (g2[i] > g2[best]) best = i;
    }
    assert_int_equal(oj_to_host(tok, &t, sizeof t), OJ_OK);
    assert_int_equal(oj_to_host(pos, &p, sizeof p), OJ_OK);
    assert_int_equal(t, best);
    assert_int_equal(p, p0 + 1);
    assert_int_equal(oj_to_host(hist, h, (size_t)sh[0] * sizeof *h), OJ_OK);
    for (int64_t i = 0; i < sh[0]; i++) assert_int_equal(h[i], 0);
    /* again with room for it: hist[pos] = tok, pos + 2 after two steps */
    int64_t sh2[1] = {p0 + 3};
    oj_tensor *hist2 = oj_zeros(eng, 1, sh2, OJ_I64);
    assert_non_null(oj__decode_norm_head(x, nw, nb, 1e-5, w, tok, pos, hist2));
    assert_int_equal(oj_to_host(hist2, h, (size_t)sh2[0] * sizeof *h), OJ_OK);
    assert_int_equal(h[p0 + 2], best);
    assert_int_equal(h[p0 + 1], 0);
    free(g);
    free(r);
    free(g2);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_norm_head(void **state) {
    (void)state;
    norm_head_case(OJ_BF16, 64, 203);
    norm_head_case(OJ_F16, 96, 64);
    /* the refusals name what was wrong */
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t sk[1] = {16}, sw[2] = {24, 16}, sodd[2] = {24, 12}, s1[1] = {1}, s2[1] = {2};
    oj_tensor *x = nt_rand(eng, 1, sk, OJ_BF16, -1, 1), *w = nt_rand(eng, 2, sw, OJ_BF16, -1, 1);
    oj_tensor *xf = nt_rand(eng, 1, sk, OJ_F32, -1, 1), *wf = nt_rand(eng, 2, sw, OJ_F32, -1, 1);
    oj_tensor *wodd = nt_rand(eng, 2, sodd, OJ_BF16, -1, 1);
    oj_tensor *tok = oj_zeros(eng, 1, s1, OJ_I64), *pos = oj_zeros(eng, 1, s1, OJ_I64);
    oj_tensor *pos2 = oj_zeros(eng, 1, s2, OJ_I64);
    assert_null(oj__decode_norm_head(xf, xf, xf, 1e-5, wf, NULL, NULL, NULL));
    expect_err(eng, OJ_ERR_DTYPE, "bf16/f16 [N, K]");
    assert_null(oj__decode_norm_head(x, x, x, 1e-5, wodd, NULL, NULL, NULL));
    expect_err(eng, OJ_ERR_SHAPE, "multiples of 8");
    assert_null(oj__decode_norm_head(x, x, x, 1e-5, oj_transpose(w, 0, 1), NULL, NULL, NULL));
    expect_err(eng, OJ_ERR_SHAPE, "k-stride 1");
    assert_null(oj__decode_norm_head(xf, x, x, 1e-5, w, NULL, NULL, NULL));
    expect_err(eng, OJ_ERR_DTYPE, "x is f32");
    assert_null(oj__decode_norm_head(x, x, x, -1.0, w, NULL, NULL, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "eps must be >= 0");
    assert_null(oj__decode_norm_head(x, x, x, 1e-5, w, tok, NULL, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "tok and pos go together");
    assert_null(oj__decode_norm_head(x, x, x, 1e-5, w, tok, pos2, NULL));
    expect_err(eng, OJ_ERR_DTYPE, "one element");
    assert_null(oj__decode_norm_head(x, x, x, 1e-5, w, tok, tok, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "share storage");
    assert_null(oj__decode_norm_head(x, x, x, 1e-5, w, NULL, NULL, pos));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "hist needs them");
    assert_null(oj__decode_norm_head(x, x, x, 1e-5, w, tok, pos, pos));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "hist shares storage");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* oj__decode_norm_head_sample on the CPU: its logits are
 * oj__decode_norm_head's, its token the host sampler's over them with the
 * step's uniform, step, pos and hist advanced as oj__decode_sample_keep_
 * does; the refusals (no sampler, a penalty, shared storage). */
static void test_norm_head_sample(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    enum { K = 32, N = 200 };
    int64_t sx[3] = {1, 1, K}, sk[1] = {K}, sw[2] = {N, K}, s1[1] = {1}, sh[1] = {8};
    int64_t p0 = 2, st0 = 4;
    oj_tensor *x = nt_rand(eng, 3, sx, OJ_BF16, -2.0, 3.0), *nw = nt_rand(eng, 1, sk, OJ_BF16, 0.5, 1.5);
    oj_tensor *nb = nt_rand(eng, 1, sk, OJ_BF16, -0.5, 0.5), *w = nt_rand(eng, 2, sw, OJ_BF16, -0.5, 0.5);
    oj_tensor *tok = oj_zeros(eng, 1, s1, OJ_I64), *pos = oj_from_host(eng, 1, s1, OJ_I64, &p0, 8);
    oj_tensor *stp = oj_from_host(eng, 1, s1, OJ_I64, &st0, 8), *hist = oj_zeros(eng, 1, sh, OJ_I64);
    oj_tensor *plain = oj__decode_norm_head(x, nw, nb, 1e-5, w, NULL, NULL, NULL);
    assert_non_null(plain);
    double *lp = nt_host(plain);
    float lf[N];
    for (int i = 0; i < N; i++) lf[i] = (float)lp[i];
    for (int c = 0; c < 3; c++) {
        const oj__decode_sampler sm = {0.5 + 0.5 * c, c == 2 ? 0 : 10 + c, c == 1 ? 0.8 : 1.0, 1.0,
                                       21u + (uint64_t)c, 3};
        oj_sampler_config cfg = oj_sampler_config_default();
        cfg.temperature = sm.temperature;
        cfg.top_k = sm.top_k;
        cfg.top_p = sm.top_p;
        const int64_t step = st0 + c;
        const int32_t want = oj_sample_logits(lf, N, &cfg, NULL, 0, oj_sample_uniform(sm.seed, sm.seq, step));
        oj_tensor *got = oj__decode_norm_head_sample(x, nw, nb, 1e-5, w, tok, pos, stp, hist, &sm);
        assert_non_null(got);
        double *lg = nt_host(got);
        assert_memory_equal(lg, lp, N * sizeof *lg);
        free(lg);
        int64_t t = -2, st = 0, p = 0, h[8];
        assert_int_equal(oj_to_host(tok, &t, 8), OJ_OK);
        assert_int_equal(oj_to_host(stp, &st, 8), OJ_OK);
        assert_int_equal(oj_to_host(pos, &p, 8), OJ_OK);
        assert_int_equal(oj_to_host(hist, h, sizeof h), OJ_OK);
        if (t != want) fail_msg("case %d: token %lld, the host sampler's %d", c, (long long)t, want);
        assert_int_equal(st, step + 1);
        assert_int_equal(p, p0 + 1 + c);
        assert_int_equal(h[p], t);
    }
    free(lp);
    /* the refusals */
    const oj__decode_sampler pen = {0.8, 40, 1.0, 1.3, 1, 0};
    assert_null(oj__decode_norm_head_sample(x, nw, nb, 1e-5, w, tok, pos, stp, hist, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "the sampler is NULL");
    assert_null(oj__decode_norm_head_sample(x, nw, nb, 1e-5, w, tok, pos, stp, hist, &pen));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "no repetition penalty");
    const oj__decode_sampler ok = {0.8, 40, 1.0, 1.0, 1, 0};
    assert_null(oj__decode_norm_head_sample(x, nw, nb, 1e-5, w, tok, pos, tok, hist, &ok));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "must not share storage");
    /* the draw's step missing: NULL (a NULL input, as every op takes it) */
    assert_null(oj__decode_norm_head_sample(x, nw, nb, 1e-5, w, tok, pos, NULL, hist, &ok));
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* oj__decode_attention's refusals: a cache of another shape or dtype, and
 * a backend without the entry (the CPU's: the fast step then takes
 * scaled_dot_product_attention). */
static void test_decode_attention_refusals(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t skv[5] = {2, 1, 2, 8, 8}, sq[3] = {1, 1, 48}, sbad[3] = {1, 1, 40}, sm[1] = {8};
    int64_t s1[1] = {1};
    oj_tensor *kv = oj_zeros(eng, 5, skv, OJ_BF16), *qkv = oj_zeros(eng, 3, sq, OJ_BF16);
    oj_tensor *qbad = oj_zeros(eng, 3, sbad, OJ_BF16), *qf = oj_zeros(eng, 3, sq, OJ_F32);
    oj_tensor *mask = oj_zeros(eng, 1, sm, OJ_BOOL), *slot = oj_zeros(eng, 1, s1, OJ_I64);
    assert_null(oj__decode_attention(qbad, kv, mask, slot));
    expect_err(eng, OJ_ERR_SHAPE, "3 H D");
    assert_null(oj__decode_attention(qf, kv, mask, slot));
    expect_err(eng, OJ_ERR_DTYPE, "one dtype");
    assert_null(oj__decode_attention(qkv, kv, mask, mask));
    expect_err(eng, OJ_ERR_DTYPE, "slot i64");
    assert_false(oj__decode_attention_supported(eng));
    assert_null(oj__decode_attention(qkv, kv, mask, slot));
    expect_err(eng, OJ_ERR_UNSUPPORTED, "decode_attention");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_linear_residual(void **state) {
    (void)state;
    const oj_dtype dts[2] = {OJ_BF16, OJ_F16};
    for (int i = 0; i < 2; i++) {
        oj_engine *eng = nt_engine();
        oj_set_grad_enabled(eng, false);
        oj_scope_begin(eng);
        const int64_t K = 256, N = 64;
        int64_t sx[3] = {1, 1, N}, sy[3] = {1, 1, K}, sw[2] = {K, N}, sn[1] = {N};
        oj_tensor *x = nt_rand(eng, 3, sx, dts[i], -2.0, 2.0), *y = nt_rand(eng, 3, sy, dts[i], -1.0, 1.0);
        oj_tensor *w = nt_rand(eng, 2, sw, dts[i], -0.1, 0.1), *b = nt_rand(eng, 1, sn, dts[i], -1.0, 1.0);
        oj_tensor *wt = oj_transpose(w, 0, 1);
        oj_tensor *want = oj_add(x, oj_linear(y, wt, b)); /* before x changes */
        assert_non_null(want);
        assert_int_equal(oj__decode_linear_residual_(x, y, w, b), OJ_OK);
        double *g = nt_host(x), *r = nt_host(want);
        close_to(oj_dtype_name(dts[i]), g, r, N, dts[i] == OJ_BF16 ? 2e-2 : 4e-3);
        /* without a bias */
        oj_tensor *want2 = oj_add(x, oj_linear(y, wt, NULL));
        assert_int_equal(oj__decode_linear_residual_(x, y, w, NULL), OJ_OK);
        double *g2 = nt_host(x), *r2 = nt_host(want2);
        close_to("no bias", g2, r2, N, dts[i] == OJ_BF16 ? 2e-2 : 4e-3);
        free(g);
        free(r);
        free(g2);
        free(r2);
        oj_scope_end(eng);
        nt_engine_done(eng);
    }
}

/* the keys and values of a [1, 1, 3C] projection land at the slot */
static void test_kv_write(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    const int64_t H = 2, D = 8, C = H * D, S = 5, N = 3 * C;
    int64_t sx[3] = {1, 1, C}, sc[1] = {C}, sw[2] = {C, N}, skv[5] = {2, 1, H, S, D}, s1[1] = {1};
    oj_tensor *x = nt_rand(eng, 3, sx, OJ_BF16, -1.0, 1.0), *nw = nt_rand(eng, 1, sc, OJ_BF16, 0.5, 1.5);
    oj_tensor *nb = nt_rand(eng, 1, sc, OJ_BF16, -0.5, 0.5), *w = nt_rand(eng, 2, sw, OJ_BF16, -0.3, 0.3);
    oj_tensor *kv = oj_zeros(eng, 5, skv, OJ_BF16);
    for (int64_t slot = -1; slot <= S; slot++) {
        int64_t sv = slot;
        oj_tensor *st = oj_from_host(eng, 1, s1, OJ_I64, &sv, sizeof sv);
        assert_int_equal(oj_fill_(kv, 0.0), OJ_OK);
        oj_tensor *out = oj__decode_norm_linear(x, nw, nb, 1e-5, w, NULL, OJ__DECODE_ACT_NONE, kv, st);
        assert_non_null(out);
        double *o = nt_host(out), *k = nt_host(kv);
        for (int64_t wh = 0; wh < 2; wh++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t s = 0; s < S; s++)
                    for (int64_t d = 0; d < D; d++) {
                        double v = k[((wh * H + h) * S + s) * D + d];
                        double want = s == slot ? o[C + wh * C + h * D + d] : 0.0;
                        if (v != want)
                            fail_msg("slot %lld: kv[%lld, 0, %lld, %lld, %lld] = %g, want %g",
                                     (long long)slot, (long long)wh, (long long)h, (long long)s,
                                     (long long)d, v, want);
                    }
        free(o);
        free(k);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void expect_err(oj_engine *eng, oj_status want, const char *needle) {
    assert_int_equal(oj_last_status(eng), want);
    if (strstr(oj_last_error(eng), needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", oj_last_error(eng), needle);
    oj_clear_error(eng);
}

/* A call returned want and recorded an error that mentions needle. */
static void expect_rc(oj_engine *eng, oj_status got, oj_status want, const char *needle) {
    assert_int_equal(got, want);
    expect_err(eng, want, needle);
}

static void test_refusals(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    int64_t sx[1] = {16}, sw[2] = {16, 24}, sodd[2] = {16, 20}, sn[1] = {24}, skv[5] = {2, 1, 2, 4, 2}; /* 3 H D = 12 */
    oj_tensor *x = nt_rand(eng, 1, sx, OJ_BF16, -1, 1), *w = nt_rand(eng, 2, sw, OJ_BF16, -1, 1);
    oj_tensor *b = nt_rand(eng, 1, sn, OJ_BF16, -1, 1);
    oj_tensor *xf = nt_rand(eng, 1, sx, OJ_F32, -1, 1), *wf = nt_rand(eng, 2, sw, OJ_F32, -1, 1);
    oj_tensor *wodd = nt_rand(eng, 2, sodd, OJ_BF16, -1, 1);
    /* f32 weights: not a decode dtype */
    assert_null(oj__decode_norm_linear(xf, xf, xf, 1e-5, wf, NULL, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_DTYPE, "bf16/f16");
    /* N not a multiple of 8 */
    assert_null(oj__decode_norm_linear(x, x, x, 1e-5, wodd, NULL, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_SHAPE, "multiples of 8");
    /* a transposed weight (n-stride not 1) */
    int64_t ssq[2] = {24, 24};
    oj_tensor *sq = nt_rand(eng, 2, ssq, OJ_BF16, -1, 1), *sqt = oj_transpose(sq, 0, 1);
    oj_tensor *x24 = nt_rand(eng, 1, sn, OJ_BF16, -1, 1);
    assert_int_equal(oj__decode_linear_residual_(x24, x24, sqt, NULL), OJ_ERR_SHAPE);
    expect_err(eng, OJ_ERR_SHAPE, "n-stride 1");
    /* x of another length, x's dtype not the weight's */
    assert_null(oj__decode_norm_linear(b, x, x, 1e-5, w, NULL, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_SHAPE, "x must be contiguous with 16 elements");
    assert_null(oj__decode_norm_linear(xf, x, x, 1e-5, w, NULL, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_DTYPE, "x is f32");
    /* kv: wrong shape (3 H D != N), slot missing */
    oj_tensor *kv = oj_zeros(eng, 5, skv, OJ_BF16);
    int64_t s1[1] = {1}, zero = 0;
    oj_tensor *slot = oj_from_host(eng, 1, s1, OJ_I64, &zero, sizeof zero);
    assert_null(oj__decode_norm_linear(x, x, x, 1e-5, w, b, 0, kv, slot));
    expect_err(eng, OJ_ERR_SHAPE, "3 H D = 24");
    assert_null(oj__decode_norm_linear(x, x, x, 1e-5, w, b, 0, kv, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "kv and slot");
    assert_null(oj__decode_norm_linear(x, x, x, 1e-5, w, b, 7, NULL, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "activation 7");
    /* the residual's y aliasing x */
    int64_t s16x16[2] = {16, 16};
    oj_tensor *w16 = nt_rand(eng, 2, s16x16, OJ_BF16, -1, 1);
    assert_int_equal(oj__decode_linear_residual_(x, x, w16, NULL), OJ_ERR_INVALID_ARGUMENT);
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "share storage");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* The quantized decode ops (oj__decode_qnorm_linear,
 * oj__decode_qlinear_residual_) on the CPU backend: a q8_0 product equals
 * the double sum over the dequantized matrix (one f32 rounding), the
 * residual adds it in place; the refusals name what was wrong. */
static void test_qlinear(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    enum { K = 256, N = 8 };
    int64_t sw[2] = {N, K}, sk[1] = {K}, sn[1] = {N};
    oj_tensor *wt = nt_rand(eng, 2, sw, OJ_F32, -0.5, 0.5);
    oj_qtensor *q = oj_quantize(wt, OJ_Q8_0);
    assert_non_null(q);
    assert_true(oj__decode_qweight_ok(q));
    float wd[N * K], xh[K], bh[N], yh[N], x0[N];
    assert_int_equal(oj_to_host(oj_dequantize(q), wd, sizeof wd), OJ_OK);
    oj_tensor *x = nt_rand(eng, 1, sk, OJ_F32, -2, 2), *b = nt_rand(eng, 1, sn, OJ_F32, -1, 1);
    assert_int_equal(oj_to_host(x, xh, sizeof xh), OJ_OK);
    assert_int_equal(oj_to_host(b, bh, sizeof bh), OJ_OK);
    oj_tensor *y = oj__decode_qnorm_linear(x, NULL, NULL, 0.0, q, b, OJ__DECODE_ACT_NONE, NULL, NULL);
    assert_non_null(y);
    assert_int_equal(oj_to_host(y, yh, sizeof yh), OJ_OK);
    for (int n = 0; n < N; n++) {
        double v = bh[n];
        for (int k = 0; k < K; k++) v += (double)xh[k] * wd[n * K + k];
        assert_true(yh[n] == (float)v);
    }
    oj_tensor *r = nt_rand(eng, 1, sn, OJ_F32, -1, 1);
    assert_int_equal(oj_to_host(r, x0, sizeof x0), OJ_OK);
    assert_int_equal(oj__decode_qlinear_residual_(r, x, q, b), OJ_OK);
    float rh[N];
    assert_int_equal(oj_to_host(r, rh, sizeof rh), OJ_OK);
    for (int n = 0; n < N; n++) assert_true(rh[n] == x0[n] + yh[n]);
    /* refusals */
    oj_tensor *xb = nt_rand(eng, 1, sk, OJ_BF16, -1, 1);
    assert_null(oj__decode_qnorm_linear(xb, NULL, NULL, 0.0, q, b, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_DTYPE, "b is f32, the row bf16");
    assert_null(oj__decode_qnorm_linear(x, x, NULL, 1e-5, q, NULL, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "the norm's weight and bias go together");
    assert_null(oj__decode_qnorm_linear(b, NULL, NULL, 0.0, q, NULL, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_SHAPE, "x must be contiguous with 256 elements");
    assert_int_equal(oj__decode_qlinear_residual_(x, x, q, NULL), OJ_ERR_SHAPE);
    expect_err(eng, OJ_ERR_SHAPE, "x must be contiguous with 8 elements");
    int64_t s32[2] = {4, 32}, sx32[1] = {32};
    oj_qtensor *q34 = oj_quantize(nt_rand(eng, 2, s32, OJ_F32, -1, 1), OJ_Q8_0); /* 34-byte rows */
    assert_non_null(q34);
    assert_false(oj__decode_qweight_ok(q34));
    assert_null(oj__decode_qnorm_linear(nt_rand(eng, 1, sx32, OJ_F32, -1, 1), NULL, NULL, 0.0, q34,
                                        NULL, 0, NULL, NULL));
    expect_err(eng, OJ_ERR_SHAPE, "rows of a multiple of 16 bytes; got q8_0 [4, 32] (34 bytes a row)");
    oj_qtensor_free(q34);
    oj_qtensor_free(q);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* oj__decode_qnorm_head on the CPU backend: the logits of
 * oj__decode_qnorm_linear with the norm, tok their argmax, pos + 1,
 * hist[pos] = tok once pos is inside hist; refusals (tok without pos, no
 * norm, hist sharing tok's storage). */
static void test_qnorm_head(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    enum { K = 256, N = 40 };
    int64_t sw[2] = {N, K}, sk[1] = {K}, s1[1] = {1}, p0 = 5, sh[1] = {p0 + 3};
    oj_qtensor *q = oj_quantize(nt_rand(eng, 2, sw, OJ_F32, -0.5, 0.5), OJ_Q4_K);
    assert_non_null(q);
    oj_tensor *x = nt_rand(eng, 1, sk, OJ_F32, -2, 2), *nw = nt_rand(eng, 1, sk, OJ_F32, 0.5, 1.5);
    oj_tensor *nb = nt_rand(eng, 1, sk, OJ_F32, -0.5, 0.5);
    assert_true(oj__decode_qhead_supported(eng));
    oj_tensor *want = oj__decode_qnorm_linear(x, nw, nb, 1e-5, q, NULL, 0, NULL, NULL);
    assert_non_null(want);
    oj_tensor *tok = oj_zeros(eng, 1, s1, OJ_I64), *pos = oj_from_host(eng, 1, s1, OJ_I64, &p0, 8);
    oj_tensor *hist = oj_zeros(eng, 1, sh, OJ_I64);
    for (int step = 1; step <= 3; step++) { /* pos 6, 7 land in hist; 8 is past its end */
        oj_tensor *got = oj__decode_qnorm_head(x, nw, nb, 1e-5, q, tok, pos, hist);
        assert_non_null(got);
        float g[N], w[N];
        assert_int_equal(oj_to_host(got, g, sizeof g), OJ_OK);
        assert_int_equal(oj_to_host(want, w, sizeof w), OJ_OK);
        int64_t best = 0, t = -1, p = 0;
        for (int i = 0; i < N; i++) {
            assert_true(g[i] == w[i]);
            if (g[i] > g[best]) best = i;
        }
        assert_int_equal(oj_to_host(tok, &t, sizeof t), OJ_OK);
        assert_int_equal(oj_to_host(pos, &p, sizeof p), OJ_OK);
        assert_int_equal(t, best);
        assert_int_equal(p, p0 + step);
        int64_t h[8]; /* p0 + 3 */
        assert_int_equal(oj_to_host(hist, h, sizeof h), OJ_OK);
        for (int64_t i = 0; i < sh[0]; i++)
            assert_int_equal(h[i], i > p0 && i <= p0 + step ? best : 0);
    }
    /* refusals */
    assert_null(oj__decode_qnorm_head(x, nw, nb, 1e-5, q, NULL, pos, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "tok is NULL");
    assert_null(oj__decode_qnorm_head(x, nw, nb, 1e-5, q, tok, NULL, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "pos is NULL");
    assert_null(oj__decode_qnorm_head(x, NULL, NULL, 1e-5, q, tok, pos, NULL));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "norm weight and bias are NULL");
    assert_null(oj__decode_qnorm_head(x, nw, nb, 1e-5, q, tok, pos, tok));
    expect_err(eng, OJ_ERR_INVALID_ARGUMENT, "hist shares storage");
    assert_null(oj__decode_qnorm_head(x, nw, nb, 1e-5, q, tok, nb, NULL));
    expect_err(eng, OJ_ERR_DTYPE, "pos must be i64 with one element");
    oj_qtensor_free(q);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* decode_sample on the CPU backend: the host sampler's token for the
 * history {i : seen[i]} and the step's uniform, seen[tok] set, step and
 * pos advanced, -1 on a NaN; the refusals */
static void test_decode_sample(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    enum { V = 9 };
    const double v[V] = {0.5, 2.0, -1.0, 2.0, 1.5, -INFINITY, 0.25, 2.0, -3.0};
    float lf[V];
    for (int i = 0; i < V; i++) lf[i] = (float)v[i];
    int64_t s1[1] = {1}, sv[1] = {V}, p0 = 3, st0 = 5;
    oj_tensor *tok = oj_zeros(eng, 1, s1, OJ_I64), *pos = oj_from_host(eng, 1, s1, OJ_I64, &p0, 8);
    oj_tensor *stp = oj_from_host(eng, 1, s1, OJ_I64, &st0, 8);
    oj_tensor *l = nt_from(eng, 1, sv, OJ_F32, v);
    uint8_t seen[V] = {0, 1, 0, 0, 0, 0, 1, 0, 0};
    oj_tensor *sn = oj_from_host(eng, 1, sv, OJ_U8, seen, V);
    const int32_t hist[2] = {1, 6};
    for (int c = 0; c < 24; c++) {
        oj__decode_sampler sm = {c % 4 == 0 ? 0.0 : 0.3 * (c % 4), c % 3 == 0 ? 0 : 2 + c % 3,
                                 c % 5 == 0 ? 0.6 : 1.0, c % 2 ? 1.5 : 1.0, 11u + (uint64_t)c, c};
        oj_sampler_config cfg = oj_sampler_config_default();
        cfg.temperature = sm.temperature;
        cfg.top_k = sm.top_k;
        cfg.top_p = sm.top_p;
        cfg.repetition_penalty = sm.repetition_penalty;
        const int64_t step = 5 + c;
        const int32_t want = oj_sample_logits(lf, V, &cfg, hist, 2, oj_sample_uniform(sm.seed, c, step));
        assert_int_equal(oj_copy_from_host(sn, seen, V), OJ_OK);
        assert_int_equal(oj__decode_sample_(tok, l, pos, sm.repetition_penalty != 1.0 ? sn : NULL, stp, &sm),
                         OJ_OK);
        int64_t t = -2, st = 0;
        uint8_t after[V];
        assert_int_equal(oj_to_host(tok, &t, sizeof t), OJ_OK);
        assert_int_equal(oj_to_host(stp, &st, sizeof st), OJ_OK);
        assert_int_equal(oj_to_host(sn, after, V), OJ_OK);
        if (t != want) fail_msg("case %d: decode_sample %lld, host sampler %d", c, (long long)t, want);
        assert_int_equal(st, step + 1);
        if (sm.repetition_penalty != 1.0) assert_int_equal(after[t], 1);
    }
    int64_t p = 0;
    assert_int_equal(oj_to_host(pos, &p, sizeof p), OJ_OK);
    assert_int_equal(p, 3 + 24);
    /* the token kept at hist[pos] (pos after its advance); hist needs pos */
    int64_t sh[1] = {40}, kept[40];
    oj_tensor *kh = oj_full(eng, 1, sh, OJ_I64, -7.0);
    oj__decode_sampler sk = {0.7, 4, 1.0, 1.0, 5, 1};
    assert_int_equal(oj__decode_sample_keep_(tok, l, pos, NULL, stp, kh, &sk), OJ_OK);
    int64_t tk = -1;
    assert_int_equal(oj_to_host(tok, &tk, sizeof tk), OJ_OK);
    assert_int_equal(oj_to_host(kh, kept, sizeof kept), OJ_OK);
    assert_int_equal(kept[3 + 25], tk);
    assert_int_equal(kept[3 + 24], -7);
    expect_rc(eng, oj__decode_sample_keep_(tok, l, NULL, NULL, stp, kh, &sk), OJ_ERR_INVALID_ARGUMENT,
              "comes with pos");
    /* a NaN: -1 */
    double vn[V];
    memcpy(vn, v, sizeof vn);
    vn[4] = NAN;
    oj_tensor *ln = nt_from(eng, 1, sv, OJ_BF16, vn);
    oj__decode_sampler sm = {0.8, 3, 1.0, 1.0, 1, 0};
    assert_int_equal(oj__decode_sample_(tok, ln, NULL, NULL, stp, &sm), OJ_OK);
    int64_t t = 0;
    assert_int_equal(oj_to_host(tok, &t, sizeof t), OJ_OK);
    assert_int_equal(t, -1);
    /* refusals */
    sm.repetition_penalty = 1.3;
    expect_rc(eng, oj__decode_sample_(tok, l, NULL, NULL, stp, &sm), OJ_ERR_INVALID_ARGUMENT,
              "needs the seen flags");
    expect_rc(eng, oj__decode_sample_(tok, l, NULL, l, stp, &sm), OJ_ERR_DTYPE,
              "seen must be contiguous u8");
    sm.repetition_penalty = 1.0;
    expect_rc(eng, oj__decode_sample_(tok, l, tok, NULL, stp, &sm), OJ_ERR_INVALID_ARGUMENT,
              "must not share storage");
    expect_rc(eng, oj__decode_sample_(l, l, NULL, NULL, stp, &sm), OJ_ERR_DTYPE, "tok must be i64");
    sm.temperature = NAN;
    expect_rc(eng, oj__decode_sample_(tok, l, NULL, NULL, stp, &sm), OJ_ERR_INVALID_ARGUMENT, "");
    int64_t sb[1] = {OJ__DECODE_SAMPLE_MAX_K + 1};
    oj_tensor *big = oj_zeros(eng, 1, sb, OJ_F32);
    oj__decode_sampler all = {1.0, 0, 1.0, 1.0, 1, 0};
    assert_false(oj__decode_sample_ok(eng, &all, OJ__DECODE_SAMPLE_MAX_K + 1));
    assert_true(oj__decode_sample_ok(eng, &all, OJ__DECODE_SAMPLE_MAX_K));
    expect_rc(eng, oj__decode_sample_(tok, big, NULL, NULL, stp, &all), OJ_ERR_UNSUPPORTED,
              "sample on the host");
    all.top_k = 40; /* 40 candidates: taken */
    assert_int_equal(oj__decode_sample_(tok, big, NULL, NULL, stp, &all), OJ_OK);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* the one-row matmul's tiles (backend/gemv_tiles.h, which cuda_gemv.cu
 * launches): GPT-2 124M's projections as cuda_gemv.cu's table gives them,
 * a bias gradient's long K split, long K on 8 groups */
static void test_gemv_kn_tiles(void **state) {
    (void)state;
    const struct {
        int64_t N, K;
        int G;
        int64_t blocks, S;
    } cases[] = {
        {2304, 768, 2, 144, 1},  /* c_attn */
        {768, 768, 2, 48, 1},    /* attn c_proj: 48 blocks, 24 rows a thread: no split */
        {3072, 768, 2, 192, 1},  /* c_fc */
        {768, 3072, 2, 48, 1},   /* mlp c_proj: 24 rows a thread, too few to split */
        {768, 16384, 8, 12, 22}, /* bias gradient: 12 blocks, S 22 (512 rows / 16 = 32 cap) */
        {1024, 4096, 8, 16, 8},  /* long K: 8 groups, S 17 capped at 128 rows / 16 */
        {16384, 768, 8, 256, 1}, /* 2048 groups: 8 a block */
        {8192, 768, 4, 256, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oj_gemv_kn_tiles t = oj_gemv_kn_plan(cases[i].N, cases[i].K);
        if (t.G != cases[i].G || t.blocks != cases[i].blocks ||
            (cases[i].S == 1) != (t.S == 1) || (cases[i].S > 1 && t.S != cases[i].S))
            fail_msg("N %lld K %lld: G %d blocks %lld S %lld, expected G %d blocks %lld S %lld",
                     (long long)cases[i].N, (long long)cases[i].K, t.G, (long long)t.blocks,
                     (long long)t.S, cases[i].G, (long long)cases[i].blocks,
                     (long long)cases[i].S);
        assert_int_equal(oj_gemv_kn_unsplit(cases[i].N, cases[i].K),
                         cases[i].S == 1 && cases[i].K < OJ_GEMV_KN_LONG_K);
    }
}

/* oj__decode_matches_unfused follows cuda_gemv.cu's tile and split rule:
 * gpt2-124m's four projections match, K 4096 (8 column groups there) and
 * a split K do not */
static void test_matches_unfused(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const struct {
        int64_t K, N;
        bool want;
    } cases[] = {
        {768, 2304, true},  {768, 768, true},    {768, 3072, true}, {3072, 768, true},
        {4096, 1024, false}, {2048, 8192, false}, /* 256 blocks of 4 groups, 32 rows: split */
        {768, 8192, true},   {64, 192, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t s2[2] = {cases[i].K, cases[i].N};
        oj_tensor *w = oj_empty(eng, 2, s2, OJ_BF16);
        assert_non_null(w);
        if (oj__decode_matches_unfused(w) != cases[i].want)
            fail_msg("[%lld, %lld]: matches_unfused %d", (long long)cases[i].K,
                     (long long)cases[i].N, !cases[i].want);
        oj_release(w);
    }
    int64_t s2[2] = {768, 768};
    oj_tensor *wf = oj_empty(eng, 2, s2, OJ_F32);
    assert_false(oj__decode_matches_unfused(wf)); /* not a decode weight */
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* argmax + pos += 1: the lowest index on ties, the first NaN above all,
 * all -inf gives 0; each dtype; refusals */
static void test_argmax_advance(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s1[1] = {1}, p0 = 41;
    oj_tensor *tok = oj_zeros(eng, 1, s1, OJ_I64), *pos = oj_from_host(eng, 1, s1, OJ_I64, &p0, sizeof p0);
    const struct {
        double v[6];
        int64_t want;
    } cases[] = {
        {{0.5, 2.0, -1.0, 2.0, 1.5, -INFINITY}, 1},
        {{-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, 0},
        {{1.0, NAN, 3.0, NAN, 9.0, 0.0}, 1},
        {{1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, 5},
        {{INFINITY, 2.0, INFINITY, 4.0, 5.0, 6.0}, 0},
    };
    const oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F16};
    int64_t steps = 0;
    for (int d = 0; d < 3; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t s6[1] = {6};
            oj_tensor *l = nt_from(eng, 1, s6, dts[d], cases[c].v);
            assert_int_equal(oj__decode_argmax_advance_(tok, l, pos), OJ_OK);
            steps++;
            int64_t t = -1, p = -1;
            assert_int_equal(oj_to_host(tok, &t, sizeof t), OJ_OK);
            assert_int_equal(oj_to_host(pos, &p, sizeof p), OJ_OK);
            if (t != cases[c].want)
                fail_msg("%s case %zu: argmax %lld, want %lld", oj_dtype_name(dts[d]), c,
                         (long long)t, (long long)cases[c].want);
            assert_int_equal(p, 41 + steps);
        }
    /* refusals */
    int64_t s6[1] = {6};
    oj_tensor *l = oj_zeros(eng, 1, s6, OJ_F32), *li = oj_zeros(eng, 1, s6, OJ_I32);
    expect_rc(eng, oj__decode_argmax_advance_(pos, l, pos), OJ_ERR_INVALID_ARGUMENT,
              "share storage");
    expect_rc(eng, oj__decode_argmax_advance_(tok, li, pos), OJ_ERR_DTYPE, "f32/bf16/f16, got i32");
    expect_rc(eng, oj__decode_argmax_advance_(l, l, pos), OJ_ERR_DTYPE, "must be i64");
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* x = wte[tok] + wpe[pos] with embedding + add's bits, the mask j <= pos;
 * an index out of range gives NaN and reads nothing */
static void test_embed_mask(void **state) {
    (void)state;
    const oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F16};
    for (int d = 0; d < 3; d++) {
        oj_engine *eng = nt_engine();
        oj_set_grad_enabled(eng, false);
        oj_scope_begin(eng);
        int64_t sv[2] = {11, 24}, sp[2] = {9, 24}, s1[1] = {1}, sm[4] = {1, 1, 1, 13};
        oj_tensor *wte = nt_rand(eng, 2, sv, dts[d], -1, 1), *wpe = nt_rand(eng, 2, sp, dts[d], -1, 1);
        int64_t tv = 7, pv = 4;
        oj_tensor *tok = oj_from_host(eng, 1, s1, OJ_I64, &tv, sizeof tv);
        oj_tensor *pos = oj_from_host(eng, 1, s1, OJ_I64, &pv, sizeof pv);
        oj_tensor *mask = oj_empty(eng, 4, sm, OJ_BOOL);
        oj_tensor *x = oj__decode_embed_mask(wte, wpe, tok, pos, mask);
        assert_non_null(x);
        oj_tensor *want = oj_add(oj_narrow(wte, 0, 7, 1), oj_narrow(wpe, 0, 4, 1));
        double *a = nt_host(x), *b = nt_host(want), *m = nt_host(mask);
        for (int i = 0; i < 24; i++)
            if (a[i] != b[i]) fail_msg("%s x[%d] = %g, want %g", oj_dtype_name(dts[d]), i, a[i], b[i]);
        for (int j = 0; j < 13; j++) assert_true(m[j] == (j <= 4 ? 1.0 : 0.0));
        free(a);
        free(b);
        free(m);
        tv = 11; /* out of the vocabulary */
        oj_tensor *bad = oj_from_host(eng, 1, s1, OJ_I64, &tv, sizeof tv);
        oj_tensor *xn = oj__decode_embed_mask(wte, wpe, bad, pos, mask);
        double *n = nt_host(xn);
        for (int i = 0; i < 24; i++) assert_true(isnan(n[i]));
        free(n);
        /* refusals */
        assert_null(oj__decode_embed_mask(wte, wpe, tok, pos, tok));
        assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
        oj_clear_error(eng);
        assert_null(oj__decode_embed_mask(wte, oj_transpose(wpe, 0, 1), tok, pos, mask));
        expect_rc(eng, oj_last_status(eng), OJ_ERR_SHAPE, "wte [V, C] and wpe [P, C]");
        oj_scope_end(eng);
        nt_engine_done(eng);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm_linear),
        cmocka_unit_test(test_norm_head),
        cmocka_unit_test(test_norm_head_sample),
        cmocka_unit_test(test_decode_attention_refusals),
        cmocka_unit_test(test_linear_residual),
        cmocka_unit_test(test_kv_write),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_qlinear),
        cmocka_unit_test(test_argmax_advance),
        cmocka_unit_test(test_decode_sample),
        cmocka_unit_test(test_qnorm_head),
        cmocka_unit_test(test_matches_unfused),
        cmocka_unit_test(test_gemv_kn_tiles),
        cmocka_unit_test(test_embed_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
