"""What translating returns and raises, shared by every engine and command (a leaf: imports nothing of nmt).

``Translation`` is one output of ``Translator.translate_nbest`` (nmt.infer.translate, the torch
engine; nmt.infer.engine_ctranslate2); ``TranslateError`` is a user-facing error of the API and of
`nmt translate` / `nmt tune-alpha`, whose message says what was wrong and where.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError


class TranslateError(UserError):
    """A user-facing error of `nmt translate` (bad input, bad option); the message says which."""


class ConstraintsError(TranslateError):
    """Lexical constraints that cannot be searched for; the message names the line (from 1)."""


@dataclass
class Translation:
    text: str
    score: float  # sum of log-probabilities / lp(|Y|), |Y| counting EOS (see nmt.infer.search)
    tokens: list[int]  # output ids in the model's order (a right-to-left model's: last piece first)
    # by teacher forcing (nmt.infer.confidence), where asked: each piece's log-probability then
    # EOS's; the attention each source piece received; the omission check's words (by index among
    # the source's words) and how the output's log-probability changes without each (nmt.infer.omission)
    log_probs: list[float] | None = None
    coverage: list[float] | None = None
    word_drops: dict[int, float] | None = None


def check_strings(items, *, item: str, expected: str) -> None:
    """TypeError unless ``items`` is a list or tuple of str: ``expected`` (what was expected) when
    it is not a list, else naming the first other item as ``item`` N (from 1)."""
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"{expected}, got {type(items).__name__}")
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise TypeError(f"{item} {i + 1}: expected str, got {type(s).__name__}")
