#!/bin/sh
# Multi30k en->de, an hour as a teacher and a distilled student (sequence-level knowledge
# distillation, Kim & Rush 2016), ensembled: not in the paper.
#  1. the teacher: a 30-minute run of the recipe (recipes/multi30k-en-de.sh, seed 1);
#  2. it translates the training sources (beam 4, alpha 0.6);
#  3. the student's training data: the original pairs plus (source, teacher's translation),
#     binarized with the teacher's vocabulary (`nmt prepare files --spm-model`);
#  4. the student: the recipe (seed 2) trained for what is left of the second 30 minutes after
#     steps 2-3, averaged over its last 5 checkpoints;
#  5. teacher + student as an ensemble, length penalty chosen on valid, test2016 once.
#   sh recipes/multi30k-en-de-distill.sh [OUT_DIR] [TEACHER_DIR]
# TEACHER_DIR: an existing recipes/multi30k-en-de.sh output to use as the teacher (else trained
# into OUT_DIR/teacher). Uses `nmt` from PATH, or set NMT="python -m nmt".
set -eu
OUT=${1:-runs/multi30k-en-de-distill}
TEACHER=${2:-$OUT/teacher}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
if [ -z "${NMT_DATA_DIR:-}" ] && [ -d "$HERE/../../shared/data" ]; then
  NMT_DATA_DIR=$(cd "$HERE/../../shared/data" && pwd); export NMT_DATA_DIR
fi
# the teacher alone is scored at alpha 0.6 (the ensemble chooses its own on valid)
[ -f "$TEACHER/average/config.json" ] || ALPHA=${ALPHA:-0.6} TRAIN_ARGS="--train.seed=1 ${TRAIN_ARGS:-}" \
  sh "$HERE/multi30k-en-de.sh" "$TEACHER"
mkdir -p "$OUT"
start=$(date +%s)
M30K=${NMT_DATA_DIR:-$HOME/.cache/nmt/data}/multi30k
gzip -dc "$M30K/train.en.gz" > "$OUT/train.en"
gzip -dc "$M30K/train.de.gz" > "$OUT/train.de"
[ -f "$OUT/train.distilled.de" ] || {
  $NMT translate "$TEACHER/average" -i "$OUT/train.en" -o "$OUT/train.distilled.de.tmp" --beam 4 --alpha 0.6
  mv "$OUT/train.distilled.de.tmp" "$OUT/train.distilled.de"
}
cat "$OUT/train.en" "$OUT/train.en" > "$OUT/mix.en"
cat "$OUT/train.de" "$OUT/train.distilled.de" > "$OUT/mix.de"
[ -f "$OUT/data/meta.json" ] || $NMT prepare files --src en --tgt de --out "$OUT/data" \
  --train "$OUT/mix.en" "$OUT/mix.de" --valid "$TEACHER/data/valid.en.txt" "$TEACHER/data/valid.de.txt" \
  --test "$TEACHER/data/test.en.txt" "$TEACHER/data/test.de.txt" --spm-model "$TEACHER/data"
spent=$(( ($(date +%s) - start + 59) / 60 ))  # minutes of distilling and preparing, rounded up
echo "== distilled and prepared in $spent min; the student trains for $((30 - spent)) min"
if [ -f "$OUT/student/config.json" ]; then
  $NMT train "$OUT/data" --out "$OUT/student" --resume
else
  # the student trains at the teacher's dropout (chosen by its run's probe, recipes/multi30k-en-de.sh)
  DROPOUT=${DROPOUT:-$(sh "$HERE/lib/dropout-of.sh" "$TEACHER/average")}
  # shellcheck disable=SC2086
  $NMT train "$OUT/data" --out "$OUT/student" --config "$HERE/multi30k-en-de.yaml" --train.seed=2 \
    --train.max_time=$((30 - spent)) ${DROPOUT:+--model.dropout=$DROPOUT} ${TRAIN_ARGS:-}
fi
$NMT average "$OUT/student" --last 5 --out "$OUT/student-average" --force
$NMT translate "$OUT/student-average" -i "$OUT/data/valid.en.txt" -o "$OUT/valid.student.de" --beam 4 --alpha 0.6
echo "== valid, the student alone"; $NMT score --ref "$OUT/data/valid.de.txt" "$OUT/valid.student.de"
NMT="$NMT" sh "$HERE/lib/ensemble-test.sh" "$OUT" "$OUT/data" "teacher + student ensemble" \
  "$TEACHER/average" "$OUT/student-average"
