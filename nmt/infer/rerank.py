"""Reranking a model's n-best with a second model, usually a right-to-left one (not in the paper).

A left-to-right decoder commits to the start of a sentence before it sees how the sentence ends;
a model trained to write the target right to left (ModelConfig.right_to_left: the last piece
first) errs the other way round. Scoring the left-to-right beam's n-best with the right-to-left
model and keeping the candidate the two models prefer together is the "agreement" reranking of
Liu et al. (2016) and of Sennrich et al.'s WMT16/17 systems:

    pick = argmax_y  ((1 - w) * log p_l2r(y | x) + w * log p_r2l(reverse(y) | x)) / lp(|y|)

where the candidates y are the search's n-best (``nmt translate --rerank``: n = --beam), each
log-probability sums over the output's pieces and EOS (the rescoring model reads the candidate
in its own order, by teacher forcing), lp is the search's length penalty ((5 + |y|) / 6)^alpha
with |y| counting EOS (section 6.1) and w ``weight`` (0: the search's own choice; 1: the
rescoring model's choice among the candidates). Several rescoring checkpoints are an ensemble:
their log-probabilities are averaged. The rescoring models must share the searching model's
vocabulary, id for id. w is chosen on a development set (``nmt tune-alpha --rerank ...
--rerank-weights``), as alpha is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..data.batching import make_batches
from ..precision import autocast
from ..vocab import BOS, EOS, PAD
from .results import Translation
from .search import Ensemble, length_penalty, reading_order


@dataclass
class Rerank:
    """Rescore the beam's n-best with ``translator`` (a Translator, usually of a right-to-left
    model) and combine: (1 - ``weight``) * own score + ``weight`` * its score, both over lp(|y|)."""

    translator: object
    weight: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"weight={self.weight}: must be in [0, 1]")


@torch.inference_mode()
def score_targets(
    model,
    sources: list[list[int]],
    targets: list[list[int]],
    *,
    batch_tokens: int = 4096,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> list[float]:
    """log p(target + EOS | source) under ``model`` (a Transformer or an Ensemble: the mean of the
    models' log-probabilities, as the ensemble's search uses them) by teacher forcing. ``sources``:
    ids ending with EOS (as Translator.encode gives them); ``targets``: ids in the model's order,
    without BOS/EOS. Pairs are batched by source + target length; results in input order."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
    device = torch.device(device)
    models = model.models if isinstance(model, Ensemble) else [model]
    out = [0.0] * len(sources)
    lengths = [len(s) + len(t) + 1 for s, t in zip(sources, targets)]
    for batch in make_batches(lengths, batch_tokens=batch_tokens):
        src_w = max(len(sources[i]) for i in batch)
        tgt_w = max(len(targets[i]) for i in batch) + 1
        src = torch.tensor(
            [sources[i] + [PAD] * (src_w - len(sources[i])) for i in batch], device=device
        )  # (B, S)
        tgt_in = torch.tensor(
            [[BOS] + targets[i] + [PAD] * (tgt_w - 1 - len(targets[i])) for i in batch], device=device
        )  # (B, T): BOS + target
        tgt_out = torch.tensor(
            [targets[i] + [EOS] + [PAD] * (tgt_w - 1 - len(targets[i])) for i in batch], device=device
        )  # (B, T): target + EOS
        keep = tgt_out.ne(PAD)  # (B, T)
        total = torch.zeros(len(batch), device=device)  # (B,)
        for m in models:
            with autocast(device, dtype):
                logits = m(src, tgt_in)  # (B, T, W)
            logp = F.log_softmax(logits.float(), dim=-1).gather(-1, tgt_out[..., None]).squeeze(-1)  # (B, T)
            total += logp.masked_fill(~keep, 0.0).sum(dim=1)
        for i, v in zip(batch, (total / len(models)).tolist()):
            out[i] = v
    return out


def rescore(results: list, sources: list[list[int]], searcher, scorer, *, batch_tokens: int = 4096) -> list:
    """log p of every candidate of ``results`` (lists of nmt.infer.results.Translation from
    ``searcher``'s model) under ``scorer``'s model (a Translator), read in that model's order:
    one list of floats per sentence. ``sources``: the searched ids (Translator.encode)."""
    pairs = [(s, j) for s, r in enumerate(results) if sources[s] for j in range(len(r))]
    targets = [
        reading_order(scorer.model, reading_order(searcher.model, results[s][j].tokens)) for s, j in pairs
    ]
    flat = score_targets(
        scorer.model,
        [sources[s] for s, _ in pairs],
        targets,
        batch_tokens=batch_tokens,
        device=scorer.device,
        dtype=scorer.dtype,
    )
    out = [[0.0] * len(r) for r in results]
    for (s, j), v in zip(pairs, flat):
        out[s][j] = v
    return out


def combine(results: list, theirs: list, *, weight: float, alpha: float) -> list:
    """Each sentence's candidates reordered by ((1 - weight) * own + weight * theirs) / lp(|y|)
    (own: the search's summed log-probability, recovered from its score), which becomes each
    Translation's ``score``; ties keep the beam's order."""
    out = []
    for r, logps in zip(results, theirs):
        scored = []
        for t, logp in zip(r, logps):
            lp = length_penalty(len(t.tokens) + 1, alpha)
            scored.append(Translation(t.text, ((1.0 - weight) * t.score * lp + weight * logp) / lp, t.tokens))
        out.append(sorted(scored, key=lambda t: -t.score))
    return out


def rerank_results(
    results: list,
    sources: list[list[int]],
    searcher,
    rerank: Rerank,
    *,
    alpha: float,
    batch_tokens: int = 4096,
) -> list:
    """Each sentence's n-best (lists of nmt.infer.results.Translation from ``searcher``'s
    model, best first) reordered by the combined score of the module docstring, which becomes
    each Translation's ``score``. An empty source's one empty output stays as it is."""
    theirs = rescore(results, sources, searcher, rerank.translator, batch_tokens=batch_tokens)
    return [
        r if not sources[s] else c
        for s, (r, c) in enumerate(zip(results, combine(results, theirs, weight=rerank.weight, alpha=alpha)))
    ]
