"""CUDA: the paths a GPU user takes (skipped where torch sees no CUDA device, as in CI).

Each test pins a number against the CPU or against itself: incremental decoding against the full
forward on the GPU, float32 translations against the CPU's, the loss curve of training in fp32 /
bf16 / fp16 (loss scaling) against the CPU's float32 curve, exact resume on the GPU, and torchrun
with nccl.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_trainer import TINY, train  # the tiny model's options (fp32 unless a test names a precision)
from train_fixtures import repo_env

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.config import tiny
from nmt.model import Transformer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

REPO = Path(__file__).resolve().parents[1]


def losses(run: Path) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["split"] == "train"]


@torch.no_grad()
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_incremental_decoding_equals_the_full_forward_on_cuda(dtype):
    torch.manual_seed(0)
    model = Transformer(tiny(40)).cuda().eval()
    src = torch.tensor([[5, 6, 7, 3, 0], [9, 9, 8, 7, 3], [4, 3, 0, 0, 0]], device="cuda")  # (3, S)
    tgt = torch.randint(4, 40, (3, 20), device="cuda")  # (3, T)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
        full = model(src, tgt).float()  # (3, T, V)
        memory, cache, steps = model.encode(src), None, []
        for t in range(tgt.size(1)):
            logits, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
            steps.append(logits.float())
    atol = 1e-4 if dtype is None else 5e-2  # bf16 matrix products: ~3 significant digits
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=atol, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_on_cuda_runs_no_cudnn_kernel_and_equals_the_math_kernel(causal):
    """nmt.attention.CUDA_SDPA_BACKENDS keeps cuDNN's attention out (an execution plan built per new
    shape): a bf16 forward and backward with a padding mask (or causal) runs none of its kernels, and
    its output and gradients equal SDPA's math kernel's in float32 to bf16's precision."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from nmt.attention import scaled_dot_product_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 8, 23, 64, device="cuda", requires_grad=True) for _ in range(3))  # (B, H, T, K)
    keep = torch.arange(23, device="cuda")[None, :] < torch.tensor([23, 20, 9, 1], device="cuda")[:, None]
    mask = None if causal else keep[:, None, None, :]  # (B, 1, 1, N): padded keys masked
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=causal, dropout_p=0.0)
        out.float().square().sum().backward()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events()]
    assert kernels and not [n for n in kernels if "cudnn" in n.lower()]
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    with sdpa_kernel([SDPBackend.MATH]):
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    ref.square().sum().backward()
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)  # bf16: ~3 significant digits
    for g, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, t.grad, atol=1e-1, rtol=5e-2)


def test_cpu_and_cuda_translate_alike_in_float32(tiny_data, tmp_path):
    from nmt.infer.translate import Translator

    train(
        tiny_data,
        tmp_path / "run",
        "--device",
        "cpu",
        "--train.precision=fp32",
        "--train.max_steps=60",
        "--train.save_every_steps=60",
        "--train.max_tokens=512",
    )
    sources = (tiny_data / "valid.en.txt").read_text().splitlines()[:30]
    outputs = {}
    for device in ("cpu", "cuda"):
        translator = Translator.load(tmp_path / "run", device=device, precision="fp32")
        assert translator.device.type == device
        outputs[device] = translator.translate_sentences(sources, beam=4, alpha=0.6)
    same = sum(a == b for a, b in zip(outputs["cpu"], outputs["cuda"]))
    assert same >= 0.9 * len(sources), list(zip(outputs["cpu"], outputs["cuda"]))  # near-ties may flip


@pytest.fixture(scope="module")
def cpu_curve(tiny_data, tmp_path_factory):
    """The loss curve of a float32 run on the CPU, without dropout (no random numbers drawn)."""
    run = tmp_path_factory.mktemp("cpu") / "run"
    train(tiny_data, run, "--device", "cpu", "--train.precision=fp32", *CURVE)
    return losses(run)


CURVE = ["--model.dropout=0", "--train.max_steps=80", "--train.save_every_steps=80", "--train.max_tokens=512"]


@pytest.mark.parametrize("precision, tolerance", [("fp32", 2e-3), ("bf16", 0.1), ("fp16", 0.1)])
def test_training_on_cuda_follows_the_cpu_in_each_precision(
    tiny_data, tmp_path, cpu_curve, precision, tolerance
):
    """80 updates without dropout: the GPU's loss curve is the CPU's float32 curve, to float32's
    rounding in fp32 and to ~0.1 nats under bf16 / fp16 autocast (fp16 with loss scaling)."""
    run = tmp_path / precision
    train(tiny_data, run, "--device", "cuda", f"--train.precision={precision}", *CURVE)
    curve = losses(run)
    assert len(curve) == len(cpu_curve) == 80
    assert cpu_curve[-1] < cpu_curve[0] - 0.5  # it learns
    worst = max(abs(a - b) for a, b in zip(curve, cpu_curve))
    assert worst < tolerance, list(zip(curve, cpu_curve))
    weights = load_file(str(ckpt.list_step_checkpoints(run)[-1] / "model.safetensors"))
    assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in weights.values())
    state = json.loads((ckpt.list_step_checkpoints(run)[-1] / "trainer_state.json").read_text())
    assert "cuda" in state["rng"]  # the CUDA generator is saved for resume


def test_resume_on_cuda_continues_as_the_straight_run(tiny_data, tmp_path):
    """Straight 2n updates against n, stop, --resume, n more: bit-identical, as two straight runs
    are to each other (a failure names the largest difference of each)."""
    common = [
        "--device",
        "cuda",
        "--train.precision=fp32",
        "--train.max_tokens=512",
        "--train.accum_steps=1",
        "--train.save_every_steps=15",
    ]
    train(tiny_data, tmp_path / "straight", *common, "--train.max_steps=30")
    train(tiny_data, tmp_path / "again", *common, "--train.max_steps=30")
    train(tiny_data, tmp_path / "stopped", *common, "--train.max_steps=15")
    assert (
        main(
            ["train", str(tiny_data), "--out", str(tmp_path / "stopped"), "--resume", "--train.max_steps=30"]
        )
        == 0
    )
    last = {
        name: ckpt.list_step_checkpoints(tmp_path / name)[-1] for name in ("straight", "again", "stopped")
    }
    assert {p.name for p in last.values()} == {"step_00000030"}
    weights = {name: load_file(str(p / "model.safetensors")) for name, p in last.items()}

    def largest_difference(a, b):
        return max((weights[a][k] - weights[b][k]).abs().max().item() for k in weights[a])

    repeat, resumed = largest_difference("straight", "again"), largest_difference("straight", "stopped")
    assert resumed <= repeat, f"resume differs by {resumed:g}; two straight runs by {repeat:g}"
    assert repeat == 0, f"two identical CUDA runs differ by {repeat:g}: a nondeterministic kernel"
    assert losses(tmp_path / "straight")[15:] == losses(tmp_path / "stopped")[15:]


def test_torchrun_on_one_gpu_uses_nccl(tiny_data, tmp_path):
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = repo_env(OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=1",
            f"--master_port={port}",
            "-m",
            "nmt",
            "train",
            str(tiny_data),
            "--out",
            str(tmp_path / "ddp"),
            *TINY,
            "--train.max_steps=5",
            "--train.save_every_steps=5",
            "--train.max_tokens=512",
        ],
        env=env,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(losses(tmp_path / "ddp")) == 5
    log = (tmp_path / "ddp" / "train.log").read_text() if (tmp_path / "ddp" / "train.log").exists() else ""
    assert "nccl" in (proc.stderr + proc.stdout + log).lower(), (proc.stderr + log)[-3000:]
