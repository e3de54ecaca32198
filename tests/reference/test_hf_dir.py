"""Hugging Face model directories (oj_gpt_load_dir, include/ojas/gpt.h)
against plain-PyTorch references: GPT2LMHeadModel of another shape than
the presets (gpt_reference.py) and LlamaForCausalLM / MistralForCausalLM /
Qwen2ForCausalLM / Qwen3ForCausalLM (hf_reference.py).

Random float32 weights are written with transformers' names and a
config.json as transformers' save_pretrained lays them out (single file or
sharded with model.safetensors.index.json); ojas loads the directory and
- its logits agree with the reference's (float64 from the same weights) to
  1e-4 relative (test_gpt_parity's criterion), also through the KV cache;
- 64 greedy tokens from the static decoder equal the reference's;
and a bad directory (missing shard, shape mismatch, unknown architecture,
unsupported fields) fails with one line naming the file and the field.
A directory that ojas exports (oj_gpt_save_hf_dir) is read back by the
reference itself (its config.json and model.safetensors, parsed here) to
logits equal to the source's, and by ojas to the same logits bit for bit."""

import json
import os
import types

import numpy as np
import pytest
import torch

import conftest
import gpt_reference as gref
import hf_reference as ref
from ojpkg import ojas
from test_gpt_parity import _rel_err
from test_safetensors import hf_save, py_load, raw_bytes

NEW_TOKENS = 64


# ---------------------------------------------------------------- models

def _llama_cfg(arch, **kw):
    c = {"architectures": [arch], "vocab_size": 97, "hidden_size": 48, "intermediate_size": 80,
         "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
         "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "hidden_act": "silu", "tie_word_embeddings": False, "rope_scaling": None,
         "attention_bias": False, "torch_dtype": "float32"}
    c.update(kw)
    return c


CONFIGS = {
    # 3 layers, 4 heads of 12, MLP 160 (n_inner, not 4C), 100 positions.
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 101,
             "n_positions": 100, "n_embd": 48, "n_layer": 3, "n_head": 4, "n_inner": 160,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
             "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1},
    "llama": _llama_cfg("LlamaForCausalLM", model_type="llama", mlp_bias=False),
    "llama-tied-mha": _llama_cfg("LlamaForCausalLM", num_key_value_heads=6,
                                 tie_word_embeddings=True, rope_theta=500000.0),
    # Llama 3.1-style rope scaling; with D 8 and an original context of 64
    # the four frequencies fall in each of its three bands.
    "llama3-rope": _llama_cfg("LlamaForCausalLM", tie_word_embeddings=True, rope_theta=10000.0,
                              rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64}),
    "mistral": _llama_cfg("MistralForCausalLM", num_key_value_heads=3, sliding_window=4096),
    "qwen2": _llama_cfg("Qwen2ForCausalLM", tie_word_embeddings=True, rope_theta=1000000.0,
                        use_sliding_window=False, sliding_window=32768),
    # head_dim 16 != hidden_size / heads (8): q_proj is [96, 48].
    "qwen3": _llama_cfg("Qwen3ForCausalLM", head_dim=16, num_attention_heads=6,
                        num_key_value_heads=3, rope_theta=1000000.0),
}


def _seed(name):
    return sum(map(ord, name)) * 7919 + 11


def _gpt2_ref_cfg(c):
    return gref.Config(gref.GPT2, c["vocab_size"], c["n_positions"], c["n_layer"], c["n_head"],
                       c["n_head"], c["n_embd"], c["n_inner"], c["layer_norm_epsilon"])


def build(name, gen):
    """(config dict, params as transformers names them, reference forward).
    A tied embedding is scaled down (N(0, 0.05)) so that greedy decoding
    does not just repeat the last token (its own embedding's logit)."""
    cfg = CONFIGS[name]
    if name.startswith("gpt2"):
        rc = _gpt2_ref_cfg(cfg)
        params = gref.random_params(rc, gen)
        params["transformer.wte.weight"] *= 0.1
        return cfg, params, lambda P, idx: gref.forward(rc, P, idx)
    params = ref.random_params(cfg, gen)
    if cfg.get("tie_word_embeddings"):
        params["model.embed_tokens.weight"] *= 0.1
    return cfg, params, lambda P, idx: ref.forward(cfg, P, idx)


def write_dir(d, cfg, params, shards=1, dtype="F32", extra=None):
    """config.json and model.safetensors (or `shards` files and the index)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    def entry(t):
        if dtype == "BF16":
            return ("BF16", tuple(t.shape), raw_bytes(t.bfloat16()))
        return ("F32", tuple(t.shape), raw_bytes(t))

    tensors = {n: entry(t) for n, t in params.items()}
    tensors.update(extra or {})
    names = list(tensors)
    if shards == 1:
        hf_save(os.path.join(d, "model.safetensors"), tensors, metadata={"format": "pt"})
        return
    wm = {}
    for s in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = names[s::shards]
        hf_save(os.path.join(d, fn), {n: tensors[n] for n in part}, metadata={"format": "pt"})
        wm.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=2)


class OjModel:
    """A model directory loaded by ojas.models.GPT.from_pretrained, with the
    three ways to run it the tests compare."""

    def __init__(self, engine, d):
        self.engine = engine
        self.m = ojas.models.GPT.from_pretrained(d, engine=engine)

    def forward(self, idx):
        return self.m(ojas.tensor(idx.numpy(), engine=self.engine)).detach().numpy()

    def cached(self, idx):
        """Logits by prefill of 5 tokens then one token at a time."""
        B, T = idx.shape[0], idx.shape[1]
        cache = self.m.kv_cache(B, T)
        pieces = []
        for a, b in [(0, 5)] + [(t, t + 1) for t in range(5, T)]:
            x = ojas.tensor(idx[:, a:b].numpy(), engine=self.engine)
            pieces.append(cache.forward(x).numpy())
        return np.concatenate(pieces, axis=1)

    def greedy(self, prompt, n):
        d = self.m.decoder(len(prompt) + n, use_graph=False)
        out = [d.prefill([int(t) for t in prompt])]
        while len(out) < n:
            out.append(d.step())
        return out

    def free(self):
        self.m = None


def load_error(engine, d):
    with pytest.raises(ojas.Error) as ei:
        OjModel(engine, d).free()
    msg = ei.value.message
    assert "\n" not in msg
    return ei.value.status, msg


# ---------------------------------------------------------------- parity

@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_greedy(engine, name, tmp_path):
    gen = torch.Generator().manual_seed(_seed(name))
    cfg, params, fwd = build(name, gen)
    d = str(tmp_path / name)
    write_dir(d, cfg, params, shards=2 if name in ("llama", "qwen3") else 1)
    P = {n: t.double() for n, t in params.items()}
    m = OjModel(engine, d)
    try:
        with ojas.no_grad():
            idx = torch.randint(0, 97, (2, 40), generator=gen)
            want = fwd(P, idx).numpy()
            got = m.forward(idx)
            assert got.shape == want.shape
            err, ok = _rel_err(got, want)
            print("%s logits: max |d| / max |ref| = %.3g" % (name, err))
            assert ok, "%s logits: max |d| / max |ref| = %.3g" % (name, err)
            err, ok = _rel_err(m.cached(idx), want)
            assert ok, "%s cached logits: max |d| / max |ref| = %.3g" % (name, err)
            prompt = idx[0, :8]
            want_tok = ref.greedy(lambda x: fwd(P, x), prompt, NEW_TOKENS)
            got_tok = m.greedy(prompt.tolist(), NEW_TOKENS)
        assert got_tok == want_tok
        print("%s greedy: %s" % (name, want_tok))
        assert len(set(want_tok)) > 3  # not a degenerate repetition
    finally:
        m.free()


def read_dir(d):
    """config.json and model.safetensors of d as (config dict, {name: f64
    tensor}), read with the format's own rules (py_load)."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    _, header, blobs, _ = py_load(os.path.join(d, "model.safetensors"))
    assert header["__metadata__"] == {"format": "pt"}  # transformers requires it
    P = {}
    for n, b in blobs.items():
        assert header[n]["dtype"] == "F32", n
        a = np.frombuffer(b, dtype=np.float32).reshape(header[n]["shape"])
        P[n] = torch.from_numpy(a.copy()).double()
    return cfg, P


@pytest.mark.parametrize("name", ["gpt2", "llama", "llama-tied-mha", "llama3-rope", "qwen2",
                                  "qwen3"])
def test_export_reads_back(engine, name, tmp_path):
    """ojas exports what it loaded (GPT.save_pretrained); the reference,
    built from the exported config.json alone, gives the source's logits
    from the exported tensors (the same names, a tied head left out as
    save_pretrained leaves it), and ojas reloads it to the same logits bit
    for bit."""
    gen = torch.Generator().manual_seed(_seed(name) + 1)
    cfg, params, fwd = build(name, gen)
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    write_dir(src, cfg, params)
    m = OjModel(engine, src)
    try:
        m.m.save_pretrained(out)
        idx = torch.randint(0, 97, (2, 24), generator=gen)
        with ojas.no_grad():
            got_src = m.forward(idx)
        ecfg, P = read_dir(out)
        assert ecfg["architectures"] == cfg["architectures"]
        tied = cfg.get("tie_word_embeddings", name.startswith("gpt2"))
        assert ("lm_head.weight" in P) == (not tied)
        assert set(P) == {n for n in params if not (tied and n == "lm_head.weight")}
        if name.startswith("gpt2"):
            want = gref.forward(_gpt2_ref_cfg(ecfg), P, idx).numpy()
        else:
            want = ref.forward(ecfg, P, idx).numpy()
        err_, ok = _rel_err(got_src, want)
        assert ok, "%s: exported logits vs the source's: %.3g" % (name, err_)
        r = OjModel(engine, out)
        try:
            with ojas.no_grad():
                assert np.array_equal(r.forward(idx), got_src)
        finally:
            r.free()
    finally:
        m.free()


def test_bf16_file_and_tied_lm_head(engine, tmp_path):
    """A BF16 file loads (converted to f32) to the logits of the bf16-rounded
    weights; a tied model's file may repeat the embedding as lm_head.weight."""
    gen = torch.Generator().manual_seed(5)
    cfg, params, fwd = build("qwen2", gen)
    emb = params["model.embed_tokens.weight"]
    d = str(tmp_path / "bf16")
    write_dir(d, cfg, params, dtype="BF16",
              extra={"lm_head.weight": ("BF16", tuple(emb.shape), raw_bytes(emb.bfloat16()))})
    P = {n: t.bfloat16().double() for n, t in params.items()}
    m = OjModel(engine, d)
    try:
        with ojas.no_grad():
            idx = torch.randint(0, 97, (1, 24), generator=gen)
            err, ok = _rel_err(m.forward(idx), fwd(P, idx).numpy())
        assert ok, "bf16 logits: %.3g" % err
        c = m.m.get_config()
        assert (c["family"], c["qkv_bias"], c["qk_norm"], c["untied_head"]) == \
            ("llama", True, False, False)
    finally:
        m.free()


def test_gpt2_hub_names_sharded(engine, tmp_path):
    """GPT-2 as the original hub checkpoints name it (GPT2Model's names,
    without "transformer.", with the attention-mask buffers h.N.attn.bias
    and attn.masked_bias), in two shards: the same logits."""
    gen = torch.Generator().manual_seed(9)
    cfg, params, fwd = build("gpt2", gen)
    T = cfg["n_positions"]
    hub = {n[len("transformer."):]: v for n, v in params.items()}
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
    extra = {}
    for l in range(cfg["n_layer"]):
        extra["h.%d.attn.bias" % l] = ("BOOL", (1, 1, T, T), raw_bytes(mask))
        extra["h.%d.attn.masked_bias" % l] = ("F32", (), raw_bytes(torch.tensor(-1e4)))
    d = str(tmp_path / "hub")
    write_dir(d, cfg, hub, shards=2, extra=extra)
    m = OjModel(engine, d)
    try:
        with ojas.no_grad():
            idx = torch.randint(0, 101, (2, 30), generator=gen)
            err, ok = _rel_err(m.forward(idx), fwd({n: v.double() for n, v in params.items()}, idx).numpy())
        assert ok, "gpt2 hub names: %.3g" % err
    finally:
        m.free()


def test_config_fields(tmp_path):
    """What oj_gpt_config_from_hf reads: sizes, defaults, Mistral's window."""
    def parse(cfg):
        p = str(tmp_path / "config.json")
        with open(p, "w") as f:
            json.dump(cfg, f)
        c = ojas.models.GPT.config_from_hf(p)
        c["family"] = {"gpt2": 0, "nanolab": 1, "llama": 2}[c["family"]]
        return types.SimpleNamespace(**c)

    c = parse(CONFIGS["qwen3"])
    assert (c.family, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.mlp_hidden, c.block_size) == \
        (2, 48, 6, 3, 16, 80, 128)
    assert c.qk_norm and not c.qkv_bias and c.untied_head and c.rope_theta == 1e6
    c = parse({"architectures": ["GPT2LMHeadModel"]})  # transformers' GPT2Config defaults
    assert (c.family, c.vocab_size, c.block_size, c.n_layer, c.n_embd, c.mlp_hidden) == \
        (0, 50257, 1024, 12, 768, 3072)
    c = parse(_llama_cfg("MistralForCausalLM", max_position_embeddings=32768, sliding_window=4096))
    assert c.block_size == 4096  # attention within the window is plain causal
    c = parse(_llama_cfg("LlamaForCausalLM", rope_scaling={"rope_type": "default"},
                         num_key_value_heads=None))
    assert c.n_kv_head == 6 and c.head_dim == 0


# ---------------------------------------------------------------- bad directories

def _good_dir(tmp_path, name="llama", shards=1):
    gen = torch.Generator().manual_seed(3)
    cfg, params, _ = build(name, gen)
    d = str(tmp_path / ("d%d" % len(os.listdir(str(tmp_path)))))
    write_dir(d, cfg, params, shards=shards)
    return d, cfg, params


def _rewrite_config(d, **kw):
    conftest.rewrite_json(os.path.join(d, "config.json"), **kw)


@pytest.mark.parametrize("field,value,needle", [
    ("architectures", ["FalconForCausalLM"], "architectures[0] 'FalconForCausalLM' is not supported"),
    # a control character is not echoed (the message stays one line)
    ("architectures", ["Llama\nForCausalLM"], "architectures[0] 'Llama?ForCausalLM' is not"),
    ("rope_scaling", {"rope_type": "yarn", "factor": 4.0}, "rope_scaling.rope_type 'yarn'"),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}, "rope_scaling.low_freq_factor must"),
    ("hidden_act", "gelu", "hidden_act 'gelu' is not supported"),
    ("attention_bias", True, "attention_bias true is not supported"),
    ("mlp_bias", True, "mlp_bias true is not supported"),
    ("num_key_value_heads", 4, "n_head 6 is not a multiple of n_kv_head 4"),
    ("hidden_size", "48", "hidden_size must be an integer"),
    ("layer_types", ["sliding_attention", "full_attention"], "layer_types[0] 'sliding_attention'"),
])
def test_refused_config_fields(engine, tmp_path, field, value, needle):
    d, _, _ = _good_dir(tmp_path)
    _rewrite_config(d, **{field: value})
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_INVALID_ARGUMENT"
    assert os.path.join(d, "config.json") in msg and needle in msg, msg


def test_refused_gpt2_and_qwen_fields(engine, tmp_path):
    d, _, _ = _good_dir(tmp_path, "gpt2")
    _rewrite_config(d, activation_function="relu")
    assert "activation_function 'relu' is not supported" in load_error(engine, d)[1]
    _rewrite_config(d, activation_function="gelu_new", scale_attn_by_inverse_layer_idx=True)
    assert "scale_attn_by_inverse_layer_idx true" in load_error(engine, d)[1]
    d, _, _ = _good_dir(tmp_path, "qwen2")
    _rewrite_config(d, use_sliding_window=True)
    assert "use_sliding_window true is not supported" in load_error(engine, d)[1]


def test_missing_files(engine, tmp_path):
    d, _, _ = _good_dir(tmp_path, shards=2)
    os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_IO"
    assert "model.safetensors.index.json" in msg and "model-00002-of-00002.safetensors" in msg, msg
    os.remove(os.path.join(d, "model.safetensors.index.json"))
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_IO" and "neither model.safetensors nor" in msg, msg
    st, msg = load_error(engine, str(tmp_path / "nowhere"))
    assert st == "OJ_ERR_IO" and "config.json" in msg, msg


def test_weight_map_names_a_file_without_the_tensor(engine, tmp_path):
    d, _, _ = _good_dir(tmp_path, shards=2)
    p = os.path.join(d, "model.safetensors.index.json")
    with open(p) as f:
        idx = json.load(f)
    idx["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors" \
        if idx["weight_map"]["model.norm.weight"].startswith("model-00002") else \
        "model-00002-of-00002.safetensors"
    with open(p, "w") as f:
        json.dump(idx, f)
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_CORRUPT" and "model.norm.weight" in msg and "does not hold it" in msg, msg
    for bad in ["../x.safetensors", "x\n.safetensors"]:
        idx["weight_map"]["model.norm.weight"] = bad
        with open(p, "w") as f:
            json.dump(idx, f)
        assert "not a file in the directory" in load_error(engine, d)[1]


def test_shape_mismatch_and_missing_tensor(engine, tmp_path):
    d, cfg, params = _good_dir(tmp_path)
    _rewrite_config(d, intermediate_size=96)
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_SHAPE", msg
    assert "model.layers.0.mlp.gate_proj.weight has shape [80, 48]" in msg and "[96, 48]" in msg
    assert os.path.join(d, "model.safetensors") in msg and "config.json" in msg, msg
    _rewrite_config(d, intermediate_size=80, tie_word_embeddings=False)
    del params["lm_head.weight"]
    write_dir(d, dict(cfg, tie_word_embeddings=False), params)
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_SHAPE" and "no tensor lm_head.weight" in msg, msg


def test_tie_mismatch(engine, tmp_path):
    """tie_word_embeddings true while the file's lm_head.weight differs from
    the embedding: refused (transformers would silently drop lm_head)."""
    d, cfg, params = _good_dir(tmp_path)  # untied llama: has lm_head.weight
    _rewrite_config(d, tie_word_embeddings=True)
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_INVALID_ARGUMENT", msg
    assert "tie_word_embeddings is true" in msg and "lm_head.weight" in msg, msg


def test_bad_json(engine, tmp_path):
    d, _, _ = _good_dir(tmp_path)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"architectures": ["LlamaForCausalLM"], ')
    st, msg = load_error(engine, d)
    assert st == "OJ_ERR_CORRUPT" and "config.json: bad JSON" in msg, msg


# ---------------------------------------------------------------- training

@pytest.mark.parametrize("name", ["qwen2", "qwen3", "llama"])
def test_adamw_training_losses(engine, name, tmp_path):
    """The loaded model trains on the tape: 6 AdamW steps on one batch give torch's
    losses (float64 reference) to 1e-4 relative, and every parameter
    (biases, QK-norm weights, the untied head) moves as torch's."""
    gen = torch.Generator().manual_seed(_seed(name) + 1)
    cfg, params, fwd = build(name, gen)
    d = str(tmp_path / name)
    write_dir(d, cfg, params)
    lr, wd = 3e-3, 0.1
    idx = torch.randint(0, 97, (2, 17), generator=gen)
    batches = [(idx[:, :16].contiguous(), idx[:, 1:].contiguous())] * 6  # one batch, learnt
    P = {n: t.double().requires_grad_(True) for n, t in params.items()}
    opt = torch.optim.AdamW(list(P.values()), lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd)
    want = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(fwd(P, x).reshape(-1, 97), y.reshape(-1))
        loss.backward()
        opt.step()
        want.append(loss.item())

    m = OjModel(engine, d).m
    sd = m.state_dict()
    assert sorted(sd) == sorted(params)
    o = ojas.optim.AdamW(m.named_parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-8,
                         weight_decay=wd)
    got = []
    for x, y in batches:
        loss = m.loss(ojas.tensor(x.numpy(), engine=engine), ojas.tensor(y.numpy(), engine=engine))
        loss.backward()
        got.append(loss.item())
        del loss
        o.step()
        assert o.last_step[0], o.last_step
        o.zero_grad()
    for n, t in sd.items():
        g = t.detach().numpy()
        w = P[n].detach().numpy()
        err = np.abs(g - w).max() / np.abs(w).max()
        assert err <= 1e-3, "%s after the steps: %.3g" % (n, err)
    del o, sd, m
    rel = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    assert want[-1] < want[0]
    assert rel <= 1e-4, "losses differ: %s vs %s" % (got, want)
