/* CUDA embedding lookup and its backward.
 *
 * Backward without atomics (EXACT numerics, and tables that are not f32):
 * the (index, position) pairs are sorted by index with a stable radix sort
 * (CUB), so each table row's positions come out in increasing order; one
 * block per run of equal indices then sums its gradient rows in that
 * order, a thread per channel. Every row is accumulated exactly as the CPU
 * does (f32 tables in f32, bf16/f16 in double rounded once), so the result
 * is bit-identical to the CPU's and the same in every run. Under FAST an
 * f32 table takes k_embedding_seg instead: the sorted positions in
 * segments of 32, each run's pieces added with atomics (no long serial
 * run; the order of the pieces varies). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

// weight (V,C), idx (N), out (N,C)
__global__ void k_embedding_forward(char *out, const char *w, const char *idx, int idt, int64_t N,
                                    int64_t C, int64_t V, int es,
                                    unsigned long long *first_bad) {
    int64_t n_el = N * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_el;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / C, c = i - n * C;
        long long t = oj_cu_ld_index(idx + n * (idt == OJ_I32 ? 4 : 8), idt);
        if (t < 0 || t >= V) {
            if (c == 0) atomicMin(first_bad, (unsigned long long)n);
            continue;
        }
        const char *s = w + (t * C + c) * es;
        char *d = out + i * es;
        switch (es) {
        case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
        case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
        default: *(unsigned long long *)d = *(const unsigned long long *)s; break;
        }
    }
}

oj_status oj_cuda_embedding_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *weight,
                                    const oj_tensor *idx) {
    const char *op = "embedding";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK ||
        oj_cuda_need_contig(eng, weight, op, "weight") != OJ_OK ||
        oj_cuda_need_contig(eng, idx, op, "indices") != OJ_OK)
        return oj_last_status(eng);
    int64_t V = weight->shape[0], C = weight->shape[1], N = oj_cuda_numel(idx);
    if (N == 0) return OJ_OK;
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (oj_cuda_flags_reset(eng, 1, 0xff, 0xff, op) != OJ_OK) return oj_last_status(eng);
    int es = (int)oj_dtype_size(weight->dtype);
    int64_t work = N * (C > 0 ? C : 1);
    k_embedding_forward<<<oj_cuda_blocks(work), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
        oj_cuda_ptr(out), oj_cuda_ptr(weight), oj_cuda_ptr(idx), (int)idx->dtype, N,
        C > 0 ? C : 1, V, es, s->flags);
    if (oj_cuda_check(eng, "embedding_forward") != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_capturing(eng)) /* checked after each replay */
        return oj_cuda_flags_defer(eng, OJ_CUDA_CHECK_INDEX, op, idx, V, 0);
    unsigned long long bad;
    if (oj_cuda_flags_read(eng, &bad, 1, op) != OJ_OK) return oj_last_status(eng);
    if (bad == ~0ull) return OJ_OK;
    return oj_cuda_bad_index(eng, OJ_CUDA_CHECK_INDEX, op, oj_cuda_ptr(idx), (int)idx->dtype, bad,
                             V, 0);
}

__global__ void k_embedding_keys(const char *idx, int idt, int64_t N, int *keys, int *vals) {
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < N;
         n += (int64_t)gridDim.x * blockDim.x) {
        keys[n] = (int)oj_cu_ld_index(idx + n * (idt == OJ_I32 ? 4 : 8), idt);
        vals[n] = (int)n;
    }
}

/* The end of the run of keys equal to row that starts at i: the first
 * j > i with keys[j] != row, or N. The block checks blockDim.x keys per
 * round (a long run costs rounds of L / blockDim.x, not L dependent loads
 * of one thread). Every thread of the block calls it and gets the same
 * end. */
static __device__ int64_t emb_run_end(const int *keys, int64_t i, int64_t N, int row) {
    __shared__ unsigned long long s_end;
    if (threadIdx.x == 0) s_end = (unsigned long long)N;
    __syncthreads();
    for (int64_t base = i + 1; base < N; base += blockDim.x) {
        int64_t j = base + threadIdx.x;
        if (j < N && keys[j] != row) atomicMin(&s_end, (unsigned long long)j);
        __syncthreads();
        bool done = s_end < (unsigned long long)N;
        __syncthreads(); /* every thread has read s_end before the next round */
        if (done) break;
    }
    int64_t end = (int64_t)s_end;
    __syncthreads(); /* read by every thread before the next call resets it */
    return end;
}

#define EMB_ACC 4   /* channels per thread per pass (independent sums) */
#define EMB_UNROLL 8 /* positions whose loads are issued together */

/* One block per run of equal sorted keys (blocks not at a run's start
 * exit): dweight row key = sum over the run of dout rows vals[j], in order
 * (for each channel, acc = 0, then + each row in run order: the CPU's
 * order, so the bits are its). Runs are as long as the text's most
 * frequent token (real text: hundreds to thousands of positions), so the
 * run's end is found first and the sum walks [i, end) with EMB_ACC
 * channels per thread and EMB_UNROLL positions' loads in flight (their
 * source rows staged in shared memory), adding them in order: the
 * latency of a long run is divided by both. The channel loop's bound is
 * the same for every thread of the block (the staging synchronises). */
__global__ void k_embedding_rows(char *dw, int dwdt, const char *dout, int gdt, const int *keys,
                                 const int *vals, int64_t N, int64_t C, int64_t V) {
    int ges = gdt == OJ_F64 ? 8 : (gdt == OJ_F32 ? 4 : 2);
    int wes = dwdt == OJ_F64 ? 8 : (dwdt == OJ_F32 ? 4 : 2);
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        if (i > 0 && keys[i] == keys[i - 1]) continue; /* uniform over the block */
        int row = keys[i];
        int64_t end = emb_run_end(keys, i, N, row);
        if (row < 0 || row >= V) continue; /* checked by the forward; never written */
        const int64_t step = (int64_t)blockDim.x * EMB_ACC;
        for (int64_t c0 = threadIdx.x; c0 - threadIdx.x < C; c0 += step) {
            if (dwdt == OJ_F32) {
                /* the run's source rows staged in shared memory a block's
                 * worth at a time, so each position costs one global load
                 * (its dout element), EMB_UNROLL of them in flight */
                __shared__ int s_rows[1024];
                float acc[EMB_ACC];
                for (int a = 0; a < EMB_ACC; a++) acc[a] = 0.0f;
                for (int64_t j0 = i; j0 < end; j0 += blockDim.x) {
                    int64_t cnt = end - j0 < (int64_t)blockDim.x ? end - j0 : (int64_t)blockDim.x;
                    __syncthreads(); /* the previous chunk's rows are read */
                    if (threadIdx.x < cnt) s_rows[threadIdx.x] = vals[j0 + threadIdx.x];
                    __syncthreads();
                    int64_t u0 = 0;
                    for (; u0 + EMB_UNROLL <= cnt; u0 += EMB_UNROLL) {
                        float x[EMB_UNROLL][EMB_ACC];
#pragma unroll
                        for (int u = 0; u < EMB_UNROLL; u++) {
                            const char *r = dout + (int64_t)s_rows[u0 + u] * C * ges;
#pragma unroll
                            for (int a = 0; a < EMB_ACC; a++) {
                                int64_t c = c0 + (int64_t)a * blockDim.x;
                                x[u][a] = c < C ? oj_cu_ldf(r + c * ges, gdt) : 0.0f;
                            }
                        }
#pragma unroll
                        for (int u = 0; u < EMB_UNROLL; u++)
#pragma unroll
                            for (int a = 0; a < EMB_ACC; a++) acc[a] = __fadd_rn(acc[a], x[u][a]);
                    }
                    for (; u0 < cnt; u0++) {
                        const char *r = dout + (int64_t)s_rows[u0] * C * ges;
#pragma unroll
                        for (int a = 0; a < EMB_ACC; a++) {
                            int64_t c = c0 + (int64_t)a * blockDim.x;
                            if (c < C) acc[a] = __fadd_rn(acc[a], oj_cu_ldf(r + c * ges, gdt));
                        }
                    }
                }
#pragma unroll
                for (int a = 0; a < EMB_ACC; a++) {
                    int64_t c = c0 + (int64_t)a * blockDim.x;
                    if (c < C) *(float *)(dw + ((int64_t)row * C + c) * wes) = acc[a];
                }
            } else {
                for (int a = 0; a < EMB_ACC; a++) {
                    int64_t c = c0 + (int64_t)a * blockDim.x;
                    if (c >= C) break;
                    double acc = 0.0;
                    for (int64_t j = i; j < end; j++)
                        acc = __dadd_rn(acc, oj_cu_ld(dout + ((int64_t)vals[j] * C + c) * ges, gdt));
                    oj_cu_st(dw + ((int64_t)row * C + c) * wes, dwdt, acc);
                }
            }
        }
    }
}

/* FAST numerics, f32 dweight (zeroed first): the sorted positions cut into
 * segments of EMB_SEG, one block per segment. The block stages its
 * segment's keys and source rows in shared memory, then sums dout rows in
 * position order, EMB_UNROLL of them loaded together, and adds each run's
 * piece (a run split by segment ends, or several short runs in one
 * segment) into its dweight row with atomicAdd: a run of L equal indices
 * costs L / EMB_SEG parallel blocks instead of L dependent steps of one
 * block (the most frequent token of a text batch, ~1,000 of 16,384
 * positions, held k_embedding_rows at ~210 us on the H200). The order of
 * the pieces' additions varies from run to run (FAST: any order). */
#define EMB_SEG 32
__global__ void k_embedding_seg(float *dw, const char *dout, int gdt, const int *keys,
                                const int *vals, int64_t N, int64_t C, int64_t V) {
    __shared__ int s_key[EMB_SEG], s_row[EMB_SEG];
    const int ges = gdt == OJ_F64 ? 8 : (gdt == OJ_F32 ? 4 : 2);
    for (int64_t seg = blockIdx.x; seg * EMB_SEG < N; seg += gridDim.x) {
        const int64_t j0 = seg * EMB_SEG;
        const int cnt = (int)(N - j0 < EMB_SEG ? N - j0 : EMB_SEG);
        __syncthreads(); /* the previous segment's keys are read */
        if (threadIdx.x < cnt) {
            s_key[threadIdx.x] = keys[j0 + threadIdx.x];
            s_row[threadIdx.x] = vals[j0 + threadIdx.x];
        }
        __syncthreads();
        for (int64_t c0 = threadIdx.x; c0 - threadIdx.x < C; c0 += (int64_t)blockDim.x * EMB_ACC) {
            float acc[EMB_ACC];
#pragma unroll
            for (int a = 0; a < EMB_ACC; a++) acc[a] = 0.0f;
            int cur = s_key[0];
            for (int u0 = 0; u0 < cnt; u0 += EMB_UNROLL) {
                float x[EMB_UNROLL][EMB_ACC];
#pragma unroll
                for (int u = 0; u < EMB_UNROLL; u++) { /* loads first: past cnt, zeros */
                    const char *r = dout + (int64_t)s_row[u0 + u < cnt ? u0 + u : 0] * C * ges;
#pragma unroll
                    for (int a = 0; a < EMB_ACC; a++) {
                        int64_t c = c0 + (int64_t)a * blockDim.x;
                        x[u][a] = c < C && u0 + u < cnt ? oj_cu_ldf(r + c * ges, gdt) : 0.0f;
                    }
                }
#pragma unroll
                for (int u = 0; u < EMB_UNROLL; u++) {
                    if (u0 + u >= cnt) break;
                    const int k = s_key[u0 + u];
                    if (k != cur) { /* the run piece ends: into its row */
                        if (cur >= 0 && cur < V)
#pragma unroll
                            for (int a = 0; a < EMB_ACC; a++) {
                                int64_t c = c0 + (int64_t)a * blockDim.x;
                                if (c < C) atomicAdd(dw + (int64_t)cur * C + c, acc[a]);
                                acc[a] = 0.0f;
                            }
                        cur = k;
                    }
#pragma unroll
                    for (int a = 0; a < EMB_ACC; a++) acc[a] += x[u][a];
                }
            }
            if (cur >= 0 && cur < V)
#pragma unroll
                for (int a = 0; a < EMB_ACC; a++) {
                    int64_t c = c0 + (int64_t)a * blockDim.x;
                    if (c < C) atomicAdd(dw + (int64_t)cur * C + c, acc[a]);
                }
        }
    }
}

/* OJAS_CUDA_EMB_SEG=0 keeps FAST on k_embedding_rows (comparisons). */
static bool emb_seg_off(void) {
    static int off = -1;
    if (off < 0) {
        off = !oj__env_flag("OJAS_CUDA_EMB_SEG", true);
    }
    return off == 1;
}

// dout (N,C), idx (N), dweight (V,C)
oj_status oj_cuda_embedding_backward(oj_engine *eng, oj_tensor *dweight, const oj_tensor *dout,
                                     const oj_tensor *idx) {
    const char *op = "embedding";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, dweight, op, "dweight") != OJ_OK ||
        oj_cuda_need_contig(eng, dout, op, "dout") != OJ_OK ||
        oj_cuda_need_contig(eng, idx, op, "indices") != OJ_OK)
        return oj_last_status(eng);
    int64_t V = dweight->shape[0], C = dweight->shape[1], N = oj_cuda_numel(idx);
    size_t wbytes = (size_t)(V * C) * oj_dtype_size(dweight->dtype);
    cudaError_t e = wbytes ? cudaMemsetAsync(oj_cuda_ptr(dweight), 0, wbytes, OJ_STREAM) : cudaSuccess;
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, "embedding backward (zero dweight)");
    if (N == 0 || C == 0) return OJ_OK;
    if (N > INT_MAX || V > INT_MAX)
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "embedding: backward on cuda supports up to %d indices and rows, got "
                            "%lld indices and %lld rows",
                            INT_MAX, (long long)N, (long long)V);
    int end_bit = 1;
    while (end_bit < 31 && ((int64_t)1 << end_bit) < V) end_bit++;
    size_t temp = 0;
    if (cub::DeviceRadixSort::SortPairs(NULL, temp, (const int *)NULL, (int *)NULL,
                                        (const int *)NULL, (int *)NULL, (int)N, 0, end_bit,
                                        OJ_STREAM) != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "embedding: cub radix sort size query failed");
    size_t arr = ((size_t)N * sizeof(int) + 255) & ~(size_t)255;
    oj_storage *hold = NULL;
    char *scratch = (char *)oj_cuda_scratch(eng, 4 * arr + temp, op, &hold);
    if (scratch == NULL) return oj_last_status(eng);
    int *keys_in = (int *)scratch, *vals_in = (int *)(scratch + arr);
    int *keys = (int *)(scratch + 2 * arr), *vals = (int *)(scratch + 3 * arr);
    void *tmp = scratch + 4 * arr;
    oj_status st = OJ_OK;
    k_embedding_keys<<<oj_cuda_blocks(N), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(oj_cuda_ptr(idx), (int)idx->dtype, N,
                                                             keys_in, vals_in);
    st = oj_cuda_check(eng, "embedding_backward (keys)");
    if (st == OJ_OK) {
        e = cub::DeviceRadixSort::SortPairs(tmp, temp, keys_in, keys, vals_in, vals, (int)N, 0,
                                            end_bit, OJ_STREAM);
        st = e == cudaSuccess ? oj_cuda_check(eng, "embedding_backward (radix sort)")
                              : oj_cuda_fail(eng, e, "embedding_backward (radix sort)");
    }
    if (st == OJ_OK) {
        /* up to EMB_ACC channels per thread: C = 768 takes 256 threads, 3 each */
        int64_t per = (C + EMB_ACC - 1) / EMB_ACC;
        int threads = per > 128 ? 256 : (per > 64 ? 128 : (per > 32 ? 64 : 32));
        if (eng->numerics == OJ_NUMERICS_FAST && dweight->dtype == OJ_F32 && !emb_seg_off()) {
            int64_t segs = (N + EMB_SEG - 1) / EMB_SEG;
            unsigned blocks = (unsigned)(segs < (1 << 20) ? segs : (1 << 20));
            k_embedding_seg<<<blocks, threads, 0, OJ_STREAM>>>((float *)oj_cuda_ptr(dweight),
                                                               oj_cuda_ptr(dout), (int)dout->dtype,
                                                               keys, vals, N, C, V);
            st = oj_cuda_check(eng, "embedding_backward (segments)");
        } else {
            int64_t blocks = N < (1 << 20) ? N : (1 << 20);
            k_embedding_rows<<<(unsigned)blocks, threads, 0, OJ_STREAM>>>(
                oj_cuda_ptr(dweight), (int)dweight->dtype, oj_cuda_ptr(dout), (int)dout->dtype,
                keys, vals, N, C, V);
            st = oj_cuda_check(eng, "embedding_backward (rows)");
        }
    }
    oj__storage_release(hold);
    return st;
}
