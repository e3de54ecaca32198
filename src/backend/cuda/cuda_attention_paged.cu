/* CUDA attention of one sequence over a paged KV cache (backend.h,
 * attention_paged_forward; PagedAttention, Kwon et al. 2023): q [1, H, T,
 * D] any strides, k_pool / v_pool [NB, Hkv, BS, D] contiguous, key j at row
 * j % BS of block blocks[j / BS], S >= T keys, query i sees keys
 * j <= i + S - T; out [1, H, T, D] written through its strides. f32, bf16,
 * f16 (one dtype), f32 compute, D <= 256.
 *
 * The block table (host memory) is uploaded to device scratch on the
 * engine's stream, then one block of PA_WARPS warps per (query row, head):
 * warp w takes keys w, w + PA_WARPS, ... in order, each key's row found
 * through the table, its dot product with q reduced across the warp by a
 * fixed butterfly (lane c holds columns c, c + 32, ...), and keeps an
 * online softmax state (max m, sum l, accumulator acc over D); the block
 * merges its warps' states in warp order through shared memory. Every sum
 * runs in an order fixed by the shapes (no atomics), so results are
 * deterministic; they are not bitwise those of the CPU (other order).
 * Refused during a graph capture (the table is host memory): the op then
 * gathers the blocks. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define PA_WARPS 4
#define PA_MAXD 256
#define PA_REG (PA_MAXD / 32)

struct pa_args {
    const char *q, *k, *v;
    const int32_t *tbl;
    char *o;
    int dt, es, odt, oes;
    int64_t H, Hkv, group, T, S, D, BS;
    int64_t qs[4], os[4];
    float scale;
};

__device__ __forceinline__ float pa_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// grid (T, H), PA_WARPS * 32 threads
__global__ void k_attn_paged(pa_args a) {
    __shared__ float sm[PA_WARPS], sl[PA_WARPS], sacc[PA_WARPS * PA_MAXD];
    const int64_t i = blockIdx.x, h = blockIdx.y, hk = h / a.group;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t n = i + a.S - a.T + 1; /* visible keys */
    float qr[PA_REG], acc[PA_REG];
#pragma unroll
    for (int r = 0; r < PA_REG; r++) {
        int64_t c = lane + 32 * r;
        const char *qp = a.q + (h * a.qs[1] + i * a.qs[2] + c * a.qs[3]) * a.es;
        qr[r] = c < a.D ? oj_cu_ldf(qp, a.dt) : 0.0f;
        acc[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = warp; j < n; j += PA_WARPS) {
        const int64_t row = ((int64_t)a.tbl[j / a.BS] * a.Hkv + hk) * a.BS + j % a.BS;
        const char *kr = a.k + row * a.D * a.es, *vr = a.v + row * a.D * a.es;
        float part = 0.0f;
#pragma unroll
        for (int r = 0; r < PA_REG; r++) {
            int64_t c = lane + 32 * r;
            if (c < a.D) part += qr[r] * oj_cu_ldf(kr + c * a.es, a.dt);
        }
        const float s = a.scale * pa_warp_sum(part);
        const float mn = s > m || isnan(s) ? s : m;
        const float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        const float p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int r = 0; r < PA_REG; r++) {
            int64_t c = lane + 32 * r;
            if (c < a.D) acc[r] = acc[r] * corr + p * oj_cu_ldf(vr + c * a.es, a.dt);
        }
        m = mn;
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int r = 0; r < PA_REG; r++) {
        int64_t c = lane + 32 * r;
        if (c < a.D) sacc[warp * PA_MAXD + c] = acc[r];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < PA_WARPS; w++) M = sm[w] > M || isnan(sm[w]) ? sm[w] : M;
    float L = 0.0f;
    for (int w = 0; w < PA_WARPS; w++)
        if (sm[w] != -INFINITY) L += sl[w] * expf(sm[w] - M);
    const float inv = L > 0.0f ? 1.0f / L : (isnan(L) ? L : 0.0f);
    for (int64_t c = threadIdx.x; c < a.D; c += PA_WARPS * 32) {
        float x = 0.0f;
        for (int w = 0; w < PA_WARPS; w++)
            if (sm[w] != -INFINITY) x += sacc[w * PA_MAXD + c] * expf(sm[w] - M);
        oj_cu_stf(a.o + (h * a.os[1] + i * a.os[2] + c * a.os[3]) * a.oes, a.odt, x * inv);
    }
}

oj_status oj_cuda_attention_paged_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                          const oj_tensor *k_pool, const oj_tensor *v_pool,
                                          const int32_t *blocks, int64_t S, double scale) {
    const char *op = "paged_attention";
    const oj_dtype dt = q->dtype;
    const bool fl = dt == OJ_F32 || dt == OJ_BF16 || dt == OJ_F16;
    if (!fl || k_pool->dtype != dt || v_pool->dtype != dt || q->shape[3] > PA_MAXD ||
        q->shape[1] > 65535 || q->shape[2] > INT32_MAX || oj_cuda_capturing(eng))
        return OJ_ERR_UNSUPPORTED; /* the op gathers the blocks instead */
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const int64_t BS = k_pool->shape[2], nb = (S + BS - 1) / BS;
    oj_storage *hold = NULL;
    int32_t *tbl = (int32_t *)oj_cuda_scratch(eng, (size_t)nb * sizeof(int32_t), op, &hold);
    if (tbl == NULL) return oj_last_status(eng);
    /* pageable host memory: staged by the driver before the call returns */
    cudaError_t e = cudaMemcpyAsync(tbl, blocks, (size_t)nb * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, OJ_STREAM);
    if (e != cudaSuccess) {
        oj__storage_release(hold);
        return oj_cuda_fail(eng, e, "paged_attention: uploading the block table");
    }
    pa_args a;
    memset(&a, 0, sizeof a);
    a.q = oj_cuda_ptr(q);
    a.k = oj_cuda_ptr(k_pool);
    a.v = oj_cuda_ptr(v_pool);
    a.tbl = tbl;
    a.o = oj_cuda_ptr(out);
    a.dt = (int)dt;
    a.es = (int)oj_dtype_size(dt);
    a.odt = (int)out->dtype;
    a.oes = (int)oj_dtype_size(out->dtype);
    a.H = q->shape[1];
    a.Hkv = k_pool->shape[1];
    a.group = a.H / a.Hkv;
    a.T = q->shape[2];
    a.S = S;
    a.D = q->shape[3];
    a.BS = BS;
    for (int d = 0; d < 4; d++) {
        a.qs[d] = q->stride[d];
        a.os[d] = out->stride[d];
    }
    a.scale = (float)scale;
    dim3 grid((unsigned)a.T, (unsigned)a.H);
    k_attn_paged<<<grid, PA_WARPS * 32, 0, OJ_STREAM>>>(a);
    oj_status st = oj_cuda_check(eng, "paged_attention");
    oj__storage_release(hold);
    return st;
}
