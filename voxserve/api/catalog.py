"""`GET /health`, `/metrics` and `/v1/models`: one set of handlers for both apps, over
what the running server reports (`voxserve.serving.catalog.ServerInfo`). They only turn
it into responses. The voices are `voxserve.api.voices`."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voxserve.serving.catalog import METRICS_CONTENT_TYPE, ServerInfo, metrics_text, model_list

__all__ = ["health", "metrics", "models"]


def _info(request: Request) -> ServerInfo:
    info: ServerInfo = request.app.state.vox
    return info


async def health(request: Request) -> Response:
    status = _info(request).health()
    return JSONResponse(status.body(), status_code=200 if status.ok else 503)


async def models(request: Request) -> Response:
    info = _info(request)
    return JSONResponse(model_list(info.models(), info.started_at, info.asr_catalog()))


async def metrics(request: Request) -> Response:
    return Response(metrics_text(_info(request).metrics), media_type=METRICS_CONTENT_TYPE)
