"""Shape and index ops of include/ojas/ops.h vs PyTorch 1.13: cat, stack,
split, split_sizes, chunk, flip, pad, gather, scatter_add, index_select,
index_add, index_copy_ (in place), masked_fill, tril, triu, one_hot, repeat; forward and gradients,
f32 and f64, non-contiguous, empty and negative-dim cases, and the errors
for bad shapes and out-of-range indices, through the Python package's raw
bindings (ojas._C)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ojpkg import ojas
from pkgcheck import assert_close, check, fncheck, rand


def _idx(rng, shape, high):
    return rng.integers(0, high, size=shape).astype(np.int64)


# ---------------------------------------------------------------- cat, stack

@pytest.mark.ops("cat")
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("noncontig", [False, True])
def test_cat(engine, dtype, rng, dim, noncontig):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for k, s in enumerate(shapes):
        s[dim] = k + 1
    xs = [rand(rng, s, dtype) for s in shapes]
    fncheck(engine, lambda *t: ojas._C.cat(list(t), dim), xs,
            ref=lambda *t: torch.cat(t, dim), noncontig=noncontig)


@pytest.mark.ops("cat")
def test_cat_many_empty_and_promotion(engine, dtype, rng):
    xs = [rand(rng, (2, k % 3), dtype) for k in range(11)]  # > one autograd node's inputs
    fncheck(engine, lambda *t: ojas._C.cat(list(t), 1), xs, ref=lambda *t: torch.cat(t, 1))
    # the legacy 1-D empty tensor is skipped, as torch
    e = np.zeros((0,), dtype=np.float64)
    fncheck(engine, lambda a, b, c: ojas._C.cat([a, b, c], 0),
            [rand(rng, (2, 3), dtype), e, rand(rng, (1, 3), dtype)],
            ref=lambda a, b, c: torch.cat([a, b, c], 0))
    # integer with float promotes to the float
    fncheck(engine, lambda a, b: ojas._C.cat([a, b], 0),
            [rand(rng, (2, 2), "i64"), rand(rng, (1, 2), dtype)],
            ref=lambda a, b: torch.cat([a, b], 0))


def test_cat_errors(engine, rng):
    a, b = ojas.tensor(rand(rng, (2, 3)), engine=engine), ojas.tensor(rand(rng, (2, 4)), engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.cat([a, b], 0)
    assert e.value.status == "OJ_ERR_SHAPE" and "[2, 4]" in e.value.message
    with pytest.raises(ojas.Error) as e:
        ojas._C.cat([a, b], 2)
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"


@pytest.mark.ops("stack")
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack(engine, dtype, rng, dim):
    xs = [rand(rng, (2, 3), dtype) for _ in range(3)]
    fncheck(engine, lambda *t: ojas._C.stack(list(t), dim), xs,
            ref=lambda *t: torch.stack(t, dim), noncontig=True)


# ---------------------------------------------------------------- split, chunk

@pytest.mark.ops("split")
@pytest.mark.parametrize("size,dim", [(2, 1), (3, 0), (5, -1), (1, 1), (7, 1)])
def test_split(engine, dtype, rng, size, dim):
    x = rand(rng, (4, 5), dtype)
    out = fncheck(engine, lambda t: ojas._C.split(t, size, dim), [x],
                  ref=lambda t: torch.split(t, size, dim))
    assert all(o._shares_storage(out[0]) for o in out)


@pytest.mark.ops("chunk")
@pytest.mark.parametrize("chunks,dim", [(2, 1), (3, 1), (4, 1), (5, 0), (1, 0)])
def test_chunk(engine, dtype, rng, chunks, dim):
    x = rand(rng, (4, 5), dtype)
    fncheck(engine, lambda t: ojas._C.chunk(t, chunks, dim), [x],
            ref=lambda t: torch.chunk(t, chunks, dim), noncontig=True)


@pytest.mark.ops("split", "chunk")
@pytest.mark.parametrize("kind", ["split", "chunk"])
def test_split_some_pieces(engine, dtype, rng, kind):
    # the pieces share one autograd node (backward: one cat): unused pieces
    # give zeros, a piece used twice sums, on a non-contiguous input
    x = rand(rng, (4, 7), dtype)

    def oj(t):
        ps = ojas._C.split(t, 2, 0) if kind == "split" else \
            ojas._C.chunk(t, 3, 0)
        return ojas._C.add(ojas._C.mul(ps[1], ps[1]), ps[-1])

    def ref(t):
        ps = torch.split(t, 2, 0) if kind == "split" else torch.chunk(t, 3, 0)
        return ps[1] * ps[1] + ps[-1]

    fncheck(engine, oj, [x], ref=ref, noncontig=True)


def test_split_chunk_empty(engine, rng):
    x = rand(rng, (0, 3), "f64")
    fncheck(engine, lambda t: ojas._C.split(t, 2, 0), [x],
            ref=lambda t: torch.split(t, 2, 0), grad=False)
    fncheck(engine, lambda t: ojas._C.chunk(t, 3, 0), [x],
            ref=lambda t: torch.chunk(t, 3, 0), grad=False)


@pytest.mark.ops("split_sizes")
def test_split_sizes(engine, dtype, rng):
    x = rand(rng, (3, 7), dtype)
    fncheck(engine, lambda t: ojas._C.split_sizes(t, [2, 0, 4, 1], 1), [x],
            ref=lambda t: torch.split(t, [2, 0, 4, 1], 1), noncontig=True)


# ---------------------------------------------------------------- flip, pad

@pytest.mark.ops("flip")
@pytest.mark.parametrize("dims", [[0], [-1], [0, 2], [2, 1, 0], []], ids=str)
def test_flip(engine, dtype, rng, dims):
    x = rand(rng, (2, 3, 4), dtype)
    check(engine, "flip", [x], dims, ref=lambda t, d: torch.flip(t, d), noncontig=True)


@pytest.mark.ops("pad")
@pytest.mark.parametrize("pads", [[1, 2], [0, 0, 2, 1], [1, 1, 1, 1, 1, 1], [-1, 2, 1, -2],
                                  [-2, -2], [3, 0, 0, 0, 0, 2]], ids=str)
def test_pad(engine, dtype, rng, pads):
    x = rand(rng, (2, 3, 4), dtype)
    check(engine, "pad", [x], pads, -1.5, ref=lambda t, p, v: F.pad(t, p, value=v), noncontig=True)


# ---------------------------------------------------------------- gather, scatter_add

@pytest.mark.ops("gather")
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(engine, dtype, rng, dim):
    x = rand(rng, (4, 5, 3), dtype)
    ishape = [3, 4, 2]
    idx = _idx(rng, ishape, x.shape[dim])
    fncheck(engine, lambda t, i: ojas._C.gather(t, dim, i), [x, idx],
            ref=lambda t, i: torch.gather(t, dim, i))


@pytest.mark.ops("scatter_add")
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add(engine, dtype, rng, dim):
    x = rand(rng, (4, 5, 3), dtype)
    idx = _idx(rng, (3, 4, 2), x.shape[dim])
    fn = lambda t, i, s: ojas._C.scatter_add(t, dim, i, s)  # noqa: E731
    ref = lambda t, i, s: torch.scatter_add(t, dim, i, s)  # noqa: E731
    fncheck(engine, fn, [x, idx, rand(rng, (3, 4, 2), dtype)], ref=ref)
    # src larger than index: torch 1.13's backward cannot give src's
    # gradient then (shape error), so only x's is compared
    fncheck(engine, fn, [x, idx, rand(rng, (4, 5, 3), dtype)], ref=ref, grad_inputs=[0])


def test_gather_out_of_range(engine, rng):
    x = ojas.tensor(rand(rng, (3, 4)), engine=engine)
    idx = ojas.tensor(np.array([[0, 4], [1, 2]], dtype=np.int64), engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.gather(x, 1, idx)
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"
    assert "gather: index 4" in e.value.message and "[0, 1]" in e.value.message


# ---------------------------------------------------------------- index_select, index_add

@pytest.mark.ops("index_select")
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(engine, dtype, rng, dim):
    x = rand(rng, (4, 5, 3), dtype)
    idx = _idx(rng, (6,), x.shape[dim])
    fncheck(engine, lambda t, i: ojas._C.index_select(t, dim, i), [x, idx],
            ref=lambda t, i: torch.index_select(t, dim, i), noncontig=True)


@pytest.mark.ops("index_add")
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add(engine, dtype, rng, dim):
    x = rand(rng, (4, 5, 3), dtype)
    shape = list(x.shape)
    shape[dim] = 7
    src = rand(rng, shape, dtype)
    idx = _idx(rng, (7,), x.shape[dim])
    fncheck(engine, lambda t, i, s: ojas._C.index_add(t, dim, i, s, 0.5), [x, idx, src],
            ref=lambda t, i, s: torch.index_add(t, dim, i, s, alpha=0.5))


def _index_copy_ref(x, dim, idx, src):
    """x[.., idx[k], ..] = src[.., k, ..] for k in order (the last of a
    repeated index wins), in numpy."""
    out = x.copy()
    o, s = np.moveaxis(out, dim, 0), np.moveaxis(src, dim, 0)
    for k, i in enumerate(np.asarray(idx).reshape(-1)):
        o[i] = s[k]
    return out


@pytest.mark.ops("index_copy_")
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("idt", ["i64", "i32"])
def test_index_copy_(engine, dtype, rng, dim, idt):
    """In place, against torch's Tensor.index_copy_ (distinct indices) and
    the in-order numpy reference (a repeated index: the last copy wins);
    src non-contiguous too."""
    x = rand(rng, (4, 5, 3), dtype)
    shape = list(x.shape)
    shape[dim] = 2
    src = rand(rng, shape, dtype)
    npi = np.int64 if idt == "i64" else np.int32
    idx = rng.permutation(x.shape[dim])[:2].astype(npi)
    for s_np, noncontig in ((src, False), (src, True)):
        t = ojas.tensor(x, engine=engine)
        s = ojas.tensor(s_np, engine=engine)
        if noncontig:
            s = ojas._C.contiguous(ojas._C.transpose(s, 0, -1))
            s = ojas._C.transpose(s, 0, -1)
            assert not s.is_contiguous()
        assert ojas._C.index_copy_(t, dim, ojas.tensor(idx, engine=engine), s) is t
        want = torch.tensor(x).index_copy_(dim, torch.tensor(idx).long(), torch.tensor(s_np))
        assert_close(t.numpy(), want.numpy(), dtype, "index_copy_")
    # a repeated index and a rank-0 index
    rep = np.array([1, 2, 1], dtype=npi)
    shape[dim] = 3
    src3 = rand(rng, shape, dtype)
    t = ojas.tensor(x, engine=engine)
    ojas._C.index_copy_(t, dim, ojas.tensor(rep, engine=engine), ojas.tensor(src3, engine=engine))
    np.testing.assert_array_equal(t.numpy(), _index_copy_ref(x, dim % 3, rep, src3))
    shape[dim] = 1
    src1 = rand(rng, shape, dtype)
    t = ojas.tensor(x, engine=engine)
    ojas._C.index_copy_(t, dim, ojas.tensor(np.array(2, dtype=npi), engine=engine), ojas.tensor(src1, engine=engine))
    want = torch.tensor(x).index_copy_(dim, torch.tensor([2]), torch.tensor(src1))
    np.testing.assert_array_equal(t.numpy(), want.numpy())


@pytest.mark.ops("index_copy_")
def test_index_copy_errors(engine, rng):
    """An index out of range writes nothing; a leaf that requires grad is
    refused while grad mode is on."""
    x = rand(rng, (4, 3))
    t = ojas.tensor(x, engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.index_copy_(t, 0, ojas.tensor(np.array([0, 4], dtype=np.int64), engine=engine), ojas.tensor(rand(rng, (2, 3)), engine=engine))
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"
    np.testing.assert_array_equal(t.numpy(), x)
    g = ojas.tensor(x, engine=engine, requires_grad=True)
    with pytest.raises(ojas.Error) as e:
        ojas._C.index_copy_(g, 0, ojas.tensor(np.array([0], dtype=np.int64), engine=engine), ojas.tensor(rand(rng, (1, 3)), engine=engine))
    assert e.value.status == "OJ_ERR_STATE"


def test_index_select_out_of_range(engine, rng):
    x = ojas.tensor(rand(rng, (3, 4)), engine=engine)
    idx = ojas.tensor(np.array([0, -1], dtype=np.int64), engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.index_select(x, 0, idx)
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE" and "index -1" in e.value.message


# ---------------------------------------------------------------- masked_fill, tril, triu

@pytest.mark.ops("masked_fill")
@pytest.mark.parametrize("mshape", [(3, 4), (1, 4), (3, 1), ()], ids=str)
def test_masked_fill(engine, dtype, rng, mshape):
    x = rand(rng, (2, 3, 4), dtype)
    m = rng.random(mshape) < 0.5
    fncheck(engine, lambda t, mm: ojas._C.masked_fill(t, mm, -1e9), [x, m],
            ref=lambda t, mm: t.masked_fill(mm, -1e9))


@pytest.mark.ops("tril", "triu")
@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("diag", [0, 1, -1, 3, -5])
def test_tril_triu(engine, dtype, rng, name, diag):
    x = rand(rng, (2, 4, 5), dtype)
    check(engine, name, [x], diag, ref=getattr(torch, name), noncontig=True)


# ---------------------------------------------------------------- one_hot, repeat

def test_one_hot(engine, rng):
    idx = _idx(rng, (3, 4), 6)
    for n in (6, 9, -1):
        check(engine, "one_hot", [idx], n, ref=lambda t, k: F.one_hot(t, k), grad=False)
    with pytest.raises(ojas.Error) as e:
        ojas._C.one_hot(ojas.tensor(idx, engine=engine), int(idx.max()))
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"


@pytest.mark.ops("repeat")
@pytest.mark.parametrize("reps", [[2, 3], [1, 1], [2, 1, 3], [3, 2, 2, 1], [0, 2],
                                  [2, 2, 1, 2, 3]], ids=str)
def test_repeat(engine, dtype, rng, reps):
    x = rand(rng, (2, 3), dtype)
    check(engine, "repeat", [x], reps, ref=lambda t, r: t.repeat(*r), noncontig=True)


def test_repeat_rank8(engine, rng):
    x = rand(rng, (2, 1, 3, 2), "f64")
    reps = [2, 1, 2, 2, 3, 2, 1, 2]
    check(engine, "repeat", [x], reps, ref=lambda t, r: t.repeat(*r))
