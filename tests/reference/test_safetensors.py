"""safetensors interoperability between ojas and the format as torch/HF lay
it out, and checkpoints readable from Python.

No `safetensors` Python package is available, so this file carries a small
writer and reader of the format that follow the safetensors library's
layout: u64 little-endian header length, JSON header with "__metadata__"
first, padded with spaces to 8 bytes, tensor data sorted by dtype size
(largest first) then name, contiguous, little-endian.

ojas is driven through ctypes on the shared library ($OJAS_LIB, set by
`make test-reference`; default build/libojas.so).
"""
import ctypes
import json
import os
import struct
import tempfile

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB_PATH = os.environ.get("OJAS_LIB", os.path.join(ROOT, "build", "libojas.so"))

OJ_OK, OJ_ERR_CORRUPT = 0, 8
# ojas dtype enum (include/ojas/core.h) <-> safetensors names
OJ = {"F32": 0, "F64": 1, "BF16": 2, "F16": 3, "I64": 4, "I32": 5, "U32": 6, "U16": 7,
      "U8": 8, "BOOL": 9}
SIZE = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "U32": 4, "U16": 2,
        "U8": 1, "BOOL": 1}
TORCH = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16",
         torch.float16: "F16", torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8",
         torch.bool: "BOOL"}


class Err(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * 512)]


class Entry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p)]


class Named(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int64), ("names", ctypes.POINTER(ctypes.c_char_p)),
                ("tensors", ctypes.POINTER(ctypes.c_void_p))]


@pytest.fixture(scope="module")
def lib():
    if not os.path.exists(LIB_PATH):
        pytest.skip("no ojas shared library at %s" % LIB_PATH)
    L = ctypes.CDLL(LIB_PATH)
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    sig = {
        "oj_safetensors_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(vp), ctypes.POINTER(Err)]),
        "oj_safetensors_open_memory": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t,
                                                      ctypes.POINTER(vp), ctypes.POINTER(Err)]),
        "oj_safetensors_close": (None, [vp]),
        "oj_safetensors_count": (i64, [vp]),
        "oj_safetensors_name": (ctypes.c_char_p, [vp, i64]),
        "oj_safetensors_dtype_str": (ctypes.c_char_p, [vp, i64]),
        "oj_safetensors_rank": (ctypes.c_int, [vp, i64]),
        "oj_safetensors_shape": (ctypes.POINTER(i64), [vp, i64]),
        "oj_safetensors_data": (vp, [vp, i64, ctypes.POINTER(ctypes.c_size_t)]),
        "oj_safetensors_metadata_get": (ctypes.c_char_p, [vp, ctypes.c_char_p]),
        "oj_safetensors_write": (ctypes.c_int, [ctypes.c_char_p, i64, ctypes.POINTER(Entry),
                                                ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(Err)]),
        "oj_safetensors_tensor": (vp, [vp, vp, ctypes.c_char_p]),
        "oj_engine_create": (ctypes.c_int, [vp, ctypes.POINTER(vp), ctypes.POINTER(Err)]),
        "oj_engine_free": (None, [vp]),
        "oj_from_host": (vp, [vp, ctypes.c_int, ctypes.POINTER(i64), ctypes.c_int, vp, ctypes.c_size_t]),
        "oj_to_host": (ctypes.c_int, [vp, vp, ctypes.c_size_t]),
        "oj_release": (None, [vp]),
        "oj_last_error": (ctypes.c_char_p, [vp]),
        "oj_checkpoint_save": (ctypes.c_int, [ctypes.c_char_p, i64, ctypes.POINTER(Named),
                                              ctypes.POINTER(Named), ctypes.c_char_p, ctypes.c_int,
                                              ctypes.POINTER(Err)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    return L


# ---------------------------------------------------------------- the format in Python

def raw_bytes(t):
    """Little-endian bytes of a contiguous tensor (any dtype, incl. bf16)."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def hf_save(path, tensors, metadata=None):
    """tensors: name -> (safetensors dtype, shape, bytes), laid out as the
    safetensors library writes them."""
    order = sorted(tensors, key=lambda n: (-SIZE[tensors[n][0]], n))
    header, blobs, pos = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for n in order:
        dt, shape, raw = tensors[n]
        header[n] = {"dtype": dt, "shape": list(shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def py_load(path):
    """Read a safetensors file the way the safetensors library validates it;
    returns (header text, header dict in file order, {name: bytes}, data start)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    assert 8 + n <= len(buf)
    text = buf[8:8 + n].decode("utf-8")
    header = json.loads(text)
    data = buf[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k)
                   for k, v in header.items() if k != "__metadata__")
    pos = 0
    for b, e, k in spans:
        assert b == pos, "gap or overlap at %s" % k
        info = header[k]
        numel = 1
        for d in info["shape"]:
            numel *= d
        assert e - b == numel * SIZE[info["dtype"]], k
        pos = e
    assert pos == len(data), "trailing bytes"
    return text, header, {k: data[b:e] for b, e, k in spans}, 8 + n


# ---------------------------------------------------------------- helpers

def st_open(lib, path):
    h, e = ctypes.c_void_p(), Err()
    rc = lib.oj_safetensors_open(path.encode(), ctypes.byref(h), ctypes.byref(e))
    assert rc == OJ_OK, e.message.decode()
    return h


def st_entries(lib, h):
    out = {}
    for i in range(lib.oj_safetensors_count(h)):
        name = lib.oj_safetensors_name(h, i).decode()
        rank = lib.oj_safetensors_rank(h, i)
        shape = [lib.oj_safetensors_shape(h, i)[d] for d in range(rank)]
        nb = ctypes.c_size_t()
        p = lib.oj_safetensors_data(h, i, ctypes.byref(nb))
        raw = ctypes.string_at(p, nb.value) if nb.value else b""
        out[name] = (lib.oj_safetensors_dtype_str(h, i).decode(), shape, raw)
    return out


def sample_tensors():
    g = torch.Generator().manual_seed(0)
    t = {
        "transformer.wte.weight": torch.randn(5, 3, generator=g),
        "transformer.h.0.attn.c_attn.weight": torch.randn(3, 9, generator=g, dtype=torch.float64),
        "transformer.h.0.ln_1.weight": torch.randn(3, generator=g).to(torch.bfloat16),
        "transformer.h.0.ln_1.bias": torch.randn(3, generator=g).to(torch.float16),
        "step": torch.tensor(123456789012, dtype=torch.int64),
        "tokens": torch.randint(-1000, 1000, (2, 3), generator=g, dtype=torch.int32),
        "mask": torch.tensor([[True, False, True]]),
        "bytes": torch.arange(7, dtype=torch.uint8),
        "empty": torch.zeros(0, 4),
    }
    out = {k: (TORCH[v.dtype], list(v.shape), raw_bytes(v)) for k, v in t.items()}
    # torch 1.13 has no uint16/uint32: numpy supplies them
    out["u16"] = ("U16", [4], np.array([0, 1, 65535, 300], dtype="<u2").tobytes())
    out["u32"] = ("U32", [2], np.array([4000000000, 7], dtype="<u4").tobytes())
    return out


# ---------------------------------------------------------------- tests

def test_hf_layout_loads_in_ojas(lib, tmp_path):
    tensors = sample_tensors()
    path = str(tmp_path / "hf.safetensors")
    hf_save(path, tensors, {"format": "pt"})
    h = st_open(lib, path)
    try:
        assert st_entries(lib, h) == tensors
        assert lib.oj_safetensors_metadata_get(h, b"format") == b"pt"
    finally:
        lib.oj_safetensors_close(h)


def test_ojas_files_follow_the_format(lib, tmp_path):
    tensors = sample_tensors()
    names = sorted(tensors)
    keep = []
    entries = (Entry * len(names))()
    for i, n in enumerate(names):
        dt, shape, raw = tensors[n]
        shp = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        buf = ctypes.create_string_buffer(raw, max(len(raw), 1))
        keep += [shp, buf]
        entries[i] = Entry(n.encode(), OJ[dt], len(shape), shp, ctypes.cast(buf, ctypes.c_void_p))
    meta = (ctypes.c_char_p * 5)(b"format", b"pt", b"origin", b"ojas", None)
    path = str(tmp_path / "ojas.safetensors")
    e = Err()
    assert lib.oj_safetensors_write(path.encode(), len(names), entries, meta, ctypes.byref(e)) == OJ_OK, \
        e.message
    text, header, data, start = py_load(path)
    keys = list(header)
    assert keys[0] == "__metadata__" and header["__metadata__"] == {"format": "pt", "origin": "ojas"}
    assert keys[1:] == sorted(keys[1:]), "tensor keys sorted"
    assert start % 8 == 0 and text.rstrip(" ").endswith("}"), "8-byte aligned, space padded"
    for n in names:
        dt, shape, raw = tensors[n]
        assert header[n]["dtype"] == dt and header[n]["shape"] == shape
        assert data[n] == raw
        assert (start + header[n]["data_offsets"][0]) % SIZE[dt] == 0, "aligned to element"
    # and torch reads the values back
    w = header["transformer.wte.weight"]
    got = torch.frombuffer(bytearray(data["transformer.wte.weight"]), dtype=torch.float32)
    assert torch.equal(got.reshape(w["shape"]),
                       torch.frombuffer(bytearray(tensors["transformer.wte.weight"][2]),
                                        dtype=torch.float32).reshape(5, 3))


def test_tensors_through_an_engine(lib, tmp_path):
    tensors = sample_tensors()
    path = str(tmp_path / "hf.safetensors")
    hf_save(path, tensors)
    eng, e = ctypes.c_void_p(), Err()
    assert lib.oj_engine_create(None, ctypes.byref(eng), ctypes.byref(e)) == OJ_OK, e.message
    h = st_open(lib, path)
    try:
        for n, (dt, shape, raw) in tensors.items():
            t = lib.oj_safetensors_tensor(h, eng, n.encode())
            assert t, lib.oj_last_error(eng)
            out = ctypes.create_string_buffer(max(len(raw), 1))
            assert lib.oj_to_host(t, out, len(raw)) == OJ_OK
            assert out.raw[:len(raw)] == raw, n
            lib.oj_release(t)
    finally:
        lib.oj_safetensors_close(h)
        lib.oj_engine_free(eng)


def test_corpus_outcomes(lib):
    """The fuzz seeds: valid_* accepted, bad_* refused as OJ_ERR_CORRUPT."""
    d = os.path.join(ROOT, "tests", "fuzz", "corpus", "fuzz_safetensors")
    seen = 0
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            b = f.read()
        h, e = ctypes.c_void_p(), Err()
        rc = lib.oj_safetensors_open_memory(b, len(b), ctypes.byref(h), ctypes.byref(e))
        lib.oj_safetensors_close(h)
        want = OJ_OK if name.startswith("valid") else OJ_ERR_CORRUPT
        assert rc == want, "%s: %d %s" % (name, rc, e.message.decode(errors="replace"))
        if rc:
            assert e.message.startswith(b"safetensors")
        seen += 1
    assert seen >= 40


def test_checkpoint_readable_from_python(lib, tmp_path):
    eng, e = ctypes.c_void_p(), Err()
    assert lib.oj_engine_create(None, ctypes.byref(eng), ctypes.byref(e)) == OJ_OK
    try:
        w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        shape = (ctypes.c_int64 * 2)(2, 3)
        raw = raw_bytes(w)
        t = lib.oj_from_host(eng, 2, shape, OJ["F32"], ctypes.c_char_p(raw), len(raw))
        assert t
        names = (ctypes.c_char_p * 1)(b"lm_head.weight")
        ts = (ctypes.c_void_p * 1)(t)
        model = Named(1, names, ts)
        root = str(tmp_path / "out")
        state = json.dumps({"rng": {"seed": 3, "offset": 17}, "data": {"pos": 4096}})
        for step in (100, 200, 300):
            assert lib.oj_checkpoint_save(root.encode(), step, ctypes.byref(model), None,
                                          state.encode(), 2, ctypes.byref(e)) == OJ_OK, e.message
        assert sorted(os.listdir(root)) == ["ckpt-000200", "ckpt-000300", "latest"]
        with open(os.path.join(root, "latest")) as f:
            assert f.read() == "ckpt-000300\n"
        ck = os.path.join(root, "ckpt-000300")
        _, header, data, _ = py_load(os.path.join(ck, "model.safetensors"))
        assert header["lm_head.weight"]["shape"] == [2, 3] and data["lm_head.weight"] == raw
        _, header, data, _ = py_load(os.path.join(ck, "optimizer.safetensors"))
        assert header == {} and data == {}
        with open(os.path.join(ck, "state.json")) as f:
            st = json.load(f)
        assert st["step"] == 300 and st["rng"] == {"seed": 3, "offset": 17}
        with open(os.path.join(ck, "manifest.json")) as f:
            man = json.load(f)
        assert man["format"] == "ojas-checkpoint" and man["step"] == 300
        for name, info in man["files"].items():
            assert os.path.getsize(os.path.join(ck, name)) == info["bytes"]
            assert len(info["xxh3_64"]) == 16
        lib.oj_release(t)
    finally:
        lib.oj_engine_free(eng)
