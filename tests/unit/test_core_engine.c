// test: engine creation, configuration, devices (no CPU fallback for CUDA)
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include <cmocka.h>

#include "ojas/core.h"

static void test_defaults(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    assert_int_equal(c.device.type, OJ_DEVICE_CPU);
    assert_int_equal(c.numerics, OJ_NUMERICS_FAST);
    oj_engine *eng = NULL;
    oj_error err = {0};
    assert_int_equal(oj_engine_create(NULL, &eng, &err), OJ_OK);
    assert_non_null(eng);
    assert_int_equal(err.status, OJ_OK);
    assert_int_equal(oj_engine_device(eng).type, OJ_DEVICE_CPU);
    assert_int_equal(oj_engine_numerics(eng), OJ_NUMERICS_FAST);
    assert_true(oj_engine_threads(eng) >= 1);
    assert_int_equal(oj_engine_seed(eng), 0);
    assert_true(oj_grad_enabled(eng));
    /* budget_bytes 0: what the machine can give, less a margin, never unlimited */
    int64_t lim = oj_budget_limit(oj_engine_budget(eng));
    int64_t phys = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
    assert_true(lim > 0 && lim < phys);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    assert_int_equal(oj_scope_depth(eng), 0);
    oj_engine_free(eng);
    oj_engine_free(NULL);
}

static void test_settings(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.numerics = OJ_NUMERICS_EXACT;
    c.threads = 3;
    c.seed = 1234;
    c.budget_bytes = 1 << 20;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(&c, &eng, NULL), OJ_OK);
    assert_int_equal(oj_engine_numerics(eng), OJ_NUMERICS_EXACT);
    assert_int_equal(oj_engine_threads(eng), 3);
    assert_int_equal(oj_engine_seed(eng), 1234);
    assert_int_equal(oj_budget_limit(oj_engine_budget(eng)), 1 << 20);
    oj_engine_set_numerics(eng, OJ_NUMERICS_FAST);
    assert_int_equal(oj_engine_numerics(eng), OJ_NUMERICS_FAST);
    oj_engine_set_numerics(eng, (oj_numerics)7);
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_true(oj_set_grad_enabled(eng, false));
    assert_false(oj_grad_enabled(eng));
    assert_false(oj_set_grad_enabled(eng, true));
    /* a budget from another tree is refused */
    oj_budget *other = oj_budget_create(NULL, "other", 100);
    oj_budget *prev = oj_engine_use_budget(eng, other);
    assert_ptr_equal(prev, oj_engine_budget(eng));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_budget_free(other);
    oj_engine_free(eng);
}

static void test_bad_config(void **state) {
    (void)state;
    oj_engine *eng = (oj_engine *)1;
    oj_error err = {0};
    oj_engine_config c = oj_engine_config_default();
    c.threads = -1;
    assert_int_equal(oj_engine_create(&c, &eng, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_null(eng);
    assert_non_null(strstr(err.message, "threads"));
    c = oj_engine_config_default();
    c.budget_bytes = -5;
    err = (oj_error){0};
    assert_int_equal(oj_engine_create(&c, &eng, &err), OJ_ERR_INVALID_ARGUMENT);
    c = oj_engine_config_default();
    c.device.type = (oj_device_type)9;
    assert_int_equal(oj_engine_create(&c, &eng, NULL), OJ_ERR_INVALID_ARGUMENT);
    c = oj_engine_config_default();
    c.device.index = 1; /* CPU has only index 0 */
    assert_int_equal(oj_engine_create(&c, &eng, NULL), OJ_ERR_INVALID_ARGUMENT);
    c = oj_engine_config_default();
    c.numerics = (oj_numerics)5;
    assert_int_equal(oj_engine_create(&c, &eng, NULL), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_engine_create(NULL, NULL, NULL), OJ_ERR_INVALID_ARGUMENT);
}

static void test_cuda_never_falls_back(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *eng = NULL;
    oj_error err = {0};
    oj_status st = oj_engine_create(&c, &eng, &err);
    if (st == OJ_OK) { /* a module and a GPU are present: it must really be a CUDA engine */
        assert_int_equal(oj_engine_device(eng).type, OJ_DEVICE_CUDA);
        oj_engine_free(eng);
    } else {
        assert_int_equal(st, OJ_ERR_DEVICE);
        assert_null(eng);
        assert_true(strlen(err.message) > 0);
        assert_null(strchr(err.message, '\n'));
    }
#ifndef OJAS_HAVE_CUDA
    /* No module in this build tree: unless one is installed elsewhere, the
     * message says so and names the directory of libojas.so (the tree). */
    if (strstr(err.message, "was not found") != NULL) {
        char dir[PATH_MAX];
        assert_non_null(realpath(OJAS_BINARY_DIR, dir));
        assert_non_null(strstr(err.message, "libojas-cuda.so"));
        if (strstr(err.message, dir) == NULL)
            fail_msg("'%s' does not name the build directory %s", err.message, dir);
    } else { /* a module found elsewhere: its own reason, naming it or the device */
        assert_true(strstr(err.message, "libojas-cuda.so") || strstr(err.message, "cuda:0"));
    }
#endif
    /* An ordinal no machine has. */
    c.device.index = 4096;
    err = (oj_error){0};
    assert_int_equal(oj_engine_create(&c, &eng, &err), OJ_ERR_DEVICE);
    assert_null(eng);
    c.device.index = -1;
    assert_int_equal(oj_engine_create(&c, &eng, NULL), OJ_ERR_INVALID_ARGUMENT);
}

static void test_free_releases_everything(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    int64_t s[2] = {3, 4};
    oj_tensor *unscoped = oj_ones(eng, 2, s, OJ_F32); /* leaked on purpose */
    assert_non_null(unscoped);
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    assert_non_null(oj_zeros(eng, 2, s, OJ_F64));
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    assert_non_null(oj_eye(eng, 5, 5, OJ_I64));
    assert_int_equal(oj_engine_live_tensors(eng), 3);
    oj_engine_free(eng); /* LeakSanitizer checks that nothing remains */
}

// test: device strings parse as torch.device's ("cpu", "cuda", "cuda:N") and print back; anything else is refused, leaving d unchanged
static void test_device_parse(void **state) {
    (void)state;
    const char *good[4] = {"cpu", "cuda", "cuda:3", "cuda:1024"};
    oj_device want[4] = {{OJ_DEVICE_CPU, 0}, {OJ_DEVICE_CUDA, 0}, {OJ_DEVICE_CUDA, 3},
                         {OJ_DEVICE_CUDA, 1024}};
    for (int i = 0; i < 4; i++) {
        oj_device d = {OJ_DEVICE_CPU, 77};
        assert_true(oj_device_parse(good[i], &d));
        assert_int_equal(d.type, want[i].type);
        assert_int_equal(d.index, want[i].index);
        char buf[16];
        oj_device_name(d, buf, sizeof buf);
        assert_string_equal(buf, i == 3 ? "cuda:1024" : good[i]);
    }
    const char *bad[9] = {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:1025", "cuda:1x", "cuda0",
                          "cpu:0"};
    for (int i = 0; i < 9; i++) {
        oj_device d = {OJ_DEVICE_CPU, 77};
        assert_false(oj_device_parse(bad[i], &d));
        assert_int_equal(d.index, 77);
    }
    oj_device d;
    assert_false(oj_device_parse(NULL, &d));
    assert_false(oj_device_parse("cpu", NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_cuda_never_falls_back),
        cmocka_unit_test(test_free_releases_everything),
        cmocka_unit_test(test_device_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
