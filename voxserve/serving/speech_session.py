"""Speech sessions: text arrives in fragments, speech goes out segment by segment.

A `SpeechSession` is the channel-independent half of `WS /v1/audio/speech/stream` (the
channel is `voxserve.api.ws`), as `voxserve.serving.realtime.LiveSession` is for live
transcription. The channel hands it text fragments, flushes, cancels, settings and the
close, in order; it reads the session's `items()`, plain dataclasses it renders as
protocol events and audio frames. Nothing here knows JSON or WebSockets.

- **Segments.** The text is cut into clauses or sentences as each one is known to be
  complete (`voxserve.text.incremental.TextSegmenter`); each segment is one stream of the
  engine, opened by `open_speech` as `POST /v1/audio/speech` opens its stream, so it has
  the same admission, deadlines and credits.
- **Contexts.** Text belongs to a context: one reply, named by the client's context id
  (or the unnamed one). A context ends at its flush. Contexts are spoken in the order
  they began, one at a time: the next one starts when the one before has been flushed
  and spoken. At most `max_contexts` distinct ids are open at once (`TooManyContexts`
  past it), since each holds a segmenter and queued text.
- **One at a time.** Segments are spoken in order, one stream at a time, and nothing is
  prepared ahead. The segments and flushes waiting are capped (`MAX_PENDING_SEGMENTS`):
  past it `feed` waits, and the channel reads no more. The text received and not yet
  spoken is capped (`max_pending_chars`, `Backlogged` past it).
- **Cancel.** `cancel` drops a context at once, whether it is speaking or waiting: its
  pending text and queued segments, the stream in flight (the engine drops its work and
  its credits), and the stream slot, which goes back now rather than after the hold.
  Items already yielded for it carry its `Context`, whose `cancelled` the channel checks
  before it sends each one, so nothing of a cancelled context leaves after the cancel.
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
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from voxserve.engine.admission import Admission
from voxserve.engine.words import WordTime
from voxserve.errors import ClientError, NotFound, ReplicaLost, VoxError
from voxserve.serving.catalog import speech_voice
from voxserve.serving.service import Speech, SpeechLane
from voxserve.serving.speech import AudioChunk, SpeechParams, SpeechResources, open_speech
from voxserve.text.incremental import SplitMode, TextSegmenter
from voxserve.text.markup import TaggedSegmenter

__all__ = [
    "HOLD_SLOT_S",
    "MAX_PENDING_SEGMENTS",
    "RECENT_CONTEXTS",
    "Backlogged",
    "Context",
    "Flushed",
    "HeldSlot",
    "LocalLane",
    "SegmentAudio",
    "SegmentDone",
    "SegmentFailed",
    "SegmentStarted",
    "SegmentWords",
    "SessionItem",
    "SlotLedger",
    "SpeechSession",
    "SpeechSettings",
    "TooManyContexts",
    "UnknownContext",
]

T = TypeVar("T")

MAX_PENDING_SEGMENTS = 16
"""Segments and flushes waiting to be spoken; past it `feed` waits."""

RECENT_CONTEXTS = 64
"""Finished or cancelled context ids remembered, so that a cancel that crosses the end
of its reply is answered as a cancel, not as an unknown context."""

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


class TooManyContexts(ClientError):
    """A new context id past the session's limit; the message is refused, the session goes on."""

    code = "too_many_contexts"


class UnknownContext(NotFound):
    """A cancel names a context id the session has never seen (or forgot long ago)."""

    code = "unknown_context"


# -- contexts ------------------------------------------------------------------------------
@dataclass(eq=False)
class _Segment:
    index: int
    text: str
    settings: SpeechSettings


@dataclass(eq=False)
class Context:
    """One reply: the text sent under one context id until its flush."""

    id: str | None
    """The client's context id; None for text sent without one."""
    segmenter: TextSegmenter
    segments: deque[_Segment] = field(default_factory=deque)
    flushed: bool = False
    """Its flush arrived: no more text joins it, and it ends once its segments are spoken."""
    cancelled: bool = False


# -- what a session emits ------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentStarted:
    context: Context
    segment: int
    text: str
    sample_rate: int
    replica: str | None = None
    """The Ray replica speaking it; None on one machine."""


@dataclass(frozen=True)
class SegmentWords:
    """Word timings of the audio that follows, in seconds from the segment's start."""

    context: Context
    segment: int
    words: tuple[WordTime, ...]


@dataclass(frozen=True)
class SegmentAudio:
    context: Context
    segment: int
    data: bytes


@dataclass(frozen=True)
class SegmentDone:
    context: Context
    segment: int


@dataclass(frozen=True)
class SegmentFailed:
    """The segment could not be spoken (refused, or the engine failed); the session goes on."""

    context: Context
    segment: int
    error: VoxError


@dataclass(frozen=True)
class Flushed:
    """Everything the context was sent before its flush has been spoken."""

    context: Context


SessionItem = SegmentStarted | SegmentWords | SegmentAudio | SegmentDone | SegmentFailed | Flushed


# -- the slot a session keeps between segments -------------------------------------------
class SlotLedger(Protocol):
    """Where a held slot says it has no stream in it (`TTSEngine.park`), so that
    admission weighs it at its own model's cost between segments."""

    def park(self, model: str | None) -> None: ...

    def unpark(self, model: str | None) -> None: ...


class HeldSlot:
    """One session's stream slot: taken for a segment, kept `hold_s` after it for the next
    segment of the same reply, then given back. `release` gives it back at once, and
    `on_release` hears of each time it goes back.

    The slot is asked for with its voice model, and between segments it is parked in
    `ledger` under that model: admission weighs it as one stream of that model all the
    while. Unnamed, it would weigh as a stream of the costliest model (with Kokoro
    loaded, several of Piper's), and a few voice agents pausing between the
    segments of their replies would hold every other newcomer back."""

    def __init__(
        self,
        admission: Admission,
        hold_s: float = HOLD_SLOT_S,
        on_release: Callable[[], None] | None = None,
        ledger: SlotLedger | None = None,
    ):
        self._admission = admission
        self._hold_s = hold_s
        self._on_release = on_release
        self._ledger = ledger
        self._held = False
        self._model: str | None = None
        self._parked = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def held(self) -> bool:
        return self._held

    async def take(self, model: str | None = None) -> None:
        """Hold the slot for a segment of voice model `model`: 429 when the server is full
        and queued too long. A slot already held is used again as it was taken."""
        self._cancel_timer()
        self._unpark()
        if not self._held:
            await self._admission.acquire(model)
            self._held = True
            self._model = model

    def idle(self) -> None:
        """The segment is over: give the slot back unless another one starts soon."""
        self._cancel_timer()
        if self._held:
            if self._ledger is not None and not self._parked:
                self._ledger.park(self._model)
                self._parked = True
            self._timer = asyncio.get_running_loop().call_later(self._hold_s, self.release)

    def release(self) -> None:
        self._cancel_timer()
        self._unpark()
        if self._held:
            self._held = False
            self._admission.release()
            if self._on_release is not None:
                self._on_release()

    def _unpark(self) -> None:
        if self._parked:
            assert self._ledger is not None
            self._ledger.unpark(self._model)
            self._parked = False

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class LocalLane:
    """A session's lane on this process's engine (`voxserve.serving.state.AppState`)."""

    def __init__(self, state: SpeechResources):
        self._state = state
        self._slot = HeldSlot(state.admission, ledger=state.engine)

    async def check(self, model: str, voice: str, language: str | None) -> None:
        speech_voice(self._state.engine, model, voice, language, self._state.saved_voices)

    async def speak(self, params: SpeechParams, request_id: str, started: float) -> Speech:
        state = self._state
        voice = speech_voice(state.engine, params.model, params.voice, params.language, state.saved_voices)
        await self._slot.take(voice.model)
        return await open_speech(self._state, params, request_id, started, admitted=True)

    def idle(self) -> None:
        self._slot.idle()

    def release(self) -> None:
        self._slot.release()

    async def close(self) -> None:
        self._slot.release()


# -- the session ---------------------------------------------------------------------------
class _Signal:
    """Wakes every task waiting on the session's state after a change (one event loop)."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter


@dataclass(eq=False)
class _Speaking:
    """The segment being spoken, so that a cancel can stop it where it is."""

    context: Context
    stop: asyncio.Future[None]
    stream: Speech | None = None


class SpeechSession:
    def __init__(
        self,
        lane: SpeechLane,
        session_id: str,
        max_segment_chars: int,
        max_pending_chars: int,
        max_contexts: int = 8,
    ):
        self.id = session_id
        self.settings = SpeechSettings()
        self.count = 0
        """Segments queued so far."""
        self._lane = lane
        self._max_segment_chars = max_segment_chars
        self._max_pending_chars = max_pending_chars
        self._max_contexts = max_contexts
        self._contexts: deque[Context] = deque()
        """Open contexts, in the order they are spoken; the first is speaking or next."""
        self._recent: deque[str] = deque(maxlen=RECENT_CONTEXTS)
        self._queued = 0
        """Segments and flushes waiting (`MAX_PENDING_SEGMENTS`)."""
        self._unspoken = 0
        """Characters of the segments queued or being spoken."""
        self._speaking: _Speaking | None = None
        self._closing = False
        self._changed = _Signal()
        self._loop = asyncio.get_running_loop()
        self.quiet_since = self._loop.time()
        """Loop time when the last segment ended (or the session began)."""

    @property
    def busy(self) -> bool:
        """A segment is being spoken or waits to be."""
        return self._speaking is not None or self._queued > 0

    def _new_segmenter(self) -> TextSegmenter:
        """Inline `[pause:]` and `[voice:]` tags are read in session text as in a request's."""
        return TaggedSegmenter(self.settings.split, max_chars=self._max_segment_chars)

    # -- input (the channel's side) ----------------------------------------------------------
    async def configure(self, settings: SpeechSettings) -> None:
        """Apply settings to the segments that start after this; an unknown model, voice
        or language raises its `VoxError` and changes nothing."""
        await self._lane.check(settings.model, settings.voice, settings.language)
        old = self.settings
        self.settings = settings
        if settings.split != old.split:
            for context in [c for c in self._contexts if not c.flushed]:
                pending = context.segmenter.pending
                context.segmenter = self._new_segmenter()
                await self._enqueue_all(context, context.segmenter.feed(pending))

    async def feed(self, text: str, context_id: str | None = None) -> None:
        """A fragment of text for a context (opened by its first text); waits while the
        queue of segments is full."""
        context = self._open(context_id)
        await self._enqueue_all(context, context.segmenter.feed(text))

    async def flush(self, context_id: str | None = None) -> None:
        """Speak what is pending in the context now and end it: `Flushed` follows its
        last segment. Text sent after it under the same id begins a new context."""
        context = self._open(context_id)
        await self._enqueue_all(context, context.segmenter.flush())
        await self._mark_flushed(context)

    async def finish(self) -> None:
        """No more input: flush every open context, then end `items()` once all is spoken."""
        for context in [c for c in self._contexts if not c.flushed]:
            await self._enqueue_all(context, context.segmenter.flush())
            await self._mark_flushed(context)
        self._closing = True
        self._changed.notify()

    def cancel(self, context_id: str | None = None, everything: bool = False) -> None:
        """Drop a context (or, `everything`, all of them) now: text, queued segments, the
        stream in flight and the slot. A context id never seen, nor among the last
        `RECENT_CONTEXTS` ended, raises `UnknownContext`."""
        targets = list(self._contexts) if everything else [c for c in self._contexts if c.id == context_id]
        if not targets and not everything and context_id not in self._recent:
            raise UnknownContext(
                f"no context {context_id!r} is open on this session; cancel a context id that was sent "
                "with input.text, or send input.cancel without one to stop everything",
                param="context_id",
            )
        for context in targets:
            self._drop(context)
        speaking = self._speaking
        if speaking is not None and speaking.context.cancelled:
            if speaking.stream is not None:
                speaking.stream.close(False)  # the engine drops its work and credits now
            if not speaking.stop.done():
                speaking.stop.set_result(None)
            self._lane.release()
        elif everything:
            self._lane.release()
        self._changed.notify()

    def _drop(self, context: Context) -> None:
        context.cancelled = True
        self._contexts.remove(context)
        self._queued -= len(context.segments) + (1 if context.flushed else 0)
        self._unspoken -= sum(len(s.text) for s in context.segments)
        context.segments.clear()
        context.segmenter = self._new_segmenter()
        self._forget(context)

    def _forget(self, context: Context) -> None:
        if context.id is not None and context.id not in self._recent:
            self._recent.append(context.id)

    def _open(self, context_id: str | None) -> Context:
        """The context that text for `context_id` joins: its open one, or a new one."""
        last = next((c for c in reversed(self._contexts) if c.id == context_id), None)
        if last is not None and not last.flushed:
            return last
        if last is None and context_id is not None:
            named = {c.id for c in self._contexts if c.id is not None}
            if len(named) >= self._max_contexts:
                raise TooManyContexts(
                    f"this session already has {len(named)} open contexts, the most it may have; "
                    "flush or cancel one before opening another",
                    param="context_id",
                )
        context = Context(context_id, self._new_segmenter())
        self._contexts.append(context)
        return context

    async def _mark_flushed(self, context: Context) -> None:
        await self._room(context)
        if context.cancelled:
            return
        context.flushed = True
        self._queued += 1
        self._changed.notify()

    async def _room(self, context: Context) -> None:
        while self._queued >= MAX_PENDING_SEGMENTS and not context.cancelled:
            await self._changed.wait()

    async def _enqueue_all(self, context: Context, pieces: list[str]) -> None:
        waiting = sum(c.segmenter.pending_chars for c in self._contexts)
        pending = waiting + self._unspoken + sum(len(p) for p in pieces)
        if pending > self._max_pending_chars:
            raise Backlogged(
                f"{pending} characters are waiting to be spoken and a session may have at most "
                f"{self._max_pending_chars}; send text no faster than it is spoken"
            )
        for piece in pieces:
            await self._room(context)
            if context.cancelled:
                return
            self._unspoken += len(piece)
            self._queued += 1
            context.segments.append(_Segment(self.count, piece, self.settings))
            self.count += 1
            self._changed.notify()

    # -- output ----------------------------------------------------------------------------
    async def items(self) -> AsyncGenerator[SessionItem, None]:
        """What to send, in order, until the input is finished and spoken. A segment that
        fails is a `SegmentFailed` and the session goes on; `ReplicaLost` (the replica
        that held the session died) and any failure that is not a `VoxError` end it."""
        while True:
            context = self._contexts[0] if self._contexts else None
            if context is None:
                if self._closing:
                    return
                await self._changed.wait()
            elif context.segments:
                segment = context.segments.popleft()
                self._queued -= 1
                self._changed.notify()
                try:
                    async for out in self._speak(context, segment):
                        yield out
                finally:
                    self._unspoken -= len(segment.text)
                    self.quiet_since = self._loop.time()
            elif context.flushed:
                self._contexts.popleft()
                self._queued -= 1
                self._forget(context)
                self._changed.notify()
                yield Flushed(context)
            else:
                await self._changed.wait()

    async def _speak(self, context: Context, segment: _Segment) -> AsyncGenerator[SessionItem, None]:
        """One segment: open its stream, then its chunks, until it ends or `cancel` stops it."""
        s = segment.settings
        started = time.perf_counter()
        request_id = f"{self.id}-{segment.index}"
        speaking = self._speaking = _Speaking(context, self._loop.create_future())
        try:
            opening = asyncio.ensure_future(self._lane.speak(_params(s, segment.text), request_id, started))
            try:
                finished = await _unless_stopped(opening, speaking.stop)
            except BaseException:
                _close_opened(opening)
                raise
            if not finished:
                return
            if context.cancelled:
                _close_opened(opening)
                return
            try:
                stream = opening.result()
            except ReplicaLost:
                raise
            except VoxError as exc:
                self._lane.idle()
                yield SegmentFailed(context, segment.index, exc)
                return
            speaking.stream = stream
            async for out in self._relay(context, segment, stream, speaking.stop):
                yield out
        finally:
            self._speaking = None

    async def _relay(
        self, context: Context, segment: _Segment, stream: Speech, stop: asyncio.Future[None]
    ) -> AsyncGenerator[SessionItem, None]:
        completed = False
        try:
            if context.cancelled:
                return
            yield SegmentStarted(context, segment.index, segment.text, stream.sample_rate, stream.replica)
            async with contextlib.aclosing(stream.chunks()) as chunks:
                while True:
                    step = asyncio.ensure_future(_next_chunk(chunks))
                    if not await _unless_stopped(step, stop) or context.cancelled:
                        return
                    chunk = step.result()
                    if chunk is None:
                        break
                    if segment.settings.timestamps and chunk.words:
                        yield SegmentWords(context, segment.index, chunk.words)
                    if chunk.data:
                        yield SegmentAudio(context, segment.index, chunk.data)
            completed = True
        except ReplicaLost:
            raise
        except VoxError as exc:  # the engine failed mid-segment
            yield SegmentFailed(context, segment.index, exc)
            return
        finally:
            stream.close(completed)
            self._lane.idle()
        yield SegmentDone(context, segment.index)

    async def close(self) -> None:
        """Give back what the session holds; idempotent."""
        await self._lane.close()


async def _next_chunk(chunks: AsyncIterator[AudioChunk]) -> AudioChunk | None:
    return await anext(chunks, None)


async def _unless_stopped(work: asyncio.Future[T], stop: asyncio.Future[None]) -> bool:
    """Wait for `work` until `stop`: True when `work` finished (read its result or its
    error), False when it was cancelled and has unwound. A `work` that finishes as it is
    stopped counts as finished, so the caller checks its context before using it."""
    waiting: set[asyncio.Future[object]] = {work, stop}  # type: ignore[arg-type]
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():
            work.cancel()
            await asyncio.wait({work})
    return not work.cancelled()


def _close_opened(opening: asyncio.Future[Speech]) -> None:
    """Close the stream `opening` produced, if it produced one (it was stopped as it opened)."""
    if opening.done() and not opening.cancelled() and opening.exception() is None:
        opening.result().close(False)


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

