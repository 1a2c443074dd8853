"""The units of TTS work and how a segment is cut into them: what the scheduler takes in
(`ModelProfile`, `StageInput`, `Latent`), what it hands out (`AcousticWork`, `VocoderWork`)
and reports (`Chunk`, `Playback`), and the chunk plan (`plan_chunk`, and its tables for a
batched device, `BatchedWindows`). Pure data and pure functions; the policy that orders
the units is `engine/scheduler.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from voxserve.engine.words import WordFrames

__all__ = [
    "SNAP_FRAMES",
    "AcousticWork",
    "BatchedWindows",
    "Chunk",
    "Latent",
    "ModelProfile",
    "Playback",
    "StageInput",
    "VocoderChunking",
    "VocoderWork",
    "Work",
    "bucket_window",
    "chunk_size",
    "plan_chunk",
]


@dataclass(frozen=True)
class VocoderChunking:
    """How stage B (the vocoder) cuts a segment's latent frames into streamed chunks: part
    of a voice model's profile (Piper's: `engine/adapters/piper.py: CHUNKING`)."""

    first_chunk_frames: int = 16
    """Core frames in a stream's first chunk; small, so the first audio leaves early."""
    idle_first_chunk_frames: int = 12
    """Core frames in the first chunk of a stream that arrives alone (every worker free);
    its later chunks double from there. Smaller leaves sooner but gives the second chunk
    less audio to arrive in (12 frames: 120 ms); 16 gives the crowded plan's sizes."""
    chunk_frames: int = 32
    """Core frames in the second chunk (256 samples each, so 32 frames = 372 ms at 22 kHz)."""
    max_chunk_frames: int = 128
    """Later chunks double in size up to this; larger chunks decode fewer context frames
    per frame kept (1.16x at 128). Set it equal to `chunk_frames` for fixed-size chunks."""
    left_context: int = 10
    """Frames decoded before a chunk and cropped away, so joins are seamless."""
    right_context: int = 10
    """Frames decoded after a chunk and cropped away."""

    def __post_init__(self) -> None:
        if min(self.first_chunk_frames, self.idle_first_chunk_frames, self.chunk_frames) < 1:
            raise ValueError("chunk sizes must be at least 1 frame")
        if self.max_chunk_frames < self.chunk_frames:
            raise ValueError("max_chunk_frames must be >= chunk_frames")
        if self.left_context < 0 or self.right_context < 0:
            raise ValueError("context frames must be >= 0")


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
    cut short at a clause for an early first packet (`engine/tts.py: FIRST_SEGMENT_CHARS`,
    and `MAX_SEGMENT_CHARS`). A number: whole sentences only, cut at clauses only beyond this
    many characters, for a model whose prosody is planned over the whole sentence (cut
    short, each piece is spoken as a sentence of its own: final lengthening, a pause)."""
    chunk_growth: float = 2.0
    """Each chunk after the second is this many times the one before (up to
    `max_chunk_frames`): at most what one thread decodes, context included, while the
    audio before it plays (Piper decodes many times faster than real time, so it doubles)."""
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
    window_buckets: tuple[int, ...] = ()
    """Window sizes (frames, context included, ascending) that a batched device decodes
    chunks of this model in (`bucket_window`): chunks whose windows fall in one bucket
    share a step, whatever point of its plan each stream is at. Empty: each window keeps
    its own size, and only equal windows share a step. A CPU ignores them."""
    step_frames: int | None = None
    """On a batched device, the most frames one decoder step of this model holds (its
    windows times their bucket; at least one window): a bound on how long a step holds
    the device, so on how long a new stream's first window, or a live stream's urgent
    chunk, waits behind the step ahead of it. None: `batch` windows of any size. A CPU
    ignores it."""

    def __post_init__(self) -> None:
        buckets = self.window_buckets
        if any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ValueError("window_buckets must be distinct positive frame counts, ascending")
        if self.step_frames is not None and self.step_frames < 1:
            raise ValueError("step_frames must be a positive frame count, or None")


class StageInput(Protocol):
    """One stage A item of a stream, as the scheduler sees it: its phoneme ids (to
    estimate how long stage A takes). The model gets the whole item back."""

    @property
    def ids(self) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
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


@dataclass(slots=True)
class AcousticWork:
    """Run stage A on one segment of a stream. Slotted and not frozen, as `VocoderWork`:
    one is built for every unit claimed, and nothing changes it once it is handed out."""

    stream_id: int
    segment: int
    input: StageInput
    model: str
    """The stream's model (its profile's name)."""
    threads: int = 1
    """Intra-op threads to run it on (and workers it holds)."""


@dataclass(slots=True)
class VocoderWork:
    """Decode frames [lo, hi) of a latent and keep samples of frames [start, end).

    Slotted and not frozen: a batched step builds up to a hundred of these under the
    engine lock, and a frozen dataclass's constructor costs about four times a plain
    one's. Nothing changes a unit once the scheduler has handed it out (a changed copy
    is made with `dataclasses.replace`)."""

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
    bucket: int = 0
    """The window size a batched step groups it by (`bucket_window`): hi - lo where the
    latent has that many frames, else more than hi - lo (the runner pads the span). 0:
    not bucketed (a CPU, or a model without buckets)."""

    @property
    def crop(self) -> tuple[int, int]:
        """Frame offsets of the kept part inside the decoded window."""
        return self.start - self.lo, self.end - self.lo


Work = AcousticWork | VocoderWork


@dataclass(frozen=True)
class Playback:
    """A live stream's player, as admission sees it."""

    started: float
    """When its first packet went out."""
    dry_at: float
    """When it runs out of the audio released so far."""
    out_of_credit: bool
    """Its client has not taken `credits` chunks: the client is the slow part."""


@dataclass(frozen=True, slots=True)
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


def chunk_size(c: VocoderChunking, step: int, alone: bool = False, growth: float = 2.0) -> int:
    """Core frames of the chunk at `step` of a plan (`plan_chunk`): the first chunk's size,
    then `chunk_frames` growing by `growth` up to `max_chunk_frames`; from
    `idle_first_chunk_frames` for a stream that started `alone`. Sizes stop growing after
    12 steps."""
    if alone:
        return min(c.max_chunk_frames, int(c.idle_first_chunk_frames * growth ** min(step, 12)))
    if step == 0:
        return c.first_chunk_frames
    return min(c.max_chunk_frames, int(c.chunk_frames * growth ** min(step - 1, 12)))


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
    12-frame first chunk leaves its second 120 ms of audio to arrive in; a smaller one
    leaves too little on a loaded machine and gains little on a quiet one. A
    stream that `skip`s sizes starts further along the same plan (skip 1: 32, 64, 128,
    ...). A tail shorter than half a chunk joins the chunk before it. With a `level` per
    frame, the end moves on to the quietest frame within `SNAP_FRAMES` (and a quarter of
    the chunk) after the planned one. With no chunking (a whole-segment model) the chunk is the
    rest of the latent.
    """
    if c is None:
        return pos, frames, pos, frames
    size = chunk_size(c, index + skip, alone, growth)
    start = pos
    end = min(frames, start + size)
    if index > 0 and frames - end < c.chunk_frames // 2:
        end = frames
    if level is not None and end < frames:
        hi = min(frames - c.chunk_frames // 2, end + min(SNAP_FRAMES, size // 4))
        if end < hi:
            end += int(np.argmin(level[end:hi]))
    return max(0, start - c.left_context), min(frames, end + c.right_context), start, end


def bucket_window(frames: int, lo: int, hi: int, buckets: tuple[int, ...]) -> tuple[int, int, int]:
    """Window [lo, hi) of a latent of `frames` frames grown to the smallest of `buckets`
    that holds it, with more real frames of the latent as context: on the right, then
    (at the latent's end) on the left. Returns the new lo, hi and the bucket. Where the
    latent has fewer frames than the bucket, the window is the whole latent, shorter
    than its bucket. A window larger than every bucket keeps its size (its own bucket).
    The kept frames do not move, so a chunk's crop (`VocoderWork.crop`) still yields
    exactly its own samples."""
    size = hi - lo
    bucket = next((b for b in buckets if b >= size), size)
    hi = min(frames, lo + bucket)
    lo = max(0, hi - bucket)
    return lo, hi, bucket


class BatchedWindows:
    """A profile's chunk windows on a batched device, from tables built once: what
    `plan_chunk` (no `level`: a batched device keeps the plan's exact sizes) and then
    `bucket_window` give, without their arithmetic. A batched step plans a window for
    each further chunk it claims, under the engine lock, so a window costs a few
    lookups; tests/test_step_fill.py checks it against the two functions."""

    __slots__ = ("_bucket", "_chunking", "_half", "_left", "_right", "_sizes", "_sizes_alone")

    def __init__(self, profile: ModelProfile):
        c = self._chunking = profile.chunking
        growth = profile.chunk_growth
        self._sizes: tuple[int, ...] = ()
        self._sizes_alone: tuple[int, ...] = ()
        self._half = self._left = self._right = 0
        if c is not None:
            # `chunk_size` stops growing at step 13 (12 when alone).
            self._sizes = tuple(chunk_size(c, step, False, growth) for step in range(14))
            self._sizes_alone = tuple(chunk_size(c, step, True, growth) for step in range(13))
            self._half, self._left, self._right = c.chunk_frames // 2, c.left_context, c.right_context
        buckets = profile.window_buckets
        self._bucket: tuple[int, ...] | None = None
        """The bucket of each window size up to the largest bucket (None: no buckets)."""
        if buckets:
            self._bucket = tuple(next(b for b in buckets if b >= size) for size in range(buckets[-1] + 1))

    def window(self, frames: int, pos: int, index: int, alone: bool, skip: int) -> tuple[int, int, int, int, int]:
        """Decode [lo, hi), keep [start, end), and the bucket (0: the profile has none) of
        chunk `index` at frame `pos` of a latent of `frames` frames, as `plan_chunk` then
        `bucket_window`."""
        if self._chunking is None:
            lo, hi, start, end = pos, frames, pos, frames
        else:
            step = index + skip
            if alone:
                size = self._sizes_alone[min(12, step)]
            else:
                size = self._sizes[min(13, step)]
            start = pos
            end = pos + size
            end = min(end, frames)
            if index > 0 and frames - end < self._half:
                end = frames
            lo = pos - self._left
            lo = max(lo, 0)
            hi = end + self._right
            hi = min(hi, frames)
        table = self._bucket
        if table is None:
            return lo, hi, start, end, 0
        size = hi - lo
        if size >= len(table):
            return lo, hi, start, end, size  # larger than every bucket: its own
        bucket = table[size]
        hi = lo + bucket
        hi = min(hi, frames)
        lo = hi - bucket
        lo = max(lo, 0)
        return lo, hi, start, end, bucket
