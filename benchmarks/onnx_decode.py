"""Greedy decoding with ONNX Runtime (`nmt export onnx`): the cached decoder step
(decoder_step.onnx) against the full-prefix decoder (decoder.onnx, the whole prefix at every step),
on the same export and sentences, in one process, alternating, so that the VM's drift hits both
sides alike. Prints sentences/s of each and whether the outputs are identical.

    python benchmarks/onnx_decode.py --checkpoint runs/demo/average \\
        --src-file ../shared/data/multi30k/test.en.gz
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import cpu_name  # noqa: E402

from nmt.data.lines import read_lines  # noqa: E402
from nmt.export.onnx import OnnxTranslator, export_onnx  # noqa: E402


def decode(
    translator: OnnxTranslator, sentences: list[str], *, batch: int, cached: bool
) -> tuple[list, float]:
    """(outputs, seconds) of translating ``sentences`` ``batch`` at a time."""
    start, out = time.perf_counter(), []
    for i in range(0, len(sentences), batch):
        out += translator.translate(sentences[i : i + batch], cached=cached)
    return out, time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="checkpoint or run directory, exported first")
    p.add_argument("--src-file", required=True)
    p.add_argument("--limit", type=int, default=None, help="the first N sentences (default: all)")
    p.add_argument("--batch", type=int, default=32, help="sentences per batch")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()

    sentences = list(read_lines(args.src_file))[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        translator = OnnxTranslator.load(
            export_onnx(args.checkpoint, Path(tmp) / "onnx"), threads=args.threads
        )
        print(f"{cpu_name()}, {args.threads} ONNX Runtime thread(s), float32, greedy, batch {args.batch}")
        print(f"export + load: {time.perf_counter() - start:.1f} s\n")
        decode(translator, sentences[: args.batch], batch=args.batch, cached=False)  # warm-up, both graphs
        decode(translator, sentences[: args.batch], batch=args.batch, cached=True)
        times: dict[bool, list[float]] = {False: [], True: []}
        outputs = {}
        for _ in range(args.repeat):
            for cached in (False, True):
                outputs[cached], seconds = decode(translator, sentences, batch=args.batch, cached=cached)
                times[cached].append(seconds)
                print(
                    f"{'cached' if cached else 'full-prefix'}: {seconds:.1f} s", file=sys.stderr, flush=True
                )
    same = sum(a == b for a, b in zip(outputs[False], outputs[True]))
    print("| decoder | sentences | seconds (each repeat) | sentences/s (best) | same outputs |")
    print("|---|---|---|---|---|")
    for cached, name in ((False, "decoder.onnx (full prefix)"), (True, "decoder_step.onnx (cached)")):
        each = " / ".join(f"{s:.1f}" for s in times[cached])
        rate = len(sentences) / min(times[cached])
        print(f"| {name} | {len(sentences)} | {each} | {rate:.1f} | {same}/{len(sentences)} |")
    print(f"\ncached / full prefix: {min(times[False]) / min(times[True]):.2f}x the sentences/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
