"""Compare an ojas op with its PyTorch reference: forward and gradients.
See the docstring of ojas_ctypes.py for how tests use `check` and `rand`."""

import numpy as np
import torch

from ojas_ctypes import DTYPES, NP_OF, Tensor

# Relative tolerance per dtype (the issue's ~1e-5 f32, ~1e-12 f64); the
# absolute floor is the same fraction of the reference's largest magnitude
# (at least 1), so results that cancel to near zero are judged on the scale
# of the computation, not relative to a tiny number.
RTOL = {"f32": 1e-5, "f64": 1e-12, "bf16": 1e-2, "f16": 1e-3}

TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
            "f16": torch.float16, "i64": torch.int64, "i32": torch.int32,
            "u8": torch.uint8, "bool": torch.bool}
OJ_OF_TORCH = {v: k for k, v in TORCH_DT.items()}


def rand(rng, shape, dtype="f32", low=0.1, high=2.0, positive=False):
    """Random non-zero array: |x| in [low, high), random sign unless
    positive. Integer dtypes get non-zero integers in [-9, 9]."""
    shape = tuple(shape)
    if dtype in ("i64", "i32", "u8"):
        v = rng.integers(1, 10, size=shape)
        if not positive and dtype != "u8":
            v = v * rng.choice([-1, 1], size=shape)
        return v.astype(NP_OF[dtype])
    if dtype == "bool":
        return rng.random(shape) < 0.5
    v = rng.uniform(low, high, size=shape)
    if not positive:
        v = v * rng.choice([-1.0, 1.0], size=shape)
    return v.astype(NP_OF[dtype])


def assert_close(got, ref, dtype, what="", rtol=None):
    """got/ref numpy arrays; float dtypes within RTOL, others exact."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, "%s: shape %s, torch %s" % (what, got.shape, ref.shape)
    if dtype not in RTOL:
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    rt = RTOL[dtype] if rtol is None else rtol
    g64, r64 = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r64)
    assert np.array_equal(np.isnan(g64), np.isnan(r64)), "%s: NaN positions differ" % what
    assert np.array_equal(g64[~finite & ~np.isnan(r64)], r64[~finite & ~np.isnan(r64)]), \
        "%s: infinities differ" % what
    scale = max(1.0, float(np.max(np.abs(r64[finite]))) if finite.any() else 1.0)
    np.testing.assert_allclose(g64[finite], r64[finite], rtol=rt, atol=rt * scale * 1e-1,
                               err_msg="%s (dtype %s, rtol %g)" % (what, dtype, rt))


def _as_oj(eng, a, grad, noncontig):
    """(leaf Tensor, Tensor used as op input). noncontig: the leaf holds
    the transposed data and the input is oj_transpose(leaf, -1, -2)."""
    a = np.asarray(a)
    is_float = a.dtype.kind == "f"
    if noncontig and a.ndim >= 2:
        leaf = eng.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)),
                          requires_grad=grad and is_float)
        x = eng.call("transpose", leaf, -1, -2)
        assert not x.is_contiguous() or min(a.shape[-2:]) <= 1
        return leaf, x
    leaf = eng.tensor(a, requires_grad=grad and is_float)
    return leaf, leaf


def check(eng, name, inputs, *scalars, ref, grad=True, noncontig=False, rtol=None,
          grad_rtol=None, out_dtype=None, grad_inputs=None, seed=1234):
    """Run oj_<name>(*inputs, *scalars) and ref(*torch_inputs, *scalars);
    compare output dtype, shape and values; then, if grad, seed both with
    the same random upstream gradient and compare every float input's
    gradient. inputs are numpy arrays; grad_inputs (indices) limits which
    float inputs require grad (default all). Returns the ojas output Tensor."""
    need = [grad and (grad_inputs is None or i in grad_inputs) for i in range(len(inputs))]
    leaves, xs = zip(*[_as_oj(eng, a, g, noncontig) for a, g in zip(inputs, need)]) \
        if inputs else ((), ())
    out = eng.call(name, *xs, *scalars)
    tin = [torch.tensor(np.asarray(a), requires_grad=g and np.asarray(a).dtype.kind == "f")
           for a, g in zip(inputs, need)]
    tout = ref(*tin, *scalars)
    want_dt = out_dtype or OJ_OF_TORCH[tout.dtype]
    assert out.dtype == want_dt, "%s: output dtype %s, torch %s" % (name, out.dtype, want_dt)
    assert out.shape == tuple(tout.shape), "%s: output shape %s, torch %s" % (
        name, out.shape, tuple(tout.shape))
    assert_close(out.to_numpy(), tout.detach().numpy(), out.dtype, name + " forward", rtol)
    if not grad or not tout.requires_grad:
        return out
    rng = np.random.default_rng(seed)
    g = rand(rng, tout.shape, out.dtype)
    out.backward(g)
    tout.backward(torch.tensor(g))
    for i, (leaf, t) in enumerate(zip(leaves, tin)):
        if not t.requires_grad:
            continue
        tg = (t.grad.numpy() if t.grad is not None
              else np.zeros(tuple(t.shape), NP_OF[OJ_OF_TORCH[t.dtype]]))
        og = leaf.grad
        assert og is not None, "%s: no gradient for input %d" % (name, i)
        og = og.to_numpy()
        if noncontig and og.ndim >= 2:
            og = np.swapaxes(og, -1, -2)
        assert_close(og, tg, leaf.dtype, "%s grad of input %d" % (name, i), grad_rtol or rtol)
    return out


__all__ = ["check", "rand", "assert_close", "RTOL", "TORCH_DT", "OJ_OF_TORCH", "Tensor",
           "DTYPES"]
