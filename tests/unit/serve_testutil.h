/* Helpers shared by the tests of paged serving (test_serve_batch.c on the
 * CPU, tests/gpu/test_gpu_serve.c on a device): a small random model of one
 * family, prompts of given lengths, the prompts packed behind interleaved
 * block tables, and one paged forward. Every failure fails the calling
 * test. */
#ifndef OJAS_SERVE_TESTUTIL_H
#define OJAS_SERVE_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/gpt.h"
#include "ojas/ops.h"

/* A random model on e (seed 11, init_std 0.3 so that logits spread) with
 * vocabulary V and context ctx: kind "gpt2" (the gpt2-tiny preset) or a
 * llama of 2 layers, 4 heads, 2 kv heads, width C and MLP width 3 C / 2;
 * "qwen" adds Qwen-style biases and QK-norm, "llama31" Llama 3.1 rope
 * scaling and an untied head. The caller frees it. */
static inline oj_gpt *sv_model(oj_engine *e, const char *kind, int64_t V, int64_t ctx, int64_t C) {
    oj_gpt_config c;
    if (strcmp(kind, "gpt2") == 0) {
        assert_true(oj_gpt_preset("gpt2-tiny", &c));
    } else {
        memset(&c, 0, sizeof c);
        c.family = OJ_LLAMA;
        c.n_layer = 2;
        c.n_head = 4;
        c.n_kv_head = 2;
        c.n_embd = C;
        c.mlp_hidden = C * 3 / 2;
        c.norm_eps = 1e-6;
        c.rope_theta = 10000.0;
        c.qkv_bias = strcmp(kind, "qwen") == 0;
        c.qk_norm = strcmp(kind, "qwen") == 0;
        if (strcmp(kind, "llama31") == 0) { /* rope scaling: the cos/sin tables */
            c.rope_factor = 8.0;
            c.rope_low_freq_factor = 1.0;
            c.rope_high_freq_factor = 4.0;
            c.rope_original_context = 16;
            c.untied_head = true;
        }
    }
    c.vocab_size = V;
    c.block_size = ctx;
    c.init_std = 0.3; /* at 0.02 a tiny model repeats one token; greedy ties */
    oj_gpt *m = NULL;
    if (oj_gpt_create(e, &c, 11, &m) != OJ_OK) fail_msg("gpt_create: %s", oj_last_error(e));
    return m;
}

/* n prompts (malloc'd; the caller frees each): prompt i has lens[i] ids
 * below V. */
static inline void sv_prompts(int n, const int64_t *lens, int64_t V, int32_t **buf) {
    for (int i = 0; i < n; i++) {
        buf[i] = malloc((size_t)lens[i] * sizeof(int32_t));
        for (int64_t t = 0; t < lens[i]; t++) buf[i][t] = (int32_t)((t * 31 + i * 17 + 3) % V);
    }
}

/* Hands out pool blocks nblocks-1, nblocks-2, ... interleaved across the n
 * prompts (tables[i][b], block 0 once they run out; tp[i] points at row i)
 * and packs the prompts one after another into packed: start[i] is prompt
 * i's first position, start[n] the packed length N, which is returned. */
static inline int64_t sv_pack(int n, int32_t *const *p, const int64_t *lens, int nblocks,
                              int32_t (*tables)[16], const int32_t **tp, int64_t *start,
                              int32_t *packed) {
    int next = nblocks - 1;
    for (int b = 0; b < 16; b++)
        for (int i = 0; i < n; i++) tables[i][b] = next >= 0 ? next-- : 0;
    int64_t N = 0;
    start[0] = 0;
    for (int i = 0; i < n; i++) {
        tp[i] = tables[i];
        memcpy(&packed[N], p[i], (size_t)lens[i] * sizeof(int32_t));
        N += lens[i];
        start[i + 1] = N;
    }
    return N;
}

/* One oj_gpt_forward_paged of the n tokens tok for n_seq sequences on m's
 * engine; each sequence's last logits, [n_seq, V] f32, go to dst unless dst
 * is NULL. */
static inline void sv_forward(oj_gpt *m, oj_kv_pool *pool, const int32_t *tok, int64_t n,
                              int64_t n_seq, const int64_t *start, const int64_t *past,
                              const int32_t *const *tp, float *dst) {
    oj_engine *e = oj_gpt_engine(m);
    const int64_t V = oj_gpt_get_config(m)->vocab_size;
    oj_scope_begin(e);
    int64_t s[2] = {1, n};
    oj_tensor *idx = oj_from_host(e, 2, s, OJ_I32, tok, (size_t)n * sizeof(int32_t));
    oj_tensor *lg = oj_gpt_forward_paged(m, pool, idx, n_seq, start, past, tp);
    if (lg == NULL) fail_msg("forward_paged: %s", oj_last_error(e));
    assert_int_equal(oj_size(lg, 1), n_seq);
    if (dst != NULL) assert_int_equal(oj_to_host(lg, dst, (size_t)(n_seq * V) * sizeof *dst), OJ_OK);
    oj_scope_end(e);
}

#endif
