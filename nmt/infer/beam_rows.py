"""The beam's rows: what beam search keeps per active hypothesis, and how it saves row copies.

``Beams`` holds k rows per sentence still searching (tokens, log-probabilities, scores) and the
model's memory and cache of every row; ``beam_search`` (nmt.infer.search) asks it for the next
log-probabilities and hands it the next beam. The ways it saves copies (one row per sentence at
the first step, children in their parents' rows, in-place reorders, finished sentences leaving
from the end) never change a result (tests/test_search.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..vocab import BOS
from .constraints import LexicalConstraints
from .topk import Candidates


@dataclass
class Beams:
    """The active hypotheses of the sentences still searching: k rows per sentence (rows
    i*k..(i+1)*k-1 hold sentence ``alive[i]``) and the model's memory and cache of every row.

    Three ways to save row copies, none of which changes a result (tests/test_search.py):
      * the first step decodes one row per sentence (its k start rows all hold BOS) and repeats
        its log-probabilities; the cache is then spread to the k rows (``log_probs``, ``advance``);
      * a hypothesis's best child stays in its row (``advance``, ``beam_slots``), and the memory
        and cache are reordered in place where they can be (``reorder_owned``: nmt.cache's
        DecoderCache and EncoderOut copy only the rows that change);
      * finished sentences leave the batch, the last sentences moving into their gaps
        (``drop``, ``fill_from_end``)."""

    k: int
    alive: list[int]  # original index of each sentence still searching
    scores: Tensor  # (B, k) summed log-probabilities (-inf: an empty row)
    tokens: Tensor  # (B*k, 1+t) BOS, then the tokens generated
    pos_scores: Tensor  # (B*k, t) the log-probability of each generated token
    memory: object  # the encoder output, one row per beam row (B*k)
    first_memory: object  # the encoder output, one row per sentence (B): the first step's (then None)
    lexical: LexicalConstraints | None = None  # the rows' constraint progress (nmt.infer.constraints)
    cache: object = None  # the decoder's keys and values (None before the first step)

    @classmethod
    def start(
        cls, memory, n_src: int, k: int, *, device: torch.device, lexical: LexicalConstraints | None = None
    ) -> "Beams":
        """One start hypothesis (BOS, score 0) per sentence; its other k-1 rows are placeholders
        (score -inf)."""
        rows = memory.reorder(torch.arange(n_src, device=device).repeat_interleave(k))  # rows (B*k)
        scores = torch.full((n_src, k), float("-inf"), device=device)  # (B, k)
        scores[:, 0] = 0.0
        tokens = torch.full((n_src * k, 1), BOS, dtype=torch.long, device=device)  # (B*k, 1)
        return cls(
            k,
            list(range(n_src)),
            scores,
            tokens,
            torch.zeros(n_src * k, 0, device=device),
            rows,
            memory,
            lexical,
        )

    def log_probs(self, model) -> Tensor:
        """log p(next token) (B*k, W) of every row; the cache extended by one token."""
        if self.first_memory is not None:  # one row per sentence, its log-probabilities repeated k times
            bos = self.tokens[:: self.k, -1:]  # (B, 1)
            logits, self.cache = model.decode_step(bos, self.first_memory, None)  # (B, 1, W)
            self.first_memory = None  # the beam's rows read ``memory`` from now on
            return F.log_softmax(logits[:, -1].float(), dim=-1).repeat_interleave(self.k, dim=0)  # (B*k, W)
        logits, self.cache = model.decode_step(self.tokens[:, -1:], self.memory, self.cache)  # (B*k, 1, W)
        return F.log_softmax(logits[:, -1].float(), dim=-1)  # (B*k, W)

    def advance(self, top: Candidates, sel: Tensor, scores: Tensor, going: list[int]) -> None:
        """The next active beam: the candidates of ranks ``sel`` (B, k) among ``top``, with summed
        log-probabilities ``scores`` (B, k); only the sentences at positions ``going`` stay."""
        b, k, first = len(self.alive), self.k, self.tokens.size(1) == 1  # first: the cache has B rows
        if not first and k > 1:  # rows in slot order: a hypothesis's best child stays in its row
            slots = beam_slots(top.beam.gather(1, sel))  # (B, k)
            sel, scores = sel.gather(1, slots), scores.gather(1, slots)  # (B, k) each
        rows = (top.beam + torch.arange(b, device=sel.device)[:, None] * k).gather(1, sel).view(-1)  # (B*k,)
        new_tok, new_logp = (
            top.token.gather(1, sel).view(-1, 1),
            top.logp.gather(1, sel).view(-1, 1),
        )  # (B*k, 1)
        self.tokens = torch.cat([self.tokens[rows], new_tok], dim=1)  # (B*k, 2+t)
        self.pos_scores = torch.cat([self.pos_scores[rows], new_logp], dim=1)  # (B*k, 1+t)
        self.scores = scores
        if self.lexical is not None:
            self.lexical.follow(sel)
        if len(going) < b:
            rows = self.drop(rows, going)
        if first:  # the cache holds one row per sentence: row i*k+j of the beam is its row i
            self.cache = self.cache.reorder(torch.div(rows, k, rounding_mode="floor"))
        elif len(going) < b:
            self.cache = reorder_owned(self.cache, rows)
        elif k > 1:  # rows move within their sentence's only (one row each: only dropping moves rows)
            self.cache = reorder_owned(self.cache, rows, beams_only=True)

    def drop(self, rows: Tensor, going: list[int]) -> Tensor:
        """Keep the k rows of the sentences at positions ``going`` (ascending) only, the last ones
        moved into the gaps (``fill_from_end``); returns ``rows`` (the new rows' parents) for them."""
        keep = fill_from_end(going, len(self.alive))  # the last sentences move into the gaps; the others stay
        keep_t = torch.tensor(keep, device=rows.device)
        kept_rows = (keep_t[:, None] * self.k + torch.arange(self.k, device=rows.device)).view(-1)  # (B'*k,)
        rows, self.tokens = rows[kept_rows], self.tokens[kept_rows]  # (B'*k,), (B'*k, 2+t)
        self.pos_scores = self.pos_scores[kept_rows]  # (B'*k, 1+t)
        self.scores = self.scores[keep_t]  # (B', k)
        if self.lexical is not None:
            self.lexical.keep(keep_t)
        self.memory = reorder_owned(self.memory, rows)  # rows of one sentence share its memory
        self.alive = [self.alive[i] for i in keep]
        return rows


# a beam of at most this many rows (B * k) is placed by a loop over plain lists: fewer operations
# than the vectorised placement's ~25, which cost more than the loop on a small beam
SLOTS_LOOP_MAX = 64


def beam_slots(parent: Tensor, loop_max: int = SLOTS_LOOP_MAX) -> Tensor:
    """Where the next beam's hypotheses go so that few cache rows move. ``parent`` (B, k): the
    beam row (0..k-1) each new hypothesis extends, best first. The best child of a row stays in
    that row; the other children take, best first, the rows left free (ascending). Returns
    ``order`` (B, k): order[i, r] = the rank of the hypothesis placed in row r (a permutation).
    At most ``loop_max`` rows: placed by a loop (``slots_of``), the same permutation."""
    if parent.numel() <= loop_max:
        return torch.tensor(
            [slots_of(row) for row in parent.tolist()], dtype=torch.long, device=parent.device
        )
    b, k = parent.shape
    ranks = torch.arange(k, device=parent.device)  # (k,)
    same = parent[:, :, None].eq(parent[:, None, :])  # (B, k, k) [i, j, j']: j and j' share a parent
    first = ~(same & ranks[None, :].lt(ranks[:, None])[None]).any(dim=2)  # (B, k) no better sibling
    taken = (parent[:, :, None].eq(ranks) & first[:, :, None]).any(dim=1)  # (B, k) row r keeps a child
    free = taken.to(torch.int8).sort(dim=1, stable=True).indices  # (B, k) free rows first, ascending
    nth_other = ((~first).cumsum(dim=1) - 1).clamp(min=0)  # (B, k) index among the non-first children
    slot = torch.where(first, parent, free.gather(1, nth_other))  # (B, k) row of each rank
    return torch.empty_like(slot).scatter_(1, slot, ranks.expand(b, k))  # (B, k) rank of each row


def slots_of(parents: list[int]) -> list[int]:
    """``beam_slots`` of one sentence: ``parents`` (k,) best first -> the rank placed in each row."""
    k = len(parents)
    row_of: list[int | None] = [None] * k  # the row of each rank
    for rank, p in enumerate(parents):
        if p not in row_of:  # the best child of row p stays in it
            row_of[rank] = p
    free = iter(r for r in range(k) if r not in row_of)  # rows left free, ascending
    row_of = [next(free) if r is None else r for r in row_of]  # the other children, best first
    order = [0] * k
    for rank, r in enumerate(row_of):
        order[r] = rank
    return order


def fill_from_end(keep: list[int], b: int) -> list[int]:
    """The sentences (positions 0..b-1) ``keep`` (ascending) in a new order where every kept
    sentence before position len(keep) stays in place and the last ones fill the gaps: dropping
    sentences moves as few cache rows as there are gaps to fill, not every row after the first gap."""
    n, kept = len(keep), set(keep)
    tail = [i for i in keep if i >= n]  # kept sentences past the new end
    return [i if i in kept else tail.pop() for i in range(n)]


def reorder_owned(state, rows: Tensor, *, beams_only: bool = False):
    """``state.reorder(rows)`` (a cache or a memory) where the search will not use ``state``
    again: its in-place ``reorder_`` when it has one (nmt.model.DecoderCache, EncoderOut: only
    the rows that change are copied); ``beams_only``: each row takes a row of its own sentence,
    ``reorder_beams_`` where the state has it (nmt.cache.DecoderCache: the memory part stays)."""
    if beams_only and hasattr(state, "reorder_beams_"):
        return state.reorder_beams_(rows)
    return state.reorder_(rows) if hasattr(state, "reorder_") else state.reorder(rows)
