/* CUDA graphs: capture the work an engine issues on its stream into one
 * graph (cudaStreamBeginCapture in relaxed mode, so the caching allocator
 * may still call cudaMalloc), instantiate it, and replay it with one
 * cudaGraphLaunch. Core (src/core/graph.c) owns the memory side: every
 * block allocated during the capture comes from the graph's private pool,
 * so replays find the same addresses and nothing else ever uses them.
 *
 * Host read-backs cannot be recorded. Entries that would read status words
 * (an out-of-range index, a bad target) take words of the graph's own
 * region instead of the engine's shared ones (each check its own words,
 * so a later op never overwrites an earlier op's status) and record a
 * deferred check; after every replay the region is read back once and the
 * first failed check becomes the error the eager entry would have
 * reported. Anything else that reads back (norms, item, a synchronize) is
 * OJ_ERR_UNSUPPORTED during a capture (cuda_memory.cu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define GRAPH_WORDS 4096 /* status words per graph (32 KiB) */

typedef struct {
    int kind;        /* OJ_CUDA_CHECK_INDEX or OJ_CUDA_CHECK_TARGET */
    const char *op;  /* long-lived name */
    int64_t word;    /* first of its status words in the region */
    const char *idx; /* device address of the index / target tensor */
    int idt;         /* its dtype */
    int64_t V, ignore_index;
} graph_check;

struct oj_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    unsigned long long *words; /* device, GRAPH_WORDS */
    int64_t nwords;
    unsigned long long *host_words; /* graph_checks_defer's copy (nwords), made at first use */
    graph_check *checks;
    int nchecks, cap_checks;
    /* cuDNN plans the graph's nodes execute: kept until the graph is freed */
    struct oj_cuda_cudnn_plan **pins;
    int npins, cap_pins;
};

static void graph_free(oj_cuda_graph *g) {
    if (g == NULL) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    if (g->words) cudaFree(g->words);
    free(g->host_words);
    for (int i = 0; i < g->npins; i++) oj_cuda_cudnn_unpin(g->pins[i]);
    free(g->pins);
    free(g->checks);
    free(g);
}

oj_status oj_cuda_graph_pin(oj_engine *eng, struct oj_cuda_cudnn_plan *plan) {
    oj_cuda_graph *g = oj_cuda_state_of(eng)->capture;
    for (int i = 0; i < g->npins; i++)
        if (g->pins[i] == plan) return OJ_OK;
    if (g->npins == g->cap_pins) {
        int cap = g->cap_pins ? 2 * g->cap_pins : 8;
        struct oj_cuda_cudnn_plan **p = (struct oj_cuda_cudnn_plan **)realloc(
            g->pins, (size_t)cap * sizeof *p);
        if (p == NULL)
            return oj_set_error(eng, OJ_ERR_CAPACITY,
                                "scaled_dot_product_attention: out of host memory (graph capture)");
        g->pins = p;
        g->cap_pins = cap;
    }
    g->pins[g->npins++] = plan;
    oj_cuda_cudnn_pin(plan);
    return OJ_OK;
}

unsigned long long *oj_cuda_graph_flags(oj_engine *eng, int nwords, const char *op) {
    oj_cuda_graph *g = oj_cuda_state_of(eng)->capture;
    if (g->nwords + nwords > GRAPH_WORDS) {
        oj_set_error(eng, OJ_ERR_CAPACITY,
                     "%s: more than %d status words in one CUDA graph capture (too many checked "
                     "ops in one graph)",
                     op, GRAPH_WORDS);
        return NULL;
    }
    unsigned long long *w = g->words + g->nwords;
    g->nwords += nwords;
    return w;
}

oj_status oj_cuda_flags_defer(oj_engine *eng, int kind, const char *op, const oj_tensor *idx,
                              int64_t V, int64_t ignore_index) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    oj_cuda_graph *g = s->capture;
    if (g->nchecks == g->cap_checks) {
        int cap = g->cap_checks ? 2 * g->cap_checks : 64;
        graph_check *c = (graph_check *)realloc(g->checks, (size_t)cap * sizeof *c);
        if (c == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
        g->checks = c;
        g->cap_checks = cap;
    }
    g->checks[g->nchecks++] = (graph_check){.kind = kind,
                                            .op = op,
                                            .word = (int64_t)(s->flags - g->words),
                                            .idx = oj_cuda_ptr(idx),
                                            .idt = (int)idx->dtype,
                                            .V = V,
                                            .ignore_index = ignore_index};
    return OJ_OK;
}

oj_status oj_cuda_bad_index(oj_engine *eng, int kind, const char *op, const char *idx, int idt,
                            unsigned long long pos, int64_t V, int64_t ignore_index) {
    size_t is = idt == OJ_I32 ? 4 : 8;
    unsigned char buf[8] = {0};
    if (oj_cuda_d2h(eng, buf, idx + (size_t)pos * is, is, op) != OJ_OK)
        return oj_last_status(eng);
    long long v;
    if (idt == OJ_I32) {
        int32_t w;
        memcpy(&w, buf, 4);
        v = w;
    } else {
        memcpy(&v, buf, 8);
    }
    if (kind == OJ_CUDA_CHECK_TARGET)
        return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                            "%s: target %lld at row %llu is out of range for %lld classes "
                            "(expected 0 <= target < %lld, or ignore_index %lld)",
                            op, v, pos, (long long)V, (long long)V, (long long)ignore_index);
    return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                        "%s: index %lld at position %llu is out of range for a table of %lld "
                        "rows (expected 0 <= index < %lld)",
                        op, v, pos, (long long)V, (long long)V);
}

oj_status oj_cuda_graph_begin(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->capture)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "graph_capture_begin: a capture is already in progress");
    if (oj_cuda_begin(eng, "graph_capture_begin") != OJ_OK) return oj_last_status(eng);
    /* everything issued so far is done, so no capture races a pending
     * kernel, and the cuBLAS handle exists before the capture */
    if (oj_cuda_blas(eng, "graph_capture_begin") == NULL) return oj_last_status(eng);
    oj_cuda_gemm_tune_prepare(s); /* its stream, should the handle predate OJAS_CUDA_GEMM_TUNE */
    /* the cuDNN handle only for a capture that records gradients (a
     * training step: cuDNN runs forwards that keep lse); a decode or
     * prefill capture never runs cuDNN */
    if (eng->grad_enabled && oj_cuda_cudnn_prepare(eng) != OJ_OK) return oj_last_status(eng);
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, "graph_capture_begin (synchronize)");
    oj_cuda_graph *g = (oj_cuda_graph *)calloc(1, sizeof *g);
    if (g == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "graph_capture_begin: out of host memory");
    e = cudaMalloc((void **)&g->words, GRAPH_WORDS * sizeof *g->words);
    if (e == cudaSuccess) e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        cudaGetLastError();
        graph_free(g);
        return oj_cuda_fail(eng, e, "graph_capture_begin");
    }
    s->capture = g;
    return OJ_OK;
}

oj_status oj_cuda_graph_end(oj_engine *eng, void **out) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    *out = NULL;
    oj_cuda_graph *g = s->capture;
    if (g == NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "graph_capture_end: no capture in progress");
    s->capture = NULL;
    s->flags = s->flags_base;
    cudaSetDevice(s->ordinal);
    cudaError_t e = cudaStreamEndCapture(s->stream, &g->graph);
    oj_cuda_gemm_tune_trim(s); /* the tuner's buffers kept through the capture */
    if (e == cudaSuccess && g->graph == NULL) e = cudaErrorStreamCaptureInvalidated;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&g->exec, g->graph, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        graph_free(g);
        return oj_set_error(eng, OJ_ERR_DEVICE,
                            "graph_capture_end: the capture failed: %s (%s); was something "
                            "issued on another stream or synchronised during it?",
                            cudaGetErrorString(e), cudaGetErrorName(e));
    }
    *out = g;
    return OJ_OK;
}

void oj_cuda_graph_abort(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    oj_cuda_graph *g = s->capture;
    if (g == NULL) return;
    s->capture = NULL;
    s->flags = s->flags_base;
    cudaGraph_t gr = NULL;
    cudaStreamEndCapture(s->stream, &gr);
    oj_cuda_gemm_tune_trim(s);
    if (gr) cudaGraphDestroy(gr);
    cudaGetLastError();
    graph_free(g);
}

oj_status oj_cuda_graph_launch(oj_engine *eng, void *handle) {
    oj_cuda_graph *g = (oj_cuda_graph *)handle;
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s->capture)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "graph_replay: cannot replay a graph during a capture");
    if (oj_cuda_begin(eng, "graph_replay") != OJ_OK) return oj_last_status(eng);
    cudaError_t e = cudaGraphLaunch(g->exec, s->stream);
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, "graph_replay (cudaGraphLaunch)");
    return OJ_OK;
}

oj_status oj_cuda_graph_replay(oj_engine *eng, void *handle) {
    oj_status st = oj_cuda_graph_launch(eng, handle);
    return st == OJ_OK ? oj_cuda_graph_checks(eng, handle) : st;
}

oj_status oj_cuda_graph_checks(oj_engine *eng, void *handle) {
    oj_cuda_graph *g = (oj_cuda_graph *)handle;
    if (g->nchecks == 0) return OJ_OK;
    /* the deferred checks: one read-back of the graph's status words */
    unsigned long long *w = (unsigned long long *)malloc((size_t)g->nwords * sizeof *w);
    if (w == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "graph_replay: out of host memory");
    oj_status st = oj_cuda_d2h(eng, w, g->words, (size_t)g->nwords * sizeof *w, "graph_replay");
    for (int i = 0; i < g->nchecks && st == OJ_OK; i++) {
        const graph_check *c = &g->checks[i];
        if (w[c->word] != ~0ull)
            st = oj_cuda_bad_index(eng, c->kind, c->op, c->idx, c->idt, w[c->word], c->V,
                                   c->ignore_index);
    }
    free(w);
    return st;
}

oj_status oj_cuda_graph_checks_defer(oj_engine *eng, void *handle) {
    oj_cuda_graph *g = (oj_cuda_graph *)handle;
    if (g->nchecks == 0) return OJ_OK;
    if (g->host_words == NULL) {
        g->host_words = (unsigned long long *)malloc((size_t)g->nwords * sizeof *g->host_words);
        if (g->host_words == NULL)
            return oj_set_error(eng, OJ_ERR_CAPACITY, "graph_replay: out of host memory");
    }
    for (int i = 0; i < g->nchecks; i++) g->host_words[g->checks[i].word] = 0; /* until read */
    return oj_cuda_read_defer(eng, g->host_words, g->words, (size_t)g->nwords * sizeof *g->words);
}

bool oj_cuda_graph_checks_clean(oj_engine *eng, void *handle) {
    (void)eng;
    oj_cuda_graph *g = (oj_cuda_graph *)handle;
    for (int i = 0; i < g->nchecks; i++)
        if (g->host_words == NULL || g->host_words[g->checks[i].word] != ~0ull) return false;
    return true;
}

void oj_cuda_graph_destroy(oj_engine *eng, void *handle) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    cudaSetDevice(s->ordinal);
    cudaStreamSynchronize(s->stream); /* no replay may still run */
    graph_free((oj_cuda_graph *)handle);
}
