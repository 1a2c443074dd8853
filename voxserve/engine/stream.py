"""The bounded hand-off from inference workers to one response writer.

Workers `put` from their threads; the writer takes with `await get()` on the event loop
or `get_blocking()` from a plain thread. The scheduler's credits bound how many items can
be waiting, so this never grows past `credits` + 1. Wake-ups use an asyncio future set
through `call_soon_threadsafe`, or a condition variable: never polling.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from voxserve.engine.words import WordTime

__all__ = ["ChunkStream", "FirstPacket", "StreamFailed", "StreamItem"]


class StreamFailed(RuntimeError):
    """The engine could not finish this stream."""


@dataclass(frozen=True)
class FirstPacket:
    """Where a stream's first chunk spent its time inside the engine: `time.perf_counter`
    stamps, from `submit` to the chunk being handed to the writer."""

    submitted: float
    acoustic_start: float
    """Stage A of the first segment began (after waiting for a worker)."""
    acoustic_end: float
    decode_start: float
    """The first chunk's decode began (after waiting for a worker)."""
    decode_end: float
    ready: float
    """Gain, resampling and the hand-off done: the writer may take it."""
    acoustic_threads: int = 1
    decode_threads: int = 1


@dataclass(frozen=True)
class StreamItem:
    pcm: np.ndarray
    """int16 mono samples at the stream's output rate."""
    last: bool
    words: tuple[WordTime, ...] = ()
    """The words of the segment this chunk starts, in seconds of the stream's audio
    (empty unless the chunk is a segment's first and the model times its words)."""
    first_packet: FirstPacket | None = None
    """On the stream's first chunk: where its time went in the engine."""


class ChunkStream:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop
        self._items: deque[StreamItem] = deque()
        self._error: BaseException | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    # -- producer side (any thread) --------------------------------------------------
    def put(self, item: StreamItem) -> None:
        with self._cond:
            if self._closed:
                return
            self._items.append(item)
            self._wake()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            if self._closed:
                return
            self._error = error
            self._wake()

    def _wake(self) -> None:
        self._cond.notify_all()
        waiter = self._waiter
        if waiter is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(_resolve, waiter)

    # -- consumer side ---------------------------------------------------------------
    def _pop(self) -> StreamItem | None:
        if self._items:
            return self._items.popleft()
        if self._error is not None:
            raise StreamFailed(str(self._error)) from self._error
        return None

    async def get(self) -> StreamItem:
        """Next item; raises StreamFailed if the engine failed this stream."""
        assert self._loop is not None, "stream was made without an event loop"
        while True:
            with self._cond:
                item = self._pop()
                if item is not None:
                    return item
                self._waiter = self._loop.create_future()
                waiter = self._waiter
            try:
                await waiter
            finally:
                with self._cond:
                    self._waiter = None

    def get_blocking(self, timeout: float | None = None) -> StreamItem:
        with self._cond:
            while True:
                item = self._pop()
                if item is not None:
                    return item
                if not self._cond.wait(timeout):
                    raise TimeoutError("no audio within the timeout")

    def close(self) -> None:
        """The consumer is gone: drop buffered audio and ignore further puts."""
        with self._cond:
            self._closed = True
            self._items.clear()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
