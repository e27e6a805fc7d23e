#!/bin/sh
# Multi30k en->de end to end: prepare, train (30 min on 2 CPU cores), average the last 5
# checkpoints, choose the length penalty on valid (`nmt tune-alpha`, beam 4; ALPHA=0.6 fixes the
# paper's), translate test2016 once with beam 4 and it, score with sacreBLEU and chrF.
#   sh recipes/multi30k-en-de.sh [OUT_DIR]        (NMT_DATA_DIR: folder holding multi30k/)
#   MAX_TIME=60 sh recipes/multi30k-en-de.sh runs/multi30k-en-de-60    (the 60-minute variant)
# Uses `nmt` from PATH, or set NMT="python -m nmt". MAX_TIME=MINUTES replaces the training budget
# of recipes/multi30k-en-de.yaml (30); TRAIN_ARGS adds --model.FIELD=VALUE / --train.FIELD=VALUE
# overrides (e.g. TRAIN_ARGS=--model.dropout=0.3); PREPARE_ARGS adds `nmt prepare` options (e.g.
# PREPARE_ARGS="--bpe-dropout 0.1").
# Dropout and warm-up follow the number of updates the budget holds on this machine: the YAML's
# (dropout 0.2, warm-up 500, lr_scale 0.35) when the run will hold at least 9,000, else dropout 0.1
# with warm-up 1000 and lr_scale 0.5 (the same peak rate, reached later; 1.43x the YAML's rate
# after it); a probe of 150 updates (under a minute, before the budget starts) measures the rate
# (results/speedrun/README.md, the rows "dropout for the budget" and "warm-up 1,000 at lr_scale 0.5";
# results/multi30k-30min/xeon-amx/). DROPOUT=P, or --model.dropout in TRAIN_ARGS, skips the probe; so does a budget given in
# TRAIN_ARGS (--train.max_time / --train.max_steps) or MAX_TIME=0, which keep the YAML's settings.
# SCHEDULE: "auto" (the default: the probe's warm-up as above; the YAML's without a probe), empty
# (the YAML's warm-up and lr_scale), or --train.* options of your own. TRAIN_ARGS come last: they
# override all of these.
# UNTIL=prepare stops after preparing the data; UNTIL=probe after the probe, writing the dropout it
# chose to OUT_DIR/dropout.txt (recipes/lib/train-runs.sh probes runs side by side this way).
set -eu
OUT=${1:-runs/multi30k-en-de}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
# the corpora: $NMT_DATA_DIR, else ../shared/data next to the checkout when it exists (as the
# Makefile does), else `nmt prepare` downloads them
if [ -z "${NMT_DATA_DIR:-}" ] && [ -d "$HERE/../../shared/data" ]; then
  NMT_DATA_DIR=$(cd "$HERE/../../shared/data" && pwd); export NMT_DATA_DIR
fi
mkdir -p "$OUT"
# shellcheck disable=SC2086
[ -f "$OUT/data/meta.json" ] || $NMT prepare multi30k --src en --tgt de --out "$OUT/data" ${PREPARE_ARGS:-}
[ "${UNTIL:-}" = prepare ] && exit 0
if [ -f "$OUT/run/config.json" ]; then
  if [ "${UNTIL:-}" = probe ]; then  # a run under way keeps its dropout
    sh "$HERE/lib/dropout-of.sh" "$OUT/run" > "$OUT/dropout.txt"
    exit 0
  fi
  $NMT train "$OUT/data" --out "$OUT/run" --resume
else
  SCHEDULE=${SCHEDULE-auto}
  probe=${DROPOUT:+no}  # DROPOUT, a dropout or a budget in TRAIN_ARGS, or MAX_TIME=0: no probe
  case " ${TRAIN_ARGS:-} " in *" --model.dropout"* | *" --train.max_time"* | *" --train.max_steps"*) probe=no ;; esac
  [ "${MAX_TIME:-30}" = 0 ] && probe=no
  if [ -z "$probe" ]; then
    rm -rf "$OUT/probe"
    # shellcheck disable=SC2086
    $NMT train "$OUT/data" --out "$OUT/probe" --config "$HERE/multi30k-en-de.yaml" ${TRAIN_ARGS:-} \
      --train.max_steps=150 --train.log_every_steps=25 --train.valid_every_steps=0 --train.valid_bleu=false --train.best_metric=loss \
      --train.save_every_steps=0
    # updates per second between the first and the last logged update, over the budget; a whole run
    # averages ~90% of that rate (0.89-0.98 measured: validation, checkpoints, the machine's drift)
    DROPOUT=$({ cat "$OUT/probe/metrics.jsonl" 2>/dev/null || true; } | awk -v minutes="${MAX_TIME:-30}" -v threshold=9000 '
      /"split": "train"/ {
        match($0, /"(update|step)": [0-9]+/); u = substr($0, RSTART, RLENGTH); sub(/.*: /, "", u); u += 0
        match($0, /"elapsed": [0-9.eE+-]+/); elapsed = substr($0, RSTART + 11, RLENGTH - 11) + 0
        if (n++ == 0) { s0 = u; e0 = elapsed } else { s1 = u; e1 = elapsed } }
      END {
        if (n < 2 || e1 <= e0) { print "probe: no update rate logged" > "/dev/stderr"; print "0.2"; exit }
        updates = (s1 - s0) / (e1 - e0) * minutes * 60 * 0.9
        printf "probe: %.1f updates/s, about %d updates in %s minutes\n", (s1 - s0) / (e1 - e0), updates, minutes > "/dev/stderr"
        print (updates >= threshold ? "0.2" : "0.1") }')
    echo "dropout $DROPOUT for this budget on this machine (0.2 from 9,000 updates, else 0.1)"
    # a short budget also warms up for 1,000 updates at lr_scale 0.5 (+0.7 / +0.9 valid BLEU at 0.6 /
    # the chosen alpha, seed 1, ~7,000 updates on an AMX Xeon; results/multi30k-30min/xeon-amx/)
    if [ "$SCHEDULE" = auto ] && [ "$DROPOUT" = 0.1 ]; then
      SCHEDULE="--train.warmup_steps=1000 --train.lr_scale=0.5"
      echo "warm-up 1000, lr_scale 0.5 for this budget (the YAML's 500 and 0.35 from 9,000 updates)"
    fi
    rm -rf "$OUT/probe"
  fi
  if [ "${UNTIL:-}" = probe ]; then
    echo "${DROPOUT:-}" > "$OUT/dropout.txt"  # empty: no probe (the YAML's or TRAIN_ARGS's dropout)
    exit 0
  fi
  [ "$SCHEDULE" = auto ] && SCHEDULE=""  # no probe, or a budget of 9,000 updates or more: the YAML's
  # shellcheck disable=SC2086
  $NMT train "$OUT/data" --out "$OUT/run" --config "$HERE/multi30k-en-de.yaml" \
    ${MAX_TIME:+--train.max_time=$MAX_TIME} ${DROPOUT:+--model.dropout=$DROPOUT} ${SCHEDULE:-} ${TRAIN_ARGS:-}
fi
$NMT average "$OUT/run" --last 5 --out "$OUT/average" --force  # a rerun replaces the average
$NMT plot "$OUT/run"
# the length penalty of the averaged model, chosen on valid as the paper chose its 0.6 on its
# development set (6.1): ALPHA=A fixes it instead
if [ -z "${ALPHA:-}" ]; then
  $NMT tune-alpha "$OUT/average" --src "$OUT/data/valid.en.txt" --ref "$OUT/data/valid.de.txt" \
    --out "$OUT/alpha.json" > "$OUT/alpha.txt"  # not through a pipe: a failure stops the recipe
  cat "$OUT/alpha.txt"
  ALPHA=$(sed -n 's/^best alpha: //p' "$OUT/alpha.txt"); chosen=" (chosen on valid)"
  [ -n "$ALPHA" ] || { echo "no 'best alpha' in $OUT/alpha.txt" >&2; exit 1; }
else
  chosen=" (given)"
fi
for model in average run/checkpoints/best; do
  name=$(basename "$model")
  $NMT translate "$OUT/$model" -i "$OUT/data/valid.en.txt" -o "$OUT/valid.$name.de" --beam 4 --alpha "$ALPHA"
  echo "== valid, $model, alpha $ALPHA"; $NMT score --ref "$OUT/data/valid.de.txt" "$OUT/valid.$name.de"
done
# the test set is translated once, with the checkpoint chosen above on valid (the average)
$NMT translate "$OUT/average" -i "$OUT/data/test.en.txt" -o "$OUT/test.hyp.de" --beam 4 --alpha "$ALPHA"
echo "== test2016, averaged checkpoint, beam 4, alpha $ALPHA$chosen"
$NMT score --ref "$OUT/data/test.de.txt" "$OUT/test.hyp.de" | tee "$OUT/test.score.txt"
