"""Autograd vs PyTorch: fan-out, accumulation across backward calls,
retain_grad, retain_graph, in-place modification of saved tensors, grad mode,
detach, leaves, deep chains and leaks, through the Python package's raw
bindings (ojas._C). (Scopes, a C API notion the package does not expose, are
tested in tests/unit/test_core_scope.c.)"""

import contextlib
import gc

import numpy as np
import pytest
import torch

from ojpkg import ojas
from pkgcheck import assert_close, dt, rand


@contextlib.contextmanager
def _no_grad(engine):
    """Grad mode off on `engine` inside the block (ojas.no_grad() switches
    the default engine's)."""
    prev = engine.grad_enabled
    engine.grad_enabled = False
    try:
        yield
    finally:
        engine.grad_enabled = prev


def _t(engine, x, grad=True):
    return ojas.tensor(x, engine=engine, requires_grad=grad)


def test_fan_out_sums(engine, dtype, rng):
    # x feeds four consumers (one of them twice); its gradient is the sum.
    x = rand(rng, (3, 4), dtype)
    t = _t(engine, x)
    C = ojas._C
    y = C.add(C.add(C.mul(t, t), C.exp(t)), C.sin(C.sum(t, [1], True)))
    loss = C.sum_all(C.mul(y, C.tanh(t)))
    loss.backward()
    tt = torch.tensor(x, requires_grad=True)
    ty = tt * tt + tt.exp() + tt.sum(1, keepdim=True).sin()
    (ty * tt.tanh()).sum().backward()
    assert_close(loss.numpy(), (ty * tt.tanh()).sum().detach().numpy(), dtype, "loss")
    assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, "x grad")


def test_unused_branch(engine, dtype, rng):
    x = rand(rng, (5,), dtype)
    t = _t(engine, x)
    unused = ojas._C.cos(t)  # noqa: F841 (recorded, never reached)
    ojas._C.sum_all(ojas._C.exp(t)).backward()
    assert_close(t.grad.numpy(), np.exp(x), dtype, "grad")


def test_grads_accumulate_and_zero_grad(engine, dtype, rng):
    x = rand(rng, (4,), dtype)
    t = _t(engine, x)
    for _ in range(3):
        ojas._C.sum_all(ojas._C.square(t)).backward()
    assert_close(t.grad.numpy(), 3 * 2 * x, dtype, "accumulated grad")
    ojas._C.zero_grad(t)
    assert t.grad is None
    ojas._C.sum_all(t).backward()
    assert_close(t.grad.numpy(), np.ones_like(x), dtype, "grad after zero_grad")


def test_broadcast_grads_reduce_to_input_shape(engine, dtype, rng):
    a, b = rand(rng, (3, 1), dtype), rand(rng, (1, 4), dtype)
    ta, tb = _t(engine, a), _t(engine, b)
    ojas._C.sum_all(ojas._C.mul(ojas._C.add(ta, tb), tb)).backward()
    A, B = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((A + B) * B).sum().backward()
    assert ta.grad.shape == (3, 1) and tb.grad.shape == (1, 4)
    assert_close(ta.grad.numpy(), A.grad.numpy(), dtype, "a grad")
    assert_close(tb.grad.numpy(), B.grad.numpy(), dtype, "b grad")


def test_retain_grad(engine, dtype, rng):
    x = rand(rng, (3, 4), dtype)
    t = _t(engine, x)
    h = ojas._C.mul_scalar(t, 3.0)
    h.retain_grad()
    k = ojas._C.exp(t)  # non-leaf without retain_grad
    ojas._C.sum_all(ojas._C.mul(ojas._C.mul(h, h), k)).backward()
    tt = torch.tensor(x, requires_grad=True)
    th = tt * 3.0
    th.retain_grad()
    (th * th * tt.exp()).sum().backward()
    assert not h.is_leaf and h.grad_fn is not None
    assert_close(h.grad.numpy(), th.grad.numpy(), dtype, "retained grad")
    assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, "leaf grad")
    assert k.grad is None


def test_second_backward_needs_retain_graph(engine, dtype, rng):
    x = rand(rng, (3,), dtype)
    t = _t(engine, x)
    loss = ojas._C.sum_all(ojas._C.mul(ojas._C.exp(t), t))
    loss.backward(retain_graph=True)
    loss.backward()
    g1 = np.exp(x) * (x + 1)
    assert_close(t.grad.numpy(), 2 * g1, dtype, "two backwards")
    with pytest.raises(ojas.Error) as e:
        loss.backward()
    assert e.value.status == "OJ_ERR_STATE"


def test_inplace_after_save_is_error(engine, dtype, rng):
    x, w = rand(rng, (3, 4), dtype), rand(rng, (3, 4), dtype)
    t, tw = _t(engine, x), _t(engine, w, grad=False)
    y = ojas._C.mul(t, tw)  # saves w
    ojas._C.add_(tw, ojas.tensor(rand(rng, (3, 4), dtype), engine=engine))
    with pytest.raises(ojas.Error) as e:
        ojas._C.sum_all(y).backward()
    assert e.value.status == "OJ_ERR_STATE"
    assert "mul" in e.value.message and "in place" in e.value.message


def test_inplace_on_saved_nonleaf_is_error(engine, dtype, rng):
    # sin's backward reads its input h: writing h (recorded, grad mode on)
    # or exp's output y (which exp's backward reads) refuses the backward,
    # as torch does
    for grad_mode in (True, False):
        t = _t(engine, rand(rng, (4,), dtype))
        h = ojas._C.mul_scalar(t, 2.0)
        y = ojas._C.sin(h)  # saves h
        if grad_mode:
            ojas._C.mul_scalar_(h, 0.5)
        else:
            with _no_grad(engine):
                ojas._C.mul_scalar_(h, 0.5)
        with pytest.raises(ojas.Error) as e:
            ojas._C.sum_all(y).backward()
        assert e.value.status == "OJ_ERR_STATE" and "sin" in e.value.message
    y = ojas._C.exp(ojas._C.mul_scalar(_t(engine, rand(rng, (4,), dtype)), 2.0))
    ojas._C.add_(y, ojas.tensor(np.ones(4, rand(rng, (1,), dtype).dtype), engine=engine))
    with pytest.raises(ojas.Error) as e:
        ojas._C.sum_all(y).backward()
    assert e.value.status == "OJ_ERR_STATE" and "exp" in e.value.message


def _np_dt(dtype):
    return np.float32 if dtype == "f32" else np.float64


def test_inplace_after_scalar_mul_matches_torch(engine, dtype, rng):
    # y = 2x; y += c; y *= 3; loss = sum(y * y): mul_scalar saves nothing,
    # so the writes (recorded by autograd) are legal, as in torch; and the
    # same writes under no-grad (unrecorded: the gradient of y's old history)
    x, c = rand(rng, (3, 4), dtype), rand(rng, (4,), dtype)
    for grad_mode in (True, False):
        t = _t(engine, x)
        y = ojas._C.mul_scalar(t, 2.0)
        tt = torch.tensor(x, requires_grad=True)
        ty = tt * 2.0
        if grad_mode:
            ojas._C.add_(y, ojas.tensor(c, engine=engine))
            ojas._C.mul_scalar_(y, 3.0)
            ty.add_(torch.tensor(c))
            ty.mul_(3.0)
        else:
            with _no_grad(engine):
                ojas._C.add_(y, ojas.tensor(c, engine=engine))
                ojas._C.mul_scalar_(y, 3.0)
            with torch.no_grad():
                ty.add_(torch.tensor(c))
                ty.mul_(3.0)
        assert y._version > 0
        loss = ojas._C.sum_all(ojas._C.mul(y, y))
        loss.backward()
        (ty * ty).sum().backward()
        assert_close(y.numpy(), ty.detach().numpy(), dtype, "y")
        assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, "x grad (grad mode %s)" % grad_mode)


@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh", "sqrt", "reciprocal", "neg", "affine"])
def test_inplace_on_input_of_output_saving_op_matches_torch(engine, dtype, rng, op):
    # these backwards read only their output (or nothing): writing their
    # input afterwards invalidates nothing (they used to save it anyway)
    x = rand(rng, (5,), dtype, positive=True, low=0.5)
    t = _t(engine, x)
    h = ojas._C.mul_scalar(t, 2.0)
    args = (1.5, -0.25) if op == "affine" else ()
    y = getattr(ojas._C, op)(h, *args)
    ojas._C.mul_scalar_(h, 0.5)
    ojas._C.sum_all(y).backward()
    tt = torch.tensor(x, requires_grad=True)
    th = tt * 2.0
    ref = {"exp": torch.exp, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "sqrt": torch.sqrt,
           "reciprocal": torch.reciprocal, "neg": torch.neg,
           "affine": lambda v: v * 1.5 - 0.25}[op]
    ty = ref(th)
    th.mul_(0.5)
    ty.sum().backward()
    assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, op + " grad")


@pytest.mark.parametrize("op", ["sin", "abs", "square", "log", "silu", "gelu"])
def test_inplace_on_output_of_input_saving_op_matches_torch(engine, dtype, rng, op):
    # these backwards read only their input: writing their output is legal
    x = rand(rng, (5,), dtype, positive=True, low=0.5)
    t = _t(engine, x)
    y = getattr(ojas._C, op)(ojas._C.mul_scalar(t, 2.0))
    ojas._C.mul_scalar_(y, 3.0)
    ojas._C.sum_all(ojas._C.mul(y, y)).backward()
    tt = torch.tensor(x, requires_grad=True)
    ref = {"sin": torch.sin, "abs": torch.abs, "square": torch.square, "log": torch.log,
           "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[op]
    ty = ref(tt * 2.0)
    ty.mul_(3.0)
    (ty * ty).sum().backward()
    assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, op + " grad")


def test_inplace_binary_saves_what_it_reads(engine, dtype, rng):
    # h * w with w constant saves w only (d/dh reads w): writing h is
    # legal; h / w the same; writing w is still refused
    x, w = rand(rng, (4,), dtype), rand(rng, (4,), dtype, positive=True, low=0.5)
    for op, tref in (("mul", torch.mul), ("div", torch.div)):
        t, tw = _t(engine, x), _t(engine, w, grad=False)
        h = ojas._C.mul_scalar(t, 2.0)
        y = getattr(ojas._C, op)(h, tw)
        ojas._C.mul_scalar_(h, 3.0)
        ojas._C.sum_all(ojas._C.mul(y, y)).backward()
        tt = torch.tensor(x, requires_grad=True)
        th = tt * 2.0
        ty = tref(th, torch.tensor(w))
        th.mul_(3.0)
        (ty * ty).sum().backward()
        assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, op + " grad")
        y = getattr(ojas._C, op)(ojas._C.mul_scalar(t, 2.0), tw)
        ojas._C.mul_scalar_(tw, 2.0)
        with pytest.raises(ojas.Error) as e:
            ojas._C.sum_all(y).backward()
        assert e.value.status == "OJ_ERR_STATE" and op in e.value.message


@pytest.mark.parametrize("op", ["matmul", "linear"])
def test_inplace_matmul_linear_save_what_they_read(engine, dtype, rng, op):
    # h @ W (or linear(h, W)) with W constant saves W only: writing h
    # afterwards is legal (torch: the same); writing W is refused
    x, w = rand(rng, (3, 4), dtype), rand(rng, (4, 4), dtype)
    t, tw = _t(engine, x), _t(engine, w, grad=False)
    h = ojas._C.mul_scalar(t, 2.0)
    y = getattr(ojas._C, op)(h, tw) if op == "matmul" else getattr(ojas._C, op)(h, tw, None)
    ojas._C.mul_scalar_(h, 3.0)
    ojas._C.sum_all(ojas._C.mul(y, y)).backward()
    tt = torch.tensor(x, requires_grad=True)
    th = tt * 2.0
    ty = th @ torch.tensor(w) if op == "matmul" else torch.nn.functional.linear(th, torch.tensor(w))
    th.mul_(3.0)
    (ty * ty).sum().backward()
    assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, op + " grad")
    h = ojas._C.mul_scalar(t, 2.0)
    y = getattr(ojas._C, op)(h, tw) if op == "matmul" else getattr(ojas._C, op)(h, tw, None)
    ojas._C.mul_scalar_(tw, 2.0)
    with pytest.raises(ojas.Error) as e:
        ojas._C.sum_all(y).backward()
    assert e.value.status == "OJ_ERR_STATE" and op in e.value.message


def test_inplace_add_of_grad_tensor_is_recorded(engine, dtype, rng):
    # a += t with a constant and t requiring grad: a takes t's history
    x = rand(rng, (3,), dtype)
    t = _t(engine, x)
    a = ojas.tensor(np.ones(3, _np_dt(dtype)), engine=engine)
    ojas._C.add_(a, ojas._C.mul_scalar(t, 2.0))
    ojas._C.sum_all(ojas._C.mul(a, a)).backward()
    tt = torch.tensor(x, requires_grad=True)
    ta = torch.ones(3, dtype=tt.dtype)
    ta.add_(tt * 2.0)
    (ta * ta).sum().backward()
    assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, "grad through add_")


def test_inplace_refusals(engine, dtype, rng):
    # a leaf that requires grad; a tensor another live handle views
    t = _t(engine, rand(rng, (4,), dtype))
    with pytest.raises(ojas.Error) as e:
        ojas._C.mul_scalar_(t, 2.0)
    assert e.value.status == "OJ_ERR_STATE" and "leaf" in e.value.message
    h = ojas._C.mul_scalar(t, 2.0)
    v = ojas._C.reshape(h, [2, 2])
    with pytest.raises(ojas.Error) as e:
        ojas._C.mul_scalar_(h, 2.0)
    assert e.value.status == "OJ_ERR_STATE" and "shares" in e.value.message
    del v


def test_inplace_on_unsaved_input_is_fine(engine, dtype, rng):
    x = rand(rng, (4,), dtype)
    t, u = _t(engine, x), _t(engine, rand(rng, (4,), dtype), grad=False)
    y = ojas._C.add(t, u)  # add saves nothing
    ojas._C.mul_scalar_(u, 3.0)
    ojas._C.sum_all(y).backward()
    assert_close(t.grad.numpy(), np.ones_like(x), dtype, "grad")


def test_backward_errors(engine, dtype, rng):
    t = _t(engine, rand(rng, (2, 3), dtype))
    with pytest.raises(ojas.Error) as e:
        ojas._C.exp(t).backward()  # not one element, no seed
    assert e.value.status == "OJ_ERR_SHAPE"
    with pytest.raises(ojas.Error) as e:
        ojas._C.sum_all(_t(engine, rand(rng, (3,), dtype), grad=False)).backward()
    assert e.value.status == "OJ_ERR_STATE"
    with pytest.raises(ojas.Error):
        _t(engine, np.array([1, 2], np.int64))  # requires_grad on an integer tensor


def test_seeded_backward(engine, dtype, rng):
    x, g = rand(rng, (2, 3), dtype), rand(rng, (2, 3), dtype)
    t = _t(engine, x)
    ojas._C.sigmoid(t).backward(ojas.tensor(g, engine=engine))
    s = 1 / (1 + np.exp(-x))
    assert_close(t.grad.numpy(), g * s * (1 - s), dtype, "seeded grad")


def test_no_grad_and_detach(engine, dtype, rng):
    x = rand(rng, (3,), dtype)
    t = _t(engine, x)
    with _no_grad(engine):
        y = ojas._C.exp(t)
    assert not y.requires_grad and y.is_leaf
    d = ojas._C.detach(t)
    assert not d.requires_grad and d._shares_storage(t)
    z = ojas._C.mul(ojas._C.exp(t), ojas._C.exp(d))  # d is a constant
    ojas._C.sum_all(z).backward()
    assert_close(t.grad.numpy(), np.exp(2 * x), dtype, "grad through detach")
    assert d.grad is None


def test_leaf_and_grad_fn(engine, rng):
    t = _t(engine, rand(rng, (2,), "f64"))
    assert t.is_leaf and t.grad_fn is None
    y = ojas._C.tanh(t)
    assert not y.is_leaf and y.grad_fn == "tanh"
    assert y.requires_grad


def test_deep_chain(engine, rng):
    # 3000 ops: backward and graph freeing must not recurse per node.
    x = rand(rng, (4,), "f64", low=0.5, high=1.0)
    t = _t(engine, x)
    y = t
    for _ in range(3000):
        y = ojas._C.mul_scalar(ojas._C.add_scalar(y, 0.001), 0.9995)
    ojas._C.sum_all(y).backward()
    assert_close(t.grad.numpy(), np.full(4, 0.9995 ** 3000), "f64", "deep chain grad")


def test_dtype_crossing_grad(engine, rng):
    x = rand(rng, (3, 2), "f32")
    t = _t(engine, x)
    y = ojas._C.cast(t, ojas.float64)
    loss = ojas._C.sum_all(ojas._C.mul(y, ojas.tensor(rand(rng, (3, 2), "f64"), engine=engine)))
    loss.backward()
    assert dt(t.grad) == "f32"


def test_graph_freed_with_its_tensors(engine, rng):
    # Dropping every Python handle of a step frees its graph: no live handles.
    t = ojas.tensor(rand(rng, (8, 8), "f32"), engine=engine, requires_grad=True)
    base = engine.live_tensors()
    for _ in range(3):
        y = ojas._C.sum_all(ojas._C.mul(ojas._C.gelu(t), ojas._C.exp(t)))
        y.backward()
        del y
    gc.collect()
    assert engine.live_tensors() == base + 1  # t's grad
    ojas._C.zero_grad(t)
    assert engine.live_tensors() == base
