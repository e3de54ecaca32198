/* Shared pieces of the CUDA backend (the .cu files of src/backend/cuda): per-engine
 * state, error reporting, launch helpers, dtype loads/stores that mirror the
 * host conversions bit for bit, strided iteration, Philox4x32-10.
 *
 * Every engine owns one stream; every kernel, cuBLAS call, memset and copy
 * of the engine goes to it (OJ_STREAM in a launch), so work is ordered
 * without explicit synchronisation, and a sequence of entries can be
 * captured into a CUDA graph (oj_graph_capture_begin). Host read-backs
 * (copies to the host, status words) synchronise that stream; during a
 * capture they are refused, or deferred to the replay (the status words).
 * A kernel launch error (or, with the environment
 * variable OJAS_CUDA_SYNC=1, any fault the kernel raised) is reported as
 * OJ_ERR_DEVICE naming the kernel. */
#ifndef OJAS_CUDA_INTERNAL_CUH
#define OJAS_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>
#include <mutex>
#include <type_traits>

extern "C" {
#include "backend/backend.h"
}

/* ---------------------------------------------------------------- engine state */

/* Per-engine state, in eng->ext[OJ_EXT_BACKEND].ptr (freed by its destroy
 * hook, which core runs after close). */
struct oj_cuda_state {
    int ordinal;
    int sms;             /* the device's multiprocessors (asked at open; > 0): oj_cuda_sms */
    bool sync_check;     /* OJAS_CUDA_SYNC=1: synchronise after every kernel */
    bool blas_ready;     /* blas created (first matmul) */
    cublasHandle_t blas;
    /* Small device buffer for status words written by kernels (first bad
     * index, counters, non-finite flags): OJ_CUDA_FLAG_WORDS u64, allocated
     * at open (bookkeeping outside the budget, 256 bytes). */
    unsigned long long *flags;      /* the current status words (see oj_cuda_flags_reset) */
    unsigned long long *flags_base; /* the fixed buffer of them */
    /* Arrival counters of kernels whose last block to finish merges the
     * others' partial results (cuda_attention_decode.cu, cuda_decode.cu):
     * OJ_CUDA_COUNT_WORDS u32 after the status words in the same
     * allocation, zeroed at open; each kernel's last block sets its
     * counters back to 0, so every launch finds them zero (kernels of one
     * engine run in stream order). */
    unsigned int *counts;
    /* OJAS_CUDA_PROFILE=1: per-kernel cumulative device time (cudaEvent
     * pairs around each launch, resolved in batches), printed to stderr
     * when the engine is freed; NULL when off. */
    struct oj_cuda_prof *prof;
    cudaStream_t stream; /* the engine's stream (blocking, created at open) */
    void *blas_ws;       /* cuBLAS workspace (fixed, so cuBLAS can be captured) */
    size_t blas_ws_bytes;
    bool lt_ready;       /* lt created (with blas, before any capture: oj_cuda_blas) */
    cublasLtHandle_t lt; /* cuBLASLt (epilogues), sharing blas_ws */
    /* The GEMM tuner's stream, buffers and per-shape algorithm cache
     * (cuda_gemm_tune.cu); NULL until OJAS_CUDA_GEMM_TUNE=1 first asks. */
    struct oj_cuda_tune *tune;
    /* During a capture (oj_graph_capture_begin): the graph being built.
     * Status words then come from its own region (one per check, never
     * reset by a later op) and are checked after each replay. */
    struct oj_cuda_graph *capture;
    /* While a step gate is open (step_gate_open): its device doubles,
     * which the optimizer kernels read (cuda_optim.cu); NULL otherwise. */
    double *gate;
    /* and its safe word (gate[4 + n]: the check pass may be skipped) */
    const double *gate_safe;
    /* cuDNN attention (cuda_attention_cudnn.cu): handle, plan cache, the
     * implementation each attention call ran; NULL until first used. */
    struct oj_cuda_cudnn *cudnn;
    /* rms_norm_rotary's cos/sin tables (cuda_nn_norm_rotary.cu); NULL
     * until first used, freed by oj_cuda_rnr_close. */
    struct oj_cuda_rnr_tabs *rnr_tabs;
    /* Deferred read-backs (cuda_memory.cu): pinned staging, the copies
     * queued into it, the event recorded after the last; NULL until used. */
    struct oj_cuda_readback *rb;
};
struct oj_cuda_graph;
struct oj_cuda_cudnn;
#define OJ_CUDA_FLAG_WORDS 32
/* The arrival counters (oj_cuda_state.counts): one per row of a split
 * decode attention (rows < OJ_CUDA_COUNT_ATTN_ROWS), then the decode
 * head's, then the quantized decode head's (cuda_decode_quant.cu), then two of
 * the persistent decode step's grid barrier (cuda_decode_mega.cu). */
#define OJ_CUDA_COUNT_ATTN_ROWS 1024
#define OJ_CUDA_COUNT_HEAD OJ_CUDA_COUNT_ATTN_ROWS
#define OJ_CUDA_COUNT_QHEAD (OJ_CUDA_COUNT_ATTN_ROWS + 1)
#define OJ_CUDA_COUNT_MEGA (OJ_CUDA_COUNT_QHEAD + 1)
#define OJ_CUDA_COUNT_WORDS (OJ_CUDA_COUNT_ATTN_ROWS + 32)

/* Whether the batch-1 decode step's kernels let the next launch only after
 * their wait for the one before (OJAS_DECODE_PDL_EARLY, read once;
 * cuda_decode.cu). */
bool oj_cuda_decode_late_trigger(void);

/* The stream of the engine whose entry runs on this thread (set by
 * oj_cuda_begin; every entry calls it before launching). */
extern thread_local cudaStream_t oj_cuda_tls_stream;
#define OJ_STREAM (oj_cuda_tls_stream)

static inline oj_cuda_state *oj_cuda_state_of(oj_engine *eng) {
    return (oj_cuda_state *)eng->ext[OJ_EXT_BACKEND].ptr;
}

/* The engine's device ordinal (its state's once open, else the config's). */
static inline int oj_cuda_ordinal(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    return s ? s->ordinal : eng->device.index;
}

/* The multiprocessors of the engine's device (cudaDevAttrMultiProcessorCount,
 * asked once at open; > 0). */
static inline int oj_cuda_sms(oj_engine *eng) {
    return oj_cuda_state_of(eng)->sms;
}

/* What a launch asks the runtime about its kernel on a device (the
 * dynamic shared memory the kernel is opted into, its occupancy), asked
 * once per device and kept instead of at every launch: one static
 * oj_cuda_kfacts per kernel (per template instance; static storage zeroes
 * it), shared by the threads of every engine. Devices of ordinal >=
 * OJ_CUDA_KF_DEVICES are asked at every call. */
#define OJ_CUDA_KF_DEVICES 16
#define OJ_CUDA_KF_SLOTS 4 /* occupancies kept a device (the latest sizes) */
struct oj_cuda_kfacts {
    std::atomic<int> smem[OJ_CUDA_KF_DEVICES]; /* bytes opted into (0: the 48 KiB default) */
    /* (smem << 32 | threads << 16 | blocks + 1); 0: empty */
    std::atomic<unsigned long long> occ[OJ_CUDA_KF_DEVICES][OJ_CUDA_KF_SLOTS];
    std::atomic<unsigned> next[OJ_CUDA_KF_DEVICES]; /* the slot the next miss fills */
    std::mutex mu;                                  /* serialises the opt-ins */
};
/* Let kernel func (of facts f) take smem bytes of dynamic shared memory
 * on device `ordinal`, the current one: cudaFuncSetAttribute(
 * MaxDynamicSharedMemorySize, smem) unless smem <= 48 KiB or the kernel
 * was already opted into as many bytes on that device (the opt-in only
 * grows, so a launch of any size opted into before stays allowed). The
 * runtime's error (nothing kept on failure). */
cudaError_t oj_cuda_kernel_smem(oj_cuda_kfacts *f, const void *func, int ordinal, size_t smem);
/* *blocks: blocks of `threads` threads of kernel func resident at once on
 * one multiprocessor of device `ordinal` (the current one) with smem bytes
 * of dynamic shared memory (cudaOccupancyMaxActiveBlocksPerMultiprocessor;
 * kept for the latest OJ_CUDA_KF_SLOTS (smem, threads) pairs a device).
 * Opt in (oj_cuda_kernel_smem) first: above 48 KiB the answer depends on
 * it. The runtime's error (nothing kept on failure, *blocks untouched). */
cudaError_t oj_cuda_kernel_occupancy(oj_cuda_kfacts *f, const void *func, int ordinal,
                                     int threads, size_t smem, int *blocks);

/* Make the engine's device current (and, when profiling, mark the start
 * of the entry's first kernel). OJ_ERR_DEVICE naming op on failure. */
oj_status oj_cuda_begin(oj_engine *eng, const char *op);
/* Record OJ_ERR_DEVICE for CUDA error e during `what`; returns it. */
oj_status oj_cuda_fail(oj_engine *eng, cudaError_t e, const char *what);
/* After a launch: the launch error (and with OJAS_CUDA_SYNC=1 the
 * kernel's own fault) as OJ_ERR_DEVICE naming the kernel. With
 * OJAS_CUDA_PROFILE=1 the device time since the previous mark (the begin
 * of the entry or the previous check) is charged to `kernel` (a string
 * literal or otherwise long-lived). */
oj_status oj_cuda_check(oj_engine *eng, const char *kernel);
/* Status words: oj_cuda_flags_reset points s->flags at nwords fresh words
 * set to `byte` (0x00 or 0xff in every byte) and returns; kernels write
 * s->flags; oj_cuda_flags_read copies them to the host (synchronising the
 * stream). Outside a capture the words are the engine's fixed buffer;
 * during a capture each reset takes new words of the graph, and
 * flags_read returns OJ_ERR_UNSUPPORTED: use oj_cuda_flags_defer. */
oj_status oj_cuda_flags_reset(oj_engine *eng, int nwords, int first_byte, int rest_byte,
                              const char *op);
oj_status oj_cuda_flags_read(oj_engine *eng, unsigned long long *host, int nwords,
                             const char *op);
/* During a capture: check the current status words after every replay
 * instead of now. kind: OJ_CUDA_CHECK_INDEX (word 0 = first bad position,
 * ~0 = none: index tensor at `idx` (dtype, limit V) named by op) or
 * OJ_CUDA_CHECK_TARGET (cross-entropy: word 0 first bad row, targets at
 * idx with V classes and ignore_index). The index tensor's device address
 * is kept: it must stay alive while the graph is replayed. */
enum { OJ_CUDA_CHECK_INDEX = 1, OJ_CUDA_CHECK_TARGET = 2 };
oj_status oj_cuda_flags_defer(oj_engine *eng, int kind, const char *op, const oj_tensor *idx,
                              int64_t V, int64_t ignore_index);
/* Copy `nbytes` at device address src to host dst (synchronous; refused
 * during a capture). */
oj_status oj_cuda_d2h(oj_engine *eng, void *dst, const void *src, size_t nbytes, const char *op);
/* The cuBLAS handle, created on first use; NULL with OJ_ERR_DEVICE recorded. */
cublasHandle_t oj_cuda_blas(oj_engine *eng, const char *op);

/* cuda_gemm_tune.cu: cuBLASLt's algorithm for one GEMM under FAST
 * numerics. The key names everything the choice depends on, in
 * cuBLASLt's column-major terms (D [m, n] = op(A) [m, k] op(B) [k, n]);
 * zero it (memset) before filling, it is compared bytewise. */
struct oj_cuda_gemm_key {
    int64_t m, n, k, lda, ldb, ldc, aux_ld; /* aux_ld 0: no aux */
    cublasOperation_t ta, tb;
    cudaDataType_t tab, tc;                 /* A and B's type; C and D's */
    cublasComputeType_t ct;
    cublasLtEpilogue_t epi;
    uint32_t align[4];                      /* A, B, C, D byte alignment */
    int ordinal;
    bool has_vec, beta1;                    /* a bias/bias-gradient vector; beta 1 */
};
/* Does the tuner time the algorithms of an [m, k] @ [k, n] product
 * (OJAS_CUDA_GEMM_TUNE, read at each call: unset or 1, products of at
 * least 2^32 FLOP; 2 all; 0 none)? */
bool oj_cuda_gemm_tune_wants(int64_t m, int64_t n, int64_t k);
/* The algorithm for md/la/lb/lc (C and D share lc) under pref into *algo:
 * when the tuner wants the shape, the cached one for key, else the fastest of the
 * heuristic's first 8 timed on the tuner's own stream and buffers (also
 * during a capture), then cached; with tuning off, or when the timing
 * fails, the heuristic's first. md's bias and aux pointers are swapped
 * for the tuner's during the timing and put back. false when the
 * heuristic offers no algorithm (nothing recorded). */
bool oj_cuda_gemm_algo(oj_engine *eng, cublasLtMatmulDesc_t md, cublasLtMatrixLayout_t la,
                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                       cublasLtMatmulPreference_t pref, const oj_cuda_gemm_key *key,
                       cublasLtMatmulAlgo_t *algo);
/* Make the tuner's stream and events now (outside any capture, with the
 * cuBLAS handle) unless OJAS_CUDA_GEMM_TUNE=0; a failure leaves tuning
 * off. */
void oj_cuda_gemm_tune_prepare(oj_cuda_state *s);
/* Free the tuner's timing buffers unless a capture is in progress (after
 * each tuning, and at the end of a capture, which keeps them). */
void oj_cuda_gemm_tune_trim(oj_cuda_state *s);
/* Free the tuner (close). */
void oj_cuda_gemm_tune_close(oj_cuda_state *s);

/* cuDNN attention (cuda_attention_cudnn.cu): create the handle now (at
 * graph_capture_begin of a capture that records gradients, so a captured
 * training step can build plans; a failure only keeps attention on the
 * tensor-core kernels, and is not retried); free the handle and plans
 * (close, after the engine's graphs are freed). */
oj_status oj_cuda_cudnn_prepare(oj_engine *eng);
void oj_cuda_cudnn_close(oj_cuda_state *s);
/* A cached cuDNN execution plan (cuda_attention_cudnn.cu). During a
 * capture, oj_cuda_graph_pin keeps plan from eviction until the graph
 * being captured is freed (its kernel nodes run the plan's kernels);
 * (oj_cuda_cudnn_pin counts it); graph free calls oj_cuda_cudnn_unpin
 * once per plan it pinned.
 * oj_cuda_graph_pin: OJ_ERR_CAPACITY recorded when out of host memory. */
struct oj_cuda_cudnn_plan;
oj_status oj_cuda_graph_pin(oj_engine *eng, struct oj_cuda_cudnn_plan *plan);
void oj_cuda_cudnn_pin(struct oj_cuda_cudnn_plan *plan);
void oj_cuda_cudnn_unpin(struct oj_cuda_cudnn_plan *plan);
/* backend.h attention_cudnn_cache: entries cached, entries pinned by
 * live graphs, whether the cuDNN handle exists. */
void oj_cuda_attention_cudnn_cache(oj_engine *eng, int64_t *plans, int64_t *pinned,
                                   bool *handle);

/* Is a capture in progress on eng? */
static inline bool oj_cuda_capturing(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    return s != NULL && s->capture != NULL;
}

/* Device scratch charged to the engine's budget: storage is returned in
 * *hold (release with oj__storage_release). NULL with OJ_ERR_CAPACITY
 * recorded. */
static inline void *oj_cuda_scratch(oj_engine *eng, size_t nbytes, const char *op,
                                    oj_storage **hold) {
    *hold = oj__storage_new(eng, nbytes ? nbytes : 1, op);
    return *hold ? (*hold)->data : NULL;
}

/* Is p 16-byte aligned (the vector loads' and cp.async's condition)? */
static inline __host__ __device__ bool oj_cu_aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* Address of element 0 of a device tensor. */
static inline char *oj_cuda_ptr(const oj_tensor *t) {
    return (char *)t->storage->data + t->offset;
}

/* Is t laid out row-major without gaps (size-1 dims ignored)? */
static inline bool oj_cuda_contig(const oj_tensor *t) {
    int64_t expect = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}
/* OJ_ERR_INTERNAL naming op and arg unless t (may be NULL) is contiguous:
 * the ops layer promised it; a violation is a bug, not a wrong result. */
oj_status oj_cuda_need_contig(oj_engine *eng, const oj_tensor *t, const char *op,
                              const char *arg);

static inline int64_t oj_cuda_numel(const oj_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

/* Launch geometry for n work items with grid-stride loops. */
#define OJ_CUDA_THREADS 256
static inline unsigned oj_cuda_blocks(int64_t n, int threads = OJ_CUDA_THREADS) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > (1 << 20)) b = 1 << 20;
    return (unsigned)b;
}

/* ---------------------------------------------------------------- dtypes
 * Loads and stores with the host's semantics (src/core/dtype.c): bf16/f16
 * round to nearest even with NaN kept quiet, float to integer truncates
 * (NaN -> 0, saturating at the int64 range, then wrapping), bool is != 0. */

__host__ __device__ static __forceinline__ uint32_t oj_cu_f32_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    return u;
#endif
}
__host__ __device__ static __forceinline__ float oj_cu_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    __builtin_memcpy(&x, &u, 4);
    return x;
#endif
}

__host__ __device__ static __forceinline__ uint16_t oj_cu_f32_to_bf16(float x) {
    uint32_t u = oj_cu_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
__host__ __device__ static __forceinline__ float oj_cu_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
    return oj_cu_bits_f32(u);
}
__host__ __device__ static __forceinline__ uint16_t oj_cu_f32_to_f16(float x) {
    uint32_t u = oj_cu_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);
    if (u >= 0x38800000u) {
        uint32_t odd = (u >> 13) & 1u;
        u += 0xc8000fffu + odd;
        return (uint16_t)(sign | (u >> 13));
    }
    uint32_t e = u >> 23;
    if (e < 102) return sign;
    uint32_t m = (u & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t q = m >> shift, r = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (r > half || (r == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}
__host__ __device__ static __forceinline__ float oj_cu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
        if (m) u |= 0x00400000u;
    } else if (e != 0) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else {
        int k = 0;
        while (!(m & 0x400u)) {
            m <<= 1;
            k++;
        }
        u = sign | ((uint32_t)(113 - k) << 23) | ((m & 0x3ffu) << 13);
    }
    return oj_cu_bits_f32(u);
}

/* Element of dtype dt at p as double (oj__load). */
__device__ static __forceinline__ double oj_cu_ld(const char *p, int dt) {
    switch (dt) {
    case OJ_F32: return (double)*(const float *)p;
    case OJ_F64: return *(const double *)p;
    case OJ_BF16: return (double)oj_cu_bf16_to_f32(*(const uint16_t *)p);
    case OJ_F16: return (double)oj_cu_f16_to_f32(*(const uint16_t *)p);
    case OJ_I64: return (double)*(const long long *)p;
    case OJ_I32: return (double)*(const int32_t *)p;
    case OJ_U32: return (double)*(const uint32_t *)p;
    case OJ_U16: return (double)*(const uint16_t *)p;
    case OJ_U8: return (double)*(const uint8_t *)p;
    case OJ_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return __longlong_as_double(0x7ff8000000000000ll);
    }
}

/* Float element as float (f32, bf16, f16; f64 rounded). */
__device__ static __forceinline__ float oj_cu_ldf(const char *p, int dt) {
    switch (dt) {
    case OJ_F32: return *(const float *)p;
    case OJ_BF16: return oj_cu_bf16_to_f32(*(const uint16_t *)p);
    case OJ_F16: return oj_cu_f16_to_f32(*(const uint16_t *)p);
    default: return (float)oj_cu_ld(p, dt);
    }
}

/* Integer store with wrap-around (oj__store_i64). */
__device__ static __forceinline__ void oj_cu_st_i64(char *p, int dt, long long v) {
    unsigned long long w = (unsigned long long)v;
    switch (dt) {
    case OJ_I64: *(long long *)p = v; break;
    case OJ_I32: *(int32_t *)p = (int32_t)(uint32_t)w; break;
    case OJ_U32: *(uint32_t *)p = (uint32_t)w; break;
    case OJ_U16: *(uint16_t *)p = (uint16_t)w; break;
    case OJ_U8: *(uint8_t *)p = (uint8_t)w; break;
    case OJ_BOOL: *(uint8_t *)p = v != 0; break;
    case OJ_F32: *(float *)p = (float)(double)v; break;
    case OJ_F64: *(double *)p = (double)v; break;
    case OJ_BF16: *(uint16_t *)p = oj_cu_f32_to_bf16((float)(double)v); break;
    case OJ_F16: *(uint16_t *)p = oj_cu_f32_to_f16((float)(double)v); break;
    default: break;
    }
}

/* Store double v as dtype dt (oj__store). */
__device__ static __forceinline__ void oj_cu_st(char *p, int dt, double v) {
    switch (dt) {
    case OJ_F32: *(float *)p = (float)v; break;
    case OJ_F64: *(double *)p = v; break;
    case OJ_BF16: *(uint16_t *)p = oj_cu_f32_to_bf16((float)v); break;
    case OJ_F16: *(uint16_t *)p = oj_cu_f32_to_f16((float)v); break;
    case OJ_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: {
        long long i;
        if (v != v) i = 0;
        else if (v >= 9223372036854775808.0) i = INT64_MAX;
        else if (v < -9223372036854775808.0) i = INT64_MIN;
        else i = (long long)v;
        oj_cu_st_i64(p, dt, i);
        break;
    }
    }
}

/* Store float v as a float dtype (f32, bf16, f16, f64). */
__device__ static __forceinline__ void oj_cu_stf(char *p, int dt, float v) {
    switch (dt) {
    case OJ_F32: *(float *)p = v; break;
    case OJ_BF16: *(uint16_t *)p = oj_cu_f32_to_bf16(v); break;
    case OJ_F16: *(uint16_t *)p = oj_cu_f32_to_f16(v); break;
    default: oj_cu_st(p, dt, (double)v); break;
    }
}

/* ---------------------------------------------------------------- typed f32 compute
 * The fast paths of the memory-bound kernels are templates over the
 * storage type (float, oj_cu_bf16, oj_cu_f16) and compute in float;
 * conversions are the bit-exact routines above. */
struct oj_cu_bf16 {
    uint16_t u;
};
struct oj_cu_f16 {
    uint16_t u;
};
__device__ static __forceinline__ float oj_cu_tof(float v) { return v; }
__device__ static __forceinline__ float oj_cu_tof(oj_cu_bf16 v) { return oj_cu_bf16_to_f32(v.u); }
__device__ static __forceinline__ float oj_cu_tof(oj_cu_f16 v) { return oj_cu_f16_to_f32(v.u); }
template <typename T> __device__ __forceinline__ T oj_cu_fromf(float v);
template <> __device__ __forceinline__ float oj_cu_fromf<float>(float v) { return v; }
template <> __device__ __forceinline__ oj_cu_bf16 oj_cu_fromf<oj_cu_bf16>(float v) {
    oj_cu_bf16 r;
    r.u = oj_cu_f32_to_bf16(v);
    return r;
}
template <> __device__ __forceinline__ oj_cu_f16 oj_cu_fromf<oj_cu_f16>(float v) {
    oj_cu_f16 r;
    r.u = oj_cu_f32_to_f16(v);
    return r;
}

/* N elements of T at p (aligned to N * sizeof(T) bytes, 2..16) as one
 * vector load / store. */
template <int B> struct oj_cu_raw;
template <> struct oj_cu_raw<16> { typedef uint4 t; };
template <> struct oj_cu_raw<8> { typedef uint2 t; };
template <> struct oj_cu_raw<4> { typedef unsigned t; };
template <> struct oj_cu_raw<2> { typedef unsigned short t; };
/* The vector forms convert 16-bit values with the hardware's cvt (one
 * instruction; the bit routines above cost 5-8 integer operations per
 * element, which made bf16 GELU compute-bound: 85 us for [16384, 3072] on
 * the H200), then redo the vector with the bit routines when any value is
 * NaN: the same bits in every case (cvt rounds to nearest even like them
 * but gives a canonical NaN, and keeps a signaling one). */
__device__ __forceinline__ float oj_cu_hw_tof(oj_cu_bf16 v) {
    return __uint_as_float((uint32_t)v.u << 16);
}
__device__ __forceinline__ float oj_cu_hw_tof(oj_cu_f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.u));
    return f;
}
__device__ __forceinline__ float oj_cu_hw_tof(float v) { return v; }
template <typename T> __device__ __forceinline__ T oj_cu_hw_fromf(float v);
template <> __device__ __forceinline__ float oj_cu_hw_fromf<float>(float v) { return v; }
template <> __device__ __forceinline__ oj_cu_bf16 oj_cu_hw_fromf<oj_cu_bf16>(float v) {
    oj_cu_bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.u) : "f"(v));
    return r;
}
template <> __device__ __forceinline__ oj_cu_f16 oj_cu_hw_fromf<oj_cu_f16>(float v) {
    oj_cu_f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.u) : "f"(v));
    return r;
}
/* The N elements of T packed in r (a raw vector as loaded: uint4, ...) as
 * floats by the hardware's conversion: every value exact, a NaN stays a
 * NaN (its payload and quiet bit as the hardware leaves them; oj_cu_ldv
 * gives the bit routines' NaNs). For kernels whose arithmetic consumes the
 * values (a NaN input gives a NaN result either way). */
template <typename T, int N, typename R> __device__ __forceinline__ void oj_cu_unpackv(R r, float *f) {
    union {
        R r;
        T e[N];
    } u;
    u.r = r;
#pragma unroll
    for (int k = 0; k < N; k++) f[k] = oj_cu_hw_tof(u.e[k]);
}
template <typename T, int N> __device__ __forceinline__ void oj_cu_ldv(const T *p, float *f) {
    typedef typename oj_cu_raw<(int)sizeof(T) * N>::t R;
    union {
        R r;
        T e[N];
    } u;
    u.r = *(const R *)p;
    oj_cu_unpackv<T, N>(u.r, f);
    bool nan = false;
#pragma unroll
    for (int k = 0; k < N; k++) nan |= f[k] != f[k];
    if (sizeof(T) == 2 && nan)
#pragma unroll
        for (int k = 0; k < N; k++) f[k] = oj_cu_tof(u.e[k]);
}
template <typename T, int N> __device__ __forceinline__ void oj_cu_stv(T *p, const float *f) {
    typedef typename oj_cu_raw<(int)sizeof(T) * N>::t R;
    union {
        R r;
        T e[N];
    } u;
    bool nan = false;
#pragma unroll
    for (int k = 0; k < N; k++) nan |= f[k] != f[k];
    if constexpr (sizeof(T) == 2 && N % 2 == 0) { /* two per cvt (bf16x2 / f16x2) */
#pragma unroll
        for (int k = 0; k < N; k += 2) {
            uint32_t w;
            if constexpr (std::is_same<T, oj_cu_bf16>::value)
                asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(f[k + 1]), "f"(f[k]));
            else
                asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(f[k + 1]), "f"(f[k]));
            u.e[k].u = (uint16_t)(w & 0xffffu);
            u.e[k + 1].u = (uint16_t)(w >> 16);
        }
    } else {
#pragma unroll
        for (int k = 0; k < N; k++) u.e[k] = oj_cu_hw_fromf<T>(f[k]);
    }
    if (sizeof(T) == 2 && nan)
#pragma unroll
        for (int k = 0; k < N; k++) u.e[k] = oj_cu_fromf<T>(f[k]);
    *(R *)p = u.r;
}

/* Run `body` with T the storage type of float dtype dt (f32, bf16, f16);
 * other dtypes run nothing. */
#define OJ_CU_FLOAT_TYPE(dt, T, ...)                                                         \
    do {                                                                                     \
        switch (dt) {                                                                        \
        case OJ_F32: { typedef float T; __VA_ARGS__; } break;                                \
        case OJ_BF16: { typedef oj_cu_bf16 T; __VA_ARGS__; } break;                          \
        case OJ_F16: { typedef oj_cu_f16 T; __VA_ARGS__; } break;                            \
        default: break;                                                                      \
        }                                                                                    \
    } while (0)

static inline bool oj_cu_is_f16ish(oj_dtype dt) {
    return dt == OJ_F32 || dt == OJ_BF16 || dt == OJ_F16;
}

/* Index value (i64 or i32) at p. */
__device__ static __forceinline__ long long oj_cu_ld_index(const char *p, int dt) {
    return dt == OJ_I32 ? (long long)*(const int32_t *)p : *(const long long *)p;
}

/* ---------------------------------------------------------------- strided iteration
 * Up to OJ_CU_ITER_MAX tensors walked over one shape (the first tensor's
 * for elementwise ops). Built on the host like the CPU's oj_iter: size-1
 * dims dropped, inputs of lower rank aligned right, adjacent dims merged
 * when every tensor steps through them as one run. Strides in bytes. */
#define OJ_CU_ITER_MAX 4
struct oj_cu_iter {
    int rank; /* >= 1 */
    int n;
    int64_t numel;
    int64_t shape[OJ_MAX_RANK];
    int64_t stride[OJ_CU_ITER_MAX][OJ_MAX_RANK];
    char *base[OJ_CU_ITER_MAX];
    int dt[OJ_CU_ITER_MAX];
};

void oj_cu_iter_init(oj_cu_iter *it, int rank, const int64_t *shape, int n,
                     const oj_tensor *const *t);

/* Byte offsets off[0..n) of flat element i. */
__device__ static __forceinline__ void oj_cu_iter_offsets(const oj_cu_iter &it, int64_t i,
                                                          int64_t *off) {
    for (int k = 0; k < OJ_CU_ITER_MAX; k++) off[k] = 0;
    if (it.rank == 1) {
        for (int k = 0; k < it.n; k++) off[k] = i * it.stride[k][0];
        return;
    }
    for (int d = it.rank - 1; d >= 0; d--) {
        int64_t s = it.shape[d];
        int64_t q = i / s, r = i - q * s;
        i = q;
        for (int k = 0; k < it.n; k++) off[k] += r * it.stride[k][d];
    }
}

/* A rank-<=8 strided view passed by value: element strides. */
struct oj_cu_view {
    char *p;
    int dt;
    int rank;
    int64_t shape[OJ_MAX_RANK];
    int64_t stride[OJ_MAX_RANK];
};
static inline oj_cu_view oj_cu_view_of(const oj_tensor *t) {
    oj_cu_view v;
    v.p = t ? oj_cuda_ptr(t) : NULL;
    v.dt = t ? (int)t->dtype : 0;
    v.rank = t ? t->rank : 0;
    for (int d = 0; d < OJ_MAX_RANK; d++) {
        v.shape[d] = t && d < t->rank ? t->shape[d] : 1;
        v.stride[d] = t && d < t->rank ? t->stride[d] : 0;
    }
    return v;
}

/* ---------------------------------------------------------------- Philox4x32-10 */
__device__ static __forceinline__ void oj_cu_philox(unsigned long long counter, uint32_t k0,
                                                    uint32_t k1, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* ---------------------------------------------------------------- warp/block sums */
__device__ static __forceinline__ double oj_cu_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ static __forceinline__ float oj_cu_warp_sumf(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32, <= 1024) in a fixed
 * tree order; every thread gets the result. sh: >= 32 doubles of shared
 * memory, reused after the call returns. */
__device__ static __forceinline__ double oj_cu_block_sum(double v, double *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = oj_cu_warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    double t = lane < nw ? sh[lane] : 0.0;
    return oj_cu_warp_sum(t);
}

/* Float sum of v over the TPR threads of a row: a warp (TPR 32, no block
 * synchronisation; warps independent) or the whole block (TPR ==
 * blockDim.x, a multiple of 32, <= 1024; every thread must call it). Xor
 * butterfly in each warp, then the warps' sums in warp order: a fixed
 * order, every thread gets the same bits. sh: >= 32 floats of shared
 * memory (block case). */
template <int TPR> __device__ static __forceinline__ float oj_cu_row_sumf(float v, float *sh) {
    v = oj_cu_warp_sumf(v);
    if (TPR == 32) return v;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads(); /* sh may still be read by the previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = lane < TPR / 32 ? sh[lane] : 0.0f;
    return oj_cu_warp_sumf(t);
}

/* oj_cu_warp_sum(f)'s result for a row held by a group of 32 / E lanes,
 * each lane holding the values of E "element-lanes" (l = j E + c: lane j
 * of the group, v[c]): the same xor butterfly over l (offsets 16 .. E
 * across the group's lanes, E/2 .. 1 inside a lane), so the same bits as a
 * warp whose lane l holds v. Groups are aligned runs of 32 / E lanes; every
 * lane of the warp must call it. v is clobbered; every lane of the group
 * gets the sum. For kernels that load a row of E-element vectors. */
template <int E, typename F> __device__ static __forceinline__ F oj_cu_lanes_sum(F *v) {
#pragma unroll
    for (int o = 16; o >= E; o >>= 1)
#pragma unroll
        for (int c = 0; c < E; c++) v[c] += __shfl_xor_sync(0xffffffffu, v[c], o / E);
#pragma unroll
    for (int o = E / 2; o >= 1; o >>= 1)
#pragma unroll
        for (int c = 0; c < o; c++) v[c] = v[c] + v[c + o];
    return v[0];
}

/* ---------------------------------------------------------------- entries (one file each family) */
/* cuda_elementwise.cu */
oj_status oj_cuda_copy(oj_engine *eng, oj_tensor *out, const oj_tensor *x);
oj_status oj_cuda_fill(oj_engine *eng, oj_tensor *out, double value);
oj_status oj_cuda_unary(oj_engine *eng, oj_unary_op op, oj_tensor *out, const oj_tensor *x,
                        double alpha, double beta);
oj_status oj_cuda_unary_backward(oj_engine *eng, oj_unary_op op, oj_tensor *dx,
                                 const oj_tensor *x, const oj_tensor *y, const oj_tensor *dy,
                                 double alpha, double beta);
oj_status oj_cuda_binary(oj_engine *eng, oj_binary_op op, oj_tensor *out, const oj_tensor *a,
                         const oj_tensor *b);
oj_status oj_cuda_where(oj_engine *eng, oj_tensor *out, const oj_tensor *cond, const oj_tensor *a,
                        const oj_tensor *b);
oj_status oj_cuda_rand(oj_engine *eng, oj_tensor *out, bool normal, double lo, double hi,
                       uint64_t seed, uint64_t offset);
/* cuda_reduce.cu */
oj_status oj_cuda_reduce(oj_engine *eng, oj_reduce_op op, oj_tensor *out, oj_tensor *idx,
                         const oj_tensor *x, uint32_t dim_mask, double p);
oj_status oj_cuda_cumsum(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                         bool reverse);
oj_status oj_cuda_col_sum(oj_engine *eng, oj_tensor *out, const oj_tensor *x);
/* cuda_matmul.cu */
oj_status oj_cuda_matmul(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                         bool accumulate);
oj_status oj_cuda_matmul_bias(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                              const oj_tensor *b, const oj_tensor *bias);
oj_status oj_cuda_matmul_act_backward(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                                      const oj_tensor *b, const oj_tensor *x, oj_unary_op op);
oj_status oj_cuda_matmul_bgrad(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                               const oj_tensor *b, oj_tensor *dbias);
oj_status oj_cuda_matmul_bias_act(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                                  const oj_tensor *b, const oj_tensor *bias, oj_tensor *pre,
                                  oj_unary_op op);
/* cuda_nn_embedding.cu */
oj_status oj_cuda_embedding_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *weight,
                                    const oj_tensor *idx);
oj_status oj_cuda_embedding_backward(oj_engine *eng, oj_tensor *dweight, const oj_tensor *dout,
                                     const oj_tensor *idx);
/* cuda_nn_norm.cu */
oj_status oj_cuda_layer_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *mean,
                                     oj_tensor *rstd, const oj_tensor *x, const oj_tensor *weight,
                                     const oj_tensor *bias, double eps);
oj_status oj_cuda_layer_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                      oj_tensor *dbias, const oj_tensor *dy, const oj_tensor *x,
                                      const oj_tensor *mean, const oj_tensor *rstd,
                                      const oj_tensor *weight);
oj_status oj_cuda_rms_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                   const oj_tensor *x, const oj_tensor *weight, double eps);
oj_status oj_cuda_rms_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                    const oj_tensor *dy, const oj_tensor *x, const oj_tensor *rstd,
                                    const oj_tensor *weight);
/* cuda_nn_softmax.cu */
oj_status oj_cuda_softmax_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                                  bool log);
oj_status oj_cuda_softmax_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *y,
                                   const oj_tensor *dy, int dim, bool log);
oj_status oj_cuda_cross_entropy_forward(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                        const oj_tensor *logits, const oj_tensor *targets,
                                        int64_t ignore_index, double label_smoothing,
                                        int64_t *n_valid);
oj_status oj_cuda_cross_entropy_backward(oj_engine *eng, oj_tensor *dlogits,
                                         const oj_tensor *logits, const oj_tensor *targets,
                                         const oj_tensor *lse, const oj_tensor *dloss,
                                         double scale, int64_t ignore_index,
                                         double label_smoothing);
oj_status oj_cuda_cross_entropy_fused(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                      oj_tensor *dlogits, const oj_tensor *logits,
                                      const oj_tensor *targets, const oj_tensor *dloss,
                                      double scale, int64_t ignore_index,
                                      double label_smoothing, int64_t *n_valid);
oj_status oj_cuda_nll_loss_forward(oj_engine *eng, oj_tensor *loss, const oj_tensor *logp,
                                   const oj_tensor *targets, int64_t ignore_index,
                                   int64_t *n_valid);
oj_status oj_cuda_nll_loss_backward(oj_engine *eng, oj_tensor *dlogp, const oj_tensor *targets,
                                    const oj_tensor *dloss, double scale, int64_t ignore_index);
/* cuda_nn_attention.cu */
oj_status oj_cuda_attention_forward(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                    const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                    const oj_tensor *mask, bool is_causal, double scale);
oj_status oj_cuda_attention_backward(oj_engine *eng, oj_tensor *dq, oj_tensor *dk, oj_tensor *dv,
                                     const oj_tensor *dout, const oj_tensor *q,
                                     const oj_tensor *k, const oj_tensor *v, const oj_tensor *out,
                                     const oj_tensor *lse, const oj_tensor *mask, bool is_causal,
                                     double scale);
/* cuda_graph.cu: capture, replay and the deferred checks */
oj_status oj_cuda_graph_begin(oj_engine *eng);
oj_status oj_cuda_graph_end(oj_engine *eng, void **graph);
void oj_cuda_graph_abort(oj_engine *eng);
oj_status oj_cuda_graph_replay(oj_engine *eng, void *graph);
oj_status oj_cuda_graph_launch(oj_engine *eng, void *graph);
oj_status oj_cuda_graph_checks(oj_engine *eng, void *graph);
oj_status oj_cuda_graph_checks_defer(oj_engine *eng, void *graph);
bool oj_cuda_graph_checks_clean(oj_engine *eng, void *graph);
void oj_cuda_graph_destroy(oj_engine *eng, void *graph);
/* cuda_memory.cu: read-backs that do not wait (backend.h read_defer) */
oj_status oj_cuda_read_defer(oj_engine *eng, void *dst, const void *src, size_t nbytes);
oj_status oj_cuda_read_wait(oj_engine *eng);
void oj_cuda_read_close(oj_cuda_state *s);
/* nwords fresh status words of the graph being captured (NULL with
 * OJ_ERR_CAPACITY recorded when its region is full). */
unsigned long long *oj_cuda_graph_flags(oj_engine *eng, int nwords, const char *op);
/* The error an out-of-range index (kind OJ_CUDA_CHECK_INDEX) or target
 * (OJ_CUDA_CHECK_TARGET) at position pos of the index tensor at device
 * address idx (dtype idt) is reported with; reads the value back. */
oj_status oj_cuda_bad_index(oj_engine *eng, int kind, const char *op, const char *idx, int idt,
                            unsigned long long pos, int64_t V, int64_t ignore_index);
/* cuda_nn_misc.cu */
oj_status oj_cuda_rotary_embedding(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   int64_t position_offset, double theta, bool inverse);
oj_status oj_cuda_rotary_embedding_at(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                      const oj_tensor *positions, double theta, bool inverse);
oj_status oj_cuda_dropout(oj_engine *eng, oj_tensor *out, const oj_tensor *x, double p,
                          uint64_t seed, uint64_t offset);
/* cuda_nn_norm_rotary.cu; oj_cuda_rnr_close frees the engine's tables (close) */
void oj_cuda_rnr_close(oj_cuda_state *s);
oj_status oj_cuda_rms_norm_rotary_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                          const oj_tensor *x, const oj_tensor *weight, double eps,
                                          int64_t position_offset, double theta);
oj_status oj_cuda_rms_norm_rotary_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *dy,
                                           const oj_tensor *x, const oj_tensor *rstd,
                                           const oj_tensor *weight, int64_t position_offset,
                                           double theta);
/* cuda_index.cu */
oj_status oj_cuda_gather(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                         const oj_tensor *index);
oj_status oj_cuda_scatter_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                              const oj_tensor *src);
oj_status oj_cuda_index_select(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                               const oj_tensor *index);
oj_status oj_cuda_index_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                            const oj_tensor *src, double alpha);
oj_status oj_cuda_index_copy(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                             const oj_tensor *src);
/* cuda_conv.cu */
oj_status oj_cuda_im2col(oj_engine *eng, oj_tensor *cols, const oj_tensor *x,
                         const oj_im2col_args *a, double pad_value);
oj_status oj_cuda_col2im(oj_engine *eng, oj_tensor *x, const oj_tensor *cols,
                         const oj_im2col_args *a);
/* cuda_optim.cu */
oj_status oj_cuda_adam_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                            oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                            bool check_only);
oj_status oj_cuda_sgd_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                           oj_tensor *momentum_buf, const oj_sgd_args *args, bool check_only);
oj_status oj_cuda_muon_momentum(oj_engine *eng, oj_tensor *buf, const oj_tensor *grad,
                                oj_tensor *update, double momentum, bool nesterov);
oj_status oj_cuda_apply_update(oj_engine *eng, oj_tensor *param, const oj_tensor *update,
                               double alpha, double scale, double decay, bool check_only);
oj_status oj_cuda_sum_squares(oj_engine *eng, const oj_tensor *x, double *out);

/* Memory entries (cuda_memory.cu). */
oj_status oj_cuda_open(oj_engine *eng, int index, oj_error *err);
void oj_cuda_close(oj_engine *eng);
oj_status oj_cuda_memory_info(oj_engine *eng, int64_t *free_bytes, int64_t *total_bytes);
void *oj_cuda_alloc(oj_engine *eng, size_t nbytes);
void oj_cuda_free(oj_engine *eng, void *ptr, size_t nbytes);
oj_status oj_cuda_copy_h2d(oj_engine *eng, void *dst, const void *src, size_t nbytes);
oj_status oj_cuda_copy_d2h(oj_engine *eng, void *dst, const void *src, size_t nbytes);
oj_status oj_cuda_copy_d2d(oj_engine *eng, void *dst, const void *src, size_t nbytes);
oj_status oj_cuda_memset0(oj_engine *eng, void *dst, size_t nbytes);
oj_status oj_cuda_synchronize(oj_engine *eng);

/* Virtual memory entries for graph pools (cuda_vmm.cu; backend.h). */
size_t oj_cuda_vm_granularity(oj_engine *eng);
void *oj_cuda_vm_reserve(oj_engine *eng, size_t bytes);
bool oj_cuda_vm_map(oj_engine *eng, void *base, size_t off, size_t bytes);
void oj_cuda_vm_unmap(oj_engine *eng, void *base, size_t off, size_t bytes);
void oj_cuda_vm_release(oj_engine *eng, void *base, size_t bytes);

#endif /* OJAS_CUDA_INTERNAL_CUH */
