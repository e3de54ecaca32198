/* Creation: empty, zeros, ones, full, scalar, arange, linspace, eye,
 * from_host. zeros/ones/full run the device's fill kernel on a device;
 * the others compute their values on the host and device tensors get them
 * with one host-to-device copy. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"

/* Host buffer for the contents of fresh contiguous tensor t: its storage
 * on the CPU, else a staging buffer that finish() uploads and frees. */
static void *stage(oj_tensor *t, const char *op) {
    if (t->storage->device.type == OJ_DEVICE_CPU) return t->storage->data;
    size_t nb = (size_t)oj_numel(t) * oj_dtype_size(t->dtype);
    void *p = malloc(nb ? nb : 1);
    if (p == NULL) oj_set_error(t->eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
    return p;
}

static oj_tensor *finish(oj_tensor *t, void *p, const char *op) {
    if (t->storage->device.type == OJ_DEVICE_CPU) return t;
    size_t nb = (size_t)oj_numel(t) * oj_dtype_size(t->dtype);
    oj_status st = nb ? t->eng->backend->copy_h2d(t->eng, t->storage->data, p, nb) : OJ_OK;
    free(p);
    if (st != OJ_OK) {
        oj_set_error(t->eng, OJ_ERR_DEVICE, "%s: host-to-device copy failed", op);
        oj_release(t);
        return NULL;
    }
    return t;
}

oj_tensor *oj_empty(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt) {
    return oj__tensor_alloc(eng, rank, shape, dt, "empty");
}

static oj_tensor *full(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt, double value,
                       const char *op) {
    oj_tensor *t = oj__tensor_alloc(eng, rank, shape, dt, op);
    if (t == NULL) return NULL;
    if (t->storage->device.type != OJ_DEVICE_CPU && eng->backend->fill) {
        /* the device's fill kernel: no host staging, no copy */
        oj_status st = eng->backend->fill(eng, t, value);
        if (st == OJ_OK) return t;
        oj_set_error(eng, st, "%s: device fill kernel failed", op);
        oj_release(t);
        return NULL;
    }
    char *p = stage(t, op);
    if (p == NULL) {
        oj_release(t);
        return NULL;
    }
    int64_t n = oj_numel(t);
    size_t es = oj_dtype_size(dt);
    unsigned char v[8];
    oj__store(v, dt, value);
    bool zero = true;
    for (size_t i = 0; i < es; i++) zero = zero && v[i] == 0;
    if (zero) memset(p, 0, (size_t)n * es);
    else
        for (int64_t i = 0; i < n; i++) memcpy(p + (size_t)i * es, v, es);
    return finish(t, p, op);
}

oj_tensor *oj_zeros(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt) {
    return full(eng, rank, shape, dt, 0.0, "zeros");
}
oj_tensor *oj_ones(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt) {
    return full(eng, rank, shape, dt, 1.0, "ones");
}
oj_tensor *oj_full(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt, double value) {
    return full(eng, rank, shape, dt, value, "full");
}
oj_tensor *oj_scalar(oj_engine *eng, double value, oj_dtype dt) {
    return full(eng, 0, NULL, dt, value, "scalar");
}

oj_tensor *oj_arange(oj_engine *eng, double start, double end, double step, oj_dtype dt) {
    if (eng == NULL) return NULL;
    if (!isfinite(start) || !isfinite(end) || !isfinite(step)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "arange: start %g, end %g, step %g must be finite",
                     start, end, step);
        return NULL;
    }
    if (step == 0) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "arange: step must be nonzero");
        return NULL;
    }
    if ((end - start) / step < 0) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "arange: end %g is not reachable from start %g with step %g", end, start, step);
        return NULL;
    }
    double nd = ceil((end - start) / step);
    if (!(nd < 9.2e18)) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "arange: %g elements overflow int64", nd);
        return NULL;
    }
    int64_t n = (int64_t)nd;
    oj_tensor *t = oj__tensor_alloc(eng, 1, &n, dt, "arange");
    if (t == NULL) return NULL;
    char *p = stage(t, "arange");
    if (p == NULL) {
        oj_release(t);
        return NULL;
    }
    size_t es = oj_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) oj__store(p + (size_t)i * es, dt, start + (double)i * step);
    return finish(t, p, "arange");
}

oj_tensor *oj_linspace(oj_engine *eng, double start, double end, int64_t steps, oj_dtype dt) {
    if (eng == NULL) return NULL;
    if (steps < 0) {
        oj_set_error(eng, OJ_ERR_SHAPE, "linspace: steps %lld must be >= 0", (long long)steps);
        return NULL;
    }
    oj_tensor *t = oj__tensor_alloc(eng, 1, &steps, dt, "linspace");
    if (t == NULL) return NULL;
    char *p = stage(t, "linspace");
    if (p == NULL) {
        oj_release(t);
        return NULL;
    }
    size_t es = oj_dtype_size(dt);
    /* PyTorch's symmetric formula: the first half counts up from start, the
     * second down from end, so both endpoints are exact. f32 computes in
     * f32 like PyTorch; other dtypes in f64. */
    int64_t half = steps / 2;
    if (steps == 1) oj__store(p, dt, start);
    else if (dt == OJ_F32) {
        float fs = (float)start, fe = (float)end, step = (fe - fs) / (float)(steps - 1);
        for (int64_t i = 0; i < steps; i++) {
            float v = i < half ? fs + step * (float)i : fe - step * (float)(steps - 1 - i);
            memcpy(p + (size_t)i * 4, &v, 4);
        }
    } else {
        double step = (end - start) / (double)(steps - 1);
        for (int64_t i = 0; i < steps; i++)
            oj__store(p + (size_t)i * es, dt,
                      i < half ? start + step * (double)i : end - step * (double)(steps - 1 - i));
    }
    return finish(t, p, "linspace");
}

oj_tensor *oj_eye(oj_engine *eng, int64_t n, int64_t m, oj_dtype dt) {
    int64_t shape[2] = {n, m};
    oj_tensor *t = oj__tensor_alloc(eng, 2, shape, dt, "eye");
    if (t == NULL) return NULL;
    char *p = stage(t, "eye");
    if (p == NULL) {
        oj_release(t);
        return NULL;
    }
    size_t es = oj_dtype_size(dt);
    memset(p, 0, (size_t)(n * m) * es);
    unsigned char one[8];
    oj__store(one, dt, 1.0);
    for (int64_t i = 0; i < n && i < m; i++) memcpy(p + (size_t)(i * m + i) * es, one, es);
    return finish(t, p, "eye");
}

oj_tensor *oj_from_external(oj_engine *eng, void *data, int rank, const int64_t *shape,
                            const int64_t *strides, oj_dtype dt, void (*release)(void *),
                            void *ctx) {
    if (eng == NULL) return NULL;
    if (!oj_dtype_valid(dt)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "from_external: invalid dtype %d", (int)dt);
        return NULL;
    }
    int64_t n;
    char buf[160];
    if (oj_shape_numel(rank, shape, dt, &n) != OJ_OK) {
        oj_set_error(eng, OJ_ERR_SHAPE, "from_external: invalid shape %s (rank 0..8, dims >= 0)",
                     oj__shape_fmt(buf, sizeof buf, shape ? rank : -1, shape));
        return NULL;
    }
    /* extent: the bytes from element 0 to the last element, inclusive */
    int64_t last = 0;
    for (int d = 0; d < rank && strides; d++) {
        if (strides[d] < 0) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                         "from_external: stride %" PRId64 " of dim %d is negative", strides[d], d);
            return NULL;
        }
        if (n == 0) continue; /* no element, no extent (a dim of 0 would make it negative) */
        if (strides[d] > (INT64_MAX - last) / shape[d]) {
            oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "from_external: strides overflow int64");
            return NULL;
        }
        last += (shape[d] - 1) * strides[d];
    }
    if (!strides) last = n - 1;
    size_t nbytes = n == 0 ? 0 : (size_t)(last + 1) * oj_dtype_size(dt);
    if (data == NULL && n > 0) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "from_external: data is NULL for shape %s",
                     oj__shape_fmt(buf, sizeof buf, rank, shape));
        return NULL;
    }
    oj_storage *s = oj__storage_wrap(eng, data, nbytes, NULL, NULL);
    if (s == NULL) return NULL;
    s->exported = true; /* its producer writes it without bumping the version */
    oj_tensor *t = oj__tensor_new(eng, s, 0, rank, shape, strides, dt);
    if (t != NULL) { /* from here on the storage calls release when freed */
        s->release = release;
        s->release_ctx = ctx;
    }
    oj__storage_release(s);
    return t;
}

oj_tensor *oj_from_host(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                        const void *data, size_t nbytes) {
    oj_tensor *t = oj__tensor_alloc(eng, rank, shape, dt, "from_host");
    if (t == NULL) return NULL;
    size_t need = (size_t)oj_numel(t) * oj_dtype_size(dt);
    if (nbytes != need || (need > 0 && data == NULL)) {
        char buf[160];
        if (data == NULL && need > 0)
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "from_host: data is NULL");
        else
            oj_set_error(eng, OJ_ERR_SHAPE,
                         "from_host: %zu bytes given for %s %s, which needs %zu bytes", nbytes,
                         oj__shape_fmt(buf, sizeof buf, rank, shape), oj_dtype_name(dt), need);
        oj_release(t);
        return NULL;
    }
    if (need == 0) return t;
    if (t->storage->device.type == OJ_DEVICE_CPU) {
        memcpy(t->storage->data, data, need);
        return t;
    }
    eng->h2d_copies++;
    if (eng->backend->copy_h2d(eng, t->storage->data, data, need) != OJ_OK) {
        oj_set_error(eng, OJ_ERR_DEVICE, "from_host: host-to-device copy failed");
        oj_release(t);
        return NULL;
    }
    return t;
}
