"""Inference failures through the runner fault hook: only the affected stream fails, in
the OpenAI error shape before audio starts, or visibly truncated after it started."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import MakeServer, RunningServer, tts_config
from voxserve.engine.voices import FaultHook, VoiceModel

TEXT = "One sentence here. And another sentence follows it. Then a third one closes the text."


class InjectedFault(RuntimeError):
    pass


class WorkerCrash(BaseException):
    """Not an Exception: escapes the per-work error handling and kills the thread."""


def fail_on(stage: str, call: int, exc: type[BaseException] = InjectedFault) -> FaultHook:
    lock = threading.Lock()
    seen = {"n": 0}

    def hook(which: str, batch: int) -> None:
        if which != stage:
            return
        with lock:
            seen["n"] += 1
            hit = seen["n"] == call
        if hit:
            raise exc(f"injected {stage} failure")

    return hook


def post(client: httpx.Client, **fields: object) -> httpx.Response:
    body = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm", **fields}
    return client.post("/v1/audio/speech", json=body)


@pytest.fixture()
def hooked(server: RunningServer) -> Iterator[VoiceModel[Any]]:
    model = server.state.engine.default_model
    yield model
    model.set_fault_hook(None)


def test_failure_before_audio_is_a_500_in_openai_shape(hooked: VoiceModel[Any], client: httpx.Client) -> None:
    hooked.set_fault_hook(fail_on("acoustic", 1))
    r = post(client)
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["type"] == "server_error" and "synthesis failed" in error["message"]
    hooked.set_fault_hook(None)
    assert post(client).status_code == 200  # the server carries on
    assert client.get("/health").status_code == 200


def test_failure_mid_stream_truncates_the_body(hooked: VoiceModel[Any], client: httpx.Client) -> None:
    hooked.set_fault_hook(fail_on("vocoder", 3))
    with pytest.raises(httpx.RemoteProtocolError):
        post(client)
    hooked.set_fault_hook(None)
    assert post(client).status_code == 200


def test_failure_mid_stream_sends_an_sse_error_event(hooked: VoiceModel[Any], client: httpx.Client) -> None:
    hooked.set_fault_hook(fail_on("vocoder", 3))
    r = post(client, stream_format="sse")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events[:2]] == ["speech.audio.delta", "speech.audio.delta"]
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["type"] == "server_error"


def test_dead_worker_turns_health_503(make_server: MakeServer) -> None:
    with make_server(tts_config(workers=2)) as srv:
        srv.state.engine.default_model.set_fault_hook(fail_on("acoustic", 1, WorkerCrash))
        with httpx.Client(base_url=srv.base_url, timeout=5) as c:
            r = c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."})
            assert r.status_code == 500  # the stream in hand fails; nothing hangs
            health = c.get("/health")
            assert health.status_code == 503
            assert health.json()["status"] == "unhealthy" and health.json()["dead_workers"]
            assert "voxserve_healthy 0.0" in c.get("/metrics").text
            # The surviving worker still serves.
            srv.state.engine.default_model.set_fault_hook(None)
            assert c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."}).status_code == 200
