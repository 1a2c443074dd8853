"""Property-based fuzzing of `WS /v1/audio/speech/stream` against one real server.

Hypothesis generates sessions: valid text and configs, malformed JSON, wrong types,
unknown and out-of-order messages (text after `session.close`, `input.done` first),
binary frames, a message past the size limit, and an abrupt end (a close handshake, a
TCP reset, or `session.close` read to the end). After every example the session has
ended (no open session, no stream slot held), `/health` answers, and no example got an
`internal_error`; a probe thread checks `/health` and `/v1/models` all along, and no HTTP
answer is a 5xx. Derandomized, so CI runs the same examples every time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import RunningServer, wait_for

# The slowest /health probe during the fuzzing is bounded: run alone.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(300)]

_WORDS = ["Hello", "Dr.", "3.5", "10:30", "1,000", "no.", "J.", "ok", "\u2014", "!", "?", ",", "\n", "\u00e9t\u00e9", "\U0001f600"]

texts = st.lists(st.sampled_from(_WORDS), min_size=0, max_size=6).map(" ".join)
configs = st.fixed_dictionaries(
    {},
    optional={
        "voice": st.sampled_from(["alloy", "joe", "nobody", 5, {"id": "alloy"}]),
        "split": st.sampled_from(["clause", "sentence", "word"]),
        "response_format": st.sampled_from(["pcm", "wav", "mp3", None]),
        "speed": st.sampled_from([1.0, 2, 0.1, "fast", float("nan")]),
        "sample_rate": st.sampled_from([16000, 24000, 5, "x", None]),
        "extra": st.just(1),
    },
)
junk = st.one_of(
    st.text(max_size=40),  # mostly not JSON
    st.sampled_from(["[1, 2]", "null", "5", '"text"', "{}", '{"type": 5}', '{"type": null}', "[" * 3000]),
    st.builds(lambda v: json.dumps({"type": "input.text", "text": v}), st.one_of(st.integers(), st.none(), st.lists(st.integers(), max_size=3))),
    st.builds(lambda t: json.dumps({"type": t}), st.text(max_size=20)),
)
actions = st.one_of(
    st.tuples(st.just("text"), texts),
    st.tuples(st.just("config"), configs),
    st.tuples(st.sampled_from(["done", "close"]), st.none()),
    st.tuples(st.just("junk"), junk),
    st.tuples(st.just("binary"), st.binary(max_size=64)),
    st.tuples(st.just("huge"), st.none()),
)
endings = st.sampled_from(["close", "reset", "drain"])


def _url(srv: RunningServer) -> str:
    return srv.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def _send(ws: ClientConnection, kind: str, value: Any, limit: int) -> None:
    if kind == "text":
        ws.send(json.dumps({"type": "input.text", "text": value}))
    elif kind == "config":
        ws.send(json.dumps({"type": "session.config", **value}))
    elif kind == "done":
        ws.send(json.dumps({"type": "input.done"}))
    elif kind == "close":
        ws.send(json.dumps({"type": "session.close"}))
    elif kind == "junk" or kind == "binary":
        ws.send(value)
    elif kind == "huge":
        ws.send(json.dumps({"type": "input.text", "text": "x" * limit}))


def _drain(ws: ClientConnection, timeout: float) -> list[dict[str, Any]]:
    """Events that have arrived (waiting up to `timeout` for each next one)."""
    events: list[dict[str, Any]] = []
    with contextlib.suppress(TimeoutError, ConnectionClosed):
        while True:
            message = ws.recv(timeout=timeout)
            if isinstance(message, str):
                events.append(json.loads(message))
    return events


class _Probe:
    """Every 50 ms: GET /health and /v1/models; keeps every status and the slowest answer."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.statuses: list[int] = []
        self.slowest = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            while not self.stop.wait(0.05):
                for path in ("/health", "/v1/models"):
                    started = time.perf_counter()
                    self.statuses.append(client.get(path).status_code)
                    self.slowest = max(self.slowest, time.perf_counter() - started)


@pytest.fixture(scope="module")
def probed(server: RunningServer) -> Iterator[RunningServer]:
    # A reset under the sync client's reader thread makes it log its EOF as an error.
    client_log = logging.getLogger("websockets.client")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)
    probe = _Probe(server.base_url)
    thread = threading.Thread(target=probe.run, daemon=True)
    thread.start()
    yield server
    probe.stop.set()
    thread.join(10)
    client_log.setLevel(level)
    assert probe.statuses and all(s < 500 for s in probe.statuses)
    assert probe.slowest < 1.0, probe.slowest


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(actions, min_size=1, max_size=12), ending=endings)
def test_any_message_sequence_ends_cleanly(probed: RunningServer, steps: list[tuple[str, Any]], ending: str) -> None:
    state = probed.state
    limit = state.config.ws.max_message_bytes
    events: list[dict[str, Any]] = []
    with connect(_url(probed), close_timeout=1, open_timeout=10) as ws:
        try:
            for kind, value in steps:
                _send(ws, kind, value, limit)
                events += _drain(ws, 0)
            if ending == "drain":
                ws.send(json.dumps({"type": "session.close"}))
                events += _drain(ws, 30)  # until the server closes
            elif ending == "reset":  # vanish: a TCP reset, no close frame
                with contextlib.suppress(OSError):  # unless the server closed first
                    ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    ws.socket.shutdown(socket.SHUT_RDWR)
        except ConnectionClosed:
            pass  # the server ended the session (a message past the size limit, say)
    assert not [e for e in events if e.get("code") == "internal_error"], events
    # Every session ends, whatever was sent, and gives back what it held.
    wait_for(lambda: state.ws_open == 0 and not state.admission.active, timeout=10)
    assert httpx.get(probed.base_url + "/health", timeout=5).status_code == 200
