"""Compare an op of the Python package's raw bindings (ojas._C.<name>, the C
name and argument order of include/ojas/ops.h) with its PyTorch reference,
forward and gradients: refcheck.check for the files that use the package.

    check(engine, "matmul", [a, b], ref=torch.matmul)

dtypes are named as in refcheck ("f32", "f64", ...)."""

import numpy as np
import torch

from ojpkg import ojas
from refcheck import OJ_OF_TORCH, assert_close, rand

DT_NAME = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "float16": "f16",
           "int64": "i64", "int32": "i32", "uint8": "u8", "bool": "bool"}


def dt(t):
    """refcheck's name of an ojas tensor's dtype."""
    return DT_NAME[t.dtype.name]


def _as_oj(engine, a, grad, noncontig):
    """(leaf Tensor, Tensor used as op input). noncontig: the leaf holds
    the transposed data and the input is its transpose(-1, -2) view."""
    a = np.asarray(a)
    rg = grad and a.dtype.kind == "f"
    if noncontig and a.ndim >= 2:
        leaf = ojas.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), engine=engine,
                           requires_grad=rg)
        x = ojas._C.transpose(leaf, -1, -2)
        assert not x.is_contiguous() or min(a.shape[-2:]) <= 1
        return leaf, x
    leaf = ojas.tensor(a, engine=engine, requires_grad=rg)
    return leaf, leaf


def check(engine, name, inputs, *scalars, ref, grad=True, noncontig=False, rtol=None,
          grad_rtol=None, out_dtype=None, grad_inputs=None, seed=1234):
    """ojas._C.<name>(*inputs, *scalars) against ref(*torch_inputs,
    *scalars): output dtype, shape and values; then, if grad, both seeded
    with the same random upstream gradient, every float input's gradient.
    inputs are numpy arrays (None passes through as an absent tensor);
    grad_inputs (indices) limits which float inputs require grad. Returns
    the ojas output."""
    need = [grad and (grad_inputs is None or i in grad_inputs) for i in range(len(inputs))]
    pairs = [_as_oj(engine, a, g, noncontig) for a, g in zip(inputs, need)]
    leaves, xs = [p[0] for p in pairs], [p[1] for p in pairs]
    out = getattr(ojas._C, name)(*xs, *scalars)
    tin = [torch.tensor(np.asarray(a), requires_grad=g and np.asarray(a).dtype.kind == "f")
           for a, g in zip(inputs, need)]
    tout = ref(*tin, *scalars)
    want_dt = out_dtype or OJ_OF_TORCH[tout.dtype]
    assert dt(out) == want_dt, "%s: output dtype %s, torch %s" % (name, dt(out), want_dt)
    assert tuple(out.shape) == tuple(tout.shape), "%s: output shape %s, torch %s" % (
        name, tuple(out.shape), tuple(tout.shape))
    assert_close(out.detach().numpy(), tout.detach().numpy(), dt(out), name + " forward", rtol)
    if not grad or not tout.requires_grad:
        return out
    rng = np.random.default_rng(seed)
    g = rand(rng, tout.shape, dt(out))
    out.backward(ojas.tensor(g, engine=engine))
    tout.backward(torch.tensor(g))
    for i, (leaf, t) in enumerate(zip(leaves, tin)):
        if not t.requires_grad:
            continue
        tg = (t.grad.numpy() if t.grad is not None
              else np.zeros(tuple(t.shape), t.detach().numpy().dtype))
        og = leaf.grad
        assert og is not None, "%s: no gradient for input %d" % (name, i)
        og = og.numpy()
        if noncontig and og.ndim >= 2:
            og = np.swapaxes(og, -1, -2)
        assert_close(og, tg, dt(leaf), "%s grad of input %d" % (name, i), grad_rtol or rtol)
    return out


__all__ = ["check", "dt", "rand", "assert_close"]
