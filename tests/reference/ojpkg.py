"""The ojas package (python/, built into <build>/python; conftest.py puts
it on sys.path) for the reference tests, imported at first use: collecting
the tests (scripts/ops_table.py, ctest ops_table_fresh) needs no build.

    from ojpkg import ojas
    ojas.tensor(...)
"""
import importlib


class _Lazy:
    def __getattr__(self, name):
        return getattr(importlib.import_module("ojas"), name)


ojas = _Lazy()
