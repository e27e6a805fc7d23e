"""Where the time of a decode goes: torch.profiler operator table and cProfile Python functions.

    python benchmarks/profile_decode.py --checkpoint runs/demo/average --src-file runs/demo/data/test.en.txt \
        --limit 320 --beam 4 --batch 32 [--precision int8]

Prints the top operators by self CPU time (torch.profiler) and the top Python functions by
cumulative time (cProfile) of one BatchedSearch.sources call (after a warm-up). ``--steps``
instead times that call's parts with a clock around each (the encoder, every decoder step, every
float32 linear layer): the steps by how many rows (sentences x beams) they ran, and the linear
layers by weight shape with their rows and GFLOP/s in place; ``--batch-tokens`` batches as
`nmt translate` and the decoding benchmarks do.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import command_line, cpu_detail  # noqa: E402

from nmt.data.lines import clean_line, read_lines  # noqa: E402
from nmt.infer.options import SearchOptions
from nmt.infer.translate import BatchedSearch, Translator  # noqa: E402

ROW_BINS = ((1, 4), (5, 16), (17, 64), (65, 256), (257, 10**9))


def timed_parts(t, search, sources, kw) -> None:
    """One decode with a clock around the encoder, each decoder step and each packed linear
    layer; prints the steps by rows and the linear layers by shape (see the docstring)."""
    from nmt.infer import packed

    model, steps, encodes, linears = t.model, [], [], []
    decode_step, encode, forward = model.decode_step, model.encode, packed.PackedLinear.forward

    def clocked(fn, out, rows):
        def call(*a, **k):
            start = time.perf_counter()
            result = fn(*a, **k)
            out.append((rows(*a), time.perf_counter() - start))
            return result

        return call

    model.decode_step = clocked(decode_step, steps, lambda tokens, *_: tokens.size(0))
    model.encode = clocked(encode, encodes, lambda src: src.size(0))
    packed.PackedLinear.forward = clocked(
        forward, linears, lambda self, x: (self.in_features, self.out_features, x.numel() // x.size(-1))
    )
    try:
        start = time.perf_counter()
        search.sources(model, sources, **kw)
        total = time.perf_counter() - start
    finally:
        model.decode_step, model.encode, packed.PackedLinear.forward = decode_step, encode, forward
    stepped = sum(s for _, s in steps)
    encoded = sum(s for _, s in encodes)
    print(
        f"total {total:.2f} s (clocks included): encoder {encoded:.2f} s, {len(steps)} decoder steps "
        f"{stepped:.2f} s, the rest (search) {total - stepped - encoded:.2f} s"
    )
    print("| rows per step | steps | seconds | ms per step | mean rows |\n|---|---|---|---|---|")
    for lo, hi in ROW_BINS:
        got = [(r, s) for r, s in steps if lo <= r <= hi]
        if got:
            sec = sum(s for _, s in got)
            print(
                f"| {lo}-{hi if hi < 10**9 else ''} | {len(got)} | {sec:.2f} | {1e3 * sec / len(got):.2f} "
                f"| {sum(r for r, _ in got) / len(got):.0f} |"
            )
    print("| weight (in x out) | calls | mean rows | seconds | GFLOP/s |\n|---|---|---|---|---|")
    shapes: dict = {}
    for (k, n, m), sec in linears:
        c = shapes.setdefault((k, n), [0, 0, 0.0])
        c[0], c[1], c[2] = c[0] + 1, c[1] + m, c[2] + sec
    for (k, n), (calls, rows, sec) in sorted(shapes.items(), key=lambda kv: -kv[1][2]):
        print(
            f"| {k} x {n} | {calls} | {rows / calls:.0f} | {sec:.2f} | {2 * rows * k * n / sec / 1e9:.0f} |"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--src-file", required=True)
    p.add_argument("--limit", type=int, default=320)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="sentences per batch")
    p.add_argument("--precision", default="fp32", help="fp32 or int8")
    p.add_argument("--stopping", default="exact", help="exact (the paper's) or fast (CTranslate2's)")
    p.add_argument("--shortlist", help="a file of `nmt shortlist`: search each batch over its union")
    p.add_argument("--rows", type=int, default=25)
    p.add_argument("--sort", default="cumulative", help="cProfile order: cumulative or tottime")
    p.add_argument(
        "--steps", action="store_true", help="time the steps by rows and the linear layers by shape"
    )
    p.add_argument(
        "--batch-tokens", type=int, default=None, help="batch by padded source tokens (not --batch)"
    )
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    t = Translator.load(args.checkpoint, device="cpu", precision=args.precision, shortlist=args.shortlist)
    lines = [clean_line(s) for s in read_lines(args.src_file)][: args.limit]
    sources, _ = t.encode(lines)
    options = SearchOptions(beam=args.beam, alpha=0.6 if args.beam > 1 else 0.0, stopping=args.stopping)
    search = BatchedSearch(options, dtype=t.dtype, shortlist=t.shortlist)
    kw = dict(batch_tokens=10**9, max_sentences=args.batch)
    if args.batch_tokens:
        kw = dict(batch_tokens=args.batch_tokens)
    search.sources(t.model, sources[:4], **kw)  # warm-up
    start = time.perf_counter()
    search.sources(t.model, sources, **kw)
    plain = time.perf_counter() - start
    print(
        f"{len(sources)} sentences, beam {args.beam} ({args.stopping}), "
        f"{f'batches of {args.batch_tokens} tokens' if args.batch_tokens else f'batch {args.batch}'}, "
        f"{args.precision}, "
        f"{torch.get_num_threads()} threads: {plain:.2f} s unprofiled ({len(sources) / plain:.1f} sent/s)"
    )
    if args.steps:
        print(f"CPU: {cpu_detail()}; torch {torch.__version__}; {command_line('profile_decode')}")
        timed_parts(t, search, sources, kw)
        return 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        search.sources(t.model, sources, **kw)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    profiler = cProfile.Profile()
    profiler.enable()
    search.sources(t.model, sources, **kw)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(args.sort).print_stats(args.rows)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
