"""The TTS scheduler's records: what it keeps of each stream (`StreamState`, its latents
as `LatentState`), and a batched device's queues of the units the streams may claim
(`Queues` of `Entry`s, one per `Kind`).

Plain data with the bookkeeping that keeps it consistent; no policy. Which unit runs
next is decided by the schedulers over these records (`engine/scheduler.py`).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from voxserve.engine.work import BatchedWindows, Latent, ModelProfile, StageInput

__all__ = ["Entry", "Kind", "LatentState", "Queues", "StreamState", "Window"]

Window = tuple[int, int, int, int, int]
"""A chunk's window as `plan_chunk` and `BatchedWindows.window` give it: decode [lo, hi),
keep [start, end), and its bucket (0: none)."""


@dataclass(slots=True)
class LatentState:
    """One stage A latent of a stream, and how far its chunks have been claimed and done."""

    segment: int
    latent: Latent
    claimed: int = 0
    """Frames handed to the vocoder so far."""
    claims: int = 0
    """Chunks claimed from it."""
    done: int = 0
    """Chunks finished."""
    done_frames: int = 0
    """Frames of the finished chunks."""

    @property
    def frames(self) -> int:
        return self.latent.frames

    @property
    def open(self) -> bool:
        """Chunks remain to be claimed (an empty latent yields one empty chunk)."""
        return self.claims == 0 or self.claimed < self.latent.frames

    @property
    def complete(self) -> bool:
        return not self.open and self.done == self.claims


@dataclass(slots=True, eq=False)
class StreamState:
    """A stream as the scheduler keeps it: its stage A inputs, its latents, its chunks
    claimed, in flight and released, and its player's position."""

    id: int
    arrival: float
    segments: list[StageInput]
    profile: ModelProfile
    complete: bool = True
    """All its stage A inputs are known (False: `extend` brings the rest)."""
    next_segment: int = 0
    latents: deque[LatentState] = field(default_factory=deque)
    acoustic_busy: bool = False
    in_flight: int = 0
    """Vocoder chunks claimed and not finished."""
    claimed: int = 0
    """Vocoder chunks claimed so far: the next one's sequence number."""
    early: dict[int, int] = field(default_factory=dict)
    """Samples of chunks finished before an earlier one, by sequence number."""
    first_packet_at: float | None = None
    produced: int = 0
    untaken: int = 0
    chunks: int = 0
    """Chunks released, in order."""
    alone: bool = False
    """Its first chunk was claimed alone: its chunks follow the idle plan (`plan_chunk`)."""
    skip: int = 0
    """Chunk sizes its plan skips (`plan_chunk`): 1 if it started in a burst."""
    version: int = 0
    """Bumped at each change of its state: its `Entry`s of an older version are stale."""
    window: Window | None = None
    """On a batched device, its next chunk's window, kept until its state changes."""
    window_latent: LatentState | None = None
    """The open latent that `window` is cut from (meaningful only while `window` is set):
    a step's claim then reads it instead of searching the stream's latents again."""
    windows: BatchedWindows | None = None
    """Its profile's window tables, on a batched device."""
    queued_vocoder: Queues | None = None
    """The queue that holds its current (not stale) chunk entry, if any."""
    queued_acoustic: Queues | None = None
    """The queue that holds its current (not stale) stage A entry, if any."""

    def unqueue(self) -> None:
        """Make its queued entries stale."""
        self.version += 1
        if self.queued_vocoder is not None:
            self.queued_vocoder.size -= 1
            self.queued_vocoder = None
        if self.queued_acoustic is not None:
            self.queued_acoustic.size -= 1
            self.queued_acoustic = None

    def open_latent(self) -> LatentState | None:
        for lat in self.latents:
            if lat.claims == 0 or lat.claimed < lat.latent.frames:  # `LatentState.open`
                return lat
        return None

    def dry_at(self) -> float:
        assert self.first_packet_at is not None
        return self.first_packet_at + self.produced / self.profile.sample_rate


class Kind(NamedTuple):
    """What units must share to run in one batched call: the model, and for a chunk its
    window's size (its bucket, or its frames where the model has no buckets)."""

    model: str
    window: int | None = None
    """None: stage A, whose items the model pads and masks, so any of them share a call."""


class Entry(NamedTuple):
    """A queued unit. Entries sort by deadline, then stream id: a queue holds one current
    entry per stream (a stale one of the same stream has an older version), so no
    comparison reaches the stream."""

    deadline: float
    """When it must start; a new stream's: its arrival."""
    stream_id: int
    acoustic: bool
    """Stage A (else the stream's next chunk)."""
    version: int
    """The stream's version when queued: the entry is stale once it moved on."""
    stream: StreamState

    @property
    def stale(self) -> bool:
        return self.version != self.stream.version


@dataclass(slots=True, eq=False)
class Queues:
    """A batched device's claimable units of one kind, as two lists kept sorted: live
    streams' by deadline, and new streams' by arrival, each then by stream id. An entry
    is stale once its stream's version moved on; stale entries are skipped, and dropped
    once a take or a look at the front has passed them (`compact` drops the rest).

    Sorted lists, not heaps: a step takes up to a hundred units from the front of a
    queue of a few hundred, and the front of a sorted list is read in order, where a heap
    must be popped entry by entry (each pop a few tuple comparisons) or sorted whole. An
    insertion costs a binary search and a move of the pointers after it, and most land
    near the end (a later deadline, a newer arrival)."""

    kind: Kind
    limit: int | None = None
    """Units one step of this kind takes at most, below the device's `batch`: the model's
    `step_frames` over the kind's window (None: no bound of its own)."""
    live: list[Entry] = field(default_factory=list)
    new: list[Entry] = field(default_factory=list)
    size: int = 0
    """Entries that are not stale: the units of this kind that may be claimed now."""

    def push(self, queue: list[Entry], entry: Entry) -> None:
        """Queue `entry` in `live` or `new`, and mark its stream as queued here."""
        bisect.insort(queue, entry)
        self.size += 1
        if self.kind.window is None:
            entry.stream.queued_acoustic = self
        else:
            entry.stream.queued_vocoder = self

    def take(self, n: int, now: float, slack: float) -> list[StreamState]:
        """Up to n streams, best first, in the ranking's order: urgent live units (due
        within `slack`), then new streams', then the other live units. The entries taken
        and the stale ones passed on the way leave the queue. The caller clears the taken
        streams' `queued_acoustic` or `queued_vocoder` as it claims their units: a step
        takes up to a hundred, and the claim touches each stream anyway."""
        out: list[StreamState] = []
        append = out.append
        live, new = self.live, self.new
        i = j = 0
        # Each entry is unpacked once, and `stale` is inline: a take passes up to a few
        # hundred entries under the engine lock.
        while i < len(live) and len(out) < n:  # urgent live units
            deadline, _, _, version, stream = live[i]
            if version == stream.version:
                if deadline - now > slack:
                    break
                append(stream)
            i += 1
        while j < len(new) and len(out) < n:
            _, _, _, version, stream = new[j]
            if version == stream.version:
                append(stream)
            j += 1
        while i < len(live) and len(out) < n:  # the other live units
            _, _, _, version, stream = live[i]
            if version == stream.version:
                append(stream)
            i += 1
        del live[:i]
        del new[:j]
        self.size -= len(out)
        return out

    def head(self) -> tuple[Entry | None, Entry | None]:
        """The best live and the best new entry that are not stale (stale ones before
        them are dropped)."""
        return _front(self.live), _front(self.new)

    def compact(self) -> int:
        """Drop every stale entry; returns the entries left."""
        self.live = [e for e in self.live if not e.stale]
        self.new = [e for e in self.new if not e.stale]
        return len(self.live) + len(self.new)


def _front(entries: list[Entry]) -> Entry | None:
    """The first of sorted `entries` that is not stale, once the stale ones before it are
    dropped; None when none is left."""
    i = 0
    while i < len(entries) and entries[i].version != entries[i].stream.version:  # `stale`
        i += 1
    if i:
        del entries[:i]
    return entries[0] if entries else None
