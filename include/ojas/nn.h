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
    OJ_INIT_CONSTANT = 2,       /* a */
    OJ_INIT_NORMAL = 3,         /* mean a, std b */
    OJ_INIT_UNIFORM = 4,        /* [a, b) */
    OJ_INIT_TRUNC_NORMAL = 5,   /* mean a, std b, cut to [lo, hi] (torch trunc_normal_) */
    OJ_INIT_XAVIER_UNIFORM = 6, /* U(-g sqrt(6 / (fan_in + fan_out)), +...) */
    OJ_INIT_XAVIER_NORMAL = 7,  /* N(0, g^2 2 / (fan_in + fan_out)) */
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

#ifdef __cplusplus
}
#endif
#endif /* OJAS_NN_H */
