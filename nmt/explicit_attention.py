"""Explicit attention: a CPU training speed path of scaled dot-product attention (section 3.2.1,
``nmt.attention.scaled_dot_product_attention``).

Training on CPU in bf16 / fp16 autocast computes attention step by step (scores held, in float32)
instead of through SDPA, whose CPU kernel is slow for reduced precision. ``applies`` is the one
switch; ``explicit_attention`` computes the same function as F.scaled_dot_product_attention.
Axis legend as in nmt.model: B batch, H heads, T queries, N keys, K / V per-head sizes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .dropout import dropout

# Explicit attention is used when a head's score matrix has at most this many entries. Forward +
# backward of a recipe batch (40 sentences x 4 heads x 25 x 25 positions): 1.9 ms against 5.6 ms
# (bf16); 100 x 100: 3.6 vs 6.6 ms; equal at 200 x 200. In float32 SDPA is as fast (0.94-1.2x), so
# float32 keeps it (benchmarks/attention_train.py).
EXPLICIT_ATTENTION_MAX = 128 * 128


def applies(q: Tensor, k: Tensor, mask: Tensor | None) -> bool:
    """The switch: explicit attention for queries q (B, H, T, K) and keys k (B, H, N, K) on the
    CPU, in bf16 or fp16, with gradients (training), T x N <= EXPLICIT_ATTENTION_MAX and a boolean
    mask or none; otherwise SDPA."""
    return (
        q.device.type == "cpu"
        and q.dtype in (torch.bfloat16, torch.float16)
        and torch.is_grad_enabled()
        and q.size(2) * k.size(2) <= EXPLICIT_ATTENTION_MAX
        and (mask is None or mask.dtype == torch.bool)
    )


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, is_causal: bool, dropout_p: float
) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V in float32, step by step: q (B, H, T, K), k (B, H, N, K),
    v (B, H, N, V); mask (bool, broadcastable to (B, H, T, N), True = attend) or is_causal (key
    j <= query i); dropout on the attention weights. The same function as
    F.scaled_dot_product_attention. Returns (B, H, T, V) in q's dtype."""
    if is_causal and mask is not None:
        raise ValueError("explicit_attention: give mask or is_causal, not both (as SDPA)")
    with torch.autocast(q.device.type, enabled=False):
        qf = q.float() * (q.size(-1) ** -0.5)  # (B, H, T, K)
        scores = torch.matmul(qf, k.float().transpose(-2, -1))  # (B, H, T, N)
        if is_causal:
            t, n = scores.shape[-2:]
            mask = torch.ones(t, n, dtype=torch.bool, device=q.device).tril()  # (T, N)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, H, T, N)
        weights = dropout(weights, dropout_p)
        return torch.matmul(weights, v.float()).to(q.dtype)  # (B, H, T, V)
