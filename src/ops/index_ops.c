/* Index ops: gather, scatter_add, index_select, index_add, index_copy_
 * (backend index kernels) and one_hot (composed). Index tensors are i64 (or i32); values
 * are checked by the kernels, which fail with OJ_ERR_OUT_OF_RANGE naming
 * the op and the bad index. */
#include <math.h>
#include <string.h>

#include "ops/ops_common.h"

#define SHAPE(t, buf) oj__shape_fmt(buf, sizeof buf, (t)->rank, (t)->shape)

static bool index_dtype_ok(oj_engine *eng, const char *op, const oj_tensor *index) {
    if (index->dtype == OJ_I64 || index->dtype == OJ_I32) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: index must be i64 (or i32), got %s", op,
                 oj_dtype_name(index->dtype));
    return false;
}

static bool same_dtype(oj_engine *eng, const char *op, const oj_tensor *x, const oj_tensor *src) {
    if (x->dtype == src->dtype) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: src dtype %s differs from x dtype %s", op,
                 oj_dtype_name(src->dtype), oj_dtype_name(x->dtype));
    return false;
}

/* A new contiguous copy of x through the backend copy entry. */
static oj_tensor *clone_raw(oj_engine *eng, const char *op, const oj_tensor *x) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *) = OJ_KERNEL(eng, copy, op);
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    if (out && !oj__kernel_ok(eng, k(eng, out, x), op)) {
        oj_release(out);
        return NULL;
    }
    return out;
}

static bool run_scatter_add(oj_engine *eng, const char *op, oj_tensor *out, int dim,
                            const oj_tensor *index, const oj_tensor *src) {
    oj_status (*k)(oj_engine *, oj_tensor *, int, const oj_tensor *, const oj_tensor *) =
        OJ_KERNEL(eng, scatter_add, op);
    return k != NULL && oj__kernel_ok(eng, k(eng, out, dim, index, src), op);
}

static bool run_index_add(oj_engine *eng, const char *op, oj_tensor *out, int dim,
                          const oj_tensor *index, const oj_tensor *src, double alpha) {
    oj_status (*k)(oj_engine *, oj_tensor *, int, const oj_tensor *, const oj_tensor *, double) =
        OJ_KERNEL(eng, index_add, op);
    return k != NULL && oj__kernel_ok(eng, k(eng, out, dim, index, src, alpha), op);
}

/* ---------------------------------------------------------------- gather */

static oj_status gather_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *index = oj__node_saved(n, 0);
    if (index == NULL) return oj_last_status(n->eng);
    const oj_edge *e = &n->in[0];
    oj_tensor *gx = oj_zeros(n->eng, e->rank, e->shape, go[0]->dtype);
    if (gx == NULL || !run_scatter_add(n->eng, n->op, gx, (int)n->i[0], index, go[0])) {
        oj_release(gx);
        return oj_last_status(n->eng);
    }
    gi[0] = gx;
    return OJ_OK;
}

/* Shared shape rule of gather and scatter_add: same rank, and index no
 * larger than `t` in every dim but `dim` (every dim when all_dims). */
static bool index_fits(oj_engine *eng, const char *op, const oj_tensor *index,
                       const oj_tensor *t, const char *tname, int dim, bool all_dims) {
    char b1[160], b2[160];
    if (index->rank != t->rank) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: index %s and %s %s must have the same rank", op,
                     SHAPE(index, b1), tname, SHAPE(t, b2));
        return false;
    }
    for (int d = 0; d < t->rank; d++) {
        if ((all_dims || d != dim) && index->shape[d] > t->shape[d]) {
            oj_set_error(eng, OJ_ERR_SHAPE,
                         "%s: index %s is larger than %s %s in dim %d", op, SHAPE(index, b1),
                         tname, SHAPE(t, b2), d);
            return false;
        }
    }
    return true;
}

/* The gather and index_select kernel entries: out = k(x, dim, index). */
typedef oj_status (*index_kernel)(oj_engine *, oj_tensor *, const oj_tensor *, int,
                                  const oj_tensor *);

/* Shared tail of gather and index_select: a new [rank, shape] tensor of x's
 * dtype filled by k, recorded with `backward` (dim in i[0], the index
 * saved) when x is a float tensor. */
static oj_tensor *run_indexed(oj_engine *eng, const char *op, index_kernel k,
                              oj_backward_fn backward, oj_tensor *x, int dim, oj_tensor *index,
                              int rank, const int64_t *shape) {
    oj_tensor *out = oj__tensor_alloc(eng, rank, shape, x->dtype, op);
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, out, x, dim, index), op)) {
        oj_release(out);
        return NULL;
    }
    if (oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, op, backward, 1, x);
        if (nd) {
            nd->i[0] = dim;
            oj__node_save(nd, index);
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

oj_tensor *oj_gather(oj_tensor *x, int dim, oj_tensor *index) {
    oj_tensor *in[2] = {x, index};
    oj_engine *eng = oj__ops_engine("gather", 2, in);
    if (eng == NULL) return NULL;
    if (!index_dtype_ok(eng, "gather", index) || !oj__norm_dim(eng, "gather", &dim, x->rank) ||
        !index_fits(eng, "gather", index, x, "x", dim, false))
        return NULL;
    index_kernel k = OJ_KERNEL(eng, gather, "gather");
    if (k == NULL) return NULL;
    return run_indexed(eng, "gather", k, gather_backward, x, dim, index, index->rank,
                       index->shape);
}

/* ---------------------------------------------------------------- scatter_add */

static oj_status scatter_add_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *g = go[0];
    if (oj__node_needs(n, 0)) {
        gi[0] = oj__contiguous(g);
        if (gi[0] == NULL) return oj_last_status(n->eng);
    }
    if (oj__node_needs(n, 1)) {
        oj_tensor *index = oj__node_saved(n, 0);
        if (index == NULL) return oj_last_status(n->eng);
        const oj_edge *e = &n->in[1];
        oj_tensor *gs = oj_gather(g, (int)n->i[0], index);
        if (gs == NULL) return oj_last_status(n->eng);
        bool same = true;
        for (int d = 0; d < e->rank; d++) same &= e->shape[d] == gs->shape[d];
        if (same) {
            gi[1] = gs;
        } else { /* src larger than index: zero beyond the index's extent */
            oj_tensor *z = oj_zeros(n->eng, e->rank, e->shape, gs->dtype);
            oj_tensor *v = z ? oj__tensor_view(z, gs->rank, gs->shape, z->stride, z->offset)
                             : NULL;
            oj_status st = v ? oj_copy_(v, gs) : oj_last_status(n->eng);
            oj_release(v);
            oj_release(gs);
            if (st != OJ_OK) {
                oj_release(z);
                return st;
            }
            gi[1] = z;
        }
    }
    return OJ_OK;
}

oj_tensor *oj_scatter_add(oj_tensor *x, int dim, oj_tensor *index, oj_tensor *src) {
    oj_tensor *in[3] = {x, index, src};
    oj_engine *eng = oj__ops_engine("scatter_add", 3, in);
    if (eng == NULL) return NULL;
    if (!index_dtype_ok(eng, "scatter_add", index) || !same_dtype(eng, "scatter_add", x, src) ||
        !oj__norm_dim(eng, "scatter_add", &dim, x->rank) ||
        !index_fits(eng, "scatter_add", index, x, "x", dim, false) ||
        !index_fits(eng, "scatter_add", index, src, "src", dim, true))
        return NULL;
    oj_tensor *out = clone_raw(eng, "scatter_add", x);
    if (out == NULL) return NULL;
    if (!run_scatter_add(eng, "scatter_add", out, dim, index, src)) {
        oj_release(out);
        return NULL;
    }
    if (oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, "scatter_add", scatter_add_backward, 2, x, src);
        if (nd) {
            nd->i[0] = dim;
            oj__node_save(nd, index);
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

/* ---------------------------------------------------------------- index_select */

static bool index_1d(oj_engine *eng, const char *op, const oj_tensor *index) {
    char b[160];
    if (!index_dtype_ok(eng, op, index)) return false;
    if (index->rank > 1) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: index must be 1-D (or 0-D), got %s", op,
                     SHAPE(index, b));
        return false;
    }
    return true;
}

static oj_status index_select_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *index = oj__node_saved(n, 0);
    if (index == NULL) return oj_last_status(n->eng);
    const oj_edge *e = &n->in[0];
    oj_tensor *gx = oj_zeros(n->eng, e->rank, e->shape, go[0]->dtype);
    if (gx == NULL || !run_index_add(n->eng, n->op, gx, (int)n->i[0], index, go[0], 1.0)) {
        oj_release(gx);
        return oj_last_status(n->eng);
    }
    gi[0] = gx;
    return OJ_OK;
}

oj_tensor *oj_index_select(oj_tensor *x, int dim, oj_tensor *index) {
    oj_tensor *in[2] = {x, index};
    oj_engine *eng = oj__ops_engine("index_select", 2, in);
    if (eng == NULL) return NULL;
    if (!index_1d(eng, "index_select", index) ||
        !oj__norm_dim(eng, "index_select", &dim, x->rank))
        return NULL;
    int64_t shape[OJ_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    int64_t K = oj_numel(index);
    if (x->rank == 0 && K != 1) {
        oj_set_error(eng, OJ_ERR_SHAPE, "index_select: a rank-0 x takes one index, got %lld",
                     (long long)K);
        return NULL;
    }
    if (x->rank) shape[dim] = K;
    index_kernel k = OJ_KERNEL(eng, index_select, "index_select");
    if (k == NULL) return NULL;
    return run_indexed(eng, "index_select", k, index_select_backward, x, dim, index, x->rank,
                       shape);
}

/* ---------------------------------------------------------------- index_add */

static oj_status index_add_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *g = go[0];
    if (oj__node_needs(n, 0)) {
        gi[0] = oj__contiguous(g);
        if (gi[0] == NULL) return oj_last_status(n->eng);
    }
    if (oj__node_needs(n, 1)) {
        oj_tensor *index = oj__node_saved(n, 0);
        if (index == NULL) return oj_last_status(n->eng);
        oj_tensor *s = oj_index_select(g, (int)n->i[0], index);
        gi[1] = s && n->f[0] != 1.0 ? oj_mul_scalar(s, n->f[0]) : oj_retain(s);
        oj_release(s);
        if (gi[1] == NULL) return oj_last_status(n->eng);
    }
    return OJ_OK;
}

/* index_add / index_copy_: src must be x's shape with dim of the index's
 * length (OJ_ERR_SHAPE naming op otherwise). */
static bool src_fits_index(oj_engine *eng, const char *op, const oj_tensor *x, int dim,
                           const oj_tensor *index, const oj_tensor *src) {
    bool fits = src->rank == x->rank;
    int64_t K = oj_numel(index);
    for (int d = 0; fits && d < x->rank; d++)
        fits = src->shape[d] == (d == dim ? K : x->shape[d]);
    if (x->rank == 0) fits = fits && K == 1;
    if (fits) return true;
    char b1[160], b2[160], b3[160];
    oj_set_error(eng, OJ_ERR_SHAPE, "%s: src %s must be x %s with dim %d of size %lld (the index %s)",
                 op, SHAPE(src, b1), SHAPE(x, b2), dim, (long long)K, SHAPE(index, b3));
    return false;
}

oj_tensor *oj_index_add(oj_tensor *x, int dim, oj_tensor *index, oj_tensor *src, double alpha) {
    oj_tensor *in[3] = {x, index, src};
    oj_engine *eng = oj__ops_engine("index_add", 3, in);
    if (eng == NULL) return NULL;
    if (!index_1d(eng, "index_add", index) || !same_dtype(eng, "index_add", x, src) ||
        !oj__norm_dim(eng, "index_add", &dim, x->rank))
        return NULL;
    if (!src_fits_index(eng, "index_add", x, dim, index, src)) return NULL;
    if (!oj_dtype_is_float(x->dtype) && alpha != floor(alpha)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "index_add: alpha %g must be an integer for %s tensors", alpha,
                     oj_dtype_name(x->dtype));
        return NULL;
    }
    oj_tensor *out = clone_raw(eng, "index_add", x);
    if (out == NULL) return NULL;
    if (!run_index_add(eng, "index_add", out, dim, index, src, alpha)) {
        oj_release(out);
        return NULL;
    }
    if (oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, "index_add", index_add_backward, 2, x, src);
        if (nd) {
            nd->i[0] = dim;
            nd->f[0] = alpha;
            oj__node_save(nd, index);
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

/* ---------------------------------------------------------------- index_copy_ */

oj_status oj_index_copy_(oj_tensor *x, int dim, oj_tensor *index, oj_tensor *src) {
    const char *op = "index_copy_";
    oj_tensor *in[3] = {x, index, src};
    oj_engine *eng = oj__ops_engine(op, 3, in);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (!index_1d(eng, op, index) || !same_dtype(eng, op, x, src) ||
        !oj__norm_dim(eng, op, &dim, x->rank))
        return oj_last_status(eng);
    if (!oj__inplace_ok(eng, x, op)) return OJ_ERR_STATE;
    if (!src_fits_index(eng, op, x, dim, index, src)) return oj_last_status(eng);
    if (src->storage == x->storage || index->storage == x->storage)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "%s: x shares memory with %s (copy it first)", op,
                            src->storage == x->storage ? "src" : "index");
    if (!oj__check_writable(eng, x, op, "x")) return OJ_ERR_INVALID_ARGUMENT;
    oj_status (*k)(oj_engine *, oj_tensor *, int, const oj_tensor *, const oj_tensor *) =
        OJ_KERNEL(eng, index_copy, op);
    if (k == NULL || !oj__kernel_ok(eng, k(eng, x, dim, index, src), op))
        return oj_last_status(eng);
    oj__storage_written(x->storage);
    return OJ_OK;
}

/* ---------------------------------------------------------------- one_hot */

/* min and max of an integer tensor (numel > 0) through the reduce entry. */
static bool int_range(oj_engine *eng, oj_tensor *t, int64_t *lo, int64_t *hi) {
    oj_status (*k)(oj_engine *, oj_reduce_op, oj_tensor *, oj_tensor *, const oj_tensor *,
                   uint32_t, double) = OJ_KERNEL(eng, reduce, "one_hot");
    if (k == NULL) return false;
    int64_t shape[OJ_MAX_RANK];
    for (int d = 0; d < t->rank; d++) shape[d] = 1;
    uint32_t mask = t->rank ? (uint32_t)((1u << t->rank) - 1) : 0;
    oj_tensor *mn = oj__tensor_alloc(eng, t->rank, shape, OJ_I64, "one_hot");
    oj_tensor *mx = oj__tensor_alloc(eng, t->rank, shape, OJ_I64, "one_hot");
    bool ok = mn && mx && oj__kernel_ok(eng, k(eng, OJ_RED_MIN, mn, NULL, t, mask, 0), "one_hot") &&
              oj__kernel_ok(eng, k(eng, OJ_RED_MAX, mx, NULL, t, mask, 0), "one_hot");
    if (ok) {
        int64_t v[2];
        ok = oj_to_host(mn, &v[0], sizeof v[0]) == OJ_OK && oj_to_host(mx, &v[1], sizeof v[1]) == OJ_OK;
        *lo = v[0];
        *hi = v[1];
    }
    oj_release(mn);
    oj_release(mx);
    return ok;
}

oj_tensor *oj_one_hot(oj_tensor *indices, int64_t num_classes) {
    oj_engine *eng = oj__ops_engine1("one_hot", indices);
    if (eng == NULL) return NULL;
    char b[160];
    if (indices->dtype != OJ_I64 && indices->dtype != OJ_I32) {
        oj_set_error(eng, OJ_ERR_DTYPE, "one_hot: indices must be i64 (or i32), got %s",
                     oj_dtype_name(indices->dtype));
        return NULL;
    }
    if (indices->rank >= OJ_MAX_RANK) {
        oj_set_error(eng, OJ_ERR_SHAPE, "one_hot: indices %s already have the maximum rank %d",
                     SHAPE(indices, b), OJ_MAX_RANK);
        return NULL;
    }
    if (num_classes < -1) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "one_hot: num_classes must be >= 0 (or -1 to infer), got %lld",
                     (long long)num_classes);
        return NULL;
    }
    if (oj_numel(indices) == 0) {
        if (num_classes < 0) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                         "one_hot: cannot infer num_classes from empty indices %s",
                         SHAPE(indices, b));
            return NULL;
        }
    } else {
        int64_t lo, hi;
        if (!int_range(eng, indices, &lo, &hi)) return NULL;
        if (num_classes < 0) num_classes = hi < INT64_MAX ? hi + 1 : hi;
        if (lo < 0 || hi >= num_classes) {
            oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                         "one_hot: class index %lld out of range [0, %lld) in indices %s",
                         (long long)(lo < 0 ? lo : hi), (long long)num_classes, SHAPE(indices, b));
            return NULL;
        }
    }
    if (num_classes > ((int64_t)1 << 53)) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "one_hot: num_classes %lld is too large",
                     (long long)num_classes);
        return NULL;
    }
    /* (indices[..., None] == arange(num_classes)) as i64 */
    oj_tensor *classes = oj_arange(eng, 0, (double)num_classes, 1, OJ_I64);
    oj_tensor *u = classes ? oj_unsqueeze(indices, -1) : NULL;
    oj_tensor *eq = u ? oj_eq(u, classes) : NULL;
    oj_tensor *out = eq ? oj_cast(eq, OJ_I64) : NULL;
    oj_release(classes);
    oj_release(u);
    oj_release(eq);
    return out;
}
