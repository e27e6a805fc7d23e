"""nmt.infer.guards: each check fires on its failure and stays quiet on the legitimate look-alike;
the search a flagged sentence gets once more."""

from __future__ import annotations

import math

import pytest

from nmt.infer import guards
from nmt.infer.guards import (
    LENGTH_SLACK,
    LOW_CONFIDENCE,
    MIN_PIECES,
    MIN_WORDS,
    OMISSION_MASS,
    Sentence,
    check,
    copies,
    deletion_candidates,
    repeats,
    retry_options,
    word_coverage,
)
from nmt.infer.options import SearchOptions

RATIO = (0.5, 2.0)  # the validation references' range of output / source pieces
SOURCE = "a man in a red shirt is climbing a rock".split()
OUTPUT = "Ein Mann in einem roten Hemd klettert auf einen Felsen .".split()


def sentence(**changes) -> Sentence:
    """A clean sentence: 10 source pieces, 12 output pieces, every word attended."""
    fields = dict(
        source_words=SOURCE,
        output_words=OUTPUT,
        source_pieces=10,
        output_pieces=12,
        word_coverage=[0.9] * len(SOURCE),
        output_piece_texts=tuple("▁" + w for w in OUTPUT),
        confidence=None,
    )
    return Sentence(**{**fields, **changes})


def test_a_clean_sentence_fires_nothing():
    assert check(sentence(), RATIO) == []


# ----------------------------------------------------------------------------- repetition
def test_a_word_loop_repeats():
    assert repeats("der Hund teertsen teertsen teertsen".split())
    assert repeats("Ha ha HA".split())  # case does not hide it
    assert repeats("a b a b a b".split())  # a 2-gram three times
    assert repeats("w x y z w x y z w x y z".split())  # a 4-gram three times
    assert check(sentence(output_words="ein Mann Mann Mann".split()), RATIO) == ["repetition"]


def test_a_legitimate_repeat_does_not():
    assert not repeats("das ist very very gut".split())  # twice, not three times
    assert not repeats("v w x y z v w x y z v w x y z".split())  # a 5-gram: longer than 4
    assert not repeats("a b a c a b".split())  # not in a row
    assert not repeats(["!", "!", "!", "wow"])  # punctuation is not a word
    assert check(sentence(output_words="es ist sehr sehr gut".split()), RATIO) == []


def test_a_piece_loop_of_six_repeats():
    loop = ["▁CA"] + ["A"] * 6 + ["G"]
    assert repeats(loop, 6, pieces=True)
    assert not repeats(["▁CA"] + ["A"] * 5 + ["G"], 6, pieces=True)
    assert check(sentence(output_piece_texts=tuple(loop), output_words=["CAAAAAAAG"]), RATIO) == [
        "repetition"
    ]
    five = ["▁CA"] + ["A"] * 5 + ["G"]
    assert check(sentence(output_piece_texts=tuple(five), output_words=["CAAAAAAG"]), RATIO) == []


# ----------------------------------------------------------------------------- copy
def test_an_output_that_is_the_source_is_a_copy():
    assert copies(SOURCE, list(SOURCE))
    assert copies(SOURCE, [w.upper() for w in SOURCE] + ["."])  # case and punctuation aside
    assert check(sentence(output_words=list(SOURCE)), RATIO) == ["copy"]
    assert check(sentence(output_words=list(SOURCE)), RATIO, translates=False) == []


def test_an_output_mostly_taken_from_the_source_is_a_copy():
    """COPY_SHARE (0.8) of the output's words from the source: 4 of 5 are, 3 of 5 are not."""
    assert copies(SOURCE, "a man in a Felsen".split())
    assert not copies(SOURCE, "a man in einem Felsen".split())


def test_numbers_names_and_short_sources_are_not_copies():
    source = "Call 555 1234 or 555 9876 today".split()
    assert not copies(source, "555 1234 555 9876".split())  # digits only: nothing to translate
    assert not copies(source, "Ruf 555 1234 oder 555 9876 heute an".split())
    short = SOURCE[: MIN_WORDS - 1]
    assert not copies(short, list(short))  # under MIN_WORDS words
    assert copies(SOURCE[:MIN_WORDS], list(SOURCE[:MIN_WORDS]))
    assert not copies(SOURCE, [])


def test_a_line_of_numbers_kept_as_it_is_is_not_a_copy():
    numbers = "2017 2018 2019 2020".split()
    assert not copies(numbers, list(numbers))


# ----------------------------------------------------------------------------- length
def test_length_fires_outside_the_validation_range_widened_by_the_slack():
    """10 source pieces, validation range (0.5, 2.0): outputs from 10 * 0.5 / LENGTH_SLACK to
    10 * 2.0 * LENGTH_SLACK pieces pass; one piece beyond either end fires."""
    lo, hi = 10 * RATIO[0] / LENGTH_SLACK, 10 * RATIO[1] * LENGTH_SLACK
    assert LENGTH_SLACK > 1  # wider than the validation range
    ends = [
        (math.floor(hi), False),
        (math.floor(hi) + 1, True),
        (math.ceil(lo), False),
        (math.ceil(lo) - 1, True),
    ]
    for pieces, fires in ends:
        flags = check(sentence(output_pieces=pieces), RATIO)
        assert ("length" in flags) is fires, pieces
    assert "length" in check(sentence(output_pieces=31), (0.5, 2.0))
    assert "length" not in check(sentence(output_pieces=31), (0.5, 2.2))  # the range read, not fixed


def test_length_is_not_judged_on_a_source_of_few_pieces():
    short = sentence(source_pieces=MIN_PIECES - 1, output_pieces=100)
    assert "length" not in check(short, RATIO)
    assert "length" in check(sentence(source_pieces=MIN_PIECES, output_pieces=100), RATIO)


# ----------------------------------------------------------------------------- omission
def test_a_word_the_output_never_attends_to_is_an_omission():
    source = "a man in a RED shirt .".split()
    coverage = [0.9, 1.2, 0.8, 0.7, OMISSION_MASS / 2, 1.1, 0.0]
    assert check(sentence(source_words=source, word_coverage=coverage), RATIO) == ["omission"]


def test_punctuation_and_attended_words_are_not_omissions():
    source = "a man in a red shirt . …".split()
    coverage = [0.9, 1.2, 0.8, 0.7, OMISSION_MASS, 1.1, 0.0, 0.001]  # at the threshold: attended
    assert check(sentence(source_words=source, word_coverage=coverage), RATIO) == []
    assert check(sentence(source_words=source, word_coverage=None), RATIO) == []  # not known


def test_a_long_word_the_output_does_not_depend_on_is_an_omission():
    """Attended, yet deleting it from the source leaves the output as likely: left out."""
    assert check(sentence(word_drops={6: guards.UNUSED_DROP + 0.1}), RATIO) == ["omission"]
    assert check(sentence(word_drops={6: guards.UNUSED_DROP - 0.1}), RATIO) == []
    assert check(sentence(word_drops={}), RATIO) == []
    coverage = [0.9, 1.2, 0.8, 0.7, OMISSION_MASS / 2, 1.1, 0.9, 0.9, 0.9, 0.9]  # both: flagged once
    assert check(sentence(word_coverage=coverage, word_drops={6: 1.0}), RATIO) == ["omission"]


def test_the_words_tested_by_deletion_are_long_and_little_attended():
    words = ["a", "cotton", "onto", "truck", "men", "loading"]
    coverage = [0.01, 0.1, 0.5, OMISSION_MASS / 2, 0.1, guards.UNUSED_COVERAGE]
    assert deletion_candidates(words, coverage) == [1]  # "truck": the attention check's; "men": short


def test_a_sentence_tests_at_most_its_least_attended_words():
    words = ["word"] * (guards.UNUSED_MOST + 3)
    coverage = [0.1 + 0.001 * ((7 * k) % len(words)) for k in range(len(words))]  # all under the bound
    got = deletion_candidates(words, coverage)
    least = sorted(range(len(words)), key=lambda k: coverage[k])[: guards.UNUSED_MOST]
    assert got == sorted(least) and len(got) == guards.UNUSED_MOST


def test_word_coverage_sums_the_pieces_of_each_word():
    pieces = ["▁a", "▁r", "ed", "▁shirt", ".", "▁", "5"]
    words, coverage = word_coverage(pieces, [0.5, 0.1, 0.2, 0.6, 0.05, 0.01, 0.3])
    assert words == ["a", "red", "shirt.", "5"]  # as the text splits on spaces
    assert coverage == pytest.approx([0.5, 0.3, 0.65, 0.31])


# ----------------------------------------------------------------------------- low confidence
def test_low_confidence_fires_only_on_a_calibrated_confidence_under_the_threshold():
    assert check(sentence(confidence=LOW_CONFIDENCE / 2), RATIO) == ["low-confidence"]
    assert check(sentence(confidence=LOW_CONFIDENCE), RATIO) == []
    assert check(sentence(confidence=0.9), RATIO) == []
    assert check(sentence(confidence=None), RATIO) == []  # uncalibrated: never


def test_the_thresholds_are_read_when_checking(monkeypatch):
    """A test (or a benchmark) that moves a threshold moves the check."""
    monkeypatch.setattr(guards, "OMISSION_MASS", 1.0)
    assert check(sentence(), RATIO) == ["omission"]
    monkeypatch.setattr(guards, "LOW_CONFIDENCE", 1.0)
    assert check(sentence(confidence=0.9), RATIO) == ["omission", "low-confidence"]


def test_several_checks_fire_together_in_a_fixed_order():
    bad = sentence(
        output_words=SOURCE + ["rock", "rock", "rock"],
        output_pieces=60,
        word_coverage=[0.0] * len(SOURCE),
        confidence=0.01,
    )
    assert check(bad, RATIO) == ["repetition", "length", "copy", "omission", "low-confidence"]
    assert set(check(bad, RATIO)) <= set(guards.FLAGS)


# ----------------------------------------------------------------------------- retry
@pytest.mark.parametrize("beam, retried", [(1, 8), (4, 8), (5, 10), (12, 24)])
def test_a_retry_doubles_the_beam_to_at_least_8_and_keeps_the_rest(beam, retried):
    options = SearchOptions(beam=beam, alpha=0.8, nbest=beam, max_len_b=7)
    retry = retry_options(options, ["omission"], torch_engine=True)
    assert retry.beam == retried and retry.nbest == 1
    assert retry.alpha == 0.8 and retry.max_len_b == 7 and retry.no_repeat_ngram == 0


def test_a_retry_blocks_repeated_trigrams_against_a_loop_on_the_torch_engine_only():
    options = SearchOptions(beam=4)
    assert retry_options(options, ["repetition"], torch_engine=True).no_repeat_ngram == 3
    assert retry_options(options, ["length", "repetition"], torch_engine=True).no_repeat_ngram == 3
    assert retry_options(options, ["repetition"], torch_engine=False).no_repeat_ngram == 0
    assert retry_options(options, ["copy", "length"], torch_engine=True).no_repeat_ngram == 0
    own = SearchOptions(beam=4, no_repeat_ngram=2)  # the user's own block is kept
    assert retry_options(own, ["repetition"], torch_engine=True).no_repeat_ngram == 2
