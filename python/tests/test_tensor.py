"""ojas.Tensor: creation, attributes, operators, indexing views, in-place
ops, conversions."""
import numpy as np
import pytest
import torch

import ojas


def test_creation_matches_torch():
    assert ojas.tensor([1.5, 2]).dtype is ojas.float32
    assert ojas.tensor([1, 2]).dtype is ojas.int64
    assert ojas.tensor([True]).dtype is ojas.bool
    assert ojas.tensor(np.zeros(3)).dtype is ojas.float64
    assert ojas.tensor(2.5).shape == ()
    assert ojas.zeros(2, 3).shape == (2, 3) == ojas.ones((2, 3)).shape
    assert ojas.empty(4, dtype=ojas.int32).dtype is ojas.int32
    np.testing.assert_array_equal(ojas.full((2,), 7).numpy(), [7, 7])
    assert ojas.full((2,), 7).dtype is ojas.int64
    for args in [(5,), (1, 4), (0, 1, 0.25), (2.0, -1.0, -0.5)]:
        np.testing.assert_allclose(ojas.arange(*args).numpy(), torch.arange(*args).numpy())
        assert ojas.arange(*args).dtype.name == str(torch.arange(*args).dtype)[6:]
    np.testing.assert_allclose(ojas.linspace(0, 1, 5).numpy(), torch.linspace(0, 1, 5).numpy())
    np.testing.assert_array_equal(ojas.eye(2, 3).numpy(), torch.eye(2, 3).numpy())
    x = ojas.randn(3, 4, dtype=ojas.float64)
    assert ojas.zeros_like(x).dtype is ojas.float64 and ojas.ones_like(x).shape == (3, 4)
    assert ojas.full_like(x, 2).numpy().sum() == 24
    assert ojas.empty_like(x, dtype=ojas.float16).dtype is ojas.float16
    r = ojas.rand(10000).numpy()
    assert 0 <= r.min() and r.max() < 1 and abs(r.mean() - 0.5) < 0.02
    n = ojas.randn(10000).numpy()
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    assert ojas.rand_like(x).shape == ojas.randn_like(x).shape == (3, 4)
    b = ojas.tensor([1.0, 2.5, -3.0], dtype=ojas.bfloat16)
    assert b.dtype is ojas.bfloat16 and b.tolist() == [1.0, 2.5, -3.0]


def test_manual_seed_repeats():
    ojas.manual_seed(5)
    a = ojas.randn(8).tolist()
    ojas.manual_seed(5)
    assert ojas.randn(8).tolist() == a


def test_attributes():
    x = ojas.zeros(2, 3, 4)
    assert (x.ndim, x.dim(), x.numel(), len(x)) == (3, 3, 24, 2)
    assert x.size() == (2, 3, 4) and x.size(-1) == 4 and x.stride() == (12, 4, 1)
    assert x.device == "cpu" and not x.is_cuda and x.engine is ojas.default_engine()
    assert x.is_contiguous() and not x.transpose(0, 1).is_contiguous()
    assert x.element_size() == 4 and x.is_floating_point()
    assert repr(ojas.tensor([[1.5, 2.0]])) == repr(torch.tensor([[1.5, 2.0]]))
    assert repr(ojas.tensor([1, 2])) == repr(torch.tensor([1, 2]))


OPERATORS = [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
    lambda a, b: a ** 2, lambda a, b: 2 ** a, lambda a, b: a ** b, lambda a, b: -a,
    lambda a, b: abs(a), lambda a, b: +a, lambda a, b: a @ b.transpose(0, 1),
    lambda a, b: a + 1, lambda a, b: 1 + a, lambda a, b: a - 1.5, lambda a, b: 3 - a,
    lambda a, b: a * 2, lambda a, b: 0.5 * a, lambda a, b: a / 4, lambda a, b: 1 / a,
    lambda a, b: a < b, lambda a, b: a <= 0.5, lambda a, b: a > b, lambda a, b: 0.5 >= a,
    lambda a, b: a == b, lambda a, b: a != 1.0, lambda a, b: (a > 0.5) & (b > 0.5),
    lambda a, b: (a > 0.5) | (b > 0.5), lambda a, b: (a > 0.5) ^ (b > 0.5), lambda a, b: ~(a > 1),
]


@pytest.mark.parametrize("k", range(len(OPERATORS)))
def test_operators(k):
    rng = np.random.default_rng(k)
    x, y = rng.uniform(0.1, 2, (3, 4)), rng.uniform(0.1, 2, (3, 4))
    got = OPERATORS[k](ojas.tensor(x), ojas.tensor(y))
    want = OPERATORS[k](torch.tensor(x), torch.tensor(y))
    assert got.dtype.name == str(want.dtype)[6:]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_scalar_promotion():
    i = ojas.tensor([1, 2, 3])
    assert (i + 1).dtype is ojas.int64
    assert (i * 1.5).dtype is ojas.float32
    assert (i / 2).dtype is ojas.float32
    assert (ojas.tensor([1.0], dtype=ojas.float16) * 2.0).dtype is ojas.float16
    assert (ojas.tensor([True]) + 1).dtype is ojas.int64


def test_indexing_gives_views():
    x = ojas.arange(24, dtype=ojas.float32).reshape(2, 3, 4)
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    keys = [0, -1, (1, 2), (slice(None), 1), (Ellipsis, 2), (None, 0), (0, slice(1, None, 2)),
            (slice(None), None, slice(None, 2), -1), (1, Ellipsis, None), slice(5, 9)]
    for key in keys:
        v = x[key]
        np.testing.assert_array_equal(v.numpy(), t[key].numpy())
        assert v._shares_storage(x), key
    np.testing.assert_array_equal(x[:, [2, 0]].numpy(), t[:, [2, 0]].numpy())
    np.testing.assert_array_equal(x[ojas.tensor([1, 1])].numpy(), t[torch.tensor([1, 1])].numpy())
    assert x[1, 2, 3].item() == 23.0
    assert [r.shape for r in x] == [(3, 4), (3, 4)]


def test_setitem_writes_through():
    x, t = ojas.zeros(3, 4), torch.zeros(3, 4)
    for xx in (x, t):
        xx[0] = 1.0
        xx[1:, 2] = 5
        xx[..., -1] = xx[..., 0] * 2
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    v = x[2]
    v[0] = 9
    assert x[2, 0].item() == 9.0


def test_bool_mask_indexing_matches_torch(rng):
    """t[mask] gathers the rows where a bool mask over t's leading dims is
    true (a copy, with a gradient); t[mask] = number or tensor writes them;
    a list of bools is a mask too."""
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    for mshape in [(4,), (4, 3), (4, 3, 2)]:
        m = rng.random(mshape) < 0.5
        m.flat[0] = True
        o = ojas.tensor(x, requires_grad=True)
        t = torch.tensor(x, requires_grad=True)
        got, want = o[ojas.tensor(m)], t[torch.tensor(m)]
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
        assert not got._shares_storage(o)  # a copy, as torch
        g = rng.standard_normal(tuple(want.shape)).astype(np.float32)
        got.backward(ojas.tensor(g))
        want.backward(torch.tensor(g))
        np.testing.assert_array_equal(o.grad.numpy(), t.grad.numpy())
        for value in (7.5, rng.standard_normal(tuple(want.shape[1:])).astype(np.float32),
                      rng.standard_normal(tuple(want.shape)).astype(np.float32)):
            a, b = ojas.tensor(x), torch.tensor(x)
            a[ojas.tensor(m)] = value if np.isscalar(value) else ojas.tensor(value)
            b[torch.tensor(m)] = value if np.isscalar(value) else torch.tensor(value)
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    lst = [True, False, True, True]
    np.testing.assert_array_equal(ojas.tensor(x)[lst].numpy(), x[np.array(lst)])
    none = ojas.tensor(x)[ojas.zeros(4, dtype=ojas.bool)]
    assert tuple(none.shape) == (0, 3, 2)
    # through a strided view: reads a transposed tensor; writes through a row view
    a = ojas.tensor(x)
    m = rng.random((2, 3)) < 0.5
    np.testing.assert_array_equal(a.transpose(0, 2)[ojas.tensor(m)].numpy(),
                                  np.swapaxes(x, 0, 2)[m])
    row = a[:, 1]
    row[ojas.tensor(m[0].repeat(2)[:4])] = -1.0
    want = x.copy()
    want[:, 1][m[0].repeat(2)[:4]] = -1.0
    np.testing.assert_array_equal(a.numpy(), want)
    # an int tensor mask with a condition: mask from a comparison
    a = ojas.tensor(x)
    a[a > 0] = 0.0
    np.testing.assert_array_equal(a.numpy(), np.where(x > 0, 0, x))


def test_bool_mask_indexing_errors():
    x = ojas.zeros(4, 3)
    with pytest.raises(ojas.ShapeError, match=r"mask's shape \[3\] does not match the leading "
                                              r"dims of the indexed tensor's shape \[4, 3\]"):
        x[ojas.ones(3, dtype=ojas.bool)]
    with pytest.raises(ojas.ShapeError, match=r"mask's shape \[4, 3, 1\]"):
        x[ojas.ones(4, 3, 1, dtype=ojas.bool)] = 1.0
    with pytest.raises(ojas.ShapeError):  # 2 selected rows, a value of 3 rows
        x[ojas.tensor([True, False, True, False])] = ojas.ones(3, 3)
    with pytest.raises(ojas.UnsupportedError, match="whole index"):
        x[ojas.ones(4, dtype=ojas.bool), 0]
    p = ojas.zeros(4, requires_grad=True)
    with pytest.raises(ojas.StateError, match="no_grad"):
        p[ojas.ones(4, dtype=ojas.bool)] = 1.0
    with ojas.no_grad():
        p[ojas.tensor([False, True, False, False])] = 2.0
    assert p.tolist() == [0, 2, 0, 0]
    a = ojas.zeros(4, 3).t()  # [3, 4], not mergeable as a view
    with pytest.raises(ojas.UnsupportedError, match="cannot be merged"):
        a[ojas.ones(3, 4, dtype=ojas.bool)] = 1.0


def test_in_place():
    x = ojas.ones(3)
    v0 = x._version
    x += 1
    x *= 3
    x -= ojas.tensor([1.0, 2.0, 3.0])
    x /= 2
    assert x._version > v0
    np.testing.assert_allclose(x.numpy(), [2.5, 2.0, 1.5])
    x.add_(1, alpha=2).mul_(2)
    np.testing.assert_allclose(x.numpy(), [9, 8, 7])
    x.zero_()
    assert x.tolist() == [0, 0, 0]
    x.fill_(4).exp_()
    np.testing.assert_allclose(x.numpy(), np.exp(4.0), rtol=1e-6)
    x.copy_(ojas.tensor([1.0, -2.0, 3.0])).clamp_(-1, 2)
    assert x.tolist() == [1, -1, 2]


def test_conversions():
    x = ojas.tensor([[1.25, -2.0]])
    assert x.tolist() == [[1.25, -2.0]]
    assert x[0, 0].item() == 1.25 and isinstance(x[0, 0].item(), float)
    assert ojas.tensor([2**60 + 1])[0].item() == 2**60 + 1
    assert ojas.tensor([True])[0].item() is True
    assert float(x[0, 1]) == -2.0 and int(x[0, 1]) == -2 and bool(x[0, 0])
    assert [1, 2, 3][ojas.tensor(1)] == 2
    assert x.to(ojas.float64).dtype is ojas.float64 and x.double().dtype is ojas.float64
    assert x.long().tolist() == [[1, -2]] and x.bool().tolist() == [[True, True]]
    assert x.to("cpu") is x
    assert f"{x.sum():.2f}" == "-0.75"


def test_hash_and_identity():
    x = ojas.zeros(2)
    assert {x: 1}[x] == 1
