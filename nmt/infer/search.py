"""Beam search and greedy search (section 6.1 of the paper), outside the model.

The model is only called through ``memory = model.encode(src)`` and
``logits, cache = model.decode_step(tokens, memory, cache)``; the cache is an explicit value with
``reorder(indices)``, used both to follow beams and to drop finished sentences from the batch.

Axis legend: B sentences still searching, k beam size, W vocabulary, t tokens generated so far.

Definitions (all pinned by tests/test_search.py):
  * |Y| counts the generated tokens *including* EOS (BOS is not counted).
  * lp(Y) = ((5 + |Y|) / 6) ** alpha, the GNMT length penalty (Wu et al., 2016); paper: alpha 0.6.
  * score(Y) = sum_i log p(y_i | y_<i, x) / lp(Y), the length-normalised log-probability.
  * max output length: |Y| <= floor(max_len_a * |x| + max_len_b) (paper: |x| + 50), where |x| is
    the number of source tokens (pieces + EOS, padding excluded); also |Y| <= model.cfg.max_positions.
    At the last allowed step only EOS may be chosen, so every hypothesis ends with EOS.
  * A step: every active hypothesis is extended by every token; the 2k best extensions by summed
    log-probability are taken. EOS extensions among the first k become finished hypotheses; the
    first k non-EOS extensions form the next active beam (finished ones never re-enter it).
  * Early termination (exact): a sentence stops when it has k finished hypotheses and no active
    hypothesis can still beat the k-th best of them. An active hypothesis with summed
    log-probability s <= 0 after t tokens can only end with s' <= s and a length
    L in [t+1, L_max], so its final score is at most  s / max_{t+1 <= L <= L_max} lp(L),
    i.e. s / lp(L_max) for alpha >= 0 (s / lp(t+1) for alpha < 0). The sentence stops when that
    bound for its best active hypothesis is <= the worst of its k best finished scores, or when
    L_max is reached.
  * Greedy search is beam=1 with alpha=0 (``greedy_search``): the argmax token each step until EOS.
    With beam=1 and alpha>0 the rule above keeps extending past a finished hypothesis while a
    longer output could still score higher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from ..vocab import BOS, EOS, PAD


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha; length counts EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def max_score_bound(logp_sum: float, length: int, max_len: int, alpha: float) -> float:
    """Upper bound on the final score of an active hypothesis with summed log-probability
    ``logp_sum`` (<= 0) after ``length`` generated tokens, if it ends within ``max_len`` tokens."""
    best_lp = max(length_penalty(length + 1, alpha), length_penalty(max_len, alpha))
    return logp_sum / best_lp


@dataclass
class Hypothesis:
    """A finished output: ``tokens`` without BOS/EOS, ``positional_scores`` one log-probability per
    generated token including the final EOS, ``score`` = sum(positional_scores) / lp(len + 1)."""

    tokens: list[int]
    score: float
    positional_scores: list[float] = field(default_factory=list)

    @property
    def log_prob(self) -> float:
        return sum(self.positional_scores)


def _add_finished(finished: list[Hypothesis], hyp: Hypothesis, k: int) -> None:
    """Insert keeping the k best, best first (on ties, the earlier-found hypothesis stays ahead)."""
    i = len(finished)
    while i > 0 and finished[i - 1].score < hyp.score:
        i -= 1
    finished.insert(i, hyp)
    del finished[k:]


@torch.no_grad()
def beam_search(model, src_tokens: Tensor, *, beam: int = 4, alpha: float = 0.6,
                max_len_a: float = 1.0, max_len_b: int = 50, min_len: int = 1, nbest: int = 1,
                pad: int = PAD, bos: int = BOS, eos: int = EOS) -> list[list[Hypothesis]]:
    """Search each sentence of ``src_tokens`` (B, S) (padded with ``pad``); returns, per sentence,
    its ``nbest`` (<= beam) best finished hypotheses, best first. ``min_len`` masks EOS until
    |Y| >= min_len (min_len = max length forces a fixed output length, for benchmarks)."""
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest={nbest}: must be between 1 and beam={beam}")
    k, n_src = beam, src_tokens.size(0)
    src_len = src_tokens.ne(pad).sum(dim=1).tolist()  # |x| per sentence
    max_len = [max(1, min(int(math.floor(max_len_a * n + max_len_b)), model.cfg.max_positions))
               for n in src_len]
    memory = model.encode(src_tokens)
    device = src_tokens.device
    memory = memory.reorder(torch.arange(n_src, device=device).repeat_interleave(k))  # rows (B*k)
    alive = list(range(n_src))  # original index of each sentence still searching
    scores = torch.full((n_src, k), float("-inf"), device=device)  # (B, k) summed log-probs
    scores[:, 0] = 0.0  # one start hypothesis per sentence; the other k-1 rows are placeholders
    tokens = torch.full((n_src * k, 1), bos, dtype=torch.long, device=device)  # (B*k, 1+t)
    pos_scores = torch.zeros(n_src * k, 0, device=device)  # (B*k, t)
    finished: list[list[Hypothesis]] = [[] for _ in range(n_src)]
    cache = None
    for t in range(max(max_len)):  # t tokens generated so far; this step makes token t+1
        b = len(alive)
        logits, cache = model.decode_step(tokens[:, -1:], memory, cache)
        logp = F.log_softmax(logits[:, -1].float(), dim=-1)  # (B*k, W)
        w = logp.size(-1)
        last = [t + 1 >= max_len[s] for s in alive]  # (B,) this step is the last allowed
        block_eos = t + 1 < min_len
        if any(last) or block_eos:  # only EOS at the last allowed step; no EOS before min_len
            last_rows = torch.tensor(last, device=device).repeat_interleave(k)[:, None]  # (B*k, 1)
            eos_col = torch.arange(w, device=device) == eos  # (W,)
            mask = (last_rows & ~eos_col) | (~last_rows & eos_col & block_eos)  # (B*k, W)
            logp = logp.masked_fill(mask, float("-inf"))
        cand = (scores.view(b * k, 1) + logp).view(b, k * w)  # (B, k*W)
        top_scores, top_idx = cand.topk(min(2 * k, k * w), dim=1)  # (B, 2k)
        top_beam, top_tok = top_idx // w, top_idx % w  # (B, 2k) source row in beam, token
        top_rows = top_beam + torch.arange(b, device=device)[:, None] * k  # (B, 2k) row in B*k
        is_eos = top_tok.eq(eos)
        # finished: EOS extensions ranked among the first k
        fin = (is_eos[:, :k] & top_scores[:, :k].gt(float("-inf"))).nonzero().tolist()
        if fin:
            lp = length_penalty(t + 1, alpha)
            for i, r in fin:
                row = int(top_rows[i, r])
                total = float(top_scores[i, r])
                positional = pos_scores[row].tolist() + [float(logp[row, eos])]
                hyp = Hypothesis(tokens[row, 1:].tolist(), total / lp, positional)
                _add_finished(finished[alive[i]], hyp, k)
        # next active beam: the first k non-EOS extensions (stable order by rank)
        rank = torch.arange(top_idx.size(1), device=device).expand_as(top_idx)  # (B, 2k)
        sel = rank.masked_fill(is_eos, top_idx.size(1) * 2).sort(dim=1).indices[:, :k]  # (B, k)
        scores = top_scores.gather(1, sel)  # (B, k)
        rows = top_rows.gather(1, sel).view(-1)  # (B*k,)
        new_tok = top_tok.gather(1, sel).view(-1)  # (B*k,)
        new_logp = logp[rows, new_tok]  # (B*k,)
        # which sentences are done
        best_active = scores.max(dim=1).values.tolist()  # (B,)
        keep = []
        for i, s in enumerate(alive):
            done = last[i] or best_active[i] == float("-inf")
            if not done and len(finished[s]) >= k:
                bound = max_score_bound(best_active[i], t + 1, max_len[s], alpha)
                done = bound <= finished[s][-1].score
            if not done:
                keep.append(i)
        if not keep:
            break
        tokens = torch.cat([tokens[rows], new_tok[:, None]], dim=1)  # (B*k, 2+t)
        pos_scores = torch.cat([pos_scores[rows], new_logp[:, None]], dim=1)  # (B*k, 1+t)
        if len(keep) < b:  # drop finished sentences: keep their k rows only
            keep_t = torch.tensor(keep, device=device)
            kept_rows = (keep_t[:, None] * k + torch.arange(k, device=device)).view(-1)  # (B'*k,)
            rows, tokens, pos_scores = rows[kept_rows], tokens[kept_rows], pos_scores[kept_rows]
            scores = scores[keep_t]  # (B', k)
            memory = memory.reorder(rows)  # rows of one sentence share its memory
            alive = [alive[i] for i in keep]
        if k > 1 or len(keep) < b:  # with one hypothesis per sentence, rows only change by dropping
            cache = cache.reorder(rows)
    return [f[:nbest] for f in finished]


def greedy_search(model, src_tokens: Tensor, *, max_len_a: float = 1.0, max_len_b: int = 50,
                  min_len: int = 1) -> list[Hypothesis]:
    """Greedy search: beam_search with beam=1, alpha=0 (argmax each step until EOS)."""
    hyps = beam_search(model, src_tokens, beam=1, alpha=0.0, max_len_a=max_len_a,
                       max_len_b=max_len_b, min_len=min_len)
    return [h[0] for h in hyps]


class RecomputePrefix:
    """A model wrapper whose ``decode_step`` re-runs the whole target prefix from scratch each step
    (no reuse of keys/values): the naive decoder, for tests and the speed benchmark."""

    @dataclass
    class Cache:
        prefix: Tensor  # (B, t) every target token fed so far

        def reorder(self, indices: Tensor) -> "RecomputePrefix.Cache":
            return RecomputePrefix.Cache(self.prefix.index_select(0, indices))

    def __init__(self, model):
        self.model, self.cfg = model, model.cfg

    def encode(self, src_tokens: Tensor):
        return self.model.encode(src_tokens)

    def decode_step(self, tgt_tokens: Tensor, memory, cache: "RecomputePrefix.Cache | None"):
        prefix = tgt_tokens if cache is None else torch.cat([cache.prefix, tgt_tokens], dim=1)  # (B, t)
        logits, _ = self.model.decode_step(prefix, memory, None)  # (B, t, W)
        return logits[:, -tgt_tokens.size(1):], RecomputePrefix.Cache(prefix)
