"""Sentences of real text: a paragraph split into sentences and joined back, a sentence too long
for the model cut into clauses.

    parts = split_text("Two dogs play. A man runs.\n\nThe end.", language="en")
    parts.sentences  # ['Two dogs play.', 'A man runs.', 'The end.']
    parts.gaps       # ['', ' ', '\n\n', '']: what lies before, between and after them
    parts.join(["Zwei Hunde spielen.", "Ein Mann rennt.", "Das Ende."])

Test sets hold one sentence per line; users paste paragraphs. A model trained on single
sentences translates the first sentence of a paragraph and drops the rest, so text is split with
sentencex (a maintained rule-based segmenter with per-language abbreviation lists; Wikimedia),
line by line: a line break always ends a sentence, and every space, line break and blank line
between sentences is kept as it was (``gaps``).

A sentence longer than ``max_words`` words is cut (``cut_spans``) into parts of at most
``part_words`` (default ``max_words``) at the clause boundary nearest its middle (after , ; : or
before a coordinating word), then each part the same way, and at the middle word where there is
none; the parts are translated on their own and joined with a space (``part_output``). What was
cut is reported (``Cut``), never silent.

Every step takes time linear in the text (cutting: but a log factor), whatever the text holds.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import accumulate

from sentencex import segment

# a clause may start before these words (after a space); a cut there keeps the word with its clause
CLAUSE_WORDS = frozenset(
    "and but or while whereas because although though when where who which "
    "und aber oder während weil obwohl denn sondern".split()
)
CLAUSE_PUNCTUATION = (",", ";", ":", "–", "—")


@dataclass
class Parts:
    """``gaps[0] + sentences[0] + gaps[1] + ... + sentences[-1] + gaps[-1]`` is the text."""

    sentences: list[str]
    gaps: list[str]

    def join(self, translations: list[str]) -> str:
        """The text with each sentence replaced by its translation, every gap kept."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        out = [self.gaps[0]]
        for t, gap in zip(translations, self.gaps[1:]):
            out += [t, gap]
        return "".join(out)


def split_text(text: str, *, language: str = "en", split: bool = True) -> Parts:
    """The sentences of ``text`` (each stripped) and the whitespace around them. Each line is
    split by sentencex for ``language`` (an ISO 639 code; an unknown one falls back to its
    generic rules) unless ``split`` is False: then each non-blank line is one sentence. A line
    longer than MAX_SEGMENT_CHARS is given to sentencex in pieces (``segment_line``)."""
    sentences: list[str] = []
    gaps: list[list[str]] = [[]]
    for line in re.split(r"(\r\n|\n|\r)", text):
        for chunk in segment_line(language, line) if split and line.strip() else [line]:
            body = chunk.strip()
            if not body:
                gaps[-1].append(chunk)
                continue
            start = len(chunk) - len(chunk.lstrip())
            gaps[-1].append(chunk[:start])
            sentences.append(body)
            gaps.append([chunk[start + len(body) :]])
    return Parts(sentences, ["".join(g) for g in gaps])


# sentencex takes time quadratic in the length of some lines (a line of quotation marks): a longer
# line is read a window of this many characters at a time, cut after the last sentence sentencex
# finds in the window's second half and read on from there. Where no sentence ends in the window's
# second half, the window is cut after its last white space (else at its end) and the sentence it
# ends in goes on in the next window: a window's edge never ends a sentence.
MAX_SEGMENT_CHARS = 2000
WHITE_SPACE = re.compile(r"\s+")


def window_cut(language: str, window: str) -> tuple[list[str], bool]:
    """The pieces of a window up to where the next window starts, and whether the last of them
    is a sentence that goes on (no sentence ended in the window's second half)."""
    chunks = list(segment(language, window))
    ends = list(accumulate(len(c) for c in chunks))[:-1]  # the window's end is no sentence's
    half = MAX_SEGMENT_CHARS // 2
    cut = next((e for e in reversed(ends) if e >= half), None)
    goes_on = cut is None
    if goes_on:
        spaces = [m.end() for m in WHITE_SPACE.finditer(window, half)]
        cut = spaces[-1] if spaces else len(window)
    pieces, at = [], 0
    for chunk in chunks:
        if at >= cut:
            break
        pieces.append(chunk[: cut - at])
        at += len(chunk)
    return pieces, goes_on


def segment_line(language: str, line: str) -> list[str]:
    """sentencex's pieces of ``line`` (joined, the line), in time linear in its length."""
    out: list[str] = []
    pending: list[str] = []  # the start of a sentence that goes on in the next window
    pos = 0
    while len(line) - pos > MAX_SEGMENT_CHARS:
        pieces, goes_on = window_cut(language, line[pos : pos + MAX_SEGMENT_CHARS])
        pos += sum(map(len, pieces))
        finished = pieces[:-1] if goes_on else pieces
        if pending and finished:
            finished[0] = "".join(pending) + finished[0]
            pending = []
        out += finished
        if goes_on:
            pending.append(pieces[-1])
    rest = list(segment(language, line[pos:])) or [""]
    if pending:
        rest[0] = "".join(pending) + rest[0]
    return out + rest


# ----------------------------------------------------------------------------- long sentences
@dataclass(frozen=True)
class Cut:
    """A sentence of ``words`` words (more than ``max_words``) translated as ``parts`` parts of at
    most ``part_words``; ``sentence``: its number in the input (from 0); ``at``: the words that
    start a part."""

    sentence: int
    words: int
    parts: int
    max_words: int
    part_words: int
    at: tuple[str, ...]

    def message(self) -> str:
        starts = ", ".join(repr(w) for w in self.at[:3]) + (", ..." if len(self.at) > 3 else "")
        return (
            f"sentence {self.sentence + 1}: {self.words} words (over {self.max_words}), translated in "
            f"{self.parts} parts of at most {self.part_words} (cut before {starts})"
        )


def clause_starts(words: list[str]) -> list[int]:
    """Word positions where a clause may start: after a word ending with , ; : or a dash, or at
    a coordinating / relative word (CLAUSE_WORDS) not first."""
    starts = []
    for k in range(1, len(words)):
        if words[k - 1].endswith(CLAUSE_PUNCTUATION) or words[k].lower() in CLAUSE_WORDS:
            starts.append(k)
    return starts


def cut_words(words: list[str], max_words: int) -> list[list[str]]:
    """``words`` in parts of at most ``max_words``: cut at the clause start nearest the middle
    (one leaving at least 3 words each side, when there is one; the first of two as near), else
    at the middle; then each side the same way. Linear in the words (but a log factor): the clause
    starts are found once, the nearest by bisection; no recursion."""
    starts = clause_starts(words)
    parts, todo = [], [(0, len(words))]
    while todo:
        lo, hi = todo.pop()
        if hi - lo <= max_words:
            parts.append(words[lo:hi])
            continue
        middle = lo + (hi - lo) / 2
        a, b = bisect_left(starts, lo + 3), bisect_right(starts, hi - 3)  # starts[a:b]: the candidates
        k = bisect_left(starts, middle, a, b)
        near = [starts[j] for j in (k - 1, k) if a <= j < b]
        cut = min(near, key=lambda s: (abs(s - middle), s)) if near else lo + (hi - lo) // 2
        todo += [(cut, hi), (lo, cut)]
    return parts


def cut_spans(sentence: str, max_words: int, part_words: int | None = None) -> list[tuple[int, int]]:
    """The character spans of the parts of a sentence of more than ``max_words`` words, each of at
    most ``part_words`` (None: max_words; cut by cut_words; each from its first word's start to its
    last word's end); one span, the whole sentence, when it is not longer (max_words 0: never cut)."""
    words = [m.span() for m in re.finditer(r"\S+", sentence)]
    if max_words <= 0 or len(words) <= max_words:
        return [(0, len(sentence))]
    spans, k = [], 0
    for part in cut_words([sentence[a:b] for a, b in words], min(part_words or max_words, max_words)):
        spans.append((words[k][0], words[k + len(part) - 1][1]))
        k += len(part)
    return spans


def part_output(source: str, translation: str, *, last: bool) -> str:
    """The translation of one part of a cut sentence as it goes into the joined sentence: a part
    that did not end the sentence loses the sentence-final . ! ? the model tends to end it with
    (and gets its source's , ; : back when the translation lost it)."""
    tgt = translation.strip()
    if not last and tgt and not source.endswith((".", "!", "?")):
        tgt = tgt.rstrip(".!?。").rstrip()
        if source.endswith(CLAUSE_PUNCTUATION) and not tgt.endswith(CLAUSE_PUNCTUATION):
            tgt += source[-1]
    return tgt
