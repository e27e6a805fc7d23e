"""Fused attention projections: an inference speed path of multi-head attention (section 3.2.2,
``nmt.attention.MultiheadAttention``).

Self-attention projects one input three times (Q = x W^Q, K = x W^K, V = x W^V); fused, that is
one matrix product over the weights concatenated by rows, [W^Q; W^K; W^V], whose output columns
are split back into Q, K and V. Cross-attention (the decoder's ``encoder_attn``) fuses only
[W^K; W^V]: its keys and values come from the memory, its queries from the decoder. One larger
product instead of three or two saves the fixed cost of each call (~20 us per oneDNN call, much of
a beam-search step on small batches); each output column is the same dot product as before.

"Fused" is the code's one word for this (not "stacked"); "packed" is another thing, oneDNN's
blocked weight layout (nmt.infer.packed), and a fused projection may also be packed.

``fuse_projections(model, make)`` is the one hook: it sets ``MultiheadAttention.fused_qkv`` /
``fused_kv`` (None in a model as built), which attention then uses for an input ``x`` where
``fused.applies(x)`` is True (the switch, the fused module's own), and else the separate
projections. nmt.infer.packed fuses with oneDNN-packed weights (float32 CPU inference),
nmt.infer.quantize with int8 ones. ``unfused(model)`` switches them off for a block (code that
hooks the separate projections, as nmt.infer.attention_maps does, or an A/B of the two paths).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from .attention import MultiheadAttention


def fused_weights(layers: list[nn.Module]) -> tuple[Tensor, Tensor | None]:
    """The weights (sum of out, in) and biases (sum of out,) of ``layers`` concatenated by rows: a
    copy, not parameters (the model's parameters and state_dict stay as they were)."""
    weight = torch.cat([layer.weight.detach() for layer in layers])  # (sum out, in)
    biases = [layer.bias for layer in layers]
    bias = None if any(b is None for b in biases) else torch.cat([b.detach() for b in biases])  # (sum out,)
    return weight, bias


def projections_to_fuse(model: nn.Module) -> Iterator[tuple[MultiheadAttention, str, list[nn.Module]]]:
    """(attention module, "fused_qkv" or "fused_kv", the projections to fuse, in that order) for
    every MultiheadAttention of ``model``: q/k/v for self-attention (one input), k/v for the
    decoder's encoder_attn (keys and values from the memory, queries from the decoder)."""
    for name, attn in list(model.named_modules()):
        if isinstance(attn, MultiheadAttention):
            if name.endswith("encoder_attn"):
                yield attn, "fused_kv", [attn.k_proj, attn.v_proj]
            else:
                yield attn, "fused_qkv", [attn.q_proj, attn.k_proj, attn.v_proj]


def fuse_projections(model: nn.Module, make: Callable[[list[nn.Module]], nn.Module | None]) -> nn.Module:
    """Give every attention of ``model`` its fused projection ``make(projections)``: a module
    (..., D) -> (..., sum of the projections' outputs) with a method ``applies(x) -> bool`` saying
    for which inputs it is used; ``make`` returning None leaves that attention unfused. The fused
    module holds copies (or views) of the weights: fuse after the weights are final. Returns
    ``model``."""
    for attn, slot, layers in projections_to_fuse(model):
        fused = make(layers)
        if fused is not None:
            setattr(attn, slot, fused)
    return model


@contextlib.contextmanager
def unfused(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, every attention of ``model`` computes with its separate projections
    (q_proj, k_proj, v_proj: forward hooks on them see every call); on exit each attention gets
    back the fused projections it had (the same modules). Yields ``model``."""
    saved = [(attn, attn.fused_qkv, attn.fused_kv) for attn, _, _ in projections_to_fuse(model)]
    for attn, _, _ in saved:
        attn.fused_qkv = attn.fused_kv = None
    try:
        yield model
    finally:
        for attn, qkv, kv in saved:
            attn.fused_qkv, attn.fused_kv = qkv, kv
