"""`WS /v1/realtime`: OpenAI's Realtime API, transcription sessions.

A client connects as OpenAI's do (`/v1/realtime?intent=transcription`; a `model`
parameter is accepted and ignored), streams audio with `input_audio_buffer.append`, and
gets turn events and transcripts back. This module is the protocol: it parses and checks
client events, renders `voxserve.serving.realtime` events as OpenAI's server events, and
keeps the connection bounded. The session logic (VAD, turns, transcripts) is in
`voxserve.serving.realtime`. docs/REALTIME.md lists what is supported.

Client events: `session.update` (the current shape, `session.type = "transcription"`,
`session.audio.input.{format, transcription, turn_detection, noise_reduction}`;
`turn_detection` is `server_vad`, `semantic_vad` with its `eagerness`, or null),
`transcription_session.update` (the older shape), `input_audio_buffer.append`,
`.commit` and `.clear`. Any other event type gets an `error` event and the session goes on.

Limits. Each one that ends a session sends an `error` event with the code below first,
except the idle timeout, a normal close:

| limit | default | error code | close |
|---|---|---|---|
| WebSocket sessions, all routes (`--ws-max-sessions`) | 64 | `too_many_sessions` | 1013 |
| live sessions: the measured capacity, at most `--realtime-max-sessions` | 8 | `too_many_sessions` | 1013 |
| message size (`--realtime-max-message-bytes`) | 256 KiB | `message_too_large` | 1009 |
| messages per second (`--realtime-messages-per-s`, burst) | 200, 1000 | `rate_limited` | 1008 |
| no message and no turn being transcribed (`--realtime-idle-timeout-s`) | 15 min | (none: reason `idle_timeout`) | 1000 |
| events the client does not read (`OUTBOX`, `--ws-send-timeout-s`) | 256, 15 s | (none: it is gone) | - |
| the replica holding the session died (Ray) | | `replica_lost` | 1012 |
| any failure that is not a `VoxError` | | `internal_error` | 1011 |

With manual commits, uncommitted audio past `--realtime-max-buffer-s` (60 s) makes room by
dropping the oldest silence, then the oldest audio: the newest speech is kept. An idle
session counts under `--realtime-max-sessions` but not against the measured capacity. Parsing is linear: one `json.loads` and one base64 decode of a
message of bounded size; the audio is decoded by the session.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket

from voxserve.api.errors import error_event
from voxserve.api.ws_limits import ClientGone, Message, SessionEnd, parse_event
from voxserve.api.ws_session import Wire, end_error, idle_end, serve
from voxserve.audio.pcm import LEGACY_FORMATS
from voxserve.errors import InvalidRequest, NotFound, Overloaded, ReplicaLost, VoxError
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
    TurnDetection,
)
from voxserve.serving.service import Live, Service

__all__ = ["realtime"]

log = logging.getLogger(__name__)

OUTBOX = 256
"""Server events waiting to be sent; a client that lets more pile up is gone."""

_LEGACY_BACK = {v: k for k, v in LEGACY_FORMATS.items()}


# -- client event schemas (what OpenAI's SDK sends; extra fields are refused) -------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Format(_Strict):
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"] = "audio/pcm"
    rate: Literal[24000] | None = None


class _Transcription(_Strict):
    model: str | None = Field(None, max_length=200)
    language: str | None = Field(None, max_length=16)
    prompt: str | None = Field(None, max_length=4096)
    delay: str | None = Field(None, max_length=16)
    """Accepted, not used: deltas follow the machine's headroom."""
    keywords: list[Annotated[str, Field(max_length=200)]] | None = Field(None, max_length=100)
    languages: list[Annotated[str, Field(max_length=16)]] | None = Field(None, max_length=100)


class _ServerVAD(_Strict):
    type: Literal["server_vad"]
    threshold: float = Field(0.5, ge=0.0, le=1.0, allow_inf_nan=False)
    prefix_padding_ms: int = Field(300, ge=0, le=5000)
    silence_duration_ms: int = Field(500, ge=100, le=10000)
    create_response: bool | None = None
    interrupt_response: bool | None = None
    idle_timeout_ms: int | None = None


class _SemanticVAD(_Strict):
    type: Literal["semantic_vad"]
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    create_response: bool | None = None
    interrupt_response: bool | None = None


class _NoiseReduction(_Strict):
    type: Literal["near_field", "far_field"] | None = None
    strength: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)


_TurnDetection = Annotated[_ServerVAD | _SemanticVAD, Field(discriminator="type")]


class _Input(_Strict):
    format: _Format | None = None
    transcription: _Transcription | None = None
    turn_detection: _TurnDetection | None = None
    noise_reduction: _NoiseReduction | None = None


class _AudioConfig(_Strict):
    input: _Input | None = None


class _Session(_Strict):
    type: Literal["transcription", "realtime"] = "transcription"
    audio: _AudioConfig | None = None
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = Field(None, max_length=4)
    id: str | None = Field(None, max_length=200)
    object: str | None = Field(None, max_length=200)


class _LegacySession(_Strict):
    input_audio_format: Literal["pcm16", "g711_ulaw", "g711_alaw"] | None = None
    input_audio_transcription: _Transcription | None = None
    turn_detection: _TurnDetection | None = None
    input_audio_noise_reduction: _NoiseReduction | None = None
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = Field(None, max_length=4)
    modalities: list[str] | None = Field(None, max_length=4)


def _turn_detection(td: _ServerVAD | _SemanticVAD | None) -> TurnDetection | None:
    if td is None:
        return None
    if isinstance(td, _SemanticVAD):
        return TurnDetection(type="semantic_vad", eagerness=td.eagerness)
    return TurnDetection(float(td.threshold), float(td.prefix_padding_ms), float(td.silence_duration_ms))


def _apply_transcription(changes: dict[str, Any], t: _Transcription | None, given: bool) -> None:
    if not given:
        return
    if t is None:
        changes.update(language=None, prompt="")
        return
    if "model" in t.model_fields_set and t.model:
        changes["model"] = t.model
    if "language" in t.model_fields_set:
        changes["language"] = t.language or None
    if "prompt" in t.model_fields_set:
        changes["prompt"] = t.prompt or ""


def _settings_from(current: LiveSettings, session: _Session) -> LiveSettings:
    if session.type != "transcription":
        raise InvalidRequest(
            "this server runs transcription sessions only: send session.type 'transcription' "
            "(connect with ?intent=transcription)",
            param="session.type",
            code="unsupported_session_type",
        )
    changes: dict[str, Any] = {}
    inp = session.audio.input if session.audio is not None else None
    if inp is not None:
        given = inp.model_fields_set
        if inp.format is not None:
            changes["format"] = inp.format.type
        _apply_transcription(changes, inp.transcription, "transcription" in given)
        if "turn_detection" in given:
            changes["turn_detection"] = _turn_detection(inp.turn_detection)
        if "noise_reduction" in given:
            changes["noise_reduction"] = inp.noise_reduction.type if inp.noise_reduction else None
    return _replace(current, changes)


def _settings_from_legacy(current: LiveSettings, session: _LegacySession) -> LiveSettings:
    changes: dict[str, Any] = {}
    given = session.model_fields_set
    if session.input_audio_format is not None:
        changes["format"] = LEGACY_FORMATS[session.input_audio_format]
    _apply_transcription(changes, session.input_audio_transcription, "input_audio_transcription" in given)
    if "turn_detection" in given:
        changes["turn_detection"] = _turn_detection(session.turn_detection)
    if "input_audio_noise_reduction" in given:
        nr = session.input_audio_noise_reduction
        changes["noise_reduction"] = nr.type if nr else None
    return _replace(current, changes)


def _replace(current: LiveSettings, changes: dict[str, Any]) -> LiveSettings:
    values = {**current.__dict__, **changes}
    return LiveSettings(**values)


# -- rendering -----------------------------------------------------------------------------
def _turn_json(td: TurnDetection | None) -> dict[str, Any] | None:
    if td is None:
        return None
    if td.semantic:
        return {"type": "semantic_vad", "eagerness": td.eagerness}
    return {
        "type": "server_vad",
        "threshold": td.threshold,
        "prefix_padding_ms": round(td.prefix_padding_ms),
        "silence_duration_ms": round(td.silence_duration_ms),
    }


def _transcription_json(s: LiveSettings) -> dict[str, Any]:
    return {"model": s.model, "language": s.language, "prompt": s.prompt}


def session_json(session_id: str, s: LiveSettings) -> dict[str, Any]:
    fmt: dict[str, Any] = {"type": s.format}
    if s.format == "audio/pcm":
        fmt["rate"] = 24000
    return {
        "type": "transcription",
        "id": session_id,
        "object": "realtime.transcription_session",
        "audio": {
            "input": {
                "format": fmt,
                "transcription": _transcription_json(s),
                "turn_detection": _turn_json(s.turn_detection),
                "noise_reduction": {"type": s.noise_reduction} if s.noise_reduction else None,
            }
        },
        "include": [],
    }


def legacy_session_json(session_id: str, s: LiveSettings) -> dict[str, Any]:
    return {
        "id": session_id,
        "object": "realtime.transcription_session",
        "input_audio_format": _LEGACY_BACK[s.format],
        "input_audio_transcription": _transcription_json(s),
        "turn_detection": _turn_json(s.turn_detection),
        "input_audio_noise_reduction": {"type": s.noise_reduction} if s.noise_reduction else None,
        "include": [],
    }


def _event_json(event: LiveEvent) -> dict[str, Any]:
    match event:
        case SpeechStarted(item_id, start):
            return {"type": "input_audio_buffer.speech_started", "audio_start_ms": start, "item_id": item_id}
        case SpeechStopped(item_id, end):
            return {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": end, "item_id": item_id}
        case Committed(item_id, previous):
            return {"type": "input_audio_buffer.committed", "previous_item_id": previous, "item_id": item_id}
        case Cleared():
            return {"type": "input_audio_buffer.cleared"}
        case TranscriptDelta(item_id, delta):
            return {
                "type": "conversation.item.input_audio_transcription.delta",
                "item_id": item_id,
                "content_index": 0,
                "delta": delta,
            }
        case TranscriptCompleted(item_id, transcript, seconds):
            return {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": item_id,
                "content_index": 0,
                "transcript": transcript,
                "usage": {"type": "duration", "seconds": seconds},
            }
        case TranscriptFailed(item_id, error):
            return {
                "type": "conversation.item.input_audio_transcription.failed",
                "item_id": item_id,
                "content_index": 0,
                "error": error.body()["error"],
            }
        case SessionError(error, ref):
            return _error_json(error, ref)
    raise AssertionError(f"unknown live event {event!r}")


def _error_json(error: VoxError, event_id: str | None) -> dict[str, Any]:
    body = error_event(error)
    body["error"] = {**body["error"], "event_id": event_id}
    return body


# -- the connection ------------------------------------------------------------------------
class _Connection:
    def __init__(self, state: Service, ws: WebSocket):
        self.state = state
        self.config = state.config.realtime
        self.id = f"sess_{uuid.uuid4().hex[:20]}"
        self.ended = "the client left"
        self.turns = 0
        self.wire = Wire(
            ws,
            state.config.ws.send_timeout_s,
            self.config.max_message_bytes,
            self.config.messages_per_s,
            self.config.message_burst,
            f"more than {self.config.messages_per_s:g} messages a second; send audio in "
            "larger appends (20-100 ms each)",
        )
        self._outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(OUTBOX)
        self._overflow = False
        self._sender: asyncio.Task[None] | None = None

    def summary(self) -> str:
        return f"{self.turns} turns"

    # -- sending ---------------------------------------------------------------------------
    def emit(self, event: LiveEvent) -> None:
        if isinstance(event, Committed):
            self.turns += 1
        self.post(_event_json(event))

    def post(self, event: dict[str, Any]) -> None:
        """Queue a server event; a client that lets `OUTBOX` of them pile up is gone."""
        if self._overflow:
            return
        event = {"event_id": f"event_{uuid.uuid4().hex[:20]}", **event}
        try:
            self._outbox.put_nowait(event)
        except asyncio.QueueFull:
            self._overflow = True

    async def _send_all(self) -> None:
        """The sender: events in order, until None."""
        while (event := await self._outbox.get()) is not None:
            await self.wire.send_event(event)

    async def _flush(self) -> None:
        """Send what is queued, then stop the sender."""
        sender = self._sender
        if sender is None:
            return
        if not sender.done():
            with contextlib.suppress(asyncio.QueueFull):
                self._outbox.put_nowait(None)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(sender), self.state.config.ws.send_timeout_s)
        if not sender.done():
            sender.cancel()
        with contextlib.suppress(BaseException):
            await sender

    # -- the session -----------------------------------------------------------------------
    async def run(self) -> None:
        self._sender = asyncio.create_task(self._send_all())
        try:
            async with self.state.live_session(self.emit) as session:
                self.post({"type": "session.created", "session": session_json(self.id, session.settings)})
                await self._read_all(session)
        except Overloaded as exc:
            raise SessionEnd(1013, exc.message, "too_many_sessions") from None
        except NotFound as exc:
            if exc.code != "asr_disabled":
                raise
            raise SessionEnd(1008, exc.message, "asr_disabled") from None

    async def end(self, end: SessionEnd) -> None:
        if end.code is not None:
            self.post(_error_json(end_error(end.message, end.code), None))
        await self._flush()
        with contextlib.suppress(ClientGone):
            await self.wire.close(end.close_code, end.reason)

    async def stop(self) -> None:
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()
        self.wire.stop()

    async def _read_all(self, session: Live) -> None:
        assert self._sender is not None
        idle = self.config.idle_timeout_s
        loop = self.wire.loop
        while True:
            receiving = self.wire.receiving()
            quiet_since = loop.time()
            while not receiving.done() and not self._sender.done() and not session.lost.done():
                waiting: set[asyncio.Future[Any]] = {receiving, self._sender, session.lost}
                left = quiet_since + idle - loop.time()
                await asyncio.wait(waiting, timeout=max(left, 0.05), return_when=asyncio.FIRST_COMPLETED)
                if session.busy:
                    quiet_since = loop.time()
                elif not receiving.done() and loop.time() - quiet_since >= idle:
                    raise idle_end(idle, "no turn being transcribed; the session is closed")
            if self._sender.done():
                self._sender.result()  # raises ClientGone
                raise ClientGone("the sender stopped")
            if session.lost.done():
                raise session.lost.result()
            await self._handle(session, self.wire.take())
            if self._overflow:
                raise ClientGone(f"the client let {OUTBOX} events pile up unread")

    async def _handle(self, session: Live, message: Message) -> None:
        text = message.get("text")
        if text is None:
            self._error(InvalidRequest("send JSON events as text messages, not binary", code="invalid_event"))
            return
        try:
            event = parse_event(text)
        except InvalidRequest as exc:
            self._error(exc)
            return
        if not isinstance(event, dict):
            self._error(InvalidRequest("an event must be a JSON object", code="invalid_event"))
            return
        raw_id = event.get("event_id")
        event_id = raw_id[:200] if isinstance(raw_id, str) else None
        try:
            await self._dispatch(session, event, event_id)
        except ReplicaLost:
            raise
        except VoxError as exc:
            self._error(exc, event_id)
        except ValidationError as exc:
            self._error(_invalid(exc, event.get("type")), event_id)

    def _error(self, error: VoxError, event_id: str | None = None) -> None:
        self.post(_error_json(error, event_id))

    async def _dispatch(self, session: Live, event: dict[str, Any], event_id: str | None) -> None:
        kind = event.get("type")
        if kind == "input_audio_buffer.append":
            audio = event.get("audio")
            if not isinstance(audio, str):
                raise InvalidRequest("audio must be a base64 string", param="audio", code="invalid_audio")
            try:
                data = base64.b64decode(audio, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidRequest("audio is not valid base64", param="audio", code="invalid_audio") from None
            await session.append(data, event_id)
        elif kind == "input_audio_buffer.commit":
            await session.commit(event_id)
        elif kind == "input_audio_buffer.clear":
            await session.clear(event_id)
        elif kind == "session.update":
            body = _SessionUpdate.model_validate(event)
            settings = _settings_from(session.settings, body.session)
            await session.configure(settings)
            self.post({"type": "session.updated", "session": session_json(self.id, settings)})
        elif kind == "transcription_session.update":
            legacy = _LegacyUpdate.model_validate(event)
            settings = _settings_from_legacy(session.settings, legacy.session)
            await session.configure(settings)
            self.post({"type": "transcription_session.updated", "session": legacy_session_json(self.id, settings)})
        elif isinstance(kind, str):
            raise InvalidRequest(
                f"event type {kind[:80]!r} is not supported: this server runs transcription "
                "sessions (session.update, input_audio_buffer.append, .commit, .clear)",
                param="type",
                code="unsupported_event",
            )
        else:
            raise InvalidRequest("an event needs a string 'type'", param="type", code="invalid_event")


class _SessionUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["session.update"]
    event_id: str | None = Field(None, max_length=200)
    session: _Session


class _LegacyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["transcription_session.update"]
    event_id: str | None = Field(None, max_length=200)
    session: _LegacySession


def _invalid(exc: ValidationError, kind: object) -> InvalidRequest:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"] if not str(p).startswith("function-after"))
    prefix = f"{kind}: " if isinstance(kind, str) else ""
    return InvalidRequest(f"{prefix}{where}: {first['msg']}", param=where or None, code="invalid_value")


async def realtime(ws: WebSocket) -> None:
    await serve(ws, _Connection, log)
