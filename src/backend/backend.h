/* The backend interface: a table of entry points that a device implements.
 * Core calls the memory entries; the ops layer calls the kernel entries
 * after validating shapes, dtypes and devices, so a backend never sees an
 * invalid request. Backends know nothing of autograd.
 * Every kernel is tested against the CPU backend (tests/gpu). */
#ifndef OJAS_BACKEND_H
#define OJAS_BACKEND_H

#include "core/internal.h"

/* Elementwise unary ops: out = f(x; alpha, beta). */
typedef enum oj_unary_op {
    OJ_UN_NEG, OJ_UN_ABS, OJ_UN_EXP, OJ_UN_LOG, OJ_UN_LOG1P, OJ_UN_SQRT, OJ_UN_RSQRT,
    OJ_UN_SQUARE, OJ_UN_SIGN, OJ_UN_RELU, OJ_UN_LEAKY_RELU /* alpha: slope */,
    OJ_UN_GELU_ERF, OJ_UN_GELU_TANH, OJ_UN_SILU, OJ_UN_SIGMOID, OJ_UN_TANH,
    OJ_UN_SOFTPLUS /* alpha: beta, beta: threshold */, OJ_UN_ELU /* alpha */, OJ_UN_MISH,
    OJ_UN_POW_SCALAR /* x^alpha */, OJ_UN_RPOW_SCALAR /* alpha^x */,
    OJ_UN_CLAMP /* [alpha, beta]; NaN bound = none */, OJ_UN_AFFINE /* alpha*x + beta */,
    OJ_UN_RECIPROCAL, OJ_UN_SIN, OJ_UN_COS, OJ_UN_NOT /* logical, to bool */,
    OJ_UN_ISNAN /* to bool */, OJ_UN_ISFINITE /* to bool */,
    OJ_UN_COUNT
} oj_unary_op;

/* Elementwise binary ops: out = f(a, b) (a and b already broadcast to
 * out's shape by stride-0 views). Comparisons and logical ops write bool. */
typedef enum oj_binary_op {
    OJ_BIN_ADD, OJ_BIN_SUB, OJ_BIN_MUL, OJ_BIN_DIV, OJ_BIN_POW, OJ_BIN_MAXIMUM,
    OJ_BIN_MINIMUM, OJ_BIN_EQ, OJ_BIN_NE, OJ_BIN_LT, OJ_BIN_LE, OJ_BIN_GT, OJ_BIN_GE,
    OJ_BIN_AND, OJ_BIN_OR, OJ_BIN_XOR,
    OJ_BIN_COUNT
} oj_binary_op;

/* Reductions over a set of dims (see reduce entry). */
typedef enum oj_reduce_op {
    OJ_RED_SUM, OJ_RED_MEAN, OJ_RED_PROD, OJ_RED_MAX, OJ_RED_MIN, OJ_RED_ARGMAX, OJ_RED_ARGMIN,
    OJ_RED_VAR /* p: correction */, OJ_RED_LOGSUMEXP, OJ_RED_NORM_L1, OJ_RED_NORM_L2,
    OJ_RED_NORM_INF, OJ_RED_ANY, OJ_RED_ALL,
    OJ_RED_COUNT
} oj_reduce_op;

/* Hyperparameters of one fused Adam/AdamW update (adam_step entry), as
 * torch.optim.Adam/AdamW name them; bias_correction1/2 = 1 - beta1/2^step. */
typedef struct oj_adam_args {
    double lr, beta1, beta2, eps, weight_decay;
    double bias_correction1, bias_correction2;
    bool decoupled; /* AdamW: p *= 1 - lr*wd first; Adam: g += wd*p (L2) */
    /* NULL, or (only when the backend's low_copies is set) a contiguous
     * bf16 tensor of the parameter's shape that adam_step_multi's writing
     * pass also fills with the new value, rounded as copy rounds it; with
     * low_t, of the transposed shape [cols, rows] of a 2-D parameter,
     * filled with the transpose (gpt2's Conv1D weights, read transposed) */
    oj_tensor *low;
    bool low_t;
    /* 0, or (under an open step gate, adam_step_multi's writing pass)
     * the index into the gate of 2 f64 words whose first 3 u32 receive,
     * by atomic max, the f32 bits of max |p|, max |m| and max v over the
     * new values (f64 values rounded up; +inf for a negative v):
     * step_gate_open zeroes them. A bound_at of 0 or >= 2^31: none. */
    int64_t bound_at;
} oj_adam_args;

/* Hyperparameters of one fused SGD update (sgd_step entry), as
 * torch.optim.SGD names them. first: the momentum buffer holds nothing yet
 * (it is set to the gradient, without dampening, as torch does). */
typedef struct oj_sgd_args {
    double lr, momentum, dampening, weight_decay;
    bool nesterov, first;
} oj_sgd_args;

/* Window geometry of im2col/col2im: kernel, stride, padding, dilation
 * (all > 0 except padding >= 0) and the output size they give. */
typedef struct oj_im2col_args {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t oh, ow;
} oj_im2col_args;

/* NCCL collectives behind oj_dist (include/ojas/dist.h) for a device
 * engine; `comm` is the backend's communicator. alltoall, allgather and
 * allgatherv enqueue on the engine's stream and wait for it (polling, at
 * most timeout_s: past that the communicator is aborted and OJ_ERR_DEVICE
 * names the wait), so they are complete on return. allreduce_sum only
 * enqueues (no host wait); `watch` arms the communicator's watchdog
 * thread, which ends the job through `fatal` when the stream's work so
 * far has not finished within timeout_s. Errors OJ_ERR_DEVICE with the
 * NCCL or CUDA message in err. */
typedef struct oj_backend_comm {
    /* A new ncclUniqueId into id (128 bytes), on the rank that makes it. */
    oj_status (*unique_id)(void *id, oj_error *err);
    /* ncclCommInitRank for (rank, world) on eng's device, and its
     * watchdog thread; fatal(ctx, message) is what the watchdog calls on
     * a timeout or an asynchronous NCCL error (it must not return). */
    oj_status (*init)(oj_engine *eng, const void *id, int rank, int world, double timeout_s,
                      void (*fatal)(void *ctx, const char *msg), void *ctx, void **comm,
                      oj_error *err);
    void (*destroy)(void *comm);
    /* send, recv: world * block bytes; block q of recv from rank q. */
    oj_status (*alltoall)(oj_engine *eng, void *comm, const void *send, void *recv,
                          size_t block, oj_error *err);
    /* all: world * block bytes; block q from rank q (mine is this rank's). */
    oj_status (*allgather)(oj_engine *eng, void *comm, const void *mine, void *all,
                           size_t block, oj_error *err);
    /* buf in place: bytes offsets[q] .. offsets[q + 1] from rank q. */
    oj_status (*allgatherv)(oj_engine *eng, void *comm, void *buf, const size_t *offsets,
                            oj_error *err);
    /* buf (count elements of dtype, f32 / f64 / bf16 / f16) in place: the
     * elementwise sum over the ranks (ncclAllReduce, ncclSum), enqueued on
     * the communicator's own stream after the work eng's stream holds
     * now, not waited for. */
    oj_status (*allreduce_sum)(oj_engine *eng, void *comm, void *buf, size_t count,
                               oj_dtype dtype, oj_error *err);
    /* eng's stream waits (on the device) for the all-reduces queued so far. */
    oj_status (*join)(oj_engine *eng, void *comm, oj_error *err);
    /* Arm the watchdog: what eng's stream holds now must finish within
     * timeout_s, or fatal is called with a message naming `what`. */
    oj_status (*watch)(oj_engine *eng, void *comm, const char *what, oj_error *err);
} oj_backend_comm;

struct oj__decode_sampler; /* ops/nn_decode.h */

typedef struct oj_backend {
    const char *name;
    oj_device_type type;
    /* Open device `index` for eng (store per-engine state in
     * eng->ext[OJ_EXT_BACKEND]). OJ_ERR_DEVICE with a message in err when it
     * cannot be opened. */
    oj_status (*open)(oj_engine *eng, int index, oj_error *err);
    void (*close)(oj_engine *eng);
    /* Free and total bytes of the device's memory now (cudaMemGetInfo);
     * NULL for the host, whose limit core finds itself. Sets the engine's
     * default root budget. */
    oj_status (*memory_info)(oj_engine *eng, int64_t *free_bytes, int64_t *total_bytes);
    /* Raw device memory; NULL when the device is out of memory. Budget
     * accounting is done by core before alloc is called. */
    void *(*alloc)(oj_engine *eng, size_t nbytes);
    void (*free)(oj_engine *eng, void *ptr, size_t nbytes);
    /* Virtual memory for graph pools (src/core/graph_pool.c), NULL when
     * the backend has none. vm_granularity: the unit of vm_map, 0 when
     * this device cannot map (the pool then keeps size-classed alloc
     * blocks). vm_reserve: `bytes` of address space with nothing behind
     * it; NULL on failure. vm_map: memory behind [base + off, + bytes)
     * (multiples of the unit), read-write for the device; false when the
     * device is out of memory. vm_unmap: waits for the device, then frees
     * one vm_map's memory. vm_release: gives the address range back (all
     * of it unmapped). */
    size_t (*vm_granularity)(oj_engine *eng);
    void *(*vm_reserve)(oj_engine *eng, size_t bytes);
    bool (*vm_map)(oj_engine *eng, void *base, size_t off, size_t bytes);
    void (*vm_unmap)(oj_engine *eng, void *base, size_t off, size_t bytes);
    void (*vm_release)(oj_engine *eng, void *base, size_t bytes);
    /* Byte copies; dst/src device pointers as named. */
    oj_status (*copy_h2d)(oj_engine *eng, void *dst, const void *src, size_t nbytes);
    oj_status (*copy_d2h)(oj_engine *eng, void *dst, const void *src, size_t nbytes);
    oj_status (*copy_d2d)(oj_engine *eng, void *dst, const void *src, size_t nbytes);
    oj_status (*memset0)(oj_engine *eng, void *dst, size_t nbytes);
    oj_status (*synchronize)(oj_engine *eng);
    /* Graph capture of the engine's stream (NULL where the device has no
     * graphs; see oj_graph_capture_begin): begin; end (the instantiated
     * graph in *graph); abort (drop a capture after an error); replay (run
     * it, then the deferred checks); destroy. */
    oj_status (*graph_begin)(oj_engine *eng);
    oj_status (*graph_end)(oj_engine *eng, void **graph);
    void (*graph_abort)(oj_engine *eng);
    oj_status (*graph_replay)(oj_engine *eng, void *graph);
    void (*graph_destroy)(oj_engine *eng, void *graph);

    /* ---- kernels. Arguments are validated by the ops layer: shapes fit,
     * dtypes are as documented, all tensors live on this device. Inputs may
     * have any strides (stride 0 for broadcast); outputs are contiguous
     * unless stated (elementwise entries accept strided outputs, and an
     * output may alias an input exactly, for in-place ops). Float compute is f32 for f32/bf16/f16 and f64 for f64.
     * Under OJ_NUMERICS_EXACT every reduction uses a fixed order. */

    /* out[i] = x[i] converted to out's dtype (x broadcast to out's shape). */
    oj_status (*copy)(oj_engine *eng, oj_tensor *out, const oj_tensor *x);
    oj_status (*fill)(oj_engine *eng, oj_tensor *out, double value);
    oj_status (*unary)(oj_engine *eng, oj_unary_op op, oj_tensor *out, const oj_tensor *x,
                       double alpha, double beta);
    /* dx = dy * f'(x) for differentiable unary ops (y = f(x) given too). */
    oj_status (*unary_backward)(oj_engine *eng, oj_unary_op op, oj_tensor *dx,
                                const oj_tensor *x, const oj_tensor *y, const oj_tensor *dy,
                                double alpha, double beta);
    oj_status (*binary)(oj_engine *eng, oj_binary_op op, oj_tensor *out, const oj_tensor *a,
                        const oj_tensor *b);
    /* out = cond ? a : b (cond bool, all broadcast to out). */
    oj_status (*where)(oj_engine *eng, oj_tensor *out, const oj_tensor *cond,
                       const oj_tensor *a, const oj_tensor *b);
    /* Philox fill: uniform [lo, hi) or normal(mean=lo, std=hi), counter
     * block `offset` of (seed, stream). */
    oj_status (*rand)(oj_engine *eng, oj_tensor *out, bool normal, double lo, double hi,
                      uint64_t seed, uint64_t offset);
    /* Reduce x over the dims set in dim_mask (bit d = dim d). out has x's
     * rank with reduced dims of size 1 (keepdim form), contiguous. For
     * MAX/MIN `idx` (i64, same shape, may be NULL) receives the index along
     * the single reduced dim (first occurrence); ARGMAX/ARGMIN write i64 to
     * out. Accumulation is in double, in index-increasing order. */
    oj_status (*reduce)(oj_engine *eng, oj_reduce_op op, oj_tensor *out, oj_tensor *idx,
                        const oj_tensor *x, uint32_t dim_mask, double p);
    /* Further kernel entries (matmul, nn) are appended below. */

    /* Batched matrix multiply: out[i] = a[i] @ b[i] (accumulate: out[i] +=
     * a[i] @ b[i]) for i < Bt. a [Bt, M, K], b [Bt, K, N] are rank-3 views
     * with arbitrary strides (stride 0 on a broadcast batch, transposes
     * expressed by strides); out [Bt, M, N] is contiguous and does not
     * overlap a or b. a, b, out share one dtype: f32, f64, bf16 or f16
     * (bf16/f16 compute in f32); or a and b are both bf16 or both f16 and
     * out is f32: the f32 sums go into out (accumulate: added to it)
     * without rounding to 16 bits (a chunked gradient accumulates into its
     * f32 buffer with no 16-bit product in between; every backend must
     * take this form). K may be 0 (out = 0, or unchanged when
     * accumulating). Under OJ_NUMERICS_EXACT each element sums over k in
     * index-increasing order (bit-identical across runs and thread counts). */
    oj_status (*matmul)(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                        bool accumulate);
    /* Optional (NULL: the ops layer copies the bias into out and calls
     * matmul accumulating): out[i] = a[i] @ b[i] + bias, bias [N] of out's
     * dtype broadcast over the rows: the f32 (f64) sum plus the bias,
     * rounded once. Under OJ_NUMERICS_EXACT the bits of that
     * copy-and-accumulate; otherwise the GEMM may sum over k in another
     * order (a fused bias epilogue's algorithm). */
    oj_status (*matmul_bias)(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                             const oj_tensor *b, const oj_tensor *bias);
    /* Optional (NULL, or OJ_ERR_UNSUPPORTED returned with nothing
     * recorded: the ops layer runs matmul then unary_backward): out =
     * (a @ b) * f'(x) for the unary op f (OJ_UN_GELU_TANH is the one CUDA
     * takes), i.e. the gradient of f's input from the product giving the
     * gradient of its output. a [1, M, K], b [1, K, N] as matmul's, out and
     * x [1, M, N] of one dtype. The product is not rounded before the
     * multiply (one rounding, into out), so the bits are not the unfused
     * pair's; the backend uses it only under OJ_NUMERICS_FAST. */
    oj_status (*matmul_act_backward)(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                                     const oj_tensor *b, const oj_tensor *x, oj_unary_op op);
    /* Optional (NULL, or OJ_ERR_UNSUPPORTED returned with nothing
     * recorded: the ops layer runs matmul and sums the rows of dy itself):
     * out = a @ b and dbias[m] = the sum over k of a[m, k], i.e. a
     * linear's weight gradient dW = dy^T x and its bias gradient db from
     * one GEMM that reduces dy (a) as it reads it. a [1, M, K], b [1, K,
     * N], out [1, M, N] as matmul's; dbias [M] contiguous; one dtype. db
     * is summed in f32 and rounded once, in the GEMM's order, so neither
     * result has the unfused pair's bits: the backend uses it only under
     * OJ_NUMERICS_FAST. */
    oj_status (*matmul_bgrad)(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                              const oj_tensor *b, oj_tensor *dbias);
    /* Optional (NULL, or OJ_ERR_UNSUPPORTED returned with nothing
     * recorded: the ops layer runs the linear and then the activation):
     * pre = a @ b + bias and out = f(pre) from one GEMM (f the unary op;
     * OJ_UN_GELU_TANH is the one CUDA takes), i.e. a linear layer and the
     * activation after it without a pass over pre. a [1, M, K], b [1, K,
     * N] as matmul's, out and pre [1, M, N] row-major, bias [N]
     * contiguous, one dtype. f reads the f32 sum before pre is rounded,
     * so out is not f(pre)'s bits: the backend uses it only under
     * OJ_NUMERICS_FAST. */
    oj_status (*matmul_bias_act)(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                                 const oj_tensor *b, const oj_tensor *bias, oj_tensor *pre,
                                 oj_unary_op op);
    /* Inclusive prefix sum along `dim`: out[.., i, ..] = sum of x[.., j, ..]
     * for j <= i (reverse: j >= i). out contiguous, shaped like x; dtype x's
     * for float x, i64 for integer/bool x. A rank-0 x has dim 0 (a copy).
     * Sums in double (int64 for integers), in order along dim. */
    oj_status (*cumsum)(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                        bool reverse);
    /* ---- optimizer updates (CPU: src/backend/cpu/cpu_optim.c; called by
     * src/optim). All tensors contiguous, one shape, one dtype: f32 or f64
     * (OJ_ERR_DTYPE otherwise). Elementwise in torch.optim's op order,
     * rounding to the dtype after each tensor op. With check_only the
     * entry writes nothing and returns OJ_ERR_NUMERIC (recording nothing)
     * when any new parameter or state value would be non-finite; the
     * optimizer runs it before the writing call so a skipped step changes
     * nothing. */
    /* Adam (Kingma & Ba 2015) / AdamW (Loshchilov & Hutter 2019), one
     * tensor: [AdamW p *= 1 - lr wd | Adam g += wd p]; m = b1 m + (1-b1) g;
     * v = b2 v + (1-b2) g^2; p += -(lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps). */
    oj_status (*adam_step)(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                           oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                           bool check_only);
    /* SGD: d = g + wd p; buf = first ? d : mom buf + (1-damp) d;
     * d = nesterov ? d + mom buf : buf (when momentum != 0; momentum_buf
     * NULL when momentum == 0); p += -lr d. */
    oj_status (*sgd_step)(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                          oj_tensor *momentum_buf, const oj_sgd_args *args, bool check_only);
    /* Muon momentum (Jordan 2024): b = mu buf + g. update NULL: buf = b in
     * place; else buf is left as is and update = nesterov ? g + mu b : b. */
    oj_status (*muon_momentum)(oj_engine *eng, oj_tensor *buf, const oj_tensor *grad,
                               oj_tensor *update, double momentum, bool nesterov);
    /* p = p * decay + alpha * (update * scale) (decay 1 and scale 1 skip
     * their multiplies). check_only as above. */
    oj_status (*apply_update)(oj_engine *eng, oj_tensor *param, const oj_tensor *update,
                              double alpha, double scale, double decay, bool check_only);

    /* ---- nn (CPU: src/backend/cpu/cpu_nn_*.c). Unless stated, tensors are
     * contiguous, float tensors share one dtype (f32, f64, bf16, f16), index
     * tensors are i64 or i32, and "stat" tensors (mean, rstd, lse, per-row
     * losses) are f64 for f64 inputs and f32 otherwise. The CPU computes and
     * accumulates in double, rows in index-increasing order (deterministic). */

    /* out [N, C] row n = weight [V, C] row idx[n] (idx [N]). Every index is
     * checked: one outside [0, V) records OJ_ERR_OUT_OF_RANGE naming
     * "embedding", the index and its position, and nothing is promised
     * about out. */
    oj_status (*embedding_forward)(oj_engine *eng, oj_tensor *out, const oj_tensor *weight,
                                   const oj_tensor *idx);
    /* dweight [V, C] = for n = 0..N-1 in order: row idx[n] += dout [N, C]
     * row n. dweight is overwritten (rows no index names are zero). The
     * indices were checked by the forward. */
    oj_status (*embedding_backward)(oj_engine *eng, oj_tensor *dweight, const oj_tensor *dout,
                                    const oj_tensor *idx);
    /* Layer norm over the last dim of x [N, C] (Ba et al. 2016):
     * out = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps),
     * var biased. weight, bias [C] or NULL (ones, zeros). mean, rstd [N]
     * stat dtype, or NULL when not needed. out has x's dtype, or (x f32)
     * bf16/f16: then it holds the f32 result rounded once as copy rounds
     * f32 to that dtype (the bits of an f32 out then a cast; the autocast
     * norm feeding a linear, which needs no cast then). The same for every
     * norm forward entry below (rms_norm_forward, add_norm_forward: x there
     * is sum). */
    oj_status (*layer_norm_forward)(oj_engine *eng, oj_tensor *out, oj_tensor *mean,
                                    oj_tensor *rstd, const oj_tensor *x, const oj_tensor *weight,
                                    const oj_tensor *bias, double eps);
    /* From dy [N, C], x, the forward's mean and rstd and weight (NULL:
     * ones): dx [N, C], dweight [C], dbias [C]; each output may be NULL
     * (not wanted). dweight/dbias sum over rows in index order. dy has
     * x's dtype or (x f32) bf16/f16 (the gradient of a low-dtype out):
     * the same bits as dy cast to f32 first (exact). The same holds for
     * rms_norm_backward and norm_backward_add. */
    oj_status (*layer_norm_backward)(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                     oj_tensor *dbias, const oj_tensor *dy, const oj_tensor *x,
                                     const oj_tensor *mean, const oj_tensor *rstd,
                                     const oj_tensor *weight);
    /* RMS norm over the last dim of x [N, C] (Zhang & Sennrich 2019):
     * out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps); weight [C]
     * or NULL; rstd [N] stat dtype or NULL. */
    oj_status (*rms_norm_forward)(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                  const oj_tensor *x, const oj_tensor *weight, double eps);
    /* dx [N, C] and dweight [C] (either NULL: not wanted) from dy, x, rstd
     * and weight (NULL: ones). */
    oj_status (*rms_norm_backward)(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                   const oj_tensor *dy, const oj_tensor *x, const oj_tensor *rstd,
                                   const oj_tensor *weight);
    /* Residual add + norm (vLLM's fused_add_rms_norm): sum = x + r, then
     * out = layer norm (rms false) or RMS norm (rms true; bias NULL) of sum
     * over its last dim. x, r: float, one shape [..., C], any strides;
     * sum: contiguous, x's shape, their promoted dtype; out: contiguous
     * like sum; weight, bias [C] contiguous of sum's dtype or NULL; mean,
     * rstd [N] stat dtype or NULL. sum, out, mean and rstd are the bits
     * binary(OJ_BIN_ADD) then layer_norm_forward / rms_norm_forward give
     * on the same backend (the norm reads sum as stored). */
    oj_status (*add_norm_forward)(oj_engine *eng, oj_tensor *out, oj_tensor *sum,
                                  oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                                  const oj_tensor *r, const oj_tensor *weight,
                                  const oj_tensor *bias, double eps, bool rms);
    /* OPTIONAL (NULL: the norm's backward entry, binary(OJ_BIN_ADD) and
     * copy, as separate steps). The backward of add_norm_forward with the
     * residual gradient folded in: dx [N, C] = dres + the dx that
     * layer_norm_backward (rms false) / rms_norm_backward (rms true; mean
     * and dbias NULL) gives for dy, x (= sum), mean, rstd, weight: one
     * float add rounded once to dx's dtype, the bits of binary(OJ_BIN_ADD,
     * dx, dres, norm dx) on the same backend. dres [N, C] of x's dtype, or
     * NULL (adds nothing: dx is the norm's dx). dx_low [N, C] (NULL: not
     * wanted; only for x f32) bf16 or f16: dx rounded as copy rounds it
     * (the gradient of the residual add's low-dtype operand, the autocast
     * branch). dx required, dweight/dbias optional, as the norm's entry;
     * every tensor contiguous, x's dtype but dy (see layer_norm_backward)
     * and dx_low. One pass over the rows where the backend can: the
     * residual stream's gradient read and written once (vLLM / Liger
     * fuse the residual gradient the same way). */
    oj_status (*norm_backward_add)(oj_engine *eng, oj_tensor *dx, oj_tensor *dx_low,
                                   oj_tensor *dweight, oj_tensor *dbias, const oj_tensor *dy,
                                   const oj_tensor *dres, const oj_tensor *x,
                                   const oj_tensor *mean, const oj_tensor *rstd,
                                   const oj_tensor *weight, bool rms);
    /* Softmax (log false) or log-softmax (log true) of x over dim `dim`
     * (0 <= dim < rank, rank >= 1), max-subtracted; out shaped like x. */
    oj_status (*softmax_forward)(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                                 bool log);
    /* Given the forward's output y and dy (same shape): softmax
     * dx = y * (dy - sum(dy * y)); log-softmax dx = dy - exp(y) * sum(dy),
     * sums over dim. */
    oj_status (*softmax_backward)(oj_engine *eng, oj_tensor *dx, const oj_tensor *y,
                                  const oj_tensor *dy, int dim, bool log);
    /* Fused log-softmax + NLL with label smoothing eps over logits [N, V]
     * and targets [N]: lse[n] = logsumexp(row n) (lse may be NULL),
     * loss[n] = (1 - eps) (lse - x[t]) + eps (lse - mean_j x[j]); rows whose
     * target equals ignore_index get loss 0 and are not counted. *n_valid =
     * rows counted (n_valid may be NULL: not wanted, nothing read back when
     * every target is valid; during a CUDA graph capture it must be NULL). A target outside [0, V) (and not ignore_index) records
     * OJ_ERR_OUT_OF_RANGE naming "cross_entropy", the target and its row. */
    oj_status (*cross_entropy_forward)(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                       const oj_tensor *logits, const oj_tensor *targets,
                                       int64_t ignore_index, double label_smoothing,
                                       int64_t *n_valid);
    /* dlogits [N, V] = scale * dloss[n] * (softmax(row n) - (1 - eps)
     * onehot(t) - eps / V), zero rows where ignored; the softmax is rebuilt
     * from logits and the forward's lse, never stored. dloss [N] may have
     * any stride (0: one value for every row). */
    oj_status (*cross_entropy_backward)(oj_engine *eng, oj_tensor *dlogits,
                                        const oj_tensor *logits, const oj_tensor *targets,
                                        const oj_tensor *lse, const oj_tensor *dloss,
                                        double scale, int64_t ignore_index,
                                        double label_smoothing);
    /* Optional (NULL: the ops layer calls cross_entropy_forward, then
     * cross_entropy_backward): both in one pass over each row. loss [N] and
     * lse [N] (stat dtype, lse required) as cross_entropy_forward writes
     * them, dlogits [N, V] as cross_entropy_backward writes it from that
     * lse, the same bits as those two calls on the same backend; targets
     * out of range and *n_valid as cross_entropy_forward. dloss [N] any
     * stride (0: broadcast), known before the loss (linear_cross_entropy
     * passes ones and scales later). dlogits may be logits itself (in place:
     * the same storage, offset and dtype; each row's values are read before
     * its gradient overwrites them); otherwise they must not overlap. Bytes:
     * one read of the logits and one write of dlogits, where the two calls
     * read the logits twice. */
    oj_status (*cross_entropy_fused)(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                     oj_tensor *dlogits, const oj_tensor *logits,
                                     const oj_tensor *targets, const oj_tensor *dloss,
                                     double scale, int64_t ignore_index, double label_smoothing,
                                     int64_t *n_valid);
    /* NLL over log-probabilities logp [N, V]: loss[n] = -logp[n, t[n]], 0
     * (not counted) where t[n] == ignore_index; *n_valid as above; targets
     * out of range as in cross_entropy_forward (naming "nll_loss"). */
    oj_status (*nll_loss_forward)(oj_engine *eng, oj_tensor *loss, const oj_tensor *logp,
                                  const oj_tensor *targets, int64_t ignore_index,
                                  int64_t *n_valid);
    /* dlogp [N, V] = 0 except dlogp[n, t[n]] = -scale * dloss[n] on
     * counted rows; dloss [N] any stride (0: broadcast). */
    oj_status (*nll_loss_backward)(oj_engine *eng, oj_tensor *dlogp, const oj_tensor *targets,
                                   const oj_tensor *dloss, double scale, int64_t ignore_index);
    /* Attention without the [T, S] matrix (online softmax, Milakov &
     * Gimelshein 2018; FlashAttention, Dao et al. 2022). q [B, H, T, D],
     * k [B, Hkv, S, D], v [B, Hkv, S, Dv] with any strides; head h uses kv
     * head h / (H / Hkv). mask NULL, or a [B, H, T, S] view (stride 0 where
     * broadcast) of bool (true = keep) or float (added to the scores).
     * is_causal: query i sees keys j <= i + S - T (bottom-right aligned).
     * out [B, H, T, Dv] = softmax(scale q k^T + mask) v, written through
     * out's strides (any non-overlapping layout: the op passes a [B, H, T,
     * Dv] view of [B, T, H, Dv] storage, FlashAttention's native layout, so
     * merging the heads back is a view); lse [B, H, T] (stat dtype,
     * contiguous, may be NULL) = logsumexp of each score row. A row with
     * every key masked gives out 0 and lse -inf. */
    oj_status (*attention_forward)(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                   const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                   const oj_tensor *mask, bool is_causal, double scale);
    /* dq, dk, dv (shaped like q, k, v; any may be NULL; written through
     * their strides: any layout whose elements do not overlap, each other's
     * included: the op may hand three views of one buffer laid out like
     * q, k, v) from dout [B, H, T, Dv] and out (any strides), lse
     * (contiguous) and the forward's inputs;
     * probabilities are recomputed tile by tile (FlashAttention-2 backward).
     * dk/dv sum over the H / Hkv query heads of their group in head order. */
    oj_status (*attention_backward)(oj_engine *eng, oj_tensor *dq, oj_tensor *dk, oj_tensor *dv,
                                    const oj_tensor *dout, const oj_tensor *q, const oj_tensor *k,
                                    const oj_tensor *v, const oj_tensor *out,
                                    const oj_tensor *lse, const oj_tensor *mask, bool is_causal,
                                    double scale);
    /* Rotary embedding, half-split layout (RoFormer, Su et al. 2021), over
     * x [..., T, D] (D even): with a = (position_offset + t) *
     * theta^(-2i / D), i < D/2 (negated when inverse),
     * out[..., :D/2] = x1 cos a - x2 sin a, out[..., D/2:] = x2 cos a + x1 sin a.
     * The backward is this entry with inverse = true applied to dout. */
    oj_status (*rotary_embedding)(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  int64_t position_offset, double theta, bool inverse);
    /* rotary_embedding with the position of row t read from positions[t]
     * (i64/i32 [T], any stride; PyTorch's position_ids) instead of
     * position_offset + t, so a position held on the device (a CUDA graph's
     * decode step) needs no host value. The angle is the offset entry's for
     * the same position, and so are the bits. */
    oj_status (*rotary_embedding_at)(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                     const oj_tensor *positions, double theta, bool inverse);
    /* RMS norm over D then the rotary embedding (oj_rms_norm_rotary; the
     * QK-norm of nanolab-style attention) in one pass, OPTIONAL (NULL: the
     * ops layer runs copy, rms_norm_forward, rotary_embedding). x [..., T, D]
     * float with D even and ANY strides (a head view [B, H, T, D] of a
     * [B, T, H*D] projection: no contiguous copy); out contiguous, x's shape
     * and dtype; weight [D] contiguous of x's dtype or NULL (ones); rstd [N]
     * (N = numel / D, rows in x's row-major order) of the stat dtype
     * (oj__nn_stat_dtype) or NULL. out and rstd are what rms_norm_forward
     * on a contiguous copy of x gives, its output (rounded to x's dtype)
     * given to rotary_embedding(position_offset, theta): on the CPU
     * backend the bits of that composition; on others (CUDA) within float
     * rounding of it (the same rounding points, a reduction order of their
     * own) and the same bits run to run (no atomics). */
    oj_status (*rms_norm_rotary_forward)(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                         const oj_tensor *x, const oj_tensor *weight, double eps,
                                         int64_t position_offset, double theta);
    /* Its input gradient, OPTIONAL (NULL: rotary_embedding inverse, then
     * rms_norm_backward): dx [..., T, D] of x's dtype, its last dim
     * contiguous and its other strides any (nanolab's q/k gradients
     * written where they lie in the fused projection's gradient), from dy
     * (x's shape, float, any strides), x (any strides), the forward's rstd
     * and weight (NULL: ones). What rotary_embedding(inverse) of dy
     * (rounded to dy's dtype) given with a contiguous copy of x to
     * rms_norm_backward (dweight NULL) gives: the bits of that composition
     * on the CPU backend, within float rounding of it on others (CUDA),
     * the same bits run to run. No weight gradient (the ops layer takes
     * the composed path when one is needed). */
    oj_status (*rms_norm_rotary_backward)(oj_engine *eng, oj_tensor *dx, const oj_tensor *dy,
                                          const oj_tensor *x, const oj_tensor *rstd,
                                          const oj_tensor *weight, int64_t position_offset,
                                          double theta);
    /* SwiGLU's product (Shazeer 2020, "GLU Variants Improve Transformer"),
     * OPTIONAL (NULL: unary(OJ_UN_SILU) then binary(OJ_BIN_MUL)):
     * out = silu(gate) * up. gate, up: one float dtype, one shape, any
     * strides; out contiguous, their shape and dtype. The bits of
     * unary(SILU, s, gate) (s in that dtype) then binary(MUL, out, s, up) on
     * the same backend. */
    oj_status (*swiglu_forward)(oj_engine *eng, oj_tensor *out, const oj_tensor *gate,
                                const oj_tensor *up);
    /* Its gradients from dp (the product's gradient; gate's dtype and
     * shape, any strides), OPTIONAL (NULL: the unary/binary entries):
     * dup = dp * s with s = silu(gate) rounded to the dtype, dgate =
     * unary_backward(SILU) of gate with dy = dp * up rounded to the dtype.
     * dgate, dup gate's shape and dtype, any strides (the ops layer passes
     * the two halves of one [..., 2F] buffer for a split gate/up pair);
     * either may be NULL (not wanted). The bits of those unary, binary and
     * unary_backward calls on the same backend. */
    oj_status (*swiglu_backward)(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                 const oj_tensor *gate, const oj_tensor *up, const oj_tensor *dp);
    /* swiglu_backward that also gives the product, OPTIONAL (NULL: none):
     * dp_p holds dp on entry (contiguous, gate's shape and dtype) and the
     * product silu(gate) * up on return (swiglu_forward's bits), so a
     * backward that needs both (swiglu_linear's weight gradient) reads
     * gate and up once and allocates nothing; dgate, dup as there. */
    oj_status (*swiglu_backward_p)(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                   oj_tensor *dp_p, const oj_tensor *gate, const oj_tensor *up);
    /* outs[i] = ins[i] converted to outs[i]'s dtype for i < n (n <= 8) in
     * one launch, OPTIONAL (NULL: copy one pair at a time): each pair one
     * element count, both contiguous, f32/bf16/f16: the bits of copy. The
     * fused projections' weight casts and their gradients' (oj__cast_rows). */
    oj_status (*cast_multi)(oj_engine *eng, int n, oj_tensor *const *outs,
                            const oj_tensor *const *ins);
    /* nanolab's value residual under autocast (oj__value_mix), OPTIONAL
     * (NULL: the ops sub, mul, add and a cast): out = (T)((float)v0 +
     * (float)(T)((float)v1 - (float)v0) * s[0]), each operation rounded
     * on its own (no fused multiply-add): the bits of binary(SUB) in T,
     * binary(MUL) by the f32 s giving f32, binary(ADD) with v0 in f32 and
     * copy to T. v1, v0: one dtype T (bf16 or f16), one shape of rank 1..4
     * whose last dim is contiguous, other strides any; s: f32, one
     * element (device memory); out contiguous, their shape and T. */
    oj_status (*value_mix_forward)(oj_engine *eng, oj_tensor *out, const oj_tensor *v1,
                                   const oj_tensor *v0, const oj_tensor *s);
    /* Its gradients from g (out's shape and dtype, last dim contiguous):
     * dv1 = (T)((float)g * s[0]) and dv0 = (T)((float)g - (float)dv1)
     * (T, v1's shape, the last dim contiguous and the other strides any:
     * nanolab's dv1 written where v's head view lies in the fused
     * projection's gradient; the bits of the chain's rules, mul's then the sum of
     * add's and sub's gradients), ds[0] = the sum over every element of
     * (double)g * (double)(T)(v1 - v0), rounded to f32 (s's shape), in a
     * fixed order: the same bits run to run. dv1, dv0 or ds may be NULL
     * (not wanted). */
    oj_status (*value_mix_backward)(oj_engine *eng, oj_tensor *dv1, oj_tensor *dv0,
                                    oj_tensor *ds, const oj_tensor *g, const oj_tensor *v1,
                                    const oj_tensor *v0, const oj_tensor *s);
    /* The gradients of p = a * b with b one value per row of a (b [..., 1]
     * against a [..., D]: nanolab's per-head output gate inside
     * oj__mul_linear), OPTIONAL (NULL: binary(MUL) twice, then the reduce
     * entry for db): from dp (a's shape), da = dp * b with the bits of
     * binary(MUL), and db [..., 1] = the row's sum of dp * a, each product
     * rounded to the dtype as binary(MUL) stores it, summed in f32 in a
     * fixed order and rounded once: within rounding of the reduce entry's
     * sum, the same bits run to run. One pass instead of three (the two
     * products and the sum's read of the second). dp, a, da [..., D], b,
     * db [..., 1]: contiguous, one dtype (f32, bf16, f16); da or db may be
     * NULL (not wanted). */
    oj_status (*mul_row_backward)(oj_engine *eng, oj_tensor *da, oj_tensor *db,
                                  const oj_tensor *dp, const oj_tensor *a, const oj_tensor *b);
    /* Dropout: element i (row-major) is kept when Philox4x32-10 word i % 4
     * of counter block offset + i / 4 (key seed, stream 0), read as u =
     * word / 2^32, has u >= p; kept elements are scaled by 1 / (1 - p),
     * dropped ones are 0 (p == 1: all 0). The backward is this entry on
     * dout with the same seed and offset. */
    oj_status (*dropout)(oj_engine *eng, oj_tensor *out, const oj_tensor *x, double p,
                         uint64_t seed, uint64_t offset);

    /* ---- indexing (CPU: cpu_index.c). Index tensors are i64 or i32 with
     * any strides; data tensors have any strides, outputs written in place
     * do not overlap the inputs. Index values are checked here (the ops
     * layer cannot read them): one outside [0, size) records
     * OJ_ERR_OUT_OF_RANGE naming the op, the value and its position, and
     * nothing is promised about out. Accumulations run in a fixed order. */

    /* out[p] = x[p with p[dim] = index[p]] for every position p of index;
     * out shaped like index, x's dtype; index.size(d) <= x.size(d) for
     * d != dim; ranks equal (rank 0: dim 0). */
    oj_status (*gather)(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                        const oj_tensor *index);
    /* out[p with p[dim] = index[p]] += src[p] for every position p of index,
     * in place; out and src one dtype; index.size(d) <= src.size(d) for
     * every d and <= out.size(d) for d != dim; ranks equal. */
    oj_status (*scatter_add)(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                             const oj_tensor *src);
    /* out = x with dim `dim` replaced by the rows index[0..K) (index [K] or
     * rank 0 for K = 1); out contiguous, x's dtype. */
    oj_status (*index_select)(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                              const oj_tensor *index);
    /* out[.., index[k], ..] += alpha * src[.., k, ..] (k along dim) in place;
     * src is out's shape with dim `dim` of size K; integer dtypes take an
     * integral alpha. */
    oj_status (*index_add)(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                           const oj_tensor *src, double alpha);
    /* out[.., index[k], ..] = src[.., k, ..] in place (torch's index_copy_;
     * shapes as index_add); with a repeated index the last k wins. Used to
     * write a KV cache at a position held on the device. */
    oj_status (*index_copy)(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                            const oj_tensor *src);

    /* ---- convolution helpers (CPU: cpu_conv.c), as torch's unfold/fold.
     * x [N, C, H, W] (any strides), cols [N, C*kh*kw, OH*OW] contiguous,
     * where OH = (H + 2 ph - dh (kh - 1) - 1) / sh + 1 (likewise OW), row
     * (c*kh + i)*kw + j, column oh*OW + ow holding
     * x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw], or pad_value outside x. */
    oj_status (*im2col)(oj_engine *eng, oj_tensor *cols, const oj_tensor *x,
                        const oj_im2col_args *a, double pad_value);
    /* The adjoint: x [N, C, H, W] contiguous is overwritten with the sum of
     * every cols element (any strides) at the position im2col read it from
     * (padding dropped), summed in index order of cols. */
    oj_status (*col2im)(oj_engine *eng, oj_tensor *x, const oj_tensor *cols,
                        const oj_im2col_args *a);
    /* ---- optimizer support (CPU: cpu_optim.c). *out = sum of x[i]^2 over a
     * contiguous f32/f64 tensor x, accumulated in double in a fixed order
     * (the CPU: 8 interleaved partial sums combined in index order), so the
     * result does not depend on threads; written to host memory. Used for
     * gradient norms: a non-finite element gives a non-finite sum. */
    oj_status (*sum_squares)(oj_engine *eng, const oj_tensor *x, double *out);
    /* out[i] = sum of squares of ts[i] for i < n, every ts[i] contiguous,
     * f32/f64/bf16/f16 (OJ_ERR_DTYPE otherwise), 0 for an empty tensor;
     * accumulated in double with a partition that depends only on the
     * shapes, so the results are bit-identical across runs and thread
     * counts. out: host memory, n doubles. One entry for all of a model's
     * gradients: the CPU spreads the tensors over its threads (each summed
     * by the sum_squares kernel, so its bits), CUDA sums fixed chunks of
     * every tensor in a few launches and reads the n results back once. */
    oj_status (*sum_squares_multi)(oj_engine *eng, int64_t n, const oj_tensor *const *ts,
                                   double *out);
    /* ---- multi-tensor optimizer entries (torch.optim's foreach/fused
     * forms): one call for a whole step's tensors, so a device runs it in
     * a few launches instead of one (or three) per tensor. Element for
     * element each gives the bits of the per-tensor entry it batches. The
     * tensors written (params, exp_avgs, exp_avg_sqs; ts) overlap no other
     * tensor of the call: the order of the tensors is not promised. */
    /* adam_step for every i < n: params[i], grads[i], exp_avgs[i],
     * exp_avg_sqs[i] with args[i] (one per tensor: the step count, hence
     * the bias corrections, is per parameter, lr and weight decay per
     * param group). Each i as adam_step takes it (contiguous, one shape,
     * one dtype f32 or f64; different i may differ in dtype). OJ_ERR_DTYPE
     * (nothing written) when a parameter is not f32/f64. check_only writes
     * nothing and returns OJ_ERR_NUMERIC (recording nothing) when any new
     * value of any tensor would be non-finite (CUDA: one status word for
     * the whole call, read back once). */
    oj_status (*adam_step_multi)(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                 const oj_tensor *const *grads, oj_tensor *const *exp_avgs,
                                 oj_tensor *const *exp_avg_sqs, const oj_adam_args *args,
                                 bool check_only);
    /* ts[i] *= alpha in place for every i < n (torch._foreach_mul_), each
     * ts[i] contiguous f32/f64/bf16/f16 (OJ_ERR_DTYPE otherwise, nothing
     * written): the bits unary(OJ_UN_AFFINE, ts[i], ts[i], alpha, 0) gives
     * on the same backend. Used by the gradient clip. */
    oj_status (*mul_scalar_multi)(oj_engine *eng, int64_t n, oj_tensor *const *ts, double alpha);
    /* Row alignment, in elements, for the logits of linear_cross_entropy
     * (0: none, the rows packed). When > 0 the backend's matmul takes an
     * out [1, M, N] with a row stride >= N, and the cross_entropy_forward /
     * _backward / _fused entries take logits and dlogits [N, V] whose rows
     * are contiguous with any row stride >= V; linear_cross_entropy then
     * lays each chunk's logits out with the row stride V rounded up to this
     * multiple (llm.c's padded vocabulary, without changing the weights: an
     * odd V such as GPT-2's 50257 otherwise gives the head GEMMs an
     * unaligned leading dimension and the loss kernels element loads). */
    int64_t ce_row_align;
    /* NCCL collectives for oj_dist; NULL for the CPU (MPI moves host
     * memory) and for a CUDA module built without NCCL. */
    const oj_backend_comm *comm;
    /* ---- batch-1 decode (src/ops/nn_decode.c; optional: NULL where the
     * backend has no fused decode step). One row; every float tensor of a
     * call has one dtype T, bf16 or f16; x, y, out contiguous; w [K, N]
     * with n-stride 1, its row stride a multiple of 8 and its data 16-byte
     * aligned, N a multiple of 8, K <= 8192; b [N] contiguous or NULL.
     * Sums in f32 (CUDA) or double (CPU); results rounded to T where the
     * unfused ops round. */
    /* u = layer_norm(x [K]; nw, nb [K], eps) rounded to T;
     * out [N] = act(round_T(u @ w + b)) rounded to T, act 0 none, 1 GELU
     * (tanh form). kv (NULL, or [2, 1, H, S, D] contiguous T with H D = C
     * and N = 3 C: a gpt2 attention projection's q, k, v): columns n in
     * [C, 3 C) are also written to kv[j / C, 0, (j % C) / D, slot, j % D],
     * j = n - C, slot the i64 [1] device value `slot` (nothing written
     * when it is outside [0, S)). */
    oj_status (*decode_norm_linear)(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                    const oj_tensor *nw, const oj_tensor *nb, double eps,
                                    const oj_tensor *w, const oj_tensor *b, int act, oj_tensor *kv,
                                    const oj_tensor *slot);
    /* x [N] = round_T(x + round_T(y [K] @ w + b)) in place: a projection
     * and the residual add after it. */
    oj_status (*decode_linear_residual)(oj_engine *eng, oj_tensor *x, const oj_tensor *y,
                                        const oj_tensor *w, const oj_tensor *b);
    /* The end of a decode step: tok (i64, one element) = the index of the
     * largest of logits [V] (contiguous f32/bf16/f16; the lowest index on
     * ties; a NaN ranks above every number, the first NaN wins, as
     * argmax), and pos (i64, one element) += 1. */
    oj_status (*decode_argmax_advance)(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                       oj_tensor *pos);
    /* The start of a gpt2 decode step: x [C] = round_T(wte[tok] + wpe[pos])
     * (wte [V, C], wpe [P, C] contiguous, x contiguous, one dtype T
     * f32/bf16/f16; tok, pos i64 device values; NaN where tok is outside
     * [0, V) or pos outside [0, P)) and mask (bool [S], contiguous)
     * [j] = j <= pos. */
    oj_status (*decode_embed_mask)(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                                   const oj_tensor *wpe, const oj_tensor *tok,
                                   const oj_tensor *pos, oj_tensor *mask);
    /* The end of a sampled decode step (ops/nn_decode.h,
     * oj__decode_sample_, which validated everything): tok = the host
     * sampler's choice over logits [V] (f32/bf16/f16, contiguous) with the
     * repetition penalty on the ids i where seen[i] != 0 (u8 [V], NULL: no
     * penalty) and the draw oj_sample_uniform(s->seed, s->seq, *step), -1
     * on a NaN; then seen[tok] = 1, *step += 1, *pos += 1 (pos NULL: not)
     * and hist[*pos] = tok where hist (i64, contiguous, needs pos) is not
     * NULL and *pos < its numel. At most OJ__DECODE_SAMPLE_MAX_K
     * candidates. */
    oj_status (*decode_sample)(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                               oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                               const struct oj__decode_sampler *s);
    /* The head of a decode step: u = layer_norm(x [K]; nw, nb [K], eps)
     * rounded to T; out [N] = round_T(u @ w^T) with w [N, K] (k-stride 1,
     * K and the row stride multiples of 8, 16-byte aligned; the tied lm
     * head); with tok and pos (i64 device values, both or neither) also
     * tok = the argmax of out (as decode_argmax_advance), pos += 1 and,
     * where hist (i64, contiguous) is not NULL and the new pos < its numel,
     * hist[pos] = tok; or
     * with s (not NULL; tok, pos and step given; s->repetition_penalty
     * 1) the draw of decode_sample over out (seen NULL) instead of the
     * argmax. */
    oj_status (*decode_norm_head)(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  const oj_tensor *nw, const oj_tensor *nb, double eps,
                                  const oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                  oj_tensor *step, oj_tensor *hist,
                                  const struct oj__decode_sampler *s);
    /* The attention of a decode step: scaled_dot_product_attention's
     * forward (no causal mask, no logsumexp) of q [1, H, 1, D] over k, v
     * [1, H, S, D] under mask ([1, H, 1, S] bool view) into out [1, H, 1,
     * D], its values and bits, where slot (i64 device value) is the one
     * row of k and v the kernel before may still write: the others may be
     * read before it finishes. OJ_ERR_UNSUPPORTED for shapes its kernels do
     * not take. */
    oj_status (*decode_attention)(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                  const oj_tensor *k, const oj_tensor *v, const oj_tensor *mask,
                                  const oj_tensor *slot, double scale);
    /* ---- the device-gated optimizer step (CUDA; NULL on the CPU, where
     * the optimizer reads the norms back instead). step_gate_open queues
     * the L2 norm of every grads[i] (contiguous f32/f64/bf16/f16, as
     * sum_squares_multi) and writes into gate (a contiguous f64 device
     * tensor of >= 5 + 3 n elements, the caller's, alive until it has read
     * gate back): [0] the sum of the squared norms, [1] the clip factor
     * (max_norm / (norm + 1e-6) when max_norm > 0 and that is < 1, else
     * 1: oj_clip_grad_norm's), [2] 0, or 1 when a gradient's norm is not
     * finite, [3] the global norm, [4 + i] the norm of grads[i], [4 + n]
     * 1 when the global norm is finite and <= safe_norm (the caller's
     * proof that no update can become non-finite: adam_step_multi's check
     * pass then does nothing), else 0; [5 + n, 5 + 3 n) zeroed (the
     * bounds oj_adam_args.bound_at points at). Until
     * step_gate_close, adam_step, adam_step_multi, muon_momentum and
     * apply_update read every gradient element times [1] (the bits of
     * mul_scalar_multi followed by the plain entry), write nothing when
     * [2] != 0, and with check_only set [2] to 2 (if 0) instead of
     * reading a status back and return OJ_OK: nothing synchronises
     * between the norm and the update. OJ_ERR_STATE when a gate is
     * already open. */
    oj_status (*step_gate_open)(oj_engine *eng, int64_t n, const oj_tensor *const *grads,
                                double max_norm, double safe_norm, oj_tensor *gate);
    void (*step_gate_close)(oj_engine *eng);
    /* graph_replay in two halves (NULL where graph_replay is one): launch
     * queues the replay and returns; checks reads the deferred index and
     * target checks of the last replay back (synchronising) and reports
     * the first failure as graph_replay would. */
    oj_status (*graph_launch)(oj_engine *eng, void *graph);
    oj_status (*graph_checks)(oj_engine *eng, void *graph);
    /* Read-backs that do not wait (NULL: core copies at once with
     * copy_d2h). read_defer queues a copy of nbytes at device src into host
     * dst, which must stay valid until read_wait; read_wait waits for every
     * queued copy and fills their dst (a failed wait, also one read_defer
     * makes to free staging, fills none: that wait and the next one that
     * finds nothing queued return the error). Work queued after a read_defer runs
     * while the host waits for nothing. graph_checks_defer queues the read
     * of the last replay's check words (after its launch, before the next);
     * after read_wait, graph_checks_clean says whether every check passed
     * (a failure is named by replaying and calling graph_checks). */
    oj_status (*read_defer)(oj_engine *eng, void *dst, const void *src, size_t nbytes);
    oj_status (*read_wait)(oj_engine *eng);
    oj_status (*graph_checks_defer)(oj_engine *eng, void *graph);
    bool (*graph_checks_clean)(oj_engine *eng, void *graph);
    /* Muon's normalisation of a stack (NULL: muon.c runs it as ops):
     * out[m] = u[m] * (1 / (norms[m] + 1e-7)), the factor computed in
     * double and rounded to u's dtype, the product in u's dtype, then
     * rounded to out's. u [k, r, c] f32/f64, norms f64 with k elements, out
     * [k, r, c] of u's dtype or bf16 for an f32 u; all contiguous. One pass
     * with the bits of the ops (add_scalar, reciprocal, cast, mul, cast). */
    oj_status (*muon_normalize)(oj_engine *eng, oj_tensor *out, const oj_tensor *u,
                                const oj_tensor *norms);
    /* Muon's per-matrix norms in one batched pass (NULL: muon.c runs the
     * reduce entry over dims 1 and 2): norms[m] = sqrt(sum of u[m]'s
     * squares), each square and sum in double. u [k, r, c] f32/f64
     * contiguous, norms f64 contiguous with k elements. Bit-identical
     * across runs (the partition depends on the shape only); the
     * summation order is not the reduce entry's, so the last bits of a
     * norm may differ from it. */
    oj_status (*muon_norms)(oj_engine *eng, oj_tensor *norms, const oj_tensor *u);
    /* One step of Muon's quintic Newton-Schulz iteration on a stack, as
     * three batched GEMMs whose epilogues take the sums (NULL: muon.c runs
     * bmm, mul_scalar and add): A = X X^T, B = c A A + b A, xn = B X + a
     * X. x, xn [k, m, n] contiguous, m <= n, one dtype, bf16 or f32.
     * Each product is summed in f32 and the scaled sum rounded once to the
     * dtype (the ops round A A, c A A, b A, B X and a X on their own): the
     * values of the chain within the dtype's rounding, not its bits, so
     * muon.c takes it only under OJ_NUMERICS_FAST. */
    oj_status (*muon_ns_step)(oj_engine *eng, oj_tensor *xn, const oj_tensor *x, double a,
                              double b, double c);
    /* Multi-tensor forms of muon_momentum (one momentum and nesterov;
     * updates NULL: every buf written in place, else every updates[i]
     * written) and apply_update (alpha[i], scale[i], decay[i] per tensor;
     * check_only as adam_step_multi's: one status for the call), under
     * the rules of the multi-tensor entries above (each i as the
     * per-tensor entry takes it, f32 or f64, its bits; the tensors written
     * overlap nothing else of the call). NULL: the optimizer calls the
     * per-tensor entries. */
    oj_status (*muon_momentum_multi)(oj_engine *eng, int64_t n, oj_tensor *const *bufs,
                                     const oj_tensor *const *grads, oj_tensor *const *updates,
                                     double momentum, bool nesterov);
    oj_status (*apply_update_multi)(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                    const oj_tensor *const *updates, const double *alpha,
                                    const double *scale, const double *decay, bool check_only,
                                    oj_tensor *const *lows);
    /* Whether adam_step_multi (oj_adam_args.low) and apply_update_multi
     * (lows: NULL, or per tensor NULL or a contiguous bf16 tensor of
     * params[i]'s shape) write each updated f32 parameter's bf16 copy in
     * the same pass, the bits of copy's rounding (oj_optim_set_weight_
     * copies; a gated step that is skipped writes neither). False: the
     * low arguments are ignored. */
    bool low_copies;
    /* Causal attention of one sequence over a paged KV cache, OPTIONAL
     * (NULL, or OJ_ERR_UNSUPPORTED for a dtype: the op gathers the blocks
     * and runs attention_forward): q [1, H, T, D] (any strides), k_pool /
     * v_pool [NB, Hkv, BS, D] contiguous, key j of the sequence at row
     * j % BS of block blocks[j / BS], S >= T keys; query i sees keys
     * j <= i + S - T. out [1, H, T, D] as attention_forward writes it,
     * and bit for bit its result for the same keys laid out contiguously. */
    oj_status (*attention_paged_forward)(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                         const oj_tensor *k_pool, const oj_tensor *v_pool,
                                         const int32_t *blocks, int64_t S, double scale);
    /* Which implementation the last attention_forward (backward true: the
     * last attention_backward) of eng ran: a static name ("cudnn",
     * "tensor core", "f32 kernels", "split-key decode"; "none" before the
     * first call), and in why[n] (n > 0) why cuDNN's fused attention did
     * not run it ("" when it did): the refusing cuDNN call with
     * cudnnGetLastErrorString's text, "cuDNN not built in", "EXACT
     * numerics ...". OPTIONAL (NULL: one implementation). For tests and
     * benchmarks. */
    const char *(*attention_impl)(oj_engine *eng, bool backward, char *why, size_t n);
    /* The state of eng's cuDNN attention cache: *plans the keys cached
     * (built plans and refusals, at most 16 outside a capture, more only
     * while live CUDA graphs pin them), *pinned those a live graph pins,
     * *handle whether the cuDNN handle was created. OPTIONAL (NULL: no
     * cuDNN). For tests. */
    void (*attention_cudnn_cache)(oj_engine *eng, int64_t *plans, int64_t *pinned, bool *handle);
    /* Causal attention of many sequences' rows packed in q [1, H, N, D]
     * (any strides) over one paged KV pool, OPTIONAL (NULL or
     * OJ_ERR_UNSUPPORTED: the op runs attention_paged_forward per row):
     * every table is device memory, so a CUDA graph may record it. Row i
     * reads the block table tables[seq[i]] (i32 [B, MB], contiguous; seq
     * i32 [N]) and sees keys 0..pos[i] (i32 [N]; pos[i] < 0: no key, the
     * row is zeros). out [1, H, N, D] as attention_paged_forward writes it. */
    oj_status (*attention_paged_varlen_forward)(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                                const oj_tensor *k_pool, const oj_tensor *v_pool,
                                                const oj_tensor *tables, const oj_tensor *seq,
                                                const oj_tensor *pos, double scale);
    /* Store packed keys or values x [1, Hkv, N, D] (any strides, pool's
     * dtype) into pool [NB, Hkv, BS, D] (contiguous): row t goes to row
     * slot[t] % BS of block slot[t] / BS (slot i32 [N], device; < 0: row t
     * is not written; ids checked by the caller), OPTIONAL (NULL or
     * OJ_ERR_UNSUPPORTED: the op copies row by row). */
    oj_status (*paged_kv_write)(oj_engine *eng, oj_tensor *pool, const oj_tensor *x,
                                const oj_tensor *slot);
    /* Block-quantized weights (include/ojas/quant.h; qtype an oj_qtype),
     * OPTIONAL (NULL: quantized matrices are refused on the device; the
     * CPU's live in src/quant). blocks: U8 [N, row bytes] contiguous, the
     * ggml layout of qtype for rows of K elements.
     * qgemv: out [M, N] f32 = x [M, K] f32 @ W^T, 1 <= M <= 8, x and out
     * contiguous; x multiplied in f32 by every weight's value of
     * oj_dequantize_row, exactly (a block's scale may be applied to its
     * sum where d q is exact in f32: q8_0, q4_0), each output summed in an
     * order fixed by K (the same bits on every run). qdequant: out [N, K]
     * f32 or bf16 contiguous = W (f32 values rounded once to out's
     * dtype). */
    oj_status (*qgemv)(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                       const oj_tensor *blocks, int qtype, int64_t k);
    oj_status (*qdequant)(oj_engine *eng, oj_tensor *out, const oj_tensor *blocks, int qtype);
    /* Batch-1 decode with a block-quantized weight (ops/nn_decode_quant.h,
     * which validated everything), OPTIONAL: one row, blocks U8 [N, row
     * bytes] contiguous and 16-byte aligned (the ggml layout of qtype for
     * rows of K elements, row bytes a multiple of 16, K <= 4096); x, out,
     * nw, nb, b and kv of one dtype T (f32, bf16, f16), contiguous. With
     * nw (and nb): u = layer_norm(x [K], eps) rounded to T, else u = x.
     * v = round_T(u @ W^T + b) (b [N] or NULL); epi 0: out [N] = v,
     * 1: out = round_T(gelu_tanh(v)), 2 (no norm): out [N] (the residual)
     * = round_T(out + v) in place. kv and slot as decode_norm_linear's.
     * Sums in f32 (CUDA) or double (CPU). */
    oj_status (*decode_qlinear)(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                const oj_tensor *nw, const oj_tensor *nb, double eps,
                                const oj_tensor *blocks, int qtype, int64_t k, const oj_tensor *b,
                                int epi, oj_tensor *kv, const oj_tensor *slot);
    /* Optional (NULL, or OJ_ERR_UNSUPPORTED returned with nothing
     * recorded: the ops layer sums the rows another way): out [C] f32
     * contiguous = the sum over the rows of x [R, C] (bf16 or f16, unit
     * column stride, row stride >= C), a linear's bias gradient. Summed in
     * f32 in an order fixed by R and C (the same bits on every run), not
     * the CPU's index order: the ops layer uses it only under
     * OJ_NUMERICS_FAST. */
    oj_status (*col_sum)(oj_engine *eng, oj_tensor *out, const oj_tensor *x);
    /* The head of a quantized decode step, OPTIONAL (NULL: decode_qlinear,
     * then decode_argmax_advance): out [N] = decode_qlinear's with nw, nb
     * (both given), no b, epi 0, no kv; and tok = the argmax of out (as
     * decode_argmax_advance), pos += 1 and, where hist (i64, contiguous)
     * is not NULL and the new pos < its numel, hist[pos] = tok (tok, pos
     * i64 device values with one element, as decode_norm_head's). */
    oj_status (*decode_qnorm_head)(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   const oj_tensor *nw, const oj_tensor *nb, double eps,
                                   const oj_tensor *blocks, int qtype, int64_t k, oj_tensor *tok,
                                   oj_tensor *pos, oj_tensor *hist);
    /* The layers of a gpt2 batch-1 decode step in one persistent kernel
     * (ops/nn_decode.h oj__decode_mega, which validated everything),
     * OPTIONAL (NULL: the fast step's kernels run them). decode_mega_ok:
     * whether it takes width C, H heads, S cache slots and dtype (an
     * oj_dtype). decode_mega: x [C] = wte[tok] + wpe[pos] and mask (bool
     * [S]) [j] = j <= pos as decode_embed_mask, then for each of n_layer
     * layers (lw[13 l ..]: ln_1 w, b [C], c_attn w [C, 3C], b, attn c_proj
     * w [C, C], b, ln_2 w, b, c_fc w [C, 4C], b, mlp c_proj w [4C, C], b,
     * the cache [2, 1, H, S, D] written at slot pos) what the fast step's
     * decode_norm_linear, decode_attention and decode_linear_residual
     * compute, with their bits; x is left the residual after the last
     * layer. */
    bool (*decode_mega_ok)(int64_t C, int64_t H, int64_t S, int dtype);
    oj_status (*decode_mega)(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                             const oj_tensor *wpe, const oj_tensor *tok, const oj_tensor *pos,
                             oj_tensor *mask, int64_t n_layer, const oj_tensor *const *lw,
                             double eps);
} oj_backend;

extern const oj_backend oj_cpu_backend;
/* Defined in the CUDA backend module (libojas-cuda.so), never in libojas:
 * libojas reaches it through the module's entry (backend/module.h). */
extern const oj_backend oj_cuda_backend;

#endif /* OJAS_BACKEND_H */
