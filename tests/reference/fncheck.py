"""Compare an ojas computation given as a Python callable with its PyTorch
reference, forward and gradients: for ops whose arguments `check` cannot
pass positionally (tensor lists, dims between tensors, fixed-size int64
arrays) or that return several tensors (split, chunk).

    fncheck(eng, lambda x, i: eng.call("gather", x, 1, i), [x, idx],
            ref=lambda x, i: torch.gather(x, 1, i))

`arrcall` calls an oj_ function whose prototype takes fixed-size arrays
(`const int64_t stride[2]`), which ojas_ctypes.Engine.call does not parse."""

import ctypes as C

import numpy as np
import torch

from ojas_ctypes import Tensor, lib
from refcheck import OJ_OF_TORCH, _as_oj, assert_close, rand


def fncheck(eng, oj_fn, inputs, ref, grad=True, noncontig=False, grad_inputs=None, rtol=None,
            grad_rtol=None, seed=1234):
    """oj_fn(*ojas inputs) and ref(*torch inputs) (each a tensor or a list
    of tensors); compare dtypes, shapes, values, then the gradients of every
    float input for random upstream gradients. Returns the ojas output."""
    need = [grad and (grad_inputs is None or i in grad_inputs) for i in range(len(inputs))]
    pairs = [_as_oj(eng, a, g, noncontig) for a, g in zip(inputs, need)]
    leaves, xs = [p[0] for p in pairs], [p[1] for p in pairs]
    out = oj_fn(*xs)
    tin = [torch.tensor(np.asarray(a), requires_grad=g and np.asarray(a).dtype.kind == "f")
           for a, g in zip(inputs, need)]
    tout = ref(*tin)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    touts = list(tout) if isinstance(tout, (list, tuple)) else [tout]
    assert len(outs) == len(touts), "%d outputs, torch %d" % (len(outs), len(touts))
    for k, (o, t) in enumerate(zip(outs, touts)):
        assert o.dtype == OJ_OF_TORCH[t.dtype], "output %d dtype %s, torch %s" % (
            k, o.dtype, OJ_OF_TORCH[t.dtype])
        assert o.shape == tuple(t.shape), "output %d shape %s, torch %s" % (
            k, o.shape, tuple(t.shape))
        assert_close(o.to_numpy(), t.detach().numpy(), o.dtype, "output %d" % k, rtol)
    live = [(o, t) for o, t in zip(outs, touts) if t.requires_grad]
    if not grad or not live:
        return out
    rng = np.random.default_rng(seed)
    gs = [rand(rng, t.shape, o.dtype) for o, t in live]
    if len(live) == 1:
        live[0][0].backward(gs[0])
    else:  # one scalar: sum_k sum(out_k * g_k)
        loss = None
        for (o, _), g in zip(live, gs):
            s = eng.call("sum_all", eng.call("mul", o, eng.tensor(g, dtype=o.dtype)))
            loss = s if loss is None else eng.call("add", loss, s)
        loss.backward()
    torch.autograd.backward([t for _, t in live], [torch.tensor(g) for g in gs])
    for i, (leaf, t) in enumerate(zip(leaves, tin)):
        if not t.requires_grad:
            continue
        tg = t.grad.numpy() if t.grad is not None else np.zeros(tuple(t.shape), t.numpy().dtype)
        og = leaf.grad
        assert og is not None, "no gradient for input %d" % i
        og = og.to_numpy()
        if noncontig and og.ndim >= 2:
            og = np.swapaxes(og, -1, -2)
        assert_close(og, tg, leaf.dtype, "grad of input %d" % i, grad_rtol or rtol)
    return out


_KINDS = {"t": C.c_void_p, "a": C.POINTER(C.c_int64), "i": C.c_int, "l": C.c_int64,
          "d": C.c_double, "b": C.c_bool}


def arrcall(eng, name, spec, *args):
    """oj_<name>(engine-less args) returning a tensor. spec has one letter
    per argument: t tensor (or None), a int64 array (list or None), i int,
    l int64_t, d double, b bool."""
    assert len(spec) == len(args), "spec %r for %d arguments" % (spec, len(args))
    f = getattr(lib(), "oj_" + name)
    f.restype = C.c_void_p
    f.argtypes = [_KINDS[k] for k in spec]
    cargs, keep, inputs = [], [], []
    for k, a in zip(spec, args):
        if k == "t":
            h = a.handle if isinstance(a, Tensor) else None
            if h:
                inputs.append(h)
            cargs.append(h)
        elif k == "a":
            if a is None:
                cargs.append(None)
            else:
                arr = (C.c_int64 * len(a))(*[int(v) for v in a])
                keep.append(arr)
                cargs.append(C.cast(arr, C.POINTER(C.c_int64)))
        else:
            cargs.append(a)
    r = f(*cargs)
    if r and r in inputs:
        return eng._wrap_borrowed(r)
    return eng._wrap_new(r)


__all__ = ["fncheck", "arrcall"]
