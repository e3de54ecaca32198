"""ojas.optim.lr_scheduler: the learning-rate schedules of `ojas train`
(oj_lr_schedule in include/ojas/optim.h), used as torch's schedulers are:
call scheduler.step() after optimizer.step(). Each sets every group's lr to
its initial lr times the schedule's factor at the step count (0-based: the
step about to be taken), starting with a linear warmup (s + 1) / warmup_steps
when warmup_steps > 0 (nanoGPT's form)."""
from ojas import _C

_CONSTANT, _COSINE, _WSD, _STEP = 0, 1, 2, 3


class Schedule:
    """Base: factor(step) from the C schedule; step(); get_last_lr()."""

    def __init__(self, optimizer, kind, warmup_steps=0, total_steps=0, decay_steps=0,
                 step_size=0, gamma=1.0, min_ratio=0.0):
        self.optimizer = optimizer
        self._args = (kind, int(warmup_steps), int(total_steps), int(decay_steps),
                      int(step_size), float(gamma), float(min_ratio))
        self.factor(0)  # checks the schedule (InvalidArgumentError naming the field)
        self.base_lrs = [g.setdefault("initial_lr", g["lr"]) for g in optimizer.param_groups]
        self.last_epoch = 0
        self._apply()

    def factor(self, step):
        """The factor at step (0-based)."""
        return _C.lr_factor(*self._args, int(step))

    def _apply(self):
        f = self.factor(self.last_epoch)
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = base * f

    def step(self):
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]


class ConstantLR(Schedule):
    """1 after the warmup."""

    def __init__(self, optimizer, warmup_steps=0):
        super().__init__(optimizer, _CONSTANT, warmup_steps)


class CosineLR(Schedule):
    """Cosine from 1 at warmup_steps to min_ratio at total_steps, then
    min_ratio."""

    def __init__(self, optimizer, total_steps, warmup_steps=0, min_ratio=0.0):
        super().__init__(optimizer, _COSINE, warmup_steps, total_steps, min_ratio=min_ratio)


class WSDLR(Schedule):
    """Warmup-stable-decay (Hu et al., MiniCPM, 2024): 1 until
    total_steps - decay_steps, then linear to min_ratio at total_steps."""

    def __init__(self, optimizer, total_steps, decay_steps, warmup_steps=0, min_ratio=0.0):
        super().__init__(optimizer, _WSD, warmup_steps, total_steps, decay_steps,
                         min_ratio=min_ratio)


class StepLR(Schedule):
    """gamma ^ floor((s - warmup_steps) / step_size), as torch's StepLR."""

    def __init__(self, optimizer, step_size, gamma=0.1, warmup_steps=0):
        super().__init__(optimizer, _STEP, warmup_steps, step_size=step_size, gamma=gamma)
