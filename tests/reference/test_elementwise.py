"""Elementwise ops of include/ojas/ops.h vs PyTorch: forward and gradients,
f32 and f64, broadcast, non-contiguous, empty and rank-0 shapes, type
promotion, comparisons and logical ops; through the Python package's raw
bindings (ojas._C)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ojpkg import ojas
from pkgcheck import assert_close, check, dt, rand
from refcheck import TORCH_DT

OJ_DT = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16",
         "i64": "int64", "i32": "int32", "u8": "uint8", "bool": "bool"}


def ojdt(name):
    """The package's dtype of refcheck's dtype name."""
    return getattr(ojas, OJ_DT[name])

# name -> (torch reference, positive-only domain, extra scalar args)
UNARY = {
    "neg": (torch.neg, False, ()),
    "abs": (torch.abs, False, ()),
    "exp": (torch.exp, False, ()),
    "log": (torch.log, True, ()),
    "log1p": (torch.log1p, True, ()),
    "sqrt": (torch.sqrt, True, ()),
    "rsqrt": (torch.rsqrt, True, ()),
    "square": (torch.square, False, ()),
    "sign": (torch.sign, False, ()),
    "reciprocal": (torch.reciprocal, False, ()),
    "sin": (torch.sin, False, ()),
    "cos": (torch.cos, False, ()),
    "relu": (torch.relu, False, ()),
    "leaky_relu": (F.leaky_relu, False, (0.07,)),
    "gelu": (F.gelu, False, ()),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), False, ()),
    "silu": (F.silu, False, ()),
    "sigmoid": (torch.sigmoid, False, ()),
    "tanh": (torch.tanh, False, ()),
    "softplus": (F.softplus, False, (2.0, 3.0)),  # beta x crosses the threshold
    "elu": (F.elu, False, (0.8,)),
    "mish": (F.mish, False, ()),
    "pow_scalar": (torch.pow, False, (3.0,)),
    "clamp": (torch.clamp, False, (-0.5, 0.7)),
    "affine": (lambda x, s, b: x * s + b, False, (1.7, -0.3)),
    "add_scalar": (torch.add, False, (0.375,)),
    "mul_scalar": (torch.mul, False, (-1.25,)),
}

BINARY = {
    "add": (torch.add, False),
    "sub": (torch.sub, False),
    "mul": (torch.mul, False),
    "div": (torch.div, False),
    "pow": (torch.pow, True),  # positive base
    "maximum": (torch.maximum, False),
    "minimum": (torch.minimum, False),
}

COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
           "ge": torch.ge}
LOGICAL = {"logical_and": torch.logical_and, "logical_or": torch.logical_or,
           "logical_xor": torch.logical_xor}


BROADCAST_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (4,)),
    ((5,), (2, 1, 5)),
    ((), (3, 2)),
    ((2, 3), ()),
    ((), ()),
    ((0, 3), (1, 3)),
    ((2, 0, 4), (4,)),
]


# ------------------------------------------------------------------ unary

@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5), (), (0, 4)])
def test_unary(engine, dtype, rng, name, shape):
    ref, pos, args = UNARY[name]
    check(engine, name, [rand(rng, shape, dtype, positive=pos)], *args, ref=ref)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_noncontiguous(engine, dtype, rng, name):
    ref, pos, args = UNARY[name]
    check(engine, name, [rand(rng, (4, 6), dtype, positive=pos)], *args, ref=ref, noncontig=True)


@pytest.mark.ops("sigmoid", "tanh", "silu", "gelu", "gelu_tanh", "mish", "elu", "exp", "softplus")
def test_unary_wide_range(engine, dtype, rng):
    # Large magnitudes: saturation of sigmoid/tanh, softplus linear region.
    x = rand(rng, (64,), dtype, low=0.5, high=30.0)
    for name in ("sigmoid", "tanh", "silu", "gelu", "gelu_tanh", "mish", "elu", "exp"):
        ref, _, args = UNARY[name]
        check(engine, name, [x], *args, ref=ref)
    check(engine, "softplus", [x], 1.0, 20.0, ref=F.softplus)


def _f64_activation(name, x):
    """The activations in float64 from forms without cancellation (gelu
    through erfc: torch's 1 + erf is 0 from x = -8.4 on even in float64)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x))
        if name == "tanh":
            return np.tanh(x)
        if name == "silu":
            return x / (1.0 + np.exp(-x))
        if name == "gelu_tanh":
            return x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * np.array([math.erfc(-v / math.sqrt(2.0)) if not math.isnan(v) else v
                                   for v in x])


@pytest.mark.ops("sigmoid", "tanh", "silu", "gelu", "gelu_tanh")
@pytest.mark.parametrize("numerics", ["fast", "exact"])
def test_activations_saturated_f64(numerics):
    """f32 activations against float64 on saturated inputs (|x| in [40, 1e4]),
    the left tails, infinities and subnormals. FAST numerics flush
    subnormal results and intermediates to zero, so values below
    FLT_MIN * |x| may be 0 there; EXACT keeps them to a few subnormal steps.
    Where PyTorch's float32 result is accurate (|x| <= 5) it is compared as
    well; PyTorch and float64 give NaN at -inf for silu and the gelus
    (-inf * 0)."""
    tiny = np.finfo(np.float32).tiny
    x = np.concatenate([
        np.geomspace(40.0, 1e4, 100), -np.geomspace(40.0, 1e4, 100),
        np.arange(-106.0, -80.0, 0.125), np.arange(-20.0, 20.0, 0.0625),
        [0.0, -0.0, 1e-40, -1e-40, tiny, -tiny, np.inf, -np.inf]]).astype(np.float32)
    with ojas.Engine(threads=2, numerics=numerics) as e:
        t = ojas.tensor(x, engine=e)
        for name in ("sigmoid", "tanh", "silu", "gelu", "gelu_tanh"):
            got = getattr(ojas._C, name)(t).numpy().astype(np.float64)
            want = _f64_activation(name, x.astype(np.float64))
            assert np.array_equal(np.isnan(got), np.isnan(want)), name + ": NaN positions"
            fin = np.isfinite(want)
            assert np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)]), name
            ax = np.abs(x.astype(np.float64))[fin]
            ax[np.isinf(ax)] = 0.0  # sigmoid(+-inf), tanh(+-inf): exact
            atol = (tiny if numerics == "fast" else 6e-45) * np.maximum(1.0, ax)
            tol = 1e-6 * np.abs(want[fin]) * (1.0 if name in ("tanh", "gelu") else 1.0 + ax) + atol
            if name == "gelu_tanh":  # the exp argument's rounding, ~1.6 (|x| + 0.045 |x|^3) 2^-24
                tol = tol + 1e-7 * np.abs(want[fin]) * 0.072 * ax ** 3
            bad = np.abs(got[fin] - want[fin]) > tol
            assert not bad.any(), "%s(%r) = %r, float64 %r" % (
                name, x[fin][bad][:4], got[fin][bad][:4], want[fin][bad][:4])
            near = np.abs(x) <= 5.0
            ref = UNARY[name][0](torch.tensor(x[near])).numpy()
            assert_close(got[near].astype(np.float32), ref, "f32", name + " vs torch", rtol=2e-6)


def test_pow_scalar_fractional(engine, dtype, rng):
    for e in (0.5, -1.5, 2.0, 0.0):
        check(engine, "pow_scalar", [rand(rng, (3, 4), dtype, positive=True)], e, ref=torch.pow)


def test_clamp_one_sided(engine, dtype, rng):
    x = rand(rng, (5, 4), dtype)
    check(engine, "clamp", [x], math.nan, 0.3, ref=lambda t, lo, hi: torch.clamp(t, max=hi))
    check(engine, "clamp", [x], -0.3, math.nan, ref=lambda t, lo, hi: torch.clamp(t, min=lo))


def test_leaky_relu_slopes(engine, dtype, rng):
    for s in (0.0, 0.2, -0.5, 1.5):
        check(engine, "leaky_relu", [rand(rng, (4, 4), dtype)], s, ref=F.leaky_relu)


@pytest.mark.parametrize("name", ["exp", "sqrt", "sigmoid", "reciprocal", "log"])
@pytest.mark.parametrize("idt", ["i64", "i32"])
def test_unary_int_gives_f32(engine, rng, name, idt):
    ref, _, args = UNARY[name]
    check(engine, name, [rand(rng, (3, 4), idt, positive=True)], *args, ref=ref, grad=False)


@pytest.mark.parametrize("name", ["neg", "abs", "square", "sign", "relu"])
@pytest.mark.parametrize("idt", ["i64", "i32"])
def test_unary_int_keeps_dtype(engine, rng, name, idt):
    ref, _, args = UNARY[name]
    check(engine, name, [rand(rng, (3, 4), idt)], *args, ref=ref, grad=False)


@pytest.mark.ops("isnan", "isfinite", "logical_not")
def test_isnan_isfinite_logical_not(engine, dtype, rng):
    x = rand(rng, (4, 5), dtype)
    x[0, 0], x[1, 2], x[2, 3], x[3, 1] = np.nan, np.inf, -np.inf, 0.0
    check(engine, "isnan", [x], ref=torch.isnan, grad=False)
    check(engine, "isfinite", [x], ref=torch.isfinite, grad=False)
    check(engine, "logical_not", [x], ref=torch.logical_not, grad=False)
    check(engine, "logical_not", [rng.random((3, 3)) < 0.5], ref=torch.logical_not, grad=False)
    # no grad recorded for bool outputs
    t = ojas.tensor(x, engine=engine, requires_grad=True)
    assert not ojas._C.isnan(t).requires_grad


# ------------------------------------------------------------------ binary

@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
def test_binary(engine, dtype, rng, name, shapes):
    ref, pos = BINARY[name]
    a, b = (rand(rng, s, dtype, positive=pos) for s in shapes)
    check(engine, name, [a, b], ref=ref)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_noncontiguous(engine, dtype, rng, name):
    ref, pos = BINARY[name]
    a, b = rand(rng, (4, 5), dtype, positive=pos), rand(rng, (4, 5), dtype, positive=pos)
    check(engine, name, [a, b], ref=ref, noncontig=True)
    c = rand(rng, (3, 1, 5), dtype, positive=pos)
    check(engine, name, [a, c], ref=ref, noncontig=True)


@pytest.mark.ops("mul")
def test_binary_same_input_twice(engine, dtype, rng):
    # x op x: both edges lead to one leaf; gradients must add up.
    x = rand(rng, (3, 4), dtype)
    t = ojas.tensor(x, engine=engine, requires_grad=True)
    out = ojas._C.mul(t, t)
    g = rand(rng, (3, 4), dtype)
    out.backward(ojas.tensor(g, engine=engine))
    assert_close(t.grad.numpy(), 2 * x * g, dtype, "mul(x, x) grad")


def test_pow_tensor_exponent_signs(engine, dtype, rng):
    a = rand(rng, (4, 4), dtype, positive=True, low=0.3)
    b = rand(rng, (4, 4), dtype, low=0.1, high=3.0)
    check(engine, "pow", [a, b], ref=torch.pow)


def test_pow_tensor_exponent_zero_base(engine, dtype):
    # pow(0, 0) = 1 with gradients (0, 0): d/da is masked where b == 0 (it
    # was 0 * 0^-1 = NaN); d/db where a == 0 and b >= 0; other zero-base
    # and zero-exponent cases as torch (inf, and NaN for log of a negative)
    npdt = np.float32 if dtype == "f32" else np.float64
    a = np.array([[0, 0, 0, 0, 0], [2, 0.5, -1.5, 0, 3]], dtype=npdt)
    b = np.array([[0, 1, 2, 0.5, 3], [0, 0, 2, 0, -1]], dtype=npdt)
    check(engine, "pow", [a, b], ref=torch.pow)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_max_min_ties_and_nan(engine, dtype, rng, name):
    ref = BINARY[name][0]
    a = rng.integers(-2, 3, size=(5, 6)).astype(dtype == "f32" and np.float32 or np.float64)
    a[a == 0] = 0.5
    b = rng.integers(-2, 3, size=(5, 6)).astype(a.dtype)
    b[b == 0] = 0.5
    assert (a == b).any()
    check(engine, name, [a, b], ref=ref)  # ties split the gradient evenly, as torch
    a[1, 1] = np.nan
    b[2, 3] = np.nan
    check(engine, name, [a, b], ref=ref, grad=False)


PROMOTE = [
    ("i64", "f32"), ("f32", "i64"), ("i32", "f64"), ("i32", "i64"), ("bool", "i32"),
    ("u8", "i64"), ("f32", "f64"), ("bool", "f32"), ("u8", "u8"), ("i32", "i32"),
]


def _promotion_cases():
    for name in ["add", "sub", "mul", "div", "maximum", "minimum"]:
        for dts in PROMOTE:
            if name == "sub" and "bool" in dts:
                continue  # torch refuses sub on bool
            marks = []
            yield pytest.param(name, dts, marks=marks, id="%s-%s-%s" % (name, dts[0], dts[1]))


@pytest.mark.parametrize("name,dts", list(_promotion_cases()))
def test_binary_type_promotion(engine, rng, name, dts):
    a, b = rand(rng, (3, 4), dts[0], positive=True), rand(rng, (1, 4), dts[1], positive=True)
    check(engine, name, [a, b], ref=BINARY[name][0])


@pytest.mark.ops("div")
def test_int_division_is_true_division(engine, rng):
    a, b = rand(rng, (3, 4), "i64"), rand(rng, (3, 4), "i64")
    out = check(engine, "div", [a, b], ref=torch.div)
    assert dt(out) == "f32"


# ------------------------------------------------------------------ comparisons

def _tied(rng, shape, dtype):
    """Small integers as floats, so that equal pairs occur."""
    return (rng.integers(-3, 4, size=shape) + 0.5).astype(np.float32 if dtype == "f32"
                                                          else np.float64)


@pytest.mark.parametrize("name", sorted(COMPARE))
@pytest.mark.parametrize("shapes", [((4, 5), (4, 5)), ((4, 1), (5,)), ((), (3,)), ((0, 2), (2,))],
                         ids=str)
def test_compare(engine, dtype, rng, name, shapes):
    a, b = _tied(rng, shapes[0], dtype), _tied(rng, shapes[1], dtype)
    out = check(engine, name, [a, b], ref=COMPARE[name])
    assert dt(out) == "bool" and not out.requires_grad


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_compare_mixed_dtypes_and_noncontig(engine, rng, name):
    a = (rng.integers(-3, 4, size=(4, 4))).astype(np.int64)
    b = _tied(rng, (4, 4), "f32") - 0.5
    check(engine, name, [a, b], ref=COMPARE[name], noncontig=True)


@pytest.mark.ops(*COMPARE)
def test_compare_nan(engine, dtype, rng):
    a, b = _tied(rng, (3, 3), dtype), _tied(rng, (3, 3), dtype)
    a[0, 0] = b[0, 0] = np.nan
    a[1, 1] = np.nan
    for name, ref in COMPARE.items():
        check(engine, name, [a, b], ref=ref)


@pytest.mark.parametrize("name", sorted(LOGICAL))
def test_logical(engine, rng, name):
    a, b = rng.random((4, 5)) < 0.5, rng.random((1, 5)) < 0.5
    check(engine, name, [a, b], ref=LOGICAL[name])
    x, y = rand(rng, (4, 5), "f32"), rand(rng, (4, 5), "i64")
    x[0, :] = 0.0
    y[:, 1] = 0
    check(engine, name, [x, y], ref=LOGICAL[name], grad=False)


# ------------------------------------------------------------------ where / cast

@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()),
                                    ((4,), (2, 1, 4), (2, 3, 1)), ((0, 4), (4,), (1, 4))],
                         ids=str)
def test_where(engine, dtype, rng, shapes):
    c = rng.random(shapes[0]) < 0.5
    a, b = rand(rng, shapes[1], dtype), rand(rng, shapes[2], dtype)
    check(engine, "where", [c, a, b], ref=torch.where)


def test_where_nonbool_cond_and_noncontig(engine, dtype, rng):
    c = rng.integers(0, 3, size=(4, 5)).astype(np.float32)
    a, b = rand(rng, (4, 5), dtype), rand(rng, (4, 5), dtype)
    check(engine, "where", [c, a, b], ref=lambda c, a, b: torch.where(c != 0, a, b),
          noncontig=True, grad_inputs=(1, 2))


def test_where_float_cond_requiring_grad(engine, dtype, rng):
    # The condition is not differentiable (as in torch): backward succeeds,
    # a and b get their gradients, cond gets none.
    c = rng.integers(0, 3, size=(4, 5)).astype(np.float32)
    a, b = rand(rng, (4, 5), dtype), rand(rng, (4, 5), dtype)
    check(engine, "where", [c, a, b], ref=lambda c, a, b: torch.where(c != 0, a, b),
          grad_inputs=(1, 2))


@pytest.mark.parametrize("src,dst", [("f32", "f64"), ("f64", "f32"), ("f32", "f32"),
                                     ("i64", "f32"), ("i32", "f64"), ("bool", "f32"),
                                     ("f32", "i32"), ("f64", "i64"), ("f32", "bool"),
                                     ("i64", "i32"), ("i32", "u8"), ("f32", "f16"),
                                     ("f16", "f32")])
def test_cast(engine, rng, src, dst):
    x = rand(rng, (3, 5), src, high=9.0)
    if dst == "u8":
        x = np.abs(x)
    grad = src in ("f32", "f64", "f16") and dst in ("f32", "f64", "f16")
    check(engine, "cast", [x], ojdt(dst), ref=lambda t, d: t.to(TORCH_DT[dst]), grad=grad,
          rtol=1e-3 if "f16" in (src, dst) else None)


def test_cast_bf16(engine, rng):
    x = rand(rng, (4, 7), "f32", high=100.0)
    t = ojas.tensor(x, engine=engine)
    out = ojas._C.cast(t, ojas.bfloat16)
    assert dt(out) == "bf16"
    want = torch.tensor(x).to(torch.bfloat16).to(torch.float32).numpy()
    back = ojas._C.cast(out, ojas.float32)  # bf16 -> f32 is exact: back holds out's values
    np.testing.assert_array_equal(back.numpy(), want)


def test_cast_grad_noncontig(engine, rng):
    check(engine, "cast", [rand(rng, (4, 3), "f32")], ojas.float64, ref=lambda t, d: t.double(),
          noncontig=True)


# ------------------------------------------------------------------ in place

@pytest.mark.ops("add_", "mul_scalar_")
def test_add_inplace(engine, dtype, rng):
    a, b = rand(rng, (3, 4), dtype), rand(rng, (4,), dtype)
    ta, tb = ojas.tensor(a, engine=engine), ojas.tensor(b, engine=engine)
    v0 = ta._version
    ojas._C.add_(ta, tb)
    assert ta._version > v0
    assert_close(ta.numpy(), a + b, dtype, "add_")
    ojas._C.mul_scalar_(ta, -2.5)
    assert_close(ta.numpy(), (a + b) * -2.5, dtype, "mul_scalar_")


@pytest.mark.ops("add_", "mul_scalar_")
def test_inplace_on_leaf_requiring_grad_is_error(engine, dtype, rng):
    ta = ojas.tensor(rand(rng, (3,), dtype), engine=engine, requires_grad=True)
    with pytest.raises(ojas.Error) as e:
        ojas._C.add_(ta, ojas.tensor(rand(rng, (3,), dtype), engine=engine))
    assert e.value.status == "OJ_ERR_STATE"
    engine.grad_enabled = False
    try:
        ojas._C.mul_scalar_(ta, 2.0)
    finally:
        engine.grad_enabled = True


@pytest.mark.ops("add")
def test_binary_shape_mismatch_is_error(engine, dtype, rng):
    with pytest.raises(ojas.Error) as e:
        ojas._C.add(ojas.tensor(rand(rng, (3, 4), dtype), engine=engine),
                    ojas.tensor(rand(rng, (5,), dtype), engine=engine))
    assert e.value.status == "OJ_ERR_SHAPE"
    assert "add" in e.value.message
