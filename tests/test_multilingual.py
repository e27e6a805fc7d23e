"""One model for several target languages (nmt/data/multilingual.py): `nmt prepare --tgt de,fr`
tags each source with its target (>>de<<, one piece), `nmt train` trains one model, and the tag
chooses the target when translating (the Python API, LibreTranslate's API)."""

from __future__ import annotations

import argparse
import json

import pytest
from serve_fixtures import train_small
from train_fixtures import WORDS, write_corpus

from nmt.cli import main
from nmt.data.download import DataError
from nmt.data.multilingual import check_target, tagged, target_langs
from nmt.realtext.quality import QualityOptions

FRENCH = {w: "le" + w for w in WORDS}  # a second target: another learnable word mapping
SENTENCES = ["the dog sees a red ball", "a man sits on the street", "the small cat plays with the child"]


RAW = QualityOptions(guards=False)  # the search's output as it is (no retry of flagged sentences)


def prepare_args(text, out) -> list[str]:
    files = [f"{text}/{split}.en {text}/{split}.{{tgt}}".split() for split in ("train", "valid", "test")]
    return ["prepare", "files", "--src", "en", "--tgt", "de,fr", "--vocab-size", "150", "--out", str(out)] + [
        x for split, pair in zip(("--train", "--valid", "--test"), files) for x in (split, *pair)
    ]


@pytest.fixture(scope="module")
def multi_data(tmp_path_factory):
    text = tmp_path_factory.mktemp("multi") / "text"
    write_corpus(text)
    for split in ("train", "valid", "test"):
        lines = (text / f"{split}.en").read_text().splitlines()
        (text / f"{split}.fr").write_text(
            "".join(" ".join(FRENCH[w] for w in s.split()) + "\n" for s in lines)
        )
    out = text.parent / "data"
    assert main(prepare_args(text, out)) == 0
    return out


@pytest.fixture(scope="module")
def multi_run(multi_data, tmp_path_factory):
    return train_small(multi_data, tmp_path_factory.mktemp("multi-run") / "run")


def test_prepare_tags_each_source_with_its_target_as_one_piece(multi_data):
    import sentencepiece as spm

    meta = json.loads((multi_data / "meta.json").read_text())
    assert (meta["tgt_lang"], meta["tgt_langs"]) == ("mul", ["de", "fr"])
    assert meta["splits"]["train"]["pairs"] == 1200  # both corpora, concatenated
    valid = (multi_data / "valid.en.txt").read_text().splitlines()
    assert valid[0].startswith(">>de<< ") and valid[-1].startswith(">>fr<< ") and len(valid) == 80
    sp = spm.SentencePieceProcessor(model_file=str(multi_data / "spm.model"))
    assert ">>fr<<" in sp.encode(">>fr<< the dog", out_type=str)


def test_the_tag_chooses_the_target_language(multi_run):
    from nmt.infer.translate import Translator

    t = Translator.load(multi_run, device="cpu", precision="fp32")
    german = " ".join(t.translate_sentences(tagged(SENTENCES, "de"), beam=1)).split()
    french = " ".join(t.translate_sentences(tagged(SENTENCES, "fr"), beam=1)).split()
    assert t.translate(SENTENCES[:3], beam=1, target_lang="fr", quality=RAW) == t.translate_sentences(
        tagged(SENTENCES[:3], "fr"), beam=1
    )  # the Python API's target language: the same tag
    assert sum(w.endswith("en") and not w.startswith("le") for w in german) > 0.8 * len(german)
    assert sum(w.startswith("le") for w in french) > 0.8 * len(french)
    assert tagged(["a cat", "", " "], "fr") == [">>fr<< a cat", "", " "]


def test_nmt_translate_target_lang_tags_every_sentence_or_names_the_targets(multi_run, tmp_path, capsys):
    from nmt.infer.translate import Translator

    src = tmp_path / "src.en"
    src.write_text("\n".join(SENTENCES[:2]) + "\n\n")  # an empty line stays empty
    assert (
        main(
            [
                "translate",
                str(multi_run),
                "-i",
                str(src),
                "-o",
                str(tmp_path / "fr"),
                "--target-lang",
                "fr",
                "--precision",
                "fp32",
            ]
        )
        == 0
    )
    want = Translator.load(multi_run, device="cpu", precision="fp32").translate(
        SENTENCES[:2], target_lang="fr"
    )
    assert (tmp_path / "fr").read_text().splitlines() == [*want, ""]
    for lang, message in (("cs", "this model translates into de, fr"), (None, "choose one")):
        assert (
            main(["translate", str(multi_run), "-i", str(src), *(["--target-lang", lang] if lang else [])])
            == 2
        )
        assert message in capsys.readouterr().err


def test_both_http_apis_translate_into_every_target(multi_run):
    pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
    from fastapi.testclient import TestClient

    from nmt.infer.translate import Translator
    from nmt.serve.app import create_app
    from nmt.serve.command import add_serve_args, build_models

    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    models = build_models({"multi": multi_run}, parser.parse_args([f"multi={multi_run}"]))
    want = Translator.load(multi_run, device="cpu", precision="fp32").translate(
        SENTENCES[:1], target_lang="fr"
    )
    with TestClient(create_app(models)) as c:
        assert c.get("/libretranslate/languages").json()[0] == {
            "code": "en",
            "name": "English",
            "targets": ["de", "fr"],
        }
        r = c.post("/libretranslate/translate", json={"q": SENTENCES[0], "source": "en", "target": "fr"})
        assert r.json()["translatedText"] == want[0] and 0 <= r.json()["confidence"] <= 1
        r = c.post("/libretranslate/translate", json={"q": SENTENCES[0], "source": "en", "target": "cs"})
        assert r.status_code == 400 and r.json() == {"error": "cs is not supported"}
        r = c.post("/translate", json={"text": [SENTENCES[0], ""], "target_lang": "fr"})  # nmt's own API
        assert [t["text"] for t in r.json()["translations"]] == [want[0], ""]
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 422 and "translates into de, fr: choose one" in r.json()["error"]["message"]


@pytest.mark.parametrize("fmt", ["text", "html"])
def test_the_four_doors_give_the_same_outputs_into_each_target(multi_run, tmp_path, fmt):
    pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
    from door_fixtures import four_doors

    texts = (
        ["the dog sees a red ball. a cat.", "THE BIG TREE"]
        if fmt == "text"
        else ["the <b>dog</b> sees a cat."]
    )
    for target in ("de", "fr"):
        doors = four_doors(multi_run, texts, tmp_path, fmt=fmt, target=target, nbest=2)
        for name, outputs in doors.items():
            assert outputs == doors["python"], (target, name)


def test_wrong_targets_are_clear_errors(tmp_path, capsys):
    data = {"tgt_lang": "mul", "tgt_langs": ["de", "fr"]}
    assert check_target("fr", data) == ">>fr<<" and check_target(None, {"tgt_lang": "de"}) is None
    assert check_target("fr", {}) == ">>fr<<" and check_target(None, {}) is None  # languages unknown
    with pytest.raises(ValueError, match="translates into de, fr"):
        check_target("cs", data)
    with pytest.raises(ValueError, match="choose one"):
        check_target(None, data)
    with pytest.raises(ValueError, match="into 'de' only"):
        check_target("fr", {"tgt_lang": "de"})
    for spec in ("de,de", "de,", "de,f r"):
        with pytest.raises(DataError):
            target_langs(spec)
    text = tmp_path / "text"
    write_corpus(text, n_train=10, n_valid=2)
    args = ["prepare", "files", "--src", "en", "--tgt", "de,fr", "--out", str(tmp_path / "d")]
    assert main([*args, "--train", f"{text}/train.en", f"{text}/train.de"]) == 2
    assert "write {tgt} where each target's code goes" in capsys.readouterr().err
    assert main([*args[:5], "en,de", *args[6:], "--train", "a.{tgt}", "b.{tgt}"]) == 2
    assert "--src en is also one of --tgt en,de" in capsys.readouterr().err


def test_an_argos_package_of_a_multi_target_model_is_refused(multi_run, tmp_path, capsys):
    """An Argos package has no source-side tag (its target_prefix is the decoder's): it would
    translate untagged sentences."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    out = tmp_path / "m.argosmodel"
    assert main(["export", "argos", str(multi_run), str(out), "--languages", "en-de"]) == 2
    assert "a model of several target languages (de, fr)" in capsys.readouterr().err and not out.exists()
