"""The HTTP API of `nmt serve` (FastAPI; OpenAPI page at /docs).

    POST /translate  {"model": "en-de", "text": "..." | ["...", ...], "beam": 4, "alpha": 0.6,
                      "nbest": 1, "alignment": false, "mbr": false}
                     -> {"model", "translations": [{"text", "score", "nbest": [{"text", "score"}],
                         "alignment"?: [[s, t], ...]}, ...]} in input order
    POST /attention  {"model", "text": "...", "beam", "alpha"} -> the best translation, its source
                     and target pieces and the encoder-decoder attention [layer][head][t][s]
    GET  /health     GET /models     GET /metrics (Prometheus text)     GET / (the web page)

Errors are JSON ``{"error": {"status": N, "message": "..."}}``: invalid UTF-8 or JSON 400, wrong
types or values 422, missing/wrong API key 401, unknown model 404, over the character or
sentence limits 413, queue full 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..infer.translate import default_alpha
from .batcher import Batcher, QueueFull, SearchOptions
from .page import add_page_routes


class TranslateRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    model: str | None = Field(None, description="model name (default: the first one served)")
    text: str | list[str] = Field(description="one sentence or a list of sentences")
    beam: int = Field(4, ge=1, le=32, description="beam size (paper: 4; 1 = greedy)")
    alpha: float | None = Field(None, ge=0.0, le=5.0, description="length penalty (default 0.6; 0 for beam 1)")
    nbest: int = Field(1, ge=1, description="translations per sentence (<= beam)")
    alignment: bool = Field(False, description="source-target piece alignment (last layer, heads averaged)")
    mbr: bool = Field(False, description="minimum-Bayes-risk choice among the beam's n-best (sentence chrF, "
                                         "T 0.5; nmt.infer.mbr) instead of the top one; beam >= 2, nbest 1")


class AttentionRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    model: str | None = None
    text: str
    beam: int = Field(4, ge=1, le=32)
    alpha: float | None = Field(None, ge=0.0, le=5.0)


@dataclass
class Limits:
    max_chars: int = 20000  # per request, all sentences together
    max_sentences: int = 256  # per request


@dataclass
class ServedModel:
    name: str
    batcher: Batcher
    info: dict  # GET /models entry


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def torch_model(m: "ServedModel") -> bool:
    """Attention and alignment need nmt's own model (not the ctranslate2 engine's)."""
    import torch

    return isinstance(getattr(m.batcher.translator, "model", None), torch.nn.Module)


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=headers)


class Metrics:
    def __init__(self, models: dict[str, ServedModel]):
        self.registry = CollectorRegistry()
        self.requests = Counter("nmt_requests", "HTTP requests by endpoint and status",
                                ["endpoint", "status"], registry=self.registry)
        self.errors = Counter("nmt_errors", "HTTP error responses (status >= 400) by status",
                              ["status"], registry=self.registry)
        self.latency = Histogram("nmt_request_latency_seconds", "request latency", ["endpoint"],
                                 buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30),
                                 registry=self.registry)
        self.sentences = Counter("nmt_sentences", "sentences translated", ["model"], registry=self.registry)
        self.batch_sentences = Histogram("nmt_batch_sentences", "sentences per batch", ["model"],
                                         buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
                                         registry=self.registry)
        self.queue = Gauge("nmt_queue_sentences", "sentences waiting in the queue", ["model"],
                           registry=self.registry)
        for name, m in models.items():
            self.queue.labels(model=name).set_function(lambda b=m.batcher: b.queue_length)


async def read_json(request: Request, schema: type[BaseModel]) -> BaseModel:
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"request body is not valid UTF-8 (byte 0x{body[e.start]:02x} at offset {e.start})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(400, f"request body is not valid JSON: {e}")
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors())
        raise ApiError(422, problems)


def create_app(models: dict[str, ServedModel], *, api_key: str | None = None, limits: Limits | None = None,
               queue_retry_after: int = 1) -> FastAPI:
    """The app for ``models`` (name -> ServedModel, first = default); starts and drains their
    batchers with its lifespan."""
    if not models:
        raise ValueError("no model to serve")
    limits = limits or Limits()
    metrics = Metrics(models)
    for name, m in models.items():
        m.batcher.on_batch = metrics.batch_sentences.labels(model=name).observe

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for m in models.values():
            m.batcher.start()
        yield
        for m in models.values():  # uvicorn has answered every in-flight request by now
            await asyncio.to_thread(m.batcher.stop)

    app = FastAPI(title="nmt", description="Transformer translation (Vaswani et al., 2017)", lifespan=lifespan)
    app.state.models = models

    @app.middleware("http")
    async def count(request: Request, call_next):
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "other")
        metrics.requests.labels(endpoint=endpoint, status=str(response.status_code)).inc()
        if response.status_code >= 400:
            metrics.errors.labels(status=str(response.status_code)).inc()
        metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - start)
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError):
        return error_response(e.status, e.message, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        return error_response(e.status_code, str(e.detail), getattr(e, "headers", None))

    def check_key(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if given is None and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if given is None or not hmac.compare_digest(given.encode(), api_key.encode()):
            raise ApiError(401, "missing or wrong API key (send 'Authorization: Bearer KEY' or 'X-API-Key: KEY')",
                           {"WWW-Authenticate": "Bearer"})

    def pick(name: str | None) -> ServedModel:
        if name is None:
            return next(iter(models.values()))
        if name not in models:
            raise ApiError(404, f"unknown model {name!r} (serving: {', '.join(models)})")
        return models[name]

    async def wait(m: ServedModel, sentences: list[str], options: SearchOptions, **kw) -> Any:
        try:
            future = m.batcher.submit(sentences, options, **kw)
        except QueueFull as e:
            raise ApiError(503, f"queue full: {e}; retry later", {"Retry-After": str(queue_retry_after)})
        return await future

    @app.post("/translate", openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": TranslateRequest.model_json_schema()}}}})
    async def translate(request: Request) -> dict:
        """Translate one sentence or a list; results in input order."""
        check_key(request)
        req = await read_json(request, TranslateRequest)
        m = pick(req.model)
        sentences = [req.text] if isinstance(req.text, str) else req.text
        if req.nbest > req.beam:
            raise ApiError(422, f"nbest: {req.nbest} must be <= beam ({req.beam})")
        if req.mbr and (req.beam < 2 or req.nbest != 1):
            raise ApiError(422, f"mbr chooses one translation among the beam's n-best: needs beam >= 2 and "
                                f"nbest 1 (got beam {req.beam}, nbest {req.nbest})")
        if len(sentences) > limits.max_sentences:
            raise ApiError(413, f"{len(sentences)} sentences: at most {limits.max_sentences} per request")
        chars = sum(map(len, sentences))
        if chars > limits.max_chars:
            raise ApiError(413, f"{chars} characters: at most {limits.max_chars} per request")
        if req.alignment and not torch_model(m):
            raise ApiError(400, f"model {m.name!r}: alignment needs the torch engine")
        if not sentences:
            return {"model": m.name, "translations": []}
        alpha = default_alpha(req.beam) if req.alpha is None else req.alpha
        results = await wait(m, sentences, SearchOptions(req.beam, alpha, req.nbest, req.mbr), alignment=req.alignment)
        metrics.sentences.labels(model=m.name).inc(len(sentences))
        out = []
        for nbest in results:
            entry = {"text": nbest[0].text, "score": nbest[0].score,
                     "nbest": [{"text": t.text, "score": t.score} for t in nbest]}
            if req.alignment:
                entry["alignment"] = [list(p) for p in nbest[0].alignment]
            out.append(entry)
        return {"model": m.name, "translations": out}

    @app.post("/attention", openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": AttentionRequest.model_json_schema()}}}})
    async def attention(request: Request) -> dict:
        """The best translation of one sentence and its encoder-decoder attention per layer and
        head: cross[layer][head][t][s], row t = decoder input t (<s> + output pieces)."""
        check_key(request)
        req = await read_json(request, AttentionRequest)
        m = pick(req.model)
        if len(req.text) > limits.max_chars:
            raise ApiError(413, f"{len(req.text)} characters: at most {limits.max_chars} per request")
        if not torch_model(m):
            raise ApiError(400, f"model {m.name!r}: attention needs the torch engine")
        alpha = default_alpha(req.beam) if req.alpha is None else req.alpha
        maps, best = await wait(m, [req.text], SearchOptions(req.beam, alpha, 1), kind="attention")
        sp = m.batcher.translator.sp
        src = m.batcher.translator.encode([req.text])[0][0]
        return {"model": m.name, "text": best.text, "score": best.score,
                "source_pieces": [sp.id_to_piece(i) for i in src],
                "target_pieces": ["<s>"] + [sp.id_to_piece(i) for i in best.tokens],
                "cross": [] if maps is None else [[[[round(x, 4) for x in row] for row in head] for head in layer]
                                                  for layer in maps.cross.tolist()]}

    @app.get("/health")
    async def health() -> dict:
        """Liveness: the served models and whether an API key is needed."""
        return {"status": "ok", "models": list(models), "auth": api_key is not None}

    @app.get("/models")
    async def list_models(request: Request) -> dict:
        """Each model's languages, parameters, vocabulary and checkpoint configuration."""
        check_key(request)
        return {"models": [m.info for m in models.values()]}

    @app.get("/metrics")
    async def prometheus() -> Response:
        """Prometheus text format."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    add_page_routes(app)
    return app
