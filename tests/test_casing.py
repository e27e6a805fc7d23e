"""nmt.realtext.casing: ALL CAPS and Title Case detected, translated in sentence case, recased."""

import pytest
from timing_fixtures import assert_linear

from nmt.realtext.casing import NORMAL, TITLE, UPPER, case_of, lower_first, normal_case, recase, same_length


def test_case_of_tells_all_caps_title_case_and_normal_text_apart():
    assert case_of("TWO DOGS PLAY IN THE SNOW.") == UPPER
    assert case_of("WARNING") == UPPER
    assert case_of("Two Dogs Play In The Snow.") == TITLE
    assert case_of("Two Dogs Play in the Snow.") == TITLE
    assert case_of("Two dogs play in the snow.") == NORMAL
    assert case_of("A man from NASA talks.") == NORMAL
    assert case_of("John Smith") == NORMAL  # two words: a name, not a title
    assert case_of("I") == NORMAL
    assert case_of("123 !") == NORMAL


def test_normal_case_gives_sentence_case_keeping_words_the_model_knows_capitalised():
    assert normal_case("TWO DOGS PLAY IN THE SNOW.", UPPER) == "Two dogs play in the snow."
    assert normal_case("Two Dogs Play In The Snow.", TITLE) == "Two dogs play in the snow."
    names = {"John", "London"}
    assert (
        normal_case("JOHN WALKS IN LONDON.", UPPER, keep_capital=names.__contains__)
        == "John walks in London."
    )
    assert normal_case("Two dogs.", NORMAL) == "Two dogs."


def test_recase_matches_the_input_and_keeps_the_length():
    assert recase("Zwei Hunde spielen im Schnee.", UPPER) == "ZWEI HUNDE SPIELEN IM SCHNEE."
    assert recase("Zwei Hunde spielen im Schnee.", TITLE) == "Zwei Hunde Spielen Im Schnee."
    assert recase("Zwei Hunde.", NORMAL) == "Zwei Hunde."
    assert recase("große Straße", UPPER) == "GROẞE STRAẞE"  # one character each: offsets stay valid
    assert len(same_length("İstanbul", str.lower)) == len("İstanbul")


def test_lower_first_lowers_a_word_the_model_writes_in_lower_case_inside_a_sentence():
    known = {"eine", "in"}.__contains__
    assert lower_first("Eine Frau geht.", lambda w: known(w.lower())) == "eine Frau geht."
    assert lower_first("Kinder spielen.", lambda w: known(w.lower())) == "Kinder spielen."
    assert lower_first("Eine Frau.", None) == "Eine Frau."


# ----------------------------------------------------------------------------- worst cases


def every_step(text: str) -> None:
    case = case_of(text)
    source = normal_case(text, UPPER, keep_capital=lambda w: len(w) < 3)
    lower_first(recase(source, TITLE), lambda w: True)
    recase(text, case)


@pytest.mark.slow  # over 3 s on 2 cores
def test_casing_takes_linear_time_on_worst_case_lines_of_1_mb():
    n = 1 << 20
    for make in [
        lambda n: "A" * n,
        lambda n: "A'" * (n // 2),
        lambda n: "'" * n,
        lambda n: "ß" * n,
        lambda n: "İ" * n,
        lambda n: "Ab " * (n // 3),
        lambda n: "a’b" * (n // 3),
        lambda n: "1" * n,
    ]:
        assert_linear(every_step, make, n)
