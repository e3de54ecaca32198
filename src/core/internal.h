/* Internal core definitions shared by the layers of libojas (ops, autograd,
 * backends, io, ...). Not installed; user code sees only opaque handles. */
#ifndef OJAS_CORE_INTERNAL_H
#define OJAS_CORE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>

#include "ojas/core.h"
#include "core/range_heap.h"

#define OJ_TENSOR_MAGIC 0x6f6a7473u /* "ojts" live */
#define OJ_TENSOR_DEAD 0xdeadbeefu  /* released (kept in quarantine) */
#define OJ_MAX_SCOPE_DEPTH 64
#define OJ_ERRMSG_LEN 1024
#define OJ_QUARANTINE_LEN 4096 /* released handles kept before free() */
/* Host pool size classes: 64 B, then 4 classes per power of two
 * (2^k, 1.25, 1.5, 1.75 x 2^k) up to 1.75 x 2^62. */
#define OJ_POOL_CLASSES 232
#define OJ_POOL_RANGE (-2)

struct oj_backend; /* src/backend/backend.h */
struct oj_node;    /* src/autograd: a tape node */

/* Refcounted bytes on one device, charged to a budget. */
typedef struct oj_storage {
    int64_t refcount;
    oj_engine *eng;
    oj_device device;
    void *data;        /* host or device pointer */
    size_t nbytes;     /* usable bytes */
    size_t capacity;   /* bytes actually allocated (pool class), charged */
    oj_budget *budget; /* charged budget (NULL for external memory) */
    uint64_t version;  /* in-place write counter: bump only through oj__storage_written */
    int pool_class;    /* pool size class; -1 when not pooled; OJ_POOL_RANGE: a graph pool's range */
    /* External memory (e.g. an mmap'd file): not pooled, not charged; on
     * last release `release(release_ctx)` is called if set. */
    void (*release)(void *ctx);
    void *release_ctx;
    struct oj_graph_pool *gpool; /* allocated during a graph capture: returns there */
    bool keep_copies; /* a parameter whose autocast casts are kept (weight_copy.c) */
    struct oj_wcopy *wcopies; /* its kept copies (weight_copy.c; a few views and dtypes) */
    /* Its memory is shared outside the library (oj_data_ptr,
     * oj_device_data_ptr, DLPack and buffer exports, oj_from_external):
     * writes there bump no version, so nothing that trusts the version
     * (kept weight copies, the optimizer's bounds) trusts it. Never
     * cleared. */
    bool exported;
    uint64_t written_in; /* the last capture (engine capture_serial) whose written set holds it */
} oj_storage;

struct oj_tensor {
    uint32_t magic;
    int32_t refcount; /* owner references: the scope's or the caller's, plus oj_retain */
    int32_t holds;    /* internal holders (autograd nodes): oj__hold / oj__unhold */
    oj_engine *eng;
    oj_storage *storage;
    int64_t offset; /* bytes */
    int rank;
    oj_dtype dtype;
    int64_t shape[OJ_MAX_RANK];
    int64_t stride[OJ_MAX_RANK]; /* elements */
    /* autograd */
    bool requires_grad;
    bool retain_grad;
    oj_tensor *grad;         /* owned reference, outside every scope */
    /* grad is a buffer given by its owner (a view of the trainer's
     * gradient arena) that holds no gradient yet: the first gradient
     * backward accumulates is copied into it, the next ones added */
    bool grad_fresh;
    /* during a backward with a leaf hook: the gradients still to come */
    int32_t grad_pending;
    struct oj_node *grad_fn; /* owned reference; NULL for leaves */
    int output_index;        /* which output of grad_fn this is */
    /* ownership */
    int scope_depth;    /* 0: unscoped (owned by caller), else 1..depth */
    int64_t scope_slot; /* index in that scope's list */
    oj_tensor *live_prev, *live_next; /* engine's list of live handles */
};

typedef struct oj_scope {
    oj_tensor **items;
    int64_t len, cap;
} oj_scope;

/* Hooks for layers above core (autograd, backends) to hang state on an
 * engine without core knowing their types. */
typedef struct oj_engine_ext {
    void *ptr;
    void (*destroy)(oj_engine *eng, void *ptr);
} oj_engine_ext;

enum { OJ_EXT_TAPE = 0, OJ_EXT_BACKEND = 1, OJ_EXT_USER = 2, OJ_EXT_COUNT = 8 };

/* A free host block; the header lives in the block's own first bytes. */
typedef struct oj_dev_block {
    struct oj_dev_block *next;
    void *ptr; /* device pointer */
    size_t capacity;
} oj_dev_block;

typedef struct oj_pool_block {
    struct oj_pool_block *next;
    size_t capacity;
} oj_pool_block;

/* One piece of a graph pool's address range with memory behind it. */
typedef struct oj_vm_map {
    size_t off, len;
    bool mapped;
} oj_vm_map;

/* A graph's private device pool (src/core/graph.c): every block allocated
 * while the graph was captured. Its free blocks are reused only by that
 * capture, never by other work, because replays write them. Blocks stay
 * reserved on the root budget while free, like the engine's pool. Kept
 * alive by the graph and by each storage that holds one of its blocks. */
typedef struct oj_graph_pool {
    int64_t refs;      /* the graph (until freed) + storages holding blocks */
    bool graph_alive;  /* false once the graph is freed: blocks go back to the driver */
    bool failed;       /* an error was recorded during its capture (even if cleared since) */
    /* With the backend's virtual memory (graph_pool.c): one reserved
     * address range [va_base, + va_bytes), backed by maps as it grows;
     * storages are ranges of it (pool_class OJ_POOL_RANGE). Else
     * free_list holds released blocks by size class. */
    size_t gran; /* vm_granularity; 0: size classes */
    bool vm_tried;
    void *va_base;
    size_t va_bytes;
    oj__range_heap heap;
    oj_vm_map *maps; /* by offset */
    int64_t n_maps, cap_maps;
    oj_dev_block *free_list[OJ_POOL_CLASSES];
    /* the written set: every storage outside this pool that the capture
     * wrote in place (retained until the graph is freed); each replay
     * bumps their versions */
    oj_storage **written;
    int64_t n_written, cap_written;
} oj_graph_pool;

struct oj_engine {
    oj_device device;
    oj_numerics numerics;
    int threads;
    uint64_t seed;
    uint64_t rng_offset; /* next Philox counter block */
    oj_budget *root_budget;
    oj_budget *budget; /* current */
    bool grad_enabled;
    bool autocast;          /* oj_set_autocast */
    oj_dtype autocast_dtype; /* OJ_BF16 or OJ_F16 */
    bool detect_anomaly;     /* oj_set_detect_anomaly */
    /* Called by backward when a leaf's gradient is final for this backward
     * (the last of the gradients the recorded graph sends it is
     * accumulated); NULL: none. The data-parallel trainer's overlap. */
    void (*leaf_grad_ready)(void *ctx, oj_tensor *leaf);
    void *leaf_grad_ready_ctx;
    const struct oj_backend *backend;
    oj_engine_ext ext[OJ_EXT_COUNT];
    /* errors */
    oj_status err;
    char errmsg[OJ_ERRMSG_LEN];
    /* scopes */
    oj_scope scopes[OJ_MAX_SCOPE_DEPTH + 1]; /* [0] unused */
    int depth;
    /* host storage pool: free blocks by size class, charged to the root */
    oj_pool_block *pool[OJ_POOL_CLASSES];
    /* device pool: released device blocks by size class, reused in stream
     * order (one stream per engine), so steady-state training never calls
     * the driver's allocator; their bytes stay reserved like host ones */
    struct oj_dev_block *dev_pool[OJ_POOL_CLASSES];
    int64_t pooled_bytes;
    oj_graph_pool *capture_pool; /* set during oj_graph_capture_begin..end */
    uint64_t capture_serial;     /* captures begun (oj_storage.written_in) */
    struct oj_graph *graphs;     /* live graphs (freed by oj_engine_free if still alive) */
    int64_t live_bytes, live_peak; /* budget-charged storage in use (capacity), and its peak */
    /* released tensor handles kept so use-after-release is detected */
    oj_tensor **quarantine;
    int64_t quarantine_len, quarantine_pos;
    int64_t live_tensors;
    oj_tensor *live_head; /* every live handle, for oj_engine_free */
    /* Set by autograd: drops a tensor's reference to its grad_fn node. */
    void (*node_release)(oj_engine *eng, struct oj_node *node);
    int64_t h2d_copies, d2h_copies; /* explicit transfers, counted */
    /* host seconds in oj__graph_launch, summed: the kept copies' sync, the
     * backend's launch call, the written set's bumps (the trainer's
     * OJAS_TRAIN_PROFILE prints them) */
    double graph_sync_s, graph_launch_s, graph_bump_s;
    uint64_t node_seq;    /* creation counter for autograd nodes (grad_node.c) */
    int64_t backward_seq; /* backward passes run (visit marks) */
    struct oj_wcopy *wcopies; /* kept low-precision parameter copies (weight_copy.c) */
    int64_t wcopy_probes;     /* entries compared by their lookups (tests) */
};

/* oj_error_set with a va_list (src/core/status.c). */
oj_status oj__error_setv(oj_error *e, oj_status st, const char *fmt, va_list ap);

/* ---- validation helpers: each records an error naming `op` and returns
 * false when the check fails. */
bool oj__check_tensor(oj_engine *eng, const oj_tensor *t, const char *op, const char *arg);
/* A destination written in place: no element may share its memory with
 * another (a stride-0 dim of size > 1, an expanded view). */
bool oj__check_writable(oj_engine *eng, const oj_tensor *t, const char *op, const char *arg);
/* Engine of a live or quarantined (released) tensor, else NULL. */
oj_engine *oj__engine_of(const oj_tensor *t);
/* Would oj_set_data(t, src) succeed? false with its error recorded. */
bool oj__set_data_ok(oj_tensor *t, oj_tensor *src);
/* "[2, 3]" for a shape array into buf (rank > 8 prints "rank N"). */
char *oj__shape_fmt(char *buf, size_t len, int rank, const int64_t *shape);
/* A live tensor (magic check)? */
static inline bool oj__live(const oj_tensor *t) {
    return t != NULL && t->magic == OJ_TENSOR_MAGIC;
}

/* ---- graphs: drop one reference to a graph pool (graph.c) */
void oj__graph_pool_unref(oj_engine *eng, oj_graph_pool *p);

/* A graph pool's ranges (graph_pool.c). oj__gpool_take: nbytes (> 0) of
 * device memory from the capture's pool p charged to b, *cap set to what
 * is charged; NULL with *handled false when p has no virtual memory (the
 * caller takes a size-classed block), NULL with *handled true and the
 * engine's error set (OJ_ERR_CAPACITY naming op) when it cannot. */
void *oj__gpool_take(oj_engine *eng, oj_graph_pool *p, size_t nbytes, oj_budget *b, size_t *cap,
                     const char *op, bool *handled);
/* A storage holding a range goes back to its pool (its charge to the root
 * budget; memory no live range needs is unmapped once the graph is gone). */
void oj__gpool_give(oj_engine *eng, oj_storage *s);
/* The graph is gone: unmap what no live range needs. */
void oj__gpool_drop(oj_engine *eng, oj_graph_pool *p);
/* The last reference is gone: unmap everything, give the range back. */
void oj__gpool_destroy(oj_engine *eng, oj_graph_pool *p);
/* Reserve bytes on b; on failure trim the engine's pool and retry once;
 * OJ_ERR_CAPACITY naming op and nbytes when it still fails. */
bool oj__storage_reserve(oj_engine *eng, oj_budget *b, size_t bytes, const char *op, size_t nbytes);
void oj__storage_capacity_error(oj_engine *eng, const char *op, size_t nbytes, oj_budget *over);
/* End a capture in progress without a graph (engine teardown). */
void oj__graph_capture_abandon(oj_engine *eng);
/* Free every graph still alive (engine teardown). */
void oj__graph_free_all(oj_engine *eng);
/* During a capture: s joins the capturing graph's written set unless it is
 * the graph's own pool memory or already there (oj__storage_written calls
 * it). */
void oj__graph_note_written(oj_engine *eng, oj_storage *s);

/* ---- kept low-precision copies of parameters (weight_copy.c) */
typedef struct oj_wcopy oj_wcopy;
/* Mark param's storage as one whose autocast casts are kept (on), or
 * drop its copies and stop (off). */
void oj__wcopy_keep(oj_tensor *param, bool on);
/* When x's storage keeps copies: *out = a new handle (current scope) on
 * the kept contiguous copy of x cast to dt (made or made again now when
 * stale, except during a graph capture: then filled before the replay),
 * NULL with the error recorded on failure; returns true. False (*out
 * NULL) when x's storage keeps none: the caller casts. No tape node. */
bool oj__wcopy_get(oj_tensor *x, oj_dtype dt, oj_tensor **out);
/* The kept dt copy of param's own geometry, or with transposed of its
 * transpose (rank 2: the copy is [cols, rows] contiguous), as an unscoped
 * handle the caller releases; NULL when there is none. For the
 * optimizer's kernels, which write it in the update's pass; then
 * oj__wcopy_fresh(param, dt, transposed) after the version bump declares
 * it current. */
oj_tensor *oj__wcopy_target(oj_tensor *param, oj_dtype dt, bool transposed);
void oj__wcopy_fresh(oj_tensor *param, oj_dtype dt, bool transposed);
/* Make every stale copy again (before a graph replay). */
oj_status oj__wcopies_sync(oj_engine *eng);
/* Entries alive, and entries compared by lookups so far (tests). */
int64_t oj__wcopies_count(const oj_engine *eng);
int64_t oj__wcopy_probes(const oj_engine *eng);
/* Drop the copies of storage s (its last release); all at engine free. */
void oj__wcopy_forget(oj_storage *s);
void oj__wcopies_free(oj_engine *eng);

/* ---- storage */
/* New storage of nbytes on the engine's device charged to the current
 * budget (pooled on the host). NULL with OJ_ERR_CAPACITY recorded. */
oj_storage *oj__storage_new(oj_engine *eng, size_t nbytes, const char *op);
/* Wrap external memory (not charged, not pooled). */
oj_storage *oj__storage_wrap(oj_engine *eng, void *data, size_t nbytes,
                             void (*release)(void *), void *ctx);
void oj__storage_retain(oj_storage *s);
void oj__storage_release(oj_storage *s);
/* The one way to record an in-place write to s (every write path calls
 * it after queueing the write): s's version moves on, so autograd's saved
 * tensors, kept weight copies and the optimizer's bounds see the write.
 * During a graph capture s also joins the capturing graph's written set
 * (unless it is the graph's own pool memory), and each replay records
 * the write again (oj_graph_replay). */
void oj__storage_written(oj_storage *s);
/* Host pointer to t's element 0 for the library's own reads and writes
 * (CPU storage only, else NULL): unlike oj_data_ptr it does not mark the
 * storage exported; a writer calls oj__storage_written after. */
void *oj__data_ptr(const oj_tensor *t);

/* ---- tensor handles */
/* New handle over storage s (retained), registered in the current scope.
 * shape/stride copied; stride NULL means contiguous. NULL on failure. */
oj_tensor *oj__tensor_new(oj_engine *eng, oj_storage *s, int64_t offset, int rank,
                          const int64_t *shape, const int64_t *stride, oj_dtype dt);
/* New contiguous tensor with fresh storage; checks the shape. */
oj_tensor *oj__tensor_alloc(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                            const char *op);
/* New handle viewing t's storage with another shape/stride/offset (a view). */
oj_tensor *oj__tensor_view(oj_tensor *t, int rank, const int64_t *shape,
                           const int64_t *stride, int64_t offset_bytes);
/* oj_clone / oj_contiguous without autograd (the library's own copies:
 * kernels' operands, gradients inside backward rules). The public ones
 * (ops layer) record an identity node. */
oj_tensor *oj__clone(oj_tensor *t);
oj_tensor *oj__contiguous(oj_tensor *t);
/* Contiguous strides for a shape. */
void oj__contiguous_strides(int rank, const int64_t *shape, int64_t *stride);
/* Host address of element at multi-index idx. */
static inline void *oj__elem_ptr(const oj_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) off += idx[d] * t->stride[d];
    return (char *)t->storage->data + t->offset + off * (int64_t)oj_dtype_size(t->dtype);
}
/* Free every remaining handle (unscoped leftovers) and the quarantine;
 * for oj_engine_free. */
void oj__tensor_destroy_all(oj_engine *eng);
/* Remove t from its scope list (it becomes unscoped). */
void oj__scope_detach(oj_tensor *t);
/* oj_graph_replay in two halves, for a caller that reads the graph's
 * results back later anyway (the trainer): oj__graph_launch queues the
 * replay and returns at once; oj__graph_checks reads the deferred index
 * and target checks back (waiting for the replay) and returns what
 * oj_graph_replay would have. On a backend whose replay is one entry the
 * launch replays with the checks and the checks return OJ_OK. */
oj_status oj__graph_launch(struct oj_graph *g);
oj_status oj__graph_checks(struct oj_graph *g);
/* Read-backs that do not wait, for a caller that queues more work before
 * it needs the values (the trainer's next step): oj__read_defer queues a
 * copy of nbytes of device memory at src into host dst (valid until
 * oj__read_wait, which waits for all queued ones and fills them); on a
 * backend without them the copy is made at once. oj__graph_checks_defer
 * queues the read of g's check words of its last replay (OJ_ERR_UNSUPPORTED
 * on a backend that launches graphs but cannot defer the read); after
 * oj__read_wait, oj__graph_checks_clean is true when all passed (false:
 * replay the same inputs and call oj__graph_checks for the error). */
oj_status oj__read_defer(oj_engine *eng, void *dst, const void *src, size_t nbytes);
/* Whether eng's backend defers read-backs and graph checks (else the
 * functions here copy and check at once). */
bool oj__read_deferrable(const oj_engine *eng);
oj_status oj__read_wait(oj_engine *eng);
oj_status oj__graph_checks_defer(struct oj_graph *g);
bool oj__graph_checks_clean(struct oj_graph *g);
/* Register t in the current scope (or leave unscoped when depth is 0).
 * False with OJ_ERR_CAPACITY recorded when the list cannot grow. */
bool oj__scope_attach(oj_engine *eng, oj_tensor *t);

/* ---- dtype element access (host) */
double oj__load(const void *p, oj_dtype dt);
/* Float to integer: truncation toward zero, NaN -> 0, saturating at the
 * int64 range, then wrapping into narrower integers; bool: v != 0. */
void oj__store(void *p, oj_dtype dt, double v);
int64_t oj__load_i64(const void *p, oj_dtype dt);
void oj__store_i64(void *p, oj_dtype dt, int64_t v);
/* Convert one element from sdt at s to ddt at d (integer pairs go through
 * int64, everything else through double). */
void oj__convert(void *d, oj_dtype ddt, const void *s, oj_dtype sdt);

/* ---- host copies (src/core/copy.c) */
/* dst[i] = convert(src[i]) for every multi-index i of `shape` (rank dims):
 * dst/src point at element 0, strides in elements (0 broadcasts). */
void oj__host_copy(int rank, const int64_t *shape, void *dst, const int64_t *dstride,
                   oj_dtype ddt, const void *src, const int64_t *sstride, oj_dtype sdt);
/* Host address of t's element 0 for reading: the storage itself on the CPU,
 * else a malloc'd mirror of the storage (*tmp set; free it). NULL with an
 * error recorded on failure. */
const void *oj__host_read_begin(oj_tensor *t, void **tmp, const char *op);

/* ---- budget (src/core/budget.c) */
/* Reserve like oj_budget_reserve; on OJ_ERR_CAPACITY *failed (if non-NULL)
 * names the budget whose limit would be exceeded. */
oj_status oj__budget_reserve_ex(oj_budget *b, int64_t bytes, oj_budget **failed);
/* Atomically release bytes from `from` and reserve them on `to` (same
 * tree). On OJ_ERR_CAPACITY nothing changes. */
oj_status oj__budget_move(oj_budget *from, oj_budget *to, int64_t bytes, oj_budget **failed);
/* Root of b's tree. */
oj_budget *oj__budget_root(const oj_budget *b);
/* Count an engine as open (oj_set_memory_ceiling refuses while any is) and,
 * for a host engine (host true), charge its root budget `root` to the
 * process memory ceiling as well. Returns the ceiling's limit, 0 for none.
 * Each call is paired with one oj__engine_unregister. */
int64_t oj__engine_register(oj_budget *root, bool host);
void oj__engine_unregister(void);

/* ---- memory (src/core/memory.c) */
/* Bytes of host memory this process may use: physical memory, capped by
 * the cgroup v2 memory.max and v1 memory.limit_in_bytes of the process's
 * cgroups (named in proc_cgroup, normally "/proc/self/cgroup") and their
 * ancestors under cgroup_root (normally "/sys/fs/cgroup"); "max" or v1's
 * 2^63 is no limit. 0 when nothing is known. */
int64_t oj__host_memory_bytes(const char *cgroup_root, const char *proc_cgroup);
/* The default root budget for `avail` bytes: avail less a margin of 10%
 * (at least 64 MiB, at most 2 GiB, at most half) for what the budget does
 * not see (the allocator's own use, libraries, the CUDA context, other
 * processes); OJ_UNLIMITED when avail <= 0 (unknown). */
int64_t oj__budget_with_margin(int64_t avail);
/* Set eng's root budget limit to oj__budget_with_margin of the device's
 * free memory (backend memory_info) or the host's oj__host_memory_bytes. */
void oj__engine_default_budget(oj_engine *eng);
/* Bytes that can still be allocated through eng's current budget: the
 * least (limit - current) along its chain to the root, the root's pooled
 * free blocks counted as free. *tightest (may be NULL) gets that budget. */
int64_t oj__budget_room(oj_engine *eng, oj_budget **tightest);

/* ---- rng */
/* Reserve n counter blocks of the engine's stream; returns the first. */
uint64_t oj__rng_advance(oj_engine *eng, uint64_t nblocks);

/* ---- internal holders: a handle lives while it has an owner reference or
 * a hold. Holds never touch scopes, so a node keeping a tensor cannot
 * consume the reference of the scope that owns it. */
void oj__hold(oj_tensor *t);
void oj__unhold(oj_tensor *t);

/* ---- autograd nodes (grad_node.c): a tensor's free drops its grad_fn */
void oj__node_release(struct oj_node *n);

/* ---- backend registry (src/backend/registry.c) */
/* The backend serving a device type: the CPU's always, CUDA's once its
 * module is loaded (by oj__backend_load), else NULL. */
const struct oj_backend *oj__backend_for(oj_device_type type);
/* The backend for type into *out, loading the CUDA module
 * (libojas-cuda.so) on first use. OJ_ERR_DEVICE in err (one line naming
 * the missing file or library, or the module's refusal) when it cannot be
 * loaded; OJ_ERR_INVALID_ARGUMENT for an unknown type. Thread-safe. */
oj_status oj__backend_load(oj_device_type type, const struct oj_backend **out, oj_error *err);

/* Reduction `op` (an oj_reduce_op) of every element of t into one double,
 * through the engine's backend: a reduce into an f64 tensor of t's rank with
 * every dim 1, read back. *st gets the status (an allocation failure's or
 * the kernel's); NAN when it is not OJ_OK. Records nothing itself beyond
 * what the allocation records. */
double oj__reduce_all(oj_tensor *t, int op, const char *opname, oj_status *st);

/* Detect-anomaly mode: when on (and no error is recorded yet), record
 * OJ_ERR_NUMERIC naming `fmt ...` and t's shape if float tensor t holds a
 * NaN or an inf (src/core/anomaly.c). */
void oj__anomaly_check(oj_tensor *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- norms with an explicit output dtype (src/ops/nn_norm.c), for models
 * whose norm output feeds only linears under autocast */
/* oj_layer_norm / oj_rms_norm / oj_add_layer_norm / oj_add_rms_norm (same
 * inputs, autocast, checks, errors, *sum and gradients) with the norm's
 * output in out_dtype (a float dtype, else OJ_ERR_DTYPE): the bits of
 * oj_cast(the public op's result, out_dtype). f32 computation (the norms
 * under autocast) and bf16/f16 out_dtype is one kernel writing the low
 * dtype (the extended backend contract); its gradient reaches the norm's
 * backward in that dtype (no cast kernel either way; the values are the
 * f32 ones the cast's backward would give). Other pairs run the norm, then
 * oj_cast. A model's linear after the norm under bf16 autocast then needs
 * no cast (PyTorch's autocast: layer_norm in f32, then the linear casts its
 * input once: the same bits, as long as the output is used only by ops
 * that would cast it to out_dtype). */
oj_tensor *oj__layer_norm_to(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, double eps,
                             oj_dtype out_dtype);
oj_tensor *oj__rms_norm_to(oj_tensor *x, oj_tensor *weight, double eps, oj_dtype out_dtype);
oj_tensor *oj__add_layer_norm_to(oj_tensor *x, oj_tensor *r, oj_tensor *weight, oj_tensor *bias,
                                 double eps, oj_tensor **sum, oj_dtype out_dtype);
oj_tensor *oj__add_rms_norm_to(oj_tensor *x, oj_tensor *r, oj_tensor *weight, double eps,
                               oj_tensor **sum, oj_dtype out_dtype);

/* Causal attention of one sequence's queries q [1, H, T, D] over its S
 * keys and values in blocks of the pools k_pool, v_pool [NB, Hkv, BS, D]
 * (contiguous, q's dtype): key j is row j % BS of block blocks[j / BS],
 * query i sees keys j <= i + S - T. The backend reads the blocks in place
 * where it can (attention_paged_forward), else they are gathered and
 * scaled_dot_product_attention runs; either way the values are those of
 * scaled_dot_product_attention on the keys laid out in order. scale NAN:
 * 1 / sqrt(D). [1, H, T, D] (a view of [1, T, H, D] storage), owned by the
 * current scope; never recorded by autograd. Errors: OJ_ERR_SHAPE,
 * OJ_ERR_DTYPE, OJ_ERR_OUT_OF_RANGE (a block id outside the pool). */
oj_tensor *oj__paged_attention(oj_tensor *q, oj_tensor *k_pool, oj_tensor *v_pool,
                               const int32_t *blocks, int64_t S, double scale);

/* Causal attention of many sequences' rows packed in q [1, H, N, D] over
 * one pool k_pool, v_pool [NB, Hkv, BS, D] (contiguous, q's dtype), every
 * table a device tensor (so a CUDA graph may record it on a backend with
 * attention_paged_varlen_forward): row i reads block table tables[seq[i]]
 * (i32 [B, MB] contiguous, ids < NB checked by the caller; seq i32 [N]) and
 * sees that sequence's keys 0..pos[i] (i32 [N]); pos[i] < 0: an inactive
 * row, zeros. scale NAN: 1 / sqrt(D). Without the backend entry each row
 * runs oj__paged_attention (the tables read back to the host). [1, H, N,
 * D], owned by the current scope; never recorded by autograd. Errors:
 * OJ_ERR_SHAPE, OJ_ERR_DTYPE. */
oj_tensor *oj__paged_attention_varlen(oj_tensor *q, oj_tensor *k_pool, oj_tensor *v_pool,
                                      oj_tensor *tables, oj_tensor *seq, oj_tensor *pos,
                                      double scale);
/* Store x [1, Hkv, N, D] (pool's dtype, any strides) into pool [NB, Hkv,
 * BS, D] (contiguous): row t at row slot[t] % BS of block slot[t] / BS
 * (slot i32 [N] on x's device; < 0: row t is not written; ids < NB BS
 * checked by the caller). The backend's paged_kv_write where it has one
 * (graph-capturable), else row by row after reading slot back. Errors:
 * OJ_ERR_SHAPE, OJ_ERR_DTYPE. */
oj_status oj__paged_kv_write_(oj_tensor *pool, oj_tensor *x, oj_tensor *slot);

#endif /* OJAS_CORE_INTERNAL_H */
