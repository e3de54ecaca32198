/* BPE training (Sennrich et al. 2016, byte-level as GPT-2): count the
 * pre-tokenised pieces ("words"), then repeatedly merge the most frequent
 * adjacent pair of symbols. Pair counts are updated incrementally: each pair
 * keeps the list of words it occurs in, so a merge touches only those words,
 * and a max-heap with lazy deletion yields the next pair. */
#include <stdlib.h>

#include "data/bpe.h"
#include "data/pretok.h"

oj_bpe_train_config oj_bpe_train_config_default(void) {
    return (oj_bpe_train_config){.vocab_size = 50257, .threads = 0, .specials = NULL,
                                 .n_specials = 0, .min_frequency = 2};
}

/* ---------------------------------------------------------------- counting */

typedef struct seg {
    const uint8_t *p;
    size_t n;
} seg;

typedef struct count_job {
    const seg *segs;
    size_t nsegs, next;
    oj_strmap *maps; /* one per thread */
    int failed;
} count_job;

typedef struct count_arg {
    count_job *job;
    int t;
} count_arg;

static void *count_worker(void *arg) {
    count_arg *a = arg;
    count_job *j = a->job;
    oj_strmap *m = &j->maps[a->t];
    size_t ends[1024];
    for (;;) {
        size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->nsegs)
            break;
        const uint8_t *p = j->segs[i].p;
        size_t n = j->segs[i].n, pos = 0, k;
        for (;;) {
            size_t from = pos;
            if (!(k = oj_pretok_split(p, n, &pos, ends, 1024)))
                break;
            for (size_t q = 0; q < k; q++) {
                size_t len = ends[q] - from;
                bool added;
                int64_t e = oj_strmap_put(m, p + from, len, oj_strmap_hash(p + from, len), 0, &added);
                if (e < 0) {
                    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
                    return NULL;
                }
                m->ents[e].value++;
                from = ends[q];
            }
        }
    }
    return NULL;
}

/* Cut texts at special strings and, for parallel counting, after '\n'
 * followed by a printable non-space ASCII byte (a piece boundary). */
static int make_segments(const char *const *specials, int nsp,
                         size_t n, const char *const *texts, const size_t *lens, seg **out,
                         size_t *nout) {
    size_t cap = 64, ns = 0;
    seg *s = malloc(cap * sizeof *s);
    if (!s)
        return -1;
    const size_t chunk = 1 << 18;
    for (size_t t = 0; t < n; t++) {
        const uint8_t *p = (const uint8_t *)texts[t], *end = p + lens[t];
        while (p < end) {
            /* next special */
            const uint8_t *sp = end;
            size_t splen = 0;
            for (int k = 0; k < nsp; k++) {
                size_t l = strlen(specials[k]);
                const uint8_t *q = memmem(p, (size_t)(end - p), specials[k], l);
                if (q && (q < sp || (q == sp && l > splen))) {
                    sp = q;
                    splen = l;
                }
            }
            /* [p, sp) in chunks */
            while (p < sp) {
                const uint8_t *cut = sp;
                if ((size_t)(sp - p) > chunk) {
                    const uint8_t *q = p + chunk;
                    while (q < sp) {
                        const uint8_t *nl = memchr(q, '\n', (size_t)(sp - q));
                        if (!nl || nl + 1 >= sp)
                            break;
                        if (nl[1] > 0x20 && nl[1] < 0x7F) {
                            cut = nl + 1;
                            break;
                        }
                        q = nl + 1;
                    }
                }
                if (ns == cap) {
                    cap *= 2;
                    seg *g = realloc(s, cap * sizeof *g);
                    if (!g) {
                        free(s);
                        return -1;
                    }
                    s = g;
                }
                s[ns++] = (seg){p, (size_t)(cut - p)};
                p = cut;
            }
            p = sp + splen;
        }
    }
    *out = s;
    *nout = ns;
    return 0;
}

/* ---------------------------------------------------------------- merging */

typedef struct pair_info {
    int32_t a, b;
    int64_t count;
    int32_t *occ; /* words holding the pair (may repeat, may be stale) */
    int32_t nocc, capocc;
    int64_t stamp; /* last merge step that queued it for the heap */
} pair_info;

typedef struct trainer {
    /* words */
    int32_t nwords;
    int64_t *wcount;
    int64_t *woff;   /* symbols at sym[woff[w] .. woff[w] + wlen[w]) */
    int32_t *wlen;
    int32_t *sym;
    int64_t *wstamp; /* last merge step that rewrote the word */
    /* pairs */
    oj_pairmap index; /* (a, b) -> pair_info index */
    pair_info *pairs;
    int32_t npairs, cappairs;
    /* heap of (count, a, b), max count first, then smallest (a, b) */
    struct hent {
        int64_t count;
        int32_t a, b;
    } *heap;
    size_t nheap, capheap;
    int32_t *changed; /* pairs touched by the current step */
    int32_t nchanged, capchanged;
} trainer;

static bool hent_before(const struct hent *x, const struct hent *y) {
    if (x->count != y->count)
        return x->count > y->count;
    if (x->a != y->a)
        return x->a < y->a;
    return x->b < y->b;
}

static int heap_push(trainer *t, int64_t count, int32_t a, int32_t b) {
    if (t->nheap == t->capheap) {
        size_t cap = t->capheap ? t->capheap * 2 : 4096;
        struct hent *h = realloc(t->heap, cap * sizeof *h);
        if (!h)
            return -1;
        t->heap = h;
        t->capheap = cap;
    }
    struct hent v = {count, a, b};
    size_t i = t->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hent_before(&v, &t->heap[p]))
            break;
        t->heap[i] = t->heap[p];
        i = p;
    }
    t->heap[i] = v;
    return 0;
}

static struct hent heap_pop(trainer *t) {
    struct hent top = t->heap[0], v = t->heap[--t->nheap];
    size_t i = 0, n = t->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hent_before(&t->heap[c + 1], &t->heap[c]))
            c++;
        if (!hent_before(&t->heap[c], &v))
            break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n)
        t->heap[i] = v;
    return top;
}

/* Add delta to pair (a, b) of word w; record w when the pair gains. */
static int pair_add(trainer *t, int32_t a, int32_t b, int64_t delta, int32_t w, int64_t step) {
    int32_t idx = oj_pairmap_get(&t->index, a, b);
    if (idx < 0) {
        if (t->npairs == t->cappairs) {
            int32_t cap = t->cappairs ? t->cappairs * 2 : 4096;
            pair_info *p = realloc(t->pairs, (size_t)cap * sizeof *p);
            if (!p)
                return -1;
            t->pairs = p;
            t->cappairs = cap;
        }
        idx = t->npairs++;
        t->pairs[idx] = (pair_info){.a = a, .b = b, .stamp = -1};
        if (oj_pairmap_set(&t->index, a, b, idx) != 0)
            return -1;
    }
    pair_info *p = &t->pairs[idx];
    p->count += delta;
    if (delta > 0 && (p->nocc == 0 || p->occ[p->nocc - 1] != w)) {
        if (p->nocc == p->capocc) {
            int32_t cap = p->capocc ? p->capocc * 2 : 4;
            int32_t *o = realloc(p->occ, (size_t)cap * sizeof *o);
            if (!o)
                return -1;
            p->occ = o;
            p->capocc = cap;
        }
        p->occ[p->nocc++] = w;
    }
    if (p->stamp != step) {
        p->stamp = step;
        if (t->nchanged == t->capchanged) {
            int32_t cap = t->capchanged ? t->capchanged * 2 : 1024;
            int32_t *c = realloc(t->changed, (size_t)cap * sizeof *c);
            if (!c)
                return -1;
            t->changed = c;
            t->capchanged = cap;
        }
        t->changed[t->nchanged++] = idx;
    }
    return 0;
}

/* Replace every (a, b) in word w by c, updating the neighbouring pairs. */
static int merge_word(trainer *t, int32_t w, int32_t a, int32_t b, int32_t c, int64_t step) {
    int32_t *s = t->sym + t->woff[w];
    int32_t n = t->wlen[w], o = 0;
    int64_t cnt = t->wcount[w];
    for (int32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            /* the output so far is s[0..o); s[o-1] is the left neighbour */
            if (o > 0 && (pair_add(t, s[o - 1], a, -cnt, w, step) ||
                          pair_add(t, s[o - 1], c, cnt, w, step)))
                return -1;
            if (i + 2 < n && (pair_add(t, b, s[i + 2], -cnt, w, step) ||
                              pair_add(t, c, s[i + 2], cnt, w, step)))
                return -1;
            if (pair_add(t, a, b, -cnt, w, step))
                return -1;
            s[o++] = c;
            i += 2;
        } else
            s[o++] = s[i++];
    }
    t->wlen[w] = o;
    return 0;
}

static void trainer_free(trainer *t) {
    free(t->wcount);
    free(t->woff);
    free(t->wlen);
    free(t->sym);
    free(t->wstamp);
    oj_pairmap_free(&t->index);
    for (int32_t i = 0; i < t->npairs; i++)
        free(t->pairs[i].occ);
    free(t->pairs);
    free(t->heap);
    free(t->changed);
}

/* Sort words by bytes so the result never depends on hash or thread order. */
static int cmp_words(const void *x, const void *y, void *ctx) {
    const oj_strmap *m = ctx;
    const oj_strmap_ent *a = &m->ents[*(const int32_t *)x];
    const oj_strmap_ent *b = &m->ents[*(const int32_t *)y];
    size_t l = a->len < b->len ? a->len : b->len;
    int c = memcmp(m->keys + a->off, m->keys + b->off, l);
    if (c)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

oj_status oj_bpe_train(const oj_bpe_train_config *cfg_in, size_t n, const char *const *texts,
                       const size_t *lens, oj_tokenizer **out, oj_error *err) {
    if (!out || (n && (!texts || !lens)))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "bpe_train: NULL argument");
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (!texts[i] && lens[i])
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "bpe_train: text %zu is NULL with length %zu", i, lens[i]);
    oj_bpe_train_config cfg = cfg_in ? *cfg_in : oj_bpe_train_config_default();
    static const char *const default_specials[] = {"<|endoftext|>"};
    const char *const *specials = cfg.specials ? cfg.specials : default_specials;
    int nsp = cfg.specials ? cfg.n_specials : 1;
    if (nsp < 0 || cfg.vocab_size < 256 + nsp || cfg.min_frequency < 1)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "bpe_train: vocab_size %d must be >= 256 + %d specials and "
                            "min_frequency %lld >= 1",
                            (int)cfg.vocab_size, nsp, (long long)cfg.min_frequency);
    for (int k = 0; k < nsp; k++)
        if (!specials[k] || !*specials[k])
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "bpe_train: special %d is empty", k);
    int threads = cfg.threads > 0 ? cfg.threads : oj_data_cpu_count();

    oj_status st = OJ_OK;
    seg *segs = NULL;
    size_t nsegs = 0;
    oj_strmap *maps = NULL, words = {0};
    int32_t *order = NULL;
    trainer t = {0};
    oj_tokenizer *tok = oj_bpe_new();
    oj_strmap toks = {0}; /* token bytes -> id, to spot merges into existing tokens */
    uint8_t *buf = NULL;
    if (!tok || make_segments(specials, nsp, n, texts, lens, &segs, &nsegs) != 0 ||
        !(maps = calloc((size_t)threads, sizeof *maps)) || oj_strmap_init(&words, 1 << 16) ||
        oj_strmap_init(&toks, cfg.vocab_size < (1 << 16) ? (size_t)cfg.vocab_size : 1 << 16)) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
        goto done;
    }
    /* 1. count pieces, one map per thread, merged in thread order */
    count_job job = {.segs = segs, .nsegs = nsegs, .maps = maps};
    count_arg *args = calloc((size_t)threads, sizeof *args);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    int started = 0;
    for (int k = 0; k < threads; k++)
        if (oj_strmap_init(&maps[k], 1 << 14) != 0)
            job.failed = 1;
    if (!args || !th)
        job.failed = 1;
    if (!job.failed) {
        for (int k = 0; k < threads; k++)
            args[k] = (count_arg){&job, k};
        for (int k = 1; k < threads; k++) {
            if (pthread_create(&th[k], NULL, count_worker, &args[k]) != 0)
                break;
            started = k;
        }
        count_worker(&args[0]);
        for (int k = 1; k <= started; k++)
            pthread_join(th[k], NULL);
    }
    free(args);
    free(th);
    for (int k = 0; k < threads && !job.failed; k++)
        for (size_t e = 0; e < maps[k].n; e++) {
            const oj_strmap_ent *en = &maps[k].ents[e];
            const uint8_t *key = maps[k].keys + en->off;
            bool added;
            int64_t w = oj_strmap_put(&words, key, en->len, oj_strmap_hash(key, en->len), 0, &added);
            if (w < 0) {
                job.failed = 1;
                break;
            }
            words.ents[w].value += en->value;
        }
    if (job.failed || words.n > INT32_MAX) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory counting pieces");
        goto done;
    }
    /* 2. words in byte order, as symbol sequences of byte ids */
    t.nwords = (int32_t)words.n;
    order = malloc(words.n * sizeof *order + 1);
    t.wcount = malloc(words.n * sizeof *t.wcount + 1);
    t.woff = malloc(words.n * sizeof *t.woff + 1);
    t.wlen = malloc(words.n * sizeof *t.wlen + 1);
    t.wstamp = malloc(words.n * sizeof *t.wstamp + 1);
    t.sym = malloc(words.keys_len * sizeof *t.sym + 1);
    if (!order || !t.wcount || !t.woff || !t.wlen || !t.wstamp || !t.sym ||
        oj_pairmap_init(&t.index, words.n * 4)) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
        goto done;
    }
    for (int32_t w = 0; w < t.nwords; w++)
        order[w] = w;
    qsort_r(order, words.n, sizeof *order, cmp_words, &words);
    int32_t byte_id[256];
    for (int b = 0; b < 256; b++) {
        byte_id[b] = oj_gpt2_byte_rank((uint8_t)b);
        uint8_t c = (uint8_t)b;
        bool added;
        if ((st = oj_bpe_add_token(tok, &c, 1, byte_id[b], err)) ||
            oj_strmap_put(&toks, &c, 1, oj_strmap_hash(&c, 1), byte_id[b], &added) < 0) {
            st = st ? st : oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
            goto done;
        }
    }
    int64_t so = 0;
    for (int32_t w = 0; w < t.nwords; w++) {
        const oj_strmap_ent *en = &words.ents[order[w]];
        t.wcount[w] = en->value;
        t.woff[w] = so;
        t.wlen[w] = (int32_t)en->len;
        t.wstamp[w] = -1;
        for (uint32_t i = 0; i < en->len; i++)
            t.sym[so + i] = byte_id[words.keys[en->off + i]];
        so += en->len;
    }
    for (int32_t w = 0; w < t.nwords; w++)
        for (int32_t i = 0; i + 1 < t.wlen[w]; i++)
            if (pair_add(&t, t.sym[t.woff[w] + i], t.sym[t.woff[w] + i + 1], t.wcount[w], w, -2)) {
                st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
                goto done;
            }
    for (int32_t p = 0; p < t.npairs; p++)
        if (heap_push(&t, t.pairs[p].count, t.pairs[p].a, t.pairs[p].b)) {
            st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
            goto done;
        }
    t.nchanged = 0;
    /* 3. merge */
    int32_t target = cfg.vocab_size - nsp - 256, made = 0;
    tok->merges = malloc((size_t)(target > 0 ? target : 1) * sizeof *tok->merges);
    buf = malloc(1 << 16);
    if (!tok->merges || !buf) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
        goto done;
    }
    size_t bufcap = 1 << 16;
    for (int64_t step = 0; made < target && t.nheap; step++) {
        struct hent top = heap_pop(&t);
        int32_t idx = oj_pairmap_get(&t.index, top.a, top.b);
        pair_info *pi = &t.pairs[idx];
        if (pi->count != top.count)
            continue; /* stale */
        if (top.count < cfg.min_frequency)
            break;
        /* bytes of the merged symbol */
        size_t la, lb;
        const uint8_t *ba = oj_tokenizer_token_bytes(tok, top.a, &la);
        const uint8_t *bb = oj_tokenizer_token_bytes(tok, top.b, &lb);
        if (la + lb > bufcap) {
            while (bufcap < la + lb)
                bufcap *= 2;
            uint8_t *nb = realloc(buf, bufcap);
            if (!nb) {
                st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
                goto done;
            }
            buf = nb;
        }
        memcpy(buf, ba, la);
        memcpy(buf + la, bb, lb);
        uint64_t h = oj_strmap_hash(buf, la + lb);
        int64_t ex = oj_strmap_find(&toks, buf, la + lb, h);
        int32_t c;
        if (ex >= 0)
            c = (int32_t)toks.ents[ex].value; /* same bytes as an existing token */
        else {
            c = 256 + made;
            bool added;
            if ((st = oj_bpe_add_token(tok, buf, la + lb, c, err)) ||
                oj_strmap_put(&toks, buf, la + lb, h, c, &added) < 0) {
                st = st ? st : oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
                goto done;
            }
            tok->merges[made][0] = top.a;
            tok->merges[made][1] = top.b;
            made++;
        }
        /* rewrite the words holding (a, b); the list may grow while we walk
         * it (never for this pair: it only loses), so take it over first */
        int32_t *occ = pi->occ, nocc = pi->nocc;
        pi->occ = NULL;
        pi->nocc = pi->capocc = 0;
        t.nchanged = 0;
        for (int32_t k = 0; k < nocc; k++) {
            int32_t w = occ[k];
            if (t.wstamp[w] == step)
                continue;
            t.wstamp[w] = step;
            if (merge_word(&t, w, top.a, top.b, c, step)) {
                free(occ);
                st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
                goto done;
            }
        }
        free(occ);
        for (int32_t k = 0; k < t.nchanged; k++) {
            pair_info *q = &t.pairs[t.changed[k]];
            if (q->count > 0 && heap_push(&t, q->count, q->a, q->b)) {
                st = oj_error_set(err, OJ_ERR_CAPACITY, "bpe_train: out of memory");
                goto done;
            }
        }
    }
    tok->n_merges = made;
    for (int k = 0; k < nsp; k++)
        if ((st = oj_bpe_add_special(tok, (const uint8_t *)specials[k], strlen(specials[k]),
                                     256 + made + k, err)))
            goto done;
    st = oj_bpe_finish(tok, err);
done:
    free(buf);
    free(segs);
    if (maps)
        for (int k = 0; k < threads; k++)
            oj_strmap_free(&maps[k]);
    free(maps);
    oj_strmap_free(&words);
    oj_strmap_free(&toks);
    free(order);
    trainer_free(&t);
    if (st) {
        oj_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return OJ_OK;
}
