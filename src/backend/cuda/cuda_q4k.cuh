/* Q4_K's packed 6-bit scale and min of sub-block s (0..7) of a super-block
 * whose 12 scale bytes start at sc (ggml's get_scale_min_k4 layout: s < 4
 * in the low 6 bits of bytes s and s + 4; else split between the nibbles
 * of byte s + 4 and the top 2 bits of bytes s - 4 and s). Shared by the
 * dequantizing GEMV (cuda_quant.cu) and the decode step's kernels
 * (cuda_decode_quant.cu). */
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

#endif /* OJAS_BACKEND_CUDA_Q4K_CUH */
