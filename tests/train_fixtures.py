"""A tiny synthetic parallel corpus, prepared once per test session (no external data needed)."""

from __future__ import annotations

import os
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORDS = [
    "house",
    "dog",
    "cat",
    "tree",
    "man",
    "woman",
    "child",
    "car",
    "street",
    "water",
    "ball",
    "red",
    "blue",
    "green",
    "small",
    "big",
    "runs",
    "sits",
    "plays",
    "sees",
    "a",
    "the",
    "on",
    "in",
    "with",
]
GERMAN = {w: w[::-1] + "en" for w in WORDS}  # a deterministic, learnable word mapping


def write_corpus(folder: Path, *, n_train: int = 600, n_valid: int = 40, seed: int = 0) -> dict:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_valid)):
        src_lines, tgt_lines = [], []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
            src_lines.append(" ".join(words))
            tgt_lines.append(" ".join(GERMAN[w] for w in words))
        (folder / f"{split}.en").write_text("\n".join(src_lines) + "\n")
        (folder / f"{split}.de").write_text("\n".join(tgt_lines) + "\n")
        splits[split] = (folder / f"{split}.en", folder / f"{split}.de")
    return splits


def prepare_tiny(folder: Path, *, vocab_size: int = 120, **options) -> Path:
    """`options`: more PrepareOptions fields (e.g. bpe_dropout, bpe_dropout_copies)."""
    from nmt.data.prepare import PrepareOptions, prepare

    splits = write_corpus(folder / "text")
    out = folder / "data"
    prepare(
        splits,
        out,
        options=PrepareOptions(
            dataset="files", src_lang="en", tgt_lang="de", vocab_size=vocab_size, threads=1, **options
        ),
        log=lambda *a: None,
    )
    return out


# `nmt train`'s options for the tests' tiny model: the tiny preset at width 32, fp32, one thread, a short
# warm-up, no validation and no time-based checkpoints. A test file makes its own list with
# ``tiny_args``, naming the options it adds or leaves out.
TINY = [
    "--preset",
    "tiny",
    "--model.d_model=32",
    "--model.d_ff=64",
    "--model.n_heads=2",
    "--model.d_k=16",
    "--model.d_v=16",
    "--train.precision=fp32",
    "--train.save_every_minutes=0",
    "--train.valid_every_steps=0",
    "--train.warmup_steps=10",
    "--train.num_threads=1",
]


def tiny_args(*extra: str, leave_out: tuple[str, ...] = ()) -> list[str]:
    """TINY without the options of ``leave_out`` (each given exactly as in TINY), then ``extra``."""
    missing = set(leave_out) - set(TINY)
    assert not missing, f"not in TINY: {sorted(missing)}"
    return [a for a in TINY if a not in leave_out] + list(extra)


def repo_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child python that imports nmt from this checkout: the
    repository first on PYTHONPATH, the paths already there kept (where the dependencies may live,
    e.g. a GPU machine's carried packages), then ``extra``."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}
