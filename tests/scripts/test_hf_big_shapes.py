"""scripts/hf_big_shapes.py's command line: an --ojas that is not an
executable is refused by name before anything is written, and with --dir
but without --keep it removes only what it wrote there (a model directory
that was already there, the reuse path, stays). No model is written or
run here: /bin/false stands in for the CLI."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import hf_big_shapes  # noqa: E402


def test_missing_ojas_is_refused(tmp_path, capsys):
    missing = str(tmp_path / "no-such-ojas")
    with pytest.raises(SystemExit) as e:
        hf_big_shapes.main(["--ojas", missing, "--dir", str(tmp_path / "work"),
                            "--no-transformers"])
    assert e.value.code == 2
    assert missing in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "work")


def test_dir_keeps_what_was_there(tmp_path):
    work = tmp_path / "work"
    model = work / "qwen2.5-0.5b"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}\n")
    (model / "tokenizer.json").write_text("{}\n")
    (work / "corpus.txt").write_text("mine\n")
    rc = hf_big_shapes.main(["--ojas", "/bin/false", "--dir", str(work), "--models",
                             "qwen2.5-0.5b", "--no-transformers", "--json",
                             str(tmp_path / "s.json")])
    assert rc == 1  # /bin/false: the run fails, and says so
    assert (model / "config.json").read_text() == "{}\n"
    assert (work / "corpus.txt").read_text() == "mine\n"
