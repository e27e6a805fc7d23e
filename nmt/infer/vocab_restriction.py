"""A model searched over part of the target vocabulary (a shortlist's pieces, nmt.infer.shortlist).

Two forms, the same rules inside each: the positions 0..U-1 of a restricted model stand for U
target ids in ascending order, the special ids PAD, UNK, BOS, EOS first (so they keep their ids and
the search's rules apply unchanged), the next-token log-probabilities are ``log_softmax`` over the
U pieces (a piece outside them has probability 0, as Marian and CTranslate2 normalise), and the
chosen positions are mapped back to ids (``Restriction.to_ids``).

  * ``batch_model``: every sentence of a batch over the batch's union (U,), one copy of the output
    layer's rows U per batch (a packed float32 or an int8 layer stays packed / int8): what
    Marian's shortlists and CTranslate2's vocabulary map do, and ``nmt translate --shortlist``.
  * ``sentence_model``: each sentence over its own ids (B, U), padded to the batch's widest with
    positions whose logit is -inf: `nmt serve` searches the sentences of several requests together,
    each over its own request's union, so that batching never changes a translation. The output
    layer's rows of every sentence are gathered once per batch (M, D, U) and travel with the encoder
    memory (``SentenceMemory``: dropped and reordered with its rows), and a step's logits are one
    batched product (the beams of a sentence share its rows).

Axis legend as in nmt.model and nmt.cache: B sentences, N decoder rows (sentences x beams), M
memory rows (N = M * group), T new target positions, D d_model, U positions of the restriction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..cache import EncoderOut, moved_rows, select_rows, shared_rows, take_rows_


@dataclass
class Restriction:
    """The model a batch is searched with and how each sentence's positions map to ids."""

    model: object  # what the search calls (encode / decode_step)
    ids: list[list[int]] | None  # per sentence: position -> target id (None: the full vocabulary)

    def to_positions(self, prefix: list[list[int]] | None) -> list[list[int]] | None:
        """Prefix ids as positions of their sentence's ids (every prefix id is among them)."""
        if prefix is None or self.ids is None:
            return prefix
        wheres: dict[int, dict[int, int]] = {}  # one map per distinct list (a batch's union is shared)
        out = []
        for ids, p in zip(self.ids, prefix):
            if id(ids) not in wheres:
                wheres[id(ids)] = {t: i for i, t in enumerate(ids)}
            out.append([wheres[id(ids)][t] for t in p])
        return out

    def to_ids(self, hyps: list) -> list:
        """Hypotheses (per sentence, a list of nmt.infer.search.Hypothesis) with ids for positions."""
        if self.ids is None:
            return hyps
        return [
            [dataclasses.replace(h, tokens=[ids[t] for t in h.tokens]) for h in hs]
            for ids, hs in zip(self.ids, hyps)
        ]


def _members(model) -> tuple[list, bool]:
    """The Transformers of ``model`` (one, or an nmt.infer.search.Ensemble's) and whether it is one."""
    from .search import Ensemble

    return (model.models, True) if isinstance(model, Ensemble) else ([model], False)


def _ensemble(parts: list, is_ensemble: bool):
    from .search import Ensemble

    return Ensemble(parts) if is_ensemble else parts[0]


# ----------------------------------------------------------------------------- scope "batch"
class RowLinear(nn.Module):
    """logits = x W_U^T (+ b_U): the rows U of an output projection, copied (float32 / bf16)."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None):
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x: Tensor) -> Tensor:  # (..., D) -> (..., U)
        return F.linear(x, self.weight, self.bias)


def restricted_projection(decoder, rows: Tensor) -> nn.Module:
    """The decoder's output layer for the target ids ``rows`` (U,) only: a packed float32 layer
    (nmt.infer.packed) is packed again over those rows, an int8 layer (nmt.infer.quantize) keeps
    the int8 rows and their scales, a plain or tied one copies the rows."""
    from .int8_linear import Int8Linear
    from .packed import PackedLinear

    proj = decoder.output_projection
    if proj is None:  # tied, not packed: the embedding matrix (section 3.4) and the output bias if any
        bias = getattr(decoder, "output_bias", None)
        bias = None if bias is None else bias.detach().index_select(0, rows)
        return RowLinear(decoder.embed_tokens.weight.detach().index_select(0, rows), bias)
    if isinstance(proj, PackedLinear):
        bias = None if proj.bias is None else proj.bias.detach().index_select(0, rows)
        return PackedLinear(proj.weight.detach().index_select(0, rows), bias, kernel=proj.kernel)
    if hasattr(proj, "_weight_bias"):  # torch.ao dynamic int8 Linear: per-row scales, int8 kept
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

        weight, bias = proj._weight_bias()  # (W, D) qint8 per channel, (W,) float or None
        sub = torch.quantize_per_channel(
            weight.dequantize().index_select(0, rows),
            weight.q_per_channel_scales().index_select(0, rows),
            weight.q_per_channel_zero_points().index_select(0, rows),
            0,
            torch.qint8,
        )  # same int8 values
        sub_bias = None if bias is None else bias.index_select(0, rows)
        if isinstance(proj, Int8Linear):  # the same kernels and activation range as the full layer
            return Int8Linear(sub, sub_bias, reduce_range=proj.reduce_range)
        layer = DynamicLinear(weight.size(1), rows.numel(), bias_=bias is not None, dtype=torch.qint8)
        layer.set_weight_bias(sub, sub_bias)
        return layer
    bias = None if proj.bias is None else proj.bias.detach().index_select(0, rows)
    return RowLinear(proj.weight.detach().index_select(0, rows), bias)


class ShortlistModel:
    """A Transformer searched over the target ids ``rows`` (U,): ``decode_step`` takes and
    returns positions in ``rows`` (tokens (N, T) positions -> logits (N, T, U)); the rest is the
    model's. Its cache and memory are the model's own."""

    def __init__(self, model, rows: Tensor):
        self.model, self.rows, self.cfg = model, rows, model.cfg
        self.projection = restricted_projection(model.decoder, rows)

    def encode(self, src_tokens: Tensor):
        return self.model.encode(src_tokens)

    def decode_step(self, tgt_tokens: Tensor, memory, cache=None):
        return self.model.decode_step(self.rows[tgt_tokens], memory, cache, projection=self.projection)


def batch_model(model, rows: Tensor):
    """``model`` over the ids ``rows`` (U,): a ShortlistModel, or an Ensemble of them (one per member)."""
    members, is_ensemble = _members(model)
    return _ensemble([ShortlistModel(m, rows) for m in members], is_ensemble)


# ----------------------------------------------------------------------------- scope "sentence"
def output_rows(decoder, ids: Tensor) -> tuple[Tensor, Tensor | None]:
    """The output layer's rows for target ids ``ids`` (...) as floating-point values: weights
    (..., D) and bias (...) or None; an int8 layer's rows dequantized (their int8 values times
    their scales), a packed or tied one's copied."""
    proj = decoder.output_projection
    if proj is None:  # tied: the embedding matrix (section 3.4) and the output bias if any
        bias = getattr(decoder, "output_bias", None)
        return decoder.embed_tokens.weight.detach()[ids], None if bias is None else bias.detach()[ids]
    if hasattr(proj, "_weight_bias"):  # torch.ao dynamic int8 Linear
        weight, bias = proj._weight_bias()  # (W, D) qint8 per channel, (W,) float or None
        scale = weight.q_per_channel_scales().float()[ids]  # (...)
        zero = weight.q_per_channel_zero_points().float()[ids]  # (...)
        rows = (weight.int_repr()[ids].float() - zero[..., None]) * scale[..., None]  # (..., D)
        return rows, None if bias is None else bias.detach()[ids]
    return proj.weight.detach()[ids], None if proj.bias is None else proj.bias.detach()[ids]


@dataclass
class SentenceMemory:
    """The encoder memory with each memory row's restriction: its target ids (M, U), the output
    layer's rows as one batched operand (M, D, U), and a bias (M, 1, U) that is the layer's bias
    on the row's own positions and -inf on the padding ones. Reordered like the memory
    (``shared_rows``): the tables follow the memory rows they belong to."""

    memory: EncoderOut
    ids: Tensor  # (M, U)
    weight: Tensor  # (M, D, U)
    bias: Tensor  # (M, 1, U)

    def _tables(self, rows: Tensor, take) -> tuple[Tensor, Tensor, Tensor]:
        return take(self.ids, rows), take(self.weight, rows), take(self.bias, rows)

    def reorder(self, indices: Tensor) -> "SentenceMemory":
        rows, _ = shared_rows(indices, self.memory.group)  # (M',) the memory rows kept
        return SentenceMemory(self.memory.reorder(indices), *self._tables(rows, select_rows))

    def reorder_(self, indices: Tensor) -> "SentenceMemory":
        """``reorder`` for a caller that will not use this memory again (nmt.cache.take_rows_)."""
        rows, _ = shared_rows(indices, self.memory.group)
        moved = moved_rows(rows)
        tables = self._tables(rows, lambda x, r: take_rows_(x, r, moved=moved))
        return SentenceMemory(self.memory.reorder_(indices), *tables)


class SentenceShortlistModel:
    """A Transformer searched over each sentence's own target ids ``ids`` (B, U), ``valid`` (B, U)
    True on a sentence's positions (the rest pads it to U): ``encode`` returns a SentenceMemory,
    ``decode_step`` takes positions (N, T) and returns logits (N, T, U), -inf on padding."""

    def __init__(self, model, ids: Tensor, valid: Tensor):
        self.model, self.cfg, self.ids = model, model.cfg, ids
        weight, bias = output_rows(model.decoder, ids)  # (B, U, D), (B, U) or None
        pad = torch.zeros(valid.shape, dtype=weight.dtype).masked_fill_(~valid, float("-inf"))  # (B, U)
        self.bias = (pad if bias is None else bias.to(weight.dtype) + pad)[:, None, :]  # (B, 1, U)
        self.weight = weight.transpose(1, 2).contiguous()  # (B, U, D) -> (B, D, U)

    def encode(self, src_tokens: Tensor) -> SentenceMemory:
        return SentenceMemory(self.model.encode(src_tokens), self.ids, self.weight, self.bias)

    def decode_step(self, tgt_tokens: Tensor, memory: SentenceMemory, cache=None):
        n, t = tgt_tokens.shape
        m = memory.ids.size(0)  # decoder rows i*group..(i+1)*group-1 read memory row i
        ids = memory.ids.gather(1, tgt_tokens.reshape(m, -1)).view(n, t)  # (M, group*T) -> (N, T)

        def project(x: Tensor) -> Tensor:  # (N, T, D) -> (N, T, U)
            rows = x.reshape(m, -1, x.size(-1))  # (M, group*T, D): a memory row's decoder rows
            return torch.baddbmm(memory.bias, rows, memory.weight).view(n, t, -1)  # (M, group*T, U)

        return self.model.decode_step(ids, memory.memory, cache, projection=project)


def sentence_model(model, ids: Tensor, valid: Tensor):
    """``model`` over each sentence's ids: a SentenceShortlistModel, or an Ensemble of them."""
    members, is_ensemble = _members(model)
    return _ensemble([SentenceShortlistModel(m, ids, valid) for m in members], is_ensemble)
