/* Training config: defaults, a table of keys, JSON and key=value parsing,
 * serialisation and cross-field checks. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/train.h"
#include "core/fs.h"
#include "train/train_internal.h"

oj_train_config oj_train_config_default(void) {
    oj_train_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.model, "nanolab-small");
    strcpy(c.data_dir, "data");
    c.batch_size = 8;
    c.grad_accum = 1;
    c.max_steps = 1000;
    c.optimizer = OJ_TRAIN_MUON;
    c.lr = 1e-3;
    c.muon_lr = 0.02;
    c.min_lr = 1e-4;
    c.muon_momentum = 0.95;
    c.warmup_steps = 100;
    c.schedule = OJ_SCHEDULE_COSINE;
    c.cooldown_frac = 0.2;
    c.weight_decay = 0.1;
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.adam_eps = 1e-8;
    c.grad_clip = 1.0;
    c.eval_every = 100;
    c.eval_batches = 20;
    c.ckpt_every = 500;
    c.keep_last = 3;
    c.log_every = 10;
    c.max_skipped_steps = 10;
    c.dist_timeout = 300;
    c.dist_bucket_bytes = (int64_t)64 << 20;
    c.lora_alpha = 16;
    c.weight_copies = true;
    c.seed = 1337;
    c.shuffle = true;
    c.numerics = OJ_NUMERICS_FAST;
    c.device = (oj_device){OJ_DEVICE_CPU, 0};
    return c;
}

/* ---------------------------------------------------------------- key table */

typedef enum { K_STR, K_I64, K_U64, K_F64, K_BOOL, K_ENUM, K_BETAS, K_DEVICE } kind;

typedef struct {
    const char *key;
    kind type;
    size_t off, size; /* K_STR: buffer size; K_ENUM: sizeof the enum */
    double lo, hi;    /* numbers: inclusive range */
    const char *const *names; /* K_ENUM: value i is names[i] */
} key_def;

static const char *const k_optimizers[] = {"adamw", "muon", NULL};
static const char *const k_schedules[] = {"cosine", "wsd", "constant", NULL};
static const char *const k_numerics[] = {"fast", "exact", NULL};
static const char *const k_dtypes[] = {"f32", "bf16", "f16", NULL};

#define OFF(f) offsetof(oj_train_config, f)
#define STR(f) {#f, K_STR, OFF(f), sizeof(((oj_train_config *)0)->f), 0, 0, NULL}
#define I64(f, lo, hi) {#f, K_I64, OFF(f), 0, lo, hi, NULL}
#define F64(f, lo, hi) {#f, K_F64, OFF(f), 0, lo, hi, NULL}
#define BIG 9.2e18 /* below INT64_MAX as a double */

static const key_def k_keys[] = {
    STR(model),
    I64(vocab_size, 0, 2147483647.0),
    I64(block_size, 0, 1 << 24),
    I64(n_layer, 0, 1 << 16),
    I64(n_head, 0, 1 << 16),
    I64(n_kv_head, 0, 1 << 16),
    I64(n_embd, 0, 1 << 20),
    I64(mlp_hidden, 0, 1 << 22),
    STR(data_dir),
    STR(tokenizer_dir),
    I64(batch_size, 1, 1 << 20),
    I64(seq_len, 0, 1 << 24),
    I64(grad_accum, 1, 1 << 20),
    I64(max_steps, 0, BIG),
    F64(time_limit_seconds, 0, HUGE_VAL),
    {"optimizer", K_ENUM, OFF(optimizer), sizeof(oj_train_optimizer), 0, 0, k_optimizers},
    F64(lr, 0, HUGE_VAL),
    F64(muon_lr, 0, HUGE_VAL),
    F64(min_lr, 0, HUGE_VAL),
    F64(muon_momentum, 0, 1),
    I64(warmup_steps, 0, BIG),
    {"schedule", K_ENUM, OFF(schedule), sizeof(oj_train_schedule), 0, 0, k_schedules},
    F64(cooldown_frac, 0, 1),
    F64(weight_decay, 0, HUGE_VAL),
    {"betas", K_BETAS, OFF(beta1), 0, 0, 1, NULL},
    F64(adam_eps, 0, HUGE_VAL),
    F64(grad_clip, 0, HUGE_VAL),
    I64(eval_every, 0, BIG),
    I64(eval_batches, 1, 1 << 20),
    I64(ckpt_every, 0, BIG),
    I64(keep_last, 0, 1 << 20),
    I64(log_every, 1, BIG),
    {"seed", K_U64, OFF(seed), 0, 0, BIG, NULL},
    {"shuffle", K_BOOL, OFF(shuffle), 0, 0, 0, NULL},
    I64(threads, 0, 4096),
    {"numerics", K_ENUM, OFF(numerics), sizeof(oj_numerics), 0, 0, k_numerics},
    {"device", K_DEVICE, OFF(device), 0, 0, 0, NULL},
    {"dtype", K_ENUM, OFF(dtype), sizeof(oj_train_dtype), 0, 0, k_dtypes},
    {"cuda_graph", K_BOOL, OFF(cuda_graph), 0, 0, 0, NULL},
    F64(peak_flops, 0, HUGE_VAL),
    I64(budget_bytes, 0, BIG),
    I64(max_skipped_steps, 0, BIG),
    I64(zero, 0, 1),
    F64(dist_timeout, 0, HUGE_VAL),
    I64(dist_bucket_bytes, 1, BIG),
    STR(init_from),
    I64(lora_r, 0, 1 << 16),
    F64(lora_alpha, 0, HUGE_VAL),
    STR(lora_targets),
    F64(lora_dropout, 0, 1),
    {"weight_copies", K_BOOL, OFF(weight_copies), 0, 0, 0, NULL},
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

static const key_def *find_key(const char *key) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(k_keys[i].key, key) == 0)
            return &k_keys[i];
    return NULL;
}

/* ---------------------------------------------------------------- enums */

static int enum_get(const void *p) { return *(const int *)p; }
static void enum_set(void *p, int v) { *(int *)p = v; }

const char *oj__train_enum_name(const char *key, int v) {
    const key_def *k = find_key(key);
    if (!k || k->type != K_ENUM || v < 0)
        return "?";
    for (int i = 0; k->names[i]; i++)
        if (i == v)
            return k->names[i];
    return "?";
}

/* ---------------------------------------------------------------- apply */

/* A JSON number that is an integer (also 1e6 written as a real). */
static bool json_as_i64(const json_t *v, double lo, double hi, int64_t *out) {
    double d;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if ((double)i < lo || (double)i > hi)
            return false;
        *out = (int64_t)i;
        return true;
    }
    if (!json_is_real(v))
        return false;
    d = json_real_value(v);
    if (d != floor(d) || d < lo || d > hi)
        return false;
    *out = (int64_t)d;
    return true;
}

static oj_status bad(oj_error *err, const key_def *k, const char *expect) {
    return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config key '%s': expected %s", k->key,
                        expect);
}

static oj_status apply_one(oj_train_config *c, const key_def *k, const json_t *v, oj_error *err) {
    char *base = (char *)c;
    char expect[160];
    switch (k->type) {
    case K_STR: {
        if (!json_is_string(v))
            return bad(err, k, "a string");
        const char *s = json_string_value(v);
        if (strlen(s) >= k->size) {
            snprintf(expect, sizeof expect, "a string shorter than %zu bytes", k->size);
            return bad(err, k, expect);
        }
        strcpy(base + k->off, s);
        return OJ_OK;
    }
    case K_I64:
    case K_U64: {
        int64_t i;
        if (!json_as_i64(v, k->lo, k->hi, &i)) {
            snprintf(expect, sizeof expect, "an integer in [%.0f, %.0f]", k->lo, k->hi);
            return bad(err, k, expect);
        }
        if (k->type == K_I64)
            *(int64_t *)(base + k->off) = i;
        else
            *(uint64_t *)(base + k->off) = (uint64_t)i;
        return OJ_OK;
    }
    case K_F64: {
        double d = json_number_value(v);
        if (!json_is_number(v) || !isfinite(d) || d < k->lo || d > k->hi) {
            if (isinf(k->hi))
                snprintf(expect, sizeof expect, "a finite number >= %g", k->lo);
            else
                snprintf(expect, sizeof expect, "a number in [%g, %g]", k->lo, k->hi);
            return bad(err, k, expect);
        }
        *(double *)(base + k->off) = d;
        return OJ_OK;
    }
    case K_BOOL:
        if (!json_is_boolean(v))
            return bad(err, k, "true or false");
        *(bool *)(base + k->off) = json_is_true(v);
        return OJ_OK;
    case K_ENUM: {
        if (json_is_string(v))
            for (int i = 0; k->names[i]; i++)
                if (strcmp(json_string_value(v), k->names[i]) == 0) {
                    enum_set(base + k->off, i);
                    return OJ_OK;
                }
        size_t n = (size_t)snprintf(expect, sizeof expect, "one of");
        for (int i = 0; k->names[i] && n < sizeof expect; i++)
            n += (size_t)snprintf(expect + n, sizeof expect - n, "%s \"%s\"", i ? "," : "",
                                  k->names[i]);
        return bad(err, k, expect);
    }
    case K_BETAS: {
        double b[2];
        if (!json_is_array(v) || json_array_size(v) != 2)
            return bad(err, k, "[beta1, beta2] with each in [0, 1)");
        for (int i = 0; i < 2; i++) {
            const json_t *e = json_array_get(v, (size_t)i);
            b[i] = json_number_value(e);
            if (!json_is_number(e) || !(b[i] >= 0 && b[i] < 1))
                return bad(err, k, "[beta1, beta2] with each in [0, 1)");
        }
        c->beta1 = b[0];
        c->beta2 = b[1];
        return OJ_OK;
    }
    case K_DEVICE: {
        oj_device d;
        if (!json_is_string(v) || !oj_device_parse(json_string_value(v), &d))
            return bad(err, k, "\"cpu\", \"cuda\" or \"cuda:N\"");
        c->device = d;
        return OJ_OK;
    }
    }
    return oj_error_set(err, OJ_ERR_INTERNAL, "config key '%s': bad table entry", k->key);
}

static oj_status apply_object(oj_train_config *c, const json_t *obj, oj_error *err) {
    if (!json_is_object(obj))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config: expected a JSON object");
    oj_train_config tmp = *c;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        const key_def *k = find_key(key);
        if (!k)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "config: unknown key '%s' (see 'ojas train --help' for the keys)",
                                key);
        oj_status st = apply_one(&tmp, k, v, err);
        if (st)
            return st;
    }
    *c = tmp;
    return OJ_OK;
}

oj_status oj_train_config_apply_json(oj_train_config *c, const char *json, oj_error *err) {
    if (!c || !json)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config: NULL argument");
    json_error_t je;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config: bad JSON at line %d column %d: %s",
                            je.line, je.column, je.text);
    oj_status st = apply_object(c, root, err);
    json_decref(root);
    return st;
}

oj_status oj_train_config_load(oj_train_config *c, const char *path, oj_error *err) {
    if (!c || !path)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config: NULL argument");
    FILE *f = oj__fopen_regular(path, "config", err);
    if (!f)
        return OJ_ERR_IO;
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config %s: bad JSON at line %d column %d: %s",
                            path, je.line, je.column, je.text);
    oj_error e2 = {0};
    oj_status st = apply_object(c, root, &e2);
    json_decref(root);
    if (st)
        oj_error_set(err, st, "%s: %s", path, e2.message);
    return st;
}

/* Text of a --set value as the JSON value of key k's type. */
static json_t *value_from_text(const key_def *k, const char *s, oj_error *err) {
    char *end;
    switch (k->type) {
    case K_STR:
    case K_ENUM:
    case K_DEVICE: {
        json_t *v = json_string(s); /* NULL when s is not UTF-8 */
        if (v)
            return v;
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config key '%s': the value is not UTF-8",
                     k->key);
        return NULL;
    }
    case K_I64:
    case K_U64: {
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (!errno && end != s && !*end)
            return json_integer(v);
        double d = strtod(s, &end); /* 1e6 */
        if (end != s && !*end && isfinite(d))
            return json_real(d);
        break;
    }
    case K_F64: {
        errno = 0;
        double d = strtod(s, &end);
        if (!errno && end != s && !*end && isfinite(d)) /* JSON has no NaN or inf */
            return json_real(d);
        break;
    }
    case K_BOOL:
        if (!strcmp(s, "true") || !strcmp(s, "1"))
            return json_true();
        if (!strcmp(s, "false") || !strcmp(s, "0"))
            return json_false();
        break;
    case K_BETAS: {
        char buf[128];
        snprintf(buf, sizeof buf, s[0] == '[' ? "%s" : "[%s]", s);
        json_t *v = json_loads(buf, 0, NULL);
        if (v)
            return v;
        break;
    }
    }
    oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config key '%s': cannot parse value '%s'", k->key, s);
    return NULL;
}

oj_status oj_train_config_set(oj_train_config *c, const char *assignment, oj_error *err) {
    if (!c || !assignment)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config: NULL argument");
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "--set '%s': expected key=value",
                            assignment);
    char key[64];
    size_t kl = (size_t)(eq - assignment);
    if (kl >= sizeof key)
        kl = sizeof key - 1;
    memcpy(key, assignment, kl);
    key[kl] = 0;
    const key_def *k = find_key(key);
    if (!k)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "config: unknown key '%s' (see 'ojas train --help' for the keys)", key);
    json_t *v = value_from_text(k, eq + 1, err);
    if (!v)
        return OJ_ERR_INVALID_ARGUMENT;
    oj_train_config tmp = *c;
    oj_status st = apply_one(&tmp, k, v, err);
    json_decref(v);
    if (!st)
        *c = tmp;
    return st;
}

/* ---------------------------------------------------------------- to JSON */

json_t *oj__train_config_json(const oj_train_config *c) {
    json_t *o = json_object();
    const char *base = (const char *)c;
    char buf[32];
    for (size_t i = 0; o && i < N_KEYS; i++) {
        const key_def *k = &k_keys[i];
        json_t *v = NULL;
        switch (k->type) {
        case K_STR: v = json_string(base + k->off); break;
        case K_I64: v = json_integer(*(const int64_t *)(base + k->off)); break;
        case K_U64: v = json_integer((json_int_t) * (const uint64_t *)(base + k->off)); break;
        case K_F64: v = json_real(*(const double *)(base + k->off)); break;
        case K_BOOL: v = json_boolean(*(const bool *)(base + k->off)); break;
        case K_ENUM: v = json_string(k->names[enum_get(base + k->off)]); break;
        case K_BETAS: v = json_pack("[ff]", c->beta1, c->beta2); break;
        case K_DEVICE:
            oj_device_name(c->device, buf, sizeof buf);
            v = json_string(buf);
            break;
        }
        if (!v || json_object_set_new(o, k->key, v)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

char *oj_train_config_to_json(const oj_train_config *c) {
    if (!c)
        return NULL;
    json_t *o = oj__train_config_json(c);
    /* the fewest significant digits (15..17) that read back to the same
     * values: 0.95, not 0.94999999999999996 */
    char *s = NULL;
    for (int p = 15; o && p <= 17 && !s; p++) {
        s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(p));
        json_t *back = s && p < 17 ? json_loads(s, 0, NULL) : NULL;
        if (p < 17 && !(back && json_equal(o, back))) {
            free(s);
            s = NULL;
        }
        json_decref(back);
    }
    json_decref(o);
    return s;
}

oj_status oj__train_config_from_json(oj_train_config *c, const json_t *obj, oj_error *err) {
    return apply_object(c, obj, err);
}

/* ---------------------------------------------------------------- checks */

/* init_from: the model is DIR/config.json, whose shape the weights have. */
static oj_status init_from_config(const oj_train_config *c, oj_gpt_config *out, oj_error *err) {
    static const char *const shape[] = {"vocab_size", "block_size", "n_layer", "n_head",
                                        "n_kv_head", "n_embd", "mlp_hidden"};
    const int64_t v[] = {c->vocab_size, c->block_size, c->n_layer, c->n_head,
                         c->n_kv_head, c->n_embd, c->mlp_hidden};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] > 0)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "config key '%s': init_from takes the model's shape from %s/"
                                "config.json (its weights have that shape); leave '%s' unset",
                                shape[i], c->init_from, shape[i]);
    char path[sizeof c->init_from + 16];
    snprintf(path, sizeof path, "%s/config.json", c->init_from);
    oj_error e2 = {0};
    if (oj_gpt_config_from_hf(path, out, &e2))
        return oj_error_set(err, e2.status, "config key 'init_from': %s", e2.message);
    return OJ_OK;
}

oj_status oj_train_model_config(const oj_train_config *c, int64_t tok_vocab, oj_gpt_config *out,
                                oj_error *err) {
    oj_gpt_config m;
    if (c->init_from[0]) {
        oj_status st = init_from_config(c, &m, err);
        if (!st)
            *out = m;
        return st;
    }
    if (!oj_gpt_preset(c->model, &m)) {
        char names[512];
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "config key 'model': unknown preset '%s' (presets: %s)", c->model,
                            oj_gpt_preset_list(names, sizeof names));
    }
#define OVR(f)        \
    if (c->f > 0)     \
        m.f = c->f;
    OVR(block_size) OVR(n_layer) OVR(n_head) OVR(n_kv_head) OVR(n_embd) OVR(mlp_hidden)
#undef OVR
    if (c->vocab_size > 0)
        m.vocab_size = c->vocab_size;
    else if (tok_vocab > 0)
        m.vocab_size = tok_vocab;
    if (c->n_head > 0 && c->n_kv_head == 0 && m.n_head % m.n_kv_head != 0)
        m.n_kv_head = m.n_head; /* a head override the preset's grouping does not divide */
    if (m.family == OJ_GPT2)
        m.n_kv_head = m.n_head;
    oj_error e2 = {0};
    if (oj_gpt_config_check(&m, &e2))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "model '%s' with the overrides: %s",
                            c->model, e2.message);
    *out = m;
    return OJ_OK;
}

oj_status oj_train_config_check(const oj_train_config *c, oj_error *err) {
    if (!c)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config: NULL");
    /* enums set from C: a value outside the table would run as something
     * else (dtype 7 as f16) and index past the names when serialised */
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &k_keys[i];
        if (k->type != K_ENUM)
            continue;
        int v = enum_get((const char *)c + k->off), n = 0;
        while (k->names[n])
            n++;
        if (v < 0 || v >= n)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "config key '%s': value %d is not one of the %d choices (\"%s\" ...)",
                                k->key, v, n, k->names[0]);
    }
    oj_gpt_config m;
    oj_status st = oj_train_model_config(c, 0, &m, err);
    if (st)
        return st;
    if (c->seq_len > m.block_size)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "config: seq_len %lld exceeds the model's block_size %lld",
                            (long long)c->seq_len, (long long)m.block_size);
    if (c->min_lr > c->lr)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config: min_lr %g exceeds lr %g",
                            c->min_lr, c->lr);
    if (!c->data_dir[0])
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "config key 'data_dir' is empty");
    if (c->cuda_graph && c->device.type != OJ_DEVICE_CUDA)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "config: cuda_graph needs device cuda (CUDA graphs are a CUDA feature; "
                            "--set cuda_graph=false runs without)");
    /* cuda_graph's one micro-batch per rank: checked with the world size
     * (train/dist.c) */
    if (c->lora_r > 0) { /* what a LoRA run is refused with, each by its key */
        const char *key = !c->init_from[0]                   ? "init_from"
                          : c->lora_dropout != 0              ? "lora_dropout"
                          : !(c->lora_alpha > 0)              ? "lora_alpha"
                          : c->optimizer != OJ_TRAIN_ADAMW    ? "optimizer"
                          : c->grad_accum != 1                ? "grad_accum"
                          : c->cuda_graph                     ? "cuda_graph"
                                                              : NULL;
        if (key)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "config key '%s': LoRA (lora_r > 0) needs init_from set, "
                                "lora_dropout 0, lora_alpha > 0, optimizer adamw, grad_accum 1 "
                                "and cuda_graph false",
                                key);
    }
    if (!(c->dist_timeout > 0))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "config key 'dist_timeout': %g is not > 0 seconds", c->dist_timeout);
    return OJ_OK;
}

oj_status oj_train_config_from_checkpoint(const char *path, oj_train_config *c, oj_error *err) {
    json_t *state = NULL;
    char dir[4096];
    oj_status st = oj__train_read_state(path, &state, dir, sizeof dir, err);
    if (st)
        return st;
    json_t *cfg = json_object_get(state, "config");
    oj_train_config tmp = oj_train_config_default();
    oj_error e2 = {0};
    if (!cfg)
        st = oj_error_set(err, OJ_ERR_CORRUPT, "%s/state.json has no \"config\"", dir);
    else if ((st = apply_object(&tmp, cfg, &e2))) /* name the file that holds the bad value */
        oj_error_set(err, st, "%s/state.json: %s", dir, e2.message);
    json_decref(state);
    if (!st)
        *c = tmp;
    return st;
}
