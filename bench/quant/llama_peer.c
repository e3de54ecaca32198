/* The llama.cpp peer of bench_quant_decode, in C, for machines without
 * Node.js: dlopens the prebuilt libllama of npm node-llama-cpp 3.21.1
 * (@node-llama-cpp/linux-x64: bins/linux-x64/libllama.v0.4.0.so, CPU;
 * @node-llama-cpp/linux-x64-cuda: bins/linux-x64-cuda/libllama.cuda.v0.4.0.so,
 * CUDA 13), loads the ggml backends beside it, loads a GGUF file with
 * --gpu-layers layers on the GPU (0: CPU only; -1: all, output included),
 * evaluates the prompt ids as one batch, decodes NEW tokens greedily (the
 * argmax of the logits, lowest id on ties, as llama.cpp's greedy sampler
 * that node-llama-cpp uses at temperature 0) and prints the JSON line of
 * bench/quant/llama_peer.mjs: peer, file, threads, tok_s, tokens, and also
 * device, gpu_layers, repeats. tok_s counts as llama_peer.mjs does: the
 * clock starts once the second token is out (prompt, first token and one
 * decode step excluded), then (NEW - 2) / seconds; with --repeats R the
 * prompt and decode run R times on a cleared KV cache, tok_s is the median
 * and the tokens are the first run's. The context is set as node-llama-cpp
 * sets it for llama_peer.mjs: n_ctx = prompt + NEW + 8 rounded up to 256,
 * n_batch = n_ubatch = prompt length, flash attention "auto", f16 KV cache,
 * weights read through mmap, no lazy loading.
 *
 *   llama_peer --lib LIBLLAMA [--gpu-layers N] [--repeats R] [-v]
 *              FILE.gguf PROMPT_IDS(comma-separated) NEW THREADS
 * NEW is 3 to 2^20 and prompt + NEW must fit the model's training context
 * (llama_model_n_ctx_train). Exit 0 on success, 1 when the library or the
 * model refuses, 2 on bad arguments (each number checked whole, by name) or
 * a prompt + NEW beyond the training context. bench/quant/run_cuda_peer.sh builds and runs it.
 *
 * What is llama.cpp's: the declarations below are copied from llama.h and
 * ggml.h / ggml-backend.h (MIT, the ggml authors) of the llama.cpp release
 * that node-llama-cpp 3.21.1 bundles: node-llama-cpp/llama/gitRelease.bundle,
 * commit 80fb11ac73e66d89eae2c6a91d8a77428fa733ed (release "v0.4.0" in
 * llama.cpp.info.json; llama_version() "0.4.0-dev", ggml_version() "0.23.0",
 * ggml_commit() "5b4ebc5"; llama.h sha256
 * 3d1b18eda626c1b9ecf5bda0798e65b974a8f70f30d56726610633a980cb4160). Only what this
 * program calls is copied. The two parameter structs are passed and returned
 * by value, so their layout must be the library's: the program refuses a
 * library whose version strings differ, or that lacks a symbol it calls, or
 * whose default parameters do not read back as that release's (a shifted
 * layout). To check the copies against the header itself, build with
 *   -DLLAMA_PEER_HEADER -I LLSRC/include -I LLSRC/ggml/include
 * (LLSRC: a clone of the bundle): then llama.h defines the types, every
 * prototype below is a redeclaration the compiler checks against it, and the
 * layout assertions hold for both. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PEER_NAME "llama.cpp (node-llama-cpp 3.21.1)"
#define WANT_LLAMA_VERSION "0.4.0-dev"
#define WANT_GGML_COMMIT "5b4ebc5"

#ifdef LLAMA_PEER_HEADER
#include "llama.h"
#else
/* ---- types copied from llama.h / ggml.h / ggml-backend.h at 80fb11ac ---- */
typedef int32_t llama_pos;
typedef int32_t llama_token;
typedef int32_t llama_seq_id;
struct llama_model;
struct llama_context;
struct llama_vocab;
struct llama_sampler;
struct llama_model_kv_override;
struct llama_model_tensor_buft_override;
struct ggml_tensor;
typedef struct llama_memory_i *llama_memory_t;
typedef struct ggml_backend_device *ggml_backend_dev_t;
typedef bool (*llama_progress_callback)(float progress, void *user_data);
typedef bool (*ggml_backend_sched_eval_callback)(struct ggml_tensor *t, bool ask, void *user_data);
typedef bool (*ggml_abort_callback)(void *data);
enum ggml_log_level {
    GGML_LOG_LEVEL_NONE = 0, GGML_LOG_LEVEL_DEBUG = 1, GGML_LOG_LEVEL_INFO = 2,
    GGML_LOG_LEVEL_WARN = 3, GGML_LOG_LEVEL_ERROR = 4, GGML_LOG_LEVEL_CONT = 5,
};
typedef void (*ggml_log_callback)(enum ggml_log_level level, const char *text, void *user_data);
enum ggml_type { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1 }; /* the two used here */
enum ggml_backend_dev_type {
    GGML_BACKEND_DEVICE_TYPE_CPU, GGML_BACKEND_DEVICE_TYPE_GPU, GGML_BACKEND_DEVICE_TYPE_IGPU,
    GGML_BACKEND_DEVICE_TYPE_ACCEL, GGML_BACKEND_DEVICE_TYPE_META,
};
enum llama_split_mode { LLAMA_SPLIT_MODE_NONE = 0, LLAMA_SPLIT_MODE_LAYER = 1 };
enum llama_load_mode { LLAMA_LOAD_MODE_AUTO = -1, LLAMA_LOAD_MODE_NONE = 0, LLAMA_LOAD_MODE_MMAP = 1 };
enum llama_lazy_mode { LLAMA_LAZY_MODE_OFF = 0, LLAMA_LAZY_MODE_AUTO = 1 };
enum llama_context_type { LLAMA_CONTEXT_TYPE_DEFAULT = 0 };
enum llama_rope_scaling_type { LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED = -1 };
enum llama_pooling_type { LLAMA_POOLING_TYPE_UNSPECIFIED = -1 };
enum llama_attention_type { LLAMA_ATTENTION_TYPE_UNSPECIFIED = -1 };
enum llama_flash_attn_type { LLAMA_FLASH_ATTN_TYPE_AUTO = -1 };

typedef struct llama_batch {
    int32_t n_tokens;
    llama_token *token;
    float *embd;
    llama_pos *pos;
    int32_t *n_seq_id;
    llama_seq_id **seq_id;
    int8_t *logits;
} llama_batch;

struct llama_model_params {
    ggml_backend_dev_t *devices;
    const struct llama_model_tensor_buft_override *tensor_buft_overrides;
    int32_t n_gpu_layers;
    enum llama_split_mode split_mode;
    enum llama_load_mode load_mode;
    enum llama_lazy_mode lazy_mode;
    int32_t main_gpu;
    const float *tensor_split;
    llama_progress_callback progress_callback;
    void *progress_callback_user_data;
    const struct llama_model_kv_override *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
};

struct llama_sampler_seq_config;
struct llama_context_params {
    uint32_t n_ctx, n_batch, n_ubatch, n_seq_max, n_rs_seq, n_outputs_max, n_outputs_max_per_seq;
    int32_t n_threads, n_threads_batch;
    enum llama_context_type ctx_type;
    enum llama_rope_scaling_type rope_scaling_type;
    enum llama_pooling_type pooling_type;
    enum llama_attention_type attention_type;
    enum llama_flash_attn_type flash_attn_type;
    float rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast,
        yarn_beta_slow;
    uint32_t yarn_orig_ctx;
    float defrag_thold;
    ggml_backend_sched_eval_callback cb_eval;
    void *cb_eval_user_data;
    enum ggml_type type_k, type_v;
    ggml_abort_callback abort_callback;
    void *abort_callback_data;
    bool embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified;
    struct llama_sampler_seq_config *samplers;
    size_t n_samplers;
    struct llama_context *ctx_other;
};
#endif /* LLAMA_PEER_HEADER */

/* ---- prototypes copied from the same headers (redeclarations, checked, with
 * LLAMA_PEER_HEADER); only their types are used: every call goes through a
 * pointer from dlsym ---- */
const char *llama_version(void);
const char *ggml_commit(void);
void llama_log_set(ggml_log_callback log_callback, void *user_data);
void ggml_backend_load_all_from_path(const char *dir_path);
size_t ggml_backend_dev_count(void);
ggml_backend_dev_t ggml_backend_dev_get(size_t index);
enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t device);
const char *ggml_backend_dev_description(ggml_backend_dev_t device);
void llama_backend_init(void);
void llama_backend_free(void);
bool llama_supports_gpu_offload(void);
struct llama_model_params llama_model_default_params(void);
struct llama_context_params llama_context_default_params(void);
struct llama_model *llama_model_load_from_file(const char *path_model, struct llama_model_params params);
void llama_model_free(struct llama_model *model);
const struct llama_vocab *llama_model_get_vocab(const struct llama_model *model);
int32_t llama_vocab_n_tokens(const struct llama_vocab *vocab);
int32_t llama_model_n_ctx_train(const struct llama_model *model);
struct llama_context *llama_init_from_model(struct llama_model *model, struct llama_context_params params);
void llama_free(struct llama_context *ctx);
llama_memory_t llama_get_memory(const struct llama_context *ctx);
void llama_memory_clear(llama_memory_t mem, bool data);
struct llama_batch llama_batch_get_one(llama_token *tokens, int32_t n_tokens);
int32_t llama_decode(struct llama_context *ctx, struct llama_batch batch);
float *llama_get_logits_ith(struct llama_context *ctx, int32_t i);

/* The layout of that release (x86-64 / aarch64 LP64), asserted for the copies
 * and, under LLAMA_PEER_HEADER, for llama.h itself. */
_Static_assert(sizeof(void *) == 8, "llama_peer assumes an LP64 target");
#define AT(s, f, n) _Static_assert(offsetof(struct s, f) == (n), #s "." #f " offset")
_Static_assert(sizeof(struct llama_model_params) == 80, "llama_model_params size");
AT(llama_model_params, n_gpu_layers, 16); AT(llama_model_params, load_mode, 24);
AT(llama_model_params, lazy_mode, 28); AT(llama_model_params, main_gpu, 32);
AT(llama_model_params, tensor_split, 40); AT(llama_model_params, kv_overrides, 64);
AT(llama_model_params, vocab_only, 72); AT(llama_model_params, load_mtp, 77);
_Static_assert(sizeof(struct llama_context_params) == 160, "llama_context_params size");
AT(llama_context_params, n_ubatch, 8); AT(llama_context_params, n_threads, 28);
AT(llama_context_params, n_threads_batch, 32); AT(llama_context_params, flash_attn_type, 52);
AT(llama_context_params, cb_eval, 88); AT(llama_context_params, type_k, 104);
AT(llama_context_params, type_v, 108); AT(llama_context_params, abort_callback, 112);
AT(llama_context_params, embeddings, 128); AT(llama_context_params, kv_unified, 133);
AT(llama_context_params, samplers, 136); AT(llama_context_params, ctx_other, 152);
#undef AT
_Static_assert(sizeof(struct llama_batch) == 56, "llama_batch layout");
_Static_assert(LLAMA_LOAD_MODE_MMAP == 1 && LLAMA_LAZY_MODE_OFF == 0 && LLAMA_FLASH_ATTN_TYPE_AUTO == -1 &&
                   GGML_TYPE_F16 == 1 && GGML_BACKEND_DEVICE_TYPE_GPU == 1 && GGML_LOG_LEVEL_ERROR == 4,
               "enum values");

#define FN(name) __typeof__(&name) name
static struct {
    FN(llama_version); FN(ggml_commit); FN(llama_log_set); FN(ggml_backend_load_all_from_path);
    FN(ggml_backend_dev_count); FN(ggml_backend_dev_get); FN(ggml_backend_dev_type);
    FN(ggml_backend_dev_description); FN(llama_backend_init); FN(llama_backend_free);
    FN(llama_supports_gpu_offload); FN(llama_model_default_params); FN(llama_context_default_params);
    FN(llama_model_load_from_file); FN(llama_model_free); FN(llama_model_get_vocab);
    FN(llama_vocab_n_tokens); FN(llama_init_from_model); FN(llama_free); FN(llama_get_memory);
    FN(llama_memory_clear); FN(llama_batch_get_one); FN(llama_decode); FN(llama_get_logits_ith);
    FN(llama_model_n_ctx_train);
} L;
#undef FN
#define SYM(name) {#name, &L.name, sizeof L.name}
static const struct { const char *name; void *slot; size_t size; } SYMS[] = {
    SYM(llama_version), SYM(ggml_commit), SYM(llama_log_set), SYM(ggml_backend_load_all_from_path),
    SYM(ggml_backend_dev_count), SYM(ggml_backend_dev_get), SYM(ggml_backend_dev_type),
    SYM(ggml_backend_dev_description), SYM(llama_backend_init), SYM(llama_backend_free),
    SYM(llama_supports_gpu_offload), SYM(llama_model_default_params), SYM(llama_context_default_params),
    SYM(llama_model_load_from_file), SYM(llama_model_free), SYM(llama_model_get_vocab),
    SYM(llama_vocab_n_tokens), SYM(llama_init_from_model), SYM(llama_free), SYM(llama_get_memory),
    SYM(llama_memory_clear), SYM(llama_batch_get_one), SYM(llama_decode), SYM(llama_get_logits_ith),
    SYM(llama_model_n_ctx_train),
};
#undef SYM

static int verbose;
static enum ggml_log_level last_level;

/* llama.cpp's and ggml's log: errors only (llama_peer.mjs's logLevel
 * 'error'), everything with -v; CONT continues the previous line's level. */
static void on_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level != GGML_LOG_LEVEL_CONT) last_level = level;
    if (verbose || last_level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Resolves every symbol in SYMS from lib (and the libraries it needs), then
 * checks the version strings and that the default parameters read back as
 * that release's: a library of another release, or a layout that moved,
 * is refused with a message naming what differs. Returns 0 or 1. */
static int bind_library(void *lib, const char *path) {
    for (size_t i = 0; i < sizeof SYMS / sizeof SYMS[0]; i++) {
        void *p = dlsym(lib, SYMS[i].name);
        if (!p) {
            fprintf(stderr, "llama_peer: %s has no symbol %s: this program follows llama.h of "
                            "node-llama-cpp 3.21.1's llama.cpp (%s, ggml %s)\n",
                    path, SYMS[i].name, WANT_LLAMA_VERSION, WANT_GGML_COMMIT);
            return 1;
        }
        memcpy(SYMS[i].slot, &p, SYMS[i].size);
    }
    const char *lv = L.llama_version(), *gc = L.ggml_commit();
    if (strcmp(lv, WANT_LLAMA_VERSION) != 0 || strcmp(gc, WANT_GGML_COMMIT) != 0) {
        fprintf(stderr, "llama_peer: %s is llama.cpp %s (ggml %s), not %s (ggml %s) whose llama.h "
                        "this program copies: its parameter structs may differ\n",
                path, lv, gc, WANT_LLAMA_VERSION, WANT_GGML_COMMIT);
        return 1;
    }
    struct llama_model_params mp = L.llama_model_default_params();
    struct llama_context_params cp = L.llama_context_default_params();
    const char *bad = mp.devices || mp.tensor_buft_overrides ? "model devices/overrides"
                      : mp.n_gpu_layers != -1 || mp.split_mode != LLAMA_SPLIT_MODE_LAYER
                          ? "model n_gpu_layers/split_mode"
                      : mp.load_mode != LLAMA_LOAD_MODE_AUTO || mp.lazy_mode != LLAMA_LAZY_MODE_AUTO
                          ? "model load_mode/lazy_mode"
                      : mp.main_gpu != 0 || mp.kv_overrides ? "model main_gpu/kv_overrides"
                      : mp.vocab_only || mp.check_tensors || !mp.use_extra_bufts || mp.no_host ||
                              mp.no_alloc || mp.load_mtp
                          ? "model flags"
                      : cp.n_ctx != 512 || cp.n_batch != 2048 || cp.n_ubatch != 512 || cp.n_seq_max != 1
                          ? "context n_ctx/n_batch/n_ubatch/n_seq_max"
                      : cp.flash_attn_type != LLAMA_FLASH_ATTN_TYPE_AUTO ? "context flash_attn_type"
                      : cp.type_k != GGML_TYPE_F16 || cp.type_v != GGML_TYPE_F16 ? "context type_k/type_v"
                      : cp.cb_eval || cp.abort_callback ? "context callbacks"
                      : cp.embeddings || !cp.offload_kqv || !cp.no_perf || !cp.op_offload ||
                              !cp.swa_full || cp.kv_unified
                          ? "context flags"
                      : cp.samplers || cp.n_samplers || cp.ctx_other ? "context samplers/ctx_other"
                                                                     : NULL;
    if (bad) {
        fprintf(stderr, "llama_peer: %s: the default %s do not read back as llama.cpp %s's: "
                        "the parameter struct layout differs from the copy here\n",
                path, bad, WANT_LLAMA_VERSION);
        return 1;
    }
    return 0;
}

/* Warns when the GPU will need node-llama-cpp 3.21.1's PTX that its driver
 * cannot compile. That package's libggml-cuda.so was built by CUDA 13.1 and
 * holds machine code for sm_86, sm_89, sm_120a and sm_121a only; any other
 * GPU (Hopper's sm_90 among them) runs its compute_75/80/90 PTX, ISA 9.1,
 * which the driver compiles at load time only if it is of CUDA 13.1 or later
 * (R590); an older one fails the first kernel ("the provided PTX was
 * compiled with an unsupported toolchain"). Reads the driver's version and
 * device 0's compute capability through libcuda.so.1's driver API. */
static void check_cuda_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    int (*init)(unsigned), (*version)(int *), (*get)(int *, int), (*attr)(int *, int, int);
    void *p[4] = {dlsym(h, "cuInit"), dlsym(h, "cuDriverGetVersion"), dlsym(h, "cuDeviceGet"),
                  dlsym(h, "cuDeviceGetAttribute")};
    memcpy(&init, &p[0], sizeof p[0]);
    memcpy(&version, &p[1], sizeof p[1]);
    memcpy(&get, &p[2], sizeof p[2]);
    memcpy(&attr, &p[3], sizeof p[3]);
    int v = 0, dev = 0, major = 0, minor = 0;
    if (p[0] && p[1] && p[2] && p[3] && init(0) == 0 && version(&v) == 0 && get(&dev, 0) == 0 &&
        attr(&major, 75, dev) == 0 && attr(&minor, 76, dev) == 0) { // compute capability
        int cc = major * 10 + minor;
        bool sass = cc == 86 || cc == 89 || cc == 120 || cc == 121;
        if (!sass && v < 13010)
            fprintf(stderr, "llama_peer: warning: GPU 0 is sm_%d and its driver runs CUDA %d.%d: "
                            "node-llama-cpp 3.21.1's libggml-cuda.so has no sm_%d code, only PTX of "
                            "CUDA 13.1, which a driver below 13.1 (R590) cannot compile: expect \"the "
                            "provided PTX was compiled with an unsupported toolchain\"\n",
                    cc, v / 1000, v % 1000 / 10, cc);
    }
    dlclose(h);
}

/* One run: prompt, then nnew greedy tokens into toks; *tok_s as
 * llama_peer.mjs counts it. Returns 0, or 1 with a message. */
static int run_once(struct llama_context *ctx, int32_t n_vocab, llama_token *prompt, int n_prompt,
                    int nnew, llama_token *toks, double *tok_s) {
    double t1 = 0;
    llama_batch b = L.llama_batch_get_one(prompt, n_prompt);
    for (int i = 0; i < nnew; i++) {
        int32_t rc = L.llama_decode(ctx, b);
        if (rc != 0) {
            fprintf(stderr, "llama_peer: llama_decode returned %d at token %d\n", (int)rc, i);
            return 1;
        }
        const float *logits = L.llama_get_logits_ith(ctx, -1);
        if (!logits) {
            fprintf(stderr, "llama_peer: llama_get_logits_ith gave no logits at token %d\n", i);
            return 1;
        }
        int32_t best = 0; // logits (V,)
        for (int32_t v = 1; v < n_vocab; v++)
            if (logits[v] > logits[best]) best = v;
        toks[i] = best;
        if (i == 1) t1 = now_s(); // after the first token and one step, as llama_peer.mjs
        b = L.llama_batch_get_one(&toks[i], 1);
    }
    *tok_s = nnew > 2 ? (nnew - 2) / (now_s() - t1) : 0;
    return 0;
}

/* s as a JSON string: quotes, backslashes and control bytes escaped. */
static void put_json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* The largest NEW: bounds the context arithmetic and the token buffers
 * before the model's own context (llama_model_n_ctx_train) is known. */
#define MAX_NEW (1 << 20)

/* s as a base-10 integer in [lo, hi] into *out: the whole string must be
 * the number. Returns 0, or 2 after a message naming what (the argument). */
static int parse_int(const char *what, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE) {
        fprintf(stderr, "llama_peer: %s is '%s', not an integer\n", what, s);
        return 2;
    }
    if (v < lo || v > hi) {
        if (hi == INT32_MAX) fprintf(stderr, "llama_peer: %s must be >= %ld (it is %ld)\n", what, lo, v);
        else fprintf(stderr, "llama_peer: %s must be in [%ld, %ld] (it is %ld)\n", what, lo, hi, v);
        return 2;
    }
    *out = (int)v;
    return 0;
}

static int usage(const char *msg) {
    fprintf(stderr, "llama_peer: %s\nusage: llama_peer --lib LIBLLAMA [--gpu-layers N] [--repeats R] [-v] "
                    "FILE.gguf PROMPT_IDS NEW THREADS\n", msg);
    return 2;
}

int main(int argc, char **argv) {
    const char *libpath = NULL, *pos[4];
    int npos = 0, gpu_layers = 0, repeats = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--lib") == 0 && v) libpath = v, i++;
        else if (strcmp(a, "--gpu-layers") == 0 && v) {
            if (parse_int("--gpu-layers", v, -1, INT32_MAX, &gpu_layers)) return 2;
            i++;
        } else if (strcmp(a, "--repeats") == 0 && v) {
            if (parse_int("--repeats", v, 1, INT32_MAX, &repeats)) return 2;
            i++;
        } else if (strcmp(a, "-v") == 0) verbose = 1;
        /* a negative number is a positional argument (refused below by name) */
        else if ((a[0] != '-' || (a[1] >= '0' && a[1] <= '9')) && npos < 4) pos[npos++] = a;
        else return usage("unknown or incomplete argument");
    }
    if (!libpath || npos != 4) return usage("--lib and four positional arguments are needed");
    const char *file = pos[0];
    int nnew = 0, threads = 0;
    if (parse_int("NEW", pos[2], 3, MAX_NEW, &nnew) || parse_int("THREADS", pos[3], 1, INT32_MAX, &threads))
        return 2;
    llama_token prompt[4096];
    int n_prompt = 0;
    for (const char *s = pos[1]; *s;) {
        char *end;
        long id = strtol(s, &end, 10);
        if (end == s || id < 0 || id > INT32_MAX || n_prompt == 4096 || (*end && *end != ','))
            return usage("PROMPT_IDS must be 1 to 4096 non-negative ids separated by commas");
        prompt[n_prompt++] = (llama_token)id;
        s = *end ? end + 1 : end;
        if (*end && !*s) return usage("PROMPT_IDS ends with a comma");
    }
    if (n_prompt == 0) return usage("PROMPT_IDS is empty");

    void *lib = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "llama_peer: cannot load %s: %s\n", libpath, dlerror());
        return 1;
    }
    if (bind_library(lib, libpath)) return 1;
    L.llama_log_set(on_log, NULL);
    /* The backends (libggml-cpu-*.so, libggml-cuda.so) beside the library,
     * as node-llama-cpp loads them, before llama_backend_init would search
     * the program's own folder. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", libpath);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    L.ggml_backend_load_all_from_path(dir);
    L.llama_backend_init();

    char device[256] = "cpu";
    for (size_t i = 0; gpu_layers != 0 && i < L.ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = L.ggml_backend_dev_get(i);
        if (L.ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) {
            snprintf(device, sizeof device, "%s", L.ggml_backend_dev_description(d));
            break;
        }
    }
    if (gpu_layers != 0 && (!L.llama_supports_gpu_offload() || strcmp(device, "cpu") == 0)) {
        /* ggml's release build loads backends silently: ask the loader why. */
        char cuda[4200];
        snprintf(cuda, sizeof cuda, "%s/libggml-cuda.so", dir);
        void *h = dlopen(cuda, RTLD_NOW | RTLD_LOCAL);
        const char *why = h ? "it loads, but ggml registered no GPU device" : dlerror();
        if (h) dlclose(h);
        fprintf(stderr, "llama_peer: --gpu-layers %d but no GPU backend loaded from %s: %s: %s "
                        "(the CUDA package's libggml-cuda.so needs libcudart.so.13, libcublas.so.13 and libcuda.so.1 "
                        "on LD_LIBRARY_PATH)\n", gpu_layers, dir, cuda, why);
        L.llama_backend_free();
        return 1;
    }

    if (gpu_layers != 0) check_cuda_driver();
    struct llama_model_params mp = L.llama_model_default_params();
    mp.n_gpu_layers = gpu_layers;
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    mp.lazy_mode = LLAMA_LAZY_MODE_OFF;
    struct llama_model *model = L.llama_model_load_from_file(file, mp);
    if (!model) {
        fprintf(stderr, "llama_peer: llama.cpp could not load %s (-v shows its log)\n", file);
        L.llama_backend_free();
        return 1;
    }
    int32_t n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model));
    for (int i = 0; i < n_prompt; i++) {
        if (prompt[i] >= n_vocab) {
            fprintf(stderr, "llama_peer: prompt id %d is outside %s's vocabulary of %d\n",
                    (int)prompt[i], file, (int)n_vocab);
            L.llama_model_free(model);
            L.llama_backend_free();
            return 1;
        }
    }
    int32_t n_ctx_train = L.llama_model_n_ctx_train(model);
    if (n_ctx_train > 0 && n_prompt + nnew > n_ctx_train) {
        fprintf(stderr, "llama_peer: %d prompt ids + NEW %d = %d tokens exceed %s's training context of %d\n",
                n_prompt, nnew, n_prompt + nnew, file, (int)n_ctx_train);
        L.llama_model_free(model);
        L.llama_backend_free();
        return 2;
    }
    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + nnew + 8 + 255) & ~255u;
    cp.n_batch = cp.n_ubatch = (uint32_t)n_prompt;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.swa_full = false;
    struct llama_context *ctx = L.llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_peer: llama.cpp could not make a context of %u tokens for %s\n",
                cp.n_ctx, file);
        L.llama_model_free(model);
        L.llama_backend_free();
        return 1;
    }
    llama_token *toks = malloc(sizeof(llama_token) * 2 * (size_t)nnew);
    double *rates = malloc(sizeof(double) * (size_t)repeats);
    int rc = !toks || !rates;
    if (rc) fprintf(stderr, "llama_peer: out of memory\n");
    for (int r = 0; r < repeats && rc == 0; r++) {
        llama_token *out = r == 0 ? toks : toks + nnew;
        if (r > 0) L.llama_memory_clear(L.llama_get_memory(ctx), true);
        rc = run_once(ctx, n_vocab, prompt, n_prompt, nnew, out, &rates[r]);
        if (rc == 0 && r > 0 && memcmp(out, toks, sizeof(llama_token) * (size_t)nnew) != 0)
            fprintf(stderr, "llama_peer: repeat %d gave other tokens than the first run\n", r + 1);
    }
    if (rc == 0) {
        qsort(rates, (size_t)repeats, sizeof *rates, cmp_double);
        const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
        printf("{\"peer\": \"" PEER_NAME "\", \"file\": ");
        put_json_str(base);
        printf(", \"threads\": %d, \"tok_s\": %.3f, \"tokens\": [", threads, rates[repeats / 2]);
        for (int i = 0; i < nnew; i++) printf("%s%d", i ? ", " : "", (int)toks[i]);
        printf("], \"device\": ");
        put_json_str(device);
        printf(", \"gpu_layers\": %d, \"repeats\": %d}\n", gpu_layers, repeats);
    }
    free(rates);
    free(toks);
    L.llama_free(ctx);
    L.llama_model_free(model);
    L.llama_backend_free();
    return rc;
}
