/* Helpers shared by the tests that run tiny GPT models on one engine
 * (test_gpt.c, test_optim.c, test_gpt_hf.c, test_gpt_lora.c,
 * test_hf_export.c): a small model, a checksum of its weights, token ids,
 * a one-thread engine, logits on a fixed prompt, a text file, a scratch
 * directory. */
#ifndef OJAS_GPT_TESTUTIL_H
#define OJAS_GPT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/gpt.h"

/* The preset with vocab_size 50 and block_size 16 (n_kv_head too when > 0),
 * made on e with seed 3; the caller frees it. */
static inline oj_gpt *gt_tiny_model(oj_engine *e, const char *preset, int64_t n_kv_head) {
    oj_gpt_config c;
    assert_true(oj_gpt_preset(preset, &c));
    c.vocab_size = 50;
    c.block_size = 16;
    if (n_kv_head > 0)
        c.n_kv_head = n_kv_head;
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(e, &c, 3, &m), OJ_OK);
    return m;
}

/* A weighted sum of every parameter's values (detects any change). */
static inline double gt_checksum(oj_gpt *m) {
    oj_named_tensors sd = oj_gpt_state_dict(m);
    double s = 0;
    for (int64_t i = 0; i < sd.n; i++)
        for (int64_t j = 0; j < oj_numel(sd.tensors[i]); j++)
            s += oj_item_at(sd.tensors[i], j) * (double)(j % 7 + 1);
    return s;
}

/* [B, T] i32 token ids below 50 (B T <= 64), owned by e's current scope. */
static inline oj_tensor *gt_ids(oj_engine *e, int64_t B, int64_t T) {
    int32_t ids[64];
    assert_true(B * T <= 64);
    for (int64_t i = 0; i < B * T; i++)
        ids[i] = (int32_t)((i * 13 + 5) % 50);
    int64_t shape[2] = {B, T};
    return oj_from_host(e, 2, shape, OJ_I32, ids, (size_t)(B * T) * sizeof(int32_t));
}

/* A CPU engine with one thread (asserts it was made); the caller frees it. */
static inline oj_engine *gt_engine(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = 1;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

/* A small config of family fam: vocab 48, block 16, 2 layers, 4 heads
 * (2 KV heads but on GPT-2), n_embd 32, init_std 0.02. */
static inline oj_gpt_config gt_small_config(oj_gpt_family fam) {
    oj_gpt_config c = {0};
    c.family = fam;
    c.vocab_size = 48;
    c.block_size = 16;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = fam == OJ_GPT2 ? 4 : 2;
    c.n_embd = 32;
    c.mlp_hidden = fam == OJ_GPT2 ? 128 : 40;
    c.norm_eps = fam == OJ_GPT2 ? 1e-5 : 1e-6;
    c.rope_theta = 10000;
    c.init_std = 0.02;
    return c;
}

/* Writes text to dir/name (asserts it was written). */
static inline void gt_write_text(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* A fresh $TMPDIR/ojas-<tag>-XXXXXX (/tmp without TMPDIR) written into dir
 * (n bytes); 0, or -1 when it cannot be made. */
static inline int gt_tmpdir(char *dir, size_t n, const char *tag) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, n, "%s/ojas-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    return mkdtemp(dir) ? 0 : -1;
}

/* Removes dir and all below it (a warning on stderr when it cannot). */
static inline void gt_rmtree(const char *dir) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* The logits of m on a fixed [1, 10] prompt (ids below 40), copied to the
 * host: [10 * V] f32, malloc'd (the caller frees). Asserts the forward ran
 * and that the vocabulary is V. Runs without grad in a scope of its own. */
static inline float *gt_logits(oj_gpt *m, int64_t V) {
    oj_engine *eng = oj_gpt_engine(m);
    oj_scope_begin(eng);
    bool prev = oj_set_grad_enabled(eng, false);
    int32_t ids[10];
    for (int i = 0; i < 10; i++) ids[i] = (int32_t)((i * 7 + 3) % 40);
    int64_t shape[2] = {1, 10};
    oj_tensor *x = oj_from_host(eng, 2, shape, OJ_I32, ids, sizeof ids);
    oj_tensor *y = oj_gpt_forward(m, x);
    assert_non_null(y);
    assert_int_equal(oj_size(y, 2), V);
    float *out = malloc((size_t)(10 * V) * sizeof *out);
    assert_non_null(out);
    assert_int_equal(oj_to_host(y, out, (size_t)(10 * V) * sizeof *out), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    oj_scope_end(eng);
    return out;
}

/* Defines g_dir, a scratch directory $TMPDIR/ojas-<tag>-XXXXXX made by
 * setup and removed with all below it by teardown (cmocka group
 * fixtures). */
#define GT_SCRATCH_DIR(tag)                                                                 \
    static char g_dir[256];                                                                 \
    static int setup(void **state) {                                                        \
        (void)state;                                                                        \
        return gt_tmpdir(g_dir, sizeof g_dir, tag);                                         \
    }                                                                                       \
    static int teardown(void **state) {                                                     \
        (void)state;                                                                        \
        gt_rmtree(g_dir);                                                                   \
        return 0;                                                                           \
    }

#endif
