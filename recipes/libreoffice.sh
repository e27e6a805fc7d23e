#!/bin/sh
# LibreOffice help SRC->TGT end to end (en->zh, zh->en; the corpus also has en<->de, which needs a
# recipes/libreoffice-en-de.yaml first): prepare (checksums verified, train shuffled from the seed,
# 8k shared BPE, character coverage 0.9995), train (60 min on 2 CPU cores), average the last 5
# checkpoints, translate valid and test with beam 4 / alpha 0.6, score with sacreBLEU's `zh`
# tokenizer for Chinese output and `13a` otherwise, and chrF; for zh->en also WMT newstest2018
# (news: out of domain) if present. The config is recipes/libreoffice-SRC-TGT.yaml.
#   sh recipes/libreoffice.sh SRC TGT [OUT_DIR]   (NMT_DATA_DIR: folder holding libreoffice_help/)
# recipes/libreoffice-en-zh.sh and libreoffice-zh-en.sh call it.
# Uses `nmt` from PATH, or set NMT="python -m nmt". MAX_TIME=MINUTES replaces the 60-minute
# training budget (e.g. MAX_TIME=2 for a smoke run); TRAIN_ARGS adds --train.FIELD=VALUE
# overrides; AVERAGE_LAST (default 5) is the number of checkpoints averaged; EVAL_LINES=N
# translates and scores only the first N lines of each evaluation set (smoke runs).
set -eu
SRC=$1 TGT=$2
OUT=${3:-runs/libreoffice-$SRC-$TGT}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
TOK=13a; [ "$TGT" = zh ] && TOK=zh
mkdir -p "$OUT"
cut_to() {  # FILE OUT: FILE (plain or .gz), or its first EVAL_LINES lines, as plain text
  gzip -dcf "$1" | if [ -n "${EVAL_LINES:-}" ]; then head -n "$EVAL_LINES"; else cat; fi > "$2"
}
[ -f "$OUT/data/meta.json" ] || $NMT prepare libreoffice --src $SRC --tgt $TGT --out "$OUT/data" \
  ${NMT_DATA_DIR:+--data-dir "$NMT_DATA_DIR"}
if [ -f "$OUT/run/config.json" ]; then
  $NMT train "$OUT/data" --out "$OUT/run" --resume
else
  # shellcheck disable=SC2086
  $NMT train "$OUT/data" --out "$OUT/run" --config "$HERE/libreoffice-$SRC-$TGT.yaml" \
    ${MAX_TIME:+--train.max_time=$MAX_TIME} ${TRAIN_ARGS:-}
fi
$NMT average "$OUT/run" --last "${AVERAGE_LAST:-5}" --out "$OUT/average"
for split in valid test; do
  cut_to "$OUT/data/$split.$SRC.txt" "$OUT/$split.src.$SRC"
  cut_to "$OUT/data/$split.$TGT.txt" "$OUT/$split.ref.$TGT"
done
for model in average run/checkpoints/best; do
  name=$(basename "$model")
  $NMT translate "$OUT/$model" -i "$OUT/valid.src.$SRC" -o "$OUT/valid.$name.$TGT" --beam 4 --alpha 0.6
  echo "== valid, $model"; $NMT score --tokenize $TOK --ref "$OUT/valid.ref.$TGT" "$OUT/valid.$name.$TGT"
done
# the test set is translated once, with the averaged checkpoint
$NMT translate "$OUT/average" -i "$OUT/test.src.$SRC" -o "$OUT/test.hyp.$TGT" --beam 4 --alpha 0.6
echo "== LibreOffice help test ($SRC->$TGT, in domain${EVAL_LINES:+, first $EVAL_LINES lines}), averaged checkpoint, beam 4, alpha 0.6"
$NMT score --tokenize $TOK --ref "$OUT/test.ref.$TGT" "$OUT/test.hyp.$TGT" | tee "$OUT/test.score.txt"
# out of domain: WMT18 zh->en news test (newstest2018, 3,981 lines; $NMT_DATA_DIR/wmt_zh_en/test.*)
WMT=${NMT_DATA_DIR:-../shared/data}/wmt_zh_en
if [ "$SRC-$TGT" != zh-en ]; then
  :
elif [ -f "$WMT/test.zh.gz" ]; then
  cut_to "$WMT/test.zh.gz" "$OUT/newstest2018.src.zh"
  cut_to "$WMT/test.en.gz" "$OUT/newstest2018.ref.en"
  $NMT translate "$OUT/average" -i "$OUT/newstest2018.src.zh" -o "$OUT/newstest2018.hyp.en" --beam 4 --alpha 0.6
  echo "== WMT newstest2018 zh->en (OUT OF DOMAIN: news; trained on software help${EVAL_LINES:+; first $EVAL_LINES lines}), averaged checkpoint"
  $NMT score --ref "$OUT/newstest2018.ref.en" "$OUT/newstest2018.hyp.en" | tee "$OUT/newstest2018.score.txt"
else
  echo "(no $WMT/test.zh.gz: skipping the out-of-domain WMT newstest2018 score)"
fi
