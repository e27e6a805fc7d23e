"""Validation BLEU during training (nmt.train.validation)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch
from train_fixtures import tiny_args

from nmt.checkpoint import save
from nmt.cli import main
from nmt.config import tiny
from nmt.data.prepare import PrepareOptions, prepare
from nmt.infer.options import SearchOptions
from nmt.model import Transformer
from nmt.train import validation

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


WORDS = ["haus", "katze", "hund", "baum", "rot", "blau", "gross", "klein", "laeuft", "springt"]


def prepared(tmp_path, n_valid=6):
    rng = random.Random(1)
    for split, n in (("train", 300), ("valid", n_valid)):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    splits = {s: (tmp_path / f"{s}.de", tmp_path / f"{s}.en") for s in ("train", "valid")}
    meta = prepare(
        splits,
        tmp_path / "data",
        log=lambda *a: None,
        options=PrepareOptions(dataset="files", src_lang="de", tgt_lang="en", vocab_size=60),
    )
    return tmp_path / "data", meta


def test_bleu_on_split_for_training(tmp_path):
    """A prepared split, a model, sacreBLEU against the split's text."""
    data, meta = prepared(tmp_path)
    torch.manual_seed(0)
    model = Transformer(tiny(meta["vocab_size"]))
    out = validation.bleu_on_split(model, data, "valid", SearchOptions(beam=1), max_sentences=4)
    assert 0.0 <= out["bleu"] <= 100.0 and "tok:13a" in out["bleu_signature"]


@pytest.mark.parametrize("beam", [1, 4])
def test_validation_bleu_is_sacrebleu_of_the_translations_of_the_split(tmp_path, beam):
    """The BLEU and chrF that training logs for a split are sacreBLEU's of what `Translator`
    translates from the split's source text (beam 1: greedy, alpha 0; beam 4: alpha 0.6), against
    the split's references. Half of the references are made equal to those translations, so the
    score is strictly between 0 and 100 and a shifted, reordered or mis-decoded line changes it."""
    from sacrebleu.metrics import BLEU, CHRF

    from nmt.infer.translate import Translator

    data, meta = prepared(tmp_path)
    torch.manual_seed(0)
    cfg = tiny(meta["vocab_size"])
    model = Transformer(cfg)
    ckpt = save(
        tmp_path / "checkpoint",
        model=model,
        spm_model=data / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": meta},
    )
    sources = (data / "valid.de.txt").read_text(encoding="utf-8").splitlines()[:4]
    hyps = Translator.load(ckpt, device="cpu", precision="fp32").translate_sentences(sources, beam=beam)
    refs = [
        h if i % 2 == 0 else r
        for i, (h, r) in enumerate(
            zip(hyps, (data / "valid.en.txt").read_text(encoding="utf-8").splitlines())
        )
    ]
    unread = ["an unread fifth line", "a sixth"]
    (data / "valid.en.txt").write_text("\n".join(refs + unread) + "\n", encoding="utf-8")
    want = BLEU(tokenize="13a").corpus_score(hyps, [refs]).score
    assert 0.0 < want < 100.0
    out = validation.bleu_on_split(model, data, "valid", SearchOptions(beam=beam), max_sentences=4)
    assert out["bleu"] == pytest.approx(want, rel=1e-9)
    assert out["chrf"] == pytest.approx(CHRF().corpus_score(hyps, [refs]).score, rel=1e-9)


def test_carriage_return_inside_a_reference_does_not_shift_the_others(tmp_path, monkeypatch):
    """References are read with `read_lines` (only "\\n" ends a line; universal newlines would turn a
    lone "\\r" into "\\n", split that line and shift every later reference): the references, one
    with a "\\r" inside, scored against themselves give 100."""
    data, _ = prepared(tmp_path)
    refs = [
        "the first half\rsecond half of a line",
        "a dog runs in the park",
        "two cats sit on a red car",
        "the man sees the tree",
        "a child plays with a blue ball",
        "the woman walks on the street",
    ]
    (data / "valid.en.txt").write_bytes(("\n".join(refs) + "\n").encode())
    assert validation.reference_lines(data, "valid", 6) == refs

    class Pieces:  # a stand-in SentencePiece model: hypothesis i decodes to reference i
        def decode(self, ids):
            return refs[ids[0]]

    monkeypatch.setattr(
        validation, "translate_ids", lambda model, sources, options, **kw: [[i] for i in range(len(sources))]
    )
    # hypotheses are target text: decoded with the target side's model (nmt.vocab.load_spm)
    monkeypatch.setattr(validation, "load_spm", lambda data_dir, side: Pieces() if side == "target" else None)
    assert validation.bleu_on_split(None, data, "valid")["bleu"] == pytest.approx(100.0)


def test_long_validation_pair_is_truncated_with_one_warning(long_valid_data, tmp_path, capsys):
    """A 400-piece valid pair (longer than model.max_positions) is truncated by validation (loss and
    BLEU), with one warning, not an error at the first validation."""
    data, _ = long_valid_data
    assert (
        train(
            data,
            tmp_path / "run",
            "--train.max_steps=2",
            "--train.valid_every_steps=1",
            "--train.valid_bleu=true",
            "--train.valid_bleu_max_sentences=11",
            "--train.max_tokens=1024",
        )
        == 0
    )
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert (
        "warning: 1 of 11 valid pairs have a side longer than model.max_positions=256 (with EOS/BOS); "
        "validation truncates them"
    ) in err
    valid = [r for r in records(tmp_path / "run") if r["split"] == "valid"]
    assert [r["update"] for r in valid] == [1, 2] and all(r["loss"] > 0 and "bleu" in r for r in valid)
