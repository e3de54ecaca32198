/* Fuzz target: the llm.c token shard reader (oj_shard_open / len / version /
 * read), the writer on what it accepted, and the batch loader over it.
 *
 * Input layout: 12 bytes of parameters, then the shard file itself (written
 * to <scratch>/train_000000.bin). Parameters: int32 LE start, int32 LE
 * count (a read at a fuzzer-chosen range), uint8 loader T, uint8 loader B,
 * uint8 flags (bit 0: shuffle, bit 1: int32 batches), uint8 vocabulary
 * limit (0: none, else limit * 64). tests/fuzz/make_corpus_data.py writes
 * seeds in this layout.
 *
 * Checks: a refusal is OJ_ERR_CORRUPT (or OJ_ERR_IO) with a message and no
 * shard; an accepted shard's size is exactly header + len * width for its
 * version and its reserved header ints are 0; oj_shard_check_vocab refuses
 * exactly the shards holding a token >= the limit (1000 when the parameter
 * is 0); reads inside [0, len] return the file's tokens (uint32 above
 * INT32_MAX as -1), reads outside are OJ_ERR_OUT_OF_RANGE and write
 * nothing; a shard whose tokens are all non-negative writes back (same
 * version) to the same header words and token bytes; the loader either
 * refuses with a message (OJ_ERR_CORRUPT exactly when a token is outside
 * its vocabulary, else OJ_ERR_SHAPE for too few windows) or returns windows
 * of the shard's tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "ojas/data.h"

#define MAX_FILE (1 << 18)
#define PARAMS 12

static int32_t le32(const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t s;
    memcpy(&s, &v, 4);
    return s;
}

/* The token at i of an accepted file, as oj_shard_read returns it. */
static int32_t token_at(const uint8_t *file, int version, int64_t i) {
    const uint8_t *p = file + OJ_SHARD_HEADER_BYTES;
    if (version == 1) return (int32_t)(p[2 * i] | p[2 * i + 1] << 8);
    uint32_t v = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                 (uint32_t)p[4 * i + 3] << 24;
    return v > INT32_MAX ? -1 : (int32_t)v;
}

/* Read [start, start + n): inside the shard it must match the file, outside
 * it must be refused without touching dst. */
static void check_read(const oj_shard *s, const uint8_t *file, int64_t start, int64_t n) {
    int64_t len = oj_shard_len(s);
    bool inside = start >= 0 && n >= 0 && start <= len && n <= len - start;
    size_t cap = inside ? (size_t)n : 4;
    int32_t *dst = malloc((cap ? cap : 1) * sizeof *dst); /* exact size for ASan */
    FZ_CHECK(dst);
    for (size_t i = 0; i < cap; i++) dst[i] = -7;
    oj_error e = {0};
    oj_status rc = oj_shard_read(s, start, n, dst, &e);
    if (inside) {
        FZ_CHECK(rc == OJ_OK);
        for (int64_t i = 0; i < n; i++)
            FZ_CHECK(dst[i] == token_at(file, oj_shard_version(s), start + i));
    } else {
        FZ_CHECK(rc == OJ_ERR_OUT_OF_RANGE && e.status == rc && e.message[0]);
        for (size_t i = 0; i < cap; i++) FZ_CHECK(dst[i] == -7);
    }
    free(dst);
}

static void check_rewrite(const oj_shard *s, const uint8_t *file, size_t fsize) {
    int64_t len = oj_shard_len(s);
    int32_t *tok = malloc((size_t)(len ? len : 1) * sizeof *tok);
    FZ_CHECK(tok);
    oj_error e = {0};
    FZ_CHECK(oj_shard_read(s, 0, len, tok, &e) == OJ_OK);
    char path[512];
    fz_path(path, sizeof path, "rewrite.bin");
    oj_status rc = oj_shard_write(path, tok, len, oj_shard_version(s), &e);
    bool negative = false;
    for (int64_t i = 0; i < len; i++) negative |= tok[i] < 0;
    free(tok);
    if (negative) {
        FZ_CHECK(rc == OJ_ERR_OUT_OF_RANGE && e.message[0]);
        return;
    }
    FZ_CHECK(rc == OJ_OK);
    FILE *f = fopen(path, "rb");
    FZ_CHECK(f);
    uint8_t *back = malloc(fsize + 1);
    FZ_CHECK(back);
    size_t got = fread(back, 1, fsize + 1, f);
    fclose(f);
    FZ_CHECK(got == fsize);
    FZ_CHECK(memcmp(back, file, 12) == 0); /* magic, version, count */
    FZ_CHECK(memcmp(back + OJ_SHARD_HEADER_BYTES, file + OJ_SHARD_HEADER_BYTES,
                    fsize - OJ_SHARD_HEADER_BYTES) == 0);
    free(back);
}

static void check_loader(const char *path, const oj_shard *s, const uint8_t *prm) {
    oj_loader_config c = oj_loader_config_default();
    c.paths = &path;
    c.n_paths = 1;
    c.T = prm[8] % 16 + 1;
    c.B = prm[9] % 4 + 1;
    c.shuffle = prm[10] & 1;
    c.seed = (uint64_t)le32(prm);
    c.dtype = prm[10] & 2 ? OJ_I32 : OJ_I64;
    c.prefetch = false;
    c.vocab_size = (int64_t)prm[11] * 64;
    oj_loader *L = NULL;
    oj_error e = {0};
    oj_status rc = oj_loader_open(&c, &L, &e);
    int64_t len = oj_shard_len(s), windows = len > 0 ? (len - 1) / c.T : 0;
    /* the loader scans the tokens at open: one outside the vocabulary (or
     * not an int32 id) refuses the shard before any batch */
    int64_t lim = c.vocab_size > 0 ? c.vocab_size : (int64_t)1 << 31;
    bool bad_token = false;
    for (int64_t i = 0; i < len && !bad_token; i++) {
        int32_t t;
        FZ_CHECK(oj_shard_read(s, i, 1, &t, NULL) == OJ_OK);
        bad_token = t < 0 || t >= lim;
    }
    if (rc != OJ_OK) {
        FZ_CHECK(e.status == rc && e.message[0] && !L);
        FZ_CHECK(bad_token ? rc == OJ_ERR_CORRUPT : rc == OJ_ERR_SHAPE && windows < c.B);
        return;
    }
    FZ_CHECK(!bad_token && windows >= c.B && oj_loader_num_windows(L) == windows);
    size_t n = (size_t)(c.B * c.T), w = c.dtype == OJ_I32 ? 4 : 8;
    uint8_t *in = malloc(n * w), *tg = malloc(n * w);
    FZ_CHECK(in && tg);
    for (int step = 0; step < 2; step++) {
        rc = oj_loader_next_host(L, in, tg, &e);
        FZ_CHECK(rc == OJ_OK); /* every token was checked at open */
        for (int64_t b = 0; b < c.B; b++) {
            for (int64_t t = 0; t < c.T; t++) {
                int64_t x, y;
                if (w == 4) {
                    int32_t a, d;
                    memcpy(&a, in + (size_t)(b * c.T + t) * 4, 4);
                    memcpy(&d, tg + (size_t)(b * c.T + t) * 4, 4);
                    x = a, y = d;
                } else {
                    memcpy(&x, in + (size_t)(b * c.T + t) * 8, 8);
                    memcpy(&y, tg + (size_t)(b * c.T + t) * 8, 8);
                }
                FZ_CHECK(x >= 0 && y >= 0);
                FZ_CHECK(c.vocab_size == 0 || (x < c.vocab_size && y < c.vocab_size));
                if (t + 1 < c.T) { /* targets are the inputs shifted by one */
                    int64_t nx;
                    if (w == 4) {
                        int32_t a;
                        memcpy(&a, in + (size_t)(b * c.T + t + 1) * 4, 4);
                        nx = a;
                    } else {
                        memcpy(&nx, in + (size_t)(b * c.T + t + 1) * 8, 8);
                    }
                    FZ_CHECK(nx == y);
                }
            }
        }
    }
    free(in);
    free(tg);
    oj_loader_free(L);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < PARAMS || size - PARAMS > MAX_FILE) return 0;
    const uint8_t *prm = data, *file = data + PARAMS;
    size_t fsize = size - PARAMS;
    char path[512];
    fz_path(path, sizeof path, "train_000000.bin");
    fz_write(path, file, fsize);

    oj_shard *s = NULL;
    oj_error e = {0};
    oj_status rc = oj_shard_open(path, &s, &e);
    if (rc != OJ_OK) {
        FZ_CHECK(!s && e.status == rc && e.message[0]);
        FZ_CHECK(rc == OJ_ERR_CORRUPT || rc == OJ_ERR_IO);
        return 0;
    }
    int v = oj_shard_version(s);
    int64_t len = oj_shard_len(s);
    FZ_CHECK(v == 1 || v == 2);
    FZ_CHECK(len >= 0 && fsize == OJ_SHARD_HEADER_BYTES + (size_t)len * (v == 1 ? 2 : 4));
    FZ_CHECK(le32(file) == OJ_SHARD_MAGIC && le32(file + 4) == v && le32(file + 8) == len);
    for (int k = 3; k < 256; k++) FZ_CHECK(le32(file + 4 * k) == 0); /* reserved */
    /* the vocabulary scan: refuses exactly when some token is >= the limit */
    int64_t vlim = prm[11] ? (int64_t)prm[11] * 64 : 1000;
    bool over = false;
    for (int64_t i = 0; i < len && !over; i++) {
        int32_t t = token_at(file, v, i);
        over = t < 0 || t >= vlim;
    }
    oj_error ve = {0};
    oj_status vrc = oj_shard_check_vocab(s, vlim, &ve);
    FZ_CHECK(over ? vrc == OJ_ERR_CORRUPT && ve.message[0] : vrc == OJ_OK);

    int64_t start = le32(prm), n = le32(prm + 4);
    check_read(s, file, start, n);
    check_read(s, file, 0, len);
    check_read(s, file, len, 0);
    check_read(s, file, len, 1);
    check_read(s, file, -1, 1);
    check_read(s, file, 0, len + 1);
    if (len) check_read(s, file, len - 1, 1);
    if (start >= 0 && start <= len) check_read(s, file, start, len - start);
    check_read(s, file, start, INT64_MAX);
    check_read(s, file, INT64_MAX, n);

    check_rewrite(s, file, fsize);
    check_loader(path, s, prm);
    oj_shard_close(s);
    return 0;
}
