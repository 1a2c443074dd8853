"""The TTS scheduling policy: which units of work run next. Pure and synchronous.

The scheduler owns per-stream state and answers `next_step(now)`: the units a device
runs next. It does no I/O, takes no locks and never reads a clock: the caller passes
`now`. The work is of two kinds: a stream's stage A on one sentence, and a vocoder chunk
of one stream. One policy serves every device:

- **One ranking** (`Rank`). A live stream's unit that must start within `urgent_slack`
  is URGENT (a chunk must start when its player runs dry less its expected decode
  time, `_decode_time`); a stream before its first packet is NEW, by arrival, so time to
  first audio stays short; every other live stream's unit is AHEAD, earliest deadline
  first, which keeps the work conserving: streams run ahead of playback until their
  credits are spent. A stream holding `credits` chunks that its client has not taken
  (in flight counts) is not ranked until it reads, so a slow client never stalls
  anyone else. Stage A of a stream's next sentence is ranked by when the current one
  runs out, one sentence ahead at most.
- **One budget** (`Budget`): a device's slots, each unit holding the slots of its
  threads. A CPU worker's step is one unit (`next_work`); a batched device's step (a GPU)
  is up to `batch` units of one stage, one model and one window bucket, filled best
  first: the head's kind if it is urgent (or a new stream's that waited `NEW_WAIT_S`),
  else the kind with the most units waiting (`next_step`). Stage A holds at most `acoustic_slots` (a CPU:
  all its workers but one) while chunks wait, unless a newcomer's stage A would make no live stream
  urgent, or it is itself urgent and no chunk is (`_may_take_vocoders_worker`).
- **Spare capacity**, the slots the ranked units leave free, is spent, never left idle:
  a unit that is alone on a free CPU runs on `spare_threads` threads and holds them (so
  work that arrives meanwhile waits instead of oversubscribing the cores); a stream
  that starts alone gets a smaller first chunk (`idle_first_chunk_frames`) and its plan
  grows from there; a stream past its first packet gets a second chunk in flight
  (`spare_chunks`) when nothing else can run, or beside its first in a batched step
  with room; a stream that starts while `burst_waiting` others wait skips the smallest
  chunk, so the waiting ones start before its next chunk is due. With as many runnable
  units as slots (the crowded case) nothing is spare, and while work outside the
  scheduler uses the cores (`next_step(now, elsewhere=True)`: a transcription batch on
  the other core) nothing counts as spare.

Chunks may finish in any order; they are released in stream order (the first packet,
the audio produced and the end of the stream follow the chunk sequence). A stream may
start before all its stage A inputs are known (its text's first sentence is ready, the
rest is still being phonemized): it is open until `extend` brings the rest, and no chunk
is its last before that.

Streams of several voice models share one scheduler: each stream carries its model's
`ModelProfile` (samples per frame, sample rate, how its frames are cut into chunks), and
every deadline is computed in that stream's own figures. Stage A's cost per phoneme id
and the vocoder's per frame are learned per model. The scheduler never sees a model,
only profiles and frame counts.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum

from voxserve.engine.work import (
    AcousticWork,
    BatchedWindows,
    Chunk,
    Latent,
    ModelProfile,
    Playback,
    StageInput,
    VocoderWork,
    Work,
    plan_chunk,
)

__all__ = [
    "BURST_WAITING",
    "CREDITS",
    "IDLE_THREADS",
    "URGENT_SLACK_S",
    "Budget",
    "Rank",
    "Scheduler",
]


CREDITS = 4
"""Chunks a stream may have decoded but not yet taken by its writer: enough to ride out a
writer's scheduling delay, few enough that a client that stops reading holds little."""

URGENT_SLACK_S = 0.15
"""A live stream's unit that must start within this much time outranks new streams (a
chunk must start when its player runs dry less its expected decode time). Less, and a
128-frame Piper chunk (~80 ms on one core) starts too late once the machine slows;
more, and live streams served ahead of time delay every newcomer's first packet.
Admission's eager slack stays below it (`engine/admission.py`)."""

IDLE_THREADS = 2
"""Intra-op threads for a unit that is the only one runnable while every worker is free
(stage A and the first chunk of a lone stream): the second core would idle otherwise.
Beyond two, ONNX Runtime's intra-op threads gain little on these small graphs."""

SPARE_CHUNKS = 2
"""Chunks of one stream in flight at once while workers would otherwise idle: a lone
stream's next chunk decodes beside the one before, so it is ready long before it is due.
Chunks are independent given their context frames."""

BURST_WAITING = 3
"""A stream whose first chunk is claimed while at least this many other new streams wait
for theirs starts with the plan's second chunk size (`Scheduler._burst`), on a CPU and on
a batched device alike: in a burst of hundreds on a GPU the host, busy starting the
others, makes a Piper stream's third chunk late when its first holds only 16 frames."""


NEW_WAIT_S = 0.05
"""On a batched device, how long the best new stream's unit may wait while steps go to
a fuller kind (`Scheduler.next_step`): about two full steps of a GPU, so that a new
stream's first audio waits a few tens of ms for steps that fill, and no longer."""
FURTHER_LOOKS_PER_SLOT = 2
"""On a batched device, how many of the step's streams may have their next window
planned, per slot left in the step, in looking for further chunks of its kind
(`Scheduler._claim_chunks`). Most streams' next window is of another kind, and each
look costs a window's planning under the engine lock: at 1,000 streams, steps a few
units short of full looked at a hundred streams to fill a handful of slots, the slowest
steps of all (`scripts/bench/scheduler_step.py`). Two looks a slot keep 81.2 units a
decoder step there, against 81.3 with no bound: a stream passed over runs its next
chunk in a later step."""


class Rank(IntEnum):
    """The classes of the one ranking, best first; within a class, the earlier deadline
    (then the older stream) goes first."""

    URGENT = 0
    """A live stream's unit that must start within `urgent_slack`: its player runs dry
    then (a chunk: less the time it is expected to take)."""
    NEW = 1
    """A stream before its first packet, by arrival: time to first audio."""
    AHEAD = 2
    """A live stream with time to spare, by deadline: the work stays conserving, and
    streams run ahead of their players until their credits are spent."""


_URGENT, _NEW, _AHEAD = Rank.URGENT, Rank.NEW, Rank.AHEAD
"""The ranks as plain names for a batched step's look at every queue: reading a member
off an enum class goes through its metaclass, ~70 ns a time on CPython 3.11."""


@dataclass(frozen=True)
class Budget:
    """A device's capacity, in units of work in flight, and how its spare is spent.

    One ranking (`Rank`) orders every runnable unit; a device takes units from its head
    until its `slots` are held. The rest are the ways capacity that would otherwise idle
    is spent: on threads for a lone unit, on a second chunk of a stream, on a larger first
    chunk in a burst. Stage A holds at most `acoustic_slots` while vocoder work waits.

    A CPU (`Budget.cpu`): one slot per worker thread, one unit per step. A batched
    device (`Budget.batched`): a step runs up to `batch` units of one stage, one model
    and one window bucket (`ModelProfile.window_buckets`) at once, and `slots` bounds
    the units in flight over the steps that overlap (one running, the next being
    gathered)."""

    slots: int | None = None
    """Units (times their threads) in flight at most; None: unbounded, and nothing spare
    is spent (the ranking alone)."""
    batch: int = 1
    """Units one step runs."""
    acoustic_slots: int | None = None
    """Stage A units in flight at most while vocoder work waits (None: no limit). A new
    stream's stage A may go past it while no live stream would become urgent within
    twice its expected time, and an urgent one while no chunk is
    (`Scheduler._may_take_vocoders_worker`)."""
    spare_threads: int = 1
    """Threads for a unit that is alone while every slot is free."""
    spare_chunks: int = 1
    """Chunks of one stream in flight while slots would idle."""
    burst_waiting: int = 0
    """Other new streams waiting for their first chunk at which a stream starts with the
    plan's second chunk size (`Scheduler._burst`); 0: never."""

    @classmethod
    def cpu(cls, workers: int) -> Budget:
        """CPU workers, one single-threaded unit each, spare capacity spent as above."""
        return cls(
            slots=workers,
            acoustic_slots=workers - 1 if workers > 1 else None,
            spare_threads=IDLE_THREADS,
            spare_chunks=SPARE_CHUNKS,
            burst_waiting=BURST_WAITING,
        )

    @classmethod
    def batched(cls, batch: int, steps: int = 2) -> Budget:
        """A device that runs `batch` units per step, `steps` steps overlapping."""
        return cls(slots=batch * steps, batch=batch, spare_chunks=SPARE_CHUNKS, burst_waiting=BURST_WAITING)

    @property
    def stepped(self) -> bool:
        """Whether a step runs a batch (a GPU) rather than one unit (a CPU worker)."""
        return self.batch > 1


@dataclass(slots=True)
class _Latent:
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
class _Stream:
    id: int
    arrival: float
    segments: list[StageInput]
    profile: ModelProfile
    complete: bool = True
    """All its stage A inputs are known (False: `extend` brings the rest)."""
    next_segment: int = 0
    latents: deque[_Latent] = field(default_factory=deque)
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
    """Bumped at each change of its state: its entries in a batched device's queues
    (`Scheduler._queues`) of an older version are stale."""
    window: tuple[int, int, int, int, int] | None = None
    """Its next chunk's window (`Scheduler._window`), kept until its state changes."""
    window_latent: _Latent | None = None
    """The open latent that `window` is cut from (meaningful only while `window` is set):
    a step's claim then reads it instead of searching the stream's latents again."""
    windows: BatchedWindows | None = None
    """Its profile's window tables, on a batched device (`Scheduler._window`)."""
    queued_vocoder: _Queues | None = None
    """The queue that holds its current (not stale) chunk entry, if any."""
    queued_acoustic: _Queues | None = None
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

    def open_latent(self) -> _Latent | None:
        for lat in self.latents:
            if lat.claims == 0 or lat.claimed < lat.latent.frames:  # `_Latent.open`
                return lat
        return None

    def dry_at(self) -> float:
        assert self.first_packet_at is not None
        return self.first_packet_at + self.produced / self.profile.sample_rate


_Entry = tuple[float, int, bool, int, _Stream]
"""A queued unit: its deadline (a new stream: its arrival), stream id, whether it is
stage A, the stream's version when queued, and the stream."""


@dataclass(slots=True, eq=False)
class _Queues:
    """A batched device's claimable units of one kind, as two lists kept sorted: live
    streams' by deadline, and new streams' by arrival, each then by stream id. An entry
    is stale once its stream's version moved on; stale entries are skipped, and dropped
    once a take or a look at the front has passed them (`Scheduler._compact` drops the
    rest).

    Sorted lists, not heaps: a step takes up to a hundred units from the front of a
    queue of a few hundred, and the front of a sorted list is read in order, where a heap
    must be popped entry by entry (each pop a few tuple comparisons) or sorted whole. An
    insertion costs a binary search and a move of the pointers after it, and most land
    near the end (a later deadline, a newer arrival)."""

    kind: tuple[str, int]
    """Its units' kind (`Scheduler._kind`; stage A: the model and -1)."""
    limit: int | None = None
    """Units one step of this kind takes at most, below the device's `batch`: the model's
    `step_frames` over the kind's window (None: no bound of its own)."""
    live: list[_Entry] = field(default_factory=list)
    new: list[_Entry] = field(default_factory=list)
    size: int = 0
    """Entries that are not stale: the units of this kind that may be claimed now."""

    def push(self, queue: list[_Entry], entry: _Entry) -> None:
        """Queue `entry` in `live` or `new`. Entries compare by deadline, then stream id
        (a queue holds one current entry per stream; a stale one of the same stream has
        an older version), so no comparison reaches the stream."""
        bisect.insort(queue, entry)
        self.size += 1
        if self.kind[1] == -1:
            entry[4].queued_acoustic = self
        else:
            entry[4].queued_vocoder = self

    def take(self, n: int, now: float, slack: float) -> list[_Stream]:
        """Up to n streams, best first, in the ranking's order: urgent live units, then
        new streams', then the other live units. The entries taken and the stale ones
        passed on the way leave the queue. The caller clears the taken streams'
        `queued_acoustic` or `queued_vocoder` as it claims their units: a step takes up
        to a hundred, and the claim touches each stream anyway."""
        out: list[_Stream] = []
        append = out.append
        live, new = self.live, self.new
        i = j = 0
        while i < len(live) and len(out) < n:  # urgent live units
            entry = live[i]
            if entry[3] == entry[4].version:
                if entry[0] - now > slack:
                    break
                append(entry[4])
            i += 1
        while j < len(new) and len(out) < n:
            entry = new[j]
            if entry[3] == entry[4].version:
                append(entry[4])
            j += 1
        while i < len(live) and len(out) < n:  # the other live units
            entry = live[i]
            if entry[3] == entry[4].version:
                append(entry[4])
            i += 1
        del live[:i]
        del new[:j]
        self.size -= len(out)
        return out

    def head(self) -> tuple[_Entry | None, _Entry | None]:
        """The best live and the best new entry that are not stale (stale ones before
        them are dropped)."""
        return _front(self.live), _front(self.new)


def _front(entries: list[_Entry]) -> _Entry | None:
    """The first of sorted `entries` that is not stale, once the stale ones before it are
    dropped; None when none is left."""
    i = 0
    while i < len(entries) and entries[i][3] != entries[i][4].version:
        i += 1
    if i:
        del entries[:i]
    return entries[0] if entries else None


@dataclass(frozen=True)
class Candidate:
    """A unit that could run now, ranked: its stream's next stage A (`acoustic`) or next
    chunk. The ranking is `order`: the best runs first."""

    rank: Rank
    deadline: float
    """When the unit must start (a chunk: its player runs dry then, less its decode time)."""
    stream: _Stream
    acoustic: bool

    @property
    def order(self) -> tuple[Rank, float, int]:
        """Rank, then the earlier deadline, then the older stream."""
        return (self.rank, self.deadline, self.stream.id)


class Scheduler:
    """Deadline scheduler over stage A segments and stage B chunks of all live streams."""

    def __init__(
        self, credits: int = 4, budget: Budget | None = None, urgent_slack: float = URGENT_SLACK_S
    ):
        self.credits = credits
        self.urgent_slack = urgent_slack
        self.budget = budget or Budget()
        self._busy = 0
        """Slots held by the units in flight."""
        self.spread: dict[str, int] = {"threads": 0, "chunks": 0}
        """Units handed out on several threads, and chunks claimed beside another of
        their stream: how often spare capacity was spent."""
        self._acoustic_s_per_id: dict[str, float] = {}
        """Running estimate of stage A seconds per phoneme id, per model, to start it
        early enough."""
        self._acoustic_in_flight = 0
        self._unclaimed = 0
        """Streams whose first chunk is not claimed yet (`_burst`), kept as they come and
        go so that a step of a hundred first chunks does not count them a hundred times."""
        self._vocoder_s_per_frame: dict[str, float] = {}
        """Running estimate of a one-thread vocoder call's seconds per decoded frame, per
        model, from the chunks timed so far (`complete_vocoder`)."""
        self._streams: dict[int, _Stream] = {}
        self._queues: dict[tuple[str, int], _Queues] = {}
        """A batched device's claimable units by kind (`_kind`), kept up to date by
        `_touch`: a step reads the heads of a few queues instead of ranking every
        stream, so streams waiting on their credits, their stage A or a chunk in flight
        cost it nothing, and a step of n units costs O(n) plus the stale entries it
        passes (a unit queued costs a binary search and a move of pointers)."""
        self._entries = 0
        """Entries in `_queues`, stale ones included (`_compact`)."""
        self._windows: dict[ModelProfile, BatchedWindows] = {}
        """Each profile's window tables, on a batched device."""

    # -- requests --------------------------------------------------------------------
    def add(
        self,
        stream_id: int,
        segments: Sequence[StageInput],
        now: float,
        profile: ModelProfile,
        complete: bool = True,
    ) -> None:
        """A new stream of `profile`'s model, with its stage A inputs in order;
        `complete=False`: more of them follow, by `extend`."""
        if not segments:
            raise ValueError("a stream needs at least one segment")
        if stream_id in self._streams:
            raise ValueError(f"stream {stream_id} exists")
        self._acoustic_s_per_id.setdefault(profile.name, profile.acoustic_s_per_id)
        stream = self._streams[stream_id] = _Stream(stream_id, now, list(segments), profile, complete)
        self._unclaimed += 1
        if self.budget.stepped:
            windows = self._windows.get(profile)
            if windows is None:
                windows = self._windows[profile] = BatchedWindows(profile)
            stream.windows = windows
        self._touch(stream)

    def extend(self, stream_id: int, segments: Sequence[StageInput]) -> None:
        """The rest of an incomplete stream's stage A inputs (possibly none): after them
        the stream ends. A stream already gone is left alone."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        if stream.complete:
            raise ValueError(f"stream {stream_id} is complete")
        stream.segments.extend(segments)
        stream.complete = True
        if not stream.acoustic_busy and stream.next_segment >= len(stream.segments) and stream.open_latent() is None:
            # Every chunk made so far was claimed before the stream knew it was ending,
            # none of them as the last: an empty chunk ends it. (Otherwise a later stage
            # A's latent ends the stream.)
            stream.latents.append(_Latent(len(stream.segments), Latent(None, 0)))
        self._touch(stream)

    def acoustic_s_per_id(self, model: str) -> float | None:
        """The current stage A estimate of a model (None before its first stream)."""
        return self._acoustic_s_per_id.get(model)

    def abort(self, stream_id: int) -> bool:
        """Forget a stream; its in-flight work is discarded on completion."""
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            stream.unqueue()
            self._unclaimed -= stream.claimed == 0
        return stream is not None

    def taken(self, stream_id: int) -> None:
        """The stream's writer took one chunk: one credit back. Credits decide only
        whether a stream that had spent them all may claim a chunk
        (`_vocoder_candidate`), so only then are its units queued again (`_touch`);
        otherwise its queued units and their deadlines hold as they were, and the event
        loop, which calls this for every chunk, leaves no stale entry behind."""
        stream = self._streams.get(stream_id)
        if stream is not None and stream.untaken > 0:
            spent = stream.untaken >= self.credits
            stream.untaken -= 1
            if spent:
                self._touch(stream)

    def has(self, stream_id: int) -> bool:
        return stream_id in self._streams

    def pending_work(self, stream_id: int) -> bool:
        """Whether the stream has anything left to compute (queued or in flight)."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return False
        return bool(
            stream.latents
            or stream.next_segment < len(stream.segments)
            or stream.acoustic_busy
            or stream.in_flight
            or not stream.complete
        )

    def __len__(self) -> int:
        return len(self._streams)

    def starting(self) -> int:
        """Streams that have not yet sent two chunks: their cost is still unknown."""
        return sum(1 for stream in self._streams.values() if stream.chunks < 2)

    def playback(self) -> list[Playback]:
        """The players of the streams past start-up (two chunks out), for admission."""
        return [
            Playback(stream.first_packet_at, stream.dry_at(), stream.untaken >= self.credits)
            for stream in self._streams.values()
            if stream.first_packet_at is not None and stream.chunks >= 2
        ]

    def ids(self) -> list[int]:
        return list(self._streams)

    def streams_by_model(self) -> dict[str, int]:
        """Live streams per model (profile name)."""
        counts: dict[str, int] = {}
        for stream in self._streams.values():
            counts[stream.profile.name] = counts.get(stream.profile.name, 0) + 1
        return counts

    def untaken(self, stream_id: int) -> int:
        """Chunks claimed or decoded for the stream and not yet taken by its writer."""
        stream = self._streams.get(stream_id)
        return 0 if stream is None else stream.untaken

    def produced(self, stream_id: int) -> int:
        """Samples decoded and released in order so far for the stream (at its model's rate)."""
        stream = self._streams.get(stream_id)
        return 0 if stream is None else stream.produced

    @property
    def busy_workers(self) -> int:
        """Workers held by the units in flight (each unit holds its `threads`)."""
        return self._busy

    # -- choosing work ---------------------------------------------------------------
    def _touch(self, stream: _Stream) -> None:
        """After any change to a stream's state, on a batched device: queue the units it
        may claim now (its next chunk, its next stage A) under their kinds, with their
        deadlines as of now (a chunk's expected decode time at the current estimate,
        which an entry keeps until the stream's next change), and make its older
        entries stale. Whether a unit may be claimed does not depend
        on the clock, so between changes it holds; only whether a deadline is urgent
        does, and a step reads that at its own `now`."""
        if not self.budget.stepped:
            return
        stream.unqueue()
        stream.window = None
        if stream.id not in self._streams:
            return
        if stream.claimed == 0:
            # Its first window's size, and so its kind, is set here: the step that
            # claims it holds only windows of that kind.
            stream.skip = int(self._burst(stream))
        for acoustic in (False, True):
            if not (self._acoustic_candidate(stream) if acoustic else self._vocoder_candidate(stream, False)):
                continue
            kind = self._kind(stream, acoustic)
            queues = self._queues.get(kind)
            if queues is None:
                frames = None if acoustic else stream.profile.step_frames
                limit = None if frames is None else max(1, frames // kind[1])
                queues = self._queues[kind] = _Queues(kind, limit)
            if stream.first_packet_at is None:
                queues.push(queues.new, (stream.arrival, stream.id, acoustic, stream.version, stream))
            else:
                deadline = self._deadline(stream, acoustic)
                if not acoustic:
                    lo, hi, _, _, _ = self._next_window(stream)
                    deadline -= self._vocoder_s_per_frame.get(stream.profile.name, 0.0) * (hi - lo)
                queues.push(queues.live, (deadline, stream.id, acoustic, stream.version, stream))
            self._entries += 1
        if self._entries > 4 * len(self._streams) + 1024:
            self._compact()

    def _claimed(self, stream: _Stream, acoustic: bool) -> None:
        """After a claim of the stream's stage A (`acoustic`) or chunk. On a CPU: as after
        any change (`_touch`). On a batched device the claimed unit's entry has already
        left its queue (`_Queues.take`; a further chunk of a step has none), and the
        stream's other queued unit, if any, holds as it was: a chunk's claim moves
        neither whether stage A may run nor its deadline (the latents' frames left to
        play and the player's position stay), and stage A's claim moves neither the
        next chunk's window nor its deadline. No further chunk may be queued after a
        claim, since one is now in flight. So the queues are left as they are, and only
        a chunk's claim forgets the cached window, which starts where the claim ended:
        a step of a hundred units then costs a hundred claims, not a hundred re-queuings
        of stage A entries."""
        if not self.budget.stepped:
            self._touch(stream)
        elif not acoustic:
            stream.window = None

    def _compact(self) -> None:
        """Drop the stale entries of every queue."""
        self._entries = 0
        for kind, queues in list(self._queues.items()):
            queues.live = [e for e in queues.live if e[3] == e[4].version]
            queues.new = [e for e in queues.new if e[3] == e[4].version]
            self._entries += len(queues.live) + len(queues.new)
            if not (queues.live or queues.new):
                del self._queues[kind]

    def _vocoder_candidate(self, stream: _Stream, extra: bool, now: float = 0.0) -> bool:
        """A chunk of the stream may be claimed: its first in flight, or (`extra`) one more
        beside those in flight, up to the budget's `spare_chunks`, once its first packet
        is out and while it is not urgent (if the cores are busier than the scheduler
        knows, say with another process, two chunks would share one core, and the earlier
        one, which the player waits for, would come later)."""
        if stream.untaken >= self.credits or stream.open_latent() is None:
            return False
        if not extra:
            return stream.in_flight == 0
        if not 0 < stream.in_flight < self.budget.spare_chunks or stream.first_packet_at is None:
            return False
        return stream.dry_at() - now > self.urgent_slack

    def _acoustic_candidate(self, stream: _Stream) -> bool:
        if stream.acoustic_busy or stream.next_segment >= len(stream.segments):
            return False
        return len(stream.latents) < 2 and not (
            len(stream.latents) == 1 and stream.first_packet_at is None
        )

    def _deadline(self, stream: _Stream, acoustic: bool) -> float:
        if stream.first_packet_at is None:
            return stream.arrival
        dry = stream.dry_at()
        if acoustic:
            # Needed once every latent already computed has been played, and it takes
            # time itself: start it with twice its expected run time to spare.
            profile = stream.profile
            frames = sum(lat.frames - lat.done_frames for lat in stream.latents)
            dry += frames * profile.hop / profile.sample_rate - 2 * self._acoustic_time(stream)
        return dry

    def _acoustic_time(self, stream: _Stream) -> float:
        """How long the stream's next stage A is expected to take on one thread."""
        ids = len(stream.segments[stream.next_segment].ids)
        return ids * self._acoustic_s_per_id[stream.profile.name]

    def _window(self, stream: _Stream, latent: _Latent) -> tuple[int, int, int, int, int]:
        """`plan_chunk`'s window for the stream's next chunk, cut from `latent`, and its
        bucket (0: none). A batched device keeps the plan's kept frames exact (no move to
        a quiet frame) and grows the window with context to one of the model's
        `window_buckets` (`bucket_window`), so that streams at different points of their
        plans share a window size and one call (`BatchedWindows`)."""
        if stream.windows is not None:
            return stream.windows.window(latent.latent.frames, latent.claimed, stream.claimed, stream.alone, stream.skip)
        lo, hi, start, end = plan_chunk(
            latent.frames, latent.claimed, stream.claimed, stream.profile.chunking, stream.alone,
            stream.skip, latent.latent.level, stream.profile.chunk_growth,
        )
        return lo, hi, start, end, 0

    def _next_window(self, stream: _Stream) -> tuple[int, int, int, int, int]:
        """The stream's next chunk's window, computed once per change of its state."""
        if stream.window is None:
            latent = stream.open_latent()
            assert latent is not None
            stream.window = self._window(stream, latent)
            stream.window_latent = latent
        return stream.window

    def _decode_time(self, stream: _Stream) -> float:
        """How long the stream's next chunk is expected to take on one thread (0 before any
        chunk of its model was timed). A chunk is ranked by when it must start, not by
        when its player runs dry: a 128-frame chunk takes ~80 ms on one core, so the
        urgent slack alone leaves it too little room once the machine slows down."""
        per_frame = self._vocoder_s_per_frame.get(stream.profile.name)
        latent = stream.open_latent()
        if not per_frame or latent is None:
            return 0.0
        lo, hi, _, _, _ = self._window(stream, latent)
        return per_frame * (hi - lo)

    def _rank(self, stream: _Stream, acoustic: bool, now: float) -> Candidate:
        deadline = self._deadline(stream, acoustic)
        if stream.first_packet_at is None:
            return Candidate(Rank.NEW, deadline, stream, acoustic)
        if not acoustic:
            deadline -= self._decode_time(stream)
        if deadline - now <= self.urgent_slack:
            return Candidate(Rank.URGENT, deadline, stream, acoustic)
        return Candidate(Rank.AHEAD, deadline, stream, acoustic)

    def _pick(self, now: float, exclude: _Stream | None = None, spread: bool = True) -> Candidate | None:
        """The best unit to run now, without claiming it: one unit per stream at a time,
        else (only when none is left, and `spread`) a further chunk of a stream.
        `exclude`: a stream not to consider."""
        best: dict[bool, Candidate] = {}  # the best of each stage
        for stream in self._streams.values():
            if stream is exclude:
                continue
            for acoustic in (False, True):
                ok = self._acoustic_candidate(stream) if acoustic else self._vocoder_candidate(stream, False)
                if not ok:
                    continue
                candidate = self._rank(stream, acoustic, now)
                if acoustic not in best or candidate.order < best[acoustic].order:
                    best[acoustic] = candidate
        if (
            True in best
            and False in best
            and self.budget.acoustic_slots is not None
            and self._acoustic_in_flight >= self.budget.acoustic_slots
            and not self._may_take_vocoders_worker(best[True], best[False], now)
        ):
            del best[True]  # keep a worker for the vocoder
        if best:
            return min(best.values(), key=lambda c: c.order)
        if self.budget.slots is None or self.budget.spare_chunks < 2 or not spread:
            return None
        extra = [
            self._rank(stream, False, now)
            for stream in self._streams.values()
            if stream is not exclude and self._vocoder_candidate(stream, True, now)
        ]
        return min(extra, key=lambda c: c.order) if extra else None

    def _may_take_vocoders_worker(self, acoustic: Candidate, vocoder: Candidate, now: float) -> bool:
        """Whether the best stage A (`acoustic`, its rank) may take a worker beyond
        `acoustic_slots` although vocoder work waits (`vocoder`, the best one's rank):
        - a live stream's urgent stage A (its next sentence), while no chunk is urgent;
        - a new stream's stage A, while the live stream that needs the vocoder soonest is
          not urgent and would not be within twice this stage A's expected time (the
          spare that a next sentence's stage A gets too: `_deadline`). Else the
          worker kept for the vocoder would only run that stream further ahead of its
          player while the newcomer waits, and a burst of newcomers would run its stage
          A's one at a time on one worker."""
        if acoustic.rank == Rank.URGENT:
            return vocoder.rank != Rank.URGENT
        if acoustic.rank != Rank.NEW or vocoder.rank != Rank.AHEAD:
            return False
        expected = self._acoustic_time(acoustic.stream)
        return vocoder.deadline - now - 2 * expected > self.urgent_slack

    def next_work(self, now: float, elsewhere: bool = False) -> Work | None:
        """A CPU worker's step: pick and claim the next unit, or None if nothing can run
        now (or every slot is held). Spare capacity is spent only while the unit would
        leave workers idle: on `spare_threads` for a unit that is alone, on a smaller
        first chunk for a stream that starts alone, on a second chunk of a stream when
        nothing else can run. `elsewhere`: work outside the scheduler (a transcription
        batch) uses the cores now, so nothing counts as spare."""
        budget = self.budget
        free = None if budget.slots is None else budget.slots - self._busy
        if free is not None and free <= 0:
            return None
        pick = self._pick(now, spread=not elsewhere)
        if pick is None:
            return None
        acoustic, stream = pick.acoustic, pick.stream
        if not acoustic and stream.in_flight:
            self.spread["chunks"] += 1
        idle = free is not None and free == budget.slots and free > 1 and not elsewhere
        if acoustic:
            work: Work = self._claim_acoustic(stream)
        else:
            # Before its first packet a stream has no other unit, so it is alone if no
            # other stream has one.
            first_alone = idle and stream.claimed == 0 and self._pick(now, exclude=stream) is None
            work = self._claim_vocoder(stream, first_alone)
        if idle and budget.spare_threads > 1 and self._pick(now) is None:
            work = replace(work, threads=min(budget.spare_threads, free or 1))  # workers would idle
            self.spread["threads"] += 1
        self._busy += work.threads
        return work

    def next_step(self, now: float, elsewhere: bool = False) -> list[Work]:
        """The units of the next step: one unit on a CPU worker (`next_work`); on a batched
        device, up to `batch` units that one call can run together (one kind: `_kind`;
        fewer where the model bounds a step's frames, `ModelProfile.step_frames`), best
        first by the same ranking. The best unit's kind, if it is urgent or a new
        stream's that has waited `NEW_WAIT_S`; else the kind with the most units
        waiting, so that steps fill: a step costs the device little more for more
        units, and urgent units and first audio still go first.
        Room left in the step goes to a further chunk of the streams already in it (the
        budget's `spare_chunks`), which a batched call runs for little more time.
        Empty when nothing can run or every slot is held."""
        budget = self.budget
        if not budget.stepped:
            work = self.next_work(now, elsewhere)
            return [] if work is None else [work]
        free = budget.batch if budget.slots is None else min(budget.batch, budget.slots - self._busy)
        if free <= 0:
            return []
        slack = self.urgent_slack
        head: tuple[Rank, float, int, bool] | None = None
        chosen: _Queues | None = None
        fullest: _Queues | None = None
        for queues in self._queues.values():
            if not queues.size:
                continue  # only stale entries: nothing to claim
            live, new = queues.head()
            if live is not None:
                key = (_URGENT if live[0] - now <= slack else _AHEAD, live[0], live[1], live[2])
                if head is None or key < head:
                    head, chosen = key, queues
            if new is not None:
                key = (_NEW, new[0], new[1], new[2])
                if head is None or key < head:
                    head, chosen = key, queues
            if fullest is None or queues.size > fullest.size:
                fullest = queues
        if head is None or chosen is None or fullest is None:
            return []
        waited = head[0] == _NEW and now - head[1] >= NEW_WAIT_S
        if head[0] != _URGENT and not waited and fullest.size > chosen.size:
            chosen = fullest  # nothing is urgent: the kind with the most units waiting
        if chosen.limit is not None:
            free = min(free, chosen.limit)  # the model's `step_frames`
        units = chosen.take(free, now, slack)
        step: list[Work]
        if chosen.kind[1] == -1:
            # `_claim_acoustic` for each, inline; on a batched device a stage A claim
            # leaves the queues as they are (`_claimed`).
            step = []
            for stream in units:
                stream.queued_acoustic = None  # its entry left the queue (`_Queues.take`)
                stream.acoustic_busy = True
                index = stream.next_segment
                step.append(AcousticWork(stream.id, index, stream.segments[index], stream.profile.name))
            self._acoustic_in_flight += len(units)
        else:
            step = self._claim_chunks(units, chosen.kind[1], free, now)
        self._busy += len(step)
        return step

    def _claim_chunks(self, units: list[_Stream], size: int, free: int, now: float) -> list[Work]:
        """A batched step's chunks, of window kind `size` (`_kind`): the next chunk of each
        of `units`, then, while the step has fewer than `free`, a further chunk of those
        streams that may run one (`_vocoder_candidate(stream, True, now)`) and whose next
        window is of the same kind, planning at most `FURTHER_LOOKS_PER_SLOT` windows per
        free slot. (The checks and the open latent's lookup are inline: a step checks up
        to `batch` streams.)"""
        step: list[Work] = []
        self._claim_vocoders_stepped(units, step)
        credits, spare, slack = self.credits, self.budget.spare_chunks, self.urgent_slack
        room = free - len(step)
        looks = FURTHER_LOOKS_PER_SLOT * room
        further: list[_Stream] = []
        for stream in units:
            if len(further) >= room or looks <= 0:
                break
            first_packet_at = stream.first_packet_at
            if stream.untaken >= credits or not 0 < stream.in_flight < spare or first_packet_at is None:
                continue
            for latent in stream.latents:  # `_Stream.open_latent`
                if latent.claims == 0 or latent.claimed < latent.latent.frames:
                    break
            else:
                continue
            if first_packet_at + stream.produced / stream.profile.sample_rate - now <= slack:  # `dry_at`
                continue
            # The units share the step's model, so the kind is the window's bucket.
            window = stream.window
            if window is None:
                looks -= 1
                window = stream.window = self._window(stream, latent)
                stream.window_latent = latent
            if (window[4] or window[1] - window[0]) == size:
                further.append(stream)
        self._claim_vocoders_stepped(further, step)
        self.spread["chunks"] += len(further)
        return step

    def _kind(self, stream: _Stream, acoustic: bool) -> tuple[str, int]:
        """What units must share to run in one batched call: the model, and for a chunk
        its window's bucket, or its frames where the model has no buckets (-1 for stage
        A, whose items the model pads and masks)."""
        if acoustic:
            return stream.profile.name, -1
        lo, hi, _, _, bucket = self._next_window(stream)
        return stream.profile.name, bucket or hi - lo

    def _claim_acoustic(self, stream: _Stream) -> AcousticWork:
        stream.acoustic_busy = True
        self._acoustic_in_flight += 1
        index = stream.next_segment
        self._claimed(stream, acoustic=True)
        return AcousticWork(stream.id, index, stream.segments[index], stream.profile.name)

    def _burst(self, stream: _Stream) -> bool:
        """Whether `burst_waiting` other new streams wait for their first chunk to be
        claimed while this one's is: then its first chunk is the plan's second size (32
        frames, not 16). Its first packet leaves a few ms later (the c=16 burst: 10 more
        frames decoded, ~5 ms), but holds twice the audio, so its next chunk is not due
        before the waiting streams' stage A has run, on every worker
        (`_may_take_vocoders_worker`); and 0.37 s of audio costs one chunk's context
        instead of two. The figures: docs/BENCHMARKS.md, "TTS on Piper"."""
        if not self.budget.burst_waiting:
            return False
        waiting = self._unclaimed - (stream.claimed == 0)
        return waiting >= self.budget.burst_waiting

    def _claim_vocoder(self, stream: _Stream, alone: bool = False) -> VocoderWork:
        latent = stream.open_latent()
        assert latent is not None
        seq = stream.claimed
        if seq == 0:
            stream.alone = alone
            stream.skip = int(not alone and self._burst(stream))
        # The window its queue entry was kept under, where no claim changed the plan's
        # start since (`_touch` forgets it at every change; `alone` and `skip` are set
        # above only for a first chunk, which a batched device never claims alone).
        window = stream.window if self.budget.stepped and seq > 0 else None
        lo, hi, start, end, bucket = window or self._window(stream, latent)
        stream.claimed += 1
        self._unclaimed -= seq == 0
        stream.in_flight += 1
        stream.untaken += 1  # a claimed chunk spends its credit until the writer takes it
        latent.claimed = end
        latent.claims += 1
        last = (
            end == latent.frames
            and latent is stream.latents[-1]
            and stream.next_segment >= len(stream.segments)
            and not stream.acoustic_busy
            and stream.complete
        )
        self._claimed(stream, acoustic=False)
        return VocoderWork(stream.id, latent.segment, latent.latent, lo, hi, start, end, last, seq, bucket=bucket)

    def _claim_vocoders_stepped(self, streams: list[_Stream], step: list[Work]) -> None:
        """`_claim_vocoder` on a batched device, for streams whose next chunk's kind was
        just read (their queue entries' or `_claim_chunks`'s), each claimed onto `step`:
        the same claim, with the window computed once and kept (`_next_window`), and
        `_claimed` done in place (a chunk's claim only forgets the kept window). A step
        makes up to `batch` of these under the engine lock, in this one loop."""
        append = step.append
        for stream in streams:
            stream.queued_vocoder = None  # its entry left the queue (`_Queues.take`)
            window = stream.window
            if window is not None:
                latent = stream.window_latent
            else:
                for latent in stream.latents:  # `_Stream.open_latent`
                    if latent.claims == 0 or latent.claimed < latent.latent.frames:
                        break
                else:
                    raise AssertionError("a claimed chunk has an open latent")
            assert latent is not None
            seq = stream.claimed
            # A first chunk's window was planned as the stream was queued, its burst's skip
            # with it (`_touch`); a batched step never claims one alone.
            if window is None:
                window = self._window(stream, latent)
            lo, hi, start, end, bucket = window
            stream.claimed = seq + 1
            self._unclaimed -= seq == 0
            stream.in_flight += 1
            stream.untaken += 1  # a claimed chunk spends its credit until the writer takes it
            latent.claimed = end
            latent.claims += 1
            last = (
                end == latent.latent.frames
                and latent is stream.latents[-1]
                and stream.next_segment >= len(stream.segments)
                and not stream.acoustic_busy
                and stream.complete
            )
            stream.window = None
            append(VocoderWork(stream.id, latent.segment, latent.latent, lo, hi, start, end, last, seq, 1, bucket))

    # -- results ---------------------------------------------------------------------
    def complete_acoustic(
        self, work: AcousticWork, latent: Latent, elapsed: float | None = None
    ) -> None:
        """Record stage A's latent; `elapsed` (its run time) refines the cost estimate of
        the stream's model."""
        self._acoustic_in_flight -= 1
        self._release_workers(work)
        if elapsed is not None and len(work.input.ids) and work.threads == 1:
            # A unit on several threads is a lone stream's, and a model may do less in it
            # (Piper leaves the flow to the vocoder calls): it says little of the one-thread
            # stage A that the deadlines and `_may_take_vocoders_worker` plan for.
            per_id = elapsed / len(work.input.ids)
            estimate = self._acoustic_s_per_id[work.model]
            self._acoustic_s_per_id[work.model] = estimate + 0.2 * (per_id - estimate)
        stream = self._streams.get(work.stream_id)
        if stream is None:
            return
        stream.acoustic_busy = False
        stream.next_segment = work.segment + 1
        if latent.frames > 0 or (stream.complete and stream.next_segment >= len(stream.segments)):
            # An empty last segment still yields one (empty) final chunk to end the stream.
            stream.latents.append(_Latent(work.segment, latent))
        self._touch(stream)

    def complete_vocoder(
        self, work: VocoderWork, samples: int, now: float, elapsed: float | None = None
    ) -> Chunk | None:
        """Record a decoded chunk and release, in stream order, every chunk it completes
        the sequence of; returns what the stream's writer must be told (None once the
        stream is gone). `elapsed` (its run time, one-thread chunks only) refines the
        decode time estimate of the stream's model (`_decode_time`)."""
        self._release_workers(work)
        stream = self._streams.get(work.stream_id)
        if stream is None:
            return None
        if elapsed is not None and work.threads == 1 and work.hi > work.lo:
            name = stream.profile.name
            per_frame = elapsed / (work.hi - work.lo)
            estimate = self._vocoder_s_per_frame.get(name, per_frame)
            self._vocoder_s_per_frame[name] = estimate + 0.2 * (per_frame - estimate)
        stream.in_flight -= 1
        for lat in stream.latents:
            if lat.segment == work.segment:
                lat.done += 1
                lat.done_frames += work.end - work.start
                break
        while stream.latents and stream.latents[0].complete:
            stream.latents.popleft()
        stream.early[work.seq] = samples
        released = total = 0
        first = last = False
        while stream.chunks in stream.early:
            size = stream.early.pop(stream.chunks)
            if stream.first_packet_at is None:
                stream.first_packet_at = now
                first = True
            stream.produced += size
            stream.chunks += 1
            released += 1
            total += size
        if released:
            last = not stream.latents and stream.next_segment >= len(stream.segments)
            last = last and stream.complete and not stream.acoustic_busy
            last = last and not stream.in_flight and not stream.early
        if last:
            del self._streams[stream.id]
        self._touch(stream)
        return Chunk(stream.id, total, first, last, released)

    def fail(self, stream_id: int, work: Work | None = None) -> None:
        """The stream's work raised: drop the stream (and free the work's slot)."""
        if isinstance(work, AcousticWork):
            self._acoustic_in_flight -= 1
        if work is not None:
            self._release_workers(work)
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            stream.unqueue()
            self._unclaimed -= stream.claimed == 0

    def _release_workers(self, work: Work) -> None:
        self._busy = max(0, self._busy - work.threads)
