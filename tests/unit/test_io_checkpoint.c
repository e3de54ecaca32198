// test: checkpoint directories: round trip, retention, `latest`, refusal of
// corrupted/truncated/mismatched checkpoints with live tensors untouched and
// the previous checkpoint still loading, and a crash at every stage of a
// save leaving a loadable checkpoint
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

#include "io/io_internal.h"
#include "ojas/io.h"

static char tmpdir[256];
static oj_engine *eng;

static int setup(void **state) {
    (void)state;
    if (oj_engine_create(NULL, &eng, NULL) != OJ_OK) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    oj_engine_free(eng);
    return 0;
}

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ojas-test-ckpt-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    return oj__rmtree(tmpdir, NULL) == OJ_OK ? 0 : -1;
}

/* A small "model": two f32 weights and an i64 counter, plus optimizer
 * moments; values derived from `seed`. */
typedef struct model {
    oj_tensor *t[5];
    const char *names[5];
    oj_named_tensors params, optim;
} model;

static void model_init(model *m, double seed) {
    int64_t s_w[2] = {4, 3}, s_b[1] = {3}, s_c[1] = {2};
    m->t[0] = oj_full(eng, 2, s_w, OJ_F32, seed);
    m->t[1] = oj_full(eng, 1, s_b, OJ_BF16, seed + 0.5);
    m->t[2] = oj_full(eng, 1, s_c, OJ_I64, seed * 10);
    m->t[3] = oj_full(eng, 2, s_w, OJ_F32, -seed);
    m->t[4] = oj_full(eng, 1, s_b, OJ_F32, seed / 4);
    for (int i = 0; i < 5; i++) assert_non_null(m->t[i]);
    m->names[0] = "h.0.w", m->names[1] = "h.0.b", m->names[2] = "counter";
    m->names[3] = "h.0.w.exp_avg", m->names[4] = "h.0.b.exp_avg";
    m->params = (oj_named_tensors){3, m->names, m->t};
    m->optim = (oj_named_tensors){2, m->names + 3, m->t + 3};
}

static void model_free(model *m) {
    for (int i = 0; i < 5; i++) oj_release(m->t[i]);
}

/* Set m to what model_init(seed) would have made. */
static void model_set(model *m, double seed) {
    const double v[5] = {seed, seed + 0.5, seed * 10, -seed, seed / 4};
    for (int i = 0; i < 5; i++) assert_int_equal(oj_fill_(m->t[i], v[i]), OJ_OK);
}

/* Every element of m equals what model_init(seed) put there. */
static bool model_is(model *m, double seed) {
    const double want[5] = {seed, seed + 0.5, seed * 10, -seed, seed / 4};
    for (int i = 0; i < 5; i++)
        for (int64_t k = 0; k < oj_numel(m->t[i]); k++)
            if (oj_item_at(m->t[i], k) != want[i]) return false;
    return true;
}

static void save(model *m, int64_t step, int keep) {
    char state[128];
    snprintf(state, sizeof state, "{\"rng\": {\"seed\": 7, \"offset\": %lld}, \"data\": [1, 2]}",
             (long long)step * 3);
    oj_error err = {0};
    if (oj_checkpoint_save(tmpdir, step, &m->params, &m->optim, state, keep, &err) != OJ_OK)
        fail_msg("save %lld: %s", (long long)step, err.message);
}

static void ckpt_file(char *buf, size_t len, int64_t step, const char *file) {
    char dir[512];
    assert_int_equal(oj_checkpoint_path(tmpdir, step, dir, sizeof dir), OJ_OK);
    snprintf(buf, len, "%s/%s", dir, file);
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (at < 0) {
        fseek(f, 0, SEEK_END);
        at += ftell(f);
    }
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void truncate_by(const char *path, long n) {
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - n), 0);
}

/* ---------------------------------------------------------------- tests */

static void test_roundtrip(void **state) {
    (void)state;
    model a, b;
    model_init(&a, 1.0);
    model_init(&b, 2.0);
    save(&a, 100, 0);
    uint64_t v0 = oj_version(b.t[0]);
    oj_checkpoint_info info;
    oj_error err = {0};
    assert_int_equal(oj_checkpoint_load(tmpdir, &b.params, &b.optim, &info, &err), OJ_ERR_IO);
    memset(&err, 0, sizeof err);
    char dir[512];
    oj_checkpoint_path(tmpdir, 100, dir, sizeof dir);
    assert_non_null(strstr(dir, "ckpt-000100"));
    assert_int_equal(oj_checkpoint_load(dir, &b.params, &b.optim, &info, &err), OJ_OK);
    assert_true(model_is(&b, 1.0));
    assert_true(oj_version(b.t[0]) > v0);
    assert_int_equal(info.step, 100);
    assert_string_equal(info.dir, dir);
    assert_non_null(strstr(info.state_json, "\"step\": 100"));
    assert_non_null(strstr(info.state_json, "\"ojas_version\": \"" OJ_VERSION_STRING "\""));
    assert_non_null(strstr(info.state_json, "\"offset\": 300"));
    free(info.state_json);
    int64_t latest;
    assert_int_equal(oj_checkpoint_latest(tmpdir, &latest, NULL), OJ_OK);
    assert_int_equal(latest, 100);
    assert_int_equal(oj_checkpoint_verify(dir, NULL), OJ_OK);
    /* the model alone, optimizer file validated but not loaded */
    model c;
    model_init(&c, 3.0);
    assert_int_equal(oj_checkpoint_load(dir, &c.params, NULL, NULL, NULL), OJ_OK);
    assert_true(oj_item_at(c.t[0], 0) == 1.0 && oj_item_at(c.t[3], 0) == -3.0);
    /* saving without an optimizer and without state */
    assert_int_equal(oj_checkpoint_save(tmpdir, 5, &a.params, NULL, NULL, 0, NULL), OJ_OK);
    oj_checkpoint_path(tmpdir, 5, dir, sizeof dir);
    assert_int_equal(oj_checkpoint_load(dir, &c.params, NULL, &info, NULL), OJ_OK);
    assert_int_equal(info.step, 5);
    free(info.state_json);
    model_free(&a);
    model_free(&b);
    model_free(&c);
}

static void test_retention_and_resume(void **state) {
    (void)state;
    model a;
    model_init(&a, 0);
    for (int64_t s = 1; s <= 5; s++) {
        for (int i = 0; i < 5; i++) oj_fill_(a.t[i], (double)s);
        save(&a, s * 10, 3);
    }
    int64_t *steps, n;
    assert_int_equal(oj_checkpoint_list(tmpdir, &steps, &n, NULL), OJ_OK);
    assert_int_equal(n, 3);
    assert_int_equal(steps[0], 30);
    assert_int_equal(steps[2], 50);
    free(steps);
    model b;
    model_init(&b, 0);
    oj_checkpoint_info info;
    assert_int_equal(oj_checkpoint_resume(tmpdir, &b.params, &b.optim, &info, NULL), OJ_OK);
    assert_int_equal(info.step, 50);
    assert_int_equal(info.skipped, 0);
    assert_true(oj_item_at(b.t[0], 0) == 5.0);
    free(info.state_json);
    /* steps beyond six digits sort by number */
    save(&a, 1234567, 0);
    save(&a, 999999, 0);
    assert_int_equal(oj_checkpoint_list(tmpdir, &steps, &n, NULL), OJ_OK);
    assert_int_equal(steps[n - 1], 1234567);
    assert_int_equal(steps[n - 2], 999999);
    free(steps);
    /* an empty root has nothing to resume */
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", tmpdir);
    mkdir(empty, 0755);
    oj_error err = {0};
    assert_int_equal(oj_checkpoint_resume(empty, &b.params, &b.optim, &info, &err), OJ_ERR_IO);
    assert_non_null(strstr(err.message, "no checkpoint"));
    model_free(&a);
    model_free(&b);
}

/* Each way of damaging the newest checkpoint is refused, the live tensors
 * are untouched, and resume falls back to the previous one. */
static void test_corrupt_refused_previous_loads(void **state) {
    (void)state;
    struct {
        const char *file;
        int how; /* 0 flip a middle byte, 1 flip the last byte, 2 truncate, 3 delete, 4 append */
        oj_status want;
    } cases[] = {
        {"model.safetensors", 0, OJ_ERR_CORRUPT},     {"model.safetensors", 1, OJ_ERR_CORRUPT},
        {"model.safetensors", 2, OJ_ERR_CORRUPT},     {"optimizer.safetensors", 0, OJ_ERR_CORRUPT},
        {"optimizer.safetensors", 2, OJ_ERR_CORRUPT}, {"state.json", 0, OJ_ERR_CORRUPT},
        {"state.json", 2, OJ_ERR_CORRUPT},            {"manifest.json", 0, OJ_ERR_CORRUPT},
        {"manifest.json", 2, OJ_ERR_CORRUPT},         {"model.safetensors", 3, OJ_ERR_IO},
        {"manifest.json", 3, OJ_ERR_IO},              {"model.safetensors", 4, OJ_ERR_CORRUPT},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        model a, live;
        model_init(&a, 1.0);
        save(&a, 10, 0);
        model_set(&a, 2.0);
        save(&a, 20, 0);
        char path[600];
        ckpt_file(path, sizeof path, 20, cases[c].file);
        switch (cases[c].how) {
        case 0: {
            struct stat sb;
            stat(path, &sb);
            flip_byte(path, (long)sb.st_size / 2);
            break;
        }
        case 1: flip_byte(path, -1); break;
        case 2: truncate_by(path, 3); break;
        case 3: unlink(path); break;
        case 4: {
            FILE *f = fopen(path, "ab");
            fputs("garbage", f);
            fclose(f);
            break;
        }
        }
        model_init(&live, 7.0);
        char dir[512];
        oj_checkpoint_path(tmpdir, 20, dir, sizeof dir);
        oj_error err = {0};
        oj_status rc = oj_checkpoint_load(dir, &live.params, &live.optim, NULL, &err);
        if (rc != cases[c].want)
            fail_msg("case %zu (%s): %s, %s", c, cases[c].file, oj_status_name(rc), err.message);
        assert_true(model_is(&live, 7.0)); /* nothing changed */
        assert_non_null(strstr(err.message, dir));
        assert_int_not_equal(oj_checkpoint_verify(dir, NULL), OJ_OK);
        oj_checkpoint_info info;
        memset(&err, 0, sizeof err);
        assert_int_equal(oj_checkpoint_resume(tmpdir, &live.params, &live.optim, &info, &err), OJ_OK);
        assert_int_equal(info.step, 10);
        assert_int_equal(info.skipped, 1);
        assert_true(model_is(&live, 1.0));
        free(info.state_json);
        model_free(&a);
        model_free(&live);
        teardown_dir(NULL);
        setup_dir(NULL);
    }
}

static void test_mismatch_refused(void **state) {
    (void)state;
    model a;
    model_init(&a, 1.0);
    save(&a, 1, 0);
    char dir[512];
    oj_checkpoint_path(tmpdir, 1, dir, sizeof dir);
    int64_t s_w[2] = {4, 3}, s_other[2] = {3, 4};
    oj_tensor *w_shape = oj_full(eng, 2, s_other, OJ_F32, 9);
    oj_tensor *w_dtype = oj_full(eng, 2, s_w, OJ_F64, 9);
    oj_tensor *ok = oj_full(eng, 2, s_w, OJ_F32, 9);
    struct {
        int64_t n;
        const char *names[4];
        oj_tensor *t[4];
        oj_status want;
        const char *needle;
    } cases[] = {
        {3, {"h.0.w", "h.0.b", "counter"}, {w_shape, a.t[1], a.t[2]}, OJ_ERR_SHAPE, "h.0.w"},
        {3, {"h.0.w", "h.0.b", "counter"}, {w_dtype, a.t[1], a.t[2]}, OJ_ERR_DTYPE, "h.0.w"},
        {3, {"h.0.x", "h.0.b", "counter"}, {ok, a.t[1], a.t[2]}, OJ_ERR_SHAPE, "h.0.x"},
        {2, {"h.0.w", "h.0.b"}, {ok, a.t[1]}, OJ_ERR_SHAPE, "counter"},
        {4, {"h.0.w", "h.0.b", "counter", "more"}, {ok, a.t[1], a.t[2], ok}, OJ_ERR_SHAPE, "more"},
        {2, {"h.0.w", "h.0.w"}, {ok, ok}, OJ_ERR_INVALID_ARGUMENT, "twice"},
        {1, {"h.0.w"}, {NULL}, OJ_ERR_INVALID_ARGUMENT, "h.0.w"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        oj_named_tensors nt = {cases[c].n, cases[c].names, cases[c].t};
        oj_error err = {0};
        oj_status rc = oj_checkpoint_load(dir, &nt, &a.optim, NULL, &err);
        if (rc != cases[c].want || !strstr(err.message, cases[c].needle))
            fail_msg("case %zu: %s %s", c, oj_status_name(rc), err.message);
        assert_true(oj_item_at(ok, 0) == 9.0);
        /* resume does not skip past a model that does not fit */
        memset(&err, 0, sizeof err);
        assert_int_equal(oj_checkpoint_resume(tmpdir, &nt, &a.optim, NULL, &err), cases[c].want);
    }
    oj_release(w_shape);
    oj_release(w_dtype);
    oj_release(ok);
    model_free(&a);
}

/* A crash at every stage of a save leaves a whole checkpoint: the old one
 * before the rename, the new one after; the next save cleans up. */
static void test_crash_at_every_stage(void **state) {
    (void)state;
    for (int stage = 1;; stage++) {
        model a, live;
        model_init(&a, 1.0);
        save(&a, 10, 1);
        model_set(&a, 2.0);
        oj__ckpt_crash_point = stage;
        oj_error err = {0};
        oj_status rc = oj_checkpoint_save(tmpdir, 20, &a.params, &a.optim, NULL, 1, &err);
        oj__ckpt_crash_point = 0;
        bool crashed = rc != OJ_OK;
        if (crashed) assert_non_null(strstr(err.message, "simulated crash"));
        model_init(&live, 0);
        oj_checkpoint_info info;
        memset(&err, 0, sizeof err);
        if (oj_checkpoint_resume(tmpdir, &live.params, &live.optim, &info, &err) != OJ_OK)
            fail_msg("stage %d: %s", stage, err.message);
        assert_int_equal(info.skipped, 0);
        assert_true(info.step == 10 || info.step == 20);
        assert_true(model_is(&live, info.step == 10 ? 1.0 : 2.0));
        free(info.state_json);
        /* the next save succeeds and removes the temporaries */
        save(&a, 30, 1);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "ls -A %s | grep -q tmp", tmpdir);
        assert_int_not_equal(system(cmd), 0);
        int64_t *steps, n;
        assert_int_equal(oj_checkpoint_list(tmpdir, &steps, &n, NULL), OJ_OK);
        assert_int_equal(n, 1);
        assert_int_equal(steps[0], 30);
        free(steps);
        model_free(&a);
        model_free(&live);
        teardown_dir(NULL);
        setup_dir(NULL);
        if (!crashed) break;
        assert_true(stage < 20);
    }
}

/* A torn temporary directory (as a killed writer leaves) is ignored. */
static void test_leftover_temp_ignored(void **state) {
    (void)state;
    model a;
    model_init(&a, 1.0);
    save(&a, 10, 0);
    char tmp[600], f[700];
    snprintf(tmp, sizeof tmp, "%s/.ckpt-000020.tmp-99999", tmpdir);
    assert_int_equal(mkdir(tmp, 0755), 0);
    snprintf(f, sizeof f, "%s/model.safetensors", tmp);
    FILE *fp = fopen(f, "wb");
    fputs("\x10\0\0\0\0\0\0\0{\"w\":", fp);
    fclose(fp);
    /* a stray file that looks like a step, and `latest` pointing at it */
    snprintf(f, sizeof f, "%s/ckpt-000030", tmpdir);
    fp = fopen(f, "wb");
    fclose(fp);
    snprintf(f, sizeof f, "%s/latest", tmpdir);
    fp = fopen(f, "wb");
    fputs("ckpt-000030\n", fp);
    fclose(fp);
    model live;
    model_init(&live, 0);
    oj_checkpoint_info info;
    assert_int_equal(oj_checkpoint_resume(tmpdir, &live.params, &live.optim, &info, NULL), OJ_OK);
    assert_int_equal(info.step, 10);
    assert_true(model_is(&live, 1.0));
    free(info.state_json);
    /* a garbled `latest`: resume still finds the newest good one */
    snprintf(f, sizeof f, "%s/latest", tmpdir);
    fp = fopen(f, "wb");
    fputs("ckpt-00001x\n", fp);
    fclose(fp);
    int64_t latest;
    oj_error err = {0};
    assert_int_equal(oj_checkpoint_latest(tmpdir, &latest, &err), OJ_ERR_CORRUPT);
    assert_int_equal(oj_checkpoint_resume(tmpdir, &live.params, &live.optim, &info, NULL), OJ_OK);
    assert_int_equal(info.step, 10);
    free(info.state_json);
    model_free(&a);
    model_free(&live);
}

/* Saving a step that exists replaces it whole. */
static void test_resave_same_step(void **state) {
    (void)state;
    model a, live;
    model_init(&a, 1.0);
    save(&a, 10, 0);
    model_set(&a, 3.0);
    save(&a, 10, 0);
    model_init(&live, 0);
    char dir[512];
    oj_checkpoint_path(tmpdir, 10, dir, sizeof dir);
    assert_int_equal(oj_checkpoint_load(dir, &live.params, &live.optim, NULL, NULL), OJ_OK);
    assert_true(model_is(&live, 3.0));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -q -e tmp -e old", tmpdir);
    assert_int_not_equal(system(cmd), 0);
    model_free(&a);
    model_free(&live);
}

static void test_save_arguments(void **state) {
    (void)state;
    model a;
    model_init(&a, 1.0);
    oj_error err = {0};
    assert_int_equal(oj_checkpoint_save(tmpdir, 1, &a.params, NULL, "{\"step\": 3}", 0, &err),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "reserved"));
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_checkpoint_save(tmpdir, 1, &a.params, NULL, "[1]", 0, &err),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_checkpoint_save(tmpdir, 1, &a.params, NULL, "{\"a\":1,\"a\":2}", 0, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_checkpoint_save(tmpdir, -1, &a.params, NULL, NULL, 0, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_checkpoint_save(tmpdir, 1, NULL, NULL, NULL, 0, NULL), OJ_ERR_INVALID_ARGUMENT);
    const char *dup[] = {"w", "w"};
    oj_tensor *two[] = {a.t[0], a.t[0]};
    oj_named_tensors d = {2, dup, two};
    assert_int_equal(oj_checkpoint_save(tmpdir, 1, &d, NULL, NULL, 0, NULL), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_checkpoint_save("/nonexistent-dir/sub", 1, &a.params, NULL, NULL, 0, NULL),
                     OJ_ERR_IO);
    /* nothing was left behind by the refused saves */
    int64_t *steps, n;
    assert_int_equal(oj_checkpoint_list(tmpdir, &steps, &n, NULL), OJ_OK);
    assert_int_equal(n, 0);
    free(steps);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", tmpdir);
    assert_int_equal(system(cmd), 0);
    model_free(&a);
}

static void test_names(void **state) {
    (void)state;
    int64_t s;
    assert_true(oj__ckpt_parse_dirname("ckpt-000100", 11, &s) && s == 100);
    assert_true(oj__ckpt_parse_dirname("ckpt-1234567", 12, &s) && s == 1234567);
    assert_false(oj__ckpt_parse_dirname("ckpt-100", 8, &s));
    assert_false(oj__ckpt_parse_dirname("ckpt-0001000", 12, &s));
    assert_false(oj__ckpt_parse_dirname("ckpt-+00100", 11, &s));
    assert_false(oj__ckpt_parse_dirname("ckpt-99999999999999999999", 25, &s));
    assert_true(oj__ckpt_parse_latest((const uint8_t *)"ckpt-000007\n", 12, &s) && s == 7);
    assert_false(oj__ckpt_parse_latest((const uint8_t *)"ckpt-000007\n\n", 13, &s));
    char buf[16];
    assert_int_equal(oj_checkpoint_path("/very/long/root", 1, buf, sizeof buf), OJ_ERR_OUT_OF_RANGE);
}

/* ---- the largest step */

/* Checkpoints at steps INT64_MAX - 5 and INT64_MAX: saved, listed, found
 * by latest and resumed (the directory-name parser accepts every step that
 * save writes). */
static void test_checkpoint_largest_step(void **state) {
    (void)state;
    oj_tensor *w = oj_ones(eng, 1, (int64_t[]){3}, OJ_F32);
    const char *names[1] = {"w"};
    oj_tensor *ts[1] = {w};
    oj_named_tensors m = {1, names, ts};
    char root[400];
    snprintf(root, sizeof root, "%s/ck", tmpdir);
    const int64_t steps[2] = {INT64_MAX - 5, INT64_MAX};
    for (int i = 0; i < 2; i++) {
        oj_error e = {0};
        assert_int_equal(oj_checkpoint_save(root, steps[i], &m, NULL, NULL, 0, &e), OJ_OK);
        int64_t latest = 0;
        assert_int_equal(oj_checkpoint_latest(root, &latest, NULL), OJ_OK);
        assert_true(latest == steps[i]);
        oj_checkpoint_info info = {0};
        oj_error e2 = {0};
        if (oj_checkpoint_resume(root, &m, NULL, &info, &e2) != OJ_OK) fail_msg("%s", e2.message);
        assert_true(info.step == steps[i]);
        free(info.state_json);
    }
    int64_t *list = NULL, n = 0;
    assert_int_equal(oj_checkpoint_list(root, &list, &n, NULL), OJ_OK);
    assert_int_equal(n, 2);
    free(list);
    oj_release(w);
}

int main(void) {
#define DIR_TEST(f) cmocka_unit_test_setup_teardown(f, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        DIR_TEST(test_roundtrip),
        DIR_TEST(test_retention_and_resume),
        DIR_TEST(test_corrupt_refused_previous_loads),
        DIR_TEST(test_mismatch_refused),
        DIR_TEST(test_crash_at_every_stage),
        DIR_TEST(test_leftover_temp_ignored),
        DIR_TEST(test_resave_same_step),
        DIR_TEST(test_save_arguments),
        cmocka_unit_test(test_names),
        DIR_TEST(test_checkpoint_largest_step),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
