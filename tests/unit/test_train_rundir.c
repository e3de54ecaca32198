// test: run directories and checkpoints through `ojas train` and `ojas
// generate`: a new run refuses a non-empty --out unless --overwrite (which
// removes only a run's files), naming --resume only when it holds a
// checkpoint; resuming an earlier checkpoint moves the
// abandoned branch's later checkpoints aside and keeps the lineage in
// state.json; the config and the weights come from one checkpoint; a second
// trainer on a run directory is refused naming the holder's PID; generate
// (and quantize and serve) warn when they fall back from a refused
// checkpoint, and generate names a corrupt
// one's real cause; a finished run resumed adds no second eval record; a
// failed metrics.jsonl write stops the run; a schedule change on resume is
// logged; tokenizer_dir is stored absolute; steps skipped as non-finite
// stop the run naming the op (detect_anomaly); a FIFO in the run directory
// is refused, not waited on.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli_testutil.h"
#include "ojas/io.h"

static char g_dir[256];

/* Run `ojas ARGS` in g_dir; exit code. */
static int ojas(const char *args, char **out, char **err) { return ct_ojas(g_dir, args, out, err); }

static bool exists(const char *rel) {
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    return stat(p, &st) == 0;
}

static char *slurp_rel(const char *rel) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    return ct_slurp(p);
}

static void contains(const char *s, const char *needle) {
    assert_non_null(s);
    if (!strstr(s, needle))
        fail_msg("'%s' lacks '%s'", s, needle);
}

/* Lines of the file g_dir/rel holding needle. */
static int count_lines(const char *rel, const char *needle) {
    char *s = slurp_rel(rel);
    int n = 0;
    for (char *line = s; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        n += strstr(line, needle) != NULL;
        line = nl ? nl + 1 : line + strlen(line);
    }
    free(s);
    return n;
}

/* The string `key` of the JSON file g_dir/rel, malloc'd ("" when absent). */
static char *json_key(const char *rel, const char *key) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    json_t *j = json_load_file(p, 0, NULL);
    assert_non_null(j);
    const char *v = json_string_value(json_object_get(j, key));
    char *r = strdup(v ? v : "");
    json_decref(j);
    return r;
}

static int setup(void **state) {
    (void)state;
    if (ct_run_fixture(g_dir, sizeof g_dir, "rundir"))
        return -1;
    if (ojas("tokenizer train --vocab-size 300 --threads 1 --out tok corpus.txt", NULL, NULL) ||
        ojas("data prepare --vocab tok --out data --threads 1 corpus.txt", NULL, NULL))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return 0;
}

#define TRAIN "train --no-progress --no-plot "

/* Was: a new run into a directory holding another run started from step 0
 * beside the old checkpoints, deleted its metrics.jsonl and repointed
 * latest. */
static void test_new_run_refuses_a_used_out_dir(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    assert_int_equal(ojas(TRAIN "--config c.json --out r8 --set ckpt_every=1 --set keep_last=0",
                          NULL, NULL),
                     0);
    char *before = slurp_rel("r8/metrics.jsonl");
    assert_int_equal(ojas(TRAIN "--config c.json --out r8 --set max_steps=2", NULL, &err), 1);
    ct_assert_one_line(err, "not empty");
    contains(err, "--resume r8");
    contains(err, "--overwrite");
    free(err);
    char *after = slurp_rel("r8/metrics.jsonl");
    assert_string_equal(before, after); /* untouched */
    free(after);
    free(before);
    assert_true(exists("r8/ckpt-000004"));
    /* --overwrite removes the old run first */
    assert_int_equal(ojas(TRAIN "--config c.json --out r8 --overwrite --set max_steps=2 "
                                "--set ckpt_every=0",
                          &out, NULL),
                     0);
    contains(out, "removed the previous run");
    free(out);
    assert_false(exists("r8/ckpt-000004") || exists("r8/ckpt-000001"));
    assert_true(exists("r8/ckpt-000002"));
    assert_int_equal(count_lines("r8/metrics.jsonl", "\"type\":\"train\""), 2);
    /* ... but refuses, removing nothing, when anything else is there */
    char p[600];
    snprintf(p, sizeof p, "%s/r8/notes.txt", g_dir);
    FILE *f = fopen(p, "w");
    fputs("mine\n", f);
    fclose(f);
    assert_int_equal(ojas(TRAIN "--config c.json --out r8 --overwrite", NULL, &err), 1);
    ct_assert_one_line(err, "'notes.txt'");
    free(err);
    assert_true(exists("r8/ckpt-000002") && exists("r8/notes.txt"));
    assert_int_equal(ojas(TRAIN "--resume r8 --out r8 --overwrite", NULL, &err), 2);
    ct_assert_one_line(err, "--overwrite");
    free(err);
}

/* Was: a run killed before its first checkpoint (kill -9, out of memory)
 * leaves metrics.jsonl; a new run into it was refused with "continue its
 * run with --resume", which then failed with "no checkpoint". The refusal
 * now says there is no checkpoint and names --overwrite only, which
 * works. */
static void test_out_dir_without_checkpoint(void **state) {
    (void)state;
    char *err = NULL, p[600];
    snprintf(p, sizeof p, "%s/r20", g_dir);
    assert_int_equal(mkdir(p, 0777), 0);
    snprintf(p, sizeof p, "%s/r20/metrics.jsonl", g_dir);
    FILE *f = fopen(p, "w");
    fputs("{\"type\":\"train\",\"step\":1,\"loss\":6.2}\n", f);
    fclose(f);
    assert_int_equal(ojas(TRAIN "--config c.json --out r20 --set max_steps=2", NULL, &err), 1);
    ct_assert_one_line(err, "no checkpoint");
    contains(err, "--overwrite");
    assert_null(strstr(err, "--resume"));
    free(err);
    assert_int_equal(ojas(TRAIN "--resume r20 --out r20", NULL, &err), 1);
    ct_assert_one_line(err, "no checkpoint");
    free(err);
    assert_int_equal(ojas(TRAIN "--config c.json --out r20 --overwrite --set max_steps=2",
                          NULL, NULL),
                     0);
    assert_true(exists("r20/ckpt-000002"));
}

/* Was: --resume R/ckpt-000002 --out R mixed the new branch with the old
 * later checkpoints (replaced or deleted by keep_last, or resumed later). */
static void test_branch_moves_abandoned_checkpoints_aside(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(ojas(TRAIN "--config c.json --out r9 --set ckpt_every=1 --set keep_last=2 "
                                "--set max_steps=3",
                          NULL, NULL),
                     0);
    char *old3 = slurp_rel("r9/ckpt-000003/state.json");
    char *run_id = json_key("r9/ckpt-000003/state.json", "run_id");
    assert_int_equal(strlen(run_id), 16);
    assert_int_equal(ojas(TRAIN "--resume r9/ckpt-000002 --out r9 --set max_steps=4", &out, NULL),
                     0);
    contains(out, "abandoned-step2");
    free(out);
    /* the abandoned step 3 is kept whole, aside, with its metrics */
    char *moved = slurp_rel("r9/abandoned-step2/ckpt-000003/state.json");
    assert_non_null(moved);
    assert_string_equal(old3, moved);
    free(moved);
    free(old3);
    assert_true(exists("r9/abandoned-step2/metrics.jsonl"));
    /* the new branch: 3' and 4 (keep_last 2), one lineage */
    assert_true(exists("r9/ckpt-000003") && exists("r9/ckpt-000004"));
    assert_false(exists("r9/ckpt-000002"));
    char *id3 = json_key("r9/ckpt-000003/state.json", "id");
    char *old_id3 = json_key("r9/abandoned-step2/ckpt-000003/state.json", "id");
    char *parent4 = json_key("r9/ckpt-000004/state.json", "parent");
    char *run4 = json_key("r9/ckpt-000004/state.json", "run_id");
    assert_string_not_equal(id3, old_id3);
    assert_string_equal(parent4, id3);
    assert_string_equal(run4, run_id);
    free(id3);
    free(old_id3);
    free(parent4);
    free(run4);
    free(run_id);
    int64_t latest = -1;
    char root[600];
    snprintf(root, sizeof root, "%s/r9", g_dir);
    assert_int_equal(oj_checkpoint_latest(root, &latest, NULL), OJ_OK);
    assert_int_equal(latest, 4);
    /* metrics.jsonl: steps 1, 2 of the old run, 3 and 4 of the branch, once each */
    assert_int_equal(count_lines("r9/metrics.jsonl", "\"type\":\"train\""), 4);
    assert_int_equal(count_lines("r9/metrics.jsonl", "\"step\":3,"), 1);
    /* resuming the run goes on from the branch */
    assert_int_equal(ojas(TRAIN "--resume r9 --out r9 --set max_steps=5", &out, NULL), 0);
    contains(out, "at step 4");
    free(out);
    /* the abandoned branch is resumable: then the other one moves aside */
    char *a3 = json_key("r9/abandoned-step2/ckpt-000003/state.json", "id");
    assert_int_equal(ojas(TRAIN "--resume r9/abandoned-step2 --out r9 --set max_steps=4", &out,
                          NULL),
                     0);
    contains(out, "at step 3");
    free(out);
    assert_true(exists("r9/abandoned-step3/ckpt-000005") && exists("r9/abandoned-step3/ckpt-000004"));
    char *p4 = json_key("r9/ckpt-000004/state.json", "parent");
    assert_string_equal(p4, a3);
    free(p4);
    free(a3);
    assert_false(exists("r9/ckpt-000005"));
    /* its curve: steps 1-3 of the first run (from the branch's metrics), then 4 */
    assert_int_equal(count_lines("r9/metrics.jsonl", "\"type\":\"train\""), 4);
    assert_int_equal(count_lines("r9/metrics.jsonl", "\"step\":5,"), 0);
}

/* Was: the config came from the highest-step checkpoint that verified, the
 * weights from the one `latest` names. */
static void test_config_and_weights_from_one_checkpoint(void **state) {
    (void)state;
    assert_int_equal(
        ojas(TRAIN "--config c.json --out r10 --set max_steps=2 --set ckpt_every=0", NULL, NULL), 0);
    assert_int_equal(ojas(TRAIN "--config c.json --out s10 --set max_steps=3 --set ckpt_every=0 "
                                "--set n_layer=1",
                          NULL, NULL),
                     0);
    /* a higher-step checkpoint of another model that `latest` does not name */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp -r '%s/s10/ckpt-000003' '%s/r10/ckpt-000009'", g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    char *out = NULL, *err = NULL;
    int rc = ojas("generate --checkpoint r10 --vocab tok --prompt 'The king' --max-new-tokens 3",
                  &out, &err);
    if (rc != 0)
        fail_msg("generate -> %d: %s", rc, err);
    free(out);
    free(err);
    rc = ojas(TRAIN "--resume r10 --out r10 --set max_steps=3", &out, &err);
    if (rc != 0)
        fail_msg("train --resume -> %d: %s", rc, err);
    contains(out, "at step 2");
    free(out);
    free(err);
}

static int lines_of(const char *rel) {
    char *s = slurp_rel(rel);
    int n = 0;
    for (char *q = s; q && *q; q++)
        n += *q == '\n';
    free(s);
    return n;
}

/* Was: two trainers on one run directory clobbered each other. */
static void test_second_writer_refused(void **state) {
    (void)state;
    char log[400];
    snprintf(log, sizeof log, "%s/r11.txt", g_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(g_dir) != 0 || !freopen(log, "w", stdout) || !freopen(log, "a", stderr))
            _exit(127);
        execl(CT_OJAS, "ojas", "train", "--config", "c.json", "--out", "r11", "--no-progress",
              "--no-plot", "--set", "max_steps=100000", "--set", "eval_every=0", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 6000 && lines_of("r11/metrics.jsonl") < 2; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_true(lines_of("r11/metrics.jsonl") >= 2);
    char *err = NULL, want[64];
    int rc = ojas(TRAIN "--config c.json --out r11 --set max_steps=1", NULL, &err);
    snprintf(want, sizeof want, "PID %ld", (long)pid);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(rc, 1);
    ct_assert_one_line(err, want);
    contains(err, "in use");
    free(err);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the holder's run is whole and resumable once it has gone */
    char *out = NULL;
    assert_int_equal(ojas(TRAIN "--resume r11 --out r11 --set max_steps=1", &out, NULL), 0);
    contains(out, "resumed from");
    free(out);
}

/* Was: generate silently loaded an older checkpoint when the newest failed
 * verification, and a corrupt checkpoint directory gave "--vocab DIR is
 * required" (exit 2). */
static void test_generate_names_refused_checkpoints(void **state) {
    (void)state;
    assert_int_equal(ojas(TRAIN "--config c.json --out r12 --set max_steps=2 --set ckpt_every=1 "
                                "--set keep_last=0",
                          NULL, NULL),
                     0);
    char p[600];
    snprintf(p, sizeof p, "%s/r12/ckpt-000002/model.safetensors", g_dir);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, -3, SEEK_END);
    int c = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(c ^ 0x40, f); /* one flipped bit in the data: same size, another hash */
    fclose(f);
    char *out = NULL, *err = NULL;
    assert_int_equal(ojas("generate --checkpoint r12 --vocab tok --prompt 'The king' "
                          "--max-new-tokens 2 --seed 1",
                          &out, &err),
                     0);
    ct_assert_one_line(err, "warning");
    contains(err, "skipped 1");
    contains(err, "ckpt-000001");
    free(out);
    free(err);
    assert_int_equal(ojas("generate --checkpoint r12/ckpt-000002 --prompt x", NULL, &err), 1);
    ct_assert_one_line(err, "model.safetensors");
    if (strstr(err, "--vocab"))
        fail_msg("the real cause is not first: %s", err);
    free(err);
}

/* Was: each resume of a finished run appended another copy of the final
 * eval record (and rewrote the final checkpoint). */
static void test_resume_finished_run_adds_no_record(void **state) {
    (void)state;
    assert_int_equal(ojas(TRAIN "--config c.json --out r13 --set max_steps=2", NULL, NULL), 0);
    char *before = slurp_rel("r13/ckpt-000002/state.json");
    for (int i = 0; i < 2; i++)
        assert_int_equal(ojas(TRAIN "--resume r13 --out r13", NULL, NULL), 0);
    assert_int_equal(count_lines("r13/metrics.jsonl", "\"type\":\"eval\""), 1);
    assert_int_equal(count_lines("r13/metrics.jsonl", "\"type\":\"train\""), 2);
    char *after = slurp_rel("r13/ckpt-000002/state.json");
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* Was: failed metrics.jsonl writes were ignored until a checkpoint failed. */
static void test_metrics_write_failure_stops_the_run(void **state) {
    (void)state;
    /* a 2048-byte file size limit: metrics.jsonl reaches it after a few
     * steps (writes then fail with EFBIG, SIGXFSZ ignored) */
    char cmd[1400];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir r13b && trap '' XFSZ && ulimit -f 4 && '%s' " TRAIN
             "--config c.json --out r13b --set max_steps=300 --set eval_every=0 "
             "--set ckpt_every=0 --set log_every=1000 >r13b.out 2>r13b.err",
             g_dir, CT_OJAS);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc));
    assert_int_equal(WEXITSTATUS(rc), 1);
    char *err = slurp_rel("r13b.err");
    ct_assert_one_line(err, "cannot write");
    contains(err, "metrics.jsonl");
    free(err);
    assert_true(lines_of("r13b/metrics.jsonl") < 20); /* it stopped at once */
}

/* Was: a resume that changes where the schedule ends jumped the LR with no
 * log line. */
static void test_schedule_change_logged(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(ojas(TRAIN "--config c.json --out r13c --set max_steps=4", NULL, NULL), 0);
    assert_int_equal(ojas(TRAIN "--resume r13c --out r13c --set max_steps=100", &out, NULL), 0);
    contains(out, "step 5: the lr schedule now ends at step 100 (it ended at 4)");
    free(out);
}

/* Was: tokenizer_dir was stored as given, relative to where the run was
 * started. */
static void test_tokenizer_dir_stored_absolute(void **state) {
    (void)state;
    assert_int_equal(ojas(TRAIN "--config c.json --out r13d --set tokenizer_dir=tok "
                                "--set max_steps=1",
                          NULL, NULL),
                     0);
    char sub[400];
    snprintf(sub, sizeof sub, "%s/elsewhere", g_dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    char *out = NULL, *err = NULL;
    int rc = ct_ojas(sub, "generate --checkpoint ../r13d --prompt 'The king' --max-new-tokens 2",
                     &out, &err);
    if (rc != 0)
        fail_msg("generate from another directory -> %d: %s", rc, err);
    contains(out, "The king");
    free(out);
    free(err);
}

/* Was: a run whose every step was skipped as non-finite exited 0. */
static void test_non_finite_steps_stop_the_run(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    /* lr 1e30 blows the weights up after the first step */
    assert_int_equal(ojas(TRAIN "--config c.json --out r14 --set lr=1e30 --set muon_lr=1e30 "
                                "--set warmup_steps=0 --set max_steps=40",
                          &out, &err),
                     1);
    ct_assert_one_line(err, "10 steps in a row were skipped as non-finite");
    contains(err, "detect_anomaly");
    contains(out, "skipped");
    free(out);
    free(err);
    assert_true(count_lines("r14/metrics.jsonl", "\"type\":\"train\"") < 40);
    /* max_skipped_steps 0: never stop */
    assert_int_equal(ojas(TRAIN "--config c.json --out r14b --set lr=1e30 --set muon_lr=1e30 "
                                "--set warmup_steps=0 --set max_steps=12 --set max_skipped_steps=0",
                          NULL, NULL),
                     0);
}

/* `ojas ARGS` in g_dir, killed after 120 s (SIGKILL: SIGTERM only asks a
 * run to stop between steps); exit code, 137 when killed. */
static int ojas_timed(const char *args, char **err) {
    char cmd[1400], p[600];
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout -s KILL 120 '%s' %s >timed.out 2>timed.err",
             g_dir, CT_OJAS, args);
    int rc = system(cmd);
    snprintf(p, sizeof p, "%s/timed.err", g_dir);
    *err = ct_slurp(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Was: a resume waited for ever on a FIFO in the run directory: an older
 * checkpoint's state.json (read for its lineage ids) or metrics.jsonl (its
 * records up to the checkpoint kept). Now the state.json reads as
 * unreadable (the checkpoint counts as another run's) and metrics.jsonl is
 * refused, named as a FIFO. */
static void test_fifo_in_run_dir_not_waited_on(void **state) {
    (void)state;
    char p[600], *err = NULL;
    assert_int_equal(ojas(TRAIN "--config c.json --out r15", NULL, NULL), 0); /* ckpts 2 and 4 */
    snprintf(p, sizeof p, "%s/r15/ckpt-000002/state.json", g_dir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0600), 0);
    int rc = ojas_timed(TRAIN "--resume r15 --out r15 --set max_steps=5", &err);
    if (rc != 0)
        fail_msg("resume past a FIFO state.json -> %d: %s", rc, err);
    free(err);
    snprintf(p, sizeof p, "%s/r15/metrics.jsonl", g_dir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0600), 0);
    rc = ojas_timed(TRAIN "--resume r15 --out r15 --set max_steps=6", &err);
    if (rc != 1)
        fail_msg("resume with a FIFO metrics.jsonl -> %d: %s", rc, err);
    contains(err, "metrics.jsonl");
    contains(err, "FIFO");
    free(err);
}

/* Was: quantize and serve, given a run directory whose newest checkpoint
 * fails verification, silently used an older one (generate, export and
 * train --resume warn). Now each warns in one line naming the skipped
 * checkpoint and the one used. */
static void test_quantize_and_serve_name_refused_checkpoints(void **state) {
    (void)state;
    assert_int_equal(ojas(TRAIN "--config c.json --out r21 --set model=gpt2-tiny --set max_steps=2 "
                                "--set ckpt_every=1 --set keep_last=0 --set eval_every=0",
                          NULL, NULL),
                     0);
    char p[600];
    snprintf(p, sizeof p, "%s/r21/ckpt-000002/model.safetensors", g_dir);
    assert_int_equal(truncate(p, 1000), 0);
    char *err = NULL;
    assert_int_equal(ojas("quantize --checkpoint r21 --to q8_0 -o r21.gguf --vocab tok", NULL, &err),
                     0);
    if (!strstr(err, "ojas: warning: quantize: skipped 1 newer checkpoint") ||
        !strstr(err, "ckpt-000002") || !strstr(err, "using r21/ckpt-000001"))
        fail_msg("quantize printed: %s", err);
    free(err);
    /* serve: the warning before the line that names the address */
    char cmd[1400], both[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && timeout -s TERM 3 '%s' serve --model r21 --vocab tok --port 0 "
             "--threads 1 2>&1",
             g_dir, CT_OJAS);
    FILE *pf = popen(cmd, "r");
    assert_non_null(pf);
    size_t nb = fread(both, 1, sizeof both - 1, pf);
    both[nb] = '\0';
    pclose(pf);
    const char *w = strstr(both, "ojas: warning: serve: skipped 1 newer checkpoint");
    const char *h = strstr(both, "http://");
    if (!w || !h || w > h || !strstr(both, "using r21/ckpt-000001"))
        fail_msg("serve printed: %s", both);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_run_refuses_a_used_out_dir),
        cmocka_unit_test(test_out_dir_without_checkpoint),
        cmocka_unit_test(test_branch_moves_abandoned_checkpoints_aside),
        cmocka_unit_test(test_config_and_weights_from_one_checkpoint),
        cmocka_unit_test(test_second_writer_refused),
        cmocka_unit_test(test_generate_names_refused_checkpoints),
        cmocka_unit_test(test_quantize_and_serve_name_refused_checkpoints),
        cmocka_unit_test(test_resume_finished_run_adds_no_record),
        cmocka_unit_test(test_metrics_write_failure_stops_the_run),
        cmocka_unit_test(test_schedule_change_logged),
        cmocka_unit_test(test_tokenizer_dir_stored_absolute),
        cmocka_unit_test(test_non_finite_steps_stop_the_run),
        cmocka_unit_test(test_fifo_in_run_dir_not_waited_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
