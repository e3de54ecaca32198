/* Hugging Face config.json -> oj_gpt_config (gpt.h, oj_gpt_config_from_hf).
 *
 * Fields take transformers' defaults when absent (as its PretrainedConfig
 * subclasses do: GPT2Config, LlamaConfig, MistralConfig, Qwen2Config,
 * Qwen3Config), except the sizes of a Llama-family model, which must be
 * given. A field whose value would change the maths and that ojas does not
 * implement is refused by name, never approximated. Dropout probabilities
 * are ignored: they do not change inference, and ojas trains without
 * dropout. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "models/gpt_internal.h"

const char *oj__hf_quote(char buf[65], const char *s) {
    size_t i = 0;
    for (; s && s[i] && i < 64; i++)
        buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

typedef struct {
    const char *file; /* for messages */
    json_t *root;
    oj_error *err;
} reader;

static oj_status refuse(reader *r, const char *field, const char *why) {
    return oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT, "%s: %s %s", r->file, field, why);
}

/* root[key] or NULL when absent or null. */
static json_t *get(reader *r, const char *key) {
    json_t *v = json_object_get(r->root, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* An integer field in [lo, hi]; def when absent (def < 0: required). */
static bool get_int(reader *r, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = get(r, key);
    if (v == NULL) {
        if (def < 0) {
            refuse(r, key, "is missing");
            return false;
        }
        *out = def;
        return true;
    }
    if (!json_is_integer(v)) {
        refuse(r, key, "must be an integer");
        return false;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT, "%s: %s is %lld, outside [%lld, %lld]", r->file,
                     key, (long long)x, (long long)lo, (long long)hi);
        return false;
    }
    *out = (int64_t)x;
    return true;
}

/* A positive finite number; def when absent. */
static bool get_pos(reader *r, const char *key, double def, double *out) {
    json_t *v = get(r, key);
    if (v == NULL) {
        *out = def;
        return true;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0) || isinf(json_number_value(v))) {
        refuse(r, key, "must be a finite number > 0");
        return false;
    }
    *out = json_number_value(v);
    return true;
}

static bool get_bool(reader *r, const char *key, bool def, bool *out) {
    json_t *v = get(r, key);
    if (v == NULL) {
        *out = def;
        return true;
    }
    if (!json_is_boolean(v)) {
        refuse(r, key, "must be true or false");
        return false;
    }
    *out = json_is_true(v);
    return true;
}

/* A boolean field that must be `want` (absent: def): anything else changes
 * the maths in a way ojas does not implement. */
static bool require_bool(reader *r, const char *key, bool def, bool want) {
    bool b;
    if (!get_bool(r, key, def, &b)) return false;
    if (b != want) {
        oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT, "%s: %s %s is not supported", r->file, key,
                     b ? "true" : "false");
        return false;
    }
    return true;
}

/* A string field that must be one of `ok` (NULL-terminated); absent: def. */
static bool require_str(reader *r, const char *key, const char *def, const char *const *ok) {
    json_t *v = get(r, key);
    if (v == NULL && def == NULL) {
        refuse(r, key, "is missing");
        return false;
    }
    if (v && !json_is_string(v)) {
        refuse(r, key, "must be a string");
        return false;
    }
    const char *s = v ? json_string_value(v) : def;
    for (int i = 0; ok[i]; i++)
        if (strcmp(s, ok[i]) == 0) return true;
    char q[65];
    oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT, "%s: %s '%s' is not supported (supported: %s)",
                 r->file, key, oj__hf_quote(q, s), ok[0]);
    return false;
}

/* A number > 0 in the object o (named `what`), required. */
static bool sub_pos(reader *r, json_t *o, const char *what, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    if (v == NULL || !json_is_number(v) || !(json_number_value(v) > 0) || isinf(json_number_value(v))) {
        oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT, "%s: %s.%s must be a finite number > 0%s",
                     r->file, what, key, v ? "" : " (it is missing)");
        return false;
    }
    *out = json_number_value(v);
    return true;
}

/* rope_scaling (null, or rope_type/type "default" or "llama3") and
 * transformers 5's rope_parameters ({rope_type, rope_theta, ...}). */
static bool rope(reader *r, oj_gpt_config *c) {
    double *theta = &c->rope_theta;
    if (!get_pos(r, "rope_theta", 10000.0, theta)) return false;
    /* transformers' rope init rotates only partial_rotary_factor of each
     * head (config.partial_rotary_factor, or rope_parameters' in
     * transformers 5): ojas rotates all of it */
    double prf = 1.0;
    if (!get_pos(r, "partial_rotary_factor", 1.0, &prf)) return false;
    if (prf != 1.0) {
        oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                     "%s: partial_rotary_factor %g is not supported (only 1: rotary over the whole head)",
                     r->file, prf);
        return false;
    }
    const char *keys[2] = {"rope_scaling", "rope_parameters"};
    /* both given (a file converted between transformers versions): a key
     * they share, or their rope types, must agree; which one transformers
     * takes then does not matter */
    json_t *both[2] = {get(r, keys[0]), get(r, keys[1])};
    if (json_is_object(both[0]) && json_is_object(both[1])) {
        const char *k;
        json_t *v0;
        json_object_foreach(both[0], k, v0) {
            json_t *v1 = json_object_get(both[1], k);
            bool type_alias = strcmp(k, "type") == 0 && v1 == NULL;
            if (type_alias) v1 = json_object_get(both[1], "rope_type");
            bool same = v1 && (json_is_number(v0) && json_is_number(v1)
                                   ? json_number_value(v0) == json_number_value(v1) /* 32 = 32.0 */
                                   : json_equal(v0, v1));
            if (v1 && !same) {
                oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                             "%s: rope_scaling.%s and rope_parameters.%s differ (give one of them)",
                             r->file, k, type_alias ? "rope_type" : k);
                return false;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        json_t *v = get(r, keys[i]);
        if (v == NULL) continue;
        if (!json_is_object(v)) return refuse(r, keys[i], "must be an object or null"), false;
        json_t *t = json_object_get(v, "rope_type");
        if (t == NULL) t = json_object_get(v, "type");
        const char *ts = json_is_string(t) ? json_string_value(t) : NULL;
        if (ts && strcmp(ts, "llama3") == 0) {
            double ctx = 0;
            if (!sub_pos(r, v, keys[i], "factor", &c->rope_factor) ||
                !sub_pos(r, v, keys[i], "low_freq_factor", &c->rope_low_freq_factor) ||
                !sub_pos(r, v, keys[i], "high_freq_factor", &c->rope_high_freq_factor) ||
                !sub_pos(r, v, keys[i], "original_max_position_embeddings", &ctx))
                return false;
            if (ctx != floor(ctx) || ctx > 1e9 ||
                !(c->rope_high_freq_factor > c->rope_low_freq_factor)) {
                oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                             "%s: %s needs an integer original_max_position_embeddings and "
                             "high_freq_factor > low_freq_factor", r->file, keys[i]);
                return false;
            }
            c->rope_original_context = (int64_t)ctx;
        } else if (ts == NULL || strcmp(ts, "default") != 0) {
            char q[65];
            oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                         "%s: %s.rope_type '%s' is not supported (null, \"default\" or "
                         "\"llama3\")",
                         r->file, keys[i], ts ? oj__hf_quote(q, ts) : "(missing)");
            return false;
        }
        json_t *pf = json_object_get(v, "partial_rotary_factor");
        if (pf && !json_is_null(pf) && !(json_is_number(pf) && json_number_value(pf) == 1.0)) {
            oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                         "%s: %s.partial_rotary_factor is not supported unless 1 (rotary over the "
                         "whole head)", r->file, keys[i]);
            return false;
        }
        json_t *th = json_object_get(v, "rope_theta");
        if (th) {
            if (!json_is_number(th) || !(json_number_value(th) > 0) || isinf(json_number_value(th)))
                return refuse(r, "rope_parameters.rope_theta", "must be a finite number > 0"), false;
            *theta = json_number_value(th);
        }
    }
    return true;
}

static oj_status gpt2_config(reader *r, oj_gpt_config *c) {
    static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    c->family = OJ_GPT2;
    const int64_t big = (int64_t)1 << 24;
    if (!get_int(r, "vocab_size", 50257, 1, big, &c->vocab_size) ||
        !get_int(r, "n_positions", 1024, 1, big, &c->block_size) ||
        !get_int(r, "n_embd", 768, 1, big, &c->n_embd) ||
        !get_int(r, "n_layer", 12, 1, 4096, &c->n_layer) ||
        !get_int(r, "n_head", 12, 1, 4096, &c->n_head) ||
        !get_int(r, "n_inner", 4 * c->n_embd, 1, big, &c->mlp_hidden) ||
        !get_pos(r, "layer_norm_epsilon", 1e-5, &c->norm_eps) ||
        !require_str(r, "activation_function", "gelu_new", gelu) ||
        !require_bool(r, "scale_attn_weights", true, true) ||
        !require_bool(r, "scale_attn_by_inverse_layer_idx", false, false) ||
        !require_bool(r, "add_cross_attention", false, false) ||
        !require_bool(r, "tie_word_embeddings", true, true))
        return r->err ? r->err->status : OJ_ERR_INVALID_ARGUMENT;
    c->n_kv_head = c->n_head;
    return OJ_OK;
}

typedef enum { LLAMA, MISTRAL, QWEN2, QWEN3 } llama_kind;

static oj_status llama_config(reader *r, llama_kind kind, oj_gpt_config *c) {
    static const char *const silu[] = {"silu", NULL};
    c->family = OJ_LLAMA;
    const int64_t big = (int64_t)1 << 24;
    bool tie = false;
    if (!get_int(r, "vocab_size", -1, 1, big, &c->vocab_size) ||
        !get_int(r, "hidden_size", -1, 1, big, &c->n_embd) ||
        !get_int(r, "intermediate_size", -1, 1, big, &c->mlp_hidden) ||
        !get_int(r, "num_hidden_layers", -1, 1, 4096, &c->n_layer) ||
        !get_int(r, "num_attention_heads", -1, 1, 4096, &c->n_head) ||
        !get_int(r, "num_key_value_heads", c->n_head, 1, 4096, &c->n_kv_head) ||
        !get_int(r, "max_position_embeddings", -1, 1, big, &c->block_size) ||
        !get_int(r, "head_dim", kind == QWEN3 ? 128 : c->n_embd / c->n_head, 1, 65536, &c->head_dim) ||
        !get_pos(r, "rms_norm_eps", 1e-6, &c->norm_eps) || !rope(r, c) ||
        !require_str(r, "hidden_act", "silu", silu) ||
        !get_bool(r, "tie_word_embeddings", false, &tie) ||
        !require_bool(r, "mlp_bias", false, false))
        return r->err ? r->err->status : OJ_ERR_INVALID_ARGUMENT;
    /* Qwen2's q/k/v biases are part of its architecture; Llama's and
     * Qwen3's attention_bias would add an o_proj bias too */
    if (kind != QWEN2 && !require_bool(r, "attention_bias", false, false))
        return r->err->status;
    c->qkv_bias = kind == QWEN2;
    c->qk_norm = kind == QWEN3;
    c->untied_head = !tie;
    if (c->head_dim == c->n_embd / c->n_head && c->n_embd % c->n_head == 0 && kind != QWEN3)
        c->head_dim = 0; /* the default D, as the other families keep it */
    /* Sliding windows: Mistral's covers every layer; with a context no
     * longer than the window, attention is plain causal attention. Qwen's
     * applies to some layers only: refused when switched on. */
    if (kind == MISTRAL) {
        /* MistralConfig's sliding_window defaults to 4096 when the key is
         * absent; null is no window */
        int64_t w = 0;
        if (!get_int(r, "sliding_window", json_object_get(r->root, "sliding_window") ? 0 : 4096, 1,
                     big, &w))
            return r->err->status;
        if (w > 0 && w < c->block_size) c->block_size = w;
    } else if (kind == QWEN2 || kind == QWEN3) {
        if (!require_bool(r, "use_sliding_window", false, false)) return r->err->status;
    }
    json_t *lt = get(r, "layer_types"); /* transformers 5: per-layer attention kinds */
    for (size_t i = 0; lt && json_is_array(lt) && i < json_array_size(lt); i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        char q[65];
        if (s == NULL || strcmp(s, "full_attention") != 0)
            return oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                                "%s: layer_types[%zu] '%s' is not supported (full_attention only)",
                                r->file, i, s ? oj__hf_quote(q, s) : "(not a string)");
    }
    if (lt && !json_is_array(lt)) return refuse(r, "layer_types", "must be an array");
    return OJ_OK;
}

/* The architecture: architectures[0], else model_type. */
static oj_status parse(reader *r, oj_gpt_config *c) {
    static const struct {
        const char *arch, *model_type;
        int kind; /* -1 gpt2, else llama_kind */
    } archs[] = {
        {"GPT2LMHeadModel", "gpt2", -1},       {"LlamaForCausalLM", "llama", LLAMA},
        {"MistralForCausalLM", "mistral", MISTRAL}, {"Qwen2ForCausalLM", "qwen2", QWEN2},
        {"Qwen3ForCausalLM", "qwen3", QWEN3},
    };
    if (!json_is_object(r->root)) return oj_error_set(r->err, OJ_ERR_CORRUPT, "%s: not a JSON object", r->file);
    json_t *a = get(r, "architectures");
    const char *name = NULL, *field = "architectures[0]";
    if (a) {
        if (!json_is_array(a) || json_array_size(a) != 1 || !json_is_string(json_array_get(a, 0)))
            return refuse(r, "architectures", "must be an array of one string");
        name = json_string_value(json_array_get(a, 0));
    } else {
        json_t *mt = get(r, "model_type");
        if (mt == NULL || !json_is_string(mt))
            return refuse(r, "architectures", "is missing (and there is no model_type string)");
        name = json_string_value(mt);
        field = "model_type";
    }
    memset(c, 0, sizeof *c);
    c->init_std = 0.02;
    c->rope_theta = 10000.0;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        if (strcmp(name, a ? archs[i].arch : archs[i].model_type) != 0) continue;
        /* transformers' Auto classes go by model_type: one that names
         * another family than architectures[0] would load another model */
        json_t *mt = a ? get(r, "model_type") : NULL;
        if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), archs[i].model_type) != 0)) {
            char q[65];
            return oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                                "%s: model_type '%s' does not match architectures[0] '%s' (whose "
                                "model_type is '%s')",
                                r->file, json_is_string(mt) ? oj__hf_quote(q, json_string_value(mt)) : "(not a string)",
                                name, archs[i].model_type);
        }
        oj_status st = archs[i].kind < 0 ? gpt2_config(r, c) : llama_config(r, archs[i].kind, c);
        if (st != OJ_OK) return st;
        oj_error e = {0};
        if (oj_gpt_config_check(c, &e) != OJ_OK)
            return oj_error_set(r->err, e.status, "%s: %s", r->file, e.message);
        return OJ_OK;
    }
    char q[65];
    return oj_error_set(r->err, OJ_ERR_INVALID_ARGUMENT,
                        "%s: %s '%s' is not supported (supported: GPT2LMHeadModel, "
                        "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)",
                        r->file, field, oj__hf_quote(q, name));
}

oj_status oj__gpt_config_from_hf_json(const char *json, size_t len, const char *file,
                                      oj_gpt_config *cfg, oj_error *err) {
    if (json == NULL || cfg == NULL || file == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "hf config: NULL argument");
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        for (char *p = je.text; *p; p++) /* jansson quotes the input near the error */
            if ((unsigned char)*p < 0x20) *p = '?';
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: bad JSON at line %d column %d: %s", file,
                            je.line, je.column, je.text);
    }
    oj_error e = {0};
    reader r = {file, root, &e};
    oj_gpt_config c;
    oj_status st = parse(&r, &c);
    json_decref(root);
    if (st != OJ_OK) return oj_error_set(err, st, "%s", e.message);
    *cfg = c;
    return OJ_OK;
}

oj_status oj_gpt_config_from_hf(const char *path, oj_gpt_config *cfg, oj_error *err) {
    if (path == NULL || cfg == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "hf config: NULL argument");
    uint8_t *buf = NULL;
    size_t len = 0;
    /* through the regular-file check: a FIFO config.json would block */
    oj_status st = oj__read_file(path, (size_t)1 << 24, &buf, &len, err);
    if (st == OJ_OK) st = oj__gpt_config_from_hf_json((const char *)buf, len, path, cfg, err);
    free(buf);
    return st;
}
