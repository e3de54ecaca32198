/* ojas._C.Optimizer: an oj_optim (include/ojas/optim.h: SGD, Adam, AdamW,
 * Muon as torch.optim computes them, all-or-nothing steps) over Tensor
 * parameters. It keeps its parameter objects alive (the C optimizer
 * borrows them) and counts as a view on its engine, so the engine is not
 * closed under it (ojpy_engine_exports). ojas/optim.py gives it torch's
 * classes. */
#include "ojas/optim.h"

#include "ojas_py.h"

typedef struct {
    PyObject_HEAD
    oj_optim *o;
    EngineObject *eng; /* strong */
    PyObject *params;  /* list of every Tensor added */
} OptimObject;

static int optim_init(OptimObject *self, PyObject *args, PyObject *kw) {
    PyObject *eo = Py_None;
    if (!PyArg_ParseTuple(args, "|O:Optimizer", &eo)) return -1;
    if (self->o != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Optimizer.__init__ called twice");
        return -1;
    }
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return -1;
    self->params = PyList_New(0);
    if (self->params == NULL) return -1;
    self->o = oj_optim_create(e->eng);
    if (self->o == NULL) {
        ojpy_raise_engine(e->eng, "Optimizer");
        return -1;
    }
    Py_INCREF(e);
    self->eng = e;
    ojpy_engine_exports(e, +1);
    return 0;
}

static void optim_dealloc(OptimObject *self) {
    if (self->o) {
        oj_optim_free(self->o);
        self->o = NULL;
        ojpy_engine_exports(self->eng, -1);
    }
    Py_CLEAR(self->params);
    Py_CLEAR(self->eng);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static oj_optim *open_optim(OptimObject *self) {
    if (self->o == NULL || self->eng->eng == NULL) {
        ojpy_raise_status(OJ_ERR_STATE, "the optimizer is not initialised or its engine closed");
        return NULL;
    }
    return self->o;
}

/* add_group(algo, names, params, lr, weight_decay, momentum, dampening,
 * nesterov, beta1, beta2, eps, ns_steps) -> group index */
static PyObject *optim_add_group(OptimObject *self, PyObject *args) {
    int algo, nesterov, ns;
    PyObject *names, *params;
    double lr, wd, mom, damp, b1, b2, eps;
    if (!PyArg_ParseTuple(args, "iO!O!ddddpdddi:add_group", &algo, &PyList_Type, &names,
                          &PyList_Type, &params, &lr, &wd, &mom, &damp, &nesterov, &b1, &b2, &eps,
                          &ns))
        return NULL;
    oj_optim *o = open_optim(self);
    if (o == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(params);
    if (PyList_GET_SIZE(names) != n) {
        PyErr_SetString(PyExc_ValueError, "add_group: names and params differ in length");
        return NULL;
    }
    const char **nm = PyMem_Calloc((size_t)n + 1, sizeof *nm);
    oj_tensor **ts = PyMem_Calloc((size_t)n + 1, sizeof *ts);
    PyObject *res = NULL;
    if (nm == NULL || ts == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        nm[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(names, i));
        ts[i] = nm[i] ? ojpy_tensor_of(PyList_GET_ITEM(params, i), "params[i]") : NULL;
        if (ts[i] == NULL) goto out;
    }
    oj_optim_hparams hp = {.algo = (oj_optim_algo)algo, .lr = lr, .weight_decay = wd,
                           .momentum = mom, .dampening = damp, .nesterov = nesterov,
                           .beta1 = b1, .beta2 = b2, .eps = eps, .ns_steps = ns};
    oj_named_tensors nt = {.n = n, .names = nm, .tensors = ts};
    int g = oj_optim_add_group(o, &hp, &nt);
    if (g < 0) {
        ojpy_raise_engine(self->eng->eng, "add_group");
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyList_Append(self->params, PyList_GET_ITEM(params, i)) < 0) goto out;
    res = PyLong_FromLong(g);
out:
    PyMem_Free(nm);
    PyMem_Free(ts);
    return res;
}

/* step() -> (applied, grad_norm, message): a skipped step (a non-finite
 * gradient or update) is reported, not raised, as the C API does. */
static PyObject *optim_step(OptimObject *self, PyObject *u) {
    oj_optim *o = open_optim(self);
    if (o == NULL) return NULL;
    oj_optim_step_info info = {0};
    oj_status st = oj_optim_step(o, &info);
    if (st != OJ_OK && st != OJ_ERR_NUMERIC) return ojpy_raise_engine(self->eng->eng, "step");
    return Py_BuildValue("(Nds)", PyBool_FromLong(st == OJ_OK), info.grad_norm,
                         oj_optim_message(o));
}

static PyObject *optim_zero_grad(OptimObject *self, PyObject *u) {
    oj_optim *o = open_optim(self);
    if (o == NULL) return NULL;
    oj_optim_zero_grad(o);
    Py_RETURN_NONE;
}

/* set_lr(group, lr), get_lr(group) */
static PyObject *optim_set_lr(OptimObject *self, PyObject *args) {
    int g;
    double lr;
    if (!PyArg_ParseTuple(args, "id:set_lr", &g, &lr)) return NULL;
    oj_optim *o = open_optim(self);
    if (o == NULL) return NULL;
    oj_optim_hparams *hp = oj_optim_group_hparams(o, g);
    if (hp == NULL) return ojpy_raise_status(OJ_ERR_OUT_OF_RANGE, "set_lr: no such group");
    if (!(lr > 0)) return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "set_lr: lr must be > 0");
    hp->lr = lr;
    Py_RETURN_NONE;
}

static PyObject *optim_counts(OptimObject *self, PyObject *u) {
    oj_optim *o = open_optim(self);
    if (o == NULL) return NULL;
    return Py_BuildValue("(LL)", (long long)oj_optim_steps(o), (long long)oj_optim_skipped_steps(o));
}

static PyObject *optim_save(OptimObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s:save", &path)) return NULL;
    oj_optim *o = open_optim(self);
    if (o == NULL) return NULL;
    oj_error err = {0};
    if (oj_optim_save(o, path, &err) != OJ_OK) {
        if (err.status != OJ_OK) return ojpy_raise_status(err.status, err.message);
        return ojpy_raise_engine(self->eng->eng, "save");
    }
    Py_RETURN_NONE;
}

static PyMethodDef optim_methods[] = {
    {"add_group", (PyCFunction)optim_add_group, METH_VARARGS,
     "add_group(algo, names, params, lr, weight_decay, momentum, dampening, nesterov, beta1, "
     "beta2, eps, ns_steps) -> group index (oj_optim_add_group)"},
    {"step", (PyCFunction)optim_step, METH_NOARGS, "step() -> (applied, grad_norm, message)"},
    {"zero_grad", (PyCFunction)optim_zero_grad, METH_NOARGS, "Drop every parameter's grad."},
    {"set_lr", (PyCFunction)optim_set_lr, METH_VARARGS, "set_lr(group, lr)"},
    {"counts", (PyCFunction)optim_counts, METH_NOARGS, "(steps applied, steps skipped)"},
    {"save", (PyCFunction)optim_save, METH_VARARGS, "save(path): the state as safetensors"},
    {NULL},
};

PyTypeObject OjpyOptim_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.Optimizer",
    .tp_basicsize = sizeof(OptimObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Optimizer(engine=None): an oj_optim; see ojas.optim.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)optim_init,
    .tp_dealloc = (destructor)optim_dealloc,
    .tp_methods = optim_methods,
};

/* clip_grad_norm(params, max_norm) -> the global L2 norm before clipping
 * (oj_clip_grad_norm: grads scaled by max_norm / (norm + 1e-6) when the
 * norm exceeds max_norm; a non-finite norm leaves them as they are). */
static PyObject *py_clip_grad_norm(PyObject *m, PyObject *args) {
    PyObject *list;
    double max_norm;
    if (!PyArg_ParseTuple(args, "O!d:clip_grad_norm", &PyList_Type, &list, &max_norm)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n == 0) return PyFloat_FromDouble(0.0);
    oj_tensor **ts = PyMem_Calloc((size_t)n, sizeof *ts);
    if (ts == NULL) return PyErr_NoMemory();
    PyObject *res = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        ts[i] = ojpy_tensor_of(PyList_GET_ITEM(list, i), "parameters[i]");
        if (ts[i] == NULL) goto out;
    }
    oj_engine *eng = ((TensorObject *)PyList_GET_ITEM(list, 0))->eng->eng;
    double norm = oj_clip_grad_norm(n, ts, max_norm);
    if (oj_last_status(eng) != OJ_OK) ojpy_raise_engine(eng, "clip_grad_norm");
    else res = PyFloat_FromDouble(norm);
out:
    PyMem_Free(ts);
    return res;
}

static PyMethodDef optim_module_methods[] = {
    {"clip_grad_norm", py_clip_grad_norm, METH_VARARGS,
     "clip_grad_norm(params, max_norm) -> total norm (oj_clip_grad_norm)"},
    {NULL},
};

int ojpy_optim_init(PyObject *m) {
    if (PyType_Ready(&OjpyOptim_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Optimizer", (PyObject *)&OjpyOptim_Type) < 0) return -1;
    return PyModule_AddFunctions(m, optim_module_methods);
}
