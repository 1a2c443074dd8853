"""One structured access line per request, written when the response ends.

Plain ASGI middleware (it wraps `send`, so streaming is untouched). The line holds the
request id, method, route, status, time to the first body byte (for speech, the first
audio) and total duration. It never logs bodies: no audio and no input text.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["AccessLog"]

log = logging.getLogger("voxserve.access")


class AccessLog:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        request_id = "-"
        first_byte: float | None = None

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status, request_id, first_byte
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() == b"x-request-id":
                        request_id = value.decode("latin-1")
            elif message["type"] == "http.response.body" and first_byte is None and message.get("body"):
                first_byte = time.perf_counter() - started
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if log.isEnabledFor(logging.INFO):
                route = getattr(scope.get("route"), "path", None) or scope.get("path", "?")
                ttfb = "-" if first_byte is None else f"{first_byte * 1e3:.1f}"
                log.info(
                    "request_id=%s method=%s route=%s status=%d ttfb_ms=%s duration_ms=%.1f",
                    request_id,
                    scope.get("method", "?"),
                    route,
                    status or 500,
                    ttfb,
                    (time.perf_counter() - started) * 1e3,
                )
