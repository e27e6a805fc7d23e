#!/bin/sh
# A GPU session in one call of the device tool (under 9 minutes): benchmarks/gpu.py's table
# (and a profile of one training update and one decoding batch), then the GPU suite of tests, all
# written to $OUT.
#
# 1. Here, before the call: copy what the device needs into .gpu-carry/ (git ignores it; the
#    device receives only the working tree and the carried paths, not ../shared):
#      sh benchmarks/gpu_session.sh prepare [CHECKPOINT]
#    CHECKPOINT: a trained model for the BLEU rows (the Multi30k recipe's run or averaged
#    checkpoint); its weights, configuration and SentencePiece model are copied (no optimizer
#    state: ~30 MB for the recipe's model; the tree that travels must stay under 64 MiB).
#    It also downloads, as wheels for the device's Python (3.12, manylinux x86_64), the packages
#    nmt needs that the device's image lacks (WHEELS, default: sentencex at this venv's version);
#    `run` installs them into a folder of its own and puts it on PYTHONPATH.
# 2. The call (device tool `run`, carry [".gpu-carry"], timeout_s 600; ~8.5 minutes):
#      sh benchmarks/gpu_session.sh run
#    PARTS="bench tests" by default (a rerun may name one); BENCH_BUDGET (default 350 s) bounds
#    the table and the profile, CUDA_TESTS_LIMIT (60 s) tests/test_cuda.py, run first, and
#    TESTS_LIMIT (120 s) the other GPU tests; BENCH_ARGS adds options to
#    gpu.py (e.g. "--precisions tf32 --modes compile" for the rows a first call skipped).
# 3. Dry run on a machine without a GPU (tiny sizes on the CPU; the CUDA tests skip):
#      DRY=1 OUT=/tmp/gpu-dry sh benchmarks/gpu_session.sh run
#
# Files in $OUT (the device tool returns at most 8): env.txt (GPU, driver, torch, CUDA), bench.md
# (the table), bench.err (progress, errors), profile_train.txt, profile_decode.txt, tests.txt,
# summary.txt (exit status and seconds of each part).
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
CARRY=$REPO/.gpu-carry
# the device's python3 holds torch with CUDA; here (prepare, a dry run) the project's virtual environment
if [ -x "$REPO/.venv/bin/python" ] && { [ -n "${DRY:-}" ] || [ "${1:-}" = prepare ]; }; then
  PY=${PY:-$REPO/.venv/bin/python}
else PY=${PY:-python3}; fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

prepare() {
  data=${NMT_DATA_DIR:-$REPO/../shared/data}
  mkdir -p "$CARRY" || exit 2
  exclude=$(git rev-parse --git-path info/exclude) && mkdir -p "$(dirname "$exclude")" &&
    { grep -qx '/.gpu-carry/' "$exclude" 2>/dev/null || echo '/.gpu-carry/' >> "$exclude"; }
  for pair in wmt14_en_de/test.en.gz:newstest2014.en.gz multi30k/test.en.gz:test2016.en.gz \
              multi30k/test.de.gz:test2016.de.gz; do
    if [ -f "$data/${pair%%:*}" ]; then cp -f "$data/${pair%%:*}" "$CARRY/${pair#*:}" && chmod u+w "$CARRY/${pair#*:}"
    else echo "prepare: $data/${pair%%:*} not found (its rows will use random lengths / be left out)" >&2; fi
  done
  rm -rf "$CARRY/wheels"
  for name in ${WHEELS:-sentencex}; do
    version=$("$PY" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$CARRY/wheels" \
      "$name${version:+==$version}" || echo "prepare: no wheel of $name for the device (its import will fail there)" >&2
  done
  if [ $# -ge 1 ]; then  # the weights alone, as a checkpoint nmt loads (verified by its manifest)
    "$PY" - "$1" "$CARRY/model" <<'EOF' || exit 1
import sys
from nmt.checkpoint import load_model, resolve_checkpoint, save
model, config = load_model(sys.argv[1])
save(sys.argv[2], model=model, config=config, spm_model=resolve_checkpoint(sys.argv[1]) / "spm.model")
print(f"prepare: {resolve_checkpoint(sys.argv[1])} -> {sys.argv[2]} (weights, config, spm.model)")
EOF
  fi
  du -sh "$CARRY"
}

run() {
  : "${OUT:?set OUT to the folder for the results}"
  mkdir -p "$OUT"
  start=$(date +%s)
  if [ -z "${DRY:-}" ] && ls "$CARRY"/wheels/*.whl > /dev/null 2>&1; then  # what the device's image lacks
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/nmt-site "$CARRY"/wheels/*.whl &&
      export PYTHONPATH="/tmp/nmt-site:$PYTHONPATH"
  fi
  { date -u; uname -srm; nvidia-smi 2>&1 | head -20
    "$PY" -c 'import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda,
      "available", torch.cuda.is_available())'
    nproc; git log --oneline -1 2>/dev/null; } > "$OUT/env.txt" 2>&1
  echo "parts: ${PARTS:-bench tests}${DRY:+ (dry run: tiny sizes, CPU)}" > "$OUT/summary.txt"
  for part in ${PARTS:-bench tests}; do
    t0=$(date +%s)
    case $part in
      bench)
        budget=${BENCH_BUDGET:-350}
        set -- --budget "$budget" --profile "$OUT"
        [ -n "${DRY:-}" ] && set -- "$@" --tiny --device cpu --budget 60
        [ -f "$CARRY/newstest2014.en.gz" ] && set -- "$@" --src-file "$CARRY/newstest2014.en.gz"
        [ -d "$CARRY/model" ] && [ -f "$CARRY/test2016.en.gz" ] && set -- "$@" --checkpoint "$CARRY/model" \
          --test-src "$CARRY/test2016.en.gz" --test-ref "$CARRY/test2016.de.gz"
        # shellcheck disable=SC2086
        timeout $((budget + 90)) "$PY" benchmarks/gpu.py "$@" ${BENCH_ARGS:-} > "$OUT/bench.md" 2> "$OUT/bench.err"
        rc=$?
        cat "$OUT/bench.md";;
      tests)  # the GPU suite: CUDA tests, and training, distributed, search, decoding modes with a GPU present
        n=""
        "$PY" -c 'import xdist' 2>/dev/null && n="-n 8 --dist loadfile"  # the device has pytest-xdist
        # the CUDA tests first and alone (CUDA_TESTS_LIMIT, default 60 s), then the others (TESTS_LIMIT)
        timeout "${CUDA_TESTS_LIMIT:-60}" "$PY" -m pytest -q -rfEs -p no:cacheprovider tests/test_cuda.py \
          > "$OUT/tests.txt" 2>&1
        rc=$?
        # shellcheck disable=SC2086
        timeout "${TESTS_LIMIT:-120}" "$PY" -m pytest -q -rfEs -p no:cacheprovider $n tests/test_trainer.py \
          tests/test_run_checkpoints.py tests/test_run_dir.py tests/test_train_command.py \
          tests/test_distributed.py tests/test_search.py tests/test_decoding_modes.py --durations=15 \
          >> "$OUT/tests.txt" 2>&1
        other=$?
        [ "$rc" -eq 0 ] && rc=$other
        tail -25 "$OUT/tests.txt";;
      *) echo "unknown part $part (bench, tests)" >&2; rc=2;;
    esac
    echo "$part: exit $rc, $(( $(date +%s) - t0 )) s" >> "$OUT/summary.txt"
  done
  echo "all: $(( $(date +%s) - start )) s" >> "$OUT/summary.txt"
  cat "$OUT/summary.txt"
  ! grep -q 'exit [1-9]' "$OUT/summary.txt"
}

case ${1:-} in
  prepare) shift; prepare "$@";;
  run) run;;
  *) echo "usage: sh benchmarks/gpu_session.sh prepare [CHECKPOINT] | run" >&2; exit 2;;
esac
