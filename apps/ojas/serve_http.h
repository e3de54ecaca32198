/* The HTTP side of `ojas serve` (serve_http.c), shared with cmd_serve.c:
 * the server's state, and the libmicrohttpd callbacks that answer the
 * endpoints. docs/serve.md describes the server. */
#ifndef OJAS_SERVE_HTTP_H
#define OJAS_SERVE_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <microhttpd.h>

#include "ojas/data.h"
#include "ojas/serve.h"

/* The endpoints, and the status codes and latency buckets of /metrics. */
enum { EP_COMPLETIONS, EP_CHAT, EP_MODELS, EP_HEALTH, EP_METRICS, EP_OTHER, EP_N };
#define SERVE_N_CODES 8
#define SERVE_N_BUCKETS 13

typedef struct {
    int64_t counts[SERVE_N_BUCKETS + 1];
    double sum;
    int64_t n;
} serve_histogram;

struct gen;

/* A handler's message to the scheduler thread, the only thread that calls
 * the scheduler (oj_sched_*): submit a generation's choices, or cancel
 * those still running. Each job holds a reference on its generation. */
typedef struct serve_job {
    int kind; /* SERVE_JOB_SUBMIT, SERVE_JOB_CANCEL */
    struct gen *g;
    struct serve_job *next;
} serve_job;
enum { SERVE_JOB_SUBMIT, SERVE_JOB_CANCEL };

/* Host-side seconds of the server's own phases (OJAS_SERVE_PROFILE=1):
 * the scheduler thread's (jobs, publishing, idle) and the handlers'
 * (server-sent events built). */
typedef struct serve_profile {
    double jobs_s;        /* submissions and cancellations run on the scheduler */
    double publish_s;     /* the server's mutex taken and the statistics published */
    double idle_s;        /* waiting for work */
    double event_lock_s;  /* the token events waiting for a generation's mutex */
    double sse_s;         /* handlers building server-sent events (JSON) */
    int64_t sse_chunks, sse_bytes;
} serve_profile;

/* One server: the model, its tokenizer and scheduler, the handlers' inbox
 * to the scheduler thread, and the counters of /metrics.
 * Threads: the scheduler thread alone calls the scheduler and runs the
 * model; it never holds `mu` during a step. `mu` guards the inbox, the
 * published statistics and the counters (held briefly); a generation's
 * own mutex guards its tokens between the token events and its handler,
 * so no handler waits for a step and no step waits for a client. */
typedef struct server {
    oj_engine *eng;
    oj_gpt *m;
    oj_tokenizer *tok;
    oj_sched *s;            /* the scheduler thread's alone */
    pthread_mutex_t mu;
    pthread_cond_t work;    /* the scheduler thread waits for jobs */
    serve_job *inbox, *inbox_tail;
    bool stop_sched, stopping;
    bool busy;              /* published: requests queued or running, or jobs waiting */
    oj_sched_stats stats;   /* published after every step */
    oj_sched_profile sprof; /* the steps' phases, published after every step */
    char model_id[256];
    oj_chat_template chat;
    char chat_err[320];
    int32_t chat_stop; /* the template's end-of-turn token id, or -1 */
    int64_t ctx, max_body;
    unsigned idle_timeout, busy_timeout; /* connection timeouts, seconds (--idle-timeout; --timeout + 60) */
    int64_t max_queue; /* the scheduler's max_queue: choices of one request at most */
    double timeout_s;
    uint64_t seed_counter;
    /* response ids: a per-run random key (serve_ids_init) and a counter */
    uint64_t id_key[2], id_counter;
    /* each token id's bytes (oj_tokenizer_decode of that id alone):
     * piece_blob[piece_off[t]..piece_off[t + 1]), for t < n_pieces */
    char *piece_blob;
    int64_t *piece_off, n_pieces;
    int64_t requests[EP_N][SERVE_N_CODES];
    serve_histogram ttft, duration, itl;
    int64_t disconnects, timeouts;
    int64_t active; /* generation requests not yet answered in full */
    /* the scheduler thread's own: the events' counters, published to the
     * above after each step */
    serve_histogram s_ttft, s_itl;
    int64_t s_timeouts;
    bool profile; /* OJAS_SERVE_PROFILE=1 */
    serve_profile prof; /* the scheduler thread's fields are its own; the handlers' under mu */
} server;

/* The scheduler thread's jobs (handlers post them with mu held): run
 * every job of the list (submissions, cancellations). */
void serve_run_jobs(server *sv, serve_job *jobs);
/* sv's response-id key from getrandom (time and PID without it), so that
 * ids differ from one run of the server to the next. */
void serve_ids_init(server *sv);
/* Each token id's bytes into sv's table (once, before serving). False:
 * out of memory. */
bool serve_pieces_init(server *sv);


/* libmicrohttpd's access handler (cls: the server): routes a request to
 * its endpoint, accumulating a body first (at most max_body bytes). */
enum MHD_Result serve_on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                 const char *method, const char *version, const char *data,
                                 size_t *data_size, void **con_cls);
/* libmicrohttpd's completion callback (cls: the server): counts the
 * answered request in /metrics and frees its state. */
void serve_on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                        enum MHD_RequestTerminationCode toe);

#endif /* OJAS_SERVE_HTTP_H */
