/* NCCL collectives for oj_dist (backend.h's oj_backend_comm): a
 * communicator per process group, made from the ncclUniqueId rank 0
 * broadcasts, and the moves the trainer needs: alltoall as grouped
 * ncclSend/ncclRecv, ncclAllGather, allgatherv as grouped ncclBroadcast,
 * each enqueued on the engine's stream and waited for by polling with a
 * deadline (past it the communicator is aborted and the wait named), and
 * the in-place ncclAllReduce of the gradient arena, which is only
 * enqueued: a watchdog thread per communicator, armed after a step's
 * collectives are queued, polls an event recorded behind them and the
 * communicator's asynchronous error, and ends the job (the group's fatal
 * hook) when they have not finished within the timeout, so a dead or hung
 * peer never hangs this rank and the step needs no host wait. The
 * communicator's lock (comm_mu) is held by the main thread around its
 * NCCL calls and by the watchdog around its error poll; the communicator
 * is taken for an abort (c->comm set to NULL) only under it, so neither
 * thread aborts one the other is using, nor aborts it twice. Built when
 * CMake finds nccl.h and libnccl (cmake/dist.cmake: OJAS_HAVE_NCCL);
 * otherwise the table is NULL and oj_dist refuses CUDA engines. */
#include "backend/cuda/cuda_internal.cuh"

#ifdef OJAS_HAVE_NCCL
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

namespace {

struct comm_t {
    ncclComm_t comm; /* under comm_mu once the watchdog runs; NULL: aborted */
    pthread_mutex_t comm_mu;
    double timeout_s;
    int rank, world, device;
    void (*fatal)(void *ctx, const char *msg);
    void *fatal_ctx;
    /* the watchdog: armed (generation > seen) with `ev` recorded behind
     * the work it watches, since `armed_at` */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cudaEvent_t ev;
    /* allreduce_sum's own stream, and the events that order it after the
     * engine's stream (ev_in) and the engine's stream after it (ev_out) */
    cudaStream_t side;
    cudaEvent_t ev_in, ev_out;
    unsigned long long generation, seen;
    double armed_at;
    bool quit;
    char what[128];
};

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Under comm_mu: take the communicator for an abort (NULL: taken already). */
ncclComm_t comm_take(comm_t *c) {
    ncclComm_t x = c->comm;
    c->comm = NULL;
    return x;
}

oj_status nccl_fail(oj_error *err, ncclResult_t r, ncclComm_t c, const char *what) {
    const char *last = c ? ncclGetLastError(c) : "";
    return oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: %s%s%s", what, ncclGetErrorString(r),
                        last && last[0] ? ": " : "", last ? last : "");
}

/* The watchdog thread: waits to be armed, then polls the event and the
 * communicator's asynchronous error every millisecond until the event
 * completes (disarmed) or the timeout passes or NCCL fails (fatal). */
void *watchdog(void *p) {
    comm_t *c = (comm_t *)p;
    cudaSetDevice(c->device);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->quit && c->generation == c->seen)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit)
            break;
        unsigned long long gen = c->generation;
        double t0 = c->armed_at;
        char what[128];
        memcpy(what, c->what, sizeof what);
        pthread_mutex_unlock(&c->mu);
        cudaError_t e = cudaEventQuery(c->ev);
        ncclResult_t ar = ncclSuccess;
        pthread_mutex_lock(&c->comm_mu);
        ncclComm_t comm = c->comm; /* NULL once a host wait aborted it */
        if (e == cudaErrorNotReady && comm)
            ncclCommGetAsyncError(comm, &ar);
        char msg[400];
        msg[0] = 0;
        if (e != cudaSuccess && e != cudaErrorNotReady)
            snprintf(msg, sizeof msg, "rank %d of %d: %s: CUDA: %s", c->rank, c->world, what,
                     cudaGetErrorString(e));
        else if (ar != ncclSuccess && ar != ncclInProgress)
            snprintf(msg, sizeof msg, "rank %d of %d: %s: NCCL: %s", c->rank, c->world, what,
                     ncclGetErrorString(ar));
        else if (e == cudaErrorNotReady && now_s() - t0 > c->timeout_s)
            snprintf(msg, sizeof msg,
                     "rank %d of %d: %s waited %.0f s (the timeout) for the other ranks: one "
                     "died or hangs",
                     c->rank, c->world, what, c->timeout_s);
        ncclComm_t doomed = msg[0] ? comm_take(c) : NULL;
        pthread_mutex_unlock(&c->comm_mu);
        if (msg[0]) {
            if (doomed) /* taken: the main thread's next call finds it aborted */
                ncclCommAbort(doomed); /* the kernels stop waiting for the lost peer */
            c->fatal(c->fatal_ctx, msg);
        }
        if (e == cudaErrorNotReady)
            usleep(1000);
        pthread_mutex_lock(&c->mu);
        if (e == cudaSuccess && c->generation == gen)
            c->seen = gen; /* done: wait for the next arming */
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Wait for the stream (the collective's kernels) or the communicator's
 * asynchronous error, at most c->timeout_s. */
oj_status wait_stream(oj_engine *eng, comm_t *c, const char *what, oj_error *err) {
    cudaStream_t s = oj_cuda_state_of(eng)->stream;
    double t0 = now_s();
    for (int spins = 0;; spins++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return OJ_OK;
        if (e != cudaErrorNotReady)
            return oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: %s", what, cudaGetErrorString(e));
        pthread_mutex_lock(&c->comm_mu);
        ncclResult_t ar = ncclSuccess;
        if (c->comm)
            ncclCommGetAsyncError(c->comm, &ar);
        oj_status st = OJ_OK;
        if (!c->comm) /* the watchdog took it, and ends the job */
            st = oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: the communicator was aborted", what);
        else if (ar != ncclSuccess && ar != ncclInProgress) {
            ncclCommAbort(comm_take(c));
            st = nccl_fail(err, ar, NULL, what);
        } else if (now_s() - t0 > c->timeout_s) {
            ncclCommAbort(comm_take(c));
            st = oj_error_set(err, OJ_ERR_DEVICE,
                              "NCCL %s waited %.0f s (the timeout) for the other ranks: one "
                              "died or hangs; the communicator is aborted",
                              what, c->timeout_s);
        }
        pthread_mutex_unlock(&c->comm_mu);
        if (st)
            return st;
        if (spins > 200)
            usleep(50);
    }
}

void comm_destroy(void *p);

oj_status comm_unique_id(void *id, oj_error *err) {
    ncclUniqueId u;
    static_assert(sizeof u == 128, "ncclUniqueId is 128 bytes");
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return nccl_fail(err, r, NULL, "ncclGetUniqueId");
    memcpy(id, &u, sizeof u);
    return OJ_OK;
}

oj_status comm_init(oj_engine *eng, const void *id, int rank, int world, double timeout_s,
                    void (*fatal)(void *ctx, const char *msg), void *fatal_ctx, void **out,
                    oj_error *err) {
    *out = NULL;
    if (oj_cuda_begin(eng, "nccl init"))
        return oj_error_set(err, OJ_ERR_DEVICE, "NCCL init: cannot select the engine's device");
    comm_t *c = (comm_t *)calloc(1, sizeof *c);
    if (!c)
        return oj_error_set(err, OJ_ERR_CAPACITY, "NCCL init: out of memory");
    c->timeout_s = timeout_s;
    c->rank = rank;
    c->world = world;
    c->device = oj_cuda_state_of(eng)->ordinal;
    c->fatal = fatal;
    c->fatal_ctx = fatal_ctx;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->comm_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (cudaEventCreateWithFlags(&c->ev, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->ev_in, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->ev_out, cudaEventDisableTiming) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking) != cudaSuccess) {
        comm_destroy(c);
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "NCCL init: cannot create the all-reduce stream and its events");
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    /* non-blocking, so that a rank that never joins times out here too */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, world, u, rank, &cfg);
    double t0 = now_s();
    while (r == ncclInProgress || r == ncclSuccess) {
        ncclResult_t ar = ncclInProgress;
        ncclCommGetAsyncError(c->comm, &ar);
        if (ar == ncclSuccess) {
            if (pthread_create(&c->thread, NULL, watchdog, c) != 0) {
                comm_destroy(c);
                return oj_error_set(err, OJ_ERR_DEVICE,
                                    "NCCL init: cannot start the watchdog thread");
            }
            c->thread_started = true;
            *out = c;
            return OJ_OK;
        }
        if (ar != ncclInProgress) {
            r = ar;
            break;
        }
        if (now_s() - t0 > timeout_s) {
            ncclCommAbort(c->comm);
            c->comm = NULL;
            comm_destroy(c);
            return oj_error_set(err, OJ_ERR_DEVICE,
                                "NCCL init (rank %d of %d) waited %.0f s for the other ranks",
                                rank, world, timeout_s);
        }
        usleep(1000);
    }
    oj_status st = nccl_fail(err, r, c->comm, "ncclCommInitRankConfig");
    if (c->comm)
        ncclCommAbort(c->comm);
    c->comm = NULL;
    comm_destroy(c);
    return st;
}

void comm_destroy(void *p) {
    comm_t *c = (comm_t *)p;
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->quit = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    if (c->ev)
        cudaEventDestroy(c->ev);
    if (c->ev_in)
        cudaEventDestroy(c->ev_in);
    if (c->ev_out)
        cudaEventDestroy(c->ev_out);
    if (c->side)
        cudaStreamDestroy(c->side);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->comm_mu);
    pthread_cond_destroy(&c->cv);
    if (c->comm) { /* non-blocking: finalize completes asynchronously */
        ncclResult_t r = ncclCommFinalize(c->comm);
        double t0 = now_s();
        while (r == ncclInProgress && now_s() - t0 < c->timeout_s)
            ncclCommGetAsyncError(c->comm, &r);
        if (r == ncclSuccess)
            ncclCommDestroy(c->comm);
        else
            ncclCommAbort(c->comm);
    }
    free(c);
}

/* Begin: the engine's device current, the communicator alive, and on
 * success comm_mu held (the caller's NCCL calls run under it; comm_end
 * releases it). */
oj_status comm_begin(oj_engine *eng, comm_t *c, const char *what, oj_error *err) {
    if (!c)
        return oj_error_set(err, OJ_ERR_STATE, "NCCL %s: no communicator", what);
    if (oj_cuda_begin(eng, what))
        return oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: cannot select the engine's device",
                            what);
    pthread_mutex_lock(&c->comm_mu);
    if (!c->comm) {
        pthread_mutex_unlock(&c->comm_mu);
        return oj_error_set(err, OJ_ERR_STATE, "NCCL %s: the communicator was aborted", what);
    }
    return OJ_OK;
}

oj_status comm_end(comm_t *c, oj_status st) {
    pthread_mutex_unlock(&c->comm_mu);
    return st;
}

/* ncclGroupEnd of a non-blocking communicator may return ncclInProgress:
 * the work is then enqueued once the async error leaves that state. */
/* Wait while a non-blocking call's result r is ncclInProgress (the
 * communicator still connecting or enqueueing), at most c->timeout_s: a
 * peer that died before the first collective connected would otherwise
 * hold this rank here forever, before any watchdog is armed. With
 * comm_mu held (comm_begin). */
static oj_status in_progress_wait(comm_t *c, ncclResult_t r, const char *what, oj_error *err) {
    double t0 = now_s();
    for (int spins = 0; r == ncclInProgress; spins++) {
        ncclCommGetAsyncError(c->comm, &r);
        if (r == ncclInProgress && now_s() - t0 > c->timeout_s) {
            ncclCommAbort(comm_take(c));
            return oj_error_set(err, OJ_ERR_DEVICE,
                                "NCCL %s waited %.0f s (the timeout) to enqueue: a rank died or "
                                "hangs; the communicator is aborted",
                                what, c->timeout_s);
        }
        if (spins > 200)
            usleep(50);
    }
    return r == ncclSuccess ? OJ_OK : nccl_fail(err, r, c->comm, what);
}

oj_status group_end(comm_t *c, const char *what, oj_error *err) {
    return in_progress_wait(c, ncclGroupEnd(), what, err);
}

oj_status comm_alltoall(oj_engine *eng, void *p, const void *send, void *recv, size_t block,
                        oj_error *err) {
    comm_t *c = (comm_t *)p;
    const char *what = "alltoall (gradient shards)";
    oj_status st = comm_begin(eng, c, what, err);
    if (st)
        return st;
    int world = 0;
    ncclCommCount(c->comm, &world);
    cudaStream_t s = oj_cuda_state_of(eng)->stream;
    ncclGroupStart();
    for (int q = 0; q < world; q++) {
        ncclSend((const char *)send + (size_t)q * block, block, ncclUint8, q, c->comm, s);
        ncclRecv((char *)recv + (size_t)q * block, block, ncclUint8, q, c->comm, s);
    }
    st = comm_end(c, group_end(c, what, err));
    return st ? st : wait_stream(eng, c, what, err);
}

oj_status comm_allgather(oj_engine *eng, void *p, const void *mine, void *all, size_t block,
                         oj_error *err) {
    comm_t *c = (comm_t *)p;
    const char *what = "allgather (summed gradient shards)";
    oj_status st = comm_begin(eng, c, what, err);
    if (st)
        return st;
    ncclResult_t r = ncclAllGather(mine, all, block, ncclUint8, c->comm,
                                   oj_cuda_state_of(eng)->stream);
    st = comm_end(c, in_progress_wait(c, r, what, err)); /* bounded by the timeout */
    return st ? st : wait_stream(eng, c, what, err);
}

oj_status comm_allgatherv(oj_engine *eng, void *p, void *buf, const size_t *offsets,
                          oj_error *err) {
    comm_t *c = (comm_t *)p;
    const char *what = "allgatherv (parameter shards)";
    oj_status st = comm_begin(eng, c, what, err);
    if (st)
        return st;
    int world = 0;
    ncclCommCount(c->comm, &world);
    cudaStream_t s = oj_cuda_state_of(eng)->stream;
    ncclGroupStart();
    for (int q = 0; q < world; q++) {
        size_t len = offsets[q + 1] - offsets[q];
        char *seg = (char *)buf + offsets[q];
        if (len) /* every rank knows every length: all skip alike */
            ncclBroadcast(seg, seg, len, ncclUint8, q, c->comm, s);
    }
    st = comm_end(c, group_end(c, what, err));
    return st ? st : wait_stream(eng, c, what, err);
}

oj_status comm_allreduce_sum(oj_engine *eng, void *p, void *buf, size_t count, oj_dtype dtype,
                             oj_error *err) {
    comm_t *c = (comm_t *)p;
    const char *what = "allreduce (gradient sum)";
    ncclDataType_t t;
    switch (dtype) {
    case OJ_F32: t = ncclFloat32; break;
    case OJ_F64: t = ncclFloat64; break;
    case OJ_F16: t = ncclFloat16; break;
    case OJ_BF16: t = ncclBfloat16; break;
    default:
        return oj_error_set(err, OJ_ERR_DTYPE, "NCCL %s: dtype %s has no sum", what,
                            oj_dtype_name(dtype));
    }
    oj_status st = comm_begin(eng, c, what, err);
    if (st)
        return st;
    /* on the side stream, after what the engine's stream holds now (the
     * backward that wrote buf), so the rest of the backward runs on */
    cudaError_t e = cudaEventRecord(c->ev_in, oj_cuda_state_of(eng)->stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(c->side, c->ev_in, 0);
    if (e != cudaSuccess)
        return comm_end(c, oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: ordering the streams: %s",
                                        what, cudaGetErrorString(e)));
    return comm_end(c, in_progress_wait(c, ncclAllReduce(buf, buf, count, t, ncclSum, c->comm,
                                                         c->side),
                                        what, err));
}

oj_status comm_join(oj_engine *eng, void *p, oj_error *err) {
    comm_t *c = (comm_t *)p;
    const char *what = "join (the all-reduce stream)";
    oj_status st = comm_begin(eng, c, what, err);
    if (st)
        return st;
    comm_end(c, OJ_OK); /* no NCCL call below */
    cudaError_t e = cudaEventRecord(c->ev_out, c->side);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(oj_cuda_state_of(eng)->stream, c->ev_out, 0);
    return e == cudaSuccess ? OJ_OK
                            : oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: %s", what,
                                           cudaGetErrorString(e));
}

oj_status comm_watch(oj_engine *eng, void *p, const char *what, oj_error *err) {
    comm_t *c = (comm_t *)p;
    oj_status st = comm_begin(eng, c, what, err);
    if (st)
        return st;
    comm_end(c, OJ_OK); /* no NCCL call below */
    cudaError_t e = cudaEventRecord(c->ev, oj_cuda_state_of(eng)->stream);
    if (e != cudaSuccess)
        return oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: watchdog event: %s", what,
                            cudaGetErrorString(e));
    pthread_mutex_lock(&c->mu);
    snprintf(c->what, sizeof c->what, "%s", what);
    c->armed_at = now_s();
    c->generation++;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return OJ_OK;
}

const oj_backend_comm k_comm = {comm_unique_id,  comm_init,      comm_destroy,
                                comm_alltoall,   comm_allgather, comm_allgatherv,
                                comm_allreduce_sum, comm_join,   comm_watch};

} // namespace

const oj_backend_comm *oj_cuda_comm_table(void) { return &k_comm; }

#else

const oj_backend_comm *oj_cuda_comm_table(void) { return NULL; }

#endif
