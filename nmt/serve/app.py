"""The HTTP API of `nmt serve` (FastAPI; OpenAPI page at /docs).

    POST /translate  {"model": "en-de", "text": "..." | ["...", ...], "beam": 4, "alpha": 0.6,
                      "nbest": 1, "alignment": false, "mbr": false,
                      "constraints": ["phrase", ...] | [[...], ...]}
                     -> {"model", "translations": [{"text", "score", "nbest": [{"text", "score"}],
                         "alignment"?: [[s, t], ...]}, ...], "warnings"?: [...]} in input order
    POST /attention  {"model", "text": "...", "beam", "alpha"} -> the best translation, its source
                     and target pieces and the encoder-decoder attention [layer][head][t][s]
    GET  /health     GET /models     GET /metrics (Prometheus text)     GET / (the web page)

Errors are JSON ``{"error": {"status": N, "message": "..."}}``: invalid UTF-8 or JSON, a Host the
server does not serve 400; missing/wrong API key 401; unknown model 404; over the body, character,
sentence, work or attention limits 413; a POST body that is not ``application/json`` 415; wrong
types or values 422; a failure inside the worker 500; queue full, server stopping or worker not
running 503 with Retry-After; no answer within ``timeout`` 504. A request whose client has gone
is dropped from the queue (or its search abandoned) and counted as 499 in /metrics.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import time
import traceback
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..infer.translate import TranslateError, default_alpha
from .batcher import Batcher, Cancelled, Measured, QueueFull, SearchOptions
from .page import add_page_routes


class TranslateRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    model: str | None = Field(None, description="model name (default: the first one served)")
    text: str | list[str] = Field(description="one sentence or a list of sentences")
    beam: int = Field(4, ge=1, le=32, description="beam size (paper: 4; 1 = greedy)")
    alpha: float | None = Field(
        None, ge=0.0, le=5.0, description="length penalty (default 0.6; 0 for beam 1)"
    )
    nbest: int = Field(1, ge=1, description="translations per sentence (<= beam)")
    alignment: bool = Field(False, description="source-target piece alignment (last layer, heads averaged)")
    mbr: bool = Field(
        False,
        description="minimum-Bayes-risk choice among the beam's n-best (sentence chrF, "
        "T 0.5; nmt.infer.mbr) instead of the top one; beam >= 2, nbest 1",
    )
    constraints: list[str] | list[list[str]] | None = Field(
        None,
        description="terminology: target phrases each translation must contain, in any order (hard lexical "
        "constraints, nmt.infer.constraints): a list of phrases for one text, a list of them per "
        "sentence for a list; torch engine",
    )


class AttentionRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    model: str | None = None
    text: str
    beam: int = Field(4, ge=1, le=32)
    alpha: float | None = Field(None, ge=0.0, le=5.0)


# ------------------------------------------------------------------- responses (for the OpenAPI page)
class ErrorDetail(BaseModel):
    status: int
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Hypothesis(BaseModel):
    text: str
    score: float


class SentenceTranslation(BaseModel):
    text: str
    score: float
    nbest: list[Hypothesis]
    alignment: list[list[int]] | None = Field(
        None, description="[source piece, output piece] pairs (when asked)"
    )


class TranslateResponse(BaseModel):
    model: str
    translations: list[SentenceTranslation]
    warnings: list[str] | None = Field(None, description="sentences cut to the model's positions (when any)")


class AttentionResponse(BaseModel):
    model: str
    text: str
    score: float
    source_pieces: list[str]
    target_pieces: list[str]
    cross: list[list[list[list[float]]]] = Field(description="[layer][head][target t][source s]")
    warnings: list[str] | None = None


class HealthResponse(BaseModel):
    status: str
    models: list[str]
    auth: bool


class ModelsResponse(BaseModel):
    models: list[dict[str, Any]]


def documented(*statuses: int) -> dict:
    """OpenAPI ``responses`` for these error statuses (all with the JSON error body)."""
    return {s: {"model": ErrorBody} for s in statuses}


POST_ERRORS = documented(400, 401, 404, 413, 415, 422, 500, 503, 504)


@dataclass
class Limits:
    max_chars: int = 20000  # per request, all sentences together
    max_sentences: int = 256  # per request
    max_request_work: int = 65536  # source pieces (+ EOS) x beam per request
    max_body_bytes: int = 1 << 20  # request body
    max_attention_cells: int = 2_000_000  # layers x heads x target x source numbers in one /attention answer
    timeout: float = 60.0  # seconds from queueing to answer, else 504


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
    return JSONResponse(
        {"error": {"status": status, "message": message}}, status_code=status, headers=headers
    )


class Metrics:
    def __init__(self, models: dict[str, ServedModel]):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "nmt_requests",
            "HTTP requests by endpoint and status (499: the client went away first)",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.errors = Counter(
            "nmt_errors", "HTTP error responses (status >= 400) by status", ["status"], registry=self.registry
        )
        self.latency = Histogram(
            "nmt_request_latency_seconds",
            "request latency",
            ["endpoint"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.sentences = Counter("nmt_sentences", "sentences translated", ["model"], registry=self.registry)
        self.batch_sentences = Histogram(
            "nmt_batch_sentences",
            "sentences per batch",
            ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=self.registry,
        )
        self.queue = Gauge(
            "nmt_queue_sentences", "sentences waiting in the queue", ["model"], registry=self.registry
        )
        self.queue_work = Gauge(
            "nmt_queue_work",
            "work waiting in the queue (source pieces x beam)",
            ["model"],
            registry=self.registry,
        )
        for name, m in models.items():
            self.queue.labels(model=name).set_function(lambda b=m.batcher: b.queue_length)
            self.queue_work.labels(model=name).set_function(lambda b=m.batcher: b.queue_work)


def host_name(host: str) -> str:
    """'example.org:8000' -> 'example.org', '[::1]:8000' -> '::1' (lower case)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class Guard:
    """ASGI middleware (inside Starlette's error middleware): refuses a Host outside
    ``allowed_hosts`` (400) and a body over ``max_body_bytes`` (413, from Content-Length or while
    it streams in), turns any exception into the JSON 500, and counts every response."""

    def __init__(self, app, *, metrics: Metrics, max_body_bytes: int, allowed_hosts: tuple[str, ...] | None):
        self.app, self.metrics, self.max_body = app, metrics, max_body_bytes
        self.allowed = None if allowed_hosts is None else {h.lower().strip("[]") for h in allowed_hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = [0]

        async def send_counted(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        received = [0]

        async def receive_limited():
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.max_body:
                    raise ApiError(413, f"request body over {self.max_body:,} bytes (--max-body-bytes)")
            return message

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            host = headers.get("host")
            length = headers.get("content-length", "")
            if self.allowed is not None and host is not None and host_name(host) not in self.allowed:
                raise ApiError(
                    400,
                    f"Host {host!r} is not served here (allowed: {', '.join(sorted(self.allowed))}; "
                    f"--allowed-hosts)",
                )
            if length.isdigit() and int(length) > self.max_body:
                raise ApiError(
                    413,
                    f"request body of {int(length):,} bytes: at most {self.max_body:,} (--max-body-bytes)",
                )
            await self.app(scope, receive_limited, send_counted)
        except ClientDisconnect:  # gone while sending the body: nobody to answer (counted as 499)
            pass
        except Exception as e:  # noqa: BLE001  (every failure is a JSON answer)
            if status[0]:  # the response had started: nothing more can be sent
                raise
            if isinstance(e, ApiError):
                response = error_response(e.status, e.message, e.headers)
            else:
                print(
                    f"nmt serve: internal error on {scope.get('method')} {scope.get('path')}:",
                    file=sys.stderr,
                )
                traceback.print_exc()
                response = error_response(500, f"internal error: {type(e).__name__}")
            await response(scope, receive, send_counted)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", "other")
            code = str(status[0] or 499)  # nothing sent: the client went away (or the task was cancelled)
            self.metrics.requests.labels(endpoint=endpoint, status=code).inc()
            if int(code) >= 400:
                self.metrics.errors.labels(status=code).inc()
            self.metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - start)


async def read_json(request: Request, schema: type[BaseModel]) -> BaseModel:
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(415, f"Content-Type {media or 'missing'!r}: send the request as application/json")
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(
            400, f"request body is not valid UTF-8 (byte 0x{body[e.start]:02x} at offset {e.start})"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(400, f"request body is not valid JSON: {e}")
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors()
        )
        raise ApiError(422, problems)
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None


def check_text(sentences: list[str]) -> None:
    for i, s in enumerate(sentences):
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ApiError(
                422,
                f"text: sentence {i + 1}: a lone surrogate {s[e.start]!r} at character {e.start} "
                f"is not Unicode text",
            ) from None


def truncation_warnings(measured: Measured) -> list[str]:
    limit = measured.max_positions
    return [
        f"sentence {i + 1}: {n:,} pieces, truncated to {limit - 1:,} (model.max_positions={limit})"
        for i, n in measured.truncated
    ]


async def client_gone(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(
    models: dict[str, ServedModel],
    *,
    api_key: str | None = None,
    limits: Limits | None = None,
    queue_retry_after: int = 1,
    allowed_hosts: tuple[str, ...] | None = None,
) -> FastAPI:
    """The app for ``models`` (name -> ServedModel, first = default); starts and stops their
    batchers with its lifespan. ``allowed_hosts``: the Host header values served (None: any)."""
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
        for m in models.values():  # uvicorn has answered or given up every request by now
            await asyncio.to_thread(m.batcher.stop)

    app = FastAPI(
        title="nmt", description="Transformer translation (Vaswani et al., 2017)", lifespan=lifespan
    )
    app.state.models = models
    app.add_middleware(
        Guard, metrics=metrics, max_body_bytes=limits.max_body_bytes, allowed_hosts=allowed_hosts
    )

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
            raise ApiError(
                401,
                "missing or wrong API key (send 'Authorization: Bearer KEY' or 'X-API-Key: KEY')",
                {"WWW-Authenticate": "Bearer"},
            )

    def pick(name: str | None) -> ServedModel:
        if name is None:
            return next(iter(models.values()))
        if name not in models:
            raise ApiError(404, f"unknown model {name!r} (serving: {', '.join(models)})")
        return models[name]

    def check_work(measured: Measured, beam: int) -> int:
        tokens = sum(measured.tokens)
        if tokens * beam > limits.max_request_work:
            raise ApiError(
                413,
                f"{tokens:,} source pieces x beam {beam} = {tokens * beam:,}: at most "
                f"{limits.max_request_work:,} per request (--max-request-work)",
            )
        return tokens

    async def wait(
        request: Request, m: ServedModel, sentences: list[str], options: SearchOptions, n_tokens: int, **kw
    ) -> Any:
        """The worker's answer, or 503 (queue full), 504 (timeout), 499 (client gone), 500."""
        retry = {"Retry-After": str(queue_retry_after)}
        try:
            future = m.batcher.submit(sentences, options, n_tokens=n_tokens, timeout=limits.timeout, **kw)
        except QueueFull as e:
            raise ApiError(503, f"queue full: {e}; retry later", retry)
        gone = asyncio.ensure_future(client_gone(request))
        try:
            await asyncio.wait([future, gone], timeout=limits.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this task is cancelled (server stopping): the queued work goes too
            gone.cancel()
            if not future.done():
                future.cancel()
        if future.cancelled():
            if gone.done() and not gone.cancelled():
                raise ApiError(499, "the client closed the connection")
            raise ApiError(
                504, f"no answer within {limits.timeout:g} s (--timeout); the request was cancelled"
            )
        e = future.exception()
        if isinstance(e, Cancelled):  # the worker saw the deadline first
            raise ApiError(
                504, f"no answer within {limits.timeout:g} s (--timeout); the request was cancelled"
            )
        if isinstance(e, QueueFull):
            raise ApiError(503, f"{e}; retry later", retry)
        if e is not None:
            print(f"nmt serve: model {m.name!r}: {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exception(e)
            raise ApiError(500, f"model {m.name!r} failed: {type(e).__name__}: {e}")
        return future.result()

    @app.post(
        "/translate",
        responses={200: {"model": TranslateResponse}, **POST_ERRORS},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": TranslateRequest.model_json_schema()}},
            }
        },
    )
    async def translate(request: Request) -> Response:
        """Translate one sentence or a list; results in input order."""
        check_key(request)
        req = await read_json(request, TranslateRequest)
        m = pick(req.model)
        sentences = [req.text] if isinstance(req.text, str) else req.text
        if req.nbest > req.beam:
            raise ApiError(422, f"nbest: {req.nbest} must be <= beam ({req.beam})")
        if req.mbr and (req.beam < 2 or req.nbest != 1):
            raise ApiError(
                422,
                f"mbr chooses one translation among the beam's n-best: needs beam >= 2 and "
                f"nbest 1 (got beam {req.beam}, nbest {req.nbest})",
            )
        if len(sentences) > limits.max_sentences:
            raise ApiError(413, f"{len(sentences)} sentences: at most {limits.max_sentences} per request")
        chars = sum(map(len, sentences))
        if chars > limits.max_chars:
            raise ApiError(413, f"{chars} characters: at most {limits.max_chars} per request")
        check_text(sentences)
        if req.alignment and not torch_model(m):
            raise ApiError(400, f"model {m.name!r}: alignment needs the torch engine")
        if not sentences:
            return JSONResponse({"model": m.name, "translations": []})
        constraints = None
        if req.constraints is not None:  # one list of phrases per sentence, checked before it is queued
            constraints = [req.constraints] if isinstance(req.text, str) else req.constraints
            translator = m.batcher.translator
            if getattr(translator, "engine", None) != "torch":
                raise ApiError(400, f"model {m.name!r}: constraints need the torch engine")
            if getattr(translator, "shortlist", None) is not None:
                raise ApiError(
                    400,
                    f"model {m.name!r}: served with a vocabulary shortlist (--shortlist); "
                    "constraints need the full vocabulary",
                )
            if len(constraints) != len(sentences) or not all(
                isinstance(c, list) and all(isinstance(p, str) for p in c) for c in constraints
            ):
                raise ApiError(
                    422,
                    "constraints: a list of phrases for one text, one list of phrases per sentence "
                    "for a list of texts",
                )
            try:
                translator.constraint_ids(translator.encode(sentences)[0], constraints)
            except TranslateError as e:
                raise ApiError(422, f"constraints: {e}")
            constraints = tuple(tuple(c) for c in constraints)
        measured = m.batcher.measure(sentences)
        tokens = check_work(measured, req.beam)
        alpha = default_alpha(req.beam) if req.alpha is None else req.alpha
        results = await wait(
            request,
            m,
            sentences,
            SearchOptions(req.beam, alpha, req.nbest, req.mbr, constraints),
            tokens,
            alignment=req.alignment,
        )
        metrics.sentences.labels(model=m.name).inc(len(sentences))
        out = []
        for nbest in results:
            entry = {
                "text": nbest[0].text,
                "score": nbest[0].score,
                "nbest": [{"text": t.text, "score": t.score} for t in nbest],
            }
            if req.alignment:
                entry["alignment"] = [list(p) for p in nbest[0].alignment]
            out.append(entry)
        body = {"model": m.name, "translations": out}
        if measured.truncated:
            body["warnings"] = truncation_warnings(measured)
        return JSONResponse(body)

    @app.post(
        "/attention",
        responses={200: {"model": AttentionResponse}, **POST_ERRORS},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": AttentionRequest.model_json_schema()}},
            }
        },
    )
    async def attention(request: Request) -> Response:
        """The best translation of one sentence and its encoder-decoder attention per layer and
        head: cross[layer][head][t][s], row t = decoder input t (<s> + output pieces)."""
        check_key(request)
        req = await read_json(request, AttentionRequest)
        m = pick(req.model)
        if len(req.text) > limits.max_chars:
            raise ApiError(413, f"{len(req.text)} characters: at most {limits.max_chars} per request")
        check_text([req.text])
        if not torch_model(m):
            raise ApiError(400, f"model {m.name!r}: attention needs the torch engine")
        measured = m.batcher.measure([req.text])
        tokens = check_work(measured, req.beam)
        model = m.batcher.translator.model
        layers, heads = len(model.decoder.layers), model.cfg.n_heads
        cells = layers * heads * tokens * (tokens + 51)  # the output is at most |x| + 50 pieces (+ <s>)
        if cells > limits.max_attention_cells:
            raise ApiError(
                413,
                f"{tokens:,} source pieces: the attention maps could hold {cells:,} numbers, at most "
                f"{limits.max_attention_cells:,} (--max-attention-cells); send a shorter sentence",
            )
        alpha = default_alpha(req.beam) if req.alpha is None else req.alpha
        maps, best = await wait(
            request, m, [req.text], SearchOptions(req.beam, alpha, 1), tokens, kind="attention"
        )
        sp = m.batcher.translator.sp
        src = m.batcher.translator.encode([req.text])[0][0]
        head = {
            "model": m.name,
            "text": best.text,
            "score": best.score,
            "source_pieces": [sp.id_to_piece(i) for i in src],
            "target_pieces": ["<s>"] + [sp.id_to_piece(i) for i in best.tokens],
        }
        if measured.truncated:
            head["warnings"] = truncation_warnings(measured)

        def render() -> bytes:  # off the event loop: the maps can be large
            cross = [] if maps is None else maps.cross.double().round(decimals=4).tolist()
            return json.dumps({**head, "cross": cross}, ensure_ascii=False, allow_nan=False).encode("utf-8")

        return Response(await asyncio.to_thread(render), media_type="application/json")

    @app.get("/health", responses={200: {"model": HealthResponse}, **documented(400, 503)})
    async def health() -> Response:
        """Readiness and liveness: 200 when every model's worker thread runs and, when it has
        work, has made progress within --timeout seconds; else 503 naming the problem."""
        problems = [
            f"model {name!r}: {p}"
            for name, m in models.items()
            if (p := m.batcher.health(stall_s=limits.timeout)) is not None
        ]
        if problems:
            return error_response(503, "; ".join(problems))
        return JSONResponse({"status": "ok", "models": list(models), "auth": api_key is not None})

    @app.get("/models", responses={200: {"model": ModelsResponse}, **documented(400, 401)})
    async def list_models(request: Request) -> Response:
        """Each model's languages, parameters, vocabulary and checkpoint configuration."""
        check_key(request)
        return JSONResponse({"models": [m.info for m in models.values()]})

    @app.get(
        "/metrics",
        responses={200: {"content": {CONTENT_TYPE_LATEST.partition(";")[0]: {}}}, **documented(400)},
    )
    async def prometheus() -> Response:
        """Prometheus text format."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    add_page_routes(app)
    return app
