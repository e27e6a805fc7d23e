"""How `nmt serve` answers a failed request: ``ApiError`` (raised anywhere while a request is
handled) and the JSON body of every error, ``{"error": {"status": N, "message": "..."}}``."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class ApiError(Exception):
    """An error answer: its HTTP status, message and headers (Retry-After, WWW-Authenticate)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """The JSON error body with ``status`` as the HTTP status."""
    return JSONResponse(
        {"error": {"status": status, "message": message}}, status_code=status, headers=headers
    )


async def api_error(request: Request, e: ApiError) -> JSONResponse:
    """Exception handler: an ApiError raised by a route."""
    return error_response(e.status, e.message, e.headers)


async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    """Exception handler: Starlette's own errors (404 for an unknown path, 405 for a wrong method)."""
    return error_response(e.status_code, str(e.detail), getattr(e, "headers", None))
