#!/bin/sh
# Train several runs of the 30-minute Multi30k recipe for a multi-run recipe (an ensemble, a
# left-to-right and a right-to-left model): OUT_DIR/NAME for each NAME, with its own TRAIN_ARGS.
#   sh recipes/lib/train-runs.sh OUT_DIR NAME1 "TRAIN_ARGS1" NAME2 "TRAIN_ARGS2" ...
# Each run is recipes/multi30k-en-de.sh (prepare, train, average the last 5, score valid and test);
# MAX_TIME (minutes per run one after the other, default 30), TRAIN_ARGS (added to every run's),
# DROPOUT, ALPHA (default 0.6) and NMT are passed on; a finished run is kept, not trained again.
# The first run's probe chooses the dropout of every run (one setting for all). SCHEDULE (passed on
# to every run; default empty: the YAML's warm-up 500 and lr_scale 0.35) is one warm-up for all
# runs, not each probe's own: recipes/multi30k-en-de-ensemble.sh sets the short budget's (1,000 at
# lr_scale 0.5, measured for its members); the other multi-run recipes keep the YAML's.
#
# Side by side (PARALLEL=auto, the default, where the machine has at least one core per run): the
# runs train at once, each on its share of the cores (--train.num_threads = cores / runs) for the
# whole budget (MAX_TIME x runs minutes): the same wall time as one after the other, and on a
# 2-core CPU 1.22x the updates in all (measured over 400 updates: one thread per training uses its
# core better than two threads share both; benchmarks/train_processes.py, results/speed/README.md).
# The data is prepared first, one run after the other (a first download is not shared by two at
# once); the probes then run side by side, so that they measure the update rate the runs will have. Output:
# OUT_DIR/NAME.log. Ctrl-C / SIGTERM stops every run (the trainers save where they are; running the
# recipe again resumes them). A time limit in TRAIN_ARGS (--train.max_time) is minutes per run in
# either way. PARALLEL=0: one after the other, each on every core, output on stdout. CORES: the
# cores to share (default: nproc). A resumed run keeps the threads and budget it started with.
set -eu
# each run alone is scored at the paper's alpha 0.6 (ALPHA=A at another; the ensemble or the
# reranking that follows chooses its own on valid): no `nmt tune-alpha` per run
ALPHA=${ALPHA:-0.6}; export ALPHA
SCHEDULE=${SCHEDULE-}; export SCHEDULE  # one warm-up for every run (empty: the YAML's)
OUT=$1; shift
HERE=$(dirname "$0")
n=$(($# / 2))
cores=${CORES:-$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
parallel=${PARALLEL:-auto}
[ "$parallel" = auto ] && { [ "$n" -gt 1 ] && [ "$cores" -ge "$n" ] && parallel=1 || parallel=0; }
first=$1
mkdir -p "$OUT"
if [ "$parallel" != 1 ]; then
  while [ $# -ge 2 ]; do
    TRAIN_ARGS="$2 ${TRAIN_ARGS:-}" sh "$HERE/../multi30k-en-de.sh" "$OUT/$1"
    DROPOUT=${DROPOUT:-$(sh "$HERE/dropout-of.sh" "$OUT/$first/run")}; export DROPOUT  # the first run's probe chose it
    shift 2
  done
  exit 0
fi
threads=$((cores / n)); [ "$threads" -ge 1 ] || threads=1  # PARALLEL=1 with fewer cores than runs
minutes=$((${MAX_TIME:-30} * n))
names=""
prepare_all() {  # one after the other: a first download is not shared by two at once
  while [ $# -ge 2 ]; do
    names="$names $1"
    UNTIL=prepare sh "$HERE/../multi30k-en-de.sh" "$OUT/$1" >> "$OUT/$1.log" 2>&1 || {
      echo "preparing $1 failed: see $OUT/$1.log" >&2; tail -n 5 "$OUT/$1.log" >&2; exit 1; }
    shift 2
  done
}
prepare_all "$@"
budget="$minutes minutes each"; [ "$minutes" = 0 ] && budget="no time limit"
echo "training$names side by side: $threads thread(s) each, $budget; follow with: tail -f $OUT/$first.log"
# Ctrl-C / SIGTERM: background jobs of a script ignore SIGINT, so pass a SIGTERM to the whole group
trap 'trap - INT TERM; kill -TERM 0 2>/dev/null; exit 130' INT TERM
run_all() {  # run_all STAGE NAME ARGS ...: recipes/multi30k-en-de.sh for every run at once; fails if any fails
  stage=$1; shift
  pids=""
  while [ $# -ge 2 ]; do
    UNTIL=$stage MAX_TIME=$minutes TRAIN_ARGS="$2 --train.num_threads=$threads ${TRAIN_ARGS:-}" \
      sh "$HERE/../multi30k-en-de.sh" "$OUT/$1" >> "$OUT/$1.log" 2>&1 &
    pids="$pids $!"
    shift 2
  done
  status=0
  for pid in $pids; do wait "$pid" || status=1; done
  [ "$status" = 0 ] || { echo "a run failed: see $OUT/*.log" >&2; tail -n 5 "$OUT"/*.log >&2; exit 1; }
}
chosen="given"
if [ -z "${DROPOUT:-}" ]; then
  run_all probe "$@"  # the probes side by side; the first run's probe chooses
  DROPOUT=$(cat "$OUT/$first/dropout.txt"); chosen="$first's probe"
  [ -n "$DROPOUT" ] || unset DROPOUT  # no probe (a dropout or a budget in TRAIN_ARGS)
fi
[ -z "${DROPOUT:-}" ] || { echo "dropout $DROPOUT for every run ($chosen)"; export DROPOUT; }
run_all "" "$@"
while [ $# -ge 2 ]; do
  echo "== $1 alone, test2016 (its log: $OUT/$1.log)"
  cat "$OUT/$1/test.score.txt"
  shift 2
done
