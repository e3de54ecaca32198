// test: GPT models through GGUF files in llama.cpp's layout: gpt2 and
// llama (GQA, untied head) saved f32 and quantized (q8_0, q4_0, q4_1) load
// back with bit-identical logits (fp8, which has no ggml type, is refused
// by name); f16 and bf16 models keep their matrices' dtype with 1-D
// tensors in F32; the file holds llama.cpp's names, dims
// {in, out}, Conv1D weights transposed and llama's q/k rows in the
// interleaved rotary order (checked against the converter's reshape
// formula); bad files are refused naming the key or tensor
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/fs.h"
#include "core/internal.h"
#include "ojas/gguf.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ojas-test-gpt-gguf-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return oj__rmtree(tmpdir, NULL) == OJ_OK ? 0 : -1;
}

static oj_gpt_config config(bool llama) {
    oj_gpt_config c;
    if (!llama) {
        assert_true(oj_gpt_preset("gpt2-tiny", &c));
    } else {
        c = (oj_gpt_config){.family = OJ_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2,
                            .n_embd = 64, .mlp_hidden = 96, .norm_eps = 1e-6,
                            .rope_theta = 500000.0, .init_std = 0.1, .untied_head = true};
    }
    c.vocab_size = 80;
    c.block_size = 32;
    c.init_std = 0.1;
    return c;
}

static float *logits_of(oj_gpt *m, size_t *n) {
    oj_engine *eng = oj_gpt_engine(m);
    int32_t ids[12] = {1, 5, 9, 2, 77, 3, 3, 40, 12, 0, 79, 8};
    oj_scope_begin(eng);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *idx = oj_from_host(eng, 2, (int64_t[]){1, 12}, OJ_I32, ids, sizeof ids);
    oj_tensor *l = oj_gpt_forward(m, idx);
    assert_non_null(l);
    *n = (size_t)oj_numel(l);
    float *out = malloc(sizeof(float) * *n);
    assert_int_equal(oj_to_host(l, out, sizeof(float) * *n), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    oj_scope_end(eng);
    return out;
}

static void round_trip(bool llama, int qt /* -1: f32 */) {
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    oj_gpt_config c = config(llama);
    if (qt == OJ_Q4_K) { /* q4_k's rows are super-blocks of 256 */
        c.n_embd = 256;
        c.mlp_hidden = 512;
    }
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 9, &m), OJ_OK);
    if (qt >= 0) assert_int_equal(oj_gpt_quantize(m, (oj_qtype)qt), OJ_OK);
    char path[300];
    snprintf(path, sizeof path, "%s/%s-%d.gguf", tmpdir, llama ? "llama" : "gpt2", qt);
    oj_error err = {0};
    if (oj_gpt_save_gguf(m, NULL, path, "tiny", &err) != OJ_OK) fail_msg("%s", err.message);
    oj_gpt *b = NULL;
    if (oj_gpt_load_gguf(eng, path, &b, &err) != OJ_OK) fail_msg("%s", err.message);
    const oj_gpt_config *bc = oj_gpt_get_config(b);
    assert_int_equal(bc->family, c.family);
    assert_int_equal(bc->vocab_size, 80);
    assert_int_equal(bc->n_kv_head, c.n_kv_head);
    assert_int_equal(bc->untied_head, c.untied_head);
    assert_true(bc->norm_eps == (double)(float)c.norm_eps);
    assert_int_equal(oj_gpt_quantized_type(b), qt >= 0 ? qt : OJ_QTYPE_COUNT);
    size_t na, nb;
    float *la = logits_of(m, &na), *lb = logits_of(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(la, lb, sizeof(float) * na);
    free(la);
    free(lb);

    /* the file in llama.cpp's layout */
    oj_gguf *g = NULL;
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
    int64_t ai = oj_gguf_find_key(g, "general.architecture");
    assert_string_equal(oj_gguf_kv_str(g, ai, NULL), llama ? "llama" : "gpt2");
    int64_t v;
    assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "general.file_type"), &v));
    assert_int_equal(v, qt < 0 ? 0 : qt == 0 ? 7 : qt == 1 ? 2 : qt == 2 ? 3 : 14);
    int64_t ti = oj_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    assert_true(ti >= 0);
    assert_int_equal(oj_gguf_tensor_dims(g, ti)[0], c.mlp_hidden); /* {in, out} */
    assert_int_equal(oj_gguf_tensor_dims(g, ti)[1], c.n_embd);
    assert_int_equal(oj_gguf_tensor_type(g, ti), qt < 0 ? OJ_GGML_F32 : oj_qtype_to_ggml((oj_qtype)qt));
    ti = oj_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    assert_int_equal(oj_gguf_tensor_type(g, ti), OJ_GGML_F32);
    assert_true(oj_gguf_find_tensor(g, "output.weight") >= 0);
    if (qt < 0) {
        oj_named_tensors sd = oj_gpt_state_dict(m);
        if (llama) {
            /* attn_k: convert_hf_to_gguf's permute, w.reshape(Hkv, 2, D/2, C)
             * .swapaxes(1, 2): file row h*D + 2i + j = HF row h*D + j*D/2 + i */
            const int64_t D = 16, C = 64;
            int64_t pi = -1;
            for (int64_t i = 0; i < sd.n; i++)
                if (strcmp(sd.names[i], "model.layers.1.self_attn.k_proj.weight") == 0) pi = i;
            assert_true(pi >= 0);
            float hf[32 * 64];
            assert_int_equal(oj_to_host(sd.tensors[pi], hf, sizeof hf), OJ_OK);
            const float *file = oj_gguf_tensor_data(g, oj_gguf_find_tensor(g, "blk.1.attn_k.weight"), NULL);
            for (int64_t h = 0; h < 2; h++)
                for (int64_t i = 0; i < D / 2; i++)
                    for (int64_t j = 0; j < 2; j++)
                        assert_memory_equal(file + (h * D + 2 * i + j) * C,
                                            hf + (h * D + j * (D / 2) + i) * C, sizeof(float) * C);
        } else {
            /* attn_qkv: HF Conv1D [C, 3C] stored transposed, [3C, C] */
            int64_t pi = -1;
            for (int64_t i = 0; i < sd.n; i++)
                if (strcmp(sd.names[i], "transformer.h.0.attn.c_attn.weight") == 0) pi = i;
            assert_true(pi >= 0);
            static float hf[64 * 192];
            assert_int_equal(oj_to_host(sd.tensors[pi], hf, sizeof hf), OJ_OK);
            ti = oj_gguf_find_tensor(g, "blk.0.attn_qkv.weight");
            assert_int_equal(oj_gguf_tensor_dims(g, ti)[0], 64);
            assert_int_equal(oj_gguf_tensor_dims(g, ti)[1], 192);
            const float *file = oj_gguf_tensor_data(g, ti, NULL);
            for (int r = 0; r < 192; r++)
                for (int k = 0; k < 64; k++) assert_true(file[r * 64 + k] == hf[k * 192 + r]);
        }
    }
    oj_gguf_close(g);
    oj_gpt_free(b);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_gpt2_round_trips(void **state) {
    (void)state;
    for (int qt = -1; qt <= OJ_Q4_K; qt++) round_trip(false, qt); /* ggml's types */
}

static void test_llama_round_trips(void **state) {
    (void)state;
    for (int qt = -1; qt <= OJ_Q4_K; qt++) round_trip(true, qt);
}

/* fp8 weights have no ggml type: saving refuses them by name, the file
 * never written. */
static void test_fp8_refused(void **state) {
    (void)state;
    oj_engine_config ec = oj_engine_config_default();
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(&ec, &eng, NULL), OJ_OK);
    oj_gpt_config c;
    assert_true(oj_gpt_preset("gpt2-tiny", &c));
    c.vocab_size = 80;
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 9, &m), OJ_OK);
    assert_int_equal(oj_gpt_quantize(m, OJ_FP8_E4M3), OJ_OK);
    char path[300];
    snprintf(path, sizeof path, "%s/fp8.gguf", tmpdir);
    oj_error err = {0};
    assert_int_equal(oj_gpt_save_gguf(m, NULL, path, "tiny", &err), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "fp8 weights have no GGUF (ggml) type"));
    assert_int_equal(access(path, F_OK), -1);
    oj_gpt_free(m);
    oj_engine_free(eng);
}

/* f16 and bf16 models: the matrices in their dtype, the 1-D tensors
 * (norms, biases) in F32 holding the same values (llama.cpp's converter's
 * layout: ggml's CUDA backend reads 1-D F16 operands of f32 activations
 * as f32), general.file_type 1 / 32; the file loads back to the same
 * logits as the model's weights widened to f32. */
static void half_file(oj_dtype dt) {
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    oj_gpt_config c = config(false);
    oj_gpt *m = NULL, *m32 = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 9, &m), OJ_OK);
    assert_int_equal(oj_gpt_to_dtype(m, dt), OJ_OK);
    char path[300];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, oj_dtype_name(dt));
    oj_error err = {0};
    if (oj_gpt_save_gguf(m, NULL, path, "tiny", &err) != OJ_OK) fail_msg("%s", err.message);
    oj_gguf *g = NULL;
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
    int64_t v;
    assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "general.file_type"), &v));
    assert_int_equal(v, dt == OJ_F16 ? 1 : 32);
    const uint32_t gt = dt == OJ_F16 ? OJ_GGML_F16 : OJ_GGML_BF16;
    assert_int_equal(oj_gguf_tensor_type(g, oj_gguf_find_tensor(g, "blk.1.ffn_down.weight")), gt);
    assert_int_equal(oj_gguf_tensor_type(g, oj_gguf_find_tensor(g, "token_embd.weight")), gt);
    const char *one_d[] = {"blk.0.attn_norm.weight", "blk.0.attn_qkv.bias", "output_norm.bias"};
    for (int i = 0; i < 3; i++) {
        int64_t ti = oj_gguf_find_tensor(g, one_d[i]);
        assert_true(ti >= 0);
        assert_int_equal(oj_gguf_tensor_type(g, ti), OJ_GGML_F32);
    }
    /* ln_1's weight: the model's values widened */
    oj_named_tensors sd = oj_gpt_state_dict(m);
    int64_t pi = -1;
    for (int64_t i = 0; i < sd.n; i++)
        if (strcmp(sd.names[i], "transformer.h.0.ln_1.weight") == 0) pi = i;
    assert_true(pi >= 0);
    float want[64];
    oj_tensor *w32 = oj_cast(sd.tensors[pi], OJ_F32);
    assert_int_equal(oj_to_host(w32, want, sizeof want), OJ_OK);
    oj_release(w32);
    const float *file = oj_gguf_tensor_data(g, oj_gguf_find_tensor(g, "blk.0.attn_norm.weight"), NULL);
    assert_memory_equal(file, want, sizeof want);
    oj_gguf_close(g);
    /* loads back: the logits of the same weights in f32 */
    oj_gpt *b = NULL;
    if (oj_gpt_load_gguf(eng, path, &b, &err) != OJ_OK) fail_msg("%s", err.message);
    assert_int_equal(oj_gpt_create(eng, &c, 9, &m32), OJ_OK);
    assert_int_equal(oj_gpt_to_dtype(m32, dt), OJ_OK);
    assert_int_equal(oj_gpt_to_dtype(m32, OJ_F32), OJ_OK);
    size_t na, nb;
    float *la = logits_of(m32, &na), *lb = logits_of(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(la, lb, sizeof(float) * na);
    free(la);
    free(lb);
    oj_gpt_free(b);
    oj_gpt_free(m32);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_half_files(void **state) {
    (void)state;
    half_file(OJ_F16);
    half_file(OJ_BF16);
}

/* A copy of src with tensor `drop` left out and key `key` set to u32 value
 * (when key is not NULL). */
static void rewrite(const char *src, const char *dst, const char *drop, const char *key,
                    uint32_t value, uint32_t retype) {
    oj_gguf *g = NULL;
    oj_error err = {0};
    assert_int_equal(oj_gguf_open(src, &g, &err), OJ_OK);
    oj_gguf_writer *w = oj_gguf_writer_new();
    for (int64_t i = 0; i < oj_gguf_kv_count(g); i++) {
        const char *k = oj_gguf_kv_key(g, i);
        if (key && strcmp(k, key) == 0) continue;
        if (oj_gguf_kv_type(g, i) == OJ_GGUF_STRING) {
            assert_int_equal(oj_gguf_writer_set_str(w, k, oj_gguf_kv_str(g, i, NULL), &err), 0);
        } else {
            uint8_t raw[8];
            uint64_t u;
            double d;
            if (oj_gguf_kv_uint(g, i, &u)) {
                uint32_t x = (uint32_t)u;
                memcpy(raw, &x, 4);
            } else {
                assert_true(oj_gguf_kv_float(g, i, &d));
                float f = (float)d;
                memcpy(raw, &f, 4);
            }
            assert_int_equal(oj_gguf_writer_set(w, k, oj_gguf_kv_type(g, i), raw, &err), 0);
        }
    }
    if (key) {
        if (strcmp(key, "general.architecture") == 0)
            assert_int_equal(oj_gguf_writer_set_str(w, key, "mamba", &err), 0);
        else
            assert_int_equal(oj_gguf_writer_set(w, key, OJ_GGUF_UINT32, &value, &err), 0);
    }
    for (int64_t i = 0; i < oj_gguf_tensor_count(g); i++) {
        const char *n = oj_gguf_tensor_name(g, i);
        if (drop && strcmp(n, drop) == 0) continue;
        size_t nb;
        const void *d = oj_gguf_tensor_data(g, i, &nb);
        uint32_t t = oj_gguf_tensor_type(g, i);
        if (retype && strcmp(n, "blk.0.ffn_up.weight") == 0) t = retype; /* same bytes per row */
        assert_int_equal(oj_gguf_writer_add_tensor(w, n, t, oj_gguf_tensor_ndims(g, i),
                                                   oj_gguf_tensor_dims(g, i), d, nb, &err), 0);
    }
    assert_int_equal(oj_gguf_writer_write(w, dst, &err), OJ_OK);
    oj_gguf_writer_free(w);
    oj_gguf_close(g);
}

static void expect_refused(oj_engine *eng, const char *path, oj_status st, const char *needle) {
    oj_gpt *m = (oj_gpt *)1;
    oj_error err = {0};
    assert_int_equal(oj_gpt_load_gguf(eng, path, &m, &err), st);
    assert_null(m);
    if (strstr(err.message, needle) == NULL)
        fail_msg("message \"%s\" does not name \"%s\"", err.message, needle);
    oj_clear_error(eng);
}

static void test_refusals_named(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    oj_gpt_config c = config(false);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/good.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", tmpdir);
    oj_error err = {0};
    assert_int_equal(oj_gpt_save_gguf(m, NULL, good, NULL, &err), OJ_OK);
    oj_gpt_free(m);
    rewrite(good, bad, "blk.1.ffn_up.bias", NULL, 0, 0);
    expect_refused(eng, bad, OJ_ERR_CORRUPT, "tensor blk.1.ffn_up.bias is missing");
    rewrite(good, bad, NULL, "gpt2.block_count", 3, 0);
    expect_refused(eng, bad, OJ_ERR_CORRUPT, "tensor blk.2.attn_norm.weight is missing");
    rewrite(good, bad, NULL, "gpt2.embedding_length", 32, 0);
    expect_refused(eng, bad, OJ_ERR_SHAPE, "tensor token_embd.weight has dims {64, 80}, the config gives [80, 32]");
    rewrite(good, bad, "", "general.architecture", 0, 0);
    expect_refused(eng, bad, OJ_ERR_UNSUPPORTED, "architecture \"mamba\" is not supported");
    rewrite(good, bad, "gpt2.context_length", "gpt2.context_length", 0, 0);
    expect_refused(eng, bad, OJ_ERR_CORRUPT, "gpt2.context_length is not a positive integer");
    rewrite(good, bad, NULL, NULL, 0, 26 /* I32 */);
    expect_refused(eng, bad, OJ_ERR_UNSUPPORTED, "tensor blk.0.ffn_up.weight is I32");
    /* nanolab has no GGUF layout */
    assert_true(oj_gpt_preset("nanolab-tiny", &c));
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
    err = (oj_error){0};
    assert_int_equal(oj_gpt_save_gguf(m, NULL, bad, NULL, &err), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "only gpt2 and plain llama"));
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* A model of config(llama) (seed 1) saved as GGUF to path. */
static void save_model(oj_engine *eng, bool llama, const char *path) {
    oj_gpt_config c = config(llama);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
    oj_error err = {0};
    assert_int_equal(oj_gpt_save_gguf(m, NULL, path, NULL, &err), OJ_OK);
    oj_gpt_free(m);
}

/* A block_count below the file's blocks: refused naming the first tensor
 * the model would leave unread, not loaded as a shallower model. */
static void test_unused_tensors_refused(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/unused.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/unused-bad.gguf", tmpdir);
    for (int llama = 0; llama < 2; llama++) {
        save_model(eng, llama, good);
        rewrite(good, bad, NULL, llama ? "llama.block_count" : "gpt2.block_count", 1, 0);
        expect_refused(eng, bad, OJ_ERR_CORRUPT,
                       "tensor \"blk.1.attn_norm.weight\" is not used by the");
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* Metadata the loader cannot honour is refused naming the key:
 * rope.dimension_count other than the head dim (partial rotary), a
 * vocab_size other than token_embd.weight's rows, expert_count > 0;
 * expert_count 0 loads, and a sliding_window caps the context. */
static void test_metadata_checked(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/meta.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/meta-bad.gguf", tmpdir);
    save_model(eng, true, good); /* head dim 64 / 4 = 16 */
    rewrite(good, bad, NULL, "llama.rope.dimension_count", 8, 0);
    expect_refused(eng, bad, OJ_ERR_UNSUPPORTED,
                   "llama.rope.dimension_count is 8, not the head dim 16");
    rewrite(good, bad, NULL, "llama.rope.dimension_count", 0, 0);
    expect_refused(eng, bad, OJ_ERR_UNSUPPORTED, "llama.rope.dimension_count is 0");
    rewrite(good, bad, NULL, "llama.vocab_size", 81, 0);
    expect_refused(eng, bad, OJ_ERR_CORRUPT,
                   "llama.vocab_size is 81, but token_embd.weight has 80 rows");
    rewrite(good, bad, NULL, "llama.expert_count", 4, 0);
    expect_refused(eng, bad, OJ_ERR_UNSUPPORTED, "llama.expert_count is 4");
    oj_gpt *m = NULL;
    oj_error err = {0};
    rewrite(good, bad, NULL, "llama.expert_count", 0, 0);
    assert_int_equal(oj_gpt_load_gguf(eng, bad, &m, &err), OJ_OK);
    oj_gpt_free(m);
    rewrite(good, bad, NULL, "llama.attention.sliding_window", 16, 0);
    assert_int_equal(oj_gpt_load_gguf(eng, bad, &m, &err), OJ_OK);
    assert_int_equal(oj_gpt_get_config(m)->block_size, 16);
    oj_gpt_free(m);
    save_model(eng, false, good);
    rewrite(good, bad, NULL, "gpt2.vocab_size", 79, 0);
    expect_refused(eng, bad, OJ_ERR_CORRUPT, "gpt2.vocab_size is 79");
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* The tokenizer round trip: a BPE tokenizer trained here, saved as GPT-2
 * files, written into a GGUF file (oj_gguf_add_gpt2_tokenizer, padded to a
 * larger vocab) and read back (oj_gguf_tokenizer) is the same tokenizer:
 * every id's bytes, eot, and the ids of a text with a special token. */
static void test_tokenizer_round_trip(void **state) {
    (void)state;
    static const char corpus[] = "In the beginning God created the heaven and the earth. And the "
                                 "earth was without form, and void; and darkness was upon the face "
                                 "of the deep. And God said, Let there be light: and there was light.";
    const char *texts[] = {corpus, corpus, corpus};
    const size_t lens[] = {sizeof corpus - 1, sizeof corpus - 1, sizeof corpus - 1};
    oj_bpe_train_config bc = oj_bpe_train_config_default();
    bc.vocab_size = 300;
    bc.threads = 1;
    oj_tokenizer *a = NULL, *b = NULL;
    oj_error err = {0};
    assert_int_equal(oj_bpe_train(&bc, 3, texts, lens, &a, &err), OJ_OK);
    char dir[300], path[300];
    snprintf(dir, sizeof dir, "%s/tok", tmpdir);
    snprintf(path, sizeof path, "%s/tok.gguf", tmpdir);
    if (oj_tokenizer_save(a, dir, &err) != OJ_OK) fail_msg("%s", err.message);
    oj_gguf_writer *w = oj_gguf_writer_new();
    if (oj_gguf_add_gpt2_tokenizer(w, dir, 320, &err) != OJ_OK) fail_msg("%s", err.message);
    assert_int_equal(oj_gguf_writer_write(w, path, &err), OJ_OK);
    oj_gguf_writer_free(w);
    oj_gguf *g = NULL;
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
    if (oj_gguf_tokenizer(g, path, &b, &err) != OJ_OK) fail_msg("%s", err.message);
    oj_gguf_close(g);
    assert_int_equal(oj_tokenizer_vocab_size(b), oj_tokenizer_vocab_size(a));
    assert_int_equal(oj_tokenizer_eot(b), oj_tokenizer_eot(a));
    assert_true(oj_tokenizer_eot(a) >= 0);
    for (int32_t id = 0; id < oj_tokenizer_vocab_size(a); id++) {
        size_t la, lb;
        const uint8_t *ta = oj_tokenizer_token_bytes(a, id, &la), *tb = oj_tokenizer_token_bytes(b, id, &lb);
        assert_non_null(ta);
        assert_non_null(tb);
        assert_int_equal(la, lb);
        assert_memory_equal(ta, tb, la);
    }
    static const char text[] = "And the earth was light.<|endoftext|>In the deep, void!";
    oj_tokens ia = {0}, ib = {0};
    assert_int_equal(oj_tokenizer_encode(a, text, sizeof text - 1, OJ_ENCODE_ALLOW_SPECIAL, &ia, &err), OJ_OK);
    assert_int_equal(oj_tokenizer_encode(b, text, sizeof text - 1, OJ_ENCODE_ALLOW_SPECIAL, &ib, &err), OJ_OK);
    assert_int_equal(ia.len, ib.len);
    assert_memory_equal(ia.ids, ib.ids, ia.len * sizeof *ia.ids);
    assert_true(ia.len < sizeof text - 10); /* merges applied */
    oj_tokens_free(&ia);
    oj_tokens_free(&ib);
    oj_tokenizer_free(b);
    oj_tokenizer_free(a);

    /* a file without a tokenizer, and another tokenizer model, refused by name */
    w = oj_gguf_writer_new();
    assert_int_equal(oj_gguf_writer_set_str(w, "tokenizer.ggml.model", "no_vocab", &err), OJ_OK);
    assert_int_equal(oj_gguf_writer_write(w, path, &err), OJ_OK);
    oj_gguf_writer_free(w);
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
    err = (oj_error){0};
    assert_int_equal(oj_gguf_tokenizer(g, path, &b, &err), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(err.message, "no tokenizer (tokenizer.ggml.model is \"no_vocab\")"));
    assert_null(b);
    oj_gguf_close(g);
    w = oj_gguf_writer_new();
    assert_int_equal(oj_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", &err), OJ_OK);
    assert_int_equal(oj_gguf_writer_write(w, path, &err), OJ_OK);
    oj_gguf_writer_free(w);
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
    err = (oj_error){0};
    assert_int_equal(oj_gguf_tokenizer(g, path, &b, &err), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "tokenizer.ggml.model \"llama\": only \"gpt2\""));
    oj_gguf_close(g);
}

/* A GGUF file at path with base's tokens and merges (byte-level BPE), the
 * pre-tokenizer `pre` (NULL: none) and, each when >= 0: add_bos_token,
 * add_eos_token (bools; 2: add_bos_token as a uint32, a wrong type), the
 * BOS id 5 and EOS id 7. */
static void write_tok_variant(const char *path, const oj_gguf *base, const char *pre, int add_bos,
                              int add_eos, bool ids) {
    oj_error err = {0};
    oj_gguf_writer *w = oj_gguf_writer_new();
    int64_t ti = oj_gguf_find_key(base, "tokenizer.ggml.tokens");
    int64_t mi = oj_gguf_find_key(base, "tokenizer.ggml.merges");
    const int64_t nt = oj_gguf_kv_array_len(base, ti), nm = oj_gguf_kv_array_len(base, mi);
    const char **t = calloc((size_t)nt, sizeof *t), **m = calloc((size_t)nm, sizeof *m);
    for (int64_t i = 0; i < nt; i++) t[i] = oj_gguf_kv_array_str(base, ti, i, NULL);
    for (int64_t i = 0; i < nm; i++) m[i] = oj_gguf_kv_array_str(base, mi, i, NULL);
    assert_int_equal(oj_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", &err), OJ_OK);
    assert_int_equal(oj_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", nt, t, &err), OJ_OK);
    assert_int_equal(oj_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", nm, m, &err), OJ_OK);
    free(t);
    free(m);
    if (pre) assert_int_equal(oj_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, &err), OJ_OK);
    const uint8_t yes = 1, no = 0;
    const uint32_t two = 1, bos = 5, eos = 7;
    if (add_bos == 2)
        assert_int_equal(oj_gguf_writer_set(w, "tokenizer.ggml.add_bos_token", OJ_GGUF_UINT32, &two, &err), OJ_OK);
    else if (add_bos >= 0)
        assert_int_equal(oj_gguf_writer_set(w, "tokenizer.ggml.add_bos_token", OJ_GGUF_BOOL,
                                            add_bos ? &yes : &no, &err), OJ_OK);
    if (add_eos >= 0)
        assert_int_equal(oj_gguf_writer_set(w, "tokenizer.ggml.add_eos_token", OJ_GGUF_BOOL,
                                            add_eos ? &yes : &no, &err), OJ_OK);
    if (ids) {
        assert_int_equal(oj_gguf_writer_set(w, "tokenizer.ggml.bos_token_id", OJ_GGUF_UINT32, &bos, &err), OJ_OK);
        assert_int_equal(oj_gguf_writer_set(w, "tokenizer.ggml.eos_token_id", OJ_GGUF_UINT32, &eos, &err), OJ_OK);
    }
    assert_int_equal(oj_gguf_writer_write(w, path, &err), OJ_OK);
    oj_gguf_writer_free(w);
}

/* The BOS / EOS a prompt gets from a GGUF file (oj_tokenizer_template, which
 * `ojas generate -m` and serve put around it), as llama.cpp decides them:
 * add_bos_token / add_eos_token when present, else BOS for the Llama 3
 * pre-tokenizers only; a missing id or a flag of another type refused by
 * name. */
static void test_tokenizer_gguf_bos(void **state) {
    (void)state;
    static const char corpus[] = "In the beginning God created the heaven and the earth.";
    const char *texts[] = {corpus};
    const size_t lens[] = {sizeof corpus - 1};
    oj_bpe_train_config bc = oj_bpe_train_config_default();
    bc.vocab_size = 280;
    bc.threads = 1;
    oj_tokenizer *a = NULL, *b = NULL;
    oj_error err = {0};
    assert_int_equal(oj_bpe_train(&bc, 1, texts, lens, &a, &err), OJ_OK);
    char dir[300], base_path[300], path[300];
    snprintf(dir, sizeof dir, "%s/tokb", tmpdir);
    snprintf(base_path, sizeof base_path, "%s/tokb.gguf", tmpdir);
    snprintf(path, sizeof path, "%s/tokv.gguf", tmpdir);
    if (oj_tokenizer_save(a, dir, &err) != OJ_OK) fail_msg("%s", err.message);
    oj_tokenizer_free(a);
    oj_gguf_writer *w = oj_gguf_writer_new();
    if (oj_gguf_add_gpt2_tokenizer(w, dir, 280, &err) != OJ_OK) fail_msg("%s", err.message);
    assert_int_equal(oj_gguf_writer_write(w, base_path, &err), OJ_OK);
    oj_gguf_writer_free(w);
    oj_gguf *base = NULL, *g = NULL;
    assert_int_equal(oj_gguf_open(base_path, &base, &err), OJ_OK);
    const struct {
        const char *pre;
        int add_bos, add_eos;
        bool ids;
        int32_t want_pre, want_suf; /* -1: none */
        oj_status st;
    } cases[] = {
        {"gpt-2", -1, -1, true, -1, -1, OJ_OK},     /* GPT-2: nothing added */
        {NULL, -1, -1, false, -1, -1, OJ_OK},       /* no pre, no flags */
        {"gpt-2", 1, -1, true, 5, -1, OJ_OK},       /* the flag asks for BOS */
        {"llama-bpe", -1, -1, true, 5, -1, OJ_OK},  /* Llama 3's default */
        {"llama-bpe", 0, -1, true, -1, -1, OJ_OK},  /* the flag wins */
        {"gpt-2", 1, 1, true, 5, 7, OJ_OK},         /* BOS and EOS */
        {"llama-bpe", -1, -1, false, -1, -1, OJ_ERR_CORRUPT}, /* no bos_token_id */
        {"gpt-2", 2, -1, true, -1, -1, OJ_ERR_CORRUPT},       /* not a bool */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        write_tok_variant(path, base, cases[c].pre, cases[c].add_bos, cases[c].add_eos, cases[c].ids);
        assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
        err = (oj_error){0};
        oj_status st = oj_gguf_tokenizer(g, path, &b, &err);
        oj_gguf_close(g);
        if (st != cases[c].st) fail_msg("case %zu: status %d (%s)", c, (int)st, err.message);
        if (st != OJ_OK) {
            assert_null(b);
            assert_non_null(strstr(err.message, cases[c].add_bos == 2 ? "add_bos_token is not a bool"
                                                                      : "bos_token_id is missing"));
            continue;
        }
        const int32_t *p = NULL, *q = NULL;
        size_t np = 0, nq = 0;
        oj_tokenizer_template(b, &p, &np, &q, &nq);
        assert_int_equal(np, cases[c].want_pre >= 0 ? 1 : 0);
        assert_int_equal(nq, cases[c].want_suf >= 0 ? 1 : 0);
        if (np) assert_int_equal(p[0], cases[c].want_pre);
        if (nq) assert_int_equal(q[0], cases[c].want_suf);
        oj_tokenizer_free(b);
        b = NULL;
    }
    oj_gguf_close(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_round_trip),
        cmocka_unit_test(test_tokenizer_gguf_bos),
        cmocka_unit_test(test_gpt2_round_trips),
        cmocka_unit_test(test_fp8_refused),
        cmocka_unit_test(test_half_files),
        cmocka_unit_test(test_llama_round_trips),
        cmocka_unit_test(test_refusals_named),
        cmocka_unit_test(test_unused_tensors_refused),
        cmocka_unit_test(test_metadata_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
