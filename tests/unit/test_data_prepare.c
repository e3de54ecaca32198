// test: text files -> documents -> train/val shards that the loader reads back
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "data_testutil.h"

static oj_tokenizer *g_tok;

static int setup(void **state) {
    (void)state;
    g_tok = tu_gpt2();
    return g_tok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    oj_tokenizer_free(g_tok);
    return 0;
}

static void push_doc(oj_tokens *t, const char *s, size_t n) {
    oj_tokens_push(t, 50256);
    assert_int_equal(oj_tokenizer_encode(g_tok, s, n, OJ_ENCODE_SPECIAL_AS_TEXT, t, NULL), OJ_OK);
}

static void test_prepare_and_load(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), *out = tu_path(dir, "shards");
    char *fa = tu_path(dir, "a.txt"), *fb = tu_path(dir, "b.txt");
    const char *a = "First document.\n<|endoftext|>Second one, with <|fim|> text.<|endoftext|>"
                    "<|endoftext|>";
    assert_int_equal(tu_write(fa, a, strlen(a)), 0);
    size_t nb = 5000000; /* large enough for the parallel path */
    char *b = malloc(nb + 1);
    for (size_t i = 0; i < nb; i++)
        b[i] = "In the beginning God created the heaven and the earth. 1:1\n"[i % 59];
    b[nb] = 0;
    assert_int_equal(tu_write(fb, b, nb), 0);
    /* the stream the shards must hold */
    oj_tokens want = {0};
    push_doc(&want, "First document.\n", 16);
    push_doc(&want, "Second one, with <|fim|> text.", 30);
    push_doc(&want, b, nb);
    oj_prepare_config cfg = oj_prepare_config_default();
    cfg.out_dir = out;
    cfg.val_fraction = 0.25;
    cfg.shard_tokens = 300000;
    cfg.threads = 2;
    const char *files[] = {fa, fb};
    oj_prepare_stats st;
    oj_error err = {0};
    assert_int_equal(oj_data_prepare(g_tok, &cfg, 2, files, &st, &err), OJ_OK);
    assert_int_equal(st.documents, 3);
    assert_int_equal(st.bytes, (int64_t)(strlen(a) + nb));
    assert_int_equal(st.train_tokens + st.val_tokens, (int64_t)want.len);
    assert_int_equal(st.val_tokens, (int64_t)(0.25 * (double)want.len + 0.5));
    assert_int_equal(st.train_shards, (int)((st.train_tokens + 299999) / 300000));
    assert_int_equal(st.val_shards, (int)((st.val_tokens + 299999) / 300000));
    /* read every shard back in order */
    const char *splits[] = {"train", "val"};
    size_t at = 0;
    for (int k = 0; k < 2; k++) {
        char **paths;
        int n;
        assert_int_equal(oj_shard_list(out, splits[k], &paths, &n, NULL), OJ_OK);
        assert_int_equal(n, k ? st.val_shards : st.train_shards);
        for (int i = 0; i < n; i++) {
            oj_shard *sh;
            assert_int_equal(oj_shard_open(paths[i], &sh, NULL), OJ_OK);
            assert_int_equal(oj_shard_version(sh), 1);
            int64_t len = oj_shard_len(sh);
            int32_t *t = malloc((size_t)len * sizeof *t);
            assert_int_equal(oj_shard_read(sh, 0, len, t, NULL), OJ_OK);
            assert_memory_equal(t, want.ids + at, (size_t)len * sizeof *t);
            at += (size_t)len;
            free(t);
            oj_shard_close(sh);
        }
        if (k == 0) {
            /* the loader's first batch is the start of the stream */
            oj_loader_config lc = oj_loader_config_default();
            lc.paths = (const char *const *)paths;
            lc.n_paths = n;
            lc.B = 2;
            lc.T = 8;
            lc.vocab_size = 50257;
            oj_loader *L;
            assert_int_equal(oj_loader_open(&lc, &L, NULL), OJ_OK);
            int64_t in[16], tg[16];
            assert_int_equal(oj_loader_next_host(L, in, tg, NULL), OJ_OK);
            for (int i = 0; i < 16; i++) {
                assert_int_equal(in[i], want.ids[i]);
                assert_int_equal(tg[i], want.ids[i + 1]);
            }
            oj_loader_free(L);
        }
        oj_paths_free(paths, n);
    }
    assert_int_equal(at, want.len);
    oj_tokens_free(&want);
    free(b);
    free(fa);
    free(fb);
    free(out);
    tu_rmdir(dir);
    free(dir);
}

static void test_prepare_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    oj_prepare_config cfg = oj_prepare_config_default();
    cfg.out_dir = dir;
    const char *missing[] = {"/nonexistent/file.txt"};
    oj_error e1 = {0}, e2 = {0}, e3 = {0};
    assert_int_equal(oj_data_prepare(g_tok, &cfg, 1, missing, NULL, &e1), OJ_ERR_IO);
    assert_non_null(strstr(e1.message, "/nonexistent/file.txt"));
    /* messages name the command, "data prepare" */
    assert_int_equal(strncmp(e1.message, "data prepare: ", 14), 0);
    cfg.val_fraction = 1.0;
    assert_int_equal(oj_data_prepare(g_tok, &cfg, 0, NULL, NULL, &e2), OJ_ERR_INVALID_ARGUMENT);
    cfg.val_fraction = 0.1;
    /* a tokenizer without <|endoftext|> */
    oj_bpe_train_config tc = oj_bpe_train_config_default();
    const char *sp[] = {"<|pad|>"};
    tc.vocab_size = 257;
    tc.specials = sp;
    tc.n_specials = 1;
    oj_tokenizer *tok;
    assert_int_equal(oj_bpe_train(&tc, 0, NULL, NULL, &tok, NULL), OJ_OK);
    assert_int_equal(oj_data_prepare(tok, &cfg, 0, NULL, NULL, &e3), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e3.message, "endoftext"));
    assert_int_equal(strncmp(e3.message, "data prepare: ", 14), 0);
    oj_tokenizer_free(tok);
    tu_rmdir(dir);
    free(dir);
}

/* A set is whole or refused: a second prepare into a directory of shards
 * is refused (the sets would mix); a prepare that did not finish (its
 * marker left) makes the loader refuse, and the next prepare replaces its
 * shards. */
static void test_prepare_whole_sets(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), *out = tu_path(dir, "s"), *fa = tu_path(dir, "a.txt");
    char *mark = tu_path(out, OJ_PREPARE_INCOMPLETE), *extra = tu_path(out, "train_000007.bin");
    const char *a = "In the beginning God created the heaven and the earth.\n";
    assert_int_equal(tu_write(fa, a, strlen(a)), 0);
    oj_prepare_config cfg = oj_prepare_config_default();
    cfg.out_dir = out;
    cfg.shard_tokens = 4;
    const char *files[] = {fa};
    oj_prepare_stats st;
    oj_error err = {0};
    assert_int_equal(oj_data_prepare(g_tok, &cfg, 1, files, &st, &err), OJ_OK);
    assert_true(st.train_shards > 2);
    assert_int_equal(access(mark, F_OK), -1); /* removed at the end */
    cfg.shard_tokens = 1000;
    assert_int_equal(oj_data_prepare(g_tok, &cfg, 1, files, NULL, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "already holds shards"));
    /* an unfinished prepare: its marker and a shard of its set */
    assert_int_equal(tu_write(mark, "x", 1), 0);
    assert_int_equal(tu_write(extra, "x", 1), 0);
    char **paths = NULL;
    int n = 0;
    oj_error e2 = {0}, e3 = {0};
    assert_int_equal(oj_shard_list(out, "train", &paths, &n, &e2), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e2.message, "did not finish"));
    assert_int_equal(oj_data_prepare(g_tok, &cfg, 1, files, &st, &e3), OJ_OK);
    assert_int_equal(st.train_shards, 1);
    assert_int_equal(oj_shard_list(out, "train", &paths, &n, &e3), OJ_OK);
    assert_int_equal(n, 1); /* the unfinished set's shards are gone */
    oj_paths_free(paths, n);
    free(mark);
    free(extra);
    free(fa);
    free(out);
    tu_rmdir(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_and_load),
        cmocka_unit_test(test_prepare_errors),
        cmocka_unit_test(test_prepare_whole_sets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
