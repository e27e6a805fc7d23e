"""Training-time case augmentation (not in the paper): a share of the training pairs rewritten in
ALL CAPS or Title Case on both sides, so that the model learns to translate capitals (Marian's
``--all-caps-every N`` and ``--english-title-case-every N``; OpusTrainer's UpperCase and TitleCase
modifiers). `nmt prepare --case-augment P` rewrites each train pair with probability P (half of
them upper-cased, half title-cased; seeded by --seed), after cleaning and before SentencePiece is
learnt, so that the vocabulary holds the upper-case pieces too. Valid and test are untouched.
nmt.realtext.casing handles capitals at inference time instead, with any model.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

WORD_START = re.compile(r"(?<![\w'’])[^\W\d_]")  # a letter that starts a word


def title_case(text: str) -> str:
    """Every word's first letter upper case (the rest as it was)."""
    return WORD_START.sub(lambda m: m.group(0).upper(), text)


def augment_case(files: tuple[Path, Path], *, fraction: float, seed: int) -> dict:
    """Rewrite the aligned lines of ``files`` (source, target) in place: each pair with
    probability ``fraction`` upper-cased or (as likely) title-cased, both sides alike; returns the
    counts {"upper": n, "title": n}."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"case augmentation fraction {fraction}: must be in [0, 1]")
    sides = [f.read_text(encoding="utf-8").split("\n")[:-1] for f in files]
    rng = np.random.default_rng([seed, 0xCA5E])
    draw = rng.random(len(sides[0]))
    kind = rng.random(len(sides[0])) < 0.5
    counts = {"upper": 0, "title": 0}
    for i in np.flatnonzero(draw < fraction):
        change = str.upper if kind[i] else title_case
        counts["upper" if kind[i] else "title"] += 1
        for lines in sides:
            lines[i] = change(lines[i])
    for f, lines in zip(files, sides):
        f.write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")
    return counts
