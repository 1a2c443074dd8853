"""The Starlette application: routes, shared state, lifecycle and error rendering.

Everything CPU-heavy is elsewhere: the engine's threads, the text pool and the audio
pool. Handlers here only parse, validate and await. Every `VoxError` is rendered by one
handler in the OpenAI error shape; anything else becomes a logged 500 in that shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from voxserve.api.access_log import AccessLog
from voxserve.api.auth import RequireKey
from voxserve.api.deadline import RequestDeadline
from voxserve.api.errors import error_response
from voxserve.api.hosts import AllowedHosts
from voxserve.api.metrics import Metrics, RequestCounter
from voxserve.api.openapi import openapi_endpoint
from voxserve.api.origin import CheckOrigin
from voxserve.api.playground import playground_routes
from voxserve.api.request_id import CheckRequestId
from voxserve.api.schemas import SPEECH_MODELS
from voxserve.api.speech import speech
from voxserve.api.transcriptions import ASR_MODELS, transcriptions, translations
from voxserve.api.ws import speech_stream
from voxserve.config import ServerConfig
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine
from voxserve.engine.pool import BoundedPool
from voxserve.engine.tts import OPENAI_VOICES, TTSEngine
from voxserve.engine.uploads import UploadBudget
from voxserve.errors import ClientClosed, ClientError, VoxError

if TYPE_CHECKING:
    from voxserve.api.remote import Remote

__all__ = ["AppState", "assemble", "create_app", "model_list", "running_state", "voice_list"]

log = logging.getLogger(__name__)

WORKER_JOIN_S = 0.5
"""How long shutdown waits, in all, for worker threads to leave the inference call they
are in (its results are discarded). A whisper batch can take seconds: then an exit hook
waits for it (`voxserve.engine.threads`), and `voxserve serve` leaves without it."""


@dataclass
class AppState:
    config: ServerConfig
    engine: TTSEngine
    admission: Admission
    metrics: Metrics
    text_pool: BoundedPool
    audio_pool: BoundedPool
    started_at: float = field(default_factory=time.time)
    asr: ASREngine | None = None
    """The speech-to-text engine; None when started with ASR off."""
    asr_pool: ThreadPoolExecutor | None = None
    """Threads that decode, cut and featurize uploads for the ASR engine."""
    asr_admission: Admission | None = None
    """Transcriptions in progress at once; more wait, then get 429."""
    ws_open: int = 0
    """WebSocket sessions open now, on every WebSocket route (`config.ws.max_sessions`)."""
    uploads: UploadBudget | None = None
    """Upload bytes read by transcriptions and not decoded yet, all together (429 past it)."""

    def new_request_id(self) -> str:
        return f"req_{uuid.uuid4().hex[:20]}"

    def drain(self) -> None:
        """First step of a shutdown, without blocking: refuse new work with 503 and fail
        every live stream and transcription, so that their responses end now instead of
        running on until uvicorn's graceful timeout cancels them."""
        self.admission.close()
        self.engine.drain()
        if self.asr_admission is not None:
            self.asr_admission.close()
        if self.asr is not None:
            self.asr.drain()

    def engine_snapshot(self) -> dict[str, Any]:
        stats = self.engine.stats
        return {
            "active": self.engine.active_streams,
            "queued": self.admission.queued,
            "rejected": self.admission.rejected,
            "chunks": stats.chunks,
            "acoustic_runs": stats.acoustic_runs,
            "failures": stats.failures,
            "busy": dict(stats.busy_s),
            "healthy": self.engine.healthy,
            "capacity": self.engine.capacity_streams(),
            "gated": self.admission.gated,
        }


async def _vox_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, VoxError)
    if not isinstance(exc, ClientError):
        log.error("request failed: %s", exc)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    body = {"error": {"message": str(exc.detail), "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def _client_left(request: Request, exc: Exception) -> Response:
    # A client that closes its connection before its body has arrived is routine, not a
    # server failure: no traceback; the access log's line (status 499) is the record.
    log.debug("client left during the request body of %s", request.url.path)
    return error_response(ClientClosed("the client closed the connection before its request body arrived"))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    body = {"error": {"message": "internal server error", "type": "server_error", "param": None, "code": "internal_error"}}
    return JSONResponse(body, status_code=500)


async def health(request: Request) -> Response:
    state: AppState = request.app.state.vox
    asr_ok = state.asr is None or state.asr.healthy
    if state.engine.healthy and asr_ok:
        return JSONResponse({"status": "ok"})
    dead = list(state.engine.dead_workers) + (list(state.asr.dead_workers) if state.asr else [])
    return JSONResponse({"status": "unhealthy", "dead_workers": dead}, status_code=503)


async def models(request: Request) -> Response:
    state: AppState = request.app.state.vox
    ids = [*SPEECH_MODELS, state.engine.model.name]
    if state.asr is not None:
        ids += [*ASR_MODELS, state.asr.name]
    return JSONResponse(model_list(ids, state.started_at))


def model_list(ids: list[str], started_at: float) -> dict[str, Any]:
    """The body of `GET /v1/models`."""
    created = int(started_at)
    data = [{"id": i, "object": "model", "created": created, "owned_by": "voxserve"} for i in ids]
    return {"object": "list", "data": data}


async def voices(request: Request) -> Response:
    state: AppState = request.app.state.vox
    return JSONResponse({"object": "list", "voices": voice_list(state.engine)})


def voice_list(engine: TTSEngine) -> list[dict[str, str | None]]:
    """The engine's own voices, then the OpenAI names and the voice each one maps to."""
    own: list[dict[str, str | None]] = [{"id": v.name, "name": v.name, "alias_of": None} for v in engine.voices]
    aliases: list[dict[str, str | None]] = [
        {"id": name, "name": name, "alias_of": engine.resolve_voice(name).name} for name in OPENAI_VOICES
    ]
    return own + aliases


async def metrics_endpoint(request: Request) -> Response:
    state: AppState = request.app.state.vox
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@contextlib.asynccontextmanager
async def running_state(
    config: ServerConfig,
    engine: TTSEngine,
    asr: ASREngine | None,
    publish: Callable[[AppState], None] | None = None,
) -> AsyncIterator[AppState]:
    """Start the engines, admission and pools, warm them up and yield their state; drain
    and stop everything on exit. The app's lifespan runs this, and so does each TTS
    replica of a Ray deployment (`voxserve.ray`). `publish` receives the state before
    the engines start, so that a shutdown during warm-up can already drain it."""
    tts = config.tts
    state = AppState(
        config=config,
        engine=engine,
        admission=Admission(
            tts.max_streams, tts.max_queue, tts.queue_timeout_s, gate=engine.keeping_up
        ),
        metrics=Metrics(lambda: state.engine_snapshot()),
        text_pool=BoundedPool(tts.text_workers, tts.max_streams + tts.max_queue, "text"),
        audio_pool=BoundedPool(tts.audio_workers, 4 * (tts.max_streams + tts.max_queue), "audio"),
    )
    if publish is not None:
        publish(state)
    engine.start()
    warmups = [asyncio.get_running_loop().run_in_executor(None, engine.warmup)]
    if asr is not None:
        state.asr = asr
        state.asr_pool = asr.audio_pool()
        state.asr_admission = Admission(
            config.asr.max_requests, config.asr.max_queue, config.asr.queue_timeout_s
        )
        uploads = state.uploads = UploadBudget(int(config.asr.max_buffered_upload_mb * 1024 * 1024))
        state.metrics.attach_asr(
            lambda: {**asr.snapshot(), "upload_bytes": uploads.held, "upload_refused": uploads.refused}
        )
        asr.start()
        warmups.append(asyncio.get_running_loop().run_in_executor(None, asr.warmup))
    await asyncio.gather(*warmups)
    lag = asyncio.create_task(state.metrics.watch_loop_lag())
    log.info("voxserve ready: voice %s, %d workers", engine.model.name, tts.workers)
    try:
        yield state
    finally:
        lag.cancel()
        state.drain()
        deadline = time.monotonic() + WORKER_JOIN_S
        engine.stop(timeout=WORKER_JOIN_S)
        state.text_pool.shutdown()
        state.audio_pool.shutdown()
        if asr is not None and state.asr_pool is not None:
            asr.stop(timeout=max(0.0, deadline - time.monotonic()))
            state.asr_pool.shutdown(wait=False, cancel_futures=True)


def create_app(
    config: ServerConfig, engine: TTSEngine | None = None, remote: Remote | None = None
) -> Starlette:
    """Build the app. The engine loads now (seconds); its threads start with the server.

    With `remote`, the app is a Ray Serve front end (`voxserve.ray`): it loads no model,
    and the same validation hands each request to a TTS or ASR replica.
    """
    if remote is not None:
        from voxserve.api.remote import create_remote_app

        return create_remote_app(config, remote)
    engine = engine or TTSEngine(config.tts)
    asr = ASREngine(config.asr) if config.asr.enabled else None
    holder: dict[str, AppState] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        def publish(state: AppState) -> None:
            holder["state"] = state
            app.state.vox = state

        async with running_state(config, engine, asr, publish):
            yield

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/openapi.json", openapi_endpoint, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/audio/voices", voices, methods=["GET"]),
        Route("/v1/audio/speech", speech, methods=["POST"]),
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", translations, methods=["POST"]),
        WebSocketRoute("/v1/audio/speech/stream", speech_stream),
        *playground_routes(),
    ]
    return assemble(config, routes, lifespan, lambda: holder["state"].metrics if holder else None)


def assemble(
    config: ServerConfig,
    routes: list[BaseRoute],
    lifespan: Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]],
    metrics: Callable[[], Metrics | None],
) -> Starlette:
    """The app around `routes`: error rendering, the request deadline, auth, the request
    id check, the Origin and Host allow-lists, request counting and the access log, the
    same for one machine and for a Ray front end. A request meets them in this order:
    access log, counting, Host, Origin, request id, auth, deadline; so every refusal is
    counted and logged, and a refused Host, origin or request id never reaches auth."""
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            VoxError: _vox_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_left,
            Exception: _unexpected,
        },
    )
    app.add_middleware(
        RequestDeadline,
        timeout_s=config.request_timeout_s,
        body_idle_timeout_s=config.body_idle_timeout_s,
        min_body_bytes_per_s=config.min_upload_bytes_per_s,
    )
    if config.api_key is not None:
        # Added first, so it sits inside RequestCounter and 401s are counted too.
        app.add_middleware(RequireKey, key=config.api_key, protect_metrics=config.metrics_require_key)
    app.add_middleware(CheckRequestId)
    app.add_middleware(CheckOrigin, allowed=config.allowed_origins)
    app.add_middleware(AllowedHosts, hosts=config.allowed_hosts)
    app.add_middleware(RequestCounter, metrics=metrics)
    app.add_middleware(AccessLog)
    return app
