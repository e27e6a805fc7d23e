"""Real text in, real text out: paragraphs, ALL CAPS, long sentences and inline markup, above the
search (which translates sentences). nmt.realtext.pipeline runs it for every door:

    from nmt import Translator
    t = Translator.load("runs/demo/average")
    t.translate(["Two dogs play. A MAN IS RIDING A BIKE."])
    # ['Zwei Hunde spielen. EIN MANN FÄHRT FAHRRAD.']
    t.translate(['<b>Two dogs</b> play.'], text=TextOptions(format="html"))

Each text goes through (every step switchable, TextOptions):
1. markup (``format`` "html" / "xml"): the tags taken out, the text runs translated, the tags
   projected back (nmt.realtext.markup);
2. sentences (``split``): each line split into sentences (nmt.realtext.segment), joined back with
   every space, line break and blank line kept;
3. capitals (``recase``): an ALL-CAPS or Title-Case sentence translated in sentence case and its
   output recased (nmt.realtext.casing);
4. long sentences (``max_words``, ``part_words``): a sentence of more words cut at clauses into
   parts, each translated, the cut reported (TextTranslation.cuts). By default a sentence longer than
   any the model learned from is cut into parts of at most the 99th percentile of its training
   sources' lengths (both in words, recorded by `nmt prepare`): shorter sentences, which the model
   has seen, are translated whole.
All the sentences of all the texts go to the model as one batch. ``TextJob`` plans it in two
steps: the units to translate, then the texts from their translations (nmt.realtext.pipeline.Plan).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field, replace
from typing import Callable

from ..data.lines import clean_line
from ..infer.results import TranslateError
from ..infer.search import reading_order
from .casing import NORMAL, case_of, lower_first, normal_case, recase
from .markup import FORMATS, Document, Projected, Run, parse, render_run
from .protect import Restored, Span, find_spans, hide, restore
from .segment import Cut, Parts, cut_spans, part_output, split_text
from .spans import Pair, char_pairs, decoded_spans, monotone_pairs, piece_spans, shift

# max_words of a model whose data predates the record of its training sentences' lengths
UNRECORDED_MAX_WORDS = 40


@dataclass(frozen=True)
class TextOptions:
    """How real text is handled above the search. ``format``: "text", "html" or "xml" (tags
    projected); ``split``: sentences split within lines (False: each line is one sentence);
    ``recase``: ALL-CAPS / Title-Case sentences translated in normal case and recased;
    ``max_words``: longer sentences cut at clauses (0: never; None: the model's, ``for_model``),
    into parts of at most ``part_words`` (None: the model's, at most max_words);
    ``language``: the source's ISO 639 code, for the sentence splitter's rules (None: the
    checkpoint's source language, else "en"); ``protect``: numbers, URLs, emoji, placeholders and
    the like come out as written (nmt.realtext.protect)."""

    format: str = "text"
    split: bool = True
    recase: bool = True
    max_words: int | None = None
    part_words: int | None = None
    language: str | None = None
    protect: bool = True

    def __post_init__(self):
        if self.format not in FORMATS:
            raise TranslateError(f"format {self.format!r}: choose one of {', '.join(FORMATS)}")
        if self.max_words is not None and (not isinstance(self.max_words, int) or self.max_words < 0):
            raise TranslateError(f"max_words {self.max_words!r}: must be an integer >= 0 (0: never cut)")
        if self.part_words is not None and (not isinstance(self.part_words, int) or self.part_words < 1):
            raise TranslateError(f"part_words {self.part_words!r}: must be an integer >= 1")

    def for_model(self, translator) -> TextOptions:
        """These options with what is None made the translator's model's (its
        TextTranslator.source_words): ``max_words`` the longest sentence it learned from and
        ``part_words`` their 99th percentile; where its checkpoint does not record them, max_words
        UNRECORDED_MAX_WORDS. A max_words given, with part_words None, makes parts of at most it."""
        words = getattr(translator, "source_words", None)
        max_words, part_words = self.max_words, self.part_words
        if max_words is None:
            max_words = UNRECORDED_MAX_WORDS if words is None else words.longest
            if part_words is None and words is not None and words.p99:
                part_words = words.p99
        return replace(self, max_words=max_words, part_words=min(part_words or max_words, max_words) or 1)

    @property
    def plain(self) -> bool:
        """True when nothing is changed: each line translated as one sentence, as it is."""
        return (
            self.format == "text"
            and not self.split
            and not self.recase
            and self.max_words == 0
            and not self.protect
        )


@dataclass
class UnitOutput:
    """The model's translation of one sentence (or part) and, for markup, the character pairs
    (nmt.realtext.spans) aligning it with its source (None: not known; a monotone guess is used)."""

    text: str
    pairs: list[Pair] | None = None
    fallback: list[Pair] = field(default_factory=list)  # Projected.fallback's, of this unit


@dataclass
class TextResult:
    """A text's translation, the sentences cut because they were too long (Cut.message), and the
    protected spans put back or lost (nmt.realtext.protect)."""

    text: str
    cuts: list[Cut] = field(default_factory=list)
    spans: Restored = field(default_factory=Restored)


@dataclass
class SentencePlan:
    """One sentence: its case, and its parts (character spans) with their unit numbers."""

    source: str
    case: str
    spans: list[tuple[int, int]]
    units: list[int]


@dataclass
class Paragraph:
    """A text (or a markup run) as sentences and the gaps between them."""

    parts: Parts
    sentences: list[SentencePlan]


class TextJob:
    """The units (sentences or parts of sentences, in normal case) that ``texts`` give the model,
    and ``finish``: the texts from their translations. ``keep_capital``: nmt.realtext.casing's
    (a word kept capitalised in normal case); ``lower_known``: a part of a cut sentence that starts
    in lower case gets its translation's first word in lower case where this says the model
    writes that word so (casing.known_lower). ``options``: made a model's by
    TextOptions.for_model(translator); what is None in them takes the values of a model that records
    no lengths (``for_model(None)``)."""

    def __init__(
        self,
        texts: list[str],
        options: TextOptions | None = None,
        *,
        keep_capital: Callable[[str], bool] | None = None,
        lower_known: Callable[[str], bool] | None = None,
    ):
        options = (options or TextOptions()).for_model(None)
        self.options, self.keep_capital, self.lower_known = options, keep_capital, lower_known
        self.units: list[str] = []
        self.unit_text: list[int] = []  # the text each unit comes from
        self.documents: list[Document | None] = []
        self.paragraphs: list[list[Paragraph]] = []
        self.cuts: list[list[Cut]] = []
        self.spans: list[list[list[Span]]] = []  # per text, per paragraph (a markup run)
        self.align_units: set[int] = set()  # units holding protected spans (aligned to restore them)
        self.points: list[list[tuple[int, str]]] = []  # per text, the spans the model is not given
        for text in texts:
            self.cuts.append([])
            self._sentences = 0  # in this text, before the one being planned
            if options.format == "text":
                self.documents.append(None)
                hidden = hide(text, find_spans(text) if options.protect else [])
                paragraphs, self.points = [hidden.text], self.points + [hidden.points]
                self.spans.append([[]])
            else:
                doc = parse(text, html=options.format == "html")
                self.documents.append(doc)
                paragraphs = [r.text for r in doc.runs]
                self.spans.append([find_spans(p) if options.protect else [] for p in paragraphs])
                self.points.append([])
            self.paragraphs.append(
                [
                    self._paragraph(p, self.cuts[-1], s + [Span(k, k, "") for k, _ in self.points[-1]])
                    for p, s in zip(paragraphs, self.spans[-1])
                ]
            )

    @property
    def needs_alignment(self) -> bool:
        """True when tags are projected (the model's alignment is then wanted)."""
        return self.options.format != "text"

    def _paragraph(self, text: str, cuts: list[Cut], protected: list[Span]) -> Paragraph:
        o = self.options
        parts = split_text(text, language=o.language or "en", split=o.split)
        plans = []
        at = len(parts.gaps[0])
        protected = sorted(protected, key=lambda s: (s.start, s.end))
        starts = [s.start for s in protected]
        for sentence, gap in zip(parts.sentences, parts.gaps[1:]):
            case = case_of(sentence) if o.recase else NORMAL
            source = normal_case(sentence, case, keep_capital=self.keep_capital)
            spans = cut_spans(source, o.max_words, o.part_words)
            if len(spans) > 1:
                cuts.append(
                    Cut(
                        sentence=self._sentences,
                        words=len(sentence.split()),
                        parts=len(spans),
                        max_words=o.max_words,
                        part_words=min(o.part_words or o.max_words, o.max_words),
                        at=tuple(source[a:b].split()[0] for a, b in spans[1:]),
                    )
                )
            self._sentences += 1
            units = list(range(len(self.units), len(self.units) + len(spans)))
            if protected:
                self.align_units.update(
                    u for u, (a, b) in zip(units, spans) if touched(protected, starts, at + a, at + b)
                )
            at += len(sentence) + len(gap)
            self.units += [source[a:b] for a, b in spans]
            self.unit_text += [len(self.cuts) - 1] * len(spans)
            plans.append(SentencePlan(source, case, spans, units))
        return Paragraph(parts, plans)

    def finish(self, outputs: list[UnitOutput]) -> list[TextResult]:
        """The translated texts, from the translations of ``units`` in order."""
        if len(outputs) != len(self.units):
            raise ValueError(f"{len(outputs)} translations for {len(self.units)} units")
        results = []
        for doc, paragraphs, cuts, spans, points in zip(
            self.documents, self.paragraphs, self.cuts, self.spans, self.points
        ):
            done = [self._join(p, outputs) for p in paragraphs]
            if doc is None:
                run = Run(paragraphs[0].parts.join(paragraphs[0].parts.sentences), [])
                projected, restored = restore(run, done[0], spans[0], points)
                results.append(TextResult(projected.text, cuts, restored))
            else:
                text, restored = render_restored(doc, done, spans)
                results.append(TextResult(text, cuts, restored))
        return results

    def _join(self, paragraph: Paragraph, outputs: list[UnitOutput]) -> Projected:
        """A paragraph's translation (its gaps kept) and its character pairs with its source."""
        gaps = paragraph.parts.gaps
        text, pairs, fallback = [gaps[0]], [], []
        src_at = tgt_at = len(gaps[0])
        for plan, gap in zip(paragraph.sentences, gaps[1:]):
            sentence, sentence_pairs, sentence_fallback = self._sentence(plan, outputs)
            pairs += shift(sentence_pairs, src_at, tgt_at)
            fallback += shift(sentence_fallback, src_at, tgt_at)
            text += [sentence, gap]
            src_at += len(plan.source) + len(gap)
            tgt_at += len(sentence) + len(gap)
        return Projected("".join(text), pairs, fallback)

    def _sentence(self, plan: SentencePlan, outputs: list[UnitOutput]) -> tuple[str, list[Pair], list[Pair]]:
        """A sentence's translation (its parts joined, recased) and its pairs (and fallback pairs)
        with the sentence."""
        pieces, pairs, fallback, at = [], [], [], 0
        for k, ((a, b), u) in enumerate(zip(plan.spans, plan.units)):
            out = outputs[u]
            src = plan.source[a:b]
            tgt = part_output(src, out.text, last=k == len(plan.spans) - 1)
            if k > 0 and src[:1].islower():
                tgt = lower_first(tgt, self.lower_known)
            if not tgt:
                continue
            if pieces:
                at += 1  # the space before this part
            lead = len(out.text) - len(out.text.lstrip())
            unit_pairs = out.pairs if out.pairs is not None else monotone_pairs(src, out.text)
            for kept, given in ((pairs, unit_pairs), (fallback, out.fallback)):
                kept += [p for p in shift(given, a, at - lead) if p[2] >= at and p[3] <= at + len(tgt)]
            pieces.append(tgt)
            at += len(tgt)
        return recase(" ".join(pieces), plan.case), pairs, fallback


def touched(spans: list[Span], starts: list[int], start: int, end: int) -> bool:
    """True when one of ``spans`` (sorted, not overlapping; ``starts`` theirs) overlaps [start,
    end): only the last span before ``start`` and the first from it can (bisection, not a scan)."""
    k = bisect_left(starts, start)
    return any(overlaps(s, start, end) for s in spans[max(k - 1, 0) : k + 1])


def overlaps(span: Span, start: int, end: int) -> bool:
    """True when a span lies in [start, end) in part, or a point (start == end) in [start, end]."""
    if span.start == span.end:
        return start <= span.start <= end
    return start < span.end and span.start < end


def render_restored(doc: Document, done: list[Projected], spans: list[list[Span]]) -> tuple[str, Restored]:
    """A document with each run replaced by its translation, its lost spans put back."""
    out, total, runs = [], Restored(), iter(zip(done, spans))
    for piece in doc.pieces:
        if isinstance(piece, str):
            out.append(piece)
            continue
        projected, restored = restore(piece, *next(runs))
        out.append(render_run(piece, projected))
        total.restored += restored.restored
    return "".join(out), total


# ----------------------------------------------------------------------------- with a Translator
def unit_output(
    translator,
    source: str,
    translation,
    piece_pairs: list[tuple[int, int]] | None,
    *,
    skip: int = 0,
    fallback: list[tuple[int, int]] | None = None,
) -> UnitOutput:
    """A Translation of ``source`` (what the model read) with its piece alignment
    (nmt.infer.attention_maps, reading order) and ``fallback`` pairs as character pairs, less the
    first ``skip`` characters of the source (a target-language tag); without pairs when its pieces
    cannot be traced to characters."""
    if piece_pairs is None or clean_line(source) != source:
        return UnitOutput(translation.text, None)
    text, tgt_spans = decoded_spans(translator.tgt_sp, reading_order(translator.model, translation.tokens))
    if text != translation.text:
        return UnitOutput(translation.text, None)
    src_spans = piece_spans(translator.sp, source)

    def chars(pairs):
        return [
            (a - skip, b - skip, c, d) for a, b, c, d in char_pairs(src_spans, tgt_spans, pairs) if a >= skip
        ]

    return UnitOutput(text, chars(piece_pairs), chars(fallback or []))


# the width of the diagonal prior on the cross-attention that places tags (attention_maps.align),
# chosen on the first half of LibreOffice help en-de valid.tagged with the reference forced as the
# output (benchmarks/real_text.py --parts 3o; a Multi30k model adapted to LibreOffice for 700
# updates); its figures on the held-out second half are in results/real-text/README.md.
PROJECTION_DIAGONAL = 0.05
