"""nmt.realtext.scan: the constructs of markup with their kind, name and slashes, as the markup
parser and benchmarks/real_text.py read them (the worst cases: tests/test_markup.py)."""

from nmt.realtext.scan import TAG_KIND, TEXT, scan


def test_constructs_are_found_with_their_closing_and_self_closing_slashes_and_names():
    found = [
        (
            t.raw,
            *(
                ("/" if t.closing else "", t.name, "/" if t.self_closing else "")
                if t.kind == TAG_KIND
                else (None,) * 3
            ),
        )
        for t in scan('a<b x="1">c</b><br/><!--d-->')
        if t.kind != TEXT
    ]
    assert found == [
        ('<b x="1">', "", "b", ""),
        ("</b>", "/", "b", ""),
        ("<br/>", "", "br", "/"),
        ("<!--d-->", None, None, None),
    ]
