"""Inline markup (``--format html|xml``): the tags taken out, the text translated, the tags put
back around the output words aligned to the words they wrapped (tag projection).

    doc = parse('<b>Two dogs</b> play in the <i>snow</i>.', html=True)
    doc.runs[0].text   # 'Two dogs play in the snow.' (what the model translates)
    doc.render([Projected('Zwei Hunde spielen im Schnee.', pairs)])
    # '<b>Zwei Hunde</b> spielen im <i>Schnee</i>.'

A document is a list of pieces: verbatim markup (block tags such as <p> or <li>, and the
elements never translated: <script>, <style>, <pre>, <textarea>) and *runs*: stretches of text
with their inline tags, each translated as a paragraph (nmt.realtext.job splits it into
sentences). In a run:
- a paired inline tag (<b>, <a href="...">, <span class="...">) becomes a *mark* over the
  characters it wraps; its opening and closing tags are copied byte for byte (attributes
  untouched);
- a void tag (<br>, <img ...>, <x/>), a comment, a CDATA section, a doctype, a processing
  instruction, or a tag without its partner in the run is a zero-width mark at its position,
  copied byte for byte (never translated, nothing in it expanded);
- <code>, <kbd>, <samp>, <var> and any element with translate="no" or class "notranslate" keep
  their text in the sentence the model sees (so that it reads naturally) but come out verbatim,
  in place of the output words aligned to them;
- entities are decoded for the model, and every character that came from an entity goes back as
  that entity; & < > are escaped. In XML, an entity HTML does not know (one the document's
  doctype declares) is a zero-width mark, copied as written.

Reading (nmt.realtext.scan) is one pass, in time linear in the text, whatever it holds: a tag ends at the
first ``>`` outside a quoted attribute value (a value is quoted when a quote follows its ``=``); a
comment at ``-->`` (``<!-->`` is an empty one, as in HTML), a CDATA section at ``]]>``, a
processing instruction at ``?>``, a doctype at the ``>`` after its internal subset ``[...]``
(quoted strings, comments and processing instructions in it skipped), any other ``<!...`` at
``>``. A ``<`` that starts none of these (``a < b``, ``<3``) is text. A construct that never ends
(an unterminated comment, CDATA section, processing instruction, doctype or tag, an unclosed quote
in a tag, a <script> without </script>) runs to the end of the text, as an HTML parser reads it:
the rest of the text is copied verbatim, untranslated (a browser shows none of it either). Tags
may nest to any depth: nothing here recurses.

Projection: a mark covers the output tokens (words and punctuation marks) aligned
(nmt.realtext.spans pairs, from the model's cross-attention) to any character it wrapped, from the
first to the last of them. Marks keep the source's nesting and order: a mark is clipped to its
parent's output range and starts after its previous sibling ends. A mark with no aligned output
token is placed, empty, after the output token aligned to the source just before it. The output
thus holds every tag of the source, well nested, whatever the alignment says. Projecting takes
O((marks + pairs) log pairs) time.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterator

from .scan import RAW_ELEMENT, TAG_KIND, TEXT, scan
from .spans import TOKEN, Pair

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
INLINE = frozenset(
    "a abbr b bdi bdo big cite dfn em font i ins del mark q s small span strong sub sup u".split()
)
# an HTML element's start or end tag in plain text (a bounded attribute run: linear time)
HTML_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9]{0,15})(?:\s[^<>]{0,1000})?/?>")


def markup_hint(text: str) -> str | None:
    """Where plain ``text`` looks like HTML: the first known element closed after it was opened
    (``<b>...</b>``) or a known empty element (``<br>``), as a short example; else None (``a < b``,
    ``<3``, ``<john@example.com>`` and unknown names are plain text). Linear time."""
    opened: set[str] = set()
    for m in HTML_TAG.finditer(text):
        closing, name = m.group(1), m.group(2).lower()
        if name in VOID and not closing:
            return m.group(0)[:40]
        if name not in BLOCK and name not in INLINE and name not in KEEP and name not in RAW:
            continue
        if closing and name in opened:
            return f"<{name}>...</{name}>"
        opened.add(name)
    return None


def first_markup(texts: list[str]) -> tuple[int, str] | None:
    """The first of plain ``texts`` that looks like HTML: (its number from 1, markup_hint's
    example), or None; what `nmt translate` and `nmt serve` warn of when no format was named."""
    for k, text in enumerate(texts, start=1):
        hint = markup_hint(text)
        if hint is not None:
            return k, hint
    return None


NO_TRANSLATE = re.compile(r"\btranslate\s*=\s*[\"']?no\b|\bclass\s*=\s*[\"'][^\"']*\bnotranslate\b")


def no_translate(open_tag: str) -> bool:
    """translate="no" or class notranslate on an opening tag."""
    return NO_TRANSLATE.search(open_tag) is not None


# ----------------------------------------------------------------------------- documents
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
    """A run's translation and its character alignment with the run's text (nmt.realtext.spans)."""

    text: str
    pairs: list[Pair]
    # where a mark goes whose characters no pair names (the output piece attending most to one of
    # them, nmt.infer.attention_maps.unaligned_sources): read only for such a mark
    fallback: list[Pair] = field(default_factory=list)


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


def all_marks(marks: list[Mark]) -> Iterator[Mark]:
    """``marks`` and every mark inside them, in source order (without recursion)."""
    stack = [iter(marks)]
    while stack:
        mark = next(stack[-1], None)
        if mark is None:
            stack.pop()
            continue
        yield mark
        stack.append(iter(mark.children))


# ----------------------------------------------------------------------------- parsing
class RunBuilder:
    """Collects one run: text (whitespace collapsed), marks in source order, entities. The nesting
    is built at the end from the order in which marks opened and closed (``events``), so that an
    unclosed tag costs nothing more than a closed one."""

    def __init__(self, *, xml: bool = False):
        self.xml = xml
        self.text: list[str] = []
        self.length = 0
        self.marks: list[Mark] = []
        self.events: list[int] = []  # k: mark k starts (a point, or an opening tag); ~k: mark k closes
        self.stack: list[tuple[str, int]] = []  # (tag name, mark number) of open tags
        self.open_names: Counter[str] = Counter()  # how many of each name are open
        self.keeps = 0  # open tags whose content is kept
        self.entities: dict[str, str] = {}
        self.raw: list[str] = []  # the source's text and tags, as written

    def add_text(self, raw: str) -> None:
        self.raw.append(raw)
        pos = 0
        for m in ENTITY.finditer(raw):
            self._add_plain(raw[pos : m.start()])
            pos = m.end()
            char = html.unescape(m.group(0))
            if char == m.group(0) and self.xml:  # declared by the document, not by HTML
                self._add(Mark(char, "", self.length, self.length))
                continue
            if char != m.group(0) and char not in "&<>":
                self.entities.update((c, m.group(0)) for c in char if len(char) == 1)
            self._add_plain(char, collapse=False)
        self._add_plain(raw[pos:])

    def _add_plain(self, s: str, *, collapse: bool = True) -> None:
        if collapse:
            s = re.sub(r"\s+", " ", s)
            if s.startswith(" ") and self.text and self.text[-1].endswith(" "):
                s = s[1:]
        self.text.append(s)
        self.length += len(s)

    def _add(self, mark: Mark) -> int:
        self.marks.append(mark)
        self.events.append(len(self.marks) - 1)
        return len(self.marks) - 1

    def point(self, raw: str, *, space: bool = False) -> None:
        """A zero-width mark here (``space``: one that separates words, as <br>, then a space)."""
        self._add(Mark(raw, "", self.length, self.length))
        self.raw.append(raw)
        if space:
            self._add_plain(" ")

    def open(self, name: str, raw: str, *, keep: bool = False) -> None:
        """An opening tag: a zero-width mark until its closing tag comes (``close``); inside a
        kept one, kept too."""
        keep = keep or self.keeps > 0
        self.raw.append(raw)
        self.stack.append((name, self._add(Mark(raw, "", self.length, self.length, keep=keep))))
        self.open_names[name] += 1
        self.keeps += keep

    def close(self, name: str, raw: str) -> bool:
        """Closes the innermost open ``name`` (False when none is open); tags opened inside it and
        left open stay zero-width marks, what they held their siblings."""
        if not self.open_names[name]:
            return False
        while True:
            top, k = self.stack.pop()
            self.open_names[top] -= 1
            self.keeps -= self.marks[k].keep
            if top == name:
                break
        mark = self.marks[k]
        mark.close, mark.end = raw, self.length
        self.raw.append(raw)
        self.events.append(~k)
        return True

    def _tree(self) -> list[Mark]:
        """The top-level marks, each closed one holding the marks between its tags."""
        top: list[Mark] = []
        parents = [top]
        for event in self.events:
            if event < 0:
                parents.pop()
                continue
            mark = self.marks[event]
            parents[-1].append(mark)
            if mark.close:  # closed later: the marks up to its closing tag are its children
                parents.append(mark.children)
        return top

    def finish(self) -> list[str | Run]:
        """The run, or the source's text and tags as written when there is nothing to translate in
        it (nothing at all for an empty run): white space around empty tags stays where it was."""
        text = "".join(self.text)
        if not text.strip():
            raw = "".join(self.raw)
            return [raw] if raw else []
        stripped = text.strip()
        lead = len(text) - len(text.lstrip())
        for m in self.marks:  # shifted to the stripped text, clipped to it
            m.start = min(max(m.start - lead, 0), len(stripped))
            m.end = min(max(m.end - lead, m.start), len(stripped))
        return [Run(stripped, self._tree(), text[:lead], text[lead + len(stripped) :], self.entities)]


def parse(text: str, *, html: bool) -> Document:
    """The pieces of ``text``: HTML (``html``: block tags end runs; <script>, <style>, <pre>,
    <textarea> copied; void tags known) or XML (every tag inline)."""
    pieces: list[str | Run] = []
    run = RunBuilder(xml=not html)
    for token in scan(text, RAW if html else frozenset()):
        name, is_tag = token.name, token.kind == TAG_KIND
        if token.kind == TEXT:
            run.add_text(token.raw)
        elif not token.complete or token.kind == RAW_ELEMENT or (html and is_tag and name in BLOCK):
            pieces += run.finish()
            pieces.append(token.raw)
            run = RunBuilder(xml=not html)
        elif not is_tag:  # comment, CDATA, doctype, processing instruction
            run.point(token.raw)
        elif token.self_closing or (html and name in VOID):
            run.point(token.raw, space=html and name == "br")
        elif token.closing:
            if not run.close(name, token.raw):
                run.point(token.raw)
        else:
            run.open(name, token.raw, keep=(html and name in KEEP) or no_translate(token.raw))
    return Document(pieces + run.finish())


# ----------------------------------------------------------------------------- projection
def escape(text: str, entities: dict[str, str]) -> str:
    """& < > escaped, and each character that came from an entity written as that entity."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if entities:
        text = "".join(entities.get(c, c) for c in text)
    return text


def token_ranges(tokens: list[tuple[int, int]], pairs: list[Pair]) -> list[tuple[int, int, int, int]]:
    """For each pair (a, b, c, d) whose output characters [c, d) overlap output tokens: (a, b,
    first, last), the tokens first..last (inclusive) it overlaps."""
    starts, ends = [s for s, _ in tokens], [e for _, e in tokens]
    out = []
    for a, b, c, d in pairs:
        first, last = bisect_right(ends, c), bisect_left(starts, d) - 1
        if first <= last:
            out.append((a, b, first, last))
    return out


NO_TOKEN = 1 << 62  # more than any token number


def overlap_hits(ranges: list[tuple[int, int, int, int]], marks: list[Mark]) -> dict[int, tuple[int, int]]:
    """For each mark (by id) whose source characters [start, end) overlap some range's [a, b):
    the first and the last output token of those ranges. One sweep over the ranges by ``a``, the
    marks by ``end``, with Fenwick trees of the least first / the greatest last token over ``b``
    (indexed from the greatest b down, so that "b > start" is a prefix)."""
    bs = sorted({b for _, b, _, _ in ranges})
    size = len(bs)
    least, greatest = [NO_TOKEN] * (size + 1), [-1] * (size + 1)
    by_a = sorted(ranges)
    k, out = 0, {}
    for mark in sorted(marks, key=lambda m: m.end):
        while k < len(by_a) and by_a[k][0] < mark.end:
            _, b, first, last = by_a[k]
            k += 1
            i = size - bisect_left(bs, b)
            while i <= size:
                least[i], greatest[i] = min(least[i], first), max(greatest[i], last)
                i += i & -i
        lo, hi = NO_TOKEN, -1
        i = size - bisect_right(bs, mark.start)
        while i > 0:
            lo, hi = min(lo, least[i]), max(hi, greatest[i])
            i -= i & -i
        if hi >= 0:
            out[id(mark)] = (lo, hi)
    return out


class Placement:
    """Where marks go in a run's translation (see the module's docstring)."""

    def __init__(self, run: Run, projected: Projected):
        self.run, self.text = run, projected.text
        self.tokens = [m.span() for m in TOKEN.finditer(self.text)]
        ranges = token_ranges(self.tokens, projected.pairs)
        marks = [m for m in all_marks(run.marks) if m.start < m.end]
        self.hits = overlap_hits(ranges, marks)
        unplaced = [m for m in marks if id(m) not in self.hits]
        self.fallback_hits = (
            overlap_hits(token_ranges(self.tokens, projected.fallback), unplaced) if unplaced else {}
        )
        by_b = sorted((b, last + 1) for _, b, _, last in ranges)
        self.ends = [b for b, _ in by_b]  # the source ends of the ranges, ascending
        self.after = list(accumulate((j for _, j in by_b), max))  # the tokens up to them

    def tokens_of(self, mark: Mark, lo: int, hi: int) -> tuple[int, int]:
        """The mark's output tokens [first, last) within [lo, hi) (first == last: empty, before
        token first): those aligned to its characters, else those its fallback pairs give, else
        after the last one aligned to source text before it."""
        hits = self.hits.get(id(mark)) or self.fallback_hits.get(id(mark))
        if hits is not None:
            first, last = max(hits[0], lo), min(hits[1] + 1, hi)
            if first >= last:  # its tokens lie outside the room its parent and siblings leave
                first = last = min(max(hits[0], lo), hi)
            return first, last
        k = bisect_right(self.ends, mark.start)
        before = self.after[k - 1] if k else lo
        first = min(max(before, lo), hi)
        return first, first

    def chars(self, mark: Mark, first: int, last: int, parent_first: int) -> tuple[int, int]:
        """The output characters of tokens [first, last); for an empty range, where it goes: at
        the start of token first when a space came before the mark in the source, else right after
        token first - 1 (not before the parent's first token)."""
        if first < last:
            return self.tokens[first][0], self.tokens[last - 1][1]
        spaced = mark.start > 0 and self.run.text[mark.start - 1].isspace()
        if first > parent_first and not (spaced and first < len(self.tokens)):
            at = self.tokens[first - 1][1]
        else:
            at = self.tokens[first][0] if first < len(self.tokens) else len(self.text)
        return at, at


@dataclass
class Frame:
    """A mark being written: its children (next: ``i``), the room left to them (tokens [lo, hi),
    characters [pos, c_hi)), its first token, its closing tag."""

    children: list[Mark]
    lo: int
    hi: int
    pos: int
    c_hi: int
    first: int
    close: str
    i: int = 0


def render_run(run: Run, projected: Projected) -> str:
    """The run's translation with its marks placed (see the module's docstring)."""
    text = projected.text
    if not run.marks:
        return run.lead + escape(text, run.entities) + run.trail
    where = Placement(run, projected)
    out = [run.lead]
    stack = [Frame(run.marks, 0, len(where.tokens), 0, len(text), 0, "")]
    while stack:
        f = stack[-1]
        if f.i == len(f.children):
            out += [escape(text[f.pos : f.c_hi], run.entities), f.close]
            stack.pop()
            continue
        mark = f.children[f.i]
        f.i += 1
        first, last = where.tokens_of(mark, f.lo, f.hi)
        f.lo = last
        a, b = where.chars(mark, first, last, f.first)
        a = min(max(a, f.pos), f.c_hi)
        b = min(max(b, a), f.c_hi)
        out.append(escape(text[f.pos : a], run.entities))
        f.pos = b
        if mark.keep:
            out.append(mark.open + source_inner(run, mark) + mark.close)
        else:
            out.append(mark.open)
            stack.append(Frame(mark.children, first, last, a, b, first, mark.close))
    out.append(run.trail)
    return "".join(out)


def source_inner(run: Run, mark: Mark) -> str:
    """A kept mark's content as in the source: its text with its inner marks (without recursion)."""
    out: list[str] = []
    stack = [[mark, 0, mark.start]]  # a mark, its next child, where its text goes on
    while stack:
        f = stack[-1]
        m, i, pos = f
        if i == len(m.children):
            out.append(escape(run.text[pos : m.end], run.entities))
            stack.pop()
            if stack:
                out.append(m.close)
                stack[-1][2] = m.end
            continue
        child = m.children[i]
        f[1] = i + 1
        out += [escape(run.text[pos : child.start], run.entities), child.open]
        stack.append([child, 0, child.start])
    return "".join(out)
