/* CPU dropout with a counter-based Philox4x32-10 mask (Salmon et al., SC
 * 2011): element i depends only on (seed, offset, i), so the mask is the
 * same whatever the thread count or device, and the backward regenerates it
 * instead of storing it. Srivastava et al., "Dropout", JMLR 2014. */
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"

#define DROP_BLOCK 1024 /* elements converted at a time */

// x (N), out (N), both contiguous
oj_status oj_cpu_dropout(oj_engine *eng, oj_tensor *out, const oj_tensor *x, double p,
                         uint64_t seed, uint64_t offset) {
    int64_t n = oj_numel(x);
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    double buf[DROP_BLOCK];
    size_t es = oj_dtype_size(x->dtype), os = oj_dtype_size(out->dtype);
    (void)eng;
    for (int64_t e0 = 0; e0 < n; e0 += DROP_BLOCK) {
        int64_t m = n - e0 < DROP_BLOCK ? n - e0 : DROP_BLOCK; /* e0 is a multiple of 4 */
        oj__nn_load(oj__nn_base(x) + (size_t)e0 * es, x->dtype, m, 1, buf);
        for (int64_t k = 0; k < m; k += 4) {
            uint64_t cnum = offset + (uint64_t)((e0 + k) / 4);
            uint32_t ctr[4] = {(uint32_t)cnum, (uint32_t)(cnum >> 32), 0, 0}, r[4];
            oj_philox4x32_10(ctr, key, r);
            for (int j = 0; j < 4 && k + j < m; j++) {
                double u = (double)r[j] / 4294967296.0;
                buf[k + j] = u >= p ? buf[k + j] * scale : 0.0;
            }
        }
        oj__nn_store(oj__nn_base(out) + (size_t)e0 * os, out->dtype, m, buf);
    }
    return OJ_OK;
}
