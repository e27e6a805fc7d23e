"""The ASGI middleware around every request of `nmt serve`: the Host, Origin and body-size checks, the
JSON 500 for an unexpected exception, and the count of every answer in the metrics.

A browser lets a page of any site POST a form to any server without asking it first (a "simple"
request, no CORS preflight): it sends the page's origin in the Origin header. So a POST (any
method but GET, HEAD, OPTIONS) whose Origin is neither the server's own (the Host it was asked as)
nor in ``allowed_origins`` (--allow-origin) is refused, 403, before the app reads it; clients that
send no Origin (curl, libretranslatepy, API clients) are served."""

from __future__ import annotations

import sys
import time
import traceback
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from .errors import ApiError, error_response
from .prometheus import Metrics


def host_name(host: str) -> str:
    """'example.org:8000' -> 'example.org', '[::1]:8000' -> '::1' (lower case)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


DEFAULT_PORTS = {"http": 80, "https": 443}
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")  # the methods any origin may use (no work is done for them)


def normal_origin(origin: str) -> str | None:
    """An origin as compared here: 'scheme://host[:port]' in lower case, a default port left out
    ('HTTPS://Example.org:443' -> 'https://example.org'), 'null' as is; None for what is not an
    origin (a path, a query, a user, no host, a port out of range)."""
    origin = origin.strip().lower()
    if origin == "null":
        return origin
    try:
        u = urlsplit(origin)
        port = u.port
    except ValueError:
        return None
    if not u.scheme or not u.hostname or "@" in u.netloc or u.path not in ("", "/") or u.query or u.fragment:
        return None
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return f"{u.scheme}://{host}" + ("" if port in (None, DEFAULT_PORTS.get(u.scheme)) else f":{port}")


def own_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` names the server that ``host`` (the Host header) names, in the origin's
    own scheme (behind a TLS proxy the server does not know its scheme)."""
    normal = normal_origin(origin)
    if normal is None or normal == "null" or not host:
        return False
    return normal == normal_origin(f"{normal.partition('://')[0]}://{host}")


class Exchange:
    """One request's ASGI channels, watched: ``status`` is what the app has sent (0: nothing yet);
    the body is refused (413) once more than ``max_body`` bytes have come in."""

    def __init__(self, receive, send, *, max_body: int):
        self._receive, self._send, self.max_body = receive, send, max_body
        self.status = 0
        self.received = 0

    async def send(self, message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self._send(message)

    async def receive(self):
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.max_body:  # the rest of the body is not read: the connection closes
                raise ApiError(
                    413,
                    f"request body over {self.max_body:,} bytes (--max-body-bytes)",
                    {"Connection": "close"},
                )
        return message


def failure_response(e: Exception, scope) -> JSONResponse:
    """The answer to an exception out of the app: its own status for an ApiError, else a 500 (the
    traceback goes to stderr; call it while handling ``e``)."""
    path = scope.get("path", "")
    if isinstance(e, ApiError):
        return error_response(e.status, e.message, e.headers, path=path)
    print(f"nmt serve: internal error on {scope.get('method')} {scope.get('path')}:", file=sys.stderr)
    traceback.print_exc()
    return error_response(500, f"internal error: {type(e).__name__}", path=path)


class Guard:
    """ASGI middleware (inside Starlette's error middleware): refuses a Host outside
    ``allowed_hosts`` (400; None: any), a POST from another origin than the server's own or those of
    ``allowed_origins`` (403; None: any), a body over ``max_body_bytes`` (413, from Content-Length
    or while it streams in), turns any exception into the JSON 500, and counts every response."""

    def __init__(
        self,
        app,
        *,
        metrics: Metrics,
        max_body_bytes: int,
        allowed_hosts: tuple[str, ...] | None,
        allowed_origins: tuple[str, ...] | None = (),
    ):
        self.app, self.metrics, self.max_body = app, metrics, max_body_bytes
        self.allowed = None if allowed_hosts is None else {h.lower().strip("[]") for h in allowed_hosts}
        self.origins = (
            None if allowed_origins is None else {normal_origin(o) for o in allowed_origins} - {None}
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        exchange = Exchange(receive, send, max_body=self.max_body)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            self.check_headers(headers)
            self.check_origin(headers, scope.get("method", ""))
            await self.app(scope, exchange.receive, exchange.send)
        except ClientDisconnect:  # gone while sending the body: nobody to answer (counted as 499)
            pass
        except Exception as e:  # noqa: BLE001  (every failure is a JSON answer)
            if exchange.status:  # the response had started: nothing more can be sent
                raise
            await failure_response(e, scope)(scope, receive, exchange.send)
        finally:
            status = exchange.status or 499  # nothing sent: the client went away (or the task was cancelled)
            self.metrics.count_response(
                endpoint=getattr(scope.get("route"), "path", "other"),
                status=status,
                seconds=time.perf_counter() - start,
            )

    def check_headers(self, headers: dict[str, str]) -> None:
        """400 for a Host that is not served here, 413 for a Content-Length over the body limit."""
        host = headers.get("host")
        length = headers.get("content-length", "")
        if self.allowed is not None and host is not None and host_name(host) not in self.allowed:
            raise ApiError(
                400,
                f"Host {host!r} is not served here (allowed: {', '.join(sorted(self.allowed))}; "
                "--allowed-hosts)",
            )
        if length.isdigit() and int(length) > self.max_body:
            raise ApiError(
                413,
                f"request body of {int(length):,} bytes: at most {self.max_body:,} (--max-body-bytes)",
                {"Connection": "close"},  # the body is not read: the connection closes
            )

    def check_origin(self, headers: dict[str, str], method: str) -> None:
        """403 for a POST (any method but GET, HEAD, OPTIONS) from a page of another origin than the
        server's own and those allowed; a request without Origin is not a browser's cross-site one."""
        origin = headers.get("origin")
        if origin is None or method in SAFE_METHODS or self.origins is None:
            return
        if normal_origin(origin) in self.origins or own_origin(origin, headers.get("host")):
            return
        raise ApiError(
            403,
            f"Origin {origin!r} may not send {method} requests here: it is neither this server's own "
            "nor allowed (--allow-origin)",
        )
