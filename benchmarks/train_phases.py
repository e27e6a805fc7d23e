"""Where a training step's time goes, and what real batch shapes cost against one fixed shape.

Times the recipe model's full training steps (forward under autocast, fused label-smoothed loss,
backward, Adam; what `nmt train` does per update) phase by phase with wall-clock timers, on one
fixed batch of random tokens (``--batch`` sentences of ``--length`` tokens). With ``--data DIR``
(an `nmt prepare` output) it also runs the first ``--batches`` batches of an epoch at their real
shapes (the trainer's length-grouped batcher, random token ids), ``--passes`` times over, so that
a cost paid once per new shape shows as a slower first pass. (torch.profiler's per-operator times
were far off on an AMX CPU, so this script uses plain timers around each phase.)

    python benchmarks/train_phases.py [--precision bf16] [--threads 2] [--data runs/m30k/data]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_speed import DTYPES, random_batch  # noqa: E402

from nmt.allocator import keep_freed_memory  # noqa: E402
from nmt.config import small  # noqa: E402
from nmt.data.batching import TokenBatchSampler  # noqa: E402
from nmt.data.dataset import ParallelDataset  # noqa: E402
from nmt.model import Transformer  # noqa: E402
from nmt.precision import autocast, cpu_has_fast_bf16  # noqa: E402
from nmt.train.loss import fused_label_smoothed_nll_loss  # noqa: E402
from nmt.train.optim import build_adam  # noqa: E402
from nmt.vocab import PAD  # noqa: E402

PHASES = ("forward", "loss", "backward", "adam")


def real_batches(
    data_dir: str, vocab: int, count: int, max_tokens: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``count`` training batches of epoch 0 at their real shapes, random ids:
    src (B, S), tgt (B, T + 1), padded as `collate` pads (EOS / BOS positions included)."""
    ds = ParallelDataset.load(data_dir, "train")
    sampler = TokenBatchSampler(
        src_lengths=ds.src_lengths, tgt_lengths=ds.tgt_lengths, max_tokens=max_tokens, seed=1
    )
    out = []
    for indices in sampler.batches(0)[:count]:
        src_len = [int(ds.src_lengths[i]) + 1 for i in indices]
        tgt_len = [int(ds.tgt_lengths[i]) + 1 for i in indices]
        src = torch.randint(4, vocab, (len(indices), max(src_len)))  # (B, S)
        tgt = torch.randint(4, vocab, (len(indices), max(tgt_len) + 1))  # (B, T + 1)
        for row, (s, t) in enumerate(zip(src_len, tgt_len)):
            src[row, s:] = PAD
            tgt[row, t + 1 :] = PAD
        out.append((src, tgt))
    return out


def run(model, opt, dtype, batches) -> tuple[float, dict[str, float]]:
    """Train on ``batches`` once; target tokens/s and seconds per phase (summed)."""
    spent = dict.fromkeys(PHASES, 0.0)
    tokens = 0
    for src, tgt in batches:
        t0 = time.perf_counter()
        keep = tgt[:, 1:].ne(PAD)  # (B, T)
        with autocast("cpu", dtype):
            logits = model(src, tgt[:, :-1], keep)  # (K, W)
        t1 = time.perf_counter()
        loss, _, n = fused_label_smoothed_nll_loss(logits, tgt[:, 1:][keep], epsilon=0.1)
        t2 = time.perf_counter()
        (loss / n).backward()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        for phase, a, b in zip(PHASES, (t0, t1, t2, t3), (t1, t2, t3, t4)):
            spent[phase] += b - a
        tokens += n
    return tokens / sum(spent.values()), spent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--precision", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--threads", type=int, default=0, help="0 = torch's default")
    parser.add_argument("--batch", type=int, default=40, help="sentences of the fixed batch")
    parser.add_argument("--length", type=int, default=25, help="tokens per sentence of the fixed batch")
    parser.add_argument("--steps", type=int, default=30, help="timed steps on the fixed batch")
    parser.add_argument("--data", help="an `nmt prepare` output: also time real batch shapes")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=1024, help="the batcher's budget (the recipe's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the trainer
    dtype = DTYPES[args.precision]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {cpu_has_fast_bf16()[1]}; "
        f"{args.precision}; recipe model (small, 8k vocabulary)"
    )
    torch.manual_seed(0)
    cfg = small(8000)
    model = Transformer(cfg).train()
    opt = build_adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    fixed = [random_batch(cfg, batch=args.batch, length=args.length, pad=0.05)]
    run(model, opt, dtype, fixed * 3)  # warm-up
    print("\n| batches | target tok/s | ms per step: " + " | ".join(PHASES) + " | total |")
    print("|---|---|" + "---|" * (len(PHASES) + 1))
    rows = [(f"fixed {args.batch} x {args.length}", fixed * args.steps)]
    if args.data:
        real = real_batches(args.data, cfg.tgt_vocab_size, args.batches, args.max_tokens)
        shapes = len({(s.shape, t.shape) for s, t in real})
        rows += [(f"{len(real)} real ({shapes} shapes), pass {k + 1}", real) for k in range(args.passes)]
    for label, batches in rows:
        tok_s, spent = run(model, opt, dtype, batches)
        ms = [spent[p] / len(batches) * 1000 for p in PHASES]
        print(
            f"| {label} | {tok_s:,.0f} | " + " | ".join(f"{m:.1f}" for m in ms) + f" | {sum(ms):.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
