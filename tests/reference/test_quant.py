"""The quantized formats' bytes against llama.cpp's: an independent numpy port
of ggml's reference quantizers (ggml-quants.c: quantize_row_q8_0_ref,
quantize_row_q4_0_ref, quantize_row_q4_1_ref; block structs of
ggml-common.h), every operation in float32 as in the C, compared byte for
byte with oj_quantize_row, and the dequantized values with ggml's
dequantize_row_* formulas."""

import ctypes as C
import os

import numpy as np
import pytest

from conftest import _build_dir

QTYPES = {"q8_0": 0, "q4_0": 1, "q4_1": 2}
f32 = np.float32


def _f16_bytes(v):
    # ggml's GGML_FP32_TO_FP16: IEEE half, round to nearest even (numpy's too)
    return np.array([v], dtype=f32).astype(np.float16).tobytes()


def _trunc_i8(v):
    # C's (int8_t) cast of a float in range: truncation toward zero
    return int(np.trunc(v))


def ref_q8_0(x):
    out = bytearray()
    for b in range(len(x) // 32):
        blk = x[32 * b:32 * b + 32]
        amax = f32(0)
        for v in blk:
            amax = max(amax, abs(v))
        d = f32(amax / f32(127))
        idd = f32(f32(1) / d) if d != 0 else f32(0)
        out += _f16_bytes(d)
        for v in blk:
            # roundf: half away from zero
            t = f32(v * idd)
            q = int(np.sign(t) * np.floor(np.abs(t) + 0.5))
            out += np.int8(q).tobytes()
    return bytes(out)


def ref_q4_0(x):
    out = bytearray()
    for b in range(len(x) // 32):
        blk = x[32 * b:32 * b + 32]
        amax, mx = f32(0), f32(0)
        for v in blk:
            if amax < abs(v):
                amax, mx = abs(v), v
        d = f32(mx / f32(-8))
        idd = f32(f32(1) / d) if d != 0 else f32(0)
        out += _f16_bytes(d)
        for j in range(16):
            x0 = f32(blk[j] * idd)
            x1 = f32(blk[j + 16] * idd)
            xi0 = min(15, _trunc_i8(f32(x0 + f32(8.5))))
            xi1 = min(15, _trunc_i8(f32(x1 + f32(8.5))))
            out.append(xi0 | (xi1 << 4))
    return bytes(out)


def ref_q4_1(x):
    out = bytearray()
    for b in range(len(x) // 32):
        blk = x[32 * b:32 * b + 32]
        mn, mx = f32(np.finfo(f32).max), f32(-np.finfo(f32).max)
        for v in blk:
            if v < mn:
                mn = v
            if v > mx:
                mx = v
        d = f32(f32(mx - mn) / f32(15))
        idd = f32(f32(1) / d) if d != 0 else f32(0)
        out += _f16_bytes(d) + _f16_bytes(mn)
        for j in range(16):
            x0 = f32(f32(blk[j] - mn) * idd)
            x1 = f32(f32(blk[j + 16] - mn) * idd)
            xi0 = min(15, _trunc_i8(f32(x0 + f32(0.5))))
            xi1 = min(15, _trunc_i8(f32(x1 + f32(0.5))))
            out.append(xi0 | (xi1 << 4))
    return bytes(out)


def ref_dequant(name, q, k):
    """ggml's dequantize_row_q8_0 / _q4_0 / _q4_1, in float32."""
    bb = {"q8_0": 34, "q4_0": 18, "q4_1": 20}[name]
    y = np.zeros(k, dtype=f32)
    for b in range(k // 32):
        blk = q[bb * b:bb * b + bb]
        d = f32(np.frombuffer(blk[0:2], dtype=np.float16)[0])
        if name == "q8_0":
            qs = np.frombuffer(blk[2:], dtype=np.int8).astype(f32)
            y[32 * b:32 * b + 32] = qs * d
        else:
            off = 2 if name == "q4_0" else 4
            qs = np.frombuffer(blk[off:], dtype=np.uint8)
            lo, hi = (qs & 15).astype(np.int32), (qs >> 4).astype(np.int32)
            if name == "q4_0":
                y[32 * b:32 * b + 16] = (lo - 8).astype(f32) * d
                y[32 * b + 16:32 * b + 32] = (hi - 8).astype(f32) * d
            else:
                m = f32(np.frombuffer(blk[2:4], dtype=np.float16)[0])
                y[32 * b:32 * b + 16] = lo.astype(f32) * d + m
                y[32 * b + 16:32 * b + 32] = hi.astype(f32) * d + m
    return y


REF = {"q8_0": ref_q8_0, "q4_0": ref_q4_0, "q4_1": ref_q4_1}


def _lib():
    # the C functions on bytes have no binding in the package: ctypes on
    # libojas.so ($OJAS_LIB, else the one of the package's build directory)
    L = C.CDLL(os.environ.get("OJAS_LIB") or os.path.join(_build_dir(), "libojas.so"))
    L.oj_quantize_row.argtypes = [C.c_int, C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p]
    L.oj_quantize_row.restype = C.c_int
    L.oj_dequantize_row.argtypes = [C.c_int, C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p]
    L.oj_dequantize_row.restype = C.c_int
    L.oj_qtype_row_bytes.argtypes = [C.c_int, C.c_int64]
    L.oj_qtype_row_bytes.restype = C.c_size_t
    return L


def _inputs(rng):
    """Rows that reach every rounding case: normal weights, ties at .5
    steps, constant and all-zero blocks, a block whose extreme is negative,
    tiny (f16-subnormal scale) and large values."""
    k = 32 * 8
    rows = [rng.standard_normal(k).astype(f32) * f32(0.02),
            rng.uniform(-3, 3, k).astype(f32),
            (np.arange(k, dtype=f32) - f32(100)) / f32(8),  # many exact ties
            np.zeros(k, dtype=f32)]
    # exact ties of x / d: scale 1 (amax 127 for q8_0, extreme -8 for q4_0)
    t = np.tile(np.arange(-16, 16, dtype=f32) + f32(0.5), k // 32)
    t[0::64], t[32::64] = f32(127), f32(-8)
    rows.append(t)
    r = rng.standard_normal(k).astype(f32)
    r[:32] = f32(1.25)          # constant block
    r[32:64] *= f32(1e-6)        # subnormal f16 scale
    r[64:96] *= f32(1e3)
    r[100] = f32(-40)           # negative extreme
    rows.append(r)
    return rows


@pytest.mark.parametrize("name", sorted(QTYPES))
def test_bytes_equal_ggml_reference(name, rng):
    L = _lib()
    for x in _inputs(rng):
        k = len(x)
        nbytes = L.oj_qtype_row_bytes(QTYPES[name], k)
        out = (C.c_uint8 * nbytes)()
        xs = np.ascontiguousarray(x, dtype=f32)
        assert L.oj_quantize_row(QTYPES[name], xs.ctypes.data, k, out, None) == 0
        got = bytes(out)
        want = REF[name](xs)
        assert len(got) == len(want) == nbytes
        if got != want:
            i = next(i for i in range(nbytes) if got[i] != want[i])
            pytest.fail("%s: byte %d (block %d) is %d, ggml's reference gives %d"
                        % (name, i, i // (nbytes // (k // 32)), got[i], want[i]))
        y = np.zeros(k, dtype=f32)
        assert L.oj_dequantize_row(QTYPES[name], out, k, y.ctypes.data, None) == 0
        np.testing.assert_array_equal(y, ref_dequant(name, want, k))
