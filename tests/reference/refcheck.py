"""Tolerances, dtype names and random inputs shared by the PyTorch reference
tests: `rand` draws inputs, `assert_close` judges a result against torch's.
dtypes are named "f32", "f64", "bf16", "f16", "i64", "i32", "u8", "bool";
pkgcheck.py compares the package's ops with torch over these."""

import numpy as np
import torch


# Relative tolerance per dtype (the issue's ~1e-5 f32, ~1e-12 f64); the
# absolute floor is the same fraction of the reference's largest magnitude
# (at least 1), so results that cancel to near zero are judged on the scale
# of the computation, not relative to a tiny number.
RTOL = {"f32": 1e-5, "f64": 1e-12, "bf16": 1e-2, "f16": 1e-3}

TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
            "f16": torch.float16, "i64": torch.int64, "i32": torch.int32,
            "u8": torch.uint8, "bool": torch.bool}
OJ_OF_TORCH = {v: k for k, v in TORCH_DT.items()}
NP_OF = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64,
         "i32": np.int32, "u8": np.uint8, "bool": np.bool_}


def rand(rng, shape, dtype="f32", low=0.1, high=2.0, positive=False):
    """Random non-zero array: |x| in [low, high), random sign unless
    positive. Integer dtypes get non-zero integers in [-9, 9]."""
    shape = tuple(shape)
    if dtype in ("i64", "i32", "u8"):
        v = rng.integers(1, 10, size=shape)
        if not positive and dtype != "u8":
            v = v * rng.choice([-1, 1], size=shape)
        return v.astype(NP_OF[dtype])
    if dtype == "bool":
        return rng.random(shape) < 0.5
    v = rng.uniform(low, high, size=shape)
    if not positive:
        v = v * rng.choice([-1.0, 1.0], size=shape)
    return v.astype(NP_OF[dtype])


def assert_close(got, ref, dtype, what="", rtol=None):
    """got/ref numpy arrays; float dtypes within RTOL, others exact."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, "%s: shape %s, torch %s" % (what, got.shape, ref.shape)
    if dtype not in RTOL:
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    rt = RTOL[dtype] if rtol is None else rtol
    g64, r64 = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r64)
    assert np.array_equal(np.isnan(g64), np.isnan(r64)), "%s: NaN positions differ" % what
    assert np.array_equal(g64[~finite & ~np.isnan(r64)], r64[~finite & ~np.isnan(r64)]), \
        "%s: infinities differ" % what
    scale = max(1.0, float(np.max(np.abs(r64[finite]))) if finite.any() else 1.0)
    np.testing.assert_allclose(g64[finite], r64[finite], rtol=rt, atol=rt * scale * 1e-1,
                               err_msg="%s (dtype %s, rtol %g)" % (what, dtype, rt))


__all__ = ["rand", "assert_close", "RTOL", "TORCH_DT", "OJ_OF_TORCH", "NP_OF"]
