"""Live transcription sessions: audio streams in, turns are found, transcripts come out.

A `LiveSession` is the channel-independent half of a realtime transcription session
(`WS /v1/realtime` is the channel, `voxserve.api.realtime`). The channel hands it audio
bytes, commits and clears in order; the session hands back `LiveEvent`s through the
`emit` callback. Per append, on the event loop, it decodes the bytes to 16 kHz
(`InputDecoder`, microseconds), passes them through the session's noise filter when
`noise_reduction` asks for one (on the filter's threads, `engine/denoise.py`; its output
keeps the input's sample indices), scores whole 32 ms frames of what the filter hands on
with Silero VAD on the VAD engine's thread, and feeds the probabilities to a
`TurnDetector`. Turns are cut from the audio as sent: the recognizer never hears the
filter (docs/REALTIME.md, "Noise reduction", says why). Transcription is work
for the shared ASR engine, with a deadline so that it goes before file work:

- **final**: the committed turn, from its first speech frame (less the prefix padding) to
  `tail` after its end of speech. When speech pauses it starts at once (`EARLY_FINAL_MS`
  into the pause), while the rest of the silence that will end the turn runs, unless
  other live work is already waiting; speech that resumes drops it. Otherwise it starts
  at the commit. Its deadline is `final_target_ms` after the expected end of the turn.
- **deltas**: while the user speaks, at most every `DELTA_INTERVAL_MS` and only when an
  ASR worker is idle, the turn so far is decoded again; the words two decodes in a row
  agree on (and were not sent yet) go out as a delta. Their deadline is later than any
  final's, so they never delay one.

Whether a delta or an early final starts now, and every deadline, is the ASR engine's
live policy's to say (`engine/live.py`), as is how many sessions are let in.

Transcripts of one session are emitted in commit order. A session holds at most
`max_pending_turns` turns in transcription; `append` and `commit` wait past that, which
stops the channel reading. Nothing here knows HTTP or JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from voxserve.audio.pcm import InputDecoder
from voxserve.config import RealtimeConfig
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.cores import SharedCores
from voxserve.engine.denoise import DenoiseEngine, DenoiseStream
from voxserve.engine.stream import StreamFailed
from voxserve.engine.transcribe import start_live
from voxserve.engine.turns import Pause, Resume, Start, Stop, TurnDetector
from voxserve.engine.vad import COMPLETE_AT, FRAME_SAMPLES, VADEngine, VADStream
from voxserve.errors import InvalidRequest, Overloaded, ServerError, VoxError
from voxserve.serving.catalog import asr_model
from voxserve.serving.metrics import Metrics

__all__ = [
    "Cleared",
    "Committed",
    "LiveEvent",
    "LiveSession",
    "LiveSettings",
    "LiveTranscriber",
    "SessionError",
    "SpeechStarted",
    "SpeechStopped",
    "TranscriptCompleted",
    "TranscriptDelta",
    "TranscriptFailed",
    "TurnDetection",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

RATE = 16000
MIN_COMMIT_S = 0.1
"""A commit of less audio is refused (as OpenAI does)."""
MIN_TAIL_S = 0.096
"""Audio after the end of speech that a final always includes."""
DELTA_MIN_S = 1.0
"""A turn is decoded for deltas once it holds this much audio."""
EARLY_FINAL_MS = 96.0
"""Once speech has paused this long, the final is decoded at once (unless other live work
waits for a worker) while the rest of `silence_duration_ms` runs; speech that resumes
drops it. Shorter pauses come inside words; docs/BENCHMARKS.md has the finals it saves."""
DELTA_INTERVAL_MS = 1000.0
"""Partial transcripts of a turn in progress are decoded at most this often, and only
when an ASR worker is idle: each costs a decode of the whole turn so far."""
PREFIX_S = 0.3
"""With manual commits: audio kept before and after speech when silence is dropped."""


EAGERNESS_WAIT_S = {"low": 8.0, "medium": 4.0, "high": 2.0, "auto": 4.0}
"""semantic_vad: the longest silence that ends a turn the model calls unfinished (OpenAI's
documented maxima; `auto` is `medium`)."""
EAGERNESS_FIRST_MS = {"low": 1000.0, "medium": 700.0, "high": 250.0, "auto": 700.0}
"""semantic_vad: the shortest silence after which the end-of-turn model may end a turn.
Speakers pause mid-thought, and often after words that already make a sentence ("Please
send the report | to my manager"): on 185 sentences with a 600 ms pause put in mid-thought,
in four voices, the model and the transcript together took a fifth to a quarter of those
pauses for an end at any silence under 600 ms, and the voices' own phrase pauses inside
whole sentences ran to 384 ms. So `medium` (and `auto`) waits out 700 ms, `low` a second,
and `high` ends turns at 250 ms and cuts thoughts at their pauses (the measured figures:
docs/REALTIME.md, `scripts/bench/turn_rule.py`)."""
PROBES_MS = (250.0, 400.0, 550.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0)
"""semantic_vad: silences at which the end-of-turn model is asked again whether the thought
is complete (from the eagerness's first one on): its answer firms up as the silence grows."""
DOUBT_AFTER_MS = 1000.0
"""semantic_vad: after this much silence a turn ends at `DOUBTFUL_AT` rather than
`COMPLETE_AT`: a long pause after words that do not trail off is more likely an end than
a hesitation."""
DOUBTFUL_AT = 0.2
WORDS_ALONE_AFTER_MS = 1500.0
"""semantic_vad: after this much silence, words that do not trail off end the turn
whatever the model says, so one that never warms to a finished sentence costs 1.5 s,
not the eagerness's longest wait (by which time the speaker has often begun the next)."""
TEXT_WAIT_MS = 300.0
"""semantic_vad: how long a probe that heard a finished thought waits for the early final's
text before it ends the turn on the model's word alone. On a busy machine the decode of a
long turn can outlast the pause after it; waiting it out would let the next utterance
resume the turn, and the turn, grown, would decode slower still."""
OPEN_ENDINGS = ("...", "…", "-", "–", "—", ",", ";", ":")
"""A transcript that ends so (or on a letter or digit) trails off: the thought goes on."""
OPEN_WORDS_EN = frozenset({
    "a", "an", "the", "my", "your", "our", "their", "its",
    "and", "or", "but", "nor", "because", "if", "than",
    "to", "for", "of", "with", "from", "at", "into", "onto", "between", "through", "during", "without",
    "i'm", "i'd", "i'll", "you're", "we're", "they're", "is", "are", "um", "uh", "er",
})
"""English words a finished sentence rarely ends on (articles, possessives, conjunctions,
prepositions that are not also particles, a subject with its verb): Whisper writes "Set a
timer for." or "My order number is." at a hesitation, so a transcript whose last word is
one of these trails off whatever its final mark. Words that end short answers ("I do.",
"Thank you.", "Turn it on.") are left out: a wrong entry only makes a turn wait longer."""


@dataclass(frozen=True)
class TurnDetection:
    """OpenAI's `turn_detection`: `server_vad` ends a turn after `silence_duration_ms` of
    silence; `semantic_vad` ends it when the end-of-turn model and the turn's transcript
    say the thought is complete, or after its eagerness's longest wait."""

    threshold: float = 0.5
    prefix_padding_ms: float = 300.0
    silence_duration_ms: float = 500.0
    type: str = "server_vad"
    eagerness: str = "auto"

    @property
    def semantic(self) -> bool:
        return self.type == "semantic_vad"

    @property
    def silence_ms(self) -> float:
        """The silence after which the detector ends a turn by itself."""
        return EAGERNESS_WAIT_S[self.eagerness] * 1000 if self.semantic else self.silence_duration_ms


@dataclass(frozen=True)
class LiveSettings:
    format: str = "audio/pcm"
    """`audio/pcm` (16-bit, 24 kHz), `audio/pcmu` or `audio/pcma` (G.711, 8 kHz)."""
    model: str = "whisper-1"
    language: str | None = None
    prompt: str = ""
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    """None: turns end only when the client commits."""
    noise_reduction: str | None = None
    """`near_field`, `far_field` or None: the noise filter the VAD hears the audio through
    (`engine/denoise.py`); None for the raw audio."""


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpeechStarted:
    item_id: str
    audio_start_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    item_id: str
    audio_end_ms: int


@dataclass(frozen=True)
class Committed:
    item_id: str
    previous_item_id: str | None


@dataclass(frozen=True)
class Cleared:
    pass


@dataclass(frozen=True)
class TranscriptDelta:
    item_id: str
    delta: str


@dataclass(frozen=True)
class TranscriptCompleted:
    item_id: str
    transcript: str
    seconds: float
    """The turn's audio, for usage."""


@dataclass(frozen=True)
class TranscriptFailed:
    item_id: str
    error: VoxError


@dataclass(frozen=True)
class SessionError:
    """A client mistake that leaves the session open."""

    error: VoxError
    ref: str | None = None
    """The id the client gave the input that caused it."""


LiveEvent = (
    SpeechStarted
    | SpeechStopped
    | Committed
    | Cleared
    | TranscriptDelta
    | TranscriptCompleted
    | TranscriptFailed
    | SessionError
)


# -- the service -------------------------------------------------------------------------
@dataclass
class LiveTranscriber:
    """What live sessions share: the ASR engine, the VAD engine, a small audio pool for
    the turns' features (never behind an upload's decoding), limits and metrics. Sessions
    are admitted up to the engine's live capacity (`LivePolicy.capacity`), within
    `max_sessions`."""

    engine: ASREngine
    vad: VADEngine
    pool: Executor
    config: RealtimeConfig
    metrics: Metrics
    cores: SharedCores = field(default_factory=SharedCores)
    """What speech does on the same cores: deltas wait while it holds every TTS worker."""
    denoise: DenoiseEngine = field(default_factory=DenoiseEngine)
    """The noise filter (`noise_reduction`); one never started refuses every type."""
    clock: Callable[[], float] = time.monotonic
    open_sessions: int = 0
    _sessions: set[LiveSession] = field(default_factory=set)
    _active: int = 0
    _counted_at: float = -math.inf

    def __post_init__(self) -> None:
        self.metrics.realtime_capacity.set_function(self.capacity)
        self.vad.turn_cost = self.engine.live_policy.ran_other

    def capacity(self) -> int:
        """Sessions admitted now: the ASR engine's measured live capacity, within `max_sessions`."""
        self.engine.live_policy.turn_call_s = self.vad.turn_call_s
        return self.engine.live_policy.capacity(self.config.final_target_ms / 1000, self.config.max_sessions)

    def active_sessions(self) -> int:
        """Sessions active now (`RealtimeConfig.active_s`): they count against the live
        capacity and in the engine's meter; idle ones decode nothing."""
        self.count_active(force=True)
        return self._active

    def filter_weight(self) -> float:
        """What a session with the noise filter on counts for in admission, against 1 for
        one without (`engine/live.py: session_weight`)."""
        return self.engine.live_policy.session_weight(self.denoise.cost, not self.engine.batched)

    def load(self) -> float:
        """The active sessions, each at its weight: one with the noise filter on counts
        for `filter_weight()`."""
        now = self.clock()
        weight = self.filter_weight()
        return sum(weight if session.filtered else 1.0
                   for session in self._sessions if session.active_until > now)

    def count_active(self, force: bool = False) -> None:
        """Tell the engine's meter how many sessions are active (at most once a second
        unless forced: every append of every session asks)."""
        now = self.clock()
        if not force and now - self._counted_at < 1.0:
            return
        self._counted_at = now
        active = sum(1 for session in self._sessions if session.active_until > now)
        if active != self._active:
            self._active = active
            self.engine.live_policy.sessions(active)

    @contextlib.asynccontextmanager
    async def session(self, emit: Callable[[LiveEvent], None]) -> AsyncIterator[LiveSession]:
        """Open a session under `max_sessions` and, counting only the active sessions,
        under `capacity()` (Overloaded past either); it is closed, and its transcriptions
        dropped, on the way out."""
        capacity = self.capacity()
        active = self.active_sessions()
        load = self.load()
        weight = self.filter_weight() if self.config.noise_reduction else 1.0
        # One session is always let in, as one stream always is.
        if self.open_sessions >= self.config.max_sessions or (load > 0 and load + weight > capacity + 1e-9):
            raise Overloaded(
                f"the server has {self.open_sessions} live transcription sessions open, "
                f"{active} of them active, against its capacity ({capacity} active, "
                f"{self.config.max_sessions} open); try again later"
            )
        self.open_sessions += 1
        self.engine.live_session(True)
        self.metrics.realtime_sessions.inc()
        session = LiveSession(self, emit)
        self._sessions.add(session)
        self.count_active(force=True)
        try:
            yield session
        finally:
            await session.close()
            self._sessions.discard(session)
            self.count_active(force=True)
            self.open_sessions -= 1
            self.engine.live_session(False)
            self.metrics.realtime_sessions.dec()

    def options(self, settings: LiveSettings) -> TranscribeOptions:
        """What a session's turns are decoded with: its language and prompt, and the
        loaded model its `transcription.model` names (OpenAI's names: the default, or a
        loaded model that speaks the session's language). 404 for a model that is not
        loaded, 400 for a language no loaded model speaks."""
        requested = asr_model(settings.model, self.engine.models, "session.audio.input.transcription.model")
        options = TranscribeOptions(language=settings.language or None, prompt=settings.prompt or None)
        return self.engine.choose(options, requested)

    def check(self, settings: LiveSettings) -> None:
        """Refuse settings this server cannot serve: another model (404), or a language
        the model does not speak."""
        self.options(settings)
        if settings.turn_detection is not None and settings.turn_detection.semantic:
            self.vad.check_semantic()
        self.denoise.check(settings.noise_reduction, "session.audio.input.noise_reduction.type")


# -- one session -------------------------------------------------------------------------
class _Audio:
    """The session's recent audio, as chunks addressed by sample index since the start.
    A range may be cut out of the middle (`cut`): what is held then has holes, which
    `take` skips, and indices stay those of the stream."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[int, np.ndarray]] = deque()
        self.end = 0
        self.held = 0

    @property
    def start(self) -> int:
        return self._chunks[0][0] if self._chunks else self.end

    def __len__(self) -> int:
        """Samples held (holes not counted)."""
        return self.held

    def add(self, samples: np.ndarray) -> None:
        if len(samples):
            self._chunks.append((self.end, samples))
            self.end += len(samples)
            self.held += len(samples)

    def drop_before(self, sample: int) -> None:
        """Forget audio before `sample` (whole chunks, so a little more may stay)."""
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) <= sample:
            self.held -= len(self._chunks.popleft()[1])

    def cut(self, a: int, b: int) -> int:
        """Forget the samples in [a, b); returns how many were held. Touches only the
        chunks up to `b` (what is cut is the oldest audio, near the front)."""
        before: list[tuple[int, np.ndarray]] = []
        gone = 0
        while self._chunks and self._chunks[0][0] < b:
            at, chunk = self._chunks.popleft()
            lo, hi = max(a - at, 0), min(b - at, len(chunk))
            if lo >= hi:
                before.append((at, chunk))
                continue
            gone += hi - lo
            if lo > 0:
                before.append((at, chunk[:lo]))
            if hi < len(chunk):
                before.append((at + hi, chunk[hi:]))
        self._chunks.extendleft(reversed(before))
        self.held -= gone
        return gone

    def count(self, a: int, b: int) -> int:
        """How many samples in [a, b) are held."""
        return sum(max(0, min(b - at, len(chunk)) - max(a - at, 0)) for at, chunk in self._chunks)

    def take(self, a: int, b: int) -> np.ndarray:
        """The held samples in [a, b), holes skipped."""
        parts = []
        for at, chunk in self._chunks:
            if at >= b:
                break
            lo, hi = max(a - at, 0), min(b - at, len(chunk))
            if lo < hi:
                parts.append(chunk[lo:hi])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


@dataclass
class _Turn:
    item_id: str
    start: int
    """First sample of the turn's audio (prefix padding included)."""
    pause: int | None = None
    pause_wall: float = 0.0
    early: asyncio.Task[str] | None = None
    early_pause: int | None = None
    """The pause whose final `early` decodes: a commit at that pause takes it as it is."""
    delta: asyncio.Task[str] | None = None
    delta_at: float = 0.0
    """When the last delta decode started (monotonic)."""
    hypothesis: list[str] = field(default_factory=list)
    sent_words: int = 0
    committed: bool = False
    probe: asyncio.Task[None] | None = None
    """semantic_vad: the end-of-turn model's question in flight for this pause."""
    probes: int = 0
    """Probes made in this pause (`PROBES_MS`)."""


def _words(text: str) -> list[str]:
    return text.split()


def _key(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


class LiveSession:
    def __init__(self, live: LiveTranscriber, emit: Callable[[LiveEvent], None]):
        self._live = live
        self._emit = emit
        self._config = live.config
        self.settings = LiveSettings(noise_reduction=live.config.noise_reduction)
        self._decoder = InputDecoder(self.settings.format)
        self._audio = _Audio()
        self._floor = 0
        """Audio before this sample belongs to a committed turn."""
        self._vad_stream = VADStream()
        self._vad_origin = 0
        """Sample where the VAD stream's frame 0 starts."""
        self._filter = self._new_filter()
        """The noise filter the VAD hears through (None: the raw audio). It starts with
        the VAD stream, and its output keeps the input's sample indices."""
        self._detector = self._new_detector()
        self._turn: _Turn | None = None
        self._previous: str | None = None
        self._pending: deque[asyncio.Task[None]] = deque()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._lost: asyncio.Future[VoxError] = asyncio.get_running_loop().create_future()
        self._ref: str | None = None
        """The client's id for the input being handled, for the errors it causes."""
        self._speech: deque[list[int]] = deque()
        """With manual commits: the uncommitted audio's speech, as [start, end) sample
        spans of frames the VAD hears as speech, oldest first."""
        self.active_until = live.clock() + self._config.active_s
        """Until when the session counts as active (`RealtimeConfig.active_s`)."""

    @property
    def busy(self) -> bool:
        """A committed turn is still being transcribed."""
        return any(not t.done() for t in self._pending)

    @property
    def lost(self) -> asyncio.Future[VoxError]:
        """Never resolves: a session in this process goes on until it is closed."""
        return self._lost

    def _refuse(self, error: VoxError) -> None:
        self._emit(SessionError(error, self._ref))

    # -- settings ---------------------------------------------------------------------
    def _new_detector(self) -> TurnDetector | None:
        td = self.settings.turn_detection
        return None if td is None else TurnDetector(td.threshold, td.silence_ms)

    def _new_filter(self) -> DenoiseStream | None:
        kind = self.settings.noise_reduction
        return None if kind is None else self._live.denoise.stream(kind)

    @property
    def filtered(self) -> bool:
        """Whether the noise filter is on (it weighs the session in admission)."""
        return self._filter is not None

    def _listen_afresh(self) -> None:
        """New VAD and filter streams from the end of the audio: fresh state, and the
        samples either held back are dropped with the audio they belong to."""
        self._vad_stream = VADStream()
        self._vad_origin = self._audio.end
        self._filter = self._new_filter()

    async def configure(self, settings: LiveSettings) -> None:
        """Check new settings (`LiveTranscriber.check`), then apply them."""
        self._live.check(settings)
        self.update(settings)

    def update(self, settings: LiveSettings) -> None:
        """Apply new settings (checked by `LiveTranscriber.check`). A new format starts a
        new decoder; new turn detection or noise reduction drops a turn in progress,
        uncommitted, and the VAD listens afresh."""
        old = self.settings
        self.settings = settings
        if settings.format != old.format:
            self._decoder = InputDecoder(settings.format)
        if settings.turn_detection != old.turn_detection or settings.noise_reduction != old.noise_reduction:
            self._drop_turn()
            self._listen_afresh()
            self._detector = self._new_detector()
            self._speech.clear()

    # -- client actions ---------------------------------------------------------------
    async def append(self, data: bytes, ref: str | None = None) -> None:
        self._ref = ref
        try:
            await self._append(data)
        finally:
            self._ref = None

    async def _append(self, data: bytes) -> None:
        samples = self._decoder.feed(data)
        self._live.count_active()
        if not len(samples):
            return
        self._audio.add(samples)
        heard = samples if self._filter is None else await self._live.denoise.feed(self._filter, samples)
        probs = await self._live.vad.score(self._vad_stream, heard)
        first = self._vad_stream.frames_done - len(probs)
        if self._detector is None:
            self._hear(probs, first)
            self._shed()
            return
        if len(probs):
            await self._on_frames(probs, first)
        await self._after_audio()

    def _mark_active(self) -> None:
        was_idle = self.active_until <= self._live.clock()
        self.active_until = self._live.clock() + self._config.active_s
        if was_idle:
            self._live.count_active(force=True)

    # -- manual commits: the uncommitted buffer --------------------------------------------
    def _hear(self, probs: np.ndarray, first: int) -> None:
        """Note which of these frames are speech (manual commits: no turns, only where
        speech lies in the buffer). Spans closer than the prefix padding merge."""
        loud = np.flatnonzero(probs >= 0.5)
        if not len(loud):
            return
        self._mark_active()
        gap = int(PREFIX_S * RATE)
        for k in loud.tolist():
            a = self._sample(first + k)
            b = a + FRAME_SAMPLES
            if self._speech and a - self._speech[-1][1] <= gap:
                self._speech[-1][1] = b
            else:
                self._speech.append([a, b])

    def _shed(self) -> None:
        """Keep the uncommitted audio within `max_buffer_s`: drop the oldest silence
        first (what lies further than the prefix padding from any speech, the newest
        padding's worth kept for speech yet to come), then the oldest audio."""
        limit = int(self._config.max_buffer_s * RATE)
        if len(self._audio) <= limit:
            return
        # Silence goes down to a second below the limit, so that a long listener sheds
        # once a second rather than at every append; speech only down to the limit.
        over = len(self._audio) - max(limit // 2, limit - RATE)
        pad = int(PREFIX_S * RATE)
        at = max(self._audio.start, self._floor)
        quiet: list[tuple[int, int]] = []
        for a, b in self._speech:
            if a - pad > at:
                quiet.append((at, a - pad))
            at = max(at, b + pad)
        if self._audio.end - pad > at:
            quiet.append((at, self._audio.end - pad))
        for a, b in quiet:
            if over <= 0:
                break
            over -= self._audio.cut(a, min(b, a + over))
        over = len(self._audio) - limit
        while over > 0:  # the oldest audio, holes skipped
            over -= self._audio.cut(self._audio.start, self._audio.start + over)
        start = self._audio.start
        while self._speech and self._speech[0][1] <= start:
            self._speech.popleft()

    def _speech_start(self) -> int:
        """Manual commits: where the committed audio starts. From the first speech less
        the prefix padding, so that silence before it (a client that appends everything
        and commits when its own VAD hears the end of speech) is not decoded: Whisper
        would spend a window or more on it. Without speech, the newest `max_turn_s`."""
        held = max(self._floor, self._audio.start)
        if self._speech:
            return max(held, self._speech[0][0] - int(PREFIX_S * RATE))
        return max(held, self._audio.end - int(self._config.max_turn_s * RATE))

    async def commit(self, ref: str | None = None) -> None:
        """End the turn now, whatever VAD thinks (OpenAI's `input_audio_buffer.commit`)."""
        self._ref = ref
        try:
            await self._commit_now()
        finally:
            self._ref = None

    async def _commit_now(self) -> None:
        turn = self._turn
        if turn is not None:
            start = turn.start
        elif self._detector is None:
            start = self._speech_start()
        else:
            start = max(self._floor, self._audio.start)
        end = self._audio.end
        if end - start < MIN_COMMIT_S * RATE:
            self._refuse(InvalidRequest(
                f"the input audio buffer holds {max(0, end - start) / RATE * 1000:.0f} ms of "
                f"audio; a commit needs at least {MIN_COMMIT_S * 1000:.0f} ms",
                code="input_audio_buffer_commit_empty",
            ))
            return
        if turn is not None:
            self._cancel(turn.early)
            self._cancel(turn.delta)
            turn.early = None
        else:
            turn = _Turn(self._new_item(), start)
        if self._detector is not None:
            self._detector.reset()
        self._speech.clear()
        await self._commit(turn, end, time.monotonic())

    async def clear(self, ref: str | None = None) -> None:
        self._drop_turn()
        self._floor = self._audio.end
        self._audio.drop_before(self._audio.end)
        self._listen_afresh()
        self._speech.clear()
        if self._detector is not None:
            self._detector.reset()
        self._emit(Cleared())

    async def close(self) -> None:
        """Drop everything in progress; idempotent."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- turn detection -----------------------------------------------------------------
    def _sample(self, frame: int) -> int:
        return self._vad_origin + frame * FRAME_SAMPLES

    async def _on_frames(self, probs: np.ndarray, first: int) -> None:
        assert self._detector is not None
        td = self.settings.turn_detection
        assert td is not None
        for event in self._detector.feed(probs, first):
            if isinstance(event, Start):
                prefix = int(td.prefix_padding_ms * RATE / 1000)
                start = max(self._sample(event.frame) - prefix, self._audio.start, self._floor)
                self._turn = _Turn(self._new_item(), start, delta_at=time.monotonic())
                self._mark_active()
                self._emit(SpeechStarted(self._turn.item_id, _ms(start)))
            elif self._turn is None:
                continue
            elif isinstance(event, Pause):
                self._turn.pause = self._sample(event.frame)
                self._turn.pause_wall = time.monotonic()
                self._turn.probes = 0
                self._cancel(self._turn.delta)
            elif isinstance(event, Resume):
                self._turn.pause = None
                self._cancel(self._turn.early)
                self._turn.early = None
                self._cancel(self._turn.probe)
                self._turn.probe = None
            elif isinstance(event, Stop):
                turn = self._turn
                end = self._sample(event.frame)
                self._emit(SpeechStopped(turn.item_id, _ms(end)))
                await self._commit(turn, end + self._tail(), turn.pause_wall or time.monotonic())

    async def _after_audio(self) -> None:
        """After each append under server VAD: keep only the prefix padding while nobody
        speaks, end a turn that has grown too long, and start early finals and deltas."""
        td = self.settings.turn_detection
        assert td is not None
        turn = self._turn
        if turn is None:
            keep = int(td.prefix_padding_ms * RATE / 1000) + 4 * FRAME_SAMPLES
            self._audio.drop_before(max(self._floor, self._audio.end - keep))
            return
        if self._audio.end - turn.start >= self._config.max_turn_s * RATE:
            await self._force_split(turn)
            return
        if turn.pause is not None:
            self._maybe_early_final(turn, td)
            if td.semantic:
                self._maybe_probe(turn, td)
        else:
            self._maybe_delta(turn)

    # -- semantic_vad ---------------------------------------------------------------------
    def _maybe_probe(self, turn: _Turn, td: TurnDetection) -> None:
        """Ask the end-of-turn model once the pause has lasted the next of `PROBES_MS`, from
        the eagerness's first silence on (one question at a time; one that answers late
        skips the silences it overran)."""
        if turn.pause is None or turn.probe is not None:
            return
        due = _probes(td.eagerness)
        silence_ms = (self._audio.end - turn.pause) * 1000 / RATE
        if turn.probes >= len(due) or silence_ms < due[turn.probes]:
            return
        while turn.probes + 1 < len(due) and silence_ms >= due[turn.probes + 1]:
            turn.probes += 1
        turn.probes += 1
        samples = self._audio.take(turn.start, self._audio.end)
        turn.probe = self._spawn(self._probe(turn, turn.pause, samples, silence_ms))

    async def _probe(self, turn: _Turn, pause: int, samples: np.ndarray, silence_ms: float) -> None:
        """End the turn at `pause` if the model hears a finished thought (`COMPLETE_AT`;
        `DOUBTFUL_AT` after `DOUBT_AFTER_MS`; no longer asked after `WORDS_ALONE_AFTER_MS`)
        and the turn's early final (when one is decoding) does not trail off: the model
        hears how the words are said, the transcript what they say."""
        try:
            p = await self._live.vad.complete(samples)
            early = turn.early
            text = None
            if _heard_an_end(silence_ms, p) and early is not None:
                try:
                    text = await asyncio.wait_for(asyncio.shield(early), TEXT_WAIT_MS / 1000)
                except TimeoutError:
                    text = None  # the model's word stands
            complete = _ends_turn(silence_ms, p, text, self._english())
            log.debug("turn %s: probe at %.0f ms, p(complete) %.2f, early final %r",
                      turn.item_id, silence_ms, p, text)
        except (VoxError, asyncio.CancelledError):
            if self._closed:
                raise
            return
        finally:
            if turn.probe is asyncio.current_task():
                turn.probe = None
        if not complete or self._turn is not turn or turn.pause != pause or turn.committed or self._closed:
            return
        assert self._detector is not None
        self._detector.reset()
        self._emit(SpeechStopped(turn.item_id, _ms(pause)))
        log.debug("turn %s: the end-of-turn model ended it %.0f ms into the pause",
                  turn.item_id, (time.monotonic() - turn.pause_wall) * 1000)
        await self._commit(turn, pause + self._tail(), turn.pause_wall)

    def _english(self) -> bool:
        """Whether transcripts are English (`OPEN_WORDS_EN` applies): the session's
        language, or an English-only model when none is set."""
        language = (self.settings.language or "").lower()
        if language:
            return language == "en" or language.startswith("en-")
        model = self._live.engine.model(self._live.options(self.settings).model)
        return model.abilities.languages == ("en",)

    async def _force_split(self, turn: _Turn) -> None:
        """A turn of `max_turn_s`: commit it as it stands and go on in a new one."""
        end = self._audio.end
        self._emit(SpeechStopped(turn.item_id, _ms(end)))
        self._cancel(turn.delta)
        self._cancel(turn.early)
        turn.early = None
        await self._commit(turn, end, time.monotonic())
        self._turn = _Turn(self._new_item(), end, delta_at=time.monotonic())
        self._emit(SpeechStarted(self._turn.item_id, _ms(end)))

    def _tail(self) -> int:
        return int(max(EARLY_FINAL_MS / 1000, MIN_TAIL_S) * RATE)

    def _maybe_early_final(self, turn: _Turn, td: TurnDetection) -> None:
        """Decode the final while the pause runs: `EARLY_FINAL_MS` into it, or under
        semantic VAD halfway to the model's first question, since speech resumes after
        most shorter pauses and each decode they start is thrown away."""
        if turn.early is not None or EARLY_FINAL_MS <= 0 or turn.pause is None:
            return
        end = turn.pause + self._tail()
        lead_ms = max(EARLY_FINAL_MS, EAGERNESS_FIRST_MS[td.eagerness] / 2) if td.semantic else EARLY_FINAL_MS
        if self._audio.end < max(end, turn.pause + int(lead_ms * RATE / 1000)):
            return
        wait_ms = EAGERNESS_FIRST_MS[td.eagerness] if td.semantic else td.silence_duration_ms
        rest = max(0.0, wait_ms / 1000 - (self._audio.end - turn.pause) / RATE)
        deadline = self._live.engine.live_policy.early_final_deadline(rest, self._config.final_target_ms / 1000)
        if deadline is None:
            return
        turn.early = self._spawn(self._decode(self._audio.take(turn.start, end), deadline))
        turn.early_pause = turn.pause
        log.debug("turn %s: early final started %.0f ms after the pause was seen",
                  turn.item_id, (time.monotonic() - turn.pause_wall) * 1000)

    def _maybe_delta(self, turn: _Turn) -> None:
        interval = DELTA_INTERVAL_MS / 1000
        now = time.monotonic()
        if interval <= 0 or now - turn.delta_at < interval:
            return
        if turn.delta is not None or self._audio.end - turn.start < DELTA_MIN_S * RATE:
            return
        deadline = self._live.engine.live_policy.delta_deadline(self._live.cores.speech_on_every_worker())
        if deadline is None:
            return
        turn.delta_at = now
        samples = self._audio.take(turn.start, self._audio.end)
        task = self._spawn(self._decode(samples, deadline))
        turn.delta = task
        task.add_done_callback(lambda t: self._on_delta(turn, t))

    def _on_delta(self, turn: _Turn, task: asyncio.Task[str]) -> None:
        if turn.delta is task:
            turn.delta = None
        if task.cancelled() or task.exception() is not None or turn.committed or self._closed:
            return
        words = _words(task.result())
        agreed = 0
        for old, new in zip(turn.hypothesis, words, strict=False):
            if _key(old) != _key(new):
                break
            agreed += 1
        turn.hypothesis = words
        if agreed > turn.sent_words:
            text = " ".join(words[turn.sent_words : agreed])
            self._emit(TranscriptDelta(turn.item_id, text if turn.sent_words == 0 else " " + text))
            self._live.metrics.realtime_deltas.inc()
            turn.sent_words = agreed

    # -- commits and transcripts --------------------------------------------------------
    async def _commit(self, turn: _Turn, end: int, speech_end_wall: float) -> None:
        """Commit [turn.start, end), and emit its transcript when it is decoded (in order)."""
        turn.committed = True
        self._mark_active()
        end = max(end, turn.start)
        if self._turn is turn:
            self._turn = None
        self._cancel(turn.delta)
        while len(self._pending) >= self._config.max_pending_turns:
            await asyncio.wait({self._pending[0]})
            self._pending.popleft()
        self._emit(Committed(turn.item_id, self._previous))
        self._previous = turn.item_id
        seconds = self._audio.count(turn.start, end) / RATE
        if turn.early is not None and turn.early_pause == turn.pause and not turn.early.cancelled():
            decoding = turn.early
            log.debug("turn %s: committed %.0f ms after the end of speech, early final in flight",
                      turn.item_id, (time.monotonic() - speech_end_wall) * 1000)
        else:
            self._cancel(turn.early)
            deadline = self._live.engine.live_policy.final_deadline(self._config.final_target_ms / 1000)
            decoding = self._spawn(self._decode(self._audio.take(turn.start, end), deadline))
        self._floor = max(self._floor, end)
        self._audio.drop_before(self._floor)
        before = self._pending[-1] if self._pending else None
        self._pending.append(self._spawn(self._complete(turn.item_id, decoding, before, seconds, speech_end_wall)))
        while self._pending and self._pending[0].done():
            self._pending.popleft()

    async def _complete(
        self,
        item_id: str,
        decoding: asyncio.Task[str],
        before: asyncio.Task[None] | None,
        seconds: float,
        speech_end_wall: float,
    ) -> None:
        try:
            text: str | None = await decoding
            error: VoxError | None = None
        except VoxError as exc:
            text, error = None, exc
        except asyncio.CancelledError:
            if self._closed:
                raise
            text, error = None, ServerError("the transcription was dropped")
        if before is not None:
            await asyncio.wait({before})
        m = self._live.metrics
        if error is not None:
            m.realtime_turns.labels("failed").inc()
            self._emit(TranscriptFailed(item_id, error))
            return
        assert text is not None
        m.realtime_turns.labels("completed").inc()
        latency = time.monotonic() - speech_end_wall
        m.realtime_final_latency.observe(latency)
        log.debug("turn %s: %.2f s of audio, completed %.0f ms after the end of speech", item_id, seconds, latency * 1000)
        m.asr_audio_seconds.inc(seconds)
        self._emit(TranscriptCompleted(item_id, text, round(seconds, 3)))

    async def _decode(self, samples: np.ndarray, deadline: float) -> str:
        """The transcript of these samples, decoded as live work due at `deadline`."""
        live = self._live
        options = live.options(self.settings)
        transcription = await start_live(live.engine, samples, options, live.pool, deadline, self._item_hint())
        try:
            transcript = await transcription.collect()
        except StreamFailed as exc:
            raise ServerError(f"transcription failed: {exc}") from exc
        finally:
            transcription.cancel()
        return transcript.text

    # -- helpers ----------------------------------------------------------------------
    def _drop_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is not None:
            self._cancel(turn.early)
            self._cancel(turn.delta)
            self._cancel(turn.probe)

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)
        return task

    @staticmethod
    def _cancel(task: asyncio.Task[Any] | None) -> None:
        if task is not None and not task.done():
            task.cancel()

    def _new_item(self) -> str:
        return f"item_{uuid.uuid4().hex[:20]}"

    def _item_hint(self) -> str:
        return self._turn.item_id if self._turn is not None else "live"


@functools.cache
def _probes(eagerness: str) -> tuple[float, ...]:
    """`PROBES_MS` from this eagerness's first silence on, short of its longest wait."""
    first, last = EAGERNESS_FIRST_MS[eagerness], EAGERNESS_WAIT_S[eagerness] * 1000
    return tuple(t for t in PROBES_MS if first <= t < last)


def _heard_an_end(silence_ms: float, p: float) -> bool:
    """Whether the end-of-turn model's probability `p`, asked `silence_ms` into a pause,
    ends the turn unless its words trail off: `COMPLETE_AT`, `DOUBTFUL_AT` from
    `DOUBT_AFTER_MS`, and any answer from `WORDS_ALONE_AFTER_MS`."""
    if silence_ms >= WORDS_ALONE_AFTER_MS:
        return True
    return p >= (DOUBTFUL_AT if silence_ms >= DOUBT_AFTER_MS else COMPLETE_AT)


def _ends_turn(silence_ms: float, p: float, text: str | None, english: bool = True) -> bool:
    """semantic_vad's rule at one question: the model heard an end (`_heard_an_end`) and the
    turn's transcript, when there is one in time, does not trail off."""
    return _heard_an_end(silence_ms, p) and (text is None or not _trails_off(text, english))


def _trails_off(text: str, english: bool = True) -> bool:
    """Whether a transcript ends mid-thought: on a letter or digit, an `OPEN_ENDINGS` mark,
    or (in English) one of `OPEN_WORDS_EN`. An empty one does not (nothing was said to go on
    with)."""
    text = text.strip()
    if not text:
        return False
    if text.endswith(OPEN_ENDINGS) or text[-1].isalnum():
        return True
    if not english:
        return False
    words = "".join(c if c.isalnum() or c == "'" else " " for c in text.lower().replace("’", "'")).split()
    return bool(words) and words[-1] in OPEN_WORDS_EN


def _ms(sample: int) -> int:
    return sample * 1000 // RATE


def _log_failure(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, VoxError):
        log.error("a live transcription task failed: %r", exc, exc_info=exc)
