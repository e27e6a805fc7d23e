"""Documents in, documents out (`nmt translate -i FILE -o FILE`): .txt, .md, .html/.htm, .xml
and .docx, each translated through nmt.infer.real_text and written in the same format.

- .txt and any other name: not a document but lines (`nmt translate`'s line by line reading,
  each line split into sentences and joined back; blank lines kept).
- .html/.htm, .xml: the whole file as markup (nmt.infer.markup): tags, attributes, entities,
  <script>, <style>, <pre> as they were.
- .md: line by line: fenced code blocks (``` or ~~~) and HTML comment lines copied; a line's
  block marker (#, >, -, *, +, 1.) kept; a paragraph's lines joined into one line (Markdown
  renders them as one); inline `code`, [links](url), **strong** and *emphasis* carried as markup
  (the code and the URL copied, the link text translated).
- .docx (python-docx, the ``docx`` extra): each paragraph (body, tables, headers, footers) as
  markup whose tags are its runs, so that each run's formatting goes to the words aligned to it.
"""

from __future__ import annotations

import html
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .results import TranslateError

EXTENSIONS = {
    ".md": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xml": "xml",
    ".docx": "docx",
}


def document_kind(path: str) -> str | None:
    """The kind of document a file name names ("markdown", "html", "xml", "docx"), or None for
    stdin, .txt and other names (read line by line, which keeps every line and blank line)."""
    if path == "-":
        return None
    return EXTENSIONS.get(Path(path).suffix.lower())


# ----------------------------------------------------------------------------- markdown
FENCE = re.compile(r"^\s*(```|~~~)")
BLOCK_MARKER = re.compile(r"^(\s*(?:#{1,6}\s+|>\s?|[-*+]\s+|\d+[.)]\s+)*)(.*?)(\s*)$")
INLINE = re.compile(
    r"(?P<code>`+)(?P<code_text>.+?)(?P=code)"
    r"|\[(?P<link_text>[^\]]+)\]\((?P<url>[^)\s]+(?:\s+\"[^\"]*\")?)\)"
    r"|(?P<strong>\*\*|__)(?P<strong_text>.+?)(?P=strong)"
    r"|(?<![\w*])(?P<em>[*_])(?P<em_text>[^*_\s](?:.*?[^*_\s])?)(?P=em)(?![\w*])"
)
MD_TAG = re.compile(r'<m o="([^"]*)" c="([^"]*)"(?: translate="no")?>|</m>')


def markdown_to_markup(text: str) -> str:
    """A line of Markdown as XML markup: each inline element an <m> whose attributes hold its
    Markdown delimiters (o, c), code spans translate="no"; the rest escaped."""
    out, pos = [], 0
    for m in INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()], quote=False))
        if m.group("code"):
            tick = html.escape(m.group("code"))
            out.append(f'<m o="{tick}" c="{tick}" translate="no">{html.escape(m.group("code_text"))}</m>')
        elif m.group("link_text"):
            close = html.escape(f"]({m.group('url')})")
            out.append(f'<m o="[" c="{close}">{markdown_to_markup(m.group("link_text"))}</m>')
        else:
            kind = "strong" if m.group("strong") else "em"
            mark = html.escape(m.group(kind))
            out.append(f'<m o="{mark}" c="{mark}">{markdown_to_markup(m.group(kind + "_text"))}</m>')
        pos = m.end()
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


def markup_to_markdown(text: str) -> str:
    """markdown_to_markup's output (translated) back to Markdown."""
    out, stack, pos = [], [], 0
    for m in MD_TAG.finditer(text):
        out.append(html.unescape(text[pos : m.start()]))
        if m.group(0) == "</m>":
            out.append(stack.pop() if stack else "")
        else:
            out.append(html.unescape(m.group(1)))
            stack.append(html.unescape(m.group(2)))
        pos = m.end()
    out.append(html.unescape(text[pos:]))
    return "".join(out)


@dataclass
class MarkdownLine:
    """A line (or joined paragraph lines) of a Markdown file: ``prefix`` + text + ``suffix``;
    ``text`` None: copied as it is (code, blank, comment)."""

    prefix: str
    text: str | None
    suffix: str = ""


def markdown_lines(source: str) -> list[MarkdownLine]:
    """The lines of a Markdown file, paragraph lines joined, code fences kept verbatim."""
    out: list[MarkdownLine] = []
    fence = None
    for line in source.split("\n"):
        f = FENCE.match(line)
        if fence is not None or f or not line.strip() or line.lstrip().startswith("<!--"):
            if f:
                fence = None if fence is not None and f.group(1) == fence else (fence or f.group(1))
            out.append(MarkdownLine(line, None))
            continue
        prefix, body, suffix = BLOCK_MARKER.match(line).groups()
        last = out[-1] if out else None
        if (
            not prefix
            and last is not None
            and last.text is not None
            and not last.prefix.lstrip().startswith("#")
        ):
            last.text += " " + body  # a paragraph's next line
            continue
        out.append(MarkdownLine(prefix, body, suffix))
    return out


# ----------------------------------------------------------------------------- docx
def docx_paragraphs(document) -> list:
    """Every paragraph of a python-docx Document: body, tables (nested too), headers, footers."""

    def of(container) -> list:
        paragraphs = list(container.paragraphs)
        for table in getattr(container, "tables", []):
            for row in table.rows:
                for cell in row.cells:
                    paragraphs += of(cell)
        return paragraphs

    found = of(document)
    for section in document.sections:
        found += of(section.header) + of(section.footer)
    seen, out = set(), []
    for p in found:  # merged table cells repeat their paragraphs
        if id(p._p) not in seen:
            seen.add(id(p._p))
            out.append(p)
    return out


def runs_to_markup(paragraph) -> str:
    """A paragraph as XML markup: run k's text inside <r k="k">."""
    return "".join(f'<r k="{k}">{html.escape(r.text, quote=False)}</r>' for k, r in enumerate(paragraph.runs))


RUN_TAG = re.compile(r'<r k="(\d+)">|</r>')


def markup_to_runs(paragraph, translated: str) -> None:
    """Replace a paragraph's runs' texts with ``translated`` (runs_to_markup's markup, translated):
    each run gets the text its tag wraps; text between two tags goes to the run before them,
    or to the run after them where that run started with a space in the source."""
    runs = paragraph.runs
    texts = [""] * len(runs)
    current, pos, gap = 0, 0, ""
    for m in RUN_TAG.finditer(translated):
        between = html.unescape(translated[pos : m.start()])
        pos = m.end()
        if m.group(1) is None:  # </r>
            texts[current] += between
            continue
        k = min(int(m.group(1)), len(runs) - 1)
        gap = between
        if gap and runs[k].text[:1].isspace() and not runs[current].text[-1:].isspace():
            texts[k] += gap
        else:
            texts[current] += gap
        current = k
    texts[current] += html.unescape(translated[pos:])
    for run, text in zip(runs, texts):
        run.text = text


# ----------------------------------------------------------------------------- translating a file
def translate_document(path: str, output: str, translate, *, kind: str | None = None) -> None:
    """Translate the document ``path`` into ``output`` ("-": stdout) in the same format (``kind``,
    by default from its extension), ``translate(texts, format)`` giving the translated texts;
    TranslateError naming the file when it cannot be read."""
    kind = kind or document_kind(path) or "text"
    if kind == "docx":
        return translate_docx(path, output, translate)
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TranslateError(f"{path}: cannot read ({e})") from None
    from .translate import write_output

    translated = translate_source(source, kind, translate)
    if output == "-":
        sys.stdout.write(translated)
        sys.stdout.flush()
    else:
        write_output(output, translated)


def translate_source(source: str, kind: str, translate) -> str:
    """The translation of a document's text of this kind (not docx)."""
    if kind in ("text", "html", "xml"):
        return translate([source], kind)[0]
    lines = markdown_lines(source)
    todo = [markdown_to_markup(line.text) for line in lines if line.text is not None]
    done = iter(translate(todo, "xml"))
    return "\n".join(
        line.prefix if line.text is None else line.prefix + markup_to_markdown(next(done)) + line.suffix
        for line in lines
    )


def translate_docx(path: str, output: str, translate) -> None:
    """A .docx translated paragraph by paragraph, each run's formatting kept (python-docx)."""
    try:
        import docx
    except ImportError:
        raise TranslateError(".docx documents need python-docx: pip install 'nmt[docx]'") from None
    if output == "-":
        raise TranslateError(f"{path}: a .docx translation needs -o FILE.docx")
    try:
        document = docx.Document(path)
    except Exception as e:  # noqa: BLE001 (python-docx raises several kinds for a bad file)
        raise TranslateError(f"{path}: not a readable .docx ({type(e).__name__}: {e})") from None
    paragraphs = [p for p in docx_paragraphs(document) if p.text.strip()]
    for p, translated in zip(paragraphs, translate([runs_to_markup(p) for p in paragraphs], "xml")):
        markup_to_runs(p, translated)
    try:
        document.save(output)
    except OSError as e:
        raise TranslateError(f"{output}: cannot write ({e.strerror})") from None
