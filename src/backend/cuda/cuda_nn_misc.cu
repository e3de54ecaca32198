/* CUDA rotary position embedding (half-split layout, RoFormer, Su et al.
 * 2021) and dropout with the Philox4x32-10 counter layout of the CPU
 * kernel (cpu_nn_dropout.c), so the CUDA mask is the CPU's mask. Values are
 * computed in double, as on the CPU. */
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"

// x (..., T, D), out (..., T, D); one thread per rotated pair. The position
// of row t is positions[t] (i64/i32, element stride ps) when given, else
// pos + t.
__global__ void k_rotary(char *out, int odt, int oes, const char *x, int xdt, int xes,
                         int64_t rows, int64_t T, int64_t D, int64_t pos, const char *positions,
                         int pdt, int64_t ps, double theta, double sign) {
    int64_t half = D / 2, n = rows * T * half;
    int pes = pdt == OJ_I32 ? 4 : 8;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % half, rt = e / half, t = rt % T;
        int64_t p = positions ? (int64_t)oj_cu_ld_index(positions + t * ps * pes, pdt) : pos + t;
        double freq = pow(theta, -2.0 * (double)i / (double)D);
        double ang = (double)p * freq;
        double c = cos(ang), s = sign * sin(ang);
        int64_t base = rt * D;
        double x1 = oj_cu_ld(x + (base + i) * xes, xdt);
        double x2 = oj_cu_ld(x + (base + half + i) * xes, xdt);
        oj_cu_st(out + (base + i) * oes, odt, x1 * c - x2 * s);
        oj_cu_st(out + (base + half + i) * oes, odt, x2 * c + x1 * s);
    }
}

static oj_status rotary(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                        const oj_tensor *positions, int64_t position_offset, double theta,
                        bool inverse) {
    const char *op = "rotary_embedding";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK ||
        oj_cuda_need_contig(eng, x, op, "x") != OJ_OK)
        return oj_last_status(eng);
    int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1];
    int64_t rows = T > 0 && D > 0 ? oj_cuda_numel(x) / (T * D) : 0;
    int64_t n = rows * T * (D / 2);
    if (n == 0) return OJ_OK;
    k_rotary<<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
        oj_cuda_ptr(out), (int)out->dtype, (int)oj_dtype_size(out->dtype), oj_cuda_ptr(x),
        (int)x->dtype, (int)oj_dtype_size(x->dtype), rows, T, D, position_offset,
        positions ? oj_cuda_ptr(positions) : NULL, positions ? (int)positions->dtype : OJ_I64,
        positions && positions->rank ? positions->stride[0] : 0, theta, inverse ? -1.0 : 1.0);
    return oj_cuda_check(eng, "rotary_embedding");
}

oj_status oj_cuda_rotary_embedding(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   int64_t position_offset, double theta, bool inverse) {
    return rotary(eng, out, x, NULL, position_offset, theta, inverse);
}

oj_status oj_cuda_rotary_embedding_at(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                      const oj_tensor *positions, double theta, bool inverse) {
    return rotary(eng, out, x, positions, 0, theta, inverse);
}

// x (N), out (N), both contiguous; one thread per Philox block of 4
__global__ void k_dropout(char *out, int odt, int oes, const char *x, int xdt, int xes, int64_t n,
                          double p, double scale, uint32_t k0, uint32_t k1,
                          unsigned long long offset) {
    for (int64_t blk = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; blk * 4 < n;
         blk += (int64_t)gridDim.x * blockDim.x) {
        uint32_t r[4];
        oj_cu_philox(offset + (unsigned long long)blk, k0, k1, r);
        for (int j = 0; j < 4 && blk * 4 + j < n; j++) {
            int64_t e = blk * 4 + j;
            double u = (double)r[j] / 4294967296.0;
            double v = u >= p ? oj_cu_ld(x + e * xes, xdt) * scale : 0.0;
            oj_cu_st(out + e * oes, odt, v);
        }
    }
}

oj_status oj_cuda_dropout(oj_engine *eng, oj_tensor *out, const oj_tensor *x, double p,
                          uint64_t seed, uint64_t offset) {
    const char *op = "dropout";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK ||
        oj_cuda_need_contig(eng, x, op, "x") != OJ_OK)
        return oj_last_status(eng);
    int64_t n = oj_cuda_numel(x);
    if (n == 0) return OJ_OK;
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    k_dropout<<<oj_cuda_blocks((n + 3) / 4), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
        oj_cuda_ptr(out), (int)out->dtype, (int)oj_dtype_size(out->dtype), oj_cuda_ptr(x),
        (int)x->dtype, (int)oj_dtype_size(x->dtype), n, p, scale, (uint32_t)seed,
        (uint32_t)(seed >> 32), (unsigned long long)offset);
    return oj_cuda_check(eng, "dropout");
}
