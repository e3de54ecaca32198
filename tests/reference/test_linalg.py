"""Linear algebra of include/ojas/ops.h vs PyTorch: matmul (every
torch.matmul case, broadcast batches, transposed operands, empty dims), bmm,
linear (with and without bias, any leading dims), addmm (beta, alpha);
forward and gradients, f32 and f64, in FAST (OpenBLAS) and EXACT (own
kernel) numerics, through the Python package's raw bindings (ojas._C)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ojpkg import ojas
from pkgcheck import check, rand

MATMUL_SHAPES = [
    ((5,), (5,)),                  # dot
    ((3, 5), (5,)),                # matrix-vector
    ((5,), (5, 4)),                # vector-matrix
    ((3, 5), (5, 4)),
    ((2, 3, 5), (5, 4)),           # batch folds into the rows
    ((3, 5), (2, 5, 4)),           # a broadcast over b's batch
    ((2, 1, 3, 5), (3, 5, 4)),     # both broadcast
    ((5,), (2, 5, 4)),
    ((2, 3, 5), (5,)),
    ((2, 3, 70, 33), (2, 3, 33, 19)),
    ((1, 3, 5), (4, 5, 2)),
]


@pytest.fixture(params=["fast", "exact"])
def neng(request):
    e = ojas.Engine(threads=1, numerics=request.param)
    yield e
    request.node.funcargs.clear()
    assert e.live_tensors() == 0
    e.close()


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("noncontig", [False, True])
def test_matmul(neng, dtype, rng, sa, sb, noncontig):
    check(neng, "matmul", [rand(rng, sa, dtype), rand(rng, sb, dtype)], ref=torch.matmul,
          noncontig=noncontig)


@pytest.mark.parametrize("sa,sb", [((3, 0), (0, 4)), ((0, 3), (3, 4)), ((2, 0, 3), (3, 5)),
                                   ((0,), (0,))], ids=str)
def test_matmul_empty(neng, dtype, rng, sa, sb):
    check(neng, "matmul", [rand(rng, sa, dtype), rand(rng, sb, dtype)], ref=torch.matmul)


def test_matmul_large_k_accuracy(neng, rng):
    # K = 4096 f32: within f32 GEMM accuracy of torch's result
    a, b = rand(rng, (8, 4096), "f32"), rand(rng, (4096, 6), "f32")
    out = ojas._C.matmul(ojas.tensor(a, engine=neng), ojas.tensor(b, engine=neng)).numpy()
    want = (torch.tensor(a, dtype=torch.float64) @ torch.tensor(b, dtype=torch.float64)).numpy()
    assert np.max(np.abs(out - want)) <= 1e-5 * np.max(np.abs(want)) * 10


def test_bmm(neng, dtype, rng):
    check(neng, "bmm", [rand(rng, (3, 4, 5), dtype), rand(rng, (3, 5, 2), dtype)],
          ref=torch.bmm)
    check(neng, "bmm", [rand(rng, (2, 6, 3), dtype), rand(rng, (2, 3, 4), dtype)],
          ref=torch.bmm, noncontig=True)


@pytest.mark.parametrize("xshape", [(4,), (3, 4), (2, 3, 4), (2, 1, 3, 4), (0, 4)], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_linear(neng, dtype, rng, xshape, bias):
    w = rand(rng, (5, 4), dtype)
    ins = [rand(rng, xshape, dtype), w] + ([rand(rng, (5,), dtype)] if bias else [])
    if bias:
        check(neng, "linear", ins, ref=F.linear)
    else:
        check(neng, "linear", ins, None, ref=lambda x, w, _: F.linear(x, w))


@pytest.mark.parametrize("approx", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_gelu_linear(neng, dtype, rng, approx, bias):
    # linear(gelu(x)) with gelu(x) recomputed in the backward
    mode = "tanh" if approx else "none"
    w = rand(rng, (5, 4), dtype)
    ins = [rand(rng, (2, 3, 4), dtype), w] + ([rand(rng, (5,), dtype)] if bias else [])
    if bias:
        check(neng, "gelu_linear", ins, approx,
              ref=lambda x, w, b, a: F.linear(F.gelu(x, approximate=mode), w, b))
    else:
        check(neng, "gelu_linear", ins, None, approx,
              ref=lambda x, w, _, a: F.linear(F.gelu(x, approximate=mode), w))


@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_linear(neng, dtype, rng, bias):
    # linear(silu(gate) * up) with silu(gate) * up recomputed in the backward
    ins = [rand(rng, (2, 3, 6), dtype), rand(rng, (2, 3, 6), dtype), rand(rng, (5, 6), dtype)]
    if bias:
        check(neng, "swiglu_linear", ins + [rand(rng, (5,), dtype)],
              ref=lambda g, u, w, b: F.linear(F.silu(g) * u, w, b))
    else:
        check(neng, "swiglu_linear", ins, None,
              ref=lambda g, u, w, _: F.linear(F.silu(g) * u, w))


def test_linear_noncontig(neng, dtype, rng):
    # x and weight passed as transposed views
    check(neng, "linear", [rand(rng, (2, 3, 4), dtype), rand(rng, (5, 4), dtype),
                           rand(rng, (5,), dtype)], ref=F.linear, noncontig=True)


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, -2.0), (0.0, 3.0)])
@pytest.mark.parametrize("bshape", [(3, 2), (2,), (3, 1), (1, 1)], ids=str)
def test_addmm(neng, dtype, rng, beta, alpha, bshape):
    check(neng, "addmm", [rand(rng, bshape, dtype), rand(rng, (3, 4), dtype),
                          rand(rng, (4, 2), dtype)], beta, alpha,
          ref=lambda c, a, b, be, al: torch.addmm(c, a, b, beta=be, alpha=al))


def test_bad_shapes(engine, rng):
    def t(shape, dtype="f32"):
        return ojas.tensor(rand(rng, shape, dtype), engine=engine)

    a, b = t((2, 3)), t((4, 5))
    with pytest.raises(ojas.Error) as e:
        ojas._C.matmul(a, b)
    assert e.value.status == "OJ_ERR_SHAPE"
    assert e.value.message == "matmul: shapes [2, 3] and [4, 5] do not fit: inner dims 3 != 4"
    with pytest.raises(ojas.Error) as e:
        ojas._C.matmul(a, t((3, 2), "f64"))
    assert e.value.status == "OJ_ERR_DTYPE"
    with pytest.raises(ojas.Error) as e:
        ojas._C.bmm(a, b)
    assert e.value.status == "OJ_ERR_SHAPE"
    with pytest.raises(ojas.Error) as e:
        ojas._C.linear(a, b, None)
    assert e.value.status == "OJ_ERR_SHAPE"
    with pytest.raises(ojas.Error) as e:
        ojas._C.addmm(t((4, 4)), a, t((3, 3)), 1.0, 1.0)
    assert e.value.status == "OJ_ERR_SHAPE"
