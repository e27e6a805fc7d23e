#!/bin/sh
# Updates per second of the 30-minute recipe's variants on this CPU: 400 updates each (no validation,
# no checkpoints), the rate over updates 100-400. Used to give each variant of gpu_sweep.sh the
# number of updates 30 minutes of this CPU hold for it. One after the other, alone on the cores;
# the VM's speed drifts (~15% within an hour here), so rerun the first variant at the end.
#   sh benchmarks/shape_rates.sh DATA_DIR OUT_DIR
set -eu
DATA=$1; OUT=$2
NMT=${NMT:-nmt}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
for spec in "base|" "dff2048|--model.d_ff=2048" "d384|--model.d_model=384 --model.d_ff=1536 --model.n_heads=6" \
    "wide|--model.d_model=512 --model.d_ff=2048 --model.n_heads=8" "tok2k|--train.max_tokens=2048 --train.update_tokens=2048" \
    "n4|--model.n_layers=4" "base-again|"; do
  name=${spec%%|*}; args=${spec#*|}
  rm -rf "${OUT:?}/$name"
  # shellcheck disable=SC2086
  $NMT train "$DATA" --out "$OUT/$name" --config "$HERE/recipes/multi30k-en-de.yaml" --model.dropout=0.1 \
    --train.max_time=0 --train.max_steps=400 --train.valid_every_steps=0 --train.valid_bleu=false \
    --train.best_metric=loss --train.save_every_steps=0 --train.log_every_steps=50 $args > "$OUT/$name.log" 2>&1
  python3 - "$OUT/$name/metrics.jsonl" "$name" <<'EOF'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1]) if '"train"' in line]
at = {r.get("update", r.get("step")): r["elapsed"] for r in records}  # "step": runs before "update"
print(f"{sys.argv[2]}: {300 / (at[400] - at[100]):.2f} updates/s (updates 100-400)")
EOF
done
