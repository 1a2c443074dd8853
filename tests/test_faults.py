"""Inference failures, injected by wrapping the real voice model (`tests/voice_support.py`):
only the affected stream fails, in the OpenAI error shape before audio starts, or visibly
truncated after it started."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, run_server, tts_config
from tests.voice_support import HookedVoice, StageHook
from voxserve.config import ASRConfig
from voxserve.engine.tts import TTSEngine
from voxserve.engine.tts_models import load_models

TEXT = "One sentence here. And another sentence follows it. Then a third one closes the text."


class InjectedFault(RuntimeError):
    pass


class WorkerCrash(BaseException):
    """Not an Exception: escapes the per-work error handling and kills the thread."""


def fail_on(stage: str, call: int, exc: type[BaseException] = InjectedFault) -> StageHook:
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


@contextlib.contextmanager
def hooked_server(**tts: Any) -> Iterator[tuple[HookedVoice, RunningServer]]:
    """A server whose one voice model is Piper, wrapped."""
    config = replace(tts_config(models=("piper",), **tts), asr=ASRConfig(enabled=False))
    (piper,) = load_models(config.tts)
    model = HookedVoice(piper)
    with run_server(config, engine=TTSEngine(config.tts, models=[model])) as srv:
        yield model, srv


@pytest.fixture(scope="module")
def faulty() -> Iterator[tuple[HookedVoice, RunningServer]]:
    """Two workers, so that one survives the module's last test, which kills the other."""
    with hooked_server(workers=2) as running:
        yield running


@pytest.fixture()
def hooked(faulty: tuple[HookedVoice, RunningServer]) -> Iterator[HookedVoice]:
    model, _ = faulty
    yield model
    model.hook = None


@pytest.fixture()
def client(faulty: tuple[HookedVoice, RunningServer]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=faulty[1].base_url, timeout=30) as c:
        yield c


def test_failure_before_audio_is_a_500_in_openai_shape(hooked: HookedVoice, client: httpx.Client) -> None:
    hooked.hook = fail_on("acoustic", 1)
    r = post(client)
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["type"] == "server_error" and "synthesis failed" in error["message"]
    hooked.hook = None
    assert post(client).status_code == 200  # the server carries on
    assert client.get("/health").status_code == 200


def test_failure_mid_stream_truncates_the_body(hooked: HookedVoice, client: httpx.Client) -> None:
    hooked.hook = fail_on("vocoder", 3)
    with pytest.raises(httpx.RemoteProtocolError):
        post(client)
    hooked.hook = None
    assert post(client).status_code == 200


def test_failure_mid_stream_sends_an_sse_error_event(hooked: HookedVoice, client: httpx.Client) -> None:
    hooked.hook = fail_on("vocoder", 3)
    r = post(client, stream_format="sse")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events[:2]] == ["speech.audio.delta", "speech.audio.delta"]
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["type"] == "server_error"


def test_dead_worker_turns_health_503(hooked: HookedVoice, faulty: tuple[HookedVoice, RunningServer]) -> None:
    """The module's last test: the server it leaves has a dead worker."""
    model, srv = faulty
    assert srv.state.engine.healthy and len(srv.state.engine.dead_workers) == 0
    model.hook = fail_on("acoustic", 1, WorkerCrash)
    with httpx.Client(base_url=srv.base_url, timeout=5) as c:
        r = c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."})
        assert r.status_code == 500  # the stream in hand fails; nothing hangs
        health = c.get("/health")
        assert health.status_code == 503
        assert health.json()["status"] == "unhealthy" and health.json()["dead_workers"]
        assert "voxserve_healthy 0.0" in c.get("/metrics").text
        # The surviving worker still serves.
        model.hook = None
        assert c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."}).status_code == 200
