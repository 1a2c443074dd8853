"""The HTTP front end of a scaled-out deployment: the same app, with the engines elsewhere.

`create_app(config, remote=...)` builds this: the one route table and the one set of
handlers (`voxserve.api.routes`), over a `voxserve.serving.remote.RemoteState` that hands
each validated request to an engine replica. As on one machine, an upload is read in
full, under the upload budget (`--asr-max-buffered-upload-mb`, 429 past it), before a
replica is asked for a slot. Every engine response names the replica that served it in
`x-voxserve-replica`. Both WebSocket routes are the same channels as on one machine,
over the same `Service` calls: a speech session cuts its text here and speaks on one TTS
replica, a live session runs on one ASR replica (`voxserve.serving.remote`). Nothing
here imports Ray, and no model loads in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from voxserve.api.realtime import realtime
from voxserve.api.routes import route_table
from voxserve.api.schemas import REPLICA_HEADER
from voxserve.api.speech import speech
from voxserve.api.stack import assemble
from voxserve.api.transcriptions import transcriptions, translations
from voxserve.api.ws import speech_stream
from voxserve.config import ServerConfig
from voxserve.serving.jobs import SpeechJob, TranscriptionJob, TTSCatalog
from voxserve.serving.remote import (
    ASRBackend,
    Remote,
    RemoteState,
    RemoteStream,
    TTSBackend,
    remote_state,
)

__all__ = [
    "REPLICA_HEADER",
    "ASRBackend",
    "Remote",
    "RemoteState",
    "RemoteStream",
    "SpeechJob",
    "TTSBackend",
    "TTSCatalog",
    "TranscriptionJob",
    "create_remote_app",
]


def create_remote_app(config: ServerConfig, remote: Remote) -> Starlette:
    """The front-end app. Its lifespan asks a TTS (and an ASR) replica what they serve."""
    holder: dict[str, RemoteState] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        catalog = await remote.tts.catalog()
        asr_catalog = await remote.asr.models() if remote.asr is not None else {}
        state = remote_state(config, remote, catalog, asr_catalog)
        holder["state"] = state
        app.state.vox = state
        lag = asyncio.create_task(state.metrics.watch_loop_lag())
        try:
            yield
        finally:
            lag.cancel()
            await state.close()

    routes = route_table(speech, transcriptions, translations, speech_stream, realtime)
    return assemble(config, routes, lifespan, lambda: holder["state"].metrics if holder else None)
