"""Minimum Bayes risk (MBR) selection among a sentence's candidate translations (not in the paper).

Beam search returns the candidate with the highest (length-normalised) model score; MBR decoding
(Kumar & Byrne 2004; for NMT e.g. Eikema & Aziz 2020, Freitag et al. 2022) returns the candidate
with the highest expected utility against the others, each weighted by the model:

    pick = argmax_i  sum_j p_j * u(y_i, y_j),   p_j = softmax_j(score_j / T)

where the candidates y_j are the beam's n-best (``nmt translate --mbr``: n = --beam), score_j their
beam-search scores (summed log-probability over the length penalty, section 6.1) and T
``temperature`` (T -> 0: the beam's best; T -> inf: uniform weights). The utility is sentence-level
chrF (Popovic 2015; sacreBLEU's chrF2: character 6-grams, spaces removed, beta 2) or sentence-level
BLEU (sacreBLEU's, effective order). chrF is computed here from n-gram counts extracted once per
candidate (the same figures as ``sacrebleu.sentence_chrf``, tested), which makes the n^2
comparisons cheap.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from .results import Translation

UTILITIES = ("chrf", "bleu")
CHRF_ORDER = 6
CHRF_BETA = 2.0


@dataclass
class MBR:
    """MBR selection among the beam's n-best (n = the beam size): ``utility`` "chrf" or "bleu",
    candidate weights softmax(score / ``temperature``)."""

    utility: str = "chrf"
    temperature: float = 0.5

    def __post_init__(self) -> None:
        if self.utility not in UTILITIES:
            raise ValueError(f"utility={self.utility!r}: choose one of {', '.join(UTILITIES)}")
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature}: must be > 0")


def char_ngrams(text: str, order: int = CHRF_ORDER) -> list[Counter]:
    """Character n-gram counts of ``text`` without its whitespace, n = 1..order (sacreBLEU's
    ``extract_all_char_ngrams``)."""
    line = "".join(text.split())
    return [Counter(line[i : i + n] for i in range(len(line) - n + 1)) for n in range(1, order + 1)]


def chrf_from_ngrams(hyp: list[Counter], ref: list[Counter], beta: float = CHRF_BETA) -> float:
    """Sentence chrF (0-100) of n-gram counts ``hyp`` against ``ref``, as sacreBLEU computes it:
    precision and recall averaged over the orders that both sides have, then their F-beta."""
    avg_prec = avg_rec = 0.0
    effective = 0
    for h, r in zip(hyp, ref):
        n_hyp, n_ref = sum(h.values()), sum(r.values())
        if n_hyp and n_ref:
            small, large = (h, r) if len(h) <= len(r) else (r, h)
            match = sum(min(c, large[g]) for g, c in small.items() if g in large)
            avg_prec += match / n_hyp
            avg_rec += match / n_ref
            effective += 1
    if not effective:
        return 0.0
    avg_prec, avg_rec = avg_prec / effective, avg_rec / effective
    factor = beta**2
    if avg_prec + avg_rec == 0:
        return 0.0
    return 100.0 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec)


def sentence_chrf(hypothesis: str, reference: str) -> float:
    return chrf_from_ngrams(char_ngrams(hypothesis), char_ngrams(reference))


def utility_matrix(texts: Sequence[str], utility: str = "chrf") -> list[list[float]]:
    """u[i][j] = utility of candidate i with candidate j as the reference (n x n)."""
    if utility == "chrf":
        grams = [char_ngrams(t) for t in texts]
        return [[chrf_from_ngrams(gi, gj) for gj in grams] for gi in grams]
    if utility == "bleu":
        from sacrebleu.metrics import BLEU

        bleu = BLEU(effective_order=True)
        return [[bleu.sentence_score(ti, [tj]).score for tj in texts] for ti in texts]
    raise ValueError(f"utility={utility!r}: choose one of {', '.join(UTILITIES)}")


def mbr_weights(scores: Sequence[float], temperature: float) -> list[float]:
    """softmax(score / T) over the candidates (T > 0); all -inf scores give uniform weights."""
    if not temperature > 0:
        raise ValueError(f"temperature={temperature}: must be > 0")
    best = max(scores)
    if best == float("-inf"):
        return [1.0 / len(scores)] * len(scores)
    w = [math.exp((s - best) / temperature) for s in scores]
    total = sum(w)
    return [x / total for x in w]


def mbr_select(
    texts: Sequence[str], scores: Sequence[float], *, utility: str = "chrf", temperature: float = 0.5
) -> int:
    """Index of the candidate with the highest expected utility (ties: the earlier one, i.e. the
    better beam rank when ``texts`` are best first)."""
    if len(texts) != len(scores) or not texts:
        raise ValueError(
            f"{len(texts)} candidates and {len(scores)} scores: need the same number, at least 1"
        )
    if len(texts) == 1:
        return 0
    weights = mbr_weights(scores, temperature)
    u = utility_matrix(texts, utility)
    expected = [sum(w * uij for w, uij in zip(weights, row)) for row in u]
    return max(range(len(texts)), key=lambda i: (expected[i], -i))


def mbr_pick_all(
    candidates: Sequence[Sequence[tuple[str, float]]], *, utility: str = "chrf", temperature: float = 0.5
) -> list[int]:
    """``mbr_select`` for each sentence's (text, score) candidates; an empty list picks -1."""
    return [
        mbr_select([t for t, _ in cands], [s for _, s in cands], utility=utility, temperature=temperature)
        if cands
        else -1
        for cands in candidates
    ]


def mbr_results(results: list[list[Translation]], mbr: MBR) -> list[list[Translation]]:
    """Each sentence's n-best reduced to its MBR choice, as a one-item list (an empty list stays)."""
    picks = mbr_pick_all(
        [[(t.text, t.score) for t in r] for r in results], utility=mbr.utility, temperature=mbr.temperature
    )
    return [[r[p]] if p >= 0 else r for r, p in zip(results, picks)]
