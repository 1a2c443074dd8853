"""The life of one WebSocket session, whatever its protocol: the wire it talks over and how
it ends. Shared by `WS /v1/realtime` (`voxserve.api.realtime`) and
`WS /v1/audio/speech/stream` (`voxserve.api.ws`), which supply only their protocol.

`Wire` is the connection under the limits of `voxserve.api.ws_limits`: every send within
`send_timeout_s`, one receive kept pending at a time, and every message taken checked for
size and rate. `serve` admits and accepts the session (`session_slot`), runs it, turns
the way it stopped into its end (a client gone, a `SessionEnd`, a lost replica, a failure
that is not a `VoxError`), and logs it. No engine work and no protocol here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxserve.api.ws_limits import (
    ClientGone,
    Message,
    SessionEnd,
    TokenBucket,
    check_message,
    send_within,
    session_slot,
)
from voxserve.errors import ClientError, ReplicaLost, ServerError, VoxError
from voxserve.serving.service import Service

__all__ = ["Session", "Wire", "end_error", "idle_end", "serve"]

_DISCONNECT: Message = {"type": "websocket.disconnect", "code": 1006}


class Wire:
    """One accepted WebSocket: sends under one lock, each within `send_timeout_s` (else
    ClientGone), and a pending receive whose message `take` checks against
    `max_message_bytes` and `messages_per_s` (bursts of `message_burst`); `too_fast` is
    the rate limit's message."""

    def __init__(
        self,
        ws: WebSocket,
        send_timeout_s: float,
        max_message_bytes: int,
        messages_per_s: float,
        message_burst: int,
        too_fast: str,
    ):
        self.ws = ws
        self.loop = asyncio.get_running_loop()
        self.quiet_since = self.loop.time()
        """When the last message was taken (or the wire was opened)."""
        self._send_timeout_s = send_timeout_s
        self._lock = asyncio.Lock()
        self._max_bytes = max_message_bytes
        self._bucket = TokenBucket(messages_per_s, message_burst, self.quiet_since)
        self._too_fast = too_fast
        self._recv: asyncio.Future[Message] | None = None

    # -- sending ---------------------------------------------------------------------------
    async def send(self, message: Message) -> None:
        await send_within(self.ws, message, self._send_timeout_s, self._lock)

    async def send_event(self, event: dict[str, Any]) -> None:
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        await self.send({"type": "websocket.send", "text": text})

    async def send_bytes(self, data: bytes) -> None:
        await self.send({"type": "websocket.send", "bytes": data})

    async def close(self, code: int, reason: str = "") -> None:
        await self.send({"type": "websocket.close", "code": code, "reason": reason[:120]})

    # -- receiving -------------------------------------------------------------------------
    async def _receive(self) -> Message:
        try:
            return await self.ws.receive()
        except (WebSocketDisconnect, RuntimeError, OSError):  # Starlette's and uvicorn's "gone"
            return _DISCONNECT

    def receiving(self) -> asyncio.Future[Message]:
        """The pending receive: one at a time, so waiting for something else never loses a
        message, and a client that leaves is noticed whoever waits."""
        if self._recv is None:
            self._recv = asyncio.ensure_future(self._receive())
        return self._recv

    def take(self) -> Message:
        """The message the done receive holds, under the size and rate limits (SessionEnd
        past them); ClientGone when the client left."""
        assert self._recv is not None and self._recv.done()
        message = self._recv.result()
        self._recv = None
        if message["type"] == "websocket.disconnect":
            raise ClientGone("the client left")
        self.quiet_since = self.loop.time()
        check_message(message, self._max_bytes, self._bucket, self.quiet_since, self._too_fast)
        return message

    def stop(self) -> None:
        """Cancel the pending receive."""
        if self._recv is not None:
            self._recv.cancel()


def end_error(message: str, code: str, param: str | None = None) -> VoxError:
    """The error a protocol-level `code` stands for: the server's fault for a failure or a
    lost replica, else the client's."""
    kind = ServerError if code in ("internal_error", ReplicaLost.code) else ClientError
    return kind(message, param=param, code=code)


def idle_end(idle_s: float, why: str) -> SessionEnd:
    """The idle timeout: a normal close with the reason `idle_timeout` and no error event."""
    return SessionEnd(1000, f"no message for {idle_s:g} s and {why}", reason="idle_timeout")


class Session(Protocol):
    """A protocol's side of one session, as `serve` runs it."""

    id: str
    ended: str
    """Why the session ended, for the log."""

    async def run(self) -> None:
        """Serve the session until it ends; a normal end returns, any other raises."""

    async def end(self, end: SessionEnd) -> None:
        """Tell the client why the session ends (an error event when `end.code` is set),
        then send the close frame; a client that is gone is not waited for."""

    async def stop(self) -> None:
        """Give back what the session holds (its tasks, the pending receive): always runs
        last."""

    def summary(self) -> str:
        """What the session did, for the log line: "3 turns"."""


async def serve(ws: WebSocket, open_session: Callable[[Service, WebSocket], Session], log: logging.Logger) -> None:
    """Run one session on `ws` under the server's session cap, and log how it ended with
    the route's `log`."""
    state: Service = ws.app.state.vox
    async with session_slot(state, ws) as accepted:
        if not accepted:
            return
        started = time.perf_counter()
        session = open_session(state, ws)
        try:
            await _run(session, log)
        finally:
            log.info(
                "session %s ended after %.1f s, %s: %s",
                session.id, time.perf_counter() - started, session.summary(), session.ended,
            )  # fmt: skip


async def _run(session: Session, log: logging.Logger) -> None:
    try:
        await session.run()
    except ClientGone as exc:
        session.ended = str(exc)
    except SessionEnd as end:
        session.ended = end.message or f"close {end.close_code}"
        await session.end(end)
    except ReplicaLost as exc:
        session.ended = exc.message
        await session.end(SessionEnd(1012, exc.message, exc.code))
    except Exception:
        log.exception("session %s failed", session.id)
        session.ended = "internal error"
        await session.end(SessionEnd(1011, "the session failed on the server; see its log", "internal_error"))
    finally:
        await session.stop()
