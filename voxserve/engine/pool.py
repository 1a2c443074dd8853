"""A thread pool with a bounded backlog, awaited from the event loop.

`ThreadPoolExecutor` queues without limit. This wrapper counts the calls submitted and not
yet finished; past `max_pending` a new call is refused with 429 at once instead of
joining an ever-longer line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from voxserve.engine.threads import prestart
from voxserve.errors import Overloaded

__all__ = ["BoundedPool"]

P = ParamSpec("P")
T = TypeVar("T")


class BoundedPool:
    def __init__(self, workers: int, max_pending: int, name: str):
        self.executor = ThreadPoolExecutor(max(1, workers), thread_name_prefix=name)
        prestart(self.executor, max(1, workers))
        self.max_pending = max_pending
        self.name = name
        self.pending = 0

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self.pending >= self.max_pending:
            raise Overloaded(f"the {self.name} pool has {self.pending} jobs waiting; retry later")
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))
        finally:
            self.pending -= 1

    def start(self, fn: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """Run `fn` on the pool and do not wait for it: the tail of work something already
        admitted began (bounded by what admits it, so not refused here). `fn` handles its
        own errors."""
        self.executor.submit(fn, *args, **kwargs)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
