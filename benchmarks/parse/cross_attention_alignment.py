"""Where the last decoder layer's cross-attention (heads averaged, nmt.infer.attention_maps.align) puts
its maximum for each label of a --form per-word parser (label i belongs to source word i), first
60 valid trees. Usage: python benchmarks/parse/cross_attention_alignment.py RUN_DIR [CHECKPOINT]."""

import sys

import sentencepiece as spm

from nmt.checkpoint import load_model
from nmt.experiments.parsing import word_ids
from nmt.infer.attention_maps import align

R = sys.argv[1] if len(sys.argv) > 1 else "runs/ptb-perword"
CK = sys.argv[2] if len(sys.argv) > 2 else f"{R}/average"
model, _ = load_model(CK, device="cpu")
model.eval()
sp = spm.SentencePieceProcessor(model_file=f"{R}/data/spm.model")
src = [l.split() for l in open(f"{R}/data/valid.words.txt")][:60]
tgt = [l.split() for l in open(f"{R}/data/valid.tree.txt")][:60]
diag = near = n = 0
for s, t in zip(src, tgt):
    pairs = align(model, word_ids(sp, s) + [3], word_ids(sp, t))
    for si, ti in pairs:
        n += 1
        diag += si == ti
        near += abs(si - ti) <= 1
print(f"argmax source == target position: {diag / n:.3f}; within 1: {near / n:.3f} ({n} target tokens)")
from collections import Counter

c = Counter()
last = 0
for s, t in zip(src, tgt):
    pairs = align(model, word_ids(sp, s) + [3], word_ids(sp, t))
    for si, ti in pairs:
        c[max(-5, min(5, si - ti))] += 1
        last += si == len(s)
print(sorted(c.items()), "to EOS:", last)
