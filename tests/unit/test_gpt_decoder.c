// test: the static greedy decoder (oj_gpt_decoder, positions on the device)
// gives the eager cached decode's tokens and, on the CPU, its logits bit
// for bit: gpt2-tiny and nanolab-tiny, f32 and bf16 autocast, a nanolab
// ring (capacity below the sequence), a second prefill, a fed token; it
// matches oj_generate at temperature 0; limits and refusals; no leaks;
// oj_generate through it (greedy and sampled) gives the eager loop's tokens;
// several steps read back at once give the tokens of single steps;
// the gpt2 fast step (FAST numerics, bf16) stays within rounding of it.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"
#include "models/gpt_internal.h"

static oj_engine *eng;

static int setup(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.seed = 5;
    return oj_engine_create(&c, &eng, NULL) == OJ_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    oj_engine_free(eng);
    return 0;
}

static oj_gpt *model(const char *preset) {
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset(preset, &cfg));
    cfg.init_std = 0.3; /* at 0.02 a tiny model repeats one token: greedy tokens would say little */
    oj_gpt *m = NULL;
    if (oj_gpt_create(eng, &cfg, 7, &m) != OJ_OK) fail_msg("gpt_create: %s", oj_last_error(eng));
    return m;
}

static void make_prompt(int32_t *p, int64_t n, int64_t V, uint32_t salt) {
    uint32_t s = 2463534242u ^ salt;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        p[i] = (int32_t)(s % (uint32_t)V);
    }
}

/* The last row of logits [1, T, V] as f32 on the host. */
static void last_row(oj_tensor *logits, float *dst, int64_t V) {
    oj_scope_begin(eng);
    oj_tensor *row = oj_narrow(logits, 1, oj_size(logits, 1) - 1, 1);
    oj_tensor *r32 = oj_cast(row, OJ_F32);
    assert_non_null(r32);
    assert_int_equal(oj_to_host(r32, dst, (size_t)V * sizeof(float)), OJ_OK);
    oj_scope_end(eng);
}

static int32_t host_argmax(const float *x, int64_t V) {
    int64_t b = 0;
    for (int64_t i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

/* Reference: the eager cached forward with a cache of `cap` positions,
 * greedy on the host. toks[0..steps], logits [(steps + 1) * V]. */
static void eager_greedy(oj_gpt *m, int64_t cap, const int32_t *prompt, int64_t n, int steps,
                         int32_t *toks, float *logits) {
    int64_t V = oj_gpt_get_config(m)->vocab_size;
    oj_kv_cache *c = NULL;
    assert_int_equal(oj_kv_cache_create(m, 1, cap, &c), OJ_OK);
    const int32_t *feed = prompt;
    int64_t fn = n;
    for (int s = 0; s <= steps; s++) {
        oj_scope_begin(eng);
        int64_t shape[2] = {1, fn};
        oj_tensor *idx = oj_from_host(eng, 2, shape, OJ_I32, feed, (size_t)fn * sizeof(int32_t));
        oj_tensor *lg = oj_gpt_forward_cached(m, c, idx);
        if (lg == NULL) fail_msg("eager step %d: %s", s, oj_last_error(eng));
        last_row(lg, logits + (int64_t)s * V, V);
        oj_scope_end(eng);
        toks[s] = host_argmax(logits + (int64_t)s * V, V);
        feed = &toks[s];
        fn = 1;
    }
    oj_kv_cache_free(c);
}

/* The decoder's tokens and logits for the same run. */
static void static_greedy(oj_gpt_decoder *d, int64_t V, const int32_t *prompt, int64_t n,
                          int steps, int32_t *toks, float *logits) {
    if (oj_gpt_decoder_prefill(d, prompt, n, &toks[0]) != OJ_OK)
        fail_msg("prefill: %s", oj_last_error(eng));
    last_row(oj_gpt_decoder_logits(d), logits, V);
    for (int s = 1; s <= steps; s++) {
        if (oj_gpt_decoder_step(d, &toks[s]) != OJ_OK) fail_msg("step %d: %s", s, oj_last_error(eng));
        last_row(oj_gpt_decoder_logits(d), logits + (int64_t)s * V, V);
    }
    assert_int_equal(oj_gpt_decoder_len(d), n + steps);
}

/* decoder == eager: tokens, and logits bit for bit. */
static void check_same_w(const char *preset, int64_t cap, int64_t n, int steps, bool bf16,
                         oj_dtype wdt) {
    oj_gpt *m = model(preset);
    if (wdt != OJ_F32) assert_int_equal(oj_gpt_to_dtype(m, wdt), OJ_OK);
    int64_t V = oj_gpt_get_config(m)->vocab_size;
    int64_t live0 = oj_engine_live_tensors(eng);
    int32_t *prompt = malloc((size_t)n * sizeof *prompt);
    int32_t *ta = malloc((size_t)(steps + 1) * sizeof *ta), *tb = malloc((size_t)(steps + 1) * sizeof *tb);
    float *la = malloc((size_t)((steps + 1) * V) * sizeof *la);
    float *lb = malloc((size_t)((steps + 1) * V) * sizeof *lb);
    make_prompt(prompt, n, V, (uint32_t)cap);
    oj_set_autocast(eng, bf16, OJ_BF16);
    eager_greedy(m, cap, prompt, n, steps, ta, la);
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, cap, true, &d), OJ_OK);
    assert_false(oj_gpt_decoder_graphed(d)); /* a CPU engine runs the step eagerly */
    static_greedy(d, V, prompt, n, steps, tb, lb);
    oj_set_autocast(eng, false, OJ_BF16);
    for (int s = 0; s <= steps; s++)
        if (ta[s] != tb[s]) fail_msg("%s: token %d: eager %d, static %d", preset, s, ta[s], tb[s]);
    assert_memory_equal(la, lb, (size_t)((steps + 1) * V) * sizeof *la);
    oj_gpt_decoder_free(d);
    assert_int_equal(oj_engine_live_tensors(eng), live0);
    free(prompt);
    free(ta);
    free(tb);
    free(la);
    free(lb);
    oj_gpt_free(m);
}
static void check_same(const char *preset, int64_t cap, int64_t n, int steps, bool bf16) {
    check_same_w(preset, cap, n, steps, bf16, OJ_F32);
}

static void test_gpt2_same_as_eager(void **state) {
    (void)state;
    check_same("gpt2-tiny", 40, 7, 32, false);
    check_same("gpt2-tiny", 64, 1, 63, false); /* the whole context */
}

static void test_nanolab_same_as_eager(void **state) {
    (void)state;
    check_same("nanolab-tiny", 48, 9, 38, false);
}

/* Past the capacity nanolab decodes over a ring, rotary positions going on
 * (past block_size too). */
static void test_nanolab_ring(void **state) {
    (void)state;
    check_same("nanolab-tiny", 12, 5, 40, false);
    check_same("nanolab-tiny", 64, 30, 80, false);
}

static void test_bf16_autocast(void **state) {
    (void)state;
    check_same("gpt2-tiny", 24, 4, 12, true);
    check_same("nanolab-tiny", 16, 4, 20, true);
}

/* Weights converted to bf16 (oj_gpt_to_dtype): the decoder equals eager
 * on the bf16 model; the caches hold bf16; its logits stay within bf16
 * rounding of the f32 model's; conversion is refused while a decoder
 * (on a CUDA engine: its graph) could read the old storage only there, so
 * on the CPU it goes through and the decoder made after it works. */
static void test_bf16_weights(void **state) {
    (void)state;
    check_same_w("gpt2-tiny", 24, 4, 12, false, OJ_BF16);
    check_same_w("nanolab-tiny", 16, 4, 20, false, OJ_BF16);
    const char *presets[2] = {"gpt2-tiny", "nanolab-tiny"};
    for (int k = 0; k < 2; k++) {
        oj_gpt *m = model(presets[k]);
        int64_t V = oj_gpt_get_config(m)->vocab_size, n = 6, shape[2] = {1, n};
        int32_t prompt[6];
        make_prompt(prompt, n, V, 11);
        float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
        oj_scope_begin(eng);
        oj_tensor *idx = oj_from_host(eng, 2, shape, OJ_I32, prompt, sizeof prompt);
        oj_tensor *lg = oj_gpt_forward(m, idx); /* recorded: its graph saves the weights */
        last_row(lg, a, V);
        assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_ERR_STATE);
        assert_int_equal(oj_tensor_dtype(oj_gpt_state_dict(m).tensors[0]), OJ_F32);
        oj_clear_error(eng);
        oj_release(lg); /* frees the graph */
        bool prev = oj_set_grad_enabled(eng, false);
        assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
        oj_named_tensors sd = oj_gpt_state_dict(m);
        for (int64_t i = 0; i < sd.n; i++) assert_int_equal(oj_tensor_dtype(sd.tensors[i]), OJ_BF16);
        last_row(oj_gpt_forward(m, idx), b, V);
        oj_set_grad_enabled(eng, prev);
        double maxa = 0, maxd = 0;
        for (int64_t i = 0; i < V; i++) {
            maxa = fmax(maxa, fabs(a[i]));
            maxd = fmax(maxd, fabs((double)a[i] - b[i]));
        }
        if (!(maxd <= 0.05 * maxa))
            fail_msg("%s: bf16 weights' logits differ by %g (max |logit| %g)", presets[k], maxd, maxa);
        assert_true(maxd > 0); /* the conversion did happen */
        oj_kv_cache *c = NULL;
        assert_int_equal(oj_kv_cache_create(m, 1, 8, &c), OJ_OK);
        oj_kv_cache_free(c);
        /* not a float dtype: refused, nothing changed */
        assert_int_equal(oj_gpt_to_dtype(m, OJ_I32), OJ_ERR_DTYPE);
        oj_clear_error(eng);
        assert_int_equal(oj_tensor_dtype(sd.tensors[0]), OJ_BF16);
        /* back to f32 */
        assert_int_equal(oj_gpt_to_dtype(m, OJ_F32), OJ_OK);
        assert_int_equal(oj_tensor_dtype(sd.tensors[0]), OJ_F32);
        oj_scope_end(eng);
        free(a);
        free(b);
        oj_gpt_free(m);
    }
}

/* The same tokens as oj_generate at temperature 0; a second prefill starts
 * over; a fed token continues from it. */
static void test_generate_refill_feed(void **state) {
    (void)state;
    oj_gpt *m = model("nanolab-tiny");
    const int64_t V = 512, n = 6;
    enum { STEPS = 20 };
    int32_t prompt[6];
    make_prompt(prompt, n, V, 99);
    oj_sampler_config sc = oj_sampler_config_default();
    sc.temperature = 0.0;
    sc.max_new_tokens = STEPS + 1;
    const int32_t *pp = prompt;
    int64_t plen = n, glen = 0;
    int32_t *gen = NULL;
    assert_int_equal(oj_generate(m, 1, &pp, &plen, &sc, &gen, &glen, NULL, NULL), OJ_OK);
    assert_int_equal(glen, STEPS + 1);
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, 64, false, &d), OJ_OK);
    int32_t t[STEPS + 1];
    for (int round = 0; round < 2; round++) { /* the second run starts over */
        int32_t other[3] = {1, 2, 3};
        if (round == 1) { /* something else in the cache first */
            assert_int_equal(oj_gpt_decoder_prefill(d, other, 3, &t[0]), OJ_OK);
            assert_int_equal(oj_gpt_decoder_step(d, &t[0]), OJ_OK);
        }
        assert_int_equal(oj_gpt_decoder_prefill(d, prompt, n, &t[0]), OJ_OK);
        for (int s = 1; s <= STEPS; s++) assert_int_equal(oj_gpt_decoder_step(d, &t[s]), OJ_OK);
        assert_memory_equal(t, gen, sizeof t);
    }
    /* feed token 17 after the prompt: the eager forward of prompt + 17 */
    int32_t first, next;
    assert_int_equal(oj_gpt_decoder_prefill(d, prompt, n, &first), OJ_OK);
    assert_int_equal(oj_gpt_decoder_set_token(d, 17), OJ_OK);
    assert_int_equal(oj_gpt_decoder_step(d, &next), OJ_OK);
    int32_t p2[7];
    memcpy(p2, prompt, sizeof prompt);
    p2[6] = 17;
    int32_t want[1];
    float lg[512];
    eager_greedy(m, 64, p2, 7, 0, want, lg);
    assert_int_equal(next, want[0]);
    assert_int_equal(oj_gpt_decoder_set_token(d, 512), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_decoder_set_token(d, -1), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    free(gen);
    oj_gpt_decoder_free(d);
    oj_gpt_free(m);
}

static void test_limits_and_refusals(void **state) {
    (void)state;
    oj_gpt *m = model("gpt2-tiny");
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, 0, true, &d), OJ_ERR_INVALID_ARGUMENT);
    assert_null(d);
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_decoder_create(NULL, 8, true, &d), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_gpt_decoder_create(m, 10, true, &d), OJ_OK);
    int32_t t;
    assert_int_equal(oj_gpt_decoder_step(d, &t), OJ_ERR_STATE); /* before a prefill */
    oj_clear_error(eng);
    assert_null(oj_gpt_decoder_logits(d));
    int32_t p[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    assert_int_equal(oj_gpt_decoder_prefill(d, p, 0, &t), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_decoder_prefill(d, NULL, 3, &t), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    int32_t bad[2] = {3, 512};
    assert_int_equal(oj_gpt_decoder_prefill(d, bad, 2, &t), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_decoder_prefill(d, p, 11, &t), OJ_ERR_OUT_OF_RANGE); /* > capacity */
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_decoder_step(d, &t), OJ_ERR_STATE); /* the failed prefill */
    oj_clear_error(eng);
    /* 4 prompt positions + 6 steps fill the 10 slots; gpt2 stops there */
    assert_int_equal(oj_gpt_decoder_prefill(d, p, 4, &t), OJ_OK);
    for (int s = 0; s < 6; s++) assert_int_equal(oj_gpt_decoder_step(d, &t), OJ_OK);
    assert_int_equal(oj_gpt_decoder_len(d), 10);
    assert_int_equal(oj_gpt_decoder_step(d, &t), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(eng), "exceeds the context"));
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_decoder_prefill(d, p, 10, &t), OJ_OK); /* a full prefill */
    assert_int_equal(oj_gpt_decoder_step(d, &t), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    oj_gpt_decoder_free(d);
    oj_gpt_decoder_free(NULL);
    /* the capacity bounds nothing past block_size for gpt2 either */
    assert_int_equal(oj_gpt_decoder_create(m, 100, false, &d), OJ_OK);
    int32_t q[64];
    make_prompt(q, 64, 512, 1);
    assert_int_equal(oj_gpt_decoder_prefill(d, q, 64, &t), OJ_OK);
    assert_int_equal(oj_gpt_decoder_step(d, &t), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    oj_gpt_decoder_free(d);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

/* gen_a, gen_b: oj_generate with OJAS_GENERATE_STATIC=1 (the static
 * decoder) and =0 (the eager cached loop) on m. */
static void generate_both(oj_gpt *m, const int32_t *prompt, int64_t n, const oj_sampler_config *sc,
                          int32_t **gen_a, int64_t *len_a, int32_t **gen_b, int64_t *len_b) {
    const int32_t *pp = prompt;
    int64_t plen = n;
    setenv("OJAS_GENERATE_STATIC", "1", 1);
    oj_status sa = oj_generate(m, 1, &pp, &plen, sc, gen_a, len_a, NULL, NULL);
    setenv("OJAS_GENERATE_STATIC", "0", 1);
    oj_status sb = oj_generate(m, 1, &pp, &plen, sc, gen_b, len_b, NULL, NULL);
    unsetenv("OJAS_GENERATE_STATIC");
    if (sa != OJ_OK || sb != OJ_OK) fail_msg("generate: %s", oj_last_error(eng));
}

/* oj_generate through the static decoder gives the eager loop's tokens:
 * greedy, sampled (temperature, top-k, top-p), with a repetition penalty
 * (the logits read back), a stop token; gpt2-tiny, nanolab-tiny past its
 * window (the ring), a llama config, f32 and bf16 weights (the logits
 * read back as bf16). On the CPU the static step's logits are the eager
 * step's bit for bit, so the tokens must be equal everywhere. */
static void test_generate_static_same_as_eager(void **state) {
    (void)state;
    const char *names[] = {"gpt2-tiny", "nanolab-tiny", "llama-tiny"};
    for (int k = 0; k < 3; k++) {
        oj_gpt *m = NULL;
        if (k < 2) {
            m = model(names[k]);
        } else { /* Llama: RMSNorm, rotary, GQA, SwiGLU, untied head */
            oj_gpt_config cfg = {.family = OJ_LLAMA, .vocab_size = 512, .block_size = 64,
                                 .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 64,
                                 .mlp_hidden = 128, .norm_eps = 1e-6, .rope_theta = 10000.0,
                                 .init_std = 0.3, .untied_head = true};
            if (oj_gpt_create(eng, &cfg, 7, &m) != OJ_OK) fail_msg("llama: %s", oj_last_error(eng));
        }
        for (int wbf16 = 0; wbf16 < 2; wbf16++) {
            if (wbf16) assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
            int32_t prompt[5];
            make_prompt(prompt, 5, 512, 31u + (uint32_t)k);
            for (int mode = 0; mode < 4; mode++) {
                oj_sampler_config sc = oj_sampler_config_default();
                sc.seed = 1234;
                /* past nanolab's 64-position window; gpt2 and llama stop at 64 */
                sc.max_new_tokens = 70;
                if (mode == 0) sc.temperature = 0.0;
                if (mode == 1) sc.temperature = 0.8, sc.top_k = 40, sc.top_p = 0.9;
                if (mode == 2) sc.temperature = 0.0, sc.repetition_penalty = 1.3;
                if (mode == 3) sc.temperature = 1.0, sc.stop_token = 3;
                int32_t *a = NULL, *b = NULL;
                int64_t la = 0, lb = 0;
                generate_both(m, prompt, 5, &sc, &a, &la, &b, &lb);
                if (la != lb || memcmp(a, b, (size_t)la * sizeof *a) != 0) {
                    int64_t i = 0;
                    while (i < la && i < lb && a[i] == b[i]) i++;
                    fail_msg("%s%s mode %d: static %lld tokens, eager %lld, first difference at %lld",
                             names[k], wbf16 ? " bf16" : "", mode, (long long)la, (long long)lb,
                             (long long)i);
                }
                if (mode != 3) assert_int_equal(la, k == 1 ? 70 : 59);
                free(a);
                free(b);
            }
        }
        oj_gpt_free(m);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

/* The gpt2 fast step (gpt_decode_fast.c, forced on the CPU with
 * OJAS_DECODE_FAST=1): taken for gpt2 in bf16/f16 under FAST numerics
 * only; its tokens equal the eager cached decode's (greedy, up to a near
 * tie) and its logits stay within bf16 rounding of them. */
static void test_fast_step_gpt2(void **state) {
    (void)state;
    oj_gpt *m = model("gpt2-tiny");
    const int64_t V = 512, n = 5, cap = 48;
    enum { STEPS = 40 };
    oj_kv_cache *c = NULL;
    setenv("OJAS_DECODE_FAST", "1", 1);
    assert_int_equal(oj_kv_cache_create(m, 1, 8, &c), OJ_OK);
    assert_false(oj__gpt_fast_decode_ok(m, c)); /* f32 weights */
    oj_kv_cache_free(c);
    assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
    assert_int_equal(oj_kv_cache_create(m, 1, 8, &c), OJ_OK);
    assert_true(oj__gpt_fast_decode_ok(m, c));
    oj_engine_set_numerics(eng, OJ_NUMERICS_EXACT);
    assert_false(oj__gpt_fast_decode_ok(m, c)); /* EXACT keeps the generic step */
    oj_engine_set_numerics(eng, OJ_NUMERICS_FAST);
    setenv("OJAS_DECODE_FAST", "0", 1);
    assert_false(oj__gpt_fast_decode_ok(m, c));
    unsetenv("OJAS_DECODE_FAST");
    assert_false(oj__gpt_fast_decode_ok(m, c)); /* by default on CUDA engines only */
    oj_kv_cache_free(c);
    oj_gpt *nm = model("nanolab-tiny");
    assert_int_equal(oj_gpt_to_dtype(nm, OJ_BF16), OJ_OK);
    assert_int_equal(oj_kv_cache_create(nm, 1, 8, &c), OJ_OK);
    setenv("OJAS_DECODE_FAST", "1", 1);
    assert_false(oj__gpt_fast_decode_ok(nm, c)); /* gpt2 only */
    oj_kv_cache_free(c);
    oj_gpt_free(nm);

    int32_t prompt[5], ta[STEPS + 1], tb[STEPS + 1];
    float *la = malloc((size_t)((STEPS + 1) * V) * sizeof *la);
    float *lb = malloc((size_t)((STEPS + 1) * V) * sizeof *lb);
    make_prompt(prompt, n, V, 4242);
    eager_greedy(m, cap, prompt, n, STEPS, ta, la);
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, cap, true, &d), OJ_OK);
    static_greedy(d, V, prompt, n, STEPS, tb, lb);
    unsetenv("OJAS_DECODE_FAST");
    bool differs = false;
    for (int s = 0; s <= STEPS; s++) {
        const float *x = lb + (int64_t)s * V, *y = la + (int64_t)s * V;
        double scale = 1.0;
        for (int64_t i = 0; i < V; i++) scale = fmax(scale, fabs(y[i]));
        for (int64_t i = 0; i < V; i++) {
            if (!(fabs((double)x[i] - y[i]) <= 3e-2 * scale))
                fail_msg("step %d logit %lld: fast %g, eager %g (scale %g)", s, (long long)i,
                         x[i], y[i], scale);
            differs = differs || x[i] != y[i];
        }
        if (ta[s] != tb[s]) {
            double gap = fabs((double)y[ta[s]] - y[tb[s]]);
            if (gap > 6e-2 * scale)
                fail_msg("step %d: token fast %d, eager %d, not a near tie (gap %g)", s, tb[s],
                         ta[s], gap);
            break; /* a near tie: the sequences may part here */
        }
    }
    assert_true(differs); /* the fast step ran: its sums round differently somewhere */
    oj_gpt_decoder_free(d);
    free(la);
    free(lb);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

/* oj__gpt_decoder_steps: k steps with one read-back give the tokens of k
 * oj_gpt_decoder_step calls (gpt2-tiny, greedy and sampled on the device);
 * without oj__gpt_decoder_keep_tokens it is refused, and a nanolab ring
 * cannot keep its tokens by position. */
static void test_steps_batched(void **state) {
    (void)state;
    oj_gpt *m = model("gpt2-tiny");
    enum { N = 5, K = 19 };
    int32_t prompt[N], a[K + 1], b[K + 1];
    make_prompt(prompt, N, 512, 77u);
    for (int sampled = 0; sampled < 2; sampled++) {
        oj__decode_sampler smp = {0.9, 30, 0.95, 1.2, 99, 0};
        oj_gpt_decoder *d1 = NULL, *d2 = NULL;
        assert_int_equal(oj_gpt_decoder_create(m, 32, true, &d1), OJ_OK);
        assert_int_equal(oj_gpt_decoder_create(m, 32, true, &d2), OJ_OK);
        if (sampled) {
            assert_int_equal(oj__gpt_decoder_set_sampler(d1, &smp, true), OJ_OK);
            assert_int_equal(oj__gpt_decoder_set_sampler(d2, &smp, true), OJ_OK);
        }
        assert_int_equal(oj_gpt_decoder_prefill(d1, prompt, N, &a[0]), OJ_OK);
        for (int i = 1; i <= K; i++) assert_int_equal(oj_gpt_decoder_step(d1, &a[i]), OJ_OK);
        assert_int_equal(oj_gpt_decoder_prefill(d2, prompt, N, &b[0]), OJ_OK);
        assert_int_equal(oj__gpt_decoder_steps(d2, 3, &b[1]), OJ_ERR_STATE);
        oj_clear_error(eng);
        assert_int_equal(oj__gpt_decoder_keep_tokens(d2), OJ_OK);
        assert_int_equal(oj_gpt_decoder_prefill(d2, prompt, N, &b[0]), OJ_OK);
        assert_int_equal(oj__gpt_decoder_steps(d2, 12, &b[1]), OJ_OK);
        assert_int_equal(oj__gpt_decoder_steps(d2, K - 12, &b[13]), OJ_OK);
        assert_int_equal(oj_gpt_decoder_len(d2), N + K);
        for (int i = 0; i <= K; i++)
            if (a[i] != b[i]) fail_msg("sampled %d token %d: stepped %d, batched %d", sampled, i, a[i], b[i]);
        oj_gpt_decoder_free(d1);
        oj_gpt_decoder_free(d2);
    }
    oj_gpt_free(m);
    oj_gpt *nm = model("nanolab-tiny");
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(nm, 16, true, &d), OJ_OK);
    assert_int_equal(oj__gpt_decoder_keep_tokens(d), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(oj_last_error(eng), "ring cache"));
    oj_clear_error(eng);
    oj_gpt_decoder_free(d);
    oj_gpt_free(nm);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_same_as_eager),
        cmocka_unit_test(test_nanolab_same_as_eager),
        cmocka_unit_test(test_nanolab_ring),
        cmocka_unit_test(test_bf16_autocast),
        cmocka_unit_test(test_bf16_weights),
        cmocka_unit_test(test_generate_refill_feed),
        cmocka_unit_test(test_limits_and_refusals),
        cmocka_unit_test(test_generate_static_same_as_eager),
        cmocka_unit_test(test_fast_step_gpt2),
        cmocka_unit_test(test_steps_batched),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
