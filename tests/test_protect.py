"""nmt/realtext/protect.py: the spans found (each kind, the look-alikes left alone, linear time on
a worst case), a span the translation lost put back after the aligned words, one it kept left."""

from __future__ import annotations

from timing_fixtures import assert_linear

from nmt.realtext.markup import Projected, Run
from nmt.realtext.protect import LONGEST_TOKEN, Hidden, find_spans, hide, lost, restore


def kinds(text: str) -> list[tuple[str, str]]:
    return [(text[s.start : s.end], s.kind) for s in find_spans(text)]


def test_every_kind_of_span_is_found_and_a_url_ends_before_its_sentences_full_stop():
    text = (
        "At 5:30 on 2024-05-01, 3 dogs (see https://x.org/a?b=1). Mail me@x.org: {name}, {{count}}, "
        "%s, %(n)d, %1$s, $HOME, ${x}, <br/> and `make test` 🐶 cost 3.5%."
    )
    found = kinds(text)
    for want in [
        ("5:30", "time"),
        ("2024-05-01", "date"),
        ("3", "number"),
        ("https://x.org/a?b=1", "url"),
        ("me@x.org", "email"),
        ("{name}", "placeholder"),
        ("{{count}}", "placeholder"),
        ("%s", "placeholder"),
        ("%(n)d", "placeholder"),
        ("%1$s", "placeholder"),
        ("$HOME", "placeholder"),
        ("${x}", "placeholder"),
        ("<br/>", "placeholder"),
        ("`make test`", "code"),
        ("🐶", "emoji"),
        ("3.5%", "number"),
    ]:
        assert want in found
    starts = [s.start for s in find_spans(text)]
    assert starts == sorted(starts)


def test_words_and_punctuation_are_not_spans_and_nothing_inside_code_is_found_twice():
    text = "A man in a RED shirt, climbing... Who? (C-3PO's) 50 percent"
    assert kinds(text) == [("3", "number"), ("50", "number")]
    assert kinds("Run `rm -rf 5` now") == [("`rm -rf 5`", "code")]
    assert kinds("x" * (LONGEST_TOKEN + 1) + "5") == []  # a token too long is not searched


def test_finding_spans_takes_time_linear_in_the_text():
    assert_linear(find_spans, lambda n: "a.a@" * n, 64_000)  # one token, too long: one pass
    assert_linear(find_spans, lambda n: "1.1@a " * n, 64_000)  # many short tokens
    assert_linear(find_spans, lambda n: "`" + "a " * n, 64_000)  # a backtick never closed


def test_a_lost_span_is_put_after_the_output_word_aligned_before_it_and_a_kept_one_is_left():
    source = "A dog 🐶 is playing at 5 p.m."
    spans = find_spans(source)
    out = "Ein Hund spielt um 5 Uhr."
    # "A dog" -> "Ein Hund" ; "is playing" -> "spielt"; "at 5 p.m." -> "um 5 Uhr."
    pairs = [(0, 1, 0, 3), (2, 5, 4, 8), (11, 21, 9, 15)]
    pairs += [(22, 24, 16, 18), (25, 26, 19, 20), (27, 31, 21, 25)]
    assert [s.kind for s in lost(source, spans, out)] == ["emoji"]
    restored, which = restore(Run(source, []), Projected(out, pairs), spans)
    assert restored.text == "Ein Hund 🐶 spielt um 5 Uhr." and which.restored == ["🐶"]
    moved = [p for p in restored.pairs if p[0] == 11][0]
    assert restored.text[moved[2] : moved[3]] == "spielt"  # the pairs after it shifted with the text
    plain = "A dog is playing at 5 p.m."
    kept, none = restore(Run(plain, []), Projected(out, pairs), find_spans(plain))
    assert kept.text == out and none.restored == []


def test_a_span_the_source_holds_twice_and_the_translation_once_is_put_back():
    source = "2 dogs and 2 cats"
    out = "2 Hunde und Katzen"
    pairs = [(0, 1, 0, 1), (2, 6, 2, 7), (7, 10, 8, 11), (13, 17, 12, 18)]
    restored, which = restore(Run(source, []), Projected(out, pairs), find_spans(source))
    assert restored.text.count("2") == 2 and which.restored == ["2"]
    assert restored.text in ("2 Hunde und 2 Katzen", "2 Hunde und Katzen 2")


def test_hide_takes_each_span_out_with_one_space_and_says_where_it_was():
    text = "🐶 A man with 3 dogs, see https://x.org"
    hidden = hide(text, find_spans(text))
    assert hidden.text == "A man with dogs, see"
    assert hidden.points == [(0, "🐶"), (11, "3"), (20, "https://x.org")]
    assert hide("no spans here", []) == Hidden("no spans here", [])


def test_hidden_spans_come_back_after_the_words_aligned_before_them():
    text = "A man with 3 dogs."
    hidden = hide(text, find_spans(text))  # "A man with dogs."
    out = "Ein Mann mit Hunden."
    pairs = [(0, 1, 0, 3), (2, 5, 4, 8), (6, 10, 9, 12), (11, 15, 13, 19), (15, 16, 19, 20)]
    restored, which = restore(Run(hidden.text, []), Projected(out, pairs), [], hidden.points)
    assert restored.text == "Ein Mann mit 3 Hunden." and which.restored == ["3"]
    alone, _ = restore(Run("", []), Projected("", []), [], [(0, "417")])
    assert alone.text == "417"


def test_planning_and_restoring_many_spans_takes_time_linear_in_the_text():
    """A line of distinct numbers (every one hidden, every one put back) and words between emoji:
    finding, hiding, choosing the units to align and putting back are each one pass."""
    from nmt.realtext.job import TextJob, TextOptions, UnitOutput

    def plan_and_finish(text: str) -> None:
        job = TextJob([text], TextOptions())
        job.finish([UnitOutput(u) for u in job.units])

    assert_linear(plan_and_finish, lambda n: " ".join(str(i) for i in range(n)), 64_000)
    assert_linear(plan_and_finish, lambda n: "a dog 🐶 runs. " * (n // 4), 32_000)


def test_a_lost_span_of_several_is_chosen_by_its_alignment_and_inserts_shift_the_pairs_in_one_pass():
    source = "5 dogs and 5 cats"
    out = "5 Hunde und Katzen"
    pairs = [(0, 1, 0, 1), (2, 6, 2, 7), (7, 10, 8, 11), (11, 12, 12, 18), (13, 17, 12, 18)]
    missing = lost(source, find_spans(source), out, pairs)
    assert [s.start for s in missing] == [11]  # the second 5: its aligned output lacks it
    restored, _ = restore(Run(source, []), Projected(out, pairs), find_spans(source))
    assert restored.text == "5 Hunde und 5 Katzen"
    assert [restored.text[c:d] for _, _, c, d in restored.pairs][-1] == "Katzen"
