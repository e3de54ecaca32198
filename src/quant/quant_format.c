/* The block formats of include/ojas/quant.h: names, sizes, and the row
 * quantizers / dequantizers. The quantizers round exactly as ggml's
 * reference ones (ggml-quants.c: quantize_row_q8_0_ref, _q4_0_ref,
 * _q4_1_ref): the same f32 operations in the same order, so the bytes
 * match llama.cpp's for the same input. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

static const char *const qtype_names[OJ_QTYPE_COUNT] = {"q8_0", "q4_0", "q4_1"};
static const size_t qtype_block[OJ_QTYPE_COUNT] = {34, 18, 20};

const char *oj_qtype_name(oj_qtype t) {
    return (unsigned)t < OJ_QTYPE_COUNT ? qtype_names[t] : "invalid";
}

bool oj_qtype_parse(const char *s, oj_qtype *t) {
    if (s == NULL || t == NULL) return false;
    for (int i = 0; i < OJ_QTYPE_COUNT; i++)
        if (strcmp(s, qtype_names[i]) == 0) {
            *t = (oj_qtype)i;
            return true;
        }
    return false;
}

size_t oj_qtype_block_bytes(oj_qtype t) {
    return (unsigned)t < OJ_QTYPE_COUNT ? qtype_block[t] : 0;
}

size_t oj_qtype_row_bytes(oj_qtype t, int64_t k) {
    if ((unsigned)t >= OJ_QTYPE_COUNT || k <= 0 || k % OJ_QBLOCK) return 0;
    return (size_t)(k / OJ_QBLOCK) * qtype_block[t];
}

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = oj_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void q8_0_block(const float *x, uint8_t *y) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    for (int j = 0; j < 32; j++) y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static void q4_0_block(const float *x, uint8_t *y) {
    float amax = 0.0f, max = 0.0f; /* the value of largest magnitude, signed */
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    for (int j = 0; j < 16; j++) {
        /* x * id lies in [-8, 8]: + 8.5 then truncation rounds half up */
        int a = (int8_t)(x[j] * id + 8.5f), b = (int8_t)(x[j + 16] * id + 8.5f);
        a = a < 15 ? a : 15;
        b = b < 15 ? b : 15;
        y[2 + j] = (uint8_t)(a | b << 4);
    }
}

static void q4_1_block(const float *x, uint8_t *y) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    put_f16(y + 2, min);
    for (int j = 0; j < 16; j++) {
        int a = (int8_t)((x[j] - min) * id + 0.5f), b = (int8_t)((x[j + 16] - min) * id + 0.5f);
        a = a < 15 ? a : 15;
        b = b < 15 ? b : 15;
        y[4 + j] = (uint8_t)(a | b << 4);
    }
}

static bool row_args(oj_qtype t, const void *a, int64_t k, const void *b, oj_error *err,
                     const char *op) {
    if ((unsigned)t >= OJ_QTYPE_COUNT) {
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "%s: invalid quantized type %d", op, (int)t);
        return false;
    }
    if (k <= 0 || k % OJ_QBLOCK) {
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                     "%s: row length %lld is not a positive multiple of %d (%s)", op,
                     (long long)k, OJ_QBLOCK, oj_qtype_name(t));
        return false;
    }
    if (a == NULL || b == NULL) {
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "%s: NULL row pointer", op);
        return false;
    }
    return true;
}

oj_status oj_quantize_row(oj_qtype t, const float *x, int64_t k, void *out, oj_error *err) {
    if (!row_args(t, x, k, out, err, "quantize_row")) return OJ_ERR_INVALID_ARGUMENT;
    for (int64_t j = 0; j < k; j++)
        if (!isfinite(x[j]))
            return oj_error_set(err, OJ_ERR_NUMERIC,
                                "quantize_row: element %lld is %s; %s needs finite values",
                                (long long)j, isnan(x[j]) ? "NaN" : "infinite",
                                oj_qtype_name(t));
    oj__quantize_row(t, x, k, out);
    return OJ_OK;
}

void oj__quantize_row(oj_qtype t, const float *x, int64_t k, void *out) {
    uint8_t *y = out;
    const size_t bb = qtype_block[t];
    for (int64_t b = 0; b < k / OJ_QBLOCK; b++, x += OJ_QBLOCK, y += bb) {
        if (t == OJ_Q8_0) q8_0_block(x, y);
        else if (t == OJ_Q4_0) q4_0_block(x, y);
        else q4_1_block(x, y);
    }
}

oj_status oj_dequantize_row(oj_qtype t, const void *q, int64_t k, float *out, oj_error *err) {
    if (!row_args(t, q, k, out, err, "dequantize_row")) return OJ_ERR_INVALID_ARGUMENT;
    oj__dequantize_row(t, q, k, out);
    return OJ_OK;
}

void oj__dequantize_row(oj_qtype t, const void *q, int64_t k, float *y) {
    const uint8_t *p = q;
    const size_t bb = qtype_block[t];
    for (int64_t b = 0; b < k / OJ_QBLOCK; b++, p += bb, y += OJ_QBLOCK) {
        const float d = oj__qf16(p);
        if (t == OJ_Q8_0) {
            for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)p[2 + j] * d;
        } else if (t == OJ_Q4_0) {
            for (int j = 0; j < 16; j++) {
                y[j] = (float)((p[2 + j] & 15) - 8) * d;
                y[j + 16] = (float)((p[2 + j] >> 4) - 8) * d;
            }
        } else {
            const float m = oj__qf16(p + 2);
            for (int j = 0; j < 16; j++) {
                y[j] = (float)(p[4 + j] & 15) * d + m;
                y[j + 16] = (float)(p[4 + j] >> 4) * d + m;
            }
        }
    }
}
