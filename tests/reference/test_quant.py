"""The quantized formats' bytes against llama.cpp's: an independent numpy port
of ggml's reference quantizers (ggml-quants.c: quantize_row_q8_0_ref,
quantize_row_q4_0_ref, quantize_row_q4_1_ref, quantize_row_q4_K_ref with
make_qkx2_quants and nearest_int; block structs of ggml-common.h), every
operation in float32 as in the C, compared byte for byte with
oj_quantize_row, and the dequantized values with ggml's dequantize_row_*
formulas."""

import ctypes as C
import os

import numpy as np
import pytest

from conftest import _build_dir

QTYPES = {"q8_0": 0, "q4_0": 1, "q4_1": 2, "q4_k": 3, "fp8": 4}
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


def _nearest_int(v):
    # ggml's nearest_int: add 1.5 * 2^23 in float32, read the mantissa bits
    t = np.array([f32(v) + f32(12582912.0)], dtype=f32).view(np.int32)[0]
    return int(t & 0x007FFFFF) - 0x00400000


def _make_qkx2_quants(x, w, nmax=15, rmin=f32(-1), rdelta=f32(0.1), nstep=20):
    """ggml's make_qkx2_quants(n=32, ..., use_mad=false): (scale, -min, L)."""
    n = len(x)
    mn, mx = x[0], x[0]
    sum_w = w[0]
    sum_x = f32(sum_w * x[0])
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        sum_w = f32(sum_w + w[i])
        sum_x = f32(sum_x + f32(w[i] * x[i]))
    if mn > 0:
        mn = f32(0)
    if mx == mn:
        return f32(0), f32(-mn), [0] * n
    iscale = f32(f32(nmax) / f32(mx - mn))
    scale = f32(f32(1) / iscale)
    L = []
    best = f32(0)
    for i in range(n):
        l = max(0, min(nmax, _nearest_int(f32(iscale * f32(x[i] - mn)))))
        L.append(l)
        diff = f32(f32(f32(scale * f32(l)) + mn) - x[i])
        best = f32(best + f32(w[i] * f32(diff * diff)))
    for step in range(nstep + 1):
        iscale = f32(f32(f32(rmin + f32(rdelta * f32(step))) + f32(nmax)) / f32(mx - mn))
        sl = sl2 = sxl = f32(0)
        aux = []
        for i in range(n):
            l = max(0, min(nmax, _nearest_int(f32(iscale * f32(x[i] - mn)))))
            aux.append(l)
            wl = f32(w[i] * f32(l))
            sl = f32(sl + wl)
            sl2 = f32(sl2 + f32(wl * f32(l)))
            sxl = f32(sxl + f32(wl * x[i]))
        D = f32(f32(sum_w * sl2) - f32(sl * sl))
        if D > 0:
            this_scale = f32(f32(f32(sum_w * sxl) - f32(sum_x * sl)) / D)
            this_min = f32(f32(f32(sl2 * sum_x) - f32(sl * sxl)) / D)
            if this_min > 0:
                this_min = f32(0)
                this_scale = f32(sxl / sl2)
            cur = f32(0)
            for i in range(n):
                diff = f32(f32(f32(this_scale * f32(aux[i])) + this_min) - x[i])
                cur = f32(cur + f32(w[i] * f32(diff * diff)))
            if cur < best:
                L, best, scale, mn = aux, cur, this_scale, this_min
    return scale, f32(-mn), L


def _f16(v):
    return f32(np.array([v], dtype=f32).astype(np.float16)[0])


def _scale_min_k4(j, sc):
    if j < 4:
        return sc[j] & 63, sc[j + 4] & 63
    return ((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4),
            (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4))


def ref_q4_k(x):
    out = bytearray()
    for b in range(len(x) // 256):
        blk = x[256 * b:256 * b + 256]
        scales, mins, L = [], [], [0] * 256
        max_scale = max_min = f32(0)
        for j in range(8):
            sub = blk[32 * j:32 * j + 32]
            sum_x2 = f32(0)
            for v in sub:
                sum_x2 = f32(sum_x2 + f32(v * v))
            av_x = f32(np.sqrt(f32(sum_x2 / f32(32))))
            w = [f32(av_x + abs(v)) for v in sub]
            sc, m, l = _make_qkx2_quants(sub, w)
            scales.append(sc)
            mins.append(m)
            L[32 * j:32 * j + 32] = l
            if sc > max_scale:
                max_scale = sc
            if m > max_min:
                max_min = m
        inv_scale = f32(f32(63) / max_scale) if max_scale > 0 else f32(0)
        inv_min = f32(f32(63) / max_min) if max_min > 0 else f32(0)
        s = [0] * 12
        for j in range(8):
            ls = min(63, _nearest_int(f32(inv_scale * scales[j])) & 255)
            lm = min(63, _nearest_int(f32(inv_min * mins[j])) & 255)
            if j < 4:
                s[j], s[j + 4] = ls, lm
            else:
                s[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
                s[j - 4] |= (ls >> 4) << 6
                s[j] |= (lm >> 4) << 6
        d_all = _f16(f32(max_scale / f32(63)))
        dmin_all = _f16(f32(max_min / f32(63)))
        for j in range(8):
            sc, m = _scale_min_k4(j, s)
            d = f32(d_all * f32(sc))
            if d == 0:
                continue
            dm = f32(dmin_all * f32(m))
            for i in range(32):
                l = _nearest_int(f32(f32(blk[32 * j + i] + dm) / d))
                L[32 * j + i] = max(0, min(15, l))
        out += _f16_bytes(f32(max_scale / f32(63))) + _f16_bytes(f32(max_min / f32(63)))
        out += bytes(s)
        for j in range(0, 256, 64):
            out += bytes(L[j + i] | (L[j + i + 32] << 4) for i in range(32))
    return bytes(out)


def ref_dequant_q4_k(q, k):
    """ggml's dequantize_row_q4_K, in float32."""
    y = np.zeros(k, dtype=f32)
    for b in range(k // 256):
        blk = q[144 * b:144 * b + 144]
        d = f32(np.frombuffer(blk[0:2], dtype=np.float16)[0])
        dmin = f32(np.frombuffer(blk[2:4], dtype=np.float16)[0])
        s = list(blk[4:16])
        qs = np.frombuffer(blk[16:], dtype=np.uint8)
        for j in range(8):
            sc, m = _scale_min_k4(j, s)
            lv = qs[32 * (j // 2):32 * (j // 2) + 32]
            lv = (lv & 15) if j % 2 == 0 else (lv >> 4)
            y[256 * b + 32 * j:256 * b + 32 * j + 32] = (
                f32(d * f32(sc)) * lv.astype(f32) - f32(dmin * f32(m)))
    return y


def _e4m3_values():
    """The values of the positive finite OCP FP8 E4M3 codes 0x00 .. 0x7E
    (exponent bias 7, 3 mantissa bits, subnormals m 2^-9; 0x7F is NaN),
    increasing with the code."""
    v = []
    for c in range(0x7F):
        e, m = c >> 3, c & 7
        v.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(v)


E4M3 = _e4m3_values()


def _e4m3_code(t):
    """t (a float32 value) to E4M3 from the value table: the nearest value,
    ties to the even code (the even mantissa), saturated at 448."""
    a = abs(float(t))
    if a >= 448:
        c = 0x7E
    else:
        i = int(np.searchsorted(E4M3, a))  # E4M3[i - 1] < a <= E4M3[i]
        if E4M3[i] == a:
            c = i
        else:
            dl, dh = a - E4M3[i - 1], E4M3[i] - a
            c = i - 1 if dl < dh else i if dh < dl else (i - 1 if (i - 1) % 2 == 0 else i)
    return c | (0x80 if np.signbit(t) else 0)


def ref_fp8(x):
    """fp8 (include/ojas/quant.h): s = amax / 448 in float32, written as
    16 bytes (s, then zeros), then each x / s (float32) as E4M3."""
    amax = f32(0)
    for v in x:
        amax = max(amax, abs(v))
    s = f32(amax / f32(448))
    out = bytearray(np.array([s], dtype=f32).tobytes()) + bytearray(12)
    for v in x:
        out.append(_e4m3_code(f32(v / s)) if s != 0 else 0)
    return bytes(out)


def ref_dequant_fp8(q, k):
    s = np.frombuffer(q[0:4], dtype=f32)[0]
    y = np.zeros(k, dtype=f32)
    for j in range(k):
        c = q[16 + j]
        y[j] = f32(s * f32((-1 if c & 0x80 else 1) * E4M3[c & 0x7F]))
    return y


def ref_dequant(name, q, k):
    """ggml's dequantize_row_q8_0 / _q4_0 / _q4_1 / _q4_K, in float32 (and
    fp8's s * e4m3(q))."""
    if name == "q4_k":
        return ref_dequant_q4_k(q, k)
    if name == "fp8":
        return ref_dequant_fp8(q, k)
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


REF = {"q8_0": ref_q8_0, "q4_0": ref_q4_0, "q4_1": ref_q4_1, "q4_k": ref_q4_k, "fp8": ref_fp8}


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
    # q4_k's paths: an all-positive sub-block (min clamped to 0), one of
    # tiny values beside large ones (6-bit scale 0), one all negative
    p = rng.standard_normal(k).astype(f32)
    p[:32] = np.abs(p[:32]) + f32(0.5)
    p[32:64] *= f32(1e-4)
    p[64:96] = -np.abs(p[64:96]) - f32(2)
    rows.append(p)
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
            be = 256 if name == "q4_k" else 32
            pytest.fail("%s: byte %d (block %d) is %d, the reference gives %d"
                        % (name, i, i // (nbytes // (k // be)), got[i], want[i]))
        y = np.zeros(k, dtype=f32)
        assert L.oj_dequantize_row(QTYPES[name], out, k, y.ctypes.data, None) == 0
        np.testing.assert_array_equal(y, ref_dequant(name, want, k))


def test_fp8_ties_and_saturation():
    """fp8 rounding where it is decided: with amax 448 (s = 1, x / s = x)
    every midpoint of two neighbouring E4M3 values goes to the even code,
    a value just off it to the nearer one, values past 448 (only the
    row's extreme reaches 448 with its own scale; 1e-3 above it after the
    division) saturate, signs kept."""
    L = _lib()
    mids = (E4M3[:-1] + E4M3[1:]) / 2
    x = np.concatenate([[448.0], mids, -mids, np.nextafter(mids.astype(f32), f32(0)),
                        [447.99, 1e-5, -1e-5, 0.0]]).astype(f32)
    x = np.concatenate([x, np.zeros((-len(x)) % 32, dtype=f32)])
    k = len(x)
    out = (C.c_uint8 * L.oj_qtype_row_bytes(QTYPES["fp8"], k))()
    assert L.oj_quantize_row(QTYPES["fp8"], x.ctypes.data, k, out, None) == 0
    got, want = bytes(out), ref_fp8(x)
    assert np.frombuffer(got[:4], dtype=f32)[0] == f32(1)
    bad = [i for i in range(len(got)) if got[i] != want[i]]
    assert not bad, "fp8: byte %d is %#x, the reference %#x (x = %r)" % (
        bad[0], got[bad[0]], want[bad[0]], x[bad[0] - 16])
    # the ties themselves: even codes only
    codes = np.frombuffer(got[17:17 + len(mids)], dtype=np.uint8)
    assert np.all(codes % 2 == 0)


def test_q4_k_bytes_many_superblocks(rng):
    """q4_k's fit picks among 21 candidate scales per sub-block: 24
    super-blocks of three distributions (small normal weights, Laplace,
    heavy-tailed cubes) reach the candidates whose choice differs in the
    last bits (a port with rdelta 0.1001 instead of 0.1 differs here)."""
    L = _lib()
    rows = [rng.standard_normal(2048).astype(f32) * f32(0.02),
            rng.laplace(size=2048).astype(f32),
            (rng.standard_normal(2048) ** 3).astype(f32)]
    for x in rows:
        nbytes = L.oj_qtype_row_bytes(QTYPES["q4_k"], len(x))
        out = (C.c_uint8 * nbytes)()
        assert L.oj_quantize_row(QTYPES["q4_k"], x.ctypes.data, len(x), out, None) == 0
        got, want = bytes(out), ref_q4_k(x)
        bad = [i for i in range(nbytes) if got[i] != want[i]]
        assert not bad, "q4_k: %d bytes differ, first %d (super-block %d)" % (
            len(bad), bad[0], bad[0] // 144)
