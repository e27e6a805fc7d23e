#!/bin/sh
# One model for three targets against three bilingual models, given the same total training time:
# Multi30k en->de, en->fr and en->cs (test2016 BLEU per pair). The multilingual model
# (`nmt prepare --tgt de,fr,cs`: each source tagged >>de<< / >>fr<< / >>cs<<, nmt/data/multilingual.py)
# trains BUDGET minutes; each bilingual model BUDGET/3, one after the other. All use
# recipes/multi30k-en-de.yaml's model and schedule (its dropout 0.2, no probe), average their last 5
# checkpoints and translate test2016 once with beam 4, alpha 0.6; the multilingual model with
# `nmt translate --target-lang`.
#   sh recipes/multi30k-multilingual.sh [OUT_DIR]      (NMT_DATA_DIR: folder holding multi30k/)
# BUDGET=MINUTES (default 60: about an hour of a quiet 2-core CPU, plus ~5 minutes of preparing
# and translating). UPDATES=N gives the same total compute as a count instead of minutes: the
# multilingual model trains N updates and each bilingual model N/3 (one architecture, one vocabulary
# size and ~1k-token updates for all, so an update costs the same in every run), which holds on a
# CPU shared with other work, where minutes do not; TRAIN_ARGS adds --model.* / --train.* overrides to every run; PREPARE_ARGS adds
# `nmt prepare` options to every preparation (each has its own 8k BPE vocabulary by default: the
# multilingual one shares its 8k pieces among four languages). Uses `nmt` from PATH, or set
# NMT="python -m nmt". Writes OUT_DIR/en-{de,fr,cs}/ and OUT_DIR/en-mul/ (data/, run/, average/,
# test.hyp.*), and OUT_DIR/table.md. Running it again resumes unfinished runs and redoes the rest.
set -eu
OUT=${1:-runs/multi30k-multilingual}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
BUDGET=${BUDGET:-60}
TARGETS="de fr cs"
if [ -z "${NMT_DATA_DIR:-}" ] && [ -d "$HERE/../../shared/data" ]; then
  NMT_DATA_DIR=$(cd "$HERE/../../shared/data" && pwd); export NMT_DATA_DIR
fi
mkdir -p "$OUT"
EACH=$(awk -v b="$BUDGET" 'BEGIN { printf "%g", b / 3 }')
UPDATES=${UPDATES:-}
if [ -n "$UPDATES" ]; then
  EACH_UPDATES=$((UPDATES / 3))
fi

train() {  # DIR MINUTES UPDATES: train DIR/run on DIR/data (or resume it), then average its last 5
  if [ -f "$1/run/config.json" ]; then
    $NMT train "$1/data" --out "$1/run" --resume ${3:+--train.max_steps="$3"}
  elif [ -n "$3" ]; then
    # shellcheck disable=SC2086
    $NMT train "$1/data" --out "$1/run" --config "$HERE/multi30k-en-de.yaml" --train.max_time=0 \
      --train.max_steps="$3" ${TRAIN_ARGS:-}
  else
    # shellcheck disable=SC2086
    $NMT train "$1/data" --out "$1/run" --config "$HERE/multi30k-en-de.yaml" --train.max_time="$2" ${TRAIN_ARGS:-}
  fi
  $NMT average "$1/run" --last 5 --out "$1/average" --force
}

for t in $TARGETS; do
  # shellcheck disable=SC2086
  [ -f "$OUT/en-$t/data/meta.json" ] || $NMT prepare multi30k --src en --tgt "$t" --out "$OUT/en-$t/data" ${PREPARE_ARGS:-}
done
# shellcheck disable=SC2086
[ -f "$OUT/en-mul/data/meta.json" ] || $NMT prepare multi30k --src en --tgt de,fr,cs --out "$OUT/en-mul/data" ${PREPARE_ARGS:-}
for t in $TARGETS; do
  train "$OUT/en-$t" "$EACH" "${EACH_UPDATES:-}"
done
train "$OUT/en-mul" "$BUDGET" "$UPDATES"

{
  if [ -n "$UPDATES" ]; then
    echo "| pair | bilingual ($EACH_UPDATES updates each) | multilingual ($UPDATES updates, one model) |"
  else
    echo "| pair | bilingual ($EACH min each) | multilingual ($BUDGET min, one model) |"
  fi
  echo "|---|---|---|"
} > "$OUT/table.md"
for t in $TARGETS; do
  src="$OUT/en-$t/data/test.en.txt" ref="$OUT/en-$t/data/test.$t.txt"
  $NMT translate "$OUT/en-$t/average" -i "$src" -o "$OUT/en-$t/test.hyp.$t" --beam 4 --alpha 0.6
  $NMT translate "$OUT/en-mul/average" -i "$src" -o "$OUT/en-mul/test.hyp.$t" --beam 4 --alpha 0.6 --target-lang "$t"
  bi=$($NMT score --ref "$ref" "$OUT/en-$t/test.hyp.$t" | sed -n 's/^BLEU[^0-9]*\([0-9.]*\).*/\1/p' | head -1)
  multi=$($NMT score --ref "$ref" "$OUT/en-mul/test.hyp.$t" | sed -n 's/^BLEU[^0-9]*\([0-9.]*\).*/\1/p' | head -1)
  echo "| en-$t | $bi | $multi |" >> "$OUT/table.md"
done
echo "== test2016 BLEU (sacreBLEU), beam 4, alpha 0.6, averaged checkpoints"
cat "$OUT/table.md"
