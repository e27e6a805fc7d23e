"""The command line of `nmt tune-alpha`: its arguments and its run over nmt.infer.tune (a BLEU
table, one row per length penalty alpha, and the best alpha), with `nmt translate`'s --mbr and
--rerank options (nmt.infer.command) so that each alpha is scored on the outputs `nmt translate`
writes with them. User errors are TranslateError, which `nmt` prints as one line (nmt/cli.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict

from .command import add_mbr_args, add_rerank_option, load_rerank, mbr_from_args, set_precision
from .mbr import MBR
from .options import SearchOptions
from .results import TranslateError
from .search import MAX_ALPHA
from .translate import Translator, check_output, read_text_lines, write_output
from .tune import DEFAULT_ALPHAS, AlphaRow, Grid, best_row, tune_alpha


def parse_numbers(text: str, *, what: str, low: float = 0.0, high: float = math.inf) -> tuple[float, ...]:
    """'0.3,0.5' -> (0.3, 0.5), each finite and in [low, high]; argparse.ArgumentTypeError naming
    ``what``."""
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a comma-separated list of numbers, e.g. 0.4,0.6"
        ) from None
    if not values or any(not (low <= v <= high and math.isfinite(v)) for v in values):
        bound = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise argparse.ArgumentTypeError(f"{text!r}: one or more {what}, each {bound}")
    return values


def parse_alphas(text: str) -> tuple[float, ...]:
    """'0.6,1.0,1.4' -> (0.6, 1.0, 1.4); each in [0, MAX_ALPHA]."""
    return parse_numbers(text, what="alphas", high=MAX_ALPHA)


def parse_weights(text: str) -> tuple[float, ...]:
    """'0.3,0.5' -> (0.3, 0.5); each in [0, 1] (--rerank-weights)."""
    return parse_numbers(text, what="weights", high=1.0)


def add_tune_alpha_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", nargs="+", help="checkpoint or run directory; several: an ensemble")
    parser.add_argument("--src", required=True, help="development source text, one sentence per line")
    parser.add_argument("--ref", required=True, help="its reference translations (detokenized)")
    parser.add_argument(
        "--alphas",
        type=parse_alphas,
        default=DEFAULT_ALPHAS,
        help="comma-separated grid (default: " + ",".join(map(str, DEFAULT_ALPHAS)) + ")",
    )
    parser.add_argument("--beam", type=int, default=4, help="beam size (paper: 4)")
    parser.add_argument("--max-len-a", type=float, default=1.0, help="max output length a*|x|+b (paper: a=1)")
    parser.add_argument("--max-len-b", type=int, default=50, help="(paper: b=50)")
    add_mbr_args(parser)  # each alpha scored on the MBR choices, as `nmt translate --mbr` writes them
    add_rerank_option(parser)  # a row per alpha and weight, as `nmt translate --rerank` writes them
    parser.add_argument(
        "--rerank-weights",
        type=parse_weights,
        default=(0.5,),
        help="--rerank: comma-separated weights w to try with each alpha (default 0.5)",
    )
    parser.add_argument("--tokenize", default="13a", help="sacreBLEU tokenizer (zh for Chinese output)")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded source tokens per batch")
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16", "fp16", "auto", "int8"),
        default="auto",
        help="as `nmt translate` (default: auto)",
    )
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, ... (default: cuda if available; cpu for --precision int8)"
    )
    parser.add_argument("--out", default=None, help="also write the table and the choice as JSON here")


def run_tune_alpha(args: argparse.Namespace, overrides: dict) -> int:
    """Prints a markdown table (one row per alpha) and, last, `best alpha: A` (read by the recipes)."""
    mbr = check_tune_alpha_args(args)
    sources, references = read_text_lines(args.src), read_text_lines(args.ref)
    if not sources:
        raise TranslateError(f"--src {args.src}: no development sentences")
    translator = Translator.load(
        args.checkpoint, device=args.device, precision="int8" if args.precision == "int8" else "fp32"
    )
    if args.precision != "int8":
        set_precision(translator, args.precision)
    rerank = load_rerank(args, 0.5)
    reranked = rerank is not None
    print_tune_header(args, len(sources), mbr=mbr, reranked=reranked)
    best, rows = tune_alpha(
        translator,
        sources,
        references,
        SearchOptions(beam=args.beam, max_len_a=args.max_len_a, max_len_b=args.max_len_b),
        Grid(args.alphas, mbr=mbr, rerank=rerank, rerank_weights=args.rerank_weights),
        tokenize=args.tokenize,
        batch_tokens=args.batch_tokens,
        on_alpha=lambda row: print_tune_row(row, reranked=reranked),
    )
    weight = best_row(rows).rerank_weight
    if args.out:
        write_output(args.out, tune_json(args, best, rows, mbr=mbr, reranked=reranked))
    if reranked:
        print(f"best rerank weight: {weight:g}")
    print(f"best alpha: {best:g}")
    sys.stdout.flush()
    return 0


def check_tune_alpha_args(args: argparse.Namespace) -> MBR | None:
    """The options of `nmt tune-alpha` that can be checked before anything is read or loaded;
    returns the MBR they ask for (or None)."""
    if args.beam < 1:
        raise TranslateError(f"--beam {args.beam}: must be >= 1")
    if not math.isfinite(args.max_len_a):  # the checks of `nmt translate` (nmt.infer.command.check_options)
        raise TranslateError(f"--max-len-a {args.max_len_a}: must be a finite number")
    if args.max_len_a < 0 or args.max_len_b < 0:
        raise TranslateError(f"--max-len-a {args.max_len_a} --max-len-b {args.max_len_b}: must be >= 0")
    if args.batch_tokens < 1:
        raise TranslateError(f"--batch-tokens {args.batch_tokens}: must be positive")
    mbr = mbr_from_args(args)
    if mbr is not None and args.rerank:
        raise TranslateError("--mbr and --rerank: choose one")
    if args.out:
        check_output(args.out)
    return mbr


def print_tune_header(args: argparse.Namespace, n_sentences: int, *, mbr: MBR | None, reranked: bool) -> None:
    """What is tuned on which data, then the head of the markdown table."""
    how = f", MBR ({mbr.utility}, T={mbr.temperature:g}) among the {args.beam}-best" if mbr else ""
    if reranked:
        how = f", the {args.beam}-best reranked with {' '.join(args.rerank)}"
    print(
        f"length penalty on {args.src} ({n_sentences} sentences), beam {args.beam}{how}, "
        f"sacreBLEU tok:{args.tokenize}"
    )
    print(f"| alpha |{' rerank weight |' if reranked else ''} BLEU | BP | chrF | hyp/ref length |")
    print(f"|---|{'---|' if reranked else ''}---|---|---|---|")


def print_tune_row(r: AlphaRow, *, reranked: bool) -> None:
    """One row of the table, printed as soon as its alpha (and rerank weight) is scored."""
    weight = f" {r.rerank_weight:g} |" if reranked else ""
    print(
        f"| {r.alpha:g} |{weight} {r.bleu:.2f} | {r.brevity_penalty:.3f} | {r.chrf:.2f} | "
        f"{r.hyp_len}/{r.ref_len} |",
        flush=True,
    )


def tune_json(
    args: argparse.Namespace, best: float, rows: list[AlphaRow], *, mbr: MBR | None, reranked: bool
) -> str:
    """`nmt tune-alpha --out`: the table, the choice and what was tuned, as JSON."""
    return (
        json.dumps(
            {
                "best_alpha": best,
                "beam": args.beam,
                "src": args.src,
                "ref": args.ref,
                "tokenize": args.tokenize,
                "checkpoints": [str(c) for c in args.checkpoint],
                "mbr": asdict(mbr) if mbr else None,
                "rerank": list(args.rerank) if reranked else None,
                "best_rerank_weight": best_row(rows).rerank_weight,
                "rows": [asdict(r) for r in rows],
            },
            indent=1,
        )
        + "\n"
    )
