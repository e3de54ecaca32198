/* The CPU backend's per-engine state: a persistent thread pool with a
 * deterministic parallel-for, per-thread scratch memory, and the SIMD level
 * the kernels dispatch on.
 *
 * Determinism: oj_cpu_parallel_for splits [0, n) into chunks of `grain`
 * items, chunk c = [c * grain, min((c + 1) * grain, n)). The chunks depend
 * only on n and grain, never on the thread count; threads claim whole
 * chunks dynamically. A kernel whose chunk results depend only on the chunk
 * range (each output written by one chunk, sums inside a chunk in a fixed
 * order, partial results combined by the caller in chunk order) is
 * therefore bit-identical for 1..N threads and across runs.
 *
 * The state lives in eng->ext[OJ_EXT_BACKEND] of a CPU engine, created on
 * first use and destroyed with the engine; worker threads (threads - 1 of
 * them, the caller being the last) start on the first parallel call that
 * has more than one chunk. An engine is used from one thread at a time, so
 * none of this needs a lock outside the pool itself. */
#ifndef OJAS_CPU_POOL_H
#define OJAS_CPU_POOL_H

#include "core/internal.h"

/* SIMD levels, each a superset of the one before. */
typedef enum oj_cpu_isa {
    OJ_ISA_SCALAR = 0, /* portable C, no FMA */
    OJ_ISA_AVX2 = 1,   /* AVX2 + FMA */
    OJ_ISA_AVX512 = 2, /* AVX-512 F/BW/DQ/VL */
} oj_cpu_isa;

/* The best level this CPU (and OS) supports, capped by the environment
 * variable OJAS_CPU_ISA=scalar|avx2|avx512 when set. */
oj_cpu_isa oj_cpu_isa_detect(void);
const char *oj_cpu_isa_name(oj_cpu_isa isa);
/* The level eng's kernels use (oj_cpu_isa_detect() unless changed). */
oj_cpu_isa oj_cpu_isa_of(oj_engine *eng);
/* Use `isa` for eng's kernels (capped at what the CPU supports); returns
 * the level now in use. For tests that run every path on one machine. */
oj_cpu_isa oj__cpu_set_isa(oj_engine *eng, oj_cpu_isa isa);

/* Which GEMM FAST numerics use for f32: the BLAS built in (OpenBLAS), or
 * ours (cpu_gemm.c with fused multiply-adds). The environment variable
 * OJAS_GEMM=ojas|openblas decides when set; otherwise the BLAS, which
 * measured as fast or faster on a GPT training step here
 * (docs/bench-cpu.md). Always ours in a build without BLAS. */
typedef enum { OJ_GEMM_OWN = 0, OJ_GEMM_BLAS = 1 } oj_cpu_gemm_choice;
oj_cpu_gemm_choice oj_cpu_fast_gemm(oj_engine *eng);
/* Set it for eng (benchmarks compare both in one run). */
void oj__cpu_set_fast_gemm(oj_engine *eng, oj_cpu_gemm_choice g);

/* One chunk [begin, end) of a parallel-for, run by thread `tid` (0 = the
 * calling thread, < oj_cpu_threads(eng)). */
typedef void (*oj_cpu_chunk_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* Call fn on every chunk of [0, n) (grain >= 1 items per chunk, see the
 * top of this file), spread over eng's threads; returns when all are done.
 * Runs on the caller alone when there is one chunk or one thread, or when
 * called from inside a chunk (no nesting). */
void oj_cpu_parallel_for(oj_engine *eng, int64_t n, int64_t grain, oj_cpu_chunk_fn fn,
                         void *ctx);
/* The floating-point mode eng's kernels run in, entered on the calling
 * thread (returns what to restore with oj_cpu_fpmode_end): under FAST
 * numerics subnormals flushed to zero (x86 MXCSR FTZ and DAZ), else the
 * caller's own mode. oj_cpu_parallel_for does this for every chunk on
 * every thread; a kernel that runs work on the caller outside it (the
 * one-thread path of oj_iter_run_parallel) brackets that work with these,
 * so FAST results do not depend on the thread count. */
unsigned oj_cpu_fpmode_begin(oj_engine *eng);
void oj_cpu_fpmode_end(unsigned saved);

/* Divide every grain of eng's parallel-fors by 2^shift (at least 1), so
 * small tensors are split too. For tests: no CPU kernel's result depends on
 * its chunk boundaries, so this changes timings only, never bits. */
void oj__cpu_set_grain_shift(oj_engine *eng, int shift);
/* Threads that may run chunks (the engine's thread count, >= 1). */
int oj_cpu_threads(oj_engine *eng);
/* A 64-byte aligned scratch buffer of at least nbytes for thread tid,
 * kept by the engine and reused (its contents are not preserved across
 * calls that grow it). NULL when out of memory. Valid until the next call
 * for the same tid with a larger size. */
void *oj_cpu_scratch(oj_engine *eng, int tid, size_t nbytes);

/* A 64-byte aligned buffer of at least nbytes shared by all threads (one
 * per engine, e.g. a packed GEMM panel that every thread reads), kept and
 * reused like the scratch. Only the calling (engine) thread may ask for
 * it, outside parallel chunks. NULL when out of memory. */
void *oj_cpu_workspace(oj_engine *eng, size_t nbytes);

/* The number of chunks of [0, n) at `grain`. */
static inline int64_t oj_cpu_chunks(int64_t n, int64_t grain) {
    return n <= 0 ? 0 : (n + grain - 1) / grain;
}

#endif /* OJAS_CPU_POOL_H */
