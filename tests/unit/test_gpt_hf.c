// test: GPT models from Hugging Face directories (oj_gpt_load_dir) — a
// sharded llama-family directory loads to the logits of the model that
// wrote it, decodes greedily the same through oj_generate and the static
// decoder, trains under bf16 autocast; missing shards, shape and tie
// mismatches and unknown architectures fail with one line naming the file,
// leaking nothing. (Numerics against PyTorch: tests/reference/test_hf_dir.py.)
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpt_testutil.h"
#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"

GT_SCRATCH_DIR("gpt-hf")

#define QWEN3_CONFIG(extra)                                                                   \
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 40, \"hidden_size\": 24,\n"  \
    " \"intermediate_size\": 40, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"    \
    " \"num_key_value_heads\": 2, \"head_dim\": 8, \"max_position_embeddings\": 48,\n"        \
    " \"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-6" extra "}\n"

/* g_dir/name with config `json` and the weights of a model made from it
 * (seed 5), in two shards plus the index (tensor i in shard i % 2). The
 * model is returned (caller frees) so tests can compare against it. */
static oj_gpt *write_dir(oj_engine *eng, const char *name, const char *json, char *dir, size_t len) {
    snprintf(dir, len, "%s/%s", g_dir, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    gt_write_text(dir, "config.json", json);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    oj_gpt_config c;
    oj_error e = {0};
    assert_int_equal(oj_gpt_config_from_hf(p, &c, &e), OJ_OK);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 5, &m), OJ_OK);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    char *index = malloc(64 * 1024);
    assert_non_null(index);
    size_t at = (size_t)snprintf(index, 64 * 1024, "{\"metadata\": {}, \"weight_map\": {");
    for (int s = 0; s < 2; s++) {
        const char *names[64];
        oj_tensor *ts[64];
        int64_t n = 0;
        for (int64_t i = s; i < sd.n; i += 2) {
            names[n] = sd.names[i];
            ts[n++] = sd.tensors[i];
            at += (size_t)snprintf(index + at, 64 * 1024 - at, "%s\"%s\": \"shard-%d.safetensors\"",
                                   at > 40 ? ", " : "", sd.names[i], s);
        }
        snprintf(p, sizeof p, "%s/shard-%d.safetensors", dir, s);
        assert_int_equal(oj_safetensors_save(p, n, names, ts, NULL, &e), OJ_OK);
    }
    snprintf(index + at, 64 * 1024 - at, "}}\n");
    gt_write_text(dir, "model.safetensors.index.json", index);
    free(index);
    return m;
}

static oj_tensor *tokens(oj_engine *eng, int64_t T, int64_t V) {
    int32_t v[64];
    for (int64_t i = 0; i < T; i++) v[i] = (int32_t)((i * 7 + 3) % V);
    int64_t shape[2] = {1, T};
    return oj_from_host(eng, 2, shape, OJ_I32, v, (size_t)T * sizeof *v);
}

static void test_sharded_dir_loads_decodes_trains(void **state) {
    (void)state;
    oj_engine *eng = gt_engine();
    char dir[400];
    oj_gpt *src = write_dir(eng, "ok", QWEN3_CONFIG(""), dir, sizeof dir);
    oj_gpt *m = NULL;
    oj_error e = {0};
    if (oj_gpt_load_dir(eng, dir, &m, &e) != OJ_OK) fail_msg("%s", e.message);
    const oj_gpt_config *c = oj_gpt_get_config(m);
    assert_int_equal(c->family, OJ_LLAMA);
    assert_true(c->qk_norm && c->untied_head && !c->qkv_bias);
    assert_int_equal(c->head_dim, 8);
    assert_int_equal(oj_gpt_num_params(m), oj_gpt_num_params(src));
    assert_int_equal(oj_gpt_config_num_params(c), oj_gpt_num_params(m));
    oj_gpt_config c2 = *c; /* Qwen2's biases, Llama's tied head */
    c2.qk_norm = false, c2.qkv_bias = true, c2.untied_head = false, c2.head_dim = 0;
    oj_gpt *m2 = NULL;
    assert_int_equal(oj_gpt_create(eng, &c2, 1, &m2), OJ_OK);
    assert_int_equal(oj_gpt_config_num_params(&c2), oj_gpt_num_params(m2));
    oj_gpt_free(m2);

    /* the same f32 weights: the same logits, bit for bit */
    oj_scope_begin(eng);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *x = tokens(eng, 12, 40);
    oj_tensor *a = oj_gpt_forward(src, x), *b = oj_gpt_forward(m, x);
    assert_non_null(a);
    assert_non_null(b);
    for (int64_t i = 0; i < oj_numel(a); i++) assert_true(oj_item_at(a, i) == oj_item_at(b, i));
    oj_set_grad_enabled(eng, prev);
    oj_scope_end(eng);

    /* greedy: oj_generate at temperature 0 and the static decoder agree */
    int32_t prompt[4] = {1, 5, 9, 2};
    const int32_t *pp = prompt;
    int64_t plen = 4, glen = 0;
    int32_t *gen = NULL;
    oj_sampler_config sc = oj_sampler_config_default();
    sc.max_new_tokens = 20;
    sc.temperature = 0;
    assert_int_equal(oj_generate(m, 1, &pp, &plen, &sc, &gen, &glen, NULL, NULL), OJ_OK);
    assert_int_equal(glen, 20);
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, 24, false, &d), OJ_OK);
    int32_t t;
    assert_int_equal(oj_gpt_decoder_prefill(d, prompt, 4, &t), OJ_OK);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(t, gen[i]);
        if (i + 1 < 20) assert_int_equal(oj_gpt_decoder_step(d, &t), OJ_OK);
    }
    oj_gpt_decoder_free(d);
    free(gen);

    /* a training step under bf16 autocast: a finite loss, a gradient on
     * the QK-norm weights and the untied head */
    oj_set_autocast(eng, true, OJ_BF16);
    oj_scope_begin(eng);
    oj_tensor *xi = tokens(eng, 16, 40), *yi = tokens(eng, 16, 39);
    oj_tensor *loss = oj_gpt_loss(m, xi, yi);
    if (loss == NULL) fail_msg("%s", oj_last_error(eng));
    assert_true(isfinite(oj_item(loss)));
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    oj_scope_end(eng);
    oj_set_autocast(eng, false, OJ_BF16);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    int with_grad = 0;
    for (int64_t i = 0; i < sd.n; i++) {
        oj_tensor *g = oj_grad(sd.tensors[i]);
        if (g == NULL) fail_msg("no gradient for %s", sd.names[i]);
        with_grad++;
    }
    assert_int_equal(with_grad, sd.n);
    oj_gpt_free(m);
    oj_gpt_free(src);
    oj_engine_free(eng);
}

/* oj_gpt_load_dir(dir) fails with `st` and a one-line message holding
 * every needle (NULL-terminated); *out stays NULL. */
static void expect_fail(oj_engine *eng, const char *dir, oj_status st, const char *const *needles) {
    oj_gpt *m = (oj_gpt *)1;
    oj_error e = {0};
    oj_status got = oj_gpt_load_dir(eng, dir, &m, &e);
    if (got != st) fail_msg("status %d, want %d: %s", (int)got, (int)st, e.message);
    assert_null(m);
    assert_null(strchr(e.message, '\n'));
    for (int i = 0; needles[i]; i++)
        if (!strstr(e.message, needles[i])) fail_msg("'%s' lacks '%s'", e.message, needles[i]);
}

static void test_bad_directories(void **state) {
    (void)state;
    oj_engine *eng = gt_engine();
    char dir[400], p[512];

    /* a shard the index names is missing */
    oj_gpt_free(write_dir(eng, "noshard", QWEN3_CONFIG(""), dir, sizeof dir));
    snprintf(p, sizeof p, "%s/shard-1.safetensors", dir);
    assert_int_equal(unlink(p), 0);
    expect_fail(eng, dir, OJ_ERR_IO,
                (const char *[]){"model.safetensors.index.json", "shard-1.safetensors", NULL});

    /* config.json gives another MLP width than the weights have */
    oj_gpt_free(write_dir(eng, "shape", QWEN3_CONFIG(""), dir, sizeof dir));
    gt_write_text(dir, "config.json", QWEN3_CONFIG(", \"intermediate_size\": 41"));
    /* (a duplicate key: refused as bad JSON, naming config.json) */
    expect_fail(eng, dir, OJ_ERR_CORRUPT, (const char *[]){"config.json", "duplicate", NULL});
    gt_write_text(dir, "config.json",
               "{\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 40, \"hidden_size\": 24,"
               " \"intermediate_size\": 41, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"num_key_value_heads\": 2, \"head_dim\": 8, \"max_position_embeddings\": 48}");
    expect_fail(eng, dir, OJ_ERR_SHAPE,
                (const char *[]){"shard-", "model.layers.0.mlp.gate_proj.weight has shape [40, 24]",
                                 "config.json gives [41, 24]", NULL});

    /* tie_word_embeddings true while lm_head.weight differs */
    oj_gpt_free(write_dir(eng, "tie", QWEN3_CONFIG(""), dir, sizeof dir));
    gt_write_text(dir, "config.json", QWEN3_CONFIG(", \"tie_word_embeddings\": true"));
    expect_fail(eng, dir, OJ_ERR_INVALID_ARGUMENT,
                (const char *[]){"config.json: tie_word_embeddings is true", "lm_head.weight", NULL});

    /* an architecture ojas does not have */
    gt_write_text(dir, "config.json", "{\"architectures\": [\"GemmaForCausalLM\"]}");
    expect_fail(eng, dir, OJ_ERR_INVALID_ARGUMENT,
                (const char *[]){"config.json: architectures[0] 'GemmaForCausalLM' is not supported",
                                 NULL});
    /* no config.json at all */
    snprintf(p, sizeof p, "%s/none", g_dir);
    expect_fail(eng, p, OJ_ERR_IO, (const char *[]){"cannot open", "none/config.json", NULL});
    oj_engine_free(eng);
}

/* config.json `json` parsed: its status, *c, and the message in e. */
static oj_status parse_config(const char *json, oj_gpt_config *c, oj_error *e) {
    gt_write_text(g_dir, "config.json", json);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    return oj_gpt_config_from_hf(p, c, e);
}

#define MISTRAL_CONFIG(extra)                                                                   \
    "{\"architectures\": [\"MistralForCausalLM\"], \"vocab_size\": 40, \"hidden_size\": 24,\n"  \
    " \"intermediate_size\": 40, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"      \
    " \"num_key_value_heads\": 2, \"max_position_embeddings\": 32768" extra "}\n"

/* Fields whose default or value changes the maths: MistralConfig's window
 * is 4096 when the key is absent (null: none), and a partial rotary factor
 * (transformers' rope init reads it) is refused, not ignored. */
/* dir/model.safetensors: src's parameters plus a tensor `extra` of 4
 * floats. */
static void write_single(oj_engine *eng, const char *dir, oj_gpt *src, const char *extra) {
    oj_named_tensors sd = oj_gpt_state_dict(src);
    const char *names[64];
    oj_tensor *ts[64];
    assert_true(sd.n < 64);
    for (int64_t i = 0; i < sd.n; i++) names[i] = sd.names[i], ts[i] = sd.tensors[i];
    int64_t four = 4;
    oj_tensor *x = oj_zeros(eng, 1, &four, OJ_F32);
    names[sd.n] = extra, ts[sd.n] = x;
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    oj_error e = {0};
    assert_int_equal(oj_safetensors_save(p, sd.n + 1, names, ts, NULL, &e), OJ_OK);
    oj_release(x);
}

/* Tensors the config's model does not take are refused by name, not
 * dropped: layers past num_hidden_layers, a bias Llama has no flag for;
 * a rotary_emb.inv_freq buffer is accepted. */
static void test_unused_tensors_refused(void **state) {
    (void)state;
    oj_engine *eng = gt_engine();
    char dir[400];
    oj_gpt *src = write_dir(eng, "layers", QWEN3_CONFIG(""), dir, sizeof dir);
    gt_write_text(dir, "config.json",
               "{\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 40, \"hidden_size\": 24,"
               " \"intermediate_size\": 40, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
               " \"num_key_value_heads\": 2, \"head_dim\": 8, \"max_position_embeddings\": 48}");
    expect_fail(eng, dir, OJ_ERR_SHAPE,
                (const char *[]){"model.safetensors.index.json: tensor model.layers.1.",
                                 "is of layer 1", "gives 1 layers", NULL});
    gt_write_text(dir, "config.json", QWEN3_CONFIG(""));
    write_single(eng, dir, src, "model.layers.0.self_attn.rotary_emb.inv_freq");
    oj_gpt *m = NULL;
    oj_error e = {0};
    if (oj_gpt_load_dir(eng, dir, &m, &e) != OJ_OK) fail_msg("%s", e.message);
    oj_gpt_free(m);
    write_single(eng, dir, src, "model.layers.0.self_attn.o_proj.bias");
    expect_fail(eng, dir, OJ_ERR_SHAPE,
                (const char *[]){"model.safetensors: tensor model.layers.0.self_attn.o_proj.bias "
                                 "is not part of the model", NULL});
    oj_gpt_free(src);
    /* Qwen2's q/k/v biases under a Llama config.json */
    src = write_dir(eng, "bias",
                    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"vocab_size\": 40, "
                    "\"hidden_size\": 24, \"intermediate_size\": 40, \"num_hidden_layers\": 2, "
                    "\"num_attention_heads\": 4, \"max_position_embeddings\": 48}",
                    dir, sizeof dir);
    oj_gpt_free(src);
    gt_write_text(dir, "config.json",
                  "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 40, "
                  "\"hidden_size\": 24, \"intermediate_size\": 40, \"num_hidden_layers\": 2, "
                  "\"num_attention_heads\": 4, \"max_position_embeddings\": 48}");
    expect_fail(eng, dir, OJ_ERR_SHAPE, (const char *[]){"_proj.bias is not part of the model", NULL});
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_config_window_default_and_partial_rotary(void **state) {
    (void)state;
    oj_gpt_config c;
    oj_error e = {0};
    assert_int_equal(parse_config(MISTRAL_CONFIG(""), &c, &e), OJ_OK);
    assert_int_equal(c.block_size, 4096);
    assert_int_equal(parse_config(MISTRAL_CONFIG(", \"sliding_window\": null"), &c, &e), OJ_OK);
    assert_int_equal(c.block_size, 32768);
    assert_int_equal(parse_config(MISTRAL_CONFIG(", \"sliding_window\": 100"), &c, &e), OJ_OK);
    assert_int_equal(c.block_size, 100);

    assert_int_equal(parse_config(QWEN3_CONFIG(", \"partial_rotary_factor\": 1.0"), &c, &e), OJ_OK);
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"partial_rotary_factor\": 0.5"), &c, &e),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "config.json: partial_rotary_factor 0.5 is not supported"));
    e = (oj_error){0};
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"rope_parameters\": {\"rope_type\": \"default\","
                                               " \"rope_theta\": 10000.0,"
                                               " \"partial_rotary_factor\": 0.25}"),
                                  &c, &e),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "rope_parameters.partial_rotary_factor is not supported"));
}

/* Keys that would make transformers load another model than ojas: a
 * model_type naming another family than architectures[0], rope_scaling and
 * rope_parameters that disagree; the same values in both load. */
static void test_config_disagreements_refused(void **state) {
    (void)state;
    oj_gpt_config c;
    oj_error e = {0};
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"model_type\": \"qwen3\""), &c, &e), OJ_OK);
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"model_type\": \"qwen2\""), &c, &e),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "model_type 'qwen2' does not match architectures[0] "
                                      "'Qwen3ForCausalLM' (whose model_type is 'qwen3')"));
#define LLAMA3_ROPE(theta)                                                                       \
    "{\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0,"                  \
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192" theta "}"
    e = (oj_error){0};
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"rope_scaling\": " LLAMA3_ROPE("")
                                               ", \"rope_parameters\": " LLAMA3_ROPE(
                                                   ", \"rope_theta\": 500000.0")),
                                  &c, &e), OJ_OK);
    assert_true(c.rope_theta == 500000.0 && c.rope_factor == 32.0);
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"rope_scaling\": {\"type\": \"llama3\", "
                                               "\"factor\": 32, \"low_freq_factor\": 1, "
                                               "\"high_freq_factor\": 4, "
                                               "\"original_max_position_embeddings\": 8192}"
                                               ", \"rope_parameters\": " LLAMA3_ROPE("")),
                                  &c, &e), OJ_OK); /* 32 and 32.0 agree */
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"rope_scaling\": {\"type\": \"llama3\", "
                                               "\"factor\": 8.0, \"low_freq_factor\": 1.0, "
                                               "\"high_freq_factor\": 4.0, "
                                               "\"original_max_position_embeddings\": 8192}"
                                               ", \"rope_parameters\": " LLAMA3_ROPE("")),
                                  &c, &e),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "rope_scaling.factor and rope_parameters.factor differ"));
    e = (oj_error){0};
    assert_int_equal(parse_config(QWEN3_CONFIG(", \"rope_scaling\": {\"type\": \"default\"}"
                                               ", \"rope_parameters\": " LLAMA3_ROPE("")),
                                  &c, &e),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "rope_scaling.type and rope_parameters.rope_type differ"));
#undef LLAMA3_ROPE
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharded_dir_loads_decodes_trains),
        cmocka_unit_test(test_bad_directories),
        cmocka_unit_test(test_unused_tensors_refused),
        cmocka_unit_test(test_config_window_default_and_partial_rotary),
        cmocka_unit_test(test_config_disagreements_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
