// test: the ojas command line: dispatch, --help, tokenizer encode/decode/train, data prepare
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "cli_testutil.h"
#include "data_testutil.h"

#define VOCAB OJAS_SOURCE_DIR "/third_party/gpt2"

static char *g_dir;

/* Run `ojas ARGS` with stdout and stderr in files; returns the exit code. */
static int ojas(const char *args, char **out, char **errs) { return ct_ojas(g_dir, args, out, errs); }

static void test_dispatch_and_help(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(ojas("", NULL, &err), 2);
    assert_non_null(strstr(err, "usage"));
    free(err);
    assert_int_equal(ojas("--help", &out, NULL), 0);
    assert_non_null(strstr(out, "tokenizer"));
    assert_non_null(strstr(out, "data"));
    free(out);
    assert_int_equal(ojas("frobnicate", NULL, &err), 2);
    assert_non_null(strstr(err, "unknown command 'frobnicate'"));
    assert_null(strchr(strchr(err, '\n') + 1, '\n')); /* one line */
    free(err);
    const char *helps[] = {"tokenizer --help", "tokenizer encode --help", "tokenizer decode -h",
                           "tokenizer train --help", "data --help", "data prepare --help"};
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        assert_int_equal(ojas(helps[i], &out, NULL), 0);
        assert_non_null(strstr(out, "usage"));
        free(out);
    }
    assert_int_equal(ojas("tokenizer encode --vocab " VOCAB " --bogus", NULL, &err), 2);
    assert_non_null(strstr(err, "--bogus"));
    free(err);
    assert_int_equal(ojas("tokenizer frob", NULL, NULL), 2);
    assert_int_equal(ojas("data frob", NULL, NULL), 2);
    assert_int_equal(ojas("tokenizer encode in.txt", NULL, &err), 2); /* no --vocab */
    free(err);
}

static void test_encode_decode(void **state) {
    (void)state;
    char *p = tu_path(g_dir, "in.txt");
    tu_write(p, "Hello world", 11);
    free(p);
    char *out, *err;
    assert_int_equal(ojas("tokenizer encode --vocab " VOCAB " in.txt", &out, NULL), 0);
    assert_string_equal(out, "15496 995\n");
    free(out);
    assert_int_equal(ojas("tokenizer encode --vocab " VOCAB " --pcre2 --threads 1 < in.txt", &out, NULL), 0);
    assert_string_equal(out, "15496 995\n");
    free(out);
    p = tu_path(g_dir, "ids.txt");
    tu_write(p, "15496 995\n50256 0", 17);
    free(p);
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " ids.txt", &out, NULL), 0);
    assert_string_equal(out, "Hello world<|endoftext|>!");
    free(out);
    /* a refused special, an unknown id, invalid UTF-8 in strict mode */
    p = tu_path(g_dir, "sp.txt");
    tu_write(p, "a<|endoftext|>", 14);
    free(p);
    assert_int_equal(ojas("tokenizer encode --vocab " VOCAB " sp.txt", NULL, &err), 1);
    assert_non_null(strstr(err, "<|endoftext|>"));
    /* the command line names its options, not the library's flags */
    assert_non_null(strstr(err, "--allow-special"));
    assert_non_null(strstr(err, "--special-as-text"));
    assert_null(strstr(err, "OJ_ENCODE"));
    free(err);
    assert_int_equal(ojas("tokenizer encode --vocab " VOCAB " --allow-special sp.txt", &out, NULL), 0);
    assert_string_equal(out, "64 50256\n");
    free(out);
    p = tu_path(g_dir, "bad.txt");
    tu_write(p, "1 99999", 7);
    free(p);
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " bad.txt", NULL, &err), 1);
    assert_non_null(strstr(err, "99999"));
    free(err);
    p = tu_path(g_dir, "half.txt");
    tu_write(p, "171", 3); /* one byte of a multi-byte character */
    free(p);
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " --strict half.txt", NULL, &err), 1);
    free(err);
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " half.txt", &out, NULL), 0);
    assert_string_equal(out, "\xEF\xBF\xBD");
    free(out);
}

/* The ids text has a length: a NUL byte in it is refused, not taken for its
 * end (only the ids before it were decoded, and the exit was 0). */
static void test_decode_refuses_nul(void **state) {
    (void)state;
    char *p = tu_path(g_dir, "nul.txt");
    tu_write(p, "65\0 66 67", 9);
    free(p);
    char *out, *err;
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " nul.txt", &out, &err), 1);
    ct_assert_one_line(err, "tokenizer decode: a NUL byte at byte 2 is not a token id");
    assert_string_equal(out, "");
    free(out);
    free(err);
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " < nul.txt", NULL, &err), 1);
    ct_assert_one_line(err, "tokenizer decode: a NUL byte at byte 2 is not a token id");
    free(err);
    p = tu_path(g_dir, "nul2.txt");
    tu_write(p, "65 \0", 4); /* after the separator, and as the last byte */
    free(p);
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " nul2.txt", NULL, &err), 1);
    ct_assert_one_line(err, "tokenizer decode: a NUL byte at byte 3 is not a token id");
    free(err);
    p = tu_path(g_dir, "ok.txt");
    tu_write(p, "65 66 67", 8);
    free(p);
    assert_int_equal(ojas("tokenizer decode --vocab " VOCAB " ok.txt", &out, NULL), 0);
    assert_string_equal(out, "bcd");
    free(out);
}

/* `ojas ARGS >/dev/full` in g_dir, stderr in err.txt (ct_ojas puts stdout
 * in a file); the exit code, -1 when it did not exit. */
static int ojas_to_full(const char *args, char **errs) {
    char cmd[8192], p[4200];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >/dev/full 2>err.txt", g_dir, CT_OJAS, args);
    int rc = system(cmd);
    snprintf(p, sizeof p, "%s/err.txt", g_dir);
    *errs = ct_slurp(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A failed write is an error, also when the ids are more than stdio's
 * buffer (those writes were not checked; only the last flush was). */
static void test_encode_write_error(void **state) {
    (void)state;
    if (access("/dev/full", W_OK) != 0) {
        printf("SKIP: no /dev/full\n");
        return;
    }
    enum { N = 200000 };
    char *text = malloc(N);
    assert_non_null(text);
    for (size_t i = 0; i < N; i++)
        text[i] = "Hello world, said the king\n"[i % 27];
    char *p = tu_path(g_dir, "big.txt");
    tu_write(p, text, N);
    free(p);
    free(text);
    p = tu_path(g_dir, "small.txt");
    tu_write(p, "Hello world", 11);
    free(p);
    const char *files[] = {"big.txt", "small.txt"};
    for (int k = 0; k < 2; k++) {
        char args[1024], *err;
        snprintf(args, sizeof args, "tokenizer encode --vocab " VOCAB " %s", files[k]);
        assert_int_equal(ojas_to_full(args, &err), 1);
        ct_assert_one_line(err, "tokenizer encode: cannot write the output");
        free(err);
    }
}

static void test_train_and_prepare(void **state) {
    (void)state;
    char *p = tu_path(g_dir, "corpus.txt");
    char text[20000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "and the LORD spake unto Moses, saying\n"[i % 38];
    tu_write(p, text, sizeof text);
    free(p);
    char *err, *out;
    assert_int_equal(ojas("tokenizer train --vocab-size 300 --out tok corpus.txt", NULL, &err), 0);
    assert_non_null(strstr(err, "(300 requested)")); /* a tiny corpus may stop early */
    free(err);
    /* the largest vocab_size --help allows: memory follows the ids made, not the request */
    assert_int_equal(ojas("tokenizer train --vocab-size 2147483646 --out tokmax corpus.txt", NULL, &err),
                     0);
    assert_non_null(strstr(err, "(2147483646 requested)"));
    free(err);
    assert_int_equal(ojas("tokenizer encode --vocab tok corpus.txt", &out, NULL), 0);
    size_t words = 0;
    for (char *q = out; *q; q++)
        words += *q == ' ';
    assert_true(words + 1 < 20000 / 4);
    free(out);
    assert_int_equal(ojas("data prepare --vocab tok --out shards --val-fraction 0.5 "
                          "--shard-tokens 100 corpus.txt", &out, NULL), 0);
    assert_non_null(strstr(out, "1 document, ")); /* singular for one */
    /* the separator id is reported: the shards do not hold it */
    assert_non_null(strstr(out, "each document after <|endoftext|> (id "));
    free(out);
    char **paths;
    int n;
    char *sd = tu_path(g_dir, "shards");
    assert_int_equal(oj_shard_list(sd, "val", &paths, &n, NULL), OJ_OK);
    assert_true(n >= 2);
    oj_paths_free(paths, n);
    free(sd);
    assert_int_equal(ojas("tokenizer train --out tok corpus.txt", NULL, &err), 2);
    free(err);
    assert_int_equal(ojas("data prepare --vocab tok --out s --val-fraction 2 corpus.txt", NULL, &err), 2);
    free(err);
    /* a directory given as a corpus file is named as one */
    assert_int_equal(ojas("data prepare --vocab tok --out s3 shards", NULL, &err), 1);
    ct_assert_one_line(err, "data prepare: corpus file shards is a directory");
    free(err);
}

/* A gpt2-family model stops at its context length: generate says so on
 * stderr instead of ending the text silently. */
static void test_generate_says_context_full(void **state) {
    (void)state;
    char *p = tu_path(g_dir, "g.json");
    const char *cfg = "{\"model\": \"gpt2-tiny\", \"tokenizer_dir\": \"tok\", \"data_dir\": "
                      "\"shards\", \"block_size\": 16, \"seq_len\": 16, \"batch_size\": 1, "
                      "\"max_steps\": 1, \"eval_every\": 0, \"peak_flops\": 1e10, "
                      "\"threads\": 1}";
    tu_write(p, cfg, strlen(cfg));
    free(p);
    char *err = NULL, *out = NULL;
    if (ojas("train --config g.json --out grun", NULL, &err) != 0)
        fail_msg("train: %s", err);
    free(err);
    assert_int_equal(ojas("generate --checkpoint grun --prompt 'and the LORD' --max-new-tokens 100 "
                          "--temperature 0",
                          &out, &err),
                     0);
    ct_assert_one_line(err, "the model's context of 16 positions is full");
    free(out);
    free(err);
    /* within the context: nothing said */
    assert_int_equal(ojas("generate --checkpoint grun --prompt 'and' --max-new-tokens 2 "
                          "--temperature 0",
                          &out, &err),
                     0);
    assert_string_equal(err, "");
    free(out);
    free(err);
}

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_rmdir(g_dir);
    free(g_dir);
    return 0;
}

int main(void) {
    if (access(CT_OJAS, X_OK) != 0) {
        printf("SKIP: %s is not built\n", CT_OJAS);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch_and_help),
        cmocka_unit_test(test_encode_decode),
        cmocka_unit_test(test_encode_write_error),
        cmocka_unit_test(test_decode_refuses_nul),
        cmocka_unit_test(test_train_and_prepare),
        cmocka_unit_test(test_generate_says_context_full),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
