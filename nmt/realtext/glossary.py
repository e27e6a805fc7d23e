"""Glossaries: where a source term occurs in a sentence, its target term must appear in the
translation (the lexical constraints of nmt.infer.constraints), with real-text handling on.

    glossary = read_glossary("terms.tsv")          # SOURCE<TAB>TARGET per line; # comments
    glossary.targets_in("Open the Navigator.")    # ['Navigator'] when "navigator" is a term

A term matches whole words, case-insensitively; where terms overlap the longest wins. Each
sentence (or part of a cut sentence) gets the target terms of the source terms it holds, each once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..infer.results import TranslateError


@dataclass(frozen=True)
class Glossary:
    """Pairs of (source term, target term); ``where[i]``: where pair i was read ("FILE:LINE")."""

    pairs: tuple[tuple[str, str], ...]
    where: tuple[str, ...] = ()
    pattern: re.Pattern | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        for k, (src, tgt) in enumerate(self.pairs):
            at = self.where[k] if k < len(self.where) else f"pair {k + 1}"
            if not isinstance(src, str) or not isinstance(tgt, str) or not src.strip() or not tgt.strip():
                raise TranslateError(f"glossary {at}: a source term and a target term, both non-empty")
            try:
                (src + tgt).encode("utf-8")
            except UnicodeEncodeError:
                raise TranslateError(
                    f"glossary {at}: a term holds a lone surrogate, not Unicode text"
                ) from None
        terms = sorted({src.strip().casefold() for src, _ in self.pairs}, key=len, reverse=True)
        alternatives = "|".join(re.escape(t) for t in terms)
        pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE) if terms else None
        object.__setattr__(self, "pattern", pattern)

    @property
    def targets(self) -> dict[str, str]:
        """Source term (case-folded) -> target term; a term given twice keeps its last target."""
        return {src.strip().casefold(): tgt.strip() for src, tgt in self.pairs}

    def targets_in(self, text: str) -> list[str]:
        """The target terms of the source terms ``text`` holds, in order, each once."""
        if self.pattern is None:
            return []
        targets = self.targets
        found = [targets[m.group(0).casefold()] for m in self.pattern.finditer(text)]
        return list(dict.fromkeys(found))

    def where_of(self, target: str) -> str:
        """Where the pair of a target term was read (for messages)."""
        for k, (_, tgt) in enumerate(self.pairs):
            if tgt.strip() == target and k < len(self.where):
                return self.where[k]
        return "(given)"


def glossary_of(pairs) -> Glossary:
    """A Glossary of ``pairs``: a dict {source: target} or a list of [source, target] pairs
    (TranslateError naming the pair that is neither)."""
    if isinstance(pairs, dict):
        pairs = list(pairs.items())
    if not isinstance(pairs, (list, tuple)):
        raise TranslateError(
            "glossary: a list of [source term, target term] pairs or a {source: target} object"
        )
    for k, p in enumerate(pairs):
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise TranslateError(f"glossary pair {k + 1}: expected [source term, target term], got {p!r}")
    return Glossary(tuple((p[0], p[1]) for p in pairs))


def read_glossary(path: str | Path) -> Glossary:
    """A TSV file: SOURCE<TAB>TARGET per line (blank lines and lines starting with # skipped);
    TranslateError naming the file and line of anything else."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise TranslateError(f"{path}: cannot read the glossary ({e})") from None
    pairs, where = [], []
    for n, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) != 2 or not cells[0].strip() or not cells[1].strip():
            raise TranslateError(f"{path}:{n}: expected SOURCE<TAB>TARGET, got {line[:80]!r}")
        pairs.append((cells[0], cells[1]))
        where.append(f"{path}:{n}")
    return Glossary(tuple(pairs), tuple(where))


def merged(*glossaries: Glossary | None) -> Glossary | None:
    """One glossary of several (a later one's pair wins where a source term repeats); None: none."""
    given = [g for g in glossaries if g is not None]
    if not given:
        return None
    return Glossary(
        tuple(p for g in given for p in g.pairs),
        tuple(w for g in given for w in (g.where or ("(given)",) * len(g.pairs))),
    )
