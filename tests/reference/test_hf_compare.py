"""scripts/hf_compare.py (ojas beside transformers on model directories,
run on a machine with transformers) exercised here with its plain-PyTorch
reference (--reference plain, tests/reference/hf_reference.py): every case
passes on the CPU with a JSON summary that says so, and a model that does
not match its reference, or one ojas refuses, makes it fail (exit 1) with
the case marked in the summary."""

import json
import os
import sys

import pytest

import conftest

sys.path.insert(0, os.path.join(conftest._REPO, "scripts"))
import hf_compare  # noqa: E402


def run(tmp_path, *args):
    out = str(tmp_path / "summary.json")
    rc = hf_compare.main(["--build", conftest._build_dir(), "--reference", "plain",
                          "--devices", "cpu", "--json", out] + list(args))
    with open(out) as f:
        return rc, json.load(f)


def test_all_cases_pass_on_cpu(tmp_path):
    rc, s = run(tmp_path)
    assert rc == 0 and s["ok"] and s["failed"] == 0, json.dumps(s, indent=1)
    assert [c["case"] for c in s["cases"]] == list(hf_compare.CASES)
    for c in s["cases"]:
        assert c["logits_rel_err"] <= 1e-4 and c["greedy_equal_decoder"] \
            and c["greedy_equal_generate"] and c["tokens"] == 64, c
        assert c["distinct_tokens"] > 3, c  # not a degenerate repetition


def _mismatched_config(monkeypatch, **fields):
    """The reference builds the model from the case's fields; ojas then reads
    a config.json with `fields` changed."""
    make = hf_compare.PlainRef.make

    def make_then_edit(self, name, case, d):
        make(self, name, case, d)
        conftest.rewrite_json(os.path.join(d, "config.json"), **fields)
    monkeypatch.setattr(hf_compare.PlainRef, "make", make_then_edit)


def test_a_mismatch_fails(tmp_path, monkeypatch):
    _mismatched_config(monkeypatch, rope_theta=20000.0)
    rc, s = run(tmp_path, "--cases", "llama", "-n", "8")
    assert rc == 1 and not s["ok"] and s["failed"] == 1
    c = s["cases"][0]
    assert c["case"] == "llama" and not c["ok"] and c["logits_rel_err"] > 1e-4, c


def test_a_refusal_fails(tmp_path, monkeypatch):
    _mismatched_config(monkeypatch, hidden_act="gelu")
    rc, s = run(tmp_path, "--cases", "qwen3", "-n", "8")
    assert rc == 1 and not s["ok"]
    assert "hidden_act 'gelu' is not supported" in s["cases"][0]["error"], s


def test_unknown_case_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        hf_compare.main(["--cases", "falcon"])


@pytest.mark.parametrize("args", [["--cases", ","], ["--cases", ""], ["--devices", ""],
                                  ["-n", "0"], ["-n", "-3"]])
def test_nothing_to_compare_is_refused(tmp_path, args, capsys):
    """No case, no device or no token would compare nothing and print
    "all equal": refused by name instead."""
    out = str(tmp_path / "summary.json")
    with pytest.raises(SystemExit) as e:
        hf_compare.main(["--build", conftest._build_dir(), "--reference", "plain",
                         "--json", out] + args)
    assert e.value.code == 2
    assert not os.path.exists(out)
    err = capsys.readouterr().err
    assert ("--cases" in err or "--devices" in err or "-n" in err) and "error:" in err, err
