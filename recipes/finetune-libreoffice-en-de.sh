#!/bin/sh
# Fine-tuning (`nmt train --init`): a Multi30k en->de model (image captions) adapted to the
# LibreOffice help en->de corpus (software documentation), against the same minutes of training
# from scratch on that corpus and against the model before adapting; and what adapting costs on
# Multi30k test2016.
#   sh recipes/finetune-libreoffice-en-de.sh BASE [OUT_DIR]
# BASE: a Multi30k en->de checkpoint or run directory (`make recipe`'s runs/multi30k-en-de/average,
# or `make demo`'s runs/demo/average). The LibreOffice data are prepared with BASE's vocabulary
# (`--spm-model BASE`), as fine-tuning needs. MINUTES (default 10) is the training budget of both
# the adapted and the scratch run; TRAIN_ARGS adds --train.FIELD=VALUE to both (the adapted run
# otherwise keeps BASE's training settings: batch, warm-up, learning rate; the scratch run uses
# recipes/multi30k-en-de.yaml's, the same model). Uses `nmt` from PATH, or set NMT="python -m nmt".
# Writes OUT_DIR/{data,adapted,scratch} and OUT_DIR/scores.md.
set -eu
BASE=$1
OUT=${2:-runs/finetune-libreoffice-en-de}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
MINUTES=${MINUTES:-10}
mkdir -p "$OUT"
[ -f "$OUT/data/meta.json" ] || $NMT prepare libreoffice --src en --tgt de --out "$OUT/data" \
  --spm-model "$BASE" ${NMT_DATA_DIR:+--data-dir "$NMT_DATA_DIR"}
# shellcheck disable=SC2086
$NMT train "$OUT/data" --out "$OUT/adapted/run" --init "$BASE" --resume auto \
  --train.max_time="$MINUTES" --train.save_every_steps=100 --train.keep_last=5 ${TRAIN_ARGS:-}
# shellcheck disable=SC2086
$NMT train "$OUT/data" --out "$OUT/scratch/run" --config "$HERE/multi30k-en-de.yaml" --resume auto \
  --train.max_time="$MINUTES" --train.save_every_steps=100 --train.keep_last=5 ${TRAIN_ARGS:-}
for run in adapted scratch; do
  $NMT average "$OUT/$run/run" --last 5 --out "$OUT/$run/average" --force
done
M30K=${NMT_DATA_DIR:-$HERE/../../shared/data}/multi30k
gzip -dcf "$M30K/test.en.gz" > "$OUT/m30k-test.en"
gzip -dcf "$M30K/test.de.gz" > "$OUT/m30k-test.de"
score() {  # NAME MODEL SRC REF: translate (beam 4, alpha 0.6) and print one table row
  $NMT translate "$2" -i "$3" -o "$OUT/$1.hyp" --beam 4 --alpha 0.6
  $NMT score --format json --ref "$4" "$OUT/$1.hyp" > "$OUT/$1.json"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"| {sys.argv[2]} | {s['bleu']:.2f} | {s['chrf']:.2f} |\")" \
    "$OUT/$1.json" "$1"
}
{
  echo "| model on test set | BLEU | chrF |"
  echo "|---|---|---|"
  score libreoffice.base "$BASE" "$OUT/data/test.en.txt" "$OUT/data/test.de.txt"
  score libreoffice.scratch "$OUT/scratch/average" "$OUT/data/test.en.txt" "$OUT/data/test.de.txt"
  score libreoffice.adapted "$OUT/adapted/average" "$OUT/data/test.en.txt" "$OUT/data/test.de.txt"
  score multi30k.base "$BASE" "$OUT/m30k-test.en" "$OUT/m30k-test.de"
  score multi30k.adapted "$OUT/adapted/average" "$OUT/m30k-test.en" "$OUT/m30k-test.de"
} | tee "$OUT/scores.md"
