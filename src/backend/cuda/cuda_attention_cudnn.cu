/* cuDNN's fused flash attention (the SDPA runtime-fusion engines of cuDNN
 * 9, FlashAttention-2/3-style kernels with wgmma and TMA on Hopper) for
 * the CUDA attention op: bf16/f16, D == Dv in {64, 128}, GQA (Hkv divides
 * H), causal with T == S or non-causal any T, S.
 * Built through the cuDNN backend API (cudnn_graph.h), no frontend: the
 * operation graphs below are the patterns cuDNN documents for "fused flash
 * attention" fprop and bprop (Graph API, specialized runtime fusion
 * engines).
 *
 * Forward graph (one kernel), tensors [B,H,T,D] through the caller's
 * strides (the [B,T,H,D] storage of the model is a strided view: no copy):
 *   S = Q K^T (f32) ; S *= scale ; causal: S = row >= col ? S : -inf
 *   M = rowmax S ; E = exp(S - M) ; Z = rowsum E ; Stats = M + log Z
 *   P = E / Z (rounded to the input dtype) ; O = P V
 * Stats [B,H,T,1] f32 is the natural-log logsumexp of the scaled scores:
 * the same quantity the tensor-core kernels store in lse.
 * Backward graph: softmax_sum = rowsum(dO * O) (f32, in the workspace),
 *   P = exp(scale Q K^T - Stats) (masked), dV = P^T dO (summed over the
 *   group's heads for GQA), dS = P (dO V^T - softmax_sum) scale,
 *   dK = dS^T Q (group-summed), dQ = dS K through an f32 accumulator in
 *   the workspace. cuDNN's Hopper backward adds into that accumulator
 *   with atomics: not bit-reproducible run to run (FAST).
 * EXACT: the backward graph writes dQ straight from the dS K product
 *   (cuDNN then serves it with a dP workspace, no atomics), and only
 *   engine configs cuDNN does not note as nondeterministic are taken (for
 *   the forward too); heuristics mode A ranks without timing, so a
 *   machine builds the same plans every run. On the H200 (2026-12-02)
 *   reruns gave the same bits and the backward ran 0.320 / 0.239 ms
 *   against the tensor-core kernels' 0.522 / 0.469 ms for [16, 12, 1024,
 *   64] / [16, 6, 1024, 128] causal bf16 (FAST's accumulator graph: 0.285
 *   / 0.239). tests/gpu/test_gpu_attention.c checks the reruns' bits.
 *
 * Which calls: forwards that keep lse (a recorded training forward) and
 * the backwards that follow them. A forward without lse (inference: a
 * prefill, whose prompt length is a new shape each time) runs the
 * tensor-core kernels: building a plan for a new shape costs more than
 * the kernels' whole prefill, and a training run repeats a few shapes.
 * Plans: per engine, a plan per key (fwd/bwd, B, H, Hkv, T, S, D, dtype,
 * causal, scale, every stride) is built once (heuristics mode A, the
 * first engine config that finalizes) and cached; later calls only
 * execute it (cudnnBackendExecute on the engine's stream, capturable into
 * a CUDA graph). The cache holds at most CD_MAX_PLANS keys, least
 * recently used evicted first; a plan executed during a CUDA graph
 * capture is pinned by that graph (its kernels, compiled by cuDNN's
 * runtime fusion, belong to the plan) until the graph is freed, and an
 * evicted plan is destroyed only after the engine's stream has drained
 * (no eager kernel of it still runs) and never during a capture. The
 * handle is created at the first call, or at graph_capture_begin when
 * the capture records gradients (grad mode on: a training step, the only
 * capture that runs cuDNN); a failed cudnnCreate is not retried. Workspace
 * (cuDNN's own plus the accumulators) is scratch from the engine's pool
 * per call, like the tensor-core backward's (during a capture the
 * graph's pool keeps it for the replays).
 * A key cuDNN refuses is remembered as refused, with the failing call and
 * cudnnGetLastErrorString, and runs on the tensor-core kernels; nothing is
 * printed on the hot path (OJAS_CUDA_ATTN_CUDNN=verbose prints each build
 * and refusal once; OJAS_CUDA_ATTN_CUDNN=0 turns the path off). */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#if OJAS_HAVE_CUDNN
#include <cudnn.h>
#endif

/* OJAS_CUDA_ATTN_CUDNN: 0/off/false off, 1/on/true (or unset) on, verbose
 * (print each plan built or refused), deterministic (the backward graph
 * without the dQ accumulator, which cuDNN serves with a dP workspace: for
 * measuring whether it is reproducible and fast enough for EXACT). Any
 * other value is named on stderr once and leaves the path on. Read once
 * per process. */
static int cudnn_mode(void) {
    static int mode = -1; /* 0 off, 1 on, 2 verbose, 3 deterministic */
    if (mode < 0) {
        const char *e = getenv("OJAS_CUDA_ATTN_CUDNN");
        if (e == NULL || e[0] == '\0' || !strcmp(e, "1") || !strcmp(e, "on") || !strcmp(e, "true"))
            mode = 1;
        else if (!strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "false"))
            mode = 0;
        else if (!strcmp(e, "verbose"))
            mode = 2;
        else if (!strcmp(e, "deterministic"))
            mode = 3;
        else {
            fprintf(stderr,
                    "ojas: OJAS_CUDA_ATTN_CUDNN=%s is not one of 0, off, false, 1, on, true, "
                    "verbose, deterministic: cuDNN attention stays on\n",
                    e);
            mode = 1;
        }
    }
    return mode;
}

/* ---------------------------------------------------------------- plan cache */

#define CD_MAXDESC 96

typedef struct cd_key {
    /* det (EXACT, or OJAS_CUDA_ATTN_CUDNN=deterministic): engines cuDNN
     * notes as nondeterministic are skipped, and the backward writes dQ
     * straight from the dS K product (no atomic accumulator) */
    int bwd, dt, causal, det;
    int64_t B, H, Hkv, T, S, D;
    double scale;
    int64_t st[9][3]; /* strides of q k v o (do dq dk dv) and lse-less tensors, dims 0..2 */
} cd_key;

/* Keys cached per engine (built plans and refusals): a training model
 * uses one forward and one backward key per attention shape. */
#define CD_MAX_PLANS 16

typedef struct oj_cuda_cudnn_plan {
    cd_key key;
    int pins; /* live CUDA graphs that executed it (oj_cuda_graph_pin) */
    bool ok; /* built; else refused (why) */
    char why[320];
#if OJAS_HAVE_CUDNN
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t keep[CD_MAXDESC]; /* every descriptor of the graph */
    int nkeep;
#endif
    int64_t ws;    /* cuDNN's workspace bytes */
    int64_t extra; /* the graph's own workspace tensors (bwd accumulators) */
    float scale_f, neg_inf, one;
    struct oj_cuda_cudnn_plan *next; /* most recently used first */
} cd_plan;

struct oj_cuda_cudnn {
#if OJAS_HAVE_CUDNN
    cudnnHandle_t handle;
    bool handle_ready;
    bool create_failed; /* cudnnCreate failed once: not tried again */
#endif
    cd_plan *plans; /* most recently used first */
    int64_t nplans;
    const char *impl[2]; /* last forward / backward implementation */
    char why[2][320];    /* why the last forward / backward did not run cuDNN */
};

static oj_cuda_cudnn *cd_state(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->cudnn == NULL) s->cudnn = (oj_cuda_cudnn *)calloc(1, sizeof *s->cudnn);
    return s->cudnn;
}

/* Record the implementation of the current call (impl NULL: unchanged)
 * and why cuDNN did not run it (why NULL: unchanged, "" when it did). */
void oj_cuda_attention_note(oj_engine *eng, bool backward, const char *impl, const char *why) {
    oj_cuda_cudnn *c = cd_state(eng);
    if (c == NULL) return;
    if (impl) c->impl[backward] = impl;
    if (why) snprintf(c->why[backward], sizeof c->why[backward], "%s", why);
}

const char *oj_cuda_attention_impl(oj_engine *eng, bool backward, char *why, size_t n) {
    oj_cuda_cudnn *c = cd_state(eng);
    if (why && n) snprintf(why, n, "%s", c ? c->why[backward] : "out of host memory");
    return c && c->impl[backward] ? c->impl[backward] : "none";
}

static void cd_plan_free(cd_plan *p) {
#if OJAS_HAVE_CUDNN
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->keep[i]);
#endif
    free(p);
}

void oj_cuda_cudnn_pin(struct oj_cuda_cudnn_plan *p) { p->pins++; }

void oj_cuda_cudnn_unpin(struct oj_cuda_cudnn_plan *p) {
    assert(p->pins > 0);
    p->pins--;
}

void oj_cuda_attention_cudnn_cache(oj_engine *eng, int64_t *plans, int64_t *pinned,
                                   bool *handle) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    oj_cuda_cudnn *c = s ? s->cudnn : NULL;
    *plans = c ? c->nplans : 0;
    *pinned = 0;
    for (cd_plan *p = c ? c->plans : NULL; p; p = p->next) *pinned += p->pins > 0;
#if OJAS_HAVE_CUDNN
    *handle = c != NULL && c->handle_ready;
#else
    *handle = false;
#endif
}

void oj_cuda_cudnn_close(oj_cuda_state *s) {
    oj_cuda_cudnn *c = s->cudnn;
    if (c == NULL) return;
    /* the engine's graphs are freed before its backend state */
    for (cd_plan *p = c->plans, *nx; p; p = nx) {
        nx = p->next;
        cd_plan_free(p);
    }
#if OJAS_HAVE_CUDNN
    if (c->handle_ready) cudnnDestroy(c->handle);
#endif
    free(c);
    s->cudnn = NULL;
}

#if !OJAS_HAVE_CUDNN

oj_status oj_cuda_cudnn_prepare(oj_engine *eng) {
    (void)eng;
    return OJ_OK;
}

bool oj_cuda_attention_cudnn_forward(oj_engine *eng, oj_status *status, oj_tensor *out,
                                     oj_tensor *lse, const oj_tensor *q, const oj_tensor *k,
                                     const oj_tensor *v, bool is_causal, double scale) {
    (void)out, (void)lse, (void)q, (void)k, (void)v, (void)is_causal, (void)scale;
    *status = OJ_OK;
    if (cudnn_mode() != 0) oj_cuda_attention_note(eng, false, NULL, "cuDNN not built in");
    return false;
}

bool oj_cuda_attention_cudnn_backward(oj_engine *eng, oj_status *status, oj_tensor *dq,
                                      oj_tensor *dk, oj_tensor *dv, const oj_tensor *dout,
                                      const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                      const oj_tensor *out, const oj_tensor *lse, bool is_causal,
                                      double scale) {
    (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse;
    (void)is_causal, (void)scale;
    *status = OJ_OK;
    if (cudnn_mode() != 0) oj_cuda_attention_note(eng, true, NULL, "cuDNN not built in");
    return false;
}

#else /* OJAS_HAVE_CUDNN */

/* ---------------------------------------------------------------- graph builder */

enum {
    U_Q = 1,
    U_K,
    U_V,
    U_O,
    U_STATS,
    U_SCALE,
    U_NEGINF,
    U_DO,
    U_DQ,
    U_DK,
    U_DV,
    U_ONE,
    U_SOFTSUM,
    U_DQACC,
    U_VIRT = 100
};

typedef struct {
    cd_plan *p;
    bool bad;
    int64_t next_uid;
} cd_build;

/* Record the first failure of call `what` with cuDNN's last error string. */
static void cd_fail(cd_build *b, const char *what, cudnnStatus_t st) {
    if (b->bad) return;
    b->bad = true;
    char msg[256] = "";
    cudnnGetLastErrorString(msg, sizeof msg);
    snprintf(b->p->why, sizeof b->p->why, "%s: %s%s%s", what, cudnnGetErrorString(st),
             msg[0] ? ": " : "", msg);
}

static cudnnBackendDescriptor_t cd_new(cd_build *b, cudnnBackendDescriptorType_t type,
                                       const char *what) {
    if (b->bad) return NULL;
    if (b->p->nkeep >= CD_MAXDESC) {
        b->bad = true;
        snprintf(b->p->why, sizeof b->p->why, "%s: more than %d descriptors", what, CD_MAXDESC);
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        cd_fail(b, what, st);
        return NULL;
    }
    b->p->keep[b->p->nkeep++] = d;
    return d;
}

static void cd_set(cd_build *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t n, const void *val, const char *what) {
    if (b->bad || d == NULL) return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, val);
    if (st != CUDNN_STATUS_SUCCESS) cd_fail(b, what, st);
}

static void cd_finalize(cd_build *b, cudnnBackendDescriptor_t d, const char *what) {
    if (b->bad || d == NULL) return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) cd_fail(b, what, st);
}

/* A rank-4 tensor: uid 0 takes the next virtual uid. */
static cudnnBackendDescriptor_t cd_tensor(cd_build *b, int64_t uid, cudnnDataType_t dt,
                                          const int64_t dim[4], const int64_t stride[4], bool virt,
                                          bool byval, const char *what) {
    cudnnBackendDescriptor_t t = cd_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    if (uid == 0) uid = b->next_uid++;
    int64_t align = 16;
    cd_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
    cd_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, what);
    cd_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, what);
    cd_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    cd_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    if (virt) cd_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, what);
    if (byval) cd_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval, what);
    cd_finalize(b, t, what);
    return t;
}

/* A virtual f32 (or dt) tensor [a, b, c, d] packed row-major. */
static cudnnBackendDescriptor_t cd_virt(cd_build *b, cudnnDataType_t dt, int64_t d0, int64_t d1,
                                        int64_t d2, int64_t d3, const char *what) {
    int64_t dim[4] = {d0, d1, d2, d3}, st[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    return cd_tensor(b, 0, dt, dim, st, true, false, what);
}

/* An operation descriptor of type type whose attributes attr[0..n) are the
 * descriptors d[0..n), a NULL one left unset; appended to ops once finalized. */
static void cd_op(cd_build *b, cudnnBackendDescriptor_t *ops, int *nops,
                  cudnnBackendDescriptorType_t type, int n, const cudnnBackendAttributeName_t *attr,
                  const cudnnBackendDescriptor_t *d, const char *what) {
    cudnnBackendDescriptor_t op = cd_new(b, type, what);
    for (int i = 0; i < n; i++)
        if (d[i]) cd_set(b, op, attr[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[i], what);
    cd_finalize(b, op, what);
    if (!b->bad) ops[(*nops)++] = op;
}

/* y = mode(x [, x2 [, t]]) with compute type prec (axis >= 0: GEN_INDEX). */
static void cd_pw(cd_build *b, cudnnBackendDescriptor_t *ops, int *nops, cudnnPointwiseMode_t mode,
                  cudnnDataType_t prec, int64_t axis, cudnnBackendDescriptor_t x,
                  cudnnBackendDescriptor_t x2, cudnnBackendDescriptor_t t,
                  cudnnBackendDescriptor_t y, const char *what) {
    cudnnBackendDescriptor_t pw = cd_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    cd_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    cd_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    if (axis >= 0) cd_set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    cd_finalize(b, pw, what);
    const cudnnBackendAttributeName_t attr[5] = {
        CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
        CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
        CUDNN_ATTR_OPERATION_POINTWISE_YDESC};
    const cudnnBackendDescriptor_t d[5] = {pw, x, x2, t, y};
    cd_op(b, ops, nops, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 5, attr, d, what);
}

/* c = a b (batched over dims 0, 1; f32 compute). */
static void cd_mm(cd_build *b, cudnnBackendDescriptor_t *ops, int *nops, cudnnBackendDescriptor_t a,
                  cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t c, const char *what) {
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = cd_new(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    cd_set(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, what);
    cd_finalize(b, mm, what);
    const cudnnBackendAttributeName_t attr[4] = {
        CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
        CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
    const cudnnBackendDescriptor_t d[4] = {a, bb, c, mm};
    cd_op(b, ops, nops, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, attr, d, what);
}

/* y = reduce(x) over the dims where y has extent 1 (f32 compute). */
static void cd_red(cd_build *b, cudnnBackendDescriptor_t *ops, int *nops,
                   cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t y, const char *what) {
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = cd_new(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    cd_set(b, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
           what);
    cd_set(b, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, what);
    cd_finalize(b, rd, what);
    const cudnnBackendAttributeName_t attr[3] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                                 CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                                 CUDNN_ATTR_OPERATION_REDUCTION_DESC};
    const cudnnBackendDescriptor_t d[3] = {x, y, rd};
    cd_op(b, ops, nops, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, attr, d, what);
}

/* y = x read through y's dims and strides (a transposed view of a virtual tensor). */
static void cd_reshape(cd_build *b, cudnnBackendDescriptor_t *ops, int *nops,
                       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, const char *what) {
    const cudnnBackendAttributeName_t attr[2] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
                                                 CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    const cudnnBackendDescriptor_t d[2] = {x, y};
    cd_op(b, ops, nops, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, attr, d, what);
}

/* The causal mask on scores s [B,H,T,S] (f32): row >= col ? s : -inf. */
static cudnnBackendDescriptor_t cd_causal(cd_build *b, cudnnBackendDescriptor_t *ops, int *nops,
                                          cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t ninf,
                                          const cd_key *k) {
    const char *w = "causal mask";
    cudnnBackendDescriptor_t row = cd_virt(b, CUDNN_DATA_INT32, k->B, k->H, k->T, k->S, w);
    cudnnBackendDescriptor_t col = cd_virt(b, CUDNN_DATA_INT32, k->B, k->H, k->T, k->S, w);
    cudnnBackendDescriptor_t keep = cd_virt(b, CUDNN_DATA_BOOLEAN, k->B, k->H, k->T, k->S, w);
    cudnnBackendDescriptor_t y = cd_virt(b, CUDNN_DATA_FLOAT, k->B, k->H, k->T, k->S, w);
    cd_pw(b, ops, nops, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s, NULL, NULL, row,
          "causal mask (row index)");
    cd_pw(b, ops, nops, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s, NULL, NULL, col,
          "causal mask (column index)");
    cd_pw(b, ops, nops, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep,
          "causal mask (row >= column)");
    cd_pw(b, ops, nops, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s, ninf, keep, y,
          "causal mask (select)");
    return y;
}

/* User tensor [B, h, t, d] of dtype dt with strides st (dims 0..2) and 1. */
static cudnnBackendDescriptor_t cd_user(cd_build *b, int64_t uid, cudnnDataType_t dt, int64_t h,
                                        int64_t t, int64_t d, const int64_t st[3], bool transpose,
                                        const char *what) {
    int64_t B = b->p->key.B;
    int64_t dim[4] = {B, h, t, d}, str[4] = {st[0], st[1], st[2], 1};
    if (transpose) { /* [B, h, d, t] */
        dim[2] = d, dim[3] = t;
        str[2] = 1, str[3] = st[2];
    }
    return cd_tensor(b, uid, dt, dim, str, false, false, what);
}

static cudnnBackendDescriptor_t cd_scalar(cd_build *b, int64_t uid, const char *what) {
    int64_t one[4] = {1, 1, 1, 1};
    return cd_tensor(b, uid, CUDNN_DATA_FLOAT, one, one, false, true, what);
}

/* Stats-shaped [B, H, T, 1] f32: uid 0 virtual. */
static cudnnBackendDescriptor_t cd_rowvec(cd_build *b, int64_t uid, const char *what) {
    const cd_key *k = &b->p->key;
    int64_t dim[4] = {k->B, k->H, k->T, 1}, st[4] = {k->H * k->T, k->T, 1, 1};
    return cd_tensor(b, uid, CUDNN_DATA_FLOAT, dim, st, uid == 0, false, what);
}

/* The forward graph's operations into ops; returns their count. */
static int cd_forward_ops(cd_build *b, cudnnBackendDescriptor_t *ops) {
    const cd_key *k = &b->p->key;
    cudnnDataType_t io = k->dt == OJ_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    int n = 0;
    cudnnBackendDescriptor_t q = cd_user(b, U_Q, io, k->H, k->T, k->D, k->st[0], false, "tensor q");
    cudnnBackendDescriptor_t kt =
        cd_user(b, U_K, io, k->Hkv, k->S, k->D, k->st[1], true, "tensor k^T");
    cudnnBackendDescriptor_t v =
        cd_user(b, U_V, io, k->Hkv, k->S, k->D, k->st[2], false, "tensor v");
    cudnnBackendDescriptor_t o =
        cd_user(b, U_O, io, k->H, k->T, k->D, k->st[3], false, "tensor out");
    cudnnBackendDescriptor_t stats = cd_rowvec(b, U_STATS, "tensor stats");
    cudnnBackendDescriptor_t scale = cd_scalar(b, U_SCALE, "scalar scale");
    cudnnBackendDescriptor_t s1 = cd_virt(b, f, k->B, k->H, k->T, k->S, "scores");
    cd_mm(b, ops, &n, q, kt, s1, "matmul q k^T");
    cudnnBackendDescriptor_t s2 = cd_virt(b, f, k->B, k->H, k->T, k->S, "scaled scores");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_MUL, f, -1, s1, scale, NULL, s2, "scale");
    if (k->causal) s2 = cd_causal(b, ops, &n, s2, cd_scalar(b, U_NEGINF, "scalar -inf"), k);
    cudnnBackendDescriptor_t m = cd_rowvec(b, 0, "row max");
    cd_red(b, ops, &n, CUDNN_REDUCE_TENSOR_MAX, s2, m, "softmax (row max)");
    cudnnBackendDescriptor_t sub = cd_virt(b, f, k->B, k->H, k->T, k->S, "s - max");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_SUB, f, -1, s2, m, NULL, sub, "softmax (s - max)");
    cudnnBackendDescriptor_t e = cd_virt(b, f, k->B, k->H, k->T, k->S, "exp");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_EXP, f, -1, sub, NULL, NULL, e, "softmax (exp)");
    cudnnBackendDescriptor_t z = cd_rowvec(b, 0, "row sum");
    cd_red(b, ops, &n, CUDNN_REDUCE_TENSOR_ADD, e, z, "softmax (row sum)");
    cudnnBackendDescriptor_t lz = cd_rowvec(b, 0, "log row sum");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_LOG, f, -1, z, NULL, NULL, lz, "softmax (log sum)");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_ADD, f, -1, m, lz, NULL, stats, "softmax (stats)");
    cudnnBackendDescriptor_t p = cd_virt(b, io, k->B, k->H, k->T, k->S, "probabilities");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_DIV, f, -1, e, z, NULL, p, "softmax (normalise)");
    cd_mm(b, ops, &n, p, v, o, "matmul p v");
    return n;
}

/* dK or dV [B, Hkv, S, D] = a^T b: a matmul into the group's H heads and,
 * for GQA, a sum over each group. */
static void cd_grad_kv(cd_build *b, cudnnBackendDescriptor_t *ops, int *n,
                       cudnnBackendDescriptor_t aT, cudnnBackendDescriptor_t x,
                       cudnnBackendDescriptor_t out, cudnnDataType_t io, const char *what) {
    const cd_key *k = &b->p->key;
    if (k->H == k->Hkv) {
        cd_mm(b, ops, n, aT, x, out, what);
        return;
    }
    cudnnBackendDescriptor_t full = cd_virt(b, io, k->B, k->H, k->S, k->D, what);
    cd_mm(b, ops, n, aT, x, full, what);
    cd_red(b, ops, n, CUDNN_REDUCE_TENSOR_ADD, full, out, what);
}

/* The backward graph's operations. */
static int cd_backward_ops(cd_build *b, cudnnBackendDescriptor_t *ops) {
    const cd_key *k = &b->p->key;
    cudnnDataType_t io = k->dt == OJ_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    int n = 0;
    int64_t B = k->B, H = k->H, T = k->T, S = k->S, D = k->D;
    cudnnBackendDescriptor_t q = cd_user(b, U_Q, io, H, T, D, k->st[0], false, "tensor q");
    cudnnBackendDescriptor_t kt = cd_user(b, U_K, io, k->Hkv, S, D, k->st[1], true, "tensor k^T");
    cudnnBackendDescriptor_t vt = cd_user(b, U_V, io, k->Hkv, S, D, k->st[2], true, "tensor v^T");
    cudnnBackendDescriptor_t o = cd_user(b, U_O, io, H, T, D, k->st[3], false, "tensor out");
    cudnnBackendDescriptor_t dO = cd_user(b, U_DO, io, H, T, D, k->st[4], false, "tensor dout");
    cudnnBackendDescriptor_t dq = cd_user(b, U_DQ, io, H, T, D, k->st[5], false, "tensor dq");
    cudnnBackendDescriptor_t dk = cd_user(b, U_DK, io, k->Hkv, S, D, k->st[6], false, "tensor dk");
    cudnnBackendDescriptor_t dv = cd_user(b, U_DV, io, k->Hkv, S, D, k->st[7], false, "tensor dv");
    cudnnBackendDescriptor_t stats = cd_rowvec(b, U_STATS, "tensor stats");
    cudnnBackendDescriptor_t scale = cd_scalar(b, U_SCALE, "scalar scale");
    cudnnBackendDescriptor_t one = cd_scalar(b, U_ONE, "scalar one");

    /* softmax_sum = rowsum(dO * O), f32 in the workspace */
    cudnnBackendDescriptor_t dOo = cd_virt(b, f, B, H, T, D, "dout * out");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_MUL, f, -1, dO, o, NULL, dOo, "dout * out");
    cudnnBackendDescriptor_t rs = cd_rowvec(b, 0, "rowsum(dout * out)");
    cd_red(b, ops, &n, CUDNN_REDUCE_TENSOR_ADD, dOo, rs, "rowsum(dout * out)");
    cudnnBackendDescriptor_t ssum = cd_rowvec(b, U_SOFTSUM, "softmax_sum");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_MUL, f, -1, rs, one, NULL, ssum, "softmax_sum");

    /* P = exp(scale q k^T - stats), masked */
    cudnnBackendDescriptor_t s1 = cd_virt(b, f, B, H, T, S, "scores");
    cd_mm(b, ops, &n, q, kt, s1, "matmul q k^T");
    cudnnBackendDescriptor_t s2 = cd_virt(b, f, B, H, T, S, "scaled scores");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_MUL, f, -1, s1, scale, NULL, s2, "scale");
    cudnnBackendDescriptor_t s3 = cd_virt(b, f, B, H, T, S, "s - stats");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_SUB, f, -1, s2, stats, NULL, s3, "s - stats");
    if (k->causal) s3 = cd_causal(b, ops, &n, s3, cd_scalar(b, U_NEGINF, "scalar -inf"), k);
    cudnnBackendDescriptor_t p = cd_virt(b, f, B, H, T, S, "probabilities");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_EXP, f, -1, s3, NULL, NULL, p, "exp");

    /* dV = P^T dO */
    int64_t tdim[4] = {B, H, S, T}, tst[4] = {H * T * S, T * S, 1, S};
    cudnnBackendDescriptor_t pT = cd_tensor(b, 0, io, tdim, tst, true, false, "p^T");
    cd_reshape(b, ops, &n, p, pT, "reshape p^T");
    cd_grad_kv(b, ops, &n, pT, dO, dv, io, "matmul p^T dout");

    /* dS = P (dO V^T - softmax_sum) scale */
    cudnnBackendDescriptor_t dp = cd_virt(b, f, B, H, T, S, "dp");
    cd_mm(b, ops, &n, dO, vt, dp, "matmul dout v^T");
    cudnnBackendDescriptor_t d1 = cd_virt(b, f, B, H, T, S, "dp - softmax_sum");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_SUB, f, -1, dp, ssum, NULL, d1, "dp - softmax_sum");
    cudnnBackendDescriptor_t d2 = cd_virt(b, f, B, H, T, S, "p (dp - softmax_sum)");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_MUL, f, -1, d1, p, NULL, d2, "p (dp - softmax_sum)");
    cudnnBackendDescriptor_t ds = cd_virt(b, f, B, H, T, S, "ds");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_MUL, f, -1, d2, scale, NULL, ds, "ds scale");

    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dsT = cd_tensor(b, 0, io, tdim, tst, true, false, "ds^T");
    cd_reshape(b, ops, &n, ds, dsT, "reshape ds^T");
    cd_grad_kv(b, ops, &n, dsT, q, dk, io, "matmul ds^T q");

    /* dQ = dS K through the f32 accumulator in the workspace (det: straight
     * into dq) */
    int64_t kdim[4] = {B, k->Hkv, S, D}, kst[4] = {k->st[1][0], k->st[1][1], k->st[1][2], 1};
    cudnnBackendDescriptor_t kk = cd_tensor(b, 0, io, kdim, kst, true, false, "k");
    cd_reshape(b, ops, &n, kt, kk, "reshape k");
    if (k->det) {
        cd_mm(b, ops, &n, ds, kk, dq, "matmul ds k");
        b->p->extra = B * H * T * 4;
        return n;
    }
    int64_t adim[4] = {B, H, T, D}, ast[4] = {H * T * D, T * D, D, 1};
    cudnnBackendDescriptor_t acc =
        cd_tensor(b, U_DQACC, f, adim, ast, false, false, "dq accumulator");
    cd_mm(b, ops, &n, ds, kk, acc, "matmul ds k");
    cd_pw(b, ops, &n, CUDNN_POINTWISE_IDENTITY, f, -1, acc, NULL, NULL, dq, "dq from accumulator");
    b->p->extra = (B * H * T * D + B * H * T) * 4;
    return n;
}

/* ---------------------------------------------------------------- plans */

static const char *cd_verbose_tag(const cd_key *k, char *buf, size_t n) {
    snprintf(buf, n, "%s B %lld H %lld/%lld T %lld S %lld D %lld %s%s",
             k->bwd ? (k->det ? "backward (deterministic)" : "backward")
                    : (k->det ? "forward (deterministic)" : "forward"),
             (long long)k->B, (long long)k->H, (long long)k->Hkv, (long long)k->T, (long long)k->S,
             (long long)k->D, k->dt == OJ_BF16 ? "bf16" : "f16", k->causal ? " causal" : "");
    return buf;
}

/* Does cuDNN leave the engine of config cfg unnoted as nondeterministic?
 * (false when the notes cannot be read) */
static bool cd_deterministic(cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t eng = NULL;
    int64_t n = 0;
    bool ok =
        cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &eng) == CUDNN_STATUS_SUCCESS;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 4];
    int64_t nn = 0;
    ok = ok && cudnnBackendGetAttribute(
                   eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                   (int64_t)(sizeof notes / sizeof notes[0]), &nn, notes) == CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; ok && i < nn; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) ok = false;
    if (eng) cudnnBackendDestroyDescriptor(eng);
    return ok;
}

/* Build p's plan from p->key (p->ok, or p->why). */
static void cd_build_plan(oj_cuda_cudnn *c, cd_plan *p) {
    cd_build b = {p, false, U_VIRT};
    cudnnBackendDescriptor_t ops[64];
    int nops = p->key.bwd ? cd_backward_ops(&b, ops) : cd_forward_ops(&b, ops);
    cudnnBackendDescriptor_t g =
        cd_new(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    cd_set(&b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops,
           "operation graph");
    cd_set(&b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->handle,
           "operation graph");
    cd_finalize(&b, g, "operation graph");
    cudnnBackendDescriptor_t h = cd_new(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cd_set(&b, h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g,
           "heuristics");
    cd_set(&b, h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
    cd_finalize(&b, h, "heuristics");
    int64_t count = 0;
    if (!b.bad) {
        cudnnStatus_t st = cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
        if (st != CUDNN_STATUS_SUCCESS)
            cd_fail(&b, "heuristics (result count)", st);
        else if (count <= 0) {
            b.bad = true;
            snprintf(p->why, sizeof p->why, "heuristics: no engine supports this graph");
        }
    }
    enum { MAXCFG = 8 };
    if (count > MAXCFG) count = MAXCFG;
    cudnnBackendDescriptor_t cfg[MAXCFG];
    for (int64_t i = 0; i < count && !b.bad; i++)
        cfg[i] = cd_new(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (!b.bad) {
        int64_t got = 0;
        cudnnStatus_t st = cudnnBackendGetAttribute(
            h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
        if (st != CUDNN_STATUS_SUCCESS) cd_fail(&b, "heuristics (results)", st);
        count = got < count ? got : count;
    }
    /* the first config whose plan finalizes (det: and that cuDNN does not
     * note as nondeterministic) */
    char first[320] = "";
    int skipped = 0;
    for (int64_t i = 0; i < count && !b.bad; i++) {
        if (p->key.det && !cd_deterministic(cfg[i])) {
            skipped++;
            continue;
        }
        cudnnBackendDescriptor_t plan = NULL;
        cudnnStatus_t st =
            cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                          1, &c->handle);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(plan);
        int64_t ws = 0, nws = 0;
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                          CUDNN_TYPE_INT64, 1, &nws, &ws);
        if (st == CUDNN_STATUS_SUCCESS) {
            p->plan = plan;
            p->ws = ws;
            p->ok = true;
            return;
        }
        if (first[0] == '\0') {
            char msg[256] = "";
            cudnnGetLastErrorString(msg, sizeof msg);
            snprintf(first, sizeof first, "execution plan (%lld engine configs tried): %s%s%s",
                     (long long)count, cudnnGetErrorString(st), msg[0] ? ": " : "", msg);
        }
        if (plan) cudnnBackendDestroyDescriptor(plan);
    }
    if (!b.bad)
        snprintf(p->why, sizeof p->why, "%s%s", first[0] ? first : "no execution plan",
                 skipped ? " (nondeterministic engine configs skipped)" : "");
}

/* The cached entry for key, moved to the front (most recently used), or
 * NULL when there is none. */
static cd_plan *cd_lookup(oj_cuda_cudnn *c, const cd_key *key) {
    for (cd_plan *p = c->plans, *prev = NULL; p; prev = p, p = p->next) {
        if (memcmp(&p->key, key, sizeof *key) != 0) continue;
        if (prev) {
            prev->next = p->next;
            p->next = c->plans;
            c->plans = p;
        }
        return p;
    }
    return NULL;
}

/* Destroy least recently used entries no graph pins, other than keep
 * (the entry being returned), until at most CD_MAX_PLANS remain. Not
 * during a capture (a synchronize there would break it): the cache may
 * then exceed the cap until the next build. */
static void cd_evict(oj_engine *eng, oj_cuda_cudnn *c, const cd_plan *keep) {
    if (oj_cuda_capturing(eng)) return;
    bool drained = false;
    while (c->nplans > CD_MAX_PLANS) {
        cd_plan **victim = NULL; /* the link to the last unpinned entry */
        for (cd_plan **l = &c->plans; *l; l = &(*l)->next)
            if ((*l)->pins == 0 && *l != keep) victim = l;
        if (victim == NULL) return; /* every entry pinned by a live graph */
        cd_plan *p = *victim;
#if OJAS_HAVE_CUDNN
        if (p->plan && !drained) {
            /* an eager call of the plan may still run on the stream */
            cudaStreamSynchronize(oj_cuda_state_of(eng)->stream);
            drained = true;
        }
#endif
        *victim = p->next;
        c->nplans--;
        cd_plan_free(p);
    }
}

/* The cached plan for key (built now if new; the least recently used
 * entries evicted beyond CD_MAX_PLANS), or NULL (out of host memory). */
static cd_plan *cd_plan_for(oj_engine *eng, oj_cuda_cudnn *c, const cd_key *key) {
    cd_plan *p = cd_lookup(c, key);
    if (p) return p;
    p = (cd_plan *)calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->key = *key;
    p->scale_f = (float)key->scale;
    p->neg_inf = -INFINITY;
    p->one = 1.0f;
    cd_build_plan(c, p);
    p->next = c->plans;
    c->plans = p;
    c->nplans++;
    cd_evict(eng, c, p);
    if (cudnn_mode() >= 2) {
        char tag[160];
        if (p->ok)
            fprintf(stderr,
                    "ojas: cuDNN %zu attention %s: plan built (workspace %lld + %lld bytes)\n",
                    cudnnGetVersion(), cd_verbose_tag(key, tag, sizeof tag), (long long)p->ws,
                    (long long)p->extra);
        else
            fprintf(stderr, "ojas: cuDNN attention %s: refused, tensor-core kernels run: %s\n",
                    cd_verbose_tag(key, tag, sizeof tag), p->why);
    }
    return p;
}

oj_status oj_cuda_cudnn_prepare(oj_engine *eng) {
    if (cudnn_mode() == 0) return OJ_OK;
    oj_cuda_cudnn *c = cd_state(eng);
    if (c == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "cuDNN attention: out of host memory");
    if (c->handle_ready || c->create_failed) return OJ_OK;
    cudnnStatus_t st = cudnnCreate(&c->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        /* not an error of the engine: attention stays on the tensor-core
         * kernels, and later calls do not try again */
        c->create_failed = true;
        snprintf(c->why[0], sizeof c->why[0], "cudnnCreate: %s", cudnnGetErrorString(st));
        return OJ_OK;
    }
    cudnnSetStream(c->handle, oj_cuda_state_of(eng)->stream);
    c->handle_ready = true;
    return OJ_OK;
}

static void key_strides(cd_key *k, int i, const oj_tensor *t) {
    for (int d = 0; d < 3; d++) k->st[i][d] = t->stride[d];
}

/* Fill key; false (why set) when the call is outside what this path serves. */
static bool cd_key_of(oj_engine *eng, cd_key *k, bool bwd, const oj_tensor *q, const oj_tensor *k_,
                      const oj_tensor *v, const oj_tensor *lse, bool causal, double scale,
                      const char **why) {
    memset(k, 0, sizeof *k);
    if (cudnn_mode() == 0) return (*why = "off (OJAS_CUDA_ATTN_CUDNN=0)"), false;
    if (q->shape[3] != 64 && q->shape[3] != 128) return (*why = "head dim not 64 or 128"), false;
    if (causal && q->shape[2] != k_->shape[2])
        return (*why = "causal with T != S (bottom-right) is not built"), false;
    if (lse != NULL && (lse->dtype != OJ_F32 || !oj_cuda_contig(lse)))
        return (*why = "lse is not contiguous f32"), false;
    if (cd_state(eng) == NULL) return (*why = "out of host memory"), false;
    if (oj_cuda_capturing(eng) && !cd_state(eng)->handle_ready)
        return (*why = "no cuDNN handle before the capture"), false;
    k->bwd = bwd;
    k->det = eng->numerics == OJ_NUMERICS_EXACT || cudnn_mode() == 3;
    k->dt = (int)q->dtype;
    k->causal = causal;
    k->B = q->shape[0];
    k->H = q->shape[1];
    k->T = q->shape[2];
    k->D = q->shape[3];
    k->Hkv = k_->shape[1];
    k->S = k_->shape[2];
    k->scale = scale;
    key_strides(k, 0, q);
    key_strides(k, 1, k_);
    key_strides(k, 2, v);
    return true;
}

/* The plan for key, building it (outside a capture: the handle first). */
static cd_plan *cd_ready(oj_engine *eng, const cd_key *key, const char **why) {
    oj_cuda_cudnn *c = cd_state(eng);
    if (c == NULL) return (*why = "out of host memory"), (cd_plan *)NULL;
    if (!c->handle_ready) {
        oj_cuda_cudnn_prepare(eng);
        if (!c->handle_ready) return (*why = "cudnnCreate failed"), (cd_plan *)NULL;
    }
    cd_plan *p = cd_plan_for(eng, c, key);
    if (p == NULL) return (*why = "out of host memory"), (cd_plan *)NULL;
    if (!p->ok) {
        *why = p->why;
        return NULL;
    }
    return p;
}

/* Execute p with the given uids/pointers and a workspace of p->ws + p->extra
 * bytes (extra: the accumulators at the start, cuDNN's after, 256-aligned).
 * False with *why when cuDNN refused the call (the plan is then marked
 * refused with that reason; nothing recorded on the engine), or with *st = OJ_ERR_CAPACITY recorded when the pool has no
 * room for the workspace. */
static bool cd_execute(oj_engine *eng, oj_status *st_out, cd_plan *p, int n, const int64_t *uids,
                       void **ptrs, const char **why, char *whybuf, size_t whyn) {
    /* a captured execution keeps the plan (its kernels) for the graph's life */
    if (oj_cuda_capturing(eng) && oj_cuda_graph_pin(eng, p) != OJ_OK) {
        *st_out = oj_last_status(eng);
        *why = "out of host memory";
        return false;
    }
    oj_storage *hold = NULL;
    size_t extra = ((size_t)p->extra + 255) & ~(size_t)255;
    char *ws =
        (char *)oj_cuda_scratch(eng, extra + (size_t)p->ws, "scaled_dot_product_attention", &hold);
    if (ws == NULL) {
        *st_out = oj_last_status(eng);
        *why = "no device memory for the workspace";
        return false;
    }
    int64_t u[16];
    void *d[16];
    memcpy(u, uids, (size_t)n * sizeof *u);
    memcpy(d, ptrs, (size_t)n * sizeof *d);
    if (p->key.bwd && p->key.det) {
        u[n] = U_SOFTSUM, d[n++] = ws;
    } else if (p->key.bwd) {
        u[n] = U_DQACC, d[n++] = ws;
        u[n] = U_SOFTSUM, d[n++] = ws + (size_t)(p->key.B * p->key.H * p->key.T * p->key.D) * 4;
    }
    void *cws = p->ws ? ws + extra : NULL;
    cudnnBackendDescriptor_t vp = NULL;
    const char *what = "variant pack";
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                      u);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, n, d);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                      &cws);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS) {
        what = "cudnnBackendExecute";
        st = cudnnBackendExecute(cd_state(eng)->handle, p->plan, vp);
    }
    if (vp) cudnnBackendDestroyDescriptor(vp);
    oj__storage_release(hold);
    if (st != CUDNN_STATUS_SUCCESS) {
        char msg[200] = "";
        cudnnGetLastErrorString(msg, sizeof msg);
        snprintf(whybuf, whyn, "%s: %s%s%s", what, cudnnGetErrorString(st), msg[0] ? ": " : "",
                 msg);
        *why = whybuf;
        /* remembered as refused: later calls of this key (and a forward's
         * backward, which follows the forward's plan) take the tensor-core
         * kernels instead of failing again or pairing with their output */
        p->ok = false;
        snprintf(p->why, sizeof p->why, "%s", whybuf);
        return false;
    }
    return true;
}

bool oj_cuda_attention_cudnn_forward(oj_engine *eng, oj_status *status, oj_tensor *out,
                                     oj_tensor *lse, const oj_tensor *q, const oj_tensor *k,
                                     const oj_tensor *v, bool is_causal, double scale) {
    *status = OJ_OK;
    const char *why = NULL;
    char buf[320];
    cd_key key;
    cd_plan *p = NULL;
    if (lse == NULL) {
        /* inference (a prefill): a new prompt length would build a plan */
        why = "no lse (an inference forward: cuDNN runs training forwards, whose shapes repeat)";
    } else if (cd_key_of(eng, &key, false, q, k, v, lse, is_causal, scale, &why)) {
        key_strides(&key, 3, out);
        p = cd_ready(eng, &key, &why);
    }
    bool ran = false;
    if (p) {
        int64_t uids[8] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF};
        void *ptrs[8] = {oj_cuda_ptr(q), oj_cuda_ptr(k), oj_cuda_ptr(v), oj_cuda_ptr(out),
                         oj_cuda_ptr(lse), &p->scale_f,  &p->neg_inf};
        ran = cd_execute(eng, status, p, key.causal ? 7 : 6, uids, ptrs, &why, buf, sizeof buf);
    }
    oj_cuda_attention_note(eng, false, ran ? "cudnn" : NULL, ran ? "" : why);
    return ran;
}

bool oj_cuda_attention_cudnn_backward(oj_engine *eng, oj_status *status, oj_tensor *dq,
                                      oj_tensor *dk, oj_tensor *dv, const oj_tensor *dout,
                                      const oj_tensor *q, const oj_tensor *k, const oj_tensor *v,
                                      const oj_tensor *out, const oj_tensor *lse, bool is_causal,
                                      double scale) {
    *status = OJ_OK;
    const char *why = NULL;
    char buf[320];
    cd_key key;
    cd_plan *p = NULL;
    if (dq == NULL || dk == NULL || dv == NULL) {
        why = "not every gradient is wanted";
    } else if (lse == NULL) {
        why = "no lse";
    } else if (cd_key_of(eng, &key, false, q, k, v, lse, is_causal, scale, &why)) {
        /* the backward follows the forward: cuDNN only when this key's
         * forward ran cuDNN (its plan exists and was built) */
        key_strides(&key, 3, out);
        cd_plan *f = cd_lookup(cd_state(eng), &key);
        if (f == NULL || !f->ok) {
            why = "the forward of these shapes did not run cuDNN (or its plan was evicted)";
        } else {
            key.bwd = 1;
            key_strides(&key, 4, dout);
            key_strides(&key, 5, dq);
            key_strides(&key, 6, dk);
            key_strides(&key, 7, dv);
            p = cd_ready(eng, &key, &why);
        }
    }
    bool ran = false;
    if (p) {
        int64_t uids[14] = {U_Q,  U_K,  U_V,  U_O,     U_STATS, U_DO,
                            U_DQ, U_DK, U_DV, U_SCALE, U_ONE,   U_NEGINF};
        void *ptrs[14] = {oj_cuda_ptr(q),   oj_cuda_ptr(k),    oj_cuda_ptr(v),  oj_cuda_ptr(out),
                          oj_cuda_ptr(lse), oj_cuda_ptr(dout), oj_cuda_ptr(dq), oj_cuda_ptr(dk),
                          oj_cuda_ptr(dv),  &p->scale_f,       &p->one,         &p->neg_inf};
        ran = cd_execute(eng, status, p, key.causal ? 12 : 11, uids, ptrs, &why, buf, sizeof buf);
    }
    oj_cuda_attention_note(eng, true, ran ? "cudnn" : NULL, ran ? "" : why);
    return ran;
}

#endif /* OJAS_HAVE_CUDNN */
