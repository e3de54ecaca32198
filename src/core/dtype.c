/* Dtype table, bf16/f16 <-> f32 conversions (round-to-nearest-even) and
 * host element loads/stores used by creation, copies and printing. */
#include <math.h>
#include <string.h>

#include "core/internal.h"

static const struct {
    const char *name;
    size_t size;
    bool is_float;
} dtype_info[OJ_DTYPE_COUNT] = {
    [OJ_F32] = {"f32", 4, true},  [OJ_F64] = {"f64", 8, true},   [OJ_BF16] = {"bf16", 2, true},
    [OJ_F16] = {"f16", 2, true},  [OJ_I64] = {"i64", 8, false},  [OJ_I32] = {"i32", 4, false},
    [OJ_U32] = {"u32", 4, false}, [OJ_U16] = {"u16", 2, false},  [OJ_U8] = {"u8", 1, false},
    [OJ_BOOL] = {"bool", 1, false},
};

bool oj_dtype_valid(oj_dtype dt) { return (unsigned)dt < (unsigned)OJ_DTYPE_COUNT; }
size_t oj_dtype_size(oj_dtype dt) { return oj_dtype_valid(dt) ? dtype_info[dt].size : 0; }
const char *oj_dtype_name(oj_dtype dt) { return oj_dtype_valid(dt) ? dtype_info[dt].name : "invalid"; }
bool oj_dtype_is_float(oj_dtype dt) { return oj_dtype_valid(dt) && dtype_info[dt].is_float; }

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t oj_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; overflow carries to Inf */
    return (uint16_t)(u >> 16);
}

float oj_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u; /* quiet NaN */
    return bits_f32(u);
}

uint16_t oj_f32_to_f16(float x) {
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu)); /* NaN */
    if (u >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* >= 65536: Inf */
    if (u >= 0x38800000u) {                                  /* normal f16 (maybe rounds to Inf) */
        uint32_t odd = (u >> 13) & 1u;
        u += 0xc8000fffu + odd; /* rebias exponent by -112 and round half to even */
        return (uint16_t)(sign | (u >> 13));
    }
    /* Subnormal or zero: value = m * 2^(e-150); f16 unit is 2^-24. */
    uint32_t e = u >> 23;
    if (e < 102) return sign; /* below 2^-25: rounds to zero */
    uint32_t m = (u & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t q = m >> shift, r = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (r > half || (r == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float oj_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
        if (m) u |= 0x00400000u; /* quiet NaN */
    } else if (e != 0) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        int k = 0;
        while (!(m & 0x400u)) {
            m <<= 1;
            k++;
        }
        u = sign | ((uint32_t)(113 - k) << 23) | ((m & 0x3ffu) << 13);
    }
    return bits_f32(u);
}

double oj__load(const void *p, oj_dtype dt) {
    switch (dt) {
    case OJ_F32: { float v; memcpy(&v, p, 4); return v; }
    case OJ_F64: { double v; memcpy(&v, p, 8); return v; }
    case OJ_BF16: { uint16_t v; memcpy(&v, p, 2); return oj_bf16_to_f32(v); }
    case OJ_F16: { uint16_t v; memcpy(&v, p, 2); return oj_f16_to_f32(v); }
    case OJ_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case OJ_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case OJ_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case OJ_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case OJ_U8: return *(const uint8_t *)p;
    case OJ_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return NAN;
    }
}

int64_t oj__load_i64(const void *p, oj_dtype dt) {
    switch (dt) {
    case OJ_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case OJ_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case OJ_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case OJ_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case OJ_U8: return *(const uint8_t *)p;
    case OJ_BOOL: return *(const uint8_t *)p ? 1 : 0;
    default: {
        double v = oj__load(p, dt);
        if (v != v) return 0;
        if (v >= 9223372036854775808.0) return INT64_MAX;
        if (v < -9223372036854775808.0) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void oj__store_i64(void *p, oj_dtype dt, int64_t v) {
    uint64_t w = (uint64_t)v; /* narrower integers wrap modulo 2^bits */
    switch (dt) {
    case OJ_I64: memcpy(p, &v, 8); break;
    case OJ_I32: { int32_t x = (int32_t)(uint32_t)w; memcpy(p, &x, 4); break; }
    case OJ_U32: { uint32_t x = (uint32_t)w; memcpy(p, &x, 4); break; }
    case OJ_U16: { uint16_t x = (uint16_t)w; memcpy(p, &x, 2); break; }
    case OJ_U8: *(uint8_t *)p = (uint8_t)w; break;
    case OJ_BOOL: *(uint8_t *)p = v != 0; break;
    default: oj__store(p, dt, (double)v); break;
    }
}

void oj__store(void *p, oj_dtype dt, double v) {
    switch (dt) {
    case OJ_F32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case OJ_F64: memcpy(p, &v, 8); break;
    case OJ_BF16: { uint16_t x = oj_f32_to_bf16((float)v); memcpy(p, &x, 2); break; }
    case OJ_F16: { uint16_t x = oj_f32_to_f16((float)v); memcpy(p, &x, 2); break; }
    case OJ_BOOL: *(uint8_t *)p = v != 0.0; break; /* NaN is true, as in PyTorch */
    default: {
        int64_t i;
        if (v != v) i = 0;
        else if (v >= 9223372036854775808.0) i = INT64_MAX;
        else if (v < -9223372036854775808.0) i = INT64_MIN;
        else i = (int64_t)v;
        oj__store_i64(p, dt, i);
        break;
    }
    }
}

void oj__convert(void *d, oj_dtype ddt, const void *s, oj_dtype sdt) {
    if (ddt == sdt) {
        memcpy(d, s, oj_dtype_size(ddt));
    } else if (!oj_dtype_is_float(ddt) && !oj_dtype_is_float(sdt)) {
        oj__store_i64(d, ddt, oj__load_i64(s, sdt));
    } else if (sdt == OJ_I64 && ddt == OJ_F32) {
        int64_t v;
        memcpy(&v, s, 8);
        float x = (float)v; /* single rounding, as PyTorch */
        memcpy(d, &x, 4);
    } else {
        oj__store(d, ddt, oj__load(s, sdt));
    }
}
