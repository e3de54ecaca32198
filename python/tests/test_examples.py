"""The scripts of examples/python run as a user would run them (the package
on PYTHONPATH) and do what they print: the MLP learns, the GPT fine-tune
lowers the loss (on a new model and on an `ojas train` run), and the
interop script's checks hold."""
import os
import re
import subprocess
import sys

import ojas

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


def run(script, *args, cwd=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(ojas.__file__)))
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def losses(out):
    m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", out)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def test_interop():
    out = run("interop.py")
    assert out.count("\n") == 5 and "same output" in out


def test_gpt_finetune_new_model(tmp_path):
    out = run("gpt_finetune.py", "--steps", "40", "--out", str(tmp_path / "w.safetensors"))
    first, last = losses(out)
    assert last < 0.5 * first
    w = ojas.io.load_file(str(tmp_path / "w.safetensors"))
    assert "transformer.wte.weight" in w


def test_gpt_finetune_ojas_run(run_fixture, tmp_path):
    import runfixture
    cfg = dict(runfixture.CONFIG, data_dir=os.path.join(run_fixture, "data"), max_steps=2,
               tokenizer_dir=os.path.join(run_fixture, "tok"))
    with ojas.train.Trainer(cfg, out_dir=tmp_path / "run") as tr:
        tr.fit()
    out = run("gpt_finetune.py", "--model", str(tmp_path / "run"), "--text",
              os.path.join(run_fixture, "corpus.txt"), "--steps", "20", "--out",
              str(tmp_path / "w.safetensors"))
    assert "vocabulary 300" in out
    first, last = losses(out)
    assert last < first


def test_mlp():
    out = run("mlp.py", "--steps", "300")
    acc = re.search(r"accuracy ([0-9.]+)", out)
    assert acc and float(acc.group(1)) > 0.6, out  # 4 classes: chance is 0.25
