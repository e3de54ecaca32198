/* Fuzz target: the tokenizer loaders (GPT-2 encoder.json + vocab.bpe, a
 * tiktoken rank file, the directory loader) and, on every tokenizer they
 * accept, encode / decode / save.
 *
 * Input layout: one flags byte, then up to four parts separated by
 * "|OJSEP|": encoder.json, vocab.bpe, ranks.tiktoken, a text to encode.
 * The first two are written to <scratch>/gpt2/, the third to
 * <scratch>/tt/ranks.tiktoken. Flags bit 0: load through
 * oj_tokenizer_load(dir) (which accepts GPT-2's ranks only) instead of the
 * two file loaders (the rank file through oj_tokenizer_load_tiktoken_as_gpt2,
 * which accepts any ranks); bits 1-2: the
 * encode flags (3 is not a valid value and must be refused); bit 3: save the
 * tokenizer and load the saved files back; bit 4: also encode the text with
 * oj_tokenizer_encode_parallel on two threads.
 * tests/fuzz/make_corpus_data.py writes seeds in this layout.
 *
 * Checks: a refusal carries its status and a non-empty message and returns
 * no tokenizer; an accepted tokenizer has a consistent id table, encodes a
 * fixed text and the fuzzer's text into ids below its vocabulary size
 * (or refuses with a message: a refused special, bad flags) and decodes them
 * (raw bytes) back to the text byte for byte; strict decoding, when it
 * succeeds, gives the same bytes; a saved and reloaded tokenizer encodes
 * both texts to the same ids; the parallel encoder gives the same ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "ojas/data.h"

#define MAX_INPUT (1 << 16)
#define MAX_TEXT 4096

static const char fixed_text[] =
    "Hello world! It's 2026: naïve café, 東京, emoji 🤖.\n\n"
    "  indented\tline's  ending   \r\n'll 've 're 'd 'm 's 't "
    "12345 ++-- <|endoftext|> \xff\xfe bad \xc3 utf8 end";

static void check_refusal(oj_status rc, const oj_error *e) {
    FZ_CHECK(rc != OJ_OK);
    FZ_CHECK(e->status == rc);
    FZ_CHECK(e->message[0] != 0);
}

/* Encode text with flags; on success check the ids and the round trip and
 * return the ids in *out (caller frees), else check the refusal. */
static oj_status encode_checked(const oj_tokenizer *tok, const char *text, size_t len,
                                unsigned flags, oj_tokens *out) {
    oj_error e = {0};
    oj_status rc = oj_tokenizer_encode(tok, text, len, flags, out, &e);
    if (rc != OJ_OK) {
        check_refusal(rc, &e);
        FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT || rc == OJ_ERR_CAPACITY);
        /* flags 0 refuses only a special's text; 1 and 2 never refuse it */
        FZ_CHECK(rc != OJ_ERR_INVALID_ARGUMENT || flags == 0 || flags > 2);
        oj_tokens_free(out);
        return rc;
    }
    FZ_CHECK(flags <= 2);
    int32_t n_ids = oj_tokenizer_vocab_size(tok);
    FZ_CHECK(len == 0 || out->len > 0);
    FZ_CHECK(out->len <= len);
    for (size_t i = 0; i < out->len; i++) FZ_CHECK(out->ids[i] >= 0 && out->ids[i] < n_ids);
    char *dec = NULL;
    size_t dl = 0;
    oj_error e2 = {0};
    FZ_CHECK(oj_tokenizer_decode(tok, out->ids, out->len, OJ_DECODE_BYTES, &dec, &dl, &e2) == OJ_OK);
    if (dl != len || memcmp(dec, text, len) != 0) {
        fprintf(stderr, "round trip differs: %zu bytes in, %zu out\n", len, dl);
        abort();
    }
    FZ_CHECK(dec[dl] == 0);
    free(dec);
    dec = NULL;
    rc = oj_tokenizer_decode(tok, out->ids, out->len, OJ_DECODE_STRICT, &dec, &dl, &e2);
    if (rc == OJ_OK) {
        FZ_CHECK(dl == len && memcmp(dec, text, len) == 0);
    } else {
        check_refusal(rc, &e2);
        FZ_CHECK(rc == OJ_ERR_CORRUPT && dec == NULL);
    }
    free(dec);
    dec = NULL;
    rc = oj_tokenizer_decode(tok, out->ids, out->len, OJ_DECODE_LOSSY, &dec, &dl, &e2);
    FZ_CHECK(rc == OJ_OK && dec && dec[dl] == 0);
    free(dec);
    return OJ_OK;
}

static void check_table(const oj_tokenizer *tok) {
    int32_t n = oj_tokenizer_vocab_size(tok);
    FZ_CHECK(n >= 256); /* every byte has a token */
    int bytes_seen = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t l;
        const uint8_t *b = oj_tokenizer_token_bytes(tok, id, &l);
        FZ_CHECK((b == NULL) == (l == 0));
        bytes_seen += b && l == 1;
    }
    FZ_CHECK(bytes_seen >= 256);
    size_t l;
    FZ_CHECK(!oj_tokenizer_token_bytes(tok, -1, &l) && l == 0);
    FZ_CHECK(!oj_tokenizer_token_bytes(tok, n, &l) && l == 0);
    int32_t eot = oj_tokenizer_eot(tok);
    FZ_CHECK(eot >= -1 && eot < n);
    FZ_CHECK(eot == oj_tokenizer_special_id(tok, "<|endoftext|>"));
}

static void exercise(oj_tokenizer *tok, unsigned flags, const char *text, size_t tlen) {
    check_table(tok);
    unsigned eflags = (flags >> 1) & 3;
    oj_tokens a = {0}, b = {0};
    oj_status ra = encode_checked(tok, fixed_text, sizeof fixed_text - 1, eflags, &a);
    oj_status rb = encode_checked(tok, text, tlen, eflags, &b);
    if (flags & 16 && rb == OJ_OK) {
        oj_tokens p = {0};
        oj_error e = {0};
        FZ_CHECK(oj_tokenizer_encode_parallel(tok, text, tlen, eflags, 2, &p, &e) == OJ_OK);
        FZ_CHECK(p.len == b.len && (b.len == 0 || !memcmp(p.ids, b.ids, b.len * sizeof *b.ids)));
        oj_tokens_free(&p);
    }
    if (flags & 8) {
        char dir[512];
        fz_path(dir, sizeof dir, "saved");
        oj_error e = {0};
        oj_status rc = oj_tokenizer_save(tok, dir, &e);
        if (rc != OJ_OK) {
            check_refusal(rc, &e);
            FZ_CHECK(rc == OJ_ERR_UNSUPPORTED || rc == OJ_ERR_IO);
        } else {
            oj_tokenizer *t2 = NULL;
            rc = oj_tokenizer_load(dir, &t2, &e);
            if (rc != OJ_OK) {
                fprintf(stderr, "saved tokenizer does not load back: %s\n", e.message);
                abort();
            }
            FZ_CHECK(oj_tokenizer_vocab_size(t2) == oj_tokenizer_vocab_size(tok));
            FZ_CHECK(oj_tokenizer_eot(t2) == oj_tokenizer_eot(tok));
            for (int k = 0; k < 2; k++) {
                oj_tokens *want = k ? &b : &a;
                if ((k ? rb : ra) != OJ_OK) continue;
                oj_tokens got = {0};
                FZ_CHECK(oj_tokenizer_encode(t2, k ? text : fixed_text,
                                             k ? tlen : sizeof fixed_text - 1, eflags, &got,
                                             &e) == OJ_OK);
                FZ_CHECK(got.len == want->len &&
                         (got.len == 0 || !memcmp(got.ids, want->ids, got.len * sizeof *got.ids)));
                oj_tokens_free(&got);
            }
            oj_tokenizer_free(t2);
        }
    }
    oj_tokens_free(&a);
    oj_tokens_free(&b);
}

static void loaded(oj_status rc, oj_tokenizer *tok, const oj_error *e, unsigned flags,
                   const char *text, size_t tlen) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "load: %d %s\n", (int)rc, rc ? e->message : "ok");
    if (rc != OJ_OK) {
        check_refusal(rc, e);
        FZ_CHECK(tok == NULL);
        FZ_CHECK(rc == OJ_ERR_CORRUPT || rc == OJ_ERR_IO || rc == OJ_ERR_UNSUPPORTED ||
                 rc == OJ_ERR_INVALID_ARGUMENT || rc == OJ_ERR_CAPACITY);
        return;
    }
    FZ_CHECK(tok);
    exercise(tok, flags, text, tlen);
    oj_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_INPUT) return 0;
    unsigned flags = data[0];
    const uint8_t *part[4];
    size_t len[4];
    fz_split(data + 1, size - 1, 4, part, len);
    if (len[3] > MAX_TEXT) len[3] = MAX_TEXT;
    char *text = malloc(len[3] + 1); /* exact size (+ NUL, not read by encode) */
    FZ_CHECK(text);
    if (len[3]) memcpy(text, part[3], len[3]);
    text[len[3]] = 0;

    char enc[512], bpe[512], tt[512], gdir[512], tdir[512];
    fz_mkdir("gpt2");
    fz_mkdir("tt");
    fz_write(fz_path(enc, sizeof enc, "gpt2/encoder.json"), part[0], len[0]);
    fz_write(fz_path(bpe, sizeof bpe, "gpt2/vocab.bpe"), part[1], len[1]);
    fz_write(fz_path(tt, sizeof tt, "tt/ranks.tiktoken"), part[2], len[2]);
    fz_path(gdir, sizeof gdir, "gpt2");
    fz_path(tdir, sizeof tdir, "tt");

    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    oj_status rc = flags & 1 ? oj_tokenizer_load(gdir, &tok, &e)
                             : oj_tokenizer_load_gpt2(enc, bpe, &tok, &e);
    loaded(rc, tok, &e, flags, text, len[3]);

    tok = NULL;
    memset(&e, 0, sizeof e);
    /* the directory loader identifies the ranks (GPT-2's only); the file
     * loader that is vouched for reaches the encoders with any ranks */
    rc = flags & 1 ? oj_tokenizer_load(tdir, &tok, &e)
                   : oj_tokenizer_load_tiktoken_as_gpt2(tt, &tok, &e);
    loaded(rc, tok, &e, flags, text, len[3]);
    free(text);
    return 0;
}
