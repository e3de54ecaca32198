/* The GPT model's parameters and the pieces shared by its files. */
#ifndef OJAS_GPT_INTERNAL_H
#define OJAS_GPT_INTERNAL_H

#include "ojas/gpt.h"
#include "ojas/nn.h"

/* One transformer block. gpt2 uses ln/attn/mlp with biases and HF Conv1D
 * layouts ([in, out]); nanolab uses the PyTorch Linear layout ([out, in]). */
typedef struct oj_gpt_block {
    oj_tensor *ln_1_w, *ln_1_b, *ln_2_w, *ln_2_b; /* [C] (biases gpt2 only) */
    /* gpt2 */
    oj_tensor *c_attn_w, *c_attn_b; /* [C, 3C], [3C] */
    oj_tensor *attn_proj_w, *attn_proj_b; /* [C, C], [C] */
    oj_tensor *c_fc_w, *c_fc_b;     /* [C, 4C], [4C] */
    oj_tensor *mlp_proj_w, *mlp_proj_b; /* [4C, C], [C] */
    /* nanolab */
    oj_tensor *q_w, *k_w, *v_w, *o_w; /* [H D, C], [Hkv D, C] x2, [C, H D] */
    oj_tensor *gate_w, *gate_b;       /* [H, C], [H] */
    oj_tensor *lambda;                /* [1] value-residual mix (layers > 0) */
    oj_tensor *w_gate, *w_up, *w_down; /* [F, C], [F, C], [C, F] */
} oj_gpt_block;

struct oj_gpt {
    oj_engine *eng;
    oj_gpt_config cfg;
    oj_params *params; /* the state_dict, in registration order */
    oj_tensor *wte;    /* [V, C] */
    oj_tensor *wpe;    /* [block_size, C] (gpt2) */
    oj_tensor *ln_f_w, *ln_f_b;
    oj_gpt_block *blocks;
};

/* The positions of a static decode step (gpt_decoder.c), held on the
 * device so that nothing the step does depends on a host value that
 * changes from one token to the next: it can be captured once into a CUDA
 * graph and replayed for every token. */
typedef struct oj_gpt_dev_pos {
    oj_tensor *pos;  /* i64 [1]: the new token's position (rotary angle, gpt2's wpe row) */
    oj_tensor *slot; /* i64 [1]: the cache slot its key and value go to (pos mod capacity) */
    oj_tensor *mask; /* bool [1, 1, 1, capacity]: the slots written so far, attended to */
} oj_gpt_dev_pos;

struct oj_kv_cache {
    oj_gpt *m;
    int64_t batch, capacity, len;
    int64_t n_layer; /* m's, kept so the cache can be freed after m */
    oj_tensor **kv;     /* per layer [2, batch, Hkv, capacity, D]: keys, values */
    oj_tensor **k, **v; /* per layer [batch, Hkv, capacity, D]: views of kv[l] */
    const oj_gpt_dev_pos *dev; /* set during oj__gpt_run_static only */
};

/* Run the blocks and the head on x = embeddings [B, T, C] at positions
 * pos..pos+T-1; cache may be NULL (training / full recompute). */
oj_tensor *oj__gpt_run(oj_gpt *m, oj_tensor *idx, oj_kv_cache *cache);
/* The static decode step: logits [B, 1, V] of idx [B, 1] at the positions
 * of dp, writing each layer's key and value into slot dp->slot of c and
 * attending to every slot dp->mask keeps. Grad mode off. Reads and changes
 * no host position (c->len is left to the caller, which also checks the
 * positions against block_size and the capacity). */
oj_tensor *oj__gpt_run_static(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx,
                              const oj_gpt_dev_pos *dp);

#endif /* OJAS_GPT_INTERNAL_H */
