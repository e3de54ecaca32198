/* generation_config.json of a Hugging Face model directory: the sampling
 * defaults that transformers' GenerationConfig gives generate(), read into
 * oj_generation_config (infer.h). */
#include <errno.h>
#include <stdlib.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "infer/generation_config.h"
#include "ojas/infer.h"

/* Keys whose non-default value asks for a decoding method or logits
 * processor that ojas does not have: refused by name rather than ignored
 * (the output would differ from transformers'). The default is what
 * GenerationConfig gives when the key is absent; JSON null always passes. */
typedef enum { D_INT, D_NUM, D_BOOL_FALSE, D_NULL } dflt_kind;
static const struct {
    const char *key;
    dflt_kind kind;
    double value;
    const char *what;
} k_refused[] = {
    {"num_beams", D_INT, 1, "beam search"},
    {"num_beam_groups", D_INT, 1, "group beam search"},
    {"penalty_alpha", D_NULL, 0, "contrastive search"},
    {"num_return_sequences", D_INT, 1, "several sequences per prompt"},
    {"min_length", D_INT, 0, "a minimum length"},
    {"min_new_tokens", D_NULL, 0, "a minimum length"},
    {"no_repeat_ngram_size", D_INT, 0, "n-gram blocking"},
    {"encoder_no_repeat_ngram_size", D_INT, 0, "n-gram blocking"},
    {"encoder_repetition_penalty", D_NUM, 1, "an encoder repetition penalty"},
    {"typical_p", D_NUM, 1, "typical sampling"},
    {"epsilon_cutoff", D_NUM, 0, "epsilon sampling"},
    {"eta_cutoff", D_NUM, 0, "eta sampling"},
    {"min_p", D_NULL, 0, "min-p sampling"},
    {"top_h", D_NULL, 0, "top-h sampling"},
    {"diversity_penalty", D_NUM, 0, "a diversity penalty"},
    {"length_penalty", D_NUM, 1, "a length penalty"},
    {"bad_words_ids", D_NULL, 0, "banned words"},
    {"force_words_ids", D_NULL, 0, "forced words"},
    {"suppress_tokens", D_NULL, 0, "suppressed tokens"},
    {"begin_suppress_tokens", D_NULL, 0, "suppressed tokens"},
    {"forced_bos_token_id", D_NULL, 0, "a forced first token"},
    {"forced_eos_token_id", D_NULL, 0, "a forced last token"},
    {"forced_decoder_ids", D_NULL, 0, "forced tokens"},
    {"sequence_bias", D_NULL, 0, "a sequence bias"},
    {"exponential_decay_length_penalty", D_NULL, 0, "a length penalty"},
    {"guidance_scale", D_NULL, 0, "classifier-free guidance"},
    {"watermarking_config", D_NULL, 0, "watermarking"},
    {"assistant_model", D_NULL, 0, "assisted decoding"},
    {"prompt_lookup_num_tokens", D_NULL, 0, "prompt lookup decoding"},
    {"dola_layers", D_NULL, 0, "DoLa decoding"},
    {"constraints", D_NULL, 0, "constrained beam search"},
    {"renormalize_logits", D_BOOL_FALSE, 0, "renormalised logits"},
    {"remove_invalid_values", D_BOOL_FALSE, 0, "replacing NaN logits"},
};

static oj_status bad(oj_error *err, oj_status st, const char *path, const char *key,
                     const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return oj_error_set(err, st, "%s: %s %s", path, key, msg);
}

/* Is v the key's default (refused otherwise)? */
static bool is_default(json_t *v, dflt_kind kind, double value) {
    if (json_is_null(v))
        return true;
    switch (kind) {
    case D_INT:
    case D_NUM:
        return json_is_number(v) && json_number_value(v) == value;
    case D_BOOL_FALSE:
        return json_is_false(v);
    case D_NULL:
        return false;
    }
    return false;
}

/* A token id in [0, vocab) (vocab <= 0: any id >= 0). */
static bool token_id(json_t *v, int64_t vocab, int32_t *out) {
    if (!json_is_integer(v))
        return false;
    json_int_t i = json_integer_value(v);
    if (i < 0 || i > INT32_MAX || (vocab > 0 && i >= vocab))
        return false;
    *out = (int32_t)i;
    return true;
}

static oj_status get_id(json_t *root, const char *key, int64_t vocab, const char *path,
                        int32_t *out, oj_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return OJ_OK;
    if (!token_id(v, vocab, out)) {
        char range[64];
        snprintf(range, sizeof range, vocab > 0 ? "a token id in [0, %lld)" : "a token id >= 0",
                 (long long)vocab);
        return bad(err, OJ_ERR_CORRUPT, path, key, "is not %s", range);
    }
    return OJ_OK;
}

static oj_status get_num(json_t *root, const char *key, double lo, double hi, bool lo_open,
                         const char *path, double *out, oj_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return OJ_OK;
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(d) || d < lo || (lo_open && d == lo) || d > hi) {
        char range[96];
        snprintf(range, sizeof range, "is not a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: %s %s", path, key, range);
    }
    *out = d;
    return OJ_OK;
}

static oj_status get_count(json_t *root, const char *key, const char *path, int64_t *out,
                           oj_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return OJ_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
        return bad(err, OJ_ERR_CORRUPT, path, key, "is not an integer in [0, %s]", "2^30");
    *out = json_integer_value(v);
    return OJ_OK;
}

oj_status oj__generation_config_from_json(const char *text, size_t len, const char *path,
                                          int64_t vocab_size, oj_generation_config *out,
                                          oj_error *err) {
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root)
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s:%d:%d: %s", path, je.line, je.column,
                            je.text);
    oj_generation_config g = {0};
    g.found = true;
    g.sampler = oj_sampler_config_default();
    /* transformers' GenerationConfig defaults; do_sample false is greedy */
    g.sampler.temperature = 1.0;
    g.sampler.top_k = 50;
    g.sampler.top_p = 1.0;
    g.sampler.repetition_penalty = 1.0;
    g.sampler.max_new_tokens = -1;
    g.sampler.stop_token = -1;
    g.max_length = -1;
    g.bos_token_id = g.pad_token_id = -1;
    oj_status st = OJ_OK;
    bool do_sample = false;
    if (!json_is_object(root)) {
        st = oj_error_set(err, OJ_ERR_CORRUPT, "%s: not a JSON object", path);
        goto done;
    }
    for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++) {
        json_t *v = json_object_get(root, k_refused[i].key);
        if (v && !is_default(v, k_refused[i].kind, k_refused[i].value)) {
            st = oj_error_set(err, OJ_ERR_UNSUPPORTED,
                              "%s: %s asks for %s, which ojas does not do (remove the key or "
                              "set it to its default)",
                              path, k_refused[i].key, k_refused[i].what);
            goto done;
        }
    }
    json_t *v = json_object_get(root, "do_sample");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            st = bad(err, OJ_ERR_CORRUPT, path, "do_sample", "is not %s", "true or false");
            goto done;
        }
        do_sample = json_is_true(v);
    }
    if ((st = get_num(root, "temperature", 0, 1e6, false, path, &g.sampler.temperature, err)) ||
        (st = get_num(root, "top_p", 0, 1, true, path, &g.sampler.top_p, err)) ||
        (st = get_num(root, "repetition_penalty", 0, 1e6, true, path,
                      &g.sampler.repetition_penalty, err)) ||
        (st = get_count(root, "top_k", path, &g.sampler.top_k, err)) ||
        (st = get_count(root, "max_new_tokens", path, &g.sampler.max_new_tokens, err)) ||
        (st = get_count(root, "max_length", path, &g.max_length, err)) ||
        (st = get_id(root, "bos_token_id", vocab_size, path, &g.bos_token_id, err)) ||
        (st = get_id(root, "pad_token_id", vocab_size, path, &g.pad_token_id, err)))
        goto done;
    /* temperature 0 with do_sample is refused by transformers too */
    if (do_sample && g.sampler.temperature == 0) {
        st = oj_error_set(err, OJ_ERR_CORRUPT,
                          "%s: temperature is 0 with do_sample true (greedy is do_sample false)",
                          path);
        goto done;
    }
    if (!do_sample)
        g.sampler.temperature = 0; /* greedy; top_k and top_p then do nothing */
    /* eos_token_id: one id or a list of them */
    v = json_object_get(root, "eos_token_id");
    if (v && !json_is_null(v)) {
        size_t n = json_is_array(v) ? json_array_size(v) : 1;
        if (n > OJ_MAX_EOS_TOKENS) {
            char lim[32];
            snprintf(lim, sizeof lim, "%d", OJ_MAX_EOS_TOKENS);
            st = bad(err, OJ_ERR_UNSUPPORTED, path, "eos_token_id", "lists more than %s ids", lim);
            goto done;
        }
        for (size_t k = 0; k < n; k++) {
            json_t *e = json_is_array(v) ? json_array_get(v, k) : v;
            if (!token_id(e, vocab_size, &g.eos_token_ids[g.n_eos])) {
                char range[64];
                snprintf(range, sizeof range,
                         vocab_size > 0 ? "token ids in [0, %lld)" : "token ids >= 0",
                         (long long)vocab_size);
                st = bad(err, OJ_ERR_CORRUPT, path, "eos_token_id", "is not a token id or a list "
                         "of %s", range);
                goto done;
            }
            g.n_eos++;
        }
        if (g.n_eos)
            g.sampler.stop_token = g.eos_token_ids[0];
    }
    *out = g;
done:
    json_decref(root);
    return st;
}

oj_status oj_generation_config_load(const char *dir, int64_t vocab_size,
                                    oj_generation_config *out, oj_error *err) {
    if (!dir || !out)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "generation_config_load: NULL directory or output");
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        memset(out, 0, sizeof *out);
        out->sampler = oj_sampler_config_default();
        out->max_length = -1;
        out->bos_token_id = out->pad_token_id = -1;
        return OJ_OK; /* found false */
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    oj_error e = {0};
    oj_status st = oj__read_file(path, 1 << 20, &buf, &len, &e);
    if (st)
        return oj_error_set(err, st, "%s", e.message);
    st = oj__generation_config_from_json((const char *)buf, len, path, vocab_size, out, err);
    free(buf);
    return st;
}
