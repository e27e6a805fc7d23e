"""The n best extensions of each sentence's beam, as beam search selects them at every step.

``beam_topk`` gives the values of one top-k over a sentence's k rows of next-token
log-probabilities plus their rows' scores; on the CPU, for a vocabulary much wider than n, it
finds them in two stages (block maxima first), which reads the (B*k, W) matrix once instead of
running PyTorch's slower top-k over all of it (see there). Among equal values the choice may
differ from ``torch.topk``'s.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Candidates(NamedTuple):
    """A step's best extensions of each sentence's beam, best first, (B, n) each (``beam_topk``)."""

    scores: Tensor  # summed log-probabilities
    beam: Tensor  # the row of the beam (0..k-1) each extends
    token: Tensor
    logp: Tensor  # the token's log-probability


# a step's log-probabilities of at most this many entries (rows x vocabulary) get one plain top-k:
# the two stages cost ~30 small operations, more than one top-k of a small matrix takes on the CPU
# (benchmarks/profile_decode.py; a beam of 2 sentences x 4 rows x 2,000 listed pieces is 16,000)
DIRECT_MAX = 1 << 16


def row_topk(x: Tensor, k: int, block: int = 64) -> tuple[Tensor, Tensor]:
    """The k largest entries of each row of x (N, W) and their columns, best first: the values of
    ``x.topk(k, dim=-1)`` (columns may differ among equal values); beam_topk with one row per
    sentence (see there for the two-stage selection on the CPU)."""
    values, _, cols, _ = beam_topk(x, None, k, block)
    return values, cols


def plain_topk(logp: Tensor, summed: Tensor, n: int, b: int) -> Candidates:
    """beam_topk as one top-k over each sentence's k*W entries: ``summed`` (B*k, W) the rows'
    scores plus ``logp`` (B*k, W)."""
    w = logp.size(1)
    top_scores, pos = summed.view(b, -1).topk(n, dim=1)  # (B, n)
    top_logp = top_scores if summed is logp else logp.view(b, -1).gather(1, pos)
    return Candidates(top_scores, pos // w, pos % w, top_logp)


def beam_topk(
    logp: Tensor, scores: Tensor | None, n: int, block: int = 64, direct_max: int = DIRECT_MAX
) -> Candidates:
    """The ``n`` best extensions of each sentence's beam. ``logp`` (B*k, W): next-token
    log-probabilities of the k rows of each sentence (rows i*k..(i+1)*k-1 are sentence i);
    ``scores`` (B, k): the rows' summed log-probabilities (None: k = 1 and scores 0, i.e. the top
    of each row of ``logp``). Returns, best first, (B, n) each (Candidates): the extensions' summed
    log-probabilities, their row in the beam (0..k-1), token and token log-probability (the values
    of ``(scores[:, :, None] + logp).view(B, -1).topk(n)``; among equal values the choice may differ).

    On the CPU, for W >> n and more than ``direct_max`` entries (B*k*W) in all, in two stages per
    sentence: the best summed score of each block of ``block`` columns of each row, the n (row,
    block) pairs with the best of those (they hold the n
    best extensions: a pair outside them has n block maxima at least as large as all its entries),
    then the n best among those pairs' n*block entries and the last W % block columns of every row.
    PyTorch's CPU top-k is slower per element than a maximum: this reads the
    (B*k, W) matrix once (a block maximum) and runs top-k on (B, k*W/block) and (B, n*block)."""
    bk, w = logp.shape
    b, k = (bk, 1) if scores is None else scores.shape
    n_blocks = w // block
    device = logp.device

    def plus_score(
        x: Tensor, rows: Tensor | None = None
    ) -> Tensor:  # x (B*k, ...) or (B, n, ...) + its row's score
        if scores is None:
            return x
        return x + (scores.view(bk, 1) if rows is None else scores.gather(1, rows)[:, :, None])

    if device.type != "cpu" or n_blocks * k <= n or bk * w <= direct_max:
        return plain_topk(logp, plus_score(logp), n, b)
    main = logp[:, : n_blocks * block].view(bk, n_blocks, block)  # (B*k, W // block, block)
    block_best = plus_score(main.amax(dim=-1)).view(b, k * n_blocks)  # (B, k * W // block)
    pair = block_best.topk(n, dim=1).indices  # (B, n) the n best (row, block) pairs
    beam_row, blk = pair // n_blocks, pair % n_blocks  # (B, n) each
    rows = beam_row + torch.arange(b, device=device)[:, None] * k  # (B, n) row in B*k
    cand = plus_score(main[rows, blk], beam_row).view(b, n * block)  # (B, n*block) summed log-probs
    cand_row = beam_row[:, :, None].expand(b, n, block).reshape(b, n * block)  # (B, n*block)
    cand_tok = (blk[:, :, None] * block + torch.arange(block, device=device)).view(
        b, n * block
    )  # (B, n*block)
    tail = w - n_blocks * block
    if tail:  # every row's last W % block columns are candidates too
        cand = torch.cat(
            [cand, plus_score(logp[:, n_blocks * block :]).view(b, k * tail)], dim=1
        )  # (B, n*block + k*tail)
        cand_row = torch.cat(
            [cand_row, torch.arange(k, device=device).repeat_interleave(tail).expand(b, -1)], dim=1
        )
        cand_tok = torch.cat(
            [cand_tok, torch.arange(n_blocks * block, w, device=device).repeat(k).expand(b, -1)], dim=1
        )
    top_scores, pos = cand.topk(n, dim=1)  # (B, n)
    top_beam, top_tok = cand_row.gather(1, pos), cand_tok.gather(1, pos)  # (B, n) each
    if scores is None:  # the values are the entries themselves
        return Candidates(top_scores, top_beam, top_tok, top_scores)
    top_logp = logp[top_beam + torch.arange(b, device=device)[:, None] * k, top_tok]  # (B, n)
    return Candidates(top_scores, top_beam, top_tok, top_logp)
