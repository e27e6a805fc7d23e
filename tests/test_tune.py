"""nmt/infer/tune.py: alpha chosen on a development set by sacreBLEU (section 6.1), ties to the paper's
0.6, and the grid of `nmt tune-alpha --alphas`."""

from __future__ import annotations

import pytest
from sacrebleu.metrics import BLEU
from translate_fixtures import LengthTranslator

from nmt.infer.options import SearchOptions
from nmt.infer.tune import PAPER_ALPHA, Grid, tune_alpha
from nmt.infer.tune_command import parse_alphas

SOURCES = ["a b c", "d e", "f g h i"]


def test_the_alpha_with_the_best_bleu_wins_and_rows_are_sacrebleu():
    refs = ["the cat sits on the mat today", "two dogs run in the snow", "a man rides a red bike home"]
    fake = LengthTranslator(refs)
    best, rows = tune_alpha(fake, SOURCES, refs, SearchOptions(beam=4), Grid(alphas=(0.4, 0.7, 1.0, 1.3)))
    assert [r.alpha for r in rows] == [0.4, 0.7, 1.0, 1.3]
    assert [c[1:] for c in fake.calls] == [(4, 0.4), (4, 0.7), (4, 1.0), (4, 1.3)]  # a search per alpha
    # alpha >= 1 gives the references themselves: BLEU 100, and of the tied 1.0 and 1.3 the one
    # nearer the paper's 0.6 is kept
    assert rows[2].bleu == pytest.approx(100) and rows[3].bleu == pytest.approx(100) and best == 1.0
    # shorter outputs: lower BLEU through the brevity penalty, as sacreBLEU computes it
    short = BLEU().corpus_score(fake.translate_sentences(SOURCES, beam=4, alpha=0.7, batch_tokens=0), [refs])
    assert rows[1].bleu == pytest.approx(short.score) and rows[1].brevity_penalty == pytest.approx(short.bp)
    assert rows[0].bleu < rows[1].bleu < rows[2].bleu and rows[1].hyp_len < rows[1].ref_len


def test_ties_keep_the_alpha_nearest_the_papers():
    refs = ["x y z", "y z", "z"]
    best, rows = tune_alpha(LengthTranslator(refs), SOURCES, refs, grid=Grid(alphas=(1.2, 1.6, 1.0)))
    assert len({r.bleu for r in rows}) == 1 and best == 1.0 and PAPER_ALPHA == 0.6


def test_bad_grids_and_line_counts():
    import argparse

    from nmt.infer.translate import TranslateError

    assert parse_alphas("0.6, 1,1.4") == (0.6, 1.0, 1.4)
    for bad in ("", "a,b", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_alphas(bad)
    with pytest.raises(TranslateError, match="3 source lines but 2 reference"):
        tune_alpha(LengthTranslator(["a", "b"]), SOURCES, ["a", "b"])
