"""ojas for Python: tensors, autograd and the ops of the ojas C library
(include/ojas/*.h) under PyTorch's names. See docs/python.md.

    import ojas
    x = ojas.randn(4, 3, requires_grad=True)
    loss = (x @ ojas.ones(3, 2)).relu().sum()
    loss.backward()
    x.grad.numpy()
"""
from ojas import _C
from ojas._C import (Engine, Error, InvalidArgumentError, ShapeError, DtypeError, DeviceError,
                     CapacityError, OutOfRangeError, IOError, CorruptError, UnsupportedError,
                     NumericError, InternalError, StateError, default_engine)
from ojas._dtype import (dtype, float32, float64, bfloat16, float16, int64, int32, uint32, uint16,
                         uint8)
from ojas._dtype import bool_ as bool  # noqa: A001 (torch.bool)
from ojas._tensor import Tensor
from ojas._creation import (tensor, as_tensor, from_numpy, from_dlpack, zeros, ones, empty, full,
                            rand, randn, arange, linspace, eye, zeros_like, ones_like, empty_like,
                            full_like, rand_like, randn_like, manual_seed)
from ojas._functions import *  # noqa: F401,F403
from ojas._functions import where, cat, concat, stack, addmm, broadcast_to, is_tensor
from ojas._grad_mode import (no_grad, enable_grad, set_grad_enabled, is_grad_enabled,
                             detect_anomaly)
from ojas import io, nn, optim  # noqa: F401

float = float32  # noqa: A001 (torch.float)
double = float64
half = float16
long = int64
int = int32  # noqa: A001 (torch.int)

__version__ = _C.OJ_VERSION
