/* NCCL collectives for oj_dist (backend.h's oj_backend_comm): a
 * communicator per process group, made from the ncclUniqueId rank 0
 * broadcasts over MPI, and the byte moves the trainer needs (alltoall as
 * grouped ncclSend/ncclRecv, ncclAllGather, allgatherv as grouped
 * ncclBroadcast), each enqueued on the engine's stream and waited for by
 * polling with a deadline: past it the communicator is aborted and the
 * wait named, so a dead or hung peer never hangs this rank. Built when
 * CMake finds nccl.h and libnccl (cmake/dist.cmake: OJAS_HAVE_NCCL);
 * otherwise the table is NULL and oj_dist refuses CUDA engines. */
#include "backend/cuda/cuda_internal.cuh"

#ifdef OJAS_HAVE_NCCL
#include <nccl.h>
#include <time.h>
#include <unistd.h>

namespace {

struct comm_t {
    ncclComm_t comm;
    double timeout_s;
};

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

oj_status nccl_fail(oj_error *err, ncclResult_t r, ncclComm_t c, const char *what) {
    const char *last = c ? ncclGetLastError(c) : "";
    return oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: %s%s%s", what, ncclGetErrorString(r),
                        last && last[0] ? ": " : "", last ? last : "");
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
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(c->comm, &ar);
        if (ar != ncclSuccess && ar != ncclInProgress) {
            ncclCommAbort(c->comm);
            c->comm = NULL;
            return nccl_fail(err, ar, NULL, what);
        }
        if (now_s() - t0 > c->timeout_s) {
            ncclCommAbort(c->comm);
            c->comm = NULL;
            return oj_error_set(err, OJ_ERR_DEVICE,
                                "NCCL %s waited %.0f s (the timeout) for the other ranks: one "
                                "died or hangs; the communicator is aborted",
                                what, c->timeout_s);
        }
        if (spins > 200)
            usleep(50);
    }
}

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
                    void **out, oj_error *err) {
    *out = NULL;
    if (oj_cuda_begin(eng, "nccl init"))
        return oj_error_set(err, OJ_ERR_DEVICE, "NCCL init: cannot select the engine's device");
    comm_t *c = (comm_t *)calloc(1, sizeof *c);
    if (!c)
        return oj_error_set(err, OJ_ERR_CAPACITY, "NCCL init: out of memory");
    c->timeout_s = timeout_s;
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
            *out = c;
            return OJ_OK;
        }
        if (ar != ncclInProgress) {
            r = ar;
            break;
        }
        if (now_s() - t0 > timeout_s) {
            ncclCommAbort(c->comm);
            free(c);
            return oj_error_set(err, OJ_ERR_DEVICE,
                                "NCCL init (rank %d of %d) waited %.0f s for the other ranks",
                                rank, world, timeout_s);
        }
        usleep(1000);
    }
    oj_status st = nccl_fail(err, r, c->comm, "ncclCommInitRankConfig");
    if (c->comm)
        ncclCommAbort(c->comm);
    free(c);
    return st;
}

void comm_destroy(void *p) {
    comm_t *c = (comm_t *)p;
    if (!c)
        return;
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

/* Begin: the engine's device current, the communicator alive. */
oj_status comm_begin(oj_engine *eng, comm_t *c, const char *what, oj_error *err) {
    if (!c || !c->comm)
        return oj_error_set(err, OJ_ERR_STATE, "NCCL %s: the communicator was aborted", what);
    if (oj_cuda_begin(eng, what))
        return oj_error_set(err, OJ_ERR_DEVICE, "NCCL %s: cannot select the engine's device",
                            what);
    return OJ_OK;
}

/* ncclGroupEnd of a non-blocking communicator may return ncclInProgress:
 * the work is then enqueued once the async error leaves that state. */
oj_status group_end(comm_t *c, const char *what, oj_error *err) {
    ncclResult_t r = ncclGroupEnd();
    while (r == ncclInProgress)
        ncclCommGetAsyncError(c->comm, &r);
    return r == ncclSuccess ? OJ_OK : nccl_fail(err, r, c->comm, what);
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
    st = group_end(c, what, err);
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
    while (r == ncclInProgress)
        ncclCommGetAsyncError(c->comm, &r);
    if (r != ncclSuccess)
        return nccl_fail(err, r, c->comm, what);
    return wait_stream(eng, c, what, err);
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
    st = group_end(c, what, err);
    return st ? st : wait_stream(eng, c, what, err);
}

const oj_backend_comm k_comm = {comm_unique_id, comm_init,      comm_destroy,
                                comm_alltoall,  comm_allgather, comm_allgatherv};

} // namespace

const oj_backend_comm *oj_cuda_comm_table(void) { return &k_comm; }

#else

const oj_backend_comm *oj_cuda_comm_table(void) { return NULL; }

#endif
