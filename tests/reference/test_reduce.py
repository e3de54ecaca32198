"""Reductions of include/ojas/ops.h vs PyTorch: sum, mean (any set of dims,
negative dims, keepdim, all dims), sum_all, mean_all; forward and gradients,
f32 and f64, non-contiguous, empty and rank-0 inputs."""

import numpy as np
import pytest
import torch

from ojas_ctypes import OjasError
from refcheck import check, rand

REDUCE = {"sum": torch.sum, "mean": torch.mean}

DIMS = [None, [0], [-1], [1], [0, 2], [-1, -3], [2, 0, 1], [-2]]


def _ref(fn):
    def r(t, dims, keepdim):
        if dims is None or len(dims) == 0:
            out = fn(t)
            if keepdim:
                out = out.reshape([1] * t.dim())
            return out
        return fn(t, dim=tuple(dims), keepdim=keepdim)
    return r


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("dims", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_dims(eng, dtype, rng, name, dims, keepdim):
    x = rand(rng, (3, 4, 5), dtype)
    check(eng, name, [x], dims, keepdim, ref=_ref(REDUCE[name]))


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_noncontiguous(eng, dtype, rng, name, keepdim):
    x = rand(rng, (2, 6, 7), dtype)
    for dims in ([-1], [1], [0, -1], None):
        check(eng, name, [x], dims, keepdim, ref=_ref(REDUCE[name]), noncontig=True)


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce_rank0_and_rank1(eng, dtype, rng, name):
    check(eng, name, [rand(rng, (), dtype)], None, False, ref=_ref(REDUCE[name]))
    check(eng, name, [rand(rng, (7,), dtype)], [0], True, ref=_ref(REDUCE[name]))
    check(eng, name, [rand(rng, (1,), dtype)], [-1], False, ref=_ref(REDUCE[name]))


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("dims", [None, [0], [1]], ids=str)
def test_reduce_empty(eng, dtype, rng, name, dims):
    # sum over nothing is 0; mean over nothing is NaN (0/0), as torch.
    check(eng, name, [rand(rng, (0, 3), dtype)], dims, False, ref=_ref(REDUCE[name]))


@pytest.mark.parametrize("name", ["sum_all", "mean_all"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (), (5,), (0, 2)], ids=str)
def test_reduce_all(eng, dtype, rng, name, shape):
    fn = torch.sum if name == "sum_all" else torch.mean
    out = check(eng, name, [rand(rng, shape, dtype)], ref=fn)
    assert out.shape == ()


def test_sum_large_accumulates_accurately(eng, rng):
    # f32 inputs summed in double: 1e5 elements stay within 1e-5 of torch's f64.
    x = rand(rng, (100000,), "f32", low=0.5, high=1.5, positive=True)
    out = eng.call("sum_all", eng.tensor(x)).to_numpy()
    want = torch.tensor(x, dtype=torch.float64).sum().numpy()
    assert abs(float(out) - float(want)) <= 1e-6 * abs(float(want))


@pytest.mark.parametrize("idt", ["i64", "i32", "bool"])
def test_sum_integer(eng, rng, idt):
    # torch sums integer and bool tensors to int64.
    x = rand(rng, (4, 5), idt)
    check(eng, "sum", [x], [1], False, ref=_ref(torch.sum))
    check(eng, "sum_all", [x], ref=torch.sum)


def test_reduce_bad_dims(eng, dtype, rng):
    t = eng.tensor(rand(rng, (3, 4), dtype))
    with pytest.raises(OjasError) as e:
        eng.call("sum", t, [0, -2], False)
    assert e.value.status == "OJ_ERR_INVALID_ARGUMENT"
    with pytest.raises(OjasError) as e:
        eng.call("mean", t, [2], False)
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"
    with pytest.raises(OjasError) as e:
        eng.call("sum", t, [-3], True)
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"
