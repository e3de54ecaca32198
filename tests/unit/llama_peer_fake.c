/* A stand-in for node-llama-cpp 3.21.1's libllama in the llama_peer tests
 * (cmake/llama_peer.cmake). It exports the names bench/quant/llama_peer.c
 * looks up, built three ways: FAKE_PARTIAL exports only the two version
 * functions; FAKE_OLD says it is another release (llama_version
 * "0.3.0-dev"); FAKE_SHIFTED has the right version strings but default
 * parameters that do not read back as release 0.4.0-dev's (all zero, as a
 * library whose struct layout moved would give). llama_peer must refuse
 * each before calling anything else: every other function aborts.
 * FAKE_CTX passes those checks and loads a stand-in model of 100 tokens
 * whose training context is 256 (llama_model_n_ctx_train): llama_peer must
 * refuse a prompt + NEW beyond it before it makes a context
 * (llama_init_from_model aborts). */
#include <stdlib.h>
#include <string.h>

const char *llama_version(void);
const char *ggml_commit(void);

#ifdef FAKE_OLD
const char *llama_version(void) { return "0.3.0-dev"; }
#else
const char *llama_version(void) { return "0.4.0-dev"; }
#endif
const char *ggml_commit(void) { return "5b4ebc5"; }

#ifndef FAKE_PARTIAL
/* The sizes of llama_model_params (80) and llama_context_params (160) of
 * that release, so that the by-value return writes what the caller holds. */
struct fake_model_params { unsigned char bytes[80]; };
struct fake_context_params { unsigned char bytes[160]; };
struct fake_model_params llama_model_default_params(void);
struct fake_context_params llama_context_default_params(void);
#ifdef FAKE_SHIFTED
struct fake_model_params llama_model_default_params(void) {
    struct fake_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}
struct fake_context_params llama_context_default_params(void) {
    struct fake_context_params p;
    memset(&p, 0, sizeof p);
    return p;
}
#elif defined(FAKE_CTX)
#include <stdint.h>
/* The defaults of release 0.4.0-dev at that release's offsets (the layout
 * asserted in bench/quant/llama_peer.c). */
static void put_i32(unsigned char *b, size_t at, int32_t v) { memcpy(b + at, &v, sizeof v); }
struct fake_model_params llama_model_default_params(void) {
    struct fake_model_params p;
    memset(&p, 0, sizeof p);
    put_i32(p.bytes, 16, -1); // n_gpu_layers
    put_i32(p.bytes, 20, 1);  // split_mode LAYER
    put_i32(p.bytes, 24, -1); // load_mode AUTO
    put_i32(p.bytes, 28, 1);  // lazy_mode AUTO
    p.bytes[74] = 1;          // use_extra_bufts
    return p;
}
struct fake_context_params llama_context_default_params(void) {
    struct fake_context_params p;
    memset(&p, 0, sizeof p);
    put_i32(p.bytes, 0, 512);   // n_ctx
    put_i32(p.bytes, 4, 2048);  // n_batch
    put_i32(p.bytes, 8, 512);   // n_ubatch
    put_i32(p.bytes, 12, 1);    // n_seq_max
    put_i32(p.bytes, 52, -1);   // flash_attn_type AUTO
    put_i32(p.bytes, 104, 1);   // type_k F16
    put_i32(p.bytes, 108, 1);   // type_v F16
    p.bytes[129] = p.bytes[130] = p.bytes[131] = p.bytes[132] = 1; // offload_kqv no_perf op_offload swa_full
    return p;
}
static int fake_model;
void llama_log_set(void *cb, void *user);
void llama_log_set(void *cb, void *user) { (void)cb, (void)user; }
void ggml_backend_load_all_from_path(const char *dir);
void ggml_backend_load_all_from_path(const char *dir) { (void)dir; }
size_t ggml_backend_dev_count(void);
size_t ggml_backend_dev_count(void) { return 0; }
void llama_backend_init(void);
void llama_backend_init(void) {}
void llama_backend_free(void);
void llama_backend_free(void) {}
void *llama_model_load_from_file(const char *path, struct fake_model_params p);
void *llama_model_load_from_file(const char *path, struct fake_model_params p) {
    (void)path, (void)p;
    return &fake_model;
}
void llama_model_free(void *model);
void llama_model_free(void *model) { (void)model; }
void *llama_model_get_vocab(const void *model);
void *llama_model_get_vocab(const void *model) { (void)model; return &fake_model; }
int32_t llama_vocab_n_tokens(const void *vocab);
int32_t llama_vocab_n_tokens(const void *vocab) { (void)vocab; return 100; }
int32_t llama_model_n_ctx_train(const void *model);
int32_t llama_model_n_ctx_train(const void *model) { (void)model; return 256; }
#else
struct fake_model_params llama_model_default_params(void) { abort(); }
struct fake_context_params llama_context_default_params(void) { abort(); }
#endif
#define NOT_CALLED(name) void name(void); void name(void) { abort(); }
#ifndef FAKE_CTX
NOT_CALLED(llama_log_set)
NOT_CALLED(ggml_backend_load_all_from_path)
NOT_CALLED(ggml_backend_dev_count)
NOT_CALLED(llama_backend_init)
NOT_CALLED(llama_backend_free)
NOT_CALLED(llama_model_load_from_file)
NOT_CALLED(llama_model_free)
NOT_CALLED(llama_model_get_vocab)
NOT_CALLED(llama_vocab_n_tokens)
NOT_CALLED(llama_model_n_ctx_train)
#endif
NOT_CALLED(ggml_backend_dev_get)
NOT_CALLED(ggml_backend_dev_type)
NOT_CALLED(ggml_backend_dev_description)
NOT_CALLED(llama_supports_gpu_offload)
NOT_CALLED(llama_init_from_model)
NOT_CALLED(llama_free)
NOT_CALLED(llama_get_memory)
NOT_CALLED(llama_memory_clear)
NOT_CALLED(llama_batch_get_one)
NOT_CALLED(llama_decode)
NOT_CALLED(llama_get_logits_ith)
#endif
