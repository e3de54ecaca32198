"""ojas.optim's Muon against Keller Jordan's reference step in torch, and
the LR schedules of ojas.optim.lr_scheduler against their formulas."""
import math

import numpy as np
import pytest
import torch

import ojas
from ojas.optim import lr_scheduler as S


def torch_muon_step(p, g, buf, lr, momentum, wd, steps=5):
    """github.com/KellerJordan/Muon (2024): buf = mu buf + g, Nesterov
    g + mu buf, 5 Newton-Schulz steps, scaled by sqrt(max(1, rows/cols))."""
    buf.mul_(momentum).add_(g)
    u = g.add(buf, alpha=momentum)
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = u / (u.norm() + 1e-7)
    if u.size(0) > u.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if u.size(0) > u.size(1):
        X = X.T
    p.mul_(1 - lr * wd)
    p.add_(X * max(1, u.size(0) / u.size(1)) ** 0.5, alpha=-lr)


@pytest.mark.parametrize("shape", [(16, 24), (40, 12)], ids=["wide", "tall"])
def test_muon_matches_reference(rng, shape):
    init = rng.standard_normal(shape)
    p = ojas.tensor(init, requires_grad=True)  # float64
    opt = ojas.optim.Muon([p], lr=0.02, weight_decay=0.01)
    tp, buf = torch.tensor(init), torch.zeros(shape, dtype=torch.float64)
    for k in range(10):
        g = rng.standard_normal(shape) * (1 + k % 3)
        (p * ojas.tensor(g)).sum().backward()
        opt.step()
        opt.zero_grad()
        torch_muon_step(tp, torch.tensor(g), buf, 0.02, 0.95, 0.01)
    np.testing.assert_allclose(p.detach().numpy(), tp.numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(ojas.Error, match="rank|2-D|matri"):
        ojas.optim.Muon([ojas.zeros(3, requires_grad=True)])


def test_schedules():
    p = ojas.zeros(2, 2, requires_grad=True)
    opt = ojas.optim.SGD([p], lr=0.5)
    sch = S.CosineLR(opt, total_steps=10, warmup_steps=2, min_ratio=0.1)
    lrs = []
    for _ in range(12):
        lrs.append(sch.get_last_lr()[0])
        sch.step()
    want = [0.5 * (s + 1) / 2 if s < 2 else
            0.5 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s - 2, 8) / 8)))
            for s in range(12)]
    assert lrs == pytest.approx(want, rel=1e-12)
    wsd = S.WSDLR(ojas.optim.SGD([p], lr=1.0), total_steps=10, decay_steps=4)
    assert [wsd.factor(s) for s in (0, 6, 8, 10)] == pytest.approx([1, 1, 0.5, 0])
    st = S.StepLR(ojas.optim.SGD([p], lr=1.0), step_size=3, gamma=0.5)
    assert [st.factor(s) for s in (0, 2, 3, 7)] == pytest.approx([1, 1, 0.5, 0.25])
    assert S.ConstantLR(ojas.optim.SGD([p], lr=1.0), warmup_steps=4).factor(1) == 0.5
    with pytest.raises(ojas.InvalidArgumentError, match="total_steps"):
        S.CosineLR(opt, total_steps=1, warmup_steps=2)
