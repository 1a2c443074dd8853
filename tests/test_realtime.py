"""`WS /v1/realtime`: OpenAI's Realtime API transcription sessions, through a real server
and real clients (websockets, and the official `openai` SDK's realtime client).

Audio is the server's own speech (Piper, 24 kHz PCM), streamed in 40 ms appends. Turn
detection counts samples, not wall time, so most tests stream faster than real time.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.asr_support import SHORT, sdk_live_turn, wav_bytes, wer
from tests.conftest import RunningServer, run_server, wait_for
from tests.test_ws_limits import served_meanwhile
from voxserve.config import RealtimeConfig, ServerConfig, TTSConfig

pytestmark = pytest.mark.timeout(120)

CHUNK = 960
"""Samples per append: 40 ms at 24 kHz."""


def _ws_url(srv: RunningServer, query: str = "?intent=transcription") -> str:
    return srv.base_url.replace("http://", "ws://") + "/v1/realtime" + query


class Session:
    """A realtime client over a websockets connection, keeping every event it reads."""

    def __init__(self, ws: ClientConnection):
        self.ws = ws
        self.events: list[dict[str, Any]] = []

    def send(self, event: dict[str, Any]) -> None:
        self.ws.send(json.dumps(event))

    def recv(self, timeout: float = 20) -> dict[str, Any]:
        event = json.loads(self.ws.recv(timeout))
        assert isinstance(event, dict)
        self.events.append(event)
        return event

    def until(self, kind: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            event = self.recv(max(0.01, deadline - time.monotonic()))
            if event["type"] == kind:
                return event

    def append(self, pcm: np.ndarray, pace_s: float = 0.0, size: int = CHUNK) -> None:
        for i in range(0, len(pcm), size):
            chunk = pcm[i : i + size].astype("<i2").tobytes()
            self.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
            if pace_s:
                time.sleep(pace_s)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


@pytest.fixture()
def rt(server: RunningServer) -> Iterator[Session]:
    with connect(_ws_url(server), close_timeout=1) as ws:
        session = Session(ws)
        created = session.recv()
        assert created["type"] == "session.created"
        yield session


@pytest.fixture(scope="module")
def speech(short_speech: list[np.ndarray]) -> list[np.ndarray]:
    """`SHORT`, spoken by the session's server (tests/conftest.py)."""
    return short_speech


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * 24000), dtype=np.int16)


def _vad(silence_ms: int = 500) -> dict[str, Any]:
    return {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": silence_ms}


def test_session_created_and_updated_in_both_shapes(rt: Session) -> None:
    created = rt.events[0]
    session = created["session"]
    assert session["type"] == "transcription"
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert created["event_id"].startswith("event_")

    rt.send({
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcmu"},
                "transcription": {"model": "whisper-1", "language": "en", "prompt": "Stella"},
                "turn_detection": _vad(700),
                "noise_reduction": {"type": "near_field"},
            }},
        },
    })
    updated = rt.until("session.updated")["session"]["audio"]["input"]
    assert updated["format"] == {"type": "audio/pcmu"}
    assert updated["transcription"] == {"model": "whisper-1", "language": "en", "prompt": "Stella"}
    assert updated["turn_detection"]["silence_duration_ms"] == 700
    assert updated["noise_reduction"] == {"type": "near_field"}

    rt.send({
        "type": "transcription_session.update",
        "session": {"input_audio_format": "pcm16", "turn_detection": None},
    })
    legacy = rt.until("transcription_session.updated")["session"]
    assert legacy["input_audio_format"] == "pcm16" and legacy["turn_detection"] is None
    assert legacy["input_audio_transcription"]["language"] == "en"  # kept from before


def test_server_vad_turns_in_order(rt: Session, speech: list[np.ndarray]) -> None:
    rt.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "turn_detection": _vad(500)}}}})
    rt.until("session.updated")
    audio = np.concatenate([_silence(0.5), speech[0], _silence(1.2), speech[1], _silence(1.2)])
    rt.append(audio)
    first = rt.until("conversation.item.input_audio_transcription.completed")
    second = rt.until("conversation.item.input_audio_transcription.completed")

    started, stopped, committed = (rt.of(f"input_audio_buffer.{k}") for k in ("speech_started", "speech_stopped", "committed"))
    assert len(started) == len(stopped) == len(committed) == 2
    assert [c["item_id"] for c in committed] == [first["item_id"], second["item_id"]]
    assert committed[0]["previous_item_id"] is None
    assert committed[1]["previous_item_id"] == committed[0]["item_id"]
    # The first speech starts after the 0.5 s of silence, less the 300 ms prefix padding.
    assert 100 <= started[0]["audio_start_ms"] <= 500
    end_of_speech_ms = 500 + len(speech[0]) * 1000 // 24000
    assert abs(stopped[0]["audio_end_ms"] - end_of_speech_ms) < 300
    for event, text in zip((first, second), SHORT[:2], strict=True):
        assert wer(text, event["transcript"]) <= 0.2, event["transcript"]
        assert event["content_index"] == 0
        assert event["usage"]["type"] == "duration" and 1.0 < event["usage"]["seconds"] < 8.0
    kinds = [e["type"] for e in rt.events]
    assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index("input_audio_buffer.committed")


PAUSED = "I need a flight from Boston to Denver on the morning of the twelfth."
PAUSE_AFTER = 6
"""Words before the pause: "I need a flight from Boston to | Denver ..."."""


def _paused_sentence(server: RunningServer, pause_s: float = 0.6) -> np.ndarray:
    """PAUSED spoken whole (its prosody runs on through the pause point), with `pause_s` of
    silence put in at the quietest 5 ms between word PAUSE_AFTER and the next."""
    body = {"model": "tts-1", "voice": "alloy", "input": PAUSED, "timestamps": True, "response_format": "pcm"}
    reply = httpx.post(server.base_url + "/v1/audio/speech", json=body, timeout=60).json()
    audio = np.frombuffer(base64.b64decode(reply["audio"]), dtype=np.int16)
    words = reply["timestamps"]
    lo = int((words[PAUSE_AFTER - 1]["end_time"] - 0.04) * 24000)
    hi = int((words[PAUSE_AFTER]["start_time"] + 0.04) * 24000)
    power = np.convolve(audio[lo:hi].astype(np.float64) ** 2, np.ones(120), mode="valid")
    cut = lo + int(np.argmin(power)) + 60
    return np.concatenate([audio[:cut], _silence(pause_s), audio[cut:]])


@pytest.mark.serial  # the model's answers come in wall time
def test_semantic_vad_waits_out_a_pause_mid_thought_and_ends_the_finished_one(
    rt: Session, server: RunningServer
) -> None:
    """Streamed at real time, as the end-of-turn model's answers come in wall time. With
    `low` eagerness, silence alone would end the turn only after 8 s: a turn that ends in
    the 2.5 s after the sentence was ended by the model, and the 600 ms pause mid-thought
    did not cut it."""
    rt.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "turn_detection": {"type": "semantic_vad", "eagerness": "low"}}}}})
    updated = rt.until("session.updated")["session"]["audio"]["input"]
    assert updated["turn_detection"] == {"type": "semantic_vad", "eagerness": "low"}
    audio = np.concatenate([_silence(0.3), _paused_sentence(server), _silence(2.5)])
    rt.append(audio, pace_s=CHUNK / 24000)
    done = rt.until("conversation.item.input_audio_transcription.completed", timeout=10)
    assert wer(PAUSED, done["transcript"]) <= 0.25, done["transcript"]
    assert len(rt.of("input_audio_buffer.committed")) == 1
    assert len(rt.of("input_audio_buffer.speech_started")) == 1
    stopped = rt.of("input_audio_buffer.speech_stopped")
    assert len(stopped) == 1 and stopped[0]["audio_end_ms"] < len(audio) * 1000 // 24000 - 1000


def test_manual_commit_and_clear(rt: Session, speech: list[np.ndarray]) -> None:
    rt.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}})
    rt.until("session.updated")
    rt.send({"type": "input_audio_buffer.commit", "event_id": "c1"})
    error = rt.until("error")["error"]
    assert error["code"] == "input_audio_buffer_commit_empty" and error["event_id"] == "c1"

    rt.append(speech[1][: 24000])
    rt.send({"type": "input_audio_buffer.clear"})
    rt.until("input_audio_buffer.cleared")
    rt.append(speech[0])
    rt.send({"type": "input_audio_buffer.commit"})
    committed = rt.until("input_audio_buffer.committed")
    done = rt.until("conversation.item.input_audio_transcription.completed")
    assert done["item_id"] == committed["item_id"]
    assert wer(SHORT[0], done["transcript"]) <= 0.2, done["transcript"]
    assert not rt.of("input_audio_buffer.speech_started")  # no VAD events without VAD


def _mulaw(pcm: np.ndarray) -> bytes:
    """G.711 mu-law encoding, from its definition (for the test's own input)."""
    x = np.clip(pcm.astype(np.int32), -32635, 32635)
    sign = np.where(x < 0, 0x80, 0)
    magnitude = np.abs(x) + 132
    exponent = np.floor(np.log2(magnitude)).astype(np.int32) - 7
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    encoded: np.ndarray = (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)
    return encoded.tobytes()


def test_pcmu_audio(rt: Session, speech: list[np.ndarray]) -> None:
    import soxr

    rt.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcmu"}, "turn_detection": None}}}})
    rt.until("session.updated")
    narrow = soxr.resample(speech[0].astype(np.float32), 24000, 8000).astype(np.int16)
    data = _mulaw(narrow)
    for i in range(0, len(data), 320):
        rt.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(data[i : i + 320]).decode()})
    rt.send({"type": "input_audio_buffer.commit"})
    done = rt.until("conversation.item.input_audio_transcription.completed")
    assert wer(SHORT[0], done["transcript"]) <= 0.25, done["transcript"]


@pytest.mark.parametrize(
    ("event", "code"),
    [
        ({"type": "response.create"}, "unsupported_event"),
        ({"type": "input_audio_buffer.append", "audio": "%%%not base64"}, "invalid_audio"),
        ({"type": "input_audio_buffer.append", "audio": 7}, "invalid_audio"),
        ({"type": "session.update", "session": {"type": "realtime"}}, "unsupported_session_type"),
        ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "semantic_vad", "eagerness": "eager"}}}}}, "invalid_value"),
        ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "semantic_vad", "silence_duration_ms": 200}}}}}, "invalid_value"),
        ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "server_vad", "threshold": 7}}}}}, "invalid_value"),
        ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000}}}}}, "invalid_value"),
        ({"type": "session.update", "session": {"type": "transcription", "bogus": 1}}, "invalid_value"),
        ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "transcription": {"model": "nope"}}}}}, "model_not_found"),
        ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "transcription": {"language": "xx"}}}}}, "unsupported_language"),
        ({"no": "type"}, "invalid_event"),
    ],
)
def test_bad_events_get_an_error_and_the_session_goes_on(rt: Session, event: dict[str, Any], code: str) -> None:
    rt.send({**event, "event_id": "evt_1"})
    error = rt.until("error")
    assert error["error"]["code"] == code, error
    assert error["error"]["event_id"] == "evt_1"
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"]
    rt.ws.send("not json")
    assert rt.until("error")["error"]["code"] == "invalid_json"
    rt.send({"type": "session.update", "session": {"type": "transcription"}})
    rt.until("session.updated")  # still open and served


def test_json_nested_past_the_parsers_depth_is_the_clients_error(
    rt: Session, caplog: pytest.LogCaptureFixture
) -> None:
    """100,000 nested arrays (200 kB, within the message limit) make `json.loads` give up
    with RecursionError: the client gets `invalid_json`, nothing is logged as a server
    fault, and the session goes on."""
    depth = 100_000
    with caplog.at_level("WARNING"):
        for _ in range(3):
            rt.ws.send("[" * depth + "]" * depth)
            error = rt.until("error")["error"]
            assert error["code"] == "invalid_json" and "nested too deeply" in error["message"], error
        rt.ws.send('{"n": ' + "9" * 5000 + "}")  # past Python's limit on an integer's digits
        assert rt.until("error")["error"]["code"] == "invalid_json"
        rt.send({"type": "session.update", "session": {"type": "transcription"}})
        rt.until("session.updated")
    assert not [r for r in caplog.records if r.name.startswith("voxserve")], caplog.text


def test_openai_sdk_realtime_client(server: RunningServer, speech: list[np.ndarray]) -> None:
    events = sdk_live_turn(server.base_url, speech[0], timeout_s=30)
    kinds = [e.type for e in events]
    assert kinds[0] == "session.created"
    assert "session.updated" in kinds and "input_audio_buffer.speech_started" in kinds
    assert "input_audio_buffer.committed" in kinds
    completed = events[-1]
    assert wer(SHORT[0], completed.transcript) <= 0.2, completed.transcript
    assert completed.usage.type == "duration"


@pytest.mark.serial  # the live turn is timed
def test_live_turns_go_before_file_transcriptions(server: RunningServer, rt: Session, speech: list[np.ndarray]) -> None:
    """Two uploads keep every worker busy; a live turn still completes promptly,
    and while the session is open file pieces hold at most all workers but one."""
    asr = server.asr
    # ~32 s of distinct sentences, cut into pieces. A file that repeats one sentence makes
    # Whisper's text repeat, which fails its compression check and retries the piece at
    # every temperature: seconds of work long after the live turn is done.
    long_file = wav_bytes(np.concatenate([part for one in [*speech, *speech[::-1]] for part in (one, _silence(0.4))]))
    stop = threading.Event()
    most_file_batches = 0

    def watch() -> None:
        nonlocal most_file_batches
        while not stop.is_set():
            snap = asr.snapshot()
            if snap["live_sessions"]:
                most_file_batches = max(most_file_batches, snap["file_batches"])
            time.sleep(0.002)

    def upload() -> None:
        r = httpx.post(server.base_url + "/v1/audio/transcriptions", files={"file": ("a.wav", long_file)},
                       data={"model": "whisper-1"}, timeout=120)
        assert r.status_code == 200, r.text

    threads = [threading.Thread(target=upload) for _ in range(2)] + [threading.Thread(target=watch)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: asr.snapshot()["queued"] > 0, timeout=30)
        rt.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}})
        rt.until("session.updated")
        rt.append(speech[0])
        rt.send({"type": "input_audio_buffer.commit"})
        rt.until("input_audio_buffer.committed")
        committed = time.monotonic()
        done = rt.until("conversation.item.input_audio_transcription.completed")
        waited = time.monotonic() - committed
        files_busy = asr.snapshot()["requests"] > 0
    finally:
        for t in threads[:2]:
            t.join(120)
        stop.set()
        threads[2].join(5)
    assert wer(SHORT[0], done["transcript"]) <= 0.2
    assert files_busy  # the uploads were still being transcribed when the live turn was done
    assert waited < 3.0, waited  # one 30 s piece decodes in about 1 s here; a queue of them takes many
    if asr.config.workers > 1:
        assert most_file_batches <= asr.config.workers - 1


# -- limits, each shaped as the attack ----------------------------------------------------
LIMITS = RealtimeConfig(
    max_sessions=2, max_message_bytes=16384, messages_per_s=50, message_burst=100, max_buffer_s=3.0,
    max_turn_s=3.0, idle_timeout_s=1.5,
)


@pytest.fixture(scope="module")
def limited() -> Iterator[RunningServer]:
    config = ServerConfig(tts=replace(TTSConfig(), noise_w=0.0, noise_scale=0.0), realtime=LIMITS, api_key="sekret")
    with run_server(config) as srv:
        yield srv


def _attack(srv: RunningServer) -> contextlib.AbstractContextManager[object]:
    """/health answers throughout, and a keyed speech request succeeds after."""
    return served_meanwhile(srv, headers=KEY)


KEY = {"Authorization": "Bearer sekret"}


@contextlib.contextmanager
def _open(srv: RunningServer) -> Iterator[Session]:
    with connect(_ws_url(srv), close_timeout=1, additional_headers=KEY) as ws:
        session = Session(ws)
        assert session.recv()["type"] == "session.created"
        yield session


def _closed_with(session: Session, code: int, error: str | None) -> None:
    with pytest.raises(ConnectionClosed) as info:
        while True:
            session.recv(10)
    assert info.value.rcvd is not None and info.value.rcvd.code == code, info.value
    if error is not None:
        assert session.of("error")[-1]["error"]["code"] == error


def _live(srv: RunningServer) -> int:
    return srv.asr_side.live.open_sessions


def test_auth_header_or_subprotocol(limited: RunningServer) -> None:
    with pytest.raises(InvalidStatus) as info:
        connect(_ws_url(limited))
    assert info.value.response.status_code == 403
    with connect(_ws_url(limited), subprotocols=["realtime", "openai-insecure-api-key.sekret"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "realtime"
        assert json.loads(ws.recv(10))["type"] == "session.created"
    with pytest.raises(InvalidStatus):
        connect(_ws_url(limited), subprotocols=["realtime", "openai-insecure-api-key.wrong"])  # type: ignore[list-item]


def test_session_cap(limited: RunningServer) -> None:
    with contextlib.ExitStack() as held:
        held.enter_context(_open(limited))
        held.enter_context(_open(limited))
        ws = held.enter_context(connect(_ws_url(limited), additional_headers={"Authorization": "Bearer sekret"}))
        _closed_with(Session(ws), 1013, "too_many_sessions")
    wait_for(lambda: _live(limited) == 0, timeout=5)


def test_oversized_message(limited: RunningServer) -> None:
    with _attack(limited), _open(limited) as s:
        s.send({"type": "input_audio_buffer.append", "audio": "A" * 20000})
        _closed_with(s, 1009, "message_too_large")
    wait_for(lambda: _live(limited) == 0, timeout=5)


def test_message_flood(limited: RunningServer) -> None:
    with _attack(limited), _open(limited) as s:
        with contextlib.suppress(ConnectionClosed):
            for _ in range(400):
                s.send({"type": "input_audio_buffer.append", "audio": ""})
        _closed_with(s, 1008, "rate_limited")
    wait_for(lambda: _live(limited) == 0, timeout=5)


def test_idle_session_is_closed_normally(limited: RunningServer) -> None:
    with _attack(limited), _open(limited) as s:
        _closed_with(s, 1000, None)
        assert s.of("error") == []  # a normal close: clients reconnect, an error event would be fatal to some
    wait_for(lambda: _live(limited) == 0, timeout=5)


def test_a_long_uncommitted_buffer_keeps_the_newest_speech(limited: RunningServer, speech: list[np.ndarray]) -> None:
    """A client that appends everything and commits when its own VAD hears the end of
    speech: the silence before the speech is dropped to stay within the 3 s buffer, and
    not decoded; the whole turn, its start included, is transcribed."""
    assert len(speech[0]) < 2.8 * 24000
    with _attack(limited), _open(limited) as s:
        s.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}})
        s.until("session.updated")
        s.append(np.concatenate([_silence(6.0), speech[0], _silence(0.1)]), size=6000)
        s.send({"type": "input_audio_buffer.commit"})
        done = s.until("conversation.item.input_audio_transcription.completed")
        assert wer(SHORT[0], done["transcript"]) <= 0.25, done["transcript"]
        # Only the speech, its prefix padding and what follows it were decoded.
        assert done["usage"]["seconds"] <= len(speech[0]) / 24000 + 0.3 + 0.1 + 0.05
        assert s.of("error") == []
        # Speech past the limit: the oldest goes, the newest turn is whole.
        s.append(np.concatenate([speech[1][: 24000 * 2], _silence(2.0), speech[0], _silence(0.1)]), size=6000)
        s.send({"type": "input_audio_buffer.commit"})
        done = s.until("conversation.item.input_audio_transcription.completed")
        assert wer(SHORT[0], done["transcript"]) <= 0.25, done["transcript"]
        assert done["usage"]["seconds"] <= LIMITS.max_buffer_s + 0.05
        assert s.of("error") == []
        s.ws.close()


def test_long_speech_is_split_at_max_turn(limited: RunningServer, speech: list[np.ndarray]) -> None:
    with _open(limited) as s:
        s.append(np.concatenate([speech[1], speech[0], _silence(1.0)]), size=6000)  # ~6.4 s of speech, max_turn 3 s
        for _ in range(3):
            s.until("conversation.item.input_audio_transcription.completed")
        assert len(s.of("input_audio_buffer.committed")) >= 3
        s.ws.close()
    wait_for(lambda: _live(limited) == 0, timeout=5)


def test_vanished_client_frees_everything(limited: RunningServer, speech: list[np.ndarray]) -> None:
    with _attack(limited), _open(limited) as s:
        s.append(np.concatenate([speech[0], _silence(0.2)]), size=6000)
        s.ws.socket.close()  # no close frame: the TCP connection just goes
    wait_for(lambda: _live(limited) == 0, timeout=10)
    asr = limited.asr
    wait_for(lambda: asr.snapshot()["live_sessions"] == 0 and asr.snapshot()["requests"] == 0, timeout=10)
    assert limited.state.ws_open == 0
    metrics = httpx.get(limited.base_url + "/metrics", timeout=10).text
    assert "voxserve_realtime_sessions 0.0" in metrics
