"""ALL-CAPS and Title-Case input: translated in normal case, the output recased to match.

    case = case_of("TWO DOGS PLAY IN THE SNOW.")     # "upper"
    normal_case("TWO DOGS PLAY IN THE SNOW.", case)  # "Two dogs play in the snow."
    recase("Zwei Hunde spielen im Schnee.", case)    # "ZWEI HUNDE SPIELEN IM SCHNEE."

A model trained on normally cased text has seen few upper-case pieces: ALL-CAPS input is split
into rare single-letter pieces and translates to garbage, Title Case into capitalised pieces that
make it hallucinate (the issue's rows: "VAAAAAAEEEE...G."). Marian (``--all-caps-every``) and
OpusTrainer (UpperCase / TitleCase modifiers) teach the model instead, at training time
(``nmt prepare --case-augment``); this module is the inference-time handling that works with any
model: the sentence is given to the model in sentence case, and the output is upper-cased, or
each of its words capitalised, to match the input.

``normal_case`` keeps a word capitalised where the model's vocabulary knows it that way
(``keep_capital``: the capitalised form takes fewer SentencePiece pieces than the lower-case one,
as for names: "John" is one piece, "john" two), so that names stay names.
"""

from __future__ import annotations

import re
from typing import Callable

NORMAL, UPPER, TITLE = "normal", "upper", "title"

# words left in lower case by English Title Case (and so not counted against it)
SMALL_WORDS = frozenset(
    "a an the and but or nor for so yet of in on at to by up as from into onto with over via per vs".split()
)
WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")  # letters (an apostrophe inside)


def case_of(text: str) -> str:
    """UPPER when the text has at least two letters and all of its cased letters are upper case;
    TITLE when it has at least three words and every word but the small ones (SMALL_WORDS) starts
    with a capital followed by lower case; else NORMAL."""
    letters = [c for c in text if c.isalpha() and c.lower() != c.upper()]
    if len(letters) >= 2 and all(c.isupper() for c in letters):
        return UPPER
    words = WORD.findall(text)
    if len(words) >= 3:
        big = [w for w in words if w.lower() not in SMALL_WORDS or w[0].isupper()]
        if len(big) >= 3 and all(w[0].isupper() and (len(w) == 1 or w[1:].islower()) for w in big):
            return TITLE
    return NORMAL


def normal_case(text: str, case: str, *, keep_capital: Callable[[str], bool] | None = None) -> str:
    """``text`` in sentence case: every word lower case but the first letter of the text, and but
    words ``keep_capital(word)`` (given capitalised) says to keep so; NORMAL text is returned as is."""
    if case == NORMAL:
        return text

    def word(m: re.Match) -> str:
        w = m.group(0)
        capital = same_length(w[:1], str.upper) + same_length(w[1:], str.lower)
        return capital if keep_capital is not None and keep_capital(capital) else same_length(w, str.lower)

    lowered = WORD.sub(word, text)
    for k, c in enumerate(lowered):
        if c.isalpha():
            return lowered[:k] + same_length(c, str.upper) + lowered[k + 1 :]
    return lowered


def same_length(text: str, change) -> str:
    """``change`` (str.upper or str.lower) applied character by character, keeping a character
    whose changed form is longer (so that offsets stay valid), but ß, upper-cased as ẞ."""
    out = []
    for c in text:
        d = "ẞ" if c == "ß" and change is str.upper else change(c)
        out.append(d if len(d) == 1 else c)
    return "".join(out)


def recase(text: str, case: str) -> str:
    """The output in the input's case, character for character (same length): UPPER all upper
    case, TITLE each word capitalised (its first letter upper case, the rest as the model wrote
    it); NORMAL as is."""
    if case == UPPER:
        return same_length(text, str.upper)
    if case == TITLE:
        return WORD.sub(lambda m: same_length(m.group(0)[:1], str.upper) + m.group(0)[1:], text)
    return text


def fewer_pieces(sp) -> Callable[[str], bool]:
    """``keep_capital`` for a SentencePiece model: True when the capitalised word takes fewer
    pieces than its lower-case form (the model has seen it capitalised, as a name)."""
    cache: dict[str, bool] = {}

    def keep(word: str) -> bool:
        if word not in cache:
            cache[word] = len(sp.encode(word)) < len(sp.encode(word.lower()))
        return cache[word]

    return keep


def known_lower(sp) -> Callable[[str], bool]:
    """For a SentencePiece model: True when a word's lower-case form is one piece (a word the model
    writes in lower case inside a sentence: "eine", "in", not "Kinder")."""
    unk = sp.unk_id()
    return lambda word: sp.piece_to_id("▁" + word.lower()) != unk


def lower_first(text: str, lower_known: Callable[[str], bool] | None) -> str:
    """``text`` with its first word in lower case when it is capitalised and ``lower_known`` says the
    model writes it in lower case (the start of a part of a cut sentence, not of a sentence)."""
    m = WORD.match(text)
    if m is None or lower_known is None or not m.group(0)[:1].isupper() or not lower_known(m.group(0)):
        return text
    return same_length(text[:1], str.lower) + text[1:]
