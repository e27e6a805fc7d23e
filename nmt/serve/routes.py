"""The endpoints of `nmt serve` (see nmt/serve/app.py for the API): each checks its request, queues
it on the model's batcher, waits for the answer and writes the JSON body. Their docstrings are the
descriptions on the OpenAPI page."""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..infer.options import SearchOptions
from ..infer.real_text import PROJECTION_DIAGONAL
from .batcher import Cancelled, JobOptions, Measured, QueueFull
from .errors import ApiError, error_response
from .real_text import text_body, text_job
from .schemas import (
    POST_ERRORS,
    AttentionRequest,
    AttentionResponse,
    HealthResponse,
    ModelsResponse,
    TranslateRequest,
    TranslateResponse,
    documented,
    request_body,
)
from .state import ServedModel, ServeState, serve_state
from .validation import (
    check_attention,
    check_attention_cells,
    check_key,
    check_translate,
    check_work,
    checked_constraints,
    checked_target,
    read_json,
    search_alpha,
    served_model,
    torch_model,
)

router = APIRouter()


# ------------------------------------------------------------------------ queueing and waiting
async def client_gone(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def answer(
    request: Request,
    state: ServeState,
    m: ServedModel,
    sentences: list[str],
    options: JobOptions,
    *,
    n_tokens: int,
    alignment: bool = False,
    kind: str = "translate",
) -> Any:
    """The worker's answer to the request, or 503 (queue full), 504 (timeout), 499 (client gone),
    500. Whoever stops waiting cancels the queued work: the client, the deadline, or the server
    (this task cancelled)."""
    retry = {"Retry-After": str(state.queue_retry_after)}
    timeout = state.limits.timeout
    try:
        future = m.batcher.submit(
            sentences, options, alignment=alignment, kind=kind, n_tokens=n_tokens, timeout=timeout
        )
    except QueueFull as e:
        raise ApiError(503, f"{e}; retry later", retry)  # full, stopping, or no worker: e says which
    gone = asyncio.ensure_future(client_gone(request))
    try:
        await asyncio.wait([future, gone], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this task is cancelled (server stopping): the queued work goes too
        gone.cancel()
        if not future.done():
            future.cancel()
    return outcome(future, gone, m, timeout=timeout, retry=retry)


def outcome(
    future: asyncio.Future, gone: asyncio.Future, m: ServedModel, *, timeout: float, retry: dict
) -> Any:
    """The result of a request's future once waiting is over, or the error that says why there is none."""
    late = f"no answer within {timeout:g} s (--timeout); the request was cancelled"
    if future.cancelled():
        if gone.done() and not gone.cancelled():
            raise ApiError(499, "the client closed the connection")
        raise ApiError(504, late)
    e = future.exception()
    if isinstance(e, Cancelled):  # the worker saw the deadline first
        raise ApiError(504, late)
    if isinstance(e, QueueFull):
        raise ApiError(503, f"{e}; retry later", retry)
    if e is not None:
        print(f"nmt serve: model {m.name!r}: {type(e).__name__}: {e}", file=sys.stderr)
        traceback.print_exception(e)
        raise ApiError(500, f"model {m.name!r} failed: {type(e).__name__}: {e}")
    return future.result()


# -------------------------------------------------------------------------------- /translate
def truncation_warnings(measured: Measured) -> list[str]:
    """One warning per sentence cut to the model's positions."""
    limit = measured.max_positions
    return [
        f"sentence {i + 1}: {n:,} pieces, truncated to {limit - 1:,} (model.max_positions={limit})"
        for i, n in measured.truncated
    ]


def translation_body(name: str, results: list, measured: Measured, *, alignment: bool) -> dict:
    """The /translate answer: per sentence, its best translation, the n-best and (when asked) the
    best one's alignment; warnings for truncated sentences."""
    out = []
    for nbest in results:
        entry = {
            "text": nbest[0].text,
            "score": nbest[0].score,
            "nbest": [{"text": t.text, "score": t.score} for t in nbest],
        }
        if alignment:
            entry["alignment"] = [list(p) for p in nbest[0].alignment]
        out.append(entry)
    body = {"model": name, "translations": out}
    if measured.truncated:
        body["warnings"] = truncation_warnings(measured)
    return body


@router.post(
    "/translate",
    responses={200: {"model": TranslateResponse}, **POST_ERRORS},
    openapi_extra=request_body(TranslateRequest),
)
async def translate(request: Request) -> Response:
    """Translate one sentence or a list; results in input order."""
    state = serve_state(request)
    check_key(state, request)
    req = await read_json(request, TranslateRequest)
    m = served_model(state, req.model)
    sentences = [req.text] if isinstance(req.text, str) else req.text
    check_translate(req, sentences, m, state.limits)
    if not sentences:
        return JSONResponse({"model": m.name, "translations": []})
    job = text_job(req, sentences, m.batcher.translator)  # real text (nmt.serve.real_text); None: plain
    units = sentences if job is None else job.units
    tag = checked_target(req, m, markup=job is not None and job.needs_alignment)
    units = [f"{tag} {u}" if tag and u.strip() else u for u in units]  # a multi-target model's target
    constraints = checked_constraints(req, sentences, m)
    measured = m.batcher.measure(units)
    tokens = check_work(measured, req.beam, max_request_work=state.limits.max_request_work)
    search = SearchOptions(beam=req.beam, alpha=search_alpha(req.beam, req.alpha), nbest=req.nbest)
    markup = job is not None and job.needs_alignment and torch_model(m)
    diagonal = PROJECTION_DIAGONAL if markup else None  # tags placed as nmt translate places them
    options = JobOptions(search, mbr=req.mbr, constraints=constraints, alignment_diagonal=diagonal)
    aligned = req.alignment or markup
    results = (
        await answer(request, state, m, units, options, n_tokens=tokens, alignment=aligned) if units else []
    )
    state.metrics.sentences.labels(model=m.name).inc(len(sentences))
    if job is not None:
        return JSONResponse(text_body(m.name, job, m.batcher.translator, results, measured.truncated))
    return JSONResponse(translation_body(m.name, results, measured, alignment=req.alignment))


# -------------------------------------------------------------------------------- /attention
def attention_head(m: ServedModel, text: str, best, measured: Measured) -> dict:
    """The /attention answer without the maps: the best translation, the source pieces (with
    </s>) and the decoder's input pieces (<s> + output), truncation warnings."""
    translator = m.batcher.translator
    src = translator.encode([text])[0][0]
    head = {
        "model": m.name,
        "text": best.text,
        "score": best.score,
        "source_pieces": [translator.sp.id_to_piece(i) for i in src],
        "target_pieces": ["<s>"] + [translator.sp.id_to_piece(i) for i in best.tokens],
    }
    if measured.truncated:
        head["warnings"] = truncation_warnings(measured)
    return head


def render_attention(head: dict, maps) -> bytes:
    """The /attention body as JSON bytes (run off the event loop: the maps can be large)."""
    # maps.cross (L, H, T, S) -> nested lists [layer][head][target t][source s], 4 decimals
    cross = [] if maps is None else maps.cross.double().round(decimals=4).tolist()
    return json.dumps({**head, "cross": cross}, ensure_ascii=False, allow_nan=False).encode("utf-8")


@router.post(
    "/attention",
    responses={200: {"model": AttentionResponse}, **POST_ERRORS},
    openapi_extra=request_body(AttentionRequest),
)
async def attention(request: Request) -> Response:
    """The best translation of one sentence and its encoder-decoder attention per layer and
    head: cross[layer][head][t][s], row t = decoder input t (<s> + output pieces)."""
    state = serve_state(request)
    check_key(state, request)
    req = await read_json(request, AttentionRequest)
    m = served_model(state, req.model)
    check_attention(req, m, state.limits)
    measured = m.batcher.measure([req.text])
    tokens = check_work(measured, req.beam, max_request_work=state.limits.max_request_work)
    check_attention_cells(m, tokens, max_cells=state.limits.max_attention_cells)
    options = JobOptions(SearchOptions(beam=req.beam, alpha=search_alpha(req.beam, req.alpha)))
    maps, best = await answer(request, state, m, [req.text], options, n_tokens=tokens, kind="attention")
    head = attention_head(m, req.text, best, measured)
    return Response(await asyncio.to_thread(render_attention, head, maps), media_type="application/json")


# ------------------------------------------------------------------------ /health /models /metrics
@router.get("/health", responses={200: {"model": HealthResponse}, **documented(400, 503)})
async def health(request: Request) -> Response:
    """Readiness and liveness: 200 when every model's worker thread runs and, when it has
    work, has made progress within --timeout seconds; else 503 naming the problem."""
    state = serve_state(request)
    problems = [
        f"model {name!r}: {p}"
        for name, m in state.models.items()
        if (p := m.batcher.health(stall_s=state.limits.timeout)) is not None
    ]
    if problems:
        return error_response(503, "; ".join(problems))
    return JSONResponse({"status": "ok", "models": list(state.models), "auth": state.api_key is not None})


@router.get("/models", responses={200: {"model": ModelsResponse}, **documented(400, 401)})
async def list_models(request: Request) -> Response:
    """Each model's languages, parameters, vocabulary and checkpoint configuration."""
    state = serve_state(request)
    check_key(state, request)
    return JSONResponse({"models": [m.info for m in state.models.values()]})


@router.get(
    "/metrics",
    responses={200: {"content": {CONTENT_TYPE_LATEST.partition(";")[0]: {}}}, **documented(400)},
)
async def prometheus(request: Request) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(serve_state(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)
