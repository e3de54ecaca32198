/* Views: reshape/view, permute, transpose, narrow, slice, expand, squeeze,
 * unsqueeze, flatten, select. The geometry lives in oj__view_* helpers
 * (views_internal.h); the public ops validate the input, compute the
 * geometry and make a handle sharing the storage. No autograd here. */
#include <string.h>

#include "ojas/ops.h"
#include "ops/views_internal.h"

#define SHAPE(t, buf) oj__shape_fmt(buf, sizeof buf, (t)->rank, (t)->shape)

void oj__view_of(const oj_tensor *t, oj_view_geom *g) {
    g->rank = t->rank;
    memcpy(g->shape, t->shape, sizeof g->shape);
    memcpy(g->stride, t->stride, sizeof g->stride);
    g->offset = t->offset;
}

bool oj__view_dim(oj_engine *eng, const char *op, int rank, int d, int *out) {
    int r = rank > 0 ? rank : 1; /* torch lets a 0-d tensor name dim 0 / -1 */
    if (d < -r || d >= r) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: dim %d out of range for a rank-%d tensor "
                     "(expected %d..%d)", op, d, rank, -r, r - 1);
        return false;
    }
    *out = d < 0 ? d + r : d;
    return true;
}

/* Dim index into an actual dim of t (rank >= 1 required). */
static bool real_dim(const oj_tensor *t, const char *op, int d, int *out) {
    char buf[160];
    if (t->rank == 0) {
        oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE, "%s: dim %d of a rank-0 tensor %s", op, d,
                     SHAPE(t, buf));
        return false;
    }
    return oj__view_dim(t->eng, op, t->rank, d, out);
}

bool oj__view_infer_shape(const oj_tensor *t, const char *op, int rank, const int64_t *shape,
                          int64_t *out) {
    char b1[160], b2[160];
    if (rank < 0 || rank > OJ_MAX_RANK || (rank > 0 && shape == NULL)) {
        oj_set_error(t->eng, OJ_ERR_SHAPE, "%s: target rank %d must be 0..%d with a shape", op,
                     rank, OJ_MAX_RANK);
        return false;
    }
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < rank; d++) {
        out[d] = shape[d];
        if (shape[d] == -1) {
            if (infer >= 0) {
                oj_set_error(t->eng, OJ_ERR_SHAPE, "%s: only one dim may be -1 in %s", op,
                             oj__shape_fmt(b1, sizeof b1, rank, shape));
                return false;
            }
            infer = d;
        } else if (shape[d] < 0) {
            oj_set_error(t->eng, OJ_ERR_SHAPE, "%s: invalid dim %lld in %s", op,
                         (long long)shape[d], oj__shape_fmt(b1, sizeof b1, rank, shape));
            return false;
        } else if (__builtin_mul_overflow(known, shape[d], &known)) {
            oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE, "%s: shape %s overflows int64", op,
                         oj__shape_fmt(b1, sizeof b1, rank, shape));
            return false;
        }
    }
    int64_t n = oj_numel(t);
    if (infer >= 0) {
        if (known == 0 || n % known != 0) {
            oj_set_error(t->eng, OJ_ERR_SHAPE, "%s: shape %s is invalid for input %s of %lld elements",
                         op, oj__shape_fmt(b1, sizeof b1, rank, shape), SHAPE(t, b2), (long long)n);
            return false;
        }
        out[infer] = n / known;
    } else if (known != n) {
        oj_set_error(t->eng, OJ_ERR_SHAPE, "%s: shape %s is invalid for input %s of %lld elements",
                     op, oj__shape_fmt(b1, sizeof b1, rank, shape), SHAPE(t, b2), (long long)n);
        return false;
    }
    return true;
}

/* ATen's computeStride: a view exists when each run of new dims maps onto
 * a run of old dims that is contiguous within itself. */
bool oj__view_reshape(const oj_tensor *t, int rank, const int64_t *shape, oj_view_geom *g,
                      bool *viewable) {
    g->rank = rank;
    g->offset = t->offset;
    memcpy(g->shape, shape, (size_t)rank * sizeof *shape);
    *viewable = true;
    if (t->rank == 0 || oj_numel(t) == 0) {
        oj__contiguous_strides(rank, g->shape, g->stride);
        return true;
    }
    int view_d = rank - 1;
    int64_t chunk_base_stride = t->stride[t->rank - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 || (t->shape[d - 1] != 1 && t->stride[d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                g->stride[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) {
                *viewable = false;
                return true;
            }
            if (d > 0) {
                chunk_base_stride = t->stride[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if (view_d != -1) *viewable = false;
    return true;
}

bool oj__view_permute(const oj_tensor *t, const char *op, int ndims, const int *dims,
                      oj_view_geom *g) {
    char buf[160];
    if (ndims != t->rank || (ndims > 0 && dims == NULL)) {
        oj_set_error(t->eng, OJ_ERR_SHAPE, "%s: %d dims given for %s of rank %d", op, ndims,
                     SHAPE(t, buf), t->rank);
        return false;
    }
    bool seen[OJ_MAX_RANK] = {false};
    g->rank = t->rank;
    g->offset = t->offset;
    for (int i = 0; i < ndims; i++) {
        int d;
        if (!real_dim(t, op, dims[i], &d)) return false;
        if (seen[d]) {
            oj_set_error(t->eng, OJ_ERR_SHAPE, "%s: dim %d repeated in the permutation of %s", op,
                         dims[i], SHAPE(t, buf));
            return false;
        }
        seen[d] = true;
        g->shape[i] = t->shape[d];
        g->stride[i] = t->stride[d];
    }
    return true;
}

bool oj__view_transpose(const oj_tensor *t, int d0, int d1, oj_view_geom *g) {
    int a, b;
    oj__view_of(t, g);
    if (t->rank == 0) return oj__view_dim(t->eng, "transpose", 0, d0, &a) &&
                             oj__view_dim(t->eng, "transpose", 0, d1, &b);
    if (!real_dim(t, "transpose", d0, &a) || !real_dim(t, "transpose", d1, &b)) return false;
    g->shape[a] = t->shape[b];
    g->stride[a] = t->stride[b];
    g->shape[b] = t->shape[a];
    g->stride[b] = t->stride[a];
    return true;
}

bool oj__view_narrow(const oj_tensor *t, int dim, int64_t start, int64_t length, oj_view_geom *g) {
    char buf[160];
    int d;
    if (!real_dim(t, "narrow", dim, &d)) return false;
    int64_t size = t->shape[d];
    if (start < -size || start > size) {
        oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE,
                     "narrow: start %lld out of range for size %lld of dim %d of %s",
                     (long long)start, (long long)size, d, SHAPE(t, buf));
        return false;
    }
    if (start < 0) start += size;
    if (length < 0 || length > size - start) {
        oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE,
                     "narrow: start %lld + length %lld exceeds size %lld of dim %d of %s",
                     (long long)start, (long long)length, (long long)size, d, SHAPE(t, buf));
        return false;
    }
    oj__view_of(t, g);
    g->shape[d] = length;
    g->offset += start * t->stride[d] * (int64_t)oj_dtype_size(t->dtype);
    return true;
}

bool oj__view_slice(const oj_tensor *t, int dim, int64_t start, int64_t end, int64_t step,
                    oj_view_geom *g) {
    char buf[160];
    int d;
    if (!real_dim(t, "slice", dim, &d)) return false;
    if (step <= 0) {
        oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE, "slice: step %lld must be > 0 (dim %d of %s)",
                     (long long)step, d, SHAPE(t, buf));
        return false;
    }
    int64_t size = t->shape[d];
    if (start < 0) start = start < -size ? 0 : start + size;
    if (end < 0) end = end < -size ? 0 : end + size;
    if (start > size) start = size;
    if (end > size) end = size;
    if (end < start) end = start;
    int64_t len = (end - start) / step + ((end - start) % step != 0);
    oj__view_of(t, g);
    g->shape[d] = len;
    g->stride[d] = t->stride[d] * step;
    g->offset += start * t->stride[d] * (int64_t)oj_dtype_size(t->dtype);
    return true;
}

bool oj__view_expand(const oj_tensor *t, int rank, const int64_t *shape, oj_view_geom *g) {
    char b1[160], b2[160];
    if (rank < t->rank || rank > OJ_MAX_RANK || (rank > 0 && shape == NULL)) {
        oj_set_error(t->eng, OJ_ERR_SHAPE, "expand: cannot expand %s to rank %d (need %d..%d)",
                     SHAPE(t, b1), rank, t->rank, OJ_MAX_RANK);
        return false;
    }
    g->rank = rank;
    g->offset = t->offset;
    for (int d = 0; d < rank; d++) {
        int sd = d - (rank - t->rank);
        int64_t want = shape[d];
        if (sd < 0) {
            if (want < 0) {
                oj_set_error(t->eng, OJ_ERR_SHAPE,
                             "expand: new leading dim %d of %s must be >= 0 (input %s)", d,
                             oj__shape_fmt(b1, sizeof b1, rank, shape), SHAPE(t, b2));
                return false;
            }
            g->shape[d] = want;
            g->stride[d] = 0;
        } else if (want == -1 || want == t->shape[sd]) {
            g->shape[d] = t->shape[sd];
            g->stride[d] = t->stride[sd];
        } else if (t->shape[sd] == 1 && want >= 0) {
            g->shape[d] = want;
            g->stride[d] = 0;
        } else {
            oj_set_error(t->eng, OJ_ERR_SHAPE,
                         "expand: cannot expand %s to %s: size %lld of dim %d must be 1 or %lld",
                         SHAPE(t, b2), oj__shape_fmt(b1, sizeof b1, rank, shape),
                         (long long)t->shape[sd], sd, (long long)want);
            return false;
        }
    }
    int64_t n;
    if (oj_shape_numel(rank, g->shape, t->dtype, &n) != OJ_OK) {
        oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE, "expand: shape %s overflows int64",
                     oj__shape_fmt(b1, sizeof b1, rank, g->shape));
        return false;
    }
    return true;
}

static void drop_dim(oj_view_geom *g, int d) {
    for (int k = d; k < g->rank - 1; k++) {
        g->shape[k] = g->shape[k + 1];
        g->stride[k] = g->stride[k + 1];
    }
    g->rank--;
}

bool oj__view_squeeze(const oj_tensor *t, int dim, oj_view_geom *g) {
    int d;
    if (!oj__view_dim(t->eng, "squeeze", t->rank, dim, &d)) return false;
    oj__view_of(t, g);
    if (t->rank > 0 && t->shape[d] == 1) drop_dim(g, d);
    return true;
}

void oj__view_squeeze_all(const oj_tensor *t, oj_view_geom *g) {
    oj__view_of(t, g);
    for (int d = g->rank - 1; d >= 0; d--)
        if (g->shape[d] == 1) drop_dim(g, d);
}

bool oj__view_unsqueeze(const oj_tensor *t, int dim, oj_view_geom *g) {
    char buf[160];
    if (t->rank >= OJ_MAX_RANK) {
        oj_set_error(t->eng, OJ_ERR_SHAPE, "unsqueeze: %s already has the maximum rank %d",
                     SHAPE(t, buf), OJ_MAX_RANK);
        return false;
    }
    int d;
    if (!oj__view_dim(t->eng, "unsqueeze", t->rank + 1, dim, &d)) return false;
    oj__view_of(t, g);
    for (int k = t->rank; k > d; k--) {
        g->shape[k] = g->shape[k - 1];
        g->stride[k] = g->stride[k - 1];
    }
    g->shape[d] = 1;
    g->stride[d] = d < t->rank ? t->shape[d] * t->stride[d] : 1;
    g->rank = t->rank + 1;
    return true;
}

bool oj__view_select(const oj_tensor *t, int dim, int64_t index, oj_view_geom *g) {
    char buf[160];
    int d;
    if (!real_dim(t, "select", dim, &d)) return false;
    int64_t size = t->shape[d];
    if (index < -size || index >= size) {
        oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE,
                     "select: index %lld out of range for size %lld of dim %d of %s",
                     (long long)index, (long long)size, d, SHAPE(t, buf));
        return false;
    }
    if (index < 0) index += size;
    oj__view_of(t, g);
    g->offset += index * t->stride[d] * (int64_t)oj_dtype_size(t->dtype);
    drop_dim(g, d);
    return true;
}

bool oj__view_flatten_shape(const oj_tensor *t, int start_dim, int end_dim, int *rank,
                            int64_t *shape) {
    char buf[160];
    if (t->rank == 0) {
        int d;
        if (!oj__view_dim(t->eng, "flatten", 0, start_dim, &d) ||
            !oj__view_dim(t->eng, "flatten", 0, end_dim, &d))
            return false;
        *rank = 1;
        shape[0] = 1;
        return true;
    }
    int s, e;
    if (!real_dim(t, "flatten", start_dim, &s) || !real_dim(t, "flatten", end_dim, &e))
        return false;
    if (s > e) {
        oj_set_error(t->eng, OJ_ERR_OUT_OF_RANGE,
                     "flatten: start_dim %d comes after end_dim %d for %s", start_dim, end_dim,
                     SHAPE(t, buf));
        return false;
    }
    int r = 0;
    for (int d = 0; d < s; d++) shape[r++] = t->shape[d];
    int64_t m = 1;
    for (int d = s; d <= e; d++) m *= t->shape[d];
    shape[r++] = m;
    for (int d = e + 1; d < t->rank; d++) shape[r++] = t->shape[d];
    *rank = r;
    return true;
}

oj_tensor *oj__view_make(oj_tensor *t, const oj_view_geom *g) {
    return oj__tensor_new(t->eng, t->storage, g->offset, g->rank, g->shape, g->stride, t->dtype);
}

/* ---------------------------------------------------------------- public ops */

static bool check(oj_tensor *t, const char *op) {
    return oj__check_tensor(oj__engine_of(t), t, op, "input");
}

/* Reshape to a resolved shape: view, else (copy_ok) contiguous copy. */
static oj_tensor *reshape_resolved(oj_tensor *t, int rank, const int64_t *shape, bool copy_ok,
                                   const char *op) {
    oj_view_geom g;
    bool viewable;
    oj__view_reshape(t, rank, shape, &g, &viewable);
    if (viewable) return oj__view_make(t, &g);
    if (!copy_ok) {
        char b1[160], b2[160];
        oj_set_error(t->eng, OJ_ERR_SHAPE,
                     "%s: cannot view %s (strides not compatible) as %s; use reshape or contiguous",
                     op, SHAPE(t, b1), oj__shape_fmt(b2, sizeof b2, rank, shape));
        return NULL;
    }
    oj_tensor *c = oj__clone(t);
    if (c == NULL) return NULL;
    oj_view_geom cg;
    oj__view_reshape(c, rank, shape, &cg, &viewable);
    oj_tensor *out = oj__view_make(c, &cg);
    oj_release(c);
    return out;
}

oj_tensor *oj_reshape(oj_tensor *t, int rank, const int64_t *shape) {
    if (!check(t, "reshape")) return NULL;
    int64_t s[OJ_MAX_RANK];
    if (!oj__view_infer_shape(t, "reshape", rank, shape, s)) return NULL;
    return oj__view_record(t, reshape_resolved(t, rank, s, true, "reshape"), "reshape",
                           OJ_VIEW_RESHAPE, 0, NULL);
}

oj_tensor *oj_view(oj_tensor *t, int rank, const int64_t *shape) {
    if (!check(t, "view")) return NULL;
    int64_t s[OJ_MAX_RANK];
    if (!oj__view_infer_shape(t, "view", rank, shape, s)) return NULL;
    return oj__view_record(t, reshape_resolved(t, rank, s, false, "view"), "view",
                           OJ_VIEW_RESHAPE, 0, NULL);
}

oj_tensor *oj_permute(oj_tensor *t, int ndims, const int *dims) {
    oj_view_geom g;
    if (!check(t, "permute") || !oj__view_permute(t, "permute", ndims, dims, &g)) return NULL;
    int64_t p[OJ_MAX_RANK];
    for (int d = 0; d < ndims && d < OJ_MAX_RANK; d++) p[d] = dims[d];
    return oj__view_record(t, oj__view_make(t, &g), "permute", OJ_VIEW_PERMUTE, ndims, p);
}

oj_tensor *oj_transpose(oj_tensor *t, int d0, int d1) {
    oj_view_geom g;
    if (!check(t, "transpose") || !oj__view_transpose(t, d0, d1, &g)) return NULL;
    int64_t p[2] = {d0, d1};
    return oj__view_record(t, oj__view_make(t, &g), "transpose", OJ_VIEW_TRANSPOSE, 2, p);
}

oj_tensor *oj_narrow(oj_tensor *t, int dim, int64_t start, int64_t length) {
    oj_view_geom g;
    if (!check(t, "narrow") || !oj__view_narrow(t, dim, start, length, &g)) return NULL;
    int64_t p[3] = {dim, start, length};
    return oj__view_record(t, oj__view_make(t, &g), "narrow", OJ_VIEW_NARROW, 3, p);
}

oj_tensor *oj_slice(oj_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
    oj_view_geom g;
    if (!check(t, "slice") || !oj__view_slice(t, dim, start, end, step, &g)) return NULL;
    int64_t p[4] = {dim, start, end, step};
    return oj__view_record(t, oj__view_make(t, &g), "slice", OJ_VIEW_SLICE, 4, p);
}

oj_tensor *oj_expand(oj_tensor *t, int rank, const int64_t *shape) {
    oj_view_geom g;
    if (!check(t, "expand") || !oj__view_expand(t, rank, shape, &g)) return NULL;
    return oj__view_record(t, oj__view_make(t, &g), "expand", OJ_VIEW_EXPAND, 0, NULL);
}

oj_tensor *oj_squeeze(oj_tensor *t, int dim) {
    oj_view_geom g;
    if (!check(t, "squeeze") || !oj__view_squeeze(t, dim, &g)) return NULL;
    return oj__view_record(t, oj__view_make(t, &g), "squeeze", OJ_VIEW_RESHAPE, 0, NULL);
}

oj_tensor *oj_squeeze_all(oj_tensor *t) {
    oj_view_geom g;
    if (!check(t, "squeeze_all")) return NULL;
    oj__view_squeeze_all(t, &g);
    return oj__view_record(t, oj__view_make(t, &g), "squeeze", OJ_VIEW_RESHAPE, 0, NULL);
}

oj_tensor *oj_unsqueeze(oj_tensor *t, int dim) {
    oj_view_geom g;
    if (!check(t, "unsqueeze") || !oj__view_unsqueeze(t, dim, &g)) return NULL;
    return oj__view_record(t, oj__view_make(t, &g), "unsqueeze", OJ_VIEW_RESHAPE, 0, NULL);
}

oj_tensor *oj_flatten(oj_tensor *t, int start_dim, int end_dim) {
    int rank;
    int64_t shape[OJ_MAX_RANK];
    if (!check(t, "flatten") || !oj__view_flatten_shape(t, start_dim, end_dim, &rank, shape))
        return NULL;
    return oj__view_record(t, reshape_resolved(t, rank, shape, true, "flatten"), "flatten",
                           OJ_VIEW_RESHAPE, 0, NULL);
}

oj_tensor *oj_select(oj_tensor *t, int dim, int64_t index) {
    oj_view_geom g;
    if (!check(t, "select") || !oj__view_select(t, dim, index, &g)) return NULL;
    int64_t p[2] = {dim, index};
    return oj__view_record(t, oj__view_make(t, &g), "select", OJ_VIEW_SELECT, 2, p);
}
