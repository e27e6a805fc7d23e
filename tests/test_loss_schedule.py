"""The loss and the learning-rate schedule against their formulas."""

import ctypes
import ctypes.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.train.loss import fused_label_smoothed_nll_loss, label_smoothed_nll_loss
from nmt.train.optim import inverse_sqrt_lr, linear_decay


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


@pytest.mark.parametrize("step", [1, 4000, 40000])
def test_schedule_formula(step):
    d_model, warmup = 512, 4000
    expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert inverse_sqrt_lr(step, d_model=d_model, warmup_steps=warmup) == pytest.approx(expected, rel=1e-12)


def test_linear_decay_factor():
    assert linear_decay(5, decay_start=0, decay_end=0) == 1.0  # no decay: eq. 3 as it is
    assert [linear_decay(s, decay_start=6, decay_end=10) for s in range(5, 12)] == [
        1,
        1,
        1,
        0.75,
        0.5,
        0.25,
        0,
    ]


def test_schedule_values():
    assert inverse_sqrt_lr(1, d_model=512, warmup_steps=4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    peak = inverse_sqrt_lr(4000, d_model=512, warmup_steps=4000)
    assert peak == pytest.approx(512**-0.5 / math.sqrt(4000))  # ~7.0e-4 at the end of warm-up
    assert inverse_sqrt_lr(40000, d_model=512, warmup_steps=4000) == pytest.approx(peak / math.sqrt(10))
    assert inverse_sqrt_lr(4000, d_model=512, warmup_steps=4000, lr_scale=2.0) == pytest.approx(2 * peak)


def test_declared_torch_floor_covers_fused_cpu_adam():
    """build_adam uses fused=True, which CPU tensors support from torch 2.4;
    pyproject.toml must not promise an older torch. (The declared floor, not the installed torch.)"""
    import re
    from pathlib import Path

    import torch

    from nmt.train.optim import build_adam

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    floor = re.search(r'"torch>=(\d+)\.(\d+)', text)
    assert floor, "pyproject.toml declares no torch floor"
    assert (int(floor.group(1)), int(floor.group(2))) >= (2, 4)
    opt = build_adam(torch.nn.Linear(2, 2).parameters(), betas=(0.9, 0.98), eps=1e-9)  # fused on CPU here
    assert opt.param_groups[0]["fused"]


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


def test_keep_freed_memory_is_numerically_neutral():
    """nmt.allocator only changes where glibc gets memory: a step gives the same numbers after it,
    and those numbers are log-softmax's (x - logsumexp(x), by hand in float64)."""
    from nmt.allocator import keep_freed_memory

    torch.manual_seed(0)
    x = torch.randn(300, 7000)
    before = torch.log_softmax(x, -1).sum()
    first = keep_freed_memory()
    assert keep_freed_memory() is first  # idempotent: the first call's answer, not a second mallopt
    after = torch.log_softmax(x, -1)
    assert torch.equal(after.sum(), before)
    xd = x.double()
    m = xd.max(-1, keepdim=True).values  # (300, 1)
    by_hand = xd - m - (xd - m).exp().sum(-1, keepdim=True).log()  # (300, 7000)
    torch.testing.assert_close(after.double(), by_hand, rtol=0, atol=2e-6)


# A fresh process (the thresholds are process-wide, set once): glibc's mallinfo2 counts the
# mmapped chunks (hblks) and the heap obtained from the system (arena). 64 MiB is above glibc's
# largest default mmap threshold (32 MiB), below nmt.allocator's 1 GiB.
MALLOC_PROBE = """
import ctypes, ctypes.util, json
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def probe():
    before = libc.mallinfo2()
    p = libc.malloc(64 << 20)
    during = libc.mallinfo2()
    libc.free(p)
    return {"mmapped": during.hblks - before.hblks, "heap_after_free": libc.mallinfo2().arena}
from nmt.allocator import keep_freed_memory
out = {"default": probe(), "first": keep_freed_memory(), "second": keep_freed_memory()}
out["after"] = probe()
print(json.dumps(out))
"""


def run_malloc_probe(**env) -> dict:
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        pytest.skip("not glibc >= 2.33 (no mallinfo2): keep_freed_memory is a no-op there")
    repo = Path(__file__).resolve().parents[1]
    ours = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    clean = {k: v for k, v in os.environ.items() if k not in ours}
    proc = subprocess.run(
        [sys.executable, "-c", MALLOC_PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**clean, "PYTHONPATH": str(repo), **env},
    )
    return json.loads(proc.stdout)


def test_keep_freed_memory_serves_large_blocks_from_the_heap_and_keeps_it():
    """Before: a 64 MiB block is its own mmap, unmapped on free. After keep_freed_memory() (True,
    and True again): it comes from the heap, and freeing it leaves the heap at >= 64 MiB (no trim)."""
    out = run_malloc_probe()
    assert out["default"]["mmapped"] == 1 and out["default"]["heap_after_free"] < 64 << 20
    assert out["first"] is True and out["second"] is True
    assert out["after"]["mmapped"] == 0 and out["after"]["heap_after_free"] >= 64 << 20


@pytest.mark.parametrize("variable", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_keep_freed_memory_leaves_a_users_malloc_settings_alone(variable):
    """With glibc's own variable set, keep_freed_memory() returns False and changes nothing."""
    out = run_malloc_probe(**{variable: str(16 << 20)})
    assert out["first"] is False and out["second"] is False
    assert out["after"]["mmapped"] == out["default"]["mmapped"] == 1
