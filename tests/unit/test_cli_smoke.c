// test: the main job end to end through the `ojas` CLI, as CI's smoke: on a
// small generated corpus, `ojas tokenizer train` (BPE, 300 ids), `ojas data
// prepare`, `ojas train` (nanolab-tiny, a few steps, checkpoints), `ojas
// train --resume`, then `ojas generate` from the run directory twice with
// the same seed: exit codes, the outputs and files each step promises, and
// the same text both times. A few seconds under ASan.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "cli_testutil.h"
#include "ojas/gpt.h"

static char g_dir[256];

/* Run `ojas ARGS` in g_dir with stdout and stderr in files; exit code (-1
 * when it did not exit normally). On a non-zero code stderr is echoed. */
static int ojas(const char *args, char **out) {
    char *err = NULL;
    int rc = ct_ojas(g_dir, args, out, &err);
    if (rc != 0)
        fprintf(stderr, "ojas %s -> %d: %s\n", args, rc, err ? err : "(no stderr)");
    free(err);
    return rc;
}

static int exists(const char *rel) {
    char p[400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    return stat(p, &st) == 0;
}

static void contains(const char *s, const char *needle) {
    assert_non_null(s);
    if (!strstr(s, needle))
        fail_msg("output lacks '%s':\n%s", needle, s);
}

static int setup(void **state) {
    (void)state;
    return ct_run_fixture(g_dir, sizeof g_dir, "smoke");
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return 0;
}

#define PROMPT "The king said"

static void test_tokenizer_data_train_resume_generate(void **state) {
    (void)state;
    char *out = NULL;

    assert_int_equal(
        ojas("tokenizer train --vocab-size 300 --threads 1 --out tok corpus.txt", NULL), 0);
    assert_true(exists("tok/encoder.json") && exists("tok/vocab.bpe"));

    assert_int_equal(ojas("data prepare --vocab tok --out data --threads 1 corpus.txt", &out), 0);
    contains(out, "1 document, "); /* one file with no separator: one document */
    contains(out, "train");
    free(out);
    assert_true(exists("data/train_000000.bin") && exists("data/val_000000.bin"));

    assert_int_equal(ojas("train --config c.json --out run --no-progress --no-plot", &out), 0);
    contains(out, "step 4/4");
    contains(out, "eval step 2 | val loss");
    contains(out, "done: step 4");
    free(out);
    assert_true(exists("run/ckpt-000002") && exists("run/ckpt-000004") &&
                exists("run/metrics.jsonl"));

    assert_int_equal(
        ojas("train --resume run --out run --set max_steps=6 --no-progress --no-plot", &out), 0);
    contains(out, "resumed from");
    contains(out, "at step 4");
    contains(out, "done: step 6");
    free(out);
    assert_true(exists("run/ckpt-000006"));

    /* The run root (newest good checkpoint), twice with the same seed. */
    const char *gen = "generate --checkpoint run --vocab tok --prompt '" PROMPT
                      "' --max-new-tokens 20 --seed 1";
    char *a = NULL, *b = NULL;
    assert_int_equal(ojas(gen, &a), 0);
    assert_int_equal(ojas(gen, &b), 0);
    assert_non_null(a);
    assert_non_null(b);
    if (strncmp(a, PROMPT, strlen(PROMPT)) != 0)
        fail_msg("generate output does not start with the prompt: '%s'", a);
    if (strlen(a) <= strlen(PROMPT "\n"))
        fail_msg("generate printed no text after the prompt: '%s'", a);
    assert_string_equal(a, b);
    free(b);

    /* A checkpoint directory itself gives the same text (it is the newest). */
    assert_int_equal(ojas("generate --checkpoint run/ckpt-000006 --vocab tok --prompt '" PROMPT
                          "' --max-new-tokens 20 --seed 1",
                          &b),
                     0);
    assert_string_equal(a, b);
    free(b);

    /* bf16 weights: prompt echoed, some text after it; a bad dtype refused */
    assert_int_equal(ojas("generate --checkpoint run --vocab tok --prompt '" PROMPT
                          "' --max-new-tokens 8 --seed 1 --dtype bf16",
                          &b),
                     0);
    assert_non_null(b);
    if (strncmp(b, PROMPT, strlen(PROMPT)) != 0 || strlen(b) <= strlen(PROMPT "\n"))
        fail_msg("generate --dtype bf16 printed '%s'", b);
    free(b);
    assert_int_equal(ojas("generate --checkpoint run --vocab tok --prompt 'x' --dtype i8", NULL), 2);

    free(a);

    /* Without --vocab: refused for a run without tokenizer_dir, the run's
     * tokenizer_dir otherwise. */
    assert_int_equal(ojas("generate --checkpoint run --prompt 'x'", NULL), 2);
    assert_int_equal(ojas("train --config c.json --out run2 --set tokenizer_dir=tok --set "
                          "max_steps=1 --no-progress --no-plot",
                          NULL),
                     0);
    const char *gen2 = "generate --checkpoint run2 --prompt '" PROMPT "' --max-new-tokens 8 --seed 1";
    assert_int_equal(ojas(gen2, &a), 0);
    assert_int_equal(ojas("generate --checkpoint run2 --vocab tok --prompt '" PROMPT
                          "' --max-new-tokens 8 --seed 1",
                          &b),
                     0);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

// ojas bench times training steps and reports tokens/s; bad options are
// one line and exit 2.
static void test_bench(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(ojas("bench --model nanolab-tiny --batch 2 --seq 16 --steps 2 --warmup 0 "
                          "--peak-flops 1e11",
                          &out),
                     0);
    contains(out, "tokens/s");
    contains(out, "MFU");
    free(out);
    assert_int_equal(ojas("bench --model nanolab-tiny --batch 2 --seq 16 --steps 1 --warmup 0 "
                          "--dtype bf16",
                          &out),
                     0);
    contains(out, "bf16 autocast");
    contains(out, "in live tensors");
    free(out);
    assert_int_equal(ojas("bench --dtype f64", NULL), 2);
    assert_int_equal(ojas("bench --model no-such-model", NULL), 2);
    assert_int_equal(ojas("bench --seq 100000", NULL), 2);
}

/* ---- careless input to `ojas info`, `ojas generate` and `ojas bench`: each
 * refusal is one clear line and a non-zero exit */

/* `ojas info` refuses a stray argument (exit 2, one line naming it);
 * `ojas info --help` exits 0. */
static void test_info_rejects_arguments(void **state) {
    (void)state;
    char *err;
    assert_int_equal(ct_ojas(g_dir, "info --bogus", NULL, &err), 2);
    ct_assert_one_line(err, "--bogus");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "info --help", NULL, &err), 0);
    free(err);
}

/* generate refuses a NaN, infinite or out-of-range temperature, repetition
 * penalty or top-p (exit 2, one line naming the option and the value)
 * instead of sampling. */
static void test_generate_non_finite_sampling(void **state) {
    (void)state;
    const char *opts[][2] = {
        {"--temperature nan", "generate: --temperature: expected a finite value >= 0, got nan"},
        {"--temperature inf", "generate: --temperature: expected a finite value >= 0, got inf"},
        {"-t -1", "generate: --temperature: expected a finite value >= 0, got -1"},
        {"--repetition-penalty nan", "generate: --repetition-penalty: expected a finite value > 0, got nan"},
        {"--repetition-penalty inf", "generate: --repetition-penalty: expected a finite value > 0, got inf"},
        {"--repetition-penalty 0", "generate: --repetition-penalty: expected a finite value > 0, got 0"},
        {"--top-p nan", "generate: --top-p: expected a value in (0, 1], got nan"},
        {"--top-p 1.5", "generate: --top-p: expected a value in (0, 1], got 1.5"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        char args[256], *err;
        snprintf(args, sizeof args,
                 "generate --checkpoint nowhere --vocab nowhere --prompt x %s", opts[i][0]);
        assert_int_equal(ct_ojas(g_dir, args, NULL, &err), 2);
        ct_assert_one_line(err, opts[i][1]);
        free(err);
    }
}

// test: generate names a missing checkpoint (not the --vocab it could not read from it) and refuses an empty prompt once-prefixed; bench names a malformed device
static void test_generate_missing_checkpoint_empty_prompt(void **state) {
    (void)state;
    char *err;
    assert_int_equal(ct_ojas(g_dir, "generate --checkpoint nowhere --prompt x", NULL, &err), 1);
    ct_assert_one_line(err, "generate: checkpoint 'nowhere' does not exist");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "generate --checkpoint nowhere --vocab nowhere --prompt ''", NULL, &err), 2);
    ct_assert_one_line(err, "generate: --prompt TEXT is required (and must not be empty)");
    assert_null(strstr(err, "generate: generate:"));
    free(err);
    /* devices as train takes them: a malformed one refused by name */
    assert_int_equal(ct_ojas(g_dir, "bench --device cuda:x", NULL, &err), 2);
    ct_assert_one_line(err, "bench: --device must be cpu, cuda or cuda:N, got 'cuda:x'");
    free(err);
}

#define HF_CONFIG(rope_scaling)                                                             \
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 320, \"hidden_size\": 32,\n" \
    " \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n" \
    " \"num_key_value_heads\": 2, \"head_dim\": 16, \"max_position_embeddings\": 64,\n" \
    " \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true, \"rope_scaling\": " rope_scaling ",\n" \
    " \"hidden_act\": \"silu\"}\n"

/* A Hugging Face model directory in g_dir/rel: config.json of a tiny
 * Qwen3ForCausalLM (vocabulary 320, head_dim 16 over 4 heads of a 32-wide
 * model) and its random weights as model.safetensors, written through the
 * same llama family (HF names). */
static void write_hf_dir(const char *rel) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/%s/config.json", g_dir, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(HF_CONFIG("null"), f);
    assert_int_equal(fclose(f), 0);
    oj_gpt_config c = {0};
    oj_error e = {0};
    assert_int_equal(oj_gpt_config_from_hf(p, &c, &e), OJ_OK);
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(&ec, &eng, &e), OJ_OK);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 7, &m), OJ_OK);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    snprintf(p, sizeof p, "%s/%s/model.safetensors", g_dir, rel);
    assert_int_equal(oj_safetensors_save(p, sd.n, (const char *const *)sd.names, sd.tensors, NULL, &e),
                     OJ_OK);
    oj_gpt_free(m);
    oj_engine_free(eng);
}

/* g_dir/rel/tokenizer.json: Llama 2 style (byte fallback, "\u2581"
 * prepended) whose TemplateProcessing puts <s> (id 1) before a text; "ab"
 * is one token (264). */
static void write_llama2_tokenizer(const char *rel) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/%s/tokenizer.json", g_dir, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
#define MS "\xE2\x96\x81"
    fputs("{\"truncation\": null, \"padding\": null, \"added_tokens\": ["
          "{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
          "{\"id\": 1, \"content\": \"<s>\", \"special\": true},"
          "{\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
          "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
          "{\"type\": \"Prepend\", \"prepend\": \"" MS "\"},"
          "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"" MS "\"}]},"
          "\"pre_tokenizer\": null,"
          "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
          "{\"SpecialToken\": {\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}],"
          "\"special_tokens\": {\"<s>\": {\"ids\": [1]}}},"
          "\"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
          "{\"type\": \"Replace\", \"pattern\": {\"String\": \"" MS "\"}, \"content\": \" \"},"
          "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
          "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
          "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\","
          " \"fuse_unk\": true, \"merges\": [\"" MS " a\", \"a b\", \"" MS "a b\"],"
          " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2",
          f);
    for (int b = 0; b < 256; b++) fprintf(f, ", \"<0x%02X>\": %d", b, 3 + b);
    fputs(", \"" MS "\": 259, \"a\": 260, \"b\": 261, \"" MS "a\": 262, \"ab\": 263,"
          " \"" MS "ab\": 264}}}\n",
          f);
#undef MS
    assert_int_equal(fclose(f), 0);
}

// test: `ojas generate --model DIR` runs a Hugging Face model directory (no
// preset): greedy text after the prompt, the same twice; a directory that
// does not exist, a preset without --weights, a directory without a
// tokenizer and a refused config.json field are one line each, as are a
// missing .gguf (named a GGUF file) and a .gguf given to serve
static void test_generate_model_dir(void **state) {
    (void)state;
    assert_int_equal(
        ojas("tokenizer train --vocab-size 300 --threads 1 --out tokd corpus.txt", NULL), 0);
    write_hf_dir("hf");
    const char *gen = "generate --model hf --vocab tokd --prompt '" PROMPT
                      "' --max-new-tokens 12 --temperature 0";
    char *a = NULL, *b = NULL, *err = NULL;
    assert_int_equal(ojas(gen, &a), 0);
    assert_int_equal(ojas(gen, &b), 0);
    assert_non_null(a);
    if (strncmp(a, PROMPT, strlen(PROMPT)) != 0 || strlen(a) <= strlen(PROMPT "\n"))
        fail_msg("generate --model printed '%s'", a);
    assert_string_equal(a, b);
    free(a);
    free(b);
    /* a tokenizer.json whose template puts <s> before a text: the prompt
     * gets it, as transformers' tokenizer(text) gives it, once */
    write_llama2_tokenizer("tokt");
    assert_int_equal(ct_ojas(g_dir, "generate --model hf --vocab tokt --prompt ab -n 1 -t 0 --timing",
                             NULL, &err), 0);
    if (strstr(err, "prompt of 2 tokens") == NULL) fail_msg("no <s> before 'ab': %s", err);
    free(err);
    assert_int_equal(ct_ojas(g_dir, "generate --model hf --vocab tokt --prompt '<s>ab' -n 1 -t 0 "
                                    "--timing", NULL, &err), 0);
    if (strstr(err, "prompt of 2 tokens") == NULL) fail_msg("<s> twice before 'ab': %s", err);
    free(err);
    /* ids past the tokenizer (265 ids; the model's vocabulary is 320)
     * are not shown, with a warning naming the first (transformers' decode
     * skips them); seed 1 draws some in 40 tokens */
    assert_int_equal(ct_ojas(g_dir, "generate --model hf --vocab tokt --prompt ab -n 40 -t 1 -s 1",
                             NULL, &err), 0);
    ct_assert_one_line(err, "new tokens not shown: the tokenizer (265 ids) cannot decode them "
                            "(the first: id ");
    free(err);
    /* a llama model stops at its context (64 positions) and says so */
    assert_int_equal(ct_ojas(g_dir, "generate --model hf --vocab tokd --prompt '" PROMPT
                                    "' --max-new-tokens 100 --temperature 0", NULL, &err), 0);
    ct_assert_one_line(err, "the model's context of 64 positions is full");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "generate --model nowhere --prompt x", NULL, &err), 1);
    ct_assert_one_line(err, "generate: model directory 'nowhere' does not exist");
    free(err);
    /* a missing .gguf is named as the file it is; serve refuses a GGUF file
     * by name (it serves f32/bf16 weights) */
    assert_int_equal(ct_ojas(g_dir, "generate --model nowhere.gguf --vocab tokd --prompt x", NULL,
                             &err), 1);
    ct_assert_one_line(err, "generate: GGUF file 'nowhere.gguf' does not exist");
    free(err);
    char p[400];
    snprintf(p, sizeof p, "%s/hf.gguf", g_dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("GGUF", f); /* refused by its name, before it is read */
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ct_ojas(g_dir, "serve --model hf.gguf --vocab tokd --port 0", NULL, &err), 1);
    ct_assert_one_line(err, "serve: 'hf.gguf' is a GGUF file, which serve does not take");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "generate --model gpt2-tiny --prompt x", NULL, &err), 1);
    ct_assert_one_line(err, "(a preset goes with --weights FILE)");
    free(err);
    assert_int_equal(ct_ojas(g_dir, "generate --model hf --prompt x", NULL, &err), 1);
    ct_assert_one_line(err, "(the model directory's tokenizer: give --vocab DIR)");
    free(err);
    snprintf(p, sizeof p, "%s/hf/config.json", g_dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs(HF_CONFIG("{\"rope_type\": \"yarn\", \"factor\": 4.0}"), f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ct_ojas(g_dir, "generate --model hf --vocab tokd --prompt x", NULL, &err), 1);
    ct_assert_one_line(err, "hf/config.json: rope_scaling.rope_type 'yarn' is not supported");
    free(err);
}

// test: shards of a tokenizer larger than the preset's vocabulary (512 for
// nanolab-tiny), trained without tokenizer_dir, are refused in one line
// that names the fix (tokenizer_dir or vocab_size), leaving no run behind;
// with tokenizer_dir the model takes the tokenizer's vocabulary and trains
static void test_train_tokenizer_larger_than_preset(void **state) {
    (void)state;
    /* 2,000 pseudo-random 5-letter words, each twice: merges enough for 600 ids */
    char p[400];
    snprintf(p, sizeof p, "%s/words.txt", g_dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    uint32_t r = 7;
    for (int w = 0; w < 2000; w++) {
        char word[6] = {0};
        for (int i = 0; i < 5; i++) {
            r = r * 1664525u + 1013904223u;
            word[i] = (char)('a' + (r >> 16) % 26);
        }
        fprintf(f, "%s %s\n", word, word);
    }
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ojas("tokenizer train --vocab-size 600 --threads 1 --out tokbig words.txt",
                          NULL), 0);
    assert_int_equal(ojas("data prepare --vocab tokbig --out databig --threads 1 words.txt", NULL), 0);
    char *err = NULL;
    assert_int_equal(ct_ojas(g_dir, "train --config c.json --set data_dir=databig --out bigrun "
                                    "--no-progress --no-plot", NULL, &err), 1);
    ct_assert_one_line(err, "outside the vocabulary of 512");
    contains(err, "config key tokenizer_dir"); /* the key's name, for Python and Go too */
    contains(err, "--set tokenizer_dir=DIR");
    free(err);
    assert_false(exists("bigrun"));
    char *out = NULL;
    assert_int_equal(ojas("train --config c.json --set data_dir=databig --set tokenizer_dir=tokbig "
                          "--set max_steps=1 --out bigrun --no-progress --no-plot", &out), 0);
    contains(out, "V 600");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_data_train_resume_generate),
        cmocka_unit_test(test_bench),
        cmocka_unit_test(test_info_rejects_arguments),
        cmocka_unit_test(test_generate_non_finite_sampling),
        cmocka_unit_test(test_generate_missing_checkpoint_empty_prompt),
        cmocka_unit_test(test_generate_model_dir),
        cmocka_unit_test(test_train_tokenizer_larger_than_preset),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
