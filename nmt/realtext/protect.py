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
from bisect import bisect_left, bisect_right
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
    """The spans the translation lost: of a span text it holds fewer times than the source (its
    own spans, found as the source's are), as many occurrences as it lacks, first those whose
    aligned output (``pairs``) does not hold it. Linear in the texts (and the pairs' log)."""
    have = Counter(translation[t.start : t.end] for t in find_spans(translation))
    by_text: dict[str, list[Span]] = {}
    for span in spans:
        by_text.setdefault(source[span.start : span.end], []).append(span)
    aligned = Aligned(pairs)
    out = []
    for text, occurrences in by_text.items():
        lacking = len(occurrences) - have[text]
        if lacking <= 0:
            continue
        if lacking < len(occurrences):
            occurrences = sorted(occurrences, key=lambda sp: text in aligned.output(sp, translation))
        out += occurrences[:lacking]
    return sorted(out, key=lambda sp: sp.start)


class Aligned:
    """Character pairs (a, b, c, d) looked up by their source characters."""

    def __init__(self, pairs):
        self.pairs = sorted(pairs)
        self.starts = [p[0] for p in self.pairs]
        self.longest = max((p[1] - p[0] for p in self.pairs), default=0)

    def output(self, span: Span, translation: str) -> str:
        """The output characters aligned to the span's, joined."""
        lo = bisect_left(self.starts, span.start - self.longest)
        hi = bisect_left(self.starts, span.end)
        return " ".join(translation[c:d] for a, b, c, d in self.pairs[lo:hi] if span.start < b)


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
    text, pairs, fallback = inserted(projected, sorted(inserts, key=lambda x: x[0]))
    return Projected(text, pairs, fallback), Restored([t for _, t in sorted(inserts)])


def inserted(projected: Projected, inserts: list[tuple[int, str]]) -> tuple[str, list, list]:
    """The translation with each (position, text) of ``inserts`` (by position) put in, a space on
    a side that touches a word, and its pairs and fallback pairs shifted to match; one pass."""
    text, out, prev, at_of, added = projected.text, [], 0, [], []
    for at, piece in inserts:
        out.append(text[prev:at])
        last = out[-1][-1:] if out[-1] else (out[-2][-1:] if len(out) > 1 else "")
        before = " " if last and not last.isspace() else ""
        after = " " if at < len(text) and (text[at].isalnum() or at == 0) else ""
        out.append(before + piece + after)
        at_of.append(at)
        added.append((added[-1] if added else 0) + len(out[-1]))
        prev = at
    out.append(text[prev:])

    def shift(x: int, *, at_end: bool) -> int:  # the length put in before x (at x too, unless at_end)
        k = (bisect_left if at_end else bisect_right)(at_of, x)
        return added[k - 1] if k else 0

    def moved(pairs: list) -> list:
        return [(a, b, c + shift(c, at_end=False), d + shift(d, at_end=True)) for a, b, c, d in pairs]

    return "".join(out), moved(projected.pairs), moved(projected.fallback)
