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

numpy's OpenBLAS starts a thread per core for any product past a small size and lets
them spin between calls. The server's parallelism is its own threads, so those extra
threads only fight the inference threads for the cores, and a product that takes well
under a millisecond alone waits for cores the workers hold. `single_threaded_blas` turns
them off; call it at start-up.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = [
    "in_native_background",
    "join_workers",
    "lower_priority",
    "prestart",
    "run_lowered",
    "single_threaded_blas",
    "stragglers",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

_AT_EXIT_WAIT_S = 30.0

_stragglers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

_BLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",  # numpy >= 2 wheels (scipy-openblas, 64-bit ints)
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


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


def single_threaded_blas() -> bool:
    """Make numpy's OpenBLAS run every product on the calling thread; True when an
    OpenBLAS was found and told. Does nothing elsewhere (another BLAS, not Linux)."""
    import numpy  # noqa: F401 - loads the OpenBLAS that numpy links

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter.argtypes = [ctypes.c_int]
                setter(1)
                return True
    log.info("no OpenBLAS found to make single-threaded")
    return False


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


def in_native_background(thread: threading.Thread) -> None:
    """A background thread that may be inside a native call when the process ends (a
    model's start-up work that outlives a quick stop): it counts among the stragglers, so
    the exit hook waits for it and `voxserve serve` leaves with `os._exit` while it runs,
    instead of finalizing the native library under it."""
    _stragglers.add(thread)


def stragglers() -> list[threading.Thread]:
    """Workers that a stop stopped waiting for, and background threads in native calls
    (`in_native_background`), that are still running."""
    return [t for t in list(_stragglers) if t.is_alive()]


@atexit.register
def _wait_for_stragglers() -> None:
    join_workers(stragglers(), _AT_EXIT_WAIT_S)
