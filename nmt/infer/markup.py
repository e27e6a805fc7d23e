"""Inline markup (``--format html|xml``): the tags taken out, the text translated, the tags put
back around the output words aligned to the words they wrapped (tag projection).

    doc = parse('<b>Two dogs</b> play in the <i>snow</i>.', html=True)
    doc.runs[0].text   # 'Two dogs play in the snow.' (what the model translates)
    doc.render([Projected('Zwei Hunde spielen im Schnee.', pairs)])
    # '<b>Zwei Hunde</b> spielen im <i>Schnee</i>.'

A document is a list of pieces: verbatim markup (block tags such as <p> or <li>, comments,
doctype, and the elements never translated: <script>, <style>, <pre>, <textarea>) and *runs*:
stretches of text with their inline tags, each translated as a paragraph (nmt.infer.real_text
splits it into sentences). In a run:
- a paired inline tag (<b>, <a href="...">, <span class="...">) becomes a *mark* over the
  characters it wraps; its opening and closing tags are copied byte for byte (attributes
  untouched);
- a void tag (<br>, <img ...>, <x/>), a comment, or a tag without its partner in the run is a
  zero-width mark at its position;
- <code>, <kbd>, <samp>, <var> and any element with translate="no" or class "notranslate" keep
  their text in the sentence the model sees (so that it reads naturally) but come out verbatim,
  in place of the output words aligned to them;
- entities are decoded for the model, and every character that came from an entity goes back as
  that entity; & < > are escaped.

Projection: a mark covers the output tokens (words and punctuation marks) aligned
(nmt.infer.spans pairs, from the model's cross-attention) to any character it wrapped, from the
first to the last of them. Marks keep the source's nesting and order: a mark is clipped to its
parent's output range and starts after its previous sibling ends. A mark with no aligned output
token is placed, empty, after the output token aligned to the source just before it. The output
thus holds every tag of the source, well nested, whatever the alignment says.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from .spans import TOKEN, Pair

# a tag, comment, CDATA section, doctype or processing instruction; group 1: "/" of a closing
# tag, group 2: the name, group 3: "/" of a self-closing tag
TAG = re.compile(
    r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<![^>]*>|<\?.*?\?>"
    r"|<(/?)([A-Za-z][\w:.-]*)(?:\s+(?:[^>\"']|\"[^\"]*\"|'[^']*')*?)?\s*(/?)>",
    re.S,
)
ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
BLOCK = frozenset(
    "address article aside blockquote body caption dd details dialog div dl dt fieldset figcaption "
    "figure footer form h1 h2 h3 h4 h5 h6 head header hr html legend li main nav ol option p "
    "section summary table tbody td tfoot th thead title tr ul".split()
)
RAW = frozenset("script style pre textarea".split())  # copied verbatim, never translated
KEEP = frozenset("code kbd samp var".split())  # in the sentence, but copied verbatim
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
FORMATS = ("text", "html", "xml")


def no_translate(open_tag: str) -> bool:
    """translate="no" or class notranslate on an opening tag."""
    return bool(
        re.search(r"\btranslate\s*=\s*[\"']?no\b|\bclass\s*=\s*[\"'][^\"']*\bnotranslate\b", open_tag)
    )


@dataclass
class Mark:
    """Source characters [start, end) of a run wrapped by ``open`` ... ``close`` (a zero-width
    mark: start == end, ``close`` empty for a void tag); ``keep``: its text is copied, not
    translated; ``children``: the marks inside it, in source order."""

    open: str
    close: str
    start: int
    end: int
    keep: bool = False
    children: list[Mark] = field(default_factory=list)


@dataclass
class Run:
    """A stretch of text to translate (``text``, entities decoded, whitespace runs made single
    spaces, stripped) with its marks; ``lead`` / ``trail``: the whitespace cut from its ends;
    ``entities``: character -> the entity it was written as."""

    text: str
    marks: list[Mark]
    lead: str = ""
    trail: str = ""
    entities: dict[str, str] = field(default_factory=dict)


@dataclass
class Projected:
    """A run's translation and its character alignment with the run's text (nmt.infer.spans)."""

    text: str
    pairs: list[Pair]


@dataclass
class Document:
    """Verbatim markup (str) and runs, in order."""

    pieces: list[str | Run]

    @property
    def runs(self) -> list[Run]:
        return [p for p in self.pieces if isinstance(p, Run)]

    def render(self, translations: list[Projected]) -> str:
        """The document with each run replaced by its projected translation."""
        if len(translations) != len(self.runs):
            raise ValueError(f"{len(translations)} translations for {len(self.runs)} runs")
        it = iter(translations)
        return "".join(p if isinstance(p, str) else render_run(p, next(it)) for p in self.pieces)


# ----------------------------------------------------------------------------- parsing
class RunBuilder:
    """Collects one run: text (whitespace collapsed), marks (a stack of open ones), entities."""

    def __init__(self):
        self.text: list[str] = []
        self.length = 0
        self.top: list[Mark] = []
        self.stack: list[tuple[str, Mark]] = []  # (tag name, mark) of open tags
        self.entities: dict[str, str] = {}
        self.raw: list[str] = []  # the source's text, as written

    def add_text(self, raw: str) -> None:
        self.raw.append(raw)
        pos = 0
        for m in ENTITY.finditer(raw):
            self._add_plain(raw[pos : m.start()])
            char = html.unescape(m.group(0))
            if char != m.group(0) and char not in "&<>":
                self.entities.update((c, m.group(0)) for c in char if len(char) == 1)
            self._add_plain(char, collapse=False)
            pos = m.end()
        self._add_plain(raw[pos:])

    def _add_plain(self, s: str, *, collapse: bool = True) -> None:
        if collapse:
            s = re.sub(r"\s+", " ", s)
            if s.startswith(" ") and self.text and self.text[-1].endswith(" "):
                s = s[1:]
        self.text.append(s)
        self.length += len(s)

    def _parent(self) -> list[Mark]:
        return self.stack[-1][1].children if self.stack else self.top

    def point(self, raw: str, *, space: bool = False) -> None:
        """A zero-width mark here (``space``: one that separates words, as <br>, then a space)."""
        self._parent().append(Mark(raw, "", self.length, self.length))
        self.raw.append(raw)
        if space:
            self._add_plain(" ")

    def open(self, name: str, raw: str, *, keep: bool = False) -> None:
        mark = Mark(raw, "", self.length, self.length, keep=keep)
        self._parent().append(mark)
        self.stack.append((name, mark))

    def close(self, name: str, raw: str) -> bool:
        """Closes the innermost open ``name`` (False when none is open); tags opened inside it and
        left open become zero-width marks."""
        if name not in (n for n, _ in self.stack):
            return False
        while self.stack[-1][0] != name:
            self._unclosed()
        mark = self.stack.pop()[1]
        mark.close, mark.end = raw, self.length
        return True

    def inside_keep(self) -> bool:
        return any(m.keep for _, m in self.stack)

    def _unclosed(self) -> None:
        """The innermost open tag has no closing tag: a zero-width mark, its children its siblings."""
        mark = self.stack.pop()[1]
        kids, mark.children, mark.end = mark.children, [], mark.start
        self._parent().extend(kids)

    def finish(self) -> Run | str:
        """The run, or the source's text as written when there is nothing to translate in it."""
        while self.stack:
            self._unclosed()
        text = "".join(self.text)
        if not text.strip() and not self.top:
            return "".join(self.raw)
        stripped = text.strip()
        lead = len(text) - len(text.lstrip())
        run = Run(stripped, self.top, text[:lead], text[lead + len(stripped) :], self.entities)
        move(run.marks, -lead, len(stripped))
        return run


def move(marks: list[Mark], offset: int, length: int) -> None:
    """Marks shifted by ``offset`` and clipped to [0, length]."""
    for m in marks:
        m.start = min(max(m.start + offset, 0), length)
        m.end = min(max(m.end + offset, m.start), length)
        move(m.children, offset, length)


def parse(text: str, *, html: bool) -> Document:
    """The pieces of ``text``: HTML (``html``: block tags end runs; <script>, <style>, <pre>,
    <textarea> copied; void tags known) or XML (every tag inline)."""
    pieces: list[str | Run] = []
    run = RunBuilder()

    def end_run() -> None:
        nonlocal run
        r = run.finish()
        if r:
            pieces.append(r)
        run = RunBuilder()

    pos = 0
    while pos < len(text):
        m = TAG.search(text, pos)
        if m is None:
            run.add_text(text[pos:])
            break
        run.add_text(text[pos : m.start()])
        raw, closing, name, self_closing = m.group(0), m.group(1), (m.group(2) or "").lower(), m.group(3)
        pos = m.end()
        if not name:  # comment, CDATA, doctype, processing instruction
            run.point(raw)
        elif html and name in RAW and not closing:
            end_run()
            close = re.compile(rf"</{name}\s*>", re.I).search(text, pos)
            stop = len(text) if close is None else close.end()
            pieces.append(raw + text[pos:stop])
            pos = stop
        elif html and name in BLOCK:
            end_run()
            pieces.append(raw)
        elif self_closing or (html and name in VOID):
            run.point(raw, space=html and name == "br")
        elif closing:
            if not run.close(name, raw):
                run.point(raw)
        else:
            run.open(name, raw, keep=(html and name in KEEP) or no_translate(raw) or run.inside_keep())
    end_run()
    return Document(pieces)


# ----------------------------------------------------------------------------- projection
def escape(text: str, entities: dict[str, str]) -> str:
    """& < > escaped, and each character that came from an entity written as that entity."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if entities:
        text = "".join(entities.get(c, c) for c in text)
    return text


def token_sources(tokens: list[tuple[int, int]], pairs: list[Pair]) -> list[list[tuple[int, int]]]:
    """For each output token, the source character spans aligned to a character of it."""
    out: list[list[tuple[int, int]]] = [[] for _ in tokens]
    for a, b, c, d in pairs:
        for j, (s, e) in enumerate(tokens):
            if s < d and c < e:
                out[j].append((a, b))
    return out


@dataclass
class Placed:
    """A mark's output range: tokens [first, last) (first == last: empty, before token first)."""

    mark: Mark
    first: int
    last: int
    children: list[Placed]


def place(marks: list[Mark], sources: list[list[tuple[int, int]]], lo: int, hi: int) -> list[Placed]:
    """Output token ranges of sibling ``marks`` within [lo, hi), in source order, not overlapping."""
    placed = []
    for m in marks:
        hits = [j for j, spans in enumerate(sources) if any(a < m.end and m.start < b for a, b in spans)]
        if m.start < m.end and hits:
            first, last = max(min(hits), lo), min(max(hits) + 1, hi)
            if first >= last:  # its tokens lie outside the room its parent and siblings leave
                first = last = min(max(min(hits), lo), hi)
        else:  # after the last token aligned to source text before it
            before = [j + 1 for j, spans in enumerate(sources) if any(b <= m.start for _, b in spans)]
            first = last = min(max(max(before, default=lo), lo), hi)
        placed.append(Placed(m, first, last, place(m.children, sources, first, last)))
        lo = last
    return placed


def render_run(run: Run, projected: Projected) -> str:
    """The run's translation with its marks placed (see the module's docstring)."""
    text = projected.text
    tokens = [m.span() for m in TOKEN.finditer(text)]
    sources = token_sources(tokens, projected.pairs)
    placed = place(run.marks, sources, 0, len(tokens))

    def zero_width(j: int, lo: int, mark: Mark) -> int:
        """Where an empty mark before token j goes (its parent's range starts at token lo): at
        the start of token j when a space came before it in the source, else right after token j-1."""
        spaced = mark.start > 0 and run.text[mark.start - 1].isspace()
        if j > lo and not (spaced and j < len(tokens)):
            return tokens[j - 1][1]
        return tokens[j][0] if j < len(tokens) else len(text)

    def emit(items: list[Placed], c_lo: int, c_hi: int, lo: int) -> str:
        out, pos = [], c_lo
        for p in items:
            if p.first < p.last:
                a, b = tokens[p.first][0], tokens[p.last - 1][1]
            else:
                a = b = zero_width(p.first, lo, p.mark)
            a = min(max(a, pos), c_hi)
            b = min(max(b, a), c_hi)
            out.append(escape(text[pos:a], run.entities))
            if p.mark.keep:
                out.append(p.mark.open + source_inner(run, p.mark) + p.mark.close)
            else:
                out.append(p.mark.open + emit(p.children, a, b, p.first) + p.mark.close)
            pos = b
        out.append(escape(text[pos:c_hi], run.entities))
        return "".join(out)

    return run.lead + emit(placed, 0, len(text), 0) + run.trail


def source_inner(run: Run, mark: Mark) -> str:
    """A kept mark's content as in the source: its text with its inner marks."""
    out, pos = [], mark.start
    for child in mark.children:
        out.append(escape(run.text[pos : child.start], run.entities))
        out.append(child.open + source_inner(run, child) + child.close)
        pos = child.end
    out.append(escape(run.text[pos : mark.end], run.entities))
    return "".join(out)


def strip_tags(text: str, *, html: bool) -> str:
    """The text of a fragment as its runs hold it (for scoring translations without their tags)."""
    return " ".join(r.text for r in parse(text, html=html).runs)
