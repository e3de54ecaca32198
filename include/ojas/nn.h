/* ojas nn: a registry of named parameters (the state_dict), order-independent
 * seeded initialisation, and layers as small structs with init/forward
 * functions.
 *
 * Parameter names are dotted paths (`transformer.h.0.attn.c_attn.weight`).
 * A layer's init takes the registry and a prefix and registers its tensors
 * under "<prefix>.<leaf>"; its forward takes the layer struct and inputs
 * and returns a new tensor owned by the current scope (NULL with the error
 * recorded on the engine, as every op). */
#ifndef OJAS_NN_H
#define OJAS_NN_H

#include "ojas/core.h"
#include "ojas/io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- init
 * A parameter's initial values depend only on (seed, its name, the element
 * index): the name's XXH64 (seed 0) is the Philox4x32-10 stream (counter
 * words 2-3), the seed the key, and element i reads counter block i / 2:
 * uniform takes 53 bits from words (0,1) or (2,3); normal is a Box-Muller
 * pair from words (0,1) and (2,3) (cos for even i, sin for odd). Values are
 * computed in double on the host and rounded to the tensor's dtype, so they
 * are the same on every device and whatever the creation order. */

typedef enum oj_init_kind {
    OJ_INIT_ZEROS = 0,
    OJ_INIT_ONES = 1,
    OJ_INIT_CONSTANT = 2,        /* a */
    OJ_INIT_NORMAL = 3,          /* mean a, std b */
    OJ_INIT_UNIFORM = 4,         /* [a, b) */
    OJ_INIT_TRUNC_NORMAL = 5,    /* mean a, std b, cut to [lo, hi] (torch trunc_normal_) */
    OJ_INIT_XAVIER_UNIFORM = 6,  /* U(-g sqrt(6 / (fan_in + fan_out)), +...) */
    OJ_INIT_XAVIER_NORMAL = 7,   /* N(0, g^2 2 / (fan_in + fan_out)) */
    OJ_INIT_KAIMING_UNIFORM = 8, /* U(-g sqrt(3 / fan), +...) */
    OJ_INIT_KAIMING_NORMAL = 9,  /* N(0, g^2 / fan) */
} oj_init_kind;

typedef enum oj_fan_mode { OJ_FAN_IN = 0, OJ_FAN_OUT = 1 } oj_fan_mode;

/* An initialiser. Fans follow torch.nn.init: for a [out, in, k...] tensor
 * fan_in = in * prod(k), fan_out = out * prod(k); rank < 2 has no fans. */
typedef struct oj_init {
    oj_init_kind kind;
    double a, b;      /* see oj_init_kind */
    double lo, hi;    /* trunc_normal bounds (absolute values, as torch's a, b) */
    double gain;      /* xavier, kaiming */
    oj_fan_mode mode; /* kaiming */
} oj_init;

oj_init oj_init_zeros(void);
oj_init oj_init_ones(void);
oj_init oj_init_constant(double value);
oj_init oj_init_normal(double mean, double std);
oj_init oj_init_uniform(double low, double high);
oj_init oj_init_trunc_normal(double mean, double std, double lo, double hi);
oj_init oj_init_xavier_uniform(double gain);
oj_init oj_init_xavier_normal(double gain);
oj_init oj_init_kaiming_uniform(double gain, oj_fan_mode mode);
oj_init oj_init_kaiming_normal(double gain, oj_fan_mode mode);
/* torch.nn.init.calculate_gain('leaky_relu', slope) = sqrt(2 / (1 + slope^2));
 * slope 0 gives ReLU's sqrt(2); slope sqrt(5) gives nn.Linear's default
 * kaiming_uniform, whose bound is 1 / sqrt(fan_in). */
double oj_init_leaky_relu_gain(double negative_slope);

/* Fill t (contiguous, any device) in place from `init`, as a pure function
 * of (seed, name, element index) described above. Random kinds need a
 * float dtype (OJ_ERR_DTYPE); zeros/ones/constant take any dtype. Bumps the
 * version. OJ_ERR_SHAPE for xavier/kaiming on rank < 2,
 * OJ_ERR_INVALID_ARGUMENT for bad parameters (std < 0, low >= high, lo >=
 * hi, NULL name), OJ_ERR_CAPACITY; recorded on t's engine. */
oj_status oj_init_tensor(oj_tensor *t, const oj_init *init, uint64_t seed, const char *name);

/* ---------------------------------------------------------------- registry */

/* Longest parameter name, bytes including the terminating NUL. */
#define OJ_PARAM_NAME_MAX 256

/* An ordered registry of named tensors: parameters (leaves requiring grad
 * unless frozen) and buffers (state that is saved but not trained, e.g.
 * running statistics; never require grad). Every tensor is owned by the
 * registry, unscoped, on the engine's device, and freed by
 * oj_params_free. Lookup by name is a linear scan. */
typedef struct oj_params oj_params;

/* A new empty registry whose initialisers use `seed`, in training mode.
 * NULL with OJ_ERR_CAPACITY recorded on eng. */
oj_params *oj_params_create(oj_engine *eng, uint64_t seed);
/* Free the registry and release its tensors (a tensor also retained
 * elsewhere stays alive there). NULL is a no-op. */
void oj_params_free(oj_params *p);
oj_engine *oj_params_engine(const oj_params *p);
uint64_t oj_params_seed(const oj_params *p);

/* "<prefix>.<leaf>" (or leaf when prefix is NULL or "") into buf of len
 * bytes; returns buf, or NULL when it does not fit. */
char *oj_param_name(char *buf, size_t len, const char *prefix, const char *leaf);

/* Register a new parameter `name` (copied; non-empty, shorter than
 * OJ_PARAM_NAME_MAX, unique) of shape [rank dims] and dtype dt, initialised
 * by *init from (seed, name), requiring grad. Returns the tensor (borrowed:
 * owned by the registry), or NULL with the error recorded on the engine:
 * OJ_ERR_INVALID_ARGUMENT (bad or duplicate name), and those of
 * oj_init_tensor and tensor creation. */
oj_tensor *oj_params_add(oj_params *p, const char *name, int rank, const int64_t *shape,
                         oj_dtype dt, const oj_init *init);
/* The same for a buffer (requires_grad false; any dtype for constant
 * initialisers). */
oj_tensor *oj_params_add_buffer(oj_params *p, const char *name, int rank, const int64_t *shape,
                                oj_dtype dt, const oj_init *init);
/* Register an existing leaf tensor t of p's engine under `name`; the
 * registry takes a reference (oj_retain), released by oj_params_free. A
 * parameter's requires_grad is left as is; a buffer's is turned off.
 * Returns t or NULL with the error recorded. */
oj_tensor *oj_params_adopt(oj_params *p, const char *name, oj_tensor *t, bool buffer);

/* Number of entries (parameters and buffers). */
int64_t oj_params_count(const oj_params *p);
/* Entry i's name / tensor (borrowed); NULL out of range. */
const char *oj_params_name(const oj_params *p, int64_t i);
oj_tensor *oj_params_tensor(const oj_params *p, int64_t i);
bool oj_params_is_buffer(const oj_params *p, int64_t i);
/* Index of `name`, or -1. */
int64_t oj_params_find(const oj_params *p, const char *name);
/* Tensor of `name`, or NULL (no error recorded). */
oj_tensor *oj_params_get(const oj_params *p, const char *name);
/* Elements over parameters (buffers excluded); trainable_only counts only
 * those requiring grad. */
int64_t oj_params_numel(const oj_params *p, bool trainable_only);

/* Freeze (requires_grad false, grad dropped) or unfreeze every parameter
 * whose name equals `prefix` or starts with "<prefix>." ("" or NULL: all).
 * Buffers are never unfrozen. Returns the number of parameters matched. */
int64_t oj_params_freeze(oj_params *p, const char *prefix, bool frozen);
/* Drop every gradient. */
void oj_params_zero_grad(oj_params *p);

/* Convert every float parameter and buffer to the float dtype dt in place
 * (PyTorch's module.to(dtype)): each handle keeps its identity and takes a
 * converted copy of its data (oj_set_data); integer buffers are left
 * alone. Every copy is made and every swap checked before any tensor
 * changes, so peak memory holds both dtypes and a failure changes nothing.
 * For inference in bf16/f16 weights (half the bytes per decoded token);
 * create optimizers after converting. Errors: OJ_ERR_DTYPE (dt not
 * float), OJ_ERR_CAPACITY (budget), OJ_ERR_STATE (oj_set_data's: a
 * tensor saved by a recorded autograd graph, live CUDA graphs). */
oj_status oj_params_to_dtype(oj_params *p, oj_dtype dt);

/* Train/eval mode flag read by Dropout and BatchNorm (default training). */
void oj_params_set_training(oj_params *p, bool training);
bool oj_params_training(const oj_params *p);

/* The state_dict: every entry (parameters and buffers) in registration
 * order, borrowed; valid until the next add. For oj_checkpoint_save /
 * oj_checkpoint_load and oj_optim_add_group (which skips tensors that do not
 * require grad). */
oj_named_tensors oj_params_state_dict(const oj_params *p);

/* Save the state_dict to a safetensors file (oj_safetensors_save). */
oj_status oj_params_save(const oj_params *p, const char *path, const char *const *metadata,
                         oj_error *err);
/* Load a safetensors file into the registry. strict: the file's names must
 * equal the registry's exactly (OJ_ERR_SHAPE naming a missing or unexpected
 * tensor); otherwise names on one side only are ignored. Every matched
 * tensor must have the same shape (OJ_ERR_SHAPE naming it); float dtypes
 * convert to the registry's dtype, other dtypes must match (OJ_ERR_DTYPE).
 * Everything is checked and staged before any tensor changes: a failed
 * load changes nothing. OJ_ERR_IO / OJ_ERR_CORRUPT from the reader. */
oj_status oj_params_load(oj_params *p, const char *path, bool strict, oj_error *err);

/* ---------------------------------------------------------------- layers
 * Each layer is a plain struct filled by its init, which registers the
 * layer's tensors in a registry under "<prefix>.<leaf>" (names as PyTorch's
 * modules use them) with the given dtype; the struct borrows them (they
 * live as long as the registry). init returns OJ_OK or the error (also
 * recorded on the engine); on failure neither the registry nor the
 * struct is changed.
 * `winit` / `binit` arguments choose the initialisers of weights / biases;
 * NULL means PyTorch's default for that module. Forward functions take
 * inputs of the layer's dtype and return a new tensor owned by the current
 * scope (NULL with the error recorded), recorded for autograd. Layers whose
 * behaviour depends on training keep the registry and read its mode
 * (oj_params_set_training). */

/* Linear: y = x W^T + b, x [..., in] -> [..., out]; "weight" [out, in],
 * "bias" [out]. Defaults (torch.nn.Linear): U(-1/sqrt(in), 1/sqrt(in))
 * for both. */
typedef struct oj_nn_linear {
    oj_tensor *weight, *bias; /* bias NULL when built without */
    int64_t in_features, out_features;
} oj_nn_linear;
oj_status oj_nn_linear_init(oj_nn_linear *l, oj_params *p, const char *prefix, int64_t in,
                            int64_t out, bool bias, oj_dtype dt, const oj_init *winit,
                            const oj_init *binit);
oj_tensor *oj_nn_linear_forward(const oj_nn_linear *l, oj_tensor *x);

/* Embedding: idx [...] i64/i32 -> [..., dim]; "weight" [num, dim],
 * default N(0, 1) (torch.nn.Embedding). */
typedef struct oj_nn_embedding {
    oj_tensor *weight;
    int64_t num_embeddings, embedding_dim;
} oj_nn_embedding;
oj_status oj_nn_embedding_init(oj_nn_embedding *l, oj_params *p, const char *prefix, int64_t num,
                               int64_t dim, oj_dtype dt, const oj_init *winit);
oj_tensor *oj_nn_embedding_forward(const oj_nn_embedding *l, oj_tensor *idx);

/* LayerNorm over the last dim (size C): "weight" [C] ones, "bias" [C]
 * zeros (bias false: none). eps e.g. 1e-5. Ba et al. 2016. */
typedef struct oj_nn_layer_norm {
    oj_tensor *weight, *bias;
    double eps;
} oj_nn_layer_norm;
oj_status oj_nn_layer_norm_init(oj_nn_layer_norm *l, oj_params *p, const char *prefix, int64_t c,
                                bool bias, double eps, oj_dtype dt);
oj_tensor *oj_nn_layer_norm_forward(const oj_nn_layer_norm *l, oj_tensor *x);

/* RMSNorm over the last dim: "weight" [C] ones (affine false: none, a
 * parameter-free norm). Zhang & Sennrich 2019. */
typedef struct oj_nn_rms_norm {
    oj_tensor *weight;
    double eps;
} oj_nn_rms_norm;
oj_status oj_nn_rms_norm_init(oj_nn_rms_norm *l, oj_params *p, const char *prefix, int64_t c,
                              bool affine, double eps, oj_dtype dt);
oj_tensor *oj_nn_rms_norm_forward(const oj_nn_rms_norm *l, oj_tensor *x);

/* Dropout with probability p in [0, 1], active in training mode only
 * (identity view in eval). No parameters; `params` only gives the mode. */
typedef struct oj_nn_dropout {
    const oj_params *params;
    double p;
} oj_nn_dropout;
oj_status oj_nn_dropout_init(oj_nn_dropout *l, const oj_params *p, double prob);
oj_tensor *oj_nn_dropout_forward(const oj_nn_dropout *l, oj_tensor *x);

/* Causal self-attention with grouped-query attention (Ainslie et al.
 * 2023) and optional rotary embeddings (Su et al. 2021, half-split).
 * x [B, T, C] -> [B, T, C]. Tensors: "c_attn" Linear C -> (H + 2 Hkv) D
 * (q, k, v stacked in that order, D = C / H), "c_proj" Linear C -> C.
 * Dropout (p = dropout, training only) is applied to the output
 * projection (attention probabilities are not dropped). */
typedef struct oj_nn_attention_config {
    int64_t n_embd;            /* C */
    int64_t n_head;            /* H, divides C */
    int64_t n_kv_head;         /* Hkv, divides H; 0 means H (plain multi-head) */
    bool bias;                 /* biases on c_attn and c_proj */
    bool rope;                 /* rotate q and k by position */
    double rope_theta;         /* 0 means 10000 */
    double dropout;            /* residual dropout probability */
    const oj_init *winit;      /* c_attn weight (NULL: Linear default) */
    const oj_init *proj_winit; /* c_proj weight (NULL: as winit) */
} oj_nn_attention_config;
typedef struct oj_nn_attention {
    oj_nn_linear c_attn, c_proj;
    oj_nn_dropout resid_dropout;
    int64_t n_head, n_kv_head, head_dim;
    bool rope;
    double rope_theta;
} oj_nn_attention;
oj_status oj_nn_attention_init(oj_nn_attention *a, oj_params *p, const char *prefix,
                               const oj_nn_attention_config *cfg, oj_dtype dt);
/* x [B, T, C]; positions (for rope) start at position_offset. */
oj_tensor *oj_nn_attention_forward(const oj_nn_attention *a, oj_tensor *x, int64_t position_offset);

/* MLP: c_proj(gelu(c_fc(x))), "c_fc" Linear C -> hidden, "c_proj" Linear
 * hidden -> C, GELU exact or tanh (GPT-2's), then dropout (training). */
typedef struct oj_nn_mlp {
    oj_nn_linear c_fc, c_proj;
    oj_nn_dropout dropout;
    bool gelu_tanh;
} oj_nn_mlp;
oj_status oj_nn_mlp_init(oj_nn_mlp *m, oj_params *p, const char *prefix, int64_t c, int64_t hidden,
                         bool bias, bool gelu_tanh, double dropout, oj_dtype dt,
                         const oj_init *winit, const oj_init *proj_winit);
oj_tensor *oj_nn_mlp_forward(const oj_nn_mlp *m, oj_tensor *x);

/* SwiGLU MLP (Shazeer 2020): down_proj(silu(gate_proj(x)) * up_proj(x)),
 * Linear layers without bias "gate_proj", "up_proj" (C -> hidden) and
 * "down_proj" (hidden -> C), as Llama names them. */
typedef struct oj_nn_swiglu {
    oj_nn_linear gate_proj, up_proj, down_proj;
} oj_nn_swiglu;
oj_status oj_nn_swiglu_init(oj_nn_swiglu *m, oj_params *p, const char *prefix, int64_t c,
                            int64_t hidden, oj_dtype dt, const oj_init *winit,
                            const oj_init *proj_winit);
oj_tensor *oj_nn_swiglu_forward(const oj_nn_swiglu *m, oj_tensor *x);

/* Conv2d: x [N, C, H, W] -> [N, O, OH, OW]; "weight" [O, C/groups, kh, kw],
 * "bias" [O]. Defaults (torch.nn.Conv2d): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
 * with fan_in = C/groups * kh * kw. */
typedef struct oj_nn_conv2d {
    oj_tensor *weight, *bias;
    int64_t stride[2], padding[2], dilation[2];
    int groups;
} oj_nn_conv2d;
oj_status oj_nn_conv2d_init(oj_nn_conv2d *l, oj_params *p, const char *prefix, int64_t in_ch,
                            int64_t out_ch, const int64_t kernel[2], const int64_t stride[2],
                            const int64_t padding[2], const int64_t dilation[2], int groups,
                            bool bias, oj_dtype dt, const oj_init *winit, const oj_init *binit);
oj_tensor *oj_nn_conv2d_forward(const oj_nn_conv2d *l, oj_tensor *x);

/* BatchNorm2d over x [N, C, H, W] (Ioffe & Szegedy 2015): "weight" [C]
 * ones, "bias" [C] zeros (affine false: none), buffers "running_mean"
 * zeros, "running_var" ones, "num_batches_tracked" i64 (as torch's
 * state_dict). Training mode uses batch statistics and updates the running
 * ones (momentum e.g. 0.1); eval uses the running ones. */
typedef struct oj_nn_batch_norm2d {
    const oj_params *params;
    oj_tensor *weight, *bias, *running_mean, *running_var, *num_batches_tracked;
    double momentum, eps;
} oj_nn_batch_norm2d;
oj_status oj_nn_batch_norm2d_init(oj_nn_batch_norm2d *l, oj_params *p, const char *prefix,
                                  int64_t c, bool affine, double momentum, double eps, oj_dtype dt);
oj_tensor *oj_nn_batch_norm2d_forward(const oj_nn_batch_norm2d *l, oj_tensor *x);

/* MaxPool2d (no parameters): stride NULL means the kernel size, padding
 * NULL means 0. */
typedef struct oj_nn_max_pool2d {
    int64_t kernel[2], stride[2], padding[2];
} oj_nn_max_pool2d;
oj_nn_max_pool2d oj_nn_max_pool2d_make(const int64_t kernel[2], const int64_t stride[2],
                                       const int64_t padding[2]);
oj_tensor *oj_nn_max_pool2d_forward(const oj_nn_max_pool2d *l, oj_tensor *x);

/* ---------------------------------------------------------------- sequential
 * A fixed list of steps applied in order, each a layer (by kind and
 * pointer, borrowed), an activation, a flatten, or a user function. */
typedef enum oj_nn_kind {
    OJ_NN_LINEAR = 0,
    OJ_NN_EMBEDDING,
    OJ_NN_LAYER_NORM,
    OJ_NN_RMS_NORM,
    OJ_NN_DROPOUT,
    OJ_NN_ATTENTION, /* position offset 0 */
    OJ_NN_MLP,
    OJ_NN_SWIGLU,
    OJ_NN_CONV2D,
    OJ_NN_BATCH_NORM2D,
    OJ_NN_MAX_POOL2D,
    OJ_NN_RELU, /* activations: layer NULL */
    OJ_NN_GELU,
    OJ_NN_GELU_TANH,
    OJ_NN_SILU,
    OJ_NN_TANH,
    OJ_NN_SIGMOID,
    OJ_NN_FLATTEN, /* dims 1.. merged: [N, ...] -> [N, prod] */
    OJ_NN_FN,      /* fn(ctx, x) */
} oj_nn_kind;

#define OJ_NN_SEQUENTIAL_MAX 64

typedef struct oj_nn_step {
    oj_nn_kind kind;
    const void *layer;
    oj_tensor *(*fn)(void *ctx, oj_tensor *x);
    void *ctx;
} oj_nn_step;

typedef struct oj_nn_sequential {
    int n;
    oj_nn_step steps[OJ_NN_SEQUENTIAL_MAX];
} oj_nn_sequential;

/* Append a step: `layer` points at the struct of that kind (NULL for
 * activations and flatten). OJ_ERR_OUT_OF_RANGE when full,
 * OJ_ERR_INVALID_ARGUMENT for a NULL layer where one is needed. */
oj_status oj_nn_sequential_add(oj_nn_sequential *s, oj_nn_kind kind, const void *layer);
/* Append a user function step. */
oj_status oj_nn_sequential_add_fn(oj_nn_sequential *s, oj_tensor *(*fn)(void *ctx, oj_tensor *x),
                                  void *ctx);
/* Run every step on x in order; intermediate tensors stay in the current
 * scope. Returns the last step's output (with no steps, a new view of x),
 * or NULL with the error recorded. */
oj_tensor *oj_nn_sequential_forward(const oj_nn_sequential *s, oj_tensor *x);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_NN_H */
