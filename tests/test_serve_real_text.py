"""POST /translate on real text (nmt.serve.real_text): paragraphs, capitals and markup as
`nmt translate` and nmt.realtext.job.translate_text give them, and the plain path unchanged."""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from real_text_fixtures import translate_text  # noqa: E402

from nmt.realtext.job import TextOptions  # noqa: E402
from nmt.serve.app import create_app  # noqa: E402
from nmt.serve.command import add_serve_args, build_models  # noqa: E402

TEXTS = ["der hund. DIE KATZE SPRINGT.\n\nein baum", "", "Der Rote Hund Springt."]
HTML = '<p>der <b>hund</b> &amp; <a href="x?a=1&amp;b">die katze</a>.</p>'


@pytest.fixture(scope="module")
def real_text_client(run_dir):
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args([f"tiny={run_dir}"])
    with TestClient(create_app(build_models({"tiny": run_dir}, args))) as c:
        yield c


def test_texts_are_translated_as_translate_text_does(real_text_client, run_dir_translator):
    r = real_text_client.post("/translate", json={"text": TEXTS})
    assert r.status_code == 200, r.text
    assert [t["text"] for t in r.json()["translations"]] == [
        x.text for x in translate_text(run_dir_translator, TEXTS)
    ]
    assert r.json()["translations"][0]["text"].count("\n\n") == 1


def test_split_recase_and_max_words_off_give_the_plain_translation(real_text_client, run_dir_translator):
    body = {"text": TEXTS, "split": False, "recase": False, "max_words": 0}
    r = real_text_client.post("/translate", json=body)
    plain = TextOptions(split=False, recase=False, max_words=0, protect=False)  # each line as one sentence
    assert [t["text"] for t in r.json()["translations"]] == run_dir_translator.translate(TEXTS, text=plain)
    lines = ["der hund. DIE KATZE SPRINGT.", "", "Der Rote Hund Springt."]
    assert run_dir_translator.translate(lines, text=plain) == run_dir_translator.translate_sentences(lines)


def test_html_keeps_every_tag_well_nested(real_text_client, run_dir_translator):
    r = real_text_client.post("/translate", json={"text": HTML, "format": "html"})
    assert r.status_code == 200, r.text
    out = r.json()["translations"][0]["text"]
    ET.fromstring(f"<x>{out}</x>")
    for tag in ("<p>", "<b>", "</b>", '<a href="x?a=1&amp;b">', "</a>", "</p>"):
        assert out.count(tag) == 1
    assert out == translate_text(run_dir_translator, HTML, options=TextOptions(format="html")).text


def test_text_that_looks_like_html_is_translated_as_text_with_a_warning(real_text_client):
    """A request without "format" whose text holds tags: translated as plain text, with one warning
    naming the text and "format": "html", as `nmt translate` warns; none for "format": "text" asked
    for, or for text that only looks odd (a < b, <3)."""
    texts = ["der hund.", "<p>der <b>hund</b> und die katze.</p>"]
    r = real_text_client.post("/translate", json={"text": texts})
    assert r.status_code == 200, r.text
    warnings = r.json()["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("text 2: looks like HTML (<b>...</b>)")
    assert '"format": "html"' in warnings[0]
    assert (
        "warnings" not in real_text_client.post("/translate", json={"text": texts, "format": "text"}).json()
    )
    assert "warnings" not in real_text_client.post("/translate", json={"text": "a < b, c > d <3"}).json()


def test_a_long_sentence_is_cut_with_a_warning_and_bad_combinations_refused(real_text_client):
    r = real_text_client.post("/translate", json={"text": " ".join(["katze"] * 50), "max_words": 20})
    cut = "50 words (over 20), translated in 4 parts of at most 20 (cut before 'katze', 'katze', 'katze')"
    assert r.json()["warnings"] == [f"text 1: sentence 1: {cut}"]
    r = real_text_client.post("/translate", json={"text": HTML, "format": "html", "alignment": True})
    assert r.status_code == 422 and "not with alignment" in r.json()["error"]["message"]
    assert real_text_client.post("/translate", json={"text": "x", "format": "pdf"}).status_code == 422


@pytest.mark.parametrize(
    "path, body, status",
    [
        ("/translate", {"text": "<b" + " " * 1600 + '"', "format": "html"}, 200),
        ("/translate", {"text": "<b>" * 1000 + "x" + "</b>" * 1000, "format": "html"}, 200),
        ("/translate", {"text": "<!DOCTYPE x [<!ENTITY e 'y'>]><p>der hund</p>", "format": "xml"}, 200),
        ("/translate", {"text": "<!--" * 4000, "format": "html"}, 200),
        ("/translate", {"text": "a" * 20001}, 413),  # over --max-chars before anything parses it
        (
            "/libretranslate/translate",
            {"q": "<b>" * 7000, "source": "en", "target": "de", "format": "html"},
            400,
        ),
    ],
    ids=["open-tag-of-spaces", "nested-1000", "doctype-subset", "open-comments", "over-max-chars", "lt-tags"],
)
def test_the_worst_cases_of_the_scanners_are_answered_through_the_server(
    real_text_client, path, body, status
):
    r = real_text_client.post(path, json=body)
    assert r.status_code == status, r.text
    if status == 200 and body.get("format") == "xml":
        out = r.json()["translations"][0]["text"]
        assert out.startswith("<!DOCTYPE x [<!ENTITY e 'y'>]><p>") and out.endswith("</p>")


def test_a_retry_refused_by_a_full_queue_answers_the_first_output_with_its_flags(run_dir, monkeypatch):
    """Every sentence flagged (a check stubbed to fire): the retry's search finds the queue full
    (503); the request is answered 200 with the first outputs, still flagged, not refused."""
    import nmt.realtext.quality as quality
    import nmt.serve.real_text as real_text
    from nmt.serve.errors import ApiError

    monkeypatch.setattr(quality, "check", lambda *a, **k: ["omission"])
    searches, real_search = [], real_text.search

    async def search(*args):
        searches.append(len(args[4]))  # the units searched
        if len(searches) > 1:
            raise ApiError(503, "queue full; retry later")
        return await real_search(*args)

    monkeypatch.setattr(real_text, "search", search)
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args([f"tiny={run_dir}"])
    with TestClient(create_app(build_models({"tiny": run_dir}, args))) as c:
        r = c.post("/translate", json={"text": ["the dog sees a red ball", "a cat"], "beam": 2})
    assert r.status_code == 200 and len(searches) == 2  # the first search and the refused retry
    out = r.json()["translations"]
    assert [t["flags"] for t in out] == [["omission"], ["omission"]]
    assert all(t["text"] for t in out)
