"""Worker threads: their CPU priority, and joining them at shutdown with a bound.

Batch work (transcription) runs at a lower priority than real-time work (speech), so
that under overload the OS gives the cores to the streams that must not underrun and
transcription takes what is left. A thread's nice value is its own on Linux, and threads
inherit it from the thread that creates them: `run_lowered` builds a native library's
thread pool from a lowered thread, so the pool's threads are lowered too.


A worker inside a native inference call (a whisper batch can take seconds) cannot be
interrupted, and its result is no longer wanted once the engine drained. `join_workers`
waits at most `timeout` and remembers the threads still running. Letting the interpreter
finalize under such a thread can crash in the native library's teardown (seen with
CTranslate2), so an exit hook waits for them; a process that must exit at once instead
checks `stragglers()` and leaves with `os._exit` (as `voxserve serve` does).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["join_workers", "lower_priority", "prestart", "run_lowered", "stragglers"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_AT_EXIT_WAIT_S = 30.0

_stragglers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def lower_priority(nice: int) -> None:
    """Raise the calling thread's nice value by `nice` (0 leaves it alone; Linux only)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + nice))
    except OSError as exc:  # pragma: no cover - a sandbox that forbids it
        log.warning("could not lower the priority of thread %d: %s", tid, exc)


def run_lowered(nice: int, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a new thread whose priority is lowered by `nice`; threads that it
    starts inherit that priority. Returns its result or raises its exception."""
    if nice <= 0:
        return fn(*args)
    with ThreadPoolExecutor(1, thread_name_prefix="lowered-init", initializer=lower_priority,
                            initargs=(nice,)) as one:
        return one.submit(fn, *args).result()


def prestart(executor: ThreadPoolExecutor, workers: int) -> None:
    """Start all `workers` threads of `executor` now. It would otherwise start them one by
    one as load first rises, and a process's thread count is easier to watch for leaks
    when it is fixed from the start."""
    gate = threading.Barrier(workers)
    for future in [executor.submit(gate.wait, 10.0) for _ in range(workers)]:
        future.result()


def join_workers(threads: Iterable[threading.Thread], timeout: float) -> list[threading.Thread]:
    """Join `threads` within `timeout` seconds in all; returns those still running."""
    deadline = time.monotonic() + timeout
    busy = []
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            busy.append(t)
            _stragglers.add(t)
    return busy


def stragglers() -> list[threading.Thread]:
    """Workers that a stop stopped waiting for and that are still running."""
    return [t for t in list(_stragglers) if t.is_alive()]


@atexit.register
def _wait_for_stragglers() -> None:
    join_workers(stragglers(), _AT_EXIT_WAIT_S)
