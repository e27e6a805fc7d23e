"""Label-smoothed cross entropy (section 5.4, eps_ls = 0.1), ignoring padding.

Two ways to spread eps over a vocabulary of W tokens (``TrainConfig.label_smoothing_kind``):

* ``uniform`` (default): the target is (1 - eps) * onehot(y) + eps * uniform(W), so every token
  gets eps/W and the gold token 1 - eps + eps/W. This is label smoothing as defined by Szegedy
  et al. (2016, "Rethinking the Inception Architecture", section 7), the paper the Transformer
  cites for it, and what nmt has always trained with.
* ``fairseq``: the gold token gets exactly 1 - eps and each of the other W - 1 tokens
  eps/(W - 1), as tensor2tensor (``smoothing_cross_entropy``: confidence 1 - eps, low confidence
  eps/(W-1)) and fairseq (``label_smoothed_nll_loss``) do.

The two differ by eps/W on the gold token (1e-5 for eps 0.1 and W 10k): a named option so runs
can match either code base, not a correction.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ..vocab import PAD

SMOOTHING_KINDS = ("uniform", "fairseq")


def label_smoothed_nll_loss(logits: Tensor, target: Tensor, *, epsilon: float,
                            kind: Literal["uniform", "fairseq"] = "uniform",
                            ignore_index: int = PAD) -> tuple[Tensor, Tensor, int]:
    """Sum over non-pad tokens of the smoothed loss and of the plain NLL.

    kind="uniform" (Szegedy et al.; eps/W on every token, see the module docstring):
        loss = (1 - eps) * (-log p_y) + eps * mean_w(-log p_w)
    kind="fairseq" (tensor2tensor / fairseq; gold exactly 1 - eps, the others eps/(W-1)):
        loss = (1 - eps) * (-log p_y) + eps/(W-1) * sum_{w != y}(-log p_w)
    logits (B, T, W), target (B, T). Returns (smoothed loss sum, nll sum, number of tokens).
    """
    if kind not in SMOOTHING_KINDS:
        raise ValueError(f"kind={kind!r}: choose from {SMOOTHING_KINDS}")
    w = logits.size(-1)
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, w)  # (B*T, W)
    target = target.reshape(-1)  # (B*T,)
    keep = target.ne(ignore_index)
    nll = -lprobs.gather(1, target.clamp(min=0)[:, None]).squeeze(1)  # (B*T,)
    if kind == "uniform":
        smooth = -lprobs.mean(dim=-1)  # (B*T,) cross entropy against the uniform distribution
    else:
        smooth = (-lprobs.sum(dim=-1) - nll) / max(w - 1, 1)  # (B*T,) mean over the other W-1
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    zero = lprobs.new_zeros(())
    return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum(), int(keep.sum())
