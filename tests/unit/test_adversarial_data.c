// test: adversarial inputs to the tokenizer found by probing: a rank file
// that is a device (endless) is refused instead of being read until memory
// runs out, and bpe_train given a NULL text with a length is an error, not
// a NULL dereference.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ojas/data.h"

/* Was: read until the allocator gave up (ASan abort; OOM without it). */
static void test_tokenizer_refuses_non_regular_files(void **state) {
    (void)state;
    oj_tokenizer *tok = (oj_tokenizer *)1;
    oj_error e = {0};
    assert_int_equal(oj_tokenizer_load_tiktoken("/dev/zero", &tok, &e), OJ_ERR_IO);
    assert_null(tok);
    assert_non_null(strstr(e.message, "/dev/zero"));
    /* through a directory whose rank file is a link to a device */
    char dir[] = "/tmp/ojas_adv_data_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char link[256];
    snprintf(link, sizeof link, "%s/r.tiktoken", dir);
    assert_int_equal(symlink("/dev/zero", link), 0);
    oj_error e2 = {0};
    assert_int_equal(oj_tokenizer_load(dir, &tok, &e2), OJ_ERR_IO);
    assert_non_null(strstr(e2.message, "not a regular file"));
    unlink(link);
    rmdir(dir);
    /* the GPT-2 pair: refused too (encoder.json is read by jansson) */
    oj_error e3 = {0};
    assert_int_not_equal(oj_tokenizer_load_gpt2("/dev/zero", "/dev/zero", &tok, &e3), OJ_OK);
}

/* Was: memmem(NULL, 11, ...) in make_segments (UBSan; SIGSEGV without). */
static void test_bpe_train_null_text(void **state) {
    (void)state;
    oj_bpe_train_config c = oj_bpe_train_config_default();
    c.vocab_size = 300;
    const char *texts[2] = {"hello hello", NULL};
    size_t lens[2] = {11, 5};
    oj_tokenizer *tok = NULL;
    oj_error e = {0};
    assert_int_equal(oj_bpe_train(&c, 2, texts, lens, &tok, &e), OJ_ERR_INVALID_ARGUMENT);
    assert_null(tok);
    assert_non_null(strstr(e.message, "text 1"));
    /* NULL with length 0 is an empty text */
    lens[1] = 0;
    assert_int_equal(oj_bpe_train(&c, 2, texts, lens, &tok, NULL), OJ_OK);
    assert_non_null(tok);
    oj_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_refuses_non_regular_files),
        cmocka_unit_test(test_bpe_train_null_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
