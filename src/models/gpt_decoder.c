/* Greedy decoding with a static step (gpt.h, "greedy static decoding").
 *
 * Everything that changes from one token to the next lives in a device
 * tensor: the pending token tok, its position pos, its cache slot slot
 * (pos mod capacity; pos itself for gpt2, whose positions never wrap) and
 * the attention mask, computed in the step from pos (slot j is attended to
 * once j <= pos). One step is then the same device work every time:
 *   logits = forward(tok) at pos, keys/values written at slot,
 *   tok = argmax(logits), pos += 1, slot = slot + 1 (0 at the capacity),
 * so a CUDA engine records it once (oj_graph_capture_begin .. end) and
 * replays the graph for every later token; the host reads back the new
 * token and nothing else. The prefill runs eagerly (oj_gpt_forward_cached
 * on the decoder's cache) and uploads the first pos and slot.
 *
 * A captured graph keeps the addresses of every tensor it reads: the
 * decoder's tensors are never reallocated, only overwritten in place
 * (oj_copy_from_host, oj_copy_), and the cache is the decoder's own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"
#include "ops/nn_decode.h"

struct oj_gpt_decoder {
    oj_gpt *m;
    oj_engine *eng;
    oj_kv_cache *cache;
    int64_t capacity;
    bool use_graph; /* capture the step (CUDA engines) */
    bool ring;      /* nanolab: the slot wraps at the capacity */
    bool ready;     /* a prefill ran */
    oj_tensor *tok;   /* i64 [1, 1]: the pending token, the step's input and output */
    oj_tensor *pos;   /* i64 [1]: its position */
    oj_tensor *slot;  /* i64 [1]: its cache slot (ring), else pos itself */
    oj_tensor *slots; /* i64 [N]: 0 .. N-1, compared with pos for the mask */
    oj_tensor *one, *zero, *cap; /* i64 [1]: 1, 0, N */
    oj_tensor *logits;           /* [1, 1, V] of the last prefill or step */
    oj_graph *graph;             /* the captured step (its logits are static) */
    /* oj__gpt_decoder_set_sampler: a sampled sequence takes the generic
     * step (its logits are the eager loop's) unless the fast step gives
     * the same bits, and with on_device the token is drawn by
     * decode_sample instead of the argmax */
    bool sampled, on_device;
    oj__decode_sampler smp;
    oj_tensor *seen; /* u8 [V]: the ids of the prompt and the tokens so far (penalty) */
    oj_tensor *draw; /* i64 [1]: the step of the next draw */
    /* oj__gpt_decoder_keep_tokens: i64 [capacity + 1], each step's token
     * also at [its pos + 1], so several steps are read back at once */
    oj_tensor *hist;
};

/* A decoder-owned tensor: out of every scope, released by free. */
static oj_tensor *own(oj_tensor *t) {
    if (t) oj__scope_detach(t);
    return t;
}

static void set_logits(oj_gpt_decoder *d, oj_tensor *t) {
    oj_release(d->logits);
    d->logits = t;
}

oj_status oj_gpt_decoder_create(oj_gpt *m, int64_t capacity, bool use_graph,
                                oj_gpt_decoder **out) {
    if (m == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = m->eng;
    if (out == NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gpt decoder: out is NULL");
    *out = NULL;
    if (capacity <= 0)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gpt decoder: capacity %lld must be > 0",
                            (long long)capacity);
    oj_gpt_decoder *d = calloc(1, sizeof *d);
    if (d == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "gpt decoder: out of host memory");
    d->m = m;
    d->eng = eng;
    d->capacity = capacity;
    d->use_graph = use_graph && oj_engine_device(eng).type == OJ_DEVICE_CUDA;
    d->ring = m->cfg.family == OJ_NANOLAB;
    oj_status st = oj_kv_cache_create(m, 1, capacity, &d->cache);
    if (st == OJ_OK) {
        int64_t s11[2] = {1, 1}, s1[1] = {1};
        d->tok = own(oj_zeros(eng, 2, s11, OJ_I64));
        d->pos = own(oj_zeros(eng, 1, s1, OJ_I64));
        d->slot = d->ring ? own(oj_zeros(eng, 1, s1, OJ_I64)) : oj_retain(d->pos);
        d->slots = own(oj_arange(eng, 0.0, (double)capacity, 1.0, OJ_I64));
        d->one = own(oj_full(eng, 1, s1, OJ_I64, 1.0));
        d->zero = own(oj_zeros(eng, 1, s1, OJ_I64));
        d->cap = own(oj_full(eng, 1, s1, OJ_I64, (double)capacity));
        bool ok = d->tok && d->pos && d->slot && d->slots && d->one && d->zero && d->cap;
        st = ok ? OJ_OK : oj_last_status(eng);
        if (st == OJ_OK && !ok) st = OJ_ERR_INTERNAL;
    }
    if (st != OJ_OK) {
        oj_gpt_decoder_free(d);
        return st;
    }
    *out = d;
    return OJ_OK;
}

void oj_gpt_decoder_free(oj_gpt_decoder *d) {
    if (d == NULL) return;
    oj_graph_free(d->graph);
    oj_tensor *ts[] = {d->logits, d->tok, d->pos,  d->slot, d->slots,
                       d->one,    d->zero, d->cap, d->seen, d->draw, d->hist};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) oj_release(ts[i]);
    oj_kv_cache_free(d->cache);
    free(d);
}

/* seen[i] = 1 for the ids of prompt[0..n), 0 elsewhere. */
static oj_status upload_seen(oj_gpt_decoder *d, const int32_t *prompt, int64_t n) {
    const int64_t V = d->m->cfg.vocab_size;
    uint8_t *f = calloc((size_t)V, 1);
    if (f == NULL) return oj_set_error(d->eng, OJ_ERR_CAPACITY, "gpt decoder: out of host memory");
    for (int64_t i = 0; i < n; i++) f[prompt[i]] = 1;
    oj_status st = oj_copy_from_host(d->seen, f, (size_t)V);
    free(f);
    return st;
}

oj_status oj__gpt_decoder_set_sampler(oj_gpt_decoder *d, const oj__decode_sampler *s,
                                      bool on_device) {
    if (d == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = d->eng;
    const int64_t V = d->m->cfg.vocab_size;
    if (s && on_device && !oj__decode_sample_ok(eng, s, V))
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "gpt decoder: this engine cannot sample top_k %lld over V = %lld on "
                            "the device (at most %d candidates)",
                            (long long)s->top_k, (long long)V, OJ__DECODE_SAMPLE_MAX_K);
    const bool pen = s && on_device && s->repetition_penalty != 1.0;
    if (pen && d->seen == NULL) {
        int64_t sv[1] = {V};
        d->seen = own(oj_zeros(eng, 1, sv, OJ_U8));
        if (d->seen == NULL) return oj_last_status(eng);
    }
    if (s && on_device && d->draw == NULL) {
        int64_t s1[1] = {1};
        d->draw = own(oj_zeros(eng, 1, s1, OJ_I64));
        if (d->draw == NULL) return oj_last_status(eng);
    }
    /* the captured step holds the sampler's values and tensors: capture
     * again whenever they change */
    const bool same = (s != NULL) == d->sampled && (!s || (on_device == d->on_device &&
                                                           memcmp(s, &d->smp, sizeof *s) == 0));
    if (!same) {
        oj_graph_free(d->graph);
        d->graph = NULL;
        d->ready = false; /* the pending token is the old sampler's: prefill again */
    }
    d->sampled = s != NULL;
    d->on_device = s && on_device;
    if (s) d->smp = *s;
    else memset(&d->smp, 0, sizeof d->smp);
    if (!pen && d->seen) { /* the step must not pass stale flags */
        oj_release(d->seen);
        d->seen = NULL;
    }
    return OJ_OK;
}

/* The pending token to the host. */
static oj_status read_token(oj_gpt_decoder *d, int32_t *next) {
    int64_t v = 0;
    oj_status st = oj_to_host(d->tok, &v, sizeof v);
    if (st == OJ_OK && next) *next = (int32_t)v;
    return st;
}

oj_status oj_gpt_decoder_prefill(oj_gpt_decoder *d, const int32_t *prompt, int64_t n,
                                 int32_t *next) {
    if (d == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = d->eng;
    const int64_t V = d->m->cfg.vocab_size;
    if (prompt == NULL || n <= 0)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gpt decoder: the prompt is empty");
    const int64_t bad = oj__gpt_bad_token(prompt, n, V);
    if (bad >= 0)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "gpt decoder: prompt token %lld is %d, outside the vocabulary [0, %lld)",
                            (long long)bad, prompt[bad], (long long)V);
    d->ready = false;
    oj_kv_cache_reset(d->cache);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    int64_t shape[2] = {1, n};
    oj_tensor *idx = oj_from_host(eng, 2, shape, OJ_I32, prompt, (size_t)n * sizeof *prompt);
    oj_tensor *logits = oj_gpt_forward_cached(d->m, d->cache, idx); /* [1, n, V] */
    oj_tensor *last = logits ? oj_narrow(logits, 1, n - 1, 1) : NULL;
    oj_status st = last ? OJ_OK : oj_last_status(eng);
    if (st == OJ_OK && d->on_device) {
        /* the first draw (step 0) from the prompt's last logits */
        int64_t zero = 0;
        st = oj_copy_from_host(d->draw, &zero, sizeof zero);
        if (st == OJ_OK && d->seen) st = upload_seen(d, prompt, n);
        if (st == OJ_OK) st = oj__decode_sample_(d->tok, last, NULL, d->seen, d->draw, &d->smp);
    } else if (st == OJ_OK) {
        oj_tensor *best = oj_argmax(last, 2, false); /* [1, 1] */
        st = best ? oj_copy_(d->tok, best) : oj_last_status(eng);
    }
    int64_t pv = n, sv = d->ring ? n % d->capacity : n;
    if (st == OJ_OK) st = oj_copy_from_host(d->pos, &pv, sizeof pv);
    if (st == OJ_OK && d->ring) st = oj_copy_from_host(d->slot, &sv, sizeof sv);
    if (st == OJ_OK && d->graph == NULL) {
        oj_tensor *row = oj__clone(last); /* not a view: the [1, n, V] logits go now */
        if (row) set_logits(d, own(row));
        else st = oj_last_status(eng);
    } else if (st == OJ_OK) {
        st = oj_copy_(d->logits, last); /* into the graph's static output */
    }
    oj_scope_end(eng);
    oj_set_grad_enabled(eng, prev);
    if (st == OJ_OK) st = read_token(d, next);
    d->ready = st == OJ_OK;
    return st;
}

/* OJAS_DECODE_FAST=1: the fast step for sampled sequences even where its
 * logits are not the generic step's bits (oj__gpt_fast_decode_exact). */
static bool fast_forced(void) {
    return oj__env_flag("OJAS_DECODE_FAST", false);
}

/* hist[pos] = tok (pos already advanced): the step's token kept for
 * oj__gpt_decoder_steps (an index_copy_ kernel after the argmax; the
 * device draw writes it itself). */
static bool keep_token(oj_gpt_decoder *d) {
    if (d->hist == NULL) return true;
    int64_t s1[1] = {1};
    oj_tensor *t1 = oj_reshape(d->tok, 1, s1);
    bool ok = t1 && oj_index_copy_(d->hist, 0, d->pos, t1) == OJ_OK;
    oj_release(t1);
    return ok;
}

/* Whether the step runs the fast gpt2 step (gpt_decode_fast.c). */
static bool step_fast(const oj_gpt_decoder *d) {
    return !d->ring && (!d->sampled || fast_forced() || oj__gpt_fast_decode_exact(d->m)) &&
           oj__gpt_fast_decode_ok(d->m, d->cache);
}

bool oj__gpt_decoder_keeps_in_step(const oj_gpt_decoder *d) {
    if (d == NULL || d->ring) return false;
    return d->on_device || (step_fast(d) && oj__gpt_fast_head_fused(d->m));
}

/* The step's device work: logits of tok at pos into a new tensor (kept in
 * the caller's scope), tok = argmax, pos and slot advanced. NULL with the
 * error recorded. */
static oj_tensor *step_body(oj_gpt_decoder *d) {
    oj_engine *eng = d->eng;
    oj_scope_begin(eng);
    /* slot j holds a key once j <= pos (every slot, once the ring wrapped) */
    int64_t ms[4] = {1, 1, 1, d->capacity};
    const bool fast = step_fast(d);
    oj_tensor *seen = fast ? NULL : oj_le(d->slots, d->pos);
    oj_tensor *mask = fast   ? oj_empty(eng, 4, ms, OJ_BOOL) /* written by the step's first kernel */
                      : seen ? oj_reshape(seen, 4, ms)
                             : NULL;
    oj_gpt_dev_pos dp = {d->pos, d->slot, mask};
    oj_tensor *logits = NULL;
    if (mask && fast) {
        /* FAST: the embeddings and the mask in one kernel, six kernels a
         * layer, then the final norm, the head, the argmax and pos + 1 in
         * one (or the head, then the draw) */
        /* the head's kernel ends the step: the argmax, or the draw without
         * a penalty (with one, the draw needs the seen flags: its own
         * kernel after the head) */
        const oj_gpt_fast_end end = {d->tok, d->pos, d->draw, d->hist,
                                     d->on_device ? &d->smp : NULL};
        bool ended = false;
        logits = oj__gpt2_run_fast(d->m, d->cache, d->tok, &dp,
                                   !d->on_device || d->seen == NULL ? &end : NULL, &ended);
        bool ok = false;
        if (logits && ended) /* the head's kernel kept the token too */
            ok = true;
        else if (logits && d->on_device) /* the draw, pos + 1, the token kept: one kernel */
            ok = oj__decode_sample_keep_(d->tok, logits, d->pos, d->seen, d->draw, d->hist,
                                         &d->smp) == OJ_OK;
        else if (logits)
            ok = oj__decode_argmax_advance_(d->tok, logits, d->pos) == OJ_OK && keep_token(d);
        if (ok) oj_keep(logits);
        oj_scope_end(eng);
        return ok ? logits : NULL;
    }
    if (mask) logits = oj__gpt_run_static(d->m, d->cache, d->tok, &dp);
    bool ok = false;
    if (logits && d->on_device) { /* the draw, pos + 1, the token kept */
        ok = oj__decode_sample_keep_(d->tok, logits, d->pos, d->seen, d->draw, d->hist,
                                     &d->smp) == OJ_OK;
    } else if (logits) {
        oj_tensor *best = oj_argmax(logits, 2, false); /* [1, 1], lowest id on ties */
        ok = best && oj_copy_(d->tok, best) == OJ_OK && oj_add_(d->pos, d->one) == OJ_OK &&
             keep_token(d);
    }
    if (ok && d->ring) { /* slot + 1, back to 0 at the capacity */
        oj_tensor *s1 = oj_add(d->slot, d->one);
        oj_tensor *wrap = s1 ? oj_eq(s1, d->cap) : NULL;
        oj_tensor *s2 = wrap ? oj_where(wrap, d->zero, s1) : NULL;
        ok = s2 && oj_copy_(d->slot, s2) == OJ_OK;
    }
    if (ok) oj_keep(logits);
    oj_scope_end(eng);
    return ok ? logits : NULL;
}

/* Capture the step into d->graph (nothing runs yet). */
static oj_status capture(oj_gpt_decoder *d) {
    oj_engine *eng = d->eng;
    oj_status st = oj_graph_capture_begin(eng);
    if (st != OJ_OK) return st;
    oj_tensor *logits = step_body(d);
    oj_graph *g = oj_graph_capture_end(eng); /* abandons the capture after an error */
    if (g == NULL) {
        oj_release(logits);
        return oj_last_status(eng) != OJ_OK ? oj_last_status(eng) : OJ_ERR_DEVICE;
    }
    d->graph = g;
    set_logits(d, own(logits)); /* static: every replay rewrites it */
    return OJ_OK;
}

oj_status oj_gpt_decoder_step(oj_gpt_decoder *d, int32_t *next) {
    if (d == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = d->eng;
    if (!d->ready)
        return oj_set_error(eng, OJ_ERR_STATE, "gpt decoder: step before a successful prefill");
    const oj_gpt_config *c = &d->m->cfg;
    int64_t len = d->cache->len;
    if (!d->ring && (len >= c->block_size || len >= d->capacity))
        return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                            "gpt decoder: position %lld exceeds the context (block_size %lld, "
                            "cache capacity %lld)",
                            (long long)len, (long long)c->block_size, (long long)d->capacity);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_status st = OJ_OK;
    if (d->use_graph && d->graph == NULL) st = capture(d);
    if (st == OJ_OK && d->graph) {
        st = oj_graph_replay(d->graph);
    } else if (st == OJ_OK) {
        oj_tensor *logits = step_body(d);
        if (logits) set_logits(d, own(logits));
        else st = oj_last_status(eng);
    }
    oj_set_grad_enabled(eng, prev);
    if (st == OJ_OK && next) st = read_token(d, next); /* NULL: the caller reads the logits */
    if (st == OJ_OK) d->cache->len++;
    else d->ready = false; /* the device state is unknown: prefill again */
    return st;
}

oj_status oj_gpt_decoder_set_token(oj_gpt_decoder *d, int32_t token) {
    if (d == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (token < 0 || token >= d->m->cfg.vocab_size)
        return oj_set_error(d->eng, OJ_ERR_INVALID_ARGUMENT,
                            "gpt decoder: token %d is outside the vocabulary [0, %lld)", token,
                            (long long)d->m->cfg.vocab_size);
    int64_t v = token;
    return oj_copy_from_host(d->tok, &v, sizeof v);
}

oj_tensor *oj_gpt_decoder_logits(const oj_gpt_decoder *d) {
    return d && d->ready ? d->logits : NULL;
}

int64_t oj_gpt_decoder_len(const oj_gpt_decoder *d) { return d ? d->cache->len : 0; }

bool oj_gpt_decoder_graphed(const oj_gpt_decoder *d) { return d && d->graph != NULL; }

oj_status oj__gpt_decoder_keep_tokens(oj_gpt_decoder *d) {
    if (d == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (d->ring)
        return oj_set_error(d->eng, OJ_ERR_UNSUPPORTED,
                            "gpt decoder: a ring cache (nanolab) cannot keep its tokens by position");
    if (d->hist) return OJ_OK;
    int64_t sh[1] = {d->capacity + 1};
    d->hist = own(oj_zeros(d->eng, 1, sh, OJ_I64));
    if (d->hist == NULL) return oj_last_status(d->eng);
    oj_graph_free(d->graph); /* the step gains the write: capture again */
    d->graph = NULL;
    return OJ_OK;
}

oj_status oj__gpt_decoder_steps(oj_gpt_decoder *d, int64_t k, int32_t *toks) {
    if (d == NULL || toks == NULL || k < 1) return OJ_ERR_INVALID_ARGUMENT;
    if (d->hist == NULL)
        return oj_set_error(d->eng, OJ_ERR_STATE,
                            "gpt decoder: steps need oj__gpt_decoder_keep_tokens first");
    const int64_t len0 = d->cache->len;
    oj_status st = OJ_OK;
    for (int64_t i = 0; i < k && st == OJ_OK; i++) st = oj_gpt_decoder_step(d, NULL);
    if (st != OJ_OK) return st;
    /* step i read the token at position len0 + i and wrote its successor
     * at len0 + i + 1 */
    int64_t buf[64];
    for (int64_t i0 = 0; i0 < k && st == OJ_OK; i0 += 64) {
        const int64_t n = k - i0 < 64 ? k - i0 : 64;
        oj_tensor *v = oj_narrow(d->hist, 0, len0 + 1 + i0, n);
        st = v ? oj_to_host(v, buf, (size_t)n * sizeof *buf) : oj_last_status(d->eng);
        oj_release(v);
        for (int64_t i = 0; st == OJ_OK && i < n; i++) toks[i0 + i] = (int32_t)buf[i];
    }
    return st;
}
