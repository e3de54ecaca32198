/* Tensor indexing as torch's basic indexing: ints select (the dim goes),
 * slices with a positive step narrow, None inserts a dim, Ellipsis stands
 * for the dims not named; all of these give views sharing storage. A 1-D
 * integer tensor or a list of ints on a dim gathers rows (index_select, a
 * copy, as torch's advanced indexing). t[key] = value writes through the
 * view (oj_copy_ or oj_fill_). */
#include "ojas_py.h"

/* Integer index tensor from a tensor or a list of ints; new owner
 * reference, or NULL (exception set). */
static oj_tensor *index_tensor(EngineObject *e, PyObject *o) {
    if (ojpy_is_tensor(o)) {
        oj_tensor *t = ojpy_tensor_of(o, "index");
        if (t == NULL) return NULL;
        oj_dtype dt = oj_tensor_dtype(t);
        if (dt == OJ_BOOL) {
            ojpy_raise_status(OJ_ERR_UNSUPPORTED, "indexing with a bool mask is not supported "
                                                  "yet; use ojas.where or masked_fill");
            return NULL;
        }
        if (dt != OJ_I64 && dt != OJ_I32) {
            char msg[120];
            snprintf(msg, sizeof msg, "index: tensors used as indices must be i64 or i32, not %s",
                     oj_dtype_name(dt));
            ojpy_raise_status(OJ_ERR_DTYPE, msg);
            return NULL;
        }
        return oj_retain(t);
    }
    Py_ssize_t n = PyList_GET_SIZE(o);
    int64_t *v = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (v == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyList_GET_ITEM(o, i);
        if (PyBool_Check(it) || !PyLong_Check(it)) {
            PyMem_Free(v);
            ojpy_raise_status(OJ_ERR_UNSUPPORTED, "index: a list index must hold ints only");
            return NULL;
        }
        v[i] = PyLong_AsLongLong(it);
        if (v[i] == -1 && PyErr_Occurred()) {
            PyMem_Free(v);
            return NULL;
        }
    }
    int64_t shape[1] = {n};
    oj_tensor *t = oj_from_host(e->eng, 1, shape, OJ_I64, v, sizeof(int64_t) * (size_t)n);
    PyMem_Free(v);
    if (t == NULL) ojpy_raise_engine(e->eng, "index");
    return t;
}

/* self[key] as a new owner reference; *advanced set when an index tensor
 * made a copy. NULL with an exception. */
static oj_tensor *index_view(PyObject *self, PyObject *key, int *advanced) {
    oj_tensor *t = ojpy_tensor_of(self, "self");
    if (t == NULL) return NULL;
    EngineObject *e = ((TensorObject *)self)->eng;
    PyObject *items = PyTuple_Check(key) ? key : PyTuple_Pack(1, key);
    if (items == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    int consuming = 0, ellipses = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i);
        if (it == Py_Ellipsis) ellipses++;
        else if (it != Py_None) consuming++;
    }
    oj_tensor *cur = NULL;
    if (ellipses > 1) {
        ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "index: at most one Ellipsis (...)");
        goto done;
    }
    if (consuming > oj_rank(t)) {
        char msg[120];
        snprintf(msg, sizeof msg, "index: too many indices (%d) for a tensor of rank %d", consuming,
                 oj_rank(t));
        ojpy_raise_status(OJ_ERR_OUT_OF_RANGE, msg);
        goto done;
    }
    cur = oj_retain(t);
    int dim = 0;
    for (Py_ssize_t i = 0; i < n && cur; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i);
        oj_tensor *next = NULL;
        if (it == Py_None) {
            next = oj_unsqueeze(cur, dim++);
        } else if (it == Py_Ellipsis) {
            dim += oj_rank(t) - consuming;
            continue;
        } else if (PySlice_Check(it)) {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(it, &start, &stop, &step) < 0) goto fail;
            if (step <= 0) {
                ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "index: slice step must be positive");
                goto fail;
            }
            next = oj_slice(cur, dim++, start, stop == PY_SSIZE_T_MAX ? INT64_MAX : stop, step);
        } else if (ojpy_is_tensor(it) || PyList_Check(it)) {
            oj_tensor *idx = index_tensor(e, it);
            if (idx == NULL) goto fail;
            if (oj_rank(idx) > 1) {
                oj_release(idx);
                ojpy_raise_status(OJ_ERR_UNSUPPORTED,
                                  "index: index tensors of rank > 1 are not supported yet");
                goto fail;
            }
            int r = oj_rank(idx);
            next = oj_index_select(cur, dim, idx);
            oj_release(idx);
            if (r == 1) dim++;
            if (advanced) *advanced = 1;
        } else if (PyIndex_Check(it)) {
            Py_ssize_t k = PyNumber_AsSsize_t(it, PyExc_IndexError);
            if (k == -1 && PyErr_Occurred()) goto fail;
            int64_t size = oj_size(cur, dim);
            if (k < -size || k >= size) {
                char msg[160];
                snprintf(msg, sizeof msg, "index %zd is out of range for dim %d of size %lld",
                         (ssize_t)k, dim, (long long)size);
                ojpy_raise_status(OJ_ERR_OUT_OF_RANGE, msg);
                goto fail;
            }
            next = oj_select(cur, dim, k);
        } else {
            PyErr_Format(PyExc_TypeError,
                         "index: expected int, slice, None, Ellipsis, list or tensor, not %.80s",
                         Py_TYPE(it)->tp_name);
            goto fail;
        }
        oj_release(cur);
        cur = next;
        if (cur == NULL) ojpy_raise_engine(e->eng, "index");
    }
    goto done;
fail:
    oj_release(cur);
    cur = NULL;
done:
    if (items != key) Py_DECREF(items);
    return cur;
}

PyObject *ojpy_getitem(PyObject *self, PyObject *key) {
    oj_tensor *v = index_view(self, key, NULL);
    if (v == NULL) return NULL;
    return ojpy_wrap(v, ((TensorObject *)self)->eng);
}

int ojpy_setitem(PyObject *self, PyObject *key, PyObject *value) {
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "tensor elements cannot be deleted");
        return -1;
    }
    EngineObject *e = ((TensorObject *)self)->eng;
    int advanced = 0;
    oj_tensor *t = ojpy_tensor_of(self, "self");
    if (t == NULL) return -1;
    oj_tensor *src = NULL;
    if (ojpy_is_tensor(value)) {
        src = ojpy_tensor_of(value, "value");
        if (src == NULL) return -1;
    } else if (!PyFloat_Check(value) && !PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "t[...] = value: value must be a tensor or a number, not %.80s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    if (oj_grad_enabled(e->eng) && (oj_requires_grad(t) || (src && oj_requires_grad(src)))) {
        ojpy_raise_status(OJ_ERR_STATE, "t[...] = value: writes into tensors that require grad "
                                        "are not recorded by autograd; do it under ojas.no_grad()");
        return -1;
    }
    oj_tensor *v = index_view(self, key, &advanced);
    if (v == NULL) return -1;
    if (advanced) {
        oj_release(v);
        ojpy_raise_status(OJ_ERR_UNSUPPORTED,
                          "t[index] = value with a list or tensor index is not supported yet");
        return -1;
    }
    oj_status st = src ? oj_copy_(v, src) : oj_fill_(v, PyFloat_AsDouble(value));
    oj_release(v);
    if (PyErr_Occurred()) return -1;
    if (st != OJ_OK) {
        ojpy_raise_engine(e->eng, "setitem");
        return -1;
    }
    return 0;
}
