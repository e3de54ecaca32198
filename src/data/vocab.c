/* The tokenizer object: building it from (bytes, id) pairs, the pair table
 * used by merging, specials, accessors, and the pool of encode sessions. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/bpe.h"
#include "data/pretok.h"
#include "data/unicode.h"

oj_status oj_tokens_push(oj_tokens *t, int32_t id) {
    if (t->len == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        int32_t *p = realloc(t->ids, cap * sizeof *p);
        if (!p)
            return OJ_ERR_CAPACITY;
        t->ids = p;
        t->cap = cap;
    }
    t->ids[t->len++] = id;
    return OJ_OK;
}

void oj_tokens_free(oj_tokens *t) {
    if (!t)
        return;
    free(t->ids);
    memset(t, 0, sizeof *t);
}

int oj_data_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

oj_tokenizer *oj_bpe_new(void) {
    oj_uc_init();
    oj_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return NULL;
    tok->pool = calloc(1, sizeof *tok->pool);
    if (!tok->pool || oj_strmap_init(&tok->ranks, 1024) != 0) {
        free(tok->pool);
        free(tok);
        return NULL;
    }
    pthread_mutex_init(&tok->pool->mu, NULL);
    tok->eot = -1;
    for (int b = 0; b < 256; b++)
        tok->byte_id[b] = -1;
    return tok;
}

oj_status oj_bpe_put_id(oj_tokenizer *tok, const uint8_t *b, size_t len, int32_t id, bool special,
                        oj_error *err) {
    if (id < 0 || id == INT32_MAX)
        return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: id %d out of range", (int)id);
    if (len == 0 || len > UINT32_MAX / 2)
        return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: token %d has length %zu", (int)id, len);
    if ((size_t)id >= tok->ids_cap) {
        size_t cap = tok->ids_cap ? tok->ids_cap : 1024;
        while (cap <= (size_t)id)
            cap *= 2;
        uint32_t *off = realloc(tok->tok_off, cap * sizeof *off);
        if (off)
            tok->tok_off = off;
        uint32_t *ln = realloc(tok->tok_len, cap * sizeof *ln);
        if (ln)
            tok->tok_len = ln;
        uint8_t *sp = realloc(tok->is_special, cap);
        if (sp)
            tok->is_special = sp;
        if (!off || !ln || !sp)
            return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
        memset(tok->tok_len + tok->ids_cap, 0, (cap - tok->ids_cap) * sizeof *ln);
        memset(tok->is_special + tok->ids_cap, 0, cap - tok->ids_cap);
        tok->ids_cap = cap;
    }
    if (tok->tok_len[id])
        return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: id %d appears twice", (int)id);
    if (tok->bytes_len + len > UINT32_MAX)
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: token bytes exceed 4 GiB");
    if (tok->bytes_len + len > tok->bytes_cap) {
        size_t cap = tok->bytes_cap ? tok->bytes_cap : 4096;
        while (cap < tok->bytes_len + len)
            cap *= 2;
        uint8_t *p = realloc(tok->bytes, cap);
        if (!p)
            return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
        tok->bytes = p;
        tok->bytes_cap = cap;
    }
    memcpy(tok->bytes + tok->bytes_len, b, len);
    tok->tok_off[id] = (uint32_t)tok->bytes_len;
    tok->tok_len[id] = (uint32_t)len;
    tok->is_special[id] = special;
    tok->bytes_len += len;
    if (id >= tok->n_ids)
        tok->n_ids = id + 1;
    return OJ_OK;
}

oj_status oj_bpe_add_token(oj_tokenizer *tok, const uint8_t *b, size_t len, int32_t id,
                           oj_error *err) {
    bool added;
    uint64_t h = oj_strmap_hash(b, len);
    if (oj_strmap_find(&tok->ranks, b, len, h) >= 0)
        return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: token bytes of id %d appear twice",
                            (int)id);
    oj_status st = oj_bpe_put_id(tok, b, len, id, false, err);
    if (st)
        return st;
    if (oj_strmap_put(&tok->ranks, b, len, h, id, &added) < 0)
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
    if (len == 1)
        tok->byte_id[b[0]] = id;
    return OJ_OK;
}

oj_status oj_bpe_add_special(oj_tokenizer *tok, const uint8_t *b, size_t len, int32_t id,
                             oj_error *err) {
    for (int i = 0; i < tok->n_specials; i++)
        if (tok->specials[i].len == len && memcmp(tok->specials[i].text, b, len) == 0)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "tokenizer: special token \"%.*s\" is already defined",
                                (int)(len > 64 ? 64 : len), (const char *)b);
    oj_special *sp = realloc(tok->specials, (size_t)(tok->n_specials + 1) * sizeof *sp);
    if (!sp)
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
    tok->specials = sp;
    char *text = malloc(len + 1);
    if (!text)
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
    memcpy(text, b, len);
    text[len] = 0;
    oj_status st = oj_bpe_put_id(tok, b, len, id, true, err);
    if (st) {
        free(text);
        return st;
    }
    sp[tok->n_specials++] = (oj_special){text, len, id, false};
    if (len == 13 && memcmp(b, "<|endoftext|>", 13) == 0)
        tok->eot = id;
    return OJ_OK;
}

oj_status oj_bpe_finish(oj_tokenizer *tok, oj_error *err) {
    for (int b = 0; b < 256; b++)
        if (tok->byte_id[b] < 0)
            return oj_error_set(err, OJ_ERR_CORRUPT,
                                "tokenizer: byte 0x%02x has no token (byte-level BPE needs all 256)",
                                b);
    /* (left, right) -> id for every split of every token into two tokens:
     * merging by pair is then the same as tiktoken's "rank of the
     * concatenated bytes". */
    if (oj_pairmap_init(&tok->pairs, (size_t)tok->ranks.n * 4) != 0)
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
    for (size_t e = 0; e < tok->ranks.n; e++) {
        const oj_strmap_ent *en = &tok->ranks.ents[e];
        const uint8_t *b = tok->ranks.keys + en->off;
        for (uint32_t k = 1; k < en->len; k++) {
            int32_t l = oj_bpe_rank(tok, b, k), r = oj_bpe_rank(tok, b + k, en->len - k);
            if (l >= 0 && r >= 0 && oj_pairmap_set(&tok->pairs, l, r, (int32_t)en->value) != 0)
                return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
        }
    }
    return OJ_OK;
}

static void session_free(oj_tok_session *s) {
    oj_strmap_free(&s->cache);
    free(s->cache_ids);
    free(s->ends);
    free(s->part_id);
    free(s->part_rank);
    free(s->part_next);
    free(s->part_prev);
    free(s->heap);
    if (s->md)
        oj_pretok_pcre2_match_data_free(s->md);
    free(s);
}

void oj_tokenizer_free(oj_tokenizer *tok) {
    if (!tok)
        return;
    if (tok->pool) {
        oj_tok_session *s = tok->pool->free;
        while (s) {
            oj_tok_session *n = s->next;
            session_free(s);
            s = n;
        }
        pthread_mutex_destroy(&tok->pool->mu);
        free(tok->pool);
    }
    for (int i = 0; i < tok->n_specials; i++)
        free(tok->specials[i].text);
    free(tok->specials);
    free(tok->tok_off);
    free(tok->tok_len);
    free(tok->is_special);
    free(tok->bytes);
    free(tok->merges);
    free(tok->merge_id);
    free(tok->tmpl_ids);
    free(tok->eos_note);
    oj_hf_free(tok->hfx);
    oj_strmap_free(&tok->ranks);
    oj_pairmap_free(&tok->pairs);
    oj_pretok_pcre2_free(tok->re);
    free(tok);
}

#define OJ_SESSION_PIECES 4096

oj_tok_session *oj_tok_session_get(const oj_tokenizer *tok) {
    pthread_mutex_lock(&tok->pool->mu);
    oj_tok_session *s = tok->pool->free;
    if (s)
        tok->pool->free = s->next;
    pthread_mutex_unlock(&tok->pool->mu);
    if (s)
        return s;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ends = malloc(OJ_SESSION_PIECES * sizeof *s->ends);
    if (!s->ends || oj_strmap_init(&s->cache, 4096) != 0 || oj_tok_session_reserve(s, 64) != 0 ||
        (tok->re && !(s->md = oj_pretok_pcre2_match_data(tok->re)))) {
        session_free(s);
        return NULL;
    }
    return s;
}

void oj_tok_session_put(const oj_tokenizer *tok, oj_tok_session *s) {
    if (!s)
        return;
    pthread_mutex_lock(&tok->pool->mu);
    s->next = tok->pool->free;
    tok->pool->free = s;
    pthread_mutex_unlock(&tok->pool->mu);
}

int oj_tok_session_reserve(oj_tok_session *s, size_t n) {
    if (n <= s->scratch_cap)
        return 0;
    size_t cap = s->scratch_cap ? s->scratch_cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *a = realloc(s->part_id, cap * sizeof *a);
    if (a)
        s->part_id = a;
    int32_t *b = realloc(s->part_rank, cap * sizeof *b);
    if (b)
        s->part_rank = b;
    int32_t *c = realloc(s->part_next, cap * sizeof *c);
    if (c)
        s->part_next = c;
    int32_t *d = realloc(s->part_prev, cap * sizeof *d);
    if (d)
        s->part_prev = d;
    uint64_t *h = realloc(s->heap, cap * 3 * sizeof *h);
    if (h)
        s->heap = h;
    if (!a || !b || !c || !d || !h)
        return -1;
    s->scratch_cap = cap;
    return 0;
}

int32_t oj_tokenizer_vocab_size(const oj_tokenizer *tok) { return tok ? tok->n_ids : 0; }

int32_t oj_tokenizer_eot(const oj_tokenizer *tok) { return tok ? tok->eot : -1; }

int32_t oj_tokenizer_special_id(const oj_tokenizer *tok, const char *text) {
    if (!tok || !text)
        return -1;
    size_t len = strlen(text);
    for (int i = 0; i < tok->n_specials; i++)
        if (tok->specials[i].len == len && memcmp(tok->specials[i].text, text, len) == 0)
            return tok->specials[i].id;
    return -1;
}

const uint8_t *oj_tokenizer_token_bytes(const oj_tokenizer *tok, int32_t id, size_t *len) {
    if (!tok || id < 0 || id >= tok->n_ids || tok->tok_len[id] == 0) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = tok->tok_len[id];
    return tok->bytes + tok->tok_off[id];
}

oj_status oj_tokenizer_add_special(oj_tokenizer *tok, const char *text, int32_t id, oj_error *err) {
    if (!tok || !text || !*text)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_add_special: NULL tokenizer or empty text");
    if (id < 0 || id == INT32_MAX || (id < tok->n_ids && tok->tok_len[id]))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_add_special: id %d is taken or out of range", (int)id);
    return oj_bpe_add_special(tok, (const uint8_t *)text, strlen(text), id, err);
}

oj_status oj_tokenizer_set_pretokenizer(oj_tokenizer *tok, oj_pretokenizer p, oj_error *err) {
    if (!tok || (p != OJ_PRETOK_FAST && p != OJ_PRETOK_PCRE2))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_set_pretokenizer: NULL tokenizer or unknown mode %d", (int)p);
    if (tok->hf && tok->hf_split != OJ_SPLIT_GPT2)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "tokenizer_set_pretokenizer: this tokenizer.json tokenizer splits "
                            "text with its own pre-tokenizer, not the GPT-2 pattern");
    if (tok->encoding && p != OJ_PRETOK_PCRE2)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "tokenizer_set_pretokenizer: this %s tokenizer splits text with its "
                            "own pattern through PCRE2, not the GPT-2 scanner",
                            tok->encoding);
    if (p == OJ_PRETOK_PCRE2 && !tok->re) {
        char msg[256];
        tok->re = oj_pretok_pcre2_compile(msg, sizeof msg);
        if (!tok->re)
            return oj_error_set(err, OJ_ERR_INTERNAL, "tokenizer: GPT-2 pattern: %s", msg);
        /* Sessions made before have no match data: drop them. */
        pthread_mutex_lock(&tok->pool->mu);
        oj_tok_session *s = tok->pool->free;
        tok->pool->free = NULL;
        pthread_mutex_unlock(&tok->pool->mu);
        while (s) {
            oj_tok_session *n = s->next;
            session_free(s);
            s = n;
        }
    }
    tok->pretok = p;
    return OJ_OK;
}
