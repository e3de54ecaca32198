/* Tensor indexing as torch's basic indexing: ints select (the dim goes),
 * slices with a positive step narrow, None inserts a dim, Ellipsis stands
 * for the dims not named; all of these give views sharing storage. A 1-D
 * integer tensor or a list of ints on a dim gathers rows (index_select, a
 * copy, as torch's advanced indexing). t[key] = value writes through the
 * view (oj_copy_ or oj_fill_). A bool mask (a bool tensor or a list of
 * bools) as the whole key selects the elements (rows) where it is true, as
 * torch: t[mask] gathers them (a copy, with a gradient) and t[mask] = v
 * writes them (oj_index_copy_). */
#include "ojas_py.h"

/* Integer index tensor from a tensor or a list of ints; new owner
 * reference, or NULL (exception set). */
static oj_tensor *index_tensor(EngineObject *e, PyObject *o) {
    if (ojpy_is_tensor(o)) {
        oj_tensor *t = ojpy_tensor_of(o, "index");
        if (t == NULL) return NULL;
        oj_dtype dt = oj_tensor_dtype(t);
        if (dt == OJ_BOOL) {
            ojpy_raise_status(OJ_ERR_UNSUPPORTED, "index: a bool mask must be the whole index "
                                                  "(t[mask]); combined with other indices it is "
                                                  "not supported");
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

/* "[2, 3]" into buf. */
static void shape_str(char *buf, size_t n, int rank, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* The bool mask of key: a bool tensor, a 1-tuple holding one, or a
 * non-empty list of Python bools. Returns 1 with *host (PyMem, one byte per
 * element, row-major), *rank and shape filled; 0 when key is no mask; -1
 * with an exception. */
static int mask_of(PyObject *key, uint8_t **host, int *rank, int64_t *shape) {
    if (PyTuple_Check(key) && PyTuple_GET_SIZE(key) == 1) key = PyTuple_GET_ITEM(key, 0);
    if (PyList_Check(key)) {
        Py_ssize_t n = PyList_GET_SIZE(key);
        if (n == 0) return 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (!PyBool_Check(PyList_GET_ITEM(key, i))) return 0;
        *host = PyMem_Malloc((size_t)n);
        if (*host == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) (*host)[i] = PyList_GET_ITEM(key, i) == Py_True;
        *rank = 1;
        shape[0] = n;
        return 1;
    }
    if (!ojpy_is_tensor(key)) return 0;
    oj_tensor *m = ojpy_tensor_of(key, "index");
    if (m == NULL) return -1;
    if (oj_tensor_dtype(m) != OJ_BOOL) return 0;
    *rank = oj_rank(m);
    int64_t numel = oj_numel(m);
    for (int d = 0; d < *rank; d++) shape[d] = oj_shape(m)[d];
    *host = PyMem_Malloc((size_t)(numel ? numel : 1));
    if (*host == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (oj_to_host(m, *host, (size_t)numel) != OJ_OK) {
        PyMem_Free(*host);
        ojpy_raise_engine(((TensorObject *)key)->eng->eng, "index");
        return -1;
    }
    return 1;
}

/* For t[mask]: *rows, t with the mask's dims merged into one (a view; t
 * itself for a 1-D mask), and *idx, the i64 positions where the mask is
 * true. 0, or -1 with an exception (ShapeError when the mask's shape is not
 * t's leading dims). */
static int mask_rows(EngineObject *e, oj_tensor *t, const uint8_t *host, int mrank,
                     const int64_t *mshape, oj_tensor **rows, oj_tensor **idx) {
    int rank = oj_rank(t);
    const int64_t *shape = oj_shape(t);
    bool fits = mrank <= rank;
    for (int d = 0; fits && d < mrank; d++) fits = mshape[d] == shape[d];
    if (!fits) {
        char ms[160], ts[160], msg[480];
        shape_str(ms, sizeof ms, mrank, mshape);
        shape_str(ts, sizeof ts, rank, shape);
        snprintf(msg, sizeof msg, "index: the bool mask's shape %s does not match the leading "
                 "dims of the indexed tensor's shape %s", ms, ts);
        ojpy_raise_status(OJ_ERR_SHAPE, msg);
        return -1;
    }
    int64_t n = 1, count = 0;
    for (int d = 0; d < mrank; d++) n *= mshape[d];
    for (int64_t i = 0; i < n; i++) count += host[i] != 0;
    int64_t *pos = PyMem_Malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    if (pos == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t i = 0, j = 0; i < n; i++)
        if (host[i]) pos[j++] = i;
    *idx = oj_from_host(e->eng, 1, &count, OJ_I64, pos, sizeof(int64_t) * (size_t)count);
    PyMem_Free(pos);
    if (*idx == NULL) {
        ojpy_raise_engine(e->eng, "index");
        return -1;
    }
    int64_t rshape[OJ_MAX_RANK];
    rshape[0] = n;
    for (int d = mrank; d < rank; d++) rshape[d - mrank + 1] = shape[d];
    *rows = mrank == 1 ? oj_retain(t) : oj_reshape(t, rank - mrank + 1, rshape);
    if (*rows == NULL) {
        oj_release(*idx);
        ojpy_raise_engine(e->eng, "index");
        return -1;
    }
    return 0;
}

/* t[mask]: the selected rows, [count, *t.shape[mask.ndim:]], a copy with a
 * gradient (index_select). */
static PyObject *mask_get(PyObject *self, oj_tensor *t, const uint8_t *host, int mrank,
                          const int64_t *mshape) {
    EngineObject *e = ((TensorObject *)self)->eng;
    oj_tensor *rows, *idx;
    if (mask_rows(e, t, host, mrank, mshape, &rows, &idx) < 0) return NULL;
    oj_tensor *out = oj_index_select(rows, 0, idx);
    oj_release(rows);
    oj_release(idx);
    if (out == NULL) return ojpy_raise_engine(e->eng, "index");
    return ojpy_wrap(out, e);
}

/* t[mask] = value (a number, or a tensor broadcastable to the selected
 * rows' shape), in place through oj_index_copy_. */
static int mask_set(EngineObject *e, oj_tensor *t, oj_tensor *src, double value,
                    const uint8_t *host, int mrank, const int64_t *mshape) {
    oj_tensor *rows, *idx, *vals = NULL;
    if (mask_rows(e, t, host, mrank, mshape, &rows, &idx) < 0) return -1;
    int rc = -1;
    if (!oj_shares_storage(rows, t)) {
        ojpy_raise_status(OJ_ERR_UNSUPPORTED, "t[mask] = value: the mask's dims of this tensor "
                                              "cannot be merged into one as a view (its strides); "
                                              "use a 1-D mask or a contiguous tensor");
        goto out;
    }
    int64_t shape[OJ_MAX_RANK];
    int r = oj_rank(rows);
    for (int d = 0; d < r; d++) shape[d] = oj_shape(rows)[d];
    shape[0] = oj_numel(idx);
    oj_dtype dt = oj_tensor_dtype(t);
    if (src == NULL) {
        vals = oj_full(e->eng, r, shape, dt, value);
    } else {
        oj_tensor *c = oj_tensor_dtype(src) == dt ? oj_retain(src) : oj_cast(src, dt);
        if (c == NULL) {
            ojpy_raise_engine(e->eng, "t[mask] = value");
            goto out;
        }
        vals = oj_expand(c, r, shape);
        oj_release(c);
    }
    if (vals == NULL || oj_index_copy_(rows, 0, idx, vals) != OJ_OK) {
        ojpy_raise_engine(e->eng, "t[mask] = value");
        goto out;
    }
    rc = 0;
out:
    oj_release(vals);
    oj_release(rows);
    oj_release(idx);
    return rc;
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
    uint8_t *host = NULL;
    int mrank = 0;
    int64_t mshape[OJ_MAX_RANK];
    int is_mask = mask_of(key, &host, &mrank, mshape);
    if (is_mask < 0) return NULL;
    if (is_mask) {
        oj_tensor *t = ojpy_tensor_of(self, "self");
        PyObject *r = t ? mask_get(self, t, host, mrank, mshape) : NULL;
        PyMem_Free(host);
        return r;
    }
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
    uint8_t *host = NULL;
    int mrank = 0;
    int64_t mshape[OJ_MAX_RANK];
    int is_mask = mask_of(key, &host, &mrank, mshape);
    if (is_mask < 0) return -1;
    if (is_mask) {
        double x = src ? 0.0 : PyFloat_AsDouble(value);
        int r = PyErr_Occurred() ? -1 : mask_set(e, t, src, x, host, mrank, mshape);
        PyMem_Free(host);
        return r;
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
