"""The `x-request-id` a client sends: checked once, for every request, before any handler.

A client may name its request (`x-request-id: job-42.retry:1`); the server then echoes the
id in the response headers and writes it in its logs. An id is 1 to 128 characters from
`A-Z a-z 0-9 . _ : -`, so it can never carry a control character, a space or a line break
into a log line or a header, nor grow a log line without bound. Anything else is refused
with 400 `invalid_request_id` (param `x-request-id`), and the bad value is neither echoed
nor logged: the server never rewrites an id into something the client did not send. A
request without the header gets an id from the handler, as before.

Plain ASGI middleware for `http` scopes (WebSocket sessions name themselves). Handlers
read the header as usual: once past this middleware it holds one valid id or is absent.
"""

from __future__ import annotations

import re
from typing import Any

from voxserve.api.errors import error_response
from voxserve.errors import InvalidRequest

__all__ = ["MAX_REQUEST_ID", "CheckRequestId", "request_id_error"]

MAX_REQUEST_ID = 128
"""Longest accepted `x-request-id`, in characters."""

_VALID = re.compile(rb"[A-Za-z0-9._:-]{1,%d}" % MAX_REQUEST_ID)
_HEADER = b"x-request-id"
_WHAT = f"1 to {MAX_REQUEST_ID} characters from A-Z, a-z, 0-9 and . _ : -"


def request_id_error(headers: list[tuple[bytes, bytes]]) -> InvalidRequest | None:
    """Why the request's `x-request-id` header is refused, or None when it is absent or
    valid. `headers` are the ASGI scope's (names lower-case)."""
    values = [value for name, value in headers if name == _HEADER]
    if not values:
        return None
    if len(values) > 1:
        return _invalid(f"send one x-request-id header, not {len(values)}")
    if _VALID.fullmatch(values[0]) is None:
        size = "too long" if len(values[0]) > MAX_REQUEST_ID else "not a valid id"
        return _invalid(f"x-request-id is {size}; send {_WHAT}, or leave it out")
    return None


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message, param="x-request-id", code="invalid_request_id")


class CheckRequestId:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            error = request_id_error(scope.get("headers", []))
            if error is not None:
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
