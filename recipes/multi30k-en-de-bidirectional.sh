#!/bin/sh
# Multi30k en->de in 60 minutes as a left-to-right and a right-to-left model (not in the paper):
# two runs of the 30-minute recipe (seed 1 as the paper's decoder writes, seed 2 with
# model.right_to_left: the target last piece first; side by side or one after the other as
# recipes/lib/train-runs.sh chooses), each averaged over its last 5
# checkpoints. The left-to-right model's beam gives its --beam best; the right-to-left model
# rescores them, and the output is the best by ((1 - w) * own + w * its log-probability) / lp
# (nmt.infer.rerank; Liu et al. 2016, Sennrich et al. 2016). Beam, alpha and w are chosen on valid
# with `nmt tune-alpha --rerank`; test2016 is then translated once.
#   sh recipes/multi30k-en-de-bidirectional.sh [OUT_DIR]
# Uses `nmt` from PATH, or set NMT="python -m nmt". MAX_TIME and TRAIN_ARGS are passed to both runs
# of recipes/multi30k-en-de.sh (which also scores each model alone on valid and test2016); BEAMS,
# ALPHAS and WEIGHTS are the grids tried on valid. A finished run is kept, not trained again.
set -eu
OUT=${1:-runs/multi30k-en-de-bidirectional}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
BEAMS=${BEAMS:-4 8}
ALPHAS=${ALPHAS:-0.6,1.0,1.4}
WEIGHTS=${WEIGHTS:-0.3,0.4,0.5,0.6,0.7}
# side by side where the machine has a core per run (recipes/lib/train-runs.sh; PARALLEL=0: one after the other)
sh "$HERE/lib/train-runs.sh" "$OUT" l2r "--train.seed=1" r2l "--train.seed=2 --model.right_to_left=true"
data=$OUT/l2r/data  # both runs prepare the same data (same vocabulary, id for id)
best=""; best_bleu=-1
for beam in $BEAMS; do
  $NMT tune-alpha "$OUT/l2r/average" --src "$data/valid.en.txt" --ref "$data/valid.de.txt" --beam "$beam" \
    --alphas "$ALPHAS" --rerank "$OUT/r2l/average" --rerank-weights "$WEIGHTS" \
    --out "$OUT/tune.beam$beam.json" | tee "$OUT/tune.beam$beam.txt"
  # the row of the best alpha and weight: "| alpha | weight | BLEU | ..."
  alpha=$(sed -n 's/^best alpha: //p' "$OUT/tune.beam$beam.txt")
  weight=$(sed -n 's/^best rerank weight: //p' "$OUT/tune.beam$beam.txt")
  bleu=$(awk -F'|' -v a="$alpha" -v w="$weight" '$2+0 == a+0 && $3+0 == w+0 && $4 ~ /[0-9]/ {print $4+0; exit}' \
    "$OUT/tune.beam$beam.txt")
  if awk -v b="$bleu" -v c="$best_bleu" 'BEGIN {exit !(b > c)}'; then
    best="$beam $alpha $weight"; best_bleu=$bleu
  fi
done
set -- $best
echo "chosen on valid: beam $1, alpha $2, rerank weight $3 (valid BLEU $best_bleu)" | tee "$OUT/choice.txt"
$NMT translate "$OUT/l2r/average" -i "$data/test.en.txt" -o "$OUT/test.hyp.de" --beam "$1" --alpha "$2" \
  --rerank "$OUT/r2l/average" --rerank-weight "$3"
echo "== test2016, left-to-right model reranked with the right-to-left one, beam $1, alpha $2, weight $3 (chosen on valid)"
$NMT score --ref "$data/test.de.txt" "$OUT/test.hyp.de" | tee "$OUT/test.score.txt"
