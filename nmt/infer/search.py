"""Beam search and greedy search (section 6.1 of the paper), outside the model.

The model is only called through ``memory = model.encode(src)`` and
``logits, cache = model.decode_step(tokens, memory, cache)``; the cache is an explicit value with
``reorder(indices)``, used both to follow beams and to drop finished sentences from the batch.
A cache (or memory) may also offer ``reorder_(indices)``, the same for a caller that will not use
it again (done in place: nmt.model.DecoderCache copies only the rows that change); the search
uses it where it has it (``reorder_owned``), and keeps a row's best child in that row
(``beam_slots``) and fills a finished sentence's rows from the end of the batch (``fill_from_end``)
so that few rows change. Row order never changes a result (tested).

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
  * Early termination (exact): a sentence stops when it has ``nbest`` finished hypotheses and no
    active hypothesis can still beat the nbest-th best of them, i.e. when the output it returns
    can no longer change. An active hypothesis with summed log-probability s <= 0 after t tokens
    can only end with s' <= s and a length L in [t+1, L_max], so its final score is at most
    s / max_{t+1 <= L <= L_max} lp(L), i.e. s / lp(L_max) for alpha >= 0 (s / lp(t+1) for
    alpha < 0); every later hypothesis extends an active one. The sentence stops when that bound
    for its best active hypothesis is <= the nbest-th best finished score (a later hypothesis
    scoring the same ranks after it), or when L_max is reached. The returned hypotheses are those
    of a search run on to L_max; waiting for k finished ones (the k-th best as the bar) would
    return the same with more steps when nbest < k.
  * Early termination (``stopping="fast"``, not the paper's): a sentence stops as soon as the best
    extension of a step is EOS (once ``nbest`` hypotheses have finished) or k hypotheses have
    finished, as CTranslate2 does (patience 1; fairseq stops at k finished). It runs fewer steps
    and can miss a longer output that the exact rule would have found.
  * PAD and BOS are never generated: their log-probabilities are set to -inf before each choice
    (as fairseq does), so the scores of the other tokens are the model's own.
  * Prefix-constrained decoding (``prefix``): while t < len(prefix), every token other than
    prefix[t] gets log-probability -inf (prefix[t] keeps the model's); the search then goes on
    unconstrained. The prefix counts in |Y| and in the score; max length >= len(prefix) + 1.
  * Constrained decoding (``constraint``, e.g. the parser's well-formed trees,
    nmt.experiments.parsing.TreeConstraint): ``constraint(src_tokens)`` returns a function
    ``mask(logp, tokens, alive, k, steps_left)`` that sets the log-probabilities of the tokens a
    hypothesis may not take next to -inf, given its tokens so far (BOS first) and how many tokens
    it may still write, EOS included (rows ``i*k..(i+1)*k-1`` search sentence ``alive[i]``); the
    others keep the model's.
  * Greedy search is beam=1 with alpha=0 (``greedy_search``): the argmax token each step until EOS.
    With beam=1 and alpha>0 the rule above keeps extending past a finished hypothesis while a
    longer output could still score higher.
  * Sampling (``sample``): one output per sentence, each token drawn from softmax(logits / T)
    restricted to the ``topk`` most probable tokens and to the smallest set whose probability
    reaches ``topp`` (T=1, no restriction: the full distribution, as Edunov et al. 2018 for
    back-translation); sentence i draws from its own generator seeded by (seed, i), so the output
    does not depend on batching. Its score is the model's log-probability (T=1) of the output.
  * Ensembles (``Ensemble``): the models' log-probabilities are averaged per step (a log-linear
    combination, renormalised by the search's log_softmax), as Marian does.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from ..vocab import BOS, EOS, PAD
from .constraints import LexicalConstraints


STOPPING = ("exact", "fast")  # beam_search's early termination rules (see the module docstring)


def right_to_left(model) -> bool:
    """Whether ``model`` writes its output last piece first (ModelConfig.right_to_left); a model
    (or stand-in) without that setting writes left to right."""
    return bool(getattr(getattr(model, "cfg", None), "right_to_left", False))


def reading_order(model, tokens: list[int]) -> list[int]:
    """Ids of ``model``'s output in reading order, or ids in reading order in ``model``'s order
    (the same map both ways: a right-to-left model's sequence reversed)."""
    return tokens[::-1] if right_to_left(model) else list(tokens)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha; length counts EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def default_alpha(beam: int) -> float:
    """The paper's length penalty alpha=0.6 for beam search; 0 for beam 1 (plain greedy search)."""
    return 0.0 if beam == 1 else 0.6


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


def row_topk(x: Tensor, k: int, block: int = 64) -> tuple[Tensor, Tensor]:
    """The k largest entries of each row of x (N, W) and their columns, best first: the values of
    ``x.topk(k, dim=-1)`` (columns may differ among equal values); beam_topk with one row per
    sentence (see there for the two-stage selection on the CPU)."""
    values, _, cols, _ = beam_topk(x, None, k, block)
    return values, cols


def beam_topk(logp: Tensor, scores: Tensor | None, n: int, block: int = 64) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The ``n`` best extensions of each sentence's beam. ``logp`` (B*k, W): next-token
    log-probabilities of the k rows of each sentence (rows i*k..(i+1)*k-1 are sentence i);
    ``scores`` (B, k): the rows' summed log-probabilities (None: k = 1 and scores 0, i.e. the top
    of each row of ``logp``). Returns, best first, (B, n) each: the extensions' summed
    log-probabilities, their row in the beam (0..k-1), token and token log-probability (the values
    of ``(scores[:, :, None] + logp).view(B, -1).topk(n)``; among equal values the choice may differ).

    On the CPU, for W >> n, in two stages per sentence: the best summed score of each block of
    ``block`` columns of each row, the n (row, block) pairs with the best of those (they hold the n
    best extensions: a pair outside them has n block maxima at least as large as all its entries),
    then the n best among those pairs' n*block entries and the last W % block columns of every row.
    PyTorch's CPU top-k costs ~1 ns per element, a third of the speed of a maximum: this reads the
    (B*k, W) matrix once (a block maximum) and runs top-k on (B, k*W/block) and (B, n*block)."""
    bk, w = logp.shape
    b, k = (bk, 1) if scores is None else scores.shape
    n_blocks = w // block
    device = logp.device

    def plus_score(x: Tensor, rows: Tensor | None = None) -> Tensor:  # x (B*k, ...) or (B, n, ...) + its row's score
        if scores is None:
            return x
        return x + (scores.view(bk, 1) if rows is None else scores.gather(1, rows)[:, :, None])

    if device.type != "cpu" or n_blocks * k <= n or bk == 0:  # one top-k over all of a sentence's entries
        top_scores, pos = plus_score(logp).view(b, k * w).topk(n, dim=1)  # (B, n)
        top_logp = top_scores if scores is None else logp.view(b, k * w).gather(1, pos)
        return top_scores, pos // w, pos % w, top_logp
    main = logp[:, :n_blocks * block].view(bk, n_blocks, block)  # (B*k, W // block, block)
    block_best = plus_score(main.amax(dim=-1)).view(b, k * n_blocks)  # (B, k * W // block)
    pair = block_best.topk(n, dim=1).indices  # (B, n) the n best (row, block) pairs
    beam_row, blk = pair // n_blocks, pair % n_blocks  # (B, n) each
    rows = beam_row + torch.arange(b, device=device)[:, None] * k  # (B, n) row in B*k
    cand = plus_score(main[rows, blk], beam_row).view(b, n * block)  # (B, n*block) summed log-probs
    cand_row = beam_row[:, :, None].expand(b, n, block).reshape(b, n * block)  # (B, n*block)
    cand_tok = (blk[:, :, None] * block + torch.arange(block, device=device)).view(b, n * block)  # (B, n*block)
    tail = w - n_blocks * block
    if tail:  # every row's last W % block columns are candidates too
        cand = torch.cat([cand, plus_score(logp[:, n_blocks * block:]).view(b, k * tail)], dim=1)  # (B, n*block + k*tail)
        cand_row = torch.cat([cand_row, torch.arange(k, device=device).repeat_interleave(tail).expand(b, -1)], dim=1)
        cand_tok = torch.cat([cand_tok, torch.arange(n_blocks * block, w, device=device).repeat(k).expand(b, -1)],
                             dim=1)
    top_scores, pos = cand.topk(n, dim=1)  # (B, n)
    top_beam, top_tok = cand_row.gather(1, pos), cand_tok.gather(1, pos)  # (B, n) each
    if scores is None:  # the values are the entries themselves
        return top_scores, top_beam, top_tok, top_scores
    top_logp = logp[top_beam + torch.arange(b, device=device)[:, None] * k, top_tok]  # (B, n)
    return top_scores, top_beam, top_tok, top_logp


def beam_slots(parent: Tensor) -> Tensor:
    """Where the next beam's hypotheses go so that few cache rows move. ``parent`` (B, k): the
    beam row (0..k-1) each new hypothesis extends, best first. The best child of a row stays in
    that row; the other children take, best first, the rows left free (ascending). Returns
    ``order`` (B, k): order[i, r] = the rank of the hypothesis placed in row r (a permutation)."""
    b, k = parent.shape
    ranks = torch.arange(k, device=parent.device)  # (k,)
    same = parent[:, :, None].eq(parent[:, None, :])  # (B, k, k) [i, j, j']: j and j' share a parent
    first = ~(same & ranks[None, :].lt(ranks[:, None])[None]).any(dim=2)  # (B, k) no better sibling
    taken = (parent[:, :, None].eq(ranks) & first[:, :, None]).any(dim=1)  # (B, k) row r keeps a child
    free = taken.to(torch.int8).sort(dim=1, stable=True).indices  # (B, k) free rows first, ascending
    nth_other = ((~first).cumsum(dim=1) - 1).clamp(min=0)  # (B, k) index among the non-first children
    slot = torch.where(first, parent, free.gather(1, nth_other))  # (B, k) row of each rank
    return torch.empty_like(slot).scatter_(1, slot, ranks.expand(b, k))  # (B, k) rank of each row


def fill_from_end(keep: list[int], b: int) -> list[int]:
    """The sentences (positions 0..b-1) ``keep`` (ascending) in a new order where every kept
    sentence before position len(keep) stays in place and the last ones fill the gaps: dropping
    sentences moves as few cache rows as there are gaps to fill, not every row after the first gap."""
    n, kept = len(keep), set(keep)
    tail = [i for i in keep if i >= n]  # kept sentences past the new end
    return [i if i in kept else tail.pop() for i in range(n)]


def reorder_owned(state, rows: Tensor):
    """``state.reorder(rows)`` (a cache or a memory) where the search will not use ``state``
    again: its in-place ``reorder_`` when it has one (nmt.model.DecoderCache, EncoderOut: only
    the rows that change are copied)."""
    return state.reorder_(rows) if hasattr(state, "reorder_") else state.reorder(rows)


def output_lengths(model, src_tokens: Tensor, *, max_len_a: float, max_len_b: int,
                   prefix: list[list[int]] | None, pad: int = PAD, bos: int = BOS, eos: int = EOS) -> list[int]:
    """The max output length |Y| of each sentence (see the module docstring)."""
    src_len = src_tokens.ne(pad).sum(dim=1).tolist()  # |x| per sentence
    limit = model.cfg.max_positions
    max_len = [max(1, min(int(math.floor(max_len_a * n + max_len_b)), limit)) for n in src_len]
    if prefix is not None:
        if len(prefix) != len(max_len):
            raise ValueError(f"{len(prefix)} prefixes for {len(max_len)} sentences")
        for i, pre in enumerate(prefix):
            if set(pre) & {pad, bos, eos}:
                raise ValueError(f"sentence {i}: a prefix may not hold PAD, BOS or EOS ({pre})")
            if len(pre) + 1 > limit:
                raise ValueError(f"sentence {i}: a prefix of {len(pre)} tokens leaves no room for EOS "
                                 f"(model.max_positions={limit})")
            max_len[i] = max(max_len[i], len(pre) + 1)
    return max_len


def mask_step(logp: Tensor, t: int, *, alive: list[int], rows_per_sentence: int, max_len: list[int],
              min_len: int, prefix: list[list[int]] | None, pad: int, bos: int, eos: int) -> Tensor:
    """The log-probabilities (N, W) of step t (making token t+1) with the choices the rules forbid
    set to -inf: PAD and BOS always; all but EOS at a sentence's last allowed step; EOS before
    ``min_len``; all but prefix[t] while the prefix lasts. ``alive[i]``: the sentence of rows
    i*rows_per_sentence..(i+1)*rows_per_sentence-1."""
    neg_inf = float("-inf")
    logp[:, pad] = neg_inf
    logp[:, bos] = neg_inf
    k, device = rows_per_sentence, logp.device
    last = [t + 1 >= max_len[s] for s in alive]  # (B,) this step is the last allowed
    block_eos = t + 1 < min_len
    if any(last) or block_eos:  # only EOS at the last allowed step; no EOS before min_len
        last_rows = torch.tensor(last, device=device).repeat_interleave(k)[:, None]  # (N, 1)
        eos_col = torch.arange(logp.size(-1), device=device) == eos  # (W,)
        mask = (last_rows & ~eos_col) | (~last_rows & eos_col & block_eos)  # (N, W)
        logp = logp.masked_fill(mask, neg_inf)
    if prefix is not None and any(t < len(prefix[s]) for s in alive):
        forced = torch.tensor([prefix[s][t] if t < len(prefix[s]) else -1 for s in alive],
                              device=device).repeat_interleave(k)  # (N,) forced token, -1: free
        col = forced.clamp(min=0)[:, None]  # (N, 1)
        only = torch.full_like(logp, neg_inf).scatter_(1, col, logp.gather(1, col))  # (N, W)
        logp = torch.where(forced.ge(0)[:, None], only, logp)
    return logp


@torch.inference_mode()  # no autograd bookkeeping at all: ~5% of a small step's overhead
def beam_search(model, src_tokens: Tensor, *, beam: int = 4, alpha: float = 0.6,
                max_len_a: float = 1.0, max_len_b: int = 50, min_len: int = 1, nbest: int = 1,
                prefix: list[list[int]] | None = None, stopping: str = "exact", constraint=None,
                constraints: list[list[list[int]]] | None = None,
                pad: int = PAD, bos: int = BOS, eos: int = EOS) -> list[list[Hypothesis]]:
    """Search each sentence of ``src_tokens`` (B, S) (padded with ``pad``); returns, per sentence,
    its ``nbest`` (<= beam) best finished hypotheses, best first. ``min_len`` masks EOS until
    |Y| >= min_len (min_len = max length forces a fixed output length, for benchmarks).
    ``prefix[i]`` (target ids, no BOS/EOS): tokens every output of sentence i starts with.
    ``stopping``: "exact" (the paper's early termination) or "fast" (CTranslate2's rule).
    ``constraint``: see the module docstring (None: every token but PAD and BOS allowed).
    ``constraints[i]``: target phrases (lists of ids) output i must contain, searched with dynamic
    beam allocation (nmt.infer.constraints; not with ``prefix`` or ``constraint``)."""
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest={nbest}: must be between 1 and beam={beam}")
    if stopping not in STOPPING:
        raise ValueError(f"stopping={stopping!r}: must be one of {', '.join(STOPPING)}")
    k, n_src = beam, src_tokens.size(0)
    max_len = output_lengths(model, src_tokens, max_len_a=max_len_a, max_len_b=max_len_b, prefix=prefix,
                             pad=pad, bos=bos, eos=eos)
    memory = model.encode(src_tokens)
    device = src_tokens.device
    constrain = None if constraint is None else constraint(src_tokens)
    lexical = None
    if constraints is not None and any(constraints):  # hard lexical constraints (nmt.infer.constraints)
        if prefix is not None or constraint is not None:
            raise ValueError("constraints: not with a prefix or a constraint function")
        lexical = LexicalConstraints(constraints, beam=k, max_len=max_len, device=device, pad=pad, bos=bos, eos=eos)
    if k == 1 and alpha == 0 and lexical is None:  # greedy: the general step's choices without its bookkeeping
        return _greedy(model, memory, n_src, device=device, max_len=max_len, min_len=min_len, prefix=prefix,
                       constrain=constrain, pad=pad, bos=bos, eos=eos)
    first_memory = memory  # the first step's k rows of a sentence are all BOS: computed once (B rows)
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
        if t == 0:  # one row per sentence, its log-probabilities repeated for the k (equal) start rows
            logits, cache = model.decode_step(tokens[::k, -1:], first_memory, None)  # (B, 1, W)
            logp = F.log_softmax(logits[:, -1].float(), dim=-1).repeat_interleave(k, dim=0)  # (B*k, W)
            first_memory = None  # the beam's rows read ``memory`` from now on
        else:
            logits, cache = model.decode_step(tokens[:, -1:], memory, cache)
            logp = F.log_softmax(logits[:, -1].float(), dim=-1)  # (B*k, W)
        w = logp.size(-1)
        last = [t + 1 >= max_len[s] for s in alive]  # (B,) this step is the last allowed
        logp = mask_step(logp, t, alive=alive, rows_per_sentence=k, max_len=max_len, min_len=min_len,
                         prefix=prefix, pad=pad, bos=bos, eos=eos)  # forbidden choices -inf
        if constrain is not None:
            steps_left = torch.tensor([max_len[s] - t for s in alive], device=device).repeat_interleave(k)  # (B*k,)
            logp = constrain(logp, tokens, alive, k, steps_left)  # (B*k, W)
        if lexical is not None:  # EOS once every phrase is met; room kept for the phrases left
            logp = lexical.mask(logp, t=t, alive=alive)  # (B*k, W)
        # the 2k best extensions per sentence: summed log-prob, row in beam, token, its log-prob
        top_scores, top_beam, top_tok, top_logp = beam_topk(logp, scores, min(2 * k, k * w))  # (B, 2k) each
        if lexical is not None:  # the 2k candidates by dynamic beam allocation (Post & Vilar 2018)
            top_scores, top_beam, top_tok, top_logp = lexical.allocate(logp, scores, top_scores, top_beam, top_tok,
                                                                       top_logp)  # (B, 2k) each
        top_rows = top_beam + torch.arange(b, device=device)[:, None] * k  # (B, 2k) row in B*k
        is_eos = top_tok.eq(eos)
        # finished: EOS extensions ranked among the first k
        fin = (is_eos[:, :k] & top_scores[:, :k].gt(float("-inf"))).nonzero()  # (F, 2) sentence, rank
        if fin.numel():
            lp = length_penalty(t + 1, alpha)
            fin_rows = top_rows[fin[:, 0], fin[:, 1]]  # (F,)
            fin_tokens = tokens[fin_rows, 1:].tolist()
            fin_logp = top_logp[fin[:, 0], fin[:, 1], None]  # (F, 1) log p(EOS)
            fin_positional = torch.cat([pos_scores[fin_rows], fin_logp], dim=1).tolist()
            fin_total = top_scores[fin[:, 0], fin[:, 1]].tolist()
            for (i, _), toks, positional, total in zip(fin.tolist(), fin_tokens, fin_positional, fin_total):
                _add_finished(finished[alive[i]], Hypothesis(toks, total / lp, positional), k)
        # next active beam: the first k non-EOS extensions (stable order by rank)
        rank = torch.arange(top_scores.size(1), device=device).expand_as(top_scores)  # (B, 2k)
        sel = rank.masked_fill(is_eos, top_scores.size(1) * 2).sort(dim=1).indices[:, :k]  # (B, k)
        if t > 0 and k > 1:  # rows in slot order: a hypothesis's best child stays in its row
            sel = sel.gather(1, beam_slots(top_beam.gather(1, sel)))  # (B, k)
        scores = top_scores.gather(1, sel)  # (B, k)
        if lexical is not None:
            lexical.follow(sel)
        rows = top_rows.gather(1, sel).view(-1)  # (B*k,)
        new_tok = top_tok.gather(1, sel).view(-1)  # (B*k,)
        new_logp = top_logp.gather(1, sel).view(-1)  # (B*k,)
        # which sentences are done
        best_active = scores.max(dim=1).values.tolist()  # (B,)
        top_eos = is_eos[:, 0].tolist() if stopping == "fast" else None  # (B,) best extension is EOS
        keep = []
        for i, s in enumerate(alive):
            done = last[i] or best_active[i] == float("-inf")
            if not done and stopping == "fast" and len(finished[s]) >= nbest:
                done = top_eos[i] or len(finished[s]) >= k
            elif not done and stopping == "exact" and len(finished[s]) >= nbest:
                bound = max_score_bound(best_active[i], t + 1, max_len[s], alpha)
                done = bound <= finished[s][nbest - 1].score
            if not done:
                keep.append(i)
        if not keep:
            break
        tokens = torch.cat([tokens[rows], new_tok[:, None]], dim=1)  # (B*k, 2+t)
        pos_scores = torch.cat([pos_scores[rows], new_logp[:, None]], dim=1)  # (B*k, 1+t)
        if len(keep) < b:  # drop finished sentences: keep their k rows only
            keep = fill_from_end(keep, b)  # the last sentences move into the gaps; the others stay
            keep_t = torch.tensor(keep, device=device)
            kept_rows = (keep_t[:, None] * k + torch.arange(k, device=device)).view(-1)  # (B'*k,)
            rows, tokens, pos_scores = rows[kept_rows], tokens[kept_rows], pos_scores[kept_rows]
            scores = scores[keep_t]  # (B', k)
            if lexical is not None:
                lexical.keep(keep_t)
            memory = reorder_owned(memory, rows)  # rows of one sentence share its memory
            alive = [alive[i] for i in keep]
        if t == 0:  # the cache holds one row per sentence: row i*k+j of the beam is its row i
            cache = cache.reorder(torch.div(rows, k, rounding_mode="floor"))
        elif k > 1 or len(keep) < b:  # with one hypothesis per sentence, rows only change by dropping
            cache = reorder_owned(cache, rows)
    return [f[:nbest] for f in finished]


def _greedy(model, memory, n_src: int, *, device: torch.device, max_len: list[int], min_len: int,
            prefix, constrain, pad: int, bos: int, eos: int) -> list[list[Hypothesis]]:
    """beam_search with k=1, alpha=0: each step takes the most probable allowed token; a sentence
    ends with EOS, or without output where every token is forbidden. With one hypothesis and no
    length penalty, the exact rule stops exactly there (a finished hypothesis scores no lower than
    any extension of the other choices)."""
    alive = list(range(n_src))
    tokens = torch.full((n_src, 1), bos, dtype=torch.long, device=device)  # (B, 1+t)
    pos_scores = torch.zeros(n_src, 0, device=device)  # (B, t)
    finished: list[list[Hypothesis]] = [[] for _ in range(n_src)]
    cache = None
    for t in range(max(max_len)):
        logits, cache = model.decode_step(tokens[:, -1:], memory, cache)
        logp = mask_step(F.log_softmax(logits[:, -1].float(), dim=-1), t, alive=alive, rows_per_sentence=1,
                         max_len=max_len, min_len=min_len, prefix=prefix, pad=pad, bos=bos, eos=eos)  # (B, W)
        if constrain is not None:
            steps_left = torch.tensor([max_len[s] - t for s in alive], device=device)  # (B,)
            logp = constrain(logp, tokens, alive, 1, steps_left)
        new_logp, new_tok = row_topk(logp, 1)  # (B, 1) each
        ended = (new_tok.squeeze(1).eq(eos) | new_logp.squeeze(1).isneginf()).tolist()  # (B,)
        done, state = _extend_single(tokens, pos_scores, memory, cache, alive, new_tok, new_logp, ended)
        for s, hyp in done:
            finished[s].append(hyp)
        if state is None:
            break
        tokens, pos_scores, memory, cache, alive = state
    return finished


def _extend_single(tokens: Tensor, pos_scores: Tensor, memory, cache, alive: list[int], new_tok: Tensor,
                   new_logp: Tensor, ended: list[bool]):
    """One hypothesis per sentence (greedy, sampling): append the chosen tokens ``new_tok`` (B, 1)
    and their log-probabilities ``new_logp`` (B, 1); rows with ``ended`` stop, and become a
    finished (sentence, Hypothesis) unless their last choice was impossible (-inf: every token
    forbidden). Returns those and the state (tokens, pos_scores, memory, cache, alive) of the rows
    that go on, or None when none does."""
    tokens = torch.cat([tokens, new_tok], dim=1)  # (B, 2+t)
    pos_scores = torch.cat([pos_scores, new_logp], dim=1)  # (B, 1+t)
    done = []
    for i in (i for i, e in enumerate(ended) if e):
        positional = pos_scores[i].tolist()
        if positional[-1] != float("-inf"):
            done.append((alive[i], Hypothesis(tokens[i, 1:-1].tolist(), sum(positional), positional)))
    keep = [i for i, e in enumerate(ended) if not e]
    if not keep:
        return done, None
    if len(keep) < len(alive):
        keep = fill_from_end(keep, len(alive))  # the last rows move into the gaps
        rows = torch.tensor(keep, device=tokens.device)
        tokens, pos_scores = tokens[rows], pos_scores[rows]
        memory, cache = reorder_owned(memory, rows), reorder_owned(cache, rows)
        alive = [alive[i] for i in keep]
    return done, (tokens, pos_scores, memory, cache, alive)


def greedy_search(model, src_tokens: Tensor, *, max_len_a: float = 1.0, max_len_b: int = 50,
                  min_len: int = 1) -> list[Hypothesis]:
    """Greedy search: beam_search with beam=1, alpha=0 (argmax each step until EOS)."""
    hyps = beam_search(model, src_tokens, beam=1, alpha=0.0, max_len_a=max_len_a,
                       max_len_b=max_len_b, min_len=min_len)
    return [h[0] for h in hyps]


def sentence_rng(seed: int, index: int) -> random.Random:
    """The random stream of sentence ``index`` under ``seed`` (independent of batching)."""
    return random.Random(f"nmt-sample:{seed}:{index}")


def filter_probs(probs: Tensor, *, topk: int = 0, topp: float = 1.0) -> Tensor:
    """probs (N, W) with all but the ``topk`` most probable tokens (0: all; ties with the k-th
    stay) and all but the smallest most-probable set reaching probability ``topp`` (nucleus,
    Holtzman et al. 2020) set to 0; not renormalised."""
    if 0 < topk < probs.size(-1):
        kth = probs.topk(topk, dim=-1).values[:, -1:]  # (N, 1) the k-th largest
        probs = probs.masked_fill(probs < kth, 0.0)
    if topp < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)  # (N, W), ties: lower id first
        total = sorted_p.sum(dim=-1, keepdim=True)  # (N, 1)
        before = sorted_p.cumsum(dim=-1) - sorted_p  # (N, W) mass of the more probable tokens
        drop = before >= topp * total  # the set already reached topp without this token
        probs = probs.scatter(1, order, sorted_p.masked_fill(drop, 0.0))
    return probs


@torch.inference_mode()
def sample(model, src_tokens: Tensor, *, rngs: list[random.Random], temperature: float = 1.0,
           topk: int = 0, topp: float = 1.0, max_len_a: float = 1.0, max_len_b: int = 50,
           min_len: int = 1, prefix: list[list[int]] | None = None,
           pad: int = PAD, bos: int = BOS, eos: int = EOS) -> list[Hypothesis]:
    """One sampled output per sentence of ``src_tokens`` (B, S); sentence i draws its tokens with
    ``rngs[i]`` (see ``sentence_rng``) by inverting the cumulative distribution. Length limits,
    PAD/BOS and ``prefix`` as in beam_search; ``score`` is the model's log-probability."""
    if temperature <= 0 or topk < 0 or not 0 < topp <= 1:
        raise ValueError(f"temperature={temperature}, topk={topk}, topp={topp}: need T > 0, "
                         "topk >= 0 (0: all), 0 < topp <= 1")
    n_src, device = src_tokens.size(0), src_tokens.device
    max_len = output_lengths(model, src_tokens, max_len_a=max_len_a, max_len_b=max_len_b, prefix=prefix,
                             pad=pad, bos=bos, eos=eos)
    memory = model.encode(src_tokens)
    alive = list(range(n_src))
    tokens = torch.full((n_src, 1), bos, dtype=torch.long, device=device)  # (B, 1+t)
    pos_scores = torch.zeros(n_src, 0, device=device)  # (B, t)
    out: list[Hypothesis | None] = [None] * n_src
    cache = None
    for t in range(max(max_len)):
        logits, cache = model.decode_step(tokens[:, -1:], memory, cache)
        logp = mask_step(F.log_softmax(logits[:, -1].float(), dim=-1), t, alive=alive, rows_per_sentence=1,
                         max_len=max_len, min_len=min_len, prefix=prefix, pad=pad, bos=bos, eos=eos)
        probs = F.softmax(logp / temperature, dim=-1)  # (B, W) = softmax(logits / T) where allowed
        probs = filter_probs(probs, topk=topk, topp=topp)
        cdf = probs.cumsum(dim=-1)  # (B, W)
        u = torch.tensor([1.0 - rngs[s].random() for s in alive], device=device)  # (B,) in (0, 1]
        new_tok = (cdf < (u * cdf[:, -1])[:, None]).sum(dim=-1).clamp(max=cdf.size(-1) - 1)  # (B,)
        new_logp = logp.gather(1, new_tok[:, None])  # (B, 1)
        done, state = _extend_single(tokens, pos_scores, memory, cache, alive, new_tok[:, None], new_logp,
                                     new_tok.eq(eos).tolist())
        for s, hyp in done:
            out[s] = hyp
        if state is None:
            break
        tokens, pos_scores, memory, cache, alive = state
    return out


class Ensemble:
    """Several models searched as one: per step, the mean of their log-probabilities (the search
    renormalises it with log_softmax). They must share the target vocabulary; the caller checks
    that it is the same vocabulary (translate.Translator compares the SentencePiece models)."""

    @dataclass
    class Cfg:
        max_positions: int
        tgt_vocab_size: int
        right_to_left: bool = False

    @dataclass
    class State:
        parts: list  # one memory or cache per model

        def reorder(self, indices: Tensor) -> "Ensemble.State":
            return Ensemble.State([p.reorder(indices) for p in self.parts])

        def reorder_(self, indices: Tensor) -> "Ensemble.State":
            return Ensemble.State([reorder_owned(p, indices) for p in self.parts])

    def __init__(self, models: list):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        sizes = {m.cfg.tgt_vocab_size for m in models}
        if len(sizes) > 1:
            raise ValueError(f"ensemble models have different target vocabulary sizes {sorted(sizes)}")
        directions = {right_to_left(m) for m in models}
        if len(directions) > 1:
            raise ValueError("an ensemble's models must write the target in one direction: some are "
                             "right-to-left (model.right_to_left); rescore with them instead (--rerank)")
        self.models = models
        self.cfg = Ensemble.Cfg(min(m.cfg.max_positions for m in models), sizes.pop(), directions.pop())

    def encode(self, src_tokens: Tensor) -> "Ensemble.State":
        return Ensemble.State([m.encode(src_tokens) for m in self.models])

    def decode_step(self, tgt_tokens: Tensor, memory: "Ensemble.State", cache: "Ensemble.State | None" = None):
        """-> mean over models of log_softmax(logits) (N, T, W), the models' new caches."""
        logps, caches = [], []
        for i, m in enumerate(self.models):
            logits, c = m.decode_step(tgt_tokens, memory.parts[i], None if cache is None else cache.parts[i])
            logps.append(F.log_softmax(logits.float(), dim=-1))
            caches.append(c)
        return torch.stack(logps).mean(dim=0), Ensemble.State(caches)


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
