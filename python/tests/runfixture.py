"""The training fixture of the CLI, Go and Python tests: the same ~14 KB
corpus (tests/unit/cli_testutil.h's LCG), a 300-id tokenizer and shards
made with the ojas binary, and a 4-step nanolab-tiny config, one thread."""
import os
import subprocess

import ojas

CONFIG = {"model": "nanolab-tiny", "data_dir": "data", "batch_size": 4, "seq_len": 32,
          "max_steps": 4, "warmup_steps": 1, "eval_every": 2, "eval_batches": 1,
          "ckpt_every": 2, "peak_flops": 1e10, "threads": 1}

WORDS = ["the", "king", "said", "unto", "him", "and", "of", "land", "people", "house", "lord",
         "went", "came", "day", "city", "water", "over", "river", "bread", "stone", "light",
         "night", "in", "they", "shall", "be", "upon"]


def corpus():
    out, s = [], 2024
    for sent in range(420):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        n = 4 + (s >> 24) % 7
        for w in range(n):
            s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
            word = WORDS[(s >> 16) % len(WORDS)]
            out.append(word[0].upper() + word[1:] if w == 0 else " " + word)
        out.append(".\n" if sent % 8 == 7 else ". ")
    return "".join(out)


def ojas_bin():
    """The ojas binary beside the package's libojas build (<build>/bin/ojas),
    or $OJAS_BIN."""
    if os.environ.get("OJAS_BIN"):
        return os.environ["OJAS_BIN"]
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(ojas._C.__file__))))
    return os.path.join(build, "bin", "ojas")


def run_ojas(cwd, *args):
    r = subprocess.run([ojas_bin(), *args], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, "ojas %s: %s%s" % (" ".join(args), r.stdout, r.stderr)
    return r.stdout


def make(dir):
    """Write the corpus, tokenizer (dir/tok) and shards (dir/data) into dir."""
    with open(os.path.join(dir, "corpus.txt"), "w") as f:
        f.write(corpus())
    run_ojas(dir, "tokenizer", "train", "--vocab-size", "300", "--threads", "1", "--out", "tok",
             "corpus.txt")
    run_ojas(dir, "data", "prepare", "--vocab", "tok", "--out", "data", "--threads", "1",
             "corpus.txt")
    return dir
