"""A/B of the fused attention projections (`nmt.fused_projections`, set by
`nmt.infer.packed.pack_linears`) in one process: the same packed float32 model decodes the same
sentences with the fused products and with the separate q/k/v projections (`unfused`),
alternating, so that the VM's drift hits both sides alike. Prints the seconds of each repeat and
whether the outputs are identical.

    python benchmarks/fused_projections.py --checkpoint runs/multi30k-en-de/average \\
        --src-file runs/multi30k-en-de/data/test.en.txt
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt.attention import MultiheadAttention  # noqa: E402
from nmt.data.lines import clean_line, read_lines  # noqa: E402
from nmt.fused_projections import unfused  # noqa: E402
from nmt.infer.options import SearchOptions
from nmt.infer.translate import BatchedSearch, Translator  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--src-file", required=True)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stopping", default="fast")
    args = p.parse_args()

    t = Translator.load(args.checkpoint, device="cpu", precision="fp32")
    attns = [m for m in t.model.modules() if isinstance(m, MultiheadAttention)]
    if not any(m.fused_qkv or m.fused_kv for m in attns):
        print("this model has no fused projections (no oneDNN packing here)")
        return 1

    sources, _ = t.encode([clean_line(s) for s in read_lines(args.src_file)])
    print(f"{torch.get_num_threads()} threads, float32, stopping {args.stopping}\n")
    print(
        "| beam | sentences | batch | separate q/k/v (s) | fused (s) | best fused / best "
        "separate | same outputs |"
    )
    print("|---|---|---|---|---|---|---|")
    for beam, n, max_sentences, batch_tokens in (
        (1, 150, 1, 10**9),
        (4, 150, 1, 10**9),
        (1, 1000, None, 2048),
        (4, 1000, None, 2048),
    ):
        options = SearchOptions(beam=beam, alpha=0.6 if beam > 1 else 0.0, stopping=args.stopping)
        search = BatchedSearch(options, dtype=t.dtype)
        kw = dict(batch_tokens=batch_tokens, max_sentences=max_sentences)
        search.sources(t.model, sources[:4], **kw)  # warm-up
        times: dict[bool, list[float]] = {False: [], True: []}
        outputs = {}
        for _ in range(args.repeat):
            for on in (False, True):
                with contextlib.nullcontext() if on else unfused(t.model):
                    start = time.perf_counter()
                    out = search.sources(t.model, sources[:n], **kw)
                    times[on].append(time.perf_counter() - start)
                outputs[on] = [h[0].tokens for h in out]
        same = sum(a == b for a, b in zip(outputs[False], outputs[True]))
        batch = "1 sentence" if max_sentences else f"{batch_tokens} tokens"
        print(
            f"| {beam} | {min(n, len(sources))} | {batch} | {' / '.join(f'{x:.2f}' for x in times[False])} | "
            f"{' / '.join(f'{x:.2f}' for x in times[True])} | {min(times[True]) / min(times[False]):.2f} | "
            f"{same}/{len(outputs[True])} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
