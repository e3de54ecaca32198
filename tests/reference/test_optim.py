"""Optimizers vs torch.optim (PyTorch 1.13): SGD (momentum, dampening,
nesterov, weight decay), Adam (with L2 weight decay) and AdamW, 100 steps on
the same gradients, including a learning rate changed every step (as a
schedule does), in f32 (1e-6 relative) and f64 (1e-12 relative).

ojas is driven through the Python package (ojas.optim over the C
optimizer of include/ojas/optim.h)."""

import numpy as np
import pytest
import torch

from ojpkg import ojas

STEPS = 100
RTOL = {"f32": 1e-6, "f64": 1e-12}
NP = {"f32": np.float32, "f64": np.float64}


def _set_grad(p, g):
    """p.grad = g exactly: backward of sum(p * g)."""
    p.grad = None
    (p * ojas.tensor(g, engine=p.engine)).sum().backward()


SHAPES = [(7, 13), (33,), (4, 4, 3)]


def _run(engine, dtype, rng, make_ojas, make_torch, lr0, schedule=False):
    npdt = NP[dtype]
    init = [rng.standard_normal(s).astype(npdt) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * (1 + k % 5)).astype(npdt) for s in SHAPES]
             for k in range(STEPS)]
    lrs = [lr0 * (0.5 + 0.5 * np.cos(np.pi * k / STEPS)) if schedule else lr0
           for k in range(STEPS)]

    ps = [ojas.tensor(a, engine=engine, requires_grad=True) for a in init]
    opt = make_ojas(ps)
    tps = [torch.tensor(a, requires_grad=True) for a in init]
    topt = make_torch(tps)
    for k in range(STEPS):
        if schedule:
            for grp in opt.param_groups + topt.param_groups:
                grp["lr"] = lrs[k]
        for p, g, tp in zip(ps, grads[k], tps):
            _set_grad(p, g)
            tp.grad = torch.tensor(g)
        opt.step()
        assert opt.last_step[0], opt.last_step
        topt.step()
    # (On this project's machines the results are bitwise equal: ATen's
    # AVX2 kernels fuse the same operations cpu_optim.c fuses.)
    for i, (p, tp) in enumerate(zip(ps, tps)):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=RTOL[dtype],
                                   atol=RTOL[dtype] * 1e-3,
                                   err_msg="p%d after %d steps" % (i, STEPS))


SGD_CASES = {
    "plain": dict(),
    "momentum": dict(momentum=0.9),
    "dampening_wd": dict(momentum=0.9, dampening=0.1, weight_decay=0.01),
    "nesterov": dict(momentum=0.8, nesterov=True, weight_decay=1e-3),
}


@pytest.mark.parametrize("case", list(SGD_CASES))
@pytest.mark.parametrize("schedule", [False, True], ids=["const_lr", "sched_lr"])
def test_sgd_matches_torch(engine, dtype, rng, case, schedule):
    kw = SGD_CASES[case]
    lr = 0.01
    _run(engine, dtype, rng, lambda ps: ojas.optim.SGD(ps, lr=lr, **kw),
         lambda ps: torch.optim.SGD(ps, lr=lr, foreach=False, **kw), lr, schedule)


ADAM_CASES = {
    "adam_default": ("adam", dict()),
    "adam_l2": ("adam", dict(weight_decay=0.05)),
    "adam_betas_eps": ("adam", dict(betas=(0.8, 0.95), eps=1e-6)),
    "adamw_default": ("adamw", dict()),
    "adamw_wd": ("adamw", dict(weight_decay=0.1, betas=(0.9, 0.95), eps=1e-6)),
}


@pytest.mark.parametrize("case", list(ADAM_CASES))
@pytest.mark.parametrize("schedule", [False, True], ids=["const_lr", "sched_lr"])
def test_adam_matches_torch(engine, dtype, rng, case, schedule):
    algo, kw = ADAM_CASES[case]
    lr = 3e-3
    mine = ojas.optim.Adam if algo == "adam" else ojas.optim.AdamW
    cls = torch.optim.Adam if algo == "adam" else torch.optim.AdamW
    _run(engine, dtype, rng, lambda ps: mine(ps, lr=lr, **kw),
         lambda ps: cls(ps, lr=lr, foreach=False, **kw), lr, schedule)


# ---------------------------------------------------------------- Muon

def _torch_muon_step(p, g, buf, lr, momentum, wd, steps=5):
    """Keller Jordan's Muon step (github.com/KellerJordan/Muon, 2024), the
    form with buf = mu buf + g and Nesterov g + mu buf, in p's dtype instead
    of bf16."""
    buf.mul_(momentum).add_(g)
    u = g.add(buf, alpha=momentum)
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = u / (u.norm() + 1e-7)
    if u.size(0) > u.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if u.size(0) > u.size(1):
        X = X.T
    X = X * max(1, u.size(0) / u.size(1)) ** 0.5
    p.mul_(1 - lr * wd)
    p.add_(X, alpha=-lr)


@pytest.mark.parametrize("shape", [(16, 24), (40, 12)], ids=["wide", "tall"])
def test_muon_matches_reference(engine, dtype, rng, shape):
    npdt = NP[dtype]
    lr, mu, wd = 0.02, 0.95, 0.01
    init = rng.standard_normal(shape).astype(npdt)
    p = ojas.tensor(init, engine=engine, requires_grad=True)
    opt = ojas.optim.Muon([p], lr=lr, momentum=mu, nesterov=True, ns_steps=5, weight_decay=wd)
    tp = torch.tensor(init)
    buf = torch.zeros_like(tp)
    for k in range(20):
        g = (rng.standard_normal(shape) * (1 + k % 3)).astype(npdt)
        _set_grad(p, g)
        opt.step()
        _torch_muon_step(tp, torch.tensor(g), buf, lr, mu, wd)
    # f32 matmuls sum in another order than torch's: relative 1e-5 after 20 steps
    tol = {"f32": 1e-5, "f64": 1e-12}[dtype]
    np.testing.assert_allclose(p.detach().numpy(), tp.numpy(), rtol=tol, atol=tol)
