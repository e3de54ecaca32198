/* oj_batch_generate (serve.h): oj_generate's contract decoded by one
 * continuous-batching scheduler. */
#include <stdlib.h>
#include <string.h>

#include "ojas/serve.h"

typedef struct {
    int64_t n_seq;
    int64_t *ids;     /* scheduler id of sequence i */
    int32_t **out;    /* the caller's arrays */
    int64_t *lens, *caps;
    oj_token_fn on_token;
    void *ctx;
    bool oom;
} batch_ctx;

static int64_t seq_of(const batch_ctx *b, int64_t id) {
    for (int64_t i = 0; i < b->n_seq; i++)
        if (b->ids[i] == id) return i;
    return -1;
}

static bool on_event(void *vctx, int64_t id, int32_t token, double lp, oj_finish why) {
    (void)lp;
    (void)why;
    batch_ctx *b = vctx;
    int64_t i = seq_of(b, id);
    if (i < 0 || token < 0) return false;
    if (b->lens[i] == b->caps[i]) { /* never: caps hold max_new tokens */
        b->oom = true;
        return false;
    }
    b->out[i][b->lens[i]++] = token;
    return b->on_token ? b->on_token(i, token, b->ctx) : true;
}

oj_status oj_batch_generate(oj_gpt *m, int64_t batch, const int32_t *const *prompts,
                            const int64_t *prompt_lens, const oj_sampler_config *cfg,
                            const oj_sched_config *sched, int32_t **out, int64_t *out_lens,
                            oj_token_fn on_token, void *ctx) {
    if (m == NULL || prompts == NULL || prompt_lens == NULL || out == NULL || out_lens == NULL ||
        batch < 0)
        return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = oj_gpt_engine(m);
    oj_sampler_config c = cfg ? *cfg : oj_sampler_config_default();
    oj_sched_config sc = sched ? *sched : oj_sched_config_default();
    if (sched == NULL) {
        sc.max_batch = batch > 0 ? batch : 1;
        if (sc.max_step_tokens < sc.max_batch) sc.max_step_tokens = sc.max_batch;
    }
    if (sc.max_queue < batch) sc.max_queue = batch;
    for (int64_t i = 0; i < batch; i++) {
        out[i] = NULL;
        out_lens[i] = 0;
    }
    if (batch == 0) return OJ_OK;
    batch_ctx b = {batch, calloc((size_t)batch, sizeof(int64_t)), out, out_lens,
                   calloc((size_t)batch, sizeof(int64_t)), on_token, ctx, false};
    oj_sched *s = NULL;
    oj_status st = b.ids && b.caps ? OJ_OK : oj_set_error(eng, OJ_ERR_CAPACITY,
                                                          "batch_generate: out of host memory");
    if (st == OJ_OK) st = oj_sched_create(m, &sc, &s);
    const int64_t ctxlen = oj_gpt_get_config(m)->block_size;
    for (int64_t i = 0; i < batch && st == OJ_OK; i++) {
        int64_t cap = c.max_new_tokens < ctxlen ? c.max_new_tokens : ctxlen;
        b.caps[i] = cap > 0 ? cap : 0;
        out[i] = malloc((size_t)(b.caps[i] + 1) * sizeof **out);
        if (out[i] == NULL) {
            st = oj_set_error(eng, OJ_ERR_CAPACITY, "batch_generate: out of host memory");
            break;
        }
        if (prompts[i] == NULL || prompt_lens[i] <= 0) {
            st = oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "batch_generate: prompt %lld is %s",
                              (long long)i, prompts[i] ? "empty" : "NULL");
            break;
        }
        if (prompt_lens[i] > ctxlen) {
            st = oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                              "batch_generate: prompt %lld has %lld tokens, the context holds %lld",
                              (long long)i, (long long)prompt_lens[i], (long long)ctxlen);
            break;
        }
        if (prompt_lens[i] == ctxlen) { /* no room for a token: none, as oj_generate */
            const int64_t V = oj_gpt_get_config(m)->vocab_size;
            for (int64_t t = 0; t < ctxlen && st == OJ_OK; t++)
                if (prompts[i][t] < 0 || prompts[i][t] >= V)
                    st = oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                                      "batch_generate: prompt %lld token %lld is %d, outside the "
                                      "vocabulary [0, %lld)",
                                      (long long)i, (long long)t, prompts[i][t], (long long)V);
            continue;
        }
        st = oj_sched_submit(s, prompts[i], prompt_lens[i], &c, i, 0.0, on_event, &b, &b.ids[i]);
        if (st == OJ_OK) st = oj_sched_set_top_logprobs(s, b.ids[i], -1); /* none used */
        if (st != OJ_OK)
            oj_set_error(eng, st, "batch_generate: prompt %lld: %s", (long long)i,
                         oj_sched_error(s));
    }
    bool prev = oj_set_grad_enabled(eng, false);
    while (st == OJ_OK && oj_sched_busy(s)) {
        st = oj_sched_step(s);
        if (st != OJ_OK) oj_set_error(eng, st, "batch_generate: %s", oj_sched_error(s));
    }
    oj_set_grad_enabled(eng, prev);
    if (st == OJ_OK && b.oom) st = oj_set_error(eng, OJ_ERR_INTERNAL, "batch_generate: overflow");
    oj_sched_free(s);
    if (st != OJ_OK)
        for (int64_t i = 0; i < batch; i++) {
            free(out[i]);
            out[i] = NULL;
            out_lens[i] = 0;
        }
    free(b.ids);
    free(b.caps);
    return st;
}
