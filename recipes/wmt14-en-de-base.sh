#!/bin/sh
# WMT14 English->German with the paper's Transformer base (Table 2: 27.3 BLEU), end to end on GPUs:
# download and prepare (Europarl v7 + CommonCrawl + News Commentary v9, ~4.5M pairs; one 37k BPE
# vocabulary shared by both languages; newstest2013 as valid), train 100,000 updates of ~25,000 target
# tokens with torchrun on GPUS GPUs, average the last 5 checkpoints (one every 10 minutes), translate
# newstest2014 once (beam 4, alpha 0.6, max length |x|+50) and print sacreBLEU with its signature and
# the paper-era tokenized, compound-split BLEU. The configuration: recipes/wmt14-en-de-base.yaml.
#   make recipe-wmt14-en-de-base                 (all visible GPUs; OUT_DIR runs/wmt14-en-de-base)
#   GPUS=4 MAX_TOKENS=8192 sh recipes/wmt14-en-de-base.sh [OUT_DIR]
# Running it again resumes the run where it stopped (nmt train --resume auto), with the same GPUS.
# Variables: recipes/lib/wmt14.sh (GPUS, MAX_TOKENS, NMT, PY, TORCHRUN, TORCHRUN_ARGS, TRAIN_ARGS, ...).
#
# Estimates, not measured (no GPU run of this recipe yet; docs/gpu.md shows how each was computed):
#   GPU time   the paper: 12 h on 8 P100 (96 P100-hours, float32). 9.6e12 FLOPs per update (6 x
#              parameters x tokens), 9.6e17 in all, which is 30% of the P100s' float32 peak over those
#              96 hours; at 10-30% of the bf16 peak: ~3-9 A100-hours, ~1-3 H100-hours.
#   memory     per GPU at max_tokens 4096, bf16: ~5 GB (the weights, gradients and Adam moments: 1.0
#              GB of it; activations as measured on a CPU); docs/gpu.md has max_tokens per memory size.
#   disk       ~10 GB: downloads 1.6 GB, extracted text ~1.4 GB, prepared data ~0.7 GB; checkpoints
#              0.76 GB each (63.1M parameters x 12 bytes: weights and Adam's two moments in float32),
#              keep_last 5 + best = 4.5 GB; the average 0.25 GB.
set -eu
sh "$(dirname "$0")/lib/wmt14.sh" de "$(dirname "$0")/wmt14-en-de-base.yaml" 5 "${1:-runs/wmt14-en-de-base}"
