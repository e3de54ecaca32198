/* ojas.Tensor's C base (_C.TensorBase): lifetime, attributes, autograd
 * entry points, Python operators and the buffer protocol. Methods with
 * torch's keyword signatures live in the Python subclass ojas.Tensor
 * (ojas/_tensor.py) over the raw ops of ops.c. */
#include "ojas_py.h"

PyTypeObject *ojpy_tensor_class = &OjpyTensor_Type;
PyObject *ojpy_dtypes[OJ_DTYPE_COUNT];

PyObject *ojpy_wrap(oj_tensor *t, EngineObject *e) {
    if (t == NULL) return ojpy_raise_engine(e->eng, "op");
    /* an op can succeed and still record an error (detect_anomaly's NaN check) */
    if (oj_last_status(e->eng) != OJ_OK) {
        oj_release(t);
        return ojpy_raise_engine(e->eng, "op");
    }
    TensorObject *o = (TensorObject *)ojpy_tensor_class->tp_alloc(ojpy_tensor_class, 0);
    if (o == NULL) {
        oj_release(t);
        return NULL;
    }
    o->t = t;
    Py_INCREF(e);
    o->eng = e;
    return (PyObject *)o;
}

oj_tensor *ojpy_tensor_of(PyObject *o, const char *what) {
    if (!ojpy_is_tensor(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an ojas.Tensor, not %.80s", what,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    TensorObject *t = (TensorObject *)o;
    if (t->t == NULL) {
        PyErr_SetString(PyExc_TypeError, "uninitialised ojas.Tensor (use ojas.tensor(...))");
        return NULL;
    }
    if (t->eng->eng == NULL) {
        ojpy_raise_closed();
        return NULL;
    }
    return t->t;
}

int ojpy_dtype_arg(PyObject *o) {
    long v;
    if (PyLong_Check(o)) {
        v = PyLong_AsLong(o);
    } else {
        PyObject *c = PyObject_GetAttrString(o, "_code");
        if (c == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "expected an ojas dtype (ojas.float32, ...), not %.80s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        v = PyLong_AsLong(c);
        Py_DECREF(c);
    }
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v >= OJ_DTYPE_COUNT) {
        ojpy_raise_status(OJ_ERR_DTYPE, "invalid dtype code");
        return -1;
    }
    return (int)v;
}

oj_tensor *ojpy_scalar_for(EngineObject *e, PyObject *v, oj_dtype like) {
    double x;
    oj_dtype dt = like;
    if (PyBool_Check(v)) {
        x = v == Py_True;
    } else if (PyLong_Check(v)) {
        x = PyLong_AsDouble(v);
        if (like == OJ_BOOL) dt = OJ_I64;
    } else if (PyFloat_Check(v)) {
        x = PyFloat_AS_DOUBLE(v);
        if (!oj_dtype_is_float(like)) dt = OJ_F32;
    } else {
        return NULL; /* not a number: the caller returns NotImplemented */
    }
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    oj_tensor *s = oj_scalar(e->eng, x, dt);
    if (s == NULL) ojpy_raise_engine(e->eng, "scalar");
    return s;
}

static void tensor_dealloc(TensorObject *self) {
    if (self->t && self->eng && self->eng->eng) oj_release(self->t);
    self->t = NULL;
    Py_CLEAR(self->eng);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define SELF_T(ret)                                 \
    oj_tensor *t = ojpy_tensor_of((PyObject *)self, "self"); \
    if (t == NULL) return ret;

/* ---------------------------------------------------------------- attributes */

static PyObject *get_shape(TensorObject *self, void *c) {
    SELF_T(NULL)
    int r = oj_rank(t);
    PyObject *tup = PyTuple_New(r);
    if (tup == NULL) return NULL;
    for (int d = 0; d < r; d++) PyTuple_SET_ITEM(tup, d, PyLong_FromLongLong(oj_shape(t)[d]));
    return tup;
}
static PyObject *get_strides(TensorObject *self, void *c) {
    SELF_T(NULL)
    int r = oj_rank(t);
    PyObject *tup = PyTuple_New(r);
    if (tup == NULL) return NULL;
    for (int d = 0; d < r; d++) PyTuple_SET_ITEM(tup, d, PyLong_FromLongLong(oj_strides(t)[d]));
    return tup;
}
static PyObject *get_ndim(TensorObject *self, void *c) {
    SELF_T(NULL)
    return PyLong_FromLong(oj_rank(t));
}
static PyObject *get_dtype(TensorObject *self, void *c) {
    SELF_T(NULL)
    PyObject *d = ojpy_dtypes[oj_tensor_dtype(t)];
    if (d == NULL) return PyLong_FromLong(oj_tensor_dtype(t));
    Py_INCREF(d);
    return d;
}
static PyObject *get_device(TensorObject *self, void *c) {
    SELF_T(NULL)
    return ojpy_device_str(oj_tensor_device(t));
}
static PyObject *get_engine(TensorObject *self, void *c) {
    Py_INCREF(self->eng);
    return (PyObject *)self->eng;
}
static PyObject *get_requires_grad(TensorObject *self, void *c) {
    SELF_T(NULL)
    return PyBool_FromLong(oj_requires_grad(t));
}
static int set_requires_grad(TensorObject *self, PyObject *v, void *c) {
    SELF_T(-1)
    int on = v ? PyObject_IsTrue(v) : -1;
    if (on < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cannot delete requires_grad");
        return -1;
    }
    if (oj_set_requires_grad(t, on) == NULL) {
        ojpy_raise_engine(self->eng->eng, "requires_grad");
        return -1;
    }
    return 0;
}
static PyObject *get_grad(TensorObject *self, void *c) {
    SELF_T(NULL)
    oj_tensor *g = oj_grad(t);
    if (g == NULL) Py_RETURN_NONE;
    return ojpy_wrap(oj_retain(g), self->eng);
}
static int set_grad(TensorObject *self, PyObject *v, void *c) {
    SELF_T(-1)
    if (v != NULL && v != Py_None) {
        ojpy_raise_status(OJ_ERR_UNSUPPORTED,
                          "grad: only None can be assigned (it drops the gradient)");
        return -1;
    }
    oj_zero_grad(t);
    return 0;
}
static PyObject *get_is_leaf(TensorObject *self, void *c) {
    SELF_T(NULL)
    return PyBool_FromLong(oj_is_leaf(t));
}
static PyObject *get_grad_fn(TensorObject *self, void *c) {
    SELF_T(NULL)
    const char *n = oj_grad_fn_name(t);
    if (n == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(n);
}
static PyObject *get_version(TensorObject *self, void *c) {
    SELF_T(NULL)
    return PyLong_FromUnsignedLongLong(oj_version(t));
}

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)get_shape, NULL, "Sizes as a tuple of ints.", NULL},
    {"_strides", (getter)get_strides, NULL, "Strides in elements.", NULL},
    {"ndim", (getter)get_ndim, NULL, "Rank.", NULL},
    {"dtype", (getter)get_dtype, NULL, "Element type (ojas.float32, ...).", NULL},
    {"device", (getter)get_device, NULL, "'cpu' or 'cuda:N'.", NULL},
    {"engine", (getter)get_engine, NULL, "The ojas.Engine owning the tensor.", NULL},
    {"requires_grad", (getter)get_requires_grad, (setter)set_requires_grad,
     "Whether gradients accumulate in .grad (float leaves only).", NULL},
    {"grad", (getter)get_grad, (setter)set_grad, "Accumulated gradient or None.", NULL},
    {"is_leaf", (getter)get_is_leaf, NULL, "True when no op produced the tensor.", NULL},
    {"grad_fn", (getter)get_grad_fn, NULL, "Name of the op that produced it, or None.", NULL},
    {"_version", (getter)get_version, NULL, "In-place write counter of the storage.", NULL},
    {NULL},
};

/* ---------------------------------------------------------------- methods */

static PyObject *t_numel(TensorObject *self, PyObject *u) {
    SELF_T(NULL)
    return PyLong_FromLongLong(oj_numel(t));
}
static PyObject *t_dim(TensorObject *self, PyObject *u) {
    SELF_T(NULL)
    return PyLong_FromLong(oj_rank(t));
}
static PyObject *t_is_contiguous(TensorObject *self, PyObject *u) {
    SELF_T(NULL)
    return PyBool_FromLong(oj_is_contiguous(t));
}
static PyObject *t_data_ptr(TensorObject *self, PyObject *u) {
    SELF_T(NULL)
    return PyLong_FromVoidPtr(oj_device_data_ptr(t));
}
static PyObject *t_item(TensorObject *self, PyObject *u) {
    SELF_T(NULL)
    if (oj_numel(t) != 1) {
        char buf[96], msg[160];
        snprintf(msg, sizeof msg, "item: a tensor of %lld elements (shape %s) has no single value",
                 (long long)oj_numel(t), oj_shape_str(t, buf, sizeof buf));
        return ojpy_raise_status(OJ_ERR_SHAPE, msg);
    }
    double v = oj_item(t);
    if (oj_last_status(self->eng->eng) != OJ_OK) return ojpy_raise_engine(self->eng->eng, "item");
    oj_dtype dt = oj_tensor_dtype(t);
    if (dt == OJ_BOOL) return PyBool_FromLong(v != 0);
    if (!oj_dtype_is_float(dt)) {
        if (dt == OJ_I64) { /* doubles lose i64 precision: read the bits */
            long long x;
            if (oj_to_host(t, &x, sizeof x) != OJ_OK)
                return ojpy_raise_engine(self->eng->eng, "item");
            return PyLong_FromLongLong(x);
        }
        return PyLong_FromDouble(v);
    }
    return PyFloat_FromDouble(v);
}
static PyObject *t_backward(TensorObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"gradient", "retain_graph", NULL};
    PyObject *grad = Py_None;
    int retain = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Op:backward", names, &grad, &retain)) return NULL;
    SELF_T(NULL)
    oj_status st;
    if (grad == Py_None) {
        st = oj_backward(t, retain);
    } else {
        oj_tensor *g = ojpy_tensor_of(grad, "gradient");
        if (g == NULL) return NULL;
        st = oj_backward_seeded(t, g, retain);
    }
    if (st != OJ_OK) return ojpy_raise_engine(self->eng->eng, "backward");
    Py_RETURN_NONE;
}
static PyObject *t_retain_grad(TensorObject *self, PyObject *u) {
    SELF_T(NULL)
    if (oj_retain_grad(t) == NULL) return ojpy_raise_engine(self->eng->eng, "retain_grad");
    Py_RETURN_NONE;
}
static PyObject *t_tobytes(TensorObject *self, PyObject *u) {
    SELF_T(NULL)
    size_t n = (size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t));
    PyObject *b = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (b == NULL) return NULL;
    if (oj_to_host(t, PyByteArray_AS_STRING(b), n) != OJ_OK) {
        Py_DECREF(b);
        return ojpy_raise_engine(self->eng->eng, "tobytes");
    }
    return b;
}
static PyObject *t_shares_storage(TensorObject *self, PyObject *other) {
    SELF_T(NULL)
    oj_tensor *o = ojpy_tensor_of(other, "other");
    if (o == NULL) return NULL;
    return PyBool_FromLong(oj_shares_storage(t, o));
}

static PyMethodDef tensor_methods[] = {
    {"numel", (PyCFunction)t_numel, METH_NOARGS, "Number of elements."},
    {"dim", (PyCFunction)t_dim, METH_NOARGS, "Rank."},
    {"is_contiguous", (PyCFunction)t_is_contiguous, METH_NOARGS, "Row-major contiguous?"},
    {"data_ptr", (PyCFunction)t_data_ptr, METH_NOARGS,
     "Address of element 0 (host on the CPU, device memory on CUDA); marks the storage "
     "exported (writes through it are unseen: kept weight copies are remade before each use, "
     "the optimizer checks every step over it)."},
    {"item", (PyCFunction)t_item, METH_NOARGS, "The value of a one-element tensor."},
    {"backward", (PyCFunction)(void (*)(void))t_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(gradient=None, retain_graph=False): accumulate gradients into leaves' .grad."},
    {"retain_grad", (PyCFunction)t_retain_grad, METH_NOARGS,
     "Keep a non-leaf's gradient in .grad after backward."},
    {"_tobytes", (PyCFunction)t_tobytes, METH_NOARGS, "Row-major copy as a bytearray."},
    {"_shares_storage", (PyCFunction)t_shares_storage, METH_O, "Same storage as other?"},
    {"__dlpack__", (PyCFunction)(void (*)(void))ojpy_tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "DLPack capsule sharing the tensor's memory."},
    {"__dlpack_device__", (PyCFunction)ojpy_tensor_dlpack_device, METH_NOARGS,
     "(device type, index) of DLPack: (1, 0) CPU, (2, N) CUDA."},
    {NULL},
};

/* ---------------------------------------------------------------- operators */

typedef oj_tensor *(*binop)(oj_tensor *, oj_tensor *);

/* a op b where either may be a Python number; NotImplemented for other
 * types. */
static PyObject *binary(PyObject *a, PyObject *b, binop fn) {
    PyObject *tobj = ojpy_is_tensor(a) ? a : b;
    if (!ojpy_is_tensor(tobj)) Py_RETURN_NOTIMPLEMENTED;
    oj_tensor *t = ojpy_tensor_of(tobj, "operand");
    if (t == NULL) return NULL;
    EngineObject *e = ((TensorObject *)tobj)->eng;
    oj_tensor *x, *y, *s = NULL;
    if (ojpy_is_tensor(a) && ojpy_is_tensor(b)) {
        x = t;
        y = ojpy_tensor_of(b, "operand");
        if (y == NULL) return NULL;
    } else {
        PyObject *other = tobj == a ? b : a;
        s = ojpy_scalar_for(e, other, oj_tensor_dtype(t));
        if (s == NULL) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NOTIMPLEMENTED;
        }
        x = tobj == a ? t : s;
        y = tobj == a ? s : t;
    }
    oj_tensor *r = fn(x, y);
    oj_release(s);
    return ojpy_wrap(r, e);
}

static PyObject *nb_add(PyObject *a, PyObject *b) { return binary(a, b, oj_add); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return binary(a, b, oj_sub); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return binary(a, b, oj_mul); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return binary(a, b, oj_div); }
static PyObject *nb_matmul(PyObject *a, PyObject *b) {
    if (!ojpy_is_tensor(a) || !ojpy_is_tensor(b)) Py_RETURN_NOTIMPLEMENTED;
    return binary(a, b, oj_matmul);
}
static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
    if (ojpy_is_tensor(a) && (PyFloat_Check(b) || PyLong_Check(b))) {
        oj_tensor *t = ojpy_tensor_of(a, "base");
        if (t == NULL) return NULL;
        double v = PyFloat_Check(b) ? PyFloat_AS_DOUBLE(b) : PyLong_AsDouble(b);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        return ojpy_wrap(oj_pow_scalar(t, v), ((TensorObject *)a)->eng);
    }
    return binary(a, b, oj_pow);
}

typedef oj_tensor *(*unop)(oj_tensor *);
static PyObject *unary(PyObject *a, unop fn) {
    oj_tensor *t = ojpy_tensor_of(a, "operand");
    if (t == NULL) return NULL;
    return ojpy_wrap(fn(t), ((TensorObject *)a)->eng);
}
static PyObject *nb_neg(PyObject *a) { return unary(a, oj_neg); }
static PyObject *nb_abs(PyObject *a) { return unary(a, oj_abs); }
static PyObject *nb_pos(PyObject *a) {
    Py_INCREF(a);
    return a;
}
static PyObject *nb_invert(PyObject *a) { return unary(a, oj_logical_not); }
static PyObject *nb_and(PyObject *a, PyObject *b) { return binary(a, b, oj_logical_and); }
static PyObject *nb_or(PyObject *a, PyObject *b) { return binary(a, b, oj_logical_or); }
static PyObject *nb_xor(PyObject *a, PyObject *b) { return binary(a, b, oj_logical_xor); }

/* In place: a += b is oj_add_ (recorded by autograd); the others write
 * op(a, b) into a with oj_copy_, which autograd does not record, so they
 * refuse while grad mode is on and a or b requires grad. */
static PyObject *inplace(PyObject *a, PyObject *b, binop fn, const char *name) {
    if (!ojpy_is_tensor(a)) Py_RETURN_NOTIMPLEMENTED;
    oj_tensor *t = ojpy_tensor_of(a, "self");
    if (t == NULL) return NULL;
    EngineObject *e = ((TensorObject *)a)->eng;
    oj_tensor *y, *s = NULL;
    if (ojpy_is_tensor(b)) {
        y = ojpy_tensor_of(b, "other");
        if (y == NULL) return NULL;
    } else {
        s = ojpy_scalar_for(e, b, oj_tensor_dtype(t));
        if (s == NULL) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NOTIMPLEMENTED;
        }
        y = s;
    }
    oj_status st;
    if (fn == oj_add) {
        st = oj_add_(t, y);
    } else if (oj_grad_enabled(e->eng) && (oj_requires_grad(t) || oj_requires_grad(y))) {
        oj_release(s);
        char msg[200];
        snprintf(msg, sizeof msg,
                 "%s: in place on tensors that require grad is not recorded by autograd; write "
                 "a = a %s b, or update under ojas.no_grad()",
                 name, name);
        return ojpy_raise_status(OJ_ERR_STATE, msg);
    } else {
        oj_tensor *r = fn(t, y);
        st = r ? oj_copy_(t, r) : OJ_ERR_INTERNAL;
        oj_release(r);
    }
    oj_release(s);
    if (st != OJ_OK) return ojpy_raise_engine(e->eng, name);
    Py_INCREF(a);
    return a;
}
static PyObject *nb_iadd(PyObject *a, PyObject *b) { return inplace(a, b, oj_add, "+="); }
static PyObject *nb_isub(PyObject *a, PyObject *b) { return inplace(a, b, oj_sub, "-="); }
static PyObject *nb_imul(PyObject *a, PyObject *b) { return inplace(a, b, oj_mul, "*="); }
static PyObject *nb_idiv(PyObject *a, PyObject *b) { return inplace(a, b, oj_div, "/="); }

static PyObject *one_value(PyObject *a, const char *what) {
    oj_tensor *t = ojpy_tensor_of(a, "self");
    if (t == NULL) return NULL;
    if (oj_numel(t) != 1) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: only a one-element tensor converts to a Python scalar", what);
        return ojpy_raise_status(OJ_ERR_SHAPE, msg);
    }
    return t_item((TensorObject *)a, NULL);
}
static int nb_bool(PyObject *a) {
    PyObject *v = one_value(a, "bool");
    if (v == NULL) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}
static PyObject *nb_float(PyObject *a) {
    PyObject *v = one_value(a, "float");
    if (v == NULL) return NULL;
    PyObject *r = PyNumber_Float(v);
    Py_DECREF(v);
    return r;
}
static PyObject *nb_int(PyObject *a) {
    PyObject *v = one_value(a, "int");
    if (v == NULL) return NULL;
    PyObject *r = PyNumber_Long(v);
    Py_DECREF(v);
    return r;
}
static PyObject *nb_index(PyObject *a) {
    oj_tensor *t = ojpy_tensor_of(a, "self");
    if (t == NULL) return NULL;
    if (oj_dtype_is_float(oj_tensor_dtype(t)))
        return ojpy_raise_status(OJ_ERR_DTYPE, "__index__: only integer tensors can be indices");
    return nb_int(a);
}

static PyNumberMethods tensor_as_number = {
    .nb_add = nb_add,
    .nb_subtract = nb_sub,
    .nb_multiply = nb_mul,
    .nb_true_divide = nb_div,
    .nb_power = nb_pow,
    .nb_matrix_multiply = nb_matmul,
    .nb_negative = nb_neg,
    .nb_positive = nb_pos,
    .nb_absolute = nb_abs,
    .nb_invert = nb_invert,
    .nb_and = nb_and,
    .nb_or = nb_or,
    .nb_xor = nb_xor,
    .nb_inplace_add = nb_iadd,
    .nb_inplace_subtract = nb_isub,
    .nb_inplace_multiply = nb_imul,
    .nb_inplace_true_divide = nb_idiv,
    .nb_bool = nb_bool,
    .nb_float = nb_float,
    .nb_int = nb_int,
    .nb_index = nb_index,
};

static PyObject *richcompare(PyObject *a, PyObject *b, int op) {
    static const binop fns[] = {[Py_LT] = oj_lt, [Py_LE] = oj_le, [Py_EQ] = oj_eq,
                                [Py_NE] = oj_ne, [Py_GT] = oj_gt, [Py_GE] = oj_ge};
    if (!ojpy_is_tensor(a)) { /* reflected: 2 < t is t > 2 */
        static const int swap[] = {[Py_LT] = Py_GT, [Py_LE] = Py_GE, [Py_EQ] = Py_EQ,
                                   [Py_NE] = Py_NE, [Py_GT] = Py_LT, [Py_GE] = Py_LE};
        return richcompare(b, a, swap[op]);
    }
    return binary(a, b, fns[op]);
}

static Py_hash_t tensor_hash(PyObject *self) { /* identity, as torch.Tensor */
    Py_hash_t h = (Py_hash_t)((uintptr_t)self >> 4);
    return h == -1 ? -2 : h;
}

static Py_ssize_t tensor_len(PyObject *self) {
    oj_tensor *t = ojpy_tensor_of(self, "self");
    if (t == NULL) return -1;
    if (oj_rank(t) == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)oj_size(t, 0);
}

static PyMappingMethods tensor_as_mapping = {
    .mp_length = tensor_len,
    .mp_subscript = ojpy_getitem,
    .mp_ass_subscript = ojpy_setitem,
};

/* ---------------------------------------------------------------- buffer */

/* struct-module format of each dtype; NULL: no buffer (bf16). */
static const char *const formats[OJ_DTYPE_COUNT] = {
    [OJ_F32] = "f", [OJ_F64] = "d", [OJ_BF16] = NULL, [OJ_F16] = "e", [OJ_I64] = "q",
    [OJ_I32] = "i", [OJ_U32] = "I", [OJ_U16] = "H", [OJ_U8] = "B", [OJ_BOOL] = "?",
};

static int tensor_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    oj_tensor *t = ojpy_tensor_of(self, "self");
    if (t == NULL) return -1;
    oj_dtype dt = oj_tensor_dtype(t);
    void *p = oj_data_ptr(t);
    if (p == NULL) {
        ojpy_raise_status(OJ_ERR_DEVICE, "buffer: only CPU tensors expose their memory; copy "
                                         "the tensor to a CPU engine first");
        return -1;
    }
    if (formats[dt] == NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "buffer: bf16 has no buffer-protocol format; cast to float32 first");
        return -1;
    }
    int r = oj_rank(t);
    bool contig = oj_is_contiguous(t);
    if (!contig && (flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
        PyErr_SetString(PyExc_BufferError,
                        "buffer: the tensor is not contiguous and the consumer wants no strides");
        return -1;
    }
    Py_ssize_t *arr = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(2 * r + 1));
    if (arr == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t es = oj_dtype_size(dt);
    for (int d = 0; d < r; d++) {
        arr[d] = (Py_ssize_t)oj_shape(t)[d];
        arr[r + d] = (Py_ssize_t)(oj_strides(t)[d] * (int64_t)es);
    }
    view->buf = p;
    view->obj = self;
    Py_INCREF(self);
    view->len = (Py_ssize_t)(oj_numel(t) * (int64_t)es);
    view->readonly = 0;
    view->itemsize = (Py_ssize_t)es;
    view->format = (flags & PyBUF_FORMAT) ? (char *)formats[dt] : NULL;
    /* without PyBUF_ND (only contiguous tensors get here, checked above)
     * the consumer sees flat bytes, as PyBuffer_FillInfo gives */
    view->ndim = (flags & PyBUF_ND) ? r : 1;
    view->shape = (flags & PyBUF_ND) ? arr : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? arr + r : NULL;
    view->suboffsets = NULL;
    view->internal = arr;
    ojpy_engine_exports(((TensorObject *)self)->eng, +1);
    return 0;
}

static void tensor_releasebuffer(PyObject *self, Py_buffer *view) {
    PyMem_Free(view->internal);
    ojpy_engine_exports(((TensorObject *)self)->eng, -1);
}

static PyBufferProcs tensor_as_buffer = {
    .bf_getbuffer = tensor_getbuffer,
    .bf_releasebuffer = tensor_releasebuffer,
};

static PyObject *tensor_repr(PyObject *self) {
    oj_tensor *t = ojpy_tensor_of(self, "self");
    if (t == NULL) {
        if (PyErr_ExceptionMatches(PyExc_RuntimeError)) {
            PyErr_Clear();
            return PyUnicode_FromString("tensor(<engine closed>)");
        }
        return NULL;
    }
    char *s = oj_tensor_to_string(t);
    if (s == NULL) return ojpy_raise_engine(((TensorObject *)self)->eng->eng, "repr");
    PyObject *r = PyUnicode_FromString(s);
    free(s);
    return r;
}

PyTypeObject OjpyTensor_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.TensorBase",
    .tp_basicsize = sizeof(TensorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "C base of ojas.Tensor.",
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_getset = tensor_getset,
    .tp_methods = tensor_methods,
    .tp_as_number = &tensor_as_number,
    .tp_as_mapping = &tensor_as_mapping,
    .tp_as_buffer = &tensor_as_buffer,
    .tp_richcompare = richcompare,
    .tp_hash = tensor_hash,
    .tp_repr = tensor_repr,
};

static PyObject *py_set_tensor_class(PyObject *m, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &OjpyTensor_Type) ||
        ((PyTypeObject *)cls)->tp_basicsize != OjpyTensor_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError,
                        "_set_tensor_class: expected a TensorBase subclass with __slots__ = ()");
        return NULL;
    }
    Py_INCREF(cls);
    ojpy_tensor_class = (PyTypeObject *)cls;
    Py_RETURN_NONE;
}

static PyObject *py_set_dtypes(PyObject *m, PyObject *seq) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != OJ_DTYPE_COUNT) {
        PyErr_Format(PyExc_TypeError, "_set_dtypes: expected a tuple of %d dtypes", OJ_DTYPE_COUNT);
        return NULL;
    }
    for (int i = 0; i < OJ_DTYPE_COUNT; i++) {
        Py_XDECREF(ojpy_dtypes[i]);
        ojpy_dtypes[i] = PyTuple_GET_ITEM(seq, i);
        Py_INCREF(ojpy_dtypes[i]);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_tensor_methods[] = {
    {"_set_tensor_class", py_set_tensor_class, METH_O, "Class of new tensors."},
    {"_set_dtypes", py_set_dtypes, METH_O, "dtype objects by oj_dtype code."},
    {NULL},
};

int ojpy_tensor_init(PyObject *m) {
    if (PyType_Ready(&OjpyTensor_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "TensorBase", (PyObject *)&OjpyTensor_Type) < 0) return -1;
    return PyModule_AddFunctions(m, module_tensor_methods);
}
