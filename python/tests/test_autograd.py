"""Autograd through the package: backward, .grad, requires_grad, no_grad,
retain_grad, errors, detect_anomaly."""
import numpy as np
import pytest
import torch

import ojas


def test_mlp_gradients_match_torch():
    rng = np.random.default_rng(0)
    xs, w1s, w2s = rng.standard_normal((8, 5)), rng.standard_normal((5, 6)), \
        rng.standard_normal((6, 3))
    tgt = rng.integers(0, 3, 8)
    out = {}
    for lib, F in ((ojas, ojas.nn.functional), (torch, torch.nn.functional)):
        x = lib.tensor(xs)
        w1 = lib.tensor(w1s, requires_grad=True)
        w2 = lib.tensor(w2s, requires_grad=True)
        h = (x @ w1).tanh()
        h.retain_grad()
        loss = F.cross_entropy(h @ w2, lib.tensor(tgt)) + (w1 ** 2).sum() * 0.01
        loss.backward()
        out[lib] = [loss.item()] + [g.numpy() for g in (w1.grad, w2.grad, h.grad)]
    for a, b in zip(out[ojas], out[torch]):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_grad_accumulates_and_resets():
    x = ojas.tensor([1.0, 2.0], requires_grad=True)
    assert x.is_leaf and x.grad is None and x.grad_fn is None
    for _ in range(2):
        (x * x).sum().backward()
    assert x.grad.tolist() == [4.0, 8.0]
    x.grad = None
    assert x.grad is None
    y = x * 3
    assert not y.is_leaf and y.grad_fn == "mul" and y.requires_grad
    y.backward(ojas.tensor([1.0, 0.5]))
    assert x.grad.tolist() == [3.0, 1.5]


def test_no_grad_and_detach():
    x = ojas.ones(3, requires_grad=True)
    with ojas.no_grad():
        assert not ojas.is_grad_enabled()
        y = x * 2
        x -= 0.5  # updating a leaf is allowed without grad mode
    assert ojas.is_grad_enabled()
    assert not y.requires_grad
    assert not x.detach().requires_grad and x.detach()._shares_storage(x)

    @ojas.no_grad()
    def f(t):
        return t * 2
    assert not f(x).requires_grad
    with ojas.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad

    @ojas.enable_grad()
    def g(t):
        return t * 2
    with ojas.no_grad():
        assert g(x).requires_grad and not (x * 2).requires_grad


def test_errors_raise_and_leave_no_state():
    x = ojas.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ojas.ShapeError, match="one element"):
        (x * 2).backward()
    with pytest.raises(ojas.StateError):
        ojas.tensor([1.0]).sum().backward()  # no graph
    with pytest.raises(ojas.StateError, match="requires grad"):
        x += 1  # in place on a leaf that requires grad, grad mode on
    with pytest.raises(ojas.StateError):
        x *= 2
    with pytest.raises(ojas.DtypeError):
        ojas.tensor([1, 2]).requires_grad_()
    y = x.exp()
    loss = y.sum()
    loss.backward(retain_graph=True)
    loss.backward()
    with pytest.raises(ojas.StateError):
        loss.backward()  # graph freed
    # the engine carries no error after a raise: the next op works
    assert (x * 1).sum().item() == 3.0


def test_detect_anomaly_raises_numeric_error():
    x = ojas.tensor([-1.0, 1.0], requires_grad=True)
    with ojas.detect_anomaly():
        with pytest.raises(ojas.NumericError, match="log"):
            x.log()
        assert ojas.default_engine().detect_anomaly
    assert not ojas.default_engine().detect_anomaly
    assert np.isnan(x.log().tolist()[0])  # off: NaN flows as in torch
