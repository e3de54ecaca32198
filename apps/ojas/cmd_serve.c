/* ojas serve: an OpenAI-compatible HTTP server over the continuous-batching
 * scheduler (serve.h), on libmicrohttpd. docs/serve.md describes it.
 *
 * Threads: libmicrohttpd runs one thread per connection (bounded by
 * --max-connections); a handler parses and tokenizes its request, posts
 * it to the scheduler thread and waits on its generation's condition
 * variable for its tokens, polling its socket so that a client that goes
 * away cancels its request (its KV blocks are freed at the next step). One
 * scheduler thread, the only one that calls the scheduler, runs its jobs
 * and oj_sched_step while any request is queued or running, without a
 * lock during the step; the token events it calls append to the
 * generations' buffers under their own mutexes. The
 * main thread waits for SIGTERM or SIGINT, then stops accepting, lets
 * in-flight requests finish for --shutdown-grace seconds, cancels the rest
 * and exits 0. The signals reach main through a pipe written by their
 * handler: threads made before main could block them (OpenBLAS's, made
 * when the library loads) may be the ones the kernel delivers them to, so
 * a sigwait in main alone would leave a signal to their default action. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/env.h"
#include "ojas/train.h"
#include "serve_http.h"

static const char *k_help =
    "usage: ojas serve (--model DIR|CHECKPOINT | --weights FILE --model PRESET) [options]\n"
    "Serve a model over HTTP with OpenAI's API: POST /v1/completions,\n"
    "POST /v1/chat/completions (stream: true for server-sent events), GET /v1/models,\n"
    "GET /health, GET /metrics (Prometheus text). Requests are decoded together\n"
    "(continuous batching over a paged KV cache). SIGTERM or SIGINT stops it gracefully.\n"
    "  -m, --model DIR|PRESET     a Hugging Face model directory (gpt2 or llama family),\n"
    "                             a checkpoint (run) directory of 'ojas train', or the\n"
    "                             preset of --weights (not a .gguf file: 'ojas generate'\n"
    "                             runs those)\n"
    "      --weights FILE         a safetensors file of preset --model\n"
    "      --vocab DIR            the tokenizer (default: the model directory, or the\n"
    "                             checkpoint's run's tokenizer_dir)\n"
    "      --host ADDR            IPv4 address to listen on (default 127.0.0.1)\n"
    "      --port N               TCP port (default 8080; 0: any free port, printed)\n"
    "  -d, --device D             cpu | cuda | cuda:N (default cpu); on cuda the decode\n"
    "                             steps run as one CUDA graph per batch-size bucket\n"
    "      --numerics N           exact | fast (default exact: a greedy request's tokens\n"
    "                             are those of 'ojas generate --numerics exact' for it\n"
    "                             alone, bit for bit on the cpu; fast lets CUDA use TF32\n"
    "                             GEMMs for f32 weights, whose rounding depends on the batch)\n"
    "  -j, --threads N            CPU threads of the engine (default 0: all usable)\n"
    "      --max-batch N          requests decoded together at most (default 8)\n"
    "      --budget-bytes N       the engine's memory budget (suffix K, M, G, T)\n"
    "      --kv-bytes N           bytes of the paged KV pool (default 64M)\n"
    "      --block-size N         positions per KV block (default 16)\n"
    "      --prefill-chunk N      prompt tokens of one request per step (default 128)\n"
    "      --max-step-tokens N    tokens packed into one step (default 256; >= --max-batch)\n"
    "      --max-queue N          requests waiting at most; beyond: HTTP 429 (default 256)\n"
    "      --max-body N           request body bytes at most; beyond: HTTP 400 (default 1M)\n"
    "      --max-connections N    open connections at most (default 256)\n"
    "      --timeout S            seconds a request may take; then HTTP 504 (default 600)\n"
    "      --idle-timeout S       seconds a connection may idle while sending its request or\n"
    "                             between requests; then closed (default 30)\n"
    "      --shutdown-grace S     seconds in-flight requests get after SIGTERM (default 10)\n"
    "      --model-name NAME      the id /v1/models reports (default: the --model argument)\n"
    "  -h, --help                 this help\n";

/* The scheduler thread: the only one that calls the scheduler. It takes
 * the handlers' jobs (submissions, cancellations) and publishes the
 * statistics and event counters under the server's mutex, once a step,
 * and runs the step itself without any lock held: handlers never wait for
 * a forward, and the step never waits for a handler or a client. */
/* SIGTERM/SIGINT's handler: the signal's number into the pipe main reads
 * (write is async-signal-safe; errno is kept for the interrupted thread) */
static int g_sig_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
    int saved = errno;
    ssize_t r = write(g_sig_pipe[1], &sig, sizeof sig);
    (void)r;
    errno = saved;
}

/* With sv->mu held: poll every 10 ms until no handler is active (and with
 * `sched`, the scheduler has no work) or the clock passes `until`. */
static void wait_handlers(server *sv, bool sched, double until) {
    while ((sv->active > 0 || (sched && sv->busy)) && cli_now() < until) {
        pthread_mutex_unlock(&sv->mu);
        usleep(10 * 1000);
        pthread_mutex_lock(&sv->mu);
    }
}

static void *sched_thread(void *arg) {
    server *sv = arg;
    bool busy = false; /* requests queued or running (the scheduler's, seen here) */
    pthread_mutex_lock(&sv->mu);
    while (!sv->stop_sched) {
        serve_job *jobs = sv->inbox;
        sv->inbox = sv->inbox_tail = NULL;
        if (jobs == NULL && !busy) {
            double t = sv->profile ? cli_now() : 0.0;
            sv->busy = false;
            pthread_cond_wait(&sv->work, &sv->mu);
            if (sv->profile) sv->prof.idle_s += cli_now() - t;
            continue;
        }
        pthread_mutex_unlock(&sv->mu);
        double t0 = sv->profile ? cli_now() : 0.0;
        serve_run_jobs(sv, jobs);
        double t1 = sv->profile ? cli_now() : 0.0;
        if (oj_sched_busy(sv->s) && oj_sched_step(sv->s) != OJ_OK)
            fprintf(stderr, "ojas: serve: %s\n", oj_sched_error(sv->s));
        busy = oj_sched_busy(sv->s);
        oj_sched_stats st = oj_sched_get_stats(sv->s);
        oj_sched_profile pr = oj_sched_get_profile(sv->s);
        double t2 = sv->profile ? cli_now() : 0.0;
        pthread_mutex_lock(&sv->mu);
        sv->stats = st;
        sv->sprof = pr;
        sv->ttft = sv->s_ttft;
        sv->itl = sv->s_itl;
        sv->timeouts = sv->s_timeouts;
        sv->busy = busy || sv->inbox != NULL;
        if (sv->profile) {
            sv->prof.jobs_s += t1 - t0;
            sv->prof.publish_s += cli_now() - t2;
        }
    }
    /* the handlers are gone: their last cancellations free what still runs */
    serve_job *jobs = sv->inbox;
    sv->inbox = sv->inbox_tail = NULL;
    pthread_mutex_unlock(&sv->mu);
    serve_run_jobs(sv, jobs);
    return NULL;
}

/* OJAS_SERVE_PROFILE=1: where the steps' time went, on stderr. */
static void print_profile(server *sv) {
    const oj_sched_profile p = oj_sched_get_profile(sv->s);
    const serve_profile *q = &sv->prof;
    const double steps_s = p.schedule_s + p.decode_s + p.prefill_s + p.sample_s + p.events_s;
    const double n = p.steps > 0 ? (double)p.steps : 1.0;
    fprintf(stderr,
            "ojas: serve profile: %lld steps (%lld decode steps of %.1f rows on average, %lld "
            "with packed forwards of %lld prompt tokens and %lld one-token decode rows in all), "
            "%.3f s in steps, %.3f s on jobs, %.3f s publishing, %.3f s idle\n",
            (long long)p.steps, (long long)p.decode_steps,
            p.decode_steps ? (double)p.decode_rows / (double)p.decode_steps : 0.0,
            (long long)p.prefill_steps, (long long)p.prefill_tokens,
            (long long)p.eager_decode_rows, steps_s, q->jobs_s,
            q->publish_s, q->idle_s);
    struct {
        const char *name;
        double s;
    } rows[] = {
        {"schedule (deadlines, admission, blocks, packing)", p.schedule_s},
        {"decode: inputs staged on the host", p.decode.prepare_s},
        {"decode: upload", p.decode.upload_s},
        {"decode: graph launch", p.decode.launch_s},
        {"decode: device (waited for)", p.decode.wait_s},
        {"decode: read-back (ids, logprobs)", p.decode.readback_s},
        {"decode: other", p.decode_s - (p.decode.prepare_s + p.decode.upload_s + p.decode.launch_s +
                                        p.decode.wait_s + p.decode.readback_s)},
        {"packed forward (prompt chunks; eager: decode rows too)", p.prefill_s},
        {"sample (host)", p.sample_s},
        {"token events (detokenise, stop strings)", p.events_s},
        {"  of which waiting for a generation's mutex", q->event_lock_s},
        {"jobs (submit, cancel)", q->jobs_s},
        {"publish (server mutex, statistics)", q->publish_s},
    };
    fprintf(stderr, "  %-48s %10s %10s %6s\n", "phase", "total s", "ms/step", "share");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        fprintf(stderr, "  %-48s %10.4f %10.4f %5.1f%%\n", rows[i].name, rows[i].s,
                1e3 * rows[i].s / n, steps_s > 0 ? 100.0 * rows[i].s / steps_s : 0.0);
    fprintf(stderr,
            "  handlers: %lld server-sent event writes (%lld bytes) built in %.4f s (%.1f us "
            "each), on their own threads\n",
            (long long)q->sse_chunks, (long long)q->sse_bytes, q->sse_s,
            q->sse_chunks ? 1e6 * q->sse_s / (double)q->sse_chunks : 0.0);
}

/* ------------------------------------------------------------ setup */

/* The chat template of the tokenizer directory dir (its
 * tokenizer_config.json), or OJ_CHAT_NONE with the reason in sv->chat_err;
 * its end-of-turn token in sv->chat_stop. */
static void load_chat_template(server *sv, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    size_t len = 0;
    char *text = access(path, R_OK) == 0 ? cli_read_all(path, &len) : NULL;
    if (oj_chat_template_detect(text, len, &sv->chat, sv->chat_err, sizeof sv->chat_err) != OJ_OK)
        sv->chat = OJ_CHAT_NONE;
    free(text);
    sv->chat_stop = -1;
    if (sv->chat == OJ_CHAT_CHATML || sv->chat == OJ_CHAT_QWEN25)
        sv->chat_stop = oj_tokenizer_special_id(sv->tok, "<|im_end|>");
    else if (sv->chat != OJ_CHAT_NONE)
        sv->chat_stop = oj_tokenizer_special_id(sv->tok, "<|eot_id|>");
}

enum { OPT_WEIGHTS = 256, OPT_VOCAB, OPT_HOST, OPT_PORT, OPT_MAX_BATCH, OPT_BUDGET, OPT_KV_BYTES, OPT_BLOCK,
       OPT_QUEUE, OPT_BODY, OPT_CONNS, OPT_TIMEOUT, OPT_IDLE, OPT_GRACE, OPT_NAME, OPT_NUMERICS,
       OPT_CHUNK, OPT_STEP_TOKENS };

static const struct option k_long[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, 'm'},
    {"weights", required_argument, NULL, OPT_WEIGHTS},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"device", required_argument, NULL, 'd'},
    {"threads", required_argument, NULL, 'j'},
    {"max-batch", required_argument, NULL, OPT_MAX_BATCH},
    {"budget-bytes", required_argument, NULL, OPT_BUDGET},
    {"kv-bytes", required_argument, NULL, OPT_KV_BYTES},
    {"block-size", required_argument, NULL, OPT_BLOCK},
    {"max-queue", required_argument, NULL, OPT_QUEUE},
    {"max-body", required_argument, NULL, OPT_BODY},
    {"max-connections", required_argument, NULL, OPT_CONNS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"idle-timeout", required_argument, NULL, OPT_IDLE},
    {"shutdown-grace", required_argument, NULL, OPT_GRACE},
    {"model-name", required_argument, NULL, OPT_NAME},
    {"numerics", required_argument, NULL, OPT_NUMERICS},
    {"prefill-chunk", required_argument, NULL, OPT_CHUNK},
    {"max-step-tokens", required_argument, NULL, OPT_STEP_TOKENS},
    {NULL, 0, NULL, 0},
};

/* Load the model named by the options into sv (engine, model, tokenizer).
 * CLI_OK, or an error printed and its code. */
static int load_model(server *sv, const char *model, const char *weights, const char *vocab,
                      const oj_engine_config *ec) {
    oj_error e = {0};
    oj_train_config run = oj_train_config_default();
    char dir[4200], ckpt[4096] = "";
    oj_gpt_config cfg;
    bool hf = false;
    if (weights) {
        if (!oj_gpt_preset(model, &cfg)) {
            char names[512];
            return cli_error(CLI_USAGE, "serve: unknown model preset '%s' (presets: %s)", model,
                             oj_gpt_preset_list(names, sizeof names));
        }
    } else {
        size_t n = strlen(model);
        if (n > 5 && strcmp(model + n - 5, ".gguf") == 0)
            return cli_error(CLI_FAIL, "serve: '%s' is a GGUF file, which serve does not take (it "
                                       "serves a model directory, a checkpoint or --weights); "
                                       "serve the model it was made from, or run it with 'ojas "
                                       "generate -m %s'", model, model);
        if (access(model, F_OK) != 0)
            return cli_error(CLI_FAIL, "serve: model '%s' does not exist", model);
        snprintf(dir, sizeof dir, "%s/config.json", model);
        hf = access(dir, F_OK) == 0;
        if (!hf) {
            if (cli_find_checkpoint("serve", model, ckpt, sizeof ckpt, &run, &e) != OJ_OK)
                return cli_error(CLI_FAIL, "serve: '%s' is neither a model directory (no "
                                           "config.json) nor a checkpoint: %s", model, e.message);
            if (vocab == NULL && run.tokenizer_dir[0]) vocab = run.tokenizer_dir;
        } else if (vocab == NULL) {
            vocab = model;
        }
    }
    if (vocab == NULL)
        return cli_error(CLI_USAGE, "serve: --vocab DIR is required (the tokenizer)");
    if (oj_tokenizer_load(vocab, &sv->tok, &e) != OJ_OK)
        return cli_error(CLI_FAIL, "serve: %s", e.message);
    load_chat_template(sv, vocab);
    if (oj_engine_create(ec, &sv->eng, &e) != OJ_OK)
        return cli_error(CLI_FAIL, "serve: %s", e.message);
    if (hf) {
        if (oj_gpt_load_dir(sv->eng, model, &sv->m, &e) != OJ_OK)
            return cli_error(CLI_FAIL, "serve: %s", e.message);
    } else if (weights) {
        if (oj_gpt_create(sv->eng, &cfg, 0, &sv->m) != OJ_OK ||
            oj_gpt_load_safetensors(sv->m, weights, &e) != OJ_OK)
            return cli_error(CLI_FAIL, "serve: %s", e.status ? e.message : oj_last_error(sv->eng));
    } else {
        if (cli_gpt_from_checkpoint(sv->eng, &run, sv->tok, ckpt, &sv->m, &e) != OJ_OK)
            return cli_error(CLI_FAIL, "serve: %s", e.message);
    }
    const oj_gpt_config *mc = oj_gpt_get_config(sv->m);
    if (mc->family == OJ_NANOLAB)
        return cli_error(CLI_FAIL, "serve: the nanolab family is not served (its value residual "
                                   "and sliding window are not paged); use 'ojas generate', or a "
                                   "gpt2 or llama-family model");
    if (oj_tokenizer_vocab_size(sv->tok) > mc->vocab_size)
        return cli_error(CLI_FAIL, "serve: the tokenizer has %d tokens, more than the model's "
                                   "vocabulary of %lld", oj_tokenizer_vocab_size(sv->tok),
                         (long long)mc->vocab_size);
    sv->ctx = mc->block_size;
    return CLI_OK;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *weights = NULL, *vocab = NULL, *host = "127.0.0.1", *device = "cpu";
    const char *name = NULL, *numerics = "exact";
    bool step_tokens_set = false;
    int64_t port = 8080, threads = 0, budget = 0, conns = 256;
    double grace = 10.0, idle = 30.0;
    oj_sched_config sc = oj_sched_config_default();
    server sv = {0};
    sv.max_body = 1 << 20;
    sv.timeout_s = 600.0;
    int c;
    cli_getopt_state gs = {.cmd = "serve", .shortopts = "hm:d:j:", .longopts = k_long};
    while ((c = cli_getopt(&gs, argc, argv)) != -1) {
        const char *v = optarg;
        bool ok = true;
        switch (c) {
        case 'h': fputs(k_help, stdout); return CLI_OK;
        case 'm': model = v; break;
        case OPT_WEIGHTS: weights = v; break;
        case OPT_VOCAB: vocab = v; break;
        case OPT_HOST: host = v; break;
        case OPT_NAME: name = v; break;
        case OPT_NUMERICS: numerics = v; break;
        case 'd': device = v; break;
        case OPT_PORT: ok = cli_parse_i64("serve: --port", v, 0, 65535, &port); break;
        case 'j': ok = cli_parse_i64("serve: --threads", v, 0, 4096, &threads); break;
        case OPT_MAX_BATCH: ok = cli_parse_i64("serve: --max-batch", v, 1, 4096, &sc.max_batch); break;
        case OPT_BUDGET: ok = cli_parse_bytes("serve: --budget-bytes", v, &budget); break;
        case OPT_KV_BYTES: ok = cli_parse_bytes("serve: --kv-bytes", v, &sc.kv_bytes); break;
        case OPT_BLOCK: ok = cli_parse_i64("serve: --block-size", v, 1, 1 << 16, &sc.block_size); break;
        case OPT_CHUNK: ok = cli_parse_i64("serve: --prefill-chunk", v, 1, 1 << 20, &sc.prefill_chunk); break;
        case OPT_STEP_TOKENS:
            ok = cli_parse_i64("serve: --max-step-tokens", v, 1, 1 << 24, &sc.max_step_tokens);
            step_tokens_set = true;
            break;
        case OPT_QUEUE: ok = cli_parse_i64("serve: --max-queue", v, 1, 1 << 20, &sc.max_queue); break;
        case OPT_BODY: ok = cli_parse_bytes("serve: --max-body", v, &sv.max_body); break;
        case OPT_CONNS: ok = cli_parse_i64("serve: --max-connections", v, 1, 65536, &conns); break;
        case OPT_IDLE:
            ok = cli_parse_double("serve: --idle-timeout", v, &idle);
            if (ok && !(idle >= 1 && idle <= 1e6)) {
                ok = false;
                cli_error(CLI_USAGE, "serve: --idle-timeout must be in [1, 1e6] seconds, got '%s'",
                          v);
            }
            break;
        case OPT_TIMEOUT:
            /* bounded: it is also the connection timeout's base, an unsigned */
            ok = cli_parse_double("serve: --timeout", v, &sv.timeout_s);
            if (ok && !(sv.timeout_s > 0 && sv.timeout_s <= 1e6)) {
                ok = false;
                cli_error(CLI_USAGE, "serve: --timeout must be in (0, 1e6] seconds, got '%s'", v);
            }
            break;
        case OPT_GRACE:
            ok = cli_parse_double("serve: --shutdown-grace", v, &grace);
            if (ok && !(grace >= 0 && isfinite(grace))) { /* one line: not after parse's */
                ok = false;
                cli_error(CLI_USAGE, "serve: --shutdown-grace must be a finite number of seconds "
                                     ">= 0, got '%s'", v);
            }
            break;
        default: return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    if (optind < argc) return cli_unexpected("serve", argv[optind]);
    if (model == NULL)
        return cli_error(CLI_USAGE, "serve: --model DIR|CHECKPOINT (or --weights FILE --model "
                                    "PRESET) is required");
    if (name != NULL && name[0] == '\0')
        return cli_error(CLI_USAGE, "serve: --model-name must not be empty");
    sv.max_queue = sc.max_queue;
    /* a request being read, or an idle keep-alive connection, has the
     * short timeout; a generation's connection the long one (its handler
     * raises it: the writes come only at the end or as tokens arrive) */
    sv.idle_timeout = (unsigned)idle;
    sv.busy_timeout = (unsigned)(sv.timeout_s + 60);
    oj_engine_config ec = oj_engine_config_default();
    if (!oj_device_parse(device, &ec.device))
        return cli_error(CLI_USAGE, "serve: --device must be cpu, cuda or cuda:N, got '%s'", device);
    if (strcmp(numerics, "fast") != 0 && strcmp(numerics, "exact") != 0)
        return cli_error(CLI_USAGE, "serve: --numerics must be exact or fast, got '%s'", numerics);
    /* EXACT: on the CPU a request's tokens are the bits of 'ojas generate
     * --numerics exact' whatever else is in the batch; on CUDA they are its
     * tokens (f32 GEMMs without TF32, sums in fixed orders) */
    ec.numerics = strcmp(numerics, "exact") == 0 ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST;
    ec.threads = (int)threads;
    if (budget > 0) ec.budget_bytes = budget;
    if (step_tokens_set && sc.max_step_tokens < sc.max_batch)
        return cli_error(CLI_USAGE, "serve: --max-step-tokens %lld must be >= --max-batch %lld (a "
                                    "seat for every running request)",
                         (long long)sc.max_step_tokens, (long long)sc.max_batch);
    if (sc.max_step_tokens < sc.max_batch) sc.max_step_tokens = sc.max_batch;
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return cli_error(CLI_USAGE, "serve: --host must be an IPv4 address, got '%s'", host);

    int rc = load_model(&sv, model, weights, vocab, &ec);
    if (rc == CLI_OK && oj_sched_create(sv.m, &sc, &sv.s) != OJ_OK)
        rc = cli_error(CLI_FAIL, "serve: the KV pool: %s", oj_last_error(sv.eng));
    if (rc == CLI_OK && !serve_pieces_init(&sv))
        rc = cli_error(CLI_FAIL, "serve: out of memory for the tokens' text");
    if (rc == CLI_OK && oj_gpt_get_config(sv.m)->vocab_size > sv.n_pieces)
        /* a padded vocab_size: ids past the tokenizer have no text */
        fprintf(stderr,
                "ojas: serve: warning: the model's vocab_size is %lld, the tokenizer's %lld ids: "
                "a generated id past them has no text (an empty piece)\n",
                (long long)oj_gpt_get_config(sv.m)->vocab_size, (long long)sv.n_pieces);
    if (rc != CLI_OK) {
        oj_sched_free(sv.s);
        oj_gpt_free(sv.m);
        oj_engine_free(sv.eng);
        oj_tokenizer_free(sv.tok);
        free(sv.piece_blob);
        free(sv.piece_off);
        return rc;
    }
    sv.profile = oj__env_flag("OJAS_SERVE_PROFILE", false);
    if (sv.profile) oj_sched_set_profile_sync(sv.s, true);
    snprintf(sv.model_id, sizeof sv.model_id, "%s", name ? name : model);
    serve_ids_init(&sv);
    pthread_mutex_init(&sv.mu, NULL);
    pthread_cond_init(&sv.work, NULL);

    /* signals: a handler in whichever thread gets one writes it to a pipe
     * main reads; the threads made here block them (no EINTR in their
     * calls) */
    if (pipe2(g_sig_pipe, O_CLOEXEC) != 0 || fcntl(g_sig_pipe[1], F_SETFL, O_NONBLOCK) != 0) {
        rc = cli_error(CLI_FAIL, "serve: the signals' pipe: %s", strerror(errno));
    }
    struct sigaction sa, old_int, old_term, old_pipe;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &old_pipe);
    sigset_t sigs, main_mask;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigs, &main_mask);
    const oj_sched_stats st = oj_sched_get_stats(sv.s); /* before the scheduler thread has it */
    pthread_t th;
    pthread_create(&th, NULL, sched_thread, &sv);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, serve_on_request, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)conns, MHD_OPTION_CONNECTION_TIMEOUT,
        sv.idle_timeout, MHD_OPTION_NOTIFY_COMPLETED, serve_on_completed, &sv,
        MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &main_mask, NULL);
    if (rc != CLI_OK) {
        if (d != NULL) MHD_stop_daemon(d);
    } else if (d == NULL) {
        rc = cli_error(CLI_FAIL, "serve: cannot listen on %s:%lld (%s)", host, (long long)port,
                       strerror(errno));
    } else {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr,
                "ojas: serve: %s (%s, context %lld) on http://%s:%u (max batch %lld, %lld KV "
                "blocks of %lld positions, chat template %s)\n",
                sv.model_id, oj_gpt_family_name(oj_gpt_get_config(sv.m)->family),
                (long long)sv.ctx, host, di ? di->port : (unsigned)port, (long long)sc.max_batch,
                (long long)st.blocks_total, (long long)st.block_size,
                oj_chat_template_name(sv.chat));
        int sig = 0;
        ssize_t got;
        do got = read(g_sig_pipe[0], &sig, sizeof sig);
        while (got < 0 && errno == EINTR);
        if (got != (ssize_t)sizeof sig) sig = SIGTERM; /* cannot happen: the write end is ours */
        fprintf(stderr, "ojas: serve: %s: finishing in-flight requests (up to %g s)\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", grace);
        MHD_socket ls = MHD_quiesce_daemon(d);
        if (ls != MHD_INVALID_SOCKET) close(ls);
        double until = cli_now() + grace;
        pthread_mutex_lock(&sv.mu);
        /* until every request is answered in full (stopping the daemon
         * closes the connections) */
        wait_handlers(&sv, true, until);
        /* handlers still waiting see it within 50 ms, cancel and answer 503
         * (a stream: closed); they get up to a second to send it, since
         * stopping the daemon shuts every connection's socket down,
         * answered or not (a client that does not read is cut then) */
        __atomic_store_n(&sv.stopping, true, __ATOMIC_RELEASE);
        wait_handlers(&sv, false, cli_now() + 1.0);
        pthread_mutex_unlock(&sv.mu);
        MHD_stop_daemon(d);
        fprintf(stderr, "ojas: serve: stopped\n");
    }
    pthread_mutex_lock(&sv.mu);
    sv.stop_sched = true;
    pthread_cond_signal(&sv.work);
    pthread_mutex_unlock(&sv.mu);
    pthread_join(th, NULL);
    if (sv.profile) print_profile(&sv);
    oj_sched_free(sv.s);
    free(sv.piece_blob);
    free(sv.piece_off);
    oj_gpt_free(sv.m);
    oj_engine_free(sv.eng);
    oj_tokenizer_free(sv.tok);
    pthread_cond_destroy(&sv.work);
    pthread_mutex_destroy(&sv.mu);
    /* the handlers stay to the end: a second signal during the stop is
     * written to the pipe nobody reads any more */
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    for (int i = 0; i < 2; i++)
        if (g_sig_pipe[i] >= 0) close(g_sig_pipe[i]);
    return rc;
}
