"""Which source words a translation does not depend on: contrastive conditioning (Vamvas and
Sennrich, 2022, "As Little as Possible, as Much as Necessary"), read by the omission check of
nmt.infer.guards.

    words = word_spans(pieces)                                        # [(text, first, end), ...]
    drops = word_drops(translator.forced_scores, sources, outputs, bases, spans, tested)

A word that the output translates makes the output less likely once it is deleted from the
source: log p(y | x without the word) - log p(y | x) is well below zero (-2 to -20 nats for a
content word). A word that the output left out changes nothing or makes the output more likely
(the output fits the shorter source better). Attention is no such test: a model attends to words
it then leaves out. Only the words a guard asks about are tested (nmt.infer.guards.deletion_candidates:
long words the output attends to little), one teacher-forced pass each.
"""

from __future__ import annotations

from collections.abc import Callable


def word_spans(pieces: list[str]) -> list[tuple[str, int, int]]:
    """The source's words as (text, first piece, end piece): a word starts at a piece beginning
    with "▁" (and at the first piece); words of no text (a lone "▁") are left out."""
    spans: list[list] = []
    for k, piece in enumerate(pieces):
        if piece.startswith("▁") or not spans:
            spans.append([piece.lstrip("▁"), k, k + 1])
        else:
            spans[-1][0] += piece
            spans[-1][2] = k + 1
    return [(w, a, b) for w, a, b in spans if w]


def word_drops(
    forced: Callable,
    sources: list[list[int]],
    outputs: list[list[int]],
    bases: list[float],
    spans: list[list[tuple[str, int, int]]],
    tested: list[list[int]],
) -> list[dict[int, float]]:
    """For each sentence (``sources`` ids + EOS, ``outputs`` ids without BOS/EOS, ``bases`` the
    output's teacher-forced log-probability, ``spans`` its source's word_spans) and each word index
    of ``tested``: log p(output | source without that word's pieces) - base. ``forced``: a
    translator's forced_scores (sources, outputs) -> per pair the pieces' log-probabilities."""
    variants, outs, owner = [], [], []
    for i, words in enumerate(tested):
        for w in words:
            _, a, b = spans[i][w]
            variants.append(sources[i][:a] + sources[i][b:])
            outs.append(outputs[i])
            owner.append((i, w))
    drops: list[dict[int, float]] = [{} for _ in sources]
    if not variants:
        return drops
    for (i, w), s in zip(owner, forced(variants, outs)):
        drops[i][w] = sum(s.log_probs) - bases[i]
    return drops
