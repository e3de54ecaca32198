// test: dtype table and bf16/f16 <-> f32 conversions against an independent
// reference, over every one of the 65,536 bit patterns each way
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- the reference: decode by formula, encode by nearest-value search */

typedef struct {
    int mant_bits, exp_bits;
    uint16_t inf; /* bit pattern of +Inf */
} fmt;
static const fmt F16 = {10, 5, 0x7c00}, BF16 = {7, 8, 0x7f80};

/* Value of a non-negative, non-NaN pattern (Inf gives the next power of 2
 * after the largest finite value, so rounding toward it is a plain tie
 * between neighbours). */
static double ref_decode_abs(const fmt *f, uint16_t h) {
    int bias = (1 << (f->exp_bits - 1)) - 1;
    int e = (h >> f->mant_bits) & ((1 << f->exp_bits) - 1);
    int m = h & ((1 << f->mant_bits) - 1);
    if (e == 0) return ldexp(m, 1 - bias - f->mant_bits);
    return ldexp((1 << f->mant_bits) + m, e - bias - f->mant_bits);
}

static bool ref_is_nan(const fmt *f, uint16_t h) { return (h & 0x7fff) > f->inf; }

static double ref_decode(const fmt *f, uint16_t h) {
    if (ref_is_nan(f, h)) return NAN;
    if ((h & 0x7fff) == f->inf) return (h & 0x8000) ? -INFINITY : INFINITY;
    double v = ref_decode_abs(f, h & 0x7fff);
    return (h & 0x8000) ? -v : v;
}

/* Round x to the nearest representable value, ties to the even pattern. */
static uint16_t ref_encode(const fmt *f, float x) {
    uint16_t sign = (bits(x) >> 31) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (isnan(x)) return 0x7fff; /* any NaN; caller checks NaN-ness */
    if (a >= ref_decode_abs(f, f->inf)) return sign | f->inf;
    uint16_t lo = 0, hi = f->inf; /* val(lo) <= a < val(hi) */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (ref_decode_abs(f, mid) <= a) lo = mid;
        else hi = mid;
    }
    double dl = a - ref_decode_abs(f, lo), dh = ref_decode_abs(f, hi) - a;
    uint16_t r = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    return sign | r;
}

/* ---- tests */

static void test_table(void **state) {
    (void)state;
    const size_t sizes[] = {4, 8, 2, 2, 8, 4, 4, 2, 1, 1};
    const char *names[] = {"f32", "f64", "bf16", "f16", "i64", "i32", "u32", "u16", "u8", "bool"};
    for (int d = 0; d < OJ_DTYPE_COUNT; d++) {
        assert_int_equal(oj_dtype_size((oj_dtype)d), sizes[d]);
        assert_string_equal(oj_dtype_name((oj_dtype)d), names[d]);
        assert_true(oj_dtype_valid((oj_dtype)d));
        assert_int_equal(oj_dtype_is_float((oj_dtype)d), d <= OJ_F16);
    }
    assert_int_equal(oj_dtype_size(OJ_DTYPE_COUNT), 0);
    assert_string_equal(oj_dtype_name((oj_dtype)-1), "invalid");
    assert_false(oj_dtype_valid(OJ_DTYPE_COUNT));
}

static void check_decode_all(const fmt *f, float (*dec)(uint16_t)) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float got = dec(h);
        if (ref_is_nan(f, h)) {
            assert_true(isnan(got));
            assert_int_equal(bits(got) >> 31, h >> 15); /* sign kept */
            assert_true(bits(got) & 0x00400000u);        /* quiet */
            continue;
        }
        double want = ref_decode(f, h);
        assert_true((double)got == want);
        assert_int_equal(signbit(got) != 0, (h >> 15) != 0); /* -0 stays -0 */
    }
}

static void check_encode_all(const fmt *f, uint16_t (*enc)(float), float (*dec)(uint16_t)) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        if (ref_is_nan(f, h)) {
            uint16_t r = enc(dec(h));
            assert_true(ref_is_nan(f, r));
            assert_int_equal(r >> 15, h >> 15);
            continue;
        }
        /* every value round-trips exactly */
        assert_int_equal(enc(dec(h)), h);
        /* the midpoint to the next pattern, and its neighbours */
        uint16_t a = h & 0x7fff;
        if (a >= f->inf) continue;
        double lo = ref_decode_abs(f, a), hi = ref_decode_abs(f, (uint16_t)(a + 1));
        float mid = (float)((lo + hi) / 2); /* exact: needs one bit more */
        assert_true((double)mid == (lo + hi) / 2);
        float s = (h & 0x8000) ? -1.0f : 1.0f;
        float probes[3] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            float x = s * probes[k];
            assert_int_equal(enc(x), ref_encode(f, x));
        }
        assert_int_equal(enc(s * mid), (h & 0x8000) | ((a & 1) ? a + 1 : a)); /* tie to even */
    }
}

static void check_encode_random(const fmt *f, uint16_t (*enc)(float)) {
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 2000000; i++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        float x = from_bits((uint32_t)st);
        uint16_t got = enc(x);
        if (isnan(x)) {
            assert_true(ref_is_nan(f, got));
            continue;
        }
        assert_int_equal(got, ref_encode(f, x));
    }
    /* specials */
    assert_int_equal(enc(INFINITY), f->inf);
    assert_int_equal(enc(-INFINITY), 0x8000 | f->inf);
    assert_int_equal(enc(0.0f), 0);
    assert_int_equal(enc(-0.0f), 0x8000);
    assert_int_equal(enc(3.4028235e38f), f->inf);
}

static void test_f16_decode_all(void **state) {
    (void)state;
    check_decode_all(&F16, oj_f16_to_f32);
}
static void test_bf16_decode_all(void **state) {
    (void)state;
    check_decode_all(&BF16, oj_bf16_to_f32);
}
static void test_f16_encode_all(void **state) {
    (void)state;
    check_encode_all(&F16, oj_f32_to_f16, oj_f16_to_f32);
    check_encode_random(&F16, oj_f32_to_f16);
    assert_int_equal(oj_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(oj_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(oj_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(oj_f32_to_f16(5.9604645e-8f), 0x0001); /* 2^-24 */
    assert_int_equal(oj_f32_to_f16(2.9802322e-8f), 0x0000); /* 2^-25 tie -> 0 */
}
static void test_bf16_encode_all(void **state) {
    (void)state;
    check_encode_all(&BF16, oj_f32_to_bf16, oj_bf16_to_f32);
    check_encode_random(&BF16, oj_f32_to_bf16);
    assert_int_equal(oj_f32_to_bf16(1.00390625f), 0x3f80); /* 1 + 2^-8: tie to even */
    assert_int_equal(oj_f32_to_bf16(1.01171875f), 0x3f82); /* 1 + 3*2^-8: tie up to even */
}

/* The same conversions through tensors (oj_copy_), all patterns. */
static void test_tensor_casts_all_patterns(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    oj_scope_begin(eng);
    uint16_t *pat = malloc(65536 * 2);
    float *out = malloc(65536 * 4);
    uint16_t *back = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) pat[i] = (uint16_t)i;
    int64_t n = 65536;
    const oj_dtype half[2] = {OJ_F16, OJ_BF16};
    const fmt *fm[2] = {&F16, &BF16};
    for (int k = 0; k < 2; k++) {
        oj_tensor *h = oj_from_host(eng, 1, &n, half[k], pat, 65536 * 2);
        oj_tensor *f = oj_empty(eng, 1, &n, OJ_F32);
        assert_int_equal(oj_copy_(f, h), OJ_OK);
        assert_int_equal(oj_to_host(f, out, 65536 * 4), OJ_OK);
        for (uint32_t i = 0; i < 65536; i++) {
            if (ref_is_nan(fm[k], (uint16_t)i)) assert_true(isnan(out[i]));
            else assert_true((double)out[i] == ref_decode(fm[k], (uint16_t)i));
        }
        oj_tensor *h2 = oj_empty(eng, 1, &n, half[k]);
        assert_int_equal(oj_copy_(h2, f), OJ_OK);
        assert_int_equal(oj_to_host(h2, back, 65536 * 2), OJ_OK);
        for (uint32_t i = 0; i < 65536; i++) {
            if (ref_is_nan(fm[k], (uint16_t)i)) assert_true(ref_is_nan(fm[k], back[i]));
            else assert_int_equal(back[i], i);
        }
    }
    free(pat);
    free(out);
    free(back);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

static void test_integer_casts(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    oj_scope_begin(eng);
    int64_t n = 6;
    double v[6] = {-1.5, 255.9, 256, NAN, 1e300, -3};
    oj_tensor *src = oj_from_host(eng, 1, &n, OJ_F64, v, sizeof v);
    oj_tensor *u8 = oj_empty(eng, 1, &n, OJ_U8);
    assert_int_equal(oj_copy_(u8, src), OJ_OK);
    uint8_t b[6];
    oj_to_host(u8, b, 6);
    assert_int_equal(b[0], 255); /* -1 wraps as in PyTorch on x86 */
    assert_int_equal(b[1], 255);
    assert_int_equal(b[2], 0);
    assert_int_equal(b[3], 0); /* NaN -> 0 */
    oj_tensor *i64 = oj_empty(eng, 1, &n, OJ_I64);
    assert_int_equal(oj_copy_(i64, src), OJ_OK);
    int64_t q[6];
    oj_to_host(i64, q, sizeof q);
    assert_true(q[0] == -1 && q[1] == 255 && q[3] == 0 && q[4] == INT64_MAX && q[5] == -3);
    /* int -> int keeps exact 64-bit values */
    int64_t big = (1LL << 62) + 1, one = 1;
    oj_tensor *bi = oj_from_host(eng, 1, &one, OJ_I64, &big, 8);
    oj_tensor *bi2 = oj_empty(eng, 1, &one, OJ_I64);
    oj_tensor *u32 = oj_empty(eng, 1, &one, OJ_U32);
    assert_int_equal(oj_copy_(bi2, bi), OJ_OK);
    assert_int_equal(oj_copy_(u32, bi), OJ_OK);
    int64_t r;
    oj_to_host(bi2, &r, 8);
    assert_true(r == big);
    uint32_t r32;
    oj_to_host(u32, &r32, 4);
    assert_int_equal(r32, 1);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_f16_decode_all),
        cmocka_unit_test(test_bf16_decode_all),
        cmocka_unit_test(test_f16_encode_all),
        cmocka_unit_test(test_bf16_encode_all),
        cmocka_unit_test(test_tensor_casts_all_patterns),
        cmocka_unit_test(test_integer_casts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
