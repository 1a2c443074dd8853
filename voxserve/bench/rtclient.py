"""A client of `WS /v1/realtime` transcription sessions, for the live benches.

`RealtimeClient.connect` opens a session (`session.created`, then a `session.update` for
server VAD and PCM at 24 kHz, answered by `session.updated`) and reads the server's events
into `Utterance` records as they arrive. The caller streams the audio itself (through an
`AudioPacer`, whose `send` is `append_audio`) and says with `expect` where in the stream
each utterance lies; the client then maps every VAD item to the utterance its speech falls
in, so that an utterance the server splits in two is still one utterance, and one it
never detects shows as such. Times are seconds from the caller's `origin` (perf_counter).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from voxserve.bench.metrics import percentile, summarize, word_errors

__all__ = [
    "LiveOptions",
    "RealtimeClient",
    "SessionFailed",
    "Utterance",
    "VadSettings",
    "auth_headers",
    "close_with_reader",
    "latency_summary",
    "nearest_span",
    "realtime_url",
    "ws_url",
]

_ERROR_CHARS = 300
_EVENT_LOG = 200
"""Event types kept per session, in order, for a report on a misbehaving server."""


def ws_url(base_url: str, path: str) -> str:
    root = base_url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    return root + path


def realtime_url(base_url: str) -> str:
    return ws_url(base_url, "/v1/realtime?intent=transcription")


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def latency_summary(values: list[float]) -> dict[str, float]:
    """`summarize` plus p90."""
    out = summarize(values)
    out["p90"] = percentile(values, 90)
    return out


@dataclass(frozen=True)
class VadSettings:
    """The `turn_detection` the bench asks for: server VAD's settings, or `semantic_vad`
    with its eagerness (the server's prefix padding is 300 ms then)."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    type: str = "server_vad"
    eagerness: str = "auto"

    def turn_detection(self) -> dict[str, Any]:
        if self.type == "semantic_vad":
            return {"type": "semantic_vad", "eagerness": self.eagerness}
        return {"type": "server_vad", "threshold": self.threshold,
                "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms}


def session_update(vad: VadSettings, model: str, language: str | None,
                   noise_reduction: str | None = None) -> dict[str, Any]:
    """The bench's `session.update`; `noise_reduction` is sent only when given (`none`
    sends null), so a server's default applies otherwise."""
    audio_input: dict[str, Any] = {
        "format": {"type": "audio/pcm", "rate": 24000},
        "transcription": {"model": model, "language": language},
        "turn_detection": vad.turn_detection(),
    }
    if noise_reduction is not None:
        audio_input["noise_reduction"] = None if noise_reduction == "none" else {"type": noise_reduction}
    return {"type": "session.update", "event_id": "bench_update", "session": {
        "type": "transcription", "audio": {"input": audio_input}}}


@dataclass(frozen=True)
class LiveOptions:
    """How the live benches talk to the server, the same at every level."""

    base_url: str
    api_key: str | None = None
    """Sent as `Authorization: Bearer KEY` on every request and WebSocket."""
    vad: VadSettings = field(default_factory=VadSettings)
    model: str = "whisper-1"
    language: str | None = None
    frame_s: float = 0.02
    """Audio per `input_audio_buffer.append` message."""
    timeout_s: float = 30.0
    """How long an utterance may take from its end of speech to `completed`."""
    noise_reduction: str | None = None
    """`near_field`, `far_field` or `none` (null) for every session; None leaves it to the
    server's default."""
    seed: int = 0
    progress: bool = True
    probe_health: bool = True
    health_interval_s: float = 0.05


class SessionFailed(Exception):
    """The session could not be opened, or the server ended it."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code
        """The server's error code when it said one (`too_many_sessions`...)."""

    @property
    def failure(self) -> str:
        """The records' short reason: `session`, or `session_<code>`."""
        return f"session_{self.code}" if self.code else "session"


@dataclass
class Utterance:
    """One clip spoken into a session, and what the server made of it.

    `*_ms` are on the session's audio clock (from its first sample, as the server's
    `audio_start_ms` / `audio_end_ms`); `*_at_s` are wall times from the level's start.
    """

    session: int
    turn: int
    clip: str
    reference: str | None
    audio_s: float
    start_ms: float = math.nan
    """Where the clip starts in the session's stream."""
    speech_end_ms: float = math.nan
    """Where its last sample above -45 dBFS is."""
    onset_at_s: float | None = None
    """When the frame holding its first sample above -45 dBFS was sent."""
    speech_started_at_s: float | None = None
    """Arrival of its first item's `speech_started`."""
    speech_started_latency_s: float | None = None
    end_of_speech_at_s: float | None = None
    """When the frame holding that sample was sent."""
    items: list[str] = field(default_factory=list)
    """The server's VAD items mapped to this clip, in order (more than one: it split it)."""
    speech_started_ms: list[int] = field(default_factory=list)
    speech_stopped_ms: list[int] = field(default_factory=list)
    speech_stopped_at_s: float | None = None
    """Arrival of the last item's `speech_stopped`."""
    committed: int = 0
    deltas: int = 0
    first_delta_at_s: float | None = None
    completed_at_s: float | None = None
    """Arrival of the last item's `completed`."""
    item_transcripts: dict[str, str] = field(default_factory=dict)
    transcript: str | None = None
    """The items' final transcripts joined (set by `finish`)."""
    usage_s: float = 0.0
    failure: str | None = None
    """Short reason: `not_detected`, `timeout`, `transcription_failed`, or `session` /
    `session_<code>` (the code when the server refused the session)."""
    error: str | None = None
    completed_latency_s: float | None = None
    speech_stopped_latency_s: float | None = None
    vad_end_offset_ms: float | None = None
    """The server's end of speech minus the bench's, on the audio clock."""
    word_errors: int | None = None
    reference_words: int | None = None

    def finished(self) -> bool:
        """Every item it has is completed or failed, and it has at least one."""
        return bool(self.items) and all(i in self.item_transcripts for i in self.items)

    def fail(self, failure: str, error: str) -> None:
        if self.failure is None:
            self.failure, self.error = failure, error[:_ERROR_CHARS]

    def finish(self) -> None:
        """Fill the transcript and latencies, and the failure when nothing completed."""
        self.transcript = " ".join(self.item_transcripts[i].strip() for i in self.items
                                   if self.item_transcripts.get(i, "").strip())
        eos = self.end_of_speech_at_s
        if self.onset_at_s is not None and self.speech_started_at_s is not None:
            self.speech_started_latency_s = self.speech_started_at_s - self.onset_at_s
        if eos is not None:
            if self.completed_at_s is not None:
                self.completed_latency_s = self.completed_at_s - eos
            if self.speech_stopped_at_s is not None:
                self.speech_stopped_latency_s = self.speech_stopped_at_s - eos
        if self.reference is not None:
            # An utterance without a transcript counts as all deletions.
            counts = word_errors(self.reference, self.transcript)
            self.word_errors, self.reference_words = counts.errors, counts.reference_words
        if self.speech_stopped_ms:
            self.vad_end_offset_ms = self.speech_stopped_ms[-1] - self.speech_end_ms
        if self.failure is None and not self.finished():
            if not self.items:
                self.fail("not_detected", "no speech_started for this clip: the server's VAD "
                          "did not detect it")
            else:
                self.fail("timeout", f"items {self.items} never completed")


def nearest_span(at_ms: float, spans: list[tuple[float, float]]) -> int | None:
    """Index of the span [start, end] nearest to `at_ms` (0 inside it); None if none."""
    best, best_distance = None, math.inf
    for i, (start, end) in enumerate(spans):
        distance = max(start - at_ms, at_ms - end, 0.0)
        if distance < best_distance:
            best, best_distance = i, distance
    return best


class RealtimeClient:
    """One open transcription session: its events, read into the expected utterances."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, origin: float, vad: VadSettings,
                 session: dict[str, Any], timeout_s: float = 30.0):
        self.ws = ws
        self.origin = origin
        self.vad = vad
        self.timeout_s = timeout_s
        self.session = session
        """The `session` object of `session.updated`."""
        self.utterances: list[Utterance] = []
        self.events: list[str] = []
        """The first event types received, in order."""
        self.error_events: list[dict[str, Any]] = []
        self.unmatched: int = 0
        """Events for items this client never saw start (or that matched no utterance)."""
        self.close_code: int | None = None
        self.ended: str | None = None
        """Why the session ended before the client closed it."""
        self.on_speech_started: Callable[[Utterance], None] | None = None
        """Told of each `speech_started` the moment it arrives, with the utterance it starts."""
        self._items: dict[str, Utterance] = {}
        self._done: dict[int, asyncio.Event] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closing = False

    @classmethod
    async def connect(cls, http: aiohttp.ClientSession, options: LiveOptions,
                      origin: float) -> RealtimeClient:
        """Open and configure a session; raises SessionFailed with what the server said."""
        url = realtime_url(options.base_url)
        vad, timeout_s = options.vad, options.timeout_s
        try:
            ws = await http.ws_connect(url, headers=auth_headers(options.api_key), max_msg_size=0)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SessionFailed(f"connecting to {url}: {type(exc).__name__}: {exc}") from exc
        try:
            created = await _next_event(ws, timeout_s)
            if created.get("type") != "session.created":
                raise SessionFailed(f"expected session.created first, got {_brief(created)}",
                                    _error_code(created))
            update = session_update(vad, options.model, options.language, options.noise_reduction)
            await ws.send_str(json.dumps(update))
            while True:
                event = await _next_event(ws, timeout_s)
                if event.get("type") == "session.updated":
                    break
                if event.get("type") == "error":
                    raise SessionFailed(f"session.update refused: {_brief(event)}",
                                        _error_code(event))
            session = event.get("session")
            if not isinstance(session, dict):
                raise SessionFailed(f"session.updated carries no session object: {_brief(event)}")
            applied = session.get("audio", {}).get("input", {}).get("turn_detection")
            wanted = vad.turn_detection()
            if not isinstance(applied, dict) or any(applied.get(k) != v for k, v in wanted.items()):
                raise SessionFailed(f"session.updated shows turn_detection {applied}, "
                                    f"not the {wanted} the bench sent")
        except BaseException:
            await ws.close()
            raise
        client = cls(ws, origin, vad, session, timeout_s)
        client.events = ["session.created", "session.updated"]
        client._reader = asyncio.get_running_loop().create_task(client._read())
        return client

    async def append_audio(self, pcm: bytes) -> None:
        """Send one `input_audio_buffer.append` (an `AudioPacer`'s `send`)."""
        message = {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
        await self.ws.send_str(json.dumps(message))

    def expect(self, utterance: Utterance) -> asyncio.Event:
        """Register an utterance (with its `start_ms`, `speech_end_ms`); the event is set
        when it has finished (every item completed or failed) or the session ended."""
        self.utterances.append(utterance)
        done = self._done[id(utterance)] = asyncio.Event()
        if self.ended is not None:
            utterance.fail("session", self.ended)
            done.set()
        return done

    async def close(self) -> None:
        self._closing = True
        await close_with_reader(self.ws, self._reader)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                now = time.perf_counter() - self.origin
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    event = json.loads(message.data)
                except ValueError:
                    self.events.append("<not JSON>")
                    continue
                if isinstance(event, dict):
                    self._dispatch(event, now)
        except (aiohttp.ClientError, ConnectionError) as exc:
            self.ended = f"reading the session failed: {type(exc).__name__}: {exc}"
        self.close_code = self.ws.close_code
        if self._closing and self.ended is None:
            return  # the bench closed it: what never came is the utterances' own failure
        if self.ended is None:
            last = self.error_events[-1] if self.error_events else None
            self.ended = (f"the server closed the session (code {self.close_code})"
                          + (f" after error {last.get('code')}: {last.get('message')}" if last else ""))
        for utterance in self.utterances:
            if not utterance.finished():
                utterance.fail("session", self.ended)
            self._done[id(utterance)].set()

    def _dispatch(self, event: dict[str, Any], now: float) -> None:
        kind = str(event.get("type"))
        if len(self.events) < _EVENT_LOG:
            self.events.append(kind)
        if kind == "error":
            error = event.get("error")
            if not isinstance(error, dict):
                error = {}
            self.error_events.append({"at_s": now, "code": error.get("code"),
                                      "message": str(error.get("message"))[:_ERROR_CHARS]})
            return
        item = event.get("item_id")
        if not isinstance(item, str):
            return
        if kind == "input_audio_buffer.speech_started":
            self._start_item(item, event, now)
            return
        utterance = self._items.get(item)
        if utterance is None:
            self.unmatched += 1
            return
        if kind == "input_audio_buffer.speech_stopped":
            utterance.speech_stopped_ms.append(int(event.get("audio_end_ms", -1)))
            utterance.speech_stopped_at_s = now
        elif kind == "input_audio_buffer.committed":
            utterance.committed += 1
        elif kind == "conversation.item.input_audio_transcription.delta":
            utterance.deltas += 1
            if utterance.first_delta_at_s is None:
                utterance.first_delta_at_s = now
        elif kind == "conversation.item.input_audio_transcription.completed":
            utterance.item_transcripts[item] = str(event.get("transcript", ""))
            utterance.completed_at_s = now
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("seconds"), int | float):
                utterance.usage_s += float(usage["seconds"])
        elif kind == "conversation.item.input_audio_transcription.failed":
            utterance.item_transcripts[item] = ""
            utterance.completed_at_s = now
            utterance.fail("transcription_failed", f"item {item} failed: {event.get('error')}")
        if utterance.finished():
            self._done[id(utterance)].set()

    def _start_item(self, item: str, event: dict[str, Any], now: float) -> None:
        start_ms = int(event.get("audio_start_ms", -1))
        # audio_start_ms includes the prefix padding; the speech itself starts after it.
        onset = start_ms + self.vad.prefix_padding_ms
        index = nearest_span(onset, [(u.start_ms, u.speech_end_ms) for u in self.utterances])
        if index is None:
            self.unmatched += 1
            return
        utterance = self.utterances[index]
        self._items[item] = utterance
        utterance.items.append(item)
        utterance.speech_started_ms.append(start_ms)
        if utterance.speech_started_at_s is None:
            utterance.speech_started_at_s = now
        self._done[id(utterance)].clear()
        if self.on_speech_started is not None:
            self.on_speech_started(utterance)


async def _next_event(ws: aiohttp.ClientWebSocketResponse, timeout_s: float) -> dict[str, Any]:
    try:
        message = await ws.receive(timeout_s)
    except TimeoutError as exc:
        raise SessionFailed(f"no event from the server within {timeout_s:g} s") from exc
    if message.type != aiohttp.WSMsgType.TEXT:
        raise SessionFailed(f"the server sent {message.type.name} (close code {ws.close_code}) "
                            f"instead of an event")
    try:
        event = json.loads(message.data)
    except ValueError as exc:
        raise SessionFailed(f"the server sent text that is not JSON: {message.data[:200]!r}") from exc
    if not isinstance(event, dict):
        raise SessionFailed(f"the server sent {message.data[:200]!r}, not a JSON object")
    return event


def _error_code(event: dict[str, Any]) -> str | None:
    error = event.get("error")
    code = error.get("code") if event.get("type") == "error" and isinstance(error, dict) else None
    return str(code) if code else None


def _brief(event: dict[str, Any]) -> str:
    return json.dumps(event)[:_ERROR_CHARS]


async def close_with_reader(ws: aiohttp.ClientWebSocketResponse, reader: asyncio.Task[None] | None) -> None:
    """Close a WebSocket, then give its reader task 5 s to see the end (cancelled after)."""
    await ws.close()
    if reader is not None:
        try:
            await asyncio.wait_for(reader, 5.0)
        except (TimeoutError, asyncio.CancelledError):
            reader.cancel()
