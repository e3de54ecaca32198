/* Shared declarations of the ojas CPython extension (ojas._C).
 *
 * Ownership: every ojas.Tensor holds one owner reference to an oj_tensor
 * created with no scope open, and a strong reference to its Engine object;
 * its deallocation releases the handle (oj_release), so a tensor lives as
 * long as its Python object. Engine.close() frees the C engine and
 * everything it still owns; tensors of a closed engine raise
 * ojas.StateError when used and release nothing when collected. */
#ifndef OJAS_PY_H
#define OJAS_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ojas/autograd.h"
#include "ojas/core.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"

typedef struct EngineObject {
    PyObject_HEAD
    oj_engine *eng;             /* NULL once closed */
    struct EngineObject *prev;  /* default engine before __enter__ (owned) */
    int entered;
    Py_ssize_t exports;         /* live buffer views and DLPack capsules */
    int close_pending;          /* __exit__ with exports: close at the last */
    /* An engine owned by something else (a Trainer's): closing it calls
     * on_close(on_close_ctx), which frees the engine with its owner, instead
     * of oj_engine_free; close() and __exit__ leave it to the owner. */
    void (*on_close)(void *ctx);
    void *on_close_ctx;
} EngineObject;

typedef struct TensorObject {
    PyObject_HEAD
    oj_tensor *t;        /* owner reference */
    EngineObject *eng;   /* strong reference */
} TensorObject;

extern PyTypeObject OjpyEngine_Type;
extern PyTypeObject OjpyTensor_Type;
/* The class new tensors get: ojas.Tensor (a Python subclass registered by
 * ojas/__init__.py through _C._set_tensor_class), else _C.TensorBase. */
extern PyTypeObject *ojpy_tensor_class;
/* dtype objects indexed by oj_dtype (registered by _C._set_dtypes). */
extern PyObject *ojpy_dtypes[OJ_DTYPE_COUNT];

/* errors.c: exception classes and raising the engine's error. */
int ojpy_errors_init(PyObject *m);
/* Raise the exception of status st with message msg. Returns NULL. */
PyObject *ojpy_raise_status(oj_status st, const char *msg);
/* Raise the error recorded on eng (clearing it); a generic ojas.Error naming
 * `what` when none is recorded. Returns NULL. */
PyObject *ojpy_raise_engine(oj_engine *eng, const char *what);
/* Raise ojas.StateError for a closed engine. Returns NULL. */
PyObject *ojpy_raise_closed(void);

/* engine.c */
int ojpy_engine_init(PyObject *m);
/* The current default engine (borrowed; created on first use); NULL with
 * an exception set when it cannot be opened. */
EngineObject *ojpy_default_engine(void);
/* Engine from an optional argument (None/NULL: default); borrowed. NULL
 * with an exception for a closed engine or another type. */
EngineObject *ojpy_engine_arg(PyObject *o);

/* Count a view of an engine's memory handed out (+1) or given back (-1);
 * an engine with views out refuses close() (their memory would go), and a
 * `with` block's end closes it when the last view is given back. */
void ojpy_engine_exports(EngineObject *e, int delta);
/* Hold e like a view for the length of a call that runs Python code
 * (callbacks): a close() asked for meanwhile waits for the call's end.
 * Returns e with one more reference and one more view; give it back with
 * ojpy_engine_call_end, which runs a close asked for in the call and drops
 * the reference (e may go with it). */
EngineObject *ojpy_engine_call_begin(EngineObject *e);
void ojpy_engine_call_end(EngineObject *e);

/* tensor.c */
int ojpy_tensor_init(PyObject *m);
/* New Tensor owning t (stolen owner reference), on engine e. t NULL, or
 * an error recorded on e (an op that returned a tensor and recorded an
 * error, as detect_anomaly does): releases t, raises e's error and
 * returns NULL. */
PyObject *ojpy_wrap(oj_tensor *t, EngineObject *e);
/* Tensor argument check: an open ojas Tensor. */
static inline int ojpy_is_tensor(PyObject *o) {
    return PyObject_TypeCheck(o, &OjpyTensor_Type);
}
/* The oj_tensor of an open Tensor, or NULL with TypeError / StateError. */
oj_tensor *ojpy_tensor_of(PyObject *o, const char *what);
/* A rank-0 tensor holding Python number v in the dtype an op of v with a
 * tensor of dtype like takes (torch's scalar promotion). New reference to
 * an oj_tensor (caller releases) or NULL with an exception. */
oj_tensor *ojpy_scalar_for(EngineObject *e, PyObject *v, oj_dtype like);
/* dtype from a Python dtype object or int code; -1 with an exception. */
int ojpy_dtype_arg(PyObject *o);

/* create.c: a shape from a sequence of ints (or one int) into shape[8];
 * returns the rank or -1 with an exception. */
int ojpy_shape_arg(PyObject *o, int64_t *shape, const char *what);
/* oj_dtype of a buffer-protocol format and itemsize; -1 if none. */
int ojpy_dtype_of_format(const char *fmt, Py_ssize_t itemsize);

/* ops.c: the raw op table. */
extern PyMethodDef ojpy_op_methods[];
/* create.c: creation functions. */
extern PyMethodDef ojpy_create_methods[];
/* dlpack.c */
extern PyMethodDef ojpy_dlpack_methods[];
PyObject *ojpy_tensor_dlpack(PyObject *self, PyObject *args, PyObject *kw);
PyObject *ojpy_tensor_dlpack_device(PyObject *self, PyObject *unused);
/* optim.c: the Optimizer type. */
int ojpy_optim_init(PyObject *m);
/* Close e now (no views out) or at the release of its last view. */
void ojpy_engine_close_when_free(EngineObject *e);
/* models.c: GPT, KVCache, Decoder, generate; data.c: Tokenizer, shards,
 * Loader; train.c: Trainer, LR schedules. */
int ojpy_models_init(PyObject *m);
/* A GPT object over model m on engine e; owner NULL: the object owns m
 * (oj_gpt_free) and holds a view of e; else m belongs to owner (kept alive). */
PyObject *ojpy_gpt_wrap(oj_gpt *m, EngineObject *e, PyObject *owner);
int ojpy_data_init(PyObject *m);
int ojpy_train_init(PyObject *m);
/* io.c: safetensors functions. */
int ojpy_io_init(PyObject *m);
/* index.c: Tensor.__getitem__ / __setitem__. */
PyObject *ojpy_getitem(PyObject *self, PyObject *key);
int ojpy_setitem(PyObject *self, PyObject *key, PyObject *value);

/* 'cpu' or 'cuda:N' (torch's form, the index always given); new reference. */
PyObject *ojpy_device_str(oj_device d);
#endif /* OJAS_PY_H */
