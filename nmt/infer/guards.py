"""Guards: the failure modes of a fluent-looking translation, checked on each sentence the model
translated. Each check that fires is a flag, named:

- ``repetition``: a loop, an n-gram of 1 to 4 output words said three times or more in a row
  ("teertsen teertsen teertsen"), or of 1 to 4 pieces six times or more ("CAAAAAAAAAAAG");
- ``length``: the output's pieces over the source's outside the range the validation references
  make likely (Calibration.length_ratio, widened by LENGTH_SLACK; sources of MIN_PIECES or more);
- ``copy``: the output repeats the source (the same words, or COPY_SHARE of its words taken from
  the source), for a source of MIN_WORDS words or more, from a model that translates between two
  languages;
- ``omission``: a source word that the output never attends to: the attention mass its pieces
  received (nmt.infer.confidence coverage: the last layer's encoder-decoder attention summed over
  the output pieces) is under OMISSION_MASS; or a word of UNUSED_LETTERS letters or more that the
  output attends to little (under UNUSED_COVERAGE) and does not depend on: deleting it from the
  source does not make the output less likely (nmt.infer.omission, a drop above UNUSED_DROP). A
  model attends to words it leaves out, so the attention alone misses most omissions of its own
  outputs. The torch engine only (CTranslate2 does not give the attention after the search);
- ``low-confidence``: a calibrated sentence confidence (nmt calibrate) under LOW_CONFIDENCE, an
  expected chrF under 25 (an uncalibrated checkpoint: never).

nmt.realtext.pipeline searches a flagged sentence once more (a wider beam, and the n-gram block
against a loop) and keeps the retry where it fires fewer checks; what still fires stays flagged in
the answer, never passed off silently. The thresholds were chosen on Multi30k's validation set
(benchmarks/quality.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .omission import word_spans
from .options import SearchOptions

FLAGS = ("repetition", "length", "copy", "omission", "low-confidence")
LENGTH_SLACK = 1.5  # the validation range's ends divided / multiplied by this
MIN_PIECES = 5
MIN_WORDS = 4
COPY_SHARE = 0.8
OMISSION_MASS = 0.04
UNUSED_LETTERS = 4
UNUSED_COVERAGE = 0.2
UNUSED_DROP = 0.0  # log p(y | x without the word) - log p(y | x) above this: not needed
UNUSED_MOST = 8  # words tested per sentence at most (each one teacher-forced pass)
LOW_CONFIDENCE = 0.25
WORD = re.compile(r"\w", re.UNICODE)


@dataclass(frozen=True)
class Sentence:
    """What the checks read of one sentence: its source and output words, pieces counts, and the
    coverage of each source word (None: not known)."""

    source_words: list[str]
    output_words: list[str]
    source_pieces: int
    output_pieces: int
    word_coverage: list[float] | None = None
    output_piece_texts: tuple[str, ...] = ()
    confidence: float | None = None  # calibrated; None: uncalibrated or not known
    word_drops: dict[int, float] | None = None  # deletion_candidates' (by index): nmt.infer.omission


def repeats(words, times: int = 3, longest: int = 4, *, pieces: bool = False) -> bool:
    """True when some n-gram (n <= ``longest``) of word tokens (``pieces``: of any pieces)
    occurs ``times`` times in a row."""
    tokens = [w.lower() for w in words if pieces or WORD.search(w)]
    for n in range(1, longest + 1):
        for start in range(0, len(tokens) - n * times + 1):
            gram = tokens[start : start + n]
            if all(tokens[start + k * n : start + (k + 1) * n] == gram for k in range(1, times)):
                return True
    return False


def copies(source: list[str], output: list[str]) -> bool:
    """True when the output is the source again (COPY_SHARE of its words from it)."""
    src = [w.lower() for w in source if WORD.search(w)]
    out = [w.lower() for w in output if WORD.search(w)]
    alphabetic = [w for w in out if not w.isdigit()]
    if len(src) < MIN_WORDS or len(alphabetic) < MIN_WORDS:  # numbers are kept as they are
        return False
    if out == src:
        return True
    pool = set(src)
    return sum(w in pool for w in alphabetic) / len(alphabetic) >= COPY_SHARE


def check(s: Sentence, length_ratio: tuple[float, float], *, translates: bool = True) -> list[str]:
    """The flags of one sentence (see the module's docstring); ``translates``: False for a model
    whose output may repeat its input (the copy check is then off)."""
    flags = []
    if repeats(s.output_words) or repeats(s.output_piece_texts, 6, pieces=True):
        flags.append("repetition")
    if s.source_pieces >= MIN_PIECES:
        lo, hi = length_ratio
        ratio = s.output_pieces / s.source_pieces
        if ratio < lo / LENGTH_SLACK or ratio > hi * LENGTH_SLACK:
            flags.append("length")
    if translates and copies(s.source_words, s.output_words):
        flags.append("copy")
    if s.word_coverage is not None and any(
        c < OMISSION_MASS for w, c in zip(s.source_words, s.word_coverage) if WORD.search(w)
    ):
        flags.append("omission")
    elif s.word_drops and any(d > UNUSED_DROP for d in s.word_drops.values()):
        flags.append("omission")
    if s.confidence is not None and s.confidence < LOW_CONFIDENCE:
        flags.append("low-confidence")
    return flags


def word_coverage(pieces: list[str], coverage: list[float]) -> tuple[list[str], list[float]]:
    """Source words (nmt.infer.omission.word_spans) and the attention their pieces received
    together."""
    spans = word_spans(pieces[: len(coverage)])
    return [w for w, _, _ in spans], [sum(coverage[a:b]) for _, a, b in spans]


def deletion_candidates(words: list[str], coverage: list[float]) -> list[int]:
    """The words the omission check deletes one at a time (nmt.infer.omission): UNUSED_LETTERS
    letters or more, attended under UNUSED_COVERAGE (and not already under OMISSION_MASS); of
    more than UNUSED_MOST, the least attended (in source order), so that a sentence costs a
    bounded number of passes whatever its text."""
    found = [
        k
        for k, (w, c) in enumerate(zip(words, coverage))
        if sum(ch.isalpha() for ch in w) >= UNUSED_LETTERS and OMISSION_MASS <= c < UNUSED_COVERAGE
    ]
    return sorted(sorted(found, key=lambda k: coverage[k])[:UNUSED_MOST])


def retry_options(options: SearchOptions, flags: list[str], *, torch_engine: bool) -> SearchOptions:
    """The search a flagged sentence gets once more: twice the beam (at least 8) and, against a
    loop, the trigram block (the torch engine's)."""
    retry = options.replace(beam=max(2 * options.beam, 8), nbest=1)
    if "repetition" in flags and torch_engine and not options.no_repeat_ngram:
        retry = retry.replace(no_repeat_ngram=3)
    return retry
