"""Reductions of include/ojas/ops.h vs PyTorch: sum, mean (any set of dims,
negative dims, keepdim, all dims), sum_all, mean_all, prod, max/min (values
and indices), amax/amin (ties), argmax/argmin, var/std (correction),
logsumexp, norm (L1, L2, inf), cumsum, any/all; forward and gradients, f32
and f64, non-contiguous, empty and rank-0 inputs, through the
Python package's raw bindings (ojas._C)."""

import numpy as np
import pytest
import torch

from ojpkg import ojas
from pkgcheck import assert_close, check, dt, rand

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
def test_reduce_dims(engine, dtype, rng, name, dims, keepdim):
    x = rand(rng, (3, 4, 5), dtype)
    check(engine, name, [x], dims, keepdim, ref=_ref(REDUCE[name]))


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_noncontiguous(engine, dtype, rng, name, keepdim):
    x = rand(rng, (2, 6, 7), dtype)
    for dims in ([-1], [1], [0, -1], None):
        check(engine, name, [x], dims, keepdim, ref=_ref(REDUCE[name]), noncontig=True)


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce_rank0_and_rank1(engine, dtype, rng, name):
    check(engine, name, [rand(rng, (), dtype)], None, False, ref=_ref(REDUCE[name]))
    check(engine, name, [rand(rng, (7,), dtype)], [0], True, ref=_ref(REDUCE[name]))
    check(engine, name, [rand(rng, (1,), dtype)], [-1], False, ref=_ref(REDUCE[name]))


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("dims", [None, [0], [1]], ids=str)
def test_reduce_empty(engine, dtype, rng, name, dims):
    # sum over nothing is 0; mean over nothing is NaN (0/0), as torch.
    check(engine, name, [rand(rng, (0, 3), dtype)], dims, False, ref=_ref(REDUCE[name]))


@pytest.mark.parametrize("name", ["sum_all", "mean_all"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (), (5,), (0, 2)], ids=str)
def test_reduce_all(engine, dtype, rng, name, shape):
    fn = torch.sum if name == "sum_all" else torch.mean
    out = check(engine, name, [rand(rng, shape, dtype)], ref=fn)
    assert tuple(out.shape) == ()


def test_sum_large_accumulates_accurately(engine, rng):
    # f32 inputs summed in double: 1e5 elements stay within 1e-5 of torch's f64.
    x = rand(rng, (100000,), "f32", low=0.5, high=1.5, positive=True)
    out = ojas._C.sum_all(ojas.tensor(x, engine=engine)).numpy()
    want = torch.tensor(x, dtype=torch.float64).sum().numpy()
    assert abs(float(out) - float(want)) <= 1e-6 * abs(float(want))


@pytest.mark.parametrize("idt", ["i64", "i32", "bool"])
def test_sum_integer(engine, rng, idt):
    # torch sums integer and bool tensors to int64.
    x = rand(rng, (4, 5), idt)
    check(engine, "sum", [x], [1], False, ref=_ref(torch.sum))
    check(engine, "sum_all", [x], ref=torch.sum)


def test_reduce_bad_dims(engine, dtype, rng):
    t = ojas.tensor(rand(rng, (3, 4), dtype), engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.sum(t, [0, -2], False)
    assert e.value.status == "OJ_ERR_INVALID_ARGUMENT"
    with pytest.raises(ojas.Error) as e:
        ojas._C.mean(t, [2], False)
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"
    with pytest.raises(ojas.Error) as e:
        ojas._C.sum(t, [-3], True)
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"


# ------------------------------------------------------------------ more reductions

def _multi(fn):
    """A torch reduction over one dim made one over a list of dims (None:
    all), applied dim by dim from the last."""
    def r(t, dims, keepdim):
        ds = range(t.dim()) if not dims else [d % t.dim() for d in dims]
        out = t
        for d in sorted(set(ds), reverse=True):
            out = fn(out, d, True)
        if not keepdim:
            keep = [s for i, s in enumerate(out.shape) if i not in set(ds)]
            out = out.reshape(keep)
        return out
    return r


def _dims_kw(fn, **kw):
    def r(t, dims, keepdim):
        return fn(t, dim=tuple(dims) if dims else tuple(range(t.dim())), keepdim=keepdim, **kw)
    return r


MORE_DIMS = [None, [1], [-1], [0, 2], [-3, -1]]


@pytest.mark.parametrize("dims", MORE_DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod(engine, dtype, rng, dims, keepdim):
    x = rand(rng, (3, 4, 2), dtype, low=0.5, high=1.5)
    check(engine, "prod", [x], dims, keepdim, ref=_multi(lambda t, d, k: torch.prod(t, d, k)))


def test_prod_with_zeros(engine, dtype, rng):
    # one zero in a row: its gradient is the product of the others; two: 0.
    x = rand(rng, (4, 5), dtype, low=0.5, high=1.5)
    x[1, 2] = 0.0
    x[2, 0] = x[2, 3] = 0.0
    check(engine, "prod", [x], [1], False, ref=_multi(lambda t, d, k: torch.prod(t, d, k)))
    check(engine, "prod", [x], None, False, ref=_multi(lambda t, d, k: torch.prod(t, d, k)))


@pytest.mark.parametrize("idt", ["i64", "i32", "bool"])
def test_prod_integer_gives_i64(engine, rng, idt):
    x = rand(rng, (3, 4), idt)
    check(engine, "prod", [x], [1], False, ref=_multi(lambda t, d, k: torch.prod(t, d, k)))


@pytest.mark.parametrize("name", ["amax", "amin"])
@pytest.mark.parametrize("dims", MORE_DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_amax_amin(engine, dtype, rng, name, dims, keepdim):
    # small integers: ties occur and the gradient is split evenly among them
    x = (rng.integers(-3, 4, size=(3, 4, 5)) + 0.25).astype(np.dtype(
        np.float32 if dtype == "f32" else np.float64))
    check(engine, name, [x], dims, keepdim, ref=_dims_kw(getattr(torch, name)))


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim(engine, dtype, rng, name, dim, keepdim):
    x = rand(rng, (4, 5, 3), dtype)  # distinct values: the index is unambiguous
    tfn = getattr(torch, name)
    t = ojas.tensor(x, engine=engine, requires_grad=True)
    vals, idx = getattr(ojas._C, name)(t, dim, keepdim, True)
    tt = torch.tensor(x, requires_grad=True)
    tv, ti = tfn(tt, dim, keepdim)
    assert dt(idx) == "i64" and dt(vals) == dtype
    assert_close(vals.numpy(), tv.detach().numpy(), dtype, name + " values")
    np.testing.assert_array_equal(idx.numpy(), ti.numpy())
    g = rand(rng, tuple(tv.shape), dtype)
    vals.backward(ojas.tensor(g, engine=engine))
    tv.backward(torch.tensor(g))
    assert_close(t.grad.numpy(), tt.grad.numpy(), dtype, name + " grad")
    v2, none = getattr(ojas._C, name)(ojas.tensor(x, engine=engine), dim, keepdim, None)
    assert none is None and v2.shape == vals.shape


def test_max_nan_and_empty(engine, dtype, rng):
    x = rand(rng, (3, 4), dtype)
    x[1, 2] = np.nan
    vals, idx = ojas._C.max(ojas.tensor(x, engine=engine), 1, False, True)
    tv, ti = torch.max(torch.tensor(x), 1)
    assert_close(vals.numpy(), tv.numpy(), dtype, "max with NaN")
    np.testing.assert_array_equal(idx.numpy(), ti.numpy())
    with pytest.raises(ojas.Error) as e:
        ojas._C.max(ojas.tensor(np.zeros((3, 0), x.dtype), engine=engine), 1, False, None)
    assert e.value.status == "OJ_ERR_SHAPE"


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dim", [0, -1, 1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(engine, dtype, rng, name, dim, keepdim):
    x = rand(rng, (4, 5, 3), dtype)
    check(engine, name, [x], dim, keepdim, ref=getattr(torch, name), noncontig=True)


# int64 beyond 2^53 (not exact in double), with ties and values whose sums
# and products wrap modulo 2^64 as torch's do.
P53, P62 = 2 ** 53, 2 ** 62
BIG_I64 = np.array([[P53 + 1, 1, -P53, 3], [P62, 4, P62, P62], [-P53 - 1, -P53, P53, P53 + 1]],
                   np.int64)
I64_REF = {"sum": _ref(torch.sum), "amax": _dims_kw(torch.amax), "amin": _dims_kw(torch.amin),
           "prod": _multi(lambda t, d, k: torch.prod(t, d, k))}


@pytest.mark.parametrize("name", sorted(I64_REF))
@pytest.mark.parametrize("dims", [None, [0], [1], [-1, 0]], ids=str)
@pytest.mark.parametrize("noncontig", [False, True])
def test_reduce_i64_beyond_2p53(engine, name, dims, noncontig):
    check(engine, name, [BIG_I64], dims, False, ref=I64_REF[name], noncontig=noncontig)


@pytest.mark.parametrize("name", ["argmax", "argmin", "max", "min"])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_reduce_i64_beyond_2p53(engine, name, dim):
    if name in ("argmax", "argmin"):
        check(engine, name, [BIG_I64], dim, False, ref=getattr(torch, name), noncontig=True)
        return
    vals, idx = getattr(ojas._C, name)(ojas.tensor(BIG_I64, engine=engine), dim, False, True)
    tv, ti = getattr(torch, name)(torch.tensor(BIG_I64), dim)
    assert dt(vals) == "i64" and dt(idx) == "i64"
    np.testing.assert_array_equal(vals.numpy(), tv.numpy())
    np.testing.assert_array_equal(idx.numpy(), ti.numpy())


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("dims", MORE_DIMS, ids=str)
@pytest.mark.parametrize("correction", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(engine, dtype, rng, name, dims, correction, keepdim):
    x = rand(rng, (3, 4, 5), dtype)
    fn = getattr(torch, name)
    check(engine, name, [x], dims, correction, keepdim,
          ref=lambda t, d, c, k: fn(t, dim=tuple(d) if d else None, correction=int(c),
                                    keepdim=k))


def test_var_too_few_is_nan_and_noncontig(engine, dtype, rng):
    x = rand(rng, (1, 4), dtype)
    check(engine, "var", [x], [0], 1.0, False, grad=False,
          ref=lambda t, d, c, k: torch.var(t, dim=tuple(d), correction=int(c), keepdim=k))
    x = rand(rng, (5, 6), dtype)
    check(engine, "std", [x], [1], 1.0, True, noncontig=True,
          ref=lambda t, d, c, k: torch.std(t, dim=tuple(d), correction=int(c), keepdim=k))


@pytest.mark.parametrize("dims", MORE_DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(engine, dtype, rng, dims, keepdim):
    x = rand(rng, (3, 4, 5), dtype, high=30.0)  # large values: must not overflow
    check(engine, "logsumexp", [x], dims, keepdim, ref=_dims_kw(torch.logsumexp))


@pytest.mark.parametrize("p", [1.0, 2.0, float("inf")], ids=["l1", "l2", "inf"])
@pytest.mark.parametrize("dims", MORE_DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_norm(engine, dtype, rng, p, dims, keepdim):
    x = rand(rng, (3, 4, 5), dtype)
    check(engine, "norm", [x], p, dims, keepdim,
          ref=lambda t, p, d, k: torch.linalg.vector_norm(
              t, ord=p, dim=tuple(d) if d else None, keepdim=k))


def test_norm_inf_ties_and_bad_p(engine, dtype, rng):
    x = np.array([[1.5, -1.5, 0.5], [2.0, 1.0, -2.0]], dtype=np.dtype(
        np.float32 if dtype == "f32" else np.float64))
    check(engine, "norm", [x], float("inf"), [1], False,
          ref=lambda t, p, d, k: torch.linalg.vector_norm(t, ord=p, dim=tuple(d), keepdim=k))
    with pytest.raises(ojas.Error) as e:
        ojas._C.norm(ojas.tensor(x, engine=engine), 3.0, None, False)
    assert e.value.status == "OJ_ERR_INVALID_ARGUMENT"


@pytest.mark.parametrize("dim", [0, 1, -1, -3])
def test_cumsum(engine, dtype, rng, dim):
    check(engine, "cumsum", [rand(rng, (3, 4, 5), dtype)], dim, ref=torch.cumsum)
    check(engine, "cumsum", [rand(rng, (4, 5, 3), dtype)], dim, ref=torch.cumsum, noncontig=True)


@pytest.mark.parametrize("idt", ["i64", "i32", "bool"])
def test_cumsum_integer_gives_i64(engine, rng, idt):
    check(engine, "cumsum", [rand(rng, (3, 4), idt)], 1, ref=torch.cumsum)


@pytest.mark.parametrize("name", ["any", "all"])
@pytest.mark.parametrize("dims", [None, [0], [-1], [0, 1]], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all(engine, rng, name, dims, keepdim):
    x = rand(rng, (4, 3, 2), "f32")
    x[rng.random(x.shape) < 0.4] = 0.0
    x[0, 0, 0] = np.nan
    fn = getattr(torch, name)
    out = check(engine, name, [x], dims, keepdim, grad=False,
                ref=_multi(lambda t, d, k: fn(t != 0, d, k)))
    assert dt(out) == "bool"
    b = rng.random((3, 4)) < 0.5
    check(engine, name, [b], [1], keepdim, ref=_multi(lambda t, d, k: fn(t, d, k)))
    # over an empty dim: any is false, all is true
    check(engine, name, [np.zeros((0, 3), np.float32)], [0], keepdim, grad=False,
          ref=_multi(lambda t, d, k: fn(t != 0, d, k)))
