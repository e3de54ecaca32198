/* Strided N-d iteration (see cpu_iter.h). */
#include <string.h>

#include "backend/cpu/cpu_iter.h"
#include "backend/cpu/cpu_pool.h"

void oj_iter_init(oj_iter *it, int rank, const int64_t *shape, int n, const oj_tensor *const *t) {
    memset(it, 0, sizeof *it);
    it->n = n;
    /* Drop size-1 dims (their stride is irrelevant) and right-align inputs. */
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (shape[d] == 1) continue;
        it->shape[r] = shape[d];
        for (int k = 0; k < n; k++) {
            int td = d - (rank - t[k]->rank);
            int64_t s = (td >= 0 && t[k]->shape[td] != 1) ? t[k]->stride[td] : 0;
            it->stride[k][r] = s * (int64_t)oj_dtype_size(t[k]->dtype);
        }
        r++;
    }
    for (int k = 0; k < n; k++) it->base[k] = (char *)t[k]->storage->data + t[k]->offset;
    if (r == 0) { /* scalar or all-ones shape: one element */
        it->shape[0] = 1;
        r = 1;
    }
    /* Merge dim d into d-1 when every tensor steps through d-1 exactly as
     * one run of d. */
    int m = 0;
    for (int d = 1; d < r; d++) {
        bool merge = true;
        for (int k = 0; k < n; k++)
            if (it->stride[k][m] != it->stride[k][d] * it->shape[d]) merge = false;
        if (merge) {
            it->shape[m] *= it->shape[d];
            for (int k = 0; k < n; k++) it->stride[k][m] = it->stride[k][d];
        } else {
            m++;
            it->shape[m] = it->shape[d];
            for (int k = 0; k < n; k++) it->stride[k][m] = it->stride[k][d];
        }
    }
    it->rank = m + 1;
    /* An empty shape anywhere means no elements. */
    for (int d = 0; d < rank; d++)
        if (shape[d] == 0) it->shape[0] = 0;
}

int64_t oj_iter_numel(const oj_iter *it) {
    int64_t n = 1;
    for (int d = 0; d < it->rank; d++) n *= it->shape[d];
    return n;
}

void oj_iter_run(const oj_iter *it, oj_iter_fn fn, void *ctx) {
    if (oj_iter_numel(it) == 0) return;
    int inner = it->rank - 1;
    int64_t idx[OJ_MAX_RANK] = {0};
    char *ptr[OJ_ITER_MAX];
    int64_t step[OJ_ITER_MAX];
    for (int k = 0; k < it->n; k++) {
        step[k] = it->stride[k][inner];
        ptr[k] = it->base[k];
    }
    for (;;) {
        char *run[OJ_ITER_MAX];
        for (int k = 0; k < it->n; k++) run[k] = ptr[k]; /* fn may not change ptr */
        fn(run, step, it->shape[inner], ctx);
        int d = inner - 1;
        while (d >= 0) { /* next row: step the pointers (no re-multiplying) */
            for (int k = 0; k < it->n; k++) ptr[k] += it->stride[k][d];
            if (++idx[d] < it->shape[d]) break;
            for (int k = 0; k < it->n; k++) ptr[k] -= it->stride[k][d] * it->shape[d];
            idx[d] = 0;
            d--;
        }
        if (d < 0) break;
    }
}

typedef struct {
    const oj_iter *it;
    oj_iter_fn fn;
    void *ctx;
    int64_t inner; /* elements per row */
} par_ctx;

/* Rank 1: elements [begin, end) of the single run. */
static void run_piece(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const par_ctx *pc = vc;
    const oj_iter *it = pc->it;
    char *ptr[OJ_ITER_MAX];
    int64_t step[OJ_ITER_MAX];
    for (int k = 0; k < it->n; k++) {
        step[k] = it->stride[k][0];
        ptr[k] = it->base[k] + begin * step[k];
    }
    pc->fn(ptr, step, end - begin, pc->ctx);
}

/* Rank > 1: rows [begin, end) (a row = one run of the last dim). */
static void run_rows(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const par_ctx *pc = vc;
    const oj_iter *it = pc->it;
    int inner = it->rank - 1;
    int64_t idx[OJ_MAX_RANK] = {0};
    int64_t rem = begin;
    for (int d = inner - 1; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    char *ptr[OJ_ITER_MAX];
    int64_t step[OJ_ITER_MAX];
    for (int k = 0; k < it->n; k++) {
        step[k] = it->stride[k][inner];
        char *p = it->base[k];
        for (int d = 0; d < inner; d++) p += idx[d] * it->stride[k][d];
        ptr[k] = p;
    }
    for (int64_t r = begin; r < end; r++) {
        char *run[OJ_ITER_MAX];
        for (int k = 0; k < it->n; k++) run[k] = ptr[k]; /* fn may not change ptr */
        pc->fn(run, step, pc->inner, pc->ctx);
        for (int d = inner - 1; d >= 0; d--) { /* next row: step the pointers */
            for (int k = 0; k < it->n; k++) ptr[k] += it->stride[k][d];
            if (++idx[d] < it->shape[d]) break;
            for (int k = 0; k < it->n; k++) ptr[k] -= it->stride[k][d] * it->shape[d];
            idx[d] = 0;
        }
    }
}

void oj_iter_run_parallel(oj_engine *eng, const oj_iter *it, oj_iter_fn fn, void *ctx) {
    int64_t n = oj_iter_numel(it);
    if (n == 0) return;
    if (oj_cpu_threads(eng) < 2) {
        unsigned fp = oj_cpu_fpmode_begin(eng); /* as a parallel-for's chunks run */
        oj_iter_run(it, fn, ctx);
        oj_cpu_fpmode_end(fp);
        return;
    }
    par_ctx pc = {it, fn, ctx, it->shape[it->rank - 1]};
    if (it->rank == 1) {
        oj_cpu_parallel_for(eng, n, OJ_ITER_GRAIN, run_piece, &pc);
        return;
    }
    int64_t rows = n / pc.inner;
    int64_t grain = OJ_ITER_GRAIN / pc.inner;
    oj_cpu_parallel_for(eng, rows, grain < 1 ? 1 : grain, run_rows, &pc);
}
