"""Hard lexical constraints (terminology): target phrases that every output must contain, searched
with dynamic beam allocation (Post & Vilar, 2018, "Fast Lexically Constrained Decoding with Dynamic
Beam Allocation"), as fairseq (search.py LexicallyConstrainedBeamSearch,
token_generation_constraints.py) and Sockeye (lexical_constraints.py) do.
nmt.infer.search.beam_search uses it when given ``constraints``; its search is otherwise unchanged
(the beam's length penalty, early termination, n-best). beam_search's ``allowed_tokens`` (a token
mask per step, e.g. the parser's well-formed trees) is another thing, not taken together with these.

Axis legend: B sentences still searching, k beam size, N = B*k beam rows, W vocabulary,
C candidates per sentence, M constraint tokens of a sentence (padded to the batch's largest).

Definitions (pinned by tests/test_constraints.py):
  * A sentence's constraints are phrases, each a non-empty list of target ids (no PAD, BOS or EOS),
    met in any order; a phrase given twice must appear twice. An output meets them when its tokens
    hold every phrase contiguously, the phrases at places that do not overlap.
  * The progress of a hypothesis: the phrases it has met and ``s``, the longest suffix of its
    tokens since the last phrase it met that starts an unmet phrase. After a token x the new ``s``
    is the longest suffix of s + [x] that is a prefix of (or all of) an unmet phrase; when it is
    all of one, that phrase is met (the first unmet one with those ids) and ``s`` becomes empty.
    A phrase is counted as met only where it appears, and is never un-met.
  * bank = the tokens of the met phrases + len(s): the constraint tokens produced (the banks of
    fairseq and Sockeye); need = (tokens of all phrases) - bank: a token raises the bank by at most
    one, and the next token of the phrase ``s`` starts (or the first token of an unmet phrase)
    raises it by exactly one, so ``need`` is the fewest tokens that can still meet every phrase.
  * Masks, on top of the search's own: EOS only when need = 0; a token after which need' + 1
    (the phrases left, then EOS) no longer fits the steps left is forbidden. When the phrases and
    EOS fit the maximum output length at the start, a hypothesis can therefore always still meet
    them, and every finished hypothesis meets them all (when they do not fit: ValueError).
  * Dynamic beam allocation, each step: the candidates are the 2k best extensions (those of the
    unconstrained search), each beam row's best token, and each row's constraint tokens
    (fairseq's three sources); duplicates are dropped; each goes to the bank of its new progress.
    They are ordered round-robin over the banks from the highest: the best of each bank from the
    highest bank down to bank 0, then the second best of each, and so on (fairseq's stripes;
    Sockeye splits the beam evenly and gives the remainder to the highest bank). The first 2k are
    handed back to the search, which takes, as always, EOS extensions among the first k as
    finished and the first k others as the next beam.
  * Phrases are matched as target pieces, as in fairseq and Sockeye: a phrase encoded alone
    starts a word, but the output's word may go on after its last piece ("Boston" in
    "Bostoniger"); on Multi30k test2016 1.6% of the phrases were met that way
    (benchmarks/constraints.py).
  * A sentence without constraints has one bank: its candidates are ordered by score with the 2k
    best first, in beam_topk's order, so its search is the unconstrained one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..data.lines import clean_line
from ..vocab import BOS, EOS, PAD, UNK

_FAR = 1 << 30  # ``need`` of a padding entry in a row's constraint tokens: never allowed


def fit_problem(phrases: list[list[int]], max_len: int) -> str | None:
    """Why one sentence's ``phrases`` (lists of target ids) cannot be searched for within outputs of
    at most ``max_len`` tokens (EOS included), or None when they can."""
    for phrase in phrases:
        if not phrase:
            return "a constraint phrase is empty"
        if set(phrase) & {PAD, BOS, EOS}:
            return f"a constraint phrase may not hold PAD, BOS or EOS ({list(phrase)})"
    total = sum(map(len, phrases))
    if total + 1 > max_len:
        return (
            f"the constraints need {total} tokens and EOS, more than the maximum output length "
            f"{max_len} (max_len_a * |x| + max_len_b, at most the model's max_positions)"
        )
    return None


def encode_constraints(
    sp, constraints, *, max_len: list[int], right_to_left: bool = False
) -> list[list[list[int]]]:
    """Each sentence's constraint phrases (text) as target ids in the model's order, for
    beam_search: ``constraints[i]`` is a list of str (blank phrases are skipped); each phrase is
    encoded alone with the SentencePiece model ``sp``, as a word starting where it stands in the
    output. ``max_len[i]``: sentence i's maximum output length (0: an empty sentence).
    TypeError for a wrong type; ValueError naming the line (from 1) for a phrase with characters
    the vocabulary lacks, or phrases that cannot fit."""
    if not isinstance(constraints, (list, tuple)):
        raise TypeError(
            f"constraints: expected a list (one list of phrases per sentence), got "
            f"{type(constraints).__name__}"
        )
    if len(constraints) != len(max_len):
        raise ValueError(f"{len(constraints)} constraint lists for {len(max_len)} sentences")
    out = []
    for i, phrases in enumerate(constraints):
        if not isinstance(phrases, (list, tuple)) or not all(isinstance(p, str) for p in phrases):
            raise TypeError(f"constraints of sentence {i + 1}: expected a list of str, got {phrases!r}")
        texts = [t for t in (clean_line(p) for p in phrases) if t]
        ids = [list(x) for x in sp.encode(texts)] if texts else []
        for text, x in zip(texts, ids):
            if UNK in x:
                raise ValueError(
                    f"line {i + 1}: constraint {text!r} holds characters the vocabulary does not "
                    f"have (they would be written as <unk>)"
                )
        if ids and max_len[i] == 0:
            raise ValueError(
                f"line {i + 1}: the sentence is empty (translated to nothing): its constraints cannot be met"
            )
        problem = fit_problem(ids, max_len[i]) if ids else None
        if problem:
            raise ValueError(f"line {i + 1}: {problem}")
        out.append([x[::-1] for x in ids] if right_to_left else ids)
    return out


def row_argmax(x: Tensor, block: int = 64) -> Tensor:
    """x.argmax(dim=1) of x (N, W) (the first column of each row's maximum), by way of the maxima
    of blocks of ``block`` columns: PyTorch's CPU argmax is slower than a maximum."""
    n, w = x.shape
    n_blocks = w // block
    if n_blocks < 2:
        return x.argmax(dim=1)
    main = x[:, : n_blocks * block].view(n, n_blocks, block)  # (N, W // block, block)
    block_max = main.amax(dim=2)  # (N, W // block)
    blk = block_max.argmax(dim=1)  # (N,) the first block holding the maximum
    best = blk * block + main[torch.arange(n, device=x.device), blk].argmax(dim=1)  # (N,)
    if w > n_blocks * block:  # the last W % block columns: only a larger value comes first
        tail_max, tail_col = x[:, n_blocks * block :].max(dim=1)  # (N,) each
        best = torch.where(
            tail_max > block_max.gather(1, blk[:, None]).squeeze(1), n_blocks * block + tail_col, best
        )
    return best


class LexicalConstraints:
    """The constraint progress of every beam row of one beam_search call, and the dynamic beam
    allocation (see the module docstring). Progress states are numbered as they are first reached;
    a state's transitions (for the sentence's constraint tokens; any other token leaves the met
    phrases and empties ``s``) are worked out when a beam row first holds it."""

    def __init__(
        self, constraints: list[list[list[int]]], *, beam: int, max_len: list[int], device: torch.device
    ):
        if len(constraints) != len(max_len):
            raise ValueError(f"{len(constraints)} constraint lists for {len(max_len)} sentences")
        for i, phrases in enumerate(constraints):
            problem = fit_problem(phrases, max_len[i])
            if problem:
                raise ValueError(f"sentence {i}: {problem}")
        self.beam, self.max_len, self.device = beam, max_len, device
        self.phrases = [[tuple(p) for p in phrases] for phrases in constraints]
        self.totals = [sum(map(len, p)) for p in self.phrases]
        self.top_bank = max(self.totals, default=0)
        self.tokens = [sorted({x for p in phrases for x in p}) for phrases in self.phrases]
        self.m = max(1, max(map(len, self.tokens), default=0))
        self.ids: dict[tuple, int] = {}  # (sentence, met, s) -> state
        self.keys: list[tuple] = []  # state -> (sentence, met, s)
        self.expanded: set[int] = set()  # states whose moves are in per_token / per_state
        self.per_token = torch.zeros(
            0, 4, self.m, dtype=torch.long, device=device
        )  # (states, 4, M) see _moves
        self.per_state = torch.zeros(0, 4, dtype=torch.long, device=device)  # (states, 4)
        roots = [self._state(i, (False,) * len(p), ()) for i, p in enumerate(self.phrases)]
        self.rows = torch.tensor(roots, device=device).repeat_interleave(beam)  # (N,) state of each row
        self.table: dict[str, Tensor] | None = None  # the rows' tables for this step
        self.next_state: Tensor | None = None  # (B, 2k) state of each candidate handed back

    # ------------------------------------------------------------------ progress (one sentence)
    def _state(self, sentence: int, met: tuple, s: tuple) -> int:
        key = (sentence, met, s)
        if key not in self.ids:
            self.ids[key] = len(self.keys)
            self.keys.append(key)
        return self.ids[key]

    def _advance(self, sentence: int, met: tuple, s: tuple, x: int) -> tuple[tuple, tuple]:
        """(met, s) after token x (see the module docstring)."""
        phrases = self.phrases[sentence]
        s2 = s + (x,)
        for i in range(len(s2)):  # the longest suffix first
            suffix = s2[i:]
            for j, p in enumerate(phrases):
                if not met[j] and p == suffix:
                    return met[:j] + (True,) + met[j + 1 :], ()
            if any(
                not met[j] and len(p) > len(suffix) and p[: len(suffix)] == suffix
                for j, p in enumerate(phrases)
            ):
                return met, suffix
        return met, ()

    def _bank(self, sentence: int, met: tuple, s: tuple) -> int:
        return sum(len(p) for p, m in zip(self.phrases[sentence], met) if m) + len(s)

    def _moves(self, state: int) -> tuple[list[list[int]], list[int]]:
        """([tokens, their next states, their next needs, their next banks] (4, M),
        [need, the others' next state, its need, its bank]) of ``state``; padded with PAD (never
        allowed: its need is _FAR)."""
        sentence, met, s = self.keys[state]
        total, tokens = self.totals[sentence], self.tokens[sentence]
        nxt, banks = [], []
        for x in tokens:
            met2, s2 = self._advance(sentence, met, s, x)
            nxt.append(self._state(sentence, met2, s2))
            banks.append(self._bank(sentence, met2, s2))
        pad = self.m - len(tokens)
        other_bank = self._bank(sentence, met, ())
        return (
            [
                tokens + [PAD] * pad,
                nxt + [state] * pad,
                [total - b for b in banks] + [_FAR] * pad,
                banks + [0] * pad,
            ],
            [
                total - self._bank(sentence, met, s),
                self._state(sentence, met, ()),
                total - other_bank,
                other_bank,
            ],
        )

    def _table(self) -> dict[str, Tensor]:
        """The constraint tables of the beam rows this step (cached until the rows change); each
        state's moves are worked out once, when a row first holds it, and kept by state."""
        if self.table is None:
            new = sorted(set(self.rows.tolist()) - self.expanded)
            moves = [self._moves(state) for state in new]  # may number new states
            grow = len(self.keys) - self.per_state.size(0)
            if grow > 0:
                self.per_token = torch.cat([self.per_token, self.per_token.new_zeros(grow, 4, self.m)])
                self.per_state = torch.cat([self.per_state, self.per_state.new_zeros(grow, 4)])
            if new:
                at = torch.tensor(new, device=self.device)
                self.per_token[at] = torch.tensor([m[0] for m in moves], device=self.device)  # (new, 4, M)
                self.per_state[at] = torch.tensor([m[1] for m in moves], device=self.device)  # (new, 4)
                self.expanded.update(new)
            per_token, per_state = self.per_token[self.rows], self.per_state[self.rows]  # (N, 4, M), (N, 4)
            self.table = dict(
                tok=per_token[:, 0],
                nxt=per_token[:, 1],
                nxt_need=per_token[:, 2],
                nxt_bank=per_token[:, 3],
                need=per_state[:, 0],
                other=per_state[:, 1],
                other_need=per_state[:, 2],
                other_bank=per_state[:, 3],
            )
        return self.table

    # ------------------------------------------------------------------ the search's hooks
    def mask(self, logp: Tensor, *, t: int, alive: list[int]) -> Tensor:
        """``logp`` (N, W) of step t (making token t+1) with EOS forbidden until every phrase is met,
        and the tokens that would leave too few steps for the phrases left forbidden."""
        tab, k = self._table(), self.beam
        steps_left = torch.tensor([self.max_len[s] - t for s in alive], device=logp.device).repeat_interleave(
            k
        )  # (N,)
        logp[:, EOS] = logp[:, EOS].masked_fill(tab["need"].gt(0), float("-inf"))
        tight = (tab["other_need"] + 2).gt(
            steps_left
        )  # (N,) a token outside the phrases leaves too few steps
        if bool(tight.any()):
            fits = (tab["nxt_need"] + 2).le(steps_left[:, None])  # (N, M) room left after this token
            kept = logp.gather(1, tab["tok"]).masked_fill(~fits, float("-inf"))  # (N, M)
            only = torch.full_like(logp, float("-inf")).scatter_(1, tab["tok"], kept)  # (N, W)
            only[:, EOS] = logp[:, EOS]
            logp = torch.where(tight[:, None], only, logp)
        return logp

    def allocate(
        self,
        logp: Tensor,
        scores: Tensor,
        top_scores: Tensor,
        top_beam: Tensor,
        top_tok: Tensor,
        top_logp: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Dynamic beam allocation: from ``logp`` (N, W) (masked), the rows' summed log-probabilities
        ``scores`` (B, k) and beam_topk's n = 2k best extensions (B, n) each, the n candidates in
        round-robin bank order (see the module docstring), as (summed log-prob, row in beam, token,
        token log-prob) (B, n) each; places left empty are -inf (token PAD)."""
        tab, k, m = self._table(), self.beam, self.m
        b, n = top_scores.shape
        device = logp.device
        ranks = torch.arange(k, device=device)
        cand_beam = torch.cat(
            [top_beam, ranks.expand(b, k), ranks.repeat_interleave(m).expand(b, k * m)], dim=1
        )  # (B, C)
        cand_tok = torch.cat(
            [top_tok, row_argmax(logp).view(b, k), tab["tok"].reshape(b, k * m)], dim=1
        )  # (B, C)
        cand_row = cand_beam + torch.arange(b, device=device)[:, None] * k  # (B, C) row in N
        cand_logp = logp[cand_row, cand_tok]  # (B, C)
        cand_score = torch.cat(
            [top_scores, scores.gather(1, cand_beam[:, n:]) + cand_logp[:, n:]], dim=1
        )  # (B, C)
        cand_logp = torch.cat([top_logp, cand_logp[:, n:]], dim=1)  # (B, C)
        # each candidate's new progress: its token's move in its row's table, or the others' move
        match = tab["tok"][cand_row].eq(cand_tok[:, :, None])  # (B, C, M)
        hit, j = match.any(dim=2), match.to(torch.uint8).argmax(dim=2, keepdim=True)  # (B, C), (B, C, 1)
        nxt = torch.where(hit, tab["nxt"][cand_row].gather(2, j).squeeze(2), tab["other"][cand_row])  # (B, C)
        bank = torch.where(
            hit, tab["nxt_bank"][cand_row].gather(2, j).squeeze(2), tab["other_bank"][cand_row]
        )  # (B, C)
        c = cand_tok.size(1)
        earlier = torch.ones(c, c, dtype=torch.bool, device=device).tril(-1)  # (C, C) [i, j]: j before i
        key = cand_row * logp.size(1) + cand_tok  # (B, C) one number per (row, token)
        dup = (key[:, :, None].eq(key[:, None, :]) & earlier).any(dim=2)  # (B, C) seen before
        valid = cand_score.gt(float("-inf")) & ~dup  # (B, C)
        # rank in its bank: the valid candidates of its bank scoring higher (or equal and earlier)
        same_bank = bank[:, :, None].eq(bank[:, None, :]) & valid[:, None, :]  # (B, C, C)
        higher = cand_score[:, None, :].gt(cand_score[:, :, None])  # (B, C, C) [i, j]: j scores higher
        tie = cand_score[:, None, :].eq(cand_score[:, :, None]) & earlier
        rank = (same_bank & (higher | tie)).sum(dim=2)  # (B, C)
        stripe = rank * (self.top_bank + 2) + (
            self.top_bank - bank
        )  # (B, C) rank-th stripe, highest bank first
        stripe = stripe.masked_fill(~valid, _FAR)
        order = stripe.sort(dim=1, stable=True).indices[:, :n]  # (B, n)
        ok = valid.gather(1, order)  # (B, n)
        self.next_state = nxt.gather(1, order)  # (B, n)
        return (
            cand_score.gather(1, order).masked_fill(~ok, float("-inf")),
            cand_beam.gather(1, order),
            cand_tok.gather(1, order).masked_fill(~ok, PAD),
            cand_logp.gather(1, order),
        )

    def follow(self, sel: Tensor) -> None:
        """The next beam: candidates ``sel`` (B, k) of those allocate handed back."""
        self.rows = self.next_state.gather(1, sel).view(-1)  # (N,)
        self.table = None

    def keep(self, sentences: Tensor) -> None:
        """Only the sentences ``sentences`` (B',) (positions in the batch) go on, in that order."""
        self.rows = self.rows.view(-1, self.beam)[sentences].view(-1)  # (B'*k,)
        self.table = None
