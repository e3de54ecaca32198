/* Fuzz target: the tokenizer.json loader and, on every tokenizer it
 * accepts, encode / decode.
 *
 * Input layout: one flags byte, then tokenizer.json, "|OJSEP|", a text to
 * encode. The file is written to <scratch>/hf/tokenizer.json. Flags bit 0:
 * load through oj_tokenizer_load(dir) instead of oj_tokenizer_load_hf;
 * bits 1-2: the encode flags (3 is not a valid value and must be refused).
 * tests/fuzz/make_corpus_tokenizer_json.py writes seeds in this layout.
 *
 * Checks: a refusal carries its status and a one-line message naming the
 * file, and returns no tokenizer; an accepted tokenizer has a consistent id
 * table and template, encodes a fixed text and the fuzzer's text into ids
 * below its vocabulary size, or refuses (invalid UTF-8, a refused special,
 * bad flags) with a message; the ids decode (all three modes); a byte-level
 * tokenizer without a normalizer decodes them back to the text byte for
 * byte; the pre-tokenizer cannot be swapped for the GPT-2 one unless the file
 * uses that one, and saving is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe.h"
#include "fuzz_common.h"
#include "ojas/data.h"

#define FZ_MAX_INPUT (1 << 16)
#define FZ_MAX_TEXT 4096

static const char fixed_text[] =
    "Hello world! It's 2026: naïve café, 東京, emoji 🤖.\n\n"
    "  indented\tline's  ending   \r\n'll 've 're 'd 'm 's 't 'S\xC5\xBF "
    "12345 ++-- <|endoftext|> <s></s> e\xCC\x81 \xC2\x85\xEF\xBB\xBF end";

static void check_refusal(oj_status rc, const oj_error *e) {
    FZ_CHECK(rc != OJ_OK);
    FZ_CHECK(e->status == rc);
    FZ_CHECK(e->message[0] != 0);
    FZ_CHECK(strchr(e->message, '\n') == NULL);
}

static bool valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n)
            return false;
        uint32_t cp = l == 1 ? c : c & (0x7F >> l);
        for (size_t k = 1; k < l; k++) {
            if (((unsigned char)s[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | ((unsigned char)s[i + k] & 0x3F);
        }
        if ((l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) || (l == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += l;
    }
    return true;
}

static void encode_checked(const oj_tokenizer *tok, const char *text, size_t len, unsigned flags) {
    oj_tokens out = {0};
    oj_error e = {0};
    oj_status rc = oj_tokenizer_encode(tok, text, len, flags, &out, &e);
    if (rc != OJ_OK) {
        check_refusal(rc, &e);
        FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT || rc == OJ_ERR_CAPACITY);
        FZ_CHECK(rc != OJ_ERR_INVALID_ARGUMENT || flags == 0 || flags > 2 ||
                 !valid_utf8(text, len));
        oj_tokens_free(&out);
        return;
    }
    FZ_CHECK(flags <= 2);
    int32_t n_ids = oj_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < out.len; i++)
        FZ_CHECK(out.ids[i] >= 0 && out.ids[i] < n_ids);
    char *dec = NULL;
    size_t dl = 0;
    FZ_CHECK(oj_tokenizer_decode(tok, out.ids, out.len, OJ_DECODE_BYTES, &dec, &dl, &e) == OJ_OK);
    FZ_CHECK(dec[dl] == 0);
    if (oj_hf_text_round_trips(tok) && (dl != len || memcmp(dec, text, len) != 0)) {
        fprintf(stderr, "round trip differs: %zu bytes in, %zu out\n", len, dl);
        abort();
    }
    free(dec);
    dec = NULL;
    rc = oj_tokenizer_decode(tok, out.ids, out.len, OJ_DECODE_STRICT, &dec, &dl, &e);
    FZ_CHECK(rc == OJ_OK || (rc == OJ_ERR_CORRUPT && dec == NULL));
    free(dec);
    dec = NULL;
    FZ_CHECK(oj_tokenizer_decode(tok, out.ids, out.len, OJ_DECODE_LOSSY, &dec, &dl, &e) == OJ_OK);
    free(dec);
    oj_tokens_free(&out);
}

static void exercise(oj_tokenizer *tok, unsigned flags, const char *text, size_t tlen) {
    int32_t n = oj_tokenizer_vocab_size(tok);
    FZ_CHECK(n > 0);
    for (int32_t id = 0; id < n; id++) {
        size_t l;
        const uint8_t *b = oj_tokenizer_token_bytes(tok, id, &l);
        FZ_CHECK((b == NULL) == (l == 0));
    }
    int32_t eot = oj_tokenizer_eot(tok);
    FZ_CHECK(eot >= -1 && eot < n);
    const int32_t *pre, *suf;
    size_t np, ns;
    oj_tokenizer_template(tok, &pre, &np, &suf, &ns);
    for (size_t i = 0; i < np; i++)
        FZ_CHECK(pre[i] >= 0 && pre[i] < n);
    for (size_t i = 0; i < ns; i++)
        FZ_CHECK(suf[i] >= 0 && suf[i] < n);
    unsigned eflags = (flags >> 1) & 3;
    encode_checked(tok, fixed_text, sizeof fixed_text - 1, eflags);
    encode_checked(tok, text, tlen, eflags);
    oj_error e = {0};
    oj_status rc = oj_tokenizer_set_pretokenizer(tok, OJ_PRETOK_PCRE2, &e);
    if (rc != OJ_OK)
        check_refusal(rc, &e);
    char dir[512];
    FZ_CHECK(oj_tokenizer_save(tok, fz_path(dir, sizeof dir, "saved"), &e) == OJ_ERR_UNSUPPORTED);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FZ_MAX_INPUT)
        return 0;
    unsigned flags = data[0];
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data + 1, size - 1, 2, part, len);
    if (len[1] > FZ_MAX_TEXT)
        len[1] = FZ_MAX_TEXT;
    char *text = malloc(len[1] + 1);
    FZ_CHECK(text);
    if (len[1])
        memcpy(text, part[1], len[1]);
    text[len[1]] = 0;

    char path[512], dir[512];
    fz_mkdir("hf");
    fz_write(fz_path(path, sizeof path, "hf/tokenizer.json"), part[0], len[0]);
    fz_path(dir, sizeof dir, "hf");
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    oj_status rc = flags & 1 ? oj_tokenizer_load(dir, &tok, &e) : oj_tokenizer_load_hf(path, &tok, &e);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "load: %d %s\n", (int)rc, rc ? e.message : "ok");
    if (rc != OJ_OK) {
        check_refusal(rc, &e);
        FZ_CHECK(tok == NULL);
        FZ_CHECK(strstr(e.message, "tokenizer.json") != NULL);
        FZ_CHECK(rc == OJ_ERR_CORRUPT || rc == OJ_ERR_IO || rc == OJ_ERR_UNSUPPORTED ||
                 rc == OJ_ERR_CAPACITY);
    } else {
        FZ_CHECK(tok);
        exercise(tok, flags, text, len[1]);
        oj_tokenizer_free(tok);
    }
    free(text);
    return 0;
}
