"""Load shapes: a closed loop of C workers, or Poisson arrivals capped at C in flight.

This module only schedules calls of an async function and times the level; it knows
nothing of HTTP or of what a request is.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tqdm import tqdm

__all__ = ["LevelRun", "run_level"]

R = TypeVar("R")

RequestFn = Callable[[int, float], Awaitable[R]]
"""Called as fn(index, scheduled_at); scheduled_at is the perf_counter time the request
was due (the arrival time in Poisson mode, the moment a worker picked it up otherwise)."""


@dataclass
class LevelRun(Generic[R]):
    """Results of one level, in request order, and its wall time."""

    results: list[R]
    started_at: float
    """perf_counter at the start of the level."""
    wall_s: float
    """From the start of the level to the end of its last request."""
    client_lag_s: list[float] | None = None
    """The clients' event-loop lag samples where they ran in other processes (None:
    they ran on this loop, which measures its own)."""


async def run_level(
    fn: RequestFn[R],
    count: int,
    concurrency: int,
    request_rate: float | None = None,
    seed: int = 0,
    progress: bool = True,
    desc: str = "",
) -> LevelRun[R]:
    """Run `count` requests with at most `concurrency` in flight.

    Without a rate this is a closed loop: C workers, each sending its next request as soon
    as the previous one ends. With a rate (requests/s), arrivals follow a Poisson process;
    an arrival that finds C requests in flight waits, and that wait shows in the gap
    between its scheduled time and its send time.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if request_rate is not None and request_rate <= 0:
        raise ValueError(f"request rate must be positive, got {request_rate}")
    results: list[R | None] = [None] * count
    bar = tqdm(total=count, desc=desc, unit="req", disable=not progress, leave=True)
    started = time.perf_counter()

    async def one(index: int, scheduled: float) -> None:
        results[index] = await fn(index, scheduled)
        bar.update(1)

    try:
        if request_rate is None:
            next_index = iter(range(count))

            async def worker() -> None:
                for index in next_index:  # shared iterator: each index goes to one worker
                    await one(index, time.perf_counter())

            await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
        else:
            slots = asyncio.Semaphore(concurrency)
            rng = random.Random(seed)

            async def capped(index: int, scheduled: float) -> None:
                async with slots:
                    await one(index, scheduled)

            tasks = []
            due = started
            for index in range(count):
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(capped(index, due)))
                due += rng.expovariate(request_rate)
            await asyncio.gather(*tasks)
    finally:
        bar.close()
    wall = time.perf_counter() - started
    done = [r for r in results if r is not None]
    if len(done) != count:
        raise RuntimeError(f"{count - len(done)} requests produced no result")
    return LevelRun(done, started, wall)
