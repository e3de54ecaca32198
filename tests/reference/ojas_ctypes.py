"""Thin ctypes binding over libojas.so for the PyTorch reference tests.

Reference tests (tests/reference)
=================================

Run them with `make test-reference` (builds build/libojas.so first), or against
any build with

    OJAS_LIB=$PWD/build-ref/libojas.so /usr/bin/python3 -m pytest -q tests/reference

They compare every op of include/ojas/ops.h with PyTorch 1.13 (Debian's
python3-torch, CPU), forward and gradients, in f32 (relative ~1e-5) and f64
(relative ~1e-12), on random non-zero inputs, including broadcast,
non-contiguous, empty and rank-0 shapes.

Adding a test for a new op is one line. `eng.call(name, *args)` looks up
`oj_<name>` (its prototype is parsed from include/ojas/*.h, so a new op needs
no binding code) and converts the arguments: Tensor, int, float, bool, dtype
names ("f32"), enum members by name ("sum" or "OJ_REDUCTION_SUM"), lists for the `(int n, const int *dims)` / `(int rank, const
int64_t *shape)` / `(oj_tensor *const *ts, int n)` pairs, None for NULL.
An `oj_tensor **` output takes True (request it) or None: oj_max(x, dim,
keepdim, True) returns (values, indices); oj_split(..., max_out, True)
returns the list of pieces.
`refcheck.check` runs the op and its torch reference on the same inputs and
compares output dtype, shape and values, then the input gradients for a
random upstream gradient, e.g. in a test function taking the `eng`, `dtype`
and `rng` fixtures of conftest.py:

    check(eng, "softplus", [rand(rng, (3, 4), dtype)], 2.0, 15.0, ref=F.softplus)

`ref` is called as ref(*torch_tensors, *scalars); pass a lambda when the torch
signature differs. Options: grad=False (no backward), noncontig=True (inputs
passed as transposed views), positive=True in `rand` for log-like domains.
Mark a test that exposes a bug in ojas `pytest.mark.xfail(reason="...")` naming
the bug; never widen a tolerance to make it pass. When a test's parameter
ids or function name do not name the op it targets, add
`@pytest.mark.ops("name", ...)`. Then regenerate the op table:
`/usr/bin/python3 scripts/ops_table.py` (docs/ops.md).

Also at hand: `t.exp()` is eng.call("exp", t); `with eng.scope():`,
`with eng.no_grad():`; t.backward(grad=None, retain_graph=False), t.grad,
t.retain_grad(), t.requires_grad_(); errors raise OjasError with .status
("OJ_ERR_SHAPE") and .message (oj_last_error), after which the engine's
error is cleared.

Ownership: a Tensor created with no scope open owns the creation reference
and releases it (oj_release) when collected or when the engine closes. One
created inside `with eng.scope():` belongs to the C scope and is marked dead
(using it raises) when the scope ends, unless `t.keep()` moved it out.
Borrowed handles (grad) are retained. Engine.close() releases every handle
still held, then can report leaks (oj_engine_live_tensors) before freeing.
"""

import ctypes as C
import os
import re
import weakref

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(_HERE, "..", ".."))
INCLUDE = os.path.join(REPO, "include", "ojas")

# ------------------------------------------------------------------ dtypes

DTYPES = ["f32", "f64", "bf16", "f16", "i64", "i32", "u32", "u16", "u8", "bool"]
DT = {name: i for i, name in enumerate(DTYPES)}
NP_OF = {
    "f32": np.float32, "f64": np.float64, "bf16": np.uint16, "f16": np.float16,
    "i64": np.int64, "i32": np.int32, "u32": np.uint32, "u16": np.uint16,
    "u8": np.uint8, "bool": np.bool_,
}
_FROM_NP = {
    np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
    np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.uint32): "u32",
    np.dtype(np.uint16): "u16", np.dtype(np.uint8): "u8", np.dtype(np.bool_): "bool",
}
FLOAT_DTYPES = ("f32", "f64", "bf16", "f16")

STATUS_NAMES = ["OJ_OK", "OJ_ERR_INVALID_ARGUMENT", "OJ_ERR_SHAPE", "OJ_ERR_DTYPE",
                "OJ_ERR_DEVICE", "OJ_ERR_CAPACITY", "OJ_ERR_OUT_OF_RANGE", "OJ_ERR_IO",
                "OJ_ERR_CORRUPT", "OJ_ERR_UNSUPPORTED", "OJ_ERR_NUMERIC", "OJ_ERR_INTERNAL",
                "OJ_ERR_STATE"]


def dtype_name(dt):
    """'f32' etc. from a name, an oj_dtype int or a numpy dtype."""
    if isinstance(dt, str):
        if dt not in DT:
            raise ValueError("unknown ojas dtype %r" % dt)
        return dt
    if isinstance(dt, (int, np.integer)):
        return DTYPES[int(dt)]
    return _FROM_NP[np.dtype(dt)]


def f32_to_bf16(a):
    """float32 array -> uint16 bf16 bits, round to nearest even (NaN kept quiet)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_to_f32(h):
    """uint16 bf16 bits -> float32 array."""
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ------------------------------------------------------------------ library

class OjDevice(C.Structure):
    _fields_ = [("type", C.c_int), ("index", C.c_int)]


class OjEngineConfig(C.Structure):
    _fields_ = [("device", OjDevice), ("numerics", C.c_int), ("threads", C.c_int),
                ("seed", C.c_uint64), ("budget_bytes", C.c_int64)]


class OjError(C.Structure):
    _fields_ = [("status", C.c_int), ("message", C.c_char * 512)]


class OjasError(Exception):
    """An ojas call failed: .status (e.g. 'OJ_ERR_SHAPE') and .message."""

    def __init__(self, status, message):
        self.status = status
        self.message = message
        super().__init__("%s: %s" % (status, message))


def _lib_path():
    p = os.environ.get("OJAS_LIB") or os.path.join(REPO, "build", "libojas.so")
    if not os.path.isabs(p):
        p = os.path.join(REPO, p)
    return p


_lib = None


def lib():
    """The loaded libojas.so with the hand-declared core functions."""
    global _lib
    if _lib is not None:
        return _lib
    L = C.CDLL(_lib_path())
    vp, i64p = C.c_void_p, C.POINTER(C.c_int64)
    decl = {
        "oj_status_name": (C.c_char_p, [C.c_int]),
        "oj_engine_config_default": (OjEngineConfig, []),
        "oj_engine_create": (C.c_int, [C.POINTER(OjEngineConfig), C.POINTER(vp), C.POINTER(OjError)]),
        "oj_engine_free": (None, [vp]),
        "oj_engine_live_tensors": (C.c_int64, [vp]),
        "oj_engine_threads": (C.c_int, [vp]),
        "oj_last_status": (C.c_int, [vp]),
        "oj_last_error": (C.c_char_p, [vp]),
        "oj_clear_error": (None, [vp]),
        "oj_scope_begin": (C.c_int, [vp]),
        "oj_scope_end": (C.c_int, [vp]),
        "oj_scope_depth": (C.c_int, [vp]),
        "oj_keep": (vp, [vp]),
        "oj_retain": (vp, [vp]),
        "oj_release": (None, [vp]),
        "oj_set_grad_enabled": (C.c_bool, [vp, C.c_bool]),
        "oj_grad_enabled": (C.c_bool, [vp]),
        "oj_rank": (C.c_int, [vp]),
        "oj_shape": (i64p, [vp]),
        "oj_strides": (i64p, [vp]),
        "oj_numel": (C.c_int64, [vp]),
        "oj_tensor_dtype": (C.c_int, [vp]),
        "oj_is_contiguous": (C.c_bool, [vp]),
        "oj_version": (C.c_uint64, [vp]),
        "oj_shares_storage": (C.c_bool, [vp, vp]),
        "oj_set_requires_grad": (vp, [vp, C.c_bool]),
        "oj_requires_grad": (C.c_bool, [vp]),
        "oj_grad": (vp, [vp]),
        "oj_zero_grad": (None, [vp]),
        "oj_from_host": (vp, [vp, C.c_int, i64p, C.c_int, vp, C.c_size_t]),
        "oj_to_host": (C.c_int, [vp, vp, C.c_size_t]),
        "oj_backward": (C.c_int, [vp, C.c_bool]),
        "oj_backward_seeded": (C.c_int, [vp, vp, C.c_bool]),
        "oj_retain_grad": (vp, [vp]),
        "oj_is_leaf": (C.c_bool, [vp]),
        "oj_grad_fn_name": (C.c_char_p, [vp]),
    }
    for name, (res, args) in decl.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    _lib = L
    return L


def status_name(st):
    return lib().oj_status_name(int(st)).decode()


# ------------------------------------------------------------------ prototypes
# Parsed from the public headers so that `call` needs no per-op code. Each
# parameter becomes a kind; an array parameter next to an int named like a
# count (n, ndims, rank, ...) folds the pair into one Python argument.

_SCALAR_KINDS = {
    "int": ("int", C.c_int), "int64_t": ("int", C.c_int64), "uint64_t": ("int", C.c_uint64),
    "int32_t": ("int", C.c_int32), "uint32_t": ("int", C.c_uint32), "size_t": ("int", C.c_size_t),
    "double": ("float", C.c_double), "float": ("float", C.c_float), "bool": ("bool", C.c_bool),
    "oj_dtype": ("dtype", C.c_int), "oj_status": ("int", C.c_int),
    "oj_numerics": ("int", C.c_int),
}
_COUNT_NAME = re.compile(r"^(n|n_?\w+|num\w*|count|rank|len\w*)$")

# Overrides for prototypes the parser cannot guess, name -> (restype kind,
# [param kinds]); kinds as produced by _param_kind.
OVERRIDES = {}


def _strip_header(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(l for l in text.split("\n") if not l.lstrip().startswith("#"))
    text = text.replace('extern "C" {', " ")
    text = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", text, flags=re.S)
    while True:
        t2 = re.sub(r"\{[^{}]*\}", " ", text)
        if t2 == text:
            break
        text = t2
    return text.replace("}", " ")


def _enum_members(raw_text):
    """{enum type name: {member name: value}} from `typedef enum x {...} x;`."""
    text = re.sub(r"/\*.*?\*/", " ", raw_text, flags=re.S)
    out = {}
    for body, name in re.findall(r"typedef\s+enum\s+\w*\s*\{([^}]*)\}\s*(\w+)\s*;", text):
        members, v = {}, -1
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            if "=" in item:
                k, val = item.split("=", 1)
                try:
                    v = int(val.strip(), 0)
                except ValueError:
                    continue
                k = k.strip()
            else:
                k, v = item, v + 1
            members[k] = v
        out[name] = members
    return out


ENUMS = {}


def enum_value(type_name, x):
    """An enum argument from an int, a member name ('OJ_REDUCTION_SUM') or
    its lower-case suffix ('sum')."""
    if isinstance(x, (int, np.integer)):
        return int(x)
    members = ENUMS.get(type_name, {})
    if x in members:
        return members[x]
    for k, v in members.items():
        if k.lower().endswith("_" + str(x).lower()):
            return v
    raise ValueError("%r is not a member of %s (%s)" % (x, type_name, ", ".join(members)))


def _param_kind(p):
    """(kind, ctype, name) of one C parameter declaration."""
    p = " ".join(p.split())
    m = re.match(r"^(.*?)([A-Za-z_]\w*)$", p)
    if not m:
        return ("unsupported", None, p)
    ty, name = m.group(1).replace(" *", "*").replace("* ", "*").strip(), m.group(2)
    if ty.endswith("*const*"):
        ty = ty[:-len("*const*")] + "*const*"  # pointer to const pointers: an input array
    ty = re.sub(r"^const ", "", ty).replace("const*", "*") if not ty.endswith("*const*") \
        else re.sub(r"^const ", "", ty)
    if ty in ("oj_tensor*",):
        return ("tensor", C.c_void_p, name)
    if ty == "oj_tensor*const*":
        return ("tensors", C.c_void_p, name)
    if ty == "oj_tensor**":
        return ("tensor_out", C.c_void_p, name)
    if ty == "oj_engine*":
        return ("engine", C.c_void_p, name)
    if ty == "int*":
        return ("ints32", C.POINTER(C.c_int), name)
    if ty == "int64_t*":
        return ("ints64", C.POINTER(C.c_int64), name)
    if ty in _SCALAR_KINDS:
        k, ct = _SCALAR_KINDS[ty]
        return (k, ct, name)
    if ty in ENUMS:
        return ("enum:" + ty, C.c_int, name)
    return ("unsupported", None, ty + " " + name)


def _ret_kind(ty):
    """(kind, ctypes restype) of a return type."""
    ty = " ".join(ty.replace("const ", "").split()).replace(" *", "*")
    if ty == "oj_tensor*":
        return "tensor", C.c_void_p
    if ty == "oj_status":
        return "status", C.c_int
    if ty == "void":
        return "void", None
    if ty == "char*":
        return "str", C.c_char_p
    if ty in _SCALAR_KINDS:
        return _SCALAR_KINDS[ty]
    if ty in ENUMS:
        return "int", C.c_int
    return "unsupported", None


class Proto:
    """One parsed prototype: name, return kind, Python-level parameters.
    params: list of (kind, name, ctype(s)); kinds 'tensor', 'tensors',
    'ints32', 'ints64' (each with a folded count), 'int', 'float', 'bool',
    'dtype', 'engine'. Folded arrays carry ('count_first'|'count_last')."""

    def __init__(self, name, ret, cparams, header):
        (self.ret, self.restype), self.name, self.header = ret, name, header
        self.cparams = cparams
        self.params = []
        self.supported = self.ret != "unsupported"
        used = set()
        for i, (k, ct, pname) in enumerate(cparams):
            if i in used:
                continue
            if k == "unsupported":
                self.supported = False
            if k in ("tensors", "ints32", "ints64"):
                prev = cparams[i - 1] if i > 0 and (i - 1) not in used else None
                nxt = cparams[i + 1] if i + 1 < len(cparams) else None
                if prev and prev[0] == "int" and _COUNT_NAME.match(prev[2]) and \
                        self.params and self.params[-1][1] == prev[2]:
                    self.params.pop()
                    self.params.append((k, pname, "count_first", prev[1], ct))
                elif nxt and nxt[0] == "int" and _COUNT_NAME.match(nxt[2]):
                    used.add(i + 1)
                    self.params.append((k, pname, "count_last", nxt[1], ct))
                else:
                    self.supported = False
                    self.params.append((k, pname, "bare", None, ct))
                used.add(i)
                continue
            self.params.append((k, pname, None, ct, None))
        self.argtypes = [ct for (_, ct, _) in cparams]

    def signature(self):
        return "%s %s(%s)" % (self.ret, self.name, ", ".join(
            "%s %s" % (k, n) for (k, n, *_rest) in self.params))


_protos = None


def protos():
    """name (without the oj_ prefix) -> Proto, from every public header."""
    global _protos
    if _protos is not None:
        return _protos
    out = {}
    raw = {}
    for h in ("core.h", "ops.h", "autograd.h"):
        path = os.path.join(INCLUDE, h)
        if os.path.exists(path):
            with open(path) as f:
                raw[h] = f.read()
            ENUMS.update(_enum_members(raw[h]))
    for h, text in raw.items():
        text = _strip_header(text)
        for stmt in text.split(";"):
            s = " ".join(stmt.split())
            if not s or s.startswith("typedef") or "..." in s or "va_list" in s:
                continue
            m = re.match(r"^(.*?)\b(oj_\w+)\s*\((.*)\)$", s)
            if not m or "(" in m.group(3):
                continue
            ret = _ret_kind(m.group(1))
            plist = m.group(3).strip()
            cparams = [] if plist in ("", "void") else [_param_kind(p) for p in plist.split(",")]
            out[m.group(2)[3:]] = Proto(m.group(2), ret, cparams, h)
    _protos = out
    return out


# ------------------------------------------------------------------ engine

class Engine:
    """An oj_engine. Use as a context manager or call close()."""

    def __init__(self, threads=1, numerics="fast", seed=0, budget_bytes=0):
        L = lib()
        cfg = L.oj_engine_config_default()
        cfg.numerics = {"fast": 0, "exact": 1}[numerics] if isinstance(numerics, str) else numerics
        cfg.threads = threads
        cfg.seed = seed
        cfg.budget_bytes = budget_bytes
        h = C.c_void_p()
        err = OjError()
        st = L.oj_engine_create(C.byref(cfg), C.byref(h), C.byref(err))
        if st != 0:
            raise OjasError(status_name(st), err.message.decode(errors="replace"))
        self._h = h.value
        self._owned = weakref.WeakSet()   # Tensors holding a reference
        self._scopes = []                 # per open scope: WeakSet of its Tensors
        self._fns = {}

    # -- lifetime
    @property
    def handle(self):
        if self._h is None:
            raise OjasError("OJ_ERR_STATE", "engine is closed")
        return self._h

    def release_all(self):
        """Release every handle Python holds and close every open scope."""
        L = lib()
        while self._scopes:
            self.scope_end()
        for t in list(self._owned):
            t._drop()
        L.oj_clear_error(self._h)

    def live_tensors(self):
        return lib().oj_engine_live_tensors(self.handle)

    def close(self):
        """Release everything and free the engine. Returns the number of
        tensor handles still live after Python released its own (leaks)."""
        if self._h is None:
            return 0
        self.release_all()
        leaked = lib().oj_engine_live_tensors(self._h)
        lib().oj_engine_free(self._h)
        self._h = None
        return leaked

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- errors
    def check(self, ret_status=0, what=""):
        """Raise OjasError if the engine holds an error (clearing it) or
        ret_status is not OJ_OK."""
        L = lib()
        st = L.oj_last_status(self._h)
        if st != 0:
            msg = L.oj_last_error(self._h).decode(errors="replace")
            L.oj_clear_error(self._h)
            raise OjasError(status_name(st), msg)
        if ret_status != 0:
            raise OjasError(status_name(ret_status), "%s returned %s with no message recorded"
                            % (what, status_name(ret_status)))

    def last_error(self):
        return lib().oj_last_error(self.handle).decode(errors="replace")

    # -- scopes and grad mode
    def scope_begin(self):
        self.check(lib().oj_scope_begin(self.handle), "scope_begin")
        self._scopes.append(weakref.WeakSet())

    def scope_end(self):
        for t in list(self._scopes.pop()):
            t._h = None  # the C scope releases it
        self.check(lib().oj_scope_end(self.handle), "scope_end")

    class _Scope:
        def __init__(self, eng):
            self.eng = eng

        def __enter__(self):
            self.eng.scope_begin()
            return self.eng

        def __exit__(self, *exc):
            self.eng.scope_end()

    def scope(self):
        """`with eng.scope():` - oj_scope_begin/oj_scope_end."""
        return Engine._Scope(self)

    def scope_depth(self):
        return lib().oj_scope_depth(self.handle)

    class _GradMode:
        def __init__(self, eng, on):
            self.eng, self.on = eng, on

        def __enter__(self):
            self.prev = lib().oj_set_grad_enabled(self.eng.handle, self.on)

        def __exit__(self, *exc):
            lib().oj_set_grad_enabled(self.eng.handle, self.prev)

    def no_grad(self):
        return Engine._GradMode(self, False)

    # -- wrapping handles
    def _wrap_new(self, h):
        """Wrap a freshly created handle (creation reference)."""
        if not h:
            self.check()
            raise OjasError("OJ_ERR_INTERNAL", "NULL tensor returned with no error recorded")
        t = Tensor(self, h)
        if self._scopes and lib().oj_scope_depth(self._h) > 0:
            self._scopes[-1].add(t)
        else:
            t._owned = True
            self._owned.add(t)
        return t

    def _wrap_borrowed(self, h):
        """Wrap a borrowed handle, taking a reference of our own."""
        if not h:
            return None
        lib().oj_retain(h)
        t = Tensor(self, h)
        t._owned = True
        self._owned.add(t)
        return t

    # -- creation
    def tensor(self, a, dtype=None, requires_grad=False):
        """A new tensor holding a copy of numpy array (or scalar/list) `a`.
        dtype: ojas name, defaults from a's numpy dtype; 'bf16' takes a
        uint16 array of bits, or a float array converted (round to nearest
        even)."""
        a = np.asarray(a)
        dt = dtype_name(dtype) if dtype is not None else dtype_name(a.dtype)
        if dt == "bf16" and a.dtype != np.uint16:
            a = f32_to_bf16(a)
        else:
            a = a.astype(NP_OF[dt], copy=False)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would make rank 0 rank 1)
        shape = (C.c_int64 * max(1, a.ndim))(*a.shape)
        h = lib().oj_from_host(self.handle, a.ndim, shape, DT[dt], a.ctypes.data_as(C.c_void_p),
                               a.nbytes)
        t = self._wrap_new(h)
        if requires_grad:
            t.requires_grad_(True)
        return t

    # -- generic call
    def fn(self, name):
        """The ctypes function oj_<name> with argtypes from its prototype."""
        f = self._fns.get(name)
        if f is not None:
            return f
        P = protos().get(name)
        if P is None:
            raise AttributeError("no oj_%s in include/ojas/*.h" % name)
        if not P.supported:
            raise NotImplementedError("oj_%s: prototype not handled by call(): %s (add it to "
                                      "OVERRIDES)" % (name, P.signature()))
        cf = getattr(lib(), P.name)
        cf.argtypes = P.argtypes
        cf.restype = P.restype
        self._fns[name] = (P, cf)
        return self._fns[name]

    def call(self, name, *args):
        """Call oj_<name>(*args) with converted arguments; returns a Tensor,
        a Python scalar, a string, or None (status OK). Raises OjasError."""
        P, cf = self.fn(name)
        want = [p for p in P.params if p[0] != "engine"]
        if len(args) != len(want):
            raise TypeError("oj_%s takes %d arguments (%s), got %d"
                            % (name, len(want), P.signature(), len(args)))
        it = iter(args)
        cargs, keep = [], []
        inputs = []
        named = dict(zip([p[1] for p in want], args))
        outs = None  # (ctypes array, single?) of an oj_tensor ** output parameter
        for kind, pname, fold, ct, ct2 in P.params:
            if kind == "engine":
                cargs.append(self.handle)
                continue
            a = next(it)
            if kind == "tensor":
                h = _handle(a)
                if h:
                    inputs.append(h)
                cargs.append(h)
            elif kind in ("int", "bool"):
                cargs.append(int(a) if kind == "int" else bool(a))
            elif kind == "float":
                cargs.append(float(a))
            elif kind == "dtype":
                cargs.append(DT[dtype_name(a)])
            elif kind.startswith("enum:"):
                cargs.append(enum_value(kind[5:], a))
            elif kind == "tensor_out":
                # None/False: NULL. True: room for max_out (if the function
                # takes one), else for as many as the folded array, else one.
                if not a:
                    cargs.append(None)
                    outs = outs or (None, True)
                    continue
                folded = [len(v) for (k, n, f, *_r) in want if f and named.get(n) is not None
                          for v in [named[n]]]
                cap = int(named["max_out"]) if "max_out" in named else \
                    (folded[0] if folded else 1)
                arr = (C.c_void_p * max(1, cap))()
                outs = (arr, "max_out" not in named and not folded)
                cargs.append(C.cast(arr, C.c_void_p))
            else:  # folded arrays
                if a is None:
                    n, arr = 0, None
                elif kind == "tensors":
                    hs = [_handle(x) for x in a]
                    inputs.extend(h for h in hs if h)
                    n, arr = len(hs), (C.c_void_p * max(1, len(hs)))(*hs)
                else:
                    base = C.c_int if kind == "ints32" else C.c_int64
                    vals = [int(v) for v in a]
                    n, arr = len(vals), (base * max(1, len(vals)))(*vals)
                if arr is not None:
                    keep.append(arr)
                    arr = C.cast(arr, ct2)
                cargs.extend([n, arr] if fold == "count_first" else [arr, n])
        r = cf(*cargs)
        if outs is not None:
            arr, single = outs
            n = 0 if arr is None else 1 if single else (r if P.ret == "int" and r > 0 else 0)
            got = [self._wrap_new(arr[i]) for i in range(n) if arr[i]]
            if P.ret == "tensor":
                main = self._wrap_new(r) if r else None
                self.check()
                return main, (got[0] if got else None)
            self.check()
            return got if arr is not None else r
        if P.ret == "tensor":
            if r and r in inputs:
                # Same handle handed back: take a reference of our own.
                self.check()
                return self._wrap_borrowed(r)
            return self._wrap_new(r)
        if P.ret == "status":
            self.check(r, "oj_" + name)
            return None
        self.check()
        if P.ret == "str":
            return r.decode() if r is not None else None
        return r


def _handle(x):
    if x is None:
        return None
    if not isinstance(x, Tensor):
        raise TypeError("expected an ojas Tensor, got %r" % type(x))
    return x.handle


# ------------------------------------------------------------------ tensor

class Tensor:
    """A handle on an oj_tensor (see the module docstring for ownership)."""

    def __init__(self, eng, h):
        self.eng = eng
        self._h = h
        self._owned = False

    @property
    def handle(self):
        if self._h is None:
            raise OjasError("OJ_ERR_STATE", "tensor handle is no longer valid "
                            "(its scope ended, or it was released)")
        if self.eng._h is None:
            raise OjasError("OJ_ERR_STATE", "tensor of a closed engine")
        return self._h

    def _drop(self):
        if self._h is not None and self._owned and self.eng._h is not None:
            lib().oj_release(self._h)
        self._h = None

    def release(self):
        """oj_release now (only for tensors this wrapper owns)."""
        if not self._owned:
            raise OjasError("OJ_ERR_STATE", "this tensor is owned by a scope")
        self._drop()
        self.eng._owned.discard(self)

    def __del__(self):
        try:
            self._drop()
        except Exception:
            pass

    def keep(self):
        """oj_keep: move from the current scope to the enclosing one."""
        h = lib().oj_keep(self.handle)
        self.eng.check()
        if not h:
            raise OjasError("OJ_ERR_INTERNAL", "oj_keep returned NULL")
        sc = self.eng._scopes
        if sc and self in sc[-1]:
            sc[-1].discard(self)
            if len(sc) > 1:
                sc[-2].add(self)
            else:
                self._owned = True
                self.eng._owned.add(self)
        return self

    # -- metadata
    @property
    def shape(self):
        L = lib()
        r = L.oj_rank(self.handle)
        p = L.oj_shape(self.handle)
        return tuple(p[i] for i in range(r))

    @property
    def strides(self):
        L = lib()
        r = L.oj_rank(self.handle)
        p = L.oj_strides(self.handle)
        return tuple(p[i] for i in range(r))

    @property
    def ndim(self):
        return lib().oj_rank(self.handle)

    def numel(self):
        return lib().oj_numel(self.handle)

    @property
    def dtype(self):
        return DTYPES[lib().oj_tensor_dtype(self.handle)]

    def is_contiguous(self):
        return lib().oj_is_contiguous(self.handle)

    def version(self):
        return lib().oj_version(self.handle)

    def shares_storage(self, other):
        return lib().oj_shares_storage(self.handle, other.handle)

    def __repr__(self):
        if self._h is None:
            return "<ojas Tensor (dead)>"
        return "<ojas Tensor %s %s>" % (self.dtype, list(self.shape))

    # -- data
    def to_numpy(self):
        """Row-major copy (bf16 comes back as uint16 bits; see bf16_to_f32)."""
        a = np.empty(self.shape, dtype=NP_OF[self.dtype])
        st = lib().oj_to_host(self.handle, a.ctypes.data_as(C.c_void_p), a.nbytes)
        self.eng.check(st, "oj_to_host")
        return a

    def numpy_float(self):
        """to_numpy with bf16 widened to float32."""
        a = self.to_numpy()
        return bf16_to_f32(a) if self.dtype == "bf16" else a

    # -- autograd
    @property
    def requires_grad(self):
        return lib().oj_requires_grad(self.handle)

    def requires_grad_(self, on=True):
        h = lib().oj_set_requires_grad(self.handle, on)
        self.eng.check()
        if not h:
            raise OjasError("OJ_ERR_INTERNAL", "oj_set_requires_grad returned NULL")
        return self

    @property
    def grad(self):
        """The accumulated gradient (a new wrapper holding its own
        reference) or None."""
        h = lib().oj_grad(self.handle)
        self.eng.check()
        return self.eng._wrap_borrowed(h)

    def zero_grad(self):
        lib().oj_zero_grad(self.handle)

    def retain_grad(self):
        lib().oj_retain_grad(self.handle)
        self.eng.check()
        return self

    def is_leaf(self):
        return lib().oj_is_leaf(self.handle)

    def grad_fn_name(self):
        r = lib().oj_grad_fn_name(self.handle)
        return r.decode() if r else None

    def backward(self, grad=None, retain_graph=False):
        """oj_backward (grad None) or oj_backward_seeded (grad a Tensor or
        numpy array shaped like self)."""
        L = lib()
        if grad is None:
            st = L.oj_backward(self.handle, retain_graph)
        else:
            if not isinstance(grad, Tensor):
                grad = self.eng.tensor(np.asarray(grad), dtype=self.dtype)
            st = L.oj_backward_seeded(self.handle, grad.handle, retain_graph)
        self.eng.check(st, "oj_backward")

    # -- sugar: t.op(...) == eng.call("op", t, ...)
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in protos():
            return lambda *a: self.eng.call(name, self, *a)
        raise AttributeError(name)
