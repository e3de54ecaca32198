"""View ops of include/ojas/ops.h vs PyTorch: reshape, view, permute,
transpose, narrow, slice, expand, squeeze, squeeze_all, unsqueeze, flatten,
select; values, shapes, storage sharing and gradients, through the Python
package's raw bindings (ojas._C)."""

import numpy as np
import pytest
import torch

from ojpkg import ojas
from pkgcheck import check, rand

INT64_MAX = 2**63 - 1


def _slice_ref(t, dim, start, end, step):
    d = dim % t.dim()
    idx = [slice(None)] * t.dim()
    idx[d] = slice(start, None if end == INT64_MAX else end, step)
    return t[tuple(idx)]


VIEWS = [
    # (name, input shape, args, torch reference, shares storage)
    ("reshape", (3, 4), ([4, 3],), lambda t, s: t.reshape(s), True),
    ("reshape", (2, 3, 4), ([-1, 4],), lambda t, s: t.reshape(s), True),
    ("reshape", (2, 3, 4), ([6, -1, 2],), lambda t, s: t.reshape(s), True),
    ("reshape", (), ([1, 1],), lambda t, s: t.reshape(s), True),
    ("reshape", (1,), ([],), lambda t, s: t.reshape(s), True),
    ("reshape", (0, 4), ([4, 0, 1],), lambda t, s: t.reshape(s), True),
    ("view", (2, 3, 4), ([3, 8],), lambda t, s: t.view(s), True),
    ("permute", (2, 3, 4), ([2, 0, 1],), lambda t, d: t.permute(d), True),
    ("permute", (2, 3, 4, 5), ([-1, 1, -4, 2],), lambda t, d: t.permute(d), True),
    ("transpose", (3, 4), (0, 1), torch.transpose, True),
    ("transpose", (2, 3, 4), (-1, 0), torch.transpose, True),
    ("transpose", (2, 3), (1, 1), torch.transpose, True),
    ("narrow", (5, 6), (1, 2, 3), torch.narrow, True),
    ("narrow", (5, 6), (-2, -3, 2), torch.narrow, True),
    ("narrow", (5, 6), (0, 5, 0), torch.narrow, True),
    ("slice", (7, 5), (0, 1, 6, 2), _slice_ref, True),
    ("slice", (4, 9), (-1, -7, INT64_MAX, 3), _slice_ref, True),
    ("slice", (4, 9), (1, -100, 100, 1), _slice_ref, True),
    ("slice", (4, 9), (1, 6, 2, 1), _slice_ref, True),
    ("slice", (4, 9), (0, 0, INT64_MAX, 5), _slice_ref, True),
    ("expand", (3, 1), ([3, 4],), lambda t, s: t.expand(s), True),
    ("expand", (1, 4), ([2, 5, -1, 4],), lambda t, s: t.expand(s), True),
    ("expand", (), ([2, 3],), lambda t, s: t.expand(s), True),
    ("expand", (3, 1), ([3, 0],), lambda t, s: t.expand(s), True),
    ("squeeze", (3, 1, 4), (1,), torch.squeeze, True),
    ("squeeze", (3, 1, 4), (-1,), torch.squeeze, True),
    ("squeeze", (1, 3, 1), (-3,), torch.squeeze, True),
    ("squeeze_all", (1, 3, 1, 4, 1), (), torch.squeeze, True),
    ("squeeze_all", (1, 1), (), torch.squeeze, True),
    ("unsqueeze", (3, 4), (0,), torch.unsqueeze, True),
    ("unsqueeze", (3, 4), (2,), torch.unsqueeze, True),
    ("unsqueeze", (3, 4), (-1,), torch.unsqueeze, True),
    ("unsqueeze", (3, 4), (-3,), torch.unsqueeze, True),
    ("unsqueeze", (), (0,), torch.unsqueeze, True),
    ("flatten", (2, 3, 4), (0, -1), torch.flatten, True),
    ("flatten", (2, 3, 4, 5), (1, 2), torch.flatten, True),
    ("flatten", (2, 3, 4), (-2, -1), torch.flatten, True),
    ("flatten", (), (0, -1), torch.flatten, True),
    ("select", (3, 4, 5), (1, 2), torch.select, True),
    ("select", (3, 4, 5), (-1, -1), torch.select, True),
    ("select", (3, 4), (0, -3), torch.select, True),
    ("select", (4,), (0, 3), torch.select, True),
]


@pytest.mark.parametrize("case", VIEWS, ids=lambda c: "%s%s%s" % (c[0], c[1], c[2]))
def test_view(engine, dtype, rng, case):
    name, shape, args, ref, shares = case
    x = rand(rng, shape, dtype)
    leaf = ojas.tensor(x, engine=engine)
    check(engine, name, [x], *args, ref=ref)
    if shares:
        v = getattr(ojas._C, name)(leaf, *args)
        assert v._shares_storage(leaf), "%s copied a contiguous input" % name


@pytest.mark.parametrize("case", [c for c in VIEWS if len(c[1]) >= 2],
                         ids=lambda c: "%s%s%s" % (c[0], c[1], c[2]))
def test_view_of_noncontiguous(engine, dtype, rng, case):
    name, shape, args, ref, _ = case
    if name == "view":
        pytest.skip("view of a transposed input is an error (tested below)")
    check(engine, name, [rand(rng, shape, dtype)], *args, ref=ref, noncontig=True)


def test_reshape_noncontiguous_copies(engine, dtype, rng):
    C = ojas._C
    x = rand(rng, (3, 4), dtype)
    leaf = ojas.tensor(x, engine=engine)
    t = C.transpose(leaf, 0, 1)
    r = C.reshape(t, [12])
    np.testing.assert_array_equal(r.numpy(), x.T.reshape(12))
    assert not r._shares_storage(leaf)
    f = C.flatten(t, 0, -1)
    np.testing.assert_array_equal(f.numpy(), x.T.reshape(12))
    with pytest.raises(ojas.Error) as e:
        C.view(t, [12])
    assert e.value.status == "OJ_ERR_SHAPE"


def test_chain_of_views_grad(engine, dtype, rng):
    # transpose -> slice -> unsqueeze -> expand -> reshape, then mul: the
    # gradient is routed back through every view (expand sums).
    x = rand(rng, (4, 6), dtype)

    def ref(t):
        u = t.transpose(0, 1)[1:5:2].unsqueeze(1).expand(2, 3, 4)
        return u.reshape(6, 4) * u.reshape(6, 4)

    def oj(t):
        C = ojas._C
        u = C.transpose(t, 0, 1)
        u = C.slice(u, 0, 1, 5, 2)
        u = C.unsqueeze(u, 1)
        u = C.expand(u, [2, 3, 4])
        r = C.reshape(u, [6, 4])
        return C.mul(r, r)

    t = ojas.tensor(x, engine=engine, requires_grad=True)
    out = oj(t)
    tt = torch.tensor(x, requires_grad=True)
    tout = ref(tt)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-6)
    g = rand(rng, (6, 4), dtype)
    out.backward(ojas.tensor(g, engine=engine))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(),
                               rtol=1e-5 if dtype == "f32" else 1e-12)


def test_writes_through_views_are_shared(engine, rng):
    x = rand(rng, (3, 4), "f64")
    t = ojas.tensor(x, engine=engine)
    s = ojas._C.select(t, 0, 1)
    ojas._C.mul_scalar_(s, 2.0)
    x[1] *= 2.0
    np.testing.assert_array_equal(t.numpy(), x)


BAD = [
    ("reshape", (3, 4), ([5, -1],), "OJ_ERR_SHAPE"),
    ("reshape", (3, 4), ([-1, -1],), None),
    ("permute", (2, 3), ([0, 0],), None),
    ("permute", (2, 3), ([0],), "OJ_ERR_SHAPE"),
    ("transpose", (2, 3), (0, 2), "OJ_ERR_OUT_OF_RANGE"),
    ("narrow", (5, 6), (1, 4, 3), "OJ_ERR_OUT_OF_RANGE"),
    ("expand", (3, 2), ([3, 4],), "OJ_ERR_SHAPE"),
    ("unsqueeze", (3, 4), (3,), "OJ_ERR_OUT_OF_RANGE"),
    ("select", (3, 4), (1, 4), "OJ_ERR_OUT_OF_RANGE"),
    ("select", (3, 4), (2, 0), "OJ_ERR_OUT_OF_RANGE"),
    ("squeeze", (3, 4), (-3,), "OJ_ERR_OUT_OF_RANGE"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: "%s%s%s" % (c[0], c[1], c[2]))
def test_view_bad_input(engine, rng, case):
    name, shape, args, status = case
    with pytest.raises(ojas.Error) as e:
        getattr(ojas._C, name)(ojas.tensor(rand(rng, shape, "f32"), engine=engine), *args)
    if status:
        assert e.value.status == status
    assert name in e.value.message


def test_reshape_empty_ambiguous_is_error(engine):
    # torch: "the unspecified dimension size -1 can be any value".
    with pytest.raises(ojas.Error):
        ojas._C.reshape(ojas.tensor(np.zeros((0, 4), np.float32), engine=engine), [2, 0, -1])
