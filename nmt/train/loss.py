"""Label-smoothed cross entropy (section 5.4, eps_ls = 0.1), ignoring padding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll_loss(logits: Tensor, target: Tensor, *, epsilon: float,
                            ignore_index: int = 0) -> tuple[Tensor, Tensor, int]:
    """Sum over non-pad tokens of the smoothed loss and of the plain NLL.

    The smoothed target puts 1 - eps on the reference token and eps spread uniformly over the
    whole vocabulary W (as tensor2tensor / Szegedy et al.; fairseq spreads over W-1 instead):
        loss = (1 - eps) * (-log p_y) + eps * mean_w(-log p_w)
    logits (B, T, W), target (B, T). Returns (smoothed loss sum, nll sum, number of tokens).
    """
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, logits.size(-1))  # (B*T, W)
    target = target.reshape(-1)  # (B*T,)
    keep = target.ne(ignore_index)
    nll = -lprobs.gather(1, target.clamp(min=0)[:, None]).squeeze(1)  # (B*T,)
    smooth = -lprobs.mean(dim=-1)  # (B*T,) cross entropy against the uniform distribution
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    zero = lprobs.new_zeros(())
    return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum(), int(keep.sum())
