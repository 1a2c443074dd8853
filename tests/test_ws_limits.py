"""WebSocket limits, each test shaped as the attack it stops,
through a real server, real clients and raw sockets: pending text, a vanished or stalled
client, the session cap, oversized messages, the message rate, the idle timeout, the
Origin check and a failure that is not a `VoxError`.

Every attack runs beside a `/health` probe (every 50 ms, each answer well under a quarter
of a second) and ends with one normal speech request, so the test also proves that other
clients are served meanwhile.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from tests.conftest import RunningServer, run_server, wait_for
from voxserve.api.origin import OriginPolicy
from voxserve.api.ws_limits import TokenBucket, message_size
from voxserve.config import ASRConfig, ServerConfig, TTSConfig, WSConfig
from voxserve.engine.tts import MAX_SEGMENT_CHARS

# /health's latency during the attacks is bounded: run alone.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(120)]

LIMITS = WSConfig(
    max_sessions=3,
    max_message_bytes=8192,
    max_pending_chars=2500,
    idle_timeout_s=1.5,
    messages_per_s=20.0,
    message_burst=40,
    send_timeout_s=1.0,
)
APP_ORIGIN = "https://app.example.com"
HEALTH_MAX_S = 0.75
"""Slowest /health answer allowed during an attack. The server runs in the test's own
process, so a probe also waits on the test's threads; a send that blocked the event loop
would hold it for the whole `send_timeout_s` (1 s) or more."""


@pytest.fixture(scope="module")
def limited() -> Iterator[RunningServer]:
    config = ServerConfig(
        tts=replace(TTSConfig(), noise_w=0.0, noise_scale=0.0),
        asr=replace(ASRConfig(), enabled=False),
        ws=LIMITS,
        allowed_origins=(APP_ORIGIN,),
    )
    with run_server(config) as srv:
        yield srv


@pytest.fixture()
def srv(limited: RunningServer) -> RunningServer:
    """The limited server, once the sessions of earlier tests have ended."""
    wait_for(lambda: limited.state.ws_open == 0, timeout=10)
    return limited


def _url(srv: RunningServer) -> str:
    return srv.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def _port(srv: RunningServer) -> int:
    return int(srv.base_url.rsplit(":", 1)[1])


def _send(ws: ClientConnection, **message: Any) -> None:
    ws.send(json.dumps(message))


def _until_closed(ws: ClientConnection, timeout: float = 30) -> tuple[list[dict[str, Any]], int | None]:
    """Events until the server closes the session, and its close code."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            message = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
            if isinstance(message, str):
                events.append(json.loads(message))
    except ConnectionClosed as closed:
        return events, closed.rcvd.code if closed.rcvd is not None else None


def _errors(events: list[dict[str, Any]]) -> list[str]:
    return [e["code"] for e in events if e["type"] == "error"]


@dataclass
class HealthProbe:
    """GET /health every 50 ms from a thread while an attack runs."""

    base_url: str
    latencies: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            while True:
                started = time.perf_counter()
                try:
                    status = client.get("/health").status_code
                except httpx.TimeoutException:  # a stalled event loop: 10 s with no answer
                    status = 0
                self.latencies.append(time.perf_counter() - started)
                self.statuses.append(status)
                if self._stop.wait(0.05):
                    return


@contextlib.contextmanager
def served_meanwhile(
    srv: RunningServer, speech: bool = True, headers: dict[str, str] | None = None
) -> Iterator[HealthProbe]:
    """Probe /health during the block; then one normal request must succeed: a speech
    request, or (`speech` False) the voice list, sent with `headers` (an API key)."""
    probe = HealthProbe(srv.base_url)
    thread = threading.Thread(target=probe.run, daemon=True)
    thread.start()
    try:
        yield probe
        with httpx.Client(base_url=srv.base_url, timeout=30, headers=headers) as client:
            if speech:
                r = client.post(
                    "/v1/audio/speech",
                    json={"model": "tts-1", "voice": "alloy", "input": "Still here.", "response_format": "pcm"},
                )
                assert r.status_code == 200 and len(r.content) > 8000
            else:
                assert client.get("/v1/audio/voices").json()["voices"]
        wait_for(lambda: len(probe.statuses) >= 2, timeout=5)
    finally:
        probe._stop.set()
        thread.join(10)
    assert set(probe.statuses) == {200}
    assert max(probe.latencies) < HEALTH_MAX_S, max(probe.latencies)


def _gauge(srv: RunningServer) -> float:
    text = httpx.get(srv.base_url + "/metrics", timeout=10).text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("voxserve_ws_sessions ")]
    return float(line.split()[1])


# -- raw sockets: clients that vanish without a closing handshake ----------------------------
def _raw_session(srv: RunningServer, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf is not None:  # a small window, set before connecting, fills the pipe quickly
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", _port(srv)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /v1/audio/speech/stream HTTP/1.1\r\nHost: 127.0.0.1:{_port(srv)}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while not head.endswith(b"\r\n\r\n"):  # a byte at a time: leave the frames unread
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _frame(text: str) -> bytes:
    payload, mask = text.encode(), os.urandom(4)
    n = len(payload)
    if n < 126:
        header = bytes([0x81, 0x80 | n])
    elif n < 65536:
        header = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        header = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _reset(sock: socket.socket) -> None:
    """Vanish: close with a TCP reset and no WebSocket close frame."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# -- finding 1: text that never completes a clause -------------------------------------------
# Abbreviations, initials and numbers with inner periods: no period here ends a sentence,
# and each fragment ends on "St." with the next one starting with a space. Before the fix
# none of it was ever cut, and every fragment rescanned all of it on the event loop.
FRAGMENTS = [" Dr. J. 3.14 Mr. no. 1.000.000 St." * 60] * 30  # 2 KB each


def test_abbreviation_fragments_are_cut_and_spoken_while_health_answers(server: RunningServer) -> None:
    """Default limits: the text is cut at the clause limit and spoken; the reader stops
    reading while the segment queue is full, and the loop never stalls."""
    with served_meanwhile(server), connect(_url(server), close_timeout=1) as ws:

        def send_fragments() -> None:
            for f in FRAGMENTS:
                _send(ws, type="input.text", text=f)

        sender = threading.Thread(target=send_fragments)
        sender.start()
        first = json.loads(ws.recv(timeout=30))
        assert first["type"] == "audio.start", first
        assert first["text"].startswith("Dr. J. 3.14")
        assert len(first["text"]) <= MAX_SEGMENT_CHARS
        assert isinstance(ws.recv(timeout=30), bytes)
        sender.join(30)  # TCP took every fragment, though the server reads no more for now
        assert not sender.is_alive()
    wait_for(lambda: server.state.ws_open == 0 and not server.state.admission.active, timeout=10)


def test_pending_text_past_the_cap_ends_the_session(srv: RunningServer) -> None:
    with served_meanwhile(srv), connect(_url(srv), close_timeout=1) as ws:
        for fragment in FRAGMENTS[:3]:
            with contextlib.suppress(ConnectionClosed):
                _send(ws, type="input.text", text=fragment)
        events, code = _until_closed(ws)
    assert "pending_text_too_long" in _errors(events) and code == 1008
    error = [e for e in events if e["type"] == "error"][-1]
    assert str(LIMITS.max_pending_chars) in error["message"]
    wait_for(lambda: srv.state.ws_open == 0 and not srv.state.admission.active, timeout=5)


# -- finding 4: a client that vanishes with a full queue -------------------------------------
@pytest.mark.parametrize("how", ["reset", "stalled"])
def test_a_vanished_client_with_a_full_queue_ends_its_session(srv: RunningServer, how: str) -> None:
    """40 clauses, a little audio read, then the client is gone: with a TCP reset, or
    silent (it reads nothing more and never closes, as when its network drops)."""
    with served_meanwhile(srv):
        sock = _raw_session(srv, rcvbuf=4096 if how == "stalled" else None)
        for i in range(40):
            sock.sendall(_frame(json.dumps({"type": "input.text", "text": f"This is clause {i} of a long answer, "})))
        got = b""
        while len(got) < 20_000:  # the first audio.start and some audio
            got += sock.recv(4096)
        wait_for(lambda: srv.state.admission.active == 1, timeout=5)
        assert srv.state.ws_open == 1 and _gauge(srv) == 1
        if how == "reset":
            _reset(sock)
        took = wait_for(lambda: srv.state.ws_open == 0, timeout=5 + LIMITS.send_timeout_s)
        wait_for(lambda: not srv.state.admission.active, timeout=2)
        assert _gauge(srv) == 0
        if how == "stalled":
            assert took >= LIMITS.send_timeout_s * 0.9  # gone once a send had waited that long
            sock.close()


# -- the session cap ------------------------------------------------------------------------
def test_sessions_past_the_cap_are_refused_with_1013(srv: RunningServer) -> None:
    with served_meanwhile(srv), contextlib.ExitStack() as stack:
        held = [stack.enter_context(connect(_url(srv))) for _ in range(LIMITS.max_sessions)]
        wait_for(lambda: srv.state.ws_open == LIMITS.max_sessions, timeout=5)
        with connect(_url(srv)) as extra:
            events, code = _until_closed(extra, timeout=10)
        assert _errors(events) == ["too_many_sessions"] and code == 1013
        assert srv.state.ws_open == LIMITS.max_sessions  # the refused one never counted
        held[0].close()
        wait_for(lambda: srv.state.ws_open == LIMITS.max_sessions - 1, timeout=5)
        with connect(_url(srv)) as again:  # room again
            _send(again, type="input.text", text="Hello.")
            _send(again, type="session.close")
            events, code = _until_closed(again)
        assert code == 1000 and not _errors(events)
        assert [e["type"] for e in events][-1] == "session.done"


# -- message size and rate -------------------------------------------------------------------
def test_a_message_past_the_size_limit_closes_with_1009(srv: RunningServer) -> None:
    with served_meanwhile(srv):
        with connect(_url(srv)) as ws:
            # Exactly at the limit: refused as a fragment, but the session stays open.
            text = "x" * (LIMITS.max_message_bytes - len(json.dumps({"type": "input.text", "text": ""})))
            _send(ws, type="input.text", text=text)
            assert json.loads(ws.recv(timeout=10))["code"] == "input_too_long"
            ws.send(json.dumps({"type": "input.text", "text": text + "y"}))  # one byte more
            events, code = _until_closed(ws, timeout=10)
        assert code == 1009
        assert _errors(events) in ([], ["message_too_large"])  # ours, or uvicorn's own close
        with connect(_url(srv)) as ws:  # binary counts too, and the limit holds per message
            ws.send(b"\x00" * (LIMITS.max_message_bytes + 1))
            _, code = _until_closed(ws, timeout=10)
        assert code == 1009
    # The handler enforces the limit itself, whatever the ASGI server lets through: here
    # uvicorn's own limit (read for each new connection) is raised for one session.
    uvicorn_config = srv.server.config
    uvicorn_limit = uvicorn_config.ws_max_size
    uvicorn_config.ws_max_size = 1 << 20
    try:
        with connect(_url(srv)) as ws:
            ws.send(json.dumps({"type": "input.text", "text": text + "y"}))
            events, code = _until_closed(ws, timeout=10)
    finally:
        uvicorn_config.ws_max_size = uvicorn_limit
    assert _errors(events) == ["message_too_large"] and code == 1009


def test_a_flood_of_messages_is_rate_limited_with_1008(srv: RunningServer) -> None:
    with served_meanwhile(srv):
        with connect(_url(srv)) as ws:  # a burst within the limit is fine
            for _ in range(LIMITS.message_burst - 5):
                _send(ws, type="input.text", text="")
            _send(ws, type="input.text", text="Fine.")
            _send(ws, type="session.close")
            events, code = _until_closed(ws)
        assert code == 1000 and not _errors(events)
        with connect(_url(srv)) as ws:
            with contextlib.suppress(ConnectionClosed):
                for _ in range(LIMITS.message_burst * 5):
                    _send(ws, type="input.text", text="a")
            events, code = _until_closed(ws)
        assert _errors(events)[-1] == "rate_limited" and code == 1008


def test_token_bucket_and_message_size() -> None:
    bucket = TokenBucket(rate=10, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.take(0.1) and not bucket.take(0.1)  # one more every 100 ms
    assert sum(bucket.take(100.0) for _ in range(10)) == 3  # never more than the burst
    assert message_size({"text": "\u00e9" * 10}, 100) == 10  # plainly small: not encoded
    assert message_size({"text": "\u00e9" * 30}, 100) == 60
    assert message_size({"text": "x" * 101}, 100) == 101
    assert message_size({"bytes": b"12345"}, 100) == 5


# -- idle sessions ----------------------------------------------------------------------------
def test_an_idle_session_is_closed_but_not_while_it_speaks(srv: RunningServer) -> None:
    with served_meanwhile(srv):
        with connect(_url(srv)) as ws:
            started = time.monotonic()
            events, code = _until_closed(ws, timeout=10)
        assert _errors(events) == [] and code == 1000  # a normal close, no error event
        assert LIMITS.idle_timeout_s * 0.9 < time.monotonic() - started < LIMITS.idle_timeout_s + 3
        with connect(_url(srv)) as ws:
            text = "This is read out while the client says nothing. So is this."
            _send(ws, type="input.text", text=text)
            _send(ws, type="input.done")
            events, code = _until_closed(ws, timeout=30)
        kinds = [e["type"] for e in events]
        assert kinds[-1] == "input.flushed" and code == 1000  # idle only once all was spoken


# -- Origin ----------------------------------------------------------------------------------
def test_origin_same_origin_or_allowed_only(srv: RunningServer, server: RunningServer) -> None:
    own = srv.base_url
    for origin in [None, Origin(own), Origin(APP_ORIGIN), Origin(APP_ORIGIN + ":443")]:
        with connect(_url(srv), origin=origin) as ws:
            _send(ws, type="session.close")
            assert _until_closed(ws)[1] == 1000, origin
    foreign = ["https://evil.example", "http://app.example.com", "null", own.replace("127.0.0.1", "localhost")]
    for origin in map(Origin, foreign):
        with pytest.raises(InvalidStatus) as refused:
            connect(_url(srv), origin=origin)
        assert refused.value.response.status_code == 403, origin
    assert srv.state.ws_open == 0
    # The default server: its own origin, or none.
    with pytest.raises(InvalidStatus):
        connect(_url(server), origin=Origin(APP_ORIGIN))
    with connect(_url(server), origin=Origin(server.base_url)) as ws:
        _send(ws, type="session.close")
        assert _until_closed(ws)[1] == 1000


def test_origin_policy() -> None:
    def refused(policy: OriginPolicy, origin: str | None, host: str = "voice.example:8000") -> bool:
        headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin is not None else [])
        return policy.refusal(headers) is not None

    own = OriginPolicy()
    assert not refused(own, None)
    assert not refused(own, "http://voice.example:8000") and not refused(own, "https://VOICE.example:8000")
    assert refused(own, "http://voice.example:8001") and refused(own, "http://voice.example")
    assert not refused(own, "https://voice.example", host="voice.example")  # default port, both sides
    assert not refused(own, "http://[::1]:8000", host="[::1]:8000")
    assert refused(own, "null") and refused(own, "not an origin") and refused(own, "http://a.example/path")
    assert refused(own, "http://evil.example", host="")
    two = [(b"host", b"a.example"), (b"origin", b"http://a.example"), (b"origin", b"http://a.example")]
    assert own.refusal(two) is not None
    listed = OriginPolicy(["https://app.example.com", "null"])
    assert not refused(listed, "https://app.example.com:443") and not refused(listed, "null")
    assert refused(listed, "http://app.example.com") and refused(listed, "https://sub.app.example.com")
    assert not refused(OriginPolicy(["*"]), "https://anything.example")
    with pytest.raises(ValueError):
        OriginPolicy(["app.example.com"])
    with pytest.raises(ValueError):
        ServerConfig(allowed_origins=("app.example.com",))


# -- a failure that is not a VoxError (keep this test last: it breaks the module's server) ----
def test_a_failure_that_is_not_a_vox_error_ends_the_session_with_1011(
    srv: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A real failure: the text pool refuses work once shut down (as during a shutdown),
    with a RuntimeError, not a VoxError. Before, the speaker task died silently and the
    session hung once its queue was full. Speech needs the text pool, so the normal
    request meanwhile is the voice list."""
    with served_meanwhile(srv, speech=False):
        srv.state.text_pool.shutdown()
        with connect(_url(srv)) as ws:
            _send(ws, type="input.text", text="This sentence never reaches the engine.")
            _send(ws, type="input.done")
            events, code = _until_closed(ws, timeout=10)
        assert _errors(events) == ["internal_error"] and code == 1011
        wait_for(lambda: srv.state.ws_open == 0 and not srv.state.admission.active, timeout=5)
    failures = [r.exc_info[1] for r in caplog.records if r.name == "voxserve.api.ws" and r.exc_info]
    assert len(failures) == 1 and "cannot schedule new futures" in str(failures[0])
