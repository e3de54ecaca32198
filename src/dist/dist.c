/* The process group (MPI or a group of one), its host record exchanges and
 * its tensor collectives (MPI on host memory, NCCL through the CUDA
 * module). See include/ojas/dist.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef OJAS_HAVE_MPI
#include <mpi.h>
#endif

#include "core/clock.h"
#include "ojas/dist.h"
#include "ojas/ops.h"

#include "backend/backend.h"
#include "core/env.h"
#include "core/internal.h"
#include "dist/dist_internal.h"

struct oj_dist {
    int rank, world, local_rank;
    bool active;       /* launched: collectives run */
    bool mpi_inited;   /* this group called MPI_Init_thread */
    bool mpi_threads;  /* MPI gave MPI_THREAD_MULTIPLE: any thread may call it */
    bool env;          /* from RANK / WORLD_SIZE without MPI: NCCL only */
    char addr[256];    /* env: MASTER_ADDR, MASTER_PORT */
    int port;
    double timeout_s;
    oj_engine *eng;    /* bound engine (NULL: unbound) */
    const oj_backend_comm *nccl; /* CUDA engine: the module's NCCL entries */
    void *comm;        /* the NCCL communicator */
};

bool oj_dist_have_mpi(void) {
#ifdef OJAS_HAVE_MPI
    return true;
#else
    return false;
#endif
}

static const char *launcher_var(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return vars[i];
    return NULL;
}

/* RANK and WORLD_SIZE (torchrun's names) without an MPI launcher. */
static bool env_group(void) { return !launcher_var() && getenv("RANK") && getenv("WORLD_SIZE"); }

bool oj_dist_launched(void) { return launcher_var() != NULL || env_group(); }

bool oj_dist_mpi(const oj_dist *d) { return d && d->mpi_inited; }

bool oj_dist_mpi_threads(const oj_dist *d) { return d && d->mpi_threads; }

/* The integer value of environment variable `name` in [lo, hi] into *v;
 * false when unset or not such a number. */
static bool env_int(const char *name, long lo, long hi, long *v) {
    const char *s = getenv(name);
    char *end = NULL;
    if (!s || !*s)
        return false;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

/* A group from RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. */
static oj_status init_env(oj_dist *d, oj_error *err) {
    long world = 0, rank = 0, local = 0, port = 0;
    if (!env_int("WORLD_SIZE", 1, 1 << 20, &world))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist: WORLD_SIZE=%s is not a world size (a number >= 1)",
                            getenv("WORLD_SIZE"));
    if (!env_int("RANK", 0, world - 1, &rank))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist: RANK=%s is not a rank of WORLD_SIZE=%ld (0 .. %ld)",
                            getenv("RANK"), world, world - 1);
    if (getenv("LOCAL_RANK") && !env_int("LOCAL_RANK", 0, world - 1, &local))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist: LOCAL_RANK=%s is not a rank on this machine",
                            getenv("LOCAL_RANK"));
    if (!getenv("LOCAL_RANK"))
        local = rank; /* one machine */
    const char *addr = getenv("MASTER_ADDR");
    if (world > 1 && (!addr || !*addr || !env_int("MASTER_PORT", 1, 65535, &port)))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist: RANK=%ld of WORLD_SIZE=%ld needs MASTER_ADDR (rank 0's host) "
                            "and MASTER_PORT (a free TCP port on it, 1 .. 65535): got %s and %s",
                            rank, world, addr ? addr : "none",
                            getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "none");
    if (addr && strlen(addr) >= sizeof d->addr) /* a host name has at most 253 */
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist: a MASTER_ADDR of %zu bytes is no host name or address (at "
                            "most %zu)",
                            strlen(addr), sizeof d->addr - 1);
    snprintf(d->addr, sizeof d->addr, "%s", addr ? addr : "127.0.0.1");
    d->port = (int)port;
    d->rank = (int)rank;
    d->world = (int)world;
    d->local_rank = (int)local;
    d->env = true;
    d->active = true;
    return OJ_OK;
}

int oj_dist_rank(const oj_dist *d) { return d ? d->rank : 0; }
int oj_dist_world_size(const oj_dist *d) { return d ? d->world : 1; }
int oj_dist_local_rank(const oj_dist *d) { return d ? d->local_rank : 0; }
bool oj_dist_active(const oj_dist *d) { return d && d->active; }
const char *oj_dist_transport(const oj_dist *d) {
    if (!d || !d->active)
        return "none";
    return d->nccl ? "nccl" : "mpi";
}

oj_status oj_dist_init(double timeout_s, oj_dist **out, oj_error *err) {
    if (!out)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist: out is NULL");
    *out = NULL;
    if (!(timeout_s > 0))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist: timeout %g s is not > 0",
                            timeout_s);
    oj_dist *d = calloc(1, sizeof *d);
    if (!d)
        return oj_error_set(err, OJ_ERR_CAPACITY, "dist: out of memory");
    d->world = 1;
    d->timeout_s = timeout_s;
    const char *var = launcher_var();
    if (var) {
#ifdef OJAS_HAVE_MPI
        int inited = 0;
        MPI_Initialized(&inited);
        if (inited) {
            free(d);
            return oj_error_set(err, OJ_ERR_STATE,
                                "dist: MPI is already initialised in this process (one process "
                                "group per process)");
        }
        /* MPI_THREAD_MULTIPLE: the NCCL watchdog thread ends the job with
         * MPI_Abort while the main thread may be inside MPI */
        int provided = MPI_THREAD_SINGLE;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            free(d);
            return oj_error_set(err, OJ_ERR_DEVICE,
                                "dist: MPI_Init_thread failed (launched: %s is set)", var);
        }
        d->mpi_inited = true;
        d->mpi_threads = provided >= MPI_THREAD_MULTIPLE;
        /* errors come back as codes: each call names what failed */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &d->world);
        MPI_Comm node;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                                &node) == MPI_SUCCESS) {
            MPI_Comm_rank(node, &d->local_rank);
            MPI_Comm_free(&node);
        }
        d->active = true;
#else
        free(d);
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "dist: this process was started by an MPI launcher (%s=%s) but ojas "
                            "is built without MPI (OJAS_MPI=OFF): rebuild with libopenmpi-dev "
                            "installed, or run without mpirun",
                            var, getenv(var));
#endif
    } else if (env_group()) {
        oj_status st = init_env(d, err);
        if (st) {
            free(d);
            return st;
        }
    }
    *out = d;
    return OJ_OK;
}

void oj_dist_free(oj_dist *d) {
    if (!d)
        return;
    if (d->comm && d->nccl)
        d->nccl->destroy(d->comm);
#ifdef OJAS_HAVE_MPI
    if (d->mpi_inited)
        MPI_Finalize();
#endif
    free(d);
}

void oj_dist_abort(oj_dist *d, int code) {
    fflush(stdout);
    fflush(stderr);
#ifdef OJAS_HAVE_MPI
    if (d && d->mpi_inited) {
        usleep(500000); /* the launcher forwards this rank's last words before the abort */
        MPI_Abort(MPI_COMM_WORLD, code);
    }
#endif
    (void)d;
    exit(code);
}

#ifdef OJAS_HAVE_MPI
static const char *mpi_msg(int rc, char *buf) {
    int len = 0;
    if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
        snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
    return buf;
}

/* Poll the n requests until all complete or the group's timeout passes.
 * On a timeout `missing` (when given) lists the indices not complete.
 * Returns 0, a negative value on timeout, or the MPI error code. */
static int wait_all(oj_dist *d, int n, MPI_Request *reqs, bool *done) {
    double t0 = oj__now_s();
    int spins = 0;
    for (;;) {
        bool all = true;
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            int flag = 0;
            int rc = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return rc;
            if (flag)
                done[i] = true;
            else
                all = false;
        }
        if (all)
            return 0;
        if (oj__now_s() - t0 > d->timeout_s)
            return -1;
        if (++spins > 200) /* the other ranks may be far behind: yield the CPU */
            usleep(spins > 5000 ? 2000 : 50);
    }
}

/* A wait that timed out: name it, then end the job (the ranks can no
 * longer agree on where they are). */
static void timed_out(oj_dist *d, const char *what, const char *missing) {
    fprintf(stderr,
            "ojas: dist: rank %d of %d: %s waited %.0f s (the timeout) for %s: it died or hangs; "
            "ending every rank (MPI_Abort)\n",
            d->rank, d->world, what, d->timeout_s, missing);
    oj_dist_abort(d, 3);
}

/* One message of a collective: to or from `peer`, count units of type. */
typedef struct xfer {
    int peer;
    bool recv;
    void *buf;
    int count;
    MPI_Datatype type;
} xfer;

/* Post every receive, then every send, and wait for all with the
 * deadline; a timeout names the ranks whose messages did not come (or
 * were not taken) and ends the job. Collectives built of one message per
 * peer (what MPI's pairwise algorithms send too) are what lets a timeout
 * name the rank that died or hangs. */
static oj_status run_xfers(oj_dist *d, int n, xfer *x, int tag, const char *what,
                           oj_error *err) {
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)(n ? n : 1));
    bool *done = calloc((size_t)(n ? n : 1), sizeof *done);
    if (!reqs || !done) {
        free(reqs);
        free(done);
        return oj_error_set(err, OJ_ERR_CAPACITY, "dist %s: out of memory", what);
    }
    int rc = MPI_SUCCESS, posted = 0;
    for (int pass = 0; pass < 2 && rc == MPI_SUCCESS; pass++)
        for (int i = 0; i < n && rc == MPI_SUCCESS; i++) {
            if (x[i].recv != (pass == 0))
                continue;
            rc = x[i].recv ? MPI_Irecv(x[i].buf, x[i].count, x[i].type, x[i].peer, tag,
                                       MPI_COMM_WORLD, &reqs[i])
                           : MPI_Isend(x[i].buf, x[i].count, x[i].type, x[i].peer, tag,
                                       MPI_COMM_WORLD, &reqs[i]);
            posted++;
        }
    if (rc == MPI_SUCCESS)
        rc = wait_all(d, n, reqs, done);
    if (rc < 0) {
        char missing[256] = "";
        size_t len = 0;
        bool named[4096] = {false};
        for (int pass = 0; pass < 2; pass++) /* the silent senders first */
            for (int i = 0; i < n; i++) {
                int q = x[i].peer;
                if (done[i] || x[i].recv != (pass == 0) || (q < 4096 && named[q]) ||
                    len + 24 >= sizeof missing)
                    continue;
                if (q < 4096)
                    named[q] = true;
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%srank %d",
                                        len ? ", " : "", q);
            }
        timed_out(d, what, len ? missing : "the other ranks");
    }
    free(reqs);
    free(done);
    (void)posted;
    if (rc != MPI_SUCCESS) {
        char b[MPI_MAX_ERROR_STRING];
        return oj_error_set(err, OJ_ERR_IO, "dist %s: %s", what, mpi_msg(rc, b));
    }
    return OJ_OK;
}
#endif

static void *addr(oj_tensor *t);

/* A group without MPI: the records through NCCL (an allgather of a device
 * copy; this rank's bytes are in all already). */
static oj_status nccl_exchange(oj_dist *d, size_t nbytes, void *all, const char *what,
                               oj_error *err) {
    if (!d->nccl || !d->comm)
        return oj_error_set(err, OJ_ERR_STATE,
                            "dist %s: a group from RANK/WORLD_SIZE (no MPI) exchanges its "
                            "records through NCCL: bind a CUDA engine first",
                            what);
    int64_t words = (int64_t)((nbytes + 3) / 4), n = words * d->world;
    size_t block = (size_t)words * 4;
    char *host = calloc((size_t)n, 4);
    if (!host)
        return oj_error_set(err, OJ_ERR_CAPACITY, "dist %s: out of memory", what);
    memcpy(host + (size_t)d->rank * block, (char *)all + (size_t)d->rank * nbytes, nbytes);
    oj_engine *eng = d->eng;
    oj_scope_begin(eng);
    oj_tensor *dev = oj_empty(eng, 1, &n, OJ_F32);
    oj_tensor *mine = dev ? oj_narrow(dev, 0, d->rank * words, words) : NULL;
    oj_status st = mine ? oj_copy_from_host(mine, host + (size_t)d->rank * block, block)
                        : OJ_ERR_CAPACITY;
    if (st)
        st = oj_error_set(err, st, "dist %s: staging: %s", what, oj_last_error(eng));
    if (!st)
        st = d->nccl->allgather(eng, d->comm, addr(mine), addr(dev), block, err);
    if (!st && oj_to_host(dev, host, (size_t)n * 4))
        st = oj_error_set(err, OJ_ERR_DEVICE, "dist %s: %s", what, oj_last_error(eng));
    oj_scope_end(eng);
    for (int q = 0; !st && q < d->world; q++)
        memcpy((char *)all + (size_t)q * nbytes, host + (size_t)q * block, nbytes);
    free(host);
    return st;
}

oj_status oj_dist_exchange(oj_dist *d, const void *mine, size_t nbytes, void *all,
                           const char *what, oj_error *err) {
    if (!d || (!mine && nbytes) || (!all && nbytes))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist exchange: NULL argument");
    if (nbytes)
        memmove((char *)all + (size_t)d->rank * nbytes, mine, nbytes);
    if (!d->active || d->world == 1)
        return OJ_OK;
    static int trace = -1; /* OJAS_DIST_TRACE=1: name every exchange on stderr */
    if (trace < 0)
        trace = oj__env_flag("OJAS_DIST_TRACE", false);
    if (trace)
        fprintf(stderr, "ojas: dist: rank %d exchange (%zu bytes): %s\n", d->rank, nbytes, what);
    if (d->env)
        return nccl_exchange(d, nbytes, all, what, err);
#ifdef OJAS_HAVE_MPI
    if (nbytes > (size_t)1 << 30)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist exchange: %zu bytes > 1 GiB",
                            nbytes);
    int W = d->world, n = 0;
    xfer *x = malloc(sizeof *x * (size_t)(2 * W));
    if (!x)
        return oj_error_set(err, OJ_ERR_CAPACITY, "dist exchange: out of memory");
    for (int q = 0; q < W; q++) {
        if (q == d->rank)
            continue;
        x[n++] = (xfer){q, true, (char *)all + (size_t)q * nbytes, (int)nbytes, MPI_BYTE};
        x[n++] = (xfer){q, false, (void *)mine, (int)nbytes, MPI_BYTE};
    }
    oj_status st = run_xfers(d, n, x, 7, what, err);
    free(x);
    return st;
#else
    return oj_error_set(err, OJ_ERR_UNSUPPORTED, "dist: built without MPI");
#endif
}

oj_status oj_dist_send(oj_dist *d, int to, const void *buf, size_t nbytes, oj_error *err) {
    if (!d || !d->active || to < 0 || to >= d->world || to == d->rank || nbytes > INT32_MAX)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist send: no active group, rank %d out of range or %zu bytes "
                            "> 2 GiB",
                            to, nbytes);
    if (d->env)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "dist send: a group from RANK/WORLD_SIZE has no MPI for host "
                            "messages (start the ranks with mpirun)");
#ifdef OJAS_HAVE_MPI
    MPI_Request r;
    bool done = false;
    int rc = MPI_Isend(buf, (int)nbytes, MPI_BYTE, to, 8, MPI_COMM_WORLD, &r);
    if (rc == MPI_SUCCESS)
        rc = wait_all(d, 1, &r, &done);
    if (rc < 0) {
        char who[32];
        snprintf(who, sizeof who, "rank %d", to);
        timed_out(d, "a send", who);
    }
    if (rc != MPI_SUCCESS) {
        char b[MPI_MAX_ERROR_STRING];
        return oj_error_set(err, OJ_ERR_IO, "dist send to rank %d: %s", to, mpi_msg(rc, b));
    }
    return OJ_OK;
#else
    (void)buf;
    return oj_error_set(err, OJ_ERR_UNSUPPORTED, "dist: built without MPI");
#endif
}

oj_status oj_dist_recv(oj_dist *d, int from, void **buf, size_t *nbytes, oj_error *err) {
    if (!d || !d->active || from < 0 || from >= d->world || from == d->rank || !buf || !nbytes)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist recv: no active group, rank %d out of range or NULL output",
                            from);
    *buf = NULL;
    *nbytes = 0;
    if (d->env)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "dist recv: a group from RANK/WORLD_SIZE has no MPI for host "
                            "messages (start the ranks with mpirun)");
#ifdef OJAS_HAVE_MPI
    /* the size first: probe until the message is there (with the deadline) */
    double t0 = oj__now_s();
    int flag = 0, rc, spins = 0;
    MPI_Status s;
    while ((rc = MPI_Iprobe(from, 8, MPI_COMM_WORLD, &flag, &s)) == MPI_SUCCESS && !flag) {
        if (oj__now_s() - t0 > d->timeout_s) {
            char who[32];
            snprintf(who, sizeof who, "rank %d", from);
            timed_out(d, "a receive", who);
        }
        if (++spins > 200)
            usleep(spins > 5000 ? 2000 : 50);
    }
    int count = 0;
    if (rc == MPI_SUCCESS)
        rc = MPI_Get_count(&s, MPI_BYTE, &count);
    if (rc == MPI_SUCCESS) {
        *buf = malloc(count ? (size_t)count : 1);
        if (!*buf)
            return oj_error_set(err, OJ_ERR_CAPACITY, "dist recv: out of memory for %d bytes",
                                count);
        rc = MPI_Recv(*buf, count, MPI_BYTE, from, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
        free(*buf);
        *buf = NULL;
        char b[MPI_MAX_ERROR_STRING];
        return oj_error_set(err, OJ_ERR_IO, "dist recv from rank %d: %s", from, mpi_msg(rc, b));
    }
    *nbytes = (size_t)count;
    return OJ_OK;
#else
    return oj_error_set(err, OJ_ERR_UNSUPPORTED, "dist: built without MPI");
#endif
}

oj_status oj_dist_barrier(oj_dist *d, const char *what, oj_error *err) {
    char mine = 1, *all;
    if (!d)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist barrier: NULL group");
    if (!d->active || d->world == 1)
        return OJ_OK;
    all = malloc((size_t)d->world);
    if (!all)
        return oj_error_set(err, OJ_ERR_CAPACITY, "dist barrier: out of memory");
    oj_status st = oj_dist_exchange(d, &mine, 1, all, what, err);
    free(all);
    return st;
}

/* ---------------------------------------------------------------- tensors */

/* The NCCL watchdog's end of the job (it runs on the watchdog thread,
 * while this rank's main thread may be blocked on the device or inside
 * MPI). MPI_Abort only where MPI gave MPI_THREAD_MULTIPLE (another thread
 * may call MPI then); otherwise _exit, and the launcher ends the job when
 * a rank exits without MPI_Finalize (mpirun does; the other ranks' own
 * watchdogs and timeouts end theirs in any case). */
static void comm_fatal(void *ctx, const char *msg) {
    oj_dist *d = ctx;
    fprintf(stderr, "ojas: dist: %s; ending every rank\n", msg);
    fflush(stderr);
#ifdef OJAS_HAVE_MPI
    if (d->mpi_inited && d->mpi_threads)
        MPI_Abort(MPI_COMM_WORLD, 3);
#endif
    (void)d;
    _exit(3); /* not exit(): the main thread may hold the device */
}

oj_status oj_dist_check_device(const oj_dist *d, oj_device device, oj_error *err) {
    if (d && d->env && device.type == OJ_DEVICE_CPU)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "dist: a CPU engine's collectives need MPI, and this group comes "
                            "from RANK/WORLD_SIZE without it: start the ranks with mpirun (or "
                            "use CUDA engines, whose collectives are NCCL's)");
    return OJ_OK;
}

oj_status oj_dist_bind(oj_dist *d, oj_engine *eng, oj_error *err) {
    if (!d || !eng)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist bind: NULL group or engine");
    if (d->eng)
        return oj_error_set(err, OJ_ERR_STATE, "dist bind: the group is already bound");
    oj_status dev = oj_dist_check_device(d, eng->device, err);
    if (dev)
        return dev;
    d->eng = eng;
    if (!d->active || eng->device.type == OJ_DEVICE_CPU)
        return OJ_OK;
    const oj_backend_comm *c = eng->backend->comm;
    if (!c)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "dist: the CUDA backend module is built without NCCL: a CUDA engine "
                            "needs NCCL for its collectives (no fallback to MPI)");
    unsigned char id[128];
    oj_status st = OJ_OK;
    if (d->rank == 0)
        st = c->unique_id(id, err);
    if (d->env) { /* rank 0's id over the TCP rendezvous */
        if (d->rank == 0 && st) /* the others time out at the rendezvous, naming it */
            return st;
        st = oj__dist_rendezvous(d->addr, d->port, d->rank, d->world, d->timeout_s, id, err);
        if (!st)
            st = c->init(eng, id, d->rank, d->world, d->timeout_s, comm_fatal, d, &d->comm,
                         err);
        if (!st)
            d->nccl = c;
        return st;
    }
    /* rank 0's id to every rank over MPI (its status too, so no rank waits
     * for an id that is never sent) */
    unsigned char rec[129], *all = malloc((size_t)d->world * sizeof rec);
    if (!all)
        return oj_error_set(err, OJ_ERR_CAPACITY, "dist bind: out of memory");
    rec[0] = st != OJ_OK;
    memcpy(rec + 1, id, sizeof id);
    oj_status xs = oj_dist_exchange(d, rec, sizeof rec, all, "the ncclUniqueId broadcast", err);
    if (!xs && !st && all[0])
        xs = oj_error_set(err, OJ_ERR_DEVICE, "dist: rank 0 could not make an ncclUniqueId");
    if (!xs && !st)
        st = c->init(eng, all + 1, d->rank, d->world, d->timeout_s, comm_fatal, d, &d->comm,
                     err);
    free(all);
    if (xs)
        return xs;
    if (!st)
        d->nccl = c;
    return st;
}

static oj_status check_pair(oj_dist *d, const char *op, oj_tensor *a, int64_t na, oj_tensor *b,
                            int64_t nb, oj_error *err) {
    if (!d || !d->eng)
        return oj_error_set(err, OJ_ERR_STATE, "dist %s: the group is not bound to an engine",
                            op);
    oj_tensor *ts[2] = {a, b};
    int64_t want[2] = {na, nb};
    for (int i = 0; i < 2; i++) {
        if (!ts[i])
            continue;
        if (oj_tensor_engine(ts[i]) != d->eng || !oj_is_contiguous(ts[i]))
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "dist %s: a tensor is not a contiguous tensor of the bound "
                                "engine",
                                op);
        if (want[i] >= 0 && oj_numel(ts[i]) != want[i])
            return oj_error_set(err, OJ_ERR_SHAPE,
                                "dist %s: a tensor has %lld elements, expected %lld", op,
                                (long long)oj_numel(ts[i]), (long long)want[i]);
    }
    if (a && b && oj_tensor_dtype(a) != oj_tensor_dtype(b))
        return oj_error_set(err, OJ_ERR_DTYPE, "dist %s: dtypes %s and %s differ", op,
                            oj_dtype_name(oj_tensor_dtype(a)), oj_dtype_name(oj_tensor_dtype(b)));
    return OJ_OK;
}

/* The device (or host) address of element 0. */
static void *addr(oj_tensor *t) { return (char *)t->storage->data + t->offset; }

#ifdef OJAS_HAVE_MPI
/* MPI counts are int: blocks over 2^31 - 1 bytes go as larger units. */
static oj_status mpi_block_type(size_t block, MPI_Datatype *type, int *count, oj_error *err) {
    size_t unit = 1;
    while (block / unit > (size_t)INT32_MAX || block % unit)
        if ((unit *= 2) > ((size_t)1 << 20))
            return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                                "dist: a block of %zu bytes is too large for MPI", block);
    if (unit == 1) {
        *type = MPI_BYTE;
    } else {
        MPI_Type_contiguous((int)unit, MPI_BYTE, type);
        MPI_Type_commit(type);
    }
    *count = (int)(block / unit);
    return OJ_OK;
}
#endif

oj_status oj_dist_alltoall(oj_dist *d, oj_tensor *send, oj_tensor *recv, oj_error *err) {
    oj_status st = check_pair(d, "alltoall", send, -1, recv, send ? oj_numel(send) : -1, err);
    if (st)
        return st;
    int64_t n = oj_numel(send);
    if (n % d->world)
        return oj_error_set(err, OJ_ERR_SHAPE,
                            "dist alltoall: %lld elements do not split into %d blocks",
                            (long long)n, d->world);
    size_t block = (size_t)(n / d->world) * oj_dtype_size(oj_tensor_dtype(send));
    if (!d->active || (d->world == 1 && !d->nccl)) /* NCCL moves even its own block */
        return oj_copy_(recv, send) ? oj_error_set(err, oj_last_status(d->eng), "dist: %s",
                                                   oj_last_error(d->eng))
                                    : OJ_OK;
    if (d->nccl) {
        oj_bump_version(recv);
        return d->nccl->alltoall(d->eng, d->comm, addr(send), addr(recv), block, err);
    }
#ifdef OJAS_HAVE_MPI
    MPI_Datatype type;
    int count = 0;
    if ((st = mpi_block_type(block, &type, &count, err)))
        return st;
    /* block q to rank q, block q from rank q; this rank's own block copied */
    int W = d->world, nx = 0;
    char *sb = addr(send), *rb = addr(recv);
    memcpy(rb + (size_t)d->rank * block, sb + (size_t)d->rank * block, block);
    xfer *x = malloc(sizeof *x * (size_t)(2 * W));
    if (!x)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "dist alltoall: out of memory");
    for (int q = 0; x && q < W; q++)
        if (q != d->rank) {
            x[nx++] = (xfer){q, true, rb + (size_t)q * block, count, type};
            x[nx++] = (xfer){q, false, sb + (size_t)q * block, count, type};
        }
    if (!st)
        st = run_xfers(d, nx, x, 9, "alltoall (gradient shards)", err);
    free(x);
    if (type != MPI_BYTE)
        MPI_Type_free(&type);
    oj_bump_version(recv);
    return st;
#else
    return oj_error_set(err, OJ_ERR_UNSUPPORTED, "dist: built without MPI");
#endif
}

oj_status oj_dist_allgather(oj_dist *d, oj_tensor *mine, oj_tensor *all, oj_error *err) {
    oj_status st = check_pair(d, "allgather", mine, -1, all,
                              mine && d ? oj_numel(mine) * d->world : -1, err);
    if (st)
        return st;
    size_t block = (size_t)oj_numel(mine) * oj_dtype_size(oj_tensor_dtype(mine));
    if (!d->active || (d->world == 1 && !d->nccl))
        return oj_copy_(all, mine) ? oj_error_set(err, oj_last_status(d->eng), "dist: %s",
                                                  oj_last_error(d->eng))
                                   : OJ_OK;
    if (d->nccl) {
        oj_bump_version(all);
        return d->nccl->allgather(d->eng, d->comm, addr(mine), addr(all), block, err);
    }
#ifdef OJAS_HAVE_MPI
    MPI_Datatype type;
    int count = 0;
    if ((st = mpi_block_type(block, &type, &count, err)))
        return st;
    int W = d->world, n = 0;
    char *ab = addr(all);
    memmove(ab + (size_t)d->rank * block, addr(mine), block);
    xfer *x = malloc(sizeof *x * (size_t)(2 * W));
    if (!x)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "dist allgather: out of memory");
    for (int q = 0; x && q < W; q++)
        if (q != d->rank) {
            x[n++] = (xfer){q, true, ab + (size_t)q * block, count, type};
            x[n++] = (xfer){q, false, ab + (size_t)d->rank * block, count, type};
        }
    if (!st)
        st = run_xfers(d, n, x, 9, "allgather (summed gradient shards)", err);
    free(x);
    if (type != MPI_BYTE)
        MPI_Type_free(&type);
    oj_bump_version(all);
    return st;
#else
    return oj_error_set(err, OJ_ERR_UNSUPPORTED, "dist: built without MPI");
#endif
}

oj_status oj_dist_allgatherv(oj_dist *d, oj_tensor *all, const int64_t *offsets, oj_error *err) {
    oj_status st = check_pair(d, "allgatherv", all, -1, NULL, -1, err);
    if (st)
        return st;
    if (!offsets || offsets[0] != 0 || offsets[d->world] != oj_numel(all))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist allgatherv: offsets must run from 0 to the %lld elements",
                            (long long)oj_numel(all));
    for (int q = 0; q < d->world; q++)
        if (offsets[q + 1] < offsets[q])
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "dist allgatherv: offsets decrease at rank %d", q);
    if (!d->active || d->world == 1)
        return OJ_OK;
    size_t es = oj_dtype_size(oj_tensor_dtype(all));
    size_t *bo = malloc(sizeof *bo * (size_t)(d->world + 1));
    if (!bo)
        return oj_error_set(err, OJ_ERR_CAPACITY, "dist allgatherv: out of memory");
    for (int q = 0; q <= d->world; q++)
        bo[q] = (size_t)offsets[q] * es;
    if (d->nccl) {
        oj_bump_version(all);
        st = d->nccl->allgatherv(d->eng, d->comm, addr(all), bo, err);
        free(bo);
        return st;
    }
#ifdef OJAS_HAVE_MPI
    /* segment q from rank q; this rank's segment to every other */
    int W = d->world, n = 0;
    char *ab = addr(all);
    xfer *x = malloc(sizeof *x * (size_t)(2 * W));
    if (!x)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "dist allgatherv: out of memory");
    for (int q = 0; !st && q < W; q++)
        if (bo[q + 1] - bo[q] > (size_t)INT32_MAX)
            st = oj_error_set(err, OJ_ERR_UNSUPPORTED,
                              "dist allgatherv: rank %d's segment of %zu bytes is over MPI's "
                              "2 GiB message limit (use more ranks)",
                              q, bo[q + 1] - bo[q]);
    for (int q = 0; !st && q < W; q++)
        if (q != d->rank) {
            x[n++] = (xfer){q, true, ab + bo[q], (int)(bo[q + 1] - bo[q]), MPI_BYTE};
            x[n++] = (xfer){q, false, ab + bo[d->rank], (int)(bo[d->rank + 1] - bo[d->rank]),
                            MPI_BYTE};
        }
    if (!st)
        st = run_xfers(d, n, x, 9, "allgatherv (parameter shards)", err);
    free(x);
    free(bo);
    oj_bump_version(all);
    return st;
#else
    free(bo);
    return oj_error_set(err, OJ_ERR_UNSUPPORTED, "dist: built without MPI");
#endif
}

oj_status oj_dist_allreduce_sum(oj_dist *d, oj_tensor *buf, oj_error *err) {
    oj_status st = check_pair(d, "allreduce", buf, -1, NULL, -1, err);
    if (st)
        return st;
    oj_dtype dt = oj_tensor_dtype(buf);
    if (!d->active || (d->world == 1 && !d->nccl))
        return OJ_OK;
    if (d->nccl) {
        oj_bump_version(buf);
        return d->nccl->allreduce_sum(d->eng, d->comm, addr(buf), (size_t)oj_numel(buf), dt,
                                      err);
    }
#ifdef OJAS_HAVE_MPI
    if (dt != OJ_F32 && dt != OJ_F64)
        return oj_error_set(err, OJ_ERR_DTYPE,
                            "dist allreduce: MPI sums f32 and f64 tensors, not %s",
                            oj_dtype_name(dt));
    if (oj_numel(buf) > INT32_MAX)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "dist allreduce: %lld elements are over MPI's int count (use a "
                            "smaller dist_bucket_bytes)",
                            (long long)oj_numel(buf));
    MPI_Request r;
    bool done = false;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, addr(buf), (int)oj_numel(buf),
                            dt == OJ_F32 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
    if (rc == MPI_SUCCESS)
        rc = wait_all(d, 1, &r, &done);
    if (rc < 0) { /* a collective cannot tell which peer failed: name each */
        char who[256];
        size_t len = (size_t)snprintf(who, sizeof who, "%s",
                                      d->world > 2 ? "one or more of " : "");
        bool first = true;
        for (int q = 0; q < d->world && len + 40 < sizeof who; q++)
            if (q != d->rank) {
                len += (size_t)snprintf(who + len, sizeof who - len, "%srank %d",
                                        first ? "" : ", ", q);
                first = false;
            }
        if (d->world > 2)
            snprintf(who + len, sizeof who - len, " (an all-reduce cannot tell which)");
        timed_out(d, "allreduce (gradient sum)", who);
    }
    oj_bump_version(buf);
    if (rc != MPI_SUCCESS) {
        char b[MPI_MAX_ERROR_STRING];
        return oj_error_set(err, OJ_ERR_IO, "dist allreduce: %s", mpi_msg(rc, b));
    }
    return OJ_OK;
#else
    return oj_error_set(err, OJ_ERR_UNSUPPORTED, "dist: built without MPI");
#endif
}

oj_status oj_dist_join(oj_dist *d, oj_error *err) {
    if (!d)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist join: NULL group");
    if (!d->nccl || !d->comm)
        return OJ_OK; /* MPI's all-reduce is complete on return */
    return d->nccl->join(d->eng, d->comm, err);
}

oj_status oj_dist_watch(oj_dist *d, const char *what, oj_error *err) {
    if (!d)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "dist watch: NULL group");
    if (!d->nccl || !d->comm)
        return OJ_OK; /* MPI waits are bounded where they happen */
    return d->nccl->watch(d->eng, d->comm, what ? what : "a collective", err);
}
