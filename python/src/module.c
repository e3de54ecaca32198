/* ojas._C: the CPython extension over libojas (the headers of include/ojas). The
 * package ojas (ojas/__init__.py) builds torch's names on top of it. */
#include "ojas_py.h"

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, .m_name = "ojas._C",
    .m_doc = "ojas C extension: engines, tensors, ops, DLPack (see docs/python.md).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__C(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (ojpy_errors_init(m) < 0 || ojpy_engine_init(m) < 0 || ojpy_tensor_init(m) < 0 ||
        ojpy_optim_init(m) < 0 || ojpy_io_init(m) < 0 ||
        PyModule_AddFunctions(m, ojpy_op_methods) < 0 ||
        PyModule_AddFunctions(m, ojpy_create_methods) < 0 ||
        PyModule_AddFunctions(m, ojpy_dlpack_methods) < 0 ||
        PyModule_AddStringConstant(m, "OJ_VERSION", OJ_VERSION_STRING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
