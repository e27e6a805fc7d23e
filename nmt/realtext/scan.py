"""Markup scanned in time linear in its length, whatever it holds: text, tags (a tag ends at the
first > outside a quoted attribute value; a quote counts only right after =), comments, CDATA
sections, a DOCTYPE with its internal subset, other declarations, processing instructions, and the
raw elements asked for (<script>...</script>) as one token each. A construct left open runs to the
end of the text (as an HTML5 parser reads it); a < that starts nothing is text.

    [(t.kind, t.raw) for t in scan('a<b x="1">c</b><!--d-->')]
    # [('text', 'a'), ('tag', '<b x="1">'), ('text', 'c'), ('tag', '</b>'), ('comment', '<!--d-->')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

# token kinds: text, and the markup constructs
TEXT, TAG_KIND, COMMENT, CDATA = "text", "tag", "comment", "cdata"
DOCTYPE, DECLARATION, PI = "doctype", "declaration", "processing instruction"
RAW_ELEMENT = "raw element"  # <script>...</script>: from the opening tag through the closing one
ENDS = {COMMENT: "-->", CDATA: "]]>", PI: "?>", DECLARATION: ">"}
START = re.compile(r"<[A-Za-z/!?]")  # where a construct may start
NAME = re.compile(r"[A-Za-z][\w:.-]*")
ATTRIBUTE_STOP = re.compile(r"[>=]")
SPACES = re.compile(r"\s*")
DOCTYPE_STOP = re.compile(r"[\[>\"']")
SUBSET_STOP = re.compile(r"[\]\"']|<!--|<\?")


@dataclass(slots=True)
class Token:
    """Characters [start, end) of a text (``raw``): text or a markup construct (``kind``).
    A tag's ``name`` is in lower case; ``complete`` False: a construct that never ends (it runs to
    the end of the text)."""

    kind: str
    start: int
    end: int
    raw: str
    name: str = ""
    closing: bool = False
    self_closing: bool = False
    complete: bool = True


def scan(text: str, raw_elements: frozenset[str] = frozenset()) -> Iterator[Token]:
    """The tokens of ``text`` in order (see the module's docstring), in one linear pass: each
    character is looked at a bounded number of times. ``raw_elements``: names of the elements whose
    content is not markup (HTML's RAW), each read as one RAW_ELEMENT token."""
    pos = i = 0
    while (start := START.search(text, i)) is not None:
        i = start.start()
        token = construct(text, i, raw_elements)
        if token is None:  # a "<" that starts nothing: text
            i += 1
            continue
        if pos < i:
            yield Token(TEXT, pos, i, text[pos:i])
        yield token
        pos = i = token.end
    if pos < len(text):
        yield Token(TEXT, pos, len(text), text[pos:])


def construct(text: str, i: int, raw_elements: frozenset[str]) -> Token | None:
    """The markup construct that starts at text[i] ("<"), or None when none does."""
    follower = text[i + 1 : i + 2]
    if follower == "!":
        if text.startswith("<!--", i):
            return delimited(text, i, COMMENT, i + 2)  # from i + 2: "<!-->" is an empty comment
        if text.startswith("<![CDATA[", i):
            return delimited(text, i, CDATA, i + 9)
        if text[i + 2 : i + 9].upper() == "DOCTYPE":
            return doctype(text, i)
        return delimited(text, i, DECLARATION, i + 2)
    if follower == "?":
        return delimited(text, i, PI, i + 2)
    token = tag(text, i)
    if token is None or token.closing or not token.complete or token.name not in raw_elements:
        return token
    close = re.compile(rf"</{token.name}\s*>", re.I).search(text, token.end)
    end = len(text) if close is None else close.end()
    return Token(RAW_ELEMENT, i, end, text[i:end], token.name, complete=close is not None)


def delimited(text: str, i: int, kind: str, start: int) -> Token:
    """The construct from text[i] to the first ENDS[kind] at or after ``start`` (or to the end)."""
    close = text.find(ENDS[kind], start)
    end = len(text) if close < 0 else close + len(ENDS[kind])
    return Token(kind, i, end, text[i:end], complete=close >= 0)


def doctype(text: str, i: int) -> Token:
    """<!DOCTYPE ...> from text[i]: its end is the first ">" outside quoted strings and outside
    its internal subset [...] (where comments and processing instructions are skipped too)."""
    j, stops, end = i + 9, DOCTYPE_STOP, -1
    while (m := stops.search(text, j)) is not None:
        found = m.group()
        j = m.end()
        if found == ">":
            end = j
            break
        if found in ("[", "]"):
            stops = SUBSET_STOP if found == "[" else DOCTYPE_STOP
            continue
        closer = {'"': '"', "'": "'", "<!--": "-->", "<?": "?>"}[found]
        close = text.find(closer, j)
        if close < 0:
            break
        j = close + len(closer)
    stop = end if end >= 0 else len(text)
    return Token(DOCTYPE, i, stop, text[i:stop], complete=end >= 0)


def tag(text: str, i: int) -> Token | None:
    """The tag at text[i] ("<"): a name, then ">", "/>", or white space and attributes up to ">";
    None when text[i] starts no tag (a name followed by something else: "<a=", "<3")."""
    closing = text.startswith("/", i + 1)
    name = NAME.match(text, i + 1 + closing)
    if name is None:
        return None
    j = name.end()
    if j == len(text):
        end = -1
    elif text[j] == ">":
        end = j + 1
    elif text.startswith("/>", j):
        end = j + 2
    elif text[j].isspace():
        end = attributes_end(text, j)
    else:
        return None
    stop = end if end >= 0 else len(text)
    raw = text[i:stop]
    complete = end >= 0
    self_closing = complete and raw.endswith("/>")
    return Token(TAG_KIND, i, stop, raw, name.group().lower(), closing, self_closing, complete)


def attributes_end(text: str, j: int) -> int:
    """Where a tag whose attributes start at text[j] ends (after its ">"), or -1 when it never
    does; a quote right after an attribute's "=" (white space between allowed) starts a quoted
    value, which ends at the same quote."""
    while (m := ATTRIBUTE_STOP.search(text, j)) is not None:
        if m.group() == ">":
            return m.end()
        j = SPACES.match(text, m.end()).end()
        quote = text[j : j + 1]
        if quote in ('"', "'"):
            close = text.find(quote, j + 1)
            if close < 0:
                return -1
            j = close + 1
    return -1
