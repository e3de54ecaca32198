/* Fuzz target: Hugging Face config.json parsing (oj_gpt_config_from_hf and
 * its in-memory form oj__gpt_config_from_hf_json), and generation_config.json
 * (oj_generation_config_load and oj__generation_config_from_json).
 *
 * Input layout: one flags byte, then the JSON text. Flags bit 0 reads it
 * from a file in the scratch directory (oj_gpt_config_from_hf /
 * oj_generation_config_load) instead of memory; bit 1 takes it as
 * generation_config.json (token ids checked against a vocabulary of 1000).
 * tests/fuzz/make_corpus_data.py writes the seeds.
 *
 * generation_config.json checks: a refusal is OJ_ERR_CORRUPT or
 * OJ_ERR_UNSUPPORTED (OJ_ERR_IO only for the file route) with a one-line
 * message naming the file, and leaves the output byte for byte unchanged;
 * an accepted file gives a usable sampler (temperature >= 0 and finite,
 * 0 < top_p <= 1, penalty > 0, top_k >= 0) and eos / bos / pad ids in
 * [-1, 1000), stop_token the first eos id.
 *
 * config.json checks:
 * Checks: a refusal is OJ_ERR_INVALID_ARGUMENT or OJ_ERR_CORRUPT (OJ_ERR_IO
 * only for the file route) with a one-line message naming the file, and
 * leaves the config byte for byte unchanged; an accepted config passes
 * oj_gpt_config_check, is of the family its architecture names, and a
 * small one (at most 2^16 parameters) creates a model whose forward on
 * min(2, block_size) tokens gives [1, T, V] logits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "infer/generation_config.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"

#define MAX_INPUT (1 << 16)

static int64_t n_params(const oj_gpt_config *c) {
    const double C = (double)c->n_embd, V = (double)c->vocab_size, F = (double)c->mlp_hidden;
    const double D = (double)(c->head_dim ? c->head_dim : c->n_embd / c->n_head);
    double per = C * D * (double)(2 * c->n_head + 2 * c->n_kv_head) + 3 * C * F + 4 * C;
    double n = (V * 2 + (double)c->block_size) * C + (double)c->n_layer * per;
    return n > 1e12 ? (int64_t)1e12 : (int64_t)n;
}

static void run_model(const oj_gpt_config *c) {
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    oj_engine *eng = NULL;
    oj_error e = {0};
    FZ_CHECK(oj_engine_create(&ec, &eng, &e) == OJ_OK);
    oj_gpt *m = NULL;
    FZ_CHECK(oj_gpt_create(eng, c, 1, &m) == OJ_OK);
    oj_scope_begin(eng);
    const int64_t T = c->block_size < 2 ? c->block_size : 2; /* the context may hold one */
    int64_t shape[2] = {1, T};
    int32_t ids[2] = {(int32_t)(c->vocab_size - 1), 0};
    oj_tensor *idx = oj_from_host(eng, 2, shape, OJ_I32, ids, (size_t)T * sizeof ids[0]);
    oj_tensor *logits = oj_gpt_forward(m, idx);
    FZ_CHECK(logits && oj_rank(logits) == 3 && oj_size(logits, 1) == T &&
             oj_size(logits, 2) == c->vocab_size);
    oj_scope_end(eng);
    oj_gpt_free(m);
    oj_engine_free(eng);
}

static bool id_ok(int32_t id) { return id >= -1 && id < 1000; }

static void generation_config(const uint8_t *data, size_t size, bool file) {
    oj_generation_config g, before;
    memset(&g, 0xA5, sizeof g);
    before = g;
    oj_error e = {0};
    oj_status rc;
    char path[512];
    if (file) {
        char dir[512];
        fz_path(path, sizeof path, "generation_config.json");
        fz_write(path, data + 1, size - 1);
        snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(path, '/') - path), path);
        rc = oj_generation_config_load(dir, 1000, &g, &e);
    } else {
        snprintf(path, sizeof path, "generation_config.json");
        char *copy = malloc(size - 1 ? size - 1 : 1);
        FZ_CHECK(copy);
        if (size > 1) memcpy(copy, data + 1, size - 1);
        rc = oj__generation_config_from_json(copy, size - 1, path, 1000, &g, &e);
        free(copy);
    }
    if (rc != OJ_OK) {
        FZ_CHECK(rc == OJ_ERR_CORRUPT || rc == OJ_ERR_UNSUPPORTED || (file && rc == OJ_ERR_IO));
        FZ_CHECK(e.status == rc && e.message[0] && strchr(e.message, '\n') == NULL);
        FZ_CHECK(strstr(e.message, "generation_config.json") != NULL);
        FZ_CHECK(memcmp(&g, &before, sizeof g) == 0);
        return;
    }
    FZ_CHECK(g.found);
    const oj_sampler_config *s = &g.sampler;
    FZ_CHECK(s->temperature >= 0 && s->temperature < 1e300 && s->top_p > 0 && s->top_p <= 1);
    FZ_CHECK(s->repetition_penalty > 0 && s->top_k >= 0 && s->max_new_tokens >= -1);
    FZ_CHECK(g.max_length >= -1 && id_ok(g.bos_token_id) && id_ok(g.pad_token_id));
    FZ_CHECK(g.n_eos >= 0 && g.n_eos <= OJ_MAX_EOS_TOKENS);
    for (int i = 0; i < g.n_eos; i++) FZ_CHECK(id_ok(g.eos_token_ids[i]) && g.eos_token_ids[i] >= 0);
    FZ_CHECK(s->stop_token == (g.n_eos ? g.eos_token_ids[0] : -1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_INPUT) return 0;
    const bool file = data[0] & 1;
    if (data[0] & 2) {
        generation_config(data, size, file);
        return 0;
    }
    oj_gpt_config c, before;
    memset(&c, 0xA5, sizeof c);
    before = c;
    oj_error e = {0};
    oj_status rc;
    char path[512];
    if (file) {
        fz_path(path, sizeof path, "config.json");
        fz_write(path, data + 1, size - 1);
        rc = oj_gpt_config_from_hf(path, &c, &e);
    } else {
        snprintf(path, sizeof path, "config.json");
        char *copy = malloc(size - 1 ? size - 1 : 1); /* exact size: reads past it are caught */
        FZ_CHECK(copy);
        if (size > 1) memcpy(copy, data + 1, size - 1);
        rc = oj__gpt_config_from_hf_json(copy, size - 1, path, &c, &e);
        free(copy);
    }
    if (rc != OJ_OK) {
        FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT || rc == OJ_ERR_CORRUPT || (file && rc == OJ_ERR_IO));
        FZ_CHECK(e.status == rc && e.message[0] && strchr(e.message, '\n') == NULL);
        FZ_CHECK(strstr(e.message, path) != NULL);
        FZ_CHECK(memcmp(&c, &before, sizeof c) == 0);
        return 0;
    }
    oj_error e2 = {0};
    FZ_CHECK(oj_gpt_config_check(&c, &e2) == OJ_OK);
    FZ_CHECK(c.family == OJ_GPT2 || c.family == OJ_LLAMA);
    if (c.family == OJ_GPT2) FZ_CHECK(!c.qkv_bias && !c.qk_norm && !c.untied_head && !c.head_dim);
    if (n_params(&c) <= (1 << 16)) run_model(&c);
    return 0;
}
