"""The package on a CUDA engine (skipped without a GPU or a CUDA build):
ops, autograd, host copies, DLPack with kDLCUDA between ojas tensors, and
with torch's CUDA tensors (zero copy both ways, the stream argument of
__dlpack__ honoured; skipped with a message when torch has no CUDA, as
Debian's torch 1.13)."""
import numpy as np
import pytest

import ojas


@pytest.fixture
def cuda():
    try:
        # EXACT: FAST matmuls on the GPU may take TF32 (~1e-4 relative),
        # beyond the 1e-5 these comparisons with the CPU hold to
        e = ojas.Engine(device="cuda:0", numerics="exact")
    except ojas.DeviceError as err:
        pytest.skip("no CUDA engine: %s" % err)
    yield e
    e.close()


def test_ops_and_autograd_on_cuda(cuda):
    cpu = ojas.default_engine()
    xs = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    x = ojas.tensor(xs, engine=cuda, requires_grad=True)
    assert x.device == "cuda:0" and x.engine is cuda
    loss = (x @ ojas.ones(3, 2, engine=cuda)).relu().sum()
    loss.backward()
    xc = ojas.tensor(xs, requires_grad=True)
    lc = (xc @ ojas.ones(3, 2)).relu().sum()
    lc.backward()
    np.testing.assert_allclose(loss.item(), lc.item(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.tolist(), xc.grad.tolist(), rtol=1e-5)
    assert x.grad.to(cpu).engine is cpu
    with pytest.raises(ojas.DeviceError):
        x.numpy()
    with pytest.raises(ojas.Error):
        x + xc  # no implicit copies between engines or devices


def test_dlpack_cuda_round_trip(cuda):
    x = ojas.arange(6.0, engine=cuda).reshape(2, 3)
    assert x.__dlpack_device__() == (2, 0)
    y = ojas.from_dlpack(x, engine=cuda)
    assert y.data_ptr() == x.data_ptr() and y.tolist() == x.tolist()
    with pytest.raises(ojas.DeviceError, match="DLPack device"):
        ojas.from_dlpack(x)  # device memory into the CPU engine
    del y


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch %s has no CUDA (torch.cuda.is_available() is False): the DLPack "
                    "exchange with torch CUDA tensors is not tested" % torch.__version__)
    return torch


def test_torch_from_ojas_cuda_is_zero_copy(cuda):
    torch = _torch_cuda()
    x = ojas.arange(12.0, engine=cuda).reshape(3, 4)
    t = torch.from_dlpack(x)
    assert t.device == torch.device("cuda:0") and t.data_ptr() == x.data_ptr()
    assert t.tolist() == x.tolist()
    t[0, 0] = 100.0
    torch.cuda.synchronize()
    assert x[0, 0].item() == 100.0
    tt = torch.utils.dlpack.from_dlpack(x.transpose(0, 1))
    assert tt.stride() == (1, 4) and tt.data_ptr() == x.data_ptr()
    for dt, tdt in ((ojas.bfloat16, torch.bfloat16), (ojas.int64, torch.int64),
                    (ojas.bool, torch.bool)):
        y = ojas.ones(3, dtype=dt, engine=cuda)
        ty = torch.from_dlpack(y)
        assert ty.dtype == tdt and ty.data_ptr() == y.data_ptr() and ty.tolist() == [1, 1, 1]
    del t, tt, ty


def test_ojas_from_torch_cuda_is_zero_copy(cuda):
    torch = _torch_cuda()
    t = torch.arange(12.0, device="cuda:0").reshape(3, 4)
    x = ojas.from_dlpack(t, engine=cuda)
    assert x.device == "cuda:0" and x.data_ptr() == t.data_ptr()
    assert x.tolist() == t.tolist()
    x[1, 1] = -3.0
    cuda.synchronize()
    assert t[1, 1].item() == -3.0
    xs = ojas.from_dlpack(t[:, 1:3], engine=cuda)
    assert xs.data_ptr() == t[:, 1:3].data_ptr() and xs.tolist() == t[:, 1:3].tolist()
    np.testing.assert_allclose((xs * 2).sum().item(), (t[:, 1:3] * 2).sum().item())
    with pytest.raises(ojas.DeviceError, match="does not copy between devices"):
        ojas.from_dlpack(t)  # device memory into the default CPU engine
    del x, xs


def test_dlpack_export_finishes_the_engines_work_first(cuda):
    """torch reads an ojas result on a side stream of its own (its pointer
    is the stream argument): the export waits for the engine's queued
    matmuls, so torch never sees the memory before they are done."""
    torch = _torch_cuda()
    n = 4096
    a = ojas.ones(n, n, engine=cuda)
    w = ojas.full((n, n), 1.0 / n, engine=cuda)  # a @ w stays exactly 1 (dyadic sums)
    for _ in range(20):
        a = a @ w
    x = a * 3.0  # queued behind ~3 TFLOP of f32 work
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.from_dlpack(x)
        assert t.data_ptr() == x.data_ptr()
        assert bool((t == 3.0).all())
    del t


def test_from_dlpack_waits_for_the_torch_stream(cuda):
    """ojas asks a CUDA producer for stream 1, so torch makes the legacy
    default stream wait for its current (side) stream; the engine's blocking
    stream runs after it: ojas reads what torch wrote, not what was there."""
    torch = _torch_cuda()
    t = torch.zeros(1 << 20, device="cuda:0")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on the side stream
        else:
            b = torch.ones(4096, 4096, device="cuda:0")
            for _ in range(20):
                b = b @ b / 4096
        t.fill_(7.0)
        x = ojas.from_dlpack(t, engine=cuda)
        total = x.sum().item()
    assert total == 7.0 * (1 << 20)
    del x


def test_dlpack_stream_argument_on_cuda(cuda):
    x = ojas.arange(4.0, engine=cuda)
    with pytest.raises(ojas.InvalidArgumentError, match="stream 0 is ambiguous"):
        x.__dlpack__(stream=0)
    for stream in (None, 1, 2, -1):
        y = ojas.from_dlpack(x.__dlpack__(stream=stream), engine=cuda)
        assert y.data_ptr() == x.data_ptr() and y.tolist() == [0, 1, 2, 3]
        del y
    with pytest.raises(ojas.DeviceError, match="dl_device"):
        x.__dlpack__(dl_device=(1, 0))
