"""One request, one pipeline: what every door runs (`nmt translate`, ``Translator.translate``,
nmt's POST /translate and LibreTranslate's /translate).

    request = TranslationRequest(["Two dogs play. A MAN RUNS."], text=TextOptions(format="text"))
    plan = Plan(request, translator)            # checked; the units the model reads
    results = search_units(translator, plan)    # the server: its batcher instead
    plan.finish(results)                        # -> [TextTranslation(text, score, nbest, ...)]
    run_plan(translator, plan)                  # search and finish; translate_request: all three

A door builds one ``TranslationRequest`` from its own syntax (arguments, keywords, JSON, a form),
calls the pipeline, and maps ``TranslateError`` to its own form (exit 2, 422, 400); nothing else.
``Plan`` checks the request against the translator once (the target language against the
checkpoint's languages, the options together), plans the real text (nmt.realtext.job:
markup, sentences, capitals, long sentences), puts the target-language tag in front of each
unit, and after the search puts the texts back together: the best, and with ``search.nbest`` > 1
the n-best texts, the text with each sentence's i-th hypothesis (its best where it has fewer),
repeats dropped, every format's tags projected onto each.

Sentence level (``sentence_level``): an alignment, prefixes, constraints or sampling ask for one
output per text as the model gave it, so each text is one unit, as given (format "text" only).
TextOptions that change nothing (``TextOptions.plain``) still keep each line of a text apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ..data.multilingual import check_target
from ..infer.guards import retry_options
from ..infer.mbr import MBR, mbr_results
from ..infer.options import SearchOptions
from ..infer.results import TranslateError, Translation, check_strings
from .casing import fewer_pieces, known_lower
from .glossary import Glossary
from .job import PROJECTION_DIAGONAL, TextJob, TextOptions, unit_output
from .quality import (
    LocatedWord,
    QualityOptions,
    SentenceQuality,
    better,
    judge,
    locate,
    score_results,
    suspects,
    text_quality,
)
from .segment import Cut


@dataclass(frozen=True)
class TranslationRequest:
    """What to translate and how, whatever door it came through. ``texts``: the texts;
    ``text``: how real text is handled (nmt.realtext.job.TextOptions); ``search``: how to search
    (its ``nbest``: translations per text); ``target_lang``: the target of a model of several (its
    tag in front of each sentence; checked against the checkpoint); ``alignment``: each text's
    piece alignment (sentence level); ``mbr`` / ``rerank``: the choice among the beam's n-best;
    ``prefix[i]`` / ``constraints[i]``: what output i starts with / contains (sentence level);
    ``glossary``: target terms each sentence must hold where it holds their source terms
    (nmt.realtext.glossary; real text stays on); ``quality``: confidences and guards
    (nmt.realtext.quality)."""

    texts: tuple[str, ...]
    text: TextOptions = TextOptions()
    search: SearchOptions = SearchOptions()
    target_lang: str | None = None
    alignment: bool = False
    mbr: MBR | None = None
    rerank: object = None  # nmt.infer.rerank.Rerank
    prefix: tuple[str, ...] | None = None
    constraints: tuple[tuple[str, ...], ...] | None = None
    glossary: Glossary | None = None
    quality: QualityOptions = QualityOptions()

    def __post_init__(self):
        texts = self.texts
        check_strings(texts, item="text", expected="texts: expected a str or a list of str")
        object.__setattr__(self, "texts", tuple(texts))
        if self.prefix is not None:
            check_strings(
                self.prefix, item="prefix", expected="prefix: expected a list of str (one per sentence)"
            )
        for name in ("prefix", "constraints"):
            items = getattr(self, name)
            if items is not None:
                object.__setattr__(self, name, tuple(items))
                if len(items) != len(texts):
                    raise TranslateError(f"{name}: {len(items)} given for {len(texts)} texts")
        self.check_choice()
        if self.sentence_level and self.text.format != "text":
            raise TranslateError(
                f"format {self.text.format!r}: not with {', '.join(self.per_text)} (one output per text)"
            )

    def check_choice(self) -> None:
        """TranslateError for an MBR or reranked choice that the search options leave no room for."""
        s = self.search
        for name, given in (("mbr", self.mbr), ("rerank", self.rerank)):
            if given is None:
                continue
            if s.sampling is not None or s.beam < 2:
                raise TranslateError(
                    f"{name} chooses among the beam's n-best: needs beam >= 2 and no sampling "
                    f"(got beam {s.beam}{', sampling' if s.sampling is not None else ''})"
                )
        if self.mbr is not None and self.rerank is not None:
            raise TranslateError("choose one of mbr and rerank")
        if self.mbr is not None and s.nbest != 1:
            raise TranslateError(f"mbr chooses one translation: needs nbest 1 (got nbest {s.nbest})")

    @property
    def per_text(self) -> list[str]:
        """The options asking for one output per text as the model gave it."""
        given = {
            "alignment": self.alignment,
            "prefix": self.prefix is not None,
            "constraints": self.constraints is not None,
            "sampling": self.search.sampling is not None,
        }
        return [name for name, on in given.items() if on]

    @property
    def sentence_level(self) -> bool:
        """Each text one unit, as given (see the module's docstring)."""
        return bool(self.per_text)


@dataclass
class Alternative:
    """One of a text's translations and its score (the mean of its sentences'); ``alignment``: its
    piece alignment (sentence level, asked for)."""

    text: str
    score: float
    alignment: list[tuple[int, int]] | None = None


@dataclass
class TextTranslation:
    """A text's translation: the best ``text`` and its ``score``; ``nbest``: up to search.nbest
    translations, best first; ``alignment``: the best one's piece alignment (asked for);
    ``cuts``: sentences cut at clauses; ``truncated``: pieces of each unit cut to the model's
    positions; ``confidence``, ``flags``, ``sentences``, ``words``: how far to trust the best
    (nmt.realtext.quality; None / empty where not asked); ``restored``: protected spans the
    model lost, put back (nmt.realtext.protect)."""

    text: str
    score: float
    nbest: list[Alternative]
    alignment: list[tuple[int, int]] | None = None
    cuts: list[Cut] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)
    confidence: float | None = None
    flags: list[str] = field(default_factory=list)
    sentences: list[SentenceQuality] = field(default_factory=list)
    words: list[LocatedWord] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # protected spans put back (nmt.realtext.protect)


def translator_languages(translator) -> dict:
    """What a translator's checkpoint records of its languages (src_lang, tgt_lang, tgt_langs)."""
    data = getattr(translator, "data", None) or {}
    return {k: data.get(k) for k in ("src_lang", "tgt_lang", "tgt_langs")}


class Plan:
    """A request checked against a translator and planned: ``inputs``, what the model reads (the
    units with the target tag), and ``finish``, the TextTranslations from their translations."""

    def __init__(self, request: TranslationRequest, translator):
        self.request = request
        languages = translator_languages(translator)
        try:
            self.tag = check_target(request.target_lang, languages)
        except ValueError as e:
            raise TranslateError(f"target language: {e}") from None
        options = request.text
        if options.language is None:  # the splitter's rules: the checkpoint's source language
            source = languages["src_lang"]
            options = replace(options, language=source if isinstance(source, str) else "en")
        self.job: TextJob | None = None
        if request.sentence_level:
            self.units = list(request.texts)
            self.unit_text = list(range(len(request.texts)))
        else:
            sp = getattr(translator, "sp", None)
            self.job = TextJob(
                list(request.texts),
                options.for_model(translator),
                keep_capital=None if sp is None else fewer_pieces(sp),
                lower_known=None if sp is None else known_lower(sp),
            )
            self.units, self.unit_text = self.job.units, self.job.unit_text
        self.inputs = [f"{self.tag} {u}" if self.tag and u.strip() else u for u in self.units]
        self.translator = translator
        self.constraints = unit_constraints(request, self.units, translator)

    @property
    def search(self) -> SearchOptions:
        """The search the units need: the request's, with the beam's n-best for a choice among it."""
        r = self.request
        return r.search.replace(nbest=r.search.beam) if r.mbr or r.rerank else r.search

    @property
    def markup(self) -> bool:
        """True when tags are projected onto the output (format html / xml)."""
        return self.job is not None and self.job.needs_alignment

    @property
    def protected_units(self) -> set[int]:
        """The units holding protected spans (nmt.realtext.protect): aligned to restore them."""
        return set() if self.job is None else self.job.align_units

    @property
    def alignment_diagonal(self) -> float | None:
        """The alignment wanted after the search: tags or spans placed (nmt.realtext.job's
        prior), the piece alignment asked for (fairseq's plain argmax: None)."""
        return PROJECTION_DIAGONAL if self.markup or self.protected_units else None

    @property
    def needs_alignment(self) -> bool:
        return self.request.alignment or self.markup or bool(self.protected_units)

    @property
    def aligned_units(self) -> set[int] | None:
        """The units whose translations are aligned (None: all)."""
        return None if self.request.alignment or self.markup else self.protected_units

    @property
    def coverage(self) -> bool:
        """True when the omission guard reads the attention (the torch engine's)."""
        return self.request.quality.guards and getattr(self.translator, "engine", None) == "torch"

    @property
    def retries(self) -> bool:
        """True when a flagged unit is searched once more (not with prefixes or sampling)."""
        r = self.request
        return r.quality.guards and r.prefix is None and r.search.sampling is None

    def retry_groups(self, units: list[int], qualities) -> list[tuple[SearchOptions, list[int]]]:
        """The flagged ``units`` by the search each gets once more (nmt.infer.guards.retry_options)."""
        torch_engine = getattr(self.translator, "engine", None) == "torch"
        groups: dict[SearchOptions, list[int]] = {}
        for u in units:
            options = retry_options(self.request.search, qualities[u].flags, torch_engine=torch_engine)
            groups.setdefault(options, []).append(u)
        return list(groups.items())

    def take_retries(self, results, units: list[int], again, qualities) -> None:
        """Each retried unit's new best where it is better (nmt.realtext.quality.better)."""
        for u, r in zip(units, again):
            if not r:
                continue
            r[0].retried = results[u][0].retried = qualities[u].retried = True
            if better(self.judged(u, r[0]), qualities[u]):
                results[u] = [r[0]] + results[u][1:]

    def finish(
        self, results: list[list[Translation]], truncated: list[tuple[int, int]] = ()
    ) -> list[TextTranslation]:
        """The TextTranslations of the units' n-best (best first; ``.alignment`` on each, from
        ``align_results``, where tags are projected); ``truncated``: (unit, pieces) cut to the
        model's positions."""
        if len(results) != len(self.units):
            raise ValueError(f"{len(results)} results for {len(self.units)} units")
        if self.job is None:
            out = [self.sentence(r) for r in results]
        else:
            out = self.texts(results)
        for unit, n in truncated:
            out[self.unit_text[unit]].truncated.append(n)
        if self.request.quality.scores:
            self.add_quality(out, self.qualities(results))
        return out

    def qualities(self, results: list[list[Translation]]) -> list[SentenceQuality | None]:
        """Each unit's best translation judged (None: an empty unit, or not scored)."""
        return [
            self.judged(u, r[0]) if r and r[0].log_probs and self.units[u].strip() else None
            for u, r in enumerate(results)
        ]

    def judged(self, unit: int, t: Translation) -> SentenceQuality:
        """Unit ``unit``'s translation ``t`` judged, once (kept on ``t``: the retry's choice and
        ``finish`` read the same)."""
        quality = getattr(t, "judged", None)
        if quality is None:
            quality = t.judged = judge(self.translator, self.inputs[unit], t, tag=self.tag)
        return quality

    def add_quality(self, out: list[TextTranslation], qualities: list[SentenceQuality | None]) -> None:
        """Each text's confidence, flags, sentences and located words from its units'."""
        per_text: list[list[SentenceQuality]] = [[] for _ in out]
        for u, q in enumerate(qualities):
            if q is not None:
                per_text[self.unit_text[u]].append(q)
        options = self.request.quality
        for t, sentences in zip(out, per_text):
            if not options.guards:
                for q in sentences:
                    q.flags = []
            if not options.confidence:
                for q in sentences:
                    q.confidence, q.words = None, []
            t.confidence, t.flags = text_quality(sentences)
            t.sentences, t.words = (
                sentences,
                locate(t.text, sentences, markup=self.request.text.format != "text"),
            )

    def sentence(self, nbest: list[Translation]) -> TextTranslation:
        """A text translated as one unit: its n-best as the model gave them."""
        if not nbest:  # nothing left to finish (an allowed-token mask): an empty output
            return TextTranslation("", 0.0, [Alternative("", 0.0)])
        aligned = self.request.alignment
        alternatives = [
            Alternative(t.text, t.score, getattr(t, "alignment", None) if aligned else None) for t in nbest
        ]
        best = alternatives[0]
        return TextTranslation(best.text, best.score, alternatives, alignment=best.alignment)

    def texts(self, results: list[list[Translation]]) -> list[TextTranslation]:
        """Real text put back together: per text its best and its n-best (see the module's docstring)."""
        n = max((len(r) for r in results), default=1) if self.request.search.nbest > 1 else 1
        scores: list[list[list[float]]] = [[[] for _ in range(n)] for _ in self.request.texts]
        rendered = []
        for i in range(n):
            picks = [r[min(i, len(r) - 1)] if r else Translation("", 0.0, []) for r in results]
            for k, t in zip(self.unit_text, picks):
                scores[k][i].append(t.score)
            outputs = [self.unit_output(u, t) for u, t in enumerate(picks)]
            rendered.append(self.job.finish(outputs))
        out = []
        for k in range(len(self.request.texts)):
            mean = [sum(s) / len(s) if s else 0.0 for s in scores[k]]
            nbest = unique([Alternative(rendered[i][k].text, mean[i]) for i in range(n)])
            best = nbest[0]
            spans = rendered[0][k].spans
            out.append(
                TextTranslation(
                    best.text,
                    best.score,
                    nbest,
                    cuts=rendered[0][k].cuts,
                    restored=spans.restored,
                )
            )
        return out

    def unit_output(self, unit: int, t: Translation):
        """A unit's translation with its character pairs (the model input's, the tag's left out)."""
        placed = self.markup or unit in self.protected_units
        pairs = getattr(t, "alignment", None) if placed else None
        fallback = getattr(t, "fallback_alignment", None) if placed else None
        skip = len(self.inputs[unit]) - len(self.units[unit])
        return unit_output(self.translator, self.inputs[unit], t, pairs, skip=skip, fallback=fallback)


def unit_constraints(request: TranslationRequest, units: list[str], translator) -> list | None:
    """Each unit's phrases: the request's own (sentence level, one unit per text) and the target
    terms of the glossary's source terms it holds; None when there are none. TranslateError where
    the engine cannot search with them or a target term holds characters the vocabulary lacks."""
    own = request.constraints
    glossary = request.glossary
    if own is None and glossary is None:
        return None
    phrases = list(own) if own is not None else [[] for _ in units]
    if glossary is not None:
        for i, unit in enumerate(units):
            if isinstance(phrases[i], (list, tuple)):  # else encode_constraints names the bad item
                phrases[i] = list(phrases[i]) + [t for t in glossary.targets_in(unit) if t not in phrases[i]]
    if own is None and not any(phrases):
        return None
    if getattr(translator, "engine", None) != "torch":
        raise TranslateError(
            "constraints and glossaries: the torch engine's beam search only (not CTranslate2)"
        )
    if glossary is not None:
        check_terms(glossary, phrases, translator)
    return phrases


def check_terms(glossary: Glossary, phrases: list[list[str]], translator) -> None:
    """TranslateError naming the glossary's line of a target term the vocabulary cannot write (encoded
    as target text is, with the translator's ``tgt_sp``)."""
    from ..vocab import UNK

    sp = getattr(translator, "tgt_sp", None)
    used = {t for p in phrases if isinstance(p, list) for t in p}
    terms = sorted(used & {t.strip() for _, t in glossary.pairs})
    for term, ids in zip(terms, sp.encode(terms) if sp is not None and terms else []):
        if UNK in ids:
            raise TranslateError(
                f"glossary {glossary.where_of(term)}: target term {term!r} holds characters the "
                "vocabulary does not have"
            )


def unique(alternatives: list[Alternative]) -> list[Alternative]:
    """Alternatives without repeated texts (the first kept)."""
    seen: set[str] = set()
    return [a for a in alternatives if not (a.text in seen or seen.add(a.text))]


# ----------------------------------------------------------------------------- with a translator
def align_results(
    translator, inputs: list[str], results: list[list[Translation]], *, diagonal, only: set[int] | None = None
) -> None:
    """Sets ``.alignment`` on every translation of ``results`` (the n-best of ``inputs``; ``only``:
    of those units): the piece alignment from the model's cross-attention
    (nmt.infer.attention_maps.align with the prior ``diagonal``), and with a prior
    ``.fallback_alignment`` (attention_maps.unaligned_sources: where a tag around a piece the
    alignment left out goes); the torch engine only (others: none, a monotone guess places tags)."""
    if getattr(translator, "engine", None) != "torch":
        return
    from ..infer.attention_maps import align, align_with_fallback

    sources, _ = translator.encode(inputs)
    for u, (src, nbest) in enumerate(zip(sources, results)):
        if only is not None and u not in only:
            continue
        for t in nbest:
            if diagonal is None:  # the alignment asked for: fairseq's
                t.alignment = align(translator.model, src, t.tokens) if src else []
            else:  # placing tags or spans: the prior's, and a place for the pieces it leaves out
                t.alignment, t.fallback_alignment = align_with_fallback(
                    translator.model, src, t.tokens, diagonal=diagonal
                )


def search_units(
    translator,
    plan: Plan,
    *,
    batch_tokens: int = 2048,
    on_truncate: Callable[[int, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[Translation]]:
    """The n-best of a plan's inputs on ``translator`` (its prefixes and constraints, the MBR or
    reranked choice, the alignments it needs); ``on_truncate(unit, pieces)``, ``on_batch(n)``: as
    Translator.translate_nbest's."""
    r = plan.request
    extra = {} if plan.constraints is None else {"constraints": list(plan.constraints)}
    results = translator.translate_nbest(
        plan.inputs,
        plan.search,
        batch_tokens=batch_tokens,
        on_truncate=on_truncate or (lambda i, n: None),
        on_batch=on_batch,
        prefix=None if r.prefix is None else list(r.prefix),
        **extra,
    )
    if r.mbr is not None:
        results = mbr_results(results, r.mbr)
    elif r.rerank is not None:  # the beam's n-best reordered; nbest K keeps the first K
        reranked = translator.rerank(
            plan.inputs, results, r.rerank, alpha=r.search.penalty, batch_tokens=batch_tokens
        )
        results = [x[: r.search.nbest] for x in reranked]
    if r.quality.scores:
        score_results(translator, plan.inputs, results, coverage=plan.coverage)
        if plan.retries:
            retry_suspects(translator, plan, results, batch_tokens=batch_tokens)
    if plan.needs_alignment:
        align_results(
            translator, plan.inputs, results, diagonal=plan.alignment_diagonal, only=plan.aligned_units
        )
    return results


def retry_suspects(translator, plan: Plan, results: list[list[Translation]], *, batch_tokens: int) -> None:
    """The flagged units of ``results`` (scored) searched once more; the better kept."""
    qualities = plan.qualities(results)
    for options, units in plan.retry_groups(suspects(qualities), qualities):
        extra = {} if plan.constraints is None else {"constraints": [plan.constraints[u] for u in units]}
        inputs = [plan.inputs[u] for u in units]
        again = translator.translate_nbest(
            inputs, options, batch_tokens=batch_tokens, on_truncate=lambda i, n: None, **extra
        )
        score_results(translator, inputs, again, coverage=plan.coverage)
        plan.take_retries(results, units, again, qualities)


def run_plan(
    translator,
    plan: Plan,
    *,
    batch_tokens: int = 2048,
    on_truncate: Callable[[int, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[TextTranslation]:
    """A plan searched and put back together; ``on_truncate(text, pieces)`` for each unit cut to
    the model's positions, naming its text (from 0); ``on_batch(n)`` after each search batch."""
    truncated: list[tuple[int, int]] = []

    def cut(unit: int, n: int) -> None:
        truncated.append((unit, n))
        if on_truncate is not None:
            on_truncate(plan.unit_text[unit], n)

    results = search_units(translator, plan, batch_tokens=batch_tokens, on_truncate=cut, on_batch=on_batch)
    return plan.finish(results, truncated)


def translate_request(translator, request: TranslationRequest, **hooks) -> list[TextTranslation]:
    """``request`` on ``translator``: planned, then run_plan (``hooks``: its batch_tokens,
    on_truncate, on_batch)."""
    return run_plan(translator, Plan(request, translator), **hooks)
