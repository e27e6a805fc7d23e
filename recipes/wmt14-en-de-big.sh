#!/bin/sh
# WMT14 English->German with the paper's Transformer big (Table 2: 28.4 BLEU), end to end on GPUs: the
# data of recipes/wmt14-en-de-base.sh (37k shared BPE, newstest2013 as valid), 300,000 updates of
# ~25,000 target tokens with torchrun on GPUS GPUs, the last 20 checkpoints (one every 10 minutes)
# averaged, newstest2014 translated once (beam 4, alpha 0.6, max length |x|+50), sacreBLEU with its
# signature and the paper-era tokenized, compound-split BLEU. The configuration:
# recipes/wmt14-en-de-big.yaml (dropout 0.3).
#   make recipe-wmt14-en-de-big                  (all visible GPUs; OUT_DIR runs/wmt14-en-de-big)
#   GPUS=8 MAX_TOKENS=8192 sh recipes/wmt14-en-de-big.sh [OUT_DIR]
# Running it again resumes the run where it stopped (nmt train --resume auto), with the same GPUS.
# Variables: recipes/lib/wmt14.sh (GPUS, MAX_TOKENS, NMT, PY, TORCHRUN, TORCHRUN_ARGS, TRAIN_ARGS, ...).
#
# Estimates, not measured (no GPU run of this recipe yet; docs/gpu.md shows how each was computed):
#   GPU time   the paper: 3.5 days on 8 P100 (672 P100-hours, float32). 3.2e13 FLOPs per update,
#              9.7e18 in all (43% of the P100s' float32 peak over those hours); at 10-30% of the
#              bf16 peak: ~30-90 A100-hours, ~10-30 H100-hours.
#   memory     per GPU at max_tokens 4096, bf16: ~9 GB (the weights, gradients and Adam moments: 3.4
#              GB of it; activations as measured on a CPU); docs/gpu.md has max_tokens per memory size.
#   disk       ~60 GB: data as the base recipe (~3.7 GB); checkpoints 2.57 GB each (214.2M parameters x
#              12 bytes), keep_last 20 + best = 54 GB; the average 0.86 GB.
set -eu
sh "$(dirname "$0")/lib/wmt14.sh" de "$(dirname "$0")/wmt14-en-de-big.yaml" 20 "${1:-runs/wmt14-en-de-big}"
