/* Writing a Hugging Face model directory (gpt.h, oj_gpt_save_hf_dir and
 * oj_hf_copy_files): config.json as transformers' save_pretrained
 * writes it for the architecture the config is (the inverse of
 * hf_config.c), model.safetensors under the parameters' names (which are
 * transformers'), and the tokenizer's files under the names transformers
 * reads. Every file is written to a temporary sibling and renamed. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"

/* The architecture an OJ_LLAMA config is: Qwen3 (QK-norm), Qwen2 (q/k/v
 * biases) or Llama; NULL for a mix no transformers class has. */
static const char *llama_arch(const oj_gpt_config *c, const char **model_type) {
    if (c->qk_norm && c->qkv_bias) return NULL;
    *model_type = c->qk_norm ? "qwen3" : c->qkv_bias ? "qwen2" : "llama";
    return c->qk_norm ? "Qwen3ForCausalLM" : c->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}

static int set(json_t *o, const char *k, json_t *v) { return json_object_set_new(o, k, v); }

/* config.json of c with vocabulary V and parameter dtype dt. */
static json_t *config_json(const oj_gpt_config *c, int64_t V, oj_dtype dt) {
    json_t *o = json_object();
    const char *arch, *mt = "gpt2";
    if (c->family == OJ_GPT2) {
        arch = "GPT2LMHeadModel";
        set(o, "n_positions", json_integer(c->block_size));
        set(o, "n_ctx", json_integer(c->block_size));
        set(o, "n_embd", json_integer(c->n_embd));
        set(o, "n_layer", json_integer(c->n_layer));
        set(o, "n_head", json_integer(c->n_head));
        set(o, "n_inner", json_integer(c->mlp_hidden));
        set(o, "activation_function", json_string("gelu_new"));
        set(o, "layer_norm_epsilon", json_real(c->norm_eps));
        set(o, "resid_pdrop", json_real(0));
        set(o, "embd_pdrop", json_real(0));
        set(o, "attn_pdrop", json_real(0));
        set(o, "scale_attn_weights", json_true());
    } else {
        arch = llama_arch(c, &mt);
        const int64_t D = c->head_dim ? c->head_dim : c->n_embd / c->n_head;
        set(o, "hidden_size", json_integer(c->n_embd));
        set(o, "intermediate_size", json_integer(c->mlp_hidden));
        set(o, "num_hidden_layers", json_integer(c->n_layer));
        set(o, "num_attention_heads", json_integer(c->n_head));
        set(o, "num_key_value_heads", json_integer(c->n_kv_head));
        set(o, "head_dim", json_integer(D));
        set(o, "max_position_embeddings", json_integer(c->block_size));
        set(o, "rms_norm_eps", json_real(c->norm_eps));
        set(o, "rope_theta", json_real(c->rope_theta));
        set(o, "hidden_act", json_string("silu"));
        set(o, "attention_bias", json_boolean(c->qkv_bias));
        set(o, "attention_dropout", json_real(0));
        set(o, "mlp_bias", json_false());
        if (c->qkv_bias || c->qk_norm) set(o, "use_sliding_window", json_false());
        if (c->rope_factor > 0)
            set(o, "rope_scaling",
                json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor",
                          c->rope_factor, "low_freq_factor", c->rope_low_freq_factor,
                          "high_freq_factor", c->rope_high_freq_factor,
                          "original_max_position_embeddings", (json_int_t)c->rope_original_context));
        else
            set(o, "rope_scaling", json_null());
    }
    set(o, "architectures", json_pack("[s]", arch));
    set(o, "model_type", json_string(mt));
    set(o, "vocab_size", json_integer(V));
    set(o, "tie_word_embeddings", json_boolean(c->family == OJ_GPT2 || !c->untied_head));
    set(o, "initializer_range", json_real(c->init_std > 0 ? c->init_std : 0.02));
    set(o, "torch_dtype", json_string(dt == OJ_BF16 ? "bfloat16" : dt == OJ_F16 ? "float16" : "float32"));
    set(o, "use_cache", json_true());
    return o;
}

/* The parameters with a vocabulary dimension (dim 0 of [V, C]). */
static bool has_vocab_rows(const char *name) {
    return strcmp(name, "transformer.wte.weight") == 0 || strcmp(name, "model.embed_tokens.weight") == 0 ||
           strcmp(name, "lm_head.weight") == 0;
}

oj_status oj_gpt_save_hf_dir(const oj_gpt *m, const char *dir, int64_t vocab_size, oj_error *err) {
    if (m == NULL || dir == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "save_hf_dir: NULL model or directory");
    const oj_gpt_config *c = oj_gpt_get_config(m);
    const char *mt;
    if (c->family == OJ_NANOLAB)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "save_hf_dir: a nanolab model has no transformers architecture "
                            "(gpt2 and llama-family models export)");
    if (c->family == OJ_LLAMA && llama_arch(c, &mt) == NULL)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "save_hf_dir: a llama-family model with both q/k/v biases and QK-norm "
                            "has no transformers architecture (Qwen2 has the one, Qwen3 the other)");
    const int64_t V = vocab_size > 0 ? vocab_size : c->vocab_size;
    if (V > c->vocab_size)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "save_hf_dir: vocab_size %lld is larger than the model's %lld",
                            (long long)V, (long long)c->vocab_size);
    oj_status st = oj__mkdirs(dir, err);
    if (st) return st;
    oj_named_tensors sd = oj_gpt_state_dict(m);
    oj_dtype dt = sd.n ? oj_tensor_dtype(sd.tensors[0]) : OJ_F32;
    char path[OJ__PATH_MAX];
    /* config.json */
    json_t *cfg = config_json(c, V, dt);
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(cfg);
    if (text == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "save_hf_dir: out of memory");
    size_t tl = strlen(text);
    text[tl] = '\n'; /* json_dumps's NUL, replaced: the file ends in a newline */
    st = oj__path_join(path, sizeof path, dir, "config.json", err);
    if (!st) st = oj__atomic_write(path, text, tl + 1, err);
    free(text);
    if (st) return st;
    /* model.safetensors: the vocabulary rows beyond V dropped; a tied head
     * is not listed (as save_pretrained leaves it out) */
    oj_engine *eng = oj_gpt_engine(m);
    oj_tensor **ts = malloc((size_t)(sd.n ? sd.n : 1) * sizeof *ts);
    if (ts == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "save_hf_dir: out of memory");
    oj_scope_begin(eng);
    for (int64_t i = 0; i < sd.n && !st; i++) {
        ts[i] = sd.tensors[i];
        if (V < c->vocab_size && has_vocab_rows(sd.names[i])) {
            ts[i] = oj_narrow(sd.tensors[i], 0, 0, V);
            if (ts[i] == NULL)
                st = oj_error_set(err, oj_last_status(eng), "save_hf_dir: %s", oj_last_error(eng));
        }
    }
    static const char *const meta[] = {"format", "pt", NULL};
    if (!st) st = oj__path_join(path, sizeof path, dir, "model.safetensors", err);
    if (!st) st = oj_safetensors_save(path, sd.n, sd.names, ts, meta, err);
    oj_scope_end(eng);
    free(ts);
    return st;
}

/* Copy src to dst (atomic replacement). */
static oj_status copy_file(const char *src, const char *dst, oj_error *err) {
    uint8_t *buf = NULL;
    size_t len = 0;
    oj_status st = oj__read_file(src, (size_t)1 << 31, &buf, &len, err);
    if (!st) st = oj__atomic_write(dst, buf, len, err);
    free(buf);
    return st;
}

static bool is_file(const char *dir, const char *name) {
    char p[OJ__PATH_MAX];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

oj_status oj_hf_copy_files(const char *src, const char *dst, oj_error *err) {
    if (src == NULL || dst == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "hf_copy_files: NULL directory");
    /* (name in src, name in dst): GPT-2's encoder.json / vocab.bpe are
     * transformers' vocab.json / merges.txt */
    static const char *const files[][2] = {
        {"tokenizer.json", "tokenizer.json"},
        {"tokenizer_config.json", "tokenizer_config.json"},
        {"special_tokens_map.json", "special_tokens_map.json"},
        {"encoder.json", "vocab.json"},
        {"vocab.bpe", "merges.txt"},
        {"vocab.json", "vocab.json"},
        {"merges.txt", "merges.txt"},
        {"tokenizer.model", "tokenizer.model"},
        {"generation_config.json", "generation_config.json"},
    };
    oj_status st = oj__mkdirs(dst, err);
    int copied = 0; /* tokenizer files */
    char a[OJ__PATH_MAX], b[OJ__PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof files[0] && !st; i++) {
        if (!is_file(src, files[i][0])) continue;
        if ((st = oj__path_join(a, sizeof a, src, files[i][0], err)) ||
            (st = oj__path_join(b, sizeof b, dst, files[i][1], err)))
            break;
        if (strcmp(a, b) != 0) st = copy_file(a, b, err);
        copied += strcmp(files[i][0], "generation_config.json") != 0;
    }
    DIR *d = st ? NULL : opendir(src);
    struct dirent *de;
    while (d && !st && (de = readdir(d))) { /* tiktoken rank files (ojas reads them) */
        size_t n = strlen(de->d_name);
        if (n <= 9 || strcmp(de->d_name + n - 9, ".tiktoken") != 0 || !is_file(src, de->d_name))
            continue;
        if (!(st = oj__path_join(a, sizeof a, src, de->d_name, err)) &&
            !(st = oj__path_join(b, sizeof b, dst, de->d_name, err)) && strcmp(a, b) != 0)
            st = copy_file(a, b, err);
        copied++;
    }
    if (d) closedir(d);
    if (!st && copied == 0)
        st = oj_error_set(err, OJ_ERR_IO,
                          "hf_copy_files: %s holds no tokenizer files (tokenizer.json, "
                          "encoder.json + vocab.bpe, vocab.json + merges.txt, *.tiktoken)",
                          src);
    return st;
}
