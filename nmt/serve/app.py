"""The HTTP API of `nmt serve` (FastAPI; OpenAPI page at /docs).

    POST /translate  {"model": "en-de", "text": "..." | ["...", ...], "beam": 4, "alpha": 0.6,
                      "nbest": 1, "alignment": false, "mbr": false,
                      "constraints": ["phrase", ...] | [[...], ...]}
                     -> {"model", "translations": [{"text", "score", "nbest": [{"text", "score"}],
                         "alignment"?: [[s, t], ...]}, ...], "warnings"?: [...]} in input order
    POST /attention  {"model", "text": "...", "beam", "alpha"} -> the best translation, its source
                     and target pieces and the encoder-decoder attention [layer][head][t][s]
    GET  /health     GET /models     GET /metrics (Prometheus text)     GET / (the web page)
    /libretranslate/translate, /detect, /languages, /frontend/settings: LibreTranslate's API
                     (nmt/serve/libretranslate.py), for its clients given the base URL
                     http://HOST:PORT/libretranslate/

Errors are JSON ``{"error": {"status": N, "message": "..."}}``: invalid UTF-8 or JSON, a Host the
server does not serve 400; missing/wrong API key 401; a POST from a web page of another origin 403;
unknown model 404; over the body, character, sentence, work or attention limits 413; a POST body
that is not ``application/json`` 415; wrong types or values 422; a failure inside the worker 500;
queue full, server stopping or worker not running 503 with Retry-After; no answer within
``timeout`` 504. A request whose client has gone is dropped from the queue (or its search
abandoned) and counted as 499 in /metrics.

Where each part lives: the request and answer bodies in schemas.py, reading and checking a request
in validation.py, the endpoints in routes.py (LibreTranslate's in libretranslate.py), a request
through nmt.realtext.pipeline on the batcher in real_text.py, queueing and waiting in waiting.py, the
shared state (models, limits, API key) in state.py, the middleware (Host, Origin, body size, JSON
500, counting) in guard.py, uvicorn's connections (read deadline, requests at once) in
connections.py, the metrics in prometheus.py, the queue and worker in batcher.py, the web
page in page.py; this module puts them together.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import ApiError, api_error, http_error
from .guard import Guard
from .libretranslate import router as libretranslate_router
from .page import add_page_routes
from .prometheus import Metrics
from .routes import router
from .state import Limits, ServedModel, ServeState


@asynccontextmanager
async def run_batchers(app: FastAPI):
    """The app's lifespan: every model's worker runs while the app serves."""
    models = app.state.serve.models
    for m in models.values():
        m.batcher.start()
    yield
    for m in models.values():  # uvicorn has answered or given up every request by now
        await asyncio.to_thread(m.batcher.stop)


def create_app(
    models: dict[str, ServedModel],
    *,
    api_key: str | None = None,
    limits: Limits | None = None,
    queue_retry_after: int = 1,
    allowed_hosts: tuple[str, ...] | None = None,
    allowed_origins: tuple[str, ...] | None = (),
    glossary=None,
) -> FastAPI:
    """The app for ``models`` (name -> ServedModel, first = default); starts and stops their
    batchers with its lifespan. ``allowed_hosts``: the Host header values served (None: any);
    ``allowed_origins``: the origins besides the server's own whose pages may POST (None: any);
    ``glossary``: an nmt.realtext.glossary.Glossary every translation request uses."""
    if not models:
        raise ValueError("no model to serve")
    metrics = Metrics()
    metrics.watch({name: m.batcher for name, m in models.items()})  # sets each batcher's on_batch
    state = ServeState(models, limits or Limits(), metrics, api_key, queue_retry_after, glossary)
    app = FastAPI(
        title="nmt", description="Transformer translation (Vaswani et al., 2017)", lifespan=run_batchers
    )
    app.state.serve = state
    app.add_middleware(
        Guard,
        metrics=metrics,
        max_body_bytes=state.limits.max_body_bytes,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.include_router(router)
    app.include_router(libretranslate_router)
    add_page_routes(app)
    return app
