"""`nmt tune-alpha`: choose the length penalty alpha on a development set, as the paper did.

Section 6.1: "We used beam search with a beam size of 4 and length penalty alpha = 0.6. These
hyperparameters were chosen after experimentation on the development set." The paper's 0.6 was
chosen for WMT with 25k-token batches and 100k steps; a small model trained for minutes on another
corpus often writes shorter outputs (brevity penalty < 1), and the alpha that fixes that is
found the same way: translate the development set with each alpha of a grid (beam search is
rerun, not rescored: alpha changes which hypotheses survive the exact early termination) and keep
the one with the highest corpus BLEU. Ties keep the alpha nearest the paper's 0.6.

The test set must not take part: tune on valid, then translate test once with the chosen alpha.
With ``--mbr`` each alpha's output is the minimum-Bayes-risk choice among the beam's n-best
(nmt.infer.mbr), so that alpha is chosen for the decoding that will be used.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .options import SearchOptions
from .rerank import combine, rescore
from .results import TranslateError

if TYPE_CHECKING:
    from .mbr import MBR
    from .rerank import Rerank

PAPER_ALPHA = 0.6
DEFAULT_ALPHAS = (0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6)


@dataclass
class AlphaRow:
    alpha: float
    bleu: float
    brevity_penalty: float
    chrf: float
    hyp_len: int
    ref_len: int
    rerank_weight: float | None = None  # with rerank: the rescoring models' weight (nmt.infer.rerank)


@dataclass(frozen=True)
class Grid:
    """What `nmt tune-alpha` tries: each alpha of ``alphas``, each output the beam's best, or with
    ``mbr`` (nmt.infer.mbr.MBR) the MBR choice among its n-best, or with ``rerank``
    (nmt.infer.rerank.Rerank; its weight is ignored) the n-best rescored once per alpha and
    combined with each weight of ``rerank_weights`` (a row per alpha and weight)."""

    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    mbr: MBR | None = None
    rerank: Rerank | None = None
    rerank_weights: tuple[float, ...] = (0.5,)


def tune_alpha(
    translator,
    sources: list[str],
    references: list[str],
    options: SearchOptions = SearchOptions(),
    grid: Grid = Grid(),
    *,
    tokenize: str = "13a",
    batch_tokens: int = 2048,
    on_alpha=None,
) -> tuple[float, list[AlphaRow]]:
    """Translate ``sources`` with ``options`` at each alpha of ``grid`` and score against ``references``
    (sacreBLEU, the ``tokenize`` of `nmt score`). Returns (best alpha, one row per alpha, and rerank
    weight, in the given order); ``on_alpha(row)`` is called after each; with a rerank the best
    row's weight is in ``best_row(rows).rerank_weight``."""
    alphas, mbr, rerank = grid.alphas, grid.mbr, grid.rerank
    if len(sources) != len(references):
        raise TranslateError(f"{len(sources)} source lines but {len(references)} reference lines")
    if not alphas:
        raise TranslateError("no alpha to try")
    if not sources:
        raise TranslateError("no development sentences to tune on")
    encoded = None if rerank is None else translator.encode(sources)[0]
    rows = []
    for alpha in alphas:
        at_alpha = options.replace(alpha=alpha)
        if rerank is None:
            outputs = [
                (None, translator.translate_sentences(sources, at_alpha, mbr=mbr, batch_tokens=batch_tokens))
            ]
        else:
            outputs = reranked_outputs(
                translator,
                sources,
                encoded,
                rerank,
                at_alpha,
                weights=grid.rerank_weights,
                batch_tokens=batch_tokens,
            )
        for weight, hyps in outputs:
            rows.append(score_row(hyps, references, alpha=alpha, weight=weight, tokenize=tokenize))
            if on_alpha is not None:
                on_alpha(rows[-1])
    return best_row(rows).alpha, rows


def reranked_outputs(
    translator,
    sources: list[str],
    encoded: list[list[int]],
    rerank,
    options: SearchOptions,
    *,
    weights,
    batch_tokens: int,
) -> Iterator[tuple[float, list[str]]]:
    """(w, the reranked first choices) for each weight w: the beam's n-best searched with
    ``options`` and rescored by ``rerank``'s models once, then combined with each weight
    (nmt.infer.rerank)."""
    nbest = translator.translate_nbest(
        sources, options.replace(nbest=options.beam), batch_tokens=batch_tokens
    )
    theirs = rescore(nbest, encoded, translator, rerank.translator, batch_tokens=batch_tokens)
    for weight in weights:
        yield float(weight), [r[0].text for r in combine(nbest, theirs, weight=weight, alpha=options.penalty)]


def score_row(
    hyps: list[str], references: list[str], *, alpha: float, weight: float | None, tokenize: str
) -> AlphaRow:
    """The row of one alpha (and rerank weight): corpus BLEU, its brevity penalty, chrF, lengths."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu = BLEU(tokenize=tokenize).corpus_score(hyps, [references])
    chrf = CHRF().corpus_score(hyps, [references])
    return AlphaRow(float(alpha), bleu.score, bleu.bp, chrf.score, bleu.sys_len, bleu.ref_len, weight)


def best_row(rows: list[AlphaRow]) -> AlphaRow:
    """The row of highest BLEU; ties keep the alpha nearest the paper's 0.6, then the lower weight."""
    return max(
        rows, key=lambda r: (round(r.bleu, 10), -abs(r.alpha - PAPER_ALPHA), -(r.rerank_weight or 0.0))
    )
