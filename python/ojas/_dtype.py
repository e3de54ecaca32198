"""ojas dtypes as objects with torch's names (ojas.float32, ojas.bfloat16, ...)."""
import numpy as np


class dtype:
    """An element type. `_code` is the oj_dtype value of include/ojas/core.h."""

    __slots__ = ("name", "_code", "itemsize", "is_floating_point", "_np")

    def __init__(self, name, code, itemsize, is_float, np_dtype):
        self.name = name
        self._code = code
        self.itemsize = itemsize
        self.is_floating_point = is_float
        self._np = np_dtype

    def __repr__(self):
        return "ojas." + self.name

    def __reduce__(self):
        return (as_dtype, (self.name,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


float32 = dtype("float32", 0, 4, True, np.float32)
float64 = dtype("float64", 1, 8, True, np.float64)
bfloat16 = dtype("bfloat16", 2, 2, True, None)  # numpy has no bf16
float16 = dtype("float16", 3, 2, True, np.float16)
int64 = dtype("int64", 4, 8, False, np.int64)
int32 = dtype("int32", 5, 4, False, np.int32)
uint32 = dtype("uint32", 6, 4, False, np.uint32)
uint16 = dtype("uint16", 7, 2, False, np.uint16)
uint8 = dtype("uint8", 8, 1, False, np.uint8)
bool_ = dtype("bool", 9, 1, False, np.bool_)

BY_CODE = (float32, float64, bfloat16, float16, int64, int32, uint32, uint16, uint8, bool_)
ALIASES = {"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
           "bool": bool_}
_FROM_NP = {np.dtype(d._np): d for d in BY_CODE if d._np is not None}


def from_numpy_dtype(npdt):
    """The ojas dtype of a numpy dtype; DtypeError when there is none."""
    d = _FROM_NP.get(np.dtype(npdt))
    if d is None:
        from ojas._C import DtypeError
        raise DtypeError("numpy dtype %s has no ojas equivalent" % np.dtype(npdt))
    return d


def as_dtype(d):
    """dtype from an ojas dtype, a name ('f32', 'float32', 'float') or a numpy dtype."""
    if isinstance(d, dtype):
        return d
    if isinstance(d, str):
        short = {"f32": float32, "f64": float64, "bf16": bfloat16, "f16": float16, "i64": int64,
                 "i32": int32, "u32": uint32, "u16": uint16, "u8": uint8}
        if d in short:
            return short[d]
        if d in ALIASES:
            return ALIASES[d]
        for x in BY_CODE:
            if x.name == d:
                return x
        from ojas._C import DtypeError
        raise DtypeError("unknown dtype name %r" % d)
    return from_numpy_dtype(d)
