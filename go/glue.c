/* C helpers of the Go package (glue.h). */
#include "glue.h"

#include <stdbool.h>
#include <stdio.h>

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
