"""Fine-tune a GPT on a text file with ojas from Python, then sample from it.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/gpt_finetune.py \\
        [--model DIR] [--text FILE] [--steps N] [--out weights.safetensors]

--model is a Hugging Face model directory (config.json, model.safetensors
and its tokenizer: tokenizer.json or encoder.json + vocab.bpe) or an ojas
training run or checkpoint (`ojas train`'s output; its tokenizer_dir names
the tokenizer). Without --model, a small nanolab model is created and a BPE
tokenizer is trained on the text, so the script runs with nothing
downloaded. The loop is torch's: forward, loss, backward, AdamW with a
cosine schedule and gradient clipping; the weights are saved as safetensors.
"""
import argparse
import os

import numpy as np

import ojas
from ojas.data import Tokenizer
from ojas.models import GPT
from ojas.optim.lr_scheduler import CosineLR

SAMPLE_TEXT = """\
The river runs under the old stone bridge and on toward the sea. In the
morning the fishermen go down to the water, and in the evening they come
back with bread and stories. The king of the land said unto the people: the
light of the city shall be upon the house of every one who works. They went
over the river at night and came to the city by day.
""" * 8


def load(args, text):
    """(model, tokenizer) from --model, or a new model and a tokenizer
    trained on text."""
    if args.model is None:
        tok = Tokenizer.train([text], vocab_size=320)
        model = GPT.create("nanolab-tiny", vocab_size=tok.vocab_size, block_size=64, seed=1)
        return model, tok
    model = GPT.from_pretrained(args.model)
    d = args.model
    if not os.path.exists(os.path.join(d, "config.json")):  # an ojas run: its config's tokenizer
        d = ojas.train.config_from_checkpoint(d)["tokenizer_dir"]
    if os.path.exists(os.path.join(d, "tokenizer.json")) and not os.path.exists(
            os.path.join(d, "encoder.json")):
        return model, Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    return model, Tokenizer.from_dir(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="HF model directory or ojas run/checkpoint")
    ap.add_argument("--text", help="training text (default: a built-in paragraph)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--out", default="finetuned.safetensors")
    args = ap.parse_args()
    text = open(args.text).read() if args.text else SAMPLE_TEXT
    ojas.manual_seed(0)
    model, tok = load(args, text)
    ids = np.array(tok.encode(text, special="text"), dtype=np.int64)
    T = min(args.seq, model.get_config()["block_size"] - 1, len(ids) - 1)
    print("model: %s, %d parameters; %d tokens of text; vocabulary %d"
          % (model.get_config()["family"], model.num_params(), len(ids), tok.vocab_size))

    prompt = tok.encode("The river")
    before = model.generate(prompt, max_new_tokens=16, temperature=0)

    opt = ojas.optim.AdamW(model.named_parameters(), lr=args.lr, weight_decay=0.01)
    sched = CosineLR(opt, total_steps=args.steps, warmup_steps=max(1, args.steps // 10),
                     min_ratio=0.1)
    rng = np.random.default_rng(0)
    losses = []
    for step in range(args.steps):
        starts = rng.integers(0, len(ids) - T - 1, size=args.batch)
        x = np.stack([ids[s:s + T] for s in starts])
        y = np.stack([ids[s + 1:s + T + 1] for s in starts])
        loss = model.loss(ojas.from_numpy(x), ojas.from_numpy(y))
        loss.backward()
        ojas.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        sched.step()
        losses.append(loss.item())
        if step % 10 == 0 or step == args.steps - 1:
            print("step %3d  loss %.4f  lr %.2e" % (step, losses[-1], sched.get_last_lr()[0]))

    after = model.generate(prompt, max_new_tokens=16, temperature=0)
    print("before: %r" % tok.decode(prompt + before))
    print("after:  %r" % tok.decode(prompt + after))
    ojas.io.save_file(model.state_dict(), args.out, metadata={"format": "pt"})
    print("loss %.4f -> %.4f; weights saved to %s" % (losses[0], losses[-1], args.out))


if __name__ == "__main__":
    main()
