/* Quantized matrices in and out of GGUF files: the qtypes are ggml's
 * Q8_0, Q4_0, Q4_1 and Q4_K, byte for byte (include/ojas/quant.h). */
#include "quant/quant_internal.h"

static const uint32_t to_ggml[OJ_QTYPE_COUNT] = {OJ_GGML_Q8_0, OJ_GGML_Q4_0, OJ_GGML_Q4_1,
                                                 OJ_GGML_Q4_K, UINT32_MAX /* fp8: none */};

uint32_t oj_qtype_to_ggml(oj_qtype t) {
    return (unsigned)t < OJ_QTYPE_COUNT ? to_ggml[t] : UINT32_MAX;
}

bool oj_qtype_from_ggml(uint32_t ggml_type, oj_qtype *t) {
    for (int i = 0; i < OJ_QTYPE_COUNT; i++)
        if (to_ggml[i] == ggml_type && ggml_type != UINT32_MAX) {
            if (t) *t = (oj_qtype)i;
            return true;
        }
    return false;
}

oj_qtensor *oj_gguf_qtensor(const oj_gguf *g, oj_engine *eng, const char *name) {
    if (eng == NULL) return NULL;
    if (g == NULL || name == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gguf_qtensor: NULL argument");
        return NULL;
    }
    int64_t i = oj_gguf_find_tensor(g, name);
    if (i < 0) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "gguf_qtensor: no tensor \"%s\" in the file", name);
        return NULL;
    }
    oj_qtype t;
    uint32_t gt = oj_gguf_tensor_type(g, i);
    int nd = oj_gguf_tensor_ndims(g, i);
    if (!oj_qtype_from_ggml(gt, &t) || nd > 2) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                     "gguf_qtensor: \"%s\" is %s with %d dims; Q8_0, Q4_0, Q4_1 or Q4_K with 1 or "
                     "2 dims expected",
                     name, oj_ggml_type_name(gt), nd);
        return NULL;
    }
    const uint64_t *dims = oj_gguf_tensor_dims(g, i);
    size_t nbytes;
    const void *data = oj_gguf_tensor_data(g, i, &nbytes);
    return oj_qtensor_from_blocks(eng, t, nd == 2 ? (int64_t)dims[1] : 1, (int64_t)dims[0],
                                  data, nbytes);
}

oj_status oj_gguf_writer_add_qtensor(oj_gguf_writer *w, const char *name, const oj_qtensor *q,
                                     oj_error *err) {
    if (q == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_writer: qtensor is NULL");
    if (oj_qtensor_data(q) == NULL) /* device memory: the writer reads host bytes */
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gguf_writer: %s tensor \"%s\" lives on a device; write a model "
                            "quantized on a CPU engine",
                            oj_qtype_name(q->type), name ? name : "(null)");
    if (oj_qtype_to_ggml(q->type) == UINT32_MAX)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gguf_writer: tensor \"%s\" is %s, which has no GGUF (ggml) type",
                            name ? name : "(null)", oj_qtype_name(q->type));
    uint64_t dims[2] = {(uint64_t)q->cols, (uint64_t)q->rows};
    return oj_gguf_writer_add_tensor(w, name, oj_qtype_to_ggml(q->type), 2, dims,
                                     oj_qtensor_data(q), oj_qtensor_nbytes(q), err);
}
