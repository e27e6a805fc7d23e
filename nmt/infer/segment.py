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

A sentence longer than ``max_words`` words is cut (``cut_sentence``) into parts of at most
``part_words`` (default ``max_words``) at the clause boundary nearest its middle (after , ; : or
before a coordinating word), recursively, and at the middle word where there is none; the parts
are translated on their own and joined with a space (``part_output``). What was cut is reported
(``Cut``), never silent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    generic rules) unless ``split`` is False: then each non-blank line is one sentence."""
    sentences: list[str] = []
    gaps: list[str] = [""]
    for line in re.split(r"(\r\n|\n|\r)", text):
        chunks = segment(language, line) if split and line.strip() else [line]
        for chunk in chunks:
            body = chunk.strip()
            if not body:
                gaps[-1] += chunk
                continue
            start = len(chunk) - len(chunk.lstrip())
            gaps[-1] += chunk[:start]
            sentences.append(body)
            gaps.append(chunk[start + len(body) :])
    return Parts(sentences, gaps)


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
    (one leaving at least 3 words each side, when there is one), else at the middle; recursively."""
    if len(words) <= max_words:
        return [words]
    middle = len(words) / 2
    starts = [k for k in clause_starts(words) if 3 <= k <= len(words) - 3]
    k = min(starts, key=lambda s: (abs(s - middle), s)) if starts else len(words) // 2
    return cut_words(words[:k], max_words) + cut_words(words[k:], max_words)


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


def cut_sentence(sentence: str, max_words: int) -> list[str]:
    """The parts of ``sentence`` (cut_spans); ``[sentence]`` when it is not longer than ``max_words``."""
    return [sentence[a:b] for a, b in cut_spans(sentence, max_words)]


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
