"""Documents in, documents out (`nmt translate -i FILE -o FILE`): .txt, .md, .html/.htm, .xml
and .docx, each translated through nmt.realtext.job and written in the same format.

- .txt and any other name: not a document but lines (`nmt translate`'s line by line reading,
  each line split into sentences and joined back; blank lines kept).
- .html/.htm, .xml: the whole file as markup (nmt.realtext.markup): tags, attributes, entities,
  <script>, <style>, <pre> as they were.
- .md: line by line: fenced code blocks (``` or ~~~) and HTML comment lines copied; a line's
  block marker (#, >, -, *, +, 1.) kept; a paragraph's lines joined into one line (Markdown
  renders them as one); inline `code`, [links](url), **strong** and *emphasis* carried as markup
  (the code and the URL copied, the link text translated).
- .docx (python-docx, the ``docx`` extra): each paragraph (body, tables, headers, footers) as
  markup whose tags are its runs, so that each run's formatting goes to the words aligned to it.
  The file is checked first (a zip archive of at most MAX_DOCX_MEMBERS members unpacking to at most
  MAX_DOCX_BYTES, none compressed more than MAX_DOCX_RATIO times): a zip bomb is refused.

Every output is written whole or not at all (nmt.atomic). Reading takes time linear in the
document's size, whatever it holds.
"""

from __future__ import annotations

import html
import io
import os
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_bytes
from ..infer.results import TranslateError

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
# Markdown is read in time linear in its size: no regular expression here backtracks over more
# than the characters it matches, and each inline delimiter's closer is found by a search that
# never goes back over text it has searched (``Ahead``).
FENCE = re.compile(r"^\s*(```|~~~)")
BLOCK_MARKER = re.compile(r"\s*(?:#{1,6}\s+|>\s?|[-*+]\s+|\d+[.)]\s+)*")
MD_TAG = re.compile(r'<m o="([^"]*)" c="([^"]*)"(?: translate="no")?>|</m>')
INLINE_START = re.compile(r"[`\[*_]")
BACKTICKS = re.compile(r"`+")
URL_STOP = re.compile(r"[)\s]")
SPACE_RUN = re.compile(r"\s+")
EM_CLOSER = {d: re.compile(rf"(?<=[^*_\s]){re.escape(d)}(?![\w*])") for d in "*_"}
WORD_OR_STAR = re.compile(r"[\w*]")
EM_START = re.compile(r"[^*_\s]")
MAX_INLINE_DEPTH = 8  # inline elements nested deeper are text (Markdown's own nest a few deep)


class Ahead:
    """The next match of ``find(pos)`` (a position, or -1 for none) at or after positions that
    only grow: a search is made again only past the last match, so that all the searches of a
    line read each character once."""

    def __init__(self, find):
        self.find, self.asked, self.found = find, sys.maxsize, -1  # nothing asked yet

    def __call__(self, pos: int) -> int:
        if not (self.asked <= pos and (self.found >= pos or self.found < 0)):
            self.asked, self.found = pos, self.find(pos)
        return self.found


def searcher(pattern: re.Pattern, text: str):
    """``find(pos)`` for Ahead: where ``pattern`` next matches in ``text`` from pos, or -1."""

    def find(pos: int) -> int:
        m = pattern.search(text, pos)
        return -1 if m is None else m.start()

    return find


class InlineScanner:
    """The inline elements of a line of Markdown, leftmost first, each the first of these that
    starts at a position: `code` (a run of backticks, closed by the next run of exactly as many:
    CommonMark's rule), [text](url) or [text](url "title") (text without "]"), **strong** or
    __strong__ (closed by the next same pair), *emphasis* or _emphasis_ (not after a letter, a
    digit, _ or *; not starting with white space, * or _; closed by the first same mark after
    neither white space, * nor _ and before neither a word character nor * that leaves at least
    two characters inside, else by one right after its first character)."""

    def __init__(self, text: str):
        self.text = text
        self.closer_of: dict[int, int] = {}  # a backtick run's start -> the start of its closing run
        runs: dict[int, int] = {}  # run length -> the start of the next run of that length
        for m in reversed(list(BACKTICKS.finditer(text))):
            self.closer_of[m.start()] = runs.get(len(m.group()), -1)
            runs[len(m.group())] = m.start()
        self.bracket = Ahead(lambda p: text.find("]", p))
        self.url_stop = Ahead(searcher(URL_STOP, text))
        self.quote = Ahead(lambda p: text.find('"', p))
        self.strong = {d: Ahead(lambda p, d=d: text.find(d, p)) for d in ("**", "__")}
        self.em = {d: Ahead(searcher(EM_CLOSER[d], text)) for d in "*_"}
        self.tail: tuple[int, int] = (-1, -1)  # (url stop, end) of the last link tail read

    def element(self, i: int) -> tuple[str, int, int, int] | None:
        """The element at text[i] as (kind, content start, content end, end), or None."""
        text, c = self.text, self.text[i]
        if c == "`":
            k = len(BACKTICKS.match(text, i).group())
            close = self.closer_of.get(i, -1)
            return ("code", i + k, close, close + k) if close >= 0 else None
        if c == "[":
            j = self.bracket(i + 1)
            end = self.link_end(j + 2) if j > i + 1 and text.startswith("(", j + 1) else -1
            return ("link", i + 1, j, end) if end >= 0 else None
        if text.startswith(("**", "__"), i):
            close = self.strong[text[i : i + 2]](i + 3)
            return ("strong", i + 2, close, close + 2) if close >= 0 else None
        if (i == 0 or not WORD_OR_STAR.match(text, i - 1)) and EM_START.match(text, i + 1):
            close = self.em[c](i + 3)  # a longer emphasis first (the regex's greedy optional part)
            if close < 0 and EM_CLOSER[c].match(text, i + 2):
                close = i + 2
            return ("em", i + 1, close, close + 1) if close >= 0 else None
        return None

    def link_end(self, start: int) -> int:
        """Where a link's "(url)" or '(url "title")' whose url starts at ``start`` ends, or -1."""
        text, stop = self.text, self.url_stop(start)
        if stop <= start:
            return -1
        if text[stop] == ")":
            return stop + 1
        if self.tail[0] != stop:  # a title: the same for every link whose url stops here
            quote = SPACE_RUN.match(text, stop).end()
            close = self.quote(quote + 1) if text.startswith('"', quote) else -1
            self.tail = (stop, close + 2 if close >= 0 and text.startswith(")", close + 1) else -1)
        return self.tail[1]


def markdown_to_markup(text: str, depth: int = 0) -> str:
    """A line of Markdown as XML markup: each inline element an <m> whose attributes hold its
    Markdown delimiters (o, c), code spans translate="no"; the rest escaped. Elements inside
    elements are read to MAX_INLINE_DEPTH."""
    out, pos, i = [], 0, 0
    scanner = InlineScanner(text) if depth < MAX_INLINE_DEPTH and INLINE_START.search(text) else None
    while scanner is not None and (m := INLINE_START.search(text, i)) is not None:
        i = m.start()
        found = scanner.element(i)
        if found is None:
            i += len(BACKTICKS.match(text, i).group()) if text[i] == "`" else 1
            continue
        kind, a, b, end = found
        out.append(html.escape(text[pos:i], quote=False))
        if kind == "code":
            tick = html.escape(text[i:a])
            out.append(f'<m o="{tick}" c="{tick}" translate="no">{html.escape(text[a:b])}</m>')
        else:
            inner = markdown_to_markup(text[a:b], depth + 1)
            out.append(f'<m o="{html.escape(text[i:a])}" c="{html.escape(text[b:end])}">{inner}</m>')
        pos = i = end
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
    bodies: list[list[str]] = []  # the body of each line with text, its paragraph's next lines'
    fence = None
    for line in source.split("\n"):
        f = FENCE.match(line)
        if fence is not None or f or not line.strip() or line.lstrip().startswith("<!--"):
            if f:
                fence = None if fence is not None and f.group(1) == fence else (fence or f.group(1))
            out.append(MarkdownLine(line, None))
            continue
        prefix = BLOCK_MARKER.match(line).group()
        rest = line[len(prefix) :]
        body = rest.rstrip()
        last = out[-1] if out else None
        if (
            not prefix
            and last is not None
            and last.text is not None
            and not last.prefix.lstrip().startswith("#")
        ):
            bodies[-1].append(body)  # a paragraph's next line
            continue
        out.append(MarkdownLine(prefix, "", rest[len(body) :]))
        bodies.append([body])
    for line, parts in zip((line for line in out if line.text is not None), bodies):
        line.text = " ".join(parts)
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
    if not runs:  # its text is in elements python-docx does not list as runs: left as it is
        return
    texts: list[list[str]] = [[] for _ in runs]
    current, pos, gap = 0, 0, ""
    for m in RUN_TAG.finditer(translated):
        between = html.unescape(translated[pos : m.start()])
        pos = m.end()
        if m.group(1) is None:  # </r>
            texts[current].append(between)
            continue
        k = min(int(m.group(1)), len(runs) - 1)
        gap = between
        if gap and runs[k].text[:1].isspace() and not runs[current].text[-1:].isspace():
            texts[k].append(gap)
        else:
            texts[current].append(gap)
        current = k
    texts[current].append(html.unescape(translated[pos:]))
    for run, parts in zip(runs, texts):
        run.text = "".join(parts)


# ----------------------------------------------------------------------------- translating a file
def translate_document(path: str, output: str, translate, *, kind: str | None = None) -> None:
    """Translate the document ``path`` into ``output`` ("-": stdout) in the same format (``kind``,
    by default from its extension), ``translate(texts, format)`` giving the translated texts;
    TranslateError naming the file when it cannot be read. The output is written whole or not at
    all (nmt.atomic): a failure leaves an existing file as it was."""
    kind = kind or document_kind(path) or "text"
    if kind == "docx":
        return translate_docx(path, output, translate)
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TranslateError(f"{path}: cannot read ({e})") from None
    translated = translate_source(source, kind, translate)
    if output == "-":
        sys.stdout.write(translated)
        sys.stdout.flush()
    else:
        write_whole(output, translated.encode("utf-8"))


def write_whole(path: str, data: bytes) -> None:
    """``data`` written to ``path`` atomically; TranslateError naming it when it cannot be."""
    try:
        write_bytes(path, data)
    except OSError as e:
        raise TranslateError(f"{path}: cannot write ({e.strerror or e})") from None


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


# what a .docx may unpack to before python-docx reads it (a zip bomb is refused)
MAX_DOCX_BYTES = 200 * 2**20  # the members' total size, uncompressed (and the file's size)
MAX_DOCX_MEMBERS = 10_000
MAX_DOCX_RATIO = 100  # a member's uncompressed size over its compressed size ...
RATIO_CHECKED_FROM = 2**20  # ... for members larger than this (small ones cannot do harm)


def read_docx_bytes(path: str) -> bytes:
    """The bytes of a .docx, checked to be a zip archive within the limits above (sizes as its
    central directory declares them: Python's zipfile never unpacks more than a member declares);
    TranslateError naming the file otherwise."""
    try:
        size = os.path.getsize(path)
        if size > MAX_DOCX_BYTES:
            raise TranslateError(
                f"{path}: {size / 2**20:.0f} MB, over the {MAX_DOCX_BYTES >> 20} MB a .docx may have"
            )
        data = Path(path).read_bytes()
    except OSError as e:
        raise TranslateError(f"{path}: cannot read ({e.strerror or e})") from None
    if not data:
        raise TranslateError(f"{path}: not a .docx (an empty file)")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise TranslateError(f"{path}: not a .docx (not a zip archive: {e})") from None
    if len(members) > MAX_DOCX_MEMBERS:
        raise TranslateError(
            f"{path}: {len(members)} members in the archive, over the {MAX_DOCX_MEMBERS} of a .docx"
        )
    total = sum(m.file_size for m in members)
    if total > MAX_DOCX_BYTES:
        raise TranslateError(
            f"{path}: unpacks to {total / 2**20:.0f} MB, over the {MAX_DOCX_BYTES >> 20} MB a .docx may have"
        )
    for m in members:
        if m.file_size > RATIO_CHECKED_FROM and m.file_size > MAX_DOCX_RATIO * max(m.compress_size, 1):
            raise TranslateError(
                f"{path}: member {m.filename} unpacks to {m.file_size // max(m.compress_size, 1)} times its "
                f"size, over the {MAX_DOCX_RATIO} of a .docx (a zip bomb?)"
            )
    return data


def translate_docx(path: str, output: str, translate) -> None:
    """A .docx translated paragraph by paragraph, each run's formatting kept (python-docx)."""
    try:
        import docx
    except ImportError:
        raise TranslateError(".docx documents need python-docx: pip install 'nmt[docx]'") from None
    if output == "-":
        raise TranslateError(f"{path}: a .docx translation needs -o FILE.docx")
    data = read_docx_bytes(path)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001 (python-docx raises several kinds for a bad file)
        raise TranslateError(f"{path}: not a readable .docx ({type(e).__name__}: {e})") from None
    paragraphs = [p for p in docx_paragraphs(document) if p.text.strip()]
    for p, translated in zip(paragraphs, translate([runs_to_markup(p) for p in paragraphs], "xml")):
        markup_to_runs(p, translated)
    saved = io.BytesIO()
    document.save(saved)
    write_whole(output, saved.getvalue())
