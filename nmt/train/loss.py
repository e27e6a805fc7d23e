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


def label_smoothed_nll_loss(
    logits: Tensor,
    target: Tensor,
    *,
    epsilon: float,
    kind: Literal["uniform", "fairseq"] = "uniform",
    ignore_index: int = PAD,
) -> tuple[Tensor, Tensor, int]:
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


class _FusedSmoothedCE(torch.autograd.Function):
    """Label-smoothed cross entropy whose gradient is computed in the forward pass, a block of rows
    at a time, so that the (N, W) logits are read a few times while in cache instead of going
    through log_softmax, gather, mean and their backwards (seven full passes and three (N, W)
    temporaries). d loss / d logits = softmax(logits) - q, q the smoothed target distribution."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, kind: str, block: int):
        n, w = logits.shape
        # d loss / d logits (N, W). For bf16 logits it is kept in bf16: each block is computed in
        # a float32 (C, W) workspace and rounded into it while in cache (not in a pass over (N, W)
        # in backward); bf16 has float32's exponent range, so rounding before the backward's scale
        # loses nothing more. Other dtypes keep it in float32 (fp16's GradScaler scale must come
        # before rounding, or the small entries -eps/W fall into fp16's subnormals).
        rounded = logits.dtype == torch.bfloat16
        grad = torch.empty(
            n, w, dtype=logits.dtype if rounded else torch.float32, device=logits.device
        )  # (N, W)
        work = (
            torch.empty(min(block, n), w, dtype=torch.float32, device=logits.device) if rounded else None
        )  # (C, W)
        loss = logits.new_zeros((), dtype=torch.float32)
        nll_sum = logits.new_zeros((), dtype=torch.float32)
        if kind == "uniform":  # q = eps/W everywhere, plus 1 - eps on the gold token
            q_other, q_gold = epsilon / w, 1.0 - epsilon + epsilon / w
        else:  # fairseq: eps/(W-1) on the others, exactly 1 - eps on the gold token
            q_other, q_gold = epsilon / max(w - 1, 1), 1.0 - epsilon
        for start in range(0, n, block):
            x = logits[start : start + block].float()  # (C, W)
            y = target[start : start + block, None]  # (C, 1)
            g = work[: x.size(0)] if rounded else grad[start : start + block]  # (C, W), written in place
            m = x.amax(dim=-1, keepdim=True)  # (C, 1)
            torch.sub(x, m, out=g)
            g.exp_()
            s = g.sum(dim=-1, keepdim=True)  # (C, 1)
            lse = m + s.log()  # (C, 1)
            nll = (lse - x.gather(1, y)).squeeze(1)  # (C,)
            if kind == "uniform":
                smooth = lse.squeeze(1) - x.mean(dim=-1)  # (C,) -mean_w log p_w
            else:
                smooth = (w * lse.squeeze(1) - x.sum(dim=-1) - nll) / max(w - 1, 1)
            loss += ((1.0 - epsilon) * nll + epsilon * smooth).sum()
            nll_sum += nll.sum()
            g.div_(s).sub_(q_other)  # p - q_other
            g.scatter_add_(1, y, g.new_full(y.shape, q_other - q_gold))  # gold: p - q_gold
            if rounded:
                grad[start : start + block].copy_(g)  # rounded to bf16
        ctx.save_for_backward(grad)
        ctx.dtype = logits.dtype
        ctx.mark_non_differentiable(nll_sum)
        return loss, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        (grad,) = ctx.saved_tensors
        return grad.mul_(grad_loss).to(ctx.dtype), None, None, None, None


def fused_label_smoothed_nll_loss(
    logits: Tensor,
    target: Tensor,
    *,
    epsilon: float,
    kind: Literal["uniform", "fairseq"] = "uniform",
    block: int = 128,
) -> tuple[Tensor, Tensor, int]:
    """The same sums as :func:`label_smoothed_nll_loss` for logits (N, W) of N real (non-pad)
    target tokens (N,), as training uses it: the smoothed loss carries the gradient, the NLL sum is
    returned without one. About 3x faster on CPU than the composite version (see
    benchmarks/train_speed.py); the two are equal to float rounding (tests/test_loss.py)."""
    if kind not in SMOOTHING_KINDS:
        raise ValueError(f"kind={kind!r}: choose from {SMOOTHING_KINDS}")
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(
            f"logits (N, W) and target (N,) expected, got {tuple(logits.shape)} and {tuple(target.shape)}"
        )
    if not (torch.is_grad_enabled() and logits.requires_grad):  # validation: no gradient to build
        loss, nll, _ = label_smoothed_nll_loss(
            logits[None], target[None], epsilon=epsilon, kind=kind, ignore_index=-1
        )
        return loss, nll, int(target.numel())
    loss, nll = _FusedSmoothedCE.apply(logits, target.long(), float(epsilon), kind, block)
    return loss, nll, int(target.numel())
