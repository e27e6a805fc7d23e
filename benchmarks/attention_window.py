"""Restricted self-attention (section 4, Table 1): time of one encoder layer, full vs window r.

Table 1: self-attention costs O(n^2 d) per layer with path length O(1); restricted to a window r,
O(r n d) with path length O(n / r). nmt implements the window as a band mask over the full score
matrix (one code path with the cache and SDPA), so the n x n scores are still computed: this prints
what that costs here, next to the operation counts of Table 1.

    PYTHONPATH=. python benchmarks/attention_window.py [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from nmt.config import small
from nmt.model import Encoder


def time_encoder_layer(n: int, window: int | None, *, repeats: int) -> float:
    cfg = small(1000)
    cfg.n_layers, cfg.dropout, cfg.attention_window = 1, 0.0, window
    torch.manual_seed(0)
    enc = Encoder(cfg, torch.nn.Embedding(1000, cfg.d_model)).eval()
    tokens = torch.randint(4, 1000, (1, n))
    pad = tokens.eq(0)
    with torch.no_grad():
        enc(tokens, pad)  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            enc(tokens, pad)
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lengths", default="128,512,1024")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d, r = small(1000).d_model, args.window
    print(f"one encoder layer, d_model={d}, batch 1, {args.threads} thread(s), window r={r}\n")
    print(
        "| n | Table 1 full n^2*d | Table 1 restricted (2r+1)*n*d | ratio | measured full ms | "
        "measured window ms |"
    )
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in args.lengths.split(",")):
        full = time_encoder_layer(n, None, repeats=args.repeats)
        windowed = time_encoder_layer(n, r, repeats=args.repeats)
        print(
            f"| {n} | {n * n * d:.3g} | {(2 * r + 1) * n * d:.3g} | {n / (2 * r + 1):.1f}x | "
            f"{full:.1f} | {windowed:.1f} |"
        )


if __name__ == "__main__":
    main()
