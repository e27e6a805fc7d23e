"""The decoding state as explicit values: the encoder memory (``EncoderOut``) and the decoder's
key/value cache (``DecoderCache``), each with ``reorder(indices)`` for beam search, and the row
bookkeeping behind them.

The model (nmt.model) makes them (``encode``, ``decode_step``) and reads them; search (nmt.infer)
keeps, reorders and drops their rows. Axis legend as in nmt.model: B batch, S source length,
D d_model, H heads, K / V per-head key / value size; here also N decoder rows (sentences x beams),
M memory rows (N = M * group), C the capacity of a self-attention buffer in positions, R rows moved.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def shared_rows(indices: Tensor, group: int) -> tuple[Tensor, int]:
    """Rows ``indices`` (N',) of a batch whose rows come in runs of ``group`` sharing one memory
    row (the beams of a sentence) -> (memory rows to keep (M',), new group size). The new rows keep
    sharing when they come in equal runs of one memory row (beam reordering, dropping sentences,
    expanding to beams); otherwise each gets its own memory row (group 1)."""
    memory_rows = indices // group  # (N',) memory row of each new row
    runs, counts = torch.unique_consecutive(memory_rows, return_counts=True)  # (M',), (M',)
    if counts.numel() and bool((counts == counts[0]).all()):
        return runs, int(counts[0])
    return memory_rows, 1


def select_rows(x: Tensor, rows: Tensor) -> Tensor:
    """x.index_select(0, rows), or x itself when ``rows`` is 0..len(x)-1 (nothing to copy)."""
    if rows.numel() == x.size(0) and torch.equal(rows, torch.arange(x.size(0), device=rows.device)):
        return x
    return x.index_select(0, rows)


def moved_rows(indices: Tensor) -> Tensor:
    """The rows i with indices[i] != i (R,): those a reorder by ``indices`` (N',) changes."""
    return indices.ne(torch.arange(indices.numel(), device=indices.device)).nonzero().squeeze(1)


def take_rows_(x: Tensor, indices: Tensor, filled: int | None = None, moved: Tensor | None = None) -> Tensor:
    """``x.index_select(0, indices)`` for a caller that gives ``x`` up: row i takes row
    ``indices[i]`` (N' <= N) in place, rows with indices[i] == i are not copied (all sources are
    read before any row is written), and the first N' rows are returned (a view). ``filled``: only
    positions :filled of dimension 1 hold data (a self-attention buffer (N, C, H, K)); ``moved``:
    ``moved_rows(indices)`` when the caller has it (several tensors taken by the same indices).
    Where it cannot apply (N' > N, autograd) a new tensor as index_select."""
    n = indices.numel()
    if n > x.size(0) or (x.requires_grad and torch.is_grad_enabled()):
        return x.index_select(0, indices)
    moved = moved_rows(indices) if moved is None else moved  # (R,) rows that change
    if moved.numel():
        part = x if filled is None else x[:, :filled]
        part.index_copy_(0, moved, part.index_select(0, indices[moved]))  # (R, ...) read, then written
    return x[:n]


@dataclass
class EncoderOut:
    """Encoder memory: ``out`` (M, S, D) and ``padding_mask`` (M, S), True where src is padding.
    Memory row i serves the ``group`` decoder rows i*group..(i+1)*group-1 (the beams of one
    sentence share their memory instead of holding copies)."""

    out: Tensor
    padding_mask: Tensor
    group: int = 1

    def attend_mask(self) -> Tensor:
        """(M, 1, 1, S), True = attend: the mask of encoder-decoder attention (section 3.2.3)."""
        return ~self.padding_mask[:, None, None, :]  # (M, S) -> (M, 1, 1, S)

    def reorder(self, indices: Tensor) -> "EncoderOut":
        """Select/repeat decoder rows ``indices`` (N',), e.g. to expand for beams
        (``arange(B).repeat_interleave(k)``) or to drop finished sentences."""
        rows, group = shared_rows(indices, self.group)
        return EncoderOut(select_rows(self.out, rows), select_rows(self.padding_mask, rows), group)

    def reorder_(self, indices: Tensor) -> "EncoderOut":
        """``reorder`` for a caller that will not use this memory again (see ``take_rows_``)."""
        rows, group = shared_rows(indices, self.group)
        moved = moved_rows(rows)
        return EncoderOut(
            take_rows_(self.out, rows, moved=moved), take_rows_(self.padding_mask, rows, moved=moved), group
        )


@dataclass
class LayerCache:
    """One decoder layer's keys and values: those of the target prefix (self-attention, section
    3.2.3's masked decoder self-attention) and those of the memory (encoder-decoder attention)."""

    self_k: Tensor  # (N, C, H, K) keys of the target prefix; the first DecoderCache.length of C are filled
    self_v: Tensor  # (N, C, H, V) (position-major: a row's filled positions are one contiguous block)
    cross_k: Tensor  # (M, H, S, K) computed once per memory row, shared by its group of decoder rows
    cross_v: Tensor  # (M, H, S, V)


@dataclass
class DecoderCache:
    """Explicit decoder state: per-layer keys/values, the number of positions already seen, the
    number ``group`` of decoder rows (N = M * group) sharing each memory row's cross-attention
    keys/values, and the memory mask (M, 1, 1, S), True = attend.

    Self-attention keys/values live in preallocated buffers of capacity C >= length: a step writes
    its new positions in place instead of concatenating. ``extent`` (shared by the caches over the
    same buffers) records how far they are written, so that extending an older cache a second
    time (branching) copies first instead of overwriting the newer one's positions."""

    layers: list[LayerCache]
    length: int
    group: int
    memory_mask: Tensor
    extent: list[int]

    @staticmethod
    def empty(memory_kv: list[tuple[Tensor, Tensor]], memory: EncoderOut, capacity: int) -> "DecoderCache":
        """A cache before the first step: each layer's memory keys (M, H, S, K) and values
        (M, H, S, V) (computed once per memory row) and empty self-attention buffers of
        ``capacity`` positions for the N = M * memory.group decoder rows."""
        n = memory.out.size(0) * memory.group
        layers = [
            LayerCache(
                k.new_empty(n, capacity, k.size(1), k.size(3)),  # (N, C, H, K)
                v.new_empty(n, capacity, v.size(1), v.size(3)),
                k,
                v,
            )  # (N, C, H, V)
            for k, v in memory_kv
        ]
        return DecoderCache(layers, 0, memory.group, memory.attend_mask(), [0])

    @property
    def capacity(self) -> int:
        return self.layers[0].self_k.size(1) if self.layers else 0

    def with_room(self, tokens: Tensor) -> "DecoderCache":
        """This cache, ready for a step that writes ``tokens`` (N, T) at positions length..length+T-1
        in place: a copy with larger buffers when they are full, or when another step from this
        cache wrote them already (branching). Raises when N is not the cache's number of rows."""
        p, t = self.length, tokens.size(1)
        if tokens.size(0) != self.memory_mask.size(0) * self.group:
            raise ValueError(
                f"{tokens.size(0)} target rows for {self.memory_mask.size(0)} memory rows "
                f"of {self.group} decoder rows each"
            )
        if self.extent[0] != p or p + t > self.capacity:  # buffers extended by another step, or full
            return self.reorder(
                torch.arange(tokens.size(0), device=tokens.device), capacity=max(p + t, 2 * self.capacity)
            )
        return self

    def advanced(self, t: int) -> "DecoderCache":
        """The cache after a step wrote ``t`` new positions into the buffers (``with_room``)."""
        self.extent[0] = self.length + t
        return DecoderCache(self.layers, self.length + t, self.group, self.memory_mask, self.extent)

    def reorder(self, indices: Tensor, capacity: int | None = None) -> "DecoderCache":
        """Keep rows ``indices`` (N',) of every cached tensor (beam reordering, pruning), into new
        buffers of ``capacity`` (default: the current one) positions."""
        rows, group = shared_rows(indices, self.group)
        p, cap = self.length, max(capacity or self.capacity, self.length)
        layers = []
        for c in self.layers:
            self_kv = []
            for buf in (c.self_k, c.self_v):
                new = buf.new_empty(indices.size(0), cap, buf.size(2), buf.size(3))  # (N', C, H, K)
                if buf.requires_grad and torch.is_grad_enabled():  # out= is not differentiable
                    new[:, :p] = buf[:, :p].index_select(0, indices)
                else:  # straight into the new buffer, one copy
                    torch.index_select(buf[:, :p], 0, indices, out=new[:, :p])
                self_kv.append(new)
            layers.append(LayerCache(*self_kv, select_rows(c.cross_k, rows), select_rows(c.cross_v, rows)))
        return DecoderCache(layers, p, group, select_rows(self.memory_mask, rows), [p])

    def reorder_beams_(self, indices: Tensor) -> "DecoderCache":
        """``reorder_`` where every row takes a row of its own memory row's group (beam search
        reordering hypotheses without dropping sentences): the memory's keys, values and mask stay,
        only the self-attention buffers' rows that change are copied."""
        n, p = indices.numel(), self.length
        if not self.layers or n != self.layers[0].self_k.size(0) or self.extent[0] != p:
            return self.reorder_(indices)
        if self.layers[0].self_k.requires_grad and torch.is_grad_enabled():
            return self.reorder_(indices)
        moved = moved_rows(indices)  # once for all layers
        layers = [
            LayerCache(
                take_rows_(c.self_k, indices, p, moved),
                take_rows_(c.self_v, indices, p, moved),
                c.cross_k,
                c.cross_v,
            )
            for c in self.layers
        ]
        return DecoderCache(layers, p, self.group, self.memory_mask, self.extent)

    def reorder_(self, indices: Tensor) -> "DecoderCache":
        """``reorder(indices)`` for a caller that will not use this cache again (beam search,
        greedy search): every tensor's rows are taken in place (``take_rows_``: only the rows that
        change are copied) and narrowed to the rows kept, views of the same buffers. Where that
        cannot apply (N' > N, buffers extended by another cache, autograd) it is ``reorder``."""
        n, p = indices.numel(), self.length
        if (
            not self.layers
            or n > self.layers[0].self_k.size(0)
            or self.extent[0] != p
            or (self.layers[0].self_k.requires_grad and torch.is_grad_enabled())
        ):
            return self.reorder(indices)
        rows, group = shared_rows(indices, self.group)  # (M',) memory rows
        moved, moved_memory = moved_rows(indices), moved_rows(rows)  # once for all layers
        layers = [
            LayerCache(
                take_rows_(c.self_k, indices, p, moved),
                take_rows_(c.self_v, indices, p, moved),
                take_rows_(c.cross_k, rows, moved=moved_memory),
                take_rows_(c.cross_v, rows, moved=moved_memory),
            )
            for c in self.layers
        ]
        memory_mask = take_rows_(self.memory_mask, rows, moved=moved_memory)  # (M', 1, 1, S)
        return DecoderCache(layers, p, group, memory_mask, self.extent)
