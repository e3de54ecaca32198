"""ojas.nn.utils: clip_grad_norm_ (torch.nn.utils.clip_grad_norm_)."""
from ojas import _C
from ojas import _dtype as D


def clip_grad_norm_(parameters, max_norm, norm_type=2.0):
    """Scale the grads of `parameters` so that their global L2 norm is at
    most max_norm (by max_norm / (norm + 1e-6), as torch); returns the norm
    before clipping as a 0-d float32 tensor. A non-finite norm leaves the
    grads as they are (oj_clip_grad_norm). Only norm_type 2."""
    if isinstance(parameters, _C.TensorBase):
        parameters = [parameters]
    ps = list(parameters)
    if float(norm_type) != 2.0:
        raise _C.UnsupportedError("clip_grad_norm_: only norm_type=2 is supported")
    if not ps:
        return None
    norm = _C.clip_grad_norm(ps, float(max_norm))
    return _C.scalar(norm, D.float32, ps[0].engine)
