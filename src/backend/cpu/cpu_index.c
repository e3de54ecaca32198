/* CPU indexing kernels: gather, scatter_add, index_select, index_add,
 * index_copy (see backend.h for the contracts). Each walks the positions
 * of one tensor in row-major order, so scatter-style accumulation runs in
 * a fixed order and is deterministic. Index values are checked here (the
 * ops layer cannot read them without a device copy): a bad one fails with
 * OJ_ERR_OUT_OF_RANGE naming the op, the value and its position. */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

/* Row-major walk over `shape` keeping a byte offset per tensor. */
typedef struct {
    int rank, n;
    int64_t shape[OJ_MAX_RANK], idx[OJ_MAX_RANK];
    int64_t stride[3][OJ_MAX_RANK]; /* bytes */
    int64_t off[3];
} walk;

static void walk_init(walk *w, int rank, const int64_t *shape, int n) {
    memset(w, 0, sizeof *w);
    w->rank = rank;
    w->n = n;
    memcpy(w->shape, shape, (size_t)rank * sizeof *shape);
}

/* Tensor k steps by t's strides over the walk's dims (t has the walk's
 * rank), except dim `skip` (-1: none) which does not move it. */
static void walk_set(walk *w, int k, const oj_tensor *t, int skip) {
    int64_t es = (int64_t)oj_dtype_size(t->dtype);
    for (int d = 0; d < w->rank; d++) w->stride[k][d] = d == skip ? 0 : t->stride[d] * es;
}

static int64_t walk_numel(const walk *w) {
    int64_t n = 1;
    for (int d = 0; d < w->rank; d++) n *= w->shape[d];
    return n;
}

static bool walk_next(walk *w) {
    for (int d = w->rank - 1; d >= 0; d--) {
        for (int k = 0; k < w->n; k++) w->off[k] += w->stride[k][d];
        if (++w->idx[d] < w->shape[d]) return true;
        for (int k = 0; k < w->n; k++) w->off[k] -= w->stride[k][d] * w->shape[d];
        w->idx[d] = 0;
    }
    return false;
}

static char *base(const oj_tensor *t) { return (char *)t->storage->data + t->offset; }

static int64_t load_index(const char *p, oj_dtype dt) {
    return dt == OJ_I32 ? *(const int32_t *)p : *(const int64_t *)p;
}

static oj_status bad_index(oj_engine *eng, const char *op, int64_t v, int dim, int64_t size,
                           const char *what, int rank, const int64_t *pos) {
    char b[160];
    return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                        "%s: index %lld out of range for dim %d of size %lld (at %s %s)", op,
                        (long long)v, dim, (long long)size, what,
                        oj__shape_fmt(b, sizeof b, rank, pos));
}

/* *dst += alpha * *src for one element of dtype dt. */
static void add_elem(char *dst, const char *src, oj_dtype dt, double alpha) {
    switch (dt) {
    case OJ_F32: *(float *)dst += (float)(alpha * *(const float *)src); break;
    case OJ_F64: *(double *)dst += alpha * *(const double *)src; break;
    case OJ_BF16:
    case OJ_F16: oj__store(dst, dt, oj__load(dst, dt) + alpha * oj__load(src, dt)); break;
    case OJ_BOOL: *(uint8_t *)dst = *(uint8_t *)dst || (alpha != 0 && *(const uint8_t *)src); break;
    default:
        oj__store_i64(dst, dt, oj__load_i64(dst, dt) + (int64_t)alpha * oj__load_i64(src, dt));
        break;
    }
}

oj_status oj_cpu_gather(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                        const oj_tensor *index) {
    /* walk index's shape: 0 index, 1 out, 2 x (dim added from the index) */
    int rank = index->rank;
    int64_t size = x->rank ? x->shape[dim] : 1;
    int64_t xs = x->rank ? x->stride[dim] * (int64_t)oj_dtype_size(x->dtype) : 0;
    size_t es = oj_dtype_size(x->dtype);
    walk w;
    walk_init(&w, rank, index->shape, 3);
    walk_set(&w, 0, index, -1);
    walk_set(&w, 1, out, -1);
    if (x->rank) walk_set(&w, 2, x, dim);
    if (walk_numel(&w) == 0) return OJ_OK;
    const char *ib = base(index), *xb = base(x);
    char *ob = base(out);
    do {
        int64_t j = load_index(ib + w.off[0], index->dtype);
        if (j < 0 || j >= size) return bad_index(eng, "gather", j, dim, size, "index position", rank, w.idx);
        memcpy(ob + w.off[1], xb + w.off[2] + j * xs, es);
    } while (walk_next(&w));
    return OJ_OK;
}

oj_status oj_cpu_scatter_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                             const oj_tensor *src) {
    int rank = index->rank;
    int64_t size = out->rank ? out->shape[dim] : 1;
    int64_t os = out->rank ? out->stride[dim] * (int64_t)oj_dtype_size(out->dtype) : 0;
    walk w;
    walk_init(&w, rank, index->shape, 3);
    walk_set(&w, 0, index, -1);
    walk_set(&w, 1, src, -1);
    if (out->rank) walk_set(&w, 2, out, dim);
    if (walk_numel(&w) == 0) return OJ_OK;
    const char *ib = base(index), *sb = base(src);
    char *ob = base(out);
    do {
        int64_t j = load_index(ib + w.off[0], index->dtype);
        if (j < 0 || j >= size)
            return bad_index(eng, "scatter_add", j, dim, size, "index position", rank, w.idx);
        add_elem(ob + w.off[2] + j * os, sb + w.off[1], out->dtype, 1.0);
    } while (walk_next(&w));
    return OJ_OK;
}

/* Check a 1-D (or 0-D) index against size. */
static oj_status check_index_1d(oj_engine *eng, const char *op, const oj_tensor *index, int dim,
                                int64_t size) {
    int64_t n = index->rank ? index->shape[0] : 1;
    int64_t st = index->rank ? index->stride[0] * (int64_t)oj_dtype_size(index->dtype) : 0;
    const char *ib = base(index);
    for (int64_t k = 0; k < n; k++) {
        int64_t j = load_index(ib + k * st, index->dtype);
        if (j < 0 || j >= size) return bad_index(eng, op, j, dim, size, "index position", 1, &k);
    }
    return OJ_OK;
}

static int64_t index_at(const oj_tensor *index, int64_t k) {
    int64_t st = index->rank ? index->stride[0] * (int64_t)oj_dtype_size(index->dtype) : 0;
    return load_index(base(index) + k * st, index->dtype);
}

oj_status oj_cpu_index_select(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                              const oj_tensor *index) {
    int64_t size = x->rank ? x->shape[dim] : 1;
    oj_status st = check_index_1d(eng, "index_select", index, dim, size);
    if (st != OJ_OK) return st;
    /* walk out's shape: 0 out, 1 x (dim from the index) */
    walk w;
    walk_init(&w, out->rank, out->shape, 2);
    walk_set(&w, 0, out, -1);
    if (x->rank) walk_set(&w, 1, x, dim);
    if (walk_numel(&w) == 0) return OJ_OK;
    int64_t xs = x->rank ? x->stride[dim] * (int64_t)oj_dtype_size(x->dtype) : 0;
    size_t es = oj_dtype_size(x->dtype);
    const char *xb = base(x);
    char *ob = base(out);
    do {
        int64_t j = index_at(index, out->rank ? w.idx[dim] : 0);
        memcpy(ob + w.off[0], xb + w.off[1] + j * xs, es);
    } while (walk_next(&w));
    return OJ_OK;
}

/* out's slices along dim at index[k] get src's slice k, added (times
 * alpha) or copied; src's shape walked row-major, so for a copy a repeated
 * index keeps the last k. */
static oj_status index_put(oj_engine *eng, const char *op, oj_tensor *out, int dim,
                           const oj_tensor *index, const oj_tensor *src, bool add, double alpha) {
    int64_t size = out->rank ? out->shape[dim] : 1;
    oj_status st = check_index_1d(eng, op, index, dim, size);
    if (st != OJ_OK) return st;
    /* walk src's shape: 0 src, 1 out (dim from the index) */
    walk w;
    walk_init(&w, src->rank, src->shape, 2);
    walk_set(&w, 0, src, -1);
    if (out->rank) walk_set(&w, 1, out, dim);
    if (walk_numel(&w) == 0) return OJ_OK;
    int64_t os = out->rank ? out->stride[dim] * (int64_t)oj_dtype_size(out->dtype) : 0;
    size_t es = oj_dtype_size(out->dtype);
    const char *sb = base(src);
    char *ob = base(out);
    do {
        int64_t j = index_at(index, src->rank ? w.idx[dim] : 0);
        if (add) add_elem(ob + w.off[1] + j * os, sb + w.off[0], out->dtype, alpha);
        else memmove(ob + w.off[1] + j * os, sb + w.off[0], es);
    } while (walk_next(&w));
    return OJ_OK;
}

oj_status oj_cpu_index_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                           const oj_tensor *src, double alpha) {
    return index_put(eng, "index_add", out, dim, index, src, true, alpha);
}

oj_status oj_cpu_index_copy(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                            const oj_tensor *src) {
    return index_put(eng, "index_copy", out, dim, index, src, false, 0.0);
}
