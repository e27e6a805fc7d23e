"""nmt/serve/segments.py: a LibreTranslate text as sentences and the text around them."""

from __future__ import annotations

from nmt.serve.segments import html_template, plain_template


def test_each_line_of_plain_text_is_one_sentence_with_its_spaces_kept():
    t = plain_template("  the dog \n\n a cat\t\nthe tree")
    assert t.sentences == ["the dog", "a cat", "the tree"]
    assert t.parts == ["  ", " \n\n ", "\t\n", ""]
    assert t.render(["der Hund", "eine Katze", "der Baum"]) == "  der Hund \n\n eine Katze\t\nder Baum"
    assert plain_template("   ").sentences == [] and plain_template("   ").render([]) == "   "


def test_html_keeps_tags_comments_and_scripts_and_escapes_the_translation():
    page = (
        '<p class="x">the dog &amp; a cat</p><!-- the tree --><script>var a = "b < c";</script> <b>a cat</b>'
    )
    t = html_template(page)
    assert t.sentences == ["the dog & a cat", "a cat"]
    out = t.render(["der Hund & <eine> Katze", "eine Katze"])
    assert out == (
        '<p class="x">der Hund &amp; &lt;eine&gt; Katze</p><!-- the tree -->'
        '<script>var a = "b < c";</script> <b>eine Katze</b>'
    )
    assert html_template(page).render(t.sentences) == page  # the sentences put back: the page
