"""What every WebSocket route shares to stay bounded: the cap on open sessions, the
message-size check and the per-session message rate.

`session_slot` admits a session under `WSConfig.max_sessions` (one more is accepted,
told why in an `error` event, and closed with 1013, "try again later") through
`Service.ws_session`, which counts it in `Service.ws_open` and, on Ray, holds a lease
from the cluster's keeper so that the cap counts every front end's sessions. It counts
the session in the `voxserve_ws_sessions` gauge until it ends, and accepts the
handshake within `send_timeout_s`. Routes only parse and speak their protocol. No engine
work here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxserve.api.auth import SUBPROTOCOL_PREFIX
from voxserve.api.errors import error_event
from voxserve.errors import ClientError, InvalidRequest
from voxserve.serving.service import Service

__all__ = [
    "ClientGone",
    "Message",
    "SessionEnd",
    "TokenBucket",
    "check_message",
    "message_size",
    "parse_event",
    "send_within",
    "session_slot",
]

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
"""An ASGI `websocket.receive` message."""


def parse_event(text: str) -> Any:
    """A client's text message as JSON. Whatever keeps `json.loads` from finishing is the
    client's `invalid_json` (a 400-class error event), never a server fault: malformed
    text, a number past Python's digit limit (ValueError), or nesting deeper than the
    parser's recursion allows (RecursionError). The message size limit bounds the work."""
    try:
        return json.loads(text)
    except RecursionError:
        reason = "it is nested too deeply; send a flat JSON object"
    except json.JSONDecodeError as exc:
        reason = f"{exc.msg} at position {exc.pos}"
    except ValueError:
        reason = "it has a number with too many digits"
    raise InvalidRequest(f"the message is not valid JSON: {reason}; send one JSON object per message", code="invalid_json")


class TokenBucket:
    """`rate` events a second on average, up to `burst` at once. Pure: the caller passes
    the time."""

    def __init__(self, rate: float, burst: int, now: float):
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = now

    def take(self, now: float) -> bool:
        """Spend one token; False (and nothing spent) when none is left."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


def message_size(message: Message, limit: int) -> int:
    """Bytes in a `websocket.receive` message's payload, exact up to `limit` (past it, any
    number over `limit`), without encoding a text that is plainly small or plainly big."""
    data = message.get("bytes")
    if data is not None:
        return len(data)
    text = message.get("text") or ""
    if len(text) > limit or 4 * len(text) <= limit:  # UTF-8 takes 1 to 4 bytes a character
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _subprotocol(ws: WebSocket) -> str | None:
    """The subprotocol to answer with: a browser fails a handshake that offered some and
    got none back. `realtime` when offered (OpenAI's browser clients offer it beside the
    key), else the first one offered that is not an API key: a key is never echoed."""
    offered = [
        p for p in ws.scope.get("subprotocols") or ()
        if isinstance(p, str) and not p.startswith(SUBPROTOCOL_PREFIX)
    ]
    if not offered:
        return None
    return "realtime" if "realtime" in offered else offered[0]


class SessionEnd(Exception):
    """Ends a session: an error event (when `code` is set), then a close frame whose
    reason is `reason`, else `code`. An idle session ends with a reason and no code: a
    normal close (1000) that clients reconnect after, where an error event would be fatal
    to some (LiveKit's realtime STT treats every `error` event as one)."""

    def __init__(self, close_code: int, message: str = "", code: str | None = None, reason: str | None = None):
        super().__init__(message or f"close {close_code}")
        self.close_code = close_code
        self.message = message
        self.code = code
        self.reason = reason or code or ""


class ClientGone(Exception):
    """The client left, or takes nothing of what is sent to it: nothing more can reach it."""


async def send_within(ws: WebSocket, message: Message, timeout: float, lock: asyncio.Lock | None = None) -> None:
    """Send one ASGI message (under `lock`, when given), or raise ClientGone when the
    client has left or takes nothing for `timeout` seconds (its TCP window stays shut)."""
    try:
        async with asyncio.timeout(timeout):
            if lock is None:
                await ws.send(message)
            else:
                async with lock:
                    await ws.send(message)
    except TimeoutError:
        raise ClientGone(f"the client took nothing for {timeout:g} s") from None
    except (WebSocketDisconnect, RuntimeError, OSError):  # Starlette's and uvicorn's "gone"
        raise ClientGone("the client left") from None


def check_message(message: Message, limit: int, bucket: TokenBucket, now: float, too_fast: str) -> None:
    """The message-size and message-rate limits: SessionEnd with 1009 past `limit` bytes,
    with 1008 (and `too_fast` as its message) when `bucket` has no token left."""
    size = message_size(message, limit)
    if size > limit:
        raise SessionEnd(1009, f"a message may hold at most {limit} bytes; this one has {size}", "message_too_large")
    if not bucket.take(now):
        raise SessionEnd(1008, too_fast, "rate_limited")


async def _refuse_busy(state: Service, ws: WebSocket) -> None:
    """Past `max_sessions`: accept, say why, close with 1013 (try again later)."""
    limit = state.config.ws.max_sessions
    log.warning("refused a WebSocket session: %d are open here, the limit is %d", state.ws_open, limit)
    message = f"the server has {limit} sessions open, its limit; try again later"
    error = ClientError(message, code="too_many_sessions")
    event = {**error_event(error), "code": "too_many_sessions", "message": message}
    with contextlib.suppress(Exception):
        async with asyncio.timeout(state.config.ws.send_timeout_s):
            await ws.accept(subprotocol=_subprotocol(ws))
            await ws.send_text(json.dumps(event))
            await ws.close(1013, "too many sessions")


@contextlib.asynccontextmanager
async def session_slot(state: Service, ws: WebSocket) -> AsyncIterator[bool]:
    """Admit and accept one session; yields False when it was refused or the client left
    during the handshake (nothing more to do), True while the session may run. A refused
    client is told why after its place is given back, so a slow one holds none."""
    async with contextlib.AsyncExitStack() as held:
        if await held.enter_async_context(state.ws_session()):
            state.metrics.ws_sessions.inc()
            held.callback(state.metrics.ws_sessions.dec)
            accepted = False
            with contextlib.suppress(Exception):
                async with asyncio.timeout(state.config.ws.send_timeout_s):
                    await ws.accept(subprotocol=_subprotocol(ws))
                    accepted = True
            yield accepted
            return
    await _refuse_busy(state, ws)
    yield False
