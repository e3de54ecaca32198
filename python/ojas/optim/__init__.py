"""ojas.optim: torch.optim's SGD, Adam and AdamW over the C optimizer
(include/ojas/optim.h), which follows torch 1.13's single-tensor update op
by op. One difference: a step whose gradients or results are not finite
changes nothing and is reported in `last_step` (torch would write NaN)."""
from ojas import _C

_SGD, _ADAM, _ADAMW = 0, 1, 2


class Optimizer:
    """Base of the ojas optimizers: `param_groups` (dicts with "params" and
    the hyperparameters, as torch's; changing a group's "lr" takes effect at
    the next step), step(), zero_grad()."""

    _algo = None

    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise _C.InvalidArgumentError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = dict(defaults)
        self.param_groups = []
        self._c = None
        self.last_step = None
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group):
        g = dict(self.defaults)
        g.update(group)
        ps = list(g["params"])
        named = [p if isinstance(p, tuple) else (None, p) for p in ps]
        if self._c is None:
            self._c = _C.Optimizer(named[0][1].engine)
        base = sum(len(x["params"]) for x in self.param_groups)
        names = [n if n is not None else "param%d" % (base + i) for i, (n, _) in enumerate(named)]
        tensors = [p for _, p in named]
        h = self._hparams(g)
        self._c.add_group(self._algo, names, tensors, float(g["lr"]), float(h[0]), float(h[1]),
                          float(h[2]), bool(h[3]), float(h[4]), float(h[5]), float(h[6]), 5)
        g["params"] = tensors
        g["_lr"] = g["lr"]
        self.param_groups.append(g)

    def step(self, closure=None):
        """One update of every parameter with a grad. Returns closure()'s
        value when given (computed first, with grad mode on, as torch)."""
        loss = closure() if closure is not None else None
        for i, g in enumerate(self.param_groups):
            if g["lr"] != g["_lr"]:
                self._c.set_lr(i, float(g["lr"]))
                g["_lr"] = g["lr"]
        self.last_step = self._c.step()
        return loss

    def zero_grad(self, set_to_none=True):
        self._c.zero_grad()

    def state_counts(self):
        """(steps applied, steps skipped)."""
        return self._c.counts()

    def save(self, path):
        """The optimizer state (moments, step counts) as a safetensors file."""
        self._c.save(path)


class SGD(Optimizer):
    _algo = _SGD

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    @staticmethod
    def _hparams(g):
        return (g["weight_decay"], g["momentum"], g["dampening"], g["nesterov"], 0.9, 0.999, 1e-8)


class Adam(Optimizer):
    _algo = _ADAM

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    @staticmethod
    def _hparams(g):
        return (g["weight_decay"], 0.0, 0.0, False, g["betas"][0], g["betas"][1], g["eps"])


class AdamW(Adam):
    _algo = _ADAMW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        Optimizer.__init__(self, params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                              weight_decay=weight_decay))
