/* ojas core: status codes, engine, memory budget, dtypes, devices, tensors,
 * creation, scopes and the counter-based RNG.
 *
 * Legend for shapes in comments: B batch, T time, C channels, H heads,
 * D head dim, V vocabulary, N rows.
 *
 * Error style ("sticky error", as in cairo and the CUDA runtime): functions
 * that produce a tensor return NULL on failure and record the status and a
 * message on the engine; the first error recorded stays until
 * oj_clear_error(). Every function given a NULL tensor returns NULL (or an
 * error status) at once without recording a second error, so compositions
 * stay readable and the first cause is the one reported. Nothing in the
 * library calls abort() or exit() on user error. */
#ifndef OJAS_CORE_H
#define OJAS_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OJ_VERSION_MAJOR 0
#define OJ_VERSION_MINOR 1
#define OJ_VERSION_PATCH 0
#define OJ_VERSION_STRING "0.1.0"

/* Highest tensor rank. */
#define OJ_MAX_RANK 8

/* ---------------------------------------------------------------- status */

/* Result codes. New members are appended at the end (ABI). */
typedef enum oj_status {
    OJ_OK = 0,
    OJ_ERR_INVALID_ARGUMENT = 1, /* NULL handle, bad flag, released tensor */
    OJ_ERR_SHAPE = 2,            /* shapes do not fit together */
    OJ_ERR_DTYPE = 3,            /* dtype not accepted or mismatched */
    OJ_ERR_DEVICE = 4,           /* device cannot be opened, mixed devices, device fault */
    OJ_ERR_CAPACITY = 5,         /* memory budget exceeded or allocation failed */
    OJ_ERR_OUT_OF_RANGE = 6,     /* index/dim out of range, arithmetic overflow */
    OJ_ERR_IO = 7,               /* read/write/open failure */
    OJ_ERR_CORRUPT = 8,          /* malformed file or data */
    OJ_ERR_UNSUPPORTED = 9,      /* valid request this build cannot do */
    OJ_ERR_NUMERIC = 10,         /* NaN/Inf where finiteness is required */
    OJ_ERR_INTERNAL = 11,        /* broken invariant (a bug in ojas) */
    OJ_ERR_STATE = 12,           /* call not valid in the current state */
} oj_status;

/* Stable upper-case name of a status, e.g. "OJ_ERR_SHAPE". Never NULL. */
const char *oj_status_name(oj_status st);

/* An error report for functions that run without an engine (engine
 * creation, tokenizers, file readers): a status and a message naming what
 * was wrong. Zero-initialise before use ({0} is "no error"). */
typedef struct oj_error {
    oj_status status;
    char message[512];
} oj_error;

/* Record st and a printf-style message in e (ignored if e is NULL or
 * already holds an error). Returns st. */
oj_status oj_error_set(oj_error *e, oj_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---------------------------------------------------------------- dtypes */

typedef enum oj_dtype {
    OJ_F32 = 0,
    OJ_F64 = 1,
    OJ_BF16 = 2,
    OJ_F16 = 3,
    OJ_I64 = 4,
    OJ_I32 = 5,
    OJ_U32 = 6,
    OJ_U16 = 7,
    OJ_U8 = 8,
    OJ_BOOL = 9,
    OJ_DTYPE_COUNT
} oj_dtype;

/* Bytes per element; 0 for an invalid dtype. */
size_t oj_dtype_size(oj_dtype dt);
/* Lower-case name ("f32", "bf16", ...); "invalid" for an invalid dtype. */
const char *oj_dtype_name(oj_dtype dt);
/* True for f32, f64, bf16, f16. */
bool oj_dtype_is_float(oj_dtype dt);
bool oj_dtype_valid(oj_dtype dt);

/* Scalar conversions, round-to-nearest-even. NaN stays NaN (quiet),
 * infinities and signed zeros are preserved; overflow rounds to infinity. */
uint16_t oj_f32_to_bf16(float x);
float oj_bf16_to_f32(uint16_t h);
uint16_t oj_f32_to_f16(float x);
float oj_f16_to_f32(uint16_t h);

/* ---------------------------------------------------------------- devices */

typedef enum oj_device_type { OJ_DEVICE_CPU = 0, OJ_DEVICE_CUDA = 1 } oj_device_type;

typedef struct oj_device {
    oj_device_type type;
    int index; /* CUDA ordinal; 0 on CPU */
} oj_device;

/* "cpu", "cuda" (ordinal 0) or "cuda:N" (N in 0..1024, decimal) into *d;
 * false for anything else (d unchanged), as torch.device's strings. */
bool oj_device_parse(const char *s, oj_device *d);
/* The inverse: "cpu", "cuda" (ordinal 0), "cuda:N" into buf of len bytes. */
void oj_device_name(oj_device d, char *buf, size_t len);

typedef enum oj_numerics {
    /* any summation order, library GEMM allowed; on the CPU, subnormal
     * values are flushed to zero inside kernels (docs/architecture.md) */
    OJ_NUMERICS_FAST = 0,
    OJ_NUMERICS_EXACT = 1, /* fixed order: bit-identical across thread counts and runs */
} oj_numerics;

/* ---------------------------------------------------------------- budget */

/* A hierarchical byte budget. A reservation counts against the budget and
 * every ancestor; if any of them would exceed its limit the reservation
 * fails with OJ_ERR_CAPACITY and nothing changes. Thread-safe: all budgets
 * of one tree share the root's lock. */
typedef struct oj_budget oj_budget;

/* Unlimited budget limit. */
#define OJ_UNLIMITED INT64_MAX

/* Create a budget named `name` (copied) with `limit` bytes (OJ_UNLIMITED for
 * none) under `parent` (NULL for a root). Returns NULL when out of host
 * memory or limit < 0. The caller frees it with oj_budget_free after every
 * child is freed and its current bytes are back to 0. */
oj_budget *oj_budget_create(oj_budget *parent, const char *name, int64_t limit);
/* Free a budget. Returns OJ_ERR_STATE (and frees nothing) while it has
 * children or reserved bytes. NULL is a no-op returning OJ_OK. */
oj_status oj_budget_free(oj_budget *b);
/* Reserve `bytes` (>= 0). OJ_ERR_CAPACITY if this budget or an ancestor
 * would exceed its limit; OJ_ERR_INVALID_ARGUMENT for NULL or bytes < 0. */
oj_status oj_budget_reserve(oj_budget *b, int64_t bytes);
/* Return `bytes` reserved earlier. OJ_ERR_STATE if more than reserved. */
oj_status oj_budget_release(oj_budget *b, int64_t bytes);
/* Change the limit. OJ_ERR_CAPACITY (unchanged) if below current bytes. */
oj_status oj_budget_set_limit(oj_budget *b, int64_t limit);
int64_t oj_budget_limit(const oj_budget *b);
int64_t oj_budget_current(const oj_budget *b);
int64_t oj_budget_peak(const oj_budget *b);
/* Set peak to current. */
void oj_budget_reset_peak(oj_budget *b);
const char *oj_budget_name(const oj_budget *b);
oj_budget *oj_budget_parent(const oj_budget *b);

/* The process memory ceiling: one budget of `bytes` over every CPU
 * engine's root budget in the process (those of models, trainers and
 * plain engines alike), so that several engines together cannot take more
 * host memory than this. Each reservation on a CPU engine's budget tree is
 * also charged to the ceiling; one that would exceed it fails with
 * OJ_ERR_CAPACITY naming the budget "process memory ceiling". An engine
 * opened while a ceiling is set has its root budget limit lowered to the
 * ceiling when above it. CUDA engines' budgets (device memory) are not
 * charged. bytes 0 removes the ceiling. Errors: OJ_ERR_STATE while any
 * engine is open (oj_engines_open() > 0; set it before opening engines),
 * OJ_ERR_INVALID_ARGUMENT for bytes < 0 or above oj_host_memory_bytes(),
 * OJ_ERR_CAPACITY out of host memory. Thread-safe. */
oj_status oj_set_memory_ceiling(int64_t bytes, oj_error *err);
/* The ceiling's limit in bytes, 0 when none is set. */
int64_t oj_memory_ceiling(void);
/* Bytes reserved on the ceiling now (0 when none is set). */
int64_t oj_memory_ceiling_current(void);
/* Engines open in this process (CPU and CUDA). */
int64_t oj_engines_open(void);
/* Bytes of host memory this process may use: physical memory capped by
 * the cgroup v2 memory.max and v1 memory.limit_in_bytes of its cgroups and
 * their ancestors; 0 when unknown. */
int64_t oj_host_memory_bytes(void);

/* ---------------------------------------------------------------- engine */

/* All state that would otherwise be global: device, numerics, threads, seed,
 * root budget, grad mode, tape, scopes, last error. Engines share nothing.
 * An engine is used from one thread at a time. */
typedef struct oj_engine oj_engine;

typedef struct oj_engine_config {
    oj_device device;     /* default CPU */
    oj_numerics numerics; /* default FAST */
    int threads;          /* 0: the usable CPUs (cgroup quota respected) */
    uint64_t seed;        /* RNG seed; default 0 */
    int64_t budget_bytes; /* root budget limit; 0 (default): what the machine can
                           * give, less a margin (see oj_engine_create);
                           * OJ_UNLIMITED: no limit */
} oj_engine_config;

/* A config with the defaults above. */
oj_engine_config oj_engine_config_default(void);

/* Open an engine (cfg NULL: defaults). With budget_bytes 0 the root budget
 * is what the machine can give at creation, less 10% (at least 64 MiB, at
 * most 2 GiB) for what the budget does not see: on the CPU, physical memory
 * capped by the process's cgroup v2 memory.max and v1
 * memory.limit_in_bytes (and its parents'); on a GPU, the device's free
 * memory. So an allocation the machine cannot hold fails at once with
 * OJ_ERR_CAPACITY instead of swapping or being killed; read the limit
 * with oj_budget_limit(oj_engine_budget(eng)). On success *out owns a new engine
 * (free with oj_engine_free). On failure *out is NULL, `err` (may be NULL)
 * holds the message and the status is returned: OJ_ERR_DEVICE when the
 * device cannot be opened (never a fallback to another device),
 * OJ_ERR_INVALID_ARGUMENT for a bad config, OJ_ERR_CAPACITY out of memory. */
oj_status oj_engine_create(const oj_engine_config *cfg, oj_engine **out, oj_error *err);
/* Free the engine and everything it still owns (tensors of open scopes,
 * tape, pools). Tensors outside any scope should be released before (check
 * oj_engine_live_tensors() to find leaks); those left over are freed too.
 * Budgets created under the root budget must be freed before. NULL is a
 * no-op. */
void oj_engine_free(oj_engine *eng);

oj_device oj_engine_device(const oj_engine *eng);
oj_numerics oj_engine_numerics(const oj_engine *eng);
void oj_engine_set_numerics(oj_engine *eng, oj_numerics n);
int oj_engine_threads(const oj_engine *eng);
uint64_t oj_engine_seed(const oj_engine *eng);
/* The root budget; owned by the engine. */
oj_budget *oj_engine_budget(oj_engine *eng);
/* Budget that new storage is charged to (default: root; NULL selects the
 * root again). Returns the previous one. `b` must belong to this engine's
 * tree (else OJ_ERR_INVALID_ARGUMENT, unchanged); it is not owned. */
oj_budget *oj_engine_use_budget(oj_engine *eng, oj_budget *b);
/* Bytes held in the engine's host storage pool (free blocks kept for
 * reuse; they stay reserved on the root budget). */
int64_t oj_engine_pooled_bytes(const oj_engine *eng);
/* Bytes of the storage that live tensors hold (capacities, pooled free
 * blocks excluded; torch.cuda.memory_allocated) and its peak since the
 * engine was created (max_memory_allocated). oj_budget_peak of the root
 * budget also counts the pool's free blocks (like max_memory_reserved). */
int64_t oj_engine_memory_allocated(const oj_engine *eng);
int64_t oj_engine_max_memory_allocated(const oj_engine *eng);
/* Return pooled storage to the system (and its bytes to the budget). */
void oj_engine_trim_pool(oj_engine *eng);
/* Wait until every operation queued on the engine's device has finished
 * (torch.cuda.synchronize). A no-op on the CPU. Returns OJ_ERR_DEVICE
 * naming the CUDA error when an earlier asynchronous kernel failed. */
oj_status oj_engine_synchronize(oj_engine *eng);
/* Live tensor handles (all scopes and unscoped). */
int64_t oj_engine_live_tensors(const oj_engine *eng);

/* ---- CUDA graphs (torch.cuda.CUDAGraph: capture_begin, capture_end,
 * replay). Between oj_graph_capture_begin and oj_graph_capture_end every
 * op still runs its host side (checks, autograd recording, allocation),
 * but its device work is recorded instead of executed; oj_graph_replay
 * then runs the recorded work with one launch, at a fraction of the host
 * cost. Memory allocated during the capture comes from the graph's
 * private pool and is never used by anything else while the graph lives,
 * so tensors created during the capture (outputs, gradients) are the
 * graph's static outputs: every replay rewrites them in place. Inputs are
 * static too: to change them, write new values into the same tensors
 * (oj_copy_from_host, oj_copy_) before a replay. Tensors the graph reads
 * must stay alive while it is replayed. A tensor created before the
 * capture that the graph writes in place (oj_copy_, oj_fill_, ...) has
 * its version moved by every replay, as by the eager write; the graph
 * keeps its storage alive until oj_graph_free.
 * During a capture, anything that reads a value back to the host (oj_item,
 * oj_to_host, gradient norms, oj_engine_synchronize), uploads host memory
 * or draws random numbers fails with OJ_ERR_UNSUPPORTED naming it; index
 * and target range checks are deferred to each replay (a bad index fails
 * the replay with the eager op's message). Only CUDA engines capture (else
 * OJ_ERR_UNSUPPORTED). Errors: OJ_ERR_INVALID_ARGUMENT (capture already
 * running / none running), OJ_ERR_DEVICE (the driver refused). */
typedef struct oj_graph oj_graph;
oj_status oj_graph_capture_begin(oj_engine *eng);
/* Ends the capture: the instantiated graph (owned by the caller; free with
 * oj_graph_free), or NULL with the error recorded (the capture is then
 * abandoned; nothing was executed). An error recorded by any op during
 * the capture also abandons it, even when oj_clear_error cleared it before
 * the end (then OJ_ERR_STATE is recorded: the failed op is not in the
 * graph). */
oj_graph *oj_graph_capture_end(oj_engine *eng);
/* Run the graph on the engine's stream. Asynchronous unless the graph has
 * deferred index checks, which read back its status words once.
 * OJ_ERR_OUT_OF_RANGE from a check, OJ_ERR_DEVICE from the driver. */
oj_status oj_graph_replay(oj_graph *g);
/* Free the graph (waits for its replays) and its private pool; storage of
 * the pool still held by live tensors is freed when they are released.
 * NULL is a no-op. oj_engine_free frees the graphs still alive (as it does
 * tensors), so a graph must not be freed after its engine. */
void oj_graph_free(oj_graph *g);
/* Is a capture in progress on eng? */
bool oj_graph_capturing(const oj_engine *eng);

/* Autocast (torch.autocast), default off. While on with dtype dt (OJ_BF16
 * or OJ_F16): matmul, bmm, linear, addmm, conv1d, conv2d and
 * scaled_dot_product_attention cast floating inputs of another dtype to dt
 * and compute in dt (f32 accumulation in the GEMMs); layer_norm, rms_norm,
 * softmax, log_softmax and the losses cast bf16/f16 inputs to f32 and
 * compute in f32; every other op follows type promotion. The casts are ops
 * on the tape, so f32 parameters get f32 gradients: mixed-precision
 * training with f32 master weights (Micikevicius et al. 2018, "Mixed
 * Precision Training"). oj_backward runs with autocast off. Returns the
 * previous on/off state; a dt other than OJ_BF16/OJ_F16 with enabled true
 * records OJ_ERR_DTYPE and changes nothing. */
bool oj_set_autocast(oj_engine *eng, bool enabled, oj_dtype dt);
bool oj_autocast_enabled(const oj_engine *eng);
/* The dtype autocast computes in (OJ_BF16 unless set otherwise). */
oj_dtype oj_autocast_dtype(const oj_engine *eng);

/* Detect-anomaly mode (torch.autograd.set_detect_anomaly), default off, or
 * on from engine creation when the environment has OJAS_DETECT_ANOMALY=1.
 * While on, the outputs of every recorded op (one with an input that
 * requires grad) and every gradient the backward computes are checked; the
 * first NaN or inf records OJ_ERR_NUMERIC naming the op, e.g.
 * "detect_anomaly: the output 0 of log [3] holds a non-finite value
 * (NaN)". A debugging mode: each check costs a reduction and, on a device,
 * a synchronisation. Returns the previous value. */
bool oj_set_detect_anomaly(oj_engine *eng, bool enabled);
bool oj_detect_anomaly_enabled(const oj_engine *eng);

/* Grad mode (default on). Returns the previous value. */
bool oj_set_grad_enabled(oj_engine *eng, bool enabled);
bool oj_grad_enabled(const oj_engine *eng);

/* ---------------------------------------------------------------- errors */

/* Status of the first error recorded since the last clear (OJ_OK if none). */
oj_status oj_last_status(const oj_engine *eng);
/* Its message, e.g. "matmul: shapes [2, 3] and [4, 5] do not fit: inner
 * dims 3 != 4". "" when none. Owned by the engine, valid until cleared. */
const char *oj_last_error(const oj_engine *eng);
void oj_clear_error(oj_engine *eng);
/* Record an error (ignored if one is already recorded). Returns `st`.
 * For use by every layer above core and by user extensions. */
oj_status oj_set_error(oj_engine *eng, oj_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
oj_status oj_set_errorv(oj_engine *eng, oj_status st, const char *fmt, va_list ap);

/* ---------------------------------------------------------------- tensors */

/* A tensor handle: shape (rank 0..8, int64), element strides, byte offset
 * into refcounted storage, dtype, device, autograd fields. A handle is owned
 * by the scope that was current when it was created (or by the caller when
 * no scope is open) and is released by oj_scope_end or oj_release. */
typedef struct oj_tensor oj_tensor;

/* Add a reference; returns t. Each retain needs one oj_release. */
oj_tensor *oj_retain(oj_tensor *t);
/* Drop a reference; the handle is freed at zero. NULL is a no-op. Releasing
 * a handle still listed in a scope removes it from the scope (the scope
 * holds the creation reference). A released handle stays detectable for a
 * while (the last 4096 are quarantined): using it records
 * OJ_ERR_INVALID_ARGUMENT instead of crashing. */
void oj_release(oj_tensor *t);

/* Accessors. On a NULL or released tensor they return 0 / -1 / NULL. */
oj_engine *oj_tensor_engine(const oj_tensor *t);
int oj_rank(const oj_tensor *t);
/* Size of dim d; negative d counts from the end. -1 if out of range. */
int64_t oj_size(const oj_tensor *t, int d);
/* Pointer to the OJ_MAX_RANK-long shape array (first rank entries valid). */
const int64_t *oj_shape(const oj_tensor *t);
/* Strides in elements. */
const int64_t *oj_strides(const oj_tensor *t);
int64_t oj_numel(const oj_tensor *t);
oj_dtype oj_tensor_dtype(const oj_tensor *t);
oj_device oj_tensor_device(const oj_tensor *t);
/* Byte offset of element 0 in the storage. */
int64_t oj_offset_bytes(const oj_tensor *t);
bool oj_is_contiguous(const oj_tensor *t);
/* Host pointer to element 0 (CPU tensors only; NULL otherwise). Writing
 * through it bumps no version counter (call oj_bump_version after for
 * autograd's in-place check), so it marks t's storage exported for good:
 * kept weight copies of it are made again before each use and the
 * optimizer's proven check (OJAS_CUDA_ADAMW1) is off for it. */
void *oj_data_ptr(oj_tensor *t);
/* Address of element 0 in the memory of t's device (a host pointer on the
 * CPU, a device pointer on CUDA), for zero-copy exchange (DLPack); NULL
 * for a NULL or released t. Marks t's storage exported as oj_data_ptr
 * does. */
void *oj_device_data_ptr(oj_tensor *t);
/* Storage version counter (incremented by in-place writes). */
uint64_t oj_version(const oj_tensor *t);
void oj_bump_version(oj_tensor *t);
/* True if a and b share storage. */
bool oj_shares_storage(const oj_tensor *a, const oj_tensor *b);
/* "[2, 3, 4]" into buf; returns buf. */
char *oj_shape_str(const oj_tensor *t, char *buf, size_t len);

/* t.data = src (PyTorch's `param.data = x`): the leaf t takes src's
 * storage (shared, retained), offset, dtype, shape and strides; the handle
 * t stays valid, so whatever holds it (a model, an optimizer) sees the new
 * data. Used for model.to(dtype)-style conversion (oj_params_to_dtype).
 * A gradient of another dtype or shape is dropped. Errors (t unchanged):
 * OJ_ERR_STATE when t is not a leaf, is saved by a recorded autograd node,
 * or the engine holds captured CUDA graphs (they read storage by address)
 * or is capturing; OJ_ERR_INVALID_ARGUMENT (OJ_ERR_DEVICE: on another
 * device) for another engine's src; OJ_ERR_DTYPE
 * for a non-float src when t requires grad. An optimizer's state is not
 * converted: create optimizers after the conversion. */
oj_status oj_set_data(oj_tensor *t, oj_tensor *src);
/* requires_grad on a leaf (float dtypes only: OJ_ERR_DTYPE otherwise).
 * Returns t or NULL. */
oj_tensor *oj_set_requires_grad(oj_tensor *t, bool requires_grad);
bool oj_requires_grad(const oj_tensor *t);
/* Accumulated gradient of a leaf (NULL if none). Borrowed: owned by t. */
oj_tensor *oj_grad(const oj_tensor *t);
/* Drop t's gradient. */
void oj_zero_grad(oj_tensor *t);

/* Overflow-checked element count of a shape; OJ_ERR_OUT_OF_RANGE when it
 * or its byte size (for `dt`) overflows int64, OJ_ERR_SHAPE for rank > 8 or
 * a negative dim. Records nothing on an engine. */
oj_status oj_shape_numel(int rank, const int64_t *shape, oj_dtype dt, int64_t *numel);

/* ---------------------------------------------------------------- creation
 * Each returns a new contiguous tensor on the engine's device, charged to
 * the engine's current budget and owned by the current scope, or NULL with
 * OJ_ERR_SHAPE (rank > 8, negative dim), OJ_ERR_OUT_OF_RANGE (overflow),
 * OJ_ERR_DTYPE or OJ_ERR_CAPACITY recorded. */

/* Uninitialised contents. shape: `rank` dims. */
oj_tensor *oj_empty(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt);
oj_tensor *oj_zeros(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt);
oj_tensor *oj_ones(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt);
/* Every element = value converted to dt. */
oj_tensor *oj_full(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt, double value);
/* A rank-0 tensor holding value. */
oj_tensor *oj_scalar(oj_engine *eng, double value, oj_dtype dt);
/* [n] with start, start+step, ... (n = ceil((end-start)/step)); step != 0. */
oj_tensor *oj_arange(oj_engine *eng, double start, double end, double step, oj_dtype dt);
/* [steps] evenly from start to end inclusive (steps >= 0). */
oj_tensor *oj_linspace(oj_engine *eng, double start, double end, int64_t steps, oj_dtype dt);
/* [n, m] identity. */
oj_tensor *oj_eye(oj_engine *eng, int64_t n, int64_t m, oj_dtype dt);
/* Copy `nbytes` of host data (row-major, dtype dt) into a new tensor on the
 * engine's device. nbytes must equal numel * dtype size (OJ_ERR_SHAPE). */
oj_tensor *oj_from_host(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                        const void *data, size_t nbytes);
/* A tensor over memory that ojas does not own (torch.from_blob; how
 * DLPack imports share memory): `data` is element 0, in the memory of the
 * engine's device (host on the CPU, device memory on CUDA), `rank` dims
 * `shape`, `strides` in elements (>= 0; NULL: contiguous), dtype dt. The
 * memory is neither copied, charged to a budget nor pooled; it must stay
 * valid until release(ctx) (may be NULL) is called, once, when the last
 * handle viewing it is released; its storage is exported (see
 * oj_data_ptr: its owner writes it unseen). Owned by the current scope. NULL with
 * OJ_ERR_SHAPE (bad rank or dim), OJ_ERR_INVALID_ARGUMENT (NULL data for
 * a non-empty shape, a negative stride), OJ_ERR_DTYPE or OJ_ERR_CAPACITY
 * recorded; on failure release is not called (the caller keeps the
 * memory). */
oj_tensor *oj_from_external(oj_engine *eng, void *data, int rank, const int64_t *shape,
                            const int64_t *strides, oj_dtype dt, void (*release)(void *),
                            void *ctx);
/* Copy t (any strides, any device) row-major into host memory `dst` of
 * `nbytes` (must equal numel * dtype size). */
oj_status oj_to_host(oj_tensor *t, void *dst, size_t nbytes);
/* Overwrite contiguous t (any device) with `nbytes` of host data (row-major,
 * t's dtype; nbytes must equal numel * dtype size, else OJ_ERR_SHAPE; a
 * non-contiguous t is OJ_ERR_INVALID_ARGUMENT). In place: t's storage and
 * address stay (how new inputs reach a captured graph). src may be freed
 * on return. Bumps t's version. */
oj_status oj_copy_from_host(oj_tensor *t, const void *src, size_t nbytes);
/* The explicit copy between devices: a new contiguous tensor with t's
 * shape, dtype and values on `dst`'s device, owned by dst's current scope
 * and charged to dst's budget (t may belong to another engine; it is
 * staged through host memory). Counted in the engines' transfer counters
 * (oj_engine_transfers). Not recorded by autograd (the result is a leaf).
 * NULL with the error recorded on dst. */
oj_tensor *oj_to_device(oj_tensor *t, oj_engine *dst);
/* Explicit host<->device transfers so far (from_host, to_host, to_device
 * staging). */
void oj_engine_transfers(const oj_engine *eng, int64_t *h2d, int64_t *d2h);
/* Element i (row-major flat index over t's shape) as double; NaN (and
 * OJ_ERR_OUT_OF_RANGE) when i is outside [0, numel). */
double oj_item_at(oj_tensor *t, int64_t i);
/* Value of a one-element tensor as double; NaN (and an error) otherwise. */
double oj_item(oj_tensor *t);

/* New contiguous copy (same dtype/device), owned by the current scope.
 * Recorded by autograd as torch's clone: the gradient passes through
 * unchanged. NULL with the error recorded (OJ_ERR_CAPACITY). */
oj_tensor *oj_clone(oj_tensor *t);
/* A new handle sharing t's storage if t is contiguous, else a contiguous
 * copy (oj_shares_storage tells which); recorded by autograd as torch's
 * contiguous (the gradient passes through unchanged). */
oj_tensor *oj_contiguous(oj_tensor *t);
/* Copy src into dst in place (same shape; src broadcast to dst allowed;
 * dtype converted: float to integer truncates, to bool is != 0). src may
 * overlap dst. OJ_ERR_SHAPE if src does not broadcast, OJ_ERR_DEVICE for
 * different devices, OJ_ERR_INVALID_ARGUMENT when dst is an expanded view.
 * Bumps dst's version. */
oj_status oj_copy_(oj_tensor *dst, oj_tensor *src);
/* Fill in place with value. Bumps the version. */
oj_status oj_fill_(oj_tensor *t, double value);

/* ---------------------------------------------------------------- random
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC 2011), keyed by the seed, counter (block, stream 0); element i
 * of a tensor uses counter block offset + i/4 (i/2 for f64 uniform, which
 * takes 53 bits from two words), so values are the same whatever the
 * thread count or device. Each call advances the engine's offset by the
 * blocks it used. */

/* One Philox4x32-10 block: counter ctr[4], key key[2] -> out[4]. */
void oj_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* U[low, high) float tensor (f32/f64/bf16/f16; OJ_ERR_DTYPE otherwise);
 * low < high finite (OJ_ERR_INVALID_ARGUMENT). */
oj_tensor *oj_rand_uniform(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                           double low, double high);
/* N(mean, std^2) float tensor, Box-Muller on Philox output (in f64);
 * std >= 0. */
oj_tensor *oj_rand_normal(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                          double mean, double std);
/* The engine RNG's position, for checkpoints. */
uint64_t oj_rng_offset(const oj_engine *eng);
void oj_rng_set_offset(oj_engine *eng, uint64_t offset);
/* New seed; the offset restarts at 0. */
void oj_rng_set_seed(oj_engine *eng, uint64_t seed);

/* ---------------------------------------------------------------- scopes */

/* Open a scope: every tensor created until the matching oj_scope_end is
 * released then, unless passed to oj_keep. Scopes nest (depth <= 64:
 * OJ_ERR_STATE beyond). */
oj_status oj_scope_begin(oj_engine *eng);
/* Close the innermost scope, releasing its tensors. OJ_ERR_STATE if none. */
oj_status oj_scope_end(oj_engine *eng);
/* Move t from the current scope to the enclosing one (or to the caller when
 * this is the outermost, who then releases it). A tensor already in an
 * outer scope or unscoped is left as is. Returns t (NULL for a NULL or
 * released t). */
oj_tensor *oj_keep(oj_tensor *t);
int oj_scope_depth(const oj_engine *eng);

/* ---------------------------------------------------------------- printing */

/* Format exactly like PyTorch's repr (precision 4, summarised with "..."
 * beyond 1000 elements, 80 columns), e.g.
 *   "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])"
 * except that a non-default dtype is named the ojas way (", dtype=f64").
 * Returns a malloc'd string (caller frees with free()) or NULL on error. */
char *oj_tensor_to_string(oj_tensor *t);
/* Print oj_tensor_to_string(t) and a newline to stdout. */
oj_status oj_print(oj_tensor *t);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_CORE_H */
