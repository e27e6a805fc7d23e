"""Where the time of a decode goes: torch.profiler operator table and cProfile Python functions.

    python benchmarks/profile_decode.py --checkpoint runs/demo/average --src-file runs/demo/data/test.en.txt \
        --limit 320 --beam 4 --batch 32 [--precision int8]

Prints the top operators by self CPU time (torch.profiler) and the top Python functions by
cumulative time (cProfile) of one BatchedSearch.sources call (after a warm-up).
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

from nmt.data.lines import clean_line, read_lines  # noqa: E402
from nmt.infer.options import SearchOptions
from nmt.infer.translate import BatchedSearch, Translator  # noqa: E402


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
    args = p.parse_args()

    t = Translator.load(args.checkpoint, device="cpu", precision=args.precision, shortlist=args.shortlist)
    lines = [clean_line(s) for s in read_lines(args.src_file)][: args.limit]
    sources, _ = t.encode(lines)
    options = SearchOptions(beam=args.beam, alpha=0.6 if args.beam > 1 else 0.0, stopping=args.stopping)
    search = BatchedSearch(options, dtype=t.dtype, shortlist=t.shortlist)
    kw = dict(batch_tokens=10**9, max_sentences=args.batch)
    search.sources(t.model, sources[:4], **kw)  # warm-up
    start = time.perf_counter()
    search.sources(t.model, sources, **kw)
    plain = time.perf_counter() - start
    print(
        f"{len(sources)} sentences, beam {args.beam} ({args.stopping}), batch {args.batch}, "
        f"{args.precision}, "
        f"{torch.get_num_threads()} threads: {plain:.2f} s unprofiled ({len(sources) / plain:.1f} sent/s)"
    )
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
