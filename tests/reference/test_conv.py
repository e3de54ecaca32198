"""Convolution and pooling of include/ojas/ops.h vs PyTorch 1.13: unfold,
conv1d, conv2d (stride, padding, dilation, groups, bias), max_pool2d,
avg_pool2d (count_include_pad), adaptive_avg_pool2d, upsample_nearest2d and
batch_norm (train/eval, running statistics); forward and gradients, f32 and
f64, non-contiguous inputs, through the Python package's raw bindings
(ojas._C)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ojpkg import ojas
from pkgcheck import assert_close, fncheck, rand

CONV2D = [
    # (x shape, weight shape, stride, padding, dilation, groups, bias)
    ((2, 4, 7, 6), (6, 2, 3, 2), (2, 1), (1, 2), (2, 1), 2, True),
    ((1, 3, 5, 5), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1, False),
    ((2, 4, 6, 5), (8, 1, 3, 3), (1, 2), (1, 1), (1, 1), 4, True),
    ((2, 2, 4, 4), (3, 2, 1, 1), (2, 2), (0, 0), (1, 1), 1, True),
    ((1, 2, 9, 3), (2, 2, 4, 1), (3, 1), (2, 0), (1, 1), 1, False),
]


@pytest.mark.ops("conv2d")
@pytest.mark.parametrize("case", range(len(CONV2D)))
def test_conv2d(engine, dtype, rng, case):
    xs, ws, s, p, d, g, bias = CONV2D[case]
    x, w = rand(rng, xs, dtype), rand(rng, ws, dtype)
    b = rand(rng, (ws[0],), dtype) if bias else None
    ins = [x, w] + ([b] if bias else [])
    fncheck(engine, lambda x, w, *b: ojas._C.conv2d(x, w, b[0] if b else None, s, p, d, g), ins,
            ref=lambda x, w, *b: F.conv2d(x, w, b[0] if b else None, s, p, d, g),
            noncontig=True)


@pytest.mark.ops("conv1d")
@pytest.mark.parametrize("s,p,d,g", [(1, 0, 1, 1), (2, 1, 2, 2), (3, 2, 1, 1)])
def test_conv1d(engine, dtype, rng, s, p, d, g):
    x, w, b = rand(rng, (2, 4, 11), dtype), rand(rng, (6, 4 // g, 3), dtype), rand(rng, (6,), dtype)
    fncheck(engine, lambda x, w, b: ojas._C.conv1d(x, w, b, s, p, d, g),
            [x, w, b], ref=lambda x, w, b: F.conv1d(x, w, b, s, p, d, g), noncontig=True)


@pytest.mark.ops("unfold")
def test_unfold(engine, dtype, rng):
    x = rand(rng, (2, 3, 5, 4), dtype)
    k, dl, p, s = (2, 3), (2, 1), (1, 1), (1, 2)
    fncheck(engine, lambda x: ojas._C.unfold(x, k, dl, p, s), [x],
            ref=lambda x: F.unfold(x, k, dl, p, s), noncontig=True)


POOL = [((3, 2), (2, 2), (1, 1)), ((2, 2), None, (0, 0)), ((3, 3), (1, 2), (1, 0)),
        ((1, 2), (1, 1), (0, 1))]


@pytest.mark.ops("max_pool2d")
@pytest.mark.parametrize("case", range(len(POOL)))
def test_max_pool2d(engine, dtype, rng, case):
    k, s, p = POOL[case]
    x = rand(rng, (2, 3, 7, 6), dtype)
    fncheck(engine, lambda x: ojas._C.max_pool2d(x, k, s, p), [x],
            ref=lambda x: F.max_pool2d(x, k, s, p), noncontig=True)


@pytest.mark.ops("avg_pool2d")
@pytest.mark.parametrize("case", range(len(POOL)))
@pytest.mark.parametrize("include", [True, False])
def test_avg_pool2d(engine, dtype, rng, case, include):
    k, s, p = POOL[case]
    x = rand(rng, (2, 3, 7, 6), dtype)
    fncheck(engine, lambda x: ojas._C.avg_pool2d(x, k, s, p, include), [x],
            ref=lambda x: F.avg_pool2d(x, k, s, p, count_include_pad=include), noncontig=True)


def test_pool_rank3(engine, rng):
    x = rand(rng, (3, 6, 5), "f64")
    fncheck(engine, lambda x: ojas._C.max_pool2d(x, (2, 2), None, 0), [x],
            ref=lambda x: F.max_pool2d(x, 2))


@pytest.mark.ops("adaptive_avg_pool2d")
@pytest.mark.parametrize("out", [(3, 5), (1, 1), (7, 2), (4, 3), (10, 8)], ids=str)
def test_adaptive_avg_pool2d(engine, dtype, rng, out):
    x = rand(rng, (2, 3, 7, 5), dtype)
    fncheck(engine, lambda x: ojas._C.adaptive_avg_pool2d(x, out[0], out[1]), [x],
            ref=lambda x: F.adaptive_avg_pool2d(x, out), noncontig=True)


@pytest.mark.ops("upsample_nearest2d")
@pytest.mark.parametrize("out", [(14, 10), (9, 3), (7, 5), (3, 12), (5, 7)], ids=str)
def test_upsample_nearest2d(engine, dtype, rng, out):
    x = rand(rng, (2, 3, 7, 5), dtype)
    fncheck(engine, lambda x: ojas._C.upsample_nearest2d(x, out[0], out[1]), [x],
            ref=lambda x: F.interpolate(x, size=out, mode="nearest"), noncontig=True)


@pytest.mark.ops("batch_norm")
@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 5), (2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(engine, dtype, rng, shape, training, affine):
    C = shape[1]
    x = rand(rng, shape, dtype)
    w, b = rand(rng, (C,), dtype), rand(rng, (C,), dtype)
    rm0 = rand(rng, (C,), dtype)
    rv0 = rand(rng, (C,), dtype, positive=True)
    rm, rv = ojas.tensor(rm0, engine=engine), ojas.tensor(rv0, engine=engine)
    trm, trv = torch.tensor(rm0), torch.tensor(rv0)
    ins = [x, w, b] if affine else [x]
    fncheck(engine, lambda x, *wb: ojas._C.batch_norm(x, rm, rv, wb[0] if wb else None, wb[1] if wb else None, training, 0.1, 1e-5),
            ins, ref=lambda x, *wb: F.batch_norm(x, trm, trv, wb[0] if wb else None,
                                                 wb[1] if wb else None, training, 0.1, 1e-5))
    # the running statistics: updated (unbiased variance) in training, else untouched
    assert_close(rm.numpy(), trm.numpy(), dtype, "running_mean")
    assert_close(rv.numpy(), trv.numpy(), dtype, "running_var")


def test_conv_errors(engine, rng):
    x = ojas.tensor(rand(rng, (1, 4, 5, 5), "f32"), engine=engine)
    w = ojas.tensor(rand(rng, (6, 3, 3, 3), "f32"), engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.conv2d(x, w, None, 1, 0, 1, 1)
    assert e.value.status == "OJ_ERR_SHAPE" and "[6, 3, 3, 3]" in e.value.message
    with pytest.raises(ojas.Error) as e:
        ojas._C.max_pool2d(x, (2, 2), None, (2, 2))
    assert e.value.status == "OJ_ERR_INVALID_ARGUMENT"
