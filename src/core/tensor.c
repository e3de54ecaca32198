/* Tensor handles: creation over storage, refcounting, the quarantine ring
 * that makes use-after-release an error instead of a crash, accessors, and
 * overflow-checked shape arithmetic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grad_node.h"
#include "core/internal.h"

oj_status oj_shape_numel(int rank, const int64_t *shape, oj_dtype dt, int64_t *numel) {
    if (numel) *numel = 0;
    if (rank < 0 || rank > OJ_MAX_RANK) return OJ_ERR_SHAPE;
    if (rank > 0 && shape == NULL) return OJ_ERR_INVALID_ARGUMENT;
    int64_t n = 1;
    bool overflow = false;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0) return OJ_ERR_SHAPE;
        if (__builtin_mul_overflow(n, shape[d], &n)) overflow = true;
    }
    /* A zero dim makes the count 0 even if a partial product overflowed. */
    for (int d = 0; d < rank; d++)
        if (shape[d] == 0) {
            n = 0;
            overflow = false;
        }
    if (overflow) return OJ_ERR_OUT_OF_RANGE;
    int64_t bytes;
    size_t es = oj_dtype_size(dt);
    if (es == 0) return OJ_ERR_DTYPE;
    if (__builtin_mul_overflow(n, (int64_t)es, &bytes)) return OJ_ERR_OUT_OF_RANGE;
    if (numel) *numel = n;
    return OJ_OK;
}

void oj__contiguous_strides(int rank, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        stride[d] = s;
        if (shape[d] > 1) s *= shape[d];
    }
}

static void live_link(oj_engine *eng, oj_tensor *t) {
    t->live_prev = NULL;
    t->live_next = eng->live_head;
    if (eng->live_head) eng->live_head->live_prev = t;
    eng->live_head = t;
    eng->live_tensors++;
}

static void live_unlink(oj_engine *eng, oj_tensor *t) {
    if (t->live_prev) t->live_prev->live_next = t->live_next;
    else eng->live_head = t->live_next;
    if (t->live_next) t->live_next->live_prev = t->live_prev;
    t->live_prev = t->live_next = NULL;
    eng->live_tensors--;
}

oj_tensor *oj__tensor_new(oj_engine *eng, oj_storage *s, int64_t offset, int rank,
                          const int64_t *shape, const int64_t *stride, oj_dtype dt) {
    oj_tensor *t = calloc(1, sizeof *t);
    if (t == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "tensor: out of host memory for a handle");
        return NULL;
    }
    t->magic = OJ_TENSOR_MAGIC;
    t->refcount = 1;
    t->eng = eng;
    t->storage = s;
    oj__storage_retain(s);
    t->offset = offset;
    t->rank = rank;
    t->dtype = dt;
    t->scope_slot = -1;
    for (int d = 0; d < rank; d++) t->shape[d] = shape[d];
    if (stride)
        for (int d = 0; d < rank; d++) t->stride[d] = stride[d];
    else
        oj__contiguous_strides(rank, t->shape, t->stride);
    live_link(eng, t);
    if (!oj__scope_attach(eng, t)) {
        live_unlink(eng, t);
        oj__storage_release(s);
        free(t);
        return NULL;
    }
    return t;
}

oj_tensor *oj__tensor_alloc(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                            const char *op) {
    if (eng == NULL) return NULL;
    if (!oj_dtype_valid(dt)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dt);
        return NULL;
    }
    int64_t n;
    oj_status st = oj_shape_numel(rank, shape, dt, &n);
    if (st != OJ_OK) {
        char buf[256];
        const char *why = st == OJ_ERR_OUT_OF_RANGE ? "its size overflows int64"
                          : rank > OJ_MAX_RANK || rank < 0 ? "rank must be 0..8"
                          : st == OJ_ERR_INVALID_ARGUMENT ? "shape is NULL"
                                                          : "dims must be >= 0";
        oj_set_error(eng, st, "%s: invalid shape %s of %s: %s", op,
                     oj__shape_fmt(buf, sizeof buf, shape ? rank : -1, shape), oj_dtype_name(dt),
                     why);
        return NULL;
    }
    oj_storage *s = oj__storage_new(eng, (size_t)n * oj_dtype_size(dt), op);
    if (s == NULL) return NULL;
    oj_tensor *t = oj__tensor_new(eng, s, 0, rank, shape, NULL, dt);
    oj__storage_release(s);
    return t;
}

oj_tensor *oj__tensor_view(oj_tensor *t, int rank, const int64_t *shape, const int64_t *stride,
                           int64_t offset_bytes) {
    if (!oj__check_tensor(oj__engine_of(t), t, "view", "input")) return NULL;
    return oj__tensor_new(t->eng, t->storage, offset_bytes, rank, shape, stride, t->dtype);
}

/* ---------------------------------------------------------------- release */

static void quarantine_push(oj_engine *eng, oj_tensor *t) {
    if (eng->quarantine == NULL) {
        eng->quarantine = calloc(OJ_QUARANTINE_LEN, sizeof *eng->quarantine);
        if (eng->quarantine == NULL) {
            free(t);
            return;
        }
    }
    if (eng->quarantine_len < OJ_QUARANTINE_LEN) {
        eng->quarantine[eng->quarantine_len++] = t;
        return;
    }
    free(eng->quarantine[eng->quarantine_pos]);
    eng->quarantine[eng->quarantine_pos] = t;
    eng->quarantine_pos = (eng->quarantine_pos + 1) % OJ_QUARANTINE_LEN;
}

static void tensor_destroy(oj_tensor *t) {
    oj_engine *eng = t->eng;
    oj__scope_detach(t);
    t->magic = OJ_TENSOR_DEAD; /* before releasing what it points to */
    oj_tensor *grad = t->grad;
    struct oj_node *fn = t->grad_fn;
    t->grad = NULL;
    t->grad_fn = NULL;
    if (grad) oj_release(grad);
    if (fn && eng->node_release) eng->node_release(eng, fn);
    oj__storage_release(t->storage);
    t->storage = NULL;
    live_unlink(eng, t);
    quarantine_push(eng, t);
}

oj_tensor *oj_retain(oj_tensor *t) {
    if (!oj__check_tensor(oj__engine_of(t), t, "retain", "tensor")) return NULL;
    t->refcount++;
    return t;
}

void oj_release(oj_tensor *t) {
    if (t == NULL) return;
    if (t->magic == OJ_TENSOR_DEAD) {
        oj_set_error(t->eng, OJ_ERR_INVALID_ARGUMENT, "release: tensor was already released");
        return;
    }
    if (t->magic != OJ_TENSOR_MAGIC) return;
    if (t->refcount <= 0) return; /* only holds remain: already released */
    /* The scope's reference is the last owner reference: releasing it
     * early takes the handle out of the scope. */
    if (t->refcount == 1 && t->scope_depth > 0) oj__scope_detach(t);
    if (--t->refcount > 0 || t->holds > 0) return;
    tensor_destroy(t);
}

void oj__hold(oj_tensor *t) {
    if (oj__live(t)) t->holds++;
}

void oj__unhold(oj_tensor *t) {
    if (!oj__live(t) || t->holds <= 0) return;
    if (--t->holds > 0 || t->refcount > 0) return;
    tensor_destroy(t);
}

void oj__tensor_destroy_all(oj_engine *eng) {
    /* Leftover handles may hold each other (grad); destroy one at a time. */
    while (eng->live_head) {
        oj_tensor *t = eng->live_head;
        t->refcount = 0;
        t->holds = 0;
        tensor_destroy(t);
    }
    if (eng->quarantine)
        for (int64_t i = 0; i < eng->quarantine_len; i++) free(eng->quarantine[i]);
    free(eng->quarantine);
    eng->quarantine = NULL;
    eng->quarantine_len = eng->quarantine_pos = 0;
}

/* ---------------------------------------------------------------- accessors */

oj_engine *oj_tensor_engine(const oj_tensor *t) { return oj__live(t) ? t->eng : NULL; }
int oj_rank(const oj_tensor *t) { return oj__live(t) ? t->rank : -1; }

int64_t oj_size(const oj_tensor *t, int d) {
    if (!oj__live(t)) return -1;
    if (d < 0) d += t->rank;
    if (d < 0 || d >= t->rank) return -1;
    return t->shape[d];
}

const int64_t *oj_shape(const oj_tensor *t) { return oj__live(t) ? t->shape : NULL; }
const int64_t *oj_strides(const oj_tensor *t) { return oj__live(t) ? t->stride : NULL; }

int64_t oj_numel(const oj_tensor *t) {
    if (!oj__live(t)) return 0;
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

oj_dtype oj_tensor_dtype(const oj_tensor *t) { return oj__live(t) ? t->dtype : OJ_DTYPE_COUNT; }

oj_device oj_tensor_device(const oj_tensor *t) {
    return oj__live(t) ? t->storage->device : (oj_device){OJ_DEVICE_CPU, -1};
}

int64_t oj_offset_bytes(const oj_tensor *t) { return oj__live(t) ? t->offset : -1; }

bool oj_is_contiguous(const oj_tensor *t) {
    if (!oj__live(t)) return false;
    int64_t expect = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        if (t->shape[d] == 0) return true;
        if (t->shape[d] == 1) continue;
        if (t->stride[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

void *oj__data_ptr(const oj_tensor *t) {
    if (!oj__live(t) || t->storage->device.type != OJ_DEVICE_CPU) return NULL;
    return (char *)t->storage->data + t->offset;
}

void *oj_data_ptr(oj_tensor *t) {
    void *p = oj__data_ptr(t);
    if (p) t->storage->exported = true; /* writes through p bump no version */
    return p;
}

void *oj_device_data_ptr(oj_tensor *t) {
    if (!oj__live(t)) return NULL;
    t->storage->exported = true;
    return (char *)t->storage->data + t->offset;
}

uint64_t oj_version(const oj_tensor *t) { return oj__live(t) ? t->storage->version : 0; }
void oj_bump_version(oj_tensor *t) {
    if (oj__live(t)) oj__storage_written(t->storage);
}

bool oj_shares_storage(const oj_tensor *a, const oj_tensor *b) {
    return oj__live(a) && oj__live(b) && a->storage == b->storage;
}

char *oj_shape_str(const oj_tensor *t, char *buf, size_t len) {
    if (buf == NULL || len == 0) return buf;
    if (t == NULL) snprintf(buf, len, "[null]");
    else if (!oj__live(t)) snprintf(buf, len, "[released]");
    else oj__shape_fmt(buf, len, t->rank, t->shape);
    return buf;
}

/* ---------------------------------------------------------------- grad fields */

oj_tensor *oj_set_requires_grad(oj_tensor *t, bool requires_grad) {
    if (!oj__check_tensor(oj__engine_of(t), t, "set_requires_grad", "tensor")) return NULL;
    if (requires_grad && !oj_dtype_is_float(t->dtype)) {
        oj_set_error(t->eng, OJ_ERR_DTYPE,
                     "set_requires_grad: only float tensors can require grad, got %s",
                     oj_dtype_name(t->dtype));
        return NULL;
    }
    if (t->grad_fn != NULL && !requires_grad) {
        oj_set_error(t->eng, OJ_ERR_STATE,
                     "set_requires_grad: cannot clear requires_grad on a non-leaf tensor");
        return NULL;
    }
    t->requires_grad = requires_grad;
    return t;
}

bool oj__set_data_ok(oj_tensor *t, oj_tensor *src) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "set_data", "tensor") ||
        !oj__check_tensor(eng, src, "set_data", "src"))
        return false;
    if (t->grad_fn != NULL) {
        oj_set_error(eng, OJ_ERR_STATE, "set_data: the tensor is not a leaf (it has a grad_fn); "
                                        "only leaves' data can be replaced");
    } else if (t->holds > 0) {
        oj_set_error(eng, OJ_ERR_STATE, "set_data: the tensor is saved by %d recorded autograd "
                     "node(s); run or free that graph first", (int)t->holds);
    } else if (t->requires_grad && !oj_dtype_is_float(src->dtype)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "set_data: the tensor requires grad and src is %s (float "
                     "dtypes only)", oj_dtype_name(src->dtype));
    } else if (eng->graphs != NULL || oj_graph_capturing(eng)) {
        oj_set_error(eng, OJ_ERR_STATE, "set_data: the engine %s CUDA graphs, which read storage "
                     "by address; free them first", eng->graphs ? "holds captured" : "is capturing");
    } else {
        return true;
    }
    return false;
}

oj_status oj_set_data(oj_tensor *t, oj_tensor *src) {
    if (!oj__set_data_ok(t, src)) {
        oj_engine *eng = oj__engine_of(t);
        return eng ? oj_last_status(eng) : OJ_ERR_INVALID_ARGUMENT;
    }
    if (t->grad != NULL && (t->grad->dtype != src->dtype || t->grad->rank != src->rank ||
                            memcmp(t->grad->shape, src->shape, sizeof(int64_t) * (size_t)src->rank)))
        oj_zero_grad(t); /* a gradient of the old dtype or shape no longer fits */
    oj__storage_retain(src->storage);
    oj__storage_release(t->storage);
    t->storage = src->storage;
    t->offset = src->offset;
    t->dtype = src->dtype;
    t->rank = src->rank;
    memcpy(t->shape, src->shape, sizeof t->shape);
    memcpy(t->stride, src->stride, sizeof t->stride);
    return OJ_OK;
}

bool oj_requires_grad(const oj_tensor *t) { return oj__live(t) && t->requires_grad; }
oj_tensor *oj_grad(const oj_tensor *t) {
    if (!oj__live(t)) return NULL;
    if (t->grad == NULL && t->grad_fn != NULL) { /* a non-leaf marked retain_grad */
        oj_tensor *h = t->grad_fn->retained[t->output_index];
        return h ? h->grad : NULL;
    }
    return t->grad;
}

void oj_zero_grad(oj_tensor *t) {
    if (!oj__live(t) || t->grad == NULL) return;
    oj_tensor *g = t->grad;
    t->grad = NULL;
    t->grad_fresh = false;
    oj_release(g);
}
