"""The life cycle of an engine whose work runs on its own worker threads: start, warm-up,
health and stop.

`WorkerEngine` owns the threads: it starts them, records the ones that die, reports
health, and at stop drains the engine and joins the threads within a bound. A subclass
supplies `_worker(index)` (one thread's loop; it returns once the engine drains),
`drain()` (refuse new work and fail the open requests, without blocking) and `_warm()`
(first-call costs paid before the first client). This module knows nothing of requests,
scheduling, models or HTTP.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import ClassVar

from voxserve.engine.threads import join_workers

__all__ = ["WorkerEngine"]

log = logging.getLogger(__name__)


class WorkerEngine(ABC):
    kind: ClassVar[str]
    """"tts" or "asr": names the threads (`tts-worker-0`) and the log lines."""
    stop_timeout_s: ClassVar[float]
    """How long `stop` waits for the workers unless told otherwise."""

    def __init__(self, workers: int) -> None:
        self._worker_count = workers
        self._threads: list[threading.Thread] = []
        self.dead_workers: list[str] = []
        """Names of worker threads that died; /health turns 503 while any is listed."""

    # -- what an engine supplies ---------------------------------------------------------
    @abstractmethod
    def _worker(self, index: int) -> None:
        """One worker thread's loop; returns when the engine drains."""

    @abstractmethod
    def drain(self) -> None:
        """Refuse new work and fail the open requests. Must not block."""

    @abstractmethod
    def _warm(self) -> None:
        """Run the models once so that first-call costs are not a client's."""

    def _worker_died(self, index: int, exc: BaseException) -> None:
        """Called on the dying thread after it was recorded: fail what it held."""

    # -- the life cycle ------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker threads."""
        for i in range(self._worker_count):
            t = threading.Thread(target=self._run_worker, args=(i,), name=f"{self.kind}-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def warmup(self) -> None:
        """`_warm`, timed in the log."""
        started = time.perf_counter()
        self._warm()
        log.info("%s warm-up took %.0f ms", self.kind.upper(), (time.perf_counter() - started) * 1e3)

    @property
    def healthy(self) -> bool:
        """No worker died and every one is running."""
        return not self.dead_workers and all(t.is_alive() for t in self._threads)

    def any_worker_alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def stop(self, timeout: float | None = None) -> None:
        """Drain, then wait up to `timeout` (default `stop_timeout_s`) for the workers to
        exit. A worker still inside a native inference call is left to finish; see
        `voxserve.engine.threads`."""
        self.drain()
        busy = join_workers(self._threads, self.stop_timeout_s if timeout is None else timeout)
        if busy:
            names = ", ".join(t.name for t in busy)
            log.warning("not waiting longer for %s, still in an inference call", names)

    def _run_worker(self, index: int) -> None:
        try:
            self._worker(index)
        except BaseException as exc:  # the thread ends here; /health reports it
            name = threading.current_thread().name
            log.critical("%s worker %s died: %r", self.kind.upper(), name, exc, exc_info=exc)
            self.dead_workers.append(name)
            self._worker_died(index, exc)
