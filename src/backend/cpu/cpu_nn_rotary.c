/* CPU rotary position embedding, half-split layout (Su et al., "RoFormer:
 * Enhanced Transformer with Rotary Position Embedding", 2021; the layout of
 * GPT-NeoX and Llama). Angles are computed in double. */
#include <math.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"

// x (..., T, D), out (..., T, D)
oj_status oj_cpu_rotary_embedding(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  int64_t position_offset, double theta, bool inverse) {
    int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1], half = D / 2;
    int64_t rows = T > 0 && D > 0 ? oj_numel(x) / (T * D) : 0;
    /* cos/sin table [T, D/2] */
    double *cs = oj__nn_scratch(eng, 2 * T * half, "rotary_embedding");
    double *row = oj__nn_scratch(eng, 2 * D, "rotary_embedding");
    if (cs == NULL || row == NULL) {
        free(cs);
        free(row);
        return OJ_ERR_CAPACITY;
    }
    double sign = inverse ? -1.0 : 1.0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double freq = pow(theta, -2.0 * (double)i / (double)D);
            double a = (double)(position_offset + t) * freq;
            cs[2 * (t * half + i)] = cos(a);
            cs[2 * (t * half + i) + 1] = sign * sin(a);
        }
    size_t es = oj_dtype_size(x->dtype);
    double *y = row + D;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < T; t++) {
            size_t off = (size_t)((r * T + t) * D) * es;
            oj__nn_load(oj__nn_base(x) + off, x->dtype, D, 1, row);
            for (int64_t i = 0; i < half; i++) {
                double c = cs[2 * (t * half + i)], s = cs[2 * (t * half + i) + 1];
                double x1 = row[i], x2 = row[half + i];
                y[i] = x1 * c - x2 * s;
                y[half + i] = x2 * c + x1 * s;
            }
            oj__nn_store(oj__nn_base(out) + off, out->dtype, D, y);
        }
    free(cs);
    free(row);
    return OJ_OK;
}
