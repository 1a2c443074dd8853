"""Whether some work grows linearly with its input, judged against itself in one run.

A worst-case input is timed at full size and at a quarter of it, each the best of three
runs in CPU time of this thread (a busy machine inflates wall time, not this). Linear
work takes about four times as long on four times the input, quadratic work sixteen
times; the bound sits between, with a few milliseconds for the timer and the
allocator. The machine's speed cancels out, so the check holds on a slow runner and a
fast one alike."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["GROWTH_BOUND", "cpu_seconds", "grows_linearly"]

GROWTH_BOUND = 8.0
"""At most this many times the quarter-size input's time, for four times the input."""
SLACK_S = 0.005


def cpu_seconds(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def grows_linearly(run: Callable[[int], object], size: int) -> tuple[bool, str]:
    """Whether `run(size)` takes at most `GROWTH_BOUND` times `run(size // 4)`, and the
    two times, for the assertion's message."""
    quarter = cpu_seconds(lambda: run(size // 4))
    whole = cpu_seconds(lambda: run(size))
    return whole <= GROWTH_BOUND * quarter + SLACK_S, f"{size // 4}: {quarter * 1e3:.1f} ms, {size}: {whole * 1e3:.1f} ms"
