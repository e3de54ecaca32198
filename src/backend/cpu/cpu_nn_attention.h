/* Geometry shared by the CPU attention kernels (cpu_nn_attention.c, the
 * double path, and cpu_nn_attention_f32.c, the f32 path).
 * q (B,H,T,D), k (B,Hkv,S,D), v (B,Hkv,S,Dv), mask (B,H,T,S) view or NULL. */
#ifndef OJAS_CPU_NN_ATTENTION_H
#define OJAS_CPU_NN_ATTENTION_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_nn_util.h"

#define OJ_ATTN_TQ 32 /* queries per tile */
#define OJ_ATTN_TK 64 /* keys per tile */

typedef struct {
    int64_t B, H, Hkv, T, S, D, Dv, group;
    const oj_tensor *q, *k, *v, *mask;
    bool causal;
    double scale;
    /* paged keys and values (attention_paged_forward; B = 1): k and v are
     * pools [NB, Hkv, BS, D], key j at row j % BS of block blocks[j / BS];
     * NULL otherwise */
    const int32_t *blocks;
    int64_t block_size;
} oj_attn_geom;

static inline void oj_attn_geom_init(oj_attn_geom *g, const oj_tensor *q, const oj_tensor *k,
                                     const oj_tensor *v, const oj_tensor *mask, bool causal,
                                     double scale) {
    g->B = q->shape[0];
    g->H = q->shape[1];
    g->T = q->shape[2];
    g->D = q->shape[3];
    g->Hkv = k->shape[1];
    g->S = k->shape[2];
    g->Dv = v->shape[3];
    g->group = g->Hkv ? g->H / g->Hkv : 1;
    g->q = q;
    g->k = k;
    g->v = v;
    g->mask = mask;
    g->causal = causal;
    g->scale = scale;
    g->blocks = NULL;
    g->block_size = 0;
}

/* Number of keys that some query of [i0, i0 + nq) may see (causal bound). */
static inline int64_t oj_attn_keys_visible(const oj_attn_geom *g, int64_t i0, int64_t nq) {
    if (!g->causal) return g->S;
    int64_t last = i0 + nq - 1 + g->S - g->T + 1;
    return last < 0 ? 0 : (last > g->S ? g->S : last);
}

/* Mask row (b, h, i) of g's mask (NULL when there is none). */
static inline const char *oj_attn_mask_row(const oj_attn_geom *g, int64_t b, int64_t h,
                                           int64_t i) {
    const oj_tensor *m = g->mask;
    if (m == NULL) return NULL;
    int64_t off = b * m->stride[0] + h * m->stride[1] + i * m->stride[2];
    return oj__nn_base(m) + off * (int64_t)oj_dtype_size(m->dtype);
}

/* f32 path: q, k, v, out all f32 (cpu_nn_attention_f32.c). */
oj_status oj__cpu_attention_forward_f32(oj_engine *eng, oj_tensor *out, oj_tensor *lse,
                                        const oj_attn_geom *g);
oj_status oj__cpu_attention_backward_f32(oj_engine *eng, oj_tensor *dq, oj_tensor *dk,
                                         oj_tensor *dv, const oj_tensor *dout,
                                         const oj_tensor *out, const oj_tensor *lse,
                                         const oj_attn_geom *g);

#endif /* OJAS_CPU_NN_ATTENTION_H */
