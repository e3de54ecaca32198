"""ojas.nn modules: Module (parameters, state_dict, train/eval), Linear,
Embedding, LayerNorm, RMSNorm, Dropout, activations, MLP and Sequential,
initialised as torch.nn initialises them (values drawn from the engine's
Philox RNG, so not torch's numbers)."""
import collections
import math

import ojas
from ojas import _C
from ojas._tensor import Tensor
from ojas.nn import functional as F


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter (requires_grad on)."""

    __slots__ = ()

    def __new__(cls, data, requires_grad=True):
        t = data.detach() if data.requires_grad or not data.is_leaf else data
        t.__class__ = cls
        if requires_grad:
            t.requires_grad = True
        return t

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base of the modules (torch.nn.Module): attributes that are Parameters
    or Modules are registered, in assignment order."""

    def __init__(self):
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call Module.__init__() before assigning attributes")
        for d in (self._parameters, self._modules, self._buffers):
            d.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for k in ("_parameters", "_modules", "_buffers"):
            if k in d and name in d[k]:
                return d[k][name]
        raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

    def register_buffer(self, name, tensor):
        self._buffers[name] = tensor

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_modules(self, prefix=""):
        yield prefix, self
        for n, m in self._modules.items():
            yield from m.named_modules(prefix + n if not prefix else prefix + "." + n)

    def modules(self):
        return (m for _, m in self.named_modules())

    def children(self):
        return iter(self._modules.values())

    def named_parameters(self, prefix=""):
        for mp, m in self.named_modules(prefix):
            for n, p in m._parameters.items():
                yield (mp + "." + n if mp else n), p

    def parameters(self):
        return (p for _, p in self.named_parameters())

    def named_buffers(self):
        for mp, m in self.named_modules():
            for n, b in m._buffers.items():
                yield (mp + "." + n if mp else n), b

    def state_dict(self):
        """Parameters and buffers by dotted name (the tensors themselves, as torch)."""
        d = collections.OrderedDict(self.named_parameters())
        d.update(self.named_buffers())
        return d

    def load_state_dict(self, state_dict, strict=True):
        """Copy values into the parameters and buffers (in place, no grad);
        strict: the names must match exactly (KeyError naming them); shapes
        must match (ShapeError naming the tensor)."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError("load_state_dict: missing %s, unexpected %s" % (missing, unexpected))
        with ojas.no_grad():
            for k, t in own.items():
                if k not in state_dict:
                    continue
                src = ojas.as_tensor(state_dict[k]) if not isinstance(state_dict[k], Tensor) \
                    else state_dict[k]
                if tuple(src.shape) != tuple(t.shape):
                    raise _C.ShapeError("load_state_dict: %s has shape %s, the module's %s"
                                        % (k, tuple(src.shape), tuple(t.shape)))
                _C.copy_(t, src)
        return missing, unexpected

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.grad = None

    def to(self, dtype):
        """Convert the floating parameters and buffers to dtype, in place."""
        with ojas.no_grad():
            for m in self.modules():
                for d in (m._parameters, m._buffers):
                    for k, t in list(d.items()):
                        if t.dtype.is_floating_point:
                            nt = t.detach().to(dtype)
                            d[k] = Parameter(nt, t.requires_grad) if isinstance(t, Parameter) \
                                else nt
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [type(self).__name__ + "(" + self.extra_repr()]
        for n, m in self._modules.items():
            lines.append("  (%s): %s" % (n, repr(m).replace("\n", "\n  ")))
        return lines[0] + (")" if len(lines) == 1 else "\n" + "\n".join(lines[1:]) + "\n)")


def _uniform(shape, bound, dtype):
    return ojas.rand(*shape, dtype=dtype) * (2 * bound) - bound


class Linear(Module):
    """y = x W^T + b, W [out, in] and b [out] ~ U(-1/sqrt(in), 1/sqrt(in)) (torch's init)."""

    def __init__(self, in_features, out_features, bias=True, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features) if in_features else 0
        self.weight = Parameter(_uniform((out_features, in_features), bound, dtype))
        self.bias = Parameter(_uniform((out_features,), bound, dtype)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s" % (self.in_features, self.out_features,
                                                             self.bias is not None)


class Embedding(Module):
    """Rows of weight [num_embeddings, embedding_dim] ~ N(0, 1)."""

    def __init__(self, num_embeddings, embedding_dim, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(ojas.randn(num_embeddings, embedding_dim, dtype=dtype))

    def forward(self, idx):
        return F.embedding(idx, self.weight)

    def extra_repr(self):
        return "%d, %d" % (self.num_embeddings, self.embedding_dim)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 dtype=None):
        super().__init__()
        c = normalized_shape if isinstance(normalized_shape, int) else normalized_shape[-1]
        self.normalized_shape, self.eps = (c,), eps
        self.weight = Parameter(ojas.ones(c, dtype=dtype)) if elementwise_affine else None
        self.bias = Parameter(ojas.zeros(c, dtype=dtype)) if elementwise_affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "%s, eps=%g" % (self.normalized_shape, self.eps)


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, dtype=None):
        super().__init__()
        c = normalized_shape if isinstance(normalized_shape, int) else normalized_shape[-1]
        self.normalized_shape, self.eps = (c,), eps
        self.weight = Parameter(ojas.ones(c, dtype=dtype)) if elementwise_affine else None

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return "p=%g" % self.p


def _activation(name, fn):
    cls = type(name, (Module,), {"forward": lambda self, x: fn(x),
                                 "__doc__": "torch.nn.%s" % name})
    return cls


ReLU = _activation("ReLU", F.relu)
SiLU = _activation("SiLU", F.silu)
Sigmoid = _activation("Sigmoid", F.sigmoid)
Tanh = _activation("Tanh", F.tanh)
Mish = _activation("Mish", F.mish)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class MLP(Module):
    """Linear(in, hidden) -> activation -> Linear(hidden, out) (GPT-style; the
    activation "gelu" uses the tanh form fused into the second linear,
    F.gelu_linear, as oj_nn_mlp does)."""

    def __init__(self, in_features, hidden_features, out_features=None, activation="gelu",
                 bias=True, dtype=None):
        super().__init__()
        self.fc = Linear(in_features, hidden_features, bias, dtype)
        self.proj = Linear(hidden_features, out_features or in_features, bias, dtype)
        self.activation = activation

    def forward(self, x):
        h = self.fc(x)
        if self.activation == "gelu":
            return F.gelu_linear(h, self.proj.weight, self.proj.bias)
        act = {"relu": F.relu, "silu": F.silu, "tanh": F.tanh}[self.activation]
        return self.proj(act(h))
