#!/usr/bin/env python3
"""Write the seed corpora of the fuzz targets (deterministic; stdlib only,
plus Debian's libxxhash through ctypes for checkpoint hashes).

    python3 tests/fuzz/make_corpus.py

tests/fuzz/corpus/fuzz_safetensors/  valid files laid out as torch/HF write
    them and one malformed file per rule the reader enforces.
tests/fuzz/corpus/fuzz_checkpoint/   checkpoints in fuzz_checkpoint.c's
    layout: flags byte, then manifest|OJSEP|state|OJSEP|model|OJSEP|optim.
"""
import ctypes
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"|OJSEP|"

SIZES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "U32": 4,
         "U16": 2, "U8": 1, "BOOL": 1, "I8": 1, "I16": 2, "U64": 8}


def frame(header_bytes, data=b"", pad=True):
    """8-byte length, header (space padded to 8), data."""
    if pad:
        header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + data


def hf_file(tensors, metadata=None):
    """tensors: {name: (dtype, shape, bytes)}, laid out as the safetensors
    library does: data sorted by dtype size (largest first) then name,
    header in data order with __metadata__ first, spaces to 8 bytes."""
    order = sorted(tensors, key=lambda n: (-SIZES[tensors[n][0]], n))
    header, data, pos = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for n in order:
        dt, shape, raw = tensors[n]
        header[n] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        data += raw
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return frame(text, data)


def raw_header(text, data=b"", pad=True):
    return frame(text if isinstance(text, bytes) else text.encode(), data, pad)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def safetensors_seeds():
    s = {}
    s["valid_empty"] = hf_file({})
    s["valid_metadata_only"] = hf_file({}, {"format": "pt"})
    s["valid_gpt2_like"] = hf_file({
        "transformer.wte.weight": ("F32", [4, 2], f32(*range(8))),
        "transformer.h.0.ln_1.bias": ("F32", [2], f32(0.5, -0.5)),
        "transformer.h.0.attn.bias": ("U8", [1, 1, 2, 2], bytes([1, 0, 1, 1])),
        "step": ("I64", [], struct.pack("<q", 1234)),
    }, {"format": "pt", "source": "ojas"})
    s["valid_all_dtypes"] = hf_file({
        dt.lower(): (dt, [3], bytes(range(3 * SIZES[dt]))) for dt in
        ["F64", "F32", "BF16", "F16", "I64", "I32", "U32", "U16", "U8", "BOOL"]})
    s["valid_foreign_dtypes"] = hf_file({"q": ("I8", [2, 2], b"\x01\xff\x02\xfe"),
                                         "c": ("U64", [1], b"\x00" * 8)})
    s["valid_zero_size_and_scalar"] = hf_file({"e": ("F32", [0, 7], b""),
                                               "s": ("F64", [], struct.pack("<d", 2.5))})
    s["valid_unicode_names"] = hf_file({"caf\u00e9.\u65e5": ("F16", [1], b"\x00\x3c"),
                                        "tab\tname": ("U8", [1], b"\x07")})
    s["valid_unpadded"] = raw_header(
        '{"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}', b"abc", pad=False)
    s["valid_misaligned"] = raw_header(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}}', b"\x09" + f32(1.5))
    good = s["valid_gpt2_like"]
    s["bad_truncated_data"] = good[:-3]
    s["bad_truncated_header"] = good[:20]
    s["bad_truncated_length"] = good[:5]
    s["bad_header_len_beyond_file"] = struct.pack("<Q", len(good)) + good[8:]
    s["bad_header_len_huge"] = struct.pack("<Q", 2**63 - 1) + good[8:]
    s["bad_header_len_zero"] = struct.pack("<Q", 0) + good[8:]
    s["bad_header_len_short"] = struct.pack("<Q", 8) + good[8:]
    s["bad_offsets_out_of_range"] = raw_header(
        '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', f32(1))
    s["bad_offsets_overlap"] = raw_header(
        '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        '"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2))
    s["bad_offsets_same"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1, 2))
    s["bad_offsets_gap"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"v":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', f32(1, 2, 3))
    s["bad_offsets_not_at_zero"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2))
    s["bad_offsets_reversed"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}', f32(1, 2))
    s["bad_offsets_negative"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}', f32(1))
    s["bad_offsets_float"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0.0,4]}}', f32(1))
    s["bad_offsets_huge"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551616]}}',
        f32(1))
    s["bad_dtype_mismatch"] = raw_header(
        '{"w":{"dtype":"F64","shape":[1],"data_offsets":[0,4]}}', f32(1))
    s["bad_shape_mismatch"] = raw_header(
        '{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', f32(1, 2))
    s["bad_shape_negative"] = raw_header(
        '{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', f32(1, 2))
    s["bad_shape_overflow"] = raw_header(
        '{"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}}')
    s["bad_shape_overflow_empty"] = raw_header(  # found by fuzzing: strides overflowed
        '{"w":{"dtype":"F32","shape":[429496729294,64967296,0],"data_offsets":[0,0]}}')
    s["bad_shape_not_array"] = raw_header(
        '{"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}}', f32(1, 2))
    s["bad_dtype_unknown"] = raw_header(
        '{"w":{"dtype":"F32X","shape":[1],"data_offsets":[0,4]}}', f32(1))
    s["bad_dtype_subbyte"] = raw_header(
        '{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}', b"\x00\x00")
    s["bad_missing_key"] = raw_header('{"w":{"dtype":"F32","shape":[1]}}', f32(1))
    s["bad_extra_key"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"stride":[1]}}', f32(1))
    s["bad_duplicate_names"] = raw_header(
        '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2))
    s["bad_duplicate_escaped"] = raw_header(
        '{"\\u0077":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2))
    s["bad_non_utf8_name"] = raw_header(
        b'{"bad\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1))
    s["bad_overlong_utf8_name"] = raw_header(
        b'{"\xc0\xaf":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1))
    s["bad_surrogate_name"] = raw_header(
        '{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1))
    s["bad_nul_name"] = raw_header(
        '{"a\\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1))
    s["bad_invalid_json"] = raw_header('{"w":{"dtype":"F32",', f32(1))
    s["bad_not_object"] = raw_header('[{"dtype":"F32"}]')
    s["bad_json_trailing"] = raw_header('{} {}')
    s["bad_trailing_garbage"] = good + b"\x00garbage"
    s["bad_trailing_no_tensors"] = hf_file({}) + b"\x01"
    s["bad_metadata_not_string"] = raw_header('{"__metadata__":{"k":1}}')
    s["bad_metadata_not_object"] = raw_header('{"__metadata__":"pt"}')
    s["bad_entry_not_object"] = raw_header('{"w":[0,4]}', f32(1))
    s["bad_deep_nesting"] = raw_header("{" + '"a":' * 1 + "[" * 5000 + "]" * 5000 + "}")
    return s


def xxh3(data):
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib.XXH3_64bits(data, len(data))


def checkpoint(step=7, model=None, optim=None, state=None, manifest_edit=None):
    model = hf_file(model if model is not None else {
        "w": ("F32", [2, 2], f32(1, 2, 3, 4)), "b": ("F32", [2], f32(5, 6))})
    optim = hf_file(optim if optim is not None else {
        "w.exp_avg": ("F32", [2, 2], f32(0.1, 0.2, 0.3, 0.4))})
    if state is None:
        state = json.dumps({"step": step, "ojas_version": "0.1.0",
                            "rng": {"seed": 1, "offset": 42}, "data": {"shard": 0, "pos": 96}},
                           indent=2).encode()
    files = {"model.safetensors": model, "optimizer.safetensors": optim, "state.json": state}
    manifest = {"format": "ojas-checkpoint", "format_version": 1, "step": step,
                "files": {k: {"bytes": len(v), "xxh3_64": "%016x" % xxh3(v)}
                          for k, v in files.items()}}
    if manifest_edit:
        manifest_edit(manifest)
    man = json.dumps(manifest, indent=2).encode()
    return man, state, model, optim


def pack(flags, parts):
    return bytes([flags]) + SEP.join(parts)


def checkpoint_seeds():
    s = {}
    good = checkpoint()
    for flags in range(4):
        s["valid_flags%d" % flags] = pack(flags, good)
    man, state, model, optim = good
    flipped = bytearray(model)
    flipped[-1] ^= 0x40
    s["bad_hash_model"] = pack(3, (man, state, bytes(flipped), optim))
    s["bad_truncated_model"] = pack(3, (man, state, model[:-4], optim))
    s["bad_truncated_manifest"] = pack(3, (man[:-10], state, model, optim))
    s["bad_missing_parts"] = pack(3, (man, state))
    s["bad_state_step"] = pack(3, checkpoint(state=b'{"step": 8, "ojas_version": "0.1.0"}'))
    s["bad_state_not_object"] = pack(3, checkpoint(state=b'[7]'))
    s["bad_state_no_version"] = pack(3, checkpoint(state=b'{"step": 7}'))
    s["bad_state_non_utf8"] = pack(3, checkpoint(state=b'{"step": 7, "ojas_version": "\xff"}'))
    s["bad_state_duplicate"] = pack(3, checkpoint(state=b'{"step": 7, "step": 7, "ojas_version": "x"}'))

    def drop_file(m):
        del m["files"]["state.json"]

    def extra_key(m):
        m["extra"] = 1

    def bad_hex(m):
        m["files"]["model.safetensors"]["xxh3_64"] = "XYZ"

    def version2(m):
        m["format_version"] = 2

    def neg_step(m):
        m["step"] = -1

    def wrong_format(m):
        m["format"] = "something-else"

    def bytes_str(m):
        m["files"]["model.safetensors"]["bytes"] = "12"

    for name, edit in [("drop_file", drop_file), ("extra_key", extra_key), ("bad_hex", bad_hex),
                       ("format_version2", version2), ("negative_step", neg_step),
                       ("wrong_format", wrong_format), ("bytes_string", bytes_str)]:
        s["bad_manifest_" + name] = pack(3, checkpoint(manifest_edit=edit))
    s["bad_model_shape"] = pack(3, checkpoint(model={
        "w": ("F32", [4], f32(1, 2, 3, 4)), "b": ("F32", [2], f32(5, 6))}))
    s["bad_model_dtype"] = pack(3, checkpoint(model={
        "w": ("I32", [2, 2], f32(1, 2, 3, 4)), "b": ("F32", [2], f32(5, 6))}))
    s["bad_model_missing"] = pack(3, checkpoint(model={"w": ("F32", [2, 2], f32(1, 2, 3, 4))}))
    s["bad_model_extra"] = pack(3, checkpoint(model={
        "w": ("F32", [2, 2], f32(1, 2, 3, 4)), "b": ("F32", [2], f32(5, 6)),
        "c": ("F32", [1], f32(7))}))
    s["bad_model_corrupt_unhashed"] = pack(0, (man, state, model[:-1] + b"\x00\x00", optim))
    s["latest_pointer"] = pack(0, (b"ckpt-000100\n",))
    s["latest_pointer_bad"] = pack(0, (b"ckpt-+00100\n",))
    return s


def write(dirname, seeds):
    d = os.path.join(HERE, "corpus", dirname)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print("%s: %d seeds" % (d, len(seeds)))


if __name__ == "__main__":
    write("fuzz_safetensors", safetensors_seeds())
    write("fuzz_checkpoint", checkpoint_seeds())
