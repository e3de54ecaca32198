/* CPU backend memory entries (cpu_memory.c), for the backend table. */
#ifndef OJAS_CPU_MEMORY_H
#define OJAS_CPU_MEMORY_H

#include "backend/backend.h"

/* 64-byte aligned host memory; NULL when out of memory. */
void *oj_cpu_mem_alloc(oj_engine *eng, size_t nbytes);
void oj_cpu_mem_free(oj_engine *eng, void *ptr, size_t nbytes);
/* memmove of nbytes (serves h2d, d2h and d2d on the host). */
oj_status oj_cpu_mem_copy(oj_engine *eng, void *dst, const void *src, size_t nbytes);
oj_status oj_cpu_mem_set0(oj_engine *eng, void *dst, size_t nbytes);
oj_status oj_cpu_mem_synchronize(oj_engine *eng);

#endif /* OJAS_CPU_MEMORY_H */
