/* Decoding: concatenate token bytes, then keep them raw, check them (strict)
 * or replace each maximal invalid UTF-8 subpart with U+FFFD (lossy, the
 * WHATWG TextDecoder rule that js-tiktoken's decode follows). */
#include <stdlib.h>

#include "data/bpe.h"
#include "data/unicode.h"

oj_status oj_tokenizer_decode(const oj_tokenizer *tok, const int32_t *ids, size_t n,
                              unsigned flags, char **text, size_t *len, oj_error *err) {
    if (text)
        *text = NULL;
    if (len)
        *len = 0;
    if (!tok || !text || (n && !ids))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_decode: NULL tokenizer, ids or output");
    if (flags > OJ_DECODE_BYTES)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_decode: flags 0x%x: expected OJ_DECODE_LOSSY, "
                            "OJ_DECODE_STRICT or OJ_DECODE_BYTES",
                            flags);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->n_ids || tok->tok_len[id] == 0)
            return oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                                "tokenizer_decode: id %d at position %zu is not in the vocabulary "
                                "(size %d)",
                                (int)id, i, (int)tok->n_ids);
        total += tok->tok_len[id];
    }
    uint8_t *raw = malloc(total + 1);
    if (!raw)
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_decode: out of memory (%zu bytes)",
                            total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(raw + o, tok->bytes + tok->tok_off[ids[i]], tok->tok_len[ids[i]]);
        o += tok->tok_len[ids[i]];
    }
    raw[o] = 0;
    if (tok->strip_space && total && raw[0] == ' ') { /* tokenizer.json Strip decoder */
        memmove(raw, raw + 1, total);
        total--;
    }
    size_t bad = 0, i = 0, first_bad = total;
    if (flags != OJ_DECODE_BYTES)
        while (i < total) {
            uint32_t cp;
            int l = raw[i] < 0x80 ? 1 : oj__utf8_decode(raw + i, total - i, &cp);
            if (l) {
                i += (size_t)l;
                continue;
            }
            if (!bad)
                first_bad = i;
            bad++;
            i += oj__utf8_invalid_len(raw + i, total - i);
        }
    if (!bad) {
        *text = (char *)raw;
        if (len)
            *len = total;
        return OJ_OK;
    }
    if (flags == OJ_DECODE_STRICT) {
        unsigned byte = raw[first_bad];
        free(raw);
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "tokenizer_decode: the ids decode to invalid UTF-8 at byte %zu "
                            "(byte 0x%02x)",
                            first_bad, byte);
    }
    /* Each invalid subpart (>= 1 byte) becomes 3 bytes EF BF BD. */
    uint8_t *fixed = malloc(total + 2 * bad + 1);
    if (!fixed) {
        free(raw);
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_decode: out of memory");
    }
    size_t w = 0;
    i = 0;
    while (i < total) {
        uint32_t cp;
        int l = raw[i] < 0x80 ? 1 : oj__utf8_decode(raw + i, total - i, &cp);
        if (l) {
            memcpy(fixed + w, raw + i, (size_t)l);
            w += (size_t)l;
            i += (size_t)l;
            continue;
        }
        fixed[w++] = 0xEF;
        fixed[w++] = 0xBF;
        fixed[w++] = 0xBD;
        i += oj__utf8_invalid_len(raw + i, total - i);
    }
    fixed[w] = 0;
    free(raw);
    *text = (char *)fixed;
    if (len)
        *len = w;
    return OJ_OK;
}
