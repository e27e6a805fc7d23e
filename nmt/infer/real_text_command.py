"""`nmt translate`'s real-text options (--format, --split, --recase, --max-words, --language) and
their run: the input's lines (or a document's text, nmt.infer.document) through
nmt.infer.real_text, the sentences searched as `nmt translate` searches lines (its progress bar,
warnings, --mbr and --rerank)."""

from __future__ import annotations

import argparse
import re
import sys

from .markup import FORMATS
from .real_text import TextJob, TextOptions, UnitOutput, aligned_outputs
from .results import TranslateError

# options that need one output per input line as the model gave it (--sampling: line i draws from
# the stream seeded by (--seed, i), which sentence splitting would renumber)
PER_LINE = ("nbest", "alignment", "prefix_file", "constraints", "sampling")


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


def text_options(args: argparse.Namespace, *, document_format: str | None = None) -> TextOptions:
    """The TextOptions of the arguments (before anything is loaded); a per-line option (--nbest K,
    --alignment, --prefix-file, --constraints) means each line as one sentence, as given."""
    if args.max_words is not None and args.max_words < 0:
        raise TranslateError(f"--max-words {args.max_words}: must be >= 0 (0: never cut)")
    fmt = args.format or document_format or "text"
    options = TextOptions(
        format=fmt,
        split=args.split,
        recase=args.recase,
        max_words=args.max_words,
        part_words=args.part_words,
        language=args.language or source_language(args.checkpoint[0]),
    )
    given = {
        "nbest": args.nbest > 1,
        "alignment": args.alignment,
        "sampling": bool(getattr(args, "sampling", False)),
    }
    given.update((o, getattr(args, o) is not None) for o in ("prefix_file", "constraints"))
    per_line = [f"--{o.replace('_', '-')}" for o in PER_LINE if given[o]]
    if per_line:
        if fmt != "text":
            raise TranslateError(f"--format {fmt}: not with {', '.join(per_line)} (one output per line)")
        return TextOptions(split=False, recase=False, max_words=0)
    return options


def source_language(checkpoint: str) -> str:
    """The source language recorded with a checkpoint's data (config.json), else "en"."""
    from .text import training_data

    data = training_data(checkpoint)
    return data["src_lang"] if data and isinstance(data.get("src_lang"), str) else "en"


def translate_real_text(
    args: argparse.Namespace,
    translator,
    texts: list[str],
    options: TextOptions,
    search,
    *,
    lines: bool = True,
) -> list[str]:
    """``texts`` translated through nmt.infer.real_text with `nmt translate`'s search
    (``search(units, line_of)``: each unit's n-best, --mbr / --rerank applied, warnings naming
    line ``line_of[i]`` of unit i); a warning per cut sentence on stderr. ``lines``: each text is
    a line of the input, and its translation one line (stripped, as a sentence's)."""
    from .casing import fewer_pieces, known_lower

    sp = translator.sp
    job = TextJob(
        texts, options.for_model(translator), keep_capital=fewer_pieces(sp), lower_known=known_lower(sp)
    )
    results = search(job.units, job.unit_text)
    if job.needs_alignment:
        outputs = aligned_outputs(translator, job.units, [r[0] for r in results])
    else:
        outputs = [UnitOutput(r[0].text) for r in results]
    done = job.finish(outputs)
    for n, r in enumerate(done, start=1):
        for cut in r.cuts:
            print(f"nmt translate: warning: line {n}: {cut.message()}", file=sys.stderr)
    if lines:
        return [re.sub(r"[\r\n]+", " ", r.text).strip() for r in done]
    return [r.text for r in done]


def translate_file(args: argparse.Namespace, translator, options: TextOptions, search) -> None:
    """-i FILE, a document (nmt.infer.document: by its extension, or --format), translated into -o
    in its format."""
    from dataclasses import replace

    from .document import document_kind, translate_document

    def translate(texts: list[str], fmt: str) -> list[str]:
        return translate_real_text(args, translator, texts, replace(options, format=fmt), search, lines=False)

    kind = document_kind(args.input)
    translate_document(args.input, args.output, translate, kind=args.format if kind == "text" else kind)
