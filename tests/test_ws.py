"""`WS /v1/audio/speech/stream` through a real server and a real WebSocket client: text in
fragments of any size, audio per clause, errors that leave the session usable, auth, and
a disconnect that drops the work."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.asr_support import SHORT, wav_bytes, wer
from tests.conftest import API_KEY, RunningServer, wait_for
from voxserve.api.ws import HOLD_SLOT_S
from voxserve.text.incremental import SplitMode, TextSegmenter

pytestmark = pytest.mark.timeout(120)


def _url(srv: RunningServer) -> str:
    return srv.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def _events_until(
    ws: ClientConnection, last: str, current: int = -1, timeout: float = 60
) -> tuple[list[dict[str, Any]], dict[int, bytes]]:
    """Events and per-segment audio until an event of type `last` (inclusive); `current` is
    the segment whose audio is arriving, when the caller read its audio.start itself."""
    events: list[dict[str, Any]] = []
    audio: dict[int, bytearray] = {}
    deadline = time.monotonic() + timeout
    while True:
        message = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        if isinstance(message, bytes):
            assert current >= 0, "audio before audio.start"
            audio.setdefault(current, bytearray()).extend(message)
            continue
        event = json.loads(message)
        events.append(event)
        if event["type"] == "audio.start":
            current = event["segment"]
        elif event["type"] == "audio.done":
            assert event["segment"] == current
        if event["type"] == last:
            return events, {k: bytes(v) for k, v in audio.items()}


def _send(ws: ClientConnection, **message: Any) -> None:
    ws.send(json.dumps(message))


def test_fragments_split_mid_word_are_spoken_by_clause(server: RunningServer, client: httpx.Client) -> None:
    text = "Well, the quick brown fox jumps over the lazy dog, and then it runs away. The museum opens early."
    with connect(_url(server)) as ws:
        _send(ws, type="session.config", voice="alloy", response_format="pcm")
        for i in range(0, len(text), 3):  # three characters at a time, cutting words
            _send(ws, type="input.text", text=text[i : i + 3])
        _send(ws, type="input.done")
        events, audio = _events_until(ws, "input.flushed")
        starts = [e for e in events if e["type"] == "audio.start"]
        assert [e["segment"] for e in starts] == list(range(len(starts)))
        assert len(starts) >= 3  # clauses, not one block
        assert " ".join(e["text"] for e in starts) == text
        assert all(e["sample_rate"] == 24000 for e in starts)
        assert [e["segment"] for e in events if e["type"] == "audio.done"] == list(range(len(starts)))
        assert not [e for e in events if e["type"] == "error"]
        pcm = np.frombuffer(b"".join(audio[i] for i in sorted(audio)), dtype="<i2")
        assert len(pcm) / 24000 > 4.0

        # The session stays open after input.done; close it cleanly.
        _send(ws, type="session.close")
        events, _ = _events_until(ws, "session.done")
    # What was said is what was sent.
    r = client.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", wav_bytes(pcm))}, data={"model": "whisper-1"}
    )
    assert wer(text, r.json()["text"]) < 0.15


def test_first_clause_starts_before_the_rest_of_the_text_arrives(server: RunningServer) -> None:
    with connect(_url(server)) as ws:
        _send(ws, type="input.text", text="Sure, I can help with that,")
        _send(ws, type="input.text", text=" and")
        started = time.perf_counter()
        first = ws.recv(timeout=10)
        event = json.loads(first)
        assert event["type"] == "audio.start" and event["text"] == "Sure, I can help with that,"
        assert isinstance(ws.recv(timeout=10), bytes)
        assert time.perf_counter() - started < 5
        _send(ws, type="input.text", text=" more text follows later.")
        _send(ws, type="session.close")
        events, _ = _events_until(ws, "session.done", current=0)
    assert [e["text"] for e in events if e["type"] == "audio.start"] == ["and more text follows later."]


def test_json_nested_past_the_parsers_depth_is_the_clients_error(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """30,000 nested arrays (60 kB, within the message limit) make `json.loads` give up
    with RecursionError: the client gets `invalid_json`, nothing is logged as a server
    fault, and the session still speaks."""
    depth = 30_000
    with caplog.at_level("WARNING"), connect(_url(server)) as ws:
        for _ in range(3):
            ws.send("[" * depth + "]" * depth)
            error = json.loads(ws.recv(timeout=10))
            assert error["code"] == "invalid_json" and "nested too deeply" in error["message"], error
        _send(ws, type="input.text", text="Still here.")
        _send(ws, type="session.close")
        events, _ = _events_until(ws, "session.done", current=0)
    assert [e["text"] for e in events if e["type"] == "audio.start"] == ["Still here."]
    assert not [r for r in caplog.records if r.name.startswith("voxserve")], caplog.text


def test_bad_messages_get_error_events_and_the_session_stays_usable(server: RunningServer) -> None:
    with connect(_url(server)) as ws:
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=10))["code"] == "invalid_json"
        _send(ws, type="input.dance")
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error" and error["code"] == "unknown_type" and "input.text" in error["message"]
        ws.send(b"\x00\x01binary")
        assert json.loads(ws.recv(timeout=10))["code"] == "binary_not_supported"
        ws.send("[1, 2]")
        assert json.loads(ws.recv(timeout=10))["code"] == "invalid_message"
        _send(ws, type="input.text", text=5)
        assert json.loads(ws.recv(timeout=10))["param"] == "text"
        _send(ws, type="session.config", voice="nobody")
        assert json.loads(ws.recv(timeout=10))["param"] == "voice"
        _send(ws, type="session.config", response_format="mp3")
        assert json.loads(ws.recv(timeout=10))["param"] == "response_format"
        _send(ws, type="session.config", speed=9)
        assert json.loads(ws.recv(timeout=10))["param"] == "speed"
        # Still usable: speak a sentence, in WAV this time.
        _send(ws, type="session.config", response_format="wav", sample_rate=16000, split="sentence")
        _send(ws, type="input.text", text=SHORT[0])
        _send(ws, type="session.close")
        events, audio = _events_until(ws, "session.done")
    assert not [e for e in events if e["type"] == "error"]
    assert [e["sample_rate"] for e in events if e["type"] == "audio.start"] == [16000]
    assert audio[0][:4] == b"RIFF" and len(audio[0]) > 16000


@pytest.mark.serial  # the work stops within 0.2 s
def test_disconnect_mid_stream_drops_the_work(server: RunningServer) -> None:
    engine = server.state.engine
    before = set(engine.stream_ids())
    long = " ".join(f"This is sentence {i} of a long answer that the agent is reading out." for i in range(12))
    with connect(_url(server)) as ws:
        _send(ws, type="session.config", split="sentence")
        _send(ws, type="input.text", text=long)
        assert json.loads(ws.recv(timeout=10))["type"] == "audio.start"
        assert isinstance(ws.recv(timeout=10), bytes)
        new = set(engine.stream_ids()) - before
        assert len(new) == 1
        (stream_id,) = new
        ws.close()
        assert wait_for(lambda: not engine.has_work(stream_id), timeout=2) < 0.2
    wait_for(lambda: not server.state.admission.active, timeout=2)
    assert set(engine.stream_ids()) - before - {stream_id} == set()  # later sentences never started


def test_a_reply_holds_one_stream_slot_until_it_goes_quiet(server: RunningServer) -> None:
    admission = server.state.admission
    with connect(_url(server)) as ws:
        for clause in ["First, ", "a clause arrives; ", "then another one, ", "and the reply ends."]:
            _send(ws, type="input.text", text=clause)
        _send(ws, type="input.done")
        seen: set[int] = set()
        while True:
            seen.add(admission.active)
            message = ws.recv(timeout=30)
            if isinstance(message, str) and json.loads(message)["type"] == "input.flushed":
                break
        assert seen <= {0, 1}  # one slot for the whole reply, never one per clause
        # Given back once the reply has gone quiet.
        assert wait_for(lambda: not admission.active, timeout=HOLD_SLOT_S + 2) > HOLD_SLOT_S / 2


def test_websocket_needs_the_api_key_when_the_server_has_one(keyed_server: RunningServer) -> None:
    srv = keyed_server
    with pytest.raises(InvalidStatus) as refused:
        connect(_url(srv))
    assert refused.value.response.status_code == 403
    with connect(_url(srv), additional_headers={"Authorization": f"Bearer {API_KEY}"}) as ws:
        _send(ws, type="input.text", text="Hello.")
        _send(ws, type="session.close")
        _, audio = _events_until(ws, "session.done")
    assert audio and audio[0]


@pytest.mark.parametrize(
    ("tokens", "mode", "expected"),
    [
        (["Hel", "lo,", " wor", "ld", "."], "sentence", ["Hello, world."]),
        (["Sure", ",", " the", " meeting", " is", " at", " 10", ":", "30", " tomorrow", ",", " in", " room", " five", "."],
         "clause", ["Sure, the meeting is at 10:30 tomorrow,", "in room five."]),
        (["It costs 3", ".", "5 dollars", ". Dr", ". Smith", " agrees", "."], "sentence",
         ["It costs 3.5 dollars.", "Dr. Smith agrees."]),
        (["Ok", "."], "clause", ["Ok."]),
        (["one, two, three, four"], "clause", ["one, two, three,", "four"]),
    ],
)
def test_segmenter(tokens: list[str], mode: SplitMode, expected: list[str]) -> None:
    seg = TextSegmenter(mode)
    out = [piece for token in tokens for piece in seg.feed(token)] + seg.flush()
    assert out == expected


def test_segmenter_cuts_a_long_run_without_marks_at_a_space() -> None:
    seg = TextSegmenter("clause", max_chars=50)
    out = seg.feed("word " * 30) + seg.flush()
    assert all(len(piece) <= 50 for piece in out)
    assert " ".join(out).split() == ["word"] * 30
