/* Loading tokenizers: GPT-2 encoder.json (jansson) + vocab.bpe, tiktoken
 * rank files, and a directory holding either (or a tokenizer.json:
 * tokenizer_json.c). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/fs.h"
#include "data/bpe.h"
#include "data/pretok.h"
#include "data/tiktoken.h"
#include "data/unicode.h"
#include "io/io_internal.h"

/* Read a whole regular file into a NUL-terminated buffer (core/fs.h's
 * reader, its message prefixed with "tokenizer: "). */
static oj_status read_file(const char *path, char **buf, size_t *len, oj_error *err) {
    oj_error e2 = {0};
    uint8_t *b = NULL;
    oj_status st = oj__read_file(path, SIZE_MAX, &b, len, &e2);
    if (st)
        return oj_error_set(err, st, "tokenizer: %s", e2.message);
    *buf = (char *)b;
    return OJ_OK;
}

/* The id table is sized by the largest id, so ids far beyond the number of
 * entries (a file of a few lines naming id 2e9 would need gigabytes) are
 * refused as corrupt; real vocabularies are dense. */
static int64_t id_limit(size_t entries) {
    uint64_t lim = (uint64_t)entries * 2 + 1024;
    return lim > INT32_MAX - 2 ? INT32_MAX - 2 : (int64_t)lim;
}

/* GPT-2 byte-to-unicode string -> bytes (at most as many as s has). */
static bool unmap_gpt2(const char *s, size_t n, uint8_t *out, size_t *outlen) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int l = oj__utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!l)
            return false;
        int b = oj_gpt2_cp_to_byte(cp);
        if (b < 0)
            return false;
        out[o++] = (uint8_t)b;
        i += (size_t)l;
    }
    *outlen = o;
    return true;
}

/* The GPT-2 tokenizer of an encoder.json object (token -> id) and the
 * text of a vocab.bpe; names for the messages. Takes root and bpe (freed
 * here). */
static oj_status gpt2_build(json_t *root, char *bpe, size_t bpe_len, const char *encoder_json,
                           const char *vocab_bpe, oj_tokenizer **out, oj_error *err) {
    oj_status st = OJ_OK;
    oj_tokenizer *tok = NULL;
    oj_strmap enc = {0}, made = {0};
    uint8_t *tmp = NULL;
    if (!json_is_object(root)) {
        st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s is not a JSON object", encoder_json);
        goto done;
    }
    tok = oj_bpe_new();
    size_t nkeys = json_object_size(root);
    if (!tok || oj_strmap_init(&enc, nkeys) || oj_strmap_init(&made, nkeys) ||
        !(tmp = malloc(bpe_len + 1024))) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
        goto done;
    }
    /* encoder.json: bytes -> id (entries decoded into `enc`) */
    const char *key;
    json_t *val;
    size_t maxkey = 0;
    json_object_foreach(root, key, val) {
        size_t kl = strlen(key);
        if (kl > maxkey)
            maxkey = kl;
    }
    uint8_t *kb = malloc(maxkey + 1);
    if (!kb) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
        goto done;
    }
    json_object_foreach(root, key, val) {
        size_t bl;
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= INT32_MAX) {
            st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s: \"%s\" has no valid id",
                              encoder_json, key);
            break;
        }
        if (id > id_limit(nkeys)) {
            st = oj_error_set(err, OJ_ERR_CORRUPT,
                              "tokenizer: %s: \"%s\" has id %lld, far beyond the %zu entries",
                              encoder_json, key, (long long)id, nkeys);
            break;
        }
        if (!unmap_gpt2(key, strlen(key), kb, &bl) || bl == 0) {
            st = oj_error_set(err, OJ_ERR_CORRUPT,
                              "tokenizer: %s: key \"%s\" is not a GPT-2 byte string", encoder_json,
                              key);
            break;
        }
        bool added;
        if (oj_strmap_put(&enc, kb, bl, oj_strmap_hash(kb, bl), id, &added) < 0) {
            st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
            break;
        }
        if (!added) {
            st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s: key \"%s\" appears twice",
                              encoder_json, key);
            break;
        }
    }
    free(kb);
    if (st)
        goto done;
    /* vocab.bpe: "#version" line, then "A B" per merge in priority order */
    size_t line_no = 0, nm = 0, cap_m = 0;
    char *p = bpe, *end = bpe + bpe_len;
    int64_t prev_id = -1;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        line_no++;
        size_t ll = (size_t)(le - p);
        if (ll && p[ll - 1] == '\r')
            ll--;
        if (ll == 0 || (line_no == 1 && ll >= 8 && memcmp(p, "#version", 8) == 0)) {
            p = le + 1;
            continue;
        }
        char *sp = memchr(p, ' ', ll);
        size_t la, lb;
        if (!sp || sp == p || sp == p + ll - 1 || memchr(sp + 1, ' ', ll - (size_t)(sp - p) - 1) ||
            !unmap_gpt2(p, (size_t)(sp - p), tmp, &la) ||
            !unmap_gpt2(sp + 1, ll - (size_t)(sp - p) - 1, tmp + la, &lb)) {
            st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s:%zu: expected two GPT-2 byte "
                              "strings separated by one space", vocab_bpe, line_no);
            goto done;
        }
        int64_t ea = oj_strmap_find(&enc, tmp, la, oj_strmap_hash(tmp, la));
        int64_t eb = oj_strmap_find(&enc, tmp + la, lb, oj_strmap_hash(tmp + la, lb));
        int64_t ec = oj_strmap_find(&enc, tmp, la + lb, oj_strmap_hash(tmp, la + lb));
        if (ea < 0 || eb < 0 || ec < 0) {
            st = oj_error_set(err, OJ_ERR_CORRUPT,
                              "tokenizer: %s:%zu: the merge or one of its parts is not in %s",
                              vocab_bpe, line_no, encoder_json);
            goto done;
        }
        int64_t id = enc.ents[ec].value;
        if (id <= prev_id) {
            st = oj_error_set(err, OJ_ERR_UNSUPPORTED,
                              "tokenizer: %s:%zu: merge gives id %lld after id %lld; only "
                              "vocabularies whose ids follow the merge order are supported",
                              vocab_bpe, line_no, (long long)id, (long long)prev_id);
            goto done;
        }
        prev_id = id;
        bool added;
        if (oj_strmap_put(&made, tmp, la + lb, oj_strmap_hash(tmp, la + lb), id, &added) < 0) {
            st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
            goto done;
        }
        if (nm == cap_m) {
            cap_m = cap_m ? cap_m * 2 : 1024;
            int32_t(*m)[2] = realloc(tok->merges, cap_m * sizeof *m);
            if (!m) {
                st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
                goto done;
            }
            tok->merges = m;
        }
        tok->merges[nm][0] = (int32_t)enc.ents[ea].value;
        tok->merges[nm][1] = (int32_t)enc.ents[eb].value;
        nm++;
        p = le + 1;
    }
    tok->n_merges = (int64_t)nm;
    /* Mergeable: single bytes and merge results; the rest are specials.
     * A special is text that BPE never meets whole: the pre-tokenizer cuts
     * it ("<|endoftext|>" -> "<|" "endoftext" "|>"). An entry that is one
     * pre-tokenizer piece but no merge's result ("Ġthe") can only mean that
     * its merge is missing from vocab.bpe (a truncated or empty file would
     * otherwise turn the rest of the vocabulary into specials and change
     * every tokenization): refused, naming the entry with the lowest id. */
    int64_t orphan = -1;
    for (size_t e = 0; e < enc.n; e++) {
        const uint8_t *b = enc.keys + enc.ents[e].off;
        size_t bl = enc.ents[e].len, pos = 0, pend = 0;
        if (bl == 1 || oj_strmap_find(&made, b, bl, oj_strmap_hash(b, bl)) >= 0)
            continue;
        if (oj_pretok_split(b, bl, &pos, &pend, 1) == 1 && pend == bl &&
            (orphan < 0 || enc.ents[e].value < enc.ents[orphan].value))
            orphan = (int64_t)e;
    }
    if (orphan >= 0) {
        const uint8_t *b = enc.keys + enc.ents[orphan].off;
        char q[96];
        size_t bl = enc.ents[orphan].len, o = 0;
        for (size_t i = 0; i < bl && o + 5 < sizeof q; i++)
            o += (size_t)snprintf(q + o, sizeof q - o, b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"'
                                                           ? "%c" : "\\x%02x", b[i]);
        st = oj_error_set(err, OJ_ERR_CORRUPT,
                          "tokenizer: %s: \"%s\" (id %lld) is neither a byte nor the result of a "
                          "merge in %s, which ends at line %zu after %zu merges (truncated?); "
                          "%s has %zu entries",
                          encoder_json, q, (long long)enc.ents[orphan].value, vocab_bpe, line_no,
                          nm, encoder_json, enc.n);
        goto done;
    }
    for (size_t e = 0; e < enc.n; e++) {
        const uint8_t *b = enc.keys + enc.ents[e].off;
        size_t bl = enc.ents[e].len;
        int32_t id = (int32_t)enc.ents[e].value;
        bool mergeable = bl == 1 || oj_strmap_find(&made, b, bl, oj_strmap_hash(b, bl)) >= 0;
        st = mergeable ? oj_bpe_add_token(tok, b, bl, id, err) : oj_bpe_add_special(tok, b, bl, id, err);
        if (st)
            goto done;
    }
    st = oj_bpe_finish(tok, err);
done:
    free(tmp);
    free(bpe);
    oj_strmap_free(&enc);
    oj_strmap_free(&made);
    json_decref(root);
    if (st) {
        oj_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return OJ_OK;
}

oj_status oj_tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe,
                                 oj_tokenizer **out, oj_error *err) {
    if (!out || !encoder_json || !vocab_bpe)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_load_gpt2: NULL argument");
    *out = NULL;
    char *ejson = NULL, *bpe = NULL;
    size_t ejson_len = 0, bpe_len = 0;
    oj_status st = read_file(encoder_json, &ejson, &ejson_len, err);
    if (st)
        return st;
    json_error_t je;
    json_t *root = json_loadb(ejson, ejson_len, 0, &je);
    free(ejson);
    if (!root)
        return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s:%d:%d: %s", encoder_json, je.line,
                            je.column, je.text);
    if (json_is_object(root) && (st = read_file(vocab_bpe, &bpe, &bpe_len, err))) {
        json_decref(root);
        return st;
    }
    return gpt2_build(root, bpe, bpe_len, encoder_json, vocab_bpe, out, err);
}

oj_status oj_tokenizer_from_gpt2_lists(int64_t n_tokens, const char *const *tokens,
                                       int64_t n_merges, const char *const *merges,
                                       const char *what, oj_tokenizer **out, oj_error *err) {
    if (!out || (n_tokens && !tokens) || (n_merges && !merges) || n_tokens < 0 || n_merges < 0 ||
        n_tokens >= INT32_MAX)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_from_gpt2_lists: bad argument");
    *out = NULL;
    if (!what)
        what = "tokenizer lists";
    char ename[256], bname[256];
    snprintf(ename, sizeof ename, "%s (tokens)", what);
    snprintf(bname, sizeof bname, "%s (merges)", what);
    json_t *root = json_object();
    size_t bl = 16;
    for (int64_t i = 0; i < n_merges; i++)
        bl += (merges[i] ? strlen(merges[i]) : 0) + 1;
    char *bpe = malloc(bl);
    if (!root || !bpe) {
        json_decref(root);
        free(bpe);
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
    }
    for (int64_t i = 0; i < n_tokens; i++) {
        if (!tokens[i])
            continue;
        if (json_object_get(root, tokens[i])) {
            json_decref(root);
            free(bpe);
            return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s: token \"%.40s\" (id %lld) "
                                "appears twice", ename, tokens[i], (long long)i);
        }
        if (json_object_set_new(root, tokens[i], json_integer(i))) {
            json_decref(root);
            free(bpe);
            return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s: token id %lld is not UTF-8",
                                ename, (long long)i);
        }
    }
    size_t o = 0;
    for (int64_t i = 0; i < n_merges; i++) {
        size_t l = merges[i] ? strlen(merges[i]) : 0;
        if (l == 0 || memchr(merges[i], '\n', l)) {
            json_decref(root);
            free(bpe);
            return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s: merge %lld is empty or "
                                "holds a newline", bname, (long long)i);
        }
        memcpy(bpe + o, merges[i], l);
        o += l;
        bpe[o++] = '\n';
    }
    return gpt2_build(root, bpe, o, ename, bname, out, err);
}

static int b64val(int c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Standard base64 with '=' padding; returns the length or -1. */
static long b64decode(const char *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4)
        return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                if (pad)
                    return -1;
                v[k] = b64val((unsigned char)s[i + k]);
                if (v[k] < 0)
                    return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    return o;
}

/* Identifying a rank file's encoding. A tiktoken file carries only
 * (bytes, rank) pairs, not the pre-tokenisation pattern its ranks were made
 * with nor its special tokens, and ranks encoded with another encoding's
 * pattern give wrong ids. So a file is accepted only when it holds the
 * ranks of an encoding ojas knows exactly: ranks 0..n-1, each once (ids are
 * checked unique as they are added), whose (length, bytes) sequence in rank
 * order hashes (XXH3-64) to the encoding's value below. Line order, line
 * endings and base64 spelling do not matter; a single changed byte or rank
 * does. GPT-2's (tiktoken's "gpt2" / r50k_base; value computed from
 * GPT-2's encoder.json) use the GPT-2 pattern and "<|endoftext|>" after the
 * last rank; cl100k_base and o200k_base (values computed from js-tiktoken
 * 1.0.21's ranks, which are OpenAI's published files) use their own patterns
 * and special tokens (tiktoken.h). */
#define GPT2_N_RANKS 50256
#define GPT2_RANKS_XXH3 UINT64_C(0x58b09f73d0154297)

static const struct {
    const char *name;
    uint64_t xxh3;
} k_known_hash[] = {
    {"cl100k_base", UINT64_C(0x64f9248544abd515)},
    {"o200k_base", UINT64_C(0x68e1412d320908c2)},
};

static uint64_t ranks_hash(const oj_tokenizer *tok, int32_t n) {
    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return 0;
    XXH3_64bits_reset(s);
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        const uint8_t *b = oj_tokenizer_token_bytes(tok, id, &len);
        uint8_t l4[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
        XXH3_64bits_update(s, l4, 4);
        if (b && len)
            XXH3_64bits_update(s, b, len);
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

uint64_t oj__tokenizer_ranks_hash(const oj_tokenizer *tok, int32_t n) { return ranks_hash(tok, n); }

/* Which encoding the ranks of tok are: NULL for GPT-2's, else the entry of
 * oj_tiktoken_encodings; *known is false when neither (error set, naming
 * the encoding when the number of ranks is that of a public one). */
static const oj_tiktoken_encoding *identify_ranks(const char *path, const oj_tokenizer *tok,
                                                  int64_t n_ranks, int64_t max_id, bool *known,
                                                  oj_error *err) {
    *known = true;
    if (n_ranks == GPT2_N_RANKS && max_id == GPT2_N_RANKS - 1 &&
        ranks_hash(tok, GPT2_N_RANKS) == GPT2_RANKS_XXH3)
        return NULL;
    for (int i = 0; i < oj_tiktoken_n_encodings; i++) {
        const oj_tiktoken_encoding *e = &oj_tiktoken_encodings[i];
        if (n_ranks != e->n_ranks || max_id != e->n_ranks - 1)
            continue;
        uint64_t want = 0;
        for (size_t k = 0; k < sizeof k_known_hash / sizeof k_known_hash[0]; k++)
            if (strcmp(k_known_hash[k].name, e->name) == 0)
                want = k_known_hash[k].xxh3;
        if (ranks_hash(tok, e->n_ranks) == want)
            return e;
        *known = false;
        oj_error_set(err, OJ_ERR_UNSUPPORTED,
                     "tokenizer: %s holds %lld ranks, as tiktoken's %s does, but they are not "
                     "%s's (a byte or rank differs); ojas cannot tell which pre-tokenisation "
                     "pattern they were made with",
                     path, (long long)n_ranks, e->name, e->name);
        return NULL;
    }
    *known = false;
    if (n_ranks == GPT2_N_RANKS)
        oj_error_set(err, OJ_ERR_UNSUPPORTED,
                     "tokenizer: %s holds %lld ranks, as tiktoken's gpt2 (r50k_base) does, but "
                     "they are not GPT-2's (a byte or rank differs); ojas cannot tell which "
                     "pre-tokenisation pattern they were made with (for a rank file of a "
                     "tokenizer trained with ojas, use oj_tokenizer_load_tiktoken_as_gpt2)",
                     path, (long long)n_ranks);
    else if (n_ranks == 50281)
        oj_error_set(err, OJ_ERR_UNSUPPORTED,
                     "tokenizer: %s holds %lld ranks, as tiktoken's p50k_base does; ojas knows "
                     "the encodings gpt2 (r50k_base), cl100k_base and o200k_base, not p50k_base",
                     path, (long long)n_ranks);
    else
        oj_error_set(err, OJ_ERR_UNSUPPORTED,
                     "tokenizer: %s holds %lld ranks that are none of tiktoken's gpt2 (%d ranks), "
                     "cl100k_base (%d) or o200k_base (%d); ojas cannot tell which "
                     "pre-tokenisation pattern they were made with (for a rank file of a "
                     "tokenizer trained with ojas, use oj_tokenizer_load_tiktoken_as_gpt2 or the "
                     "directory with encoder.json and vocab.bpe)",
                     path, (long long)n_ranks, GPT2_N_RANKS, oj_tiktoken_encodings[0].n_ranks,
                     oj_tiktoken_encodings[1].n_ranks);
    return NULL;
}

static oj_status load_tiktoken(const char *path, bool identify, oj_tokenizer **out,
                               oj_error *err) {
    if (!out || !path)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_load_tiktoken: NULL argument");
    *out = NULL;
    int64_t n_ranks = 0;
    char *buf = NULL;
    size_t len = 0;
    oj_status st = read_file(path, &buf, &len, err);
    if (st)
        return st;
    oj_tokenizer *tok = oj_bpe_new();
    uint8_t *tmp = malloc(len + 4);
    if (!tok || !tmp) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
        goto done;
    }
    char *p = buf, *end = buf + len;
    size_t line_no = 0, n_lines = 1;
    int64_t max_id = -1;
    for (char *q = buf; (q = memchr(q, '\n', (size_t)(end - q))); q++)
        n_lines++;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        line_no++;
        size_t ll = (size_t)(le - p);
        if (ll && p[ll - 1] == '\r')
            ll--;
        if (ll == 0) {
            p = le + 1;
            continue;
        }
        char *sp = memchr(p, ' ', ll);
        long bl = sp ? b64decode(p, (size_t)(sp - p), tmp) : -1;
        char *num = sp ? sp + 1 : NULL, *numend = p + ll;
        long long id = -1;
        if (num && num < numend) {
            id = 0;
            for (char *q = num; q < numend; q++) {
                if (*q < '0' || *q > '9' || id > INT32_MAX) {
                    id = -1;
                    break;
                }
                id = id * 10 + (*q - '0');
            }
        }
        if (bl <= 0 || id < 0 || id >= INT32_MAX - 1) {
            st = oj_error_set(err, OJ_ERR_CORRUPT,
                              "tokenizer: %s:%zu: expected \"<base64 bytes> <rank>\"", path, line_no);
            goto done;
        }
        if (id > id_limit(n_lines)) {
            st = oj_error_set(err, OJ_ERR_CORRUPT,
                              "tokenizer: %s:%zu: rank %lld is far beyond the file's %zu lines",
                              path, line_no, id, n_lines);
            goto done;
        }
        if ((st = oj_bpe_add_token(tok, tmp, (size_t)bl, (int32_t)id, err)))
            goto done;
        n_ranks++;
        if (id > max_id)
            max_id = id;
        p = le + 1;
    }
    if (max_id < 0) {
        st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s holds no ranks", path);
        goto done;
    }
    const oj_tiktoken_encoding *enc = NULL;
    bool known = true;
    oj_error iderr = {0};
    if (identify) /* reported after the checks of the format: a malformed file says so first */
        enc = identify_ranks(path, tok, n_ranks, max_id, &known, &iderr);
    if (enc) {
        for (int i = 0; i < enc->n_specials; i++)
            if ((st = oj_bpe_add_special(tok, (const uint8_t *)enc->specials[i].text,
                                         strlen(enc->specials[i].text), enc->specials[i].id, err)))
                goto done;
        char msg[256];
        if (!(tok->re = oj_pretok_pcre2_compile_pattern(enc->pattern, msg, sizeof msg))) {
            st = oj_error_set(err, OJ_ERR_INTERNAL, "tokenizer: %s pattern: %s", enc->name, msg);
            goto done;
        }
        tok->pretok = OJ_PRETOK_PCRE2;
        tok->encoding = enc->name;
    } else if ((st = oj_bpe_add_special(tok, (const uint8_t *)"<|endoftext|>", 13,
                                        (int32_t)max_id + 1, err)))
        goto done;
    st = oj_bpe_finish(tok, err);
    if (!st && !known)
        st = oj_error_set(err, iderr.status, "%s", iderr.message);
done:
    free(tmp);
    free(buf);
    if (st) {
        oj_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return OJ_OK;
}

oj_status oj_tokenizer_load_tiktoken(const char *path, oj_tokenizer **out, oj_error *err) {
    return load_tiktoken(path, true, out, err);
}

oj_status oj_tokenizer_load_tiktoken_as_gpt2(const char *path, oj_tokenizer **out, oj_error *err) {
    return load_tiktoken(path, false, out, err);
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* present at all: a tokenizer.json that is a FIFO is refused by its reader */
static bool is_present(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static bool is_present_in(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return is_present(p);
}

oj_status oj_tokenizer_load(const char *dir, oj_tokenizer **out, oj_error *err) {
    if (!dir || !out)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_load: NULL argument");
    *out = NULL;
    size_t dl = strlen(dir);
    char *a = malloc(dl + 32), *b = malloc(dl + 32);
    if (!a || !b) {
        free(a);
        free(b);
        return oj_error_set(err, OJ_ERR_CAPACITY, "tokenizer: out of memory");
    }
    snprintf(a, dl + 32, "%s/encoder.json", dir);
    snprintf(b, dl + 32, "%s/vocab.bpe", dir);
    oj_status st;
    if (is_file(a) && is_file(b)) {
        st = oj_tokenizer_load_gpt2(a, b, out, err);
        free(a);
        free(b);
        if (!st)
            oj__tokenizer_find_eos(*out, dir);
        return st;
    }
    /* the same two files under transformers' names (a GPT-2 model directory) */
    snprintf(a, dl + 32, "%s/vocab.json", dir);
    snprintf(b, dl + 32, "%s/merges.txt", dir);
    if (is_file(a) && is_file(b) && !is_present_in(dir, "tokenizer.json")) {
        st = oj_tokenizer_load_gpt2(a, b, out, err);
        free(a);
        free(b);
        if (!st)
            oj__tokenizer_find_eos(*out, dir);
        return st;
    }
    snprintf(a, dl + 32, "%s/tokenizer.json", dir);
    if (is_present(a)) {
        st = oj_tokenizer_load_hf(a, out, err);
        free(a);
        free(b);
        return st;
    }
    free(a);
    free(b);
    DIR *d = opendir(dir);
    if (!d)
        return oj_error_set(err, OJ_ERR_IO, "tokenizer: cannot open directory %s: %s", dir,
                            strerror(errno));
    char *found = NULL;
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (nl > 9 && strcmp(de->d_name + nl - 9, ".tiktoken") == 0) {
            count++;
            if (!found) {
                found = malloc(dl + nl + 2);
                if (found)
                    snprintf(found, dl + nl + 2, "%s/%s", dir, de->d_name);
            }
        }
    }
    closedir(d);
    if (count == 0) {
        free(found);
        /* one of the names present but not a regular file (a FIFO, a
         * directory): refused by name and kind, not called absent */
        static const char *const names[] = {"encoder.json", "vocab.bpe",
                                            "vocab.json", "merges.txt"};
        char p[4200];
        struct stat sb;
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            int fd;
            if (stat(p, &sb) != 0 || S_ISREG(sb.st_mode)) continue;
            oj_status rs = oj__open_regular(p, "tokenizer file", &fd, NULL, err);
            if (rs) return rs;
            close(fd); /* (it became a regular file meanwhile) */
        }
        return oj_error_set(err, OJ_ERR_IO,
                            "tokenizer: %s holds neither encoder.json + vocab.bpe, tokenizer.json "
                            "nor a *.tiktoken rank file",
                            dir);
    }
    if (count > 1 || !found) {
        free(found);
        return oj_error_set(err, count > 1 ? OJ_ERR_INVALID_ARGUMENT : OJ_ERR_CAPACITY,
                            "tokenizer: %s holds %d *.tiktoken files; expected one", dir, count);
    }
    st = oj_tokenizer_load_tiktoken(found, out, err);
    free(found);
    if (!st)
        oj__tokenizer_find_eos(*out, dir);
    return st;
}
