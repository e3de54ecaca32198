/* CPU backend memory entries: 64-byte aligned host memory and memmove. The
 * engine pools host storage above this (src/core/storage.c).
 * The table oj_cpu_backend is defined here with the memory entries only;
 * when the kernel entries arrive, the table moves next to them (e.g.
 * cpu_backend.c, using cpu_memory.h) and is removed from this file. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_memory.h"

void *oj_cpu_mem_alloc(oj_engine *eng, size_t nbytes) {
    (void)eng;
    void *p = NULL;
    if (posix_memalign(&p, 64, nbytes ? nbytes : 64) != 0) return NULL;
    return p;
}

void oj_cpu_mem_free(oj_engine *eng, void *ptr, size_t nbytes) {
    (void)eng;
    (void)nbytes;
    free(ptr);
}

oj_status oj_cpu_mem_copy(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    (void)eng;
    if (nbytes) memmove(dst, src, nbytes);
    return OJ_OK;
}

oj_status oj_cpu_mem_set0(oj_engine *eng, void *dst, size_t nbytes) {
    (void)eng;
    if (nbytes) memset(dst, 0, nbytes);
    return OJ_OK;
}

oj_status oj_cpu_mem_synchronize(oj_engine *eng) {
    (void)eng;
    return OJ_OK;
}

const oj_backend oj_cpu_backend = {
    .name = "cpu",
    .type = OJ_DEVICE_CPU,
    .open = NULL,
    .close = NULL,
    .alloc = oj_cpu_mem_alloc,
    .free = oj_cpu_mem_free,
    .copy_h2d = oj_cpu_mem_copy,
    .copy_d2h = oj_cpu_mem_copy,
    .copy_d2d = oj_cpu_mem_copy,
    .memset0 = oj_cpu_mem_set0,
    .synchronize = oj_cpu_mem_synchronize,
};
