"""ojas.nn modules: Module (parameters, state_dict, train/eval), Linear,
Embedding, LayerNorm, RMSNorm, Dropout, activations, MLP, Sequential,
Conv2d, BatchNorm2d and MultiheadAttention, with torch.nn's argument and
state_dict names, initialised as torch.nn initialises them (values drawn
from the engine's Philox RNG, so not torch's numbers)."""
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
        """Parameters and buffers by dotted name (the tensors themselves, as
        torch), module by module, each module's parameters before its
        buffers (torch's order)."""
        d = collections.OrderedDict()
        for mp, m in self.named_modules():
            for src in (m._parameters, m._buffers):
                for n, t in src.items():
                    if t is not None:
                        d[mp + "." + n if mp else n] = t
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
        c = ((int(normalized_shape),) if isinstance(normalized_shape, int)
             else tuple(int(d) for d in normalized_shape))
        self.normalized_shape, self.eps = c, eps
        self.weight = Parameter(ojas.ones(c, dtype=dtype)) if elementwise_affine else None
        self.bias = Parameter(ojas.zeros(c, dtype=dtype)) if elementwise_affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "%s, eps=%g" % (self.normalized_shape, self.eps)


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, dtype=None):
        super().__init__()
        c = ((int(normalized_shape),) if isinstance(normalized_shape, int)
             else tuple(int(d) for d in normalized_shape))
        self.normalized_shape, self.eps = c, eps
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


def _pair(v, what):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise _C.InvalidArgumentError("%s: expected an int or 2 ints, got %r" % (what, v))
    return v


class Conv2d(Module):
    """2-D convolution (torch.nn.Conv2d): weight [out, in / groups, kh, kw]
    and bias [out] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in /
    groups * kh * kw (torch's kaiming_uniform_(a=sqrt(5)) bound); forward is
    F.conv2d (oj_conv2d). padding: int, pair, "valid", or "same" (stride 1,
    an even total padding dilation * (k - 1) per dim); padding_mode "zeros"
    only."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            raise _C.UnsupportedError("Conv2d: padding_mode %r is not supported (only 'zeros')"
                                      % (padding_mode,))
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise _C.InvalidArgumentError(
                "Conv2d: in_channels %d and out_channels %d must be divisible by groups %d"
                % (in_channels, out_channels, groups))
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(kernel_size, "Conv2d kernel_size")
        self.stride = _pair(stride, "Conv2d stride")
        self.dilation = _pair(dilation, "Conv2d dilation")
        if padding == "valid":
            padding = 0
        elif padding == "same":
            if self.stride != (1, 1):
                raise _C.InvalidArgumentError("Conv2d: padding='same' needs stride 1")
            tot = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            if any(t % 2 for t in tot):
                raise _C.UnsupportedError(
                    "Conv2d: padding='same' with an odd total padding %s is not supported" % tot)
            padding = tuple(t // 2 for t in tot)
        self.padding = _pair(padding, "Conv2d padding")
        fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        bound = 1 / math.sqrt(fan_in) if fan_in else 0
        self.weight = Parameter(_uniform((out_channels, in_channels // groups) + self.kernel_size,
                                         bound, dtype))
        self.bias = Parameter(_uniform((out_channels,), bound, dtype)) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self):
        return "%d, %d, kernel_size=%s, stride=%s, padding=%s" % (
            self.in_channels, self.out_channels, self.kernel_size, self.stride, self.padding)


class BatchNorm2d(Module):
    """Batch normalisation over [N, C, H, W] (torch.nn.BatchNorm2d): weight
    (ones) and bias (zeros) [C] when affine; buffers running_mean (zeros),
    running_var (ones) [C] and num_batches_tracked (int64) when
    track_running_stats. Training normalises with the batch statistics and
    updates the running ones in place (unbiased variance; momentum None: the
    cumulative average 1 / num_batches_tracked); eval uses the running ones
    (the batch's when track_running_stats is False). Forward is
    F.batch_norm (oj_batch_norm). Ioffe & Szegedy, 2015."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(ojas.ones(num_features, dtype=dtype)) if affine else None
        self.bias = Parameter(ojas.zeros(num_features, dtype=dtype)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", ojas.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ojas.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", ojas.tensor(0, dtype=ojas.int64))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def reset_running_stats(self):
        if self.track_running_stats:
            with ojas.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def forward(self, x):
        if x.dim() != 4:
            raise _C.ShapeError("BatchNorm2d: expected 4D input (got %dD input)" % x.dim())
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with ojas.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / self.num_batches_tracked.item()
        use_batch = self.training or not self.track_running_stats
        track = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if track else None,
                            self.running_var if track else None, self.weight, self.bias,
                            use_batch, factor, self.eps)

    def extra_repr(self):
        return "%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s" % (
            self.num_features, self.eps, self.momentum, self.affine, self.track_running_stats)


class MultiheadAttention(Module):
    """Multi-head attention (torch.nn.MultiheadAttention, its argument and
    state_dict names): in_proj_weight [3E, E] (Xavier uniform),
    in_proj_bias [3E] (zeros), out_proj (Linear E -> E, bias zeros).
    forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False) -> (output,
    weights or None); inputs [L, N, E] (batch_first: [N, L, E]) or unbatched
    [L, E]. Masks as torch's: a bool attn_mask ([L, S] or [N * H, L, S])
    or key_padding_mask ([N, S]) is True where attention is NOT allowed; a
    float one is added to the scores. is_causal: query i sees keys j <= i
    (torch 2.x; with L == S the op's own causal path). The attention itself
    is F.scaled_dot_product_attention (oj_scaled_dot_product_attention,
    tiled); need_weights computes the softmax weights too (averaged over
    heads when average_attn_weights), at the cost of the [L, S] scores.
    dropout > 0, bias_k/bias_v, add_zero_attn and kdim/vdim other than
    embed_dim are not supported (UnsupportedError)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, dtype=None):
        super().__init__()
        if num_heads <= 0 or embed_dim % num_heads:
            raise _C.InvalidArgumentError("MultiheadAttention: embed_dim %d must be divisible by "
                                          "num_heads %d" % (embed_dim, num_heads))
        for what, bad in (("dropout > 0", dropout), ("add_bias_kv", add_bias_kv),
                          ("add_zero_attn", add_zero_attn),
                          ("kdim != embed_dim", kdim not in (None, embed_dim)),
                          ("vdim != embed_dim", vdim not in (None, embed_dim))):
            if bad:
                raise _C.UnsupportedError("MultiheadAttention: %s is not supported" % what)
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.head_dim = embed_dim // num_heads
        self.dropout = 0.0
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))
        self.in_proj_weight = Parameter(_uniform((3 * embed_dim, embed_dim), bound, dtype))
        self.in_proj_bias = Parameter(ojas.zeros(3 * embed_dim, dtype=dtype)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias, dtype)
        if bias:
            with ojas.no_grad():
                self.out_proj.bias.zero_()

    def _heads(self, x, n, length):
        # x [N, L, E] -> [N, H, L, D]
        return x.reshape(n, length, self.num_heads, self.head_dim).transpose(1, 2)

    def _mask(self, attn_mask, key_padding_mask, n, length, s, dtype, engine):
        """The op's mask (bool: True = keep, or float: added), broadcastable
        to [N, H, L, S], or None."""
        parts = []
        if attn_mask is not None:
            m = attn_mask
            if m.dim() == 3:
                m = m.reshape(n, self.num_heads, length, s)
            elif m.dim() != 2:
                raise _C.ShapeError("MultiheadAttention: attn_mask must be [L, S] or [N * H, L, S]"
                                    ", got %s" % (tuple(attn_mask.shape),))
            parts.append(m)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (n, s):
                raise _C.ShapeError("MultiheadAttention: key_padding_mask must be [N, S] = %s, "
                                    "got %s" % ((n, s), tuple(key_padding_mask.shape)))
            parts.append(key_padding_mask.reshape(n, 1, 1, s))
        if not parts:
            return None
        if all(p.dtype == ojas.bool for p in parts):
            keep = ~parts[0]
            for p in parts[1:]:
                keep = keep & ~p
            return keep
        out = None
        for p in parts:
            if p.dtype == ojas.bool:
                p = ojas.zeros(tuple(p.shape), dtype=dtype, engine=engine).masked_fill(
                    p, float("-inf"))
            elif p.dtype != dtype:
                p = p.to(dtype)
            out = p if out is None else out + p
        return out

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = query.dim() == 3
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise _C.ShapeError("MultiheadAttention: query, key and value must all be 2-D "
                                "(unbatched) or 3-D")
        if not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        n, length, e = query.shape
        s = key.shape[1]
        if e != self.embed_dim:
            raise _C.ShapeError("MultiheadAttention: query has embed dim %d, the module %d"
                                % (e, self.embed_dim))
        w = self.in_proj_weight.chunk(3, 0)
        b = self.in_proj_bias.chunk(3, 0) if self.in_proj_bias is not None else (None,) * 3
        q = self._heads(F.linear(query, w[0], b[0]), n, length)
        k = self._heads(F.linear(key, w[1], b[1]), n, s)
        v = self._heads(F.linear(value, w[2], b[2]), n, s)
        mask = self._mask(attn_mask, key_padding_mask, n, length, s, q.dtype, q.engine)
        causal = bool(is_causal) and length == s
        if is_causal and length != s:  # top-left aligned, as torch 2.x
            tl = ojas.ones((length, s), dtype=ojas.bool, engine=q.engine).tril()
            mask = tl if mask is None else (
                mask & tl if mask.dtype == ojas.bool else mask.masked_fill(~tl, float("-inf")))
        o = F.scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
        o = self.out_proj(o.transpose(1, 2).reshape(n, length, e))
        if not self.batch_first:
            o = o.transpose(0, 1)
        if not batched:
            o = o.squeeze(1)
        if not need_weights:
            return o, None
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        if causal:
            tl = ojas.ones((length, s), dtype=ojas.bool, engine=q.engine).tril()
            scores = scores.masked_fill(~tl, float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == ojas.bool \
                else scores + mask
        a = scores.softmax(-1)
        if average_attn_weights:
            a = a.mean(1)
        if not batched:
            a = a.squeeze(0)
        return o, a

    def extra_repr(self):
        return "embed_dim=%d, num_heads=%d, batch_first=%s" % (self.embed_dim, self.num_heads,
                                                              self.batch_first)
