/* Generation: prefill a prompt into a KV cache, then decode token by token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/infer.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"
#include "ops/nn_decode.h"
#include "core/env.h"

double oj_sample_uniform(uint64_t seed, int64_t seq, int64_t step) {
    uint32_t ctr[4] = {(uint32_t)step, (uint32_t)((uint64_t)step >> 32), (uint32_t)seq,
                       0x67656e00u /* "gen" */};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t r[4];
    oj_philox4x32_10(ctr, key, r);
    return (double)(((uint64_t)r[0] << 21) ^ r[1]) / 9007199254740992.0; /* 53 bits */
}

/* Logits of the last position of `logits` [1, T, V] into host memory as
 * f32 (bf16/f16 logits of an autocast forward are converted first). */
static oj_status last_logits(oj_tensor *logits, float *dst, int64_t V) {
    int64_t T = oj_size(logits, 1);
    oj_tensor *row = oj_narrow(logits, 1, T - 1, 1);
    oj_tensor *r32 = row && oj_tensor_dtype(row) != OJ_F32 ? oj_cast(row, OJ_F32) : NULL;
    oj_tensor *src = r32 ? r32 : row;
    oj_status st = src ? oj_to_host(src, dst, (size_t)V * sizeof(float)) : OJ_ERR_INTERNAL;
    oj_release(r32);
    oj_release(row);
    return st;
}

/* Logits [1, 1, V] of the decoder into dst as f32 (bf16/f16 read back as
 * they are, 2 bytes an entry, and widened on the host: the values a cast
 * on the device gives, without its launch). */
static oj_status decoder_logits(oj_gpt_decoder *d, float *dst, uint16_t *half, int64_t V) {
    oj_tensor *lg = oj_gpt_decoder_logits(d);
    if (lg == NULL) return OJ_ERR_INTERNAL;
    oj_dtype dt = oj_tensor_dtype(lg);
    if (dt == OJ_F32) return oj_to_host(lg, dst, (size_t)V * sizeof(float));
    if (dt != OJ_BF16 && dt != OJ_F16) { /* f64: the device's cast */
        oj_tensor *c = oj_cast(lg, OJ_F32);
        oj_status st = c ? oj_to_host(c, dst, (size_t)V * sizeof(float)) : OJ_ERR_INTERNAL;
        oj_release(c);
        return st;
    }
    oj_status st = oj_to_host(lg, half, (size_t)V * sizeof(uint16_t));
    if (st != OJ_OK) return st;
    for (int64_t i = 0; i < V; i++)
        dst[i] = dt == OJ_BF16 ? oj_bf16_to_f32(half[i]) : oj_f16_to_f32(half[i]);
    return OJ_OK;
}

/* Whether generate_one runs the static decoder (gpt.h, oj_gpt_decoder):
 * on a CUDA engine by default, where its step is one graph replay;
 * OJAS_GENERATE_STATIC=0 turns it off, =1 on for every engine (the CPU
 * runs the same step eagerly: the tests compare the two loops there). */
static bool use_static(oj_engine *eng) {
    return oj__env_flag("OJAS_GENERATE_STATIC", oj_engine_device(eng).type == OJ_DEVICE_CUDA);
}

/* The error for oj_sample_logits's -1 on the host row lg[0..V). */
static oj_status sample_failed(oj_engine *eng, const float *lg, int64_t V, int64_t step) {
    const char *fault = oj_logits_fault(lg, V);
    if (fault == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "generate: out of host memory");
    return oj_set_error(eng, OJ_ERR_NUMERIC, "generate: the logits hold %s at step %lld", fault,
                        (long long)step);
}

/* Decode steps a read-back takes in generate_static (the host waits once
 * per batch instead of once per token). */
#define GEN_BATCH 8

/* generate_eager's tokens through the static decoder: the prefill and
 * every step on the device, a graph replay per token on a CUDA engine.
 * Greedy without a penalty takes the decoder's own argmax; a sampled
 * sequence is drawn on the device (decode_sample: oj_sample_logits's
 * token with the same draws) where the backend takes its top_k, GEN_BATCH
 * steps queued per read-back of their tokens (gpt2, llama; a nanolab ring
 * reads each); greedy reads one token a step, or GEN_BATCH where its
 * step keeps its tokens without a kernel more (oj__gpt_decoder_keeps_in_step:
 * the fast gpt2 step with its fused head, OJAS_DECODE_HEAD=1). Otherwise (top_k 0 or above
 * OJ__DECODE_SAMPLE_MAX_K over a larger vocabulary) the logits row is read
 * back and sampled on the host by oj_sample_logits, and the chosen token
 * is written back as the pending one. Sampled sequences run a step whose
 * logits are the eager loop's (oj__gpt_decoder_set_sampler). */
static oj_status generate_static(oj_gpt *m, int64_t seq, const int32_t *prompt, int64_t n,
                                 int64_t max_new, int64_t kv_cap, const oj_sampler_config *cfg,
                                 int32_t *hist, float *lg, int32_t *gen, int64_t *out_len,
                                 oj_token_fn on_token, void *ctx) {
    oj_engine *eng = oj_gpt_engine(m);
    const int64_t V = oj_gpt_get_config(m)->vocab_size;
    const oj__decode_sampler smp = {cfg->temperature, cfg->top_k,   cfg->top_p,
                                    cfg->repetition_penalty, cfg->seed, seq};
    const bool greedy = cfg->temperature <= 0.0 && cfg->repetition_penalty == 1.0;
    /* f64 logits (f64 weights) stay on the host path */
    const bool on_dev =
        !greedy && oj_tensor_dtype(m->wte) != OJ_F64 && oj__decode_sample_ok(eng, &smp, V);
    const bool dev_token = greedy || on_dev; /* the token comes from the device */
    oj_gpt_decoder *d = NULL;
    uint16_t *half = dev_token ? NULL : malloc((size_t)V * sizeof *half);
    if (!dev_token && half == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "generate: out of host memory");
    oj_status st = oj_gpt_decoder_create(m, kv_cap, true, &d);
    if (st == OJ_OK && !greedy) st = oj__gpt_decoder_set_sampler(d, &smp, on_dev);
    /* device draws, and greedy steps whose head kernel keeps the token
     * (the fast gpt2 step with its fused head): GEN_BATCH steps queued a read-back (the token
     * after a stop or a refusing on_token is computed and dropped); a ring
     * cache (nanolab) reads each. Other greedy steps read each: their
     * argmax kernel keeps no token, and a kernel more per step cost more
     * on the H200 than the read-backs saved. */
    const bool batch = oj_gpt_get_config(m)->family != OJ_NANOLAB &&
                       (on_dev || (greedy && d && oj__gpt_decoder_keeps_in_step(d)));
    if (st == OJ_OK && batch) st = oj__gpt_decoder_keep_tokens(d);
    int32_t toks[GEN_BATCH];
    int64_t nt = 0, ti = 0; /* toks[ti..nt) are still to be taken */
    int64_t len = 0;
    int32_t dev_tok = 0; /* the pending token the device wrote (argmax or draw) */
    for (int64_t step = 0; st == OJ_OK && step < max_new; step++) {
        if (step == 0) {
            st = oj_gpt_decoder_prefill(d, prompt, n, &dev_tok);
        } else if (batch) {
            if (ti == nt) {
                nt = max_new - step < GEN_BATCH ? max_new - step : GEN_BATCH;
                ti = 0;
                st = oj__gpt_decoder_steps(d, nt, toks);
            }
            if (st == OJ_OK) dev_tok = toks[ti++];
        } else { /* host sampling reads the logits, not the token */
            st = oj_gpt_decoder_step(d, dev_token ? &dev_tok : NULL);
        }
        if (st != OJ_OK) break;
        int32_t tok = dev_tok;
        if (on_dev && tok < 0) {
            st = oj_set_error(eng, OJ_ERR_NUMERIC,
                              "generate: the logits hold NaN or +inf, or only -inf, at step %lld",
                              (long long)step);
            break;
        }
        if (!dev_token) {
            st = decoder_logits(d, lg, half, V);
            if (st != OJ_OK) break;
            tok = oj_sample_logits(lg, V, cfg, hist, n + len, oj_sample_uniform(cfg->seed, seq, step));
            if (tok < 0) {
                st = sample_failed(eng, lg, V, step);
                break;
            }
        }
        if (tok == cfg->stop_token) break;
        gen[len] = tok;
        hist[n + len] = tok;
        len++;
        if (on_token && !on_token(seq, tok, ctx)) break;
        if ((!dev_token || tok != dev_tok) && step + 1 < max_new) st = oj_gpt_decoder_set_token(d, tok);
    }
    oj_gpt_decoder_free(d);
    free(half);
    *out_len = len;
    return st;
}

static oj_status generate_one(oj_gpt *m, int64_t seq, const int32_t *prompt, int64_t n,
                              const oj_sampler_config *cfg, int32_t **out, int64_t *out_len,
                              oj_token_fn on_token, void *ctx) {
    oj_engine *eng = oj_gpt_engine(m);
    const oj_gpt_config *mc = oj_gpt_get_config(m);
    const int64_t V = mc->vocab_size, cap = mc->block_size;
    if (n <= 0) return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "generate: prompt %lld is empty", (long long)seq);
    if (prompt == NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "generate: prompt %lld is NULL",
                            (long long)seq);
    if (n > cap)
        return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                            "generate: prompt %lld has %lld tokens, the context holds %lld",
                            (long long)seq, (long long)n, (long long)cap);
    for (int64_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                                "generate: prompt %lld token %lld is %d, outside the vocabulary [0, %lld)",
                                (long long)seq, (long long)i, prompt[i], (long long)V);
    /* nanolab keeps going over a sliding window of the last block_size
     * positions (a ring KV cache); gpt2 and llama stop at their last
     * position (a window would not be their maths). */
    int64_t max_new = cfg->max_new_tokens;
    if (mc->family != OJ_NANOLAB && max_new > cap - n) max_new = cap - n;
    if (max_new < 0) max_new = 0;
    int32_t *hist = malloc((size_t)(n + max_new + 1) * sizeof *hist);
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t *gen = malloc((size_t)(max_new + 1) * sizeof *gen);
    oj_kv_cache *cache = NULL;
    oj_status st = OJ_OK;
    if (hist == NULL || lg == NULL || gen == NULL)
        st = oj_set_error(eng, OJ_ERR_CAPACITY, "generate: out of host memory");
    /* a ring of block_size for nanolab; the others never hold more than
     * the prompt and the new tokens (a model directory's context can be
     * 128k positions) */
    const int64_t kv_cap = mc->family == OJ_NANOLAB ? cap : n + (max_new > 0 ? max_new : 1);
    const bool stat = use_static(eng);
    if (st == OJ_OK && !stat) st = oj_kv_cache_create(m, 1, kv_cap, &cache);
    int64_t len = 0;
    if (st == OJ_OK) memcpy(hist, prompt, (size_t)n * sizeof *hist);
    if (st == OJ_OK && stat)
        st = generate_static(m, seq, prompt, n, max_new, kv_cap, cfg, hist, lg, gen, &len,
                             on_token, ctx);
    /* Prefill the whole prompt, then one token per step. */
    const int32_t *feed = prompt;
    int64_t feed_n = n;
    for (int64_t step = 0; st == OJ_OK && !stat && step < max_new; step++) {
        oj_scope_begin(eng);
        int64_t shape[2] = {1, feed_n};
        oj_tensor *idx = oj_from_host(eng, 2, shape, OJ_I32, feed, (size_t)feed_n * sizeof(int32_t));
        oj_tensor *logits = oj_gpt_forward_cached(m, cache, idx);
        st = logits ? last_logits(logits, lg, V) : oj_last_status(eng);
        oj_scope_end(eng);
        if (st != OJ_OK) break;
        int32_t tok = oj_sample_logits(lg, V, cfg, hist, n + len, oj_sample_uniform(cfg->seed, seq, step));
        if (tok < 0) {
            st = sample_failed(eng, lg, V, step);
            break;
        }
        if (tok == cfg->stop_token) break;
        gen[len] = tok;
        hist[n + len] = tok;
        len++;
        if (on_token && !on_token(seq, tok, ctx)) break;
        feed = &gen[len - 1];
        feed_n = 1;
    }
    oj_kv_cache_free(cache);
    free(hist);
    free(lg);
    if (st != OJ_OK) {
        free(gen);
        return st;
    }
    *out = gen;
    *out_len = len;
    return OJ_OK;
}

oj_status oj_generate(oj_gpt *m, int64_t batch, const int32_t *const *prompts,
                      const int64_t *prompt_lens, const oj_sampler_config *cfg, int32_t **out,
                      int64_t *out_lens, oj_token_fn on_token, void *ctx) {
    if (m == NULL || prompts == NULL || prompt_lens == NULL || out == NULL || out_lens == NULL ||
        batch < 0)
        return OJ_ERR_INVALID_ARGUMENT;
    oj_sampler_config c = cfg ? *cfg : oj_sampler_config_default();
    oj_engine *eng = oj_gpt_engine(m);
    /* NaN compares false everywhere in the sampler: it would pick garbage */
    if (!isfinite(c.temperature) || isnan(c.top_p) || !(c.repetition_penalty > 0) ||
        isinf(c.repetition_penalty))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "generate: temperature %g and repetition_penalty %g must be finite "
                            "(penalty > 0), top_p %g a number",
                            c.temperature, c.repetition_penalty, c.top_p);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_status st = OJ_OK;
    int64_t i = 0;
    for (; i < batch && st == OJ_OK; i++) {
        out[i] = NULL;
        out_lens[i] = 0;
        st = generate_one(m, i, prompts[i], prompt_lens[i], &c, &out[i], &out_lens[i], on_token, ctx);
    }
    if (st != OJ_OK)
        for (int64_t j = 0; j < i; j++) {
            free(out[j]);
            out[j] = NULL;
            out_lens[j] = 0;
        }
    oj_set_grad_enabled(eng, prev);
    return st;
}
