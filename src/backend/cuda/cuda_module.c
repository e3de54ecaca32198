/* The CUDA backend module's entry (backend/module.h) and the core
 * functions its kernels call, each forwarded to libojas through the table
 * the entry receives. Built only into libojas-cuda.so, with hidden
 * visibility: these definitions bind the module's own calls and are seen
 * by no other object, so they never stand in for libojas's. */
#include <stdio.h>
#include <string.h>

#include "backend/module.h"

static const oj_cuda_host *g_host; /* set by the entry before any engine opens */

__attribute__((visibility("default"))) const oj_backend *
oj_cuda_module_init(const oj_cuda_host *host, char *msg, size_t len);

const oj_backend *oj_cuda_module_init(const oj_cuda_host *host, char *msg, size_t len) {
    if (host == NULL || host->abi != OJ_CUDA_MODULE_ABI || host->size != sizeof(oj_cuda_host)) {
        snprintf(msg, len, "its interface is version %u, libojas offers version %u",
                 OJ_CUDA_MODULE_ABI, host ? host->abi : 0u);
        return NULL;
    }
    if (strcmp(host->version, OJ_VERSION_STRING) != 0 ||
        host->engine_size != sizeof(struct oj_engine) ||
        host->tensor_size != sizeof(struct oj_tensor) || host->storage_size != sizeof(oj_storage) ||
        host->backend_size != sizeof(oj_backend)) {
        snprintf(msg, len,
                 "it is built from other ojas sources than this libojas (module %s: engine %zu, "
                 "tensor %zu, storage %zu, backend %zu bytes; libojas %s: %zu, %zu, %zu, %zu); "
                 "install the module built with this libojas",
                 OJ_VERSION_STRING, sizeof(struct oj_engine), sizeof(struct oj_tensor),
                 sizeof(oj_storage), sizeof(oj_backend), host->version, host->engine_size,
                 host->tensor_size, host->storage_size, host->backend_size);
        return NULL;
    }
    g_host = host;
    return &oj_cuda_backend;
}

/* ---- core functions, forwarded (declared in ojas/core.h and core/internal.h) */

oj_status oj_set_error(oj_engine *eng, oj_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oj_status r = g_host->set_errorv(eng, st, fmt, ap);
    va_end(ap);
    return r;
}

oj_status oj_set_errorv(oj_engine *eng, oj_status st, const char *fmt, va_list ap) {
    return g_host->set_errorv(eng, st, fmt, ap);
}

oj_status oj_error_set(oj_error *e, oj_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oj_status r = g_host->error_setv(e, st, fmt, ap);
    va_end(ap);
    return r;
}

oj_status oj_last_status(const oj_engine *eng) { return g_host->last_status(eng); }

oj_storage *oj__storage_new(oj_engine *eng, size_t nbytes, const char *op) {
    return g_host->storage_new(eng, nbytes, op);
}

void oj__storage_release(oj_storage *s) { g_host->storage_release(s); }

char *oj__shape_fmt(char *buf, size_t len, int rank, const int64_t *shape) {
    return g_host->shape_fmt(buf, len, rank, shape);
}

void oj__store(void *p, oj_dtype dt, double v) { g_host->store(p, dt, v); }

size_t oj_dtype_size(oj_dtype dt) { return g_host->dtype_size(dt); }

const char *oj_dtype_name(oj_dtype dt) { return g_host->dtype_name(dt); }

bool oj_dtype_is_float(oj_dtype dt) { return g_host->dtype_is_float(dt); }

bool oj_is_contiguous(const oj_tensor *t) { return g_host->is_contiguous(t); }
