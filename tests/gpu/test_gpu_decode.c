// test: decoding with the position on the device, on the GPU against the
// CPU. index_copy_ and rotary_embedding_at give the CPU's values, eagerly
// and replayed from a CUDA graph whose index/positions change between
// replays (a bad index fails the replay). Attention with one query row
// (the split-key decode kernel) matches the CPU over lengths around its
// chunk size, GQA, every mask kind, strided caches, f32/bf16/f16, and its
// logsumexp carries the gradient. oj_gpt_decoder: the replayed graph gives
// the tokens and logits of the same step run eagerly on the GPU, of the
// GPU's eager cached decode and of the CPU decoder (gpt2-tiny and
// nanolab-tiny, a nanolab ring, a second prefill after the capture, bf16
// autocast, bf16 weights, gpt2-124m), and frees everything it took.
// oj_generate (what `ojas generate --device cuda` runs: the graph
// decoder) gives the eager loop's tokens, greedy and sampled with a fixed
// seed (gpt2-tiny, nanolab-tiny, a Llama config, gpt2-124m). The fused
// decode ops agree with the CPU's reference entries; the gpt2 fast step
// (FAST numerics, bf16 weights) replayed from a graph equals itself run
// eagerly and stays within bf16 rounding of the generic step and the CPU.
//
// Greedy tokens are compared exactly up to the first step where the two
// runs' top logits are within rounding of each other (a genuine near tie,
// then the sequences may part); logits to a per-dtype tolerance.
//
// Skips (77) without a CUDA device. OJAS_GPU_TEST_ON_CPU=1 runs the same
// checks with a CPU engine in place of the CUDA one (a self-check of this
// test; the graph parts then skip).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"
#include "gpu_testutil.h"
#include "models/gpt_internal.h"
#include "ops/nn_decode.h"

static bool on_cpu;

static oj_engine *engine(bool gpu, oj_numerics num) {
    return gpu_test_engine(gpu, on_cpu, num, 11);
}

/* t as doubles on the host (malloc'd). */
static double *host_f64(oj_tensor *t) {
    oj_engine *e = oj_tensor_engine(t);
    oj_scope_begin(e);
    oj_tensor *c = oj_cast(t, OJ_F64);
    if (c == NULL) fail_msg("cast: %s", oj_last_error(e));
    int64_t n = oj_numel(c);
    double *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    assert_int_equal(oj_to_host(c, h, (size_t)n * sizeof *h), OJ_OK);
    oj_scope_end(e);
    return h;
}

/* max |a - b| <= tol * max(1, max |b|), NaN only where both are NaN. */
static void assert_close(const char *what, oj_tensor *a, oj_tensor *b, double tol) {
    assert_int_equal(oj_numel(a), oj_numel(b));
    double *x = host_f64(a), *y = host_f64(b);
    int64_t n = oj_numel(a);
    double scale = 1.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(y[i]) > scale && isfinite(y[i])) scale = fabs(y[i]);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]) || isnan(y[i])) {
            if (!(isnan(x[i]) && isnan(y[i]))) fail_msg("%s: element %lld: %g vs %g", what, (long long)i, x[i], y[i]);
            continue;
        }
        if (x[i] == y[i]) continue; /* infinities */
        double d = fabs(x[i] - y[i]);
        if (d > worst) worst = d;
        if (d > tol * scale)
            fail_msg("%s: element %lld: %.9g vs %.9g (tolerance %g of %g)", what, (long long)i, x[i],
                     y[i], tol, scale);
    }
    free(x);
    free(y);
}

/* The fast step's optional pieces (docs/architecture.md, the switches):
 * all on (on true), all off, or back to their defaults (unset). */
static void decode_pieces(int on) {
    static const char *names[] = {"OJAS_DECODE_U24", "OJAS_DECODE_HEAD", "OJAS_DECODE_HEAD_DRAW",
                                  "OJAS_DECODE_ATTN_EARLY"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (on < 0) unsetenv(names[i]);
        else setenv(names[i], on ? "1" : "0", 1);
    }
    if (on < 0) unsetenv("OJAS_CUDA_ATTN_COMBINE");
    else setenv("OJAS_CUDA_ATTN_COMBINE", on ? "0" : "1", 1); /* on: merged by the last block */
}

static oj_tensor *to_gpu(oj_tensor *t, oj_engine *gpu) {
    oj_tensor *g = oj_to_device(t, gpu);
    if (g == NULL) fail_msg("to_device: %s", oj_last_error(gpu));
    return g;
}

static oj_tensor *i64s(oj_engine *e, int64_t n, const int64_t *v) {
    int64_t s[1] = {n};
    oj_tensor *t = oj_from_host(e, 1, s, OJ_I64, v, (size_t)n * sizeof *v);
    assert_non_null(t);
    return t;
}

/* ---------------------------------------------------------------- ops */

static void test_index_copy(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_EXACT), *gpu = engine(true, OJ_NUMERICS_EXACT);
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_I64};
    for (int k = 0; k < 3; k++) {
        int64_t xs[3] = {3, 5, 7}, ss[3] = {3, 2, 7};
        oj_tensor *x = oj_cast(oj_rand_normal(cpu, 3, xs, OJ_F32, 0, 10), dts[k]);
        oj_tensor *src = oj_cast(oj_rand_normal(cpu, 3, ss, OJ_F32, 0, 10), dts[k]);
        int64_t iv[2] = {4, 1};
        oj_tensor *idx = i64s(cpu, 2, iv);
        oj_tensor *xg = to_gpu(x, gpu), *sg = to_gpu(src, gpu), *ig = to_gpu(idx, gpu);
        assert_int_equal(oj_index_copy_(x, 1, idx, src), OJ_OK);
        assert_int_equal(oj_index_copy_(xg, 1, ig, sg), OJ_OK);
        assert_close("index_copy_", xg, x, 0.0);
        /* a strided target: dim 0 of a transposed view */
        oj_tensor *xt = oj_transpose(x, 0, 2), *xgt = oj_transpose(xg, 0, 2); /* [7, 5, 3] */
        int64_t s2[3] = {2, 5, 3};
        oj_tensor *src2 = oj_cast(oj_rand_normal(cpu, 3, s2, OJ_F32, 0, 10), dts[k]);
        oj_tensor *sg2 = to_gpu(src2, gpu);
        int64_t jv[2] = {6, 0};
        oj_tensor *j = i64s(cpu, 2, jv), *jg = to_gpu(j, gpu);
        assert_int_equal(oj_index_copy_(xt, 0, j, src2), OJ_OK);
        assert_int_equal(oj_index_copy_(xgt, 0, jg, sg2), OJ_OK);
        assert_close("index_copy_ strided", xg, x, 0.0);
    }
    /* a bad index writes nothing */
    int64_t xs[2] = {4, 3}, ss[2] = {1, 3}, bad = 4;
    oj_tensor *x = oj_zeros(gpu, 2, xs, OJ_F32), *src = oj_ones(gpu, 2, ss, OJ_F32);
    oj_tensor *bi = i64s(gpu, 1, &bad);
    assert_int_equal(oj_index_copy_(x, 0, bi, src), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(gpu), "index_copy"));
    oj_clear_error(gpu);
    double *h = host_f64(x);
    for (int i = 0; i < 12; i++) assert_true(h[i] == 0.0);
    free(h);
    oj_scope_end(gpu);
    oj_scope_end(cpu);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* The mechanism of the decoder: an index_copy_ and a rotary_embedding_at
 * captured once, their index and positions rewritten between replays. */
static void test_captured_positions(void **state) {
    (void)state;
    if (on_cpu) skip();
    oj_engine *cpu = engine(false, OJ_NUMERICS_EXACT), *gpu = engine(true, OJ_NUMERICS_EXACT);
    int64_t xs[3] = {2, 6, 4}, ss[3] = {2, 1, 4}, rs[4] = {1, 2, 1, 8};
    oj_tensor *x = oj_zeros(gpu, 3, xs, OJ_F32);
    oj_tensor *src = oj_rand_normal(gpu, 3, ss, OJ_F32, 0, 1);
    oj_tensor *q = oj_rand_normal(gpu, 4, rs, OJ_F32, 0, 1);
    int64_t zero = 0;
    oj_tensor *slot = i64s(gpu, 1, &zero), *pos = i64s(gpu, 1, &zero);
    oj_tensor *qc = oj_to_device(q, cpu);
    assert_int_equal(oj_graph_capture_begin(gpu), OJ_OK);
    assert_int_equal(oj_index_copy_(x, 1, slot, src), OJ_OK);
    oj_tensor *rot = oj_rotary_embedding_at(q, pos, 10000.0);
    assert_non_null(rot);
    oj_graph *g = oj_graph_capture_end(gpu);
    if (g == NULL) fail_msg("capture: %s", oj_last_error(gpu));
    int64_t slots[3] = {4, 0, 5}, positions[3] = {3, 1000, 17};
    for (int r = 0; r < 3; r++) {
        assert_int_equal(oj_copy_from_host(slot, &slots[r], sizeof slots[r]), OJ_OK);
        assert_int_equal(oj_copy_from_host(pos, &positions[r], sizeof positions[r]), OJ_OK);
        assert_int_equal(oj_graph_replay(g), OJ_OK);
        oj_tensor *want = oj_rotary_embedding(qc, positions[r], 10000.0);
        assert_close("replayed rotary_embedding_at", rot, want, 1e-6);
        oj_release(want);
        oj_tensor *row = oj_narrow(x, 1, slots[r], 1);
        assert_close("replayed index_copy_", row, src, 0.0);
        oj_release(row);
    }
    int64_t bad = 6;
    assert_int_equal(oj_copy_from_host(slot, &bad, sizeof bad), OJ_OK);
    assert_int_equal(oj_graph_replay(g), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(gpu), "index_copy"));
    oj_clear_error(gpu);
    oj_graph_free(g);
    oj_tensor *ts[] = {x, src, q, slot, pos, rot, qc};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) oj_release(ts[i]);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

static void test_rotary_at(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_EXACT), *gpu = engine(true, OJ_NUMERICS_EXACT);
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    int64_t xs[4] = {2, 3, 5, 16}, pv[5] = {0, 7, 1000, 3, 65537};
    oj_dtype dts[2] = {OJ_F32, OJ_BF16};
    double tols[2] = {1e-6, 1e-2};
    for (int k = 0; k < 2; k++) {
        oj_tensor *x = oj_cast(oj_rand_normal(cpu, 4, xs, OJ_F32, 0, 1), dts[k]);
        oj_tensor *p = i64s(cpu, 5, pv);
        oj_tensor *a = oj_rotary_embedding_at(x, p, 10000.0);
        oj_tensor *b = oj_rotary_embedding_at(to_gpu(x, gpu), to_gpu(p, gpu), 10000.0);
        assert_non_null(b);
        assert_close("rotary_embedding_at", b, a, tols[k]);
    }
    oj_scope_end(gpu);
    oj_scope_end(cpu);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* ---------------------------------------------------------------- attention, one query row */

enum { MASK_NONE, MASK_PREFIX, MASK_RANDOM, MASK_FLOAT, MASK_KINDS };

/* A mask of kind `kind` for [B, H, 1, S] (NULL for MASK_NONE). */
static oj_tensor *make_mask(oj_engine *e, int kind, int64_t B, int64_t H, int64_t S) {
    if (kind == MASK_NONE) return NULL;
    if (kind == MASK_PREFIX) { /* the decoder's: slots 0..p, broadcast */
        int64_t p = S > 3 ? S - 3 : 0, ms[4] = {1, 1, 1, S};
        oj_tensor *ar = oj_arange(e, 0, (double)S, 1, OJ_I64);
        oj_tensor *pt = i64s(e, 1, &p);
        oj_tensor *m = oj_le(ar, pt);
        return oj_reshape(m, 4, ms);
    }
    if (kind == MASK_RANDOM) { /* keep 70%, and one row (b 0, h 0) all masked */
        int64_t ms[4] = {B, H, 1, S};
        oj_tensor *u = oj_rand_uniform(e, 4, ms, OJ_F32, 0, 1);
        oj_tensor *keep = oj_lt(u, oj_scalar(e, 0.7, OJ_F32));
        oj_tensor *row = oj_narrow(oj_narrow(keep, 0, 0, 1), 1, 0, 1);
        assert_int_equal(oj_fill_(row, 0.0), OJ_OK);
        return keep;
    }
    int64_t ms[4] = {B, 1, 1, S}; /* additive, broadcast over heads */
    return oj_rand_normal(e, 4, ms, OJ_F32, 0, 2);
}

/* out and, for f32, the gradients through the saved logsumexp. */
static void attention_case(oj_engine *cpu, oj_engine *gpu, oj_dtype dt, int64_t B, int64_t H,
                           int64_t Hkv, int64_t S, int64_t D, int64_t Dv, int kind, bool strided) {
    char what[160];
    snprintf(what, sizeof what, "attention T=1 %s B%lld H%lld Hkv%lld S%lld D%lld Dv%lld mask %d%s",
             oj_dtype_name(dt), (long long)B, (long long)H, (long long)Hkv, (long long)S,
             (long long)D, (long long)Dv, kind, strided ? " strided" : "");
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    int64_t qs[4] = {B, H, 1, D};
    oj_tensor *q = oj_cast(oj_rand_normal(cpu, 4, qs, OJ_F32, 0, 1), dt), *k, *v;
    if (strided) { /* a cache [B, S + 5, Hkv, D] seen as [B, Hkv, S, D] */
        int64_t ks[4] = {B, S + 5, Hkv, D}, vs[4] = {B, S + 5, Hkv, Dv};
        k = oj_transpose(oj_narrow(oj_cast(oj_rand_normal(cpu, 4, ks, OJ_F32, 0, 1), dt), 1, 2, S), 1, 2);
        v = oj_transpose(oj_narrow(oj_cast(oj_rand_normal(cpu, 4, vs, OJ_F32, 0, 1), dt), 1, 2, S), 1, 2);
    } else {
        int64_t ks[4] = {B, Hkv, S, D}, vs[4] = {B, Hkv, S, Dv};
        k = oj_cast(oj_rand_normal(cpu, 4, ks, OJ_F32, 0, 1), dt);
        v = oj_cast(oj_rand_normal(cpu, 4, vs, OJ_F32, 0, 1), dt);
    }
    oj_tensor *mask = make_mask(cpu, kind, B, H, S);
    if (mask && kind == MASK_FLOAT) mask = oj_cast(mask, dt);
    /* the same values on the GPU, in the same layout */
    oj_tensor *qg = to_gpu(q, gpu), *kg, *vg;
    if (strided) {
        kg = oj_transpose(to_gpu(oj_transpose(k, 1, 2), gpu), 1, 2);
        vg = oj_transpose(to_gpu(oj_transpose(v, 1, 2), gpu), 1, 2);
    } else {
        kg = to_gpu(k, gpu);
        vg = to_gpu(v, gpu);
    }
    oj_tensor *mg = mask ? to_gpu(mask, gpu) : NULL;
    if (mask && kind == MASK_PREFIX) { /* keep the broadcast view on the GPU too */
        int64_t ms[4] = {B, H, 1, S};
        mask = oj_expand(mask, 4, ms);
        mg = oj_expand(mg, 4, ms);
    }
    oj_tensor *oc = oj_scaled_dot_product_attention(q, k, v, mask, true, NAN);
    oj_tensor *og = oj_scaled_dot_product_attention(qg, kg, vg, mg, true, NAN);
    if (oc == NULL || og == NULL) fail_msg("%s: %s / %s", what, oj_last_error(cpu), oj_last_error(gpu));
    double tol = dt == OJ_F32 ? 2e-5 : dt == OJ_BF16 ? 1.6e-2 : 2e-3;
    assert_close(what, og, oc, tol);
    if (dt == OJ_F32 && kind != MASK_RANDOM) { /* the gradient, through the saved logsumexp */
        oj_tensor *in_c[3] = {q, k, v}, *in_g[3] = {qg, kg, vg};
        for (int i = 0; i < 3; i++) {
            in_c[i] = oj_clone(in_c[i]);
            in_g[i] = oj_clone(in_g[i]);
            oj_set_requires_grad(in_c[i], true);
            oj_set_requires_grad(in_g[i], true);
        }
        oj_tensor *gc = oj_scaled_dot_product_attention(in_c[0], in_c[1], in_c[2], mask, true, NAN);
        oj_tensor *gg = oj_scaled_dot_product_attention(in_g[0], in_g[1], in_g[2], mg, true, NAN);
        int64_t os[4] = {B, H, 1, Dv};
        oj_tensor *w = oj_rand_normal(cpu, 4, os, OJ_F32, 0, 1);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(gc, w)), false), OJ_OK);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(gg, to_gpu(w, gpu))), false), OJ_OK);
        for (int i = 0; i < 3; i++) assert_close(what, oj_grad(in_g[i]), oj_grad(in_c[i]), 1e-4);
    }
    oj_scope_end(gpu);
    oj_scope_end(cpu);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
}

static void test_attention_one_row(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_EXACT), *gpu = engine(true, OJ_NUMERICS_EXACT);
    const int64_t lengths[] = {1, 5, 31, 32, 33, 100, 1024};
    const int64_t heads[3][3] = {{1, 12, 12}, {2, 4, 2}, {1, 8, 1}}; /* B, H, Hkv */
    oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F16};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (int hi = 0; hi < 3; hi++)
            for (int kind = 0; kind < MASK_KINDS; kind++) {
                int64_t S = lengths[li], D = hi == 2 ? 128 : 64;
                attention_case(cpu, gpu, OJ_F32, heads[hi][0], heads[hi][1], heads[hi][2], S, D, D,
                               kind, (li + (size_t)kind) % 2 == 1);
            }
    for (int d = 1; d < 3; d++)
        for (int kind = 0; kind < MASK_KINDS; kind++)
            attention_case(cpu, gpu, dts[d], 2, 4, 2, 77, 64, 64, kind, kind == MASK_PREFIX);
    /* head dims: small, odd Dv, the largest */
    attention_case(cpu, gpu, OJ_F32, 1, 2, 1, 40, 16, 16, MASK_NONE, false);
    attention_case(cpu, gpu, OJ_F32, 2, 2, 2, 70, 64, 24, MASK_PREFIX, true);
    attention_case(cpu, gpu, OJ_F32, 1, 4, 2, 65, 256, 256, MASK_RANDOM, false);
    /* 1000 rows of two chunks each, merged by the combine kernel and by
     * the last block of every row (the engine's arrival counters, one a
     * row, up to row 999: the calls after find them back at zero) */
    for (int on = 0; on <= 1; on++) {
        decode_pieces(on);
        attention_case(cpu, gpu, OJ_BF16, 1, 1000, 1, 6400, 64, 64, MASK_PREFIX, false);
        attention_case(cpu, gpu, OJ_BF16, 2, 4, 2, 77, 64, 64, MASK_RANDOM, false);
        attention_case(cpu, gpu, OJ_BF16, 1, 12, 12, 576, 64, 64, MASK_PREFIX, false);
    }
    decode_pieces(-1);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* ---------------------------------------------------------------- the decoder */

typedef struct {
    int steps;
    int64_t V;
    int32_t *tok; /* [steps + 1] */
    float *lg;    /* [(steps + 1) V] */
} run;

static run run_new(int steps, int64_t V) {
    run r = {steps, V, calloc((size_t)steps + 1, sizeof(int32_t)),
             calloc((size_t)((steps + 1) * V), sizeof(float))};
    return r;
}
static void run_free(run *r) {
    free(r->tok);
    free(r->lg);
}

static void row_to(oj_tensor *logits, float *dst, int64_t V) {
    oj_engine *e = oj_tensor_engine(logits);
    oj_scope_begin(e);
    oj_tensor *row = oj_narrow(logits, 1, oj_size(logits, 1) - 1, 1);
    oj_tensor *r32 = oj_cast(row, OJ_F32);
    assert_non_null(r32);
    assert_int_equal(oj_to_host(r32, dst, (size_t)V * sizeof(float)), OJ_OK);
    oj_scope_end(e);
}

static oj_gpt *model(oj_engine *e, const char *preset) {
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset(preset, &cfg));
    if (strstr(preset, "tiny")) cfg.init_std = 0.3; /* else a tiny model repeats one token */
    oj_gpt *m = NULL;
    if (oj_gpt_create(e, &cfg, 7, &m) != OJ_OK) fail_msg("gpt_create: %s", oj_last_error(e));
    return m;
}

static void prompt_of(int32_t *p, int64_t n, int64_t V, uint32_t salt) {
    uint32_t s = 2463534242u ^ salt;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        p[i] = (int32_t)(s % (uint32_t)V);
    }
}

/* The decoder's run (prefill then r->steps steps) on engine e. */
static void decode(oj_engine *e, oj_gpt_decoder *d, const int32_t *prompt, int64_t n, run *r) {
    if (oj_gpt_decoder_prefill(d, prompt, n, &r->tok[0]) != OJ_OK)
        fail_msg("prefill: %s", oj_last_error(e));
    row_to(oj_gpt_decoder_logits(d), r->lg, r->V);
    for (int s = 1; s <= r->steps; s++) {
        if (oj_gpt_decoder_step(d, &r->tok[s]) != OJ_OK) fail_msg("step %d: %s", s, oj_last_error(e));
        row_to(oj_gpt_decoder_logits(d), r->lg + (int64_t)s * r->V, r->V);
    }
}

/* The eager cached decode (oj_gpt_forward_cached), greedy on the host. */
static void decode_eager(oj_gpt *m, int64_t cap, const int32_t *prompt, int64_t n, run *r) {
    oj_engine *e = oj_gpt_engine(m);
    oj_kv_cache *c = NULL;
    assert_int_equal(oj_kv_cache_create(m, 1, cap, &c), OJ_OK);
    const int32_t *feed = prompt;
    int64_t fn = n;
    for (int s = 0; s <= r->steps; s++) {
        oj_scope_begin(e);
        int64_t shape[2] = {1, fn};
        oj_tensor *idx = oj_from_host(e, 2, shape, OJ_I32, feed, (size_t)fn * sizeof(int32_t));
        oj_tensor *lg = oj_gpt_forward_cached(m, c, idx);
        if (lg == NULL) fail_msg("eager step %d: %s", s, oj_last_error(e));
        float *row = r->lg + (int64_t)s * r->V;
        row_to(lg, row, r->V);
        oj_scope_end(e);
        int64_t b = 0;
        for (int64_t i = 1; i < r->V; i++)
            if (row[i] > row[b]) b = i;
        r->tok[s] = (int32_t)b;
        feed = &r->tok[s];
        fn = 1;
    }
    oj_kv_cache_free(c);
}

/* Run a against the reference b: logits within tol (of the row's largest
 * magnitude) and the same tokens, until the first step where they differ
 * by a near tie of b's logits (within tie of each other); anything else
 * fails. Returns the steps compared. */
static int compare_runs(const char *what, const run *a, const run *b, double tol, double tie) {
    for (int s = 0; s <= a->steps; s++) {
        const float *x = a->lg + (int64_t)s * a->V, *y = b->lg + (int64_t)s * b->V;
        double scale = 1.0;
        for (int64_t i = 0; i < a->V; i++)
            if (fabs(y[i]) > scale) scale = fabs(y[i]);
        for (int64_t i = 0; i < a->V; i++)
            if (!(fabs((double)x[i] - y[i]) <= tol * scale))
                fail_msg("%s: step %d logit %lld: %.9g vs %.9g (tolerance %g of %g)", what, s,
                         (long long)i, x[i], y[i], tol, scale);
        if (a->tok[s] != b->tok[s]) {
            double gap = fabs((double)y[a->tok[s]] - y[b->tok[s]]);
            if (gap > tie * scale)
                fail_msg("%s: step %d token %d vs %d, logits %.9g vs %.9g: not a near tie", what, s,
                         a->tok[s], b->tok[s], y[a->tok[s]], y[b->tok[s]]);
            printf("%s: a near tie at step %d (%d vs %d, gap %.3g): compared up to it\n", what, s,
                   a->tok[s], b->tok[s], gap);
            return s;
        }
    }
    return a->steps;
}

/* graph (GPU) vs the same step eager (GPU) vs the eager cached decode (GPU)
 * vs the CPU decoder. */
static void decoder_case_w(const char *preset, int64_t cap, int64_t n, int steps, bool autocast,
                           bool wbf16) {
    char what[128];
    bool bf16 = autocast || wbf16; /* bf16 tolerances */
    oj_engine *cpu = engine(false, OJ_NUMERICS_EXACT), *gpu = engine(true, OJ_NUMERICS_EXACT);
    oj_gpt *mc = model(cpu, preset), *mg = model(gpu, preset);
    if (wbf16) { /* weights converted to bf16, no autocast */
        assert_int_equal(oj_gpt_to_dtype(mc, OJ_BF16), OJ_OK);
        assert_int_equal(oj_gpt_to_dtype(mg, OJ_BF16), OJ_OK);
    }
    int64_t V = oj_gpt_get_config(mg)->vocab_size;
    int64_t live0 = oj_engine_live_tensors(gpu);
    int32_t *prompt = malloc((size_t)n * sizeof *prompt);
    prompt_of(prompt, n, V, (uint32_t)(cap * 131 + n));
    oj_set_autocast(cpu, autocast, OJ_BF16);
    oj_set_autocast(gpu, autocast, OJ_BF16);
    run graph = run_new(steps, V), eager = run_new(steps, V), cached = run_new(steps, V),
        host = run_new(steps, V);
    oj_gpt_decoder *dg = NULL, *de = NULL, *dc = NULL;
    assert_int_equal(oj_gpt_decoder_create(mg, cap, true, &dg), OJ_OK);
    assert_int_equal(oj_gpt_decoder_create(mg, cap, false, &de), OJ_OK);
    assert_int_equal(oj_gpt_decoder_create(mc, cap, true, &dc), OJ_OK);
    decode(gpu, dg, prompt, n, &graph);
    assert_int_equal(oj_gpt_decoder_graphed(dg), !on_cpu);
    decode(gpu, de, prompt, n, &eager);
    assert_false(oj_gpt_decoder_graphed(de));
    decode(cpu, dc, prompt, n, &host);
    if (cap >= n + steps || !strstr(preset, "gpt2")) decode_eager(mg, cap, prompt, n, &cached);
    double tol = bf16 ? 2e-2 : 1e-5, tie = bf16 ? 4e-2 : 1e-5;
    snprintf(what, sizeof what, "%s cap %lld%s: graph vs eager step", preset, (long long)cap,
             bf16 ? " bf16" : "");
    compare_runs(what, &graph, &eager, 1e-6, 1e-6);
    snprintf(what, sizeof what, "%s cap %lld%s: graph vs eager cached", preset, (long long)cap,
             bf16 ? " bf16" : "");
    compare_runs(what, &graph, &cached, tol, tie);
    snprintf(what, sizeof what, "%s cap %lld%s: GPU graph vs CPU", preset, (long long)cap,
             bf16 ? " bf16" : "");
    compare_runs(what, &graph, &host, bf16 ? 4e-2 : 1e-4, bf16 ? 8e-2 : 1e-4);
    /* a second sequence on the captured graph: as a fresh decoder's */
    if (!bf16) {
        int32_t *p2 = malloc((size_t)n * sizeof *p2); /* as long, other tokens */
        prompt_of(p2, n, V, 77);
        run again = run_new(steps, V), fresh = run_new(steps, V);
        decode(gpu, dg, p2, n, &again);
        oj_gpt_decoder *df = NULL;
        assert_int_equal(oj_gpt_decoder_create(mg, cap, true, &df), OJ_OK);
        decode(gpu, df, p2, n, &fresh);
        snprintf(what, sizeof what, "%s cap %lld: second prefill", preset, (long long)cap);
        compare_runs(what, &again, &fresh, 1e-6, 1e-6);
        oj_gpt_decoder_free(df);
        run_free(&again);
        run_free(&fresh);
        free(p2);
    }
    oj_set_autocast(cpu, false, OJ_BF16);
    oj_set_autocast(gpu, false, OJ_BF16);
    oj_gpt_decoder_free(dg);
    oj_gpt_decoder_free(de);
    oj_gpt_decoder_free(dc);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(gpu), live0);
    run_free(&graph);
    run_free(&eager);
    run_free(&cached);
    run_free(&host);
    free(prompt);
    oj_gpt_free(mg);
    oj_gpt_free(mc);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}
static void decoder_case(const char *preset, int64_t cap, int64_t n, int steps, bool bf16) {
    decoder_case_w(preset, cap, n, steps, bf16, false);
}

static void test_decoder_gpt2(void **state) {
    (void)state;
    decoder_case("gpt2-tiny", 48, 7, 40, false);
    decoder_case("gpt2-tiny", 64, 1, 63, false); /* the whole context */
}

static void test_decoder_nanolab(void **state) {
    (void)state;
    decoder_case("nanolab-tiny", 48, 9, 38, false);
    decoder_case("nanolab-tiny", 12, 5, 40, false); /* a ring */
}

static void test_decoder_bf16(void **state) {
    (void)state;
    decoder_case("gpt2-tiny", 40, 6, 30, true);
    decoder_case("nanolab-tiny", 40, 6, 30, true);
}

/* weights in bf16 (oj_gpt_to_dtype): bf16 KV caches, the whole forward in
 * bf16; the graph equals the eager step, and both stay near the CPU's */
static void test_decoder_bf16_weights(void **state) {
    (void)state;
    decoder_case_w("gpt2-tiny", 40, 6, 30, false, true);
    decoder_case_w("nanolab-tiny", 40, 6, 30, false, true);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The bench's model: greedy tokens of the graph against the eager cached
 * decode, and how long each took (information, not checked). */
static void test_decoder_gpt2_124m(void **state) {
    (void)state;
    if (on_cpu) skip(); /* minutes on a CPU */
    oj_engine *gpu = engine(true, OJ_NUMERICS_EXACT);
    oj_gpt *m = model(gpu, "gpt2-124m");
    const int64_t n = 64;
    enum { STEPS = 64 };
    int32_t prompt[64];
    prompt_of(prompt, n, 50257, 3);
    run graph = run_new(STEPS, 50257), cached = run_new(STEPS, 50257);
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, n + STEPS, true, &d), OJ_OK);
    double t0 = now_s();
    decode(gpu, d, prompt, n, &graph);
    double t1 = now_s();
    decode_eager(m, n + STEPS, prompt, n, &cached);
    double t2 = now_s();
    printf("gpt2-124m, %d steps with logits read back: graph %.3f s, eager %.3f s\n", STEPS,
           t1 - t0, t2 - t1);
    compare_runs("gpt2-124m: graph vs eager cached", &graph, &cached, 1e-4, 1e-4);
    oj_gpt_decoder_free(d);
    run_free(&graph);
    run_free(&cached);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

/* ------------------------------------------------ the fused decode ops */

/* oj__decode_norm_linear / oj__decode_linear_residual_ on the device
 * against the CPU's reference entries, from the same inputs: K x N of
 * gpt2-124m's four projections (c_attn with its keys and values written to
 * a cache slot, c_fc with GELU, both c_proj with the residual add), small
 * ones, and N wide enough for the 4- and 8-group tiles; bf16 and f16. The
 * cache slot written on the device holds the device's output columns bit
 * for bit and every other slot stays zero. */
typedef struct {
    int64_t K, N;
    int kind; /* 0 norm + linear, 1 norm + linear + GELU, 2 norm + linear + KV, 3 residual */
    oj_dtype dt;
} dec_case;

static void decode_op_case(oj_engine *cpu, oj_engine *gpu, dec_case c) {
    char what[128];
    snprintf(what, sizeof what, "decode op kind %d %s K %lld N %lld", c.kind, oj_dtype_name(c.dt),
             (long long)c.K, (long long)c.N);
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    int64_t sx[3] = {1, 1, c.K}, sk[1] = {c.K}, sw[2] = {c.K, c.N}, sn[1] = {c.N};
    int64_t sr[3] = {1, 1, c.N};
    oj_tensor *x = oj_cast(oj_rand_normal(cpu, 3, sx, OJ_F32, 0.3, 1.5), c.dt);
    oj_tensor *nw = oj_cast(oj_rand_uniform(cpu, 1, sk, OJ_F32, 0.5, 1.5), c.dt);
    oj_tensor *nb = oj_cast(oj_rand_uniform(cpu, 1, sk, OJ_F32, -0.5, 0.5), c.dt);
    oj_tensor *w = oj_cast(oj_rand_normal(cpu, 2, sw, OJ_F32, 0.0, 0.05), c.dt);
    oj_tensor *b = oj_cast(oj_rand_uniform(cpu, 1, sn, OJ_F32, -0.5, 0.5), c.dt);
    assert_non_null(b);
    oj_tensor *xg = to_gpu(x, gpu), *nwg = to_gpu(nw, gpu), *nbg = to_gpu(nb, gpu);
    oj_tensor *wg = to_gpu(w, gpu), *bg = to_gpu(b, gpu);
    if (c.kind == 3) {
        oj_tensor *r = oj_cast(oj_rand_normal(cpu, 3, sr, OJ_F32, 0.0, 2.0), c.dt);
        oj_tensor *rg = to_gpu(r, gpu);
        assert_int_equal(oj__decode_linear_residual_(r, x, w, b), OJ_OK);
        if (oj__decode_linear_residual_(rg, xg, wg, bg) != OJ_OK) fail_msg("%s: %s", what, oj_last_error(gpu));
        assert_close(what, rg, r, c.dt == OJ_BF16 ? 1e-2 : 2e-3);
    } else {
        const int64_t D = 64, H = c.N / 3 / D, S = 9, slot = 4;
        oj_tensor *kv = NULL, *kvg = NULL, *st = NULL, *stg = NULL;
        if (c.kind == 2) {
            int64_t skv[5] = {2, 1, H, S, D};
            kv = oj_zeros(cpu, 5, skv, c.dt);
            kvg = oj_zeros(gpu, 5, skv, c.dt);
            st = i64s(cpu, 1, &slot);
            stg = to_gpu(st, gpu);
        }
        int act = c.kind == 1 ? OJ__DECODE_ACT_GELU : OJ__DECODE_ACT_NONE;
        oj_tensor *o = oj__decode_norm_linear(x, nw, nb, 1e-5, w, b, act, kv, st);
        oj_tensor *og = oj__decode_norm_linear(xg, nwg, nbg, 1e-5, wg, bg, act, kvg, stg);
        if (o == NULL || og == NULL) fail_msg("%s: %s / %s", what, oj_last_error(cpu), oj_last_error(gpu));
        assert_close(what, og, o, c.dt == OJ_BF16 ? 1e-2 : 2e-3);
        if (kv) {
            assert_close("kv cache", kvg, kv, c.dt == OJ_BF16 ? 1e-2 : 2e-3);
            double *k = host_f64(kvg), *oh = host_f64(og);
            const int64_t C = H * D;
            for (int64_t wh = 0; wh < 2; wh++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t sl = 0; sl < S; sl++)
                        for (int64_t d = 0; d < D; d++) {
                            double v = k[((wh * H + h) * S + sl) * D + d];
                            double want = sl == slot ? oh[C + wh * C + h * D + d] : 0.0;
                            if (v != want) fail_msg("%s: kv[%lld, 0, %lld, %lld, %lld] = %g, want %g", what,
                                                    (long long)wh, (long long)h, (long long)sl, (long long)d, v, want);
                        }
            free(k);
            free(oh);
        }
    }
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_scope_end(gpu);
    oj_scope_end(cpu);
}

static void test_decode_ops(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_FAST), *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_set_grad_enabled(cpu, false);
    oj_set_grad_enabled(gpu, false);
    const dec_case cases[] = {
        {768, 2304, 2, OJ_BF16}, /* gpt2-124m c_attn, keys and values to the cache */
        {768, 3072, 1, OJ_BF16}, /* c_fc + GELU */
        {768, 768, 3, OJ_BF16},  /* attn c_proj + residual */
        {3072, 768, 3, OJ_BF16}, /* mlp c_proj + residual: 16 rows a thread */
        {64, 192, 2, OJ_F16},    /* gpt2-tiny's */
        {64, 256, 1, OJ_F16},
        {256, 64, 3, OJ_F16},
        {64, 8192, 0, OJ_BF16},  /* 4 column groups a block */
        {40, 16384, 0, OJ_BF16}, /* 8 column groups a block; K not a multiple of the slices */
        {8192, 64, 3, OJ_BF16},  /* the longest row */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) decode_op_case(cpu, gpu, cases[i]);
    /* the MLP's c_proj with all 24 rows a thread loaded before the wait */
    decode_pieces(1);
    decode_op_case(cpu, gpu, cases[3]);
    decode_pieces(-1);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* oj__decode_norm_head on the device: the bits of layer_norm then linear
 * (the "nk" matmul kernel) on the same engine, the token their argmax (the
 * lowest index on ties, the first NaN where a row of the weight is NaN)
 * and pos + 1, near the CPU's entry; gpt2-124m's head (K 768, V 50257),
 * K past one round of chunks (1536) and two rounds (2304), f16, a short
 * head; repeated calls find the arrival counter back at zero. */
static void norm_head_case(oj_engine *cpu, oj_engine *gpu, int64_t K, int64_t N, oj_dtype dt,
                           int64_t nan_row) {
    char what[128];
    snprintf(what, sizeof what, "decode_norm_head %s K %lld N %lld nan row %lld", oj_dtype_name(dt),
             (long long)K, (long long)N, (long long)nan_row);
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    int64_t sx[3] = {1, 1, K}, sk[1] = {K}, sw[2] = {N, K}, p0 = 17;
    oj_tensor *x = oj_cast(oj_rand_normal(cpu, 3, sx, OJ_F32, 0.3, 1.5), dt);
    oj_tensor *nw = oj_cast(oj_rand_uniform(cpu, 1, sk, OJ_F32, 0.5, 1.5), dt);
    oj_tensor *nb = oj_cast(oj_rand_uniform(cpu, 1, sk, OJ_F32, -0.5, 0.5), dt);
    oj_tensor *w32 = oj_rand_normal(cpu, 2, sw, OJ_F32, 0.0, 0.05);
    if (nan_row >= 0) {
        oj_tensor *row = oj_narrow(w32, 0, nan_row, 1);
        assert_int_equal(oj_fill_(row, NAN), OJ_OK);
        row = oj_narrow(w32, 0, nan_row + 3, 1); /* a later NaN: the first one wins */
        assert_int_equal(oj_fill_(row, NAN), OJ_OK);
    }
    oj_tensor *w = oj_cast(w32, dt);
    oj_tensor *xg = to_gpu(x, gpu), *nwg = to_gpu(nw, gpu), *nbg = to_gpu(nb, gpu);
    oj_tensor *wg = to_gpu(w, gpu);
    oj_tensor *tok = i64s(cpu, 1, &p0), *pos = i64s(cpu, 1, &p0);
    oj_tensor *tokg = to_gpu(tok, gpu), *posg = to_gpu(pos, gpu);
    oj_tensor *ref = oj_linear(oj_layer_norm(xg, nwg, nbg, 1e-5), wg, NULL);
    oj_tensor *lc = oj__decode_norm_head(x, nw, nb, 1e-5, w, tok, pos, NULL);
    int64_t shist[1] = {p0 + 3}; /* the third call's token lands past it */
    oj_tensor *hg = oj_zeros(gpu, 1, shist, OJ_I64);
    if (ref == NULL || lc == NULL) fail_msg("%s: %s / %s", what, oj_last_error(gpu), oj_last_error(cpu));
    for (int rep = 0; rep < 3; rep++) {
        oj_tensor *lg = oj__decode_norm_head(xg, nwg, nbg, 1e-5, wg, tokg, posg, hg);
        if (lg == NULL) fail_msg("%s: %s", what, oj_last_error(gpu));
        double *a = host_f64(lg), *b = host_f64(ref);
        int64_t best = 0;
        for (int64_t i = 0; i < N; i++) {
            if (!on_cpu && memcmp(&a[i], &b[i], sizeof a[i]) != 0 && !(isnan(a[i]) && isnan(b[i])))
                fail_msg("%s: logit %lld is %.9g, layer_norm + linear give %.9g", what, (long long)i,
                         a[i], b[i]);
            if (isnan(a[best])) continue;
            if (isnan(a[i]) || a[i] > a[best]) best = i;
        }
        int64_t t = -1, p = 0;
        assert_int_equal(oj_to_host(tokg, &t, sizeof t), OJ_OK);
        assert_int_equal(oj_to_host(posg, &p, sizeof p), OJ_OK);
        if (t != best) fail_msg("%s (call %d): token %lld, the argmax %lld", what, rep, (long long)t, (long long)best);
        if (nan_row >= 0) assert_int_equal(t, nan_row);
        assert_int_equal(p, p0 + 1 + rep);
        int64_t hv[32];
        assert_int_equal(oj_to_host(hg, hv, (size_t)shist[0] * sizeof *hv), OJ_OK);
        if (p < shist[0]) assert_int_equal(hv[p], t); /* kept at its position */
        assert_int_equal(hv[p0], 0);
        assert_close(what, lg, lc, dt == OJ_BF16 ? 1e-2 : 2e-3);
        free(a);
        free(b);
    }
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_scope_end(gpu);
    oj_scope_end(cpu);
}

/* oj__decode_norm_head_sample on the device: the logits of
 * oj__decode_norm_head and the token, step, pos and kept token of
 * oj__decode_sample_keep_ run on them (its own kernel), for draws that run
 * in the head's last block (top_k 40 and 100 over gpt2's head, greedy at
 * temperature 0, top_p) and ones that fall back to the draw's kernel
 * (top_k 300: more groups than fit; a short head); a NaN row gives -1. */
static void head_sample_case(oj_engine *gpu, int64_t K, int64_t N, const oj__decode_sampler *sm,
                             int64_t nan_row) {
    char what[160];
    snprintf(what, sizeof what, "decode_norm_head_sample K %lld N %lld T %g top_k %lld top_p %g nan %lld",
             (long long)K, (long long)N, sm->temperature, (long long)sm->top_k, sm->top_p,
             (long long)nan_row);
    oj_scope_begin(gpu);
    int64_t sx[3] = {1, 1, K}, sk[1] = {K}, sw[2] = {N, K}, zero = 0, p0 = 5, sh[1] = {16};
    oj_tensor *x = oj_cast(oj_rand_normal(gpu, 3, sx, OJ_F32, 0.3, 1.5), OJ_BF16);
    oj_tensor *nw = oj_cast(oj_rand_uniform(gpu, 1, sk, OJ_F32, 0.5, 1.5), OJ_BF16);
    oj_tensor *nb = oj_cast(oj_rand_uniform(gpu, 1, sk, OJ_F32, -0.5, 0.5), OJ_BF16);
    oj_tensor *w32 = oj_rand_normal(gpu, 2, sw, OJ_F32, 0.0, 0.1);
    if (nan_row >= 0) assert_int_equal(oj_fill_(oj_narrow(w32, 0, nan_row, 1), NAN), OJ_OK);
    oj_tensor *w = oj_cast(w32, OJ_BF16);
    oj_tensor *ta = i64s(gpu, 1, &zero), *pa = i64s(gpu, 1, &p0), *sa = i64s(gpu, 1, &zero);
    oj_tensor *tb = i64s(gpu, 1, &zero), *pb = i64s(gpu, 1, &p0), *sb = i64s(gpu, 1, &zero);
    oj_tensor *ha = oj_zeros(gpu, 1, sh, OJ_I64), *hb = oj_zeros(gpu, 1, sh, OJ_I64);
    for (int rep = 0; rep < 6; rep++) { /* steps 0..5: six draws */
        oj_tensor *la = oj__decode_norm_head_sample(x, nw, nb, 1e-5, w, ta, pa, sa, ha, sm);
        oj_tensor *lb = oj__decode_norm_head(x, nw, nb, 1e-5, w, NULL, NULL, NULL);
        if (la == NULL || lb == NULL) fail_msg("%s: %s", what, oj_last_error(gpu));
        assert_int_equal(oj__decode_sample_keep_(tb, lb, pb, NULL, sb, hb, sm), OJ_OK);
        double *a = host_f64(la), *b = host_f64(lb);
        for (int64_t i = 0; i < N; i++)
            if (memcmp(&a[i], &b[i], sizeof a[i]) != 0 && !(isnan(a[i]) && isnan(b[i])))
                fail_msg("%s: logit %lld %.9g vs %.9g", what, (long long)i, a[i], b[i]);
        free(a);
        free(b);
        int64_t va[3], vb[3], hva[16], hvb[16];
        oj_tensor *ga[3] = {ta, pa, sa}, *gb[3] = {tb, pb, sb};
        for (int i = 0; i < 3; i++) {
            assert_int_equal(oj_to_host(ga[i], &va[i], 8), OJ_OK);
            assert_int_equal(oj_to_host(gb[i], &vb[i], 8), OJ_OK);
        }
        if (va[0] != vb[0]) fail_msg("%s (draw %d): token %lld, decode_sample's %lld", what, rep, (long long)va[0], (long long)vb[0]);
        assert_int_equal(va[1], vb[1]);
        assert_int_equal(va[1], p0 + 1 + rep);
        assert_int_equal(va[2], rep + 1);
        if (nan_row >= 0) assert_int_equal(va[0], -1);
        else assert_true(va[0] >= 0 && va[0] < N);
        assert_int_equal(oj_to_host(ha, hva, sizeof hva), OJ_OK);
        assert_int_equal(oj_to_host(hb, hvb, sizeof hvb), OJ_OK);
        assert_memory_equal(hva, hvb, sizeof hva);
    }
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_scope_end(gpu);
}

static void test_decode_norm_head_sample(void **state) {
    (void)state;
    oj_engine *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_set_grad_enabled(gpu, false);
    const oj__decode_sampler cases[] = {
        {0.8, 40, 1.0, 1.0, 1337, 0},   /* ojas generate's defaults */
        {1.5, 100, 0.9, 1.0, 7, 3},     /* 256 groups, a nucleus */
        {0.0, 40, 1.0, 1.0, 1, 0},      /* greedy through the draw */
        {0.7, 300, 1.0, 1.0, 99, 1},    /* more groups than fit: decode_sample's kernel */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        head_sample_case(gpu, 768, 50257, &cases[i], -1);
    head_sample_case(gpu, 768, 50257, &cases[0], 12345); /* a NaN logit: -1 */
    head_sample_case(gpu, 64, 512, &cases[0], -1);       /* a short head: the draw's kernel */
    head_sample_case(gpu, 1536, 4000, &cases[1], -1);    /* K > 1024: the draw's kernel */
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

/* oj__decode_attention (the fast step's attention: the cache rows other
 * than the slot's loaded before the wait on the kernel before) against
 * scaled_dot_product_attention over the same cache views, bit for bit:
 * gpt2-124m's shape at several positions (the slot's row rewritten just
 * before each call, as the step's projection writes it), D 128, f16. On a
 * CPU engine the entry is missing: OJ_ERR_UNSUPPORTED. */
static void decode_attention_case(oj_engine *gpu, int64_t H, int64_t S, int64_t D, oj_dtype dt) {
    oj_scope_begin(gpu);
    const int64_t C = H * D;
    int64_t skv[5] = {2, 1, H, S, D}, sq[3] = {1, 1, 3 * C}, sm[4] = {1, 1, 1, S};
    int64_t srow[5] = {2, 1, H, 1, D};
    oj_tensor *kv = oj_cast(oj_rand_normal(gpu, 5, skv, OJ_F32, 0.0, 1.0), dt);
    oj_tensor *qkv = oj_cast(oj_rand_normal(gpu, 3, sq, OJ_F32, 0.0, 1.0), dt);
    oj_tensor *slots = oj_arange(gpu, 0.0, (double)S, 1.0, OJ_I64);
    const int64_t positions[] = {0, 63, 64, S / 2, S - 1};
    for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++) {
        const int64_t p = positions[pi];
        oj_tensor *slot = i64s(gpu, 1, &p);
        oj_tensor *mask = oj_reshape(oj_le(slots, slot), 4, sm);
        /* this step's key and value, written just before the attention */
        oj_tensor *row = oj_narrow(kv, 3, p, 1);
        assert_int_equal(oj_copy_(row, oj_cast(oj_rand_normal(gpu, 5, srow, OJ_F32, 0.0, 1.0), dt)), OJ_OK);
        oj_tensor *y = oj__decode_attention(qkv, kv, mask, slot);
        if (on_cpu) {
            assert_null(y);
            assert_int_equal(oj_last_status(gpu), OJ_ERR_UNSUPPORTED);
            oj_clear_error(gpu);
            break;
        }
        if (y == NULL) fail_msg("decode_attention: %s", oj_last_error(gpu));
        oj_tensor *q = oj__gpt_split_heads(oj_narrow(qkv, 2, 0, C), H, D);
        oj_tensor *k = oj_squeeze(oj_narrow(kv, 0, 0, 1), 0), *v = oj_squeeze(oj_narrow(kv, 0, 1, 1), 0);
        oj_tensor *ref = oj__gpt_merge_heads(oj_scaled_dot_product_attention(q, k, v, mask, false, NAN));
        assert_non_null(ref);
        assert_int_equal(oj_numel(y), C);
        double *a = host_f64(y), *b = host_f64(ref);
        for (int64_t i = 0; i < C; i++)
            if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
                fail_msg("decode_attention %s H %lld S %lld D %lld pos %lld: y[%lld] %.9g, "
                         "scaled_dot_product_attention %.9g", oj_dtype_name(dt), (long long)H,
                         (long long)S, (long long)D, (long long)p, (long long)i, a[i], b[i]);
        free(a);
        free(b);
    }
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_scope_end(gpu);
}

static void test_decode_attention(void **state) {
    (void)state;
    oj_engine *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_set_grad_enabled(gpu, false);
    decode_attention_case(gpu, 12, 576, 64, OJ_BF16); /* gpt2-124m at 64 + 512 positions */
    decode_attention_case(gpu, 4, 200, 128, OJ_BF16);
    decode_attention_case(gpu, 12, 1024, 64, OJ_F16);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

static void test_decode_norm_head(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_FAST), *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_set_grad_enabled(cpu, false);
    oj_set_grad_enabled(gpu, false);
    norm_head_case(cpu, gpu, 768, 50257, OJ_BF16, -1); /* gpt2-124m's head */
    norm_head_case(cpu, gpu, 768, 50257, OJ_BF16, 31000);
    norm_head_case(cpu, gpu, 1536, 1001, OJ_BF16, -1); /* one round of 8 chunks a lane */
    norm_head_case(cpu, gpu, 2304, 999, OJ_F16, -1);   /* two rounds */
    norm_head_case(cpu, gpu, 64, 24, OJ_F16, 5);       /* fewer outputs than a block's warps */
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* argmax + pos += 1 on the device against the CPU: V 50257 (gpt2's) and
 * short rows, values drawn from a few levels (ties everywhere), a NaN
 * late in the row, f32/bf16/f16 */
static void test_decode_argmax_advance(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_FAST), *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    const int64_t Vs[3] = {50257, 1000, 7};
    const oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F16};
    int64_t s1[1] = {1}, p0 = 5;
    oj_tensor *tc = oj_zeros(cpu, 1, s1, OJ_I64), *tg = oj_zeros(gpu, 1, s1, OJ_I64);
    oj_tensor *pc = i64s(cpu, 1, &p0), *pg = i64s(gpu, 1, &p0);
    for (int vi = 0; vi < 3; vi++)
        for (int d = 0; d < 3; d++)
            for (int nan = 0; nan < 2; nan++) {
                int64_t V = Vs[vi];
                double *v = malloc((size_t)V * sizeof *v);
                uint32_t x = 99u + (uint32_t)(vi * 7 + d * 3 + nan);
                for (int64_t i = 0; i < V; i++) {
                    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                    v[i] = (double)(x % 13) - 6.0; /* 13 levels: the top one tied many times */
                }
                if (nan) v[V - 1 - V / 3] = NAN;
                int64_t sv[1] = {V};
                oj_tensor *lh = oj_from_host(cpu, 1, sv, OJ_F64, v, (size_t)V * sizeof *v);
                oj_tensor *lc = oj_cast(lh, dts[d]), *lg = to_gpu(lc, gpu);
                assert_int_equal(oj__decode_argmax_advance_(tc, lc, pc), OJ_OK);
                if (oj__decode_argmax_advance_(tg, lg, pg) != OJ_OK) fail_msg("%s", oj_last_error(gpu));
                int64_t a = -1, b = -2;
                assert_int_equal(oj_to_host(tc, &a, sizeof a), OJ_OK);
                assert_int_equal(oj_to_host(tg, &b, sizeof b), OJ_OK);
                if (a != b)
                    fail_msg("argmax V %lld %s nan %d: device %lld, CPU %lld", (long long)V,
                             oj_dtype_name(dts[d]), nan, (long long)b, (long long)a);
                free(v);
            }
    int64_t pa = 0, pb = 0;
    assert_int_equal(oj_to_host(pc, &pa, sizeof pa), OJ_OK);
    assert_int_equal(oj_to_host(pg, &pb, sizeof pb), OJ_OK);
    assert_int_equal(pa, 5 + 18);
    assert_int_equal(pb, 5 + 18);
    oj_scope_end(gpu);
    oj_scope_end(cpu);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* Logits of a decode_sample case: kind 0 continuous (|x| up to ~12, like
 * a trained head's spread), 1 thirteen levels (the top one tied thousands
 * of times at V 50257: the exact threshold path), 2 ten finite values and
 * -inf elsewhere (top_k above the finite count), 3 all -inf. */
static void sample_logits(double *v, int64_t V, int kind, uint32_t salt) {
    uint32_t x = 2463534242u ^ salt;
    for (int64_t i = 0; i < V; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        const double u = (double)(x >> 8) / 16777216.0;
        v[i] = kind == 0 ? 12.0 * (u - 0.5) * (u + 0.25) : kind == 1 ? (double)(x % 13) - 6.0
                                                                      : -INFINITY;
        if (kind == 2 && i % (V / 10 > 0 ? V / 10 : 1) == 0) v[i] = 4.0 * u - 2.0;
    }
}

/* decode_sample on the device against the host sampler (oj_sample_logits)
 * on the same logits, bit for bit in the token: V 50257 (gpt2's), 1000, 7;
 * f32/bf16/f16; continuous, tie-heavy, mostly -inf and all -inf rows;
 * temperatures 0 .. 1.7, top_k 1 .. 1024 and beyond V (then top_k 0 where
 * V <= 1024), top_p off / 0.9 / 0.3, repetition penalties 1, 1.3 and 0.7 on
 * a random seen set; several seeds, sequences and steps (the uniform from
 * the step counter on the device). Also: seen[tok] set, step and pos
 * advanced, a NaN row gives -1, more than OJ__DECODE_SAMPLE_MAX_K
 * candidates refused. */
static void test_decode_sample(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_FAST), *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    const int64_t Vs[3] = {50257, 1000, 7};
    const oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F16};
    const double temps[4] = {0.0, 0.5, 0.8, 1.7};
    const int64_t topks[5] = {1, 5, 40, 1024, 0};
    const double topps[3] = {1.0, 0.9, 0.3};
    const double pens[3] = {1.0, 1.3, 0.7};
    int64_t s1[1] = {1}, zero = 0, p0 = 9;
    oj_tensor *tok = oj_zeros(gpu, 1, s1, OJ_I64), *stp = i64s(gpu, 1, &zero);
    oj_tensor *pos = i64s(gpu, 1, &p0);
    int64_t calls = 0, checked = 0, steps = 0;
    for (int vi = 0; vi < 3; vi++)
        for (int d = 0; d < 3; d++)
            for (int kind = 0; kind < 4; kind++) {
                const int64_t V = Vs[vi];
                double *v = malloc((size_t)V * sizeof *v);
                float *lf = malloc((size_t)V * sizeof *lf);
                uint8_t *seen = malloc((size_t)V);
                int32_t *hist = malloc((size_t)V * sizeof *hist);
                sample_logits(v, V, kind, 17u + (uint32_t)(vi * 31 + d * 7 + kind));
                int64_t sv[1] = {V};
                oj_tensor *lh = oj_from_host(cpu, 1, sv, OJ_F64, v, (size_t)V * sizeof *v);
                oj_tensor *lc = oj_cast(lh, dts[d]), *l32 = oj_cast(lc, OJ_F32);
                assert_int_equal(oj_to_host(l32, lf, (size_t)V * sizeof *lf), OJ_OK);
                oj_tensor *lg = to_gpu(lc, gpu);
                oj_tensor *sg = oj_zeros(gpu, 1, sv, OJ_U8);
                assert_non_null(sg);
                for (int ti = 0; ti < 4; ti++)
                    for (int ki = 0; ki < 5; ki++)
                        for (int pi = 0; pi < 3; pi++)
                            for (int ri = 0; ri < 3; ri++) {
                                /* fewer combinations on the long rows */
                                if (V == 50257 && (pi + ri + ki + ti) % 3 != 0) continue;
                                oj__decode_sampler sm = {temps[ti], topks[ki] ? topks[ki] : 0,
                                                         topps[pi], pens[ri],
                                                         1337u + (uint64_t)(ti * 5 + ki), ki % 3};
                                if (ki == 3 && V < 1024) sm.top_k = V + 5; /* beyond V */
                                const bool ok = oj__decode_sample_ok(gpu, &sm, V);
                                if (!ok) continue; /* checked below */
                                /* a random seen set (about a tenth of the ids) */
                                int64_t n = 0;
                                uint32_t x = 77u + (uint32_t)(calls * 13);
                                for (int64_t i = 0; i < V; i++) {
                                    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                                    seen[i] = x % 10 == 0;
                                    if (seen[i]) hist[n++] = (int32_t)i;
                                }
                                assert_int_equal(oj_copy_from_host(sg, seen, (size_t)V), OJ_OK);
                                const int64_t step0 = (int64_t)(calls % 7) * 1000003;
                                assert_int_equal(oj_copy_from_host(stp, &step0, sizeof step0), OJ_OK);
                                oj_sampler_config c = oj_sampler_config_default();
                                c.temperature = sm.temperature;
                                c.top_k = sm.top_k;
                                c.top_p = sm.top_p;
                                c.repetition_penalty = sm.repetition_penalty;
                                const int32_t want = oj_sample_logits(
                                    lf, V, &c, hist, n, oj_sample_uniform(sm.seed, sm.seq, step0));
                                oj_tensor *pp = calls % 2 ? pos : NULL;
                                if (oj__decode_sample_(tok, lg, pp, sm.repetition_penalty != 1.0 ? sg : NULL,
                                                       stp, &sm) != OJ_OK)
                                    fail_msg("decode_sample: %s", oj_last_error(gpu));
                                calls++;
                                steps += pp != NULL;
                                int64_t got = -2, st1 = -1;
                                assert_int_equal(oj_to_host(tok, &got, sizeof got), OJ_OK);
                                assert_int_equal(oj_to_host(stp, &st1, sizeof st1), OJ_OK);
                                if (got != want)
                                    fail_msg("decode_sample V %lld %s kind %d T %g top_k %lld "
                                             "top_p %g penalty %g seed %llu step %lld: device "
                                             "%lld, host %d",
                                             (long long)V, oj_dtype_name(dts[d]), kind,
                                             sm.temperature, (long long)sm.top_k, sm.top_p,
                                             sm.repetition_penalty, (unsigned long long)sm.seed,
                                             (long long)step0, (long long)got, want);
                                assert_int_equal(st1, step0 + 1);
                                if (sm.repetition_penalty != 1.0 && got >= 0) {
                                    uint8_t f = 0;
                                    oj_tensor *one = oj_narrow(sg, 0, got, 1);
                                    assert_int_equal(oj_to_host(one, &f, 1), OJ_OK);
                                    oj_release(one);
                                    assert_int_equal(f, 1);
                                }
                                checked++;
                            }
                /* a NaN anywhere: -1, as the host sampler */
                v[V / 2] = NAN;
                oj_tensor *nh = oj_from_host(cpu, 1, sv, OJ_F64, v, (size_t)V * sizeof *v);
                oj_tensor *nc = oj_cast(nh, dts[d]), *ng = to_gpu(nc, gpu);
                oj__decode_sampler sm = {0.8, 40, 1.0, 1.0, 1, 0};
                assert_int_equal(oj__decode_sample_(tok, ng, NULL, NULL, stp, &sm), OJ_OK);
                int64_t got = 0;
                assert_int_equal(oj_to_host(tok, &got, sizeof got), OJ_OK);
                assert_int_equal(got, -1);
                oj_tensor *tmp[] = {lh, lc, l32, lg, sg, nh, nc, ng};
                for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
                free(v);
                free(lf);
                free(seen);
                free(hist);
            }
    printf("decode_sample: %lld cases equal to the host sampler\n", (long long)checked);
    assert_true(checked > 1000);
    int64_t pv = 0;
    assert_int_equal(oj_to_host(pos, &pv, sizeof pv), OJ_OK);
    assert_int_equal(pv, 9 + steps);
    /* top_k 0 over gpt2's vocabulary: more candidates than the device takes */
    int64_t sv[1] = {50257};
    oj_tensor *big = oj_zeros(gpu, 1, sv, OJ_F32);
    oj__decode_sampler sm = {0.8, 0, 1.0, 1.0, 1, 0};
    assert_false(oj__decode_sample_ok(gpu, &sm, 50257));
    assert_int_equal(oj__decode_sample_(tok, big, NULL, NULL, stp, &sm), OJ_ERR_UNSUPPORTED);
    oj_clear_error(gpu);
    oj_scope_end(gpu);
    oj_scope_end(cpu);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* embeddings + mask on the device: the CPU's bits (gpt2-124m's shapes) */
static void test_decode_embed_mask(void **state) {
    (void)state;
    oj_engine *cpu = engine(false, OJ_NUMERICS_FAST), *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    const oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F16};
    for (int d = 0; d < 3; d++) {
        int64_t sv[2] = {50257, 768}, sp[2] = {1024, 768}, sm[4] = {1, 1, 1, 576};
        oj_tensor *wte = oj_cast(oj_rand_normal(cpu, 2, sv, OJ_F32, 0, 0.1), dts[d]);
        oj_tensor *wpe = oj_cast(oj_rand_normal(cpu, 2, sp, OJ_F32, 0, 0.1), dts[d]);
        oj_tensor *wteg = to_gpu(wte, gpu), *wpeg = to_gpu(wpe, gpu);
        const int64_t toks[3] = {50256, 0, 50257 /* out of range: NaN */}, poss[3] = {575, 0, 3};
        for (int k = 0; k < 3; k++) {
            oj_tensor *tc = i64s(cpu, 1, &toks[k]), *pc = i64s(cpu, 1, &poss[k]);
            oj_tensor *tg = to_gpu(tc, gpu), *pg = to_gpu(pc, gpu);
            oj_tensor *mc = oj_empty(cpu, 4, sm, OJ_BOOL), *mg = oj_empty(gpu, 4, sm, OJ_BOOL);
            oj_tensor *xc = oj__decode_embed_mask(wte, wpe, tc, pc, mc);
            oj_tensor *xg = oj__decode_embed_mask(wteg, wpeg, tg, pg, mg);
            if (xc == NULL || xg == NULL) fail_msg("embed_mask: %s / %s", oj_last_error(cpu), oj_last_error(gpu));
            assert_close("decode_embed_mask x", xg, xc, 0.0);
            assert_close("decode_embed_mask mask", mg, mc, 0.0);
        }
    }
    oj_scope_end(gpu);
    oj_scope_end(cpu);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* ------------------------------------------------ the gpt2 fast decode step */

/* The decoder's run with OJAS_DECODE_FAST set to `fast` ("1" also forces
 * it on the CPU stand-in) while it captures and runs. */
static void decode_env(oj_engine *e, oj_gpt_decoder *d, const int32_t *prompt, int64_t n, run *r,
                       const char *fast) {
    setenv("OJAS_DECODE_FAST", fast, 1);
    decode(e, d, prompt, n, r);
    unsetenv("OJAS_DECODE_FAST");
}

/* gpt2 in bf16 weights under FAST numerics: the fast step replayed from a
 * graph gives the tokens of the same step run eagerly (bit for bit), the
 * generic step's logits bit for bit on the device where
 * oj__gpt_fast_decode_exact (gpt2-tiny, gpt2-124m), else within bf16
 * rounding, and within bf16 rounding the logits and (up to a near tie)
 * the tokens of the CPU's generic decoder. */
static void fast_case(const char *preset, int64_t cap, int64_t n, int steps) {
    char what[128];
    oj_engine *cpu = engine(false, OJ_NUMERICS_FAST), *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_gpt *mc = model(cpu, preset), *mg = model(gpu, preset);
    assert_int_equal(oj_gpt_to_dtype(mc, OJ_BF16), OJ_OK);
    assert_int_equal(oj_gpt_to_dtype(mg, OJ_BF16), OJ_OK);
    int64_t V = oj_gpt_get_config(mg)->vocab_size;
    int64_t live0 = oj_engine_live_tensors(gpu);
    int32_t *prompt = malloc((size_t)n * sizeof *prompt);
    prompt_of(prompt, n, V, (uint32_t)(cap * 7 + n));
    run fast = run_new(steps, V), fast_eager = run_new(steps, V), generic = run_new(steps, V),
        host = run_new(steps, V);
    oj_gpt_decoder *df = NULL, *de = NULL, *dgen = NULL, *dc = NULL;
    assert_int_equal(oj_gpt_decoder_create(mg, cap, true, &df), OJ_OK);
    assert_int_equal(oj_gpt_decoder_create(mg, cap, false, &de), OJ_OK);
    assert_int_equal(oj_gpt_decoder_create(mg, cap, true, &dgen), OJ_OK);
    assert_int_equal(oj_gpt_decoder_create(mc, cap, true, &dc), OJ_OK);
    double t0 = now_s();
    decode_env(gpu, df, prompt, n, &fast, on_cpu ? "1" : "");
    double t1 = now_s();
    decode_env(gpu, de, prompt, n, &fast_eager, on_cpu ? "1" : "");
    decode_env(gpu, dgen, prompt, n, &generic, "0");
    double t2 = now_s();
    decode_env(cpu, dc, prompt, n, &host, "0");
    printf("%s bf16: fast graph %.3f s, generic graph %.3f s for %d steps with logits read back\n",
           preset, t1 - t0, t2 - t1 - (t1 - t0), steps);
    assert_int_equal(oj_gpt_decoder_graphed(df), !on_cpu);
    snprintf(what, sizeof what, "%s fast: graph vs eager step", preset);
    compare_runs(what, &fast, &fast_eager, 1e-6, 1e-6);
    /* on the device the fast step's norms and products sum in the generic
     * kernels' order (oj__gpt_fast_decode_exact): the same bits */
    const bool exact = !on_cpu && oj__gpt_fast_decode_exact(mg);
    if (!on_cpu && strcmp(preset, "gpt2-124m") == 0) assert_true(exact);
    snprintf(what, sizeof what, "%s fast vs generic graph%s", preset, exact ? " (bit for bit)" : "");
    compare_runs(what, &fast, &generic, exact ? 0.0 : 3e-2, exact ? 0.0 : 6e-2);
    snprintf(what, sizeof what, "%s fast graph vs CPU", preset);
    compare_runs(what, &fast, &host, 4e-2, 8e-2);
    oj_gpt_decoder_free(df);
    oj_gpt_decoder_free(de);
    oj_gpt_decoder_free(dgen);
    oj_gpt_decoder_free(dc);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(gpu), live0);
    run_free(&fast);
    run_free(&fast_eager);
    run_free(&generic);
    run_free(&host);
    free(prompt);
    oj_gpt_free(mg);
    oj_gpt_free(mc);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

static void test_fast_decoder_gpt2(void **state) {
    (void)state;
    for (int on = 0; on <= 1; on++) { /* the optional pieces off, then on */
        decode_pieces(on);
        fast_case("gpt2-tiny", 48, 7, 40);
        fast_case("gpt2-tiny", 64, 1, 63); /* the whole context */
    }
    decode_pieces(-1);
}

static void test_fast_decoder_gpt2_124m(void **state) {
    (void)state;
    if (on_cpu) skip(); /* minutes on a CPU */
    for (int on = 0; on <= 1; on++) {
        decode_pieces(on);
        fast_case("gpt2-124m", 96, 64, 32);
    }
    decode_pieces(-1);
}

/* ------------------------------------------------- oj_generate on the device */

static oj_gpt *llama_tiny(oj_engine *e) {
    oj_gpt_config cfg = {.family = OJ_LLAMA, .vocab_size = 512, .block_size = 96, .n_layer = 2,
                         .n_head = 4, .n_kv_head = 2, .n_embd = 64, .mlp_hidden = 128,
                         .norm_eps = 1e-6, .rope_theta = 10000.0, .init_std = 0.3,
                         .untied_head = true};
    oj_gpt *m = NULL;
    if (oj_gpt_create(e, &cfg, 7, &m) != OJ_OK) fail_msg("llama: %s", oj_last_error(e));
    return m;
}

/* oj_generate on m with OJAS_GENERATE_STATIC unset (the device default:
 * the static decoder, its step a graph replay; "1" on the CPU stand-in)
 * or "0" (the eager loop). */
static int64_t gen_run(oj_gpt *m, const int32_t *prompt, int64_t n, const oj_sampler_config *sc,
                       bool eager, int32_t *out) {
    const int32_t *pp = prompt;
    int64_t plen = n, len = 0;
    int32_t *g = NULL;
    if (eager) setenv("OJAS_GENERATE_STATIC", "0", 1);
    else if (on_cpu) setenv("OJAS_GENERATE_STATIC", "1", 1); /* the static decoder, unreplayed */
    oj_status st = oj_generate(m, 1, &pp, &plen, sc, &g, &len, NULL, NULL);
    unsetenv("OJAS_GENERATE_STATIC");
    if (st != OJ_OK) fail_msg("generate%s: %s", eager ? " (eager)" : "", oj_last_error(oj_gpt_engine(m)));
    memcpy(out, g, (size_t)len * sizeof *out);
    free(g);
    return len;
}

/* The number of leading tokens a and b share. */
static int64_t common_prefix(const int32_t *a, int64_t la, const int32_t *b, int64_t lb) {
    int64_t i = 0;
    while (i < la && i < lb && a[i] == b[i]) i++;
    return i;
}

/* `ojas generate --device cuda`'s path (oj_generate through the graph
 * decoder) gives the eager loop's tokens on the GPU: greedy, sampled
 * (temperature 0.8, top-k 40, top-p 0.95, a fixed seed), greedy with a
 * repetition penalty (logits read back); gpt2-tiny, nanolab-tiny past its
 * window (the ring), a Llama config; f32 (exact) and bf16 weights. */
static void test_generate_graph_same_as_eager(void **state) {
    (void)state;
    oj_engine *gpu = engine(true, OJ_NUMERICS_EXACT);
    const char *names[] = {"gpt2-tiny", "nanolab-tiny", "llama-tiny"};
    enum { NEW = 90 };
    int32_t a[NEW], b[NEW];
    for (int k = 0; k < 3; k++) {
        oj_gpt *m = k < 2 ? model(gpu, names[k]) : llama_tiny(gpu);
        for (int wbf16 = 0; wbf16 < 2; wbf16++) {
            if (wbf16) assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
            int32_t prompt[7];
            prompt_of(prompt, 7, 512, 5u + (uint32_t)k);
            for (int mode = 0; mode < 3; mode++) {
                oj_sampler_config sc = oj_sampler_config_default();
                sc.max_new_tokens = NEW;
                sc.seed = 42;
                if (mode == 0) sc.temperature = 0.0;
                if (mode == 1) sc.temperature = 0.8, sc.top_k = 40, sc.top_p = 0.95;
                if (mode == 2) sc.temperature = 0.0, sc.repetition_penalty = 1.2;
                int64_t la = gen_run(m, prompt, 7, &sc, false, a);
                int64_t lb = gen_run(m, prompt, 7, &sc, true, b);
                int64_t same = common_prefix(a, la, b, lb);
                printf("generate %s%s mode %d: %lld tokens, %lld equal to the eager loop's\n",
                       names[k], wbf16 ? " bf16" : "", mode, (long long)la, (long long)same);
                assert_int_equal(la, lb);
                /* f32: every token; bf16 (rounded differently by the two
                 * steps' kernels): the first 16 */
                if (same < (wbf16 ? 16 : la))
                    fail_msg("generate %s%s mode %d: tokens part at %lld of %lld", names[k],
                             wbf16 ? " bf16" : "", mode, (long long)same, (long long)la);
            }
        }
        oj_gpt_free(m);
    }
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    /* FAST numerics, gpt2 in bf16: the fast step (what a user's `ojas
     * generate --device cuda --dtype bf16` runs) */
    gpu = engine(true, OJ_NUMERICS_FAST);
    oj_gpt *m = model(gpu, "gpt2-tiny");
    assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
    int32_t prompt[7];
    prompt_of(prompt, 7, 512, 99);
    for (int mode = 0; mode < 2; mode++) {
        /* greedy takes the fast step (forced on the CPU), sampled the
         * generic one, whose logits are the eager loop's */
        if (on_cpu && mode == 0) setenv("OJAS_DECODE_FAST", "1", 1);
        oj_sampler_config sc = oj_sampler_config_default();
        sc.max_new_tokens = NEW;
        sc.seed = 7;
        sc.temperature = mode ? 0.8 : 0.0;
        sc.top_k = mode ? 40 : 0;
        int64_t la = gen_run(m, prompt, 7, &sc, false, a);
        int64_t lb = gen_run(m, prompt, 7, &sc, true, b);
        unsetenv("OJAS_DECODE_FAST");
        int64_t same = common_prefix(a, la, b, lb);
        printf("generate gpt2-tiny bf16 FAST mode %d: %lld tokens, %lld equal to the eager "
               "loop's\n", mode, (long long)la, (long long)same);
        assert_int_equal(la, lb);
        if (same < (mode ? la : 16))
            fail_msg("generate FAST mode %d: tokens part at %lld", mode, (long long)same);
    }
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

/* gpt2-124m with bf16 weights on a CUDA engine of numerics num, two runs
 * of oj_generate on one 64-token prompt (run r with sampler sc[r], n_new
 * tokens, printed under label[r] with both paths' times): the graph
 * decoder's tokens and the eager loop's; where exact[r], they must be the
 * same tokens. */
static void check_graph_vs_eager_124m(oj_numerics num, int64_t n_new, const oj_sampler_config sc[2],
                                      const char *const label[2], const bool exact[2]) {
    oj_engine *gpu = engine(true, num);
    oj_gpt *m = model(gpu, "gpt2-124m");
    assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
    enum { MAX_NEW = 256 };
    assert_true(n_new <= MAX_NEW);
    int32_t prompt[64], a[MAX_NEW], b[MAX_NEW];
    prompt_of(prompt, 64, 50257, 3);
    for (int r = 0; r < 2; r++) {
        oj_sampler_config c = sc[r];
        c.max_new_tokens = n_new;
        double t0 = now_s();
        int64_t la = gen_run(m, prompt, 64, &c, false, a);
        double t1 = now_s();
        int64_t lb = gen_run(m, prompt, 64, &c, true, b);
        double t2 = now_s();
        int64_t same = common_prefix(a, la, b, lb);
        printf("%s: graph %.3f s, eager %.3f s, %lld of %lld tokens equal\n", label[r], t1 - t0,
               t2 - t1, (long long)same, (long long)la);
        assert_int_equal(la, n_new);
        assert_int_equal(lb, n_new);
        if (exact[r] && same < n_new) fail_msg("%s: tokens part at %lld", label[r], (long long)same);
    }
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

/* gpt2-124m in bf16 weights, as the benchmark runs it: greedy tokens of
 * oj_generate (graph decoder) equal the eager loop's for 64 tokens; the
 * sampled run's agreement and both runs' times printed. */
static void test_generate_gpt2_124m(void **state) {
    (void)state;
    if (on_cpu) skip(); /* minutes on a CPU */
    oj_sampler_config sc[2] = {oj_sampler_config_default(), oj_sampler_config_default()};
    sc[0].seed = sc[1].seed = 1337;
    sc[0].temperature = 0.0;
    sc[0].top_k = 0;
    sc[1].temperature = 0.8;
    sc[1].top_k = 40;
    const char *const label[2] = {"gpt2-124m bf16 generate greedy", "gpt2-124m bf16 generate sampled"};
    const bool exact[2] = {true, false};
    check_graph_vs_eager_124m(OJ_NUMERICS_EXACT, 64, sc, label, exact);
}

/* gpt2-124m in bf16 weights under FAST numerics, as `ojas generate
 * --device cuda` and the benchmark run it, sampled with the CLI's
 * defaults (temperature 0.8, top-k 40, seed 1337) and with top-p 0.9 and a
 * repetition penalty 1.2: oj_generate through the graph decoder (the
 * draw on the device) gives the eager loop's 256 tokens exactly. */
static void test_generate_sampled_gpt2_124m(void **state) {
    (void)state;
    if (on_cpu) skip(); /* minutes on a CPU */
    oj_sampler_config sc[2] = {oj_sampler_config_default(), oj_sampler_config_default()};
    for (int r = 0; r < 2; r++) {
        sc[r].seed = 1337;
        sc[r].temperature = 0.8;
        sc[r].top_k = 40;
    }
    sc[1].top_p = 0.9, sc[1].repetition_penalty = 1.2, sc[1].seed = 7;
    const char *const label[2] = {"gpt2-124m bf16 FAST generate sampled mode 0",
                                  "gpt2-124m bf16 FAST generate sampled mode 1"};
    const bool exact[2] = {true, true};
    for (int on = 0; on <= 1; on++) { /* the fast step's optional pieces off, then on */
        decode_pieces(on);
        check_graph_vs_eager_124m(OJ_NUMERICS_FAST, 256, sc, label, exact);
    }
    decode_pieces(-1);
    /* greedy generate with the pieces on: the head kernel keeps the tokens
     * and 8 steps go per read-back */
    decode_pieces(1);
    oj_sampler_config g[2] = {oj_sampler_config_default(), oj_sampler_config_default()};
    g[0].temperature = g[1].temperature = 0.0;
    g[1].top_k = 40, g[1].temperature = 0.5, g[1].seed = 3;
    const char *const glabel[2] = {"gpt2-124m bf16 FAST generate greedy (pieces on)",
                                   "gpt2-124m bf16 FAST generate T 0.5 (pieces on)"};
    check_graph_vs_eager_124m(OJ_NUMERICS_FAST, 256, g, glabel, exact);
    decode_pieces(-1);
}

/* ------------------------------------------------- the persistent step */

/* The decoder's run (graph replays) with OJAS_DECODE_MEGA set to `mega`
 * (and the fast step forced on the CPU stand-in). */
static void decode_mega_env(oj_engine *e, oj_gpt_decoder *d, const int32_t *prompt, int64_t n,
                            run *r, const char *mega) {
    setenv("OJAS_DECODE_MEGA", mega, 1);
    if (on_cpu) setenv("OJAS_DECODE_FAST", "1", 1);
    decode(e, d, prompt, n, r);
    unsetenv("OJAS_DECODE_FAST");
    unsetenv("OJAS_DECODE_MEGA");
}

/* m (gpt2 in bf16 weights, FAST numerics) decoding `steps` greedy tokens
 * after an n-token prompt into a cache of cap slots: the persistent step
 * (OJAS_DECODE_MEGA=1) replayed from a graph gives the fast step's logits
 * bit for bit at every step, so its tokens; and the device takes the
 * shapes (the persistent kernel ran, not the fallback), except on the
 * CPU stand-in. */
static void mega_case(oj_gpt *m, const char *what, int64_t cap, int64_t n, int steps) {
    oj_engine *gpu = oj_gpt_engine(m);
    const oj_gpt_config *cfg = oj_gpt_get_config(m);
    const int64_t V = cfg->vocab_size;
    if (!on_cpu) { /* the step takes the persistent kernel, not a fallback */
        oj_kv_cache *c = NULL;
        assert_int_equal(oj_kv_cache_create(m, 1, cap, &c), OJ_OK);
        setenv("OJAS_DECODE_MEGA", "1", 1);
        assert_true(oj__gpt_fast_decode_ok(m, c));
        assert_true(oj__gpt_mega_decode_ok(m, c));
        unsetenv("OJAS_DECODE_MEGA");
        assert_false(oj__gpt_mega_decode_ok(m, c)); /* off by default */
        oj_kv_cache_free(c);
    }
    int32_t *prompt = malloc((size_t)n * sizeof *prompt);
    prompt_of(prompt, n, V, (uint32_t)(cap * 5 + n));
    run fast = run_new(steps, V), mega = run_new(steps, V);
    oj_gpt_decoder *df = NULL, *dm = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, cap, true, &df), OJ_OK);
    assert_int_equal(oj_gpt_decoder_create(m, cap, true, &dm), OJ_OK);
    int64_t live0 = oj_engine_live_tensors(gpu);
    double t0 = now_s();
    decode_mega_env(gpu, df, prompt, n, &fast, "0");
    double t1 = now_s();
    decode_mega_env(gpu, dm, prompt, n, &mega, "1");
    double t2 = now_s();
    printf("%s: fast graph %.3f s, persistent graph %.3f s for %d steps with logits read back\n",
           what, t1 - t0, t2 - t1, steps);
    assert_int_equal(oj_gpt_decoder_graphed(dm), !on_cpu);
    for (int st = 0; st <= steps; st++) {
        if (memcmp(mega.lg + (int64_t)st * V, fast.lg + (int64_t)st * V, (size_t)V * sizeof(float)))
            fail_msg("%s: step %d: the persistent step's logits are not the fast step's bits", what,
                     st);
        if (mega.tok[st] != fast.tok[st])
            fail_msg("%s: step %d: token %d, the fast step's %d", what, st, mega.tok[st],
                     fast.tok[st]);
    }
    oj_gpt_decoder_free(df);
    oj_gpt_decoder_free(dm);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    assert_true(oj_engine_live_tensors(gpu) <= live0);
    run_free(&fast);
    run_free(&mega);
    free(prompt);
}

/* gen_run with OJAS_DECODE_MEGA set to `mega`. */
static int64_t gen_run_mega(oj_gpt *m, const int32_t *prompt, int64_t n,
                            const oj_sampler_config *sc, const char *mega, int32_t *out) {
    setenv("OJAS_DECODE_MEGA", mega, 1);
    if (on_cpu) setenv("OJAS_DECODE_FAST", "1", 1);
    int64_t len = gen_run(m, prompt, n, sc, false, out);
    unsetenv("OJAS_DECODE_FAST");
    unsetenv("OJAS_DECODE_MEGA");
    return len;
}

/* The persistent step (OJAS_DECODE_MEGA=1) against the fast step, bf16
 * weights, FAST numerics: a 14-layer gpt2 of width 128 (two launches a
 * step, one key chunk: the attention's direct path) and gpt2-124m (one
 * launch, split keys merged by the last chunk) give the fast step's
 * logits bit for bit over 300 greedy steps (graph replays); oj_generate
 * on gpt2-124m (`ojas generate --device cuda`'s path) gives the fast
 * step's 256 tokens sampled (temperature 0.8, top-k 40: the draw in the
 * head kernel; and with a repetition penalty: the draw after it) and
 * greedy. */
static void test_mega_decoder(void **state) {
    (void)state;
    oj_engine *gpu = engine(true, OJ_NUMERICS_FAST);
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("gpt2-tiny", &cfg));
    cfg.n_layer = 14, cfg.n_head = cfg.n_kv_head = 2, cfg.n_embd = 128, cfg.mlp_hidden = 512;
    cfg.init_std = 0.3; /* else a tiny model repeats one token */
    oj_gpt *m = NULL;
    if (oj_gpt_create(gpu, &cfg, 5, &m) != OJ_OK) fail_msg("gpt_create: %s", oj_last_error(gpu));
    assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
    mega_case(m, "gpt2 14x128 bf16 persistent", 64, 5, 58);
    oj_gpt_free(m);
    if (on_cpu) { /* minutes on a CPU */
        oj_engine_free(gpu);
        return;
    }
    m = model(gpu, "gpt2-124m");
    assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
    mega_case(m, "gpt2-124m bf16 persistent", 400, 64, 300);
    enum { NEW = 256 };
    int32_t prompt[64], a[NEW], b[NEW];
    prompt_of(prompt, 64, 50257, 11);
    for (int mode = 0; mode < 3; mode++) {
        oj_sampler_config sc = oj_sampler_config_default();
        sc.max_new_tokens = NEW;
        sc.seed = 1337;
        sc.temperature = mode == 2 ? 0.0 : 0.8;
        sc.top_k = mode == 2 ? 0 : 40;
        if (mode == 1) sc.repetition_penalty = 1.2;
        int64_t la = gen_run_mega(m, prompt, 64, &sc, "0", a);
        int64_t lb = gen_run_mega(m, prompt, 64, &sc, "1", b);
        int64_t same = common_prefix(a, la, b, lb);
        printf("generate gpt2-124m bf16 FAST mode %d: %lld persistent-step tokens, %lld equal to "
               "the fast step's\n",
               mode, (long long)lb, (long long)same);
        assert_int_equal(la, NEW);
        assert_int_equal(lb, NEW);
        if (same < NEW) fail_msg("persistent generate mode %d: tokens part at %lld", mode, (long long)same);
    }
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

int main(void) {
    if (gpu_test_probe(true, &on_cpu) != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_copy),
        cmocka_unit_test(test_captured_positions),
        cmocka_unit_test(test_rotary_at),
        cmocka_unit_test(test_attention_one_row),
        cmocka_unit_test(test_decoder_gpt2),
        cmocka_unit_test(test_decoder_nanolab),
        cmocka_unit_test(test_decoder_bf16),
        cmocka_unit_test(test_decoder_bf16_weights),
        cmocka_unit_test(test_decoder_gpt2_124m),
        cmocka_unit_test(test_decode_ops),
        cmocka_unit_test(test_decode_attention),
        cmocka_unit_test(test_decode_norm_head),
        cmocka_unit_test(test_decode_norm_head_sample),
        cmocka_unit_test(test_decode_argmax_advance),
        cmocka_unit_test(test_decode_sample),
        cmocka_unit_test(test_decode_embed_mask),
        cmocka_unit_test(test_fast_decoder_gpt2),
        cmocka_unit_test(test_fast_decoder_gpt2_124m),
        cmocka_unit_test(test_generate_graph_same_as_eager),
        cmocka_unit_test(test_generate_gpt2_124m),
        cmocka_unit_test(test_generate_sampled_gpt2_124m),
        cmocka_unit_test(test_mega_decoder),
    };
    /* OJAS_TEST_FILTER: run only the tests whose names match (cmocka's
     * pattern: * and ?), e.g. test_mega_* */
    const char *filter = getenv("OJAS_TEST_FILTER");
    if (filter && filter[0]) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
