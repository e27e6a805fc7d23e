"""The synthetic check of results/ptb-parse/README.md (the synthetic check): PTB-sized data whose target
is a deterministic function of the source, with bracket symbols inserted as a parse tree has.

    python benchmarks/parse/synthetic_task.py /tmp/syn     # writes {train,valid,test}.{src,tgt,cpy}

Source: 10-40 words drawn from 1,000 random lower-case words. Target (`tgt`): per word, "(X" first
if its index % 4 == 0, then one of 45 upper-case tags (index % 45), then ")X" if index % 5 == 0.
`cpy`: the source itself (a plain copy task). 3,669 / 127 / 118 pairs, as the PTB split.
"""

import random
import string
import sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "synthetic")
out.mkdir(parents=True, exist_ok=True)
rng = random.Random(0)
words: set[str] = set()
while len(words) < 1000:
    words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 7))))
vocab = sorted(words)
tags = ["".join(rng.choice(string.ascii_uppercase) for _ in range(3)) for _ in range(45)]


def pair() -> tuple[str, str]:
    ids = [rng.randrange(1000) for _ in range(rng.randint(10, 40))]
    target = []
    for i in ids:
        target += ["(X"] if i % 4 == 0 else []
        target.append(tags[i % 45])
        target += [")X"] if i % 5 == 0 else []
    return " ".join(vocab[i] for i in ids), " ".join(target)


for name, n in (("train", 3669), ("valid", 127), ("test", 118)):
    pairs = [pair() for _ in range(n)]
    (out / f"{name}.src").write_text("".join(s + "\n" for s, _ in pairs))
    (out / f"{name}.tgt").write_text("".join(t + "\n" for _, t in pairs))
    (out / f"{name}.cpy").write_text("".join(s + "\n" for s, _ in pairs))
