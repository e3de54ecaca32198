// test: every library file reader refuses what is not a regular file, by
// name and at once: a FIFO (which used to block the reader forever waiting
// for a writer) or a directory, for safetensors, checkpoints' `latest`,
// both tokenizer formats, token shards, training configs, corpus files and
// a Hugging Face model directory's config.json, weight index and
// tokenizer.json
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/io_internal.h"
#include "ojas/data.h"
#include "ojas/gpt.h"
#include "ojas/io.h"
#include "ojas/train.h"

#define GPT2_DIR OJAS_SOURCE_DIR "/third_party/gpt2"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ojas-test-open-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    /* a reader that blocks on a FIFO ends the test (SIGALRM) instead of
     * hanging it */
    alarm(60);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    alarm(0);
    return oj__rmtree(g_dir, NULL) == OJ_OK ? 0 : -1;
}

/* g_dir/name made a FIFO; its path into buf. */
static const char *fifo(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_dir, name);
    unlink(buf);
    assert_int_equal(mkfifo(buf, 0600), 0);
    return buf;
}

static void expect_refused(oj_status rc, const oj_error *e, const char *path, const char *kind) {
    assert_int_equal(rc, OJ_ERR_IO);
    if (!strstr(e->message, path) || !strstr(e->message, kind))
        fail_msg("'%s' does not name %s as %s", e->message, path, kind);
}

static void test_safetensors_and_checkpoint(void **state) {
    (void)state;
    char p[512];
    oj_safetensors *st = NULL;
    oj_error e = {0};
    fifo(p, sizeof p, "w.safetensors");
    expect_refused(oj_safetensors_open(p, &st, &e), &e, p, "FIFO");
    assert_null(st);
    oj_error e2 = {0};
    expect_refused(oj_safetensors_open(g_dir, &st, &e2), &e2, g_dir, "a directory");
    /* a checkpoint root whose `latest` is a FIFO */
    char root[512];
    snprintf(root, sizeof root, "%s/run", g_dir);
    assert_int_equal(mkdir(root, 0700), 0);
    fifo(p, sizeof p, "run/latest");
    int64_t step;
    oj_error e3 = {0};
    expect_refused(oj_checkpoint_latest(root, &step, &e3), &e3, p, "FIFO");
}

static void test_tokenizer_files(void **state) {
    (void)state;
    char enc[512], bpe[512];
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    fifo(enc, sizeof enc, "encoder.json");
    expect_refused(oj_tokenizer_load_gpt2(enc, GPT2_DIR "/vocab.bpe", &tok, &e), &e, enc, "FIFO");
    assert_null(tok);
    fifo(bpe, sizeof bpe, "vocab.bpe");
    oj_error e2 = {0};
    expect_refused(oj_tokenizer_load_gpt2(GPT2_DIR "/encoder.json", bpe, &tok, &e2), &e2, bpe,
                   "FIFO");
    char tt[512];
    fifo(tt, sizeof tt, "r.tiktoken");
    oj_error e3 = {0};
    expect_refused(oj_tokenizer_load_tiktoken(tt, &tok, &e3), &e3, tt, "FIFO");
    oj_error e4 = {0};
    expect_refused(oj_tokenizer_load_gpt2(g_dir, GPT2_DIR "/vocab.bpe", &tok, &e4), &e4, g_dir,
                   "a directory");
}

static void test_shards_config_corpus(void **state) {
    (void)state;
    char p[512];
    oj_shard *sh = NULL;
    oj_error e = {0};
    fifo(p, sizeof p, "train_000000.bin");
    expect_refused(oj_shard_open(p, &sh, &e), &e, p, "FIFO");
    assert_null(sh);
    oj_error e2 = {0};
    expect_refused(oj_shard_open(g_dir, &sh, &e2), &e2, g_dir, "a directory");
    /* a missing data directory is named as such */
    char **paths = NULL;
    int n = 0;
    oj_error e3 = {0};
    assert_int_equal(oj_shard_list("nope", "train", &paths, &n, &e3), OJ_ERR_IO);
    assert_non_null(strstr(e3.message, "data directory nope"));
    /* training config */
    oj_train_config c = oj_train_config_default();
    fifo(p, sizeof p, "c.json");
    oj_error e4 = {0};
    expect_refused(oj_train_config_load(&c, p, &e4), &e4, p, "FIFO");
    /* corpus files for data prepare: a directory, a FIFO */
    oj_tokenizer *tok = NULL;
    assert_int_equal(oj_tokenizer_load(GPT2_DIR, &tok, NULL), OJ_OK);
    oj_prepare_config pc = oj_prepare_config_default();
    char out[512];
    snprintf(out, sizeof out, "%s/shards", g_dir);
    pc.out_dir = out;
    const char *files[1] = {g_dir};
    oj_error e5 = {0};
    expect_refused(oj_data_prepare(tok, &pc, 1, files, NULL, &e5), &e5, g_dir,
                   "corpus file");
    assert_non_null(strstr(e5.message, "is a directory"));
    files[0] = fifo(p, sizeof p, "corpus.txt");
    oj_error e6 = {0};
    expect_refused(oj_data_prepare(tok, &pc, 1, files, NULL, &e6), &e6, p, "FIFO");
    oj_tokenizer_free(tok);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* a model directory's config.json, model.safetensors.index.json (no
 * model.safetensors beside it) and tokenizer.json as FIFOs */
static void test_hf_model_dir(void **state) {
    (void)state;
    char dir[400], p[512];
    snprintf(dir, sizeof dir, "%s/hf", g_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    oj_engine *eng = NULL;
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    assert_int_equal(oj_engine_create(&ec, &eng, NULL), OJ_OK);
    fifo(p, sizeof p, "hf/config.json");
    oj_gpt_config c;
    oj_error e = {0};
    expect_refused(oj_gpt_config_from_hf(p, &c, &e), &e, p, "FIFO");
    oj_gpt *m = NULL;
    oj_error e2 = {0};
    expect_refused(oj_gpt_load_dir(eng, dir, &m, &e2), &e2, p, "FIFO");
    assert_null(m);
    unlink(p);
    write_text(p, "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 16, "
                  "\"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
                  "\"num_attention_heads\": 2, \"max_position_embeddings\": 8}");
    fifo(p, sizeof p, "hf/model.safetensors.index.json");
    oj_error e3 = {0};
    expect_refused(oj_gpt_load_dir(eng, dir, &m, &e3), &e3, p, "FIFO");
    assert_null(m);
    oj_engine_free(eng);
    /* tokenizer.json: named as a FIFO, directly and through its directory */
    fifo(p, sizeof p, "hf/tokenizer.json");
    oj_tokenizer *tok = NULL;
    oj_error e4 = {0};
    expect_refused(oj_tokenizer_load_hf(p, &tok, &e4), &e4, p, "FIFO");
    oj_error e5 = {0};
    expect_refused(oj_tokenizer_load(dir, &tok, &e5), &e5, p, "FIFO");
    assert_null(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_and_checkpoint),
        cmocka_unit_test(test_tokenizer_files),
        cmocka_unit_test(test_shards_config_corpus),
        cmocka_unit_test(test_hf_model_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
