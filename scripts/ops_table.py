#!/usr/bin/python3
"""Generate docs/ops.md: one row per op declared in include/ojas/ops.h,
with its section, the dtypes its reference tests exercise, whether it has a
gradient, the PyTorch reference, and the reference tests that target it
(with known-bug xfails).

    /usr/bin/python3 scripts/ops_table.py --write   # rewrite docs/ops.md
    /usr/bin/python3 scripts/ops_table.py --check   # exit 1 (and a diff) if docs/ops.md is stale
    /usr/bin/python3 scripts/ops_table.py --print   # the table on stdout, nothing written

Only --write writes. ctest runs --check (test `ops_table_fresh`), so an op
added to ops.h or a reference test added without regenerating the table
fails the build's tests; `cmake --build build --target ops_table` rewrites
it. --check exits 77 (ctest: skipped) when pytest or torch cannot be
imported, since the table names torch's functions.

Sources: the prototypes and comments of ops.h (a "no grad" or "not recorded"
in the comment governing a declaration means no gradient; an in-place op,
returning oj_status, records one only where its comment says "recorded by
autograd"), and the items
pytest collects under tests/reference (nothing is run, libojas is not
loaded). A test item targets an op when the op's name is one of its
parameter ids (e.g. test_unary[f32-shape0-exp]) or, failing that, a part of
its function name (test_where_...); `@pytest.mark.ops("add_", ...)` on a
test overrides the guess. Add an op's torch reference to TORCH_REF
below when it is not torch.<name> / torch.nn.functional.<name>."""

import argparse
import difflib
import os
import re
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OPS_H = os.path.join(REPO, "include", "ojas", "ops.h")
TESTS = os.path.join(REPO, "tests", "reference")
OUT = os.path.join(REPO, "docs", "ops.md")
DTYPES = ["f32", "f64", "bf16", "f16", "i64", "i32", "u32", "u16", "u8", "bool"]

TORCH_REF = {
    "view": "Tensor.view", "reshape": "Tensor.reshape", "permute": "Tensor.permute",
    "expand": "Tensor.expand", "slice": "Tensor.__getitem__ (start:end:step)",
    "squeeze_all": "torch.squeeze (no dim)", "gelu_tanh": "F.gelu(approximate='tanh')",
    "pow_scalar": "torch.pow (scalar exponent)", "affine": "x * scale + shift",
    "add_scalar": "torch.add (scalar)", "mul_scalar": "torch.mul (scalar)",
    "cast": "Tensor.to(dtype)", "add_": "Tensor.add_", "mul_scalar_": "Tensor.mul_",
    "sum_all": "torch.sum", "mean_all": "torch.mean", "linear": "F.linear",
    "rms_norm": "float64 reference in the test", "rotary_embedding": "float64 reference in the test",
    "scaled_dot_product_attention": "float64 reference in the test (torch 1.13 has no GQA)",
    "repeat": "Tensor.repeat", "maximum": "torch.maximum", "minimum": "torch.minimum",
    "linear_cross_entropy": "F.cross_entropy(F.linear(x, w))",
    "rotary_embedding_at": "float64 reference in the test (position_ids)",
    "rms_norm_rotary": "float64 reference in the test (rms_norm, then rotary)",
    "index_copy_": "Tensor.index_copy_",
}


# ------------------------------------------------------------------ ops.h

def parse_ops():
    """[(name, section, grad, comment)] in declaration order."""
    with open(OPS_H) as f:
        lines = f.read().split("\n")
    ops, section, comment, in_comment, buf = [], "", [], False, []
    decl = ""
    for line in lines:
        s = line.strip()
        m = re.match(r"/\*\s*=+\s*(.*?)\s*$", s)
        if m and not m.group(1).startswith("end of"):
            section = m.group(1).rstrip("*/ ").split("\n")[0].strip()
        if in_comment or s.startswith("/*"):
            buf.append(s)
            in_comment = "*/" not in s
            if not in_comment:
                comment, buf, decl = buf, [], ""
            continue
        if s == "":
            comment, decl = [], ""  # a comment governs the declarations right below it
            continue
        decl += " " + s
        if ";" in s:
            m = re.search(r"\b(oj_tensor\s*\*|oj_status)\s*(oj_\w+)\s*\(", decl)
            if m:
                text = " ".join(comment)
                no_grad = re.search(r"\bno grad(?!ient)|not recorded", text, re.I)
                if m.group(1).startswith("oj_status"):  # in place: only where recorded
                    no_grad = no_grad or not re.search(r"recorded by autograd", text, re.I)
                sec = section.split(":")[0].split("(")[0].strip() or "?"
                ops.append((m.group(2)[3:], sec, "no" if no_grad else "yes", text))
            decl = " "
    return ops


# ------------------------------------------------------------------ tests

# Parameters whose values are not ops even where they spell an op's name
# (a reduction "mean" / "sum" of a loss test is not oj_mean / oj_sum).
NOT_OP_PARAMS = ("red", "reduction")


class _Collector:
    def __init__(self):
        self.items = []

    def pytest_collection_modifyitems(self, items):
        for it in items:
            xfails = [m.kwargs.get("reason", m.args[0] if m.args else "")
                      for m in it.iter_markers("xfail")]
            ops = [a for m in it.iter_markers("ops") for a in m.args]
            cs = getattr(it, "callspec", None)
            not_ops = {v for k, v in (cs.params.items() if cs else ())
                       if k in NOT_OP_PARAMS and isinstance(v, str)}
            self.items.append((it.nodeid, xfails, ops, not_ops))


def collect_tests():
    import pytest
    c = _Collector()
    os.environ.setdefault("OJAS_LIB", os.path.join(REPO, "build", "libojas.so"))
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()) as log:
        rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", TESTS], plugins=[c])
    if rc not in (0, 5):
        sys.stdout.write(log.getvalue())
    if rc not in (0, 5):
        raise SystemExit("pytest collection failed (%s)" % rc)
    return c.items


def _params(nodeid):
    m = re.search(r"\[(.*)\]$", nodeid)
    return m.group(1) if m else ""


def targets(nodeid, names, marked=(), not_ops=()):
    """Ops a collected test item targets: those named by its
    @pytest.mark.ops(...) marker, else found in its ids (other than the
    values in not_ops) / function name."""
    if marked:
        return set(marked) & set(names)
    params = _params(nodeid)
    hit = {n for n in names if n not in not_ops and
           re.search(r"(^|[\[\-])%s($|[\-\]\(])" % re.escape(n), params)}
    if hit:
        return hit
    func = nodeid.split("::")[-1].split("[")[0]
    rest = "_" + re.sub(r"^test_", "", func) + "_"
    hit = {n for n in names if "_%s_" % n in rest}
    # the longest names win: test_logical_not does not also target "not"
    return {n for n in hit if not any(n != o and n in o for o in hit)}


# ------------------------------------------------------------------ table

def torch_ref(name):
    if name in TORCH_REF:
        return TORCH_REF[name]
    try:
        import torch
        import torch.nn.functional as F
        if hasattr(torch, name):
            return "torch." + name
        if hasattr(F, name):
            return "F." + name
    except ImportError:
        pass
    return "-"


def build():
    ops = parse_ops()
    names = [o[0] for o in ops]
    items = collect_tests()
    per_op = {n: [] for n in names}
    for nodeid, xfails, marked, not_ops in items:
        for n in targets(nodeid, names, marked, not_ops):
            per_op[n].append((nodeid, xfails))
    rows, total_bugs = [], set()
    for name, section, grad, _ in ops:
        its = per_op[name]
        dts = {t for nodeid, _ in its for t in re.split(r"[\-\[\]]", _params(nodeid))
               if t in DTYPES}
        dts |= {t for nodeid, _ in its for t in DTYPES
                if re.search(r"[\[\-_]%s([\-\]_]|$)" % t, nodeid.split("::")[-1])}
        files = sorted({nodeid.split("::")[0].split("/")[-1] for nodeid, _ in its})
        bugs = sorted({x for _, xf in its for x in xf})
        total_bugs |= set(bugs)
        nx = sum(1 for _, xf in its if xf)
        tests = "%d in %s" % (len(its), ", ".join(files)) if its else "**none**"
        if nx:
            tests += " (%d xfail)" % nx
        rows.append("| `oj_%s` | %s | %s | %s | %s | %s |" % (
            name, section, ", ".join(d for d in DTYPES if d in dts) or "-", grad,
            torch_ref(name), tests))
    untested = [n for n in names if not per_op[n]]
    out = [
        "# ojas op table",
        "",
        "Generated by `scripts/ops_table.py --write` from include/ojas/ops.h and the",
        "tests collected under tests/reference; do not edit by hand. The ctest entry",
        "`ops_table_fresh` fails while this file is stale.",
        "",
        "%d ops declared in ops.h; %d reference test items (PyTorch 1.13, CPU); "
        "%d ops without a reference test yet." % (len(ops), len(items), len(untested)),
        "",
        "Columns: dtypes = dtypes the reference tests exercise; grad = the op records",
        "a gradient (gradients compared with torch where the tests say so); tests =",
        "collected test items that target the op (an item testing several ops counts",
        "for each).",
        "",
        "| op | section | dtypes tested | grad | torch reference | reference tests |",
        "|----|---------|---------------|------|-----------------|-----------------|",
    ] + rows
    if total_bugs:
        out += ["", "## Known bugs (xfail tests)", ""] + ["- " + b for b in sorted(total_bugs)]
    if untested:
        out += ["", "## Ops without a reference test", "",
                ", ".join("`oj_%s`" % n for n in untested)]
    return "\n".join(out) + "\n"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Generate docs/ops.md from include/ojas/ops.h and the tests collected "
                    "under tests/reference. Writes only with --write.")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite docs/ops.md")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 with a diff when docs/ops.md differs from what would be "
                           "generated (77 when pytest or torch is missing)")
    mode.add_argument("--print", action="store_true", dest="print_",
                      help="print the generated table on stdout")
    ap.add_argument("--output", default=OUT,
                    help="the file to write or check (default: docs/ops.md)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.check:
        try:
            import pytest  # noqa: F401
            import torch  # noqa: F401
        except ImportError as e:
            print("ops_table: skipped, %s (the table needs pytest and torch)" % e)
            return 77
    text = build()
    if args.print_:
        sys.stdout.write(text)
        return 0
    if args.check:
        old = open(args.output).read() if os.path.exists(args.output) else ""
        if old != text:
            rel = os.path.relpath(args.output, REPO)
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), text.splitlines(True), rel, rel + " (generated)"))
            print("%s is stale: run /usr/bin/python3 scripts/ops_table.py --write" % rel)
            return 1
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    print("wrote %s" % os.path.relpath(args.output, REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
