"""nmt.realtext.segment: sentences split and joined with their spacing; long sentences cut at clauses."""

import pytest
from timing_fixtures import assert_linear

from nmt.realtext.segment import MAX_SEGMENT_CHARS, cut_spans, part_output, split_text


def cut_sentence(sentence: str, max_words: int) -> list[str]:
    """The parts of ``sentence`` (cut_spans) as strings."""
    return [sentence[a:b] for a, b in cut_spans(sentence, max_words)]


def test_split_text_keeps_every_space_line_break_and_blank_line():
    text = "  Two dogs play in the snow. A man is riding a bike.\n\nThe children are laughing!  \n"
    parts = split_text(text, language="en")
    assert parts.sentences == [
        "Two dogs play in the snow.",
        "A man is riding a bike.",
        "The children are laughing!",
    ]
    assert parts.gaps == ["  ", " ", "\n\n", "  \n"]
    assert parts.join(parts.sentences) == text
    assert parts.join(["A", "B", "C"]) == "  A B\n\nC  \n"


def test_split_text_knows_abbreviations_per_language():
    assert split_text("Mr. Smith went to Washington. He left.", language="en").sentences == [
        "Mr. Smith went to Washington.",
        "He left.",
    ]
    assert split_text("Er kam z.B. am 3. Mai. Dann ging er.", language="de").sentences == [
        "Er kam z.B. am 3. Mai.",
        "Dann ging er.",
    ]
    assert split_text("我爱你。你好吗？", language="zh").sentences == ["我爱你。", "你好吗？"]


def test_no_split_makes_each_line_one_sentence():
    parts = split_text("One. Two.\nThree.", split=False)
    assert parts.sentences == ["One. Two.", "Three."]
    assert parts.gaps == ["", "\n", ""]


def test_a_blank_text_has_no_sentences_and_is_kept():
    for text in ["", "   ", "\n\n"]:
        parts = split_text(text)
        assert parts.sentences == [] and parts.join([]) == text


LONG = (
    "A man in a red shirt is standing on a tall ladder next to a building, while a woman with a "
    "small brown dog walks past him on the sidewalk and three children in yellow raincoats are jumping "
    "in puddles near an old man who is sitting on a bench reading a newspaper."
)


def test_a_long_sentence_is_cut_at_clause_boundaries_into_parts_that_keep_every_word():
    parts = cut_sentence(LONG, 20)
    assert parts == [
        "A man in a red shirt is standing on a tall ladder next to a building,",
        "while a woman with a small brown dog walks past him on the sidewalk",
        "and three children in yellow raincoats are jumping in puddles near an old man",
        "who is sitting on a bench reading a newspaper.",
    ]
    assert " ".join(parts).split() == LONG.split()
    assert all(len(p.split()) <= 20 for p in parts)


def test_a_sentence_without_clause_boundaries_is_cut_in_the_middle():
    words = " ".join(f"w{i}" for i in range(10))
    assert cut_sentence(words, 6) == ["w0 w1 w2 w3 w4", "w5 w6 w7 w8 w9"]


def test_short_sentences_and_max_words_0_are_not_cut():
    assert cut_spans("Two dogs play.", 3) == [(0, 14)]
    assert cut_sentence(LONG, 0) == [LONG]
    assert cut_sentence(LONG, 100) == [LONG]


def test_part_output_drops_the_full_stop_of_a_part_that_did_not_end_the_sentence():
    assert (
        part_output("a man on a ladder,", "ein Mann auf einer Leiter.", last=False)
        == "ein Mann auf einer Leiter,"
    )
    assert part_output("and a dog", "und ein Hund.", last=False) == "und ein Hund"
    assert part_output("a bench.", "eine Bank.", last=True) == "eine Bank."


# ----------------------------------------------------------------------------- worst cases


MB = 1 << 20
WORST_LINES = {
    "one letter": lambda n: "a" * n,
    "spaces": lambda n: "x" + " " * n + "x",
    "full stops": lambda n: "." * n,
    "a. repeated": lambda n: "a. " * (n // 3),
    "long words": lambda n: ("w" * 5000 + " ") * (n // 5001),
    "apostrophes": lambda n: "'" * n,  # sentencex alone takes quadratic time on these
    "guillemets": lambda n: "« " * (n // 2),
    "curly quotes": lambda n: "“" * n,
    "line breaks": lambda n: "\n" * n,
    "blank lines and words": lambda n: "a\n\n" * (n // 3),
}


@pytest.mark.slow  # over 3 s on 2 cores
def test_splitting_takes_linear_time_on_worst_case_lines_of_1_mb():
    for name, make in WORST_LINES.items():
        assert_linear(split_text, make, MB)
        text = make(4 * MAX_SEGMENT_CHARS + 7)
        parts = split_text(text)
        assert parts.join(parts.sentences) == text, name


def test_a_line_longer_than_the_window_is_split_where_sentencex_splits_it():
    sentences = [
        f"Sentence number {k} says that Mr. Smith met Dr. Jones in the U.S. today." for k in range(200)
    ]
    line = " ".join(sentences)
    assert len(line) > 5 * MAX_SEGMENT_CHARS
    parts = split_text(line)
    assert parts.sentences == sentences
    assert parts.join(parts.sentences) == line


def test_cutting_takes_linear_time_on_a_sentence_of_1_mb():
    assert_linear(lambda s: cut_spans(s, 40), lambda n: "w " * (n // 2), MB)
    assert_linear(lambda s: cut_spans(s, 40), lambda n: "w, " * (n // 3), MB)
    text = "w " * 5000  # 5000 words halved 7 times: 128 parts of 39 or 40 words
    spans = cut_spans(text, 40)
    assert len(spans) == 128 and all(39 <= len(text[a:b].split()) <= 40 for a, b in spans)


def test_a_window_edge_never_ends_a_sentence():
    long = " ".join(["katze"] * (2 * MAX_SEGMENT_CHARS // 6))  # no sentence end in any window
    assert split_text(long).sentences == [long]
    text = f"Two dogs play. {long}. A man runs."
    assert split_text(text).sentences == ["Two dogs play.", f"{long}.", "A man runs."]
