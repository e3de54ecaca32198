/* Corpus preparation: text files -> documents -> token stream (each document
 * preceded by the separator: <|endoftext|> or the tokenizer's EOS) ->
 * train/val shards. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "data/bpe.h"
#include "ojas/data.h"

oj_prepare_config oj_prepare_config_default(void) {
    return (oj_prepare_config){.out_dir = NULL, .val_fraction = 0.0, .shard_tokens = 100000000,
                               .threads = 0, .version = 0};
}

static oj_status slurp(const char *path, char **buf, size_t *len, oj_error *err) {
    oj_error e2 = {0};
    FILE *f = oj__fopen_regular(path, "corpus file", &e2); /* a directory or FIFO: say so */
    if (!f)
        return oj_error_set(err, OJ_ERR_IO, "data prepare: %s", e2.message);
    oj_status st = oj__read_stream(f, path, buf, len, NULL);
    fclose(f);
    if (st == OJ_ERR_CAPACITY)
        return oj_error_set(err, st, "data prepare: out of memory reading %s", path);
    if (st)
        return oj_error_set(err, st, "data prepare: read error on %s", path);
    return OJ_OK;
}

static oj_status write_split(const char *dir, const char *split, const int32_t *t, int64_t n,
                             int64_t per, int version, int *shards, oj_error *err) {
    size_t pl = strlen(dir) + strlen(split) + 32;
    char *path = malloc(pl);
    if (!path)
        return oj_error_set(err, OJ_ERR_CAPACITY, "data prepare: out of memory");
    oj_status st = OJ_OK;
    int k = 0;
    for (int64_t i = 0; i < n && !st; i += per, k++) {
        snprintf(path, pl, "%s/%s_%06d.bin", dir, split, k);
        st = oj_shard_write(path, t + i, n - i < per ? n - i : per, version, err);
    }
    free(path);
    *shards = k;
    return st;
}

/* A shard of either split, or a shard's temporary sibling
 * (".train_000001.bin.tmp-PID-K"). */
static bool shard_name(const char *nm) {
    if (nm[0] == '.') nm++;
    return (strncmp(nm, "train_", 6) == 0 || strncmp(nm, "val_", 4) == 0) && strstr(nm, ".bin");
}

/* out_dir before the first shard: an unfinished set (its marker there) is
 * removed, a finished one refuses; then the marker is made. */
static oj_status begin_set(const char *dir, oj_error *err) {
    char mark[4096], p[4096];
    oj_status st = oj__path_join(mark, sizeof mark, dir, OJ_PREPARE_INCOMPLETE, err);
    if (st) return st;
    struct stat sb;
    const bool unfinished = stat(mark, &sb) == 0;
    DIR *d = opendir(dir);
    if (!d)
        return oj_error_set(err, OJ_ERR_IO, "data prepare: cannot open %s: %s", dir, strerror(errno));
    struct dirent *de;
    while (!st && (de = readdir(d))) {
        if (!shard_name(de->d_name)) continue;
        if (!unfinished)
            st = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                              "data prepare: %s already holds shards (%s): a new set would mix with "
                              "them; remove them or choose another --out",
                              dir, de->d_name);
        else if (!(st = oj__path_join(p, sizeof p, dir, de->d_name, err)) && unlink(p) != 0)
            st = oj_error_set(err, OJ_ERR_IO, "data prepare: cannot remove %s of an unfinished "
                              "prepare: %s", p, strerror(errno));
    }
    closedir(d);
    static const char note[] = "an ojas data prepare is writing here; removed when it ends\n";
    if (!st) st = oj__atomic_write(mark, note, sizeof note - 1, err);
    return st;
}

/* after the last shard: the set is whole */
static oj_status end_set(const char *dir, oj_error *err) {
    char mark[4096];
    oj_status st = oj__path_join(mark, sizeof mark, dir, OJ_PREPARE_INCOMPLETE, err);
    if (!st && unlink(mark) != 0)
        st = oj_error_set(err, OJ_ERR_IO, "data prepare: cannot remove %s: %s", mark, strerror(errno));
    return st ? st : oj__fsync_dir(dir, err);
}

/* Documents of one file (cut at "<|endoftext|>" and at sep[0..seplen), empty
 * ones dropped), each appended to *all after the separator id eot: small
 * documents are encoded as a batch over the threads, large ones split
 * across them. */
static oj_status encode_file(const oj_tokenizer *tok, const char *buf, size_t len, int threads,
                             int32_t eot, const char *sep, size_t seplen, oj_tokens *all,
                             int64_t *documents, oj_error *err) {
    size_t cap = 16, nd = 0, pos = 0;
    size_t at_e = 0, at_s = len; /* next "<|endoftext|>", next sep (len: none) */
    bool seen_e = false, seen_s = !seplen;
    const char **docs = malloc(cap * sizeof *docs);
    size_t *lens = malloc(cap * sizeof *lens);
    oj_status st = OJ_OK;
    while (docs && lens && pos <= len) {
        /* each text is searched for again only once pos has passed it */
        if (!seen_e || at_e < pos) {
            const char *p = memmem(buf + pos, len - pos, "<|endoftext|>", 13);
            at_e = p ? (size_t)(p - buf) : len;
            seen_e = true;
        }
        if (!seen_s || at_s < pos) {
            const char *p = memmem(buf + pos, len - pos, sep, seplen);
            at_s = p ? (size_t)(p - buf) : len;
            seen_s = true;
        }
        size_t end = at_e < at_s ? at_e : at_s;
        size_t cl = end == len ? 1 : at_e == end && (at_s != end || 13 >= seplen) ? 13 : seplen;
        if (end > pos) {
            if (nd == cap) {
                cap *= 2;
                const char **d = realloc(docs, cap * sizeof *d);
                size_t *l = d ? realloc(lens, cap * sizeof *l) : NULL;
                if (d)
                    docs = d;
                if (l)
                    lens = l;
                if (!d || !l)
                    break;
            }
            docs[nd] = buf + pos;
            lens[nd++] = end - pos;
        }
        pos = end + cl;
    }
    oj_tokens *outs = docs && lens && pos > len ? calloc(nd ? nd : 1, sizeof *outs) : NULL;
    if (!outs) {
        free(docs);
        free(lens);
        return oj_error_set(err, OJ_ERR_CAPACITY, "data prepare: out of memory");
    }
    /* large documents: one parallel encode each; the rest: one batch */
    const size_t large = (size_t)1 << 22;
    size_t nsmall = 0;
    for (size_t i = 0; i < nd && !st; i++)
        if (lens[i] >= large)
            st = oj_tokenizer_encode_parallel(tok, docs[i], lens[i], OJ_ENCODE_SPECIAL_AS_TEXT,
                                              threads, &outs[i], err);
        else
            nsmall++;
    if (!st && nsmall) {
        const char **sd = malloc(nsmall * sizeof *sd);
        size_t *sl = malloc(nsmall * sizeof *sl);
        oj_tokens *so = calloc(nsmall, sizeof *so);
        if (!sd || !sl || !so)
            st = oj_error_set(err, OJ_ERR_CAPACITY, "data prepare: out of memory");
        else {
            size_t k = 0;
            for (size_t i = 0; i < nd; i++)
                if (lens[i] < large) {
                    sd[k] = docs[i];
                    sl[k++] = lens[i];
                }
            st = oj_tokenizer_encode_batch(tok, nsmall, sd, sl, OJ_ENCODE_SPECIAL_AS_TEXT, threads,
                                           so, err);
            k = 0;
            for (size_t i = 0; i < nd; i++)
                if (lens[i] < large)
                    outs[i] = so[k++];
        }
        free(sd);
        free(sl);
        free(so);
    }
    for (size_t i = 0; i < nd; i++) {
        if (!st) {
            if (oj_tokens_push(all, eot) != OJ_OK)
                st = oj_error_set(err, OJ_ERR_CAPACITY, "data prepare: out of memory");
            for (size_t k = 0; k < outs[i].len && !st; k++)
                if (oj_tokens_push(all, outs[i].ids[k]) != OJ_OK)
                    st = oj_error_set(err, OJ_ERR_CAPACITY, "data prepare: out of memory");
        }
        oj_tokens_free(&outs[i]);
    }
    *documents += (int64_t)nd;
    free(outs);
    free(docs);
    free(lens);
    return st;
}

oj_status oj_data_prepare(const oj_tokenizer *tok, const oj_prepare_config *cfg, int n,
                          const char *const *files, oj_prepare_stats *stats, oj_error *err) {
    if (!tok || !cfg || !cfg->out_dir || n < 0 || (n && !files))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "data prepare: NULL argument");
    if (!(cfg->val_fraction >= 0.0 && cfg->val_fraction < 1.0) || cfg->shard_tokens < 1 ||
        cfg->shard_tokens > INT32_MAX || (cfg->version < 0 || cfg->version > 2))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "data prepare: val_fraction %g must be in [0, 1), shard_tokens %lld in "
                            "[1, 2^31), version %d 0, 1 or 2",
                            cfg->val_fraction, (long long)cfg->shard_tokens, cfg->version);
    int32_t eot = oj_tokenizer_eot(tok);
    if (eot < 0 && tok->eos_note)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "data prepare: the tokenizer has no <|endoftext|> and names no EOS "
                            "token to separate documents with: %s",
                            tok->eos_note);
    if (eot < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "data prepare: the tokenizer has neither <|endoftext|> nor an EOS "
                            "token to separate documents with");
    /* the separator's text where it is not <|endoftext|> (always a cut) */
    const char *sep = NULL;
    size_t seplen = 0;
    for (int i = 0; i < tok->n_specials; i++) {
        const oj_special *sp = &tok->specials[i];
        if (sp->id == eot && !(sp->len == 13 && memcmp(sp->text, "<|endoftext|>", 13) == 0)) {
            sep = sp->text;
            seplen = sp->len;
        }
    }
    int version = cfg->version ? cfg->version : (oj_tokenizer_vocab_size(tok) <= 65536 ? 1 : 2);
    if (version == 1 && oj_tokenizer_vocab_size(tok) > 65536)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "data prepare: vocabulary of %d ids does not fit uint16 shards",
                            (int)oj_tokenizer_vocab_size(tok));
    oj_status st = OJ_OK;
    oj_prepare_stats s = {.separator = eot};
    oj_tokens all = {0};
    for (int f = 0; f < n && !st; f++) {
        char *buf = NULL;
        size_t len = 0;
        if ((st = slurp(files[f], &buf, &len, err)))
            break;
        s.bytes += (int64_t)len;
        st = encode_file(tok, buf, len, cfg->threads, eot, sep, seplen, &all, &s.documents, err);
        free(buf);
    }
    if (!st && all.len > INT64_MAX / 2)
        st = oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "data prepare: too many tokens");
    if (!st) /* once every file is read and encoded: a bad input leaves no out_dir behind */
        st = oj__mkdirs(cfg->out_dir, err);
    if (!st)
        st = begin_set(cfg->out_dir, err);
    if (!st) {
        int64_t total = (int64_t)all.len;
        int64_t nval = (int64_t)(cfg->val_fraction * (double)total + 0.5);
        if (nval > total)
            nval = total;
        s.train_tokens = total - nval;
        s.val_tokens = nval;
        st = write_split(cfg->out_dir, "train", all.ids, s.train_tokens, cfg->shard_tokens, version,
                         &s.train_shards, err);
        if (!st)
            st = write_split(cfg->out_dir, "val", all.ids + s.train_tokens, nval, cfg->shard_tokens,
                             version, &s.val_shards, err);
        if (!st)
            st = end_set(cfg->out_dir, err);
    }
    oj_tokens_free(&all);
    if (stats)
        *stats = s;
    return st;
}
