/* C helpers of the Go package (glue.h). */
#include "glue.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exported by generate.go. */
extern _Bool ojasGoOnToken(int64_t seq, int32_t token, void *ctx);

static bool on_token(int64_t seq, int32_t token, void *ctx) {
    return ojasGoOnToken(seq, token, ctx);
}

oj_status ojas_go_generate(oj_gpt *m, const int32_t *prompt, int64_t n,
                           const oj_sampler_config *cfg, uintptr_t handle, int32_t **out,
                           int64_t *out_len) {
    const int32_t *prompts[1] = {prompt};
    return oj_generate(m, 1, prompts, &n, cfg, out, out_len, on_token, (void *)handle);
}

oj_status ojas_go_load_checkpoint(oj_engine *eng, const char *path, oj_gpt **out, oj_error *err) {
    *out = NULL;
    char dir[4096];
    oj_status st = oj_checkpoint_find(path, dir, sizeof dir, NULL, NULL, err);
    if (st) return st;
    oj_train_config tc = oj_train_config_default();
    if ((st = oj_train_config_from_checkpoint(dir, &tc, err))) return st;
    int64_t vocab = 0;
    if (tc.tokenizer_dir[0]) { /* as the trainer: the tokenizer sets the vocabulary */
        oj_tokenizer *tok = NULL;
        if ((st = oj_tokenizer_load(tc.tokenizer_dir, &tok, err))) return st;
        vocab = oj_tokenizer_vocab_size(tok);
        oj_tokenizer_free(tok);
    }
    oj_gpt_config mc;
    if ((st = oj_train_model_config(&tc, vocab, &mc, err))) return st;
    oj_gpt *m = NULL;
    if ((st = oj_gpt_create(eng, &mc, tc.seed, &m))) {
        oj_error_set(err, st, "load %s: %s", dir, oj_last_error(eng));
        oj_clear_error(eng);
        return st;
    }
    oj_named_tensors sd = oj_gpt_state_dict(m);
    if ((st = oj_checkpoint_load(dir, &sd, NULL, NULL, err))) {
        oj_gpt_free(m);
        return st;
    }
    *out = m;
    return OJ_OK;
}

oj_status ojas_go_trainer_create(const oj_train_config *cfg, const char *out_dir,
                                 const char *resume, int overwrite, int log_stderr,
                                 oj_trainer **out, oj_error *err) {
    oj_train_options o = {.out_dir = out_dir, .resume = resume, .log = log_stderr ? stderr : NULL,
                          .overwrite = overwrite != 0};
    return oj_trainer_create(cfg, &o, out, err);
}

oj_status ojas_go_encode_loop(const oj_tokenizer *tok, const char *text, size_t len,
                              int64_t iters) {
    for (int64_t i = 0; i < iters; i++) {
        oj_tokens t = {0};
        oj_status st = oj_tokenizer_encode(tok, text, len, OJ_ENCODE_REFUSE_SPECIAL, &t, NULL);
        oj_tokens_free(&t);
        if (st) return st;
    }
    return OJ_OK;
}

oj_status ojas_go_decode_step_loop(oj_gpt_decoder *d, int64_t iters) {
    for (int64_t i = 0; i < iters; i++) {
        int32_t next;
        oj_status st = oj_gpt_decoder_step(d, &next);
        if (st) return st;
    }
    return OJ_OK;
}

oj_status ojas_go_encode(const oj_tokenizer *tok, const char *text, size_t len, unsigned flags,
                         int32_t *ids, size_t cap, size_t *n, oj_error *err) {
    oj_tokens t = {0};
    oj_status st = oj_tokenizer_encode(tok, len ? text : "", len, flags, &t, err);
    *n = st ? 0 : t.len;
    if (!st && t.len) memcpy(ids, t.ids, (t.len < cap ? t.len : cap) * sizeof *ids);
    oj_tokens_free(&t);
    return st;
}

oj_status ojas_go_decode(const oj_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                         char *buf, size_t cap, size_t *len, oj_error *err) {
    char *text = NULL;
    size_t got = 0;
    static const int32_t none[1] = {0};
    oj_status st = oj_tokenizer_decode(tok, n ? ids : none, n, flags, &text, &got, err);
    *len = st ? 0 : got;
    if (!st && got) memcpy(buf, text, got < cap ? got : cap);
    free(text);
    return st;
}
