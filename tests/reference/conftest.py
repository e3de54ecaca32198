"""Fixtures for the PyTorch reference tests: a fresh engine per test (checked
for leaked tensor handles at teardown), f32/f64 parametrisation and a numpy
RNG seeded from the test's name, so every run draws the same inputs.

`engine` is an ojas.Engine of the Python package (python/), found as the
package built into <build>/python: <build> is $OJAS_BUILD_DIR, else the
directory of $OJAS_LIB, else ./build (`make python` builds it)."""

import gc
import json
import os
import sys
import zlib

import numpy as np
import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rewrite_json(path, **fields):
    """Replace `fields` of the JSON object in the file at `path`, in place
    (a config.json the tests make wrong or unusual)."""
    with open(path) as f:
        c = json.load(f)
    c.update(fields)
    with open(path, "w") as f:
        json.dump(c, f)


def _build_dir():
    if os.environ.get("OJAS_BUILD_DIR"):
        return os.environ["OJAS_BUILD_DIR"]
    if os.environ.get("OJAS_LIB"):
        return os.path.dirname(os.path.abspath(os.environ["OJAS_LIB"]))
    return os.path.join(_REPO, "build")


sys.path.insert(0, os.path.join(_build_dir(), "python"))

FLOAT_DTYPES = ["f32", "f64"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "ops(*names): the ops a test targets, for scripts/ops_table.py "
        "(overrides the guess from its parameter ids and function name)")


@pytest.fixture(scope="session", autouse=True)
def _package():
    """Import the package once; stop the test run with the import's reason
    if it fails (rather than failing every test the same way)."""
    try:
        import ojas  # noqa: F401
    except ImportError as e:
        pytest.exit("cannot import the ojas package from %s (`make python`, or set "
                    "OJAS_BUILD_DIR): %s" % (os.path.join(_build_dir(), "python"), e),
                    returncode=1)


@pytest.fixture
def engine(request):
    """A one-thread ojas.Engine of the package, closed at teardown after
    checking that no tensor handle outlives its Python object (the test's
    arguments, e.g. a model fixture's value, are dropped first: this
    fixture's teardown comes after theirs)."""
    import ojas
    e = ojas.Engine(threads=1)
    yield e
    request.node.funcargs.clear()
    gc.collect()
    live = e.live_tensors()
    e.close()
    assert live == 0, "%d tensor handle(s) still live after Python released its own" % live


@pytest.fixture(params=FLOAT_DTYPES)
def dtype(request):
    return request.param


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
