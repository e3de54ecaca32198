"""nn ops of include/ojas/ops.h vs PyTorch 1.13: embedding, layer_norm,
softmax, log_softmax, cross_entropy (ignore_index, label smoothing, every
reduction), nll_loss and the elementwise losses, forward and gradients,
f32 and f64, non-contiguous inputs. For what torch 1.13 lacks (rms_norm,
scaled_dot_product_attention with GQA and bottom-right causal masks,
rotary_embedding, rotary_embedding_at, rms_norm_rotary) the reference is written here with torch ops in float64,
its gradient coming from torch's autograd."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ojpkg import ojas
from pkgcheck import check, fncheck, rand

REDUCTIONS = ["mean", "sum", "none"]


def f64_ref(fn):
    """Wrap a reference so it computes in float64 and returns the input's
    dtype (the gradient flows back through the casts)."""
    def r(*args):
        dt = next(a.dtype for a in args if torch.is_tensor(a) and a.is_floating_point())
        conv = [a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
        return fn(*conv).to(dt)
    return r


# ---------------------------------------------------------------- embedding

@pytest.mark.parametrize("idt", ["i64", "i32"])
def test_embedding(engine, dtype, rng, idt):
    w = rand(rng, (10, 4), dtype)
    idx = rng.integers(0, 10, size=(3, 5)).astype(np.int64 if idt == "i64" else np.int32)
    idx[0, :3] = 7  # repeated rows accumulate
    check(engine, "embedding", [w, idx], ref=lambda w, i: F.embedding(i.long(), w), grad_inputs=[0])
    check(engine, "embedding", [w, idx], ref=lambda w, i: F.embedding(i.long(), w), grad_inputs=[0],
          noncontig=True)


def test_embedding_out_of_range(engine, rng):
    w = ojas.tensor(rand(rng, (10, 4), "f32"), engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.embedding(w, ojas.tensor(np.array([1, 10, 2], dtype=np.int64), engine=engine))
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE" and "index 10 at position 1" in e.value.message


# ---------------------------------------------------------------- norms

@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("noncontig", [False, True])
def test_layer_norm(engine, dtype, rng, affine, noncontig):
    x = rand(rng, (2, 3, 8), dtype)
    w, b = rand(rng, (8,), dtype), rand(rng, (8,), dtype)
    eps = 1e-5
    if affine == "none":
        check(engine, "layer_norm", [x], None, None, eps, noncontig=noncontig,
              ref=lambda x, w, b, e: F.layer_norm(x, (8,), None, None, e))
    elif affine == "weight":
        check(engine, "layer_norm", [x, w], None, eps, noncontig=noncontig,
              ref=lambda x, w, b, e: F.layer_norm(x, (8,), w, None, e))
    else:
        check(engine, "layer_norm", [x, w, b], eps, noncontig=noncontig,
              ref=lambda x, w, b, e: F.layer_norm(x, (8,), w, b, e))


def _rms(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("noncontig", [False, True])
def test_rms_norm(engine, dtype, rng, weight, noncontig):
    x = rand(rng, (2, 3, 8), dtype)
    eps = 1e-6
    if weight:
        check(engine, "rms_norm", [x, rand(rng, (8,), dtype)], eps, noncontig=noncontig,
              ref=f64_ref(lambda x, w, e: _rms(x, w, e)))
    else:
        check(engine, "rms_norm", [x], None, eps, noncontig=noncontig,
              ref=f64_ref(lambda x, w, e: _rms(x, None, e)))


@pytest.mark.ops("add_layer_norm", "add_rms_norm")
@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("noncontig", [False, True])
def test_add_norm(engine, dtype, rng, kind, noncontig):
    """The residual add fused with the norm: (norm(x + r), x + r), both
    outputs differentiated (fncheck's loss sums over the two)."""
    x, r = rand(rng, (2, 3, 8), dtype), rand(rng, (2, 3, 8), dtype)
    w, b = rand(rng, (8,), dtype), rand(rng, (8,), dtype)
    if kind == "layer":
        fncheck(engine, lambda x, r, w, b: ojas._C.add_layer_norm(x, r, w, b, 1e-5),
                [x, r, w, b], noncontig=noncontig,
                ref=lambda x, r, w, b: (F.layer_norm(x + r, (8,), w, b, 1e-5), x + r))
    else:
        fncheck(engine, lambda x, r, w: ojas._C.add_rms_norm(x, r, w, 1e-6),
                [x, r, w], noncontig=noncontig,
                ref=lambda x, r, w: (_rms((x + r).double(), w.double(), 1e-6).to(x.dtype), x + r))


# ---------------------------------------------------------------- softmax

@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(engine, dtype, rng, name, dim):
    fn = F.softmax if name == "softmax" else F.log_softmax
    x = rand(rng, (3, 4, 5), dtype, high=8.0)
    check(engine, name, [x], dim, ref=lambda t, d: fn(t, dim=d))
    check(engine, name, [x], dim, ref=lambda t, d: fn(t, dim=d), noncontig=True)


# ---------------------------------------------------------------- class losses

def _targets(rng, shape, V, ignore, idt="i64"):
    t = rng.integers(0, V, size=shape)
    t.reshape(-1)[::4] = ignore  # every fourth row ignored
    return t.astype(np.int64 if idt == "i64" else np.int32)


def _ce_ref(V, smoothing, red):
    def r(x, t, ignore, *rest):
        out = F.cross_entropy(x.reshape(-1, V), t.reshape(-1).long(), ignore_index=ignore,
                              label_smoothing=smoothing, reduction=red)
        return out.reshape(t.shape) if red == "none" else out
    return r


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(6,), (2, 3)], ids=str)
def test_cross_entropy(engine, dtype, rng, red, smoothing, shape):
    V = 7
    x = rand(rng, shape + (V,), dtype, high=4.0)
    t = _targets(rng, shape, V, -100, "i64" if len(shape) == 1 else "i32")
    check(engine, "cross_entropy", [x, t], -100, smoothing, red, ref=_ce_ref(V, smoothing, red))
    if len(shape) == 2:
        check(engine, "cross_entropy", [x, t], -100, smoothing, red, noncontig=True,
              ref=lambda x, t, *a: _ce_ref(V, smoothing, red)(x, t, *a))


@pytest.mark.parametrize("red", ["mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(6,), (2, 3)], ids=str)
def test_linear_cross_entropy(engine, dtype, rng, red, smoothing, shape):
    # the fused op against torch's cross_entropy(linear(x, w)); loss in f32 (f64)
    V, C = 7, 5
    x = rand(rng, shape + (C,), dtype)
    w = rand(rng, (V, C), dtype)
    t = _targets(rng, shape, V, -100, "i64" if len(shape) == 1 else "i32")
    check(engine, "linear_cross_entropy", [x, w, t], -100, smoothing, red,
          ref=lambda x, w, t, ig, sm, r: F.cross_entropy(
              F.linear(x, w).reshape(-1, V), t.reshape(-1).long(), ignore_index=ig,
              label_smoothing=sm, reduction=r))


def test_cross_entropy_ignore_index_inside_range(engine, dtype, rng):
    # ignore_index may name a real class: those rows drop out (torch).
    x = rand(rng, (8, 5), dtype)
    t = rng.integers(0, 5, size=(8,)).astype(np.int64)
    t[:3] = 2
    check(engine, "cross_entropy", [x, t], 2, 0.0, "mean", ref=_ce_ref(5, 0.0, "mean"))


def test_cross_entropy_bad_target(engine, rng):
    x = ojas.tensor(rand(rng, (3, 4), "f32"), engine=engine)
    with pytest.raises(ojas.Error) as e:
        ojas._C.cross_entropy(x, ojas.tensor(np.array([0, 4, 1], dtype=np.int64), engine=engine),
                              -100, 0.0, 0)  # OJ_REDUCTION_MEAN
    assert e.value.status == "OJ_ERR_OUT_OF_RANGE"
    assert "cross_entropy" in e.value.message and "target 4 at row 1" in e.value.message


@pytest.mark.parametrize("red", REDUCTIONS)
def test_nll_loss(engine, dtype, rng, red):
    V = 6
    lp = torch.log_softmax(torch.tensor(rand(rng, (2, 4, V), dtype)), -1).numpy()
    t = _targets(rng, (2, 4), V, -1)

    def ref(x, t, ignore, red):
        out = F.nll_loss(x.reshape(-1, V), t.reshape(-1), ignore_index=ignore, reduction=red)
        return out.reshape(t.shape) if red == "none" else out
    check(engine, "nll_loss", [lp, t], -1, red, ref=ref)


# ---------------------------------------------------------------- attention

def _attn_ref(q, k, v, mask, causal, scale):
    H, Hkv, T, S = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    if causal:
        keep = torch.ones(T, S, dtype=torch.bool).tril(S - T)  # j <= i + S - T
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.ops("scaled_dot_product_attention")
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)], ids=lambda h: "H%d-Hkv%d" % h)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T,S", [(5, 5), (3, 7), (33, 70)], ids=str)
def test_attention(engine, dtype, rng, heads, causal, T, S):
    H, Hkv = heads
    B, D, Dv = 2, 8, 5
    q, k, v = (rand(rng, (B, H, T, D), dtype), rand(rng, (B, Hkv, S, D), dtype),
               rand(rng, (B, Hkv, S, Dv), dtype))
    check(engine, "scaled_dot_product_attention", [q, k, v], None, causal, math.nan,
          ref=f64_ref(lambda q, k, v, m, c, s: _attn_ref(q, k, v, None, c, 1 / math.sqrt(D))))


@pytest.mark.ops("scaled_dot_product_attention")
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_mask(engine, dtype, rng, kind):
    B, H, Hkv, T, S, D = 2, 4, 2, 6, 9, 4
    q, k, v = (rand(rng, (B, H, T, D), dtype), rand(rng, (B, Hkv, S, D), dtype),
               rand(rng, (B, Hkv, S, D), dtype))
    if kind == "bool":
        m = rng.random((B, 1, T, S)) < 0.7
        m[..., 0] = True  # no fully masked row (torch would give NaN there)
    else:
        m = rand(rng, (T, S), dtype)
    check(engine, "scaled_dot_product_attention", [q, k, v, m], False, 0.3, grad_inputs=[0, 1, 2],
          ref=f64_ref(lambda q, k, v, m, c, s: _attn_ref(q, k, v, m, c, s)))


@pytest.mark.ops("scaled_dot_product_attention")
def test_attention_noncontig(engine, dtype, rng):
    # inputs passed as transposed views: q/k/v stored [B, H, D, T]
    B, H, T, D = 1, 2, 6, 6
    q, k, v = (rand(rng, (B, H, T, D), dtype) for _ in range(3))
    check(engine, "scaled_dot_product_attention", [q, k, v], None, True, math.nan, noncontig=True,
          ref=f64_ref(lambda q, k, v, m, c, s: _attn_ref(q, k, v, None, c, 1 / math.sqrt(D))))


# ---------------------------------------------------------------- rotary

def _rope_ref(x, off, theta):
    T, D = x.shape[-2], x.shape[-1]
    i = torch.arange(D // 2, dtype=torch.float64)
    t = torch.arange(T, dtype=torch.float64) + off
    a = t[:, None] * theta ** (-2.0 * i / D)
    c, s = torch.cos(a), torch.sin(a)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


@pytest.mark.parametrize("off", [0, 37])
def test_rotary_embedding(engine, dtype, rng, off):
    x = rand(rng, (2, 3, 5, 8), dtype)
    check(engine, "rotary_embedding", [x], off, 10000.0, ref=f64_ref(_rope_ref))
    check(engine, "rotary_embedding", [rand(rng, (2, 3, 8, 8), dtype)], off, 500.0, noncontig=True,
          ref=f64_ref(_rope_ref))


def _rope_at_ref(x, pos, theta):
    """_rope_ref with row t rotated by pos[t] (position_ids)."""
    D = x.shape[-1]
    i = torch.arange(D // 2, dtype=torch.float64)
    a = pos.to(torch.float64)[:, None] * theta ** (-2.0 * i / D)
    c, s = torch.cos(a), torch.sin(a)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


@pytest.mark.ops("rotary_embedding_at")
@pytest.mark.parametrize("idt", ["i64", "i32"])
def test_rotary_embedding_at(engine, dtype, rng, idt):
    """Per-row positions (unordered, repeated, large) against float64; the
    gradient flows to x only."""
    pos = np.array([5, 0, 1029, 5, 3], dtype=np.int64 if idt == "i64" else np.int32)
    x = rand(rng, (2, 3, 5, 8), dtype)
    check(engine, "rotary_embedding_at", [x, pos], 10000.0, ref=f64_ref(_rope_at_ref))
    check(engine, "rotary_embedding_at", [rand(rng, (2, 5, 8), dtype), pos], 500.0, noncontig=True,
          ref=f64_ref(_rope_at_ref))


@pytest.mark.ops("rotary_embedding_at", "rotary_embedding")
def test_rotary_embedding_at_matches_offset(engine, dtype, rng):
    """Positions off, off+1, ... give oj_rotary_embedding(x, off)'s bits."""
    x = ojas.tensor(rand(rng, (2, 3, 6, 8), dtype), engine=engine)
    pos = ojas.tensor(np.arange(37, 43, dtype=np.int64), engine=engine)
    a = ojas._C.rotary_embedding_at(x, pos, 10000.0).numpy()
    b = ojas._C.rotary_embedding(x, 37, 10000.0).numpy()
    np.testing.assert_array_equal(a, b)


def _rms_rope_ref(x, w, eps, off, theta):
    return _rope_ref(_rms(x, w, eps), off, theta)


@pytest.mark.ops("rms_norm_rotary")
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "heads"])
def test_rms_norm_rotary(engine, dtype, rng, weight, layout):
    """RMS norm then rotary in one op (QK-norm) against the two float64
    references composed, forward and the gradients of x and weight: x
    contiguous, a transposed view (T and D strided), or a head view
    [B, H, T, D] of a [B, T, H, D] projection read in place."""
    eps, off, theta = 1e-6, 37, 10000.0
    w = rand(rng, (8,), dtype) if weight else None
    ins = [w] if weight else []
    if layout == "heads":
        x = rand(rng, (2, 5, 3, 8), dtype)  # [B, T, H, D]

        def oj(x, *w):
            xh = ojas._C.permute(x, [0, 2, 1, 3])
            return ojas._C.rms_norm_rotary(xh, w[0] if w else None, eps, off, theta)

        fncheck(engine, oj, [x] + ins,
                ref=f64_ref(lambda x, *w: _rms_rope_ref(x.permute(0, 2, 1, 3), w[0] if w else None,
                                                        eps, off, theta)))
    elif weight:
        check(engine, "rms_norm_rotary", [rand(rng, (2, 3, 5, 8), dtype), w], eps, off, theta,
              noncontig=layout == "transposed", ref=f64_ref(_rms_rope_ref))
    else:
        check(engine, "rms_norm_rotary", [rand(rng, (2, 3, 5, 8), dtype)], None, eps, off, theta,
              noncontig=layout == "transposed", ref=f64_ref(_rms_rope_ref))


# ---------------------------------------------------------------- dropout

def test_dropout_identity_and_rate(engine, dtype, rng):
    x = rand(rng, (4, 5), dtype)
    check(engine, "dropout", [x], 0.5, False, ref=lambda t, p, tr: F.dropout(t, p, tr))
    check(engine, "dropout", [x], 0.0, True, ref=lambda t, p, tr: F.dropout(t, p, tr))
    y = ojas._C.dropout(ojas.tensor(np.ones((100, 100), dtype=np.float32), engine=engine), 0.25,
                        True)
    a = y.numpy()
    assert set(np.unique(a)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((a == 0).mean() - 0.25) < 0.02


# ---------------------------------------------------------------- elementwise losses

@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss",
                                  "binary_cross_entropy", "binary_cross_entropy_with_logits"])
def test_losses(engine, dtype, rng, red, name):
    shape = (3, 5)
    if name == "binary_cross_entropy":
        a = rng.uniform(0.02, 0.98, size=shape).astype(np.float32 if dtype == "f32" else np.float64)
        b = rng.uniform(0, 1, size=shape).astype(a.dtype)
    elif name == "binary_cross_entropy_with_logits":
        a = rand(rng, shape, dtype, high=6.0)
        b = rng.uniform(0, 1, size=shape).astype(a.dtype)
    else:
        a, b = rand(rng, shape, dtype), rand(rng, shape, dtype)
    if name == "smooth_l1_loss":
        check(engine, name, [a, b], 0.7, red,
              ref=lambda x, y, beta, r: F.smooth_l1_loss(x, y, reduction=r, beta=beta))
    else:
        fn = getattr(F, name)
        check(engine, name, [a, b], red, ref=lambda x, y, r: fn(x, y, reduction=r))
        check(engine, name, [a, b], red, ref=lambda x, y, r: fn(x, y, reduction=r), noncontig=True)


def test_mse_loss_broadcast(engine, dtype, rng):
    check(engine, "mse_loss", [rand(rng, (3, 4), dtype), rand(rng, (4,), dtype)], "mean",
          ref=lambda x, y, r: ((x - y) ** 2).mean())
