/* GPT model: parameters (creation, order-independent init, state_dict,
 * safetensors loading) and the KV cache. The forward pass is gpt_forward.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

/* A parameter in the model's registry; its values depend only on (seed,
 * name) (oj_init_tensor): normal(0, init_std), init_std / sqrt(2 n_layer)
 * for residual output projections, ones, zeros. f32, requires grad. */
oj_tensor *oj__gpt_param(oj_gpt *m, const char *name, int rank, const int64_t *shape,
                         oj__gpt_init kind) {
    double std = m->cfg.init_std;
    if (kind == INIT_RESID) std /= sqrt(2.0 * (double)m->cfg.n_layer);
    oj_init init = kind == INIT_ZEROS || m->zero_init ? oj_init_zeros()
                   : kind == INIT_ONES                ? oj_init_ones()
                                                      : oj_init_normal(0.0, std);
    return oj_params_add(m->params, name, rank, shape, OJ_F32, &init);
}

#define P(dst, kind, rank, ...)                                                             \
    do {                                                                                    \
        int64_t shp_[] = {__VA_ARGS__};                                                     \
        snprintf(name, sizeof name, "transformer.h.%d.%s", l, pname);                        \
        (dst) = oj__gpt_param(m, name, rank, shp_, kind);                                     \
        if ((dst) == NULL) goto fail;                                                       \
    } while (0)

static oj_status create(oj_engine *eng, const oj_gpt_config *cfg, uint64_t seed, bool zero_init,
                        oj_gpt **out);

oj_status oj_gpt_create(oj_engine *eng, const oj_gpt_config *cfg, uint64_t seed, oj_gpt **out) {
    return create(eng, cfg, seed, false, out);
}

oj_status oj__gpt_create_zeros(oj_engine *eng, const oj_gpt_config *cfg, oj_gpt **out) {
    return create(eng, cfg, 0, true, out);
}

static oj_status create(oj_engine *eng, const oj_gpt_config *cfg, uint64_t seed, bool zero_init,
                        oj_gpt **out) {
    if (out) *out = NULL;
    if (eng == NULL || out == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_error e = {0};
    if (oj_gpt_config_check(cfg, &e) != OJ_OK)
        return oj_set_error(eng, e.status, "%s", e.message);
    /* preflight: the weights must fit what the budget has left */
    const int64_t np = oj_gpt_config_num_params(cfg);
    const int64_t need = np > INT64_MAX / 4 ? INT64_MAX : np * 4;
    oj_budget *tight = NULL;
    const int64_t room = oj__budget_room(eng, &tight);
    if (need > room)
        return oj_set_error(eng, OJ_ERR_CAPACITY,
                            "gpt: the model's %lld parameters need %lld bytes (f32), more than the "
                            "%lld bytes left in budget '%s' (limit %lld, %lld in use); nothing "
                            "was allocated",
                            (long long)np, (long long)need, (long long)room, oj_budget_name(tight),
                            (long long)oj_budget_limit(tight), (long long)oj_budget_current(tight));
    oj_gpt *m = calloc(1, sizeof *m);
    if (m == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "gpt: out of host memory");
    m->eng = eng;
    m->cfg = *cfg;
    m->zero_init = zero_init;
    m->blocks = calloc((size_t)cfg->n_layer, sizeof *m->blocks);
    m->params = oj_params_create(eng, seed);
    if (m->blocks == NULL || m->params == NULL) {
        oj_gpt_free(m);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "gpt: out of host memory");
    }
    const int64_t C = cfg->n_embd, V = cfg->vocab_size, H = cfg->n_head, Hkv = cfg->n_kv_head;
    const int64_t D = C / H, F = cfg->mlp_hidden;
    const bool gpt2 = cfg->family == OJ_GPT2;
    char name[256];
    const char *pname;
    int l = 0;
    if (cfg->family == OJ_LLAMA) { /* its own names and parts (gpt_llama.c) */
        if (!oj__gpt_llama_params(m)) goto fail;
        *out = m;
        return OJ_OK;
    }
    {
        int64_t s[2] = {V, C};
        m->wte = oj__gpt_param(m, "transformer.wte.weight", 2, s, INIT_NORMAL);
        if (m->wte == NULL) goto fail;
        m->head = m->wte; /* tied */
    }
    if (gpt2) {
        int64_t s[2] = {cfg->block_size, C};
        m->wpe = oj__gpt_param(m, "transformer.wpe.weight", 2, s, INIT_NORMAL);
        if (m->wpe == NULL) goto fail;
    }
    for (l = 0; l < (int)cfg->n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        pname = "ln_1.weight"; P(b->ln_1_w, INIT_ONES, 1, C);
        pname = "ln_2.weight"; P(b->ln_2_w, INIT_ONES, 1, C);
        if (gpt2) {
            pname = "ln_1.bias"; P(b->ln_1_b, INIT_ZEROS, 1, C);
            pname = "ln_2.bias"; P(b->ln_2_b, INIT_ZEROS, 1, C);
            pname = "attn.c_attn.weight"; P(b->c_attn_w, INIT_NORMAL, 2, C, 3 * C);
            pname = "attn.c_attn.bias"; P(b->c_attn_b, INIT_ZEROS, 1, 3 * C);
            pname = "attn.c_proj.weight"; P(b->attn_proj_w, INIT_RESID, 2, C, C);
            pname = "attn.c_proj.bias"; P(b->attn_proj_b, INIT_ZEROS, 1, C);
            pname = "mlp.c_fc.weight"; P(b->c_fc_w, INIT_NORMAL, 2, C, F);
            pname = "mlp.c_fc.bias"; P(b->c_fc_b, INIT_ZEROS, 1, F);
            pname = "mlp.c_proj.weight"; P(b->mlp_proj_w, INIT_RESID, 2, F, C);
            pname = "mlp.c_proj.bias"; P(b->mlp_proj_b, INIT_ZEROS, 1, C);
        } else {
            pname = "attn.q_proj.weight"; P(b->q_w, INIT_NORMAL, 2, H * D, C);
            pname = "attn.k_proj.weight"; P(b->k_w, INIT_NORMAL, 2, Hkv * D, C);
            pname = "attn.v_proj.weight"; P(b->v_w, INIT_NORMAL, 2, Hkv * D, C);
            pname = "attn.o_proj.weight"; P(b->o_w, INIT_RESID, 2, C, H * D);
            pname = "attn.gate.weight"; P(b->gate_w, INIT_NORMAL, 2, H, C);
            pname = "attn.gate.bias"; P(b->gate_b, INIT_ZEROS, 1, H);
            if (l > 0) {
                pname = "attn.lambda"; P(b->lambda, INIT_ZEROS, 1, 1);
            }
            pname = "mlp.gate_proj.weight"; P(b->w_gate, INIT_NORMAL, 2, F, C);
            pname = "mlp.up_proj.weight"; P(b->w_up, INIT_NORMAL, 2, F, C);
            pname = "mlp.down_proj.weight"; P(b->w_down, INIT_RESID, 2, C, F);
        }
    }
    {
        int64_t s[1] = {C};
        m->ln_f_w = oj__gpt_param(m, "transformer.ln_f.weight", 1, s, INIT_ONES);
        if (m->ln_f_w == NULL) goto fail;
        if (gpt2) {
            m->ln_f_b = oj__gpt_param(m, "transformer.ln_f.bias", 1, s, INIT_ZEROS);
            if (m->ln_f_b == NULL) goto fail;
        }
    }
    *out = m;
    return OJ_OK;
fail:
    oj_gpt_free(m);
    return oj_last_status(eng) ? oj_last_status(eng) : OJ_ERR_INTERNAL;
}
#undef P

void oj_gpt_free(oj_gpt *m) {
    if (m == NULL) return;
    oj__gpt_free_quantized(m);
    oj_release(m->rope_cos);
    oj_release(m->rope_sin);
    oj_params_free(m->params);
    oj_params_free(m->lora);
    free(m->blocks);
    free(m);
}

const oj_gpt_config *oj_gpt_get_config(const oj_gpt *m) { return m ? &m->cfg : NULL; }
oj_engine *oj_gpt_engine(const oj_gpt *m) { return m ? m->eng : NULL; }

oj_named_tensors oj_gpt_state_dict(const oj_gpt *m) {
    oj_named_tensors nt = {0, NULL, NULL};
    return m ? oj_params_state_dict(m->params) : nt;
}

oj_status oj_gpt_to_dtype(oj_gpt *m, oj_dtype dt) {
    return m ? oj_params_to_dtype(m->params, dt) : OJ_ERR_INVALID_ARGUMENT;
}

int64_t oj_gpt_num_params(const oj_gpt *m) { return m ? oj_params_numel(m->params, false) : 0; }

double oj_gpt_flops_per_token(const oj_gpt *m, int64_t T) {
    const oj_gpt_config *c = &m->cfg;
    double n = (double)oj_gpt_num_params(m);
    if (m->wpe) n -= (double)oj_numel(m->wpe); /* position table does no matmul work */
    return 6.0 * n + 12.0 * (double)c->n_layer * (double)T * (double)c->n_embd;
}

/* ---------------------------------------------------------------- loading */

static const char *strip_prefix(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

oj_status oj_gpt_load_safetensors(oj_gpt *m, const char *path, oj_error *err) {
    if (m == NULL || path == NULL) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gpt load: NULL");
    oj_safetensors *st = NULL;
    oj_status s = oj_safetensors_open(path, &st, err);
    if (s != OJ_OK) return s;
    oj_named_tensors sd = oj_gpt_state_dict(m);
    int64_t *idx = calloc((size_t)sd.n, sizeof *idx);
    if (idx == NULL) {
        oj_safetensors_close(st);
        return oj_error_set(err, OJ_ERR_CAPACITY, "gpt load: out of host memory");
    }
    /* Validate everything first. */
    for (int64_t i = 0; i < sd.n && s == OJ_OK; i++) {
        const char *want = strip_prefix(sd.names[i]);
        idx[i] = -1;
        for (int64_t j = 0; j < oj_safetensors_count(st); j++)
            if (strcmp(strip_prefix(oj_safetensors_name(st, j)), want) == 0) idx[i] = j;
        if (idx[i] < 0) {
            s = oj_error_set(err, OJ_ERR_SHAPE, "gpt load: %s has no tensor %s", path, sd.names[i]);
            break;
        }
        oj_dtype dt = oj_safetensors_dtype(st, idx[i]);
        if (dt != OJ_F32 && dt != OJ_BF16 && dt != OJ_F16) {
            s = oj_error_set(err, OJ_ERR_DTYPE, "gpt load: %s is %s, expected F32, BF16 or F16",
                             sd.names[i], oj_dtype_name(dt));
            break;
        }
        int r = oj_safetensors_rank(st, idx[i]);
        const int64_t *shp = oj_safetensors_shape(st, idx[i]);
        if (!oj__gpt_st_shape_matches(st, idx[i], sd.tensors[i])) {
            char b1[128], b2[128];
            oj_tensor *p = sd.tensors[i];
            s = oj_error_set(err, OJ_ERR_SHAPE, "gpt load: %s has shape %s in the file, the model has %s",
                             sd.names[i], oj__shape_fmt(b1, sizeof b1, r, shp),
                             oj_shape_str(p, b2, sizeof b2));
        }
    }
    /* Then copy (converting to f32) into the parameters. */
    for (int64_t i = 0; i < sd.n && s == OJ_OK; i++)
        s = oj__gpt_st_copy(sd.tensors[i], st, idx[i], "gpt load", sd.names[i], err);
    free(idx);
    oj_safetensors_close(st);
    return s;
}

bool oj__gpt_st_shape_matches(oj_safetensors *st, int64_t idx, oj_tensor *dst) {
    int r = oj_safetensors_rank(st, idx);
    const int64_t *shp = oj_safetensors_shape(st, idx);
    bool ok = r == oj_rank(dst);
    for (int d = 0; ok && d < r; d++) ok = shp[d] == oj_size(dst, d);
    return ok;
}

oj_status oj__gpt_st_copy(oj_tensor *dst, oj_safetensors *st, int64_t idx, const char *what,
                          const char *name, oj_error *err) {
    oj_engine *eng = oj_tensor_engine(dst);
    oj_scope_begin(eng);
    oj_tensor *src = oj_safetensors_tensor(st, eng, oj_safetensors_name(st, idx));
    bool prev = oj_set_grad_enabled(eng, false);
    oj_status s = src ? oj_copy_(dst, src) : oj_last_status(eng);
    oj_set_grad_enabled(eng, prev);
    if (s != OJ_OK) oj_error_set(err, s, "%s: copying %s: %s", what, name, oj_last_error(eng));
    oj_scope_end(eng);
    return s;
}

/* ---------------------------------------------------------------- KV cache */

oj_status oj_kv_cache_create(oj_gpt *m, int64_t batch, int64_t capacity, oj_kv_cache **out) {
    if (m == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = m->eng;
    if (out == NULL) return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "kv_cache: out is NULL");
    *out = NULL;
    if (batch <= 0 || capacity <= 0)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "kv_cache: batch %lld and capacity %lld must be > 0",
                            (long long)batch, (long long)capacity);
    oj_kv_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->kv = calloc((size_t)m->cfg.n_layer, sizeof *c->kv);
        c->k = calloc((size_t)m->cfg.n_layer, sizeof *c->k);
        c->v = calloc((size_t)m->cfg.n_layer, sizeof *c->v);
    }
    if (c == NULL || c->kv == NULL || c->k == NULL || c->v == NULL) {
        if (c) {
            free(c->kv);
            free(c->k);
            free(c->v);
        }
        free(c);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "kv_cache: out of host memory");
    }
    c->m = m;
    c->n_layer = m->cfg.n_layer;
    c->batch = batch;
    c->capacity = capacity;
    const int64_t D = oj__gpt_head_dim(&m->cfg);
    /* keys and values of a layer in one tensor: the static decode step
     * writes both with one index_copy_ when they sit side by side in the
     * projection's output (gpt2's c_attn) */
    int64_t shape[5] = {2, batch, m->cfg.n_kv_head, capacity, D};
    for (int64_t l = 0; l < m->cfg.n_layer; l++) {
        c->kv[l] = oj_zeros(eng, 5, shape, m->wte->dtype); /* the weights' dtype */
        if (c->kv[l]) {
            oj__scope_detach(c->kv[l]);
            c->k[l] = oj_select(c->kv[l], 0, 0);
            c->v[l] = oj_select(c->kv[l], 0, 1);
        }
        if (c->k[l] == NULL || c->v[l] == NULL) {
            oj_kv_cache_free(c);
            return oj_last_status(eng);
        }
        oj__scope_detach(c->k[l]);
        oj__scope_detach(c->v[l]);
    }
    *out = c;
    return OJ_OK;
}

void oj_kv_cache_free(oj_kv_cache *c) {
    if (c == NULL) return;
    for (int64_t l = 0; l < c->n_layer; l++) {
        oj_release(c->k[l]);
        oj_release(c->v[l]);
        oj_release(c->kv[l]);
    }
    free(c->kv);
    free(c->k);
    free(c->v);
    free(c);
}

int64_t oj_kv_cache_len(const oj_kv_cache *c) { return c ? c->len : 0; }
void oj_kv_cache_reset(oj_kv_cache *c) {
    if (c) c->len = 0;
}
