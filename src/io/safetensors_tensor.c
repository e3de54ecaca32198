/* Tensors from an open safetensors file: zero-copy views of the mapping on
 * the host (the storage holds a reference to the mapping), copies on other
 * devices or when the file leaves a tensor misaligned. */
#include <stdint.h>
#include <string.h>

#include "core/internal.h"
#include "io/io_internal.h"

static void release_mapping(void *ctx) {
    oj__map_release(ctx);
}

oj_tensor *oj_safetensors_tensor(oj_safetensors *st, oj_engine *eng, const char *name) {
    char q[160];
    if (!eng) return NULL;
    if (!st || !name) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "safetensors_tensor: %s is NULL",
                     st ? "name" : "file handle");
        return NULL;
    }
    oj__quote(q, sizeof q, name, strlen(name));
    int64_t i = oj_safetensors_find(st, name);
    if (i < 0) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "safetensors_tensor: no tensor %s in the file", q);
        return NULL;
    }
    const oj__st_tensor *t = &st->t[i];
    oj_dtype dt = oj__st_dtypes[t->dtype].dtype;
    if (dt == OJ_DTYPE_COUNT) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                     "safetensors_tensor: tensor %s has dtype %s, which ojas has no type for", q,
                     oj__st_dtypes[t->dtype].name);
        return NULL;
    }
    if (t->rank > OJ_MAX_RANK) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED, "safetensors_tensor: tensor %s has rank %d > %d", q,
                     t->rank, OJ_MAX_RANK);
        return NULL;
    }
    int64_t numel;
    if (oj_shape_numel(t->rank, t->shape, dt, &numel) != OJ_OK) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "safetensors_tensor: tensor %s: shape overflows", q);
        return NULL;
    }
    uint8_t *p = (uint8_t *)st->data + t->begin;
    size_t nbytes = (size_t)(t->end - t->begin);
    bool zero_copy = oj_engine_device(eng).type == OJ_DEVICE_CPU &&
                     st->map->kind != OJ__MAP_BORROWED &&
                     (uintptr_t)p % oj_dtype_size(dt) == 0;
    if (!zero_copy) return oj_from_host(eng, t->rank, t->shape, dt, p, nbytes);
    oj__map_retain(st->map);
    oj_storage *s = oj__storage_wrap(eng, p, nbytes, release_mapping, st->map);
    if (!s) {
        oj__map_release(st->map);
        return NULL;
    }
    oj_tensor *x = oj__tensor_new(eng, s, 0, t->rank, t->shape, NULL, dt);
    oj__storage_release(s); /* the tensor holds it now (or it is gone) */
    return x;
}
