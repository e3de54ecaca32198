/* Internal core definitions shared by the layers of libojas (ops, autograd,
 * backends, io, ...). Not installed; user code sees only opaque handles. */
#ifndef OJAS_CORE_INTERNAL_H
#define OJAS_CORE_INTERNAL_H

#include <pthread.h>

#include "ojas/core.h"

#define OJ_TENSOR_MAGIC 0x6f6a7473u /* "ojts" live */
#define OJ_TENSOR_DEAD 0xdeadbeefu  /* released (kept in quarantine) */
#define OJ_MAX_SCOPE_DEPTH 64
#define OJ_ERRMSG_LEN 1024

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
    uint64_t version;  /* in-place write counter (autograd checks it) */
    /* External memory (e.g. an mmap'd file): not pooled, not charged; on
     * last release `release(release_ctx)` is called if set. */
    void (*release)(void *ctx);
    void *release_ctx;
} oj_storage;

struct oj_tensor {
    uint32_t magic;
    int32_t refcount;
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
    struct oj_node *grad_fn; /* owned reference; NULL for leaves */
    int output_index;        /* which output of grad_fn this is */
    /* ownership */
    int scope_depth;    /* 0: unscoped (owned by caller), else 1..depth */
    int64_t scope_slot; /* index in that scope's list */
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

typedef struct oj_pool_block {
    struct oj_pool_block *next;
    void *data;
    size_t capacity;
} oj_pool_block;

struct oj_engine {
    oj_device device;
    oj_numerics numerics;
    int threads;
    uint64_t seed;
    uint64_t rng_offset; /* next Philox counter block */
    oj_budget *root_budget;
    oj_budget *budget; /* current */
    bool grad_enabled;
    const struct oj_backend *backend;
    oj_engine_ext ext[OJ_EXT_COUNT];
    /* errors */
    oj_status err;
    char errmsg[OJ_ERRMSG_LEN];
    /* scopes */
    oj_scope scopes[OJ_MAX_SCOPE_DEPTH + 1]; /* [0] unused */
    int depth;
    /* host storage pool: free blocks by size class */
    oj_pool_block *pool[64];
    int64_t pooled_bytes;
    /* released tensor handles kept so use-after-release is detected */
    oj_tensor **quarantine;
    int64_t quarantine_len, quarantine_pos;
    int64_t live_tensors;
    int64_t h2d_copies, d2h_copies; /* explicit transfers, counted */
};

/* ---- validation helpers: each records an error naming `op` and returns
 * false when the check fails. */
bool oj__check_tensor(oj_engine *eng, const oj_tensor *t, const char *op, const char *arg);
/* Engine of the first non-NULL live tensor, or NULL. */
oj_engine *oj__engine_of(const oj_tensor *t);
/* A live tensor (magic check)? */
static inline bool oj__live(const oj_tensor *t) {
    return t != NULL && t->magic == OJ_TENSOR_MAGIC;
}

/* ---- storage */
/* New storage of nbytes on the engine's device charged to the current
 * budget (pooled on the host). NULL with OJ_ERR_CAPACITY recorded. */
oj_storage *oj__storage_new(oj_engine *eng, size_t nbytes, const char *op);
/* Wrap external memory (not charged, not pooled). */
oj_storage *oj__storage_wrap(oj_engine *eng, void *data, size_t nbytes,
                             void (*release)(void *), void *ctx);
void oj__storage_retain(oj_storage *s);
void oj__storage_release(oj_storage *s);

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
/* Contiguous strides for a shape. */
void oj__contiguous_strides(int rank, const int64_t *shape, int64_t *stride);
/* Host address of element at multi-index idx. */
static inline void *oj__elem_ptr(const oj_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) off += idx[d] * t->stride[d];
    return (char *)t->storage->data + t->offset + off * (int64_t)oj_dtype_size(t->dtype);
}
/* Remove t from its scope list (it becomes unscoped). */
void oj__scope_detach(oj_tensor *t);
/* Register t in the current scope (or leave unscoped when depth is 0). */
void oj__scope_attach(oj_engine *eng, oj_tensor *t);

/* ---- dtype element access (host) */
double oj__load(const void *p, oj_dtype dt);
void oj__store(void *p, oj_dtype dt, double v);

/* ---- rng */
/* Reserve n counter blocks of the engine's stream; returns the first. */
uint64_t oj__rng_advance(oj_engine *eng, uint64_t nblocks);

/* ---- backend registry (src/backend/registry.c) */
const struct oj_backend *oj__backend_for(oj_device_type type);

#endif /* OJAS_CORE_INTERNAL_H */
