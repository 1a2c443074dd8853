"""voxserve on Ray Serve, through the real stack: two Ray nodes on loopback, two TTS
replicas, one ASR replica and the HTTP front end behind Serve's proxy.

The cluster starts once for the module (Ray's own `Cluster` helper: a head and a second
node, each its own raylet). Every replica runs one inference thread, so the 2-core
machine is not oversubscribed. The last test tears everything down and checks that no
Ray process is left.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.asr_support import LONG, RATE, speak_pcm, wav_bytes, wer, with_gaps
from voxserve.config import ASRConfig, RayConfig, Replicas, ServerConfig, TTSConfig
from voxserve.errors import NotFound, Overloaded, ServerError

with warnings.catch_warnings():
    # Ray Serve's pydantic models use keyword arguments pydantic 2 deprecates.
    warnings.simplefilter("ignore", DeprecationWarning)
    ray = pytest.importorskip("ray")
    from ray import serve
    from ray.cluster_utils import Cluster
    from ray.exceptions import ActorDiedError, RayTaskError

    from voxserve.ray.frontend import as_vox_error
    from voxserve.ray.headroom import headroom, rank_by_headroom
    from voxserve.ray.launcher import APP_NAME, deploy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(150),
    # Ray's own modules warn about their internals on import and shutdown.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

REPLICA = "x-voxserve-replica"
HA_PROXY = "RAY_SERVE_ENABLE_HA_PROXY"
RAY_BIN = Path(sys.executable).with_name("ray")
STORY = " ".join(LONG[:6])
"""About 40 s of speech: long enough that a stream is still running while we act on it."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "raylet|gcs_server"], check=False, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


@dataclass
class RayDeployment:
    base_url: str
    cluster: Cluster
    closed: bool = False
    notes: list[str] = field(default_factory=list)

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            self.cluster.shutdown()
            subprocess.run([str(RAY_BIN), "stop", "--force"], check=False, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def deployment() -> Iterator[RayDeployment]:
    if _ray_processes():
        pytest.skip("another Ray cluster is running on this machine")
    config = ServerConfig(
        tts=replace(TTSConfig(), workers=1, audio_workers=1, noise_scale=0.0, noise_w=0.0),
        asr=replace(ASRConfig(), workers=1, audio_workers=1),
    )
    layout = RayConfig(tts=Replicas(count=2), asr=Replicas(count=1), frontend_cpus=0.0)
    # HAProxy in front, as a local `voxserve serve --ray` runs it; the raylets inherit it.
    os.environ[HA_PROXY] = "1"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False},
    )
    running = RayDeployment("", cluster)
    try:
        cluster.add_node(num_cpus=2)
        ray.init(address=cluster.address, log_to_driver=False)
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        deploy(config, layout)
        assert subprocess.run(["pgrep", "-x", "haproxy"], check=False, capture_output=True).returncode == 0
        running.base_url = f"http://127.0.0.1:{port}"
        yield running
    finally:
        running.shutdown()
        os.environ.pop(HA_PROXY, None)


def _client(deployment: RayDeployment) -> httpx.Client:
    return httpx.Client(base_url=deployment.base_url, timeout=60)


def _speech(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm", **extra}


def _tts_replicas(deadline_s: float = 30.0) -> dict[str, dict[str, Any]]:
    """Every TTS replica's name, pid and node, asked through the deployment's handle."""
    handle = serve.get_deployment_handle("TTS", app_name=APP_NAME)
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + deadline_s
    while len(seen) < 2 and time.monotonic() < deadline:
        try:
            info = handle.describe.remote().result(timeout_s=10)
        except Exception as exc:  # noqa: BLE001 - a replica that just died; ask again
            print(f"describe failed: {exc!r}")
            continue
        seen[info["replica"]] = info
    return seen


# -- policy and error mapping, no cluster needed -------------------------------------------


def test_headroom_is_the_free_share_of_measured_capacity() -> None:
    assert headroom(None, None, 24.0) == 1.0
    assert headroom({"capacity": None, "limit": 20, "active": 3, "queued": 2}, None, 99.0) == 0.75
    assert headroom({"capacity": 10.0, "active": 3, "queued": 0}, None, 24.0) == 0.7
    # The router's in-flight count is newer than the last report.
    assert headroom({"capacity": 10.0, "active": 3, "queued": 0}, 6, 24.0) == 0.4
    assert headroom({"capacity": 10.0}, 12, 24.0) < 0
    # Idle replicas tie whatever their estimates; a fuller one ranks after them.
    shares = [headroom({"capacity": 31.0}, 0, 24), headroom({"capacity": 26.0}, 0, 24),
              headroom({"capacity": 31.0}, 12, 24), headroom({"capacity": 10.0}, 11, 24)]
    assert rank_by_headroom(["a", "b", "c", "d"], shares) == [["a", "b"], ["c"], ["d"]]


def test_replica_errors_become_the_same_vox_errors() -> None:
    overloaded = Overloaded("full", retry_after=7)
    wrapped = RayTaskError("speech", "traceback", overloaded).as_instanceof_cause()
    out = as_vox_error(wrapped)
    assert out is overloaded and out.status == 429 and out.retry_after == 7
    missing = NotFound("no voice", param="voice", code="voice_not_found")
    out = as_vox_error(RayTaskError("speech", "tb", missing).as_instanceof_cause())
    assert out is missing and out.body()["error"]["code"] == "voice_not_found"
    assert isinstance(as_vox_error(RayTaskError("speech", "tb", KeyError("x"))), ServerError)
    assert isinstance(as_vox_error(ActorDiedError()), ServerError)


# -- the deployment ------------------------------------------------------------------------


def test_front_end_is_ready_and_knows_the_models(deployment: RayDeployment) -> None:
    deadline = time.monotonic() + 60
    with _client(deployment) as c:
        while True:
            try:
                r = c.get("/v1/models")
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the front end never became ready"
            time.sleep(0.2)
        ids = {m["id"] for m in r.json()["data"]}
        assert {"tts-1", "en_US-joe-medium", "whisper-1"} <= ids
        voices = c.get("/v1/audio/voices").json()["voices"]
        assert {"id": "alloy", "name": "alloy", "alias_of": "joe"} in voices
        assert c.get("/health").json() == {"status": "ok"}


def test_requests_spread_over_both_tts_replicas(deployment: RayDeployment) -> None:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=deployment.base_url, timeout=60) as c:
            texts = [f"Request number {i} is here." for i in range(8)]
            return list(await asyncio.gather(*(c.post("/v1/audio/speech", json=_speech(t)) for t in texts)))

    responses = asyncio.run(run())
    assert all(r.status_code == 200 and len(r.content) > 4800 for r in responses)
    served = [r.headers[REPLICA] for r in responses]
    assert len(set(served)) == 2, served
    assert all("#TTS#" in name for name in served), served
    with _client(deployment) as c:
        metrics = c.get("/metrics").text
    for name in set(served):
        line = f'voxserve_replica_requests_total{{deployment="tts",replica="{name}"}}'
        assert line in metrics
        deployment.notes.append(name)


def test_errors_from_a_replica_keep_status_and_shape(deployment: RayDeployment) -> None:
    with _client(deployment) as c:
        # Raised in the replica by the single-machine checks.
        r = c.post("/v1/audio/speech", json=_speech("Hello.", voice="nobody"))
        assert r.status_code == 404
        error = r.json()["error"]
        assert error["param"] == "voice" and error["type"] == "invalid_request_error"
        r = c.post("/v1/audio/speech", json=_speech("Hello.", model="tts-9"))
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        r = c.post("/v1/audio/speech", json=_speech("!!! ... ???"))
        assert r.status_code == 400 and r.json()["error"]["param"] == "input"
        # Raised in the front end by the same validation.
        r = c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy"})
        assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_speech_streams_through_ray_unbuffered(deployment: RayDeployment) -> None:
    with _client(deployment) as c:
        started = time.perf_counter()
        first = None
        size = 0
        with c.stream("POST", "/v1/audio/speech", json=_speech(STORY)) as r:
            assert r.status_code == 200
            assert "#TTS#" in r.headers[REPLICA]
            for chunk in r.iter_bytes():
                if chunk and first is None:
                    first = time.perf_counter() - started
                size += len(chunk)
        total = time.perf_counter() - started
        audio_s = size / 2 / 24000
        assert audio_s > 25
        assert first is not None and first < 1.0 and first < total / 3, (first, total)

        events = []
        with c.stream("POST", "/v1/audio/speech", json=_speech(LONG[0], stream_format="sse")) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line)
        assert '"type":"speech.audio.delta"' in events[0]
        assert '"type":"speech.audio.done"' in events[-1]


def test_long_transcription_through_ray(deployment: RayDeployment) -> None:
    texts = LONG[:10]
    with _client(deployment) as c:
        pieces = [speak_pcm(c, t) for t in texts]
        samples, _ = with_gaps(pieces, gap_s=1.0)
        seconds = len(samples) / RATE
        assert 55 < seconds < 95
        files = {"file": ("long.wav", wav_bytes(samples), "audio/wav")}
        r = c.post("/v1/audio/transcriptions", files=files, data={"model": "whisper-1"}, timeout=120)
        assert r.status_code == 200, r.text
        assert "#ASR#" in r.headers[REPLICA]
        assert wer(" ".join(texts), r.json()["text"]) < 0.08
        # Streamed deltas come through the replica as SSE events.
        short = {"file": ("one.wav", wav_bytes(pieces[0]), "audio/wav")}
        with c.stream("POST", "/v1/audio/transcriptions", files=short,
                      data={"model": "whisper-1", "stream": "true"}) as s:
            lines = [line for line in s.iter_lines() if line.startswith("data: ")]
        assert '"type":"transcript.text.done"' in lines[-1]


def test_client_that_leaves_stops_its_replica_stream(deployment: RayDeployment) -> None:
    # Twenty sentences, over two minutes of audio: many seconds of work for one worker.
    with _client(deployment) as c, c.stream("POST", "/v1/audio/speech", json=_speech(" ".join(LONG))) as r:
        assert r.status_code == 200
        next(r.iter_bytes())
    left = time.monotonic()
    while True:
        busy = {name: info["active"] for name, info in _tts_replicas().items() if info["active"]}
        if not busy:
            break
        assert time.monotonic() - left < 5, f"streams still decoding after the client left: {busy}"
        time.sleep(0.1)


def test_killing_one_tts_replica_fails_only_its_streams(deployment: RayDeployment) -> None:
    replicas = _tts_replicas()
    assert len(replicas) == 2, replicas
    results: dict[int, dict[str, Any]] = {}
    started = threading.Barrier(5)

    def listen(i: int) -> None:
        out: dict[str, Any] = {"bytes": 0}
        results[i] = out
        try:
            with (
                httpx.Client(base_url=deployment.base_url, timeout=60) as c,
                c.stream("POST", "/v1/audio/speech", json=_speech(STORY)) as r,
            ):
                out["replica"] = r.headers[REPLICA]
                chunks = r.iter_bytes()
                out["bytes"] += len(next(chunks))
                started.wait(30)
                for chunk in chunks:
                    out["bytes"] += len(chunk)
            out["ok"] = True
        except Exception as exc:  # noqa: BLE001 - what the client sees is the point
            out["ok"] = False
            out["error"] = repr(exc)
            if started.n_waiting and not started.broken:
                started.abort()

    threads = [threading.Thread(target=listen, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait(30)
    victim = results[0]["replica"]
    os.kill(replicas[victim]["pid"], signal.SIGKILL)
    for t in threads:
        t.join(60)

    on_victim = [r for r in results.values() if r["replica"] == victim]
    on_other = [r for r in results.values() if r["replica"] != victim]
    assert on_victim and on_other, results
    assert not any(r["ok"] for r in on_victim), results
    full = max(r["bytes"] for r in on_other)
    assert all(r["ok"] and r["bytes"] == full for r in on_other), results

    # Serve replaces the dead replica; new requests succeed, on both replicas again.
    deadline = time.monotonic() + 90
    while True:
        now = _tts_replicas(deadline_s=5)
        if len(now) == 2 and victim not in now:
            break
        assert time.monotonic() < deadline, f"the TTS replica was not replaced: {now}"
        time.sleep(0.5)
    with _client(deployment) as c:
        r = c.post("/v1/audio/speech", json=_speech("Back again."))
        assert r.status_code == 200 and len(r.content) > 4800


def test_teardown_leaves_no_ray_process(deployment: RayDeployment) -> None:
    deployment.shutdown()
    deadline = time.monotonic() + 30
    while _ray_processes():
        assert time.monotonic() < deadline, _ray_processes()
        time.sleep(0.5)
