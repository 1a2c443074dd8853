"""Joining inference worker threads at shutdown, with a bound.

A worker inside a native inference call (a whisper batch can take seconds) cannot be
interrupted, and its result is no longer wanted once the engine drained. `join_workers`
waits at most `timeout` and remembers the threads still running. Letting the interpreter
finalize under such a thread can crash in the native library's teardown (seen with
CTranslate2), so an exit hook waits for them; a process that must exit at once instead
checks `stragglers()` and leaves with `os._exit` (as `voxserve serve` does).
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Iterable

__all__ = ["join_workers", "stragglers"]

_AT_EXIT_WAIT_S = 30.0

_stragglers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


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
