"""The command line of `nmt translate`: its arguments (``add_translate_args``) and its run
(``run_translate``) over the modules of its concepts (translate, text, search, mbr, rerank,
attention), and the --mbr and --rerank options that `nmt tune-alpha` shares (nmt.infer.tune_command).
Every option is checked before anything is read or loaded; user errors are TranslateError, which
`nmt` prints as one line (nmt/cli.py). The other commands of nmt.infer have their own modules:
tune_command, shortlist_command, plot_attention_command (`nmt export`: nmt.export.command).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import replace

import torch

from ..checkpoint import CheckpointError
from ..export.ctranslate2 import ExportError
from ..precision import resolve_precision
from ..realtext.command import (
    add_real_text_args,
    quality_options,
    run_request,
    text_options,
    translate_file,
    warn_if_markup,
    write_quality,
)
from ..realtext.document import document_kind
from ..realtext.glossary import read_glossary
from ..realtext.pipeline import TextTranslation, TranslationRequest
from .attention_maps import format_alignment
from .mbr import MBR, UTILITIES
from .options import SearchOptions
from .rerank import Rerank
from .results import TranslateError
from .search import MAX_ALPHA, STOPPING, default_alpha
from .text import TextTranslator
from .translate import Translator, check_output, read_text_lines, write_output


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
    parser.add_argument(
        "--no-repeat-ngram",
        type=int,
        default=0,
        metavar="N",
        help="N > 0: no output repeats one of its own N-grams (fairseq's --no-repeat-ngram-size; "
        "guards against loops on unusual input; default 0: off, the paper's search; torch engine)",
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
        "dynamic beam allocation (Post & Vilar 2018); torch engine, not with --sampling or "
        "--prefix-file (with a shortlist, these lines search the full vocabulary)",
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
        "sentence's source makes likely, normalised over them (faster; outputs may differ); "
        "--engine ctranslate2: its vocabulary map (MODEL_DIR/vmap.txt). Default: the "
        "checkpoint's own CHECKPOINT/shortlist.txt where it has one (`nmt distill` writes its "
        "student's)",
    )
    parser.add_argument(
        "--no-shortlist",
        action="store_true",
        help="score the full vocabulary, also where the checkpoint carries a shortlist",
    )
    parser.add_argument(
        "--shortlist-scope",
        choices=["sentence", "batch"],
        default=None,
        help="sentence (the torch engine's default): each sentence over its own pieces, whatever "
        "it is batched with; batch: over the union of its batch's (Marian's and CTranslate2's way; "
        "the ctranslate2 engine's only one)",
    )
    parser.add_argument(
        "--alignment",
        action="store_true",
        help="append '<TAB>s-t ...' per output: source-output piece alignment from the last "
        "layer's encoder-decoder attention averaged over heads (fairseq's convention)",
    )
    parser.add_argument(
        "--glossary",
        default=None,
        metavar="FILE",
        help="terminology: SOURCE<TAB>TARGET per line; where a sentence holds a source term (whole "
        "words, any case), its translation holds the target term (constraints, dynamic beam "
        "allocation); real text stays on; torch engine, not with --sampling (with a shortlist, "
        "sentences with terms search the full vocabulary)",
    )
    parser.add_argument(
        "--target-lang",
        default=None,
        metavar="LANG",
        help="the target language of a model trained for several (nmt prepare --tgt de,fr,cs): each "
        "sentence is given its tag, >>LANG<< (--alignment then counts the tag's pieces)",
    )
    add_real_text_args(parser)


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
    """`nmt translate`: the options checked and the inputs read into one request (checked before
    the translator is loaded), then run through nmt.realtext.pipeline; the outputs written (stdout,
    or -o atomically)."""
    if overrides:
        raise TranslateError(f"--{next(iter(overrides))}.*: translate takes no configuration overrides")
    search_options, mbr = check_translate_args(args)
    document = document_kind(args.input) is not None
    if document:
        check_document_args(args)
    inputs = ([], None, None) if document else read_translate_inputs(args)
    request = translation_request(args, search_options, mbr, inputs)
    rerank = load_rerank(args, args.rerank_weight)
    if rerank is not None:
        request = replace(request, rerank=rerank)
    translator = translator_from_args(args)
    if document:
        translate_file(args, translator, request)
        return 0
    warn_if_markup(args, request)
    done = run_request(args, translator, request)
    out = output_lines(args, done, plain=request.sentence_level)
    text = "".join(line + "\n" for line in out)
    if args.output == "-":
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    else:
        write_output(args.output, text)
    if args.quality:
        write_quality(args.quality, done)
    return 0


def translation_request(
    args: argparse.Namespace,
    search: SearchOptions,
    mbr: MBR | None,
    inputs: tuple[list[str], list[str] | None, list[list[str]] | None],
) -> TranslationRequest:
    """The request of `nmt translate`'s arguments for ``inputs`` (read_translate_inputs: the lines,
    their prefixes and constraints), without --rerank's models (load_rerank)."""
    lines, prefix, constraints = inputs
    return TranslationRequest(
        lines,
        text=text_options(args),
        search=search,
        target_lang=args.target_lang,
        alignment=args.alignment,
        mbr=mbr,
        prefix=prefix,
        constraints=constraints,
        glossary=None if args.glossary is None else read_glossary(args.glossary),
        quality=quality_options(args),
    )


def check_document_args(args: argparse.Namespace) -> None:
    """TranslateError for the options that need one output per input line, given with a document."""
    given = {
        "--nbest": args.nbest > 1,
        "--alignment": args.alignment,
        "--prefix-file": args.prefix_file is not None,
        "--constraints": args.constraints is not None,
        "--sampling": args.sampling,
    }
    per_line = [name for name, on in given.items() if on]
    if per_line:
        raise TranslateError(f"{args.input}: a document is translated whole: not with {', '.join(per_line)}")


def check_translate_args(args: argparse.Namespace) -> tuple[SearchOptions, MBR | None]:
    """The options of `nmt translate` that can be checked before anything is read or loaded (sets
    --threads, and --alpha's default); returns the SearchOptions and the MBR they ask for (or None)."""
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
    if args.sampling:
        if args.nbest != 1:
            raise TranslateError(f"--sampling --nbest {args.nbest}: sampling gives one output per line")
        if not (0 < args.temperature < math.inf and args.topk >= 0 and 0 < args.topp <= 1):
            raise TranslateError(
                f"--temperature {args.temperature} --topk {args.topk} --topp {args.topp}: "
                "need 0 < T < inf, K >= 0 (0: all), 0 < P <= 1"
            )
    if args.no_repeat_ngram < 0:
        raise TranslateError(f"--no-repeat-ngram {args.no_repeat_ngram}: must be >= 0 (0: off)")
    if args.no_repeat_ngram and args.engine != "torch":
        raise TranslateError("--no-repeat-ngram: the torch engine's search (not --engine ctranslate2)")
    options = SearchOptions.from_args(args)
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
    return options, mbr


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
        check_constraints_args(args)
        constraints = [line.split("\t") for line in read_text_lines(args.constraints, errors=args.errors)]
        if len(constraints) != len(lines):
            raise TranslateError(
                f"{args.constraints}: {len(constraints)} constraint lines for {len(lines)} input lines"
            )
    return lines, prefix, constraints


def check_constraints_args(args: argparse.Namespace) -> None:
    """TranslateError for --constraints with an option its search does not go with."""
    if args.sampling or args.prefix_file is not None or args.engine != "torch":
        raise TranslateError(
            "--constraints: the torch engine's beam search (not with --sampling, --prefix-file or "
            "--engine ctranslate2)"
        )


def shortlist_of_args(args: argparse.Namespace) -> str | bool | None:
    """Translator.load's ``shortlist``: --shortlist FILE, False for --no-shortlist, None (the
    checkpoint's own, if any) for neither."""
    no_shortlist = getattr(args, "no_shortlist", False)  # a job planned before the option: False
    if no_shortlist and args.shortlist is not None:
        raise TranslateError("--shortlist FILE and --no-shortlist: give one")
    return False if no_shortlist else args.shortlist


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
            shortlist=shortlist_of_args(args),
            shortlist_scope=getattr(args, "shortlist_scope", None),  # a job planned before the option: None
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


def output_lines(
    args: argparse.Namespace, results: list[TextTranslation], *, plain: bool, first: int = 1
) -> list[str]:
    """One line per output: its text (a real text's line breaks made spaces), or
    'LINE<TAB>SCORE<TAB>TEXT' with --nbest K > 1 (LINE counted from ``first``: a shard's first line's
    number in its job); --alignment appends '<TAB>s-t ...' (nmt.infer.attention_maps: last layer,
    heads averaged, 0-based piece indices)."""

    def line(text: str) -> str:
        return text if plain else re.sub(r"[\r\n]+", " ", text).strip()

    if args.nbest == 1:
        out = [(line(r.text), r.nbest[0].alignment) for r in results]
    else:
        out = [
            (f"{n}\t{t.score:.4f}\t{line(t.text)}", t.alignment)
            for n, r in enumerate(results, start=first)
            for t in r.nbest
        ]
    if args.alignment:
        return [f"{text}\t{format_alignment(pairs or [])}" for text, pairs in out]
    return [text for text, _ in out]


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
    if args.alpha is not None and abs(args.alpha) > MAX_ALPHA:
        raise TranslateError(f"--alpha {args.alpha}: must be in [-{MAX_ALPHA:g}, {MAX_ALPHA:g}]")
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


def add_rerank_args(parser: argparse.ArgumentParser) -> None:
    """--rerank CK [CK ...] and its weight --rerank-weight."""
    add_rerank_option(parser)
    parser.add_argument(
        "--rerank-weight",
        type=float,
        default=0.5,
        help="--rerank: the rescoring models' weight w in [0, 1] (default 0.5)",
    )


def add_rerank_option(parser: argparse.ArgumentParser) -> None:
    """--rerank CK [CK ...], for `nmt translate` and `nmt tune-alpha` (which tries several weights:
    --rerank-weights, nmt.infer.tune_command)."""
    parser.add_argument(
        "--rerank",
        nargs="+",
        default=None,
        metavar="CHECKPOINT",
        help="rescore the beam's --beam best with these checkpoints (usually a right-to-left "
        "model, model.right_to_left; several: their mean) and write the best by "
        "(1-w) * own + w * their log-probability, over the length penalty (nmt.infer.rerank)",
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
