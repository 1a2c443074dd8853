"""A streaming ASGI response that notices a vanished client at once.

Starlette's StreamingResponse is not enough here:
- a stream that is waiting for audio must learn about a disconnect while it waits, so
  that its engine work is dropped within milliseconds. This response watches `receive()`
  beside the producer and cancels the producer on `http.disconnect`;
- the status line waits for the body's first bytes, so a failure before any audio is
  still a proper JSON error (a `VoxError` rendered in the OpenAI shape);
- a failure after bytes went out ends the body without its final chunk: the client sees
  a truncated response, never a clean end of a broken stream.

A response wraps a body iterator and one `close(completed)`, which always runs exactly
once, after the body is closed: the stream handle's close (`voxserve.serving`).

Before a response starts, a handler that waits (for a stream slot, a transcript, a Ray
replica) uses `voxserve.serving.waiting.unless_gone` with `until_disconnect`, so a client
that leaves meanwhile cancels the wait and its work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request

from voxserve.api.errors import error_response
from voxserve.errors import VoxError

__all__ = ["StreamResponse", "until_disconnect"]

log = logging.getLogger(__name__)


async def until_disconnect(request: Request) -> None:
    """Return when the client closes the connection (reads and drops the rest of the body)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class StreamResponse:
    def __init__(
        self,
        body: AsyncIterator[bytes],
        media_type: str,
        headers: dict[str, str] | None = None,
        close: Callable[[bool], None] | None = None,
        status: int = 200,
        late_headers: dict[str, str] | None = None,
    ):
        """`late_headers`: a dict the body may fill until its first bytes (what only the
        first chunk tells, such as its Server-Timing); sent with the status line."""
        self.body = body
        self.status = status
        self.headers = {"content-type": media_type, "cache-control": "no-store", **(headers or {})}
        self.late_headers = late_headers
        self._close = close

    async def _first_bytes(self) -> bytes | None:
        """The first non-empty piece of the body, or None if it ends empty."""
        async for data in self.body:
            if data:
                return data
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        disconnected = asyncio.Event()
        producer = asyncio.ensure_future(self._produce(scope, receive, send))
        watcher = asyncio.ensure_future(_watch(receive, producer, disconnected))
        completed = False
        try:
            completed = await producer
        except asyncio.CancelledError:
            if not disconnected.is_set():
                raise  # the server is cancelling us, not the client
        except OSError:
            pass  # peer reset while writing
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            await self._finish(completed)

    async def _produce(self, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """Send the response; True when the body ended whole."""
        try:
            first = await self._first_bytes()
        except VoxError as exc:
            await error_response(exc)(scope, receive, send)
            return False
        headers = {**self.headers, **(self.late_headers or {})}
        start = [(k.encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": self.status, "headers": start})
        if first is not None:
            await send({"type": "http.response.body", "body": first, "more_body": True})
            try:
                async for data in self.body:
                    if data:
                        await send({"type": "http.response.body", "body": data, "more_body": True})
            except VoxError as exc:
                log.error("stream truncated after it started: %s", exc.message)
                return False  # no final chunk: the server closes the connection
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    async def _finish(self, completed: bool) -> None:
        """Close the body, then run `close(completed)`."""
        aclose = getattr(self.body, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        if self._close is not None:
            try:
                self._close(completed)
            except Exception:  # pragma: no cover - cleanup must not mask the stream
                log.exception("stream cleanup failed")


async def _watch(receive: Any, producer: asyncio.Future[bool], disconnected: asyncio.Event) -> None:
    """Cancel `producer` as soon as the client disconnects."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            disconnected.set()
            producer.cancel()
            return
