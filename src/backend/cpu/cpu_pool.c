/* The CPU backend's engine state: thread pool, scratch, ISA (cpu_pool.h).
 *
 * The pool: threads - 1 workers wait for a job (fn, ctx, n, grain); the
 * caller publishes it by bumping a generation counter and then claims
 * chunks itself like any worker, from one atomic counter. A worker that
 * finishes a job spins briefly (OJAS_SPIN_US, default 30 us) watching the
 * generation before it sleeps on a condition variable, so back-to-back
 * kernels of a training step do not pay a wake-up each, while an idle
 * engine costs nothing. The caller, once out of chunks, waits for the
 * chunks still running elsewhere (spinning briefly, then sleeping); it
 * never waits for a worker that has not woken up yet, which matters on a
 * machine shared with other processes.
 *
 * Under FAST numerics every thread runs its chunks (the caller's too, and
 * the serial path) with the x86 MXCSR's flush-to-zero and
 * denormals-are-zero bits set, restored afterwards: a subnormal result
 * becomes 0 and a subnormal input counts as 0, where the CPU would
 * otherwise take a microcode path 10-100x slower per instruction (a
 * training step whose values drift into the subnormal range slowed down
 * 10x). Otherwise (EXACT) the chunks run in the calling thread's mode
 * (IEEE subnormals unless the caller set FTZ/DAZ itself). Every chunk of a
 * job runs in one mode whichever thread takes it, so results do not
 * depend on the thread count. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define OJ_PAUSE() _mm_pause()
/* The MXCSR's mode bits (6-15: denormals-are-zero, exception masks,
 * rounding, flush-to-zero; bits 0-5 are sticky exception flags). */
#define OJ_CSR_MODE 0xffc0u
#define OJ_FTZ_DAZ 0x8040u
/* The mode a job's chunks run in: the caller's, plus FTZ/DAZ when asked. */
static inline unsigned job_mode(bool flush) {
    return (_mm_getcsr() & OJ_CSR_MODE) | (flush ? OJ_FTZ_DAZ : 0u);
}
/* Enter mode on this thread; returns the MXCSR to restore. */
static inline unsigned mode_begin(unsigned mode) {
    unsigned old = _mm_getcsr();
    if ((old & OJ_CSR_MODE) != mode) _mm_setcsr((old & ~OJ_CSR_MODE) | mode);
    return old;
}
static inline void mode_end(unsigned old) {
    if ((_mm_getcsr() & OJ_CSR_MODE) != (old & OJ_CSR_MODE)) _mm_setcsr(old);
}
#else
#define OJ_PAUSE() ((void)0)
static inline unsigned job_mode(bool flush) { return (void)flush, 0u; }
static inline unsigned mode_begin(unsigned mode) { return (void)mode, 0u; }
static inline void mode_end(unsigned old) { (void)old; }
#endif

typedef struct {
    void *ptr;
    size_t cap;
} scratch_buf;

typedef struct {
    oj_cpu_chunk_fn fn;
    void *ctx;
    int64_t n, grain, nchunks;
    uint64_t job; /* low 32 bits of the generation */
    unsigned mode; /* the MXCSR mode bits the chunks run in (job_mode) */
} job_desc;

typedef struct oj_cpu_state {
    oj_cpu_isa isa;
    int nthreads; /* caller included */
    scratch_buf *scratch; /* [nthreads] */
    scratch_buf workspace; /* shared by the threads */
    /* pool (started lazily) */
    bool started;
    pthread_t *workers; /* [nthreads - 1] */
    int nworkers;       /* workers actually running */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    atomic_uint_fast64_t gen;    /* job generation */
    atomic_uint_fast64_t ticket; /* (job << 32) | next chunk to claim */
    atomic_int_fast64_t done;    /* chunks of the current job finished */
    bool stop;
    bool caller_waiting;
    int64_t spin_ns;
    int grain_shift; /* tests: grains divided by 2^grain_shift */
    oj_cpu_gemm_choice gemm; /* FAST f32 GEMM */
    job_desc job; /* the current job (written under mu) */
} oj_cpu_state;

typedef struct {
    oj_cpu_state *st;
    int tid;
} worker_arg;

/* The tid of the chunk this thread is running, -1 outside chunks. */
static _Thread_local int tls_tid = -1;

/* ---------------------------------------------------------------- ISA */

oj_cpu_isa oj_cpu_isa_detect(void) {
    oj_cpu_isa isa = OJ_ISA_SCALAR;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = OJ_ISA_AVX2;
    if (isa == OJ_ISA_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        isa = OJ_ISA_AVX512;
#endif
    const char *env = getenv("OJAS_CPU_ISA");
    if (env) {
        oj_cpu_isa cap = isa;
        if (strcmp(env, "scalar") == 0) cap = OJ_ISA_SCALAR;
        else if (strcmp(env, "avx2") == 0) cap = OJ_ISA_AVX2;
        else if (strcmp(env, "avx512") == 0) cap = OJ_ISA_AVX512;
        if (cap < isa) isa = cap;
    }
    return isa;
}

const char *oj_cpu_isa_name(oj_cpu_isa isa) {
    switch (isa) {
    case OJ_ISA_AVX512: return "avx512";
    case OJ_ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}

/* ---------------------------------------------------------------- state */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void state_destroy(oj_engine *eng, void *p) {
    (void)eng;
    oj_cpu_state *st = p;
    if (st == NULL) return;
    if (st->started) {
        pthread_mutex_lock(&st->mu);
        st->stop = true;
        atomic_fetch_add_explicit(&st->gen, 1, memory_order_release);
        pthread_cond_broadcast(&st->cv_work);
        pthread_mutex_unlock(&st->mu);
        for (int i = 0; i < st->nworkers; i++) pthread_join(st->workers[i], NULL);
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->cv_work);
        pthread_cond_destroy(&st->cv_done);
    }
    free(st->workers);
    for (int i = 0; i < st->nthreads; i++) free(st->scratch[i].ptr);
    free(st->workspace.ptr);
    free(st->scratch);
    free(st);
}

/* eng's CPU state, created on first use; NULL for a non-CPU engine or
 * when out of memory (callers then run serially). */
static oj_cpu_state *state_of(oj_engine *eng) {
    if (eng == NULL || eng->device.type != OJ_DEVICE_CPU) return NULL;
    oj_engine_ext *ext = &eng->ext[OJ_EXT_BACKEND];
    if (ext->ptr) return ext->ptr;
    oj_cpu_state *st = calloc(1, sizeof *st);
    if (st == NULL) return NULL;
    st->isa = oj_cpu_isa_detect();
    st->nthreads = eng->threads > 0 ? eng->threads : 1;
    st->scratch = calloc((size_t)st->nthreads, sizeof *st->scratch);
    if (st->scratch == NULL) {
        free(st);
        return NULL;
    }
    /* Spin only when every thread can have a CPU: with more threads than
     * CPUs a spinning thread takes the CPU a chunk's owner needs. */
    cpu_set_t set;
    CPU_ZERO(&set);
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    st->spin_ns = st->nthreads <= cpus ? 30000 : 0;
    const char *spin = getenv("OJAS_SPIN_US");
    if (spin) st->spin_ns = (int64_t)(atof(spin) * 1000.0);
    st->gemm = OJ_GEMM_BLAS;
    const char *gemm = getenv("OJAS_GEMM");
    if (gemm && strcmp(gemm, "openblas") == 0) st->gemm = OJ_GEMM_BLAS;
    if (gemm && strcmp(gemm, "ojas") == 0) st->gemm = OJ_GEMM_OWN;
#ifndef OJAS_HAVE_OPENBLAS
    st->gemm = OJ_GEMM_OWN;
#endif
    ext->ptr = st;
    ext->destroy = state_destroy;
    return st;
}

oj_cpu_isa oj_cpu_isa_of(oj_engine *eng) {
    oj_cpu_state *st = state_of(eng);
    return st ? st->isa : oj_cpu_isa_detect();
}

oj_cpu_isa oj__cpu_set_isa(oj_engine *eng, oj_cpu_isa isa) {
    oj_cpu_state *st = state_of(eng);
    if (st == NULL) return OJ_ISA_SCALAR;
    oj_cpu_isa best = oj_cpu_isa_detect();
    st->isa = isa < best ? isa : best;
    return st->isa;
}

void oj__cpu_set_grain_shift(oj_engine *eng, int shift) {
    oj_cpu_state *st = state_of(eng);
    if (st) st->grain_shift = shift < 0 ? 0 : shift > 40 ? 40 : shift;
}

oj_cpu_gemm_choice oj_cpu_fast_gemm(oj_engine *eng) {
    oj_cpu_state *st = state_of(eng);
    return st ? st->gemm : OJ_GEMM_BLAS;
}

void oj__cpu_set_fast_gemm(oj_engine *eng, oj_cpu_gemm_choice g) {
    oj_cpu_state *st = state_of(eng);
#ifdef OJAS_HAVE_OPENBLAS
    if (st) st->gemm = g;
#else
    (void)st, (void)g;
#endif
}

int oj_cpu_threads(oj_engine *eng) {
    oj_cpu_state *st = state_of(eng);
    return st ? st->nthreads : 1;
}

static void *grow(scratch_buf *b, size_t nbytes) {
    if (nbytes == 0) nbytes = 64;
    if (b->cap < nbytes) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < nbytes) cap *= 2;
        void *p = NULL;
        if (posix_memalign(&p, 64, cap) != 0) return NULL;
        free(b->ptr);
        b->ptr = p;
        b->cap = cap;
    }
    return b->ptr;
}

void *oj_cpu_scratch(oj_engine *eng, int tid, size_t nbytes) {
    oj_cpu_state *st = state_of(eng);
    if (st == NULL || tid < 0 || tid >= st->nthreads) return NULL;
    return grow(&st->scratch[tid], nbytes);
}

void *oj_cpu_workspace(oj_engine *eng, size_t nbytes) {
    oj_cpu_state *st = state_of(eng);
    return st ? grow(&st->workspace, nbytes) : NULL;
}

/* ---------------------------------------------------------------- pool */

/* Claim and run chunks of job j until none is left. A claim is a
 * compare-and-swap on (job << 32 | next chunk), so a thread that read job
 * j late can never take a chunk of a later job. */
static void run_chunks(oj_cpu_state *st, const job_desc *j, int tid) {
    int saved = tls_tid;
    tls_tid = tid;
    unsigned csr = mode_begin(j->mode);
    for (;;) {
        uint64_t t = atomic_load_explicit(&st->ticket, memory_order_relaxed);
        do {
            if ((t >> 32) != j->job || (int64_t)(t & 0xffffffffu) >= j->nchunks) {
                mode_end(csr);
                tls_tid = saved;
                return;
            }
        } while (!atomic_compare_exchange_weak_explicit(&st->ticket, &t, t + 1,
                                                        memory_order_acquire,
                                                        memory_order_relaxed));
        int64_t c = (int64_t)(t & 0xffffffffu);
        int64_t b = c * j->grain, e = b + j->grain < j->n ? b + j->grain : j->n;
        j->fn(j->ctx, b, e, tid);
        if (atomic_fetch_add_explicit(&st->done, 1, memory_order_acq_rel) + 1 == j->nchunks) {
            pthread_mutex_lock(&st->mu);
            if (st->caller_waiting) pthread_cond_signal(&st->cv_done);
            pthread_mutex_unlock(&st->mu);
        }
    }
}

static void *worker_main(void *vp) {
    worker_arg a = *(worker_arg *)vp;
    free(vp);
    oj_cpu_state *st = a.st;
    uint64_t seen = 0;
    for (;;) {
        /* spin briefly for the next job, then sleep */
        uint64_t g = atomic_load_explicit(&st->gen, memory_order_acquire);
        if (g == seen && st->spin_ns > 0) {
            int64_t t0 = now_ns();
            for (int i = 0; g == seen; i++) {
                OJ_PAUSE();
                g = atomic_load_explicit(&st->gen, memory_order_acquire);
                if ((i & 255) == 255 && now_ns() - t0 > st->spin_ns) break;
            }
        }
        pthread_mutex_lock(&st->mu);
        while (atomic_load_explicit(&st->gen, memory_order_acquire) == seen)
            pthread_cond_wait(&st->cv_work, &st->mu);
        seen = atomic_load_explicit(&st->gen, memory_order_acquire);
        bool stop = st->stop;
        job_desc j = st->job;
        pthread_mutex_unlock(&st->mu);
        if (stop) break;
        run_chunks(st, &j, a.tid);
    }
    return NULL;
}

static bool pool_start(oj_cpu_state *st) {
    if (st->started) return st->nworkers > 0;
    st->started = true;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv_work, NULL);
    pthread_cond_init(&st->cv_done, NULL);
    atomic_init(&st->gen, 0);
    atomic_init(&st->ticket, 0);
    atomic_init(&st->done, 0);
    st->workers = calloc((size_t)(st->nthreads - 1), sizeof *st->workers);
    if (st->workers == NULL) return false;
    for (int i = 1; i < st->nthreads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (a == NULL) break;
        a->st = st;
        a->tid = i;
        if (pthread_create(&st->workers[st->nworkers], NULL, worker_main, a) != 0) {
            free(a);
            break;
        }
        st->nworkers++;
    }
    return st->nworkers > 0;
}

unsigned oj_cpu_fpmode_begin(oj_engine *eng) {
    return mode_begin(job_mode(eng && eng->numerics == OJ_NUMERICS_FAST));
}

void oj_cpu_fpmode_end(unsigned saved) { mode_end(saved); }

void oj_cpu_parallel_for(oj_engine *eng, int64_t n, int64_t grain, oj_cpu_chunk_fn fn,
                         void *ctx) {
    if (n <= 0) return;
    oj_cpu_state *st = state_of(eng);
    if (st && st->grain_shift) grain >>= st->grain_shift;
    if (grain < 1) grain = 1;
    int64_t nchunks = oj_cpu_chunks(n, grain);
    bool serial = st == NULL || st->nthreads < 2 || nchunks < 2 || tls_tid >= 0 ||
                  nchunks >= ((int64_t)1 << 31);
    if (!serial && !pool_start(st)) serial = true;
    unsigned mode = job_mode(eng && eng->numerics == OJ_NUMERICS_FAST);
    if (serial) {
        int saved = tls_tid;
        int tid = saved >= 0 ? saved : 0;
        tls_tid = tid;
        unsigned csr = mode_begin(mode);
        for (int64_t b = 0; b < n; b += grain) fn(ctx, b, b + grain < n ? b + grain : n, tid);
        mode_end(csr);
        tls_tid = saved;
        return;
    }
    /* publish the job */
    pthread_mutex_lock(&st->mu);
    uint64_t g = atomic_load_explicit(&st->gen, memory_order_relaxed) + 1;
    st->job = (job_desc){fn, ctx, n, grain, nchunks, g & 0xffffffffu, mode};
    atomic_store_explicit(&st->done, 0, memory_order_relaxed);
    atomic_store_explicit(&st->ticket, (g & 0xffffffffu) << 32, memory_order_relaxed);
    atomic_store_explicit(&st->gen, g, memory_order_release);
    pthread_cond_broadcast(&st->cv_work);
    job_desc j = st->job;
    pthread_mutex_unlock(&st->mu);
    run_chunks(st, &j, 0);
    /* wait for chunks still running on workers */
    if (atomic_load_explicit(&st->done, memory_order_acquire) < nchunks) {
        int64_t t0 = now_ns();
        for (int i = 0; atomic_load_explicit(&st->done, memory_order_acquire) < nchunks; i++) {
            OJ_PAUSE();
            if ((i & 255) == 255 && now_ns() - t0 > st->spin_ns) break;
        }
        pthread_mutex_lock(&st->mu);
        st->caller_waiting = true;
        while (atomic_load_explicit(&st->done, memory_order_acquire) < nchunks)
            pthread_cond_wait(&st->cv_done, &st->mu);
        st->caller_waiting = false;
        pthread_mutex_unlock(&st->mu);
    }
}
