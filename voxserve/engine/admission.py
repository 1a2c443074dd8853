"""Admission control on the event loop: at most `limit` active streams, a bounded FIFO of
waiters behind them, and 429 past the queue or after the wait times out.

An optional `gate(active, kind)` says whether the engine can take one more stream right
now (no live stream is about to underrun, and the load with it stays within what the
workers sustain); it is told how many streams are admitted and the `kind` the waiter
named (its voice model; None if it did not say). While it says no, newcomers wait even
below `limit`, in order; a timer re-asks it every `recheck_s` while anyone waits. With
nothing active, the gate is not asked: one stream always runs. Every wait is cancellable: a client that leaves while
queued simply drops out of the line. `close()` (at shutdown) answers every waiter and
every later caller with 503.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from voxserve.errors import Overloaded, Unavailable

__all__ = ["Admission"]


Gate = Callable[[int, str | None], bool]
"""gate(active, kind): whether one more stream of `kind` fits now."""


class Admission:
    def __init__(
        self,
        limit: int,
        max_queue: int,
        timeout_s: float,
        gate: Gate | None = None,
        recheck_s: float = 0.05,
    ):
        if limit < 1 or max_queue < 0:
            raise ValueError("limit must be >= 1 and max_queue >= 0")
        self.limit = limit
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self.gate = gate
        self.recheck_s = recheck_s
        self.active = 0
        self.rejected = 0
        self.gated = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._kinds: dict[asyncio.Future[None], str | None] = {}
        """The kind each waiter named, for the gate."""
        self._timer: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _retry_after(self) -> float:
        return max(1.0, round(1.0 + self.queued / max(1, self.limit)))

    def _room(self, kind: str | None) -> bool:
        if self.active >= self.limit:
            return False
        if self.active == 0 or self.gate is None:
            return True
        if self.gate(self.active, kind):
            return True
        self.gated += 1
        return False

    def refuse_if_full(self) -> None:
        """Raise now what `acquire` would raise at once (503 when closed, 429 when the
        queue is full), so that a request about to be refused skips its costly
        preparation. It takes nothing and asks no gate; `acquire` decides the rest."""
        if self._closed:
            raise Unavailable("server is shutting down")
        if len(self._waiters) >= self.max_queue and (self._waiters or self.active >= self.limit):
            self._refuse()

    def _refuse(self) -> None:
        self.rejected += 1
        raise Overloaded(
            f"server is at capacity ({self.active} streams, {self.queued} queued); retry later",
            retry_after=self._retry_after(),
        )

    async def acquire(self, kind: str | None = None) -> None:
        """Take a slot, waiting in line if need be; `kind` is passed to the gate."""
        if self._closed:
            raise Unavailable("server is shutting down")
        if not self._waiters and self._room(kind):
            self.active += 1
            return
        if len(self._waiters) >= self.max_queue:
            self._refuse()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._kinds[waiter] = kind
        self._arm_timer()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except TimeoutError:
            if _granted(waiter):
                return  # granted at the last moment: keep the slot
            self._drop(waiter)
            self.rejected += 1
            raise Overloaded(
                f"no stream slot freed within {self.timeout_s:g} s; retry later",
                retry_after=self._retry_after(),
            ) from None
        except BaseException:
            if _granted(waiter):
                self.release()  # granted, but the caller is gone: pass the slot on
            else:
                self._drop(waiter)
            raise

    def _drop(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        self._kinds.pop(waiter, None)
        waiter.cancel()

    def _grant(self) -> None:
        """Admit waiters, oldest first, while there is room."""
        while self._waiters and self._room(self._kinds.get(self._waiters[0])):
            waiter = self._waiters.popleft()
            self._kinds.pop(waiter, None)
            if not waiter.done():
                self.active += 1
                waiter.set_result(None)

    def release(self) -> None:
        self.active -= 1
        self._grant()

    def _arm_timer(self) -> None:
        if self.gate is not None and (self._timer is None or self._timer.done()):
            self._timer = asyncio.get_running_loop().create_task(self._recheck())

    async def _recheck(self) -> None:
        while self._waiters:
            await asyncio.sleep(self.recheck_s)
            self._grant()

    def close(self) -> None:
        """Refuse every waiter and every later call with 503 (the server is stopping)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._kinds.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(Unavailable("server is shutting down"))


def _granted(waiter: asyncio.Future[None]) -> bool:
    return waiter.done() and not waiter.cancelled() and waiter.exception() is None
