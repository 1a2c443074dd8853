"""`voxserve serve --ray [ADDRESS]`: lay voxserve out on a Ray cluster and serve until stopped.

One Serve application, `voxserve`, with three deployments: `Frontend` (the ingress,
bound to `/`), `TTS` and `ASR`; with more than one front end, a fourth, `Sessions`, whose
one replica keeps the cluster's WebSocket session cap (`voxserve.ray.leases`). Each deployment has its own replica count or autoscaling
bounds, and reserves the logical CPUs its inference threads use, so that Ray places
replicas where there are cores for them. Serve's proxy listens on the server's host
and port on every node that runs one.

With no address, the local instance is prepared by `voxserve.ray.environment` before
Ray is imported: every Ray and HAProxy listener on loopback (only the Serve HTTP front
end on `--host`), token authentication, private sockets. `serve_on_ray` checks the
node IP and refuses to serve if Ray did not take it. On SIGINT or SIGTERM (also during
start-up) it stops within `LOCAL_SHUTDOWN_S` plus Ray's own teardown, and leaves no Ray
or HAProxy process behind.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

import ray
from ray import serve
from ray.serve.deployment import Application
from ray.serve.schema import ApplicationStatus

from voxserve.config import RayConfig, Replicas, ServerConfig, default_cores
from voxserve.engine.asr import requests_limit
from voxserve.ray.environment import LOOPBACK, LocalRuntime, adopt_orphans
from voxserve.ray.frontend import Frontend
from voxserve.ray.leases import SessionKeeper
from voxserve.ray.replicas import ASRReplica, TTSReplica
from voxserve.ray.router import HeadroomRouter

__all__ = ["APP_NAME", "build_app", "deploy", "serve_on_ray"]

log = logging.getLogger(__name__)

APP_NAME = "voxserve"
FRONTEND_MAX_REQUESTS = 1024
"""Requests one front end holds at once. It only relays; the engines' admission limits."""
KEEPER_MAX_REQUESTS = 1024
"""Calls the session keeper takes at once; each is a few dictionary operations."""
CONTROL_CALLS = 8
"""Room per engine replica for small calls (catalog, describe) beside its streams."""
SHUTDOWN_S = 5.0
"""How long Serve lets a stopping replica finish its requests on a cluster."""
LOCAL_SHUTDOWN_S = 2.0
"""The same on a local instance, where SIGTERM must end the whole process within 10 s."""
ROUTING_STATS_PERIOD_S = 1.0
"""How often Serve polls each replica's load for `HeadroomRouter`: a second is well under
the time a stream takes, and each poll costs every replica a call."""
HEALTH_CHECK_S = 2.0
"""How often Serve asks each replica whether it is alive and its workers are (the replica's
`check_health`). Serve notices a replica that died (killed, out of memory) only at its
next check, and starts its replacement then: its default of 10 s would leave the
deployment a replica short for up to that long. A check is one small call."""
DRAIN_POLL_S = 0.2
"""How often a stopping replica checks whether its requests are done (Serve's default: 2 s)."""
DEPLOY_POLL_S = 0.2
"""How often a local start-up checks whether the application runs (or a signal came)."""


def _scale(replicas: Replicas) -> dict[str, Any]:
    if replicas.autoscaling:
        return {
            "autoscaling_config": {
                "min_replicas": replicas.min,
                "max_replicas": replicas.max,
                "target_ongoing_requests": replicas.target,
            }
        }
    return {"num_replicas": replicas.count}


def build_app(config: ServerConfig, layout: RayConfig) -> Application:
    """The `voxserve` application: front end, TTS and (unless ASR is off) ASR deployments."""
    lifecycle: dict[str, Any] = {
        "graceful_shutdown_timeout_s": SHUTDOWN_S if layout.address else LOCAL_SHUTDOWN_S,
        "graceful_shutdown_wait_loop_s": DRAIN_POLL_S,
        "health_check_period_s": HEALTH_CHECK_S,
    }
    keeper = None
    if layout.frontend_replicas > 1:
        keeper = serve.deployment(
            name="Sessions",
            num_replicas=1,  # one book of leases; a restarted one learns them from the renewals
            ray_actor_options={"num_cpus": 0},
            max_ongoing_requests=KEEPER_MAX_REQUESTS,
            **lifecycle,
        )(SessionKeeper).bind(config.ws.max_sessions)
    frontend = serve.deployment(
        name="Frontend",
        num_replicas=layout.frontend_replicas,
        ray_actor_options={"num_cpus": layout.frontend_cpus},
        max_ongoing_requests=FRONTEND_MAX_REQUESTS,
        **lifecycle,
    )(serve.ingress()(Frontend))
    tts, asr = _tts_app(config, layout, lifecycle), _asr_app(config, layout, lifecycle)
    return frontend.bind(config, tts, asr, keeper)


def _engine_options(replicas: Replicas, lifecycle: dict[str, Any]) -> dict[str, Any]:
    """What both engine deployments take: the headroom router, the lifecycle, the scale."""
    router = {
        "request_router_class": HeadroomRouter,
        "request_routing_stats_period_s": ROUTING_STATS_PERIOD_S,
    }
    return {"request_router_config": router, **lifecycle, **_scale(replicas)}


def _tts_app(config: ServerConfig, layout: RayConfig, lifecycle: dict[str, Any]) -> Application:
    tts = config.tts
    return serve.deployment(
        name="TTS",
        ray_actor_options={"num_cpus": tts.workers},
        # Past this Serve would queue in front of the replica; voxserve's own admission
        # queues (or answers 429) well before, with the same rules as one machine.
        # (a replica's device is not known here: the larger, GPU default counts).
        max_ongoing_requests=tts.stream_limit(gpu=True) + tts.max_queue + CONTROL_CALLS,
        **_engine_options(layout.tts, lifecycle),
    )(TTSReplica).bind(config)


def _asr_app(config: ServerConfig, layout: RayConfig, lifecycle: dict[str, Any]) -> Application | None:
    asr = config.asr
    if not asr.enabled:
        return None
    return serve.deployment(
        name="ASR",
        ray_actor_options={"num_cpus": asr.workers},
        # A live session holds one call for its life and makes one more at a time. An
        # unset request limit counts at a batched device's (the larger), since the
        # replica resolves its device itself; its own admission holds the rest.
        max_ongoing_requests=(
            (asr.max_requests or requests_limit(True, asr.gpu_batch))
            + asr.max_queue + 2 * config.realtime.max_sessions + CONTROL_CALLS
        ),
        **_engine_options(layout.asr, lifecycle),
    )(ASRReplica).bind(config)


def deploy(config: ServerConfig, layout: RayConfig, stop: threading.Event | None = None) -> bool:
    """Deploy (or update) the application on the connected cluster. Serve must already
    be started with the HTTP options.

    Without `stop`, returns once every deployment is running. With it, returns as soon
    as `stop` is set as well: False if it was set before the application ran.
    """
    if stop is None:
        serve.run(build_app(config, layout), name=APP_NAME, route_prefix="/", blocking=False)
        return True
    target = serve.RunTarget(target=build_app(config, layout), name=APP_NAME, route_prefix="/")
    serve.run_many([target], wait_for_applications_running=False)
    while not stop.wait(DEPLOY_POLL_S):
        app = serve.status().applications.get(APP_NAME)
        if app is None:
            continue
        if app.status == ApplicationStatus.RUNNING:
            return True
        if app.status == ApplicationStatus.DEPLOY_FAILED:
            raise RuntimeError(f"deploying {APP_NAME} failed: {app.message}")
    return False


def _cpus_wanted(config: ServerConfig, layout: RayConfig) -> float:
    def most(r: Replicas) -> int:
        return r.max if r.max is not None else r.count

    wanted = most(layout.tts) * config.tts.workers + layout.frontend_replicas * layout.frontend_cpus
    if config.asr.enabled:
        wanted += most(layout.asr) * config.asr.workers
    return wanted


def _start_local(config: ServerConfig, layout: RayConfig, local: LocalRuntime) -> None:
    adopt_orphans()  # so that LocalRuntime.close finds whatever Ray leaves behind
    # As many logical CPUs as the replicas reserve, so that they all start, sharing the
    # cores as a single voxserve server's threads would.
    ray.init(
        num_cpus=max(default_cores(), int(_cpus_wanted(config, layout) + 0.999)),
        _node_ip_address=LOOPBACK,
        include_dashboard=False,
        _temp_dir=str(local.ray_dir),
    )
    node_ip = ray.util.get_node_ip_address()
    if node_ip != LOOPBACK:
        raise RuntimeError(
            f"the local Ray node took address {node_ip}, not {LOOPBACK}: refusing to serve "
            "(was ray imported before voxserve.ray.environment.prepare_local?)"
        )


def serve_on_ray(config: ServerConfig, layout: RayConfig, local: LocalRuntime | None = None) -> int:
    """Connect (or start a local cluster), deploy, and serve until SIGINT or SIGTERM.

    A local cluster (`layout.address` None) needs `local`, from
    `voxserve.ray.environment.prepare_local` called before Ray was imported; it is
    closed on the way out, after `ray.shutdown()`. A signal during a local start-up
    ends it after the step under way (`ray.init`, `serve.start`, or within
    `DEPLOY_POLL_S` while the application deploys) and cleans up the same way.
    """
    if layout.address is None and local is None:
        raise RuntimeError("a local Ray instance needs voxserve.ray.environment.prepare_local() first")
    stop = threading.Event()
    deploying = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    if local is not None:  # a signal during start-up stops it at the next step
        for sig in signals:
            signal.signal(sig, on_signal)
    try:
        if local is not None:
            _start_local(config, layout, local)
            # ray.init installs Ray's fatal-signal handler, which aborts on SIGTERM.
            for sig in signals:
                signal.signal(sig, on_signal)
        else:
            ray.init(address=layout.address)
        if not stop.is_set():
            host = config.host if local is None else local.serve_host
            serve.start(http_options={"host": host, "port": config.port})
        if not stop.is_set():
            deploying = True
            running = deploy(config, layout, stop if local is not None else None)
            for sig in signals:
                signal.signal(sig, on_signal)
            if running:
                log.info("voxserve is serving on Ray at http://%s:%d", config.host, config.port)
        stop.wait()
    finally:
        _stop(local, deploying, previous)
    return 0


def _stop(local: LocalRuntime | None, deploying: bool, previous: dict[signal.Signals, Any]) -> None:
    """Take the application down (the whole local instance, or only this application on a
    shared cluster), leave Ray, and give the signals their handlers back."""
    log.info("stopping the voxserve application")
    started = time.monotonic()
    try:
        if local is not None and ray.is_initialized():
            serve.shutdown()
        elif deploying:
            serve.delete(APP_NAME)  # other applications on a shared cluster keep running
    finally:
        served = time.monotonic()
        ray.shutdown()
        if local is not None:
            stragglers = local.close()
            if stragglers:
                log.warning("stopped %d Ray or HAProxy processes that outlived ray.shutdown", len(stragglers))
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        log.info("stopped: Serve in %.1f s, Ray in %.1f s", served - started, time.monotonic() - served)
