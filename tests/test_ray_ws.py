"""Both WebSocket channels on Ray Serve, through the real stack: the speech WebSocket and
`/v1/realtime` on the shared two-node cluster of `tests/ray_support.py` (two TTS
replicas, one ASR replica, two front ends behind HAProxy, and the keeper of their shared
session cap). The last test tears the cluster down and checks that no Ray process is left.

A speech session is pinned to one TTS replica; a live session runs on the ASR replica.
Killing a replica ends the sessions it held with a `replica_lost` error event and close
code 1012, fails its HTTP speech streams, and leaves the others alone; a client that
vanishes frees its replica's work within seconds. `--ws-max-sessions` holds across both front ends, and a front end's
`/metrics` shows every replica's engine gauges.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.asr_support import LONG, SHORT, sdk_live_turn, wer
from tests.ray_support import (
    RAY_MARKS,
    REPLICA,
    STORY,
    WS_CAP,
    RayDeployment,
    ray_processes,
    speech_json,
    tts_replicas,
)
from voxserve.serving.leases import CALL_S, LEASE_TTL_S, RENEW_S
from voxserve.serving.speech_session import HOLD_SLOT_S

pytestmark = RAY_MARKS
CAP = WS_CAP


@pytest.fixture()
def deployment(ray_deployment: RayDeployment) -> RayDeployment:
    return ray_deployment


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
    return {name: info["sessions"] for name, info in tts_replicas().items()}


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
    held: dict[str, int] = {}
    """The most slots each replica was seen holding while the reply was spoken."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for name, n in _holding().items():
                held[name] = max(held.get(name, 0), n)

    watcher = threading.Thread(target=watch, daemon=True)
    with connect(_ws(deployment, "/v1/audio/speech/stream")) as ws:
        _send(ws, type="session.config", voice="alloy", response_format="pcm")
        watcher.start()
        try:
            for i in range(0, len(text), 3):
                _send(ws, type="input.text", text=text[i : i + 3])
            _send(ws, type="input.done")
            events, size = _speak_session(ws, "input.flushed")
        finally:
            stop.set()
            watcher.join(30)
        starts = [e for e in events if e["type"] == "audio.start"]
        assert len(starts) >= 3 and " ".join(e["text"] for e in starts) == text
        assert not [e for e in events if e["type"] == "error"], events
        assert size / 2 / 24000 > 4.0
        # One replica speaks every segment, and holds the session's one slot (between
        # the segments too: the local tests/test_ws.py times the hold itself).
        (replica,) = {e["replica"] for e in starts}
        assert held.pop(replica) == 1 and not any(held.values()), (replica, held)
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


def test_a_cancel_through_ray_stops_the_reply_and_gives_its_slot_back(deployment: RayDeployment) -> None:
    _ready(deployment)
    with connect(_ws(deployment, "/v1/audio/speech/stream")) as ws:
        _send(ws, type="session.config", split="sentence")
        _send(ws, type="input.text", text=STORY, context_id="story")
        start = json.loads(ws.recv(timeout=30))
        assert start["type"] == "audio.start" and start["context_id"] == "story"
        assert isinstance(ws.recv(timeout=30), bytes)
        replica = start["replica"]
        _until(lambda: _holding()[replica] == 1, 5.0, "the session's slot never showed")
        _send(ws, type="input.cancel", context_id="story")
        events, _ = _speak_session(ws, "audio.cancelled", timeout=10)
        assert events[-1] == {"type": "audio.cancelled", "context_id": "story"}
        # The replica drops the stream and the slot now, not after the hold.
        _until(
            lambda: not tts_replicas()[replica]["active"] and not _holding()[replica],
            HOLD_SLOT_S * 0.9,
            "the cancelled reply still held its replica",
        )
        # The same session speaks its next reply, on the same replica.
        _send(ws, type="input.text", text="Something else, then.", context_id="next")
        _send(ws, type="input.done", context_id="next")
        events, size = _speak_session(ws, "input.flushed")
        assert [(e["type"], e.get("context_id")) for e in events] == [
            ("audio.start", "next"), ("audio.done", "next"), ("input.flushed", "next"),
        ]
        assert events[0]["replica"] == replica and size > 4800


def test_a_session_its_client_closes_gives_its_held_slot_back_at_once(deployment: RayDeployment) -> None:
    """A voice agent's sessions: a reply spoken to `input.flushed`, then the client closes
    (a close handshake, or the socket just dropped). The replica holds the idle slot for
    the reply's next clause, and only the session's end gives it back before the hold:
    Serve cancels the closed client's request with the calls made under it, and the end
    must reach the replica all the same, or the next session waits for the hold."""
    _ready(deployment)
    _until(lambda: not any(_holding().values()), 10.0, "sessions of earlier tests still held")
    freed: list[float] = []
    for i in range(6):
        ws = connect(_ws(deployment, "/v1/audio/speech/stream"))
        _send(ws, type="input.text", text="Sure, what would you like instead?")
        _send(ws, type="input.done")
        _speak_session(ws, "input.flushed")
        if i % 2:
            ws.socket.close()
        else:
            ws.close()
        # The hold began as the reply's last segment ended, before `input.flushed` was sent.
        freed.append(_until(lambda: not any(_holding().values()), HOLD_SLOT_S + 1.0, "the slot outlived its session"))
    print("slot back after the close: " + ", ".join(f"{s:.2f}" for s in freed) + " s")
    assert max(freed) < 0.5 * HOLD_SLOT_S, freed


def test_the_calls_that_clean_up_after_a_client_are_not_made_under_its_request() -> None:
    """Serve cancels, with a request, the calls made under its id in Serve's request
    context; a session's end and a lease's return are made with none. Whether Serve
    cancels them in time depends on thread timing that the test above rarely meets on
    this cluster, so the mechanism is checked directly too."""
    from ray.serve import context

    from voxserve.ray.frontend import _detached

    async def request_id() -> str:
        return context._get_serve_request_context()._internal_request_id

    async def main() -> tuple[str, str]:
        context._set_request_context(_internal_request_id="ws-request")
        return await request_id(), await _detached(request_id)

    assert asyncio.run(main()) == ("ws-request", "")


def test_a_reply_given_up_as_it_opened_still_stops_its_replica() -> None:
    """A barge-in can land while a segment opens: the session closes the reply without
    ever reading it. The replica's work is cancelled all the same, once, and a reply
    read to its end is not cancelled. Serve's response generator is faked here, at the
    process boundary: when a cancel lands is a race the live tests cannot aim at."""
    from voxserve.ray.frontend import _Relay
    from voxserve.serving.jobs import Opened
    from voxserve.serving.metrics import Metrics
    from voxserve.serving.remote import RemoteStream, _RemoteSpeech

    class Generator:  # the two methods of Serve's DeploymentResponseGenerator the relay uses
        def __init__(self, items: list[int]) -> None:
            self.items, self.cancels = items, 0

        async def __anext__(self) -> int:
            if not self.items:
                raise StopAsyncIteration
            return self.items.pop(0)

        def cancel(self) -> None:
            self.cancels += 1

    async def main() -> tuple[int, int, int]:
        unread, whole, part = Generator([1]), Generator([1, 2]), Generator([1, 2])
        relay = _Relay(cast(Any, unread))
        speech = _RemoteSpeech(RemoteStream("TTS#a", Opened(), relay, relay.cancel), Metrics(None), 0.0)
        speech.close(False)  # stopped as it opened: `chunks()` never ran
        speech.close(False)
        relay = _Relay(cast(Any, whole))
        assert [item async for item in relay] == [1, 2]
        await relay.aclose()
        relay.cancel()
        relay = _Relay(cast(Any, part))
        assert await anext(relay) == 1
        await relay.aclose()  # the client left mid-reply
        return unread.cancels, whole.cancels, part.cancels

    assert asyncio.run(main()) == (1, 0, 1)


def test_realtime_session_through_ray_with_the_openai_sdk(
    deployment: RayDeployment, short_speech: list[np.ndarray]
) -> None:
    _ready(deployment)
    speech = short_speech[0]

    started = time.perf_counter()
    events = sdk_live_turn(deployment.base_url, speech, timeout_s=60)
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
        # The replica's noise filter checks the type and takes a known one.
        bad = {"type": "session.update", "event_id": "evt_noise",
               "session": {"type": "transcription", "audio": {"input": {"noise_reduction": {"type": "studio"}}}}}
        ws.send(json.dumps(bad))
        error = json.loads(ws.recv(timeout=10))
        assert error["error"]["param"] == "session.audio.input.noise_reduction.type", error
        good = {"type": "session.update",
                "session": {"type": "transcription", "audio": {"input": {"noise_reduction": {"type": "far_field"}}}}}
        ws.send(json.dumps(good))
        updated = json.loads(ws.recv(timeout=10))
        assert updated["session"]["audio"]["input"]["noise_reduction"] == {"type": "far_field"}, updated


def _keeper() -> dict[str, Any]:
    from ray import serve

    handle = serve.get_deployment_handle("Sessions", app_name=APP)
    info: dict[str, Any] = handle.describe.remote().result(timeout_s=10)
    return info


def _open_speech(deployment: RayDeployment) -> ClientConnection | None:
    """A speech session, or None when it was refused for the session cap (error, 1013).
    An empty `input.done` is answered with `input.flushed` by a session that was let in;
    a refused one has its error event first. Speech sessions count under the cap as live
    ones do, without the ASR replicas' own measured cap in the way."""
    ws = connect(_ws(deployment, "/v1/audio/speech/stream"))
    with contextlib.suppress(ConnectionClosed):
        ws.send(json.dumps({"type": "input.done"}))
    first = json.loads(ws.recv(timeout=10))
    if first["type"] == "input.flushed":
        return ws
    assert first["type"] == "error" and first["code"] == "too_many_sessions", first
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    return None


def test_the_session_cap_holds_across_front_ends(deployment: RayDeployment) -> None:
    _ready(deployment)
    _until(lambda: _keeper()["held"] == 0, 10.0, "sessions of earlier tests still hold leases")
    held: list[ClientConnection] = []
    try:
        for _ in range(CAP):
            ws = _open_speech(deployment)
            assert ws is not None
            held.append(ws)
        keeper = _keeper()
        # HAProxy spread the sessions over both front ends; the cap counted them all.
        assert keeper["held"] == CAP and len([n for n in keeper["holders"].values() if n]) == 2, keeper
        assert _open_speech(deployment) is None
        # A session that ends frees its place, whichever front end holds the next. The
        # keeper is asked, not a new session: a refused attempt's own round trip (error
        # event, close handshake) is not the release's time. The place comes back through
        # the front end's release call (at most CALL_S) or, should that call be slow, its
        # next renewal, which no longer lists the lease (RENEW_S later, CALL_S to answer);
        # half a second more for the close to reach the front end on a busy machine. A
        # place still held past that is a session whose end was never counted.
        held.pop().close()
        started = time.monotonic()
        bound = RENEW_S + 2 * CALL_S + 0.5
        _until(lambda: _keeper()["held"] < CAP, bound, "an ended session's lease was not given back")
        ws = _open_speech(deployment)
        assert ws is not None
        held.append(ws)
        print(f"an ended session's place taken again {time.monotonic() - started:.2f} s later")
    finally:
        for ws in held:
            ws.close()
    # Given back as each one closes; a release that the keeper was too busy to take within
    # its 1 s lapses with the lease.
    _until(lambda: _keeper()["held"] == 0, LEASE_TTL_S + 2.0, "closed sessions kept their leases")


def test_a_front_end_that_vanishes_loses_its_leases(deployment: RayDeployment) -> None:
    """A holder that never renews (a front end that died) stands for one: its leases fill
    the cap, then lapse after `LEASE_TTL_S`."""
    from ray import serve

    _ready(deployment)
    _until(lambda: _keeper()["held"] == 0, 10.0, "sessions of earlier tests still hold leases")
    handle = serve.get_deployment_handle("Sessions", app_name=APP)
    for i in range(CAP):
        assert handle.grant.remote("fe_vanished", f"wsl_{i}").result(timeout_s=10)
    started = time.monotonic()
    assert _open_speech(deployment) is None
    while (ws := _open_speech(deployment)) is None:
        assert time.monotonic() - started < LEASE_TTL_S + 3, "a silent front end's leases never lapsed"
        time.sleep(0.2)
    lapsed = time.monotonic() - started
    ws.close()
    assert lapsed >= LEASE_TTL_S - 1.0
    print(f"a silent front end's leases lapsed after {lapsed:.1f} s")


def _samples(text: str, name: str) -> dict[str, float]:
    """`labels -> value` of one metric in a Prometheus exposition."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name):].rsplit(" ", 1)
            found[labels] = float(value)
    return found


def test_engine_gauges_come_from_the_replicas(deployment: RayDeployment) -> None:
    _ready(deployment)
    tts = tts_replicas()
    asr = _asr_replica()["replica"]

    def scrape() -> str:
        started = time.monotonic()
        reply = httpx.get(deployment.base_url + "/metrics", timeout=10)
        assert reply.status_code == 200 and time.monotonic() - started < 1.0
        return reply.text

    text = scrape()
    capacity = _samples(text, "voxserve_tts_capacity_streams")
    assert sorted(capacity) == sorted(f'{{replica="{name}"}}' for name in tts), capacity
    assert _samples(text, "voxserve_asr_queue_depth") == {f'{{replica="{asr}"}}': 0.0}
    costs = _samples(text, "voxserve_tts_model_cost")
    assert sorted(labels.split('replica="')[1] for labels in costs) == sorted(f'{name}"}}' for name in tts), costs
    ages = _samples(text, "voxserve_replica_stats_age_seconds")
    assert len(ages) == 3 and max(ages.values()) < 5.0, ages

    # A stream shows in its replica's gauge within a routing-stats period or two.
    with httpx.Client(base_url=deployment.base_url, timeout=60) as c, c.stream(
        "POST", "/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": STORY, "response_format": "pcm"}
    ) as reply:
        body = reply.iter_bytes()
        next(body)
        _until(
            lambda: sum(_samples(scrape(), "voxserve_tts_active_streams").values()) >= 1,
            5.0, "a running stream never showed on /metrics",
        )

    # A replica that stops answering leaves /metrics as fast; its figures just age.
    victim, info = next(iter(tts.items()))
    os.kill(info["pid"], signal.SIGSTOP)
    try:
        time.sleep(3.0)
        ages = _samples(scrape(), "voxserve_replica_stats_age_seconds")
    finally:
        os.kill(info["pid"], signal.SIGCONT)
    label = f'{{deployment="tts",replica="{victim}"}}'
    assert ages[label] >= 2.0 and min(ages.values()) < 2.0, ages


def test_vanished_clients_free_their_replica_work(
    deployment: RayDeployment, short_speech: list[np.ndarray]
) -> None:
    _ready(deployment)
    ws = connect(_ws(deployment, "/v1/audio/speech/stream"))
    _send(ws, type="session.config", split="sentence")
    _send(ws, type="input.text", text=" ".join(LONG))
    assert json.loads(ws.recv(timeout=20))["type"] == "audio.start"
    assert isinstance(ws.recv(timeout=20), bytes)
    assert any(info["active"] for info in tts_replicas().values())
    ws.socket.close()  # no close frame: the TCP connection just goes
    took = _until(
        lambda: not any(info["active"] for info in tts_replicas().values()),
        5.0, "a vanished speech client's stream outlived it",
    )
    # Its slot goes back at once too, well before the hold would give it back: the front
    # end ends the session on its replica.
    freed = _until(
        lambda: not any(_holding().values()), 0.75 * HOLD_SLOT_S, "a vanished speech client's slot outlived it"
    )
    print(f"speech session: stream stopped {took:.2f} s, slot back {took + freed:.2f} s after its client vanished")

    speech = short_speech[1]
    rt = connect(_ws(deployment, "/v1/realtime?intent=transcription"))
    assert json.loads(rt.recv(timeout=10))["type"] == "session.created"
    for i in range(0, len(speech), 6000):
        chunk = base64.b64encode(speech[i : i + 6000].astype("<i2").tobytes()).decode()
        _send(rt, type="input_audio_buffer.append", audio=chunk)
    assert _asr_replica()["live_sessions"] == 1
    rt.socket.close()
    took = _until(lambda: _asr_replica()["live_sessions"] == 0, 5.0, "a vanished live client's session outlived it")
    print(f"live session freed {took:.2f} s after its client vanished")


def _long_session(deployment: RayDeployment, out: dict[str, Any], started: threading.Event, end: threading.Event) -> None:
    """A speech session that speaks STORY, reading everything; once `end` is set it sends
    one more sentence and closes. The session stays open until then, so the replica that
    holds it is still needed when the test kills it, however fast the story was spoken.
    Once `out["drop"]` is set, the client just closes it instead, mid-story."""
    out.update(events=[], bytes=0, code=None, replica=None, drop=False)
    try:
        with connect(_ws(deployment, "/v1/audio/speech/stream")) as ws:
            _send(ws, type="session.config", split="sentence")
            _send(ws, type="input.text", text=STORY)
            ending = False
            while not out["drop"]:
                if end.is_set() and not ending:
                    ending = True
                    _send(ws, type="input.text", text="The end.")
                    _send(ws, type="session.close")
                try:
                    message = ws.recv(timeout=0.2)
                except TimeoutError:
                    continue
                if isinstance(message, bytes):
                    out["bytes"] += len(message)
                    continue
                event = json.loads(message)
                out["events"].append(event)
                if event["type"] == "audio.start" and out["replica"] is None:
                    out["replica"] = event.get("replica")
                    started.set()
    except ConnectionClosed as closed:
        out["code"] = closed.rcvd.code if closed.rcvd is not None else None
    except Exception as exc:  # noqa: BLE001 - what the client sees is the point
        out["failure"] = repr(exc)
    finally:
        started.set()


@dataclass
class _Session:
    """A `_long_session` running in its thread; `finish` lets it end."""

    out: dict[str, Any]
    thread: threading.Thread
    end: threading.Event

    @property
    def replica(self) -> str:
        return str(self.out["replica"])

    def finish(self) -> None:
        self.end.set()
        self.thread.join(120)

    def drop(self) -> None:
        """Close it at once, without waiting for the rest of the story."""
        self.out["drop"] = True
        self.thread.join(30)


def _http_stream(deployment: RayDeployment, out: dict[str, Any], ready: threading.Event, go: threading.Event) -> None:
    """One HTTP speech stream of STORY: its first audio, then the rest once `go` is set."""
    try:
        with (
            httpx.Client(base_url=deployment.base_url, timeout=60) as c,
            c.stream("POST", "/v1/audio/speech", json=speech_json(STORY)) as r,
        ):
            out["replica"] = r.headers[REPLICA]
            chunks = r.iter_bytes()
            out["bytes"] += len(next(chunks))
            ready.set()
            go.wait(60)
            for chunk in chunks:
                out["bytes"] += len(chunk)
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - what the client sees is the point
        out["ok"] = False
        out["error"] = repr(exc)
    finally:
        ready.set()


def test_killing_a_tts_replica_fails_only_its_streams_and_sessions(deployment: RayDeployment) -> None:
    """HTTP speech streams and speech sessions on both TTS replicas, then one replica is
    killed: its streams fail and its session ends with `replica_lost` (1012), while those
    on the other replica play to the end. Serve replaces it; new requests and sessions
    succeed, on both replicas again."""
    _ready(deployment)
    _until(lambda: not any(_holding().values()), 10.0, "sessions of earlier tests still held")
    replicas = tts_replicas()
    assert len(replicas) == 2, replicas
    streams: list[dict[str, Any]] = []
    threads: list[threading.Thread] = []
    go = threading.Event()

    def start() -> _Session:
        """A long session, once its first `audio.start` has named its replica."""
        out: dict[str, Any] = {}
        started, end = threading.Event(), threading.Event()
        session = _Session(out, threading.Thread(target=_long_session, args=(deployment, out, started, end)), end)
        session.thread.start()
        assert started.wait(30) and out["replica"], out
        return session

    sessions: dict[str, _Session] = {}
    try:
        # Replicas within a tenth of their capacity rank as equal, so sessions may go to
        # one replica: one that lands where a session already is is dropped, and another
        # starts, until each replica holds one. The sessions read all they are sent; the
        # HTTP streams started after them read nothing more until the kill.
        for _ in range(10):
            session = start()
            if session.replica in sessions:
                session.drop()
                continue
            sessions[session.replica] = session
            if len(sessions) == 2:
                break
        else:
            raise AssertionError(f"every session went to one replica: {list(sessions)}")
        # Two front ends route on their own, so streams started together may all go to
        # one replica: start them one by one until each replica has one (at most 8).
        while len({r.get("replica") for r in streams}) < 2:
            assert len(streams) < 8, streams
            out: dict[str, Any] = {"bytes": 0}
            ready = threading.Event()
            threads.append(threading.Thread(target=_http_stream, args=(deployment, out, ready, go)))
            streams.append(out)
            threads[-1].start()
            assert ready.wait(30) and "replica" in out, out
        victim = streams[0]["replica"]
        os.kill(replicas[victim]["pid"], signal.SIGKILL)
    finally:
        go.set()
        for t in threads:
            t.join(60)
        for session in sessions.values():
            session.finish()

    on_victim = [r for r in streams if r["replica"] == victim]
    on_other = [r for r in streams if r["replica"] != victim]
    assert on_victim and on_other, streams
    assert not any(r["ok"] for r in on_victim), streams
    full = max(r["bytes"] for r in on_other)
    assert all(r["ok"] and r["bytes"] == full for r in on_other), streams

    # The victim's session ends mid-story, or at its next segment.
    lost = sessions[victim].out
    kinds = [e["type"] for e in lost["events"]]
    errors = [e for e in lost["events"] if e["type"] == "error"]
    assert lost["code"] == 1012, lost
    assert errors and errors[-1]["code"] == "replica_lost" and errors[-1]["error"]["type"] == "server_error"
    assert "session.done" not in kinds
    # The other one spoke all of its text, every segment on its own replica.
    (other,) = (session for name, session in sessions.items() if name != victim)
    kinds = [e["type"] for e in other.out["events"]]
    assert other.out["code"] == 1000 and "session.done" in kinds and "error" not in kinds, other.out
    assert other.out["bytes"] / 2 / 24000 > 25
    assert {e.get("replica") for e in other.out["events"] if e["type"] == "audio.start"} == {other.replica}

    # Serve replaces the replica; a new request and a new session work.
    deadline = time.monotonic() + 90
    while True:
        now = tts_replicas(deadline_s=5)
        if len(now) == 2 and victim not in now:
            break
        assert time.monotonic() < deadline, f"the TTS replica was not replaced: {now}"
        time.sleep(0.5)
    with httpx.Client(base_url=deployment.base_url, timeout=60) as c:
        r = c.post("/v1/audio/speech", json=speech_json("Back again."))
        assert r.status_code == 200 and len(r.content) > 4800
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
    while ray_processes():
        assert time.monotonic() < deadline, ray_processes()
        time.sleep(0.5)
