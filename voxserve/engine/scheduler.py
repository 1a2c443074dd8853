"""The TTS scheduling policy: which units of work run next. Pure and synchronous.

The schedulers own per-stream state and answer `next_step(now)`: the units a device
runs next. They do no I/O, take no locks and never read a clock: the caller passes
`now`. The work is of two kinds: a stream's stage A on one sentence, and a vocoder chunk
of one stream. Two policies, one per kind of device, share this module's base
(`Scheduler`): the requests, the results and their estimates, and the rules below that
both follow. `CpuScheduler` (`engine/cpu_scheduler.py`) hands a CPU worker one unit at a
time; `BatchedScheduler` (`engine/batched_scheduler.py`) gathers a batched device's
steps from per-kind queues. The engine picks one by its budget (`Budget.stepped`,
`engine/tts.py`). The records they keep are in `engine/queues.py`.

- **One ranking** (`Rank`). A live stream's unit that must start within `urgent_slack`
  is URGENT (a chunk must start when its player runs dry less its expected decode
  time); a stream before its first packet is NEW, by arrival, so time to first audio
  stays short; every other live stream's unit is AHEAD, earliest deadline first, which
  keeps the work conserving: streams run ahead of playback until their credits are
  spent. A stream holding `credits` chunks that its client has not taken (in flight
  counts) is not ranked until it reads, so a slow client never stalls anyone else.
  Stage A of a stream's next sentence is ranked by when the current one runs out, one
  sentence ahead at most.
- **One budget** (`Budget`): a device's slots, each unit holding the slots of its
  threads. A CPU worker's step is one unit; a batched device's step (a GPU) is up to
  `batch` units of one stage, one model and one window bucket, filled best first: the
  head's kind if it is urgent (or a new stream's that waited long enough), else the
  kind with the most units waiting. On a CPU, stage A holds at most `acoustic_slots`
  (all its workers but one) while chunks wait, unless a newcomer's stage A would make
  no live stream urgent, or it is itself urgent and no chunk is.
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

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from voxserve.engine.queues import LatentState, StreamState
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
    (`CpuScheduler._may_take_vocoders_worker`)."""
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



class Scheduler(ABC):
    """Deadline scheduler over stage A segments and stage B chunks of all live streams:
    what both policies share. A policy answers `next_step`, and `_touch` is told of
    every change of a stream's state that may move what it can claim."""

    def __init__(
        self, credits: int = CREDITS, budget: Budget | None = None, urgent_slack: float = URGENT_SLACK_S
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
        self._streams: dict[int, StreamState] = {}

    @abstractmethod
    def next_step(self, now: float, elsewhere: bool = False) -> list[Work]:
        """The units of the next step, best first; empty when nothing can run or every
        slot is held. `elsewhere`: work outside the scheduler (a transcription batch)
        uses the cores now, so nothing counts as spare."""

    def _touch(self, stream: StreamState) -> None:
        """After any change to a stream's state, its end included: a batched device
        queues the units it may claim now (`BatchedScheduler._touch`)."""

    def _windows_for(self, profile: ModelProfile) -> BatchedWindows | None:
        """A new stream's window tables (None: its windows are planned by `plan_chunk`)."""
        return None

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
        windows = self._windows_for(profile)
        stream = StreamState(stream_id, now, list(segments), profile, complete, windows=windows)
        self._streams[stream_id] = stream
        self._unclaimed += 1
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
            stream.latents.append(LatentState(len(stream.segments), Latent(None, 0)))
        self._touch(stream)

    def acoustic_s_per_id(self, model: str) -> float | None:
        """The current stage A estimate of a model (None before its first stream)."""
        return self._acoustic_s_per_id.get(model)

    def abort(self, stream_id: int) -> bool:
        """Forget a stream; its in-flight work is discarded on completion."""
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            self._touch(stream)
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

    # -- the rules both policies follow ----------------------------------------------
    def _vocoder_candidate(self, stream: StreamState, extra: bool, now: float = 0.0) -> bool:
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

    def _acoustic_candidate(self, stream: StreamState) -> bool:
        if stream.acoustic_busy or stream.next_segment >= len(stream.segments):
            return False
        return len(stream.latents) < 2 and not (
            len(stream.latents) == 1 and stream.first_packet_at is None
        )

    def _deadline(self, stream: StreamState, acoustic: bool) -> float:
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

    def _acoustic_time(self, stream: StreamState) -> float:
        """How long the stream's next stage A is expected to take on one thread."""
        ids = len(stream.segments[stream.next_segment].ids)
        return ids * self._acoustic_s_per_id[stream.profile.name]

    def _burst(self, stream: StreamState) -> bool:
        """Whether `burst_waiting` other new streams wait for their first chunk to be
        claimed while this one's is: then its first chunk is the plan's second size (32
        frames, not 16). Its first packet leaves a little later (a few more frames to
        decode), but holds twice the audio, so its next chunk is not due before the
        waiting streams' stage A has run, on every worker
        (`CpuScheduler._may_take_vocoders_worker`); and the same audio costs one chunk's
        context instead of two. The figures: docs/BENCHMARKS.md, "TTS on Piper"."""
        if not self.budget.burst_waiting:
            return False
        waiting = self._unclaimed - (stream.claimed == 0)
        return waiting >= self.budget.burst_waiting

    def _book_acoustic(self, stream: StreamState) -> AcousticWork:
        """Count the stream's next stage A as claimed, and return it. Both policies claim
        stage A through this."""
        stream.acoustic_busy = True
        self._acoustic_in_flight += 1
        index = stream.next_segment
        return AcousticWork(stream.id, index, stream.segments[index], stream.profile.name)

    def _book_claim(self, stream: StreamState, latent: LatentState, end: int) -> tuple[int, bool]:
        """Count the stream's next chunk, ending at frame `end` of `latent`, as claimed;
        returns its sequence number and whether it is the stream's last (the end of its
        last latent, with no segment left for stage A and the text complete). Both
        policies claim through this, so a chunk is counted one way."""
        seq = stream.claimed
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
        return seq, last

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
            # stage A that the deadlines and `CpuScheduler._may_take_vocoders_worker` plan for.
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
            stream.latents.append(LatentState(work.segment, latent))
        self._touch(stream)

    def complete_vocoder(
        self, work: VocoderWork, samples: int, now: float, elapsed: float | None = None
    ) -> Chunk | None:
        """Record a decoded chunk and release, in stream order, every chunk it completes
        the sequence of; returns what the stream's writer must be told (None once the
        stream is gone). `elapsed` (its run time, one-thread chunks only) refines the
        decode time estimate of the stream's model, by which its chunks are ranked."""
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
            self._touch(stream)
            self._unclaimed -= stream.claimed == 0

    def _release_workers(self, work: Work) -> None:
        self._busy = max(0, self._busy - work.threads)
