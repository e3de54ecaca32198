/* The backend interface: a table of entry points that a device implements.
 * Core calls the memory entries; the ops layer calls the kernel entries
 * after validating shapes, dtypes and devices, so a backend never sees an
 * invalid request. Backends know nothing of autograd.
 * Every kernel is tested against the CPU backend (tests/gpu). */
#ifndef OJAS_BACKEND_H
#define OJAS_BACKEND_H

#include "core/internal.h"

typedef struct oj_backend {
    const char *name;
    oj_device_type type;
    /* Open device `index` for eng (store per-engine state in
     * eng->ext[OJ_EXT_BACKEND]). OJ_ERR_DEVICE with a message in err when it
     * cannot be opened. */
    oj_status (*open)(oj_engine *eng, int index, oj_error *err);
    void (*close)(oj_engine *eng);
    /* Raw device memory; NULL when the device is out of memory. Budget
     * accounting is done by core before alloc is called. */
    void *(*alloc)(oj_engine *eng, size_t nbytes);
    void (*free)(oj_engine *eng, void *ptr, size_t nbytes);
    /* Byte copies; dst/src device pointers as named. */
    oj_status (*copy_h2d)(oj_engine *eng, void *dst, const void *src, size_t nbytes);
    oj_status (*copy_d2h)(oj_engine *eng, void *dst, const void *src, size_t nbytes);
    oj_status (*copy_d2d)(oj_engine *eng, void *dst, const void *src, size_t nbytes);
    oj_status (*memset0)(oj_engine *eng, void *dst, size_t nbytes);
    oj_status (*synchronize)(oj_engine *eng);
    /* Kernel entries are appended below by the ops layer's needs. */
} oj_backend;

extern const oj_backend oj_cpu_backend;
#ifdef OJAS_HAVE_CUDA
extern const oj_backend oj_cuda_backend;
#endif

#endif /* OJAS_BACKEND_H */
