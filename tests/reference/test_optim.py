"""Optimizers vs torch.optim (PyTorch 1.13): SGD (momentum, dampening,
nesterov, weight decay), Adam (with L2 weight decay) and AdamW, 100 steps on
the same gradients, including a learning rate changed every step (as a
schedule does), in f32 (1e-6 relative) and f64 (1e-12 relative).

ojas is driven through the oj_optim API of include/ojas/optim.h: the
prototypes are declared here by hand (their struct arguments are beyond the
generic `eng.call`)."""

import ctypes as C

import numpy as np
import pytest
import torch

import ojas_ctypes

ALGO = {"sgd": 0, "adam": 1, "adamw": 2, "muon": 3}
STEPS = 100
RTOL = {"f32": 1e-6, "f64": 1e-12}


class Hparams(C.Structure):
    _fields_ = [("algo", C.c_int), ("lr", C.c_double), ("weight_decay", C.c_double),
                ("momentum", C.c_double), ("dampening", C.c_double), ("nesterov", C.c_bool),
                ("beta1", C.c_double), ("beta2", C.c_double), ("eps", C.c_double),
                ("ns_steps", C.c_int)]


class Named(C.Structure):
    _fields_ = [("n", C.c_int64), ("names", C.POINTER(C.c_char_p)),
                ("tensors", C.POINTER(C.c_void_p))]


class StepInfo(C.Structure):
    _fields_ = [("skipped", C.c_bool), ("grad_norm", C.c_double), ("params_updated", C.c_int64)]


def _lib():
    L = ojas_ctypes.lib()
    if getattr(L, "_optim_declared", False):
        return L
    vp = C.c_void_p
    decl = {
        "oj_optim_create": (vp, [vp]),
        "oj_optim_free": (None, [vp]),
        "oj_optim_add_group": (C.c_int, [vp, C.POINTER(Hparams), C.POINTER(Named)]),
        "oj_optim_group_hparams": (C.POINTER(Hparams), [vp, C.c_int]),
        "oj_optim_step": (C.c_int, [vp, C.POINTER(StepInfo)]),
        "oj_optim_zero_grad": (None, [vp]),
        "oj_optim_message": (C.c_char_p, [vp]),
        "oj_sgd_hparams": (Hparams, [C.c_double]),
        "oj_adam_hparams": (Hparams, [C.c_double]),
        "oj_adamw_hparams": (Hparams, [C.c_double, C.c_double]),
    }
    for name, (res, args) in decl.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    L._optim_declared = True
    return L


class Optim:
    """One oj_optim with a single group over `params` (name -> Tensor)."""

    def __init__(self, eng, hp, params):
        L = _lib()
        self.L, self.eng = L, eng
        self.h = L.oj_optim_create(eng.handle)
        assert self.h
        names = list(params)
        self._names = (C.c_char_p * len(names))(*[n.encode() for n in names])
        self._ts = (C.c_void_p * len(names))(*[params[n].handle for n in names])
        nt = Named(len(names), C.cast(self._names, C.POINTER(C.c_char_p)),
                   C.cast(self._ts, C.POINTER(C.c_void_p)))
        g = L.oj_optim_add_group(self.h, C.byref(hp), C.byref(nt))
        eng.check()
        assert g == 0

    def set_lr(self, lr):
        self.L.oj_optim_group_hparams(self.h, 0).contents.lr = lr

    def step(self):
        info = StepInfo()
        st = self.L.oj_optim_step(self.h, C.byref(info))
        if st != 0:
            raise AssertionError("oj_optim_step: %s (%s; %s)" % (
                ojas_ctypes.status_name(st), self.L.oj_optim_message(self.h).decode(),
                self.eng.last_error()))
        return info

    def close(self):
        if self.h:
            self.L.oj_optim_free(self.h)
            self.h = None


def _set_grad(eng, p, g):
    """p.grad = g exactly: backward of sum(p * g)."""
    p.zero_grad()
    with eng.scope():
        gt = eng.tensor(g)
        eng.call("sum_all", eng.call("mul", p, gt)).backward()


SHAPES = [(7, 13), (33,), (4, 4, 3)]


def _run(eng, dtype, rng, make_ojas, make_torch, lr0, schedule=False):
    npdt = {"f32": np.float32, "f64": np.float64}[dtype]
    init = [rng.standard_normal(s).astype(npdt) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * (1 + k % 5)).astype(npdt) for s in SHAPES]
             for k in range(STEPS)]
    lrs = [lr0 * (0.5 + 0.5 * np.cos(np.pi * k / STEPS)) if schedule else lr0
           for k in range(STEPS)]

    ps = {"p%d" % i: eng.tensor(a, requires_grad=True) for i, a in enumerate(init)}
    opt = Optim(eng, make_ojas(), ps)
    tps = [torch.tensor(a, requires_grad=True) for a in init]
    topt = make_torch(tps)
    try:
        for k in range(STEPS):
            if schedule:
                opt.set_lr(lrs[k])
                for grp in topt.param_groups:
                    grp["lr"] = lrs[k]
            for (name, p), g, tp in zip(ps.items(), grads[k], tps):
                _set_grad(eng, p, g)
                tp.grad = torch.tensor(g)
            info = opt.step()
            assert not info.skipped
            topt.step()
        # (On this project's machines the results are bitwise equal: ATen's
        # AVX2 kernels fuse the same operations cpu_optim.c fuses.)
        for (name, p), tp in zip(ps.items(), tps):
            np.testing.assert_allclose(p.to_numpy(), tp.detach().numpy(), rtol=RTOL[dtype],
                                       atol=RTOL[dtype] * 1e-3,
                                       err_msg="%s after %d steps" % (name, STEPS))
    finally:
        opt.close()


SGD_CASES = {
    "plain": dict(),
    "momentum": dict(momentum=0.9),
    "dampening_wd": dict(momentum=0.9, dampening=0.1, weight_decay=0.01),
    "nesterov": dict(momentum=0.8, nesterov=True, weight_decay=1e-3),
}


@pytest.mark.parametrize("case", list(SGD_CASES))
@pytest.mark.parametrize("schedule", [False, True], ids=["const_lr", "sched_lr"])
def test_sgd_matches_torch(eng, dtype, rng, case, schedule):
    kw = SGD_CASES[case]
    lr = 0.01

    def mk():
        hp = _lib().oj_sgd_hparams(lr)
        for k, v in kw.items():
            setattr(hp, k, v)
        return hp

    _run(eng, dtype, rng, mk, lambda ps: torch.optim.SGD(ps, lr=lr, foreach=False, **kw), lr,
         schedule)


ADAM_CASES = {
    "adam_default": ("adam", dict()),
    "adam_l2": ("adam", dict(weight_decay=0.05)),
    "adam_betas_eps": ("adam", dict(betas=(0.8, 0.95), eps=1e-6)),
    "adamw_default": ("adamw", dict()),
    "adamw_wd": ("adamw", dict(weight_decay=0.1, betas=(0.9, 0.95), eps=1e-6)),
}


@pytest.mark.parametrize("case", list(ADAM_CASES))
@pytest.mark.parametrize("schedule", [False, True], ids=["const_lr", "sched_lr"])
def test_adam_matches_torch(eng, dtype, rng, case, schedule):
    algo, kw = ADAM_CASES[case]
    lr = 3e-3

    def mk():
        L = _lib()
        hp = L.oj_adam_hparams(lr) if algo == "adam" else L.oj_adamw_hparams(lr, 0.01)
        if "weight_decay" in kw:
            hp.weight_decay = kw["weight_decay"]
        if "betas" in kw:
            hp.beta1, hp.beta2 = kw["betas"]
        if "eps" in kw:
            hp.eps = kw["eps"]
        return hp

    cls = torch.optim.Adam if algo == "adam" else torch.optim.AdamW
    _run(eng, dtype, rng, mk, lambda ps: cls(ps, lr=lr, foreach=False, **kw), lr, schedule)


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
def test_muon_matches_reference(eng, dtype, rng, shape):
    npdt = {"f32": np.float32, "f64": np.float64}[dtype]
    lr, mu, wd = 0.02, 0.95, 0.01
    init = rng.standard_normal(shape).astype(npdt)
    p = eng.tensor(init, requires_grad=True)
    hp = Hparams(algo=ALGO["muon"], lr=lr, weight_decay=wd, momentum=mu, nesterov=True,
                 ns_steps=5)
    opt = Optim(eng, hp, {"w": p})
    tp = torch.tensor(init)
    buf = torch.zeros_like(tp)
    try:
        for k in range(20):
            g = (rng.standard_normal(shape) * (1 + k % 3)).astype(npdt)
            _set_grad(eng, p, g)
            opt.step()
            _torch_muon_step(tp, torch.tensor(g), buf, lr, mu, wd)
        # f32 matmuls sum in another order than torch's: relative 1e-5 after 20 steps
        tol = {"f32": 1e-5, "f64": 1e-12}[dtype]
        np.testing.assert_allclose(p.to_numpy(), tp.numpy(), rtol=tol, atol=tol)
    finally:
        opt.close()
