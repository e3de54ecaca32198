/* nanolab's per-head output gate, backward (backend.h mul_row_backward):
 * p = a * b with b one value per row of a ([..., 1] against [..., D]),
 * da = dp * b and db = the row's sum of dp * a in one pass: one warp per
 * row, lanes over D. The chain it replaces reads dp and b and writes da,
 * reads dp and a and writes dp * a, then reads that back to sum it (for
 * nanolab-124m's [16, 1024, 12, 64] bf16: ~150 MB a layer); this reads
 * dp and a and writes da (~75 MB). Each product is rounded to the dtype
 * as binary(MUL) stores it (__fmul_rn, no contraction); db sums the
 * rounded products in f32 by a warp butterfly (a fixed order: the same
 * bits run to run, within rounding of the reduce entry's sum). */
#include <stdlib.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

#define MR_THREADS 256
#define MR_WARPS (MR_THREADS / 32)
#define MR_MAX_BLOCKS 8192

template <typename T>
__global__ void __launch_bounds__(MR_THREADS)
    k_mul_row_bwd(const T *dp, const T *a, const T *b, T *da, T *db, int64_t rows, int64_t D) {
    const int lane = (int)(threadIdx.x & 31);
    for (int64_t r = (int64_t)blockIdx.x * MR_WARPS + (threadIdx.x >> 5); r < rows;
         r += (int64_t)gridDim.x * MR_WARPS) {
        const float bv = oj_cu_tof(b[r]);
        const T *g = dp + r * D, *x = a + r * D;
        float acc = 0.0f;
        for (int64_t d = lane; d < D; d += 32) {
            const float gf = oj_cu_tof(g[d]);
            if (da) da[r * D + d] = oj_cu_fromf<T>(__fmul_rn(gf, bv));
            if (db) acc = __fadd_rn(acc, oj_cu_tof(oj_cu_fromf<T>(__fmul_rn(gf, oj_cu_tof(x[d])))));
        }
        if (db == NULL) continue; /* uniform over the warp */
        acc = oj_cu_warp_sumf(acc);
        if (lane == 0) db[r] = oj_cu_fromf<T>(acc);
    }
}

/* D 64 with 16-byte accesses: a row is 32 / E lanes (E = 16 / sizeof(T)
 * elements of each half a lane: element l and l + 32, the two lane l of
 * k_mul_row_bwd reads, sit in one lane), 8 (bf16) rows a warp instruction;
 * the same products and, by oj_cu_lanes_sum, the same sum order: the same
 * bits. OJAS_CUDA_MULROW_VEC=0 keeps the kernel above. */
#define MR_D 64
template <typename T>
__global__ void __launch_bounds__(MR_THREADS)
    k_mul_row_bwd_v(const T *dp, const T *a, const T *b, T *da, T *db, int64_t rows) {
    constexpr int E = 16 / (int)sizeof(T), LPR = 32 / E, G = 32 / LPR, H = MR_D / 2;
    const int lane = (int)(threadIdx.x & 31), j = lane % LPR;
    const int64_t ng = (int64_t)gridDim.x * MR_WARPS * G; /* row groups in the grid */
    for (int64_t r0 = ((int64_t)blockIdx.x * MR_WARPS + (threadIdx.x >> 5)) * G; r0 < rows;
         r0 += ng) { /* uniform over the warp */
        const int64_t r = r0 + lane / LPR;
        const bool in = r < rows;
        float g1[E], g2[E], p[E];
        const T *gr = dp + r * MR_D + j * E, *xr = a + r * MR_D + j * E;
        const float bv = in ? oj_cu_tof(b[r]) : 0.0f;
        if (in) {
            oj_cu_ldv<T, E>(gr, g1);
            oj_cu_ldv<T, E>(gr + H, g2);
        } else {
#pragma unroll
            for (int c = 0; c < E; c++) g1[c] = g2[c] = 0.0f;
        }
        if (da && in) {
            float o1[E], o2[E];
#pragma unroll
            for (int c = 0; c < E; c++) o1[c] = __fmul_rn(g1[c], bv), o2[c] = __fmul_rn(g2[c], bv);
            oj_cu_stv<T, E>(da + r * MR_D + j * E, o1);
            oj_cu_stv<T, E>(da + r * MR_D + H + j * E, o2);
        }
        if (db == NULL) continue; /* uniform over the grid */
        float x1[E], x2[E];
        if (in) {
            oj_cu_ldv<T, E>(xr, x1);
            oj_cu_ldv<T, E>(xr + H, x2);
        } else {
#pragma unroll
            for (int c = 0; c < E; c++) x1[c] = x2[c] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < E; c++) { /* element-lane j E + c: elements l, then l + 32 */
            float acc = 0.0f;
            acc = __fadd_rn(acc, oj_cu_hw_tof(oj_cu_hw_fromf<T>(__fmul_rn(g1[c], x1[c]))));
            acc = __fadd_rn(acc, oj_cu_hw_tof(oj_cu_hw_fromf<T>(__fmul_rn(g2[c], x2[c]))));
            p[c] = acc;
        }
        const float s = oj_cu_lanes_sum<E>(p);
        if (in && j == 0) db[r] = oj_cu_fromf<T>(s);
    }
}

oj_status oj_cuda_mul_row_backward(oj_engine *eng, oj_tensor *da, oj_tensor *db,
                                   const oj_tensor *dp, const oj_tensor *a, const oj_tensor *b);
oj_status oj_cuda_mul_row_backward(oj_engine *eng, oj_tensor *da, oj_tensor *db,
                                   const oj_tensor *dp, const oj_tensor *a, const oj_tensor *b) {
    const char *op = "mul_row_backward";
    const int r = a->rank;
    bool ok = r >= 1 && dp->rank == r && b->rank == r && a->shape[r - 1] >= 1 &&
              b->shape[r - 1] == 1 && dp->dtype == a->dtype && b->dtype == a->dtype &&
              oj_cu_is_f16ish(a->dtype) && oj_cuda_contig(a) && oj_cuda_contig(dp) &&
              oj_cuda_contig(b) && oj_cuda_numel(dp) == oj_cuda_numel(a);
    for (int d = 0; ok && d < r - 1; d++) ok = b->shape[d] == a->shape[d];
    if (ok && da)
        ok = da->dtype == a->dtype && oj_cuda_contig(da) && oj_cuda_numel(da) == oj_cuda_numel(a);
    if (ok && db)
        ok = db->dtype == a->dtype && oj_cuda_contig(db) && oj_cuda_numel(db) == oj_cuda_numel(b);
    if (!ok)
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: dp, a, da [..., D] and b, db [..., 1] contiguous, one float "
                            "dtype (f32, bf16, f16) expected",
                            op);
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const int64_t D = a->shape[r - 1], rows = D > 0 ? oj_cuda_numel(a) / D : 0;
    if (rows == 0 || (da == NULL && db == NULL)) return OJ_OK;
    /* OJAS_CUDA_MULROW_VEC read per call (tests compare) */
    if (D == MR_D && oj__env_flag("OJAS_CUDA_MULROW_VEC", true) &&
        oj_cu_aligned16(oj_cuda_ptr(dp)) && oj_cu_aligned16(oj_cuda_ptr(a)) &&
        (!da || oj_cu_aligned16(oj_cuda_ptr(da)))) {
        const int64_t G = 16 / (int64_t)oj_dtype_size(a->dtype); /* rows a warp instruction */
        const int64_t nbv = (rows + MR_WARPS * G - 1) / (MR_WARPS * G);
        const unsigned bv = (unsigned)(nbv < MR_MAX_BLOCKS ? nbv : MR_MAX_BLOCKS);
        OJ_CU_FLOAT_TYPE(a->dtype, T_,
                         (k_mul_row_bwd_v<T_><<<bv, MR_THREADS, 0, OJ_STREAM>>>(
                             (const T_ *)oj_cuda_ptr(dp), (const T_ *)oj_cuda_ptr(a),
                             (const T_ *)oj_cuda_ptr(b), da ? (T_ *)oj_cuda_ptr(da) : NULL,
                             db ? (T_ *)oj_cuda_ptr(db) : NULL, rows)));
        return oj_cuda_check(eng, "k_mul_row_bwd_v");
    }
    int64_t nb = (rows + MR_WARPS - 1) / MR_WARPS;
    const unsigned blocks = (unsigned)(nb < MR_MAX_BLOCKS ? nb : MR_MAX_BLOCKS);
    OJ_CU_FLOAT_TYPE(a->dtype, T_,
                     (k_mul_row_bwd<T_><<<blocks, MR_THREADS, 0, OJ_STREAM>>>(
                         (const T_ *)oj_cuda_ptr(dp), (const T_ *)oj_cuda_ptr(a),
                         (const T_ *)oj_cuda_ptr(b), da ? (T_ *)oj_cuda_ptr(da) : NULL,
                         db ? (T_ *)oj_cuda_ptr(db) : NULL, rows, D)));
    return oj_cuda_check(eng, op);
}
