"""ojas.nn modules and ojas.optim against torch.nn / torch.optim: the same
weights trained the same steps give the same parameters."""
import numpy as np
import pytest
import torch

import ojas
import ojas.nn as nn


def twin_models():
    m = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    t = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                            torch.nn.Linear(16, 3))
    with torch.no_grad():
        for (n, p), (tn, tp) in zip(m.named_parameters(), t.named_parameters()):
            assert n == tn and tuple(p.shape) == tuple(tp.shape)
            tp.copy_(torch.from_numpy(p.numpy()))
    return m, t


@pytest.mark.parametrize("opt", ["sgd", "adam", "adamw"])
def test_training_matches_torch(opt):
    m, t = twin_models()
    kw = {"sgd": dict(lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True),
          "adam": dict(lr=1e-2, weight_decay=1e-3), "adamw": dict(lr=1e-2, weight_decay=0.1)}[opt]
    cls = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}[opt]
    om = getattr(ojas.optim, cls)(m.parameters(), **kw)
    tm = getattr(torch.optim, cls)(t.parameters(), **kw)
    rng = np.random.default_rng(1)
    for step in range(5):
        x = rng.standard_normal((32, 6)).astype(np.float32)
        y = rng.integers(0, 3, 32)
        loss = ojas.nn.functional.cross_entropy(m(ojas.tensor(x)), ojas.tensor(y))
        om.zero_grad()
        loss.backward()
        om.step()
        assert om.last_step[0]
        tl = torch.nn.functional.cross_entropy(t(torch.tensor(x)), torch.tensor(y))
        tm.zero_grad()
        tl.backward()
        tm.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5)
    for p, tp in zip(m.parameters(), t.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-6)
    assert om.state_counts() == (5, 0)


def test_lr_change_takes_effect():
    p = nn.Parameter(ojas.ones(2))
    o = ojas.optim.SGD([p], lr=1.0)
    (p * ojas.tensor([1.0, 2.0])).sum().backward()
    o.param_groups[0]["lr"] = 0.5
    o.step()
    assert p.tolist() == [0.5, 0.0]


def test_non_finite_step_is_skipped_not_applied():
    p = nn.Parameter(ojas.ones(2))
    o = ojas.optim.AdamW([p])
    (p * float("nan")).sum().backward()
    o.step()
    applied, norm, msg = o.last_step
    assert not applied and msg and p.tolist() == [1.0, 1.0]
    assert o.state_counts() == (0, 1)


def test_module_registration_and_state_dict():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.5), nn.MLP(4, 8))
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "3.fc.weight", "3.fc.bias", "3.proj.weight",
                     "3.proj.bias"]
    assert all(p.requires_grad and isinstance(p, nn.Parameter) for p in m.parameters())
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    m2 = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.5), nn.MLP(4, 8))
    m2.load_state_dict(sd)
    x = ojas.randn(5, 3)
    m.eval(), m2.eval()
    np.testing.assert_array_equal(m(x).detach().numpy(), m2(x).detach().numpy())
    assert not m[2].training
    with pytest.raises(KeyError, match="missing"):
        m2.load_state_dict({"0.weight": sd["0.weight"]})
    bad = dict(sd)
    bad["0.bias"] = ojas.zeros(7)
    with pytest.raises(ojas.ShapeError, match="0.bias"):
        m2.load_state_dict(bad)
    m.train()
    assert m[2].training


def test_embedding_rmsnorm_modules():
    e, r = nn.Embedding(10, 4), nn.RMSNorm(4, eps=1e-6)
    x = e(ojas.tensor([[1, 2], [3, 9]]))
    assert x.shape == (2, 2, 4)
    y = r(x).detach().numpy()
    np.testing.assert_allclose((y ** 2).mean(-1), 1.0, rtol=1e-4)


def test_engine_close_waits_for_optimizer():
    e = ojas.Engine()
    p = nn.Parameter(ojas.ones(2, engine=e))
    o = ojas.optim.SGD([p], lr=0.1)
    with pytest.raises(ojas.StateError, match="still out"):
        e.close()
    del o
    del p
    e.close()


def test_clip_grad_norm_matches_torch():
    m, t = twin_models()
    x = np.random.default_rng(3).standard_normal((8, 6)).astype(np.float32)
    (m(ojas.tensor(x)) ** 2).sum().backward()
    (t(torch.tensor(x)) ** 2).sum().backward()
    n = ojas.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
    tn = torch.nn.utils.clip_grad_norm_(t.parameters(), 0.5)
    np.testing.assert_allclose(n.item(), tn.item(), rtol=1e-5)
    for p, tp in zip(m.parameters(), t.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-7)


# ------------------------------------------------ Conv2d, BatchNorm2d, MultiheadAttention

def _to_torch(m, t):
    """Copy the ojas module m's state into the torch module t (the names
    must be torch's, in torch's order)."""
    sd = m.state_dict()
    assert list(sd) == list(t.state_dict()), (list(sd), list(t.state_dict()))
    t.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy()) for k, v in sd.items()})


def _grads_match(m, t, rtol=1e-4, atol=1e-5):
    tp = dict(t.named_parameters())
    for n, p in m.named_parameters():
        assert p.grad is not None, "no gradient for " + n
        np.testing.assert_allclose(p.grad.numpy(), tp[n].grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=n)


@pytest.mark.parametrize("kw", [dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2),
                                dict(padding="same", bias=False), dict(padding="valid")],
                         ids=["strided-grouped", "same-nobias", "valid"])
def test_conv2d_module_matches_torch(rng, kw):
    m = nn.Conv2d(4, 6, (3, 3), **kw)
    t = torch.nn.Conv2d(4, 6, (3, 3), **kw)
    fan_in = 4 // kw.get("groups", 1) * 9
    assert float(abs(m.weight).amax().item()) <= 1 / np.sqrt(fan_in)  # torch's init bound
    _to_torch(m, t)
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    ox, tx = ojas.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, tout = m(ox), t(tx)
    assert tuple(out.shape) == tuple(tout.shape)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
    out.backward(ojas.tensor(g))
    tout.backward(torch.tensor(g))
    _grads_match(m, t)
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_conv2d_module_errors():
    with pytest.raises(ojas.InvalidArgumentError, match="divisible by groups 4"):
        nn.Conv2d(6, 8, 3, groups=4)
    with pytest.raises(ojas.UnsupportedError, match="padding_mode 'reflect'"):
        nn.Conv2d(2, 2, 3, padding_mode="reflect")
    m = nn.Conv2d(3, 2, 3)
    with pytest.raises(ojas.ShapeError):
        m(ojas.randn(1, 4, 5, 5))  # 4 channels, the module takes 3


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm2d_train_eval_matches_torch(rng, momentum, affine):
    m = nn.BatchNorm2d(3, momentum=momentum, affine=affine)
    t = torch.nn.BatchNorm2d(3, momentum=momentum, affine=affine)
    if affine:
        with ojas.no_grad():
            m.weight.copy_(ojas.tensor(rng.uniform(0.5, 1.5, 3).astype(np.float32)))
            m.bias.copy_(ojas.tensor(rng.standard_normal(3).astype(np.float32)))
    _to_torch(m, t)
    for step in range(3):
        x = (rng.standard_normal((4, 3, 5, 2)) * 2 + step).astype(np.float32)
        ox, tx = ojas.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, tout = m(ox), t(tx)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
        g = rng.standard_normal(x.shape).astype(np.float32)
        out.backward(ojas.tensor(g))
        tout.backward(torch.tensor(g))
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
        if affine:
            _grads_match(m, t)
            m.zero_grad(), t.zero_grad()
        for k, v in m.state_dict().items():
            np.testing.assert_allclose(v.detach().numpy(), t.state_dict()[k].numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=k)
    assert m.num_batches_tracked.item() == 3
    m.eval(), t.eval()
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    before = m.running_mean.numpy().copy()
    np.testing.assert_allclose(m(ojas.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(m.running_mean.numpy(), before)  # eval leaves them
    assert m.num_batches_tracked.item() == 3


def test_batchnorm2d_without_running_stats_and_errors(rng):
    m = nn.BatchNorm2d(2, track_running_stats=False)
    t = torch.nn.BatchNorm2d(2, track_running_stats=False)
    assert list(m.state_dict()) == list(t.state_dict()) == ["weight", "bias"]
    m.eval(), t.eval()  # still the batch's statistics
    x = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(m(ojas.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ojas.ShapeError, match="expected 4D input \\(got 3D input\\)"):
        nn.BatchNorm2d(2)(ojas.randn(3, 2, 4))


def _mha_pair(e, h, batch_first, bias=True):
    m = nn.MultiheadAttention(e, h, batch_first=batch_first, bias=bias)
    t = torch.nn.MultiheadAttention(e, h, batch_first=batch_first, bias=bias)
    bound = np.sqrt(6 / (4 * e))
    assert float(abs(m.in_proj_weight).amax().item()) <= bound  # xavier_uniform_
    with ojas.no_grad():  # non-zero biases so that they are checked
        for n, p in m.named_parameters():
            if n.endswith("bias"):
                p.copy_(ojas.randn(*p.shape) * 0.1)
    _to_torch(m, t)
    return m, t


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float", "padding"])
def test_multihead_attention_matches_torch(rng, batch_first, mask):
    e, h, n, L = 8, 2, 3, 5
    m, t = _mha_pair(e, h, batch_first)
    shape = (n, L, e) if batch_first else (L, n, e)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    ox = [ojas.tensor(x, requires_grad=True) for x in xs]
    tx = [torch.tensor(x, requires_grad=True) for x in xs]
    okw, tkw = {}, {}
    causal = np.triu(np.ones((L, L), bool), 1)  # True: not allowed
    if mask == "causal":  # torch 1.13 has no is_causal: its mask form
        okw["is_causal"] = True
        tkw["attn_mask"] = torch.tensor(causal)
    elif mask == "bool":
        am = rng.random((n * h, L, L)) < 0.3
        am[..., 0] = False  # every query sees a key
        okw["attn_mask"], tkw["attn_mask"] = ojas.tensor(am), torch.tensor(am)
    elif mask == "float":
        am = rng.standard_normal((L, L)).astype(np.float32)
        okw["attn_mask"], tkw["attn_mask"] = ojas.tensor(am), torch.tensor(am)
    elif mask == "padding":
        kp = np.zeros((n, L), bool)
        kp[0, -2:] = kp[2, 1] = True
        okw["key_padding_mask"], tkw["key_padding_mask"] = ojas.tensor(kp), torch.tensor(kp)
    out, w = m(*ox, **okw)
    tout, tw = t(*tx, **tkw)
    assert tuple(out.shape) == tuple(tout.shape) and tuple(w.shape) == tuple(tw.shape)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6)
    g = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
    out.backward(ojas.tensor(g))
    tout.backward(torch.tensor(g))
    _grads_match(m, t)
    for a, b in zip(ox, tx):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)
    # per-head weights, and need_weights=False gives the same output
    _, wh = m(*ox, average_attn_weights=False, **okw)
    _, twh = t(*tx, average_attn_weights=False, **tkw)
    np.testing.assert_allclose(wh.detach().numpy(), twh.detach().numpy(), rtol=1e-4, atol=1e-6)
    o2, none = m(*ox, need_weights=False, **okw)
    assert none is None
    np.testing.assert_allclose(o2.detach().numpy(), out.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_multihead_attention_unbatched_cross_and_errors(rng):
    m, t = _mha_pair(8, 4, False, bias=False)
    assert list(m.state_dict()) == ["in_proj_weight", "out_proj.weight"]
    q = rng.standard_normal((3, 8)).astype(np.float32)   # unbatched [L, E]
    kv = rng.standard_normal((6, 8)).astype(np.float32)  # S = 6 != L
    out, w = m(ojas.tensor(q), ojas.tensor(kv), ojas.tensor(kv))
    tout, tw = t(torch.tensor(q), torch.tensor(kv), torch.tensor(kv))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6)
    # is_causal with L != S: top-left aligned (query i sees keys j <= i), as torch 2.x
    out, _ = m(ojas.tensor(q), ojas.tensor(kv), ojas.tensor(kv), is_causal=True)
    tout, _ = t(torch.tensor(q), torch.tensor(kv), torch.tensor(kv),
                attn_mask=torch.ones(3, 6, dtype=torch.bool).triu(1))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ojas.InvalidArgumentError, match="divisible by num_heads 3"):
        nn.MultiheadAttention(8, 3)
    with pytest.raises(ojas.UnsupportedError, match="dropout > 0"):
        nn.MultiheadAttention(8, 2, dropout=0.1)
    with pytest.raises(ojas.ShapeError, match="key_padding_mask must be"):
        m(ojas.randn(3, 2, 8), ojas.randn(4, 2, 8), ojas.randn(4, 2, 8),
          key_padding_mask=ojas.zeros(2, 3, dtype=ojas.bool))


def test_norm_over_several_trailing_dims():
    # normalized_shape (3, 4) normalises over both dims (torch's rule), the
    # weight and bias of that shape; a shape not trailing the input is refused
    x = np.random.default_rng(0).random((2, 3, 4), dtype=np.float32) + 0.5
    w = np.random.default_rng(1).random((3, 4), dtype=np.float32)
    X = ojas.tensor(x, requires_grad=True)
    W = ojas.tensor(w, requires_grad=True)
    got = ojas.nn.functional.rms_norm(X, (3, 4), W, eps=1e-6)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=(-2, -1), keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(got.detach().numpy(), ref, rtol=1e-5, atol=1e-6)
    got.sum().backward()
    assert tuple(W.grad.shape) == (3, 4) and tuple(X.grad.shape) == (2, 3, 4)
    mu = x.mean(axis=(-2, -1), keepdims=True)
    ln = (x - mu) / np.sqrt(x.var(axis=(-2, -1), keepdims=True) + 1e-5)
    got = ojas.nn.functional.layer_norm(ojas.tensor(x), (3, 4))
    np.testing.assert_allclose(got.numpy(), ln, rtol=1e-4, atol=1e-5)
    for cls in (ojas.nn.LayerNorm, ojas.nn.RMSNorm):
        m = cls((3, 4))
        assert tuple(m.weight.shape) == (3, 4) and m.normalized_shape == (3, 4)
        assert tuple(m(ojas.tensor(x)).shape) == (2, 3, 4)
    for f in (ojas.nn.functional.rms_norm, ojas.nn.functional.layer_norm):
        for ns in ((7,), (2, 4), (5, 2, 3, 4)):
            with pytest.raises(ojas.ShapeError, match="normalized_shape"):
                f(ojas.tensor(x), ns)
