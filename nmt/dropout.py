"""Section 5.4's dropout ("residual dropout", and on the sums of embeddings and positional
encodings), with keep masks drawn cheaply on CPU."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """A bool mask of ``shape``, each element True (kept) with probability 1 - p. When p is a
    multiple of 1/65536 to within rounding (t = round(65536 p) in 1..65535: p = 0.1 drops
    6554/65536 = 0.100006) from 16 random bits per element, four to each 64-bit draw of the CPU
    generator (two 32-bit generator outputs: half the generator work per element of float32
    uniforms, which take one); otherwise (p under
    2^-17 or above 1 - 2^-17) from float32 uniforms >= p."""
    t = round(p * 65536)
    if not 0 < t < 65536:
        return torch.empty(shape, dtype=torch.float32, device=device).uniform_().ge_(p)
    n = math.prod(shape)
    # random_() alone draws from [0, 2^63): the top lane would never be negative; from -2^63 it
    # takes all 64 bits of the generator's draw
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(
        -(2**63), None
    )  # (ceil(n/4),)
    bits = words.view(torch.int16)[:n].view(shape)  # shape: 16 uniform bits each, in [-32768, 32767]
    return bits.ge(t - 32768)  # P(bits >= t - 32768) = (65536 - t) / 65536


def dropout(x: Tensor, p: float) -> Tensor:
    """Training-time dropout (see ``Dropout``): keep each element with probability 1 - p, scale by
    1 / (1 - p); on CPU the mask comes from ``keep_mask``, elsewhere F.dropout."""
    if p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return x * keep_mask(x.shape, p, x.device).to(x.dtype).mul_(1.0 / (1.0 - p))


class Dropout(nn.Module):
    """Section 5.4's dropout, as ``nn.Dropout``: in training each element is kept with probability
    1 - p and scaled by 1 / (1 - p). On CPU the keep mask compares 16 random bits per element
    with p (``keep_mask``) instead of ``bernoulli_`` or float32 uniforms: one 64-bit draw serves four
    elements (the bf16 step this shortens: benchmarks/train_speed.py).
    Other devices use F.dropout (fused, a 1-byte mask on CUDA)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability {p}: must be in [0, 1)")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p) if self.training else x

    def extra_repr(self) -> str:
        return f"p={self.p}"
