"""nmt.infer.calibrate: what a validation sentence gives the calibration (its pieces' forced
log-probabilities, its chrF, its words found in the reference, its length ratio), and how well a
calibration ranks sentences. `nmt calibrate` itself: tests/test_calibrate_command.py."""

from __future__ import annotations

import pytest

from nmt.infer.calibrate import Report, report, sample_of, validation_samples, worst_caught
from nmt.infer.confidence import Calibration, Sample
from nmt.infer.options import SearchOptions
from nmt.infer.results import Translation

SOURCES = ["the dog sees a red ball", "", "a man sits on the street", "the big tree", "a cat"]


def test_worst_caught_is_the_share_of_the_worst_among_the_least_confident():
    qualities = [float(q) for q in range(20)]  # sentence i has chrF i: 0 and 1 are the worst 10%
    assert worst_caught([q / 20 for q in qualities], qualities) == 1.0
    assert worst_caught([1 - q / 20 for q in qualities], qualities) == 0.0
    half = [0.0, 0.9] + [0.5] * 17 + [0.1]  # the 2 least confident: sentences 0 and 19
    assert worst_caught(half, qualities) == 0.5
    assert worst_caught([0.2, 0.1, 0.3], [1.0, 2.0, 3.0]) == 0.0  # at least one sentence
    assert worst_caught([0.1, 0.2, 0.3], [1.0, 2.0, 3.0], share=0.5) == 1.0


def test_report_ranks_the_calibrated_confidences_against_chrf():
    samples = [Sample([-3.0 + 0.1 * i] * 4, 5.0 * i, [], None) for i in range(20)]
    got = report(Calibration(), samples)
    assert got == Report(sentences=20, spearman=pytest.approx(1.0), worst_caught=1.0)
    reversed_chrf = [Sample(s.log_probs, 100 - s.chrf, [], None) for s in samples]
    assert report(Calibration(), reversed_chrf).spearman == pytest.approx(-1.0)


def test_a_sample_holds_its_chrf_its_words_found_in_the_reference_and_its_length_ratio(run_dir_translator):
    """Hand-made output "deren god deren" against "Deren god": each reference word matches once
    (case aside), so the second "deren" is not found; the ratio is the reference's pieces + EOS
    over the source's pieces."""
    from sacrebleu.metrics import CHRF

    tr = run_dir_translator
    tokens = tr.sp.encode("deren god deren")
    log_probs = [-0.1 * (k + 1) for k in range(len(tokens) + 1)]
    t = Translation(tr.decode(tokens), 0.0, tokens, log_probs=log_probs)
    [source_ids], _ = tr.encode(["the dog sees a red ball"])
    sample = sample_of(tr, source_ids, t, "Deren god")
    assert sample.log_probs == log_probs
    assert sample.chrf == pytest.approx(CHRF().sentence_score("deren god deren", ["Deren god"]).score)
    assert [found for _, found in sample.words] == [True, True, False]
    first = log_probs[: len(tr.sp.encode("deren"))]  # the first word's pieces
    assert sample.words[0][0] == pytest.approx(sum(first) / len(first))
    assert sample.ratio == pytest.approx((len(tr.sp.encode("Deren god")) + 1) / (len(source_ids) - 1))


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
