"""Fixtures of the ojas package tests: they run against the package built
into <build>/python (PYTHONPATH, set by the ctest entry python_tests) and
compare with Debian's PyTorch 1.13 (/usr/bin/python3)."""
import gc

import numpy as np
import pytest

import ojas


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test leaves the default engine as it found it: no live tensor
    handles and no storage left behind once its Python objects are gone, no
    error left recorded, grad mode on."""
    eng = ojas.default_engine()
    live0, mem0 = eng.live_tensors(), eng.memory_allocated()
    yield
    if not eng.closed and eng.live_tensors() != live0:
        gc.collect()  # only reference cycles need it (slow with torch loaded)
    if not eng.closed:
        assert eng.live_tensors() == live0
        assert eng.memory_allocated() == mem0
        assert eng.grad_enabled
