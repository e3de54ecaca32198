/* GPT presets and config validation. */
#include <stdio.h>
#include <string.h>

#include "ojas/gpt.h"

typedef struct {
    const char *name;
    oj_gpt_config cfg;
} preset;

/* the llama family's fields after init_std: none */
#define NO_LLAMA 0, false, false, false, 0, 0, 0, 0
#define GPT2(L, H, C) {OJ_GPT2, 50257, 1024, L, H, H, C, 4 * (C), 1e-5, 10000.0, 0.02, NO_LLAMA}
#define NANO(V, TT, L, H, KV, C, F) {OJ_NANOLAB, V, TT, L, H, KV, C, F, 1e-6, 10000.0, 0.02, NO_LLAMA}

static const preset presets[] = {
    {"gpt2-124m", GPT2(12, 12, 768)},
    {"gpt2-355m", GPT2(24, 16, 1024)},
    {"gpt2-774m", GPT2(36, 20, 1280)},
    {"gpt2-1558m", GPT2(48, 25, 1600)},
    {"gpt2-tiny", {OJ_GPT2, 512, 64, 2, 4, 4, 64, 256, 1e-5, 10000.0, 0.02, NO_LLAMA}},
    {"nanolab-124m", NANO(50304, 1024, 12, 12, 12, 768, 2048)},
    {"nanolab-tiny", NANO(512, 64, 2, 4, 2, 64, 128)},
    {"nanolab-small", NANO(4096, 256, 4, 4, 2, 128, 384)},
    {"nanolab-demo", NANO(4096, 256, 6, 6, 2, 192, 512)},
};

bool oj_gpt_preset(const char *name, oj_gpt_config *cfg) {
    if (name == NULL || cfg == NULL) return false;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name) == 0) {
            *cfg = presets[i].cfg;
            return true;
        }
    }
    return false;
}

const char *oj_gpt_preset_name(int i) {
    return i >= 0 && (size_t)i < sizeof presets / sizeof presets[0] ? presets[i].name : NULL;
}

char *oj_gpt_preset_list(char *buf, size_t len) {
    if (buf == NULL || len == 0) return buf;
    buf[0] = '\0';
    for (int i = 0; oj_gpt_preset_name(i); i++) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%s", i ? ", " : "", oj_gpt_preset_name(i));
    }
    return buf;
}

const char *oj_gpt_family_name(oj_gpt_family f) {
    return f == OJ_GPT2 ? "gpt2" : f == OJ_NANOLAB ? "nanolab" : f == OJ_LLAMA ? "llama" : "unknown";
}

oj_status oj_gpt_config_check(const oj_gpt_config *c, oj_error *err) {
    if (c == NULL) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gpt config: NULL");
    if (c->family != OJ_GPT2 && c->family != OJ_NANOLAB && c->family != OJ_LLAMA)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gpt config: unknown family %d",
                            (int)c->family);
#define POS(f)                                                                                  \
    if (c->f <= 0)                                                                              \
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gpt config: " #f " must be > 0, got %lld", \
                            (long long)c->f);
    POS(vocab_size) POS(block_size) POS(n_layer) POS(n_head) POS(n_kv_head) POS(n_embd)
    POS(mlp_hidden)
#undef POS
    if (c->family != OJ_LLAMA && (c->head_dim != 0 || c->qkv_bias || c->qk_norm || c->untied_head))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: head_dim, qkv_bias, qk_norm and untied_head are the llama "
                            "family's (0 / false for %s)", oj_gpt_family_name(c->family));
    if (c->rope_factor != 0 && c->family != OJ_LLAMA)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: rope scaling (rope_factor) is the llama family's");
    if (c->rope_factor != 0 &&
        (!(c->rope_factor > 0) || !(c->rope_low_freq_factor > 0) ||
         !(c->rope_high_freq_factor > c->rope_low_freq_factor) || c->rope_original_context <= 0))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: llama3 rope scaling needs rope_factor > 0, 0 < "
                            "rope_low_freq_factor < rope_high_freq_factor and "
                            "rope_original_context > 0");
    if (c->head_dim < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gpt config: head_dim must be >= 0, got %lld",
                            (long long)c->head_dim);
    if (c->head_dim == 0 && c->n_embd % c->n_head != 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: n_embd %lld is not a multiple of n_head %lld",
                            (long long)c->n_embd, (long long)c->n_head);
    if (c->n_head % c->n_kv_head != 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: n_head %lld is not a multiple of n_kv_head %lld",
                            (long long)c->n_head, (long long)c->n_kv_head);
    const int64_t D = c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head;
    if (c->family != OJ_GPT2 && D % 2 != 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: head dim %lld must be even for rotary embeddings",
                            (long long)D);
    if (c->family == OJ_GPT2 && c->n_kv_head != c->n_head)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: the gpt2 family has no grouped-query attention "
                            "(n_kv_head %lld != n_head %lld)",
                            (long long)c->n_kv_head, (long long)c->n_head);
    if (!(c->norm_eps > 0) || !(c->init_std > 0) || !(c->rope_theta > 0))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gpt config: norm_eps, init_std and rope_theta must be > 0");
    return OJ_OK;
}

/* a + b and a * b, saturating at INT64_MAX (inputs >= 0) */
static int64_t sadd(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
static int64_t smul(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

int64_t oj_gpt_config_num_params(const oj_gpt_config *c) {
    if (oj_gpt_config_check(c, NULL) != OJ_OK) return -1;
    const int64_t C = c->n_embd, V = c->vocab_size, H = c->n_head, Hkv = c->n_kv_head;
    const int64_t D = c->head_dim > 0 ? c->head_dim : C / H, F = c->mlp_hidden, L = c->n_layer;
    /* the shapes oj_gpt_create makes, layer by layer */
    int64_t layer, n = smul(V, C);
    if (c->family == OJ_LLAMA) {
        layer = sadd(smul(2, C), smul(smul(H + 2 * Hkv, D), C)); /* norms, q k v */
        if (c->qkv_bias) layer = sadd(layer, smul(H + 2 * Hkv, D));
        if (c->qk_norm) layer = sadd(layer, 2 * D);
        layer = sadd(layer, smul(C, smul(H, D)));                /* o */
        layer = sadd(layer, smul(3, smul(F, C)));                /* SwiGLU */
        n = sadd(n, sadd(smul(L, layer), C));                    /* + norm */
        if (c->untied_head) n = sadd(n, smul(V, C));             /* lm_head */
    } else if (c->family == OJ_GPT2) {
        n = sadd(n, smul(c->block_size, C));                   /* wpe */
        layer = sadd(smul(4, C), sadd(smul(C, 3 * C), 3 * C)); /* ln_1/2 w+b, c_attn */
        layer = sadd(layer, sadd(smul(C, C), C));              /* attn c_proj */
        layer = sadd(layer, sadd(smul(C, F), F));              /* mlp c_fc */
        layer = sadd(layer, sadd(smul(F, C), C));              /* mlp c_proj */
        n = sadd(n, sadd(smul(L, layer), 2 * C));              /* + ln_f w+b */
    } else {
        layer = sadd(smul(2, C), smul(smul(H + 2 * Hkv, D), C)); /* norms, q k v */
        layer = sadd(layer, smul(C, smul(H, D)));                /* o */
        layer = sadd(layer, sadd(smul(H, C), H));                /* gate */
        layer = sadd(layer, smul(3, smul(F, C)));                /* SwiGLU */
        n = sadd(n, sadd(smul(L, layer), sadd(L - 1, C)));       /* lambdas (l > 0), ln_f */
    }
    return n;
}
