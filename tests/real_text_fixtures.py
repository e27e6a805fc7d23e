"""A fake translator for the real-text tests: exact, fast, and as fragile as a model trained on
single, normally cased sentences."""

from __future__ import annotations

import re

from nmt.infer.results import Translation

LEXICON = {
    "two": "zwei",
    "dogs": "Hunde",
    "play": "spielen",
    "in": "in",
    "the": "dem",
    "snow": "Schnee",
    "a": "ein",
    "man": "Mann",
    "is": "ist",
    "riding": "fährt",
    "bike": "Fahrrad",
    "children": "Kinder",
    "are": "sind",
    "laughing": "lachend",
    "near": "nahe",
    "house": "Haus",
    "and": "und",
    "run": "rennen",
    "john": "John",
}


class FakeTranslator:
    """Word for word through LEXICON (a word's first letter upper case where the source's is),
    punctuation copied; like a single-sentence model it stops after the first sentence-final
    mark, and an upper-case word it has not seen in lower case becomes 'VAAAG'."""

    engine = "fake"

    def __init__(self):
        self.calls: list[list[str]] = []

    def word(self, w: str) -> str:
        if not w[0].isalpha():
            return w
        if w.isupper() and len(w) > 1:
            return "VAAAG"
        out = LEXICON.get(w.lower(), w)
        return out[0].upper() + out[1:] if w[0].isupper() else out

    def one(self, sentence: str) -> str:
        out = []
        for w in re.findall(r"\w+|[^\w\s]", sentence):
            out.append(self.word(w))
            if w in ".!?":
                break
        return re.sub(r" ([.,!?;:])", r"\1", " ".join(out))

    def translate_sentences(self, sentences: list[str], **search) -> list[str]:
        self.calls.append(list(sentences))
        return [self.one(s) for s in sentences]

    def translate_nbest(self, sentences: list[str], options=None, **search) -> list[list[Translation]]:
        return [[Translation(t, 0.0, [])] for t in self.translate_sentences(sentences)]


def translate_text(translator, texts, options=None):
    """The pipeline's TextTranslation of one text (or a list of them) with these TextOptions."""
    from nmt.realtext.job import TextOptions
    from nmt.realtext.pipeline import TranslationRequest, translate_request

    one = isinstance(texts, str)
    request = TranslationRequest([texts] if one else texts, text=options or TextOptions())
    out = translate_request(translator, request)
    return out[0] if one else out
