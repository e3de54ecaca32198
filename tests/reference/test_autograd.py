"""Autograd vs PyTorch: fan-out, accumulation across backward calls,
retain_grad, retain_graph, in-place modification of saved tensors, grad mode,
detach, leaves, deep chains, scopes and leaks."""

import gc

import numpy as np
import pytest
import torch

import ojas_ctypes
from ojas_ctypes import OjasError
from refcheck import assert_close, rand


def _t(eng, x, grad=True):
    return eng.tensor(x, requires_grad=grad)


def test_fan_out_sums(eng, dtype, rng):
    # x feeds four consumers (one of them twice); its gradient is the sum.
    x = rand(rng, (3, 4), dtype)
    t = _t(eng, x)
    c = eng.call
    y = c("add", c("add", c("mul", t, t), c("exp", t)), c("sin", c("sum", t, [1], True)))
    loss = c("sum_all", c("mul", y, c("tanh", t)))
    loss.backward()
    tt = torch.tensor(x, requires_grad=True)
    ty = tt * tt + tt.exp() + tt.sum(1, keepdim=True).sin()
    (ty * tt.tanh()).sum().backward()
    assert_close(loss.to_numpy(), (ty * tt.tanh()).sum().detach().numpy(), dtype, "loss")
    assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, "x grad")


def test_unused_branch(eng, dtype, rng):
    x = rand(rng, (5,), dtype)
    t = _t(eng, x)
    unused = eng.call("cos", t)  # noqa: F841 (recorded, never reached)
    eng.call("sum_all", eng.call("exp", t)).backward()
    assert_close(t.grad.to_numpy(), np.exp(x), dtype, "grad")


def test_grads_accumulate_and_zero_grad(eng, dtype, rng):
    x = rand(rng, (4,), dtype)
    t = _t(eng, x)
    for _ in range(3):
        eng.call("sum_all", eng.call("square", t)).backward()
    assert_close(t.grad.to_numpy(), 3 * 2 * x, dtype, "accumulated grad")
    t.zero_grad()
    assert t.grad is None
    eng.call("sum_all", t).backward()
    assert_close(t.grad.to_numpy(), np.ones_like(x), dtype, "grad after zero_grad")


def test_broadcast_grads_reduce_to_input_shape(eng, dtype, rng):
    a, b = rand(rng, (3, 1), dtype), rand(rng, (1, 4), dtype)
    ta, tb = _t(eng, a), _t(eng, b)
    eng.call("sum_all", eng.call("mul", eng.call("add", ta, tb), tb)).backward()
    A, B = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((A + B) * B).sum().backward()
    assert ta.grad.shape == (3, 1) and tb.grad.shape == (1, 4)
    assert_close(ta.grad.to_numpy(), A.grad.numpy(), dtype, "a grad")
    assert_close(tb.grad.to_numpy(), B.grad.numpy(), dtype, "b grad")


def test_retain_grad(eng, dtype, rng):
    x = rand(rng, (3, 4), dtype)
    t = _t(eng, x)
    h = eng.call("mul_scalar", t, 3.0).retain_grad()
    k = eng.call("exp", t)  # non-leaf without retain_grad
    eng.call("sum_all", eng.call("mul", eng.call("mul", h, h), k)).backward()
    tt = torch.tensor(x, requires_grad=True)
    th = tt * 3.0
    th.retain_grad()
    (th * th * tt.exp()).sum().backward()
    assert not h.is_leaf() and h.grad_fn_name() is not None
    assert_close(h.grad.to_numpy(), th.grad.numpy(), dtype, "retained grad")
    assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, "leaf grad")
    assert k.grad is None


def test_second_backward_needs_retain_graph(eng, dtype, rng):
    x = rand(rng, (3,), dtype)
    t = _t(eng, x)
    loss = eng.call("sum_all", eng.call("mul", eng.call("exp", t), t))
    loss.backward(retain_graph=True)
    loss.backward()
    g1 = np.exp(x) * (x + 1)
    assert_close(t.grad.to_numpy(), 2 * g1, dtype, "two backwards")
    with pytest.raises(OjasError) as e:
        loss.backward()
    assert e.value.status == "OJ_ERR_STATE"


def test_inplace_after_save_is_error(eng, dtype, rng):
    x, w = rand(rng, (3, 4), dtype), rand(rng, (3, 4), dtype)
    t, tw = _t(eng, x), _t(eng, w, grad=False)
    y = eng.call("mul", t, tw)  # saves w
    eng.call("add_", tw, eng.tensor(rand(rng, (3, 4), dtype)))
    with pytest.raises(OjasError) as e:
        eng.call("sum_all", y).backward()
    assert e.value.status == "OJ_ERR_STATE"
    assert "mul" in e.value.message and "in place" in e.value.message


def test_inplace_on_saved_nonleaf_is_error(eng, dtype, rng):
    # sin's backward reads its input h: writing h (recorded, grad mode on)
    # or exp's output y (which exp's backward reads) refuses the backward,
    # as torch does
    for grad_mode in (True, False):
        t = _t(eng, rand(rng, (4,), dtype))
        h = eng.call("mul_scalar", t, 2.0)
        y = eng.call("sin", h)  # saves h
        if grad_mode:
            eng.call("mul_scalar_", h, 0.5)
        else:
            with eng.no_grad():
                eng.call("mul_scalar_", h, 0.5)
        with pytest.raises(OjasError) as e:
            eng.call("sum_all", y).backward()
        assert e.value.status == "OJ_ERR_STATE" and "sin" in e.value.message
    y = eng.call("exp", eng.call("mul_scalar", _t(eng, rand(rng, (4,), dtype)), 2.0))
    eng.call("add_", y, eng.tensor(np.ones(4, rand(rng, (1,), dtype).dtype)))
    with pytest.raises(OjasError) as e:
        eng.call("sum_all", y).backward()
    assert e.value.status == "OJ_ERR_STATE" and "exp" in e.value.message


def _np_dt(dtype):
    return np.float32 if dtype == "f32" else np.float64


def test_inplace_after_scalar_mul_matches_torch(eng, dtype, rng):
    # y = 2x; y += c; y *= 3; loss = sum(y * y): mul_scalar saves nothing,
    # so the writes (recorded by autograd) are legal, as in torch; and the
    # same writes under no-grad (unrecorded: the gradient of y's old history)
    x, c = rand(rng, (3, 4), dtype), rand(rng, (4,), dtype)
    for grad_mode in (True, False):
        t = _t(eng, x)
        y = eng.call("mul_scalar", t, 2.0)
        tt = torch.tensor(x, requires_grad=True)
        ty = tt * 2.0
        if grad_mode:
            eng.call("add_", y, eng.tensor(c))
            eng.call("mul_scalar_", y, 3.0)
            ty.add_(torch.tensor(c))
            ty.mul_(3.0)
        else:
            with eng.no_grad():
                eng.call("add_", y, eng.tensor(c))
                eng.call("mul_scalar_", y, 3.0)
            with torch.no_grad():
                ty.add_(torch.tensor(c))
                ty.mul_(3.0)
        assert y.version() > 0
        loss = eng.call("sum_all", eng.call("mul", y, y))
        loss.backward()
        (ty * ty).sum().backward()
        assert_close(y.to_numpy(), ty.detach().numpy(), dtype, "y")
        assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, "x grad (grad mode %s)" % grad_mode)


@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh", "sqrt", "reciprocal", "neg", "affine"])
def test_inplace_on_input_of_output_saving_op_matches_torch(eng, dtype, rng, op):
    # these backwards read only their output (or nothing): writing their
    # input afterwards invalidates nothing (they used to save it anyway)
    x = rand(rng, (5,), dtype, positive=True, low=0.5)
    t = _t(eng, x)
    h = eng.call("mul_scalar", t, 2.0)
    args = (1.5, -0.25) if op == "affine" else ()
    y = eng.call(op, h, *args)
    eng.call("mul_scalar_", h, 0.5)
    eng.call("sum_all", y).backward()
    tt = torch.tensor(x, requires_grad=True)
    th = tt * 2.0
    ref = {"exp": torch.exp, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "sqrt": torch.sqrt,
           "reciprocal": torch.reciprocal, "neg": torch.neg,
           "affine": lambda v: v * 1.5 - 0.25}[op]
    ty = ref(th)
    th.mul_(0.5)
    ty.sum().backward()
    assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, op + " grad")


@pytest.mark.parametrize("op", ["sin", "abs", "square", "log", "silu", "gelu"])
def test_inplace_on_output_of_input_saving_op_matches_torch(eng, dtype, rng, op):
    # these backwards read only their input: writing their output is legal
    x = rand(rng, (5,), dtype, positive=True, low=0.5)
    t = _t(eng, x)
    y = eng.call(op, eng.call("mul_scalar", t, 2.0))
    eng.call("mul_scalar_", y, 3.0)
    eng.call("sum_all", eng.call("mul", y, y)).backward()
    tt = torch.tensor(x, requires_grad=True)
    ref = {"sin": torch.sin, "abs": torch.abs, "square": torch.square, "log": torch.log,
           "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[op]
    ty = ref(tt * 2.0)
    ty.mul_(3.0)
    (ty * ty).sum().backward()
    assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, op + " grad")


def test_inplace_binary_saves_what_it_reads(eng, dtype, rng):
    # h * w with w constant saves w only (d/dh reads w): writing h is
    # legal; h / w the same; writing w is still refused
    x, w = rand(rng, (4,), dtype), rand(rng, (4,), dtype, positive=True, low=0.5)
    for op, tref in (("mul", torch.mul), ("div", torch.div)):
        t, tw = _t(eng, x), _t(eng, w, grad=False)
        h = eng.call("mul_scalar", t, 2.0)
        y = eng.call(op, h, tw)
        eng.call("mul_scalar_", h, 3.0)
        eng.call("sum_all", eng.call("mul", y, y)).backward()
        tt = torch.tensor(x, requires_grad=True)
        th = tt * 2.0
        ty = tref(th, torch.tensor(w))
        th.mul_(3.0)
        (ty * ty).sum().backward()
        assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, op + " grad")
        y = eng.call(op, eng.call("mul_scalar", t, 2.0), tw)
        eng.call("mul_scalar_", tw, 2.0)
        with pytest.raises(OjasError) as e:
            eng.call("sum_all", y).backward()
        assert e.value.status == "OJ_ERR_STATE" and op in e.value.message


@pytest.mark.parametrize("op", ["matmul", "linear"])
def test_inplace_matmul_linear_save_what_they_read(eng, dtype, rng, op):
    # h @ W (or linear(h, W)) with W constant saves W only: writing h
    # afterwards is legal (torch: the same); writing W is refused
    x, w = rand(rng, (3, 4), dtype), rand(rng, (4, 4), dtype)
    t, tw = _t(eng, x), _t(eng, w, grad=False)
    h = eng.call("mul_scalar", t, 2.0)
    y = eng.call(op, h, tw) if op == "matmul" else eng.call(op, h, tw, None)
    eng.call("mul_scalar_", h, 3.0)
    eng.call("sum_all", eng.call("mul", y, y)).backward()
    tt = torch.tensor(x, requires_grad=True)
    th = tt * 2.0
    ty = th @ torch.tensor(w) if op == "matmul" else torch.nn.functional.linear(th, torch.tensor(w))
    th.mul_(3.0)
    (ty * ty).sum().backward()
    assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, op + " grad")
    h = eng.call("mul_scalar", t, 2.0)
    y = eng.call(op, h, tw) if op == "matmul" else eng.call(op, h, tw, None)
    eng.call("mul_scalar_", tw, 2.0)
    with pytest.raises(OjasError) as e:
        eng.call("sum_all", y).backward()
    assert e.value.status == "OJ_ERR_STATE" and op in e.value.message


def test_inplace_add_of_grad_tensor_is_recorded(eng, dtype, rng):
    # a += t with a constant and t requiring grad: a takes t's history
    x = rand(rng, (3,), dtype)
    t = _t(eng, x)
    a = eng.tensor(np.ones(3, _np_dt(dtype)))
    eng.call("add_", a, eng.call("mul_scalar", t, 2.0))
    eng.call("sum_all", eng.call("mul", a, a)).backward()
    tt = torch.tensor(x, requires_grad=True)
    ta = torch.ones(3, dtype=tt.dtype)
    ta.add_(tt * 2.0)
    (ta * ta).sum().backward()
    assert_close(t.grad.to_numpy(), tt.grad.numpy(), dtype, "grad through add_")


def test_inplace_refusals(eng, dtype, rng):
    # a leaf that requires grad; a tensor another live handle views
    t = _t(eng, rand(rng, (4,), dtype))
    with pytest.raises(OjasError) as e:
        eng.call("mul_scalar_", t, 2.0)
    assert e.value.status == "OJ_ERR_STATE" and "leaf" in e.value.message
    h = eng.call("mul_scalar", t, 2.0)
    v = eng.call("reshape", h, [2, 2])
    with pytest.raises(OjasError) as e:
        eng.call("mul_scalar_", h, 2.0)
    assert e.value.status == "OJ_ERR_STATE" and "shares" in e.value.message
    del v


def test_inplace_on_unsaved_input_is_fine(eng, dtype, rng):
    x = rand(rng, (4,), dtype)
    t, u = _t(eng, x), _t(eng, rand(rng, (4,), dtype), grad=False)
    y = eng.call("add", t, u)  # add saves nothing
    eng.call("mul_scalar_", u, 3.0)
    eng.call("sum_all", y).backward()
    assert_close(t.grad.to_numpy(), np.ones_like(x), dtype, "grad")


def test_backward_errors(eng, dtype, rng):
    t = _t(eng, rand(rng, (2, 3), dtype))
    with pytest.raises(OjasError) as e:
        eng.call("exp", t).backward()  # not one element, no seed
    assert e.value.status == "OJ_ERR_SHAPE"
    with pytest.raises(OjasError) as e:
        eng.call("sum_all", _t(eng, rand(rng, (3,), dtype), grad=False)).backward()
    assert e.value.status == "OJ_ERR_STATE"
    with pytest.raises(OjasError):
        _t(eng, np.array([1, 2], np.int64))  # requires_grad on an integer tensor


def test_seeded_backward(eng, dtype, rng):
    x, g = rand(rng, (2, 3), dtype), rand(rng, (2, 3), dtype)
    t = _t(eng, x)
    eng.call("sigmoid", t).backward(g)
    s = 1 / (1 + np.exp(-x))
    assert_close(t.grad.to_numpy(), g * s * (1 - s), dtype, "seeded grad")


def test_no_grad_and_detach(eng, dtype, rng):
    x = rand(rng, (3,), dtype)
    t = _t(eng, x)
    with eng.no_grad():
        y = eng.call("exp", t)
    assert not y.requires_grad and y.is_leaf()
    d = eng.call("detach", t)
    assert not d.requires_grad and d.shares_storage(t)
    z = eng.call("mul", eng.call("exp", t), eng.call("exp", d))  # d is a constant
    eng.call("sum_all", z).backward()
    assert_close(t.grad.to_numpy(), np.exp(2 * x), dtype, "grad through detach")
    assert d.grad is None


def test_leaf_and_grad_fn(eng, rng):
    t = _t(eng, rand(rng, (2,), "f64"))
    assert t.is_leaf() and t.grad_fn_name() is None
    y = eng.call("tanh", t)
    assert not y.is_leaf() and y.grad_fn_name() == "tanh"
    assert y.requires_grad


def test_deep_chain(eng, rng):
    # 3000 ops: backward and graph freeing must not recurse per node.
    x = rand(rng, (4,), "f64", low=0.5, high=1.0)
    t = _t(eng, x)
    y = t
    for _ in range(3000):
        y = eng.call("mul_scalar", eng.call("add_scalar", y, 0.001), 0.9995)
    eng.call("sum_all", y).backward()
    assert_close(t.grad.to_numpy(), np.full(4, 0.9995 ** 3000), "f64", "deep chain grad")


def test_dtype_crossing_grad(eng, rng):
    x = rand(rng, (3, 2), "f32")
    t = _t(eng, x)
    y = eng.call("cast", t, "f64")
    loss = eng.call("sum_all", eng.call("mul", y, eng.tensor(rand(rng, (3, 2), "f64"))))
    loss.backward()
    assert t.grad.dtype == "f32"


def test_graph_freed_with_its_tensors(rng):
    # Dropping every Python handle of a step frees its graph: no live handles.
    with ojas_ctypes.Engine() as e:
        t = e.tensor(rand(rng, (8, 8), "f32"), requires_grad=True)
        base = e.live_tensors()
        for _ in range(3):
            y = e.call("sum_all", e.call("mul", e.call("gelu", t), e.call("exp", t)))
            y.backward()
            del y
        gc.collect()
        assert e.live_tensors() == base + 1  # t's grad
        t.zero_grad()
        assert e.live_tensors() == base


def test_scope_releases_op_outputs_without_grad(rng):
    with ojas_ctypes.Engine() as e:
        t = e.tensor(rand(rng, (4,), "f32"))
        base = e.live_tensors()
        with e.scope():
            a = e.call("exp", t)
            b = e.call("add", a, t).keep()
            assert e.live_tensors() == base + 2
        assert e.live_tensors() == base + 1
        with pytest.raises(OjasError):
            a.to_numpy()  # its scope ended
        np.testing.assert_allclose(b.to_numpy(), np.exp(t.to_numpy()) + t.to_numpy(), rtol=1e-6)


def test_scope_with_grad_graph(rng):
    # A training step: graph built and backpropagated inside a scope.
    with ojas_ctypes.Engine() as e:
        t = e.tensor(rand(rng, (4,), "f32"), requires_grad=True)
        base = e.live_tensors()
        with e.scope():
            y = e.call("sum_all", e.call("exp", t))
            y.backward()
        g = t.grad
        np.testing.assert_allclose(g.to_numpy(), np.exp(t.to_numpy()), rtol=1e-6)
        del g
        t.zero_grad()
        assert e.live_tensors() == base


@pytest.mark.parametrize("op", ["neg", "exp", "mul", "sum_all"])
def test_scope_end_with_graph_not_backpropagated(rng, op):
    # e.g. an evaluation step run with grad mode on. (Regression: the view a
    # unary node saved used to be freed by the scope before the node.)
    with ojas_ctypes.Engine() as e:
        t = e.tensor(rand(rng, (4,), "f32"), requires_grad=True)
        base = e.live_tensors()
        with e.scope():
            y = e.call(op, t) if op != "mul" else e.call(op, t, t)
            y = e.call("reshape", y, [-1])
        assert e.live_tensors() == base
        del y
