/* CUDA backend memory entries and the helpers every kernel file shares:
 * device selection, cudaMalloc/cudaFree, synchronous copies, error
 * reporting, the per-engine state (cuBLAS handle, status words) and the
 * host side of strided iteration. Opening never falls back to the CPU: a
 * missing driver, no device or a bad ordinal is OJ_ERR_DEVICE naming the
 * CUDA error. The table oj_cuda_backend is in cuda_backend.cu. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

static int cuda_ordinal(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    return s ? s->ordinal : eng->device.index;
}

static void state_destroy(oj_engine *eng, void *ptr) {
    (void)eng;
    free(ptr);
}

oj_status oj_cuda_open(oj_engine *eng, int index, oj_error *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return oj_error_set(err, OJ_ERR_DEVICE, "engine_create: cannot open cuda:%d: %s (%s)",
                            index, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (index >= count)
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "engine_create: cannot open cuda:%d: %d CUDA device(s) visible", index,
                            count);
    e = cudaSetDevice(index);
    unsigned long long *flags = NULL;
    if (e == cudaSuccess) e = cudaMalloc((void **)&flags, OJ_CUDA_FLAG_WORDS * sizeof *flags);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return oj_error_set(err, OJ_ERR_DEVICE, "engine_create: cannot open cuda:%d: %s (%s)",
                            index, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    oj_cuda_state *s = (oj_cuda_state *)calloc(1, sizeof *s);
    if (s == NULL) {
        cudaFree(flags);
        return oj_error_set(err, OJ_ERR_CAPACITY, "engine_create: out of host memory");
    }
    s->ordinal = index;
    s->flags = flags;
    const char *sync = getenv("OJAS_CUDA_SYNC");
    s->sync_check = sync != NULL && sync[0] != '\0' && strcmp(sync, "0") != 0;
    eng->ext[OJ_EXT_BACKEND].ptr = s;
    eng->ext[OJ_EXT_BACKEND].destroy = state_destroy;
    return OJ_OK;
}

void oj_cuda_close(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    cudaSetDevice(cuda_ordinal(eng));
    cudaDeviceSynchronize();
    if (s == NULL) return;
    if (s->blas_ready) cublasDestroy(s->blas);
    s->blas_ready = false;
    if (s->flags) cudaFree(s->flags);
    s->flags = NULL;
}

void *oj_cuda_alloc(oj_engine *eng, size_t nbytes) {
    void *p = NULL;
    if (cudaSetDevice(cuda_ordinal(eng)) != cudaSuccess) return NULL;
    if (cudaMalloc(&p, nbytes) != cudaSuccess) {
        cudaGetLastError(); /* reset the (non-sticky) out-of-memory error */
        return NULL;
    }
    return p;
}

void oj_cuda_free(oj_engine *eng, void *ptr, size_t nbytes) {
    (void)nbytes;
    cudaSetDevice(cuda_ordinal(eng));
    cudaFree(ptr);
}

static oj_status copy(oj_engine *eng, void *dst, const void *src, size_t nbytes,
                      cudaMemcpyKind kind, const char *what) {
    if (nbytes == 0) return OJ_OK;
    cudaError_t e = cudaSetDevice(cuda_ordinal(eng));
    if (e == cudaSuccess) e = cudaMemcpy(dst, src, nbytes, kind);
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda %s of %zu bytes failed: %s (%s)", what,
                            nbytes, cudaGetErrorString(e), cudaGetErrorName(e));
    return OJ_OK;
}

oj_status oj_cuda_copy_h2d(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyHostToDevice, "host-to-device copy");
}
oj_status oj_cuda_copy_d2h(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyDeviceToHost, "device-to-host copy");
}
oj_status oj_cuda_copy_d2d(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyDeviceToDevice, "device-to-device copy");
}

oj_status oj_cuda_memset0(oj_engine *eng, void *dst, size_t nbytes) {
    cudaError_t e = cudaSetDevice(cuda_ordinal(eng));
    if (e == cudaSuccess && nbytes) e = cudaMemset(dst, 0, nbytes);
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda memset of %zu bytes failed: %s (%s)", nbytes,
                            cudaGetErrorString(e), cudaGetErrorName(e));
    return OJ_OK;
}

oj_status oj_cuda_synchronize(oj_engine *eng) {
    cudaError_t e = cudaSetDevice(cuda_ordinal(eng));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda synchronize failed: %s (%s)",
                            cudaGetErrorString(e), cudaGetErrorName(e));
    return OJ_OK;
}

/* ---------------------------------------------------------------- helpers for the kernels */

oj_status oj_cuda_fail(oj_engine *eng, cudaError_t e, const char *what) {
    return oj_set_error(eng, OJ_ERR_DEVICE, "cuda: %s failed on cuda:%d: %s (%s)", what,
                        cuda_ordinal(eng), cudaGetErrorString(e), cudaGetErrorName(e));
}

oj_status oj_cuda_begin(oj_engine *eng, const char *op) {
    cudaError_t e = cudaSetDevice(cuda_ordinal(eng));
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, op);
    return OJ_OK;
}

oj_status oj_cuda_check(oj_engine *eng, const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        oj_cuda_state *s = oj_cuda_state_of(eng);
        if (s && s->sync_check) e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda kernel %s failed on cuda:%d: %s (%s)",
                            kernel, cuda_ordinal(eng), cudaGetErrorString(e),
                            cudaGetErrorName(e));
    return OJ_OK;
}

oj_status oj_cuda_flags_reset(oj_engine *eng, int nwords, int byte, const char *op) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (nwords > OJ_CUDA_FLAG_WORDS) nwords = OJ_CUDA_FLAG_WORDS;
    cudaError_t e = cudaMemset(s->flags, byte, (size_t)nwords * sizeof *s->flags);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, op);
    return OJ_OK;
}

oj_status oj_cuda_flags_read(oj_engine *eng, unsigned long long *host, int nwords,
                             const char *op) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (nwords > OJ_CUDA_FLAG_WORDS) nwords = OJ_CUDA_FLAG_WORDS;
    cudaError_t e = cudaMemcpy(host, s->flags, (size_t)nwords * sizeof *host,
                               cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, op);
    return OJ_OK;
}

oj_status oj_cuda_d2h(oj_engine *eng, void *dst, const void *src, size_t nbytes, const char *op) {
    if (nbytes == 0) return OJ_OK;
    cudaError_t e = cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, op);
    return OJ_OK;
}

cublasHandle_t oj_cuda_blas(oj_engine *eng, const char *op) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->blas_ready) return s->blas;
    cublasStatus_t st = cublasCreate(&s->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        oj_set_error(eng, OJ_ERR_DEVICE, "%s: cublasCreate failed on cuda:%d: %s", op,
                     s->ordinal, cublasGetStatusString(st));
        return NULL;
    }
    /* Default stream, default math (TF32 is requested per call in FAST). */
    cublasSetStream(s->blas, 0);
    cublasSetPointerMode(s->blas, CUBLAS_POINTER_MODE_HOST);
    s->blas_ready = true;
    return s->blas;
}

oj_status oj_cuda_need_contig(oj_engine *eng, const oj_tensor *t, const char *op,
                              const char *arg) {
    if (t == NULL || oj_cuda_contig(t)) return OJ_OK;
    char b[160];
    return oj_set_error(eng, OJ_ERR_INTERNAL,
                        "%s: the cuda kernel expects %s %s to be contiguous (a bug in the ops "
                        "layer)",
                        op, arg, oj__shape_fmt(b, sizeof b, t->rank, t->shape));
}

void oj_cu_iter_init(oj_cu_iter *it, int rank, const int64_t *shape, int n,
                     const oj_tensor *const *t) {
    memset(it, 0, sizeof *it);
    it->n = n;
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (shape[d] == 1) continue;
        it->shape[r] = shape[d];
        for (int k = 0; k < n; k++) {
            int td = d - (rank - t[k]->rank);
            int64_t s = (td >= 0 && t[k]->shape[td] != 1) ? t[k]->stride[td] : 0;
            it->stride[k][r] = s * (int64_t)oj_dtype_size(t[k]->dtype);
        }
        r++;
    }
    for (int k = 0; k < n; k++) {
        it->base[k] = oj_cuda_ptr(t[k]);
        it->dt[k] = (int)t[k]->dtype;
    }
    if (r == 0) {
        it->shape[0] = 1;
        r = 1;
    }
    int m = 0;
    for (int d = 1; d < r; d++) {
        bool merge = true;
        for (int k = 0; k < n; k++)
            if (it->stride[k][m] != it->stride[k][d] * it->shape[d]) merge = false;
        if (merge) {
            it->shape[m] *= it->shape[d];
            for (int k = 0; k < n; k++) it->stride[k][m] = it->stride[k][d];
        } else {
            m++;
            it->shape[m] = it->shape[d];
            for (int k = 0; k < n; k++) it->stride[k][m] = it->stride[k][d];
        }
    }
    it->rank = m + 1;
    int64_t numel = 1;
    for (int d = 0; d < it->rank; d++) numel *= it->shape[d];
    for (int d = 0; d < rank; d++)
        if (shape[d] == 0) numel = 0;
    it->numel = numel;
}
