"""How far to trust each translation, for every door: the confidence of each sentence the model
translated and of each of its words (nmt.infer.confidence), the guards' flags (nmt.infer.guards),
and one retry of a flagged sentence.

    score_results(translator, inputs, results, coverage=True)   # after the search
    q = judge(translator, source, results[0][0])                 # SentenceQuality
    retried = suspects([q])                                      # units to search again

A text's confidence is the mean of its sentences', weighted by their output pieces; its flags are
every flag of its sentences; its ``words`` are the output words with their confidences and their
places in the text as returned (located in order, case-insensitively, after recasing and tags).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..infer.confidence import Calibration, WordConfidence, word_log_probs
from ..infer.guards import Sentence, check, deletion_candidates, word_coverage
from ..infer.omission import word_drops, word_spans
from ..infer.results import Translation
from ..infer.search import reading_order

RETRIED_FLAGS = ("repetition", "length", "copy", "omission", "low-confidence")


@dataclass(frozen=True)
class QualityOptions:
    """``confidence``: sentence and word confidences computed; ``guards``: the checks run and a
    flagged sentence searched once more (needs the confidences' pass)."""

    confidence: bool = True
    guards: bool = True

    @property
    def scores(self) -> bool:
        return self.confidence or self.guards


@dataclass
class SentenceQuality:
    """One unit the model translated: its output as the model wrote it, its confidence, its words'
    and the guards' flags (nmt.infer.guards.FLAGS); ``retried``: searched a second time."""

    output: str
    confidence: float | None
    words: list[WordConfidence] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    retried: bool = False
    pieces: int = 0


@dataclass
class LocatedWord:
    """An output word, its confidence, and its characters [start, end) in the returned text
    (None where it could not be found there, e.g. a word changed by a tag's projection)."""

    word: str
    confidence: float
    start: int | None
    end: int | None


def score_results(translator, inputs: list[str], results: list[list[Translation]], *, coverage: bool) -> None:
    """Sets ``log_probs`` (and with ``coverage`` ``coverage``) on every translation of
    ``results`` (the n-best of ``inputs``) by one teacher-forced pass of the translator's model."""
    if not hasattr(translator, "forced_scores"):
        return
    sources, _ = translator.encode(inputs)
    flat = [(i, t) for i, nbest in enumerate(results) for t in nbest]
    if not flat:
        return
    scored = translator.forced_scores(
        [sources[i] for i, _ in flat], [t.tokens for _, t in flat], coverage=coverage
    )
    for (_, t), s in zip(flat, scored):
        t.log_probs, t.coverage = s.log_probs, s.coverage
    if coverage:
        mark_drops(translator, [sources[i] for i, _ in flat], [t for _, t in flat])


def mark_drops(translator, sources: list[list[int]], translations: list[Translation]) -> None:
    """Sets ``word_drops`` on each scored translation: its source's deletion_candidates
    (nmt.infer.guards) deleted one at a time, the change of the output's log-probability
    (nmt.infer.omission); none for a source of one word or an empty output. The words are those
    of the pieces the model read (``sources``: ids + EOS)."""
    spans, tested = [], []
    for src, t in zip(sources, translations):
        n = len(t.coverage or [])  # the source pieces the model read (EOS aside)
        words = word_spans([translator.sp.id_to_piece(x) for x in src[:n]])
        spans.append(words)
        coverage = [sum(t.coverage[a:b]) for _, a, b in words]
        asked = t.tokens and len(words) > 1
        tested.append(deletion_candidates([w for w, _, _ in words], coverage) if asked else [])
    bases = [sum(t.log_probs or []) for t in translations]
    outputs = [t.tokens for t in translations]
    for t, drops in zip(
        translations, word_drops(translator.forced_scores, sources, outputs, bases, spans, tested)
    ):
        t.word_drops = drops


def judge(translator, source: str, t: Translation, *, tag: str | None = None) -> SentenceQuality:
    """The quality of translation ``t`` of ``source`` (what the model read; ``tag``: its
    target-language tag, left out of the checks)."""
    sp, calibration = translator.sp, getattr(translator, "calibration", None) or Calibration()
    if t.log_probs is None or not t.log_probs:
        return SentenceQuality(t.text, None if t.log_probs is None else 1.0)
    order = reading_order(translator.model, list(range(len(t.tokens))))
    pieces = [sp.id_to_piece(t.tokens[k]) for k in order]
    lps = [t.log_probs[k] for k in order]
    words = [WordConfidence(w, calibration.word(lp)) for w, lp in word_log_probs(pieces, lps)]
    src_pieces = sp.encode(source, out_type=str)
    src_words, coverage = word_coverage(src_pieces, t.coverage) if t.coverage is not None else ([], None)
    if coverage is None:
        src_words = [w for w in source.split()]
    drops = t.word_drops
    if tag and src_words and src_words[0] == tag:
        src_words, coverage = src_words[1:], None if coverage is None else coverage[1:]
        drops = None if drops is None else {k - 1: d for k, d in drops.items() if k}
    sentence = Sentence(
        source_words=src_words,
        output_words=[w.word for w in words],
        source_pieces=len(src_pieces),
        output_pieces=len(t.tokens) + 1,
        word_coverage=coverage,
        output_piece_texts=tuple(pieces),
        confidence=calibration.sentence(t.log_probs) if calibration.calibrated else None,
        word_drops=drops,
    )
    data = getattr(translator, "data", None) or {}
    translates = data.get("src_lang") is None or data.get("src_lang") != data.get("tgt_lang")
    flags = check(sentence, tuple(calibration.length_ratio), translates=translates)
    return SentenceQuality(
        t.text,
        calibration.sentence(t.log_probs),
        words,
        flags,
        retried=getattr(t, "retried", False),
        pieces=len(t.tokens) + 1,
    )


def suspects(qualities: list[SentenceQuality | None]) -> list[int]:
    """The units whose flags ask for a second search."""
    return [u for u, q in enumerate(qualities) if q is not None and any(f in RETRIED_FLAGS for f in q.flags)]


def better(retry: SentenceQuality, first: SentenceQuality) -> bool:
    """True when the retry fires fewer checks, or as many with a higher confidence."""
    if len(retry.flags) != len(first.flags):
        return len(retry.flags) < len(first.flags)
    return (retry.confidence or 0.0) > (first.confidence or 0.0)


def text_quality(sentences: list[SentenceQuality]) -> tuple[float | None, list[str]]:
    """A text's confidence (its sentences', weighted by their pieces) and its flags."""
    known = [q for q in sentences if q.confidence is not None]
    weight = sum(max(q.pieces, 1) for q in known)
    confidence = sum(q.confidence * max(q.pieces, 1) for q in known) / weight if known else None
    flags = []
    for q in sentences:
        flags += [f for f in q.flags if f not in flags]
    return confidence, flags


TAG = re.compile(r"<[^<>]*>")
LOCATE_WINDOW = 2000


def locate(text: str, sentences: list[SentenceQuality], *, markup: bool = False) -> list[LocatedWord]:
    """The sentences' words found in ``text`` in order (case-insensitively; ``markup``: not inside
    a tag)."""
    if markup:  # tags blanked out, the characters where they are
        text = TAG.sub(lambda m: " " * len(m.group(0)), text)
    lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)  # offsets kept
    at, out = 0, []
    for q in sentences:
        for w in q.words:
            # within LOCATE_WINDOW characters of the last word found: a word not in the text costs
            # that much, not the rest of the text
            k = lowered.find(w.word.lower(), at, at + len(w.word) + LOCATE_WINDOW) if w.word else -1
            if k < 0:
                out.append(LocatedWord(w.word, w.confidence, None, None))
                continue
            out.append(LocatedWord(w.word, w.confidence, k, k + len(w.word)))
            at = k + len(w.word)
    return out


def quality_record(t) -> dict:
    """A TextTranslation's trust as JSON: what `nmt translate --quality` writes per text and the
    HTTP API answers per translation."""
    return {
        "confidence": None if t.confidence is None else round(t.confidence, 4),
        "flags": list(t.flags),
        "restored": list(t.restored),
        "sentences": [
            {
                "output": q.output,
                "confidence": None if q.confidence is None else round(q.confidence, 4),
                "flags": list(q.flags),
                "retried": q.retried,
            }
            for q in t.sentences
        ],
        "words": [
            {"word": w.word, "confidence": round(w.confidence, 4), "start": w.start, "end": w.end}
            for w in t.words
        ],
    }
