/* The end of a sampled decode step on the device (backend.h,
 * decode_sample): the host sampler's token (src/infer/sample.c,
 * oj_sample_logits) from logits that stay on the device, so a sampled
 * step reads back one token like a greedy one and runs inside the
 * decoder's captured graph.
 *
 * One block of 1024 threads (16-bit logits read 8 at a time), in the
 * host sampler's arithmetic:
 *  - each logit is widened to double and, where seen[i] != 0, divided by
 *    the repetition penalty when positive, else multiplied by it;
 *  - candidates rank by value, then the lower id (the host's total
 *    order). The k best (k = top_k, or V when top_k is 0 or >= V; at most
 *    OJ__DECODE_SAMPLE_MAX_K) are found by a threshold: th = the k-th
 *    largest of G >= k group maxima (G a power of two, 32 .. 1024), so at
 *    least k values are >= th and every one of the k best is; those
 *    (usually 1-2 times k) are gathered into shared memory and each is
 *    placed by its rank in the total order, counted against all the
 *    others (no sort: two barriers). When more than SM_CAP values pass the
 *    threshold (many ties, a flat row) the k-th value is found exactly
 *    instead, bit by bit over the values' order-preserving 64-bit keys
 *    (64 counting passes), and ties at it are taken lowest id first;
 *  - the draw is draw_from's: e_i = exp((l_i - l_0) / temperature) in
 *    double (one thread each), then one thread sums them in rank order,
 *    cuts the nucleus (the shortest prefix whose probability reaches
 *    top_p), and walks the prefix sums up to u * total, with u =
 *    oj_sample_uniform(seed, seq, step) from Philox4x32-10 computed here
 *    (the same 53 bits).
 * The sums run in the host's order with IEEE double adds, multiplies and
 * divides, so the only difference from the host is exp: CUDA's double exp
 * and the C library's may differ in the last bit, which changes a token
 * only when u * total falls within about 1e-16 (relative) of a boundary.
 * A NaN logit gives tok = -1, as the host sampler's -1. */
#include "backend/cuda/cuda_decode_sample.cuh"
#include "backend/cuda/cuda_pdl.cuh"

oj_status oj_cuda_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                                const oj__decode_sampler *s);

#define SM_THREADS 1024

template <typename T>
__global__ void __launch_bounds__(SM_THREADS)
    k_dec_sample(int64_t *tok, const T *__restrict__ x, int V, bool vec, int64_t *pos,
                 uint8_t *seen, int64_t *step, int64_t *hist, long long nhist, sm_params p) {
    /* launched as a programmatic dependent of the head's product: nothing
     * is read before the kernels before it are done */
    oj_pdl_wait();
    sm_draw<SM_THREADS, false>(tok, x, V, vec, pos, seen, step, hist, nhist, p, NULL, NULL, 0);
}

oj_status oj_cuda_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                                const oj__decode_sampler *s) {
    if (oj_cuda_begin(eng, "decode_sample") != OJ_OK) return oj_last_status(eng);
    const int V = (int)oj_cuda_numel(logits);
    const sm_params p = sm_params_of(s, V, SM_THREADS);
    int64_t *tp = (int64_t *)oj_cuda_ptr(tok), *sp = (int64_t *)oj_cuda_ptr(step);
    int64_t *pp = pos ? (int64_t *)oj_cuda_ptr(pos) : NULL;
    uint8_t *seenp = seen ? (uint8_t *)oj_cuda_ptr(seen) : NULL;
    int64_t *hp = hist ? (int64_t *)oj_cuda_ptr(hist) : NULL;
    const long long nh = hist ? (long long)oj_cuda_numel(hist) : 0;
    const void *x = oj_cuda_ptr(logits);
    const bool vec = oj_cu_aligned16(x);
    switch (logits->dtype) { /* its launch overlaps the kernel before (cuda_pdl.cuh) */
    case OJ_BF16:
        oj_pdl_launch(k_dec_sample<oj_cu_bf16>, dim3(1), dim3(SM_THREADS), 0, tp,
                      (const oj_cu_bf16 *)x, V, vec, pp, seenp, sp, hp, nh, p);
        break;
    case OJ_F16:
        oj_pdl_launch(k_dec_sample<oj_cu_f16>, dim3(1), dim3(SM_THREADS), 0, tp,
                      (const oj_cu_f16 *)x, V, vec, pp, seenp, sp, hp, nh, p);
        break;
    default:
        oj_pdl_launch(k_dec_sample<float>, dim3(1), dim3(SM_THREADS), 0, tp, (const float *)x, V,
                      false, pp, seenp, sp, hp, nh, p);
        break;
    }
    return oj_cuda_check(eng, "decode_sample");
}
