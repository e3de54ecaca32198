/* Shared validation, broadcasting and promotion for the ops layer. */
#include <stdio.h>
#include <string.h>

#include "ops/ops_common.h"

oj_engine *oj__ops_engine(const char *op, int n, oj_tensor *const *ts) {
    oj_engine *eng = NULL;
    for (int i = 0; i < n; i++) {
        if (ts[i] == NULL) return NULL;
        if (!oj__live(ts[i])) {
            /* Report on a live input's engine, else on the released
             * (quarantined) handle's own engine, as oj__check_tensor does. */
            oj_engine *e = NULL;
            for (int j = 0; j < n && e == NULL; j++)
                if (oj__live(ts[j])) e = ts[j]->eng;
            if (e == NULL) e = oj__engine_of(ts[i]);
            if (e != NULL)
                oj_set_error(e, OJ_ERR_INVALID_ARGUMENT, "%s: input %d is a released tensor", op,
                             i);
            return NULL;
        }
    }
    for (int i = 0; i < n; i++) {
        if (eng == NULL) {
            eng = ts[i]->eng;
            continue;
        }
        if (ts[i]->eng != eng) {
            oj_set_error(eng, OJ_ERR_DEVICE, "%s: inputs 0 and %d belong to different engines",
                         op, i);
            return NULL;
        }
        if (ts[i]->storage->device.type != ts[0]->storage->device.type ||
            ts[i]->storage->device.index != ts[0]->storage->device.index) {
            oj_set_error(eng, OJ_ERR_DEVICE,
                         "%s: inputs 0 and %d are on different devices (%s:%d and %s:%d); copy "
                         "explicitly with oj_to_device",
                         op, i, ts[0]->storage->device.type == OJ_DEVICE_CPU ? "cpu" : "cuda",
                         ts[0]->storage->device.index,
                         ts[i]->storage->device.type == OJ_DEVICE_CPU ? "cpu" : "cuda",
                         ts[i]->storage->device.index);
            return NULL;
        }
    }
    return eng;
}

oj_engine *oj__ops_engine1(const char *op, oj_tensor *t) {
    if (t == NULL) return NULL;
    if (!oj__live(t)) {
        oj__check_tensor(NULL, t, op, "x"); /* records on a released handle's engine */
        return NULL;
    }
    return t->eng;
}

bool oj__broadcast_shapes(oj_engine *eng, const char *op, int ra, const int64_t *sa, int rb,
                          const int64_t *sb, int *rank, int64_t *shape) {
    int r = ra > rb ? ra : rb;
    for (int d = 0; d < r; d++) {
        int da = d - (r - ra), db = d - (r - rb);
        int64_t x = da >= 0 ? sa[da] : 1, y = db >= 0 ? sb[db] : 1;
        if (x != y && x != 1 && y != 1) {
            char b1[128], b2[128];
            oj_set_error(eng, OJ_ERR_SHAPE,
                         "%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", op,
                         oj__shape_fmt(b1, sizeof b1, ra, sa), oj__shape_fmt(b2, sizeof b2, rb, sb),
                         d, (long long)x, (long long)y);
            return false;
        }
        shape[d] = x == 1 ? y : x;
    }
    *rank = r;
    return true;
}

static int dtype_rank(oj_dtype dt) {
    switch (dt) {
    case OJ_BOOL: return 0;
    case OJ_U8: return 1;
    case OJ_U16: return 2;
    case OJ_I32: return 3;
    case OJ_U32: return 4;
    case OJ_I64: return 5;
    case OJ_F16: return 6;
    case OJ_BF16: return 6;
    case OJ_F32: return 8;
    case OJ_F64: return 9;
    default: return -1;
    }
}

oj_dtype oj__promote(oj_dtype a, oj_dtype b) {
    if (a == b) return a;
    if ((a == OJ_BF16 && b == OJ_F16) || (a == OJ_F16 && b == OJ_BF16)) return OJ_F32;
    bool fa = oj_dtype_is_float(a), fb = oj_dtype_is_float(b);
    if (fa && !fb) return a;
    if (fb && !fa) return b;
    return dtype_rank(a) >= dtype_rank(b) ? a : b;
}

oj_dtype oj__float_dtype(oj_dtype dt) { return oj_dtype_is_float(dt) ? dt : OJ_F32; }

bool oj__norm_dim(oj_engine *eng, const char *op, int *dim, int rank) {
    int r = rank == 0 ? 1 : rank;
    int d = *dim < 0 ? *dim + r : *dim;
    if (d < 0 || d >= r) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: dim %d out of range for a tensor of rank %d",
                     op, *dim, rank);
        return false;
    }
    *dim = d;
    return true;
}

oj_tensor *oj__broadcast_view(oj_tensor *t, int rank, const int64_t *shape) {
    int64_t stride[OJ_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int td = d - (rank - t->rank);
        stride[d] = (td >= 0 && t->shape[td] == shape[d]) ? t->stride[td] : 0;
    }
    return oj__tensor_view(t, rank, shape, stride, t->offset);
}

bool oj__kernel_ok(oj_engine *eng, oj_status st, const char *op) {
    if (st == OJ_OK) return true;
    if (oj_last_status(eng) == OJ_OK) oj_set_error(eng, st, "%s: kernel failed", op);
    return false;
}

/* ---------------------------------------------------------------- autocast */

static bool autocast_eligible(oj_dtype dt) { /* f64 is never cast, as in PyTorch */
    return dt == OJ_F32 || dt == OJ_BF16 || dt == OJ_F16;
}

bool oj__autocast(int cls, int n, oj_tensor *const *in, oj_tensor **out) {
    oj_engine *eng = NULL;
    for (int i = 0; i < n && eng == NULL; i++)
        if (in[i] && oj__live(in[i])) eng = in[i]->eng;
    if (eng == NULL || !eng->autocast) return false;
    oj_dtype want = cls == OJ__AUTOCAST_LOW ? eng->autocast_dtype : OJ_F32;
    bool any = false;
    for (int i = 0; i < n; i++) {
        oj_tensor *t = in[i];
        if (t && oj__live(t) && t->eng == eng && autocast_eligible(t->dtype) && t->dtype != want)
            any = true;
    }
    if (!any) return false;
    for (int i = 0; i < n; i++) {
        oj_tensor *t = in[i];
        if (t && oj__live(t) && t->eng == eng && autocast_eligible(t->dtype) && t->dtype != want)
            out[i] = oj__autocast_cast(t, want);
        else
            out[i] = t && oj__live(t) ? oj_retain(t) : t;
    }
    return true;
}

void oj__autocast_release(int n, oj_tensor **out) {
    for (int i = 0; i < n; i++)
        if (out[i] && oj__live(out[i])) oj_release(out[i]);
}

bool oj__inplace_ok(oj_engine *eng, const oj_tensor *a, const char *op) {
    if (a->requires_grad && eng->grad_enabled) {
        oj_set_error(eng, OJ_ERR_STATE,
                     "%s: in-place write to a tensor that requires grad while grad mode is on "
                     "(wrap it in oj_set_grad_enabled(eng, false))",
                     op);
        return false;
    }
    return true;
}

/* x[0..n) (2 <= n <= 4): one layout (shape, strides, dtype) at n distinct,
 * equally spaced element offsets of one storage, no dim of size 0 and the
 * dims of size > 1 with positive strides. Then *first = the smallest
 * offset (elements) and sz/sd [OJ_MAX_RANK + 1] the sizes and strides of
 * [n, ...shape] (delta for the copies' dim), dims of size 1 left out,
 * sorted by stride; returns their count, 0 when x is not such copies. */
static int spaced_copies(int n, oj_tensor *const *x, int64_t *first, int64_t *sz, int64_t *sd) {
    if (n < 2 || n > 4) return 0;
    const oj_tensor *q = x[0];
    const int64_t es = (int64_t)oj_dtype_size(q->dtype);
    int64_t off[4] = {0};
    for (int j = 0; j < n; j++) {
        const oj_tensor *t = x[j];
        if (t->storage != q->storage || t->dtype != q->dtype || t->rank != q->rank ||
            t->offset % es != 0)
            return 0;
        for (int d = 0; d < q->rank; d++)
            if (t->shape[d] != q->shape[d] || t->stride[d] != q->stride[d]) return 0;
        off[j] = t->offset / es;
    }
    for (int a = 1; a < n; a++) /* insertion sort of the offsets */
        for (int b = a; b > 0 && off[b] < off[b - 1]; b--) {
            int64_t t = off[b];
            off[b] = off[b - 1], off[b - 1] = t;
        }
    int64_t delta = off[1] - off[0];
    if (delta <= 0) return 0;
    for (int j = 2; j < n; j++)
        if (off[j] - off[j - 1] != delta) return 0;
    int m = 0;
    sz[m] = n;
    sd[m++] = delta;
    for (int d = 0; d < q->rank; d++) {
        if (q->shape[d] == 0) return 0;
        if (q->shape[d] == 1) continue;
        if (q->stride[d] <= 0) return 0;
        sz[m] = q->shape[d];
        sd[m++] = q->stride[d];
    }
    for (int a = 1; a < m; a++) /* insertion sort by stride */
        for (int b = a; b > 0 && sd[b] < sd[b - 1]; b--) {
            int64_t ts = sd[b], tz = sz[b];
            sd[b] = sd[b - 1], sz[b] = sz[b - 1];
            sd[b - 1] = ts, sz[b - 1] = tz;
        }
    *first = off[0];
    return m;
}

/* x[0..n) equally spaced copies of one layout tiling a dense block (see
 * oj__tiled_grads); *first gets the smallest offset (bytes). */
static bool tiles_one_block(int n, oj_tensor *const *x, int64_t *first) {
    int64_t sz[OJ_MAX_RANK + 1], sd[OJ_MAX_RANK + 1], off0;
    const int m = spaced_copies(n, x, &off0, sz, sd);
    if (m == 0) return false;
    /* sorted by stride, the dims must be contiguous: stride 1, then each
     * the product of the sizes below */
    int64_t want = 1;
    for (int a = 0; a < m; a++) {
        if (sd[a] != want) return false;
        want *= sz[a];
    }
    *first = off0 * (int64_t)oj_dtype_size(x[0]->dtype);
    return true;
}

/* x[0..n) one layout (shape, strides, dtype) at n distinct offsets of one
 * storage whose elements no two of them share, together at least half of
 * the storage's bytes, inside it (see oj__mirror_grads). */
static bool mirror_fits(int n, oj_tensor *const *x) {
    int64_t sz[OJ_MAX_RANK + 1], sd[OJ_MAX_RANK + 1], off0;
    const int m = spaced_copies(n, x, &off0, sz, sd);
    if (m == 0) return false;
    /* every stride (sorted) above the reach of the smaller ones, so no
     * element is met twice */
    int64_t reach = 0; /* the largest offset the smaller strides give */
    for (int a = 0; a < m; a++) {
        if (sd[a] <= reach) return false;
        reach += (sz[a] - 1) * sd[a];
    }
    const int64_t es = (int64_t)oj_dtype_size(x[0]->dtype);
    const int64_t total = (int64_t)(x[0]->storage->nbytes / (size_t)es);
    return off0 >= 0 && off0 + reach < total && 2 * n * oj_numel(x[0]) >= total;
}

int oj__mirror_grads(oj_engine *eng, const char *op, int n, oj_tensor *const *x, oj_tensor **d) {
    if (n < 2 || n > 4 || !mirror_fits(n, x)) return 0;
    const int64_t es = (int64_t)oj_dtype_size(x[0]->dtype);
    int64_t flat[1] = {(int64_t)(x[0]->storage->nbytes / (size_t)es)};
    oj_tensor *buf = oj__tensor_alloc(eng, 1, flat, x[0]->dtype, op);
    if (buf == NULL) return -1;
    bool ok = true;
    for (int j = 0; j < n && ok; j++)
        ok = (d[j] = oj__tensor_view(buf, x[j]->rank, x[j]->shape, x[j]->stride,
                                     buf->offset + x[j]->offset)) != NULL;
    oj_release(buf);
    if (!ok)
        for (int j = 0; j < n; j++) {
            oj_release(d[j]);
            d[j] = NULL;
        }
    return ok ? 1 : -1;
}

int oj__tiled_grads(oj_engine *eng, const char *op, int n, oj_tensor *const *x, oj_tensor **d) {
    int64_t first = 0;
    if (n < 2 || n > 4 || !tiles_one_block(n, x, &first)) return 0;
    int64_t flat[1] = {n * oj_numel(x[0])};
    oj_tensor *buf = oj__tensor_alloc(eng, 1, flat, x[0]->dtype, op);
    if (buf == NULL) return -1;
    bool ok = true;
    for (int j = 0; j < n && ok; j++)
        ok = (d[j] = oj__tensor_view(buf, x[j]->rank, x[j]->shape, x[j]->stride,
                                     buf->offset + x[j]->offset - first)) != NULL;
    oj_release(buf);
    if (!ok)
        for (int j = 0; j < n; j++) {
            oj_release(d[j]);
            d[j] = NULL;
        }
    return ok ? 1 : -1;
}
