"""The HTTP server of `nmt serve`: uvicorn with a graceful shutdown. SIGTERM or SIGINT: no new
connections, the requests in flight are answered for ``shutdown_grace`` seconds, then given up
(their queued work is dropped); a second signal stops at once."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import uvicorn

from .batcher import Batcher
from .connections import http_protocol

if TYPE_CHECKING:
    from fastapi import FastAPI


class Server(uvicorn.Server):
    """uvicorn's server, except that a second SIGTERM (not only SIGINT) stops at once."""

    def handle_exit(self, sig, frame) -> None:
        if self.should_exit:
            self.force_exit = True
        super().handle_exit(sig, frame)


def serve(
    app: FastAPI,
    batchers: list[Batcher],
    *,
    host: str,
    port: int,
    shutdown_grace: float,
    max_connections: int,
    read_timeout: float,
) -> int:
    """Serve ``app`` until a signal: 0 when the requests in flight were answered, 1 when a second
    signal stopped it at once. The ``batchers`` are stopped either way. A connection has
    ``read_timeout`` seconds to send each whole request; ``max_connections`` requests are answered
    at once, more get 503 (nmt/serve/connections.py)."""
    # uvicorn answers SIGTERM/SIGINT by refusing new connections and finishing in-flight requests
    # for --shutdown-grace seconds, then cancels them (their queued work is dropped); the app's
    # lifespan then stops the batchers. uvicorn re-raises the signal to the handler installed
    # before it: a no-op here, so a stopped server exits with status 0 (1 if forced).
    server = Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=shutdown_grace,
            limit_concurrency=max_connections,
            http=http_protocol(read_timeout),
        )
    )
    previous = {
        sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for batcher in batchers:  # a forced exit skips the lifespan's stop
            batcher.stop(timeout=5)
    if server.force_exit:
        print(
            "nmt serve: stopped at once (second signal): requests in flight were not answered",
            file=sys.stderr,
        )
        return 1
    print("nmt serve: stopped (in-flight requests answered)", file=sys.stderr)
    return 0
