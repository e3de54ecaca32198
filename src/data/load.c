/* Loading tokenizers: GPT-2 encoder.json (jansson) + vocab.bpe, tiktoken
 * rank files, and a directory holding either. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "data/bpe.h"
#include "data/unicode.h"

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

oj_status oj_tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe,
                                 oj_tokenizer **out, oj_error *err) {
    if (!out || !encoder_json || !vocab_bpe)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_load_gpt2: NULL argument");
    *out = NULL;
    json_error_t je;
    json_t *root = json_load_file(encoder_json, 0, &je);
    if (!root) {
        FILE *f = fopen(encoder_json, "rb");
        if (!f)
            return oj_error_set(err, OJ_ERR_IO, "tokenizer: cannot open %s: %s", encoder_json,
                                strerror(errno));
        fclose(f);
        return oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s:%d:%d: %s", encoder_json, je.line,
                            je.column, je.text);
    }
    char *bpe = NULL;
    size_t bpe_len = 0;
    oj_status st = OJ_OK;
    oj_tokenizer *tok = NULL;
    oj_strmap enc = {0}, made = {0};
    uint8_t *tmp = NULL;
    if (!json_is_object(root)) {
        st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s is not a JSON object", encoder_json);
        goto done;
    }
    if ((st = read_file(vocab_bpe, &bpe, &bpe_len, err)))
        goto done;
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
    /* Mergeable: single bytes and merge results; the rest are specials. */
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

oj_status oj_tokenizer_load_tiktoken(const char *path, oj_tokenizer **out, oj_error *err) {
    if (!out || !path)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "tokenizer_load_tiktoken: NULL argument");
    *out = NULL;
    char *buf;
    size_t len;
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
        if (id > max_id)
            max_id = id;
        p = le + 1;
    }
    if (max_id < 0) {
        st = oj_error_set(err, OJ_ERR_CORRUPT, "tokenizer: %s holds no ranks", path);
        goto done;
    }
    if ((st = oj_bpe_add_special(tok, (const uint8_t *)"<|endoftext|>", 13, (int32_t)max_id + 1, err)))
        goto done;
    st = oj_bpe_finish(tok, err);
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

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
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
        return oj_error_set(err, OJ_ERR_IO,
                            "tokenizer: %s holds neither encoder.json + vocab.bpe nor a *.tiktoken "
                            "rank file",
                            dir);
    }
    if (count > 1 || !found) {
        free(found);
        return oj_error_set(err, count > 1 ? OJ_ERR_INVALID_ARGUMENT : OJ_ERR_CAPACITY,
                            "tokenizer: %s holds %d *.tiktoken files; expected one", dir, count);
    }
    st = oj_tokenizer_load_tiktoken(found, out, err);
    free(found);
    return st;
}
