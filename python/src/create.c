/* Creation functions of ojas._C (the Python layer, ojas/_creation.py, gives
 * them torch's signatures): empty, zeros, ones, full, arange, linspace,
 * eye, rand, randn, scalar, from_buffer (a copy) and from_numpy (zero-copy
 * over any writable buffer-protocol object, kept alive by the tensor). */
#include "ojas_py.h"

int ojpy_shape_arg(PyObject *o, int64_t *shape, const char *what) {
    if (PyLong_Check(o)) {
        shape[0] = PyLong_AsLongLong(o);
        return (shape[0] == -1 && PyErr_Occurred()) ? -1 : 1;
    }
    PyObject *seq = PySequence_Fast(o, "shape must be a sequence of ints");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > OJ_MAX_RANK) {
        Py_DECREF(seq);
        char msg[120];
        snprintf(msg, sizeof msg, "%s: %zd dims given, at most %d are supported", what, (ssize_t)n,
                 OJ_MAX_RANK);
        ojpy_raise_status(OJ_ERR_SHAPE, msg);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        shape[i] = PyNumber_Check(it) ? PyLong_AsLongLong(it) : -1;
        if (shape[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (!PyLong_Check(it) && !PyIndex_Check(it)) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_TypeError, "%s: dims must be ints, not %.80s", what,
                         Py_TYPE(it)->tp_name);
            return -1;
        }
    }
    Py_DECREF(seq);
    return (int)n;
}

int ojpy_dtype_of_format(const char *fmt, Py_ssize_t itemsize) {
    if (fmt == NULL) return itemsize == 1 ? OJ_U8 : -1;
    if (*fmt == '<' || *fmt == '=' || *fmt == '@') fmt++;
    if (fmt[0] == 0 || fmt[1] != 0) return -1;
    switch (fmt[0]) {
    case 'f': return OJ_F32;
    case 'd': return OJ_F64;
    case 'e': return OJ_F16;
    case '?': return OJ_BOOL;
    case 'B': return OJ_U8;
    case 'H': return OJ_U16;
    case 'i': return itemsize == 4 ? OJ_I32 : -1;
    case 'I': return itemsize == 4 ? OJ_U32 : -1;
    case 'l': case 'q': return itemsize == 8 ? OJ_I64 : itemsize == 4 ? OJ_I32 : -1;
    case 'L': case 'Q': return itemsize == 4 ? OJ_U32 : -1;
    default: return -1;
    }
}

#define ENGINE(o)                                   \
    EngineObject *e = ojpy_engine_arg(o);           \
    if (e == NULL) return NULL;

typedef oj_tensor *(*fill_fn)(oj_engine *, int, const int64_t *, oj_dtype);

static PyObject *shaped(PyObject *args, fill_fn fn, const char *name) {
    PyObject *shp, *dto, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &shp, &dto, &eo)) return NULL;
    int64_t shape[OJ_MAX_RANK];
    int r = ojpy_shape_arg(shp, shape, name);
    int dt = r < 0 ? -1 : ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    ENGINE(eo)
    return ojpy_wrap(fn(e->eng, r, shape, (oj_dtype)dt), e);
}
static PyObject *py_empty(PyObject *m, PyObject *a) { return shaped(a, oj_empty, "empty"); }
static PyObject *py_zeros(PyObject *m, PyObject *a) { return shaped(a, oj_zeros, "zeros"); }
static PyObject *py_ones(PyObject *m, PyObject *a) { return shaped(a, oj_ones, "ones"); }

static PyObject *py_full(PyObject *m, PyObject *args) {
    PyObject *shp, *dto, *eo = Py_None;
    double v;
    if (!PyArg_ParseTuple(args, "OdO|O", &shp, &v, &dto, &eo)) return NULL;
    int64_t shape[OJ_MAX_RANK];
    int r = ojpy_shape_arg(shp, shape, "full");
    int dt = r < 0 ? -1 : ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    ENGINE(eo)
    return ojpy_wrap(oj_full(e->eng, r, shape, (oj_dtype)dt, v), e);
}

static PyObject *random_(PyObject *args, bool normal) {
    PyObject *shp, *dto, *eo = Py_None;
    double p0, p1;
    if (!PyArg_ParseTuple(args, "OOdd|O", &shp, &dto, &p0, &p1, &eo)) return NULL;
    int64_t shape[OJ_MAX_RANK];
    int r = ojpy_shape_arg(shp, shape, normal ? "randn" : "rand");
    int dt = r < 0 ? -1 : ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    ENGINE(eo)
    oj_tensor *t = normal ? oj_rand_normal(e->eng, r, shape, (oj_dtype)dt, p0, p1)
                          : oj_rand_uniform(e->eng, r, shape, (oj_dtype)dt, p0, p1);
    return ojpy_wrap(t, e);
}
static PyObject *py_rand(PyObject *m, PyObject *a) { return random_(a, false); }
static PyObject *py_randn(PyObject *m, PyObject *a) { return random_(a, true); }

static PyObject *py_arange(PyObject *m, PyObject *args) {
    double start, end, step;
    PyObject *dto, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "dddO|O", &start, &end, &step, &dto, &eo)) return NULL;
    int dt = ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    ENGINE(eo)
    return ojpy_wrap(oj_arange(e->eng, start, end, step, (oj_dtype)dt), e);
}
static PyObject *py_linspace(PyObject *m, PyObject *args) {
    double start, end;
    long long steps;
    PyObject *dto, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "ddLO|O", &start, &end, &steps, &dto, &eo)) return NULL;
    int dt = ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    ENGINE(eo)
    return ojpy_wrap(oj_linspace(e->eng, start, end, steps, (oj_dtype)dt), e);
}
static PyObject *py_eye(PyObject *m, PyObject *args) {
    long long n, k;
    PyObject *dto, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "LLO|O", &n, &k, &dto, &eo)) return NULL;
    int dt = ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    ENGINE(eo)
    return ojpy_wrap(oj_eye(e->eng, n, k, (oj_dtype)dt), e);
}
static PyObject *py_scalar(PyObject *m, PyObject *args) {
    double v;
    PyObject *dto, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "dO|O", &v, &dto, &eo)) return NULL;
    int dt = ojpy_dtype_arg(dto);
    if (dt < 0) return NULL;
    ENGINE(eo)
    return ojpy_wrap(oj_scalar(e->eng, v, (oj_dtype)dt), e);
}

/* from_buffer(obj, dtype or None, engine): a copy of a C-contiguous buffer
 * (numpy array, bytes, memoryview); dtype None takes the buffer's own. */
static PyObject *py_from_buffer(PyObject *m, PyObject *args) {
    PyObject *obj, *dto = Py_None, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "O|OO", &obj, &dto, &eo)) return NULL;
    ENGINE(eo)
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    PyObject *res = NULL;
    int dt = dto == Py_None ? ojpy_dtype_of_format(b.format, b.itemsize) : ojpy_dtype_arg(dto);
    if (dt < 0) {
        if (!PyErr_Occurred()) {
            char msg[160];
            snprintf(msg, sizeof msg, "from_buffer: no ojas dtype for buffer format '%.20s'",
                     b.format ? b.format : "B");
            ojpy_raise_status(OJ_ERR_DTYPE, msg);
        }
        goto out;
    }
    if (b.ndim > OJ_MAX_RANK) {
        ojpy_raise_status(OJ_ERR_SHAPE, "from_buffer: more than 8 dims");
        goto out;
    }
    int64_t shape[OJ_MAX_RANK];
    int r = b.ndim;
    for (int d = 0; d < r; d++) shape[d] = b.shape[d];
    if (r == 0 && b.len != b.itemsize) { /* a flat byte buffer */
        r = 1;
        shape[0] = b.len / (Py_ssize_t)oj_dtype_size((oj_dtype)dt);
    }
    res = ojpy_wrap(oj_from_host(e->eng, r, shape, (oj_dtype)dt, b.buf, (size_t)b.len), e);
out:
    PyBuffer_Release(&b);
    return res;
}

static void release_buffer(void *ctx) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyBuffer_Release((Py_buffer *)ctx);
    PyMem_RawFree(ctx);
    PyGILState_Release(g);
}

/* from_numpy(obj, engine): a CPU tensor sharing a writable strided buffer's
 * memory (torch.from_numpy); the buffer stays exported until the last
 * tensor viewing it is released. */
static PyObject *py_from_numpy(PyObject *m, PyObject *args) {
    PyObject *obj, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &obj, &eo)) return NULL;
    ENGINE(eo)
    if (oj_engine_device(e->eng).type != OJ_DEVICE_CPU)
        return ojpy_raise_status(OJ_ERR_DEVICE, "from_numpy: the engine is not a CPU engine; "
                                                "host memory is shared with CPU engines only");
    Py_buffer *b = PyMem_RawMalloc(sizeof *b);
    if (b == NULL) return PyErr_NoMemory();
    if (PyObject_GetBuffer(obj, b, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyMem_RawFree(b);
        return NULL;
    }
    int dt = ojpy_dtype_of_format(b->format, b->itemsize);
    const char *why = NULL;
    int64_t shape[OJ_MAX_RANK], strides[OJ_MAX_RANK];
    if (dt < 0) why = "its format has no ojas dtype";
    else if (b->ndim > OJ_MAX_RANK) why = "it has more than 8 dims";
    for (int d = 0; why == NULL && d < b->ndim; d++) {
        shape[d] = b->shape[d];
        if (b->strides[d] < 0 || b->strides[d] % b->itemsize) why = "its strides are negative "
                                                                     "or not whole elements";
        strides[d] = b->strides[d] / b->itemsize;
    }
    if (why) {
        PyBuffer_Release(b);
        PyMem_RawFree(b);
        char msg[160];
        snprintf(msg, sizeof msg, "from_numpy: the buffer cannot be shared: %s", why);
        return ojpy_raise_status(dt < 0 ? OJ_ERR_DTYPE : OJ_ERR_INVALID_ARGUMENT, msg);
    }
    oj_tensor *t = oj_from_external(e->eng, b->buf, b->ndim, shape, strides, (oj_dtype)dt,
                                    release_buffer, b);
    if (t == NULL) {
        PyBuffer_Release(b);
        PyMem_RawFree(b);
    }
    return ojpy_wrap(t, e);
}

/* to_engine(t, engine): a copy of t on another engine (oj_to_device: the
 * explicit copy between devices, staged through host memory; not recorded
 * by autograd). */
static PyObject *py_to_engine(PyObject *m, PyObject *args) {
    PyObject *to, *eo;
    if (!PyArg_ParseTuple(args, "OO", &to, &eo)) return NULL;
    oj_tensor *t = ojpy_tensor_of(to, "tensor");
    if (t == NULL) return NULL;
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return NULL;
    return ojpy_wrap(oj_to_device(t, e->eng), e);
}

PyMethodDef ojpy_create_methods[] = {
    {"to_engine", py_to_engine, METH_VARARGS,
     "to_engine(t, engine): a copy of t on engine's device (oj_to_device)"},
    {"empty", py_empty, METH_VARARGS, "empty(shape, dtype, engine=None)"},
    {"zeros", py_zeros, METH_VARARGS, "zeros(shape, dtype, engine=None)"},
    {"ones", py_ones, METH_VARARGS, "ones(shape, dtype, engine=None)"},
    {"full", py_full, METH_VARARGS, "full(shape, value, dtype, engine=None)"},
    {"rand", py_rand, METH_VARARGS, "rand(shape, dtype, low, high, engine=None): U[low, high)"},
    {"randn", py_randn, METH_VARARGS, "randn(shape, dtype, mean, std, engine=None)"},
    {"arange", py_arange, METH_VARARGS, "arange(start, end, step, dtype, engine=None)"},
    {"linspace", py_linspace, METH_VARARGS, "linspace(start, end, steps, dtype, engine=None)"},
    {"eye", py_eye, METH_VARARGS, "eye(n, m, dtype, engine=None)"},
    {"scalar", py_scalar, METH_VARARGS, "scalar(value, dtype, engine=None): rank 0"},
    {"from_buffer", py_from_buffer, METH_VARARGS,
     "from_buffer(obj, dtype=None, engine=None): a copy of a C-contiguous buffer"},
    {"from_numpy", py_from_numpy, METH_VARARGS,
     "from_numpy(obj, engine=None): a CPU tensor sharing a writable buffer's memory"},
    {NULL},
};
