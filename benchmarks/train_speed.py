"""Training throughput and model FLOP utilisation (MFU) on this machine.

For each model (base with a 37k vocabulary, small with 8k) and precision (fp32, bf16 autocast) it
times full optimizer steps (forward, label-smoothed loss, backward, Adam) on a realistic batch of
random tokens and prints target tokens/second and MFU = achieved FLOP/s / peak FLOP/s, where the
peak is a large matrix product in the same dtype measured in the same run. A precision whose peak
is under a tenth of float32's is emulated by this CPU (no AMX / AVX512-BF16): it is reported and
skipped, since a step would take minutes and prove nothing.

    python benchmarks/train_speed.py [--steps 3] [--models base,small] [--precisions fp32,bf16]
"""

from __future__ import annotations

import argparse
import time

import torch

from nmt.config import ModelConfig, base, small
from nmt.train.loss import label_smoothed_nll_loss
from nmt.model import Transformer
from nmt.train.optim import build_adam
from nmt.precision import autocast, cpu_has_fast_bf16

DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def peak_flops(dtype: torch.dtype | None, n: int = 2048, repeat: int = 5) -> float:
    dt = dtype or torch.float32
    a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
    a @ b
    start = time.perf_counter()
    for _ in range(repeat):
        a @ b
    return repeat * 2 * n ** 3 / (time.perf_counter() - start)


def train_flops(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int) -> float:
    """Matrix-product FLOPs of one training step (forward x 3: forward + backward)."""
    d, hk, hv = cfg.d_model, cfg.n_heads * cfg.d_k, cfg.n_heads * cfg.d_v
    attn_proj = 2 * d * (2 * hk + hv) + 2 * hv * d  # q, k, v, out per token
    ffn = 2 * 2 * d * cfg.d_ff
    src_tok, tgt_tok = batch * src_len, batch * tgt_len
    enc = cfg.n_layers * (src_tok * (attn_proj + ffn) + batch * 2 * src_len * src_len * (hk + hv))
    dec = cfg.n_layers * (tgt_tok * (attn_proj + ffn) + batch * 2 * tgt_len * tgt_len * (hk + hv)
                          + tgt_tok * 2 * d * (hk + hv)  # cross-attention q and out projections
                          + src_tok * 2 * d * (hk + hv)  # cross-attention k, v of the memory
                          + batch * 2 * tgt_len * src_len * (hk + hv))
    out = tgt_tok * 2 * d * cfg.tgt_vocab_size
    return 3.0 * (enc + dec + out)


def bench(cfg: ModelConfig, dtype, *, batch: int, length: int, steps: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = Transformer(cfg).train()
    opt = build_adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    src = torch.randint(4, cfg.src_vocab_size, (batch, length))
    tgt = torch.randint(4, cfg.tgt_vocab_size, (batch, length + 1))

    def step():
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
    return batch * length / seconds, train_flops(cfg, batch, length, length) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--models", default="base,small")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--length", type=int, default=25, help="tokens per sentence (both sides)")
    args = parser.parse_args()
    models = {"base": (base(37000), 4096), "small": (small(8000), 2048)}
    fast, why = cpu_has_fast_bf16()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {why}")
    peaks = {p: peak_flops(DTYPES[p]) for p in args.precisions.split(",")}
    for p, v in peaks.items():
        print(f"peak {p} matmul (2048^3): {v / 1e9:.1f} GFLOP/s")
    print(f"\n| model | vocab | precision | batch (sent x len) | target tok/s | GFLOP/s | MFU |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    for name in args.models.split(","):
        cfg, tokens = models[name]
        batch = tokens // args.length
        for p in args.precisions.split(","):
            if peaks[p] < 0.1 * peaks.get("fp32", peaks[p]):
                print(f"| {name} | {cfg.tgt_vocab_size} | {p} | {batch} x {args.length} | skipped: emulated "
                      f"({peaks[p] / 1e9:.2f} GFLOP/s peak) | | |")
                continue
            tok_s, flops = bench(cfg, DTYPES[p], batch=batch, length=args.length, steps=args.steps)
            results[(name, p)] = tok_s
            print(f"| {name} | {cfg.tgt_vocab_size} | {p} | {batch} x {args.length} | {tok_s:,.0f} | "
                  f"{flops / 1e9:.1f} | {flops / peaks[p]:.0%} |", flush=True)
    for name in args.models.split(","):
        if (name, "fp32") in results and (name, "bf16") in results:
            print(f"{name}: bf16 / fp32 = {results[(name, 'bf16')] / results[(name, 'fp32')]:.2f}x")


if __name__ == "__main__":
    main()
