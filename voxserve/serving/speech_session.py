"""Speech sessions: text arrives in fragments, speech goes out segment by segment.

A `SpeechSession` is the channel-independent half of `WS /v1/audio/speech/stream` (the
channel is `voxserve.api.ws`), as `voxserve.serving.realtime.LiveSession` is for live
transcription. The channel hands it text fragments, flushes, settings and the close, in
order; it reads the session's `items()`, plain dataclasses it renders as protocol events
and audio frames. Nothing here knows JSON or WebSockets.

- **Segments.** The text is cut into clauses or sentences as each one is known to be
  complete (`voxserve.text.incremental.TextSegmenter`); each segment is one stream of the
  engine, opened by `open_speech` as `POST /v1/audio/speech` opens its stream, so it has
  the same admission, deadlines and credits.
- **One at a time.** Segments are spoken in order, one stream at a time, and nothing is
  prepared ahead. They wait in a bounded queue (`MAX_PENDING_SEGMENTS`): past it `feed`
  waits, and the channel reads no more. The text received and not yet spoken is capped
  (`max_pending_chars`, `Backlogged` past it).
- **The slot.** A session speaks on one `SpeechLane` for its whole life: this process's
  engine (`LocalLane`), or one Ray TTS replica. The lane takes a stream slot for a reply
  and keeps it while the reply's clauses keep coming (`HeldSlot`, `HOLD_SLOT_S`), so a
  reply is admitted once, not at every clause.
- **Back-pressure.** `items()` yields a segment's audio as the engine decodes it; a
  chunk is taken from the engine (its credit returned) only when the channel asks for the
  next item, so a client that reads slowly slows its own stream and no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from voxserve.engine.admission import Admission
from voxserve.engine.words import WordTime
from voxserve.errors import ClientError, ReplicaLost, VoxError
from voxserve.serving.catalog import speech_voice
from voxserve.serving.service import Speech, SpeechLane
from voxserve.serving.speech import SpeechParams, SpeechResources, open_speech
from voxserve.text.incremental import SplitMode, TextSegmenter

__all__ = [
    "HOLD_SLOT_S",
    "MAX_PENDING_SEGMENTS",
    "Backlogged",
    "Flushed",
    "HeldSlot",
    "LocalLane",
    "SegmentAudio",
    "SegmentDone",
    "SegmentFailed",
    "SegmentStarted",
    "SegmentWords",
    "SessionItem",
    "SpeechSession",
    "SpeechSettings",
]

MAX_PENDING_SEGMENTS = 16
"""Segments (and markers) waiting to be spoken; past it `feed` waits."""

HOLD_SLOT_S = 2.0
"""How long a session keeps its stream slot after its last segment, waiting for the
next clause of the same reply. An LLM at 20 tokens/s writes a clause in well under a
second, so a reply keeps one slot from its first clause to its last and never queues
again behind new streams half-way through a sentence."""


@dataclass(frozen=True)
class SpeechSettings:
    """How a session speaks (checked by the channel's schema, then by `configure`)."""

    model: str = "tts-1"
    voice: str = "alloy"
    speed: float = 1.0
    response_format: str = "pcm"
    sample_rate: int | None = None
    split: SplitMode = "clause"
    language: str | None = None
    timestamps: bool = False


class Backlogged(ClientError):
    """More text waits to be spoken than a session may hold; the session ends."""

    code = "pending_text_too_long"


# -- what a session emits ------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentStarted:
    segment: int
    text: str
    sample_rate: int
    replica: str | None = None
    """The Ray replica speaking it; None on one machine."""


@dataclass(frozen=True)
class SegmentWords:
    """Word timings of the audio that follows, in seconds from the segment's start."""

    segment: int
    words: tuple[WordTime, ...]


@dataclass(frozen=True)
class SegmentAudio:
    segment: int
    data: bytes


@dataclass(frozen=True)
class SegmentDone:
    segment: int


@dataclass(frozen=True)
class SegmentFailed:
    """The segment could not be spoken (refused, or the engine failed); the session goes on."""

    segment: int
    error: VoxError


@dataclass(frozen=True)
class Flushed:
    """Everything sent before a flush has been spoken."""


SessionItem = SegmentStarted | SegmentWords | SegmentAudio | SegmentDone | SegmentFailed | Flushed


@dataclass(frozen=True)
class _Segment:
    index: int
    text: str
    settings: SpeechSettings


@dataclass(frozen=True)
class _Marker:
    closing: bool
    """True: the end of the session's input; False: a flush."""


# -- the slot a session keeps between segments -------------------------------------------
class HeldSlot:
    """One session's stream slot: taken for a segment, kept `hold_s` after it for the next
    segment of the same reply, then given back. `release` gives it back at once, and
    `on_release` hears of each time it goes back."""

    def __init__(
        self, admission: Admission, hold_s: float = HOLD_SLOT_S, on_release: Callable[[], None] | None = None
    ):
        self._admission = admission
        self._hold_s = hold_s
        self._on_release = on_release
        self._held = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def held(self) -> bool:
        return self._held

    async def take(self) -> None:
        """Hold the slot for a segment: 429 when the server is full and queued too long."""
        self._cancel_timer()
        if not self._held:
            await self._admission.acquire()
            self._held = True

    def idle(self) -> None:
        """The segment is over: give the slot back unless another one starts soon."""
        self._cancel_timer()
        if self._held:
            self._timer = asyncio.get_running_loop().call_later(self._hold_s, self.release)

    def release(self) -> None:
        self._cancel_timer()
        if self._held:
            self._held = False
            self._admission.release()
            if self._on_release is not None:
                self._on_release()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class LocalLane:
    """A session's lane on this process's engine (`voxserve.serving.state.AppState`)."""

    def __init__(self, state: SpeechResources):
        self._state = state
        self._slot = HeldSlot(state.admission)

    async def check(self, model: str, voice: str, language: str | None) -> None:
        speech_voice(self._state.engine, model, voice, language)

    async def speak(self, params: SpeechParams, request_id: str, started: float) -> Speech:
        await self._slot.take()
        return await open_speech(self._state, params, request_id, started, admitted=True)

    def idle(self) -> None:
        self._slot.idle()

    async def close(self) -> None:
        self._slot.release()


# -- the session ---------------------------------------------------------------------------
class SpeechSession:
    def __init__(self, lane: SpeechLane, session_id: str, max_segment_chars: int, max_pending_chars: int):
        self.id = session_id
        self.settings = SpeechSettings()
        self.count = 0
        """Segments queued so far."""
        self._lane = lane
        self._max_segment_chars = max_segment_chars
        self._max_pending_chars = max_pending_chars
        self._segmenter = self._new_segmenter()
        self._queue: asyncio.Queue[_Segment | _Marker] = asyncio.Queue(MAX_PENDING_SEGMENTS)
        self._speaking = False
        self._unspoken = 0
        """Characters of the segments queued or being spoken."""
        self._loop = asyncio.get_running_loop()
        self.quiet_since = self._loop.time()
        """Loop time when the last segment ended (or the session began)."""

    @property
    def busy(self) -> bool:
        """A segment is being spoken or waits to be."""
        return self._speaking or not self._queue.empty()

    def _new_segmenter(self) -> TextSegmenter:
        return TextSegmenter(self.settings.split, max_chars=self._max_segment_chars)

    # -- input (the channel's side) ----------------------------------------------------------
    async def configure(self, settings: SpeechSettings) -> None:
        """Apply settings to the segments that start after this; an unknown model, voice
        or language raises its `VoxError` and changes nothing."""
        await self._lane.check(settings.model, settings.voice, settings.language)
        if settings.split != self.settings.split:
            pending = self._segmenter.pending
            self.settings = settings
            self._segmenter = self._new_segmenter()
            await self._enqueue_all(self._segmenter.feed(pending))
        self.settings = settings

    async def feed(self, text: str) -> None:
        """A fragment of text; waits while the queue of segments is full."""
        await self._enqueue_all(self._segmenter.feed(text))

    async def flush(self) -> None:
        """Speak what is pending now, then emit `Flushed`."""
        await self._enqueue_all(self._segmenter.flush())
        await self._queue.put(_Marker(closing=False))

    async def finish(self) -> None:
        """No more input: speak what is pending, then end `items()`."""
        await self._enqueue_all(self._segmenter.flush())
        await self._queue.put(_Marker(closing=True))

    async def _enqueue_all(self, pieces: list[str]) -> None:
        pending = self._segmenter.pending_chars + self._unspoken + sum(len(p) for p in pieces)
        if pending > self._max_pending_chars:
            raise Backlogged(
                f"{pending} characters are waiting to be spoken and a session may have at most "
                f"{self._max_pending_chars}; send text no faster than it is spoken"
            )
        for piece in pieces:
            self._unspoken += len(piece)
            await self._queue.put(_Segment(self.count, piece, self.settings))
            self.count += 1

    # -- output ----------------------------------------------------------------------------
    async def items(self) -> AsyncGenerator[SessionItem, None]:
        """What to send, in order, until the input is finished and spoken. A segment that
        fails is a `SegmentFailed` and the session goes on; `ReplicaLost` (the replica
        that held the session died) and any failure that is not a `VoxError` end it."""
        while True:
            item = await self._queue.get()
            if isinstance(item, _Marker):
                if item.closing:
                    return
                yield Flushed()
                continue
            self._speaking = True
            try:
                async for out in self._speak(item):
                    yield out
            finally:
                self._speaking = False
                self._unspoken -= len(item.text)
                self.quiet_since = self._loop.time()

    async def _speak(self, segment: _Segment) -> AsyncGenerator[SessionItem, None]:
        s = segment.settings
        started = time.perf_counter()
        request_id = f"{self.id}-{segment.index}"
        try:
            params = _params(s, segment.text)
            stream = await self._lane.speak(params, request_id, started)
        except ReplicaLost:
            raise
        except VoxError as exc:
            self._lane.idle()
            yield SegmentFailed(segment.index, exc)
            return
        completed = False
        try:
            yield SegmentStarted(segment.index, segment.text, stream.sample_rate, stream.replica)
            async with contextlib.aclosing(stream.chunks()) as chunks:
                async for chunk in chunks:
                    if s.timestamps and chunk.words:
                        yield SegmentWords(segment.index, chunk.words)
                    if chunk.data:
                        yield SegmentAudio(segment.index, chunk.data)
            completed = True
        except ReplicaLost:
            raise
        except VoxError as exc:  # the engine failed mid-segment
            yield SegmentFailed(segment.index, exc)
            return
        finally:
            stream.close(completed)
            self._lane.idle()
        yield SegmentDone(segment.index)

    async def close(self) -> None:
        """Give back what the session holds; idempotent."""
        await self._lane.close()


def _params(s: SpeechSettings, text: str) -> SpeechParams:
    """A segment's speech request. `TextSegmenter` emits only text with something to say,
    and the engine answers any other with 400."""
    return SpeechParams(
        model=s.model,
        text=text,
        voice=s.voice,
        response_format=s.response_format,
        speed=s.speed,
        sample_rate=s.sample_rate,
        language=s.language,
    )

