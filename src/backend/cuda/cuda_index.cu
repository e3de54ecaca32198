/* CUDA indexing kernels: gather, scatter_add, index_select, index_add,
 * index_copy (contracts in backend.h; reference cpu_index.c).
 *
 * Accumulating kernels run one thread per "line" (every coordinate but
 * dim), adding along dim in increasing order: contributions to one output
 * element can only come from one line, so each element sums in the CPU's
 * row-major order and the result is deterministic (and the CPU's bits).
 * Index values are checked on the device; the first bad position in
 * row-major order is reported with the CPU's message. */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

struct ix_args {
    int rank, dim;        /* walk rank; dim of the walk that indexes (-1: none) */
    int64_t shape[OJ_MAX_RANK];
    int64_t st[3][OJ_MAX_RANK]; /* element strides over the walk (0 where skipped) */
    char *p[3];
    int dt[3], es[3];
    int64_t size;    /* size of the indexed dim of the target */
    int64_t tstride; /* target's stride along it (elements) */
    int64_t n;       /* positions (or lines) */
    int64_t K;       /* line length along dim (line kernels) */
    double alpha;
    unsigned long long *flag;
};

/* Offsets of walk position `pos` (row-major over shape, dims != skip when
 * skip >= 0) for the three tensors. */
__device__ static __forceinline__ void ix_offsets(const ix_args &a, int64_t pos, int skip,
                                                  int64_t *off) {
    off[0] = off[1] = off[2] = 0;
    for (int d = a.rank - 1; d >= 0; d--) {
        if (d == skip) continue;
        int64_t q = pos / a.shape[d], r = pos - q * a.shape[d];
        pos = q;
        off[0] += r * a.st[0][d];
        off[1] += r * a.st[1][d];
        off[2] += r * a.st[2][d];
    }
}

__device__ static __forceinline__ void copy_el(char *d, const char *s, int es) {
    switch (es) {
    case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
    case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
    case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
    default: *(unsigned long long *)d = *(const unsigned long long *)s; break;
    }
}

static __device__ __forceinline__ long long ld_int(const char *p, int dt) {
    switch (dt) {
    case OJ_I64: return *(const long long *)p;
    case OJ_I32: return *(const int32_t *)p;
    case OJ_U32: return *(const uint32_t *)p;
    case OJ_U16: return *(const uint16_t *)p;
    case OJ_U8: return *(const uint8_t *)p;
    default: return *(const uint8_t *)p != 0;
    }
}

/* *d += alpha * *s (add_elem of cpu_index.c). */
__device__ static __forceinline__ void add_el(char *d, const char *s, int dt, double alpha) {
    switch (dt) {
    case OJ_F32: *(float *)d = __fadd_rn(*(float *)d, (float)__dmul_rn(alpha, *(const float *)s)); break;
    case OJ_F64: *(double *)d = __dadd_rn(*(double *)d, __dmul_rn(alpha, *(const double *)s)); break;
    case OJ_BF16:
    case OJ_F16: oj_cu_st(d, dt, __dadd_rn(oj_cu_ld(d, dt), __dmul_rn(alpha, oj_cu_ld(s, dt)))); break;
    case OJ_BOOL: *(uint8_t *)d = *(uint8_t *)d || (alpha != 0 && *(const uint8_t *)s); break;
    default: {
        unsigned long long v = (unsigned long long)ld_int(d, dt) +
                               (unsigned long long)(long long)alpha * (unsigned long long)ld_int(s, dt);
        oj_cu_st_i64(d, dt, (long long)v);
        break;
    }
    }
}

/* gather: walk index's shape; 0 index, 1 out, 2 x (dim from the index) */
__global__ void k_gather(ix_args a) {
    for (int64_t pos = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; pos < a.n;
         pos += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        ix_offsets(a, pos, -1, off);
        long long j = oj_cu_ld_index(a.p[0] + off[0] * a.es[0], a.dt[0]);
        if (j < 0 || j >= a.size) {
            atomicMin(a.flag, (unsigned long long)pos);
            continue;
        }
        copy_el(a.p[1] + off[1] * a.es[1], a.p[2] + (off[2] + j * a.tstride) * a.es[2], a.es[1]);
    }
}

/* scatter_add: lines of index's shape without dim; 0 index, 1 src, 2 out */
__global__ void k_scatter_add(ix_args a) {
    for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < a.n;
         line += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        ix_offsets(a, line, a.dim, off);
        int64_t s0 = a.dim >= 0 ? a.st[0][a.dim] : 0, s1 = a.dim >= 0 ? a.st[1][a.dim] : 0;
        for (int64_t k = 0; k < a.K; k++) {
            long long j = oj_cu_ld_index(a.p[0] + (off[0] + k * s0) * a.es[0], a.dt[0]);
            if (j < 0 || j >= a.size) {
                /* row-major position: line's coordinates with k at dim */
                int64_t pos = 0, rem = line, mul = 1;
                for (int d = a.rank - 1; d >= 0; d--) {
                    int64_t c;
                    if (d == a.dim) {
                        c = k;
                    } else {
                        int64_t q = rem / a.shape[d];
                        c = rem - q * a.shape[d];
                        rem = q;
                    }
                    pos += c * mul;
                    mul *= a.shape[d];
                }
                atomicMin(a.flag, (unsigned long long)pos);
                continue;
            }
            add_el(a.p[2] + (off[2] + j * a.tstride) * a.es[2],
                   a.p[1] + (off[1] + k * s1) * a.es[1], a.dt[2], 1.0);
        }
    }
}

/* 1-D index check: first position k with index[k] outside [0, size). */
__global__ void k_index_check(const char *idx, int dt, int es, int64_t stride, int64_t n,
                              int64_t size, unsigned long long *flag) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        long long j = oj_cu_ld_index(idx + k * stride * es, dt);
        if (j < 0 || j >= size) atomicMin(flag, (unsigned long long)k);
    }
}

/* index_select: walk out's shape; 0 out, 1 x (dim from the index), 2 index
 * (strides: [dim] only) */
__global__ void k_index_select(ix_args a) {
    for (int64_t pos = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; pos < a.n;
         pos += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        ix_offsets(a, pos, -1, off);
        long long j = oj_cu_ld_index(a.p[2] + off[2] * a.es[2], a.dt[2]);
        copy_el(a.p[0] + off[0] * a.es[0], a.p[1] + (off[1] + j * a.tstride) * a.es[1], a.es[0]);
    }
}

/* index_add: lines of src's shape without dim; 0 src, 1 out, 2 index
 * (strides: [dim] only) */
__global__ void k_index_add(ix_args a) {
    for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < a.n;
         line += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        ix_offsets(a, line, a.dim, off);
        int64_t s0 = a.dim >= 0 ? a.st[0][a.dim] : 0, s2 = a.dim >= 0 ? a.st[2][a.dim] : 0;
        for (int64_t k = 0; k < a.K; k++) {
            long long j = oj_cu_ld_index(a.p[2] + k * s2 * a.es[2], a.dt[2]);
            add_el(a.p[1] + (off[1] + j * a.tstride) * a.es[1],
                   a.p[0] + (off[0] + k * s0) * a.es[0], a.dt[1], a.alpha);
        }
    }
}

/* index_copy: lines of src's shape without dim; 0 src, 1 out, 2 index
 * (strides: [dim] only). k in order, so a repeated index keeps the last k.
 * A bad index (possible only in a captured graph, whose check runs after
 * the replay) is flagged and skipped. */
__global__ void k_index_copy(ix_args a) {
    for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < a.n;
         line += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        ix_offsets(a, line, a.dim, off);
        int64_t s0 = a.dim >= 0 ? a.st[0][a.dim] : 0, s2 = a.dim >= 0 ? a.st[2][a.dim] : 0;
        for (int64_t k = 0; k < a.K; k++) {
            long long j = oj_cu_ld_index(a.p[2] + k * s2 * a.es[2], a.dt[2]);
            if (j < 0 || j >= a.size) {
                atomicMin(a.flag, (unsigned long long)k);
                continue;
            }
            copy_el(a.p[1] + (off[1] + j * a.tstride) * a.es[1],
                    a.p[0] + (off[0] + k * s0) * a.es[0], a.es[1]);
        }
    }
}

/* ---------------------------------------------------------------- host */

static void ix_init(ix_args *a, int rank, const int64_t *shape) {
    memset(a, 0, sizeof *a);
    a->rank = rank;
    a->dim = -1;
    for (int d = 0; d < OJ_MAX_RANK; d++) a->shape[d] = d < rank ? shape[d] : 1;
    a->n = 1;
    for (int d = 0; d < rank; d++) a->n *= shape[d];
}

/* Tensor k of the walk steps by t's strides, except along `skip`. */
static void ix_set(ix_args *a, int k, const oj_tensor *t, int skip) {
    a->p[k] = oj_cuda_ptr(t);
    a->dt[k] = (int)t->dtype;
    a->es[k] = (int)oj_dtype_size(t->dtype);
    for (int d = 0; d < a->rank && d < t->rank; d++) a->st[k][d] = d == skip ? 0 : t->stride[d];
}

static oj_status bad_index(oj_engine *eng, const char *op, const oj_tensor *index,
                           unsigned long long pos, int dim, int64_t size, bool one_d) {
    /* the index value and its multi-index (row-major over index's shape) */
    int64_t mi[OJ_MAX_RANK] = {0};
    int rank = one_d ? 1 : index->rank;
    int64_t off = 0;
    if (one_d) {
        mi[0] = (int64_t)pos;
        off = index->rank ? (int64_t)pos * index->stride[0] : 0;
    } else {
        int64_t rem = (int64_t)pos;
        for (int d = index->rank - 1; d >= 0; d--) {
            mi[d] = rem % index->shape[d];
            rem /= index->shape[d];
            off += mi[d] * index->stride[d];
        }
    }
    size_t is = oj_dtype_size(index->dtype);
    unsigned char buf[8] = {0};
    if (oj_cuda_d2h(eng, buf, oj_cuda_ptr(index) + off * (int64_t)is, is, op) != OJ_OK)
        return oj_last_status(eng);
    long long v;
    if (index->dtype == OJ_I32) {
        int32_t w;
        memcpy(&w, buf, 4);
        v = w;
    } else {
        memcpy(&v, buf, 8);
    }
    char b[160];
    return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                        "%s: index %lld out of range for dim %d of size %lld (at %s %s)", op, v,
                        dim, (long long)size, "index position", oj__shape_fmt(b, sizeof b, rank, mi));
}

/* Run a launched kernel's check, then the flag. */
static oj_status finish(oj_engine *eng, const char *op, const char *kernel,
                        const oj_tensor *index, int dim, int64_t size, bool one_d) {
    if (oj_cuda_check(eng, kernel) != OJ_OK) return oj_last_status(eng);
    unsigned long long f;
    if (oj_cuda_flags_read(eng, &f, 1, op) != OJ_OK) return oj_last_status(eng);
    if (f == ~0ull) return OJ_OK;
    return bad_index(eng, op, index, f, dim, size, one_d);
}

oj_status oj_cuda_gather(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                         const oj_tensor *index) {
    const char *op = "gather";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    ix_args a;
    ix_init(&a, index->rank, index->shape);
    ix_set(&a, 0, index, -1);
    ix_set(&a, 1, out, -1);
    ix_set(&a, 2, x, x->rank ? dim : -1);
    a.size = x->rank ? x->shape[dim] : 1;
    a.tstride = x->rank ? x->stride[dim] : 0;
    if (a.n == 0) return OJ_OK;
    if (oj_cuda_flags_reset(eng, 1, 0xff, 0xff, op) != OJ_OK) return oj_last_status(eng);
    a.flag = oj_cuda_state_of(eng)->flags;
    k_gather<<<oj_cuda_blocks(a.n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    return finish(eng, op, "gather", index, dim, a.size, false);
}

oj_status oj_cuda_scatter_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                              const oj_tensor *src) {
    const char *op = "scatter_add";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    ix_args a;
    ix_init(&a, index->rank, index->shape);
    if (a.n == 0) return OJ_OK;
    ix_set(&a, 0, index, -1);
    ix_set(&a, 1, src, -1);
    ix_set(&a, 2, out, out->rank ? dim : -1);
    a.size = out->rank ? out->shape[dim] : 1;
    a.tstride = out->rank ? out->stride[dim] : 0;
    a.dim = index->rank ? dim : -1;
    a.K = index->rank ? index->shape[dim] : 1;
    a.n = a.K ? a.n / a.K : 0; /* lines */
    if (a.n == 0) return OJ_OK;
    if (oj_cuda_flags_reset(eng, 1, 0xff, 0xff, op) != OJ_OK) return oj_last_status(eng);
    a.flag = oj_cuda_state_of(eng)->flags;
    k_scatter_add<<<oj_cuda_blocks(a.n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    return finish(eng, op, "scatter_add", index, dim, a.size, false);
}

/* Check a 1-D (or rank-0) index against size before anything is written. */
static oj_status check_1d(oj_engine *eng, const char *op, const oj_tensor *index, int dim,
                          int64_t size) {
    int64_t n = index->rank ? index->shape[0] : 1;
    if (n == 0) return OJ_OK;
    if (oj_cuda_flags_reset(eng, 1, 0xff, 0xff, op) != OJ_OK) return oj_last_status(eng);
    k_index_check<<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
        oj_cuda_ptr(index), (int)index->dtype, (int)oj_dtype_size(index->dtype),
        index->rank ? index->stride[0] : 0, n, size, oj_cuda_state_of(eng)->flags);
    return finish(eng, op, "index check", index, dim, size, true);
}

oj_status oj_cuda_index_select(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                               const oj_tensor *index) {
    const char *op = "index_select";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    int64_t size = x->rank ? x->shape[dim] : 1;
    if (check_1d(eng, op, index, dim, size) != OJ_OK) return oj_last_status(eng);
    ix_args a;
    ix_init(&a, out->rank, out->shape);
    if (a.n == 0) return OJ_OK;
    ix_set(&a, 0, out, -1);
    ix_set(&a, 1, x, x->rank ? dim : -1);
    a.p[2] = oj_cuda_ptr(index);
    a.dt[2] = (int)index->dtype;
    a.es[2] = (int)oj_dtype_size(index->dtype);
    if (out->rank) a.st[2][dim] = index->rank ? index->stride[0] : 0;
    a.size = size;
    a.tstride = x->rank ? x->stride[dim] : 0;
    k_index_select<<<oj_cuda_blocks(a.n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, "index_select");
}

oj_status oj_cuda_index_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                            const oj_tensor *src, double alpha) {
    const char *op = "index_add";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    int64_t size = out->rank ? out->shape[dim] : 1;
    if (check_1d(eng, op, index, dim, size) != OJ_OK) return oj_last_status(eng);
    ix_args a;
    ix_init(&a, src->rank, src->shape);
    if (a.n == 0) return OJ_OK;
    ix_set(&a, 0, src, -1);
    ix_set(&a, 1, out, out->rank ? dim : -1);
    a.p[2] = oj_cuda_ptr(index);
    a.dt[2] = (int)index->dtype;
    a.es[2] = (int)oj_dtype_size(index->dtype);
    if (src->rank) a.st[2][dim] = index->rank ? index->stride[0] : 0;
    a.size = size;
    a.tstride = out->rank ? out->stride[dim] : 0;
    a.dim = src->rank ? dim : -1;
    a.K = src->rank ? src->shape[dim] : 1;
    a.n = a.K ? a.n / a.K : 0;
    a.alpha = alpha;
    if (a.n == 0) return OJ_OK;
    k_index_add<<<oj_cuda_blocks(a.n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, "index_add");
}

oj_status oj_cuda_index_copy(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                             const oj_tensor *src) {
    const char *op = "index_copy";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    int64_t size = out->rank ? out->shape[dim] : 1;
    ix_args a;
    ix_init(&a, src->rank, src->shape);
    a.dim = src->rank ? dim : -1;
    a.K = src->rank ? src->shape[dim] : 1;
    a.n = a.K ? a.n / a.K : 0;
    bool capture = oj_cuda_capturing(eng);
    if (!capture) {
        /* eager: every index checked before anything is written */
        if (check_1d(eng, op, index, dim, size) != OJ_OK) return oj_last_status(eng);
        if (a.n == 0) return OJ_OK;
    } else {
        if (a.n == 0) return OJ_OK;
        /* captured: the kernel flags a bad index and the replay reports it,
         * reading the value at index + position (so a unit stride) */
        if (index->rank && index->shape[0] > 1 && index->stride[0] != 1)
            return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                                "%s: a strided index during a CUDA graph capture (copy it "
                                "contiguous before capturing)",
                                op);
        if (oj_cuda_flags_reset(eng, 1, 0xff, 0xff, op) != OJ_OK) return oj_last_status(eng);
    }
    ix_set(&a, 0, src, -1);
    ix_set(&a, 1, out, out->rank ? dim : -1);
    a.p[2] = oj_cuda_ptr(index);
    a.dt[2] = (int)index->dtype;
    a.es[2] = (int)oj_dtype_size(index->dtype);
    if (src->rank) a.st[2][dim] = index->rank ? index->stride[0] : 0;
    a.size = size;
    a.tstride = out->rank ? out->stride[dim] : 0;
    a.flag = oj_cuda_state_of(eng)->flags;
    k_index_copy<<<oj_cuda_blocks(a.n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    if (oj_cuda_check(eng, "index_copy") != OJ_OK) return oj_last_status(eng);
    if (capture) return oj_cuda_flags_defer(eng, OJ_CUDA_CHECK_INDEX, op, index, size, 0);
    return OJ_OK;
}
