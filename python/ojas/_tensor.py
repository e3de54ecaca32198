"""ojas.Tensor: the C tensor (ojas._C.TensorBase) with torch's methods.

Operators, indexing, .grad, .backward(), the buffer protocol and DLPack are
in C (python/src/tensor.c, index.c, dlpack.c); the methods here give the
raw ops of ojas._C torch's names and keyword signatures."""
import collections

import numpy as np

from ojas import _C
from ojas import _dtype as D

_REDUCTION = {"mean": 0, "sum": 1, "none": 2}

min_max = collections.namedtuple("min_max", ["values", "indices"])


def _dims(dim):
    """None, an int or a sequence of ints as the C ops take them."""
    if dim is None or isinstance(dim, int):
        return dim
    return tuple(dim)


def _shape_args(args):
    """f(2, 3) and f((2, 3)) alike, as torch's size arguments."""
    if len(args) == 1 and not isinstance(args[0], int):
        return tuple(args[0])
    return args


def _as_tensor_like(x, like):
    """x if it is a tensor, else a rank-0 tensor on like's engine in the dtype
    torch's scalar promotion gives."""
    if isinstance(x, _C.TensorBase):
        return x
    if isinstance(x, bool):
        dt = like.dtype
    elif isinstance(x, int):
        dt = like.dtype if like.dtype is not D.bool_ else D.int64
    elif isinstance(x, float):
        dt = like.dtype if like.dtype.is_floating_point else D.float32
    else:
        raise TypeError("expected a tensor or a number, not %s" % type(x).__name__)
    return _C.scalar(float(x), dt, like.engine)


class Tensor(_C.TensorBase):
    """A tensor of an ojas engine. It lives as long as this object; its memory
    belongs to its engine (see ojas.Engine)."""

    __slots__ = ()

    # ------------------------------------------------------------ attributes
    @property
    def T(self):
        return _C.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        return _C.transpose(self, -2, -1)

    @property
    def data(self):
        return _C.detach(self)

    @property
    def is_cuda(self):
        return self.device.startswith("cuda")

    @property
    def is_floating_point_(self):
        return self.dtype.is_floating_point

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def size(self, dim=None):
        s = self.shape
        return s if dim is None else s[dim]

    def stride(self, dim=None):
        s = self._strides
        return s if dim is None else s[dim]

    def element_size(self):
        return self.dtype.itemsize

    def nelement(self):
        return self.numel()

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __array__(self, dtype=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __format__(self, spec):
        if self.ndim == 0 and spec:
            return format(self.item(), spec)
        return repr(self)

    def __reduce_ex__(self, proto):
        from ojas._creation import tensor
        return (tensor, (self.tolist(), self.dtype))

    # ------------------------------------------------------------ conversion
    def numpy(self):
        """A numpy array sharing the tensor's memory (CPU; not bf16). Marks
        the storage exported, as data_ptr() does (docs/python.md)."""
        if self.dtype is D.bfloat16:
            raise _C.DtypeError("numpy: numpy has no bfloat16; use t.float().numpy()")
        if not self.device == "cpu":
            raise _C.DeviceError("numpy: the tensor is on %s; numpy arrays live in host memory"
                                 % self.device)
        return np.asarray(self)

    def tolist(self):
        t = self.float() if self.dtype is D.bfloat16 else self
        a = np.frombuffer(t._tobytes(), dtype=t.dtype._np).reshape(t.shape)
        return a.tolist()

    def to(self, dtype=None, *args, **kwargs):
        """to(dtype), to(engine) (a copy on that engine, oj_to_device), or
        to(device string) when it names the tensor's own device (a copy to
        another device needs the target engine: to(engine))."""
        if isinstance(dtype, _C.Engine):
            return _C.to_engine(self, dtype)
        if isinstance(dtype, str) and not kwargs.get("dtype"):
            if dtype.split(":")[0] in ("cpu", "cuda"):
                if dtype == self.device or (dtype == "cuda" and self.device == "cuda:0"):
                    return self
                raise _C.DeviceError("to: the tensor is on %s; pass the engine of %s, "
                                     "t.to(engine) (ojas copies between engines only when "
                                     "asked, never by a device name alone)" % (self.device, dtype))
        dtype = kwargs.get("dtype", dtype)
        if dtype is None:
            return self
        dtype = D.as_dtype(dtype)
        return self if dtype is self.dtype else _C.cast(self, dtype)

    def cpu(self, engine=None):
        """Self on a CPU engine; a copy to `engine` (default: the default
        engine, which must be a CPU one) from another device."""
        if self.device == "cpu":
            return self
        e = engine if engine is not None else _C.default_engine()
        if e.device != "cpu":
            raise _C.DeviceError("cpu: the default engine is on %s; pass a CPU engine" % e.device)
        return _C.to_engine(self, e)

    def type(self, dtype):
        return self.to(dtype)

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def half(self):
        return self.to(D.float16)

    def bfloat16(self):
        return self.to(D.bfloat16)

    def long(self):
        return self.to(D.int64)

    def int(self):
        return self.to(D.int32)

    def bool(self):
        return self.to(D.bool_)

    def type_as(self, other):
        return self.to(other.dtype)

    # ------------------------------------------------------------ autograd
    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    def detach(self):
        return _C.detach(self)

    def detach_(self):
        raise _C.UnsupportedError("detach_: use t = t.detach()")

    def clone(self):
        return _C.clone(self)

    def contiguous(self):
        return self if self.is_contiguous() else _C.contiguous(self)

    # ------------------------------------------------------------ in place
    def zero_(self):
        return _C.fill_(self, 0.0)

    def fill_(self, value):
        return _C.fill_(self, float(value))

    def copy_(self, src):
        return _C.copy_(self, _as_tensor_like(src, self))

    def add_(self, other, alpha=1):
        if alpha != 1:
            other = other * alpha
        self += other
        return self

    def sub_(self, other, alpha=1):
        return self.add_(other, -alpha)

    def mul_(self, other):
        if isinstance(other, (int, float)) and not isinstance(other, bool) and \
                self.dtype.is_floating_point:
            return _C.mul_scalar_(self, float(other))
        self *= other
        return self

    def div_(self, other):
        self /= other
        return self

    def clamp_(self, min=None, max=None):
        return self.copy_(self.clamp(min, max))

    def index_copy_(self, dim, index, source):
        return _C.index_copy_(self, dim, index, source)

    def masked_fill_(self, mask, value):
        return self.copy_(_C.masked_fill(self, mask, float(value)))

    # ------------------------------------------------------------ arithmetic
    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def true_divide(self, other):
        return self / other

    def pow(self, exponent):
        return self ** exponent

    def matmul(self, other):
        return _C.matmul(self, other)

    def mm(self, other):
        return _C.matmul(self, other)

    def bmm(self, other):
        return _C.bmm(self, other)

    def maximum(self, other):
        return _C.maximum(self, _as_tensor_like(other, self))

    def minimum(self, other):
        return _C.minimum(self, _as_tensor_like(other, self))

    def clamp(self, min=None, max=None):
        return _C.clamp(self, min, max)

    clip = clamp

    def where(self, condition, other):
        from ojas._functions import where
        return where(condition, self, other)

    def masked_fill(self, mask, value):
        return _C.masked_fill(self, mask, float(value))

    def leaky_relu(self, negative_slope=0.01):
        return _C.leaky_relu(self, negative_slope)

    def softplus(self, beta=1.0, threshold=20.0):
        return _C.softplus(self, beta, threshold)

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    def logical_and(self, other):
        return _C.logical_and(self, _as_tensor_like(other, self))

    def logical_or(self, other):
        return _C.logical_or(self, _as_tensor_like(other, self))

    def logical_xor(self, other):
        return _C.logical_xor(self, _as_tensor_like(other, self))

    # ------------------------------------------------------------ reductions
    def sum(self, dim=None, keepdim=False, dtype=None):
        x = self.to(dtype) if dtype is not None else self
        return _C.sum(x, _dims(dim), keepdim)

    def mean(self, dim=None, keepdim=False, dtype=None):
        x = self.to(dtype) if dtype is not None else self
        return _C.mean(x, _dims(dim), keepdim)

    def prod(self, dim=None, keepdim=False):
        return _C.prod(self, _dims(dim), keepdim)

    def amax(self, dim=None, keepdim=False):
        return _C.amax(self, _dims(dim), keepdim)

    def amin(self, dim=None, keepdim=False):
        return _C.amin(self, _dims(dim), keepdim)

    def max(self, dim=None, keepdim=False):
        if isinstance(dim, _C.TensorBase):
            return _C.maximum(self, dim)
        if dim is None:
            return _C.amax(self, None, False)
        return min_max(*_C.max(self, dim, keepdim))

    def min(self, dim=None, keepdim=False):
        if isinstance(dim, _C.TensorBase):
            return _C.minimum(self, dim)
        if dim is None:
            return _C.amin(self, None, False)
        return min_max(*_C.min(self, dim, keepdim))

    def argmax(self, dim=None, keepdim=False):
        if dim is None:
            return _C.argmax(_C.reshape(self, (-1,)), 0, False)
        return _C.argmax(self, dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        if dim is None:
            return _C.argmin(_C.reshape(self, (-1,)), 0, False)
        return _C.argmin(self, dim, keepdim)

    def var(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
        c = float(correction if correction is not None else (1 if unbiased else 0))
        return _C.var(self, _dims(dim), c, keepdim)

    def std(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
        c = float(correction if correction is not None else (1 if unbiased else 0))
        return _C.std(self, _dims(dim), c, keepdim)

    def norm(self, p=2, dim=None, keepdim=False):
        p = 2.0 if p == "fro" else float(p)
        return _C.norm(self, p, _dims(dim), keepdim)

    def logsumexp(self, dim, keepdim=False):
        return _C.logsumexp(self, _dims(dim), keepdim)

    def any(self, dim=None, keepdim=False):
        return _C.any(self, _dims(dim), keepdim)

    def all(self, dim=None, keepdim=False):
        return _C.all(self, _dims(dim), keepdim)

    def cumsum(self, dim):
        return _C.cumsum(self, dim)

    def softmax(self, dim):
        return _C.softmax(self, dim)

    def log_softmax(self, dim):
        return _C.log_softmax(self, dim)

    # ------------------------------------------------------------ views and shapes
    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (D.dtype, str)):
            raise _C.UnsupportedError("view(dtype) is not supported; use to(dtype)")
        return _C.view(self, _shape_args(shape))

    def view_as(self, other):
        return _C.view(self, other.shape)

    def reshape(self, *shape):
        return _C.reshape(self, _shape_args(shape))

    def reshape_as(self, other):
        return _C.reshape(self, other.shape)

    def expand(self, *sizes):
        return _C.expand(self, _shape_args(sizes))

    def expand_as(self, other):
        return _C.expand(self, other.shape)

    def permute(self, *dims):
        return _C.permute(self, _shape_args(dims))

    def transpose(self, dim0, dim1):
        return _C.transpose(self, dim0, dim1)

    def t(self):
        return self if self.ndim < 2 else _C.transpose(self, 0, 1)

    def narrow(self, dim, start, length):
        return _C.narrow(self, dim, start, length)

    def select(self, dim, index):
        return _C.select(self, dim, index)

    def squeeze(self, dim=None):
        return _C.squeeze_all(self) if dim is None else _C.squeeze(self, dim)

    def unsqueeze(self, dim):
        return _C.unsqueeze(self, dim)

    def flatten(self, start_dim=0, end_dim=-1):
        return _C.flatten(self, start_dim, end_dim)

    def split(self, split_size, dim=0):
        if isinstance(split_size, int):
            return tuple(_C.split(self, split_size, dim))
        return tuple(_C.split_sizes(self, tuple(split_size), dim))

    def chunk(self, chunks, dim=0):
        return tuple(_C.chunk(self, chunks, dim))

    def unbind(self, dim=0):
        return tuple(_C.select(self, dim, i) for i in range(self.shape[dim]))

    def flip(self, *dims):
        return _C.flip(self, _shape_args(dims))

    def repeat(self, *sizes):
        return _C.repeat(self, _shape_args(sizes))

    def tril(self, diagonal=0):
        return _C.tril(self, diagonal)

    def triu(self, diagonal=0):
        return _C.triu(self, diagonal)

    def gather(self, dim, index):
        return _C.gather(self, dim, index)

    def scatter_add(self, dim, index, src):
        return _C.scatter_add(self, dim, index, src)

    def index_select(self, dim, index):
        return _C.index_select(self, dim, index)

    def index_add(self, dim, index, source, alpha=1):
        return _C.index_add(self, dim, index, source, float(alpha))


def _unary_method(name, cname=None):
    fn = getattr(_C, cname or name)

    def method(self):
        return fn(self)
    method.__name__ = name
    method.__doc__ = "torch.Tensor.%s (oj_%s)" % (name, cname or name)
    return method


for _n in ("neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "square", "sign", "reciprocal",
           "sin", "cos", "relu", "sigmoid", "tanh", "logical_not", "isnan", "isfinite"):
    setattr(Tensor, _n, _unary_method(_n))
Tensor.negative = _unary_method("negative", "neg")
Tensor.isfinite = _unary_method("isfinite")
for _n in ("exp", "log", "sqrt", "relu", "sigmoid", "tanh", "neg", "abs", "square", "sin", "cos",
           "rsqrt", "reciprocal", "log1p", "sign"):
    # in place: out-of-place then copy_ (not recorded: refused on tensors that require grad)
    def _make(fn_name):
        def method(self):
            if self.engine.grad_enabled and self.requires_grad:
                raise _C.StateError("%s_: in place on a tensor that requires grad is not "
                                    "recorded by autograd; use the out-of-place form" % fn_name)
            return _C.copy_(self, getattr(_C, fn_name)(self))
        method.__name__ = fn_name + "_"
        return method
    setattr(Tensor, _n + "_", _make(_n))

_C._set_tensor_class(Tensor)
_C._set_dtypes(D.BY_CODE)
