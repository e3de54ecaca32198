// test: generation_config.json (oj_generation_config_load) — transformers'
// defaults and the file's values (greedy unless do_sample, eos ids as one
// or a list, max_length), refusals naming the file and key (beam search and
// other processors ojas lacks; bad values); and `ojas generate -m DIR`
// taking its defaults from the file, its options still winning, stopping
// at every listed eos id.
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
#include "ojas/gpt.h"
#include "ojas/infer.h"

static char g_dir[256];

static void write_gc(const char *dir, const char *json) {
    char p[1024];
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    if (json == NULL) {
        unlink(p);
        return;
    }
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(json, f);
    assert_int_equal(fclose(f), 0);
}

static oj_status load(const char *json, int64_t vocab, oj_generation_config *g, oj_error *e) {
    write_gc(g_dir, json);
    return oj_generation_config_load(g_dir, vocab, g, e);
}

static void test_defaults_and_values(void **state) {
    (void)state;
    oj_generation_config g;
    oj_error e = {0};
    /* no file */
    assert_int_equal(load(NULL, 100, &g, &e), OJ_OK);
    assert_false(g.found);
    assert_int_equal(g.sampler.stop_token, -1);
    /* GPT-2's file: greedy (do_sample absent), one eos id */
    assert_int_equal(load("{\"bos_token_id\": 50, \"eos_token_id\": 50, "
                          "\"transformers_version\": \"4.40.0\", \"_from_model_config\": true}",
                          100, &g, &e),
                     OJ_OK);
    assert_true(g.found);
    assert_true(g.sampler.temperature == 0);
    assert_int_equal(g.sampler.top_k, 50);
    assert_true(g.sampler.top_p == 1.0);
    assert_int_equal(g.sampler.max_new_tokens, -1);
    assert_int_equal(g.max_length, -1);
    assert_int_equal(g.sampler.stop_token, 50);
    assert_int_equal(g.n_eos, 1);
    assert_int_equal(g.bos_token_id, 50);
    assert_int_equal(g.pad_token_id, -1);
    /* Llama 3's: sampling, a list of eos ids */
    assert_int_equal(load("{\"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.9, "
                          "\"bos_token_id\": 1, \"eos_token_id\": [2, 8, 9], \"max_length\": 4096, "
                          "\"repetition_penalty\": 1.1, \"top_k\": 0, \"pad_token_id\": 3, "
                          "\"num_beams\": 1, \"min_p\": null, \"typical_p\": 1.0}",
                          100, &g, &e),
                     OJ_OK);
    assert_true(g.sampler.temperature == 0.6);
    assert_true(g.sampler.top_p == 0.9);
    assert_true(g.sampler.repetition_penalty == 1.1);
    assert_int_equal(g.sampler.top_k, 0);
    assert_int_equal(g.max_length, 4096);
    assert_int_equal(g.n_eos, 3);
    assert_int_equal(g.eos_token_ids[2], 9);
    assert_int_equal(g.sampler.stop_token, 2);
    assert_int_equal(g.pad_token_id, 3);
    /* do_sample false keeps greedy whatever the temperature */
    assert_int_equal(load("{\"do_sample\": false, \"temperature\": 0.7, \"max_new_tokens\": 12}",
                          100, &g, &e),
                     OJ_OK);
    assert_true(g.sampler.temperature == 0);
    assert_int_equal(g.sampler.max_new_tokens, 12);
}

/* one line naming the file and the key; *out untouched */
static void refused(const char *json, oj_status want, const char *key) {
    oj_generation_config g;
    memset(&g, 0x5A, sizeof g);
    oj_generation_config before = g;
    oj_error e = {0};
    assert_int_equal(load(json, 100, &g, &e), want);
    if (!strstr(e.message, key) || !strstr(e.message, "generation_config.json"))
        fail_msg("'%s' lacks '%s' or the file", e.message, key);
    assert_null(strchr(e.message, '\n'));
    assert_memory_equal(&g, &before, sizeof g);
}

static void test_refusals(void **state) {
    (void)state;
    refused("{\"num_beams\": 4}", OJ_ERR_UNSUPPORTED, "num_beams");
    refused("{\"typical_p\": 0.5}", OJ_ERR_UNSUPPORTED, "typical_p");
    refused("{\"min_p\": 0.05}", OJ_ERR_UNSUPPORTED, "min_p");
    refused("{\"no_repeat_ngram_size\": 3}", OJ_ERR_UNSUPPORTED, "no_repeat_ngram_size");
    refused("{\"suppress_tokens\": [1, 2]}", OJ_ERR_UNSUPPORTED, "suppress_tokens");
    refused("{\"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", OJ_ERR_UNSUPPORTED, "eos_token_id");
    refused("{\"eos_token_id\": 100}", OJ_ERR_CORRUPT, "eos_token_id");
    refused("{\"eos_token_id\": [1, \"x\"]}", OJ_ERR_CORRUPT, "eos_token_id");
    refused("{\"bos_token_id\": -1}", OJ_ERR_CORRUPT, "bos_token_id");
    refused("{\"top_p\": 0}", OJ_ERR_CORRUPT, "top_p");
    refused("{\"temperature\": \"hot\"}", OJ_ERR_CORRUPT, "temperature");
    refused("{\"top_k\": -5}", OJ_ERR_CORRUPT, "top_k");
    refused("{\"repetition_penalty\": 0}", OJ_ERR_CORRUPT, "repetition_penalty");
    refused("{\"do_sample\": \"yes\"}", OJ_ERR_CORRUPT, "do_sample");
    refused("{\"do_sample\": true, \"temperature\": 0}", OJ_ERR_CORRUPT, "temperature");
    refused("{\"max_new_tokens\": 1.5}", OJ_ERR_CORRUPT, "max_new_tokens");
    refused("{\"top_k\": 5,", OJ_ERR_CORRUPT, "1:");
    refused("[1, 2]", OJ_ERR_CORRUPT, "not a JSON object");
}

/* ---- the CLI: a GPT-2-shaped model (vocab 50257) with GPT-2's tokenizer */

static char g_model[512];

static char *generate(const char *gc, const char *opts) {
    write_gc(g_model, gc);
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "generate -m '%s' -p Hello %s", g_model, opts);
    int rc = ct_ojas(g_dir, args, &out, &err);
    if (rc != 0)
        fail_msg("ojas %s: exit %d: %s", args, rc, err ? err : "");
    free(err);
    return out;
}

static void test_cli_defaults_from_file(void **state) {
    (void)state;
    /* the greedy tokens after "Hello" (one token), from the library */
    oj_engine *eng = NULL;
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    assert_int_equal(oj_engine_create(&ec, &eng, NULL), OJ_OK);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_load_dir(eng, g_model, &m, NULL), OJ_OK);
    oj_sampler_config sc = oj_sampler_config_default();
    sc.temperature = 0;
    sc.max_new_tokens = 4;
    const int32_t prompt[1] = {15496}, *pp = prompt; /* "Hello" */
    int64_t plen = 1, glen = 0;
    int32_t *gen = NULL;
    assert_int_equal(oj_generate(m, 1, &pp, &plen, &sc, &gen, &glen, NULL, NULL), OJ_OK);
    assert_int_equal(glen, 4);
    oj_gpt_free(m);
    oj_engine_free(eng);

    char *want4 = generate(NULL, "-n 4 -t 0");
    assert_true(strncmp(want4, "Hello", 5) == 0 && strlen(want4) > strlen("Hello\n"));
    /* the file's max_new_tokens and greedy (do_sample absent) */
    char *a = generate("{\"max_new_tokens\": 4}", "");
    assert_string_equal(a, want4);
    /* max_length counts the prompt */
    char *b = generate("{\"max_length\": 5, \"do_sample\": false}", "");
    assert_string_equal(b, want4);
    /* options given win over the file */
    char *c = generate("{\"max_new_tokens\": 9, \"do_sample\": true, \"temperature\": 1.0}",
                       "-n 4 --temperature 0");
    assert_string_equal(c, want4);
    /* every eos id of the list stops: the second token's id ends after one
     * (or none, if the first is the same token) */
    char gc[128];
    snprintf(gc, sizeof gc, "{\"eos_token_id\": [7, %d], \"max_new_tokens\": 4}", (int)gen[1]);
    char *d = generate(gc, "");
    char *want_stop = generate(NULL, gen[0] == gen[1] ? "-n 0 -t 0" : "-n 1 -t 0");
    assert_string_equal(d, want_stop);
    /* a refused key: one line naming the file and key */
    write_gc(g_model, "{\"num_beams\": 4}");
    char args[600], *err = NULL;
    snprintf(args, sizeof args, "generate -m '%s' -p Hello", g_model);
    assert_int_not_equal(ct_ojas(g_dir, args, NULL, &err), 0);
    ct_assert_one_line(err, "generation_config.json: num_beams");
    free(err);
    free(gen);
    free(want4);
    free(a);
    free(b);
    free(c);
    free(d);
    free(want_stop);
}

/* g_dir/model: config.json of a small GPT2LMHeadModel with GPT-2's
 * vocabulary, its weights (seed 3) and GPT-2's tokenizer files. */
static int make_model(void) {
    snprintf(g_model, sizeof g_model, "%s/model", g_dir);
    if (mkdir(g_model, 0755) != 0)
        return -1;
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", g_model);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fputs("{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"n_layer\": 1,"
          " \"n_head\": 2, \"n_embd\": 16, \"n_positions\": 32, \"vocab_size\": 50257}\n", f);
    fclose(f);
    oj_gpt_config c;
    oj_error e = {0};
    oj_engine *eng = NULL;
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    oj_gpt *m = NULL;
    int rc = -1;
    if (oj_gpt_config_from_hf(p, &c, &e) || oj_engine_create(&ec, &eng, &e) ||
        oj_gpt_create(eng, &c, 3, &m))
        goto out;
    oj_named_tensors sd = oj_gpt_state_dict(m);
    snprintf(p, sizeof p, "%s/model.safetensors", g_model);
    if (oj_safetensors_save(p, sd.n, (const char *const *)sd.names, sd.tensors, NULL, &e))
        goto out;
    snprintf(p, sizeof p, "cp '%s/third_party/gpt2/encoder.json' '%s/third_party/gpt2/vocab.bpe' '%s/'",
             OJAS_SOURCE_DIR, OJAS_SOURCE_DIR, g_model);
    rc = system(p) == 0 ? 0 : -1;
out:
    if (rc)
        fprintf(stderr, "cannot make the model directory: %s\n", e.message);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return rc;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ojas_gencfg_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    return make_model();
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return 0;
}

int main(void) {
    if (access(OJAS_SOURCE_DIR "/third_party/gpt2/encoder.json", R_OK) != 0) {
        printf("SKIP: needs third_party/gpt2 (run scripts/deps.sh)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_values),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cli_defaults_from_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
