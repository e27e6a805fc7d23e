#!/bin/sh
# run.sh NAME DATA [overrides...]: 1-thread training on the demo config
NAME=$1; DATA=$2; shift 2
cd /work/main
rm -rf /tmp/exp/$NAME
/usr/bin/time -f "%e s" -o /tmp/exp/$NAME.time .venv/bin/python -m nmt train /tmp/exp/$DATA --out /tmp/exp/$NAME --config recipes/demo.yaml \
  --train.num_threads=1 --train.max_time=0 --train.max_steps=500 --train.valid_every_steps=250 \
  --train.valid_bleu=true --train.valid_bleu_beam=1 --train.save_every_steps=250 --train.keep_last=2 "$@" > /tmp/exp/$NAME.log 2>&1
