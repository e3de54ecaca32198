/* CUDA graph entries emulated on a CPU engine, for the host side of graphs
 * (src/core/graph.c: the written set, the replay's version bumps and the
 * weight copies' sync before it). The CPU backend records nothing, so a
 * "capture" runs each op at once; a replay then performs the copies the
 * test declared with ge_replay_copies (dst <- src, whole contiguous f32
 * tensors of one size) on the host, as the recorded copies would on a
 * device, and counts itself. */
#ifndef OJAS_GRAPH_EMU_TESTUTIL_H
#define OJAS_GRAPH_EMU_TESTUTIL_H

#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"

enum { GE_MAX = 4 };
static oj_tensor *ge_dst[GE_MAX], *ge_src[GE_MAX];
static int ge_n, ge_replays;

static oj_status ge_begin(oj_engine *eng) {
    (void)eng;
    return OJ_OK;
}
static oj_status ge_end(oj_engine *eng, void **graph) {
    (void)eng;
    *graph = &ge_n; /* any non-NULL handle */
    return OJ_OK;
}
static void ge_abort(oj_engine *eng) { (void)eng; }
static void ge_destroy(oj_engine *eng, void *graph) {
    (void)eng;
    (void)graph;
}
static oj_status ge_replay(oj_engine *eng, void *graph) {
    (void)eng;
    (void)graph;
    for (int i = 0; i < ge_n; i++)
        memcpy(oj__data_ptr(ge_dst[i]), oj__data_ptr(ge_src[i]),
               (size_t)oj_numel(ge_dst[i]) * sizeof(float));
    ge_replays++;
    return OJ_OK;
}

/* table gains the emulated graph entries (the two-half launch stays NULL:
 * oj__graph_launch replays whole). */
static inline void ge_install(oj_backend *table) {
    table->graph_begin = ge_begin;
    table->graph_end = ge_end;
    table->graph_abort = ge_abort;
    table->graph_replay = ge_replay;
    table->graph_destroy = ge_destroy;
    table->graph_launch = NULL;
    table->graph_checks = NULL;
}

/* What each replay does: dst[i] <- src[i] (the tensors stay the caller's). */
static inline void ge_replay_copies(int n, oj_tensor **dst, oj_tensor **src) {
    ge_n = n;
    for (int i = 0; i < n; i++) ge_dst[i] = dst[i], ge_src[i] = src[i];
}

#endif
