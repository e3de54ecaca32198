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
