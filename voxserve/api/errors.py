"""The one place a `VoxError` becomes a body, in OpenAI's error shape: an HTTP response,
and the `error` event of an SSE stream or a WebSocket session, with the same `error`
object inside.

Route handlers reach it through the app's exception handler; the streaming response
and the middlewares, which speak ASGI directly, call the response it returns.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from voxserve.errors import ClientError, Overloaded, ServerError, VoxError

__all__ = ["error_event", "error_response", "status_error"]


def error_response(exc: VoxError, headers: dict[str, str] | None = None) -> JSONResponse:
    """`{"error": {...}}` with the error's status; 429s carry `Retry-After`."""
    extra = dict(headers or {})
    if isinstance(exc, Overloaded):
        extra["retry-after"] = str(int(exc.retry_after))
    return JSONResponse(exc.body(), status_code=exc.status, headers=extra)


def error_event(exc: VoxError, **extra: Any) -> dict[str, Any]:
    """`{"type": "error", "error": {...}}`: the HTTP body's `error` object in an event."""
    return {"type": "error", "error": exc.body()["error"], **extra}


def status_error(status: int, message: str) -> VoxError:
    """The `VoxError` for a status that Starlette's routing raised itself (404, 405...)."""
    error: VoxError = ClientError(message) if status < 500 else ServerError(message)
    error.status = status
    error.code = {404: "not_found", 405: "method_not_allowed"}.get(status)
    return error
