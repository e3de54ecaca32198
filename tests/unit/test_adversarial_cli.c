// test: the ojas CLI given careless input found by probing: a stray
// argument to `ojas info`, a NaN/inf value for --set and for generate's
// sampling options; each must be one clear line and a non-zero exit.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "cli_testutil.h"
#include "train_testutil.h"

static char g_dir[256];

/* Run `ojas ARGS` in g_dir; exit code; stderr in *err (free it). */
static int ojas(const char *args, char **err) { return ct_ojas(g_dir, args, NULL, err); }

static int setup(void **state) {
    (void)state;
    if (tt_tmpdir(g_dir, sizeof g_dir))
        return -1;
    char p[400];
    snprintf(p, sizeof p, "%s/c.json", g_dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"model\": \"nanolab-tiny\", \"max_steps\": 1}\n");
    fclose(f);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tt_rmdir(g_dir);
    return 0;
}

/* Was: `ojas info --bogus` printed the info and exited 0. */
static void test_info_rejects_arguments(void **state) {
    (void)state;
    char *err;
    assert_int_equal(ojas("info --bogus", &err), 2);
    ct_assert_one_line(err, "--bogus");
    free(err);
    assert_int_equal(ojas("info --help", &err), 0);
    free(err);
}

/* Was: `--set lr=nan` exited 2 with the empty message "ojas: train: ". */
static void test_train_set_non_finite(void **state) {
    (void)state;
    const char *vals[] = {"lr=nan", "lr=inf", "grad_clip=-inf", "min_lr=NaN"};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char args[256], *err;
        snprintf(args, sizeof args, "train --config c.json --out run --set %s", vals[i]);
        assert_int_equal(ojas(args, &err), 2);
        ct_assert_one_line(err, "cannot parse value");
        free(err);
    }
    /* the library call itself names the key */
    oj_train_config c = oj_train_config_default();
    oj_error e = {0};
    assert_int_equal(oj_train_config_set(&c, "lr=nan", &e), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "'lr'"));
    assert_true(c.lr == oj_train_config_default().lr);
}

/* Was: `--temperature nan` passed the check (NaN < 0 is false) and sampled
 * garbage with exit 0. */
static void test_generate_non_finite_sampling(void **state) {
    (void)state;
    const char *opts[] = {"--temperature nan", "--temperature inf", "--repetition-penalty nan",
                          "--repetition-penalty inf", "--top-p nan"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        char args[256], *err;
        snprintf(args, sizeof args,
                 "generate --checkpoint nowhere --vocab nowhere --prompt x %s", opts[i]);
        assert_int_equal(ojas(args, &err), 2);
        ct_assert_one_line(err, "generate: need a finite temperature");
        free(err);
    }
}

// test: generate names a missing checkpoint (not the --vocab it could not read from it) and refuses an empty prompt once-prefixed; bench names a malformed device
static void test_generate_missing_checkpoint_empty_prompt(void **state) {
    (void)state;
    char *err;
    assert_int_equal(ojas("generate --checkpoint nowhere --prompt x", &err), 1);
    ct_assert_one_line(err, "generate: checkpoint 'nowhere' does not exist");
    free(err);
    assert_int_equal(ojas("generate --checkpoint nowhere --vocab nowhere --prompt ''", &err), 2);
    ct_assert_one_line(err, "generate: --prompt TEXT is required (and must not be empty)");
    assert_null(strstr(err, "generate: generate:"));
    free(err);
    /* devices as train takes them: a malformed one refused by name */
    assert_int_equal(ojas("bench --device cuda:x", &err), 2);
    ct_assert_one_line(err, "bench: --device must be cpu, cuda or cuda:N, got 'cuda:x'");
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_rejects_arguments),
        cmocka_unit_test(test_train_set_non_finite),
        cmocka_unit_test(test_generate_non_finite_sampling),
        cmocka_unit_test(test_generate_missing_checkpoint_empty_prompt),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
