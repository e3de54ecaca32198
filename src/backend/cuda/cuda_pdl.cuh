/* Programmatic dependent launch (PDL, compute capability >= 9.0) for the
 * decode step's kernels (cuda_decode.cu, cuda_attention_decode.cu).
 *
 * A kernel launched as a programmatic dependent may start while the
 * kernel before it in the stream still runs. Its contract here: before
 * oj_pdl_wait it reads nothing but memory no kernel of the step writes
 * (weights) and writes nothing; oj_pdl_wait returns once the kernels it
 * depends on have finished and their writes are visible (at once when it
 * was launched plainly). oj_pdl_allow_dependents lets the next kernel,
 * if launched as a dependent, start now (no effect otherwise). A chain
 * of such kernels overlaps each launch, and each kernel's first weight
 * loads, with the kernel before; CUDA graphs capture the dependencies.
 * OJAS_CUDA_PDL=0 launches them plainly. */
#ifndef OJAS_CUDA_PDL_CUH
#define OJAS_CUDA_PDL_CUH

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

__device__ __forceinline__ void oj_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void oj_pdl_allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

/* The probe of oj_pdl_on: waits (no earlier grid on its stream), writes
 * nothing. */
static __global__ void oj_pdl_probe(int unused) {
    (void)unused;
    oj_pdl_wait();
    oj_pdl_allow_dependents();
}

/* Whether launches go out as programmatic dependents: OJAS_CUDA_PDL is
 * not "0", the current device has compute capability >= 9.0, and a plain
 * launch then a dependent launch of a probe kernel on a private stream
 * succeed (so a runtime or driver without PDL falls back to plain
 * launches instead of failing the first decode step). Decided once. */
static inline bool oj_pdl_on(void) {
    static int on = -1;
    if (on >= 0) return on != 0;
    int dev = 0, major = 0;
    bool ok = oj__env_flag("OJAS_CUDA_PDL", true) && cudaGetDevice(&dev) == cudaSuccess &&
              cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
                  cudaSuccess &&
              major >= 9;
    cudaStream_t st = NULL;
    if (ok) ok = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess;
    if (ok) {
        oj_pdl_probe<<<1, 32, 0, st>>>(0);
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1);
        cfg.blockDim = dim3(32);
        cfg.stream = st;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        ok = cudaLaunchKernelEx(&cfg, oj_pdl_probe, 0) == cudaSuccess;
        ok = cudaStreamSynchronize(st) == cudaSuccess && ok;
        cudaStreamDestroy(st);
    }
    (void)cudaGetLastError(); /* a failed probe leaves no error behind */
    on = ok;
    return ok;
}

/* k<<<grid, block, smem, OJ_STREAM>>>(args...), as a programmatic
 * dependent where oj_pdl_on says so. A launch error is left for
 * oj_cuda_check. */
template <typename... P, typename... A>
static void oj_pdl_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, A &&...args) {
    if (!oj_pdl_on()) {
        k<<<grid, block, smem, OJ_STREAM>>>(static_cast<A &&>(args)...);
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = OJ_STREAM;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, k, static_cast<A &&>(args)...);
}

#endif /* OJAS_CUDA_PDL_CUH */
