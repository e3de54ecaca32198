/* LoRA adapters on the GPT families' linears (gpt.h, oj_gpt_lora_*): the
 * adapted forward term, adding adapters, PEFT's adapter directory
 * (adapter_config.json + adapter_model.safetensors) written and read, and
 * folding the adapters into the base weights.
 * Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", 2021;
 * the names, initialisation and file layout are PEFT's (peft/tuners/lora). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "models/gpt_internal.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

/* Each adaptable linear: its family, its module path in block l (printf
 * with l), its PEFT target name, a short form, and its weight in a block. */
typedef struct module_info {
    oj_gpt_family family;
    const char *path, *name, *alias;
} module_info;

static const module_info modules[OJ__LORA_N] = {
    [OJ__LORA_C_ATTN] = {OJ_GPT2, "transformer.h.%d.attn.c_attn", "c_attn", NULL},
    [OJ__LORA_ATTN_C_PROJ] = {OJ_GPT2, "transformer.h.%d.attn.c_proj", "c_proj", NULL},
    [OJ__LORA_C_FC] = {OJ_GPT2, "transformer.h.%d.mlp.c_fc", "c_fc", NULL},
    [OJ__LORA_MLP_C_PROJ] = {OJ_GPT2, "transformer.h.%d.mlp.c_proj", "c_proj", NULL},
    [OJ__LORA_Q] = {OJ_LLAMA, "model.layers.%d.self_attn.q_proj", "q_proj", "q"},
    [OJ__LORA_K] = {OJ_LLAMA, "model.layers.%d.self_attn.k_proj", "k_proj", "k"},
    [OJ__LORA_V] = {OJ_LLAMA, "model.layers.%d.self_attn.v_proj", "v_proj", "v"},
    [OJ__LORA_O] = {OJ_LLAMA, "model.layers.%d.self_attn.o_proj", "o_proj", "o"},
    [OJ__LORA_GATE] = {OJ_LLAMA, "model.layers.%d.mlp.gate_proj", "gate_proj", "gate"},
    [OJ__LORA_UP] = {OJ_LLAMA, "model.layers.%d.mlp.up_proj", "up_proj", "up"},
    [OJ__LORA_DOWN] = {OJ_LLAMA, "model.layers.%d.mlp.down_proj", "down_proj", "down"},
};

static const char *const peft_prefix = "base_model.model.";

/* Block b's weight for mod and whether it is a Conv1D [in, out]. */
static oj_tensor *base_weight(oj_gpt_block *b, oj__lora_module mod, bool *conv1d) {
    *conv1d = mod <= OJ__LORA_MLP_C_PROJ;
    oj_tensor *w[OJ__LORA_N] = {b->c_attn_w, b->attn_proj_w, b->c_fc_w, b->mlp_proj_w,
                                b->q_w,      b->k_w,         b->v_w,    b->o_w,
                                b->w_gate,   b->w_up,        b->w_down};
    return w[mod];
}

oj_tensor *oj__gpt_lora(oj_gpt *m, oj_gpt_block *b, oj__lora_module mod, oj_tensor *x,
                        oj_tensor *y) {
    oj_tensor *A = b->lora_a[mod], *B = b->lora_b[mod];
    if (A == NULL || y == NULL || x == NULL) {
        if (A && x == NULL) {
            oj_release(y);
            return NULL;
        }
        return y;
    }
    const double scale = m->lora_cfg.alpha / (double)m->lora_cfg.r;
    /* outside autocast the adapter runs in its own dtype (f32) and its
     * output is cast to y's; under autocast the linears cast as usual */
    const bool ac = oj_autocast_enabled(m->eng);
    oj_tensor *xc = !ac && oj_tensor_dtype(x) != oj_tensor_dtype(A) ? oj_cast(x, oj_tensor_dtype(A))
                                                                     : oj_retain(x);
    oj_tensor *xa = xc ? oj_linear(xc, A, NULL) : NULL;  /* [.., r] */
    oj_tensor *xb = xa ? oj_linear(xa, B, NULL) : NULL;  /* [.., out] */
    oj_tensor *s = xb ? oj_mul_scalar(xb, scale) : NULL;
    oj_tensor *sc = s && oj_tensor_dtype(s) != oj_tensor_dtype(y) ? oj_cast(s, oj_tensor_dtype(y))
                                                                  : oj_retain(s);
    oj_tensor *out = sc ? oj_add(y, sc) : NULL;
    oj_tensor *tmp[] = {xc, xa, xb, s, sc, y};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return out;
}

/* Does the comma-separated list `targets` name module mod? */
static bool targeted(const char *targets, oj__lora_module mod) {
    if (targets[0] == '\0' || strcmp(targets, "all-linear") == 0) return true;
    const char *p = targets;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *nm = modules[mod].name, *al = modules[mod].alias;
        if ((strlen(nm) == n && strncmp(p, nm, n) == 0) ||
            (al && strlen(al) == n && strncmp(p, al, n) == 0))
            return true;
        p += n + (e != NULL);
    }
    return false;
}

/* Is every name in targets one of family f's modules? The first that is not
 * into bad. */
static bool targets_known(const char *targets, oj_gpt_family f, char bad[65]) {
    if (targets[0] == '\0' || strcmp(targets, "all-linear") == 0) return true;
    const char *p = targets;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        bool ok = false;
        for (int i = 0; i < OJ__LORA_N && !ok; i++) {
            if (modules[i].family != f) continue;
            const char *nm = modules[i].name, *al = modules[i].alias;
            ok = (strlen(nm) == n && strncmp(p, nm, n) == 0) ||
                 (al && strlen(al) == n && strncmp(p, al, n) == 0);
        }
        if (!ok) {
            snprintf(bad, 65, "%.*s", (int)(n < 64 ? n : 64), p);
            return false;
        }
        if (!e) return true;
        p = e + 1;
    }
}

static oj_status add(oj_gpt *m, const oj_gpt_lora_config *lc, uint64_t seed, bool check_dropout,
                     oj_error *err) {
    if (m == NULL || lc == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora: NULL model or config");
    if (m->quantized) /* the quantized copies would not see the adapters */
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "lora: the model's weights are quantized; add adapters before "
                            "oj_gpt_quantize (and merge them) or to an unquantized model");
    const oj_gpt_family f = m->cfg.family;
    char q[65];
    if (f != OJ_GPT2 && f != OJ_LLAMA)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "lora: a %s model takes no adapters (gpt2 and llama-family models do)",
                            oj_gpt_family_name(f));
    if (m->lora) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora: the model already has adapters");
    if (lc->r < 1)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora: r %lld must be >= 1", (long long)lc->r);
    if (!(lc->alpha > 0) || isinf(lc->alpha))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora: alpha %g must be > 0", lc->alpha);
    if (check_dropout && lc->dropout != 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "lora: dropout %g is not supported (lora_dropout 0 only)", lc->dropout);
    if (memchr(lc->targets, '\0', sizeof lc->targets) == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora: targets is not NUL-terminated");
    if (!targets_known(lc->targets, f, q))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "lora: target '%s' is not a %s linear (%s)", oj__hf_quote(q, q),
                            oj_gpt_family_name(f),
                            f == OJ_GPT2 ? "c_attn, c_proj, c_fc"
                                         : "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
    m->lora = oj_params_create(m->eng, seed);
    if (m->lora == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "lora: out of memory");
    m->lora_cfg = *lc;
    m->lora_cfg.dropout = 0;
    const oj_init ia = oj_init_uniform(-1, 1); /* rescaled per fan_in below */
    const oj_init iz = oj_init_zeros();
    char path[160], name[200];
    for (int l = 0; l < m->cfg.n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        for (int i = 0; i < OJ__LORA_N; i++) {
            if (modules[i].family != f || !targeted(lc->targets, (oj__lora_module)i)) continue;
            bool conv1d;
            oj_tensor *w = base_weight(b, (oj__lora_module)i, &conv1d);
            const int64_t in = oj_size(w, conv1d ? 0 : 1), out = oj_size(w, conv1d ? 1 : 0);
            snprintf(path, sizeof path, modules[i].path, l);
            /* PEFT: nn.init.kaiming_uniform_(A, a = sqrt(5)), bound 1 / sqrt(in) */
            const double bound = 1.0 / sqrt((double)in);
            oj_init ib = ia;
            ib.a = -bound, ib.b = bound;
            int64_t sa[2] = {lc->r, in}, sb[2] = {out, lc->r};
            snprintf(name, sizeof name, "%s.lora_A.weight", path);
            b->lora_a[i] = oj_params_add(m->lora, name, 2, sa, OJ_F32, &ib);
            snprintf(name, sizeof name, "%s.lora_B.weight", path);
            b->lora_b[i] = b->lora_a[i] ? oj_params_add(m->lora, name, 2, sb, OJ_F32, &iz) : NULL;
            if (b->lora_b[i] == NULL) {
                oj_status st = oj_error_set(err, oj_last_status(m->eng), "lora: %s: %s", name,
                                            oj_last_error(m->eng));
                oj_params_free(m->lora);
                m->lora = NULL;
                for (int k = 0; k <= l; k++)
                    for (int j = 0; j < OJ__LORA_N; j++) m->blocks[k].lora_a[j] = m->blocks[k].lora_b[j] = NULL;
                return st;
            }
        }
    }
    if (oj_params_count(m->lora) == 0) {
        oj_params_free(m->lora);
        m->lora = NULL;
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora: targets '%s' match no linear",
                            oj__hf_quote(q, lc->targets));
    }
    oj_params_freeze(m->params, "", true);
    return OJ_OK;
}

oj_status oj_gpt_lora_add(oj_gpt *m, const oj_gpt_lora_config *lc, uint64_t seed, oj_error *err) {
    return add(m, lc, seed, true, err);
}

oj_named_tensors oj_gpt_lora_params(const oj_gpt *m) {
    oj_named_tensors nt = {0, NULL, NULL};
    return m && m->lora ? oj_params_state_dict(m->lora) : nt;
}

const oj_gpt_lora_config *oj_gpt_lora_get_config(const oj_gpt *m) {
    return m && m->lora ? &m->lora_cfg : NULL;
}

/* The target_modules list of m's adapters: each distinct module name used. */
static json_t *targets_json(const oj_gpt *m) {
    json_t *a = json_array();
    for (int i = 0; i < OJ__LORA_N; i++) {
        if (m->blocks[0].lora_a[i] == NULL) continue;
        bool seen = false;
        for (size_t k = 0; k < json_array_size(a); k++)
            seen |= strcmp(json_string_value(json_array_get(a, k)), modules[i].name) == 0;
        if (!seen) json_array_append_new(a, json_string(modules[i].name));
    }
    return a;
}

oj_status oj_gpt_lora_save(const oj_gpt *m, const char *dir, const char *base, oj_error *err) {
    if (m == NULL || dir == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora save: NULL model or directory");
    if (m->lora == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora save: the model has no adapters");
    oj_status st = oj__mkdirs(dir, err);
    if (st) return st;
    json_t *o = json_pack("{s:s, s:s, s:I, s:f, s:f, s:o, s:o, s:b, s:s, s:b, s:n, s:b, s:b}",
                          "peft_type", "LORA", "task_type", "CAUSAL_LM", "r",
                          (json_int_t)m->lora_cfg.r, "lora_alpha", m->lora_cfg.alpha,
                          "lora_dropout", 0.0, "target_modules", targets_json(m),
                          "base_model_name_or_path", base ? json_string(base) : json_null(),
                          "fan_in_fan_out", m->cfg.family == OJ_GPT2, "bias", "none",
                          "inference_mode", 1, "modules_to_save", "use_rslora", 0, "use_dora", 0);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    if (text == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "lora save: out of memory");
    char path[OJ__PATH_MAX];
    size_t tl = strlen(text);
    text[tl] = '\n';
    st = oj__path_join(path, sizeof path, dir, "adapter_config.json", err);
    if (!st) st = oj__atomic_write(path, text, tl + 1, err);
    free(text);
    if (st) return st;
    oj_named_tensors sd = oj_gpt_lora_params(m);
    char **names = calloc((size_t)sd.n, sizeof *names);
    if (names == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "lora save: out of memory");
    for (int64_t i = 0; i < sd.n && !st; i++) {
        size_t n = strlen(peft_prefix) + strlen(sd.names[i]) + 1;
        if ((names[i] = malloc(n)) == NULL)
            st = oj_error_set(err, OJ_ERR_CAPACITY, "lora save: out of memory");
        else
            snprintf(names[i], n, "%s%s", peft_prefix, sd.names[i]);
    }
    static const char *const meta[] = {"format", "pt", NULL};
    if (!st) st = oj__path_join(path, sizeof path, dir, "adapter_model.safetensors", err);
    if (!st) st = oj_safetensors_save(path, sd.n, (const char *const *)names, sd.tensors, meta, err);
    for (int64_t i = 0; i < sd.n; i++) free(names[i]);
    free(names);
    return st;
}

/* adapter_config.json's settings into *lc (targets joined by commas). */
static oj_status read_config(const oj_gpt *m, const char *path, oj_gpt_lora_config *lc,
                             oj_error *err) {
    uint8_t *buf = NULL;
    size_t len = 0;
    oj_status st = oj__read_file(path, (size_t)1 << 24, &buf, &len, err);
    if (st) return st;
    json_error_t je;
    json_t *o = json_loadb((const char *)buf, len, 0, &je);
    free(buf);
    if (o == NULL || !json_is_object(o)) {
        json_decref(o);
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: not a JSON object (%s, line %d)", path,
                            je.text, je.line);
    }
    char q[65];
    memset(lc, 0, sizeof *lc);
    json_t *v;
    const char *bad = NULL, *why = "";
    v = json_object_get(o, "peft_type");
    if (!json_is_string(v) || strcmp(json_string_value(v), "LORA") != 0)
        bad = "peft_type", why = "must be \"LORA\"";
    v = json_object_get(o, "r");
    if (!bad && (!json_is_integer(v) || json_integer_value(v) < 1))
        bad = "r", why = "must be an integer >= 1";
    else if (!bad)
        lc->r = (int64_t)json_integer_value(v);
    v = json_object_get(o, "lora_alpha");
    if (!bad && (!json_is_number(v) || !(json_number_value(v) > 0)))
        bad = "lora_alpha", why = "must be a number > 0";
    else if (!bad)
        lc->alpha = json_number_value(v);
    v = json_object_get(o, "use_rslora");
    if (!bad && v && !json_is_false(v) && !json_is_null(v)) bad = "use_rslora", why = "is not supported";
    v = json_object_get(o, "use_dora");
    if (!bad && v && !json_is_false(v) && !json_is_null(v)) bad = "use_dora", why = "is not supported";
    v = json_object_get(o, "bias");
    if (!bad && v && !(json_is_string(v) && strcmp(json_string_value(v), "none") == 0))
        bad = "bias", why = "must be \"none\"";
    /* fan_in_fan_out is not read: PEFT itself sets it from the layer
     * (true for a Conv1D, false for a Linear), and A, B have the same
     * shapes either way */
    static const char *const per_layer[] = {"rank_pattern", "alpha_pattern", "layers_to_transform",
                                            "layers_pattern"};
    for (size_t i = 0; !bad && i < sizeof per_layer / sizeof per_layer[0]; i++) {
        v = json_object_get(o, per_layer[i]);
        bool empty = v == NULL || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ||
                     (json_is_array(v) && json_array_size(v) == 0);
        if (!empty) bad = per_layer[i], why = "is not supported (one r and alpha for every layer)";
    }
    v = json_object_get(o, "target_modules");
    if (!bad && !json_is_array(v)) bad = "target_modules", why = "must be a list of module names";
    for (size_t i = 0; !bad && i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        size_t at = strlen(lc->targets);
        if (!json_is_string(e) || at + strlen(json_string_value(e)) + 2 > sizeof lc->targets) {
            bad = "target_modules", why = "holds a name that is not a string or too many names";
            break;
        }
        snprintf(lc->targets + at, sizeof lc->targets - at, "%s%s", at ? "," : "",
                 json_string_value(e));
    }
    if (!bad && lc->targets[0] == '\0') bad = "target_modules", why = "is empty";
    if (!bad && !targets_known(lc->targets, m->cfg.family, q))
        st = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "%s: target_modules: '%s' is not a %s linear",
                          path, q, oj_gpt_family_name(m->cfg.family));
    else if (bad)
        st = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "%s: %s %s", path, bad, why);
    json_decref(o);
    return st;
}

oj_status oj_gpt_lora_load(oj_gpt *m, const char *dir, oj_error *err) {
    if (m == NULL || dir == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora load: NULL model or directory");
    char path[OJ__PATH_MAX];
    oj_gpt_lora_config lc;
    oj_status st = oj__path_join(path, sizeof path, dir, "adapter_config.json", err);
    if (!st) st = read_config(m, path, &lc, err);
    if (!st) st = oj__path_join(path, sizeof path, dir, "adapter_model.safetensors", err);
    oj_safetensors *sf = NULL;
    if (!st) st = oj_safetensors_open(path, &sf, err);
    if (!st) st = add(m, &lc, 0, false, err);
    if (st) {
        oj_safetensors_close(sf);
        return st;
    }
    oj_named_tensors sd = oj_gpt_lora_params(m);
    char name[300];
    int64_t found = 0;
    for (int64_t i = 0; i < sd.n && !st; i++) {
        snprintf(name, sizeof name, "%s%s", peft_prefix, sd.names[i]);
        int64_t idx = oj_safetensors_find(sf, name);
        if (idx < 0) {
            st = oj_error_set(err, OJ_ERR_SHAPE, "%s: tensor %s is missing", path, name);
        } else if (!oj__gpt_st_shape_matches(sf, idx, sd.tensors[i])) {
            st = oj_error_set(err, OJ_ERR_SHAPE, "%s: tensor %s does not have shape [%lld, %lld]",
                              path, name, (long long)oj_size(sd.tensors[i], 0),
                              (long long)oj_size(sd.tensors[i], 1));
        } else {
            st = oj__gpt_st_copy(sd.tensors[i], sf, idx, path, name, err);
            found++;
        }
    }
    if (!st && found != oj_safetensors_count(sf)) /* a tensor the config does not account for */
        for (int64_t i = 0; i < oj_safetensors_count(sf) && !st; i++) {
            const char *n = oj_safetensors_name(sf, i);
            bool known = strncmp(n, peft_prefix, strlen(peft_prefix)) == 0 &&
                         oj_params_find(m->lora, n + strlen(peft_prefix)) >= 0;
            if (!known)
                st = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                  "%s: tensor %s is not an adapter of target_modules", path, n);
        }
    oj_safetensors_close(sf);
    if (st) { /* the model is left without adapters */
        oj_params_free(m->lora);
        m->lora = NULL;
        for (int l = 0; l < m->cfg.n_layer; l++)
            for (int j = 0; j < OJ__LORA_N; j++) m->blocks[l].lora_a[j] = m->blocks[l].lora_b[j] = NULL;
        oj_params_freeze(m->params, "", false);
    }
    return st;
}

oj_status oj_gpt_lora_merge(oj_gpt *m, oj_error *err) {
    if (m == NULL || m->lora == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "lora merge: the model has no adapters");
    if (m->quantized)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "lora merge: the model's weights are quantized (merge before "
                            "oj_gpt_quantize)");
    oj_engine *eng = m->eng;
    const double scale = m->lora_cfg.alpha / (double)m->lora_cfg.r;
    bool prev = oj_set_grad_enabled(eng, false);
    oj_status st = OJ_OK;
    for (int l = 0; l < m->cfg.n_layer && !st; l++) {
        oj_gpt_block *b = &m->blocks[l];
        for (int i = 0; i < OJ__LORA_N && !st; i++) {
            if (b->lora_a[i] == NULL) continue;
            bool conv1d;
            oj_tensor *w = base_weight(b, (oj__lora_module)i, &conv1d);
            oj_scope_begin(eng);
            oj_tensor *ba = oj_matmul(b->lora_b[i], b->lora_a[i]); /* [out, in] */
            oj_tensor *d = ba ? oj_mul_scalar(ba, scale) : NULL;
            oj_tensor *dt = d && conv1d ? oj_transpose(d, 0, 1) : d;
            oj_tensor *dc = dt && oj_tensor_dtype(dt) != oj_tensor_dtype(w)
                                ? oj_cast(dt, oj_tensor_dtype(w))
                                : dt;
            st = dc ? oj_add_(w, dc) : oj_last_status(eng);
            if (st) oj_error_set(err, st, "lora merge: %s", oj_last_error(eng));
            oj_scope_end(eng);
        }
    }
    oj_set_grad_enabled(eng, prev);
    if (st) return st;
    oj_params_free(m->lora);
    m->lora = NULL;
    for (int l = 0; l < m->cfg.n_layer; l++)
        for (int j = 0; j < OJ__LORA_N; j++) m->blocks[l].lora_a[j] = m->blocks[l].lora_b[j] = NULL;
    oj_params_freeze(m->params, "", false);
    return OJ_OK;
}
