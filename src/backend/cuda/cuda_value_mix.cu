/* nanolab's value residual v = v0 + s (v1 - v0) under autocast in one pass
 * each way (backend.h value_mix_forward / value_mix_backward): the ops'
 * chain (sub in the 16-bit dtype, mul by the f32 s, add in f32, the cast
 * back) read and written once instead of five f32/16-bit passes forward
 * and as many back. Each operation is its own IEEE rounding (__f*_rn: no
 * contraction into a fused multiply-add), so the forward and dv1/dv0 are
 * the chain's bits; ds sums in double over a partition fixed by the
 * shape. */
#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

/* one warp per row (lanes over the last dim: nanolab's D = 64 is two
 * elements a lane); each warp walks a run of consecutive rows */
#define VM_THREADS 128
#define VM_WARPS (VM_THREADS / 32)
#define VM_MAX_BLOCKS 4096

/* Rows of the last dim D: 3 outer dims (leading ones of size 1 where
 * the rank is lower), each operand's outer strides (elements; the last
 * dim is contiguous), the inputs' addresses. */
struct vm_geom {
    int64_t rows, D;
    int64_t shape[3];
    int64_t st[5][3]; /* [operand][dim]: v1, v0, g, then dv1, dv0 (backward) */
    const char *p[3];
};

/* Warp w's run of rows [*r0, *r1): the rows cut into one run per warp of
 * the grid, so a warp finds its first row's index once (divisions) and
 * steps to the next by carries (vm_next): a 64-bit division per dim and
 * row cost more than the row's loads (nanolab: 196,608 rows of 64). */
static __device__ __forceinline__ void vm_run(const vm_geom &g, int64_t *r0, int64_t *r1) {
    const int64_t nw = (int64_t)gridDim.x * VM_WARPS;
    const int64_t w = (int64_t)blockIdx.x * VM_WARPS + (threadIdx.x >> 5);
    const int64_t per = (g.rows + nw - 1) / nw;
    *r0 = w * per < g.rows ? w * per : g.rows;
    *r1 = *r0 + per < g.rows ? *r0 + per : g.rows;
}

/* Row r's index over the outer dims (idx) and the n operands' offsets. */
static __device__ __forceinline__ void vm_start(const vm_geom &g, int64_t r, int n, int64_t *idx,
                                                int64_t *off) {
    for (int k = 0; k < n; k++) off[k] = 0;
#pragma unroll
    for (int d = 2; d >= 0; d--) {
        int64_t q = r / g.shape[d], i = r - q * g.shape[d];
        r = q;
        idx[d] = i;
        for (int k = 0; k < n; k++) off[k] += i * g.st[k][d];
    }
}

/* idx and off one row on (the last outer dim fastest, carries up). */
static __device__ __forceinline__ void vm_next(const vm_geom &g, int n, int64_t *idx,
                                               int64_t *off) {
#pragma unroll
    for (int d = 2; d >= 0; d--) {
        idx[d]++;
        for (int k = 0; k < n; k++) off[k] += g.st[k][d];
        if (idx[d] < g.shape[d]) return;
        idx[d] = 0;
        for (int k = 0; k < n; k++) off[k] -= g.shape[d] * g.st[k][d];
    }
}

template <typename T>
__global__ void __launch_bounds__(VM_THREADS) k_vmix_fwd(const vm_geom g, T *out, const float *s) {
    const float sv = *s;
    const int lane = threadIdx.x & 31;
    int64_t r0, r1, idx[3], off[2];
    vm_run(g, &r0, &r1);
    if (r0 < r1) vm_start(g, r0, 2, idx, off);
    for (int64_t r = r0; r < r1; r++, vm_next(g, 2, idx, off)) {
        const T *a = (const T *)g.p[0] + off[0], *b = (const T *)g.p[1] + off[1];
        T *o = out + r * g.D;
        for (int64_t d = lane; d < g.D; d += 32) {
            float x0 = oj_cu_tof(b[d]);
            float diff = oj_cu_tof(oj_cu_fromf<T>(__fsub_rn(oj_cu_tof(a[d]), x0)));
            o[d] = oj_cu_fromf<T>(__fadd_rn(x0, __fmul_rn(diff, sv)));
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(VM_THREADS)
    k_vmix_bwd(const vm_geom g, T *dv1, T *dv0, const float *s, double *partial) {
    __shared__ double sh[32];
    const float sv = *s;
    const int lane = threadIdx.x & 31;
    double acc = 0.0;
    int64_t r0, r1, idx[3], off[5];
    vm_run(g, &r0, &r1);
    if (r0 < r1) vm_start(g, r0, 5, idx, off);
    for (int64_t r = r0; r < r1; r++, vm_next(g, 5, idx, off)) {
        const T *a = (const T *)g.p[0] + off[0], *b = (const T *)g.p[1] + off[1];
        const T *gp = (const T *)g.p[2] + off[2];
        for (int64_t d = lane; d < g.D; d += 32) {
            float gf = oj_cu_tof(gp[d]);
            T d1 = oj_cu_fromf<T>(__fmul_rn(gf, sv));
            if (dv1) dv1[off[3] + d] = d1;
            if (dv0) dv0[off[4] + d] = oj_cu_fromf<T>(__fadd_rn(gf, -oj_cu_tof(d1)));
            if (partial) {
                float diff = oj_cu_tof(oj_cu_fromf<T>(__fsub_rn(oj_cu_tof(a[d]), oj_cu_tof(b[d]))));
                acc = __dadd_rn(acc, __dmul_rn((double)gf, (double)diff));
            }
        }
    }
    if (partial == NULL) return; /* uniform over the grid */
    acc = oj_cu_block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* ---------------------------------------------------------------- vector path (D 64)
 * The kernels above with 16-byte accesses: a row of 64 16-bit elements is
 * 4 lanes, each holding E = 8 consecutive elements of each half (element
 * l and l + 32, the two a lane of k_vmix_* reads, sit in one lane), so a
 * warp holds 8 of the warps above ("virtual warps", each the same run of
 * rows, walked in the same order). ds keeps its bits: each element-lane's
 * double chain is the same, the run's sum takes oj_cu_warp_sum's order
 * over the 32 element-lanes, and a virtual block's four sums
 * oj_cu_block_sum's second stage (lanes 4..31 zeros). Taken for D 64 and
 * every address and outer stride a multiple of 16 bytes;
 * OJAS_CUDA_VMIX_VEC=0 keeps the kernels above. */
#define VMV_E 8 /* elements of each half a lane */
#define VMV_G 4 /* virtual warps' rows at once: 8 groups of 4 lanes */
/* rows a lane loads before using them: forward 2, backward 1 (6 loads a
 * row; 2 would take 150 registers) */
#define VMV_RR 2
#define VMV_RR_BWD 1

/* Virtual warp vw's run of rows (vm_run's, nw virtual warps). */
static __device__ __forceinline__ void vmv_run(const vm_geom &g, int64_t vw, int64_t nw,
                                               int64_t *r0, int64_t *r1) {
    const int64_t per = (g.rows + nw - 1) / nw;
    *r0 = vw * per < g.rows ? vw * per : g.rows;
    *r1 = *r0 + per < g.rows ? *r0 + per : g.rows;
}

// v1, v0 (.., 64) strided -> out (rows, 64) contiguous; nvw virtual warps
template <typename T>
__global__ void __launch_bounds__(256) k_vmv_fwd(const vm_geom g, T *out, const float *s,
                                                 int64_t nvw) {
    typedef uint4 V;
    const float sv = *s;
    const int lane = threadIdx.x & 31, j = lane & 3;
    const int64_t vw = ((int64_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * 8 + (lane >> 2);
    int64_t r0, r1, idx[3], off[2];
    vmv_run(g, vw, nvw, &r0, &r1);
    if (r0 < r1) vm_start(g, r0, 2, idx, off);
    for (int64_t r = r0; r < r1; r += VMV_RR) {
        V la[VMV_RR][2], lb[VMV_RR][2];
        int64_t orow[VMV_RR];
#pragma unroll
        for (int u = 0; u < VMV_RR; u++) {
            orow[u] = r + u;
            if (r + u < r1) {
                const T *a = (const T *)g.p[0] + off[0] + j * VMV_E;
                const T *b = (const T *)g.p[1] + off[1] + j * VMV_E;
                la[u][0] = *(const V *)a, la[u][1] = *(const V *)(a + 32);
                lb[u][0] = *(const V *)b, lb[u][1] = *(const V *)(b + 32);
                vm_next(g, 2, idx, off);
            }
        }
#pragma unroll
        for (int u = 0; u < VMV_RR; u++) {
            if (orow[u] >= r1) break;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float a[VMV_E], b[VMV_E], o[VMV_E];
                oj_cu_ldv<T, VMV_E>((const T *)&la[u][h], a);
                oj_cu_ldv<T, VMV_E>((const T *)&lb[u][h], b);
#pragma unroll
                for (int c = 0; c < VMV_E; c++) {
                    const float diff = oj_cu_hw_tof(oj_cu_hw_fromf<T>(__fsub_rn(a[c], b[c])));
                    o[c] = __fadd_rn(b[c], __fmul_rn(diff, sv));
                }
                oj_cu_stv<T, VMV_E>(out + orow[u] * 64 + h * 32 + j * VMV_E, o);
            }
        }
    }
}

// g, v1, v0 (.., 64) strided -> dv1, dv0 (.., 64) strided, partial[nvb] (ds)
template <typename T>
__global__ void __launch_bounds__(256) k_vmv_bwd(const vm_geom g, T *dv1, T *dv0, const float *s,
                                                 double *partial, int64_t nvb) {
    typedef uint4 V;
    const float sv = *s;
    const int lane = threadIdx.x & 31, j = lane & 3, grp = lane >> 2;
    const int64_t vw = ((int64_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * 8 + grp;
    double acc[VMV_E];
#pragma unroll
    for (int c = 0; c < VMV_E; c++) acc[c] = 0.0;
    int64_t r0, r1, idx[3], off[5];
    vmv_run(g, vw, nvb * VM_WARPS, &r0, &r1);
    if (r0 < r1) vm_start(g, r0, 5, idx, off);
    for (int64_t r = r0; r < r1; r += VMV_RR_BWD) {
        V la[VMV_RR_BWD][2], lb[VMV_RR_BWD][2], lg[VMV_RR_BWD][2];
        int64_t o1[VMV_RR_BWD], o0[VMV_RR_BWD];
#pragma unroll
        for (int u = 0; u < VMV_RR_BWD; u++) {
            if (r + u < r1) {
                const int64_t e = j * VMV_E;
                const T *gp = (const T *)g.p[2] + off[2] + e;
                lg[u][0] = *(const V *)gp, lg[u][1] = *(const V *)(gp + 32);
                if (partial) {
                    const T *a = (const T *)g.p[0] + off[0] + e, *b = (const T *)g.p[1] + off[1] + e;
                    la[u][0] = *(const V *)a, la[u][1] = *(const V *)(a + 32);
                    lb[u][0] = *(const V *)b, lb[u][1] = *(const V *)(b + 32);
                }
                o1[u] = off[3] + e, o0[u] = off[4] + e;
                vm_next(g, 5, idx, off);
            }
        }
#pragma unroll
        for (int u = 0; u < VMV_RR_BWD; u++) {
            if (r + u >= r1) break;
#pragma unroll
            for (int h = 0; h < 2; h++) { /* h 0: element l, 1: l + 32 (k_vmix_bwd's order) */
                float gf[VMV_E], d1[VMV_E], d0[VMV_E];
                oj_cu_ldv<T, VMV_E>((const T *)&lg[u][h], gf);
#pragma unroll
                for (int c = 0; c < VMV_E; c++) { /* dv1 = g s rounded; dv0 = g - dv1 */
                    d1[c] = __fmul_rn(gf[c], sv);
                    d0[c] = __fadd_rn(gf[c], -oj_cu_hw_tof(oj_cu_hw_fromf<T>(d1[c])));
                }
                if (dv1) oj_cu_stv<T, VMV_E>(dv1 + o1[u] + h * 32, d1);
                if (dv0) oj_cu_stv<T, VMV_E>(dv0 + o0[u] + h * 32, d0);
                if (partial) {
                    float a[VMV_E], b[VMV_E];
                    oj_cu_ldv<T, VMV_E>((const T *)&la[u][h], a);
                    oj_cu_ldv<T, VMV_E>((const T *)&lb[u][h], b);
#pragma unroll
                    for (int c = 0; c < VMV_E; c++) {
                        const float diff =
                            oj_cu_hw_tof(oj_cu_hw_fromf<T>(__fsub_rn(a[c], b[c])));
                        acc[c] = __dadd_rn(acc[c], __dmul_rn((double)gf[c], (double)diff));
                    }
                }
            }
        }
    }
    if (partial == NULL) return; /* uniform over the grid */
    const double w = oj_cu_lanes_sum<VMV_E>(acc); /* the virtual warp's oj_cu_warp_sum */
    /* oj_cu_block_sum's second stage over the virtual block's 4 warps
     * (groups 4 k .. 4 k + 3 of this warp): lanes 4..31 add zeros first */
    const int base = (grp & ~3) * 4;
    double u[VM_WARPS];
#pragma unroll
    for (int k = 0; k < VM_WARPS; k++)
        u[k] = __dadd_rn(__dadd_rn(__dadd_rn(__shfl_sync(0xffffffffu, w, base + 4 * k), 0.0), 0.0),
                         0.0);
    const int64_t vb = vw / VM_WARPS;
    if ((lane & 15) == 0 && vb < nvb)
        partial[vb] = __dadd_rn(__dadd_rn(u[0], u[2]), __dadd_rn(u[1], u[3]));
}

/* Is the vector path on (OJAS_CUDA_VMIX_VEC, default 1; read per call) and
 * does it fit: D 64, the n pointers and their outer strides multiples of 16
 * bytes (8 elements)? */
static bool vmv_fits(const vm_geom &g, const void *const *ptrs, int np, int nst) {
    if (!oj__env_flag("OJAS_CUDA_VMIX_VEC", true) || g.D != 64) return false;
    for (int i = 0; i < np; i++)
        if (ptrs[i] && (uintptr_t)ptrs[i] % 16) return false;
    for (int k = 0; k < nst; k++)
        for (int d = 0; d < 3; d++)
            if (g.st[k][d] % 8) return false;
    return true;
}

/* ds[0] = the nb partials summed in a fixed order, rounded to f32: thread
 * t of one block of VM_DS_THREADS adds partials t, t + VM_DS_THREADS, ...
 * in turn, then the block's tree (oj_cu_block_sum), instead of one
 * thread adding nanolab's 4,096 partials one after another (a chain of
 * 4,096 dependent double adds and their loads, per layer and step). */
#define VM_DS_THREADS 256
__global__ void __launch_bounds__(VM_DS_THREADS) k_vmix_ds(const double *partial, int nb, float *ds) {
    __shared__ double sh[32];
    double t = 0.0;
    for (int i = (int)threadIdx.x; i < nb; i += VM_DS_THREADS) t = __dadd_rn(t, partial[i]);
    t = oj_cu_block_sum(t, sh);
    if (threadIdx.x == 0) *ds = (float)t;
}

/* The geometry of v1, v0 (and g, dv1, dv0: the backward's; NULL outputs
 * take v1's strides, unused): one shape of rank 1..4, one 16-bit float
 * dtype, the last dim contiguous; false when the entry does not take
 * them. */
static bool vm_plan(const oj_tensor *v1, const oj_tensor *v0, const oj_tensor *g,
                    const oj_tensor *dv1, const oj_tensor *dv0, const oj_tensor *s,
                    vm_geom *out) {
    const oj_tensor *ts[5] = {v1, v0, g, dv1 ? dv1 : v1, dv0 ? dv0 : v1};
    int n = g ? 5 : 2, rank = v1->rank;
    if (rank < 1 || rank > 4 || !oj_cu_is_f16ish(v1->dtype) || v1->dtype == OJ_F32 ||
        s->dtype != OJ_F32 || oj_cuda_numel(s) != 1)
        return false;
    for (int k = 0; k < n; k++) {
        if (ts[k]->dtype != v1->dtype || ts[k]->rank != rank) return false;
        for (int d = 0; d < rank; d++)
            if (ts[k]->shape[d] != v1->shape[d]) return false;
        if (v1->shape[rank - 1] > 1 && ts[k]->stride[rank - 1] != 1) return false;
    }
    vm_geom g2;
    memset(&g2, 0, sizeof g2);
    g2.D = v1->shape[rank - 1];
    g2.rows = 1;
    for (int d = 0; d < 3; d++) g2.shape[d] = 1; /* the outer dims right-aligned to 3 */
    for (int d = 0; d < rank - 1; d++) {
        const int e = d + 4 - rank;
        g2.shape[e] = v1->shape[d];
        g2.rows *= v1->shape[d];
        for (int k = 0; k < n; k++) g2.st[k][e] = ts[k]->stride[d];
    }
    for (int k = 0; k < 3 && k < n; k++) g2.p[k] = oj_cuda_ptr(ts[k]); /* the inputs */
    *out = g2;
    return true;
}

static unsigned vm_blocks(int64_t rows) {
    int64_t nb = (rows + VM_WARPS - 1) / VM_WARPS;
    return (unsigned)(nb < 1 ? 1 : nb < VM_MAX_BLOCKS ? nb : VM_MAX_BLOCKS);
}

oj_status oj_cuda_value_mix_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *v1,
                                    const oj_tensor *v0, const oj_tensor *s);
oj_status oj_cuda_value_mix_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *v1,
                                    const oj_tensor *v0, const oj_tensor *s) {
    const char *op = "value_mix_forward";
    vm_geom g;
    if (!vm_plan(v1, v0, NULL, NULL, NULL, s, &g) || out->dtype != v1->dtype ||
        !oj_cuda_contig(out) ||
        oj_cuda_numel(out) != oj_cuda_numel(v1) || !oj_cuda_contig(s))
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: v1, v0 of one bf16/f16 dtype and shape (rank 1..4, last dim "
                            "contiguous), s one f32 element, out contiguous expected",
                            op);
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (g.rows * g.D == 0) return OJ_OK;
    const void *fp[3] = {g.p[0], g.p[1], oj_cuda_ptr(out)};
    if (vmv_fits(g, fp, 3, 2)) {
        const int64_t nvw = (int64_t)vm_blocks(g.rows) * VM_WARPS;
        const unsigned b = (unsigned)((nvw + 63) / 64); /* 8 warps of 8 virtual warps */
        if (v1->dtype == OJ_BF16)
            k_vmv_fwd<oj_cu_bf16><<<b, 256, 0, OJ_STREAM>>>(
                g, (oj_cu_bf16 *)oj_cuda_ptr(out), (const float *)oj_cuda_ptr(s), nvw);
        else
            k_vmv_fwd<oj_cu_f16><<<b, 256, 0, OJ_STREAM>>>(
                g, (oj_cu_f16 *)oj_cuda_ptr(out), (const float *)oj_cuda_ptr(s), nvw);
        return oj_cuda_check(eng, "k_vmv_fwd");
    }
    if (v1->dtype == OJ_BF16)
        k_vmix_fwd<oj_cu_bf16><<<vm_blocks(g.rows), VM_THREADS, 0, OJ_STREAM>>>(
            g, (oj_cu_bf16 *)oj_cuda_ptr(out), (const float *)oj_cuda_ptr(s));
    else
        k_vmix_fwd<oj_cu_f16><<<vm_blocks(g.rows), VM_THREADS, 0, OJ_STREAM>>>(
            g, (oj_cu_f16 *)oj_cuda_ptr(out), (const float *)oj_cuda_ptr(s));
    return oj_cuda_check(eng, op);
}

oj_status oj_cuda_value_mix_backward(oj_engine *eng, oj_tensor *dv1, oj_tensor *dv0,
                                     oj_tensor *ds, const oj_tensor *g, const oj_tensor *v1,
                                     const oj_tensor *v0, const oj_tensor *s);
oj_status oj_cuda_value_mix_backward(oj_engine *eng, oj_tensor *dv1, oj_tensor *dv0,
                                     oj_tensor *ds, const oj_tensor *g, const oj_tensor *v1,
                                     const oj_tensor *v0, const oj_tensor *s) {
    const char *op = "value_mix_backward";
    vm_geom geo;
    bool ok = vm_plan(v1, v0, g, dv1, dv0, s, &geo) && oj_cuda_contig(s);
    if (ok && ds) ok = ds->dtype == OJ_F32 && oj_cuda_numel(ds) == 1 && oj_cuda_contig(ds);
    if (!ok)
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: g, v1, v0, dv1, dv0 of one bf16/f16 dtype and shape (rank 1..4, "
                            "last dim contiguous), s and ds one f32 element expected",
                            op);
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const unsigned nb = vm_blocks(geo.rows);
    oj_storage *hold = NULL;
    double *partial = NULL;
    if (ds) {
        partial = (double *)oj_cuda_scratch(eng, nb * sizeof(double), op, &hold);
        if (partial == NULL) return oj_last_status(eng);
    }
    const float *sp = (const float *)oj_cuda_ptr(s);
    oj_status st = OJ_OK;
    const void *bp[5] = {geo.p[0], geo.p[1], geo.p[2], dv1 ? oj_cuda_ptr(dv1) : NULL,
                         dv0 ? oj_cuda_ptr(dv0) : NULL};
    if ((geo.rows * geo.D > 0 || ds) && vmv_fits(geo, bp, 5, 5)) {
        const unsigned b = (unsigned)(((int64_t)nb * VM_WARPS + 63) / 64);
        if (v1->dtype == OJ_BF16)
            k_vmv_bwd<oj_cu_bf16><<<b, 256, 0, OJ_STREAM>>>(
                geo, dv1 ? (oj_cu_bf16 *)oj_cuda_ptr(dv1) : NULL,
                dv0 ? (oj_cu_bf16 *)oj_cuda_ptr(dv0) : NULL, sp, partial, (int64_t)nb);
        else
            k_vmv_bwd<oj_cu_f16><<<b, 256, 0, OJ_STREAM>>>(
                geo, dv1 ? (oj_cu_f16 *)oj_cuda_ptr(dv1) : NULL,
                dv0 ? (oj_cu_f16 *)oj_cuda_ptr(dv0) : NULL, sp, partial, (int64_t)nb);
        st = oj_cuda_check(eng, "k_vmv_bwd");
    } else if (geo.rows * geo.D > 0 || ds) {
        if (v1->dtype == OJ_BF16)
            k_vmix_bwd<oj_cu_bf16><<<nb, VM_THREADS, 0, OJ_STREAM>>>(
                geo, dv1 ? (oj_cu_bf16 *)oj_cuda_ptr(dv1) : NULL,
                dv0 ? (oj_cu_bf16 *)oj_cuda_ptr(dv0) : NULL, sp, partial);
        else
            k_vmix_bwd<oj_cu_f16><<<nb, VM_THREADS, 0, OJ_STREAM>>>(
                geo, dv1 ? (oj_cu_f16 *)oj_cuda_ptr(dv1) : NULL,
                dv0 ? (oj_cu_f16 *)oj_cuda_ptr(dv0) : NULL, sp, partial);
        st = oj_cuda_check(eng, op);
    }
    if (st == OJ_OK && ds) {
        k_vmix_ds<<<1, VM_DS_THREADS, 0, OJ_STREAM>>>(partial, (int)nb, (float *)oj_cuda_ptr(ds));
        st = oj_cuda_check(eng, "value_mix_backward (ds)");
    }
    oj__storage_release(hold);
    return st;
}
