// test: the paged forward and the continuous-batching scheduler give, on
// the CPU with EXACT numerics, each sequence's logits and tokens of the
// sequence decoded alone (oj_gpt_forward_cached, oj_generate) bit for bit,
// whatever else is in the batch: gpt2 and llama (GQA; Qwen-style biases and
// QK-norm; Llama 3.1 rope scaling and an untied head), chunked prefill, blocks smaller than a chunk, a pool too small
// for every request at once (requests queue), sampling; cancel and
// timeouts free blocks; preemption of the youngest request when the pool
// cannot grow a running one (recomputed, the same tokens); the decode step
// padded to a bucket (oj_gpt_decode_paged); refusals; no leaks.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"
#include "ojas/serve.h"
#include "serve_testutil.h"

static oj_engine *eng;

static int setup(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.seed = 5;
    c.numerics = OJ_NUMERICS_EXACT;
    c.threads = 2;
    return oj_engine_create(&c, &eng, NULL) == OJ_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    return 0;
}

static oj_gpt *make(const char *kind) {
    return sv_model(eng, kind, 97, 64, 32);
}

#define NP 6
static const int64_t lens[NP] = {1, 5, 17, 40, 3, 23};

/* Prompt i: lens[i] ids below 97. */
static void prompts(int32_t *buf[NP]) {
    sv_prompts(NP, lens, 97, buf);
}
static void free_prompts(int32_t *buf[NP]) {
    for (int i = 0; i < NP; i++) free(buf[i]);
}

/* Logits [V] of the last position of prompt p decoded alone. */
static void alone_logits(oj_gpt *m, const int32_t *p, int64_t n, float *dst, int64_t V) {
    oj_kv_cache *c = NULL;
    assert_int_equal(oj_kv_cache_create(m, 1, n, &c), OJ_OK);
    oj_scope_begin(eng);
    int64_t s[2] = {1, n};
    oj_tensor *idx = oj_from_host(eng, 2, s, OJ_I32, p, (size_t)n * sizeof *p);
    oj_tensor *lg = oj_gpt_forward_cached(m, c, idx);
    assert_non_null(lg);
    oj_tensor *row = oj_narrow(lg, 1, n - 1, 1);
    assert_int_equal(oj_to_host(row, dst, (size_t)V * sizeof *dst), OJ_OK);
    oj_scope_end(eng);
    oj_kv_cache_free(c);
}

/* The NP prompts in a pool of nblocks blocks of 4 positions, handed out
 * interleaved (sv_pack), and packed one after another. */
typedef struct {
    int32_t *p[NP], tables[NP][16], packed[128];
    const int32_t *tp[NP];
    int64_t start[NP + 1], N;
    oj_kv_pool *pool;
} batch;

static void batch_init(batch *b, oj_gpt *m, int nblocks) {
    prompts(b->p);
    b->pool = NULL;
    assert_int_equal(oj_kv_pool_create(m, nblocks, 4, &b->pool), OJ_OK);
    b->N = sv_pack(NP, b->p, lens, nblocks, b->tables, b->tp, b->start, b->packed);
}

static void batch_free(batch *b) {
    free_prompts(b->p);
    oj_kv_pool_free(b->pool);
}

/* Every prompt packed into one paged forward (blocks of 4 positions,
 * handed out interleaved) gives each prompt's last logits of the prompt
 * alone, bit for bit; then a second forward of one more token each. */
static void check_packed_logits(const char *kind) {
    oj_gpt *m = make(kind);
    const int64_t V = oj_gpt_get_config(m)->vocab_size;
    batch b;
    batch_init(&b, m, 64);
    int64_t past[NP] = {0};
    float *got = malloc((size_t)(NP * V) * sizeof *got), *want = malloc((size_t)V * sizeof *want);
    sv_forward(m, b.pool, b.packed, b.N, NP, b.start, past, b.tp, got);
    for (int i = 0; i < NP; i++) {
        alone_logits(m, b.p[i], lens[i], want, V);
        assert_memory_equal(got + i * V, want, (size_t)V * sizeof *want);
    }
    /* one more token each: prompt + (i % 7), attending to the blocks */
    int32_t *q[NP];
    for (int i = 0; i < NP; i++) {
        q[i] = malloc((size_t)(lens[i] + 1) * sizeof(int32_t));
        memcpy(q[i], b.p[i], (size_t)lens[i] * sizeof(int32_t));
        q[i][lens[i]] = i % 7;
        b.packed[i] = i % 7;
        past[i] = lens[i];
        b.start[i + 1] = i + 1;
    }
    sv_forward(m, b.pool, b.packed, NP, NP, b.start, past, b.tp, got);
    for (int i = 0; i < NP; i++) {
        alone_logits(m, q[i], lens[i] + 1, want, V);
        assert_memory_equal(got + i * V, want, (size_t)V * sizeof *want);
        free(q[i]);
    }
    free(got);
    free(want);
    batch_free(&b);
    oj_gpt_free(m);
}

static void test_packed_logits_gpt2(void **state) {
    (void)state;
    check_packed_logits("gpt2");
}
static void test_packed_logits_llama(void **state) {
    (void)state;
    check_packed_logits("llama");
}
static void test_packed_logits_qwen(void **state) {
    (void)state;
    check_packed_logits("qwen");
    check_packed_logits("llama31");
}

/* oj_gpt_decode_paged (a step padded to a bucket of 2^j rows, inactive
 * rows writing nothing, tables read from device tensors) gives the bits
 * oj_gpt_forward_paged gives for the same step, each row's argmax and its
 * log_softmax beside them: all six sequences (bucket
 * 8), then three of them (bucket 4), then all six again (the other three's
 * blocks were left alone by the padding rows); a step in two halves
 * (begin, another forward, end) gives the same bits. */
static void check_decode_buckets(const char *kind) {
    oj_gpt *m = make(kind);
    const int64_t V = oj_gpt_get_config(m)->vocab_size;
    batch b;
    batch_init(&b, m, 96);
    int64_t past[NP] = {0};
    sv_forward(m, b.pool, b.packed, b.N, NP, b.start, past, b.tp, NULL);
    for (int i = 0; i < NP; i++) past[i] = lens[i];
    float *got = malloc((size_t)(NP * V) * sizeof *got), *want = malloc((size_t)(NP * V) * sizeof *want);
    const int64_t steps[3] = {NP, 3, NP};
    for (int k = 0; k < 3; k++) {
        const int64_t n = steps[k];
        int32_t tok[NP];
        int64_t st1[NP + 1];
        for (int64_t i = 0; i <= n; i++) st1[i] = i;
        for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 13 + k * 7 + 1) % V);
        int32_t am[NP];
        float alp[NP];
        oj_status st = oj_gpt_decode_paged(m, b.pool, n, tok, past, b.tp, true, got, am, alp);
        if (st != OJ_OK) fail_msg("decode_paged: %s", oj_last_error(eng));
        for (int64_t i = 0; i < n; i++) { /* the argmax and its log_softmax, from the logits */
            const float *row = got + i * V;
            int64_t best = 0;
            double sum = 0.0;
            for (int64_t v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            for (int64_t v = 0; v < V; v++) sum += exp((double)row[v] - row[best]);
            assert_int_equal(am[i], best);
            if (!(fabs((double)alp[i] + log(sum)) <= 1e-5))
                fail_msg("row %lld: argmax logprob %.9g, log_softmax %.9g", (long long)i, alp[i], -log(sum));
        }
        assert_false(oj_gpt_decode_paged_graphed(b.pool, n)); /* no graphs on the CPU */
        /* the same step again through forward_paged (rewrites the same keys) */
        sv_forward(m, b.pool, tok, n, n, st1, past, b.tp, want);
        assert_memory_equal(got, want, (size_t)(n * V) * sizeof *want);
        for (int64_t i = 0; i < n; i++) past[i]++;
    }
    /* in two halves with a forward between (the scheduler's way with prompt chunks):
     * the same bits; an end without a begin and a second begin are refused */
    {
        int32_t tok[3] = {4, 5, 6};
        int64_t ps[3] = {past[0], past[1], past[2]};
        float *again = malloc((size_t)(3 * V) * sizeof *again);
        assert_int_equal(oj_gpt_decode_paged_end(m, b.pool, got, NULL, NULL), OJ_ERR_STATE);
        oj_clear_error(eng);
        assert_int_equal(oj_gpt_decode_paged_begin(m, b.pool, 3, tok, ps, b.tp, true), OJ_OK);
        assert_int_equal(oj_gpt_decode_paged_begin(m, b.pool, 3, tok, ps, b.tp, true), OJ_ERR_STATE);
        oj_clear_error(eng);
        int32_t other[3] = {7, 8, 9};
        int64_t st3[4] = {0, 1, 2, 3};
        sv_forward(m, b.pool, other, 3, 3, st3, past + 3, b.tp + 3, NULL);
        assert_int_equal(oj_gpt_decode_paged_end(m, b.pool, got, NULL, NULL), OJ_OK);
        assert_int_equal(oj_gpt_decode_paged(m, b.pool, 3, tok, ps, b.tp, true, again, NULL, NULL),
                         OJ_OK);
        assert_memory_equal(got, again, (size_t)(3 * V) * sizeof *again);
        free(again);
        for (int i = 0; i < NP; i++) past[i]++;
    }
    /* refusals: a token outside the vocabulary, no sequence, past the context */
    int32_t bad = (int32_t)V;
    assert_int_equal(oj_gpt_decode_paged(m, b.pool, 1, &bad, past, b.tp, false, got, NULL, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_decode_paged(m, b.pool, 0, &bad, past, b.tp, false, got, NULL, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    int64_t far = oj_gpt_get_config(m)->block_size;
    int32_t ok_tok = 1;
    oj_status fst = oj_gpt_decode_paged(m, b.pool, 1, &ok_tok, &far, b.tp, false, got, NULL, NULL);
    if (fst != OJ_ERR_OUT_OF_RANGE) fail_msg("past the context: %d %s", fst, oj_last_error(eng));
    oj_clear_error(eng);
    free(got);
    free(want);
    batch_free(&b);
    oj_gpt_free(m);
}

static void test_decode_buckets(void **state) {
    (void)state;
    check_decode_buckets("gpt2");
    check_decode_buckets("qwen");
}

/* The generate tests' sampler at temperature t (0: greedy, else top-k 20;
 * seed 42, 20 new tokens), and each prompt's tokens from oj_generate alone
 * into want[i], wl[i] long (the caller frees each). */
static oj_sampler_config generate_alone(oj_gpt *m, int32_t *p[NP], double t, int32_t *want[NP],
                                        int64_t wl[NP]) {
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = t;
    cfg.top_k = t > 0 ? 20 : 0;
    cfg.seed = 42;
    cfg.max_new_tokens = 20;
    const int32_t *const *pp = (const int32_t *const *)p;
    assert_int_equal(oj_generate(m, NP, pp, lens, &cfg, want, wl, NULL, NULL), OJ_OK);
    return cfg;
}

/* oj_batch_generate over a scheduler of `sc` gives oj_generate's tokens for
 * every prompt at temperature t (0: greedy). */
static void check_generate(const char *kind, const oj_sched_config *sc, double t) {
    oj_gpt *m = make(kind);
    int32_t *p[NP];
    prompts(p);
    int32_t *want[NP], *got[NP];
    int64_t wl[NP], gl[NP];
    const oj_sampler_config cfg = generate_alone(m, p, t, want, wl);
    const int32_t *const *pp = (const int32_t *const *)p;
    oj_status st = oj_batch_generate(m, NP, pp, lens, &cfg, sc, got, gl, NULL, NULL);
    if (st != OJ_OK) fail_msg("batch_generate: %s", oj_last_error(eng));
    for (int i = 0; i < NP; i++) {
        assert_int_equal(gl[i], wl[i]);
        assert_memory_equal(got[i], want[i], (size_t)wl[i] * sizeof(int32_t));
        free(got[i]);
        free(want[i]);
    }
    free_prompts(p);
    oj_gpt_free(m);
}

typedef struct {
    int32_t toks[NP][64];
    int64_t len[NP];
    int64_t ids[NP];
    int ends;
} collect;

static bool collect_fn(void *ctx, int64_t id, int32_t token, double lp, oj_finish why) {
    (void)lp;
    (void)why;
    collect *c = ctx;
    for (int i = 0; i < NP; i++)
        if (c->ids[i] == id) {
            if (token < 0) c->ends++;
            else c->toks[i][c->len[i]++] = token;
        }
    return true;
}

/* A pool far smaller than the requests' full lengths (18 blocks of 4
 * positions; the six requests need 52 at their ends): requests are
 * admitted on their prompts' blocks (more run at once than full
 * reservations would let: 3, not 2), the youngest is preempted when a
 * running one cannot grow and is recomputed later, and every request
 * still gets oj_generate's tokens, greedy and sampled; the pool ends
 * empty. */
static void check_preemption(const char *kind, double t) {
    oj_gpt *m = make(kind);
    int32_t *p[NP];
    prompts(p);
    int32_t *want[NP];
    int64_t wl[NP];
    const oj_sampler_config cfg = generate_alone(m, p, t, want, wl);
    oj_sched_config sc = oj_sched_config_default();
    sc.max_batch = NP;
    sc.block_size = 4;
    sc.n_blocks = 18;
    sc.prefill_chunk = 8;
    sc.max_step_tokens = 32;
    oj_sched *s = NULL;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    collect *c = calloc(1, sizeof *c);
    for (int i = 0; i < NP; i++)
        assert_int_equal(oj_sched_submit(s, p[i], lens[i], &cfg, i, 0.0, collect_fn, c, &c->ids[i]), OJ_OK);
    int64_t most = 0;
    while (oj_sched_busy(s)) {
        if (oj_sched_step(s) != OJ_OK) fail_msg("step: %s", oj_sched_error(s));
        oj_sched_stats st = oj_sched_get_stats(s);
        if (st.running > most) most = st.running;
        assert_true(st.blocks_used <= 18);
    }
    oj_sched_stats st = oj_sched_get_stats(s);
    if (st.preempted == 0) fail_msg("%s: no request was preempted", kind);
    if (most < 3) fail_msg("%s: at most %lld requests ran at once", kind, (long long)most);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(c->ends, NP);
    int64_t prompt_total = 0; /* each prompt counted once, recomputed or not */
    for (int i = 0; i < NP; i++) prompt_total += lens[i];
    assert_int_equal(st.prompt_tokens, prompt_total);
    for (int i = 0; i < NP; i++) {
        if (c->len[i] != wl[i] || memcmp(c->toks[i], want[i], (size_t)wl[i] * sizeof(int32_t)) != 0)
            fail_msg("%s t %g: request %d got %lld tokens, alone %lld (or other tokens)", kind, t, i,
                     (long long)c->len[i], (long long)wl[i]);
        free(want[i]);
    }
    free(c);
    oj_sched_free(s);
    free_prompts(p);
    oj_gpt_free(m);
}

static void test_preemption(void **state) {
    (void)state;
    check_preemption("gpt2", 0.0);
    check_preemption("llama", 0.8);
}

/* A request preempted in the middle of its prefill (prompt chunks of one
 * token; the older request grows into the last free block) is recomputed
 * and still gives oj_generate's tokens; its prompt counts once in the
 * prompt-token statistic. */
static void test_preempt_in_prefill(void **state) {
    (void)state;
    oj_gpt *m = make("gpt2");
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0;
    oj_sched_config sc = oj_sched_config_default();
    sc.max_batch = 2;
    sc.block_size = 4;
    sc.n_blocks = 12;
    sc.prefill_chunk = 1;
    sc.max_step_tokens = 8;
    oj_sched *s = NULL;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    int32_t pa[5] = {1, 2, 3, 4, 5}, pb[28];
    for (int i = 0; i < 28; i++) pb[i] = (int32_t)((i * 11 + 7) % 97);
    collect *c = calloc(1, sizeof *c);
    cfg.max_new_tokens = 30;
    assert_int_equal(oj_sched_submit(s, pa, 5, &cfg, 0, 0.0, collect_fn, c, &c->ids[0]), OJ_OK);
    cfg.max_new_tokens = 2;
    assert_int_equal(oj_sched_submit(s, pb, 28, &cfg, 0, 0.0, collect_fn, c, &c->ids[1]), OJ_OK);
    while (oj_sched_busy(s)) assert_int_equal(oj_sched_step(s), OJ_OK);
    oj_sched_stats st = oj_sched_get_stats(s);
    assert_true(st.preempted >= 1);
    assert_int_equal(st.prompt_tokens, 5 + 28);
    assert_int_equal(st.blocks_used, 0);
    const int32_t *ps[2] = {pa, pb};
    const int64_t ls[2] = {5, 28}, mx[2] = {30, 2};
    for (int i = 0; i < 2; i++) {
        int32_t *want[1];
        int64_t wl[1];
        cfg.max_new_tokens = mx[i];
        assert_int_equal(oj_generate(m, 1, &ps[i], &ls[i], &cfg, want, wl, NULL, NULL), OJ_OK);
        assert_int_equal(c->len[i], wl[0]);
        assert_memory_equal(c->toks[i], want[0], (size_t)wl[0] * sizeof(int32_t));
        free(want[0]);
    }
    free(c);
    oj_sched_free(s);
    oj_gpt_free(m);
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int32_t toks[NP][64];
    double lps[NP][64];
    int64_t len[NP], ids[NP];
} collect_lp;

static bool collect_lp_fn(void *ctx, int64_t id, int32_t token, double lp, oj_finish why) {
    (void)why;
    collect_lp *c = ctx;
    for (int i = 0; i < NP; i++)
        if (c->ids[i] == id && token >= 0) {
            c->toks[i][c->len[i]] = token;
            c->lps[i][c->len[i]++] = lp;
        }
    return true;
}

/* Greedy requests' tokens and logprobs with every row's argmax and logprob
 * read from the device (OJAS_SCHED_DECODE_PAGED=1: decode rows through the
 * decode step, prompt chunks' last rows through the packed forward, both
 * as max - logsumexp in f32) == the host's from the logits (in double):
 * the same tokens, logprobs within 1e-5. */
static void test_device_greedy_logprobs(void **state) {
    (void)state;
    oj_gpt *m = make("qwen");
    int32_t *p[NP];
    prompts(p);
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0;
    cfg.max_new_tokens = 12;
    collect_lp *c[2] = {calloc(1, sizeof(collect_lp)), calloc(1, sizeof(collect_lp))};
    for (int k = 0; k < 2; k++) {
        if (k == 1) assert_int_equal(setenv("OJAS_SCHED_DECODE_PAGED", "1", 1), 0);
        oj_sched_config sc = oj_sched_config_default();
        sc.max_batch = NP;
        sc.prefill_chunk = 8; /* long prompts end their prefill beside other rows' decoding */
        oj_sched *s = NULL;
        assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
        for (int i = 0; i < NP; i++)
            assert_int_equal(oj_sched_submit(s, p[i], lens[i], &cfg, i, 0.0, collect_lp_fn, c[k],
                                             &c[k]->ids[i]), OJ_OK);
        while (oj_sched_busy(s)) assert_int_equal(oj_sched_step(s), OJ_OK);
        if (k == 1) assert_true(oj_sched_get_profile(s).prefill_steps > 0);
        oj_sched_free(s);
        unsetenv("OJAS_SCHED_DECODE_PAGED");
    }
    for (int i = 0; i < NP; i++) {
        assert_int_equal(c[0]->len[i], c[1]->len[i]);
        assert_memory_equal(c[0]->toks[i], c[1]->toks[i], (size_t)c[0]->len[i] * sizeof(int32_t));
        for (int64_t t = 0; t < c[0]->len[i]; t++) {
            const double a = c[0]->lps[i][t], b = c[1]->lps[i][t];
            if (!(fabs(a - b) <= 1e-5 * fmax(1.0, fabs(a))))
                fail_msg("request %d token %lld: logprob on the host %.9g, on the device %.9g", i,
                         (long long)t, a, b);
        }
    }
    free(c[0]);
    free(c[1]);
    free_prompts(p);
    oj_gpt_free(m);
}

/* The step profile (oj_sched_get_profile) on the decode path
 * (OJAS_SCHED_DECODE_PAGED=1): every step counted, the decode steps and
 * their rows as run (the pool's decode times count the same steps), the
 * prompts' tokens as prefilled (a one-token prompt is a decode row), every
 * phase >= 0 and their sum within the steps' wall time; with the sync on,
 * the decode step still gives the same tokens. */
static void test_profile(void **state) {
    (void)state;
    assert_int_equal(setenv("OJAS_SCHED_DECODE_PAGED", "1", 1), 0);
    oj_gpt *m = make("gpt2");
    int32_t *p[NP];
    prompts(p);
    int32_t *want[NP];
    int64_t wl[NP];
    const oj_sampler_config cfg = generate_alone(m, p, 0.0, want, wl);
    oj_sched_config sc = oj_sched_config_default();
    sc.max_batch = NP;
    oj_sched *s = NULL;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    oj_sched_set_profile_sync(s, true);
    collect *c = calloc(1, sizeof *c);
    int64_t prompt_total = 0;
    for (int i = 0; i < NP; i++) {
        assert_int_equal(oj_sched_submit(s, p[i], lens[i], &cfg, i, 0.0, collect_fn, c, &c->ids[i]), OJ_OK);
        prompt_total += lens[i];
    }
    double wall = 0.0;
    int64_t steps = 0;
    while (oj_sched_busy(s)) {
        double t = mono();
        assert_int_equal(oj_sched_step(s), OJ_OK);
        wall += mono() - t;
        steps++;
    }
    oj_sched_profile pr = oj_sched_get_profile(s);
    assert_int_equal(pr.steps, steps);
    assert_true(pr.decode_steps > 0 && pr.decode_steps <= steps);
    assert_int_equal(pr.decode.steps, pr.decode_steps);
    assert_true(pr.decode_rows >= pr.decode_steps && pr.decode_rows <= NP * pr.decode_steps);
    assert_true(pr.prefill_steps > 0);
    /* a prompt of one token (lens[0]) runs as a decode row */
    assert_int_equal(pr.prefill_tokens, prompt_total - lens[0]);
    const double ph[] = {pr.schedule_s, pr.decode_s, pr.prefill_s, pr.sample_s, pr.events_s,
                         pr.decode.prepare_s, pr.decode.upload_s, pr.decode.launch_s,
                         pr.decode.wait_s, pr.decode.readback_s};
    for (size_t i = 0; i < sizeof ph / sizeof ph[0]; i++) assert_true(ph[i] >= 0.0);
    const double sum = pr.schedule_s + pr.decode_s + pr.prefill_s + pr.sample_s + pr.events_s;
    if (!(sum > 0.0 && sum <= wall * 1.001 + 1e-6))
        fail_msg("the phases sum to %.6f s, the steps took %.6f s", sum, wall);
    if (!(pr.decode.launch_s > 0.0 && pr.decode.prepare_s + pr.decode.upload_s + pr.decode.launch_s +
                                          pr.decode.wait_s + pr.decode.readback_s <= pr.decode_s * 1.001 + 1e-6))
        fail_msg("decode phases %.6f (launch %.6f) beyond the decode steps' %.6f s",
                 pr.decode.prepare_s + pr.decode.upload_s + pr.decode.launch_s + pr.decode.wait_s +
                     pr.decode.readback_s, pr.decode.launch_s, pr.decode_s);
    for (int i = 0; i < NP; i++) {
        assert_int_equal(c->len[i], wl[i]);
        assert_memory_equal(c->toks[i], want[i], (size_t)wl[i] * sizeof(int32_t));
        free(want[i]);
    }
    free(c);
    oj_sched_free(s);
    free_prompts(p);
    oj_gpt_free(m);
    unsetenv("OJAS_SCHED_DECODE_PAGED");
}

/* The step profile on the eager path (no OJAS_SCHED_DECODE_PAGED: one
 * packed forward per step, the CPU's): rows of one token (decode rows, and
 * a one-token prompt) count as eager decode rows, not as prompt tokens, so
 * prefill_tokens is the prompts' tokens and the decode rows are the
 * generated tokens fed back (all but each request's last). */
static void test_profile_eager(void **state) {
    (void)state;
    unsetenv("OJAS_SCHED_DECODE_PAGED");
    oj_gpt *m = make("gpt2");
    int32_t *p[NP];
    prompts(p);
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0;
    cfg.max_new_tokens = 6;
    oj_sched_config sc = oj_sched_config_default();
    sc.max_batch = NP;
    oj_sched *s = NULL;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    collect *c = calloc(1, sizeof *c);
    int64_t prompt_total = 0;
    for (int i = 0; i < NP; i++) {
        assert_int_equal(oj_sched_submit(s, p[i], lens[i], &cfg, i, 0.0, collect_fn, c, &c->ids[i]), OJ_OK);
        prompt_total += lens[i];
    }
    while (oj_sched_busy(s)) assert_int_equal(oj_sched_step(s), OJ_OK);
    const oj_sched_profile pr = oj_sched_get_profile(s);
    int64_t fed_back = 0; /* each request's tokens but its last go through a forward */
    for (int i = 0; i < NP; i++) fed_back += c->len[i] - 1;
    assert_int_equal(pr.decode_steps, 0);
    assert_int_equal(pr.prefill_steps, pr.steps);
    /* a prompt of one token (lens[0]) runs as a one-token row */
    assert_int_equal(pr.prefill_tokens, prompt_total - lens[0]);
    assert_int_equal(pr.eager_decode_rows, fed_back + lens[0]);
    free(c);
    oj_sched_free(s);
    free_prompts(p);
    oj_gpt_free(m);
}

/* Admission and growth hold blocks by one rule (a request's known tokens
 * and its next token's position): a pool of 4 blocks of 4 positions holds
 * both prompts (4 and 8 tokens) but not both requests' next tokens
 * (positions 4 and 8 start blocks 2 and 3), so the second waits until the
 * first ends instead of being admitted, prefilled and preempted at its
 * first token; no preemption happens and both get oj_generate's tokens. */
static void test_admission_growth_one_rule(void **state) {
    (void)state;
    oj_gpt *m = make("gpt2");
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0;
    oj_sched_config sc = oj_sched_config_default();
    sc.max_batch = 2;
    sc.block_size = 4;
    sc.n_blocks = 4;
    oj_sched *s = NULL;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    int32_t pa[4] = {1, 2, 3, 4}, pb[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    const int32_t *ps[2] = {pa, pb};
    const int64_t ls[2] = {4, 8}, mx[2] = {6, 2};
    collect *c = calloc(1, sizeof *c);
    for (int i = 0; i < 2; i++) {
        cfg.max_new_tokens = mx[i];
        assert_int_equal(oj_sched_submit(s, ps[i], ls[i], &cfg, 0, 0.0, collect_fn, c, &c->ids[i]),
                         OJ_OK);
    }
    while (oj_sched_busy(s)) {
        assert_int_equal(oj_sched_step(s), OJ_OK);
        oj_sched_stats st = oj_sched_get_stats(s);
        if (st.preempted != 0)
            fail_msg("step %lld: a request was preempted (%lld running, %lld queued)",
                     (long long)st.steps, (long long)st.running, (long long)st.queued);
    }
    oj_sched_stats st = oj_sched_get_stats(s);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(c->ends, 2);
    for (int i = 0; i < 2; i++) {
        int32_t *want[1];
        int64_t wl[1];
        cfg.max_new_tokens = mx[i];
        assert_int_equal(oj_generate(m, 1, &ps[i], &ls[i], &cfg, want, wl, NULL, NULL), OJ_OK);
        assert_int_equal(c->len[i], wl[0]);
        assert_memory_equal(c->toks[i], want[0], (size_t)wl[0] * sizeof(int32_t));
        free(want[0]);
    }
    free(c);
    oj_sched_free(s);
    oj_gpt_free(m);
}

typedef struct {
    int64_t tokens, ends;
    oj_finish last;
} counts;

static bool nan_lp(void *ctx, int64_t id, int32_t token, double lp, oj_finish why) {
    (void)id;
    (void)why;
    counts *c = ctx;
    if (token >= 0) {
        assert_true(isnan(lp));
        c->tokens++;
    }
    return true;
}

typedef struct {
    oj_sched *s;
    int32_t toks[32];
    double lps[32], top_lps[32][5];
    int32_t top_ids[32][5];
    int64_t n_top[32];
    int64_t len;
} tops;

static bool tops_fn(void *ctx, int64_t id, int32_t token, double lp, oj_finish why) {
    (void)id;
    (void)why;
    tops *c = ctx;
    if (token < 0) return true;
    c->toks[c->len] = token;
    c->lps[c->len] = lp;
    c->n_top[c->len] = oj_sched_top_logprobs(c->s, c->top_ids[c->len], c->top_lps[c->len], 5);
    c->len++;
    return true;
}

/* Top alternatives (OpenAI's top_logprobs): at each token event the five
 * most likely tokens and their log-probabilities are log_softmax of the
 * logits of the sequence so far decoded alone (computed here in double),
 * most likely first, the event's logprob that of the chosen token; the
 * greedy token is the first. Outside an event there are none; k = -1
 * gives events without a logprob (NAN); k outside -1..20 and unknown ids
 * are refused. */
static void test_top_logprobs(void **state) {
    (void)state;
    oj_gpt *m = make("llama");
    const int64_t V = oj_gpt_get_config(m)->vocab_size;
    oj_sched_config sc = oj_sched_config_default();
    oj_sched *s = NULL;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0;
    cfg.max_new_tokens = 6;
    int32_t hist[32] = {3, 14, 15, 92, 65};
    const int64_t n = 5;
    tops *c = calloc(1, sizeof *c);
    c->s = s;
    int64_t id = 0, other = 0;
    assert_int_equal(oj_sched_submit(s, hist, n, &cfg, 0, 0.0, tops_fn, c, &id), OJ_OK);
    counts nolp = {0, 0, OJ_FINISH_NONE};
    assert_int_equal(oj_sched_submit(s, hist, 2, &cfg, 1, 0.0, nan_lp, &nolp, &other), OJ_OK);
    assert_int_equal(oj_sched_set_top_logprobs(s, id, 21), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(oj_sched_error(s), "top logprobs 21"));
    assert_int_equal(oj_sched_set_top_logprobs(s, id + 99, 5), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_sched_set_top_logprobs(s, id, -2), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_sched_set_top_logprobs(s, other, -1), OJ_OK); /* no logprob: NAN */
    assert_int_equal(oj_sched_set_top_logprobs(s, id, 5), OJ_OK);
    while (oj_sched_busy(s)) assert_int_equal(oj_sched_step(s), OJ_OK);
    int32_t ids[5];
    double lps[5];
    assert_int_equal(oj_sched_top_logprobs(s, ids, lps, 5), 0);
    assert_int_equal(c->len, 6);
    assert_int_equal(nolp.tokens, 6);
    float *lg = malloc((size_t)V * sizeof *lg);
    double *ls = malloc((size_t)V * sizeof *ls);
    for (int64_t k = 0; k < c->len; k++) {
        alone_logits(m, hist, n + k, lg, V);
        double mx = -INFINITY, sum = 0.0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, (double)lg[v]);
        for (int64_t v = 0; v < V; v++) sum += exp((double)lg[v] - mx);
        for (int64_t v = 0; v < V; v++) ls[v] = (double)lg[v] - mx - log(sum);
        assert_int_equal(c->n_top[k], 5);
        for (int j = 0; j < 5; j++) {
            const int32_t t = c->top_ids[k][j];
            if (fabs(c->top_lps[k][j] - ls[t]) > 1e-12)
                fail_msg("token %lld alternative %d (id %d): %.17g, log_softmax %.17g", (long long)k,
                         j, t, c->top_lps[k][j], ls[t]);
            int64_t above = 0; /* ids ranked before t by (value desc, id asc) */
            for (int64_t v = 0; v < V; v++)
                if (lg[v] > lg[t] || (lg[v] == lg[t] && v < t)) above++;
            if (above != j) fail_msg("token %lld: id %d is alternative %d, ranks %lld", (long long)k, t, j, (long long)above);
        }
        assert_int_equal(c->top_ids[k][0], c->toks[k]); /* greedy */
        assert_true(fabs(c->lps[k] - ls[c->toks[k]]) <= 1e-12);
        hist[n + k] = c->toks[k];
    }
    free(lg);
    free(ls);
    free(c);
    oj_sched_free(s);
    oj_gpt_free(m);
}

/* A prompt that fills the context gives no token, as oj_generate; one
 * longer is refused as oj_generate refuses it. */
static void test_generate_full_context(void **state) {
    (void)state;
    oj_gpt *m = make("gpt2");
    int32_t *full = calloc(65, sizeof *full), one[1] = {5};
    const int32_t *pp[2] = {full, one};
    int64_t lens2[2] = {64, 1}, gl[2], wl[2];
    int32_t *got[2], *want[2];
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0;
    cfg.max_new_tokens = 4;
    assert_int_equal(oj_generate(m, 2, pp, lens2, &cfg, want, wl, NULL, NULL), OJ_OK);
    assert_int_equal(oj_batch_generate(m, 2, pp, lens2, &cfg, NULL, got, gl, NULL, NULL), OJ_OK);
    assert_int_equal(gl[0], 0);
    assert_int_equal(wl[0], 0);
    assert_int_equal(gl[1], 4);
    assert_memory_equal(got[1], want[1], 4 * sizeof(int32_t));
    for (int i = 0; i < 2; i++) free(got[i]), free(want[i]);
    lens2[0] = 65;
    assert_int_equal(oj_batch_generate(m, 2, pp, lens2, &cfg, NULL, got, gl, NULL, NULL),
                     OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(eng), "the context holds 64"));
    assert_null(got[0]);
    oj_clear_error(eng);
    free(full);
    oj_gpt_free(m);
}

/* max_batch 3 (requests join as others leave), chunks of 8 prompt tokens,
 * blocks of 4 positions, 12 packed tokens per step. */
static oj_sched_config small_sched(void) {
    oj_sched_config sc = oj_sched_config_default();
    sc.max_batch = 3;
    sc.block_size = 4;
    sc.n_blocks = 64;
    sc.prefill_chunk = 8;
    sc.max_step_tokens = 12;
    return sc;
}

static void test_generate_gpt2(void **state) {
    (void)state;
    oj_sched_config sc = small_sched();
    check_generate("gpt2", &sc, 0.0);
    check_generate("gpt2", NULL, 0.0); /* every prompt at once, whole prompts */
    check_generate("gpt2", &sc, 0.9);
}
/* The scheduler's CUDA path on the CPU (OJAS_SCHED_DECODE_PAGED=1): the
 * one-token rows of a step through oj_gpt_decode_paged (the device's
 * argmax when every such row is greedy), the prompt chunks through a
 * forward of their own; still oj_generate's tokens, greedy, sampled and
 * with preemption. */
static void test_generate_decode_paged(void **state) {
    (void)state;
    assert_int_equal(setenv("OJAS_SCHED_DECODE_PAGED", "1", 1), 0);
    oj_sched_config sc = small_sched();
    check_generate("gpt2", &sc, 0.0);
    check_generate("qwen", &sc, 0.9);
    check_preemption("llama", 0.0);
    unsetenv("OJAS_SCHED_DECODE_PAGED");
}
static void test_generate_llama(void **state) {
    (void)state;
    oj_sched_config sc = small_sched();
    check_generate("llama", &sc, 0.0);
    check_generate("qwen", &sc, 0.0);
    check_generate("llama31", &sc, 0.0);
    check_generate("llama", &sc, 0.9);
}

/* A pool of 16 blocks holds the 40-token prompt's request (15 blocks) and
 * little else: the others wait in the queue, and the tokens do not change. */
static void test_generate_full_pool(void **state) {
    (void)state;
    oj_sched_config sc = small_sched();
    sc.n_blocks = 16;
    check_generate("llama", &sc, 0.0);
}


static bool count(void *ctx, int64_t id, int32_t token, double lp, oj_finish why) {
    (void)id;
    counts *c = ctx;
    if (token >= 0) {
        assert_true(lp <= 0.0 && isfinite(lp));
        c->tokens++;
    } else {
        c->ends++;
        c->last = why;
    }
    return true;
}

/* Cancel (queued and running) and timeouts give every block back; the
 * scheduler's refusals name what was wrong and queue nothing. */
static void test_cancel_timeout_refusals(void **state) {
    (void)state;
    oj_gpt *m = make("gpt2");
    oj_sched_config sc = small_sched();
    sc.max_batch = 1;
    sc.max_queue = 2;
    oj_sched *s = NULL;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0;
    cfg.max_new_tokens = 30;
    int32_t prompt[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    counts c = {0, 0, OJ_FINISH_NONE};
    int64_t a, b, x;
    assert_int_equal(oj_sched_submit(s, prompt, 10, &cfg, 0, 0.0, count, &c, &a), OJ_OK);
    assert_int_equal(oj_sched_submit(s, prompt, 10, &cfg, 0, 0.0, count, &c, &b), OJ_OK);
    assert_int_equal(oj_sched_submit(s, prompt, 3, &cfg, 0, 0.0, count, &c, &x), OJ_ERR_CAPACITY);
    assert_non_null(strstr(oj_sched_error(s), "queue is full"));
    for (int i = 0; i < 3; i++) assert_int_equal(oj_sched_step(s), OJ_OK);
    oj_sched_stats st = oj_sched_get_stats(s);
    assert_int_equal(st.running, 1);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.blocks_used, 3); /* the 12 positions written, in blocks of 4 */
    assert_int_equal(oj_sched_cancel(s, b), OJ_OK); /* queued */
    assert_int_equal(oj_sched_cancel(s, a), OJ_OK); /* running */
    assert_int_equal(oj_sched_cancel(s, a), OJ_ERR_INVALID_ARGUMENT);
    st = oj_sched_get_stats(s);
    assert_int_equal(st.blocks_used, 0);
    assert_false(oj_sched_busy(s));
    assert_int_equal(c.ends, 0); /* cancel calls no event */
    /* a deadline already past: the end event says timeout, blocks are free */
    assert_int_equal(oj_sched_submit(s, prompt, 10, &cfg, 0, 1e-9, count, &c, &a), OJ_OK);
    while (oj_sched_busy(s)) assert_int_equal(oj_sched_step(s), OJ_OK);
    assert_int_equal(c.ends, 1);
    assert_int_equal(c.last, OJ_FINISH_TIMEOUT);
    assert_int_equal(oj_sched_get_stats(s).blocks_used, 0);
    /* runs to max_new_tokens */
    c.tokens = 0;
    assert_int_equal(oj_sched_submit(s, prompt, 10, &cfg, 0, 0.0, count, &c, &a), OJ_OK);
    while (oj_sched_busy(s)) assert_int_equal(oj_sched_step(s), OJ_OK);
    assert_int_equal(c.last, OJ_FINISH_LENGTH);
    assert_int_equal(c.tokens, 30);
    /* refusals */
    int32_t bad[2] = {1, 97};
    assert_int_equal(oj_sched_submit(s, bad, 2, &cfg, 0, 0.0, count, &c, &x), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(oj_sched_error(s), "outside the vocabulary"));
    int32_t *longp = calloc(64, sizeof *longp);
    assert_int_equal(oj_sched_submit(s, longp, 64, &cfg, 0, 0.0, count, &c, &x), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_sched_error(s), "context holds 64"));
    cfg.max_new_tokens = 60; /* 3 + 59 positions: 16 blocks > the pool's... */
    oj_sched_free(s);
    sc.n_blocks = 8;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_OK);
    assert_int_equal(oj_sched_submit(s, longp, 3, &cfg, 0, 0.0, count, &c, &x), OJ_ERR_CAPACITY);
    assert_non_null(strstr(oj_sched_error(s), "the pool has 8"));
    cfg.temperature = NAN;
    assert_int_equal(oj_sched_submit(s, longp, 3, &cfg, 0, 0.0, count, &c, &x), OJ_ERR_INVALID_ARGUMENT);
    free(longp);
    oj_sched_free(s);
    /* a pool larger than the budget: refused, nothing kept */
    oj_budget *tight = oj_budget_create(oj_engine_budget(eng), "tight", 4096);
    oj_budget *prev = oj_engine_use_budget(eng, tight);
    sc.n_blocks = 1000;
    assert_int_equal(oj_sched_create(m, &sc, &s), OJ_ERR_CAPACITY);
    assert_null(s);
    oj_clear_error(eng);
    oj_engine_use_budget(eng, prev);
    assert_int_equal(oj_budget_current(tight), 0);
    oj_budget_free(tight);
    oj_gpt_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_logits_gpt2),
        cmocka_unit_test(test_packed_logits_llama),
        cmocka_unit_test(test_packed_logits_qwen),
        cmocka_unit_test(test_decode_buckets),
        cmocka_unit_test(test_generate_gpt2),
        cmocka_unit_test(test_generate_llama),
        cmocka_unit_test(test_generate_decode_paged),
        cmocka_unit_test(test_generate_full_pool),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_preempt_in_prefill),
        cmocka_unit_test(test_admission_growth_one_rule),
        cmocka_unit_test(test_profile),
        cmocka_unit_test(test_profile_eager),
        cmocka_unit_test(test_device_greedy_logprobs),
        cmocka_unit_test(test_top_logprobs),
        cmocka_unit_test(test_generate_full_context),
        cmocka_unit_test(test_cancel_timeout_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
