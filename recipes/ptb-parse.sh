#!/bin/sh
# English constituency parsing (section 6.3) end to end on the Penn Treebank sample: prepare
# (split by file, linearised trees, word-level vocabulary), train (4,000 updates: ~67 min on one
# thread of a shared 2-core CPU), average the last 5 checkpoints, parse valid and test with the paper's beam 21, alpha 0.3, |x|+300, and
# score labelled bracket F1 (EVALB COLLINS.prm conventions). Config: recipes/ptb-parse.yaml.
#   sh recipes/ptb-parse.sh [OUT_DIR]        (NMT_DATA_DIR: folder holding ptb_sample/)
# Uses `nmt` from PATH, or set NMT="python -m nmt". MAX_TIME=MINUTES replaces the training budget;
# TRAIN_ARGS adds --train.FIELD=VALUE overrides (e.g. --train.num_threads=1); PREPARE_ARGS adds
# `nmt prepare ptb` options (PREPARE_ARGS="--leaves words": each word as itself instead of XX; "--leaves
# pos": as its POS tag; neither is the paper's); PARSE_ARGS adds `nmt parse` options (--well-formed:
# search only well-formed trees with one leaf per word, not the paper's); CONFIG replaces
# recipes/ptb-parse.yaml. The variant that parses (test F1 77.8 instead of 12-18; none of it is
# the paper's setting): PREPARE_ARGS="--form per-word --copy-pairs" PARSE_ARGS=--well-formed
# CONFIG=recipes/ptb-parse-per-word.yaml sh recipes/ptb-parse.sh runs/ptb-per-word
set -eu
OUT=${1:-runs/ptb-parse}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
CONFIG=${CONFIG:-$HERE/ptb-parse.yaml}
TREEBANK=${NMT_DATA_DIR:-$HERE/../../shared/data}/ptb_sample/combined.tar.gz
mkdir -p "$OUT"
# shellcheck disable=SC2086
[ -f "$OUT/data/meta.json" ] || $NMT prepare ptb --treebank "$TREEBANK" --out "$OUT/data" ${PREPARE_ARGS:-}
if [ -f "$OUT/run/config.json" ]; then
  $NMT train "$OUT/data" --out "$OUT/run" --resume
else
  # shellcheck disable=SC2086
  $NMT train "$OUT/data" --out "$OUT/run" --config "$CONFIG" \
    ${MAX_TIME:+--train.max_time=$MAX_TIME} ${TRAIN_ARGS:-}
fi
$NMT average "$OUT/run" --last 5 --out "$OUT/average" --force
for split in valid test; do
  echo "== $split (averaged checkpoint, beam 21, alpha 0.3, |x|+300)"
  # shellcheck disable=SC2086
  $NMT parse "$OUT/average" -i "$OUT/data/$split.words.txt" -o "$OUT/$split.trees" \
    --gold "$OUT/data/$split.gold.txt" ${PARSE_ARGS:-} 2> "$OUT/$split.log" || { cat "$OUT/$split.log" >&2; exit 1; }
  grep -E "^(parsed|labelled)" "$OUT/$split.log" | tee "$OUT/$split.score.txt"
done
