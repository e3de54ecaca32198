"""Every op of include/ojas/ops.h through the package, against PyTorch 1.13:
values and gradients in float64 (ops.h's ops are also checked op by op in
tests/reference through the C API; here the binding is under test: names,
argument order, defaults, keyword handling)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ojas
import ojas.nn.functional as F
from refutil import check

R = np.random.default_rng(7)


def a(*shape, positive=False, lo=None):
    x = R.standard_normal(shape)
    if positive:
        x = np.abs(x) + 0.5
    if lo is not None:
        x = R.uniform(lo, 1 - lo, shape)
    return x


def idx(high, *shape):
    return R.integers(0, high, shape).astype(np.int64)


UNARY = ["neg", "abs", "exp", "sqrt", "rsqrt", "log", "log1p", "square", "sign", "reciprocal",
         "sin", "cos", "relu", "sigmoid", "tanh"]


@pytest.mark.parametrize("name", UNARY)
def test_unary(name):
    pos = name in ("sqrt", "rsqrt", "log", "log1p", "reciprocal")
    x = a(3, 4, positive=pos)
    check(getattr(ojas, name), getattr(torch, name), x)
    check(lambda t: getattr(t, name)(), lambda t: getattr(t, name)(), x)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
def test_binary_broadcast(name):
    x, y = a(3, 1, 4, positive=True), a(2, 1, positive=True)
    check(getattr(ojas, name), getattr(torch, name), x, y)


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_compare(name):
    x, y = a(3, 4).round(), a(4).round()
    check(getattr(ojas, name), getattr(torch, name), x, y, grad=False)


def test_logical():
    x, y = a(5) > 0, a(5) > 0
    for n in ("logical_and", "logical_or", "logical_xor"):
        check(getattr(ojas, n), getattr(torch, n), x, y, grad=False)
    check(ojas.logical_not, torch.logical_not, x, grad=False)
    v = np.array([1.0, np.nan, np.inf, -2.0])
    check(ojas.isnan, torch.isnan, v, grad=False)
    check(ojas.isfinite, torch.isfinite, v, grad=False)


ACTIVATIONS = [
    (lambda x: F.gelu(x), lambda x: TF.gelu(x)),
    (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    (F.silu, TF.silu), (F.mish, TF.mish), (F.relu, TF.relu),
    (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    (lambda x: F.elu(x, 0.7), lambda x: TF.elu(x, 0.7)),
    (lambda x: F.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0)),
    (lambda x: x.clamp(-0.5, 0.3), lambda x: x.clamp(-0.5, 0.3)),
    (lambda x: x.clamp(min=0.1), lambda x: x.clamp(min=0.1)),
    (lambda x: x ** 3, lambda x: x ** 3),
    (lambda x: 2.5 - x * 3 + 1 / (x * x + 1), lambda x: 2.5 - x * 3 + 1 / (x * x + 1)),
]


@pytest.mark.parametrize("k", range(len(ACTIVATIONS)))
def test_activation(k):
    check(*ACTIVATIONS[k], a(4, 5))


def test_where_masked_fill():
    c = a(3, 4) > 0
    check(ojas.where, torch.where, c, a(3, 4), a(4))
    check(lambda c, x: ojas.where(c, x, 0.5), lambda c, x: torch.where(c, x, 0.5), c, a(3, 4))
    check(lambda x, m: x.masked_fill(m, -1.0), lambda x, m: x.masked_fill(m, -1.0), a(3, 4), c)


REDUCTIONS = [
    (lambda x: x.sum(), lambda x: x.sum()),
    (lambda x: x.sum(1, keepdim=True), lambda x: x.sum(1, keepdim=True)),
    (lambda x: x.sum((0, 2)), lambda x: x.sum((0, 2))),
    (lambda x: x.mean(-1), lambda x: x.mean(-1)),
    (lambda x: x.prod(1), lambda x: x.prod(1)),
    (lambda x: x.amax(1), lambda x: x.amax(1)),
    (lambda x: x.amin((0, 1)), lambda x: x.amin((0, 1))),
    (lambda x: x.max(1), lambda x: tuple(x.max(1))),
    (lambda x: x.min(2, keepdim=True), lambda x: tuple(x.min(2, keepdim=True))),
    (lambda x: x.max(), lambda x: x.max()),
    (lambda x: x.argmax(1), lambda x: x.argmax(1)),
    (lambda x: x.argmin(), lambda x: x.argmin()),
    (lambda x: x.var(1), lambda x: x.var(1)),
    (lambda x: x.var(1, unbiased=False), lambda x: x.var(1, unbiased=False)),
    (lambda x: x.std((0, 1), keepdim=True), lambda x: x.std((0, 1), keepdim=True)),
    (lambda x: x.logsumexp(2), lambda x: x.logsumexp(2)),
    (lambda x: x.norm(), lambda x: x.norm()),
    (lambda x: x.norm(1, dim=1), lambda x: x.norm(1, dim=1)),
    (lambda x: x.norm(math.inf, dim=0), lambda x: x.norm(math.inf, dim=0)),
    (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
    (lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
    (lambda x: x.log_softmax(0), lambda x: x.log_softmax(0)),
    (lambda x: (x > 0).any(1), lambda x: (x > 0).any(1)),
    (lambda x: (x > -3).all(), lambda x: (x > -3).all()),
]


@pytest.mark.parametrize("k", range(len(REDUCTIONS)))
def test_reduction(k):
    check(*REDUCTIONS[k], a(2, 3, 4))


VIEWS = [
    (lambda x: x.reshape(6, 4), lambda x: x.reshape(6, 4)),
    (lambda x: x.view(-1, 2), lambda x: x.view(-1, 2)),
    (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
    (lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
    (lambda x: x.T, lambda x: x.permute(2, 1, 0)),
    (lambda x: x.narrow(1, 1, 2), lambda x: x.narrow(1, 1, 2)),
    (lambda x: x.select(2, -1), lambda x: x.select(2, -1)),
    (lambda x: x.unsqueeze(1).expand(2, 5, 3, 4), lambda x: x.unsqueeze(1).expand(2, 5, 3, 4)),
    (lambda x: x[:, None].squeeze(1), lambda x: x[:, None].squeeze(1)),
    (lambda x: x[:1].squeeze(), lambda x: x[:1].squeeze()),
    (lambda x: x.flatten(1), lambda x: x.flatten(1)),
    (lambda x: x[1, 1:, ::2], lambda x: x[1, 1:, ::2]),
    (lambda x: x[..., -1], lambda x: x[..., -1]),
    (lambda x: x[:, [2, 0, 2]], lambda x: x[:, [2, 0, 2]]),
    (lambda x: x.contiguous().clone(), lambda x: x.contiguous().clone()),
    (lambda x: x.split(2, 2), lambda x: x.split(2, 2)),
    (lambda x: x.split([1, 3], 2), lambda x: x.split([1, 3], 2)),
    (lambda x: x.chunk(2, 1), lambda x: x.chunk(2, 1)),
    (lambda x: x.unbind(0), lambda x: x.unbind(0)),
    (lambda x: x.flip(0, 2), lambda x: x.flip(0, 2)),
    (lambda x: x.repeat(1, 2, 1, 2), lambda x: x.repeat(1, 2, 1, 2)),
    (lambda x: x.tril(), lambda x: x.tril()),
    (lambda x: x.triu(1), lambda x: x.triu(1)),
    (lambda x: ojas.cat([x, x * 2], 1), lambda x: torch.cat([x, x * 2], 1)),
    (lambda x: ojas.stack([x, -x], -1), lambda x: torch.stack([x, -x], -1)),
    (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), lambda x: TF.pad(x, (1, 2, 0, 1), value=0.5)),
    (lambda x: x.float().double(), lambda x: x.float().double()),
]


@pytest.mark.parametrize("k", range(len(VIEWS)))
def test_view_and_shape(k):
    check(*VIEWS[k], a(2, 3, 4), rtol=1e-6 if k == len(VIEWS) - 1 else 1e-9)


def test_index_ops():
    x = a(4, 5)
    i = idx(5, 4, 3)
    check(lambda x, i: x.gather(1, i), lambda x, i: x.gather(1, i), x, i)
    check(lambda x, i, s: x.scatter_add(1, i, s), lambda x, i, s: x.scatter_add(1, i, s),
          x, i, a(4, 3))
    j = idx(4, 6)
    check(lambda x, j: x.index_select(0, j), lambda x, j: x.index_select(0, j), x, j)
    check(lambda x, j, s: x.index_add(0, j, s, alpha=2.0),
          lambda x, j, s: x.index_add(0, j, s, alpha=2.0), x, j, a(6, 5))
    check(lambda j: F.one_hot(j, 5), lambda j: TF.one_hot(j, 5), j, grad=False)


def test_index_copy_in_place():
    x, tx = ojas.zeros(4, 3), torch.zeros(4, 3)
    s = a(2, 3)
    x.index_copy_(0, ojas.tensor([3, 1]), ojas.tensor(s, dtype=ojas.float32))
    tx.index_copy_(0, torch.tensor([3, 1]), torch.tensor(s, dtype=torch.float32))
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_linalg():
    check(ojas.matmul, torch.matmul, a(2, 3, 4), a(4, 5))
    check(lambda x, y: x @ y, lambda x, y: x @ y, a(4), a(4))
    check(ojas.bmm, torch.bmm, a(2, 3, 4), a(2, 4, 2))
    check(ojas.addmm, torch.addmm, a(3, 5), a(3, 4), a(4, 5))
    check(lambda i, x, y: ojas.addmm(i, x, y, beta=0.5, alpha=2),
          lambda i, x, y: torch.addmm(i, x, y, beta=0.5, alpha=2), a(5), a(3, 4), a(4, 5))
    check(F.linear, TF.linear, a(2, 3, 4), a(5, 4), a(5))
    check(F.linear, TF.linear, a(3, 4), a(5, 4))
    check(F.gelu_linear, lambda x, w, b: TF.linear(TF.gelu(x, approximate="tanh"), w, b),
          a(3, 4), a(5, 4), a(5))
    check(F.swiglu_linear, lambda g, u, w: TF.linear(TF.silu(g) * u, w),
          a(3, 4), a(3, 4), a(2, 4))


def test_norms():
    x, w, b = a(2, 3, 6), a(6), a(6)
    check(lambda x, w, b: F.layer_norm(x, 6, w, b), lambda x, w, b: TF.layer_norm(x, (6,), w, b),
          x, w, b, rtol=1e-8)
    check(lambda x: F.layer_norm(x, (6,)), lambda x: TF.layer_norm(x, (6,)), x, rtol=1e-8)

    def t_rms(x, w, eps=1e-6):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w
    check(lambda x, w: F.rms_norm(x, (6,), w, eps=1e-6), t_rms, x, w, rtol=1e-8)
    r = a(2, 3, 6)
    check(lambda x, r, w, b: F.add_layer_norm(x, r, w, b),
          lambda x, r, w, b: (TF.layer_norm(x + r, (6,), w, b), x + r), x, r, w, b, rtol=1e-8)
    check(lambda x, r, w: F.add_rms_norm(x, r, w, eps=1e-6),
          lambda x, r, w: (t_rms(x + r, w), x + r), x, r, w, rtol=1e-8)


def test_losses():
    logits, tgt = a(5, 7), idx(7, 5)
    tgt[1] = -100
    check(F.cross_entropy, TF.cross_entropy, logits, tgt)
    check(lambda x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.1),
          lambda x, t: TF.cross_entropy(x, t, reduction="sum", label_smoothing=0.1), logits, tgt)
    check(lambda x, t: F.cross_entropy(x, t, reduction="none"),
          lambda x, t: TF.cross_entropy(x, t, reduction="none"), logits, tgt)
    check(lambda x, t: F.nll_loss(x.log_softmax(-1), t),
          lambda x, t: TF.nll_loss(x.log_softmax(-1), t), logits, tgt)
    check(F.linear_cross_entropy, lambda x, w, t: TF.cross_entropy(TF.linear(x, w), t),
          a(5, 4), a(7, 4), tgt)
    x, y = a(3, 4), a(3, 4)
    check(F.mse_loss, TF.mse_loss, x, y)
    check(lambda x, y: F.l1_loss(x, y, reduction="sum"),
          lambda x, y: TF.l1_loss(x, y, reduction="sum"), x, y)
    check(lambda x, y: F.smooth_l1_loss(x, y, beta=0.5),
          lambda x, y: TF.smooth_l1_loss(x, y, beta=0.5), x, y)
    p, t = a(3, 4, lo=0.05), a(3, 4, lo=0.0)
    check(F.binary_cross_entropy, TF.binary_cross_entropy, p, t)
    check(F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits, x, t)


def test_embedding():
    check(lambda i, w: F.embedding(i, w), TF.embedding, idx(6, 2, 3), a(6, 4))


def t_sdpa(q, k, v, is_causal=False):
    """torch 1.13 has no scaled_dot_product_attention: the textbook form."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        t, n = s.shape[-2], s.shape[-1]
        keep = torch.ones(t, n, dtype=torch.bool).tril(n - t)
        s = s.masked_fill(~keep, -math.inf)
    return s.softmax(-1) @ v


def test_attention_and_rotary():
    q, k, v = a(1, 2, 4, 8), a(1, 2, 5, 8), a(1, 2, 5, 8)
    check(F.scaled_dot_product_attention, t_sdpa, q, k, v, rtol=1e-8)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          lambda q, k, v: t_sdpa(q, k, v, is_causal=True), q, k, v, rtol=1e-8)

    def t_rope(x, off=0, theta=10000.0):
        d = x.shape[-1]
        pos = torch.arange(off, off + x.shape[-2], dtype=torch.float64)
        inv = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
        ang = pos[:, None] * inv[None, :]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()], -1)
    check(lambda x: F.rotary_embedding(x, 3), lambda x: t_rope(x, 3), q, rtol=1e-8)
    check(lambda x: F.rotary_embedding(x, ojas.tensor([3, 4, 5, 6])), lambda x: t_rope(x, 3), q,
          rtol=1e-8)

    def t_rms(x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    check(lambda x: F.rms_norm_rotary(x, None, 1e-6, 2), lambda x: t_rope(t_rms(x), 2), q,
          rtol=1e-8)


def test_dropout():
    x = ojas.ones(1000, dtype=ojas.float64)
    y = F.dropout(x, 0.25, training=True)
    kept = y.numpy() != 0
    assert 600 < kept.sum() < 900
    np.testing.assert_allclose(y.numpy()[kept], 1 / 0.75)
    assert F.dropout(x, 0.25, training=False)._shares_storage(x)


def test_conv_pool():
    x = a(2, 3, 7, 6)
    check(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
          lambda x, w, b: TF.conv2d(x, w, b, stride=2, padding=1), x, a(4, 3, 3, 3), a(4))
    check(lambda x, w: F.conv2d(x, w, groups=3, dilation=(2, 1)),
          lambda x, w: TF.conv2d(x, w, groups=3, dilation=(2, 1)), x, a(6, 1, 2, 2))
    check(lambda x, w: F.conv1d(x, w, padding=1), lambda x, w: TF.conv1d(x, w, padding=1),
          a(2, 3, 9), a(4, 3, 3))
    check(lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2), x)
    check(lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1), x)
    check(lambda x: F.avg_pool2d(x, 2, padding=1, count_include_pad=False),
          lambda x: TF.avg_pool2d(x, 2, padding=1, count_include_pad=False), x)
    check(lambda x: F.adaptive_avg_pool2d(x, (3, 4)), lambda x: TF.adaptive_avg_pool2d(x, (3, 4)), x)
    check(lambda x: F.interpolate(x, size=(9, 13)), lambda x: TF.interpolate(x, size=(9, 13)), x)
    check(lambda x: F.unfold(x, 2, padding=1), lambda x: TF.unfold(x, 2, padding=1), x)
    rm, rv = a(3), a(3, positive=True)
    check(lambda x, w, b: F.batch_norm(x, ojas.tensor(rm), ojas.tensor(rv), w, b),
          lambda x, w, b: TF.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b),
          x, a(3), a(3), rtol=1e-8)
    check(lambda x: F.batch_norm(x, None, None, training=True),
          lambda x: TF.batch_norm(x, None, None, training=True), x, rtol=1e-8)


def test_every_op_of_ops_h_is_bound():
    """Each oj_ function of include/ojas/ops.h that takes or makes tensors
    has a raw binding in ojas._C (a new op fails this until it is bound)."""
    import os
    import re
    here = os.path.dirname(os.path.abspath(__file__))
    src = open(os.path.join(here, "..", "..", "include", "ojas", "ops.h")).read()
    names = set(re.findall(r"\b(?:oj_tensor \*|oj_status |int )oj_(\w+)\(", src))
    missing = sorted(n for n in names if not hasattr(ojas._C, n))
    assert not missing, "ops.h functions without a binding in ojas._C: %s" % missing
