/* Code point classes of the GPT-2 pre-tokenisation pattern and a small UTF-8
 * decoder. Internal to src/data. */
#ifndef OJAS_DATA_UNICODE_H
#define OJAS_DATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Classes, as the pattern sees them: \p{L}, \p{N}, \s (ECMAScript), other. */
enum { OJ_UC_OTHER = 0, OJ_UC_LETTER = 1, OJ_UC_NUMBER = 2, OJ_UC_SPACE = 3 };

typedef struct oj_uc_range {
    uint32_t lo, hi; /* inclusive */
    uint8_t cls;
} oj_uc_range;

/* Generated tables (unicode_classes.c). */
extern const oj_uc_range oj_uc_ranges[];
extern const int oj_uc_nranges;
extern const char oj_unicode_version[];

/* Class of every ASCII byte (0..127); bytes >= 0x80 hold OJ_UC_OTHER. */
extern const uint8_t oj_uc_ascii[128];

/* Two-stage lookup: class of code point cp (<= 0x10FFFF). Call
 * oj_uc_init() once before (thread-safe, idempotent). */
void oj_uc_init(void);
extern const uint8_t *oj_uc_stage1; /* [0x1100] block index per 256 code points */
extern const uint8_t *oj_uc_stage2; /* [blocks * 256] classes */

static inline int oj_uc_class(uint32_t cp) {
    return oj_uc_stage2[(size_t)oj_uc_stage1[cp >> 8] * 256 + (cp & 255)];
}

/* Decode one UTF-8 sequence at s[0..n) (n >= 1). Returns its length (1..4)
 * and stores the code point in *cp; for an invalid or truncated sequence
 * (overlong, surrogate, > U+10FFFF, bad continuation) returns 0 and *cp is
 * undefined. */
static inline int oj_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        uint32_t v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if (v < 0x800 || (v >= 0xD800 && v < 0xE000))
            return 0;
        *cp = v;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (v < 0x10000 || v > 0x10FFFF)
            return 0;
        *cp = v;
        return 4;
    }
    return 0;
}

/* Length of the maximal prefix of s[0..n) that could begin a valid sequence
 * (the "maximal subpart" of Unicode §3.9 / WHATWG), at least 1. Used by the
 * lossy decoder: each maximal subpart becomes one U+FFFD. */
size_t oj_utf8_invalid_len(const uint8_t *s, size_t n);

/* Encode cp as UTF-8 into out[4]; returns the length. */
int oj_utf8_encode(uint32_t cp, uint8_t *out);

#endif
