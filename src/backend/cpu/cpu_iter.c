/* Strided N-d iteration (see cpu_iter.h). */
#include <string.h>

#include "backend/cpu/cpu_iter.h"

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
    for (int k = 0; k < it->n; k++) step[k] = it->stride[k][inner];
    for (;;) {
        for (int k = 0; k < it->n; k++) {
            char *p = it->base[k];
            for (int d = 0; d < inner; d++) p += idx[d] * it->stride[k][d];
            ptr[k] = p;
        }
        fn(ptr, step, it->shape[inner], ctx);
        int d = inner - 1;
        while (d >= 0) {
            if (++idx[d] < it->shape[d]) break;
            idx[d] = 0;
            d--;
        }
        if (d < 0) break;
    }
}
