"""Grad-mode and anomaly-mode context managers over the default engine."""
import functools

from ojas import _C


class _mode:
    attr = None
    value = None

    def __enter__(self):
        self._engine = _C.default_engine()
        self._prev = getattr(self._engine, self.attr)
        setattr(self._engine, self.attr, self.value)
        return self

    def __exit__(self, *exc):
        if not self._engine.closed:
            setattr(self._engine, self.attr, self._prev)
        return False

    def __call__(self, fn):
        attr, value = self.attr, self.value

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            eng = _C.default_engine()
            prev = getattr(eng, attr)
            setattr(eng, attr, value)
            try:
                return fn(*args, **kwargs)
            finally:
                if not eng.closed:
                    setattr(eng, attr, prev)
        return wrapper


class no_grad(_mode):
    """Context manager (and decorator): ops of the default engine record no
    autograd graph inside the block (torch.no_grad)."""
    attr, value = "grad_enabled", False


class enable_grad(_mode):
    """Grad mode on inside the block (torch.enable_grad)."""
    attr, value = "grad_enabled", True


class set_grad_enabled(_mode):
    """set_grad_enabled(mode): as a call sets grad mode at once; as a context
    manager restores the previous mode at the end (torch.set_grad_enabled)."""
    attr = "grad_enabled"

    def __init__(self, mode):
        self.value = bool(mode)
        self._engine = _C.default_engine()
        self._prev = self._engine.grad_enabled
        self._engine.grad_enabled = self.value

    def __enter__(self):
        return self


class detect_anomaly(_mode):
    """Detect-anomaly mode inside the block: the first NaN/inf produced by a
    recorded op or a backward raises ojas.NumericError naming the op
    (torch.autograd.detect_anomaly)."""
    attr, value = "detect_anomaly", True


def is_grad_enabled():
    return _C.default_engine().grad_enabled
