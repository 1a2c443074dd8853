"""Which TTS replica should take the next stream: a pure policy, without Ray.

Each replica reports its routing stats (`TTSReplica.record_routing_stats`): the streams it
runs and queues, and the capacity its admission measured (real-time streams its workers
sustain at the recent cost per audio second). The router adds what it knows more
recently: requests in flight at each replica, counted as they are sent and probed.

Headroom is the share of a replica's capacity still free. A share rather than a count of
streams, so that a replica on a node twice as fast takes twice the streams, and so that
two idle replicas tie even when their capacity estimates differ by noise. Replicas
within a tenth of each other share a rank, where Serve picks the shorter queue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["headroom", "rank_by_headroom"]

T = TypeVar("T")

RANK_STEP = 0.1
"""Headroom shares closer than this count as equal."""


def headroom(stats: Mapping[str, Any] | None, in_flight: int | None, default_capacity: float) -> float:
    """The share of this replica's capacity still free: 1 when idle, 0 or less when full.

    `stats` is the replica's last report (None before the first), `in_flight` the
    router's count of requests at the replica (None if unknown). The load is the larger
    of the two: the router's count is fresher, but it is refreshed only when it probes,
    and a report counts the slots that sessions hold between their segments. Until a
    replica has measured its capacity, its stream limit stands in (else
    `default_capacity`).
    """
    stats = stats or {}
    capacity = stats.get("capacity")
    if capacity is None:
        capacity = stats.get("limit", default_capacity)
    reported = int(stats.get("active", 0)) + int(stats.get("queued", 0))
    load = reported if in_flight is None else max(reported, in_flight)
    capacity = max(float(capacity), 1e-9)
    return (capacity - load) / capacity


def rank_by_headroom(replicas: Sequence[T], shares: Sequence[float]) -> list[list[T]]:
    """Replicas grouped into ranks, most headroom first; shares within `RANK_STEP` of
    each other (on the same step) share a rank."""
    order = sorted(range(len(replicas)), key=lambda i: -shares[i])
    ranks: list[list[T]] = []
    last: int | None = None
    for i in order:
        level = math.floor(shares[i] / RANK_STEP + 1e-9)
        if ranks and level == last:
            ranks[-1].append(replicas[i])
        else:
            ranks.append([replicas[i]])
            last = level
    return ranks
