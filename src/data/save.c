/* Saving a tokenizer as GPT-2 encoder.json + vocab.bpe and as a tiktoken
 * rank file. */
#include <stdlib.h>

#include "data/bpe.h"
#include "core/fs.h"
#include "data/unicode.h"

/* Write b[0..n) as a GPT-2 byte-to-unicode string, JSON-escaped if json. */
static void put_gpt2(FILE *f, const uint8_t *b, size_t n, bool json) {
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = oj_gpt2_byte_to_cp(b[i]);
        if (json && (cp == '"' || cp == '\\'))
            fputc('\\', f);
        uint8_t u[4];
        fwrite(u, 1, (size_t)oj__utf8_encode(cp, u), f);
    }
}

static void put_b64(FILE *f, const uint8_t *b, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16;
        if (i + 1 < n)
            w |= (uint32_t)b[i + 1] << 8;
        if (i + 2 < n)
            w |= b[i + 2];
        fputc(A[w >> 18], f);
        fputc(A[(w >> 12) & 63], f);
        fputc(i + 1 < n ? A[(w >> 6) & 63] : '=', f);
        fputc(i + 2 < n ? A[w & 63] : '=', f);
    }
}

/* Merges in id order: the stored ones, or recovered by merging each
 * token's bytes with only lower ranks allowed (it must end in two parts). */
static oj_status get_merges(const oj_tokenizer *tok, int32_t (**out)[2], int64_t *n, oj_error *err) {
    if (tok->merges) {
        *out = tok->merges;
        *n = tok->n_merges;
        return OJ_OK;
    }
    int32_t(*m)[2] = malloc((size_t)tok->n_ids * sizeof *m);
    oj_tok_session *s = oj_tok_session_get(tok);
    oj_tokens parts = {0};
    oj_status st = OJ_OK;
    int64_t k = 0;
    if (!m || !s) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_save: out of memory");
        goto done;
    }
    for (int32_t id = 0; id < tok->n_ids; id++) {
        if (!tok->tok_len[id] || tok->is_special[id] || tok->tok_len[id] < 2)
            continue;
        parts.len = 0;
        if ((st = oj_bpe_merge(tok, s, tok->bytes + tok->tok_off[id], tok->tok_len[id], id, &parts))) {
            oj_error_set(err, st, "tokenizer_save: out of memory");
            goto done;
        }
        if (parts.len != 2) {
            st = oj_error_set(err, OJ_ERR_UNSUPPORTED,
                              "tokenizer_save: token %d cannot be written as a merge of two "
                              "lower-ranked tokens (it merges into %zu parts)",
                              (int)id, parts.len);
            goto done;
        }
        m[k][0] = parts.ids[0];
        m[k][1] = parts.ids[1];
        k++;
    }
done:
    oj_tokens_free(&parts);
    oj_tok_session_put(tok, s);
    if (st) {
        free(m);
        return st;
    }
    *out = m;
    *n = k;
    return OJ_OK;
}

oj_status oj_tokenizer_save(const oj_tokenizer *tok, const char *dir, oj_error *err) {
    if (!tok || !dir)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_save: NULL argument");
    if (tok->hf)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "tokenizer_save: a tokenizer loaded from tokenizer.json is kept as "
                            "that file (GPT-2 files cannot hold its pre-tokenizer and merges)");
    if (tok->encoding)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "tokenizer_save: a %s tokenizer is kept as its rank file (GPT-2 "
                            "files cannot hold its pre-tokenisation pattern and special tokens)",
                            tok->encoding);
    oj_status st = oj__mkdirs(dir, err);
    if (st)
        return st;
    int32_t(*merges)[2];
    int64_t nm;
    if ((st = get_merges(tok, &merges, &nm, err)))
        return st;
    size_t dl = strlen(dir) + 32;
    char *path = malloc(dl);
    oj__atomic_file af;
    if (!path) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_save: out of memory");
        goto done;
    }
    /* encoder.json, in id order */
    snprintf(path, dl, "%s/encoder.json", dir);
    if ((st = oj__atomic_open(&af, path, err)))
        goto done;
    fputc('{', af.f);
    bool first = true;
    for (int32_t id = 0; id < tok->n_ids; id++) {
        if (!tok->tok_len[id])
            continue;
        fputs(first ? "\"" : ", \"", af.f);
        put_gpt2(af.f, tok->bytes + tok->tok_off[id], tok->tok_len[id], true);
        fprintf(af.f, "\": %d", (int)id);
        first = false;
    }
    fputs("}", af.f);
    if ((st = oj__atomic_commit(&af, err)))
        goto done;
    /* vocab.bpe */
    snprintf(path, dl, "%s/vocab.bpe", dir);
    if ((st = oj__atomic_open(&af, path, err)))
        goto done;
    fputs("#version: 0.2\n", af.f);
    for (int64_t i = 0; i < nm; i++) {
        for (int k = 0; k < 2; k++) {
            int32_t id = merges[i][k];
            put_gpt2(af.f, tok->bytes + tok->tok_off[id], tok->tok_len[id], false);
            fputc(k ? '\n' : ' ', af.f);
        }
    }
    if ((st = oj__atomic_commit(&af, err)))
        goto done;
    /* ranks.tiktoken (mergeable tokens only, as tiktoken's format has it) */
    snprintf(path, dl, "%s/ranks.tiktoken", dir);
    if ((st = oj__atomic_open(&af, path, err)))
        goto done;
    for (int32_t id = 0; id < tok->n_ids; id++) {
        if (!tok->tok_len[id] || tok->is_special[id])
            continue;
        put_b64(af.f, tok->bytes + tok->tok_off[id], tok->tok_len[id]);
        fprintf(af.f, " %d\n", (int)id);
    }
    st = oj__atomic_commit(&af, err);
done:
    free(path);
    if (merges != tok->merges)
        free(merges);
    return st;
}
