"""Two trainings side by side on one thread each, or one training on both threads?

`make recipe-60` trains two models for its ensemble. On a 2-core CPU they can train one after the
other on both cores (30 minutes each) or side by side on one core each (60 minutes each). Side by
side wins when one thread's matrix products use its core better than two threads share two cores
(no synchronisation between the threads of a product, smaller working sets per core). This times
the recipe model's full training steps (forward, fused loss, backward, Adam; `train_speed.bench`)
in P processes of T threads each, all at once, and prints the target tokens per second of each
process and of all together.

    python benchmarks/train_processes.py [--layouts 1x2,2x1] [--steps 30] [--precision auto] [--json FILE]

Each layout runs alone (one after the other); processes of a layout start together at a barrier.
``--json`` writes the table and the machine to FILE (what docs/performance.md's table is made from).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import write_table  # noqa: E402
from train_speed import bench  # noqa: E402

from nmt.allocator import keep_freed_memory  # noqa: E402
from nmt.config import small  # noqa: E402
from nmt.precision import cpu_has_fast_bf16  # noqa: E402

COLUMNS = ["round", "processes x threads", "target tok/s per process", "all together"]


def worker(threads: int, dtype, steps: int, batch: int, length: int, barrier, results) -> None:
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    keep_freed_memory()
    barrier.wait()
    tok_s, _ = bench(small(8000), dtype, batch=batch, length=length, steps=steps, pad=0.05)
    results.put(tok_s)


def run_layout(
    processes: int, threads: int, dtype, steps: int, batch: int, length: int, timeout: float = 600.0
) -> list[float]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(threads, dtype, steps, batch, length, barrier, results))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        out = [results.get(timeout=timeout) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a worker failed (exit codes {[p.exitcode for p in procs]})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layouts", default="1x2,2x1", help="PROCESSESxTHREADS, comma-separated")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="auto",
        help="auto: bf16 autocast where the CPU has fast bf16 (as nmt train's auto)",
    )
    parser.add_argument("--batch", type=int, default=40, help="sentences per step (the recipe: ~1k tokens)")
    parser.add_argument("--length", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=2, help="the layouts alternate, this many times")
    parser.add_argument("--json", help="write the table and the machine here")
    args = parser.parse_args()
    fast, why = cpu_has_fast_bf16()
    precision = args.precision if args.precision != "auto" else ("bf16" if fast else "fp32")
    dtype = torch.bfloat16 if precision == "bf16" else None
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {why}; {precision}; "
        f"recipe model (small, 8k vocabulary), {args.batch} x {args.length} tokens per step, "
        f"{args.steps} steps per process"
    )
    print("\n| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    totals: dict[str, list[float]] = {}
    rows = []
    for r in range(args.rounds):
        for layout in args.layouts.split(","):
            processes, threads = (int(v) for v in layout.split("x"))
            rates = run_layout(processes, threads, dtype, args.steps, args.batch, args.length)
            totals.setdefault(layout, []).append(sum(rates))
            rows.append([str(r + 1), layout, " / ".join(f"{v:,.0f}" for v in rates), f"{sum(rates):,.0f}"])
            print("| " + " | ".join(rows[-1]) + " |", flush=True)
    first = args.layouts.split(",")[0]
    for layout, v in totals.items():
        print(
            f"{layout}: mean {sum(v) / len(v):,.0f} target tok/s in all, "
            f"{sum(v) / sum(totals[first]):.2f}x {first}"
        )
    if args.json:
        write_table(
            args.json,
            "train_processes",
            what=f"{precision} training steps of the recipe model (small, 8k vocabulary; {args.batch} x "
            f"{args.length} tokens, {args.steps} steps a process), each layout's processes at once, "
            "target tok/s",
            precision=precision,
            columns=COLUMNS,
            rows=rows,
        )


if __name__ == "__main__":
    main()
