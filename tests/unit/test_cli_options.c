// test: the `ojas` command line's option parsing (getopt_long) across the
// subcommands: "--key=value" beside "--key value", the short options, one
// line and exit 2 naming an unknown option, a missing value, a value given
// to a flag or an ambiguous prefix; `ojas train` from --set alone (and the
// required key it lacks named); no run or shard directory left behind by a
// config or input that fails; `ojas generate --budget-bytes` honoured
// (refused on a tiny budget, fine on a large one).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_testutil.h"
#include "train_testutil.h"

#define VOCAB OJAS_SOURCE_DIR "/third_party/gpt2"

static char g_dir[256];

/* Run `ojas ARGS` in g_dir; exit code; stdout / stderr in *out / *err when
 * not NULL (free them). */
static int ojas(const char *args, char **out, char **err) { return ct_ojas(g_dir, args, out, err); }

/* Whether g_dir/rel exists. */
static bool exists(const char *rel) {
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    return stat(p, &st) == 0;
}

/* `ojas ARGS` exits 0; its stdout in *out when not NULL (free it). */
static void run_ok(const char *args, char **out) {
    char *err = NULL;
    int rc = ojas(args, out, &err);
    if (rc != 0)
        fail_msg("ojas %s exited %d: %s", args, rc, err ? err : "");
    free(err);
}

/* `ojas ARGS` exits 2 with one line on stderr that holds NEEDLE. */
static void usage_error(const char *args, const char *needle) {
    char *err = NULL;
    int rc = ojas(args, NULL, &err);
    if (rc != 2)
        fail_msg("ojas %s exited %d, not 2: %s", args, rc, err ? err : "");
    ct_assert_one_line(err, needle);
    free(err);
}

/* nanolab-tiny on g_dir/data (vocabulary 512), a couple of steps, all of it
 * from --set; the caller adds --out and anything else. */
#define SET_RUN                                                                                    \
    "--set model=nanolab-tiny --set data_dir=data --set vocab_size=512 --set seq_len=16 "         \
    "--set batch_size=2 --set max_steps=2 --set warmup_steps=1 --set eval_batches=1 "             \
    "--set peak_flops=1e10 --no-progress --no-plot"

static int setup(void **state) {
    (void)state;
    if (tt_tmpdir(g_dir, sizeof g_dir) || tt_write_shards(g_dir, 3000, 200))
        return -1;
    char p[400];
    snprintf(p, sizeof p, "%s/in.txt", g_dir);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fputs("Hello world", f);
    if (fclose(f))
        return -1;
    snprintf(p, sizeof p, "%s/c.json", g_dir);
    if (!(f = fopen(p, "w")))
        return -1;
    fprintf(f, "{\"model\": \"nanolab-tiny\", \"vocab_size\": 512, \"seq_len\": 16,\n"
               " \"batch_size\": 2, \"data_dir\": \"data\", \"max_steps\": 2,\n"
               " \"eval_batches\": 1, \"warmup_steps\": 1, \"peak_flops\": 1e10}\n");
    return fclose(f) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    tt_rmdir(g_dir);
    return 0;
}

/* Was: "--vocab=DIR" and every "--key=value" was "unknown option", and no
 * subcommand had short options. */
static void test_equals_and_short_forms(void **state) {
    (void)state;
    const char *forms[] = {
        "tokenizer encode --vocab " VOCAB " in.txt",
        "tokenizer encode --vocab=" VOCAB " in.txt",
        "tokenizer encode in.txt --vocab=" VOCAB " --threads=1", /* options after FILE */
        "tokenizer encode -j 1 --vocab " VOCAB " in.txt",
        "tokenizer encode -j1 --vocab " VOCAB " -- in.txt",
        "tokenizer encode --vocab " VOCAB " --thr 1 in.txt", /* a unique prefix */
        "tokenizer encode --vocab=" VOCAB " < in.txt",
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char *out = NULL;
        if (ojas(forms[i], &out, NULL) != 0)
            fail_msg("ojas %s failed", forms[i]);
        assert_string_equal(out, "15496 995\n");
        free(out);
    }
    /* generate's values reach its checks in every form: a bad temperature
     * is refused by name, whichever way it is written */
    const char *temps[] = {"--temperature=nan", "--temperature nan", "-t nan", "-tnan",
                           "--temp=nan"};
    for (size_t i = 0; i < sizeof temps / sizeof temps[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "generate --checkpoint=nowhere --vocab=nowhere -p x %s",
                 temps[i]);
        usage_error(args, "generate: --temperature: expected a finite value >= 0, got nan");
    }
    usage_error("generate --checkpoint=nowhere --vocab nowhere --prompt= -n 5",
                "generate: --prompt TEXT is required");
    usage_error("generate --checkpoint nowhere --vocab nowhere -p x -k -1", "--top-k");
    /* was: a value that is no number printed two lines; neither showed the value */
    usage_error("serve --shutdown-grace x", "serve: --shutdown-grace: expected a number, got 'x'");
    usage_error("serve --shutdown-grace -1",
                "serve: --shutdown-grace must be a finite number of seconds >= 0, got '-1'");
    usage_error("generate --checkpoint nowhere --vocab nowhere -p x --max-new-tokens=-2",
                "--max-new-tokens");
    usage_error("generate --checkpoint nowhere --vocab nowhere -p x -s=1", "--seed");
    usage_error("generate --checkpoint nowhere --vocab nowhere -p x -d tpu", "--device");
    usage_error("generate --weights w.safetensors -m no-such-model -p x --vocab " VOCAB,
                "generate: unknown model preset 'no-such-model'");
    usage_error("bench -m no-such-model", "unknown model preset 'no-such-model'");
    usage_error("bench --model=no-such-model", "unknown model preset 'no-such-model'");
    usage_error("bench -d cuda:x", "bench: --device must be cpu, cuda or cuda:N, got 'cuda:x'");
    usage_error("bench -j many", "bench: --threads: expected an integer");
    usage_error("train -c c.json -o r -j many", "threads");
    usage_error("train --config=c.json --out=r --numerics=loose", "numerics");
    usage_error("train -c c.json -o r -s x", "seed");
    usage_error("train -c c.json -o r -d tpu", "device");
    usage_error("data prepare --vocab=" VOCAB " -o s --val-fraction=2 in.txt", "--val-fraction");
    usage_error("tokenizer train -o tok --vocab-size=10 in.txt", "--vocab-size");
    /* the help of each subcommand lists its short options */
    const char *helps[][2] = {{"train -h", "-c, --config"},
                              {"generate -h", "-n, --max-new-tokens"},
                              {"generate --help", "--budget-bytes"},
                              {"bench -h", "-m, --model"},
                              {"data prepare -h", "-o, --out"},
                              {"tokenizer encode -h", "-j, --threads"},
                              {"info -h", "-h, --help"}};
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        char *out = NULL;
        assert_int_equal(ojas(helps[i][0], &out, NULL), 0);
        if (!strstr(out, helps[i][1]))
            fail_msg("ojas %s lacks '%s'", helps[i][0], helps[i][1]);
        free(out);
    }
}

/* Unknown options, missing values, values given to flags and ambiguous
 * prefixes: one line naming the option as it was written, exit 2. */
static void test_option_errors(void **state) {
    (void)state;
    usage_error("train -c c.json -o r --frob", "train: unknown option '--frob'");
    usage_error("train -c c.json -o r --frob=1", "train: unknown option '--frob'");
    usage_error("train -c c.json -o r -q", "train: unknown option '-q'");
    usage_error("train -c c.json -o", "train: option '-o' needs a value");
    usage_error("train -c c.json --out", "train: option '--out' needs a value");
    usage_error("train -c c.json -o r --no-plot=yes", "train: option '--no-plot' takes no value");
    usage_error("train -c c.json -o r stray", "train: unexpected argument 'stray'");
    usage_error("generate --max-new-tokens", "generate: option '--max-new-tokens' needs a value");
    usage_error("generate -p x -n", "generate: option '-n' needs a value");
    usage_error("generate --top 5", "generate: option '--top' is ambiguous (--top-k, --top-p)");
    usage_error("bench --cuda-graph=1", "bench: option '--cuda-graph' takes no value");
    usage_error("bench --frob", "bench: unknown option '--frob'");
    usage_error("info --bogus", "info: unknown option '--bogus'");
    usage_error("info extra", "info: unexpected argument 'extra'");
    usage_error("data prepare --vocab " VOCAB " -o s -x in.txt", "data prepare: unknown option '-x'");
    usage_error("tokenizer decode --vocab", "tokenizer decode: option '--vocab' needs a value");
    usage_error("tokenizer encode --vocab " VOCAB " a b", "one FILE at most");
    usage_error("tokenizer train --vocab-size 300 -o tok --frob in.txt",
                "tokenizer train: unknown option '--frob'");
}

/* Was: `ojas train` demanded --config even when --set gave every key. */
static void test_train_from_set_alone(void **state) {
    (void)state;
    char *out = NULL;
    run_ok("train -o run -j 1 " SET_RUN, &out);
    if (!strstr(out, "done: step 2"))
        fail_msg("train from --set alone printed:\n%s", out);
    free(out);
    assert_true(exists("run/ckpt-000002"));
    char p[400];
    oj_train_config c;
    snprintf(p, sizeof p, "%s/run", g_dir);
    assert_int_equal(oj_train_config_from_checkpoint(p, &c, NULL), OJ_OK);
    assert_string_equal(c.model, "nanolab-tiny");
    assert_int_equal(c.vocab_size, 512);
    assert_int_equal(c.threads, 1);
    /* a required key it lacks is named; nothing is created */
    usage_error("train -o r_nomodel --set data_dir=data", "lacks model (give --set model=...)");
    usage_error("train -o r_nodata --set model=nanolab-tiny --set max_steps=1",
                "lacks data_dir (give --set data_dir=...)");
    usage_error("train -o r_none", "lacks model and data_dir");
    assert_false(exists("r_nomodel") || exists("r_nodata") || exists("r_none"));
    /* --overwrite is a flag: accepted, and a value for it is refused */
    usage_error("train -o run --overwrite=yes " SET_RUN, "option '--overwrite' takes no value");
}

/* Was: `ojas train` made --out before it found that the data (or the
 * tokenizer, or the model's memory) was wrong, and left an empty directory;
 * `ojas data prepare` made --out before reading its input. */
static void test_no_directory_on_failure(void **state) {
    (void)state;
    char *err = NULL;
    assert_int_equal(ojas("train -c c.json -o r_nodata --set data_dir=nowhere", NULL, &err), 1);
    ct_assert_one_line(err, "nowhere");
    free(err);
    assert_false(exists("r_nodata"));
    assert_int_equal(ojas("train -c c.json -o r_notok --set tokenizer_dir=nowhere", NULL, &err), 1);
    ct_assert_one_line(err, "nowhere");
    free(err);
    assert_false(exists("r_notok"));
    /* a budget too small for the model */
    assert_int_equal(ojas("train -c c.json -o r_budget --set budget_bytes=65536", NULL, &err), 1);
    free(err);
    assert_false(exists("r_budget"));
    /* invalid config values and keys: refused before anything */
    usage_error("train -c c.json -o r_key --set no_such_key=1", "unknown key 'no_such_key'");
    usage_error("train -c c.json -o r_seq --set seq_len=100000", "seq_len");
    assert_false(exists("r_key") || exists("r_seq"));
    /* data prepare on a missing input file */
    assert_int_equal(ojas("data prepare --vocab " VOCAB " -o shards_missing missing.txt", NULL, &err),
                     1);
    ct_assert_one_line(err, "missing.txt");
    free(err);
    assert_false(exists("shards_missing"));
    assert_int_equal(ojas("data prepare --vocab=" VOCAB " -o shards -j1 --val-fraction=0.5 in.txt",
                          NULL, NULL),
                     0);
    assert_true(exists("shards/val_000000.bin"));
}

/* ojas generate --budget-bytes sets the engine's root budget: a model that
 * does not fit is refused by name, one that fits runs. */
static void test_generate_budget_bytes(void **state) {
    (void)state;
    if (!exists("gen/latest"))
        run_ok("train -o gen -j 1 " SET_RUN, NULL);
    char *err = NULL;
    assert_int_equal(ojas("generate --checkpoint gen --vocab " VOCAB " -p x -n 4 -s 1 "
                          "--budget-bytes 64K",
                          NULL, &err),
                     1);
    ct_assert_one_line(err, "budget");
    free(err);
    char *a = NULL, *b = NULL;
    run_ok("generate --checkpoint gen --vocab " VOCAB " -p x -n 4 -s 1 -t 0 "
           "--budget-bytes=1GiB",
           &a);
    run_ok("generate --checkpoint=gen --vocab=" VOCAB " --prompt=x --max-new-tokens=4 "
           "--seed=1 --temperature=0",
           &b);
    assert_non_null(a);
    if (a[0] != 'x' || strlen(a) <= strlen("x\n"))
        fail_msg("generate printed '%s'", a);
    assert_string_equal(a, b);
    free(a);
    free(b);
    usage_error("generate --checkpoint gen --vocab " VOCAB " -p x --budget-bytes 0",
                "generate: --budget-bytes: expected a positive byte count");
    usage_error("generate --checkpoint gen --vocab " VOCAB " -p x --budget-bytes 12Q",
                "--budget-bytes");
    usage_error("generate --checkpoint gen --vocab " VOCAB " -p x --budget-bytes 99999999T",
                "--budget-bytes");
}

int main(void) {
    if (access(CT_OJAS, X_OK) != 0) {
        printf("SKIP: %s is not built\n", CT_OJAS);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_and_short_forms),
        cmocka_unit_test(test_option_errors),
        cmocka_unit_test(test_train_from_set_alone),
        cmocka_unit_test(test_no_directory_on_failure),
        cmocka_unit_test(test_generate_budget_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
