/* Copies between tensors and host buffers: to_host, item, clone,
 * contiguous, copy_ (broadcast + dtype cast) and fill_. The CPU path works
 * on storage directly; device tensors are staged through host mirrors here
 * (correct but slow; device kernels replace this in the CUDA backend). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"

void oj__host_copy(int rank, const int64_t *shape, void *dst, const int64_t *dstride,
                   oj_dtype ddt, const void *src, const int64_t *sstride, oj_dtype sdt) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    if (n == 0) return;
    const int64_t des = (int64_t)oj_dtype_size(ddt), ses = (int64_t)oj_dtype_size(sdt);
    if (rank == 0) {
        oj__convert(dst, ddt, src, sdt);
        return;
    }
    /* Same dtype, both row-major dense: one memcpy. */
    if (ddt == sdt) {
        bool dense = true;
        int64_t expect = 1;
        for (int d = rank - 1; d >= 0 && dense; d--) {
            if (shape[d] != 1 && (dstride[d] != expect || sstride[d] != expect)) dense = false;
            expect *= shape[d];
        }
        if (dense) {
            memcpy(dst, src, (size_t)(n * des));
            return;
        }
    }
    int64_t idx[OJ_MAX_RANK] = {0};
    const int last = rank - 1;
    const int64_t inner = shape[last];
    const int64_t dstep = dstride[last] * des, sstep = sstride[last] * ses;
    char *dp = dst;
    const char *sp = src;
    for (;;) {
        char *d = dp;
        const char *s = sp;
        if (ddt == sdt) {
            switch (des) {
            case 1: for (int64_t i = 0; i < inner; i++, d += dstep, s += sstep) *d = *s; break;
            case 2: for (int64_t i = 0; i < inner; i++, d += dstep, s += sstep) memcpy(d, s, 2); break;
            case 4: for (int64_t i = 0; i < inner; i++, d += dstep, s += sstep) memcpy(d, s, 4); break;
            default: for (int64_t i = 0; i < inner; i++, d += dstep, s += sstep) memcpy(d, s, 8); break;
            }
        } else {
            for (int64_t i = 0; i < inner; i++, d += dstep, s += sstep) oj__convert(d, ddt, s, sdt);
        }
        int k = last - 1;
        for (; k >= 0; k--) {
            dp += dstride[k] * des;
            sp += sstride[k] * ses;
            if (++idx[k] < shape[k]) break;
            dp -= dstride[k] * des * shape[k];
            sp -= sstride[k] * ses * shape[k];
            idx[k] = 0;
        }
        if (k < 0) break;
    }
}

/* ---------------------------------------------------------------- device staging */

static bool on_host(const oj_tensor *t) { return t->storage->device.type == OJ_DEVICE_CPU; }

const void *oj__host_read_begin(oj_tensor *t, void **tmp, const char *op) {
    *tmp = NULL;
    if (on_host(t)) return (const char *)t->storage->data + t->offset;
    oj_storage *s = t->storage;
    void *buf = malloc(s->nbytes ? s->nbytes : 1);
    if (buf == NULL) {
        oj_set_error(t->eng, OJ_ERR_CAPACITY, "%s: out of host memory staging %zu bytes", op,
                     s->nbytes);
        return NULL;
    }
    if (s->nbytes && t->eng->backend->copy_d2h(t->eng, buf, s->data, s->nbytes) != OJ_OK) {
        free(buf);
        oj_set_error(t->eng, OJ_ERR_DEVICE, "%s: device-to-host copy failed", op);
        return NULL;
    }
    *tmp = buf;
    return (const char *)buf + t->offset;
}

/* Writable host address of t's element 0; for device tensors a mirror that
 * write_end uploads. */
static void *write_begin(oj_tensor *t, void **tmp, const char *op) {
    return (void *)oj__host_read_begin(t, tmp, op);
}

static oj_status write_end(oj_tensor *t, void *tmp, const char *op) {
    if (tmp == NULL) return OJ_OK;
    oj_storage *s = t->storage;
    oj_status st = OJ_OK;
    if (s->nbytes && t->eng->backend->copy_h2d(t->eng, s->data, tmp, s->nbytes) != OJ_OK)
        st = oj_set_error(t->eng, OJ_ERR_DEVICE, "%s: host-to-device copy failed", op);
    free(tmp);
    return st;
}

/* Host copies of at least this many elements (same dtype) go to the CPU
 * backend's threaded copy kernel; smaller ones stay in oj__host_copy. */
#define HOST_KERNEL_MIN 16384

/* dst[i] = src[i'] (i' the broadcast index; sstride aligned to dst's rank). */
static oj_status tensor_copy(oj_tensor *dst, oj_tensor *src, const int64_t *sstride,
                             const char *op) {
    if (!on_host(dst) && !on_host(src) && dst->eng->backend->copy) {
        /* On the device: the backend's strided copy kernel, src seen through
         * a view broadcast to dst's shape. */
        oj_tensor *sv = oj__tensor_view(src, dst->rank, dst->shape, sstride, src->offset);
        if (sv == NULL) return oj_last_status(dst->eng);
        oj_status st = dst->eng->backend->copy(dst->eng, dst, sv);
        oj_release(sv);
        if (st != OJ_OK && oj_last_status(dst->eng) == OJ_OK)
            oj_set_error(dst->eng, st, "%s: device copy kernel failed", op);
        return st;
    }
    if (on_host(dst) && on_host(src) && dst->eng->device.type == OJ_DEVICE_CPU &&
        dst->eng->backend->copy && dst->dtype == src->dtype &&
        oj_numel(dst) >= HOST_KERNEL_MIN) {
        /* A large host copy: the CPU backend's copy kernel runs it on the
         * engine's threads (and transposes in tiles). A copy is exact, so
         * the bits are those of oj__host_copy for any thread count. */
        oj_tensor *sv = oj__tensor_view(src, dst->rank, dst->shape, sstride, src->offset);
        if (sv == NULL) return oj_last_status(dst->eng);
        oj_status st = dst->eng->backend->copy(dst->eng, dst, sv);
        oj_release(sv);
        if (st != OJ_OK && oj_last_status(dst->eng) == OJ_OK)
            oj_set_error(dst->eng, st, "%s: copy kernel failed", op);
        return st;
    }
    void *stmp = NULL, *dtmp = NULL;
    const void *sp = oj__host_read_begin(src, &stmp, op);
    if (sp == NULL) return oj_last_status(dst->eng);
    void *dp = write_begin(dst, &dtmp, op);
    if (dp == NULL) {
        free(stmp);
        return oj_last_status(dst->eng);
    }
    oj__host_copy(dst->rank, dst->shape, dp, dst->stride, dst->dtype, sp, sstride, src->dtype);
    free(stmp);
    return write_end(dst, dtmp, op);
}

/* ---------------------------------------------------------------- public */

oj_status oj_copy_from_host(oj_tensor *t, const void *src, size_t nbytes) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "copy_from_host", "tensor"))
        return eng ? oj_last_status(eng) : OJ_ERR_INVALID_ARGUMENT;
    size_t need = (size_t)oj_numel(t) * oj_dtype_size(t->dtype);
    char buf[160];
    if (nbytes != need)
        return oj_set_error(eng, OJ_ERR_SHAPE,
                            "copy_from_host: %zu bytes do not fit %s %s (%zu bytes)", nbytes,
                            oj_shape_str(t, buf, sizeof buf), oj_dtype_name(t->dtype), need);
    if (!oj_is_contiguous(t))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "copy_from_host: tensor %s is not contiguous",
                            oj_shape_str(t, buf, sizeof buf));
    if (need == 0) return OJ_OK;
    if (src == NULL) return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "copy_from_host: src is NULL");
    char *dst = (char *)t->storage->data + t->offset;
    if (on_host(t)) {
        memcpy(dst, src, need);
    } else {
        eng->h2d_copies++;
        if (eng->backend->copy_h2d(eng, dst, src, need) != OJ_OK) return oj_last_status(eng);
    }
    oj_bump_version(t);
    return OJ_OK;
}

oj_status oj_to_host(oj_tensor *t, void *dst, size_t nbytes) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "to_host", "tensor"))
        return eng ? oj_last_status(eng) : OJ_ERR_INVALID_ARGUMENT;
    size_t need = (size_t)oj_numel(t) * oj_dtype_size(t->dtype);
    if (nbytes != need) {
        char buf[160];
        return oj_set_error(eng, OJ_ERR_SHAPE,
                            "to_host: buffer of %zu bytes does not fit %s %s (%zu bytes)", nbytes,
                            oj_shape_str(t, buf, sizeof buf), oj_dtype_name(t->dtype), need);
    }
    if (need == 0) return OJ_OK;
    if (dst == NULL) return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "to_host: dst is NULL");
    if (!on_host(t)) {
        eng->d2h_copies++;
        if (oj_is_contiguous(t)) {
            if (eng->backend->copy_d2h(eng, dst, (char *)t->storage->data + t->offset, need) != OJ_OK)
                return oj_set_error(eng, OJ_ERR_DEVICE, "to_host: device-to-host copy failed");
            return OJ_OK;
        }
    }
    void *tmp = NULL;
    const void *sp = oj__host_read_begin(t, &tmp, "to_host");
    if (sp == NULL) return oj_last_status(eng);
    int64_t cstride[OJ_MAX_RANK];
    oj__contiguous_strides(t->rank, t->shape, cstride);
    oj__host_copy(t->rank, t->shape, dst, cstride, t->dtype, sp, t->stride, t->dtype);
    free(tmp);
    return OJ_OK;
}

double oj_item_at(oj_tensor *t, int64_t i) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "item_at", "tensor")) return NAN;
    int64_t n = oj_numel(t);
    if (i < 0 || i >= n) {
        char buf[160];
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "item_at: index %lld out of range for %s (%lld elements)",
                     (long long)i, oj_shape_str(t, buf, sizeof buf), (long long)n);
        return NAN;
    }
    int64_t off = 0;
    for (int d = t->rank - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    size_t es = oj_dtype_size(t->dtype);
    const char *p = (const char *)t->storage->data + t->offset + off * (int64_t)es;
    if (on_host(t)) return oj__load(p, t->dtype);
    unsigned char tmp[8];
    if (eng->backend->copy_d2h(eng, tmp, p, es) != OJ_OK) {
        oj_set_error(eng, OJ_ERR_DEVICE, "item_at: device-to-host copy failed");
        return NAN;
    }
    return oj__load(tmp, t->dtype);
}

double oj__reduce_all(oj_tensor *t, int op, const char *opname, oj_status *st) {
    oj_engine *eng = t->eng;
    int64_t ones[OJ_MAX_RANK];
    for (int d = 0; d < t->rank; d++) ones[d] = 1;
    oj_tensor *out = oj__tensor_alloc(eng, t->rank, ones, OJ_F64, opname);
    if (out == NULL) {
        *st = oj_last_status(eng);
        return NAN;
    }
    uint32_t mask = t->rank ? (uint32_t)((1u << t->rank) - 1u) : 0u;
    *st = eng->backend->reduce(eng, (oj_reduce_op)op, out, NULL, t, mask, 0.0);
    double v = *st == OJ_OK ? oj_item(out) : NAN;
    oj_release(out);
    return v;
}

double oj_item(oj_tensor *t) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "item", "tensor")) return NAN;
    if (oj_numel(t) != 1) {
        char buf[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "item: tensor %s has %lld elements, expected 1",
                     oj_shape_str(t, buf, sizeof buf), (long long)oj_numel(t));
        return NAN;
    }
    return oj_item_at(t, 0);
}

oj_tensor *oj__clone(oj_tensor *t) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "clone", "tensor")) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, t->rank, t->shape, t->dtype, "clone");
    if (out == NULL) return NULL;
    if (!on_host(t) && oj_is_contiguous(t)) {
        size_t nb = (size_t)oj_numel(t) * oj_dtype_size(t->dtype);
        if (nb && eng->backend->copy_d2d(eng, out->storage->data,
                                         (char *)t->storage->data + t->offset, nb) != OJ_OK) {
            oj_set_error(eng, OJ_ERR_DEVICE, "clone: device copy failed");
            oj_release(out);
            return NULL;
        }
        return out;
    }
    if (tensor_copy(out, t, t->stride, "clone") != OJ_OK) {
        oj_release(out);
        return NULL;
    }
    return out;
}

oj_tensor *oj__contiguous(oj_tensor *t) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "contiguous", "tensor")) return NULL;
    if (oj_is_contiguous(t)) return oj__tensor_view(t, t->rank, t->shape, t->stride, t->offset);
    return oj__clone(t);
}

oj_status oj_copy_(oj_tensor *dst, oj_tensor *src) {
    oj_engine *eng = oj__engine_of(dst);
    if (eng == NULL) eng = oj__engine_of(src);
    if (!oj__check_tensor(eng, dst, "copy_", "dst") || !oj__check_tensor(eng, src, "copy_", "src"))
        return eng ? oj_last_status(eng) : OJ_ERR_INVALID_ARGUMENT;
    char b1[160], b2[160];
    if (src->storage->device.type != dst->storage->device.type ||
        src->storage->device.index != dst->storage->device.index)
        return oj_set_error(eng, OJ_ERR_DEVICE, "copy_: src and dst are on different devices");
    int64_t sstride[OJ_MAX_RANK];
    bool ok = src->rank <= dst->rank;
    for (int d = 0; ok && d < dst->rank; d++) {
        int sd = d - (dst->rank - src->rank);
        if (sd < 0) sstride[d] = 0;
        else if (src->shape[sd] == dst->shape[d]) sstride[d] = src->stride[sd];
        else if (src->shape[sd] == 1) sstride[d] = 0;
        else ok = false;
    }
    if (!ok)
        return oj_set_error(eng, OJ_ERR_SHAPE, "copy_: src %s cannot be broadcast to dst %s",
                            oj_shape_str(src, b1, sizeof b1), oj_shape_str(dst, b2, sizeof b2));
    if (!oj__check_writable(eng, dst, "copy_", "dst")) return OJ_ERR_INVALID_ARGUMENT;
    oj_status st;
    if (src->storage == dst->storage) {
        /* Possible overlap: read src into a private buffer first. */
        size_t nb = (size_t)oj_numel(src) * oj_dtype_size(src->dtype);
        void *buf = malloc(nb ? nb : 1);
        if (buf == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "copy_: out of host memory");
        st = oj_to_host(src, buf, nb);
        if (st == OJ_OK) {
            int64_t cs[OJ_MAX_RANK];
            oj__contiguous_strides(src->rank, src->shape, cs);
            for (int d = 0; d < dst->rank; d++) {
                int sd = d - (dst->rank - src->rank);
                if (sstride[d] != 0) sstride[d] = cs[sd];
            }
            void *dtmp = NULL;
            void *dp = write_begin(dst, &dtmp, "copy_");
            if (dp == NULL) st = oj_last_status(eng);
            else {
                oj__host_copy(dst->rank, dst->shape, dp, dst->stride, dst->dtype, buf, sstride,
                              src->dtype);
                st = write_end(dst, dtmp, "copy_");
            }
        }
        free(buf);
    } else {
        st = tensor_copy(dst, src, sstride, "copy_");
    }
    if (st == OJ_OK) oj__storage_written(dst->storage);
    return st;
}

oj_status oj_fill_(oj_tensor *t, double value) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "fill_", "tensor"))
        return eng ? oj_last_status(eng) : OJ_ERR_INVALID_ARGUMENT;
    if (!on_host(t) && eng->backend->fill) { /* the device's fill kernel */
        oj_status fst = eng->backend->fill(eng, t, value);
        if (fst == OJ_OK) oj__storage_written(t->storage);
        else if (oj_last_status(eng) == OJ_OK) oj_set_error(eng, fst, "fill_: device fill kernel failed");
        return fst;
    }
    if (on_host(t) && eng->device.type == OJ_DEVICE_CPU && eng->backend->fill &&
        oj_dtype_is_float(t->dtype) && oj_numel(t) >= HOST_KERNEL_MIN) {
        /* A large float fill: the CPU backend's threaded kernel (which
         * stores the value as oj__store does). */
        oj_status fst = eng->backend->fill(eng, t, value);
        if (fst == OJ_OK) oj__storage_written(t->storage);
        else if (oj_last_status(eng) == OJ_OK) oj_set_error(eng, fst, "fill_: fill kernel failed");
        return fst;
    }
    unsigned char v[8];
    oj__store(v, t->dtype, value);
    int64_t zero[OJ_MAX_RANK] = {0};
    void *tmp = NULL;
    void *dp = write_begin(t, &tmp, "fill_");
    if (dp == NULL) return oj_last_status(eng);
    oj__host_copy(t->rank, t->shape, dp, t->stride, t->dtype, v, zero, t->dtype);
    oj_status st = write_end(t, tmp, "fill_");
    if (st == OJ_OK) oj__storage_written(t->storage);
    return st;
}

oj_tensor *oj_to_device(oj_tensor *t, oj_engine *dst) {
    if (dst == NULL || t == NULL) return NULL;
    if (!oj__live(t)) {
        oj_set_error(dst, OJ_ERR_INVALID_ARGUMENT, "to_device: the tensor was released");
        return NULL;
    }
    size_t nbytes = (size_t)oj_numel(t) * oj_dtype_size(t->dtype);
    void *buf = malloc(nbytes ? nbytes : 1);
    if (buf == NULL) {
        oj_set_error(dst, OJ_ERR_CAPACITY, "to_device: out of host memory staging %zu bytes",
                     nbytes);
        return NULL;
    }
    oj_tensor *out = NULL;
    if (oj_to_host(t, buf, nbytes) != OJ_OK)
        oj_set_error(dst, oj_last_status(t->eng), "to_device: reading the source: %s",
                     oj_last_error(t->eng));
    else
        out = oj_from_host(dst, t->rank, t->shape, t->dtype, buf, nbytes);
    free(buf);
    return out;
}

void oj_engine_transfers(const oj_engine *eng, int64_t *h2d, int64_t *d2h) {
    if (h2d) *h2d = eng ? eng->h2d_copies : 0;
    if (d2h) *d2h = eng ? eng->d2h_copies : 0;
}
