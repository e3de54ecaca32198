// test: serving on the GPU. The continuous-batching scheduler on a CUDA
// engine with EXACT numerics, as ojas serve runs (prefill through oj_gpt_forward_paged with device block tables,
// decode steps through the CUDA graph of their batch-size bucket) gives
// every greedy request the tokens oj_generate gives it alone on the same
// engine, for mixed-length prompts that join and leave the batch, gpt2 and
// llama (GQA, Qwen-style biases and QK-norm); the graph path of a decode
// bucket gives the eager path's logits (within 1e-5 relative, the same
// greedy token; cuBLAS may pick other kernels under capture), the padding
// rows write nothing, and the packed forward's logits are the CPU's within f32
// rounding.
//
// The packed-rows kernels (attention, KV write) match the CPU's ops.
//
// Skips (77) without a CUDA device. OJAS_GPU_TEST_ON_CPU=1 runs the same
// checks with a CPU engine in place of the CUDA one (a self-check; the
// graph is then the eager path).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "gpu_testutil.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"
#include "ojas/serve.h"
#include "../unit/serve_testutil.h"

static bool on_cpu;

/* A small random model of family kind ("gpt2", "llama", "qwen") on e. */
static oj_gpt *make(oj_engine *e, const char *kind) {
    return sv_model(e, kind, 211, 128, 64);
}

#define NP 11
static const int64_t lens[NP] = {1, 5, 17, 40, 3, 23, 9, 64, 2, 31, 12};

static void prompts(int32_t *buf[NP]) {
    sv_prompts(NP, lens, 211, buf);
}

/* Greedy: oj_batch_generate (max_batch mb, so requests queue, join and
 * leave; chunked prefill; graphs on or off) == oj_generate per prompt. */
static void check_batched_greedy(const char *kind, int64_t mb, bool graphs) {
    /* EXACT, as ojas serve runs: FAST's TF32 GEMMs round differently at
     * each batch size, which may flip a near tie in a greedy choice */
    oj_engine *e = gpu_test_engine(true, on_cpu, OJ_NUMERICS_EXACT, 7);
    oj_gpt *m = make(e, kind);
    int32_t *p[NP];
    prompts(p);
    oj_sampler_config cfg = oj_sampler_config_default();
    cfg.temperature = 0.0;
    cfg.max_new_tokens = 24;
    oj_sched_config sc = oj_sched_config_default();
    sc.max_batch = mb;
    sc.max_step_tokens = 48; /* long prompts are prefilled in chunks */
    sc.prefill_chunk = 16;
    sc.block_size = 8;
    sc.decode_graphs = graphs;
    int32_t *want[NP], *got[NP];
    int64_t wl[NP], gl[NP];
    for (int i = 0; i < NP; i++) {
        const int32_t *one[1] = {p[i]};
        int32_t *w[1];
        int64_t l[1];
        if (oj_generate(m, 1, one, &lens[i], &cfg, w, l, NULL, NULL) != OJ_OK)
            fail_msg("generate: %s", oj_last_error(e));
        want[i] = w[0];
        wl[i] = l[0];
    }
    const int32_t *const *pp = (const int32_t *const *)p;
    if (oj_batch_generate(m, NP, pp, lens, &cfg, &sc, got, gl, NULL, NULL) != OJ_OK)
        fail_msg("batch_generate: %s", oj_last_error(e));
    for (int i = 0; i < NP; i++) {
        if (gl[i] != wl[i] || memcmp(got[i], want[i], (size_t)wl[i] * sizeof(int32_t)) != 0) {
            int64_t k = 0;
            while (k < gl[i] && k < wl[i] && got[i][k] == want[i][k]) k++;
            fail_msg("%s max_batch %lld graphs %d: prompt %d (%lld tokens): batched gives %lld "
                     "tokens, alone %lld; first difference at token %lld",
                     kind, (long long)mb, (int)graphs, i, (long long)lens[i], (long long)gl[i],
                     (long long)wl[i], (long long)k);
        }
        free(want[i]);
        free(got[i]);
        free(p[i]);
    }
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static void test_batched_greedy_gpt2(void **state) {
    (void)state;
    check_batched_greedy("gpt2", 4, true);
    check_batched_greedy("gpt2", 16, true);
    check_batched_greedy("gpt2", 5, false);
}

static void test_batched_greedy_llama(void **state) {
    (void)state;
    check_batched_greedy("llama", 8, true);
    check_batched_greedy("llama", 8, false);
    check_batched_greedy("qwen", 3, true);
}

/* Prefill NP prompts into two pools (one per path), then decode steps of
 * n = 6, 3, 11, 6 sequences: the graph path's logits equal the eager
 * path's (1e-5 relative, the same argmax), every step (the first use of a bucket captures, the
 * later ones replay; the last two wait for the device after the launch, as a profile does;
 * a step of fewer than all sequences is begun, the others' next token forwarded while it runs,
 * then ended, as the scheduler does with prompt chunks).
 * The graph path ends with buckets 4, 8, 16 captured; its pool's times count the four steps. */
static void test_graph_equals_eager(void **state) {
    (void)state;
    oj_engine *e = gpu_test_engine(true, on_cpu, OJ_NUMERICS_FAST, 7);
    oj_gpt *m = make(e, "qwen");
    const int64_t V = oj_gpt_get_config(m)->vocab_size, BS = 8;
    int32_t *p[NP];
    prompts(p);
    oj_kv_pool *pools[2] = {NULL, NULL};
    int32_t tables[NP][16], packed[256];
    const int32_t *tp[NP];
    int64_t start[NP + 1], past[2][NP];
    const int64_t N = sv_pack(NP, p, lens, 176, tables, tp, start, packed);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(oj_kv_pool_create(m, 176, BS, &pools[k]), OJ_OK);
        int64_t zero[NP] = {0};
        sv_forward(m, pools[k], packed, N, NP, start, zero, tp, NULL);
        for (int i = 0; i < NP; i++) past[k][i] = lens[i];
    }
    float *lg[2] = {malloc((size_t)(NP * V) * sizeof(float)), malloc((size_t)(NP * V) * sizeof(float))};
    const int64_t steps[4] = {6, 3, NP, 6};
    for (int t = 0; t < 4; t++) {
        const int64_t n = steps[t];
        int32_t tok[NP];
        for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 13 + t * 7 + 1) % V);
        int32_t am[2][NP];
        float alp[2][NP];
        oj_kv_pool_set_timing(pools[1], t >= 2); /* the last two steps wait for the device */
        for (int k = 0; k < 2; k++) {
            if (n < NP) { /* begun, the other sequences' token forwarded, ended */
                if (oj_gpt_decode_paged_begin(m, pools[k], n, tok, past[k], tp, k == 1) != OJ_OK)
                    fail_msg("decode_paged_begin (%s): %s", k ? "graph" : "eager", oj_last_error(e));
                int32_t more[NP];
                int64_t st1[NP + 1];
                for (int64_t i = 0; i <= NP - n; i++) st1[i] = i;
                for (int64_t i = 0; i < NP - n; i++) more[i] = (int32_t)((i * 5 + 2) % V);
                sv_forward(m, pools[k], more, NP - n, NP - n, st1, past[k] + n, tp + n, NULL);
                for (int64_t i = n; i < NP; i++) past[k][i]++;
                if (oj_gpt_decode_paged_end(m, pools[k], lg[k], am[k], alp[k]) != OJ_OK)
                    fail_msg("decode_paged_end (%s): %s", k ? "graph" : "eager", oj_last_error(e));
            } else if (oj_gpt_decode_paged(m, pools[k], n, tok, past[k], tp, k == 1, lg[k], am[k],
                                           alp[k]) != OJ_OK) {
                fail_msg("decode_paged (%s): %s", k ? "graph" : "eager", oj_last_error(e));
            }
            for (int64_t i = 0; i < n; i++) past[k][i]++;
        }
        for (int64_t r = 0; r < n; r++) {
            int64_t best[2] = {0, 0};
            for (int64_t v = 0; v < V; v++) {
                const float x = lg[0][r * V + v], y = lg[1][r * V + v];
                if (!(fabsf(x - y) <= 1e-5f * fmaxf(1.0f, fabsf(x))))
                    fail_msg("step %d (%lld sequences): logit %lld of row %lld: graph %.9g, eager %.9g",
                             t, (long long)n, (long long)v, (long long)r, y, x);
                for (int k = 0; k < 2; k++)
                    if (lg[k][r * V + v] > lg[k][r * V + best[k]]) best[k] = v;
            }
            if (best[0] != best[1])
                fail_msg("step %d row %lld: greedy token graph %lld, eager %lld", t, (long long)r,
                         (long long)best[1], (long long)best[0]);
            for (int k = 0; k < 2; k++) { /* the device's argmax and its logprob */
                double sum = 0.0;
                for (int64_t v = 0; v < V; v++) sum += exp((double)lg[k][r * V + v] - lg[k][r * V + best[k]]);
                if (am[k][r] != best[k] || !(fabs((double)alp[k][r] + log(sum)) <= 1e-4))
                    fail_msg("step %d row %lld (%s): argmax %d logprob %.9g, from the logits %lld %.9g",
                             t, (long long)r, k ? "graph" : "eager", am[k][r], alp[k][r],
                             (long long)best[k], -log(sum));
            }
        }
    }
    const oj_kv_pool_times tm = oj_kv_pool_get_times(pools[1]);
    assert_int_equal(tm.steps, 4);
    assert_true(tm.launch_s > 0.0 && tm.upload_s >= 0.0 && tm.readback_s > 0.0 && tm.wait_s >= 0.0);
    if (!on_cpu) {
        assert_true(tm.wait_s > 0.0); /* the synchronised steps waited for their replay */
        assert_true(oj_gpt_decode_paged_graphed(pools[1], 3));
        assert_true(oj_gpt_decode_paged_graphed(pools[1], 6));
        assert_true(oj_gpt_decode_paged_graphed(pools[1], NP));
        assert_false(oj_gpt_decode_paged_graphed(pools[0], 6));
    }
    free(lg[0]);
    free(lg[1]);
    for (int i = 0; i < NP; i++) free(p[i]);
    oj_kv_pool_free(pools[0]);
    oj_kv_pool_free(pools[1]);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

/* The packed forward with device tables (prompts of every length at once)
 * and a decode step give the CPU's logits within f32 rounding. */
static void test_packed_matches_cpu(void **state) {
    (void)state;
    oj_engine *ge = gpu_test_engine(true, on_cpu, OJ_NUMERICS_EXACT, 7);
    oj_engine *ce = gpu_test_engine(false, on_cpu, OJ_NUMERICS_EXACT, 7);
    const char *kinds[2] = {"gpt2", "llama"};
    for (int k = 0; k < 2; k++) {
        oj_gpt *gm = make(ge, kinds[k]), *cm = make(ce, kinds[k]);
        const int64_t V = oj_gpt_get_config(gm)->vocab_size, BS = 8;
        int32_t *p[NP];
        prompts(p);
        int32_t tables[NP][16], packed[256];
        const int32_t *tp[NP];
        int64_t start[NP + 1], zero[NP] = {0};
        const int64_t N = sv_pack(NP, p, lens, 176, tables, tp, start, packed);
        oj_kv_pool *gp = NULL, *cp = NULL;
        assert_int_equal(oj_kv_pool_create(gm, 176, BS, &gp), OJ_OK);
        assert_int_equal(oj_kv_pool_create(cm, 176, BS, &cp), OJ_OK);
        float *a = malloc((size_t)(NP * V) * sizeof *a), *b = malloc((size_t)(NP * V) * sizeof *b);
        sv_forward(gm, gp, packed, N, NP, start, zero, tp, a);
        sv_forward(cm, cp, packed, N, NP, start, zero, tp, b);
        double worst = 0.0;
        for (int64_t i = 0; i < NP * V; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
        if (!(worst <= 1e-3)) fail_msg("%s prefill: max |gpu - cpu| logit %g > 1e-3", kinds[k], worst);
        int32_t tok[NP];
        int64_t past[NP];
        for (int i = 0; i < NP; i++) {
            tok[i] = (int32_t)((i * 5 + 2) % V);
            past[i] = lens[i];
        }
        assert_int_equal(oj_gpt_decode_paged(gm, gp, NP, tok, past, tp, true, a, NULL, NULL), OJ_OK);
        assert_int_equal(oj_gpt_decode_paged(cm, cp, NP, tok, past, tp, false, b, NULL, NULL), OJ_OK);
        worst = 0.0;
        for (int64_t i = 0; i < NP * V; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
        if (!(worst <= 1e-3)) fail_msg("%s decode: max |gpu - cpu| logit %g > 1e-3", kinds[k], worst);
        free(a);
        free(b);
        for (int i = 0; i < NP; i++) free(p[i]);
        oj_kv_pool_free(gp);
        oj_kv_pool_free(cp);
        oj_gpt_free(gm);
        oj_gpt_free(cm);
    }
    assert_int_equal(oj_engine_live_tensors(ge), 0);
    oj_engine_free(ge);
    oj_engine_free(ce);
}

/* A tensor of n uniform values in [-1, 1] (seed) cast to dt on e. */
static oj_tensor *rnd(oj_engine *e, int rank, const int64_t *shape, oj_dtype dt, uint32_t seed) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    double *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (double)((seed >> 8) % 2001) / 1000.0 - 1.0;
    }
    oj_tensor *t = oj_from_host(e, rank, shape, OJ_F64, h, (size_t)n * sizeof *h);
    oj_tensor *c = oj_cast(t, dt);
    free(h);
    return c;
}

/* max |a - b| (any devices), as f64. */
static double max_diff(oj_tensor *a, oj_tensor *b) {
    const int64_t n = oj_numel(a);
    double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    assert_int_equal(oj_to_host(oj_contiguous(oj_cast(a, OJ_F64)), x, (size_t)n * sizeof *x), OJ_OK);
    assert_int_equal(oj_to_host(oj_contiguous(oj_cast(b, OJ_F64)), y, (size_t)n * sizeof *y), OJ_OK);
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs(x[i] - y[i]);
        if (!(d <= m)) m = d;
    }
    free(x);
    free(y);
    return m;
}

/* The packed-rows kernels against the CPU's ops: attention over rows of
 * three sequences (GQA 14/2, D 64, blocks of 16, a strided q, an inactive
 * row) within f32/bf16 rounding, and kv_write exactly (a copy). */
static void test_varlen_kernels(void **state) {
    (void)state;
    oj_engine *ge = gpu_test_engine(true, on_cpu, OJ_NUMERICS_FAST, 7);
    oj_engine *ce = gpu_test_engine(false, on_cpu, OJ_NUMERICS_EXACT, 7);
    const oj_dtype dts[2] = {OJ_F32, OJ_BF16};
    const double tols[2] = {2e-6, 2e-2};
    for (int k = 0; k < 2; k++) {
        oj_scope_begin(ge);
        oj_scope_begin(ce);
        enum { H = 14, Hkv = 2, D = 64, BS = 16, NB = 40, N = 7, MB = 8 };
        int64_t ps[4] = {NB, Hkv, BS, D}, q0s[4] = {1, N, H, D}, ts[2] = {3, MB}, ns[1] = {N};
        int64_t xs[4] = {1, Hkv, N, D};
        int32_t tab[3 * MB];
        for (int i = 0; i < 3 * MB; i++) tab[i] = (int32_t)((i * 7 + 3) % NB);
        const int32_t seq[N] = {0, 2, 1, 2, 0, 1, 2}, pos[N] = {9, 100, 60, -1, 0, 127, 15};
        const int32_t slot[N] = {5, 600, -1, 0, 333, 17, 639};
        oj_tensor *in_c[6], *in_g[6];
        in_c[0] = rnd(ce, 4, ps, dts[k], 1);
        in_c[1] = rnd(ce, 4, ps, dts[k], 2);
        in_c[2] = oj_transpose(rnd(ce, 4, q0s, dts[k], 3), 1, 2); /* [1, H, N, D], strided */
        in_c[3] = oj_from_host(ce, 2, ts, OJ_I32, tab, sizeof tab);
        in_c[4] = oj_from_host(ce, 1, ns, OJ_I32, seq, sizeof seq);
        in_c[5] = oj_from_host(ce, 1, ns, OJ_I32, pos, sizeof pos);
        for (int i = 0; i < 6; i++) {
            in_g[i] = i == 2 ? oj_transpose(oj_to_device(oj_contiguous(oj_transpose(in_c[2], 1, 2)), ge), 1, 2)
                             : oj_to_device(in_c[i], ge);
            assert_non_null(in_g[i]);
        }
        oj_tensor *yc = oj__paged_attention_varlen(in_c[2], in_c[0], in_c[1], in_c[3], in_c[4], in_c[5], NAN);
        oj_tensor *yg = oj__paged_attention_varlen(in_g[2], in_g[0], in_g[1], in_g[3], in_g[4], in_g[5], NAN);
        if (yc == NULL || yg == NULL) fail_msg("varlen: %s / %s", oj_last_error(ce), oj_last_error(ge));
        const double d = max_diff(yg, yc);
        if (!(d <= tols[k])) fail_msg("%s varlen attention: max |gpu - cpu| %g > %g", oj_dtype_name(dts[k]), d, tols[k]);
        oj_tensor *xc = rnd(ce, 4, xs, dts[k], 4), *xg = oj_to_device(xc, ge);
        oj_tensor *sc = oj_from_host(ce, 1, ns, OJ_I32, slot, sizeof slot), *sg = oj_to_device(sc, ge);
        assert_int_equal(oj__paged_kv_write_(in_c[0], xc, sc), OJ_OK);
        assert_int_equal(oj__paged_kv_write_(in_g[0], xg, sg), OJ_OK);
        if (max_diff(in_g[0], in_c[0]) != 0.0) fail_msg("%s kv_write differs", oj_dtype_name(dts[k]));
        oj_scope_end(ce);
        oj_scope_end(ge);
    }
    assert_int_equal(oj_engine_live_tensors(ge), 0);
    oj_engine_free(ge);
    oj_engine_free(ce);
}

int main(void) {
    int rc = gpu_test_probe(true, &on_cpu);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varlen_kernels),
        cmocka_unit_test(test_graph_equals_eager),
        cmocka_unit_test(test_packed_matches_cpu),
        cmocka_unit_test(test_batched_greedy_gpt2),
        cmocka_unit_test(test_batched_greedy_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
