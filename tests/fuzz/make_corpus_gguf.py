#!/usr/bin/env python3
"""Write the seed corpus of fuzz_gguf (deterministic; stdlib only).

    python3 tests/fuzz/make_corpus_gguf.py

tests/fuzz/corpus/fuzz_gguf/  valid GGUF files (every metadata type,
    F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q4_K tensors, alignment 32 and 64, versions
    2 and 3, no tensors, a GPT-2 byte-level BPE tokenizer) and one
    malformed file per rule the reader enforces (include/ojas/gguf.h).
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz_gguf")

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
       BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type: (block elements, block bytes)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144),
        30: (1, 2)}


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += value(et, it)
        return out
    return struct.pack(FMT[t], v)


def nbytes(gt, dims):
    be, bb = GGML[gt]
    n = dims[0] // be * bb
    for d in dims[1:]:
        n *= d
    return n


def gguf(kvs, tensors, version=3, align=32, pad_last=True):
    """kvs: [(key, type, value)]; tensors: [(name, ggml type, dims)] with
    deterministic bytes."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + value(t, v)
    off, datas = 0, []
    for name, gt, dims, *declared in tensors:
        # declared: a type to write in the info instead of the one sized
        n = nbytes(gt, dims)
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(
            struct.pack("<Q", d) for d in dims) + struct.pack(
                "<IQ", declared[0] if declared else gt, off)
        datas.append(bytes((i * 7 + len(name)) % 251 for i in range(n)))
        off += (n + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    for i, d in enumerate(datas):
        out += d
        if pad_last or i + 1 < len(datas):
            out += b"\0" * (-len(d) % align)
    return out


def f16(x):
    return struct.pack("<e", x)


def gpt2_byte_tokens():
    # GPT-2's bytes_to_unicode: printable bytes as themselves, the rest
    # shifted to U+0100 upwards, in byte order
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def valid_files():
    every = [("general.architecture", STR, "llama"), ("t.u8", U8, 7), ("t.i8", I8, -7),
             ("t.u16", U16, 700), ("t.i16", I16, -700), ("t.u32", U32, 70000),
             ("t.i32", I32, -70000), ("t.f32", F32, 0.5), ("t.bool", BOOL, 1),
             ("t.u64", U64, 2 ** 40), ("t.i64", I64, -2 ** 40), ("t.f64", F64, 0.25),
             ("tokenizer.ggml.tokens", ARR, (STR, ["a", "b", "\u00e9"])),
             ("t.arr_f32", ARR, (F32, [1.0, 2.0])), ("t.arr_bool", ARR, (BOOL, [0, 1])),
             ("t.empty", ARR, (I32, []))]
    # a valid q4_0 block: f16 scale then 16 nibble bytes (data here is arbitrary bytes,
    # which is any valid block too)
    tensors = [("token_embd.weight", 0, [8, 4]), ("blk.0.attn_q.weight", 8, [64, 2]),
               ("blk.0.ffn_up.weight", 2, [32, 3]), ("blk.0.ffn_down.weight", 3, [32, 1]),
               ("output_norm.weight", 1, [8]), ("output.weight", 30, [4, 2]),
               ("blk.0.k4.weight", 12, [256])]
    return {
        "every_type": gguf(every, tensors),
        "align64": gguf([("general.alignment", U32, 64)] + every[:3], tensors[:3], align=64),
        "version2": gguf(every[:2], tensors[:2], version=2),
        "no_tensors": gguf(every, []),
        "empty": gguf([], []),
        "last_unpadded": gguf(every[:1], [("a", 0, [3])], pad_last=False),
        "rank4": gguf([], [("r4", 0, [2, 1, 3, 1])]),
        "tokenizer_gpt2": gguf([("tokenizer.ggml.model", STR, "gpt2"),
                                ("tokenizer.ggml.tokens", ARR,
                                 (STR, gpt2_byte_tokens() + ["ab", "\u0120a", "<|endoftext|>",
                                                            "<|pad_259|>"])),
                                ("tokenizer.ggml.token_type", ARR, (I32, [1] * 258 + [3, 5])),
                                ("tokenizer.ggml.merges", ARR, (STR, ["a b", "\u0120 a"])),
                                ("tokenizer.ggml.eos_token_id", U32, 258)], []),
    }


def bad_files(ok):
    tens = [("a", 0, [8])]
    return {
        "bad_magic": b"GGUX" + ok[4:],
        "bad_version": ok[:4] + struct.pack("<I", 4) + ok[8:],
        "bad_truncated_header": ok[:20],
        "bad_truncated_data": ok[:-40],
        "bad_trailing": ok + b"\xee",
        "bad_count_huge": ok[:8] + struct.pack("<Q", 2 ** 60) + ok[16:],
        "bad_key_repeated": gguf([("k", U8, 1), ("k", U8, 2)], []),
        "bad_key_empty": gguf([("", U8, 1)], []),
        "bad_key_utf8": gguf([(b"\xff", U8, 1)], []),
        "bad_value_type": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack(
            "<I", 13) + b"\x01",
        "bad_nested_array": gguf([("k", ARR, (ARR, []))], []),
        "bad_bool": gguf([("k", BOOL, 2)], []),
        "bad_alignment": gguf([("general.alignment", U32, 48)], tens),
        "bad_alignment_type": gguf([("general.alignment", U64, 32)], tens),
        "bad_name_repeated": gguf([], [("a", 0, [8]), ("a", 0, [8])]),
        "bad_name_long": gguf([], [("n" * 64, 0, [8])]),
        "bad_ndims": gguf([], [("a", 0, [1, 1, 1, 1, 1])]),
        "bad_dim_zero": gguf([], [("a", 0, [0])]),
        "bad_ggml_type": gguf([], [("a", 0, [8], 4)]),
        "bad_block": gguf([], [("a", 0, [16], 8)]),
        "bad_offset": gguf([], [("a", 0, [8]), ("b", 0, [8])]).replace(
            struct.pack("<IQ", 0, 32), struct.pack("<IQ", 0, 0), 1),
    }


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    ok = valid_files()
    files = dict(ok)
    files.update(bad_files(ok["every_type"]))
    for name, data in sorted(files.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
