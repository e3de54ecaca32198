"""Module-level ops under torch's names (ojas.exp(x), ojas.cat(...), ...).
Most forward to the Tensor method of the same name."""
from ojas import _C
from ojas._tensor import Tensor, _as_tensor_like

_METHOD_FUNCTIONS = (
    "neg", "negative", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "square", "sign",
    "reciprocal", "sin", "cos", "relu", "sigmoid", "tanh", "logical_not", "isnan", "isfinite",
    "add", "sub", "mul", "div", "true_divide", "pow", "maximum", "minimum", "clamp", "clip",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
    "matmul", "mm", "bmm", "masked_fill",
    "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "norm",
    "logsumexp", "any", "all", "cumsum", "softmax", "log_softmax",
    "reshape", "permute", "transpose", "t", "narrow", "select", "squeeze", "unsqueeze", "flatten",
    "split", "chunk", "unbind", "flip", "tril", "triu", "gather", "scatter_add", "index_select",
    "index_add", "detach", "clone", "numel",
)


def _forward(name):
    method = getattr(Tensor, name)

    def fn(input, *args, **kwargs):
        if not isinstance(input, _C.TensorBase):
            raise TypeError("%s: input must be an ojas.Tensor, not %s"
                            % (name, type(input).__name__))
        return method(input, *args, **kwargs)
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = "torch.%s: see Tensor.%s." % (name, name)
    return fn


for _n in _METHOD_FUNCTIONS:
    globals()[_n] = _forward(_n)


def where(condition, input, other):
    """condition ? input : other, broadcast; input/other may be numbers."""
    like = input if isinstance(input, _C.TensorBase) else other
    if not isinstance(like, _C.TensorBase):
        raise TypeError("where: input or other must be a tensor")
    return _C.where(condition, _as_tensor_like(input, like), _as_tensor_like(other, like))


def cat(tensors, dim=0):
    return _C.cat(list(tensors), dim)


concat = cat


def stack(tensors, dim=0):
    return _C.stack(list(tensors), dim)


def addmm(input, mat1, mat2, beta=1, alpha=1):
    return _C.addmm(input, mat1, mat2, float(beta), float(alpha))


def broadcast_to(input, shape):
    return _C.expand(input, tuple(shape))


def is_tensor(obj):
    return isinstance(obj, _C.TensorBase)
