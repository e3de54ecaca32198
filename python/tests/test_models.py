"""ojas.models: GPT creation and configs, the forward against the PyTorch
reference of tests/reference/gpt_reference.py, loss, generate (greedy and
sampled), the KV cache and the decoder against the full forward, loading
Hugging Face directories and ojas checkpoints, and training the model with
ojas.optim."""
import json
import os
import signal
import sys
import time

import numpy as np
import pytest
import torch

import ojas
from ojas.models import GPT

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "reference"))
import gpt_reference as ref  # noqa: E402


def small(family="nanolab-tiny", seed=3, **kw):
    kw.setdefault("vocab_size", 97)
    kw.setdefault("block_size", 32)
    return GPT.create(family, seed=seed, **kw)


def test_config_and_create():
    assert "nanolab-tiny" in GPT.presets() and "gpt2-124m" in GPT.presets()
    c = GPT.config("gpt2-tiny", vocab_size=50)
    assert c["family"] == "gpt2" and c["vocab_size"] == 50
    with pytest.raises(ojas.InvalidArgumentError, match="unknown GPT preset 'nope'.*nanolab-tiny"):
        GPT.config("nope")
    with pytest.raises(ojas.InvalidArgumentError, match="unknown key 'n_layers'"):
        GPT.create("nanolab-tiny", n_layers=3)
    with pytest.raises(ojas.InvalidArgumentError, match="n_head"):
        GPT.create("nanolab-tiny", n_head=5)
    m = small()
    assert m.get_config()["vocab_size"] == 97
    n = sum(p.numel() for p in m.parameters())
    assert m.num_params() == n
    # parameters depend on (seed, name) only
    a, b = small(seed=7).state_dict(), small(seed=7).state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k].numpy(), b[k].numpy())
    assert not np.array_equal(a["transformer.wte.weight"].numpy(),
                              small(seed=8).state_dict()["transformer.wte.weight"].numpy())


@pytest.mark.parametrize("preset", ["nanolab-tiny", "gpt2-tiny"])
def test_forward_matches_torch_reference(preset, rng):
    m = small(preset)
    c = m.get_config()
    cfg = ref.Config(family=ref.GPT2 if c["family"] == "gpt2" else ref.NANOLAB,
                     vocab_size=c["vocab_size"], block_size=c["block_size"],
                     n_layer=c["n_layer"], n_head=c["n_head"], n_kv_head=c["n_kv_head"],
                     n_embd=c["n_embd"], mlp_hidden=c["mlp_hidden"], norm_eps=c["norm_eps"],
                     rope_theta=c["rope_theta"])
    P = {k: torch.tensor(v.numpy(), dtype=torch.float64) for k, v in m.state_dict().items()}
    idx = rng.integers(0, c["vocab_size"], size=(2, 11))
    tgt = rng.integers(0, c["vocab_size"], size=(2, 11))
    logits = m(ojas.tensor(idx))
    want = ref.forward(cfg, P, torch.tensor(idx))
    np.testing.assert_allclose(logits.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    loss = m.loss(ojas.tensor(idx), ojas.tensor(tgt))
    assert loss.item() == pytest.approx(ref.loss(cfg, P, torch.tensor(idx),
                                                 torch.tensor(tgt)).item(), rel=1e-5)


def greedy_by_forward(m, prompt, n):
    seq = list(prompt)
    with ojas.no_grad():
        for _ in range(n):
            logits = m(ojas.tensor([seq]))
            seq.append(int(logits[0, -1].argmax().item()))
    return seq[len(prompt):]


@pytest.mark.parametrize("preset", ["nanolab-tiny", "gpt2-tiny"])
def test_generate_kv_cache_and_decoder(preset):
    m = small(preset)
    prompt = [5, 17, 42, 8]
    want = greedy_by_forward(m, prompt, 6)
    assert m.generate(prompt, max_new_tokens=6, temperature=0) == want
    d = m.decoder(16)
    got = [d.prefill(prompt)] + [d.step() for _ in range(5)]
    assert got == want and d.len() == 9
    assert d.logits().shape == (1, 1, 97)
    # the cache's logits are the full forward's, position by position
    kv = m.kv_cache(1, 16)
    full = m(ojas.tensor([prompt + want])).detach().numpy()
    a = kv.forward(ojas.tensor([prompt])).numpy()
    b = kv.forward(ojas.tensor([want[:2]])).numpy()
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), full[:, :6], rtol=1e-4, atol=1e-5)
    assert kv.len() == 6
    kv.reset()
    assert kv.len() == 0
    with pytest.raises(ojas.OutOfRangeError):
        kv.forward(ojas.tensor([list(range(17))]))


def test_generate_sampled_batch_and_callback():
    m = small()
    p = [[1, 2, 3], [4, 5]]
    a = m.generate(p, max_new_tokens=8, temperature=0.9, top_k=20, top_p=0.95, seed=11)
    b = m.generate(p, max_new_tokens=8, temperature=0.9, top_k=20, top_p=0.95, seed=11)
    c = m.generate(p, max_new_tokens=8, temperature=0.9, top_k=20, top_p=0.95, seed=12)
    assert a == b and a != c and [len(x) for x in a] == [8, 8]
    assert all(0 <= t < 97 for x in a for t in x)
    seen = []
    out = m.generate([1, 2, 3], max_new_tokens=8, temperature=0.9, top_k=20, top_p=0.95,
                     seed=11, on_token=lambda s, t: seen.append(t) or len(seen) < 3)
    assert seen == a[0][:3] and out == seen
    stop = a[0][2]
    assert m.generate([1, 2, 3], max_new_tokens=8, temperature=0.9, top_k=20, top_p=0.95,
                      seed=11, stop_token=stop) == a[0][:a[0].index(stop)]

    def boom(s, t):
        raise KeyError("from on_token")

    with pytest.raises(KeyError, match="from on_token"):
        m.generate([1], on_token=boom)
    with pytest.raises(ojas.InvalidArgumentError):
        m.generate([1, 200])  # id outside the vocabulary


def test_generate_stops_at_ctrl_c():
    # SIGINT (Ctrl-C) during a long generate with no on_token: it stops
    # within a token and KeyboardInterrupt propagates (Python's handler only
    # flags the signal while generate holds the GIL: the C loop must look)
    m = GPT.create("nanolab-tiny", seed=1, block_size=8192)
    prompts = [[1, 2]] * 8
    t = time.monotonic()
    m.generate(prompts, max_new_tokens=200, temperature=0)
    t200 = time.monotonic() - t  # the 8000 below take > 40 times as long
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            m.generate(prompts, max_new_tokens=8000, temperature=0)
        took = time.monotonic() - t
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert took < 0.2 + 5 * t200, (took, t200)
    assert len(m.generate([1, 2], max_new_tokens=3, temperature=0)) == 3  # usable after


def test_sample_logits():
    lg = np.array([0.0, 3.0, 1.0, -2.0], dtype=np.float32)
    assert ojas.models.sample_logits(lg, temperature=0) == 1
    assert ojas.models.sample_logits(lg, temperature=1.0, top_k=1, u=0.99) == 1
    assert ojas.models.sample_logits(np.array([np.nan, 1], np.float32)) == -1


def test_sample_logits_inf_and_arguments():
    sl = ojas.models.sample_logits
    # +inf (a NaN softmax) and only -inf are refused; -inf is never drawn
    pos = np.array([0, np.inf, 1, -np.inf], np.float32)
    for kw in ({"temperature": 0}, {}, {"top_k": 2}, {"repetition_penalty": 1.5, "history": [2]}):
        assert sl(pos, **kw) == -1
        assert sl(np.full(3, -np.inf, np.float32), **kw) == -1
    m = np.array([0, -np.inf, 1, -np.inf], np.float32)
    for u in (0.0, 0.5, 0.999999, 1 - 2**-53):
        for kw in ({}, {"top_k": 3}, {"top_p": 0.9999999999}, {"temperature": 1e-3}):
            assert sl(m, u=u, **kw) in (0, 2)
    lg = np.array([0, 1, 2], np.float32)
    for kw, name in (({"temperature": float("nan")}, "temperature"),
                     ({"temperature": -1}, "temperature"),
                     ({"top_k": -1}, "top_k"), ({"top_p": 0}, "top_p"), ({"top_p": 2}, "top_p"),
                     ({"repetition_penalty": 0, "history": [2]}, "repetition_penalty"),
                     ({"u": 1.0}, "u"), ({"u": -0.1}, "u")):
        with pytest.raises(ojas.InvalidArgumentError, match=name):
            sl(lg, **kw)
    with pytest.raises(ojas.ShapeError, match="1-D"):
        sl(np.array([[0, 0, 0], [0, 9, 0]], np.float32), temperature=0)


def test_generate_refuses_what_the_cli_refuses():
    m = small()
    for kw, name in (({"top_p": 0.0}, "top_p"), ({"top_p": 2.0}, "top_p"),
                     ({"top_k": -1}, "top_k"), ({"temperature": float("nan")}, "temperature"),
                     ({"repetition_penalty": 0}, "repetition_penalty"),
                     ({"max_new_tokens": -1}, "max_new_tokens"),
                     ({"seed": 2**64}, "seed"), ({"seed": -1}, "seed")):
        with pytest.raises(ojas.InvalidArgumentError, match=name):
            m.generate([1, 2, 3], **kw)
    assert len(m.generate([1, 2, 3], max_new_tokens=2, seed=2**64 - 1)) == 2


def test_from_pretrained_hf_dir(tmp_path):
    m = small("gpt2-tiny")
    c = m.get_config()
    ojas.io.save_file(m.state_dict(), str(tmp_path / "model.safetensors"))
    with open(tmp_path / "config.json", "w") as f:
        json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                   "vocab_size": c["vocab_size"], "n_positions": c["block_size"],
                   "n_layer": c["n_layer"], "n_head": c["n_head"], "n_embd": c["n_embd"],
                   "n_inner": None, "layer_norm_epsilon": 1e-5,
                   "activation_function": "gelu_new"}, f)
    h = GPT.from_pretrained(tmp_path)
    idx = ojas.tensor([[3, 1, 4, 1, 5]])
    np.testing.assert_array_equal(h(idx).detach().numpy(), m(idx).detach().numpy())
    os.remove(tmp_path / "model.safetensors")
    with pytest.raises(ojas.IOError, match="model.safetensors"):
        GPT.from_pretrained(tmp_path)


def test_from_pretrained_checkpoint(run_fixture, tmp_path):
    import runfixture
    cfg = dict(runfixture.CONFIG, data_dir=os.path.join(run_fixture, "data"), max_steps=2,
               tokenizer_dir=os.path.join(run_fixture, "tok"))
    with ojas.train.Trainer(cfg, out_dir=tmp_path / "run") as tr:
        tr.fit()
        want = {k: v.numpy().copy() for k, v in tr.model.state_dict().items()}
    m = GPT.from_pretrained(tmp_path / "run")
    assert m.get_config()["vocab_size"] == 300  # from the run's tokenizer
    got = m.state_dict()
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k])


def test_state_dict_shared_and_training_with_optim():
    m = small()
    sd = m.state_dict()
    w = sd["transformer.wte.weight"]
    with ojas.no_grad():
        w.mul_(0.5)
    np.testing.assert_array_equal(m.state_dict()["transformer.wte.weight"].numpy(), w.numpy())
    m2 = small(seed=9)
    m2.load_state_dict(sd)
    np.testing.assert_array_equal(m2.state_dict()["transformer.wte.weight"].numpy(), w.numpy())
    with pytest.raises(ojas.InvalidArgumentError, match="missing"):
        m2.load_state_dict({})
    opt = ojas.optim.AdamW(m.named_parameters(), lr=3e-3, weight_decay=0.0)
    idx = ojas.tensor([[1, 2, 3, 4, 5, 6, 7, 8]] * 2)
    tgt = ojas.tensor([[2, 3, 4, 5, 6, 7, 8, 9]] * 2)
    losses = []
    for _ in range(15):
        loss = m.loss(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_config_from_hf_takes_a_path(tmp_path):
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 320,
           "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert GPT.config_from_hf(p)["n_layer"] == 2
    assert GPT.config_from_hf(path=str(p))["n_embd"] == 32
    assert GPT.config_from_hf(config_json=p)["vocab_size"] == 320  # the former keyword
    # was: IOError "{whole JSON}: cannot open: File name too long"
    text = json.dumps(dict(cfg, padding="x" * 500))
    with pytest.raises(ojas.InvalidArgumentError, match="not JSON text") as e:
        GPT.config_from_hf(text)
    assert len(str(e.value)) < 300
    with pytest.raises(ojas.InvalidArgumentError, match="is a directory"):
        GPT.config_from_hf(tmp_path)
    with pytest.raises(ojas.IOError, match=r"cannot open .*\.\.\.: ") as e:
        GPT.config_from_hf(str(tmp_path / ("n" * 400)))
    assert len(str(e.value)) < 300
