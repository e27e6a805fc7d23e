"""nmt.realtext.glossary: terms read from a TSV (errors naming the line), matched as whole words in
any case (the longest first), and through the pipeline each sentence's target terms as its
constraints, with real text on; the CLI, nmt's HTTP API and the server's own glossary."""

from __future__ import annotations

import argparse

import pytest
from real_text_fixtures import FakeTranslator

from nmt.cli import main
from nmt.infer.results import TranslateError
from nmt.realtext.glossary import Glossary, glossary_of, merged, read_glossary
from nmt.realtext.job import TextOptions
from nmt.realtext.pipeline import Plan, TranslationRequest


def test_a_tsv_glossary_is_read_and_a_bad_line_named(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("# terms\nNavigator\tNavigator\n\nstyle sheet\tFormatvorlage\n", encoding="utf-8")
    g = read_glossary(path)
    assert g.pairs == (("Navigator", "Navigator"), ("style sheet", "Formatvorlage"))
    assert g.where == (f"{path}:2", f"{path}:4")
    path.write_text("Navigator\tNavigator\nno tab here\n", encoding="utf-8")
    with pytest.raises(TranslateError, match=rf"{path}:2: expected SOURCE<TAB>TARGET"):
        read_glossary(path)
    with pytest.raises(TranslateError, match="cannot read the glossary"):
        read_glossary(tmp_path / "missing.tsv")


def test_terms_match_whole_words_in_any_case_longest_first_each_once():
    g = glossary_of({"style": "Stil", "style sheet": "Formatvorlage", "cat": "Katze"})
    assert g.targets_in("Apply the Style Sheet, then the style sheet again.") == ["Formatvorlage"]
    assert g.targets_in("A STYLE for the cat; no catalogue, no concat.") == ["Stil", "Katze"]
    assert g.targets_in("nothing here") == []
    assert merged(None, None) is None
    both = merged(g, glossary_of([["cat", "Mieze"]]))
    assert both.targets_in("a cat") == ["Mieze"]  # the later pair wins
    with pytest.raises(TranslateError, match="glossary pair 1: expected"):
        glossary_of([["only one"]])
    with pytest.raises(TranslateError, match="both non-empty"):
        Glossary((("cat", " "),))


class TorchFake(FakeTranslator):
    engine = "torch"  # searches with constraints (the fake ignores them)


def test_each_sentence_gets_the_target_terms_of_the_source_terms_it_holds():
    request = TranslationRequest(
        ["Two dogs play in the snow. A MAN IS RIDING A BIKE.", "The children."],
        glossary=glossary_of({"snow": "Schnee", "bike": "Fahrrad", "dogs": "Hunde"}),
    )
    plan = Plan(request, TorchFake())
    assert plan.units == ["Two dogs play in the snow.", "A man is riding a bike.", "The children."]
    assert plan.constraints == [["Hunde", "Schnee"], ["Fahrrad"], []]
    assert Plan(TranslationRequest(["no term"], glossary=request.glossary), TorchFake()).constraints is None
    with pytest.raises(TranslateError, match="the torch engine's beam search only"):
        Plan(request, FakeTranslator())  # an engine without constraints
    html = TranslationRequest(
        ["<b>Two dogs</b> play."], text=TextOptions(format="html"), glossary=request.glossary
    )
    assert Plan(html, TorchFake()).constraints == [["Hunde"]]  # markup stays on


def test_nmt_translate_glossary_puts_the_target_term_in_each_sentence_holding_its_source(
    tiny_checkpoint, tmp_path, capsys
):
    src = tmp_path / "in"
    src.write_text("der hund. die katze.\nein baum\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("hund\tkatze\n", encoding="utf-8")
    args = [str(tiny_checkpoint), "-i", str(src), "--beam", "3", "--quiet", "--precision", "fp32"]
    assert main(["translate", *args, "--max-len-b", "6"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main(["translate", *args, "--max-len-b", "6", "--glossary", str(terms)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "katze" not in plain[0].split() and "katze" in out[0]  # the term, and only by the glossary
    assert out[1] == plain[1]  # the line without the term is unchanged
    terms.write_text("hund\tжук\n", encoding="utf-8")
    assert main(["translate", *args, "--glossary", str(terms)]) == 2
    assert f"glossary {terms}:1: target term 'жук' holds characters" in capsys.readouterr().err


def test_http_glossaries_of_the_request_and_the_server(run_dir, run_dir_translator):
    pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
    from fastapi.testclient import TestClient

    from nmt.serve.app import create_app
    from nmt.serve.command import add_serve_args, build_models

    word = run_dir_translator.translate_sentences("a cat").split()[0]  # a word the model can write
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    models = build_models({"m": run_dir}, parser.parse_args([f"m={run_dir}"]))
    sentence = "the dog sees a red ball"
    with TestClient(create_app(models, glossary=glossary_of({"ball": word}))) as c:
        r = c.post("/translate", json={"text": [sentence, "the big tree"], "glossary": {"dog": word}})
        assert r.status_code == 200, r.text
        first = r.json()["translations"][0]["text"]
        assert first.split().count(word) >= 1
        r = c.post("/libretranslate/translate", json={"q": sentence, "source": "en", "target": "de"})
        assert word in r.json()["translatedText"].split()  # the server's glossary
        r = c.post("/translate", json={"text": sentence, "glossary": [["dog"]]})
        assert r.status_code == 422 and "glossary pair 1" in r.json()["error"]["message"]


def test_a_term_that_is_not_unicode_text_is_refused():
    with pytest.raises(TranslateError, match="pair 1: a term holds a lone surrogate"):
        glossary_of({"cat": "Ka\ud800tze"})
