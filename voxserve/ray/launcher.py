"""`voxserve serve --ray [ADDRESS]`: lay voxserve out on a Ray cluster and serve until stopped.

One Serve application, `voxserve`, with three deployments: `Frontend` (the ingress,
bound to `/`), `TTS` and `ASR`. Each deployment has its own replica count or autoscaling
bounds, and reserves the logical CPUs its inference threads use, so that Ray places
replicas where there are cores for them. Serve's proxy listens on the server's host
and port on every node that runs one.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

import ray
from ray import serve
from ray.serve.deployment import Application

from voxserve.config import RayConfig, Replicas, ServerConfig, default_cores
from voxserve.ray.frontend import Frontend
from voxserve.ray.replicas import ASRReplica, TTSReplica
from voxserve.ray.router import HeadroomRouter

__all__ = ["APP_NAME", "build_app", "deploy", "serve_on_ray"]

log = logging.getLogger(__name__)

APP_NAME = "voxserve"
FRONTEND_MAX_REQUESTS = 1024
"""Requests one front end holds at once. It only relays; the engines' admission limits."""
CONTROL_CALLS = 8
"""Room per engine replica for small calls (catalog, describe) beside its streams."""
SHUTDOWN_S = 5.0
"""How long Serve lets a stopping replica finish its requests."""


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
    tts, asr = config.tts, config.asr
    tts_deployment = serve.deployment(
        name="TTS",
        ray_actor_options={"num_cpus": tts.workers},
        # Past this Serve would queue in front of the replica; voxserve's own admission
        # queues (or answers 429) well before, with the same rules as one machine.
        max_ongoing_requests=tts.max_streams + tts.max_queue + CONTROL_CALLS,
        request_router_config={
            "request_router_class": HeadroomRouter,
            "request_routing_stats_period_s": layout.routing_stats_period_s,
        },
        graceful_shutdown_timeout_s=SHUTDOWN_S,
        **_scale(layout.tts),
    )(TTSReplica)
    asr_app = None
    if asr.enabled:
        asr_deployment = serve.deployment(
            name="ASR",
            ray_actor_options={"num_cpus": asr.workers},
            max_ongoing_requests=asr.max_requests + asr.max_queue + CONTROL_CALLS,
            graceful_shutdown_timeout_s=SHUTDOWN_S,
            **_scale(layout.asr),
        )(ASRReplica)
        asr_app = asr_deployment.bind(config)
    frontend = serve.deployment(
        name="Frontend",
        num_replicas=layout.frontend_replicas,
        ray_actor_options={"num_cpus": layout.frontend_cpus},
        max_ongoing_requests=FRONTEND_MAX_REQUESTS,
        graceful_shutdown_timeout_s=SHUTDOWN_S,
    )(serve.ingress()(Frontend))
    return frontend.bind(config, tts_deployment.bind(config), asr_app)


def deploy(config: ServerConfig, layout: RayConfig) -> None:
    """Deploy (or update) the application on the connected cluster; returns once every
    deployment is running. Serve must already be started with the HTTP options."""
    serve.run(build_app(config, layout), name=APP_NAME, route_prefix="/", blocking=False)


def _cpus_wanted(config: ServerConfig, layout: RayConfig) -> float:
    def most(r: Replicas) -> int:
        return r.max if r.max is not None else r.count

    wanted = most(layout.tts) * config.tts.workers + layout.frontend_replicas * layout.frontend_cpus
    if config.asr.enabled:
        wanted += most(layout.asr) * config.asr.workers
    return wanted


def serve_on_ray(config: ServerConfig, layout: RayConfig) -> int:
    """Connect (or start a local cluster), deploy, and serve until SIGINT or SIGTERM."""
    local = layout.address is None
    if local:
        # One machine: as many logical CPUs as the replicas reserve, so that they all
        # start, sharing the cores as a single voxserve server's threads would. Ray runs
        # its workers at nice 15 to favour its own daemons; here the replicas are the
        # server, so they keep a plain server's priority (unless set otherwise).
        os.environ.setdefault("RAY_worker_niceness", "0")
        # HAProxy in place of Serve's Python proxy: it adds 6-7 ms to the first audio
        # instead of 21-23 ms (docs/BENCHMARKS.md). Ray marks it experimental; set the
        # variable to 0 for Serve's own proxy.
        os.environ.setdefault("RAY_SERVE_ENABLE_HA_PROXY", "1")
        ray.init(num_cpus=max(default_cores(), int(_cpus_wanted(config, layout) + 0.999)))
    else:
        ray.init(address=layout.address)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    try:
        serve.start(http_options={"host": config.host, "port": config.port})
        deploy(config, layout)
        log.info("voxserve is serving on Ray at http://%s:%d", config.host, config.port)
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            stop.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        log.info("stopping the voxserve application")
        if local:
            serve.shutdown()
        else:
            serve.delete(APP_NAME)  # other applications on a shared cluster keep running
        ray.shutdown()
    return 0
