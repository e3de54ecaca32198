/* The tiles of the CUDA one-row matmul's "kn" layout (cuda_gemv.cu:
 * out[1, N] = x[1, K] @ W[K, N], W's n-stride 1), in one place for the
 * kernels' launch and for the host code that must know their order of
 * summation (ops/nn_decode.c: whether the fused decode entries give the
 * matmul's bits). Pure functions of (N, K): the order is the same on every
 * run and every GPU, and the host decides without a device. */
#ifndef OJAS_BACKEND_GEMV_TILES_H
#define OJAS_BACKEND_GEMV_TILES_H

#include <stdbool.h>
#include <stdint.h>

#define OJ_GEMV_KN_THREADS 256      /* threads of a "kn" block: 8 warps splitting K */
#define OJ_GEMV_KN_SPLIT_BLOCKS 264 /* fewer blocks over N than this: split K */
#define OJ_GEMV_KN_LONG_K 4096      /* K >= this: 8 column groups whatever N */

typedef struct {
    int G;          /* column groups of 8 outputs per block */
    int64_t blocks; /* blocks over N: ceil(N / (8 G)) */
    int64_t rows;   /* rows of K a thread sums when K is not split */
    int64_t S;      /* slices of K (1: not split), before rounding to whole rounds */
} oj_gemv_kn_tiles;

/* Column groups of 8 per block for N outputs: the widest tile (8, 4
 * groups) that still leaves >= 256 blocks, else 2. */
static inline int oj_gemv_kn_groups(int64_t N) {
    const int64_t groups = (N + 7) / 8;
    return groups >= 8 * 256 ? 8 : groups >= 4 * 256 ? 4 : 2;
}

/* The tiles of an N x K product: 8 groups for long K (128 bytes of a row
 * per warp load), else oj_gemv_kn_groups(N); K split into S slices when
 * fewer than OJ_GEMV_KN_SPLIT_BLOCKS blocks cover N, keeping at least 16
 * rows a thread per slice. */
static inline oj_gemv_kn_tiles oj_gemv_kn_plan(int64_t N, int64_t K) {
    oj_gemv_kn_tiles t;
    t.G = K >= OJ_GEMV_KN_LONG_K ? 8 : oj_gemv_kn_groups(N);
    const int64_t ks = OJ_GEMV_KN_THREADS / t.G; /* threads along K */
    t.blocks = (N + 8 * t.G - 1) / (8 * t.G);
    t.rows = (K + ks - 1) / ks;
    t.S = t.blocks < OJ_GEMV_KN_SPLIT_BLOCKS
              ? (OJ_GEMV_KN_SPLIT_BLOCKS + t.blocks - 1) / t.blocks
              : 1;
    if (t.S > t.rows / 16) t.S = t.rows / 16;
    if (t.S < 1) t.S = 1;
    return t;
}

/* Whether each output of the N x K product is summed as by one unsplit
 * block of oj_gemv_kn_groups(N) column groups (the order the fused decode
 * entries follow): K below OJ_GEMV_KN_LONG_K and no split of K. */
static inline bool oj_gemv_kn_unsplit(int64_t N, int64_t K) {
    const oj_gemv_kn_tiles t = oj_gemv_kn_plan(N, K);
    return t.G == oj_gemv_kn_groups(N) && t.S == 1 && K < OJ_GEMV_KN_LONG_K;
}

#endif /* OJAS_BACKEND_GEMV_TILES_H */
