"""Validation BLEU during training (nmt.train.validate)."""

from __future__ import annotations

import random

import pytest
import torch

from nmt.config import tiny
from nmt.data.prepare import PrepareOptions, prepare
from nmt.model import Transformer
from nmt.train import validate

WORDS = ["haus", "katze", "hund", "baum", "rot", "blau", "gross", "klein", "laeuft", "springt"]


def prepared(tmp_path, n_valid=6):
    rng = random.Random(1)
    for split, n in (("train", 300), ("valid", n_valid)):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    splits = {s: (tmp_path / f"{s}.de", tmp_path / f"{s}.en") for s in ("train", "valid")}
    meta = prepare(splits, tmp_path / "data", log=lambda *a: None,
                   options=PrepareOptions(dataset="files", src_lang="de", tgt_lang="en", vocab_size=60))
    return tmp_path / "data", meta


def test_bleu_on_split_for_training(tmp_path):
    """A prepared split, a model, sacreBLEU against the split's text."""
    data, meta = prepared(tmp_path)
    torch.manual_seed(0)
    model = Transformer(tiny(meta["vocab_size"]))
    out = validate.bleu_on_split(model, data, "valid", beam=1, max_sentences=4)
    assert 0.0 <= out["bleu"] <= 100.0 and "tok:13a" in out["bleu_signature"]


def test_carriage_return_inside_a_reference_does_not_shift_the_others(tmp_path, monkeypatch):
    """Defect 1 (reference reading): `Path.read_text().split("\\n")` (universal newlines turn a lone
    "\\r" into "\\n") split a line at its "\\r" and shifted every later reference. Read with
    `read_lines` (only "\\n" ends a line), the references scored against themselves give 100."""
    data, _ = prepared(tmp_path)
    refs = ["the first half\rsecond half of a line", "a dog runs in the park", "two cats sit on a red car",
            "the man sees the tree", "a child plays with a blue ball", "the woman walks on the street"]
    (data / "valid.en.txt").write_bytes(("\n".join(refs) + "\n").encode())
    assert validate.reference_lines(data, "valid", 6) == refs

    class Pieces:  # a stand-in SentencePiece model: hypothesis i decodes to reference i
        def decode(self, ids):
            return refs[ids[0]]

    monkeypatch.setattr(validate, "translate_ids", lambda model, sources, **kw: [[i] for i in range(len(sources))])
    monkeypatch.setattr(validate, "load_spm", lambda data_dir: Pieces())
    assert validate.bleu_on_split(None, data, "valid")["bleu"] == pytest.approx(100.0)
