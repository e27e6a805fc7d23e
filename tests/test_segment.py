"""nmt.infer.segment: sentences split and joined with their spacing; long sentences cut at clauses."""

from nmt.infer.segment import cut_sentence, cut_spans, part_output, split_text


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
