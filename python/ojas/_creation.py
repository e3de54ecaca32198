"""Creation functions with torch's signatures. Each makes a tensor on
`engine` (default: ojas.default_engine(), the innermost `with Engine(...)`);
`device`, when given, must name that engine's device (ojas never moves data
between devices implicitly: DeviceError)."""
import numpy as np

from ojas import _C
from ojas import _dtype as D
from ojas._tensor import _shape_args


def _engine(engine, device):
    e = _C.default_engine() if engine is None else engine
    if device is not None:
        want = str(device)
        if want == "cuda":
            want = "cuda:0"
        if want != e.device:
            raise _C.DeviceError("device %r asked for, but the engine is on %s; create the tensor "
                                 "inside `with ojas.Engine(device=%r):`" % (str(device), e.device,
                                                                           str(device)))
    return e


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad = True
    return t


def _float(dtype):
    return D.float32 if dtype is None else D.as_dtype(dtype)


def tensor(data, dtype=None, device=None, requires_grad=False, engine=None):
    """A new tensor holding a copy of data (nested lists, numbers, numpy arrays,
    any buffer, or a tensor). Python floats give float32, ints int64, bools
    bool, as torch.tensor; a numpy array keeps its dtype."""
    e = _engine(engine, device)
    if isinstance(data, _C.TensorBase):
        t = _C.clone(_C.detach(data))
        if dtype is not None:
            t = t.to(dtype)
        return _finish(t, requires_grad)
    want = None if dtype is None else D.as_dtype(dtype)
    if isinstance(data, np.ndarray) or hasattr(data, "__array_interface__"):
        arr = np.asarray(data)
    else:
        arr = np.asarray(data)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype.kind == "i" and arr.dtype != np.int64:
            arr = arr.astype(np.int64)
        elif arr.dtype == object or arr.dtype.kind in "USV":
            raise _C.DtypeError("tensor: cannot make a tensor from %s data" % arr.dtype)
    if want is D.bfloat16:
        t = _C.from_buffer(np.ascontiguousarray(arr, dtype=np.float32), D.float32, e)
        t = _C.cast(t, D.bfloat16)
    else:
        if want is not None:
            arr = arr.astype(want._np, copy=False)
        arr = np.asarray(arr, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        dt = D.from_numpy_dtype(arr.dtype)
        t = _C.from_buffer(arr, dt, e)
    return _finish(t, requires_grad)


def as_tensor(data, dtype=None, device=None, engine=None):
    if isinstance(data, _C.TensorBase) and (dtype is None or D.as_dtype(dtype) is data.dtype):
        return data
    return tensor(data, dtype=dtype, device=device, engine=engine)


def from_numpy(array, engine=None):
    """A CPU tensor sharing a writable numpy array's memory (torch.from_numpy):
    writes through either show in the other."""
    return _C.from_numpy(array, _engine(engine, None))


def from_dlpack(obj, engine=None):
    """A tensor sharing the memory of a DLPack producer (torch, numpy, CuPy...)
    or capsule; the memory must be on the engine's device (DeviceError)."""
    return _C.from_dlpack(obj, _engine(engine, None))


def _shaped(fn, size, dtype, device, requires_grad, engine):
    return _finish(fn(_shape_args(size), _float(dtype), _engine(engine, device)), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False, engine=None):
    return _shaped(_C.zeros, size, dtype, device, requires_grad, engine)


def ones(*size, dtype=None, device=None, requires_grad=False, engine=None):
    return _shaped(_C.ones, size, dtype, device, requires_grad, engine)


def empty(*size, dtype=None, device=None, requires_grad=False, engine=None):
    return _shaped(_C.empty, size, dtype, device, requires_grad, engine)


def full(size, fill_value, dtype=None, device=None, requires_grad=False, engine=None):
    if dtype is None:
        dtype = D.bool_ if isinstance(fill_value, bool) else \
            D.int64 if isinstance(fill_value, int) else D.float32
    t = _C.full(_shape_args((size,)), float(fill_value), D.as_dtype(dtype),
                _engine(engine, device))
    return _finish(t, requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False, engine=None):
    """U[0, 1) (Philox4x32-10, keyed by the engine's seed)."""
    t = _C.rand(_shape_args(size), _float(dtype), 0.0, 1.0, _engine(engine, device))
    return _finish(t, requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False, engine=None):
    """N(0, 1) (Box-Muller on Philox4x32-10, keyed by the engine's seed)."""
    t = _C.randn(_shape_args(size), _float(dtype), 0.0, 1.0, _engine(engine, device))
    return _finish(t, requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False, engine=None):
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, int) for v in (start, end, step))
        dtype = D.int64 if ints else D.float32
    t = _C.arange(float(start), float(end), float(step), D.as_dtype(dtype),
                  _engine(engine, device))
    return _finish(t, requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False, engine=None):
    t = _C.linspace(float(start), float(end), int(steps), _float(dtype), _engine(engine, device))
    return _finish(t, requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False, engine=None):
    t = _C.eye(n, n if m is None else m, _float(dtype), _engine(engine, device))
    return _finish(t, requires_grad)


def _like(fn, t, dtype, requires_grad, *extra):
    d = t.dtype if dtype is None else D.as_dtype(dtype)
    return _finish(fn(t.shape, *extra[:1], d, *extra[1:], t.engine), requires_grad)


def zeros_like(t, dtype=None, requires_grad=False):
    return _like(_C.zeros, t, dtype, requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    return _like(_C.ones, t, dtype, requires_grad)


def empty_like(t, dtype=None, requires_grad=False):
    return _like(_C.empty, t, dtype, requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad=False):
    d = t.dtype if dtype is None else D.as_dtype(dtype)
    return _finish(_C.full(t.shape, float(fill_value), d, t.engine), requires_grad)


def rand_like(t, dtype=None, requires_grad=False):
    d = t.dtype if dtype is None else D.as_dtype(dtype)
    return _finish(_C.rand(t.shape, d, 0.0, 1.0, t.engine), requires_grad)


def randn_like(t, dtype=None, requires_grad=False):
    d = t.dtype if dtype is None else D.as_dtype(dtype)
    return _finish(_C.randn(t.shape, d, 0.0, 1.0, t.engine), requires_grad)


def manual_seed(seed):
    """Reseed the default engine's RNG (its counter restarts at 0)."""
    _C.default_engine().manual_seed(int(seed))
