"""The endpoints of `nmt serve` (see nmt/serve/app.py for the API): each checks its request, queues
it on the model's batcher, waits for the answer and writes the JSON body. Their docstrings are the
descriptions on the OpenAPI page."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..infer.mbr import MBR
from ..infer.options import SearchOptions
from ..infer.results import TranslateError
from ..realtext.glossary import glossary_of, merged
from ..realtext.job import TextOptions
from ..realtext.markup import first_markup
from ..realtext.pipeline import TranslationRequest
from ..realtext.quality import QualityOptions, quality_record
from .batcher import JobOptions, Measured
from .errors import ApiError, error_response
from .real_text import Answered, run_request, warnings_of
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
    checked_search,
    read_json,
    served_model,
)
from .waiting import answer

router = APIRouter()
MAX_GLOSSARY_PAIRS = 1000  # a request's own glossary (the server's --glossary has no such limit)


# -------------------------------------------------------------------------------- /translate
def truncation_warnings(measured: Measured) -> list[str]:
    """One warning per sentence cut to the model's positions."""
    limit = measured.max_positions
    return [
        f"sentence {i + 1}: {n:,} pieces, truncated to {limit - 1:,} (model.max_positions={limit})"
        for i, n in measured.truncated
    ]


def translation_request(
    req: TranslateRequest, texts: list[str], m: ServedModel, state: ServeState
) -> TranslationRequest:
    """The pipeline's request of a /translate body (422 for options it refuses); the server's
    glossary, with the request's own added."""
    if req.glossary is not None and len(req.glossary) > MAX_GLOSSARY_PAIRS:
        raise ApiError(413, f"glossary: {len(req.glossary)} pairs, at most {MAX_GLOSSARY_PAIRS} per request")
    try:
        own = None if req.glossary is None else glossary_of(req.glossary)
        return TranslationRequest(
            texts,
            text=TextOptions(
                format=req.format,
                split=req.split,
                recase=req.recase,
                max_words=req.max_words,
                part_words=req.part_words,
                protect=req.protect,
            ),
            search=SearchOptions(beam=req.beam, alpha=req.alpha, nbest=req.nbest),
            quality=QualityOptions(confidence=req.confidence, guards=req.guards),
            target_lang=req.target_lang,
            alignment=req.alignment,
            mbr=MBR() if req.mbr else None,
            constraints=checked_constraints(req, texts, m),
            glossary=merged(state.glossary, own),
        )
    except (TranslateError, ValueError) as e:
        raise ApiError(422, str(e)) from None


def markup_warnings(req: TranslateRequest, texts: list[str]) -> list[str]:
    """A text that looks like HTML (nmt.realtext.markup's first_markup) in a request that did not
    name its format: one warning naming the first, as `nmt translate` warns."""
    found = None if "format" in req.model_fields_set or req.format != "text" else first_markup(texts)
    if found is None:
        return []
    return [
        f"text {found[0]}: looks like HTML ({found[1]}) and was translated as plain text, tags and all; "
        '"format": "html" translates the text between the tags and puts them back'
    ]


def translation_body(
    name: str, done: Answered, translator, *, alignment: bool, extra_warnings: list[str] = ()
) -> dict:
    """The /translate answer: per text, its best translation, the n-best and (when asked) their
    alignments; warnings for sentences cut or truncated, and ``extra_warnings``."""
    out = []
    for t in done.texts:
        nbest = [{"text": a.text, "score": a.score} for a in t.nbest]
        entry = {"text": t.text, "score": t.score, "nbest": nbest}
        trust = quality_record(t)
        entry.update(confidence=trust["confidence"], flags=trust["flags"], restored=trust["restored"])
        entry["words"] = trust["words"]
        if alignment:
            entry["alignment"] = [list(p) for p in t.alignment or []]
            for a, hypothesis in zip(t.nbest, nbest):
                hypothesis["alignment"] = [list(p) for p in a.alignment or []]
        out.append(entry)
    body = {"model": name, "translations": out}
    warnings = [*extra_warnings, *warnings_of(done, translator)]
    if warnings:
        body["warnings"] = warnings
    return body


@router.post(
    "/translate",
    responses={200: {"model": TranslateResponse}, **POST_ERRORS},
    openapi_extra=request_body(TranslateRequest),
)
async def translate(request: Request) -> Response:
    """Translate one text or a list (paragraphs, capitals, markup: as `nmt translate`); results in
    input order."""
    state = serve_state(request)
    check_key(state, request)
    req = await read_json(request, TranslateRequest)
    m = served_model(state, req.model)
    texts = [req.text] if isinstance(req.text, str) else req.text
    check_translate(req, texts, m, state.limits)
    done = await run_request(request, state, m, translation_request(req, texts, m, state))
    body = translation_body(
        m.name,
        done,
        m.batcher.translator,
        alignment=req.alignment,
        extra_warnings=markup_warnings(req, texts),
    )
    return JSONResponse(body)


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
    options = JobOptions(checked_search(req.beam, req.alpha))
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
