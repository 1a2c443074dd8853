"""API-key auth: a plain ASGI middleware (Starlette's `BaseHTTPMiddleware` breaks streaming).

With a key configured, every `/v1` route needs `Authorization: Bearer KEY` (the
WebSocket too: its refused handshake gets 403); `/health` stays open for probes, and
`/metrics` too unless `protect_metrics`. A missing or wrong key gets 401 in the OpenAI
error shape with `WWW-Authenticate: Bearer`, before the request reaches any handler. The key is compared in constant time and never logged or
echoed back.
"""

from __future__ import annotations

import hmac
from typing import Any

from voxserve.api.errors import error_response
from voxserve.errors import Unauthorized

__all__ = ["SUBPROTOCOL_PREFIX", "RequireKey"]

SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
"""A browser cannot set headers on a WebSocket: as with OpenAI's Realtime API, it may
offer the key as the subprotocol `openai-insecure-api-key.KEY` instead."""


def _subprotocol_key(scope: dict[str, Any]) -> bytes | None:
    for offered in scope.get("subprotocols") or ():
        if isinstance(offered, str) and offered.startswith(SUBPROTOCOL_PREFIX):
            return offered[len(SUBPROTOCOL_PREFIX) :].encode()
    return None

_USAGE = "send it in an Authorization header as 'Bearer YOUR_KEY'"


class RequireKey:
    def __init__(self, app: Any, key: str, protect_metrics: bool = False):
        if not key:
            raise ValueError("the API key must not be empty")
        self.app = app
        self._key = key.encode()
        self._protect_metrics = protect_metrics

    def _protected(self, path: str) -> bool:
        if path == "/v1" or path.startswith("/v1/"):
            return True
        return self._protect_metrics and path == "/metrics"

    def _refusal(self, scope: dict[str, Any]) -> Unauthorized | None:
        """Why this request may not pass, or None when it carries the key."""
        values = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
        if not values and scope["type"] == "websocket":
            offered = _subprotocol_key(scope)
            if offered is not None:
                if hmac.compare_digest(offered, self._key):
                    return None
                return Unauthorized(f"incorrect API key in the {SUBPROTOCOL_PREFIX}* subprotocol")
        if not values:
            return Unauthorized(f"this server needs an API key; {_USAGE}")
        if len(values) > 1:
            return Unauthorized(f"send one Authorization header, not {len(values)}; {_USAGE}")
        scheme, _, token = values[0].strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return Unauthorized(f"Authorization must use the Bearer scheme; {_USAGE}")
        if not hmac.compare_digest(token.strip(), self._key):
            return Unauthorized(f"incorrect API key; {_USAGE} with the server's key")
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or not self._protected(scope["path"]):
            await self.app(scope, receive, send)
            return
        error = self._refusal(scope)
        if error is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            # Closing before the handshake completes answers it with 403.
            await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
        else:
            await error_response(error, {"www-authenticate": "Bearer"})(scope, receive, send)
