/* Fuzz target: checkpoint validation (manifest.json, state.json, both
 * safetensors files, hashes, expected tensors) and the `latest` and
 * directory-name parsers, over arbitrary bytes.
 *
 * Input layout: one flags byte, then up to four parts separated by
 * "|OJSEP|": manifest.json, state.json, model.safetensors,
 * optimizer.safetensors. Flags bit 0: verify sizes and hashes (off lets
 * the fuzzer reach past the hash check); bit 1: require the tensors
 * below. tests/fuzz/make_corpus.py writes seeds in this layout.
 *
 * Checks: a refusal carries a status and a message; an acceptance
 * returns a step equal to the state's and the expected tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_internal.h"
#include "ojas/io.h"

#define CHECK(c)                                                         \
    do {                                                                 \
        if (!(c)) {                                                      \
            fprintf(stderr, "fuzz_checkpoint: check failed: %s\n", #c); \
            abort();                                                     \
        }                                                                \
    } while (0)

#define SEP "|OJSEP|"

/* model: w f32 [2, 2], b f32 [2]; optimizer: w.exp_avg f32 [2, 2] */
static const char *const model_names[] = {"w", "b"};
static const oj_dtype model_dtypes[] = {OJ_F32, OJ_F32};
static const int model_ranks[] = {2, 1};
static const int64_t model_shapes[][OJ_MAX_RANK] = {{2, 2}, {2}};
static const char *const optim_names[] = {"w.exp_avg"};
static const oj_dtype optim_dtypes[] = {OJ_F32};
static const int optim_ranks[] = {2};
static const int64_t optim_shapes[][OJ_MAX_RANK] = {{2, 2}};

static const uint8_t *find(const uint8_t *p, const uint8_t *end) {
    size_t k = strlen(SEP);
    for (; p + k <= end; p++)
        if (memcmp(p, SEP, k) == 0) return p;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned flags = data[0];
    const uint8_t *p = data + 1, *end = data + size;
    const uint8_t *part[4] = {p, p, p, p};
    size_t len[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        const uint8_t *s = i < 3 ? find(p, end) : NULL;
        const uint8_t *stop = s ? s : end;
        part[i] = p;
        len[i] = (size_t)(stop - p);
        if (!s) {
            for (int k = i + 1; k < 4; k++) part[k] = end, len[k] = 0;
            break;
        }
        p = s + strlen(SEP);
    }
    /* exact-size heap copies so ASan sees any read past a part */
    uint8_t *copy[4];
    for (int i = 0; i < 4; i++) {
        copy[i] = malloc(len[i] ? len[i] : 1);
        CHECK(copy[i]);
        if (len[i]) memcpy(copy[i], part[i], len[i]);
    }
    oj__ckpt_bytes b = {copy[0], copy[1], copy[2], copy[3], len[0], len[1], len[2], len[3]};
    oj__expect em = {2, model_names, model_dtypes, model_ranks, model_shapes};
    oj__expect eo = {1, optim_names, optim_dtypes, optim_ranks, optim_shapes};
    bool expect = flags & 2;
    int64_t step = -7;
    char *state = NULL;
    oj_safetensors *ms = NULL, *os = NULL;
    oj_error err = {0};
    oj_status rc = oj__ckpt_validate(&b, flags & 1, expect ? &em : NULL, expect ? &eo : NULL, &step,
                                     &state, &ms, &os, &err);
    if (rc != OJ_OK) {
        CHECK(err.status == rc && err.message[0]);
        CHECK(!state && !ms && !os && step == -7);
    } else {
        CHECK(step >= 0 && state && ms && os);
        CHECK(strlen(state) <= len[1]);
        if (expect) {
            CHECK(oj_safetensors_count(ms) == 2 && oj_safetensors_count(os) == 1);
            int64_t i = oj_safetensors_find(ms, "w");
            size_t nb;
            CHECK(i >= 0 && oj_safetensors_data(ms, i, &nb) && nb == 16);
        }
    }
    free(state);
    oj_safetensors_close(ms);
    oj_safetensors_close(os);
    /* the small parsers, on the first part */
    int64_t s;
    if (oj__ckpt_parse_latest(copy[0], len[0], &s)) {
        char name[32];
        oj__ckpt_dirname(s, name);
        CHECK(s >= 0 && strncmp(name, (const char *)copy[0], strlen(name)) == 0);
    }
    for (int i = 0; i < 4; i++) free(copy[i]);
    return 0;
}
