/* ojas.Engine: an oj_engine as a Python object (device, numerics, threads,
 * seed, memory budget, grad and anomaly modes, memory statistics), usable
 * as a context manager that makes it the default engine of creation
 * functions inside the block and closes it at the end. */
#include "ojas_py.h"

static EngineObject *current; /* the default engine (owned) */

static int engine_init(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"device", "numerics", "threads", "budget_bytes", "seed", NULL};
    const char *device = "cpu", *numerics = "fast";
    int threads = 0;
    long long budget = 0;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ssiLK:Engine", names, &device, &numerics, &threads,
                                     &budget, &seed))
        return -1;
    if (self->eng != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine.__init__ called twice");
        return -1;
    }
    oj_engine_config cfg = oj_engine_config_default();
    if (!oj_device_parse(device, &cfg.device)) {
        char msg[200];
        snprintf(msg, sizeof msg, "Engine: unknown device '%.64s' (expected cpu, cuda or cuda:N)",
                 device);
        ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, msg);
        return -1;
    }
    if (strcmp(numerics, "fast") == 0) cfg.numerics = OJ_NUMERICS_FAST;
    else if (strcmp(numerics, "exact") == 0) cfg.numerics = OJ_NUMERICS_EXACT;
    else {
        char msg[200];
        snprintf(msg, sizeof msg, "Engine: unknown numerics '%.64s' (expected fast or exact)",
                 numerics);
        ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, msg);
        return -1;
    }
    if (threads < 0 || budget < 0) {
        ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT,
                          "Engine: threads and budget_bytes must be >= 0 (0: the default)");
        return -1;
    }
    cfg.threads = threads;
    cfg.budget_bytes = budget;
    cfg.seed = seed;
    oj_error err = {0};
    oj_status st = oj_engine_create(&cfg, &self->eng, &err);
    if (st != OJ_OK) {
        ojpy_raise_status(st, err.message);
        return -1;
    }
    return 0;
}

static void engine_close_c(EngineObject *self) {
    if (self->eng == NULL) return;
    oj_engine *e = self->eng;
    self->eng = NULL; /* tensors see a closed engine from here on */
    if (self->on_close) {
        void (*fn)(void *) = self->on_close;
        self->on_close = NULL;
        fn(self->on_close_ctx);
    } else {
        oj_engine_free(e);
    }
}

void ojpy_engine_close_when_free(EngineObject *e) {
    if (e->exports > 0) e->close_pending = 1;
    else engine_close_c(e);
}

static void engine_dealloc(EngineObject *self) {
    /* every tensor holds a reference, so none is left when this runs */
    engine_close_c(self);
    Py_CLEAR(self->prev);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static oj_engine *open_or_raise(EngineObject *self) {
    if (self->eng == NULL) ojpy_raise_status(OJ_ERR_STATE, "the engine is closed");
    return self->eng;
}

EngineObject *ojpy_default_engine(void) {
    /* the implicit engine, closed by the user: open a fresh one (a closed
     * engine of a `with` block stays current until its block ends) */
    if (current != NULL && current->eng == NULL && !current->entered) Py_CLEAR(current);
    if (current != NULL) return current;
    PyObject *e = PyObject_CallNoArgs((PyObject *)&OjpyEngine_Type);
    if (e == NULL) return NULL;
    current = (EngineObject *)e;
    return current;
}

EngineObject *ojpy_engine_arg(PyObject *o) {
    EngineObject *e;
    if (o == NULL || o == Py_None) e = ojpy_default_engine();
    else if (PyObject_TypeCheck(o, &OjpyEngine_Type)) e = (EngineObject *)o;
    else {
        PyErr_Format(PyExc_TypeError, "engine must be an ojas.Engine or None, not %.80s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    if (e == NULL) return NULL;
    if (e->eng == NULL) {
        ojpy_raise_status(OJ_ERR_STATE, "the engine is closed");
        return NULL;
    }
    return e;
}

void ojpy_engine_exports(EngineObject *e, int delta) {
    e->exports += delta;
    if (e->exports == 0 && e->close_pending) {
        e->close_pending = 0;
        engine_close_c(e);
    }
}

EngineObject *ojpy_engine_call_begin(EngineObject *e) {
    Py_INCREF(e);
    ojpy_engine_exports(e, +1);
    return e;
}

void ojpy_engine_call_end(EngineObject *e) {
    ojpy_engine_exports(e, -1);
    Py_DECREF(e);
}

static PyObject *engine_close(EngineObject *self, PyObject *unused) {
    if (self->on_close)
        return ojpy_raise_status(OJ_ERR_STATE,
                                 "Engine.close: this engine belongs to a Trainer; close the trainer");
    if (self->exports > 0) {
        char msg[240];
        snprintf(msg, sizeof msg,
                 "Engine.close: %zd views of its memory are still out (numpy arrays, memoryviews, "
                 "DLPack capsules or tensors of other libraries); delete them first",
                 (ssize_t)self->exports);
        return ojpy_raise_status(OJ_ERR_STATE, msg);
    }
    engine_close_c(self);
    Py_RETURN_NONE;
}

static PyObject *engine_enter(EngineObject *self, PyObject *unused) {
    if (open_or_raise(self) == NULL) return NULL;
    if (self->entered) return ojpy_raise_status(OJ_ERR_STATE, "Engine: already entered");
    self->entered = 1;
    self->prev = current; /* takes current's reference (may be NULL) */
    Py_INCREF(self);
    current = self;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *engine_exit(EngineObject *self, PyObject *args) {
    if (self->entered) {
        self->entered = 0;
        if (current == self) {
            current = self->prev;
            self->prev = NULL;
            Py_DECREF(self);
        } else {
            Py_CLEAR(self->prev);
        }
    }
    if (self->on_close) Py_RETURN_FALSE; /* its owner closes it */
    if (self->exports > 0) self->close_pending = 1; /* closed at the last view's release */
    else engine_close_c(self);
    Py_RETURN_FALSE;
}

#define GETTER(name, expr)                                            \
    static PyObject *get_##name(EngineObject *self, void *c) {        \
        oj_engine *e = open_or_raise(self);                           \
        if (e == NULL) return NULL;                                   \
        return expr;                                                  \
    }

/* torch's device string: 'cpu' or 'cuda:N' with the index always given
 * (oj_device_name writes device 0 as 'cuda'). */
PyObject *ojpy_device_str(oj_device d) {
    if (d.type == OJ_DEVICE_CPU) return PyUnicode_FromString("cpu");
    return PyUnicode_FromFormat("cuda:%d", d.index);
}

static PyObject *device_str(oj_engine *e) { return ojpy_device_str(oj_engine_device(e)); }
GETTER(device, device_str(e))
GETTER(numerics, PyUnicode_FromString(oj_engine_numerics(e) == OJ_NUMERICS_EXACT ? "exact" : "fast"))
GETTER(threads, PyLong_FromLong(oj_engine_threads(e)))
GETTER(seed, PyLong_FromUnsignedLongLong(oj_engine_seed(e)))
GETTER(budget_bytes, PyLong_FromLongLong(oj_budget_limit(oj_engine_budget(e))))
GETTER(grad_enabled, PyBool_FromLong(oj_grad_enabled(e)))
GETTER(detect_anomaly, PyBool_FromLong(oj_detect_anomaly_enabled(e)))

static PyObject *get_closed(EngineObject *self, void *c) { return PyBool_FromLong(self->eng == NULL); }

static int set_numerics(EngineObject *self, PyObject *v, void *c) {
    oj_engine *e = open_or_raise(self);
    if (e == NULL) return -1;
    const char *s = v ? PyUnicode_AsUTF8(v) : NULL;
    if (s == NULL) return -1;
    if (strcmp(s, "fast") && strcmp(s, "exact")) {
        ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "numerics must be 'fast' or 'exact'");
        return -1;
    }
    oj_engine_set_numerics(e, strcmp(s, "exact") == 0 ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST);
    return 0;
}

static int set_flag(EngineObject *self, PyObject *v, bool (*fn)(oj_engine *, bool)) {
    oj_engine *e = open_or_raise(self);
    if (e == NULL) return -1;
    int on = v ? PyObject_IsTrue(v) : -1;
    if (on < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cannot delete this attribute");
        return -1;
    }
    fn(e, on);
    return 0;
}
static int set_grad_enabled(EngineObject *s, PyObject *v, void *c) {
    return set_flag(s, v, oj_set_grad_enabled);
}
static int set_detect_anomaly(EngineObject *s, PyObject *v, void *c) {
    return set_flag(s, v, oj_set_detect_anomaly);
}

static PyGetSetDef engine_getset[] = {
    {"device", (getter)get_device, NULL, "Device name: 'cpu' or 'cuda:N'.", NULL},
    {"numerics", (getter)get_numerics, (setter)set_numerics, "'fast' or 'exact'.", NULL},
    {"threads", (getter)get_threads, NULL, "CPU threads.", NULL},
    {"seed", (getter)get_seed, NULL, "RNG seed.", NULL},
    {"budget_bytes", (getter)get_budget_bytes, NULL, "Root memory budget limit in bytes.", NULL},
    {"grad_enabled", (getter)get_grad_enabled, (setter)set_grad_enabled, "Grad mode.", NULL},
    {"detect_anomaly", (getter)get_detect_anomaly, (setter)set_detect_anomaly,
     "Detect-anomaly mode: the first NaN/inf in a recorded op raises ojas.NumericError.", NULL},
    {"closed", (getter)get_closed, NULL, "True after close().", NULL},
    {NULL},
};

static PyObject *engine_memory_allocated(EngineObject *self, PyObject *u) {
    oj_engine *e = open_or_raise(self);
    return e ? PyLong_FromLongLong(oj_engine_memory_allocated(e)) : NULL;
}
static PyObject *engine_max_memory_allocated(EngineObject *self, PyObject *u) {
    oj_engine *e = open_or_raise(self);
    return e ? PyLong_FromLongLong(oj_engine_max_memory_allocated(e)) : NULL;
}
static PyObject *engine_live_tensors(EngineObject *self, PyObject *u) {
    oj_engine *e = open_or_raise(self);
    return e ? PyLong_FromLongLong(oj_engine_live_tensors(e)) : NULL;
}
static PyObject *engine_manual_seed(EngineObject *self, PyObject *arg) {
    oj_engine *e = open_or_raise(self);
    if (e == NULL) return NULL;
    unsigned long long s = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    oj_rng_set_seed(e, s);
    Py_RETURN_NONE;
}
static PyObject *engine_synchronize(EngineObject *self, PyObject *u) {
    oj_engine *e = open_or_raise(self);
    if (e == NULL) return NULL;
    if (oj_engine_synchronize(e) != OJ_OK) return ojpy_raise_engine(e, "synchronize");
    Py_RETURN_NONE;
}

static PyMethodDef engine_methods[] = {
    {"close", (PyCFunction)engine_close, METH_NOARGS,
     "Free the engine and every tensor it still owns; its tensors raise StateError after."},
    {"__enter__", (PyCFunction)engine_enter, METH_NOARGS, "Make this the default engine."},
    {"__exit__", (PyCFunction)engine_exit, METH_VARARGS,
     "Restore the previous default engine and close this one."},
    {"memory_allocated", (PyCFunction)engine_memory_allocated, METH_NOARGS,
     "Bytes of storage live tensors hold (torch.cuda.memory_allocated)."},
    {"max_memory_allocated", (PyCFunction)engine_max_memory_allocated, METH_NOARGS,
     "Peak of memory_allocated()."},
    {"live_tensors", (PyCFunction)engine_live_tensors, METH_NOARGS, "Live tensor handles."},
    {"manual_seed", (PyCFunction)engine_manual_seed, METH_O, "Reseed the RNG (offset 0)."},
    {"synchronize", (PyCFunction)engine_synchronize, METH_NOARGS,
     "Wait for the device's queued work."},
    {NULL},
};

static PyObject *engine_repr(EngineObject *self) {
    if (self->eng == NULL) return PyUnicode_FromString("<ojas.Engine closed>");
    PyObject *dev = ojpy_device_str(oj_engine_device(self->eng));
    if (dev == NULL) return NULL;
    PyObject *r = PyUnicode_FromFormat("<ojas.Engine device=%U numerics=%s threads=%d>", dev,
                                       oj_engine_numerics(self->eng) == OJ_NUMERICS_EXACT ? "exact"
                                                                                        : "fast",
                                       oj_engine_threads(self->eng));
    Py_DECREF(dev);
    return r;
}

PyTypeObject OjpyEngine_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(device='cpu', numerics='fast', threads=0, budget_bytes=0, seed=0): an ojas "
              "engine (oj_engine_create). budget_bytes 0: what the machine can give.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
    .tp_repr = (reprfunc)engine_repr,
};

static PyObject *py_default_engine(PyObject *m, PyObject *u) {
    EngineObject *e = ojpy_default_engine();
    if (e == NULL) return NULL;
    Py_INCREF(e);
    return (PyObject *)e;
}

static PyMethodDef module_engine_methods[] = {
    {"default_engine", py_default_engine, METH_NOARGS,
     "The engine creation functions use (the innermost `with Engine(...)`, else a CPU engine "
     "opened on first use)."},
    {NULL},
};

int ojpy_engine_init(PyObject *m) {
    if (PyType_Ready(&OjpyEngine_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Engine", (PyObject *)&OjpyEngine_Type) < 0) return -1;
    return PyModule_AddFunctions(m, module_engine_methods);
}
