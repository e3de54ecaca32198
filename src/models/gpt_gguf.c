/* GPT models in GGUF files, in llama.cpp's layout (gpt.h: oj_gpt_save_gguf,
 * oj_gpt_load_gguf).
 *
 * Names and layouts are those llama.cpp's converter (convert_hf_to_gguf.py)
 * writes: token_embd, position_embd (gpt2), blk.N.attn_norm, attn_qkv
 * (gpt2) or attn_q/attn_k/attn_v (llama), attn_output, ffn_norm, ffn_up,
 * ffn_gate (llama), ffn_down, output_norm, output; every matrix is stored
 * [out, in] (dims {in, out}), so GPT-2's Conv1D weights ([in, out]) are
 * transposed. llama's q and k rows are permuted per head from the
 * half-split rotary layout of Hugging Face to the interleaved one
 * llama.cpp rotates (row h*D + 2i + j of the file is row h*D + j*D/2 + i
 * of the model, i < D/2, j < 2), and back when loading. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"

typedef enum { PLAIN, TRANSPOSED, PERMUTED } layout;

typedef struct {
    char name[64];
    oj_tensor *param;  /* the model's tensor */
    oj_qtensor **q;    /* its quantized-copy slot (linear weights), or NULL */
    layout lay;
    int64_t heads;     /* PERMUTED: heads of D rows */
    bool optional;     /* may be absent from a file (gpt2's output) */
} entry;

/* The model's tensors in file order; returns the count (<= cap). */
static int entries(oj_gpt *m, entry *e, int cap) {
    const oj_gpt_config *c = &m->cfg;
    bool gpt2 = c->family == OJ_GPT2;
    int n = 0;
#define E(nm, p, qs, ly, h)                                                      \
    do {                                                                         \
        if (n < cap) {                                                           \
            e[n] = (entry){.param = (p), .q = (qs), .lay = (ly), .heads = (h)};  \
            snprintf(e[n].name, sizeof e[n].name, "%s", nm);                      \
        }                                                                        \
        n++;                                                                     \
    } while (0)
    char nm[64];
    E("token_embd.weight", m->wte, NULL, PLAIN, 0);
    if (gpt2) E("position_embd.weight", m->wpe, NULL, PLAIN, 0);
    for (int l = 0; l < (int)c->n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
#define B(suffix, p, qs, ly, h)                                                  \
    do {                                                                         \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix);                         \
        E(nm, p, qs, ly, h);                                                     \
    } while (0)
        B("attn_norm.weight", b->ln_1_w, NULL, PLAIN, 0);
        if (gpt2) {
            B("attn_norm.bias", b->ln_1_b, NULL, PLAIN, 0);
            B("attn_qkv.weight", b->c_attn_w, &b->qc_attn, TRANSPOSED, 0);
            B("attn_qkv.bias", b->c_attn_b, NULL, PLAIN, 0);
            B("attn_output.weight", b->attn_proj_w, &b->qattn_proj, TRANSPOSED, 0);
            B("attn_output.bias", b->attn_proj_b, NULL, PLAIN, 0);
            B("ffn_norm.weight", b->ln_2_w, NULL, PLAIN, 0);
            B("ffn_norm.bias", b->ln_2_b, NULL, PLAIN, 0);
            B("ffn_up.weight", b->c_fc_w, &b->qc_fc, TRANSPOSED, 0);
            B("ffn_up.bias", b->c_fc_b, NULL, PLAIN, 0);
            B("ffn_down.weight", b->mlp_proj_w, &b->qmlp_proj, TRANSPOSED, 0);
            B("ffn_down.bias", b->mlp_proj_b, NULL, PLAIN, 0);
        } else {
            B("attn_q.weight", b->q_w, &b->qq, PERMUTED, c->n_head);
            B("attn_k.weight", b->k_w, &b->qk, PERMUTED, c->n_kv_head);
            B("attn_v.weight", b->v_w, &b->qv, PLAIN, 0);
            B("attn_output.weight", b->o_w, &b->qo, PLAIN, 0);
            B("ffn_norm.weight", b->ln_2_w, NULL, PLAIN, 0);
            B("ffn_gate.weight", b->w_gate, &b->qw_gate, PLAIN, 0);
            B("ffn_up.weight", b->w_up, &b->qw_up, PLAIN, 0);
            B("ffn_down.weight", b->w_down, &b->qw_down, PLAIN, 0);
        }
#undef B
    }
    E("output_norm.weight", m->ln_f_w, NULL, PLAIN, 0);
    if (gpt2) E("output_norm.bias", m->ln_f_b, NULL, PLAIN, 0);
    if (m->head != m->wte) {
        E("output.weight", m->head, &m->qhead, PLAIN, 0);
    } else if (gpt2 || m->qhead) {
        /* the tied head: gpt2's written again as llama.cpp's converter
         * does, quantized when it has a copy (a tied llama's only then: it
         * reads back as an untied head of the same values) */
        E("output.weight", m->wte, &m->qhead, PLAIN, 0);
        if (n <= cap) e[n - 1].optional = true;
    }
#undef E
    return n;
}

/* Row r of the file <-> row of the model for a PERMUTED tensor of `heads`
 * heads of D rows. */
static int64_t model_row(int64_t r, int64_t D) {
    int64_t h = r / D, k = r % D, i = k / 2, j = k % 2;
    return h * D + j * (D / 2) + i;
}

/* Rows of `src` (n rows of rb bytes) into dst in file order (to_file) or
 * back into model order. */
static void permute_rows(const uint8_t *src, uint8_t *dst, int64_t n, size_t rb, int64_t heads,
                         bool to_file) {
    int64_t D = n / heads;
    for (int64_t r = 0; r < n; r++) {
        int64_t mr = model_row(r, D);
        if (to_file) memcpy(dst + (size_t)r * rb, src + (size_t)mr * rb, rb);
        else memcpy(dst + (size_t)mr * rb, src + (size_t)r * rb, rb);
    }
}

static uint32_t ggml_of(oj_dtype dt) {
    return dt == OJ_F16 ? OJ_GGML_F16 : dt == OJ_BF16 ? OJ_GGML_BF16 : OJ_GGML_F32;
}

/* ---------------------------------------------------------------- save */

static oj_status set_u32(oj_gguf_writer *w, const char *arch, const char *key, int64_t v,
                         oj_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint32_t x = (uint32_t)v;
    return oj_gguf_writer_set(w, k, OJ_GGUF_UINT32, &x, err);
}

static oj_status set_f32(oj_gguf_writer *w, const char *arch, const char *key, double v,
                         oj_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    float x = (float)v;
    return oj_gguf_writer_set(w, k, OJ_GGUF_FLOAT32, &x, err);
}

static oj_status metadata(const oj_gpt *m, oj_gguf_writer *w, const char *name, oj_error *err) {
    const oj_gpt_config *c = &m->cfg;
    const char *arch = c->family == OJ_GPT2 ? "gpt2" : "llama";
    oj_status s = oj_gguf_writer_set_str(w, "general.architecture", arch, err);
    if (s == OJ_OK && name) s = oj_gguf_writer_set_str(w, "general.name", name, err);
    /* llama_ftype: 0 all F32, 7 mostly Q8_0, 2 mostly Q4_0, 3 mostly Q4_1,
     * 14 Q4_K_S (every quantized matrix Q4_K) */
    static const uint32_t ftype[OJ_QTYPE_COUNT] = {7, 2, 3, 14, 0 /* fp8: refused before */};
    /* unquantized: 0 all F32, 1 mostly F16, 32 mostly BF16 (the matrices'
     * dtype; the 1-D tensors are F32, see oj_gpt_save_gguf) */
    const oj_dtype dt = oj_tensor_dtype(m->wte);
    uint32_t ft = m->quantized ? ftype[m->qtype] : dt == OJ_F16 ? 1 : dt == OJ_BF16 ? 32 : 0, qv = 2;
    if (s == OJ_OK) s = oj_gguf_writer_set(w, "general.file_type", OJ_GGUF_UINT32, &ft, err);
    if (s == OJ_OK && m->quantized)
        s = oj_gguf_writer_set(w, "general.quantization_version", OJ_GGUF_UINT32, &qv, err);
    /* no tokenizer given: llama.cpp's "no_vocab" (token ids only) */
    if (s == OJ_OK && !oj_gguf_writer_has(w, "tokenizer.ggml.model"))
        s = oj_gguf_writer_set_str(w, "tokenizer.ggml.model", "no_vocab", err);
    if (s == OJ_OK) s = set_u32(w, arch, "vocab_size", c->vocab_size, err);
    if (s == OJ_OK) s = set_u32(w, arch, "context_length", c->block_size, err);
    if (s == OJ_OK) s = set_u32(w, arch, "embedding_length", c->n_embd, err);
    if (s == OJ_OK) s = set_u32(w, arch, "feed_forward_length", c->mlp_hidden, err);
    if (s == OJ_OK) s = set_u32(w, arch, "block_count", c->n_layer, err);
    if (s == OJ_OK) s = set_u32(w, arch, "attention.head_count", c->n_head, err);
    if (c->family == OJ_GPT2) {
        if (s == OJ_OK) s = set_f32(w, arch, "attention.layer_norm_epsilon", c->norm_eps, err);
        return s;
    }
    const int64_t D = oj__gpt_head_dim(c);
    if (s == OJ_OK) s = set_u32(w, arch, "attention.head_count_kv", c->n_kv_head, err);
    if (s == OJ_OK) s = set_f32(w, arch, "attention.layer_norm_rms_epsilon", c->norm_eps, err);
    if (s == OJ_OK) s = set_f32(w, arch, "rope.freq_base", c->rope_theta, err);
    if (s == OJ_OK) s = set_u32(w, arch, "rope.dimension_count", D, err);
    if (s == OJ_OK) s = set_u32(w, arch, "attention.key_length", D, err);
    if (s == OJ_OK) s = set_u32(w, arch, "attention.value_length", D, err);
    return s;
}

oj_status oj_gpt_save_gguf(oj_gpt *m, oj_gguf_writer *extra, const char *path, const char *name,
                           oj_error *err) {
    if (m == NULL || path == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gpt save gguf: NULL argument");
    const oj_gpt_config *c = &m->cfg;
    if (c->family == OJ_NANOLAB || c->qkv_bias || c->qk_norm || c->rope_factor > 0)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gpt save gguf: %s: only gpt2 and plain llama models have a GGUF "
                            "layout here (no nanolab, qkv_bias, qk_norm or rope scaling)",
                            path);
    if (m->quantized && oj_qtype_to_ggml(m->qtype) == UINT32_MAX)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gpt save gguf: %s: %s weights have no GGUF (ggml) type; quantize "
                            "at load instead (ojas generate --quantize %s)",
                            path, oj_qtype_name(m->qtype), oj_qtype_name(m->qtype));
    int n = entries(m, NULL, 0);
    entry *e = calloc((size_t)n, sizeof *e);
    void **bufs = calloc((size_t)n, sizeof *bufs);
    oj_gguf_writer *w = extra ? extra : oj_gguf_writer_new();
    oj_status s = e && bufs && w ? OJ_OK
                                 : oj_error_set(err, OJ_ERR_CAPACITY, "gpt save gguf: out of memory");
    if (s == OJ_OK) entries(m, e, n);
    if (s == OJ_OK) s = metadata(m, w, name, err);
    oj_engine *eng = m->eng;
    for (int i = 0; s == OJ_OK && i < n; i++) {
        oj_tensor *p = e[i].param;
        const oj_qtensor *q = e[i].q ? *e[i].q : NULL;
        if (q) { /* the quantized copy, [out, in] already */
            const uint8_t *src = oj_qtensor_data(q);
            if (e[i].lay == PERMUTED) {
                size_t nb = oj_qtensor_nbytes(q);
                if ((bufs[i] = malloc(nb)) == NULL) {
                    s = oj_error_set(err, OJ_ERR_CAPACITY, "gpt save gguf: out of memory");
                    break;
                }
                permute_rows(src, bufs[i], oj_qtensor_rows(q), nb / (size_t)oj_qtensor_rows(q),
                             e[i].heads, true);
                src = bufs[i];
            }
            uint64_t dims[2] = {(uint64_t)oj_qtensor_cols(q), (uint64_t)oj_qtensor_rows(q)};
            s = oj_gguf_writer_add_tensor(w, e[i].name, oj_qtype_to_ggml(oj_qtensor_type(q)), 2,
                                          dims, src, oj_qtensor_nbytes(q), err);
            continue;
        }
        /* a float tensor in its dtype, [out, in]; a 1-D one (norms, biases)
         * in F32, as llama.cpp's converter writes them (ggml's CUDA backend
         * cannot add or multiply f32 activations by an f16 vector) */
        oj_scope_begin(eng);
        oj_tensor *v = e[i].lay == TRANSPOSED     ? oj_transpose(p, 0, 1)
                       : oj_rank(p) == 1 && oj_tensor_dtype(p) != OJ_F32 ? oj_cast(p, OJ_F32)
                                                                        : oj_retain(p);
        int r = oj_rank(v);
        size_t es = oj_dtype_size(oj_tensor_dtype(v)), nb = (size_t)oj_numel(v) * es;
        void *host = malloc(nb ? nb : 1);
        s = v && host ? oj_to_host(v, host, nb) : OJ_ERR_CAPACITY;
        if (s != OJ_OK) {
            oj_error_set(err, s, "gpt save gguf: reading %s: %s", e[i].name,
                         host ? oj_last_error(eng) : "out of memory");
            free(host);
            oj_release(v);
            oj_scope_end(eng);
            break;
        }
        if (e[i].lay == PERMUTED) {
            void *pm = malloc(nb);
            if (pm == NULL) {
                free(host);
                oj_release(v);
                oj_scope_end(eng);
                s = oj_error_set(err, OJ_ERR_CAPACITY, "gpt save gguf: out of memory");
                break;
            }
            permute_rows(host, pm, oj_size(v, 0), nb / (size_t)oj_size(v, 0), e[i].heads, true);
            free(host);
            host = pm;
        }
        bufs[i] = host;
        uint64_t dims[2];
        for (int d = 0; d < r; d++) dims[d] = (uint64_t)oj_size(v, r - 1 - d);
        s = oj_gguf_writer_add_tensor(w, e[i].name, ggml_of(oj_tensor_dtype(v)), r, dims, host,
                                      nb, err);
        oj_release(v); /* the view, or our reference to the parameter */
        oj_scope_end(eng);
    }
    if (s == OJ_OK) s = oj_gguf_writer_write(w, path, err);
    if (w != extra) oj_gguf_writer_free(w);
    for (int i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(e);
    return s;
}

/* ---------------------------------------------------------------- load */

static bool meta_int(const oj_gguf *g, const char *arch, const char *key, int64_t *v, bool need,
                     const char *path, oj_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t i = oj_gguf_find_key(g, k);
    if (i < 0 && !need) return true;
    if (i < 0 || !oj_gguf_kv_int(g, i, v) || *v <= 0) {
        oj_error_set(err, OJ_ERR_CORRUPT, "gpt load gguf: %s: metadata %s is %s", path, k,
                     i < 0 ? "missing" : "not a positive integer");
        return false;
    }
    return true;
}

/* Optional <arch>.key: *v -1 when absent, else its value (>= 0). */
static oj_status meta_key_int(const oj_gguf *g, const char *arch, const char *key, int64_t *v,
                              const char *path, oj_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t i = oj_gguf_find_key(g, k);
    *v = -1;
    if (i >= 0 && (!oj_gguf_kv_int(g, i, v) || *v < 0))
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "gpt load gguf: %s: metadata %s is not an integer >= 0", path, k);
    return OJ_OK;
}

static bool meta_float(const oj_gguf *g, const char *arch, const char *key, double *v, bool need,
                       const char *path, oj_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t i = oj_gguf_find_key(g, k);
    if (i < 0 && !need) return true;
    if (i < 0 || !oj_gguf_kv_float(g, i, v) || !(*v > 0)) {
        oj_error_set(err, OJ_ERR_CORRUPT, "gpt load gguf: %s: metadata %s is %s", path, k,
                     i < 0 ? "missing" : "not a positive float");
        return false;
    }
    return true;
}

static oj_status config_of(const oj_gguf *g, const char *path, oj_gpt_config *c, oj_error *err) {
    int64_t ai = oj_gguf_find_key(g, "general.architecture");
    const char *arch = ai >= 0 ? oj_gguf_kv_str(g, ai, NULL) : NULL;
    if (arch == NULL)
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "gpt load gguf: %s: no string general.architecture", path);
    bool gpt2 = strcmp(arch, "gpt2") == 0;
    if (!gpt2 && strcmp(arch, "llama") != 0) {
        char q[65];
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gpt load gguf: %s: architecture \"%s\" is not supported (gpt2, llama)",
                            path, oj__hf_quote(q, arch));
    }
    memset(c, 0, sizeof *c);
    c->family = gpt2 ? OJ_GPT2 : OJ_LLAMA;
    c->init_std = 0.02;
    int64_t emb = oj_gguf_find_tensor(g, "token_embd.weight");
    if (emb < 0 || oj_gguf_tensor_ndims(g, emb) != 2)
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "gpt load gguf: %s: tensor token_embd.weight (2 dims) is missing", path);
    c->vocab_size = (int64_t)oj_gguf_tensor_dims(g, emb)[1];
    if (!meta_int(g, arch, "context_length", &c->block_size, true, path, err) ||
        !meta_int(g, arch, "embedding_length", &c->n_embd, true, path, err) ||
        !meta_int(g, arch, "feed_forward_length", &c->mlp_hidden, true, path, err) ||
        !meta_int(g, arch, "block_count", &c->n_layer, true, path, err) ||
        !meta_int(g, arch, "attention.head_count", &c->n_head, true, path, err))
        return err ? err->status : OJ_ERR_CORRUPT;
    c->n_kv_head = c->n_head;
    c->rope_theta = 10000.0; /* unused by gpt2; the config check wants it > 0 */
    if (gpt2) {
        c->norm_eps = 1e-5;
        if (!meta_float(g, arch, "attention.layer_norm_epsilon", &c->norm_eps, false, path, err))
            return err ? err->status : OJ_ERR_CORRUPT;
    } else {
        c->norm_eps = 1e-5;
        c->rope_theta = 10000.0;
        int64_t kl = 0;
        if (!meta_int(g, arch, "attention.head_count_kv", &c->n_kv_head, false, path, err) ||
            !meta_float(g, arch, "attention.layer_norm_rms_epsilon", &c->norm_eps, false, path,
                        err) ||
            !meta_float(g, arch, "rope.freq_base", &c->rope_theta, false, path, err) ||
            !meta_int(g, arch, "attention.key_length", &kl, false, path, err))
            return err ? err->status : OJ_ERR_CORRUPT;
        if (kl > 0 && kl != c->n_embd / c->n_head) c->head_dim = kl;
        if (oj_gguf_find_key(g, "llama.rope.scaling.type") >= 0) {
            size_t len;
            const char *st = oj_gguf_kv_str(g, oj_gguf_find_key(g, "llama.rope.scaling.type"), &len);
            if (st == NULL || strcmp(st, "none") != 0)
                return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                                    "gpt load gguf: %s: llama.rope.scaling.type is not supported",
                                    path);
        }
        c->untied_head = oj_gguf_find_tensor(g, "output.weight") >= 0;
        /* rotary over the whole head only (no partial rotary) */
        int64_t D = c->head_dim ? c->head_dim : c->n_embd / c->n_head, rd = 0;
        oj_status ks = meta_key_int(g, arch, "rope.dimension_count", &rd, path, err);
        if (ks) return ks;
        if (rd >= 0 && rd != D)
            return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                                "gpt load gguf: %s: metadata llama.rope.dimension_count is %lld, "
                                "not the head dim %lld (partial rotary is not supported)",
                                path, (long long)rd, (long long)D);
        /* a window over every layer (Mistral's), as config.json's
         * sliding_window: no longer context than the window */
        int64_t w = 0;
        if ((ks = meta_key_int(g, arch, "attention.sliding_window", &w, path, err))) return ks;
        if (w > 0 && w < c->block_size) c->block_size = w;
    }
    int64_t v = 0, ex = 0;
    oj_status ks = meta_key_int(g, arch, "vocab_size", &v, path, err);
    if (ks || (ks = meta_key_int(g, arch, "expert_count", &ex, path, err))) return ks;
    if (v >= 0 && v != c->vocab_size)
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "gpt load gguf: %s: metadata %s.vocab_size is %lld, but "
                            "token_embd.weight has %lld rows",
                            path, arch, (long long)v, (long long)c->vocab_size);
    if (ex > 0)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gpt load gguf: %s: metadata %s.expert_count is %lld (mixture of "
                            "experts is not supported)",
                            path, arch, (long long)ex);
    oj_error ce = {0};
    if (oj_gpt_config_check(c, &ce) != OJ_OK)
        return oj_error_set(err, OJ_ERR_CORRUPT, "gpt load gguf: %s: %s", path, ce.message);
    return OJ_OK;
}

/* Load file tensor i into entry en of m. */
static oj_status load_entry(oj_gpt *m, const oj_gguf *g, int64_t i, const entry *en,
                            const char *path, oj_error *err) {
    oj_engine *eng = m->eng;
    oj_tensor *p = en->param;
    /* the model's [out, in] shape of the file's rows */
    int64_t rows = en->lay == TRANSPOSED ? oj_size(p, 1) : oj_size(p, 0);
    int64_t cols = oj_rank(p) == 2 ? (en->lay == TRANSPOSED ? oj_size(p, 0) : oj_size(p, 1)) : 0;
    int nd = oj_gguf_tensor_ndims(g, i);
    const uint64_t *dims = oj_gguf_tensor_dims(g, i);
    bool fits = oj_rank(p) == 2 ? nd == 2 && dims[0] == (uint64_t)cols && dims[1] == (uint64_t)rows
                                : nd == 1 && dims[0] == (uint64_t)rows;
    if (!fits) {
        char a[64];
        int64_t want[2] = {rows, cols};
        return oj_error_set(err, OJ_ERR_SHAPE,
                            "gpt load gguf: %s: tensor %s has dims {%llu%s%llu}, the config "
                            "gives %s (row-major)",
                            path, en->name, (unsigned long long)dims[0], nd > 1 ? ", " : "",
                            nd > 1 ? (unsigned long long)dims[1] : 0ull,
                            oj__shape_fmt(a, sizeof a, oj_rank(p), want));
    }
    uint32_t gt = oj_gguf_tensor_type(g, i);
    oj_qtype qt;
    bool quant = oj_qtype_from_ggml(gt, &qt);
    if (!quant && gt != OJ_GGML_F32 && gt != OJ_GGML_F16 && gt != OJ_GGML_BF16)
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gpt load gguf: %s: tensor %s is %s; F32, F16, BF16, Q8_0, Q4_0, "
                            "Q4_1 or Q4_K expected",
                            path, en->name, oj_ggml_type_name(gt));
    size_t nb;
    const uint8_t *data = oj_gguf_tensor_data(g, i, &nb);
    uint8_t *tmp = NULL;
    if (en->lay == PERMUTED) { /* back to the model's row order */
        if ((tmp = malloc(nb)) == NULL)
            return oj_error_set(err, OJ_ERR_CAPACITY, "gpt load gguf: out of memory");
        permute_rows(data, tmp, rows, nb / (size_t)rows, en->heads, false);
        data = tmp;
    }
    oj_scope_begin(eng);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *src = NULL; /* [rows, cols] or [rows] in the model's order */
    oj_qtensor *q = NULL;
    if (quant) {
        q = oj_qtensor_from_blocks(eng, qt, rows, cols, data, nb);
        src = q ? oj_dequantize(q) : NULL;
    } else {
        oj_dtype dt = gt == OJ_GGML_F32 ? OJ_F32 : gt == OJ_GGML_F16 ? OJ_F16 : OJ_BF16;
        int64_t shape[2] = {rows, cols};
        src = oj_from_host(eng, oj_rank(p), shape, dt, data, nb);
    }
    oj_tensor *st = src && en->lay == TRANSPOSED ? oj_transpose(src, 0, 1) : src;
    oj_status s = st ? oj_copy_(p, st) : oj_last_status(eng);
    if (st != src) oj_release(st);
    if (s != OJ_OK) oj_error_set(err, s, "gpt load gguf: %s: %s: %s", path, en->name, oj_last_error(eng));
    oj_set_grad_enabled(eng, prev);
    oj_scope_end(eng);
    free(tmp);
    if (s == OJ_OK && q && en->q) { /* the file's blocks are the quantized copy */
        oj_qtensor_free(*en->q);
        *en->q = q;
        if (!m->quantized) m->qtype = qt;
        m->quantized = true;
    } else {
        oj_qtensor_free(q);
    }
    return s;
}

/* A tied gpt2 head's quantized copy from file tensor i (dims {C, V}). */
static oj_status load_head_copy(oj_gpt *m, const oj_gguf *g, int64_t i, oj_qtype qt,
                                const char *path, oj_error *err) {
    const uint64_t *dims = oj_gguf_tensor_dims(g, i);
    if (oj_gguf_tensor_ndims(g, i) != 2 || dims[0] != (uint64_t)m->cfg.n_embd ||
        dims[1] != (uint64_t)m->cfg.vocab_size)
        return oj_error_set(err, OJ_ERR_SHAPE,
                            "gpt load gguf: %s: tensor output.weight does not have the dims of "
                            "token_embd.weight",
                            path);
    size_t nb;
    const void *data = oj_gguf_tensor_data(g, i, &nb);
    oj_qtensor *q = oj_qtensor_from_blocks(m->eng, qt, m->cfg.vocab_size, m->cfg.n_embd, data, nb);
    if (q == NULL)
        return oj_error_set(err, oj_last_status(m->eng), "gpt load gguf: %s: output.weight: %s",
                            path, oj_last_error(m->eng));
    oj_qtensor_free(m->qhead);
    m->qhead = q;
    return OJ_OK;
}

oj_status oj_gpt_load_gguf(oj_engine *eng, const char *path, oj_gpt **out, oj_error *err) {
    if (out) *out = NULL;
    if (eng == NULL || path == NULL || out == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gpt load gguf: NULL argument");
    oj_gguf *g = NULL;
    oj_status s = oj_gguf_open(path, &g, err);
    if (s != OJ_OK) return s;
    oj_gpt_config c;
    s = config_of(g, path, &c, err);
    oj_gpt *m = NULL;
    if (s == OJ_OK && (s = oj__gpt_create_zeros(eng, &c, &m)) != OJ_OK)
        oj_error_set(err, s, "gpt load gguf: %s: %s", path, oj_last_error(eng));
    int n = m ? entries(m, NULL, 0) : 0;
    entry *e = m ? calloc((size_t)n, sizeof *e) : NULL;
    if (s == OJ_OK && e == NULL) s = oj_error_set(err, OJ_ERR_CAPACITY, "gpt load gguf: out of memory");
    if (s == OJ_OK) entries(m, e, n);
    /* file tensors the model takes; any other is refused before loading (a smaller
     * block_count would otherwise drop blk.N.* silently) */
    int64_t nt = g ? oj_gguf_tensor_count(g) : 0;
    bool *used = s == OJ_OK ? calloc(nt > 0 ? (size_t)nt : 1, sizeof *used) : NULL;
    if (s == OJ_OK && used == NULL)
        s = oj_error_set(err, OJ_ERR_CAPACITY, "gpt load gguf: out of memory");
    for (int k = 0; s == OJ_OK && k < n; k++) {
        int64_t i = oj_gguf_find_tensor(g, e[k].name);
        if (i >= 0) used[i] = true;
    }
    int64_t n_used = 0;
    for (int64_t i = 0; s == OJ_OK && i < nt; i++) n_used += used[i];
    for (int64_t i = 0; s == OJ_OK && i < nt; i++)
        if (!used[i]) {
            char q[65];
            s = oj_error_set(err, OJ_ERR_CORRUPT,
                             "gpt load gguf: %s: tensor \"%s\" is not used by the %s model the "
                             "metadata describes (block_count %lld; %lld tensors in the file, "
                             "%lld used)",
                             path, oj__hf_quote(q, oj_gguf_tensor_name(g, i)),
                             c.family == OJ_GPT2 ? "gpt2" : "llama", (long long)c.n_layer,
                             (long long)nt, (long long)n_used);
        }
    for (int k = 0; s == OJ_OK && k < n; k++) {
        int64_t i = oj_gguf_find_tensor(g, e[k].name);
        if (i < 0) {
            if (e[k].optional) continue;
            s = oj_error_set(err, OJ_ERR_CORRUPT, "gpt load gguf: %s: tensor %s is missing", path,
                             e[k].name);
            break;
        }
        if (e[k].optional) { /* gpt2's copy of the tied head: kept only when quantized */
            oj_qtype qt;
            if (oj_qtype_from_ggml(oj_gguf_tensor_type(g, i), &qt))
                s = load_head_copy(m, g, i, qt, path, err);
            continue;
        }
        s = load_entry(m, g, i, &e[k], path, err);
    }
    free(used);
    free(e);
    oj_gguf_close(g);
    if (s == OJ_OK && m->quantized && !oj__gpt_qfuse(m))
        s = oj_error_set(err, oj_last_status(eng), "gpt load gguf: %s: %s", path,
                         oj_last_error(eng));
    if (s != OJ_OK) {
        oj_gpt_free(m);
        return s;
    }
    *out = m;
    return OJ_OK;
}

/* ---------------------------------------------------------------- tokenizer */

/* dir/a, else dir/b, into buf; false when neither exists. */
static bool find_file(char *buf, size_t n, const char *dir, const char *a, const char *b) {
    snprintf(buf, n, "%s/%s", dir, a);
    if (access(buf, R_OK) == 0) return true;
    snprintf(buf, n, "%s/%s", dir, b);
    return access(buf, R_OK) == 0;
}

/* llama.cpp's tokenizer metadata of a GPT-2 byte-level BPE tokenizer in
 * dir: tokenizer.ggml.model "gpt2", pre "gpt-2", tokens (the byte-level
 * strings of encoder.json / vocab.json by id, padded to the model's
 * vocab_size with unused "<|pad_N|>" entries), token_type (1 normal, 3
 * control for entries no merge makes, e.g. <|endoftext|>, 5 padding),
 * merges (vocab.bpe / merges.txt without its #version line), bos and eos
 * the <|endoftext|> id when there is one. */
oj_status oj_gguf_add_gpt2_tokenizer(oj_gguf_writer *w, const char *dir, int64_t vocab,
                                     oj_error *e) {
    char enc[4200], mer[4200];
    if (!find_file(enc, sizeof enc, dir, "encoder.json", "vocab.json") ||
        !find_file(mer, sizeof mer, dir, "vocab.bpe", "merges.txt"))
        return oj_error_set(e, OJ_ERR_IO, "%s holds no encoder.json + vocab.bpe (or vocab.json + "
                                          "merges.txt)", dir);
    uint8_t *etext = NULL;
    size_t elen = 0;
    oj_status rs = oj__read_file(enc, (size_t)1 << 28, &etext, &elen, e);
    if (rs) return rs;
    json_error_t je;
    json_t *root = json_loadb((const char *)etext, elen, 0, &je);
    free(etext);
    if (!json_is_object(root)) {
        json_decref(root);
        return oj_error_set(e, OJ_ERR_CORRUPT, "%s: not a JSON object (%s)", enc, je.text);
    }
    size_t nt = json_object_size(root);
    if ((int64_t)nt > vocab) {
        json_decref(root);
        return oj_error_set(e, OJ_ERR_INVALID_ARGUMENT,
                            "%s: %zu tokens, more than the model's vocab_size %lld", enc, nt,
                            (long long)vocab);
    }
    const char **tokens = calloc((size_t)vocab, sizeof *tokens);
    int32_t *types = calloc((size_t)vocab, sizeof *types);
    char (*pads)[32] = calloc((size_t)vocab, sizeof *pads);
    char *text = NULL;
    const char **merges = NULL;
    size_t nm = 0, tl = 0;
    oj_status s = tokens && types && pads ? OJ_OK : oj_error_set(e, OJ_ERR_CAPACITY, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (s == OJ_OK && (id < 0 || id >= vocab || tokens[id]))
            s = oj_error_set(e, OJ_ERR_CORRUPT, "%s: token \"%.40s\" has a bad or repeated id", enc, key);
        if (s == OJ_OK) tokens[id] = key, types[id] = 1;
    }
    int32_t eot = -1;
    for (int64_t i = 0; s == OJ_OK && i < vocab; i++) {
        if (tokens[i] == NULL) {
            snprintf(pads[i], sizeof pads[i], "<|pad_%lld|>", (long long)i);
            tokens[i] = pads[i], types[i] = 5;
        } else if (strcmp(tokens[i], "<|endoftext|>") == 0) {
            eot = (int32_t)i, types[i] = 3;
        }
    }
    if (s == OJ_OK) s = oj__read_file(mer, (size_t)1 << 30, (uint8_t **)&text, &tl, e);
    if (s == OJ_OK) {
        merges = calloc(tl / 2 + 2, sizeof *merges);
        if (merges == NULL) s = oj_error_set(e, OJ_ERR_CAPACITY, "out of memory");
        for (char *line = text; s == OJ_OK && line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            size_t ll = strlen(line);
            if (ll && line[ll - 1] == '\r') line[--ll] = 0;
            if (ll && strncmp(line, "#version", 8) != 0) merges[nm++] = line;
            line = nl ? nl + 1 : NULL;
        }
    }
    if (s == OJ_OK) s = oj_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", e);
    if (s == OJ_OK) s = oj_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2", e);
    if (s == OJ_OK) s = oj_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", vocab, tokens, e);
    if (s == OJ_OK)
        s = oj_gguf_writer_set_array(w, "tokenizer.ggml.token_type", OJ_GGUF_INT32, vocab, types, e);
    if (s == OJ_OK)
        s = oj_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", (int64_t)nm, merges, e);
    uint32_t id = (uint32_t)eot;
    if (s == OJ_OK && eot >= 0)
        s = oj_gguf_writer_set(w, "tokenizer.ggml.bos_token_id", OJ_GGUF_UINT32, &id, e);
    if (s == OJ_OK && eot >= 0)
        s = oj_gguf_writer_set(w, "tokenizer.ggml.eos_token_id", OJ_GGUF_UINT32, &id, e);
    free(merges);
    free(text);
    free(pads);
    free(types);
    free(tokens);
    json_decref(root);
    return s;
}


/* The BOS / EOS llama.cpp puts around a prompt from this file:
 * tokenizer.ggml.add_bos_token / add_eos_token (bool) when present, else
 * its defaults for byte-level BPE: BOS for the Llama 3 pre-tokenizers
 * ("llama-bpe", "llama3", "llama-v3"), no EOS. Set as tok's template. */
static oj_status gguf_template(const oj_gguf *g, const char *path, oj_tokenizer *tok,
                               oj_error *e) {
    int64_t pi = oj_gguf_find_key(g, "tokenizer.ggml.pre");
    const char *pre = pi >= 0 ? oj_gguf_kv_str(g, pi, NULL) : NULL;
    bool add[2] = {pre && (strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "llama3") == 0 ||
                           strcmp(pre, "llama-v3") == 0),
                   false};
    static const char *const flag_key[2] = {"tokenizer.ggml.add_bos_token",
                                            "tokenizer.ggml.add_eos_token"};
    static const char *const id_key[2] = {"tokenizer.ggml.bos_token_id",
                                          "tokenizer.ggml.eos_token_id"};
    int32_t id[2] = {-1, -1};
    for (int k = 0; k < 2; k++) {
        int64_t fi = oj_gguf_find_key(g, flag_key[k]);
        int64_t v = 0;
        if (fi >= 0 && (oj_gguf_kv_type(g, fi) != OJ_GGUF_BOOL || !oj_gguf_kv_int(g, fi, &v)))
            return oj_error_set(e, OJ_ERR_CORRUPT, "%s: %s is not a bool", path, flag_key[k]);
        if (fi >= 0) add[k] = v != 0;
        if (!add[k]) continue;
        int64_t ii = oj_gguf_find_key(g, id_key[k]);
        uint64_t u = 0;
        if (ii < 0 || !oj_gguf_kv_uint(g, ii, &u) || u >= (uint64_t)oj_tokenizer_vocab_size(tok))
            return oj_error_set(e, OJ_ERR_CORRUPT, "%s: %s %s (%s asks for the token)", path,
                                id_key[k], ii < 0 ? "is missing" : "is not a token id",
                                fi >= 0 ? flag_key[k] : "the pre-tokenizer's default");
        id[k] = (int32_t)u;
    }
    return oj_tokenizer_set_template(tok, &id[0], add[0] ? 1 : 0, &id[1], add[1] ? 1 : 0, e);
}

oj_status oj_gguf_tokenizer(const oj_gguf *g, const char *path, oj_tokenizer **out,
                            oj_error *e) {
    if (g == NULL || out == NULL)
        return oj_error_set(e, OJ_ERR_INVALID_ARGUMENT, "gguf tokenizer: NULL argument");
    *out = NULL;
    if (path == NULL) path = "GGUF file";
    int64_t mi = oj_gguf_find_key(g, "tokenizer.ggml.model");
    const char *model = mi >= 0 ? oj_gguf_kv_str(g, mi, NULL) : NULL;
    if (model == NULL || strcmp(model, "no_vocab") == 0)
        return oj_error_set(e, OJ_ERR_OUT_OF_RANGE, "%s: no tokenizer (tokenizer.ggml.model %s)",
                            path, model ? "is \"no_vocab\"" : "missing");
    if (strcmp(model, "gpt2") != 0)
        return oj_error_set(e, OJ_ERR_UNSUPPORTED,
                            "%s: tokenizer.ggml.model \"%.40s\": only \"gpt2\" (byte-level BPE "
                            "with merges) is read",
                            path, model);
    int64_t ti = oj_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t gi = oj_gguf_find_key(g, "tokenizer.ggml.merges");
    int64_t yi = oj_gguf_find_key(g, "tokenizer.ggml.token_type");
    if (ti < 0 || oj_gguf_kv_array_type(g, ti) != OJ_GGUF_STRING)
        return oj_error_set(e, OJ_ERR_CORRUPT, "%s: tokenizer.ggml.tokens %s", path,
                            ti < 0 ? "missing" : "is not an array of strings");
    if (gi < 0 || oj_gguf_kv_array_type(g, gi) != OJ_GGUF_STRING)
        return oj_error_set(e, OJ_ERR_CORRUPT, "%s: tokenizer.ggml.merges %s", path,
                            gi < 0 ? "missing" : "is not an array of strings");
    const int64_t nt = oj_gguf_kv_array_len(g, ti), nm = oj_gguf_kv_array_len(g, gi);
    const uint8_t *types = NULL;
    if (yi >= 0) {
        oj_gguf_type yt = oj_gguf_kv_array_type(g, yi);
        if ((yt != OJ_GGUF_INT32 && yt != OJ_GGUF_UINT32) || oj_gguf_kv_array_len(g, yi) != nt)
            return oj_error_set(e, OJ_ERR_CORRUPT,
                                "%s: tokenizer.ggml.token_type is not %lld 32-bit integers (one "
                                "per token)",
                                path, (long long)nt);
        types = oj_gguf_kv_array_data(g, yi);
    }
    const char **tokens = calloc((size_t)nt + 1, sizeof *tokens);
    const char **merges = calloc((size_t)nm + 1, sizeof *merges);
    oj_status s = OJ_OK;
    if (tokens == NULL || merges == NULL) s = oj_error_set(e, OJ_ERR_CAPACITY, "out of memory");
    for (int64_t i = 0; s == OJ_OK && i < nt; i++) {
        int32_t ty = 1;
        if (types) memcpy(&ty, types + 4 * i, 4); /* little-endian host (x86-64, aarch64) */
        tokens[i] = ty == 5 ? NULL : oj_gguf_kv_array_str(g, ti, i, NULL);
    }
    for (int64_t i = 0; s == OJ_OK && i < nm; i++) merges[i] = oj_gguf_kv_array_str(g, gi, i, NULL);
    char what[4200];
    snprintf(what, sizeof what, "%s tokenizer.ggml", path);
    if (s == OJ_OK) s = oj_tokenizer_from_gpt2_lists(nt, tokens, nm, merges, what, out, e);
    free(tokens);
    free(merges);
    if (s == OJ_OK) s = gguf_template(g, path, *out, e);
    if (s != OJ_OK) {
        oj_tokenizer_free(*out);
        *out = NULL;
    }
    return s;
}

oj_status oj_gguf_copy_tokenizer(oj_gguf_writer *w, const oj_gguf *g, oj_error *e) {
    if (w == NULL || g == NULL)
        return oj_error_set(e, OJ_ERR_INVALID_ARGUMENT, "gguf copy tokenizer: NULL argument");
    static const char prefix[] = "tokenizer.ggml.";
    oj_status s = OJ_OK;
    for (int64_t i = 0; s == OJ_OK && i < oj_gguf_kv_count(g); i++) {
        const char *key = oj_gguf_kv_key(g, i);
        if (strncmp(key, prefix, sizeof prefix - 1) != 0) continue;
        oj_gguf_type t = oj_gguf_kv_type(g, i);
        if (t == OJ_GGUF_STRING) {
            s = oj_gguf_writer_set_str(w, key, oj_gguf_kv_str(g, i, NULL), e);
        } else if (t != OJ_GGUF_ARRAY) { /* a scalar: its bytes as the file has them */
            uint64_t u = 0;
            int64_t v = 0;
            double f = 0;
            uint8_t raw[8] = {0};
            size_t sz = oj_gguf_type_size(t);
            if (t == OJ_GGUF_FLOAT32 || t == OJ_GGUF_FLOAT64) {
                oj_gguf_kv_float(g, i, &f);
                float f32 = (float)f;
                memcpy(raw, t == OJ_GGUF_FLOAT32 ? (const void *)&f32 : (const void *)&f, sz);
            } else if (oj_gguf_kv_uint(g, i, &u)) {
                memcpy(raw, &u, sz); /* little-endian host: the low bytes */
            } else {
                oj_gguf_kv_int(g, i, &v);
                memcpy(raw, &v, sz);
            }
            s = oj_gguf_writer_set(w, key, t, raw, e);
        } else if (oj_gguf_kv_array_type(g, i) == OJ_GGUF_STRING) {
            const int64_t n = oj_gguf_kv_array_len(g, i);
            const char **strs = calloc((size_t)n + 1, sizeof *strs);
            if (strs == NULL) return oj_error_set(e, OJ_ERR_CAPACITY, "out of memory");
            for (int64_t j = 0; j < n; j++) strs[j] = oj_gguf_kv_array_str(g, i, j, NULL);
            s = oj_gguf_writer_set_str_array(w, key, n, strs, e);
            free(strs);
        } else { /* numeric elements, copied as the file has them */
            s = oj_gguf_writer_set_array(w, key, oj_gguf_kv_array_type(g, i),
                                         oj_gguf_kv_array_len(g, i), oj_gguf_kv_array_data(g, i),
                                         e);
        }
    }
    return s;
}
