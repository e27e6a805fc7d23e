"""Speed and peak memory of `nmt prepare files` on a synthetic corpus.

    python benchmarks/prepare_speed.py                  # 500k and 1M pairs
    python benchmarks/prepare_speed.py --pairs 200000   # 100k and 200k pairs

The corpus (Zipf-distributed pseudo-words, 5-40 words per sentence, target about 1.1x the
source) is generated into a temporary folder and deleted afterwards. Each prepare runs in a
child process so its peak RSS (getrusage of children) is measured alone; running two sizes a
factor 2 apart shows whether memory grows with the corpus (it should not once the corpus has
more sentences than prepare's --input-sentence-size sample, 1M by default).
Stage times (clean, vocabulary, encode) are parsed from prepare's log.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def make_corpus(folder: Path, n_pairs: int, *, seed: int = 0) -> tuple[Path, Path]:
    """Write n_pairs aligned synthetic sentences to folder/train.{xx,yy}; 50k-word vocab."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzäöüé"))
    words = ["".join(rng.choice(letters, size=k)) for k in rng.integers(2, 11, size=50_000)]
    probs = 1.0 / np.arange(1, len(words) + 1)
    probs /= probs.sum()
    paths = (folder / "train.xx", folder / "train.yy")
    with open(paths[0], "w") as fs, open(paths[1], "w") as ft:
        for start in range(0, n_pairs, 10_000):
            n = min(10_000, n_pairs - start)
            lens = rng.integers(5, 41, size=n)
            for f, scale, offset in ((fs, 1.0, 0), (ft, 1.1, 25_000)):
                ids = rng.choice(len(words), size=int(lens.sum() * scale) + n, p=probs)
                pos = 0
                out = []
                for k in (lens * scale).astype(int):
                    out.append(" ".join(words[(i + offset) % len(words)] for i in ids[pos : pos + k]))
                    pos += k
                f.write("\n".join(out) + "\n")
    return paths


def run_prepare(src: Path, tgt: Path, out: Path, *, vocab_size: int, threads: int) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "nmt",
        "prepare",
        "files",
        "--src",
        "xx",
        "--tgt",
        "yy",
        "--out",
        str(out),
        "--train",
        str(src),
        str(tgt),
        "--vocab-size",
        str(vocab_size),
        "--threads",
        str(threads),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    log = subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True).stdout
    wall = time.perf_counter() - start
    stages = [float(x) for x in re.findall(r" in ([0-9.]+)s$", log, flags=re.M)]
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # max over children
    meta = json.loads((out / "meta.json").read_text())
    return {
        "wall": wall,
        "stages": stages,
        "peak_mib": peak_kib / 1024,
        "grew": peak_kib > before,
        "kept": meta["splits"]["train"]["pairs"],
        "vocab": meta["vocab_size"],
        "tokens": meta["splits"]["train"]["src_tokens"] + meta["splits"]["train"]["tgt_tokens"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=1_000_000, help="largest corpus size")
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    sizes = sorted({max(1000, args.pairs // 2), args.pairs})
    rows = []
    with tempfile.TemporaryDirectory(prefix="nmt-bench-") as tmp:
        for n in sizes:
            folder = Path(tmp) / f"n{n}"
            folder.mkdir()
            t0 = time.perf_counter()
            src, tgt = make_corpus(folder, n)
            gen = time.perf_counter() - t0
            mb = (src.stat().st_size + tgt.stat().st_size) / 2**20
            r = run_prepare(src, tgt, folder / "out", vocab_size=args.vocab_size, threads=args.threads)
            rows.append((n, mb, r))
            print(f"  {n} pairs: generated in {gen:.0f}s, prepared in {r['wall']:.0f}s", file=sys.stderr)
    print(f"nmt prepare files, synthetic corpus, vocab {args.vocab_size}, {args.threads} threads")
    print(
        f"| {'pairs':>9} | {'text MiB':>8} | {'prepare s':>9} | {'clean/vocab/encode s':>20} | "
        f"{'pairs/s':>8} | {'tokens/s':>9} | {'peak RSS MiB':>12} | {'vocab':>6} |"
    )
    print(f"|{'-' * 11}|{'-' * 10}|{'-' * 11}|{'-' * 22}|{'-' * 10}|{'-' * 11}|{'-' * 14}|{'-' * 8}|")
    for n, mb, r in rows:
        rss = f"{r['peak_mib']:.0f}" if r["grew"] or n == rows[0][0] else f"<= {r['peak_mib']:.0f}"
        stages = "/".join(f"{x:.1f}" for x in r["stages"])
        print(
            f"| {n:>9} | {mb:>8.0f} | {r['wall']:>9.1f} | {stages:>20} | "
            f"{n / r['wall']:>8.0f} | {r['tokens'] / r['wall']:>9.0f} | {rss:>12} | "
            f"{r['vocab']:>6} |"
        )


if __name__ == "__main__":
    main()
