"""GPT parity: ojas's gpt2 and nanolab models (include/ojas/gpt.h) against
the PyTorch reference of gpt_reference.py, written from the models'
description.

Random weights are drawn in Python, written to safetensors (the format's
layout as test_safetensors.hf_save writes it), loaded by ojas (the Python package: ojas.models.GPT.create +
load_safetensors, over oj_gpt_create + oj_gpt_load_safetensors), and then
- the logits of a batch agree with the reference (computed in float64 from
  the same float32 weights) to 1e-4 relative: |ojas - ref| <= 1e-4 |ref|
  + 1e-4 rms(ref) elementwise (the second term only matters for logits near
  zero);
- the same through the KV-cache path (prefill, then one token at a time);
- 10 AdamW steps on the same batches (torch.optim.AdamW vs ojas.optim.AdamW,
  one group of every parameter, same hyperparameters) give the same losses
  to 1e-4 relative."""

import os

import numpy as np
import pytest
import torch

import gpt_reference as ref
from ojpkg import ojas
from test_safetensors import hf_save, raw_bytes

RTOL = 1e-4
STEPS = 10


# ---------------------------------------------------------------- configs

FAMILY = {"gpt2": ref.GPT2, "nanolab": ref.NANOLAB}


def _preset(name):
    c = ojas.models.GPT.config(name)
    return ref.Config(FAMILY[c["family"]], c["vocab_size"], c["block_size"], c["n_layer"],
                      c["n_head"], c["n_kv_head"], c["n_embd"], c["mlp_hidden"], c["norm_eps"],
                      c["rope_theta"])


CONFIGS = {
    # 2 layers, C 64, 4 heads of 16 over 2 KV heads, SwiGLU 128.
    "nanolab-gqa": lambda: ref.Config(ref.NANOLAB, 512, 64, 2, 4, 2, 64, 128, 1e-6, 10000.0),
    # 3 layers (two mixing in layer 0's V), one KV head, odd widths, other theta.
    "nanolab-mqa": lambda: ref.Config(ref.NANOLAB, 300, 48, 3, 4, 1, 48, 96, 1e-6, 500.0),
    "nanolab-tiny": lambda: _preset("nanolab-tiny"),
    "gpt2-tiny": lambda: _preset("gpt2-tiny"),
}


def _seed(name):
    return sum(map(ord, name)) * 7919


# ---------------------------------------------------------------- ojas side

def _ojas_model(engine, cfg, path):
    """An ojas GPT created with cfg and loaded from a safetensors file."""
    family = {v: k for k, v in FAMILY.items()}[cfg.family]
    m = ojas.models.GPT.create(dict(family=family, vocab_size=cfg.vocab_size, block_size=cfg.block_size,
                        n_layer=cfg.n_layer, n_head=cfg.n_head, n_kv_head=cfg.n_kv_head,
                        n_embd=cfg.n_embd, mlp_hidden=cfg.mlp_hidden, norm_eps=cfg.norm_eps,
                        rope_theta=cfg.rope_theta, init_std=0.02), seed=1234, engine=engine)
    m.load_safetensors(path)
    return m


def _save(path, params):
    hf_save(path, {n: ("F32", tuple(t.shape), raw_bytes(t)) for n, t in params.items()},
            metadata={"format": "pt"})


def _rel_err(got, want):
    """max |got - want| / max |want| (normwise) and the elementwise check."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    d = np.abs(got - want)
    scale = np.sqrt(np.mean(want ** 2))
    ok = bool(np.all(d <= RTOL * np.abs(want) + RTOL * scale))
    return float(d.max() / np.abs(want).max()), ok


def _batch(gen, cfg, B, T):
    idx = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen)
    return idx[:, :T].contiguous(), idx[:, 1:].contiguous()


@pytest.fixture
def model(engine, request, tmp_path):
    """(cfg, torch params, ojas GPT) for the config named by the test's param."""
    name = request.param
    cfg = CONFIGS[name]()
    gen = torch.Generator().manual_seed(_seed(name))
    params = ref.random_params(cfg, gen)
    path = os.path.join(str(tmp_path), "model.safetensors")
    _save(path, params)
    m = _ojas_model(engine, cfg, path)
    yield cfg, params, m, gen
    del m


ALL = list(CONFIGS)


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("model", ALL, indirect=True)
def test_state_dict_names_and_load(model):
    """ojas's state_dict is the reference's: same names, shapes and, after
    loading, the same values."""
    cfg, params, m, _ = model
    sd = m.state_dict()
    assert sorted(sd) == sorted(params)
    for n, t in sd.items():
        assert t.shape == tuple(params[n].shape), n
        np.testing.assert_array_equal(t.detach().numpy(), params[n].numpy(), err_msg=n)


@pytest.mark.parametrize("model", ALL, indirect=True)
def test_logits(engine, model):
    cfg, params, m, gen = model
    B, T = 2, min(32, cfg.block_size)
    idx, _ = _batch(gen, cfg, B, T)
    want = ref.forward(cfg, {n: t.double() for n, t in params.items()}, idx).numpy()
    with ojas.no_grad():
        got = m(ojas.tensor(idx.numpy(), engine=engine)).numpy()
    assert got.shape == want.shape
    err, ok = _rel_err(got, want)
    print("%s logits: max |d| / max |ref| = %.3g"
          % ("nanolab" if cfg.family == ref.NANOLAB else "gpt2", err))
    assert ok, "logits differ: max |d| / max |ref| = %.3g" % err


@pytest.mark.parametrize("model", ALL, indirect=True)
def test_logits_full_context_and_cached(engine, model):
    """block_size tokens at once, then the KV-cache path: a prefill of 5
    tokens followed by one token at a time, against the reference's full
    forward (position t's logits depend on tokens <= t only)."""
    cfg, params, m, gen = model
    B, T = 2, cfg.block_size
    idx, _ = _batch(gen, cfg, B, T)
    want = ref.forward(cfg, {n: t.double() for n, t in params.items()}, idx).numpy()
    with ojas.no_grad():
        got = m(ojas.tensor(idx.numpy(), engine=engine)).numpy()
        err, ok = _rel_err(got, want)
        assert ok, "full context: max |d| / max |ref| = %.3g" % err
        cache = m.kv_cache(B, T)
        pieces = []
        for a, b in [(0, 5)] + [(t, t + 1) for t in range(5, T)]:
            x = ojas.tensor(idx[:, a:b].numpy(), engine=engine)
            pieces.append(cache.forward(x).numpy())
        del cache
    got = np.concatenate(pieces, axis=1)
    err, ok = _rel_err(got, want)
    assert ok, "cached decode: max |d| / max |ref| = %.3g" % err


@pytest.mark.parametrize("model", ALL, indirect=True)
def test_adamw_training_losses(engine, model):
    """10 AdamW steps on the same batches: same losses, then about the same
    parameters."""
    cfg, params, m, gen = model
    lr, wd, betas, eps = 3e-3, 0.1, (0.9, 0.95), 1e-8
    B, T = 2, min(32, cfg.block_size)
    batches = [_batch(gen, cfg, B, T) for _ in range(STEPS)]

    # torch, in float64 from the same float32 weights
    P = {n: t.double().requires_grad_(True) for n, t in params.items()}
    opt = torch.optim.AdamW(list(P.values()), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    want = []
    for x, y in batches:
        opt.zero_grad()
        loss = ref.loss(cfg, P, x, y)
        loss.backward()
        opt.step()
        want.append(loss.item())

    # ojas, float32
    tensors = m.state_dict()
    o = ojas.optim.AdamW(m.named_parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    got = []
    for x, y in batches:
        loss = m.loss(ojas.tensor(x.numpy(), engine=engine), ojas.tensor(y.numpy(), engine=engine))
        loss.backward()
        got.append(loss.item())
        del loss
        o.step()
        assert o.last_step[0], o.last_step
        o.zero_grad()
    del o

    rel = [abs(g - w) / abs(w) for g, w in zip(got, want)]
    print("losses torch %s\n       ojas  %s\n max rel diff %.3g"
          % (np.round(want, 6), np.round(got, 6), max(rel)))
    assert want[-1] < want[0]  # the steps did something
    assert max(rel) <= RTOL, "losses differ: %s vs %s" % (got, want)
    C_ = cfg.n_embd
    for n, t in tensors.items():
        w, g = P[n].detach().numpy(), t.detach().numpy()
        if n.endswith("attn.c_attn.bias"):
            # The key bias adds q.b_k to every score of a query, which the
            # softmax cancels: its gradient is 0 up to rounding, and Adam
            # turns that noise into steps of +-lr on either side.
            keep = np.r_[0:C_, 2 * C_:3 * C_]
            w, g = w[keep], g[keep]
        err = np.abs(g - w).max() / np.abs(w).max()
        assert err <= 1e-3, "%s after %d steps: max |d| / max |ref| = %.3g" % (n, STEPS, err)


@pytest.mark.parametrize("model", ["gpt2-tiny"], indirect=True)
def test_gpt2_hf_layout_loads(engine, model, tmp_path):
    """A file as transformers writes GPT2Model's state_dict: no
    "transformer." prefix and the attention-mask buffers h.N.attn.bias /
    attn.masked_bias; loads to the same logits."""
    cfg, params, m, gen = model
    T = cfg.block_size
    hf = {n[len("transformer."):]: ("F32", tuple(t.shape), raw_bytes(t)) for n, t in params.items()}
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
    for l in range(cfg.n_layer):
        hf["h.%d.attn.bias" % l] = ("BOOL", (1, 1, T, T), raw_bytes(mask))
        hf["h.%d.attn.masked_bias" % l] = ("F32", (), raw_bytes(torch.tensor(-1e4)))
    path = os.path.join(str(tmp_path), "hf.safetensors")
    hf_save(path, hf, metadata={"format": "pt"})
    m2 = _ojas_model(engine, cfg, path)
    idx, _ = _batch(gen, cfg, 1, 16)
    with ojas.no_grad():
        x = ojas.tensor(idx.numpy(), engine=engine)
        a = m(x).numpy()
        b = m2(x).numpy()
    np.testing.assert_array_equal(a, b)
