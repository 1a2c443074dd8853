"""`WS /v1/audio/speech/stream`: text streams in, speech streams out, on one connection.

For voice agents that speak an LLM's reply while it is still being written. The client
sends JSON text messages:
- `{"type": "session.config", ...}`: voice, speed, response_format (`pcm` or `wav`),
  sample_rate, model, language, `split` (`clause`, the default, or `sentence`) and
  `timestamps` (word timings, default false); it applies to the segments that start
  after it;
- `{"type": "input.text", "text": "...", "context_id": ...}`: a fragment of any size, even
  one character; the optional `context_id` names the reply it belongs to;
- `{"type": "input.done", "context_id": ...}`: speak what is pending in the context now
  and end it; the session stays open;
- `{"type": "input.cancel", "context_id": ...}`: barge-in: stop the context (without an
  id, every context) now, speaking or waiting, and drop what is left of it;
- `{"type": "session.close"}`: finish what was sent, then end the session.

The server sends, per segment, `{"type": "audio.start", "segment", "text", "sample_rate"}`
(on `voxserve serve --ray` also `replica`, the TTS replica holding the session, as HTTP's
`x-voxserve-replica` header names one), then binary frames of audio as the engine decodes them (16-bit mono PCM, or a WAV stream
per segment), then `{"type": "audio.done", "segment"}`. With `timestamps`, a
`{"type": "speech.words", "segment", "words": [{"word", "start_time", "end_time"}]}`
event comes before the audio it times (one per part the engine speaks the segment in: a
long segment may come in several), its times in seconds from the segment's start, where
the model times words. After `input.done` it sends
`{"type": "input.flushed"}` once the flushed text is spoken, and `{"type": "session.done"}`
before it closes. It answers `input.cancel` with `{"type": "audio.cancelled"}`, after
which nothing of the cancelled context is sent (the channel checks each item's context
before it sends it, and a cancel is marked before its answer takes the send lock). Every
event of a named context carries its `context_id`; binary frames belong to the context of
the latest `audio.start`. A mistake gets `{"type": "error", "error", "message", "code", ...}`
(`error` is the object of an HTTP error body) and the session stays usable.

This module is the channel: it reads messages under the limits below, parses and checks
them, and renders what the session emits as events and binary frames. The session itself
(`voxserve.serving.speech_session.SpeechSession`) cuts the text into segments as soon as
the text holds a complete clause or sentence, and speaks each one as a stream opened by
the same code as `POST /v1/audio/speech`: the same admission, deadlines and credits. A
session takes one stream slot for a reply and keeps it while the reply's clauses keep
coming (`HOLD_SLOT_S`), so a reply is admitted once, not at every clause. It speaks one
segment at a time, in order, and prepares nothing ahead, so a session never holds more
than one stream. Segments wait in a bounded queue; when it is full the
server stops reading, and TCP pushes back on the client. A client that leaves mid-stream
cancels the segment in flight, which drops its engine work. The session reaches its
engine through `Service.speech_lane`: this process's, or on `voxserve serve --ray` one
TTS replica that holds the session for its whole life; if that replica dies, the session
ends with a `replica_lost` error event and close code 1012 (reconnect).

Limits (`ServerConfig.ws`, `WSConfig`). Each one that ends a session sends an error
event with the code below first, then closes with the close code; the idle timeout, a
normal close, sends none:

| limit | default | error code | close |
|---|---|---|---|
| open sessions, all WebSocket routes (`max_sessions`) | 64 | `too_many_sessions` | 1013 |
| message size (`max_message_bytes`) | 64 KiB | `message_too_large` | 1009 |
| messages per second (`messages_per_s`, bursts of `message_burst`) | 100, 400 | `rate_limited` | 1008 |
| text waiting to be spoken (`max_pending_chars`) | 16 Ki chars | `pending_text_too_long` | 1008 |
| no message and nothing to speak (`idle_timeout_s`) | 15 min | none: a normal close, reason `idle_timeout` | 1000 |
| contexts open at once (`max_contexts`) | 8 | `too_many_contexts` (the session goes on) | - |
| a `context_id` (`MAX_CONTEXT_ID_CHARS`) | 64 chars | `invalid_value` (the session goes on) | - |
| a client that takes nothing sent to it (`send_timeout_s`) | 15 s | (none: it is gone) | - |
| the replica holding the session died (Ray) | | `replica_lost` | 1012 |
| any failure that is not a `VoxError` (logged with its traceback) | | `internal_error` | 1011 |

- A message past the rate is not dropped: dropping text would speak a reply with holes
  in it, so the session ends instead. A client that streams an LLM's tokens one message
  per token stays far below 100 a second.
- The pending text counts the segmenter's buffer plus every segment queued or being
  spoken. With the default limits a client cannot reach it (the reader stops at
  `MAX_PENDING_SEGMENTS` queued segments of at most `MAX_SEGMENT_CHARS`), so it
  guards configurations with larger segments or fragments.
- A cancel is acted on as soon as it is read, even while the server waits for room in
  the session's queue: then it reads up to `MAX_READ_AHEAD` messages ahead (and
  `max_pending_chars` of text), and a cancel among them also drops the text kept ahead
  of it. A flood of cancels is a flood of messages: the rate limit ends it, and each
  answer waits for the client to take the one before.
- The server's own uvicorn refuses an oversized message itself (`ws_max_size`); the
  handler checks again, so the limit holds under any ASGI server.
- Splitting runs on the event loop: it is linear in the text (`voxserve.text.incremental`)
  and a fragment holds at most `tts.max_input_chars` characters, so one message costs at
  most a millisecond or two.

Whenever the client is gone the session ends within seconds, however much is queued, and
gives back its stream slot and its place under `max_sessions`: a disconnect is noticed by
the reader, which keeps one receive pending even while the queue is full (it reads ahead
at most one message), and by the speaker, whose every send has `send_timeout_s`.
The `Origin` check (`voxserve.api.origin.CheckOrigin`, middleware for every route) runs
before the handshake reaches this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Awaitable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket

from voxserve.api.errors import error_event
from voxserve.api.schemas import VoiceRef
from voxserve.api.speech import words_json
from voxserve.api.ws_limits import ClientGone, Message, SessionEnd, parse_event
from voxserve.api.ws_session import Wire, end_error, idle_end, serve
from voxserve.config import WSConfig
from voxserve.engine.tts import MAX_SEGMENT_CHARS
from voxserve.errors import ClientError, InvalidRequest, ReplicaLost, VoxError
from voxserve.serving.service import Service
from voxserve.serving.speech_session import (
    HOLD_SLOT_S,
    Backlogged,
    Flushed,
    SegmentAudio,
    SegmentDone,
    SegmentFailed,
    SegmentStarted,
    SegmentWords,
    SessionItem,
    SpeechSession,
    SpeechSettings,
)

__all__ = ["HOLD_SLOT_S", "MAX_CONTEXT_ID_CHARS", "SessionConfig", "speech_stream"]

MAX_READ_AHEAD = 64
"""Messages read and kept while the session's queue is full, so that a cancel behind
them is still heard; past it the server stops reading."""

MAX_CONTEXT_ID_CHARS = 64
"""Longest `context_id`: room for a UUID or a framework's own ids, and no more, since each
one is kept, compared and sent back with every event of its context."""

log = logging.getLogger(__name__)

T = TypeVar("T")


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
    language: str | None = Field(None, min_length=1, max_length=16)
    timestamps: bool = Field(False, strict=True)

    def settings(self) -> SpeechSettings:
        voice = self.voice if isinstance(self.voice, str) else self.voice.id
        return SpeechSettings(
            self.model, voice, self.speed, self.response_format, self.sample_rate,
            self.split, self.language, self.timestamps,
        )  # fmt: skip


class _Channel:
    def __init__(self, state: Service, ws: WebSocket):
        self.state = state
        self.limits: WSConfig = state.config.ws
        self.id = f"ws_{uuid.uuid4().hex[:16]}"
        self.config = SessionConfig.model_validate({})
        self.session = SpeechSession(
            state.speech_lane(),
            self.id,
            MAX_SEGMENT_CHARS,
            self.limits.max_pending_chars,
            self.limits.max_contexts,
        )
        self.ended = "the client left"
        self.wire = Wire(
            ws,
            self.limits.send_timeout_s,
            self.limits.max_message_bytes,
            self.limits.messages_per_s,
            self.limits.message_burst,
            f"more than {self.limits.messages_per_s:g} messages a second (bursts up to "
            f"{self.limits.message_burst}); send larger fragments, less often",
        )
        self._ahead: deque[Message] = deque()
        """Messages read while the session's queue was full, checked, not yet acted on."""
        self._ahead_size = 0
        """Their payloads' length, characters of text or bytes of a binary frame."""
        self._speaker: asyncio.Task[None] | None = None

    def summary(self) -> str:
        return f"{self.session.count} segments"

    # -- sending ---------------------------------------------------------------------------
    async def send_event(self, event: dict[str, Any]) -> None:
        await self.wire.send_event(event)

    async def send_error(self, message: str, code: str, exc: VoxError | None = None, **extra: Any) -> None:
        """An `error` event: `error` holds the same object as an HTTP error body (`exc`, or
        the protocol error `code`); `message`, `code` and `extra` repeat it at the top."""
        if exc is None:
            exc = end_error(message, code, extra.get("param"))
        await self.send_event({**error_event(exc), "message": message, "code": code, **extra})

    # -- the session -----------------------------------------------------------------------
    async def run(self) -> None:
        self._speaker = asyncio.create_task(self._speak_all())
        await self._read_all()
        self.ended = "session.close"
        await self.send_event({"type": "session.done"})
        await self.wire.close(1000)

    async def end(self, end: SessionEnd) -> None:
        """Tell the client why (the speaker is stopped first, so nothing else is sending)."""
        await self._stop_speaker()
        with contextlib.suppress(ClientGone):
            if end.code is not None:
                await self.send_error(end.message, end.code)
            await self.wire.close(end.close_code, end.reason)

    async def stop(self) -> None:
        await self._stop_speaker()
        self.wire.stop()
        await self.session.close()

    async def _stop_speaker(self) -> None:
        speaker = self._speaker
        if speaker is None:
            return
        if not speaker.done():
            speaker.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await speaker  # also marks a failure as seen (it was raised, or is moot)

    def _speaker_failed(self) -> None:
        """The speaker ended while the session reads: re-raise why (its exception)."""
        assert self._speaker is not None
        self._speaker.result()
        raise RuntimeError("the speaker stopped before session.close")

    # -- receiving -------------------------------------------------------------------------
    async def _next_message(self) -> Message:
        """The next message; ends the session when the client leaves, when the speaker
        fails, or after `idle_timeout_s` with no message and nothing to speak."""
        assert self._speaker is not None
        if self._ahead:
            message = self._ahead.popleft()
            self._ahead_size -= _payload_size(message)
            return message
        idle = self.limits.idle_timeout_s
        loop = self.wire.loop
        while True:
            recv = self.wire.receiving()
            quiet = max(self.wire.quiet_since, self.session.quiet_since)
            busy = self.session.busy
            timeout = idle if busy else max(0.0, quiet + idle - loop.time())
            waiting: set[asyncio.Future[Any]] = {recv, self._speaker}
            await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if recv.done():
                return self.wire.take()
            if self._speaker.done():
                self._speaker_failed()
            quiet = max(self.wire.quiet_since, self.session.quiet_since)
            if not self.session.busy and loop.time() - quiet >= idle:
                raise idle_end(idle, "nothing to speak; open a new session when there is more")

    async def _read_all(self) -> None:
        """Read and act on messages until `session.close` has been spoken."""
        while True:
            message = await self._next_message()
            if message.get("bytes") is not None:
                await self.send_error(
                    "binary frames are not accepted; send JSON text messages such as "
                    '{"type": "input.text", "text": "..."}',
                    "binary_not_supported",
                )
                continue
            try:
                closing = await self._handle(message.get("text") or "")
            except Backlogged as exc:
                raise SessionEnd(1008, exc.message, exc.code) from None
            except ReplicaLost:
                raise
            except VoxError as exc:
                await self.send_error(exc.message, exc.code or "error", exc, param=exc.param)
                continue
            if closing:
                break
        await self._finish_speaking()

    async def _finish_speaking(self) -> None:
        """After `session.close`: wait for the speaker, still noticing a client that leaves
        (later messages count against the limits and are otherwise ignored)."""
        assert self._speaker is not None
        while not self._speaker.done():
            recv = self.wire.receiving()
            waiting: set[asyncio.Future[Any]] = {recv, self._speaker}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if recv.done():
                message = self.wire.take()
                if _is_cancel(message):  # barge-in while the last reply is spoken
                    await self._handle_now(message)
        self._speaker.result()

    async def _handle(self, raw: str) -> bool:
        """Act on one text message; True when it closes the session."""
        try:
            message = parse_event(raw)
        except InvalidRequest as exc:
            await self.send_error(exc.message, "invalid_json")
            return False
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            await self.send_error('send a JSON object with a "type" field', "invalid_message")
            return False
        kind = message["type"]
        context_id = _context_id(message) if kind in ("input.text", "input.done", "input.cancel") else None
        if kind == "input.text":
            text = message.get("text")
            if not isinstance(text, str):
                await self.send_error('"text" must be a string', "invalid_value", param="text")
                return False
            limit = self.state.config.tts.max_input_chars
            if len(text) > limit:
                await self.send_error(f"a fragment may hold at most {limit} characters", "input_too_long", param="text")
                return False
            await self._while_connected(self.session.feed(text, context_id))
        elif kind == "input.done":
            await self._while_connected(self.session.flush(context_id))
        elif kind == "input.cancel":
            self.session.cancel(context_id, everything=context_id is None)
            await self.send_event(_tagged({"type": "audio.cancelled"}, context_id))
        elif kind == "session.config":
            await self._configure(message)
        elif kind == "session.close":
            await self._while_connected(self.session.finish())
            return True
        else:
            await self.send_error(
                f"unknown message type {kind[:100]!r}; use session.config, input.text, input.done, "
                "input.cancel or session.close",
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
            await self._while_connected(self.session.configure(config.settings()))
        except (Backlogged, ReplicaLost):
            raise
        except VoxError as exc:
            param = exc.param or "voice"
            await self.send_error(exc.message, exc.code or "invalid_value", exc, param=param)
            return
        self.config = config

    async def _while_connected(self, work: Awaitable[T]) -> T:
        """Await the session's `work`, which waits while its queue of segments is full.
        Meanwhile one receive stays pending, so a client that leaves is noticed, and up to
        `MAX_READ_AHEAD` messages (and `max_pending_chars` characters or bytes of them) are
        read and kept for later; past that the server reads no more, and TCP pushes back
        on the client. An
        `input.cancel` among them is acted on at once, since it cannot wait for room in
        the queue it is there to empty: it also drops the text kept ahead of it."""
        assert self._speaker is not None
        task = asyncio.ensure_future(work)
        try:
            while not task.done():
                recv = self.wire.receiving()
                waiting: set[asyncio.Future[Any]] = {task, self._speaker}
                if not recv.done():
                    waiting.add(recv)
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    break
                if recv.done() and recv.result()["type"] == "websocket.disconnect":
                    raise ClientGone("the client left")
                room = len(self._ahead) < MAX_READ_AHEAD and self._ahead_size < self.limits.max_pending_chars
                if recv.done() and room:
                    message = self.wire.take()
                    if _is_cancel(message):
                        self._drop_ahead(message)
                        await self._handle_now(message)
                    else:
                        self._ahead.append(message)
                        self._ahead_size += _payload_size(message)
                if self._speaker.done():
                    self._speaker_failed()
        finally:
            if not task.done():
                task.cancel()
        return task.result()

    # -- speaking --------------------------------------------------------------------------
    async def _speak_all(self) -> None:
        async with contextlib.aclosing(self.session.items()) as items:
            async for item in items:
                await self._send_item(item)

    async def _send_item(self, item: SessionItem) -> None:
        context = item.context
        if context.cancelled:  # its audio.cancelled is sent, or about to be: nothing more of it
            return
        match item:
            case SegmentAudio(_, _, data):
                await self.wire.send_bytes(data)
            case SegmentStarted(_, index, text, rate, replica):
                event: dict[str, Any] = {"type": "audio.start", "segment": index, "text": text, "sample_rate": rate}
                if replica is not None:
                    event["replica"] = replica
                await self.send_event(_tagged(event, context.id))
            case SegmentWords(_, index, words):
                event = {"type": "speech.words", "segment": index, "words": words_json(words)}
                await self.send_event(_tagged(event, context.id))
            case SegmentDone(_, index):
                await self.send_event(_tagged({"type": "audio.done", "segment": index}, context.id))
            case SegmentFailed(_, index, exc):
                extra = {"segment": index, "status": exc.status}
                await self.send_error(exc.message, exc.code or "error", exc, **_tagged(extra, context.id))
            case Flushed():
                await self.send_event(_tagged({"type": "input.flushed"}, context.id))

    def _drop_ahead(self, cancel: Message) -> None:
        """Drop the text and flushes kept ahead for the contexts `cancel` stops (all of them
        when it names none); other messages stay, in order."""
        try:
            target = _context_id(parse_event(cancel.get("text") or ""))
        except ClientError:
            return  # the cancel itself is refused
        kept: deque[Message] = deque()
        for message in self._ahead:
            kind, context_id = _kind_and_context(message)
            if kind in ("input.text", "input.done") and (target is None or context_id == target):
                self._ahead_size -= _payload_size(message)
            else:
                kept.append(message)
        self._ahead = kept

    async def _handle_now(self, message: Message) -> None:
        """A message read ahead of its turn (a cancel): act on it as `_read_all` would."""
        try:
            await self._handle(message.get("text") or "")
        except VoxError as exc:
            await self.send_error(exc.message, exc.code or "error", exc, param=exc.param)


def _payload_size(message: Message) -> int:
    return len(message.get("text") or message.get("bytes") or "")


def _is_cancel(message: Message) -> bool:
    """Whether a received frame is an `input.cancel` (parsed again when handled)."""
    text = message.get("text")
    if not text or "input.cancel" not in text:
        return False
    try:
        parsed = parse_event(text)
    except InvalidRequest:
        return False
    return isinstance(parsed, dict) and parsed.get("type") == "input.cancel"


def _kind_and_context(message: Message) -> tuple[str | None, object]:
    """A kept message's type and raw `context_id`, or (None, None) when it is not a JSON object."""
    try:
        parsed = parse_event(message.get("text") or "")
    except InvalidRequest:
        return None, None
    if not isinstance(parsed, dict):
        return None, None
    kind = parsed.get("type")
    return (kind if isinstance(kind, str) else None), parsed.get("context_id")


def _context_id(message: dict[str, Any]) -> str | None:
    """A message's `context_id`: absent (None), or 1 to `MAX_CONTEXT_ID_CHARS` printable characters."""
    value = message.get("context_id")
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_CONTEXT_ID_CHARS or not value.isprintable():
        raise ClientError(
            f'"context_id" must be a string of 1 to {MAX_CONTEXT_ID_CHARS} printable characters',
            param="context_id",
            code="invalid_value",
        )
    return value


def _tagged(event: dict[str, Any], context_id: str | None) -> dict[str, Any]:
    """The event with its context's id, where the context has one."""
    if context_id is not None:
        event["context_id"] = context_id
    return event


async def speech_stream(ws: WebSocket) -> None:
    await serve(ws, _Channel, log)
