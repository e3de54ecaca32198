/* ojas.Error and its subclasses, one per oj_status, each also deriving from
 * the built-in exception a Python user would catch for it (ShapeError is a
 * ValueError, CapacityError a MemoryError, ...). Every one carries .status
 * (the oj_status name, e.g. "OJ_ERR_SHAPE") and .message (the engine's
 * message, which names what was wrong). */
#include "ojas_py.h"

static PyObject *error_base;                 /* ojas.Error */
static PyObject *error_of[OJ_ERR_STATE + 1]; /* by status */

static const struct {
    oj_status st;
    const char *name;
    PyObject **builtin;
} kinds[] = {
    {OJ_ERR_INVALID_ARGUMENT, "InvalidArgumentError", &PyExc_ValueError},
    {OJ_ERR_SHAPE, "ShapeError", &PyExc_ValueError},
    {OJ_ERR_DTYPE, "DtypeError", &PyExc_TypeError},
    {OJ_ERR_DEVICE, "DeviceError", &PyExc_RuntimeError},
    {OJ_ERR_CAPACITY, "CapacityError", &PyExc_MemoryError},
    {OJ_ERR_OUT_OF_RANGE, "OutOfRangeError", &PyExc_IndexError},
    {OJ_ERR_IO, "IOError", &PyExc_OSError},
    {OJ_ERR_CORRUPT, "CorruptError", &PyExc_ValueError},
    {OJ_ERR_UNSUPPORTED, "UnsupportedError", &PyExc_NotImplementedError},
    {OJ_ERR_NUMERIC, "NumericError", &PyExc_FloatingPointError},
    {OJ_ERR_INTERNAL, "InternalError", &PyExc_RuntimeError},
    {OJ_ERR_STATE, "StateError", &PyExc_RuntimeError},
};

int ojpy_errors_init(PyObject *m) {
    error_base = PyErr_NewExceptionWithDoc(
        "ojas.Error", "An ojas call failed: .status names the oj_status, .message says what was wrong.",
        PyExc_Exception, NULL);
    if (error_base == NULL || PyModule_AddObjectRef(m, "Error", error_base) < 0) return -1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char qual[64];
        snprintf(qual, sizeof qual, "ojas.%s", kinds[i].name);
        PyObject *bases = PyTuple_Pack(2, error_base, *kinds[i].builtin);
        if (bases == NULL) return -1;
        PyObject *cls = PyErr_NewException(qual, bases, NULL);
        Py_DECREF(bases);
        if (cls == NULL || PyModule_AddObjectRef(m, kinds[i].name, cls) < 0) return -1;
        error_of[kinds[i].st] = cls;
    }
    return 0;
}

PyObject *ojpy_raise_status(oj_status st, const char *msg) {
    PyObject *cls = (st > OJ_OK && st <= OJ_ERR_STATE && error_of[st]) ? error_of[st] : error_base;
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (exc == NULL) return NULL;
    PyObject *name = PyUnicode_FromString(oj_status_name(st));
    PyObject *text = PyUnicode_FromString(msg);
    if (name && text && PyObject_SetAttrString(exc, "status", name) == 0 &&
        PyObject_SetAttrString(exc, "message", text) == 0)
        PyErr_SetObject(cls, exc);
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_DECREF(exc);
    return NULL;
}

PyObject *ojpy_raise_engine(oj_engine *eng, const char *what) {
    oj_status st = eng ? oj_last_status(eng) : OJ_OK;
    if (st == OJ_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s failed without an error recorded on the engine", what);
        return ojpy_raise_status(OJ_ERR_INTERNAL, msg);
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", oj_last_error(eng));
    oj_clear_error(eng);
    return ojpy_raise_status(st, msg);
}

PyObject *ojpy_raise_closed(void) {
    return ojpy_raise_status(OJ_ERR_STATE, "the tensor's engine is closed (Engine.close() or the end of its with block)");
}
