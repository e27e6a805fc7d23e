"""nmt/train/loss.py: label-smoothed cross entropy against its formula, and the fused loss training runs
against the composite one."""

import math

import pytest
import torch

from nmt.train.loss import fused_label_smoothed_nll_loss, label_smoothed_nll_loss


def test_label_smoothed_loss_by_hand():
    logits = torch.tensor([[[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0]]])  # (1, 3, 4)
    target = torch.tensor([[1, 2, 0]])  # the last position is padding (id 0)
    eps = 0.1
    expected_loss = expected_nll = 0.0
    for pos, y in ((0, 1), (1, 2)):
        row = logits[0, pos].tolist()
        log_z = math.log(sum(math.exp(v) for v in row))
        logp = [v - log_z for v in row]
        q = [eps / 4 + (1 - eps if w == y else 0.0) for w in range(4)]  # smoothed target distribution
        expected_loss += -sum(qw * lw for qw, lw in zip(q, logp))
        expected_nll += -logp[y]
    loss, nll, n = label_smoothed_nll_loss(logits, target, epsilon=eps, ignore_index=0)
    assert n == 2
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-6)


def test_no_smoothing_is_cross_entropy():
    torch.manual_seed(0)
    logits, target = torch.randn(2, 5, 11), torch.randint(1, 11, (2, 5))
    loss, nll, n = label_smoothed_nll_loss(logits, target, epsilon=0.0, ignore_index=0)
    ref = torch.nn.functional.cross_entropy(logits.view(-1, 11), target.view(-1), reduction="sum")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6) and nll.item() == pytest.approx(
        ref.item(), rel=1e-6
    )


@pytest.mark.parametrize("kind", ["uniform", "fairseq"])
@pytest.mark.parametrize("block", [1, 7, 128])
def test_fused_loss_equals_composite_loss_and_gradient(kind, block):
    """The training loss (fused, gradient made in the forward pass, block by block) gives the same
    sums and the same d loss / d logits as the composite definition above, padding excluded."""
    torch.manual_seed(0)
    logits = (torch.randn(3, 11, 50) * 4).double()  # (B, T, W), large logits: max subtraction matters
    target = torch.randint(4, 50, (3, 11))
    target[0, 7:] = 0  # PAD
    target[2, 3:] = 0
    keep = target.ne(0)
    a = logits.clone().requires_grad_()
    loss_a, nll_a, n_a = label_smoothed_nll_loss(a, target, epsilon=0.1, kind=kind)
    (loss_a * 0.3).backward()
    b = logits.float().clone().requires_grad_()
    selected = b[keep]  # (K, W), as the model's select= gives them
    loss_b, nll_b, n_b = fused_label_smoothed_nll_loss(
        selected, target[keep], epsilon=0.1, kind=kind, block=block
    )
    (loss_b * 0.3).backward()
    assert n_a == n_b == int(keep.sum())
    assert loss_b.item() == pytest.approx(loss_a.item(), rel=1e-6)
    assert nll_b.item() == pytest.approx(nll_a.item(), rel=1e-6)
    assert not nll_b.requires_grad
    torch.testing.assert_close(b.grad.double(), a.grad, rtol=1e-5, atol=1e-7)
    assert b.grad[~keep].abs().max() == 0  # padding gets no gradient


@pytest.mark.parametrize("block", [7, 128])
def test_fused_loss_in_bf16_gives_the_float32_gradient_rounded_once(block):
    """bf16 logits (autocast training): each block's gradient is made in float32 and rounded to
    bf16 once, then scaled; so it equals the float32 gradient of the same logits to bf16 rounding
    (2^-8 relative) and the loss sums are float32's."""
    torch.manual_seed(0)
    logits = (torch.randn(300, 50) * 4).bfloat16()  # (N, W); N not a multiple of the block
    target = torch.randint(4, 50, (300,))
    a = logits.float().requires_grad_()
    loss_a, nll_a, _ = fused_label_smoothed_nll_loss(a, target, epsilon=0.1, block=block)
    (loss_a * 0.3).backward()
    b = logits.clone().requires_grad_()
    loss_b, nll_b, _ = fused_label_smoothed_nll_loss(b, target, epsilon=0.1, block=block)
    (loss_b * 0.3).backward()
    assert b.grad.dtype == torch.bfloat16
    assert loss_b.item() == pytest.approx(loss_a.item(), rel=1e-6) and nll_b.item() == pytest.approx(
        nll_a.item(), rel=1e-6
    )
    torch.testing.assert_close(b.grad.float(), a.grad, rtol=2**-7, atol=1e-6)
    assert (b.grad.float() - a.grad).abs().max() > 0  # it is rounded: bf16, not float32 relabelled


def test_fused_loss_in_fp16_scales_before_rounding():
    """fp16 logits (CUDA autocast with GradScaler): the gradient stays float32 until the backward's
    scale is applied, then is rounded once; rounding first would put the -eps/W entries into fp16's
    subnormals."""
    torch.manual_seed(0)
    logits = (torch.randn(40, 8000) * 4).half()  # (N, W): eps/W = 1.25e-5
    target = torch.randint(4, 8000, (40,))
    a = logits.float().requires_grad_()
    loss_a, _, _ = fused_label_smoothed_nll_loss(a, target, epsilon=0.1)
    (loss_a * 4096.0).backward()
    b = logits.clone().requires_grad_()
    loss_b, _, _ = fused_label_smoothed_nll_loss(b, target, epsilon=0.1)
    (loss_b * 4096.0).backward()
    assert b.grad.dtype == torch.float16
    torch.testing.assert_close(b.grad, a.grad.half(), rtol=0, atol=0)


def test_fused_loss_without_grad_matches():
    logits, target = torch.randn(9, 20), torch.randint(4, 20, (9,))
    with torch.no_grad():
        loss, nll, n = fused_label_smoothed_nll_loss(logits, target, epsilon=0.1)
    ref, ref_nll, _ = label_smoothed_nll_loss(logits[None], target[None], epsilon=0.1)
    assert n == 9 and loss.item() == pytest.approx(ref.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
