"""Translation memories as training pairs: TMX 1.4, XLIFF 1.2 and 2.0, gettext PO and TSV files read
into (source, target) segments for `nmt prepare` (and TMX written, `write_tmx`).

The language pair is chosen by the file's own language attributes against --src / --tgt (TMX: each
``<tuv xml:lang>``; XLIFF 1.2: ``<file source-language target-language>``; XLIFF 2.0: ``<xliff srcLang
trgLang>``; PO: the header's ``Language:``, the target; TSV: a first row of language codes, else the
columns are source, target). A code matches its language exactly or by its first subtag (``en``
matches ``en-US``); an exact match wins. A file whose two sides are --tgt and --src is read the
other way round.

Inline markup of the XML formats comes out as tags in an XML fragment, as nmt's markup pipeline
(nmt.realtext.markup) reads it: ``& < >`` of the text escaped; a code that carries its original
markup (TMX and XLIFF 1.2 ``bpt``/``ept``/``ph``/``it``/``ut``; XLIFF 2.0 ``pc``/``ph``/``sc``/``ec``
through their ``dataRef`` to ``originalData``) gives that markup when it is one tag
(``<bpt i="1">&lt;b&gt;</bpt>`` gives ``<b>``, its ``ept`` the matching ``</b>``), else a generic one
(``<g id="1">`` ... ``</g>`` for a pair, ``<x id="2"/>`` standalone, ``<bx/>`` / ``<ex/>`` for an
isolated begin / end); XLIFF's own inline elements (``g``, ``x``, ``bx``, ``ex``, ``pc``, ``ph``,
``sc``, ``ec``) and TMX's ``hi`` are kept as they are written; annotations (``mrk``, ``sm``, ``em``)
keep their text without the element; ``cp`` is its character. ``markup="text"``: the text alone.
PO and TSV text is taken as it is (markup in it stays as written).

Skipped, and counted: a unit without both languages, an empty side, a target the file marks as not
translated (PO ``#, fuzzy``; XLIFF 1.2 ``state="new"`` or ``"needs-translation"``; XLIFF 2.0
``state="initial"``), PO's header and obsolete (``#~``) entries.

XML is read safely, by expat in one streaming pass: a DOCTYPE may name a DTD but never declare an
entity (billion laughs, external entities: refused), no DTD or external entity is ever fetched, a
reference to an undeclared entity is an error; a file is at most ``Limits.max_bytes`` (after gzip)
and a segment at most ``Limits.max_segment_chars``. Every error names the file and line.
"""

from __future__ import annotations

import gzip
import html
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from ..realtext.scan import TAG_KIND, scan
from .download import DataError
from .lines import read_lines

SUFFIXES = {".tmx": "tmx", ".xlf": "xliff", ".xliff": "xliff", ".po": "po", ".tsv": "tsv"}
MARKUP = ("tags", "text")
CHUNK = 1 << 16  # bytes fed to expat at a time
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*")


class MemoryFileError(DataError):
    """A translation memory that cannot be read (the message names the file and line)."""


@dataclass(frozen=True)
class Limits:
    """The most a memory may hold: bytes of the file (after gzip), characters of one segment."""

    max_bytes: int = 4 << 30
    max_segment_chars: int = 100_000


@dataclass
class Counts:
    """What reading a memory found: units read, pairs given, units skipped by reason."""

    format: str
    units: int = 0
    pairs: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def memory_format(path: str | Path) -> str | None:
    """The memory format of a file by its name (a .gz after it allowed), or None (not a memory)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return SUFFIXES.get(suffixes[-1]) if suffixes else None


def read_memory(
    path: str | Path, *, src: str, tgt: str, markup: str = "tags", limits: Limits = Limits(), counts=None
) -> Iterator[tuple[str, str]]:
    """The (source, target) segments of a memory (see the module's docstring), in file order;
    ``counts``: a `Counts` to fill. MemoryFileError naming the file and line for a bad file."""
    fmt = memory_format(path)
    if fmt is None:
        raise MemoryFileError(f"{path}: not a translation memory ({', '.join(SUFFIXES)}, optionally .gz)")
    if markup not in MARKUP:
        raise ValueError(f"markup={markup!r}: one of {MARKUP}")
    counts = counts if counts is not None else Counts(fmt)
    langs = (src, tgt)
    if fmt == "po":
        yield from _checked(read_po(path, langs, counts), path, limits)
    elif fmt == "tsv":
        yield from _checked(read_tsv(path, langs, counts), path, limits)
    else:
        yield from read_xml(path, langs, counts, markup=markup, limits=limits)
    if counts.pairs == 0 and counts.units:
        raise MemoryFileError(
            f"{path}: no {src}-{tgt} pair in {counts.units} units (skipped: "
            f"{', '.join(f'{k} {v}' for k, v in counts.skipped.items())})"
        )


def _checked(pairs: Iterator[tuple[int, str, str]], path, limits: Limits) -> Iterator[tuple[str, str]]:
    """PO and TSV pairs (line, source, target) within the segment limit."""
    for line, s, t in pairs:
        if max(len(s), len(t)) > limits.max_segment_chars:
            raise MemoryFileError(
                f"{path}: line {line}: a segment of over {limits.max_segment_chars} characters"
            )
        yield s, t


# ----------------------------------------------------------------------------- languages
def language_match(code: str, wanted: str) -> int:
    """2: the same language code (case, - or _ aside); 1: the same first subtag; 0: another."""
    a, b = (c.strip().lower().replace("_", "-") for c in (code, wanted))
    if a == b:
        return 2
    return int(bool(a) and a.split("-")[0] == b.split("-")[0])


def pick_language(codes: list[str], wanted: str) -> int | None:
    """The index of the code of ``codes`` that best matches ``wanted`` (the first of the best), or None."""
    best, index = 0, None
    for i, code in enumerate(codes):
        score = language_match(code, wanted)
        if score > best:
            best, index = score, i
    return index


def orientation(source: str, target: str, langs: tuple[str, str], where: str) -> bool:
    """Whether a file whose sides are ``source`` and ``target`` (a target "" is taken as langs[1]) is
    read swapped for ``langs`` (--src, --tgt); MemoryFileError when they are not that pair."""
    src, tgt = langs
    if language_match(source, src) and (not target or language_match(target, tgt)):
        return False
    if language_match(source, tgt) and language_match(target, src):
        return True
    raise MemoryFileError(
        f"{where}: its languages are {source or '?'} -> {target or '?'}, not {src} and {tgt}"
    )


# ----------------------------------------------------------------------------- PO and TSV
PO_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    '"': '"',
    "\\": "\\",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}
PO_ESCAPE = re.compile(r"\\(.)")
PO_KEYWORD = re.compile(r"(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+(\".*)$")


def po_string(text: str, where: str) -> str:
    """The value of a PO string literal (``"..."``, C escapes)."""
    text = text.strip()
    if len(text) < 2 or not text.startswith('"') or not text.endswith('"'):
        raise MemoryFileError(f"{where}: expected a quoted string, found {text[:40]!r}")
    return PO_ESCAPE.sub(lambda m: PO_ESCAPES.get(m.group(1), m.group(1)), text[1:-1])


@dataclass
class _PoEntry:
    line: int = 0
    fuzzy: bool = False
    fields: dict[str, list[str]] = field(default_factory=dict)


def po_entries(path) -> Iterator[_PoEntry]:
    """The entries of a PO file, each with its keywords' strings (continuation lines joined)."""
    entry, last = _PoEntry(), None
    for n, raw in enumerate(read_lines(path), start=1):
        line = raw.strip()
        if not line or line.startswith("#~"):  # a blank line, an obsolete entry
            if not line and entry.fields:
                yield entry
                entry, last = _PoEntry(), None
            continue
        if line.startswith("#"):
            if entry.fields and last is not None and last.startswith("msgstr"):
                yield entry
                entry, last = _PoEntry(), None
            entry.fuzzy |= line.startswith("#,") and "fuzzy" in line[2:].replace(",", " ").split()
            continue
        where = f"{path}: line {n}"
        if line.startswith('"') and last is not None:
            entry.fields[last].append(po_string(line, where))
            continue
        m = PO_KEYWORD.match(line)
        if m is None:
            raise MemoryFileError(f"{where}: not PO syntax: {line[:60]!r}")
        key = m.group(1)
        if key in ("msgctxt", "msgid") and any(k.startswith("msgstr") for k in entry.fields):
            yield entry
            entry = _PoEntry()
        entry.line = entry.line or n
        entry.fields[key] = [po_string(m.group(3), where)]
        last = key
    if entry.fields:
        yield entry


def read_po(path, langs: tuple[str, str], counts: Counts) -> Iterator[tuple[int, str, str]]:
    """A PO file's translated entries as (line, msgid, msgstr), and a plural's second form as
    (msgid_plural, msgstr[1]); the header's Language: is the target (else --tgt is assumed)."""
    swapped = False
    for entry in po_entries(path):
        text = {k: "".join(v) for k, v in entry.fields.items()}
        if text.get("msgid", None) == "" and "msgctxt" not in text:  # the header
            language = re.search(r"^Language:[ \t]*(\S*)", text.get("msgstr", ""), re.M)
            if language and language.group(1):
                swapped = _po_swapped(language.group(1), langs, f"{path}: line {entry.line}")
            continue
        counts.units += 1
        forms = [(text.get("msgid", ""), text.get("msgstr", text.get("msgstr[0]", "")))]
        if "msgid_plural" in text:
            forms.append((text["msgid_plural"], text.get("msgstr[1]", "")))
        for source, target in forms:
            if entry.fuzzy:
                counts.skip("not translated")
            elif not source.strip() or not target.strip():
                counts.skip("empty")
            else:
                counts.pairs += 1
                yield (entry.line, target, source) if swapped else (entry.line, source, target)


def _po_swapped(language: str, langs: tuple[str, str], where: str) -> bool:
    """A PO header's Language: (the target of its msgstr) against --src / --tgt."""
    if language_match(language, langs[1]):
        return False
    if language_match(language, langs[0]):
        return True
    raise MemoryFileError(f"{where}: Language: {language}, neither {langs[0]} nor {langs[1]}")


def read_tsv(path, langs: tuple[str, str], counts: Counts) -> Iterator[tuple[int, str, str]]:
    """A TSV file's rows as (line, source, target): two columns, source first, or the columns of
    --src and --tgt named by a first row of language codes."""
    columns = (0, 1)
    for n, line in enumerate(read_lines(path), start=1):
        cells = line.split("\t")
        if n == 1 and len(cells) >= 2 and all(LANGUAGE_CODE.fullmatch(c.strip()) for c in cells):
            found = [pick_language(cells, lang) for lang in langs]
            if None in found or found[0] == found[1]:
                raise MemoryFileError(
                    f"{path}: line 1: its columns are {', '.join(cells)}: no {langs[0]} and {langs[1]}"
                )
            columns = tuple(found)
            continue
        if not line.strip():
            continue
        width = 2 if columns == (0, 1) else None
        if (width and len(cells) != width) or len(cells) <= max(columns):
            raise MemoryFileError(
                f"{path}: line {n}: {len(cells)} columns, expected {width or max(columns) + 1}"
            )
        counts.units += 1
        source, target = cells[columns[0]], cells[columns[1]]
        if not source.strip() or not target.strip():
            counts.skip("empty")
            continue
        counts.pairs += 1
        yield n, source, target


# ----------------------------------------------------------------------------- XML: inline markup
CODES = frozenset("bpt ept ph it ut".split())  # TMX and XLIFF 1.2: elements holding native code
KEPT = {  # inline elements kept as written: paired (with text) or empty
    "tmx": {"hi": True},
    "xliff1": {"g": True, "x": False, "bx": False, "ex": False},
    "xliff2": {"pc": True, "ph": False, "sc": False, "ec": False},
}
DROPPED = frozenset("sm em".split())  # empty markers; mrk and unknown elements keep their text only


def one_tag(code: str):
    """The scan token of ``code`` when it is exactly one complete tag, else None."""
    tokens = list(scan(code))
    if len(tokens) == 1 and tokens[0].kind == TAG_KIND and tokens[0].complete:
        return tokens[0]
    return None


def closing_of(opening: str) -> str:
    """The closing tag of an opening tag (its name as written)."""
    name = re.match(r"<([^\s/>]+)", opening).group(1)
    return f"</{name}>"


def element(name: str, attrs: list[str], *, empty: bool) -> str:
    """An element's tag as written (attributes in order, namespace declarations left out)."""
    pairs = [(attrs[i], attrs[i + 1]) for i in range(0, len(attrs), 2) if not attrs[i].startswith("xmlns")]
    text = "".join(f' {k}="{html.escape(v)}"' for k, v in pairs)
    return f"<{name}{text}{'/' if empty else ''}>"


def local(name: str) -> str:
    return name.rsplit(":", 1)[-1]


class Segment:
    """One segment's inline content rendered as it is read (`start`, `end`, `text`): its tags as
    the module's docstring says, or (``tags`` False) its text alone. ``natives``: XLIFF 2.0's
    originalData (id: native code)."""

    def __init__(self, dialect: str, *, tags: bool, natives: dict[str, str], limit: int):
        self.dialect, self.tags, self.natives, self.limit = dialect, tags, natives, limit
        self.parts: list[str] = []
        self.size = 0
        self.code: list[str] | None = None  # the native code being read (inside a code element)
        self.code_depth = 0
        self.code_attrs: dict[str, str] = {}
        self.ends: list[str] = []  # what each open element writes at its end
        self.pairs: dict[str, str] = {}  # bpt id: the closing its ept writes

    def emit(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size > self.limit:
            raise OverflowError(self.limit)

    def text(self, data: str) -> None:
        if self.code is not None:
            self.code.append(data)
        else:
            self.emit(html.escape(data, quote=False) if self.tags else data)

    def start(self, name: str, attrs: list[str]) -> None:
        if self.code is not None:  # inside native code (a sub-flow): its text is native code too
            self.code_depth += 1
            return
        values = dict(zip(attrs[::2], attrs[1::2]))
        kept = KEPT[self.dialect].get(name)
        if name in CODES and self.dialect != "xliff2":
            self.code, self.code_depth, self.code_attrs = [], 0, values
            self.ends.append("")
        elif name == "cp" and self.dialect == "xliff2":
            self.text(_code_point(values.get("hex", "")))
            self.ends.append("")
        elif kept is None or name in DROPPED or not self.tags:
            self.ends.append("")
        else:
            opening, closing = self._kept_tags(name, attrs, values, paired=kept)
            self.emit(opening)
            self.ends.append(closing)

    def end(self, name: str) -> None:
        if self.code is not None and self.code_depth:
            self.code_depth -= 1
            return
        closing = self.ends.pop()
        if self.code is not None:
            code, self.code = "".join(self.code), None
            if self.tags:
                self.emit(self._native(name, self.code_attrs, code))
        elif closing:
            self.emit(closing)

    def _kept_tags(self, name: str, attrs: list[str], values: dict, *, paired: bool) -> tuple[str, str]:
        """An XLIFF / TMX inline element's tags: its native code (XLIFF 2.0 dataRef) when that is one
        tag of the right kind, else the element as written."""
        own = element(name, attrs, empty=not paired)
        if self.dialect != "xliff2":
            return own, f"</{name}>" if paired else ""
        if paired:
            start = one_tag(self.natives.get(values.get("dataRefStart", ""), ""))
            end = one_tag(self.natives.get(values.get("dataRefEnd", ""), ""))
            if start and end and not start.closing and end.closing:
                return start.raw, end.raw
            return own, f"</{name}>"
        native = one_tag(self.natives.get(values.get("dataRef", ""), ""))
        wanted = {"sc": False, "ec": True}.get(name)
        if native and (wanted is None or native.closing == wanted):
            return native.raw, ""
        return own, ""

    def _native(self, name: str, attrs: dict[str, str], code: str) -> str:
        """The tag a native-code element (bpt, ept, ph, it, ut) gives (see the module's docstring)."""
        tag = one_tag(code)
        ident = attrs.get("x") or attrs.get("i") or attrs.get("id") or ""
        if name == "bpt":
            opening = tag.raw if tag and not tag.closing and not tag.self_closing else None
            self.pairs[attrs.get("i", ident)] = closing_of(opening) if opening else "</g>"
            return opening or f'<g id="{html.escape(ident)}">'
        if name == "ept":
            closing = self.pairs.pop(attrs.get("i", ident), None)
            return closing or (tag.raw if tag and tag.closing else f'<ex id="{html.escape(ident)}"/>')
        if name == "it":
            end = attrs.get("pos") == "end"
            if tag and tag.closing == end and not tag.self_closing:
                return tag.raw
            return f'<{"ex" if end else "bx"} id="{html.escape(ident)}"/>'
        return tag.raw if tag else f'<x id="{html.escape(ident)}"/>'

    def value(self) -> str:
        return "".join(self.parts)


def _code_point(hex_value: str) -> str:
    try:
        return chr(int(hex_value, 16))
    except (ValueError, OverflowError):
        raise ValueError(f'<cp hex="{hex_value}">: not a code point') from None


# ----------------------------------------------------------------------------- XML: documents
UNTRANSLATED = {"xliff1": {"new", "needs-translation"}, "xliff2": {"initial"}}


class _Refused(Exception):
    """What the XML may not hold (an entity declaration, an external entity), said as an error."""


def safe_parser() -> expat.XMLParserType:
    """An expat parser that never declares, expands or fetches an entity, nor reads a DTD."""
    parser = expat.ParserCreate()
    parser.buffer_text = True
    parser.ordered_attributes = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def declared(name, is_parameter, *rest):
        raise _Refused(f"the DOCTYPE declares the entity {'%' if is_parameter else '&'}{name}; (refused)")

    def unparsed(name, *rest):
        raise _Refused(f"the DOCTYPE declares the entity &{name}; (refused)")

    def external(context, base, system_id, public_id):
        raise _Refused(f"an external entity ({system_id}) is never read")

    def skipped(name, is_parameter):
        raise _Refused(f"&{name}; is not an XML entity (a DTD's entities are never read)")

    parser.EntityDeclHandler = declared
    parser.UnparsedEntityDeclHandler = unparsed
    parser.ExternalEntityRefHandler = external
    parser.SkippedEntityHandler = skipped
    return parser


class _Document:
    """The expat handlers of one TMX or XLIFF file: the units' segments, rendered as they are read
    (`Segment`), and the pairs they give (``pending``, taken by `read_xml` after each chunk)."""

    def __init__(self, path, langs: tuple[str, str], counts: Counts, *, tags: bool, limits: Limits):
        self.path, self.langs, self.counts, self.tags, self.limits = path, langs, counts, tags, limits
        self.parser = safe_parser()
        self.parser.StartElementHandler = self.start
        self.parser.EndElementHandler = self.end
        self.parser.CharacterDataHandler = self.text
        self.dialect = ""
        self.stack: list[str] = []
        self.segment: Segment | None = None
        self.segment_depth = 0
        self.swapped = False
        self.unit: dict[str, str] = {}  # XLIFF: source, target, state; TMX: language -> segment
        self.variants: list[tuple[str, str]] = []  # TMX: (language, segment) of the unit's tuvs
        self.lang = ""
        self.natives: dict[str, str] = {}  # XLIFF 2.0: the unit's originalData
        self.data: tuple[str, list[str]] | None = None
        self.pending: list[tuple[str, str]] = []
        self.languages_seen: set[str] = set()

    def where(self) -> str:
        return f"{self.path}: line {self.parser.CurrentLineNumber}"

    def feed(self, chunk: bytes, *, final: bool) -> None:
        try:
            self.parser.Parse(chunk, final)
        except expat.ExpatError as e:
            raise MemoryFileError(
                f"{self.path}: line {e.lineno}: not well-formed XML ({expat.ErrorString(e.code)})"
            ) from None
        except OverflowError:
            raise MemoryFileError(
                f"{self.where()}: a segment of over {self.limits.max_segment_chars} characters"
            ) from None
        except (_Refused, ValueError) as e:
            raise MemoryFileError(f"{self.where()}: {e}") from None

    def start(self, name: str, attrs: list[str]) -> None:
        name = local(name)
        self.stack.append(name)
        if self.segment is not None:
            self.segment.start(name, attrs)
            return
        values = dict(zip(attrs[::2], attrs[1::2]))
        parent = self.stack[-2] if len(self.stack) > 1 else ""
        if not parent:
            self._root(name, values)
        elif self.data is not None and name == "cp":
            self.data[1].append(_code_point(values.get("hex", "")))
        elif self.dialect == "tmx":
            self._tmx_start(name, parent, values)
        else:
            self._xliff_start(name, parent, values)

    def _root(self, name: str, values: dict[str, str]) -> None:
        if name == "tmx":
            self.dialect = "tmx"
        elif name == "xliff" and values.get("version", "").startswith("2"):
            self.dialect = "xliff2"
            where = self.where()
            self.swapped = orientation(
                values.get("srcLang", ""), values.get("trgLang", ""), self.langs, where
            )
        elif name == "xliff":
            self.dialect = "xliff1"
        else:
            raise _Refused(f"<{name}> is not the root of a TMX or XLIFF file")

    def _tmx_start(self, name: str, parent: str, values: dict[str, str]) -> None:
        if name == "tu":
            self.variants = []
        elif name == "tuv":
            self.lang = values.get("xml:lang") or values.get("lang") or ""
        elif name == "seg" and parent == "tuv":
            self._open_segment()

    def _xliff_start(self, name: str, parent: str, values: dict[str, str]) -> None:
        unit = "trans-unit" if self.dialect == "xliff1" else "segment"
        if name == "file" and self.dialect == "xliff1":
            where = self.where()
            source, target = values.get("source-language", ""), values.get("target-language", "")
            self.swapped = orientation(source, target, self.langs, where)
        elif name == unit:
            self.unit = {"state": values.get("state", "")} if unit == "segment" else {}
        elif name == "unit":
            self.natives = {}
        elif name == "data" and parent == "originalData":
            self.data = (values.get("id", ""), [])
        elif name in ("source", "target") and parent == unit:
            if name == "target" and "state" in values:
                self.unit["state"] = values["state"]
            self._open_segment()

    def _open_segment(self) -> None:
        self.segment = Segment(
            self.dialect, tags=self.tags, natives=self.natives, limit=self.limits.max_segment_chars
        )
        self.segment_depth = len(self.stack) - 1

    def end(self, name: str) -> None:
        name = local(self.stack.pop())
        if self.segment is not None:
            if len(self.stack) > self.segment_depth:
                self.segment.end(name)
                return
            key = self.lang if self.dialect == "tmx" else name
            text, self.segment = self.segment.value(), None
            if self.dialect == "tmx":
                self.variants.append((key, text))
            else:
                self.unit[key] = text
        elif name == "tu" and self.dialect == "tmx":
            self._tmx_unit()
        elif name == ("trans-unit" if self.dialect == "xliff1" else "segment") and self.dialect != "tmx":
            self._xliff_unit()
        elif name == "data" and self.data is not None:
            self.natives[self.data[0]] = "".join(self.data[1])
            self.data = None

    def text(self, data: str) -> None:
        if self.segment is not None:
            self.segment.text(data)
        elif self.data is not None:
            self.data[1].append(data)

    def _tmx_unit(self) -> None:
        self.counts.units += 1
        codes = [lang for lang, _ in self.variants]
        found = [pick_language(codes, lang) for lang in self.langs]
        if None in found or found[0] == found[1]:
            self.counts.skip("without both languages")
            if len(self.languages_seen) < 20:
                self.languages_seen.update(codes)
            return
        self._pair(self.variants[found[0]][1], self.variants[found[1]][1])

    def _xliff_unit(self) -> None:
        self.counts.units += 1
        if self.unit.get("state", "") in UNTRANSLATED[self.dialect]:
            self.counts.skip("not translated")
            return
        source, target = self.unit.get("source", ""), self.unit.get("target", "")
        self._pair(*((target, source) if self.swapped else (source, target)))

    def _pair(self, source: str, target: str) -> None:
        if not source.strip() or not target.strip():
            self.counts.skip("empty")
            return
        self.counts.pairs += 1
        self.pending.append((source, target))


def read_xml(
    path, langs: tuple[str, str], counts: Counts, *, markup: str, limits: Limits
) -> Iterator[tuple[str, str]]:
    """The pairs of a TMX or XLIFF file (plain or gzip), streamed: read a chunk, give its pairs."""
    document = _Document(path, langs, counts, tags=markup == "tags", limits=limits)
    total, n = 0, 0
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gz else open(path, "rb") as f:
            while True:
                chunk = f.read(CHUNK)
                total += len(chunk)
                n += chunk.count(b"\n")
                if total > limits.max_bytes:
                    raise MemoryFileError(
                        f"{path}: line {n + 1}: over {limits.max_bytes} bytes (Limits.max_bytes)"
                    )
                document.feed(chunk, final=not chunk)
                yield from document.pending
                document.pending.clear()
                if not chunk:
                    break
    except (OSError, EOFError, zlib.error) as e:
        raise MemoryFileError(f"{path}: line {n + 1}: cannot read it ({e})") from None
    if counts.pairs == 0 and document.languages_seen:
        raise MemoryFileError(
            f"{path}: no unit holds both {langs[0]} and {langs[1]} (languages found: "
            f"{', '.join(sorted(document.languages_seen))})"
        )


# ----------------------------------------------------------------------------- writing TMX
def tmx_segment(fragment: str) -> str:
    """A tagged segment (an XML fragment, as `read_memory` gives) as TMX ``<seg>`` content: its text,
    its paired tags as ``bpt``/``ept`` (matched by name, innermost first), the others as ``ph``."""
    tokens = list(scan(fragment))
    partner: dict[int, int] = {}
    open_tags: list[int] = []
    for i, t in enumerate(tokens):
        if t.kind != TAG_KIND or t.self_closing or not t.complete:
            continue
        if not t.closing:
            open_tags.append(i)
        elif open_tags and tokens[open_tags[-1]].name == t.name:
            j = open_tags.pop()
            partner[i], partner[j] = j, i
    out, number = [], {}
    for i, t in enumerate(tokens):
        if t.kind == "text":
            out.append(html.escape(html.unescape(t.raw), quote=False))
        elif i in partner and not t.closing:
            number[i] = len(number) + 1
            out.append(f'<bpt i="{number[i]}">{html.escape(t.raw, quote=False)}</bpt>')
        elif i in partner:
            out.append(f'<ept i="{number[partner[i]]}">{html.escape(t.raw, quote=False)}</ept>')
        else:
            out.append(f"<ph>{html.escape(t.raw, quote=False)}</ph>")
    return "".join(out)


def write_tmx(pairs, path: str | Path, *, src: str, tgt: str) -> int:
    """Write (source, target) tagged segments as a TMX 1.4 file (atomically); returns the units."""
    from ..atomic import write_text

    units = [
        f'<tu><tuv xml:lang="{src}"><seg>{tmx_segment(s)}</seg></tuv>'
        f'<tuv xml:lang="{tgt}"><seg>{tmx_segment(t)}</seg></tuv></tu>\n'
        for s, t in pairs
    ]
    head = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4">\n'
        f'<header creationtool="nmt" creationtoolversion="1" datatype="html" segtype="paragraph" '
        f'adminlang="en" srclang="{src}" o-tmf="nmt"/>\n<body>\n'
    )
    write_text(path, head + "".join(units) + "</body>\n</tmx>\n")
    return len(units)


# ----------------------------------------------------------------------------- a split's inputs
def gather_split(
    inputs: list[tuple[str, ...]], files: tuple[Path, Path], *, langs: tuple[str, str], markup: str
) -> list[dict]:
    """Write a split's inputs one after the other into ``files`` (source lines, target lines): text
    pairs (SRC TGT, aligned by line) and memories (one file, read for ``langs``; a line break inside
    a segment becomes a space). Returns what each input gave (meta.json["sources"])."""
    from ..atomic import sha256_file
    from .lines import read_pairs

    records = []
    with (
        open(files[0], "w", encoding="utf-8", newline="\n") as fs,
        open(files[1], "w", encoding="utf-8", newline="\n") as ft,
    ):
        for paths in inputs:
            if len(paths) == 2:
                n = 0
                for n, (s, t) in enumerate(read_pairs(*paths), start=1):
                    fs.write(s + "\n")
                    ft.write(t + "\n")
                records.append({"src": str(paths[0]), "tgt": str(paths[1]), "pairs": n})
                continue
            counts = Counts(memory_format(paths[0]) or "")
            for s, t in read_memory(paths[0], src=langs[0], tgt=langs[1], markup=markup, counts=counts):
                fs.write(LINE_BREAK.sub(" ", s) + "\n")
                ft.write(LINE_BREAK.sub(" ", t) + "\n")
            record = {"memory": str(paths[0]), "format": counts.format, "markup": markup}
            record.update(units=counts.units, pairs=counts.pairs, skipped=counts.skipped)
            records.append({**record, "sha256": sha256_file(paths[0])})
    return records


LINE_BREAK = re.compile(r"\r?\n")
