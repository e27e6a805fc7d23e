"""Teacher-forced label accuracy of a --form per-word parser on the first 80 train / valid trees,
its nll with another sentence as source, and the accuracy of the per-word majority label (train
counts, no context).
Usage: python benchmarks/parse/teacher_forced_accuracy_per_word.py RUN_DIR [CHECKPOINT]."""

import sys
from collections import Counter, defaultdict

import sentencepiece as spm
import torch

from nmt.checkpoint import load_model
from nmt.experiments.parsing import word_ids

R = sys.argv[1] if len(sys.argv) > 1 else "runs/ptb-perword"
CK = sys.argv[2] if len(sys.argv) > 2 else f"{R}/average"
model, _ = load_model(CK, device="cpu")
model.eval()
sp = spm.SentencePieceProcessor(model_file=f"{R}/data/spm.model")


def load(split):
    return (
        [l.split() for l in open(f"{R}/data/{split}.words.txt")],
        [l.split() for l in open(f"{R}/data/{split}.tree.txt")],
    )


trs, trt = load("train")
by_word = defaultdict(Counter)
overall = Counter()
for s, t in zip(trs, trt):
    for w, l in zip(s, t):
        by_word[w][l] += 1
        overall[l] += 1
top = overall.most_common(1)[0][0]
for split in ("train", "valid"):
    src, tgt = load(split)
    src, tgt = src[:80], tgt[:80]
    n = c = base = 0
    nll = 0.0
    wrong_src = 0.0
    with torch.no_grad():
        for j, (s, t) in enumerate(zip(src, tgt)):
            y = word_ids(sp, t) + [3]
            for which, ss in (("own", s), ("other", src[(j + 1) % len(src)])):
                x = torch.tensor([word_ids(sp, ss) + [3]])
                logits, _ = model.decode_step(torch.tensor([[2] + y[:-1]]), model.encode(x), None)
                logp = logits[0].float().log_softmax(-1)
                if which == "own":
                    pred = logp.argmax(-1).tolist()
                    for i, (w, l) in enumerate(zip(s, t)):
                        n += 1
                        c += pred[i] == y[i]
                        nll += -logp[i, y[i]].item()
                        base += (by_word[w].most_common(1)[0][0] if w in by_word else top) == l
                else:
                    wrong_src += sum(-logp[i, y[i]].item() for i in range(len(t)))
    print(
        f"{split}: teacher-forced label acc {c / n:.3f} nll {nll / n:.3f} (other sentence's source: "
        f"nll {wrong_src / n:.3f}); per-word majority label acc {base / n:.3f}"
    )
