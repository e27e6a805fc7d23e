#!/bin/sh
# WMT14 English->French with the paper's Transformer big (Table 2: 41.0 BLEU; 41.8 in the final
# version), end to end on GPUs: download and prepare (Europarl v7, CommonCrawl, UN, News Commentary v9,
# Gigaword fr-en: ~36M pairs; a 32k shared BPE vocabulary; newstest2013 as valid), 300,000 updates of
# ~25,000 target tokens with torchrun on GPUS GPUs at dropout 0.1 (the paper's en-fr big), the last
# 20 checkpoints (one every 10 minutes) averaged, newstest2014 translated once (beam 4, alpha 0.6, max
# length |x|+50), sacreBLEU with its signature and the tokenized BLEU of `nmt score --paper-bleu`
# (its compound split is tensor2tensor's en-de convention; on French it splits hyphenated words too).
# The configuration: recipes/wmt14-en-fr-big.yaml.
#   make recipe-wmt14-en-fr-big                  (all visible GPUs; OUT_DIR runs/wmt14-en-fr-big)
#   GPUS=8 MAX_TOKENS=8192 sh recipes/wmt14-en-fr-big.sh [OUT_DIR]
# Running it again resumes the run where it stopped (nmt train --resume auto), with the same GPUS.
# Variables: recipes/lib/wmt14.sh (GPUS, MAX_TOKENS, NMT, PY, TORCHRUN, TORCHRUN_ARGS, TRAIN_ARGS, ...).
#
# Estimates, not measured (no GPU run of this recipe yet; docs/gpu.md shows how each was computed):
#   GPU time   as en-de big (the paper gives no separate time): 3.2e13 FLOPs per update, 9.5e18 in
#              all; at 10-30% of the bf16 peak: ~30-90 A100-hours, ~10-30 H100-hours. 300,000 updates
#              of 25k tokens are ~2 epochs of the 36M pairs.
#   memory     per GPU at max_tokens 4096, bf16: ~9 GB, as en-de big (docs/gpu.md).
#   disk       ~75 GB: downloads ~7 GB, extracted text ~10 GB, prepared data ~5.5 GB; checkpoints
#              2.51 GB each (209.1M parameters x 12 bytes), keep_last 20 + best = 53 GB; the average 0.84 GB.
set -eu
sh "$(dirname "$0")/lib/wmt14.sh" fr "$(dirname "$0")/wmt14-en-fr-big.yaml" 20 "${1:-runs/wmt14-en-fr-big}"
