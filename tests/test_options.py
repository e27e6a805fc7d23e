"""SearchOptions: one checked value for how to search (nmt/infer/options.py)."""

from __future__ import annotations

import argparse
import math

import pytest

from nmt.infer.options import GREEDY, Sampling, SearchOptions, with_fields


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(beam=0), r"beam=0: must be an integer >= 1"),
        (dict(beam=2.5), r"beam=2.5: must be an integer >= 1"),
        (dict(beam=2, nbest=3), r"nbest=3: must be between 1 and beam=2"),
        (dict(alpha=math.nan), r"alpha=nan: must be a number in \[-100, 100\]"),
        (dict(alpha=101.0), r"alpha=101.0: must be a number"),
        (dict(max_len_a=math.inf), r"max_len_a=inf, max_len_b=50: must be finite"),
        (dict(stopping="never"), r"stopping='never': must be one of exact, fast"),
        (dict(min_len=-1), r"min_len=-1: must be an integer >= 0"),
        (dict(no_repeat_ngram=-2), r"no_repeat_ngram=-2: must be an integer >= 0"),
        (dict(beam=4, nbest=2, sampling=Sampling()), r"nbest=2: sampling draws one output per sentence"),
    ],
)
def test_an_invalid_value_cannot_be_made_and_the_error_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        SearchOptions(**fields)
    with pytest.raises(ValueError, match=message):  # nor by changing a valid one
        SearchOptions().replace(**fields)


def test_sampling_is_checked_when_made():
    with pytest.raises(ValueError, match=r"temperature=0.0, topk=0, topp=1.0: need 0 < T < inf"):
        Sampling(temperature=0.0)


def test_the_papers_defaults_and_alpha_resolved_by_beam():
    o = SearchOptions()
    assert (o.beam, o.penalty, o.nbest, o.max_len_a, o.max_len_b, o.stopping_rule()) == (
        4,
        0.6,
        1,
        1.0,
        50,
        "exact",
    )
    assert SearchOptions(beam=1).penalty == 0.0 and SearchOptions(beam=1, alpha=0.6).penalty == 0.6
    assert (
        SearchOptions().stopping_rule("fast") == "fast"
        and SearchOptions(stopping="exact").stopping_rule("fast") == "exact"
    )
    assert (GREEDY.beam, GREEDY.penalty) == (1, 0.0)


@pytest.mark.parametrize(
    "a, b, src_len, limit, expected",
    [
        (1.0, 50, 10, 1024, 60),  # the paper's |x| + 50
        (1.0, 50, 1000, 1024, 1024),  # at most the model's positions
        (0.5, 0, 5, 64, 2),  # floor(2.5)
        (0.0, 0, 7, 64, 1),  # at least 1: EOS
        (1.2, -3, 10, 64, 9),
    ],
)
def test_the_output_length_rule(a, b, src_len, limit, expected):
    assert SearchOptions(max_len_a=a, max_len_b=b).max_len(src_len, limit) == expected


def test_keywords_change_a_copy_and_unknown_ones_are_refused():
    base = SearchOptions(beam=5)
    assert with_fields(base, {"alpha": 1.0}) == SearchOptions(beam=5, alpha=1.0) and base.alpha is None
    assert with_fields(None, {}) == SearchOptions() and with_fields(base, {}) is base
    with pytest.raises(TypeError, match=r"'beem'.*not search options"):
        with_fields(None, {"beem": 4})
    with pytest.raises(TypeError, match=r"options: expected a SearchOptions, got dict"):
        with_fields({"beam": 4}, {})


def test_from_args_reads_a_commands_options():
    args = argparse.Namespace(
        beam=2,
        alpha=None,
        nbest=2,
        max_len_a=1.5,
        max_len_b=10,
        stopping="fast",
        no_repeat_ngram=3,
        sampling=False,
        temperature=1.0,
        topk=0,
        topp=1.0,
        seed=0,
        batch_tokens=99,
    )
    assert SearchOptions.from_args(args) == SearchOptions(
        beam=2, nbest=2, max_len_a=1.5, max_len_b=10, stopping="fast", no_repeat_ngram=3
    )
    args.sampling, args.nbest, args.topk, args.seed = True, 1, 5, 7
    assert SearchOptions.from_args(args).sampling == Sampling(topk=5, seed=7)
    assert SearchOptions.from_args(argparse.Namespace(beam=3), nbest=3) == SearchOptions(beam=3, nbest=3)
