"""What the search tests share: a wrapper that makes a random model's outputs end at different lengths."""

from __future__ import annotations

import torch

from nmt.vocab import EOS


class EarlyEos:
    """Wraps a model: +4 on the EOS logit after a token id divisible by 3, so that random weights
    give outputs that end at different lengths (some early, some at the maximum)."""

    def __init__(self, inner):
        self.inner, self.cfg = inner, inner.cfg

    def encode(self, src):
        return self.inner.encode(src)

    def decode_step(self, tokens, memory, cache):
        logits, cache = self.inner.decode_step(tokens, memory, cache)  # (B, T, W)
        eos = torch.arange(logits.size(-1)) == EOS  # (W,)
        return logits + 4.0 * (tokens[:, :, None] % 3 == 0) * eos, cache
