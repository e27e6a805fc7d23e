"""`nmt translate`'s real-text options (--format, --split, --recase, --max-words, --language) and
its run of a request: the input's lines (or a document's texts, nmt.realtext.document) through
nmt.realtext.pipeline, with a progress bar and warnings naming the line."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ..infer.results import ConstraintsError, TranslateError
from .job import TextOptions
from .markup import FORMATS
from .pipeline import Plan, TextTranslation, TranslationRequest, run_plan


def add_real_text_args(parser: argparse.ArgumentParser) -> None:
    """--format, --split/--no-split, --recase/--no-recase, --max-words, --language."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="text (default), html or xml: tags taken out, the text translated, the tags put back "
        "around the aligned output words; default for -i FILE: from its extension "
        "(.html/.htm, .xml, .md, .docx, else text)",
    )
    parser.add_argument(
        "--split",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="split lines into sentences (sentencex) and join their translations back (default); "
        "--no-split: each line is one sentence",
    )
    parser.add_argument(
        "--recase",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="translate ALL-CAPS and Title-Case sentences in normal case and recase the output (default)",
    )
    parser.add_argument(
        "--max-words",
        type=int,
        default=None,
        help="cut sentences of more words at clauses, translate the parts, warn (default: the "
        "model's, the longest sentences it learned from: the 99th percentile of its training "
        "sources' words, as `nmt prepare` records it, else 40; 0: never)",
    )
    parser.add_argument(
        "--part-words",
        type=int,
        default=None,
        help="a cut sentence's parts have at most this many words (default: the 99th percentile of "
        "the model's training sources' words, at most --max-words)",
    )
    parser.add_argument(
        "--language",
        default=None,
        help="the source language for sentence splitting (ISO 639; default: the checkpoint's "
        "source language, else en)",
    )


def text_options(args: argparse.Namespace) -> TextOptions:
    """The TextOptions of the arguments (before anything is read or loaded; the source language,
    where --language is not given, is the checkpoint's: nmt.realtext.pipeline)."""
    if args.max_words is not None and args.max_words < 0:
        raise TranslateError(f"--max-words {args.max_words}: must be >= 0 (0: never cut)")
    return TextOptions(
        format=args.format or "text",
        split=args.split,
        recase=args.recase,
        max_words=args.max_words,
        part_words=args.part_words,
        language=args.language,
    )


def run_request(args: argparse.Namespace, translator, request: TranslationRequest) -> list[TextTranslation]:
    """``request`` through nmt.realtext.pipeline as `nmt translate` runs it: a progress bar (not for
    stdin or --quiet) and warnings on stderr, naming the line (from 1) of each sentence cut at
    clauses or truncated to the model's positions."""
    from ..infer.text import truncation_message
    from ..progress import progress

    plan = Plan(request, translator)
    limit = translator.model.cfg.max_positions

    def warn(text: int, n: int) -> None:
        print(f"nmt translate: warning: {truncation_message(text, n, limit)}", file=sys.stderr)

    bar = progress(
        total=sum(1 for s in plan.inputs if s.strip()),
        unit="sent",
        desc="translate",
        disable=args.quiet or args.input == "-",
    )
    try:
        done = run_plan(
            translator, plan, batch_tokens=args.batch_tokens, on_truncate=warn, on_batch=bar.update
        )
    except ConstraintsError as e:  # its line is the constraints file's
        raise TranslateError(f"{args.constraints}: {e}") from None
    bar.close()
    for n, r in enumerate(done, start=1):
        for cut in r.cuts:
            print(f"nmt translate: warning: line {n}: {cut.message()}", file=sys.stderr)
    return done


def translate_file(args: argparse.Namespace, translator, request: TranslationRequest) -> None:
    """-i FILE, a document (nmt.realtext.document: by its extension; --format html / xml / text for a
    .html, .htm or .xml file), translated into -o in its format."""
    from .document import document_kind, translate_document

    def translate(texts: list[str], fmt: str) -> list[str]:
        job = replace(request, texts=tuple(texts), text=replace(request.text, format=fmt))
        return [r.text for r in run_request(args, translator, job)]

    kind = document_kind(args.input)
    if args.format is not None and kind in ("html", "xml"):
        kind = args.format
    translate_document(args.input, args.output, translate, kind=kind)
