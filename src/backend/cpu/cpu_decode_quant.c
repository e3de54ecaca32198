/* Batch-1 decode with a block-quantized weight (backend.h:
 * decode_qlinear, decode_qnorm_head) on the CPU: the reference the CUDA kernels
 * (cuda_decode_quant.cu) are tested against. Each row of W dequantized by
 * oj_dequantize_row's formulas, straight loops in double, each value
 * rounded to the storage dtype where the unfused ops round (the norm's
 * output, the product's, the GELU's, the residual sum). */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_decode.h"
#include "backend/cpu/cpu_nn_util.h"
#include "backend/scalar_ops.h"
#include "quant/quant_internal.h"

/* v rounded to dt (f32, bf16, f16) and back. */
static double round_to(oj_dtype dt, double v) {
    switch (dt) {
    case OJ_BF16: return oj_bf16_to_f32(oj_f32_to_bf16((float)v));
    case OJ_F16: return oj_f16_to_f32(oj_f32_to_f16((float)v));
    default: return (float)v;
    }
}

oj_status oj_cpu_decode_qlinear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                const oj_tensor *nw, const oj_tensor *nb, double eps,
                                const oj_tensor *blocks, int qtype, int64_t K, const oj_tensor *b,
                                int epi, oj_tensor *kv, const oj_tensor *slot) {
    static const char op[] = "decode_qlinear";
    const oj_dtype dt = out->dtype;
    const int64_t N = blocks->shape[0], rb = blocks->shape[1];
    double *u = oj__nn_scratch(eng, 2 * K + 2 * N, op);
    float *wr = malloc((size_t)K * sizeof *wr);
    if (u == NULL || wr == NULL) {
        free(u);
        free(wr);
        return u ? oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op)
                 : oj_last_status(eng);
    }
    double *t = u + K, *o = u + 2 * K, *bias = o + N;
    oj__nn_load(oj__nn_base(x), x->dtype, K, 1, u);
    if (nw) {
        double mean = 0.0, var = 0.0;
        for (int64_t k = 0; k < K; k++) mean += u[k];
        mean /= (double)K;
        for (int64_t k = 0; k < K; k++) var += (u[k] - mean) * (u[k] - mean);
        const double rstd = 1.0 / sqrt(var / (double)K + eps);
        oj__nn_load(oj__nn_base(nw), nw->dtype, K, 1, t);
        for (int64_t k = 0; k < K; k++) u[k] = (u[k] - mean) * rstd * t[k];
        oj__nn_load(oj__nn_base(nb), nb->dtype, K, 1, t);
        for (int64_t k = 0; k < K; k++) u[k] = round_to(dt, u[k] + t[k]);
    }
    if (b) oj__nn_load(oj__nn_base(b), b->dtype, N, 1, bias);
    const uint8_t *w = (const uint8_t *)oj__nn_base(blocks);
    for (int64_t n = 0; n < N; n++) {
        oj__dequantize_row((oj_qtype)qtype, w + n * rb, K, wr);
        double s = 0.0;
        for (int64_t k = 0; k < K; k++) s += u[k] * wr[k];
        o[n] = s + bias[n]; /* bias 0 without b (the scratch is zeroed) */
    }
    if (epi == 2) oj__nn_load(oj__nn_base(out), dt, N, 1, bias); /* the residual (b is in o) */
    for (int64_t n = 0; n < N; n++) {
        double v = round_to(dt, o[n]);
        if (epi == 1) v = round_to(dt, oj_unary_d(OJ_UN_GELU_TANH, v, 0.0, 0.0));
        if (epi == 2) v = round_to(dt, bias[n] + v);
        o[n] = v;
    }
    oj__nn_store(oj__nn_base(out), dt, N, o);
    if (kv) {
        const int64_t H = kv->shape[2], S = kv->shape[3], D = kv->shape[4], C = H * D;
        const int64_t s = *(const int64_t *)oj__nn_base(slot);
        const int64_t es = (int64_t)oj_dtype_size(dt);
        char *kp = oj__nn_base(kv);
        if (s >= 0 && s < S)
            for (int64_t j = 0; j < 2 * C; j++) {
                int64_t which = j / C, h = (j % C) / D, d = j % D;
                oj__nn_store(kp + (((which * H + h) * S + s) * D + d) * es, dt, 1, &o[C + j]);
            }
    }
    free(wr);
    free(u);
    return OJ_OK;
}

oj_status oj_cpu_decode_qnorm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   const oj_tensor *nw, const oj_tensor *nb, double eps,
                                   const oj_tensor *blocks, int qtype, int64_t K, oj_tensor *tok,
                                   oj_tensor *pos, oj_tensor *hist) {
    oj_status st = oj_cpu_decode_qlinear(eng, out, x, nw, nb, eps, blocks, qtype, K, NULL, 0, NULL,
                                         NULL);
    if (st == OJ_OK) st = oj_cpu_decode_argmax_advance(eng, tok, out, pos);
    const int64_t q = *(const int64_t *)oj__nn_base(pos);
    if (st == OJ_OK && hist && q >= 0 && q < oj_numel(hist))
        ((int64_t *)oj__nn_base(hist))[q] = *(const int64_t *)oj__nn_base(tok);
    return st;
}
