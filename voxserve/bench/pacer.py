"""A microphone on a fixed clock, for the live benches.

`AudioPacer` sends one frame of 16-bit PCM every `frame_s`, frame k at t0 + k * frame_s,
so a late frame never shifts the ones after it (no drift), and keeps the time each frame
was actually sent. Audio queued with `enqueue` goes out in order, sample-exact; whenever
nothing is queued the frames are silence, as a live microphone keeps sending. Because the
position of every sample in the stream is known, `sent(index)` tells when the frame that
held a given sample left the bench. Knows nothing of the wire format: it calls `send`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable

import numpy as np

__all__ = ["AudioPacer", "Send"]

Send = Callable[[bytes], Awaitable[None]]
"""Sends one frame of little-endian int16 PCM."""


class AudioPacer:
    """Sends queued audio, or silence, in frames of `frame_s` from start() to stop()."""

    def __init__(self, send: Send, rate: int, frame_s: float = 0.02):
        frame = rate * frame_s
        if frame_s <= 0 or abs(frame - round(frame)) > 1e-6:
            raise ValueError(f"a frame of {frame_s} s is not a whole number of samples at {rate} Hz")
        self.rate = rate
        self.frame_s = frame_s
        self.frame_samples = round(frame)
        self.started_at: float | None = None
        """perf_counter of frame 0's due time."""
        self.sent_at: list[float] = []
        """perf_counter just after frame k was handed to `send`, for every frame so far."""
        self.error: BaseException | None = None
        """Why sending stopped early (the connection failed)."""
        self._send = send
        self._queued: deque[tuple[int, np.ndarray]] = deque()
        self._queue_end = 0
        self._next_frame = 0
        self._waiters: list[tuple[int, asyncio.Future[float]]] = []
        self._task: asyncio.Task[None] | None = None

    def enqueue(self, samples: np.ndarray) -> int:
        """Queue int16 samples after everything queued; returns the stream index of the first.

        When nothing is queued the audio starts with the next frame not yet built.
        """
        start = max(self._queue_end, self._next_frame * self.frame_samples)
        self._queued.append((start, samples.astype("<i2", copy=False)))
        self._queue_end = start + len(samples)
        return start

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._fail_waiters(self.error or ConnectionError("the pacer stopped"))

    async def sent(self, index: int) -> float:
        """perf_counter at which the frame holding stream sample `index` was sent.

        Waits for that frame; raises the send error if sending stopped before it.
        """
        frame = index // self.frame_samples
        if frame < len(self.sent_at):
            return self.sent_at[frame]
        if self.error is not None:
            raise self.error
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters.append((frame, future))
        return await future

    def lateness(self) -> list[float]:
        """For every frame sent, seconds from its due time to when it was sent."""
        if self.started_at is None:
            return []
        t0, step = self.started_at, self.frame_s
        return [at - (t0 + k * step) for k, at in enumerate(self.sent_at)]

    def _frame(self, k: int) -> bytes:
        n = self.frame_samples
        lo, hi = k * n, (k + 1) * n
        out = np.zeros(n, dtype="<i2")
        for start, samples in self._queued:
            if start >= hi:
                break
            a, b = max(lo, start), min(hi, start + len(samples))
            if b > a:
                out[a - lo : b - lo] = samples[a - start : b - start]
        while self._queued and self._queued[0][0] + len(self._queued[0][1]) <= hi:
            self._queued.popleft()
        self._next_frame = k + 1
        return out.tobytes()

    async def _run(self) -> None:
        t0 = self.started_at = time.perf_counter()
        k = 0
        try:
            while True:
                delay = t0 + k * self.frame_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._send(self._frame(k))
                self.sent_at.append(time.perf_counter())
                if self._waiters:
                    ready = [(f, w) for f, w in self._waiters if f <= k]
                    self._waiters = [(f, w) for f, w in self._waiters if f > k]
                    for frame, waiter in ready:
                        if not waiter.done():
                            waiter.set_result(self.sent_at[frame])
                k += 1
        except (OSError, RuntimeError) as exc:  # the connection went away: waiters learn why
            self.error = exc
            self._fail_waiters(exc)

    def _fail_waiters(self, exc: BaseException) -> None:
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(exc)
        self._waiters = []
