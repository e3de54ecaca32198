/* Helpers shared by the CPU nn kernels (cpu_nn_*.c): row loads and stores
 * between any float dtype and double, index loads, scratch memory. The nn
 * kernels compute and accumulate in double whatever the storage dtype, so
 * the CPU backend stays the accurate reference. */
#ifndef OJAS_CPU_NN_UTIL_H
#define OJAS_CPU_NN_UTIL_H

#include <stdlib.h>

#include "backend/backend.h"

/* Address of element 0 of a CPU tensor. */
static inline char *oj__nn_base(const oj_tensor *t) {
    return (char *)t->storage->data + t->offset;
}

/* dst[i] = p[i * stride] (elements of dtype dt) as double, i < n. */
static inline void oj__nn_load(const void *p, oj_dtype dt, int64_t n, int64_t stride,
                               double *dst) {
    switch (dt) {
    case OJ_F32: {
        const float *s = p;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride];
        break;
    }
    case OJ_F64: {
        const double *s = p;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride];
        break;
    }
    case OJ_BF16: {
        const uint16_t *s = p;
        for (int64_t i = 0; i < n; i++) dst[i] = oj_bf16_to_f32(s[i * stride]);
        break;
    }
    case OJ_F16: {
        const uint16_t *s = p;
        for (int64_t i = 0; i < n; i++) dst[i] = oj_f16_to_f32(s[i * stride]);
        break;
    }
    default: {
        size_t es = oj_dtype_size(dt);
        for (int64_t i = 0; i < n; i++) dst[i] = oj__load((const char *)p + i * stride * (int64_t)es, dt);
        break;
    }
    }
}

/* p[i] = src[i] rounded to dt (contiguous), i < n. */
static inline void oj__nn_store(void *p, oj_dtype dt, int64_t n, const double *src) {
    switch (dt) {
    case OJ_F32: {
        float *d = p;
        for (int64_t i = 0; i < n; i++) d[i] = (float)src[i];
        break;
    }
    case OJ_F64: {
        double *d = p;
        for (int64_t i = 0; i < n; i++) d[i] = src[i];
        break;
    }
    case OJ_BF16: {
        uint16_t *d = p;
        for (int64_t i = 0; i < n; i++) d[i] = oj_f32_to_bf16((float)src[i]);
        break;
    }
    case OJ_F16: {
        uint16_t *d = p;
        for (int64_t i = 0; i < n; i++) d[i] = oj_f32_to_f16((float)src[i]);
        break;
    }
    default: {
        size_t es = oj_dtype_size(dt);
        for (int64_t i = 0; i < n; i++) oj__store((char *)p + i * (int64_t)es, dt, src[i]);
        break;
    }
    }
}

/* Element i of a contiguous float array p of dtype dt, as double. */
static inline double oj__nn_get(const void *p, oj_dtype dt, int64_t i) {
    switch (dt) {
    case OJ_F32: return ((const float *)p)[i];
    case OJ_F64: return ((const double *)p)[i];
    default: return oj__load((const char *)p + i * (int64_t)oj_dtype_size(dt), dt);
    }
}

/* Class index i of an integer tensor (i64 or i32) at element offset i. */
static inline int64_t oj__nn_index(const void *p, oj_dtype dt, int64_t i) {
    return dt == OJ_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Scratch of n doubles (zeroed); NULL with OJ_ERR_CAPACITY recorded naming op. */
static inline double *oj__nn_scratch(oj_engine *eng, int64_t n, const char *op) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (p == NULL)
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory for %lld scratch values", op,
                     (long long)n);
    return p;
}

#endif /* OJAS_CPU_NN_UTIL_H */
