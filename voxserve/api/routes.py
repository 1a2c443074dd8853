"""The one route table, for the app on one machine and for a Ray front end.

Both serve the same paths with the same methods and the same catalog, OpenAPI and
playground handlers; each app passes the handlers that reach its engines (here, or on
Ray replicas) and, where it has one, the speech WebSocket.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from voxserve.api import batch, catalog, diarization, voices
from voxserve.api.openapi import openapi_endpoint
from voxserve.api.playground import playground_routes
from voxserve.api.streaming import StreamResponse

__all__ = ["route_table"]

Endpoint = Callable[[Request], Awaitable[Response | StreamResponse]]


def route_table(
    speech: Endpoint,
    transcriptions: Endpoint,
    translations: Endpoint,
    speech_stream: Callable[[WebSocket], Awaitable[None]] | None = None,
    realtime: Callable[[WebSocket], Awaitable[None]] | None = None,
) -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        Route("/health", catalog.health, methods=["GET"]),
        Route("/metrics", catalog.metrics, methods=["GET"]),
        Route("/openapi.json", openapi_endpoint, methods=["GET"]),
        Route("/v1/models", catalog.models, methods=["GET"]),
        Route("/v1/audio/voices", voices.list_voices, methods=["GET"]),
        Route("/v1/audio/voices", voices.save_voice, methods=["POST"]),
        Route("/v1/audio/voices/{voice_id}", voices.delete_voice, methods=["DELETE"]),
        Route("/v1/audio/speech", speech, methods=["POST"]),
        Route("/v1/audio/speech/batch", batch.speech_batch, methods=["POST"]),
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", translations, methods=["POST"]),
        Route("/v1/audio/diarization", diarization.diarization, methods=["POST"]),
    ]
    if speech_stream is not None:
        routes.append(WebSocketRoute("/v1/audio/speech/stream", speech_stream))
    if realtime is not None:
        routes.append(WebSocketRoute("/v1/realtime", realtime))
    return [*routes, *playground_routes()]
