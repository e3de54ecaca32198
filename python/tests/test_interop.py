"""Zero-copy exchange: the buffer protocol and .numpy() share memory,
from_numpy shares numpy's, DLPack round trips with torch and numpy keep
the same data pointer."""
import gc

import numpy as np
import pytest
import torch

import ojas


def test_numpy_view_shares_memory():
    x = ojas.arange(6, dtype=ojas.float32).reshape(2, 3)
    n = x.numpy()
    assert n.ctypes.data == x.data_ptr()
    n[0, 1] = 42
    assert x[0, 1].item() == 42
    x[1, 2] = -1
    assert n[1, 2] == -1
    t = x.transpose(0, 1)  # strided views too
    nt = t.numpy()
    assert nt.ctypes.data == x.data_ptr() and nt.strides == (4, 12)
    np.testing.assert_array_equal(nt, n.T)
    m = memoryview(x)
    assert m.format == "f" and m.shape == (2, 3)
    del x, t  # the arrays keep the tensors alive
    gc.collect()
    assert nt[2, 1] == -1 and m.tolist()[0][1] == 42
    m.release()


def test_numpy_dtypes():
    for dt in (ojas.float64, ojas.float16, ojas.int64, ojas.int32, ojas.uint8, ojas.bool,
               ojas.uint16, ojas.uint32):
        x = ojas.ones(3, dtype=dt)
        assert x.numpy().dtype == dt._np
    with pytest.raises(ojas.DtypeError, match="bfloat16"):
        ojas.ones(3, dtype=ojas.bfloat16).numpy()
    with pytest.raises(BufferError):
        memoryview(ojas.ones(3, dtype=ojas.bfloat16))


def test_from_numpy_shares_memory():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    x = ojas.from_numpy(a)
    assert x.data_ptr() == a.ctypes.data and x.dtype is ojas.float64
    a[0, 0] = 7
    assert x[0, 0].item() == 7
    x[2, 3] = -5
    assert a[2, 3] == -5
    xt = ojas.from_numpy(a[:, ::2])  # strided
    np.testing.assert_array_equal(xt.numpy(), a[:, ::2])
    del a  # the tensor keeps numpy's memory alive
    gc.collect()
    assert x.sum().item() == sum(range(12)) + 7 - 11 - 5
    with pytest.raises(ValueError):  # read-only arrays are not shared
        ro = np.zeros(3)
        ro.flags.writeable = False
        ojas.from_numpy(ro)
    with pytest.raises(ojas.DtypeError):
        ojas.from_numpy(np.zeros(3, dtype=np.complex64))


def test_empty_arrays_are_shared():
    # an empty dim before a non-empty one (strides (12, 4) / (3, 1)) is no
    # stride overflow, from numpy and through DLPack from torch
    assert ojas.from_numpy(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert ojas.from_dlpack(torch.zeros(0, 3)).shape == (0, 3)
    assert ojas.from_dlpack(torch.zeros(2, 0, 5)).shape == (2, 0, 5)


def test_dlpack_to_torch_is_zero_copy():
    x = ojas.randn(3, 4)
    t = torch.utils.dlpack.from_dlpack(x)
    assert t.data_ptr() == x.data_ptr() and t.shape == (3, 4) and t.dtype == torch.float32
    t[0, 0] = 100.0
    assert x[0, 0].item() == 100.0
    tt = torch.utils.dlpack.from_dlpack(x.transpose(0, 1))
    assert tt.stride() == (1, 4) and tt.data_ptr() == x.data_ptr()
    assert x.__dlpack_device__() == (1, 0)
    for dt in (ojas.float64, ojas.bfloat16, ojas.int32, ojas.uint8):
        y = ojas.ones(2, dtype=dt)
        assert torch.utils.dlpack.from_dlpack(y).tolist() == [1, 1]
    del x
    gc.collect()
    assert t[0, 0].item() == 100.0  # torch keeps the ojas tensor alive


def test_dlpack_from_torch_and_numpy_is_zero_copy():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = ojas.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr() and x.shape == (3, 4)
    t[1, 1] = -3
    assert x[1, 1].item() == -3
    xs = ojas.from_dlpack(t[:, 1:3])
    assert xs.data_ptr() == t[:, 1:3].data_ptr() and xs.tolist() == t[:, 1:3].tolist()
    xb = ojas.from_dlpack(torch.ones(3, dtype=torch.bfloat16))
    assert xb.dtype is ojas.bfloat16
    a = np.arange(5.0)
    xa = ojas.from_dlpack(a)
    assert xa.data_ptr() == a.ctypes.data
    back = np.from_dlpack(xa)
    assert back.ctypes.data == a.ctypes.data
    cap = torch.utils.dlpack.to_dlpack(torch.zeros(2))
    ojas.from_dlpack(cap)
    with pytest.raises(ojas.InvalidArgumentError, match="once"):
        ojas.from_dlpack(cap)


def test_dlpack_protocol_arguments_on_cpu():
    """__dlpack__'s keyword arguments as the Python array API's: torch 2.x
    passes max_version (a legacy capsule is the answer); a CPU tensor takes
    no stream; dl_device must be the tensor's own; copy=True is refused."""
    x = ojas.arange(4.0)
    t = torch.utils.dlpack.from_dlpack(x.__dlpack__(max_version=(1, 0)))
    assert t.data_ptr() == x.data_ptr()
    assert torch.utils.dlpack.from_dlpack(x.__dlpack__(dl_device=(1, 0), copy=False)).tolist() \
        == [0, 1, 2, 3]
    with pytest.raises(ojas.InvalidArgumentError, match="stream must be None for a CPU tensor"):
        x.__dlpack__(stream=1)
    with pytest.raises(ojas.DeviceError, match=r"dl_device \(2, 0\) is not the tensor's device"):
        x.__dlpack__(dl_device=(2, 0))
    with pytest.raises(ojas.UnsupportedError, match="copy=True"):
        x.__dlpack__(copy=True)
    with pytest.raises(TypeError, match="stream must be None or an int"):
        x.__dlpack__(stream="default")


class _Producer:
    """A DLPack producer claiming a device, recording the stream it is asked
    for and handing over a torch CPU tensor's capsule."""

    def __init__(self, device):
        self.device, self.t, self.streams = device, torch.arange(3.0), []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return torch.utils.dlpack.to_dlpack(self.t)


def test_from_dlpack_passes_the_stream_a_cuda_producer_needs():
    """A kDLCUDA producer is asked for stream 1 (the legacy default stream,
    which the engine's blocking stream is ordered with), so that it makes
    its pending work visible there; a CPU producer for none."""
    cuda_like, cpu = _Producer((2, 0)), _Producer((1, 0))
    for p in (cuda_like, cpu):
        x = ojas.from_dlpack(p)  # the capsule holds CPU memory: a CPU engine takes it
        assert x.data_ptr() == p.t.data_ptr()
        del x
    assert cuda_like.streams == [1] and cpu.streams == [None]


def test_dlpack_unconsumed_capsule_frees_its_tensor():
    eng = ojas.default_engine()
    x = ojas.ones(4)
    live = eng.live_tensors()
    cap = x.__dlpack__()
    del x, cap  # never consumed: the capsule's destructor gives the tensor back
    assert eng.live_tensors() == live - 1
