// test: Hugging Face export (oj_gpt_save_hf_dir, oj_hf_copy_files, `ojas
// export --hf`) — every exportable shape (GPT-2; Llama with GQA, an untied
// head and Llama 3 rope scaling; Qwen2; Qwen3) reloads through
// oj_gpt_load_dir to the same config and bit-identical logits; a smaller
// vocab_size keeps the first rows (logits equal on them); nanolab, a
// Qwen2+Qwen3 mix and a too-large vocab_size are refused by name; the CLI
// exports a trained checkpoint (with its tokenizer, as vocab.json +
// merges.txt) and a model directory, and `ojas generate -m OUT` then
// prints what the source prints. (PyTorch reading the export:
// tests/reference/test_hf_dir.py.)
#include <dirent.h>
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

#include "cli_testutil.h"
#include "gpt_testutil.h"
#include "ojas/autograd.h"
#include "ojas/data.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"

GT_SCRATCH_DIR("hf-export")

static void read_text(const char *dir, const char *name, char **out) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    *out = ct_slurp(p);
    assert_non_null(*out);
}

/* export c's model (seed 3) to g_dir/name keeping vocab rows, reload it:
 * the same config (but V) and logits on the kept rows */
static void round_trip(const oj_gpt_config *c, const char *name, int64_t keep, const char *arch) {
    oj_engine *eng = gt_engine();
    oj_gpt *m = NULL, *r = NULL;
    assert_int_equal(oj_gpt_create(eng, c, 3, &m), OJ_OK);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    oj_error e = {0};
    if (oj_gpt_save_hf_dir(m, dir, keep, &e) != OJ_OK) fail_msg("%s", e.message);
    if (oj_gpt_load_dir(eng, dir, &r, &e) != OJ_OK) fail_msg("%s: %s", name, e.message);
    char *cfg;
    read_text(dir, "config.json", &cfg);
    if (!strstr(cfg, arch)) fail_msg("%s: config.json lacks %s:\n%s", name, arch, cfg);
    free(cfg);
    const int64_t V = keep ? keep : c->vocab_size;
    oj_gpt_config want = *c, got = *oj_gpt_get_config(r);
    want.vocab_size = V;
    assert_int_equal(got.family, want.family);
    assert_int_equal(got.vocab_size, want.vocab_size);
    assert_int_equal(got.block_size, want.block_size);
    assert_int_equal(got.n_layer, want.n_layer);
    assert_int_equal(got.n_head, want.n_head);
    assert_int_equal(got.n_kv_head, want.n_kv_head);
    assert_int_equal(got.n_embd, want.n_embd);
    assert_int_equal(got.mlp_hidden, want.mlp_hidden);
    assert_int_equal(got.head_dim, want.head_dim);
    assert_true(got.qkv_bias == want.qkv_bias && got.qk_norm == want.qk_norm &&
                got.untied_head == want.untied_head);
    assert_true(got.norm_eps == want.norm_eps && got.rope_factor == want.rope_factor);
    if (want.family == OJ_LLAMA) assert_true(got.rope_theta == want.rope_theta);
    float *a = gt_logits(m, c->vocab_size), *b = gt_logits(r, V);
    for (int64_t t = 0; t < 10; t++)
        for (int64_t v = 0; v < V; v++)
            if (a[t * c->vocab_size + v] != b[t * V + v])
                fail_msg("%s: logit [%lld, %lld] %g != %g", name, (long long)t, (long long)v,
                         a[t * c->vocab_size + v], b[t * V + v]);
    free(a);
    free(b);
    oj_gpt_free(m);
    oj_gpt_free(r);
    oj_engine_free(eng);
}

static void test_round_trip_every_shape(void **state) {
    (void)state;
    oj_gpt_config g = gt_small_config(OJ_GPT2);
    round_trip(&g, "gpt2", 0, "\"GPT2LMHeadModel\"");
    round_trip(&g, "gpt2_v40", 40, "\"GPT2LMHeadModel\"");
    oj_gpt_config l = gt_small_config(OJ_LLAMA);
    l.untied_head = true;
    round_trip(&l, "llama", 0, "\"LlamaForCausalLM\"");
    round_trip(&l, "llama_v40", 40, "\"LlamaForCausalLM\"");
    oj_gpt_config l3 = gt_small_config(OJ_LLAMA);
    l3.rope_factor = 8, l3.rope_low_freq_factor = 1, l3.rope_high_freq_factor = 4;
    l3.rope_original_context = 8, l3.rope_theta = 500000;
    round_trip(&l3, "llama3", 0, "\"llama3\"");
    oj_gpt_config q2 = gt_small_config(OJ_LLAMA);
    q2.qkv_bias = true;
    round_trip(&q2, "qwen2", 0, "\"Qwen2ForCausalLM\"");
    oj_gpt_config q3 = gt_small_config(OJ_LLAMA);
    q3.qk_norm = true, q3.head_dim = 16, q3.untied_head = true;
    round_trip(&q3, "qwen3", 0, "\"Qwen3ForCausalLM\"");
}

static void test_refusals(void **state) {
    (void)state;
    oj_engine *eng = gt_engine();
    oj_gpt *m = NULL;
    oj_gpt_config n;
    assert_true(oj_gpt_preset("nanolab-tiny", &n));
    assert_int_equal(oj_gpt_create(eng, &n, 1, &m), OJ_OK);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/refused", g_dir);
    oj_error e = {0};
    assert_int_equal(oj_gpt_save_hf_dir(m, dir, 0, &e), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.message, "nanolab"));
    oj_gpt_free(m);
    oj_gpt_config mix = gt_small_config(OJ_LLAMA);
    mix.qkv_bias = mix.qk_norm = true;
    assert_int_equal(oj_gpt_create(eng, &mix, 1, &m), OJ_OK);
    oj_error e2 = {0};
    assert_int_equal(oj_gpt_save_hf_dir(m, dir, 0, &e2), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(e2.message, "QK-norm"));
    oj_gpt_free(m);
    oj_gpt_config g = gt_small_config(OJ_GPT2);
    assert_int_equal(oj_gpt_create(eng, &g, 1, &m), OJ_OK);
    oj_error e3 = {0};
    assert_int_equal(oj_gpt_save_hf_dir(m, dir, 49, &e3), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e3.message, "vocab_size 49"));
    assert_int_equal(access(dir, F_OK), -1); /* nothing written */
    oj_gpt_free(m);
    oj_error e4 = {0};
    assert_int_equal(oj_hf_copy_files(g_dir, dir, &e4), OJ_ERR_IO);
    assert_non_null(strstr(e4.message, "no tokenizer files"));
    oj_engine_free(eng);
}

static int ojas(const char *args, char **out) { return ct_ojas_logged(g_dir, args, out); }

#define PROMPT "The king said"

// the CLI: a gpt2-tiny checkpoint trained with a tokenizer exports with its
// tokenizer; generate -m OUT prints what generate --checkpoint prints; a
// model directory re-exports (generation_config.json along); train
// --init-from OUT starts from its weights and resumes; one-line errors
static void test_cli_export(void **state) {
    (void)state;
    char p[400];
    snprintf(p, sizeof p, "%s/corpus.txt", g_dir);
    assert_int_equal(ct_write_corpus(p), 0);
    snprintf(p, sizeof p, "%s/c.json", g_dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "{\"model\": \"gpt2-tiny\", \"data_dir\": \"data\", \"batch_size\": 4,\n"
               " \"seq_len\": 32, \"max_steps\": 2, \"warmup_steps\": 1, \"eval_every\": 2,\n"
               " \"eval_batches\": 1, \"ckpt_every\": 2, \"peak_flops\": 1e10, \"threads\": 1,\n"
               " \"tokenizer_dir\": \"tok\"}\n");
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ojas("tokenizer train --vocab-size 300 --threads 1 --out tok corpus.txt", NULL), 0);
    assert_int_equal(ojas("data prepare --vocab tok --out data --threads 1 corpus.txt", NULL), 0);
    assert_int_equal(ojas("train --config c.json --out run --no-progress --no-plot", NULL), 0);
    char *out = NULL, *a = NULL, *b = NULL, *err = NULL;
    assert_int_equal(ojas("export --hf out --checkpoint run", &out), 0);
    if (!strstr(out, "300 of 300 vocabulary rows")) fail_msg("export printed '%s'", out);
    free(out);
    struct stat sb;
    snprintf(p, sizeof p, "%s/out/vocab.json", g_dir);
    assert_int_equal(stat(p, &sb), 0);
    snprintf(p, sizeof p, "%s/out/merges.txt", g_dir);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(ojas("generate --checkpoint run -p '" PROMPT "' -n 12 -t 0", &a), 0);
    assert_int_equal(ojas("generate -m out -p '" PROMPT "' -n 12 -t 0", &b), 0);
    assert_true(strlen(a) > strlen(PROMPT "\n"));
    assert_string_equal(a, b);
    free(b);
    /* a model directory re-exports, with its generation_config.json */
    snprintf(p, sizeof p, "%s/out/generation_config.json", g_dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"max_new_tokens\": 12}\n", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ojas("export --hf out2 -m out", NULL), 0);
    assert_int_equal(ojas("generate -m out2 -p '" PROMPT "'", &b), 0);
    assert_string_equal(a, b);
    free(b);
    /* train --init-from out: a run that starts from the exported weights
     * (lr 0: they stay as they are) generates the same text; its resume
     * takes the model from init_from's config.json, the weights from its
     * checkpoint */
    assert_int_equal(ojas("train --init-from out --set data_dir=data --set tokenizer_dir=tok "
                          "--set max_steps=1 --set optimizer=adamw --set lr=0 --set min_lr=0 "
                          "--set weight_decay=0 --set batch_size=2 --set seq_len=16 "
                          "--set eval_every=0 --set eval_batches=1 --set threads=1 "
                          "--set peak_flops=1e10 --out ft --no-progress --no-plot",
                          &out),
                     0);
    /* the run's model is the directory's, not the 'model' key's default preset */
    if (!strstr(out, "model hf:out (gpt2): 2 layers")) fail_msg("train printed '%s'", out);
    free(out);
    read_text(g_dir, "ft/ckpt-000001/state.json", &out);
    if (!strstr(out, "\"model\": \"hf:out\"") || strstr(out, "nanolab"))
        fail_msg("state.json: %s", out);
    free(out);
    assert_int_equal(ojas("generate --checkpoint ft -p '" PROMPT "' -n 12 -t 0", &b), 0);
    assert_string_equal(a, b);
    free(b);
    assert_int_equal(ojas("train --resume ft --out ft --set max_steps=2 --no-progress --no-plot",
                          &out),
                     0);
    if (!strstr(out, "model hf:out (gpt2)")) fail_msg("resume printed '%s'", out);
    free(out);
    assert_int_equal(ct_ojas(g_dir, "train --init-from out --set data_dir=data --set n_layer=3 "
                                    "--out ft2 --no-progress --no-plot", NULL, &err), 2);
    ct_assert_one_line(err, "init_from takes the model's shape");
    free(err);
    free(a);
    /* errors: one line each */
    assert_int_equal(ct_ojas(g_dir, "export --checkpoint run", NULL, &err), 2);
    ct_assert_one_line(err, "export: --hf OUTDIR is required");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "export --hf x -m out --checkpoint run", NULL, &err), 2);
    ct_assert_one_line(err, "exactly one of");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "export --hf x -m nowhere", NULL, &err), 1);
    ct_assert_one_line(err, "model directory 'nowhere' does not exist");
    free(err);
    /* a directory that holds files is not written into without --force
     * (here the user's own file stays as it was); a file is not a directory */
    snprintf(p, sizeof p, "%s/mine", g_dir);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/mine/config.json", g_dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"mine\": 1}\n", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ct_ojas(g_dir, "export --hf mine -m out", NULL, &err), 1);
    ct_assert_one_line(err, "export: --hf directory 'mine' is not empty (it holds config.json); "
                            "give --force to write into it");
    free(err);
    char *mine = ct_slurp(p);
    assert_string_equal(mine, "{\"mine\": 1}\n");
    free(mine);
    assert_int_equal(ct_ojas(g_dir, "export --hf mine/config.json -m out", NULL, &err), 1);
    ct_assert_one_line(err, "export: --hf 'mine/config.json' exists and is not a directory");
    free(err);
    assert_int_equal(ojas("export --hf mine -m out --force", NULL), 0);
    assert_int_equal(ojas("generate -m mine -p '" PROMPT "' -n 12 -t 0", &b), 0);
    assert_true(strlen(b) > strlen(PROMPT "\n"));
    /* a stale model.safetensors.index.json that --force leaves beside the
     * new model.safetensors: ojas reads model.safetensors, as transformers
     * does (not the shards of an older export) */
    snprintf(p, sizeof p, "%s/mine/model.safetensors.index.json", g_dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"metadata\": {}, \"weight_map\": {\"wte.weight\": \"old-00001.safetensors\"}}\n",
          f);
    assert_int_equal(fclose(f), 0);
    char *c2 = NULL;
    assert_int_equal(ojas("generate -m mine -p '" PROMPT "' -n 12 -t 0", &c2), 0);
    assert_string_equal(b, c2);
    free(c2);
    free(b);
    /* --force never writes over what it reads: the model directory (by any
     * spelling) stays byte for byte, and the checkpoint directory (given, or
     * the one found in a run) is refused too */
    snprintf(p, sizeof p, "%s/mine/model.safetensors", g_dir);
    assert_int_equal(stat(p, &sb), 0);
    const off_t size = sb.st_size;
    char *before = ct_slurp(p);
    assert_non_null(before);
    assert_int_equal(ct_ojas(g_dir, "export --hf ./mine/ -m mine --force", NULL, &err), 1);
    ct_assert_one_line(err, "export: --hf './mine/' is the model directory itself");
    free(err);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, size);
    char *after = ct_slurp(p);
    assert_non_null(after);
    assert_memory_equal(before, after, (size_t)size);
    free(after);
    free(before);
    snprintf(p, sizeof p, "%s/run", g_dir);
    DIR *d = opendir(p);
    assert_non_null(d);
    char ck[300] = "";
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        if (strncmp(de->d_name, "ckpt-", 5) == 0) snprintf(ck, sizeof ck, "%s", de->d_name);
    closedir(d);
    assert_true(ck[0] != '\0');
    char cmd[700];
    snprintf(cmd, sizeof cmd, "export --hf run/%s --checkpoint run --force", ck);
    assert_int_equal(ct_ojas(g_dir, cmd, NULL, &err), 1);
    ct_assert_one_line(err, "is the checkpoint directory itself");
    free(err);
    snprintf(cmd, sizeof cmd, "export --hf run/%s/ --checkpoint run/%s --force", ck, ck);
    assert_int_equal(ct_ojas(g_dir, cmd, NULL, &err), 1);
    ct_assert_one_line(err, "is the checkpoint directory itself");
    free(err);
    /* a nanolab run (the README's first training example) is refused with
     * what to train instead, and no directory is written */
    assert_int_equal(ojas("train --config c.json --set model=nanolab-tiny --out nrun --no-progress "
                          "--no-plot", NULL), 0);
    assert_int_equal(ct_ojas(g_dir, "export --hf nout --checkpoint nrun", NULL, &err), 1);
    ct_assert_one_line(err, "has no transformers architecture");
    if (!strstr(err, "--set model=gpt2-tiny")) fail_msg("no remedy named: %s", err);
    free(err);
    snprintf(p, sizeof p, "%s/nout", g_dir);
    assert_int_not_equal(stat(p, &sb), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_shape),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cli_export),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
