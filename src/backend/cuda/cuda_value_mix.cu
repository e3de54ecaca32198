/* nanolab's value residual v = v0 + s (v1 - v0) under autocast in one pass
 * each way (backend.h value_mix_forward / value_mix_backward): the ops'
 * chain (sub in the 16-bit dtype, mul by the f32 s, add in f32, the cast
 * back) read and written once instead of five f32/16-bit passes forward
 * and as many back. Each operation is its own IEEE rounding (__f*_rn: no
 * contraction into a fused multiply-add), so the forward and dv1/dv0 are
 * the chain's bits; ds sums in double over a partition fixed by the
 * shape. */
#include "backend/cuda/cuda_internal.cuh"

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
    if (geo.rows * geo.D > 0 || ds) {
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
