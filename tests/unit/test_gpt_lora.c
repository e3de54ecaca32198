// test: LoRA adapters on the GPT families (oj_gpt_lora_*) — a fresh adapter
// (B = 0) leaves the logits as they were; a backward reaches only A and B
// (every base weight frozen: no gradient) and an AdamW step over the
// adapters changes the logits but no base weight; PEFT's directory is
// written under PEFT's names and reads back to bit-identical logits;
// merging folds the adapter into the weights (same logits); bad settings
// and bad adapter files are refused by name; a LoRA fine-tune step peaks
// at <= 0.5x the memory of a full one. (PyTorch computing the same logits
// from the saved files: tests/reference/test_lora.py.)
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_testutil.h"
#include "gpt_testutil.h"
#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/io.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

GT_SCRATCH_DIR("lora")

static oj_gpt *model(oj_engine *eng, oj_gpt_family fam) {
    oj_gpt_config c = gt_small_config(fam);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 3, &m), OJ_OK);
    return m;
}

static oj_gpt_lora_config lora_cfg(const char *targets) {
    oj_gpt_lora_config lc = {0};
    lc.r = 4;
    lc.alpha = 8;
    snprintf(lc.targets, sizeof lc.targets, "%s", targets);
    return lc;
}

/* logits of m on a fixed [1, 10] prompt, copied to the host ([10 * 48]) */
static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* The loss of m on a fixed [2, 12] batch, backward run. */
static void loss_backward(oj_gpt *m, int64_t B, int64_t T, int64_t V) {
    oj_engine *eng = oj_gpt_engine(m);
    oj_scope_begin(eng);
    int32_t *ids = malloc((size_t)(B * T) * sizeof *ids), *tg = malloc((size_t)(B * T) * sizeof *tg);
    for (int64_t i = 0; i < B * T; i++)
        ids[i] = (int32_t)((i * 5 + 1) % V), tg[i] = (int32_t)((i * 11 + 2) % V);
    int64_t shape[2] = {B, T};
    oj_tensor *x = oj_from_host(eng, 2, shape, OJ_I32, ids, (size_t)(B * T) * sizeof *ids);
    oj_tensor *y = oj_from_host(eng, 2, shape, OJ_I32, tg, (size_t)(B * T) * sizeof *tg);
    oj_tensor *loss = oj_gpt_loss(m, x, y);
    assert_non_null(loss);
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    free(ids);
    free(tg);
    oj_scope_end(eng);
}

/* One AdamW step (lr 1e-2) over the adapters after a backward. */
static void adapter_step(oj_gpt *m) {
    oj_optim *o = oj_optim_create(oj_gpt_engine(m));
    oj_optim_hparams hp = oj_adamw_hparams(1e-2, 0);
    oj_named_tensors ad = oj_gpt_lora_params(m);
    assert_true(oj_optim_add_group(o, &hp, &ad) >= 0);
    loss_backward(m, 2, 12, 48);
    assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
    oj_optim_free(o);
}

static double checksum(const oj_named_tensors *sd) {
    double s = 0;
    for (int64_t i = 0; i < sd->n; i++)
        for (int64_t j = 0; j < oj_numel(sd->tensors[i]); j++)
            s += oj_item_at(sd->tensors[i], j) * (double)(j % 7 + 1);
    return s;
}

static void test_grads_reach_only_adapters(void **state) {
    (void)state;
    const oj_gpt_family fams[2] = {OJ_GPT2, OJ_LLAMA};
    for (int f = 0; f < 2; f++) {
        oj_engine *eng = gt_engine();
        oj_gpt *m = model(eng, fams[f]);
        float *base = gt_logits(m, 48);
        oj_gpt_lora_config lc = lora_cfg("");
        assert_int_equal(oj_gpt_lora_add(m, &lc, 7, NULL), OJ_OK);
        /* gpt2: c_attn, attn c_proj, c_fc, mlp c_proj; llama: 7 per block */
        oj_named_tensors ad = oj_gpt_lora_params(m);
        assert_int_equal(ad.n, 2 * 2 * (fams[f] == OJ_GPT2 ? 4 : 7));
        /* B = 0: the adapted model computes what the base does */
        float *fresh = gt_logits(m, 48);
        assert_true(max_diff(base, fresh, 480) == 0);
        /* A is U(-1/sqrt(in), 1/sqrt(in)), not all zero; B is zero */
        const double bound = 1.0 / sqrt(32.0);
        double amax = 0;
        for (int64_t j = 0; j < oj_numel(ad.tensors[0]); j++)
            amax = fmax(amax, fabs(oj_item_at(ad.tensors[0], j)));
        assert_true(amax > 0.5 * bound && amax <= bound);
        oj_named_tensors sd = oj_gpt_state_dict(m);
        double before = checksum(&sd);
        loss_backward(m, 2, 12, 48);
        for (int64_t i = 0; i < sd.n; i++) {
            assert_false(oj_requires_grad(sd.tensors[i]));
            assert_null(oj_grad(sd.tensors[i]));
        }
        for (int64_t i = 0; i < ad.n; i++) assert_non_null(oj_grad(ad.tensors[i]));
        /* two steps: the second gives A a gradient through a nonzero B */
        adapter_step(m);
        adapter_step(m);
        assert_true(checksum(&sd) == before);
        float *tuned = gt_logits(m, 48);
        assert_true(max_diff(base, tuned, 480) > 1e-4);
        free(base);
        free(fresh);
        free(tuned);
        oj_gpt_free(m);
        oj_engine_free(eng);
    }
}

static void test_save_load_merge(void **state) {
    (void)state;
    const oj_gpt_family fams[2] = {OJ_GPT2, OJ_LLAMA};
    const char *targets[2] = {"c_attn,c_proj,c_fc", "q,k,v,o_proj,gate,up,down"};
    for (int f = 0; f < 2; f++) {
        oj_engine *eng = gt_engine();
        oj_gpt *m = model(eng, fams[f]);
        oj_gpt_lora_config lc = lora_cfg(targets[f]);
        assert_int_equal(oj_gpt_lora_add(m, &lc, 7, NULL), OJ_OK);
        adapter_step(m);
        adapter_step(m);
        float *tuned = gt_logits(m, 48);
        char dir[400], p[500];
        snprintf(dir, sizeof dir, "%s/adapter%d", g_dir, f);
        oj_error err = {0};
        assert_int_equal(oj_gpt_lora_save(m, dir, "base-model", &err), OJ_OK);
        /* PEFT's config and names */
        snprintf(p, sizeof p, "%s/adapter_config.json", dir);
        char *cfg = ct_slurp(p);
        assert_non_null(strstr(cfg, "\"peft_type\": \"LORA\""));
        assert_non_null(strstr(cfg, "\"task_type\": \"CAUSAL_LM\""));
        assert_non_null(strstr(cfg, "\"base_model_name_or_path\": \"base-model\""));
        assert_non_null(strstr(cfg, f == 0 ? "\"fan_in_fan_out\": true" : "\"fan_in_fan_out\": false"));
        assert_non_null(strstr(cfg, f == 0 ? "\"c_fc\"" : "\"down_proj\""));
        free(cfg);
        snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
        oj_safetensors *st = NULL;
        assert_int_equal(oj_safetensors_open(p, &st, NULL), OJ_OK);
        const char *a0 = f == 0 ? "base_model.model.transformer.h.1.mlp.c_proj.lora_A.weight"
                                : "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight";
        int64_t i0 = oj_safetensors_find(st, a0);
        assert_true(i0 >= 0);
        /* gpt2 mlp c_proj: A [r, 4C]; llama k_proj: B [Hkv D, r] */
        assert_int_equal(oj_safetensors_shape(st, i0)[0], f == 0 ? 4 : 16);
        assert_int_equal(oj_safetensors_shape(st, i0)[1], f == 0 ? 128 : 4);
        assert_int_equal(oj_safetensors_count(st), 2 * 2 * (f == 0 ? 4 : 7));
        oj_safetensors_close(st);
        /* read back onto a fresh base: bit-identical logits */
        oj_gpt *m2 = model(eng, fams[f]);
        assert_int_equal(oj_gpt_lora_load(m2, dir, &err), OJ_OK);
        assert_int_equal(oj_gpt_lora_get_config(m2)->r, 4);
        float *back = gt_logits(m2, 48);
        assert_true(max_diff(tuned, back, 480) == 0);
        /* merged: the same function without adapters */
        assert_int_equal(oj_gpt_lora_merge(m2, &err), OJ_OK);
        assert_null(oj_gpt_lora_get_config(m2));
        float *merged = gt_logits(m2, 48);
        assert_true(max_diff(tuned, merged, 480) < 1e-4);
        free(tuned);
        free(back);
        free(merged);
        oj_gpt_free(m2);
        oj_gpt_free(m);
        oj_engine_free(eng);
    }
}

/* got is want and e's one-line message holds needle; e is cleared */
static void expect(oj_status got, oj_status want, oj_error *e, const char *needle) {
    assert_int_equal(got, want);
    if (strstr(e->message, needle) == NULL) fail_msg("'%s' lacks '%s'", e->message, needle);
    assert_null(strchr(e->message, '\n'));
    memset(e, 0, sizeof *e);
}

static void test_refusals(void **state) {
    (void)state;
    oj_engine *eng = gt_engine();
    oj_gpt *m = model(eng, OJ_LLAMA);
    oj_error e = {0};
    oj_gpt_lora_config lc = lora_cfg("q,k");
    lc.dropout = 0.1;
    expect(oj_gpt_lora_add(m, &lc, 1, &e), OJ_ERR_INVALID_ARGUMENT, &e, "dropout 0.1");
    lc = lora_cfg("q,c_attn");
    expect(oj_gpt_lora_add(m, &lc, 1, &e), OJ_ERR_INVALID_ARGUMENT, &e, "target 'c_attn'");
    lc = lora_cfg("q");
    lc.r = 0;
    expect(oj_gpt_lora_add(m, &lc, 1, &e), OJ_ERR_INVALID_ARGUMENT, &e, "r 0");
    lc = lora_cfg("q");
    lc.alpha = 0;
    expect(oj_gpt_lora_add(m, &lc, 1, &e), OJ_ERR_INVALID_ARGUMENT, &e, "alpha 0");
    expect(oj_gpt_lora_save(m, g_dir, NULL, &e), OJ_ERR_INVALID_ARGUMENT, &e, "no adapters");
    expect(oj_gpt_lora_merge(m, &e), OJ_ERR_INVALID_ARGUMENT, &e, "no adapters");
    lc = lora_cfg("q");
    assert_int_equal(oj_gpt_lora_add(m, &lc, 1, &e), OJ_OK);
    expect(oj_gpt_lora_add(m, &lc, 1, &e), OJ_ERR_INVALID_ARGUMENT, &e, "already has adapters");
    char dir[400];
    snprintf(dir, sizeof dir, "%s/bad", g_dir);
    assert_int_equal(oj_gpt_lora_save(m, dir, NULL, &e), OJ_OK);
    /* bad adapter directories, each refused naming the field or tensor;
     * the model is left without adapters */
    oj_gpt *m2 = model(eng, OJ_LLAMA);
    static const struct { const char *json, *needle; } bad[] = {
        {"{\"peft_type\": \"IA3\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", "peft_type"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"use_dora\": true}", "use_dora"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": \"q_proj\"}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"c_attn\"]}", "'c_attn'"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"bias\": \"all\"}", "bias"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"rank_pattern\": {\"q_proj\": 8}}", "rank_pattern"},
        {"{\"peft_type\": \"LORA\", \"r\": 8, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", "lora_A.weight does not have shape [8, 32]"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"]}", "v_proj.lora_A.weight is missing"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gt_write_text(dir, "adapter_config.json", bad[i].json);
        oj_status st = oj_gpt_lora_load(m2, dir, &e);
        assert_int_not_equal(st, OJ_OK);
        expect(st, st, &e, bad[i].needle);
        assert_null(oj_gpt_lora_get_config(m2));
    }
    /* the good config reads (fan_in_fan_out ignored, as PEFT sets it from
     * the layer); with v_proj's adapters in the file too, they
     * are tensors no target accounts for */
    gt_write_text(dir, "adapter_config.json",
               "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], "
               "\"fan_in_fan_out\": true, \"rank_pattern\": {}, \"layers_to_transform\": null}");
    assert_int_equal(oj_gpt_lora_load(m2, dir, &e), OJ_OK);
    oj_gpt_free(m2);
    oj_gpt *m3 = model(eng, OJ_LLAMA);
    lc = lora_cfg("q_proj,v_proj");
    assert_int_equal(oj_gpt_lora_add(m3, &lc, 1, &e), OJ_OK);
    assert_int_equal(oj_gpt_lora_save(m3, dir, NULL, &e), OJ_OK);
    gt_write_text(dir, "adapter_config.json",
               "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}");
    oj_gpt_free(m3);
    m3 = model(eng, OJ_LLAMA);
    expect(oj_gpt_lora_load(m3, dir, &e), OJ_ERR_INVALID_ARGUMENT, &e,
           "v_proj.lora_A.weight is not an adapter of target_modules");
    oj_gpt_free(m3);
    oj_gpt *nl = NULL;
    oj_gpt_config c;
    assert_true(oj_gpt_preset("nanolab-tiny", &c));
    c.n_layer = 1;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &nl), OJ_OK);
    lc = lora_cfg("");
    expect(oj_gpt_lora_add(nl, &lc, 1, &e), OJ_ERR_INVALID_ARGUMENT, &e, "nanolab");
    oj_gpt_free(nl);
    /* adapters and quantized weights refuse each other: the quantized
     * forward has no adapter terms */
    assert_int_equal(oj_gpt_quantize(m, OJ_Q8_0), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(oj_last_error(eng), "LoRA adapters"));
    oj_clear_error(eng);
    oj_gpt_config cq = gt_small_config(OJ_LLAMA);
    cq.mlp_hidden = 64; /* q8_0 takes K a multiple of 32 */
    oj_gpt *mq = NULL;
    assert_int_equal(oj_gpt_create(eng, &cq, 3, &mq), OJ_OK);
    if (oj_gpt_quantize(mq, OJ_Q8_0) != OJ_OK) fail_msg("quantize: %s", oj_last_error(eng));
    lc = lora_cfg("q");
    expect(oj_gpt_lora_add(mq, &lc, 1, &e), OJ_ERR_UNSUPPORTED, &e, "quantized");
    assert_null(oj_gpt_lora_get_config(mq));
    oj_gpt_free(mq);
    oj_gpt_free(m);
    oj_engine_free(eng);
}

/* Peak bytes of one forward + backward + AdamW step on a fresh engine, with
 * adapters (r 8 on every linear) or as a full fine-tune. */
static int64_t step_peak(bool lora) {
    oj_engine *eng = gt_engine();
    oj_gpt_config c = gt_small_config(OJ_LLAMA);
    c.vocab_size = 512;
    c.n_embd = 256;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.mlp_hidden = 704;
    c.n_layer = 4;
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 3, &m), OJ_OK);
    oj_gpt_lora_config lc = lora_cfg("");
    lc.r = 8;
    if (lora) assert_int_equal(oj_gpt_lora_add(m, &lc, 7, NULL), OJ_OK);
    oj_named_tensors ps = lora ? oj_gpt_lora_params(m) : oj_gpt_state_dict(m);
    oj_optim *o = oj_optim_create(eng);
    oj_optim_hparams hp = oj_adamw_hparams(1e-3, 0);
    assert_true(oj_optim_add_group(o, &hp, &ps) >= 0);
    for (int s = 0; s < 2; s++) { /* the second step holds the optimizer state */
        loss_backward(m, 2, 16, 512);
        assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
        oj_optim_zero_grad(o);
    }
    int64_t peak = oj_engine_max_memory_allocated(eng);
    oj_optim_free(o);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return peak;
}

static void test_peak_memory(void **state) {
    (void)state;
    int64_t full = step_peak(false), lora = step_peak(true);
    printf("peak memory of a fine-tune step: full %lld bytes, LoRA %lld bytes (%.2fx)\n",
           (long long)full, (long long)lora, (double)lora / (double)full);
    assert_true(lora * 2 <= full);
}

static int ojas(const char *args, char **out) { return ct_ojas_logged(g_dir, args, out); }

#define PROMPT "The king said"
#define FT "train --init-from base --set data_dir=data --set tokenizer_dir=tok --set batch_size=4 " \
           "--set seq_len=32 --set eval_every=0 --set eval_batches=1 --set threads=1 "           \
           "--set peak_flops=1e10 --set optimizer=adamw --set lr=1e-2 --set warmup_steps=0 "     \
           "--no-progress --no-plot "

// the CLI: `train --init-from DIR --lora r=...` writes OUT/adapter in
// PEFT's format; `generate -m DIR --adapter OUT/adapter` prints what the
// model exported with the adapter folded in (`export --hf --adapter`)
// prints; LoRA settings that cannot run are refused in one line by key
static void test_cli(void **state) {
    (void)state;
    char p[400];
    snprintf(p, sizeof p, "%s/corpus.txt", g_dir);
    assert_int_equal(ct_write_corpus(p), 0);
    assert_int_equal(ojas("tokenizer train --vocab-size 300 --threads 1 --out tok corpus.txt", NULL), 0);
    assert_int_equal(ojas("data prepare --vocab tok --out data --threads 1 corpus.txt", NULL), 0);
    assert_int_equal(ojas("train --set model=gpt2-tiny --set data_dir=data --set tokenizer_dir=tok "
                          "--set max_steps=2 --set batch_size=4 --set seq_len=32 --set eval_every=0 "
                          "--set eval_batches=1 --set threads=1 --set peak_flops=1e10 --out run "
                          "--no-progress --no-plot",
                          NULL),
                     0);
    assert_int_equal(ojas("export --hf base --checkpoint run", NULL), 0);
    assert_int_equal(ojas(FT "--set max_steps=3 --lora r=4,alpha=8,targets=c_attn,c_fc,dropout=0 "
                             "--out ft",
                          NULL),
                     0);
    snprintf(p, sizeof p, "%s/ft/adapter/adapter_config.json", g_dir);
    char *cfg = ct_slurp(p);
    assert_non_null(cfg);
    assert_non_null(strstr(cfg, "\"r\": 4"));
    assert_non_null(strstr(cfg, "\"c_fc\""));
    assert_null(strstr(cfg, "\"c_proj\""));
    free(cfg);
    char *a = NULL, *b = NULL, *err = NULL;
    assert_int_equal(ojas("generate -m base --adapter ft/adapter -p '" PROMPT "' -n 12 -t 0", &a), 0);
    assert_int_equal(ojas("export --hf merged -m base --adapter ft/adapter", NULL), 0);
    assert_int_equal(ojas("generate -m merged -p '" PROMPT "' -n 12 -t 0", &b), 0);
    assert_true(strlen(a) > strlen(PROMPT "\n"));
    assert_string_equal(a, b);
    free(a);
    free(b);
    assert_int_equal(ct_ojas(g_dir, FT "--set lora_r=4 --set lora_dropout=0.1 --out x", NULL, &err), 2);
    ct_assert_one_line(err, "config key 'lora_dropout'");
    free(err);
    assert_int_equal(ct_ojas(g_dir, FT "--set lora_r=4 --set lora_targets=q_proj --out x", NULL, &err), 1);
    ct_assert_one_line(err, "target 'q_proj' is not a gpt2 linear");
    free(err);
    assert_int_equal(ct_ojas(g_dir, FT "--lora alpha=8,foo=1 --out x", NULL, &err), 2);
    ct_assert_one_line(err, "--lora: unknown key 'foo'");
    free(err);
    assert_int_equal(ct_ojas(g_dir, FT "--lora alpha=8 --out x", NULL, &err), 2);
    ct_assert_one_line(err, "--lora: r=R is required");
    free(err);
    assert_int_equal(ct_ojas(g_dir, FT "--lora r=4,q_proj --out x", NULL, &err), 2);
    ct_assert_one_line(err, "'q_proj' is not KEY=VALUE");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "generate -m base --adapter nowhere -p x", NULL, &err), 1);
    ct_assert_one_line(err, "nowhere/adapter_config.json");
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grads_reach_only_adapters),
        cmocka_unit_test(test_save_load_merge),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_peak_memory),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
