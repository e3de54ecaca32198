/* Q4_K's packed 6-bit scale and min of sub-block s (0..7) of a super-block
 * whose 12 scale bytes start at sc (ggml's get_scale_min_k4 layout: s < 4
 * in the low 6 bits of bytes s and s + 4; else split between the nibbles
 * of byte s + 4 and the top 2 bits of bytes s - 4 and s). Shared by the
 * dequantizing GEMV (cuda_quant.cu) and the decode step's kernels
 * (cuda_decode_quant.cu); q4k_scale_min_w decodes the same bytes held in
 * three words (one 16-byte load of the super-block's head gives d, dmin
 * and them), without a branch on s. */
#ifndef OJAS_BACKEND_CUDA_Q4K_CUH
#define OJAS_BACKEND_CUDA_Q4K_CUH

#include <stdint.h>

static __device__ __forceinline__ void q4k_scale_min(const uint8_t *sc, int s, int *ls, int *lm) {
    if (s < 4) {
        *ls = sc[s] & 63;
        *lm = sc[s + 4] & 63;
    } else {
        *ls = (sc[s + 4] & 0xF) | ((sc[s - 4] >> 6) << 4);
        *lm = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
}

/* q4k_scale_min of sub-block s with the 12 scale bytes in w0 (bytes 0..3),
 * w1 (4..7), w2 (8..11), little-endian: j = s mod 4 picks byte j of each
 * word, s < 4 the low 6 bits of w0's and w1's, else w2's nibbles and the
 * top 2 bits of w0's (scale) and w1's (min). */
static __device__ __forceinline__ void q4k_scale_min_w(unsigned w0, unsigned w1, unsigned w2, int s,
                                                       int *ls, int *lm) {
    const int sh = 8 * (s & 3);
    const int b0 = (int)(w0 >> sh & 0xff), b1 = (int)(w1 >> sh & 0xff), b2 = (int)(w2 >> sh & 0xff);
    const bool lo = s < 4;
    *ls = lo ? b0 & 63 : (b2 & 0xF) | (b0 >> 6) << 4;
    *lm = lo ? b1 & 63 : (b2 >> 4) | (b1 >> 6) << 4;
}

#endif /* OJAS_BACKEND_CUDA_Q4K_CUH */
