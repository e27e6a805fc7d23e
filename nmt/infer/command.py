"""The command line of translation: `nmt translate`, `nmt tune-alpha`, `nmt shortlist`, `nmt export`
and `nmt plot-attention`: each one's arguments (``add_*_args``) and run (``run_*``), over the
modules of their concepts (translate, tune, shortlist, export_*, plot_attention). Every option is
checked before anything is read or loaded; user errors are TranslateError, ExportError,
ShortlistError or PlotAttentionError, which `nmt` prints as one line (nmt/cli.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import CheckpointError
from ..precision import resolve_precision
from .attention import align, format_alignment
from .export_ctranslate2 import QUANTIZATIONS, ExportError, export_ctranslate2
from .export_huggingface import export_huggingface
from .mbr import MBR, UTILITIES, mbr_results
from .plot_attention import PlotAttentionError, plot_attention
from .rerank import Rerank
from .results import ConstraintsError, TranslateError, Translation
from .search import STOPPING, default_alpha
from .shortlist import BuildOptions, ShortlistError, build, save, write_vmap
from .text import TextTranslator, truncation_message
from .translate import Sampling, Translator, check_output, read_text_lines, write_output
from .tune import DEFAULT_ALPHAS, AlphaRow, best_row, tune_alpha


# ----------------------------------------------------------------------------- `nmt translate`
def add_translate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        nargs="+",
        help="checkpoint directory or run directory; several: an ensemble averaging "
        "their log-probabilities per step (one vocabulary)",
    )
    parser.add_argument("-i", "--input", default="-", help="raw text, one sentence per line (default: stdin)")
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (paper: 4; 1 = greedy)")
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="length penalty ((5+|Y|)/6)^alpha (default: the paper's 0.6; 0 with --beam 1, "
        "which is then plain greedy search)",
    )
    parser.add_argument("--max-len-a", type=float, default=1.0, help="max output length a*|x|+b (paper: a=1)")
    parser.add_argument("--max-len-b", type=int, default=50, help="(paper: b=50)")
    parser.add_argument(
        "--stopping",
        choices=STOPPING,
        default=None,
        help="beam search early termination: exact (default, the paper's: stop when no active "
        "hypothesis can still win) or fast (CTranslate2's: stop when the best extension "
        "is EOS or beam hypotheses have finished; fewer steps, may differ; the only "
        "rule of --engine ctranslate2)",
    )
    parser.add_argument(
        "--nbest", type=int, default=1, help="K > 1: write up to K lines per input, 'LINE<TAB>SCORE<TAB>TEXT'"
    )
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded source tokens per batch")
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16", "fp16", "auto", "int8"),
        default="auto",
        help="auto: bf16 autocast only where nmt.precision finds it fast; fp16: CUDA only; int8: "
        "dynamic int8 linear layers (CPU; the default --device then)",
    )
    parser.add_argument(
        "--prefix-file",
        default=None,
        help="one target prefix per input line: each output starts with it (empty line: none)",
    )
    parser.add_argument(
        "--constraints",
        default=None,
        metavar="FILE",
        help="terminology: one line per input line holding the target phrases its output must "
        "contain, separated by tabs, in any order (empty line: none); beam search with "
        "dynamic beam allocation (Post & Vilar 2018); torch engine, not with --sampling, "
        "--prefix-file or --shortlist",
    )
    add_mbr_args(parser)
    add_rerank_args(parser)
    add_sampling_args(parser)
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, ... (default: cuda if available; cpu for --precision int8)"
    )
    parser.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default="strict",
        help="invalid UTF-8 input: an error naming the line, or U+FFFD",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar or precision note")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads for torch (torch.set_num_threads; default 0: torch's choice)",
    )
    parser.add_argument(
        "--engine",
        choices=("torch", "ctranslate2"),
        default="torch",
        help="ctranslate2: CHECKPOINT may also be an `nmt export ctranslate2` directory",
    )
    parser.add_argument(
        "--shortlist",
        default=None,
        metavar="FILE",
        help="score only the target pieces of this vocabulary shortlist (`nmt shortlist`) that a "
        "batch's source makes likely, normalised over them (faster; outputs may differ); "
        "--engine ctranslate2: its vocabulary map (MODEL_DIR/vmap.txt)",
    )
    parser.add_argument(
        "--alignment",
        action="store_true",
        help="append '<TAB>s-t ...' per output: source-output piece alignment from the last "
        "layer's encoder-decoder attention averaged over heads (fairseq's convention)",
    )


def add_sampling_args(parser: argparse.ArgumentParser) -> None:
    """--sampling and its options (read by check_translate_args)."""
    parser.add_argument(
        "--sampling", action="store_true", help="sample one output per line instead of beam search"
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling: softmax(logits / T)")
    parser.add_argument(
        "--topk", type=int, default=0, help="sampling: only the K most probable tokens (0: all)"
    )
    parser.add_argument("--topp", type=float, default=1.0, help="sampling: only the top-p nucleus (1: all)")
    parser.add_argument("--seed", type=int, default=0, help="sampling: seed (line i always draws the same)")


def run_translate(args: argparse.Namespace, overrides: dict) -> int:
    """`nmt translate`: the options checked, the inputs read, the translator loaded, the lines
    searched (then the MBR or reranked choice), the outputs written (stdout, or -o atomically)."""
    if overrides:
        raise TranslateError(f"--{next(iter(overrides))}.*: translate takes no configuration overrides")
    sampling, mbr = check_translate_args(args)
    rerank = load_rerank(args, args.rerank_weight)  # options checked before anything is read
    lines, prefix, constraints = read_translate_inputs(args)
    translator = translator_from_args(args)
    results = translate_lines(
        args,
        translator,
        lines,
        nbest=args.beam if mbr or rerank else args.nbest,
        prefix=prefix,
        sampling=sampling,
        constraints=constraints,
    )
    if mbr is not None:
        results = mbr_results(results, mbr)
    elif rerank is not None:  # the beam's n-best reordered; --nbest K keeps the first K
        results = [
            r[: args.nbest]
            for r in translator.rerank(
                lines, results, rerank, alpha=args.alpha, batch_tokens=args.batch_tokens
            )
        ]
    text = "".join(line + "\n" for line in output_lines(args, translator, lines, results))
    if args.output == "-":
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    else:
        write_output(args.output, text)
    return 0


def check_translate_args(args: argparse.Namespace) -> tuple[Sampling | None, MBR | None]:
    """The options of `nmt translate` that can be checked before anything is read or loaded (sets
    --threads, and --alpha's default); returns the Sampling and the MBR they ask for (or None)."""
    if args.beam < 1 or not 1 <= args.nbest <= args.beam:
        raise TranslateError(
            f"--beam {args.beam} --nbest {args.nbest}: need beam >= 1 and 1 <= nbest <= beam"
        )
    if args.batch_tokens < 1:
        raise TranslateError(f"--batch-tokens {args.batch_tokens}: must be positive")
    check_options(args)
    if args.alpha is None:
        args.alpha = default_alpha(args.beam)
    check_output(args.output)  # before translating anything
    sampling = None
    if args.sampling:
        if args.nbest != 1:
            raise TranslateError(f"--sampling --nbest {args.nbest}: sampling gives one output per line")
        if not (args.temperature > 0 and args.topk >= 0 and 0 < args.topp <= 1):
            raise TranslateError(
                f"--temperature {args.temperature} --topk {args.topk} --topp {args.topp}: "
                "need T > 0, K >= 0 (0: all), 0 < P <= 1"
            )
        sampling = Sampling(args.temperature, args.topk, args.topp, args.seed)
    mbr = mbr_from_args(args)
    if mbr is not None and (args.sampling or args.nbest != 1):
        raise TranslateError(
            f"--mbr chooses one output among the beam's n-best: needs --beam >= 2, --nbest 1 "
            f"and no --sampling (got --nbest {args.nbest}{' --sampling' if args.sampling else ''})"
        )
    if args.rerank and (args.sampling or mbr is not None):
        raise TranslateError("--rerank chooses among the beam's n-best: not with --sampling or --mbr")
    if args.alignment and (len(args.checkpoint) > 1 or args.engine != "torch"):
        raise TranslateError(
            "--alignment reads one torch model's cross-attention: not with an ensemble "
            "or --engine ctranslate2"
        )
    return sampling, mbr


def read_translate_inputs(
    args: argparse.Namespace,
) -> tuple[list[str], list[str] | None, list[list[str]] | None]:
    """The input lines, and the lines of --prefix-file and of --constraints (target phrases
    separated by tabs, nmt.infer.constraints) that go with them, one per input line."""
    lines = read_text_lines(args.input, errors=args.errors)
    prefix = None
    if args.prefix_file is not None:
        prefix = read_text_lines(args.prefix_file, errors=args.errors)
        if len(prefix) != len(lines):
            raise TranslateError(
                f"{args.prefix_file}: {len(prefix)} prefix lines for {len(lines)} input lines"
            )
    constraints = None
    if args.constraints is not None:
        if args.sampling or prefix is not None or args.shortlist is not None or args.engine != "torch":
            raise TranslateError(
                "--constraints: the torch engine's beam search over the full vocabulary (not with "
                "--sampling, --prefix-file, --shortlist or --engine ctranslate2)"
            )
        constraints = [line.split("\t") for line in read_text_lines(args.constraints, errors=args.errors)]
        if len(constraints) != len(lines):
            raise TranslateError(
                f"{args.constraints}: {len(constraints)} constraint lines for {len(lines)} input lines"
            )
    return lines, prefix, constraints


def translator_from_args(args: argparse.Namespace) -> TextTranslator:
    """The translator of the checkpoints on --engine and --device at --precision (the torch engine:
    loaded in float32, then set_precision, or int8); the precision note on stderr unless --quiet."""
    int8 = args.precision == "int8"
    try:
        if args.engine != "torch" and int8:
            raise TranslateError(
                "--precision int8 is the torch engine's; for CTranslate2 use "
                "`nmt export ctranslate2 --quantization int8`"
            )
        translator = Translator.load(
            args.checkpoint,
            device=args.device,
            engine=args.engine,
            shortlist=args.shortlist,
            precision=("int8" if int8 else "fp32") if args.engine == "torch" else args.precision,
        )
    except (CheckpointError, ExportError) as e:
        raise TranslateError(str(e)) from None
    if args.engine != "torch":
        reason = f"ctranslate2 compute type {translator.model.translator.compute_type}"
    elif int8:
        reason = "int8 dynamic quantization of the linear layers (requested)"
    else:
        reason = set_precision(translator, args.precision)
    if not args.quiet:
        print(f"nmt translate: precision: {reason}", file=sys.stderr)
    return translator


def translate_lines(
    args: argparse.Namespace,
    translator: TextTranslator,
    lines: list[str],
    *,
    nbest: int,
    prefix: list[str] | None,
    sampling: Sampling | None,
    constraints: list[list[str]] | None,
) -> list[list[Translation]]:
    """``translator.translate_nbest`` of ``lines`` with the search options of ``args``; truncation
    warnings and a progress bar (not for stdin or --quiet) on stderr; a ConstraintsError names
    the --constraints file."""
    from tqdm import tqdm

    limit = translator.model.cfg.max_positions

    def warn(i: int, n: int) -> None:
        print(f"nmt translate: warning: {truncation_message(i, n, limit)}", file=sys.stderr)

    bar = tqdm(
        total=sum(1 for s in lines if s.strip()),
        unit="sent",
        file=sys.stderr,
        disable=args.quiet or args.input == "-",
    )
    try:
        results = translator.translate_nbest(
            lines,
            beam=args.beam,
            alpha=args.alpha,
            max_len_a=args.max_len_a,
            max_len_b=args.max_len_b,
            nbest=nbest,
            batch_tokens=args.batch_tokens,
            on_truncate=warn,
            on_batch=bar.update,
            prefix=prefix,
            sampling=sampling,
            **({} if args.stopping is None else {"stopping": args.stopping}),
            **({} if constraints is None else {"constraints": constraints}),
        )
    except ConstraintsError as e:  # its line is the constraints file's
        raise TranslateError(f"{args.constraints}: {e}") from None
    bar.close()
    return results


def output_lines(
    args: argparse.Namespace, translator: TextTranslator, lines: list[str], results: list[list[Translation]]
) -> list[str]:
    """One line per output: its text, or 'LINE<TAB>SCORE<TAB>TEXT' with --nbest K > 1; --alignment
    appends '<TAB>s-t ...' (nmt.infer.attention: last layer, heads averaged, 0-based piece indices)."""
    if args.nbest == 1:
        out = [r[0].text for r in results]
    else:
        out = [f"{n}\t{t.score:.4f}\t{t.text}" for n, r in enumerate(results, start=1) for t in r]
    if args.alignment:
        sources, _ = translator.encode(lines)
        pairs = [
            format_alignment(align(translator.model, sources[i], t.tokens))
            for i, r in enumerate(results)
            for t in r
        ]
        out = [f"{line}\t{a}" for line, a in zip(out, pairs)]
    return out


def set_precision(translator: Translator, precision: str) -> str:
    """The CLI's --precision for a torch-engine translator loaded with precision "fp32" (packed
    float32 linears): sets its autocast dtype and returns why; fp16 on a CPU is a TranslateError."""
    try:
        translator.dtype, reason = resolve_precision(precision, translator.device)
    except ValueError as e:  # fp16 on a CPU
        raise TranslateError(f"--precision {precision} on {translator.device}: {e}") from None
    return reason


def check_options(args: argparse.Namespace) -> None:
    """Numbers, --device and --threads, checked before anything is read or loaded; sets threads."""
    for name in ("alpha", "max_len_a"):
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            raise TranslateError(f"--{name.replace('_', '-')} {value}: must be a finite number")
    if args.max_len_a < 0 or args.max_len_b < 0:
        raise TranslateError(f"--max-len-a {args.max_len_a} --max-len-b {args.max_len_b}: must be >= 0")
    if args.threads < 0:
        raise TranslateError(f"--threads {args.threads}: must be >= 1 (0: torch's default)")
    if args.device is not None:
        try:
            device = torch.device(args.device)
        except (RuntimeError, ValueError):
            raise TranslateError(
                f"--device {args.device}: not a device name (cpu, cuda, cuda:1, ...)"
            ) from None
        try:
            torch.empty(1, device=device)
        except Exception as e:  # noqa: BLE001 (torch raises RuntimeError or AssertionError here)
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TranslateError(f"--device {args.device}: not available on this machine ({why})") from None
    if args.threads:
        torch.set_num_threads(args.threads)


# ----------------------------------------------------------------------------- --mbr, --rerank
def add_mbr_args(parser: argparse.ArgumentParser) -> None:
    """--mbr and its options, for `nmt translate` and `nmt tune-alpha` (read by mbr_from_args)."""
    parser.add_argument(
        "--mbr",
        action="store_true",
        help="write the minimum-Bayes-risk choice among the beam's --beam best "
        "(expected --mbr-utility against the others, weighted by the model) "
        "instead of the top one (nmt.infer.mbr)",
    )
    parser.add_argument(
        "--mbr-utility",
        choices=UTILITIES,
        default="chrf",
        help="--mbr: sentence chrF (default) or sentence BLEU",
    )
    parser.add_argument(
        "--mbr-temperature",
        type=float,
        default=0.5,
        help="--mbr: candidate weights softmax(score / T) (default 0.5)",
    )


def mbr_from_args(args: argparse.Namespace) -> MBR | None:
    """The MBR of --mbr / --mbr-utility / --mbr-temperature (None without --mbr); a TranslateError
    when the beam gives no choice (--beam 1) or the temperature is not positive."""
    if not args.mbr:
        return None
    if args.beam < 2:
        raise TranslateError(
            f"--mbr chooses among the beam's n-best: needs --beam >= 2 (got --beam {args.beam})"
        )
    if not args.mbr_temperature > 0:
        raise TranslateError(f"--mbr-temperature {args.mbr_temperature}: must be > 0")
    return MBR(args.mbr_utility, args.mbr_temperature)


def add_rerank_args(parser: argparse.ArgumentParser, *, tune: bool = False) -> None:
    """--rerank CK [CK ...] and its weight (--rerank-weight; `nmt tune-alpha`: --rerank-weights)."""
    parser.add_argument(
        "--rerank",
        nargs="+",
        default=None,
        metavar="CHECKPOINT",
        help="rescore the beam's --beam best with these checkpoints (usually a right-to-left "
        "model, model.right_to_left; several: their mean) and write the best by "
        "(1-w) * own + w * their log-probability, over the length penalty (nmt.infer.rerank)",
    )
    if tune:
        parser.add_argument(
            "--rerank-weights",
            type=parse_weights,
            default=(0.5,),
            help="--rerank: comma-separated weights w to try with each alpha (default 0.5)",
        )
    else:
        parser.add_argument(
            "--rerank-weight",
            type=float,
            default=0.5,
            help="--rerank: the rescoring models' weight w in [0, 1] (default 0.5)",
        )


def load_rerank(args: argparse.Namespace, weight: float) -> Rerank | None:
    """The Rerank of --rerank (None without it), loaded on --device at --precision; TranslateError
    for a bad weight, a beam without a choice, or an engine other than torch."""
    if not args.rerank:
        return None
    if args.beam < 2:
        raise TranslateError(
            f"--rerank chooses among the beam's n-best: needs --beam >= 2 (got --beam {args.beam})"
        )
    if not 0 <= weight <= 1:
        raise TranslateError(f"--rerank-weight {weight}: must be in [0, 1]")
    if getattr(args, "engine", "torch") != "torch":
        raise TranslateError("--rerank rescores the torch engine's n-best: not with --engine ctranslate2")
    try:
        scorer = Translator.load(
            args.rerank, device=args.device, precision="int8" if args.precision == "int8" else "fp32"
        )
    except CheckpointError as e:
        raise TranslateError(str(e)) from None
    if args.precision != "int8":
        set_precision(scorer, args.precision)
    return Rerank(scorer, weight)


# ----------------------------------------------------------------------------- `nmt tune-alpha`
def parse_numbers(text: str, *, what: str, low: float = 0.0, high: float = math.inf) -> tuple[float, ...]:
    """'0.3,0.5' -> (0.3, 0.5), each in [low, high]; argparse.ArgumentTypeError naming ``what``."""
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a comma-separated list of numbers, e.g. 0.4,0.6"
        ) from None
    if not values or any(not low <= v <= high for v in values):
        bound = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise argparse.ArgumentTypeError(f"{text!r}: one or more {what}, each {bound}")
    return values


def parse_alphas(text: str) -> tuple[float, ...]:
    """'0.6,1.0,1.4' -> (0.6, 1.0, 1.4); each >= 0."""
    return parse_numbers(text, what="alphas")


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
    add_rerank_args(parser, tune=True)  # a row per alpha and weight, as `nmt translate --rerank` writes them
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
        alphas=args.alphas,
        beam=args.beam,
        tokenize=args.tokenize,
        batch_tokens=args.batch_tokens,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        on_alpha=lambda row: print_tune_row(row, reranked=reranked),
        mbr=mbr,
        rerank=rerank,
        rerank_weights=args.rerank_weights,
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


# ----------------------------------------------------------------------------- `nmt shortlist`
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


# ----------------------------------------------------------------------------- `nmt export`
def add_export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "format",
        choices=("ctranslate2", "huggingface"),
        help="ctranslate2: a CTranslate2 model directory; huggingface: MarianMTModel + tokenizer",
    )
    parser.add_argument("checkpoint", help="checkpoint directory or run directory")
    parser.add_argument("out_dir", help="output directory (replaced atomically if it exists)")
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="ctranslate2 only: weight quantization (default: float32)",
    )


def run_export(args: argparse.Namespace, overrides: dict) -> int:
    try:
        if args.format == "ctranslate2":
            out = export_ctranslate2(args.checkpoint, args.out_dir, quantization=args.quantization)
        else:
            if args.quantization:
                raise ExportError("--quantization applies to ctranslate2 exports only")
            out = export_huggingface(args.checkpoint, args.out_dir)
    except CheckpointError as e:
        raise ExportError(str(e)) from None
    print(f"nmt export: wrote {out} (see {out}/README.md)")
    return 0


# ----------------------------------------------------------------------------- `nmt plot-attention`
def add_plot_attention_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint directory or run directory")
    parser.add_argument("sentence", help="the source sentence (raw text)")
    parser.add_argument("-o", "--output", required=True, help="folder for the PNG files")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the translation (paper: 4)")
    parser.add_argument("--max-len-b", type=int, default=50, help="output length limit |x| + b (paper: 50)")
    parser.add_argument("--device", default="cpu")


def run_plot_attention(args: argparse.Namespace, overrides: dict) -> int:
    if args.beam < 1:
        raise PlotAttentionError(f"--beam {args.beam}: must be >= 1")
    try:
        translator = Translator.load(args.checkpoint, device=args.device, precision="fp32")
    except CheckpointError as e:
        raise PlotAttentionError(str(e)) from None
    out = Path(args.output)
    text, figures = plot_attention(translator, args.sentence, out, beam=args.beam, max_len_b=args.max_len_b)
    print(
        f"{text}\nnmt plot-attention: wrote {figures} PNG files and attention.json to {out}", file=sys.stderr
    )
    return 0
