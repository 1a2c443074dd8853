"""`RequestCounter`: plain ASGI middleware that counts HTTP responses by route and status
in the app's `Metrics` (`voxserve.serving.metrics`). It never reads a body."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from voxserve.serving.metrics import Metrics

__all__ = ["RequestCounter"]


class RequestCounter:
    """Plain ASGI middleware: counts responses by route template and status."""

    def __init__(self, app: Any, metrics: Callable[[], Metrics | None]):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [500]

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            metrics = self.metrics()
            if metrics is not None:
                route = scope.get("route")
                path = getattr(route, "path", None) or "unmatched"
                with contextlib.suppress(Exception):
                    metrics.requests.labels(path, str(status[0])).inc()
