"""Barge-in on `WS /v1/audio/speech/stream`, through a real server and a real WebSocket
client: `input.cancel` stops a reply where it is and gives its work and slot back, the
socket speaks the next reply, and `context_id` keeps several replies apart on one socket.
The attacks: a flood of cancels, unknown and malformed context ids, too many contexts, and
a cancel sent while the server has stopped reading because the queue is full."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.conftest import RunningServer, run_server, wait_for
from voxserve.api.ws import HOLD_SLOT_S, MAX_CONTEXT_ID_CHARS
from voxserve.config import ASRConfig, ServerConfig, TTSConfig, WSConfig

pytestmark = pytest.mark.timeout(120)

LONG = " ".join(f"This is sentence number {i} of a long answer that the agent reads out." for i in range(30))
"""About two minutes of speech, in 30 sentences (more than the session queues at once)."""


def _url(srv: RunningServer) -> str:
    return srv.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def _send(ws: ClientConnection, **message: Any) -> None:
    ws.send(json.dumps(message))


def _next_event(ws: ClientConnection, timeout: float = 30) -> tuple[dict[str, Any], int]:
    """The next JSON event, and how many binary frames came before it."""
    frames = 0
    deadline = time.monotonic() + timeout
    while True:
        message = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        if isinstance(message, bytes):
            frames += 1
            continue
        return json.loads(message), frames


def _until(ws: ClientConnection, kind: str, timeout: float = 60) -> list[tuple[dict[str, Any], int]]:
    """Events (each with the binary frames before it) up to the first of type `kind`."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        event, frames = _next_event(ws, max(0.1, deadline - time.monotonic()))
        seen.append((event, frames))
        if event["type"] == kind:
            return seen


def _first_audio(ws: ClientConnection) -> dict[str, Any]:
    """Wait for a reply's audio.start and its first binary frame; returns the audio.start."""
    start, _ = _next_event(ws)
    assert start["type"] == "audio.start", start
    assert isinstance(ws.recv(timeout=30), bytes)
    return start


@pytest.mark.serial  # the reply stops within 2 s
def test_cancel_stops_the_reply_drops_its_work_and_the_socket_speaks_the_next(server: RunningServer) -> None:
    engine, admission = server.state.engine, server.state.admission
    before = set(engine.stream_ids())
    with connect(_url(server)) as ws:
        _send(ws, type="session.config", split="sentence")
        _send(ws, type="input.text", text=LONG)
        _first_audio(ws)
        (stream_id,) = set(engine.stream_ids()) - before
        assert admission.active == 1
        sent = time.perf_counter()
        _send(ws, type="input.cancel")
        # Audio already on its way may still arrive, but nothing of the reply follows the answer.
        seen = _until(ws, "audio.cancelled", timeout=10)
        assert seen[-1][0] == {"type": "audio.cancelled"}
        assert {e["type"] for e, _ in seen[:-1]} <= {"audio.start", "audio.done"}
        assert time.perf_counter() - sent < 2  # a reply of two minutes, stopped at once
        # Its work and its slot go back now, not after the hold between clauses.
        wait_for(lambda: not engine.has_work(stream_id), timeout=2)
        assert wait_for(lambda: not admission.active, timeout=2) < HOLD_SLOT_S / 2
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.5)  # the cancelled reply stays silent
        assert set(engine.stream_ids()) - before - {stream_id} == set()  # later sentences never started

        # The same socket speaks the next reply.
        _send(ws, type="input.text", text="Sure, what would you like instead?")
        _send(ws, type="input.done")
        seen = _until(ws, "input.flushed")
        kinds = [e["type"] for e, _ in seen]
        assert kinds == ["audio.start", "audio.done", "input.flushed"]
        assert seen[1][1] > 0  # audio frames before audio.done
        assert seen[0][0]["text"] == "Sure, what would you like instead?"
        # A cancel with nothing to stop is answered all the same.
        _send(ws, type="input.cancel")
        assert _next_event(ws, timeout=10)[0] == {"type": "audio.cancelled"}
        _send(ws, type="session.close")
        assert _until(ws, "session.done")[-1][0]["type"] == "session.done"


def test_contexts_are_spoken_in_order_and_a_cancel_stops_only_its_own(server: RunningServer) -> None:
    with connect(_url(server)) as ws:
        _send(ws, type="session.config", split="sentence")
        _send(ws, type="input.text", text=LONG[:600], context_id="turn-1")
        _send(ws, type="input.done", context_id="turn-1")
        _send(ws, type="input.text", text="This reply waits behind the first.", context_id="turn-2")
        _send(ws, type="input.done", context_id="turn-2")
        _send(ws, type="input.text", text="The third reply is spoken.", context_id="turn-3")
        _send(ws, type="input.done", context_id="turn-3")
        start = _first_audio(ws)
        assert start["context_id"] == "turn-1"
        # A waiting context is dropped while the first one goes on speaking.
        _send(ws, type="input.cancel", context_id="turn-2")
        seen = _until(ws, "audio.cancelled")
        assert seen[-1][0] == {"type": "audio.cancelled", "context_id": "turn-2"}
        assert all(e.get("context_id") == "turn-1" for e, _ in seen[:-1])
        assert isinstance(ws.recv(timeout=10), bytes)  # turn-1 still speaks
        # The speaking one stops; the next one in line begins.
        _send(ws, type="input.cancel", context_id="turn-1")
        seen = _until(ws, "audio.cancelled")
        assert seen[-1][0] == {"type": "audio.cancelled", "context_id": "turn-1"}
        seen = _until(ws, "input.flushed")
        assert seen[0] == (seen[0][0], 0)  # no audio between the cancel and the next audio.start
        assert [(e["type"], e.get("context_id")) for e, _ in seen] == [
            ("audio.start", "turn-3"),
            ("audio.done", "turn-3"),
            ("input.flushed", "turn-3"),
        ]
        assert seen[0][0]["text"] == "The third reply is spoken."
        # A cancel that crosses the end of its reply is still a cancel.
        _send(ws, type="input.cancel", context_id="turn-3")
        assert _next_event(ws, timeout=10)[0] == {"type": "audio.cancelled", "context_id": "turn-3"}
        # An id may begin a new reply once its last one has ended.
        _send(ws, type="input.text", text="Again.", context_id="turn-1")
        _send(ws, type="input.done", context_id="turn-1")
        seen = _until(ws, "input.flushed")
        assert {e.get("context_id") for e, _ in seen} == {"turn-1"}


def test_a_cancel_is_heard_while_the_server_has_stopped_reading(server: RunningServer) -> None:
    """A client that sends a long reply at once fills the session's queue and the server
    stops reading; its cancel must not wait for room in that queue."""
    admission = server.state.admission
    with connect(_url(server)) as ws:
        _send(ws, type="session.config", split="sentence")
        for _ in range(3):  # 90 sentences: far past the queue
            _send(ws, type="input.text", text=LONG + " ")
        _send(ws, type="input.done")
        _first_audio(ws)
        sent = time.perf_counter()
        _send(ws, type="input.cancel")
        seen = _until(ws, "audio.cancelled", timeout=20)
        assert time.perf_counter() - sent < 5  # the queued sentences would take minutes
        assert {e["type"] for e, _ in seen[:-1]} <= {"audio.start", "audio.done"}
        wait_for(lambda: not admission.active, timeout=2)
        # The text sent before the cancel, read or not, is gone with it.
        with pytest.raises(TimeoutError):
            ws.recv(timeout=1)
        _send(ws, type="input.text", text="Next.")
        _send(ws, type="input.done")
        assert [e["type"] for e, _ in _until(ws, "input.flushed")] == ["audio.start", "audio.done", "input.flushed"]


@pytest.fixture(scope="module")
def contexts_limited() -> Iterator[RunningServer]:
    ws = WSConfig(max_contexts=3, messages_per_s=50.0, message_burst=300)
    tts = TTSConfig(noise_w=0.0, noise_scale=0.0, max_streams=1)
    config = ServerConfig(tts=tts, asr=ASRConfig(enabled=False), ws=ws)
    with run_server(config) as srv:
        yield srv


def test_attacks_cancel_floods_unknown_and_too_many_contexts(contexts_limited: RunningServer) -> None:
    srv = contexts_limited
    admission = srv.state.admission
    with connect(_url(srv)) as ws, httpx.Client(base_url=srv.base_url, timeout=10) as client:
        # Malformed and unknown ids: an error each, and the session goes on.
        for bad in (7, "", "x" * (MAX_CONTEXT_ID_CHARS + 1), "a\nb"):
            _send(ws, type="input.text", text="Hi.", context_id=bad)
            error, _ = _next_event(ws)
            assert (error["type"], error["code"], error["param"]) == ("error", "invalid_value", "context_id")
        _send(ws, type="input.cancel", context_id="never-sent")
        error, _ = _next_event(ws)
        assert (error["code"], error["param"]) == ("unknown_context", "context_id")

        # Too many contexts: one past the cap is refused, and cancelling one makes room.
        for i in range(3):
            _send(ws, type="input.text", text=f"Reply {i} has not ended", context_id=f"c{i}")
        _send(ws, type="input.text", text="One too many.", context_id="c3")
        error, _ = _next_event(ws)
        assert (error["code"], error["param"]) == ("too_many_contexts", "context_id")
        _send(ws, type="input.cancel", context_id="c1")
        assert _next_event(ws)[0] == {"type": "audio.cancelled", "context_id": "c1"}
        _send(ws, type="input.text", text="Now it fits.", context_id="c3")
        _send(ws, type="input.cancel")  # everything
        assert _next_event(ws)[0] == {"type": "audio.cancelled"}

        # A flood of cancels while a reply speaks: each one answered, the server unharmed.
        _send(ws, type="session.config", split="sentence")
        _send(ws, type="input.text", text=LONG, context_id="long")
        _first_audio(ws)
        for i in range(250):
            _send(ws, type="input.cancel", **({"context_id": "long"} if i % 2 else {}))
        answers = 0
        while answers < 250:
            event, _ = _next_event(ws, timeout=20)
            assert event["type"] == "audio.cancelled", event
            answers += 1
        assert client.get("/health").status_code == 200
        wait_for(lambda: not admission.active, timeout=2)
        assert not srv.state.engine.stream_ids()
        # And it still speaks.
        _send(ws, type="input.text", text="Still here.", context_id="after")
        _send(ws, type="input.done", context_id="after")
        seen = _until(ws, "input.flushed")
        assert [e["type"] for e, _ in seen] == ["audio.start", "audio.done", "input.flushed"]


def test_a_reply_waiting_for_a_slot_leaves_the_queue_when_cancelled(contexts_limited: RunningServer) -> None:
    srv = contexts_limited  # one stream at a time
    admission = srv.state.admission
    with connect(_url(srv)) as speaking, connect(_url(srv)) as waiting:
        _send(speaking, type="session.config", split="sentence")
        _send(speaking, type="input.text", text=LONG)
        _first_audio(speaking)
        _send(waiting, type="input.text", text="I wait for the slot.", context_id="w")
        wait_for(lambda: admission.queued == 1, timeout=10)
        _send(waiting, type="input.cancel", context_id="w")
        assert _next_event(waiting)[0] == {"type": "audio.cancelled", "context_id": "w"}
        wait_for(lambda: not admission.queued, timeout=2)
        assert admission.active == 1  # the first session still speaks
        # The slot passes on at once when the speaking reply is cancelled in turn.
        _send(speaking, type="input.cancel")
        assert _until(speaking, "audio.cancelled")[-1][0] == {"type": "audio.cancelled"}
        _send(waiting, type="input.text", text="Now it is my turn.", context_id="w")
        _send(waiting, type="input.done", context_id="w")
        seen = _until(waiting, "input.flushed")
        assert [(e["type"], e.get("context_id")) for e, _ in seen] == [
            ("audio.start", "w"), ("audio.done", "w"), ("input.flushed", "w"),
        ]
