/* The layers of a gpt2 batch-1 decode step in one persistent kernel
 * (backend.h: decode_mega; models/gpt_decode_fast.c runs it under
 * OJAS_DECODE_MEGA=1). The fast step launches six kernels a layer
 * (cuda_decode.cu, cuda_attention_decode.cu); here one cooperative launch
 * of up to MEGA_MAX_LAYERS layers (gpt2-124m: the whole step but the
 * head) runs their stages in order, one block of 256 threads per
 * multiprocessor, with a grid-wide barrier between dependent stages, in
 * the spirit of the "no bubbles" megakernels (Hazy Research, 2025: Llama-1B
 * at batch 1 near the memory bandwidth).
 *
 * Stages of a layer (per block):
 *   qkv  = norm_1(x) @ W_attn + b, keys and values to the cache slot
 *          (layer 0 of the step: x = wte[tok] + wpe[pos] staged by every
 *          block, written with the mask by block 0);
 *   attn = split-key attention of q over the cache, each (chunk, head) on
 *          one half of a block, the head's last chunk merging into y;
 *   x   += y @ W_proj + b;
 *   h    = gelu(norm_2(x) @ W_fc + b);
 *   x   += h @ W_mproj + b.
 * A projection's output tiles (16 columns, the fast step's blocks) go to
 * blocks b, b + grid, ...; each block loads its first tile's weights (or,
 * for the attention, its first keys and values) into registers BEFORE the
 * barrier that releases the stage, so the weights' DRAM latency overlaps
 * the barrier and the stage before, as the fast step's programmatic
 * dependent launches overlap them with the kernel before.
 *
 * Every output element is computed by the fast step's own device
 * functions (cuda_decode_rows.cuh, cuda_attention_decode_fast.cuh) with
 * the same tile and the same order: the fast step's bits, so its logits
 * and tokens. Values written in the launch are read through L2 (CG
 * loads): a block's L1 may hold stale lines of them.
 *
 * The barrier is a counter in the engine's arrival words
 * (OJ_CUDA_COUNT_MEGA): thread 0 of each block fences, adds 1, and spins
 * with acquire loads until every block of the k-th barrier has arrived
 * (k blocks counts); the last block to leave sets the counters back to
 * 0 for the next launch. A barrier that waits more than MEGA_TIMEOUT_NS
 * traps: the launch fails with an error instead of hanging the device
 * (no printf: its call spills the registers of every stage around it).
 * The launch is cooperative (all blocks resident, or the launch fails;
 * OJAS_DECODE_MEGA_COOP=0: a plain launch of the same resident-sized
 * grid) and can be captured in a CUDA graph.
 *
 * One block a multiprocessor: the stages inlined in one kernel need up to
 * 255 registers a thread (the attention's 113 standalone, plus the
 * stage's arguments it can no longer read from the constant bank); at
 * 128 (two blocks) they spilled kilobytes. gpt2-124m: 144 c_attn and 192
 * c_fc tiles over 132 blocks, so a block loads up to two tiles' weights
 * before a barrier.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attention_decode_fast.cuh"
#include "backend/cuda/cuda_decode_rows.cuh"
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "core/env.h"

/* The entries (declared in cuda_backend.cu, their one user). */
bool oj_cuda_decode_mega_ok(int64_t C, int64_t H, int64_t S, int dtype);
oj_status oj_cuda_decode_mega(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                              const oj_tensor *wpe, const oj_tensor *tok, const oj_tensor *pos,
                              oj_tensor *mask, int64_t n_layer, const oj_tensor *const *lw,
                              double eps);

#define MEGA_MAX_LAYERS 12 /* a launch's layers (its arguments: under 4 KB) */
#define MEGA_MIN_BLOCKS 1 /* 255 registers a thread: the stages inlined without spills */
#define MEGA_U1 8  /* rows of weights in flight a thread, products over C */
#define MEGA_U2 24 /* over 4 C (the mlp's c_proj) */
#define MEGA_TIMEOUT_NS 2000000000ull
/* The switches' defaults (read at each launch; a captured step keeps what
 * its capture read): unmeasured, so the plain forms. */
#define MEGA_BAR_DEFAULT 0
#define MEGA_PREFETCH_DEFAULT 0

/* One layer's tensors (device pointers; weights [K, N] rows ld apart). */
struct mega_layer {
    const unsigned short *ln1w, *ln1b, *wqkv, *bqkv, *wo, *bo, *ln2w, *ln2b, *wfc, *bfc, *wpr,
        *bpr;
    unsigned short *kv; /* [2, H, S, D] */
    int64_t ldqkv, ldo, ldfc, ldpr;
};

struct mega_args {
    mega_layer L[MEGA_MAX_LAYERS];
    int nl;
    bool embed; /* this launch starts the step: x = wte[tok] + wpe[pos], the mask */
    unsigned short *x; /* [C], the residual stream */
    const unsigned short *wte, *wpe; /* [V, C], [P, C] */
    int64_t V, P;
    const int64_t *tok, *pos; /* pos is also the cache slot (gpt2) */
    unsigned char *mask;      /* [S]: mask[j] = j <= pos */
    unsigned short *qkv, *y, *h; /* [3C], [C], [4C] scratch */
    float *pm, *pl, *pacc;       /* the attention's chunk states [H nsplit (D)] */
    unsigned int *count;         /* [H]: the attention's arrivals per head */
    unsigned int *bar;           /* [2]: barrier arrivals, blocks done */
    int C, H;
    int64_t S, chunk, steps, nsplit;
    double eps;
    float scale;
    int dtype;
    bool relbar;   /* OJAS_DECODE_MEGA_BAR=1: acq_rel arrivals (mega_barrier) */
    bool prefetch; /* OJAS_DECODE_MEGA_PREFETCH=1: idle blocks warm L2 (mega_prefetch) */
};

__device__ __forceinline__ unsigned mega_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long mega_now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Every block's writes before it visible to every block after it: the
 * target-th arrival (target = barriers so far x blocks). rel: the arrival
 * is one atom.add.acq_rel (no separate fences; OJAS_DECODE_MEGA_BAR=1),
 * else a __threadfence, atomicAdd, and a fence after the wait (cooperative
 * groups' grid sync). */
__device__ __forceinline__ void mega_barrier(unsigned *bar, unsigned target, bool rel) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned seen;
        if (rel) {
            asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;"
                         : "=r"(seen)
                         : "l"(bar)
                         : "memory");
        } else {
            __threadfence();
            seen = atomicAdd(bar, 1u);
        }
        if (seen + 1u < target) {
            const unsigned long long t0 = mega_now_ns();
            unsigned n = 0;
            while (mega_ld_acquire(bar) < target) {
                if ((++n & 255u) == 0 && mega_now_ns() - t0 > MEGA_TIMEOUT_NS) __trap();
            }
        }
        if (!rel) __threadfence();
    }
    __syncthreads();
}

/* Part `part` of `parts` of the weight w [K, ld] into L2 (prefetch, no
 * registers): idle blocks warm a later stage's weights for the blocks that
 * load them into registers (OJAS_DECODE_MEGA_PREFETCH=1). */
__device__ __forceinline__ void mega_prefetch(const unsigned short *w, int64_t ld, int K,
                                              int64_t part, int64_t parts) {
    const int64_t lines = ((int64_t)K * ld * 2 + 127) / 128;
    const int64_t lo = lines * part / parts, hi = lines * (part + 1) / parts;
    const char *p = (const char *)w;
    for (int64_t i = lo + threadIdx.x; i < hi; i += OJ_DEC_THREADS)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i * 128));
}

/* The row of a projection stage: SRC_IN p.in read through L2; SRC_EMBED
 * x = round_T(wte[tok] + wpe[pos]) (NaN out of range: the embedding
 * kernel's bits), which block 0 also writes to a.x with the mask. */
enum { SRC_IN = 0, SRC_EMBED = 1 };

/* A projection stage: the weights of the block's first two tiles
 * (blockIdx.x and, with P2, blockIdx.x + grid, when < ntiles) into
 * registers, the
 * barrier (target 0: none), the row staged (dec_stage_row), each tile
 * (dec_kn_product; a third tile and later load after the barrier). */
template <typename T, int U, bool NORM, int EPI, int SRC, bool P2 = true>
__device__ __forceinline__ void mega_proj(const proj_args p, int64_t ntiles, unsigned *bar,
                                          unsigned target, const mega_args *a, float *xs,
                                          float *red, float (*part)[16]) {
    int64_t tile = blockIdx.x;
    uint4 wv[U], wv2[P2 ? U : 1];
    if (tile < ntiles) dec_kn_first<2, U>(wv, p, tile);
    if (P2 && tile + gridDim.x < ntiles) dec_kn_first<2, U>(*(uint4(*)[U])wv2, p, tile + gridDim.x);
    if (target) mega_barrier(bar, target, a->relbar);
    if (tile >= ntiles) return; /* uniform over the block */
    if (SRC == SRC_EMBED) {
        const int C = a->C;
        const int64_t tk = *a->tok, ps = *a->pos;
        const bool ok = tk >= 0 && tk < a->V && ps >= 0 && ps < a->P;
        const unsigned short *we = a->wte + (ok ? tk * C : 0), *pe = a->wpe + (ok ? ps * C : 0);
        unsigned short *xw = a->x;
        const bool writer = blockIdx.x == 0;
        if (writer)
            for (int64_t j = threadIdx.x; j < a->S; j += OJ_DEC_THREADS) a->mask[j] = j <= ps;
        dec_stage_row<T, NORM>(xs, red, [=](int k) {
            const T r = oj_cu_fromf<T>(ok ? oj_cu_tof(T{we[k]}) + oj_cu_tof(T{pe[k]}) : NAN);
            if (writer) xw[k] = r.u;
            return oj_cu_hw_tof(r);
        }, p.nw, p.nb, p.eps, p.K);
    } else {
        const unsigned short *in = p.in;
        dec_stage_row<T, NORM>(xs, red, [=](int k) { return oj_cu_hw_tof(T{__ldcg(in + k)}); },
                               p.nw, p.nb, p.eps, p.K);
    }
    dec_kn_product<T, 2, U, EPI, true>(p, wv, xs, part, tile);
    tile += gridDim.x;
    if (tile >= ntiles) return;
    __syncthreads(); /* the epilogue's reads of part before the next tile writes it */
    if (!P2) dec_kn_first<2, U>(wv, p, tile);
    dec_kn_product<T, 2, U, EPI, true>(p, P2 ? *(uint4(*)[U])wv2 : wv, xs, part, tile);
    for (tile += gridDim.x; tile < ntiles; tile += gridDim.x) {
        __syncthreads();
        dec_kn_first<2, U>(wv, p, tile);
        dec_kn_product<T, 2, U, EPI, true>(p, wv, xs, part, tile);
    }
}

__device__ __forceinline__ proj_args mega_proj_args(const mega_args &a, unsigned short *out,
                                                    const unsigned short *in,
                                                    const unsigned short *nw,
                                                    const unsigned short *nb,
                                                    const unsigned short *w, int64_t ldw, int N,
                                                    int K, const unsigned short *bias) {
    proj_args p = {};
    p.out = out;
    p.in = in;
    p.nw = nw;
    p.nb = nb;
    p.eps = a.eps;
    p.w = w;
    p.ldw = ldw;
    p.N = N;
    p.K = K;
    p.bias = bias;
    return p;
}

/* The attention stage of layer ly: (chunk, head) item i on half
 * (i / grid) % 2 of block i % grid, the first item's keys and values
 * loaded before the barrier; the head's last chunk to finish merges the
 * chunks into y (df_partial). */
template <typename T, int D>
__device__ __forceinline__ void mega_attention(const mega_args *ap, const mega_layer *ly,
                                            unsigned target, float (*wm)[DF_WARPS],
                                            float (*wl)[DF_WARPS], float (*wacc)[DF_WARPS][D],
                                            bool *last) {
    const mega_args &a = *ap;
    const int C = a.C, half = threadIdx.x / DF_THREADS, tid = threadIdx.x % DF_THREADS;
    const int64_t grid = gridDim.x, items = a.nsplit * a.H;
    dec_args d = {};
    d.q = (const char *)a.qkv;
    d.k = (const char *)ly->kv;
    d.v = (const char *)(ly->kv + (int64_t)a.H * a.S * D);
    d.mask = (const char *)a.mask;
    d.dt = a.dtype;
    d.es = 2;
    d.mdt = OJ_BOOL;
    d.mes = 1;
    d.H = a.H;
    d.group = 1;
    d.S = a.S;
    d.D = D;
    d.Dv = D;
    d.nsplit = a.nsplit;
    d.chunk = a.chunk;
    d.steps = a.steps;
    d.qs[0] = 3 * C, d.qs[1] = D, d.qs[2] = 3 * C, d.qs[3] = 1;
    d.ks[0] = d.vs[0] = (int64_t)a.H * a.S * D;
    d.ks[1] = d.vs[1] = a.S * D;
    d.ks[2] = d.vs[2] = D;
    d.ks[3] = d.vs[3] = 1;
    d.ms[0] = d.ms[1] = d.ms[2] = 0, d.ms[3] = 1;
    d.scale = a.scale;
    d.pm = a.pm;
    d.pl = a.pl;
    d.pacc = a.pacc;
    d.count = a.count;
    d.fresh = a.pos;
    d.o = (char *)a.y;
    d.os[0] = C, d.os[1] = D, d.os[2] = C, d.os[3] = 1;
    d.odt = a.dtype;
    d.oes = 2;
    uint4 kr[DF_U], vr[DF_U];
    const int64_t i0 = blockIdx.x + grid * half;
    if (i0 < items) df_partial_preload<T, D, true>(d, i0 % a.nsplit, i0 / a.nsplit, tid, kr, vr);
    /* blocks without a tile of the projection after (c_proj) warm its weights */
    const int64_t nt1 = (C + 15) / 16;
    if (a.prefetch && blockIdx.x >= nt1 && grid > nt1)
        mega_prefetch(ly->wo, ly->ldo, C, blockIdx.x - nt1, grid - nt1);
    mega_barrier(a.bar, target, a.relbar);
    for (int64_t i = i0; i < items; i += 2 * grid)
        df_partial<T, D, 1, true>(d, i % a.nsplit, i / a.nsplit, tid, i == i0, kr, vr, wm[half],
                                  wl[half], wacc[half], &last[half], 1 + half);
}

template <typename T, int D>
__global__ void __launch_bounds__(OJ_DEC_THREADS, MEGA_MIN_BLOCKS)
    k_dec_mega(const __grid_constant__ mega_args a) {
    extern __shared__ __align__(16) float xs[]; /* [4 C]: the staged row */
    __shared__ float red[32];
    __shared__ float part[OJ_DEC_THREADS / 32][16];
    __shared__ float wm[2][DF_WARPS], wl[2][DF_WARPS];
    __shared__ float wacc[2][DF_WARPS][D];
    __shared__ bool last[2];
    const int C = a.C;
    const unsigned grid = gridDim.x;
    const int64_t nt1 = (C + 15) / 16, nt3 = (3 * C + 15) / 16, nt4 = (4 * C + 15) / 16;
    unsigned nbar = 0;
    for (int l = 0; l < a.nl; l++) {
        const mega_layer *ly = &a.L[l];
        /* ---- qkv = norm_1(x) @ W_attn + b; k, v to the cache slot (no
         * barrier before layer 0: x comes from the kernel before) */
        proj_args p = mega_proj_args(a, a.qkv, a.x, ly->ln1w, ly->ln1b, ly->wqkv, ly->ldqkv,
                                     3 * C, C, ly->bqkv);
        p.kv = ly->kv;
        p.slot = a.pos;
        p.C = C;
        p.D = D;
        p.H = a.H;
        p.S = a.S;
        const unsigned tq = l > 0 ? ++nbar * grid : 0u;
        if (l == 0 && a.embed)
            mega_proj<T, MEGA_U1, true, EPI_PLAIN, SRC_EMBED>(p, nt3, a.bar, tq, &a, xs, red, part);
        else
            mega_proj<T, MEGA_U1, true, EPI_PLAIN, SRC_IN>(p, nt3, a.bar, tq, &a, xs, red, part);
        /* ---- y = attention(q, cache) */
        mega_attention<T, D>(&a, ly, ++nbar * grid, wm, wl, wacc, last);
        /* ---- x += y @ W_proj + b */
        p = mega_proj_args(a, a.x, a.y, NULL, NULL, ly->wo, ly->ldo, C, C, ly->bo);
        mega_proj<T, MEGA_U1, false, EPI_RESID, SRC_IN>(p, nt1, a.bar, ++nbar * grid, &a, xs, red,
                                                        part);
        /* ---- h = gelu(norm_2(x) @ W_fc + b); blocks without a tile of
         * the MLP's c_proj warm its weights */
        if (a.prefetch && blockIdx.x >= nt1 && grid > nt1)
            mega_prefetch(ly->wpr, ly->ldpr, 4 * C, blockIdx.x - nt1, grid - nt1);
        p = mega_proj_args(a, a.h, a.x, ly->ln2w, ly->ln2b, ly->wfc, ly->ldfc, 4 * C, C, ly->bfc);
        mega_proj<T, MEGA_U1, true, EPI_GELU, SRC_IN>(p, nt4, a.bar, ++nbar * grid, &a, xs, red,
                                                      part);
        /* ---- x += h @ W_mproj + b (the kernel after, the head, may
         * launch as blocks leave the last one) */
        if (l == a.nl - 1) oj_pdl_allow_dependents();
        p = mega_proj_args(a, a.x, a.h, NULL, NULL, ly->wpr, ly->ldpr, C, 4 * C, ly->bpr);
        mega_proj<T, MEGA_U2, false, EPI_RESID, SRC_IN, false>(p, nt1, a.bar, ++nbar * grid, &a, xs, red,
                                                        part);
    }
    /* every block has passed every barrier once it counts here: the last
     * one sets the counters back to 0 for the next launch */
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(a.bar + 1, 1u) == grid - 1u) {
            a.bar[0] = 0;
            a.bar[1] = 0;
            __threadfence();
        }
    }
}

#define MEGA_STATIC_SMEM (16 * 1024) /* the kernel's static shared memory, rounded up */

bool oj_cuda_decode_mega_ok(int64_t C, int64_t H, int64_t S, int dtype) {
    if (dtype != OJ_BF16 && dtype != OJ_F16) return false;
    if (H < 1 || H > OJ_CUDA_COUNT_ATTN_ROWS || C % H != 0 || S < 1 || S > INT32_MAX) return false;
    const int64_t D = C / H;
    /* the fast step's tiles: 2 column groups for N = 3 C, C, 4 C (cuda_decode.cu
     * dec_groups: (N + 7) / 8 < 1024), N multiples of 8 */
    if (D != 64 && D != 128) return false;
    if (C % 8 != 0 || (4 * C + 7) / 8 >= 4 * 256) return false;
    return 16 * C + MEGA_STATIC_SMEM <= 48 * 1024;
}

template <typename T, int D> static void mega_launch(const mega_args &a, int blocks, bool coop) {
    const size_t smem = (size_t)16 * a.C;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks);
    cfg.blockDim = dim3(OJ_DEC_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = OJ_STREAM;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = coop ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k_dec_mega<T, D>, a);
}

/* Blocks of the grid: resident ones (the occupancy of the kernel at smem
 * bytes, asked once per device and size: the first call may come inside a
 * graph capture) times the multiprocessors, at most MEGA_MIN_BLOCKS a
 * multiprocessor; 0 when none can be resident. A grid too large for
 * residency fails the cooperative launch rather than hanging. */
template <typename T, int D> static int mega_blocks(oj_engine *eng, size_t smem) {
    static oj_cuda_kfacts facts;
    int occ = 0;
    if (oj_cuda_kernel_occupancy(&facts, (const void *)k_dec_mega<T, D>,
                                 oj_cuda_state_of(eng)->ordinal, OJ_DEC_THREADS, smem,
                                 &occ) != cudaSuccess) {
        (void)cudaGetLastError();
        occ = 1; /* 255 registers a thread: one block a multiprocessor */
    }
    return (occ < MEGA_MIN_BLOCKS ? occ : MEGA_MIN_BLOCKS) * oj_cuda_sms(eng);
}

static const unsigned short *mega_p(const oj_tensor *t) {
    return (const unsigned short *)oj_cuda_ptr(t);
}

oj_status oj_cuda_decode_mega(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                              const oj_tensor *wpe, const oj_tensor *tok, const oj_tensor *pos,
                              oj_tensor *mask, int64_t n_layer, const oj_tensor *const *lw,
                              double eps) {
    static const char op[] = "decode_mega";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *kv0 = lw[12];
    const int64_t H = kv0->shape[2], S = kv0->shape[3], D = kv0->shape[4], C = H * D;
    if (!oj_cuda_decode_mega_ok(C, H, S, x->dtype))
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED, "%s: n_embd %lld, %lld heads, %lld slots, %s: "
                            "not the persistent kernel's shapes", op, (long long)C, (long long)H,
                            (long long)S, oj_dtype_name(x->dtype));
    mega_args a = {};
    a.x = (unsigned short *)oj_cuda_ptr(x);
    a.wte = mega_p(wte);
    a.wpe = mega_p(wpe);
    a.V = wte->shape[0];
    a.P = wpe->shape[0];
    a.tok = (const int64_t *)oj_cuda_ptr(tok);
    a.pos = (const int64_t *)oj_cuda_ptr(pos);
    a.mask = (unsigned char *)oj_cuda_ptr(mask);
    a.C = (int)C;
    a.H = (int)H;
    a.S = S;
    a.eps = eps;
    a.scale = (float)(1.0 / sqrt((double)D)); /* decode_attention's */
    a.dtype = (int)x->dtype;
    /* the split-key attention's chunks, as cuda_attention_decode.cu's df_run
     * cuts them for H rows (the chunking sets the order of its sums) */
    const int64_t lpk = D * 2 / 16, kb = DF_WARPS * DF_U * (32 / lpk);
    const int64_t n0 = (S + kb - 1) / kb;
    int64_t steps = (H * n0 + DF_BLOCKS - 1) / DF_BLOCKS;
    const int64_t smin = (n0 + DF_MAXSPLIT - 1) / DF_MAXSPLIT;
    if (steps < smin) steps = smin;
    if (steps > n0) steps = n0;
    a.steps = steps;
    a.chunk = kb * steps;
    a.nsplit = (S + a.chunk - 1) / a.chunk;
    /* scratch: the chunk states, qkv, y, h (each 16-byte aligned) */
    const size_t ns = (size_t)(H * a.nsplit);
    const size_t fm = (ns * sizeof(float) + 15) / 16 * 16, fa = ns * (size_t)D * sizeof(float);
    const size_t bq = (size_t)3 * C * 2, by = (size_t)C * 2, bh = (size_t)4 * C * 2;
    oj_storage *hold = NULL;
    char *sc = (char *)oj_cuda_scratch(eng, 2 * fm + fa + bq + by + bh, op, &hold);
    if (sc == NULL) return oj_last_status(eng);
    a.pm = (float *)sc;
    a.pl = (float *)(sc + fm);
    a.pacc = (float *)(sc + 2 * fm);
    a.qkv = (unsigned short *)(sc + 2 * fm + fa);
    a.y = (unsigned short *)(sc + 2 * fm + fa + bq);
    a.h = (unsigned short *)(sc + 2 * fm + fa + bq + by);
    oj_cuda_state *cs = oj_cuda_state_of(eng);
    a.count = cs->counts;
    a.bar = cs->counts + OJ_CUDA_COUNT_MEGA;
    const bool bf = x->dtype == OJ_BF16;
    const size_t smem = (size_t)16 * C;
    const int blocks = bf ? (D == 64 ? mega_blocks<oj_cu_bf16, 64>(eng, smem)
                                     : mega_blocks<oj_cu_bf16, 128>(eng, smem))
                          : (D == 64 ? mega_blocks<oj_cu_f16, 64>(eng, smem)
                                     : mega_blocks<oj_cu_f16, 128>(eng, smem));
    if (blocks <= 0) {
        oj__storage_release(hold);
        return oj_set_error(eng, OJ_ERR_DEVICE, "%s: no resident grid for the kernel", op);
    }
    const bool coop = oj__env_flag("OJAS_DECODE_MEGA_COOP", true);
    a.relbar = oj__env_flag("OJAS_DECODE_MEGA_BAR", MEGA_BAR_DEFAULT);
    a.prefetch = oj__env_flag("OJAS_DECODE_MEGA_PREFETCH", MEGA_PREFETCH_DEFAULT);
    oj_status st = OJ_OK;
    for (int64_t l0 = 0; l0 < n_layer && st == OJ_OK; l0 += MEGA_MAX_LAYERS) {
        const int64_t nl = n_layer - l0 < MEGA_MAX_LAYERS ? n_layer - l0 : MEGA_MAX_LAYERS;
        a.nl = (int)nl;
        a.embed = l0 == 0;
        for (int64_t i = 0; i < nl; i++) {
            const oj_tensor *const *w = lw + (l0 + i) * 13;
            mega_layer &L = a.L[i];
            L.ln1w = mega_p(w[0]), L.ln1b = mega_p(w[1]);
            L.wqkv = mega_p(w[2]), L.bqkv = mega_p(w[3]), L.ldqkv = w[2]->stride[0];
            L.wo = mega_p(w[4]), L.bo = mega_p(w[5]), L.ldo = w[4]->stride[0];
            L.ln2w = mega_p(w[6]), L.ln2b = mega_p(w[7]);
            L.wfc = mega_p(w[8]), L.bfc = mega_p(w[9]), L.ldfc = w[8]->stride[0];
            L.wpr = mega_p(w[10]), L.bpr = mega_p(w[11]), L.ldpr = w[10]->stride[0];
            L.kv = (unsigned short *)oj_cuda_ptr(w[12]);
        }
        if (bf) {
            if (D == 64) mega_launch<oj_cu_bf16, 64>(a, blocks, coop);
            else mega_launch<oj_cu_bf16, 128>(a, blocks, coop);
        } else {
            if (D == 64) mega_launch<oj_cu_f16, 64>(a, blocks, coop);
            else mega_launch<oj_cu_f16, 128>(a, blocks, coop);
        }
        st = oj_cuda_check(eng, op);
    }
    oj__storage_release(hold); /* later users run after these kernels (one stream) */
    return st;
}
