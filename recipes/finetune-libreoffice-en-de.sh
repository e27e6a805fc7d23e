#!/bin/sh
# Fine-tuning that does not forget (`nmt train --init` with --replay and --guard-valid): a Multi30k
# en->de model (image captions) adapted to the LibreOffice help en->de corpus (software
# documentation), scored on LibreOffice test and Multi30k test2016 (beam 4, alpha 0.6):
#   start    the model before adapting: BASE, or with ROUNDTRIP=1 BASE exported to Hugging Face
#            format and imported back (`nmt import huggingface`: the stand-in for a downloaded model)
#   adapted  plain fine-tuning on LibreOffice (--init): its best checkpoint (valid loss), chosen as
#            the guarded run's is, so that the two differ only by replay and the guard
#   guarded  fine-tuning with REPLAY_SHARE (0.2) of each epoch's target tokens drawn from Multi30k
#            train (--replay) and Multi30k valid guarding what the model knew (--guard-valid,
#            --guard-bleu-drop GUARD_DROP, 1.0): its best checkpoint
#   scratch  (SCRATCH=1, the default) the same minutes from random weights on LibreOffice
#   sh recipes/finetune-libreoffice-en-de.sh BASE [OUT_DIR]
# BASE: a Multi30k en->de checkpoint or run directory (`make recipe`'s runs/multi30k-en-de/average,
# or `make demo`'s runs/demo/average). The adaptation data are LibreOffice help's train text and,
# with TAGGED=1 (the default), its tagged pairs (train.tagged.*) as a TMX file, prepared with the
# start's vocabulary, as fine-tuning needs; Multi30k is prepared with it too (replayed, guarded,
# tested). Each run stops after UPDATES (default 600) updates of BATCH_TOKENS (2048) target tokens or
# after MINUTES (default 60), whichever comes first: a fixed number of updates gives the same models on
# a fast, slow or busy CPU. The fine-tuned runs validate every VALID_EVERY (200) updates on
# VALID_SENTENCES (500) sentences (greedy BLEU, the guard's Multi30k valid too) and otherwise keep the
# start's training settings (an imported model has the paper's defaults: warm-up 4,000, so the
# learning rate is still rising at the end); TRAIN_ARGS adds --train.FIELD=VALUE to every run.
# Uses `nmt` from PATH, or set NMT="python -m nmt" and PY (a python that imports nmt).
# Writes OUT_DIR/{data,m30k,adapted,guarded,scratch}, OUT_DIR/scores.md and OUT_DIR/scores.json.
set -eu
BASE=$1
OUT=${2:-runs/finetune-libreoffice-en-de}
NMT=${NMT:-nmt}
PY=${PY:-python3}
HERE=$(dirname "$0")
MINUTES=${MINUTES:-60}
UPDATES=${UPDATES:-600}
BATCH_TOKENS=${BATCH_TOKENS:-2048}
REPLAY_SHARE=${REPLAY_SHARE:-0.2}
GUARD_DROP=${GUARD_DROP:-1.0}
LO=${NMT_DATA_DIR:-$HERE/../../shared/data}/libreoffice_help/en-de
mkdir -p "$OUT"
START=$BASE
if [ "${ROUNDTRIP:-0}" = 1 ]; then
  [ -f "$OUT/start/MANIFEST.json" ] || {
    $NMT export huggingface "$BASE" "$OUT/hf"
    $NMT import huggingface "$OUT/hf" "$OUT/start"
  }
  START=$OUT/start
fi
if [ ! -f "$OUT/data/meta.json" ]; then
  TMX=
  if [ "${TAGGED:-1}" = 1 ]; then
    $PY "$HERE/lib/adaptation.py" tmx "$LO/train.tagged.en.gz" "$LO/train.tagged.de.gz" "$OUT/train.tagged.tmx" en de
    TMX="--train $OUT/train.tagged.tmx"
  fi
  # shellcheck disable=SC2086
  $NMT prepare files --src en --tgt de --out "$OUT/data" --spm-model "$START" \
    --train "$LO/train.en.gz" "$LO/train.de.gz" $TMX \
    --valid "$LO/valid.en.gz" "$LO/valid.de.gz" --test "$LO/test.en.gz" "$LO/test.de.gz"
fi
[ -f "$OUT/m30k/meta.json" ] || $NMT prepare multi30k --src en --tgt de --out "$OUT/m30k" \
  --spm-model "$START" ${NMT_DATA_DIR:+--data-dir "$NMT_DATA_DIR"}
BUDGET="--train.max_steps=$UPDATES --train.max_time=$MINUTES --train.max_tokens=$BATCH_TOKENS
  --train.update_tokens=$BATCH_TOKENS --train.save_every_steps=100 --train.keep_last=5"
VALIDATE="--train.valid_every_steps=${VALID_EVERY:-200} --train.valid_bleu_max_sentences=${VALID_SENTENCES:-500}"
# shellcheck disable=SC2086
$NMT train "$OUT/data" --out "$OUT/adapted/run" --init "$START" --resume auto $BUDGET $VALIDATE ${TRAIN_ARGS:-}
# shellcheck disable=SC2086
$NMT train "$OUT/data" --out "$OUT/guarded/run" --init "$START" --resume auto $BUDGET $VALIDATE \
  --replay "$OUT/m30k" --replay-share "$REPLAY_SHARE" --guard-valid "$OUT/m30k" \
  --guard-bleu-drop "$GUARD_DROP" ${TRAIN_ARGS:-}
# the last 5 checkpoints; a slow or busy CPU may write fewer in MINUTES: then all of them
last_of() {
  n=$(find "$1/checkpoints" -maxdepth 1 -name 'step_*' 2>/dev/null | wc -l)
  if [ "$n" -gt 5 ]; then n=5; fi
  if [ "$n" -lt 5 ]; then echo "finetune: only $n checkpoints in $1: averaging those" >&2; fi
  echo "$n"
}
MODELS="start:$START adapted:$OUT/adapted/run/checkpoints/best guarded:$OUT/guarded/run/checkpoints/best"
if [ "${SCRATCH:-1}" = 1 ]; then
  # shellcheck disable=SC2086
  $NMT train "$OUT/data" --out "$OUT/scratch/run" --config "$HERE/multi30k-en-de.yaml" --resume auto \
    $BUDGET ${TRAIN_ARGS:-}
  $NMT average "$OUT/scratch/run" --last "$(last_of "$OUT/scratch/run")" --out "$OUT/scratch/average" --force
  MODELS="$MODELS scratch:$OUT/scratch/average"
fi
score() {  # TEST NAME MODEL SRC REF: translate (beam 4, alpha 0.6), score, print one table row
  $NMT translate "$3" -i "$4" -o "$OUT/$1.$2.hyp" --beam 4 --alpha 0.6
  $NMT score --format json --ref "$5" "$OUT/$1.$2.hyp" > "$OUT/$1.$2.json"
  $PY -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"| {sys.argv[2]} | {s['bleu']:.2f} | {s['chrf']:.2f} |\")" \
    "$OUT/$1.$2.json" "$1 $2"
}
{
  echo "| test set, model | BLEU | chrF |"
  echo "|---|---|---|"
  for pair in $MODELS; do
    score libreoffice "${pair%%:*}" "${pair#*:}" "$OUT/data/test.en.txt" "$OUT/data/test.de.txt"
  done
  for pair in $MODELS; do
    [ "${pair%%:*}" = scratch ] || score multi30k "${pair%%:*}" "${pair#*:}" "$OUT/m30k/test.en.txt" "$OUT/m30k/test.de.txt"
  done
} | tee "$OUT/scores.md"
$PY "$HERE/lib/adaptation.py" scores "$OUT" "BASE=$BASE" "START=$START" "UPDATES=$UPDATES" "BATCH_TOKENS=$BATCH_TOKENS" "MINUTES=$MINUTES" \
  "REPLAY_SHARE=$REPLAY_SHARE" "GUARD_DROP=$GUARD_DROP" "ROUNDTRIP=${ROUNDTRIP:-0}" "TAGGED=${TAGGED:-1}" \
  "TRAIN_ARGS=${TRAIN_ARGS:-}"
echo "wrote $OUT/scores.md and $OUT/scores.json"
