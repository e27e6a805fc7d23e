"""POST /translate on real text (``format``, ``split``, ``recase``, ``max_words``): each text
through nmt.infer.real_text, its sentences queued on the model's batcher like any request's, the
texts put back together from their translations (and, for html / xml, the batcher's alignments)."""

from __future__ import annotations

from ..infer.casing import fewer_pieces, known_lower
from ..infer.real_text import TextJob, TextOptions, unit_output
from ..infer.results import TranslateError
from .errors import ApiError


def text_job(req, texts: list[str], translator) -> TextJob | None:
    """The TextJob of a /translate request's texts, or None when it asks for plain translation
    (one sentence per text as given: format "text" with split, recase and max_words off) or for
    what needs one output per text as the model gave it (nbest > 1, alignment, constraints)."""
    try:
        options = TextOptions(
            format=req.format,
            split=req.split,
            recase=req.recase,
            max_words=req.max_words,
            part_words=req.part_words,
        )
    except TranslateError as e:
        raise ApiError(422, str(e)) from None
    per_text = [name for name in ("alignment", "constraints") if getattr(req, name)] + (
        ["nbest"] if req.nbest > 1 else []
    )
    if per_text:
        if options.format != "text":
            raise ApiError(
                422, f"format {options.format!r}: not with {', '.join(per_text)} (one output per text)"
            )
        return None
    if options.plain:
        return None
    options = options.for_model(translator)
    sp = getattr(translator, "sp", None)
    if sp is None:
        return TextJob(texts, options)
    return TextJob(texts, options, keep_capital=fewer_pieces(sp), lower_known=known_lower(sp))


def text_body(name: str, job: TextJob, translator, results: list, truncated: list[tuple[int, int]]) -> dict:
    """The /translate answer of a TextJob: per text its translation, with the mean score of its
    sentences; warnings for the sentences cut at clauses and those truncated to the model's
    positions, naming the text (from 1)."""
    if job.needs_alignment:
        outputs = [
            unit_output(translator, u, r[0], getattr(r[0], "alignment", None))
            for u, r in zip(job.units, results)
        ]
    else:
        outputs = [unit_output(translator, u, r[0], None) for u, r in zip(job.units, results)]
    texts = job.finish(outputs)
    scores: list[list[float]] = [[] for _ in texts]
    for k, r in zip(job.unit_text, results):
        scores[k].append(r[0].score)
    out = []
    for t, s in zip(texts, scores):
        score = sum(s) / len(s) if s else 0.0
        out.append({"text": t.text, "score": score, "nbest": [{"text": t.text, "score": score}]})
    warnings = [f"text {k + 1}: {cut.message()}" for k, t in enumerate(texts) for cut in t.cuts]
    limit = getattr(getattr(translator.model, "cfg", None), "max_positions", None)  # a stand-in may have none
    cut_to = f"{limit - 1:,} (model.max_positions={limit})" if limit else "the model's positions"
    warnings += [f"text {job.unit_text[i] + 1}: {n:,} pieces, truncated to {cut_to}" for i, n in truncated]
    body = {"model": name, "translations": out}
    if warnings:
        body["warnings"] = warnings
    return body
