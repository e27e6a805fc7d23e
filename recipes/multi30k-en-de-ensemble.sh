#!/bin/sh
# Multi30k en->de, the 60-minute variant: two runs of the 30-minute recipe (seeds 1 and 2: 60
# minutes of training in all), each averaged over its last 5 checkpoints, translated as an
# ensemble (log-probabilities averaged per step, nmt.infer.search.Ensemble). The length penalty is
# chosen on valid with `nmt tune-alpha`, as the paper chose its 0.6 on its development set (6.1);
# test2016 is then translated once.
#   sh recipes/multi30k-en-de-ensemble.sh [OUT_DIR]
# Uses `nmt` from PATH, or set NMT="python -m nmt". SEEDS="1 2 3" trains three models; MAX_TIME
# (minutes per run when they run one after the other, default 30) and TRAIN_ARGS are passed to
# each run of recipes/multi30k-en-de.sh (which also scores each model alone on valid and test2016).
# A finished seed's run is kept, not trained again.
# The runs train side by side where the machine has a core per seed, each on its share of the
# cores for the whole budget (recipes/lib/train-runs.sh; PARALLEL=0: one after the other).
# The members train at dropout 0.1: for an ensemble 0.1 scored at least as well as 0.2 on valid at
# every budget measured (Zen 5, ~12k updates each: 41.11 against 40.92; Zen 4: 40.48 at ~7k updates
# against 39.84 for 0.2 at ~8.8k; results/speedrun/README.md), though single models at ~12k updates
# prefer 0.2. DROPOUT=P chooses; DROPOUT= (empty) lets the first run's probe choose, as the single
# recipe does.
# They warm up for 1,000 updates at lr_scale 0.5 (the single recipe's setting for budgets under
# 9,000 updates): on an Intel Xeon with AMX, side by side, ~8,500 updates each, members valid 39.69 /
# 39.45 and the ensemble 41.10 valid, 40.02 test2016, against 38.38 / 38.45 and 40.39 / 38.66 with
# the YAML's warm-up 500 at lr_scale 0.35 (results/multi30k-60min-ensemble/; not
# measured at ~12k updates per member). SCHEDULE= (empty) restores the YAML's.
set -eu
OUT=${1:-runs/multi30k-en-de-ensemble}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
SEEDS=${SEEDS:-1 2}
DROPOUT=${DROPOUT-0.1}
SCHEDULE=${SCHEDULE-"--train.warmup_steps=1000 --train.lr_scale=0.5"}; export SCHEDULE
if [ -n "$DROPOUT" ]; then export DROPOUT; else unset DROPOUT; fi
runs=""; models=""
for seed in $SEEDS; do
  runs="$runs seed$seed --train.seed=$seed"
  models="$models $OUT/seed$seed/average"
done
# shellcheck disable=SC2086
sh "$HERE/lib/train-runs.sh" "$OUT" $runs
first=$(echo $SEEDS | cut -d' ' -f1)
data=$OUT/seed$first/data  # every seed prepares the same data (same vocabulary, id for id)
# shellcheck disable=SC2086
NMT="$NMT" sh "$HERE/lib/ensemble-test.sh" "$OUT" "$data" "ensemble of the averaged models of seeds $SEEDS" $models
