"""A request through nmt.realtext.pipeline on a model's batcher: what nmt's POST /translate and
LibreTranslate's /translate share. The request is planned (markup parsed, sentences split, the
target checked) and its texts put back together (tags placed) off the event loop, so that /health
and other requests are answered meanwhile; its units are queued like any request's. The doors
build the TranslationRequest from their own syntax and write their own answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import Request

from ..infer.results import TranslateError
from ..realtext.pipeline import Plan, TextTranslation, TranslationRequest
from ..realtext.quality import suspects
from .batcher import JobOptions, Measured
from .errors import ApiError
from .state import ServedModel, ServeState
from .validation import check_work
from .waiting import answer


@dataclass
class Answered:
    """A request's texts translated, and its plan and measure (for the answer's warnings)."""

    texts: list[TextTranslation]
    plan: Plan
    measured: Measured | None


def plan_request(treq: TranslationRequest, m: ServedModel, state: ServeState) -> tuple[Plan, Measured]:
    """The request planned on the model's translator and measured (422 for what the pipeline
    refuses, 413 for more sentences or work than the limits allow); runs off the event loop."""
    try:
        plan = Plan(treq, m.batcher.translator)
    except TranslateError as e:
        raise ApiError(422, str(e)) from None
    limits = state.limits
    if len(plan.units) > limits.max_sentences:
        raise ApiError(
            413, f"{len(plan.units)} sentences after splitting: at most {limits.max_sentences} per request"
        )
    measured = m.batcher.measure(plan.inputs)
    check_work(measured, treq.search.beam, max_request_work=limits.max_request_work)
    return plan, measured


async def run_request(
    request: Request, state: ServeState, m: ServedModel, treq: TranslationRequest
) -> Answered:
    """``treq`` planned and finished off the event loop, its units searched on the model's batcher
    (the MBR choice there; alignments where tags are placed or asked for); a flagged unit's retry
    that finds the queue full is left out (its first output and flags are answered)."""
    plan, measured = await asyncio.to_thread(plan_request, treq, m, state)
    results = []
    if plan.inputs:
        every = list(range(len(plan.inputs)))
        results = await search(request, state, m, plan, every, (treq.search, treq.mbr is not None), measured)
        state.metrics.sentences.labels(model=m.name).inc(len(plan.inputs))
        if plan.retries:
            qualities = await asyncio.to_thread(plan.qualities, results)
            for options, units in plan.retry_groups(suspects(qualities), qualities):
                try:
                    again = await search(request, state, m, plan, units, (options, False), measured)
                except ApiError as e:
                    if e.status != 503:
                        raise
                    break  # no room in the queue for a second search: the first outputs stay, flagged
                await asyncio.to_thread(plan.take_retries, results, units, again, qualities)
    texts = await asyncio.to_thread(plan.finish, results, measured.truncated)
    return Answered(texts, plan, measured)


async def search(
    request: Request, state: ServeState, m: ServedModel, plan: Plan, units: list[int], how, measured
) -> list:
    """The plan's ``units`` searched on the model's batcher as ``how`` says (SearchOptions, and
    whether the MBR choice is made there); scored where the plan's quality asks, aligned where
    it needs."""
    treq = plan.request
    search_options, mbr = how
    options = JobOptions(
        search_options,
        mbr=mbr,
        constraints=None if plan.constraints is None else tuple(tuple(plan.constraints[u]) for u in units),
        alignment_diagonal=plan.alignment_diagonal,
        scores=treq.quality.scores,
        coverage=plan.coverage,
    )
    return await answer(
        request,
        state,
        m,
        [plan.inputs[u] for u in units],
        options,
        n_tokens=sum(measured.tokens[u] for u in units),
        alignment=plan.needs_alignment,
    )


def warnings_of(done: Answered, translator) -> list[str]:
    """The answer's warnings, naming the text (from 1): sentences cut at clauses, and those
    truncated to the model's positions."""
    limit = getattr(getattr(translator.model, "cfg", None), "max_positions", None)
    cut_to = f"{limit - 1:,} (model.max_positions={limit})" if limit else "the model's positions"
    out = [f"text {k + 1}: {cut.message()}" for k, t in enumerate(done.texts) for cut in t.cuts]
    out += [
        f"text {k + 1}: {n:,} pieces, truncated to {cut_to}"
        for k, t in enumerate(done.texts)
        for n in t.truncated
    ]
    return out
