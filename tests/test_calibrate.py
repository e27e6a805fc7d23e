"""nmt.infer.calibrate: what a validation sentence gives the calibration (its pieces' forced
log-probabilities, its chrF, its words found in the reference, its length ratio), and how well a
calibration ranks sentences. `nmt calibrate` itself: tests/test_calibrate_command.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nmt.infer.calibrate import Report, report, sample_of, validation_samples, worst_caught
from nmt.infer.confidence import Calibration, Sample
from nmt.infer.options import SearchOptions
from nmt.infer.results import Translation
from nmt.vocab import EOS

SOURCES = ["the dog sees a red ball", "", "a man sits on the street", "the big tree", "a cat"]


def test_worst_caught_is_the_share_of_the_worst_among_the_least_confident():
    qualities = [float(q) for q in range(20)]  # sentence i has chrF i: 0 and 1 are the worst 10%
    assert worst_caught([q / 20 for q in qualities], qualities) == 1.0
    assert worst_caught([1 - q / 20 for q in qualities], qualities) == 0.0
    half = [0.0, 0.9] + [0.5] * 17 + [0.1]  # the 2 least confident: sentences 0 and 19
    assert worst_caught(half, qualities) == 0.5
    assert worst_caught([0.2, 0.1, 0.3], [1.0, 2.0, 3.0]) == 0.0  # at least one sentence
    assert worst_caught([0.1, 0.2, 0.3], [1.0, 2.0, 3.0], share=0.5) == 1.0
    # 15 sentences: the worst 10% is one sentence (1.5 rounded down), the least confident one
    assert worst_caught([0.0, 0.9] + [0.5] * 12 + [0.1], [float(q) for q in range(15)]) == 1.0


def test_report_ranks_the_calibrated_confidences_against_chrf():
    samples = [Sample([-3.0 + 0.1 * i] * 4, 5.0 * i, [], None) for i in range(20)]
    got = report(Calibration(), samples)
    assert got == Report(sentences=20, spearman=pytest.approx(1.0), worst_caught=1.0)
    reversed_chrf = [Sample(s.log_probs, 100 - s.chrf, [], None) for s in samples]
    assert report(Calibration(), reversed_chrf).spearman == pytest.approx(-1.0)


class Pieces:
    """A SentencePiece stand-in: ids index PIECES; encode gives one piece per word."""

    PIECES = ["▁De", "ren", "▁god", "▁deren", "▁other"]

    def id_to_piece(self, i: int) -> str:
        return self.PIECES[i]

    def encode(self, text: str) -> list[int]:
        return [4] * len(text.split())


def test_a_sample_holds_its_chrf_its_words_found_in_the_reference_and_its_length_ratio():
    """Output "Deren god deren" against "deren God": each reference word matches once, case aside,
    so the second "deren" is not found; a word's score is its pieces' mean; the ratio is the
    reference's pieces + EOS over the source's pieces. The output and the reference are target text:
    read with the translator's target side's SentencePiece model (``tgt_sp``; ``sp`` is the
    sources', here absent)."""
    from sacrebleu.metrics import CHRF

    translator = SimpleNamespace(sp=None, tgt_sp=Pieces(), model=None)
    log_probs = [-0.2, -0.4, -1.0, -2.0, -0.5]  # 4 pieces, then EOS
    t = Translation("Deren god deren", 0.0, [0, 1, 2, 3], log_probs=log_probs)
    sample = sample_of(translator, [7, 8, 9, 10, EOS], t, "deren God")
    assert sample.log_probs == log_probs
    assert sample.chrf == pytest.approx(CHRF().sentence_score("Deren god deren", ["deren God"]).score)
    assert sample.words == [(pytest.approx(-0.3), True), (-1.0, True), (-2.0, False)]
    assert sample.ratio == pytest.approx((2 + 1) / 4)


def test_validation_samples_translate_score_and_leave_empty_sources_out(run_dir_translator, monkeypatch):
    tr = run_dir_translator
    references = ["nedog seesen a", "", "a namen", "the gib", "a tac"]
    searched = []
    search = tr.translate_nbest

    def spy(sentences, options=None, **kw):
        searched.append(options)
        return search(sentences, options, **kw)

    monkeypatch.setattr(tr, "translate_nbest", spy)
    samples = validation_samples(tr, SOURCES, references, SearchOptions(beam=3, alpha=0.8, nbest=2))
    assert len(samples) == 4  # the empty source left out
    assert [(o.beam, o.alpha, o.nbest) for o in searched] == [(3, 0.8, 1)]
    best = search([s for s in SOURCES if s], SearchOptions(beam=3, alpha=0.8))
    ids, _ = tr.encode([s for s in SOURCES if s])
    forced = tr.forced_scores(ids, [b[0].tokens for b in best])
    for sample, f, src in zip(samples, forced, ids):
        assert sample.log_probs == pytest.approx(f.log_probs, abs=1e-6)
        assert 0 <= sample.chrf <= 100 and sample.ratio > 0
        assert len(sample.words) >= 1
