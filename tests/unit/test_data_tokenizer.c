// test: GPT-2 tokenizer ids, specials, round trips, decode modes, merge paths, files
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>

#include "data/bpe.h"
#include "data/unicode.h"
#include "data_testutil.h"

static oj_tokenizer *g_tok;

static int setup(void **state) {
    (void)state;
    g_tok = tu_gpt2();
    return g_tok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    oj_tokenizer_free(g_tok);
    return 0;
}

static void expect_ids(const char *text, unsigned flags, const int32_t *want, size_t n) {
    oj_tokens t = {0};
    oj_error err = {0};
    assert_int_equal(oj_tokenizer_encode(g_tok, text, strlen(text), flags, &t, &err), OJ_OK);
    assert_int_equal(t.len, n);
    assert_memory_equal(t.ids, want, n * sizeof *want);
    oj_tokens_free(&t);
}

static void test_known_ids(void **state) {
    (void)state;
    assert_int_equal(oj_tokenizer_vocab_size(g_tok), 50257);
    assert_int_equal(oj_tokenizer_eot(g_tok), 50256);
    assert_int_equal(oj_tokenizer_special_id(g_tok, "<|endoftext|>"), 50256);
    assert_int_equal(oj_tokenizer_special_id(g_tok, "<|nope|>"), -1);
    size_t len;
    const uint8_t *b = oj_tokenizer_token_bytes(g_tok, 995, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(b, " world", 6);
    assert_null(oj_tokenizer_token_bytes(g_tok, 50257, &len));
    const int32_t hello[] = {15496, 995};
    expect_ids("Hello world", 0, hello, 2);
    /* contractions, and the space-run rule: "a  b" -> "a", " ", " b" */
    const int32_t c1[] = {40, 1183, 3521, 470, 11, 339, 1053, 0};
    expect_ids("I'll couldn't, he've!", 0, c1, 8);
    oj_tokens t = {0};
    assert_int_equal(oj_tokenizer_encode(g_tok, "a  b", 4, 0, &t, NULL), OJ_OK);
    const int32_t ab[] = {64, 220, 275};
    assert_int_equal(t.len, 3);
    assert_memory_equal(t.ids, ab, sizeof ab);
    oj_tokens_free(&t);
    expect_ids("", 0, NULL, 0);
}

static void test_special_flags(void **state) {
    (void)state;
    const char *text = "a<|endoftext|>b";
    oj_tokens t = {0};
    oj_error err = {0};
    assert_int_equal(oj_tokenizer_encode(g_tok, text, strlen(text), OJ_ENCODE_REFUSE_SPECIAL, &t, &err),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "<|endoftext|>"));
    assert_non_null(strstr(err.message, "byte 1"));
    assert_int_equal(t.len, 0);
    const int32_t allow[] = {64, 50256, 65};
    expect_ids(text, OJ_ENCODE_ALLOW_SPECIAL, allow, 3);
    const int32_t as_text[] = {64, 27, 91, 437, 1659, 5239, 91, 29, 65};
    expect_ids(text, OJ_ENCODE_SPECIAL_AS_TEXT, as_text, 9);
    const int32_t two[] = {50256, 50256};
    expect_ids("<|endoftext|><|endoftext|>", OJ_ENCODE_ALLOW_SPECIAL, two, 2);
    oj_error e2 = {0};
    assert_int_equal(oj_tokenizer_encode(g_tok, "x", 1, 7, &t, &e2), OJ_ERR_INVALID_ARGUMENT);
    /* decode gives the special's text back */
    char *out;
    assert_int_equal(oj_tokenizer_decode(g_tok, allow, 3, OJ_DECODE_STRICT, &out, NULL, NULL), OJ_OK);
    assert_string_equal(out, text);
    free(out);
}

static void test_add_special(void **state) {
    (void)state;
    oj_tokenizer *tok = tu_gpt2();
    oj_error e1 = {0}, e2 = {0}, e3 = {0};
    assert_int_equal(oj_tokenizer_add_special(tok, "<|pad|>", 50257, &e1), OJ_OK);
    assert_int_equal(oj_tokenizer_vocab_size(tok), 50258);
    assert_int_equal(oj_tokenizer_add_special(tok, "<|pad|>", 50300, &e2), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_tokenizer_add_special(tok, "<|x|>", 100, &e3), OJ_ERR_INVALID_ARGUMENT);
    oj_tokens t = {0};
    const char *s = "<|pad|><|endoftext|>";
    assert_int_equal(oj_tokenizer_encode(tok, s, strlen(s), OJ_ENCODE_ALLOW_SPECIAL, &t, NULL), OJ_OK);
    assert_int_equal(t.len, 2);
    assert_int_equal(t.ids[0], 50257);
    assert_int_equal(t.ids[1], 50256);
    /* a special that is a prefix of another: the longer wins at a tie */
    assert_int_equal(oj_tokenizer_add_special(tok, "<|end", 50258, NULL), OJ_OK);
    const char *u = "x<|pad|>y<|endoftext|>z<|end<|pad|> <|end";
    t.len = 0;
    assert_int_equal(oj_tokenizer_encode(tok, u, strlen(u), OJ_ENCODE_ALLOW_SPECIAL, &t, NULL), OJ_OK);
    const int32_t want[] = {87, 50257, 88, 50256, 89, 50258, 50257, 220, 50258};
    assert_int_equal(t.len, 9);
    assert_memory_equal(t.ids, want, sizeof want);
    oj_tokens_free(&t);
    oj_tokenizer_free(tok);
}

static void test_decode_modes(void **state) {
    (void)state;
    /* byte tokens for invalid sequences, then decode as lossy/strict/bytes */
    static const struct {
        const char *in, *lossy;
    } cases[] = {
        {"a\xF0\x9F\x98" "b", "a\xEF\xBF\xBD" "b"},             /* truncated 4-byte: one U+FFFD */
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},                 /* overlong lead: one per byte */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE2\x82x", "\xEF\xBF\xBDx"},
        {"\xFF\xFE", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"ok \xE2\x82\xAC", "ok \xE2\x82\xAC"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oj_tokens t = {0};
        size_t n = strlen(cases[i].in);
        assert_int_equal(oj_tokenizer_encode(g_tok, cases[i].in, n, 0, &t, NULL), OJ_OK);
        char *out;
        size_t len;
        assert_int_equal(oj_tokenizer_decode(g_tok, t.ids, t.len, OJ_DECODE_BYTES, &out, &len, NULL), OJ_OK);
        assert_int_equal(len, n);
        assert_memory_equal(out, cases[i].in, n);
        free(out);
        assert_int_equal(oj_tokenizer_decode(g_tok, t.ids, t.len, OJ_DECODE_LOSSY, &out, &len, NULL), OJ_OK);
        assert_string_equal(out, cases[i].lossy);
        assert_int_equal(len, strlen(cases[i].lossy));
        free(out);
        oj_error err = {0};
        bool valid = strcmp(cases[i].in, cases[i].lossy) == 0;
        assert_int_equal(oj_tokenizer_decode(g_tok, t.ids, t.len, OJ_DECODE_STRICT, &out, &len, &err),
                         valid ? OJ_OK : OJ_ERR_CORRUPT);
        if (valid)
            free(out);
        else {
            assert_null(out);
            assert_non_null(strstr(err.message, "invalid UTF-8"));
        }
        oj_tokens_free(&t);
    }
    int32_t bad[] = {1, 50257};
    char *out;
    oj_error err = {0};
    assert_int_equal(oj_tokenizer_decode(g_tok, bad, 2, 0, &out, NULL, &err), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(err.message, "50257"));
    int32_t neg = -1;
    assert_int_equal(oj_tokenizer_decode(g_tok, &neg, 1, 0, &out, NULL, NULL), OJ_ERR_OUT_OF_RANGE);
    assert_int_equal(oj_tokenizer_decode(g_tok, NULL, 0, 0, &out, NULL, NULL), OJ_OK);
    assert_string_equal(out, "");
    free(out);
}

/* Random byte strings, valid or not: decode(encode(b)) == b exactly. */
static void test_roundtrip_random_bytes(void **state) {
    (void)state;
    uint64_t s = 42;
    static const char *frag[] = {" ", "  ", "\n", "'s", "'ll", "a", "Z", "7", "é", "中", "😀",
                                 "\xE2\x80\x8D", "\xCC\x81", "\xE3\x80\x80", "\xC2\xA0", "!!",
                                 "\xF0\x9F", "\x80", "\xFF"};
    uint8_t buf[300];
    for (int it = 0; it < 3000; it++) {
        size_t n = 0, want = tu_rand(&s) % 200;
        while (n < want) {
            if (tu_rand(&s) & 1)
                buf[n++] = (uint8_t)tu_rand(&s);
            else {
                const char *f = frag[tu_rand(&s) % (sizeof frag / sizeof frag[0])];
                size_t l = strlen(f);
                if (n + l > sizeof buf)
                    break;
                memcpy(buf + n, f, l);
                n += l;
            }
        }
        oj_tokens t = {0};
        assert_int_equal(oj_tokenizer_encode(g_tok, (const char *)buf, n, OJ_ENCODE_SPECIAL_AS_TEXT, &t, NULL), OJ_OK);
        for (size_t i = 0; i < t.len; i++)
            assert_true(t.ids[i] >= 0 && t.ids[i] < 50256);
        char *out;
        size_t len;
        assert_int_equal(oj_tokenizer_decode(g_tok, t.ids, t.len, OJ_DECODE_BYTES, &out, &len, NULL), OJ_OK);
        assert_int_equal(len, n);
        assert_memory_equal(out, buf, n);
        free(out);
        oj_tokens_free(&t);
    }
}

/* Reference byte_pair_merge: ranks of concatenated bytes, leftmost minimum. */
static size_t naive_bpe(const uint8_t *b, size_t n, int32_t *out) {
    size_t *st = malloc((n + 1) * sizeof *st), m = n;
    for (size_t i = 0; i <= n; i++)
        st[i] = i;
    for (;;) {
        int32_t best = INT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            int32_t r = oj_bpe_rank(g_tok, b + st[i], st[i + 2] - st[i]);
            if (r >= 0 && r < best) {
                best = r;
                bi = i;
            }
        }
        if (best == INT32_MAX)
            break;
        memmove(st + bi + 1, st + bi + 2, (m - bi - 1) * sizeof *st);
        m--;
    }
    for (size_t i = 0; i < m; i++)
        out[i] = oj_bpe_rank(g_tok, b + st[i], st[i + 1] - st[i]);
    free(st);
    return m;
}

static void test_merge_matches_reference(void **state) {
    (void)state;
    uint64_t s = 5;
    static const char letters[] = "etaoinshrdlucmfwypvbgkqjxzETAOIN";
    uint8_t buf[700];
    int32_t want[700];
    for (int it = 0; it < 400; it++) {
        /* one piece of letters: short pieces take the array path, long the heap */
        size_t n = it < 300 ? 2 + tu_rand(&s) % 40 : 129 + tu_rand(&s) % 500;
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)letters[tu_rand(&s) % (sizeof letters - 1)];
        oj_tokens t = {0};
        assert_int_equal(oj_tokenizer_encode(g_tok, (const char *)buf, n, 0, &t, NULL), OJ_OK);
        size_t m = naive_bpe(buf, n, want);
        assert_int_equal(t.len, m);
        assert_memory_equal(t.ids, want, m * sizeof *want);
        /* encode again: now from the piece cache */
        oj_tokens u = {0};
        assert_int_equal(oj_tokenizer_encode(g_tok, (const char *)buf, n, 0, &u, NULL), OJ_OK);
        assert_int_equal(u.len, m);
        assert_memory_equal(u.ids, want, m * sizeof *want);
        oj_tokens_free(&t);
        oj_tokens_free(&u);
    }
}

static void test_long_runs(void **state) {
    (void)state;
    const size_t n = 200000;
    char *buf = malloc(n);
    const char fill[] = {' ', '7', '!', '\n', 'a'};
    for (size_t k = 0; k < sizeof fill; k++) {
        memset(buf, fill[k], n);
        oj_tokens t = {0};
        assert_int_equal(oj_tokenizer_encode(g_tok, buf, n, 0, &t, NULL), OJ_OK);
        /* GPT-2 has no token for two spaces: n of them are n tokens */
        assert_true(t.len > 0 && (t.len < n || fill[k] == ' '));
        char *out;
        size_t len;
        assert_int_equal(oj_tokenizer_decode(g_tok, t.ids, t.len, OJ_DECODE_STRICT, &out, &len, NULL), OJ_OK);
        assert_int_equal(len, n);
        assert_memory_equal(out, buf, n);
        free(out);
        oj_tokens_free(&t);
    }
    free(buf);
}

/* A synthetic multi-line text of about n bytes. */
static char *make_text(size_t n, uint64_t seed) {
    static const char *words[] = {"the", "And", "LORD", "said", "unto", "him,", "thee;", "42",
                                  "1:1", "shalt", "\xC3\xA9t\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87",
                                  "don't", "--", "  ", "\t", "(yes)", "\xF0\x9F\x98\x80"};
    char *t = malloc(n + 64);
    size_t o = 0;
    while (o < n) {
        const char *w = words[tu_rand(&seed) % (sizeof words / sizeof words[0])];
        size_t l = strlen(w);
        memcpy(t + o, w, l);
        o += l;
        uint64_t r = tu_rand(&seed) % 12;
        t[o++] = r == 0 ? '\n' : ' ';
        if (r == 1) {
            t[o++] = '\n';
            t[o++] = ' ';
        }
    }
    t[o] = 0;
    return t;
}

static void test_batch_and_parallel_equal(void **state) {
    (void)state;
    size_t n = 600000;
    char *text = make_text(n, 9);
    n = strlen(text);
    oj_tokens ref = {0};
    assert_int_equal(oj_tokenizer_encode(g_tok, text, n, 0, &ref, NULL), OJ_OK);
    for (int th = 1; th <= 4; th++) {
        oj_tokens p = {0};
        assert_int_equal(oj_tokenizer_encode_parallel(g_tok, text, n, 0, th, &p, NULL), OJ_OK);
        assert_int_equal(p.len, ref.len);
        assert_memory_equal(p.ids, ref.ids, ref.len * sizeof *ref.ids);
        oj_tokens_free(&p);
    }
    /* batch: 64 slices, each equal to its own encode */
    enum { K = 64 };
    const char *texts[K];
    size_t lens[K];
    oj_tokens outs[K];
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < K; i++) {
        texts[i] = text + (size_t)i * (n / K);
        lens[i] = n / K - (size_t)i;
    }
    assert_int_equal(oj_tokenizer_encode_batch(g_tok, K, texts, lens, 0, 3, outs, NULL), OJ_OK);
    for (int i = 0; i < K; i++) {
        oj_tokens one = {0};
        assert_int_equal(oj_tokenizer_encode(g_tok, texts[i], lens[i], 0, &one, NULL), OJ_OK);
        assert_int_equal(outs[i].len, one.len);
        assert_memory_equal(outs[i].ids, one.ids, one.len * sizeof *one.ids);
        oj_tokens_free(&one);
        oj_tokens_free(&outs[i]);
    }
    /* a refused special is reported by batch and parallel encodes too */
    memcpy(text + n / 2, "<|endoftext|>", 13);
    oj_error err = {0};
    oj_tokens p = {0};
    assert_int_equal(oj_tokenizer_encode_parallel(g_tok, text, n, 0, 2, &p, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "<|endoftext|>"));
    oj_tokens_free(&p);
    oj_tokens_free(&ref);
    free(text);
}

static void test_pcre2_mode_same_ids(void **state) {
    (void)state;
    oj_tokenizer *tok = tu_gpt2();
    assert_int_equal(oj_tokenizer_set_pretokenizer(tok, OJ_PRETOK_PCRE2, NULL), OJ_OK);
    char *text = make_text(200000, 3);
    size_t n = strlen(text);
    oj_tokens a = {0}, b = {0};
    assert_int_equal(oj_tokenizer_encode(g_tok, text, n, 0, &a, NULL), OJ_OK);
    assert_int_equal(oj_tokenizer_encode(tok, text, n, 0, &b, NULL), OJ_OK);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.ids, b.ids, a.len * sizeof *a.ids);
    oj_error err = {0};
    oj_tokens c = {0};
    assert_int_equal(oj_tokenizer_encode(tok, "a\xFF", 2, 0, &c, &err), OJ_ERR_INVALID_ARGUMENT);
    oj_tokens_free(&a);
    oj_tokens_free(&b);
    oj_tokens_free(&c);
    free(text);
    oj_tokenizer_free(tok);
}

static void test_save_reload(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    oj_error err = {0};
    assert_int_equal(oj_tokenizer_save(g_tok, dir, &err), OJ_OK);
    char *enc = tu_path(dir, "encoder.json"), *bpe = tu_path(dir, "vocab.bpe");
    char *tik = tu_path(dir, "ranks.tiktoken");
    /* vocab.bpe is byte-identical to GPT-2's */
    size_t l1 = 0, l2 = 0;
    char *a = tu_read(bpe, &l1), *b = tu_read(TU_GPT2_DIR "/vocab.bpe", &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(a, b, l1);
    free(a);
    free(b);
    oj_tokenizer *t1, *t2, *t3, *t4;
    assert_int_equal(oj_tokenizer_load_gpt2(enc, bpe, &t1, &err), OJ_OK);
    assert_int_equal(oj_tokenizer_load_tiktoken(tik, &t2, &err), OJ_OK);
    /* a tiktoken-only tokenizer recovers its merges when saved */
    char *dir2 = tu_tmpdir();
    assert_int_equal(oj_tokenizer_save(t2, dir2, &err), OJ_OK);
    assert_int_equal(oj_tokenizer_load(dir2, &t3, &err), OJ_OK);
    char *only = tu_tmpdir(), *tik2 = tu_path(only, "gpt2.tiktoken");
    char *raw = tu_read(tik, &l1);
    assert_int_equal(tu_write(tik2, raw, l1), 0);
    free(raw);
    assert_int_equal(oj_tokenizer_load(only, &t4, &err), OJ_OK); /* directory with one rank file */
    oj_tokenizer *all[] = {t1, t2, t3, t4};
    char *text = make_text(100000, 77);
    oj_tokens ref = {0};
    assert_int_equal(oj_tokenizer_encode(g_tok, text, strlen(text), 0, &ref, NULL), OJ_OK);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(oj_tokenizer_vocab_size(all[k]), 50257);
        assert_int_equal(oj_tokenizer_eot(all[k]), 50256);
        for (int32_t id = 0; id < 50257; id++) {
            size_t x, y;
            const uint8_t *p = oj_tokenizer_token_bytes(g_tok, id, &x);
            const uint8_t *q = oj_tokenizer_token_bytes(all[k], id, &y);
            assert_int_equal(x, y);
            assert_memory_equal(p, q, x);
        }
        oj_tokens t = {0};
        assert_int_equal(oj_tokenizer_encode(all[k], text, strlen(text), 0, &t, NULL), OJ_OK);
        assert_int_equal(t.len, ref.len);
        assert_memory_equal(t.ids, ref.ids, t.len * sizeof *t.ids);
        oj_tokens_free(&t);
        oj_tokenizer_free(all[k]);
    }
    oj_tokens_free(&ref);
    free(text);
    free(enc);
    free(bpe);
    free(tik);
    free(tik2);
    tu_rmdir(dir);
    tu_rmdir(dir2);
    tu_rmdir(only);
    free(dir);
    free(dir2);
    free(only);
}

/* Load a GPT-2 pair written from strings; returns the status. */
static oj_status load_pair(const char *enc, const char *bpe, oj_error *err) {
    char *dir = tu_tmpdir();
    char *a = tu_path(dir, "encoder.json"), *b = tu_path(dir, "vocab.bpe");
    tu_write(a, enc, strlen(enc));
    if (bpe)
        tu_write(b, bpe, strlen(bpe));
    oj_tokenizer *tok = (oj_tokenizer *)1;
    oj_status st = oj_tokenizer_load_gpt2(a, b, &tok, err);
    if (st == OJ_OK)
        oj_tokenizer_free(tok);
    else
        assert_null(tok);
    free(a);
    free(b);
    tu_rmdir(dir);
    free(dir);
    return st;
}

/* encoder.json text for the 256 byte tokens in GPT-2 order plus extra. */
static char *byte_encoder(const char *extra) {
    char *s = malloc(8192);
    size_t o = 0;
    s[o++] = '{';
    for (int id = 0; id < 256; id++) {
        int b = 0;
        while (oj_gpt2_byte_rank((uint8_t)b) != id)
            b++;
        uint8_t u[4];
        int l = oj__utf8_encode(oj_gpt2_byte_to_cp((uint8_t)b), u);
        s[o++] = '"';
        if (u[0] == '"' || u[0] == '\\')
            s[o++] = '\\';
        memcpy(s + o, u, (size_t)l);
        o += (size_t)l;
        o += (size_t)sprintf(s + o, "\": %d, ", id);
    }
    o += (size_t)sprintf(s + o, "%s}", extra);
    return s;
}

static void test_load_errors(void **state) {
    (void)state;
    oj_error e = {0};
    oj_tokenizer *tok;
    assert_int_equal(oj_tokenizer_load("/nonexistent/dir", &tok, &e), OJ_ERR_IO);
    assert_null(tok);
    /* good minimal vocabulary: 256 bytes + "ab" */
    char *enc = byte_encoder("\"ab\": 256, \"<|endoftext|>\": 257");
    oj_error e0 = {0};
    assert_int_equal(load_pair(enc, "#version: 0.2\na b\n", &e0), OJ_OK);
    oj_error e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0}, e5 = {0}, e6 = {0};
    assert_int_equal(load_pair("{\"a\": 1,", "", &e1), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e1.message, "encoder.json"));
    assert_int_equal(load_pair(enc, "#version: 0.2\na  b\n", &e2), OJ_ERR_CORRUPT);
    assert_int_equal(load_pair(enc, "#version: 0.2\nab c\n", &e3), OJ_ERR_CORRUPT);
    assert_int_equal(load_pair(enc, NULL, &e4), OJ_ERR_IO);
    free(enc);
    /* a missing byte token */
    enc = byte_encoder("\"ab\": 256");
    char *cut = strstr(enc, "\"a\": ");
    memcpy(cut, "\"\xC4\xA3", 3); /* rename "a" to a second copy of another byte's key */
    assert_int_equal(load_pair(enc, "#version: 0.2\n", &e5), OJ_ERR_CORRUPT);
    free(enc);
    /* merge order that disagrees with the ids */
    enc = byte_encoder("\"ab\": 257, \"cd\": 256");
    assert_int_equal(load_pair(enc, "#version: 0.2\na b\nc d\n", &e6), OJ_ERR_UNSUPPORTED);
    free(enc);
    /* tiktoken files */
    char *dir = tu_tmpdir(), *p = tu_path(dir, "x.tiktoken");
    oj_error e7 = {0}, e8 = {0}, e9 = {0};
    tu_write(p, "YQ== 0\nYg 1\n", 12);
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, &e7), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e7.message, ":2:"));
    tu_write(p, "YQ== 0\nYg== x\n", 14);
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, &e8), OJ_ERR_CORRUPT);
    tu_write(p, "YQ== 0\nYg== 1\n", 14);
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, &e9), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e9.message, "byte"));
    char *q = tu_path(dir, "y.tiktoken");
    tu_write(q, "", 0);
    oj_error e10 = {0};
    assert_int_equal(oj_tokenizer_load(dir, &tok, &e10), OJ_ERR_INVALID_ARGUMENT);
    free(p);
    free(q);
    tu_rmdir(dir);
    free(dir);
}

/* A vocab.bpe that ends early (or is empty) would turn the rest of the
 * vocabulary into "special tokens" and change every tokenization: the
 * first entry that no merge produces, though the pre-tokenizer keeps it
 * whole, is refused with vocab.bpe's last line. */
static void test_vocab_bpe_truncated(void **state) {
    (void)state;
    char *enc = byte_encoder("\"ab\": 256, \"<|endoftext|>\": 257");
    oj_error e1 = {0};
    assert_int_equal(load_pair(enc, "#version: 0.2\n", &e1), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e1.message, "\"ab\" (id 256)"));
    assert_non_null(strstr(e1.message, "line 1 after 0 merges"));
    oj_error e2 = {0};
    assert_int_equal(load_pair(enc, "", &e2), OJ_ERR_CORRUPT);
    free(enc);
    /* a special that the pre-tokenizer splits is still a special */
    enc = byte_encoder("\"ab\": 256, \"<s>\": 257, \"[CLS]\": 258");
    oj_error e3 = {0};
    assert_int_equal(load_pair(enc, "#version: 0.2\na b\n", &e3), OJ_OK);
    free(enc);
    /* GPT-2's own files cut after 1000 merges */
    size_t el = 0, bl = 0;
    char *ej = tu_read(TU_GPT2_DIR "/encoder.json", &el), *vb = tu_read(TU_GPT2_DIR "/vocab.bpe", &bl);
    assert_non_null(ej);
    assert_non_null(vb);
    char *q = vb;
    for (int line = 0; line < 1001; line++)
        q = strchr(q, '\n') + 1;
    *q = '\0';
    oj_error e4 = {0};
    assert_int_equal(load_pair(ej, vb, &e4), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e4.message, "(id 1256)"));
    assert_non_null(strstr(e4.message, "ends at line 1001 after 1000 merges"));
    free(ej);
    free(vb);
}

static const char b64c[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* "<base64 of b> <rank><eol>" appended to out at *o. */
static void rank_line(char *out, size_t *o, const uint8_t *b, size_t n, int32_t rank,
                      const char *eol) {
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < n ? b[i + 2] : 0);
        out[(*o)++] = b64c[w >> 18 & 63];
        out[(*o)++] = b64c[w >> 12 & 63];
        out[(*o)++] = i + 1 < n ? b64c[w >> 6 & 63] : '=';
        out[(*o)++] = i + 2 < n ? b64c[w & 63] : '=';
    }
    *o += (size_t)sprintf(out + *o, " %d%s", (int)rank, eol);
}

/* tiktoken rank files: GPT-2's ranks load (any line order and line
 * ending), others are refused: a changed rank, or a file the size of
 * cl100k_base's (named), since their pre-tokenisation pattern is not
 * GPT-2's and they would encode to wrong ids. */
static void test_tiktoken_identified(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), *p = tu_path(dir, "r.tiktoken");
    size_t cap = (size_t)120000 * 64, o = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (int32_t id = 50255; id >= 0; id--) { /* reversed, CRLF */
        size_t n = 0;
        const uint8_t *b = oj_tokenizer_token_bytes(g_tok, id, &n);
        rank_line(buf, &o, b, n, id, "\r\n");
    }
    assert_int_equal(tu_write(p, buf, o), 0);
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, &e), OJ_OK);
    assert_int_equal(oj_tokenizer_eot(tok), 50256);
    oj_tokenizer_free(tok);
    /* two ranks swapped: not GPT-2's */
    o = 0;
    for (int32_t id = 0; id < 50256; id++) {
        size_t n = 0;
        int32_t r = id == 1000 ? 1001 : id == 1001 ? 1000 : id;
        const uint8_t *b = oj_tokenizer_token_bytes(g_tok, id, &n);
        rank_line(buf, &o, b, n, r, "\n");
    }
    assert_int_equal(tu_write(p, buf, o), 0);
    oj_error e2 = {0};
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, &e2), OJ_ERR_UNSUPPORTED);
    assert_null(tok);
    assert_non_null(strstr(e2.message, "not GPT-2's"));
    /* the caller may vouch for the pattern */
    assert_int_equal(oj_tokenizer_load_tiktoken_as_gpt2(p, &tok, &e2), OJ_OK);
    oj_tokenizer_free(tok);
    /* 100256 ranks, as cl100k_base: named */
    o = 0;
    for (int32_t id = 0; id < 256; id++) {
        uint8_t b = (uint8_t)id;
        rank_line(buf, &o, &b, 1, id, "\n");
    }
    for (int32_t id = 256; id < 100256; id++) {
        char t[16];
        int n = snprintf(t, sizeof t, "t%d", (int)id);
        rank_line(buf, &o, (const uint8_t *)t, (size_t)n, id, "\n");
    }
    assert_int_equal(tu_write(p, buf, o), 0);
    oj_error e3 = {0};
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, &e3), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(e3.message, "cl100k_base"));
    oj_error e4 = {0}; /* the directory loader too */
    assert_int_equal(oj_tokenizer_load(dir, &tok, &e4), OJ_ERR_UNSUPPORTED);
    /* the hash that identifies GPT-2's ranks is that of GPT-2's encoder.json */
    assert_true(oj__tokenizer_ranks_hash(g_tok, 50256) == UINT64_C(0x58b09f73d0154297));
    free(buf);
    free(p);
    tu_rmdir(dir);
    free(dir);
}

/* ---- rank files and texts the tokenizer refuses: a device (or a link to one)
 * as a rank file, a NULL text with a length, a rank file naming a far id */

/* A rank file that is a device (/dev/zero, or a link to it in a tokenizer
 * directory) is refused as not a regular file with OJ_ERR_IO, not read
 * until memory runs out; the GPT-2 pair too. */
static void test_tokenizer_refuses_non_regular_files(void **state) {
    (void)state;
    oj_tokenizer *tok = (oj_tokenizer *)1;
    oj_error e = {0};
    assert_int_equal(oj_tokenizer_load_tiktoken("/dev/zero", &tok, &e), OJ_ERR_IO);
    assert_null(tok);
    assert_non_null(strstr(e.message, "/dev/zero"));
    /* through a directory whose rank file is a link to a device */
    char dir[] = "/tmp/ojas_tok_files_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char link[256];
    snprintf(link, sizeof link, "%s/r.tiktoken", dir);
    assert_int_equal(symlink("/dev/zero", link), 0);
    oj_error e2 = {0};
    assert_int_equal(oj_tokenizer_load(dir, &tok, &e2), OJ_ERR_IO);
    assert_non_null(strstr(e2.message, "not a regular file"));
    unlink(link);
    rmdir(dir);
    /* the GPT-2 pair: refused too (encoder.json is read by jansson) */
    oj_error e3 = {0};
    assert_int_not_equal(oj_tokenizer_load_gpt2("/dev/zero", "/dev/zero", &tok, &e3), OJ_OK);
}

/* oj_bpe_train given a NULL text with a non-zero length:
 * OJ_ERR_INVALID_ARGUMENT naming the text; NULL with length 0 is an
 * empty text. */
static void test_bpe_train_null_text(void **state) {
    (void)state;
    oj_bpe_train_config c = oj_bpe_train_config_default();
    c.vocab_size = 300;
    const char *texts[2] = {"hello hello", NULL};
    size_t lens[2] = {11, 5};
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(oj_bpe_train(&c, 2, texts, lens, &tok, &e), OJ_ERR_INVALID_ARGUMENT);
    assert_null(tok);
    assert_non_null(strstr(e.message, "text 1"));
    /* NULL with length 0 is an empty text */
    lens[1] = 0;
    assert_int_equal(oj_bpe_train(&c, 2, texts, lens, &tok, NULL), OJ_OK);
    assert_non_null(tok);
    oj_tokenizer_free(tok);
}

/* A rank file (tiktoken) or encoder.json naming an id far beyond the entry
 * count (2000000000) is OJ_ERR_CORRUPT, not an id table sized by it; a gap
 * that stays near the entry count loads. The fuzz_tokenizer seed
 * bad_id_huge is the same input. */
static void test_tokenizer_refuses_far_ids(void **state) {
    (void)state;
    char dir[] = "/tmp/ojas_tok_files_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p[256], q[256];
    /* tiktoken: every byte 0..255 (base64), then one rank far out */
    snprintf(p, sizeof p, "%s/r.tiktoken", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int b = 0; b < 256; b++)
        fprintf(f, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    fprintf(f, "YWI= 2000000000\n");
    fclose(f);
    oj_tokenizer *tok = (oj_tokenizer *)1;
    oj_error e = {0};
    assert_int_equal(oj_tokenizer_load_tiktoken_as_gpt2(p, &tok, &e), OJ_ERR_CORRUPT);
    assert_null(tok);
    assert_non_null(strstr(e.message, "far beyond"));
    /* a gap that stays near the entry count is still a tokenizer */
    f = fopen(p, "wb");
    assert_non_null(f);
    for (int b = 0; b < 256; b++)
        fprintf(f, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    fprintf(f, "YWI= 600\n");
    fclose(f);
    assert_int_equal(oj_tokenizer_load_tiktoken_as_gpt2(p, &tok, NULL), OJ_OK);
    assert_int_equal(oj_tokenizer_vocab_size(tok), 602);
    oj_tokenizer_free(tok);
    unlink(p);
    /* encoder.json: the same id as a special token */
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    snprintf(q, sizeof q, "%s/vocab.bpe", dir);
    f = fopen(p, "wb");
    assert_non_null(f);
    fprintf(f, "{\"!\": 0, \"<|big|>\": 2000000000}");
    fclose(f);
    f = fopen(q, "wb");
    assert_non_null(f);
    fclose(f);
    oj_error e2 = {0};
    assert_int_equal(oj_tokenizer_load_gpt2(p, q, &tok, &e2), OJ_ERR_CORRUPT);
    assert_null(tok);
    assert_non_null(strstr(e2.message, "far beyond"));
    unlink(p);
    unlink(q);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_ids),
        cmocka_unit_test(test_special_flags),
        cmocka_unit_test(test_add_special),
        cmocka_unit_test(test_decode_modes),
        cmocka_unit_test(test_roundtrip_random_bytes),
        cmocka_unit_test(test_merge_matches_reference),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_batch_and_parallel_equal),
        cmocka_unit_test(test_pcre2_mode_same_ids),
        cmocka_unit_test(test_save_reload),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_vocab_bpe_truncated),
        cmocka_unit_test(test_tiktoken_identified),
        cmocka_unit_test(test_tokenizer_refuses_non_regular_files),
        cmocka_unit_test(test_bpe_train_null_text),
        cmocka_unit_test(test_tokenizer_refuses_far_ids),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
