// test: the hand-written GPT-2 pre-tokeniser is identical to the pattern run by PCRE2
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/pretok.h"
#include "data/unicode.h"
#include "data_testutil.h"

/* ECMAScript \s (WhiteSpace + LineTerminator), what js-tiktoken's RegExp uses. */
static bool js_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

/* Every code point's class agrees with PCRE2's \p{L} / \p{N} and the JS
 * space set, except letters and numbers that PCRE2 10.42 (Unicode 14) does
 * not know yet (\p{Cn} there), which node's Unicode 17 tables assign. */
static void test_classes_match_pcre2(void **state) {
    (void)state;
    oj_uc_init();
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR) "^(?:(\\p{L})|(\\p{N})|(\\p{Cn}))",
                                   PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    assert_non_null(re);
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int newer = 0, spaces = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp < 0xE000)
            continue;
        uint8_t u[4];
        int l = oj__utf8_encode(cp, u);
        int rc = pcre2_match(re, u, (size_t)l, 0, 0, md, NULL);
        int pc = OJ_UC_OTHER;
        bool unassigned = false;
        if (rc > 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (rc >= 2 && ov[2] != PCRE2_UNSET)
                pc = OJ_UC_LETTER;
            else if (rc >= 3 && ov[4] != PCRE2_UNSET)
                pc = OJ_UC_NUMBER;
            else
                unassigned = true;
        }
        if (js_space(cp))
            pc = OJ_UC_SPACE;
        int ours = oj_uc_class(cp);
        spaces += ours == OJ_UC_SPACE;
        if (ours != pc) {
            if (!(unassigned && (ours == OJ_UC_LETTER || ours == OJ_UC_NUMBER)))
                fail_msg("U+%04X: ojas class %d, PCRE2 class %d", cp, ours, pc);
            newer++;
        }
    }
    assert_int_equal(spaces, 25);
    /* Unicode 15.0-17.0 added about 10k letters/digits (CJK ext. H, I, J...) */
    assert_true(newer > 0 && newer < 20000);
    print_message("classes: %d code points differ only by Unicode version (PCRE2 %s)\n", newer,
                  "10.42");
    pcre2_match_data_free(md);
    pcre2_code_free(re);
}

static void compare_split(const struct oj_pretok_re *re, void *md, const uint8_t *s, size_t n) {
    size_t a[512], b[512], pa = 0, pb = 0;
    for (;;) {
        size_t ka = oj_pretok_split(s, n, &pa, a, 512);
        size_t kb = oj_pretok_pcre2_split(re, md, s, n, &pb, b, 512);
        assert_int_not_equal(kb, (size_t)-1);
        if (ka != kb || memcmp(a, b, ka * sizeof *a) != 0) {
            fprintf(stderr, "split differs on %zu bytes:", n);
            for (size_t i = 0; i < n && i < 200; i++)
                fprintf(stderr, " %02x", s[i]);
            fprintf(stderr, "\n");
            fail();
        }
        if (!ka)
            break;
    }
    assert_int_equal(pa, n);
}

/* Random strings over characters of every class where the two agree. */
static void test_random_strings_match_pcre2(void **state) {
    (void)state;
    static const char *alpha[] = {
        " ", " ", " ", "  ", "\n", "\r\n", "\t", "\v", "\f", "'", "'", "s", "t", "re", "ve",
        "m", "ll", "d", "S", "a", "Z", "0", "9", "!", ".", ",", "-", "_", "\"", "\x01", "\x7f",
        "\xC2\xA0",             /* U+00A0 no-break space (JS \s) */
        "\xC2\x85",             /* U+0085 NEL (not JS \s) */
        "\xEF\xBB\xBF",         /* U+FEFF (JS \s) */
        "\xE3\x80\x80",         /* U+3000 ideographic space */
        "\xE2\x80\xA8",         /* U+2028 line separator */
        "\xE1\x9A\x80",         /* U+1680 ogham space */
        "\xC3\xA9", "\xC3\x9F", /* é ß */
        "\xE4\xB8\xAD",         /* 中 */
        "\xD9\xA1",             /* ١ Arabic-Indic one (Nd) */
        "\xE2\x85\xAB",         /* Ⅻ (Nl) */
        "\xC2\xBD",             /* ½ (No) */
        "\xCC\x81",             /* combining acute (Mn: other) */
        "\xE2\x80\x8D",         /* ZWJ (Cf: other) */
        "\xF0\x9F\x98\x80",     /* 😀 */
        "\xD7\xA9",             /* ש (RTL letter) */
        "\xE2\x80\x8F",         /* RLM */
    };
    const size_t na = sizeof alpha / sizeof alpha[0];
    char msg[256];
    struct oj_pretok_re *re = oj_pretok_pcre2_compile(msg, sizeof msg);
    assert_non_null(re);
    void *md = oj_pretok_pcre2_match_data(re);
    uint64_t seed = 2024;
    uint8_t buf[512];
    for (int it = 0; it < 30000; it++) {
        size_t n = 0, chars = tu_rand(&seed) % 40;
        for (size_t c = 0; c < chars; c++) {
            const char *a = alpha[tu_rand(&seed) % na];
            size_t l = strlen(a);
            memcpy(buf + n, a, l);
            n += l;
        }
        compare_split(re, md, buf, n);
    }
    /* long runs */
    static const char *runs[] = {" ", "\n", "7", "!", "a", " \n", "\xE3\x80\x80"};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++)
        for (size_t tail = 0; tail < 3; tail++) {
            size_t n = 0, l = strlen(runs[r]);
            while (n + l < 400) {
                memcpy(buf + n, runs[r], l);
                n += l;
            }
            const char *end = tail == 0 ? "" : tail == 1 ? "x" : " y";
            memcpy(buf + n, end, strlen(end));
            n += strlen(end);
            compare_split(re, md, buf, n);
        }
    oj_pretok_pcre2_match_data_free(md);
    oj_pretok_pcre2_free(re);
}

/* Bytes that are not UTF-8 are "other" characters, one byte each. */
static void test_invalid_bytes(void **state) {
    (void)state;
    static const struct {
        const char *s;
        size_t ends[6];
    } cases[] = {
        {"a\xFF" "b", {1, 2, 3}},
        {" \xFF\xFE" "abc", {3, 6}},
        {"x \xE2\x82" "!", {1, 5}},
        {"\xED\xA0\x80 1", {3, 5}},
        {"ab\xC3", {2, 3}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t ends[16], pos = 0, n = strlen(cases[i].s);
        size_t k = oj_pretok_split((const uint8_t *)cases[i].s, n, &pos, ends, 16);
        size_t want = 0;
        while (want < 6 && cases[i].ends[want])
            want++;
        assert_int_equal(k, want);
        assert_memory_equal(ends, cases[i].ends, k * sizeof *ends);
    }
    /* random bytes: pieces tile the input */
    uint64_t seed = 1;
    uint8_t buf[256];
    for (int it = 0; it < 20000; it++) {
        size_t n = tu_rand(&seed) % 256;
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)tu_rand(&seed);
        size_t ends[256], pos = 0, last = 0, k;
        while ((k = oj_pretok_split(buf, n, &pos, ends, 7)) > 0)
            for (size_t j = 0; j < k; j++) {
                assert_true(ends[j] > last);
                last = ends[j];
            }
        assert_int_equal(last, n);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes_match_pcre2),
        cmocka_unit_test(test_random_strings_match_pcre2),
        cmocka_unit_test(test_invalid_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
