/* Hugging Face tokenizer.json: byte-level BPE (GPT-2 / Llama 3 / Qwen2-3
 * files) and SentencePiece-style BPE with byte fallback (Llama 2 files), with
 * the file's normalizer, pre-tokenizer, merges, added tokens and
 * post-processor template, encoding to the ids that the reference encoder
 * (tokenizers.js, npm @huggingface/tokenizers) gives.
 * What the file asks for and this code cannot do exactly is refused by
 * name, never approximated. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef OJAS_HAVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

#include "core/fs.h"
#include "data/bpe.h"
#include "data/hf_regex.h"
#include "data/pretok.h"
#include "data/unicode.h"

#define OJ_SESSION_PIECES 4096

/* ---------------------------------------------------------------- errors */

typedef struct ctx {
    const char *path;
    oj_error *err;
} ctx;

/* "tokenizer: PATH: FIELD: what", on one line (control characters quoted
 * from the file become '?'). */
static oj_status bad(const ctx *c, oj_status st, const char *field, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *q = msg; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7F)
            *q = '?';
    return oj_error_set(c->err, st, "tokenizer: %s: %s: %s", c->path, field, msg);
}

static oj_status oom(const ctx *c) {
    return oj_error_set(c->err, OJ_ERR_CAPACITY, "tokenizer: %s: out of memory", c->path);
}

/* A member that must be absent or null (a feature that is not supported). */
static oj_status want_null(const ctx *c, json_t *obj, const char *key, const char *field) {
    json_t *v = json_object_get(obj, key);
    if (v && !json_is_null(v))
        return bad(c, OJ_ERR_UNSUPPORTED, field, "is set; only null is supported");
    return OJ_OK;
}

/* A member that must be absent, null or false. */
static oj_status want_false(const ctx *c, json_t *obj, const char *key, const char *field) {
    json_t *v = json_object_get(obj, key);
    if (v && !json_is_null(v) && !json_is_false(v))
        return bad(c, OJ_ERR_UNSUPPORTED, field, "is %s; only false is supported",
                   json_is_true(v) ? "true" : "not a boolean");
    return OJ_OK;
}

/* A boolean member (absent/null = def). */
static oj_status get_bool(const ctx *c, json_t *obj, const char *key, const char *field, bool def,
                          bool *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return OJ_OK;
    }
    if (!json_is_boolean(v))
        return bad(c, OJ_ERR_CORRUPT, field, "expected true or false");
    *out = json_is_true(v);
    return OJ_OK;
}

static const char *type_of(json_t *obj) {
    json_t *t = json_is_object(obj) ? json_object_get(obj, "type") : NULL;
    return json_is_string(t) ? json_string_value(t) : NULL;
}

/* ---------------------------------------------------------------- parts */

/* GPT-2 byte-to-unicode string -> bytes; false if a character is no byte's
 * image. out has room for n bytes. */
static bool unmap_bytes(const char *s, size_t n, uint8_t *out, size_t *outlen) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int l = oj__utf8_decode((const uint8_t *)s + i, n - i, &cp);
        int b = l ? oj_gpt2_cp_to_byte(cp) : -1;
        if (b < 0)
            return false;
        out[o++] = (uint8_t)b;
        i += (size_t)l;
    }
    *outlen = o;
    return true;
}

/* Normalizer steps, applied in order to each text section. */
typedef enum norm_kind { NORM_NFC, NORM_PREPEND, NORM_REPLACE, NORM_META_PREPEND } norm_kind;
typedef enum meta_scheme { META_ALWAYS, META_FIRST, META_NEVER } meta_scheme;
typedef struct norm_op {
    norm_kind kind;
    char *a, *b; /* PREPEND: a; REPLACE: every a -> b; META_PREPEND: a unless the
                    text starts with it, by `scheme` (the Metaspace pre-tokenizer) */
    size_t al, bl;
    meta_scheme scheme;
} norm_op;

struct oj_hf {
    norm_op *ops;
    int n_ops;
    bool sp;               /* SentencePiece-style BPE: symbols are characters */
    int32_t ascii_id[128]; /* sp: id of each ASCII character's token, -1 none */
    int32_t byte_fb[256];  /* sp: id of "<0xXX>" (byte_fallback) */
};

void oj_hf_free(struct oj_hf *x) {
    if (!x)
        return;
    for (int i = 0; i < x->n_ops; i++) {
        free(x->ops[i].a);
        free(x->ops[i].b);
    }
    free(x->ops);
    free(x);
}

bool oj_hf_text_round_trips(const oj_tokenizer *tok) {
    return !tok->hf || (tok->hfx && tok->hfx->n_ops == 0 && !tok->hfx->sp && !tok->strip_space);
}

/* The pieces of the pipeline this file asks for. */
typedef struct spec {
    struct oj_hf *hfx;
    oj_hf_split split;
    char *pattern; /* PCRE2 form of the Split regex */
    bool byte_level;
    bool strip_space; /* decoder */
} spec;

static oj_status add_op(const ctx *c, spec *sp, norm_kind k, json_t *a, json_t *b) {
    norm_op *ops = realloc(sp->hfx->ops, (size_t)(sp->hfx->n_ops + 1) * sizeof *ops);
    if (!ops)
        return oom(c);
    sp->hfx->ops = ops;
    norm_op *op = &ops[sp->hfx->n_ops];
    *op = (norm_op){.kind = k};
    if (a) {
        op->al = json_string_length(a);
        op->a = malloc(op->al + 1);
        if (op->a)
            memcpy(op->a, json_string_value(a), op->al + 1);
    }
    if (b) {
        op->bl = json_string_length(b);
        op->b = malloc(op->bl + 1);
        if (op->b)
            memcpy(op->b, json_string_value(b), op->bl + 1);
    }
    sp->hfx->n_ops++;
    if ((a && !op->a) || (b && !op->b))
        return oom(c);
    return OJ_OK;
}

static oj_status parse_normalizer(const ctx *c, json_t *n, const char *field, spec *sp) {
    if (!n || json_is_null(n))
        return OJ_OK;
    const char *t = type_of(n);
    if (!t)
        return bad(c, OJ_ERR_CORRUPT, field, "expected an object with a \"type\"");
    char f[96];
    if (strcmp(t, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        snprintf(f, sizeof f, "%s.normalizers", field);
        if (!json_is_array(list))
            return bad(c, OJ_ERR_CORRUPT, f, "expected an array");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
            char fi[96];
            snprintf(fi, sizeof fi, "%s.normalizers[%zu]", field, i);
            oj_status st = parse_normalizer(c, e, fi, sp);
            if (st)
                return st;
        }
        return OJ_OK;
    }
    if (strcmp(t, "NFC") == 0) {
#ifndef OJAS_HAVE_ICU
        return bad(c, OJ_ERR_UNSUPPORTED, field,
                   "NFC needs ICU, and this build of ojas has none (install libicu-dev and "
                   "rebuild)");
#else
        return add_op(c, sp, NORM_NFC, NULL, NULL);
#endif
    }
    if (strcmp(t, "Prepend") == 0) {
        json_t *a = json_object_get(n, "prepend");
        snprintf(f, sizeof f, "%s.prepend", field);
        if (!json_is_string(a))
            return bad(c, OJ_ERR_CORRUPT, f, "expected a string");
        return add_op(c, sp, NORM_PREPEND, a, NULL);
    }
    if (strcmp(t, "Replace") == 0) {
        json_t *pat = json_object_get(n, "pattern"), *to = json_object_get(n, "content");
        json_t *a = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
        snprintf(f, sizeof f, "%s.pattern", field);
        if (!json_is_string(a) || !json_string_length(a))
            return bad(c, json_is_object(pat) && json_object_get(pat, "Regex") ? OJ_ERR_UNSUPPORTED
                                                                                : OJ_ERR_CORRUPT,
                       f, "expected {\"String\": non-empty string} (a Regex is not supported)");
        snprintf(f, sizeof f, "%s.content", field);
        if (!json_is_string(to))
            return bad(c, OJ_ERR_CORRUPT, f, "expected a string");
        return add_op(c, sp, NORM_REPLACE, a, to);
    }
    return bad(c, OJ_ERR_UNSUPPORTED, field, "type \"%s\" is not supported", t);
}

static oj_status parse_byte_level(const ctx *c, json_t *p, const char *field, bool *use_regex) {
    char f[96];
    snprintf(f, sizeof f, "%s.add_prefix_space", field);
    oj_status st = want_false(c, p, "add_prefix_space", f);
    if (st)
        return st;
    snprintf(f, sizeof f, "%s.use_regex", field);
    return get_bool(c, p, "use_regex", f, true, use_regex);
}

static oj_status parse_split(const ctx *c, json_t *p, const char *field, spec *sp) {
    char f[96];
    json_t *pat = json_object_get(p, "pattern");
    json_t *rx = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    snprintf(f, sizeof f, "%s.pattern", field);
    if (!json_is_string(rx))
        return bad(c, json_is_object(pat) && json_object_get(pat, "String") ? OJ_ERR_UNSUPPORTED
                                                                              : OJ_ERR_CORRUPT,
                   f, "expected {\"Regex\": string} (a String pattern is not supported)");
    json_t *beh = json_object_get(p, "behavior");
    snprintf(f, sizeof f, "%s.behavior", field);
    if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated") != 0)
        return bad(c, OJ_ERR_UNSUPPORTED, f, "\"%s\": only \"Isolated\" is supported",
                   json_is_string(beh) ? json_string_value(beh) : "?");
    snprintf(f, sizeof f, "%s.invert", field);
    oj_status st = want_false(c, p, "invert", f);
    if (st)
        return st;
    if (sp->pattern)
        return bad(c, OJ_ERR_UNSUPPORTED, field, "a second Split is not supported");
    char why[160];
    sp->pattern = oj_hf_regex_to_pcre2(json_string_value(rx), why, sizeof why);
    snprintf(f, sizeof f, "%s.pattern.Regex", field);
    if (!sp->pattern)
        return bad(c, OJ_ERR_UNSUPPORTED, f, "%s", why);
    return OJ_OK;
}

/* Metaspace (split false): each section's spaces become the replacement,
 * which is prepended unless the section starts with it, for every section
 * ("always") or the one that starts the text ("first"), as tokenizers.js
 * does; the section stays one piece. split true (the default of HF's Rust
 * tokenizers, which tokenizers.js ignores) is refused. */
static oj_status parse_metaspace(const ctx *c, json_t *p, spec *sp) {
    json_t *rep = json_object_get(p, "replacement"), *scheme = json_object_get(p, "prepend_scheme");
    json_t *split = json_object_get(p, "split"), *str_rep = json_object_get(p, "str_rep");
    if (rep && !json_is_string(rep))
        return bad(c, OJ_ERR_CORRUPT, "pre_tokenizer.replacement", "expected a string");
    const char *r = rep ? json_string_value(rep) : "\xE2\x96\x81";
    if (!*r)
        return bad(c, OJ_ERR_CORRUPT, "pre_tokenizer.replacement", "is empty");
    if (!json_is_false(split))
        return bad(c, OJ_ERR_UNSUPPORTED, "pre_tokenizer.split",
                   "only false is supported (true splits words in HF tokenizers but not in "
                   "tokenizers.js)");
    if (str_rep && !(json_is_string(str_rep) && strcmp(json_string_value(str_rep), r) == 0))
        return bad(c, OJ_ERR_UNSUPPORTED, "pre_tokenizer.str_rep",
                   "only absent or equal to replacement is supported");
    meta_scheme m;
    const char *sc = json_is_string(scheme) ? json_string_value(scheme) : "";
    if (!strcmp(sc, "always"))
        m = META_ALWAYS;
    else if (!strcmp(sc, "first"))
        m = META_FIRST;
    else if (!strcmp(sc, "never"))
        m = META_NEVER;
    else
        return bad(c, OJ_ERR_UNSUPPORTED, "pre_tokenizer.prepend_scheme",
                   "expected \"always\", \"first\" or \"never\" (older files' add_prefix_space "
                   "alone is not supported)");
    json_t *space = json_string(" "), *rj = json_string(r);
    oj_status st = space && rj ? add_op(c, sp, NORM_REPLACE, space, rj) : oom(c);
    if (!st)
        st = add_op(c, sp, NORM_META_PREPEND, rj, NULL);
    json_decref(space);
    json_decref(rj);
    if (st)
        return st;
    sp->hfx->ops[sp->hfx->n_ops - 1].scheme = m;
    sp->split = OJ_SPLIT_NONE;
    return OJ_OK;
}

static oj_status parse_pre_tokenizer(const ctx *c, json_t *p, spec *sp) {
    sp->split = OJ_SPLIT_NONE;
    if (!p || json_is_null(p))
        return OJ_OK;
    const char *t = type_of(p);
    if (!t)
        return bad(c, OJ_ERR_CORRUPT, "pre_tokenizer", "expected an object with a \"type\"");
    if (strcmp(t, "Metaspace") == 0)
        return parse_metaspace(c, p, sp);
    json_t *one[1] = {p};
    json_t **items = one;
    size_t n = 1;
    json_t *list = NULL;
    if (strcmp(t, "Sequence") == 0) {
        list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return bad(c, OJ_ERR_CORRUPT, "pre_tokenizer.pretokenizers", "expected an array");
        n = json_array_size(list);
        items = NULL;
    }
    bool split_seen = false, gpt2_regex = false;
    for (size_t i = 0; i < n; i++) {
        json_t *e = items ? items[i] : json_array_get(list, i);
        char f[64];
        if (items)
            snprintf(f, sizeof f, "pre_tokenizer");
        else
            snprintf(f, sizeof f, "pre_tokenizer.pretokenizers[%zu]", i);
        const char *et = type_of(e);
        if (!et)
            return bad(c, OJ_ERR_CORRUPT, f, "expected an object with a \"type\"");
        oj_status st;
        if (strcmp(et, "Split") == 0) {
            if (sp->byte_level)
                return bad(c, OJ_ERR_UNSUPPORTED, f, "a Split after ByteLevel is not supported");
            if ((st = parse_split(c, e, f, sp)))
                return st;
            split_seen = true;
        } else if (strcmp(et, "ByteLevel") == 0) {
            bool use_regex = false;
            if (sp->byte_level)
                return bad(c, OJ_ERR_UNSUPPORTED, f, "a second ByteLevel is not supported");
            if ((st = parse_byte_level(c, e, f, &use_regex)))
                return st;
            if (use_regex && split_seen)
                return bad(c, OJ_ERR_UNSUPPORTED, f,
                           "use_regex true after a Split is not supported");
            sp->byte_level = true;
            gpt2_regex = use_regex;
        } else
            return bad(c, OJ_ERR_UNSUPPORTED, f, "type \"%s\" is not supported", et);
    }
    sp->split = split_seen ? OJ_SPLIT_REGEX : gpt2_regex ? OJ_SPLIT_GPT2 : OJ_SPLIT_NONE;
    return OJ_OK;
}

/* The decoders whose result is the concatenation of token bytes: ByteLevel
 * (for byte-level BPE), and SentencePiece's Replace "\u2581" -> " ",
 * ByteFallback, Fuse, Strip(" ", 1, 0) (for byte_fallback BPE, whose token
 * bytes hold spaces and raw bytes; Strip drops one leading space). */
static oj_status parse_decoder(const ctx *c, json_t *d, spec *sp) {
    if (!d || json_is_null(d))
        return OJ_OK;
    const char *t = type_of(d);
    if (!t)
        return bad(c, OJ_ERR_CORRUPT, "decoder", "expected an object with a \"type\"");
    if (sp->byte_level) {
        if (strcmp(t, "ByteLevel") == 0)
            return OJ_OK;
        return bad(c, OJ_ERR_UNSUPPORTED, "decoder",
                   "type \"%s\" is not supported with a ByteLevel pre-tokenizer", t);
    }
    json_t *list = json_object_get(d, "decoders");
    static const char *const want[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
    bool ok = strcmp(t, "Sequence") == 0 && json_is_array(list) && json_array_size(list) == 4;
    for (size_t i = 0; ok && i < 4; i++) {
        json_t *e = json_array_get(list, i);
        const char *et = type_of(e);
        ok = et && strcmp(et, want[i]) == 0;
    }
    if (ok) {
        json_t *r = json_array_get(list, 0), *st = json_array_get(list, 3);
        json_t *pat = json_object_get(r, "pattern");
        json_t *from = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
        json_t *to = json_object_get(r, "content"), *sc = json_object_get(st, "content");
        ok = json_is_string(from) && strcmp(json_string_value(from), "\xE2\x96\x81") == 0 &&
             json_is_string(to) && strcmp(json_string_value(to), " ") == 0 && json_is_string(sc) &&
             strcmp(json_string_value(sc), " ") == 0 &&
             json_integer_value(json_object_get(st, "start")) == 1 &&
             json_integer_value(json_object_get(st, "stop")) == 0;
    }
    if (!ok)
        return bad(c, OJ_ERR_UNSUPPORTED, "decoder",
                   "type \"%s\" is not supported (for BPE with byte_fallback: only Sequence "
                   "[Replace \"\u2581\" -> \" \", ByteFallback, Fuse, Strip \" \" 1 0])",
                   t);
    sp->strip_space = true;
    return OJ_OK;
}

/* added_tokens: check the flags; collect (content, id, special). */
static oj_status check_added(const ctx *c, json_t *added, bool has_normalizer) {
    if (!added || json_is_null(added))
        return OJ_OK;
    if (!json_is_array(added))
        return bad(c, OJ_ERR_CORRUPT, "added_tokens", "expected an array");
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        char f[64];
        snprintf(f, sizeof f, "added_tokens[%zu]", i);
        json_t *content = json_object_get(a, "content"), *id = json_object_get(a, "id");
        if (!json_is_object(a) || !json_is_string(content) || !json_string_length(content) ||
            !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX - 1)
            return bad(c, OJ_ERR_CORRUPT, f,
                       "expected {\"id\": id >= 0, \"content\": non-empty string, ...}");
        static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
        for (size_t k = 0; k < 3; k++) {
            char ff[96];
            snprintf(ff, sizeof ff, "%s.%s", f, flags[k]);
            oj_status st = want_false(c, a, flags[k], ff);
            if (st)
                return st;
        }
        bool special = false, normalized = false;
        char ff[96];
        snprintf(ff, sizeof ff, "%s.special", f);
        oj_status st = get_bool(c, a, "special", ff, false, &special);
        snprintf(ff, sizeof ff, "%s.normalized", f);
        if (!st)
            st = get_bool(c, a, "normalized", ff, !special, &normalized);
        if (st)
            return st;
        if (normalized && has_normalizer)
            return bad(c, OJ_ERR_UNSUPPORTED, ff,
                       "true with a normalizer is not supported (the token would be matched "
                       "in normalized text)");
    }
    return OJ_OK;
}

/* Is s (UTF-8) the content of an added token whose id is id? */
static bool is_added(json_t *added, const char *s, json_int_t id) {
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        if (json_integer_value(json_object_get(a, "id")) == id &&
            strcmp(json_string_value(json_object_get(a, "content")), s) == 0)
            return true;
    }
    return false;
}

/* The vocabulary, byte-level: every key a GPT-2 byte string. */
/* Start of both vocabulary loaders: vocab must be an object of token: id.
 * *kb gets a buffer for the bytes of the longest key (caller frees it) and
 * *lim the largest id taken as valid (one far beyond the number of entries
 * is corrupt). */
static oj_status vocab_begin(const ctx *c, json_t *vocab, json_t *added, uint8_t **kb,
                             int64_t *lim) {
    if (!json_is_object(vocab))
        return bad(c, OJ_ERR_CORRUPT, "model.vocab", "expected an object of token: id");
    size_t maxkey = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        size_t kl = strlen(key);
        if (kl > maxkey)
            maxkey = kl;
    }
    *kb = malloc(maxkey + 1);
    if (!*kb)
        return oom(c);
    *lim = (int64_t)json_object_size(vocab) * 2 + 1024 + (int64_t)json_array_size(added);
    return OJ_OK;
}

/* The id of vocabulary entry key: v in *id, or OJ_ERR_CORRUPT when it is not
 * an integer in [0, INT32_MAX - 1) and at most lim, or when key_ok is false. */
static oj_status vocab_entry_id(const ctx *c, const char *key, json_t *v, int64_t lim,
                                bool key_ok, json_int_t *id) {
    *id = json_is_integer(v) ? json_integer_value(v) : -1;
    if (*id < 0 || *id >= INT32_MAX - 1 || *id > lim || !key_ok)
        return bad(c, OJ_ERR_CORRUPT, "model.vocab", "\"%.64s\" has no valid id%s", key,
                   *id > lim ? " (far beyond the number of entries)" : "");
    return OJ_OK;
}

static oj_status load_vocab(const ctx *c, oj_tokenizer *tok, json_t *vocab, json_t *added) {
    uint8_t *kb;
    int64_t lim;
    oj_status st = vocab_begin(c, vocab, added, &kb, &lim);
    if (st)
        return st;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        json_int_t id;
        size_t bl;
        if ((st = vocab_entry_id(c, key, v, lim, true, &id)))
            break;
        if (added && is_added(added, key, id))
            continue; /* an added token: a special, not a mergeable token */
        if (!unmap_bytes(key, strlen(key), kb, &bl) || bl == 0) {
            st = bad(c, OJ_ERR_CORRUPT, "model.vocab",
                     "\"%.64s\" is not a ByteLevel (GPT-2 byte-to-unicode) string", key);
            break;
        }
        if (oj_bpe_rank(tok, kb, bl) >= 0) {
            st = bad(c, OJ_ERR_CORRUPT, "model.vocab", "\"%.64s\" appears twice", key);
            break;
        }
        if ((int32_t)id < tok->n_ids && tok->tok_len[id]) {
            st = bad(c, OJ_ERR_CORRUPT, "model.vocab", "id %lld appears twice", (long long)id);
            break;
        }
        oj_error e = {0};
        if ((st = oj_bpe_add_token(tok, kb, bl, (int32_t)id, &e))) {
            st = bad(c, st, "model.vocab", "\"%.64s\": %s", key, e.message);
            break;
        }
    }
    free(kb);
    return st;
}

/* SentencePiece-style vocabulary (byte_fallback): keys are text, "\u2581"
 * standing for a space and "<0xXX>" for byte XX. tok->ranks maps each key
 * to its id (for characters and merges); the token bytes (for decode) have
 * spaces and raw bytes. */
static oj_status load_vocab_sp(const ctx *c, oj_tokenizer *tok, json_t *vocab, json_t *added,
                               struct oj_hf *x) {
    for (int i = 0; i < 128; i++)
        x->ascii_id[i] = -1;
    for (int i = 0; i < 256; i++)
        x->byte_fb[i] = -1;
    uint8_t *kb;
    int64_t lim;
    oj_status st = vocab_begin(c, vocab, added, &kb, &lim);
    if (st)
        return st;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        json_int_t id;
        size_t kl = strlen(key), bl = 0;
        if ((st = vocab_entry_id(c, key, v, lim, kl > 0, &id)))
            break;
        if (added && is_added(added, key, id))
            continue;
        unsigned hx;
        char tail;
        if (kl == 6 && sscanf(key, "<0x%2X%c", &hx, &tail) == 2 && tail == '>' &&
            strchr("0123456789ABCDEF", key[3]) && strchr("0123456789ABCDEF", key[4])) {
            kb[bl++] = (uint8_t)hx;
            x->byte_fb[hx] = (int32_t)id;
        } else
            for (size_t i = 0; i < kl;) {
                if (i + 3 <= kl && memcmp(key + i, "\xE2\x96\x81", 3) == 0) {
                    kb[bl++] = ' ';
                    i += 3;
                } else
                    kb[bl++] = (uint8_t)key[i++];
            }
        if (kl == 1 && (uint8_t)key[0] < 128)
            x->ascii_id[(uint8_t)key[0]] = (int32_t)id;
        oj_error e = {0};
        bool fresh;
        if ((int32_t)id < tok->n_ids && tok->tok_len[id]) {
            st = bad(c, OJ_ERR_CORRUPT, "model.vocab", "id %lld appears twice", (long long)id);
            break;
        }
        if ((st = oj_bpe_put_id(tok, kb, bl, (int32_t)id, false, &e))) {
            st = bad(c, st, "model.vocab", "\"%.64s\": %s", key, e.message);
            break;
        }
        if (oj_strmap_put(&tok->ranks, key, kl, oj_strmap_hash(key, kl), id, &fresh) < 0) {
            st = oom(c);
            break;
        }
    }
    free(kb);
    for (int b = 0; b < 256 && !st; b++)
        if (x->byte_fb[b] < 0)
            st = bad(c, OJ_ERR_CORRUPT, "model.vocab",
                     "byte_fallback is set but <0x%02X> is missing", b);
    return st;
}

/* One merge as its two parts (each a string of at most cap-1 bytes). */
static bool merge_parts(json_t *m, const char **a, size_t *al, const char **b, size_t *bl) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
            return false;
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = n - *al - 1;
        return true;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *al = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bl = json_string_length(json_array_get(m, 1));
        return *al && *bl;
    }
    return false;
}

/* Is the n bytes at s a key of model.vocab? tmp (n + 1 bytes) gets the key
 * NUL-terminated for the lookup. */
static bool in_vocab(json_t *vocab, const char *s, size_t n, char *tmp) {
    memmove(tmp, s, n);
    tmp[n] = 0;
    return json_object_get(vocab, tmp) != NULL;
}

/* merges, in priority order: pair table (left id, right id) -> rank and
 * merge_id[rank] = the merged token. Each part and the merged result (the
 * two keys joined) must be keys of model.vocab, else the file is refused
 * naming the merge and the token, as the Rust tokenizers' BPE builder
 * refuses it (MergeTokenOutOfVocabulary). A merge whose part is a key but an
 * added token (kept out of the mergeable tokens) can never apply and is
 * skipped on ByteLevel files; a later duplicate of a pair replaces the
 * earlier rank (as a Map built from the list does in tokenizers.js). */
static oj_status load_merges(const ctx *c, oj_tokenizer *tok, json_t *vocab, json_t *merges,
                             bool sp) {
    if (!json_is_array(merges))
        return bad(c, OJ_ERR_CORRUPT, "model.merges", "expected an array");
    size_t n = json_array_size(merges);
    if (n >= INT32_MAX / 2)
        return bad(c, OJ_ERR_CAPACITY, "model.merges", "too many merges (%zu)", n);
    tok->merge_id = malloc((n ? n : 1) * sizeof *tok->merge_id);
    if (!tok->merge_id || oj_pairmap_init(&tok->pairs, n * 2 + 16) != 0)
        return oom(c);
    tok->n_merges = (int64_t)n;
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) {
        const char *a, *b;
        size_t al, bl, ua, ub;
        char f[48];
        snprintf(f, sizeof f, "model.merges[%zu]", i);
        if (!merge_parts(json_array_get(merges, i), &a, &al, &b, &bl)) {
            free(buf);
            return bad(c, OJ_ERR_CORRUPT, f, "expected \"A B\" (one space) or [\"A\", \"B\"]");
        }
        if (al + bl + 1 > cap) {
            cap = (al + bl) * 2 + 64;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return oom(c);
            }
            buf = nb;
        }
        char *key = (char *)buf; /* the keys, before buf takes the bytes */
        const char *miss = NULL;
        size_t ml = 0;
        if (!in_vocab(vocab, a, al, key)) {
            miss = a;
            ml = al;
        } else if (!in_vocab(vocab, b, bl, key)) {
            miss = b;
            ml = bl;
        } else {
            memcpy(key, a, al);
            memcpy(key + al, b, bl);
            if (!in_vocab(vocab, key, al + bl, key)) {
                miss = key;
                ml = al + bl;
            }
        }
        if (miss) {
            oj_status st = bad(c, OJ_ERR_CORRUPT, f, "\"%.*s %.*s\": \"%.*s\" is not in model.vocab",
                               (int)(al > 64 ? 64 : al), a, (int)(bl > 64 ? 64 : bl), b,
                               (int)(ml > 128 ? 128 : ml), miss);
            free(buf);
            return st;
        }
        if (sp) { /* text keys, and every part must be a token */
            memcpy(buf, a, al);
            memcpy(buf + al, b, bl);
            ua = al;
            ub = bl;
        } else if (!unmap_bytes(a, al, buf, &ua) || !unmap_bytes(b, bl, buf + ua, &ub)) {
            free(buf);
            return bad(c, OJ_ERR_CORRUPT, f, "a part is not a ByteLevel string");
        }
        /* all three are keys of model.vocab: one missing from the ranks is an
         * added token */
        int32_t ia = oj_bpe_rank(tok, buf, ua), ib = oj_bpe_rank(tok, buf + ua, ub);
        tok->merge_id[i] = -1;
        if (sp && (ia < 0 || ib < 0)) {
            free(buf);
            return bad(c, OJ_ERR_UNSUPPORTED, f, "\"%.*s\" is an added token; a merge of one "
                       "is not supported", (int)(ia < 0 ? (al > 64 ? 64 : al) : (bl > 64 ? 64 : bl)),
                       ia < 0 ? a : b);
        }
        if (ia < 0 || ib < 0)
            continue;
        int32_t ic = oj_bpe_rank(tok, buf, ua + ub);
        if (ic < 0) {
            free(buf);
            return bad(c, OJ_ERR_UNSUPPORTED, f, "\"%.*s%.*s\" is an added token; a merge "
                       "making one is not supported", (int)(al > 64 ? 64 : al), a,
                       (int)(bl > 64 ? 64 : bl), b);
        }
        tok->merge_id[i] = ic;
        if (oj_pairmap_set(&tok->pairs, ia, ib, (int32_t)i) != 0) {
            free(buf);
            return oom(c);
        }
    }
    free(buf);
    return OJ_OK;
}

static oj_status parse_model(const ctx *c, oj_tokenizer *tok, json_t *m, json_t *added,
                             spec *sp) {
    const char *t = type_of(m);
    if (!t)
        return bad(c, OJ_ERR_CORRUPT, "model", "expected an object with a \"type\"");
    if (strcmp(t, "BPE") != 0)
        return bad(c, OJ_ERR_UNSUPPORTED, "model.type", "\"%s\": only \"BPE\" is supported", t);
    oj_status st;
    if ((st = want_null(c, m, "dropout", "model.dropout")))
        return st;
    static const char *const empty_ok[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t k = 0; k < 2; k++) {
        json_t *v = json_object_get(m, empty_ok[k]);
        char f[64];
        snprintf(f, sizeof f, "model.%s", empty_ok[k]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return bad(c, OJ_ERR_UNSUPPORTED, f, "only null or \"\" is supported");
    }
    bool ignore_merges = false, byte_fallback = false;
    if ((st = get_bool(c, m, "ignore_merges", "model.ignore_merges", false, &ignore_merges)) ||
        (st = get_bool(c, m, "byte_fallback", "model.byte_fallback", false, &byte_fallback)))
        return st;
    if (sp->byte_level && byte_fallback)
        return bad(c, OJ_ERR_UNSUPPORTED, "model.byte_fallback",
                   "true with a ByteLevel pre-tokenizer is not supported");
    if (!sp->byte_level && !byte_fallback)
        return bad(c, OJ_ERR_UNSUPPORTED, "pre_tokenizer",
                   "BPE without a ByteLevel pre-tokenizer and without byte_fallback is not "
                   "supported");
    if (byte_fallback && ignore_merges)
        return bad(c, OJ_ERR_UNSUPPORTED, "model.ignore_merges",
                   "true with byte_fallback is not supported");
    tok->merges_only = !ignore_merges;
    sp->hfx->sp = byte_fallback;
    if (byte_fallback) {
        if ((st = load_vocab_sp(c, tok, json_object_get(m, "vocab"), added, sp->hfx)))
            return st;
    } else {
        if ((st = load_vocab(c, tok, json_object_get(m, "vocab"), added)))
            return st;
        for (int b = 0; b < 256; b++)
            if (tok->byte_id[b] < 0)
                return bad(c, OJ_ERR_CORRUPT, "model.vocab", "byte 0x%02x has no token", b);
    }
    return load_merges(c, tok, json_object_get(m, "vocab"), json_object_get(m, "merges"),
                       byte_fallback);
}

static oj_status add_added(const ctx *c, oj_tokenizer *tok, json_t *added) {
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        const char *s = json_string_value(json_object_get(a, "content"));
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        char f[48];
        snprintf(f, sizeof f, "added_tokens[%zu]", i);
        if (id < tok->n_ids && tok->tok_len[id])
            return bad(c, OJ_ERR_CORRUPT, f, "id %d is already a token of model.vocab or "
                                             "added_tokens", (int)id);
        oj_error e = {0};
        oj_status st = oj_bpe_add_special(tok, (const uint8_t *)s, strlen(s), id, &e);
        if (st)
            return bad(c, st, f, "%s", e.message);
        tok->specials[tok->n_specials - 1].always =
            !json_is_true(json_object_get(a, "special"));
    }
    return OJ_OK;
}

static oj_status parse_template(const ctx *c, oj_tokenizer *tok, json_t *p, const char *field);

/* post_processor: ByteLevel (no change to ids), TemplateProcessing, or a
 * Sequence of ByteLevel and at most one TemplateProcessing (Meta's Llama 3
 * files). */
static oj_status parse_post(const ctx *c, oj_tokenizer *tok, json_t *p) {
    if (!p || json_is_null(p))
        return OJ_OK;
    const char *t = type_of(p);
    if (!t)
        return bad(c, OJ_ERR_CORRUPT, "post_processor", "expected an object with a \"type\"");
    if (strcmp(t, "ByteLevel") == 0)
        return OJ_OK; /* offsets only */
    if (strcmp(t, "TemplateProcessing") == 0)
        return parse_template(c, tok, p, "post_processor");
    if (strcmp(t, "Sequence") != 0)
        return bad(c, OJ_ERR_UNSUPPORTED, "post_processor", "type \"%s\" is not supported", t);
    json_t *list = json_object_get(p, "processors");
    if (!json_is_array(list))
        return bad(c, OJ_ERR_CORRUPT, "post_processor.processors", "expected an array");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        char f[64];
        snprintf(f, sizeof f, "post_processor.processors[%zu]", i);
        const char *et = type_of(e);
        if (et && strcmp(et, "ByteLevel") == 0)
            continue;
        if (!et || strcmp(et, "TemplateProcessing") != 0 || tok->tmpl_ids)
            return bad(c, et ? OJ_ERR_UNSUPPORTED : OJ_ERR_CORRUPT, f,
                       "only ByteLevel and one TemplateProcessing are supported (got %s)",
                       et ? et : "no type");
        oj_status st = parse_template(c, tok, e, f);
        if (st)
            return st;
    }
    return OJ_OK;
}

/* TemplateProcessing: its single-sequence template gives the ids placed
 * around the text. */
static oj_status parse_template(const ctx *c, oj_tokenizer *tok, json_t *p, const char *field) {
    char fs[96], fsp[96];
    snprintf(fs, sizeof fs, "%s.single", field);
    snprintf(fsp, sizeof fsp, "%s.special_tokens", field);
    json_t *single = json_object_get(p, "single"), *sp = json_object_get(p, "special_tokens");
    if (!json_is_array(single))
        return bad(c, OJ_ERR_CORRUPT, fs, "expected an array");
    size_t cap = 0, n = 0, i;
    json_t *item;
    int seq_at = -1;
    json_array_foreach(single, i, item) {
        json_t *st = json_object_get(item, "SpecialToken"), *seq = json_object_get(item, "Sequence");
        char f[128];
        snprintf(f, sizeof f, "%s[%zu]", fs, i);
        if (json_is_object(seq)) {
            json_t *sid = json_object_get(seq, "id");
            if (!json_is_string(sid) || strcmp(json_string_value(sid), "A") != 0 || seq_at >= 0)
                return bad(c, OJ_ERR_UNSUPPORTED, f, "only one Sequence \"A\" is supported");
            seq_at = (int)n;
            continue;
        }
        json_t *name = json_is_object(st) ? json_object_get(st, "id") : NULL;
        if (!json_is_string(name))
            return bad(c, OJ_ERR_CORRUPT, f, "expected {\"SpecialToken\": {\"id\": name}} or "
                                             "{\"Sequence\": {\"id\": \"A\"}}");
        json_t *def = json_object_get(sp, json_string_value(name));
        json_t *ids = json_is_object(def) ? json_object_get(def, "ids") : NULL;
        if (!json_is_array(ids))
            return bad(c, OJ_ERR_CORRUPT, f, "\"%.64s\" is not in %s", json_string_value(name),
                       fsp);
        size_t k;
        json_t *idv;
        json_array_foreach(ids, k, idv) {
            json_int_t id = json_is_integer(idv) ? json_integer_value(idv) : -1;
            if (id < 0 || id >= tok->n_ids || !tok->tok_len[id])
                return bad(c, OJ_ERR_CORRUPT, f, "special token \"%.64s\" has id %lld, not in "
                                                 "the vocabulary",
                           json_string_value(name), (long long)id);
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                int32_t *q = realloc(tok->tmpl_ids, cap * sizeof *q);
                if (!q)
                    return oom(c);
                tok->tmpl_ids = q;
            }
            tok->tmpl_ids[n++] = (int32_t)id;
        }
    }
    if (seq_at < 0)
        return bad(c, OJ_ERR_CORRUPT, fs, "has no Sequence \"A\"");
    tok->n_prefix = seq_at;
    tok->n_suffix = (int)n - seq_at;
    return OJ_OK;
}

/* *note += ", " (unless empty) + path + " (" + why + ")"; out of memory
 * leaves *note as it was. */
static void note_add(char **note, const char *path, const char *why) {
    size_t old = *note ? strlen(*note) : 0, n = old + strlen(path) + strlen(why) + 8;
    char *q = realloc(*note, n);
    if (!q)
        return;
    snprintf(q + old, n - old, "%s%s (%s)", old ? ", " : "", path, why);
    *note = q;
}

/* One configuration file's EOS: its string key (tokenizer_config.json
 * "eos_token": a string or {"content"}) or integer key ("eos_token_id": an
 * id or a list, whose first entry is taken) naming a special token. Returns
 * the id, or -1 with why not appended to *note ("absent", "no eos_token",
 * ...). */
static int32_t config_eos(const oj_tokenizer *tok, const char *dir, const char *name,
                          const char *key, char **note) {
    size_t dl = strlen(dir);
    char *path = malloc(dl + strlen(name) + 2);
    if (!path)
        return -1;
    snprintf(path, dl + strlen(name) + 2, "%s%s%s", dir, dl ? "/" : "", name);
    struct stat sb;
    json_t *root = NULL;
    char why[160];
    int32_t id = -1;
    uint8_t *text = NULL;
    size_t len = 0;
    if (stat(path, &sb) != 0)
        snprintf(why, sizeof why, "absent");
    else if (!S_ISREG(sb.st_mode)) /* a FIFO would block */
        snprintf(why, sizeof why, "not a regular file");
    else if (oj__read_file(path, (size_t)1 << 24, &text, &len, NULL) != OJ_OK ||
             !(root = json_loadb((const char *)text, len, 0, NULL)) || !json_is_object(root))
        snprintf(why, sizeof why, "not a JSON object");
    else {
        json_t *v = json_object_get(root, key);
        if (json_is_object(v))
            v = json_object_get(v, "content");
        if (json_is_array(v))
            v = json_array_get(v, 0);
        if (json_is_string(v)) {
            id = oj_tokenizer_special_id(tok, json_string_value(v));
            snprintf(why, sizeof why, "%s \"%.64s\" is not a special token", key,
                     json_string_value(v));
        } else if (json_is_integer(v)) {
            json_int_t k = json_integer_value(v);
            if (k >= 0 && k < tok->n_ids && tok->is_special[k])
                id = (int32_t)k;
            snprintf(why, sizeof why, "%s %lld is not a special token", key, (long long)k);
        } else
            snprintf(why, sizeof why, "no %s", key);
    }
    if (id < 0)
        note_add(note, path, why);
    free(text);
    json_decref(root);
    free(path);
    return id;
}

void oj__tokenizer_find_eos(oj_tokenizer *tok, const char *dir) {
    if (tok->eot >= 0 || tok->eos_note)
        return;
    static const char *const files[][2] = {{"tokenizer_config.json", "eos_token"},
                                           {"generation_config.json", "eos_token_id"},
                                           {"config.json", "eos_token_id"}};
    char *note = NULL;
    for (int i = 0; i < 3 && tok->eot < 0; i++)
        tok->eot = config_eos(tok, dir, files[i][0], files[i][1], &note);
    if (tok->eot < 0)
        tok->eos_note = note;
    else
        free(note);
}

oj_status oj_tokenizer_load_hf(const char *path, oj_tokenizer **out, oj_error *err) {
    if (!path || !out)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_load_hf: NULL argument");
    *out = NULL;
    ctx c = {path, err};
    uint8_t *text = NULL;
    size_t len = 0;
    oj_error re = {0}; /* a FIFO or directory is refused here, by kind */
    if (oj__read_file(path, (size_t)1 << 30, &text, &len, &re) != OJ_OK)
        return oj_error_set(err, re.status, "tokenizer: %s", re.message);
    json_error_t je;
    json_t *root = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) {
        for (char *q = je.text; *q; q++) /* (it may quote the file) */
            if ((unsigned char)*q < 0x20 || *q == 0x7F)
                *q = '?';
        return oj_error_set(err, je.line < 0 ? OJ_ERR_IO : OJ_ERR_CORRUPT,
                            "tokenizer: %s:%d:%d: not valid JSON: %s", path, je.line, je.column,
                            je.text);
    }
    oj_status st = OJ_OK;
    spec sp = {0};
    oj_tokenizer *tok = NULL;
    if (!json_is_object(root)) {
        st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s: not a JSON object", path);
        goto done;
    }
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    json_t *normalizer = json_object_get(root, "normalizer");
    if (!model) {
        st = bad(&c, OJ_ERR_CORRUPT, "model", "missing");
        goto done;
    }
    if (!(sp.hfx = calloc(1, sizeof *sp.hfx))) {
        st = oom(&c);
        goto done;
    }
    if ((st = want_null(&c, root, "truncation", "truncation")) ||
        (st = want_null(&c, root, "padding", "padding")) ||
        (st = parse_normalizer(&c, normalizer, "normalizer", &sp)) ||
        (st = parse_pre_tokenizer(&c, json_object_get(root, "pre_tokenizer"), &sp)) ||
        (st = parse_decoder(&c, json_object_get(root, "decoder"), &sp)) ||
        (st = check_added(&c, added, normalizer && !json_is_null(normalizer))))
        goto done;
    if (!(tok = oj_bpe_new())) {
        st = oom(&c);
        goto done;
    }
    tok->hf = 1;
    tok->hf_split = (uint8_t)sp.split;
    tok->strip_space = sp.strip_space;
    if ((st = parse_model(&c, tok, model, json_is_array(added) ? added : NULL, &sp)))
        goto done;
    if (json_is_array(added) && (st = add_added(&c, tok, added)))
        goto done;
    if ((st = parse_post(&c, tok, json_object_get(root, "post_processor"))))
        goto done;
    if (sp.split == OJ_SPLIT_REGEX) {
        char msg[256];
        tok->re = oj_pretok_pcre2_compile_pattern(sp.pattern, msg, sizeof msg);
        if (!tok->re) {
            st = bad(&c, OJ_ERR_UNSUPPORTED, "pre_tokenizer", "the regex (as PCRE2 \"%.120s\"): %s",
                     sp.pattern, msg);
            goto done;
        }
        tok->pretok = OJ_PRETOK_PCRE2;
    }
    {
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
        if (!dir) {
            st = oom(&c);
            goto done;
        }
        oj__tokenizer_find_eos(tok, dir);
        free(dir);
    }
    tok->hfx = sp.hfx;
    sp.hfx = NULL;
done:
    free(sp.pattern);
    oj_hf_free(sp.hfx);
    json_decref(root);
    if (st) {
        oj_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return OJ_OK;
}

oj_status oj_tokenizer_set_template(oj_tokenizer *tok, const int32_t *prefix, size_t n_prefix,
                                    const int32_t *suffix, size_t n_suffix, oj_error *err) {
    if (!tok || (n_prefix && !prefix) || (n_suffix && !suffix) || n_prefix > 64 || n_suffix > 64)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_set_template: bad argument");
    const int32_t V = oj_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n_prefix + n_suffix; i++) {
        int32_t id = i < n_prefix ? prefix[i] : suffix[i - n_prefix];
        if (id < 0 || id >= V)
            return oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                                "tokenizer_set_template: id %d is outside the vocabulary of %d",
                                (int)id, (int)V);
    }
    int32_t *ids = NULL;
    if (n_prefix + n_suffix) {
        ids = malloc((n_prefix + n_suffix) * sizeof *ids);
        if (ids == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
        if (n_prefix) memcpy(ids, prefix, n_prefix * sizeof *ids);
        if (n_suffix) memcpy(ids + n_prefix, suffix, n_suffix * sizeof *ids);
    }
    free(tok->tmpl_ids);
    tok->tmpl_ids = ids;
    tok->n_prefix = (int)n_prefix;
    tok->n_suffix = (int)n_suffix;
    return OJ_OK;
}

void oj_tokenizer_template(const oj_tokenizer *tok, const int32_t **prefix, size_t *n_prefix,
                           const int32_t **suffix, size_t *n_suffix) {
    bool any = tok && tok->tmpl_ids;
    if (prefix)
        *prefix = any ? tok->tmpl_ids : NULL;
    if (n_prefix)
        *n_prefix = any ? (size_t)tok->n_prefix : 0;
    if (suffix)
        *suffix = any ? tok->tmpl_ids + tok->n_prefix : NULL;
    if (n_suffix)
        *n_suffix = any ? (size_t)tok->n_suffix : 0;
}

/* ---------------------------------------------------------------- encode */


#ifdef OJAS_HAVE_ICU
/* NFC of valid UTF-8 b[0..n) into a new buffer (ICU). Text whose code
 * points are all below U+0300 (no lead byte >= 0xCC) is NFC already: then
 * *out = NULL. */
static oj_status nfc(const uint8_t *b, size_t n, uint8_t **out, size_t *outn, oj_error *err) {
    *out = NULL;
    size_t i = 0;
    while (i < n && b[i] < 0xCC)
        i++;
    if (i == n)
        return OJ_OK;
    if (n > INT32_MAX / 4)
        return oj_error_set(err, OJ_ERR_CAPACITY,
                            "tokenizer_encode: NFC of a text section over 512 MiB");
    UErrorCode ec = U_ZERO_ERROR;
    const UNormalizer2 *norm = unorm2_getNFCInstance(&ec);
    int32_t n16 = 0;
    UChar *src = malloc((n + 1) * sizeof *src), *dst = NULL;
    uint8_t *res = NULL;
    if (!src)
        goto fail;
    u_strFromUTF8(src, (int32_t)n + 1, &n16, (const char *)b, (int32_t)n, &ec);
    int32_t cap = n16 * 3 + 16; /* NFC grows a string by at most 3x */
    if (U_FAILURE(ec) || !(dst = malloc((size_t)cap * sizeof *dst)))
        goto fail;
    int32_t m = unorm2_normalize(norm, src, n16, dst, cap, &ec);
    int32_t n8 = 0;
    if (U_FAILURE(ec) || !(res = malloc((size_t)m * 3 + 1)))
        goto fail;
    u_strToUTF8((char *)res, m * 3 + 1, &n8, dst, m, &ec);
    if (U_FAILURE(ec))
        goto fail;
    free(src);
    free(dst);
    *out = res;
    *outn = (size_t)n8;
    return OJ_OK;
fail:
    free(src);
    free(dst);
    free(res);
    if (U_SUCCESS(ec))
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_encode: out of memory in NFC");
    return oj_error_set(err, OJ_ERR_INTERNAL, "tokenizer_encode: ICU NFC failed: %s",
                        u_errorName(ec));
}
#endif

/* Apply the normalizer steps to b[0..n): *buf is NULL (b unchanged) or a
 * new buffer holding the result, *bn its length. */
static oj_status normalize(const struct oj_hf *x, const uint8_t *b, size_t n, bool first,
                           uint8_t **buf, size_t *bn, oj_error *err) {
    uint8_t *cur = NULL; /* owned, or NULL while b is current */
    size_t cn = n;
    *buf = NULL;
    for (int k = 0; k < x->n_ops; k++) {
        const norm_op *op = &x->ops[k];
        const uint8_t *src = cur ? cur : b;
        uint8_t *next = NULL;
        size_t nn = 0;
        if (op->kind == NORM_NFC) {
#ifdef OJAS_HAVE_ICU
            oj_status st = nfc(src, cn, &next, &nn, err);
            if (st) {
                free(cur);
                return st;
            }
#endif
            if (!next)
                continue;
        } else if (op->kind == NORM_PREPEND || op->kind == NORM_META_PREPEND) {
            if (op->kind == NORM_META_PREPEND &&
                (cn == 0 /* an empty normalized text reaches no pre-tokenizer */ ||
                 op->scheme == META_NEVER || (op->scheme == META_FIRST && !first) ||
                 (cn >= op->al && memcmp(src, op->a, op->al) == 0)))
                continue;
            if (!(next = malloc(op->al + cn + 1)))
                goto nomem;
            memcpy(next, op->a, op->al);
            memcpy(next + op->al, src, cn);
            nn = op->al + cn;
        } else { /* REPLACE, left to right, matches not overlapping */
            size_t hits = 0;
            for (const uint8_t *p = src; (p = memmem(p, cn - (size_t)(p - src), op->a, op->al));
                 p += op->al)
                hits++;
            if (!hits)
                continue;
            nn = cn - hits * op->al + hits * op->bl;
            if (!(next = malloc(nn + 1)))
                goto nomem;
            size_t o = 0, i = 0;
            while (i < cn) {
                if (i + op->al <= cn && memcmp(src + i, op->a, op->al) == 0) {
                    memcpy(next + o, op->b, op->bl);
                    o += op->bl;
                    i += op->al;
                } else
                    next[o++] = src[i++];
            }
        }
        free(cur);
        cur = next;
        cn = nn;
    }
    *buf = cur;
    *bn = cn;
    return OJ_OK;
nomem:
    free(cur);
    return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer_encode: out of memory normalizing");
}

/* SentencePiece-style BPE of one piece (valid UTF-8): each character is its
 * token or, if the vocabulary lacks it, a symbol that never merges and is
 * written as its UTF-8 bytes' <0xXX> tokens; then merges by rank, lowest
 * first, leftmost on ties (the heap of merge.c). */
static oj_status sp_piece(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b, size_t n,
                          oj_tokens *out) {
    const struct oj_hf *x = tok->hfx;
    if (n > INT32_MAX / 4)
        return OJ_ERR_CAPACITY;
    if (oj_tok_session_reserve(s, n) != 0)
        return OJ_ERR_CAPACITY;
    int32_t *id = s->part_id, *next = s->part_next, *prev = s->part_prev;
    uint64_t *h = s->heap;
    int32_t N = 0;
    for (size_t i = 0; i < n;) {
        size_t l = 1;
        int32_t v;
        if (b[i] < 0x80)
            v = x->ascii_id[b[i]];
        else {
            uint32_t cp;
            l = (size_t)oj__utf8_decode(b + i, n - i, &cp);
            v = oj_bpe_rank(tok, b + i, l);
        }
        id[N] = v >= 0 ? v : -(int32_t)i - 2; /* unknown: -(offset) - 2 */
        next[N] = N + 1;
        prev[N] = N - 1;
        N++;
        i += l;
    }
    size_t hn = 0;
#define PAIR(a, c) ((a) < 0 || (c) < 0 ? -1 : oj_pairmap_get(&tok->pairs, (a), (c)))
    for (int32_t i = 0; i + 1 < N; i++) {
        int32_t r = PAIR(id[i], id[i + 1]);
        if (r >= 0)
            oj_heap_push(h, &hn, (uint64_t)r << 32 | (uint32_t)i);
    }
    while (hn) {
        uint64_t top = oj_heap_pop(h, &hn);
        int32_t r = (int32_t)(top >> 32), l = (int32_t)(uint32_t)top;
        if (id[l] < 0 || next[l] >= N || PAIR(id[l], id[next[l]]) != r)
            continue; /* stale */
        int32_t rt = next[l];
        id[l] = tok->merge_id[r];
        id[rt] = INT32_MIN;
        next[l] = next[rt];
        if (next[rt] < N)
            prev[next[rt]] = l;
        if (prev[l] >= 0) {
            int32_t q = PAIR(id[prev[l]], id[l]);
            if (q >= 0)
                oj_heap_push(h, &hn, (uint64_t)q << 32 | (uint32_t)prev[l]);
        }
        if (next[l] < N) {
            int32_t q = PAIR(id[l], id[next[l]]);
            if (q >= 0)
                oj_heap_push(h, &hn, (uint64_t)q << 32 | (uint32_t)l);
        }
    }
#undef PAIR
    for (int32_t i = 0; i < N; i = next[i]) {
        if (id[i] >= 0) {
            if (oj_tokens_push(out, id[i]) != OJ_OK)
                return OJ_ERR_CAPACITY;
            continue;
        }
        size_t off = (size_t)(-(int64_t)id[i] - 2);
        uint32_t cp;
        int l = oj__utf8_decode(b + off, n - off, &cp);
        for (int k = 0; k < l; k++)
            if (oj_tokens_push(out, x->byte_fb[b[off + (size_t)k]]) != OJ_OK)
                return OJ_ERR_CAPACITY;
    }
    return OJ_OK;
}

static oj_status encode_piece(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                              size_t n, oj_tokens *out) {
    return tok->hfx->sp ? sp_piece(tok, s, b, n, out) : oj_bpe_encode_piece(tok, s, b, n, out);
}

oj_status oj_hf_encode_ordinary(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                                size_t n, bool first, oj_tokens *out, oj_error *err) {
    if (n == 0)
        return OJ_OK;
    if (!oj__utf8_valid(b, n, NULL))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "tokenizer_encode: a tokenizer.json tokenizer needs valid UTF-8 text");
    uint8_t *norm = NULL;
    size_t nn = 0;
    oj_status st = normalize(tok->hfx, b, n, first, &norm, &nn, err);
    if (st)
        return st;
    if (norm) {
        b = norm;
        n = nn;
    }
    if (n == 0) {
        free(norm);
        return OJ_OK;
    }
    if (tok->hf_split == OJ_SPLIT_NONE) {
        if ((st = encode_piece(tok, s, b, n, out)))
            oj_error_set(err, st, "tokenizer_encode: out of memory");
        free(norm);
        return st;
    }
    size_t pos = 0;
    for (;;) {
        size_t start = pos, k;
        if (tok->hf_split == OJ_SPLIT_REGEX)
            k = oj_pretok_pcre2_split_isolated(tok->re, s->md, b, n, &pos, s->ends,
                                               OJ_SESSION_PIECES);
        else if (tok->pretok == OJ_PRETOK_PCRE2)
            k = oj_pretok_pcre2_split(tok->re, s->md, b, n, &pos, s->ends, OJ_SESSION_PIECES);
        else
            k = oj_pretok_split(b, n, &pos, s->ends, OJ_SESSION_PIECES);
        if (k == (size_t)-1) {
            st = oj_error_set(err, OJ_ERR_INTERNAL,
                              "tokenizer_encode: PCRE2 match failed at byte %zu", pos);
            break;
        }
        if (k == 0)
            break;
        for (size_t i = 0; i < k && !st; i++) {
            if ((st = encode_piece(tok, s, b + start, s->ends[i] - start, out)))
                oj_error_set(err, st, "tokenizer_encode: out of memory");
            start = s->ends[i];
        }
        if (st)
            break;
    }
    free(norm);
    return st;
}
