// test: `ojas quantize` and `ojas generate` on its GGUF files through the
// CLI: a gpt2-tiny run trained a few steps here, quantized to q8_0 and
// q4_0 GGUF files; greedy text from a file equal to that of the checkpoint
// quantized at load (`generate --quantize`), f32 files equal to the
// checkpoint's own; requantizing a GGUF file only with --allow-requantize; fp8 quantized at load
// generates (and --to fp8, which has no GGUF type, is a usage error);
// --timing adds one line on stderr (after the text's last line when both
// share a stream) and changes no text; each usage error
// one line
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "cli_testutil.h"

static char g_dir[256];

static int ojas(const char *args, char **out) {
    char *err = NULL;
    int rc = ct_ojas(g_dir, args, out, &err);
    if (rc != 0) fprintf(stderr, "ojas %s -> %d: %s\n", args, rc, err ? err : "(no stderr)");
    free(err);
    return rc;
}

static int setup(void **state) {
    (void)state;
    if (ct_run_fixture(g_dir, sizeof g_dir, "quantize")) return -1;
    char p[400];
    snprintf(p, sizeof p, "%s/g.json", g_dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\"model\": \"gpt2-tiny\", \"data_dir\": \"data\", \"batch_size\": 4,\n"
               " \"seq_len\": 32, \"max_steps\": 4, \"warmup_steps\": 1, \"eval_every\": 4,\n"
               " \"eval_batches\": 1, \"ckpt_every\": 4, \"peak_flops\": 1e10, \"threads\": 1}\n");
    return fclose(f) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return 0;
}

#define PROMPT "The king said"
#define GEN_ARGS " --prompt '" PROMPT "' --max-new-tokens 12 --temperature 0 --threads 1"
#define GEN " --vocab tok" GEN_ARGS

static void same_text(const char *a_args, const char *b_args) {
    char *a = NULL, *b = NULL;
    assert_int_equal(ojas(a_args, &a), 0);
    assert_int_equal(ojas(b_args, &b), 0);
    assert_non_null(a);
    assert_non_null(b);
    if (strncmp(a, PROMPT, strlen(PROMPT)) != 0 || strlen(a) <= strlen(PROMPT "\n"))
        fail_msg("'%s' printed '%s'", a_args, a);
    if (strcmp(a, b) != 0) fail_msg("'%s' printed\n%s\nbut '%s'\n%s", a_args, a, b_args, b);
    free(a);
    free(b);
}

static void usage_error(const char *args, const char *needle) {
    char *err = NULL;
    assert_int_equal(ct_ojas(g_dir, args, NULL, &err), 2);
    ct_assert_one_line(err, needle);
    free(err);
}

static void test_quantize_and_generate(void **state) {
    (void)state;
    assert_int_equal(ojas("tokenizer train --vocab-size 300 --threads 1 --out tok corpus.txt", NULL), 0);
    assert_int_equal(ojas("data prepare --vocab tok --out data --threads 1 corpus.txt", NULL), 0);
    assert_int_equal(ojas("train --config g.json --out run --no-progress --no-plot", NULL), 0);

    char *err = NULL;
    assert_int_equal(ct_ojas(g_dir, "quantize --checkpoint run --vocab tok --to q8_0 -o q8.gguf --name tiny",
                             NULL, &err), 0);
    ct_assert_one_line(err, "wrote q8.gguf (q8_0");
    free(err);
    assert_int_equal(ojas("quantize --checkpoint run --to q4_0 -o q4.gguf -j 1", NULL), 0);
    assert_int_equal(ojas("quantize --checkpoint run --to f32 -o f32.gguf", NULL), 0);

    same_text("generate -m q8.gguf" GEN, "generate --checkpoint run --quantize q8_0" GEN);
    /* the file's own tokenizer (tokenizer.ggml.*, written from the run's) */
    same_text("generate -m q8.gguf" GEN_ARGS, "generate --checkpoint run --quantize q8_0" GEN);
    same_text("generate -m q4.gguf" GEN, "generate --checkpoint run --quantize q4_0" GEN);
    same_text("generate -m f32.gguf" GEN, "generate --checkpoint run" GEN);
    /* unquantized bf16 / f16 matrices: the text of the checkpoint converted at load */
    assert_int_equal(ojas("quantize --checkpoint run --to bf16 -o bf16.gguf", NULL), 0);
    assert_int_equal(ojas("quantize --checkpoint run --to f16 -o f16.gguf", NULL), 0);
    same_text("generate -m bf16.gguf" GEN, "generate --checkpoint run --dtype bf16" GEN);
    same_text("generate -m f16.gguf" GEN, "generate --checkpoint run --dtype f16" GEN);
    /* a quantized GGUF file is not quantized again unless asked (llama.cpp's
     * --allow-requantize): its weights would be rounded twice */
    char *err2 = NULL;
    assert_int_equal(ct_ojas(g_dir, "quantize -m q8.gguf --to q4_1 -o q41.gguf", NULL, &err2), 1);
    ct_assert_one_line(err2, "'q8.gguf' is already q8_0: quantizing it to q4_1 would round its weights twice");
    if (!strstr(err2, "--allow-requantize")) fail_msg("no remedy named: %s", err2);
    free(err2);
    char q41[400];
    struct stat st;
    snprintf(q41, sizeof q41, "%s/q41.gguf", g_dir);
    assert_int_equal(stat(q41, &st), -1); /* nothing written */
    err2 = NULL;
    assert_int_equal(ct_ojas(g_dir, "generate -m q8.gguf --quantize q4_0" GEN, NULL, &err2), 1);
    ct_assert_one_line(err2, "'q8.gguf' is already q8_0: quantizing it to q4_0 would round");
    free(err2);
    /* asked for: from its dequantized weights */
    assert_int_equal(ojas("quantize -m q8.gguf --to q4_1 --allow-requantize -o q41.gguf", NULL), 0);
    char *out = NULL;
    assert_int_equal(ojas("generate -m q41.gguf" GEN, &out), 0);
    assert_true(out && strncmp(out, PROMPT, strlen(PROMPT)) == 0);
    free(out);
    /* q8.gguf's tokenizer.ggml.* went along into q41.gguf */
    same_text("generate -m q41.gguf" GEN_ARGS, "generate -m q41.gguf" GEN);
    /* fp8 at load (no GGUF type): generates from the prompt */
    out = NULL;
    assert_int_equal(ojas("generate --checkpoint run --quantize fp8" GEN, &out), 0);
    assert_true(out && strncmp(out, PROMPT, strlen(PROMPT)) == 0 && strlen(out) > strlen(PROMPT "\n"));
    /* --timing: the same text, and one line on stderr with the setup, the
     * first token and the decode speed (hf_big_shapes.py parses it) */
    char *tout = NULL;
    err = NULL;
    assert_int_equal(ct_ojas(g_dir, "generate --checkpoint run --quantize fp8 --timing" GEN, &tout, &err), 0);
    assert_string_equal(out, tout);
    ct_assert_one_line(err, "ojas: generate: timing: setup ");
    if (!strstr(err, " s, prompt of ") || !strstr(err, " tokens and first token ") ||
        !strstr(err, " more tokens in ") || !strstr(err, " s: decode ") || !strstr(err, " tok/s\n"))
        fail_msg("--timing printed: %s", err);
    free(err);
    free(tout);
    /* ... after the text's last line on a stream shared with stdout (2>&1) */
    char cmd[1400], both[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' generate --checkpoint run --quantize fp8 --timing" GEN
             " 2>&1", g_dir, CT_OJAS);
    FILE *pf = popen(cmd, "r");
    assert_non_null(pf);
    size_t nb = fread(both, 1, sizeof both - 1, pf);
    both[nb] = '\0';
    assert_int_equal(pclose(pf), 0);
    if (strncmp(both, out, strlen(out)) != 0 || strncmp(both + strlen(out), "ojas: generate: timing: ", 24) != 0)
        fail_msg("2>&1 printed: %s", both);
    err = NULL;
    assert_int_equal(ct_ojas(g_dir, "generate --checkpoint run --timing --vocab tok --prompt 'The king said' "
                             "--max-new-tokens 1 --temperature 0 --threads 1", NULL, &err), 0);
    ct_assert_one_line(err, ", no decode to time (1 token)");
    free(err);
    err = NULL; /* no new token: no first token to time */
    assert_int_equal(ct_ojas(g_dir, "generate --checkpoint run --timing --vocab tok --prompt 'The king said' "
                             "--max-new-tokens 0 --temperature 0 --threads 1", NULL, &err), 0);
    ct_assert_one_line(err, "prompt of ");
    if (!strstr(err, " tokens, no new token") || strstr(err, "first token"))
        fail_msg("timing with no new token: %s", err);
    free(err);
    free(out);

    usage_error("quantize --checkpoint run --to q5_0 -o x.gguf", "--to must be q8_0, q4_0, q4_1, q4_k, f32, bf16 or f16, got 'q5_0'");
    usage_error("quantize --checkpoint run --to q8_0 -o x.bin", "--out FILE.gguf is required");
    usage_error("quantize --checkpoint run --to fp8 -o x.gguf", "--to fp8 has no GGUF (ggml) type");
    usage_error("quantize --to q8_0 -o x.gguf", "give exactly one of --model and --checkpoint");
    usage_error("generate -m f32.gguf --prompt x",
                "f32.gguf: no tokenizer (tokenizer.ggml.model is \"no_vocab\"): give --vocab DIR");
    /* a nanolab run (c.json) has no GGUF layout: refused with what to train instead */
    assert_int_equal(ojas("train --config c.json --out nrun --no-progress --no-plot", NULL), 0);
    assert_int_equal(ct_ojas(g_dir, "quantize --checkpoint nrun --to q8_0 -o n.gguf", NULL, &err), 1);
    ct_assert_one_line(err, "nanolab");
    if (!strstr(err, "--set model=gpt2-tiny")) fail_msg("no remedy named: %s", err);
    free(err);
    usage_error("generate --checkpoint run --vocab tok --prompt x --quantize q3",
                "--quantize must be q8_0, q4_0, q4_1, q4_k or fp8, got 'q3'");
    usage_error("generate --checkpoint run --vocab tok --prompt x --quantize q8_0 --dtype bf16",
                "--quantize goes with f32 weights, not --dtype bf16");
    err = NULL;
    assert_int_equal(ct_ojas(g_dir, "quantize -m q8.gguf --to f32 -o y.gguf", NULL, &err), 1);
    ct_assert_one_line(err, "--to f32 from a quantized file is not supported");
    free(err);
    /* gpt2-tiny's C of 64 is not a whole q4_k super-block (256) */
    err = NULL;
    assert_int_equal(ct_ojas(g_dir, "quantize --checkpoint run --to q4_k -o k.gguf", NULL, &err), 1);
    ct_assert_one_line(err, "q4_k needs [N, K] with N > 0 and K a positive multiple of 256");
    if (strstr(err, "quantize: quantize:")) fail_msg("the op named twice: %s", err);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quantize_and_generate)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
