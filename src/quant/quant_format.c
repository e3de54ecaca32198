/* The block formats of include/ojas/quant.h: names, sizes, and the row
 * quantizers / dequantizers. The quantizers round exactly as ggml's
 * reference ones (ggml-quants.c: quantize_row_q8_0_ref, _q4_0_ref,
 * _q4_1_ref, _q4_K_ref with make_qkx2_quants): the same f32 operations in
 * the same order, so the bytes match llama.cpp's for the same input. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

static const char *const qtype_names[OJ_QTYPE_COUNT] = {"q8_0", "q4_0", "q4_1", "q4_k", "fp8"};
static const size_t qtype_block[OJ_QTYPE_COUNT] = {34, 18, 20, 144, 32};
static const int64_t qtype_elems[OJ_QTYPE_COUNT] = {32, 32, 32, OJ_QK_K, 32};
#define FP8_HEADER 16 /* an fp8 row's scale and padding */

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

int64_t oj_qtype_block_elems(oj_qtype t) {
    return (unsigned)t < OJ_QTYPE_COUNT ? qtype_elems[t] : 0;
}

size_t oj_qtype_row_bytes(oj_qtype t, int64_t k) {
    if ((unsigned)t >= OJ_QTYPE_COUNT || k <= 0 || k % qtype_elems[t]) return 0;
    return (size_t)(k / qtype_elems[t]) * qtype_block[t] + (t == OJ_FP8_E4M3 ? FP8_HEADER : 0);
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

/* ggml's nearest_int: round half to even through the f32 adder (|v| below
 * 2^22, which every caller's values are). */
static inline int nearest_int(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ggml's make_qkx2_quants(32, 15, x, w, L, &the_min, Laux, -1, 0.1, 20,
 * false): a scale and a min (returned negated, >= 0) for 32 values, the
 * weighted least-squares fit of 21 candidate scales, the levels in L. */
static float qkx2_quants(const float *x, const float *w, uint8_t *L, float *the_min) {
    const int n = 32, nmax = 15, nstep = 20;
    const float rmin = -1.0f, rdelta = 0.1f;
    uint8_t Laux[32];
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ggml's quantize_row_q4_K_ref for one super-block of 256: per sub-block
 * of 32 a fitted scale and min (weights sqrt(mean x^2) + |x|), both
 * quantized to 6 bits against the largest of each, then the levels again
 * against the 6-bit scales. */
static void q4_k_block(const float *x, uint8_t *y) {
    uint8_t L[OJ_QK_K];
    float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = qkx2_quants(x + 32 * j, w, L + 32 * j, &mins[j]);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t *s = y + 4;
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    put_f16(y, max_scale / 63.0f);
    put_f16(y + 2, max_min / 63.0f);
    const float d_all = oj__qf16(y), dmin_all = oj__qf16(y + 2);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        oj__q4_k_scale_min(j, s, &sc, &m);
        const float d = d_all * sc;
        if (d == 0.0f) continue;
        const float dm = dmin_all * m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
        }
    }
    uint8_t *q = y + 16;
    for (int j = 0; j < OJ_QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

static bool row_args(oj_qtype t, const void *a, int64_t k, const void *b, oj_error *err,
                     const char *op) {
    if ((unsigned)t >= OJ_QTYPE_COUNT) {
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "%s: invalid quantized type %d", op, (int)t);
        return false;
    }
    if (k <= 0 || k % qtype_elems[t]) {
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                     "%s: row length %lld is not a positive multiple of %lld (%s)", op,
                     (long long)k, (long long)qtype_elems[t], oj_qtype_name(t));
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

uint8_t oj__f32_to_e4m3(float v) {
    const uint8_t sign = signbit(v) ? 0x80 : 0;
    const float a = fabsf(v);
    if (isnan(v)) return sign | 0x7F;
    if (a >= 448.0f) return sign | 0x7E; /* saturate */
    if (a < 0.015625f) /* below the smallest normal 2^-6: m 2^-9, m = 8 the normal 2^-6 */
        return sign | (uint8_t)nearbyintf(a * 512.0f);
    int e;
    (void)frexpf(a, &e); /* a = f 2^e, f in [0.5, 1): the exponent E = e - 1 */
    int E = e - 1;
    int q = (int)nearbyintf(ldexpf(a, 3 - E)); /* 8 .. 16, ties to even (a's 4th bit) */
    if (q == 16) q = 8, E++;
    return sign | (uint8_t)((E + 7) << 3 | (q - 8)); /* a < 448: at most 0x7E */
}

float oj__e4m3_to_f32(uint8_t c) {
    const int e = c >> 3 & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7) v = NAN;
    else if (e == 0) v = ldexpf((float)m, -9);
    else v = ldexpf((float)(8 + m), e - 10);
    return c & 0x80 ? -v : v;
}

/* An fp8 row: s = amax / 448, q[j] = e4m3(x[j] / s). */
static void fp8_row(const float *x, int64_t k, uint8_t *y) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float s = amax / 448.0f;
    memset(y, 0, FP8_HEADER);
    memcpy(y, &s, sizeof s); /* little-endian hosts (the project's) */
    for (int64_t j = 0; j < k; j++) y[FP8_HEADER + j] = s != 0.0f ? oj__f32_to_e4m3(x[j] / s) : 0;
}

void oj__quantize_row(oj_qtype t, const float *x, int64_t k, void *out) {
    uint8_t *y = out;
    if (t == OJ_FP8_E4M3) {
        fp8_row(x, k, y);
        return;
    }
    const size_t bb = qtype_block[t];
    const int64_t be = qtype_elems[t];
    for (int64_t b = 0; b < k / be; b++, x += be, y += bb) {
        if (t == OJ_Q8_0) q8_0_block(x, y);
        else if (t == OJ_Q4_0) q4_0_block(x, y);
        else if (t == OJ_Q4_1) q4_1_block(x, y);
        else q4_k_block(x, y);
    }
}

oj_status oj_dequantize_row(oj_qtype t, const void *q, int64_t k, float *out, oj_error *err) {
    if (!row_args(t, q, k, out, err, "dequantize_row")) return OJ_ERR_INVALID_ARGUMENT;
    oj__dequantize_row(t, q, k, out);
    return OJ_OK;
}

void oj__dequantize_row(oj_qtype t, const void *q, int64_t k, float *y) {
    const uint8_t *p = q;
    if (t == OJ_FP8_E4M3) {
        float s;
        memcpy(&s, p, sizeof s);
        for (int64_t j = 0; j < k; j++) y[j] = s * oj__e4m3_to_f32(p[FP8_HEADER + j]);
        return;
    }
    const size_t bb = qtype_block[t];
    const int64_t be = qtype_elems[t];
    for (int64_t b = 0; b < k / be; b++, p += bb, y += be) {
        const float d = oj__qf16(p);
        if (t == OJ_Q4_K) { /* ggml's dequantize_row_q4_K */
            const float dmin = oj__qf16(p + 2);
            const uint8_t *qs = p + 16;
            for (int s = 0; s < 8; s += 2, qs += 32) {
                uint8_t sc, m;
                oj__q4_k_scale_min(s, p + 4, &sc, &m);
                const float d1 = d * sc, m1 = dmin * m;
                oj__q4_k_scale_min(s + 1, p + 4, &sc, &m);
                const float d2 = d * sc, m2 = dmin * m;
                for (int l = 0; l < 32; l++) y[32 * s + l] = d1 * (float)(qs[l] & 15) - m1;
                for (int l = 0; l < 32; l++) y[32 * s + 32 + l] = d2 * (float)(qs[l] >> 4) - m2;
            }
        } else if (t == OJ_Q8_0) {
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
