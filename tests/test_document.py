"""nmt.infer.document: .txt, .md, .html and .docx read and written in the same format (a fake
translation that upper-cases the text between tags, so what is translated is visible)."""

from pathlib import Path

import pytest

from nmt.infer.document import (
    document_kind,
    markdown_lines,
    markdown_to_markup,
    markup_to_markdown,
    translate_document,
    translate_source,
)
from nmt.infer.real_text import TextJob, TextOptions, UnitOutput


def shout(texts: list[str], fmt: str) -> list[str]:
    """The texts through nmt.infer.real_text in ``fmt``, each sentence "translated" to upper case."""
    job = TextJob(texts, TextOptions(format=fmt, recase=False))
    return [r.text for r in job.finish([UnitOutput(u.upper()) for u in job.units])]


def test_the_kind_of_document_comes_from_its_extension():
    assert [
        document_kind(p) for p in ["a.txt", "b.MD", "c.htm", "d.html", "e.xml", "f.docx", "g.en", "-"]
    ] == [
        None,
        "markdown",
        "html",
        "html",
        "xml",
        "docx",
        None,
        None,
    ]


MARKDOWN = """# A title

Some *nice* text with `code()` and a [link](https://x.org/a_b) here,
and **more** on a second line.

```python
print("not translated")
```

- one item
1. another
"""


def test_markdown_keeps_its_structure_code_and_urls():
    out = translate_source(MARKDOWN, "markdown", shout)
    assert (
        out
        == """# A TITLE

SOME *NICE* TEXT WITH `code()` AND A [LINK](https://x.org/a_b) HERE, AND **MORE** ON A SECOND LINE.

```python
print("not translated")
```

- ONE ITEM
1. ANOTHER
"""
    )


def test_markdown_inline_markup_round_trips():
    line = "a *b* `c<d>` [e & f](u) **g**"
    assert markup_to_markdown(markdown_to_markup(line)) == line
    assert [m.text for m in markdown_lines("x\ny\n\n# z")] == ["x y", None, "z"]


def test_html_and_text_documents_are_written_in_their_format(tmp_path: Path):
    page = tmp_path / "p.html"
    page.write_text("<html><head><title>Hi</title></head><body><p>A <b>b</b>.</p></body></html>\n")
    translate_document(str(page), str(tmp_path / "o.html"), shout)
    assert (
        tmp_path / "o.html"
    ).read_text() == "<html><head><title>HI</title></head><body><p>A <b>B</b>.</p></body></html>\n"
    text = tmp_path / "t.txt"
    text.write_text("one.\n\ntwo.\n")
    translate_document(str(text), str(tmp_path / "o.txt"), shout, kind="text")
    assert (tmp_path / "o.txt").read_text() == "ONE.\n\nTWO.\n"


def test_docx_runs_keep_their_formatting(tmp_path: Path):
    docx = pytest.importorskip("docx")
    doc = docx.Document()
    p = doc.add_paragraph("Two ")
    p.add_run("dogs").bold = True
    p.add_run(" play.")
    doc.add_table(rows=1, cols=1).cell(0, 0).text = "in a cell"
    doc.save(tmp_path / "a.docx")
    translate_document(str(tmp_path / "a.docx"), str(tmp_path / "b.docx"), shout)
    out = docx.Document(tmp_path / "b.docx")
    runs = out.paragraphs[0].runs
    assert [(r.text, bool(r.bold)) for r in runs] == [("TWO ", False), ("DOGS", True), (" PLAY.", False)]
    assert out.tables[0].cell(0, 0).text == "IN A CELL"
