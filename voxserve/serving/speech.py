"""Open a speech stream: check the model and voice, prepare the text off the loop, wait
for a stream slot, submit to the engine, and hand back a `SpeechStream` that owns the
stream's life cycle.

Every channel calls `open_speech`: `POST /v1/audio/speech`, the speech WebSocket, and
each TTS replica of a Ray deployment. No HTTP here: the caller frames the chunks (raw
bytes, SSE events, WebSocket frames) and decides what "the client left" means.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voxserve.audio.encode import StreamEncoder, make_encoder
from voxserve.config import ServerConfig
from voxserve.engine.admission import Admission
from voxserve.engine.output import StreamHandle
from voxserve.engine.pool import BoundedPool
from voxserve.engine.stream import FirstPacket, StreamFailed
from voxserve.engine.tts import PreparedText, TTSEngine
from voxserve.engine.voices import Voice
from voxserve.engine.words import WordTime
from voxserve.serving.catalog import markup_voice, speech_voice
from voxserve.serving.failures import raise_failure
from voxserve.serving.metrics import Metrics
from voxserve.serving.saved_voices import SavedVoices
from voxserve.serving.waiting import unless_gone

__all__ = [
    "FIRST_PACKET_PARTS",
    "AudioChunk",
    "SpeechParams",
    "SpeechResources",
    "SpeechStream",
    "first_packet_parts",
    "open_speech",
]

log = logging.getLogger(__name__)

_CHEAP_FORMATS = ("pcm", "wav")

FIRST_PACKET_PARTS = (
    "parse", "text", "admission", "queue", "acoustic", "wait", "decode", "deliver", "encode",
)  # fmt: skip
"""The server's share of time to first audio, in order; they add up to `total`:

- parse: the request read and checked, the voice resolved;
- text: normalizing, segmenting and phonemizing (with the wait for the text pool);
- admission: waiting for a stream slot, and the submit;
- queue: waiting for a worker for the first segment's stage A;
- acoustic: that stage A;
- wait: stage A done until the first chunk's decode began;
- decode: the first chunk's decode;
- deliver: gain, resampling, the hand-off to the event loop and its wake-up;
- encode: encoding the first chunk into the response format.
"""


@dataclass(frozen=True)
class _TextMarks:
    """`time.perf_counter` around the text preparation of a stream."""

    start: float
    end: float


def first_packet_parts(
    started: float, text: _TextMarks, engine: FirstPacket, taken: float, encoded: float
) -> dict[str, float]:
    """Seconds per part of `FIRST_PACKET_PARTS`, and their sum as `total` (from `started`,
    the request's arrival, to the first chunk encoded)."""
    stamps = (
        started, text.start, text.end, engine.submitted, engine.acoustic_start,
        engine.acoustic_end, engine.decode_start, engine.decode_end, taken, encoded,
    )  # fmt: skip
    gaps = itertools.pairwise(stamps)
    parts = {name: max(0.0, b - a) for name, (a, b) in zip(FIRST_PACKET_PARTS, gaps, strict=True)}
    parts["total"] = encoded - started
    return parts


@dataclass(frozen=True)
class SpeechParams:
    """A validated speech request, whatever channel it came by."""

    model: str
    text: str
    voice: str
    response_format: str = "pcm"
    speed: float = 1.0
    sample_rate: int | None = None
    """Output rate in Hz; None for the server's default."""
    language: str | None = None
    """Speak this language (voxserve extension); None: the voice's own."""


class SpeechResources(Protocol):
    """What a speech stream uses of a running server (`voxserve.serving.state.AppState`)."""

    config: ServerConfig
    engine: TTSEngine
    admission: Admission
    metrics: Metrics
    text_pool: BoundedPool
    audio_pool: BoundedPool
    saved_voices: SavedVoices | None


@dataclass(frozen=True)
class AudioChunk:
    data: bytes
    """Encoded audio in the stream's format; may be empty (an encoder that holds bytes back)."""
    samples: int
    """Samples this chunk carried."""
    words: tuple[WordTime, ...] = ()
    """Word timings of the segment this chunk starts (seconds of the stream's audio), where
    the model gives them; empty for every other chunk."""
    first_packet: dict[str, float] | None = None
    """On the first chunk: the server's time to it, in seconds per part
    (`FIRST_PACKET_PARTS` and `total`)."""


class SpeechStream:
    """One submitted stream. Read `chunks()` once; taking a chunk gives the engine its
    credit back. `close()` ends it, exactly once whatever calls it: the engine drops the
    stream's work, the admission slot goes back (unless the caller holds it), and a stream
    that did not finish counts as aborted."""

    def __init__(
        self,
        state: SpeechResources,
        handle: StreamHandle,
        encoder: StreamEncoder,
        fmt: str,
        characters: int,
        started: float,
        holds_slot: bool,
        text: _TextMarks | None = None,
    ):
        self.state = state
        self.replica: str | None = None
        """Where the stream runs, when that is another process (a Ray replica)."""
        self.request_id = handle.request_id
        self.sample_rate = handle.sample_rate
        self.characters = characters
        """Characters of the input text."""
        self._handle = handle
        self._encoder = encoder
        self._inline = fmt in _CHEAP_FORMATS
        self._started = started
        self._text = text
        self._holds_slot = holds_slot
        self._closed = False

    async def chunks(self) -> AsyncGenerator[AudioChunk, None]:
        """Encoded chunks as the engine decodes them, the last one included. A failure of
        the engine ends it with the `VoxError` the client is told (logged and counted)."""
        state, handle = self.state, self._handle
        first = True
        total = 0
        while True:
            try:
                item = await handle.stream.get()
            except StreamFailed as exc:
                log.error("stream %s failed: %s", handle.request_id, exc)
                state.metrics.stream_errors.inc()
                raise_failure(exc)
            state.engine.taken(handle.id)
            taken = time.perf_counter()
            if self._inline:
                data = _encode_step(self._encoder, item.pcm, item.last)
            else:
                data = await state.audio_pool.run(_encode_step, self._encoder, item.pcm, item.last)
            total += len(item.pcm)
            parts = None
            if first and len(item.pcm):
                first = False
                encoded = time.perf_counter()
                state.metrics.ttfp.observe(encoded - self._started)
                if item.first_packet is not None and self._text is not None:
                    parts = first_packet_parts(self._started, self._text, item.first_packet, taken, encoded)
                    for name, seconds in parts.items():
                        state.metrics.first_packet.labels(name).observe(seconds)
            yield AudioChunk(data, len(item.pcm), item.words, parts)
            if item.last:
                elapsed = time.perf_counter() - self._started
                if total:
                    state.metrics.rtf.observe(elapsed / (total / handle.sample_rate))
                state.metrics.audio_seconds.inc(total / handle.sample_rate)
                return

    def close(self, completed: bool = False) -> None:
        """End the stream (`completed`: its last chunk was delivered). Later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self.state.engine.abort(self._handle.id)
        if self._holds_slot:
            self.state.admission.release()
        if not completed:
            self.state.metrics.streams_aborted.inc()


async def _prepare_head(state: SpeechResources, params: SpeechParams, voice: Voice) -> tuple[PreparedText, _TextMarks]:
    """The text's first piece through the model's front end, on the text pool: the stream
    starts on it, and the rest follows (`_finish_text`). Markup tags name voices of the
    request's model only (`markup_voice`)."""
    resolve = functools.partial(markup_voice, state.engine, params.model, params.language, state.saved_voices)
    text_start = time.perf_counter()
    prepared = await state.text_pool.run(
        state.engine.prepare, params.text, voice, params.speed, head_only=True, resolve=resolve
    )
    return prepared, _TextMarks(text_start, time.perf_counter())


def _submit(
    state: SpeechResources, params: SpeechParams, prepared: PreparedText, request_id: str, admitted: bool
) -> tuple[StreamHandle, StreamEncoder]:
    """Submit the stream at the request's rate and make its encoder. A failure gives the
    slot back, unless the caller keeps it (`admitted`)."""
    rate = params.sample_rate or state.config.default_sample_rate
    try:
        handle = state.engine.submit(prepared, rate, asyncio.get_running_loop(), request_id)
        encoder = make_encoder(params.response_format, rate)
    except BaseException:
        if not admitted:
            state.admission.release()
        raise
    return handle, encoder


def _finish_text(engine: TTSEngine, prepared: PreparedText, stream_id: int) -> None:
    """The rest of a stream's text through the model's front end, then to the stream (on
    the text pool, after the stream started on its first piece)."""
    try:
        segments = engine.prepare_rest(prepared)
    except Exception as exc:  # noqa: BLE001 - the stream fails, not the pool
        engine.fail_stream(stream_id, exc)
        return
    engine.extend(stream_id, segments)


def _encode_step(encoder: StreamEncoder, pcm: np.ndarray, last: bool) -> bytes:
    data = encoder.feed(pcm) if len(pcm) else b""
    if last:
        data += encoder.flush()
    return data


async def open_speech(
    state: SpeechResources,
    params: SpeechParams,
    request_id: str,
    started: float,
    gone: Callable[[], Awaitable[None]] | None = None,
    admitted: bool = False,
) -> SpeechStream:
    """Check the model and voice, prepare the text, wait for a stream slot and submit the
    stream. The caller closes the returned stream once, however it ends.

    `gone` resolves when the client leaves, which ends a wait in the admission queue with
    499. A Ray TTS replica runs this with no `gone`: there, the caller cancels the call.

    `admitted`: the caller already holds a stream slot and keeps it (a WebSocket session
    between two segments of one reply), so the stream neither waits for one nor gives it
    back.
    """
    engine = state.engine
    voice = speech_voice(engine, params.model, params.voice, params.language, state.saved_voices)
    if not admitted:
        state.admission.refuse_if_full()  # before the phonemizer's work, not after
    prepared, text = await _prepare_head(state, params, voice)
    if not admitted:
        await unless_gone(
            state.admission.acquire(prepared.model),  # raises Overloaded (429)
            gone() if gone is not None else None,
            "client disconnected while queued",
        )
    handle, encoder = _submit(state, params, prepared, request_id, admitted)
    if prepared.rest:
        try:
            state.text_pool.start(_finish_text, engine, prepared, handle.id)
        except RuntimeError as exc:  # the pool is shut down: the server is stopping
            engine.fail_stream(handle.id, exc)
    state.metrics.streams_started.inc()
    fmt = params.response_format
    return SpeechStream(state, handle, encoder, fmt, prepared.characters, started, not admitted, text)
