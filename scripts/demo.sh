#!/usr/bin/env bash
# The main job on real text, from nothing but the repository (make demo):
# King James Bible -> BPE tokenizer -> token shards -> train a small nanolab
# GPT on the CPU for a bounded time -> checkpoint -> generate text.
set -euo pipefail
cd "$(dirname "$0")/.."
OJAS=build/bin/ojas
DATA=data/demo
RUN=${RUN:-runs/demo}
mkdir -p "$DATA" runs

if [ ! -s "$DATA/kjv.txt" ]; then
  echo "== corpus: the King James Bible (Debian bible-kjv)"
  bible "gen1:1-rev22:21" > "$DATA/kjv.txt"
fi
echo "   $(wc -c < "$DATA/kjv.txt") bytes"

if [ ! -f "$DATA/tok/vocab.bpe" ]; then
  echo "== tokenizer: byte-level BPE, 4096 tokens"
  $OJAS tokenizer train --vocab-size 4096 --out "$DATA/tok" "$DATA/kjv.txt"
fi

# a prepare killed midway leaves its marker: the set is made again
if ! ls "$DATA"/shards/train_*.bin >/dev/null 2>&1 || [ -e "$DATA/shards/.prepare-incomplete" ]; then
  echo "== shards: train/val split (last 2% is val)"
  $OJAS data prepare --vocab "$DATA/tok" --out "$DATA/shards" --val-fraction 0.02 "$DATA/kjv.txt"
fi

echo "== train: nanolab-demo on the CPU (time-limited; see configs/demo.json)"
# --overwrite replaces a previous run in $RUN (only a run's files are removed)
$OJAS train --config configs/demo.json --out "$RUN" --overwrite ${DEMO_SET:-}

echo "== loss curve ($RUN/loss.svg; metrics in $RUN/metrics.jsonl)"
if command -v gnuplot >/dev/null && [ -f "$RUN/loss.gp" ]; then
  (cd "$RUN" && gnuplot -e ascii=1 loss.gp) || true
fi
echo "== generate"
$OJAS generate --checkpoint "$RUN" --vocab "$DATA/tok" --prompt "And God said" \
  --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 1
