"""Teacher-forced copy accuracy (words + <s> -> words) on the first 40 valid sentences of a
--copy-pairs parser.
Usage: python benchmarks/parse/copy_accuracy.py CHECKPOINT (data: runs/ptb-pw-copy/data)."""

import sys

import sentencepiece as spm
import torch

from nmt.checkpoint import load_model
from nmt.experiments.parsing import word_ids

R = "runs/ptb-pw-copy"
model, _ = load_model(sys.argv[1])
model.eval()
sp = spm.SentencePieceProcessor(model_file=f"{R}/data/spm.model")
src = [l.split() for l in open(f"{R}/data/valid.words.txt")][:40]
n = c = 0
with torch.no_grad():
    for s in src:
        ids = word_ids(sp, s)
        x = torch.tensor([ids + [2, 3]])
        logits, _ = model.decode_step(torch.tensor([[2] + ids]), model.encode(x), None)
        pred = logits[0].argmax(-1).tolist()
        for i, y in enumerate(ids):
            n += 1
            c += pred[i] == y
print(sys.argv[1], "copy acc", round(c / n, 3))
