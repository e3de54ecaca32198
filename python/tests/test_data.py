"""ojas.data: the tokenizer (trained, GPT-2 files, tokenizer.json) against
the CLI's and its own round trips, shards against numpy, and the loader's
batches against the shard's windows, resumed from its state."""
import json
import os

import numpy as np
import pytest

import ojas
import runfixture
from ojas.data import Loader, Tokenizer


def test_tokenizer_of_the_cli(run_fixture):
    tok = Tokenizer.from_dir(os.path.join(run_fixture, "tok"))
    assert tok.vocab_size == 300 and tok.eot == 299
    text = "The king said unto him. Stone and bread\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode()
    # the ids `ojas tokenizer encode` prints for the same text
    with open(os.path.join(run_fixture, "enc.txt"), "w") as f:
        f.write(text)
    out = runfixture.run_ojas(run_fixture, "tokenizer", "encode", "--vocab", "tok", "enc.txt")
    assert [int(x) for x in out.split()] == ids
    with pytest.raises(ojas.InvalidArgumentError, match="endoftext"):
        tok.encode("a<|endoftext|>b")
    assert tok.encode("a<|endoftext|>b", special="allow").count(299) == 1
    assert 299 not in tok.encode("a<|endoftext|>b", special="text")
    with pytest.raises(ojas.OutOfRangeError):
        tok.decode([5000])
    bad = tok.encode(b"\xff\xfe")
    assert tok.decode(bad) == "\ufffd\ufffd" and tok.decode_bytes(bad) == b"\xff\xfe"
    with pytest.raises(ojas.CorruptError):
        tok.decode(bad, errors="strict")


def test_train_save_and_load_formats(tmp_path):
    texts = [runfixture.corpus()]
    tok = Tokenizer.train(texts, 280, threads=1)
    assert tok.vocab_size == 280
    tok.save(tmp_path / "t")
    assert sorted(os.listdir(tmp_path / "t")) == ["encoder.json", "ranks.tiktoken", "vocab.bpe"]
    again = Tokenizer.from_gpt2_files(tmp_path / "t" / "encoder.json", tmp_path / "t" / "vocab.bpe")
    s = runfixture.corpus()[:500]
    assert again.encode(s) == tok.encode(s)
    # the same vocabulary as a tokenizer.json (HF BPE, byte-level)
    with open(tmp_path / "t" / "encoder.json") as f:
        vocab = json.load(f)
    with open(tmp_path / "t" / "vocab.bpe") as f:
        merges = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#version")]
    hf = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": 279, "content": "<|endoftext|>", "single_word": False,
                            "lstrip": False, "rstrip": False, "normalized": False,
                            "special": True}],
          "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                            "use_regex": True},
          "post_processor": None,
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                      "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None,
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges}}
    with open(tmp_path / "tokenizer.json", "w") as f:
        json.dump(hf, f)
    h = Tokenizer.from_file(tmp_path / "tokenizer.json")
    assert h.encode(s) == tok.encode(s) and h.decode(h.encode(s)) == s
    with pytest.raises(ojas.IOError):
        Tokenizer.from_dir(tmp_path / "missing")


def test_shards_and_loader(tmp_path):
    toks = np.arange(1000) % 251
    ojas.data.write_shard(tmp_path / "train_000000.bin", toks)
    ojas.data.write_shard(tmp_path / "train_000001.bin", toks[:300] + 70000)
    np.testing.assert_array_equal(ojas.data.read_shard(tmp_path / "train_000000.bin"), toks)
    big = ojas.data.read_shard(tmp_path / "train_000001.bin")
    assert big.dtype == np.int32 and big[0] == 70000
    with pytest.raises(ojas.CorruptError, match="70000"):
        ojas.data.read_shard(tmp_path / "train_000001.bin", vocab_size=70000)
    paths = ojas.data.list_shards(tmp_path, "train")
    assert [os.path.basename(p) for p in paths] == ["train_000000.bin", "train_000001.bin"]
    with pytest.raises(ojas.OutOfRangeError):
        ojas.data.write_shard(tmp_path / "x.bin", [-1], version=1)

    T, B = 16, 3
    L = Loader(paths[0], B=B, T=T)
    assert L.num_windows == (1000 - 1) // T and L.steps_per_epoch == L.num_windows // B
    x, y = L.next()
    assert x.shape == (B, T) and x.dtype == ojas.int64
    for b in range(B):
        np.testing.assert_array_equal(x.numpy()[b], toks[b * T:(b + 1) * T])
        np.testing.assert_array_equal(y.numpy()[b], toks[b * T + 1:(b + 1) * T + 1])
    # shuffled, resumed from its state: the same batches follow
    S = Loader(paths[0], B=B, T=T, shuffle=True, seed=5, dtype=ojas.int32)
    next(S)
    st = S.state()
    want = [next(S)[0].numpy().copy() for _ in range(3)]
    R = Loader(paths[0], B=B, T=T, shuffle=True, seed=5, dtype=ojas.int32)
    R.set_state(st)
    for w in want:
        np.testing.assert_array_equal(R.next()[0].numpy(), w)
    with pytest.raises(ojas.StateError):
        Loader(paths[0], B=2, T=T).set_state(st)
    with pytest.raises(ojas.CorruptError):
        Loader(paths, B=B, T=T, vocab_size=251)
    with pytest.raises(ojas.ShapeError):
        Loader(paths[0], B=100, T=T)
