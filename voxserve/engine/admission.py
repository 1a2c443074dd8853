"""Admission control on the event loop: at most `limit` active streams, a bounded FIFO of
waiters behind them, and 429 past the queue or after the wait times out. Every wait is
cancellable: a client that leaves while queued simply drops out of the line."""

from __future__ import annotations

import asyncio
from collections import deque

from voxserve.errors import Overloaded

__all__ = ["Admission"]


class Admission:
    def __init__(self, limit: int, max_queue: int, timeout_s: float):
        if limit < 1 or max_queue < 0:
            raise ValueError("limit must be >= 1 and max_queue >= 0")
        self.limit = limit
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.rejected = 0

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _retry_after(self) -> float:
        return max(1.0, round(1.0 + self.queued / max(1, self.limit)))

    async def acquire(self) -> None:
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return
        if len(self._waiters) >= self.max_queue:
            self.rejected += 1
            raise Overloaded(
                f"server is at capacity ({self.limit} streams, {self.max_queue} queued); "
                "retry later",
                retry_after=self._retry_after(),
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return  # granted at the last moment: keep the slot
            self._drop(waiter)
            self.rejected += 1
            raise Overloaded(
                f"no stream slot freed within {self.timeout_s:g} s; retry later",
                retry_after=self._retry_after(),
            ) from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted, but the caller is gone: pass the slot on
            else:
                self._drop(waiter)
            raise

    def _drop(self, waiter: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
        waiter.cancel()

    def release(self) -> None:
        """Free a slot: hand it straight to the oldest waiter, if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return  # the slot moves to the waiter; `active` is unchanged
        self.active -= 1
