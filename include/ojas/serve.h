/* ojas serving: a scheduler that decodes many requests at once over a
 * paged KV cache (continuous batching), and oj_batch_generate on top of it.
 *
 * Continuous batching (Yu et al., "Orca", OSDI 2022): every step is one
 * forward over a packed batch of the running requests; a request joins
 * the batch at the next step after it is admitted and leaves it the step
 * it finishes, so requests come and go at token granularity. A request's
 * prompt is prefilled in chunks of at most prefill_chunk tokens, packed
 * beside the other requests' decode tokens. Keys and values live in
 * fixed-size blocks of one pool (oj_kv_pool, gpt.h; PagedAttention, Kwon
 * et al. 2023) charged to the engine's budget. One rule says which blocks
 * a request holds, at admission and as it grows: those of its known tokens
 * (prompt and generated) and of its next token's position; a request is
 * admitted when the pool has its blocks under the rule besides what the
 * running requests are still owed under it. When the pool cannot grow a
 * running request, the youngest running request is preempted: its blocks
 * are freed and it waits at the head of the queue, to be prefilled again
 * (prompt and generated tokens; the same tokens follow, none is delivered
 * twice). A full pool makes requests wait, never fail half-way; a request
 * larger than the whole pool is refused at submission.
 *
 * Threads: a scheduler is not thread-safe; callers that submit from
 * several threads serialise the calls (the HTTP server makes one thread
 * the scheduler's alone, and the others post it their requests). */
#ifndef OJAS_SERVE_H
#define OJAS_SERVE_H

#include "ojas/infer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oj_sched_config {
    int64_t max_batch;       /* running requests at most (> 0) */
    int64_t block_size;      /* positions per KV block (> 0) */
    int64_t n_blocks;        /* blocks in the pool; 0: as many as kv_bytes holds */
    int64_t kv_bytes;        /* the pool's bytes when n_blocks is 0 */
    int64_t prefill_chunk;   /* prompt tokens of one request per step (> 0) */
    int64_t max_step_tokens; /* tokens packed into one step (>= max_batch) */
    int64_t max_queue;       /* waiting requests at most; submit refuses beyond */
    bool decode_graphs;      /* on a CUDA engine, the one-token rows of a step run as
                              * oj_gpt_decode_paged's CUDA graph of their batch-size bucket
                              * and the prompt chunks as a packed forward beside it (false:
                              * one oj_gpt_forward_paged for all); on the CPU only with
                              * OJAS_SCHED_DECODE_PAGED=1 in the environment (eagerly) */
} oj_sched_config;

/* max_batch 8, block_size 16, n_blocks 0, kv_bytes 64 MiB, prefill_chunk
 * 128, max_step_tokens 256, max_queue 256, decode_graphs true. */
oj_sched_config oj_sched_config_default(void);

/* Why a request ended. Appended at the end only. */
typedef enum oj_finish {
    OJ_FINISH_NONE = 0,   /* still running (a token event) */
    OJ_FINISH_LENGTH = 1, /* max_new_tokens, or the context is full */
    OJ_FINISH_STOP = 2,   /* the stop token, or the callback returned false */
    OJ_FINISH_ERROR = 3,  /* the forward failed (the scheduler's error says why) */
    OJ_FINISH_TIMEOUT = 4 /* its deadline passed */
} oj_finish;

/* A request's events, called from oj_sched_step: once per new token
 * (token >= 0, logprob its log-probability under the model's softmax at
 * temperature 1 (NAN after oj_sched_set_top_logprobs(.., -1)), reason
 * OJ_FINISH_NONE; return false to end the request
 * after this token), then exactly once at the end (token -1, the reason;
 * the return value is ignored). After the end event the request is gone
 * and its blocks are free. Not called for oj_sched_cancel. */
typedef bool (*oj_sched_fn)(void *ctx, int64_t id, int32_t token, double logprob,
                            oj_finish reason);

typedef struct oj_sched oj_sched;

/* A scheduler for m (gpt2 or llama family) with its KV pool (cfg NULL:
 * the defaults). *out owned by the caller (oj_sched_free, before m).
 * Errors: OJ_ERR_INVALID_ARGUMENT (a config field, named), OJ_ERR_CAPACITY
 * (the budget cannot hold the pool, or kv_bytes holds no block). */
oj_status oj_sched_create(oj_gpt *m, const oj_sched_config *cfg, oj_sched **out);
/* Frees the pool and every request (no events are called). NULL: nothing. */
void oj_sched_free(oj_sched *s);

/* Queue a request: prompt[0..n) (copied; ids < V, 1 <= n < block_size of
 * the model), sampling by *cfg (copied; max_new_tokens is cut to the
 * context left after the prompt), `stream` the sequence index of the
 * sampler's draws (oj_sample_uniform), so a request submitted with
 * stream i samples what oj_generate does for its prompt i. timeout_s > 0:
 * the request ends with OJ_FINISH_TIMEOUT when it has not finished that
 * many seconds after submission (0: none). on_event(ctx, ...) receives its
 * tokens. *id: its id (> 0). Errors, nothing queued: OJ_ERR_INVALID_ARGUMENT
 * (empty prompt, a token outside the vocabulary, a bad sampler value),
 * OJ_ERR_OUT_OF_RANGE (the prompt fills the context), OJ_ERR_CAPACITY (the
 * queue is full, or the request needs more blocks than the whole pool). */
oj_status oj_sched_submit(oj_sched *s, const int32_t *prompt, int64_t n,
                          const oj_sampler_config *cfg, int64_t stream, double timeout_s,
                          oj_sched_fn on_event, void *ctx, int64_t *id);
/* End request id now, queued or running, and free its blocks; no event is
 * called. OJ_ERR_INVALID_ARGUMENT for an id that is not (or no longer)
 * there. */
oj_status oj_sched_cancel(oj_sched *s, int64_t id);
/* One step: admit queued requests while the batch and the pool have room,
 * run one forward over the packed batch, sample, call the events, retire
 * finished requests. Does nothing when no request is waiting or running.
 * Errors of the forward end every running request with OJ_FINISH_ERROR and
 * are returned (the scheduler stays usable). */
oj_status oj_sched_step(oj_sched *s);
/* Whether any request is queued or running. */
bool oj_sched_busy(const oj_sched *s);

#define OJ_SCHED_MAX_TOP 20 /* top alternatives per token at most (OpenAI's top_logprobs) */
/* Ask for the k (0..OJ_SCHED_MAX_TOP) most likely tokens' log-probabilities
 * at each of request id's token events (OpenAI's top_logprobs), read with
 * oj_sched_top_logprobs inside the event; k = -1: no log-probability at
 * all (the events' logprob is NAN and none is computed: the host then
 * skips a pass over the vocabulary per token). Errors:
 * OJ_ERR_INVALID_ARGUMENT (k out of range, no such request), the reason in
 * oj_sched_error. */
oj_status oj_sched_set_top_logprobs(oj_sched *s, int64_t id, int64_t k);
/* Inside a token event (oj_sched_fn with token >= 0) of a request that
 * asked for k alternatives: the k most likely tokens at that position
 * into ids, their log-probabilities (log softmax of the logits at
 * temperature 1, in double, as the event's logprob) into lps, most likely
 * first (ties: the lower id first); min(k, max) entries, returned. 0
 * outside a token event or when none were asked for. */
int64_t oj_sched_top_logprobs(const oj_sched *s, int32_t *ids, double *lps, int64_t max);

typedef struct oj_sched_stats {
    int64_t queued, running;          /* now */
    int64_t blocks_total, blocks_used; /* the pool */
    int64_t block_size;
    int64_t submitted, finished;       /* requests since creation */
    int64_t prompt_tokens, generated_tokens, steps;
    int64_t last_batch;                /* sequences in the last step */
    int64_t preempted;                 /* preemptions since creation (recomputed requests) */
} oj_sched_stats;
oj_sched_stats oj_sched_get_stats(const oj_sched *s);

/* Host-side seconds oj_sched_step has spent since the scheduler's
 * creation, by phase (CLOCK_MONOTONIC around each; the phases do not
 * overlap, and their sum is the steps' time). */
typedef struct oj_sched_profile {
    int64_t steps;                         /* steps that ran a forward */
    int64_t decode_steps, decode_rows;     /* oj_gpt_decode_paged calls and their rows */
    int64_t prefill_steps, prefill_tokens; /* packed forwards (prompt chunks) and their tokens */
    int64_t eager_decode_rows; /* one-token rows of the packed forwards when no decode step runs
                                  (the eager path, the CPU's): counted here, not in prefill_tokens;
                                  their time is in prefill_s */
    double schedule_s; /* deadlines, admission, block growth, packing the step */
    double decode_s;   /* oj_gpt_decode_paged, whole (its phases in `decode`) */
    double prefill_s;  /* the packed forwards, their logits' read-back included */
    double sample_s;   /* sampling, log-probabilities and top alternatives on the host */
    double events_s;   /* inside the requests' event callbacks (oj_sched_fn) */
    oj_kv_pool_times decode; /* oj_gpt_decode_paged's phases on the scheduler's pool */
} oj_sched_profile;
/* s's profile (zeros for NULL). */
oj_sched_profile oj_sched_get_profile(const oj_sched *s);
/* sync true: the decode step waits for the device after its launch, so
 * that the profile's decode.wait_s is the device's time and
 * decode.readback_s the copy alone (oj_kv_pool_set_timing). */
void oj_sched_set_profile_sync(oj_sched *s, bool sync);
/* The engine's message of the last failed call on s ("" when none). */
const char *oj_sched_error(const oj_sched *s);

/* oj_generate's contract (prompts, cfg, out, out_lens, on_token; sequence
 * i samples with stream i) decoded by one scheduler with continuous
 * batching: up to max_batch prompts at once (cfg NULL for the scheduler:
 * the defaults, with max_batch = batch). For gpt2 and llama models; on
 * the CPU with OJ_NUMERICS_EXACT every sequence's tokens are oj_generate's
 * bit for bit. Errors: oj_generate's, those of oj_sched_create, and
 * OJ_ERR_CAPACITY when one prompt needs more blocks than the pool. */
oj_status oj_batch_generate(oj_gpt *m, int64_t batch, const int32_t *const *prompts,
                            const int64_t *prompt_lens, const oj_sampler_config *cfg,
                            const oj_sched_config *sched, int32_t **out, int64_t *out_lens,
                            oj_token_fn on_token, void *ctx);

/* ------------------------------------------------ OpenAI request bodies
 * The fields of a POST /v1/completions or /v1/chat/completions body
 * (OpenAI's API reference) that ojas serves. */
typedef struct oj_serve_request {
    bool chat;
    char model[128];      /* "" when absent */
    char *prompt;         /* completions: the text, or NULL when given as ids */
    int32_t *prompt_ids;  /* completions: token ids (prompt as an integer array) */
    int64_t n_prompt_ids;
    int64_t n_messages;   /* chat */
    char **roles, **contents;
    int64_t max_tokens;   /* -1: up to the context (chat's default); completions: 16 */
    double temperature;   /* [0, 2], default 1 */
    double top_p;         /* [0, 1], default 1 */
    int64_t top_k;        /* 0: off (an ojas extension, as vLLM's) */
    int64_t n;            /* choices, [1, 16] */
    bool has_seed;
    uint64_t seed;
    bool stream;
    bool include_usage;   /* stream_options.include_usage: a last event with usage */
    int logprobs;         /* -1: none; completions 0..5 (the chosen token's only);
                           * chat: 0 for true */
    int n_stop;
    char *stop[4];
    int top_logprobs;     /* alternatives per token: completions' logprobs N, chat's
                           * top_logprobs (0..20, needs logprobs: true); 0: none */
} oj_serve_request;

/* Parse body[0..len) (JSON) into *r for a completions (chat false) or chat
 * request, checking types and ranges. The caller frees r's fields with
 * oj_serve_request_free (also after a failure: nothing is then held).
 * Errors: OJ_ERR_INVALID_ARGUMENT with one line in err[0..errlen) naming
 * the field and what was wrong (invalid JSON with its line and column, a
 * missing or mistyped field, a value out of range), OJ_ERR_CAPACITY. */
oj_status oj_serve_request_parse(const char *body, size_t len, bool chat, oj_serve_request *r,
                                 char *err, size_t errlen);
void oj_serve_request_free(oj_serve_request *r);

/* The chat templates ojas renders, recognised in a tokenizer_config.json's
 * chat_template by their markers. Appended at the end only. */
typedef enum oj_chat_template {
    OJ_CHAT_NONE = 0,
    OJ_CHAT_CHATML = 1, /* <|im_start|>role\ncontent<|im_end|>\n (Qwen) */
    OJ_CHAT_LLAMA3 = 2, /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
    OJ_CHAT_QWEN25 = 3, /* ChatML, with Qwen2.5's default system message when the
                         * first message is not a system one */
    OJ_CHAT_LLAMA31 = 4, /* Llama 3 headers after Llama 3.1's system header
                          * ("Cutting Knowledge Date: December 2023\nToday Date:
                          * 26 Jul 2024\n\n" + the system message) */
    OJ_CHAT_LLAMA32 = 5  /* Llama 3.2's: the same with today's date (UTC,
                          * "%d %b %Y"), as its template's strftime_now */
} oj_chat_template;

/* Which template the text json[0..len) of a tokenizer_config.json names
 * (json NULL: the model has none), recognised by its markers: <|im_start|>
 * and <|im_end|> (ChatML; Qwen2.5's default system text), or
 * <|start_header_id|> and <|eot_id|> (Llama 3; "Cutting Knowledge Date":
 * 3.1, with strftime_now: 3.2). Tools, images and other template features
 * are not rendered. Errors, with one line in err:
 * OJ_ERR_INVALID_ARGUMENT (no chat_template, or one that is neither:
 * its first 64 characters quoted), OJ_ERR_CORRUPT (invalid JSON). */
oj_status oj_chat_template_detect(const char *json, size_t len, oj_chat_template *out, char *err,
                                  size_t errlen);
/* A short name ("chatml", "llama3", ...; "none"). */
const char *oj_chat_template_name(oj_chat_template t);
/* r's messages rendered by template t with the assistant's header open
 * for generation (add_generation_prompt), as the model's Jinja template
 * renders them: Llama 3 starts with <|begin_of_text|> and trims each
 * content; "developer" messages are rendered as "system".
 * malloc'd (free()), NULL for OJ_CHAT_NONE or out of memory. */
char *oj_chat_render(oj_chat_template t, const oj_serve_request *r);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_SERVE_H */
