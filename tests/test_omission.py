"""nmt.infer.omission: a source word deleted at a time, and how much less likely the output then is."""

from __future__ import annotations

import pytest

from nmt.infer.confidence import ForcedScores
from nmt.infer.omission import word_drops, word_spans


def test_word_spans_are_the_texts_words_with_their_pieces():
    pieces = ["▁a", "▁r", "ed", "▁shirt", ".", "▁", "5", "▁"]
    assert word_spans(pieces) == [("a", 0, 1), ("red", 1, 3), ("shirt.", 3, 5), ("5", 5, 7)]
    assert word_spans(["ab", "▁c"]) == [("ab", 0, 1), ("c", 1, 2)]  # a first piece starts a word
    assert word_spans([]) == []


def test_word_drops_delete_exactly_the_words_pieces_and_subtract_the_outputs_own_score():
    seen = []
    likely = {(10, 11, 12, 2): -1.0, (10, 13, 2): -6.0}  # source without a word -> log p(output)

    def forced(sources, outputs):
        seen.extend(zip(map(tuple, sources), map(tuple, outputs)))
        return [ForcedScores([likely[tuple(s)] / 2] * 2) for s in sources]

    sources = [[10, 11, 12, 13, 2], [7, 2]]
    spans = [[("a", 0, 1), ("red", 1, 3), ("shirt", 3, 4)], [("x", 0, 1)]]
    drops = word_drops(forced, sources, [[5, 6], [8]], [-4.0, -1.0], spans, [[1, 2], []])
    assert seen == [((10, 13, 2), (5, 6)), ((10, 11, 12, 2), (5, 6))]  # "red" (2 pieces), "shirt"
    assert drops == [pytest.approx({1: -2.0, 2: 3.0}), {}]  # -6 - (-4); -1 - (-4): likelier without it
    assert word_drops(forced, sources, [[5, 6], [8]], [0.0, 0.0], spans, [[], []]) == [{}, {}]
