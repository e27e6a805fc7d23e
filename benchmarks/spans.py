"""Protected spans (nmt.realtext.protect) on a test set with spans put in: how many come out
exactly as written, and BLEU on the text around them against the clean set's run.

    python benchmarks/spans.py --checkpoint runs/demo/average \\
        --src-file $NMT_DATA_DIR/multi30k/test.en.gz --ref-file $NMT_DATA_DIR/multi30k/test.de.gz \\
        [--seed 1] [--json out.json]

Each source sentence gets one span (seeded): a number, a time, a date, a URL, an e-mail address,
an emoji or a placeholder ({name}, {{count}}, %s, %(n)d, $HOME), put in after a random word.
Preserved: the span's text in the output as often as in the source. Around: the spans taken out
of the output, BLEU / chrF against the clean references, beside the clean sources' run (the same
search); protect on (nmt's default) and off.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sacrebleu  # noqa: E402
from machine import write_table  # noqa: E402

from nmt.data.lines import read_lines  # noqa: E402
from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.realtext.job import TextOptions  # noqa: E402
from nmt.realtext.pipeline import TranslationRequest  # noqa: E402
from nmt.realtext.quality import QualityOptions  # noqa: E402

KINDS = {
    "number": lambda r: str(r.randint(2, 999)),
    "time": lambda r: f"{r.randint(1, 12)}:{r.randint(0, 59):02d}",
    "date": lambda r: f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    "url": lambda r: f"https://example.org/p/{r.randint(1, 9999)}",
    "email": lambda r: f"team{r.randint(1, 99)}@example.org",
    "emoji": lambda r: r.choice(["🐶", "🎉", "👍", "🌊", "☀️"]),
    "placeholder": lambda r: r.choice(["{name}", "{{count}}", "%s", "%(n)d", "$HOME"]),
}


def with_spans(src: list[str], seed: int) -> tuple[list[str], list[tuple[str, str]]]:
    """Each sentence with one span put in after a random word; the (kind, span) of each."""
    r = random.Random(seed)
    out, spans = [], []
    kinds = sorted(KINDS)
    for s in src:
        kind = kinds[len(out) % len(kinds)]
        span = KINDS[kind](r)
        words = s.split()
        at = r.randint(1, max(1, len(words) - 1))
        out.append(" ".join(words[:at] + [span] + words[at:]))
        spans.append((kind, span))
    return out, spans


def run(translator, texts: list[str], beam: int, protect: bool) -> list[str]:
    request = TranslationRequest(
        texts,
        text=TextOptions(protect=protect),
        search=SearchOptions(beam=beam),
        quality=QualityOptions(confidence=False),
    )
    return [t.text for t in translator.translate_request(request)]


def around(hyps: list[str], spans: list[tuple[str, str]]) -> list[str]:
    return [" ".join(h.replace(span, " ").split()) for h, (_, span) in zip(hyps, spans)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src-file", required=True)
    parser.add_argument("--ref-file", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--model-note", default="")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    src, ref = list(read_lines(args.src_file)), list(read_lines(args.ref_file))
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    translator = Translator.load(args.checkpoint, precision="fp32")
    spanned, spans = with_spans(src, args.seed)
    clean = run(translator, src, args.beam, True)
    rows = [
        [
            "clean sources",
            "",
            f"{sacrebleu.corpus_bleu(clean, [ref]).score:.2f}",
            f"{sacrebleu.corpus_chrf(clean, [ref]).score:.2f}",
        ]
        + ["" for _ in KINDS]
    ]
    for protect in (True, False):
        hyps = run(translator, spanned, args.beam, protect)
        kept = [h.count(span) >= s.count(span) for h, s, (_, span) in zip(hyps, spanned, spans)]
        by_kind = {k: [ok for ok, (kind, _) in zip(kept, spans) if kind == k] for k in KINDS}
        rest = around(hyps, spans)
        rows.append(
            [
                f"with spans, protect {'on' if protect else 'off'}",
                f"{100 * sum(kept) / len(kept):.1f}%",
                f"{sacrebleu.corpus_bleu(rest, [ref]).score:.2f}",
                f"{sacrebleu.corpus_chrf(rest, [ref]).score:.2f}",
            ]
            + [f"{100 * sum(v) / max(len(v), 1):.0f}%" for v in by_kind.values()]
        )
        print(" | ".join(rows[-1]), flush=True)
    columns = ["run", "spans preserved", "BLEU around", "chrF around", *KINDS]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    if args.json:
        write_table(
            args.json,
            "spans",
            what=f"one span per sentence (seed {args.seed}), beam {args.beam}, real text on, fp32",
            model=args.model_note,
            columns=columns,
            rows=rows,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
