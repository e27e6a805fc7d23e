"""The command line of `nmt calibrate`: a checkpoint's confidences fitted on a validation set
(nmt.infer.calibrate), written as confidence.json into the checkpoint (or --out), which
Translator.load reads. User errors are TranslateError, printed as one line (nmt/cli.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..checkpoint import resolve_checkpoint
from .calibrate import calibrate
from .confidence import CALIBRATION
from .options import SearchOptions
from .results import TranslateError
from .translate import Translator, read_text_lines


def add_calibrate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint or run directory (its best / latest checkpoint)")
    parser.add_argument("--src", required=True, help="validation source text, one sentence per line")
    parser.add_argument("--ref", required=True, help="its reference translations (never a test set)")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the translations (paper: 4)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty (paper: 0.6)")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="source tokens per batch")
    parser.add_argument("--out", help=f"directory for {CALIBRATION} (default: the checkpoint's)")
    parser.add_argument("--device", help="cpu, cuda, cuda:N (default: cuda when available)")


def run_calibrate(args: argparse.Namespace, overrides: dict) -> int:
    """Fits, writes confidence.json, prints what it was fitted on and the fit's rank correlation."""
    sources, references = read_text_lines(args.src), read_text_lines(args.ref)
    if len(sources) != len(references):
        raise TranslateError(f"--src {args.src}: {len(sources)} lines, --ref {args.ref}: {len(references)}")
    if args.beam < 1:
        raise TranslateError(f"--beam {args.beam}: must be >= 1")
    directory = Path(args.out) if args.out else resolve_checkpoint(args.checkpoint)
    translator = Translator.load(args.checkpoint, device=args.device)
    options = SearchOptions(beam=args.beam, alpha=args.alpha)
    fitted_on = {
        "src": Path(args.src).name,
        "ref": Path(args.ref).name,
        "beam": args.beam,
        "alpha": args.alpha,
    }
    path, fitted = calibrate(
        translator,
        sources,
        references,
        options,
        directory=directory,
        fitted_on=fitted_on,
        batch_tokens=args.batch_tokens,
    )
    print(
        f"{path}: fitted on {fitted.sentences:,} sentences of {args.src}; Spearman of confidence and "
        f"sentence chrF {fitted.spearman:.3f}; the 10% least confident hold "
        f"{fitted.worst_caught:.0%} of the 10% worst"
    )
    return 0
