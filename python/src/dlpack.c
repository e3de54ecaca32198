/* DLPack exchange (https://dmlc.github.io/dlpack/latest/, header from
 * Debian's libdlpack-dev): Tensor.__dlpack__ / __dlpack_device__ export a
 * tensor's memory without a copy, and from_dlpack imports any producer's
 * (torch, numpy, CuPy) capsule without a copy through oj_from_external.
 * CPU memory goes to CPU engines, kDLCUDA memory of device N to a
 * cuda:N engine; anything else is ojas.DeviceError (never a silent copy).
 * Streams follow the Python array API's __dlpack__(stream=...): an export
 * finishes the engine's queued work first; an import from a CUDA producer
 * passes stream 1 (see py_from_dlpack). */
#include <dlpack/dlpack.h>

#include "ojas_py.h"

/* kDLBool arrived in DLPack 0.8; producers older than that send bool as
 * kDLUInt 8 (read as u8 here). */
#define OJPY_DL_BOOL 6

typedef struct export_ctx {
    DLManagedTensor managed;
    int64_t shape[OJ_MAX_RANK], strides[OJ_MAX_RANK];
    PyObject *owner; /* the exported Tensor, kept alive */
} export_ctx;

static void export_deleter(DLManagedTensor *m) {
    export_ctx *c = m->manager_ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    EngineObject *e = ((TensorObject *)c->owner)->eng;
    Py_INCREF(e);
    Py_DECREF(c->owner);
    ojpy_engine_exports(e, -1);
    Py_DECREF(e);
    PyMem_RawFree(c);
    PyGILState_Release(g);
}

static void capsule_destructor(PyObject *cap) {
    /* still named "dltensor": nobody consumed it, so the deleter is ours to call */
    if (!PyCapsule_IsValid(cap, "dltensor")) return;
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

static bool dl_dtype(oj_dtype dt, DLDataType *out) {
    static const DLDataType map[OJ_DTYPE_COUNT] = {
        [OJ_F32] = {kDLFloat, 32, 1}, [OJ_F64] = {kDLFloat, 64, 1}, [OJ_BF16] = {kDLBfloat, 16, 1},
        [OJ_F16] = {kDLFloat, 16, 1}, [OJ_I64] = {kDLInt, 64, 1},   [OJ_I32] = {kDLInt, 32, 1},
        [OJ_U32] = {kDLUInt, 32, 1},  [OJ_U16] = {kDLUInt, 16, 1},  [OJ_U8] = {kDLUInt, 8, 1},
        [OJ_BOOL] = {OJPY_DL_BOOL, 8, 1},
    };
    if (!oj_dtype_valid(dt)) return false;
    *out = map[dt];
    return true;
}

static int oj_dtype_of_dl(DLDataType d) {
    if (d.lanes != 1) return -1;
    switch (d.code) {
    case kDLFloat: return d.bits == 32 ? OJ_F32 : d.bits == 64 ? OJ_F64 : d.bits == 16 ? OJ_F16 : -1;
    case kDLBfloat: return d.bits == 16 ? OJ_BF16 : -1;
    case kDLInt: return d.bits == 64 ? OJ_I64 : d.bits == 32 ? OJ_I32 : -1;
    case kDLUInt:
        return d.bits == 32 ? OJ_U32 : d.bits == 16 ? OJ_U16 : d.bits == 8 ? OJ_U8 : -1;
    case OJPY_DL_BOOL: return d.bits == 8 ? OJ_BOOL : -1;
    default: return -1;
    }
}

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
 * as the Python array API's: stream is the consumer's, None on a CPU tensor
 * (anything else: InvalidArgumentError); on CUDA None or 1 (the legacy
 * default stream), 2 (per-thread default) or a cudaStream_t as an int:
 * the engine finishes its queued work before the capsule is made, so the
 * data is ready on any stream; -1 asks for no synchronisation; 0 is
 * ambiguous and refused. max_version is accepted and a legacy "dltensor"
 * capsule returned (allowed by the protocol); dl_device must be the
 * tensor's own device (DeviceError) and copy must not be True (ojas does
 * not copy here: UnsupportedError). */
PyObject *ojpy_tensor_dlpack(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", names, &stream, &max_version,
                                     &dl_device, &copy))
        return NULL;
    oj_tensor *t = ojpy_tensor_of(self, "self");
    if (t == NULL) return NULL;
    EngineObject *e = ((TensorObject *)self)->eng;
    oj_device dev = oj_tensor_device(t);
    int dl_type = dev.type == OJ_DEVICE_CUDA ? kDLCUDA : kDLCPU;
    if (copy != Py_None && PyObject_IsTrue(copy) > 0)
        return ojpy_raise_status(OJ_ERR_UNSUPPORTED, "__dlpack__: copy=True is not supported "
                                                     "(ojas exports without a copy; clone() first)");
    if (dl_device != Py_None) {
        int want_type, want_id;
        if (!PyArg_ParseTuple(dl_device, "ii;__dlpack__: dl_device must be a (type, id) pair",
                              &want_type, &want_id))
            return NULL;
        if (want_type != dl_type || want_id != dev.index) {
            char msg[200];
            snprintf(msg, sizeof msg, "__dlpack__: dl_device (%d, %d) is not the tensor's device "
                     "(%d, %d); ojas does not copy between devices implicitly", want_type, want_id,
                     dl_type, dev.index);
            return ojpy_raise_status(OJ_ERR_DEVICE, msg);
        }
    }
    long long sv = 0;
    if (stream != Py_None) {
        if (!PyLong_Check(stream)) {
            PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be None or an int, not %.80s",
                         Py_TYPE(stream)->tp_name);
            return NULL;
        }
        sv = PyLong_AsLongLong(stream);
        if (sv == -1 && PyErr_Occurred()) return NULL;
        if (dev.type != OJ_DEVICE_CUDA) {
            char msg[160];
            snprintf(msg, sizeof msg, "__dlpack__: stream must be None for a CPU tensor, got %lld",
                     sv);
            return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, msg);
        }
        if (sv == 0)
            return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT,
                                     "__dlpack__: stream 0 is ambiguous for CUDA (pass 1 for the "
                                     "legacy default stream, 2 for the per-thread one)");
    }
    /* the consumer's stream may run before the engine's queued work: finish
     * it (unless the consumer asked for no synchronisation, stream -1) */
    if (dev.type == OJ_DEVICE_CUDA && sv != -1 && oj_engine_synchronize(e->eng) != OJ_OK)
        return ojpy_raise_engine(e->eng, "__dlpack__");
    export_ctx *c = PyMem_RawCalloc(1, sizeof *c);
    if (c == NULL) return PyErr_NoMemory();
    int r = oj_rank(t);
    for (int d = 0; d < r; d++) {
        c->shape[d] = oj_shape(t)[d];
        c->strides[d] = oj_strides(t)[d];
    }
    DLTensor *dl = &c->managed.dl_tensor;
    dl->data = oj_device_data_ptr(t);
    dl->device.device_type = (DLDeviceType)dl_type;
    dl->device.device_id = dev.index;
    dl->ndim = r;
    dl_dtype(oj_tensor_dtype(t), &dl->dtype);
    dl->shape = c->shape;
    dl->strides = c->strides;
    dl->byte_offset = 0;
    c->managed.manager_ctx = c;
    c->managed.deleter = export_deleter;
    c->owner = self;
    PyObject *cap = PyCapsule_New(&c->managed, "dltensor", capsule_destructor);
    if (cap == NULL) {
        PyMem_RawFree(c);
        return NULL;
    }
    Py_INCREF(self);
    ojpy_engine_exports(e, +1);
    return cap;
}

PyObject *ojpy_tensor_dlpack_device(PyObject *self, PyObject *unused) {
    oj_tensor *t = ojpy_tensor_of(self, "self");
    if (t == NULL) return NULL;
    oj_device dev = oj_tensor_device(t);
    return Py_BuildValue("(ii)", dev.type == OJ_DEVICE_CUDA ? kDLCUDA : kDLCPU, dev.index);
}

static void import_release(void *ctx) {
    DLManagedTensor *m = ctx;
    if (m->deleter == NULL) return;
    PyGILState_STATE g = PyGILState_Ensure();
    m->deleter(m);
    PyGILState_Release(g);
}

/* from_dlpack(obj, engine=None): obj a DLPack producer (has __dlpack__) or
 * a "dltensor" capsule. */
static PyObject *py_from_dlpack(PyObject *m, PyObject *args) {
    PyObject *obj, *eo = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &obj, &eo)) return NULL;
    EngineObject *e = ojpy_engine_arg(eo);
    if (e == NULL) return NULL;
    PyObject *cap;
    if (PyCapsule_CheckExact(obj)) {
        cap = obj;
        Py_INCREF(cap);
    } else {
        /* a CUDA producer gets stream 1, the legacy default stream: the
         * engine's stream is a blocking one, so its later work is ordered
         * after whatever the producer makes that stream wait for */
        PyObject *kw = PyDict_New();
        if (kw == NULL) return NULL;
        PyObject *devt = PyObject_HasAttrString(obj, "__dlpack_device__")
                             ? PyObject_CallMethod(obj, "__dlpack_device__", NULL)
                             : (Py_INCREF(Py_None), Py_None);
        int dtype_ = 0, did = 0;
        int ok = devt != NULL &&
                 (devt == Py_None ||
                  PyArg_ParseTuple(devt, "ii;__dlpack_device__ must give (type, id)", &dtype_, &did));
        Py_XDECREF(devt);
        if (ok && dtype_ == kDLCUDA) {
            PyObject *one = PyLong_FromLong(1);
            ok = one != NULL && PyDict_SetItemString(kw, "stream", one) == 0;
            Py_XDECREF(one);
        }
        PyObject *noargs = ok ? PyTuple_New(0) : NULL;
        PyObject *meth = noargs ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
        cap = meth ? PyObject_Call(meth, noargs, kw) : NULL;
        Py_XDECREF(meth);
        Py_XDECREF(noargs);
        Py_DECREF(kw);
        if (cap == NULL) return NULL;
    }
    if (!PyCapsule_IsValid(cap, "dltensor")) {
        Py_DECREF(cap);
        return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT,
                                 "from_dlpack: not an unconsumed 'dltensor' capsule (a capsule "
                                 "can be imported once)");
    }
    DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
    DLTensor *dl = &mt->dl_tensor;
    oj_device dev = oj_engine_device(e->eng);
    char msg[256];
    const char *why = NULL;
    int dt = oj_dtype_of_dl(dl->dtype);
    bool cpu_mem = dl->device.device_type == kDLCPU || dl->device.device_type == kDLCUDAHost;
    if (dev.type == OJ_DEVICE_CPU ? !cpu_mem
                                  : (dl->device.device_type != kDLCUDA ||
                                     dl->device.device_id != dev.index)) {
        char dn[32];
        oj_device_name(dev, dn, sizeof dn);
        snprintf(msg, sizeof msg,
                 "from_dlpack: the memory is on DLPack device (%d, %d) and the engine is %s; "
                 "ojas does not copy between devices implicitly",
                 (int)dl->device.device_type, (int)dl->device.device_id, dn);
        Py_DECREF(cap);
        return ojpy_raise_status(OJ_ERR_DEVICE, msg);
    }
    if (dt < 0) why = "its dtype has no ojas equivalent";
    else if (dl->ndim < 0 || dl->ndim > OJ_MAX_RANK) why = "it has more than 8 dims";
    if (why) {
        snprintf(msg, sizeof msg, "from_dlpack: dtype (code %d, bits %d, lanes %d) or rank %d: %s",
                 dl->dtype.code, dl->dtype.bits, dl->dtype.lanes, (int)dl->ndim, why);
        Py_DECREF(cap);
        return ojpy_raise_status(dt < 0 ? OJ_ERR_DTYPE : OJ_ERR_SHAPE, msg);
    }
    oj_tensor *t = oj_from_external(e->eng, (char *)dl->data + dl->byte_offset, dl->ndim, dl->shape,
                                    dl->strides, (oj_dtype)dt, import_release, mt);
    if (t == NULL) {
        Py_DECREF(cap); /* still "dltensor": its destructor calls the producer's deleter */
        return ojpy_raise_engine(e->eng, "from_dlpack");
    }
    PyCapsule_SetName(cap, "used_dltensor"); /* ours now: the tensor calls the deleter */
    Py_DECREF(cap);
    return ojpy_wrap(t, e);
}

PyMethodDef ojpy_dlpack_methods[] = {
    {"from_dlpack", py_from_dlpack, METH_VARARGS,
     "from_dlpack(obj, engine=None): a tensor sharing the memory of a DLPack producer"},
    {NULL},
};
