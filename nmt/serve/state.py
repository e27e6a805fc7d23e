"""What the routes of `nmt serve` share: the models served, the request limits, the API key and the
metrics, in one ``ServeState`` that the app keeps as ``app.state.serve``."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from .batcher import Batcher
from .prometheus import Metrics


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


@dataclass
class ServeState:
    """The models (name -> ServedModel; the first is the default), the limits, the API key clients
    must send (None: none), the metrics, the Retry-After seconds of a 503, and the server's glossary."""

    models: dict[str, ServedModel]
    limits: Limits
    metrics: Metrics
    api_key: str | None = None
    queue_retry_after: int = 1
    glossary: object = None  # nmt.realtext.glossary.Glossary: terminology for every request


def serve_state(request: Request) -> ServeState:
    """The state of the app that received ``request``."""
    return request.app.state.serve
