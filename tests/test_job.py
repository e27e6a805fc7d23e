"""nmt.realtext.job: paragraphs, capitals and long sentences through one batch, nothing dropped
(a fake translator as fragile as a single-sentence model: tests/real_text_fixtures.py); a trained
model's alignment as character pairs (unit_output) placing tags after non-ASCII characters."""

import re
import xml.etree.ElementTree as ET

import pytest
from real_text_fixtures import FakeTranslator, translate_text

from nmt.infer.options import SearchOptions
from nmt.infer.results import TranslateError
from nmt.infer.text import SourceWords
from nmt.realtext.job import TextJob, TextOptions, UnitOutput

PLAIN = TextOptions(split=False, recase=False, max_words=0, protect=False)  # a line at a time, as given


def test_every_sentence_of_a_paragraph_is_translated_and_the_spacing_kept():
    fake = FakeTranslator()
    text = "Two dogs play in the snow. A man is riding a bike.\n\nThe children are laughing."
    out = translate_text(fake, text)
    assert (
        out.text
        == "Zwei Hunde spielen in dem Schnee. Ein Mann ist fährt ein Fahrrad.\n\nDem Kinder sind lachend."
    )
    assert fake.calls == [
        ["Two dogs play in the snow.", "A man is riding a bike.", "The children are laughing."]
    ]  # one batch
    plain = translate_text(fake, text, options=PLAIN).text  # a line at a time: what is lost
    assert plain == "Zwei Hunde spielen in dem Schnee.\n\nDem Kinder sind lachend."


def test_all_caps_and_title_case_are_translated_in_normal_case_and_recased():
    fake = FakeTranslator()
    assert translate_text(fake, "TWO DOGS PLAY IN THE SNOW.").text == "ZWEI HUNDE SPIELEN IN DEM SCHNEE."
    assert translate_text(fake, "Two Dogs Play In The Snow.").text == "Zwei Hunde Spielen In Dem Schnee."
    assert fake.calls[0] == ["Two dogs play in the snow."]
    off = TextOptions(recase=False)
    assert translate_text(fake, "TWO DOGS PLAY.", options=off).text == "VAAAG VAAAG VAAAG."


def test_a_long_sentence_is_translated_in_parts_and_the_cut_reported():
    fake = FakeTranslator()
    text = "Two dogs play in the snow near a house, and a man is riding a bike near the house."
    out = translate_text(fake, text, options=TextOptions(max_words=10))
    assert fake.calls == [
        ["Two dogs play in the snow near a house,", "and a man is riding a bike near the house."]
    ]
    assert (
        out.text
        == "Zwei Hunde spielen in dem Schnee nahe ein Haus, und ein Mann ist fährt ein Fahrrad nahe dem Haus."
    )
    assert [c.message() for c in out.cuts] == [
        "sentence 1: 19 words (over 10), translated in 2 parts of at most 10 (cut before 'and')"
    ]
    assert translate_text(fake, text, options=TextOptions(max_words=0)).cuts == []


def test_by_default_a_sentence_longer_than_any_the_model_learned_from_is_cut_into_usual_lengths():
    fake = FakeTranslator()
    text = "Two dogs play in the snow near a house, and a man is riding a bike near the house."  # 19 words
    fake.source_words = SourceWords(longest=20, p99=8)  # a length it has seen: whole
    assert translate_text(fake, text).cuts == [] and len(fake.calls[-1]) == 1
    fake.source_words = SourceWords(longest=12, p99=8)  # longer than any: parts of at most 8
    out = translate_text(fake, text)
    parts = fake.calls[-1]
    assert " ".join(parts) == text and len(parts) == 4 and max(len(p.split()) for p in parts) <= 8
    assert [c.message() for c in out.cuts] == [
        "sentence 1: 19 words (over 12), translated in 4 parts of at most 8 (cut before 'the', 'and', 'a')"
    ]
    fake.source_words = None  # a checkpoint whose data predates the record: over 40, parts of 40
    assert TextOptions().for_model(fake) == TextOptions(max_words=40, part_words=40)
    fake.source_words = SourceWords(0, 0)  # a source without spaces between words: never cut by words
    assert TextOptions().for_model(fake).max_words == 0
    fake.source_words = SourceWords(longest=37, p99=23)
    assert TextOptions(max_words=20).for_model(fake) == TextOptions(max_words=20, part_words=20)  # asked for
    assert TextOptions(max_words=60).for_model(fake) == TextOptions(max_words=60, part_words=60)
    assert TextOptions(part_words=5).for_model(fake) == TextOptions(max_words=37, part_words=5)
    assert TextOptions(max_words=9, part_words=50).for_model(fake) == TextOptions(max_words=9, part_words=9)
    assert TextJob([text], TextOptions()).options == TextOptions(max_words=40, part_words=40)


def test_the_training_data_record_gives_the_lengths_and_older_records_give_none(tmp_path):
    import json

    from nmt.infer.text import source_words, training_data

    data = {"src_lang": "en", "splits": {"train": {"pairs": 3, "src_words": {"longest": 37, "p99": 23}}}}
    (tmp_path / "run" / "checkpoints" / "best").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "best" / "config.json").write_text(json.dumps({"data": data}))
    (tmp_path / "run" / "checkpoints" / "best" / "MANIFEST.json").write_text("{}")  # a checkpoint
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "nmt_export.json").write_text(json.dumps({"source": str(tmp_path / "run")}))
    assert training_data(tmp_path / "run") == data == training_data(tmp_path / "export")
    assert source_words(data) == SourceWords(37, 23)
    assert source_words({"splits": {"train": {"src_words": None}}}) == SourceWords(0, 0)
    assert source_words({"splits": {"train": {"pairs": 3}}}) is None
    assert training_data(tmp_path / "nowhere") is None and source_words(None) is None


def test_empty_texts_and_blank_lines_are_kept_without_calling_the_model():
    fake = FakeTranslator()
    assert [r.text for r in translate_text(fake, ["", "  \n", "Two dogs."])] == ["", "  \n", "Zwei Hunde."]
    assert fake.calls == [["Two dogs."]]


def test_plain_options_give_exactly_the_per_line_translation():
    fake = FakeTranslator()
    lines = ["Two dogs play in the snow.", "", "A man is riding a bike."]
    assert [r.text for r in translate_text(fake, lines, options=PLAIN)] == fake.translate_sentences(lines)
    assert PLAIN.plain and not TextOptions().plain


def test_bad_options_are_refused():
    with pytest.raises(TranslateError, match="format 'pdf'"):
        TextOptions(format="pdf")
    with pytest.raises(TranslateError, match="max_words -1"):
        TextOptions(max_words=-1)


def test_a_job_gives_units_then_texts_for_a_caller_that_translates_them_itself():
    job = TextJob(["One dog. Two dogs.", "THREE DOGS."])
    assert job.units == ["One dog.", "Two dogs.", "Three dogs."]
    assert job.unit_text == [0, 0, 1]
    out = job.finish([UnitOutput("Ein Hund."), UnitOutput("Zwei Hunde."), UnitOutput("Drei Hunde.")])
    assert [r.text for r in out] == ["Ein Hund. Zwei Hunde.", "DREI HUNDE."]


# ------------------------------------------------------------------ `nmt translate` (a tiny random model)
def run(*argv: str) -> int:
    from nmt.cli import main

    return main(["translate", *argv])


def test_nmt_translate_keeps_every_tag_and_line_of_an_html_file(tiny_checkpoint, tmp_path, capsys):
    page = tmp_path / "a.html"
    page.write_text('<p>der <b>hund</b> &amp; <a href="x?a=1&amp;b">die katze</a>.</p>\n\n<p>ein baum.</p>\n')
    assert (
        run(
            str(tiny_checkpoint),
            "-i",
            str(page),
            "-o",
            str(tmp_path / "b.html"),
            "--quiet",
            "--max-len-b",
            "3",
        )
        == 0
    )
    out = (tmp_path / "b.html").read_text()
    ET.fromstring(f"<x>{out}</x>")
    for tag in ("<p>", "<b>", "</b>", '<a href="x?a=1&amp;b">', "</a>", "</p>", "\n\n"):
        assert out.count(tag) == page.read_text().count(tag)


def test_plain_text_that_looks_like_html_is_translated_as_text_with_a_warning(
    tiny_checkpoint, tmp_path, capsys
):
    """A .txt line holding tags (no --format): one warning names the line and --format html; the
    line is still translated as plain text. --format text (asked for) and clean text: no warning."""
    src = tmp_path / "in.txt"
    src.write_text("der hund.\n<p>der <b>hund</b> und die katze.</p>\nein baum.\n")
    args = [str(tiny_checkpoint), "-i", str(src), "--quiet", "--max-len-b", "3"]
    assert run(*args) == 0
    err = capsys.readouterr().err
    assert "line 2 looks like HTML (<b>...</b>)" in err and "--format html" in err
    assert err.count("looks like HTML") == 1
    assert run(*args, "--format", "text") == 0
    assert "looks like HTML" not in capsys.readouterr().err
    src.write_text("a < b and c > d.\nmail <john@example.com> or <3.\n")
    assert run(*args) == 0
    assert "looks like HTML" not in capsys.readouterr().err


def test_per_line_options_translate_each_line_as_given(tiny_checkpoint, tmp_path, capsys):
    from nmt import Translator

    lines = ["der hund. DIE KATZE.", "", "ein baum"]
    src = tmp_path / "in"
    src.write_text("\n".join(lines) + "\n")
    search = ["--max-len-b", "3", "--beam", "2", "--quiet", "--precision", "fp32", "-i", str(src)]
    assert (
        run(
            str(tiny_checkpoint),
            *search,
            "--no-split",
            "--no-recase",
            "--max-words",
            "0",
            "--no-protect",
            "--no-guards",
        )
        == 0
    )
    plain = capsys.readouterr().out.splitlines()
    translator = Translator.load(tiny_checkpoint, precision="fp32")
    assert plain == translator.translate_sentences(lines, beam=2, max_len_b=3)
    assert run(str(tiny_checkpoint), *search) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # a line in, a line out, the blank one kept
    assert run(str(tiny_checkpoint), *search, "--format", "html", "--alignment") == 2
    assert "format 'html': not with alignment" in capsys.readouterr().err


def test_nbest_of_real_text_gives_each_line_with_each_sentences_alternatives(
    tiny_checkpoint, tmp_path, capsys
):
    from nmt import Translator
    from nmt.realtext.job import TextOptions
    from nmt.realtext.pipeline import TranslationRequest

    lines = ["der <b>hund</b>. die katze."]
    src = tmp_path / "in"
    src.write_text("\n".join(lines) + "\n")
    args = ["--max-len-b", "3", "--beam", "2", "--nbest", "2", "--quiet", "-i", str(src), "--format", "html"]
    args += ["--precision", "fp32"]  # the Translator below: fp32
    assert run(str(tiny_checkpoint), *args) == 0
    out = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    request = TranslationRequest(
        lines, text=TextOptions(format="html"), search=SearchOptions(beam=2, nbest=2, max_len_b=3)
    )
    expected = Translator.load(tiny_checkpoint, precision="fp32").translate_request(request)[0].nbest
    assert [(n, t) for n, _, t in out] == [("1", a.text) for a in expected]
    assert all(t.count("<b>") == 1 and t.count("</b>") == 1 for _, _, t in out)


def test_a_line_too_long_for_the_model_is_cut_and_translated_whole_not_truncated(
    tiny_checkpoint, tmp_path, capsys
):
    src = tmp_path / "in"
    src.write_text(" ".join(["katze"] * 400) + "\n")
    assert run(str(tiny_checkpoint), "-i", str(src), "--max-len-b", "2", "--beam", "1", "--quiet") == 0
    err = capsys.readouterr().err
    assert "truncated" not in err
    cut = (
        "400 words (over 40), translated in 16 parts of at most 40 "
        "(cut before 'katze', 'katze', 'katze', ...)"
    )
    assert f"line 1: sentence 1: {cut}" in err
    assert (
        run(
            str(tiny_checkpoint),
            "-i",
            str(src),
            "--max-len-b",
            "2",
            "--beam",
            "1",
            "--quiet",
            "--max-words",
            "0",
        )
        == 0
    )
    assert "line 1: 400 pieces, truncated to 255" in capsys.readouterr().err


def test_a_part_that_starts_in_lower_case_gets_its_first_word_lower_case_where_the_model_writes_it_so():
    text = "Two dogs play in the snow near a house, while a man is riding a bike near the house."
    job = TextJob([text], TextOptions(max_words=10), lower_known=lambda w: w.lower() == "während")
    assert job.units[1].startswith("while")
    out = job.finish(
        [UnitOutput("Zwei Hunde spielen nahe einem Haus."), UnitOutput("Während ein Mann Rad fährt.")]
    )
    assert out[0].text == "Zwei Hunde spielen nahe einem Haus, während ein Mann Rad fährt."


# -------------------------------------------------- a trained model's alignment (run_dir, serve_fixtures)
# SentencePiece gives byte offsets; a tag after ü (2 bytes) or 東京 (3 each) is placed by character offsets.
# The tiny model never saw these characters nor q and x: each run of them is one unknown piece, so the
# ASCII twin is the same ids, the same translation and the same alignment, and its tags go to the same words.
NON_ASCII = "the 東京 <b>red</b> dog sees a <i>ball</i>. a man sits on the grün <b>street</b>."
ASCII_TWIN = "the qq <b>red</b> dog sees a <i>ball</i>. a man sits on the grxn <b>street</b>."
TAG = re.compile(r"</?[bi]>")


def test_tags_after_umlauts_and_cjk_characters_go_where_they_go_after_ascii_ones(run_dir_translator):
    tr, html = run_dir_translator, TextOptions(format="html")
    plain, twin_plain = TAG.sub("", NON_ASCII), TAG.sub("", ASCII_TWIN)
    assert tr.sp.encode_as_ids(plain) == tr.sp.encode_as_ids(twin_plain)  # the model reads the same
    out = translate_text(tr, NON_ASCII, options=html).text
    ET.fromstring(f"<x>{out}</x>")  # well nested
    assert out.count("<b>") == out.count("</b>") == 2 and out.count("<i>") == out.count("</i>") == 1
    assert TAG.sub("", out) == translate_text(tr, plain).text
    assert out == translate_text(tr, ASCII_TWIN, options=html).text
