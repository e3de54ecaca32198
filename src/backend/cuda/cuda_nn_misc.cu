/* CUDA rotary position embedding (half-split layout, RoFormer, Su et al.
 * 2021) and dropout with the Philox4x32-10 counter layout of the CPU
 * kernel (cpu_nn_dropout.c), so the CUDA mask is the CPU's mask. Values are
 * computed in double, as on the CPU. */
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"

/* Loads and stores of the rotary kernel: rot_io<T> through typed pointers
 * (float, oj_cu_bf16, oj_cu_f16, double), rot_io<rot_any> through
 * oj_cu_ld / oj_cu_st (any float dtype pair); the same values either way
 * (a double stored as bf16/f16 is rounded to float first, as oj_cu_st
 * does). ld returns the raw element (R), val converts it. */
struct rot_any {};
template <typename T> struct rot_io {
    typedef T R;
    static __device__ __forceinline__ T ld(const char *p, int64_t i, int, int) {
        return ((const T *)p)[i];
    }
    static __device__ __forceinline__ double val(T v) { return (double)oj_cu_tof(v); }
    static __device__ __forceinline__ void st(char *p, int64_t i, int, int, double v) {
        ((T *)p)[i] = oj_cu_fromf<T>((float)v);
    }
};
template <> struct rot_io<double> {
    typedef double R;
    static __device__ __forceinline__ double ld(const char *p, int64_t i, int, int) {
        return ((const double *)p)[i];
    }
    static __device__ __forceinline__ double val(double v) { return v; }
    static __device__ __forceinline__ void st(char *p, int64_t i, int, int, double v) {
        ((double *)p)[i] = v;
    }
};
template <> struct rot_io<rot_any> {
    typedef double R;
    static __device__ __forceinline__ double ld(const char *p, int64_t i, int dt, int es) {
        return oj_cu_ld(p + i * es, dt);
    }
    static __device__ __forceinline__ double val(double v) { return v; }
    static __device__ __forceinline__ void st(char *p, int64_t i, int dt, int es, double v) {
        oj_cu_st(p + i * es, dt, v);
    }
};

// x (R, T, D), out (R, T, D), both contiguous (R: every dim before T).
// Thread q owns the pair (t, i) = (q / (D/2), q % (D/2)) of every row
// r in [blockIdx.y * rpy, +rpy): it computes the angle once, pos(t) *
// theta^(-2i/D) with pos(t) = positions[t] (i64/i32, element stride ps)
// when given, else pos + t, and its cos/sin in double (as the CPU's table),
// then rotates x[r, t, i] and x[r, t, i + D/2] row after row, the loads of
// ROT_UNROLL rows issued together, with no branch between them (in the
// last group, rows past the end reread a valid row and are not stored).
// Across a warp the loads are coalesced (consecutive i). The values are the
// former one-thread-per-pair kernel's (same formulas, in double).
// Cost, q/k of nanolab-124m, [16, 12, 1024, 64] f32 (or [16, 6, 1024,
// 128]): 6.3 M pairs, 50.3 MB read + 50.3 MB written, 4 double multiplies
// and 2 adds per pair (38 MFLOP); the trigonometry (pow, cos, sin in
// double, a few hundred instructions) once per thread, 131,072 threads
// (~40 M double instructions) instead of once per pair (6.3 M times: the
// 138 us per call measured before). Grid 256 x 2 blocks of 256 threads,
// each thread walking 96 (or 48) rows; estimated ~26 us at 3.9 TB/s,
// measured on the H200 (ncu, 2026-11-29): 27-28.5 us f32 (~3.6 TB/s), 24 us
// bf16. The backward is the same kernel (sign -1).
#define ROT_THREADS 256
#define ROT_UNROLL 8
#define ROT_TARGET_THREADS (1 << 17) /* one wave of 4 blocks per SM on an H200 */

template <typename IO>
__global__ void __launch_bounds__(ROT_THREADS, 4)
    k_rotary(char *out, int odt, int oes, const char *x, int xdt, int xes, int64_t R, int64_t T,
             int64_t D, int64_t rpy, int64_t pos, const char *positions, int pdt, int64_t ps,
             double theta, double sign) {
    const int64_t half = D / 2, npair = T * half, plane = T * D;
    const int pes = pdt == OJ_I32 ? 4 : 8;
    const int64_t r0 = (int64_t)blockIdx.y * rpy, r1 = r0 + rpy < R ? r0 + rpy : R;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < npair;
         q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = q / half, i = q - t * half;
        int64_t p = positions ? (int64_t)oj_cu_ld_index(positions + t * ps * pes, pdt) : pos + t;
        double freq = pow(theta, -2.0 * (double)i / (double)D);
        double ang = (double)p * freq;
        double c = cos(ang), s = sign * sin(ang);
        int64_t e = (r0 * T + t) * D + i; /* x1 of row r */
        for (int64_t r = r0; r < r1; r += ROT_UNROLL, e += ROT_UNROLL * plane) {
            const int nu = r1 - r < ROT_UNROLL ? (int)(r1 - r) : ROT_UNROLL;
            typename IO::R a[ROT_UNROLL], b[ROT_UNROLL];
#pragma unroll
            for (int u = 0; u < ROT_UNROLL; u++) { /* rows past r1 reread row r */
                const int64_t eu = e + (u < nu ? u : 0) * plane;
                a[u] = IO::ld(x, eu, xdt, xes);
                b[u] = IO::ld(x, eu + half, xdt, xes);
            }
#pragma unroll
            for (int u = 0; u < ROT_UNROLL; u++) {
                if (u < nu) {
                    const double x1 = IO::val(a[u]), x2 = IO::val(b[u]);
                    IO::st(out, e + u * plane, odt, oes, x1 * c - x2 * s);
                    IO::st(out, e + u * plane + half, odt, oes, x2 * c + x1 * s);
                }
            }
        }
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
    int64_t R = T > 0 && D > 0 ? oj_cuda_numel(x) / (T * D) : 0;
    int64_t npair = T * (D / 2);
    if (R == 0 || npair == 0) return OJ_OK;
    /* grid: x over the pairs of a row, y over groups of rpy rows, so that
     * about ROT_TARGET_THREADS threads run (the results do not depend on it) */
    int64_t gx = (npair + ROT_THREADS - 1) / ROT_THREADS;
    if (gx > (1 << 20)) gx = 1 << 20;
    int64_t ny = (ROT_TARGET_THREADS + gx * ROT_THREADS - 1) / (gx * ROT_THREADS);
    if (ny > R) ny = R;
    if (ny > 65535) ny = 65535;
    int64_t rpy = (R + ny - 1) / ny;
    ny = (R + rpy - 1) / rpy;
    dim3 grid((unsigned)gx, (unsigned)ny);
    char *o = oj_cuda_ptr(out);
    const char *xp = oj_cuda_ptr(x);
    int odt = (int)out->dtype, oes = (int)oj_dtype_size(out->dtype);
    int xdt = (int)x->dtype, xes = (int)oj_dtype_size(x->dtype);
    const char *pp = positions ? oj_cuda_ptr(positions) : NULL;
    int pdt = positions ? (int)positions->dtype : OJ_I64;
    int64_t ps = positions && positions->rank ? positions->stride[0] : 0;
    double sign = inverse ? -1.0 : 1.0;
#define ROT_LAUNCH(IO)                                                                        \
    k_rotary<rot_io<IO> ><<<grid, ROT_THREADS, 0, OJ_STREAM>>>(o, odt, oes, xp, xdt, xes, R, T, D, \
                                                              rpy, position_offset, pp, pdt, ps,  \
                                                              theta, sign)
    switch (odt == xdt ? xdt : -1) {
    case OJ_F32: ROT_LAUNCH(float); break;
    case OJ_BF16: ROT_LAUNCH(oj_cu_bf16); break;
    case OJ_F16: ROT_LAUNCH(oj_cu_f16); break;
    case OJ_F64: ROT_LAUNCH(double); break;
    default: ROT_LAUNCH(rot_any); break;
    }
#undef ROT_LAUNCH
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
