"""Teacher-forced nll of a --leaves words parser on the first 60 valid trees, words and brackets
apart, given the tree's own sentence and given another (does the decoder read the source?).
Usage, from the checkout with a run in runs/ptb-words: python benchmarks/parse/source_dependence_words.py"""

import sentencepiece as spm
import torch

from nmt.checkpoint import load_model
from nmt.experiments.parsing import word_ids
from nmt.experiments.trees import is_bracket

model, _ = load_model("runs/ptb-words/average", device="cpu")
model.eval()
sp = spm.SentencePieceProcessor(model_file="runs/ptb-words/average/spm.model")
src = [l.split() for l in open("runs/ptb-words/data/valid.words.txt")][:60]
tgt = [l.split() for l in open("runs/ptb-words/data/valid.tree.txt")][:60]


def nll(s, t):
    x = torch.tensor([word_ids(sp, s) + [3]])
    y = word_ids(sp, t) + [3]
    logits, _ = model.decode_step(torch.tensor([[2] + y[:-1]]), model.encode(x), None)
    lp = logits[0].float().log_softmax(-1).gather(1, torch.tensor(y)[:, None]).squeeze(1)
    w = torch.tensor([not is_bracket(tok) for tok in t] + [False])
    return -lp[w].mean().item(), -lp[~w].mean().item()


with torch.no_grad():
    own = [nll(s, t) for s, t in zip(src, tgt)]
    other = [nll(src[(i + 7) % 60], t) for i, t in enumerate(tgt)]
for name, v in (("own sentence", own), ("another sentence", other)):
    print(
        f"{name}: word nll {sum(a for a, _ in v) / len(v):.3f}, bracket/EOS nll "
        f"{sum(b for _, b in v) / len(v):.3f}"
    )
