"""A per-request deadline (`--request-timeout`): no HTTP request lives longer than it.

Plain ASGI middleware. When the time is up, the request's task is cancelled, which runs
the same clean-up as a client that disconnects (admission slots, engine work, queued ASR
pieces). The answer depends on how far the request got:
- its body had not fully arrived (a client uploading too slowly): 408;
- the response had not started (the server could not finish in time): 504;
- the response was streaming: it ends without its final chunk, so the client sees a
  truncated body, the same as any other failure after the first byte.
Both errors are in the OpenAI shape.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from voxserve.api.errors import error_response
from voxserve.errors import RequestTimeout, TimedOut

__all__ = ["RequestDeadline"]

log = logging.getLogger(__name__)


def _has_body(scope: dict[str, Any]) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
    return False


class RequestDeadline:
    def __init__(self, app: Any, timeout_s: float):
        if timeout_s <= 0:
            raise ValueError("the request timeout must be positive")
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = not _has_body(scope)
        started = False

        async def receive_watched() -> Any:
            nonlocal body_done
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_done = True
            return message

        async def send_watched(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                await self.app(scope, receive_watched, send_watched)
        except TimeoutError:
            if not deadline.expired():
                raise  # some other timeout inside the app, not ours
            path = scope.get("path", "?")
            if started:
                log.warning("%s ran past the %g s request timeout; its stream was cut off", path, self.timeout_s)
                return  # no final chunk: the server closes the connection
            if not body_done:
                error: RequestTimeout | TimedOut = RequestTimeout(
                    f"the request body did not arrive within {self.timeout_s:g} s; "
                    "send it faster or in a smaller file"
                )
            else:
                error = TimedOut(f"the server could not answer within the {self.timeout_s:g} s request timeout")
            log.warning("%s: %s", path, error.message)
            await error_response(error)(scope, receive, send)
