#!/bin/sh
# The sample-efficiency pilots of results/speedrun/README.md: 500 updates of a one-thread training on
# the demo's config, greedy valid BLEU every 250 updates, so that two pilots can run side by side.
#   sh benchmarks/pilot.sh NAME DATA [nmt train overrides...]
# DATA: an `nmt prepare` output under /tmp/exp; writes /tmp/exp/NAME (the run), NAME.log, NAME.time.
NAME=$1; DATA=$2; shift 2
cd "$(dirname "$0")/.."
mkdir -p /tmp/exp
rm -rf /tmp/exp/$NAME
/usr/bin/time -f "%e s" -o /tmp/exp/$NAME.time .venv/bin/python -m nmt train /tmp/exp/$DATA --out /tmp/exp/$NAME --config recipes/demo.yaml \
  --train.num_threads=1 --train.max_time=0 --train.max_steps=500 --train.valid_every_steps=250 \
  --train.valid_bleu=true --train.valid_bleu_beam=1 --train.save_every_steps=250 --train.keep_last=2 "$@" > /tmp/exp/$NAME.log 2>&1
