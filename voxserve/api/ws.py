"""`WS /v1/audio/speech/stream`: text streams in, speech streams out, on one connection.

For voice agents that speak an LLM's reply while it is still being written. The client
sends JSON text messages:
- `{"type": "session.config", ...}`: voice, speed, response_format (`pcm` or `wav`),
  sample_rate, model, and `split` (`clause`, the default, or `sentence`); it applies to
  the segments that start after it;
- `{"type": "input.text", "text": "..."}`: a fragment of any size, even one character;
- `{"type": "input.done"}`: speak what is pending now; the session stays open;
- `{"type": "session.close"}`: finish what was sent, then end the session.

The server sends, per segment, `{"type": "audio.start", "segment", "text", "sample_rate"}`,
then binary frames of audio as the engine decodes them (16-bit mono PCM, or a WAV stream
per segment), then `{"type": "audio.done", "segment"}`. After `input.done` it sends
`{"type": "input.flushed"}` once the flushed text is spoken, and `{"type": "session.done"}`
before it closes. A mistake gets `{"type": "error", "message", "code", ...}` and the
session stays usable.

A segment starts as soon as the text holds a complete clause or sentence
(`voxserve.text.incremental`). Each segment is a stream of the shared engine, opened by
the same code as `POST /v1/audio/speech`: the same admission, deadlines and credits. A
session takes one stream slot for a reply and keeps it while the reply's clauses keep
coming (`HOLD_SLOT_S`), so a reply is admitted once, not at every clause. It speaks one
segment at a time, in order, and prepares nothing ahead, so a session never holds more
than one stream. Fragments wait in a bounded queue; when it is full the
server stops reading, and TCP pushes back on the client. A client that leaves mid-stream
cancels the segment in flight, which drops its engine work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxserve.api.schemas import SpeechRequest, VoiceRef, validate
from voxserve.api.speech import open_speech
from voxserve.errors import VoxError
from voxserve.text.incremental import TextSegmenter

if TYPE_CHECKING:
    from voxserve.api.app import AppState

__all__ = ["SessionConfig", "speech_stream"]

log = logging.getLogger(__name__)

MAX_PENDING_SEGMENTS = 16
"""Segments (and markers) waiting to be spoken; past it the server stops reading."""

HOLD_SLOT_S = 2.0
"""How long a session keeps its stream slot after its last segment, waiting for the
next clause of the same reply. An LLM at 20 tokens/s writes a clause in well under a
second, so a reply keeps one slot from its first clause to its last and never queues
again behind new streams half-way through a sentence."""


class SessionConfig(BaseModel):
    """The fields of a `session.config` message."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["session.config"] = "session.config"
    model: str = Field("tts-1", min_length=1, max_length=200)
    voice: str | VoiceRef = "alloy"
    speed: float = Field(1.0, ge=0.25, le=4.0, allow_inf_nan=False, strict=True)
    response_format: Literal["pcm", "wav"] = "pcm"
    sample_rate: int | None = Field(None, ge=8000, le=48000, strict=True)
    split: Literal["sentence", "clause"] = "clause"


@dataclass(frozen=True)
class _Segment:
    index: int
    text: str
    config: SessionConfig


@dataclass(frozen=True)
class _Marker:
    kind: Literal["flushed", "close"]


class _Session:
    def __init__(self, state: AppState, ws: WebSocket):
        self.state = state
        self.ws = ws
        self.id = f"ws_{uuid.uuid4().hex[:16]}"
        self.config = SessionConfig.model_validate({})
        self.segmenter = self._new_segmenter()
        self.queue: asyncio.Queue[_Segment | _Marker] = asyncio.Queue(MAX_PENDING_SEGMENTS)
        self.count = 0
        self._send_lock = asyncio.Lock()
        self._slot = False

    def _new_segmenter(self) -> TextSegmenter:
        return TextSegmenter(self.config.split, max_chars=self.state.config.tts.max_segment_chars)

    # -- sending ---------------------------------------------------------------------------
    async def send_event(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send_text(json.dumps(event, separators=(",", ":"), ensure_ascii=False))

    async def send_audio(self, data: bytes) -> None:
        async with self._send_lock:
            await self.ws.send_bytes(data)

    async def send_error(self, message: str, code: str, **extra: Any) -> None:
        await self.send_event({"type": "error", "message": message, "code": code, **extra})

    # -- receiving -------------------------------------------------------------------------
    async def run(self) -> None:
        speaker = asyncio.create_task(self._speak_all())
        closing = False
        try:
            while not closing:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes") is not None:
                    await self.send_error(
                        "binary frames are not accepted; send JSON text messages such as "
                        '{"type": "input.text", "text": "..."}',
                        "binary_not_supported",
                    )
                    continue
                closing = await self._handle(message.get("text") or "")
            await speaker  # session.close: finish what was sent
            await self.send_event({"type": "session.done"})
            await self.ws.close(1000)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client left; `finally` drops its work
        finally:
            if not speaker.done():
                speaker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await speaker

    async def _handle(self, raw: str) -> bool:
        """Act on one text message; True when it closes the session."""
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            await self.send_error("the message is not valid JSON; send one JSON object per message", "invalid_json")
            return False
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            await self.send_error('send a JSON object with a "type" field', "invalid_message")
            return False
        kind = message["type"]
        if kind == "input.text":
            text = message.get("text")
            if not isinstance(text, str):
                await self.send_error('"text" must be a string', "invalid_value", param="text")
                return False
            limit = self.state.config.tts.max_input_chars
            if len(text) > limit:
                await self.send_error(f"a fragment may hold at most {limit} characters", "input_too_long", param="text")
                return False
            for piece in self.segmenter.feed(text):
                await self._enqueue(piece)
        elif kind == "input.done":
            for piece in self.segmenter.flush():
                await self._enqueue(piece)
            await self.queue.put(_Marker("flushed"))
        elif kind == "session.config":
            await self._configure(message)
        elif kind == "session.close":
            for piece in self.segmenter.flush():
                await self._enqueue(piece)
            await self.queue.put(_Marker("close"))
            return True
        else:
            await self.send_error(
                f"unknown message type {kind!r}; use session.config, input.text, input.done or session.close",
                "unknown_type",
            )
        return False

    async def _configure(self, message: dict[str, Any]) -> None:
        try:
            config = SessionConfig.model_validate({**self.config.model_dump(), **message})
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            param = ".".join(str(p) for p in first.get("loc", ())) or None
            await self.send_error(f"invalid session.config: {param}: {first.get('msg')}", "invalid_value", param=param)
            return
        try:
            name = config.voice if isinstance(config.voice, str) else config.voice.id
            self.state.engine.resolve_voice(name)
        except VoxError as exc:
            await self.send_error(exc.message, exc.code or "invalid_value", param="voice")
            return
        if config.split != self.config.split:
            pending = self.segmenter.pending
            self.config = config
            self.segmenter = self._new_segmenter()
            self.segmenter.feed(pending)
        self.config = config

    async def _enqueue(self, text: str) -> None:
        await self.queue.put(_Segment(self.count, text, self.config))
        self.count += 1

    # -- speaking --------------------------------------------------------------------------
    async def _speak_all(self) -> None:
        try:
            while True:
                item = await self._next_item()
                if isinstance(item, _Marker):
                    if item.kind == "close":
                        return
                    await self.send_event({"type": "input.flushed"})
                    continue
                await self._speak(item)
        finally:
            self._release()

    async def _next_item(self) -> _Segment | _Marker:
        """The next segment or marker; the slot is given back when none comes soon."""
        if self._slot:
            getter = asyncio.ensure_future(self.queue.get())
            try:
                await asyncio.wait({getter}, timeout=HOLD_SLOT_S)
            finally:
                if not getter.done():
                    getter.cancel()  # before it took an item: the item stays queued
                    with contextlib.suppress(asyncio.CancelledError):
                        await getter
            if not getter.cancelled():
                return getter.result()
            self._release()
        return await self.queue.get()

    def _release(self) -> None:
        if self._slot:
            self._slot = False
            self.state.admission.release()

    async def _speak(self, segment: _Segment) -> None:
        cfg = segment.config
        started = time.perf_counter()
        request_id = f"{self.id}-{segment.index}"
        try:
            body = validate(
                SpeechRequest,
                {"model": cfg.model, "input": segment.text, "voice": cfg.voice, "speed": cfg.speed,
                 "response_format": cfg.response_format, "sample_rate": cfg.sample_rate},
            )
            if not self._slot:
                await self.state.admission.acquire()  # 429 when the server is full
                self._slot = True
            source, on_close = await open_speech(self.state, body, request_id, started, admitted=True)
        except VoxError as exc:
            await self.send_error(exc.message, exc.code or "error", segment=segment.index, status=exc.status)
            return
        completed = False
        try:
            rate = cfg.sample_rate or self.state.config.default_sample_rate
            await self.send_event(
                {"type": "audio.start", "segment": segment.index, "text": segment.text, "sample_rate": rate}
            )
            async for data in source:
                if data:
                    await self.send_audio(data)
            completed = True
        except VoxError as exc:  # the engine failed mid-segment
            await self.send_error(exc.message, exc.code or "error", segment=segment.index, status=exc.status)
            return
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            on_close(completed)
        await self.send_event({"type": "audio.done", "segment": segment.index})


async def speech_stream(ws: WebSocket) -> None:
    state: AppState = ws.app.state.vox
    await ws.accept()
    session = _Session(state, ws)
    state.metrics.ws_sessions.inc()
    started = time.perf_counter()
    try:
        await session.run()
    finally:
        state.metrics.ws_sessions.dec()
        log.info("session %s ended after %.1f s, %d segments", session.id, time.perf_counter() - started, session.count)
