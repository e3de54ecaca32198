/* CUDA backend memory entries and the helpers every kernel file shares:
 * device selection, cudaMalloc/cudaFree, synchronous copies, error
 * reporting, the per-engine state (cuBLAS handle, status words) and the
 * host side of strided iteration. Opening never falls back to the CPU: a
 * missing driver, no device or a bad ordinal is OJ_ERR_DEVICE naming the
 * CUDA error. The table oj_cuda_backend is in cuda_backend.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

thread_local cudaStream_t oj_cuda_tls_stream = 0;

/* ---------------------------------------------------------------- profile
 * OJAS_CUDA_PROFILE=1: an event is recorded on the default stream at each
 * entry's begin and after each kernel (oj_cuda_check); the time between a
 * kernel's event and the one before it is charged to the kernel's name.
 * Pairs are resolved in batches (when the event pool is used up, and at
 * close), so profiling adds no synchronisation inside a step; it adds ~2
 * host microseconds per launch. Host round trips (device-to-host copies,
 * which synchronise) are counted too. */
#define PROF_EVENTS 8192
#define PROF_NAMES 256
struct prof_name {
    const char *name;
    double ms;
    long long calls;
};
struct oj_cuda_prof {
    cudaEvent_t ev[PROF_EVENTS];
    const char *evname[PROF_EVENTS]; /* name charged for the interval ending at ev[i]; NULL: a start mark */
    int nev, created;
    prof_name names[PROF_NAMES];
    int nnames;
    long long d2h_calls, d2h_bytes, launches;
    /* host time spent in the driver's allocator and synchronous copies */
    long long malloc_calls, free_calls, copy_calls;
    double malloc_ms, free_ms, copy_ms, malloc_bytes;
};

static double host_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void prof_charge(oj_cuda_prof *p, const char *name, double ms) {
    int i;
    for (i = 0; i < p->nnames; i++)
        if (p->names[i].name == name || strcmp(p->names[i].name, name) == 0) break;
    if (i == p->nnames) {
        if (p->nnames == PROF_NAMES) i = PROF_NAMES - 1; /* lumped into the last slot */
        else p->names[p->nnames++].name = name;
    }
    p->names[i].ms += ms;
    p->names[i].calls++;
}

/* Resolve every recorded interval (waits for the last event). */
static void prof_flush(oj_cuda_prof *p) {
    if (p->nev == 0) return;
    cudaEventSynchronize(p->ev[p->nev - 1]);
    for (int i = 1; i < p->nev; i++) {
        if (p->evname[i] == NULL) continue;
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) == cudaSuccess)
            prof_charge(p, p->evname[i], (double)ms);
    }
    cudaGetLastError();
    /* the last event starts the next batch */
    cudaEvent_t t = p->ev[0];
    p->ev[0] = p->ev[p->nev - 1];
    p->ev[p->nev - 1] = t;
    p->evname[0] = NULL;
    p->nev = 1;
}

static void prof_mark(oj_cuda_prof *p, const char *name) {
    if (name == NULL && p->nev > 0 && p->evname[p->nev - 1] == NULL) return; /* start already marked */
    if (p->nev == PROF_EVENTS) prof_flush(p);
    if (name != NULL && p->nev == 0) return; /* no start mark: cannot time this one */
    /* name == NULL after a kernel's event: that event already marks the
     * start, but host time may have passed; a fresh mark excludes it. */
    if (p->nev >= p->created) {
        if (cudaEventCreate(&p->ev[p->nev]) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        p->created++;
    }
    cudaEventRecord(p->ev[p->nev], OJ_STREAM);
    p->evname[p->nev++] = name;
    if (name) p->launches++;
}

static int prof_cmp(const void *a, const void *b) {
    double x = ((const prof_name *)a)->ms, y = ((const prof_name *)b)->ms;
    return (x < y) - (x > y);
}

static void prof_report(oj_cuda_prof *p, int ordinal) {
    prof_flush(p);
    qsort(p->names, (size_t)p->nnames, sizeof p->names[0], prof_cmp);
    double total = 0.0;
    for (int i = 0; i < p->nnames; i++) total += p->names[i].ms;
    fprintf(stderr,
            "== cuda profile (cuda:%d): %lld timed launches, %.3f ms device time; %lld "
            "device-to-host copies (%lld bytes)\n",
            ordinal, p->launches, total, p->d2h_calls, p->d2h_bytes);
    fprintf(stderr,
            "== host time in the driver: cudaMalloc %lld calls %.3f ms (%.3f GiB); cudaFree %lld "
            "calls %.3f ms; synchronous copies %lld calls %.3f ms\n",
            p->malloc_calls, p->malloc_ms, p->malloc_bytes / 1073741824.0, p->free_calls,
            p->free_ms, p->copy_calls, p->copy_ms);
    fprintf(stderr, "%-44s %10s %12s %10s %7s\n", "kernel", "calls", "total ms", "mean us", "%");
    for (int i = 0; i < p->nnames; i++)
        fprintf(stderr, "%-44s %10lld %12.3f %10.2f %6.2f%%\n", p->names[i].name,
                p->names[i].calls, p->names[i].ms, 1e3 * p->names[i].ms / (double)p->names[i].calls,
                total > 0 ? 100.0 * p->names[i].ms / total : 0.0);
    for (int i = 0; i < p->created; i++) cudaEventDestroy(p->ev[i]);
    p->created = 0;
}

static void state_destroy(oj_engine *eng, void *ptr) {
    (void)eng;
    free(ptr);
}

oj_status oj_cuda_open(oj_engine *eng, int index, oj_error *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "engine_create: cannot open cuda:%d: no usable NVIDIA GPU and driver "
                            "(the CUDA runtime says: %s, %s)",
                            index, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (index >= count)
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "engine_create: cannot open cuda:%d: %d CUDA device(s) visible", index,
                            count);
    e = cudaSetDevice(index);
    int sms = 0;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index);
    if (e == cudaSuccess && sms < 1) e = cudaErrorInvalidDevice;
    unsigned long long *flags = NULL;
    const size_t flag_bytes = OJ_CUDA_FLAG_WORDS * sizeof *flags;
    const size_t count_bytes = OJ_CUDA_COUNT_WORDS * sizeof(unsigned int);
    if (e == cudaSuccess) e = cudaMalloc((void **)&flags, flag_bytes + count_bytes);
    if (e == cudaSuccess) e = cudaMemset((char *)flags + flag_bytes, 0, count_bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (flags) cudaFree(flags);
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "engine_create: cannot open cuda:%d: no usable NVIDIA GPU and driver "
                            "(the CUDA runtime says: %s, %s)",
                            index, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    oj_cuda_state *s = (oj_cuda_state *)calloc(1, sizeof *s);
    if (s == NULL) {
        cudaFree(flags);
        return oj_error_set(err, OJ_ERR_CAPACITY, "engine_create: out of host memory");
    }
    s->ordinal = index;
    s->sms = sms;
    s->flags = flags;
    s->flags_base = flags;
    s->counts = (unsigned int *)(flags + OJ_CUDA_FLAG_WORDS);
    /* A blocking stream: work that some library puts on the legacy
     * default stream stays ordered with the engine's. */
    e = cudaStreamCreate(&s->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(flags);
        free(s);
        return oj_error_set(err, OJ_ERR_DEVICE, "engine_create: cannot create a stream on cuda:%d: %s",
                            index, cudaGetErrorString(e));
    }
    s->sync_check = oj__env_flag("OJAS_CUDA_SYNC", false);
    if (oj__env_flag("OJAS_CUDA_PROFILE", false))
        s->prof = (oj_cuda_prof *)calloc(1, sizeof *s->prof); /* NULL: no profile */
    eng->ext[OJ_EXT_BACKEND].ptr = s;
    eng->ext[OJ_EXT_BACKEND].destroy = state_destroy;
    return OJ_OK;
}

oj_status oj_cuda_memory_info(oj_engine *eng, int64_t *free_bytes, int64_t *total_bytes) {
    size_t f = 0, t = 0;
    cudaError_t e = cudaSetDevice(oj_cuda_ordinal(eng));
    if (e == cudaSuccess) e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return OJ_ERR_DEVICE;
    }
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
    return OJ_OK;
}

void oj_cuda_close(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    cudaSetDevice(oj_cuda_ordinal(eng));
    cudaDeviceSynchronize();
    if (s == NULL) return;
    if (s->prof) {
        prof_report(s->prof, s->ordinal);
        free(s->prof);
        s->prof = NULL;
    }
    oj_cuda_cudnn_close(s);
    oj_cuda_gemm_tune_close(s);
    oj_cuda_rnr_close(s);
    oj_cuda_read_close(s);
    if (s->blas_ready) cublasDestroy(s->blas);
    s->blas_ready = false;
    if (s->lt_ready) cublasLtDestroy(s->lt);
    s->lt_ready = false;
    if (s->blas_ws) cudaFree(s->blas_ws);
    s->blas_ws = NULL;
    if (s->flags_base) cudaFree(s->flags_base);
    s->flags = s->flags_base = NULL;
    s->counts = NULL;
    if (s->stream) cudaStreamDestroy(s->stream);
    s->stream = NULL;
}

void *oj_cuda_alloc(oj_engine *eng, size_t nbytes) {
    void *p = NULL;
    if (cudaSetDevice(oj_cuda_ordinal(eng)) != cudaSuccess) return NULL;
    oj_cuda_state *s = oj_cuda_state_of(eng);
    double t0 = s && s->prof ? host_ms() : 0.0;
    cudaError_t e = cudaMalloc(&p, nbytes);
    if (s && s->prof) {
        s->prof->malloc_calls++;
        s->prof->malloc_ms += host_ms() - t0;
        s->prof->malloc_bytes += (double)nbytes;
    }
    if (e != cudaSuccess) {
        cudaGetLastError(); /* reset the (non-sticky) out-of-memory error */
        return NULL;
    }
    return p;
}

void oj_cuda_free(oj_engine *eng, void *ptr, size_t nbytes) {
    (void)nbytes;
    cudaSetDevice(oj_cuda_ordinal(eng));
    oj_cuda_state *s = oj_cuda_state_of(eng);
    double t0 = s && s->prof ? host_ms() : 0.0;
    cudaFree(ptr);
    if (s && s->prof) {
        s->prof->free_calls++;
        s->prof->free_ms += host_ms() - t0;
    }
}

/* Refuse a host round trip during a capture (it cannot be recorded in a
 * graph; the graph would replay without it). */
static oj_status refuse_in_capture(oj_engine *eng, const char *what) {
    return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                        "%s during a CUDA graph capture: a graph cannot read values back to the "
                        "host or upload host memory; do it before oj_graph_capture_begin or after "
                        "the replay",
                        what);
}

/* Copies on the engine's stream; a copy to the host waits for it. A
 * pageable host source is staged by the driver before cudaMemcpyAsync
 * returns, so the caller may free it at once. */
static oj_status copy(oj_engine *eng, void *dst, const void *src, size_t nbytes,
                      cudaMemcpyKind kind, const char *what) {
    if (nbytes == 0) return OJ_OK;
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->capture && kind != cudaMemcpyDeviceToDevice) return refuse_in_capture(eng, what);
    cudaError_t e = cudaSetDevice(s->ordinal);
    double t0 = s->prof ? host_ms() : 0.0;
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, nbytes, kind, s->stream);
    if (e == cudaSuccess && kind == cudaMemcpyDeviceToHost) e = cudaStreamSynchronize(s->stream);
    if (s->prof && kind != cudaMemcpyDeviceToDevice) {
        s->prof->copy_calls++;
        s->prof->copy_ms += host_ms() - t0;
    }
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda %s of %zu bytes failed: %s (%s)", what,
                            nbytes, cudaGetErrorString(e), cudaGetErrorName(e));
    return OJ_OK;
}

oj_status oj_cuda_copy_h2d(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyHostToDevice, "host-to-device copy");
}
static void count_d2h(oj_engine *eng, size_t nbytes) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s && s->prof) {
        s->prof->d2h_calls++;
        s->prof->d2h_bytes += (long long)nbytes;
    }
}

oj_status oj_cuda_copy_d2h(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    count_d2h(eng, nbytes);
    return copy(eng, dst, src, nbytes, cudaMemcpyDeviceToHost, "device-to-host copy");
}
oj_status oj_cuda_copy_d2d(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyDeviceToDevice, "device-to-device copy");
}

oj_status oj_cuda_memset0(oj_engine *eng, void *dst, size_t nbytes) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    cudaError_t e = cudaSetDevice(s->ordinal);
    if (e == cudaSuccess && nbytes) e = cudaMemsetAsync(dst, 0, nbytes, s->stream);
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda memset of %zu bytes failed: %s (%s)", nbytes,
                            cudaGetErrorString(e), cudaGetErrorName(e));
    return OJ_OK;
}

oj_status oj_cuda_synchronize(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->capture) return refuse_in_capture(eng, "synchronize");
    cudaError_t e = cudaSetDevice(s->ordinal);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda synchronize failed: %s (%s)",
                            cudaGetErrorString(e), cudaGetErrorName(e));
    return OJ_OK;
}

/* ---------------------------------------------------------------- helpers for the kernels */

oj_status oj_cuda_fail(oj_engine *eng, cudaError_t e, const char *what) {
    return oj_set_error(eng, OJ_ERR_DEVICE, "cuda: %s failed on cuda:%d: %s (%s)", what,
                        oj_cuda_ordinal(eng), cudaGetErrorString(e), cudaGetErrorName(e));
}

oj_status oj_cuda_begin(oj_engine *eng, const char *op) {
    cudaError_t e = cudaSetDevice(oj_cuda_ordinal(eng));
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, op);
    oj_cuda_state *s = oj_cuda_state_of(eng);
    oj_cuda_tls_stream = s->stream;
    if (s->prof && !s->capture) prof_mark(s->prof, NULL);
    return OJ_OK;
}

oj_status oj_cuda_check(oj_engine *eng, const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        oj_cuda_state *s = oj_cuda_state_of(eng);
        if (s && s->prof && !s->capture) prof_mark(s->prof, kernel);
        if (s && s->sync_check && !s->capture) e = cudaStreamSynchronize(s->stream);
    }
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda kernel %s failed on cuda:%d: %s (%s)",
                            kernel, oj_cuda_ordinal(eng), cudaGetErrorString(e),
                            cudaGetErrorName(e));
    return OJ_OK;
}

cudaError_t oj_cuda_kernel_smem(oj_cuda_kfacts *f, const void *func, int ordinal, size_t smem) {
    if (smem <= 48 * 1024) return cudaSuccess;
    if (ordinal < 0 || ordinal >= OJ_CUDA_KF_DEVICES)
        return cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    std::atomic<int> &have = f->smem[ordinal];
    if ((size_t)have.load(std::memory_order_acquire) >= smem) return cudaSuccess;
    /* under the lock the attribute and `have` change together, never down */
    std::lock_guard<std::mutex> lock(f->mu);
    if ((size_t)have.load(std::memory_order_relaxed) >= smem) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e == cudaSuccess) have.store((int)smem, std::memory_order_release);
    return e;
}

cudaError_t oj_cuda_kernel_occupancy(oj_cuda_kfacts *f, const void *func, int ordinal,
                                     int threads, size_t smem, int *blocks) {
    const bool keep = ordinal >= 0 && ordinal < OJ_CUDA_KF_DEVICES && smem < (1ull << 32) &&
                      threads > 0 && threads < (1 << 16);
    const unsigned long long key = (unsigned long long)smem << 16 | (unsigned)threads;
    if (keep)
        for (int i = 0; i < OJ_CUDA_KF_SLOTS; i++) {
            const unsigned long long v = f->occ[ordinal][i].load(std::memory_order_relaxed);
            if (v != 0 && v >> 16 == key) {
                *blocks = (int)(v & 0xffffu) - 1;
                return cudaSuccess;
            }
        }
    int o = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, func, threads, smem);
    if (e != cudaSuccess) return e;
    *blocks = o;
    if (keep && o >= 0 && o < 0xffff) {
        const unsigned i = f->next[ordinal].fetch_add(1, std::memory_order_relaxed);
        f->occ[ordinal][i % OJ_CUDA_KF_SLOTS].store(key << 16 | (unsigned)(o + 1),
                                                   std::memory_order_relaxed);
    }
    return cudaSuccess;
}

oj_status oj_cuda_flags_reset(oj_engine *eng, int nwords, int first_byte, int rest_byte,
                              const char *op) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (nwords > OJ_CUDA_FLAG_WORDS) nwords = OJ_CUDA_FLAG_WORDS;
    if (s->capture) {
        s->flags = oj_cuda_graph_flags(eng, nwords, op);
        if (s->flags == NULL) return oj_last_status(eng);
    } else {
        s->flags = s->flags_base;
    }
    cudaError_t e = cudaMemsetAsync(s->flags, first_byte, sizeof *s->flags, s->stream);
    if (e == cudaSuccess && nwords > 1)
        e = cudaMemsetAsync(s->flags + 1, rest_byte, (size_t)(nwords - 1) * sizeof *s->flags,
                            s->stream);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, op);
    return OJ_OK;
}

oj_status oj_cuda_flags_read(oj_engine *eng, unsigned long long *host, int nwords,
                             const char *op) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (nwords > OJ_CUDA_FLAG_WORDS) nwords = OJ_CUDA_FLAG_WORDS;
    return oj_cuda_d2h(eng, host, s->flags, (size_t)nwords * sizeof *host, op);
}

oj_status oj_cuda_d2h(oj_engine *eng, void *dst, const void *src, size_t nbytes, const char *op) {
    if (nbytes == 0) return OJ_OK;
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->capture) {
        char what[96];
        snprintf(what, sizeof what, "%s: a read-back to the host", op);
        return refuse_in_capture(eng, what);
    }
    count_d2h(eng, nbytes);
    cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, op);
    return OJ_OK;
}

/* Deferred read-backs: each queued copy lands in pinned staging (16-byte
 * aligned slices; a copy into pageable memory would make the host wait),
 * one event is recorded after the last, and read_wait copies the slices
 * out once that event has passed. The staging grows only when nothing is
 * queued, to the most bytes ever queued at once; a copy that does not fit
 * while others are queued waits for them first. A failed wait drops the
 * queued copies unfilled, and the next read_wait that finds nothing
 * queued reports it, so no caller reads a destination that was not
 * filled. */
struct rb_copy {
    void *dst;
    size_t off, n;
};
struct oj_cuda_readback {
    unsigned char *host; /* pinned (cudaHostAlloc) */
    size_t cap, used;
    size_t most;  /* the most bytes queued at once (the staging grows to it) */
    bool lost;    /* a wait failed: copies were dropped unfilled (read_wait reports it) */
    rb_copy *q;
    int nq, capq;
    cudaEvent_t done;
};

oj_status oj_cuda_read_defer(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    if (nbytes == 0) return OJ_OK;
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->capture) return refuse_in_capture(eng, "a deferred read-back to the host");
    cudaError_t e = cudaSetDevice(s->ordinal);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, "read_defer");
    if (s->rb == NULL) {
        s->rb = (struct oj_cuda_readback *)calloc(1, sizeof *s->rb);
        if (s->rb == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "read_defer: out of host memory");
        e = cudaEventCreateWithFlags(&s->rb->done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(s->rb);
            s->rb = NULL;
            return oj_cuda_fail(eng, e, "read_defer (cudaEventCreate)");
        }
    }
    struct oj_cuda_readback *r = s->rb;
    const size_t need = (nbytes + 15) & ~(size_t)15;
    if (r->used + need > r->most) r->most = r->used + need; /* the next round fits at once */
    if (r->used + need > r->cap && r->nq > 0) {
        oj_status st = oj_cuda_read_wait(eng);
        if (st != OJ_OK) return st;
    }
    if (r->nq == 0 && r->most > r->cap) { /* grown only while nothing is queued into it */
        size_t cap = r->most > 65536 ? r->most : 65536;
        unsigned char *h = NULL;
        e = cudaHostAlloc((void **)&h, cap, cudaHostAllocDefault);
        if (e != cudaSuccess) return oj_cuda_fail(eng, e, "read_defer (cudaHostAlloc)");
        if (r->host) cudaFreeHost(r->host);
        r->host = h;
        r->cap = cap;
    }
    if (r->nq == r->capq) {
        int capq = r->capq ? 2 * r->capq : 8;
        rb_copy *q = (rb_copy *)realloc(r->q, (size_t)capq * sizeof *q);
        if (q == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "read_defer: out of host memory");
        r->q = q;
        r->capq = capq;
    }
    count_d2h(eng, nbytes);
    e = cudaMemcpyAsync(r->host + r->used, src, nbytes, cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess) e = cudaEventRecord(r->done, s->stream);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, "read_defer");
    r->q[r->nq++] = rb_copy{dst, r->used, nbytes};
    r->used += need;
    return OJ_OK;
}

oj_status oj_cuda_read_wait(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    struct oj_cuda_readback *r = s->rb;
    if (r == NULL) return OJ_OK;
    if (r->lost && r->nq == 0) { /* an earlier wait dropped copies a caller still waits for */
        r->lost = false;
        return oj_set_error(eng, OJ_ERR_DEVICE,
                            "read_wait: a deferred read-back was lost to an earlier device error");
    }
    if (r->nq == 0) return OJ_OK;
    const int nq = r->nq;
    r->nq = 0;
    r->used = 0;
    cudaError_t e = cudaSetDevice(s->ordinal);
    if (e == cudaSuccess) e = cudaEventSynchronize(r->done);
    if (e != cudaSuccess) {
        r->lost = true; /* the callers of the copies queued before learn it at their wait */
        return oj_cuda_fail(eng, e, "read_wait");
    }
    r->lost = false;
    for (int i = 0; i < nq; i++) memcpy(r->q[i].dst, r->host + r->q[i].off, r->q[i].n);
    return OJ_OK;
}

void oj_cuda_read_close(oj_cuda_state *s) {
    struct oj_cuda_readback *r = s->rb;
    if (r == NULL) return;
    if (r->host) cudaFreeHost(r->host);
    cudaEventDestroy(r->done);
    free(r->q);
    free(r);
    s->rb = NULL;
}

/* cuBLAS's workspace: fixed, so the handle never allocates inside a graph
 * capture (32 MiB, the size cuBLAS recommends for Hopper). The environment
 * variable OJAS_CUBLAS_WORKSPACE_MIB sets another size; 0 leaves cuBLAS
 * its own (then graph capture of a matmul may fail). */
static size_t blas_workspace_bytes(void) {
    const int64_t mib = oj__env_int("OJAS_CUBLAS_WORKSPACE_MIB", 32);
    return mib > 0 && mib <= 4096 ? (size_t)mib << 20 : 0;
}

cublasHandle_t oj_cuda_blas(oj_engine *eng, const char *op) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->blas_ready) return s->blas;
    if (s->capture) {
        refuse_in_capture(eng, "creating the cuBLAS handle (run one matmul before capturing)");
        return NULL;
    }
    cublasStatus_t st = cublasCreate(&s->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        oj_set_error(eng, OJ_ERR_DEVICE, "%s: cublasCreate failed on cuda:%d: %s", op,
                     s->ordinal, cublasGetStatusString(st));
        return NULL;
    }
    size_t ws = blas_workspace_bytes();
    cudaError_t e = s->blas_ws || ws == 0 ? cudaSuccess : cudaMalloc(&s->blas_ws, ws);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cublasDestroy(s->blas);
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: no device memory for cuBLAS's %zu MiB workspace",
                     op, ws >> 20);
        return NULL;
    }
    /* the engine's stream, host scalars (TF32 is requested per call in FAST) */
    cublasSetStream(s->blas, s->stream);
    if (ws) cublasSetWorkspace(s->blas, s->blas_ws, ws);
    s->blas_ws_bytes = ws;
    cublasSetPointerMode(s->blas, CUBLAS_POINTER_MODE_HOST);
    s->blas_ready = true;
    /* cuBLASLt's handle (the GEMM epilogues) now as well: it cannot be
     * made during a capture, and graph_capture_begin makes this handle
     * first, so a training step captured before any eager GEMM still gets
     * the epilogues (made lazily, it was refused there and every captured
     * linear ran unfused). Failing, the epilogues are refused (unfused). */
    if (!s->lt_ready && cublasLtCreate(&s->lt) == CUBLAS_STATUS_SUCCESS) s->lt_ready = true;
    oj_cuda_gemm_tune_prepare(s);
    return s->blas;
}

oj_status oj_cuda_need_contig(oj_engine *eng, const oj_tensor *t, const char *op,
                              const char *arg) {
    if (t == NULL || oj_cuda_contig(t)) return OJ_OK;
    char b[160];
    return oj_set_error(eng, OJ_ERR_INTERNAL,
                        "%s: the cuda kernel expects %s %s to be contiguous (a bug in the ops "
                        "layer)",
                        op, arg, oj__shape_fmt(b, sizeof b, t->rank, t->shape));
}

void oj_cu_iter_init(oj_cu_iter *it, int rank, const int64_t *shape, int n,
                     const oj_tensor *const *t) {
    memset(it, 0, sizeof *it);
    it->n = n;
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (shape[d] == 1) continue;
        it->shape[r] = shape[d];
        for (int k = 0; k < n; k++) {
            int td = d - (rank - t[k]->rank);
            int64_t s = (td >= 0 && t[k]->shape[td] != 1) ? t[k]->stride[td] : 0;
            it->stride[k][r] = s * (int64_t)oj_dtype_size(t[k]->dtype);
        }
        r++;
    }
    for (int k = 0; k < n; k++) {
        it->base[k] = oj_cuda_ptr(t[k]);
        it->dt[k] = (int)t[k]->dtype;
    }
    if (r == 0) {
        it->shape[0] = 1;
        r = 1;
    }
    int m = 0;
    for (int d = 1; d < r; d++) {
        bool merge = true;
        for (int k = 0; k < n; k++)
            if (it->stride[k][m] != it->stride[k][d] * it->shape[d]) merge = false;
        if (merge) {
            it->shape[m] *= it->shape[d];
            for (int k = 0; k < n; k++) it->stride[k][m] = it->stride[k][d];
        } else {
            m++;
            it->shape[m] = it->shape[d];
            for (int k = 0; k < n; k++) it->stride[k][m] = it->stride[k][d];
        }
    }
    it->rank = m + 1;
    int64_t numel = 1;
    for (int d = 0; d < it->rank; d++) numel *= it->shape[d];
    for (int d = 0; d < rank; d++)
        if (shape[d] == 0) numel = 0;
    it->numel = numel;
}
