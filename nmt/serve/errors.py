"""How `nmt serve` answers a failed request: ``ApiError`` (raised anywhere while a request is
handled) and the JSON body of every error, ``{"error": {"status": N, "message": "..."}}``; under
/libretranslate (nmt/serve/libretranslate.py) LibreTranslate's ``{"error": "..."}`` with its
statuses."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class ApiError(Exception):
    """An error answer: its HTTP status, message and headers (Retry-After, WWW-Authenticate)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


LIBRETRANSLATE_PREFIX = "/libretranslate"
# nmt's statuses as LibreTranslate's (it documents 400 for a bad request, 403 for an API key, 429
# "Slowdown", 500): too large, wrong media type or wrong values are a bad request, a full queue is
# a slowdown and no answer in time a failure
LIBRETRANSLATE_STATUS = {413: 400, 415: 400, 422: 400, 503: 429, 504: 500}


def libretranslate_path(path: str) -> bool:
    return path == LIBRETRANSLATE_PREFIX or path.startswith(LIBRETRANSLATE_PREFIX + "/")


def error_response(status: int, message: str, headers: dict | None = None, *, path: str = "") -> JSONResponse:
    """The JSON error body with ``status`` as the HTTP status; LibreTranslate's for its ``path``."""
    if libretranslate_path(path):
        status = LIBRETRANSLATE_STATUS.get(status, status)
        message = f"Slowdown: {message}" if status == 429 else message
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    return JSONResponse(
        {"error": {"status": status, "message": message}}, status_code=status, headers=headers
    )


async def api_error(request: Request, e: ApiError) -> JSONResponse:
    """Exception handler: an ApiError raised by a route."""
    return error_response(e.status, e.message, e.headers, path=request.url.path)


async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    """Exception handler: Starlette's own errors (404 for an unknown path, 405 for a wrong method)."""
    return error_response(e.status_code, str(e.detail), getattr(e, "headers", None), path=request.url.path)
