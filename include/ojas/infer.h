/* ojas inference: sampling and generation with a KV cache (gpt.h). */
#ifndef OJAS_INFER_H
#define OJAS_INFER_H

#include "ojas/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oj_sampler_config {
    double temperature;        /* 0: greedy (argmax, lowest id on ties) */
    int64_t top_k;             /* 0: off */
    double top_p;              /* nucleus (Holtzman et al. 2019); 1: off */
    double repetition_penalty; /* CTRL (Keskar et al. 2019); 1: off */
    uint64_t seed;             /* sampling is a function of (seed, sequence, step) */
    int64_t max_new_tokens;
    int32_t stop_token;        /* e.g. end-of-text; -1: none */
} oj_sampler_config;

/* temperature 1, top_k 0, top_p 1, penalty 1, seed 0, 64 tokens, no stop. */
oj_sampler_config oj_sampler_config_default(void);

/* Choose the next token from logits[0..V) (f32). history[0..n) (prompt and
 * generated tokens) feeds the repetition penalty. `u` is a uniform number
 * in [0, 1) used for the draw. Deterministic; never returns an id >= V.
 * Works on a scratch copy (logits are not modified). Returns -1 if V <= 0
 * or the logits hold a NaN. */
int32_t oj_sample_logits(const float *logits, int64_t V, const oj_sampler_config *cfg,
                         const int32_t *history, int64_t n, double u);

/* The uniform number in [0, 1) that oj_generate draws for sequence `seq`
 * at step `step` (0 for the first new token) under `seed`: one
 * Philox4x32-10 block, 53 bits. Schedulers that decode a sequence among
 * others draw the same numbers, so sampled tokens match oj_generate's. */
double oj_sample_uniform(uint64_t seed, int64_t seq, int64_t step);

/* Called for every generated token; return false to stop that sequence. */
typedef bool (*oj_token_fn)(int64_t seq, int32_t token, void *ctx);

/* Generate for `batch` prompts (prompts[i] of prompt_lens[i] >= 1 tokens):
 * prefill each prompt into a KV cache, then decode up to max_new_tokens
 * tokens per sequence, stopping at cfg->stop_token (not emitted); a gpt2 or llama
 * model also stops when its context (block_size) is full, a nanolab model
 * goes on over a sliding window of the last block_size positions. out[i] receives a malloc'd array of
 * the generated tokens (free() each) and out_lens[i] its length. on_token
 * may be NULL. Runs with grad mode off. Errors of the model or
 * OJ_ERR_INVALID_ARGUMENT (empty prompt, token id out of the vocabulary). */
oj_status oj_generate(oj_gpt *m, int64_t batch, const int32_t *const *prompts,
                      const int64_t *prompt_lens, const oj_sampler_config *cfg, int32_t **out,
                      int64_t *out_lens, oj_token_fn on_token, void *ctx);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_INFER_H */
