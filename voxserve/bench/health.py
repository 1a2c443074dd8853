"""Liveness while the load runs: the server's `/health` latency, and the bench's own loop lag.

`HealthProber` runs in its own thread with its own event loop, so a busy load-generating
loop cannot delay its timers; it probes `GET /health` on a fixed 50 ms schedule over one
keep-alive connection. `LoopLag` samples how late the bench's own loop wakes up: when it
is large, the client, not the server, is the bottleneck.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import aiohttp

from voxserve.bench.metrics import summarize

__all__ = ["HealthProber", "LoopLag", "Probe", "summarize_probes"]


@dataclass(frozen=True)
class Probe:
    at: float
    """perf_counter just before the probe was sent."""
    latency_s: float
    """Until the whole response was read, or until it failed."""
    status: int
    """HTTP status; 0 for a connection error or timeout."""


def summarize_probes(probes: list[Probe]) -> dict[str, float]:
    """Latency mean/p50/p95/p99/max of every probe (failed ones count with their time)."""
    out = summarize([p.latency_s for p in probes])
    out["failures"] = float(sum(1 for p in probes if p.status != 200))
    return out


class HealthProber:
    """Probes `base_url + path` every `interval_s` from start() to stop()."""

    def __init__(self, base_url: str, interval_s: float = 0.05, timeout_s: float = 10.0,
                 path: str = "/health"):
        if interval_s <= 0:
            raise ValueError(f"probe interval must be positive, got {interval_s}")
        self.url = base_url.rstrip("/") + path
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.probes: list[Probe] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),),
                                        name="bench-health", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> list[Probe]:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(self.timeout_s + 5)
        return self.probes

    def between(self, start: float, end: float) -> list[Probe]:
        return [p for p in list(self.probes) if start <= p.at < end]

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            due = time.perf_counter()
            while not self._stop.is_set():
                self.probes.append(await self._probe(session))
                # Fixed schedule; after a slow probe, restart it instead of bursting.
                due = max(due + self.interval_s, time.perf_counter())
                try:
                    await asyncio.wait_for(self._stop.wait(), due - time.perf_counter())
                except TimeoutError:
                    pass

    async def _probe(self, session: aiohttp.ClientSession) -> Probe:
        sent = time.perf_counter()
        try:
            async with session.get(self.url) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError):
            status = 0
        return Probe(sent, time.perf_counter() - sent, status)


class LoopLag:
    """Samples how late the current event loop runs a timer due every `interval_s`."""

    def __init__(self, interval_s: float = 0.01):
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def between(self, start: float, end: float) -> list[float]:
        return [lag for at, lag in self.samples if start <= at < end]

    async def _run(self) -> None:
        while True:
            due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            now = time.perf_counter()
            self.samples.append((now, max(0.0, now - due)))
