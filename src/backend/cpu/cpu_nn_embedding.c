/* CPU embedding lookup and its deterministic backward (rows accumulated in
 * index order). */
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"

// weight (V,C), idx (N), out (N,C)
oj_status oj_cpu_embedding_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *weight,
                                   const oj_tensor *idx) {
    int64_t V = weight->shape[0], C = weight->shape[1], N = oj_numel(idx);
    const char *ip = oj__nn_base(idx);
    for (int64_t n = 0; n < N; n++) {
        int64_t t = oj__nn_index(ip, idx->dtype, n);
        if (t < 0 || t >= V)
            return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                                "embedding: index %lld at position %lld is out of range for a "
                                "table of %lld rows (expected 0 <= index < %lld)",
                                (long long)t, (long long)n, (long long)V, (long long)V);
    }
    size_t row = (size_t)C * oj_dtype_size(weight->dtype);
    const char *w = oj__nn_base(weight);
    char *o = oj__nn_base(out);
    for (int64_t n = 0; n < N; n++) {
        int64_t t = oj__nn_index(ip, idx->dtype, n);
        memcpy(o + (size_t)n * row, w + (size_t)t * row, row);
    }
    return OJ_OK;
}

// dout (N,C), idx (N), dweight (V,C)
oj_status oj_cpu_embedding_backward(oj_engine *eng, oj_tensor *dweight, const oj_tensor *dout,
                                    const oj_tensor *idx) {
    int64_t V = dweight->shape[0], C = dweight->shape[1], N = oj_numel(idx);
    const char *ip = oj__nn_base(idx);
    const char *g = oj__nn_base(dout);
    size_t es = oj_dtype_size(dout->dtype);
    char *dw = oj__nn_base(dweight);
    memset(dw, 0, (size_t)(V * C) * oj_dtype_size(dweight->dtype));
    if (dweight->dtype == OJ_F32 || dweight->dtype == OJ_F64) {
        /* Accumulate in place in the table's dtype, rows in index order. */
        double *row = oj__nn_scratch(eng, C, "embedding");
        if (row == NULL) return OJ_ERR_CAPACITY;
        for (int64_t n = 0; n < N; n++) {
            int64_t t = oj__nn_index(ip, idx->dtype, n);
            oj__nn_load(g + (size_t)(n * C) * es, dout->dtype, C, 1, row);
            if (dweight->dtype == OJ_F32) {
                float *d = (float *)dw + t * C;
                for (int64_t c = 0; c < C; c++) d[c] = (float)((double)d[c] + row[c]);
            } else {
                double *d = (double *)dw + t * C;
                for (int64_t c = 0; c < C; c++) d[c] += row[c];
            }
        }
        free(row);
        return OJ_OK;
    }
    /* bf16/f16 tables: accumulate in double, round once. */
    double *acc = oj__nn_scratch(eng, V * C, "embedding");
    double *row = oj__nn_scratch(eng, C, "embedding");
    if (acc == NULL || row == NULL) {
        free(acc);
        free(row);
        return OJ_ERR_CAPACITY;
    }
    for (int64_t n = 0; n < N; n++) {
        int64_t t = oj__nn_index(ip, idx->dtype, n);
        oj__nn_load(g + (size_t)(n * C) * es, dout->dtype, C, 1, row);
        for (int64_t c = 0; c < C; c++) acc[t * C + c] += row[c];
    }
    oj__nn_store(dw, dweight->dtype, V * C, acc);
    free(acc);
    free(row);
    return OJ_OK;
}
