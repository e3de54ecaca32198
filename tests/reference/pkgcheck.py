"""Compare an op of the Python package's raw bindings (ojas._C.<name>, the C
name and argument order of include/ojas/ops.h) with its PyTorch reference,
forward and gradients: refcheck.check for the files that use the package.

    check(engine, "matmul", [a, b], ref=torch.matmul)

dtypes are named as in refcheck ("f32", "f64", ...); a reduction may be
named ("mean", "sum", "none") as the C enum's members (oj_reduction).
`fncheck` is fncheck.fncheck for a callable over package tensors."""

import numpy as np
import torch

from ojpkg import ojas
from refcheck import OJ_OF_TORCH, assert_close, rand

DT_NAME = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "float16": "f16",
           "int64": "i64", "int32": "i32", "uint8": "u8", "bool": "bool"}


def dt(t):
    """refcheck's name of an ojas tensor's dtype."""
    return DT_NAME[t.dtype.name]


REDUCTION = {"mean": 0, "sum": 1, "none": 2}  # oj_reduction


def _scalar(a):
    return REDUCTION[a] if isinstance(a, str) and a in REDUCTION else a


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
    out = getattr(ojas._C, name)(*xs, *[_scalar(a) for a in scalars])
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


def fncheck(engine, oj_fn, inputs, ref, grad=True, noncontig=False, grad_inputs=None, rtol=None,
            grad_rtol=None, seed=1234):
    """oj_fn(*ojas inputs) and ref(*torch inputs) (each a tensor or a list
    of tensors): dtypes, shapes, values, then the gradients of every float
    input for random upstream gradients (several outputs: one loss, the sum
    of sum(out_k * g_k)). Returns the ojas output."""
    need = [grad and (grad_inputs is None or i in grad_inputs) for i in range(len(inputs))]
    pairs = [_as_oj(engine, a, g, noncontig) for a, g in zip(inputs, need)]
    leaves, xs = [p[0] for p in pairs], [p[1] for p in pairs]
    out = oj_fn(*xs)
    tin = [torch.tensor(np.asarray(a), requires_grad=g and np.asarray(a).dtype.kind == "f")
           for a, g in zip(inputs, need)]
    tout = ref(*tin)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    touts = list(tout) if isinstance(tout, (list, tuple)) else [tout]
    assert len(outs) == len(touts), "%d outputs, torch %d" % (len(outs), len(touts))
    for k, (o, t) in enumerate(zip(outs, touts)):
        assert dt(o) == OJ_OF_TORCH[t.dtype], "output %d dtype %s, torch %s" % (
            k, dt(o), OJ_OF_TORCH[t.dtype])
        assert tuple(o.shape) == tuple(t.shape), "output %d shape %s, torch %s" % (
            k, tuple(o.shape), tuple(t.shape))
        assert_close(o.detach().numpy(), t.detach().numpy(), dt(o), "output %d" % k, rtol)
    live = [(o, t) for o, t in zip(outs, touts) if t.requires_grad]
    if not grad or not live:
        return out
    rng = np.random.default_rng(seed)
    gs = [rand(rng, t.shape, dt(o)) for o, t in live]
    loss = None
    for (o, _), g in zip(live, gs):
        s = ojas._C.sum_all(ojas._C.mul(o, ojas.tensor(g, engine=engine)))
        loss = s if loss is None else ojas._C.add(loss, s)
    loss.backward()
    torch.autograd.backward([t for _, t in live], [torch.tensor(g) for g in gs])
    for i, (leaf, t) in enumerate(zip(leaves, tin)):
        if not t.requires_grad:
            continue
        tg = (t.grad.numpy() if t.grad is not None
              else np.zeros(tuple(t.shape), t.detach().numpy().dtype))
        og = leaf.grad
        assert og is not None, "no gradient for input %d" % i
        og = og.numpy()
        if noncontig and og.ndim >= 2:
            og = np.swapaxes(og, -1, -2)
        assert_close(og, tg, dt(leaf), "grad of input %d" % i, grad_rtol or rtol)
    return out


__all__ = ["check", "fncheck", "dt", "rand", "assert_close"]
