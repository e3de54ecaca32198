/* Loading a Hugging Face model directory (gpt.h, oj_gpt_load_dir):
 * config.json, then model.safetensors or, without it, the shards named by
 * model.safetensors.index.json ({"weight_map": {tensor: file}}). Every
 * parameter's tensor is found and checked (float dtype, the config's
 * shape) before any is copied. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

#define MAX_SHARDS 1024

typedef struct {
    const char *dir;
    int n;                             /* files opened */
    char *names[MAX_SHARDS];           /* file names inside dir */
    oj_safetensors *st[MAX_SHARDS];
    json_t *weight_map;                /* sharded: tensor name -> file name; NULL: one file */
    char index_path[4096];
} weights;

static void weights_close(weights *w) {
    for (int i = 0; i < w->n; i++) {
        oj_safetensors_close(w->st[i]);
        free(w->names[i]);
    }
    json_decref(w->weight_map);
}

/* The open file `name` of dir (opened on first use): its slot, or -1 with
 * err set. */
static int open_file(weights *w, const char *name, oj_error *err) {
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->names[i], name) == 0) return i;
    bool ctrl = false; /* a control character: no file of ours, and a message would break */
    for (const char *p = name; *p; p++) ctrl |= (unsigned char)*p < 0x20 || *p == 0x7f;
    if (name[0] == '\0' || strchr(name, '/') || strcmp(name, "..") == 0 || ctrl) {
        char q[65];
        oj_error_set(err, OJ_ERR_CORRUPT, "%s: weight_map names '%s', not a file in the directory",
                     w->index_path, oj__hf_quote(q, name));
        return -1;
    }
    if (w->n == MAX_SHARDS) {
        oj_error_set(err, OJ_ERR_CORRUPT, "%s: more than %d shards", w->index_path, MAX_SHARDS);
        return -1;
    }
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    oj_error e = {0};
    if (oj_safetensors_open(path, &w->st[w->n], &e) != OJ_OK) {
        char q[65];
        if (w->weight_map)
            oj_error_set(err, e.status, "%s: weight_map names %s: %s", w->index_path,
                         oj__hf_quote(q, name), e.message);
        else
            oj_error_set(err, e.status, "%s", e.message);
        return -1;
    }
    w->names[w->n] = strdup(name);
    if (w->names[w->n] == NULL) {
        oj_safetensors_close(w->st[w->n]);
        oj_error_set(err, OJ_ERR_CAPACITY, "hf load: out of host memory");
        return -1;
    }
    return w->n++;
}

/* The names a parameter may have in the file: its own, and a GPT-2
 * parameter without "transformer." (as GPT2Model saves them). */
static const char *alt_name(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : NULL;
}

/* Where tensor `name` (or its alternative) lives: *file, *index. false when
 * absent (err untouched) or on an error opening a shard (err set). */
static bool locate(weights *w, const char *name, int *file, int64_t *index, oj_error *err) {
    const char *cand[2] = {name, alt_name(name)};
    for (int c = 0; c < 2 && cand[c]; c++) {
        const char *fname = "model.safetensors";
        if (w->weight_map) {
            json_t *v = json_object_get(w->weight_map, cand[c]);
            if (v == NULL) continue;
            if (!json_is_string(v)) {
                oj_error_set(err, OJ_ERR_CORRUPT, "%s: weight_map['%s'] is not a file name",
                             w->index_path, cand[c]);
                return false;
            }
            fname = json_string_value(v);
        }
        int f = open_file(w, fname, err);
        if (f < 0) return false;
        int64_t i = oj_safetensors_find(w->st[f], cand[c]);
        if (i < 0 && w->weight_map) {
            char q[65];
            oj_error_set(err, OJ_ERR_CORRUPT, "%s: weight_map puts %s in %s, which does not hold it",
                         w->index_path, cand[c], oj__hf_quote(q, fname));
            return false;
        }
        if (i >= 0) {
            *file = f;
            *index = i;
            return true;
        }
    }
    return false;
}

static oj_status open_weights(weights *w, const char *dir, oj_error *err) {
    memset(w, 0, sizeof *w);
    w->dir = dir;
    snprintf(w->index_path, sizeof w->index_path, "%s/model.safetensors.index.json", dir);
    char single[4200];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    /* model.safetensors first, as transformers' from_pretrained: an index
     * beside it (left by an older sharded export) is not read */
    if (access(single, F_OK) == 0)
        return open_file(w, "model.safetensors", err) < 0 ? err->status : OJ_OK;
    if (access(w->index_path, F_OK) != 0)
        return oj_error_set(err, OJ_ERR_IO,
                            "%s: neither model.safetensors nor model.safetensors.index.json", dir);
    uint8_t *text = NULL;
    size_t len = 0;
    /* through the regular-file check: a FIFO index would block */
    oj_status st = oj__read_file(w->index_path, (size_t)1 << 28, &text, &len, err);
    if (st) return st;
    json_error_t je;
    json_t *root = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (root == NULL)
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: bad JSON at line %d column %d: %s",
                            w->index_path, je.line, je.column, je.text);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: weight_map is missing or not an object",
                            w->index_path);
    }
    w->weight_map = json_incref(wm);
    json_decref(root);
    return OJ_OK;
}

/* Refuse a tied model whose file also holds an lm_head.weight that is not
 * the embedding (HF would silently tie it over). */
static oj_status check_tie(oj_gpt *m, weights *w, oj_error *err) {
    const char *emb = m->cfg.family == OJ_LLAMA ? "model.embed_tokens.weight" : "transformer.wte.weight";
    int fh = -1, fe = -1;
    int64_t ih = -1, ie = -1;
    oj_error e = {0};
    if (m->cfg.untied_head || !locate(w, "lm_head.weight", &fh, &ih, &e))
        return e.status ? oj_error_set(err, e.status, "%s", e.message) : OJ_OK;
    if (!locate(w, emb, &fe, &ie, &e)) return OJ_OK; /* reported as missing later */
    size_t nh = 0, ne = 0;
    const void *ph = oj_safetensors_data(w->st[fh], ih, &nh);
    const void *pe = oj_safetensors_data(w->st[fe], ie, &ne);
    bool same = oj_safetensors_dtype(w->st[fh], ih) == oj_safetensors_dtype(w->st[fe], ie) &&
                nh == ne && ph && pe && memcmp(ph, pe, nh) == 0;
    if (!same)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "%s/config.json: tie_word_embeddings is true but %s/%s holds an "
                            "lm_head.weight that differs from %s",
                            w->dir, w->dir, w->names[fh], emb);
    return OJ_OK;
}

/* Whether `name` ends with `suffix`. */
static bool ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* The layer index of a per-layer tensor ("model.layers.N.", "h.N.",
 * "transformer.h.N."), else -1. */
static long layer_of(const char *name) {
    static const char *const pre[] = {"model.layers.", "transformer.h.", "h."};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(pre[i]);
        if (strncmp(name, pre[i], k) != 0 || name[k] < '0' || name[k] > '9') continue;
        char *end;
        long l = strtol(name + k, &end, 10);
        return *end == '.' ? l : -1;
    }
    return -1;
}

/* Refuse a file tensor the model does not take (it would be dropped
 * silently): a layer past the config's count, or a weight or bias the
 * architecture has no flag for (a Llama q_proj.bias). Buffers checkpoints
 * carry are accepted: rotary_emb.inv_freq, GPT-2's attn.bias and
 * attn.masked_bias masks, and a tied lm_head.weight (check_tie). */
static oj_status check_unused(const oj_gpt *m, weights *w, const oj_named_tensors *sd,
                              oj_error *err) {
    void *it = w->weight_map ? json_object_iter(w->weight_map) : NULL;
    int64_t n = w->weight_map ? 0 : oj_safetensors_count(w->st[0]);
    for (int64_t k = 0; w->weight_map ? it != NULL : k < n; k++) {
        const char *name = w->weight_map ? json_object_iter_key(it) : oj_safetensors_name(w->st[0], k);
        if (w->weight_map) it = json_object_iter_next(w->weight_map, it);
        bool used = strcmp(name, "lm_head.weight") == 0 || ends_with(name, ".rotary_emb.inv_freq") ||
                    (m->cfg.family == OJ_GPT2 &&
                     (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")));
        for (int64_t i = 0; i < sd->n && !used; i++) {
            const char *alt = alt_name(sd->names[i]);
            used = strcmp(name, sd->names[i]) == 0 || (alt && strcmp(name, alt) == 0);
        }
        if (used) continue;
        const char *where = w->weight_map ? w->index_path : w->dir;
        const char *in = w->weight_map ? "" : "/model.safetensors";
        char q[65];
        long l = layer_of(name);
        if (l >= m->cfg.n_layer)
            return oj_error_set(err, OJ_ERR_SHAPE,
                                "%s%s: tensor %s is of layer %ld, but %s/config.json gives %lld "
                                "layers",
                                where, in, oj__hf_quote(q, name), l, w->dir,
                                (long long)m->cfg.n_layer);
        return oj_error_set(err, OJ_ERR_SHAPE,
                            "%s%s: tensor %s is not part of the model %s/config.json describes "
                            "(a weight or bias its architecture and flags do not have)",
                            where, in, oj__hf_quote(q, name), w->dir);
    }
    return OJ_OK;
}

/* Check every parameter against the files, then copy them in. */
static oj_status load_params(oj_gpt *m, weights *w, oj_error *err) {
    oj_named_tensors sd = oj_gpt_state_dict(m);
    int *file = calloc((size_t)sd.n, sizeof *file);
    int64_t *idx = calloc((size_t)sd.n, sizeof *idx);
    oj_status s = file && idx ? OJ_OK : oj_error_set(err, OJ_ERR_CAPACITY, "hf load: out of host memory");
    for (int64_t i = 0; i < sd.n && s == OJ_OK; i++) {
        const char *name = sd.names[i];
        oj_error e = {0};
        if (!locate(w, name, &file[i], &idx[i], &e)) {
            s = e.status ? oj_error_set(err, e.status, "%s", e.message)
                         : oj_error_set(err, OJ_ERR_SHAPE, "%s: no tensor %s%s",
                                        w->weight_map ? w->index_path : w->dir, name,
                                        w->weight_map ? " in weight_map" : " in model.safetensors");
            break;
        }
        oj_safetensors *st = w->st[file[i]];
        oj_dtype dt = oj_safetensors_dtype(st, idx[i]);
        if (dt != OJ_F32 && dt != OJ_BF16 && dt != OJ_F16) {
            s = oj_error_set(err, OJ_ERR_DTYPE, "%s/%s: %s is %s, expected F32, BF16 or F16", w->dir,
                             w->names[file[i]], name, oj_safetensors_dtype_str(st, idx[i]));
            break;
        }
        int r = oj_safetensors_rank(st, idx[i]);
        const int64_t *shp = oj_safetensors_shape(st, idx[i]);
        if (!oj__gpt_st_shape_matches(st, idx[i], sd.tensors[i])) {
            char b1[128], b2[128];
            s = oj_error_set(err, OJ_ERR_SHAPE, "%s/%s: %s has shape %s, %s/config.json gives %s",
                             w->dir, w->names[file[i]], name, oj__shape_fmt(b1, sizeof b1, r, shp),
                             w->dir, oj_shape_str(sd.tensors[i], b2, sizeof b2));
        }
    }
    if (s == OJ_OK) s = check_tie(m, w, err);
    if (s == OJ_OK) s = check_unused(m, w, &sd, err);
    for (int64_t i = 0; i < sd.n && s == OJ_OK; i++)
        s = oj__gpt_st_copy(sd.tensors[i], w->st[file[i]], idx[i], "hf load", sd.names[i], err);
    free(file);
    free(idx);
    return s;
}

oj_status oj_gpt_load_dir(oj_engine *eng, const char *dir, oj_gpt **out, oj_error *err) {
    if (out) *out = NULL;
    if (eng == NULL || dir == NULL || out == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "hf load: NULL argument");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    oj_gpt_config cfg;
    oj_status s = oj_gpt_config_from_hf(path, &cfg, err);
    if (s != OJ_OK) return s;
    weights w;
    s = open_weights(&w, dir, err);
    oj_gpt *m = NULL;
    if (s == OJ_OK && oj__gpt_create_zeros(eng, &cfg, &m) != OJ_OK) /* every parameter is loaded */
        s = oj_error_set(err, oj_last_status(eng), "%s: %s", dir, oj_last_error(eng));
    if (s == OJ_OK) s = load_params(m, &w, err);
    weights_close(&w);
    if (s != OJ_OK) {
        oj_gpt_free(m);
        return s;
    }
    *out = m;
    return OJ_OK;
}
