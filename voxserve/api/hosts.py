"""The `Host` allow-list (`--allowed-hosts`), against DNS rebinding.

A web page on `evil.example` can make its own name resolve to 127.0.0.1 and then call a
server on the visitor's machine as if it were same-origin: the browser still sends
`Host: evil.example`. With an allow-list set, only the listed names are answered, on every
route (`/health` included, so a probe must send a listed name too), and on the WebSocket:

- `api.example.com` matches that name on any port; `localhost:8000` only on that port;
- `*.example.com` matches any subdomain of example.com (not example.com itself);
- `*` matches any host, which is the same as an empty list (the default).

Names compare case-insensitively; IPv6 literals are written in brackets (`[::1]`). An
HTTP request with another `Host`, several or none gets 421 `invalid_host` in the OpenAI
error shape; a WebSocket handshake is refused (403) before it reaches the route.

Plain ASGI middleware; it reads only the scope's headers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from voxserve.api.errors import error_response
from voxserve.errors import MisdirectedRequest

__all__ = ["AllowedHosts", "HostPattern", "split_host"]


def split_host(value: str) -> tuple[str, str | None]:
    """`(name, port)` of a Host value: `"a.b:80"` -> `("a.b", "80")`, `"[::1]"` -> `("[::1]", None)`."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        rest = value[end + 1 :]
        return value[: end + 1], rest[1:] if rest.startswith(":") else None
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        return name, port
    return value, None


class HostPattern:
    """One allow-list entry: a name (or `*.suffix`) and an optional port."""

    def __init__(self, entry: str):
        name, port = split_host(entry)
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"not a host name for --allowed-hosts: {entry!r}")
        self.port = port
        self.suffix = name[1:] if name.startswith("*.") else None
        self.name = name

    def matches(self, name: str, port: str | None) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.suffix is not None:
            return name.endswith(self.suffix) and len(name) > len(self.suffix)
        return name == self.name


class AllowedHosts:
    def __init__(self, app: Any, hosts: Iterable[str]):
        self.app = app
        entries = [h for h in hosts if h.strip()]
        self.any = not entries or any(h.strip() == "*" for h in entries)
        self.patterns = [] if self.any else [HostPattern(h) for h in entries]

    def allowed(self, headers: list[tuple[bytes, bytes]]) -> bool:
        values = [value for name, value in headers if name == b"host"]
        if len(values) != 1:
            return False
        name, port = split_host(values[0].decode("latin-1"))
        return any(p.matches(name, port) for p in self.patterns)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.any or scope["type"] not in ("http", "websocket") or self.allowed(scope.get("headers", [])):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            # Closing before the handshake completes answers it with 403.
            await send({"type": "websocket.close", "code": 1008, "reason": "host not allowed"})
            return
        error = MisdirectedRequest(
            "this server does not answer for the host in the Host header; "
            "use one of its names (--allowed-hosts)",
            param="host",
        )
        await error_response(error)(scope, receive, send)
