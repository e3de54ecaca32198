/* The continuous-batching scheduler (serve.h): a FIFO queue, a running set
 * of at most max_batch requests, a free list of KV blocks, and a step that
 * packs one chunk of each request (prompt chunk or last token) into one
 * oj_gpt_forward_paged.
 *
 * Blocks are held by one rule, at admission and as a request grows: the
 * blocks of its known tokens (prompt and generated) and of its next
 * token's position (blocks_ahead). A request is admitted only when the
 * pool has its blocks under the rule besides those the running requests
 * are still owed under it, so the step after an admission never lacks a
 * block that admission counted on. When the pool cannot
 * grow a running request, the youngest running request (the last
 * admitted) is preempted: its blocks go back to the pool and it returns to
 * the head of the queue, to be recomputed on readmission (its prompt and
 * the tokens it already generated prefilled again; vLLM's "recompute"
 * preemption, Kwon et al. 2023). Sampling depends only on a request's
 * tokens, seed and count, so the tokens after recompute are those it would
 * have generated anyway; the tokens already delivered are not delivered
 * again. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/env.h"
#include "ojas/ops.h"
#include "ojas/serve.h"

typedef struct req {
    int64_t id, stream;
    oj_sampler_config cfg;
    int64_t n;        /* prompt tokens */
    int64_t max_new;  /* cut to the context */
    int64_t done;     /* positions in the KV blocks */
    int64_t len;      /* generated tokens */
    int32_t *hist;    /* prompt then generated tokens [n + max_new] */
    int32_t *blocks;  /* block table [nblocks] */
    int64_t nblocks;  /* blocks it may need at most (prompt and max_new) */
    int64_t held;     /* blocks it holds now: blocks[0..held) */
    double deadline;  /* monotonic seconds; 0: none */
    int64_t top;      /* top alternatives' logprobs per token event (0..OJ_SCHED_MAX_TOP) */
    bool no_lp;       /* events carry no logprob (NAN): none computed */
    bool readmitted;  /* preempted once at least: its prompt was counted */
    oj_sched_fn fn;
    void *ctx;
    struct req *next; /* queue link */
} req;

struct oj_sched {
    oj_gpt *m;
    oj_engine *eng;
    oj_sched_config cfg;
    oj_kv_pool *pool;
    int64_t V, ctx;
    int32_t *free_blocks; /* a stack of free block ids */
    int64_t n_free;
    req *qhead, *qtail;
    int64_t n_queued;
    req **run; /* [max_batch] */
    int64_t n_run;
    int64_t next_id;
    oj_sched_stats st;
    oj_sched_profile prof;
    /* a step's scratch, allocated once (max_batch rows, max_step_tokens +
     * max_batch tokens), and the logits rows it reads back (grown on
     * demand: a greedy-only decode step reads none) */
    int64_t *start, *past, *rows, *pk_start, *pk_past;
    const int32_t **tables, **pk_tables;
    int32_t *tok, *pk_tok, *greedy, *pk_am;
    int64_t *pk_am64;
    float *greedy_lp, *pk_lp;
    bool *dev;
    float *host;        /* [host_cap * V]: logits rows read back */
    const float **lrow; /* [max_batch]: running request i's logits row in host */
    int64_t host_cap;
    /* during a token event: its top alternatives (oj_sched_top_logprobs) */
    int64_t ev_n;
    int32_t ev_ids[OJ_SCHED_MAX_TOP];
    double ev_lps[OJ_SCHED_MAX_TOP];
    char err[512];
};

static oj_status fail(oj_sched *s, oj_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return st;
}

oj_sched_config oj_sched_config_default(void) {
    oj_sched_config c = {8, 16, 0, 64ll << 20, 128, 256, 256, true};
    return c;
}

oj_status oj_sched_create(oj_gpt *m, const oj_sched_config *cfg, oj_sched **out) {
    if (m == NULL || out == NULL) return OJ_ERR_INVALID_ARGUMENT;
    *out = NULL;
    oj_engine *eng = oj_gpt_engine(m);
    oj_sched_config c = cfg ? *cfg : oj_sched_config_default();
    const char *bad = c.max_batch <= 0        ? "max_batch"
                      : c.block_size <= 0     ? "block_size"
                      : c.n_blocks < 0        ? "n_blocks"
                      : c.n_blocks == 0 && c.kv_bytes <= 0 ? "kv_bytes"
                      : c.prefill_chunk <= 0  ? "prefill_chunk"
                      : c.max_step_tokens < c.max_batch ? "max_step_tokens"
                      : c.max_queue < 0       ? "max_queue"
                                              : NULL;
    if (bad)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "serve scheduler: config field %s is out of range (max_batch %lld, "
                            "block_size %lld, n_blocks %lld, kv_bytes %lld, prefill_chunk %lld, "
                            "max_step_tokens %lld >= max_batch, max_queue %lld)",
                            bad, (long long)c.max_batch, (long long)c.block_size,
                            (long long)c.n_blocks, (long long)c.kv_bytes,
                            (long long)c.prefill_chunk, (long long)c.max_step_tokens,
                            (long long)c.max_queue);
    if (c.n_blocks == 0) {
        int64_t per = oj_kv_pool_block_bytes(m, c.block_size);
        c.n_blocks = per > 0 ? c.kv_bytes / per : 0;
        if (c.n_blocks == 0)
            return oj_set_error(eng, OJ_ERR_CAPACITY,
                                "serve scheduler: kv_bytes %lld holds no KV block of %lld bytes",
                                (long long)c.kv_bytes, (long long)per);
    }
    if (c.n_blocks > INT32_MAX)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "serve scheduler: %lld blocks exceed 2^31",
                            (long long)c.n_blocks);
    oj_sched *s = calloc(1, sizeof *s);
    if (s == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "serve scheduler: out of host memory");
    s->m = m;
    s->eng = eng;
    s->cfg = c;
    s->V = oj_gpt_get_config(m)->vocab_size;
    s->ctx = oj_gpt_get_config(m)->block_size;
    s->next_id = 1;
    s->free_blocks = malloc((size_t)c.n_blocks * sizeof *s->free_blocks);
    s->run = calloc((size_t)c.max_batch, sizeof *s->run);
    const size_t B = (size_t)c.max_batch, T = (size_t)(c.max_step_tokens + c.max_batch);
    s->start = malloc((B + 1) * sizeof *s->start);
    s->pk_start = malloc((B + 1) * sizeof *s->pk_start);
    s->past = malloc(B * sizeof *s->past);
    s->pk_past = malloc(B * sizeof *s->pk_past);
    s->rows = malloc(B * sizeof *s->rows);
    s->tables = malloc(B * sizeof *s->tables);
    s->pk_tables = malloc(B * sizeof *s->pk_tables);
    s->tok = malloc(T * sizeof *s->tok);
    s->pk_tok = malloc(T * sizeof *s->pk_tok);
    s->greedy = malloc(B * sizeof *s->greedy);
    s->greedy_lp = malloc(B * sizeof *s->greedy_lp);
    s->dev = malloc(B * sizeof *s->dev);
    s->lrow = malloc(B * sizeof *s->lrow);
    s->pk_am = malloc(B * sizeof *s->pk_am);
    s->pk_lp = malloc(B * sizeof *s->pk_lp);
    s->pk_am64 = malloc(B * sizeof *s->pk_am64);
    if (s->free_blocks == NULL || s->run == NULL || s->start == NULL || s->pk_start == NULL ||
        s->past == NULL || s->pk_past == NULL || s->rows == NULL || s->tables == NULL ||
        s->pk_tables == NULL || s->tok == NULL || s->pk_tok == NULL || s->greedy == NULL ||
        s->greedy_lp == NULL || s->dev == NULL || s->lrow == NULL || s->pk_am == NULL ||
        s->pk_lp == NULL || s->pk_am64 == NULL) {
        oj_sched_free(s);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "serve scheduler: out of host memory");
    }
    oj_status st = oj_kv_pool_create(m, c.n_blocks, c.block_size, &s->pool);
    if (st != OJ_OK) {
        oj_sched_free(s);
        return st;
    }
    /* a stack: block 0 is handed out first */
    for (int64_t i = 0; i < c.n_blocks; i++) s->free_blocks[i] = (int32_t)(c.n_blocks - 1 - i);
    s->n_free = c.n_blocks;
    s->st.blocks_total = c.n_blocks;
    s->st.block_size = c.block_size;
    *out = s;
    return OJ_OK;
}

static void req_free(req *r) {
    if (r == NULL) return;
    free(r->hist);
    free(r->blocks);
    free(r);
}

void oj_sched_free(oj_sched *s) {
    if (s == NULL) return;
    for (req *r = s->qhead, *nx; r; r = nx) {
        nx = r->next;
        req_free(r);
    }
    for (int64_t i = 0; i < s->n_run; i++) req_free(s->run[i]);
    oj_kv_pool_free(s->pool);
    free(s->free_blocks);
    free(s->run);
    void *scratch[] = {s->start, s->pk_start, s->past, s->pk_past, s->rows, (void *)s->tables,
                       (void *)s->pk_tables, s->tok, s->pk_tok, s->greedy, s->greedy_lp, s->dev,
                       s->host, (void *)s->lrow, s->pk_am, s->pk_lp, s->pk_am64};
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) free(scratch[i]);
    free(s);
}

/* Blocks a request needs: its prompt and every token it may generate
 * (the last one is never fed back, so it takes no position). */
static int64_t blocks_needed(const oj_sched *s, int64_t n, int64_t max_new) {
    int64_t pos = n + (max_new > 0 ? max_new - 1 : 0);
    return (pos + s->cfg.block_size - 1) / s->cfg.block_size;
}

oj_status oj_sched_submit(oj_sched *s, const int32_t *prompt, int64_t n,
                          const oj_sampler_config *cfg, int64_t stream, double timeout_s,
                          oj_sched_fn on_event, void *ctx, int64_t *id) {
    if (s == NULL) return OJ_ERR_INVALID_ARGUMENT;
    s->err[0] = '\0';
    if (prompt == NULL || n <= 0 || cfg == NULL || id == NULL)
        return fail(s, OJ_ERR_INVALID_ARGUMENT,
                    "serve: a request needs a prompt of at least one token and a sampler config");
    for (int64_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= s->V)
            return fail(s, OJ_ERR_INVALID_ARGUMENT,
                        "serve: prompt token %lld is %d, outside the vocabulary [0, %lld)",
                        (long long)i, prompt[i], (long long)s->V);
    if (!isfinite(cfg->temperature) || isnan(cfg->top_p) || !(cfg->repetition_penalty > 0) ||
        isinf(cfg->repetition_penalty) || cfg->top_k < 0)
        return fail(s, OJ_ERR_INVALID_ARGUMENT,
                    "serve: temperature %g and repetition_penalty %g must be finite (penalty > 0), "
                    "top_p %g a number, top_k %lld >= 0",
                    cfg->temperature, cfg->repetition_penalty, cfg->top_p,
                    (long long)cfg->top_k);
    if (n >= s->ctx)
        return fail(s, OJ_ERR_OUT_OF_RANGE,
                    "serve: the prompt has %lld tokens, the context holds %lld (prompt and at "
                    "least one new token)",
                    (long long)n, (long long)s->ctx);
    if (s->n_queued >= s->cfg.max_queue)
        return fail(s, OJ_ERR_CAPACITY, "serve: the queue is full (%lld requests waiting)",
                    (long long)s->n_queued);
    int64_t max_new = cfg->max_new_tokens;
    if (max_new > s->ctx - n) max_new = s->ctx - n; /* as oj_generate for gpt2 and llama */
    if (max_new < 0) max_new = 0;
    int64_t nb = blocks_needed(s, n, max_new);
    if (nb > s->cfg.n_blocks)
        return fail(s, OJ_ERR_CAPACITY,
                    "serve: the request needs %lld KV blocks (%lld prompt tokens, %lld new), the "
                    "pool has %lld",
                    (long long)nb, (long long)n, (long long)max_new, (long long)s->cfg.n_blocks);
    req *r = calloc(1, sizeof *r);
    if (r) {
        r->hist = malloc((size_t)(n + max_new + 1) * sizeof *r->hist);
        r->blocks = malloc((size_t)(nb > 0 ? nb : 1) * sizeof *r->blocks);
    }
    if (r == NULL || r->hist == NULL || r->blocks == NULL) {
        req_free(r);
        return fail(s, OJ_ERR_CAPACITY, "serve: out of host memory");
    }
    memcpy(r->hist, prompt, (size_t)n * sizeof *prompt);
    r->id = s->next_id++;
    r->stream = stream;
    r->cfg = *cfg;
    r->n = n;
    r->max_new = max_new;
    r->nblocks = nb;
    r->deadline = timeout_s > 0 ? oj__now_s() + timeout_s : 0.0;
    r->fn = on_event;
    r->ctx = ctx;
    if (s->qtail)
        s->qtail->next = r;
    else
        s->qhead = r;
    s->qtail = r;
    s->n_queued++;
    s->st.submitted++;
    *id = r->id;
    return OJ_OK;
}

static void release_blocks(oj_sched *s, req *r, int64_t held) {
    for (int64_t i = held - 1; i >= 0; i--) s->free_blocks[s->n_free++] = r->blocks[i];
    r->held = 0;
}

static int64_t blocks_for(const oj_sched *s, int64_t positions) {
    return (positions + s->cfg.block_size - 1) / s->cfg.block_size;
}

/* Remove running request i (its blocks back to the pool), keeping order. */
static req *unrun(oj_sched *s, int64_t i) {
    req *r = s->run[i];
    release_blocks(s, r, r->held);
    memmove(&s->run[i], &s->run[i + 1], (size_t)(s->n_run - i - 1) * sizeof *s->run);
    s->n_run--;
    return r;
}

/* Request r's event (timed into the profile's events). */
static bool call_event(oj_sched *s, req *r, int32_t token, double lp, oj_finish why) {
    if (r->fn == NULL) return true;
    double t = oj__now_s();
    bool more = r->fn(r->ctx, r->id, token, lp, why);
    s->prof.events_s += oj__now_s() - t;
    return more;
}

/* End running request i with `why`: its end event, then it is gone. */
static void finish(oj_sched *s, int64_t i, oj_finish why) {
    req *r = unrun(s, i);
    s->st.finished++;
    call_event(s, r, -1, 0.0, why);
    req_free(r);
}

oj_status oj_sched_cancel(oj_sched *s, int64_t id) {
    if (s == NULL) return OJ_ERR_INVALID_ARGUMENT;
    for (int64_t i = 0; i < s->n_run; i++)
        if (s->run[i]->id == id) {
            req_free(unrun(s, i));
            s->st.finished++;
            return OJ_OK;
        }
    for (req **p = &s->qhead, *prev = NULL; *p; prev = *p, p = &(*p)->next)
        if ((*p)->id == id) {
            req *r = *p;
            *p = r->next;
            if (s->qtail == r) s->qtail = prev;
            s->n_queued--;
            s->st.finished++;
            req_free(r);
            return OJ_OK;
        }
    return fail(s, OJ_ERR_INVALID_ARGUMENT, "serve: no request %lld to cancel", (long long)id);
}

bool oj_sched_busy(const oj_sched *s) { return s && (s->n_run > 0 || s->n_queued > 0); }

oj_sched_stats oj_sched_get_stats(const oj_sched *s) {
    oj_sched_stats st = {0};
    if (s == NULL) return st;
    st = s->st;
    st.queued = s->n_queued;
    st.running = s->n_run;
    st.blocks_used = s->cfg.n_blocks - s->n_free;
    return st;
}

const char *oj_sched_error(const oj_sched *s) { return s ? s->err : ""; }

/* The one rule by which requests hold KV blocks, at admission and as they
 * grow: a running request holds the blocks of its known tokens (prompt
 * and generated: every chunk of its prefill) and of the position its next
 * token will take (capped at the positions it can ever write), so the
 * step after the current one needs no block it lacks. */
static int64_t blocks_ahead(const oj_sched *s, const req *r) {
    int64_t pos = r->n + r->len + 1;
    const int64_t cap = r->n + (r->max_new > 0 ? r->max_new - 1 : 0);
    if (pos > cap) pos = cap;
    return blocks_for(s, pos);
}

/* Blocks running request r still lacks under the rule. */
static int64_t blocks_owed(const oj_sched *s, const req *r) {
    const int64_t d = blocks_ahead(s, r) - r->held;
    return d > 0 ? d : 0;
}

/* Move queued requests into the batch, first come first served, while the
 * batch has a seat and the pool has, besides what the running requests
 * are owed under the rule (blocks_ahead), the queue head's blocks under
 * the rule: its known tokens (its prompt, and what it generated before a
 * preemption) and its next token's position. So admission never predicts
 * room that the next step's growth then lacks. A request with nothing to
 * generate ends at once. */
static void admit(oj_sched *s) {
    int64_t owed = 0;
    for (int64_t i = 0; i < s->n_run; i++) owed += blocks_owed(s, s->run[i]);
    while (s->qhead && s->n_run < s->cfg.max_batch) {
        req *r = s->qhead;
        const int64_t want = blocks_ahead(s, r);
        if (want + owed > s->n_free) break;
        s->qhead = r->next;
        if (s->qhead == NULL) s->qtail = NULL;
        r->next = NULL;
        s->n_queued--;
        while (r->held < want) r->blocks[r->held++] = s->free_blocks[--s->n_free];
        s->run[s->n_run++] = r;
        if (!r->readmitted) s->st.prompt_tokens += r->n;
        if (r->max_new == 0) finish(s, s->n_run - 1, OJ_FINISH_LENGTH);
    }
}

/* Running request i back to the head of the queue, its blocks freed: it
 * is prefilled again (prompt and generated tokens) when readmitted. */
static void preempt(oj_sched *s, int64_t i) {
    req *r = unrun(s, i);
    r->done = 0;
    r->readmitted = true;
    r->next = s->qhead;
    s->qhead = r;
    if (s->qtail == NULL) s->qtail = r;
    s->n_queued++;
    s->st.preempted++;
}

/* Blocks for every running request's next chunk (its last token, or up
 * to prefill_chunk tokens still to prefill), oldest first; when the pool
 * is empty the youngest running request is preempted (the one asking,
 * when it is the youngest). Then, oldest first, each takes what the rule
 * still owes it while the pool has blocks (never preempting for those). */
static void grow(oj_sched *s) {
    for (int64_t i = 0; i < s->n_run; i++) {
        req *r = s->run[i];
        int64_t take = r->n + r->len - r->done;
        if (take > s->cfg.prefill_chunk) take = s->cfg.prefill_chunk;
        const int64_t want = blocks_for(s, r->done + take);
        while (r->held < want) {
            if (s->n_free > 0) {
                r->blocks[r->held++] = s->free_blocks[--s->n_free];
                continue;
            }
            preempt(s, s->n_run - 1);
            if (i >= s->n_run) break; /* it was r itself */
        }
    }
    for (int64_t i = 0; i < s->n_run && s->n_free > 0; i++) {
        req *r = s->run[i];
        const int64_t want = blocks_ahead(s, r);
        while (r->held < want && s->n_free > 0) r->blocks[r->held++] = s->free_blocks[--s->n_free];
    }
}

/* log softmax(lg) at temperature 1, in double: lg[i] - *shift is token
 * i's log-probability. */
static void log_norm(const float *lg, int64_t V, double *shift) {
    double mx = lg[0], sum = 0.0;
    for (int64_t i = 1; i < V; i++)
        if (lg[i] > mx) mx = lg[i];
    for (int64_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    *shift = mx + log(sum);
}

/* The k largest logits' ids into ids[0..k), largest first (ties: the lower
 * id first), and their log-probabilities (lg - shift) into lps. */
static void top_k(const float *lg, int64_t V, int64_t k, double shift, int32_t *ids, double *lps) {
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++) {
        if (n == k && !(lg[i] > lg[ids[n - 1]])) continue;
        int64_t j = n < k ? n++ : k - 1; /* the slot freed at the end */
        while (j > 0 && lg[i] > lg[ids[j - 1]]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = (int32_t)i;
    }
    for (int64_t j = 0; j < n; j++) lps[j] = (double)lg[ids[j]] - shift;
}

oj_status oj_sched_set_top_logprobs(oj_sched *s, int64_t id, int64_t k) {
    if (s == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (k < -1 || k > OJ_SCHED_MAX_TOP)
        return fail(s, OJ_ERR_INVALID_ARGUMENT, "serve: top logprobs %lld outside [-1, %d]",
                    (long long)k, OJ_SCHED_MAX_TOP);
    req *r = NULL;
    for (int64_t i = 0; i < s->n_run && r == NULL; i++)
        if (s->run[i]->id == id) r = s->run[i];
    for (req *q = s->qhead; q && r == NULL; q = q->next)
        if (q->id == id) r = q;
    if (r) {
        r->top = k > 0 ? k : 0;
        r->no_lp = k < 0;
        return OJ_OK;
    }
    return fail(s, OJ_ERR_INVALID_ARGUMENT, "serve: no request %lld", (long long)id);
}

int64_t oj_sched_top_logprobs(const oj_sched *s, int32_t *ids, double *lps, int64_t max) {
    if (s == NULL || ids == NULL || lps == NULL || max <= 0) return 0;
    const int64_t n = s->ev_n < max ? s->ev_n : max;
    memcpy(ids, s->ev_ids, (size_t)n * sizeof *ids);
    memcpy(lps, s->ev_lps, (size_t)n * sizeof *lps);
    return n;
}

/* Whether request r's next token is the largest logit's, its event asking
 * no alternatives: the device's argmax serves it. */
static bool plain_greedy(const req *r) {
    return r->cfg.temperature <= 0.0 && r->cfg.repetition_penalty == 1.0 && r->top == 0;
}

/* End every running request whose deadline has passed; the queue's too. */
static void expire(oj_sched *s) {
    double t = oj__now_s();
    for (int64_t i = s->n_run - 1; i >= 0; i--)
        if (s->run[i]->deadline > 0 && t > s->run[i]->deadline) finish(s, i, OJ_FINISH_TIMEOUT);
    for (req **p = &s->qhead, *prev = NULL; *p;) {
        req *r = *p;
        if (r->deadline > 0 && t > r->deadline) {
            *p = r->next;
            if (s->qtail == r) s->qtail = prev;
            s->n_queued--;
            s->st.finished++;
            call_event(s, r, -1, 0.0, OJ_FINISH_TIMEOUT);
            req_free(r);
        } else {
            prev = r;
            p = &r->next;
        }
    }
}

/* Whether decode rows run through oj_gpt_decode_paged: on a CUDA engine
 * with decode_graphs (captured graphs), or on any engine when the
 * environment sets OJAS_SCHED_DECODE_PAGED=1 (eagerly; the tests' way to
 * run this path on the CPU). */
static bool decode_paged_here(const oj_sched *s) {
    if (!s->cfg.decode_graphs) return false;
    if (oj_engine_device(s->eng).type == OJ_DEVICE_CUDA) return true;
    return oj__env_flag("OJAS_SCHED_DECODE_PAGED", false);
}

/* Room for n logits rows in s->host (grown, never shrunk: a step
 * allocates only when it reads back more rows than any step before). */
static bool host_rows(oj_sched *s, int64_t n) {
    if (n <= s->host_cap) return true;
    float *h = malloc((size_t)(n * s->V) * sizeof *h);
    if (h == NULL) return false;
    free(s->host);
    s->host = h;
    s->host_cap = n;
    return true;
}

/* One forward over the rows rows[0..n) of the packed step (their chunks of
 * tok at start/past/tables): each one's last logits into host rows
 * first.. (in rows' order), or with greedy_only each one's argmax and its
 * log-probability, computed on the device as the decode step's are, into
 * s->greedy / s->greedy_lp [rows[k]] (no logits read back). */
static oj_status forward_rows(oj_sched *s, const int64_t *rows, int64_t n, const int32_t *tok,
                              const int64_t *start, const int64_t *past,
                              const int32_t *const *tables, int64_t first, bool greedy_only) {
    oj_engine *eng = s->eng;
    int64_t N = 0, *st0 = s->pk_start;
    int32_t *t = s->pk_tok;
    st0[0] = 0;
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = rows[k], m = start[i + 1] - start[i];
        memcpy(t + st0[k], tok + start[i], (size_t)m * sizeof *t);
        st0[k + 1] = st0[k] + m;
        s->pk_past[k] = past[i];
        s->pk_tables[k] = tables[i];
    }
    N = st0[n];
    oj_status st = OJ_OK;
    oj_scope_begin(eng);
    int64_t shape[2] = {1, N};
    oj_tensor *idx = oj_from_host(eng, 2, shape, OJ_I32, t, (size_t)N * sizeof *t);
    oj_tensor *lg = idx ? oj_gpt_forward_paged(s->m, s->pool, idx, n, st0, s->pk_past, s->pk_tables)
                        : NULL;
    oj_tensor *l32 = lg && oj_tensor_dtype(lg) != OJ_F32 ? oj_cast(lg, OJ_F32) : (lg ? oj_retain(lg) : NULL);
    bool ok = l32 != NULL;
    if (ok && greedy_only) { /* [1, n]: the first largest logit, max - logsumexp */
        oj_tensor *am = NULL, *mx = oj_max(l32, 2, false, &am);
        const int d2[1] = {2};
        oj_tensor *lse = mx ? oj_logsumexp(l32, 1, d2, false) : NULL;
        oj_tensor *lp = lse ? oj_sub(mx, lse) : NULL;
        ok = lp && am && oj_to_host(am, s->pk_am64, (size_t)n * sizeof *s->pk_am64) == OJ_OK &&
             oj_to_host(lp, s->pk_lp, (size_t)n * sizeof *s->pk_lp) == OJ_OK;
        for (int64_t k = 0; ok && k < n; k++) {
            s->greedy[rows[k]] = (int32_t)s->pk_am64[k];
            s->greedy_lp[rows[k]] = s->pk_lp[k];
        }
    } else if (ok) {
        ok = oj_to_host(l32, s->host + first * s->V, (size_t)(n * s->V) * sizeof *s->host) == OJ_OK;
    }
    if (!ok) {
        st = oj_last_status(eng);
        if (st == OJ_OK) st = OJ_ERR_INTERNAL;
        fail(s, st, "serve: the batch's forward failed: %s", oj_last_error(eng));
        oj_clear_error(eng);
    }
    oj_release(l32);
    oj_scope_end(eng);
    return st;
}

/* The decode step (oj_gpt_decode_paged_begin) of the one-token rows
 * rows[0..n): inputs uploaded, the step launched; decode_end reads it. */
static oj_status decode_begin(oj_sched *s, const int64_t *rows, int64_t n, const int32_t *tok,
                              const int64_t *start, const int64_t *past,
                              const int32_t *const *tables) {
    int32_t *t = s->pk_tok;
    for (int64_t k = 0; k < n; k++) {
        t[k] = tok[start[rows[k]]];
        s->pk_past[k] = past[rows[k]];
        s->pk_tables[k] = tables[rows[k]];
    }
    oj_status st = oj_gpt_decode_paged_begin(s->m, s->pool, n, t, s->pk_past, s->pk_tables, true);
    if (st != OJ_OK) {
        fail(s, st, "serve: the batch's decode step failed: %s", oj_last_error(s->eng));
        oj_clear_error(s->eng);
    }
    return st;
}

/* The read-back of the decode step begun over rows[0..n): with
 * greedy_only, each row's argmax and its logprob into s->greedy /
 * s->greedy_lp [rows[k]]; else its logits into host rows 0..n. */
static oj_status decode_end(oj_sched *s, const int64_t *rows, int64_t n, bool greedy_only) {
    int32_t *am = s->pk_am;
    float *lp = s->pk_lp;
    oj_status st = oj_gpt_decode_paged_end(s->m, s->pool, greedy_only ? NULL : s->host,
                                           greedy_only ? am : NULL, greedy_only ? lp : NULL);
    if (st != OJ_OK) {
        fail(s, st, "serve: the batch's decode step failed: %s", oj_last_error(s->eng));
        oj_clear_error(s->eng);
        return st;
    }
    if (greedy_only)
        for (int64_t k = 0; k < n; k++) {
            s->greedy[rows[k]] = am[k];
            s->greedy_lp[rows[k]] = lp[k];
        }
    return st;
}

static double now_since(double *t) {
    const double n = oj__now_s(), d = n - *t;
    *t = n;
    return d;
}

oj_status oj_sched_step(oj_sched *s) {
    if (s == NULL) return OJ_ERR_INVALID_ARGUMENT;
    double t = oj__now_s();
    const double ev0 = s->prof.events_s;
    expire(s);
    admit(s);
    grow(s);
    if (s->n_run == 0) {
        s->prof.schedule_s += now_since(&t) - (s->prof.events_s - ev0);
        return OJ_OK;
    }
    const int64_t B = s->n_run;
    int64_t *start = s->start, *past = s->past, *rows = s->rows;
    const int32_t **tables = s->tables;
    int32_t *tok = s->tok;
    /* Decoding requests first (one token each), then prompt chunks in the
     * room left; every running request has a seat, as max_step_tokens >=
     * max_batch. Packed in batch order. */
    int64_t room = s->cfg.max_step_tokens;
    for (int64_t i = 0; i < B; i++)
        if (s->run[i]->n + s->run[i]->len - s->run[i]->done == 1) room--;
    int64_t N = 0;
    start[0] = 0;
    for (int64_t i = 0; i < B; i++) {
        req *r = s->run[i];
        int64_t take;
        if (r->n + r->len - r->done == 1) {
            take = 1; /* the last known token, at position done */
            tok[N] = r->hist[r->done];
        } else { /* a prompt, or a preempted request's prompt and tokens */
            take = r->n + r->len - r->done;
            if (take > s->cfg.prefill_chunk) take = s->cfg.prefill_chunk;
            if (take > room - (B - 1 - i)) take = room - (B - 1 - i); /* a seat for the rest */
            if (take < 1) take = 1;
            room -= take;
            memcpy(&tok[N], &r->hist[r->done], (size_t)take * sizeof *tok);
        }
        past[i] = r->done;
        tables[i] = r->blocks;
        N += take;
        start[i + 1] = N;
    }
    /* dev[i]: row i's token is the device's argmax greedy[i] (log-probability
     * greedy_lp[i]); else its logits are lrow[i] */
    bool *dev = s->dev;
    memset(dev, 0, (size_t)B * sizeof *dev);
    int64_t nd = 0;
    oj_status st = OJ_OK;
    s->prof.schedule_s += now_since(&t) - (s->prof.events_s - ev0);
    if (decode_paged_here(s)) {
        /* Rows of one token through the decode bucket's graph, the prompt
         * chunks through one packed forward beside it; each group reads
         * back the device's argmax and its logprob when all its rows are
         * plain greedy, else its logits. */
        bool all = true;
        for (int64_t i = 0; i < B; i++)
            if (start[i + 1] - start[i] == 1) {
                rows[nd++] = i;
                all = all && plain_greedy(s->run[i]);
            }
        int64_t np = 0;
        bool pall = true; /* the prompt chunks' rows all plain greedy */
        for (int64_t i = 0; i < B; i++)
            if (start[i + 1] - start[i] > 1) {
                rows[nd + np++] = i;
                pall = pall && plain_greedy(s->run[i]);
            }
        if (!host_rows(s, (all ? 0 : nd) + (pall ? 0 : np)))
            st = fail(s, OJ_ERR_CAPACITY, "serve: the batch's forward failed: out of host memory");
        /* the decode step is launched, the prompt chunks' forward queued
         * behind it (its host-side launches overlap the step on the
         * device), then the step is read back */
        bool begun = false;
        if (st == OJ_OK && nd > 0) {
            st = decode_begin(s, rows, nd, tok, start, past, tables);
            begun = st == OJ_OK;
            s->prof.decode_steps++;
            s->prof.decode_rows += nd;
            s->prof.decode_s += now_since(&t);
        }
        const int64_t first = all ? 0 : nd;
        if (st == OJ_OK && np > 0) {
            st = forward_rows(s, rows + nd, np, tok, start, past, tables, first, pall);
            s->prof.prefill_steps++;
            s->prof.prefill_tokens += N - nd;
            s->prof.prefill_s += now_since(&t);
        }
        if (begun) { /* ended even after a failed forward: the pool holds the step */
            const oj_status se = decode_end(s, rows, nd, all);
            if (st == OJ_OK) st = se;
            s->prof.decode_s += now_since(&t);
        }
        for (int64_t k = 0; st == OJ_OK && k < nd; k++) {
            if (all) dev[rows[k]] = true;
            else s->lrow[rows[k]] = s->host + k * s->V;
        }
        for (int64_t k = 0; st == OJ_OK && k < np; k++) {
            if (pall) dev[rows[nd + k]] = true;
            else s->lrow[rows[nd + k]] = s->host + (first + k) * s->V;
        }
    } else {
        for (int64_t i = 0; i < B; i++) rows[i] = i;
        st = host_rows(s, B) ? forward_rows(s, rows, B, tok, start, past, tables, 0, false)
                             : fail(s, OJ_ERR_CAPACITY, "serve: the batch's forward failed: out of host memory");
        for (int64_t i = 0; st == OJ_OK && i < B; i++) s->lrow[i] = s->host + i * s->V;
        int64_t n1 = 0; /* rows of one token: decode rows in one forward with the prompts */
        for (int64_t i = 0; i < B; i++) n1 += start[i + 1] - start[i] == 1;
        s->prof.prefill_steps++;
        s->prof.prefill_tokens += N - n1;
        s->prof.eager_decode_rows += n1;
        s->prof.prefill_s += now_since(&t);
    }
    s->st.steps++;
    s->prof.steps++;
    s->st.last_batch = B;
    const double ev1 = s->prof.events_s;
    if (st != OJ_OK) {
        for (int64_t i = s->n_run - 1; i >= 0; i--) finish(s, i, OJ_FINISH_ERROR);
    } else {
        /* sample, in reverse so that finishing request i leaves rows < i */
        for (int64_t i = B - 1; i >= 0; i--) {
            req *r = s->run[i];
            r->done += start[i + 1] - start[i];
            if (r->done < r->n + r->len) continue; /* a prompt chunk short of its end */
            const float *row = dev[i] ? NULL : s->lrow[i];
            int32_t tk = dev[i] ? (isnan(s->greedy_lp[i]) ? -1 : s->greedy[i])
                                : oj_sample_logits(row, s->V, &r->cfg, r->hist, r->n + r->len,
                                                   oj_sample_uniform(r->cfg.seed, r->stream, r->len));
            if (tk < 0) {
                const char *fault =
                    row ? oj_logits_fault(row, s->V) : "NaN or +inf, or only -inf";
                if (fault)
                    fail(s, OJ_ERR_NUMERIC, "serve: request %lld's logits hold %s", (long long)r->id,
                         fault);
                else
                    fail(s, OJ_ERR_CAPACITY, "serve: request %lld's sampling: out of host memory",
                         (long long)r->id);
                finish(s, i, OJ_FINISH_ERROR);
                continue;
            }
            if (tk == r->cfg.stop_token) {
                finish(s, i, OJ_FINISH_STOP);
                continue;
            }
            r->hist[r->n + r->len] = tk;
            r->len++;
            s->st.generated_tokens++;
            double shift = 0.0, lp = NAN;
            if (dev[i]) {
                lp = r->no_lp ? NAN : (double)s->greedy_lp[i];
            } else if (!r->no_lp || r->top > 0) {
                log_norm(row, s->V, &shift);
                if (r->top > 0) top_k(row, s->V, r->top, shift, s->ev_ids, s->ev_lps);
                lp = r->no_lp ? NAN : (double)row[tk] - shift;
            }
            s->ev_n = dev[i] ? 0 : r->top;
            bool more = call_event(s, r, tk, lp, OJ_FINISH_NONE);
            s->ev_n = 0;
            if (!more)
                finish(s, i, OJ_FINISH_STOP);
            else if (r->len >= r->max_new)
                finish(s, i, OJ_FINISH_LENGTH);
        }
    }
    s->prof.sample_s += now_since(&t) - (s->prof.events_s - ev1);
    return st;
}

oj_sched_profile oj_sched_get_profile(const oj_sched *s) {
    oj_sched_profile p = {0};
    if (s == NULL) return p;
    p = s->prof;
    p.decode = oj_kv_pool_get_times(s->pool);
    return p;
}

void oj_sched_set_profile_sync(oj_sched *s, bool sync) {
    if (s) oj_kv_pool_set_timing(s->pool, sync);
}
