"""nmt.realtext.document: .txt, .md, .html and .docx read and written in the same format (a fake
translation that upper-cases the text between tags, so what is translated is visible)."""

import io
import zipfile
from pathlib import Path

import pytest
from timing_fixtures import assert_linear

from nmt.infer.results import TranslateError
from nmt.realtext import document
from nmt.realtext.document import (
    document_kind,
    markdown_lines,
    markdown_to_markup,
    markup_to_markdown,
    translate_document,
    translate_source,
)
from nmt.realtext.job import TextJob, TextOptions, UnitOutput
from nmt.realtext.markup import Projected, parse
from nmt.realtext.spans import TOKEN


def shout(texts: list[str], fmt: str) -> list[str]:
    """The texts through nmt.realtext.job in ``fmt``, each sentence "translated" to upper case."""
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


def test_unterminated_inline_markdown_is_text():
    for line in ["a `b", "a ``b`", "[a](b", '[a](b "c)', "**a", "*a *", "__a_", "[a] (b)"]:
        assert markup_to_markdown(markdown_to_markup(line)) == line
        assert "<m" not in markdown_to_markup(line), line


# ----------------------------------------------------------------------------- worst cases
def markup_identity(texts: list[str], fmt: str) -> list[str]:
    """Each text through nmt.realtext.markup, each run its own translation (aligned token for token)."""
    out = []
    for text in texts:
        doc = parse(text, html=fmt == "html")
        runs = [Projected(r.text, [(*m.span(), *m.span()) for m in TOKEN.finditer(r.text)]) for r in doc.runs]
        out.append(doc.render(runs))
    return out


MB = 1 << 20
WORST_MARKDOWN = [  # (name, size in characters, the text of that size): 1 MB where reading is all
    # there is to it, less where most characters start an element or a delimiter (Python's work each)
    ("a line of spaces", MB, lambda n: "x" + " " * n + "y"),
    ("a blank line of spaces", MB, lambda n: " " * n),
    ("digits", MB, lambda n: "1" * n),
    ("block markers", MB, lambda n: "> - " * (n // 4) + "x"),
    ("backticks", MB, lambda n: "`" * n),
    (
        "backtick runs of growing length",
        MB // 4,
        lambda n: "".join("`" * k + "a" for k in range(1, int((2 * n) ** 0.5))),
    ),
    ("single backticks", MB // 16, lambda n: "`a" * (n // 2)),
    ("brackets", MB // 8, lambda n: "[" * n),
    ("links never closed", MB // 8, lambda n: "[x](" * (n // 4)),
    ("link titles never closed", MB // 8, lambda n: '[x](y "' * (n // 7)),
    ("link urls then spaces", MB // 8, lambda n: "[x](y" * (n // 5) + " " * (n // 2)),
    ("strong never closed", MB // 16, lambda n: "**a" * (n // 3)),
    ("emphasis never closed", MB // 8, lambda n: "*a " * (n // 3)),
    ("underscores", MB // 8, lambda n: "_a" * (n // 2)),
    ("nested delimiters", MB // 16, lambda n: "**_*[`" * (n // 6)),
    ("paragraph lines", MB // 8, lambda n: "a\n" * (n // 2)),
    ("fences", MB // 4, lambda n: "```\n" * (n // 4)),
    ("comment lines", MB // 4, lambda n: "<!--\n" * (n // 5)),
]


@pytest.mark.slow  # over 3 s on 2 cores
def test_markdown_takes_linear_time_on_worst_case_documents_of_up_to_1_mb():
    for name, size, make in WORST_MARKDOWN:
        assert_linear(lambda text: translate_source(text, "markdown", markup_identity), make, size)
        line = make(1000).split("\n")[0]
        assert markup_to_markdown(markdown_to_markup(line)) == line, name


# ----------------------------------------------------------------------------- files
def test_a_file_that_is_not_a_docx_is_refused_naming_it(tmp_path: Path):
    pytest.importorskip("docx")
    for name, data in [
        ("empty.docx", b""),
        ("text.docx", b"not a zip"),
        ("cut.docx", zipped({"a": b"x"})[:30]),
    ]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(TranslateError, match=f"{name}: not a .docx"):
            translate_document(str(tmp_path / name), str(tmp_path / "out.docx"), shout)
    assert not (tmp_path / "out.docx").exists()


def zipped(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def test_a_zip_bomb_is_refused_before_python_docx_reads_it(tmp_path: Path, monkeypatch):
    """The limits are lowered here so that the archives stay small; each is checked from the
    archive's directory, before anything is unpacked."""
    pytest.importorskip("docx")
    bomb = tmp_path / "bomb.docx"
    bomb.write_bytes(zipped({"word/document.xml": b"\0" * (document.RATIO_CHECKED_FROM + 1)}))
    with pytest.raises(TranslateError, match="bomb.docx: member word/document.xml unpacks to .* times"):
        translate_document(str(bomb), str(tmp_path / "out.docx"), shout)
    monkeypatch.setattr(document, "MAX_DOCX_MEMBERS", 3)
    (tmp_path / "many.docx").write_bytes(zipped({f"m{k}": b"x" for k in range(4)}))
    with pytest.raises(TranslateError, match="many.docx: 4 members"):
        translate_document(str(tmp_path / "many.docx"), str(tmp_path / "out.docx"), shout)
    monkeypatch.setattr(document, "MAX_DOCX_BYTES", 1000)
    (tmp_path / "big.docx").write_bytes(zipped({"a": bytes(range(256)) * 4}))
    with pytest.raises(TranslateError, match="big.docx: unpacks to"):
        translate_document(str(tmp_path / "big.docx"), str(tmp_path / "out.docx"), shout)
    assert not (tmp_path / "out.docx").exists()


def test_outputs_are_written_whole_or_not_at_all(tmp_path: Path):
    page, out = tmp_path / "p.html", tmp_path / "o.html"
    page.write_text("<p>A <b>b</b>.</p>")
    out.write_text("the previous translation")

    def failing(texts, fmt):
        raise RuntimeError("the model failed")

    with pytest.raises(RuntimeError):
        translate_document(str(page), str(out), failing)
    assert out.read_text() == "the previous translation"
    with pytest.raises(TranslateError, match="cannot write"):
        translate_document(str(page), str(tmp_path / "missing" / "o.html"), shout)
    translate_document(str(page), str(out), shout)
    assert out.read_text() == "<p>A <b>B</b>.</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.html", "p.html"]  # no temporary left


# ------------------------------------------------------------- `nmt translate` (a tiny random model)
def nmt_translate(checkpoint: Path, source: Path, output: Path) -> int:
    from nmt.cli import main

    return main(
        ["translate", str(checkpoint), "-i", str(source), "-o", str(output), "--quiet", "--max-len-b", "3"]
    )


def test_an_empty_html_or_markdown_file_gives_an_empty_document(tiny_checkpoint, tmp_path: Path, capsys):
    for name in ("empty.html", "empty.md", "newline.md"):
        (tmp_path / name).write_text("\n" if name == "newline.md" else "")
        assert nmt_translate(tiny_checkpoint, tmp_path / name, tmp_path / f"out.{name}") == 0
        assert (tmp_path / f"out.{name}").read_text() == (tmp_path / name).read_text()
    assert capsys.readouterr().err == ""


def test_an_html_file_holding_only_tags_is_copied_as_it_is(tiny_checkpoint, tmp_path: Path, capsys):
    (tmp_path / "tags.html").write_text("<p></p><b></b>\n")
    assert nmt_translate(tiny_checkpoint, tmp_path / "tags.html", tmp_path / "out.html") == 0
    assert (tmp_path / "out.html").read_text() == "<p></p><b></b>\n"
    assert capsys.readouterr().err == ""


def test_the_entities_a_doctype_declares_are_never_expanded(tiny_checkpoint, tmp_path: Path):
    """The DOCTYPE and its internal subset are copied; .xml copies a reference to a declared entity
    as written; .html, which knows no declared entities, reads &a; as text (as a browser shows it)."""
    doctype = '<!DOCTYPE x [<!ENTITY a "aaaa">]>'
    for name in ("ent.html", "ent.xml"):
        (tmp_path / name).write_text(f"{doctype}<p>&a;</p>")
        assert nmt_translate(tiny_checkpoint, tmp_path / name, tmp_path / f"out.{name}") == 0
        out = (tmp_path / f"out.{name}").read_text()
        assert out.startswith(f"{doctype}<p>") and out.endswith("</p>")
    assert (tmp_path / "out.ent.xml").read_text() == f"{doctype}<p>&a;</p>"
    assert TextJob([f"{doctype}<p>&a;</p>"], TextOptions(format="html")).units == [
        "&a;"
    ]  # what the model reads
