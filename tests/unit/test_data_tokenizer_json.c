// test: tokenizer.json loading on small made-up files: merge ranks (not
// ids) order merging and ignore_merges, both merge formats, added tokens
// under each encode flag, the template, the regex translation,
// SentencePiece-style BPE with byte fallback, the EOS a directory names and
// data prepare with it; refusals
// name the file and the field (truncated JSON, unsupported types and
// options, a merge whose part or result is not in the vocabulary)
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "data/bpe.h"
#include "data/hf_regex.h"
#include "data_testutil.h"

static char *g_dir;

/* A GPT-2 byte string for s (ASCII letters map to themselves). */
static void put_key(json_t *vocab, const char *bytes, int id) {
    char key[64];
    size_t o = 0;
    for (const char *p = bytes; *p; p++) {
        uint32_t cp = oj_gpt2_byte_to_cp((uint8_t)*p);
        if (cp < 0x80)
            key[o++] = (char)cp;
        else {
            key[o++] = (char)(0xC0 | cp >> 6);
            key[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    key[o] = 0;
    json_object_set_new(vocab, key, json_integer(id));
}

/* Bytes 0..255 as ids 0..255, then ab=256 bc=257 abc=258 " a"=259;
 * merges "b c" (rank 0) before "a b" (rank 1), then "ab c", "Ġ a". */
static json_t *base(bool pairs_format, bool ignore_merges) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        if (b == 0) { /* the NUL byte: its key is U+0100 */
            json_object_set_new(vocab, "\xC4\x80", json_integer(0));
            continue;
        }
        put_key(vocab, s, b);
    }
    put_key(vocab, "ab", 256);
    put_key(vocab, "bc", 257);
    put_key(vocab, "abc", 258);
    put_key(vocab, " a", 259);
    json_t *merges = json_array();
    static const char *const m[][2] = {{"b", "c"}, {"a", "b"}, {"ab", "c"}, {"\xC4\xA0", "a"}};
    for (int i = 0; i < 4; i++) {
        if (pairs_format)
            json_array_append_new(merges, json_pack("[ss]", m[i][0], m[i][1]));
        else {
            char s[32];
            snprintf(s, sizeof s, "%s %s", m[i][0], m[i][1]);
            json_array_append_new(merges, json_string(s));
        }
    }
    json_t *root = json_pack(
        "{s:s, s:n, s:n, s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}], s:n,"
        " s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
        " s:{s:s, s:[{s:{s:s}}, {s:{s:s}}], s:{s:{s:[i]}}},"
        " s:{s:s}, s:{s:s, s:o, s:o, s:b}}",
        "version", "1.0", "truncation", "padding", "added_tokens", "id", 260, "content", "<s>",
        "special", 1, "id", 261, "content", "<x>", "special", 0, "normalizer", "pre_tokenizer",
        "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex",
        "(?i:'s)| ?\\p{L}+|\\s+|[^\\s\\p{L}]+", "behavior", "Isolated", "invert", 0, "type",
        "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0, "post_processor",
        "type", "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "Sequence", "id", "A",
        "special_tokens", "<s>", "ids", 260, "decoder", "type", "ByteLevel", "model", "type",
        "BPE", "vocab", vocab, "merges", merges, "ignore_merges", ignore_merges);
    assert_non_null(root);
    return root;
}

/* Write root as DIR/tokenizer.json (consumed) and load the directory. */
static oj_status load(json_t *root, oj_tokenizer **tok, oj_error *e) {
    char *p = tu_path(g_dir, "tokenizer.json");
    assert_int_equal(json_dump_file(root, p, 0), 0);
    json_decref(root);
    free(p);
    return oj_tokenizer_load(g_dir, tok, e);
}

static void expect(const oj_tokenizer *tok, const char *text, unsigned flags, const int32_t *want,
                   size_t n) {
    oj_tokens ids = {0};
    oj_error e = {0};
    assert_int_equal(oj_tokenizer_encode(tok, text, strlen(text), flags, &ids, &e), OJ_OK);
    if (ids.len != n || memcmp(ids.ids, want, n * sizeof *want)) {
        fprintf(stderr, "\"%s\": got", text);
        for (size_t i = 0; i < ids.len; i++)
            fprintf(stderr, " %d", (int)ids.ids[i]);
        fprintf(stderr, "\n");
        fail();
    }
    oj_tokens_free(&ids);
}

// test: merges apply by rank ("b c" first, so "abc" -> a bc) unless the
// piece is whole in the vocabulary and ignore_merges is set; both formats
static void test_merge_rank_and_ignore_merges(void **state) {
    (void)state;
    for (int fmt = 0; fmt < 2; fmt++) {
        oj_tokenizer *tok = NULL;
        oj_error e = {0};
        assert_int_equal(load(base(fmt, false), &tok, &e), OJ_OK);
        expect(tok, "abc", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){'a', 257}, 2);
        expect(tok, "ab a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){256, 259}, 2);
        oj_tokenizer_free(tok);
        assert_int_equal(load(base(fmt, true), &tok, &e), OJ_OK);
        expect(tok, "abc", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){258}, 1);
        expect(tok, "abcabc", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){'a', 257, 'a', 257}, 4);
        oj_tokenizer_free(tok);
    }
}

// test: the Split regex's (?i:) folds ASCII only; pieces follow the regex
static void test_regex_pieces(void **state) {
    (void)state;
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(load(base(false, false), &tok, &e), OJ_OK);
    /* " ?\p{L}+" takes " a" (merged); "\s+" takes both spaces of "  a" */
    expect(tok, " a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){259}, 1);
    expect(tok, "  a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){' ', ' ', 'a'}, 3);
    expect(tok, "'S'\xC5\xBF", OJ_ENCODE_ALLOW_SPECIAL,
           (int32_t[]){'\'', 'S', '\'', 0xC5, 0xBF}, 5);
    oj_tokenizer_free(tok);
    char why[160];
    char *re = oj_hf_regex_to_pcre2("(?i:'s)|\\s+(?!\\S)|.", why, sizeof why);
    assert_non_null(re);
    assert_non_null(strstr(re, "(?:'[sS])"));
    assert_non_null(strstr(re, "\\x{85}"));
    assert_null(strstr(re, "FEFF"));
    free(re);
    static const char *const refused[] = {"\\w+", "^a", "a++", "\\d", "(?i:[a-z])", "a{2}+",
                                          "(?<n>a)", "[[a]]", "\\1"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        re = oj_hf_regex_to_pcre2(refused[i], why, sizeof why);
        if (re)
            fprintf(stderr, "accepted %s as %s\n", refused[i], re);
        assert_null(re);
    }
}

// test: the Split regex runs in several threads at once (encode_batch):
// each thread has its own PCRE2 JIT stack, so the ids equal those of one
// thread (a JIT stack shared by the threads gave failed matches)
static void test_regex_threads(void **state) {
    (void)state;
    oj_tokenizer *tok = NULL;
    assert_int_equal(load(base(false, false), &tok, NULL), OJ_OK);
    enum { K = 32, LEN = 40000 };
    char *texts[K];
    size_t lens[K];
    oj_tokens one[K], many[K];
    uint64_t r = 7;
    for (int k = 0; k < K; k++) {
        texts[k] = malloc(LEN);
        for (int i = 0; i < LEN; i++)
            texts[k][i] = " \n abc's bcx"[tu_rand(&r) % 13];
        lens[k] = LEN;
        memset(&one[k], 0, sizeof one[k]);
        memset(&many[k], 0, sizeof many[k]);
    }
    assert_int_equal(oj_tokenizer_encode_batch(tok, K, (const char *const *)texts, lens,
                                               OJ_ENCODE_SPECIAL_AS_TEXT, 1, one, NULL), OJ_OK);
    oj_error e = {0};
    oj_status st = oj_tokenizer_encode_batch(tok, K, (const char *const *)texts, lens,
                                             OJ_ENCODE_SPECIAL_AS_TEXT, 4, many, &e);
    if (st)
        fprintf(stderr, "%s\n", e.message);
    assert_int_equal(st, OJ_OK);
    for (int k = 0; k < K; k++) {
        assert_int_equal(one[k].len, many[k].len);
        assert_memory_equal(one[k].ids, many[k].ids, one[k].len * sizeof(int32_t));
        oj_tokens_free(&one[k]);
        oj_tokens_free(&many[k]);
        free(texts[k]);
    }
    oj_tokenizer_free(tok);
}

// test: added tokens: the special one obeys the flags, the other one is
// split out in every mode; the template gives <s> before the text
static void test_added_tokens_and_template(void **state) {
    (void)state;
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(load(base(false, false), &tok, &e), OJ_OK);
    expect(tok, "a<x>a", OJ_ENCODE_SPECIAL_AS_TEXT, (int32_t[]){'a', 261, 'a'}, 3);
    expect(tok, "a<x>a", OJ_ENCODE_REFUSE_SPECIAL, (int32_t[]){'a', 261, 'a'}, 3);
    expect(tok, "<s>a<x>", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){260, 'a', 261}, 3);
    expect(tok, "<s><x>", OJ_ENCODE_SPECIAL_AS_TEXT, (int32_t[]){'<', 's', '>', 261}, 4);
    oj_tokens ids = {0};
    assert_int_equal(oj_tokenizer_encode(tok, "a<s>", 4, OJ_ENCODE_REFUSE_SPECIAL, &ids, &e),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "<s>"));
    oj_tokens_free(&ids);
    const int32_t *pre, *suf;
    size_t np, ns;
    oj_tokenizer_template(tok, &pre, &np, &suf, &ns);
    assert_int_equal(np, 1);
    assert_int_equal(pre[0], 260);
    assert_int_equal(ns, 0);
    /* decode gives the bytes back */
    char *text;
    size_t len;
    assert_int_equal(oj_tokenizer_decode(tok, (int32_t[]){260, 259, 257}, 3, OJ_DECODE_STRICT,
                                         &text, &len, &e),
                     OJ_OK);
    assert_string_equal(text, "<s> abc");
    free(text);
    /* invalid UTF-8 is refused, not guessed at */
    assert_int_equal(oj_tokenizer_encode(tok, "a\xFF", 2, OJ_ENCODE_ALLOW_SPECIAL, &ids, &e),
                     OJ_ERR_INVALID_ARGUMENT);
    /* the pre-tokenizer is the file's; the tokenizer is not saved as GPT-2 files */
    assert_int_equal(oj_tokenizer_set_pretokenizer(tok, OJ_PRETOK_FAST, &e), OJ_ERR_UNSUPPORTED);
    char *sv = tu_path(g_dir, "saved");
    assert_int_equal(oj_tokenizer_save(tok, sv, &e), OJ_ERR_UNSUPPORTED);
    free(sv);
    oj_tokens_free(&ids);
    oj_tokenizer_free(tok);
    /* Meta's Llama 3 files: Sequence [ByteLevel, TemplateProcessing] */
    json_t *root = base(false, false);
    json_t *t = json_object_get(root, "post_processor");
    json_object_set_new(root, "post_processor",
                        json_pack("{s:s, s:[{s:s}, O]}", "type", "Sequence", "processors", "type",
                                  "ByteLevel", t));
    assert_int_equal(load(root, &tok, &e), OJ_OK);
    oj_tokenizer_template(tok, &pre, &np, &suf, &ns);
    assert_int_equal(np, 1);
    assert_int_equal(pre[0], 260);
    oj_tokenizer_free(tok);
    /* a merge whose part is an added token that model.vocab also holds is
     * valid but never applies: the added token is split out first */
    root = base(false, false);
    json_t *m = json_object_get(root, "model");
    json_object_set_new(json_object_get(m, "vocab"), "<x>", json_integer(261));
    json_object_set_new(json_object_get(m, "vocab"), "<x>a", json_integer(262));
    json_array_append_new(json_object_get(m, "merges"), json_string("<x> a"));
    assert_int_equal(load(root, &tok, &e), OJ_OK);
    expect(tok, "<x>a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){261, 'a'}, 2);
    oj_tokenizer_free(tok);
}

/* Load the file changed by f, expect status st and a message holding the
 * file name and each of the needles. */
static void refused(void (*f)(json_t *), oj_status st, const char *n1, const char *n2) {
    json_t *root = base(false, false);
    f(root);
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    oj_status got = load(root, &tok, &e);
    if (got != st)
        fprintf(stderr, "message: %s\n", e.message);
    assert_int_equal(got, st);
    assert_null(tok);
    if (!strstr(e.message, "tokenizer.json") || !strstr(e.message, n1) ||
        (n2 && !strstr(e.message, n2)) || strchr(e.message, '\n')) {
        fprintf(stderr, "message: %s\n", e.message);
        fail();
    }
}

static void m_wordpiece(json_t *r) {
    json_object_set_new(json_object_get(r, "model"), "type", json_string("WordPiece"));
}
static void m_dropout(json_t *r) {
    json_object_set_new(json_object_get(r, "model"), "dropout", json_real(0.1));
}
static void m_lowercase(json_t *r) {
    json_object_set_new(r, "normalizer", json_pack("{s:s}", "type", "Lowercase"));
}
static void m_lstrip(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 1), "lstrip",
                        json_true());
}
static void m_regex(json_t *r) {
    json_t *split = json_array_get(json_object_get(json_object_get(r, "pre_tokenizer"),
                                                   "pretokenizers"),
                                   0);
    json_object_set_new(json_object_get(split, "pattern"), "Regex", json_string("\\w+|\\W+"));
}
static void m_behavior(json_t *r) {
    json_t *split = json_array_get(json_object_get(json_object_get(r, "pre_tokenizer"),
                                                   "pretokenizers"),
                                   0);
    json_object_set_new(split, "behavior", json_string("Removed"));
}
static void m_merge_result(json_t *r) {
    json_array_append_new(json_object_get(json_object_get(r, "model"), "merges"),
                          json_string("c a"));
}
static void m_merge_left(json_t *r) {
    json_array_append_new(json_object_get(json_object_get(r, "model"), "merges"),
                          json_string("xy z"));
}
static void m_merge_right(json_t *r) {
    json_array_append_new(json_object_get(json_object_get(r, "model"), "merges"),
                          json_pack("[ss]", "a", "qq"));
}
static void m_merge_form(json_t *r) {
    json_array_append_new(json_object_get(json_object_get(r, "model"), "merges"),
                          json_string("a b c"));
}
static void m_no_byte(json_t *r) {
    json_object_del(json_object_get(json_object_get(r, "model"), "vocab"), "z");
}
static void m_truncation(json_t *r) {
    json_object_set_new(r, "truncation", json_pack("{s:i}", "max_length", 8));
}
static void m_decoder(json_t *r) {
    json_object_set_new(r, "decoder", json_pack("{s:s}", "type", "WordPiece"));
}
static void m_post_two_templates(json_t *r) {
    json_t *t = json_object_get(r, "post_processor");
    json_object_set_new(r, "post_processor",
                        json_pack("{s:s, s:[O, O]}", "type", "Sequence", "processors", t, t));
}
static void m_post(json_t *r) {
    json_object_set_new(r, "post_processor", json_pack("{s:s}", "type", "BertProcessing"));
}

// test: each unsupported or malformed field is refused in one line naming
// the file and the field
static void test_refusals(void **state) {
    (void)state;
    refused(m_wordpiece, OJ_ERR_UNSUPPORTED, "model.type", "WordPiece");
    refused(m_dropout, OJ_ERR_UNSUPPORTED, "model.dropout", NULL);
    refused(m_lowercase, OJ_ERR_UNSUPPORTED, "normalizer", "Lowercase");
    refused(m_lstrip, OJ_ERR_UNSUPPORTED, "added_tokens[1].lstrip", NULL);
    refused(m_regex, OJ_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern.Regex", "\\w");
    refused(m_behavior, OJ_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].behavior", "Removed");
    refused(m_merge_result, OJ_ERR_CORRUPT, "model.merges[4]", "not in model.vocab");
    refused(m_merge_left, OJ_ERR_CORRUPT, "model.merges[4]", "\"xy\" is not in model.vocab");
    refused(m_merge_right, OJ_ERR_CORRUPT, "model.merges[4]", "\"qq\" is not in model.vocab");
    refused(m_merge_form, OJ_ERR_CORRUPT, "model.merges[4]", "one space");
    refused(m_no_byte, OJ_ERR_CORRUPT, "model.vocab", "0x7a");
    refused(m_truncation, OJ_ERR_UNSUPPORTED, "truncation", NULL);
    refused(m_decoder, OJ_ERR_UNSUPPORTED, "decoder", "WordPiece");
    refused(m_post, OJ_ERR_UNSUPPORTED, "post_processor", "BertProcessing");
    refused(m_post_two_templates, OJ_ERR_UNSUPPORTED, "post_processor.processors[1]", NULL);
}

// test: a truncated tokenizer.json is one line naming the file, line and column
static void test_truncated(void **state) {
    (void)state;
    json_t *root = base(true, true);
    char *p = tu_path(g_dir, "tokenizer.json");
    char *text = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    size_t n = strlen(text);
    for (size_t cut = 1; cut < n; cut += n / 7) {
        assert_int_equal(tu_write(p, text, cut), 0);
        oj_tokenizer *tok = NULL;
        oj_error e = {0};
        assert_int_equal(oj_tokenizer_load(g_dir, &tok, &e), OJ_ERR_CORRUPT);
        assert_null(tok);
        assert_non_null(strstr(e.message, p));
        assert_non_null(strstr(e.message, "not valid JSON"));
        assert_null(strchr(e.message, '\n'));
    }
    free(text);
    free(p);
}

/* Llama 2 style: <unk> <s> </s>, <0x00>..<0xFF> as 3..258, then
 * \u2581=259 a=260 b=261 \u2581a=262 ab=263 \u2581ab=264; merges
 * "\u2581 a", "a b", "\u2581a b". */
#define MS "\xE2\x96\x81"
static json_t *sp_base(void) {
    json_t *vocab = json_object();
    json_object_set_new(vocab, "<unk>", json_integer(0));
    json_object_set_new(vocab, "<s>", json_integer(1));
    json_object_set_new(vocab, "</s>", json_integer(2));
    for (int b = 0; b < 256; b++) {
        char k[8];
        snprintf(k, sizeof k, "<0x%02X>", b);
        json_object_set_new(vocab, k, json_integer(3 + b));
    }
    static const char *const t[] = {MS, "a", "b", MS "a", "ab", MS "ab"};
    for (int i = 0; i < 6; i++)
        json_object_set_new(vocab, t[i], json_integer(259 + i));
    json_t *root = json_pack(
        "{s:n, s:n, s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}, {s:i, s:s, s:b}],"
        " s:{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}, s:n,"
        " s:{s:s, s:[{s:{s:s}}, {s:{s:s}}], s:{s:{s:[i]}}},"
        " s:{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]},"
        " s:{s:s, s:o, s:[sss], s:b, s:s, s:b}}",
        "truncation", "padding", "added_tokens", "id", 0, "content", "<unk>", "special", 1, "id",
        1, "content", "<s>", "special", 1, "id", 2, "content", "</s>", "special", 1, "normalizer",
        "type", "Sequence", "normalizers", "type", "Prepend", "prepend", MS, "type", "Replace",
        "pattern", "String", " ", "content", MS, "pre_tokenizer", "post_processor", "type",
        "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "Sequence", "id", "A",
        "special_tokens", "<s>", "ids", 1, "decoder", "type", "Sequence", "decoders", "type",
        "Replace", "pattern", "String", MS, "content", " ", "type", "ByteFallback", "type", "Fuse",
        "type", "Strip", "content", " ", "start", 1, "stop", 0, "model", "type", "BPE", "vocab",
        vocab, "merges", MS " a", "a b", MS "a b", "byte_fallback", 1, "unk_token", "<unk>",
        "fuse_unk", 1);
    assert_non_null(root);
    return root;
}

// test: SentencePiece-style BPE: "\u2581" prepended and for spaces, merges by
// rank over characters, characters outside the vocabulary as <0xXX> tokens,
// specials split first; decode turns it back into the text
static void test_sentencepiece_byte_fallback(void **state) {
    (void)state;
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(load(sp_base(), &tok, &e), OJ_OK);
    /* "\u2581ab": "\u2581 a" (rank 0) first, then "\u2581a b" */
    expect(tok, "ab", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){264}, 1);
    /* "\u2581a\u2581b": no merge joins "\u2581" and "b" */
    expect(tok, "a b", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){262, 259, 261}, 3);
    /* é (C3 A9) and a NUL byte are not in the vocabulary */
    expect(tok, "b\xC3\xA9", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){259, 261, 3 + 0xC3, 3 + 0xA9}, 4);
    /* each section between specials gets its own "\u2581" */
    expect(tok, "a</s>a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){262, 2, 262}, 3);
    const int32_t *pre;
    size_t np;
    oj_tokenizer_template(tok, &pre, &np, NULL, NULL);
    assert_int_equal(np, 1);
    assert_int_equal(pre[0], 1);
    assert_int_equal(oj_tokenizer_eot(tok), -1);
    char *text;
    size_t len;
    assert_int_equal(oj_tokenizer_decode(tok, (int32_t[]){262, 259, 261, 3 + 0xC3, 3 + 0xA9}, 5,
                                         OJ_DECODE_STRICT, &text, &len, &e),
                     OJ_OK);
    assert_string_equal(text, "a b\xC3\xA9");
    free(text);
    oj_tokenizer_free(tok);
}

static json_t *metaspace(const char *scheme, bool split) {
    json_t *root = sp_base();
    json_object_set_new(root, "normalizer", json_null());
    json_t *m = json_pack("{s:s, s:s, s:b}", "type", "Metaspace", "replacement", MS, "split", split);
    if (scheme)
        json_object_set_new(m, "prepend_scheme", json_string(scheme));
    json_object_set_new(root, "pre_tokenizer", m);
    return root;
}

// test: the Metaspace pre-tokenizer: spaces become "\u2581", prepended to the
// section that starts the text ("first") or to every section ("always")
static void test_metaspace(void **state) {
    (void)state;
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(load(metaspace("first", false), &tok, &e), OJ_OK);
    expect(tok, "a b", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){262, 259, 261}, 3);
    expect(tok, "a</s>a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){262, 2, 260}, 3);
    expect(tok, "</s>a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){2, 260}, 2);
    expect(tok, " a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){262}, 1);
    oj_tokenizer_free(tok);
    assert_int_equal(load(metaspace("always", false), &tok, &e), OJ_OK);
    expect(tok, "a</s>a", OJ_ENCODE_ALLOW_SPECIAL, (int32_t[]){262, 2, 262}, 3);
    oj_tokenizer_free(tok);
    assert_int_equal(load(metaspace("first", true), &tok, &e), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.message, "pre_tokenizer.split"));
    e = (oj_error){0}; /* (a set error keeps its first message) */
    assert_int_equal(load(metaspace(NULL, false), &tok, &e), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.message, "pre_tokenizer.prepend_scheme"));
}

static void m_sp_no_byte(json_t *r) {
    json_object_del(json_object_get(json_object_get(r, "model"), "vocab"), "<0x41>");
}
static void m_sp_merge_part(json_t *r) {
    json_array_append_new(json_object_get(json_object_get(r, "model"), "merges"),
                          json_string("x b"));
}
static void m_sp_decoder(json_t *r) {
    json_object_set_new(r, "decoder", json_pack("{s:s}", "type", "Metaspace"));
}
static void m_sp_regex_replace(json_t *r) {
    json_t *rep = json_array_get(json_object_get(json_object_get(r, "normalizer"), "normalizers"), 1);
    json_object_set_new(rep, "pattern", json_pack("{s:s}", "Regex", " +"));
}

static void sp_refused(void (*f)(json_t *), oj_status st, const char *n1, const char *n2) {
    json_t *root = sp_base();
    f(root);
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(load(root, &tok, &e), st);
    assert_null(tok);
    if (!strstr(e.message, "tokenizer.json") || !strstr(e.message, n1) ||
        (n2 && !strstr(e.message, n2))) {
        fprintf(stderr, "message: %s\n", e.message);
        fail();
    }
}

// test: SentencePiece-style files: refusals name the field
static void test_sentencepiece_refusals(void **state) {
    (void)state;
    sp_refused(m_sp_no_byte, OJ_ERR_CORRUPT, "model.vocab", "<0x41>");
    sp_refused(m_sp_merge_part, OJ_ERR_CORRUPT, "model.merges[3]", "\"x\"");
    sp_refused(m_sp_decoder, OJ_ERR_UNSUPPORTED, "decoder", "Metaspace");
    sp_refused(m_sp_regex_replace, OJ_ERR_UNSUPPORTED, "normalizer.normalizers[1].pattern", NULL);
}

/* Writes g_dir/name holding text (NULL: removes it). */
static void put_file(const char *name, const char *text) {
    char *p = tu_path(g_dir, name);
    if (text)
        assert_int_equal(tu_write(p, text, strlen(text)), 0);
    else
        unlink(p);
    free(p);
}

static void put_configs(const char *tc, const char *gc, const char *c) {
    put_file("tokenizer_config.json", tc);
    put_file("generation_config.json", gc);
    put_file("config.json", c);
}

// test: without <|endoftext|>, eot is the EOS the directory names:
// tokenizer_config.json eos_token (string or {"content"}) first, then
// generation_config.json, then config.json eos_token_id (an id or a list)
static void test_eos_from_directory(void **state) {
    (void)state;
    static const char *const cases[][3] = {
        {"{\"eos_token\": \"</s>\"}", "{\"eos_token_id\": 1}", NULL},
        {"{\"eos_token\": {\"content\": \"</s>\", \"special\": true}}", NULL, NULL},
        {"{\"bos_token\": \"<s>\"}", "{\"eos_token_id\": 2}", "{\"eos_token_id\": 1}"},
        {NULL, NULL, "{\"eos_token_id\": [2, 1]}"},
        {"{\"eos_token\": \"</x>\"}", "{\"eos_token_id\": 260}", "{\"eos_token_id\": 2}"},
    };
    for (int i = 0; i < 5; i++) {
        put_configs(cases[i][0], cases[i][1], cases[i][2]);
        oj_tokenizer *tok = NULL;
        oj_error e = {0};
        assert_int_equal(load(sp_base(), &tok, &e), OJ_OK);
        assert_int_equal(oj_tokenizer_eot(tok), 2);
        oj_tokenizer_free(tok);
    }
    put_configs(NULL, NULL, NULL);
}

// test: data prepare with a Llama 2 style tokenizer whose EOS is </s>:
// documents are cut at "</s>" and "<|endoftext|>" text and each starts
// with </s>'s id (2), which the stats report
static void test_eos_prepare(void **state) {
    (void)state;
    put_configs(NULL, "{\"eos_token_id\": 2}", NULL);
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(load(sp_base(), &tok, &e), OJ_OK);
    char *in = tu_path(g_dir, "corpus.txt"), *out = tu_path(g_dir, "shards");
    const char *text = "a b</s>ab<|endoftext|></s>b";
    assert_int_equal(tu_write(in, text, strlen(text)), 0);
    oj_tokens want = {0};
    const char *docs[] = {"a b", "ab", "b"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(oj_tokens_push(&want, 2), OJ_OK);
        assert_int_equal(oj_tokenizer_encode(tok, docs[i], strlen(docs[i]), 0, &want, &e), OJ_OK);
    }
    oj_prepare_config cfg = oj_prepare_config_default();
    cfg.out_dir = out;
    cfg.threads = 1;
    oj_prepare_stats st;
    const char *files[] = {in};
    assert_int_equal(oj_data_prepare(tok, &cfg, 1, files, &st, &e), OJ_OK);
    assert_int_equal(st.documents, 3);
    assert_int_equal(st.separator, 2);
    assert_int_equal(st.train_tokens, (int64_t)want.len);
    char *shard = tu_path(out, "train_000000.bin");
    oj_shard *sh;
    assert_int_equal(oj_shard_open(shard, &sh, &e), OJ_OK);
    assert_int_equal(oj_shard_len(sh), (int64_t)want.len);
    int32_t got[32];
    assert_true(want.len <= 32);
    assert_int_equal(oj_shard_read(sh, 0, (int64_t)want.len, got, &e), OJ_OK);
    assert_memory_equal(got, want.ids, want.len * sizeof *got);
    oj_shard_close(sh);
    free(shard);
    oj_tokens_free(&want);
    oj_tokenizer_free(tok);
    unlink(in);
    free(in);
    tu_rmdir(out);
    free(out);
    put_configs(NULL, NULL, NULL);
}

// test: a directory that names no EOS: data prepare refuses and names each
// file it looked at and why (absent, no key, not a special token)
static void test_eos_missing(void **state) {
    (void)state;
    put_configs(NULL, "{\"bos_token_id\": 1}", "{\"eos_token_id\": 260}");
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(load(sp_base(), &tok, &e), OJ_OK);
    assert_int_equal(oj_tokenizer_eot(tok), -1);
    char *out = tu_path(g_dir, "shards");
    oj_prepare_config cfg = oj_prepare_config_default();
    cfg.out_dir = out;
    assert_int_equal(oj_data_prepare(tok, &cfg, 0, NULL, NULL, &e), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(strncmp(e.message, "data prepare: ", 14), 0);
    char *want[3] = {tu_path(g_dir, "tokenizer_config.json (absent)"),
                     tu_path(g_dir, "generation_config.json (no eos_token_id)"),
                     tu_path(g_dir, "config.json (eos_token_id 260 is not a special token)")};
    for (int i = 0; i < 3; i++) {
        if (!strstr(e.message, want[i]))
            fprintf(stderr, "missing \"%s\" in: %s\n", want[i], e.message);
        assert_non_null(strstr(e.message, want[i]));
        free(want[i]);
    }
    assert_null(strchr(e.message, '\n'));
    assert_int_equal(access(out, F_OK), -1); /* nothing written */
    oj_tokenizer_free(tok);
    free(out);
    put_configs(NULL, NULL, NULL);
}

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_rmdir(g_dir);
    free(g_dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_rank_and_ignore_merges),
        cmocka_unit_test(test_regex_pieces),
        cmocka_unit_test(test_regex_threads),
        cmocka_unit_test(test_added_tokens_and_template),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_sentencepiece_byte_fallback),
        cmocka_unit_test(test_sentencepiece_refusals),
        cmocka_unit_test(test_eos_from_directory),
        cmocka_unit_test(test_eos_prepare),
        cmocka_unit_test(test_eos_missing),
        cmocka_unit_test(test_metaspace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
