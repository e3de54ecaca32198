/* CPU backend kernel entry points (see backend.h for their contracts). The
 * table `oj_cpu_backend` (cpu_backend.c) points at these. */
#ifndef OJAS_CPU_KERNELS_H
#define OJAS_CPU_KERNELS_H

#include "backend/backend.h"

oj_status oj_cpu_copy(oj_engine *eng, oj_tensor *out, const oj_tensor *x);
oj_status oj_cpu_fill(oj_engine *eng, oj_tensor *out, double value);
oj_status oj_cpu_unary(oj_engine *eng, oj_unary_op op, oj_tensor *out, const oj_tensor *x,
                       double alpha, double beta);
oj_status oj_cpu_unary_backward(oj_engine *eng, oj_unary_op op, oj_tensor *dx, const oj_tensor *x,
                                const oj_tensor *y, const oj_tensor *dy, double alpha,
                                double beta);
oj_status oj_cpu_binary(oj_engine *eng, oj_binary_op op, oj_tensor *out, const oj_tensor *a,
                        const oj_tensor *b);
oj_status oj_cpu_where(oj_engine *eng, oj_tensor *out, const oj_tensor *cond, const oj_tensor *a,
                       const oj_tensor *b);
/* out must be contiguous. */
oj_status oj_cpu_rand(oj_engine *eng, oj_tensor *out, bool normal, double lo, double hi,
                      uint64_t seed, uint64_t offset);

oj_status oj_cpu_reduce(oj_engine *eng, oj_reduce_op op, oj_tensor *out, oj_tensor *idx,
                        const oj_tensor *x, uint32_t dim_mask, double p);
oj_status oj_cpu_cumsum(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                        bool reverse);

/* cpu_matmul.c */
oj_status oj_cpu_matmul(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                        bool accumulate);

/* cpu_optim.c */
oj_status oj_cpu_adam_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                           oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                           bool check_only);
oj_status oj_cpu_sgd_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                          oj_tensor *momentum_buf, const oj_sgd_args *args, bool check_only);
oj_status oj_cpu_muon_momentum(oj_engine *eng, oj_tensor *buf, const oj_tensor *grad,
                               oj_tensor *update, double momentum, bool nesterov);
oj_status oj_cpu_apply_update(oj_engine *eng, oj_tensor *param, const oj_tensor *update,
                              double alpha, double scale, double decay, bool check_only);
oj_status oj_cpu_sum_squares(oj_engine *eng, const oj_tensor *x, double *out);

/* cpu_nn_*.c */
oj_status oj_cpu_embedding_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *weight,
                                   const oj_tensor *idx);
oj_status oj_cpu_embedding_backward(oj_engine *eng, oj_tensor *dweight, const oj_tensor *dout,
                                    const oj_tensor *idx);
oj_status oj_cpu_layer_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *mean,
                                    oj_tensor *rstd, const oj_tensor *x, const oj_tensor *weight,
                                    const oj_tensor *bias, double eps);
oj_status oj_cpu_layer_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                     oj_tensor *dbias, const oj_tensor *dy, const oj_tensor *x,
                                     const oj_tensor *mean, const oj_tensor *rstd,
                                     const oj_tensor *weight);
oj_status oj_cpu_rms_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                  const oj_tensor *x, const oj_tensor *weight, double eps);
oj_status oj_cpu_rms_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                   const oj_tensor *dy, const oj_tensor *x, const oj_tensor *rstd,
                                   const oj_tensor *weight);
oj_status oj_cpu_add_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *sum,
                                  oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                                  const oj_tensor *r, const oj_tensor *weight,
                                  const oj_tensor *bias, double eps, bool rms);
oj_status oj_cpu_norm_backward_add(oj_engine *eng, oj_tensor *dx, oj_tensor *dx_low,
                                   oj_tensor *dweight, oj_tensor *dbias, const oj_tensor *dy,
                                   const oj_tensor *dres, const oj_tensor *x,
                                   const oj_tensor *mean, const oj_tensor *rstd,
                                   const oj_tensor *weight, bool rms);
oj_status oj_cpu_softmax_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                                 bool log);
oj_status oj_cpu_softmax_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *y,
                                  const oj_tensor *dy, int dim, bool log);
oj_status oj_cpu_cross_entropy_forward(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                       const oj_tensor *logits, const oj_tensor *targets,
                                       int64_t ignore_index, double label_smoothing,
                                       int64_t *n_valid);
oj_status oj_cpu_cross_entropy_backward(oj_engine *eng, oj_tensor *dlogits,
                                        const oj_tensor *logits, const oj_tensor *targets,
                                        const oj_tensor *lse, const oj_tensor *dloss,
                                        double scale, int64_t ignore_index,
                                        double label_smoothing);
oj_status oj_cpu_cross_entropy_fused(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                     oj_tensor *dlogits, const oj_tensor *logits,
                                     const oj_tensor *targets, const oj_tensor *dloss,
                                     double scale, int64_t ignore_index, double label_smoothing,
                                     int64_t *n_valid);
oj_status oj_cpu_nll_loss_forward(oj_engine *eng, oj_tensor *loss, const oj_tensor *logp,
                                  const oj_tensor *targets, int64_t ignore_index,
                                  int64_t *n_valid);
oj_status oj_cpu_nll_loss_backward(oj_engine *eng, oj_tensor *dlogp, const oj_tensor *targets,
                                   const oj_tensor *dloss, double scale, int64_t ignore_index);
oj_status oj_cpu_attention_forward(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                   const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                   const oj_tensor *mask, bool is_causal, double scale);
/* attention_paged_forward (backend.h): f32 only (OJ_ERR_UNSUPPORTED for
 * other dtypes, nothing written). */
oj_status oj_cpu_attention_paged_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                         const oj_tensor *k_pool, const oj_tensor *v_pool,
                                         const int32_t *blocks, int64_t S, double scale);
oj_status oj_cpu_attention_backward(oj_engine *eng, oj_tensor *dq, oj_tensor *dk, oj_tensor *dv,
                                    const oj_tensor *dout, const oj_tensor *q, const oj_tensor *k,
                                    const oj_tensor *v, const oj_tensor *out,
                                    const oj_tensor *lse, const oj_tensor *mask, bool is_causal,
                                    double scale);
oj_status oj_cpu_rotary_embedding(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  int64_t position_offset, double theta, bool inverse);
oj_status oj_cpu_rotary_embedding_at(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                     const oj_tensor *positions, double theta, bool inverse);
/* cpu_nn_rotary.c: RMS norm then rotary embedding, one pass per row */
oj_status oj_cpu_rms_norm_rotary_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                         const oj_tensor *x, const oj_tensor *weight, double eps,
                                         int64_t position_offset, double theta);
oj_status oj_cpu_rms_norm_rotary_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *dy,
                                          const oj_tensor *x, const oj_tensor *rstd,
                                          const oj_tensor *weight, int64_t position_offset,
                                          double theta);
/* cpu_elementwise.c: silu(gate) * up and its gradients */
oj_status oj_cpu_swiglu_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *gate,
                                const oj_tensor *up);
oj_status oj_cpu_swiglu_backward(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                 const oj_tensor *gate, const oj_tensor *up, const oj_tensor *dp);
oj_status oj_cpu_dropout(oj_engine *eng, oj_tensor *out, const oj_tensor *x, double p,
                         uint64_t seed, uint64_t offset);

/* cpu_index.c */
oj_status oj_cpu_gather(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                        const oj_tensor *index);
oj_status oj_cpu_scatter_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                             const oj_tensor *src);
oj_status oj_cpu_index_select(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                              const oj_tensor *index);
oj_status oj_cpu_index_add(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                           const oj_tensor *src, double alpha);
oj_status oj_cpu_index_copy(oj_engine *eng, oj_tensor *out, int dim, const oj_tensor *index,
                            const oj_tensor *src);

/* cpu_conv.c */
oj_status oj_cpu_im2col(oj_engine *eng, oj_tensor *cols, const oj_tensor *x,
                        const oj_im2col_args *a, double pad_value);
oj_status oj_cpu_col2im(oj_engine *eng, oj_tensor *x, const oj_tensor *cols,
                        const oj_im2col_args *a);

#endif /* OJAS_CPU_KERNELS_H */
