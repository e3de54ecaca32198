/* Helpers shared by the test_train_*.c tests: a temporary run directory
 * with tiny generated token shards and a small trainer config. */
#ifndef OJAS_TRAIN_TESTUTIL_H
#define OJAS_TRAIN_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ojas/data.h"
#include "ojas/train.h"

/* A fresh directory under $TMPDIR (or /tmp) into buf. */
static inline int tt_tmpdir(char *buf, size_t len) {
    const char *base = getenv("TMPDIR");
    snprintf(buf, len, "%s/ojas-train-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(buf) ? 0 : -1;
}

static inline void tt_rmdir(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* dir/data/{train,val}_000000.bin: a noisy affine recurrence over ids < 512
 * (learnable, so the loss falls) of n_train and n_val tokens. */
static inline int tt_write_shards(const char *dir, int64_t n_train, int64_t n_val) {
    char p[4200];
    snprintf(p, sizeof p, "%s/data", dir);
    if (mkdir(p, 0777) != 0)
        return -1;
    int64_t n = n_train > n_val ? n_train : n_val;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    if (!tok)
        return -1;
    uint32_t s = 12345, x = 7;
    for (int pass = 0; pass < 2; pass++) {
        int64_t m = pass ? n_val : n_train;
        for (int64_t i = 0; i < m; i++) {
            s = s * 1664525u + 1013904223u;
            x = (s >> 28) == 0 ? (s >> 8) % 512 : (x * 5 + 3) % 512;
            tok[i] = (int32_t)x;
        }
        snprintf(p, sizeof p, "%s/data/%s_000000.bin", dir, pass ? "val" : "train");
        if (oj_shard_write(p, tok, m, 1, NULL) != OJ_OK) {
            free(tok);
            return -1;
        }
    }
    free(tok);
    return 0;
}

/* nanolab-tiny on dir/data, EXACT numerics, Muon + AdamW, evals and
 * checkpoints every 3 steps, peak_flops given (no measurement). */
static inline oj_train_config tt_config(const char *dir) {
    oj_train_config c = oj_train_config_default();
    snprintf(c.model, sizeof c.model, "nanolab-tiny");
    snprintf(c.data_dir, sizeof c.data_dir, "%s/data", dir);
    c.vocab_size = 512;
    c.seq_len = 16;
    c.batch_size = 2;
    c.grad_accum = 2;
    c.max_steps = 6;
    c.warmup_steps = 2;
    c.eval_every = 3;
    c.eval_batches = 2;
    c.ckpt_every = 3;
    c.keep_last = 0;
    c.threads = 2;
    c.numerics = OJ_NUMERICS_EXACT;
    c.peak_flops = 1e10;
    return c;
}

#endif
