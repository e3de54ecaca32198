// test: the shared UTF-8 codec (core/utf8.h) used by io and data: the
// validator and decoder against Unicode's table of well-formed byte
// sequences, the offset of the first bad byte, encode/decode round trips,
// and the maximal subparts the lossy decoder replaces
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/utf8.h"

/* Unicode 15, §3.9, Table 3-7 "Well-Formed UTF-8 Byte Sequences": the
 * length of the well-formed sequence at s[0..n), or 0. Written from the
 * table's byte ranges, independently of the decoder's arithmetic. */
static int table_len(const uint8_t *s, size_t n) {
    static const struct {
        uint8_t lo[4], hi[4];
        int len;
    } rows[] = {
        {{0x00}, {0x7F}, 1},
        {{0xC2, 0x80}, {0xDF, 0xBF}, 2},
        {{0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}, 3},
        {{0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}, 3},
        {{0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}, 3},
        {{0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}, 3},
        {{0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}, 4},
        {{0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}, 4},
        {{0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}, 4},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int l = rows[r].len;
        if ((size_t)l > n) continue;
        bool ok = true;
        for (int k = 0; k < l && ok; k++) ok = s[k] >= rows[r].lo[k] && s[k] <= rows[r].hi[k];
        if (ok) return l;
    }
    return 0;
}

/* Whole-buffer validity by the table. */
static bool table_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int l = table_len(s + i, n - i);
        if (!l) return false;
        i += (size_t)l;
    }
    return true;
}

static void check(const uint8_t *s, size_t n) {
    bool want = table_valid(s, n);
    size_t bad = 12345;
    if (oj__utf8_valid(s, n, &bad) != want)
        fail_msg("valid disagrees on %02x %02x %02x %02x (%zu bytes)", s[0], n > 1 ? s[1] : 0,
                 n > 2 ? s[2] : 0, n > 3 ? s[3] : 0, n);
    uint32_t cp;
    if (n && (oj__utf8_decode(s, n, &cp) != 0) != (table_len(s, n) != 0))
        fail_msg("decode disagrees on %02x (%zu bytes)", s[0], n);
    if (!want) assert_true(bad < n);
}

static void test_valid_matches_table(void **state) {
    (void)state;
    uint8_t s[4];
    /* every sequence of 1, 2 and 3 bytes */
    for (unsigned a = 0; a < 256; a++) {
        s[0] = (uint8_t)a;
        check(s, 1);
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (uint8_t)b;
            check(s, 2);
            for (unsigned c = 0; c < 256; c++) {
                s[2] = (uint8_t)c;
                check(s, 3);
            }
        }
    }
    /* four bytes: every lead from 0xF0 and second byte, the edges of the rest */
    static const uint8_t edge[] = {0x00, 0x7F, 0x80, 0x8F, 0x90, 0xBF, 0xC0, 0xFF};
    for (unsigned a = 0xF0; a < 256; a++)
        for (unsigned b = 0; b < 256; b++)
            for (size_t c = 0; c < sizeof edge; c++)
                for (size_t d = 0; d < sizeof edge; d++) {
                    s[0] = (uint8_t)a, s[1] = (uint8_t)b, s[2] = edge[c], s[3] = edge[d];
                    check(s, 4);
                }
}

static void test_bad_offset(void **state) {
    (void)state;
    size_t bad = 0;
    assert_true(oj__utf8_valid((const uint8_t *)"", 0, &bad));
    assert_true(oj__utf8_valid((const uint8_t *)"a\xE2\x82\xAC\xF0\x9F\x98\x80", 8, NULL));
    assert_false(oj__utf8_valid((const uint8_t *)"ab\xC3", 3, &bad)); /* truncated */
    assert_int_equal(bad, 2);
    assert_false(oj__utf8_valid((const uint8_t *)"a\xE2\x82\xACz\xED\xA0\x80", 8, &bad));
    assert_int_equal(bad, 5); /* the surrogate U+D800 */
    assert_false(oj__utf8_valid((const uint8_t *)"\xC0\x80", 2, &bad)); /* overlong NUL */
    assert_int_equal(bad, 0);
    assert_false(oj__utf8_valid((const uint8_t *)"xyz\xF4\x90\x80\x80", 7, &bad)); /* > U+10FFFF */
    assert_int_equal(bad, 3);
    assert_false(oj__utf8_valid((const uint8_t *)"\x80", 1, NULL)); /* NULL bad is allowed */
}

static void test_round_trip(void **state) {
    (void)state;
    uint8_t u[4];
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        int l = oj__utf8_encode(cp, u);
        assert_int_equal(l, cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4);
        uint32_t back = 0;
        if (oj__utf8_decode(u, (size_t)l, &back) != l || back != cp) fail_msg("U+%04X", cp);
        if (table_len(u, (size_t)l) != l) fail_msg("U+%04X not well-formed", cp);
    }
}

static void test_maximal_subparts(void **state) {
    (void)state;
    /* Unicode §3.9, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 has
     * the maximal subparts F1 80 80 | E1 80 | C2 | 80 | 80 | BF */
    const uint8_t s[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62,
                         0x80, 0x63, 0x80, 0xBF, 0x64};
    assert_int_equal(oj__utf8_invalid_len(s + 1, sizeof s - 1), 3);
    assert_int_equal(oj__utf8_invalid_len(s + 4, sizeof s - 4), 2);
    assert_int_equal(oj__utf8_invalid_len(s + 6, sizeof s - 6), 1);
    assert_int_equal(oj__utf8_invalid_len(s + 8, sizeof s - 8), 1);
    assert_int_equal(oj__utf8_invalid_len(s + 10, sizeof s - 10), 1);
    assert_int_equal(oj__utf8_invalid_len(s + 11, sizeof s - 11), 1);
    /* a surrogate's second byte is outside ED's range: one byte at a time */
    assert_int_equal(oj__utf8_invalid_len((const uint8_t *)"\xED\xA0\x80", 3), 1);
    /* truncated at the end of the buffer */
    assert_int_equal(oj__utf8_invalid_len((const uint8_t *)"\xF0\x9F\x98", 3), 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_matches_table),
        cmocka_unit_test(test_bad_offset),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_maximal_subparts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
