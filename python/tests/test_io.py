"""ojas.io: safetensors round trips, metadata, and errors; the file is read
by torch-free numpy parsing to check the layout is standard."""
import json
import struct

import numpy as np
import pytest

import ojas


def test_round_trip(tmp_path):
    m = ojas.nn.Sequential(ojas.nn.Linear(3, 4), ojas.nn.LayerNorm(4))
    sd = m.state_dict()
    sd["extra.ints"] = ojas.tensor([[1, 2], [3, 4]], dtype=ojas.int32).T  # strided
    sd["extra.bf16"] = ojas.tensor([1.5, -2.0], dtype=ojas.bfloat16)
    path = tmp_path / "m.safetensors"
    ojas.io.save_file(sd, path, metadata={"format": "pt", "step": 3})
    back = ojas.io.load_file(path)
    assert sorted(back) == sorted(sd)
    for k in sd:
        assert back[k].dtype is sd[k].dtype and back[k].tolist() == sd[k].tolist()
    assert ojas.io.load_metadata(path) == {"format": "pt", "step": "3"}
    m2 = ojas.nn.Sequential(ojas.nn.Linear(3, 4), ojas.nn.LayerNorm(4))
    m2.load_state_dict({k: v for k, v in back.items() if not k.startswith("extra")})
    np.testing.assert_array_equal(m2[0].weight.numpy(), m[0].weight.numpy())
    # the standard layout: 8-byte header length, JSON header, data
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    ent = header["0.weight"]
    assert ent["dtype"] == "F32" and ent["shape"] == [4, 3]
    lo, hi = ent["data_offsets"]
    w = np.frombuffer(raw[8 + hlen + lo:8 + hlen + hi], dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(w, m[0].weight.numpy())


def test_errors(tmp_path):
    with pytest.raises(ojas.IOError):
        ojas.io.load_file(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(ojas.CorruptError):
        ojas.io.load_file(bad)
    with pytest.raises(ojas.InvalidArgumentError):
        ojas.io.save_file({"": ojas.ones(1)}, tmp_path / "x.safetensors")
