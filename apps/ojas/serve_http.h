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

/* One server: the model, its tokenizer and scheduler, the mutex that
 * serialises the scheduler's calls, and the counters of /metrics. */
typedef struct server {
    oj_engine *eng;
    oj_gpt *m;
    oj_tokenizer *tok;
    oj_sched *s;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* the scheduler thread waits for requests */
    pthread_cond_t progress; /* handlers wait for tokens */
    pthread_cond_t drained;  /* the scheduler waits (briefly) for handlers to read */
    int64_t pending;         /* generations with events their handler has not seen */
    bool stop_sched, stopping;
    char model_id[256];
    oj_chat_template chat;
    char chat_err[320];
    int32_t chat_stop; /* the template's end-of-turn token id, or -1 */
    int64_t ctx, max_body;
    double timeout_s;
    uint64_t seed_counter;
    int64_t requests[EP_N][SERVE_N_CODES];
    serve_histogram ttft, duration, itl;
    int64_t disconnects, timeouts;
    int64_t active; /* generation requests not yet answered in full */
} server;

/* Monotonic seconds. */
double serve_now(void);

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
