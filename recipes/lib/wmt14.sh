#!/bin/sh
# One of the paper's WMT14 experiments end to end (what recipes/wmt14-*.sh call; not meant to be run
# alone):
#   sh recipes/lib/wmt14.sh TGT CONFIG LAST OUT_DIR
# TGT: de or fr (the source is English); CONFIG: the run's YAML; LAST: checkpoints averaged (the
# paper: 5 base, 20 big).
#  1. `nmt prepare wmt14` (downloads from statmt.org unless $NMT_DATA_DIR/wmt14_en_TGT/ holds the
#     files; newstest2013 is valid, newstest2014 test; 37k shared BPE en-de, 32k en-fr);
#  2. `nmt train` under torchrun on GPUS processes, --resume auto: running the recipe again continues
#     the run from its last checkpoint (with the same GPUS: a run keeps its world size), and a finished
#     run is kept. The update stays ~25,000 target tokens whatever GPUS is: the trainer accumulates
#     round(update_tokens / (GPUS x tokens per micro-batch)) micro-batches per update;
#  3. `nmt average` of the last LAST checkpoints (written every 10 minutes);
#  4. newstest2014 translated once: beam 4, alpha 0.6, maximum length |x| + 50 (section 6.1);
#  5. `nmt score --paper-bleu`: sacreBLEU with its signature, and the paper-era tokenized,
#     compound-split BLEU (tensor2tensor's get_ende_bleu.sh), labelled; chrF too.
# Variables:
#   GPUS        processes, one per GPU (default: the GPUs torch sees; at least 1)
#   MAX_TOKENS  padded tokens per micro-batch per GPU (default: CONFIG's; docs/gpu.md has a table per
#               memory size); a smaller one only adds micro-batches, the update is the same
#   NMT         the nmt command (default `nmt`); PY the Python with torch (default python3)
#   TORCHRUN    the launcher (default "$PY -m torch.distributed.run"); TORCHRUN_ARGS its options
#               before --nproc-per-node (default --standalone: one machine; for several see docs/gpu.md)
#   VOCAB_SIZE, PREPARE_ARGS (`nmt prepare` options), TRAIN_ARGS (--train.X=V / --model.X=V /
#               --device ..., last), UNTIL=prepare (stop after preparing)
set -eu
TGT=$1; CONFIG=$2; LAST=$3; OUT=$4
NMT=${NMT:-nmt}
PY=${PY:-python3}
TORCHRUN=${TORCHRUN:-"$PY -m torch.distributed.run"}
TORCHRUN_ARGS=${TORCHRUN_ARGS:---standalone}
mkdir -p "$OUT"
# shellcheck disable=SC2086
[ -f "$OUT/data/meta.json" ] ||
  $NMT prepare wmt14 --src en --tgt "$TGT" --out "$OUT/data" ${VOCAB_SIZE:+--vocab-size "$VOCAB_SIZE"} ${PREPARE_ARGS:-}
[ "${UNTIL:-}" = prepare ] && exit 0
if [ -z "${GPUS:-}" ]; then
  GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
  if [ "$GPUS" -lt 1 ]; then
    echo "no GPU visible to torch: this recipe trains on GPUs (a CPU would take months; docs/gpu.md)." >&2
    echo "Set GPUS=K to run K processes anyway (with TRAIN_ARGS=\"--device cpu\" on a CPU)." >&2
    exit 2
  fi
fi
echo "== training on $GPUS process(es), ~25,000 target tokens per update (accumulation follows GPUS)"
# shellcheck disable=SC2086
$TORCHRUN $TORCHRUN_ARGS --nproc-per-node="$GPUS" -m nmt train "$OUT/data" --out "$OUT/run" \
  --config "$CONFIG" --resume auto ${MAX_TOKENS:+--train.max_tokens="$MAX_TOKENS"} ${TRAIN_ARGS:-}
$NMT average "$OUT/run" --last "$LAST" --out "$OUT/average" --force  # a rerun replaces the average
# newstest2014, once: nothing is chosen on it
$NMT translate "$OUT/average" -i "$OUT/data/test.en.txt" -o "$OUT/newstest2014.hyp.$TGT" \
  --beam 4 --alpha 0.6 --max-len-a 1 --max-len-b 50
echo "== newstest2014 en->$TGT, the average of the last $LAST checkpoints, beam 4, alpha 0.6, max length |x|+50"
$NMT score --ref "$OUT/data/test.$TGT.txt" "$OUT/newstest2014.hyp.$TGT" --paper-bleu | tee "$OUT/newstest2014.score.txt"
