"""Training throughput and model FLOP utilisation (MFU) on this machine.

For each model (base with a 37k vocabulary, small with 8k) and precision (fp32, bf16 autocast) it
times full optimizer steps (forward, label-smoothed loss, backward, Adam) on a realistic batch of
random tokens and prints target tokens/second and MFU = achieved FLOP/s / peak FLOP/s, where the
peak is a large matrix product in the same dtype measured in the same run. A precision whose peak
is under a tenth of float32's is emulated by this CPU (no AMX / AVX512-BF16): it is reported and
skipped, since a step would take minutes and prove nothing.

    python benchmarks/train_speed.py [--steps 3] [--models base,small] [--precisions fp32,bf16] [--json FILE]

``--json`` writes the measurements and the machine (benchmarks/machine.py's provenance) to FILE:
what docs/performance.md's table of this benchmark is made from (scripts/figures.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from nmt.allocator import keep_freed_memory
from nmt.config import ModelConfig, base, small
from nmt.model import Transformer
from nmt.precision import autocast, cpu_has_fast_bf16
from nmt.train.loss import fused_label_smoothed_nll_loss, label_smoothed_nll_loss
from nmt.train.optim import build_adam
from nmt.vocab import PAD

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import write_table  # noqa: E402  (benchmarks/machine.py)

DTYPES = {"fp32": None, "bf16": torch.bfloat16}
COLUMNS = ["model", "vocab", "precision", "loss path", "batch (sent x len)", "target tok/s", "GFLOP/s", "MFU"]


def peak_flops(dtype: torch.dtype | None, n: int = 2048, repeat: int = 5) -> float:
    dt = dtype or torch.float32
    a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
    a @ b
    start = time.perf_counter()
    for _ in range(repeat):
        a @ b
    return repeat * 2 * n**3 / (time.perf_counter() - start)


def train_flops(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int) -> float:
    """Matrix-product FLOPs of one training step (forward x 3: forward + backward)."""
    d, hk, hv = cfg.d_model, cfg.n_heads * cfg.d_k, cfg.n_heads * cfg.d_v
    attn_proj = 2 * d * (2 * hk + hv) + 2 * hv * d  # q, k, v, out per token
    ffn = 2 * 2 * d * cfg.d_ff
    src_tok, tgt_tok = batch * src_len, batch * tgt_len
    enc = cfg.encoder_layers * (src_tok * (attn_proj + ffn) + batch * 2 * src_len * src_len * (hk + hv))
    dec = cfg.decoder_layers * (
        tgt_tok * (attn_proj + ffn)
        + batch * 2 * tgt_len * tgt_len * (hk + hv)
        + tgt_tok * 2 * d * (hk + hv)  # cross-attention q and out projections
        + src_tok * 2 * d * (hk + hv)  # cross-attention k, v of the memory
        + batch * 2 * tgt_len * src_len * (hk + hv)
    )
    out = tgt_tok * 2 * d * cfg.tgt_vocab_size
    return 3.0 * (enc + dec + out)


def random_batch(
    cfg: ModelConfig, *, batch: int, length: int, pad: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens: src (B, L); tgt (B, L + 1) = BOS-position + target, row i padded at the end so
    that a mean fraction ``pad`` of the target positions is padding (as length-grouped batches)."""
    src = torch.randint(4, cfg.src_vocab_size, (batch, length))  # (B, L)
    tgt = torch.randint(4, cfg.tgt_vocab_size, (batch, length + 1))  # (B, L + 1)
    lengths = length - torch.linspace(0, 2 * pad * length, batch).round().long().clamp(max=length - 1)
    tgt[torch.arange(length + 1)[None, :] > lengths[:, None]] = PAD  # row i: BOS + lengths[i] tokens
    return src, tgt


def bench(
    cfg: ModelConfig,
    dtype,
    *,
    batch: int,
    length: int,
    steps: int,
    loss_path: str = "fused",
    pad: float = 0.0,
) -> tuple[float, float]:
    """loss_path 'fused' is what nmt trains with (only real target tokens projected, fused
    smoothed loss); 'composite' the earlier path (every position projected, log_softmax loss).
    ``pad``: fraction of each target row that is padding (tok/s counts real tokens only)."""
    torch.manual_seed(0)
    model = Transformer(cfg).train()
    opt = build_adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    src, tgt = random_batch(cfg, batch=batch, length=length, pad=pad)
    real = int(tgt[:, 1:].ne(PAD).sum())

    def step():
        if loss_path == "fused":
            keep = tgt[:, 1:].ne(PAD)
            with autocast("cpu", dtype):
                logits = model(src, tgt[:, :-1], keep)
            loss, _, n = fused_label_smoothed_nll_loss(logits, tgt[:, 1:][keep], epsilon=0.1)
        else:
            with autocast("cpu", dtype):
                logits = model(src, tgt[:, :-1])
            loss, _, n = label_smoothed_nll_loss(logits, tgt[:, 1:], epsilon=0.1)
        (loss / n).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up (allocations, kernels)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    return real / seconds, train_flops(cfg, batch, length, length) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--models", default="base,small")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument(
        "--paths",
        default="composite,fused",
        help="composite: every position projected, log_softmax loss, glibc's default malloc (nmt "
        "before issue 14); fused: real tokens only, fused loss, freed memory kept "
        "(nmt.allocator): what nmt trains with. Run in this order.",
    )
    parser.add_argument("--length", type=int, default=25, help="tokens per sentence (both sides)")
    parser.add_argument(
        "--pad",
        type=float,
        default=0.05,
        help="mean fraction of target positions that are padding (length-grouped batches)",
    )
    parser.add_argument("--json", help="write the measurements and the machine here")
    args = parser.parse_args()
    models = {"base": (base(37000), 4096), "small": (small(8000), 2048)}
    fast, why = cpu_has_fast_bf16()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {why}")
    peaks = {p: peak_flops(DTYPES[p]) for p in args.precisions.split(",")}
    for p, v in peaks.items():
        print(f"peak {p} matmul (2048^3): {v / 1e9:.1f} GFLOP/s")
    print("\nGFLOP/s and MFU count the padded batch (every position), so they compare paths at equal work.")
    print("\n| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    results, measured = {}, []
    paths = args.paths.split(",")
    for name in args.models.split(","):
        cfg, tokens = models[name]
        batch = tokens // args.length
        for p in args.precisions.split(","):
            if peaks[p] < 0.1 * peaks.get("fp32", peaks[p]):
                print(
                    f"| {name} | {cfg.tgt_vocab_size} | {p} | | {batch} x {args.length} | skipped: emulated "
                    f"({peaks[p] / 1e9:.2f} GFLOP/s peak) | | |"
                )
                continue
            for path in paths:
                if path == "fused":  # what the trainer does; process-wide, so "composite" runs first
                    keep_freed_memory()
                tok_s, flops = bench(
                    cfg,
                    DTYPES[p],
                    batch=batch,
                    length=args.length,
                    steps=args.steps,
                    loss_path=path,
                    pad=args.pad,
                )
                results[(name, p, path)] = tok_s
                row = [
                    name,
                    str(cfg.tgt_vocab_size),
                    p,
                    path,
                    f"{batch} x {args.length}",
                    f"{tok_s:,.0f}",
                    f"{flops / 1e9:.1f}",
                    f"{flops / peaks[p]:.0%}",
                ]
                measured.append(row)
                print("| " + " | ".join(row) + " |", flush=True)
    for (name, p, path), v in results.items():
        if path == "fused" and (name, p, "composite") in results:
            print(f"{name} {p}: fused / composite = {v / results[(name, p, 'composite')]:.2f}x")
        if p == "bf16" and (name, "fp32", path) in results:
            print(f"{name} {path}: bf16 / fp32 = {v / results[(name, 'fp32', path)]:.2f}x")
    if args.json:
        write_table(
            args.json,
            "train_speed",
            what="full training steps (forward, label-smoothed loss, backward, Adam) on one synthetic "
            f"batch of random tokens ({args.length} tokens a sentence, {args.pad:.0%} padding), "
            f"{args.steps} timed steps after one untimed, target tokens per second",
            auto="bf16" if fast else "fp32",
            bf16_check=why,
            peak_gflops={p: round(v / 1e9, 1) for p, v in peaks.items()},
            columns=COLUMNS,
            rows=measured,
        )


if __name__ == "__main__":
    main()
