/* ojas._C.Tokenizer, shards and Loader: include/ojas/data.h from Python.
 * ojas/data.py gives them their Python names. Token lists cross as Python
 * lists of ints, or as bytes of int32 (shard reads, for numpy). */
#include <stdlib.h>
#include <string.h>

#include "ojas/data.h"

#include "ojas_py.h"

static PyObject *raise_err(const oj_error *err) { return ojpy_raise_status(err->status, err->message); }

/* ------------------------------------------------------------ Tokenizer */

typedef struct {
    PyObject_HEAD
    oj_tokenizer *tok;
} TokenizerObject;

static PyTypeObject Tokenizer_Type;

static PyObject *tok_wrap(oj_tokenizer *tok) {
    TokenizerObject *o = PyObject_New(TokenizerObject, &Tokenizer_Type);
    if (o == NULL) {
        oj_tokenizer_free(tok);
        return NULL;
    }
    o->tok = tok;
    return (PyObject *)o;
}

static void tok_dealloc(TokenizerObject *o) {
    oj_tokenizer_free(o->tok);
    PyObject_Free(o);
}

/* tokenizer_load(dir) (oj_tokenizer_load), tokenizer_load_hf(path)
 * (tokenizer.json), tokenizer_load_gpt2(encoder_json, vocab_bpe). */
static PyObject *py_tokenizer_load(PyObject *m, PyObject *args) {
    const char *dir;
    if (!PyArg_ParseTuple(args, "s:tokenizer_load", &dir)) return NULL;
    oj_tokenizer *t = NULL;
    oj_error err = {0};
    if (oj_tokenizer_load(dir, &t, &err) != OJ_OK) return raise_err(&err);
    return tok_wrap(t);
}

static PyObject *py_tokenizer_load_hf(PyObject *m, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s:tokenizer_load_hf", &path)) return NULL;
    oj_tokenizer *t = NULL;
    oj_error err = {0};
    if (oj_tokenizer_load_hf(path, &t, &err) != OJ_OK) return raise_err(&err);
    return tok_wrap(t);
}

static PyObject *py_tokenizer_load_gpt2(PyObject *m, PyObject *args) {
    const char *enc, *bpe;
    if (!PyArg_ParseTuple(args, "ss:tokenizer_load_gpt2", &enc, &bpe)) return NULL;
    oj_tokenizer *t = NULL;
    oj_error err = {0};
    if (oj_tokenizer_load_gpt2(enc, bpe, &t, &err) != OJ_OK) return raise_err(&err);
    return tok_wrap(t);
}

/* bpe_train(texts, vocab_size, min_frequency, threads) -> Tokenizer. */
static PyObject *py_bpe_train(PyObject *m, PyObject *args) {
    PyObject *texts;
    int vocab, threads;
    long long minf;
    if (!PyArg_ParseTuple(args, "OiLi:bpe_train", &texts, &vocab, &minf, &threads)) return NULL;
    PyObject *seq = PySequence_Fast(texts, "bpe_train: texts must be a list of str or bytes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **tv = PyMem_Calloc((size_t)n + 1, sizeof *tv);
    size_t *lv = PyMem_Calloc((size_t)n + 1, sizeof *lv);
    PyObject *res = NULL;
    if (!tv || !lv) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t len;
        if (PyUnicode_Check(x)) tv[i] = PyUnicode_AsUTF8AndSize(x, &len);
        else if (PyBytes_AsStringAndSize(x, (char **)&tv[i], &len) < 0) tv[i] = NULL;
        if (tv[i] == NULL) goto out;
        lv[i] = (size_t)len;
    }
    oj_bpe_train_config cfg = oj_bpe_train_config_default();
    cfg.vocab_size = vocab;
    cfg.min_frequency = minf;
    cfg.threads = threads;
    oj_tokenizer *t = NULL;
    oj_error err = {0};
    if (oj_bpe_train(&cfg, (size_t)n, tv, lv, &t, &err) != OJ_OK) raise_err(&err);
    else res = tok_wrap(t);
out:
    PyMem_Free(tv);
    PyMem_Free(lv);
    Py_DECREF(seq);
    return res;
}

static PyObject *ids_list(const oj_tokens *t) {
    PyObject *l = PyList_New((Py_ssize_t)t->len);
    for (size_t i = 0; l && i < t->len; i++) {
        PyObject *v = PyLong_FromLong(t->ids[i]);
        if (v == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

/* encode(text str|bytes, flags) -> list of ids. */
static PyObject *tok_encode(TokenizerObject *o, PyObject *args) {
    PyObject *x;
    unsigned flags;
    if (!PyArg_ParseTuple(args, "OI:encode", &x, &flags)) return NULL;
    const char *s;
    Py_ssize_t len;
    if (PyUnicode_Check(x)) {
        if ((s = PyUnicode_AsUTF8AndSize(x, &len)) == NULL) return NULL;
    } else if (PyBytes_Check(x)) {
        s = PyBytes_AS_STRING(x);
        len = PyBytes_GET_SIZE(x);
    } else {
        PyErr_Format(PyExc_TypeError, "encode: text must be str or bytes, not %.80s",
                     Py_TYPE(x)->tp_name);
        return NULL;
    }
    oj_tokens t = {0};
    oj_error err = {0};
    oj_status st;
    Py_BEGIN_ALLOW_THREADS
    st = oj_tokenizer_encode(o->tok, s, (size_t)len, flags, &t, &err);
    Py_END_ALLOW_THREADS
    PyObject *res = st == OJ_OK ? ids_list(&t) : raise_err(&err);
    oj_tokens_free(&t);
    return res;
}

/* decode(ids, flags) -> bytes (the caller makes str of them). */
static PyObject *tok_decode(TokenizerObject *o, PyObject *args) {
    PyObject *ids;
    unsigned flags;
    if (!PyArg_ParseTuple(args, "OI:decode", &ids, &flags)) return NULL;
    PyObject *seq = PySequence_Fast(ids, "decode: ids must be a sequence of ints");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int32_t *v = PyMem_Malloc(((size_t)n + 1) * sizeof *v);
    PyObject *res = NULL;
    if (v == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long x = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (x == -1 && PyErr_Occurred()) goto out;
        if (x < INT32_MIN || x > INT32_MAX) {
            ojpy_raise_status(OJ_ERR_OUT_OF_RANGE, "decode: a token id is out of int32");
            goto out;
        }
        v[i] = (int32_t)x;
    }
    char *text = NULL;
    size_t len = 0;
    oj_error err = {0};
    if (oj_tokenizer_decode(o->tok, v, (size_t)n, flags, &text, &len, &err) != OJ_OK) raise_err(&err);
    else res = PyBytes_FromStringAndSize(text, (Py_ssize_t)len);
    free(text);
out:
    PyMem_Free(v);
    Py_DECREF(seq);
    return res;
}

static PyObject *tok_vocab_size(TokenizerObject *o, PyObject *u) {
    return PyLong_FromLong(oj_tokenizer_vocab_size(o->tok));
}

static PyObject *tok_eot(TokenizerObject *o, PyObject *u) { return PyLong_FromLong(oj_tokenizer_eot(o->tok)); }

static PyObject *tok_special_id(TokenizerObject *o, PyObject *args) {
    const char *s;
    if (!PyArg_ParseTuple(args, "s:special_id", &s)) return NULL;
    return PyLong_FromLong(oj_tokenizer_special_id(o->tok, s));
}

static PyObject *tok_token_bytes(TokenizerObject *o, PyObject *args) {
    int id;
    if (!PyArg_ParseTuple(args, "i:token_bytes", &id)) return NULL;
    size_t len = 0;
    const uint8_t *b = oj_tokenizer_token_bytes(o->tok, id, &len);
    if (b == NULL) {
        char msg[96];
        snprintf(msg, sizeof msg, "token_bytes: unknown id %d", id);
        return ojpy_raise_status(OJ_ERR_OUT_OF_RANGE, msg);
    }
    return PyBytes_FromStringAndSize((const char *)b, (Py_ssize_t)len);
}

static PyObject *tok_save(TokenizerObject *o, PyObject *args) {
    const char *dir;
    if (!PyArg_ParseTuple(args, "s:save", &dir)) return NULL;
    oj_error err = {0};
    if (oj_tokenizer_save(o->tok, dir, &err) != OJ_OK) return raise_err(&err);
    Py_RETURN_NONE;
}

static PyMethodDef tok_methods[] = {
    {"encode", (PyCFunction)tok_encode, METH_VARARGS, "encode(text, flags) -> ids"},
    {"decode", (PyCFunction)tok_decode, METH_VARARGS, "decode(ids, flags) -> bytes"},
    {"vocab_size", (PyCFunction)tok_vocab_size, METH_NOARGS, "number of ids"},
    {"eot", (PyCFunction)tok_eot, METH_NOARGS, "id of <|endoftext|> or -1"},
    {"special_id", (PyCFunction)tok_special_id, METH_VARARGS, "id of a special token or -1"},
    {"token_bytes", (PyCFunction)tok_token_bytes, METH_VARARGS, "bytes of one id"},
    {"save", (PyCFunction)tok_save, METH_VARARGS, "save(dir): encoder.json, vocab.bpe, ranks"},
    {NULL},
};

static PyTypeObject Tokenizer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.Tokenizer",
    .tp_basicsize = sizeof(TokenizerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An oj_tokenizer (byte-level BPE); made by tokenizer_load* or bpe_train.",
    .tp_dealloc = (destructor)tok_dealloc,
    .tp_methods = tok_methods,
};

/* ------------------------------------------------------------ shards */

/* shard_write(path, buffer of int32, version) */
static PyObject *py_shard_write(PyObject *m, PyObject *args) {
    const char *path;
    Py_buffer b;
    int version;
    if (!PyArg_ParseTuple(args, "sy*i:shard_write", &path, &b, &version)) return NULL;
    oj_error err = {0};
    oj_status st = oj_shard_write(path, b.buf, b.len / 4, version, &err);
    PyBuffer_Release(&b);
    if (st != OJ_OK) return raise_err(&err);
    Py_RETURN_NONE;
}

/* shard_read(path, vocab_size) -> (version, bytes of int32 tokens). */
static PyObject *py_shard_read(PyObject *m, PyObject *args) {
    const char *path;
    long long vocab = 0;
    if (!PyArg_ParseTuple(args, "s|L:shard_read", &path, &vocab)) return NULL;
    oj_shard *s = NULL;
    oj_error err = {0};
    if (oj_shard_open(path, &s, &err) != OJ_OK) return raise_err(&err);
    PyObject *res = NULL;
    if (vocab > 0 && oj_shard_check_vocab(s, vocab, &err) != OJ_OK) {
        raise_err(&err);
        goto out;
    }
    int64_t n = oj_shard_len(s);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    if (bytes == NULL) goto out;
    if (oj_shard_read(s, 0, n, (int32_t *)PyBytes_AS_STRING(bytes), &err) != OJ_OK) {
        Py_DECREF(bytes);
        raise_err(&err);
        goto out;
    }
    res = Py_BuildValue("(iN)", oj_shard_version(s), bytes);
out:
    oj_shard_close(s);
    return res;
}

/* shard_list(dir, split) -> sorted paths of dir/<split>_*.bin */
static PyObject *py_shard_list(PyObject *m, PyObject *args) {
    const char *dir, *split;
    if (!PyArg_ParseTuple(args, "ss:shard_list", &dir, &split)) return NULL;
    char **paths = NULL;
    int n = 0;
    oj_error err = {0};
    if (oj_shard_list(dir, split, &paths, &n, &err) != OJ_OK) return raise_err(&err);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *s = PyUnicode_DecodeFSDefault(paths[i]);
        if (s == NULL) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, s);
    }
    oj_paths_free(paths, n);
    return l;
}

/* ------------------------------------------------------------ Loader */

typedef struct {
    PyObject_HEAD
    oj_loader *L;
    int64_t B, T;
    oj_dtype dt;
} LoaderObject;

static void loader_dealloc(LoaderObject *o) {
    oj_loader_free(o->L);
    PyObject_Free(o);
}

/* Loader(paths, B, T, rank, world_size, shuffle, seed, dtype, prefetch,
 * vocab_size) */
static PyObject *loader_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *paths, *dto;
    long long B, T, vocab;
    int rank, world, shuffle, prefetch;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OLLiipKOpL:Loader", &paths, &B, &T, &rank, &world, &shuffle,
                          &seed, &dto, &prefetch, &vocab))
        return NULL;
    int dt = ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    PyObject *seq = PySequence_Fast(paths, "Loader: paths must be a list of shard paths");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **pv = PyMem_Calloc((size_t)n + 1, sizeof *pv);
    LoaderObject *o = NULL;
    if (pv == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if ((pv[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i))) == NULL) goto out;
    oj_loader_config c = oj_loader_config_default();
    c.paths = pv;
    c.n_paths = (int)n;
    c.B = B;
    c.T = T;
    c.rank = rank;
    c.world_size = world;
    c.shuffle = shuffle;
    c.seed = seed;
    c.dtype = (oj_dtype)dt;
    c.prefetch = prefetch;
    c.vocab_size = vocab;
    oj_loader *L = NULL;
    oj_error err = {0};
    if (oj_loader_open(&c, &L, &err) != OJ_OK) {
        raise_err(&err);
        goto out;
    }
    o = (LoaderObject *)type->tp_alloc(type, 0);
    if (o == NULL) {
        oj_loader_free(L);
        goto out;
    }
    o->L = L;
    o->B = B;
    o->T = T;
    o->dt = (oj_dtype)dt;
out:
    PyMem_Free(pv);
    Py_DECREF(seq);
    return (PyObject *)o;
}

/* next(engine) -> (inputs, targets) Tensors [B, T]. */
static PyObject *loader_next(LoaderObject *o, PyObject *args) {
    PyObject *eo = Py_None;
    if (!PyArg_ParseTuple(args, "|O:next", &eo)) return NULL;
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return NULL;
    oj_tensor *x = NULL, *y = NULL;
    if (oj_loader_next(o->L, e->eng, &x, &y) != OJ_OK) return ojpy_raise_engine(e->eng, "Loader.next");
    PyObject *px = ojpy_wrap(x, e);
    if (px == NULL) {
        oj_release(y);
        return NULL;
    }
    PyObject *py = ojpy_wrap(y, e);
    if (py == NULL) {
        Py_DECREF(px);
        return NULL;
    }
    return Py_BuildValue("(NN)", px, py);
}

static PyObject *loader_state(LoaderObject *o, PyObject *u) {
    oj_loader_state s;
    oj_loader_get_state(o->L, &s);
    return Py_BuildValue("{s:K,s:K,s:K,s:L,s:L,s:L,s:i,s:i,s:O}", "seed",
                         (unsigned long long)s.seed, "epoch", (unsigned long long)s.epoch, "step",
                         (unsigned long long)s.step, "n_windows", (long long)s.n_windows, "B",
                         (long long)s.B, "T", (long long)s.T, "rank", (int)s.rank, "world_size",
                         (int)s.world_size, "shuffle", s.shuffle ? Py_True : Py_False);
}

static PyObject *loader_set_state(LoaderObject *o, PyObject *d) {
    oj_loader_state s;
    oj_loader_get_state(o->L, &s);
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "set_state: expected the dict of state()");
        return NULL;
    }
    static const char *keys[] = {"seed", "epoch", "step", "n_windows", "B", "T",
                                 "rank", "world_size", "shuffle"};
    long long v[9];
    for (int i = 0; i < 9; i++) {
        PyObject *x = PyDict_GetItemString(d, keys[i]);
        if (x == NULL) {
            char msg[96];
            snprintf(msg, sizeof msg, "set_state: the key '%s' is missing", keys[i]);
            return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, msg);
        }
        v[i] = i == 0 ? (long long)PyLong_AsUnsignedLongLongMask(x) : PyLong_AsLongLong(x);
        if (PyErr_Occurred()) return NULL;
    }
    s.seed = (uint64_t)v[0];
    s.epoch = (uint64_t)v[1];
    s.step = (uint64_t)v[2];
    s.n_windows = v[3];
    s.B = v[4];
    s.T = v[5];
    s.rank = (int32_t)v[6];
    s.world_size = (int32_t)v[7];
    s.shuffle = (int32_t)v[8];
    oj_error err = {0};
    if (oj_loader_set_state(o->L, &s, &err) != OJ_OK) return raise_err(&err);
    Py_RETURN_NONE;
}

static PyObject *loader_num_windows(LoaderObject *o, PyObject *u) {
    return PyLong_FromLongLong(oj_loader_num_windows(o->L));
}

static PyObject *loader_steps_per_epoch(LoaderObject *o, PyObject *u) {
    return PyLong_FromLongLong(oj_loader_steps_per_epoch(o->L));
}

static PyMethodDef loader_methods[] = {
    {"next", (PyCFunction)loader_next, METH_VARARGS, "next(engine=None) -> (inputs, targets)"},
    {"state", (PyCFunction)loader_state, METH_NOARGS, "the position of the next batch (a dict)"},
    {"set_state", (PyCFunction)loader_set_state, METH_O, "restore a state() dict"},
    {"num_windows", (PyCFunction)loader_num_windows, METH_NOARGS, "windows of T+1 tokens"},
    {"steps_per_epoch", (PyCFunction)loader_steps_per_epoch, METH_NOARGS, "batches per epoch"},
    {NULL},
};

static PyTypeObject Loader_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Loader(paths, B, T, rank, world_size, shuffle, seed, dtype, prefetch, vocab_size): "
              "an oj_loader.",
    .tp_new = loader_new,
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_methods = loader_methods,
};

static PyMethodDef data_methods[] = {
    {"tokenizer_load", py_tokenizer_load, METH_VARARGS, "tokenizer_load(dir) -> Tokenizer"},
    {"tokenizer_load_hf", py_tokenizer_load_hf, METH_VARARGS, "tokenizer.json -> Tokenizer"},
    {"tokenizer_load_gpt2", py_tokenizer_load_gpt2, METH_VARARGS,
     "tokenizer_load_gpt2(encoder_json, vocab_bpe) -> Tokenizer"},
    {"bpe_train", py_bpe_train, METH_VARARGS,
     "bpe_train(texts, vocab_size, min_frequency, threads) -> Tokenizer"},
    {"shard_write", py_shard_write, METH_VARARGS, "shard_write(path, int32 buffer, version)"},
    {"shard_read", py_shard_read, METH_VARARGS, "shard_read(path, vocab=0) -> (version, bytes)"},
    {"shard_list", py_shard_list, METH_VARARGS, "shard_list(dir, split) -> paths"},
    {NULL},
};

int ojpy_data_init(PyObject *m) {
    if (PyType_Ready(&Tokenizer_Type) < 0 || PyType_Ready(&Loader_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Tokenizer", (PyObject *)&Tokenizer_Type) < 0 ||
        PyModule_AddObjectRef(m, "Loader", (PyObject *)&Loader_Type) < 0)
        return -1;
    return PyModule_AddFunctions(m, data_methods);
}
