"""Which ASR segments decode together, and when. Pure and synchronous.

The batcher holds ready segments (features computed) from all requests and answers
`next_batch(now)`. It takes no locks and reads no clock: the caller passes `now`. Policy,
in one place:

- only segments with equal decoding options (the `key`) share a batch;
- a group goes as soon as it holds `max_batch` segments, or once its oldest segment has
  waited `wait_s`; a worker that finds nothing due sleeps until `deadline()`. On a
  batched device the engine also sets `free_at`, when its last file batch ended: a
  file group's wait then counts from it if later, so pieces that queued behind a batch
  gather the ones arriving just after it instead of going alone the moment it ends;
- on a batched device a burst goes as one batch: a file group that has waited `wait_s`
  keeps waiting while the engine says more file pieces are `coming` (uploads being
  decoded, pieces of registered requests not yet ready) and the batch has room for
  them, up to `burst_wait_s` from its oldest segment; otherwise the pieces decoded first
  would go alone and the rest of the burst behind them;
- a live segment (one with a `deadline`: an utterance of a realtime session) is due at
  once and never shares a batch with file segments;
- among due groups, the one holding the most urgent segment goes first. Live segments
  come before file segments, earliest deadline first (as the vocoder's chunks do). Among
  file segments urgency is the segment's index within its request, then arrival: a short
  request's first segment overtakes segment 40 of a three-hour file, so one long upload
  cannot starve the rest;
- `next_batch(now, files=False)` leaves file segments waiting: the engine asks for that
  while live sessions are open and all but one worker already decode files, so a live
  utterance never waits behind a file's 30 s piece;
- inside a group the same order picks which segments fill the batch;
- a batch takes at most its group's share per idle worker (ceil(len / idle), the
  caller counted in), so five waiting pieces become batches of three and two on two
  idle workers instead of one batch of five while the other worker idles, and a file's
  eight pieces go as four and four, not four, two and two. On CPU a batch costs about
  the sum of its items, so spreading beats stacking. A batched device (`spread=False`)
  costs little more for a full batch than for one piece: its batches take all they
  may, up to `max_batch`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Batcher", "Pending"]

P = TypeVar("P")


@dataclass
class Pending(Generic[P]):
    """One ready segment waiting for a batch."""

    request: int
    index: int
    """Position within its request (0 = first piece of audio)."""
    key: Hashable
    payload: P
    deadline: float | None = None
    """When a live segment's result is due (same clock as `now`); None for file work."""
    ready_at: float = 0.0
    seq: int = field(default=0, compare=False)

    @property
    def live(self) -> bool:
        return self.deadline is not None

    @property
    def rank(self) -> tuple[int, float, int]:
        if self.deadline is not None:
            return (0, self.deadline, self.seq)
        return (1, float(self.index), self.seq)


class Batcher(Generic[P]):
    def __init__(
        self, max_batch: int, wait_s: float, workers: int = 1, spread: bool = True, burst_wait_s: float = 0.0
    ):
        if max_batch < 1 or workers < 1:
            raise ValueError("max_batch and workers must be at least 1")
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.workers = workers
        self.spread = spread
        self.burst_wait_s = burst_wait_s
        """The longest a file group waits for pieces still `coming` (0: it does not)."""
        self.coming = 0
        """File pieces the engine knows are on their way (set by the engine)."""
        self.free_at = -math.inf
        """When the last file batch ended (the engine's clock; batched devices only):
        a file group waits `wait_s` from its oldest segment or from this, whichever is
        later."""
        self._groups: dict[tuple[Hashable, bool], list[Pending[P]]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return sum(len(g) for g in self._groups.values())

    def add(self, item: Pending[P], now: float) -> None:
        item.ready_at = now
        item.seq = next(self._seq)
        self._groups.setdefault((item.key, item.live), []).append(item)

    def abort(self, request: int) -> int:
        """Drop a request's queued segments; returns how many were dropped."""
        dropped = 0
        for key in list(self._groups):
            group = self._groups[key]
            kept = [p for p in group if p.request != request]
            dropped += len(group) - len(kept)
            if kept:
                self._groups[key] = kept
            else:
                del self._groups[key]
        return dropped

    def queued(self, request: int) -> int:
        return sum(1 for g in self._groups.values() for p in g if p.request == request)

    def live_queued(self) -> int:
        return sum(len(g) for (_, live), g in self._groups.items() if live)

    def _due(self, group: list[Pending[P]], now: float) -> bool:
        if group[0].live:
            return True
        return len(group) >= self.max_batch or now >= self._due_at(group)

    def _due_at(self, group: list[Pending[P]]) -> float:
        """When a file group that does not fill goes: `wait_s` after it started waiting,
        or, while pieces are coming, `burst_wait_s` after its oldest segment if later."""
        due = self._since(group) + self.wait_s
        if self.coming > 0 and self.burst_wait_s > 0:
            due = max(due, min(p.ready_at for p in group) + self.burst_wait_s)
        return due

    def _since(self, group: list[Pending[P]]) -> float:
        """Where a file group's wait starts: its oldest segment's arrival, or when the
        last file batch ended if later."""
        return max(min(p.ready_at for p in group), self.free_at)

    def next_batch(
        self, now: float, files: bool = True, idle: int | None = None
    ) -> list[Pending[P]] | None:
        """The batch to decode now, or None if no group is due yet. With `files=False`
        only live segments may go. `idle`: workers free to take a batch now, the caller
        included (default: all `workers`)."""
        due = [
            (min(p.rank for p in g), k)
            for k, g in self._groups.items()
            if (files or k[1]) and self._due(g, now)
        ]
        if not due:
            return None
        _, key = min(due, key=lambda d: d[0])
        group = sorted(self._groups[key], key=lambda p: p.rank)
        share = 1 if not self.spread else self.workers if idle is None else max(1, min(idle, self.workers))
        size = min(self.max_batch, math.ceil(len(group) / share))
        batch, rest = group[:size], group[size:]
        if rest:
            self._groups[key] = rest
        else:
            del self._groups[key]
        return batch

    def deadline(self, files: bool = True) -> float | None:
        """When the next partial batch falls due; None when nothing (allowed) waits."""
        waits = [g for k, g in self._groups.items() if files or k[1]]
        if not waits:
            return None
        return min(min(p.ready_at for p in g) + self.wait_s if g[0].live else self._due_at(g) for g in waits)
