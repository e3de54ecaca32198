/* safetensors files from Python (include/ojas/io.h): save(path, names,
 * tensors, metadata pairs) writes atomically (oj_safetensors_save); load(
 * path, engine) gives (dict of tensors, dict of metadata), zero-copy over
 * the mapped file on a CPU engine (oj_safetensors_tensor). ojas/io.py gives
 * them the names of the safetensors package (save_file, load_file). */
#include "ojas/io.h"

#include "ojas_py.h"

static PyObject *py_safetensors_save(PyObject *m, PyObject *args) {
    const char *path;
    PyObject *names, *tensors, *meta;
    if (!PyArg_ParseTuple(args, "sO!O!O!:safetensors_save", &path, &PyList_Type, &names,
                          &PyList_Type, &tensors, &PyList_Type, &meta))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(names), nm = PyList_GET_SIZE(meta);
    if (PyList_GET_SIZE(tensors) != n) {
        PyErr_SetString(PyExc_ValueError, "safetensors_save: names and tensors differ in length");
        return NULL;
    }
    const char **nv = PyMem_Calloc((size_t)n + 1, sizeof *nv);
    oj_tensor **tv = PyMem_Calloc((size_t)n + 1, sizeof *tv);
    const char **mv = PyMem_Calloc((size_t)nm + 1, sizeof *mv);
    PyObject *res = NULL;
    if (nv == NULL || tv == NULL || mv == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        nv[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(names, i));
        tv[i] = nv[i] ? ojpy_tensor_of(PyList_GET_ITEM(tensors, i), "tensors[i]") : NULL;
        if (tv[i] == NULL) goto out;
    }
    for (Py_ssize_t i = 0; i < nm; i++)
        if ((mv[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(meta, i))) == NULL) goto out;
    oj_error err = {0};
    if (oj_safetensors_save(path, n, nv, tv, nm ? mv : NULL, &err) != OJ_OK) {
        ojpy_raise_status(err.status, err.message);
        goto out;
    }
    res = Py_NewRef(Py_None);
out:
    PyMem_Free(nv);
    PyMem_Free(tv);
    PyMem_Free(mv);
    return res;
}

static PyObject *py_safetensors_load(PyObject *m, PyObject *args) {
    const char *path;
    PyObject *eo = Py_None;
    if (!PyArg_ParseTuple(args, "s|O:safetensors_load", &path, &eo)) return NULL;
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return NULL;
    oj_safetensors *st = NULL;
    oj_error err = {0};
    if (oj_safetensors_open(path, &st, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    PyObject *tensors = PyDict_New(), *meta = PyDict_New(), *res = NULL;
    if (tensors == NULL || meta == NULL) goto out;
    for (int64_t i = 0; i < oj_safetensors_count(st); i++) {
        const char *name = oj_safetensors_name(st, i);
        PyObject *t = ojpy_wrap(oj_safetensors_tensor(st, e->eng, name), e);
        if (t == NULL || PyDict_SetItemString(tensors, name, t) < 0) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    for (int64_t i = 0; i < oj_safetensors_metadata_count(st); i++) {
        PyObject *v = PyUnicode_FromString(oj_safetensors_metadata_value(st, i));
        if (v == NULL || PyDict_SetItemString(meta, oj_safetensors_metadata_key(st, i), v) < 0) {
            Py_XDECREF(v);
            goto out;
        }
        Py_DECREF(v);
    }
    res = PyTuple_Pack(2, tensors, meta);
out:
    Py_XDECREF(tensors);
    Py_XDECREF(meta);
    oj_safetensors_close(st);
    return res;
}

static PyMethodDef io_methods[] = {
    {"safetensors_save", py_safetensors_save, METH_VARARGS,
     "safetensors_save(path, names, tensors, [key, value, ...]): atomic write"},
    {"safetensors_load", py_safetensors_load, METH_VARARGS,
     "safetensors_load(path, engine=None) -> (tensors dict, metadata dict)"},
    {NULL},
};

int ojpy_io_init(PyObject *m) { return PyModule_AddFunctions(m, io_methods); }
