"""GPT parity: ojas's gpt2 and nanolab models (include/ojas/gpt.h) against
the PyTorch reference of gpt_reference.py, written from the models'
description.

Random weights are drawn in Python, written to safetensors (the format's
layout as test_safetensors.hf_save writes it), loaded by ojas with
oj_gpt_create + oj_gpt_load_safetensors, and then
- the logits of a batch agree with the reference (computed in float64 from
  the same float32 weights) to 1e-4 relative: |ojas - ref| <= 1e-4 |ref|
  + 1e-4 rms(ref) elementwise (the second term only matters for logits near
  zero);
- the same through the KV-cache path (prefill, then one token at a time);
- 10 AdamW steps on the same batches (torch.optim.AdamW vs oj_optim with
  oj_adamw_hparams, one group of every parameter, same hyperparameters) give
  the same losses to 1e-4 relative.

The oj_gpt_* and oj_optim_* prototypes are declared here by hand (their
struct arguments are beyond the generic `eng.call`)."""

import ctypes as C
import os

import numpy as np
import pytest
import torch

import gpt_reference as ref
import ojas_ctypes
from test_safetensors import hf_save, raw_bytes

RTOL = 1e-4
STEPS = 10


class GptConfig(C.Structure):
    """oj_gpt_config."""
    _fields_ = [("family", C.c_int), ("vocab_size", C.c_int64), ("block_size", C.c_int64),
                ("n_layer", C.c_int64), ("n_head", C.c_int64), ("n_kv_head", C.c_int64),
                ("n_embd", C.c_int64), ("mlp_hidden", C.c_int64), ("norm_eps", C.c_double),
                ("rope_theta", C.c_double), ("init_std", C.c_double),
                ("head_dim", C.c_int64), ("qkv_bias", C.c_bool), ("qk_norm", C.c_bool),
                ("untied_head", C.c_bool), ("rope_factor", C.c_double),
                ("rope_low_freq_factor", C.c_double), ("rope_high_freq_factor", C.c_double),
                ("rope_original_context", C.c_int64)]


class Named(C.Structure):
    """oj_named_tensors."""
    _fields_ = [("n", C.c_int64), ("names", C.POINTER(C.c_char_p)),
                ("tensors", C.POINTER(C.c_void_p))]


class Hparams(C.Structure):
    """oj_optim_hparams."""
    _fields_ = [("algo", C.c_int), ("lr", C.c_double), ("weight_decay", C.c_double),
                ("momentum", C.c_double), ("dampening", C.c_double), ("nesterov", C.c_bool),
                ("beta1", C.c_double), ("beta2", C.c_double), ("eps", C.c_double),
                ("ns_steps", C.c_int)]


def _lib():
    L = ojas_ctypes.lib()
    if getattr(L, "_gpt_declared", False):
        return L
    vp = C.c_void_p
    decl = {
        "oj_gpt_preset": (C.c_bool, [C.c_char_p, C.POINTER(GptConfig)]),
        "oj_gpt_create": (C.c_int, [vp, C.POINTER(GptConfig), C.c_uint64, C.POINTER(vp)]),
        "oj_gpt_free": (None, [vp]),
        "oj_gpt_state_dict": (Named, [vp]),
        "oj_gpt_load_safetensors": (C.c_int, [vp, C.c_char_p, C.POINTER(ojas_ctypes.OjError)]),
        "oj_gpt_forward": (vp, [vp, vp]),
        "oj_gpt_loss": (vp, [vp, vp, vp]),
        "oj_kv_cache_create": (C.c_int, [vp, C.c_int64, C.c_int64, C.POINTER(vp)]),
        "oj_kv_cache_free": (None, [vp]),
        "oj_gpt_forward_cached": (vp, [vp, vp, vp]),
        "oj_optim_create": (vp, [vp]),
        "oj_optim_free": (None, [vp]),
        "oj_optim_add_group": (C.c_int, [vp, C.POINTER(Hparams), C.POINTER(Named)]),
        "oj_optim_step": (C.c_int, [vp, vp]),
        "oj_optim_zero_grad": (None, [vp]),
        "oj_optim_message": (C.c_char_p, [vp]),
        "oj_adamw_hparams": (Hparams, [C.c_double, C.c_double]),
    }
    for name, (res, args) in decl.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    L._gpt_declared = True
    return L


# ---------------------------------------------------------------- configs

def _preset(name):
    c = GptConfig()
    assert _lib().oj_gpt_preset(name.encode(), C.byref(c)), name
    return ref.Config(c.family, c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_kv_head,
                      c.n_embd, c.mlp_hidden, c.norm_eps, c.rope_theta)


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

class OjGpt:
    """An oj_gpt created with cfg and loaded from a safetensors file."""

    def __init__(self, eng, cfg, path):
        L = _lib()
        self.eng, self.L = eng, L
        c = GptConfig(cfg.family, cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head,
                      cfg.n_kv_head, cfg.n_embd, cfg.mlp_hidden, cfg.norm_eps, cfg.rope_theta,
                      0.02)
        h = C.c_void_p()
        eng.check(L.oj_gpt_create(eng.handle, C.byref(c), 1234, C.byref(h)), "oj_gpt_create")
        self.h = h.value
        err = ojas_ctypes.OjError()
        st = L.oj_gpt_load_safetensors(self.h, path.encode(), C.byref(err))
        if st != 0:
            self.free()
            raise ojas_ctypes.OjasError(ojas_ctypes.status_name(st), err.message.decode())

    def state_dict(self):
        sd = self.L.oj_gpt_state_dict(self.h)
        return sd, {sd.names[i].decode(): self.eng._wrap_borrowed(sd.tensors[i])
                    for i in range(sd.n)}

    def _tensor(self, r):
        if not r:
            self.eng.check()
            raise ojas_ctypes.OjasError("OJ_ERR_INTERNAL", "NULL with no error recorded")
        return self.eng._wrap_new(r)

    def forward(self, idx):
        return self._tensor(self.L.oj_gpt_forward(self.h, idx.handle))

    def loss(self, idx, targets):
        return self._tensor(self.L.oj_gpt_loss(self.h, idx.handle, targets.handle))

    def free(self):
        if self.h:
            self.L.oj_gpt_free(self.h)
            self.h = None


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
def model(eng, request, tmp_path):
    """(cfg, torch params, OjGpt) for the config named by the test's param."""
    name = request.param
    cfg = CONFIGS[name]()
    gen = torch.Generator().manual_seed(_seed(name))
    params = ref.random_params(cfg, gen)
    path = os.path.join(str(tmp_path), "model.safetensors")
    _save(path, params)
    m = OjGpt(eng, cfg, path)
    yield cfg, params, m, gen
    m.free()


ALL = list(CONFIGS)


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("model", ALL, indirect=True)
def test_state_dict_names_and_load(eng, model):
    """ojas's state_dict is the reference's: same names, shapes and, after
    loading, the same values."""
    cfg, params, m, _ = model
    _, sd = m.state_dict()
    assert sorted(sd) == sorted(params)
    for n, t in sd.items():
        assert t.shape == tuple(params[n].shape), n
        np.testing.assert_array_equal(t.to_numpy(), params[n].numpy(), err_msg=n)


@pytest.mark.parametrize("model", ALL, indirect=True)
def test_logits(eng, model):
    cfg, params, m, gen = model
    B, T = 2, min(32, cfg.block_size)
    idx, _ = _batch(gen, cfg, B, T)
    want = ref.forward(cfg, {n: t.double() for n, t in params.items()}, idx).numpy()
    with eng.no_grad():
        got = m.forward(eng.tensor(idx.numpy())).to_numpy()
    assert got.shape == want.shape
    err, ok = _rel_err(got, want)
    print("%s logits: max |d| / max |ref| = %.3g"
          % ("nanolab" if cfg.family == ref.NANOLAB else "gpt2", err))
    assert ok, "logits differ: max |d| / max |ref| = %.3g" % err


@pytest.mark.parametrize("model", ALL, indirect=True)
def test_logits_full_context_and_cached(eng, model):
    """block_size tokens at once, then the KV-cache path: a prefill of 5
    tokens followed by one token at a time, against the reference's full
    forward (position t's logits depend on tokens <= t only)."""
    cfg, params, m, gen = model
    B, T = 2, cfg.block_size
    idx, _ = _batch(gen, cfg, B, T)
    want = ref.forward(cfg, {n: t.double() for n, t in params.items()}, idx).numpy()
    L = _lib()
    with eng.no_grad():
        got = m.forward(eng.tensor(idx.numpy())).to_numpy()
        err, ok = _rel_err(got, want)
        assert ok, "full context: max |d| / max |ref| = %.3g" % err
        cache = C.c_void_p()
        eng.check(L.oj_kv_cache_create(m.h, B, T, C.byref(cache)), "oj_kv_cache_create")
        try:
            pieces = []
            for a, b in [(0, 5)] + [(t, t + 1) for t in range(5, T)]:
                x = eng.tensor(idx[:, a:b].numpy())
                r = L.oj_gpt_forward_cached(m.h, cache, x.handle)
                pieces.append(m._tensor(r).to_numpy())
        finally:
            L.oj_kv_cache_free(cache)
    got = np.concatenate(pieces, axis=1)
    err, ok = _rel_err(got, want)
    assert ok, "cached decode: max |d| / max |ref| = %.3g" % err


@pytest.mark.parametrize("model", ALL, indirect=True)
def test_adamw_training_losses(eng, model):
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
    L = _lib()
    sd, tensors = m.state_dict()
    hp = L.oj_adamw_hparams(lr, wd)
    hp.beta1, hp.beta2, hp.eps = betas[0], betas[1], eps
    o = L.oj_optim_create(eng.handle)
    assert o, eng.last_error()
    got = []
    try:
        assert L.oj_optim_add_group(o, C.byref(hp), C.byref(sd)) == 0, eng.last_error()
        for x, y in batches:
            with eng.scope():
                loss = m.loss(eng.tensor(x.numpy()), eng.tensor(y.numpy()))
                loss.backward()
                got.append(float(loss.to_numpy()))
            st = L.oj_optim_step(o, None)
            assert st == 0, L.oj_optim_message(o).decode() or eng.last_error()
            L.oj_optim_zero_grad(o)
    finally:
        L.oj_optim_free(o)

    rel = [abs(g - w) / abs(w) for g, w in zip(got, want)]
    print("losses torch %s\n       ojas  %s\n max rel diff %.3g"
          % (np.round(want, 6), np.round(got, 6), max(rel)))
    assert want[-1] < want[0]  # the steps did something
    assert max(rel) <= RTOL, "losses differ: %s vs %s" % (got, want)
    C_ = cfg.n_embd
    for n, t in tensors.items():
        w, g = P[n].detach().numpy(), t.to_numpy()
        if n.endswith("attn.c_attn.bias"):
            # The key bias adds q.b_k to every score of a query, which the
            # softmax cancels: its gradient is 0 up to rounding, and Adam
            # turns that noise into steps of +-lr on either side.
            keep = np.r_[0:C_, 2 * C_:3 * C_]
            w, g = w[keep], g[keep]
        err = np.abs(g - w).max() / np.abs(w).max()
        assert err <= 1e-3, "%s after %d steps: max |d| / max |ref| = %.3g" % (n, STEPS, err)


@pytest.mark.parametrize("model", ["gpt2-tiny"], indirect=True)
def test_gpt2_hf_layout_loads(eng, model, tmp_path):
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
    m2 = OjGpt(eng, cfg, path)
    try:
        idx, _ = _batch(gen, cfg, 1, 16)
        with eng.no_grad():
            x = eng.tensor(idx.numpy())
            a = m.forward(x).to_numpy()
            b = m2.forward(x).to_numpy()
        np.testing.assert_array_equal(a, b)
    finally:
        m2.free()
