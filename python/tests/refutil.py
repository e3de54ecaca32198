"""Run an ojas function and its torch counterpart on the same inputs and
compare values and input gradients."""
import numpy as np
import torch

import ojas


def _wrap(inputs, make, grad):
    out = []
    for a in inputs:
        if isinstance(a, np.ndarray):
            rg = grad and a.dtype.kind == "f"
            out.append(make(a, rg))
        else:
            out.append(a)
    return out


def _flat(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def check(ofn, tfn, *inputs, grad=True, rtol=1e-9, atol=1e-12, seed=0):
    """ofn(*ojas inputs) vs tfn(*torch inputs): shape, values and, with grad,
    the gradients of sum(out * r) (r fixed random) for every float input."""
    o_in = _wrap(inputs, lambda a, rg: ojas.tensor(a, requires_grad=rg), grad)
    t_in = _wrap(inputs, lambda a, rg: torch.tensor(a, requires_grad=rg), grad)
    o_outs, t_outs = _flat(ofn(*o_in)), _flat(tfn(*t_in))
    assert len(o_outs) == len(t_outs)
    rng = np.random.default_rng(seed)
    o_loss = t_loss = None
    for o, t in zip(o_outs, t_outs):
        assert tuple(o.shape) == tuple(t.shape), (o.shape, t.shape)
        tv = t.detach().numpy()
        ov = np.asarray(o.tolist(), dtype=tv.dtype).reshape(tv.shape)
        if tv.dtype.kind in "biu":
            np.testing.assert_array_equal(ov, tv)
            continue
        np.testing.assert_allclose(ov, tv, rtol=rtol, atol=atol)
        if grad and t.requires_grad:
            r = rng.standard_normal(tv.shape).astype(tv.dtype)
            ol = (o * ojas.tensor(r)).sum()
            tl = (t * torch.tensor(r)).sum()
            o_loss = ol if o_loss is None else o_loss + ol
            t_loss = tl if t_loss is None else t_loss + tl
    if o_loss is None:
        return
    o_loss.backward()
    t_loss.backward()
    for o, t in zip(o_in, t_in):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            if t.grad is None:
                assert o.grad is None or not np.any(o.grad.numpy())
                continue
            assert o.grad is not None
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=rtol * 10,
                                       atol=max(atol, 1e-10) * 10)
