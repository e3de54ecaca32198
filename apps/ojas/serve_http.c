/* The HTTP side of `ojas serve`: request bodies to scheduler requests, their
 * tokens to OpenAI responses (whole, or streamed as server-sent events),
 * the other endpoints and the counters of /metrics. Threads: each handler
 * runs on its connection's thread (libmicrohttpd's thread per
 * connection) and posts its submission and cancellation to the scheduler
 * thread (serve_run_jobs); a generation's tokens pass from the scheduler
 * thread's token events to its handler under the generation's own mutex;
 * the inbox and the counters are under the server's mutex. */
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "core/utf8.h"
#include "serve_http.h"

/* splitmix64's finalizer: a bijection on 64-bit values. */
static uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void serve_ids_init(server *sv) {
    if (getrandom(sv->id_key, sizeof sv->id_key, 0) != (ssize_t)sizeof sv->id_key) {
        struct timespec ts; /* no entropy source: time and PID */
        clock_gettime(CLOCK_REALTIME, &ts);
        sv->id_key[0] = mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
        sv->id_key[1] = mix64(sv->id_key[0] ^ ((uint64_t)getpid() << 32));
    }
    sv->id_counter = 0;
}

/* ------------------------------------------------------------ metrics */

static const char *k_ep_names[EP_N] = {"/v1/completions", "/v1/chat/completions", "/v1/models",
                                       "/health", "/metrics", "other"};
static const int k_codes[SERVE_N_CODES] = {200, 400, 404, 405, 429, 500, 503, 504};
#define N_CODES SERVE_N_CODES
static const double k_buckets[SERVE_N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                  1,     2.5,  5,     10,   30,  60};
#define N_BUCKETS SERVE_N_BUCKETS

typedef serve_histogram histogram;

static void observe(histogram *h, double v) {
    int i = 0;
    while (i < N_BUCKETS && v > k_buckets[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

/* ------------------------------------------------------------ text */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static bool sb_add(sbuf *b, const char *s, size_t k) {
    if (b->n + k + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 1024;
        while (c < b->n + k + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (q == NULL) return false;
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = '\0';
    return true;
}

static bool sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return k >= 0 && sb_add(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* The longest prefix of s[0..n) that does not end inside a UTF-8
 * sequence (a token may carry part of a character). */
static size_t utf8_whole(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i == 0) return n;
    unsigned char c = (unsigned char)s[i - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back + 1 ? i - 1 : n;
}

/* Bytes of the maximal subpart of an ill-formed UTF-8 sequence at s[0..n)
 * (Unicode 15, section 3.9, U+FFFD substitution of maximal subparts):
 * the lead byte and the continuation bytes that could still have begun a
 * valid sequence. */
static size_t bad_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 1;
    }
    size_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < need && k < n && (s[k] & 0xC0) == 0x80) k++;
    }
    return k;
}

/* s[0..n) as a JSON string, each maximal subpart of ill-formed UTF-8 as
 * U+FFFD (what a lossy decoder such as Python's errors="replace" gives). */
static json_t *json_text(const char *s, size_t n) {
    sbuf b = {0};
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = oj__utf8_decode(u + i, n - i, &cp);
        if (k > 0) {
            sb_add(&b, s + i, (size_t)k);
            i += (size_t)k;
        } else {
            sb_add(&b, "\xEF\xBF\xBD", 3);
            i += bad_len(u + i, n - i);
        }
    }
    json_t *j = json_stringn(b.p ? b.p : "", b.n);
    free(b.p);
    return j;
}
/* ------------------------------------------------------------ a generation */

typedef struct choice {
    int64_t id;      /* the scheduler's (the scheduler thread's) */
    bool live;       /* in the scheduler (the scheduler thread's) */
    double t_last;   /* its last token's time (the scheduler thread's) */
    /* under the generation's mutex: written by the token events, read by the handler */
    int32_t *toks;
    double *lps;
    int32_t *top_ids; /* [cap, req.top_logprobs]: each token's alternatives */
    double *top_lps;
    int64_t len, cap;
    sbuf text;       /* decoded bytes, cut at a stop string */
    oj_finish fin;
    bool done, stop_hit;
    /* the handler's: what it has streamed */
    size_t sent;
    int64_t toks_sent;
} choice;

typedef struct gen {
    server *sv;
    pthread_mutex_t mu; /* the choices' tokens, the submission's outcome, abandoned */
    pthread_cond_t cv;  /* signalled on the submission's outcome, tokens (streams) and ends */
    int refs;           /* the handler's, one per job posted, one while choices are live
                         * (atomic: taken and dropped by both threads) */
    oj_serve_request req;
    int ep;
    int32_t *prompt;    /* the prompt's ids, submitted by the scheduler thread */
    int64_t n_prompt;
    oj_sampler_config sc;
    int n;
    choice ch[16];
    int live;           /* choices in the scheduler (the scheduler thread's) */
    bool first_seen;    /* the scheduler thread's */
    int submitted;      /* 0: waiting, 1: running, -1: refused (submit_code, submit_err) */
    int submit_code;
    char submit_err[768];
    bool abandoned;     /* the handler has gone: a job not yet run is dropped */
    int64_t events;     /* token and end events so far (a stream waits for more) */
    double t0;
    int fd;            /* the client's socket, polled for hang-up */
    char id[48];
    long created;
    serve_job jobs[2]; /* its submission and its cancellation */
    bool cancel_posted;
    /* streaming (the handler's) */
    sbuf out;
    size_t out_pos;
    int phase; /* 0 tokens, 1 [DONE] queued, 2 finished */
    bool role_sent; /* chat: the choices' role chunks queued */
    double last_write;
    choice snap;         /* the new tokens of one choice, copied out of the mutex */
    sbuf snap_text;
    int64_t snap_cap;
    double sse_s;
    int64_t sse_chunks, sse_bytes;
} gen;

static size_t max_stop_len(const oj_serve_request *r) {
    size_t m = 0;
    for (int i = 0; i < r->n_stop; i++)
        if (strlen(r->stop[i]) > m) m = strlen(r->stop[i]);
    return m;
}

static void gen_free(gen *g) {
    if (g == NULL) return;
    for (int i = 0; i < g->n; i++) {
        free(g->ch[i].toks);
        free(g->ch[i].lps);
        free(g->ch[i].top_ids);
        free(g->ch[i].top_lps);
        free(g->ch[i].text.p);
    }
    free(g->snap.toks);
    free(g->snap.lps);
    free(g->snap.top_ids);
    free(g->snap.top_lps);
    free(g->snap_text.p);
    free(g->out.p);
    free(g->prompt);
    oj_serve_request_free(&g->req);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void gen_ref(gen *g) { __atomic_add_fetch(&g->refs, 1, __ATOMIC_ACQ_REL); }

/* Drop a reference; the last one frees g. */
static void gen_unref(gen *g) {
    if (__atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) == 0) gen_free(g);
}

/* Queue job j of g for the scheduler thread (sv->mu held). */
static void post_job(server *sv, gen *g, int kind) {
    serve_job *j = &g->jobs[kind];
    j->kind = kind;
    j->g = g;
    j->next = NULL;
    gen_ref(g);
    if (sv->inbox_tail)
        sv->inbox_tail->next = j;
    else
        sv->inbox = j;
    sv->inbox_tail = j;
    sv->busy = true;
    pthread_cond_signal(&sv->work);
}

static bool all_done(const gen *g) {
    for (int i = 0; i < g->n; i++)
        if (!g->ch[i].done) return false;
    return true;
}

/* The handler is done with g: the choices still running are cancelled
 * (by the scheduler thread) and the handler's reference dropped. */
static void gen_release(gen *g) {
    server *sv = g->sv;
    pthread_mutex_lock(&g->mu);
    g->abandoned = true;
    const bool cancel = g->submitted == 1 && !all_done(g) && !g->cancel_posted;
    g->cancel_posted |= cancel;
    pthread_mutex_unlock(&g->mu);
    if (cancel) {
        pthread_mutex_lock(&sv->mu);
        post_job(sv, g, SERVE_JOB_CANCEL);
        pthread_mutex_unlock(&sv->mu);
    }
    gen_unref(g);
}

/* A live choice has ended (the scheduler thread): the last one drops the
 * scheduler's reference. */
static void choice_ended(gen *g, choice *c) {
    c->live = false;
    if (--g->live == 0) gen_unref(g);
}

/* The scheduler's events (its thread; sv->mu not held). */
static bool on_event(void *ctx, int64_t id, int32_t token, double lp, oj_finish why) {
    gen *g = ctx;
    server *sv = g->sv;
    choice *c = NULL;
    for (int i = 0; i < g->n; i++)
        if (g->ch[i].id == id && g->ch[i].live) c = &g->ch[i];
    if (c == NULL) return false;
    double t = cli_now(), tl = 0.0;
    if (token < 0) {
        if (sv->profile) tl = cli_now();
        pthread_mutex_lock(&g->mu);
        if (sv->profile) sv->prof.event_lock_s += cli_now() - tl;
        c->fin = why;
        c->done = true;
        g->events++;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        if (why == OJ_FINISH_TIMEOUT) sv->s_timeouts++;
        choice_ended(g, c);
        return false;
    }
    if (!g->first_seen) {
        g->first_seen = true;
        observe(&sv->s_ttft, t - g->t0);
    } else if (c->t_last > 0) {
        observe(&sv->s_itl, t - c->t_last);
    }
    c->t_last = t;
    const int64_t K = g->req.top_logprobs;
    int32_t tid[OJ_SCHED_MAX_TOP];
    double tlp[OJ_SCHED_MAX_TOP];
    if (K > 0) {
        int64_t got = oj_sched_top_logprobs(sv->s, tid, tlp, K);
        for (int64_t k = got; k < K; k++) { /* never: the scheduler gives K */
            tid[k] = token;
            tlp[k] = lp;
        }
    }
    const char *piece = "";
    size_t plen = 0;
    if (token < sv->n_pieces) {
        piece = sv->piece_blob + sv->piece_off[token];
        plen = (size_t)(sv->piece_off[token + 1] - sv->piece_off[token]);
    }
    if (sv->profile) tl = cli_now();
    pthread_mutex_lock(&g->mu);
    if (sv->profile) sv->prof.event_lock_s += cli_now() - tl;
    bool more = true;
    if (c->len == c->cap) { /* grown geometrically: amortised, not per token */
        int64_t nc = c->cap ? c->cap * 2 : 64;
        int32_t *nt = realloc(c->toks, (size_t)nc * sizeof *nt);
        if (nt) c->toks = nt;
        double *nl = nt ? realloc(c->lps, (size_t)nc * sizeof *nl) : NULL;
        if (nl) c->lps = nl;
        if (K > 0 && nl) {
            int32_t *ti = realloc(c->top_ids, (size_t)(nc * K) * sizeof *ti);
            if (ti) c->top_ids = ti;
            double *tk = ti ? realloc(c->top_lps, (size_t)(nc * K) * sizeof *tk) : NULL;
            if (tk) c->top_lps = tk;
            if (tk == NULL) nl = NULL;
        }
        if (nl == NULL) more = false; /* out of memory: the choice ends here */
        else c->cap = nc;
    }
    if (more) {
        c->toks[c->len] = token;
        c->lps[c->len] = lp;
        if (K > 0) {
            memcpy(c->top_ids + c->len * K, tid, (size_t)K * sizeof *tid);
            memcpy(c->top_lps + c->len * K, tlp, (size_t)K * sizeof *tlp);
        }
        c->len++;
        sb_add(&c->text, piece, plen);
        size_t ms = max_stop_len(&g->req);
        if (ms > 0 && c->text.p) {
            size_t from = c->text.n > plen + ms ? c->text.n - plen - ms : 0;
            for (int i = 0; i < g->req.n_stop; i++) {
                char *hit = strstr(c->text.p + from, g->req.stop[i]);
                if (hit) {
                    c->text.n = (size_t)(hit - c->text.p);
                    c->text.p[c->text.n] = '\0';
                    c->stop_hit = true;
                    more = false;
                    break;
                }
            }
        }
    }
    g->events++;
    pthread_mutex_unlock(&g->mu);
    /* after the unlock: the woken handler does not block on the mutex at
     * once (it checks its events under it); a whole response waits for
     * the end events alone */
    if (g->req.stream) pthread_cond_signal(&g->cv);
    return more;
}

/* The scheduler thread: g's choices submitted (all or none), under g's
 * mutex, so that a handler that leaves sees either no submission (and it
 * is refused here) or a running one (and cancels it). */
static void run_submit(server *sv, gen *g) {
    pthread_mutex_lock(&g->mu);
    oj_status st = g->abandoned ? OJ_ERR_STATE : OJ_OK;
    char err[768] = "";
    for (int i = 0; i < g->n && st == OJ_OK; i++) {
        st = oj_sched_submit(sv->s, g->prompt, g->n_prompt, &g->sc, i, sv->timeout_s, on_event, g,
                             &g->ch[i].id);
        /* no logprobs asked for: none computed (-1) */
        if (st == OJ_OK) {
            g->ch[i].live = true;
            st = oj_sched_set_top_logprobs(sv->s, g->ch[i].id,
                                           g->req.logprobs < 0 ? -1 : g->req.top_logprobs);
        }
        if (st != OJ_OK) snprintf(err, sizeof err, "%s", oj_sched_error(sv->s));
    }
    if (st != OJ_OK)
        for (int k = 0; k < g->n; k++)
            if (g->ch[k].live) {
                oj_sched_cancel(sv->s, g->ch[k].id);
                g->ch[k].live = false;
            }
    if (st == OJ_OK) {
        g->submitted = 1;
        g->live = g->n;
        gen_ref(g); /* the live choices' reference */
    } else {
        g->submitted = -1;
        g->submit_code = st == OJ_ERR_STATE      ? 503
                         : st == OJ_ERR_CAPACITY ? (strstr(err, "queue is full") ? 429 : 503)
                                                 : 400;
        snprintf(g->submit_err, sizeof g->submit_err, "%s", err);
    }
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* The scheduler thread: g's running choices cancelled, their blocks freed. */
static void run_cancel(server *sv, gen *g) {
    for (int i = 0; i < g->n; i++) {
        choice *c = &g->ch[i];
        if (!c->live) continue;
        oj_sched_cancel(sv->s, c->id);
        pthread_mutex_lock(&g->mu);
        c->done = true;
        c->fin = OJ_FINISH_STOP;
        g->events++;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        choice_ended(g, c);
    }
}

void serve_run_jobs(server *sv, serve_job *jobs) {
    for (serve_job *j = jobs, *nx; j; j = nx) {
        nx = j->next; /* j belongs to its generation, which the unref may free */
        if (j->kind == SERVE_JOB_SUBMIT)
            run_submit(sv, j->g);
        else
            run_cancel(sv, j->g);
        gen_unref(j->g);
    }
}

bool serve_pieces_init(server *sv) {
    const int64_t V = oj_tokenizer_vocab_size(sv->tok);
    sbuf blob = {0};
    sv->piece_off = malloc((size_t)(V + 1) * sizeof *sv->piece_off);
    if (sv->piece_off == NULL) return false;
    for (int64_t t = 0; t < V; t++) {
        sv->piece_off[t] = (int64_t)blob.n;
        int32_t id = (int32_t)t;
        char *p = NULL;
        size_t n = 0;
        oj_error e = {0};
        if (oj_tokenizer_decode(sv->tok, &id, 1, OJ_DECODE_BYTES, &p, &n, &e) == OJ_OK && n > 0 &&
            !sb_add(&blob, p, n)) {
            free(p);
            free(blob.p);
            return false;
        }
        free(p);
    }
    sv->piece_off[V] = (int64_t)blob.n;
    sv->piece_blob = blob.p ? blob.p : calloc(1, 1);
    sv->n_pieces = V;
    return sv->piece_blob != NULL;
}

/* Whether the client is gone: its connection reset or closed both ways
 * (POLLHUP, POLLERR), or, with rdhup, its sending side closed (POLLRDHUP).
 * A stream passes rdhup false: a client may half-close once its request is
 * sent and still read the answer, and a stream's writes (a keep-alive
 * comment every second at least) find a closed socket. A non-streamed
 * request, with nothing to write until its end, takes the FIN as the
 * client leaving (so an abandoned request stops using the batch). */
static bool client_gone(int fd, bool rdhup) {
    if (fd < 0) return false;
    struct pollfd p = {fd, rdhup ? POLLRDHUP : 0, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & ((rdhup ? POLLRDHUP : 0) | POLLHUP | POLLERR));
}

/* ------------------------------------------------------------ responses */

typedef struct conn {
    int ep;
    sbuf body;
    bool too_big;
    int code; /* the status sent, for the metrics */
} conn;

static enum MHD_Result send_text(struct MHD_Connection *mc, conn *cn, int code, const char *type,
                                 const char *text) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (r == NULL) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(mc, (unsigned)code, r);
    MHD_destroy_response(r);
    if (cn) cn->code = code;
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *mc, conn *cn, int code, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    enum MHD_Result ok = send_text(mc, cn, s ? code : 500, "application/json",
                                   s ? s : "{\"error\":{\"message\":\"out of memory\"}}");
    free(s);
    return ok;
}

/* OpenAI's error object. */
static enum MHD_Result send_error(struct MHD_Connection *mc, conn *cn, int code, const char *fmt,
                                  ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = code == 400 || code == 404 || code == 405 ? "invalid_request_error"
                       : code == 429                               ? "rate_limit_error"
                       : code == 504                               ? "timeout_error"
                                                                   : "server_error";
    json_t *e = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", msg, "type", type, "param",
                          "code");
    return send_json(mc, cn, code, e);
}

static const char *finish_name(const choice *c) {
    return c->fin == OJ_FINISH_LENGTH ? "length" : "stop";
}

/* Token tok's text (its bytes, decoded leniently) and, for chat, its
 * bytes as an array in *bytes. */
static json_t *token_text(const gen *g, int32_t tok, json_t **bytes) {
    const server *sv = g->sv;
    const char *p = "";
    size_t n = 0;
    if (tok >= 0 && tok < sv->n_pieces) {
        p = sv->piece_blob + sv->piece_off[tok];
        n = (size_t)(sv->piece_off[tok + 1] - sv->piece_off[tok]);
    }
    if (bytes) {
        *bytes = json_array();
        for (size_t k = 0; k < n; k++) json_array_append_new(*bytes, json_integer((unsigned char)p[k]));
    }
    return json_text(p, n);
}

/* The logprobs of tokens [from, to) of a choice in the endpoint's format:
 * chat's content [{token, logprob, bytes, top_logprobs: [{token, logprob,
 * bytes}]}], completions' {tokens, token_logprobs, top_logprobs: [{text:
 * logprob}] or null}, the alternatives most likely first. */
static json_t *logprobs_json(const gen *g, const choice *c, int64_t from, int64_t to) {
    const int64_t K = g->req.top_logprobs;
    json_t *toks = json_array(), *lps = json_array(), *tops = K > 0 ? json_array() : json_null();
    for (int64_t i = from; i < to; i++) {
        json_t *b = NULL;
        json_t *text = token_text(g, c->toks[i], g->req.chat ? &b : NULL);
        if (g->req.chat) {
            json_t *alt = json_array();
            for (int64_t k = 0; k < K; k++) {
                json_t *ab = NULL;
                json_t *at = token_text(g, c->top_ids[i * K + k], &ab);
                json_array_append_new(alt, json_pack("{s:o,s:f,s:o}", "token", at, "logprob",
                                                     c->top_lps[i * K + k], "bytes", ab));
            }
            json_array_append_new(toks, json_pack("{s:o,s:f,s:o,s:o}", "token", text, "logprob",
                                                  c->lps[i], "bytes", b, "top_logprobs", alt));
        } else {
            json_array_append_new(toks, text);
            json_array_append_new(lps, json_real(c->lps[i]));
            if (K > 0) {
                json_t *d = json_object();
                for (int64_t k = 0; k < K; k++) {
                    json_t *at = token_text(g, c->top_ids[i * K + k], NULL);
                    /* tokens of one text keep the likelier's logprob */
                    if (json_object_get(d, json_string_value(at)) == NULL)
                        json_object_set_new(d, json_string_value(at), json_real(c->top_lps[i * K + k]));
                    json_decref(at);
                }
                json_array_append_new(tops, d);
            }
        }
    }
    if (g->req.chat) {
        json_decref(lps);
        json_decref(tops);
        return json_pack("{s:o}", "content", toks);
    }
    return json_pack("{s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops);
}

static json_t *usage_json(const gen *g) {
    int64_t done = 0;
    for (int i = 0; i < g->n; i++) done += g->ch[i].len;
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)g->n_prompt,
                     "completion_tokens", (json_int_t)done, "total_tokens",
                     (json_int_t)(g->n_prompt + done));
}

static json_t *full_response(const gen *g) {
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++) {
        const choice *c = &g->ch[i];
        json_t *text = json_text(c->text.p ? c->text.p : "", c->text.n);
        json_t *lp = g->req.logprobs >= 0 ? logprobs_json(g, c, 0, c->len) : json_null();
        json_t *o = g->req.chat ? json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", i, "message",
                                            "role", "assistant", "content", text, "logprobs", lp,
                                            "finish_reason", finish_name(c))
                                : json_pack("{s:i,s:o,s:o,s:s}", "index", i, "text", text,
                                            "logprobs", lp, "finish_reason", finish_name(c));
        json_array_append_new(choices, o);
    }
    return json_pack("{s:s,s:s,s:i,s:s,s:o,s:o}", "id", g->id, "object",
                     g->req.chat ? "chat.completion" : "text_completion", "created", (int)g->created,
                     "model", g->sv->model_id, "choices", choices, "usage", usage_json(g));
}

/* One SSE event into g->out. */
static void emit(gen *g, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s == NULL) return;
    sb_add(&g->out, "data: ", 6);
    sb_add(&g->out, s, strlen(s));
    sb_add(&g->out, "\n\n", 2);
    free(s);
}

static json_t *chunk(const gen *g, int i, json_t *text, json_t *lp, const char *finish) {
    json_t *fin = finish ? json_string(finish) : json_null();
    json_t *c;
    if (g->req.chat) {
        json_t *delta = text ? json_pack("{s:o}", "content", text) : json_object();
        c = json_pack("{s:i,s:o,s:o,s:o}", "index", i, "delta", delta, "logprobs",
                      lp ? lp : json_null(), "finish_reason", fin);
    } else {
        c = json_pack("{s:i,s:o,s:o,s:o}", "index", i, "text", text ? text : json_string(""),
                      "logprobs", lp ? lp : json_null(), "finish_reason", fin);
    }
    return json_pack("{s:s,s:s,s:i,s:s,s:[o]}", "id", g->id, "object",
                     g->req.chat ? "chat.completion.chunk" : "text_completion", "created",
                     (int)g->created, "model", g->sv->model_id, "choices", c);
}

static bool stopping(server *sv) { return __atomic_load_n(&sv->stopping, __ATOMIC_ACQUIRE); }

/* Room for n tokens in g's snapshot (the handler's). */
static bool snap_room(gen *g, int64_t n) {
    if (n <= g->snap_cap) return true;
    const int64_t K = g->req.top_logprobs > 0 ? g->req.top_logprobs : 1;
    int64_t c = g->snap_cap ? g->snap_cap : 64;
    while (c < n) c *= 2;
    int32_t *t = realloc(g->snap.toks, (size_t)c * sizeof *t);
    if (t) g->snap.toks = t;
    double *l = realloc(g->snap.lps, (size_t)c * sizeof *l);
    if (l) g->snap.lps = l;
    int32_t *ti = realloc(g->snap.top_ids, (size_t)(c * K) * sizeof *ti);
    if (ti) g->snap.top_ids = ti;
    double *tl = realloc(g->snap.top_lps, (size_t)(c * K) * sizeof *tl);
    if (tl) g->snap.top_lps = tl;
    if (!t || !l || !ti || !tl) return false;
    g->snap_cap = c;
    return true;
}

/* New events for what the choices have produced since the last call (the
 * handler's thread): text that can no longer become a stop string, then
 * each choice's end, then [DONE]. Each choice's news are copied out under
 * g's mutex and turned into JSON after it, so the token events never wait
 * for the JSON. */
static void stream_events(gen *g) {
    if (g->req.chat && !g->role_sent) { /* OpenAI's first chunk of each choice: the role */
        for (int i = 0; i < g->n; i++) {
            json_t *j = chunk(g, i, NULL, NULL, NULL);
            json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
            json_object_set_new(d, "role", json_string("assistant"));
            json_object_set_new(d, "content", json_string(""));
            emit(g, j);
        }
        g->role_sent = true;
    }
    size_t hold = max_stop_len(&g->req);
    hold = hold > 0 ? hold - 1 : 0;
    const int64_t K = g->req.top_logprobs;
    bool ended = true;
    oj_finish fins[16];
    for (int i = 0; i < g->n; i++) {
        choice *c = &g->ch[i];
        pthread_mutex_lock(&g->mu);
        size_t upto = c->done ? c->text.n : (c->text.n > hold ? c->text.n - hold : 0);
        if (!c->done) upto = utf8_whole(c->text.p ? c->text.p : "", upto);
        /* logprobs of tokens with no text yet go out too, also at the end
         * (a token cut by a stop string, or tokens the handler had not
         * streamed before the request finished) */
        int64_t nt = g->req.logprobs >= 0 ? c->len - c->toks_sent : 0;
        const bool news = (upto > c->sent || nt > 0) && snap_room(g, nt);
        g->snap_text.n = 0;
        if (news) {
            const int64_t f = c->toks_sent;
            if (nt > 0) {
                memcpy(g->snap.toks, c->toks + f, (size_t)nt * sizeof *c->toks);
                memcpy(g->snap.lps, c->lps + f, (size_t)nt * sizeof *c->lps);
            }
            if (nt > 0 && K > 0) {
                memcpy(g->snap.top_ids, c->top_ids + f * K, (size_t)(nt * K) * sizeof *c->top_ids);
                memcpy(g->snap.top_lps, c->top_lps + f * K, (size_t)(nt * K) * sizeof *c->top_lps);
            }
            if (upto > c->sent) {
                sb_add(&g->snap_text, c->text.p + c->sent, upto - c->sent);
                c->sent = upto;
            }
            c->toks_sent = c->len;
        }
        ended = ended && c->done;
        fins[i] = c->fin;
        pthread_mutex_unlock(&g->mu);
        if (news) {
            json_t *lp = g->req.logprobs >= 0 ? logprobs_json(g, &g->snap, 0, nt) : NULL;
            emit(g, chunk(g, i, json_text(g->snap_text.p ? g->snap_text.p : "", g->snap_text.n),
                          lp, NULL));
        }
    }
    if (ended && g->phase == 0) {
        bool timeout = false, err = false;
        for (int i = 0; i < g->n; i++) {
            timeout |= fins[i] == OJ_FINISH_TIMEOUT;
            err |= fins[i] == OJ_FINISH_ERROR;
            if (fins[i] != OJ_FINISH_TIMEOUT && fins[i] != OJ_FINISH_ERROR)
                emit(g, chunk(g, i, NULL, NULL, fins[i] == OJ_FINISH_LENGTH ? "length" : "stop"));
        }
        if (timeout || err)
            emit(g, json_pack("{s:{s:s,s:s}}", "error", "message",
                              timeout ? "the request timed out" : "the model's forward failed",
                              "type", timeout ? "timeout_error" : "server_error"));
        if (g->req.include_usage) /* OpenAI: a last chunk with no choices and the usage */
            emit(g, json_pack("{s:s,s:s,s:i,s:s,s:[],s:o}", "id", g->id, "object",
                              g->req.chat ? "chat.completion.chunk" : "text_completion", "created",
                              (int)g->created, "model", g->sv->model_id, "choices", "usage",
                              usage_json(g)));
        sb_add(&g->out, "data: [DONE]\n\n", 14);
        g->phase = 1;
    }
}

/* libmicrohttpd's content reader of a stream (the connection's thread):
 * the events queued since the last call, waiting on g's condition
 * variable for new ones. Only this thread writes to the client, so a slow
 * client slows its own stream and nothing else. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    gen *g = cls;
    server *sv = g->sv;
    while (g->out_pos == g->out.n) {
        g->out.n = g->out_pos = 0;
        if (g->phase >= 1) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&g->mu);
        const int64_t ev = g->events;
        pthread_mutex_unlock(&g->mu);
        const double t0 = sv->profile ? cli_now() : 0.0;
        stream_events(g);
        if (sv->profile) {
            g->sse_s += cli_now() - t0;
            g->sse_chunks += g->out.n > 0;
            g->sse_bytes += (int64_t)g->out.n;
        }
        if (g->out.n > 0) break;
        const bool gone = client_gone(g->fd, false);
        if (gone || stopping(sv)) {
            if (gone) {
                pthread_mutex_lock(&sv->mu);
                sv->disconnects++;
                pthread_mutex_unlock(&sv->mu);
            }
            return MHD_CONTENT_READER_END_WITH_ERROR; /* stream_free cancels */
        }
        if (cli_now() - g->last_write > 1.0) { /* a comment: finds a closed socket */
            sb_add(&g->out, ": keep-alive\n\n", 14);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_mutex_lock(&g->mu);
        if (g->events == ev) pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        pthread_mutex_unlock(&g->mu);
    }
    size_t k = g->out.n - g->out_pos < max ? g->out.n - g->out_pos : max;
    memcpy(buf, g->out.p + g->out_pos, k);
    g->out_pos += k;
    g->last_write = cli_now();
    return (ssize_t)k;
}

static void stream_free(void *cls) {
    gen *g = cls;
    server *sv = g->sv;
    pthread_mutex_lock(&sv->mu);
    observe(&sv->duration, cli_now() - g->t0);
    sv->prof.sse_s += g->sse_s;
    sv->prof.sse_chunks += g->sse_chunks;
    sv->prof.sse_bytes += g->sse_bytes;
    pthread_mutex_unlock(&sv->mu);
    gen_release(g);
}

/* ------------------------------------------------------------ generation requests */

/* The prompt's token ids of request r: the ids given, the text encoded,
 * or the chat messages rendered by the model's template and encoded. */
static int prompt_ids(server *sv, const oj_serve_request *r, oj_tokens *ids, char *err,
                      size_t errlen) {
    if (r->prompt_ids) {
        ids->ids = malloc((size_t)r->n_prompt_ids * sizeof *ids->ids);
        if (ids->ids == NULL) return 500;
        memcpy(ids->ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof *ids->ids);
        ids->len = (size_t)r->n_prompt_ids;
        return 0;
    }
    char *text = r->chat ? oj_chat_render(sv->chat, r) : r->prompt;
    if (r->chat && sv->chat == OJ_CHAT_NONE) {
        snprintf(err, errlen, "chat completions are not available for this model: %s",
                 sv->chat_err);
        return 400;
    }
    if (text == NULL) return 500;
    oj_error e = {0};
    oj_status st = oj_tokenizer_encode(sv->tok, text, strlen(text), OJ_ENCODE_ALLOW_SPECIAL, ids, &e);
    if (r->chat) free(text);
    if (st != OJ_OK) {
        snprintf(err, errlen, "the prompt cannot be tokenized: %s", e.message);
        return 400;
    }
    /* a text prompt gets the tokenizer's template prefix (Llama's BOS), as
     * transformers' tokenizer(text) gives it; a rendered chat holds its own */
    if (!r->chat && !cli_add_template_prefix(sv->tok, ids)) return 500;
    if (ids->len == 0) {
        snprintf(err, errlen, "the prompt encodes to no tokens");
        return 400;
    }
    return 0;
}

static gen *gen_new(server *sv, int ep) {
    gen *g = calloc(1, sizeof *g);
    if (g == NULL) return NULL;
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g);
        return NULL;
    }
    if (pthread_cond_init(&g->cv, NULL) != 0) {
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    g->refs = 1; /* the handler's */
    g->sv = sv;
    g->ep = ep;
    g->t0 = cli_now();
    g->created = (long)time(NULL);
    g->fd = -1;
    return g;
}

static enum MHD_Result handle_generate(server *sv, struct MHD_Connection *mc, conn *cn) {
    /* the whole request is read: the connection may now wait on the
     * generation (serve_on_completed sets the idle timeout back) */
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, sv->busy_timeout);
    gen *g = gen_new(sv, cn->ep);
    if (g == NULL) return send_error(mc, cn, 500, "out of memory");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) g->fd = ci->connect_fd;
    char err[768] = "";
    if (oj_serve_request_parse(cn->body.p, cn->body.n, cn->ep == EP_CHAT, &g->req, err,
                               sizeof err) != OJ_OK) {
        gen_unref(g);
        return send_error(mc, cn, 400, "%s", err);
    }
    /* the scheduler queues a request choice by choice: more choices than
     * the queue holds could never be admitted (429 is for a queue full of
     * other requests, worth a retry) */
    if (g->req.n > sv->max_queue) {
        const long long n = (long long)g->req.n;
        gen_unref(g);
        return send_error(mc, cn, 400, "'n' is %lld; this server queues at most %lld choices "
                          "(--max-queue)", n, (long long)sv->max_queue);
    }
    /* as OpenAI and vLLM answer: a request naming another model is not
     * served by this one */
    if (g->req.model[0] && strcmp(g->req.model, sv->model_id) != 0) {
        char asked[sizeof g->req.model];
        snprintf(asked, sizeof asked, "%s", g->req.model);
        gen_unref(g);
        return send_error(mc, cn, 404, "the model '%s' does not exist: this server serves '%s' "
                          "(GET /v1/models)", asked, sv->model_id);
    }
    oj_tokens ids = {0};
    int code = prompt_ids(sv, &g->req, &ids, err, sizeof err);
    g->prompt = ids.ids; /* g owns the ids from here */
    g->n_prompt = (int64_t)ids.len;
    if (code) {
        gen_unref(g);
        return send_error(mc, cn, code, "%s", code == 500 ? "out of memory" : err);
    }
    if (g->n_prompt >= sv->ctx) {
        const long long n = (long long)g->n_prompt;
        gen_unref(g);
        return send_error(mc, cn, 400,
                          "the prompt has %lld tokens; the model's context holds %lld (the prompt "
                          "and at least one new token)",
                          n, (long long)sv->ctx);
    }
    oj_sampler_config sc = oj_sampler_config_default();
    sc.temperature = g->req.temperature;
    sc.top_p = g->req.top_p;
    sc.top_k = g->req.top_k;
    sc.max_new_tokens = g->req.max_tokens < 0 ? sv->ctx - g->n_prompt : g->req.max_tokens;
    sc.stop_token = g->req.chat && sv->chat_stop >= 0 ? sv->chat_stop : oj_tokenizer_eot(sv->tok);
    g->n = (int)g->req.n;
    pthread_mutex_lock(&sv->mu);
    sc.seed = g->req.has_seed ? g->req.seed : 0x5eed0000ull + sv->seed_counter++;
    /* 96 bits: mix64 is a bijection, so a run's ids are distinct; the
     * random key makes them differ across runs (as OpenAI's chatcmpl-...) */
    const uint64_t c = sv->id_counter++;
    snprintf(g->id, sizeof g->id, "%s-%016llx%08llx", g->req.chat ? "chatcmpl" : "cmpl",
             (unsigned long long)mix64(sv->id_key[0] + c),
             (unsigned long long)(mix64(sv->id_key[1] + c) >> 32));
    g->sc = sc;
    const bool down = sv->stopping;
    if (!down) post_job(sv, g, SERVE_JOB_SUBMIT);
    pthread_mutex_unlock(&sv->mu);
    if (down) {
        gen_unref(g);
        return send_error(mc, cn, 503, "the server is shutting down");
    }
    /* the scheduler thread submits it at its next step */
    pthread_mutex_lock(&g->mu);
    while (g->submitted == 0) pthread_cond_wait(&g->cv, &g->mu);
    const int refused = g->submitted < 0 ? g->submit_code : 0;
    snprintf(err, sizeof err, "%s", refused ? g->submit_err : "");
    pthread_mutex_unlock(&g->mu);
    if (refused) {
        gen_release(g);
        if (refused == 503 && err[0] == '\0')
            return send_error(mc, cn, 503, "the server is shutting down");
        return send_error(mc, cn, refused, "%s", err);
    }
    if (g->req.stream) {
        g->last_write = cli_now();
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, g, stream_free);
        if (r == NULL) {
            stream_free(g);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(mc, 200, r);
        MHD_destroy_response(r);
        cn->code = 200;
        return ok;
    }
    bool gone = false;
    pthread_mutex_lock(&g->mu);
    while (!all_done(g)) { /* the events signal the ends (nothing to send before) */
        if (client_gone(g->fd, true)) {
            gone = true;
            break;
        }
        if (stopping(sv)) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    const bool stopped = !all_done(g);
    pthread_mutex_unlock(&g->mu);
    bool timeout = false, failed = false;
    for (int i = 0; !stopped && i < g->n; i++) { /* all done: no event writes them any more */
        timeout |= g->ch[i].fin == OJ_FINISH_TIMEOUT;
        failed |= g->ch[i].fin == OJ_FINISH_ERROR;
    }
    json_t *resp = gone || stopped || timeout || failed ? NULL : full_response(g);
    pthread_mutex_lock(&sv->mu);
    if (gone) sv->disconnects++;
    observe(&sv->duration, cli_now() - g->t0);
    pthread_mutex_unlock(&sv->mu);
    double limit = sv->timeout_s;
    gen_release(g); /* cancels what still runs */
    if (gone) return MHD_NO; /* nobody to answer */
    if (stopped) return send_error(mc, cn, 503, "the server is shutting down");
    if (timeout) return send_error(mc, cn, 504, "the request took longer than %g s", limit);
    if (failed) return send_error(mc, cn, 500, "the model's forward failed (see the server's log)");
    return send_json(mc, cn, 200, resp);
}

/* ------------------------------------------------------------ other endpoints */

static enum MHD_Result handle_metrics(server *sv, struct MHD_Connection *mc, conn *cn) {
    sbuf b = {0};
    pthread_mutex_lock(&sv->mu);
    oj_sched_stats st = sv->stats; /* published by the scheduler thread after each step */
    sb_printf(&b, "# HELP ojas_requests_total HTTP requests answered, by endpoint and status.\n"
                  "# TYPE ojas_requests_total counter\n");
    for (int e = 0; e < EP_N; e++)
        for (int c = 0; c < N_CODES; c++)
            if (sv->requests[e][c])
                sb_printf(&b, "ojas_requests_total{endpoint=\"%s\",code=\"%d\"} %lld\n",
                          k_ep_names[e], k_codes[c], (long long)sv->requests[e][c]);
    struct {
        const char *name, *type, *help;
        int64_t v;
    } g[] = {
        {"ojas_prompt_tokens_total", "counter", "Prompt tokens admitted.", st.prompt_tokens},
        {"ojas_generated_tokens_total", "counter", "Tokens generated.", st.generated_tokens},
        {"ojas_scheduler_steps_total", "counter", "Batched forwards run.", st.steps},
        {"ojas_preemptions_total", "counter", "Running requests preempted (KV pool full) and recomputed.", st.preempted},
        {"ojas_queue_depth", "gauge", "Requests waiting for a seat in the batch.", st.queued},
        {"ojas_running_requests", "gauge", "Requests in the running batch.", st.running},
        {"ojas_batch_size", "gauge", "Sequences in the last step.", st.last_batch},
        {"ojas_kv_blocks_used", "gauge", "KV blocks held by requests.", st.blocks_used},
        {"ojas_kv_blocks_total", "gauge", "KV blocks in the pool.", st.blocks_total},
        {"ojas_kv_block_size", "gauge", "Positions per KV block.", st.block_size},
        {"ojas_client_disconnects_total", "counter", "Requests cancelled by a closed connection.",
         sv->disconnects},
        {"ojas_request_timeouts_total", "counter", "Requests ended by their deadline.", sv->timeouts},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", g[i].name, g[i].help, g[i].name,
                  g[i].type, g[i].name, (long long)g[i].v);
    /* where the steps' time went (host clock; decode_wait is 0 unless
     * OJAS_SERVE_PROFILE=1, when the decode step waits for the device) */
    const oj_sched_profile *p = &sv->sprof;
    const struct {
        const char *phase;
        double s;
    } ph[] = {{"schedule", p->schedule_s},
              {"decode_prepare", p->decode.prepare_s},
              {"decode_upload", p->decode.upload_s},
              {"decode_launch", p->decode.launch_s},
              {"decode_wait", p->decode.wait_s},
              {"decode_readback", p->decode.readback_s},
              {"decode_other", p->decode_s - (p->decode.prepare_s + p->decode.upload_s +
                                              p->decode.launch_s + p->decode.wait_s +
                                              p->decode.readback_s)},
              {"prefill", p->prefill_s},
              {"sample", p->sample_s},
              {"events", p->events_s}};
    sb_printf(&b, "# HELP ojas_step_seconds_total Host seconds of the scheduler's steps, by phase.\n"
                  "# TYPE ojas_step_seconds_total counter\n");
    for (size_t i = 0; i < sizeof ph / sizeof ph[0]; i++)
        sb_printf(&b, "ojas_step_seconds_total{phase=\"%s\"} %.6f\n", ph[i].phase, ph[i].s);
    sb_printf(&b, "# HELP ojas_decode_steps_total Decode steps (one-token rows, a graph replay on CUDA).\n"
                  "# TYPE ojas_decode_steps_total counter\nojas_decode_steps_total %lld\n"
                  "# HELP ojas_decode_rows_total Rows of the decode steps.\n"
                  "# TYPE ojas_decode_rows_total counter\nojas_decode_rows_total %lld\n",
              (long long)p->decode_steps, (long long)p->decode_rows);
    struct {
        const char *name, *help;
        const histogram *h;
    } hs[] = {{"ojas_time_to_first_token_seconds", "Time from request to its first token.", &sv->ttft},
              {"ojas_inter_token_latency_seconds", "Time between a choice's tokens.", &sv->itl},
              {"ojas_request_duration_seconds", "Time from request to its end.", &sv->duration}};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        sb_printf(&b, "# HELP %s %s\n# TYPE %s histogram\n", hs[i].name, hs[i].help, hs[i].name);
        int64_t cum = 0;
        for (int k = 0; k < N_BUCKETS; k++) {
            cum += hs[i].h->counts[k];
            sb_printf(&b, "%s_bucket{le=\"%g\"} %lld\n", hs[i].name, k_buckets[k], (long long)cum);
        }
        sb_printf(&b, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", hs[i].name,
                  (long long)hs[i].h->n, hs[i].name, hs[i].h->sum, hs[i].name,
                  (long long)hs[i].h->n);
    }
    pthread_mutex_unlock(&sv->mu);
    enum MHD_Result ok = send_text(mc, cn, 200, "text/plain; version=0.0.4", b.p ? b.p : "");
    free(b.p);
    return ok;
}

enum MHD_Result serve_on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    conn *cn = *con_cls;
    if (cn == NULL) {
        cn = calloc(1, sizeof *cn);
        if (cn == NULL) return MHD_NO;
        *con_cls = cn;
        cn->ep = strcmp(url, "/v1/completions") == 0        ? EP_COMPLETIONS
                 : strcmp(url, "/v1/chat/completions") == 0 ? EP_CHAT
                 : strcmp(url, "/v1/models") == 0           ? EP_MODELS
                 : strcmp(url, "/health") == 0              ? EP_HEALTH
                 : strcmp(url, "/metrics") == 0             ? EP_METRICS
                                                            : EP_OTHER;
        if (cn->ep == EP_COMPLETIONS || cn->ep == EP_CHAT) {
            pthread_mutex_lock(&sv->mu);
            sv->active++;
            pthread_mutex_unlock(&sv->mu);
        }
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoll(cl, NULL, 10) > sv->max_body)
            return send_error(mc, cn, 400, "the body has %s bytes; at most %lld are accepted", cl,
                              (long long)sv->max_body);
        return MHD_YES;
    }
    if (*data_size > 0) {
        if (cn->body.n + *data_size > (size_t)sv->max_body)
            cn->too_big = true;
        else if (!cn->too_big && !sb_add(&cn->body, data, *data_size))
            cn->too_big = true;
        *data_size = 0;
        return MHD_YES;
    }
    if (cn->code) return MHD_YES; /* answered already (an early refusal) */
    bool post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
    switch (cn->ep) {
    case EP_COMPLETIONS:
    case EP_CHAT:
        if (!post) return send_error(mc, cn, 405, "%s takes POST, not %s", url, method);
        if (cn->too_big)
            return send_error(mc, cn, 400, "the body exceeds %lld bytes", (long long)sv->max_body);
        return handle_generate(sv, mc, cn);
    case EP_MODELS:
        if (!get) return send_error(mc, cn, 405, "%s takes GET, not %s", url, method);
        return send_json(mc, cn, 200,
                         json_pack("{s:s,s:[{s:s,s:s,s:i,s:s,s:I}]}", "object", "list", "data",
                                   "id", sv->model_id, "object", "model", "created", 0,
                                   "owned_by", "ojas", "max_model_len", (json_int_t)sv->ctx));
    case EP_HEALTH:
        if (!get) return send_error(mc, cn, 405, "%s takes GET, not %s", url, method);
        return stopping(sv) ? send_error(mc, cn, 503, "the server is shutting down")
                            : send_json(mc, cn, 200, json_pack("{s:s}", "status", "ok"));
    case EP_METRICS:
        if (!get) return send_error(mc, cn, 405, "%s takes GET, not %s", url, method);
        return handle_metrics(sv, mc, cn);
    default:
        return send_error(mc, cn, 404, "no endpoint %s (see /v1/completions, /v1/chat/completions, "
                                       "/v1/models, /health, /metrics)", url);
    }
}

void serve_on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    server *sv = cls;
    conn *cn = *con_cls;
    if (cn == NULL) return;
    if (cn->ep == EP_COMPLETIONS || cn->ep == EP_CHAT)
        MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, sv->idle_timeout);
    int c = 0;
    while (c < N_CODES && k_codes[c] != cn->code) c++;
    pthread_mutex_lock(&sv->mu);
    if (c < N_CODES) sv->requests[cn->ep][c]++;
    if (cn->ep == EP_COMPLETIONS || cn->ep == EP_CHAT) sv->active--;
    pthread_mutex_unlock(&sv->mu);
    free(cn->body.p);
    free(cn);
    *con_cls = NULL;
}
