/* The CUDA backend table: every entry of struct oj_backend, implemented in
 * the .cu files beside this one (one family each). Tested entry by entry
 * against the CPU backend by tests/gpu/test_gpu_ops.c. */
#include "backend/cuda/cuda_internal.cuh"

/* cuda_optim.cu (declared here: cuda_internal.cuh is shared with other work) */
oj_status oj_cuda_sum_squares_multi(oj_engine *eng, int64_t n, const oj_tensor *const *ts,
                                    double *out);
oj_status oj_cuda_adam_step_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                  const oj_tensor *const *grads, oj_tensor *const *exp_avgs,
                                  oj_tensor *const *exp_avg_sqs, const oj_adam_args *args,
                                  bool check_only);
oj_status oj_cuda_mul_scalar_multi(oj_engine *eng, int64_t n, oj_tensor *const *ts,
                                   double alpha);
oj_status oj_cuda_step_gate_open(oj_engine *eng, int64_t n, const oj_tensor *const *grads,
                                 double max_norm, double safe_norm, oj_tensor *gate);
void oj_cuda_step_gate_close(oj_engine *eng);
oj_status oj_cuda_muon_normalize(oj_engine *eng, oj_tensor *out, const oj_tensor *u,
                                 const oj_tensor *norms);
oj_status oj_cuda_muon_norms(oj_engine *eng, oj_tensor *norms, const oj_tensor *u);
oj_status oj_cuda_muon_ns_step(oj_engine *eng, oj_tensor *xn, const oj_tensor *x, double a,
                               double b, double c);
/* cuda_value_mix.cu */
oj_status oj_cuda_value_mix_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *v1,
                                    const oj_tensor *v0, const oj_tensor *s);
oj_status oj_cuda_value_mix_backward(oj_engine *eng, oj_tensor *dv1, oj_tensor *dv0,
                                     oj_tensor *ds, const oj_tensor *g, const oj_tensor *v1,
                                     const oj_tensor *v0, const oj_tensor *s);
/* cuda_gate.cu */
oj_status oj_cuda_mul_row_backward(oj_engine *eng, oj_tensor *da, oj_tensor *db,
                                   const oj_tensor *dp, const oj_tensor *a, const oj_tensor *b);
oj_status oj_cuda_muon_momentum_multi(oj_engine *eng, int64_t n, oj_tensor *const *bufs,
                                      const oj_tensor *const *grads, oj_tensor *const *updates,
                                      double momentum, bool nesterov);
oj_status oj_cuda_apply_update_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                     const oj_tensor *const *updates, const double *alpha,
                                     const double *scale, const double *decay, bool check_only,
                                     oj_tensor *const *lows);
/* cuda_nn_norm.cu (declared here, as above) */
oj_status oj_cuda_add_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *sum,
                                   oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                                   const oj_tensor *r, const oj_tensor *weight,
                                   const oj_tensor *bias, double eps, bool rms);
oj_status oj_cuda_norm_backward_add(oj_engine *eng, oj_tensor *dx, oj_tensor *dx_low,
                                    oj_tensor *dweight, oj_tensor *dbias, const oj_tensor *dy,
                                    const oj_tensor *dres, const oj_tensor *x,
                                    const oj_tensor *mean, const oj_tensor *rstd,
                                    const oj_tensor *weight, bool rms);

/* cuda_quant.cu: block-quantized weights (GEMV with dequantizing prologue, dequantize) */
oj_status oj_cuda_qgemv(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                        const oj_tensor *blocks, int qtype, int64_t k);
oj_status oj_cuda_qdequant(oj_engine *eng, oj_tensor *out, const oj_tensor *blocks, int qtype);
/* cuda_decode_quant.cu: the batch-1 decode step's fused quantized projections */
oj_status oj_cuda_decode_qlinear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                 const oj_tensor *nw, const oj_tensor *nb, double eps,
                                 const oj_tensor *blocks, int qtype, int64_t K,
                                 const oj_tensor *b, int epi, oj_tensor *kv,
                                 const oj_tensor *slot);
oj_status oj_cuda_decode_qnorm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                    const oj_tensor *nw, const oj_tensor *nb, double eps,
                                    const oj_tensor *blocks, int qtype, int64_t K,
                                    oj_tensor *tok, oj_tensor *pos, oj_tensor *hist);

/* cuda_comm.cu: NCCL collectives for oj_dist (NULL when built without NCCL) */
const oj_backend_comm *oj_cuda_comm_table(void);

/* cuda_elementwise.cu: silu(gate) * up and its gradients */
oj_status oj_cuda_swiglu_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *gate,
                                 const oj_tensor *up);
oj_status oj_cuda_swiglu_backward(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                  const oj_tensor *gate, const oj_tensor *up, const oj_tensor *dp);
oj_status oj_cuda_swiglu_backward_p(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                    oj_tensor *dp_p, const oj_tensor *gate, const oj_tensor *up);
oj_status oj_cuda_cast_multi(oj_engine *eng, int n, oj_tensor *const *outs,
                             const oj_tensor *const *ins);
/* cuda_decode.cu: the batch-1 decode step's fused projections */
oj_status oj_cuda_decode_norm_linear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                     const oj_tensor *nw, const oj_tensor *nb, double eps,
                                     const oj_tensor *w, const oj_tensor *b, int act,
                                     oj_tensor *kv, const oj_tensor *slot);
oj_status oj_cuda_decode_linear_residual(oj_engine *eng, oj_tensor *x, const oj_tensor *y,
                                         const oj_tensor *w, const oj_tensor *b);
oj_status oj_cuda_decode_argmax_advance(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                        oj_tensor *pos);
oj_status oj_cuda_decode_embed_mask(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                                    const oj_tensor *wpe, const oj_tensor *tok,
                                    const oj_tensor *pos, oj_tensor *mask);
oj_status oj_cuda_decode_attention(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                   const oj_tensor *k, const oj_tensor *v, const oj_tensor *mask,
                                   const oj_tensor *slot, double scale);
oj_status oj_cuda_decode_norm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   const oj_tensor *nw, const oj_tensor *nb, double eps,
                                   const oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                   oj_tensor *step, oj_tensor *hist,
                                   const struct oj__decode_sampler *s);
/* cuda_decode_mega.cu: the layers of a gpt2 decode step in one persistent kernel */
bool oj_cuda_decode_mega_ok(int64_t C, int64_t H, int64_t S, int dtype);
oj_status oj_cuda_decode_mega(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                              const oj_tensor *wpe, const oj_tensor *tok, const oj_tensor *pos,
                              oj_tensor *mask, int64_t n_layer, const oj_tensor *const *lw,
                              double eps);
/* cuda_decode_sample.cu: the sampled decode step's token on the device */
oj_status oj_cuda_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                oj_tensor *pos, oj_tensor *seen, oj_tensor *step,
                                oj_tensor *hist, const struct oj__decode_sampler *s);

/* cuda_attention_cudnn.cu: which attention implementation ran (backend.h) */
const char *oj_cuda_attention_impl(oj_engine *eng, bool backward, char *why, size_t n);

/* cuda_attention_paged.cu: attention over a paged KV cache (backend.h) */
oj_status oj_cuda_attention_paged_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                          const oj_tensor *k_pool, const oj_tensor *v_pool,
                                          const int32_t *blocks, int64_t S, double scale);
oj_status oj_cuda_attention_paged_varlen_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                                 const oj_tensor *k_pool, const oj_tensor *v_pool,
                                                 const oj_tensor *tables, const oj_tensor *seq,
                                                 const oj_tensor *pos, double scale);
oj_status oj_cuda_paged_kv_write(oj_engine *eng, oj_tensor *pool, const oj_tensor *x,
                                 const oj_tensor *slot);

static oj_backend make_cuda_backend() {
    oj_backend b = {};
    b.name = "cuda";
    b.type = OJ_DEVICE_CUDA;
    /* memory (cuda_memory.cu) */
    b.open = oj_cuda_open;
    b.close = oj_cuda_close;
    b.memory_info = oj_cuda_memory_info;
    b.alloc = oj_cuda_alloc;
    b.free = oj_cuda_free;
    b.vm_granularity = oj_cuda_vm_granularity; /* cuda_vmm.cu */
    b.vm_reserve = oj_cuda_vm_reserve;
    b.vm_map = oj_cuda_vm_map;
    b.vm_unmap = oj_cuda_vm_unmap;
    b.vm_release = oj_cuda_vm_release;
    b.copy_h2d = oj_cuda_copy_h2d;
    b.copy_d2h = oj_cuda_copy_d2h;
    b.copy_d2d = oj_cuda_copy_d2d;
    b.memset0 = oj_cuda_memset0;
    b.synchronize = oj_cuda_synchronize;
    /* graphs (cuda_graph.cu) */
    b.graph_begin = oj_cuda_graph_begin;
    b.graph_end = oj_cuda_graph_end;
    b.graph_abort = oj_cuda_graph_abort;
    b.graph_replay = oj_cuda_graph_replay;
    b.graph_destroy = oj_cuda_graph_destroy;
    /* elementwise (cuda_elementwise.cu) */
    b.copy = oj_cuda_copy;
    b.fill = oj_cuda_fill;
    b.unary = oj_cuda_unary;
    b.unary_backward = oj_cuda_unary_backward;
    b.binary = oj_cuda_binary;
    b.where = oj_cuda_where;
    b.rand = oj_cuda_rand;
    /* reductions (cuda_reduce.cu), matmul (cuda_matmul.cu) */
    b.reduce = oj_cuda_reduce;
    b.matmul = oj_cuda_matmul;
    b.matmul_bias = oj_cuda_matmul_bias;
    b.matmul_act_backward = oj_cuda_matmul_act_backward;
    b.matmul_bgrad = oj_cuda_matmul_bgrad;
    b.matmul_bias_act = oj_cuda_matmul_bias_act;
    b.cumsum = oj_cuda_cumsum;
    b.col_sum = oj_cuda_col_sum;
    /* nn (cuda_nn_*.cu) */
    b.embedding_forward = oj_cuda_embedding_forward;
    b.embedding_backward = oj_cuda_embedding_backward;
    b.layer_norm_forward = oj_cuda_layer_norm_forward;
    b.layer_norm_backward = oj_cuda_layer_norm_backward;
    b.rms_norm_forward = oj_cuda_rms_norm_forward;
    b.rms_norm_backward = oj_cuda_rms_norm_backward;
    b.add_norm_forward = oj_cuda_add_norm_forward;
    b.norm_backward_add = oj_cuda_norm_backward_add;
    b.softmax_forward = oj_cuda_softmax_forward;
    b.softmax_backward = oj_cuda_softmax_backward;
    b.cross_entropy_forward = oj_cuda_cross_entropy_forward;
    b.cross_entropy_backward = oj_cuda_cross_entropy_backward;
    b.cross_entropy_fused = oj_cuda_cross_entropy_fused;
    b.nll_loss_forward = oj_cuda_nll_loss_forward;
    b.nll_loss_backward = oj_cuda_nll_loss_backward;
    b.attention_forward = oj_cuda_attention_forward;
    b.attention_paged_forward = oj_cuda_attention_paged_forward; /* cuda_attention_paged.cu */
    b.attention_paged_varlen_forward = oj_cuda_attention_paged_varlen_forward;
    b.paged_kv_write = oj_cuda_paged_kv_write;
    b.attention_backward = oj_cuda_attention_backward;
    b.attention_impl = oj_cuda_attention_impl; /* cuda_attention_cudnn.cu */
    b.attention_cudnn_cache = oj_cuda_attention_cudnn_cache;
    b.rotary_embedding = oj_cuda_rotary_embedding;
    b.rotary_embedding_at = oj_cuda_rotary_embedding_at;
    b.rms_norm_rotary_forward = oj_cuda_rms_norm_rotary_forward;
    b.rms_norm_rotary_backward = oj_cuda_rms_norm_rotary_backward;
    b.swiglu_forward = oj_cuda_swiglu_forward;
    b.swiglu_backward = oj_cuda_swiglu_backward;
    b.swiglu_backward_p = oj_cuda_swiglu_backward_p;
    b.cast_multi = oj_cuda_cast_multi;
    b.value_mix_forward = oj_cuda_value_mix_forward;
    b.value_mix_backward = oj_cuda_value_mix_backward;
    b.mul_row_backward = oj_cuda_mul_row_backward;
    b.dropout = oj_cuda_dropout;
    /* optimizer updates (cuda_optim.cu) */
    b.adam_step = oj_cuda_adam_step;
    b.sgd_step = oj_cuda_sgd_step;
    b.muon_momentum = oj_cuda_muon_momentum;
    b.apply_update = oj_cuda_apply_update;
    b.sum_squares = oj_cuda_sum_squares;
    b.sum_squares_multi = oj_cuda_sum_squares_multi;
    b.adam_step_multi = oj_cuda_adam_step_multi;
    b.mul_scalar_multi = oj_cuda_mul_scalar_multi;
    b.step_gate_open = oj_cuda_step_gate_open;
    b.step_gate_close = oj_cuda_step_gate_close;
    b.graph_launch = oj_cuda_graph_launch;
    b.graph_checks = oj_cuda_graph_checks;
    b.graph_checks_defer = oj_cuda_graph_checks_defer;
    b.graph_checks_clean = oj_cuda_graph_checks_clean;
    b.read_defer = oj_cuda_read_defer;
    b.read_wait = oj_cuda_read_wait;
    b.muon_normalize = oj_cuda_muon_normalize;
    b.muon_norms = oj_cuda_muon_norms;
    b.muon_ns_step = oj_cuda_muon_ns_step;
    b.muon_momentum_multi = oj_cuda_muon_momentum_multi;
    b.apply_update_multi = oj_cuda_apply_update_multi;
    b.low_copies = true; /* adam_step_multi and apply_update_multi write them */
    b.ce_row_align = 64; /* 128 bytes of bf16: the GEMM's and the vector loads' alignment */
    /* indexing (cuda_index.cu), convolution helpers (cuda_conv.cu) */
    b.gather = oj_cuda_gather;
    b.scatter_add = oj_cuda_scatter_add;
    b.index_select = oj_cuda_index_select;
    b.index_add = oj_cuda_index_add;
    b.index_copy = oj_cuda_index_copy;
    b.im2col = oj_cuda_im2col;
    b.col2im = oj_cuda_col2im;
    b.comm = oj_cuda_comm_table();
    /* batch-1 decode (cuda_decode.cu) */
    b.decode_norm_linear = oj_cuda_decode_norm_linear;
    b.decode_linear_residual = oj_cuda_decode_linear_residual;
    b.decode_argmax_advance = oj_cuda_decode_argmax_advance;
    b.decode_embed_mask = oj_cuda_decode_embed_mask;
    b.decode_norm_head = oj_cuda_decode_norm_head;
    b.decode_attention = oj_cuda_decode_attention; /* cuda_attention_decode.cu */
    /* quantized weights (cuda_quant.cu) */
    b.qgemv = oj_cuda_qgemv;
    b.qdequant = oj_cuda_qdequant;
    b.decode_qlinear = oj_cuda_decode_qlinear;
    b.decode_qnorm_head = oj_cuda_decode_qnorm_head;
    b.decode_sample = oj_cuda_decode_sample;
    b.decode_mega_ok = oj_cuda_decode_mega_ok;
    b.decode_mega = oj_cuda_decode_mega;
    return b;
}

extern "C" const oj_backend oj_cuda_backend = make_cuda_backend();
