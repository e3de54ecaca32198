/* Strided N-d iteration for CPU kernels: walks the output's shape and hands
 * 1-D runs (with per-tensor byte strides) to an inner function. Adjacent
 * dims that are contiguous for every tensor are merged first, so a
 * contiguous tensor is one run. */
#ifndef OJAS_CPU_ITER_H
#define OJAS_CPU_ITER_H

#include "core/internal.h"

#define OJ_ITER_MAX 4

typedef struct oj_iter {
    int rank;                              /* after merging; >= 1 */
    int n;                                 /* tensors */
    int64_t shape[OJ_MAX_RANK];
    int64_t stride[OJ_ITER_MAX][OJ_MAX_RANK]; /* bytes */
    char *base[OJ_ITER_MAX];
} oj_iter;

/* Inner run: n elements, ptr[k] advancing by step[k] bytes. */
typedef void (*oj_iter_fn)(char **ptr, const int64_t *step, int64_t n, void *ctx);

/* Set up iteration over `shape` for tensors t[0..n) (each broadcast to that
 * shape through its strides: a tensor of lower rank is aligned right). */
void oj_iter_init(oj_iter *it, int rank, const int64_t *shape, int n, const oj_tensor *const *t);
/* Call fn for every run. */
void oj_iter_run(const oj_iter *it, oj_iter_fn fn, void *ctx);
/* Call fn for every run, spread over eng's threads in pieces of about
 * OJ_ITER_GRAIN elements (a long run is cut into pieces). Only for kernels
 * whose result per element does not depend on the other elements
 * (elementwise ops), since the pieces are not those of oj_iter_run. */
void oj_iter_run_parallel(oj_engine *eng, const oj_iter *it, oj_iter_fn fn, void *ctx);
#define OJ_ITER_GRAIN 32768
/* Element count of the iteration. */
int64_t oj_iter_numel(const oj_iter *it);

#endif /* OJAS_CPU_ITER_H */
