/* CPU backend memory entries: 64-byte aligned host memory and memmove. The
 * engine pools host storage above this (src/core/storage.c).
 * The table oj_cpu_backend is in cpu_backend.c. */
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
