"""The composition root: `create_app` builds the engines' state (or a Ray front end's),
the lifespan that starts and stops it, the route table and the middleware stack.

It imports the routers; no router imports it. Handlers read the state that the lifespan
publishes on `app.state.vox` (`voxserve.serving.state.AppState`). Everything CPU-heavy is
elsewhere: the engine's threads, the text pool and the audio pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from voxserve.api.realtime import realtime
from voxserve.api.remote import Remote, create_remote_app
from voxserve.api.routes import route_table
from voxserve.api.speech import speech
from voxserve.api.stack import assemble
from voxserve.api.transcriptions import transcriptions, translations
from voxserve.api.ws import speech_stream
from voxserve.config import ServerConfig
from voxserve.engine.asr import ASREngine
from voxserve.engine.tts import TTSEngine
from voxserve.serving.state import AppState, running_state

__all__ = ["create_app"]


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
    asr = ASREngine(config.asr, cores=engine.cores) if config.asr.enabled else None
    holder: dict[str, AppState] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        def publish(state: AppState) -> None:
            holder["state"] = state
            app.state.vox = state

        async with running_state(config, engine, asr, publish):
            yield

    routes = route_table(speech, transcriptions, translations, speech_stream, realtime)
    return assemble(config, routes, lifespan, lambda: holder["state"].metrics if holder else None)
