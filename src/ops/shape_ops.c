/* Shape ops that copy: cat, stack, split/chunk (views), flip, pad,
 * masked_fill, tril/triu, repeat. Each is composed from the backend's copy,
 * fill and where entries applied to views of a fresh output, so it runs on
 * every backend; each records its own autograd node. */
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

#define SHAPE(t, buf) oj__shape_fmt(buf, sizeof buf, (t)->rank, (t)->shape)

/* dst (a view of a fresh output) = src converted to dst's dtype. */
static bool copy_into(oj_engine *eng, const char *op, oj_tensor *dst, const oj_tensor *src) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *) = OJ_KERNEL(eng, copy, op);
    return k != NULL && oj__kernel_ok(eng, k(eng, dst, src), op);
}

/* A view of t with dim `d` narrowed to [start, start + len) (no checks, no
 * autograd). */
static oj_tensor *narrow_raw(oj_tensor *t, int d, int64_t start, int64_t len) {
    int64_t shape[OJ_MAX_RANK];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = len;
    int64_t off = t->offset + start * t->stride[d] * (int64_t)oj_dtype_size(t->dtype);
    return oj__tensor_view(t, t->rank, shape, t->stride, off);
}

/* g made an independent gradient for an input of dtype dt. */
static oj_tensor *grad_as(oj_tensor *g, oj_dtype dt) {
    if (g == NULL) return NULL;
    return g->dtype == dt ? oj__contiguous(g) : oj_cast(g, dt);
}

/* ---------------------------------------------------------------- cat */

/* torch skips 1-D empty tensors in cat (the legacy "no shape" tensor). */
static bool legacy_empty(const oj_tensor *t) { return t->rank == 1 && t->shape[0] == 0; }

static oj_status cat_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    int dim = (int)n->i[0];
    uint64_t skip = (uint64_t)n->i[1];
    oj_tensor *g = go[0];
    int64_t off = 0;
    for (int k = 0; k < n->n_in; k++) {
        const oj_edge *e = &n->in[k];
        if (skip & (1u << k)) {
            if (oj__node_needs(n, k)) gi[k] = oj_zeros(n->eng, e->rank, e->shape, e->dtype);
            continue;
        }
        int64_t len = e->shape[dim];
        if (oj__node_needs(n, k)) {
            oj_tensor *v = narrow_raw(g, dim, off, len);
            gi[k] = grad_as(v, e->dtype);
            oj_release(v);
            if (gi[k] == NULL) return oj_last_status(n->eng);
        }
        off += len;
    }
    return oj_last_status(n->eng);
}

/* Validate; on success set *dim (normalised), *odt, the output shape and
 * the skip mask (bit k: input k is a skipped legacy-empty tensor). */
static bool cat_check(oj_engine *eng, const char *op, int n, oj_tensor *const *ts, int *dim,
                      oj_dtype *odt, int *rank, int64_t *shape, bool *skip) {
    char b1[160], b2[160];
    bool all_legacy = true;
    int ref = -1;
    for (int k = 0; k < n; k++) {
        if (!legacy_empty(ts[k])) {
            all_legacy = false;
            if (ref < 0) ref = k;
        }
    }
    if (all_legacy) ref = 0;
    const oj_tensor *r = ts[ref];
    if (r->rank == 0) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: tensor %d is zero-dimensional and cannot be "
                     "concatenated", op, ref);
        return false;
    }
    int d = *dim;
    if (!oj__norm_dim(eng, op, &d, r->rank)) return false;
    *odt = ts[0]->dtype;
    *rank = r->rank;
    memcpy(shape, r->shape, sizeof(int64_t) * OJ_MAX_RANK);
    shape[d] = 0;
    for (int k = 0; k < n; k++) {
        const oj_tensor *t = ts[k];
        *odt = oj__promote(*odt, t->dtype);
        skip[k] = !all_legacy && legacy_empty(t);
        if (skip[k]) continue;
        bool fits = t->rank == r->rank;
        for (int j = 0; fits && j < r->rank; j++) fits = j == d || t->shape[j] == r->shape[j];
        if (!fits) {
            oj_set_error(eng, OJ_ERR_SHAPE,
                         "%s: tensor %d has shape %s but tensor %d has shape %s; sizes must "
                         "match except in dim %d",
                         op, k, SHAPE(t, b1), ref, SHAPE(r, b2), d);
            return false;
        }
        if (__builtin_add_overflow(shape[d], t->shape[d], &shape[d])) {
            oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: concatenated size of dim %d overflows "
                         "int64", op, d);
            return false;
        }
    }
    *dim = d;
    return true;
}

/* Forward of cat over validated inputs; records a node when n <= the node
 * limit. */
static oj_tensor *cat_raw(oj_engine *eng, const char *op, int n, oj_tensor *const *ts, int dim,
                          oj_dtype odt, int rank, const int64_t *shape, const bool *skip) {
    oj_tensor *out = oj__tensor_alloc(eng, rank, shape, odt, op);
    if (out == NULL) return NULL;
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        if (skip[k]) continue;
        int64_t len = ts[k]->shape[dim];
        if (len > 0 && oj_numel(ts[k]) > 0) {
            oj_tensor *v = narrow_raw(out, dim, off, len);
            bool ok = v != NULL && copy_into(eng, op, v, ts[k]);
            oj_release(v);
            if (!ok) {
                oj_release(out);
                return NULL;
            }
        }
        off += len;
    }
    if (n <= OJ_NODE_MAX_IN) {
        oj_node *nd = oj__node_begin_v(eng, op, cat_backward, n, ts);
        if (nd) {
            uint64_t mask = 0;
            for (int k = 0; k < n; k++)
                if (skip[k]) mask |= 1u << k;
            nd->i[0] = dim;
            nd->i[1] = (int64_t)mask;
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

static oj_tensor *cat_impl(const char *op, int n, oj_tensor *const *ts, int dim) {
    oj_engine *eng = oj__ops_engine(op, n, ts);
    if (eng == NULL) return NULL;
    bool skip_small[OJ_NODE_MAX_IN];
    bool *skip = n <= OJ_NODE_MAX_IN ? skip_small : malloc((size_t)n * sizeof *skip);
    if (skip == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory for %d inputs", op, n);
        return NULL;
    }
    oj_dtype odt;
    int rank;
    int64_t shape[OJ_MAX_RANK];
    oj_tensor *out = NULL;
    if (!cat_check(eng, op, n, ts, &dim, &odt, &rank, shape, skip)) goto done;
    bool needs_grad = false;
    for (int k = 0; k < n; k++) needs_grad |= ts[k]->requires_grad;
    if (n <= OJ_NODE_MAX_IN || !needs_grad || !eng->grad_enabled) {
        out = cat_raw(eng, op, n, ts, dim, odt, rank, shape, skip);
        goto done;
    }
    /* More inputs than a node holds: concatenate groups (each recorded),
     * then the groups. Groups of skipped tensors contribute nothing. */
    int ng = (n + OJ_NODE_MAX_IN - 1) / OJ_NODE_MAX_IN, np = 0;
    oj_tensor **parts = calloc((size_t)ng, sizeof *parts);
    if (parts == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory for %d inputs", op, n);
        goto done;
    }
    bool ok = true;
    for (int g = 0; ok && g < ng; g++) {
        int lo = g * OJ_NODE_MAX_IN, cnt = n - lo < OJ_NODE_MAX_IN ? n - lo : OJ_NODE_MAX_IN;
        bool any = false;
        for (int k = lo; k < lo + cnt; k++) any |= !skip[k];
        if (!any) continue;
        /* drop skipped members so each group has the full rank */
        oj_tensor *members[OJ_NODE_MAX_IN];
        int m = 0;
        for (int k = lo; k < lo + cnt; k++)
            if (!skip[k]) members[m++] = ts[k];
        parts[np] = cat_impl(op, m, members, dim);
        ok = parts[np++] != NULL;
    }
    if (ok) out = cat_impl(op, np, parts, dim);
    if (out && out->dtype != odt) { /* skipped inputs may still promote */
        oj_tensor *c = oj_cast(out, odt);
        oj_release(out);
        out = c;
    }
    for (int g = 0; g < np; g++) oj_release(parts[g]);
    free(parts);
done:
    if (skip != skip_small) free(skip);
    return out;
}

oj_tensor *oj_cat(int n, oj_tensor *const *ts, int dim) {
    if (n <= 0 || ts == NULL) return NULL; /* no tensor: no engine to report on */
    return cat_impl("cat", n, ts, dim);
}

oj_tensor *oj_stack(int n, oj_tensor *const *ts, int dim) {
    if (n <= 0 || ts == NULL) return NULL;
    oj_engine *eng = oj__ops_engine("stack", n, ts);
    if (eng == NULL) return NULL;
    char b1[160], b2[160];
    for (int k = 1; k < n; k++) {
        bool same = ts[k]->rank == ts[0]->rank;
        for (int d = 0; same && d < ts[0]->rank; d++) same = ts[k]->shape[d] == ts[0]->shape[d];
        if (!same) {
            oj_set_error(eng, OJ_ERR_SHAPE,
                         "stack: tensor %d has shape %s but tensor 0 has shape %s; all must be "
                         "equal",
                         k, SHAPE(ts[k], b1), SHAPE(ts[0], b2));
            return NULL;
        }
    }
    if (ts[0]->rank >= OJ_MAX_RANK) {
        oj_set_error(eng, OJ_ERR_SHAPE, "stack: inputs of shape %s already have the maximum "
                     "rank %d", SHAPE(ts[0], b1), OJ_MAX_RANK);
        return NULL;
    }
    int d = dim;
    if (!oj__norm_dim(eng, "stack", &d, ts[0]->rank + 1)) return NULL;
    oj_tensor **u = calloc((size_t)n, sizeof *u);
    if (u == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "stack: out of host memory for %d inputs", n);
        return NULL;
    }
    oj_tensor *out = NULL;
    bool ok = true;
    for (int k = 0; ok && k < n; k++) ok = (u[k] = oj_unsqueeze(ts[k], d)) != NULL;
    if (ok) out = cat_impl("stack", n, u, d);
    for (int k = 0; k < n; k++) oj_release(u[k]);
    free(u);
    return out;
}

/* ---------------------------------------------------------------- split */

static bool split_dim(oj_tensor *x, const char *op, int *dim) {
    char b[160];
    if (x->rank == 0) {
        oj_set_error(x->eng, OJ_ERR_SHAPE, "%s: needs a tensor of rank >= 1, got %s", op,
                     SHAPE(x, b));
        return false;
    }
    return oj__norm_dim(x->eng, op, dim, x->rank);
}

/* The pieces' gradients go[0..n) when they already lie side by side: one
 * storage and dtype, each shaped like its piece and strided like a
 * contiguous tensor shaped like the input, piece k starting where piece
 * k - 1 ends along dim, so together they are exactly that tensor (dense,
 * no overlap). Then a new handle on it (a view, no copy); else NULL
 * (nothing recorded). Attention's backward hands gpt2's q, k, v gradients
 * over this way (nn_attention.c). Safe for the engine: it drops go after
 * the backward, and accumulates into a gradient in place only when that
 * gradient's handle is the sole user of its whole storage. */
static oj_tensor *pieces_adjacent(oj_node *n, oj_tensor *const *go) {
    const oj_edge *e = &n->in[0];
    int dim = (int)n->i[0];
    const oj_tensor *g0 = go[0];
    if (g0 == NULL || e->rank != g0->rank) return NULL;
    int64_t st[OJ_MAX_RANK], es = (int64_t)oj_dtype_size(g0->dtype), start = 0;
    oj__contiguous_strides(e->rank, e->shape, st);
    for (int j = 0; j < n->n_out; j++) {
        const oj_tensor *g = go[j];
        if (g == NULL || g->storage != g0->storage || g->dtype != g0->dtype || g->rank != e->rank)
            return NULL;
        for (int d = 0; d < e->rank; d++) {
            if (d != dim && g->shape[d] != e->shape[d]) return NULL;
            if (g->shape[d] > 1 && g->stride[d] != st[d]) return NULL;
        }
        if (g->offset != g0->offset + start * st[dim] * es) return NULL;
        start += g->shape[dim];
    }
    int64_t numel = 1;
    for (int d = 0; d < e->rank; d++) numel *= e->shape[d];
    if (start != e->shape[dim] || numel == 0 ||
        (size_t)(g0->offset + numel * es) > g0->storage->nbytes)
        return NULL;
    return oj__tensor_new(n->eng, g0->storage, g0->offset, e->rank, e->shape, NULL, g0->dtype);
}

/* Piece j's place in a contiguous tensor shaped like the input starting
 * at byte `base` of g's storage: g shaped like piece j, strided like that
 * tensor, at its offset. st: the input's contiguous strides, start: the
 * piece's first index along dim. */
static bool piece_in_place(const oj_edge *e, int dim, const int64_t *st, int64_t start,
                           int64_t base, const oj_tensor *g) {
    if (g->rank != e->rank) return false;
    for (int d = 0; d < e->rank; d++) {
        if (d != dim && g->shape[d] != e->shape[d]) return false;
        if (g->shape[d] > 1 && g->stride[d] != st[d]) return false;
    }
    return g->offset == base + start * st[dim] * (int64_t)oj_dtype_size(g->dtype);
}

/* The pieces' gradients when some of them lie in place in a buffer laid
 * out like the input that nothing else holds (oj__mirror_grads: nanolab's
 * q and k gradients beside the room for v's and the gate's): the others
 * copied into their places there, and a view of the whole. NULL (nothing
 * written) when the pieces are not so. The buffer's storage is held only
 * by the pieces in place (its refcount), so the rest of it is no one's. */
static oj_tensor *pieces_fill(oj_node *n, oj_tensor *const *go) {
    oj_engine *eng = n->eng;
    const oj_edge *e = &n->in[0];
    const int dim = (int)n->i[0];
    if (eng->grad_enabled) return NULL; /* its copies are not recorded */
    int64_t st[OJ_MAX_RANK], starts[OJ_NODE_MAX_OUT], start = 0;
    oj__contiguous_strides(e->rank, e->shape, st);
    int lead = -1;
    for (int j = 0; j < n->n_out; j++) {
        starts[j] = start;
        if (go[j] == NULL || go[j]->rank != e->rank) return NULL;
        start += go[j]->shape[dim];
        const int64_t b = go[j]->offset - starts[j] * st[dim] * (int64_t)oj_dtype_size(go[j]->dtype);
        if (lead < 0 && piece_in_place(e, dim, st, starts[j], b, go[j])) lead = j;
    }
    if (lead < 0) return NULL;
    const oj_tensor *gl = go[lead];
    oj_storage *buf = gl->storage;
    const int64_t es = (int64_t)oj_dtype_size(gl->dtype);
    const int64_t base = gl->offset - starts[lead] * st[dim] * es;
    int64_t numel = 1, held = 0;
    for (int d = 0; d < e->rank; d++) numel *= e->shape[d];
    bool in[OJ_NODE_MAX_OUT];
    for (int j = 0; j < n->n_out; j++) {
        in[j] = go[j]->storage == buf;
        if (in[j]) {
            held++;
            if (go[j]->dtype != gl->dtype || !piece_in_place(e, dim, st, starts[j], base, go[j]))
                return NULL;
        }
    }
    if (held == n->n_out || base < 0 || numel == 0 || buf->refcount != held ||
        (size_t)(base + numel * es) > buf->nbytes)
        return NULL;
    oj_tensor *whole = oj__tensor_new(eng, buf, base, e->rank, e->shape, NULL, gl->dtype);
    bool ok = whole != NULL;
    for (int j = 0; j < n->n_out && ok; j++) {
        if (in[j]) continue;
        oj_tensor *dst = narrow_raw(whole, dim, starts[j], go[j]->shape[dim]);
        ok = dst && (oj_numel(dst) == 0 || copy_into(eng, n->op, dst, go[j]));
        oj_release(dst);
    }
    if (!ok) {
        oj_release(whole);
        return NULL;
    }
    return whole;
}

/* The pieces' gradients (zeros for a piece that got none, filled in by
 * the engine) side by side: a view when they already are
 * (pieces_adjacent); the others copied beside those in place in a buffer
 * made for them (pieces_fill); else one cat, each written once, instead
 * of a zero-padded full-size gradient per piece and their sum. */
static oj_status split_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    gi[0] = pieces_adjacent(n, go);
    if (gi[0] == NULL) gi[0] = pieces_fill(n, go);
    if (gi[0] == NULL && oj_last_status(n->eng) != OJ_OK) return oj_last_status(n->eng);
    if (gi[0] == NULL) gi[0] = oj_cat(n->n_out, go, (int)n->i[0]);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

/* outs[i] = narrow(x, dim, starts.., sizes[i]) for i < count. With a
 * gradient wanted and at most OJ_NODE_MAX_OUT pieces, one node records all
 * of them (backward: cat); else each narrow records its own. */
static int split_views(oj_tensor *x, const char *op, int dim, int count, const int64_t *sizes,
                       int64_t uniform, int max_out, oj_tensor **outs) {
    if (outs == NULL) return count;
    if (max_out < count) {
        oj_set_error(x->eng, OJ_ERR_OUT_OF_RANGE, "%s: %d pieces of dim %d (size %lld) do not "
                     "fit in max_out %d", op, count, dim, (long long)x->shape[dim], max_out);
        return -1;
    }
    oj_engine *eng = x->eng;
    bool one_node = count >= 2 && count <= OJ_NODE_MAX_OUT && eng->grad_enabled &&
                    x->requires_grad;
    bool prev = one_node ? oj_set_grad_enabled(eng, false) : false;
    int64_t start = 0, size = x->shape[dim];
    for (int i = 0; i < count; i++) {
        int64_t len = sizes ? sizes[i] : (size - start < uniform ? size - start : uniform);
        outs[i] = oj_narrow(x, dim, start, len);
        if (outs[i] == NULL) {
            for (int j = 0; j < i; j++) {
                oj_release(outs[j]);
                outs[j] = NULL;
            }
            if (one_node) oj_set_grad_enabled(eng, prev);
            return -1;
        }
        start += len;
    }
    if (one_node) {
        oj_set_grad_enabled(eng, prev);
        oj_node *nd = oj__node_begin(eng, op, split_backward, 1, x);
        if (nd) {
            nd->i[0] = dim;
            oj__node_finish(nd, count, outs);
        }
    }
    return count;
}

int oj_split(oj_tensor *x, int64_t split_size, int dim, int max_out, oj_tensor **outs) {
    if (oj__ops_engine1("split", x) == NULL) return -1;
    if (!split_dim(x, "split", &dim)) return -1;
    int64_t size = x->shape[dim];
    if (split_size < 0 || (split_size == 0 && size > 0)) {
        oj_set_error(x->eng, OJ_ERR_INVALID_ARGUMENT,
                     "split: split_size %lld is invalid for dim %d of size %lld (must be > 0)",
                     (long long)split_size, dim, (long long)size);
        return -1;
    }
    /* ceil(size / split_size) without size + split_size (which overflows
     * for a split_size near INT64_MAX) */
    int64_t count = size == 0 ? 1 : (size - 1) / split_size + 1;
    if (count > INT32_MAX) {
        oj_set_error(x->eng, OJ_ERR_OUT_OF_RANGE, "split: %lld pieces are too many",
                     (long long)count);
        return -1;
    }
    return split_views(x, "split", dim, (int)count, NULL, split_size, max_out, outs);
}

int oj_split_sizes(oj_tensor *x, int n, const int64_t *sizes, int dim, oj_tensor **outs) {
    if (oj__ops_engine1("split_sizes", x) == NULL) return -1;
    if (!split_dim(x, "split_sizes", &dim)) return -1;
    if (n < 0 || (n > 0 && sizes == NULL)) {
        oj_set_error(x->eng, OJ_ERR_INVALID_ARGUMENT, "split_sizes: %d sizes given without an "
                     "array", n);
        return -1;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0 || __builtin_add_overflow(total, sizes[i], &total)) {
            oj_set_error(x->eng, OJ_ERR_INVALID_ARGUMENT, "split_sizes: size %d is %lld (must "
                         "be >= 0)", i, (long long)sizes[i]);
            return -1;
        }
    }
    if (total != x->shape[dim]) {
        char b[160];
        oj_set_error(x->eng, OJ_ERR_SHAPE, "split_sizes: sizes sum to %lld but dim %d of %s has "
                     "size %lld", (long long)total, dim, SHAPE(x, b), (long long)x->shape[dim]);
        return -1;
    }
    return split_views(x, "split_sizes", dim, n, sizes, 0, n, outs);
}

int oj_chunk(oj_tensor *x, int chunks, int dim, int max_out, oj_tensor **outs) {
    if (oj__ops_engine1("chunk", x) == NULL) return -1;
    if (!split_dim(x, "chunk", &dim)) return -1;
    if (chunks <= 0) {
        oj_set_error(x->eng, OJ_ERR_INVALID_ARGUMENT, "chunk: chunks must be > 0, got %d", chunks);
        return -1;
    }
    int64_t size = x->shape[dim];
    if (size == 0) /* torch: `chunks` empty pieces */
        return split_views(x, "chunk", dim, chunks, NULL, 0, max_out, outs);
    int64_t ss = (size - 1) / chunks + 1; /* ceil, as in split */
    int count = (int)((size - 1) / ss + 1);
    return split_views(x, "chunk", dim, count, NULL, ss, max_out, outs);
}

/* ---------------------------------------------------------------- flip */

/* Copy of x with the dims in `mask` reversed: the copy kernel reads a view
 * with negative strides (backend copy entries accept any strides). */
static oj_tensor *flip_mask(oj_tensor *x, uint32_t mask);

static oj_status flip_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    gi[0] = flip_mask(go[0], (uint32_t)n->i[0]);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

static oj_tensor *flip_mask(oj_tensor *x, uint32_t mask) {
    oj_engine *eng = x->eng;
    int64_t stride[OJ_MAX_RANK];
    int64_t off = x->offset, es = (int64_t)oj_dtype_size(x->dtype);
    for (int d = 0; d < x->rank; d++) {
        stride[d] = x->stride[d];
        if ((mask & (1u << d)) && x->shape[d] > 1) {
            off += (x->shape[d] - 1) * x->stride[d] * es;
            stride[d] = -x->stride[d];
        }
    }
    oj_tensor *v = oj__tensor_view(x, x->rank, x->shape, stride, off);
    oj_tensor *out = v ? oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, "flip") : NULL;
    bool ok = out != NULL && copy_into(eng, "flip", out, v);
    oj_release(v);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    oj_node *nd = oj__node_begin(eng, "flip", flip_backward, 1, x);
    if (nd) {
        nd->i[0] = mask;
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj_flip(oj_tensor *x, int ndims, const int *dims) {
    oj_engine *eng = oj__ops_engine1("flip", x);
    if (eng == NULL) return NULL;
    if (ndims < 0 || (ndims > 0 && dims == NULL)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "flip: %d dims given without an array", ndims);
        return NULL;
    }
    uint32_t mask = 0;
    for (int i = 0; i < ndims; i++) {
        int d = dims[i];
        if (!oj__norm_dim(eng, "flip", &d, x->rank)) return NULL;
        if (mask & (1u << d)) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "flip: dim %d appears more than once",
                         dims[i]);
            return NULL;
        }
        mask |= 1u << d;
    }
    return flip_mask(x, mask);
}

/* ---------------------------------------------------------------- pad */

typedef struct {
    int npad;
    int64_t pads[2 * OJ_MAX_RANK];
} pad_ctx;

static oj_status pad_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    const pad_ctx *c = n->ctx;
    int64_t neg[2 * OJ_MAX_RANK];
    for (int j = 0; j < c->npad; j++) neg[j] = -c->pads[j];
    /* Padding by -pads crops what was padded and zero-fills what was cropped. */
    oj_tensor *g = oj_pad(go[0], c->npad, neg, 0.0);
    gi[0] = g ? grad_as(g, n->in[0].dtype) : NULL;
    oj_release(g);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

oj_tensor *oj_pad(oj_tensor *x, int npad, const int64_t *pads, double value) {
    oj_engine *eng = oj__ops_engine1("pad", x);
    if (eng == NULL) return NULL;
    char b[160];
    if (npad < 0 || npad % 2 != 0 || npad / 2 > x->rank || (npad > 0 && pads == NULL)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "pad: %d pad values for %s: need an even count of at most 2 x rank (%d), "
                     "last dim first",
                     npad, SHAPE(x, b), 2 * x->rank);
        return NULL;
    }
    int64_t shape[OJ_MAX_RANK], src0[OJ_MAX_RANK], dst0[OJ_MAX_RANK], len[OJ_MAX_RANK];
    bool any_copy = true;
    for (int d = 0; d < x->rank; d++) {
        shape[d] = len[d] = x->shape[d];
        src0[d] = dst0[d] = 0;
    }
    for (int j = 0; j < npad / 2; j++) {
        int d = x->rank - 1 - j;
        int64_t lo = pads[2 * j], hi = pads[2 * j + 1], s;
        if (__builtin_add_overflow(x->shape[d], lo, &s) || __builtin_add_overflow(s, hi, &s) ||
            s < 0) {
            oj_set_error(eng, OJ_ERR_SHAPE,
                         "pad: padding (%lld, %lld) of dim %d of %s gives a negative or "
                         "overflowing size",
                         (long long)lo, (long long)hi, d, SHAPE(x, b));
            return NULL;
        }
        shape[d] = s;
        src0[d] = lo < 0 ? -lo : 0;
        dst0[d] = lo > 0 ? lo : 0;
        len[d] = x->shape[d] - (lo < 0 ? -lo : 0) - (hi < 0 ? -hi : 0);
        if (len[d] <= 0) any_copy = false;
    }
    oj_status (*fill)(oj_engine *, oj_tensor *, double) = OJ_KERNEL(eng, fill, "pad");
    if (fill == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, shape, x->dtype, "pad");
    if (out == NULL) return NULL;
    /* Integer fills go through core's oj_fill_: the CPU fill kernel's
     * integer path writes through a misaligned int64_t (UBSan). */
    oj_status fst = oj_dtype_is_float(x->dtype) ? fill(eng, out, value) : oj_fill_(out, value);
    if (!oj__kernel_ok(eng, fst, "pad")) {
        oj_release(out);
        return NULL;
    }
    if (any_copy && oj_numel(x) > 0) {
        int64_t so = x->offset, doff = out->offset, es = (int64_t)oj_dtype_size(x->dtype);
        for (int d = 0; d < x->rank; d++) {
            so += src0[d] * x->stride[d] * es;
            doff += dst0[d] * out->stride[d] * es;
        }
        oj_tensor *sv = oj__tensor_view(x, x->rank, len, x->stride, so);
        oj_tensor *dv = oj__tensor_view(out, x->rank, len, out->stride, doff);
        bool ok = sv && dv && copy_into(eng, "pad", dv, sv);
        oj_release(sv);
        oj_release(dv);
        if (!ok) {
            oj_release(out);
            return NULL;
        }
    }
    if (oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, "pad", pad_backward, 1, x);
        if (nd) {
            pad_ctx *c = calloc(1, sizeof *c);
            if (c == NULL) {
                oj__node_abort(nd);
                oj_release(out);
                oj_set_error(eng, OJ_ERR_CAPACITY, "pad: out of host memory");
                return NULL;
            }
            c->npad = npad;
            if (npad > 0) memcpy(c->pads, pads, (size_t)npad * sizeof *pads);
            nd->ctx = c;
            nd->ctx_free = free;
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

/* ---------------------------------------------------------------- masked */

/* out = cond ? a : b through the backend where entry, out shaped like x. */
static oj_tensor *where_raw(oj_engine *eng, const char *op, const oj_tensor *like,
                            const oj_tensor *cond, const oj_tensor *a, const oj_tensor *b) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                   const oj_tensor *) = OJ_KERNEL(eng, where, op);
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, like->rank, like->shape, like->dtype, op);
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, out, cond, a, b), op)) {
        oj_release(out);
        return NULL;
    }
    return out;
}

/* Backward of masked_fill / tril / triu: the gradient where the saved mask
 * is n->i[0] (1: true keeps x, 0: false keeps x), zero elsewhere. */
static oj_status mask_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *mask = oj__node_saved(n, 0);
    if (mask == NULL) return oj_last_status(n->eng);
    oj_tensor *g = go[0];
    oj_tensor *zero = oj_scalar(n->eng, 0.0, g->dtype);
    if (zero == NULL) return oj_last_status(n->eng);
    oj_tensor *r = n->i[0] ? where_raw(n->eng, n->op, g, mask, g, zero)
                           : where_raw(n->eng, n->op, g, mask, zero, g);
    oj_release(zero);
    gi[0] = r ? grad_as(r, n->in[0].dtype) : NULL;
    oj_release(r);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

/* Record a mask node for `out` of x; mask_keeps: true when mask true keeps x. */
static void record_mask(oj_engine *eng, const char *op, oj_tensor *x, oj_tensor *out,
                        oj_tensor *mask, bool mask_keeps) {
    if (!oj_dtype_is_float(x->dtype)) return;
    oj_node *nd = oj__node_begin(eng, op, mask_backward, 1, x);
    if (nd) {
        nd->i[0] = mask_keeps;
        oj__node_save(nd, mask);
        oj__node_finish(nd, 1, &out);
    }
}

oj_tensor *oj_masked_fill(oj_tensor *x, oj_tensor *mask, double value) {
    oj_tensor *in[2] = {x, mask};
    oj_engine *eng = oj__ops_engine("masked_fill", 2, in);
    if (eng == NULL) return NULL;
    char b1[160], b2[160];
    if (mask->dtype != OJ_BOOL) {
        oj_set_error(eng, OJ_ERR_DTYPE, "masked_fill: mask must be bool, got %s",
                     oj_dtype_name(mask->dtype));
        return NULL;
    }
    int rank;
    int64_t shape[OJ_MAX_RANK];
    bool fits = oj__broadcast_shapes(eng, "masked_fill", x->rank, x->shape, mask->rank,
                                     mask->shape, &rank, shape);
    if (!fits) return NULL;
    fits = rank == x->rank;
    for (int d = 0; fits && d < rank; d++) fits = shape[d] == x->shape[d];
    if (!fits) {
        oj_set_error(eng, OJ_ERR_SHAPE, "masked_fill: mask %s does not broadcast to x %s",
                     SHAPE(mask, b1), SHAPE(x, b2));
        return NULL;
    }
    oj_tensor *v = oj_scalar(eng, value, x->dtype);
    oj_tensor *out = v ? where_raw(eng, "masked_fill", x, mask, v, x) : NULL;
    oj_release(v);
    if (out) record_mask(eng, "masked_fill", x, out, mask, false);
    return out;
}

/* Bool [R, C] mask: col - row <= diagonal (lower) or >= diagonal (upper). */
static oj_tensor *tri_mask(oj_engine *eng, int64_t R, int64_t C, int64_t diagonal, bool lower) {
    bool prev = oj_set_grad_enabled(eng, false);
    int64_t rs[2] = {R, 1}, cs[2] = {1, C};
    oj_tensor *r = oj_arange(eng, 0, (double)R, 1, OJ_I64);
    oj_tensor *c = oj_arange(eng, 0, (double)C, 1, OJ_I64);
    oj_tensor *r2 = oj_reshape(r, 2, rs), *c2 = oj_reshape(c, 2, cs);
    oj_tensor *diff = oj_sub(c2, r2);
    oj_tensor *dg = oj_scalar(eng, (double)diagonal, OJ_I64);
    oj_tensor *m = lower ? oj_le(diff, dg) : oj_ge(diff, dg);
    oj_release(r);
    oj_release(c);
    oj_release(r2);
    oj_release(c2);
    oj_release(diff);
    oj_release(dg);
    oj_set_grad_enabled(eng, prev);
    return m;
}

static oj_tensor *tri(const char *op, oj_tensor *x, int64_t diagonal, bool lower) {
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    char b[160];
    if (x->rank < 2) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: needs a tensor of rank >= 2, got %s", op,
                     SHAPE(x, b));
        return NULL;
    }
    int64_t R = x->shape[x->rank - 2], C = x->shape[x->rank - 1];
    /* clamp so the scalar stays exact in double */
    if (diagonal > C) diagonal = C;
    if (diagonal < -R) diagonal = -R;
    oj_tensor *mask = tri_mask(eng, R, C, diagonal, lower);
    oj_tensor *zero = mask ? oj_scalar(eng, 0.0, x->dtype) : NULL;
    oj_tensor *out = zero ? where_raw(eng, op, x, mask, x, zero) : NULL;
    if (out) record_mask(eng, op, x, out, mask, true);
    oj_release(zero);
    oj_release(mask);
    return out;
}

oj_tensor *oj_tril(oj_tensor *x, int64_t diagonal) { return tri("tril", x, diagonal, true); }
oj_tensor *oj_triu(oj_tensor *x, int64_t diagonal) { return tri("triu", x, diagonal, false); }

/* ---------------------------------------------------------------- repeat
 * A pass views the output as its "frame" with every repeated dim d of size
 * s > 1 split in two, [.., r, s, ..], and copies x broadcast with stride 0
 * over each r. The first pass works in x's own frame (any strides) and
 * splits as many dims as OJ_MAX_RANK allows; any dims left (rank > 4) are
 * done one per pass on the contiguous result, in the merged frame
 * [before, s, after]. Each pass is one autograd node. */

typedef struct {
    int n;                     /* frame rank */
    int64_t reps[OJ_MAX_RANK]; /* per frame dim */
    int64_t xs[OJ_MAX_RANK];   /* input's shape in the frame */
    bool contig;               /* input viewed contiguously in the frame */
} repeat_ctx;

/* The split geometry: rank, shape vs, which view dims are repeat dims
 * (summed in backward) and the frame dim each came from. */
static int repeat_split(const repeat_ctx *c, int64_t *vs, bool *is_rep, int *src) {
    int vr = 0;
    for (int d = 0; d < c->n; d++) {
        if (c->reps[d] != 1) {
            vs[vr] = c->reps[d], is_rep[vr] = true, src[vr++] = d;
            if (c->xs[d] == 1) continue;
        }
        vs[vr] = c->xs[d], is_rep[vr] = false, src[vr++] = d;
    }
    return vr;
}

static int repeat_split_rank(const repeat_ctx *c) {
    int vr = c->n;
    for (int d = 0; d < c->n; d++) vr += c->reps[d] != 1 && c->xs[d] != 1;
    return vr;
}

static oj_status repeat_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    const repeat_ctx *c = n->ctx;
    const oj_edge *e = &n->in[0];
    oj_tensor *g = go[0];
    int64_t xn = 1;
    for (int d = 0; d < e->rank; d++) xn *= e->shape[d];
    if (xn == 0 || oj_numel(g) == 0) {
        gi[0] = oj_zeros(n->eng, e->rank, e->shape, e->dtype);
        return gi[0] ? OJ_OK : oj_last_status(n->eng);
    }
    int64_t vs[OJ_MAX_RANK];
    bool is_rep[OJ_MAX_RANK];
    int src[OJ_MAX_RANK], dims[OJ_MAX_RANK], nd = 0;
    int vr = repeat_split(c, vs, is_rep, src);
    for (int k = 0; k < vr; k++)
        if (is_rep[k]) dims[nd++] = k;
    oj_tensor *gv = oj_reshape(g, vr, vs);
    oj_tensor *s = nd ? oj_sum(gv, nd, dims, true) : oj_retain(gv);
    oj_tensor *r = s ? oj_reshape(s, e->rank, e->shape) : NULL;
    gi[0] = r ? grad_as(r, e->dtype) : NULL;
    oj_release(gv);
    oj_release(s);
    oj_release(r);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

static oj_tensor *repeat_pass(oj_engine *eng, oj_tensor *x, const repeat_ctx *c, int orank,
                              const int64_t *oshape) {
    int64_t vs[OJ_MAX_RANK], vstride[OJ_MAX_RANK], fstride[OJ_MAX_RANK];
    bool is_rep[OJ_MAX_RANK];
    int src[OJ_MAX_RANK];
    int vr = repeat_split(c, vs, is_rep, src);
    if (c->contig) {
        oj__contiguous_strides(c->n, c->xs, fstride);
    } else {
        for (int d = 0; d < c->n; d++) {
            int xd = d - (c->n - x->rank);
            fstride[d] = xd < 0 ? 0 : x->stride[xd];
        }
    }
    for (int k = 0; k < vr; k++) vstride[k] = is_rep[k] ? 0 : fstride[src[k]];
    oj_tensor *out = oj__tensor_alloc(eng, orank, oshape, x->dtype, "repeat");
    if (out == NULL) return NULL;
    if (oj_numel(out) > 0) {
        oj_tensor *xv = oj__tensor_view(x, vr, vs, vstride, x->offset);
        oj_tensor *ov = oj__tensor_view(out, vr, vs, NULL, out->offset);
        bool ok = xv && ov && copy_into(eng, "repeat", ov, xv);
        oj_release(xv);
        oj_release(ov);
        if (!ok) {
            oj_release(out);
            return NULL;
        }
    }
    if (oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, "repeat", repeat_backward, 1, x);
        if (nd) {
            repeat_ctx *cc = malloc(sizeof *cc);
            if (cc == NULL) {
                oj__node_abort(nd);
                oj_release(out);
                oj_set_error(eng, OJ_ERR_CAPACITY, "repeat: out of host memory");
                return NULL;
            }
            *cc = *c;
            nd->ctx = cc;
            nd->ctx_free = free;
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

oj_tensor *oj_repeat(oj_tensor *x, int n, const int64_t *repeats) {
    oj_engine *eng = oj__ops_engine1("repeat", x);
    if (eng == NULL) return NULL;
    char b[160];
    if (n < x->rank || n > OJ_MAX_RANK || (n > 0 && repeats == NULL)) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "repeat: %d repeats for %s: need rank (%d) to %d of them", n, SHAPE(x, b),
                     x->rank, OJ_MAX_RANK);
        return NULL;
    }
    int64_t xs[OJ_MAX_RANK] = {0}, oshape[OJ_MAX_RANK] = {0};
    for (int d = 0; d < n; d++) {
        int xd = d - (n - x->rank);
        xs[d] = xd < 0 ? 1 : x->shape[xd];
        if (repeats[d] < 0 || __builtin_mul_overflow(xs[d], repeats[d], &oshape[d])) {
            oj_set_error(eng, OJ_ERR_SHAPE, "repeat: repeat %lld of dim %d of %s is negative "
                         "or overflows", (long long)repeats[d], d, SHAPE(x, b));
            return NULL;
        }
    }
    int64_t numel;
    if (oj_shape_numel(n, oshape, x->dtype, &numel) != OJ_OK) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "repeat: the result of repeating %s overflows",
                     SHAPE(x, b));
        return NULL;
    }
    /* First pass in x's frame: every repeat that fits (a copy even when
     * nothing repeats, as torch). */
    repeat_ctx p = {.n = n, .contig = false};
    bool left[OJ_MAX_RANK] = {false};
    int64_t cur_shape[OJ_MAX_RANK];
    memcpy(p.xs, xs, sizeof xs);
    for (int d = 0; d < n; d++) {
        p.reps[d] = repeats[d];
        if (repeat_split_rank(&p) > OJ_MAX_RANK) {
            p.reps[d] = 1;
            left[d] = true;
        }
        cur_shape[d] = xs[d] * p.reps[d];
    }
    oj_tensor *cur = repeat_pass(eng, x, &p, n, cur_shape);
    /* The rest, one dim per pass on the contiguous result. */
    for (int d = 0; cur && d < n; d++) {
        if (!left[d]) continue;
        repeat_ctx q = {.n = 3, .contig = true, .reps = {1, repeats[d], 1}};
        q.xs[0] = q.xs[2] = 1;
        for (int k = 0; k < d; k++) q.xs[0] *= cur_shape[k];
        q.xs[1] = cur_shape[d];
        for (int k = d + 1; k < n; k++) q.xs[2] *= cur_shape[k];
        cur_shape[d] *= repeats[d];
        oj_tensor *next = repeat_pass(eng, cur, &q, n, cur_shape);
        oj_release(cur);
        cur = next;
    }
    return cur;
}
