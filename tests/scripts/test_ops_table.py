"""scripts/ops_table.py's command line and its test-to-op matching: only
--write writes (--help and a missing mode write nothing), --check tells a
stale table (1) from a fresh one (0), and a reduction parameter ("mean",
"sum") does not make a loss test count for oj_mean / oj_sum. The table
itself is not built here (ctest's ops_table_fresh does that)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import ops_table  # noqa: E402

TABLE = "# ojas op table\n\n(generated)\n"


@pytest.fixture
def out(tmp_path, monkeypatch):
    """The table goes to a temporary file; building it returns TABLE."""
    path = tmp_path / "ops.md"
    monkeypatch.setattr(ops_table, "OUT", str(path))
    monkeypatch.setattr(ops_table, "build", lambda: TABLE)
    return path


def test_help_writes_nothing(out, capsys):
    with pytest.raises(SystemExit) as e:
        ops_table.main(["--help"])
    assert e.value.code == 0
    assert "--write" in capsys.readouterr().out
    assert not out.exists()


def test_a_mode_is_required(out):
    with pytest.raises(SystemExit) as e:
        ops_table.main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        ops_table.main(["--write", "--check"])
    assert not out.exists()


def test_print_writes_nothing(out, capsys):
    assert ops_table.main(["--print"]) == 0
    assert capsys.readouterr().out == TABLE
    assert not out.exists()


def test_write_then_check(out, capsys):
    assert ops_table.main(["--check", "--output", str(out)]) == 1  # missing = stale
    assert not out.exists()
    assert ops_table.main(["--write", "--output", str(out)]) == 0
    assert out.read_text() == TABLE
    assert ops_table.main(["--check", "--output", str(out)]) == 0
    out.write_text(TABLE + "| `oj_old` |\n")
    capsys.readouterr()
    assert ops_table.main(["--check", "--output", str(out)]) == 1
    said = capsys.readouterr().out
    assert "-| `oj_old` |" in said and "is stale" in said
    assert out.read_text() == TABLE + "| `oj_old` |\n"  # --check never writes


def test_reduction_parameter_is_not_an_op():
    names = ["mean", "sum", "cross_entropy", "linear_cross_entropy", "mse_loss", "linear"]
    nodeid = "tests/reference/test_nn.py::test_linear_cross_entropy[f32-mean-0.0-(6,)]"
    assert ops_table.targets(nodeid, names, (), {"mean"}) == {"linear_cross_entropy"}
    losses = "tests/reference/test_nn.py::test_losses[f32-mse_loss-sum]"
    assert ops_table.targets(losses, names, (), {"sum"}) == {"mse_loss"}
    # a reduction op's own test still counts for it
    red = "tests/reference/test_reduce.py::test_reduce_dims[f32-mean-dims0]"
    assert ops_table.targets(red, names) == {"mean"}
    # a marker overrides the guess
    assert ops_table.targets(nodeid, names, ("cross_entropy",), {"mean"}) == {"cross_entropy"}
