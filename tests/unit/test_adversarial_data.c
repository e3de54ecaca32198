// test: adversarial inputs to the tokenizer found by probing: a rank file
// that is a device (endless) is refused instead of being read until memory
// runs out, and bpe_train given a NULL text with a length is an error, not
// a NULL dereference; a rank file naming a huge id is refused instead of
// sizing the id table by it.
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

/* Was: a few lines naming id 2000000000 made the id table grow to 2^31
 * entries (about 18 GB allocated, 11 GB touched; minutes under ASan).
 * Found by fuzz_tokenizer (seed bad_id_huge). */
static void test_tokenizer_refuses_far_ids(void **state) {
    (void)state;
    char dir[] = "/tmp/ojas_adv_data_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p[256], q[256];
    /* tiktoken: every byte 0..255 (base64), then one rank far out */
    snprintf(p, sizeof p, "%s/r.tiktoken", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int b = 0; b < 256; b++)
        fprintf(f, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    fprintf(f, "YWI= 2000000000\n");
    fclose(f);
    oj_tokenizer *tok = (oj_tokenizer *)1;
    oj_error e = {0};
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, &e), OJ_ERR_CORRUPT);
    assert_null(tok);
    assert_non_null(strstr(e.message, "far beyond"));
    /* a gap that stays near the entry count is still a tokenizer */
    f = fopen(p, "wb");
    assert_non_null(f);
    for (int b = 0; b < 256; b++)
        fprintf(f, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    fprintf(f, "YWI= 600\n");
    fclose(f);
    assert_int_equal(oj_tokenizer_load_tiktoken(p, &tok, NULL), OJ_OK);
    assert_int_equal(oj_tokenizer_vocab_size(tok), 602);
    oj_tokenizer_free(tok);
    unlink(p);
    /* encoder.json: the same id as a special token */
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    snprintf(q, sizeof q, "%s/vocab.bpe", dir);
    f = fopen(p, "wb");
    assert_non_null(f);
    fprintf(f, "{\"!\": 0, \"<|big|>\": 2000000000}");
    fclose(f);
    f = fopen(q, "wb");
    assert_non_null(f);
    fclose(f);
    oj_error e2 = {0};
    assert_int_equal(oj_tokenizer_load_gpt2(p, q, &tok, &e2), OJ_ERR_CORRUPT);
    assert_null(tok);
    assert_non_null(strstr(e2.message, "far beyond"));
    unlink(p);
    unlink(q);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_refuses_non_regular_files),
        cmocka_unit_test(test_bpe_train_null_text),
        cmocka_unit_test(test_tokenizer_refuses_far_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
