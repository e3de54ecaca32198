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
 * gathers the blocks.
 *
 * The packed form (attention_paged_varlen_forward) runs the same kernel
 * over rows of many sequences: row i reads the block table of sequence
 * seq[i] (a row of the device tables [B, MB]) and sees its keys 0..pos[i]
 * (none when pos[i] < 0: the row is zeros). Everything it reads is device
 * memory, so it may be captured in a CUDA graph. paged_kv_write stores
 * packed keys or values at their slots (block * BS + row; < 0: skipped). */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define PA_WARPS 4
#define PA_MAXD 256
#define PA_REG (PA_MAXD / 32)

struct pa_args {
    const char *q, *k, *v;
    const int32_t *tbl;
    const int32_t *seq, *pos; /* packed rows (device), or NULL: one sequence */
    int64_t MB;               /* packed: block table row length */
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
    const int32_t *tbl = a.tbl;
    int64_t n = i + a.S - a.T + 1; /* visible keys */
    if (a.pos) {
        tbl = a.tbl + (int64_t)a.seq[i] * a.MB;
        n = (int64_t)a.pos[i] + 1;
        if (n < 0) n = 0;
    }
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
        const int64_t row = ((int64_t)tbl[j / a.BS] * a.Hkv + hk) * a.BS + j % a.BS;
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

/* The fields of a shared by both forms: q, pools, out, dtypes, shapes. */
static void pa_fill(pa_args *a, oj_tensor *out, const oj_tensor *q, const oj_tensor *k_pool,
                    const oj_tensor *v_pool, double scale) {
    memset(a, 0, sizeof *a);
    a->q = oj_cuda_ptr(q);
    a->k = oj_cuda_ptr(k_pool);
    a->v = oj_cuda_ptr(v_pool);
    a->o = oj_cuda_ptr(out);
    a->dt = (int)q->dtype;
    a->es = (int)oj_dtype_size(q->dtype);
    a->odt = (int)out->dtype;
    a->oes = (int)oj_dtype_size(out->dtype);
    a->H = q->shape[1];
    a->Hkv = k_pool->shape[1];
    a->group = a->H / a->Hkv;
    a->T = q->shape[2];
    a->D = q->shape[3];
    a->BS = k_pool->shape[2];
    for (int d = 0; d < 4; d++) {
        a->qs[d] = q->stride[d];
        a->os[d] = out->stride[d];
    }
    a->scale = (float)scale;
}

static bool pa_dtype_ok(const oj_tensor *q, const oj_tensor *k_pool, const oj_tensor *v_pool) {
    const oj_dtype dt = q->dtype;
    const bool fl = dt == OJ_F32 || dt == OJ_BF16 || dt == OJ_F16;
    return fl && k_pool->dtype == dt && v_pool->dtype == dt && q->shape[3] <= PA_MAXD &&
           q->shape[1] <= 65535 && q->shape[2] <= INT32_MAX;
}

oj_status oj_cuda_attention_paged_varlen_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                                 const oj_tensor *k_pool, const oj_tensor *v_pool,
                                                 const oj_tensor *tables, const oj_tensor *seq,
                                                 const oj_tensor *pos, double scale) {
    if (!pa_dtype_ok(q, k_pool, v_pool)) return OJ_ERR_UNSUPPORTED;
    if (oj_cuda_begin(eng, "paged_attention_varlen") != OJ_OK) return oj_last_status(eng);
    if (q->shape[2] == 0) return OJ_OK;
    pa_args a;
    pa_fill(&a, out, q, k_pool, v_pool, scale);
    a.tbl = (const int32_t *)oj_cuda_ptr(tables);
    a.MB = tables->shape[1];
    a.seq = (const int32_t *)oj_cuda_ptr(seq);
    a.pos = (const int32_t *)oj_cuda_ptr(pos);
    dim3 grid((unsigned)a.T, (unsigned)a.H);
    k_attn_paged<<<grid, PA_WARPS * 32, 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, "paged_attention_varlen");
}

// grid (N, Hkv), 128 threads: row t of x [1, Hkv, N, D] (any strides) to
// row slot[t] % BS of block slot[t] / BS of pool [NB, Hkv, BS, D]
__global__ void k_paged_kv_write(const char *x, int xdt, int xes, int64_t xs1, int64_t xs2,
                                 int64_t xs3, char *pool, int pdt, int pes, const int32_t *slot,
                                 int64_t Hkv, int64_t BS, int64_t D) {
    const int64_t t = blockIdx.x, h = blockIdx.y;
    const int32_t s = slot[t];
    if (s < 0) return;
    char *dst = pool + ((((int64_t)s / BS) * Hkv + h) * BS + (int64_t)s % BS) * D * pes;
    const char *src = x + (h * xs1 + t * xs2) * xes;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x)
        oj_cu_stf(dst + c * pes, pdt, oj_cu_ldf(src + c * xs3 * xes, xdt));
}

oj_status oj_cuda_paged_kv_write(oj_engine *eng, oj_tensor *pool, const oj_tensor *x,
                                 const oj_tensor *slot) {
    const bool fl = x->dtype == OJ_F32 || x->dtype == OJ_BF16 || x->dtype == OJ_F16;
    if (!fl || pool->dtype != x->dtype || x->shape[1] > 65535 || x->shape[2] > INT32_MAX)
        return OJ_ERR_UNSUPPORTED;
    if (oj_cuda_begin(eng, "paged_kv_write") != OJ_OK) return oj_last_status(eng);
    if (x->shape[2] == 0) return OJ_OK;
    dim3 grid((unsigned)x->shape[2], (unsigned)x->shape[1]);
    const int es = (int)oj_dtype_size(x->dtype);
    k_paged_kv_write<<<grid, 128, 0, OJ_STREAM>>>(
        oj_cuda_ptr(x), (int)x->dtype, es, x->stride[1], x->stride[2], x->stride[3],
        oj_cuda_ptr(pool), (int)pool->dtype, es, (const int32_t *)oj_cuda_ptr(slot), pool->shape[1],
        pool->shape[2], pool->shape[3]);
    return oj_cuda_check(eng, "paged_kv_write");
}

oj_status oj_cuda_attention_paged_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *q,
                                          const oj_tensor *k_pool, const oj_tensor *v_pool,
                                          const int32_t *blocks, int64_t S, double scale) {
    const char *op = "paged_attention";
    if (!pa_dtype_ok(q, k_pool, v_pool) || oj_cuda_capturing(eng))
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
    pa_fill(&a, out, q, k_pool, v_pool, scale);
    a.tbl = tbl;
    a.S = S;
    dim3 grid((unsigned)a.T, (unsigned)a.H);
    k_attn_paged<<<grid, PA_WARPS * 32, 0, OJ_STREAM>>>(a);
    oj_status st = oj_cuda_check(eng, "paged_attention");
    oj__storage_release(hold);
    return st;
}
