/* The interface between libojas and its CUDA backend module
 * (libojas-cuda.so), which src/backend/registry.c loads with dlopen when
 * the first CUDA engine is created.
 *
 * The module does not link libojas: the few core functions its kernels
 * call (error recording, device storage, dtype facts) reach it as the
 * function table below, so the same module serves a program linked with
 * libojas.so, one linked with libojas.a, and one that dlopened libojas.so
 * privately (Python ctypes). It exports one symbol, OJ_CUDA_MODULE_ENTRY,
 * of type oj_cuda_module_init_fn; everything else in it is hidden.
 *
 * The module reads libojas's structs (oj_engine, oj_tensor, oj_storage)
 * directly and fills an oj_backend, so it must come from the same source
 * as the library: the entry compares the version and the sizes of those
 * structs with its own and refuses a module built from other sources. */
#ifndef OJAS_BACKEND_MODULE_H
#define OJAS_BACKEND_MODULE_H

#include <stdarg.h>

#include "backend/backend.h"

/* File name of the module (searched as registry.c's oj__backend_load says)
 * and the name of its one exported function. */
#define OJ_CUDA_MODULE_FILE "libojas-cuda.so"
#define OJ_CUDA_MODULE_ENTRY "oj_cuda_module_init"
/* Layout version of oj_cuda_host: raised whenever a field is added,
 * removed or changes type. */
#define OJ_CUDA_MODULE_ABI 1u

/* What libojas hands the module: identity (checked by the entry) and the
 * core functions the module calls, each the libojas function of that name
 * (oj__error_setv and oj_set_errorv stand for the variadic forms). */
typedef struct oj_cuda_host {
    unsigned abi;        /* OJ_CUDA_MODULE_ABI */
    size_t size;         /* sizeof(oj_cuda_host) */
    const char *version; /* OJ_VERSION_STRING */
    size_t engine_size, tensor_size, storage_size, backend_size;
    oj_status (*set_errorv)(oj_engine *eng, oj_status st, const char *fmt, va_list ap);
    oj_status (*error_setv)(oj_error *e, oj_status st, const char *fmt, va_list ap);
    oj_status (*last_status)(const oj_engine *eng);
    oj_storage *(*storage_new)(oj_engine *eng, size_t nbytes, const char *op);
    void (*storage_release)(oj_storage *s);
    char *(*shape_fmt)(char *buf, size_t len, int rank, const int64_t *shape);
    void (*store)(void *p, oj_dtype dt, double v);
    size_t (*dtype_size)(oj_dtype dt);
    const char *(*dtype_name)(oj_dtype dt);
    bool (*dtype_is_float)(oj_dtype dt);
    bool (*is_contiguous)(const oj_tensor *t);
} oj_cuda_host;

/* The module's entry: checks host (ABI, version, struct sizes) and keeps
 * the pointer (host must outlive the module: libojas passes a static
 * table). Returns the CUDA backend table (static in the module), or NULL
 * with a one-line reason in msg (len bytes, NUL-terminated) when host does
 * not match the module. Touches no device: opening one is the table's open
 * entry. */
typedef const oj_backend *(*oj_cuda_module_init_fn)(const oj_cuda_host *host, char *msg,
                                                     size_t len);

#endif /* OJAS_BACKEND_MODULE_H */
