/* ojas._C.GPT, KVCache, Decoder and generate: the GPT models of
 * include/ojas/gpt.h and include/ojas/infer.h as Python objects.
 *
 * A GPT either owns its oj_gpt (gpt_create, gpt_load_dir,
 * gpt_load_checkpoint: freed with the object, and counted as a view of its
 * engine so the engine is not closed under it) or borrows a Trainer's (the
 * GPT keeps the Trainer's engine, and so the trainer, alive). KVCache and
 * Decoder keep their GPT alive and count as views of its engine (a closed
 * Trainer is freed only after them).
 * ojas/models.py gives them their Python names. */
#include <stdlib.h>
#include <string.h>

#include "ojas/data.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/io.h"
#include "ojas/train.h"

#include "ojas_py.h"

typedef struct {
    PyObject_HEAD
    oj_gpt *m;
    EngineObject *eng; /* strong */
    PyObject *owner;   /* the Trainer whose model this is, or NULL (owned) */
} GPTObject;

typedef struct {
    PyObject_HEAD
    oj_kv_cache *c;
    GPTObject *gpt; /* strong */
} KVCacheObject;

typedef struct {
    PyObject_HEAD
    oj_gpt_decoder *d;
    GPTObject *gpt; /* strong */
} DecoderObject;

static PyTypeObject GPT_Type, KVCache_Type, Decoder_Type;

/* The model of an open GPT, or NULL with StateError. */
static oj_gpt *gpt_open(GPTObject *g) {
    if (g->m == NULL || g->eng == NULL || g->eng->eng == NULL) {
        ojpy_raise_status(OJ_ERR_STATE, "the model's engine (or trainer) is closed");
        return NULL;
    }
    return g->m;
}

PyObject *ojpy_gpt_wrap(oj_gpt *m, EngineObject *e, PyObject *owner) {
    GPTObject *g = PyObject_New(GPTObject, &GPT_Type);
    if (g == NULL) {
        if (owner == NULL) oj_gpt_free(m);
        return NULL;
    }
    g->m = m;
    g->eng = (EngineObject *)Py_NewRef((PyObject *)e);
    g->owner = Py_XNewRef(owner);
    if (owner == NULL) ojpy_engine_exports(e, +1);
    return (PyObject *)g;
}

static void gpt_dealloc(GPTObject *g) {
    if (g->owner == NULL && g->m != NULL) {
        if (g->eng->eng != NULL) oj_gpt_free(g->m);
        ojpy_engine_exports(g->eng, -1);
    }
    g->m = NULL;
    Py_CLEAR(g->owner);
    Py_CLEAR(g->eng);
    PyObject_Free(g);
}

/* ------------------------------------------------------------ configs */

static const char *const family_names[] = {"gpt2", "nanolab", "llama"};

static PyObject *config_to_dict(const oj_gpt_config *c) {
    return Py_BuildValue(
        "{s:s,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:d,s:L,s:O,s:O,s:O,s:d,s:d,s:d,s:L}", "family",
        oj_gpt_family_name(c->family), "vocab_size", (long long)c->vocab_size, "block_size",
        (long long)c->block_size, "n_layer", (long long)c->n_layer, "n_head",
        (long long)c->n_head, "n_kv_head", (long long)c->n_kv_head, "n_embd",
        (long long)c->n_embd, "mlp_hidden", (long long)c->mlp_hidden, "norm_eps", c->norm_eps,
        "rope_theta", c->rope_theta, "init_std", c->init_std, "head_dim", (long long)c->head_dim,
        "qkv_bias", c->qkv_bias ? Py_True : Py_False, "qk_norm", c->qk_norm ? Py_True : Py_False,
        "untied_head", c->untied_head ? Py_True : Py_False, "rope_factor", c->rope_factor,
        "rope_low_freq_factor", c->rope_low_freq_factor, "rope_high_freq_factor",
        c->rope_high_freq_factor, "rope_original_context", (long long)c->rope_original_context);
}

/* Apply dict d (keys of config_to_dict) to *c; -1 with an exception naming
 * an unknown key or a value of the wrong type. */
static int config_from_dict(PyObject *d, oj_gpt_config *c) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *key = PyUnicode_AsUTF8(k);
        if (key == NULL) return -1;
#define INT_FIELD(f)                                       \
    if (strcmp(key, #f) == 0) {                            \
        long long x = PyLong_AsLongLong(v);                \
        if (x == -1 && PyErr_Occurred()) goto bad;         \
        c->f = x;                                          \
        continue;                                          \
    }
#define FLOAT_FIELD(f)                                     \
    if (strcmp(key, #f) == 0) {                            \
        double x = PyFloat_AsDouble(v);                    \
        if (x == -1 && PyErr_Occurred()) goto bad;         \
        c->f = x;                                          \
        continue;                                          \
    }
#define BOOL_FIELD(f)                                      \
    if (strcmp(key, #f) == 0) {                            \
        int x = PyObject_IsTrue(v);                        \
        if (x < 0) goto bad;                               \
        c->f = x;                                          \
        continue;                                          \
    }
        INT_FIELD(vocab_size)
        INT_FIELD(block_size)
        INT_FIELD(n_layer)
        INT_FIELD(n_head)
        INT_FIELD(n_kv_head)
        INT_FIELD(n_embd)
        INT_FIELD(mlp_hidden)
        INT_FIELD(head_dim)
        INT_FIELD(rope_original_context)
        FLOAT_FIELD(norm_eps)
        FLOAT_FIELD(rope_theta)
        FLOAT_FIELD(init_std)
        FLOAT_FIELD(rope_factor)
        FLOAT_FIELD(rope_low_freq_factor)
        FLOAT_FIELD(rope_high_freq_factor)
        BOOL_FIELD(qkv_bias)
        BOOL_FIELD(qk_norm)
        BOOL_FIELD(untied_head)
#undef INT_FIELD
#undef FLOAT_FIELD
#undef BOOL_FIELD
        if (strcmp(key, "family") == 0) {
            const char *f = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
            int found = -1;
            for (int i = 0; f && i < 3; i++)
                if (strcmp(f, family_names[i]) == 0) found = i;
            if (found < 0) {
                ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT,
                                  "GPT config: family must be 'gpt2', 'nanolab' or 'llama'");
                return -1;
            }
            c->family = (oj_gpt_family)found;
            continue;
        }
        {
            char msg[200];
            snprintf(msg, sizeof msg, "GPT config: unknown key '%.80s'", key);
            ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, msg);
            return -1;
        }
    bad:
        PyErr_Clear();
        {
            char msg[200];
            snprintf(msg, sizeof msg, "GPT config: '%.80s' has a value of the wrong type", key);
            ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, msg);
        }
        return -1;
    }
    return 0;
}

/* gpt_config(preset=None, overrides=None) -> dict: a preset's config
 * (oj_gpt_preset) with overrides applied, checked (oj_gpt_config_check). */
static PyObject *py_gpt_config(PyObject *mod, PyObject *args) {
    const char *preset = NULL;
    PyObject *over = Py_None;
    if (!PyArg_ParseTuple(args, "|zO:gpt_config", &preset, &over)) return NULL;
    oj_gpt_config c;
    memset(&c, 0, sizeof c);
    if (preset != NULL && !oj_gpt_preset(preset, &c)) {
        char names[512], msg[700];
        snprintf(msg, sizeof msg, "unknown GPT preset '%.80s' (one of: %s)", preset,
                 oj_gpt_preset_list(names, sizeof names));
        return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, msg);
    }
    if (over != Py_None) {
        if (!PyDict_Check(over)) {
            PyErr_SetString(PyExc_TypeError, "gpt_config: overrides must be a dict");
            return NULL;
        }
        if (config_from_dict(over, &c) < 0) return NULL;
    }
    oj_error err = {0};
    if (oj_gpt_config_check(&c, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    return config_to_dict(&c);
}

static PyObject *py_gpt_presets(PyObject *mod, PyObject *u) {
    PyObject *l = PyList_New(0);
    for (int i = 0; l && oj_gpt_preset_name(i); i++) {
        PyObject *s = PyUnicode_FromString(oj_gpt_preset_name(i));
        if (s == NULL || PyList_Append(l, s) < 0) {
            Py_XDECREF(s);
            Py_CLEAR(l);
            break;
        }
        Py_DECREF(s);
    }
    return l;
}

/* gpt_config_from_hf(config.json path) -> dict (oj_gpt_config_from_hf). */
static PyObject *py_gpt_config_from_hf(PyObject *mod, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s:gpt_config_from_hf", &path)) return NULL;
    oj_gpt_config c;
    memset(&c, 0, sizeof c);
    oj_error err = {0};
    if (oj_gpt_config_from_hf(path, &c, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    return config_to_dict(&c);
}

/* gpt_create(config dict, seed, engine) -> GPT (oj_gpt_create). */
static PyObject *py_gpt_create(PyObject *mod, PyObject *args) {
    PyObject *d, *eo = Py_None;
    unsigned long long seed = 0;
    if (!PyArg_ParseTuple(args, "O!|KO:gpt_create", &PyDict_Type, &d, &seed, &eo)) return NULL;
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return NULL;
    oj_gpt_config c;
    memset(&c, 0, sizeof c);
    if (config_from_dict(d, &c) < 0) return NULL;
    oj_error err = {0};
    if (oj_gpt_config_check(&c, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    oj_gpt *m = NULL;
    if (oj_gpt_create(e->eng, &c, seed, &m) != OJ_OK) return ojpy_raise_engine(e->eng, "GPT");
    return ojpy_gpt_wrap(m, e, NULL);
}

/* gpt_load_dir(dir, engine) -> GPT: a Hugging Face model directory. */
static PyObject *py_gpt_load_dir(PyObject *mod, PyObject *args) {
    const char *dir;
    PyObject *eo = Py_None;
    if (!PyArg_ParseTuple(args, "s|O:gpt_load_dir", &dir, &eo)) return NULL;
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return NULL;
    oj_gpt *m = NULL;
    oj_error err = {0};
    if (oj_gpt_load_dir(e->eng, dir, &m, &err) != OJ_OK) {
        oj_clear_error(e->eng);
        return ojpy_raise_status(err.status, err.message);
    }
    return ojpy_gpt_wrap(m, e, NULL);
}

/* gpt_load_checkpoint(path, engine) -> GPT: an ojas training checkpoint
 * (a ckpt-NNNNNN directory or a run directory holding them: the one
 * oj_checkpoint_find chooses). The model config comes from its state.json
 * (the training config, with the vocabulary of its tokenizer when it names
 * one, as the trainer built it). */
static PyObject *py_gpt_load_checkpoint(PyObject *mod, PyObject *args) {
    const char *path;
    PyObject *eo = Py_None;
    if (!PyArg_ParseTuple(args, "s|O:gpt_load_checkpoint", &path, &eo)) return NULL;
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return NULL;
    char dir[4096];
    oj_error err = {0};
    oj_train_config tc = oj_train_config_default();
    oj_gpt_config mc;
    int64_t vocab = 0;
    if (oj_checkpoint_find(path, dir, sizeof dir, NULL, NULL, &err) != OJ_OK ||
        oj_train_config_from_checkpoint(dir, &tc, &err) != OJ_OK)
        return ojpy_raise_status(err.status, err.message);
    if (tc.tokenizer_dir[0]) {
        oj_tokenizer *tok = NULL;
        if (oj_tokenizer_load(tc.tokenizer_dir, &tok, &err) != OJ_OK)
            return ojpy_raise_status(err.status, err.message);
        vocab = oj_tokenizer_vocab_size(tok);
        oj_tokenizer_free(tok);
    }
    if (oj_train_model_config(&tc, vocab, &mc, &err) != OJ_OK)
        return ojpy_raise_status(err.status, err.message);
    oj_gpt *m = NULL;
    if (oj_gpt_create(e->eng, &mc, tc.seed, &m) != OJ_OK) return ojpy_raise_engine(e->eng, "GPT");
    oj_named_tensors sd = oj_gpt_state_dict(m);
    if (oj_checkpoint_load(dir, &sd, NULL, NULL, &err) != OJ_OK) {
        oj_gpt_free(m);
        return ojpy_raise_status(err.status, err.message);
    }
    return ojpy_gpt_wrap(m, e, NULL);
}

/* ------------------------------------------------------------ GPT methods */

static PyObject *gpt_config(GPTObject *g, PyObject *u) {
    oj_gpt *m = gpt_open(g);
    return m ? config_to_dict(oj_gpt_get_config(m)) : NULL;
}

/* A new Tensor holding a borrowed tensor t of g's engine (one more owner
 * reference). */
static PyObject *wrap_borrowed(GPTObject *g, oj_tensor *t) {
    return ojpy_wrap(oj_retain(t), g->eng);
}

static PyObject *gpt_state_dict(GPTObject *g, PyObject *u) {
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_named_tensors sd = oj_gpt_state_dict(m);
    PyObject *d = PyDict_New();
    for (int64_t i = 0; d && i < sd.n; i++) {
        PyObject *t = wrap_borrowed(g, sd.tensors[i]);
        if (t == NULL || PyDict_SetItemString(d, sd.names[i], t) < 0) Py_CLEAR(d);
        Py_XDECREF(t);
    }
    return d;
}

static PyObject *gpt_num_params(GPTObject *g, PyObject *u) {
    oj_gpt *m = gpt_open(g);
    return m ? PyLong_FromLongLong(oj_gpt_num_params(m)) : NULL;
}

static PyObject *gpt_flops_per_token(GPTObject *g, PyObject *args) {
    long long T;
    if (!PyArg_ParseTuple(args, "L:flops_per_token", &T)) return NULL;
    oj_gpt *m = gpt_open(g);
    return m ? PyFloat_FromDouble(oj_gpt_flops_per_token(m, T)) : NULL;
}

static PyObject *gpt_forward(GPTObject *g, PyObject *args) {
    PyObject *idx;
    if (!PyArg_ParseTuple(args, "O:forward", &idx)) return NULL;
    oj_gpt *m = gpt_open(g);
    oj_tensor *ti = m ? ojpy_tensor_of(idx, "idx") : NULL;
    if (ti == NULL) return NULL;
    return ojpy_wrap(oj_gpt_forward(m, ti), g->eng);
}

static PyObject *gpt_loss(GPTObject *g, PyObject *args) {
    PyObject *idx, *tgt;
    if (!PyArg_ParseTuple(args, "OO:loss", &idx, &tgt)) return NULL;
    oj_gpt *m = gpt_open(g);
    oj_tensor *ti = m ? ojpy_tensor_of(idx, "idx") : NULL;
    oj_tensor *tt = ti ? ojpy_tensor_of(tgt, "targets") : NULL;
    if (tt == NULL) return NULL;
    return ojpy_wrap(oj_gpt_loss(m, ti, tt), g->eng);
}

static PyObject *gpt_to_dtype(GPTObject *g, PyObject *args) {
    PyObject *dto;
    if (!PyArg_ParseTuple(args, "O:to_dtype", &dto)) return NULL;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    int dt = ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    if (oj_gpt_to_dtype(m, (oj_dtype)dt) != OJ_OK) return ojpy_raise_engine(g->eng->eng, "to");
    Py_RETURN_NONE;
}

static PyObject *gpt_load_safetensors(GPTObject *g, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s:load_safetensors", &path)) return NULL;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_error err = {0};
    if (oj_gpt_load_safetensors(m, path, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    Py_RETURN_NONE;
}

/* A token list (a sequence of ints) into a new int32 array of *n; NULL with
 * an exception. */
static int32_t *tokens_arg(PyObject *o, int64_t *n, const char *what) {
    PyObject *seq = PySequence_Fast(o, what);
    if (seq == NULL) return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int32_t *ids = PyMem_Malloc(((size_t)len + 1) * sizeof *ids);
    if (ids == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if ((v == -1 && PyErr_Occurred()) || v < INT32_MIN || v > INT32_MAX) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_OverflowError, "%s: token id out of int32", what);
            PyMem_Free(ids);
            Py_DECREF(seq);
            return NULL;
        }
        ids[i] = (int32_t)v;
    }
    Py_DECREF(seq);
    *n = len;
    return ids;
}

static PyObject *ids_to_list(const int32_t *ids, int64_t n) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (int64_t i = 0; l && i < n; i++) {
        PyObject *v = PyLong_FromLong(ids[i]);
        if (v == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

typedef struct {
    PyObject *fn; /* callable(seq, token) -> bool-ish, or NULL */
    int failed;   /* the callback raised: stop every sequence */
} gen_ctx;

/* Also runs a pending signal's Python handler: generate holds the GIL, so
 * Ctrl-C is only flagged until then; its KeyboardInterrupt stops every
 * sequence and propagates. */
static bool gen_on_token(int64_t seq, int32_t token, void *p) {
    gen_ctx *c = p;
    if (c->failed) return false;
    if (PyErr_CheckSignals() < 0) {
        c->failed = 1;
        return false;
    }
    if (c->fn == NULL) return true;
    PyObject *r = PyObject_CallFunction(c->fn, "Li", (long long)seq, (int)token);
    if (r == NULL) {
        c->failed = 1;
        return false;
    }
    int keep = r == Py_None ? 1 : PyObject_IsTrue(r);
    Py_DECREF(r);
    if (keep < 0) {
        c->failed = 1;
        return false;
    }
    return keep != 0;
}

/* generate(prompts, temperature, top_k, top_p, repetition_penalty, seed,
 * max_new_tokens, stop_token, on_token) -> list of lists (oj_generate). */
static PyObject *gpt_generate(GPTObject *g, PyObject *args) {
    PyObject *prompts, *fn;
    oj_sampler_config sc = oj_sampler_config_default();
    long long top_k, max_new;
    unsigned long long seed;
    int stop;
    if (!PyArg_ParseTuple(args, "OdLddKLiO:generate", &prompts, &sc.temperature, &top_k,
                          &sc.top_p, &sc.repetition_penalty, &seed, &max_new, &stop, &fn))
        return NULL;
    sc.top_k = top_k;
    sc.seed = seed;
    sc.max_new_tokens = max_new;
    sc.stop_token = stop;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    PyObject *seq = PySequence_Fast(prompts, "generate: prompts must be a list of token lists");
    if (seq == NULL) return NULL;
    Py_ssize_t B = PySequence_Fast_GET_SIZE(seq);
    PyObject *res = NULL;
    int32_t **ps = PyMem_Calloc((size_t)B + 1, sizeof *ps);
    int64_t *lens = PyMem_Calloc((size_t)B + 1, sizeof *lens);
    int32_t **outs = PyMem_Calloc((size_t)B + 1, sizeof *outs);
    int64_t *olens = PyMem_Calloc((size_t)B + 1, sizeof *olens);
    if (!ps || !lens || !outs || !olens) {
        PyErr_NoMemory();
        goto out;
    }
    if (B == 0) {
        ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "generate: no prompts");
        goto out;
    }
    for (Py_ssize_t i = 0; i < B; i++)
        if ((ps[i] = tokens_arg(PySequence_Fast_GET_ITEM(seq, i), &lens[i], "generate: prompt")) == NULL)
            goto out;
    gen_ctx ctx = {.fn = fn == Py_None ? NULL : fn};
    /* the call holds the engine like a view: on_token closing it (or the
     * Trainer that owns the model) waits for generate's end */
    EngineObject *eng = ojpy_engine_call_begin(g->eng);
    oj_status st = oj_generate(m, B, (const int32_t *const *)ps, lens, &sc, outs, olens,
                               gen_on_token, &ctx);
    if (ctx.failed) oj_clear_error(eng->eng);
    else if (st != OJ_OK) ojpy_raise_engine(eng->eng, "generate");
    ojpy_engine_call_end(eng); /* a close asked for in on_token happens here */
    if (ctx.failed || st != OJ_OK) goto out;
    res = PyList_New(B);
    for (Py_ssize_t i = 0; res && i < B; i++) {
        PyObject *l = ids_to_list(outs[i], olens[i]);
        if (l == NULL) Py_CLEAR(res);
        else PyList_SET_ITEM(res, i, l);
    }
out:
    for (Py_ssize_t i = 0; i < B; i++) {
        if (ps) PyMem_Free(ps[i]);
        if (outs) free(outs[i]);
    }
    PyMem_Free(ps);
    PyMem_Free(lens);
    PyMem_Free(outs);
    PyMem_Free(olens);
    Py_DECREF(seq);
    return res;
}

static PyObject *gpt_kv_cache(GPTObject *g, PyObject *args) {
    long long batch, cap;
    if (!PyArg_ParseTuple(args, "LL:kv_cache", &batch, &cap)) return NULL;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_kv_cache *c = NULL;
    if (oj_kv_cache_create(m, batch, cap, &c) != OJ_OK) return ojpy_raise_engine(g->eng->eng, "kv_cache");
    KVCacheObject *k = PyObject_New(KVCacheObject, &KVCache_Type);
    if (k == NULL) {
        oj_kv_cache_free(c);
        return NULL;
    }
    k->c = c;
    k->gpt = (GPTObject *)Py_NewRef((PyObject *)g);
    ojpy_engine_exports(g->eng, +1);
    return (PyObject *)k;
}

static PyObject *gpt_decoder(GPTObject *g, PyObject *args) {
    long long cap;
    int graph = 1;
    if (!PyArg_ParseTuple(args, "L|p:decoder", &cap, &graph)) return NULL;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_gpt_decoder *d = NULL;
    if (oj_gpt_decoder_create(m, cap, graph, &d) != OJ_OK) return ojpy_raise_engine(g->eng->eng, "decoder");
    DecoderObject *o = PyObject_New(DecoderObject, &Decoder_Type);
    if (o == NULL) {
        oj_gpt_decoder_free(d);
        return NULL;
    }
    o->d = d;
    o->gpt = (GPTObject *)Py_NewRef((PyObject *)g);
    ojpy_engine_exports(g->eng, +1);
    return (PyObject *)o;
}

static PyObject *gpt_save_hf_dir(GPTObject *g, PyObject *args) {
    const char *dir;
    long long vocab = 0;
    if (!PyArg_ParseTuple(args, "s|L:save_hf_dir", &dir, &vocab)) return NULL;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_error err = {0};
    if (oj_gpt_save_hf_dir(m, dir, vocab, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    Py_RETURN_NONE;
}

/* lora_load(dir) / lora_save(dir, base) / lora_merge(): PEFT adapters
 * (oj_gpt_lora_load / _save / _merge, include/ojas/gpt.h). */
static PyObject *gpt_lora_load(GPTObject *g, PyObject *args) {
    const char *dir;
    if (!PyArg_ParseTuple(args, "s:lora_load", &dir)) return NULL;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_error err = {0};
    if (oj_gpt_lora_load(m, dir, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    Py_RETURN_NONE;
}

static PyObject *gpt_lora_save(GPTObject *g, PyObject *args) {
    const char *dir, *base = "";
    if (!PyArg_ParseTuple(args, "s|s:lora_save", &dir, &base)) return NULL;
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_error err = {0};
    if (oj_gpt_lora_save(m, dir, base, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    Py_RETURN_NONE;
}

static PyObject *gpt_lora_merge(GPTObject *g, PyObject *unused) {
    oj_gpt *m = gpt_open(g);
    if (m == NULL) return NULL;
    oj_error err = {0};
    if (oj_gpt_lora_merge(m, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    Py_RETURN_NONE;
}

static PyObject *gpt_get_engine(GPTObject *g, void *c) { return Py_NewRef((PyObject *)g->eng); }

static PyGetSetDef gpt_getset[] = {
    {"engine", (getter)gpt_get_engine, NULL, "the engine of the parameters", NULL},
    {NULL},
};

static PyMethodDef gpt_methods[] = {
    {"config", (PyCFunction)gpt_config, METH_NOARGS, "the model config as a dict"},
    {"state_dict", (PyCFunction)gpt_state_dict, METH_NOARGS, "name -> parameter Tensor (shared)"},
    {"num_params", (PyCFunction)gpt_num_params, METH_NOARGS, "parameters (tied counted once)"},
    {"flops_per_token", (PyCFunction)gpt_flops_per_token, METH_VARARGS, "6N + 12LTC"},
    {"forward", (PyCFunction)gpt_forward, METH_VARARGS, "forward(idx [B, T]) -> logits [B, T, V]"},
    {"loss", (PyCFunction)gpt_loss, METH_VARARGS, "loss(idx, targets) -> mean cross-entropy"},
    {"to_dtype", (PyCFunction)gpt_to_dtype, METH_VARARGS, "convert the parameters in place"},
    {"load_safetensors", (PyCFunction)gpt_load_safetensors, METH_VARARGS, "load a weights file"},
    {"lora_load", (PyCFunction)gpt_lora_load, METH_VARARGS, "lora_load(dir): a PEFT adapter"},
    {"lora_save", (PyCFunction)gpt_lora_save, METH_VARARGS, "lora_save(dir, base='')"},
    {"lora_merge", (PyCFunction)gpt_lora_merge, METH_NOARGS, "fold the adapters into the weights"},
    {"save_hf_dir", (PyCFunction)gpt_save_hf_dir, METH_VARARGS,
     "save_hf_dir(dir, vocab_size=0): oj_gpt_save_hf_dir (config.json + model.safetensors)"},
    {"generate", (PyCFunction)gpt_generate, METH_VARARGS, "oj_generate; see ojas.models"},
    {"kv_cache", (PyCFunction)gpt_kv_cache, METH_VARARGS, "kv_cache(batch, capacity)"},
    {"decoder", (PyCFunction)gpt_decoder, METH_VARARGS, "decoder(capacity, use_graph=True)"},
    {NULL},
};

static PyTypeObject GPT_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.GPT",
    .tp_basicsize = sizeof(GPTObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An oj_gpt; made by gpt_create, gpt_load_dir, gpt_load_checkpoint or a Trainer.",
    .tp_dealloc = (destructor)gpt_dealloc,
    .tp_methods = gpt_methods,
    .tp_getset = gpt_getset,
};

/* ------------------------------------------------------------ KVCache */

static void kv_dealloc(KVCacheObject *k) {
    if (k->c) {
        oj_kv_cache_free(k->c); /* the engine is open: this object is a view of it */
        k->c = NULL;
        ojpy_engine_exports(k->gpt->eng, -1);
    }
    Py_CLEAR(k->gpt);
    PyObject_Free(k);
}

static PyObject *kv_forward(KVCacheObject *k, PyObject *args) {
    PyObject *idx;
    if (!PyArg_ParseTuple(args, "O:forward", &idx)) return NULL;
    oj_gpt *m = gpt_open(k->gpt);
    oj_tensor *ti = m ? ojpy_tensor_of(idx, "idx") : NULL;
    if (ti == NULL) return NULL;
    return ojpy_wrap(oj_gpt_forward_cached(m, k->c, ti), k->gpt->eng);
}

static PyObject *kv_len(KVCacheObject *k, PyObject *u) {
    if (gpt_open(k->gpt) == NULL) return NULL;
    return PyLong_FromLongLong(oj_kv_cache_len(k->c));
}

static PyObject *kv_reset(KVCacheObject *k, PyObject *u) {
    if (gpt_open(k->gpt) == NULL) return NULL;
    oj_kv_cache_reset(k->c);
    Py_RETURN_NONE;
}

static PyMethodDef kv_methods[] = {
    {"forward", (PyCFunction)kv_forward, METH_VARARGS,
     "forward(idx [B, T]) -> logits [B, T, V] of the new positions (oj_gpt_forward_cached)"},
    {"len", (PyCFunction)kv_len, METH_NOARGS, "positions filled"},
    {"reset", (PyCFunction)kv_reset, METH_NOARGS, "empty the cache"},
    {NULL},
};

static PyTypeObject KVCache_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.KVCache",
    .tp_basicsize = sizeof(KVCacheObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An oj_kv_cache of a GPT (GPT.kv_cache).",
    .tp_dealloc = (destructor)kv_dealloc,
    .tp_methods = kv_methods,
};

/* ------------------------------------------------------------ Decoder */

static void dec_dealloc(DecoderObject *d) {
    if (d->d) {
        oj_gpt_decoder_free(d->d); /* the engine is open: this object is a view of it */
        d->d = NULL;
        ojpy_engine_exports(d->gpt->eng, -1);
    }
    Py_CLEAR(d->gpt);
    PyObject_Free(d);
}

static PyObject *dec_prefill(DecoderObject *d, PyObject *args) {
    PyObject *p;
    if (!PyArg_ParseTuple(args, "O:prefill", &p)) return NULL;
    if (gpt_open(d->gpt) == NULL) return NULL;
    int64_t n;
    int32_t *ids = tokens_arg(p, &n, "prefill: prompt"), next = -1;
    if (ids == NULL) return NULL;
    oj_status st = oj_gpt_decoder_prefill(d->d, ids, n, &next);
    PyMem_Free(ids);
    if (st != OJ_OK) return ojpy_raise_engine(d->gpt->eng->eng, "prefill");
    return PyLong_FromLong(next);
}

static PyObject *dec_step(DecoderObject *d, PyObject *u) {
    if (gpt_open(d->gpt) == NULL) return NULL;
    int32_t next = -1;
    if (oj_gpt_decoder_step(d->d, &next) != OJ_OK) return ojpy_raise_engine(d->gpt->eng->eng, "step");
    return PyLong_FromLong(next);
}

static PyObject *dec_set_token(DecoderObject *d, PyObject *args) {
    int tok;
    if (!PyArg_ParseTuple(args, "i:set_token", &tok)) return NULL;
    if (gpt_open(d->gpt) == NULL) return NULL;
    if (oj_gpt_decoder_set_token(d->d, tok) != OJ_OK) return ojpy_raise_engine(d->gpt->eng->eng, "set_token");
    Py_RETURN_NONE;
}

/* A copy of the last logits (the decoder reuses its buffer). */
static PyObject *dec_logits(DecoderObject *d, PyObject *u) {
    if (gpt_open(d->gpt) == NULL) return NULL;
    oj_tensor *t = oj_gpt_decoder_logits(d->d);
    if (t == NULL) return ojpy_raise_status(OJ_ERR_STATE, "Decoder.logits: no prefill yet");
    return ojpy_wrap(oj_clone(t), d->gpt->eng);
}

static PyObject *dec_len(DecoderObject *d, PyObject *u) {
    if (gpt_open(d->gpt) == NULL) return NULL;
    return PyLong_FromLongLong(oj_gpt_decoder_len(d->d));
}

static PyMethodDef dec_methods[] = {
    {"prefill", (PyCFunction)dec_prefill, METH_VARARGS, "prefill(prompt) -> greedy next token"},
    {"step", (PyCFunction)dec_step, METH_NOARGS, "step() -> greedy next token"},
    {"set_token", (PyCFunction)dec_set_token, METH_VARARGS, "replace the pending token"},
    {"logits", (PyCFunction)dec_logits, METH_NOARGS, "a copy of the last logits [1, 1, V]"},
    {"len", (PyCFunction)dec_len, METH_NOARGS, "positions in the cache"},
    {NULL},
};

static PyTypeObject Decoder_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.Decoder",
    .tp_basicsize = sizeof(DecoderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An oj_gpt_decoder: greedy static decoding of one sequence (GPT.decoder).",
    .tp_dealloc = (destructor)dec_dealloc,
    .tp_methods = dec_methods,
};

/* sample_logits(logits list/bytes of f32, temperature, top_k, top_p,
 * repetition_penalty, history, u) -> token (oj_sample_logits). */
static PyObject *py_sample_logits(PyObject *mod, PyObject *args) {
    Py_buffer buf;
    double temp, top_p, pen, u;
    long long top_k;
    PyObject *hist;
    if (!PyArg_ParseTuple(args, "y*dLddOd:sample_logits", &buf, &temp, &top_k, &top_p, &pen,
                          &hist, &u))
        return NULL;
    int64_t n = 0;
    int32_t *h = tokens_arg(hist, &n, "sample_logits: history");
    if (h == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    oj_sampler_config sc = oj_sampler_config_default();
    sc.temperature = temp;
    sc.top_k = top_k;
    sc.top_p = top_p;
    sc.repetition_penalty = pen;
    int32_t tok = oj_sample_logits(buf.buf, buf.len / (Py_ssize_t)sizeof(float), &sc, h, n, u);
    PyMem_Free(h);
    PyBuffer_Release(&buf);
    return PyLong_FromLong(tok);
}

static PyMethodDef models_methods[] = {
    {"gpt_config", py_gpt_config, METH_VARARGS, "gpt_config(preset=None, overrides=None) -> dict"},
    {"gpt_presets", py_gpt_presets, METH_NOARGS, "the preset names"},
    {"gpt_config_from_hf", py_gpt_config_from_hf, METH_VARARGS,
     "gpt_config_from_hf(config.json) -> dict"},
    {"gpt_create", py_gpt_create, METH_VARARGS, "gpt_create(config, seed=0, engine=None) -> GPT"},
    {"gpt_load_dir", py_gpt_load_dir, METH_VARARGS, "gpt_load_dir(dir, engine=None) -> GPT"},
    {"gpt_load_checkpoint", py_gpt_load_checkpoint, METH_VARARGS,
     "gpt_load_checkpoint(path, engine=None) -> GPT"},
    {"sample_logits", py_sample_logits, METH_VARARGS,
     "sample_logits(f32 bytes, temperature, top_k, top_p, penalty, history, u) -> token"},
    {NULL},
};

int ojpy_models_init(PyObject *m) {
    if (PyType_Ready(&GPT_Type) < 0 || PyType_Ready(&KVCache_Type) < 0 ||
        PyType_Ready(&Decoder_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "GPT", (PyObject *)&GPT_Type) < 0 ||
        PyModule_AddObjectRef(m, "KVCache", (PyObject *)&KVCache_Type) < 0 ||
        PyModule_AddObjectRef(m, "Decoder", (PyObject *)&Decoder_Type) < 0)
        return -1;
    return PyModule_AddFunctions(m, models_methods);
}
