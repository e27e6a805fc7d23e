"""nmt.realtext.pipeline: one request, one pipeline, whatever the door: `nmt translate`, the Python
API, nmt's HTTP API and LibreTranslate's give the same outputs for the same inputs; the request is
checked once; alternatives are texts with each sentence's next hypothesis."""

from __future__ import annotations

import pytest
from door_fixtures import four_doors
from real_text_fixtures import FakeTranslator

from nmt.infer.mbr import MBR
from nmt.infer.options import SearchOptions
from nmt.infer.results import TranslateError, Translation
from nmt.realtext.job import TextOptions
from nmt.realtext.pipeline import Plan, TranslationRequest, translate_request

TEXTS = [
    "the dog sees a red ball",
    "a man sits on the street. the small cat plays with the child.",
    "THE BIG TREE.",
    "A Woman Runs In The Water.",
    "",
]
# spans the model never sees, put back (nmt.realtext.protect): numbers, a URL, emoji, placeholders
SPANS = ["the dog 🐶 sees 3 red balls at https://x.org/a?b=1. THE CAT {name} SITS 2 TIMES.", "%d cats"]
HTML = ['the <b>dog</b> sees a <a href="x?a=1&amp;b">red ball</a>.', "<p>a <i>cat</i></p>"]


@pytest.mark.parametrize(
    "texts, fmt, nbest",
    [(TEXTS, "text", 1), (HTML, "html", 1), (TEXTS[:3], "text", 3), (HTML, "html", 2), (SPANS, "text", 1)],
    ids=["plain-sentences-capitals", "html", "alternatives", "html-alternatives", "protected-spans"],
)
def test_the_four_doors_give_the_same_outputs(run_dir, tmp_path, texts, fmt, nbest):
    pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
    doors = four_doors(run_dir, texts, tmp_path, fmt=fmt, nbest=nbest)
    for name, outputs in doors.items():
        assert outputs == doors["python"], name
    if fmt == "html":
        assert all(best.count("<b>") == best.count("</b>") for best, _ in doors["python"])
    if texts is SPANS:  # every door puts them back, as written
        first, second = (best for best, _ in doors["python"])
        assert all(span in first for span in ("🐶", "3", "https://x.org/a?b=1", "{name}", "2")), first
        assert second.startswith("%d"), second


def test_a_paragraph_gives_every_sentence_to_the_model_in_one_batch():
    fake = FakeTranslator()
    text = "Two dogs play in the snow. A man is riding a bike. The children are laughing."
    [out] = translate_request(fake, TranslationRequest([text]))
    assert (
        out.text
        == "Zwei Hunde spielen in dem Schnee. Ein Mann ist fährt ein Fahrrad. Dem Kinder sind lachend."
    )
    assert fake.calls == [
        ["Two dogs play in the snow.", "A man is riding a bike.", "The children are laughing."]
    ]


class NbestFake(FakeTranslator):
    """Two hypotheses per sentence: the fake's, then the same in upper case (a lower score)."""

    def translate_nbest(self, sentences, options=None, **search):
        return [
            [Translation(t, -1.0, []), Translation(t.upper(), -2.0, [])]
            for t in self.translate_sentences(sentences)
        ]


def test_alternatives_are_the_text_with_each_sentences_next_hypothesis_and_tags_placed():
    request = TranslationRequest(
        ["<b>Two dogs</b> play. A man."],
        text=TextOptions(format="html"),
        search=SearchOptions(beam=2, nbest=2),
    )
    [out] = translate_request(NbestFake(), request)
    assert [a.text for a in out.nbest] == [
        "<b>Zwei Hunde</b> spielen. Ein Mann.",
        "<b>ZWEI HUNDE</b> SPIELEN. EIN MANN.",
    ]
    assert [a.score for a in out.nbest] == [-1.0, -2.0]  # the mean of its sentences'


def test_the_target_language_is_checked_against_the_checkpoint_once():
    fake = FakeTranslator()
    fake.data = {"src_lang": "en", "tgt_lang": "mul", "tgt_langs": ["de", "fr"]}
    plan = Plan(TranslationRequest(["A man. Two dogs."], target_lang="fr"), fake)
    assert plan.inputs == [">>fr<< A man.", ">>fr<< Two dogs."] and plan.units == ["A man.", "Two dogs."]
    with pytest.raises(TranslateError, match="translates into de, fr: choose one"):
        Plan(TranslationRequest(["A man."]), fake)
    fake.data = {"src_lang": "en", "tgt_lang": "de"}
    with pytest.raises(TranslateError, match="'de' only"):
        Plan(TranslationRequest(["A man."], target_lang="fr"), fake)
    assert Plan(TranslationRequest(["A man."], target_lang="de"), fake).inputs == ["A man."]


def test_the_splitter_takes_the_checkpoints_source_language_unless_one_is_given():
    fake = FakeTranslator()
    fake.data = {"src_lang": "de", "tgt_lang": "en"}
    assert Plan(TranslationRequest(["x"]), fake).job.options.language == "de"
    assert Plan(TranslationRequest(["x"], text=TextOptions(language="fr")), fake).job.options.language == "fr"
    assert Plan(TranslationRequest(["x"]), FakeTranslator()).job.options.language == "en"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"alignment": True, "text": TextOptions(format="html")}, "format 'html': not with alignment"),
        ({"prefix": ["a"], "text": TextOptions(format="xml")}, "not with prefix"),
        ({"mbr": MBR(), "search": SearchOptions(beam=1)}, "mbr chooses among the beam's n-best"),
        ({"mbr": MBR(), "search": SearchOptions(beam=4, nbest=2)}, "needs nbest 1"),
        ({"prefix": ["a", "b"]}, "prefix: 2 given for 1 texts"),
    ],
)
def test_a_request_that_does_not_go_together_is_refused_before_anything_runs(kwargs, message):
    with pytest.raises(TranslateError, match=message):
        TranslationRequest(["x"], **kwargs)


def test_per_text_options_translate_each_text_as_one_sentence_as_given():
    fake = FakeTranslator()
    [out] = translate_request(fake, TranslationRequest(["Two dogs. A MAN."], prefix=["Zwei"]))
    assert fake.calls == [["Two dogs. A MAN."]] and out.text == "Zwei Hunde."
    with pytest.raises(TypeError, match="text 2: expected str"):
        TranslationRequest(["a", 3])
