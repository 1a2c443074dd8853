"""Per-request, in-order results of the ASR stage.

Workers finish a request's pieces in any order and `put` them from their threads; the
reader gets them in index order, with `await get()` on the event loop or `get_blocking()`
from a plain thread. The feeder waits in `wait_room` until fewer than `limit` of its
submitted pieces are unfinished, which bounds the features a request holds. Wake-ups go
through futures set with `call_soon_threadsafe`, or a condition variable: never polling.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from voxserve.engine.stream import StreamFailed

__all__ = ["ResultStream", "StreamFailed"]

T = TypeVar("T")


class ResultStream(Generic[T]):
    def __init__(self, total: int, loop: asyncio.AbstractEventLoop | None = None):
        self.total = total
        self._loop = loop
        self._cond = threading.Condition()
        self._pending: dict[int, T] = {}
        self._next = 0
        self._finished = 0
        self._error: BaseException | None = None
        self._closed = False
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def finished(self) -> int:
        """Pieces done so far, in any order."""
        with self._cond:
            return self._finished

    # -- producer side (any thread) ----------------------------------------------------
    def put(self, index: int, item: T) -> None:
        with self._cond:
            if self._closed or index < self._next or index in self._pending:
                return
            self._pending[index] = item
            self._finished += 1
            self._wake()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            if self._closed or self._error is not None:
                return
            self._error = error
            self._wake()

    def _wake(self) -> None:
        self._cond.notify_all()
        if self._loop is not None:
            for waiter in self._waiters:
                self._loop.call_soon_threadsafe(_resolve, waiter)

    # -- consumer side -----------------------------------------------------------------
    def _pop(self) -> tuple[bool, T | None]:
        """(True, item), (True, None) after the last piece, or (False, None) to wait."""
        if self._next in self._pending:
            item = self._pending.pop(self._next)
            self._next += 1
            return True, item
        if self._error is not None:
            raise StreamFailed(str(self._error)) from self._error
        if self._next >= self.total:
            return True, None
        return False, None

    async def _wait(self, ready: Callable[[], bool]) -> None:
        assert self._loop is not None, "stream was made without an event loop"
        while True:
            with self._cond:
                if ready():
                    return
                waiter = self._loop.create_future()
                self._waiters.add(waiter)
            try:
                await waiter
            finally:
                with self._cond:
                    self._waiters.discard(waiter)

    async def get(self) -> T | None:
        """The next piece in order, None after the last; raises StreamFailed on error."""
        result: list[T | None] = []

        def ready() -> bool:
            ok, item = self._pop()
            if ok:
                result.append(item)
            return ok

        await self._wait(ready)
        return result[0]

    def get_blocking(self, timeout: float | None = None) -> T | None:
        with self._cond:
            while True:
                ok, item = self._pop()
                if ok:
                    return item
                if not self._cond.wait(timeout):
                    raise TimeoutError("no transcription result within the timeout")

    async def wait_room(self, submitted: int, limit: int) -> None:
        """Return once fewer than `limit` of the `submitted` pieces are unfinished."""

        def ready() -> bool:
            if self._error is not None or self._closed:
                return True
            return submitted - self._finished < limit

        await self._wait(ready)

    def close(self) -> None:
        """The reader is gone: drop results and ignore further puts."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._wake()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
