"""The Ray cluster the Ray tests share: two Ray nodes on loopback, each its own raylet
(Ray's `Cluster` helper), Ray's token authentication on, and the voxserve application
deployed with two TTS replicas, one ASR replica and two front ends behind HAProxy.

It starts once, for the first test that asks for it (`ray_deployment` in
tests/conftest.py), and stops after the last one: tests/test_ray.py, then
tests/test_ray_ws.py, whose last test tears it down and checks that no Ray process is
left. Every replica runs one inference thread, so the 2-core machine is not
oversubscribed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.asr_support import LONG
from voxserve.config import ASRConfig, RayConfig, Replicas, ServerConfig, TTSConfig, WSConfig

with warnings.catch_warnings():
    # Ray Serve's pydantic models use keyword arguments pydantic 2 deprecates.
    warnings.simplefilter("ignore", DeprecationWarning)
    ray = pytest.importorskip("ray")
    from ray import serve
    from ray._private.authentication_test_utils import reset_auth_token_state
    from ray.cluster_utils import Cluster

    from voxserve.ray.launcher import APP_NAME, deploy
    from voxserve.serving.jobs import ReplicaRef

RAY_MARKS = [
    pytest.mark.slow,
    # A cluster loads both cores, its tests time the replicas, and one may run at a time.
    pytest.mark.serial,
    pytest.mark.timeout(150),
    # Ray's own modules warn about their internals on import and shutdown.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
"""The marks of every module that uses the cluster."""

REPLICA = "x-voxserve-replica"
HA_PROXY = "RAY_SERVE_ENABLE_HA_PROXY"
DRAIN = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"
CLUSTER_ENV = (HA_PROXY, DRAIN, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
RAY_BIN = Path(sys.executable).with_name("ray")
STORY = " ".join(LONG[:6])
"""About 40 s of speech: long enough that a stream is still running while we act on it."""
WS_CAP = 3
"""`--ws-max-sessions` for the cluster: the most any WebSocket test holds at once."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_processes(pattern: str = "raylet|gcs_server") -> list[str]:
    """The processes whose command line matches `pattern`: by default Ray's node daemons."""
    out = subprocess.run(["pgrep", "-af", pattern], check=False, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


ANY_RAY = "raylet|gcs_server|ray::|ray/_private|ray/dashboard|ray/autoscaler"
"""Every process of a Ray node: its daemons, agents and monitors, and its workers."""


@dataclass
class RayDeployment:
    base_url: str
    cluster: Cluster
    agent_url: str = ""
    closed: bool = False

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            self.cluster.shutdown()
            # `ray stop` (its CLI costs ~3 s of CPU to start) only for what the cluster
            # left behind, usually nothing.
            if ray_processes(ANY_RAY):
                subprocess.run([str(RAY_BIN), "stop", "--force"], check=False, capture_output=True, timeout=60)


@contextlib.contextmanager
def running_deployment(frontends: int = 2, ws: WSConfig | None = None) -> Iterator[RayDeployment]:
    """The two-node cluster with the voxserve application deployed, torn down on exit:
    `frontends` HTTP front ends, with `ws`'s WebSocket limits."""
    if ray_processes():
        pytest.skip("another Ray cluster is running on this machine")
    config = ServerConfig(
        # Piper alone: these tests route, stream and fail tts-1 only, and each Kokoro a
        # replica loads (three at start and one more when a replica is replaced) costs
        # seconds of the two cores that the whole cluster shares.
        tts=replace(TTSConfig(), models=("piper",), workers=1, audio_workers=1, noise_scale=0.0, noise_w=0.0),
        # tiny.en alone: the ASR replica's routing is the one-machine server's, tested there.
        asr=replace(ASRConfig(), models=("whisper-tiny.en",), workers=1, audio_workers=1),
        ws=ws or WSConfig(max_sessions=WS_CAP),
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
        port = free_port()
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



def _replica_names(deployment: str) -> list[str]:
    """The Serve replicas of `deployment` that Ray knows by name (live, or just dead)."""
    named = ray.util.list_named_actors(all_namespaces=True)
    return sorted(actor["name"] for actor in named if f"#{deployment}#" in actor["name"])


def describe(deployment: str, name: str) -> dict[str, Any] | None:
    """What the replica `name` says of itself (its `describe`, routed to it alone), or
    None when it is gone."""
    handle = serve.get_deployment_handle(deployment, app_name=APP_NAME)
    try:
        info: dict[str, Any] = handle.describe.remote(ReplicaRef(name)).result(timeout_s=10)
    except Exception as exc:  # noqa: BLE001 - a replica that just died
        print(f"describe {name} failed: {exc!r}")
        return None
    return info if info["replica"] == name else None


def tts_replicas(deadline_s: float = 30.0, count: int = 2) -> dict[str, dict[str, Any]]:
    """Every live TTS replica's name, pid, node and routing stats, each asked directly
    (a routed call would favour the replica with the most headroom): waits up to
    `deadline_s` for `count` of them."""
    deadline = time.monotonic() + deadline_s
    while True:
        seen = {name: info for name in _replica_names("TTS") if (info := describe("TTS", name)) is not None}
        if len(seen) >= count or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)


def speech_json(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm", **extra}
