"""The package on a CUDA engine (skipped without a GPU or a CUDA build):
ops, autograd, host copies, and DLPack with kDLCUDA (ojas to ojas; torch
1.13 of Debian has no CUDA)."""
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
