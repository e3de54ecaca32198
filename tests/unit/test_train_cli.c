// test: `ojas train` from the command line: --help, one-line errors with
// the right exit codes (missing options, unknown key, bad value, a CUDA
// device that cannot be opened), a run with --set overrides, SIGINT in the
// middle of a run (the step finishes, a checkpoint is written, exit 0) and
// --resume from the run directory (with --out, or alone: it goes on there)
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#include <sys/stat.h>

#include <cmocka.h>

#include "ojas/io.h"
#include "cli_testutil.h"
#include "train_testutil.h"

static char g_dir[256];

/* Run `ojas ARGS` in g_dir with stdout and stderr in files; exit code. */
static int ojas(const char *args, char **out, char **err) { return ct_ojas(g_dir, args, out, err); }

static int setup(void **state) {
    (void)state;
    if (tt_tmpdir(g_dir, sizeof g_dir) || tt_write_shards(g_dir, 3000, 200))
        return -1;
    char p[400];
    snprintf(p, sizeof p, "%s/c.json", g_dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"model\": \"nanolab-tiny\", \"vocab_size\": 512, \"seq_len\": 16,\n"
               " \"batch_size\": 2, \"data_dir\": \"data\", \"max_steps\": 4, \"eval_every\": 2,\n"
               " \"eval_batches\": 2, \"warmup_steps\": 1, \"peak_flops\": 1e10, \"threads\": 1}\n");
    fclose(f);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tt_rmdir(g_dir);
    return 0;
}

static void test_usage_and_errors(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    assert_int_equal(ojas("train --help", &out, NULL), 0);
    assert_non_null(strstr(out, "usage: ojas train"));
    assert_non_null(strstr(out, "\"muon_lr\"")); /* the keys with defaults */
    free(out);
    assert_int_equal(ojas("train --out r", NULL, &err), 2);
    ct_assert_one_line(err, "--config");
    free(err);
    assert_int_equal(ojas("train --config c.json", NULL, &err), 2);
    ct_assert_one_line(err, "--out");
    free(err);
    assert_int_equal(ojas("train --config c.json --out r --set no_such_key=1", NULL, &err), 2);
    ct_assert_one_line(err, "unknown key 'no_such_key'");
    free(err);
    assert_int_equal(ojas("train --config c.json --out r --threads many", NULL, &err), 2);
    ct_assert_one_line(err, "threads");
    free(err);
    assert_int_equal(ojas("train --config c.json --out r --numerics loose", NULL, &err), 2);
    ct_assert_one_line(err, "numerics");
    free(err);
    assert_int_equal(ojas("train --config missing.json --out r", NULL, &err), 1);
    ct_assert_one_line(err, "missing.json");
    free(err);
    assert_int_equal(ojas("train --config c.json --out r --frob", NULL, &err), 2);
    ct_assert_one_line(err, "--frob");
    free(err);
    /* a preset beside --init-from would be ignored: refused */
    assert_int_equal(ojas("train --init-from hf --out r --set model=gpt2-tiny --set data_dir=d", NULL,
                          &err), 2);
    ct_assert_one_line(err, "leave --set model unset");
    free(err);
    /* a data_dir that does not exist is named as the data_dir */
    assert_int_equal(ojas("train --config c.json --out r_nodata --set data_dir=nope", NULL, &err), 1);
    ct_assert_one_line(err, "data_dir: shard_list: cannot open the data directory nope");
    free(err);
#ifndef OJAS_HAVE_CUDA
    assert_int_equal(ojas("train --config c.json --out r --device cuda", NULL, &err), 1);
    ct_assert_one_line(err, "CUDA");
    free(err);
#endif
    /* a device that cannot be opened leaves no out_dir behind (the engine
     * is opened before the directories are made) */
    err = NULL;
    int rc = ojas("train --config c.json --out r_nodev --device cuda --set max_steps=1", NULL, &err);
    free(err);
    char nd[4200];
    snprintf(nd, sizeof nd, "%s/r_nodev", g_dir);
    struct stat sb;
    if (rc == 1) assert_int_not_equal(stat(nd, &sb), 0);
}

static void test_run_and_resume(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(ojas("train --config c.json --out run --set max_steps=3 --seed 9", &out, NULL), 0);
    assert_non_null(strstr(out, "step 3/3"));
    assert_non_null(strstr(out, "eval step 2 | val loss"));
    assert_non_null(strstr(out, "done: step 3"));
    free(out);
    /* the stored config (max_steps 3, seed 9) comes back; --set extends it */
    assert_int_equal(ojas("train --resume run --out run --set max_steps=5", &out, NULL), 0);
    assert_non_null(strstr(out, "resumed from"));
    assert_non_null(strstr(out, "at step 3"));
    assert_non_null(strstr(out, "done: step 5"));
    free(out);
    char p[400];
    oj_train_config c;
    snprintf(p, sizeof p, "%s/run", g_dir);
    assert_int_equal(oj_train_config_from_checkpoint(p, &c, NULL), OJ_OK);
    assert_int_equal(c.max_steps, 5);
    assert_int_equal(c.seed, 9);
    /* --resume DIR alone goes on in DIR; a run's checkpoint, in its run */
    int64_t step = -1;
    assert_int_equal(ojas("train --resume run --set max_steps=6", &out, NULL), 0);
    assert_non_null(strstr(out, "done: step 6"));
    free(out);
    assert_int_equal(oj_checkpoint_latest(p, &step, NULL), OJ_OK);
    assert_int_equal(step, 6);
    assert_int_equal(ojas("train -r run/ckpt-000006/ --set max_steps=7", &out, NULL), 0);
    assert_non_null(strstr(out, "done: step 7"));
    free(out);
    assert_int_equal(oj_checkpoint_latest(p, &step, NULL), OJ_OK);
    assert_int_equal(step, 7);
    /* a checkpoint outside a run: its parent need not be one */
    char cmd[1200], *err = NULL;
    snprintf(cmd, sizeof cmd, "cp -r '%s/run/ckpt-000007' '%s/solo'", g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ojas("train --resume solo", NULL, &err), 2);
    ct_assert_one_line(err, "train: --resume solo is a checkpoint outside a run directory");
    free(err);
}

static int lines_of(const char *path) {
    char *s = ct_slurp(path);
    int n = 0;
    for (char *q = s; q && *q; q++)
        n += *q == '\n';
    free(s);
    return n;
}

static void test_sigint_checkpoints(void **state) {
    (void)state;
    char metrics[400], log[400];
    snprintf(metrics, sizeof metrics, "%s/sig/metrics.jsonl", g_dir);
    snprintf(log, sizeof log, "%s/sig.txt", g_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(g_dir) != 0 || !freopen(log, "w", stdout) || !freopen(log, "a", stderr))
            _exit(127);
        execl(CT_OJAS, "ojas", "train", "--config", "c.json", "--out", "sig", "--set",
              "max_steps=100000", "--set", "eval_every=0", (char *)NULL);
        _exit(127);
    }
    /* wait for two steps, then interrupt */
    for (int i = 0; i < 6000 && lines_of(metrics) < 2; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_true(lines_of(metrics) >= 2);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *out = ct_slurp(log);
    assert_non_null(strstr(out, "stopped by signal"));
    free(out);
    /* the checkpoint holds the last step reported */
    char root[400];
    snprintf(root, sizeof root, "%s/sig", g_dir);
    int64_t step = -1;
    assert_int_equal(oj_checkpoint_latest(root, &step, NULL), OJ_OK);
    int n_train = lines_of(metrics) - 1; /* the final eval */
    assert_int_equal(step, n_train);
}

/* ---- --set with a non-finite value */

/* `--set KEY=VALUE` with a NaN or infinite value: exit 2 and one line
 * ("cannot parse value"); the library call names the key and keeps the
 * old value. */
static void test_train_set_non_finite(void **state) {
    (void)state;
    const char *vals[] = {"lr=nan", "lr=inf", "grad_clip=-inf", "min_lr=NaN"};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char args[256], *err;
        snprintf(args, sizeof args, "train --config c.json --out run --set %s", vals[i]);
        assert_int_equal(ojas(args, NULL, &err), 2);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_and_errors),
        cmocka_unit_test(test_run_and_resume),
        cmocka_unit_test(test_sigint_checkpoints),
        cmocka_unit_test(test_train_set_non_finite),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
