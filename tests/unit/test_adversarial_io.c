// test: adversarial use of the shard and checkpoint API found by probing:
// shard_read with a huge start and count (signed overflow building the
// message, UBSan) and a checkpoint saved at the largest step that the
// reader then refused to find.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/data.h"
#include "ojas/io.h"
#include "train_testutil.h"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    return tt_tmpdir(g_dir, sizeof g_dir);
}
static int teardown(void **state) {
    (void)state;
    tt_rmdir(g_dir);
    return 0;
}

/* Was: "tokens [start, start + n)" computed INT64_MAX + 2 (UBSan abort). */
static void test_shard_read_huge_range(void **state) {
    (void)state;
    char p[400];
    snprintf(p, sizeof p, "%s/s.bin", g_dir);
    int32_t toks[4] = {1, 2, 3, 4};
    assert_int_equal(oj_shard_write(p, toks, 4, 1, NULL), OJ_OK);
    oj_shard *s = NULL;
    assert_int_equal(oj_shard_open(p, &s, NULL), OJ_OK);
    int32_t buf[4];
    oj_error e = {0};
    assert_int_equal(oj_shard_read(s, INT64_MAX, 2, buf, &e), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(e.message, "9223372036854775807"));
    oj_error e2 = {0};
    assert_int_equal(oj_shard_read(s, 1, INT64_MAX, buf, &e2), OJ_ERR_OUT_OF_RANGE);
    assert_int_equal(oj_shard_read(s, 1, 3, buf, NULL), OJ_OK);
    assert_int_equal(buf[2], 4);
    oj_shard_close(s);
}

/* Was: oj_checkpoint_save accepted step INT64_MAX, but the directory-name
 * parser's overflow guard was one digit too strict, so resume found "no
 * checkpoint" and latest was "corrupt". */
static void test_checkpoint_largest_step(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    oj_tensor *w = oj_ones(eng, 1, (int64_t[]){3}, OJ_F32);
    const char *names[1] = {"w"};
    oj_tensor *ts[1] = {w};
    oj_named_tensors m = {1, names, ts};
    char root[400];
    snprintf(root, sizeof root, "%s/ck", g_dir);
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
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_read_huge_range),
        cmocka_unit_test(test_checkpoint_largest_step),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
