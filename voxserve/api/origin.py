"""Which web pages may use this server: the `Origin` check, for WebSockets and for
every request that can change something.

CORS does not protect a server from being *used* by other pages, only from being read
by them:
- a browser lets any page open a WebSocket to any server, including one on the visitor's
  own machine or network (cross-site WebSocket hijacking);
- a page may send a "simple" cross-origin POST (a form: `multipart/form-data`, for
  example an upload to `/v1/audio/transcriptions`) without asking first; it cannot read
  the answer, but the server does the work.

What the browser does send in both cases is the page's origin, which a page cannot
forge. `CheckOrigin` checks it on every WebSocket handshake and on every HTTP request
whose method is not GET, HEAD or OPTIONS:

- no `Origin` header: not a browser (a script, an SDK, a server), allowed. Auth, when
  configured, still applies;
- the server's own origin: `Origin`'s host[:port] equals the `Host` header (the scheme is
  not compared: behind a TLS proxy the server cannot know its public scheme);
- an origin in `ServerConfig.allowed_origins` (`--allowed-origins`), compared as scheme,
  host and port (`https://app.example.com` means port 443); `*` allows every origin, and
  `null` the opaque origin of sandboxed frames and `file:` pages;
- anything else, `null` included, is refused: a WebSocket handshake with HTTP 403 before
  it completes, an HTTP request with 403 `origin_not_allowed` in the OpenAI error shape,
  before its body is read. The server logs one line for each.

Pure parsing plus one plain ASGI middleware; no state.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from voxserve.api.errors import error_response
from voxserve.errors import Forbidden

__all__ = ["CheckOrigin", "OriginPolicy", "origin_policy"]

log = logging.getLogger(__name__)

_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
_Origin = tuple[str, str, int | None]
"""(scheme, host, port): lower case, the port filled in for known schemes."""


def _parse_origin(value: str) -> _Origin | None:
    """A serialized origin (`scheme://host[:port]`), or None when it is not one."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    scheme = parts.scheme.lower()
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS.get(scheme)


def _parse_host(value: str) -> tuple[str, int | None] | None:
    """A `Host` header value (`name[:port]`, `[v6]:port`), or None when it is not one."""
    try:
        parts = urlsplit("//" + value.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.path or parts.query or parts.fragment or parts.username is not None:
        return None
    return parts.hostname.lower(), port


class OriginPolicy:
    """The allow-list: the server's own origin, plus `allowed` (`*` for any)."""

    def __init__(self, allowed: Iterable[str] = ()):
        entries = [a.strip() for a in allowed if a.strip()]
        self.any = "*" in entries
        self.null = "null" in entries
        self.origins: set[_Origin] = set()
        for entry in entries:
            if entry in ("*", "null"):
                continue
            parsed = _parse_origin(entry)
            if parsed is None:
                raise ValueError(
                    f"allowed origin {entry!r} is not an origin; write it as scheme://host[:port], "
                    "e.g. https://app.example.com, or * for any"
                )
            self.origins.add(parsed)

    def refusal(self, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
        """Why a handshake with these headers may not open a WebSocket; None when it may."""
        origins = [v for k, v in headers if k.lower() == b"origin"]
        hosts = [v for k, v in headers if k.lower() == b"host"]
        if not origins:
            return None
        if len(origins) > 1:
            return "several Origin headers"
        raw = origins[0].decode("latin-1")
        if self.any:
            return None
        if raw.strip().lower() == "null":
            return None if self.null else "the opaque origin null is not allowed"
        origin = _parse_origin(raw)
        if origin is None:
            return "the Origin header is not an origin"
        if origin in self.origins:
            return None
        host = _parse_host(hosts[0].decode("latin-1")) if len(hosts) == 1 else None
        if host is not None:
            scheme, name, port = origin
            host_port = host[1] if host[1] is not None else _DEFAULT_PORTS.get(scheme)
            if (name, port) == (host[0], host_port):
                return None
        return "the origin is neither this server's own nor in --allowed-origins"


@functools.lru_cache(maxsize=16)
def origin_policy(allowed: tuple[str, ...]) -> OriginPolicy:
    """The policy for `ServerConfig.allowed_origins` (built once per distinct list)."""
    return OriginPolicy(allowed)


def _shown(value: bytes) -> str:
    """A header value fit for a log line: escaped, and cut to a sane length."""
    text = value.decode("latin-1")
    return ascii(text[:200] + ("..." if len(text) > 200 else ""))


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class CheckOrigin:
    """Refuses WebSocket handshakes and state-changing HTTP requests from web pages whose
    origin is not allowed; everything else passes untouched."""

    def __init__(self, app: Any, allowed: tuple[str, ...]):
        self.app = app
        self.policy = origin_policy(allowed)  # raises ValueError for a bad entry, at start-up

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "websocket" or (kind == "http" and scope.get("method") not in _SAFE_METHODS):
            headers = scope.get("headers", ())
            reason = self.policy.refusal(headers)
            if reason is not None:
                _log_refusal(scope, headers, reason)
                if kind == "websocket":
                    # Closing before the handshake is accepted answers it with 403.
                    await send({"type": "websocket.close", "code": 1008, "reason": "origin not allowed"})
                    return
                error = Forbidden(
                    f"requests from this web page's origin are refused ({reason}); serve the page "
                    "from this server, or start the server with --allowed-origins listing it",
                    param="origin",
                )
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _log_refusal(scope: dict[str, Any], headers: Iterable[tuple[bytes, bytes]], reason: str) -> None:
    values = dict(headers)
    log.warning(
        "refused a %s on %s from Origin %s (Host %s): %s",
        "WebSocket" if scope["type"] == "websocket" else str(scope.get("method")),
        _shown(str(scope.get("path", "")).encode("utf-8", "replace")),
        _shown(values.get(b"origin", b"")), _shown(values.get(b"host", b"")), reason,
    )
