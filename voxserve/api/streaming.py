"""A streaming ASGI response that notices a vanished client at once.

Starlette's StreamingResponse is not enough here: a stream that is waiting for audio
must learn about a disconnect while it waits, so that its engine work is dropped within
milliseconds. This response watches `receive()` beside the producer and cancels the
producer on `http.disconnect`. `on_close` always runs exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["StreamResponse"]

log = logging.getLogger(__name__)

Scope = dict[str, Any]


class StreamResponse:
    def __init__(
        self,
        body: AsyncIterator[bytes],
        media_type: str,
        headers: dict[str, str] | None = None,
        on_close: Callable[[bool], None] | None = None,
        status: int = 200,
    ):
        self.body = body
        self.status = status
        self.headers = {"content-type": media_type, "cache-control": "no-store", **(headers or {})}
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        disconnected = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.set()
                    producer.cancel()
                    return

        async def produce() -> None:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status,
                    "headers": [(k.encode(), v.encode()) for k, v in self.headers.items()],
                }
            )
            async for data in self.body:
                if data:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        producer = asyncio.ensure_future(produce())
        watcher = asyncio.ensure_future(watch())
        completed = False
        try:
            await producer
            completed = True
        except asyncio.CancelledError:
            if not disconnected.is_set():
                raise  # the server is cancelling us, not the client
        except OSError:
            pass  # peer reset while writing
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            aclose = getattr(self.body, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            if self.on_close is not None:
                try:
                    self.on_close(completed)
                except Exception:  # pragma: no cover - cleanup must not mask the stream
                    log.exception("stream cleanup failed")
