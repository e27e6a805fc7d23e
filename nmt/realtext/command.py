"""`nmt translate`'s real-text options (--format, --split, --recase, --max-words, --language,
--protect, --guards, --quality) and
its run of a request: the input's lines (or a document's texts, nmt.realtext.document) through
nmt.realtext.pipeline, with a progress bar and warnings naming the line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from ..infer.results import ConstraintsError, TranslateError
from .job import TextOptions
from .markup import FORMATS, first_markup
from .pipeline import Plan, TextTranslation, TranslationRequest, run_plan
from .quality import QualityOptions, quality_record


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
    add_trust_args(parser)


def add_trust_args(parser: argparse.ArgumentParser) -> None:
    """--protect, --guards, --quality (nmt.realtext.protect, nmt.realtext.quality)."""
    parser.add_argument(
        "--protect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="numbers, dates, times, URLs, e-mail addresses, emoji, placeholders ({x}, %%s, %%(x)d, $x) "
        "and `code` the model lost put back as written (default)",
    )
    parser.add_argument(
        "--guards",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check each sentence for loops, odd lengths, copies, omissions and low confidence, "
        "search a flagged one once more (default); --no-guards: the search's output as it is",
    )
    parser.add_argument(
        "--quality",
        metavar="FILE",
        default=None,
        help="write each text's confidence, flags, restored spans and words' confidences as JSON "
        "lines (see docs/translation.md)",
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
        protect=args.protect,
    )


def quality_options(args: argparse.Namespace) -> QualityOptions:
    """Confidences where --quality asks for them; the guards unless --no-guards."""
    return QualityOptions(confidence=args.quality is not None, guards=args.guards)


def write_quality(path: str, results: list[TextTranslation]) -> None:
    """--quality: one JSON object per text (nmt.realtext.quality.quality_record), atomically."""
    from ..atomic import write_text

    write_text(path, "".join(json.dumps(quality_record(r), ensure_ascii=False) + "\n" for r in results))


def warn_if_markup(args: argparse.Namespace, request: TranslationRequest) -> None:
    """Plain-text input (no --format) with a line that looks like HTML (nmt.realtext.markup's
    first_markup): one warning naming the first such line, since its tags are translated as words."""
    found = None if args.format is not None or request.text.format != "text" else first_markup(request.texts)
    if found is not None:
        print(
            f"nmt translate: warning: line {found[0]} looks like HTML ({found[1]}) and is translated as "
            "plain text, tags and all; --format html translates the text between the tags and puts "
            "them back (--format text: no warning)",
            file=sys.stderr,
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

    done: list[TextTranslation] = []

    def translate(texts: list[str], fmt: str) -> list[str]:
        job = replace(request, texts=tuple(texts), text=replace(request.text, format=fmt))
        results = run_request(args, translator, job)
        done.extend(results)
        return [r.text for r in results]

    kind = document_kind(args.input)
    if args.format is not None and kind in ("html", "xml"):
        kind = args.format
    translate_document(args.input, args.output, translate, kind=kind)
    if args.quality:
        write_quality(args.quality, done)
