#!/bin/sh
# Settings of the 30-minute recipe compared at the number of updates each gets from 30 minutes of a
# 2-core CPU, trained side by side on one GPU (the device tool's H100/H200) instead of one after
# the other on the CPU: a screen, valid only. A setting that wins here is then run on the CPU as the
# recipe runs it, test2016 once.
#   sh benchmarks/gpu_sweep.sh DATA_DIR OUT_DIR SPECS_FILE [TRAIN_SECONDS]
# SPECS_FILE: one run per line, "name|updates|extra nmt train options" (the recipe's YAML and
# dropout 0.1 otherwise). Each run: `nmt train` on cuda (bf16 autocast, as `auto` picks on the
# AMX/AVX512-BF16 CPUs), valid perplexity every 1,000 updates, checkpoints every 200; then the
# average of the last 5 and `nmt tune-alpha` (beam 4, 0.4-1.6) on valid. TRAIN_SECONDS (default
# 330) stops trainings still running (their average is then of the checkpoints they reached),
# EVAL_LIMIT (default 600) a tune-alpha still running.
set -u
DATA=$1; OUT=$2; SPECS=$3; LIMIT=${4:-330}
NMT=${NMT:-python3 -m nmt}; DEVICE=${DEVICE:-cuda}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
runs() { grep -v -e '^#' -e '^[[:space:]]*$' "$SPECS"; }  # the SPECS lines, without comments and blanks
runs | { while IFS='|' read -r name steps extra; do
  # shellcheck disable=SC2086
  ( OMP_NUM_THREADS=1 timeout "$LIMIT" $NMT train "$DATA" --out "$OUT/$name" --config "$HERE/recipes/multi30k-en-de.yaml" \
      --device "$DEVICE" --model.dropout=0.1 --train.max_time=0 --train.max_steps="$steps" --train.num_threads=1 \
      --train.valid_every_steps=1000 --train.valid_bleu=false --train.best_metric=loss $extra \
      > "$OUT/$name.train.out" 2>&1
    echo "train rc $? $name" >> "$OUT/status.txt" ) &
done; wait; }  # the trainings, all at once (jobs of the pipeline's subshell: waited for there)
runs | { while IFS='|' read -r name steps extra; do
  ( $NMT average "$OUT/$name" --last 5 --out "$OUT/$name/average" --force > "$OUT/$name.eval.out" 2>&1 &&
    timeout "${EVAL_LIMIT:-600}" $NMT tune-alpha "$OUT/$name/average" --src "$DATA/valid.en.txt" --ref "$DATA/valid.de.txt" --device "$DEVICE" \
      --out "$OUT/$name/alpha.json" > "$OUT/$name/alpha.txt" 2>> "$OUT/$name.eval.out"
    echo "eval rc $? $name" >> "$OUT/status.txt" ) &
done; wait; }
# one line per run: updates reached, last valid perplexity, BLEU at alpha 0.6 and at the best alpha
runs | while IFS='|' read -r name steps extra; do
  python3 - "$OUT/$name" "$name" "$steps" "$extra" <<'EOF'
import json, re, sys
from pathlib import Path
run, name, steps, extra = Path(sys.argv[1]), *sys.argv[2:]
records = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").exists() else []
train = [r for r in records if r["split"] == "train"]
valid = [r for r in records if r["split"] == "valid"]
update = lambda r: r.get("update", r.get("step"))  # "step": runs before "update"
reached = update(train[-1]) if train else 0
ppl = " ".join(f"{update(r) / 1000:g}k:{r['ppl']:.2f}" for r in valid)
alpha = (run / "alpha.txt").read_text() if (run / "alpha.txt").exists() else ""
rows = {m[0]: m[1] for m in re.findall(r"^\| ([0-9.]+) \| ([0-9.]+) \|", alpha, re.M)}
best = re.search(r"best alpha: ([0-9.]+)", alpha)  # absent when tune-alpha was stopped: the best row so far
best_a = best.group(1) if best else max(rows, key=lambda a: float(rows[a]), default="-")
print(f"| {name} | {extra.strip() or '(recipe, dropout 0.1)'} | {reached}/{steps} | {ppl} | "
      f"{rows.get('0.6', '-')} | {rows.get(best_a, '-')} ({best_a}) |")
EOF
done > "$OUT/summary.md"
cat "$OUT/summary.md"
