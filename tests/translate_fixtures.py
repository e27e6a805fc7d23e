"""A tiny random-weight checkpoint with its own SentencePiece model (made here, no downloads)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

WORDS = [
    "haus",
    "katze",
    "hund",
    "baum",
    "rot",
    "blau",
    "gross",
    "klein",
    "laeuft",
    "springt",
    "der",
    "die",
    "das",
    "ein",
    "eine",
    "und",
    "mit",
    "auf",
    "unter",
    "neben",
]


def make_checkpoint(folder: Path, *, data: dict | None = None, spm_ids: tuple = (0, 1, 2, 3)) -> Path:
    """Save a `tiny` model (vocabulary 100, seed 0) at folder/checkpoint; ``data`` is what
    config.json records as the prepared data's meta.json; ``spm_ids`` the (pad, unk, bos, eos)
    the SentencePiece model is trained with."""
    import sentencepiece as spm
    import torch

    from nmt.checkpoint import save
    from nmt.config import tiny
    from nmt.model import Transformer

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    lines = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + rng.choice([".", "!", "?"])
        for _ in range(400)
    ]
    pad, unk, bos, eos = spm_ids
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(folder / "spm"),
        vocab_size=100,
        model_type="bpe",
        pad_id=pad,
        unk_id=unk,
        bos_id=bos,
        eos_id=eos,
        character_coverage=1.0,
        minloglevel=2,
    )
    torch.manual_seed(0)
    cfg = tiny(100)
    return save(
        folder / "checkpoint",
        model=Transformer(cfg),
        spm_model=folder / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": data or {}},
    )


TUNE_LINES = ["der hund", "ein baum und eine katze", "blau rot gross", "die katze springt auf den baum"]
TUNE_REFS = ["der hund laeuft", "ein baum", "blau", "die katze springt"]


class LengthTranslator:
    """Stands in for a Translator: alpha decides how many words of the reference survive."""

    def __init__(self, references):
        self.references, self.calls = references, []

    def translate_sentences(self, sentences, options=None, *, batch_tokens, mbr=None, **fields):
        from nmt.infer.options import with_fields

        options = with_fields(options, fields)
        beam, alpha = options.beam, options.alpha
        self.calls.append((tuple(sentences), beam, alpha))

        def keep(ref):
            return " ".join(ref.split()[: max(1, round(len(ref.split()) * min(alpha, 1.0)))])

        return [keep(ref) for ref in self.references]


def tune_alpha_args(checkpoint: Path, tmp_path: Path, *extra: str):
    """`nmt tune-alpha` arguments over TUNE_LINES / TUNE_REFS written to ``tmp_path`` (alphas 0
    and 1, beam 3, outputs of at most 5 pieces, fp32, JSON to tmp_path/a.json) plus ``extra``."""
    import argparse

    from nmt.infer.tune_command import add_tune_alpha_args

    (tmp_path / "src.txt").write_text("\n".join(TUNE_LINES) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(TUNE_REFS) + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_tune_alpha_args(parser)
    return parser.parse_args(
        [
            str(checkpoint),
            "--src",
            str(tmp_path / "src.txt"),
            "--ref",
            str(tmp_path / "ref.txt"),
            "--alphas",
            "0,1",
            "--beam",
            "3",
            "--max-len-a",
            "0",
            "--max-len-b",
            "5",
            "--precision",
            "fp32",
            "--out",
            str(tmp_path / "a.json"),
            *extra,
        ]
    )


def cli(*argv):
    """`nmt translate ARGV` in process (the arguments as strings); returns its exit status."""
    import argparse

    from nmt.infer.command import add_translate_args, run_translate

    parser = argparse.ArgumentParser()
    add_translate_args(parser)
    return run_translate(parser.parse_args([str(a) for a in argv]), {})
