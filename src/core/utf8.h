/* UTF-8 decoding, validation and encoding shared by io and data (internal,
 * not installed). Valid means RFC 3629 / Unicode §3.9: no overlong forms,
 * no surrogates (U+D800..U+DFFF), nothing beyond U+10FFFF. */
#ifndef OJAS_CORE_UTF8_H
#define OJAS_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode one UTF-8 sequence at s[0..n) (n >= 1). Returns its length (1..4)
 * and stores the code point in *cp; for an invalid or truncated sequence
 * (overlong, surrogate, > U+10FFFF, bad continuation) returns 0 and *cp is
 * undefined. Inline: the tokenizer's scanners call it per character. */
static inline int oj__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
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

/* True if s[0..len) is valid UTF-8; otherwise false and, when bad is not
 * NULL, *bad gets the offset of the first byte of the first invalid or
 * truncated sequence. */
bool oj__utf8_valid(const uint8_t *s, size_t len, size_t *bad);

/* Length of the maximal prefix of s[0..n) (n >= 1) that could begin a valid
 * sequence (the "maximal subpart" of Unicode §3.9 / WHATWG), at least 1.
 * Used by the lossy decoder: each maximal subpart becomes one U+FFFD. */
size_t oj__utf8_invalid_len(const uint8_t *s, size_t n);

/* Encode cp (<= U+10FFFF) as UTF-8 into out[4]; returns the length. */
int oj__utf8_encode(uint32_t cp, uint8_t *out);

#endif /* OJAS_CORE_UTF8_H */
