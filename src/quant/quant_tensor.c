/* Quantized matrices (oj_qtensor): creation from a float tensor or from raw
 * blocks, accessors, dequantization. On a device engine the blocks live in
 * device memory (quantized on the host, then copied) and dequantize runs
 * the backend's qdequant. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "quant/quant_internal.h"

bool oj__qdevice_ok(oj_engine *eng, const char *op, oj_qtype t) {
    if (oj_engine_device(eng).type == OJ_DEVICE_CPU) return true;
    if (eng->backend->qgemv && eng->backend->qdequant) return true;
    oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                 "%s: %s weights have no kernels on the %s backend", op, oj_qtype_name(t),
                 eng->backend->name);
    return false;
}

/* An empty qtensor with storage for n x k of type t. */
static oj_qtensor *qtensor_new(oj_engine *eng, oj_qtype t, int64_t n, int64_t k,
                               const char *op) {
    if ((unsigned)t >= OJ_QTYPE_COUNT) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: invalid quantized type %d", op, (int)t);
        return NULL;
    }
    if (!oj__qdevice_ok(eng, op, t)) return NULL;
    const int64_t be = oj_qtype_block_elems(t);
    if (n <= 0 || k <= 0 || k % be) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: %s needs [N, K] with N > 0 and K a positive multiple of %lld, got "
                     "[%lld, %lld]",
                     op, oj_qtype_name(t), (long long)be, (long long)n, (long long)k);
        return NULL;
    }
    oj_qtensor *q = calloc(1, sizeof *q);
    if (q == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
        return NULL;
    }
    q->eng = eng;
    q->type = t;
    q->rows = n;
    q->cols = k;
    q->row_bytes = oj_qtype_row_bytes(t, k);
    int64_t shape[2] = {n, (int64_t)q->row_bytes};
    q->blocks = oj_empty(eng, 2, shape, OJ_U8);
    if (q->blocks == NULL) {
        free(q);
        return NULL;
    }
    /* Ours whether or not a scope is open: the scope keeps its own
     * reference and drops it at its end. */
    if (oj_scope_depth(eng) > 0) oj_retain(q->blocks);
    return q;
}

void oj_qtensor_free(oj_qtensor *q) {
    if (q == NULL) return;
    oj_release(q->blocks);
    free(q);
}

oj_qtype oj_qtensor_type(const oj_qtensor *q) { return q ? q->type : OJ_QTYPE_COUNT; }
int64_t oj_qtensor_rows(const oj_qtensor *q) { return q ? q->rows : 0; }
int64_t oj_qtensor_cols(const oj_qtensor *q) { return q ? q->cols : 0; }
size_t oj_qtensor_nbytes(const oj_qtensor *q) {
    return q ? (size_t)q->rows * q->row_bytes : 0;
}
const void *oj_qtensor_data(const oj_qtensor *q) {
    if (q == NULL || oj_engine_device(q->eng).type != OJ_DEVICE_CPU) return NULL;
    return oj__data_ptr(q->blocks);
}
oj_engine *oj_qtensor_engine(const oj_qtensor *q) { return q ? q->eng : NULL; }

oj_qtensor *oj_quantize(oj_tensor *w, oj_qtype t) {
    if (w == NULL) return NULL;
    oj_engine *eng = oj__engine_of(w);
    if (eng == NULL || !oj__check_tensor(eng, w, "quantize", "w")) return NULL;
    oj_dtype dt = oj_tensor_dtype(w);
    if (dt != OJ_F32 && dt != OJ_BF16 && dt != OJ_F16) {
        oj_set_error(eng, OJ_ERR_DTYPE, "quantize: w is %s; f32, bf16 or f16 expected",
                     oj_dtype_name(dt));
        return NULL;
    }
    if (oj_rank(w) != 2) {
        char buf[64];
        oj_set_error(eng, OJ_ERR_SHAPE, "quantize: w is %s; a matrix [N, K] expected",
                     oj__shape_fmt(buf, sizeof buf, oj_rank(w), oj_shape(w)));
        return NULL;
    }
    int64_t n = oj_size(w, 0), k = oj_size(w, 1);
    oj_qtensor *q = qtensor_new(eng, t, n, k, "quantize");
    if (q == NULL) return NULL;
    void *tmp = NULL;
    const uint8_t *src = oj__host_read_begin(w, &tmp, "quantize");
    float *row = malloc((size_t)k * sizeof *row);
    if (src == NULL || row == NULL) {
        if (row == NULL) oj_set_error(eng, OJ_ERR_CAPACITY, "quantize: out of host memory");
        free(row);
        free(tmp);
        oj_qtensor_free(q);
        return NULL;
    }
    const int64_t *st = oj_strides(w);
    const int64_t one = 1;
    const bool host = oj_engine_device(eng).type == OJ_DEVICE_CPU;
    const size_t nbytes = (size_t)n * q->row_bytes;
    uint8_t *dst = host ? oj__data_ptr(q->blocks) : malloc(nbytes);
    if (dst == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "quantize: out of host memory");
        free(row);
        free(tmp);
        oj_qtensor_free(q);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        oj__host_copy(1, &k, row, &one, OJ_F32, src + i * st[0] * (int64_t)oj_dtype_size(dt),
                      &st[1], dt);
        for (int64_t j = 0; j < k; j++)
            if (!isfinite(row[j])) {
                oj_set_error(eng, OJ_ERR_NUMERIC,
                             "quantize: w[%lld, %lld] is %s; %s needs finite values",
                             (long long)i, (long long)j, isnan(row[j]) ? "NaN" : "infinite",
                             oj_qtype_name(t));
                if (!host) free(dst);
                free(row);
                free(tmp);
                oj_qtensor_free(q);
                return NULL;
            }
        oj__quantize_row(t, row, k, dst + (size_t)i * q->row_bytes);
    }
    free(row);
    free(tmp);
    if (!host) { /* the blocks to the device */
        oj_status s = oj_copy_from_host(q->blocks, dst, nbytes);
        free(dst);
        if (s != OJ_OK) {
            oj_qtensor_free(q);
            return NULL;
        }
    }
    return q;
}

oj_qtensor *oj_qtensor_from_blocks(oj_engine *eng, oj_qtype t, int64_t n, int64_t k,
                                   const void *blocks, size_t nbytes) {
    if (eng == NULL) return NULL;
    if (blocks == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "qtensor_from_blocks: blocks is NULL");
        return NULL;
    }
    oj_qtensor *q = qtensor_new(eng, t, n, k, "qtensor_from_blocks");
    if (q == NULL) return NULL;
    if (nbytes != (size_t)n * q->row_bytes) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "qtensor_from_blocks: %zu bytes given; %s [%lld, %lld] takes %zu", nbytes,
                     oj_qtype_name(t), (long long)n, (long long)k, (size_t)n * q->row_bytes);
        oj_qtensor_free(q);
        return NULL;
    }
    if (oj_engine_device(eng).type == OJ_DEVICE_CPU) {
        memcpy(oj__data_ptr(q->blocks), blocks, nbytes);
    } else if (oj_copy_from_host(q->blocks, blocks, nbytes) != OJ_OK) {
        oj_qtensor_free(q);
        return NULL;
    }
    return q;
}

oj_tensor *oj_dequantize(const oj_qtensor *q) {
    if (q == NULL) return NULL;
    int64_t shape[2] = {q->rows, q->cols};
    oj_tensor *y = oj_empty(q->eng, 2, shape, OJ_F32);
    if (y == NULL) return NULL;
    if (oj_engine_device(q->eng).type != OJ_DEVICE_CPU) {
        if (q->eng->backend->qdequant(q->eng, y, q->blocks, (int)q->type) != OJ_OK) {
            oj_release(y);
            return NULL;
        }
        return y;
    }
    const uint8_t *src = oj__data_ptr(q->blocks);
    float *dst = oj__data_ptr(y);
    for (int64_t i = 0; i < q->rows; i++)
        oj__dequantize_row(q->type, src + (size_t)i * q->row_bytes, q->cols,
                           dst + i * q->cols);
    return y;
}
