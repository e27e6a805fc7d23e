"""nmt.realtext.quality: how far to trust each translation, per sentence (judge) and per text
(text_quality, locate), and through the pipeline (translate_request): confidences and words for
every text, nothing computed when switched off, a flagged sentence searched once more."""

from __future__ import annotations

import pytest

from nmt.infer import guards
from nmt.infer.confidence import WordConfidence
from nmt.infer.options import SearchOptions
from nmt.infer.results import Translation
from nmt.realtext import quality
from nmt.realtext.job import TextOptions
from nmt.realtext.pipeline import TranslationRequest, translate_request
from nmt.realtext.quality import (
    QualityOptions,
    SentenceQuality,
    better,
    judge,
    locate,
    score_results,
    suspects,
    text_quality,
)

# tiny corpus sentences (serve_fixtures.SENTENCES): the small run loops on "the big tree"
TEXTS = [
    "the dog sees a red ball",
    "",
    "a man sits on the street. the small cat plays with the child.",
    "the big tree",
    "a woman runs in the water",
]


def q(confidence, pieces=10, flags=(), words=()) -> SentenceQuality:
    return SentenceQuality(
        "", confidence, [WordConfidence(w, c) for w, c in words], list(flags), pieces=pieces
    )


# ----------------------------------------------------------------------------- without a model
def test_a_texts_confidence_is_its_sentences_weighted_by_their_pieces():
    confidence, flags = text_quality([q(0.9, 10), q(0.3, 30, ["length"]), q(None, 50, ["copy", "length"])])
    assert confidence == pytest.approx((0.9 * 10 + 0.3 * 30) / 40)  # 0.45; the unknown one aside
    assert flags == ["length", "copy"]  # every sentence's, once each, in order
    assert text_quality([q(None), q(None)]) == (None, [])
    assert text_quality([]) == (None, [])


def test_locate_finds_words_in_order_case_insensitively():
    text = "Der Hund sieht den Hund."
    sentences = [
        q(0.5, words=[("der", 0.1), ("hund", 0.2), ("sieht", 0.3)]),
        q(0.5, words=[("den", 0.4), ("Hund.", 0.5)]),
    ]
    located = locate(text, sentences)
    assert [(w.word, w.confidence, w.start, w.end) for w in located] == [
        ("der", 0.1, 0, 3),
        ("hund", 0.2, 4, 8),
        ("sieht", 0.3, 9, 14),
        ("den", 0.4, 15, 18),
        ("Hund.", 0.5, 19, 24),  # the second "Hund", after "den", not the first
    ]


def test_locate_gives_none_for_a_word_it_cannot_find_and_goes_on_from_the_last_found():
    text = "rot blau grün"
    located = locate(
        text, [q(0.5, words=[("rot", 0.9), ("gelb", 0.8), ("blau", 0.7), ("rot", 0.6), ("grün", 0.5)])]
    )
    assert [(w.start, w.end) for w in located] == [(0, 3), (None, None), (4, 8), (None, None), (9, 13)]
    assert locate("", [q(0.5, words=[("x", 0.1)])])[0].start is None


def test_better_prefers_fewer_flags_then_a_higher_confidence():
    first = q(0.6, flags=["repetition", "length"])
    assert better(q(0.1, flags=["length"]), first)  # fewer flags, even less confident
    assert not better(q(0.9, flags=["repetition", "length", "copy"]), first)
    assert better(q(0.7, flags=["copy", "omission"]), first)
    assert not better(q(0.6, flags=["copy", "omission"]), first)  # a tie keeps the first
    assert not better(q(None, flags=["copy", "omission"]), first)


def test_suspects_are_the_units_flagged_by_a_check_a_search_can_mend():
    qualities = [
        q(0.9),
        None,
        q(0.2, flags=["low-confidence"]),
        q(0.8, flags=["span"]),
        q(0.5, flags=["copy"]),
    ]
    assert suspects(qualities) == [2, 4]  # a lost span is restored or flagged, not searched again


def test_quality_options_score_when_either_is_asked():
    assert QualityOptions().scores
    assert QualityOptions(confidence=False).scores and QualityOptions(guards=False).scores
    assert not QualityOptions(confidence=False, guards=False).scores


# ----------------------------------------------------------------------------- judge, on the small run
def scored(translator, sources, outputs=None, coverage=True) -> list[Translation]:
    """The best translations of ``sources`` (or ``outputs`` as given) with their forced scores."""
    if outputs is None:
        results = translator.translate_nbest(sources, SearchOptions(beam=4))
    else:
        results = [[Translation(o, 0.0, translator.sp.encode(o))] for o in outputs]
    score_results(translator, sources, results, coverage=coverage)
    return [r[0] for r in results]


def test_judge_gives_a_confidence_and_the_words_of_the_output(run_dir_translator):
    tr = run_dir_translator
    sources = [t for t in TEXTS if t]
    for source, t in zip(sources, scored(tr, sources)):
        got = judge(tr, source, t)
        assert got.output == t.text and 0 <= got.confidence <= 1
        assert [w.word for w in got.words] == t.text.split()  # the words joined back are the output's
        assert all(0 <= w.confidence <= 1 for w in got.words)
        assert got.pieces == len(t.tokens) + 1 and not got.retried
        assert set(got.flags) <= set(guards.FLAGS)
    unscored = judge(tr, sources[0], Translation("x", 0.0, [5]))
    assert unscored.confidence is None and unscored.words == [] and unscored.flags == []


def test_judge_flags_a_loop_a_copy_and_an_unattended_word(run_dir_translator):
    tr = run_dir_translator
    source = "the dog sees a red ball"
    loop, copy = scored(tr, [source] * 2, ["deren deren deren goden", source])
    assert "repetition" in judge(tr, source, loop).flags
    assert "copy" in judge(tr, source, copy).flags
    [t] = scored(tr, [source], ["deren goden"])
    pieces = tr.sp.encode(source, out_type=str)
    last = max(k for k, p in enumerate(pieces) if p.startswith("▁"))  # where "ball" starts
    t.coverage = [0.0 if k >= last else 1.0 for k in range(len(pieces))]  # "ball" never read
    assert judge(tr, source, t).flags == ["omission"]
    t.coverage, t.word_drops = [1.0] * len(pieces), {}
    assert judge(tr, source, t).flags == []
    t.word_drops = {5: guards.UNUSED_DROP + 0.5}  # "ball": the output as likely without it
    assert judge(tr, source, t).flags == ["omission"]
    t.word_drops = {5: guards.UNUSED_DROP - 2.0}
    assert judge(tr, source, t).flags == []


def test_scoring_deletes_each_long_little_attended_source_word_and_rescores_the_output(
    run_dir_translator, monkeypatch
):
    """word_drops: the tested words (every long word, at a coverage bound no word reaches) each
    deleted from the source, the output's log-probability then less its own."""
    tr = run_dir_translator
    monkeypatch.setattr(guards, "UNUSED_COVERAGE", 1e9)
    source = "the dog sees a red ball"
    [t] = scored(tr, [source], ["deren goden"])
    assert sorted(t.word_drops) == [2, 5]  # "sees", "ball": 4 letters or more
    [ids], _ = tr.encode([source])
    pieces = tr.sp.encode(source, out_type=str)
    starts = [k for k, p in enumerate(pieces) if p.startswith("▁")] + [len(pieces)]
    without_sees = ids[: starts[2]] + ids[starts[3] :]
    [alone], [base] = tr.forced_scores([without_sees], [t.tokens]), tr.forced_scores([ids], [t.tokens])
    assert t.word_drops[2] == pytest.approx(sum(alone.log_probs) - sum(base.log_probs), abs=1e-4)
    [unscored] = scored(tr, [source], ["deren goden"], coverage=False)
    assert unscored.word_drops is None  # the check's pass comes with the coverage's


def test_judge_leaves_the_target_tag_out_of_the_checks(run_dir_translator):
    tr = run_dir_translator
    source = "<2de> the dog sees a red ball"
    [t] = scored(tr, [source], ["deren goden"], coverage=False)
    pieces = tr.sp.encode(source, out_type=str)
    tag = len(tr.sp.encode("<2de>", out_type=str))
    t.coverage = [0.0] * tag + [1.0] * (len(pieces) - tag)  # the tag is never attended to
    assert judge(tr, source, t).flags == ["omission"]
    assert judge(tr, source, t, tag="<2de>").flags == []


# ----------------------------------------------------------------------------- the pipeline
def test_every_non_empty_text_gets_a_confidence_and_its_words_located(run_dir_translator):
    out = translate_request(run_dir_translator, TranslationRequest(tuple(TEXTS)))
    assert [len(t.sentences) for t in out] == [1, 0, 2, 1, 1]
    for text, t in zip(TEXTS, out):
        if not text:
            assert (t.text, t.confidence, t.flags, t.sentences, t.words) == ("", None, [], [], [])
            continue
        assert 0 <= t.confidence <= 1 and t.words
        assert [w.word for w in t.words] == [w.word for s in t.sentences for w in s.words]
        for w in t.words:
            assert w.start is not None, (w, t.text)
            assert t.text[w.start : w.end].lower() == w.word.lower()


def test_the_words_of_an_html_text_are_located_in_its_text_not_in_its_tags(run_dir_translator):
    tr = run_dir_translator
    [plain] = translate_request(tr, TranslationRequest((TEXTS[0],)))
    first = plain.words[0].word  # an attribute holding the output's first word
    html = f'<p title="{first}">{TEXTS[0]}</p>'
    [out] = translate_request(tr, TranslationRequest((html,), text=TextOptions(format="html")))
    assert out.text.startswith(f'<p title="{first}">') and out.words[0].word == first
    for w in out.words:
        assert w.start is not None and out.text.rfind("<", 0, w.start) < out.text.rfind(">", 0, w.start), w


def failing(*args, **kwargs):
    raise AssertionError("forced_scores called")


def test_quality_switched_off_computes_nothing(run_dir_translator, monkeypatch):
    tr = run_dir_translator
    monkeypatch.setattr(tr, "forced_scores", failing)
    with pytest.raises(AssertionError, match="forced_scores called"):
        translate_request(tr, TranslationRequest(tuple(TEXTS)))  # on by default
    off = QualityOptions(confidence=False, guards=False)
    out = translate_request(tr, TranslationRequest(tuple(TEXTS), quality=off))
    assert [(t.confidence, t.flags, t.sentences, t.words) for t in out] == [(None, [], [], [])] * len(TEXTS)
    assert out[0].text


class Searches:
    """Translator.translate_nbest, spied on: each call's (sentences, options); a ``retry`` function
    gives the second call's answer (None: the real search's)."""

    def __init__(self, translator, monkeypatch, retry=None):
        self.calls, self.search, self.retry = [], translator.translate_nbest, retry
        monkeypatch.setattr(translator, "translate_nbest", self)

    def __call__(self, sentences, options=None, **kw):
        self.calls.append((list(sentences), options))
        if len(self.calls) > 1 and self.retry is not None:
            return self.retry(sentences)
        return self.search(sentences, options, **kw)


def test_a_flagged_sentence_is_searched_once_more_and_keeps_its_flag_when_the_retry_is_no_better(
    run_dir_translator, monkeypatch
):
    """Every sentence but the first text's flagged 'repetition': one retry, beam 8 and the trigram
    block, of the flagged units only; the retry (an unlikely output) loses, so the first outputs
    stay, flagged."""
    tr = run_dir_translator
    request = TranslationRequest(tuple(TEXTS), search=SearchOptions(beam=4, alpha=0.6))
    first = translate_request(tr, TranslationRequest(tuple(TEXTS), quality=QualityOptions(guards=False)))
    clean = TEXTS[0].split()
    monkeypatch.setattr(
        quality, "check", lambda s, *a, **k: [] if s.source_words == clean else ["repetition"]
    )
    junk = tr.sp.encode("xq zq qz")
    searches = Searches(tr, monkeypatch, retry=lambda s: [[Translation("xq zq qz", 0.0, junk)] for _ in s])
    out = translate_request(tr, request)
    assert len(searches.calls) == 2
    units, options = searches.calls[1]
    assert units == [u for u in searches.calls[0][0] if u and u != TEXTS[0]]  # the flagged ones
    assert (options.beam, options.nbest, options.no_repeat_ngram, options.alpha) == (8, 1, 3, 0.6)
    assert [t.text for t in out] == [t.text for t in first]
    assert out[0].flags == [] and not out[0].sentences[0].retried
    for t in out[2:]:
        assert t.flags == ["repetition"] and all(s.retried for s in t.sentences)


def test_a_retry_that_fires_fewer_checks_replaces_the_first_output(run_dir_translator, monkeypatch):
    """'omission' on every output but the retry's: the retry wins (beam 8, no trigram block)."""
    tr = run_dir_translator
    mended = "nedog deren"  # not the first output ("deren goden")
    monkeypatch.setattr(
        quality, "check", lambda s, *a, **k: [] if s.output_words == mended.split() else ["omission"]
    )
    searches = Searches(
        tr, monkeypatch, retry=lambda s: [[Translation(mended, 0.0, tr.sp.encode(mended))] for _ in s]
    )
    [out] = translate_request(tr, TranslationRequest((TEXTS[0],), search=SearchOptions(beam=4)))
    assert out.text.lower() == mended and out.flags == [] and out.sentences[0].retried
    assert [(o.beam, o.no_repeat_ngram) for _, o in searches.calls] == [(4, 0), (8, 0)]


def test_the_omission_guard_reads_the_attention_in_the_pipeline(run_dir_translator, monkeypatch):
    """A threshold no word can reach: every sentence flagged 'omission' (the coverage was
    computed), searched once more, and flagged still."""
    monkeypatch.setattr(guards, "OMISSION_MASS", 1e9)
    searches = Searches(run_dir_translator, monkeypatch)
    out = translate_request(run_dir_translator, TranslationRequest(tuple(TEXTS)))
    assert all("omission" in t.flags for t, text in zip(out, TEXTS) if text)
    retried = [u for units, _ in searches.calls[1:] for u in units]
    assert sorted(retried) == sorted(u for u in searches.calls[0][0] if u)  # each unit once
    assert all(o.beam == 8 for _, o in searches.calls[1:])


def test_no_retry_without_guards_nor_with_a_prefix(run_dir_translator, monkeypatch):
    tr = run_dir_translator
    monkeypatch.setattr(quality, "check", lambda *a, **k: ["repetition"])
    searches = Searches(tr, monkeypatch)
    [out] = translate_request(tr, TranslationRequest((TEXTS[0],), quality=QualityOptions(guards=False)))
    assert len(searches.calls) == 1 and out.flags == [] and out.confidence is not None
    [out] = translate_request(tr, TranslationRequest((TEXTS[0],), prefix=("deren",)))
    assert len(searches.calls) == 2 and out.flags == ["repetition"]  # flagged, not searched again
    [out] = translate_request(tr, TranslationRequest((TEXTS[0],), quality=QualityOptions(confidence=False)))
    assert len(searches.calls) == 4 and out.flags == ["repetition"]
    assert out.confidence is None and out.words == [] and out.sentences[0].confidence is None


def test_the_ctranslate2_engine_scores_as_the_torch_one_and_never_reads_the_attention(
    run_dir, run_dir_translator, tmp_path, monkeypatch
):
    """CTranslate2's forced scores (score_batch) == the torch engine's for the same outputs; it
    gives no coverage, so no 'omission' however low the threshold, and a loop's retry has no
    trigram block (the torch engine's)."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from nmt.cli import main
    from nmt.infer.translate import Translator

    assert main(["export", "ctranslate2", str(run_dir), str(tmp_path / "ct2")]) == 0
    ct2 = Translator.load(tmp_path / "ct2", engine="ctranslate2", precision="fp32")
    tr = run_dir_translator
    sources = [t for t in TEXTS if t] + [""]
    ids, _ = tr.encode(sources)
    outputs = [t.tokens for t in scored(tr, sources[:-1], coverage=False)] + [[]]
    ours, theirs = tr.forced_scores(ids, outputs), ct2.forced_scores(ids, outputs, coverage=True)
    for a, b in zip(ours, theirs):
        assert len(b.log_probs) == len(a.log_probs) and b.coverage is None
        assert b.log_probs == pytest.approx(a.log_probs, abs=1e-4)  # float32, two kernels' sums
    assert theirs[-1].log_probs == []
    monkeypatch.setattr(guards, "OMISSION_MASS", 1e9)
    monkeypatch.setattr(guards, "repeats", lambda *a, **k: True)  # every sentence a loop
    searches = Searches(ct2, monkeypatch)
    out = translate_request(ct2, TranslationRequest(tuple(TEXTS)))
    for t, text in zip(out, TEXTS):
        assert t.flags == (["repetition"] if text else []) and (t.confidence is not None) == bool(text)
    assert [(o.beam, o.no_repeat_ngram) for _, o in searches.calls] == [(4, 0), (8, 0)]


def test_locating_words_takes_time_linear_in_the_text_and_keeps_offsets_after_a_letter_lower_case_lengthens():
    from timing_fixtures import assert_linear

    from nmt.infer.confidence import WordConfidence

    def missing_words(n: int):  # n words none of which the text holds
        return "x " * n, [SentenceQuality("", 0.5, [WordConfidence("yy", 0.5)] * (n // 2))]

    assert_linear(lambda made: locate(*made), missing_words, 200_000)
    [w] = locate("İ Hund", [SentenceQuality("", 0.5, [WordConfidence("hund", 0.9)])])
    assert (w.start, w.end) == (2, 6)
