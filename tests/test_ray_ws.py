"""Both WebSocket channels on Ray Serve, through the real stack: the speech WebSocket and
`/v1/realtime` on the two-node cluster of `tests/test_ray.py` (two TTS replicas, one ASR
replica, the front end behind HAProxy).

A speech session is pinned to one TTS replica; a live session runs on the ASR replica.
Killing a replica ends the sessions it held with a `replica_lost` error event and close
code 1012, and leaves the others alone; a client that vanishes frees its replica's work
within seconds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests import test_ray
from tests.asr_support import LONG, SHORT, speak_pcm, wer
from tests.test_ray import STORY, RayDeployment, _ray_processes, _tts_replicas, running_deployment

pytestmark = test_ray.pytestmark


@pytest.fixture(scope="module")
def deployment() -> Iterator[RayDeployment]:
    with running_deployment() as running:
        yield running

APP = "voxserve"


def _ws(deployment: RayDeployment, path: str) -> str:
    return deployment.base_url.replace("http://", "ws://") + path


def _send(ws: ClientConnection, **message: Any) -> None:
    ws.send(json.dumps(message))


def _ready(deployment: RayDeployment) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(deployment.base_url + "/v1/models", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the front end never became ready"
        time.sleep(0.2)


def _asr_replica() -> dict[str, Any]:
    from ray import serve

    handle = serve.get_deployment_handle("ASR", app_name=APP)
    info: dict[str, Any] = handle.describe.remote().result(timeout_s=10)
    return info


def _until(check: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, what
        time.sleep(0.1)
    return time.monotonic() - started


def _holding() -> dict[str, int]:
    """TTS replica -> speech sessions whose slot it holds."""
    return {name: info["sessions"] for name, info in _tts_replicas().items()}


def _speak_session(ws: ClientConnection, until: str, timeout: float = 60) -> tuple[list[dict[str, Any]], int]:
    """Events and audio bytes until an event of type `until`."""
    events: list[dict[str, Any]] = []
    size = 0
    deadline = time.monotonic() + timeout
    while True:
        message = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        if isinstance(message, bytes):
            size += len(message)
            continue
        events.append(json.loads(message))
        if events[-1]["type"] == until:
            return events, size


def test_speech_session_through_ray_keeps_to_one_replica(deployment: RayDeployment) -> None:
    _ready(deployment)
    text = "Well, the quick brown fox jumps over the lazy dog, and then it runs away. The museum opens early."
    with connect(_ws(deployment, "/v1/audio/speech/stream")) as ws:
        _send(ws, type="session.config", voice="alloy", response_format="pcm")
        for i in range(0, len(text), 3):
            _send(ws, type="input.text", text=text[i : i + 3])
        _send(ws, type="input.done")
        events, size = _speak_session(ws, "input.flushed")
        starts = [e for e in events if e["type"] == "audio.start"]
        assert len(starts) >= 3 and " ".join(e["text"] for e in starts) == text
        assert not [e for e in events if e["type"] == "error"], events
        assert size / 2 / 24000 > 4.0
        # One replica holds the session's slot between the clauses of the reply.
        holding = _holding()
        assert sorted(holding.values()) == [0, 1], holding
        # Errors from the replica keep their shape; the session stays usable.
        _send(ws, type="session.config", voice="nobody")
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error" and error["param"] == "voice", error
        _send(ws, type="input.text", text="Still here.")
        _send(ws, type="session.close")
        events, size = _speak_session(ws, "session.done")
        assert size > 4800 and [e["type"] for e in events if e["type"] == "error"] == []
    # Closing the session gives its slot back at once, not after the hold.
    _until(lambda: not any(_holding().values()), 2.0, "the slot was not given back")


def test_realtime_session_through_ray_with_the_openai_sdk(deployment: RayDeployment) -> None:
    _ready(deployment)
    with httpx.Client(base_url=deployment.base_url, timeout=60) as c:
        speech = speak_pcm(c, SHORT[0])

    async def run() -> list[Any]:
        base = deployment.base_url
        client = AsyncOpenAI(api_key="unused", base_url=base + "/v1", websocket_base_url=base.replace("http", "ws") + "/v1")
        seen: list[Any] = []
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.session.update(session={
                "type": "transcription",
                "audio": {"input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "transcription": {"model": "whisper-1", "language": "en"},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                }},
            })
            silence = np.zeros(24000, dtype=np.int16)
            audio = np.concatenate([silence[:7200], speech, silence])
            for i in range(0, len(audio), 2400):
                await conn.input_audio_buffer.append(audio=base64.b64encode(audio[i : i + 2400].tobytes()).decode())
            async with asyncio.timeout(60):
                async for event in conn:
                    seen.append(event)
                    if event.type == "conversation.item.input_audio_transcription.completed":
                        break
        await client.close()
        return seen

    started = time.perf_counter()
    events = asyncio.run(run())
    print(f"realtime session on Ray: {time.perf_counter() - started:.2f} s")
    kinds = [e.type for e in events]
    assert kinds[0] == "session.created"
    assert "session.updated" in kinds and "input_audio_buffer.speech_started" in kinds
    assert "input_audio_buffer.committed" in kinds
    assert wer(SHORT[0], events[-1].transcript) <= 0.2, events[-1].transcript
    _until(lambda: _asr_replica()["live_sessions"] == 0, 5.0, "the live session stayed open on its replica")


def test_realtime_errors_keep_their_event_id_through_ray(deployment: RayDeployment) -> None:
    _ready(deployment)
    with connect(_ws(deployment, "/v1/realtime?intent=transcription")) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        _send(ws, type="input_audio_buffer.commit", event_id="evt_empty")
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error" and error["error"]["code"] == "input_audio_buffer_commit_empty"
        assert error["error"]["event_id"] == "evt_empty"
        bad = {"type": "session.update", "event_id": "evt_model",
               "session": {"type": "transcription", "audio": {"input": {"transcription": {"model": "nope"}}}}}
        ws.send(json.dumps(bad))
        error = json.loads(ws.recv(timeout=10))
        assert error["error"]["code"] == "model_not_found" and error["error"]["event_id"] == "evt_model"


def test_vanished_clients_free_their_replica_work(deployment: RayDeployment) -> None:
    _ready(deployment)
    ws = connect(_ws(deployment, "/v1/audio/speech/stream"))
    _send(ws, type="session.config", split="sentence")
    _send(ws, type="input.text", text=" ".join(LONG))
    assert json.loads(ws.recv(timeout=20))["type"] == "audio.start"
    assert isinstance(ws.recv(timeout=20), bytes)
    assert any(info["active"] for info in _tts_replicas().values())
    ws.socket.close()  # no close frame: the TCP connection just goes
    took = _until(
        lambda: not any(info["active"] for info in _tts_replicas().values()),
        5.0, "a vanished speech client's stream outlived it",
    )
    # Its slot goes back at once too: the front end ends the session on its replica.
    freed = _until(lambda: not any(_holding().values()), 1.0, "a vanished speech client's slot outlived it")
    print(f"speech session: stream stopped {took:.2f} s, slot back {took + freed:.2f} s after its client vanished")

    with httpx.Client(base_url=deployment.base_url, timeout=60) as c:
        speech = speak_pcm(c, SHORT[1])
    rt = connect(_ws(deployment, "/v1/realtime?intent=transcription"))
    assert json.loads(rt.recv(timeout=10))["type"] == "session.created"
    for i in range(0, len(speech), 6000):
        chunk = base64.b64encode(speech[i : i + 6000].astype("<i2").tobytes()).decode()
        _send(rt, type="input_audio_buffer.append", audio=chunk)
    assert _asr_replica()["live_sessions"] == 1
    rt.socket.close()
    took = _until(lambda: _asr_replica()["live_sessions"] == 0, 5.0, "a vanished live client's session outlived it")
    print(f"live session freed {took:.2f} s after its client vanished")


def _long_session(deployment: RayDeployment, out: dict[str, Any], started: threading.Event) -> None:
    """A speech session that speaks STORY and reads everything until the session ends."""
    out.update(events=[], bytes=0, code=None)
    try:
        with connect(_ws(deployment, "/v1/audio/speech/stream")) as ws:
            _send(ws, type="session.config", split="sentence")
            _send(ws, type="input.text", text=STORY)
            _send(ws, type="session.close")
            while True:
                message = ws.recv(timeout=90)
                if isinstance(message, bytes):
                    out["bytes"] += len(message)
                    started.set()
                else:
                    out["events"].append(json.loads(message))
    except ConnectionClosed as closed:
        out["code"] = closed.rcvd.code if closed.rcvd is not None else None
    except Exception as exc:  # noqa: BLE001 - what the client sees is the point
        out["failure"] = repr(exc)
    finally:
        started.set()


def test_killing_the_replica_holding_a_session_ends_only_that_session(deployment: RayDeployment) -> None:
    _ready(deployment)
    _until(lambda: not any(_holding().values()), 10.0, "sessions of earlier tests still held")
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    first_started, second_started = threading.Event(), threading.Event()
    a = threading.Thread(target=_long_session, args=(deployment, first, first_started))
    a.start()
    assert first_started.wait(30)
    holding = _holding()
    victim = next(name for name, n in holding.items() if n)
    time.sleep(1.5)  # the replicas' routing stats, polled every second, show it
    # The next session goes where there is room: the other replica.
    b = threading.Thread(target=_long_session, args=(deployment, second, second_started))
    b.start()
    assert second_started.wait(30)
    holding = _holding()
    assert sorted(holding.values()) == [1, 1], holding
    os.kill(_tts_replicas()[victim]["pid"], signal.SIGKILL)
    a.join(60)
    b.join(120)

    errors = [e for e in first["events"] if e["type"] == "error"]
    assert first["code"] == 1012, first
    assert errors and errors[-1]["code"] == "replica_lost" and errors[-1]["error"]["type"] == "server_error", errors
    assert "session.done" not in [e["type"] for e in first["events"]]
    # The other session, on the other replica, spoke all of its text.
    kinds = [e["type"] for e in second["events"]]
    assert second["code"] == 1000 and "session.done" in kinds and "error" not in kinds, second
    assert second["bytes"] / 2 / 24000 > 25

    # Serve replaces the replica; a new session works.
    deadline = time.monotonic() + 90
    while True:
        now = _tts_replicas(deadline_s=5)
        if len(now) == 2 and victim not in now:
            break
        assert time.monotonic() < deadline, f"the TTS replica was not replaced: {now}"
        time.sleep(0.5)
    with connect(_ws(deployment, "/v1/audio/speech/stream")) as ws:
        _send(ws, type="input.text", text="Back again.")
        _send(ws, type="session.close")
        events, size = _speak_session(ws, "session.done")
    assert size > 4800 and "error" not in [e["type"] for e in events]


def test_killing_the_asr_replica_ends_its_live_session(deployment: RayDeployment) -> None:
    _ready(deployment)
    with connect(_ws(deployment, "/v1/realtime?intent=transcription")) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        os.kill(_asr_replica()["pid"], signal.SIGKILL)
        silence = base64.b64encode(np.zeros(2400, dtype="<i2").tobytes()).decode()
        events: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed) as closed:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                _send(ws, type="input_audio_buffer.append", audio=silence)
                try:
                    events.append(json.loads(ws.recv(timeout=0.2)))
                except TimeoutError:
                    pass
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012, closed.value
        assert events and events[-1]["type"] == "error" and events[-1]["error"]["code"] == "replica_lost", events


def test_teardown_leaves_no_ray_process(deployment: RayDeployment) -> None:
    deployment.shutdown()
    deadline = time.monotonic() + 30
    while _ray_processes():
        assert time.monotonic() < deadline, _ray_processes()
        time.sleep(0.5)
