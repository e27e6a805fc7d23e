"""Teacher-forced next-token accuracy of a --leaves words parser (words, opening and closing
brackets, EOS apart) and its nll on the first 60 valid trees (edit the paths for the training trees).
Usage, from the checkout with a run in runs/ptb-words:
python benchmarks/parse/teacher_forced_accuracy_words.py"""

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
stats = {"word": [0, 0, 0.0], "open": [0, 0, 0.0], "close": [0, 0, 0.0], "eos": [0, 0, 0.0]}
with torch.no_grad():
    for s, t in zip(src, tgt):
        x = torch.tensor([word_ids(sp, s) + [3]])
        y = word_ids(sp, t) + [3]
        mem = model.encode(x)
        logits, _ = model.decode_step(torch.tensor([[2] + y[:-1]]), mem, None)
        logp = logits[0].float().log_softmax(-1)
        pred = logp.argmax(-1).tolist()
        for i, (tok, yid) in enumerate(zip(t + ["</s>"], y)):
            kind = (
                "eos"
                if tok == "</s>"
                else ("open" if tok[0] == "(" else "close")
                if is_bracket(tok)
                else "word"
            )
            st = stats[kind]
            st[0] += 1
            st[1] += pred[i] == yid
            st[2] += -logp[i, yid].item()
for k, (n, c, nll) in stats.items():
    print(f"{k:6s} n={n:5d} acc={c / n:.3f} nll={nll / n:.3f}")
