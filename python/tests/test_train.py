"""ojas.train: a Python-driven run is the CLI's run, byte for byte under
numerics "exact" (same model and optimizer sha256 as `ojas train`, as
go/train_test.go checks for Go), also when cut in two by a resume; the
per-step callback, stops, errors and the trainer's lifetime."""
import hashlib
import json
import math
import os
import signal

import pytest

import ojas
import runfixture
from ojas.train import Trainer


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def same_checkpoint(a, b):
    for f in ("model.safetensors", "optimizer.safetensors"):
        assert sha(os.path.join(a, f)) == sha(os.path.join(b, f)), (f, a, b)


def exact_config(run_fixture, **kw):
    c = dict(runfixture.CONFIG, data_dir=os.path.join(run_fixture, "data"), numerics="exact")
    c.update(kw)
    return c


@pytest.fixture(scope="module")
def cli_run(run_fixture):
    """`ojas train` of the fixture config under exact numerics; its step-4
    checkpoint."""
    with open(os.path.join(run_fixture, "c.json"), "w") as f:
        json.dump(runfixture.CONFIG, f)
    runfixture.run_ojas(run_fixture, "train", "--no-progress", "--no-plot", "--config", "c.json",
                        "--out", "cli", "--numerics", "exact")
    return os.path.join(run_fixture, "cli", "ckpt-000004")


def test_train_steps_match_cli(run_fixture, cli_run, tmp_path):
    seen = []
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "py") as tr:
        for i in range(4):
            m = tr.train_step()
            seen.append(m)
            assert m["step"] == i + 1 and m["tokens"] == (i + 1) * 4 * 32
            assert m["loss"] > 0 and m["grad_norm"] > 0 and m["lr"] > 0 and m["tokens_per_s"] > 0
        with pytest.raises(ojas.StateError, match="max_steps"):
            tr.train_step()
        got = tr.checkpoint()
        assert os.path.basename(got) == "ckpt-000004"
        loss, bpb = tr.eval()
        assert loss > 0 and math.isnan(bpb)  # no tokenizer_dir: no bits per byte
    same_checkpoint(cli_run, got)
    # the CLI's metrics.jsonl holds the same losses
    with open(os.path.join(os.path.dirname(cli_run), "metrics.jsonl")) as f:
        cli = [json.loads(line) for line in f]
    cli_loss = [r["loss"] for r in cli if r["type"] == "train"]
    assert cli_loss == pytest.approx([m["loss"] for m in seen], rel=1e-7)  # printed to 8 digits


def test_fit_and_resume_match_cli(run_fixture, cli_run, tmp_path):
    # the per-step callback sees each step once, never an eval as a step
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "fit-steps-only") as tr:
        seen = []
        tr.fit(callback=lambda m: seen.append(m["step"]))
    assert seen == [1, 2, 3, 4]
    steps, evals = [], []
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "fit") as tr:
        last = tr.fit(callback=steps.append, on_eval=evals.append)
    assert last["step"] == 4
    assert [(e["step"], e["is_eval"]) for e in steps] == [(1, False), (2, False), (3, False),
                                                          (4, False)]
    assert [(e["step"], e["is_eval"]) for e in evals] == [(2, True), (4, True)]
    assert all(e["val_loss"] > 0 and "loss" not in e for e in evals)
    same_checkpoint(cli_run, str(tmp_path / "fit" / "ckpt-000004"))

    # two steps, a checkpoint, a resume from it, two more steps
    half = tmp_path / "half"
    with Trainer(exact_config(run_fixture), out_dir=half) as tr:
        tr.train_step()
        tr.train_step()
        ck = tr.checkpoint()
    with Trainer.resume(ck) as tr:
        assert tr.step == 2
        assert tr.config["numerics"] == "exact"
        tr.train_step()
        tr.train_step()
        got = tr.checkpoint()
    same_checkpoint(cli_run, got)


def test_run_in_c_with_callback(run_fixture, cli_run, tmp_path):
    # fit's callbacks: each step once to callback, never an eval as a step
    seen = []
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "run-steps-only") as tr:
        tr.run(lambda m: seen.append(m["step"]))
    assert seen == [1, 2, 3, 4]
    steps, evals = [], []
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "run") as tr:
        res = tr.run(steps.append, on_eval=evals.append)
    assert res["stop"] == "done" and res["step"] == 4 and res["val_loss"] > 0
    assert [(e["step"], e["is_eval"]) for e in steps] == [(1, False), (2, False), (3, False),
                                                          (4, False)]
    assert all(e["loss"] > 0 and "val_loss" not in e for e in steps)
    assert [(e["step"], e["is_eval"]) for e in evals] == [(2, True), (4, True)]
    assert all(set(e) == {"is_eval", "step", "tokens", "elapsed_s", "val_loss", "val_bpb"}
               for e in evals)
    assert evals[-1]["val_loss"] == res["val_loss"] and evals[-1]["tokens"] == res["tokens"]
    same_checkpoint(cli_run, res["checkpoint"])


def test_callback_stops_and_raises(run_fixture, tmp_path):
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "stop") as tr:
        tr.fit(callback=lambda m: m["step"] < 1)
        assert tr.step == 1
        assert os.path.isdir(tmp_path / "stop" / "ckpt-000001")
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "stop-c") as tr:
        res = tr.run(lambda m: False)
        assert res["stop"] == "signal" and res["step"] == 1
    # an eval's False stops before the next step (the first eval is at step 2)
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "stop-eval") as tr:
        res = tr.run(on_eval=lambda m: False)
        assert res["stop"] == "signal" and res["step"] == 2
        assert os.path.basename(res["checkpoint"]) == "ckpt-000002"
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "not-callable") as tr:
        with pytest.raises(TypeError, match="on_eval"):
            tr.run(None, 3)
        assert tr.step == 0

    def boom(m):
        raise KeyError("from the callback")

    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "raise") as tr:
        with pytest.raises(KeyError, match="from the callback"):
            tr.run(boom)
        assert tr.step == 1
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "raise-eval") as tr:
        with pytest.raises(KeyError, match="from the callback"):
            tr.run(on_eval=boom)
        assert tr.step == 2


def test_run_stops_at_ctrl_c(run_fixture, tmp_path):
    # SIGINT (Ctrl-C) during run() with no callback: the run stops after the
    # step it is in, with a checkpoint, and KeyboardInterrupt propagates
    # (Python's handler only flags the signal: the C loop must look)
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        with Trainer(exact_config(run_fixture, max_steps=100000, eval_every=0, ckpt_every=0),
                     out_dir=tmp_path / "sigint") as tr:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(KeyboardInterrupt):
                tr.run()
            signal.setitimer(signal.ITIMER_REAL, 0)
            assert 0 < tr.step < 100000
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_close_and_steps_inside_run(run_fixture, tmp_path):
    # close() from run()'s callback stops the run (a checkpoint of that
    # step) and frees the trainer once run returns, not under it (a crash
    # before); stepping, evaluating or checkpointing from a callback is a
    # StateError that propagates
    tr = Trainer(exact_config(run_fixture), out_dir=tmp_path / "close")
    res = tr.run(lambda m: tr.close())
    assert res["stop"] == "signal" and res["step"] == 1
    assert os.path.basename(res["checkpoint"]) == "ckpt-000001"
    with pytest.raises(ojas.StateError, match="closed"):
        tr.step
    for method in ("train_step", "eval", "checkpoint", "run"):
        with Trainer(exact_config(run_fixture), out_dir=tmp_path / method) as tr:
            with pytest.raises(ojas.StateError, match="inside run"):
                tr.run(lambda m: getattr(tr, method)())
            assert tr.step == 1


def test_close_inside_generate_of_its_model(run_fixture, tmp_path):
    # the trainer closed from on_token of its model's generate: freed when
    # generate returns, not under it (a crash before)
    tr = Trainer(exact_config(run_fixture), out_dir=tmp_path / "gen")
    m = tr.model
    out = m.generate([1, 2, 3], max_new_tokens=4, temperature=0, on_token=lambda s, t: tr.close())
    assert len(out) == 4
    with pytest.raises(ojas.StateError):
        m.generate([1, 2, 3], max_new_tokens=1)


def test_trainer_errors(run_fixture, tmp_path):
    with pytest.raises(ojas.InvalidArgumentError, match="no_such_key"):
        Trainer(exact_config(run_fixture, no_such_key=1), out_dir=tmp_path / "a")
    with pytest.raises(ojas.InvalidArgumentError, match="model"):
        Trainer(exact_config(run_fixture, model="nanolab-huge"), out_dir=tmp_path / "b")
    with pytest.raises(ojas.IOError):
        Trainer(exact_config(run_fixture, data_dir=str(tmp_path / "none")),
                out_dir=tmp_path / "c")
    assert not os.path.exists(tmp_path / "c")  # nothing left behind
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "d"):
        with pytest.raises(ojas.StateError, match="lock|PID|in use"):
            Trainer(exact_config(run_fixture), out_dir=tmp_path / "d", overwrite=True)
    cfg = ojas.train.config({"max_steps": 7})
    assert cfg["max_steps"] == 7 and "lr" in cfg


def test_used_out_dir_advice_names_python_arguments(run_fixture, tmp_path):
    # was: the advice named the CLI's --resume, --overwrite and --out
    d = tmp_path / "used"
    with Trainer(exact_config(run_fixture), out_dir=d) as tr:
        tr.train_step()
        tr.checkpoint()
    with pytest.raises(ojas.StateError) as e:
        Trainer(exact_config(run_fixture), out_dir=d)
    msg = str(e.value)
    assert f"Trainer.resume('{d}')" in msg and "overwrite=True" in msg, msg
    assert "another out_dir" in msg and "--" not in msg, msg
    with Trainer.resume(d) as tr:  # what the advice says works
        assert tr.step == 1


def test_trainer_model_and_lifetime(run_fixture, tmp_path):
    tr = Trainer(exact_config(run_fixture), out_dir=tmp_path / "m")
    model = tr.model
    V = model.get_config()["vocab_size"]
    assert V == 512  # the preset's: the config names no tokenizer_dir
    sd = model.state_dict()
    w = sd["transformer.wte.weight"]
    before = w.numpy().copy()
    tr.train_step()
    assert (w.numpy() != before).any()  # the model's own parameters, not copies
    del before
    idx = ojas.tensor([[1, 2, 3]], engine=tr.engine)
    logits = model(idx)
    assert logits.shape == (1, 3, V) and math.isfinite(logits.sum().item())
    tr.checkpoint()
    del w, sd, logits, idx
    tr.close()
    with pytest.raises(ojas.StateError):
        model.state_dict()
    with pytest.raises(ojas.StateError):
        tr.train_step()
    # the out_dir is unlocked: a resume of it opens
    with Trainer.resume(tmp_path / "m") as tr2:
        assert tr2.step == 1


def test_close_waits_for_caches_and_views(run_fixture, tmp_path):
    """A KV cache or decoder of the trainer's model, or a numpy view of its
    memory, keeps the trainer's engine until it goes: closing the trainer
    frees it afterwards, never under them."""
    tr = Trainer(exact_config(run_fixture), out_dir=tmp_path / "c")
    model = tr.model
    cache, dec = model.kv_cache(1, 8), model.decoder(8, use_graph=False)
    tr.close()
    with pytest.raises(ojas.StateError):
        tr.train_step()
    logits = cache.forward(ojas.tensor([[1, 2]], engine=model.engine))
    assert logits.shape[:2] == (1, 2)
    assert dec.prefill([1, 2]) >= 0
    del logits, cache, dec  # the last of them frees the trainer
    with pytest.raises(ojas.StateError):
        model.state_dict()

    tr = Trainer(exact_config(run_fixture), out_dir=tmp_path / "c", overwrite=True)
    view = tr.model.state_dict()["transformer.wte.weight"].numpy()
    tr.close()
    total = float(view.sum())
    assert total == total  # the memory is still there
    del view
    with Trainer(exact_config(run_fixture), out_dir=tmp_path / "c", overwrite=True) as again:
        assert again.step == 0  # the lock went with the trainer
