/* CUDA elementwise kernels: copy/cast (with broadcast strides), fill, unary
 * (+ backward), binary, where, and the Philox random fill.
 *
 * Fast paths (below) for f32/bf16/f16 operands of one dtype laid out as
 * rows x cols compute in float (scalar_ops.h's float definitions;
 * add/sub/mul/div explicitly rounded, so f32 results are the CPU's bits),
 * and strided same-dtype copies run as memcpy, row copies or transposing
 * tiles. Everything else (f64, integers, mixed dtypes, other layouts) goes
 * through the generic strided iterator and double, exactly as the CPU
 * kernels (cpu_elementwise.c), except f32 add/sub/mul/div, computed in
 * float: IEEE float results of those are the same bits as the double
 * computation rounded to float. */
#include <string.h>

#include <type_traits>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/scalar_ops.h"

static __device__ __forceinline__ bool is_int_dt(int dt) {
    return dt == OJ_I64 || dt == OJ_I32 || dt == OJ_U32 || dt == OJ_U16 || dt == OJ_U8;
}

/* Integer load as in cpu_elementwise.c (ints and bool exactly). */
static __device__ __forceinline__ long long ld_i64(const char *p, int dt) {
    switch (dt) {
    case OJ_I64: return *(const long long *)p;
    case OJ_I32: return *(const int32_t *)p;
    case OJ_U32: return *(const uint32_t *)p;
    case OJ_U16: return *(const uint16_t *)p;
    case OJ_U8: return *(const uint8_t *)p;
    case OJ_BOOL: return *(const uint8_t *)p != 0;
    default: {
        double v = oj_cu_ld(p, dt);
        if (v != v) return 0;
        if (v >= 9223372036854775808.0) return INT64_MAX;
        if (v < -9223372036854775808.0) return INT64_MIN;
        return (long long)v;
    }
    }
}

static __device__ __forceinline__ void copy_bytes(char *d, const char *s, int es) {
    switch (es) {
    case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
    case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
    case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
    default: *(unsigned long long *)d = *(const unsigned long long *)s; break;
    }
}

static int dt_size(int dt) { return (int)oj_dtype_size((oj_dtype)dt); }

/* Kernel names per op, for errors and the OJAS_CUDA_PROFILE table. */
static const char *const unary_names[] = {
    "unary neg", "unary abs", "unary exp", "unary log", "unary log1p", "unary sqrt",
    "unary rsqrt", "unary square", "unary sign", "unary relu", "unary leaky_relu",
    "unary gelu_erf", "unary gelu_tanh", "unary silu", "unary sigmoid", "unary tanh",
    "unary softplus", "unary elu", "unary mish", "unary pow_scalar", "unary rpow_scalar",
    "unary clamp", "unary affine", "unary reciprocal", "unary sin", "unary cos", "unary not",
    "unary isnan", "unary isfinite"};
static const char *const unary_bw_names[] = {
    "unary_backward neg", "unary_backward abs", "unary_backward exp", "unary_backward log",
    "unary_backward log1p", "unary_backward sqrt", "unary_backward rsqrt",
    "unary_backward square", "unary_backward sign", "unary_backward relu",
    "unary_backward leaky_relu", "unary_backward gelu_erf", "unary_backward gelu_tanh",
    "unary_backward silu", "unary_backward sigmoid", "unary_backward tanh",
    "unary_backward softplus", "unary_backward elu", "unary_backward mish",
    "unary_backward pow_scalar", "unary_backward rpow_scalar", "unary_backward clamp",
    "unary_backward affine", "unary_backward reciprocal", "unary_backward sin",
    "unary_backward cos", "unary_backward not", "unary_backward isnan",
    "unary_backward isfinite"};
static const char *const binary_names[] = {
    "binary add", "binary sub", "binary mul", "binary div", "binary pow", "binary maximum",
    "binary minimum", "binary eq", "binary ne", "binary lt", "binary le", "binary gt",
    "binary ge", "binary and", "binary or", "binary xor"};
static_assert(sizeof unary_names / sizeof unary_names[0] == OJ_UN_COUNT, "unary names");
static_assert(sizeof unary_bw_names / sizeof unary_bw_names[0] == OJ_UN_COUNT, "unary names");
static_assert(sizeof binary_names / sizeof binary_names[0] == OJ_BIN_COUNT, "binary names");
static const char *unary_name(oj_unary_op op) {
    return (unsigned)op < OJ_UN_COUNT ? unary_names[op] : "unary";
}
static const char *unary_bw_name(oj_unary_op op) {
    return (unsigned)op < OJ_UN_COUNT ? unary_bw_names[op] : "unary_backward";
}
static const char *binary_name(oj_binary_op op) {
    return (unsigned)op < OJ_BIN_COUNT ? binary_names[op] : "binary";
}

#define GRID_LOOP(i, n)                                                                      \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---------------------------------------------------------------- fast paths
 * Chosen on the host per call from the merged iteration (oj_cu_iter_init
 * drops size-1 dims and merges dims every operand steps through as one).
 * When every operand is dense along the innermost merged dim (cols) or
 * takes one value per row (column stride 0), the kernel k_ew walks
 * rows x cols, the rows being every index of the outer dims with any
 * strides (0: broadcast); each thread takes N = 16 / element size
 * elements of one row, decomposing its flat vector index into (row, column
 * block) and the row into outer indices with 32-bit divisions (64-bit only
 * past 2^32 vectors), as one 16-byte load/store per operand when all of
 * them are aligned (scalar loads otherwise, e.g. a view at an odd offset),
 * computing in float. Vectors are numbered row-major, so a warp covers
 * consecutive memory of a dense operand even when rows are short (D = 128
 * heads: 16 vectors of bf16 per row).
 * That covers dense tensors (one row of numel), [N, C] op [C], [B, T, C]
 * op [C], [N, C] op [N, 1], and views such as a [B, T, H, D] tensor seen
 * as [B, H, T, D] times a per-head gate [B, H, T, 1] taken from a
 * transposed [B, T, H] (rank 4 after merging, cols = D), for f32/bf16/f16
 * operands of one dtype (and f32 with bf16/f16 for add/sub/mul).
 * f64 and mixed or integer dtypes keep the generic double path below.
 *
 * Bytes moved per element (estimates until measured on the H200; copy
 * bandwidth 4.1 TB/s, target >= 3.5 TB/s for large tensors):
 *   unary f32 8 B (read, write): 50 M elements = 400 MB, ~0.10 ms;
 *   unary backward 12 B (x or y, dy, dx; the operand the gradient of that
 *     op does not read is not loaded): gelu backward of 50 M, ~0.15 ms;
 *   binary 12 B dense, 8 B with a broadcast row (read from cache);
 *   cast f32 -> bf16 6 B; bf16 tensors half of the f32 figures.
 * FLOPs are negligible against bytes except gelu/erf/pow (~20-40 float
 * instructions per element; at 4 B/element bf16 the H200 issues ~30
 * per element at full bandwidth, so bf16 gelu may be compute-bound). */

#define EW_MAXD (OJ_MAX_RANK - 1)
struct ew_in {
    const char *p;
    int bc; /* 1: one value per row (column stride 0) */
};
struct ew_geom {
    int64_t rows, cols;
    char *out;
    int nd;    /* outer dims; rows is the product of oshape[0..nd) */
    int small; /* rows x vectors per row < 2^32: 32-bit index math */
    int vec;   /* every operand aligned for N-element vector accesses */
    int64_t oshape[EW_MAXD];
    int64_t ostride[4][EW_MAXD]; /* element strides along the outer dims: out, in[0..3) */
    ew_in in[3];
};

/* Element offsets off[0..4) (out, in0, in1, in2) of row r. */
static __device__ __forceinline__ void ew_row(const ew_geom &g, int64_t r, int64_t *off) {
#pragma unroll
    for (int k = 0; k < 4; k++) off[k] = 0;
    if (g.nd == 1) {
#pragma unroll
        for (int k = 0; k < 4; k++) off[k] = r * g.ostride[k][0];
    } else if (g.small) {
        uint32_t q = (uint32_t)r;
        for (int d = g.nd - 1; d >= 0; d--) {
            uint32_t s = (uint32_t)g.oshape[d], t = q / s, m = q - t * s;
            q = t;
#pragma unroll
            for (int k = 0; k < 4; k++) off[k] += (int64_t)m * g.ostride[k][d];
        }
    } else {
        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t s = g.oshape[d], t = r / s, m = r - t * s;
            r = t;
#pragma unroll
            for (int k = 0; k < 4; k++) off[k] += m * g.ostride[k][d];
        }
    }
}

/* N elements from column c0 of one operand's row p into x. */
template <typename T, int N>
static __device__ __forceinline__ void ew_load(const T *p, int bc, int64_t c0, int64_t cols,
                                               bool full, float *x) {
    if (bc) {
        float s = oj_cu_tof(p[0]);
#pragma unroll
        for (int j = 0; j < N; j++) x[j] = s;
    } else if (full) {
        oj_cu_ldv<T, N>(p + c0, x);
    } else {
#pragma unroll
        for (int j = 0; j < N; j++)
            if (c0 + j < cols) x[j] = oj_cu_tof(p[c0 + j]);
    }
}

/* k_ew: out[r, c] = f(in0[r, c], in1[r, c], in2[r, c]); inputs k with bit
 * k of USE clear are not read (passed as 0). in0 has type TI, the others
 * TI1 (the same unless a binary op mixes f32 with bf16/f16). */
template <typename TO, typename TI, int N, int NI, unsigned USE, class F, typename TI1 = TI>
__global__ void __launch_bounds__(256) k_ew(ew_geom g, F f) {
    const int64_t nvec = (g.cols + N - 1) / N, total = g.rows * nvec;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r, v;
        if (g.small) {
            uint32_t t32 = (uint32_t)t, n32 = (uint32_t)nvec, q = t32 / n32;
            r = q;
            v = t32 - q * n32;
        } else {
            r = t / nvec;
            v = t - r * nvec;
        }
        int64_t off[4];
        ew_row(g, r, off);
        const int64_t c0 = v * N;
        const bool full = g.vec && c0 + N <= g.cols;
        float x[3][N];
#pragma unroll
        for (int k = 0; k < 3; k++) {
#pragma unroll
            for (int j = 0; j < N; j++) x[k][j] = 0.0f;
            if (k >= NI || !((USE >> k) & 1u)) continue;
            if (k == 0)
                ew_load<TI, N>((const TI *)g.in[0].p + off[1], g.in[0].bc, c0, g.cols, full, x[0]);
            else
                ew_load<TI1, N>((const TI1 *)g.in[k].p + off[k + 1], g.in[k].bc, c0, g.cols, full,
                                x[k]);
        }
        float o[N];
#pragma unroll
        for (int j = 0; j < N; j++) o[j] = f(x[0][j], x[1][j], x[2][j]);
        TO *orow = (TO *)g.out + off[0];
        if (full) {
            oj_cu_stv<TO, N>(orow + c0, o);
        } else {
#pragma unroll
            for (int j = 0; j < N; j++)
                if (c0 + j < g.cols) orow[c0 + j] = oj_cu_fromf<TO>(o[j]);
        }
    }
}

/* The rows x cols form of a merged iteration (operand 0 the output), or
 * false when an operand is strided along the innermost dim (or the output
 * does not step through it). */
static bool ew_plan(const oj_cu_iter &it, ew_geom *g) {
    memset(g, 0, sizeof *g);
    if (it.n > 4 || it.rank - 1 > EW_MAXD) return false;
    const int R = it.rank;
    g->cols = it.shape[R - 1];
    g->nd = R - 1;
    g->rows = 1;
    for (int d = 0; d < R - 1; d++) {
        g->oshape[d] = it.shape[d];
        g->rows *= it.shape[d];
    }
    for (int k = 0; k < it.n; k++) {
        int64_t es = (int64_t)oj_dtype_size((oj_dtype)it.dt[k]);
        int64_t inner = it.stride[k][R - 1];
        int bc;
        if (inner == es && g->cols > 1)
            bc = 0;
        else if (inner == 0 && k > 0)
            bc = 1;
        else
            return false;
        for (int d = 0; d < R - 1; d++) {
            if (it.stride[k][d] % es != 0) return false;
            g->ostride[k][d] = it.stride[k][d] / es;
        }
        if (k == 0) {
            g->out = it.base[0];
        } else {
            g->in[k - 1].p = it.base[k];
            g->in[k - 1].bc = bc;
        }
    }
    return true;
}

/* Is every row start of every dense operand aligned for n-element
 * vectors? (out of element size eso, in0 esi, the others esi1) */
static bool ew_aligned(const ew_geom &g, int nin, int n, int eso, int esi, int esi1) {
    for (int k = 0; k <= nin; k++) {
        if (k > 0 && g.in[k - 1].bc) continue;
        const char *p = k == 0 ? g.out : g.in[k - 1].p;
        int es = k == 0 ? eso : k == 1 ? esi : esi1;
        if ((uintptr_t)p % (uintptr_t)(n * es) != 0) return false;
        for (int d = 0; d < g.nd; d++)
            if (g.ostride[k][d] % n != 0) return false;
    }
    return true;
}

template <typename TO, typename TI, int NI, unsigned USE, class F, typename TI1 = TI>
static void ew_launch(ew_geom g, F f) {
    constexpr int es0 = sizeof(TO) > sizeof(TI) ? (int)sizeof(TO) : (int)sizeof(TI);
    constexpr int es = es0 > (int)sizeof(TI1) ? es0 : (int)sizeof(TI1);
    constexpr int N = 16 / es;
    g.vec = ew_aligned(g, NI, N, (int)sizeof(TO), (int)sizeof(TI), (int)sizeof(TI1));
    const int64_t total = g.rows * ((g.cols + N - 1) / N);
    g.small = total <= (int64_t)0xffffffffll;
    int64_t blocks = (total + 255) / 256;
    if (blocks > ((int64_t)1 << 20)) blocks = (int64_t)1 << 20;
    if (blocks < 1) blocks = 1;
    k_ew<TO, TI, N, NI, USE, F, TI1><<<(unsigned)blocks, 256, 0, OJ_STREAM>>>(g, f);
}

/* Unary ops with a float result (the bool ones keep the generic path). */
#define UNARY_FLOAT_OPS(X)                                                                   \
    X(OJ_UN_NEG) X(OJ_UN_ABS) X(OJ_UN_EXP) X(OJ_UN_LOG) X(OJ_UN_LOG1P) X(OJ_UN_SQRT)       \
    X(OJ_UN_RSQRT) X(OJ_UN_SQUARE) X(OJ_UN_SIGN) X(OJ_UN_RELU) X(OJ_UN_LEAKY_RELU)           \
    X(OJ_UN_GELU_ERF) X(OJ_UN_GELU_TANH) X(OJ_UN_SILU) X(OJ_UN_SIGMOID) X(OJ_UN_TANH)        \
    X(OJ_UN_SOFTPLUS) X(OJ_UN_ELU) X(OJ_UN_MISH) X(OJ_UN_POW_SCALAR) X(OJ_UN_RPOW_SCALAR)    \
    X(OJ_UN_CLAMP) X(OJ_UN_AFFINE) X(OJ_UN_RECIPROCAL) X(OJ_UN_SIN) X(OJ_UN_COS)

/* GELU (tanh form), SiLU and sigmoid of bf16/f16 tensors (LOW) and their
 * gradients: the same formulas with the fast intrinsics __expf and
 * __fdividef. In float these are a few ulp off (relative ~1e-6), far under
 * the 2^-9 rounding of the 16-bit result; the same bits every run. The
 * accurate expf and IEEE division (two of each in the sigmoid) made these
 * compute-bound: GELU of [16384, 3072] bf16 took 142 us (H200, ncu,
 * 2026-11-29) for 201 MB of traffic (~50 us at 4 TB/s), its gradient 184
 * us, 36 calls per gpt2-124m step. f32 tensors keep oj_unary_f. */
__device__ __forceinline__ float sigmoid_low(float x) {
    return __fdividef(1.0f, 1.0f + __expf(-x)); /* x -> -inf: 1 / inf = 0 */
}
__device__ __forceinline__ float gelu_u2(float x) { /* 2 u, u = sqrt(2/pi) (x + 0.044715 x^3) */
    return 2.0f * OJ_GELU_TANH_KF * (x + 0.044715f * x * x * x);
}
__host__ __device__ static constexpr bool low_op(int op) {
    return op == OJ_UN_GELU_TANH || op == OJ_UN_SILU || op == OJ_UN_SIGMOID;
}
template <int OP> __device__ __forceinline__ float unary_low(float x) {
    return OP == OJ_UN_GELU_TANH ? x * sigmoid_low(gelu_u2(x))
           : OP == OJ_UN_SILU    ? x * sigmoid_low(x)
                                 : sigmoid_low(x);
}
template <int OP> __device__ __forceinline__ float unary_grad_low(float x, float y) {
    if (OP == OJ_UN_GELU_TANH) {
        float s = sigmoid_low(gelu_u2(x));
        float du = OJ_GELU_TANH_KF * (1.0f + 3.0f * 0.044715f * x * x);
        return s + 2.0f * x * s * (1.0f - s) * du;
    }
    if (OP == OJ_UN_SILU) {
        float s = sigmoid_low(x);
        return s * (1.0f + x * (1.0f - s));
    }
    return y * (1.0f - y); /* sigmoid: from its output */
}

template <int OP, bool LOW = false> struct un_fn {
    float a, b;
    __device__ __forceinline__ float operator()(float x, float, float) const {
        if (LOW && low_op(OP)) return unary_low<OP>(x);
        return oj_unary_f((oj_unary_op)OP, x, a, b);
    }
};
template <int OP, bool LOW = false> struct un_bw_fn {
    float a, b;
    __device__ __forceinline__ float operator()(float x, float y, float dy) const {
        if (LOW && low_op(OP)) return dy * unary_grad_low<OP>(x, y);
        return dy * oj_unary_grad_f((oj_unary_op)OP, x, y, a, b);
    }
};
/* Which of x (bit 0) and y (bit 1) oj_unary_grad_f reads for op. */
static constexpr unsigned grad_uses(int op) {
    return (op == OJ_UN_NEG || op == OJ_UN_SIGN || op == OJ_UN_AFFINE) ? 0u
           : (op == OJ_UN_EXP || op == OJ_UN_SQRT || op == OJ_UN_RSQRT || op == OJ_UN_SIGMOID ||
              op == OJ_UN_TANH || op == OJ_UN_RPOW_SCALAR || op == OJ_UN_RECIPROCAL)
               ? 2u
           : op == OJ_UN_ELU ? 3u
                             : 1u;
}

template <typename T> static bool unary_fast_t(const ew_geom &g, oj_unary_op op, float a, float b) {
    switch (op) {
#define X(o)                                                                                 \
    case o: ew_launch<T, T, 1, 1u>(g, un_fn<o, sizeof(T) == 2>{a, b}); return true;
        UNARY_FLOAT_OPS(X)
#undef X
    default: return false;
    }
}
template <typename T>
static bool unary_bw_fast_t(const ew_geom &g, oj_unary_op op, float a, float b) {
    switch (op) {
#define X(o)                                                                                 \
    case o: ew_launch<T, T, 3, grad_uses(o) | 4u>(g, un_bw_fn<o, sizeof(T) == 2>{a, b}); return true;
        UNARY_FLOAT_OPS(X)
#undef X
    default: return false;
    }
}

template <int OP> struct bin_fn {
    __device__ __forceinline__ float operator()(float a, float b, float) const {
        switch (OP) {
        case OJ_BIN_ADD: return __fadd_rn(a, b);
        case OJ_BIN_SUB: return __fsub_rn(a, b);
        case OJ_BIN_MUL: return __fmul_rn(a, b);
        case OJ_BIN_DIV: return __fdiv_rn(a, b);
        case OJ_BIN_POW: return powf(a, b);
        case OJ_BIN_MAXIMUM: return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a > b ? a : b);
        default: return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a < b ? a : b);
        }
    }
};
template <typename T> static bool binary_fast_t(const ew_geom &g, oj_binary_op op) {
    switch (op) {
#define X(o)                                                                                 \
    case o: ew_launch<T, T, 2, 3u>(g, bin_fn<o>()); return true;
        X(OJ_BIN_ADD) X(OJ_BIN_SUB) X(OJ_BIN_MUL) X(OJ_BIN_DIV) X(OJ_BIN_POW) X(OJ_BIN_MAXIMUM)
        X(OJ_BIN_MINIMUM)
#undef X
    default: return false;
    }
}

/* add, sub, mul of an f32 output with one f32 and one bf16 input (the
 * residual stream of an autocast model: f32 + bf16 -> f32). */
template <typename TA, typename TB> static bool binary_mixed_t(const ew_geom &g, oj_binary_op op) {
    switch (op) {
    case OJ_BIN_ADD: ew_launch<float, TA, 2, 3u, bin_fn<OJ_BIN_ADD>, TB>(g, bin_fn<OJ_BIN_ADD>()); return true;
    case OJ_BIN_SUB: ew_launch<float, TA, 2, 3u, bin_fn<OJ_BIN_SUB>, TB>(g, bin_fn<OJ_BIN_SUB>()); return true;
    case OJ_BIN_MUL: ew_launch<float, TA, 2, 3u, bin_fn<OJ_BIN_MUL>, TB>(g, bin_fn<OJ_BIN_MUL>()); return true;
    default: return false;
    }
}

struct cast_fn {
    __device__ __forceinline__ float operator()(float x, float, float) const { return x; }
};

/* Does the iteration's every operand share one f32/bf16/f16 dtype? */
static bool one_float_dtype(const oj_cu_iter &it) {
    for (int k = 0; k < it.n; k++)
        if (it.dt[k] != it.dt[0]) return false;
    return oj_cu_is_f16ish((oj_dtype)it.dt[0]);
}

/* ---------------------------------------------------------------- strided copy fast paths
 * Same dtype, after merging:
 * - one dense run in both: cudaMemcpyAsync (the driver's copy, ~bandwidth);
 * - inner dim dense in both (contiguous() of a [B,H,T,D] view permuted to
 *   [B,T,H,D] and back): k_copy_rows moves each row in units of U bytes
 *   (16 when every row start is 16-byte aligned), the row's offsets
 *   decomposed once per row (32-bit division when the row count fits);
 * - the inner dims transposed (one side dense along the last dim, the
 *   other along the one before, e.g. [B,T,C] -> [B,C,T]): k_copy_tile
 *   stages 32 x 32 tiles in shared memory, so reads and writes are both
 *   coalesced.
 * Bytes: 2 x numel x element size; rows of >= 64 B copy near bandwidth
 * (estimate ~3.5 TB/s; a 100 MB permute ~60 us instead of ~250 us through
 * the per-element iterator), tiles ~3 TB/s. */

struct rows_geom {
    char *out;
    const char *in;
    int nd; /* outer dims */
    int64_t rows, units;
    int64_t shape[OJ_MAX_RANK], so[OJ_MAX_RANK], si[OJ_MAX_RANK]; /* strides in bytes */
};

/* Byte offsets of outer index q (mixed radix over shape[0..nd)). */
__device__ static __forceinline__ void outer_offsets(int nd, const int64_t *shape,
                                                     const int64_t *so, const int64_t *si,
                                                     int64_t q, bool small, int64_t *oo,
                                                     int64_t *oi) {
    int64_t a = 0, b = 0;
    if (small) {
        uint32_t q32 = (uint32_t)q;
        for (int d = nd - 1; d >= 0; d--) {
            uint32_t s = (uint32_t)shape[d], t = q32 / s, m = q32 - t * s;
            q32 = t;
            a += (int64_t)m * so[d];
            b += (int64_t)m * si[d];
        }
    } else {
        for (int d = nd - 1; d >= 0; d--) {
            int64_t s = shape[d], t = q / s, m = q - t * s;
            q = t;
            a += m * so[d];
            b += m * si[d];
        }
    }
    *oo = a;
    *oi = b;
}

template <typename U> __global__ void k_copy_rows(rows_geom g) {
    const bool small = g.rows <= 0xffffffffll;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < g.rows;
         r += (int64_t)gridDim.x * blockDim.y) {
        int64_t oo, oi;
        outer_offsets(g.nd, g.shape, g.so, g.si, r, small, &oo, &oi);
        U *o = (U *)(g.out + oo);
        const U *i = (const U *)(g.in + oi);
        for (int64_t u = threadIdx.x; u < g.units; u += blockDim.x) o[u] = i[u];
    }
}

struct tile_geom {
    char *out;
    const char *in;
    int nd; /* batch dims */
    int64_t batch, n0, n1, t0, t1; /* tiled dims i (size n0), j (n1); tiles along each */
    int64_t shape[OJ_MAX_RANK], so[OJ_MAX_RANK], si[OJ_MAX_RANK];
    int64_t so0, so1, si0, si1; /* byte strides along i and j */
    int in_fast_j, out_fast_j;  /* dense along j (else along i) */
};

#define TILE 32
/* Elements of type TI in, TO out, staged as S: all three the same raw
 * type for a copy, or f32/bf16/f16 through float for a cast. */
template <typename S, typename T> __device__ __forceinline__ S tile_cvt(T v) {
    if constexpr (std::is_same<S, T>::value)
        return v;
    else if constexpr (std::is_same<S, float>::value)
        return oj_cu_tof(v);
    else
        return oj_cu_fromf<S>(v);
}
template <typename TO, typename TI, typename S>
__global__ void __launch_bounds__(256) k_copy_tile(tile_geom g) {
    __shared__ S tile[TILE][TILE + 1];
    const int64_t per = g.t0 * g.t1;
    const bool small = g.batch <= 0xffffffffll;
    /* the tile's coordinates by 32-bit division when the tile count fits
     * (a 64-bit division is a long emulated sequence per thread) */
    const bool small_t = g.batch * per <= 0xffffffffll;
    for (int64_t t = blockIdx.x; t < g.batch * per; t += gridDim.x) {
        int64_t b, ti, tj;
        if (small_t) {
            const uint32_t t32 = (uint32_t)t, p32 = (uint32_t)per, c32 = (uint32_t)g.t1;
            const uint32_t b32 = t32 / p32, rem = t32 - b32 * p32, i32 = rem / c32;
            b = b32, ti = i32, tj = rem - i32 * c32;
        } else {
            b = t / per;
            int64_t rem = t - b * per;
            ti = rem / g.t1, tj = rem - ti * g.t1;
        }
        int64_t oo, oi;
        outer_offsets(g.nd, g.shape, g.so, g.si, b, small, &oo, &oi);
        int64_t i0 = ti * TILE, j0 = tj * TILE;
        for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
            int a = g.in_fast_j ? k : (int)threadIdx.x, c = g.in_fast_j ? (int)threadIdx.x : k;
            int64_t i = i0 + a, j = j0 + c;
            if (i < g.n0 && j < g.n1)
                tile[a][c] = tile_cvt<S>(*(const TI *)(g.in + oi + i * g.si0 + j * g.si1));
        }
        __syncthreads();
        for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
            int a = g.out_fast_j ? k : (int)threadIdx.x, c = g.out_fast_j ? (int)threadIdx.x : k;
            int64_t i = i0 + a, j = j0 + c;
            if (i < g.n0 && j < g.n1) *(TO *)(g.out + oo + i * g.so0 + j * g.so1) = tile_cvt<TO>(tile[a][c]);
        }
        __syncthreads();
    }
}

static unsigned grid_cap(int64_t n) { return (unsigned)(n < (1 << 20) ? (n < 1 ? 1 : n) : (1 << 20)); }

static bool copy_tile_fast(oj_engine *eng, const oj_cu_iter &it, oj_status *st);

/* The fast paths of a same-dtype copy; false: not handled (nothing run). */
static bool copy_same_fast(oj_engine *eng, const oj_cu_iter &it, int64_t es, oj_status *st) {
    int R = it.rank;
    const int64_t *so = it.stride[0], *si = it.stride[1];
    if (R == 1 && so[0] == es && si[0] == es) {
        if (it.base[0] != it.base[1]) {
            cudaError_t e = cudaMemcpyAsync(it.base[0], it.base[1], (size_t)(it.numel * es),
                                            cudaMemcpyDeviceToDevice, OJ_STREAM);
            if (e != cudaSuccess) {
                *st = oj_cuda_fail(eng, e, "copy (dense)");
                return true;
            }
        }
        *st = oj_cuda_check(eng, "copy (dense)");
        return true;
    }
    if (R < 2) return false;
    if (so[R - 1] == es && si[R - 1] == es) {
        rows_geom g;
        memset(&g, 0, sizeof g);
        g.out = it.base[0];
        g.in = it.base[1];
        g.nd = R - 1;
        g.rows = 1;
        for (int d = 0; d < R - 1; d++) {
            g.shape[d] = it.shape[d];
            g.so[d] = so[d];
            g.si[d] = si[d];
            g.rows *= it.shape[d];
        }
        int64_t rb = it.shape[R - 1] * es;
        int64_t u = 16;
        while (u > 1) {
            bool ok = rb % u == 0 && (uintptr_t)g.out % (uintptr_t)u == 0 &&
                      (uintptr_t)g.in % (uintptr_t)u == 0;
            for (int d = 0; d < R - 1 && ok; d++) ok = g.so[d] % u == 0 && g.si[d] % u == 0;
            if (ok) break;
            u /= 2;
        }
        g.units = rb / u;
        int tx = 1;
        while (tx < 256 && tx < g.units) tx *= 2;
        int ty = 256 / tx;
        dim3 block((unsigned)tx, (unsigned)ty);
        unsigned grid = grid_cap((g.rows + ty - 1) / ty);
        switch (u) {
        case 16: k_copy_rows<uint4><<<grid, block, 0, OJ_STREAM>>>(g); break;
        case 8: k_copy_rows<uint2><<<grid, block, 0, OJ_STREAM>>>(g); break;
        case 4: k_copy_rows<unsigned><<<grid, block, 0, OJ_STREAM>>>(g); break;
        case 2: k_copy_rows<unsigned short><<<grid, block, 0, OJ_STREAM>>>(g); break;
        default: k_copy_rows<unsigned char><<<grid, block, 0, OJ_STREAM>>>(g); break;
        }
        *st = oj_cuda_check(eng, "copy (rows)");
        return true;
    }
    return copy_tile_fast(eng, it, st);
}

/* The transposing tile path of a copy or (f32/bf16/f16) cast: one side
 * dense along the last dim, the other along the one before. */
static bool copy_tile_fast(oj_engine *eng, const oj_cu_iter &it, oj_status *st) {
    const int R = it.rank;
    if (R < 2) return false;
    const int64_t *so = it.stride[0], *si = it.stride[1];
    const int64_t eo = dt_size((oj_dtype)it.dt[0]), ei = dt_size((oj_dtype)it.dt[1]);
    bool a = si[R - 2] == ei && so[R - 1] == eo; /* in dense along i, out along j */
    bool b = si[R - 1] == ei && so[R - 2] == eo; /* in dense along j, out along i */
    if (!a && !b) return false;
    tile_geom g;
    memset(&g, 0, sizeof g);
    g.out = it.base[0];
    g.in = it.base[1];
    g.nd = R - 2;
    g.batch = 1;
    for (int d = 0; d < R - 2; d++) {
        g.shape[d] = it.shape[d];
        g.so[d] = so[d];
        g.si[d] = si[d];
        g.batch *= it.shape[d];
    }
    g.n0 = it.shape[R - 2];
    g.n1 = it.shape[R - 1];
    g.t0 = (g.n0 + TILE - 1) / TILE;
    g.t1 = (g.n1 + TILE - 1) / TILE;
    g.so0 = so[R - 2];
    g.so1 = so[R - 1];
    g.si0 = si[R - 2];
    g.si1 = si[R - 1];
    g.in_fast_j = a ? 0 : 1;
    g.out_fast_j = a ? 1 : 0;
    dim3 block(TILE, 8);
    unsigned grid = grid_cap(g.batch * g.t0 * g.t1);
    if (it.dt[0] != it.dt[1]) { /* a cast: f32/bf16/f16 both (the caller checked) */
        OJ_CU_FLOAT_TYPE(it.dt[0], TO, OJ_CU_FLOAT_TYPE(it.dt[1], TI,
            (k_copy_tile<TO, TI, float><<<grid, block, 0, OJ_STREAM>>>(g))));
        *st = oj_cuda_check(eng, "copy (cast, transpose tiles)");
        return true;
    }
    switch (eo) {
    case 8: k_copy_tile<uint64_t, uint64_t, uint64_t><<<grid, block, 0, OJ_STREAM>>>(g); break;
    case 4: k_copy_tile<uint32_t, uint32_t, uint32_t><<<grid, block, 0, OJ_STREAM>>>(g); break;
    case 2: k_copy_tile<uint16_t, uint16_t, uint16_t><<<grid, block, 0, OJ_STREAM>>>(g); break;
    default: k_copy_tile<uint8_t, uint8_t, uint8_t><<<grid, block, 0, OJ_STREAM>>>(g); break;
    }
    *st = oj_cuda_check(eng, "copy (transpose tiles)");
    return true;
}

/* ---------------------------------------------------------------- copy */

__global__ void k_copy(oj_cu_iter it, int es) {
    int odt = it.dt[0], idt = it.dt[1];
    GRID_LOOP(i, it.numel) {
        int64_t off[OJ_CU_ITER_MAX];
        oj_cu_iter_offsets(it, i, off);
        char *d = it.base[0] + off[0];
        const char *s = it.base[1] + off[1];
        if (odt == idt)
            copy_bytes(d, s, es);
        else if (is_int_dt(odt) && (is_int_dt(idt) || idt == OJ_BOOL))
            oj_cu_st_i64(d, odt, ld_i64(s, idt));
        else
            oj_cu_st(d, odt, oj_cu_ld(s, idt));
    }
}

oj_status oj_cuda_copy(oj_engine *eng, oj_tensor *out, const oj_tensor *x) {
    if (oj_cuda_begin(eng, "copy") != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[2] = {out, x};
    oj_cu_iter it;
    oj_cu_iter_init(&it, out->rank, out->shape, 2, ts);
    if (it.numel == 0) return OJ_OK;
    if (out->dtype == x->dtype) {
        oj_status st;
        if (copy_same_fast(eng, it, dt_size(out->dtype), &st)) return st;
    } else if (oj_cu_is_f16ish(out->dtype) && oj_cu_is_f16ish(x->dtype)) {
        ew_geom g;
        if (ew_plan(it, &g)) {
            OJ_CU_FLOAT_TYPE(it.dt[0], TO,
                             OJ_CU_FLOAT_TYPE(it.dt[1], TI, ew_launch<TO, TI, 1, 1u>(g, cast_fn())));
            return oj_cuda_check(eng, "copy (cast)");
        }
        /* a transposed view cast (gpt2's Conv1D weights under autocast: the
         * per-element kernel took 32 us per weight, 48 a step) */
        oj_status st;
        if (copy_tile_fast(eng, it, &st)) return st;
    }
    k_copy<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(it, dt_size(out->dtype));
    return oj_cuda_check(eng, "copy");
}

/* ---------------------------------------------------------------- cast_multi
 * Up to CM_MAX contiguous (in, out) pairs converted in one launch: one
 * block per CM_CHUNK elements of a pair (the pair found by a scan of the
 * chunk table), each element by the bit routines the copy entry's cast
 * gives (oj_cu_ldv / oj_cu_stv: the hardware conversion, the routines'
 * NaNs), so the same bits. A fused projection's four weight casts (and,
 * backward, its four gradient casts) are one launch instead of four. */
#define CM_MAX 8
#define CM_CHUNK 8192
struct cm_table {
    const void *in[CM_MAX];
    void *out[CM_MAX];
    int64_t numel[CM_MAX];
    int64_t chunk0[CM_MAX + 1];
    unsigned char idt[CM_MAX], odt[CM_MAX];
    int n;
};

__device__ static __forceinline__ float cm_ld(const void *p, int dt, int64_t i) {
    switch (dt) {
    case OJ_F32: return ((const float *)p)[i];
    case OJ_BF16: return oj_cu_tof(((const oj_cu_bf16 *)p)[i]);
    default: return oj_cu_tof(((const oj_cu_f16 *)p)[i]);
    }
}
__device__ static __forceinline__ void cm_st(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case OJ_F32: ((float *)p)[i] = v; break;
    case OJ_BF16: ((oj_cu_bf16 *)p)[i] = oj_cu_fromf<oj_cu_bf16>(v); break;
    default: ((oj_cu_f16 *)p)[i] = oj_cu_fromf<oj_cu_f16>(v); break;
    }
}

__global__ void __launch_bounds__(OJ_CUDA_THREADS) k_cast_multi(const cm_table t) {
    const int64_t c = blockIdx.x;
    int k = 0;
    while (k + 1 < t.n && t.chunk0[k + 1] <= c) k++;
    const int64_t first = (c - t.chunk0[k]) * CM_CHUNK;
    const int64_t last = first + CM_CHUNK < t.numel[k] ? first + CM_CHUNK : t.numel[k];
    const int idt = t.idt[k], odt = t.odt[k];
    for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x)
        cm_st(t.out[k], odt, i, cm_ld(t.in[k], idt, i));
}

oj_status oj_cuda_cast_multi(oj_engine *eng, int n, oj_tensor *const *outs,
                             const oj_tensor *const *ins) {
    const char *op = "cast_multi";
    if (n < 0 || n > CM_MAX)
        return oj_set_error(eng, OJ_ERR_INTERNAL, "%s: %d pairs (at most %d)", op, n, CM_MAX);
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    cm_table t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < n; i++) {
        const oj_tensor *a = ins[i], *o = outs[i];
        if (!oj_cu_is_f16ish(a->dtype) || !oj_cu_is_f16ish(o->dtype) ||
            oj_cuda_numel(a) != oj_cuda_numel(o) || !oj_cuda_contig(a) || !oj_cuda_contig(o))
            return oj_set_error(eng, OJ_ERR_INTERNAL,
                                "%s: pair %d: contiguous f32/bf16/f16 tensors of one element "
                                "count expected",
                                op, i);
        const int64_t ne = oj_cuda_numel(a);
        if (ne == 0) continue;
        const int k = t.n++;
        t.in[k] = oj_cuda_ptr(a);
        t.out[k] = oj_cuda_ptr(o);
        t.numel[k] = ne;
        t.idt[k] = (unsigned char)a->dtype;
        t.odt[k] = (unsigned char)o->dtype;
        t.chunk0[k + 1] = t.chunk0[k] + (ne + CM_CHUNK - 1) / CM_CHUNK;
    }
    if (t.n == 0) return OJ_OK;
    if (t.chunk0[t.n] > 0x7fffffff)
        return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: %lld chunks", op,
                            (long long)t.chunk0[t.n]);
    k_cast_multi<<<(unsigned)t.chunk0[t.n], OJ_CUDA_THREADS, 0, OJ_STREAM>>>(t);
    return oj_cuda_check(eng, op);
}

/* ---------------------------------------------------------------- fill */

struct fill_bytes {
    unsigned char b[8];
};

__global__ void k_fill(oj_cu_iter it, fill_bytes v, int es) {
    GRID_LOOP(i, it.numel) {
        int64_t off[OJ_CU_ITER_MAX];
        oj_cu_iter_offsets(it, i, off);
        copy_bytes(it.base[0] + off[0], (const char *)v.b, es);
    }
}

oj_status oj_cuda_fill(oj_engine *eng, oj_tensor *out, double value) {
    if (oj_cuda_begin(eng, "fill") != OJ_OK) return oj_last_status(eng);
    fill_bytes v;
    memset(&v, 0, sizeof v);
    oj_dtype dt = out->dtype;
    oj__store(v.b, dt, value); /* the host's conversion (NaN, saturation) */
    size_t es = dt_size(dt);
    bool zero = true;
    for (size_t i = 0; i < es; i++) zero = zero && v.b[i] == 0;
    if (zero && oj_is_contiguous(out)) { /* zeros: the driver's memset, stream ordered */
        size_t nb = (size_t)oj_cuda_numel(out) * es;
        cudaError_t e = nb ? cudaMemsetAsync((char *)out->storage->data + out->offset, 0, nb, OJ_STREAM)
                           : cudaSuccess;
        if (e != cudaSuccess) return oj_cuda_fail(eng, e, "fill (memset)");
        return oj_cuda_check(eng, "fill");
    }
    const oj_tensor *ts[1] = {out};
    oj_cu_iter it;
    oj_cu_iter_init(&it, out->rank, out->shape, 1, ts);
    if (it.numel == 0) return OJ_OK;
    k_fill<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(it, v, dt_size(dt));
    return oj_cuda_check(eng, "fill");
}

/* ---------------------------------------------------------------- unary */

__global__ void k_unary(oj_cu_iter it, oj_unary_op op, double a, double b) {
    GRID_LOOP(i, it.numel) {
        int64_t off[OJ_CU_ITER_MAX];
        oj_cu_iter_offsets(it, i, off);
        double x = oj_cu_ld(it.base[1] + off[1], it.dt[1]);
        oj_cu_st(it.base[0] + off[0], it.dt[0], oj_unary_d(op, x, a, b));
    }
}

oj_status oj_cuda_unary(oj_engine *eng, oj_unary_op op, oj_tensor *out, const oj_tensor *x,
                        double alpha, double beta) {
    if (oj_cuda_begin(eng, "unary") != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[2] = {out, x};
    oj_cu_iter it;
    oj_cu_iter_init(&it, out->rank, out->shape, 2, ts);
    if (it.numel == 0) return OJ_OK;
    ew_geom g;
    if (one_float_dtype(it) && ew_plan(it, &g)) {
        bool done = false;
        OJ_CU_FLOAT_TYPE(it.dt[0], T, done = unary_fast_t<T>(g, op, (float)alpha, (float)beta));
        if (done) return oj_cuda_check(eng, unary_name(op));
    }
    k_unary<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(it, op, alpha, beta);
    return oj_cuda_check(eng, unary_name(op));
}

__global__ void k_unary_backward(oj_cu_iter it, oj_unary_op op, double a, double b) {
    GRID_LOOP(i, it.numel) {
        int64_t off[OJ_CU_ITER_MAX];
        oj_cu_iter_offsets(it, i, off);
        double x = oj_cu_ld(it.base[1] + off[1], it.dt[1]);
        double y = oj_cu_ld(it.base[2] + off[2], it.dt[2]);
        double dy = oj_cu_ld(it.base[3] + off[3], it.dt[3]);
        oj_cu_st(it.base[0] + off[0], it.dt[0], dy * oj_unary_grad_d(op, x, y, a, b));
    }
}

oj_status oj_cuda_unary_backward(oj_engine *eng, oj_unary_op op, oj_tensor *dx,
                                 const oj_tensor *x, const oj_tensor *y, const oj_tensor *dy,
                                 double alpha, double beta) {
    if (oj_cuda_begin(eng, "unary_backward") != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[4] = {dx, x, y, dy};
    oj_cu_iter it;
    oj_cu_iter_init(&it, dx->rank, dx->shape, 4, ts);
    if (it.numel == 0) return OJ_OK;
    ew_geom g;
    if (one_float_dtype(it) && ew_plan(it, &g)) {
        bool done = false;
        OJ_CU_FLOAT_TYPE(it.dt[0], T, done = unary_bw_fast_t<T>(g, op, (float)alpha, (float)beta));
        if (done) return oj_cuda_check(eng, unary_bw_name(op));
    }
    k_unary_backward<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(it, op, alpha, beta);
    return oj_cuda_check(eng, unary_bw_name(op));
}

/* ---------------------------------------------------------------- binary */

static __device__ __forceinline__ long long binary_i64(oj_binary_op op, long long a, long long b) {
    typedef unsigned long long u64;
    switch (op) {
    case OJ_BIN_ADD: return (long long)((u64)a + (u64)b);
    case OJ_BIN_SUB: return (long long)((u64)a - (u64)b);
    case OJ_BIN_MUL: return (long long)((u64)a * (u64)b);
    case OJ_BIN_MAXIMUM: return a > b ? a : b;
    case OJ_BIN_MINIMUM: return a < b ? a : b;
    case OJ_BIN_EQ: return a == b;
    case OJ_BIN_NE: return a != b;
    case OJ_BIN_LT: return a < b;
    case OJ_BIN_LE: return a <= b;
    case OJ_BIN_GT: return a > b;
    case OJ_BIN_GE: return a >= b;
    case OJ_BIN_AND: return a && b;
    case OJ_BIN_OR: return a || b;
    case OJ_BIN_XOR: return (a != 0) != (b != 0);
    default: return 0;
    }
}

/* mode 0: double, 1: exact int64, 2: f32 add/sub/mul/div in float */
__global__ void k_binary(oj_cu_iter it, oj_binary_op op, int mode) {
    GRID_LOOP(i, it.numel) {
        int64_t off[OJ_CU_ITER_MAX];
        oj_cu_iter_offsets(it, i, off);
        char *o = it.base[0] + off[0];
        const char *pa = it.base[1] + off[1], *pb = it.base[2] + off[2];
        if (mode == 1) {
            oj_cu_st_i64(o, it.dt[0], binary_i64(op, ld_i64(pa, it.dt[1]), ld_i64(pb, it.dt[2])));
        } else if (mode == 2) {
            float a = *(const float *)pa, b = *(const float *)pb, r;
            switch (op) {
            case OJ_BIN_ADD: r = __fadd_rn(a, b); break;
            case OJ_BIN_SUB: r = __fsub_rn(a, b); break;
            case OJ_BIN_MUL: r = __fmul_rn(a, b); break;
            default: r = __fdiv_rn(a, b); break;
            }
            *(float *)o = r;
        } else {
            double a = oj_cu_ld(pa, it.dt[1]), b = oj_cu_ld(pb, it.dt[2]);
            oj_cu_st(o, it.dt[0], oj_binary_d(op, a, b));
        }
    }
}

oj_status oj_cuda_binary(oj_engine *eng, oj_binary_op op, oj_tensor *out, const oj_tensor *a,
                         const oj_tensor *b) {
    if (oj_cuda_begin(eng, "binary") != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[3] = {out, a, b};
    oj_cu_iter it;
    oj_cu_iter_init(&it, out->rank, out->shape, 3, ts);
    if (it.numel == 0) return OJ_OK;
    auto intlike = [](oj_dtype d) {
        return d == OJ_I64 || d == OJ_I32 || d == OJ_U32 || d == OJ_U16 || d == OJ_U8 ||
               d == OJ_BOOL;
    };
    ew_geom g;
    if (one_float_dtype(it) && ew_plan(it, &g)) {
        bool done = false;
        OJ_CU_FLOAT_TYPE(it.dt[0], T, done = binary_fast_t<T>(g, op));
        if (done) return oj_cuda_check(eng, binary_name(op));
    } else if (it.dt[0] == OJ_F32 && ((it.dt[1] == OJ_F32 && it.dt[2] == OJ_BF16) ||
                                      (it.dt[1] == OJ_BF16 && it.dt[2] == OJ_F32)) &&
               ew_plan(it, &g)) {
        bool done = it.dt[1] == OJ_F32 ? binary_mixed_t<float, oj_cu_bf16>(g, op)
                                       : binary_mixed_t<oj_cu_bf16, float>(g, op);
        if (done) return oj_cuda_check(eng, binary_name(op));
    }
    int mode = 0;
    if (intlike(a->dtype) && intlike(b->dtype) && !oj_dtype_is_float(out->dtype))
        mode = 1;
    else if (out->dtype == OJ_F32 && a->dtype == OJ_F32 && b->dtype == OJ_F32 &&
             (op == OJ_BIN_ADD || op == OJ_BIN_SUB || op == OJ_BIN_MUL || op == OJ_BIN_DIV))
        mode = 2;
    k_binary<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(it, op, mode);
    return oj_cuda_check(eng, binary_name(op));
}

/* ---------------------------------------------------------------- where */

__global__ void k_where(oj_cu_iter it, int es) {
    GRID_LOOP(i, it.numel) {
        int64_t off[OJ_CU_ITER_MAX];
        oj_cu_iter_offsets(it, i, off);
        bool take_a = oj_cu_ld(it.base[1] + off[1], it.dt[1]) != 0.0;
        const char *src = take_a ? it.base[2] + off[2] : it.base[3] + off[3];
        int sdt = take_a ? it.dt[2] : it.dt[3];
        if (sdt == it.dt[0])
            copy_bytes(it.base[0] + off[0], src, es);
        else
            oj_cu_st(it.base[0] + off[0], it.dt[0], oj_cu_ld(src, sdt));
    }
}

oj_status oj_cuda_where(oj_engine *eng, oj_tensor *out, const oj_tensor *cond, const oj_tensor *a,
                        const oj_tensor *b) {
    if (oj_cuda_begin(eng, "where") != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[4] = {out, cond, a, b};
    oj_cu_iter it;
    oj_cu_iter_init(&it, out->rank, out->shape, 4, ts);
    if (it.numel == 0) return OJ_OK;
    k_where<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(it, dt_size(out->dtype));
    return oj_cuda_check(eng, "where");
}

/* ---------------------------------------------------------------- rand
 * As oj_cpu_rand: element i takes word i % 4 of Philox block offset + i / 4
 * (uniform), or a Box-Muller pair from words (2j, 2j+1) (normal). The
 * uniform arithmetic uses explicitly rounded operations (no FMA
 * contraction), so uniform output is bit-identical to the CPU's. */

__global__ void k_rand(char *base, int dt, int es, int64_t n, bool normal, double lo, double hi,
                       uint32_t k0, uint32_t k1, unsigned long long offset) {
    const double two32 = 4294967296.0;
    GRID_LOOP(blk, (n + 3) / 4) {
        uint32_t r[4];
        oj_cu_philox(offset + (unsigned long long)blk, k0, k1, r);
        double v[4];
        if (normal) {
            for (int j = 0; j < 4; j += 2) {
                double u1 = __ddiv_rn(__dadd_rn((double)r[j], 1.0), two32);
                double u2 = __ddiv_rn((double)r[j + 1], two32);
                double rad = sqrt(__dmul_rn(-2.0, log(u1)));
                double th = __dmul_rn(__dmul_rn(2.0, 3.14159265358979323846), u2);
                v[j] = __dadd_rn(lo, __dmul_rn(__dmul_rn(hi, rad), cos(th)));
                v[j + 1] = __dadd_rn(lo, __dmul_rn(__dmul_rn(hi, rad), sin(th)));
            }
        } else {
            double span = __dsub_rn(hi, lo);
            for (int j = 0; j < 4; j++) {
                double u = __ddiv_rn((double)r[j], two32);
                v[j] = __dadd_rn(lo, __dmul_rn(span, u));
                if (v[j] >= hi && hi > lo) v[j] = nextafter(hi, lo);
            }
        }
        for (int j = 0; j < 4 && blk * 4 + j < n; j++) {
            char *p = base + (blk * 4 + j) * es;
            oj_cu_st(p, dt, v[j]);
            if (!normal && dt != OJ_F64 && oj_cu_ld(p, dt) >= hi && hi > lo) oj_cu_st(p, dt, lo);
        }
    }
}

oj_status oj_cuda_rand(oj_engine *eng, oj_tensor *out, bool normal, double lo, double hi,
                       uint64_t seed, uint64_t offset) {
    if (oj_cuda_begin(eng, "rand") != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, "rand", "out") != OJ_OK) return oj_last_status(eng);
    int64_t n = oj_cuda_numel(out);
    if (n == 0) return OJ_OK;
    k_rand<<<oj_cuda_blocks((n + 3) / 4), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
        oj_cuda_ptr(out), (int)out->dtype, dt_size(out->dtype), n, normal, lo, hi,
        (uint32_t)seed, (uint32_t)(seed >> 32), (unsigned long long)offset);
    return oj_cuda_check(eng, "rand");
}

/* ---------------------------------------------------------------- swiglu
 * silu(gate) * up (forward) and its gradients (backward) in one pass each:
 * gate, up, dp read once, the product (or dgate and dup) written once. The
 * per-element arithmetic is the fast paths' of the unfused calls (un_fn,
 * bin_fn<MUL>, un_bw_fn of this file), every intermediate rounded to the
 * storage type as those calls store it, so the bits are theirs. Taken for
 * f32/bf16/f16 operands of one dtype seen as [N, F] rows (unit stride
 * along F > 1, rows evenly spaced: the column slices of a fused GEMM
 * output), exactly where the unfused calls take their fast paths; anything
 * else runs those calls (in place in the outputs). Vector accesses of 16
 * bytes when every row start is aligned. Traffic, [16384, 3072] bf16:
 * forward 302 MB (~80 us at 3.8 TB/s for the two passes before, 201 MB +
 * 100 MB of s written and read back), backward 302 MB + 201 MB written
 * (the unfused backward: silu, two products and the silu rule, ~700 MB). */

/* [N, F] row stride of t (shape F last, unit stride, other dims merged),
 * or false. */
static bool sw_rows(const oj_tensor *t, int64_t *rs) {
    const int R = t->rank;
    if (R < 1 || t->stride[R - 1] != 1) return false;
    int64_t r = -1, expect = 0;
    for (int d = R - 2; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (r < 0) {
            r = t->stride[d];
            expect = r * t->shape[d];
        } else if (t->stride[d] != expect) {
            return false;
        } else {
            expect *= t->shape[d];
        }
    }
    *rs = r < 0 ? t->shape[R - 1] : r;
    return true;
}

// gate (N,F) row stride gs, up (N,F) us, dp (N,F) ps (backward) ->
// forward: o0 = silu(gate) * up; backward: o0 = dgate, o1 = dup (either
// NULL); outputs (N,F) of row strides o0s, o1s
template <typename T, int V, bool BWD>
__global__ void k_swiglu(int64_t N, int64_t F, const T *gate, int64_t gs, const T *up, int64_t us,
                         const T *dp, int64_t ps, T *o0, int64_t o0s, T *o1, int64_t o1s, T *o2) {
    constexpr bool LOW = sizeof(T) == 2;
    const int64_t nv = F / V, total = N * nv;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < total;
         q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = q / nv, c = (q - r * nv) * V;
        float x[V], u[V], s[V], g[V], a[V], b[V];
        (void)g;
        (void)b;
        oj_cu_ldv<T, V>(gate + r * gs + c, x);
        oj_cu_ldv<T, V>(up + r * us + c, u);
        if (BWD) oj_cu_ldv<T, V>(dp + r * ps + c, g);
#pragma unroll
        for (int k = 0; k < V; k++) /* s as unary(SILU) stores it */
            s[k] = oj_cu_tof(oj_cu_fromf<T>(un_fn<OJ_UN_SILU, LOW>{0.0f, 0.0f}(x[k], 0.0f, 0.0f)));
        if constexpr (!BWD) {
#pragma unroll
            for (int k = 0; k < V; k++) a[k] = bin_fn<OJ_BIN_MUL>()(s[k], u[k], 0.0f);
            oj_cu_stv<T, V>(o0 + r * o0s + c, a);
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) {
                /* ds = dp * up as binary(MUL) stores it, then silu's rule */
                const float ds = oj_cu_tof(oj_cu_fromf<T>(bin_fn<OJ_BIN_MUL>()(g[k], u[k], 0.0f)));
                a[k] = un_bw_fn<OJ_UN_SILU, LOW>{0.0f, 0.0f}(x[k], s[k], ds);
                b[k] = bin_fn<OJ_BIN_MUL>()(g[k], s[k], 0.0f);
            }
            if (o0) oj_cu_stv<T, V>(o0 + r * o0s + c, a);
            if (o1) oj_cu_stv<T, V>(o1 + r * o1s + c, b);
            if (o2) { /* the product over dp (same elements, read above) */
#pragma unroll
                for (int k = 0; k < V; k++) a[k] = bin_fn<OJ_BIN_MUL>()(s[k], u[k], 0.0f);
                oj_cu_stv<T, V>(o2 + r * ps + c, a);
            }
        }
    }
}

template <typename T, bool BWD>
static void swiglu_launch(int64_t N, int64_t F, const char *gate, int64_t gs, const char *up,
                          int64_t us, const char *dp, int64_t ps, char *o0, int64_t o0s, char *o1,
                          int64_t o1s, char *o2 = NULL) {
    constexpr int V = 16 / (int)sizeof(T);
    bool vec = F % V == 0 && gs % V == 0 && us % V == 0 && (!BWD || ps % V == 0) &&
               o0s % V == 0 && o1s % V == 0;
    const char *ptrs[5] = {gate, up, dp, o0, o1};
    for (int i = 0; i < 5; i++) vec = vec && (ptrs[i] == NULL || oj_cu_aligned16(ptrs[i]));
    const int64_t items = vec ? N * (F / V) : N * F;
    const unsigned blocks = oj_cuda_blocks(items);
    if (vec)
        k_swiglu<T, V, BWD><<<blocks, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            N, F, (const T *)gate, gs, (const T *)up, us, (const T *)dp, ps, (T *)o0, o0s,
            (T *)o1, o1s, (T *)o2);
    else
        k_swiglu<T, 1, BWD><<<blocks, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            N, F, (const T *)gate, gs, (const T *)up, us, (const T *)dp, ps, (T *)o0, o0s,
            (T *)o1, o1s, (T *)o2);
}

/* The fused path's operands: one f16ish dtype, [N, F] rows (last dim of
 * stride 1, the other dims one run of rows) with F > 1. */
static bool sw_fast(const oj_tensor *const *ts, int n, int64_t *rs, int64_t *N, int64_t *F) {
    const oj_tensor *t0 = ts[0];
    *F = t0->rank ? t0->shape[t0->rank - 1] : 1;
    *N = *F ? oj_cuda_numel(t0) / *F : 0;
    if (!oj_cu_is_f16ish(t0->dtype) || *F < 2) return false;
    for (int i = 0; i < n; i++) {
        rs[i] = 0;
        if (ts[i] == NULL) continue;
        if (ts[i]->dtype != t0->dtype || !sw_rows(ts[i], &rs[i])) return false;
    }
    return true;
}

oj_status oj_cuda_swiglu_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *gate,
                                 const oj_tensor *up) {
    const char *op = "swiglu_forward";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[3] = {gate, up, out};
    int64_t rs[3], N, F;
    if (!sw_fast(ts, 3, rs, &N, &F)) { /* the unfused calls, s held in out */
        if (oj_cuda_unary(eng, OJ_UN_SILU, out, gate, 0.0, 0.0) != OJ_OK) return oj_last_status(eng);
        return oj_cuda_binary(eng, OJ_BIN_MUL, out, out, up);
    }
    if (N == 0) return OJ_OK;
    OJ_CU_FLOAT_TYPE(gate->dtype, T,
                     (swiglu_launch<T, false>(N, F, oj_cuda_ptr(gate), rs[0], oj_cuda_ptr(up),
                                              rs[1], NULL, 0, oj_cuda_ptr(out), rs[2], NULL, 0)));
    return oj_cuda_check(eng, op);
}

oj_status oj_cuda_swiglu_backward(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                  const oj_tensor *gate, const oj_tensor *up, const oj_tensor *dp);

/* dgate, dup from dp_p, then the product written over dp_p (backend.h
 * swiglu_backward_p): one pass of k_swiglu where the fused path takes the
 * operands (each thread writes the product over the dp it read), else the
 * backward entry then the forward one into dp_p. */
oj_status oj_cuda_swiglu_backward_p(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                    oj_tensor *dp_p, const oj_tensor *gate, const oj_tensor *up) {
    const char *op = "swiglu_backward_p";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, dp_p, op, "dp_p") != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[5] = {gate, up, dp_p, dgate, dup};
    int64_t rs[5], N, F;
    if (!sw_fast(ts, 5, rs, &N, &F)) {
        oj_status st = oj_cuda_swiglu_backward(eng, dgate, dup, gate, up, dp_p);
        return st == OJ_OK ? oj_cuda_swiglu_forward(eng, dp_p, gate, up) : st;
    }
    if (N == 0) return OJ_OK;
    OJ_CU_FLOAT_TYPE(gate->dtype, T,
                     (swiglu_launch<T, true>(N, F, oj_cuda_ptr(gate), rs[0], oj_cuda_ptr(up), rs[1],
                                             oj_cuda_ptr(dp_p), rs[2],
                                             dgate ? oj_cuda_ptr(dgate) : NULL, rs[3],
                                             dup ? oj_cuda_ptr(dup) : NULL, rs[4],
                                             oj_cuda_ptr(dp_p))));
    return oj_cuda_check(eng, op);
}

oj_status oj_cuda_swiglu_backward(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                  const oj_tensor *gate, const oj_tensor *up, const oj_tensor *dp) {
    const char *op = "swiglu_backward";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[5] = {gate, up, dp, dgate, dup};
    int64_t rs[5], N, F;
    if (!sw_fast(ts, 5, rs, &N, &F)) { /* the unfused calls (cpu_elementwise.c's order) */
        oj_status st = OJ_OK;
        if (dup) st = oj_cuda_unary(eng, OJ_UN_SILU, dup, gate, 0.0, 0.0);
        if (st == OJ_OK && dgate) {
            st = oj_cuda_binary(eng, OJ_BIN_MUL, dgate, dp, up);
            if (st == OJ_OK)
                st = oj_cuda_unary_backward(eng, OJ_UN_SILU, dgate, gate, dup ? dup : gate, dgate,
                                            0.0, 0.0);
        }
        if (st == OJ_OK && dup) st = oj_cuda_binary(eng, OJ_BIN_MUL, dup, dp, dup);
        return st;
    }
    if (N == 0 || (dgate == NULL && dup == NULL)) return OJ_OK;
    OJ_CU_FLOAT_TYPE(gate->dtype, T,
                     (swiglu_launch<T, true>(N, F, oj_cuda_ptr(gate), rs[0], oj_cuda_ptr(up), rs[1],
                                             oj_cuda_ptr(dp), rs[2],
                                             dgate ? oj_cuda_ptr(dgate) : NULL, rs[3],
                                             dup ? oj_cuda_ptr(dup) : NULL, rs[4])));
    return oj_cuda_check(eng, op);
}
