"""Live transcription sessions: audio streams in, turns are found, transcripts come out.

A `LiveSession` is the channel-independent half of a realtime transcription session
(`WS /v1/realtime` is the channel, `voxserve.api.realtime`; `serving/live_transcriber.py`
opens it). The channel hands it audio bytes, commits and clears in order; the session
hands back `LiveEvent`s through the `emit` callback. Per append, on the event loop, it
decodes the bytes to 16 kHz (`InputDecoder`, microseconds), passes them through the
session's noise filter when `noise_reduction` asks for one (on the filter's threads,
`engine/denoise.py`; its output keeps the input's sample indices), scores whole 32 ms
frames of what the filter hands on with Silero VAD on the VAD engine's thread, and feeds
the probabilities to a `TurnDetector`. Turns are cut from the audio as sent: the
recognizer never hears the filter (docs/REALTIME.md, "Noise reduction", says why).
Transcription is work for the shared ASR engine, with a deadline so that it goes before
file work:

- **final**: the committed turn, from its first speech frame (less the prefix padding) to
  `TAIL_S` after its end of speech. When speech pauses it starts early (`engine/turns.py`),
  while the rest of the silence that will end the turn runs, unless other live work is
  already waiting; speech that resumes drops it. Otherwise it starts at the commit. Its
  deadline is `final_target_ms` after the expected end of the turn.
- **deltas**: while the user speaks (`engine/turns.py: delta_due`) and only when an ASR
  worker is idle, the turn so far is decoded again; the words two decodes in a row agree
  on (and were not sent yet) go out as a delta. Their deadline is later than any final's,
  so they never delay one.
- **semantic_vad**: during a pause the end-of-turn model is asked whether the thought is
  complete, and the turn ends on its answer and the early final's text
  (`engine/semantic.py`).

The rules are the engine's: when a turn starts and ends (`engine/turns.py`,
`engine/semantic.py`), and whether a delta or an early final starts now, and every
deadline (the ASR engine's live policy, `engine/live.py`). This module runs them for one
session: it holds the audio, the turn in progress and its decodes, and emits events.

Transcripts of one session are emitted in commit order. A session holds at most
`max_pending_turns` turns in transcription; `append` and `commit` wait past that, which
stops the channel reading. Nothing here knows HTTP or JSON.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from voxserve.audio.pcm import InputDecoder
from voxserve.config import RealtimeConfig
from voxserve.engine.denoise import DenoiseEngine, DenoiseStream
from voxserve.engine.live_audio import SessionAudio, SpeechSpans
from voxserve.engine.semantic import TEXT_WAIT_MS, due_probe, ends_turn, heard_an_end
from voxserve.engine.turns import (
    TAIL_S,
    Pause,
    Resume,
    Start,
    Stop,
    TurnDetection,
    TurnDetector,
    agreed_words,
    delta_due,
)
from voxserve.engine.vad import FRAME_SAMPLES, SAMPLE_RATE, VADEngine, VADStream
from voxserve.errors import InvalidRequest, ServerError, VoxError
from voxserve.serving.live_events import (
    Cleared,
    Committed,
    LiveEvent,
    LiveSettings,
    SessionError,
    SpeechStarted,
    SpeechStopped,
    TranscriptCompleted,
    TranscriptDelta,
    TranscriptFailed,
)
from voxserve.serving.metrics import Metrics

__all__ = ["LiveSession", "SessionHost"]

log = logging.getLogger(__name__)

T = TypeVar("T")

RATE = SAMPLE_RATE
MIN_COMMIT_S = 0.1
"""A commit of less audio is refused (as OpenAI does)."""


class SessionHost(Protocol):
    """What a session asks of the service that opened it (`LiveTranscriber`): whether its
    settings can be served, each decode's deadline (None: not now), and the decode."""

    def check(self, settings: LiveSettings) -> None: ...

    def english(self, settings: LiveSettings) -> bool: ...

    def count_active(self, force: bool = False) -> None: ...

    def final_deadline(self) -> float: ...

    def early_final_deadline(self, rest_s: float) -> float | None: ...

    def delta_deadline(self) -> float | None: ...

    async def decode(self, samples: np.ndarray, settings: LiveSettings, deadline: float, hint: str) -> str: ...


# -- one session -------------------------------------------------------------------------
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
    """Probes made in this pause (`engine/semantic.py: probes`)."""


class LiveSession:
    """One live session, built by `LiveTranscriber.session` with the engines it uses,
    its limits, its metrics and the host that answers its questions."""

    def __init__(
        self,
        emit: Callable[[LiveEvent], None],
        host: SessionHost,
        vad: VADEngine,
        denoise: DenoiseEngine,
        config: RealtimeConfig,
        metrics: Metrics,
        clock: Callable[[], float],
    ) -> None:
        self._emit = emit
        self._host = host
        self._vad = vad
        self._denoise = denoise
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self.settings = LiveSettings(noise_reduction=config.noise_reduction)
        self._decoder = InputDecoder(self.settings.format)
        self._audio = SessionAudio()
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
        self._speech = SpeechSpans()
        """With manual commits: where the uncommitted audio's speech lies."""
        self.active_until = clock() + config.active_s
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
        return None if kind is None else self._denoise.stream(kind)

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
        self._host.check(settings)
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
        self._host.count_active()
        if not len(samples):
            return
        self._audio.add(samples)
        heard = samples if self._filter is None else await self._denoise.feed(self._filter, samples)
        probs = await self._vad.score(self._vad_stream, heard)
        first = self._vad_stream.frames_done - len(probs)
        if self._detector is None:
            self._hear(probs, first)
            self._shed()
            return
        if len(probs):
            await self._on_frames(probs, first)
        await self._after_audio()

    def _mark_active(self) -> None:
        was_idle = self.active_until <= self._clock()
        self.active_until = self._clock() + self._config.active_s
        if was_idle:
            self._host.count_active(force=True)

    # -- manual commits: the uncommitted buffer --------------------------------------------
    def _hear(self, probs: np.ndarray, first: int) -> None:
        """Note where speech lies in the buffer (manual commits: no turns)."""
        if self._speech.hear(probs, self._sample(first)):
            self._mark_active()

    def _shed(self) -> None:
        """Keep the uncommitted audio within `max_buffer_s` (`SpeechSpans.shed`)."""
        self._speech.shed(self._audio, self._floor, int(self._config.max_buffer_s * RATE))

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
            start = self._speech.commit_start(self._audio, self._floor, int(self._config.max_turn_s * RATE))
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
        """Ask the end-of-turn model when the pause has lasted long enough for its next
        question (`engine/semantic.py: due_probe`)."""
        if turn.pause is None or turn.probe is not None:
            return
        silence_ms = (self._audio.end - turn.pause) * 1000 / RATE
        asked = due_probe(td.eagerness, turn.probes, silence_ms)
        if asked is None:
            return
        turn.probes = asked
        samples = self._audio.take(turn.start, self._audio.end)
        turn.probe = self._spawn(self._probe(turn, turn.pause, samples, silence_ms))

    async def _probe(self, turn: _Turn, pause: int, samples: np.ndarray, silence_ms: float) -> None:
        """End the turn at `pause` if the model and the turn's early final (when one is
        decoding, waited for at most `TEXT_WAIT_MS`) say so (`engine/semantic.py:
        ends_turn`)."""
        try:
            p = await self._vad.complete(samples)
            early = turn.early
            text = None
            if heard_an_end(silence_ms, p) and early is not None:
                try:
                    text = await asyncio.wait_for(asyncio.shield(early), TEXT_WAIT_MS / 1000)
                except TimeoutError:
                    text = None  # the model's word stands
            complete = ends_turn(silence_ms, p, text, self._host.english(self.settings))
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

    @staticmethod
    def _tail() -> int:
        return int(TAIL_S * RATE)

    def _maybe_early_final(self, turn: _Turn, td: TurnDetection) -> None:
        """Decode the final while the pause runs, once it has lasted `td.early_lead_ms`;
        it is due the live target after the rest of `td.end_wait_ms`."""
        if turn.early is not None or turn.pause is None:
            return
        end = turn.pause + self._tail()
        if self._audio.end < max(end, turn.pause + int(td.early_lead_ms * RATE / 1000)):
            return
        rest = max(0.0, td.end_wait_ms / 1000 - (self._audio.end - turn.pause) / RATE)
        deadline = self._host.early_final_deadline(rest)
        if deadline is None:
            return
        turn.early = self._spawn(self._decode(self._audio.take(turn.start, end), deadline))
        turn.early_pause = turn.pause
        log.debug("turn %s: early final started %.0f ms after the pause was seen",
                  turn.item_id, (time.monotonic() - turn.pause_wall) * 1000)

    def _maybe_delta(self, turn: _Turn) -> None:
        now = time.monotonic()
        if not delta_due(now, turn.delta_at, (self._audio.end - turn.start) / RATE) or turn.delta is not None:
            return
        deadline = self._host.delta_deadline()
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
        words = task.result().split()
        agreed = agreed_words(turn.hypothesis, words)
        turn.hypothesis = words
        if agreed > turn.sent_words:
            text = " ".join(words[turn.sent_words : agreed])
            self._emit(TranscriptDelta(turn.item_id, text if turn.sent_words == 0 else " " + text))
            self._metrics.realtime_deltas.inc()
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
            deadline = self._host.final_deadline()
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
        m = self._metrics
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
        return await self._host.decode(samples, self.settings, deadline, self._item_hint())

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


def _ms(sample: int) -> int:
    return sample * 1000 // RATE


def _log_failure(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, VoxError):
        log.error("a live transcription task failed: %r", exc, exc_info=exc)
