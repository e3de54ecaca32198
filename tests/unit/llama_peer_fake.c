/* A stand-in for node-llama-cpp 3.21.1's libllama in the llama_peer tests
 * (cmake/llama_peer.cmake). It exports the names bench/quant/llama_peer.c
 * looks up, built three ways: FAKE_PARTIAL exports only the two version
 * functions; FAKE_OLD says it is another release (llama_version
 * "0.3.0-dev"); FAKE_SHIFTED has the right version strings but default
 * parameters that do not read back as release 0.4.0-dev's (all zero, as a
 * library whose struct layout moved would give). llama_peer must refuse
 * each before calling anything else: every other function aborts. */
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
#else
struct fake_model_params llama_model_default_params(void) { abort(); }
struct fake_context_params llama_context_default_params(void) { abort(); }
#endif
#define NOT_CALLED(name) void name(void); void name(void) { abort(); }
NOT_CALLED(llama_log_set)
NOT_CALLED(ggml_backend_load_all_from_path)
NOT_CALLED(ggml_backend_dev_count)
NOT_CALLED(ggml_backend_dev_get)
NOT_CALLED(ggml_backend_dev_type)
NOT_CALLED(ggml_backend_dev_description)
NOT_CALLED(llama_backend_init)
NOT_CALLED(llama_backend_free)
NOT_CALLED(llama_supports_gpu_offload)
NOT_CALLED(llama_model_load_from_file)
NOT_CALLED(llama_model_free)
NOT_CALLED(llama_model_get_vocab)
NOT_CALLED(llama_vocab_n_tokens)
NOT_CALLED(llama_init_from_model)
NOT_CALLED(llama_free)
NOT_CALLED(llama_get_memory)
NOT_CALLED(llama_memory_clear)
NOT_CALLED(llama_batch_get_one)
NOT_CALLED(llama_decode)
NOT_CALLED(llama_get_logits_ith)
#endif
