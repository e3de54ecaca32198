/* Fuzz target: the training config parsers: a JSON config
 * (oj_train_config_apply_json, oj_train_config_load from a file, and the
 * "config" object of a checkpoint's state.json as
 * oj_train_config_from_checkpoint applies it) and `--set key=value`
 * assignments (oj_train_config_set).
 *
 * Input layout: one flags byte, then the JSON text, "|OJSEP|", and
 * assignments one per line (at most 16, each at most 256 bytes). Flags
 * bits 0-1 pick the JSON route: 0 apply_json, 1 load from a file, 2 parse
 * as state.json and apply its "config" to the defaults (what
 * oj_train_config_from_checkpoint does after verifying the checkpoint),
 * 3 apply_json after the assignments instead of before.
 * tests/fuzz/make_corpus_data.py writes seeds in this layout.
 *
 * Checks: a refusal carries its status (OJ_ERR_INVALID_ARGUMENT, or
 * OJ_ERR_IO / OJ_ERR_CORRUPT for the file routes) and a non-empty message
 * and leaves the config byte-for-byte unchanged; after every acceptance
 * the config's fields are in range, oj_train_config_check accepts it or
 * refuses it with a message, oj_train_model_config agrees with the check,
 * and oj_train_config_to_json applied to the defaults gives the same
 * config back (the round trip train.h promises). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "ojas/train.h"
#include "train/train_internal.h"

#define MAX_INPUT (1 << 16)
#define MAX_SETS 16
#define MAX_SET_LEN 256

static bool same(const oj_train_config *a, const oj_train_config *b) {
#define S(f) (strcmp(a->f, b->f) == 0)
#define M(f) (memcmp(&a->f, &b->f, sizeof a->f) == 0)
    return S(model) && M(vocab_size) && M(block_size) && M(n_layer) && M(n_head) &&
           M(n_kv_head) && M(n_embd) && M(mlp_hidden) && S(data_dir) && S(tokenizer_dir) &&
           M(batch_size) && M(seq_len) && M(grad_accum) && M(max_steps) &&
           M(time_limit_seconds) && M(optimizer) && M(lr) && M(muon_lr) && M(min_lr) &&
           M(muon_momentum) && M(warmup_steps) && M(schedule) && M(cooldown_frac) &&
           M(weight_decay) && M(beta1) && M(beta2) && M(adam_eps) && M(grad_clip) &&
           M(eval_every) && M(eval_batches) && M(ckpt_every) && M(keep_last) && M(log_every) &&
           M(seed) && M(shuffle) && M(threads) && M(numerics) && M(device) && M(peak_flops) &&
           M(budget_bytes);
#undef S
#undef M
}

static void check_refusal(oj_status rc, const oj_error *e, const oj_train_config *before,
                          const oj_train_config *after) {
    FZ_CHECK(rc != OJ_OK && e->status == rc && e->message[0]);
    FZ_CHECK(memcmp(before, after, sizeof *before) == 0);
}

/* What every accepted config satisfies, and what the checks make of it. */
static void check_accepted(const oj_train_config *c) {
    FZ_CHECK(memchr(c->model, 0, sizeof c->model) && memchr(c->data_dir, 0, sizeof c->data_dir) &&
             memchr(c->tokenizer_dir, 0, sizeof c->tokenizer_dir));
    FZ_CHECK(c->vocab_size >= 0 && c->block_size >= 0 && c->n_layer >= 0 && c->n_head >= 0 &&
             c->n_kv_head >= 0 && c->n_embd >= 0 && c->mlp_hidden >= 0);
    FZ_CHECK(c->batch_size >= 1 && c->grad_accum >= 1 && c->seq_len >= 0 && c->max_steps >= 0);
    FZ_CHECK(c->eval_batches >= 1 && c->log_every >= 1 && c->threads >= 0 && c->threads <= 4096);
    FZ_CHECK(isfinite(c->lr) && c->lr >= 0 && isfinite(c->min_lr) && c->min_lr >= 0);
    FZ_CHECK(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1);
    FZ_CHECK(c->muon_momentum >= 0 && c->muon_momentum <= 1);
    FZ_CHECK(c->cooldown_frac >= 0 && c->cooldown_frac <= 1);
    FZ_CHECK((int)c->optimizer >= 0 && (int)c->optimizer <= 1);
    FZ_CHECK((int)c->schedule >= 0 && (int)c->schedule <= 2);
    FZ_CHECK((int)c->numerics >= 0 && (int)c->numerics <= 1);
    FZ_CHECK(c->device.type == OJ_DEVICE_CPU || c->device.type == OJ_DEVICE_CUDA);
    FZ_CHECK(c->device.index >= 0 && c->device.index <= 1024);

    oj_error e = {0};
    oj_status rc = oj_train_config_check(c, &e);
    if (rc != OJ_OK) FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT && e.status == rc && e.message[0]);
    oj_gpt_config m;
    oj_error e2 = {0};
    oj_status rm = oj_train_model_config(c, 0, &m, &e2);
    if (rm != OJ_OK) {
        FZ_CHECK(rm == OJ_ERR_INVALID_ARGUMENT && e2.message[0] && rc != OJ_OK);
    } else {
        FZ_CHECK(oj_gpt_config_check(&m, &e2) == OJ_OK);
        if (rc == OJ_OK) FZ_CHECK(c->seq_len <= m.block_size);
    }

    char *js = oj_train_config_to_json(c);
    FZ_CHECK(js);
    oj_train_config back = oj_train_config_default();
    rc = oj_train_config_apply_json(&back, js, &e);
    if (rc != OJ_OK || !same(c, &back)) {
        fprintf(stderr, "to_json does not round trip (%s):\n%s\n", e.message, js);
        abort();
    }
    free(js);
}

static void apply_json(oj_train_config *c, unsigned mode, const char *json, size_t len) {
    oj_train_config before = *c;
    oj_error e = {0};
    oj_status rc;
    if (mode == 1) {
        char path[512];
        fz_path(path, sizeof path, "config.json");
        fz_write(path, (const uint8_t *)json, len);
        rc = oj_train_config_load(c, path, &e);
        if (rc != OJ_OK) FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT || rc == OJ_ERR_IO);
    } else if (mode == 2) {
        json_error_t je;
        json_t *state = json_loadb(json, len, 0, &je);
        if (!state || !json_is_object(state)) {
            json_decref(state);
            return; /* the checkpoint reader refuses it before the config */
        }
        json_t *cfg = json_object_get(state, "config");
        oj_train_config tmp = oj_train_config_default(), tmp0 = tmp;
        rc = cfg ? oj__train_config_from_json(&tmp, cfg, &e) : OJ_ERR_CORRUPT;
        json_decref(state);
        if (!cfg) return;
        if (rc != OJ_OK) {
            check_refusal(rc, &e, &tmp0, &tmp);
            FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT);
            return;
        }
        *c = tmp;
    } else {
        rc = oj_train_config_apply_json(c, json, &e);
        if (rc != OJ_OK) FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT);
    }
    if (rc != OJ_OK) {
        check_refusal(rc, &e, &before, c);
        return;
    }
    check_accepted(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_INPUT) return 0;
    unsigned mode = data[0] & 3;
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data + 1, size - 1, 2, part, len);
    char *json = malloc(len[0] + 1); /* NUL-terminated, exact size */
    FZ_CHECK(json);
    if (len[0]) memcpy(json, part[0], len[0]);
    json[len[0]] = 0;

    oj_train_config c = oj_train_config_default();
    if (mode != 3) apply_json(&c, mode, json, len[0]);

    const uint8_t *p = part[1], *end = part[1] + len[1];
    for (int i = 0; i < MAX_SETS && p < end; i++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ll = (size_t)((nl ? nl : end) - p);
        if (ll > MAX_SET_LEN) ll = MAX_SET_LEN;
        char *line = malloc(ll + 1);
        FZ_CHECK(line);
        memcpy(line, p, ll);
        line[ll] = 0;
        oj_train_config before = c;
        oj_error e = {0};
        oj_status rc = oj_train_config_set(&c, line, &e);
        if (rc != OJ_OK) {
            check_refusal(rc, &e, &before, &c);
            FZ_CHECK(rc == OJ_ERR_INVALID_ARGUMENT);
        } else {
            check_accepted(&c);
        }
        free(line);
        p = nl ? nl + 1 : end;
    }
    if (mode == 3) apply_json(&c, 0, json, len[0]);
    free(json);
    return 0;
}
