"""scripts/hf_big_shapes.py's command line: an --ojas that is not an
executable is refused by name before anything is written, and with --dir
but without --keep it removes only what it wrote there (a model directory
that was already there, the reuse path, stays). No model is written or
run here: /bin/false stands in for the CLI."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import hf_big_shapes  # noqa: E402


def test_missing_ojas_is_refused(tmp_path, capsys):
    missing = str(tmp_path / "no-such-ojas")
    with pytest.raises(SystemExit) as e:
        hf_big_shapes.main(["--ojas", missing, "--dir", str(tmp_path / "work"),
                            "--no-transformers"])
    assert e.value.code == 2
    assert missing in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "work")


def test_dir_keeps_what_was_there(tmp_path):
    work = tmp_path / "work"
    model = work / "qwen2.5-0.5b"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}\n")
    (model / "tokenizer.json").write_text("{}\n")
    (work / "corpus.txt").write_text("mine\n")
    rc = hf_big_shapes.main(["--ojas", "/bin/false", "--dir", str(work), "--models",
                             "qwen2.5-0.5b", "--no-transformers", "--json",
                             str(tmp_path / "s.json")])
    assert rc == 1  # /bin/false: the run fails, and says so
    assert (model / "config.json").read_text() == "{}\n"
    assert (work / "corpus.txt").read_text() == "mine\n"


def test_bpe_files_from_tokenizer_json(tmp_path):
    """--gguf's GPT-2 BPE files: tokenizer.json's vocabulary with its added
    tokens by id, merges as "a b" lines whether stored as strings or pairs."""
    src = tmp_path / "m"
    src.mkdir()
    tj = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                    "merges": ["a b", ["ab", "b"]]},
          "added_tokens": [{"id": 3, "content": "<|end|>"}]}
    (src / "tokenizer.json").write_text(json.dumps(tj))
    out = hf_big_shapes.bpe_files(str(src), str(tmp_path / "bpe"))
    with open(os.path.join(out, "vocab.json")) as f:
        assert json.load(f) == {"a": 0, "b": 1, "ab": 2, "<|end|>": 3}
    with open(os.path.join(out, "merges.txt")) as f:
        assert f.read().splitlines() == ["#version: 0.2", "a b", "ab b"]
    tj["model"]["type"] = "Unigram"
    (src / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(SystemExit) as e:
        hf_big_shapes.bpe_files(str(src), str(tmp_path / "bpe2"))
    assert "Unigram" in str(e.value)


def test_no_rope_scaling_config(tmp_path, monkeypatch):
    """write_model without rope scaling: the config less rope_scaling, the
    rest (here a tiny llama, no tokenizer package) as it was."""
    cfg = dict(hf_big_shapes.MODELS["llama-tiny"][0], vocab_size=64, hidden_size=16,
               intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    monkeypatch.setitem(hf_big_shapes.MODELS, "t", (cfg, 1, "none"))
    for scaled in (True, False):
        d = tmp_path / ("m%d" % scaled)
        hf_big_shapes.write_model(str(d), "t", str(tmp_path / "npm"), rope_scaling=scaled)
        with open(d / "config.json") as f:
            got = json.load(f)
        assert ("rope_scaling" in got) == scaled
        assert {k: v for k, v in got.items() if k != "rope_scaling"} == \
            {k: v for k, v in cfg.items() if k != "rope_scaling"}


def test_gguf_dir_keeps_what_was_there(tmp_path):
    """With --gguf and --dir but no --keep, a GGUF file that was there stays;
    the failing quantize (/bin/false) is reported as the run's error."""
    work = tmp_path / "work"
    model = work / "qwen2.5-0.5b"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}\n")
    (model / "tokenizer.json").write_text(json.dumps(
        {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}))
    (work / "qwen2.5-0.5b-q4_0.gguf").write_text("mine\n")
    rc = hf_big_shapes.main(["--ojas", "/bin/false", "--dir", str(work), "--models",
                             "qwen2.5-0.5b", "--no-transformers", "--gguf", "--dtypes",
                             "q8_0,q4_0", "--json", str(tmp_path / "s.json")])
    assert rc == 1
    with open(tmp_path / "s.json") as f:
        runs = json.load(f)["models"][0]["runs"]
    assert runs[0]["error"].startswith("ojas quantize")
    assert (work / "qwen2.5-0.5b-q4_0.gguf").read_text() == "mine\n"
    assert not (work / "qwen2.5-0.5b-q8_0.gguf").exists()
    assert not (work / "qwen2.5-0.5b-bpe").exists()  # written here, so removed


def fake_ojas(tmp_path, timing):
    """An executable that stands in for `ojas generate`: prints the text
    and, with --timing, `timing` on stderr."""
    p = tmp_path / "ojas"
    p.write_text("#!/bin/sh\necho text\ncase \"$*\" in *--timing*) echo %r >&2 ;; esac\n" % timing)
    p.chmod(0o755)
    return str(p)


def test_decode_from_timing_line(tmp_path):
    """ojas_run takes the decode speed, the setup and the first token from
    the --timing line of its one timed run (not from two runs' wall times,
    which an fp8 setup's spread swamps); a run without the line is an
    error; fewer tokens than asked are recorded."""
    import argparse
    a = argparse.Namespace(n=512, threads=2, gguf=False, python_load=False, save_text=None)
    a.ojas = fake_ojas(tmp_path, "ojas: generate: timing: setup 29.100 s, prompt of 12 tokens and "
                                 "first token 0.050 s, 511 more tokens in 0.7000 s: decode 730.000 tok/s")
    r = hf_big_shapes.ojas_run(a, str(tmp_path), None, "cuda", "fp8")
    assert "error" not in r
    assert r["decode_tok_s"] == 730.0 and r["setup_s"] == 29.1 and r["first_token_s"] == 29.15
    assert r["tokens"] == 512
    a.save_text = str(tmp_path / "text")  # the timed run's stdout kept
    r = hf_big_shapes.ojas_run(a, str(tmp_path), None, "cuda", "fp8")
    with open(r["text"]) as f:
        assert f.read() == "text\n"
    assert os.path.basename(r["text"]) == "%s-cuda-fp8.txt" % tmp_path.name
    a.save_text = None
    a.ojas = fake_ojas(tmp_path, "ojas: generate: timing: setup 1.000 s, prompt of 12 tokens and "
                                 "first token 0.050 s, 99 more tokens in 0.5000 s: decode 198.000 tok/s")
    r = hf_big_shapes.ojas_run(a, str(tmp_path), None, "cpu", "bf16")
    assert r["tokens"] == 100 and r["decode_tok_s"] == 198.0
    a.ojas = fake_ojas(tmp_path, "ojas: generate: timing: setup 1.000 s, prompt of 12 tokens and "
                                 "first token 0.050 s, no decode to time (1 token)")
    r = hf_big_shapes.ojas_run(a, str(tmp_path), None, "cpu", "bf16")
    assert r["decode_tok_s"] is None and r["tokens"] == 1
    a.ojas = fake_ojas(tmp_path, "something else")
    r = hf_big_shapes.ojas_run(a, str(tmp_path), None, "cpu", "bf16")
    assert r["error"].startswith("no timing line")
