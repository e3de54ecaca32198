/* CUDA backend memory entries: device selection, cudaMalloc/cudaFree and
 * synchronous copies. Opening never falls back to the CPU: a missing driver,
 * no device or a bad ordinal is OJ_ERR_DEVICE naming the CUDA error.
 * Kernel entries are added beside this file by the ops layer. */
#include <cuda_runtime.h>

extern "C" {
#include "backend/backend.h"
}

/* Per-engine state: the ordinal (cudaSetDevice before each call, since an
 * engine may be used from any one thread at a time). */
static int cuda_ordinal(oj_engine *eng) {
    return (int)(intptr_t)eng->ext[OJ_EXT_BACKEND].ptr;
}

static oj_status cuda_open(oj_engine *eng, int index, oj_error *err) {
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
    if (e != cudaSuccess) {
        cudaGetLastError();
        return oj_error_set(err, OJ_ERR_DEVICE, "engine_create: cannot open cuda:%d: %s (%s)",
                            index, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    eng->ext[OJ_EXT_BACKEND].ptr = (void *)(intptr_t)index;
    eng->ext[OJ_EXT_BACKEND].destroy = NULL;
    return OJ_OK;
}

static void cuda_close(oj_engine *eng) {
    cudaSetDevice(cuda_ordinal(eng));
    cudaDeviceSynchronize();
}

static void *cuda_alloc(oj_engine *eng, size_t nbytes) {
    void *p = NULL;
    if (cudaSetDevice(cuda_ordinal(eng)) != cudaSuccess) return NULL;
    if (cudaMalloc(&p, nbytes) != cudaSuccess) {
        cudaGetLastError(); /* reset the (non-sticky) out-of-memory error */
        return NULL;
    }
    return p;
}

static void cuda_free(oj_engine *eng, void *ptr, size_t nbytes) {
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
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda %s of %zu bytes failed: %s", what, nbytes,
                            cudaGetErrorString(e));
    return OJ_OK;
}

static oj_status cuda_copy_h2d(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyHostToDevice, "host-to-device copy");
}
static oj_status cuda_copy_d2h(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyDeviceToHost, "device-to-host copy");
}
static oj_status cuda_copy_d2d(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    return copy(eng, dst, src, nbytes, cudaMemcpyDeviceToDevice, "device-to-device copy");
}

static oj_status cuda_memset0(oj_engine *eng, void *dst, size_t nbytes) {
    cudaError_t e = cudaSetDevice(cuda_ordinal(eng));
    if (e == cudaSuccess && nbytes) e = cudaMemset(dst, 0, nbytes);
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda memset of %zu bytes failed: %s", nbytes,
                            cudaGetErrorString(e));
    return OJ_OK;
}

static oj_status cuda_synchronize(oj_engine *eng) {
    cudaError_t e = cudaSetDevice(cuda_ordinal(eng));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return oj_set_error(eng, OJ_ERR_DEVICE, "cuda synchronize failed: %s",
                            cudaGetErrorString(e));
    return OJ_OK;
}

static oj_backend make_cuda_backend() {
    oj_backend b = {};
    b.name = "cuda";
    b.type = OJ_DEVICE_CUDA;
    b.open = cuda_open;
    b.close = cuda_close;
    b.alloc = cuda_alloc;
    b.free = cuda_free;
    b.copy_h2d = cuda_copy_h2d;
    b.copy_d2h = cuda_copy_d2h;
    b.copy_d2d = cuda_copy_d2d;
    b.memset0 = cuda_memset0;
    b.synchronize = cuda_synchronize;
    return b;
}

extern "C" const oj_backend oj_cuda_backend = make_cuda_backend();
