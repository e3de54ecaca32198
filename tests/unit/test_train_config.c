// test: training config parsing (JSON file, --set overrides, unknown keys
// and bad values named), model config resolution, the config stored in a
// checkpoint, AdamW / WSD / constant runs, the time limit, bits per byte
// against an independent count, the plot script, and a CUDA device
// request failing with OJ_ERR_DEVICE instead of falling back
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <unistd.h>

#include <cmocka.h>

#include "ojas/io.h"
#include "train_testutil.h"
#include "train/train_internal.h"

static void test_defaults_round_trip(void **state) {
    (void)state;
    oj_train_config c = oj_train_config_default(), d = oj_train_config_default();
    assert_int_equal(oj_train_config_check(&c, NULL), OJ_OK);
    assert_int_equal(oj_train_config_set(&c, "max_steps=77", NULL), OJ_OK);
    assert_int_equal(oj_train_config_set(&c, "betas=0.8,0.99", NULL), OJ_OK);
    assert_int_equal(oj_train_config_set(&c, "device=cuda:1", NULL), OJ_OK);
    assert_int_equal(oj_train_config_set(&c, "schedule=wsd", NULL), OJ_OK);
    char *js = oj_train_config_to_json(&c);
    assert_non_null(js);
    assert_int_equal(oj_train_config_apply_json(&d, js, NULL), OJ_OK);
    char *js2 = oj_train_config_to_json(&d);
    assert_string_equal(js, js2);
    assert_int_equal(d.max_steps, 77);
    assert_true(d.beta1 == 0.8 && d.beta2 == 0.99);
    assert_int_equal(d.device.type, OJ_DEVICE_CUDA);
    assert_int_equal(d.device.index, 1);
    assert_int_equal(d.schedule, OJ_SCHEDULE_WSD);
    free(js);
    free(js2);
}

static void test_set_values(void **state) {
    (void)state;
    oj_train_config c = oj_train_config_default();
    assert_int_equal(oj_train_config_set(&c, "lr=3e-4", NULL), OJ_OK);
    assert_true(c.lr == 3e-4);
    assert_int_equal(oj_train_config_set(&c, "max_steps=1e3", NULL), OJ_OK);
    assert_int_equal(c.max_steps, 1000);
    assert_int_equal(oj_train_config_set(&c, "shuffle=false", NULL), OJ_OK);
    assert_false(c.shuffle);
    assert_int_equal(oj_train_config_set(&c, "optimizer=adamw", NULL), OJ_OK);
    assert_int_equal(c.optimizer, OJ_TRAIN_ADAMW);
    assert_int_equal(oj_train_config_set(&c, "numerics=exact", NULL), OJ_OK);
    assert_int_equal(c.numerics, OJ_NUMERICS_EXACT);
    assert_int_equal(oj_train_config_set(&c, "data_dir=123", NULL), OJ_OK);
    assert_string_equal(c.data_dir, "123");
    assert_int_equal(oj_train_config_set(&c, "betas=[0.5, 0.6]", NULL), OJ_OK);
    assert_true(c.beta1 == 0.5 && c.beta2 == 0.6);

    oj_train_config before = c;
    const struct {
        const char *set, *needle;
    } bad[] = {
        {"nokey=1", "unknown key 'nokey'"},
        {"max_steps=abc", "max_steps"},
        {"max_steps=1.5", "max_steps"},
        {"batch_size=0", "batch_size"},
        {"lr=-1", "'lr'"},
        {"optimizer=sgd", "\"muon\""},
        {"betas=0.9", "betas"},
        {"betas=0.9,1.5", "betas"},
        {"device=tpu", "device"},
        {"shuffle=maybe", "shuffle"},
        {"noequals", "key=value"},
        {"=3", "key=value"},
        /* was: refused with no message (fuzz_train_config) */
        {"device=\xed" "cuda:-1", "'device': the value is not UTF-8"},
        {"model=\xff", "'model': the value is not UTF-8"},
        {"schedule=\xc3", "'schedule'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        oj_error err = {0};
        assert_int_equal(oj_train_config_set(&c, bad[i].set, &err), OJ_ERR_INVALID_ARGUMENT);
        if (!strstr(err.message, bad[i].needle))
            fail_msg("--set %s: message '%s' lacks '%s'", bad[i].set, err.message, bad[i].needle);
    }
    assert_memory_equal(&c, &before, sizeof c); /* unchanged by failures */
}

static void test_json(void **state) {
    (void)state;
    oj_train_config c = oj_train_config_default(), before = c;
    oj_error err = {0};
    assert_int_equal(oj_train_config_apply_json(&c, "{\"lr\": 0.5, \"bogus_key\": 1}", &err),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "'bogus_key'"));
    assert_memory_equal(&c, &before, sizeof c); /* all or nothing */
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train_config_apply_json(&c, "{\"lr\": \"fast\"}", &err),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "'lr'"));
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train_config_apply_json(&c, "{\"lr\": 1,\n \"lr\": 2}", &err),
                     OJ_ERR_INVALID_ARGUMENT);
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train_config_apply_json(&c, "[1]", &err), OJ_ERR_INVALID_ARGUMENT);
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train_config_apply_json(&c, "{\"lr\": 1,\n \"x\" 2}", &err),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "line 2"));

    char dir[256], p[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    snprintf(p, sizeof p, "%s/c.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"model\": \"nanolab-tiny\", \"n_layer\": 3, \"betas\": [0.9, 0.98], \"seed\": 5}\n", f);
    fclose(f);
    assert_int_equal(oj_train_config_load(&c, p, NULL), OJ_OK);
    assert_string_equal(c.model, "nanolab-tiny");
    assert_int_equal(c.n_layer, 3);
    assert_true(c.seed == 5 && c.beta2 == 0.98);
    memset(&err, 0, sizeof err);
    snprintf(p, sizeof p, "%s/missing.json", dir);
    assert_int_equal(oj_train_config_load(&c, p, &err), OJ_ERR_IO);
    assert_non_null(strstr(err.message, "missing.json"));
    tt_rmdir(dir);
}

static void test_check_and_model(void **state) {
    (void)state;
    oj_train_config c = oj_train_config_default();
    oj_gpt_config m;
    oj_error err = {0};
    snprintf(c.model, sizeof c.model, "nanolab-huge");
    assert_int_equal(oj_train_config_check(&c, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "nanolab-huge"));
    c = oj_train_config_default();
    c.seq_len = 100000;
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train_config_check(&c, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "seq_len"));
    c = oj_train_config_default();
    c.n_embd = 100; /* not a multiple of the preset's 4 heads of an even dim */
    c.n_head = 3;
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train_config_check(&c, &err), OJ_ERR_INVALID_ARGUMENT);
    c = oj_train_config_default();
    snprintf(c.model, sizeof c.model, "nanolab-tiny");
    c.n_layer = 3;
    c.block_size = 32;
    assert_int_equal(oj_train_model_config(&c, 300, &m, NULL), OJ_OK);
    assert_int_equal(m.n_layer, 3);
    assert_int_equal(m.block_size, 32);
    assert_int_equal(m.vocab_size, 300); /* the tokenizer's */
    c.vocab_size = 320;
    assert_int_equal(oj_train_model_config(&c, 300, &m, NULL), OJ_OK);
    assert_int_equal(m.vocab_size, 320);
    /* cuda_graph: a CUDA device, and (with the world size) one
     * micro-batch per rank, on the all-reduce path only */
    c = oj_train_config_default();
    assert_int_equal(oj_train_config_set(&c, "cuda_graph=true", NULL), OJ_OK);
    assert_true(c.cuda_graph);
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train_config_check(&c, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "cuda_graph needs device cuda"));
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    c.grad_accum = 2;
    assert_int_equal(oj_train_config_check(&c, NULL), OJ_OK); /* 2 ranks may take it */
    memset(&err, 0, sizeof err);
    assert_int_equal(oj__train_check_world(&c, 1, false, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "cuda_graph needs one micro-batch per rank"));
    assert_int_equal(oj__train_check_world(&c, 2, true, NULL), OJ_OK);
    c.numerics = OJ_NUMERICS_EXACT; /* the shard exchange: refused */
    memset(&err, 0, sizeof err);
    assert_int_equal(oj__train_check_world(&c, 2, true, &err), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "cuda_graph=false for exact numerics"));
    c.grad_accum = 1; /* one rank: its rank-order sum is the all-reduce's */
    assert_int_equal(oj__train_check_world(&c, 1, true, NULL), OJ_OK);
    c.zero = 1;
    memset(&err, 0, sizeof err);
    assert_int_equal(oj__train_check_world(&c, 1, true, &err), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "for ZeRO-1"));
    c.zero = 0;
    c.cuda_graph = false;
    c.grad_accum = 3;
    memset(&err, 0, sizeof err);
    assert_int_equal(oj__train_check_world(&c, 2, true, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "grad_accum 3 is not a multiple of the world size 2"));
}

static int count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void test_runs(void **state) {
    (void)state;
    char dir[256], out[300], p[400];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 2000, 100), 0);
    oj_train_config c = tt_config(dir);
    c.threads = 1;
    c.numerics = OJ_NUMERICS_FAST;
    oj_train_result res;
    oj_train_options o = {.out_dir = out, .plot = true};
    oj_error err = {0};

    /* AdamW + WSD, 4 steps, no intermediate checkpoints */
    snprintf(out, sizeof out, "%s/adamw", dir);
    c.optimizer = OJ_TRAIN_ADAMW;
    c.schedule = OJ_SCHEDULE_WSD;
    c.max_steps = 4;
    c.ckpt_every = 0;
    c.eval_every = 0;
    if (oj_train(&c, &o, &res, &err))
        fail_msg("%s", err.message);
    assert_int_equal(res.step, 4);
    assert_true(isfinite(res.train_loss) && isfinite(res.val_loss));
    assert_true(isnan(res.val_bpb)); /* no tokenizer */
    snprintf(p, sizeof p, "%s/ckpt-000004", out);
    assert_string_equal(res.checkpoint, p);
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    assert_int_equal(count_lines(p, "\"type\":\"train\""), 4);
    assert_int_equal(count_lines(p, "\"type\":\"eval\""), 1);
    snprintf(p, sizeof p, "%s/loss.gp", out);
    assert_int_equal(count_lines(p, "$train << EOD"), 1);

    /* the stored config comes back */
    oj_train_config back;
    assert_int_equal(oj_train_config_from_checkpoint(out, &back, NULL), OJ_OK);
    char *j1 = oj_train_config_to_json(&c), *j2 = oj_train_config_to_json(&back);
    assert_string_equal(j1, j2);
    free(j1);
    free(j2);
    /* resuming a finished run does no step and keeps the result */
    o.resume = out;
    if (oj_train(&c, &o, &res, &err))
        fail_msg("%s", err.message);
    assert_int_equal(res.step, 4);
    /* a resume whose batch shape differs is refused */
    c.batch_size = 3;
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_train(&c, &o, &res, &err), OJ_ERR_STATE);
    assert_non_null(strstr(err.message, "batch_size"));
    c.batch_size = 2;
    o.resume = NULL;

    /* a time limit that the first step already uses up: stop + checkpoint */
    snprintf(out, sizeof out, "%s/timed", dir);
    c.optimizer = OJ_TRAIN_MUON;
    c.schedule = OJ_SCHEDULE_CONSTANT;
    c.max_steps = 1000;
    c.time_limit_seconds = 1e-6;
    if (oj_train(&c, &o, &res, &err))
        fail_msg("%s", err.message);
    assert_int_equal(res.stop, OJ_TRAIN_TIME_LIMIT);
    assert_int_equal(res.step, 1);
    snprintf(p, sizeof p, "%s/ckpt-000001/manifest.json", out);
    assert_int_equal(access(p, R_OK), 0);

    /* missing data is one clear error (a fresh out dir: "timed" holds a run) */
    snprintf(out, sizeof out, "%s/nodata_run", dir);
    c.time_limit_seconds = 0;
    snprintf(c.data_dir, sizeof c.data_dir, "%s/nodata", dir);
    memset(&err, 0, sizeof err);
    assert_int_not_equal(oj_train(&c, &o, &res, &err), OJ_OK);
    assert_non_null(strstr(err.message, "nodata"));
    tt_rmdir(dir);
}

/* bpb = val loss / ln 2 * tokens / bytes, with the bytes counted here by
 * decoding every val target (end-of-text: 0 bytes). */
static void test_bits_per_byte(void **state) {
    (void)state;
    char dir[256], p[400];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    static const char *lines[] = {"In the beginning God created the heaven and the earth. ",
                                  "And the earth was without form, and void; ",
                                  "and darkness was upon the face of the deep. "};
    char *text = malloc(64 * 1024);
    size_t len = 0;
    for (int i = 0; len < 60000; i++)
        len += (size_t)sprintf(text + len, "%s", lines[(i * 7 + i / 3) % 3]);
    oj_bpe_train_config bc = oj_bpe_train_config_default();
    bc.vocab_size = 300;
    bc.threads = 1;
    oj_tokenizer *tok = NULL;
    const char *texts[1] = {text};
    assert_int_equal(oj_bpe_train(&bc, 1, texts, &len, &tok, NULL), OJ_OK);
    snprintf(p, sizeof p, "%s/tok", dir);
    assert_int_equal(oj_tokenizer_save(tok, p, NULL), OJ_OK);
    oj_tokens ids = {0};
    assert_int_equal(oj_tokens_push(&ids, oj_tokenizer_eot(tok)), OJ_OK);
    assert_int_equal(oj_tokenizer_encode(tok, text, len, 0, &ids, NULL), OJ_OK);
    snprintf(p, sizeof p, "%s/data", dir);
    mkdir(p, 0777);
    int64_t n_val = 200;
    snprintf(p, sizeof p, "%s/data/train_000000.bin", dir);
    assert_int_equal(oj_shard_write(p, ids.ids, (int64_t)ids.len - n_val, 1, NULL), OJ_OK);
    snprintf(p, sizeof p, "%s/data/val_000000.bin", dir);
    ids.ids[ids.len - n_val + 5] = oj_tokenizer_eot(tok); /* one 0-byte target in val */
    assert_int_equal(oj_shard_write(p, ids.ids + ids.len - n_val, n_val, 1, NULL), OJ_OK);

    oj_train_config c = tt_config(dir);
    c.vocab_size = 0; /* the tokenizer's */
    snprintf(c.tokenizer_dir, sizeof c.tokenizer_dir, "%s/tok", dir);
    c.max_steps = 2;
    c.eval_batches = 3;
    c.threads = 1;
    snprintf(p, sizeof p, "%s/run", dir);
    oj_train_options o = {.out_dir = p};
    oj_trainer *t = NULL;
    oj_error err = {0};
    if (oj_trainer_create(&c, &o, &t, &err))
        fail_msg("%s", err.message);
    assert_int_equal(oj_gpt_get_config(oj_trainer_model(t))->vocab_size,
                     oj_tokenizer_vocab_size(tok));
    double vl, bpb;
    assert_int_equal(oj_trainer_eval(t, &vl, &bpb, NULL), OJ_OK);
    /* targets: windows k*T+1 .. k*T+T of the val shard, 3 batches of B=2 */
    const int32_t *val = ids.ids + ids.len - n_val;
    double bytes = 0;
    int64_t count = 0;
    for (int64_t w = 0; w < 6; w++)
        for (int64_t i = 1; i <= 16; i++, count++) {
            int32_t id = val[w * 16 + i];
            if (id == oj_tokenizer_eot(tok))
                continue;
            char *s = NULL;
            size_t sl = 0;
            assert_int_equal(oj_tokenizer_decode(tok, &id, 1, OJ_DECODE_BYTES, &s, &sl, NULL),
                             OJ_OK);
            bytes += (double)sl;
            free(s);
        }
    double want = vl / log(2.0) * (double)count / bytes;
    assert_true(fabs(bpb - want) <= 1e-12 * want);
    assert_true(bpb > 0 && bpb < vl / log(2.0)); /* more than one byte per token */
    oj_train_result res;
    assert_int_equal(oj_trainer_run(t, &res, NULL), OJ_OK);
    assert_true(isfinite(res.val_bpb));
    oj_trainer_free(t);
    oj_tokens_free(&ids);
    oj_tokenizer_free(tok);
    free(text);
    tt_rmdir(dir);
}

static void test_cuda_never_falls_back(void **state) {
    (void)state;
    char dir[256];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 1000, 100), 0);
    oj_train_config c = tt_config(dir);
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    char out[300];
    snprintf(out, sizeof out, "%s/run", dir);
    oj_train_options o = {.out_dir = out};
    oj_trainer *t = NULL;
    oj_error err = {0};
    oj_status st = oj_trainer_create(&c, &o, &t, &err);
    if (st == OJ_OK) { /* a CUDA build on a GPU machine: it must really be on CUDA */
        assert_int_equal(oj_engine_device(oj_trainer_engine(t)).type, OJ_DEVICE_CUDA);
        oj_trainer_free(t);
    } else {
        assert_int_equal(st, OJ_ERR_DEVICE);
        assert_null(t);
        assert_true(strlen(err.message) > 0);
    }
    tt_rmdir(dir);
}

/* The trainer checks its memory before allocating anything or making the
 * run directory: weights + gradients + optimizer state, and a lower bound
 * of a micro-batch's activations, against budget_bytes. */
static void test_memory_preflight(void **state) {
    (void)state;
    char dir[256], p[400];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(p, sizeof p, "%s/run", dir);
    oj_train_options o = {.out_dir = p};
    struct stat sb;
    /* the state alone does not fit 1 MiB */
    oj_train_config c = tt_config(dir);
    c.budget_bytes = INT64_C(1) << 20;
    oj_trainer *t = NULL;
    oj_error e1 = {0};
    assert_int_equal(oj_trainer_create(&c, &o, &t, &e1), OJ_ERR_CAPACITY);
    assert_null(t);
    assert_non_null(strstr(e1.message, "optimizer state"));
    assert_non_null(strstr(e1.message, "nothing was allocated"));
    assert_int_not_equal(stat(p, &sb), 0); /* no run directory made */
    /* the activations of a huge batch do not fit 64 MiB */
    c.budget_bytes = INT64_C(64) << 20;
    c.batch_size = 1 << 16;
    oj_error e2 = {0};
    assert_int_equal(oj_trainer_create(&c, &o, &t, &e2), OJ_ERR_CAPACITY);
    assert_non_null(strstr(e2.message, "activations of B 65536 x T 16"));
    assert_int_not_equal(stat(p, &sb), 0);
    tt_rmdir(dir);
}

/* Messages that name the cause: a bad value inside a checkpoint's
 * state.json names that file; "no good checkpoint" says why each candidate
 * was refused. */
static void test_checkpoint_config_messages(void **state) {
    (void)state;
    char dir[256], root[400], p[600];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    snprintf(root, sizeof root, "%s/run", dir);
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    int64_t shape[1] = {4};
    oj_tensor *w = oj_zeros(eng, 1, shape, OJ_F32);
    const char *names[1] = {"w"};
    oj_named_tensors sd = {1, names, &w};
    assert_int_equal(oj_checkpoint_save(root, 3, &sd, NULL, "{\"config\": {\"n_embd\": 99999999}}",
                                        0, NULL), OJ_OK);
    oj_train_config c;
    oj_error e1 = {0};
    assert_int_not_equal(oj_train_config_from_checkpoint(root, &c, &e1), OJ_OK);
    snprintf(p, sizeof p, "%s/ckpt-000003/state.json", root);
    if (!strstr(e1.message, p) || !strstr(e1.message, "n_embd"))
        fail_msg("'%s' names neither %s nor n_embd", e1.message, p);
    assert_int_equal(oj_checkpoint_save(root, 6, &sd, NULL, "{\"config\": {}}", 0, NULL), OJ_OK);
    /* both checkpoints damaged: each reason is given; the status is the
     * newest one's (the changed model.safetensors: corrupt) */
    snprintf(p, sizeof p, "%s/ckpt-000006/model.safetensors", root);
    FILE *f = fopen(p, "r+b");
    fseek(f, 20, SEEK_SET);
    fputc('#', f);
    fclose(f);
    snprintf(p, sizeof p, "%s/ckpt-000003/manifest.json", root);
    unlink(p);
    oj_error e2 = {0};
    assert_int_equal(oj_train_config_from_checkpoint(root, &c, &e2), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e2.message, "no good checkpoint found"));
    assert_non_null(strstr(e2.message, "ckpt-000006 refused:"));
    assert_non_null(strstr(e2.message, "model.safetensors"));
    assert_non_null(strstr(e2.message, "ckpt-000003 refused:"));
    assert_non_null(strstr(e2.message, "manifest.json"));
    oj_release(w);
    oj_engine_free(eng);
    tt_rmdir(dir);
}

/* ---- the `dtype` key */

/* --------------------------------------------------------------- trainer */

/* The `dtype` key: "bf16" and "f16" parse, anything else is refused naming
 * the key and the choices; an out-of-range enum set from C is refused by
 * oj_train_config_check instead of running as f16. */
static void test_train_dtype_key(void **state) {
    (void)state;
    oj_train_config c = oj_train_config_default();
    assert_int_equal(c.dtype, OJ_TRAIN_F32);
    oj_error err = {0};
    assert_int_equal(oj_train_config_set(&c, "dtype=bf16", &err), OJ_OK);
    assert_int_equal(c.dtype, OJ_TRAIN_BF16);
    assert_int_equal(oj_train_config_set(&c, "dtype=f16", &err), OJ_OK);
    assert_int_equal(c.dtype, OJ_TRAIN_F16);
    const char *bad[] = {"dtype=BF16", "dtype=f64", "dtype=", "dtype=bf16 ", "dtype=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        oj_error e2 = {0};
        assert_int_not_equal(oj_train_config_set(&c, bad[i], &e2), OJ_OK);
        if (!strstr(e2.message, "dtype") || !strstr(e2.message, "bf16"))
            fail_msg("%s: %s", bad[i], e2.message);
        assert_int_equal(c.dtype, OJ_TRAIN_F16); /* unchanged */
    }
    assert_int_equal(oj_train_config_apply_json(&c, "{\"dtype\": 1}", &err) != OJ_OK, true);
    char dir[256];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    oj_train_config t = tt_config(dir);
    t.dtype = (oj_train_dtype)7;
    oj_error e3 = {0};
    assert_int_equal(oj_train_config_check(&t, &e3), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e3.message, "dtype"));
    t.dtype = (oj_train_dtype)-1;
    oj_error e4 = {0};
    assert_int_equal(oj_train_config_check(&t, &e4), OJ_ERR_INVALID_ARGUMENT);
    tt_rmdir(dir);
}

// test: the data-parallel keys zero (0 or 1) and dist_timeout (> 0 seconds)
static void test_dist_keys(void **state) {
    (void)state;
    oj_train_config c = oj_train_config_default();
    assert_int_equal(c.zero, 0);
    assert_true(c.dist_timeout == 300);
    assert_int_equal(c.dist_bucket_bytes, 64 << 20);
    oj_error e1 = {0};
    assert_int_equal(oj_train_config_set(&c, "dist_bucket_bytes=0", &e1), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e1.message, "dist_bucket_bytes"));
    oj_error err = {0};
    assert_int_equal(oj_train_config_set(&c, "zero=1", &err), OJ_OK);
    assert_int_equal(c.zero, 1);
    assert_int_equal(oj_train_config_set(&c, "dist_timeout=2.5", &err), OJ_OK);
    assert_true(c.dist_timeout == 2.5);
    oj_error e2 = {0};
    assert_int_equal(oj_train_config_set(&c, "zero=2", &e2), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e2.message, "zero"));
    assert_int_equal(c.zero, 1); /* unchanged */
    char dir[256];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    oj_train_config t = tt_config(dir);
    assert_int_equal(oj_train_config_set(&t, "dist_timeout=0", &err), OJ_OK);
    oj_error e3 = {0};
    assert_int_equal(oj_train_config_check(&t, &e3), OJ_ERR_INVALID_ARGUMENT);
    if (!strstr(e3.message, "dist_timeout") || !strstr(e3.message, "> 0"))
        fail_msg("%s", e3.message);
    tt_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dist_keys),
        cmocka_unit_test(test_defaults_round_trip), cmocka_unit_test(test_set_values),
        cmocka_unit_test(test_json),                cmocka_unit_test(test_check_and_model),
        cmocka_unit_test(test_runs),                cmocka_unit_test(test_bits_per_byte),
        cmocka_unit_test(test_cuda_never_falls_back),
        cmocka_unit_test(test_memory_preflight),
        cmocka_unit_test(test_checkpoint_config_messages),
        cmocka_unit_test(test_train_dtype_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
