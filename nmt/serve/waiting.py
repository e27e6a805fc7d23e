"""Queueing a request's sentences on a model's batcher and waiting for the answer: the client
gone, the deadline passed, a full queue and a failed model each become the error that says so."""

from __future__ import annotations

import asyncio
import sys
import traceback
from typing import Any

from fastapi import Request

from .batcher import Cancelled, JobOptions, QueueFull
from .errors import ApiError
from .state import ServedModel, ServeState


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
