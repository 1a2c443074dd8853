"""The composition root: `create_app` builds the engines' state (or a Ray front end's),
the lifespan that starts and stops it, the route table and the middleware stack.

It imports the routers; no router imports it. Handlers read the state that the lifespan
publishes on `app.state.vox` (`voxserve.serving.state.AppState`). Everything CPU-heavy is
elsewhere: the engine's threads, the text pool and the audio pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from voxserve.api.openapi import openapi_endpoint
from voxserve.api.playground import playground_routes
from voxserve.api.remote import Remote, create_remote_app
from voxserve.api.speech import speech
from voxserve.api.stack import assemble
from voxserve.api.transcriptions import transcriptions, translations
from voxserve.api.ws import speech_stream
from voxserve.config import ServerConfig
from voxserve.engine.asr import ASREngine
from voxserve.engine.tts import TTSEngine
from voxserve.serving.catalog import engines_health, model_ids, model_list, voice_list
from voxserve.serving.state import AppState, running_state

__all__ = ["create_app"]


async def health(request: Request) -> Response:
    state: AppState = request.app.state.vox
    status = engines_health(state.engine, state.asr)
    return JSONResponse(status.body(), status_code=200 if status.ok else 503)


async def models(request: Request) -> Response:
    state: AppState = request.app.state.vox
    ids = model_ids(state.engine.model.name, state.asr.name if state.asr is not None else None)
    return JSONResponse(model_list(ids, state.started_at))


async def voices(request: Request) -> Response:
    state: AppState = request.app.state.vox
    return JSONResponse({"object": "list", "voices": voice_list(state.engine)})


async def metrics_endpoint(request: Request) -> Response:
    state: AppState = request.app.state.vox
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    config: ServerConfig, engine: TTSEngine | None = None, remote: Remote | None = None
) -> Starlette:
    """Build the app. The engine loads now (seconds); its threads start with the server.

    With `remote`, the app is a Ray Serve front end (`voxserve.ray`): it loads no model,
    and the same validation hands each request to a TTS or ASR replica.
    """
    if remote is not None:
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
