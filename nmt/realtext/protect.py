"""Spans that must survive translation: numbers, dates and times, URLs, e-mail addresses, emoji,
placeholders ({x}, {{x}}, %s, %d, %(x)s, %1$s, $x, ${x}, <x/>) and inline code (`x`).

    spans = find_spans("At 5 p.m. see https://x.org 🐶")   # [Span(3, 4, "number"), ...]
    hidden = hide(text, spans)          # format text: what the model reads, and where each span was
    projected, restored = restore(run, projected, visible_spans, hidden.points)

Plain text (format "text"): the spans are taken out of what the model reads (each with one space
beside it), so that the sentence it translates is one it knows; after the search each is put in
as the source has it, after the output words aligned to the source just before it (the alignment
of the model's cross-attention on the torch engine; a monotone guess on CTranslate2). On Multi30k's
validation set with one span put into each sentence (benchmarks/spans.py), leaving numbers, times
and dates in the model's input cost 2 BLEU on the text around them; taking every span out cost
nothing.

Markup (format html / xml): the spans stay in the text the model reads (the tags' projection is
built on its characters); a span the translation holds fewer times than the source is put in as
above, what the model wrote instead stays. ``Restored`` names the spans put in; the answer carries
them (TextTranslation.restored).

Finding spans is linear in the text: it reads each whitespace-delimited token of at most
LONGEST_TOKEN characters on its own (a longer token is not searched: a 1 MB run of a pattern's
worst case costs one pass), and inline code between backticks within one line, at most
LONGEST_TOKEN characters long.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

from .markup import Placement, Projected, Run

LONGEST_TOKEN = 200
EMOJI_CHARS = "\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\U0001f1e6-\U0001f1ff"
PATTERNS = [
    ("url", r"(?:https?|ftp)://[^\s<>\"'`]+|www\.[^\s<>\"'`]+"),
    ("email", r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    (
        "placeholder",
        r"\{\{[^{}]{0,60}\}\}|\{[\w.:!\[\]-]{0,60}\}|%\(\w+\)[#0 +-]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]",
    ),
    (
        "placeholder",
        r"%(?:\d+\$)?[#0 +-]*\d*(?:\.\d+)?[sdifuxXeEgGc](?![\w])|\$\{\w+\}|\$[A-Za-z_]\w*|<\w+/>",
    ),
    ("date", r"\d{4}-\d{2}-\d{2}|\d{1,2}[./]\d{1,2}[./]\d{2,4}"),
    ("time", r"\d{1,2}:\d{2}(?::\d{2})?"),
    ("number", r"\d+(?:[.,]\d+)*%?"),
    ("emoji", rf"[{EMOJI_CHARS}](?:[\u200d\ufe0f\U0001f3fb-\U0001f3ff]+[{EMOJI_CHARS}]?)*"),
]
SPAN = re.compile("|".join(f"(?P<k{i}>{p})" for i, (_, p) in enumerate(PATTERNS)))
KINDS = [kind for kind, _ in PATTERNS]  # the model is not given them
TOKEN = re.compile(r"\S+")
CODE = re.compile(r"`[^`\n]{1,%d}`" % LONGEST_TOKEN)
TRAILING = ".,;:!?)]}'\""  # not part of a URL at its end


@dataclass(frozen=True)
class Span:
    """Characters [start, end) of a text that must come out as written; ``kind`` (url, email,
    code, placeholder, date, time, number, emoji)."""

    start: int
    end: int
    kind: str


@dataclass
class Restored:
    """The texts of the spans a translation lost and got back."""

    restored: list[str] = field(default_factory=list)


def find_spans(text: str) -> list[Span]:
    """The protected spans of ``text``, in order, not overlapping."""
    code = [Span(m.start(), m.end(), "code") for m in CODE.finditer(text)]
    spans, k = [], 0
    for token in TOKEN.finditer(text):
        if token.end() - token.start() > LONGEST_TOKEN:
            continue
        for m in SPAN.finditer(token.group(0)):
            kind = KINDS[int(m.lastgroup[1:])]
            a, b = token.start() + m.start(), token.start() + m.end()
            if kind == "url":
                while b > a and text[b - 1] in TRAILING:
                    b -= 1
            while k < len(code) and code[k].end <= a:
                k += 1
            if b > a and not (k < len(code) and code[k].start < b):
                spans.append(Span(a, b, kind))
    return sorted(spans + code, key=lambda s: s.start)


def lost(source: str, spans: list[Span], translation: str, pairs=()) -> list[Span]:
    """The spans the translation lost: of a span text it holds fewer times than the source, as
    many occurrences as it lacks, first those whose aligned output (``pairs``) does not hold it."""
    wanted = Counter(source[s.start : s.end] for s in spans)
    out = []
    for text, n in wanted.items():
        lacking = n - translation.count(text)
        if lacking <= 0:
            continue
        occurrences = [s for s in spans if source[s.start : s.end] == text]
        occurrences.sort(key=lambda s: held(s, text, translation, pairs))
        out += occurrences[:lacking]
    return sorted(out, key=lambda s: s.start)


def held(span: Span, text: str, translation: str, pairs) -> bool:
    """True when the output aligned to the span holds its text."""
    return any(text in translation[c:d] for a, b, c, d in pairs if a < span.end and span.start < b)


@dataclass
class Hidden:
    """A text less its spans (``points``: where each was in ``text``, and its text)."""

    text: str
    points: list[tuple[int, str]]


def hide(text: str, spans: list[Span]) -> Hidden:
    """``text`` without ``spans``, each taken out with one space beside it."""
    out, points, pos, removed = [], [], 0, 0
    for s in spans:
        a, b = s.start, s.end
        if text[b : b + 1] == " ":
            b += 1
        elif a > pos and text[a - 1] == " ":
            a -= 1
        out.append(text[pos:a])
        points.append((a - removed, text[s.start : s.end]))  # in the text without it
        removed += b - a
        pos = b
    out.append(text[pos:])
    return Hidden("".join(out), points)


def restore(
    run: Run, projected: Projected, spans: list[Span], points: list[tuple[int, str]] = ()
) -> tuple[Projected, Restored]:
    """The run's translation with the ``spans`` it lost and the ``points`` (spans the model was
    not given: where they were in the run's text) put in (the pairs shifted to match)."""
    missing = lost(run.text, spans, projected.text, projected.pairs)
    wanted = [(s.start, run.text[s.start : s.end]) for s in missing] + list(points)
    if not wanted:
        return projected, Restored()
    where = Placement(run, projected)
    inserts = []
    for start, span in wanted:
        k = bisect_right(where.ends, start)
        token = where.after[k - 1] if k else 0  # the output tokens up to those aligned before the span
        at = where.tokens[token - 1][1] if token else 0
        inserts.append((at, span))
    text, pairs = projected.text, list(projected.pairs)
    for at, piece in sorted(inserts, key=lambda x: x[0], reverse=True):
        before = " " if at > 0 and not text[at - 1].isspace() else ""
        after = " " if at < len(text) and (text[at].isalnum() or at == 0) else ""
        piece = before + piece + after
        text = text[:at] + piece + text[at:]
        pairs = [
            (a, b, c + len(piece) if c >= at else c, d + len(piece) if d > at else d) for a, b, c, d in pairs
        ]
    return Projected(text, pairs), Restored([t for _, t in sorted(inserts)])
