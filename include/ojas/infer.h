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
 * Candidates are ranked by logit, then lower id; with top_k the k best are
 * selected in O(V log k), the first k of the full ranking.
 * Works on a scratch copy (logits are not modified). A -inf logit is a
 * masked token (probability 0, never drawn). Returns -1 if V <= 0 or the
 * logits hold a NaN or +inf, or only -inf (oj_logits_fault). */
int32_t oj_sample_logits(const float *logits, int64_t V, const oj_sampler_config *cfg,
                         const int32_t *history, int64_t n, double u);

/* Why logits[0..V) cannot be sampled: "NaN", "+inf" or "only -inf" (a
 * static string), or NULL when they can (-inf entries are masked tokens). */
const char *oj_logits_fault(const float *logits, int64_t V);

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
 * may be NULL. Runs with grad mode off. On a CUDA engine each sequence
 * runs through the static decoder (oj_gpt_decoder: the step replayed as a
 * CUDA graph), greedy or sampled, with the tokens of the eager loop for
 * the same seed wherever the two steps' logits agree (they differ by
 * rounding only); greedy there without a repetition penalty takes the
 * device's argmax and does not see NaN logits. Sampled sequences (and
 * greedy ones with a penalty) are drawn on the device with this
 * sampler's arithmetic and draws (tokens read back 8 steps at a time;
 * a nanolab ring reads each) when top_k
 * (or V, for top_k 0) is at most 1024, else on the host from the logits
 * row; they run gpt2's fast step only where its logits are the generic
 * step's bits (gpt2-124m's shapes), else the generic step (the fast one's
 * logits would differ from the eager loop's by rounding, enough to change
 * sampled tokens; OJAS_DECODE_FAST=1 takes it anyway). OJAS_GENERATE_STATIC=0
 * selects the eager loop (oj_gpt_forward_cached, the logits read back
 * each token), =1 the static decoder on any engine. Errors of the model or
 * OJ_ERR_INVALID_ARGUMENT (empty prompt, token id out of the vocabulary). */
oj_status oj_generate(oj_gpt *m, int64_t batch, const int32_t *const *prompts,
                      const int64_t *prompt_lens, const oj_sampler_config *cfg, int32_t **out,
                      int64_t *out_lens, oj_token_fn on_token, void *ctx);

/* The most end-of-sequence ids a generation_config.json may list. */
#define OJ_MAX_EOS_TOKENS 8

/* Generation defaults of a Hugging Face model directory, as transformers'
 * GenerationConfig gives them to generate(). */
typedef struct oj_generation_config {
    bool found;                 /* the directory has generation_config.json */
    /* transformers' defaults (top_k 50, top_p 1, temperature 1, penalty 1)
     * with the file's values; temperature 0 (greedy) unless do_sample is
     * true; max_new_tokens -1 when the file has none; stop_token the first
     * eos id (-1 if none); seed 0. */
    oj_sampler_config sampler;
    int64_t max_length;         /* prompt + new tokens; -1: not given */
    int32_t eos_token_ids[OJ_MAX_EOS_TOKENS]; /* every eos id (oj_generate stops at */
    int n_eos;                  /* sampler.stop_token only: stop at the others in on_token) */
    int32_t bos_token_id, pad_token_id; /* -1: not given */
} oj_generation_config;

/* Read DIR/generation_config.json into *out. No file: OJ_OK with found
 * false, sampler = oj_sampler_config_default(), the rest -1 / 0. Read:
 * do_sample, temperature, top_k, top_p, repetition_penalty, max_new_tokens,
 * max_length, eos_token_id (an id or a list of at most OJ_MAX_EOS_TOKENS),
 * bos_token_id, pad_token_id; token ids must lie in [0, vocab_size) when
 * vocab_size > 0. A key that asks for a decoding method or logits processor
 * ojas lacks (num_beams > 1, typical_p, min_p, no_repeat_ngram_size,
 * suppress_tokens, ...) with a non-default value is OJ_ERR_UNSUPPORTED
 * naming the file and key; other keys (transformers_version, use_cache, ...)
 * are ignored. Bad JSON or a bad value: OJ_ERR_CORRUPT naming the file and
 * key; unreadable: OJ_ERR_IO. *out is written only on success. */
oj_status oj_generation_config_load(const char *dir, int64_t vocab_size,
                                    oj_generation_config *out, oj_error *err);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_INFER_H */
