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
#
# Side by side (PARALLEL=auto, the default, where the machine has at least one core per seed): the
# runs train at once, each on its share of the cores (--train.num_threads = cores / seeds) for the
# whole budget (MAX_TIME x seeds minutes): the same wall time and cores as one after the other, and
# on a 2-core CPU 1.22x the updates in all, since one thread per training uses its core better than
# two threads share both (benchmarks/train_processes.py; results/speedrun/README.md). PARALLEL=0:
# one after the other, each on every core. Either way the first seed's probe chooses the dropout of
# every run (one setting for the ensemble); side by side the probes run side by side too, so that
# they measure the update rate the runs will have. Logs of runs side by side: OUT_DIR/seedN.log.
set -eu
OUT=${1:-runs/multi30k-en-de-ensemble}
NMT=${NMT:-nmt}
HERE=$(dirname "$0")
SEEDS=${SEEDS:-1 2}
n=$(echo $SEEDS | wc -w)
cores=${CORES:-$(nproc)}
parallel=${PARALLEL:-auto}
[ "$parallel" = auto ] && { [ "$n" -gt 1 ] && [ "$cores" -ge "$n" ] && parallel=1 || parallel=0; }
models=""
first=$(echo $SEEDS | cut -d' ' -f1)
data=$OUT/seed$first/data  # every seed prepares the same data (same vocabulary, id for id)
mkdir -p "$OUT"
if [ "$parallel" = 1 ]; then
  threads=$((cores / n)); minutes=$((${MAX_TIME:-30} * n))
  echo "training seeds $SEEDS side by side: $threads thread(s) each, $minutes minutes each;" \
    "follow with: tail -f $OUT/seed$first.log"
  run_all() {  # run_all UNTIL: recipes/multi30k-en-de.sh for every seed at once; fails if any fails
    pids=""
    for seed in $SEEDS; do
      UNTIL=$1 MAX_TIME=$minutes TRAIN_ARGS="--train.seed=$seed --train.num_threads=$threads ${TRAIN_ARGS:-}" \
        sh "$HERE/multi30k-en-de.sh" "$OUT/seed$seed" >> "$OUT/seed$seed.log" 2>&1 &
      pids="$pids $!"
    done
    status=0
    for pid in $pids; do wait "$pid" || status=1; done
    [ "$status" = 0 ] || { echo "a run failed: see $OUT/seed*.log" >&2; tail -n 5 "$OUT"/seed*.log >&2; exit 1; }
  }
  if [ -z "${DROPOUT:-}" ]; then
    run_all probe  # prepare and probe side by side; the first seed's probe chooses
    DROPOUT=$(cat "$OUT/seed$first/dropout.txt")
    [ -n "$DROPOUT" ] || unset DROPOUT  # no probe (a dropout or a budget in TRAIN_ARGS)
  fi
  [ -z "${DROPOUT:-}" ] || { echo "dropout $DROPOUT for every run (seed $first's probe)"; export DROPOUT; }
  run_all ""
  for seed in $SEEDS; do
    echo "== seed $seed alone, test2016 (its log: $OUT/seed$seed.log)"
    cat "$OUT/seed$seed/test.score.txt"
    models="$models $OUT/seed$seed/average"
  done
else
  for seed in $SEEDS; do
    TRAIN_ARGS="--train.seed=$seed ${TRAIN_ARGS:-}" sh "$HERE/multi30k-en-de.sh" "$OUT/seed$seed"
    # the first run's probe chooses the dropout of every seed (one setting for the ensemble)
    DROPOUT=${DROPOUT:-$(sh "$HERE/dropout-of.sh" "$OUT/seed$seed/run")}; export DROPOUT
    models="$models $OUT/seed$seed/average"
  done
fi
# shellcheck disable=SC2086
NMT="$NMT" sh "$HERE/ensemble-test.sh" "$OUT" "$data" "ensemble of the averaged models of seeds $SEEDS" $models
