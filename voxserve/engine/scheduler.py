"""The TTS scheduling policy: which unit of work runs next. Pure and synchronous.

The scheduler owns per-stream state and answers `next_work(now)`. It does no I/O, takes
no locks and never reads a clock: the caller passes `now`. Policy in one place:

- every stream has a playback deadline: the moment its client's player runs dry, counted
  from its first packet and the audio produced so far;
- a live stream whose deadline is within `urgent_slack` outranks everything (earliest
  deadline first); a chunk's deadline is when it must start: its player runs dry then
  less the time the chunk is expected to take (`_decode_time`);
- otherwise a new stream's work goes first (oldest arrival first), so time to first
  packet stays short. With `acoustic_slots`, stage A holds at most that many workers
  while vocoder work waits, unless no live stream would become urgent within twice a
  new stream's expected stage A time (a burst of newcomers then starts on every
  worker), or the stage A is urgent and no chunk is;
- otherwise live streams are served earliest deadline first, which keeps the work
  conserving: streams run ahead of playback until their credits are spent;
- a stream holding `credits` chunks that its client has not taken (in flight counts) is
  skipped until it reads, so a slow client never stalls anyone else;
- stage A of a stream's next sentence may run while its current sentence is vocoded, one
  sentence ahead at most, with the deadline at which the current sentence runs out;
- a stream may start before all its stage A inputs are known (its text's first sentence
  is ready, the rest is still being phonemized): it is open until `extend` brings the
  rest, and no chunk is its last before that.

The idle core. With `workers` given, every unit holds the workers it runs on:
one, or `threads` for a unit on several intra-op threads. While fewer units can run than
there are workers (a lone stream), the work that would leave a worker idle spreads:

- a unit that is the only one runnable, with every worker free, runs on up to
  `idle_threads` intra-op threads (stage A of a lone stream, its last chunk). It holds
  those workers, so work that arrives meanwhile waits for it instead of oversubscribing
  the cores;
- the first chunk of a stream that is alone is smaller (`idle_first_chunk_frames`), and
  its later chunks grow from there (`plan_chunk`). With `idle_pair` its second chunk is
  decoded beside the first, each on one core, instead of after it: ready soon after the
  first packet on a loaded machine too, at the cost of a first chunk on one thread;
- a stream past its first packet may also have up to `idle_chunks` vocoder chunks in flight
  (chunks are independent given their context frames), but a second one is claimed only
  when no other unit of any stream can run, and while the stream is not urgent (an
  urgent lone chunk gets the threads instead). Chunks are released in order: the first
  packet, the audio produced and the end of the stream follow the chunk sequence, whatever
  order the workers finish in, and credits still bound the chunks in flight.

With as many runnable units as workers (the crowded case) neither applies: one unit per
worker, each on one thread, exactly as without them. Neither applies either while the
caller says the cores are used by work outside the scheduler (`next_work(now,
elsewhere=True)`: a transcription batch on the other core).

Streams of several voice models share one scheduler: each stream carries its model's
`ModelProfile` (samples per frame, sample rate, how its frames are cut into chunks), and
every deadline is computed in that stream's own figures. Stage A's cost per phoneme id
is learned per model. The scheduler never sees a model, only profiles and frame counts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from voxserve.config import VocoderChunking
from voxserve.engine.words import WordFrames

__all__ = [
    "AcousticWork",
    "Chunk",
    "Latent",
    "ModelProfile",
    "Scheduler",
    "StageInput",
    "VocoderWork",
    "Work",
    "plan_chunk",
]


@dataclass(frozen=True)
class ModelProfile:
    """What the scheduler knows of a stream's voice model."""

    name: str
    """The model's name: streams of one name share one stage A cost estimate."""
    hop: int
    """Output samples per latent frame."""
    sample_rate: int
    """Output samples per second."""
    chunking: VocoderChunking | None
    """How stage B cuts a segment's frames into streamed chunks; None for a model whose
    decoder must see a whole segment at once (one chunk per segment)."""
    acoustic_s_per_id: float = 5e-4
    """Stage A seconds per phoneme id before any was measured."""
    sentence_chars: int | None = None
    """How `TTSEngine.prepare` cuts text for this model. None: at sentences, the first one
    cut short at a clause for an early first packet (`config.first_segment_chars`, and
    `max_segment_chars`). A number: whole sentences only, cut at clauses only beyond this
    many characters, for a model whose prosody is planned over the whole sentence (cut
    short, each piece is spoken as a sentence of its own: final lengthening, a pause)."""
    chunk_growth: float = 2.0
    """Each chunk after the second is this many times the one before (up to
    `max_chunk_frames`): at most what one thread decodes, context included, while the
    audio before it plays (Piper decodes ~12x real time and doubles)."""
    ramp: float = 1.0
    """Admission counts each stream of this model at its measured cost times this. A
    stream whose chunks grow slowly (Kokoro's by 1.25) keeps up while it ramps only if
    its share of the workers decodes that much faster than it plays, and its first
    windows cost more context per second of audio than the mean the meter sees."""
    crossfade: int = 0
    """Samples over which two chunks of one segment overlap and are crossfaded: 0 for a
    decoder whose windows join exactly given their context (Piper); more for one whose
    windows differ slightly at a join (Kokoro normalizes over its window), so that no
    join clicks. At most a context frame's samples."""


class StageInput(Protocol):
    """One stage A item of a stream, as the scheduler sees it: its phoneme ids (to
    estimate how long stage A takes). The model gets the whole item back."""

    @property
    def ids(self) -> np.ndarray: ...


@dataclass(frozen=True)
class Latent:
    """Stage A's result for one segment: the model's own features over `frames` frames."""

    features: Any
    """Whatever the model's stage B takes (Piper: z [192, frames]); only the model reads it."""
    frames: int
    durations: np.ndarray | None = None
    """Frames per input phoneme id, where the model predicts them (for word timings)."""
    words: tuple[WordFrames, ...] = ()
    """The segment's words and their frames, where the model can tell them."""
    level: np.ndarray | None = None
    """The model's own loudness estimate per frame, where it has one: a chunk then ends
    at the quietest frame near its planned end (`plan_chunk`), where a join is least
    audible."""


@dataclass(frozen=True)
class AcousticWork:
    stream_id: int
    segment: int
    input: StageInput
    model: str
    """The stream's model (its profile's name)."""
    threads: int = 1
    """Intra-op threads to run it on (and workers it holds)."""


@dataclass(frozen=True)
class VocoderWork:
    """Decode frames [lo, hi) of a latent and keep samples of frames [start, end)."""

    stream_id: int
    segment: int
    latent: Latent
    lo: int
    hi: int
    start: int
    end: int
    last: bool
    """Last chunk of the whole stream."""
    seq: int = 0
    """The chunk's place in its stream (0 is the first packet): output goes out in this
    order, whatever order chunks in flight finish in."""
    threads: int = 1
    """Intra-op threads to run it on (and workers it holds)."""

    @property
    def crop(self) -> tuple[int, int]:
        """Frame offsets of the kept part inside the decoded window."""
        return self.start - self.lo, self.end - self.lo


Work = AcousticWork | VocoderWork


@dataclass(frozen=True)
class Chunk:
    """What `complete_vocoder` reports for a finished vocoder chunk: the chunks it released
    in stream order (none while an earlier chunk is still in flight)."""

    stream_id: int
    samples: int
    """Samples released."""
    first: bool
    """The first packet was among them."""
    last: bool
    """The stream ended with them."""
    released: int = 1
    """Chunks released (0: this one waits for an earlier chunk)."""


SNAP_FRAMES = 8
"""How far (frames) a chunk's end may move on to the quietest frame of its latent's
`level`: a fifth of a second at Kokoro's 25 ms frames, enough to reach the gap between two
words or a stop's closure. Only later: a chunk never holds less audio than planned, so
the next one is never due sooner."""


def plan_chunk(
    frames: int, pos: int, index: int, c: VocoderChunking | None, alone: bool = False,
    skip: int = 0, level: np.ndarray | None = None, growth: float = 2.0,
) -> tuple[int, int, int, int]:
    """The window of a stream's chunk number `index`, starting at frame `pos` of a latent
    of `frames` frames: decode [lo, hi), keep [start, end).

    Chunk 0 is small for a fast first packet; later chunks grow by `growth` (Piper:
    double) from `chunk_frames` up to `max_chunk_frames`. A stream whose first chunk was
    claimed `alone` starts at `idle_first_chunk_frames`, and every chunk after it grows
    from there (Piper: 12, 24, 48, ...), so that each one is ready before the audio before it has played: a
    12-frame first chunk leaves its second 120 ms of audio to arrive in, where 8 frames
    (74 ms) ran dry on a loaded machine and gained only 2-3 ms on a quiet one. A
    stream that `skip`s sizes starts further along the same plan (skip 1: 32, 64, 128,
    ...). A tail shorter than half a chunk joins the chunk before it. With a `level` per
    frame, the end moves on to the quietest frame within `SNAP_FRAMES` (and a quarter of
    the chunk) after the planned one. With no chunking (a whole-segment model) the chunk is the
    rest of the latent.
    """
    if c is None:
        return pos, frames, pos, frames
    step = index + skip
    if alone:
        size = min(c.max_chunk_frames, int(c.idle_first_chunk_frames * growth ** min(step, 12)))
    elif step == 0:
        size = c.first_chunk_frames
    else:
        size = min(c.max_chunk_frames, int(c.chunk_frames * growth ** min(step - 1, 12)))
    start = pos
    end = min(frames, start + size)
    if index > 0 and frames - end < c.chunk_frames // 2:
        end = frames
    if level is not None and end < frames:
        hi = min(frames - c.chunk_frames // 2, end + min(SNAP_FRAMES, size // 4))
        if end < hi:
            end += int(np.argmin(level[end:hi]))
    return max(0, start - c.left_context), min(frames, end + c.right_context), start, end


@dataclass
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


@dataclass
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

    def open_latent(self) -> _Latent | None:
        for lat in self.latents:
            if lat.open:
                return lat
        return None

    def dry_at(self) -> float:
        assert self.first_packet_at is not None
        return self.first_packet_at + self.produced / self.profile.sample_rate


class Scheduler:
    """Deadline scheduler over stage A segments and stage B chunks of all live streams."""

    def __init__(
        self,
        credits: int = 4,
        urgent_slack: float = 0.15,
        acoustic_slots: int | None = None,
        workers: int | None = None,
        idle_threads: int = 1,
        idle_chunks: int = 1,
        idle_pair: bool = False,
        burst_waiting: int = 0,
    ):
        self.credits = credits
        self.urgent_slack = urgent_slack
        self.acoustic_slots = acoustic_slots
        """Most stage A items in flight while vocoder work waits (None: no limit). With
        one worker left for the vocoder, long sentences cannot stall every stream. A new
        stream's stage A may go past it while no live stream would become urgent within
        twice its expected time, and an urgent one while no chunk is
        (`_may_take_vocoders_worker`)."""
        self.workers = workers
        """Workers that run the units (None: unbounded, and no idle-core policy): a unit
        holds `threads` of them while it runs, and none is handed out past them."""
        self.idle_threads = idle_threads
        """Most intra-op threads for a unit that is alone while every worker is free."""
        self.idle_chunks = idle_chunks
        """Most vocoder chunks of one stream in flight while workers would idle."""
        self.idle_pair = idle_pair
        """A lone stream's second chunk goes beside its first (else the first runs on
        `idle_threads` threads, and the second after it)."""
        self.burst_waiting = burst_waiting
        """Other new streams waiting for their first chunk at which a stream starts with
        the plan's second chunk size (`_burst`); 0: never."""
        self._busy = 0
        """Workers held by the units in flight."""
        self.spread: dict[str, int] = {"threads": 0, "chunks": 0}
        """Units handed out on several threads, and chunks claimed beside another of
        their stream: how often the idle-core policies applied."""
        self._acoustic_s_per_id: dict[str, float] = {}
        """Running estimate of stage A seconds per phoneme id, per model, to start it
        early enough."""
        self._acoustic_in_flight = 0
        self._vocoder_s_per_frame: dict[str, float] = {}
        """Running estimate of a one-thread vocoder call's seconds per decoded frame, per
        model, from the chunks timed so far (`complete_vocoder`)."""
        self._streams: dict[int, _Stream] = {}

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
        self._streams[stream_id] = _Stream(stream_id, now, list(segments), profile, complete)

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
        if stream.acoustic_busy or stream.next_segment < len(stream.segments):
            return  # a later stage A's latent ends the stream
        if stream.open_latent() is None:
            # Every chunk made so far was claimed before the stream knew it was ending,
            # none of them as the last: an empty chunk ends it.
            stream.latents.append(_Latent(len(stream.segments), Latent(None, 0)))

    def acoustic_s_per_id(self, model: str) -> float | None:
        """The current stage A estimate of a model (None before its first stream)."""
        return self._acoustic_s_per_id.get(model)

    def abort(self, stream_id: int) -> bool:
        """Forget a stream; its in-flight work is discarded on completion."""
        return self._streams.pop(stream_id, None) is not None

    def taken(self, stream_id: int) -> None:
        """The stream's writer took one chunk: one credit back."""
        stream = self._streams.get(stream_id)
        if stream is not None and stream.untaken > 0:
            stream.untaken -= 1

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

    def lagging(self, now: float, min_slack: float) -> int:
        """Streams past start-up whose playback runs dry within `min_slack` seconds.

        Streams out of credit are not counted: their client is the slow part, not us.
        Nor are streams whose first packet went out less than `min_slack` ago: they have
        not had the time to build that much audio ahead (after two chunks, 48 frames, a
        Piper stream has 0.56 s, so at 0.5 s it would count 57 ms after its first packet),
        and the urgent class keeps them playing. Counted, they would make each newcomer of
        a burst wait for the one before to get its third chunk out.
        Admission holds new streams while this is non-zero, so an overloaded machine
        queues newcomers instead of degrading every live stream at once. A `min_slack`
        below `urgent_slack` counts only streams the scheduler is failing to serve in
        time: one served just in time, as every live stream is while newcomers' first
        chunks go first, keeps `urgent_slack` ahead.
        """
        count = 0
        for stream in self._streams.values():
            if stream.first_packet_at is None or stream.chunks < 2:
                continue
            if now - stream.first_packet_at < min_slack:
                continue
            if stream.untaken >= self.credits:
                continue
            if stream.dry_at() - now < min_slack:
                count += 1
        return count

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
    def _vocoder_candidate(self, stream: _Stream, extra: bool, now: float = 0.0) -> bool:
        """A chunk of the stream may be claimed: its first in flight, or (`extra`) one more
        beside those in flight, up to `idle_chunks`: before the first packet, the second
        chunk of a stream that started alone (so that it is ready long before the small
        first one has played, whatever slows the machine down); after the first packet,
        while the stream is not urgent (if the cores are busier than the scheduler knows,
        say with another process, two chunks would share one core, and the earlier one,
        which the player waits for, would come later)."""
        if stream.untaken >= self.credits or stream.open_latent() is None:
            return False
        if not extra:
            return stream.in_flight == 0
        if not 0 < stream.in_flight < self.idle_chunks:
            return False
        if stream.first_packet_at is None:
            return self.idle_pair and stream.alone and stream.claimed == 1
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

    def _window(self, stream: _Stream, latent: _Latent) -> tuple[int, int, int, int]:
        """`plan_chunk`'s window for the stream's next chunk, cut from `latent`."""
        return plan_chunk(
            latent.frames, latent.claimed, stream.claimed, stream.profile.chunking, stream.alone,
            stream.skip, latent.latent.level, stream.profile.chunk_growth,
        )

    def _decode_time(self, stream: _Stream) -> float:
        """How long the stream's next chunk is expected to take on one thread (0 before any
        chunk of its model was timed). A chunk is ranked by when it must start, not by
        when its player runs dry: a 128-frame chunk takes ~80 ms on one core, so the
        urgent slack alone leaves it too little room once the machine slows down."""
        per_frame = self._vocoder_s_per_frame.get(stream.profile.name)
        latent = stream.open_latent()
        if not per_frame or latent is None:
            return 0.0
        lo, hi, _, _ = self._window(stream, latent)
        return per_frame * (hi - lo)

    def _rank(self, stream: _Stream, acoustic: bool, now: float) -> tuple[int, float, int]:
        deadline = self._deadline(stream, acoustic)
        if stream.first_packet_at is None:
            return (1, deadline, stream.id)
        if not acoustic:
            deadline -= self._decode_time(stream)
        if deadline - now <= self.urgent_slack:
            return (0, deadline, stream.id)
        return (2, deadline, stream.id)

    def _pick(
        self, now: float, exclude: _Stream | None = None, spread: bool = True
    ) -> tuple[bool, _Stream] | None:
        """The best unit to run now, as (stage A?, stream), without claiming it: one unit
        per stream at a time, else (only when none is left, and `spread`) a further chunk
        of a stream. `exclude`: a stream not to consider."""
        best: dict[bool, tuple[int, float, int]] = {}  # acoustic? -> (class, key, stream id)
        for stream in self._streams.values():
            if stream is exclude:
                continue
            for acoustic in (False, True):
                ok = self._acoustic_candidate(stream) if acoustic else self._vocoder_candidate(stream, False)
                if not ok:
                    continue
                rank = self._rank(stream, acoustic, now)
                if acoustic not in best or rank < best[acoustic]:
                    best[acoustic] = rank
        if (
            True in best
            and False in best
            and self.acoustic_slots is not None
            and self._acoustic_in_flight >= self.acoustic_slots
            and not self._may_take_vocoders_worker(best[True], best[False], now)
        ):
            del best[True]  # keep a worker for the vocoder
        if best:
            acoustic = min(best, key=lambda k: best[k])
            return acoustic, self._streams[best[acoustic][2]]
        if self.workers is None or self.idle_chunks < 2 or not spread:
            return None
        extra = [
            (self._rank(stream, False, now), stream)
            for stream in self._streams.values()
            if stream is not exclude and self._vocoder_candidate(stream, True, now)
        ]
        return (False, min(extra, key=lambda e: e[0])[1]) if extra else None

    def _may_take_vocoders_worker(
        self, acoustic: tuple[int, float, int], vocoder: tuple[int, float, int], now: float
    ) -> bool:
        """Whether the best stage A (`acoustic`, its rank) may take a worker beyond
        `acoustic_slots` although vocoder work waits (`vocoder`, the best one's rank):
        - a live stream's urgent stage A (its next sentence), while no chunk is urgent;
        - a new stream's stage A, while the live stream that needs the vocoder soonest is
          not urgent and would not be within twice this stage A's expected time (the
          spare that a next sentence's stage A gets too: `_deadline`). Else the
          worker kept for the vocoder would only run that stream further ahead of its
          player while the newcomer waits, and a burst of newcomers would run its stage
          A's one at a time on one worker."""
        if acoustic[0] == 0:
            return vocoder[0] > 0
        if acoustic[0] != 1 or vocoder[0] != 2:
            return False
        expected = self._acoustic_time(self._streams[acoustic[2]])
        return vocoder[1] - now - 2 * expected > self.urgent_slack

    def next_work(self, now: float, elsewhere: bool = False) -> Work | None:
        """Pick and claim the next unit of work, or None if nothing can run now (or every
        worker is held). `elsewhere`: work outside the scheduler uses the cores now, so
        none of the idle-core policies applies (no unit on several threads, no second
        chunk of a stream)."""
        free = None if self.workers is None else self.workers - self._busy
        if free is not None and free <= 0:
            return None
        pick = self._pick(now, spread=not elsewhere)
        if pick is None:
            return None
        acoustic, stream = pick
        if not acoustic and stream.in_flight:
            self.spread["chunks"] += 1
        idle = free is not None and free == self.workers and free > 1 and not elsewhere
        if acoustic:
            work: Work = self._claim_acoustic(stream)
        else:
            # Before its first packet a stream has no other unit, so it is alone if no
            # other stream has one.
            first_alone = idle and stream.claimed == 0 and self._pick(now, exclude=stream) is None
            work = self._claim_vocoder(stream, first_alone)
        if idle and self.idle_threads > 1 and self._pick(now) is None:
            work = replace(work, threads=min(self.idle_threads, free or 1))  # workers would idle
            self.spread["threads"] += 1
        self._busy += work.threads
        return work

    def _claim_acoustic(self, stream: _Stream) -> AcousticWork:
        stream.acoustic_busy = True
        self._acoustic_in_flight += 1
        index = stream.next_segment
        return AcousticWork(stream.id, index, stream.segments[index], stream.profile.name)

    def _burst(self, stream: _Stream) -> bool:
        """Whether `burst_waiting` other new streams wait for their first chunk to be
        claimed while this one's is: then its first chunk is the plan's second size (32
        frames, not 16). Its first packet leaves a few ms later (the c=16 burst: 10 more
        frames decoded, ~5 ms), but holds twice the audio, so its next chunk is not due
        before the waiting streams' stage A has run, on every worker
        (`_may_take_vocoders_worker`); and 0.37 s of audio costs one chunk's context
        instead of two. At c=16 on two cores the opening burst's first-audio p99 is ~10 %
        lower with it (docs/BENCHMARKS.md, "TTS on Piper")."""
        if not self.burst_waiting:
            return False
        waiting = sum(
            1 for other in self._streams.values() if other is not stream and other.claimed == 0
        )
        return waiting >= self.burst_waiting

    def _claim_vocoder(self, stream: _Stream, alone: bool = False) -> VocoderWork:
        latent = stream.open_latent()
        assert latent is not None
        seq = stream.claimed
        if seq == 0:
            stream.alone = alone
            stream.skip = int(not alone and self._burst(stream))
        lo, hi, start, end = self._window(stream, latent)
        stream.claimed += 1
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
        return VocoderWork(stream.id, latent.segment, latent.latent, lo, hi, start, end, last, seq)

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
        return Chunk(stream.id, total, first, last, released)

    def fail(self, stream_id: int, work: Work | None = None) -> None:
        """The stream's work raised: drop the stream (and free the work's slot)."""
        if isinstance(work, AcousticWork):
            self._acoustic_in_flight -= 1
        if work is not None:
            self._release_workers(work)
        self._streams.pop(stream_id, None)

    def _release_workers(self, work: Work) -> None:
        self._busy = max(0, self._busy - work.threads)
