"""The one place a `VoxError` becomes an HTTP response, in OpenAI's error shape.

Route handlers reach it through the app's exception handler; the streaming response
and the auth middleware, which speak ASGI directly, call the response it returns.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from voxserve.errors import Overloaded, VoxError

__all__ = ["error_response"]


def error_response(exc: VoxError, headers: dict[str, str] | None = None) -> JSONResponse:
    """`{"error": {...}}` with the error's status; 429s carry `Retry-After`."""
    extra = dict(headers or {})
    if isinstance(exc, Overloaded):
        extra["retry-after"] = str(int(exc.retry_after))
    return JSONResponse(exc.body(), status_code=exc.status, headers=extra)
