"""nmt.realtext.markup: tags taken out, put back around the aligned output words, well nested; with
the fake translator (word for word: its monotone alignment is exact) and with given alignments."""

import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from real_text_fixtures import FakeTranslator, translate_text
from timing_fixtures import assert_linear

from nmt.realtext.job import TextJob, TextOptions, UnitOutput
from nmt.realtext.markup import RAW, Document, Projected, escape, markup_hint, parse
from nmt.realtext.scan import TEXT, scan
from nmt.realtext.spans import TOKEN

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


def test_a_tag_whose_words_no_pair_names_wraps_the_output_its_fallback_pairs_give():
    # "Click <b>Save</b> ..." -> "点击「保存文件」。": the prior's alignment gave 保存 to "keep" and
    # nothing to "Save"; the fallback pairs (where each such word's attention peaks) place <b>
    job = TextJob(["Click <b>Save</b> to keep the <span>file</span>."], HTML)
    pairs = [(0, 5, 0, 2), (11, 13, 2, 3), (14, 18, 3, 5), (23, 27, 5, 7), (27, 28, 7, 9)]
    fallback = [(6, 10, 3, 5), (19, 22, 0, 2), (23, 27, 0, 2)]  # Save, the, file (file has a pair)
    assert (
        job.finish([UnitOutput("点击「保存文件」。", pairs)])[0].text
        == "点击<b></b>「保存<span>文件</span>」。"
    )
    out = job.finish([UnitOutput("点击「保存文件」。", pairs, fallback)])[0].text
    assert out == "点击「<b>保存</b><span>文件</span>」。"


def test_a_tag_wraps_the_characters_of_a_chinese_run_aligned_to_its_words():
    # "Click <b>Save</b> to keep the <i>file</i>." -> "点击保存以保留文件。" (no spaces between words):
    # each CJK character is a token, so a tag can wrap part of a run of them
    job = TextJob(["Click <b>Save</b> to keep the <i>file</i>."], HTML)
    assert job.units == ["Click Save to keep the file."]
    pairs = [(0, 5, 0, 2), (6, 10, 2, 4), (11, 13, 4, 5), (14, 18, 5, 7), (23, 27, 7, 9), (27, 28, 9, 10)]
    out = job.finish([UnitOutput("点击保存以保留文件。", pairs)])[0].text
    assert out == "点击<b>保存</b>以保留<i>文件</i>。"
    assert TOKEN.findall("保存 files, ひらがな 한국어") == [
        "保",
        "存",
        "files",
        ",",
        "ひ",
        "ら",
        "が",
        "な",
        "한국어",
    ]


def test_a_tag_never_parts_a_letter_from_its_combining_accent_or_vowel_sign():
    # the monotone guess over 3 source and 3 output tokens; with each mark a token of its own, <b>
    # closed inside the Hindi word and between "e" and its accent
    job = TextJob(["<b>Hindi</b> language."], HTML)
    assert job.finish([UnitOutput("हिन्दी भाषा.", None)])[0].text == "<b>हिन्दी</b> भाषा."
    job = TextJob(["The <b>cafe</b> is open."], HTML)
    assert (
        job.finish([UnitOutput("Das Cafe\u0301 ist offen.", None)])[0].text
        == "Das <b>Cafe\u0301</b> ist offen."
    )


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


def test_a_run_of_empty_tags_and_white_space_is_copied_as_written():
    # nothing to translate: the white space stays after the tags and the entity as written
    for src in ["<p></p><b></b>\n", "<br>\n", " <i> </i>\t<x/>", "<b>&nbsp;</b>\n"]:
        for fmt in ("html", "xml"):
            job = TextJob([src], TextOptions(format=fmt))
            assert job.units == [] and job.finish([])[0].text == src, (src, fmt)


def test_xml_format_knows_no_html_blocks():
    out = translate_text(FakeTranslator(), "<p>Two <x/>dogs.</p>", options=TextOptions(format="xml")).text
    assert out == "<p>Zwei <x/>Hunde.</p>"


# ----------------------------------------------------------------------------- constructs
def test_a_doctype_with_an_internal_subset_cdata_and_processing_instructions_are_copied_verbatim():
    doctype = '<!DOCTYPE r [ <!ENTITY e "the > snow]"> <!-- ]> --> <?p ]>?> ]>'
    src = f"{doctype}<r>Two dogs <?pi a > b?>play in <![CDATA[ the <snow> & ]]>the &e; snow.</r>"
    out = translate_text(FakeTranslator(), src, options=TextOptions(format="xml")).text
    assert out == (
        f"{doctype}<r>Zwei Hunde <?pi a > b?>spielen in <![CDATA[ the <snow> & ]]>dem &e;Schnee.</r>"
    )
    assert ET.fromstring(out).text is not None  # the entity the doctype declares is still declared


def test_an_unterminated_construct_runs_to_the_end_and_is_copied_verbatim():
    for rest in ["<!-- c <b>snow</b>.", "<![CDATA[ snow", "<?pi snow", '<a href="x>snow</a>.', "<b", "<!x"]:
        assert html(f"Two dogs. {rest}") == f"Zwei Hunde. {rest}", rest
    assert html("Two dogs <script>play(); the snow") == "Zwei Hunde <script>play(); the snow"
    doc = parse("Two < dogs <3 play.", html=True)  # a "<" that starts nothing is text
    assert doc.runs[0].text == "Two < dogs <3 play."
    assert doc.render([Projected("Zwei < Hunde <3 spielen.", [])]) == "Zwei &lt; Hunde &lt;3 spielen."


def test_a_quote_starts_an_attribute_value_only_after_its_equals_sign():
    assert html('<a title="a > b">Two</a> dogs.') == '<a title="a > b">Zwei</a> Hunde.'
    assert html("<img alt=don't>Two dogs.") == "<img alt=don't>Zwei Hunde."


# ----------------------------------------------------------------------------- worst cases
def identity(doc: Document) -> list[Projected]:
    """Each run's text as its own translation, each token aligned with itself."""
    return [
        Projected(r.text, [(a, b, a, b) for a, b in (m.span() for m in TOKEN.finditer(r.text))])
        for r in doc.runs
    ]


def parse_and_render(text: str, xml: bool = False) -> str:
    doc = parse(text, html=not xml)
    return doc.render(identity(doc))


def constructs(text: str, *, html: bool) -> list[tuple[str, str]]:
    """The markup constructs of ``text`` (all but its text), in order."""
    return [(t.kind, t.raw) for t in scan(text, RAW if html else frozenset()) if t.kind != TEXT]


def parses(xml: str) -> bool:
    try:
        ET.fromstring(xml)
    except ET.ParseError:
        return False
    return True


MB = 1 << 20
WORST_MARKUP = {  # each about n characters
    "spaces then a quote in a tag": lambda n: "<b" + " " * n + '"',
    "comments never closed": lambda n: "<!--" * (n // 4),
    "CDATA never closed": lambda n: "<![CDATA[" * (n // 9),
    "processing instructions never closed": lambda n: "<?" * (n // 2),
    "less-than signs": lambda n: "<" * n,
    "quotes in a tag": lambda n: "<a " + '"' * n,
    "equals signs and quotes in a tag": lambda n: "<a " + '="' * (n // 2),
    "a doctype's brackets": lambda n: "<!DOCTYPE" + "[" * n,
    "entity starts": lambda n: "&#" * (n // 2),
    "an entity never ended": lambda n: "&" + "a" * n,
}
WORST_TAGS = {  # each about n characters, most of them tags (projected one by one: 128 KB each)
    "unclosed tags": lambda n: "<b>" * (n // 3) + "x",
    "closing tags never opened": lambda n: "</b>" * (n // 4) + "x",
    "nesting": lambda n: "<b>" * (n // 7) + "x" + "</b>" * (n // 7),
    "kept nesting": lambda n: "<code>" * (n // 13) + "x" + "</code>" * (n // 13),
    "inner tags left open": lambda n: "<b><i>x" * (n // 11) + "</b>" * (n // 11),
    "unbalanced quotes": lambda n: "<a b='x\" c=\"y'>z</a> " * (n // 22),
    "scripts never closed": lambda n: "<script>" * (n // 8),
    "a script's closing tag never ended": lambda n: "<script></script" + " " * n,
}


@pytest.mark.parametrize(
    "text, hint",
    [
        ("<p>A <b>man</b> reads.</p>", "<b>...</b>"),
        ("A man<br>reads.", "<br>"),
        ('<img src="x.png"> A dog.', '<img src="x.png">'),
        ("<SPAN class='x'>a</Span> b", "<span>...</span>"),
        ("a < b and c > d", None),
        ("I <3 you", None),
        ("mail <john@example.com> now", None),
        ("x<Tom>y</Tom>", None),  # not an HTML element
        ("<b>opened, never closed", None),
        ("</b>closed before it opened<b>", None),
    ],
)
def test_markup_hint_names_html_in_plain_text_and_nothing_else(text, hint):
    assert markup_hint(text) == hint


def test_markup_hint_takes_linear_time_on_worst_case_markup_of_1_mb():
    for make in [*WORST_MARKUP.values(), *WORST_TAGS.values(), lambda n: "<b " + "x" * n]:
        assert_linear(markup_hint, make, MB)


@pytest.mark.slow  # over 3 s on 2 cores
def test_parsing_and_projecting_take_linear_time_on_worst_case_markup_of_1_mb():
    for name, make in [*WORST_MARKUP.items(), *WORST_TAGS.items()]:
        assert_linear(parse_and_render, make, MB if name in WORST_MARKUP else MB // 8)
        text = make(1000)
        assert constructs(parse_and_render(text), html=True) == constructs(text, html=True), name
        assert constructs(parse_and_render(text, xml=True), html=False) == constructs(text, html=False), name
        if parses(f"<r>{text}</r>"):
            assert parses(f"<r>{parse_and_render(text, xml=True)}</r>"), name


def test_many_marks_are_projected_in_linear_time():
    """Each mark's output tokens are found by bisection, not by a scan of every token."""
    assert_linear(lambda t: parse_and_render(t, xml=True), lambda n: "<b>w</b> " * (n // 9), MB // 8)
    assert_linear(
        lambda t: parse_and_render(t, xml=True), lambda n: "<b>w " * (n // 9) + "</b>" * (n // 9), MB // 8
    )


def test_deep_nesting_is_kept_without_recursion():
    for depth in (1000, 100_000):
        src = "<b>" * depth + "Two dogs." + "</b>" * depth
        out = parse_and_render(src, xml=True)
        assert out == src
        ET.fromstring(out)
    out = parse_and_render("<code>" * 1000 + "x" + "</code>" * 1000)
    assert out == "<code>" * 1000 + "x" + "</code>" * 1000


# ----------------------------------------------------------------------------- generated markup
NAMES = st.sampled_from(["b", "i", "a", "span", "code", "p", "br", "li", "x:y", "script", "B"])
QUOTED = st.builds(
    lambda q, v: q + v.replace(q, "") + q, st.sampled_from(['"', "'"]), st.text("ab >=<&/\"' ", max_size=6)
)
ATTRIBUTE = st.builds(
    lambda name, value: f" {name}={value}",
    st.sampled_from(["href", "class", "translate", "title"]),
    QUOTED | st.sampled_from(["no", '"notranslate"', "x", '"', "'", "'a"]),
)
OPENING = st.builds(
    lambda n, attrs, end: f"<{n}{''.join(attrs)}{end}",
    NAMES,
    st.lists(ATTRIBUTE, max_size=2),
    st.sampled_from([">", "/>", " >", ""]),
)
SOUP = st.lists(
    st.one_of(
        OPENING,
        st.builds(lambda n: f"</{n}>", NAMES),
        st.text("ab c.,&;#<>!?-[]\"' \n", min_size=1, max_size=8),
        st.sampled_from(
            [
                "<!-- c -->",
                "<!--",
                "-->",
                "<![CDATA[ a<b ]]>",
                "<![CDATA[",
                "<?pi x?>",
                "<?",
                "<!DOCTYPE x>",
                '<!DOCTYPE x [ <!ENTITY e "]>"> ]>',
                "<!DOCTYPE x [",
                "&amp;",
                "&copy;",
                "&#65;",
                "&#x41;",
                "&lt;",
                "&e;",
                "&",
                "<3",
            ]
        ),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(SOUP, st.booleans())
def test_any_markup_renders_with_the_same_constructs_in_the_same_order(text, xml):
    out = parse_and_render(text, xml=xml)
    assert constructs(out, html=not xml) == constructs(text, html=not xml)


def element(children: list[str], name: str, attributes: dict[str, str]) -> str:
    values = "".join(f' {k}="{v}"' for k, v in attributes.items())
    return f"<{name}{values}>{''.join(children)}</{name}>"


XML_TEXT = st.text("ab c.,&<>\"' ", min_size=1, max_size=8).map(lambda t: escape(t, {}))
XML_LEAF = st.one_of(
    XML_TEXT,
    st.sampled_from(
        ["<!-- c -->", "<![CDATA[ a<b & ]]>", "<?pi x > y?>", "&amp;", "&#65;", "&e;", "<br/>", "<x a='1'/>"]
    ),
)
XML_NODES = st.recursive(
    XML_LEAF,
    lambda inner: st.builds(
        element,
        st.lists(inner, max_size=4),
        st.sampled_from(["b", "i", "code", "x-y"]),
        st.dictionaries(
            st.sampled_from(["href", "translate", "class"]), st.text("ab >=/' ", max_size=6), max_size=2
        ),
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(XML_NODES, max_size=5).map("".join))
def test_well_formed_xml_renders_well_formed_with_the_same_constructs(body):
    src = f'<!DOCTYPE r [ <!ENTITY e "an ]> entity"> ]><r>{body}</r>'
    assert parses(src)
    out = parse_and_render(src, xml=True)
    assert parses(out), out
    assert constructs(out, html=False) == constructs(src, html=False)
