"""nmt.infer.markup: tags taken out, put back around the aligned output words, well nested; with
the fake translator (word for word: its monotone alignment is exact) and with given alignments."""

import xml.etree.ElementTree as ET

from real_text_fixtures import FakeTranslator

from nmt.infer.markup import Projected, parse
from nmt.infer.real_text import TextJob, TextOptions, UnitOutput, translate_text

HTML = TextOptions(format="html")


def html(text: str) -> str:
    return translate_text(FakeTranslator(), text, options=HTML).text


def test_inline_tags_go_around_the_translated_words():
    assert (
        html("<b>Two dogs</b> play in the <i>snow</i>.") == "<b>Zwei Hunde</b> spielen in dem <i>Schnee</i>."
    )


def test_attributes_and_entities_are_copied_untouched():
    a = '<a href="https://example.com/?a=1&amp;b=2" title="x">'
    src = f"Two dogs play in the {a}snow</a> near a house &copy;."
    assert html(src) == f"Zwei Hunde spielen in dem {a}Schnee</a> nahe ein Haus &copy;."
    assert html("Dogs &amp; children play &lt; run.") == "Hunde &amp; Kinder spielen &lt; rennen."


def test_script_style_pre_and_code_are_not_translated():
    src = "<p>Two dogs <code>play</code>.</p><script>if (a < b) { snow(); }</script><pre>the snow</pre>"
    assert (
        html(src)
        == "<p>Zwei Hunde <code>play</code>.</p><script>if (a < b) { snow(); }</script><pre>the snow</pre>"
    )
    assert (
        html('Two <span translate="no">dogs</span> play.') == 'Zwei <span translate="no">dogs</span> spielen.'
    )


def test_block_tags_separate_paragraphs_and_whitespace_between_them_is_kept():
    src = "<ul>\n  <li>Two dogs.</li>\n  <li>A man.</li>\n</ul>"
    assert html(src) == "<ul>\n  <li>Zwei Hunde.</li>\n  <li>Ein Mann.</li>\n</ul>"


def test_void_tags_comments_and_unclosed_tags_stay_in_place():
    assert html("Two dogs<br>play.") == "Zwei Hunde<br> spielen."
    assert html("Two <!-- c --> dogs.") == "Zwei <!-- c -->Hunde."
    assert html("Two <b>dogs play.") == "Zwei <b>Hunde spielen."


def test_nested_tags_stay_nested_when_the_alignment_reorders_words():
    # "<b>Two <i>dogs</i></b> play." -> "spielen zwei Hunde.": the pairs say where each word went
    job = TextJob(["<b>Two <i>dogs</i></b> play."], HTML)
    assert job.units == ["Two dogs play."]
    pairs = [(0, 3, 8, 12), (4, 8, 13, 18), (9, 13, 0, 7), (13, 14, 18, 19)]
    out = job.finish([UnitOutput("spielen zwei Hunde.", pairs)])[0].text
    assert out == "spielen <b>zwei <i>Hunde</i></b>."
    # a child aligned outside its parent is kept inside it (and so well nested)
    crossed = [(0, 3, 8, 12), (4, 8, 0, 7), (9, 13, 13, 18), (13, 14, 18, 19)]
    out = job.finish([UnitOutput("spielen zwei Hunde.", crossed)])[0].text
    ET.fromstring(f"<x>{out}</x>")
    assert sorted(t for t in ("<b>", "</b>", "<i>", "</i>") if t in out) == ["</b>", "</i>", "<b>", "<i>"]


def test_a_tag_with_no_aligned_word_is_kept_empty_after_the_word_before_it():
    job = TextJob(['Two dogs <a name="x"></a>play.'], HTML)
    out = job.finish([UnitOutput("Zwei Hunde spielen.", [(0, 3, 0, 4), (4, 8, 5, 10), (9, 13, 11, 18)])])
    assert out[0].text == 'Zwei Hunde <a name="x"></a>spielen.'


def test_every_tag_of_the_source_is_in_the_output_whatever_the_alignment():
    src = '<span class="a">Two <b>dogs</b></span> play <i>in</i> the <a href="#">snow</a>.'
    doc = parse(src, html=False)
    for pairs in ([], [(0, 3, 0, 1)], [(0, 20, 0, 2)]):
        out = doc.render([Projected("x y z.", pairs)])
        ET.fromstring(f"<r>{out}</r>")
        for tag in ('<span class="a">', "<b>", "<i>", '<a href="#">', "</span>", "</b>", "</i>", "</a>"):
            assert out.count(tag) == 1, (pairs, out)


def test_xml_format_knows_no_html_blocks():
    out = translate_text(FakeTranslator(), "<p>Two <x/>dogs.</p>", options=TextOptions(format="xml")).text
    assert out == "<p>Zwei <x/>Hunde.</p>"
