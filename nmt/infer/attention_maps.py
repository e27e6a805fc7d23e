"""Attention weights and word alignment from a trained model (the paper's appendix, Figures 3-5).

    maps = attention_maps(model, src, tgt)   # src: pieces + EOS, tgt: output pieces (no BOS/EOS)
    maps.encoder_self   # (L, H, S, S)  layer, head, query source position, key source position
    maps.decoder_self   # (L, H, T, T)  query target position, key target position (causal)
    maps.cross          # (L, H, T, S)  encoder-decoder attention: target query, source key

Axis legend: L layers, H heads, S source tokens (pieces + EOS), T decoder inputs (BOS + output
pieces), so row t of ``cross`` is the attention used to predict output token t (the last row
predicts EOS).

The weights are not taken from the model's forward (which calls fused scaled_dot_product_attention
and never forms them): a teacher-forced ``encode`` + ``decode_step`` runs with forward hooks on
each attention module's ``q_proj`` and ``k_proj`` (fused projections switched off for that run by
``nmt.fused_projections.unfused``), and the weights are recomputed here as softmax(Q K^T /
sqrt(d_k)) with the same masks as the model (source padding; causal in the decoder; the window of
restricted self-attention). The model code is not changed.

Alignment (``nmt translate --alignment``, the server's ``"alignment": true``) follows fairseq's
convention (``--print-alignment``, ``utils.extract_hard_alignment``): the encoder-decoder attention
of the LAST decoder layer, AVERAGED over its heads; each output piece (EOS excluded) is aligned to
the source piece (EOS excluded) it attends to most. Pairs are written "s-t", 0-based
SentencePiece piece indices of source and output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..attention import window_mask
from ..fused_projections import unfused
from ..vocab import BOS, EOS, PAD
from .search import right_to_left


@dataclass
class AttentionMaps:
    encoder_self: Tensor  # (L, H, S, S)
    decoder_self: Tensor  # (L, H, T, T)
    cross: Tensor  # (L, H, T, S)


def _weights(q: Tensor, k: Tensor, n_heads: int, d_k: int, allowed: Tensor) -> Tensor:
    """q (1, T, H*K), k (1, N, H*K), allowed (T, N) True = may attend -> (H, T, N)."""
    t, n = q.size(1), k.size(1)
    q = q.view(t, n_heads, d_k).transpose(0, 1)  # (H, T, K)
    k = k.view(n, n_heads, d_k).transpose(0, 1)  # (H, N, K)
    scores = q.float() @ k.float().transpose(1, 2) / math.sqrt(d_k)  # (H, T, N)
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)  # (H, T, N)


@torch.no_grad()
def attention_maps(model, src: list[int], tgt: list[int]) -> AttentionMaps:
    """Attention weights of every layer and head for one source (token ids ending with EOS) and
    one target (output ids without BOS/EOS; the decoder is fed BOS + tgt)."""
    cfg = model.cfg
    if not src:
        raise ValueError("attention_maps needs a non-empty source")
    device = next(model.parameters()).device
    src_t = torch.tensor([src], device=device)  # (1, S)
    tgt_in = torch.tensor([[BOS] + list(tgt)], device=device)  # (1, T)
    captured: dict[int, Tensor] = {}
    handles = []
    modules = (
        [layer.self_attn for layer in model.encoder.layers]
        + [layer.self_attn for layer in model.decoder.layers]
        + [layer.encoder_attn for layer in model.decoder.layers]
    )
    for attn in modules:
        for proj in (attn.q_proj, attn.k_proj):
            handles.append(
                proj.register_forward_hook(
                    lambda mod, inputs, out: captured.__setitem__(id(mod), out.detach())
                )
            )
    was_training = model.training
    model.eval()
    try:
        with unfused(model):  # each projection on its own, so that its hook sees it
            memory = model.encode(src_t)
            model.decode_step(tgt_in, memory, None)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    s, t = src_t.size(1), tgt_in.size(1)
    src_ok = src_t[0].ne(PAD)  # (S,)
    enc_allowed = src_ok[None, :].expand(s, s)  # (S, S)
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (T, T)
    if cfg.attention_window is not None:  # restricted self-attention (section 4): as nmt.model's masks
        band = window_mask(s, s, start=0, window=cfg.attention_window, causal=False, device=device)  # (S, S)
        enc_allowed = (enc_allowed & band) | torch.eye(s, dtype=torch.bool, device=device)  # (S, S)
        causal = window_mask(t, t, start=0, window=cfg.attention_window, causal=True, device=device)  # (T, T)
    cross_allowed = src_ok[None, :].expand(t, s)  # (T, S)

    def stack(attns, allowed) -> Tensor:
        return torch.stack(
            [
                _weights(captured[id(a.q_proj)], captured[id(a.k_proj)], cfg.n_heads, cfg.d_k, allowed)
                for a in attns
            ]
        ).cpu()  # (L, H, ., .)

    return AttentionMaps(
        encoder_self=stack([layer.self_attn for layer in model.encoder.layers], enc_allowed),
        decoder_self=stack([layer.self_attn for layer in model.decoder.layers], causal),
        cross=stack([layer.encoder_attn for layer in model.decoder.layers], cross_allowed),
    )


def hard_alignment(
    cross: Tensor, src: list[int], tgt: list[int], *, layer: int = -1, diagonal: float | None = None
) -> list[tuple[int, int]]:
    """fairseq's convention: the ``layer`` (default: last) encoder-decoder attention averaged over
    heads; for each output piece j of ``tgt`` (no BOS/EOS) the source piece i (EOS and padding
    excluded) with the largest weight. ``diagonal``: the weights times a Gaussian of that width
    around the diagonal (relative positions (i + 1/2) / |src| and (j + 1/2) / |tgt|), a prior for
    pieces in the same order, as fast_align's diagonal tension is. ``cross`` (L, H, T, S) from
    ``attention_maps``; returns [(i, j), ...] in output order, empty when either side has no pieces."""
    n_src = sum(1 for x in src if x not in (EOS, PAD))
    if n_src == 0 or not tgt:
        return []
    avg = cross[layer].mean(dim=0)  # (T, S)
    rows = avg[: len(tgt), :n_src]  # (|tgt|, |src| without EOS): row j predicts tgt[j]
    if diagonal is not None:
        i = (torch.arange(n_src, dtype=rows.dtype) + 0.5) / n_src  # (|src|,)
        j = (torch.arange(len(tgt), dtype=rows.dtype) + 0.5) / len(tgt)  # (|tgt|,)
        rows = rows * torch.exp(-((i[None, :] - j[:, None]) ** 2) / (2 * diagonal**2))  # (|tgt|, |src|)
    return [(int(i), j) for j, i in enumerate(rows.argmax(dim=1).tolist())]


def format_alignment(pairs: list[tuple[int, int]]) -> str:
    """'0-0 1-2 ...' (source-target), fairseq's text format."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def unaligned_sources(
    cross: Tensor, src: list[int], tgt: list[int], pairs: list[tuple[int, int]], *, layer: int = -1
) -> list[tuple[int, int]]:
    """For each source piece (EOS and padding excluded) that no pair of ``pairs`` names: (i, j),
    the output piece j that attends to it most (the ``layer``'s weights averaged over heads, no
    prior): where a tag around that piece goes when the alignment gives it no output piece."""
    n_src = sum(1 for x in src if x not in (EOS, PAD))
    if n_src == 0 or not tgt:
        return []
    named = {i for i, _ in pairs}
    best = cross[layer].mean(dim=0)[: len(tgt), :n_src].argmax(dim=0).tolist()  # (|src|,) output piece
    return [(i, j) for i, j in enumerate(best) if i not in named]


def reading_cross(model, src: list[int], tgt: list[int]) -> Tensor:
    """The encoder-decoder attention (L, H, T, S) of a source and its translation with its rows in
    reading order (a right-to-left model's position j is reading position |tgt|-1-j)."""
    cross = attention_maps(model, src, tgt).cross  # (L, H, T, S), T in the model's order
    if right_to_left(model):
        cross = torch.cat([cross[:, :, : len(tgt)].flip(2), cross[:, :, len(tgt) :]], dim=2)
    return cross


def align(model, src: list[int], tgt: list[int], *, diagonal: float | None = None) -> list[tuple[int, int]]:
    """Hard alignment of a source (ids + EOS) and its translation (ids without BOS/EOS, in the
    model's order; ``diagonal``: hard_alignment's prior). A right-to-left model's target positions
    are given in reading order (the position of a piece in the text), as for a left-to-right one."""
    if not src or not tgt:
        return []
    return hard_alignment(reading_cross(model, src, tgt), src, tgt, diagonal=diagonal)


def align_with_fallback(
    model, src: list[int], tgt: list[int], *, diagonal: float | None
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``align``'s pairs and, from the same attention, ``unaligned_sources``' (what places a tag
    whose words the first left without an output piece)."""
    if not src or not tgt:
        return [], []
    cross = reading_cross(model, src, tgt)
    pairs = hard_alignment(cross, src, tgt, diagonal=diagonal)
    return pairs, unaligned_sources(cross, src, tgt, pairs)
