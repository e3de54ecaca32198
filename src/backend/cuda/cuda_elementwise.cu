/* CUDA elementwise kernels: copy/cast (with broadcast strides), fill, unary
 * (+ backward), binary, where, and the Philox random fill. Every value goes
 * through double exactly as in the CPU kernels (cpu_elementwise.c), except
 * f32 add/sub/mul/div, computed in float: IEEE float results of those are
 * the same bits as the double computation rounded to float. */
#include <string.h>

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
    k_copy<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS>>>(it, dt_size(out->dtype));
    return oj_cuda_check(eng, "copy");
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
        cudaError_t e = nb ? cudaMemsetAsync((char *)out->storage->data + out->offset, 0, nb, 0)
                           : cudaSuccess;
        if (e != cudaSuccess) return oj_cuda_fail(eng, e, "fill (memset)");
        return oj_cuda_check(eng, "fill");
    }
    const oj_tensor *ts[1] = {out};
    oj_cu_iter it;
    oj_cu_iter_init(&it, out->rank, out->shape, 1, ts);
    if (it.numel == 0) return OJ_OK;
    k_fill<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS>>>(it, v, dt_size(dt));
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
    k_unary<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS>>>(it, op, alpha, beta);
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
    k_unary_backward<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS>>>(it, op, alpha, beta);
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
    int mode = 0;
    if (intlike(a->dtype) && intlike(b->dtype) && !oj_dtype_is_float(out->dtype))
        mode = 1;
    else if (out->dtype == OJ_F32 && a->dtype == OJ_F32 && b->dtype == OJ_F32 &&
             (op == OJ_BIN_ADD || op == OJ_BIN_SUB || op == OJ_BIN_MUL || op == OJ_BIN_DIV))
        mode = 2;
    k_binary<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS>>>(it, op, mode);
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
    k_where<<<oj_cuda_blocks(it.numel), OJ_CUDA_THREADS>>>(it, dt_size(out->dtype));
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
    k_rand<<<oj_cuda_blocks((n + 3) / 4), OJ_CUDA_THREADS>>>(
        oj_cuda_ptr(out), (int)out->dtype, dt_size(out->dtype), n, normal, lo, hi,
        (uint32_t)seed, (uint32_t)(seed >> 32), (unsigned long long)offset);
    return oj_cuda_check(eng, "rand");
}
