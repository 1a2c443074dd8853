"""The server process's policy for Python's cyclic garbage collector: `collector_policy`,
set once at start-up (`running_state`) and applied as is by the scheduler's benchmark
(`scripts/bench/scheduler_step.py`). It owns the collector's thresholds and nothing else;
it never runs or disables a collection.

The collector runs a young collection once the GC-tracked objects made and not yet
freed since the last one pass the first threshold (CPython's default: 700). A batched
step makes one work item per unit, up to 128, and frees them when it completes, two
steps in flight; streams that start and end make and free their state. At 1,000 streams
that churn moves the count past 700 every 70 or so steps, always while a step is
gathered (it makes the most objects at once), under the engine lock, and the collection
then scans everything made since the last one and still alive, a pause inside the
step. `GEN0_THRESHOLD` lets the churn of steps in flight pass without one; the
older generations keep CPython's thresholds. docs/BENCHMARKS.md ("The scheduler's step")
gives the figures, and the collections and memory of a server under load with and
without it.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "collector_policy"]

GEN0_THRESHOLD = 10_000
"""Net new GC-tracked objects that start a young collection: more than the steps in flight
at 1,000 streams make before they free them, with room for the event loop's own churn
(`scripts/bench/scheduler_step.py` counts the steps that hold a collection)."""


def collector_policy() -> None:
    """Set the collector's first threshold to `GEN0_THRESHOLD`, leaving the older
    generations' as they are."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
