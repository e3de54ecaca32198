// test: the CUDA backend module's loading (src/backend/registry.c): OJAS_CUDA_MODULE naming a missing file, a file that is no shared object, a shared object without the entry, a module that refuses, then one that loads (a fake, tests/unit/fake_cuda_module.c); each failure is OJ_ERR_DEVICE naming the file, and nothing falls back to the CPU.
// The cases run in this order: a module once loaded stays for the process.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"

/* A CUDA engine from the module named by path: its status, message in err. */
static oj_status cuda_engine_with(const char *path, oj_error *err) {
    assert_int_equal(setenv("OJAS_CUDA_MODULE", path, 1), 0);
    oj_engine_config c = oj_engine_config_default();
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *eng = NULL;
    *err = (oj_error){0};
    oj_status st = oj_engine_create(&c, &eng, err);
    assert_null(eng); /* never a CPU engine in its place */
    assert_int_equal(unsetenv("OJAS_CUDA_MODULE"), 0);
    return st;
}

static void assert_names(const oj_error *err, const char *a, const char *b) {
    if (strstr(err->message, a) == NULL || strstr(err->message, b) == NULL)
        fail_msg("message '%s' does not name '%s' and '%s'", err->message, a, b);
    assert_null(strchr(err->message, '\n'));
}

static void test_missing_file(void **state) {
    (void)state;
    oj_error err;
    assert_int_equal(cuda_engine_with("/nonexistent/libojas-cuda.so", &err), OJ_ERR_DEVICE);
    assert_names(&err, "/nonexistent/libojas-cuda.so", "does not exist");
}

static void test_not_a_shared_object(void **state) {
    (void)state;
    oj_error err;
    const char *src = OJAS_SOURCE_DIR "/tests/unit/test_backend_module.c";
    assert_int_equal(cuda_engine_with(src, &err), OJ_ERR_DEVICE);
    assert_names(&err, src, "cannot be loaded");
}

static void test_no_entry(void **state) {
    (void)state;
    oj_error err;
    const char *lib = OJAS_BINARY_DIR "/libojas.so"; /* a shared object, no module entry */
    assert_int_equal(cuda_engine_with(lib, &err), OJ_ERR_DEVICE);
    assert_names(&err, lib, "oj_cuda_module_init");
}

static void test_module_refuses(void **state) {
    (void)state;
    oj_error err;
    assert_int_equal(setenv("OJAS_FAKE_MODULE_REFUSE", "1", 1), 0);
    oj_status st = cuda_engine_with(OJAS_FAKE_MODULE, &err);
    assert_int_equal(unsetenv("OJAS_FAKE_MODULE_REFUSE"), 0);
    assert_int_equal(st, OJ_ERR_DEVICE);
    assert_names(&err, OJAS_FAKE_MODULE, "fake module refuses");
}

static void test_module_loads(void **state) {
    (void)state;
    oj_error err;
    assert_int_equal(cuda_engine_with(OJAS_FAKE_MODULE, &err), OJ_ERR_DEVICE);
    assert_names(&err, "fake CUDA module", "cuda:0 opened through the table");
    /* loaded once: later engines use it without the environment variable */
    oj_engine_config c = oj_engine_config_default();
    c.device = (oj_device){OJ_DEVICE_CUDA, 3};
    oj_engine *eng = NULL;
    err = (oj_error){0};
    assert_int_equal(oj_engine_create(&c, &eng, &err), OJ_ERR_DEVICE);
    assert_null(eng);
    assert_names(&err, "fake CUDA module", "cuda:3");
    /* and the CPU is untouched */
    assert_int_equal(oj_engine_create(NULL, &eng, &err), OJ_OK);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_not_a_shared_object),
        cmocka_unit_test(test_no_entry),
        cmocka_unit_test(test_module_refuses),
        cmocka_unit_test(test_module_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
