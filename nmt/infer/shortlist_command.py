"""The command line of `nmt shortlist`: its arguments and its run over nmt.infer.shortlist (IBM
Model 1 over a prepared directory's training pairs, the shortlist file, CTranslate2's vocabulary
map). User errors are ShortlistError, which `nmt` prints as one line (nmt/cli.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from .shortlist import BuildOptions, ShortlistError, build, save, write_vmap


def add_shortlist_args(parser: argparse.ArgumentParser) -> None:
    d = BuildOptions()
    parser.add_argument(
        "data", help="prepared data directory (`nmt prepare` output; its train split is read)"
    )
    parser.add_argument("--out", required=True, help="shortlist file to write")
    parser.add_argument(
        "--best",
        type=int,
        default=d.best,
        help=f"target pieces per source piece, by IBM Model 1 p(t|s) (default {d.best})",
    )
    parser.add_argument(
        "--frequent",
        type=int,
        default=d.frequent,
        help=f"most frequent target pieces, always scored (default {d.frequent})",
    )
    parser.add_argument(
        "--threshold", type=float, default=d.threshold, help="keep p(t|s) > this only (default 0)"
    )
    parser.add_argument(
        "--iterations", type=int, default=d.iterations, help=f"EM passes (default {d.iterations})"
    )
    parser.add_argument(
        "--identity",
        action="store_true",
        help="also list each source piece as its own candidate (Marian's shared vocabulary rule: "
        "pieces copied from the source; a larger union)",
    )
    parser.add_argument(
        "--max-sentences",
        type=int,
        default=d.max_sentences,
        help=f"read the first N training pairs (default {d.max_sentences:,})",
    )
    parser.add_argument(
        "--ctranslate2",
        metavar="MODEL_DIR",
        action="append",
        default=[],
        help="also write MODEL_DIR/vmap.txt, the same shortlist as CTranslate2's vocabulary map "
        "(MODEL_DIR: `nmt export ctranslate2` output; translate there with use_vmap=True)",
    )


def run_shortlist(args: argparse.Namespace, overrides: dict) -> int:
    if overrides:
        raise ShortlistError(f"--{next(iter(overrides))}.*: shortlist takes no configuration overrides")
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        raise ShortlistError(f"{out}: cannot write (a directory, or its folder does not exist)")
    options = BuildOptions(
        best=args.best,
        frequent=args.frequent,
        threshold=args.threshold,
        iterations=args.iterations,
        identity=args.identity,
        max_sentences=args.max_sentences,
    )

    def log(message: str) -> None:
        print(f"nmt shortlist: {message}", file=sys.stderr, flush=True)

    shortlist = build(args.data, options, log=log)
    save(shortlist, out)
    for model_dir in args.ctranslate2:
        write_vmap(shortlist, model_dir)
    sizes = [len(v) for v in shortlist.candidates.values()]
    log(
        f"wrote {out}: {len(shortlist.candidates):,} source pieces, "
        f"{np.mean(sizes) if sizes else 0:.1f} target "
        f"pieces each on average, {len(shortlist.frequent)} frequent "
        f"({shortlist.info['sentences']:,} sentence "
        f"pairs, {shortlist.info['seconds']} s)"
    )
    for model_dir in args.ctranslate2:
        log(f"wrote {Path(model_dir) / 'vmap.txt'}")
    return 0
