"""Batch speech: many short inputs in one request, each spoken as an ordinary stream.

Each item is a `SpeechParams` of its own (model, voice, speed, format and the rest), and
runs through `Service.open_speech` as a single request would: the same admission, queue,
deadlines and credits, here or on a Ray replica. A batch takes stream slots only through
`BatchSlots`, which lets all batches together hold at most half of the server's streams,
so a batch cannot starve live streams of slots. Results keep the items' order; an item
that fails after the batch was accepted carries its error and the others go on. No HTTP.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from voxserve.errors import ServerError, VoxError
from voxserve.serving.service import Service
from voxserve.serving.speech import SpeechParams
from voxserve.serving.waiting import Gone

__all__ = ["BatchResult", "BatchSlots", "speak_batch"]

log = logging.getLogger(__name__)


class BatchSlots:
    """The streams every batch together may hold at once: half of `streams`, at least 1."""

    def __init__(self, streams: int):
        self.limit = max(1, streams // 2)
        self._semaphore = asyncio.Semaphore(self.limit)

    async def __aenter__(self) -> None:
        await self._semaphore.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._semaphore.release()


@dataclass(frozen=True)
class BatchResult:
    """One item's audio (encoded in its format), or the error that stopped it."""

    index: int
    params: SpeechParams
    audio: bytes = b""
    sample_rate: int = 0
    error: VoxError | None = None


async def speak_batch(
    service: Service,
    items: list[SpeechParams],
    request_id: str,
    started: float,
    gone: Gone,
    slots: BatchSlots,
) -> list[BatchResult]:
    """Speak every item, at most `slots` at once across batches; results in item order.
    A client that leaves ends the batch's waits and streams (`gone`)."""

    async def one(index: int, params: SpeechParams) -> BatchResult:
        async with slots:
            try:
                stream = await service.open_speech(params, f"{request_id}-{index}", started, gone)
            except VoxError as exc:
                return BatchResult(index, params, error=exc)
            completed = False
            parts: list[bytes] = []
            try:
                async for chunk in stream.chunks():
                    parts.append(chunk.data)
                completed = True
            except VoxError as exc:
                return BatchResult(index, params, error=exc)
            except Exception as exc:  # one item fails, not the batch
                log.exception("batch %s item %d failed", request_id, index)
                return BatchResult(index, params, error=ServerError(f"synthesis failed ({type(exc).__name__})"))
            finally:
                stream.close(completed)
            return BatchResult(index, params, b"".join(parts), stream.sample_rate)

    tasks = [asyncio.ensure_future(one(i, params)) for i, params in enumerate(items)]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
