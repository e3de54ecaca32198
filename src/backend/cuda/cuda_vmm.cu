/* CUDA virtual memory for graph pools: a range of address space reserved
 * once per pool (cuMemAddressReserve) and backed piece by piece as the pool
 * grows (cuMemCreate + cuMemMap + cuMemSetAccess), so the pool is one
 * contiguous range in which freed blocks merge and split (core's range
 * heap, src/core/graph_pool.c). PyTorch's "expandable segments" use the
 * same driver calls for the same reason (CUDA driver API, "Virtual Memory
 * Management"). The driver entries are looked up through the runtime
 * (cudaGetDriverEntryPointByVersion), so nothing links libcuda and a
 * machine without a driver still loads the library. On by default;
 * OJAS_CUDA_VMM=0, a missing entry or a device without virtual memory
 * make vm_granularity 0 and the pool keeps cudaMalloc'd size-classed
 * blocks. */
#include <cuda.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

namespace {

struct vmm_api {
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*addr_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*attribute)(int *, CUdevice_attribute, CUdevice);
    bool ok;
};

vmm_api api;

template <typename F> bool entry(const char *name, F *fn) {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || p == nullptr) {
        cudaGetLastError();
        return false;
    }
    *fn = reinterpret_cast<F>(p);
    return true;
}

bool load_api() {
    api.ok = entry("cuMemGetAllocationGranularity", &api.granularity) &&
             entry("cuMemAddressReserve", &api.reserve) && entry("cuMemAddressFree", &api.addr_free) &&
             entry("cuMemCreate", &api.create) && entry("cuMemMap", &api.map) &&
             entry("cuMemSetAccess", &api.set_access) && entry("cuMemUnmap", &api.unmap) &&
             entry("cuMemRelease", &api.release) && entry("cuDeviceGetAttribute", &api.attribute);
    return api.ok;
}

CUmemAllocationProp prop_of(int ordinal) {
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = ordinal;
    return p;
}

} // namespace

size_t oj_cuda_vm_granularity(oj_engine *eng) {
    if (!oj__env_flag("OJAS_CUDA_VMM", true)) return 0;
    static const bool loaded = load_api(); /* once, thread-safe (C++11 statics) */
    if (!loaded) return 0;
    const int ord = oj_cuda_ordinal(eng);
    int supported = 0;
    if (api.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, ord) !=
            CUDA_SUCCESS ||
        !supported)
        return 0;
    CUmemAllocationProp p = prop_of(ord);
    size_t g = 0;
    if (api.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) return 0;
    return g;
}

void *oj_cuda_vm_reserve(oj_engine *eng, size_t bytes) {
    if (!api.ok || cudaSetDevice(oj_cuda_ordinal(eng)) != cudaSuccess) return nullptr;
    CUdeviceptr base = 0;
    if (api.reserve(&base, bytes, 0, 0, 0) != CUDA_SUCCESS) return nullptr;
    return reinterpret_cast<void *>(base);
}

bool oj_cuda_vm_map(oj_engine *eng, void *base, size_t off, size_t bytes) {
    const int ord = oj_cuda_ordinal(eng);
    if (!api.ok || cudaSetDevice(ord) != cudaSuccess) return false;
    CUmemAllocationProp p = prop_of(ord);
    CUmemGenericAllocationHandle h;
    if (api.create(&h, bytes, &p, 0) != CUDA_SUCCESS) return false;
    CUdeviceptr at = reinterpret_cast<CUdeviceptr>(base) + off;
    if (api.map(at, bytes, 0, h, 0) != CUDA_SUCCESS) {
        api.release(h);
        return false;
    }
    /* the mapping holds the memory from here: the handle can go */
    api.release(h);
    CUmemAccessDesc a = {};
    a.location = p.location;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (api.set_access(at, bytes, &a, 1) != CUDA_SUCCESS) {
        api.unmap(at, bytes);
        return false;
    }
    return true;
}

void oj_cuda_vm_unmap(oj_engine *eng, void *base, size_t off, size_t bytes) {
    if (!api.ok || cudaSetDevice(oj_cuda_ordinal(eng)) != cudaSuccess) return;
    /* unlike cudaFree, unmapping does not wait for work that may still
     * touch the memory */
    cudaDeviceSynchronize();
    api.unmap(reinterpret_cast<CUdeviceptr>(base) + off, bytes);
}

void oj_cuda_vm_release(oj_engine *eng, void *base, size_t bytes) {
    if (!api.ok || cudaSetDevice(oj_cuda_ordinal(eng)) != cudaSuccess) return;
    api.addr_free(reinterpret_cast<CUdeviceptr>(base), bytes);
}
