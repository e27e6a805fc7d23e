"""Attention in training: SDPA's CPU kernel against nmt.explicit_attention (scores held,
float32), forward + backward, at the recipe's shapes (heads of 64 dimensions, ~1k tokens per
batch) and longer sentences; where the explicit path stops paying sets
nmt.explicit_attention.EXPLICIT_ATTENTION_MAX.

    python benchmarks/attention_train.py [--tokens 1000] [--heads 4] [--repeat 20]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from nmt.explicit_attention import explicit_attention
from nmt.precision import cpu_has_fast_bf16


def timed(fn, repeat: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=1000, help="sentences x length per batch")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64, help="d_k = d_v")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    fast_bf16, why = cpu_has_fast_bf16()
    dtypes = [torch.float32] + ([torch.bfloat16] if fast_bf16 else [])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; bf16: {why}")
    print("forward + backward of one attention (padding mask), ms\n")
    print("| length | sentences | dtype | SDPA | explicit | SDPA / explicit |")
    print("|---|---|---|---|---|---|")
    for length in (25, 50, 100, 200):
        b = max(1, args.tokens // length)
        mask = torch.ones(b, 1, 1, length, dtype=torch.bool)
        mask[: max(1, b // 4), ..., length * 3 // 4 :] = False  # some padded sentences
        for dtype in dtypes:
            q, k, v = (
                torch.randn(b, args.heads, length, args.dim, dtype=dtype, requires_grad=True)
                for _ in range(3)
            )
            grad = torch.randn(b, args.heads, length, args.dim, dtype=dtype)
            sdpa = timed(
                lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask).backward(grad), args.repeat
            )
            explicit = timed(
                lambda: explicit_attention(q, k, v, mask=mask, is_causal=False, dropout_p=0.0).backward(grad),
                args.repeat,
            )
            name = "fp32" if dtype == torch.float32 else "bf16"
            print(f"| {length} | {b} | {name} | {sdpa:.2f} | {explicit:.2f} | {sdpa / explicit:.2f}x |")


if __name__ == "__main__":
    main()
