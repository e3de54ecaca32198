/* Encoding: special tokens, pre-tokenisation, then per piece a whole-piece
 * vocabulary lookup, the session's piece cache, or byte_pair_merge. */
#include <stdlib.h>

#include "data/bpe.h"
#include "data/pretok.h"
#include "data/unicode.h"

#define OJ_CACHE_PIECE_MAX 64      /* longer pieces are merged every time */
#define OJ_CACHE_ENTRIES_MAX 200000 /* then the cache starts over */
#define OJ_SESSION_PIECES 4096

static inline oj_status push(oj_tokens *out, int32_t id) {
    if (out->len < out->cap) {
        out->ids[out->len++] = id;
        return OJ_OK;
    }
    return oj_tokens_push(out, id);
}

oj_status oj_bpe_encode_piece(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                              size_t len, oj_tokens *out) {
    if (len == 1)
        return push(out, tok->byte_id[b[0]]);
    uint64_t h = oj_strmap_hash(b, len);
    int64_t e = tok->merges_only ? -1 : oj_strmap_find(&tok->ranks, b, len, h);
    if (e >= 0)
        return push(out, (int32_t)tok->ranks.ents[e].value);
    if (len > OJ_CACHE_PIECE_MAX)
        return oj_bpe_merge(tok, s, b, len, INT32_MAX, out);
    e = oj_strmap_find(&s->cache, b, len, h);
    if (e >= 0) {
        int64_t v = s->cache.ents[e].value;
        size_t off = (size_t)(v >> 8), cnt = (size_t)(v & 0xFF);
        if (out->len + cnt > out->cap) {
            for (size_t k = 0; k < cnt; k++)
                if (oj_tokens_push(out, s->cache_ids[off + k]) != OJ_OK)
                    return OJ_ERR_CAPACITY;
            return OJ_OK;
        }
        memcpy(out->ids + out->len, s->cache_ids + off, cnt * sizeof(int32_t));
        out->len += cnt;
        return OJ_OK;
    }
    size_t before = out->len;
    oj_status st = oj_bpe_merge(tok, s, b, len, INT32_MAX, out);
    if (st)
        return st;
    size_t cnt = out->len - before;
    if (s->cache.n >= OJ_CACHE_ENTRIES_MAX) {
        oj_strmap_clear(&s->cache);
        s->cache_len = 0;
    }
    if (s->cache_len + cnt > s->cache_cap) {
        size_t cap = s->cache_cap ? s->cache_cap * 2 : 65536;
        int32_t *p = realloc(s->cache_ids, cap * sizeof *p);
        if (!p)
            return OJ_OK; /* no caching, still correct */
        s->cache_ids = p;
        s->cache_cap = cap;
    }
    bool added;
    if (oj_strmap_put(&s->cache, b, len, h, (int64_t)(s->cache_len << 8 | cnt), &added) >= 0 &&
        added) {
        memcpy(s->cache_ids + s->cache_len, out->ids + before, cnt * sizeof(int32_t));
        s->cache_len += cnt;
    }
    return OJ_OK;
}

/* Ordinary text (no special handling); `first`: it starts the whole text. */
static oj_status encode_ordinary(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                                 size_t n, bool first, oj_tokens *out, oj_error *err) {
    size_t pos = 0;
    if (tok->hf)
        return oj_hf_encode_ordinary(tok, s, b, n, first, out, err);
    if (tok->pretok == OJ_PRETOK_PCRE2 && !oj__utf8_valid(b, n, NULL))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_encode: the PCRE2 pre-tokeniser needs valid UTF-8");
    for (;;) {
        size_t start = pos, k;
        if (tok->pretok == OJ_PRETOK_PCRE2) {
            k = oj_pretok_pcre2_split(tok->re, s->md, b, n, &pos, s->ends, OJ_SESSION_PIECES);
            if (k == (size_t)-1)
                return oj_error_set(err, OJ_ERR_INTERNAL,
                                    "tokenizer_encode: PCRE2 match failed at byte %zu", pos);
        } else
            k = oj_pretok_split(b, n, &pos, s->ends, OJ_SESSION_PIECES);
        if (k == 0)
            return OJ_OK;
        for (size_t i = 0; i < k; i++) {
            oj_status st = oj_bpe_encode_piece(tok, s, b + start, s->ends[i] - start, out);
            if (st)
                return oj_error_set(err, st, "tokenizer_encode: out of memory");
            start = s->ends[i];
        }
    }
}

/* Earliest occurrence of any special in b[from..n) (longest at a tie);
 * returns its offset (n if none) and the special in *which. next[i], when
 * not NULL, caches special i's next occurrence at or after the last `from`
 * ((size_t)-1: unknown), so repeated calls with increasing `from` scan the
 * text once per special. */
static size_t find_special(const oj_tokenizer *tok, const uint8_t *b, size_t n, size_t from,
                           size_t *next, bool only_always, const oj_special **which) {
    size_t best = n;
    *which = NULL;
    for (int i = 0; i < tok->n_specials; i++) {
        const oj_special *sp = &tok->specials[i];
        size_t at;
        if (only_always && !sp->always)
            continue;
        if (next && next[i] != (size_t)-1 && next[i] >= from)
            at = next[i];
        else {
            const uint8_t *p = from < n ? memmem(b + from, n - from, sp->text, sp->len) : NULL;
            at = p ? (size_t)(p - b) : n;
            if (next)
                next[i] = at;
        }
        if (at < best || (at == best && at < n && sp->len > (*which)->len)) {
            best = at;
            *which = sp;
        }
    }
    return best;
}

static oj_status encode_with(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                             size_t n, unsigned flags, oj_tokens *out, oj_error *err) {
    bool any_always = false;
    for (int i = 0; i < tok->n_specials; i++)
        any_always |= tok->specials[i].always;
    if ((flags == OJ_ENCODE_SPECIAL_AS_TEXT && !any_always) || tok->n_specials == 0)
        return encode_ordinary(tok, s, b, n, true, out, err);
    const oj_special *sp;
    if (flags == OJ_ENCODE_REFUSE_SPECIAL) {
        /* (tokenizer.json added tokens that are not special are text) */
        size_t at = n;
        sp = NULL;
        for (int i = 0; i < tok->n_specials; i++) {
            const oj_special *c = &tok->specials[i];
            const uint8_t *p = c->always ? NULL : memmem(b, n, c->text, c->len);
            if (p && ((size_t)(p - b) < at || ((size_t)(p - b) == at && c->len > sp->len))) {
                at = (size_t)(p - b);
                sp = c;
            }
        }
        if (sp)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "tokenizer_encode: the text contains the special token %s at byte "
                                "%zu; allow it (OJ_ENCODE_ALLOW_SPECIAL) or encode it as text "
                                "(OJ_ENCODE_SPECIAL_AS_TEXT)",
                                sp->text, at);
        if (!any_always)
            return encode_ordinary(tok, s, b, n, true, out, err);
    }
    bool only_always = flags != OJ_ENCODE_ALLOW_SPECIAL;
    size_t stack_next[16], *next = stack_next, pos = 0;
    if (tok->n_specials > 16 && !(next = malloc((size_t)tok->n_specials * sizeof *next)))
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_encode: out of memory");
    for (int i = 0; i < tok->n_specials; i++)
        next[i] = (size_t)-1;
    oj_status st = OJ_OK;
    for (;;) {
        size_t at = find_special(tok, b, n, pos, next, only_always, &sp);
        if ((st = encode_ordinary(tok, s, b + pos, at - pos, pos == 0, out, err)) || !sp)
            break;
        if ((st = push(out, sp->id))) {
            oj_error_set(err, st, "tokenizer_encode: out of memory");
            break;
        }
        pos = at + sp->len;
    }
    if (next != stack_next)
        free(next);
    return st;
}

static oj_status check_args(const oj_tokenizer *tok, const char *text, size_t len, unsigned flags,
                            const void *out, const char *fn, oj_error *err) {
    if (!tok || !out || (!text && len))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "%s: NULL tokenizer, text or output", fn);
    if (flags > OJ_ENCODE_SPECIAL_AS_TEXT)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "%s: flags 0x%x: expected one of OJ_ENCODE_REFUSE_SPECIAL, "
                            "OJ_ENCODE_ALLOW_SPECIAL, OJ_ENCODE_SPECIAL_AS_TEXT",
                            fn, flags);
    return OJ_OK;
}

oj_status oj_tokenizer_encode(const oj_tokenizer *tok, const char *text, size_t len, unsigned flags,
                              oj_tokens *out, oj_error *err) {
    oj_status st = check_args(tok, text, len, flags, out, "tokenizer_encode", err);
    if (st)
        return st;
    oj_tok_session *s = oj_tok_session_get(tok);
    if (!s)
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_encode: out of memory");
    st = encode_with(tok, s, (const uint8_t *)text, len, flags, out, err);
    oj_tok_session_put(tok, s);
    return st;
}

/* ---------------------------------------------------------------- threads */

typedef struct batch_job {
    const oj_tokenizer *tok;
    size_t n;
    const char *const *texts;
    const size_t *lens;
    unsigned flags;
    oj_tokens *outs;
    size_t next; /* next text to take (atomic) */
    pthread_mutex_t mu;
    oj_status st;
    oj_error err;
} batch_job;

static void *batch_worker(void *arg) {
    batch_job *j = arg;
    oj_tok_session *s = oj_tok_session_get(j->tok);
    for (;;) {
        size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n)
            break;
        oj_error e = {0};
        oj_status st = s ? encode_with(j->tok, s, (const uint8_t *)j->texts[i], j->lens[i],
                                       j->flags, &j->outs[i], &e)
                         : oj_error_set(&e, OJ_ERR_CAPACITY, "tokenizer_encode: out of memory");
        if (st) {
            pthread_mutex_lock(&j->mu);
            if (!j->st) {
                j->st = st;
                j->err = e;
            }
            pthread_mutex_unlock(&j->mu);
            __atomic_store_n(&j->next, j->n, __ATOMIC_RELAXED);
            break;
        }
    }
    oj_tok_session_put(j->tok, s);
    return NULL;
}

oj_status oj_tokenizer_encode_batch(const oj_tokenizer *tok, size_t n, const char *const *texts,
                                    const size_t *lens, unsigned flags, int threads,
                                    oj_tokens *outs, oj_error *err) {
    if (!tok || (n && (!texts || !lens || !outs)))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_encode_batch: NULL tokenizer, texts, lens or outputs");
    for (size_t i = 0; i < n; i++) {
        oj_status st = check_args(tok, texts[i], lens[i], flags, &outs[i], "tokenizer_encode_batch",
                                  err);
        if (st)
            return st;
    }
    if (threads <= 0)
        threads = oj_data_cpu_count();
    if ((size_t)threads > n)
        threads = (int)(n ? n : 1);
    batch_job j = {.tok = tok, .n = n, .texts = texts, .lens = lens, .flags = flags, .outs = outs};
    pthread_mutex_init(&j.mu, NULL);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    int started = 0;
    if (th)
        for (int t = 1; t < threads; t++) {
            if (pthread_create(&th[t], NULL, batch_worker, &j) != 0)
                break;
            started = t;
        }
    batch_worker(&j);
    for (int t = 1; t <= started; t++)
        pthread_join(th[t], NULL);
    free(th);
    pthread_mutex_destroy(&j.mu);
    if (j.st)
        return oj_error_set(err, j.st, "%s", j.err.message);
    return OJ_OK;
}

oj_status oj_tokenizer_encode_parallel(const oj_tokenizer *tok, const char *text, size_t len,
                                       unsigned flags, int threads, oj_tokens *out,
                                       oj_error *err) {
    oj_status st = check_args(tok, text, len, flags, out, "tokenizer_encode_parallel", err);
    if (st)
        return st;
    if (threads <= 0)
        threads = oj_data_cpu_count();
    /* tokenizer.json: the file's regex, normalizer or whole-section pieces
     * give no safe cut points. */
    bool cuttable = !tok->hf;
    for (int i = 0; i < tok->n_specials; i++)
        if (memchr(tok->specials[i].text, '\n', tok->specials[i].len))
            cuttable = false;
    size_t chunk = len / ((size_t)threads * 8);
    if (chunk < (1u << 16))
        chunk = 1u << 16;
    if (threads == 1 || !cuttable || len < 2 * chunk)
        return oj_tokenizer_encode(tok, text, len, flags, out, err);
    if (flags == OJ_ENCODE_REFUSE_SPECIAL) {
        /* Check the whole text once, then encode the pieces as text. */
        const oj_special *sp;
        size_t at = find_special(tok, (const uint8_t *)text, len, 0, NULL, false, &sp);
        if (sp)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "tokenizer_encode: the text contains the special token %s at byte "
                                "%zu; allow it (OJ_ENCODE_ALLOW_SPECIAL) or encode it as text "
                                "(OJ_ENCODE_SPECIAL_AS_TEXT)",
                                sp->text, at);
        flags = OJ_ENCODE_SPECIAL_AS_TEXT;
    }
    /* Cut after a '\n' followed by a printable non-space ASCII byte: the
     * newline ends a whitespace piece (it is not U+0020, so it never joins
     * the next piece) and no piece runs across it. */
    size_t cap = len / chunk + 2, nc = 0;
    const char **texts = malloc(cap * sizeof *texts);
    size_t *lens = malloc(cap * sizeof *lens);
    oj_tokens *outs = calloc(cap, sizeof *outs);
    if (!texts || !lens || !outs) {
        free(texts);
        free(lens);
        free(outs);
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_encode_parallel: out of memory");
    }
    size_t start = 0;
    while (start < len) {
        size_t cut = len;
        if (len - start > chunk) {
            const char *p = text + start + chunk;
            const char *end = text + len;
            cut = len;
            while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                if (!nl || nl + 1 >= end)
                    break;
                unsigned char c = (unsigned char)nl[1];
                if (c > 0x20 && c < 0x7F) {
                    cut = (size_t)(nl + 1 - text);
                    break;
                }
                p = nl + 1;
            }
        }
        texts[nc] = text + start;
        lens[nc] = cut - start;
        nc++;
        start = cut;
    }
    st = oj_tokenizer_encode_batch(tok, nc, texts, lens, flags, threads, outs, err);
    size_t total = 0;
    for (size_t i = 0; i < nc; i++)
        total += outs[i].len;
    if (!st && out->len + total > out->cap) {
        int32_t *p = realloc(out->ids, (out->len + total) * sizeof *p);
        if (!p)
            st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_encode_parallel: out of memory");
        else {
            out->ids = p;
            out->cap = out->len + total;
        }
    }
    for (size_t i = 0; i < nc; i++) {
        if (!st) {
            memcpy(out->ids + out->len, outs[i].ids, outs[i].len * sizeof(int32_t));
            out->len += outs[i].len;
        }
        oj_tokens_free(&outs[i]);
    }
    free(texts);
    free(lens);
    free(outs);
    return st;
}
