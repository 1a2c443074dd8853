"""The app around a route table: error rendering and the middleware stack, the same for
one machine and for a Ray front end (`assemble`). It knows no route and no state.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from voxserve.api.access_log import AccessLog
from voxserve.api.auth import RequireKey
from voxserve.api.deadline import RequestDeadline
from voxserve.api.errors import error_response, status_error
from voxserve.api.hosts import AllowedHosts
from voxserve.api.metrics import RequestCounter
from voxserve.api.origin import CheckOrigin
from voxserve.api.request_id import CheckRequestId
from voxserve.config import ServerConfig
from voxserve.errors import ClientClosed, ClientError, ServerError, VoxError
from voxserve.serving.metrics import Metrics

__all__ = ["assemble"]

log = logging.getLogger("voxserve.api.app")


async def _vox_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, VoxError)
    if not isinstance(exc, ClientError):
        log.error("request failed: %s", exc)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(status_error(exc.status_code, str(exc.detail)), dict(exc.headers or {}))


async def _client_left(request: Request, exc: Exception) -> Response:
    # A client that closes its connection before its body has arrived is routine, not a
    # server failure: no traceback; the access log's line (status 499) is the record.
    log.debug("client left during the request body of %s", request.url.path)
    return error_response(ClientClosed("the client closed the connection before its request body arrived"))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ServerError("internal server error"))


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
